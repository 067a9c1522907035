//! A model of files and directory entries under one root, built by replaying a trace's
//! system calls, and the crash states a power cut can leave of it.
//!
//! The persistence model is the strict one of ALICE (OSDI'14) and LevelDB's
//! fault-injection env, as `DESIGN.md` states it:
//! - a write or truncation of a file is durable once an fsync of that file began after
//!   it returned;
//! - a directory operation (create, link, unlink, rename) once an fsync of the directory
//!   holding the new name began after it returned (a rename is one operation: kept or
//!   lost whole; an exchange holds a new name in both directories and needs both);
//! - `syncfs` or `sync` makes everything before it durable;
//! - a directory whose own entry is lost takes its subtree with it (the model keeps
//!   inodes apart from the names that reach them, so this needs no rule of its own).
//!
//! Any subset of the operations not yet durable may be lost, and a kept write may be
//! torn (only a prefix of it reached the disk).

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

use super::strace::{self, Syscall};

pub type Ino = usize;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<String, Ino>),
}

/// One state-changing operation on inodes.
#[derive(Debug, Clone)]
pub enum Op {
    /// `dir/name` now names `ino` (a create, mkdir or link).
    Link {
        dir: Ino,
        name: String,
        ino: Ino,
    },
    Unlink {
        dir: Ino,
        name: String,
    },
    /// Atomic: `from` loses the name, `to` gains it (replacing what it named).
    Rename {
        from: (Ino, String),
        to: (Ino, String),
        ino: Ino,
    },
    /// `RENAME_EXCHANGE`: the two names swap inodes.
    Exchange {
        a: (Ino, String),
        b: (Ino, String),
    },
    Write {
        ino: Ino,
        at: u64,
        data: Vec<u8>,
    },
    Truncate {
        ino: Ino,
        len: u64,
    },
    /// Makes earlier operations on `ino` durable.
    Fsync {
        ino: Ino,
    },
    /// Makes every earlier operation durable.
    SyncAll,
}

/// An operation with the trace lines where its call began and returned.
#[derive(Debug, Clone)]
pub struct Step {
    pub op: Op,
    pub start: usize,
    pub end: usize,
    /// The call, for reports.
    pub what: String,
}

/// Files and directories; inode 0 is the root (the work directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fs {
    pub nodes: Vec<Node>,
}

impl Fs {
    /// The root alone, holding `tree` (read from disk) under `name` if it exists.
    pub fn with_tree(root: &Path, name: &str) -> Fs {
        let mut fs = Fs {
            nodes: vec![Node::Dir(BTreeMap::new())],
        };
        let path = root.join(name);
        if path.exists() {
            let ino = fs.read_tree(&path);
            fs.dir_mut(0).insert(name.to_string(), ino);
        }
        fs
    }

    fn read_tree(&mut self, path: &Path) -> Ino {
        let meta = std::fs::symlink_metadata(path).expect("stat");
        if meta.is_dir() {
            let ino = self.add(Node::Dir(BTreeMap::new()));
            let mut names: Vec<_> = std::fs::read_dir(path)
                .expect("list")
                .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
                .collect();
            names.sort();
            for name in names {
                let child = self.read_tree(&path.join(&name));
                self.dir_mut(ino).insert(name, child);
            }
            ino
        } else {
            self.add(Node::File(std::fs::read(path).expect("read")))
        }
    }

