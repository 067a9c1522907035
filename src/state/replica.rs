//! The state of a job whose table is in a bucket: the bucket holds the truth, a local
//! working copy serves the code that reads and writes state files.
//!
//! ```text
//! s3://B/TABLE/_ingest/JOB/lease           the lease (`lease.rs`), never copied
//! s3://B/TABLE/_ingest/JOB/journal.d/SEQ   one object per journal record, created only
//!                                          if absent: the commit points
//! s3://B/TABLE/_ingest/JOB/…               manifest, manifest.d/, state/, keys: copies
//! s3://B/TABLE/_ingest/contract.json       the table's contract
//! WORK/_ingest/JOB/…                       the local working copy of all of it
//! ```
//!
//! The rule that makes the copy safe: the bucket never lags behind anything that was
//! acted on. Every journal record is written to the bucket before the step it allows
//! (publish, fold, resume), and before a record is written every state file that
//! changed is copied up ([`Remote::push`]), so the files a record names (snapshots, the
//! manifest it folds into) are in the bucket first. A command starts by replacing the
//! working copy with the bucket's (`Remote::pull`): whatever the copy held beyond the
//! bucket (a record a crash kept from reaching it) was never acted on, and goes.
//! So `--recover` works on any machine with the URL and the credentials.
//!
//! Staged data never goes through the copy: preCommit uploads each file as an open
//! multipart upload, and commit completes it (`object.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::core::url::ObjectUrl;
use crate::state::journal;
use crate::storage::bucket::{Bucket, Mode, Put};
use crate::storage::lease::Lease;
use crate::storage::paged;

/// A state file's identity in the working copy: what changed since it was copied up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    len: u64,
    mtime_ns: i64,
    ino: u64,
}

fn stamp(path: &Path) -> Result<Stamp> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    Ok(Stamp {
        len: meta.len(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        ino: meta.ino(),
    })
}

const CONTRACT: &str = "_ingest/contract.json";

/// The working copy's record of the manifest segments it holds: each one's ETag in the
/// bucket and its local stamp when it was copied. Segments are immutable (a merge writes
/// new names), so a segment whose ETag and stamp both still match is the bucket's, and
/// the next command on this machine keeps it. A segment this machine did not write is
/// never downloaded whole: its copy is a reference, read from the bucket in pages as
/// lookups need them (`paged.rs`), so a machine's first command costs the inputs it is
/// offered, not the job's history. Local only: never copied up.
const SEGMENTS_SEEN: &str = "manifest.d/.copied";

/// What the working copy holds of the bucket.
#[derive(Debug, Default)]
struct Synced {
    /// Manifest segments (relative to the table) by ETag and local stamp.
    segments: BTreeMap<String, (String, Stamp)>,
    /// Copied state files (relative to the table) as they were when copied.
    pushed: BTreeMap<String, Stamp>,
    /// The sequence number of the next journal record.
    next_seq: u64,
    /// The contract's ETag when it was read; `None`: the table had none.
    contract: Option<String>,
}

/// A job of a table in a bucket, held under its lease (or, without one, a read-only
/// view of its state for `--status`).
pub(crate) struct Remote {
    pub(super) bucket: Arc<Bucket>,
    job: String,
    local: PathBuf,
    lease: Option<Lease>,
    synced: Mutex<Synced>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({}, job {})", self.bucket.url(), self.job)
    }
}

impl Remote {
    /// Takes `job`'s lease in the table at `url` (waiting up to `wait`), then replaces
    /// the working copy in `local` with the bucket's state.
    pub(crate) fn open(
        url: &ObjectUrl,
        local: &Path,
        job: &str,
        wait: Option<Duration>,
    ) -> Result<Arc<Remote>> {
        let bucket = Arc::new(Bucket::open(url)?);
        let lease = Lease::acquire(bucket.clone(), job, wait)?;
        let remote = Remote {
            bucket,
            job: job.to_string(),
            local: local.to_path_buf(),
            lease: Some(lease),
            synced: Mutex::new(Synced::default()),
        };
        remote.pull()?;
        Ok(Arc::new(remote))
    }

    /// A read-only view of `job`'s state, copied into `local` without taking its lease
    /// (`--status`): what a holder is doing at this moment may be a record ahead of it.
    pub(crate) fn read_only(url: &ObjectUrl, local: &Path, job: &str) -> Result<Arc<Remote>> {
        let remote = Remote {
            bucket: Arc::new(Bucket::open(url)?),
            job: job.to_string(),
            local: local.to_path_buf(),
            lease: None,
            synced: Mutex::new(Synced::default()),
        };
        remote.pull()?;
        Ok(Arc::new(remote))
    }

