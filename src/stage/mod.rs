//! Transform stages and the runner that feeds them batches and barriers.
//!
//! The stages run in order on one thread (a chain) between two bounded channels. On a
//! barrier each snapshots whatever state it has and acknowledges the checkpoint to the
//! coordinator, then the barrier goes on, so the records before barrier n are exactly
//! those reflected in every snapshot of n.

pub(crate) mod cast;
pub(crate) mod clean;
pub(crate) mod context;
pub(crate) mod dedupe;
pub(crate) mod expr;
mod keyset;
pub(crate) mod reshape;
pub(crate) mod spec;

use std::sync::mpsc::{Receiver, Sender, SyncSender};

use anyhow::{anyhow, bail, Result};

use crate::core::batch::{Msg, RecordBatch, Reject, MAX_RECORD_BYTES};
use crate::core::protocol::{Ack, SnapshotWriter};
use crate::core::sys::failpoint;

/// One transform of the pipeline.
///
/// # Invariants
/// - `process` sees every record exactly once per run, in source order, including across
///   a crash: after `restore`, records before the restored checkpoint are never re-sent.
/// - `snapshot(n)` captures the state after every record before barrier n and nothing
///   after; a stage whose state did not change may return `None`. It is not called for
///   the run's final barrier, whose state no run ever resumes from, unless the stage
///   `keeps_final_state` (a job-scope dedupe, whose keys outlive the run).
/// - `restore` receives every snapshot the stage returned, for every completed
///   checkpoint, in order: stages may therefore write deltas rather than whole states.
pub(crate) trait Stage: Send {
    /// The stage's name in snapshots and messages.
    fn name(&self) -> &'static str;
    /// Transforms a batch in place (dropping records is allowed).
    fn process(&mut self, batch: &mut RecordBatch) -> Result<()>;
    /// Serializes the state change since the previous snapshot into `out`, which the
    /// caller hands over empty and reuses (left empty: nothing changed). Stateless stages
    /// keep the default.
    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<()> {
        let _ = out;
        Ok(())
    }
    /// True when the state at the run's final barrier is wanted too (it outlives the
    /// run): the runner then snapshots that barrier as well.
    fn keeps_final_state(&self) -> bool {
        false
    }
    /// Applies one serialized snapshot, in checkpoint order.
    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        let _ = bytes;
        bail!(
            "stage {} keeps no state, yet a snapshot names it",
            self.name()
        )
    }
}

/// Sets rows aside as rejects, encoded as they are now (call before changing columns),
/// and drops them from the batch.
pub(crate) fn set_aside(
    batch: &mut RecordBatch,
    bad: Vec<(usize, String)>,
    change: impl FnOnce(&mut RecordBatch),
) {
    let rejects: Vec<Reject> = bad
        .iter()
        .map(|(row, reason)| Reject {
            input: batch.input(*row),
            line: batch.line(*row),
            reason: reason.clone(),
            record: batch.encode_row(*row),
        })
        .collect();
    change(batch);
    if !bad.is_empty() {
        let mut keep = vec![true; batch.len()];
        for (row, _) in &bad {
            keep[*row] = false;
        }
        batch.retain(&keep);
        batch.rejects.extend(rejects);
    }
}

/// The output row under construction in [`rebuild`]: cells in a reused buffer.
#[derive(Default)]
pub(crate) struct Cells {
    buf: Vec<u8>,
    spans: Vec<Option<(usize, usize)>>,
}

impl Cells {
    /// Appends a cell (`None` is null).
    pub(crate) fn push(&mut self, value: Option<&[u8]>) {
        self.spans.push(value.map(|v| {
            let start = self.buf.len();
            self.buf.extend_from_slice(v);
            (start, self.buf.len())
        }));
    }
}

/// Rebuilds a batch row by row into `width` columns: `row_fn` fills the output cells of
/// a row, or returns why the row is bad (it then goes to the rejects, as it was).
///
/// Hot path: one output batch per input batch and one reused cell buffer; no allocation
/// per row.
pub(crate) fn rebuild(
    batch: &mut RecordBatch,
    width: usize,
    mut row_fn: impl FnMut(&RecordBatch, usize, &mut Cells) -> Result<(), String>,
) {
    let mut out = batch.successor(width);
    let mut cells = Cells::default();
    let mut bad = Vec::new();
    for row in 0..batch.len() {
        cells.buf.clear();
        cells.spans.clear();
        match row_fn(batch, row, &mut cells) {
            // A batch's offsets are u32s: no record may outgrow what the reader allows.
            Ok(()) if cells.buf.len() + width > MAX_RECORD_BYTES => bad.push((
                row,
                format!(
                    "the record would hold {} bytes, more than the {MAX_RECORD_BYTES} a record may hold",
                    cells.buf.len() + width
                ),
            )),
            Ok(()) => {
                debug_assert_eq!(cells.spans.len(), width);
                for span in &cells.spans {
                    out.push_cell(span.map(|(a, b)| &cells.buf[a..b]));
                }
                out.end_row(batch.input(row), batch.line(row));
            }
            Err(reason) => bad.push((row, reason)),
        }
    }
    // Rejected rows keep their input form: encode them from the old batch.
    let mut old = std::mem::replace(batch, out);
    old.rejects.clear();
    for (row, reason) in bad {
        let record = old.encode_row(row);
        batch.rejects.push(crate::core::batch::Reject {
            input: old.input(row),
            line: old.line(row),
            reason,
            record,
        });
    }
}

