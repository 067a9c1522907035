//! `ingest --abort`: undoes an interrupted run as if it had never started.
//!
//! A run stopped by a bad row is otherwise a trap: once the user fixes the file,
//! `--recover` refuses (the input changed) and a plain load refuses (a run is
//! interrupted). Aborting removes what the run published and staged, from the journal
//! alone, and leaves its inputs not loaded, so the next load takes them afresh.
//!
//! # The steps, failure case by failure case
//! 1. Replay the journal, settled (`checkpoint.rs`, case 6). A run that is over has
//!    nothing to abort.
//! 2. Refuse where undoing would let readers see a mix: an overwrite whose `Exchange` is
//!    journaled may have swapped some partitions already, and putting the old content
//!    back is not one atomic step. `--recover` finishes such a run instead.
//! 3. Journal `Aborting` and fsync it. *Crash after*: the run is never resumed again;
//!    `--abort` or `--recover` repeat steps 4 to 7.
//! 4. Remove every file the journal names at its final place (data and rejects) that has
//!    the journaled size; a file there with another size is not the run's and is left,
//!    with a note. Then remove the partition directories left empty, and fsync every
//!    directory touched, so that a power cut after `Aborted` cannot bring rows back.
//!    *Crash midway* (`abort.remove.mid`): repeating it removes what is left.
//! 5. Remove the run's staging areas, snapshots and overwrite shadows (all named by the
//!    run id under `_ingest/JOB/`).
//! 6. If this run recorded the table's contract and no other job has a run, remove the
//!    contract: the table is as it was before its first load. If it evolved the
//!    contract (`--evolve`) and the contract is still the one it wrote, put back the one
//!    before (journaled in `RunStarted`).
//! 7. Journal `Aborted`. The manifest never saw the run's inputs (it folds only finished
//!    runs), so they count as not loaded. *Crash before*: as after step 3.

use std::time::Instant;

use anyhow::{bail, Result};

use crate::core::error::{kind, Kind, Stopped};
use crate::core::layout::JobLayout;
use crate::core::messages::Messages;
use crate::core::options::Mode;
use crate::core::records::{Record, RunLog};
use crate::core::sys::failpoint;
use crate::core::sys::fsutil;
use crate::ops::job::Job;
use crate::ops::job::{abort_command, nothing_committed, recover_command};
use crate::ops::report::Summary;
use crate::ops::settings::Common;
use crate::sink::pending;
use crate::state::contract;
use crate::state::journal::{self, Journal};
use crate::state::manifest::Manifest;

/// What aborting a run would do.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Why the run cannot be aborted, if it cannot.
    pub(crate) refused: Option<String>,
    /// Files at their final place: (table-relative path, journaled size, rows).
    pub(crate) published: Vec<(String, u64, u64)>,
    /// Checkpoints whose staging (and snapshots) would be discarded.
    pub(crate) checkpoints: u64,
    pub(crate) contract: bool,
    /// The contract as it was before the run evolved it, to put back.
    pub(crate) contract_before: Option<String>,
}

impl Plan {
    /// The steps, for `--status`.
    pub(crate) fn describe(&self) -> Vec<String> {
        if let Some(why) = &self.refused {
            return vec![format!("refuse: {why}")];
        }
        let rows: u64 = self.published.iter().map(|(_, _, r)| r).sum();
        let mut steps = vec![format!(
            "remove {} published file(s) with {rows} row(s)",
            self.published.len()
        )];
        steps.extend(
            self.published
                .iter()
                .map(|(p, size, _)| format!("  {p} ({size} bytes)")),
        );
        steps.push(format!(
            "discard the staging and snapshots of {} checkpoint(s)",
            self.checkpoints
        ));
        if self.contract {
            steps.push("remove the table contract this run recorded".into());
        }
        if self.contract_before.is_some() {
            steps.push("put back the table contract as it was before this run evolved it".into());
        }
        steps.push("count the run's inputs as not loaded".into());
        steps
    }
}

