//! A Delta Lake table (`--table-format delta`): the same two-phase commit, with the
//! Delta log as the thing that makes files visible.
//!
//! A Hive table's file is in the table once it has its name; a Delta table's file is in
//! the table once a commit in `_delta_log/` names it. So a checkpoint's Parquet files are
//! staged and made durable as for a Hive table, published under their partition paths
//! (still invisible: no commit names them), and then one Delta commit adds them all:
//!
//! ```text
//! preCommit   staged files fsynced                                  (sink, coordinator)
//! decide      CheckpointComplete(n) fsynced in the job's journal    (the commit point)
//! commit      1. rename each file under TABLE/COL=VALUE/ + fsync    (invisible to readers)
//!             2. _delta_log/V.json: add every file, and
//!                txn { appId: "ingest:JOB", version: base + n }     (visible, all at once)
//!             3. fsync V.json and _delta_log/
//!             4. Committed(n) in the journal
//! ```
//!
//! # Why a replayed commit is never applied twice
//! `base` is the job's last transaction version in the table when the run began (0 for
//! a job that never committed), journaled in `RunStarted`, so checkpoint n of the run is
//! always version `base + n`, whichever process commits it. Before committing, the
//! current snapshot's version for the app id is read: at or past `base + n`, the commit
//! happened (a crash came between steps 2 and 4) and is not made again. Delta's
//! optimistic concurrency does the rest: another writer's commit at the same log version
//! makes ours retry at the next one, after checking that the other commit did not touch
//! what ours relies on; a concurrent commit of the same app id fails ours, and the run
//! stops (`--recover` then finds the version there and goes on).
//!
//! # Failure cases beyond the Hive table's
//! - *Crash after step 1*: the files are in partition directories, named by no commit;
//!   readers of the Delta log never list directories. Recovery publishes again (the
//!   files are there: done) and commits.
//! - *Crash inside step 2*: delta-rs creates `V.json` only if absent, whole, so the log
//!   holds the commit or does not.
//! - *Crash between 2 and 3*: the process that goes on reads a commit nobody fsynced;
//!   acting on it (journaling `Committed(n)`) and then losing power would lose the rows
//!   while the journal says they are in. So a commit found already made is settled
//!   (fsynced with its directory) before it is trusted (`checkpoint.rs`, case 6).
//!
//! # A compaction (`--compact`, `ops/compact/`)
//! The same steps, with one checkpoint whose files are the merged ones: its commit
//! removes the files they replace and adds them, all with `dataChange: false` (as Delta's
//! OPTIMIZE writes: readers of the change feed see no new rows), and the job `compact`'s
//! txn. If another writer removed a file it replaces since the compaction read the log,
//! the commit fails (a concurrent remove of a removed file is a conflict) and nothing
//! changes; older versions keep reading the replaced files until a vacuum.
//!
//! What recovery needs (the source position, input fingerprints, stage snapshots) stays
//! in the job's journal under `TABLE/_ingest/`, which Delta readers never list.

mod actions;
#[cfg(feature = "s3")]
mod bucket;
mod log;
mod schema;

use anyhow::{bail, Result};

use super::{Format, Journaled};
use crate::core::layout::JobLayout;
use crate::core::options::Evolve;
use crate::core::options::Mode;
use crate::core::protocol::StagedFile;
use crate::core::records::{Checkpoint, Record, RunLog, RunStarted};
use crate::core::schema::Schema;
use crate::core::sys::failpoint;

pub(crate) use log::Status;

/// The app id of a job's transactions in the Delta log.
pub(crate) fn app_id(job: &str) -> String {
    format!("ingest:{job}")
}

/// The transaction version of checkpoint `checkpoint` of a run whose base is `base`.
pub(crate) fn txn_version(base: i64, checkpoint: u64) -> Result<i64> {
    i64::try_from(checkpoint)
        .ok()
        .and_then(|n| base.checked_add(n))
        .ok_or_else(|| anyhow::anyhow!("checkpoint {checkpoint} is past the Delta txn versions"))
}

/// Attempts at adding a load's columns to the table while other writers change its
/// schema too: each lost race reloads the table, which then has what the winner added.
const ADD_COLUMNS_ATTEMPTS: usize = 3;

