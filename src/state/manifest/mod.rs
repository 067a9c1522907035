//! The manifest: which inputs this job has loaded, so a re-run skips them.
//!
//! An input becomes loaded in the journal record that commits its last rows
//! (`CheckpointComplete.inputs_done`); the manifest is only a compacted copy of finished
//! runs' journals, folded in when a run finishes (or, after a crash between
//! `RunFinished` and the fold, by the next start). So the manifest and the data can
//! never disagree: folding the same journal twice changes nothing.
//!
//! # Cost per run: the inputs offered, not the table's history
//! A run looks up each input it is offered; it never reads the whole manifest. The
//! loaded inputs live in immutable sorted segments (`manifest.d/*.seg`, see
//! `segment.rs`), each searched in place by path and by (size, content hash). A fold
//! writes one new segment holding only the run's inputs, then merges the newest
//! segments while the older of the two is at most twice the size of the newer, so a
//! job with N loaded inputs has at most about log2(N) segments and every entry is
//! rewritten about log2(N) times over its life (the size-tiered merge of a log-structured
//! merge tree). A lookup is then O(log² N) small positioned reads, and memory is the
//! entries a run touches.
//!
//! # The head
//! `JOB/manifest` is the head: the journal's framing with magic `INGESTM\x02` and one
//! frame, a `Head` naming the live segments (oldest first), the total of distinct
//! loaded inputs and the last run folded in. Every change ends with the head replaced
//! atomically (`fsutil::write_atomic`): the segments it names were made durable first,
//! so the head is the fold's commit point; a segment no head names (a crash between
//! the two) is garbage, removed by the next fold. A version-1 file (every entry in one
//! file, as written before segments) is read as one segment held in memory, and the
//! next fold turns it into a segment file.

mod segment;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::core::protocol::Fingerprint;
use crate::core::records::RunLog;
use crate::core::sys::failpoint;
use crate::core::sys::fsutil;
use crate::state::framed::{decode_frames, encode_frame};
use segment::Segment;

const HEAD_MAGIC: &[u8; 8] = b"INGESTM\x02";
const V1_MAGIC: &[u8; 8] = b"INGESTM\x01";
/// Bounded retries for a reader that raced a fold removing merged segments.
const OPEN_ATTEMPTS: usize = 5;

/// One loaded input, or one set aside.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) fingerprint: Fingerprint,
    /// The content hash of a loaded input ("0" for one set aside: never read whole).
    pub(crate) hash: String,
    pub(crate) run_id: String,
    /// Set aside by `--on-bad-input quarantine` (`quarantine.rs`), not loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) quarantine: Option<SetAside>,
}

/// Why an input was set aside, and which of its lines are in the table anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SetAside {
    pub(crate) reason: String,
    /// The input's rows up to and including this line are in the table; 0 when none are.
    pub(crate) committed_through_line: u64,
    /// Rows from this path are in the table: some of its lines (above), or the whole
    /// of an earlier content (a loaded input that changed). Once it changes it is then
    /// a changed input, never a new one: loading it whole would repeat those rows.
    #[serde(default)]
    pub(crate) rows_in_table: bool,
}

/// What the manifest says about an input.
#[derive(Debug)]
pub(crate) enum Status {
    New,
    Loaded,
    /// Loaded before, with other content.
    Changed(Entry),
    /// Set aside, and unchanged since.
    Quarantined,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Head {
    /// The last run folded in; folding it again is skipped.
    folded_run: Option<String>,
    /// Distinct loaded inputs.
    total: u64,
    /// Live segment file names in `manifest.d/`, oldest first.
    /// (Each one's entry count is in its own footer: see `Segment::count`.)
    segments: Vec<String>,
    /// The number the next segment gets.
    next: u64,
}

/// A version-1 manifest, read whole (tables written before segments).
#[derive(Debug, Default)]
struct V1 {
    folded_run: Option<String>,
    entries: BTreeMap<String, Entry>,
}

/// The loaded inputs of one job.
#[derive(Debug, Default)]
pub(crate) struct Manifest {
    head: Head,
    /// Open segments, oldest first (as `head.segments`).
    segments: Vec<Segment>,
    v1: Option<V1>,
}

/// Where the segments of the manifest whose head is `head` live.
fn segment_dir(head: &Path) -> PathBuf {
    let mut name = head.file_name().unwrap_or_default().to_os_string();
    name.push(".d");
    head.with_file_name(name)
}

impl Manifest {
    /// Reads the manifest in order to act on it (skip loaded inputs, fold a run into it):
    /// first makes the head durable, file and name, since the process that renamed it
    /// into place may have crashed before fsyncing its directory (see `fsutil::settle`).
    /// The segments it names were fsynced, with their directory, before it was written.
    pub(crate) fn load_settled(path: &Path) -> Result<Manifest> {
        fsutil::settle(path)?;
        Manifest::load(path)
    }

