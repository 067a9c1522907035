//! `ingest --recover`: roll forward what completed, roll back what did not, resume.
//!
//! 1. Make the journal and the manifest durable, then replay the journal (a torn last
//!    record is ignored and truncated): the crashed process may have written records it
//!    never fsynced, and nothing below may act on a record a power cut could still undo
//!    (`checkpoint.rs`, failure case 6).
//! 2. Publish every completed checkpoint that is not journaled as committed; publishing
//!    is idempotent, so a recovery that crashes here is simply run again.
//! 3. Abort: remove the staging areas and snapshots of checkpoints that never completed,
//!    only under this run's own directories; report anything unrecognised.
//! 4. Check that the inputs still to read are unchanged (metadata now, content hash of
//!    the partly read input's prefix when the source seeks back to its position).
//! 5. Restore stage state from the completed checkpoints' snapshots, resume the source
//!    at the last completed checkpoint's position, and run to the end as usual.

use anyhow::{bail, Context, Result};

use crate::core::error::{kind, Kind, LockHeld, Stopped};
use crate::core::layout::JobLayout;
use crate::core::messages::Messages;
use crate::core::sys::signals;
use crate::ops::checkpoint;
use crate::ops::job::Job;
use crate::ops::pipeline;
use crate::ops::progress::Progress;
use crate::ops::report::Summary;
use crate::ops::settings::Common;
use crate::sink::pending;
use crate::source::{self, discover};
use crate::state::journal::{self, Journal};

/// `--recover` without `--job`: finishes every interrupted job of the table, one after
/// the other, and says "nothing to recover" only when no job is interrupted.
///
/// A job whose lock is held is running (or being recovered) and is left alone: once the
/// others are done the command exits 75, as `--recover` of that job would, so a script
/// retries later. A job whose recovery fails does not stop the others; the first failure
/// is the command's error, the rest are noted.
pub(crate) fn recover_every_job(
    common: &Common,
    max_errors: Option<u64>,
    messages: Messages,
) -> Result<Vec<Summary>> {
    let mut summaries = Vec::new();
    let mut failures: Vec<anyhow::Error> = Vec::new();
    let mut running = Vec::new();
    let jobs = match &common.remote {
        Some(url) => crate::state::jobs_in(url)?,
        None => crate::core::layout::jobs(&common.table)?,
    };
    for job in jobs {
        let layout = JobLayout::new(&common.table, &job);
        // A table in a bucket: each job's lease and journal are read by `recover`.
        let remote = common.remote.is_some();
        if let Some(holder) = crate::ops::job::lock_holder(&layout).filter(|_| !remote) {
            running.push(LockHeld {
                table: common.table.display().to_string(),
                job: job.clone(),
                holder,
            });
            continue;
        }
        if !remote && !layout.journal().exists() {
            continue;
        }
        let one = Common {
            job: job.clone(),
            ..common.clone()
        };
        // Also for a finished run: a crash between RunFinished and the manifest's fold
        // (or the removal of an overwrite's old content) leaves work that is ours.
        match recover(&one, max_errors, messages) {
            Ok(summary) if summary.outcome == "nothing-to-recover" => {}
            Ok(summary) => summaries.push(summary),
            Err(e) if matches!(kind(&e), Kind::Stopped { .. }) => return Err(e),
            // A lock-held error names the job itself.
            Err(e) if kind(&e) == Kind::LockHeld => failures.push(e),
            Err(e) => failures.push(e.context(format!("job {job:?}"))),
        }
    }
    let mut errors = failures
        .into_iter()
        .chain(running.into_iter().map(Into::into));
    if let Some(first) = errors.next() {
        for done in &summaries {
            messages.note(&done.line());
        }
        for other in errors {
            messages.note(&format!("{other:#}"));
        }
        return Err(first);
    }
    if summaries.is_empty() {
        summaries.push(Summary::nothing(
            "nothing-to-recover",
            &common.job,
            0,
            std::time::Duration::ZERO,
        ));
    }
    Ok(summaries)
}

/// Finishes the job's interrupted run; `max_errors` overrides the run's journaled limit.
pub(crate) fn recover(
    common: &Common,
    max_errors: Option<u64>,
    messages: Messages,
) -> Result<Summary> {
    let layout = common.layout();
    if layout.target.is_none() && !layout.dir.exists() {
        return Ok(Summary::nothing(
            "nothing-to-recover",
            &common.job,
            0,
            std::time::Duration::ZERO,
        ));
    }
    let Job {
        layout,
        lock: _lock,
        started,
        mut manifest,
        replay,
    } = Job::open(layout, common.lock_wait)?;
    let nothing = || {
        Ok(Summary::nothing(
            "nothing-to-recover",
            &common.job,
            0,
            started.elapsed(),
        ))
    };
    let Some(log) = replay.log else {
        return nothing();
    };
    if log.finished {
        // A crash between RunFinished and the manifest rewrite: complete the fold.
        crate::ops::finish::fold_finished(&layout, &mut manifest, &log)?;
        return nothing();
    }
    if replay.valid_len != replay.file_len {
        messages.note(&format!(
            "ignoring a torn journal record ({} bytes) left by the crash",
            replay.file_len - replay.valid_len
        ));
    }
    if log.aborting {
        // An abort that a crash cut short: the run is never resumed; finish undoing it.
        messages.note(&format!(
            "run {} was being aborted; finishing the abort",
            log.started.run_id
        ));
        let _compactions = crate::ops::job::exclude_compactions(&layout, &log, common.lock_wait)?;
        return crate::ops::abort::undo(&layout, &log, replay.valid_len, messages, started);
    }
    let mut journal = Journal::open_append(&layout, replay.valid_len)?;
    let rows_here = run_to_end(&layout, &mut journal, common, max_errors, messages, true)?;
    let log = crate::ops::finish::finish(&layout, &mut journal, &mut manifest)?;
    let mut summary =
        Summary::from_log("recovered", &common.job, &log, started.elapsed()).with_rate(rows_here);
    summary.quarantined = crate::ops::quarantine::of_run(&log);
    crate::ops::job::after_signal(summary, common)
}