    fn add(&mut self, node: Node) -> Ino {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn dir_mut(&mut self, ino: Ino) -> &mut BTreeMap<String, Ino> {
        match &mut self.nodes[ino] {
            Node::Dir(entries) => entries,
            Node::File(_) => panic!("inode {ino} is not a directory"),
        }
    }

    fn entry(&self, dir: Ino, name: &str) -> Option<Ino> {
        match self.nodes.get(dir)? {
            Node::Dir(entries) => entries.get(name).copied(),
            Node::File(_) => None,
        }
    }

    /// Applies `op`; a write is cut to its first `keep` bytes. Lenient where an earlier
    /// operation was lost (an unlink of a name that is not there does nothing).
    pub fn apply(&mut self, op: &Op, keep: Option<usize>) {
        match op {
            Op::Link { dir, name, ino } => {
                if let Node::Dir(entries) = &mut self.nodes[*dir] {
                    entries.insert(name.clone(), *ino);
                }
            }
            Op::Unlink { dir, name } => {
                if let Node::Dir(entries) = &mut self.nodes[*dir] {
                    entries.remove(name);
                }
            }
            Op::Rename { from, to, ino } => {
                if let Node::Dir(entries) = &mut self.nodes[from.0] {
                    if entries.get(&from.1) == Some(ino) {
                        entries.remove(&from.1);
                    }
                }
                if let Node::Dir(entries) = &mut self.nodes[to.0] {
                    entries.insert(to.1.clone(), *ino);
                }
            }
            Op::Exchange { a, b } => {
                let ia = self.entry(a.0, &a.1);
                let ib = self.entry(b.0, &b.1);
                for ((dir, name), ino) in [(a, ib), (b, ia)] {
                    if let Node::Dir(entries) = &mut self.nodes[*dir] {
                        match ino {
                            Some(ino) => entries.insert(name.clone(), ino),
                            None => entries.remove(name),
                        };
                    }
                }
            }
            Op::Write { ino, at, data } => {
                let data = &data[..keep.unwrap_or(data.len()).min(data.len())];
                if let Node::File(bytes) = &mut self.nodes[*ino] {
                    let at = *at as usize;
                    if bytes.len() < at + data.len() {
                        bytes.resize(at + data.len(), 0);
                    }
                    bytes[at..at + data.len()].copy_from_slice(data);
                }
            }
            Op::Truncate { ino, len } => {
                if let Node::File(bytes) = &mut self.nodes[*ino] {
                    bytes.resize(*len as usize, 0);
                }
            }
            Op::Fsync { .. } | Op::SyncAll => {}
        }
    }

    /// The tree under `root/name`, as (relative path, file bytes or `None` for a
    /// directory), sorted: what a crash state looks like, and how two are compared.
    pub fn listing(&self, name: &str) -> Vec<(String, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        if let Some(ino) = self.entry(0, name) {
            self.list_into(ino, name.to_string(), &mut out, 0);
        }
        out
    }

    /// Every directory under `root/name` with its inode, by relative path.
    pub fn dirs(&self, name: &str) -> Vec<(String, Ino)> {
        let mut out = Vec::new();
        let mut todo: Vec<(String, Ino)> = self
            .entry(0, name)
            .map(|i| (name.to_string(), i))
            .into_iter()
            .collect();
        while let Some((path, ino)) = todo.pop() {
            if let Node::Dir(entries) = &self.nodes[ino] {
                for (child, i) in entries {
                    todo.push((format!("{path}/{child}"), *i));
                }
                out.push((path, ino));
            }
        }
        out
    }

    fn list_into(
        &self,
        ino: Ino,
        path: String,
        out: &mut Vec<(String, Option<Vec<u8>>)>,
        depth: usize,
    ) {
        assert!(depth < 64, "a directory cycle at {path}");
        match &self.nodes[ino] {
            Node::File(bytes) => out.push((path, Some(bytes.clone()))),
            Node::Dir(entries) => {
                out.push((path.clone(), None));
                for (name, child) in entries {
                    self.list_into(*child, format!("{path}/{name}"), out, depth + 1);
                }
            }
        }
    }
}

/// A tree as [`Fs::listing`] gives it.
pub type Listing = Vec<(String, Option<Vec<u8>>)>;

/// Writes a listing under `root` (which must not hold its top entry).
pub fn materialise(root: &Path, listing: &[(String, Option<Vec<u8>>)]) {
    for (path, bytes) in listing {
        let at = root.join(path);
        match bytes {
            None => std::fs::create_dir(&at).expect("mkdir"),
            Some(bytes) => std::fs::write(&at, bytes).expect("write"),
        }
    }
}

/// The tree under `root/name` on disk, as [`Fs::listing`] gives it.
pub fn listing_on_disk(root: &Path, name: &str) -> Vec<(String, Option<Vec<u8>>)> {
    Fs::with_tree(root, name).listing(name)
}

#[derive(Clone, Copy)]
struct OpenFile {
    ino: Ino,
    pos: u64,
    append: bool,
}

/// Turns system calls into [`Step`]s, keeping the state every call saw (the page cache).
#[derive(Clone)]
pub struct Recorder {
    root: PathBuf,
    pub fs: Fs,
    /// The state before the first call.
    pub initial: Fs,
    pub steps: Vec<Step>,
    /// Open descriptors of the current process that reach the model.
    fds: HashMap<i64, OpenFile>,
}

impl Recorder {
    pub fn new(root: &Path, table: &str) -> Recorder {
        let fs = Fs::with_tree(root, table);
        Recorder {
            root: root.to_path_buf(),
            initial: fs.clone(),
            fs,
            steps: Vec::new(),
            fds: HashMap::new(),
        }
    }

    /// A new process: descriptors start afresh, the files stay as the last one left them.
    pub fn next_process(&mut self) {
        self.fds.clear();
    }

