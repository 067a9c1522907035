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
use crate::storage::local::LocalTable;
use crate::storage::url::ObjectUrl;
use crate::storage::{Remote, TableStore};

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