/// Takes the interrupted run in `journal` to its end: publishes its completed
/// checkpoints, discards what never completed, and resumes the source after the last
/// completed checkpoint (steps 2-5 above). Under `--on-bad-input quarantine`, an input
/// that fails is journaled as set aside and the run resumes again without it, at most
/// once per input. `recovering` says a recovery is resuming another process's run (and
/// says so); otherwise a load goes on after setting an input aside. Returns the rows
/// this process read.
pub(crate) fn run_to_end(
    layout: &JobLayout,
    journal: &mut Journal,
    common: &Common,
    max_errors: Option<u64>,
    messages: Messages,
    recovering: bool,
) -> Result<u64> {
    let mut rows_here = 0;
    let mut passes = 0;
    loop {
        let log = journal::replay(&layout.journal())?
            .log
            .context("the journal lost its run")?;
        let run_id = log.started.run_id.clone();
        for completed in log.uncommitted() {
            checkpoint::commit(journal, layout, completed, &log.started)?;
        }
        let last = log.last_checkpoint();
        let unknown =
            pending::discard_incomplete(layout, &run_id, last.map_or(0, |c| c.checkpoint))?;
        for path in unknown
            .iter()
            .chain(&pending::foreign_runs(layout, Some(&run_id))?)
        {
            messages.note(&format!("left alone: {path} (not owned by run {run_id})"));
        }
        if last.is_some_and(|c| c.last) {
            return Ok(rows_here);
        }
        if log.started.compaction.is_some() {
            // A compaction stopped before its commit point: the table never changed, and
            // its merged files are gone with the staging above. It ends as a run that
            // replaced nothing (`ops/compact/`).
            messages.note(&format!(
                "compaction run {run_id} stopped before its commit point: the table is as it \
                 was; `ingest --target {} --compact` starts it over",
                layout.table_name()
            ));
            crate::ops::checkpoint::complete_and_commit(
                journal,
                layout,
                crate::core::records::Checkpoint::empty_last(1),
                &log.started,
            )?;
            return Ok(rows_here);
        }
        let from = last.map_or(0, |c| c.position.input);
        for (index, recorded) in log.started.inputs.iter().enumerate().skip(from) {
            if log.is_quarantined(index) {
                continue;
            }
            let now = discover::fingerprint(std::path::Path::new(&recorded.path));
            match now {
                Ok(now) if now.same_metadata(recorded) => {}
                _ => bail!(
                    "input {} changed since the interrupted run {run_id} began (or is gone); \
                     recovery would load rows that do not match what was committed. Restore \
                     the original file to finish the run, or undo the run with `{}`",
                    recorded.path,
                    crate::ops::job::abort_command(common)
                ),
            }
        }
        let columns = match last {
            Some(c) => c.columns.clone(),
            None => source::read_columns(&log.started.inputs, log.started.options.delimiter)?
                .unwrap_or_default(),
        };
        let snapshots = log
            .checkpoints
            .iter()
            .flat_map(|c| c.snapshots.iter().cloned())
            .collect();
        if let Some(signal) = signals::requested() {
            let detail = format!(
                "before resuming; `{}` finishes the run",
                crate::ops::job::recover_command(common)
            );
            return Err(Stopped { signal, detail }.into());
        }
        if recovering && passes == 0 {
            let within = last
                .map(|c| &c.position)
                .filter(|p| p.offset > 0)
                .and_then(|p| {
                    let input = log.started.inputs.get(p.input)?;
                    Some(format!(
                        ", at byte {} of {} (read again from byte {})",
                        p.offset,
                        input.path,
                        source::reread_from(p)
                    ))
                })
                .unwrap_or_default();
            messages.note(&format!(
                "resuming run {run_id} after checkpoint {}{within}",
                last.map_or(0, |c| c.checkpoint)
            ));
        }
        let inputs = &log.started.inputs;
        let total: u64 = inputs.iter().map(|i| i.size).sum();
        let resumed_at = last.map_or(0, |c| c.position.input);
        let done: u64 = inputs.iter().take(resumed_at).map(|i| i.size).sum();
        let progress = Progress::start(common.progress, common.quiet, total, done);
        let spec = pipeline::Spec {
            layout,
            run: &log.started,
            columns,
            resume: last,
            snapshots,
            counters: progress.counters.clone(),
            max_errors: max_errors.unwrap_or(log.started.options.max_errors),
            rejects_before: log.checkpoints.iter().map(|c| c.rejects).sum(),
            threads: common.threads,
            skip: log.quarantined.iter().map(|q| q.input).collect(),
        };
        let outcome = pipeline::execute(spec, journal);
        rows_here += progress
            .counters
            .rows
            .load(std::sync::atomic::Ordering::Relaxed);
        progress.finish();
        match outcome {
            Err(e) if passes < inputs.len() && crate::ops::quarantine::sets_aside(&log, &e) => {
                crate::ops::quarantine::set_aside(journal, layout, &e, messages)?;
                passes += 1;
            }
            Err(e) => return Err(crate::ops::abort::stopped(e, common, layout)),
            Ok(()) => return Ok(rows_here),
        }
    }
}
