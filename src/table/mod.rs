//! Where things live inside a table directory.
//!
//! ```text
//! TABLE/                          the table: only committed part files, in COL=VALUE dirs
//! TABLE/_ingest/JOB/lock          the job's OS lock (who holds it, inside)
//! TABLE/_ingest/JOB/journal       the current or last run's journal
//! TABLE/_ingest/JOB/manifest      inputs loaded by finished runs: the head, naming
//! TABLE/_ingest/JOB/manifest.d/   the sorted segments that hold them
//! TABLE/_ingest/JOB/pending/RUN/CHECKPOINT/   staging area of one transaction
//! TABLE/_ingest/JOB/state/RUN/    stage snapshots of a run
//! TABLE/_ingest/JOB/overwrite/RUN/COL=VALUE/  overwrite mode: a partition's new content
//!                                 before its exchange, its old content after
//! ```
//! Everything a run creates under `_ingest/` is named by job and run id, so cleanup can
//! remove exactly what the journal proves a run owns, and never another job's files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::config::Common;
use crate::journal::{Checkpoint, RunStarted};
use crate::options::{Mode, TableFormat};
use crate::protocol::StagedFile;
use crate::storage::local::LocalTable;
use crate::storage::url::ObjectUrl;
use crate::storage::{Remote, TableStore};

#[cfg(feature = "delta")]
pub mod delta;

/// commit, after a checkpoint's files are published under their names: whatever else
/// makes them part of the table. A Hive table needs nothing more; a Delta table needs
/// the commit in its log that names them.
pub fn commit_in_log(layout: &JobLayout, run: &RunStarted, checkpoint: &Checkpoint) -> Result<()> {
    match (run.options.table_format, run.options.mode) {
        (TableFormat::Hive, _) => Ok(()),
        (TableFormat::Delta, Mode::Append) => delta_commit(layout, run, checkpoint),
        // The data files wait in staging for the one commit that replaces the
        // partitions when the run finishes (`replace_partitions`).
        (TableFormat::Delta, Mode::OverwritePartitions) => Ok(()),
    }
}

/// `--mode overwrite-partitions`, once the run's last checkpoint is committed: replaces
/// every partition the run wrote to, atomically (Hive: one directory exchange per
/// partition, `sink/overwrite.rs`; Delta: one commit for the whole table).
pub fn replace_partitions(
    layout: &JobLayout,
    journal: &mut crate::journal::Journal,
    log: &crate::journal::RunLog,
) -> Result<()> {
    match log.started.options.table_format {
        TableFormat::Hive => crate::sink::overwrite::replace_partitions(layout, journal, log),
        TableFormat::Delta => delta_replace(layout, journal, log),
    }
}

#[cfg(feature = "delta")]
fn delta_replace(
    layout: &JobLayout,
    journal: &mut crate::journal::Journal,
    log: &crate::journal::RunLog,
) -> Result<()> {
    delta::replace_partitions(layout, journal, log)
}

#[cfg(not(feature = "delta"))]
fn delta_replace(
    layout: &JobLayout,
    _: &mut crate::journal::Journal,
    _: &crate::journal::RunLog,
) -> Result<()> {
    delta_commit_unsupported(layout)
}

/// A Delta table's log version and the job's last transaction version; `None` for a
/// table without a Delta log.
pub fn delta_status(layout: &JobLayout) -> Result<Option<(u64, Option<i64>)>> {
    #[cfg(feature = "delta")]
    return Ok(delta::status(layout)?.map(|s| (s.version, s.txn)));
    #[cfg(not(feature = "delta"))]
    {
        let _ = layout;
        Ok(None)
    }
}

/// `--abort` of a Delta table's run: removes the run's data files from the table's
/// current version in one commit; returns (files, rows) removed.
#[cfg(feature = "delta")]
pub fn uncommit_in_log(layout: &JobLayout, files: &[&StagedFile]) -> Result<(u64, u64)> {
    delta::uncommit(layout, files)
}

