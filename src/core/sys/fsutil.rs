//! The only place that renames, fsyncs, creates, removes or locks (`syncfs.rs` is the
//! one bulk alternative to its fsyncs).
//!
//! Every durable step of the protocol goes through one of these functions, so the
//! crash each one survives is written down once, here, and a later test build can swap
//! this module for a power-loss simulator (drop whatever was not fsynced) without
//! touching the protocol code. A `kill -9` keeps the page cache and cannot tell these
//! fsyncs from no fsyncs at all; only a power cut can, which is why they are explicit.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result};

/// Flushes a file's data and metadata to stable storage (`fsync`, not `fdatasync`: the
/// cost is the same for the new files and appends this program makes, and it needs no
/// argument about which metadata a reader depends on).
///
/// Survives: a power cut right after the caller journals that the file is complete.
pub(crate) fn sync_file(file: &File, path: &Path) -> Result<()> {
    file.sync_all()
        .with_context(|| format!("cannot fsync {}", path.display()))
}

/// Starts writing a file's dirty pages before `end` to disk, without waiting and
/// without making anything durable (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`,
/// Linux only; elsewhere nothing). A hint, so an error is ignored: only [`sync_file`]
/// makes a file durable, and it reports any error the write meets.
///
/// The page cache otherwise holds a checkpoint's files until its fsyncs, which then
/// write them all at once while the load waits (about 50 ms for the last checkpoint of
/// the 1 GB benchmark); written behind as they grow, they are mostly on disk by then.
/// RocksDB's `bytes_per_sync` does the same for its files.
pub(crate) fn start_writeback(file: &File, end: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let Ok(end) = libc::off64_t::try_from(end) else {
            return;
        };
        // SAFETY: the descriptor is `file`'s, open for the call's duration; the call
        // reads no memory of ours.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, end, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, end);
}

/// Makes a directory's entries (creations, renames, removals) durable.
///
/// Survives: a power cut after a rename or create that the journal already relies on;
/// without it the file's data is safe but the name pointing at it may vanish.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    let handle =
        File::open(dir).with_context(|| format!("cannot open directory {}", dir.display()))?;
    handle
        .sync_all()
        .with_context(|| format!("cannot fsync directory {}", dir.display()))
}

/// Threads [`sync_concurrently`] uses at most.
const SYNC_THREADS: usize = 16;

/// The fsync threads under an open-file limit of `limit`: each may hold a directory
/// open, and the sink keeps a quarter of the limit in staged files per transaction
/// (two in flight), so the threads take at most a sixteenth of it. Under a limit of 64,
/// 16 threads and two transactions' 32 files left the sink too few descriptors.
fn sync_threads(limit: Option<u64>) -> usize {
    limit.map_or(SYNC_THREADS, |limit| {
        usize::try_from(limit / 16).map_or(SYNC_THREADS, |n| n.clamp(1, SYNC_THREADS))
    })
}

/// Runs `sync` (an fsync, or several) on every item, from up to 16 threads at once, and
/// returns the results in the items' order, or the first error once every thread has
/// stopped (an error stops the others at their next item).
///
/// The filesystem joins fsyncs that wait at the same time into one journal commit and
/// one device flush (ext4's jbd2, XFS's log force, an NFS COMMIT in flight): one after
/// the other, the 3,700 fsyncs of a checkpoint of 1,200 partitions took 0.75 s
/// (`strace -T`). Nothing is made durable out of order: the caller waits for all of
/// them before the step that relies on them.
pub(crate) fn sync_concurrently<T: Sync, R: Send>(
    items: &[T],
    sync: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    each_concurrently(items, sync_threads(open_file_limit()), "ingest-fsync", sync)
}

/// Runs `each` on every item from up to `threads` threads (named `name`), and returns
/// the results in the items' order, or the first error once every thread has stopped
/// (an error stops the others at their next item).
pub(crate) fn each_concurrently<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    name: &str,
    each: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let threads = items.len().min(threads);
    if threads <= 1 {
        return items.iter().map(&each).collect();
    }
    let (next, failed) = (AtomicUsize::new(0), AtomicBool::new(false));
    let work = || {
        let mut done = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            match each(item) {
                Ok(r) => done.push((i, r)),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(done)
    };
    let outcomes: Vec<Result<Vec<(usize, R)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads)
            .filter_map(|_| {
                // A thread the system refuses only means fewer at once.
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(scope, work)
                    .ok()
            })
            .collect();
        let mut outcomes = vec![work()];
        for handle in handles {
            outcomes.push(
                handle
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("an {name} thread panicked"))),
            );
        }
        outcomes
    });
    let mut results: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    for outcome in outcomes {
        for (i, r) in outcome? {
            results[i] = Some(r);
        }
    }
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| anyhow::anyhow!("an item of {name} was skipped")))
        .collect()
}

