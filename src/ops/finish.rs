//! The end of a run: the partition exchange of an overwrite and `RunFinished` journaled,
//! then the run's inputs folded into the manifest and its state removed.

use anyhow::{Context, Result};

use crate::core::layout::JobLayout;
use crate::core::options::Mode;
use crate::core::records::{Record, RunLog};
use crate::core::sys::failpoint;
use crate::sink::pending;
use crate::state::journal::{self, Journal};
use crate::state::manifest::Manifest;

/// Journals the end of the run, folds its inputs into the manifest, removes its state.
pub(crate) fn finish(
    layout: &JobLayout,
    journal: &mut Journal,
    manifest: &mut Manifest,
) -> Result<RunLog> {
    // Read once, then kept up to date with what this process appends: a journal of
    // 4,000 partitions' files is about 1 MB of JSON, 12 ms to read again.
    let mut log = journal::replay(&layout.journal())?
        .log
        .context("the journal lost its run")?;
    if log.started.options.mode == Mode::OverwritePartitions {
        let mut appended = Vec::new();
        crate::table::format(log.started.options.table_format)?.replace_partitions(
            layout,
            &log,
            &mut |record| {
                journal.append(record)?;
                appended.push(record.clone());
                Ok(())
            },
        )?;
        for record in appended {
            log.apply(record);
        }
    }
    failpoint::hit("run.finished.before");
    let rows_written = log.checkpoints.iter().map(|c| c.rows_written).sum();
    let finished = Record::RunFinished { rows_written };
    journal.append(&finished)?;
    failpoint::hit("run.finished.after");
    log.apply(finished);
    fold_finished(layout, manifest, &log)?;
    Ok(log)
}

/// A finished run's last step, safe to repeat after a crash at any point of it: its
/// inputs into the manifest, its new keys into the job's key files (`--dedupe-scope
/// job`), then its snapshots and staging removed (the key files are folded from the
/// snapshots, so they go last).
pub(crate) fn fold_finished(
    layout: &JobLayout,
    manifest: &mut Manifest,
    log: &RunLog,
) -> Result<()> {
    manifest.fold(&layout.manifest(), log)?;
    crate::state::keystore::fold(&layout.dir, log)?;
    pending::remove_run(layout, &log.started.run_id)?;
    match &layout.remote {
        Some(remote) => remote.push(),
        None => Ok(()),
    }
}
