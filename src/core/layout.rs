//! Where a job's files live: inside the table, its journal, manifest, staging areas and
//! snapshots, and the names of its checkpoint directories; and the stores its data files
//! and state go to, as the layers above see them: the [`TableStore`] seam (implemented
//! by `storage/local.rs` for a directory and by `state/bucket_table.rs` for a bucket) and
//! the [`StateMirror`] of a job whose state is kept in a bucket (`state/replica.rs`).

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::core::messages::Messages;
use crate::core::protocol::StagedFile;
use crate::core::url::ObjectUrl;

/// The paths of one job inside one table.
///
/// A table in a bucket (`target`) has the same layout in a local working copy (`table`
/// is then that copy's directory); once the job's lease is held, `remote` carries the
/// state to the bucket (`storage/replica.rs`) and `store` is the bucket. `store` is
/// where data files are published: the table's directory unless it is remote.
#[derive(Debug, Clone)]
pub(crate) struct JobLayout {
    pub(crate) table: PathBuf,
    pub(crate) job: String,
    pub(crate) dir: PathBuf,
    pub(crate) target: Option<ObjectUrl>,
    pub(crate) remote: Option<Arc<dyn StateMirror>>,
    pub(crate) store: Arc<dyn TableStore>,
}

impl JobLayout {
    /// The layout of `job` in `table`.
    pub(crate) fn new(table: &Path, job: &str) -> JobLayout {
        JobLayout {
            table: table.to_path_buf(),
            job: job.to_string(),
            dir: table.join("_ingest").join(job),
            target: None,
            remote: None,
            store: Arc::new(LocalTable),
        }
    }

    /// The table as the user named it: its directory or its URL.
    pub(crate) fn table_name(&self) -> String {
        match &self.target {
            Some(url) => url.to_string(),
            None => self.table.display().to_string(),
        }
    }

    /// The job's lock file.
    pub(crate) fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }

    /// What the table's lock is taken on: the `_ingest/` directory itself (a lock file
    /// would outlive a refused load, which leaves nothing behind). Every job holds it
    /// shared while it acts on the table, a compaction (job [`COMPACT_JOB`]) exclusive.
    pub(crate) fn table_lock(&self) -> PathBuf {
        self.table.join("_ingest")
    }

    /// The job's journal.
    pub(crate) fn journal(&self) -> PathBuf {
        self.dir.join("journal")
    }

    /// The job's manifest of loaded inputs.
    pub(crate) fn manifest(&self) -> PathBuf {
        self.dir.join("manifest")
    }

    /// All staging areas of one run.
    pub(crate) fn pending_run(&self, run: &str) -> PathBuf {
        self.dir.join("pending").join(run)
    }

    /// The staging area of one checkpoint's transaction.
    pub(crate) fn pending_txn(&self, run: &str, checkpoint: u64) -> PathBuf {
        self.pending_run(run).join(checkpoint_dir_name(checkpoint))
    }

    /// The staging area of sink `sink`'s share of one checkpoint's transaction
    /// ([`staging_dir_name`]).
    pub(crate) fn pending_txn_of(&self, run: &str, checkpoint: u64, sink: usize) -> PathBuf {
        self.pending_run(run)
            .join(staging_dir_name(checkpoint, sink))
    }

    /// Stage snapshots of one run.
    pub(crate) fn state_run(&self, run: &str) -> PathBuf {
        self.dir.join("state").join(run)
    }

    /// Shadow partitions of one overwrite run.
    pub(crate) fn overwrite_run(&self, run: &str) -> PathBuf {
        self.dir.join("overwrite").join(run)
    }

    /// Every path of the job's state, and the table-wide state files, for the symlink
    /// check (`fsutil::refuse_symlinks`).
    pub(crate) fn state_paths(&self) -> Vec<PathBuf> {
        let ingest = self.table.join("_ingest");
        let mut paths = vec![
            ingest.join("contract.json"),
            ingest.join("contract.lock"),
            self.lock(),
            self.journal(),
            self.manifest(),
        ];
        paths.extend(["manifest.d", "pending", "state", "overwrite"].map(|d| self.dir.join(d)));
        paths.push(self.table.join("_rejects").join(&self.job));
        paths
    }

    /// Turns a table-relative path from the journal into a real path.
    pub(crate) fn in_table(&self, rel: &str) -> PathBuf {
        self.table.join(rel)
    }
}

/// The job that `--compact` runs as: its journal, lock and staging are a job's, and no
/// load may take its name.
pub(crate) const COMPACT_JOB: &str = "compact";