/// Before a run's journal exists: checks that the table's schema and partition columns
/// agree with the load's (with `--evolve add-columns`, first adds the load's columns
/// after the table's, in a commit of their own), and returns the run's txn base (the
/// job's last transaction version, 0 if it has none). A table without a log is not
/// created here: the fields to create it with are returned, to journal with the run,
/// and its first commit creates it ([`commit`]).
pub(crate) fn begin(
    layout: &JobLayout,
    schema: &Schema,
    partition_by: &[String],
    evolve: Evolve,
) -> Result<(i64, Option<String>)> {
    let wanted = schema::fields(schema)?;
    let Some(mut table) = log::try_open(layout)? else {
        return Ok((0, Some(serde_json::to_string(&wanted)?)));
    };
    let mut attempts = 0;
    loop {
        let (fields, partitions) = (table.schema()?, table.partition_columns()?);
        let Err(differs) = schema::check(&fields, &partitions, &wanted, partition_by) else {
            return Ok((table.txn_version(&app_id(&layout.job))?.unwrap_or(0), None));
        };
        let added = schema::added(&fields, &partitions, &wanted, partition_by);
        let (Evolve::AddColumns, Some(added)) = (evolve, added) else {
            bail!("{}: {differs}", layout.table_name());
        };
        attempts += 1;
        table = match table.add_columns(added) {
            Ok(widened) => widened,
            // Another writer changed the schema first: look again.
            Err(_) if attempts < ADD_COLUMNS_ATTEMPTS => log::open(layout)?,
            Err(e) => return Err(e),
        };
    }
}

/// commit, step 2 and 3: the Delta commit that makes checkpoint `checkpoint` of `run`
/// visible, unless it was made before. Idempotent, so recovery runs the same code.
pub(crate) fn commit(layout: &JobLayout, run: &RunStarted, checkpoint: &Checkpoint) -> Result<()> {
    let Some(base) = run.delta_txn_base else {
        bail!(
            "run {} of a Delta table has no transaction base in its journal",
            run.run_id
        );
    };
    let version = txn_version(base, checkpoint.checkpoint)?;
    let app = app_id(&layout.job);
    let partition_by = &run.options.partition_by;
    let mut table = match created_by(layout, run, &app, version, |fields| {
        actions::adds(checkpoint, partition_by, fields)
    })? {
        Some(table) => table,
        None => return Ok(()),
    };
    if table.txn_version(&app)?.is_some_and(|done| done >= version) {
        // Made before a crash, maybe never fsynced: settle it before trusting it.
        table.settle_log()?;
        return Ok(());
    }
    let mut adds = actions::adds(checkpoint, &run.options.partition_by, &table.schema()?)?;
    failpoint::hit("delta.commit.before");
    let committed = match &run.compaction {
        None => table.commit_adds(adds, &app, version, &run.options.partition_by)?,
        // A compaction that stopped before its commit point replaces nothing.
        Some(_) if adds.is_empty() => return Ok(()),
        Some(compaction) => {
            for add in &mut adds {
                add.data_change = false;
            }
            let replaces = compaction.replaces.iter().cloned().collect();
            let target = run.options.target_file_size.unwrap_or(0);
            table.commit_compaction(adds, &replaces, (&app, version), target)?
        }
    };
    failpoint::hit("delta.commit.written");
    table.settle_version(committed)?;
    failpoint::hit("delta.commit.after");
    Ok(())
}

/// The table's log to commit on; for a run that creates the table (`table_create`) and
/// finds no log, first the creating commit itself, with the adds `adds` makes from the
/// journaled fields (then `None`: nothing is left to commit). Of two runs creating the
/// table at once, the one that loses checks the winner's schema against its own, then
/// commits on top.
fn created_by(
    layout: &JobLayout,
    run: &RunStarted,
    app: &str,
    version: i64,
    adds: impl FnOnce(&[deltalake::kernel::StructField]) -> Result<Vec<deltalake::kernel::Add>>,
) -> Result<Option<log::Log>> {
    if let Some(table) = log::try_open(layout)? {
        return Ok(Some(table));
    }
    let Some(create) = &run.table_create else {
        bail!("{} has no Delta log", layout.table_name());
    };
    let wanted: Vec<deltalake::kernel::StructField> = serde_json::from_str(create)?;
    let partition_by = &run.options.partition_by;
    failpoint::hit("delta.commit.before");
    let created = log::create_with(
        layout,
        &wanted,
        partition_by,
        adds(&wanted)?,
        (app, version),
    )?;
    if created.is_some() {
        failpoint::hit("delta.commit.written");
        failpoint::hit("delta.commit.after");
        return Ok(None);
    }
    let table = log::open(layout)?;
    let (fields, partitions) = (table.schema()?, table.partition_columns()?);
    if let Err(differs) = schema::check(&fields, &partitions, &wanted, partition_by) {
        bail!(
            "{}: another writer created the Delta table first: {differs}",
            layout.table_name()
        );
    }
    Ok(Some(table))
}