    /// Opens the manifest whose head is `path`; a missing one is empty.
    pub(crate) fn load(path: &Path) -> Result<Manifest> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Manifest::try_load(path) {
                // A concurrent fold (of `--status` or `--dry-run` without the lock)
                // merged and removed a segment between our reads of head and segment.
                Err(e) if attempt < OPEN_ATTEMPTS && is_not_found(&e) => continue,
                other => return other,
            }
        }
    }

    fn try_load(path: &Path) -> Result<Manifest> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Manifest::default()),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read manifest {}", path.display()))
            }
        };
        if bytes.starts_with(V1_MAGIC) {
            let v1 = read_v1(&bytes, path)?;
            let head = Head {
                folded_run: v1.folded_run.clone(),
                total: v1.entries.len() as u64,
                ..Head::default()
            };
            return Ok(Manifest {
                head,
                segments: Vec::new(),
                v1: Some(v1),
            });
        }
        let (frames, valid) = decode_frames(&bytes, HEAD_MAGIC, path)?;
        if valid != bytes.len() || frames.len() != 1 {
            // Written atomically, so a bad tail is damage, not a crash: refuse to guess.
            bail!(
                "manifest {} is damaged at byte {valid}; restore it from a backup",
                path.display()
            );
        }
        let head: Head = serde_json::from_slice(frames[0]).with_context(|| {
            format!(
                "manifest {} holds a record this ingest cannot read",
                path.display()
            )
        })?;
        let dir = segment_dir(path);
        let segments = head
            .segments
            .iter()
            .map(|name| Segment::open(&dir.join(name)))
            .collect::<Result<_>>()?;
        Ok(Manifest {
            head,
            segments,
            v1: None,
        })
    }

    /// The newest entry for `path`.
    fn find(&self, path: &str) -> Result<Option<Entry>> {
        for segment in self.segments.iter().rev() {
            if let Some(entry) = segment.find(path)? {
                return Ok(Some(entry));
            }
        }
        Ok(self
            .v1
            .as_ref()
            .and_then(|v1| v1.entries.get(path).cloned()))
    }

    /// True when some loaded input has this size: only then can a new input be a copy.
    pub(crate) fn has_size(&self, size: u64) -> Result<bool> {
        for segment in &self.segments {
            if segment.has_size(size)? {
                return Ok(true);
            }
        }
        Ok(self
            .v1
            .as_ref()
            .is_some_and(|v1| v1.entries.values().any(|e| e.fingerprint.size == size)))
    }

    /// A loaded input with this size and content hash (whose path still holds that
    /// content: a later reload of the path with other content supersedes it).
    pub(crate) fn copy_of(&self, size: u64, hash: &str) -> Result<Option<Entry>> {
        let wanted =
            u128::from_str_radix(hash, 16).with_context(|| format!("bad hash {hash:?}"))?;
        let mut candidates = Vec::new();
        for segment in self.segments.iter().rev() {
            candidates.extend(segment.with_content(size, wanted)?);
        }
        if let Some(v1) = &self.v1 {
            candidates.extend(
                v1.entries
                    .values()
                    .filter(|e| e.fingerprint.size == size && e.hash == hash)
                    .cloned(),
            );
        }
        for entry in candidates.into_iter().filter(|e| e.quarantine.is_none()) {
            let current = self.find(&entry.fingerprint.path)?;
            if current.is_some_and(|c| c.hash == entry.hash && c.quarantine.is_none()) {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }

    /// The entry of the input at `path` if it is loaded (not set aside).
    pub(crate) fn loaded(&self, path: &str) -> Result<Option<Entry>> {
        Ok(self.find(path)?.filter(|e| e.quarantine.is_none()))
    }

    /// The run that loaded the input at `path`, if one did.
    pub(crate) fn loaded_by(&self, path: &str) -> Result<Option<String>> {
        Ok(self.find(path)?.map(|e| e.run_id))
    }

    /// Number of loaded inputs.
    pub(crate) fn len(&self) -> u64 {
        self.head.total
    }

    /// True when nothing is loaded yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.head.total == 0
    }

    /// Classifies an input. Unchanged metadata means loaded; changed metadata asks
    /// `same_content` (which may hash the input whole), so a file that was merely touched
    /// is still recognised as loaded.
    pub(crate) fn status(
        &self,
        input: &Fingerprint,
        same_content: impl FnOnce(&Entry) -> Result<bool>,
    ) -> Result<Status> {
        let Some(entry) = self.find(&input.path)? else {
            return Ok(Status::New);
        };
        if let Some(set_aside) = &entry.quarantine {
            return Ok(if entry.fingerprint.same_metadata(input) {
                Status::Quarantined
            } else if set_aside.rows_in_table {
                Status::Changed(entry)
            } else {
                Status::New
            });
        }
        if entry.fingerprint.same_metadata(input) {
            return Ok(Status::Loaded);
        }
        if same_content(&entry)? {
            return Ok(Status::Loaded);
        }
        Ok(Status::Changed(entry))
    }

    /// Adds a finished run's loaded inputs: a new segment, merges, then the new head,
    /// atomically. An aborted run loaded nothing: the manifest stays as it is.
    pub(crate) fn fold(&mut self, path: &Path, log: &RunLog) -> Result<()> {
        if self.head.folded_run.as_deref() == Some(log.started.run_id.as_str()) || log.aborted {
            return Ok(());
        }
        let mut run: BTreeMap<String, Entry> = BTreeMap::new();
        for checkpoint in &log.checkpoints {
            for done in &checkpoint.inputs_done {
                let fingerprint = log
                    .started
                    .inputs
                    .get(done.input)
                    .with_context(|| {
                        format!(
                            "journal names input {} of a run with fewer inputs",
                            done.input
                        )
                    })?
                    .clone();
                let entry = Entry {
                    fingerprint,
                    hash: done.hash.clone(),
                    run_id: log.started.run_id.clone(),
                    quarantine: None,
                };
                run.insert(entry.fingerprint.path.clone(), entry);
            }
        }
        for q in &log.quarantined {
            let fingerprint = log.started.inputs.get(q.input).with_context(|| {
                format!(
                    "journal sets aside input {} of a run with fewer inputs",
                    q.input
                )
            })?;
            run.entry(fingerprint.path.clone())
                .or_insert_with(|| Entry {
                    fingerprint: fingerprint.clone(),
                    hash: "0".to_string(),
                    run_id: log.started.run_id.clone(),
                    quarantine: Some(SetAside {
                        reason: q.reason.clone(),
                        committed_through_line: q.committed_through_line,
                        rows_in_table: q.committed_through_line > 0,
                    }),
                });
        }
        self.fold_entries(path, &log.started.run_id, run)
    }

    /// Records inputs set aside before any run read them (changed, copies, a header the
    /// table refuses), each with whether rows of its path are in the table (a loaded
    /// input that changed), under the id `id`, as a fold of their own: durable before the
    /// run that left them out starts, and done at most once per id.
    pub(crate) fn quarantine(
        &mut self,
        path: &Path,
        id: &str,
        inputs: &[(Fingerprint, String, bool)],
    ) -> Result<()> {
        let run = inputs
            .iter()
            .map(|(fingerprint, reason, rows_in_table)| {
                let entry = Entry {
                    fingerprint: fingerprint.clone(),
                    hash: "0".to_string(),
                    run_id: id.to_string(),
                    quarantine: Some(SetAside {
                        reason: reason.clone(),
                        committed_through_line: 0,
                        rows_in_table: *rows_in_table,
                    }),
                };
                (fingerprint.path.clone(), entry)
            })
            .collect();
        self.fold_entries(path, id, run)
    }

    /// Every input set aside and not loaded since, newest entry per path, for `--status`.
    /// Reads the whole manifest.
    pub(crate) fn quarantined(&self) -> Result<Vec<Entry>> {
        let mut newest: BTreeMap<String, Entry> = BTreeMap::new();
        if let Some(v1) = &self.v1 {
            newest.extend(v1.entries.clone());
        }
        for segment in &self.segments {
            for entry in segment.entries()? {
                let entry = entry?;
                newest.insert(entry.fingerprint.path.clone(), entry);
            }
        }
        Ok(newest
            .into_values()
            .filter(|e| e.quarantine.is_some())
            .collect())
    }

    /// [`Manifest::fold`] of a run's entries, by path.
    fn fold_entries(
        &mut self,
        path: &Path,
        run_id: &str,
        run: BTreeMap<String, Entry>,
    ) -> Result<()> {
        if self.head.folded_run.as_deref() == Some(run_id) {
            return Ok(());
        }
        let dir = segment_dir(path);
        fsutil::create_dir_all_durable(&dir)?;
        let mut head = self.head.clone();
        let mut segments = std::mem::take(&mut self.segments);
        if let Some(v1) = self.v1.take() {
            // The old single file becomes the oldest segment.
            let name = segment_file(head.next);
            head.next += 1;
            segment::write(&dir.join(&name), v1.entries.into_values().map(Ok))?;
            segments.insert(0, Segment::open(&dir.join(&name))?);
            head.segments.insert(0, name);
        }
        self.segments = segments;

        for (path, entry) in &run {
            let loaded = |e: &Entry| e.quarantine.is_none();
            let was = self.find(path)?;
            match (was.as_ref().is_some_and(loaded), loaded(entry)) {
                (false, true) => head.total += 1,
                (true, false) => head.total = head.total.saturating_sub(1),
                _ => {}
            }
        }
        if !run.is_empty() {
            let name = segment_file(head.next);
            head.next += 1;
            segment::write(&dir.join(&name), run.into_values().map(Ok))?;
            self.segments.push(Segment::open(&dir.join(&name))?);
            head.segments.push(name);
        }
        self.merge(&dir, &mut head)?;
        head.folded_run = Some(run_id.to_string());
        // Segments written and merged, not yet named: a crash leaves them as garbage.
        failpoint::hit("manifest.fold.before");
        let mut bytes = HEAD_MAGIC.to_vec();
        encode_frame(&serde_json::to_vec(&head)?, &mut bytes);
        fsutil::write_atomic(path, &bytes)?;
        self.head = head;
        failpoint::hit("manifest.fold.after");
        remove_unnamed(&dir, &self.head)?;
        Ok(())
    }

    /// Merges the two newest segments while the older is at most twice the newer.
    fn merge(&mut self, dir: &Path, head: &mut Head) -> Result<()> {
        while self.segments.len() >= 2 {
            let n = self.segments.len();
            let (older, newer) = (&self.segments[n - 2], &self.segments[n - 1]);
            if older.count() > 2 * newer.count() {
                break;
            }
            let name = segment_file(head.next);
            head.next += 1;
            let merged = MergeNewest {
                older: older.entries()?.peekable(),
                newer: newer.entries()?.peekable(),
            };
            segment::write(&dir.join(&name), merged)?;
            self.segments.truncate(n - 2);
            head.segments.truncate(n - 2);
            self.segments.push(Segment::open(&dir.join(&name))?);
            head.segments.push(name);
        }
        Ok(())
    }
}