/// The cores this process may run on (1 if unknown).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Creates `dir` and any missing parents, fsyncing each parent that gained an entry.
///
/// Survives: a power cut that would otherwise keep a staged file's data but lose the
/// directory that names it (docs/ARCHITECTURE.md, durability rules: every new directory
/// is fsynced in its parent).
pub(crate) fn create_dir_all_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() {
            create_dir_all_durable(parent)?;
        }
    }
    if !create_dir_unsynced(dir)? {
        return Ok(());
    }
    // The directory exists, its name is not yet durable: a crash here leaves a directory
    // that a later process finds and must not trust (see `sync_ancestors`).
    crate::core::sys::failpoint::hit("mkdir.after");
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Creates every directory of `dirs` (and their missing parents) below `root`, then
/// fsyncs, all at once, every directory that names one of them: each strict ancestor of
/// each, up to and including `root`. When it returns, every directory of `dirs` can be
/// reached from `root` after a power cut; `root`'s own name is the caller's (made
/// durable when the run began).
///
/// Survives: a power cut after a file is renamed into a new directory and that directory
/// is fsynced. The rename is then durable (the staged name is gone), and if the new
/// directory's own name in its parent were not, the file would be in neither place
/// (docs/ARCHITECTURE.md: a new directory is durable in its parent before anything is
/// renamed into it). The directories are fsynced together, not top down or bottom up, since none of
/// these fsyncs needs another to come first: only the rename must wait for them all. A
/// directory that already exists is fsynced too: an earlier process may have made it and
/// crashed before fsyncing its parent, and nothing here can tell.
pub(crate) fn create_dirs_durable<'a>(
    dirs: impl IntoIterator<Item = &'a Path>,
    root: &Path,
) -> Result<()> {
    // Hashed, not ordered: paths compare component by component.
    let mut parents = std::collections::HashSet::new();
    // By the directory below `root` each is in (a partition's first column): the groups
    // are created side by side, a group's directories one after the other, parents
    // first. Creating a directory is CPU in the kernel (ext4 looks through the inode
    // table for a free inode), and directories in different parents do not wait on each
    // other's parent lock: the 4,040 new directories of a 4,000-partition load took
    // most of its commit on one core while the other idled.
    let mut groups: std::collections::BTreeMap<&OsStr, Vec<&Path>> = Default::default();
    for dir in dirs {
        let Ok(below) = dir.strip_prefix(root) else {
            anyhow::bail!("{} is not inside {}", dir.display(), root.display());
        };
        let top = below.iter().next().unwrap_or_default();
        groups.entry(top).or_default().push(dir);
        let mut ancestor = dir.parent();
        while let Some(a) = ancestor.filter(|a| a.starts_with(root)) {
            if !parents.insert(a.to_path_buf()) {
                break;
            }
            ancestor = a.parent();
        }
    }
    let groups: Vec<Vec<&Path>> = groups.into_values().collect();
    each_concurrently(&groups, cores(), "ingest-mkdir", |group| {
        group
            .iter()
            .try_for_each(|dir| create_dir_all_unsynced(dir))
    })?;
    let parents: Vec<_> = parents.into_iter().collect();
    sync_concurrently(&parents, |dir| sync_dir(dir))?;
    crate::core::sys::failpoint::hit("mkdir.synced.after");
    Ok(())
}

/// Creates `dir` and any missing parents without making their names durable; for
/// [`create_dirs_durable`], which fsyncs their parents before anything names a file in
/// them.
///
/// The `mkdir` comes first and its parents only when it says they are missing: on a
/// first load each directory is new, and a look before it cost two `statx` per
/// partition (8,000 of a 4,000-partition commit's 28,000).
fn create_dir_all_unsynced(dir: &Path) -> Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => {
            crate::core::sys::failpoint::hit("mkdir.after");
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(parent) => create_dir_all_unsynced(parent)?,
                None => {
                    return Err(e)
                        .with_context(|| format!("cannot create directory {}", dir.display()))
                }
            }
            if create_dir_unsynced(dir)? {
                crate::core::sys::failpoint::hit("mkdir.after");
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot create directory {}", dir.display())),
    }
}