    /// The parent directory's inode and the last name of `path` (relative to `dirfd`),
    /// if that path lies under the root and its parent exists in the model.
    fn locate(&self, dirfd: &str, path: &str) -> Option<(Ino, String)> {
        let path = Path::new(path);
        let (mut ino, rel): (Ino, PathBuf) = if path.is_absolute() {
            (0, path.strip_prefix(&self.root).ok()?.to_path_buf())
        } else if dirfd == "AT_FDCWD" {
            (0, path.to_path_buf())
        } else {
            (
                self.fds.get(&dirfd.parse::<i64>().ok()?)?.ino,
                path.to_path_buf(),
            )
        };
        let parts: Vec<String> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let (last, dirs) = parts.split_last()?;
        for part in dirs {
            ino = self.fs.entry(ino, part)?;
        }
        matches!(self.fs.nodes[ino], Node::Dir(_)).then(|| (ino, last.clone()))
    }

    fn push(&mut self, op: Op, call: &Syscall) {
        self.fs.apply(&op, None);
        self.steps.push(Step {
            op,
            start: call.start,
            end: call.end,
            what: format!("{}({})", call.name, describe(&call.args)),
        });
    }

    fn fd(&self, arg: &str) -> Option<OpenFile> {
        self.fds.get(&arg.parse::<i64>().ok()?).copied()
    }

    /// Records one system call.
    pub fn record(&mut self, call: &Syscall) {
        let a = &call.args;
        let arg = |i: usize| a.get(i).map(String::as_str).unwrap_or("");
        match call.name.as_str() {
            "openat" | "open" | "creat" => {
                let (dirfd, path, flags) = match call.name.as_str() {
                    "openat" => (arg(0), arg(1), arg(2).to_string()),
                    "open" => ("AT_FDCWD", arg(0), arg(1).to_string()),
                    _ => ("AT_FDCWD", arg(0), "O_CREAT|O_WRONLY|O_TRUNC".to_string()),
                };
                let Some(path) = strace::path(path) else {
                    return;
                };
                let Some((dir, name)) = self.locate(dirfd, &path) else {
                    // The root itself (`.`), or a path outside the model.
                    if path == "." || Path::new(&path) == self.root {
                        self.fds.insert(
                            call.ret,
                            OpenFile {
                                ino: 0,
                                pos: 0,
                                append: false,
                            },
                        );
                    }
                    return;
                };
                let ino = match self.fs.entry(dir, &name) {
                    Some(ino) => ino,
                    None if flags.contains("O_CREAT") => {
                        let ino = self.fs.add(Node::File(Vec::new()));
                        self.push(Op::Link { dir, name, ino }, call);
                        ino
                    }
                    None => return,
                };
                if flags.contains("O_TRUNC")
                    && matches!(&self.fs.nodes[ino], Node::File(b) if !b.is_empty())
                {
                    self.push(Op::Truncate { ino, len: 0 }, call);
                }
                let append = flags.contains("O_APPEND");
                self.fds.insert(
                    call.ret,
                    OpenFile {
                        ino,
                        pos: 0,
                        append,
                    },
                );
            }
            "close" => {
                if let Ok(fd) = arg(0).parse::<i64>() {
                    self.fds.remove(&fd);
                }
            }
            "dup" | "dup2" | "dup3" | "fcntl" | "fcntl64" => {
                if (call.name.starts_with("fcntl") && !arg(1).starts_with("F_DUPFD"))
                    || call.ret < 0
                {
                    return;
                }
                if let Some(f) = self.fd(arg(0)) {
                    self.fds.insert(call.ret, f);
                }
            }
            "lseek" => {
                if let Ok(fd) = arg(0).parse::<i64>() {
                    if let Some(f) = self.fds.get_mut(&fd) {
                        f.pos = call.ret as u64;
                    }
                }
            }
            "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => {
                let Ok(fd) = arg(0).parse::<i64>() else {
                    return;
                };
                let Some(f) = self.fds.get(&fd).copied() else {
                    return;
                };
                let mut data = if call.name.ends_with('v') || call.name.ends_with("v2") {
                    strace::all_bytes(arg(1))
                } else {
                    strace::bytes(arg(1)).unwrap_or_default()
                };
                data.truncate(call.ret as usize);
                let size = match &self.fs.nodes[f.ino] {
                    Node::File(b) => b.len() as u64,
                    Node::Dir(_) => return,
                };
                let positional = call.name.starts_with('p');
                let at = if positional {
                    // The offset is the fourth argument of pwrite64 and pwritev alike.
                    arg(3).parse().unwrap_or(0)
                } else if f.append {
                    size
                } else {
                    f.pos
                };
                let len = data.len() as u64;
                if !positional {
                    if let Some(open) = self.fds.get_mut(&fd) {
                        open.pos = at + len;
                    }
                }
                if len > 0 {
                    self.push(
                        Op::Write {
                            ino: f.ino,
                            at,
                            data,
                        },
                        call,
                    );
                }
            }
            "ftruncate" => {
                let Some(f) = self.fd(arg(0)) else { return };
                let len = arg(1).parse().unwrap_or(0);
                self.push(Op::Truncate { ino: f.ino, len }, call);
            }
            "fsync" | "fdatasync" => {
                let Some(f) = self.fd(arg(0)) else { return };
                self.push(Op::Fsync { ino: f.ino }, call);
            }
            "syncfs" | "sync" => self.push(Op::SyncAll, call),
            "mkdir" | "mkdirat" => {
                let (dirfd, path) = if call.name == "mkdir" {
                    ("AT_FDCWD", arg(0))
                } else {
                    (arg(0), arg(1))
                };
                let Some(path) = strace::path(path) else {
                    return;
                };
                let Some((dir, name)) = self.locate(dirfd, &path) else {
                    return;
                };
                let ino = self.fs.add(Node::Dir(BTreeMap::new()));
                self.push(Op::Link { dir, name, ino }, call);
            }
            "link" | "linkat" => {
                let (from, to) = if call.name == "link" {
                    (("AT_FDCWD", arg(0)), ("AT_FDCWD", arg(1)))
                } else {
                    ((arg(0), arg(1)), (arg(2), arg(3)))
                };
                let (Some(fp), Some(tp)) = (strace::path(from.1), strace::path(to.1)) else {
                    return;
                };
                let (Some((fd, fname)), Some((dir, name))) =
                    (self.locate(from.0, &fp), self.locate(to.0, &tp))
                else {
                    return;
                };
                let Some(ino) = self.fs.entry(fd, &fname) else {
                    return;
                };
                self.push(Op::Link { dir, name, ino }, call);
            }
            "unlink" | "rmdir" | "unlinkat" => {
                let (dirfd, path) = if call.name == "unlinkat" {
                    (arg(0), arg(1))
                } else {
                    ("AT_FDCWD", arg(0))
                };
                let Some(path) = strace::path(path) else {
                    return;
                };
                let Some((dir, name)) = self.locate(dirfd, &path) else {
                    return;
                };
                self.push(Op::Unlink { dir, name }, call);
            }
            "rename" | "renameat" | "renameat2" => {
                let (from, to, flags) = if call.name == "rename" {
                    (("AT_FDCWD", arg(0)), ("AT_FDCWD", arg(1)), "")
                } else {
                    ((arg(0), arg(1)), (arg(2), arg(3)), arg(4))
                };
                let (Some(fp), Some(tp)) = (strace::path(from.1), strace::path(to.1)) else {
                    return;
                };
                let (Some(from), Some(to)) = (self.locate(from.0, &fp), self.locate(to.0, &tp))
                else {
                    return;
                };
                if flags.contains("RENAME_EXCHANGE") {
                    self.push(Op::Exchange { a: from, b: to }, call);
                } else if let Some(ino) = self.fs.entry(from.0, &from.1) {
                    self.push(Op::Rename { from, to, ino }, call);
                }
            }
            _ => {}
        }
    }