/// Runs a chain of stages on one thread until its input ends.
///
/// Chaining (as stream processors chain operators into one task) keeps a batch on one
/// core through every stage: no hand-over between threads per stage, and no more threads
/// than the machine has cores for source, stages and sink. A barrier passes through the
/// stages in order: each snapshots and acknowledges it before the next one sees it, so
/// every snapshot of checkpoint n reflects exactly the records before barrier n.
pub(crate) fn run(
    mut chain: Vec<(String, Box<dyn Stage>)>,
    input: Receiver<Msg>,
    output: SyncSender<Msg>,
    acks: Sender<Ack>,
    store: impl SnapshotWriter,
) -> Result<()> {
    let stopped = |_| anyhow!("the pipeline stopped");
    // Reused for every snapshot: a checkpoint's delta can be tens of megabytes, and
    // memory that was just written is far cheaper to fill than pages the kernel must
    // find and zero again each time.
    let mut bytes = Vec::new();
    for msg in input {
        match msg {
            Msg::Batch(mut batch) => {
                for (_, stage) in &mut chain {
                    stage.process(&mut batch)?;
                }
                if !batch.is_empty() || !batch.rejects.is_empty() {
                    output.send(Msg::Batch(batch)).map_err(stopped)?;
                }
            }
            Msg::Barrier(barrier) => {
                for (id, stage) in &mut chain {
                    failpoint::hit("stage.snapshot.before");
                    bytes.clear();
                    // The final checkpoint's state is never read: recovery resumes after
                    // an incomplete run's last checkpoint, and only commits a complete
                    // one. Not writing it keeps a large dedupe delta (and its fsync)
                    // off the end of every load.
                    if !barrier.last || stage.keeps_final_state() {
                        stage.snapshot(&mut bytes)?;
                    }
                    let snapshot = if bytes.is_empty() {
                        None
                    } else {
                        Some(store.write(id, barrier.checkpoint, &bytes)?)
                    };
                    failpoint::hit("stage.snapshot.after");
                    acks.send(Ack::Stage {
                        checkpoint: barrier.checkpoint,
                        snapshot,
                    })
                    .map_err(|_| anyhow!("the coordinator stopped"))?;
                }
                output.send(Msg::Barrier(barrier)).map_err(stopped)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::protocol::{Barrier, SnapshotRef};
    use crate::core::schema::Schema;

    /// The snapshot each barrier's ack names, after a batch of two new keys before each.
    fn acks_for(barriers: &[Barrier]) -> Vec<Option<SnapshotRef>> {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::state::snapshots::SnapshotStore::new(dir.path(), "run");
        std::fs::create_dir_all(store.dir()).unwrap();
        let names = ["id".to_string()];
        let dedupe = dedupe::Dedupe::new(&names, &Schema::strings(&names)).unwrap();
        let chain: Vec<(String, Box<dyn Stage>)> = vec![("dedupe".into(), Box::new(dedupe))];
        let (in_tx, in_rx) = std::sync::mpsc::channel();
        let (out_tx, out_rx) = std::sync::mpsc::sync_channel(16);
        let (ack_tx, ack_rx) = std::sync::mpsc::channel();
        for (i, barrier) in barriers.iter().enumerate() {
            let mut batch = RecordBatch::new(1);
            batch.push([format!("a{i}").as_bytes()], 0, 2);
            batch.push([format!("b{i}").as_bytes()], 0, 3);
            in_tx.send(Msg::Batch(batch)).unwrap();
            in_tx.send(Msg::Barrier(*barrier)).unwrap();
        }
        drop(in_tx);
        run(chain, in_rx, out_tx, ack_tx, store).unwrap();
        assert_eq!(out_rx.iter().count(), 2 * barriers.len());
        ack_rx
            .iter()
            .map(|ack| match ack {
                Ack::Stage { snapshot, .. } => snapshot,
                _ => panic!("a stage acked as another component"),
            })
            .collect()
    }

    #[test]
    fn every_barrier_but_the_final_one_gets_a_snapshot() {
        let barrier = |checkpoint, last| Barrier { checkpoint, last };
        let acks = acks_for(&[barrier(1, false), barrier(2, false), barrier(3, true)]);
        let lens: Vec<Option<u64>> = acks.iter().map(|a| a.as_ref().map(|s| s.len)).collect();
        assert_eq!(lens, [Some(32), Some(32), None]);
    }
}