/// Creates `dir` if it is missing (its parent must exist) without making its name
/// durable: the caller fsyncs the parent before anything durable names a file in it.
/// Returns whether this call created it.
///
/// For a directory created on a thread that must not wait on an fsync: the sink's
/// staging area of each checkpoint, whose parent preCommit fsyncs.
pub(crate) fn create_dir_unsynced(dir: &Path) -> Result<bool> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(false),
        Err(e) => Err(e).with_context(|| format!("cannot create directory {}", dir.display())),
    }
}

/// Fsyncs every directory from `dir`'s parent up to `root` (inclusive).
///
/// Survives: a directory created by an earlier process that crashed before fsyncing its
/// parent. `create_dir_all_durable` skips directories that already exist, so without
/// this a file published into such a directory could lose its whole path in a power cut.
pub(crate) fn sync_ancestors(dir: &Path, root: &Path) -> Result<()> {
    let mut current = dir.parent();
    while let Some(ancestor) = current {
        if ancestor.as_os_str().is_empty() || !ancestor.starts_with(root) {
            break;
        }
        sync_dir(ancestor)?;
        if ancestor == root {
            break;
        }
        current = ancestor.parent();
    }
    Ok(())
}

/// Makes a file that this process is about to act on durable, with its name: fsync of
/// the file and of its directory. A no-op for a file that does not exist.
///
/// Survives: a crash of the process that wrote the file (or renamed it into place)
/// after its `write` and before its `fsync`. The page cache still holds what it wrote,
/// so this process reads it; if this process then acted on it (published files, folded
/// the manifest) and the power failed before that old write reached the disk, the disk
/// would hold the consequences without their cause. docs/ARCHITECTURE.md: the journal is
/// fsynced before anything that depends on it happens, whoever wrote it.
pub(crate) fn settle(path: &Path) -> Result<()> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    sync_file(&file, path)?;
    sync_parent(path)
}

/// Fsyncs the directory that holds `path` (the current directory for a bare name).
///
/// Survives: a power cut that would lose `path`'s own name in its parent, when `path`
/// was created by an earlier process that may have crashed before fsyncing it.
pub(crate) fn sync_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => sync_dir(Path::new(".")),
    }
}

/// Refuses a symbolic link on the way from `root` down to `path` (inclusive); `root`
/// itself may be one (the table's own path is the user's to choose).
///
/// Survives: a hostile or mistaken entry in a shared table directory. Whoever can
/// create `TABLE/country=US -> /elsewhere` could otherwise steer a loader that runs with
/// more rights into writing (or an abort into deleting) wherever it points. The walk
/// stops at the first component that does not exist yet: this process makes the rest.
/// It checks what is there when the protocol step begins; the directories below the
/// table are this program's own, so nothing but a deliberate race can swap one later.
pub(crate) fn refuse_symlinks(root: &Path, path: &Path) -> Result<()> {
    Links::default().refuse(root, path)
}

/// [`refuse_symlinks`] over many paths, each directory looked at once: a commit's 4,000
/// partitions share 40 parents, and a look at each partition's path took 19 ms of the
/// commit's thread.
#[derive(Default)]
pub(crate) struct Links {
    /// Each path looked at, and whether it was there.
    seen: std::collections::HashMap<std::path::PathBuf, bool>,
}

impl Links {
    /// Fails if a component of `path` below `root` is a symbolic link.
    pub(crate) fn refuse(&mut self, root: &Path, path: &Path) -> Result<()> {
        let Ok(rel) = path.strip_prefix(root) else {
            anyhow::bail!(
                "{} is not inside the table {}",
                path.display(),
                root.display()
            );
        };
        let mut at = root.to_path_buf();
        for component in rel.components() {
            at.push(component);
            let there = match self.seen.get(&at) {
                Some(&there) => there,
                None => {
                    let there = match fs::symlink_metadata(&at) {
                        Ok(meta) if meta.file_type().is_symlink() => {
                            let target = fs::read_link(&at)
                                .map(|t| t.display().to_string())
                                .unwrap_or_else(|_| "?".into());
                            anyhow::bail!(
                                "refusing to follow the symbolic link {} (to {target}) inside the table {}: \
                                 ingest writes only beneath the table; remove the link",
                                at.display(),
                                root.display()
                            );
                        }
                        Ok(_) => true,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                        Err(e) => {
                            return Err(e).with_context(|| format!("cannot stat {}", at.display()))
                        }
                    };
                    self.seen.insert(at.clone(), there);
                    there
                }
            };
            if !there {
                // Nothing below a missing directory to follow.
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Creates a new file for staged output; fails if the name is taken.
pub(crate) fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))
}

/// Reopens a staged file to append to it (after the open-file cap closed it).
pub(crate) fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("cannot reopen {}", path.display()))
}