/// What aborting `log` would do, read from the journal and the table without changing
/// anything.
pub(crate) fn plan(layout: &JobLayout, log: &RunLog) -> Result<Plan> {
    let mut plan = Plan::default();
    if log.started.options.mode == Mode::OverwritePartitions
        && log.exchange.is_some()
        && !log.aborting
    {
        plan.refused = Some(format!(
            "the run's exchange of partitions began (some may already show the new content), \
             and undoing it would let readers see a mix of old and new; `{}` finishes it",
            crate::ops::job::recover_command_for(&layout.table_name(), &layout.job)
        ));
        return Ok(plan);
    }
    let format = crate::table::format(log.started.options.table_format)?;
    if let Some(why) = format.undo_refusal(layout, log)? {
        plan.refused = Some(format!(
            "{why}; `{}` finishes it instead",
            crate::ops::job::recover_command_for(&layout.table_name(), &layout.job)
        ));
        return Ok(plan);
    }
    for checkpoint in &log.checkpoints {
        for file in &checkpoint.files {
            if layout.store.size(layout, &file.dest)?.is_some() {
                plan.published
                    .push((file.dest.clone(), file.size, file.rows));
            }
        }
    }
    plan.checkpoints = log.checkpoints.len() as u64;
    plan.contract = contract_is_ours(layout, log)?;
    // A table in a bucket keeps its contract, as above.
    plan.contract_before = log
        .started
        .contract_before
        .clone()
        .filter(|_| layout.target.is_none());
    Ok(plan)
}

/// The run recorded the contract and the table has no other job that ran.
fn contract_is_ours(layout: &JobLayout, log: &RunLog) -> Result<bool> {
    // A table in a bucket keeps its contract: which other jobs ran is not in the
    // working copy, and a contract left on a table without data refuses nothing.
    if layout.target.is_some()
        || !log.started.contract_recorded
        || !contract::path(&layout.table).exists()
    {
        return Ok(false);
    }
    if !Manifest::load(&layout.manifest())?.is_empty() {
        return Ok(false);
    }
    let others = crate::core::layout::jobs(&layout.table)?
        .into_iter()
        .filter(|job| *job != layout.job)
        .any(|job| JobLayout::new(&layout.table, &job).journal().exists());
    Ok(!others)
}

/// `--abort` without `--job`: the one interrupted job of the table; several are refused,
/// named, since undoing is not something to do to jobs one did not name.
pub(crate) fn abort_the_interrupted_job(common: &Common, messages: Messages) -> Result<Summary> {
    let interrupted = crate::ops::job::jobs_with_run(common, |log| !log.finished)?;
    match interrupted.as_slice() {
        [] => Ok(Summary::nothing(
            "nothing-to-abort",
            &common.job,
            0,
            std::time::Duration::ZERO,
        )),
        [job] => abort(
            &Common {
                job: job.clone(),
                ..common.clone()
            },
            messages,
        ),
        jobs => Err(crate::core::error::UsageError(format!(
            "{} jobs of {} are interrupted ({}); name the one to undo with --job NAME",
            jobs.len(),
            common.layout().table_name(),
            jobs.join(", ")
        ))
        .into()),
    }
}

/// Undoes the job's interrupted run (steps 1 to 7 above).
pub(crate) fn abort(common: &Common, messages: Messages) -> Result<Summary> {
    let started = Instant::now();
    let layout = common.layout();
    let nothing = || {
        Ok(Summary::nothing(
            "nothing-to-abort",
            &common.job,
            0,
            started.elapsed(),
        ))
    };
    if layout.target.is_none() && !layout.dir.exists() {
        return nothing();
    }
    let Job {
        layout,
        lock: _lock,
        replay,
        ..
    } = Job::open(layout, common.lock_wait)?;
    let Some(log) = replay.log else {
        return nothing();
    };
    if log.finished {
        return nothing();
    }
    let _compactions = crate::ops::job::exclude_compactions(&layout, &log, common.lock_wait)?;
    undo(&layout, &log, replay.valid_len, messages, started)
}

