//! The coordinator: collects every participant's acknowledgement of checkpoint n, makes
//! `CheckpointComplete(n)` durable in the journal (the commit point), then has the sink
//! publish the checkpoint's files and journals `Committed(n)`.
//!
//! # The commit protocol, failure case by failure case
//! 1. Source emits barrier n with its position; each stage writes a snapshot of its state
//!    and acks; the sink preCommits: it flushes its staged files and acks with them. The
//!    coordinator fsyncs the snapshots, the staged files and their directories (off the
//!    stages' and sink's threads, so the next checkpoint's work overlaps the fsyncs).
//!    *Crash here*: nothing in the journal names checkpoint n. Recovery discards its
//!    staging area and snapshots, and resumes from checkpoint n-1's position.
//! 2. All acks in: append `CheckpointComplete(n)` (position, snapshot refs, staged → final
//!    paths with sizes) and fsync it. *Crash before the fsync*: as in 1 (a torn record is
//!    ignored). *Crash after*: checkpoint n is decided; recovery publishes it.
//! 3. Publish: create every destination directory and fsync, all at once, every
//!    directory above one (up to the table), so that each destination's own name is
//!    durable; only then rename each staged file to its final name without replacing
//!    anything, and fsync the destination directories. *Crash midway*: recovery publishes
//!    again; a file already at its destination with the journaled size counts as done.
//!    *Why the directories first*: the fsync of a destination makes the rename durable
//!    (the staged name is gone for good); had the destination's own name in its parent
//!    not been durable by then, a power cut would keep the rename and lose the directory,
//!    and the file with it: in neither place, and the checkpoint lost. The rule, for
//!    every writer (publish, the overwrite exchange, staging, the manifest, keys,
//!    snapshots): **a directory's name is durable before anything durable is put in it.**
//! 4. Append `Committed(n)`. *Crash before it*: recovery repeats step 3, harmlessly.
//! 5. After the final checkpoint: `RunFinished`, then the manifest absorbs the run's
//!    inputs. *Crash between*: the journal still holds the run; the next start folds it.
//! 6. Every record is appended with a `write` and then an `fsync`. *Crash between the
//!    two* (fail point `journal.write.after`): the record survives in the page cache, so
//!    the next process reads it, yet a power cut would still lose it. That process is
//!    acting on a record nobody made durable: if it published checkpoint n's files (or
//!    exchanged a partition, or folded the run into the manifest) and the power then
//!    failed, the table would show rows no durable record accounts for, and the next
//!    recovery would stage them again and refuse to clobber its own files. The rule:
//!    **whatever a process reads of the job's state in order to act on it is made
//!    durable by that process before its first action.** `journal::replay_settled` and
//!    `Manifest::load_settled` (both through `fsutil::settle`) are the only ways that
//!    recovery and a load read the journal and the manifest. Stage snapshots and staged
//!    files need nothing more: the process that wrote them fsynced them before it wrote
//!    the record that names them (step 1), so any record that can be read names only
//!    durable ones. Directories are the same case one level up: `mkdir` is durable only
//!    once its parent is fsynced (fail point `mkdir.after` sits between), and a later
//!    process that finds a directory cannot tell, so every writer fsyncs the whole chain
//!    of directories above what it makes durable (`fsutil::sync_ancestors`), up to the
//!    table's own name in its parent.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Result};

use crate::core::counters::Counters;
use crate::core::layout::JobLayout;
use crate::core::protocol::{Ack, Flushed, InputDone, Position, SnapshotRef};
use crate::core::records::{Checkpoint, Record, RunStarted};
use crate::core::sys::failpoint;
use crate::sink;
use crate::state::journal::Journal;
use crate::table;

#[derive(Default)]
struct Partial {
    acks: usize,
    source: Option<(Position, Vec<InputDone>, u64, bool)>,
    snapshots: Vec<SnapshotRef>,
    /// Each sink's preCommit (several sinks split the partitions).
    sinks: Vec<Box<dyn Flushed>>,
}

/// Turns acknowledgements into durable, committed checkpoints.
pub(crate) struct Coordinator<'a> {
    journal: &'a mut Journal,
    layout: &'a JobLayout,
    columns: Vec<String>,
    run: &'a RunStarted,
    participants: usize,
    sinks: usize,
    partial: BTreeMap<u64, Partial>,
    finished: bool,
    last_committed: Option<u64>,
    counters: Arc<Counters>,
}