    /// Runs `read` on a read-only view of `job`'s state (the view, and the scratch
    /// directory holding its copy), then removes the scratch directory.
    pub(crate) fn with_read_only<T>(
        url: &ObjectUrl,
        job: &str,
        read: impl FnOnce(&Arc<Remote>, &Path) -> Result<T>,
    ) -> Result<T> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let scratch =
            std::env::temp_dir().join(format!("ingest-view-{}-{nanos}", std::process::id()));
        let outcome = Remote::read_only(url, &scratch, job).and_then(|view| read(&view, &scratch));
        let _ = std::fs::remove_dir_all(&scratch);
        outcome
    }

    /// Fails unless this process holds the job's lease and has not lost it: nothing may
    /// be written for the job otherwise.
    pub(super) fn check_lease(&self) -> Result<()> {
        match &self.lease {
            Some(lease) => lease.check(),
            None => Err(anyhow!(
                "job {:?} of {} was opened read-only; nothing may be written",
                self.job,
                self.bucket.url()
            )),
        }
    }

    /// Who holds the job's lease now, if anyone does.
    pub(crate) fn holder(&self) -> Result<Option<String>> {
        crate::storage::lease::live_holder(&self.bucket, &self.job)
    }

    fn synced(&self) -> Result<std::sync::MutexGuard<'_, Synced>> {
        self.synced
            .lock()
            .map_err(|_| anyhow!("the state copy's bookkeeping is poisoned"))
    }

    fn job_prefix(&self) -> String {
        format!("_ingest/{}", self.job)
    }

    /// Names under the job's prefix that are not state copies.
    fn is_copied(below_job: &str) -> bool {
        let name = below_job.rsplit('/').next().unwrap_or(below_job);
        !(name.starts_with('.')
            || below_job == "lease"
            || below_job == "lock"
            || below_job == "journal"
            || below_job.starts_with("journal.d/")
            || below_job.starts_with("pending/"))
    }

    /// Replaces the working copy with the bucket's state: every state file, the journal
    /// rebuilt from its records (the current run's), the table's contract.
    fn pull(&self) -> Result<()> {
        let job_dir = self.local.join(self.job_prefix());
        let seen_path = job_dir.join(SEGMENTS_SEEN);
        let seen: BTreeMap<String, (String, Stamp)> = std::fs::read(&seen_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        clear_but(&job_dir, &["lock", "manifest.d"])?;
        std::fs::create_dir_all(&job_dir)
            .with_context(|| format!("cannot create {}", job_dir.display()))?;
        let mut synced = self.synced()?;
        *synced = Synced::default();
        let prefix = self.job_prefix();
        let segments_prefix = format!("{prefix}/manifest.d/");
        let mut records = Vec::new();
        for (rel, size, etag) in self.bucket.list_tagged(&prefix)? {
            let Some(below) = rel.strip_prefix(&prefix).and_then(|r| r.strip_prefix('/')) else {
                continue;
            };
            if let Some(seq) = below.strip_prefix("journal.d/") {
                let seq: u64 = seq.parse().with_context(|| {
                    format!("{} is not a journal record", self.bucket.url_of(&rel))
                })?;
                records.push((seq, rel));
                continue;
            }
            if !Remote::is_copied(below) {
                continue;
            }
            let path = self.local.join(&rel);
            if rel.starts_with(&segments_prefix) {
                let kept = match (seen.get(&rel), &etag) {
                    (Some((was, copied)), Some(etag)) if was == etag => {
                        stamp(&path).ok().filter(|now| now == copied)
                    }
                    _ => None,
                };
                if let (Some(kept), Some(etag)) = (kept, &etag) {
                    synced.pushed.insert(rel.clone(), kept);
                    synced.segments.insert(rel, (etag.clone(), kept));
                    continue;
                }
                if let Some(etag) = &etag {
                    // Left in the bucket, read in pages as lookups need (`paged.rs`).
                    let url = self.bucket.url_of(&rel);
                    write_copy(&path, &paged::reference(&url, etag, size)?)?;
                    let copied = stamp(&path)?;
                    synced.segments.insert(rel.clone(), (etag.clone(), copied));
                    synced.pushed.insert(rel, copied);
                    continue;
                }
            }
            if let Some((bytes, got)) = self.bucket.get(&rel)? {
                write_copy(&path, &bytes)?;
                let copied = stamp(&path)?;
                if let (true, Some(etag)) = (rel.starts_with(&segments_prefix), got) {
                    synced.segments.insert(rel.clone(), (etag, copied));
                }
                synced.pushed.insert(rel, copied);
            }
        }
        // Local segments the bucket does not have (a crashed fold's, or merged away).
        let segments_dir = job_dir.join("manifest.d");
        if let Ok(entries) = std::fs::read_dir(&segments_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let rel = format!("{segments_prefix}{name}");
                if !name.starts_with('.') && !synced.pushed.contains_key(&rel) {
                    remove_if_exists(&entry.path())?;
                }
            }
        }
        save_segments_seen(&seen_path, &synced.segments)?;
        // Table-wide: another job's process on this machine may be reading it, so it is
        // replaced in one rename, never removed first.
        let contract = self.local.join(CONTRACT);
        match self.bucket.get(CONTRACT)? {
            Some((bytes, etag)) => {
                write_copy(&contract, &bytes)?;
                synced
                    .pushed
                    .insert(CONTRACT.to_string(), stamp(&contract)?);
                synced.contract = Some(etag.context("the store gave the contract no ETag")?);
            }
            None => remove_if_exists(&contract)?,
        }
        records.sort();
        let mut payloads = Vec::new();
        for (seq, rel) in &records {
            let (bytes, _) = self
                .bucket
                .get(rel)?
                .with_context(|| format!("journal record {} vanished", self.bucket.url_of(rel)))?;
            if journal::starts_run(&bytes) {
                payloads.clear();
            }
            payloads.push((*seq, bytes));
        }
        for pair in payloads.windows(2) {
            if pair[1].0 != pair[0].0 + 1 {
                bail!(
                    "the journal of job {:?} in {} misses record {}",
                    self.job,
                    self.bucket.url(),
                    pair[0].0 + 1
                );
            }
        }
        synced.next_seq = records.last().map_or(0, |(seq, _)| seq + 1);
        let journal = self.local.join(&prefix).join("journal");
        remove_if_exists(&journal)?;
        if !payloads.is_empty() {
            let bytes = journal::file_of(payloads.iter().map(|(_, p)| &p[..]));
            write_copy(&journal, &bytes)?;
        }
        Ok(())
    }

    /// Copies every state file that changed since it was last copied up, the manifest's
    /// head after the segments it names, and removes the copies of files that are gone.
    pub(crate) fn push(&self) -> Result<()> {
        self.check_lease()?;
        let mut synced = self.synced()?;
        let job_dir = self.local.join(self.job_prefix());
        let mut now = BTreeMap::new();
        let pending = job_dir.join("pending");
        let walk = walkdir::WalkDir::new(&job_dir)
            .sort_by_file_name()
            .into_iter()
            // Staged data is uploaded by the sink, never copied as state.
            .filter_entry(|e| e.path() != pending);
        for entry in walk {
            let entry = entry.with_context(|| format!("cannot list {}", job_dir.display()))?;
            if !entry.file_type().is_file() {
                continue;
            }
            let Some(rel) = relative(&self.local, entry.path()) else {
                continue;
            };
            let below = rel[self.job_prefix().len()..].trim_start_matches('/');
            if Remote::is_copied(below) {
                now.insert(rel, stamp(entry.path())?);
            }
        }
        let contract = self.local.join(CONTRACT);
        if contract.exists() {
            now.insert(CONTRACT.to_string(), stamp(&contract)?);
        }
        let head = format!("{}/manifest", self.job_prefix());
        let mut changed: Vec<&String> = now
            .iter()
            .filter(|(rel, s)| synced.pushed.get(*rel) != Some(s))
            .map(|(rel, _)| rel)
            .collect();
        // The head names segments: they go first.
        changed.sort_by_key(|rel| **rel == head);
        for rel in changed {
            let path = self.local.join(rel);
            let bytes =
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            let mode = match (rel.as_str(), &synced.contract) {
                (CONTRACT, None) => Mode::Create,
                (CONTRACT, Some(etag)) => Mode::Replace(etag.clone()),
                _ => Mode::Overwrite,
            };
            let ours = (rel == CONTRACT).then(|| bytes.clone());
            match self.bucket.put(rel, bytes, mode)? {
                Put::Done(etag) => {
                    if rel == CONTRACT {
                        synced.contract = etag;
                    } else if let (true, Some(etag)) = (rel.contains("/manifest.d/"), etag) {
                        synced.segments.insert(rel.clone(), (etag, now[rel]));
                    }
                }
                Put::Conflict => {
                    // Loads that start at once on a new table (many machines, one
                    // table) each record the contract: the first wins, and the others
                    // take its record when its terms are theirs.
                    let theirs = self.bucket.get(CONTRACT)?;
                    match (theirs, ours) {
                        (Some((theirs, Some(etag))), Some(ours))
                            if crate::state::contract::same_terms(&theirs, &ours) =>
                        {
                            write_copy(&path, &theirs)?;
                            synced.contract = Some(etag);
                            synced.pushed.insert(rel.clone(), stamp(&path)?);
                            continue;
                        }
                        _ => bail!(
                            "another load changed the table's contract ({}) meanwhile; run \
                             this one again",
                            self.bucket.url_of(rel)
                        ),
                    }
                }
            }
            synced.pushed.insert(rel.clone(), now[rel]);
        }
        let gone: Vec<String> = synced
            .pushed
            .keys()
            .filter(|rel| !now.contains_key(*rel))
            .cloned()
            .collect();
        for rel in gone {
            self.bucket.delete(&rel)?;
            synced.pushed.remove(&rel);
            synced.segments.remove(&rel);
            if rel == CONTRACT {
                synced.contract = None;
            }
        }
        save_segments_seen(&job_dir.join(SEGMENTS_SEEN), &synced.segments)
    }

    /// Writes one journal record: state files first, then the record, created only if
    /// no record has its sequence number (a second writer loses cleanly).
    pub(crate) fn journal_append(&self, payload: &[u8]) -> Result<()> {
        self.push()?;
        let mut synced = self.synced()?;
        let seq = synced.next_seq;
        let rel = format!("{}/journal.d/{seq:020}", self.job_prefix());
        match self.bucket.put(&rel, payload.to_vec(), Mode::Create)? {
            Put::Done(_) => {
                synced.next_seq += 1;
                Ok(())
            }
            Put::Conflict => bail!(
                "another process wrote journal record {seq} of job {:?} in {} first; this one \
                 stops (its lease ran out while it was stalled)",
                self.job,
                self.bucket.url()
            ),
        }
    }

    /// Starts a run's journal: its first record, then the previous run's records go.
    pub(crate) fn journal_start(&self, payload: &[u8]) -> Result<()> {
        self.journal_append(payload)?;
        let first = self.synced()?.next_seq - 1;
        let prefix = format!("{}/journal.d", self.job_prefix());
        for (rel, _) in self.bucket.list(&prefix)? {
            let seq = rel.rsplit('/').next().and_then(|s| s.parse::<u64>().ok());
            if seq.is_some_and(|seq| seq < first) {
                self.bucket.delete(&rel)?;
            }
        }
        Ok(())
    }

    /// The jobs with state in the table at `url`.
    pub(crate) fn jobs(url: &ObjectUrl) -> Result<BTreeSet<String>> {
        Ok(Bucket::open(url)?
            .children("_ingest")?
            .into_iter()
            .collect())
    }
}

fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

/// Writes a working-copy file, replacing any old one in a rename (a reader sees the old
/// bytes or the new, never a mix). Not fsynced: the bucket is the durable copy.
fn write_copy(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no directory", path.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.pull-{}", std::process::id()));
    std::fs::write(&temp, bytes).with_context(|| format!("cannot write {}", temp.display()))?;
    std::fs::rename(&temp, path).with_context(|| format!("cannot write {}", path.display()))
}

pub(super) fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

/// Writes the working copy's record of its segments.
fn save_segments_seen(path: &Path, segments: &BTreeMap<String, (String, Stamp)>) -> Result<()> {
    let bytes = serde_json::to_vec(segments).context("cannot encode the segment record")?;
    write_copy(path, &bytes)
}

/// Empties the job's working copy, except `keep`: the lock file (another process on this
/// machine may be waiting on that very file, and a new one would be a second lock) and
/// the manifest segments that `pull` checks one by one.
fn clear_but(job_dir: &Path, keep: &[&str]) -> Result<()> {
    let entries = match std::fs::read_dir(job_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", job_dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", job_dir.display()))?;
        if keep.iter().any(|k| entry.file_name() == *k) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("cannot remove {}", path.display()))?;
    }
    Ok(())
}

impl crate::core::layout::StateMirror for Remote {
    fn journal_start(&self, payload: &[u8]) -> Result<()> {
        Remote::journal_start(self, payload)
    }

    fn journal_append(&self, payload: &[u8]) -> Result<()> {
        Remote::journal_append(self, payload)
    }

    fn push(&self) -> Result<()> {
        Remote::push(self)
    }

    fn holder(&self) -> Result<Option<String>> {
        Remote::holder(self)
    }
}
