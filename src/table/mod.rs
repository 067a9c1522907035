//! Table formats: what makes a checkpoint's published data files part of the table, and
//! what undoes it. A [`Format`] per format: [`hive::Hive`] (the files are the table) and
//! `delta::Delta` (a commit in the Delta log names them) and `iceberg::Iceberg` (a
//! snapshot committed through the table's catalog names them); [`format`] picks one.
//!
//! Where things live inside a table directory:
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

use anyhow::Result;

use crate::core::layout::JobLayout;
use crate::core::options::{Evolve, TableFormat};
use crate::core::protocol::StagedFile;
use crate::core::records::{Checkpoint, Record, RunLog, RunStarted};
use crate::core::schema::Schema;

#[cfg(feature = "delta")]
pub(crate) mod delta;
pub(crate) mod hive;
#[cfg(feature = "iceberg")]
pub(crate) mod iceberg;

/// Hands a record to the journal: the operation that owns the journal appends it, durably,
/// before the call returns (`ops/run.rs: finish`).
pub(crate) type Journaled<'a> = &'a mut dyn FnMut(&Record) -> Result<()>;

/// What a table format does at each step of a run, beyond publishing files.
pub(crate) trait Format: Send + Sync {
    /// Before a run: checks the load's schema against the table's and returns what the
    /// run journals about the table (nothing, for a format without a log).
    fn begin(
        &self,
        layout: &JobLayout,
        run: &RunStarted,
        schema: &Schema,
        evolve: Evolve,
    ) -> Result<Begun>;

    /// commit, after a checkpoint's files are published under their names: whatever else
    /// makes them part of the table. Idempotent, so recovery runs the same code.
    fn commit(&self, layout: &JobLayout, run: &RunStarted, checkpoint: &Checkpoint) -> Result<()>;

    /// `--mode overwrite-partitions`, once the run's last checkpoint is committed: replaces
    /// every partition the run wrote to, atomically, handing its `Exchange` and
    /// `Exchanged` records to `journal`.
    fn replace_partitions(
        &self,
        layout: &JobLayout,
        log: &RunLog,
        journal: Journaled<'_>,
    ) -> Result<()>;

    /// `--abort`: takes the data files of run `log` (`files`, as its journal names them)
    /// out of the table's current version; returns (files, rows) taken out, or `None`
    /// when the files are the table and the store removes them.
    fn uncommit(
        &self,
        layout: &JobLayout,
        log: &RunLog,
        files: &[&StagedFile],
    ) -> Result<Option<(u64, u64)>>;

    /// The table's log version and the job's last transaction version; `None` for a
    /// table without a log.
    fn status(&self, layout: &JobLayout) -> Result<Option<(u64, Option<i64>)>>;

    /// `--compact`: the data files of the table's current version (path relative to the
    /// table, size) and the job's transaction base, or `None` for a format whose files
    /// are whatever its directories hold.
    fn live_files(&self, layout: &JobLayout) -> Result<Option<LiveFiles>>;

    /// `--abort`: why the run cannot be undone, if it cannot: for a Delta table, files
    /// it committed that the table's current version no longer names (another writer,
    /// a compaction say, removed or merged them), whose rows its removal would leave.
    /// The caller says what to do instead.
    fn undo_refusal(&self, layout: &JobLayout, log: &RunLog) -> Result<Option<String>>;

    /// `--vacuum`: deletes (or, with `dry_run`, lists) the data files that no version
    /// within `retention` names (the table's own retention when `None`); returns them,
    /// relative to the table, or `None` for a format whose replaced files are deleted at
    /// once.
    fn vacuum(
        &self,
        layout: &JobLayout,
        retention: Option<std::time::Duration>,
        dry_run: bool,
    ) -> Result<Option<Vec<String>>>;
}

/// `--mode overwrite-partitions` in a format whose one commit replaces the partitions
/// (Delta, Iceberg), its first steps: `Exchange` journaled unless it was, so that from
/// here `--abort` refuses (undoing a commit that already took the old files out would
/// lose them) and `--recover` finishes; then every data file of the run published under
/// its partition path, still invisible (no commit names it; a publish already made is
/// done). False when the replacement is journaled as done (`Exchanged`).
#[cfg(any(feature = "delta", feature = "iceberg"))]
fn begin_replacing(layout: &JobLayout, log: &RunLog, journal: Journaled<'_>) -> Result<bool> {
    if log.exchanged {
        return Ok(false);
    }
    if log.exchange.is_none() {
        journal(&Record::Exchange {
            partitions: Vec::new(),
        })?;
    }
    for checkpoint in &log.checkpoints {
        let data: Vec<&StagedFile> = checkpoint
            .files
            .iter()
            .filter(|f| !f.is_rejects())
            .collect();
        layout.store.publish(layout, checkpoint.checkpoint, &data)?;
    }
    Ok(true)
}

/// What a run journals about its table before its first row ([`Format::begin`]).
#[derive(Debug, Default)]
pub(crate) struct Begun {
    /// A Delta table: the job's last transaction version (`RunStarted::delta_txn_base`).
    pub(crate) txn_base: Option<i64>,
    /// A table still to be created: what its first commit creates it with.
    pub(crate) create: Option<String>,
    /// The Parquet field ids of the table's columns, by name.
    pub(crate) field_ids: std::collections::BTreeMap<String, i32>,
}

/// A table's current files as its log names them, and a job's transaction base.
#[derive(Debug)]
pub(crate) struct LiveFiles {
    pub(crate) files: Vec<(String, u64)>,
    pub(crate) txn_base: i64,
}

/// The format of a table, or why this build cannot write it.
pub(crate) fn format(format: TableFormat) -> Result<&'static dyn Format> {
    match format {
        TableFormat::Hive => Ok(&hive::Hive),
        #[cfg(feature = "delta")]
        TableFormat::Delta => Ok(&delta::Delta),
        #[cfg(not(feature = "delta"))]
        TableFormat::Delta => {
            anyhow::bail!(
                "a Delta table needs the `delta` feature, which this ingest was built without"
            )
        }
        #[cfg(feature = "iceberg")]
        TableFormat::Iceberg => Ok(&iceberg::Iceberg),
        #[cfg(not(feature = "iceberg"))]
        TableFormat::Iceberg => {
            anyhow::bail!(
                "an Iceberg table needs the `iceberg` feature, which this ingest was built \
                 without"
            )
        }
    }
}