#[cfg(not(feature = "delta"))]
pub fn uncommit_in_log(layout: &JobLayout, _: &[&StagedFile]) -> Result<(u64, u64)> {
    delta_commit_unsupported(layout)
}

#[cfg(feature = "delta")]
fn delta_commit(layout: &JobLayout, run: &RunStarted, checkpoint: &Checkpoint) -> Result<()> {
    delta::commit(layout, run, checkpoint)
}

#[cfg(not(feature = "delta"))]
fn delta_commit(layout: &JobLayout, _: &RunStarted, _: &Checkpoint) -> Result<()> {
    delta_commit_unsupported(layout)
}

#[cfg(not(feature = "delta"))]
fn delta_commit_unsupported<T>(layout: &JobLayout) -> Result<T> {
    anyhow::bail!(
        "{} is a Delta table, and this ingest was built without the `delta` feature",
        layout.table_name()
    )
}

/// The paths of one job inside one table.
///
/// A table in a bucket (`target`) has the same layout in a local working copy (`table`
/// is then that copy's directory); once the job's lease is held, `remote` carries the
/// state to the bucket (`storage/replica.rs`) and `store` is the bucket. `store` is
/// where data files are published: the table's directory unless it is remote.
#[derive(Debug, Clone)]
pub struct JobLayout {
    pub table: PathBuf,
    pub job: String,
    pub dir: PathBuf,
    pub target: Option<ObjectUrl>,
    pub remote: Option<Arc<Remote>>,
    pub store: Arc<dyn TableStore>,
}

impl JobLayout {
    /// The layout of `job` in `table`.
    pub fn new(table: &Path, job: &str) -> JobLayout {
        JobLayout {
            table: table.to_path_buf(),
            job: job.to_string(),
            dir: table.join("_ingest").join(job),
            target: None,
            remote: None,
            store: Arc::new(LocalTable),
        }
    }

    /// The layout of the command's job in its table, local or in a bucket.
    pub fn of(common: &Common) -> JobLayout {
        JobLayout {
            target: common.remote.clone(),
            ..JobLayout::new(&common.table, &common.job)
        }
    }

    /// The table as the user named it: its directory or its URL.
    pub fn table_name(&self) -> String {
        match &self.target {
            Some(url) => url.to_string(),
            None => self.table.display().to_string(),
        }
    }

    /// The job's lock file.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }

    /// The job's journal.
    pub fn journal(&self) -> PathBuf {
        self.dir.join("journal")
    }

    /// The job's manifest of loaded inputs.
    pub fn manifest(&self) -> PathBuf {
        self.dir.join("manifest")
    }

    /// All staging areas of one run.
    pub fn pending_run(&self, run: &str) -> PathBuf {
        self.dir.join("pending").join(run)
    }

    /// The staging area of one checkpoint's transaction.
    pub fn pending_txn(&self, run: &str, checkpoint: u64) -> PathBuf {
        self.pending_run(run).join(checkpoint_dir_name(checkpoint))
    }

    /// Stage snapshots of one run.
    pub fn state_run(&self, run: &str) -> PathBuf {
        self.dir.join("state").join(run)
    }

    /// Shadow partitions of one overwrite run.
    pub fn overwrite_run(&self, run: &str) -> PathBuf {
        self.dir.join("overwrite").join(run)
    }

    /// Every path of the job's state, and the table-wide state files, for the symlink
    /// check (`fsutil::refuse_symlinks`).
    pub fn state_paths(&self) -> Vec<PathBuf> {
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
    pub fn in_table(&self, rel: &str) -> PathBuf {
        self.table.join(rel)
    }
}

/// The jobs of a table: every directory under `_ingest/`, sorted.
pub fn jobs(table: &Path) -> Result<Vec<String>> {
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
pub fn checkpoint_dir_name(checkpoint: u64) -> String {
    format!("{checkpoint:06}")
}

/// Parses a staging-area name back into its checkpoint number.
pub fn parse_checkpoint_dir_name(name: &str) -> Option<u64> {
    if name.len() >= 6 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}