    /// Records the calls of `in_flight` that the table `table` on disk (`on_disk`,
    /// read when the process that made them is gone) shows were carried out: the
    /// smallest set of them whose replay gives that table. A kill cuts such calls short
    /// and strace cannot say which took effect; the disk can. None is recorded if no
    /// set gives the table on disk (the self-check at the end then reports it).
    ///
    /// Each is recorded as returning when its process died, so nothing before that
    /// made it durable.
    pub fn settle(&mut self, in_flight: &[Syscall], table: &str, on_disk: impl Fn() -> Listing) {
        // Calls that change no name and no byte: whether they ran does not show.
        let inert = [
            "close",
            "dup",
            "dup2",
            "dup3",
            "fcntl",
            "fcntl64",
            "lseek",
            "fsync",
            "fdatasync",
            "syncfs",
            "sync",
        ];
        let mut calls: Vec<&Syscall> = in_flight
            .iter()
            .filter(|c| !inert.contains(&c.name.as_str()))
            .collect();
        // As many as a process has threads in a call at once; a bound on the sets tried.
        calls.truncate(10);
        if calls.is_empty() {
            return;
        }
        let on_disk = on_disk();
        if self.fs.listing(table) == on_disk {
            return;
        }
        let mut sets: Vec<u32> = (1..1u32 << calls.len()).collect();
        sets.sort_by_key(|set| set.count_ones());
        for set in sets {
            let mut trial = self.clone();
            for (i, call) in calls.iter().enumerate() {
                if set & (1 << i) != 0 {
                    trial.record(call);
                }
            }
            if trial.fs.listing(table) == on_disk {
                *self = trial;
                return;
            }
        }
    }