/// `--mode overwrite-partitions`, once the run's last checkpoint is committed: one
/// commit that removes every file of the partitions the run wrote to and adds the run's
/// files, with the txn of the run's last checkpoint. Readers see the old table or the
/// new one.
///
/// 1. Journal `Exchange` (with no directories: the log is what changes), so that from
///    here `--abort` refuses (undoing a commit that already removed the old files would
///    lose them) and `--recover` finishes.
/// 2. Publish every data file of the run under its partition path (invisible); a
///    publish already made is done.
/// 3. The commit, unless the job's version is already there (a crash after it). A
///    commit by another writer in between makes delta-rs check for a conflict: another
///    writer's blind append is none (even into a replaced partition: under Delta's
///    default WriteSerializable isolation it is ordered after the overwrite), a removal
///    of a file this commit removes is one, and the run stops, for `--recover` to
///    replace the partitions again from a newer version.
/// 4. Journal `Exchanged`.
pub(crate) fn replace_partitions(
    layout: &JobLayout,
    log: &RunLog,
    journal: Journaled<'_>,
) -> Result<()> {
    if !super::begin_replacing(layout, log, journal)? {
        return Ok(());
    }
    let run = &log.started;
    let Some(base) = run.delta_txn_base else {
        bail!(
            "run {} of a Delta table has no transaction base in its journal",
            run.run_id
        );
    };
    let last = log
        .checkpoints
        .iter()
        .map(|c| c.checkpoint)
        .max()
        .unwrap_or(0);
    let version = txn_version(base, last)?;
    let app = app_id(&layout.job);
    let all_adds = |fields: &[deltalake::kernel::StructField]| -> Result<Vec<_>> {
        let mut adds = Vec::new();
        for checkpoint in &log.checkpoints {
            adds.extend(actions::adds(
                checkpoint,
                &run.options.partition_by,
                fields,
            )?);
        }
        Ok(adds)
    };
    let Some(mut table) = created_by(layout, run, &app, version, all_adds)? else {
        return journal(&Record::Exchanged);
    };
    if table.txn_version(&app)?.is_some_and(|done| done >= version) {
        table.settle_log()?;
    } else {
        let adds = all_adds(&table.schema()?)?;
        failpoint::hit("delta.commit.before");
        let committed = table.commit_overwrite(adds, &app, version, &run.options.partition_by)?;
        failpoint::hit("delta.commit.written");
        table.settle_version(committed)?;
        failpoint::hit("delta.commit.after");
    }
    journal(&Record::Exchanged)
}

/// The app id of the marker an abort's commit carries: `txn { appId, version }` with
/// the version of the run's first checkpoint, which no other run of the job has (a run
/// that commits moves the job's txn past it; one that commits nothing has nothing to
/// remove, and no abort commit).
fn abort_app_id(job: &str) -> String {
    format!("ingest-abort:{job}")
}

/// `--abort`: removes the data files of run `log` (`files`, as its journal names them)
/// from the table's current version in one commit; returns (files, rows) removed. A
/// repeat after a crash finds them gone and commits nothing.
///
/// Every file of a checkpoint the log has committed must still be in the current version
/// (or the abort's own commit, marked with the run's abort txn, be in the log): one that
/// is gone was merged by a compaction (its rows are in files holding others) or removed
/// by another writer, and removing what is left would leave rows of the run while saying
/// it is undone. Our compactions are kept out while this runs
/// (`ops/job.rs: exclude_compactions`); another tool's OPTIMIZE committed between the
/// check and the commit makes the commit conflict (both remove one file), and the
/// repeat finds the file gone here.
pub(crate) fn uncommit(
    layout: &JobLayout,
    log: &RunLog,
    files: &[&StagedFile],
) -> Result<(u64, u64)> {
    let Some(mut table) = log::try_open(layout)? else {
        return Ok((0, 0));
    };
    let paths = files
        .iter()
        .filter(|f| !f.is_rejects())
        .map(|f| f.dest.clone())
        .collect();
    let Some(base) = log.started.delta_txn_base else {
        return table.commit_removes(&paths, None);
    };
    let marker = (abort_app_id(&layout.job), txn_version(base, 1)?);
    if table.txn_version(&marker.0)? != Some(marker.1) {
        if let Some(why) = merged_away(&table, layout, log)? {
            bail!(
                "{why}; its committed files still in the table are left too, and the abort \
                 stays unfinished: its rows are in the table as if it had been recovered"
            );
        }
    }
    table.commit_removes(&paths, Some(marker))
}

/// How many files of checkpoints the log committed for run `log` its current version no
/// longer names, said as a reason, if any.
fn merged_away(table: &log::Log, layout: &JobLayout, log: &RunLog) -> Result<Option<String>> {
    let Some(base) = log.started.delta_txn_base else {
        return Ok(None);
    };
    let Some(done) = table.txn_version(&app_id(&layout.job))? else {
        return Ok(None);
    };
    let live: std::collections::HashSet<String> =
        table.files()?.into_iter().map(|(path, _)| path).collect();
    let mut gone = 0;
    for checkpoint in &log.checkpoints {
        if txn_version(base, checkpoint.checkpoint)? > done {
            continue;
        }
        gone += checkpoint
            .files
            .iter()
            .filter(|f| !f.is_rejects() && !live.contains(&f.dest))
            .count();
    }
    Ok((gone > 0).then(|| {
        format!(
            "{gone} file(s) the run committed are no longer in the Delta table's current \
             version (another writer, a compaction say, removed them or merged them into \
             files holding other rows), so undoing the run would leave their rows"
        )
    }))
}