/// Steps 2 to 7 for an interrupted run whose job lock the caller holds (`--recover`
/// calls it for a run whose abort a crash cut short).
pub(crate) fn undo(
    layout: &JobLayout,
    log: &RunLog,
    valid_len: u64,
    messages: Messages,
    started: Instant,
) -> Result<Summary> {
    let plan = plan(layout, log)?;
    if let Some(why) = plan.refused {
        bail!(
            "cannot abort run {} of job {:?}: {why}",
            log.started.run_id,
            layout.job
        );
    }
    let mut journal = Journal::open_append(layout, valid_len)?;
    if !log.aborting {
        journal.append(&Record::Aborting)?;
    }
    failpoint::hit("abort.started.after");
    let removed = remove_published(layout, log, messages)?;
    failpoint::hit("abort.removed.after");
    pending::remove_run(layout, &log.started.run_id)?;
    if plan.contract {
        fsutil::remove_file_if_exists(&contract::path(&layout.table))?;
        fsutil::sync_parent(&contract::path(&layout.table))?;
    }
    if let Some(before) = &plan.contract_before {
        contract::restore(&layout.table, &log.started.run_id, before)?;
    }
    journal.append(&Record::Aborted)?;
    failpoint::hit("abort.finished.after");
    let mut summary = Summary::nothing("aborted", &layout.job, 0, started.elapsed());
    summary.run_id = Some(log.started.run_id.clone());
    summary.files_written = removed.0;
    summary.rows_written = removed.1;
    Ok(summary)
}

/// Step 4: removes the run's files from their final places; returns (files, rows).
/// What the run staged and never published goes first (for a table in a bucket, its
/// open uploads; a directory's staging goes with the run's in step 5).
fn remove_published(layout: &JobLayout, log: &RunLog, messages: Messages) -> Result<(u64, u64)> {
    let uncommitted: Vec<_> = log.uncommitted().flat_map(|c| &c.files).collect();
    layout.store.discard(&uncommitted)?;
    let last = log.last_checkpoint().map_or(0, |c| c.checkpoint);
    layout
        .store
        .discard_unjournaled(&log.started.run_id, last)?;
    let files: Vec<_> = log.checkpoints.iter().flat_map(|c| &c.files).collect();
    // Out of a Delta table in one commit; the files themselves stay for readers of older
    // versions until a VACUUM, as for every Delta delete.
    if let Some((files_out, rows_out)) =
        crate::table::format(log.started.options.table_format)?.uncommit(layout, log, &files)?
    {
        let rejects: Vec<_> = files.into_iter().filter(|f| f.is_rejects()).collect();
        let (n, _) = layout
            .store
            .unpublish(layout, &rejects, &log.started.run_id, messages)?;
        return Ok((files_out + n, rows_out));
    }
    layout
        .store
        .unpublish(layout, &files, &log.started.run_id, messages)
}

/// Explains a stopped run: what is committed, and the command that finishes it.
pub(crate) fn stopped(err: anyhow::Error, common: &Common, layout: &JobLayout) -> anyhow::Error {
    let committed = journal::replay(&layout.journal())
        .ok()
        .and_then(|r| r.log)
        .map(|log| {
            (
                log.checkpoints.len(),
                log.checkpoints.iter().map(|c| c.rows_written).sum::<u64>(),
            )
        })
        .unwrap_or_default();
    let what = format!(
        "{} checkpoint(s) with {} row(s) are committed; `{}` resumes the run",
        committed.0,
        committed.1,
        recover_command(common)
    );
    if let Kind::Stopped { signal } = kind(&err) {
        return Stopped {
            signal,
            detail: what,
        }
        .into();
    }
    if let Ok(replay) = journal::replay(&layout.journal()) {
        if let Some(log) = replay.log.filter(nothing_committed) {
            // A run that failed before its first checkpoint: nothing of it is visible, and
            // keeping it would only make the corrected command refuse to start (and the
            // cron line's `--recover` meet the same bad row again). It goes as it exits.
            let quiet = Messages { quiet: true };
            return match crate::ops::abort::undo(
                layout,
                &log,
                replay.valid_len,
                quiet,
                Instant::now(),
            ) {
                Ok(_) => anyhow::anyhow!(
                    "{err:#}\nnothing was loaded, and the run was removed: fix the cause, then run \
                     the same command again"
                ),
                Err(undo) => anyhow::anyhow!(
                    "{err:#}\nnothing was loaded, and removing the run failed too ({undo:#}): \
                     `{}` removes it",
                    abort_command(common)
                ),
            };
        }
    }
    anyhow::anyhow!(
        "{err:#}\nthe run stopped; {what} once the cause is fixed, or `{}` undoes it as if it \
         had never started",
        abort_command(common)
    )
}