/// Opens a closed staged file again only to fsync it: on Linux an fsync through any
/// descriptor flushes the file's dirty pages.
pub(crate) fn open_for_sync(path: &Path) -> Result<File> {
    File::open(path).with_context(|| format!("cannot reopen {} to fsync it", path.display()))
}

/// Outcome of publishing one staged file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Published {
    /// The rename happened now.
    Renamed,
    /// The staged file is gone and the destination exists: an earlier attempt renamed it.
    AlreadyThere,
}

/// Renames `from` to `to` without ever replacing an existing `to`.
///
/// `renameat2(RENAME_NOREPLACE)` is atomic: after a crash exactly one of the two names
/// exists. Filesystems without it get `link` + `unlink`, which is also never-clobbering
/// but can leave both names after a crash; that case is recognised (same inode) and
/// finished. The caller fsyncs the destination directory afterwards: a rename that is
/// not fsynced can be undone by a power cut.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> Result<Published> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => return Ok(Published::Renamed),
        Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => {}
        Err(rustix::io::Errno::EXIST) => return existing_destination(from, to),
        Err(rustix::io::Errno::NOENT) if !from.exists() && to.exists() => {
            return Ok(Published::AlreadyThere)
        }
        Err(e) => {
            return Err(io::Error::from(e))
                .with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))
        }
    }
    match fs::hard_link(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return existing_destination(from, to)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !from.exists() && to.exists() => {
            return Ok(Published::AlreadyThere)
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot link {} to {}", from.display(), to.display()))
        }
    }
    fs::remove_file(from).with_context(|| format!("cannot remove {}", from.display()))?;
    Ok(Published::Renamed)
}

/// Swaps two directories atomically with `renameat2(RENAME_EXCHANGE)`: every lookup of
/// either path finds the old directory or the new one, never neither. The caller fsyncs
/// both parents; until then a power cut may undo the swap (recovery then redoes it).
pub(crate) fn exchange(a: &Path, b: &Path) -> Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE)
        .map_err(io::Error::from)
        .with_context(|| format!("cannot exchange {} with {}", a.display(), b.display()))
}

/// Renames a directory to a name that must not exist (`renameat2(RENAME_NOREPLACE)`);
/// no fallback: the callers have checked that the filesystem has `renameat2`.
pub(crate) fn rename_dir_noreplace(from: &Path, to: &Path) -> Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE)
        .map_err(io::Error::from)
        .with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))
}

/// The inode number of a path, or `None` when nothing has that name.
pub(crate) fn inode(path: &Path) -> Result<Option<u64>> {
    use std::os::unix::fs::MetadataExt;
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta.ino())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot stat {}", path.display())),
    }
}

/// Both names exist: fine only if they are one file (a link + unlink cut in half).
fn existing_destination(from: &Path, to: &Path) -> Result<Published> {
    use std::os::unix::fs::MetadataExt;
    let a = fs::metadata(from).with_context(|| format!("cannot stat {}", from.display()))?;
    // Not followed: a link planted at the name is a different file, never the staged one
    // (whose name would then be removed, leaving its rows reachable only through it).
    let b = fs::symlink_metadata(to).with_context(|| format!("cannot stat {}", to.display()))?;
    if a.dev() == b.dev() && a.ino() == b.ino() {
        fs::remove_file(from).with_context(|| format!("cannot remove {}", from.display()))?;
        return Ok(Published::AlreadyThere);
    }
    anyhow::bail!(
        "refusing to overwrite {}: a different file already has that name (staged copy kept at {})",
        to.display(),
        from.display()
    )
}