/// Two segments' entries merged in path order; for a path in both, the newer's entry.
struct MergeNewest {
    older: std::iter::Peekable<segment::Entries>,
    newer: std::iter::Peekable<segment::Entries>,
}

impl Iterator for MergeNewest {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        let order = match (self.older.peek(), self.newer.peek()) {
            (None, None) => return None,
            (Some(Err(_)), _) | (Some(_), None) => std::cmp::Ordering::Less,
            (_, Some(Err(_))) | (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(Ok(a)), Some(Ok(b))) => a.fingerprint.path.cmp(&b.fingerprint.path),
        };
        match order {
            std::cmp::Ordering::Less => self.older.next(),
            std::cmp::Ordering::Greater => self.newer.next(),
            std::cmp::Ordering::Equal => {
                self.older.next();
                self.newer.next()
            }
        }
    }
}

fn segment_file(n: u64) -> String {
    format!("{n:010}.seg")
}

/// Removes what no head names: merged-away segments, and leftovers of a crashed fold.
fn remove_unnamed(dir: &Path, head: &Head) -> Result<()> {
    let named: std::collections::HashSet<&str> = head.segments.iter().map(String::as_str).collect();
    let mut removed = false;
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        if !named.contains(name.to_string_lossy().as_ref()) {
            fsutil::remove_file_if_exists(&entry.path())?;
            removed = true;
        }
    }
    if removed {
        fsutil::sync_dir(dir)?;
    }
    Ok(())
}

fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    })
}

fn read_v1(bytes: &[u8], path: &Path) -> Result<V1> {
    let (frames, valid) = decode_frames(bytes, V1_MAGIC, path)?;
    if valid != bytes.len() {
        bail!(
            "manifest {} is damaged at byte {valid}; restore it from a backup",
            path.display()
        );
    }
    let bad = || {
        format!(
            "manifest {} holds a record this ingest cannot read",
            path.display()
        )
    };
    #[derive(Deserialize)]
    struct V1Header {
        folded_run: Option<String>,
    }
    let mut v1 = V1::default();
    let mut frames = frames.into_iter();
    if let Some(first) = frames.next() {
        let header: V1Header = serde_json::from_slice(first).with_context(bad)?;
        v1.folded_run = header.folded_run;
    }
    for frame in frames {
        let entry: Entry = serde_json::from_slice(frame).with_context(bad)?;
        v1.entries.insert(entry.fingerprint.path.clone(), entry);
    }
    Ok(v1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hash::hash_hex;

    pub(super) fn entry(path: &str, size: u64, hash: u128, run: &str) -> Entry {
        Entry {
            fingerprint: Fingerprint {
                path: path.to_string(),
                size,
                mtime_ns: 1,
                dev: 2,
                ino: 3,
                etag: None,
            },
            hash: hash_hex(hash),
            run_id: run.to_string(),
            quarantine: None,
        }
    }

    fn run_of(n: usize, first: usize, run: &str) -> BTreeMap<String, Entry> {
        (first..first + n)
            .map(|i| {
                let path = format!("/in/{i:07}.csv");
                (
                    path.clone(),
                    entry(&path, 100 + (i % 7) as u64, i as u128, run),
                )
            })
            .collect()
    }

    #[test]
    fn folds_stay_few_segments_and_every_input_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("manifest");
        let mut manifest = Manifest::load(&head).unwrap();
        let mut loaded = 0;
        let sizes = [
            1, 5, 200, 3, 3, 3, 40, 1, 1, 1, 1, 1, 1, 1, 1, 77, 2, 300, 9, 9,
        ];
        for (r, n) in sizes.iter().enumerate() {
            manifest
                .fold_entries(
                    &head,
                    &format!("run{r}"),
                    run_of(*n, loaded, &format!("run{r}")),
                )
                .unwrap();
            loaded += n;
            // Reopened from disk each time: what the next run would see.
            manifest = Manifest::load(&head).unwrap();
            let bound = 2 * (usize::BITS - loaded.leading_zeros()) as usize + 1;
            assert!(
                manifest.segments.len() <= bound,
                "{} segments for {loaded} inputs",
                manifest.segments.len()
            );
        }
        assert_eq!(manifest.len(), loaded as u64);
        for i in 0..loaded {
            let path = format!("/in/{i:07}.csv");
            let found = manifest.find(&path).unwrap().unwrap();
            assert_eq!(found.hash, hash_hex(i as u128), "{path}");
        }
        assert!(manifest.find("/in/absent.csv").unwrap().is_none());
        assert!(manifest.has_size(103).unwrap());
        assert!(!manifest.has_size(99).unwrap());
        let copy = manifest
            .copy_of(100 + (12 % 7), &hash_hex(12))
            .unwrap()
            .unwrap();
        assert_eq!(copy.fingerprint.path, "/in/0000012.csv");
        assert!(manifest.copy_of(100, &hash_hex(12)).unwrap().is_none());
        // Nothing but the named segments is left in the directory.
        let files = std::fs::read_dir(segment_dir(&head)).unwrap().count();
        assert_eq!(files, manifest.segments.len());
    }

    #[test]
    fn segments_stay_logarithmic_over_many_small_runs() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("manifest");
        let mut manifest = Manifest::load(&head).unwrap();
        let mut loaded = 0;
        for r in 0..200 {
            let n = 1 + r % 3;
            manifest
                .fold_entries(&head, &format!("r{r}"), run_of(n, loaded, "r"))
                .unwrap();
            loaded += n;
            // Each segment more than twice the next newer: at most log2(N) + 1 of them.
            let bound = (usize::BITS - loaded.leading_zeros()) as usize + 1;
            assert!(
                manifest.segments.len() <= bound,
                "{} segments for {loaded} inputs after run {r}",
                manifest.segments.len()
            );
        }
    }

    #[test]
    fn a_small_run_leaves_a_big_segment_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("manifest");
        let mut manifest = Manifest::load(&head).unwrap();
        manifest
            .fold_entries(&head, "big", run_of(1000, 0, "big"))
            .unwrap();
        let big = manifest.head.segments[0].clone();
        for r in 0..5 {
            manifest
                .fold_entries(&head, &format!("small{r}"), run_of(2, 1000 + 2 * r, "s"))
                .unwrap();
            // A fold costs its own inputs: the 1,000-entry segment is never rewritten.
            assert_eq!(manifest.head.segments[0], big, "after small run {r}");
            assert_eq!(manifest.segments[0].count(), 1000);
        }
        assert!(manifest.segments.len() >= 2);
    }

    #[test]
    fn a_reloaded_path_takes_its_newest_entry_and_counts_once() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("manifest");
        let mut manifest = Manifest::load(&head).unwrap();
        manifest
            .fold_entries(&head, "r1", run_of(50, 0, "r1"))
            .unwrap();
        let mut again = BTreeMap::new();
        again.insert(
            "/in/0000007.csv".to_string(),
            entry("/in/0000007.csv", 5, 999, "r2"),
        );
        manifest.fold_entries(&head, "r2", again).unwrap();
        let manifest = Manifest::load(&head).unwrap();
        assert_eq!(manifest.len(), 50);
        let found = manifest.find("/in/0000007.csv").unwrap().unwrap();
        assert_eq!((found.run_id.as_str(), found.fingerprint.size), ("r2", 5));
        // The old content of that path is no longer a loaded input to be copied from.
        assert!(manifest.copy_of(100, &hash_hex(7)).unwrap().is_none());
        assert!(manifest.copy_of(5, &hash_hex(999)).unwrap().is_some());
    }

    #[test]
    fn folding_the_same_run_twice_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("manifest");
        let mut manifest = Manifest::load(&head).unwrap();
        manifest
            .fold_entries(&head, "r1", run_of(10, 0, "r1"))
            .unwrap();
        let before = std::fs::read(&head).unwrap();
        let mut manifest = Manifest::load(&head).unwrap();
        manifest
            .fold_entries(&head, "r1", run_of(10, 0, "r1"))
            .unwrap();
        assert_eq!(std::fs::read(&head).unwrap(), before);
        assert_eq!(Manifest::load(&head).unwrap().len(), 10);
    }

    #[test]
    fn a_version_1_manifest_is_read_then_turned_into_a_segment() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("manifest");
        let mut bytes = V1_MAGIC.to_vec();
        encode_frame(br#"{"folded_run":"old"}"#, &mut bytes);
        for (_, e) in run_of(20, 0, "old") {
            encode_frame(&serde_json::to_vec(&e).unwrap(), &mut bytes);
        }
        std::fs::write(&head, &bytes).unwrap();
        let mut manifest = Manifest::load(&head).unwrap();
        assert_eq!(manifest.len(), 20);
        assert!(manifest.find("/in/0000003.csv").unwrap().is_some());
        assert!(manifest.copy_of(100 + 3, &hash_hex(3)).unwrap().is_some());
        // The old run is folded already.
        manifest
            .fold_entries(&head, "old", run_of(5, 100, "old"))
            .unwrap();
        assert_eq!(std::fs::read(&head).unwrap(), bytes);

        manifest
            .fold_entries(&head, "new", run_of(5, 20, "new"))
            .unwrap();
        assert!(std::fs::read(&head).unwrap().starts_with(HEAD_MAGIC));
        let manifest = Manifest::load(&head).unwrap();
        assert!(manifest.v1.is_none());
        assert_eq!(manifest.len(), 25);
        for i in 0..25 {
            assert!(
                manifest.find(&format!("/in/{i:07}.csv")).unwrap().is_some(),
                "{i}"
            );
        }
    }

    #[test]
    fn a_segment_no_head_names_is_ignored_then_removed() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("manifest");
        let mut manifest = Manifest::load(&head).unwrap();
        manifest
            .fold_entries(&head, "r1", run_of(10, 0, "r1"))
            .unwrap();
        // A crashed fold's segment (written, never named) and a temp file.
        let stray = segment_dir(&head).join(segment_file(77));
        segment::write(&stray, run_of(3, 500, "crashed").into_values().map(Ok)).unwrap();
        std::fs::write(segment_dir(&head).join("0000000078.seg.tmp"), b"half").unwrap();
        let mut manifest = Manifest::load(&head).unwrap();
        assert!(manifest.find("/in/0000500.csv").unwrap().is_none());
        assert_eq!(manifest.len(), 10);
        manifest
            .fold_entries(&head, "r2", run_of(1, 10, "r2"))
            .unwrap();
        assert!(!stray.exists());
        assert!(!segment_dir(&head).join("0000000078.seg.tmp").exists());
    }
}