/// The jobs of a table: every directory under `_ingest/`, sorted.
pub(crate) fn jobs(table: &Path) -> Result<Vec<String>> {
    let dir = table.join("_ingest");
    let mut names = Vec::new();
    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
                if entry.path().is_dir() {
                    names.push(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    }
    names.sort();
    Ok(names)
}

/// The directory name of a checkpoint's staging area.
pub(crate) fn checkpoint_dir_name(checkpoint: u64) -> String {
    format!("{checkpoint:06}")
}

/// Parses a staging-area name back into its checkpoint number.
pub(crate) fn parse_checkpoint_dir_name(name: &str) -> Option<u64> {
    if name.len() >= 6 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// The directory name of sink `sink`'s staging area of a checkpoint: the checkpoint's
/// own name for the first sink, `NNNNNN.K` for sink K after it.
///
/// Each sink creates its files in a directory of its own: files created in one
/// directory wait on its lock one after the other, and on an ext4 without a journal
/// each create there skips every inode freed in the last minute, one buffer lookup
/// each (a 4,000-partition load just after another table's removal spent 13% of its
/// samples in `rwsem_spin_on_owner`, the two sinks queued on the one directory).
pub(crate) fn staging_dir_name(checkpoint: u64, sink: usize) -> String {
    match sink {
        0 => checkpoint_dir_name(checkpoint),
        k => format!("{}.{k}", checkpoint_dir_name(checkpoint)),
    }
}

/// Parses a name [`staging_dir_name`] gives back into its checkpoint number.
pub(crate) fn parse_staging_dir_name(name: &str) -> Option<u64> {
    let (checkpoint, sink) = match name.split_once('.') {
        Some((checkpoint, sink)) => (checkpoint, Some(sink)),
        None => (name, None),
    };
    let sink_ok = sink.is_none_or(|k| {
        !k.is_empty() && !k.starts_with('0') && k.bytes().all(|b| b.is_ascii_digit())
    });
    parse_checkpoint_dir_name(checkpoint).filter(|_| sink_ok)
}

/// The filesystem under the table's directory (its methods: `storage/local.rs`).
#[derive(Debug, Default)]
pub(crate) struct LocalTable;

/// A copy of the job's state kept elsewhere: every journal write goes to it too, and the
/// rest of the state is pushed at the points a run settles (`state/replica.rs`).
pub(crate) trait StateMirror: Debug + Send + Sync {
    /// The first record of a new journal.
    fn journal_start(&self, payload: &[u8]) -> Result<()>;
    /// One more record of the journal.
    fn journal_append(&self, payload: &[u8]) -> Result<()>;
    /// Copies the job's settled state files to the mirror.
    fn push(&self) -> Result<()>;
    /// Who holds the job's lease there, if anyone.
    #[cfg(feature = "s3")]
    fn holder(&self) -> Result<Option<String>>;
}

/// Where a table's data files live: the sink's staging made durable, the commit's
/// publish, and their undoing. Every method acts on files named by the journal alone,
/// so the coordinator, `--recover` and `--abort` share them.
pub(crate) trait TableStore: Debug + Send + Sync {
    /// preCommit, once the checkpoint's staged files (with their local paths) are
    /// durable on local disk: make them durable in the store, still invisible to readers;
    /// may record how in each [`StagedFile`] (the journal keeps it).
    fn stage(&self, files: &mut [(StagedFile, PathBuf)]) -> Result<()>;

    /// commit: makes each file of checkpoint `checkpoint` visible at its destination.
    /// Idempotent (a file already published by an earlier attempt is done) and never
    /// replaces anything else found there.
    fn publish(&self, layout: &JobLayout, checkpoint: u64, files: &[&StagedFile]) -> Result<()>;

    /// The size of what is at `dest` (relative to the table), if anything.
    fn size(&self, layout: &JobLayout, dest: &str) -> Result<Option<u64>>;

    /// Drops staged files of journaled checkpoints that will never be published.
    fn discard(&self, files: &[&StagedFile]) -> Result<()>;

    /// Drops what run `run` staged for checkpoints after `last_journaled`: they never
    /// completed, and no journal record names them.
    fn discard_unjournaled(&self, run: &str, last_journaled: u64) -> Result<()>;

    /// `--abort`: removes the run's published files (those that still have their
    /// journaled size; others are noted and left); returns (files, rows) removed.
    fn unpublish(
        &self,
        layout: &JobLayout,
        files: &[&StagedFile],
        run: &str,
        messages: Messages,
    ) -> Result<(u64, u64)>;
}

/// What a store finds where a run published a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtDest {
    Nothing,
    /// A file of the journaled size: the run's own.
    Published,
    /// Something else, of this size: never the run's to remove.
    Other(u64),
}

/// `--abort`'s removal loop, the same for every store: each of the run's published files
/// still found with its journaled size is removed, anything else there is noted and left;
/// `look` tells what is at a file's destination (and how to name it), `remove` removes
/// it. Returns (files, rows) removed.
pub(crate) fn unpublish_each(
    files: &[&StagedFile],
    run: &str,
    messages: Messages,
    mut look: impl FnMut(&StagedFile) -> Result<(AtDest, String)>,
    mut remove: impl FnMut(&StagedFile) -> Result<()>,
) -> Result<(u64, u64)> {
    let mid = files.len().div_ceil(2);
    let (mut count, mut rows) = (0, 0);
    for (i, file) in files.iter().enumerate() {
        match look(file)? {
            (AtDest::Published, _) => {
                remove(file)?;
                count += 1;
                rows += file.rows;
            }
            (AtDest::Other(size), shown) => messages.note(&format!(
                "left alone: {shown} ({size} bytes, not the {} bytes run {run} journaled)",
                file.size
            )),
            (AtDest::Nothing, _) => {}
        }
        if i + 1 == mid {
            crate::core::sys::failpoint::hit("abort.remove.mid");
        }
    }
    Ok((count, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sinks_staging_area_is_named_by_its_checkpoint_and_parsed_back() {
        assert_eq!(staging_dir_name(7, 0), "000007");
        assert_eq!(staging_dir_name(7, 1), "000007.1");
        assert_eq!(staging_dir_name(1_234_567, 12), "1234567.12");
        for (checkpoint, sink) in [(1, 0), (7, 1), (1_234_567, 12)] {
            let name = staging_dir_name(checkpoint, sink);
            assert_eq!(parse_staging_dir_name(&name), Some(checkpoint), "{name}");
        }
        // What no sink names its area: left alone by the cleanup, and reported.
        for name in [
            "000007.",
            "000007.01",
            "000007.x",
            "7.1",
            "000007.1.1",
            ".1",
            "abc",
        ] {
            assert_eq!(parse_staging_dir_name(name), None, "{name}");
        }
    }
}