/// Replaces `path` with `bytes` atomically: temp file, fsync, rename, fsync directory.
///
/// Survives: a crash at any instant leaves either the old content or the new, whole.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .context("a state file needs a parent directory")?;
    let mut tmp_name = path
        .file_name()
        .context("a state file needs a name")?
        .to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    sync_file(&file, &tmp)?;
    fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    sync_dir(dir)
}

/// Removes a directory tree this run owns, then makes the removal durable.
///
/// A removal that a power cut undoes is harmless (recovery removes it again), so the
/// fsync is for tidiness of what the next run lists, not for correctness.
pub(crate) fn remove_dir_all_durable(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", dir.display())),
    }
    match dir.parent() {
        Some(parent) if parent.is_dir() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Removes a directory if it is empty and exists (another writer's files may still be
/// in it: then it stays), then makes the removal durable.
pub(crate) fn remove_dir_if_empty_durable(dir: &Path) -> Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            return Ok(())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", dir.display())),
    }
    match dir.parent() {
        Some(parent) if parent.is_dir() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Removes one file if it exists.
pub(crate) fn remove_file_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

/// Shortens a journal to its last valid record, durably, so the torn tail of a crash
/// is never mistaken for the start of the next record.
pub(crate) fn truncate_durable(file: &File, path: &Path, len: u64) -> Result<()> {
    file.set_len(len)
        .with_context(|| format!("cannot truncate {}", path.display()))?;
    sync_file(file, path)
}

/// Why a lock could not be taken.
pub(crate) enum LockError {
    /// Another process holds it; its note (pid, start time) is attached.
    Held(String),
    /// Any other failure.
    Other(anyhow::Error),
}

/// Takes an exclusive OS lock on `path` without waiting, then writes `note` into it.
///
/// The OS lock (flock) dies with the process, so a `kill -9` never leaves a stale lock.
pub(crate) fn try_lock(path: &Path, note: &str) -> std::result::Result<File, LockError> {
    use fs2::FileExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot open lock file {}", path.display()))
        .map_err(LockError::Other)?;
    if let Err(e) = file.try_lock_exclusive() {
        if e.kind() == io::ErrorKind::WouldBlock
            || e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
        {
            let holder = fs::read_to_string(path).unwrap_or_default();
            return Err(LockError::Held(holder.trim().to_string()));
        }
        return Err(LockError::Other(
            anyhow::Error::new(e).context(format!("cannot lock {}", path.display())),
        ));
    }
    // The note is informational (who holds the lock); it needs no fsync.
    let write_note = || -> io::Result<()> {
        file.set_len(0)?;
        (&file).write_all(note.as_bytes())
    };
    write_note()
        .with_context(|| format!("cannot write lock file {}", path.display()))
        .map_err(LockError::Other)?;
    Ok(file)
}

/// Takes an OS lock on the directory `dir` without waiting, shared or exclusive. A
/// directory holds no note: a lock held elsewhere is `Held("")`.
pub(crate) fn try_lock_dir(dir: &Path, exclusive: bool) -> std::result::Result<File, LockError> {
    let file = File::open(dir)
        .with_context(|| format!("cannot open {} to lock it", dir.display()))
        .map_err(LockError::Other)?;
    let taken = if exclusive {
        fs2::FileExt::try_lock_exclusive(&file)
    } else {
        fs2::FileExt::try_lock_shared(&file)
    };
    match taken {
        Ok(()) => Ok(file),
        Err(e)
            if e.kind() == io::ErrorKind::WouldBlock
                || e.raw_os_error() == fs2::lock_contended_error().raw_os_error() =>
        {
            Err(LockError::Held(String::new()))
        }
        Err(e) => Err(LockError::Other(
            anyhow::Error::new(e).context(format!("cannot lock {}", dir.display())),
        )),
    }
}

/// Takes an exclusive OS lock on `path`, waiting at most 30 s for a holder that keeps it
/// only for a moment (the table contract's check); fails after that rather than hang.
pub(crate) fn lock_wait(path: &Path) -> Result<File> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match try_lock(path, "") {
            Ok(file) => return Ok(file),
            Err(LockError::Held(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(LockError::Held(holder)) => {
                anyhow::bail!("{} stayed locked for 30 s ({holder})", path.display())
            }
            Err(LockError::Other(e)) => return Err(e),
        }
    }
}

/// Raises the soft limit on open files to the hard limit, as databases do: a checkpoint
/// keeps one staged file open per partition it touches.
pub(crate) fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        // Best effort: the old limit still works for loads with fewer partitions.
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// Grows this process's descriptor table to hold `slots` descriptors now, while it has
/// one thread. The kernel grows the table as descriptors are opened, doubling it; once the
/// process has threads, each growth waits for an RCU grace period
/// (`expand_fdtable`'s `synchronize_rcu`), and a checkpoint of 4,000 partitions opening a
/// staged file for each stalled its sink threads 60 ms in all that way
/// (`perf record -e sched:sched_switch`). A table of 8,192 takes 64 KiB. Best effort:
/// past the open-file limit, or on failure, the table grows as it did.
pub(crate) fn reserve_descriptor_table(slots: u64) {
    let Some(highest) = open_file_limit()
        .unwrap_or(u64::MAX)
        .min(slots)
        .checked_sub(1)
    else {
        return;
    };
    let Ok(highest) = i32::try_from(highest) else {
        return;
    };
    if let Ok(root) = File::open("/") {
        // A duplicate at `highest` or above makes the table that large; closing it
        // leaves the table so (tables never shrink).
        drop(rustix::io::fcntl_dupfd_cloexec(&root, highest));
    }
}

/// The soft limit on open files (`None`: unlimited), after [`raise_open_file_limit`].
pub(crate) fn open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptor table's size, as `/proc/self/status` gives it.
    #[cfg(target_os = "linux")]
    fn descriptor_table_size() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .expect("an FDSize line");
        line.trim().parse().expect("a number")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_descriptor_table_is_grown_at_once_within_the_limit() {
        let limit = open_file_limit().unwrap_or(u64::MAX);
        let want = limit.min(8192);
        reserve_descriptor_table(8192);
        assert!(
            descriptor_table_size() >= want,
            "FDSize {} after reserving {want}",
            descriptor_table_size()
        );
        // Nothing is left open: the next descriptor is a low one.
        let file = File::open("/").expect("/");
        use std::os::fd::AsRawFd;
        assert!(file.as_raw_fd() < 1024, "{}", file.as_raw_fd());
    }

    #[test]
    fn fsync_threads_take_a_sixteenth_of_the_open_file_limit() {
        assert_eq!(sync_threads(None), SYNC_THREADS);
        assert_eq!(sync_threads(Some(1 << 20)), SYNC_THREADS);
        assert_eq!(sync_threads(Some(1024)), 16);
        assert_eq!(sync_threads(Some(64)), 4);
        assert_eq!(sync_threads(Some(8)), 1);
    }

    #[test]
    fn concurrent_syncs_return_every_result_in_the_items_order() {
        let none: [u64; 0] = [];
        assert!(sync_concurrently(&none, |&i| Ok(i))
            .expect("empty")
            .is_empty());
        assert_eq!(
            sync_concurrently(&[7u64], |&i| Ok(i * 2)).expect("one"),
            [14]
        );
        let items: Vec<u64> = (0..1000).collect();
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        let doubled = sync_concurrently(&items, |&i| {
            if let Ok(mut seen) = threads.lock() {
                seen.insert(std::thread::current().id());
            }
            // Long enough for every thread to take items.
            std::thread::sleep(std::time::Duration::from_micros(200));
            Ok(i * 2)
        })
        .expect("all");
        assert_eq!(doubled, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let threads = threads.lock().expect("no panic").len();
        assert!((2..=SYNC_THREADS).contains(&threads), "{threads} threads");
    }

    #[test]
    fn a_failed_sync_fails_the_whole_and_stops_the_rest() {
        let items: Vec<u64> = (0..10_000).collect();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let outcome = sync_concurrently(&items, |&i| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_micros(50));
            if i == 20 {
                anyhow::bail!("item {i} failed");
            }
            Ok(i)
        });
        let err = outcome.expect_err("one item failed");
        assert_eq!(err.to_string(), "item 20 failed");
        // Each thread stops at its next item: nowhere near all 10,000 were tried.
        let calls = calls.into_inner();
        assert!(calls < 1000, "{calls} calls");
    }

    #[test]
    fn directories_made_unsynced_are_made_with_their_parents() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("t/country=DE/dt=2026-11-28");
        create_dir_all_unsynced(&dir).expect("created");
        assert!(dir.is_dir());
        create_dir_all_unsynced(&dir).expect("found made");
        let file = root.path().join("t/file");
        std::fs::write(&file, b"x").expect("file");
        assert!(create_dir_all_unsynced(&file.join("below")).is_err());
    }

    #[test]
    fn links_are_refused_at_any_depth_with_each_directory_looked_at_once() {
        let root = tempfile::tempdir().expect("temp dir");
        let table = root.path().join("t");
        std::fs::create_dir_all(table.join("country=DE/b=1")).expect("dirs");
        std::fs::create_dir_all(root.path().join("elsewhere")).expect("elsewhere");
        std::os::unix::fs::symlink(root.path().join("elsewhere"), table.join("country=DE/b=2"))
            .expect("link planted");
        let mut links = Links::default();
        links
            .refuse(&table, &table.join("country=DE/b=1"))
            .expect("no link on the way");
        // The parent is known by now; the link below it is still found.
        let err = links
            .refuse(&table, &table.join("country=DE/b=2"))
            .expect_err("a link on the way");
        assert!(err.to_string().contains("symbolic link"), "{err:#}");
        // Below a directory that is not there, nothing is looked at again.
        links
            .refuse(&table, &table.join("country=FR/b=1"))
            .expect("nothing there");
        links
            .refuse(&table, &table.join("country=FR/b=2"))
            .expect("nothing there");
        // country=DE, its b=1, and country=FR: not FR's b=1 or b=2.
        assert_eq!(links.seen.len(), 3, "{:?}", links.seen);
        // A file where a directory goes cannot be looked through: an error, not "missing".
        std::fs::write(table.join("country=IT"), b"x").expect("file");
        let err = links
            .refuse(&table, &table.join("country=IT/b=1"))
            .expect_err("a file on the way");
        assert!(err.to_string().contains("cannot stat"), "{err:#}");
        assert!(refuse_symlinks(&table, &root.path().join("outside")).is_err());
    }

    #[test]
    fn a_directory_over_a_file_is_refused_and_the_file_kept() {
        let root = tempfile::tempdir().expect("temp dir");
        let file = root.path().join("country=DE");
        std::fs::write(&file, b"x").expect("file");
        let err = create_dir_all_unsynced(&file).expect_err("a file holds the name");
        assert!(
            err.to_string().contains("cannot create directory"),
            "{err:#}"
        );
        assert_eq!(std::fs::read(&file).expect("kept"), b"x");
    }

    #[test]
    fn a_link_at_the_destination_is_refused_even_to_the_staged_file_itself() {
        let root = tempfile::tempdir().expect("temp dir");
        let staged = root.path().join("part.csv.inprogress");
        std::fs::write(&staged, b"a\n1\n").expect("staged");
        let dest = root.path().join("part.csv");
        std::os::unix::fs::symlink(&staged, &dest).expect("link planted");
        let err = rename_noreplace(&staged, &dest).expect_err("a link holds the name");
        assert!(err.to_string().contains("refusing to overwrite"), "{err:#}");
        // The staged file keeps its rows and its name: nothing reaches them only
        // through the link.
        assert_eq!(std::fs::read(&staged).expect("kept"), b"a\n1\n");
        // A name already renamed (a crash's hard link) is still found the same file.
        std::fs::remove_file(&dest).expect("link removed");
        std::fs::hard_link(&staged, &dest).expect("linked");
        assert_eq!(
            rename_noreplace(&staged, &dest).expect("finished"),
            Published::AlreadyThere
        );
        assert!(!staged.exists());
    }

    #[test]
    fn an_unsynced_directory_is_created_and_then_found_made() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("000001");
        assert!(create_dir_unsynced(&dir).expect("created"));
        assert!(dir.is_dir());
        // The second sink of the same checkpoint finds it made.
        assert!(!create_dir_unsynced(&dir).expect("found made"));
        assert!(dir.is_dir());
    }

    #[test]
    fn an_unsynced_directory_is_refused_over_a_file_or_without_its_parent() {
        let root = tempfile::tempdir().expect("temp dir");
        let file = root.path().join("000001");
        fs::write(&file, b"not a directory").expect("file written");
        let err = create_dir_unsynced(&file).expect_err("a file holds the name");
        assert!(
            err.to_string().contains("cannot create directory"),
            "{err:#}"
        );
        assert!(file.is_file());
        let orphan = root.path().join("missing").join("000001");
        assert!(create_dir_unsynced(&orphan).is_err());
        assert!(!orphan.exists());
    }
}