/// Why `--abort` may not undo the run: files of checkpoints it committed (its txn
/// version is the job's in the table, or past it) that the current version no longer
/// names. A compaction (ingest's or another writer's OPTIMIZE) merged them into files
/// that hold other rows too; removing what is left would leave their rows in the table.
/// An abort already under way (`Aborting`) removed them itself, and goes on.
///
/// A compaction is undone until its commit is in the log (nothing of it is visible
/// before: its merged files are published under names no version has), and never after:
/// removing its merged files would lose the rows of the files it replaced.
fn undo_refusal(layout: &JobLayout, log: &RunLog) -> Result<Option<String>> {
    let (Some(base), false) = (log.started.delta_txn_base, log.aborting) else {
        return Ok(None);
    };
    let Some(table) = log::try_open(layout)? else {
        return Ok(None);
    };
    let Some(done) = table.txn_version(&app_id(&layout.job))? else {
        return Ok(None);
    };
    if log.started.compaction.is_some() {
        return Ok((done >= txn_version(base, 1)?).then(|| {
            "the compaction's commit is in the Delta log (it removed the files it merged), \
             so removing its files would lose their rows"
                .to_string()
        }));
    }
    merged_away(&table, layout, log)
}

/// The table's Delta version and the job's last transaction version, if the table has
/// a Delta log.
pub(crate) fn status(layout: &JobLayout) -> Result<Option<Status>> {
    log::status(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_map_to_versions_after_the_base() {
        assert_eq!(txn_version(0, 1).unwrap(), 1);
        assert_eq!(txn_version(41, 3).unwrap(), 44);
        assert!(txn_version(i64::MAX, 1).is_err());
        assert!(txn_version(0, u64::MAX).is_err());
        assert_eq!(app_id("nightly"), "ingest:nightly");
    }
}

/// A Delta Lake table: a commit in the log makes files part of it.
#[derive(Debug)]
pub(crate) struct Delta;

impl Format for Delta {
    fn begin(
        &self,
        layout: &JobLayout,
        run: &RunStarted,
        schema: &Schema,
        evolve: Evolve,
    ) -> Result<super::Begun> {
        let (base, create) = begin(layout, schema, &run.options.partition_by, evolve)?;
        Ok(super::Begun {
            txn_base: Some(base),
            create,
            field_ids: Default::default(),
        })
    }

    fn commit(&self, layout: &JobLayout, run: &RunStarted, checkpoint: &Checkpoint) -> Result<()> {
        match run.options.mode {
            Mode::Append => commit(layout, run, checkpoint),
            // The data files wait in staging for the one commit that replaces the
            // partitions when the run finishes (`replace_partitions`).
            Mode::OverwritePartitions => Ok(()),
        }
    }

    fn replace_partitions(
        &self,
        layout: &JobLayout,
        log: &RunLog,
        journal: Journaled<'_>,
    ) -> Result<()> {
        replace_partitions(layout, log, journal)
    }

    fn uncommit(
        &self,
        layout: &JobLayout,
        log: &RunLog,
        files: &[&StagedFile],
    ) -> Result<Option<(u64, u64)>> {
        uncommit(layout, log, files).map(Some)
    }

    fn status(&self, layout: &JobLayout) -> Result<Option<(u64, Option<i64>)>> {
        Ok(status(layout)?.map(|s| (s.version, s.txn)))
    }

    fn undo_refusal(&self, layout: &JobLayout, log: &RunLog) -> Result<Option<String>> {
        undo_refusal(layout, log)
    }

    fn vacuum(
        &self,
        layout: &JobLayout,
        retention: Option<std::time::Duration>,
        dry_run: bool,
    ) -> Result<Option<Vec<String>>> {
        let Some(table) = log::try_open(layout)? else {
            return Ok(Some(Vec::new()));
        };
        table.vacuum(retention, dry_run).map(Some)
    }

    fn live_files(&self, layout: &JobLayout) -> Result<Option<super::LiveFiles>> {
        let Some(table) = log::try_open(layout)? else {
            return Ok(None);
        };
        Ok(Some(super::LiveFiles {
            files: table.files()?,
            txn_base: table.txn_version(&app_id(&layout.job))?.unwrap_or(0),
        }))
    }
}