    /// For each step, the index of the first later step that makes it durable (a
    /// `usize::MAX` for one that never became durable).
    pub fn durable_at(&self) -> Vec<usize> {
        let syncs: Vec<(usize, &Step)> = self
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.op, Op::Fsync { .. } | Op::SyncAll))
            .collect();
        let first_sync_of = |ino: Option<Ino>, after: usize| -> usize {
            syncs
                .iter()
                .filter(|(_, s)| s.start > after)
                .filter(|(_, s)| match s.op {
                    Op::SyncAll => true,
                    Op::Fsync { ino: i } => Some(i) == ino,
                    _ => false,
                })
                .map(|(i, _)| *i)
                .min()
                .unwrap_or(usize::MAX)
        };
        self.steps
            .iter()
            .map(|s| match &s.op {
                Op::Link { dir, .. } | Op::Unlink { dir, .. } => first_sync_of(Some(*dir), s.end),
                Op::Rename { to, .. } => first_sync_of(Some(to.0), s.end),
                Op::Exchange { a, b } => {
                    first_sync_of(Some(a.0), s.end).max(first_sync_of(Some(b.0), s.end))
                }
                Op::Write { ino, .. } | Op::Truncate { ino, .. } => {
                    first_sync_of(Some(*ino), s.end)
                }
                Op::Fsync { .. } | Op::SyncAll => 0,
            })
            .collect()
    }
}

fn describe(args: &[String]) -> String {
    args.iter()
        .take(4)
        .map(|a| match strace::bytes(a) {
            Some(b) if b.len() <= 80 => format!("{:?}", String::from_utf8_lossy(&b)),
            Some(b) => format!("<{} bytes>", b.len()),
            None => a.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-xx` form of a path.
    fn hex(path: &str) -> String {
        let escaped: String = path.bytes().map(|b| format!("\\x{b:02x}")).collect();
        format!("\"{escaped}\"")
    }

    fn dir(path: &str) -> (String, Option<Vec<u8>>) {
        (path.to_string(), None)
    }

    /// A process killed while a `mkdir` and an `openat` of other threads were in
    /// flight: the disk shows the directory was made and the file was not.
    fn killed_mid_calls() -> (tempfile::TempDir, Recorder, Vec<Syscall>) {
        let root = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(root.path().join("t")).expect("mkdir");
        let mut recorder = Recorder::new(root.path(), "t");
        let trace = format!(
            "1 mkdir({}, 0777) = 0\n2 mkdir({}, 0777 <unfinished ...>\n\
             3 openat(AT_FDCWD, {}, O_WRONLY|O_CREAT, 0666 <unfinished ...>\n\
             1 +++ killed by SIGABRT +++\n",
            hex("t/a"),
            hex("t/b"),
            hex("t/c"),
        );
        let trace = strace::parse(&trace, 0);
        for call in &trace.calls {
            recorder.record(call);
        }
        (root, recorder, trace.in_flight)
    }

    #[test]
    fn calls_in_flight_at_a_kill_are_recorded_as_the_disk_shows() {
        let (_root, mut recorder, in_flight) = killed_mid_calls();
        assert_eq!(in_flight.len(), 2);
        let on_disk = vec![dir("t"), dir("t/a"), dir("t/b")];
        recorder.settle(&in_flight, "t", || on_disk.clone());
        assert_eq!(recorder.fs.listing("t"), on_disk);
        let made: Vec<_> = recorder
            .steps
            .iter()
            .map(|s| (s.end, s.what.clone()))
            .collect();
        // The mkdir returned when the process died (line 3), not before.
        assert_eq!(
            made,
            [
                (0, "mkdir(\"t/a\", 0777)".to_string()),
                (3, "mkdir(\"t/b\", 0777)".to_string())
            ]
        );
        assert_eq!(recorder.durable_at(), [usize::MAX, usize::MAX]);
    }

    #[test]
    fn calls_in_flight_that_no_disk_explains_are_left_out() {
        let (_root, mut recorder, in_flight) = killed_mid_calls();
        let before = recorder.fs.clone();
        recorder.settle(&in_flight, "t", || vec![dir("t"), dir("t/z")]);
        assert_eq!(recorder.fs, before);
        assert_eq!(recorder.steps.len(), 1);
    }
}