impl<'a> Coordinator<'a> {
    /// A coordinator expecting acks from a source, `stages` stages and `sinks` sinks.
    pub(crate) fn new(
        journal: &'a mut Journal,
        layout: &'a JobLayout,
        columns: Vec<String>,
        run: &'a RunStarted,
        (stages, sinks): (usize, usize),
        counters: Arc<Counters>,
    ) -> Self {
        Coordinator {
            journal,
            layout,
            columns,
            run,
            participants: stages + 1 + sinks,
            sinks,
            partial: BTreeMap::new(),
            finished: false,
            last_committed: None,
            counters,
        }
    }

    /// The last checkpoint this coordinator committed.
    pub(crate) fn last_committed(&self) -> Option<u64> {
        self.last_committed
    }

    /// True once the final checkpoint is committed.
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Records one ack; completes and commits the checkpoint when it was the last one.
    pub(crate) fn on_ack(&mut self, ack: Ack) -> Result<()> {
        let n = match &ack {
            Ack::Source { checkpoint, .. }
            | Ack::Stage { checkpoint, .. }
            | Ack::Sink { checkpoint, .. } => *checkpoint,
        };
        let partial = self.partial.entry(n).or_default();
        partial.acks += 1;
        match ack {
            Ack::Source {
                position,
                inputs_done,
                rows_read,
                last,
                ..
            } => partial.source = Some((position, inputs_done, rows_read, last)),
            Ack::Stage { snapshot, .. } => partial.snapshots.extend(snapshot),
            Ack::Sink { flushed, .. } => partial.sinks.push(flushed),
        }
        if partial.acks < self.participants {
            return Ok(());
        }
        let Some(partial) = self.partial.remove(&n) else {
            return Ok(());
        };
        if let Some(earlier) = self.partial.keys().next().filter(|&&k| k < n) {
            bail!("checkpoint {n} completed before checkpoint {earlier}: barriers overtook each other");
        }
        let Some((position, inputs_done, rows_read, last)) = partial.source else {
            bail!("checkpoint {n} was acknowledged without its source");
        };
        if partial.sinks.len() != self.sinks {
            bail!(
                "checkpoint {n} was acknowledged by {} of its {} sinks",
                partial.sinks.len(),
                self.sinks
            );
        }
        let flushed = Box::new(sink::Shards(partial.sinks));
        let (rows_written, rejects) = (flushed.rows(), flushed.rejects());
        crate::state::snapshots::make_durable(&self.layout.dir, &partial.snapshots)?;
        let files = flushed.make_durable()?;
        let checkpoint = Checkpoint {
            checkpoint: n,
            position,
            columns: self.columns.clone(),
            inputs_done,
            snapshots: partial.snapshots,
            files,
            rows_read,
            rows_written,
            rejects,
            last,
        };
        complete_and_commit(self.journal, self.layout, checkpoint, self.run)?;
        self.finished = last;
        self.last_committed = Some(n);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Steps 2 to 4 of the protocol for one checkpoint.
pub(crate) fn complete_and_commit(
    journal: &mut Journal,
    layout: &JobLayout,
    checkpoint: Checkpoint,
    run: &RunStarted,
) -> Result<()> {
    failpoint::hit("checkpoint.complete.before");
    journal.append(&Record::CheckpointComplete(checkpoint.clone()))?;
    failpoint::hit("checkpoint.complete.after");
    commit(journal, layout, &checkpoint, run)
}

/// Steps 3 and 4: publish a completed checkpoint (for a Delta table, and commit it to
/// the table's log: `table/delta/mod.rs`) and journal it. Idempotent, so that recovery
/// runs the very same code.
pub(crate) fn commit(
    journal: &mut Journal,
    layout: &JobLayout,
    checkpoint: &Checkpoint,
    run: &RunStarted,
) -> Result<()> {
    sink::publish(layout, checkpoint, run.options.mode)?;
    table::format(run.options.table_format)?.commit(layout, run, checkpoint)?;
    journal.append(&Record::Committed {
        checkpoint: checkpoint.checkpoint,
    })?;
    failpoint::hit("checkpoint.committed.after");
    Ok(())
}
