//! Wires one run's pipeline: source → stages (chained on one thread) → sink, joined by
//! bounded channels, with the coordinator on the calling thread collecting acks.
//!
//! Memory stays flat whatever the input size and the rows' width: at most
//! `CHANNEL_DEPTH` batches (`TWO_THREAD_DEPTH` from source to sink when they are the
//! only threads) wait on each channel, each at most 4096 rows or about 1 MiB. If any
//! part fails, the others stop at their next batch and the first
//! real error is reported; whatever completed stays committed and resumable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel};
use std::sync::{Arc, OnceLock};
use std::thread;

use anyhow::{anyhow, bail, Result};

use crate::core::batch;
use crate::core::counters::Counters;
use crate::core::layout::JobLayout;
use crate::core::protocol::{Fingerprint, SnapshotRef};
use crate::core::records::{Checkpoint, RunStarted};
use crate::core::schema::Schema;
use crate::core::sys::fsutil;
use crate::ops::checkpoint::Coordinator;
use crate::sink::{self, Output, Rejects, SinkShare, TableSink};
use crate::source::{self, SourcePlan};
use crate::stage::context::RunContext;
use crate::stage::spec;
use crate::stage::{self, Stage};
use crate::state::journal::Journal;
use crate::state::keystore;
use crate::state::snapshots::SnapshotStore;

/// Batches in flight per channel (and recycled from sink to source). Three threads
/// share two cores: with 4, a consumer descheduled for a time slice soon stalled its
/// producer too; 16 (about 10 MB per channel) let the 1 GB plain load go from 2.52 to
/// 2.28-2.45 s.
const CHANNEL_DEPTH: usize = 16;

/// Batches in flight from the source to the sink when they are the only two threads
/// (see [`Threads::for_load`]). The source is the longer of the two, yet it still slept
/// on a full channel 190 times per 1 GB load (`perf record -e sched:sched_switch`) while
/// the sink was held up (a checkpoint's new files, the coordinator on its core): idle
/// CPU fell from 0.41-0.53 s to 0.35-0.36 s with 32 (`/proc/stat`, three alternated
/// runs of 6-8 rounds), and 64 took it to 0.17 s but the peak RSS to 70-80 MiB. With
/// 32: 31-42 MiB at 100 MB, 46-50 MiB at 1 GB (`bench.py --scaling`, `/usr/bin/time`).
const TWO_THREAD_DEPTH: usize = 32;

/// Routed batches waiting per sink when several sinks share the partitions. Every sink
/// gets every batch (each takes its own partitions' rows), so the batches held are the
/// router's input plus the slowest sink's queue: 16 more there took the 1 GB load at
/// `--threads 4` to 67 MiB peak RSS, over the 64 MiB a plain load may use.
const OUTLET_DEPTH: usize = 4;

/// What one execution of the pipeline starts from.
pub(crate) struct Spec<'a> {
    pub(crate) layout: &'a JobLayout,
    pub(crate) run: &'a RunStarted,
    pub(crate) columns: Vec<String>,
    /// The last completed checkpoint when resuming.
    pub(crate) resume: Option<&'a Checkpoint>,
    /// Every stage snapshot of the completed checkpoints, in order.
    pub(crate) snapshots: Vec<SnapshotRef>,
    pub(crate) counters: Arc<Counters>,
    /// Bad rows allowed into the rejects (0: the first fails the run).
    pub(crate) max_errors: u64,
    /// Bad rows the completed checkpoints already sent to the rejects.
    pub(crate) rejects_before: u64,
    /// Threads parsing at once (`--threads`).
    pub(crate) threads: usize,
    /// Inputs of the run set aside (`--on-bad-input quarantine`): never read.
    pub(crate) skip: std::collections::BTreeSet<usize>,
}

/// A stage with the id its snapshots are filed under.
type IdentifiedStage = (String, Box<dyn Stage>);

/// The bytes the parser will read from `inputs` in all, as their sizes on disk tell; 0
/// (unknown) if any is compressed.
fn decoded_bytes(inputs: &[Fingerprint]) -> u64 {
    if inputs
        .iter()
        .any(|i| source::reader::is_compressed(&i.path))
    {
        return 0;
    }
    inputs.iter().map(|i| i.size).sum()
}

/// Builds the stages the options ask for, each with its snapshot id, restored from
/// `snapshots`; returns them with the schema the sink receives.
fn build_stages(spec: &Spec) -> Result<(Vec<IdentifiedStage>, Schema)> {
    let run = spec.run;
    let ctx = RunContext {
        run_id: run.run_id.clone(),
        started_at: run.started_at.clone(),
        inputs: run.inputs.iter().map(|i| i.path.clone()).collect(),
        input_bytes: decoded_bytes(&run.inputs),
    };
    let (built, schema) = spec::build(&run.options.stages, &Schema::strings(&spec.columns), &ctx)?;
    let mut stages = Vec::with_capacity(built.len());
    for (i, mut stage) in built.into_iter().enumerate() {
        // Snapshots are named by position, so two stages of a kind never mix.
        let id = format!("{}-{}", i + 1, stage.name());
        if let Some(crate::core::spec::StageSpec::Dedupe {
            key,
            scope: crate::core::spec::DedupeScope::Job,
            retention,
        }) = run.options.stages.get(i)
        {
            // The keys of the job's earlier runs first, then the run's own snapshots.
            let cutoff = keystore::cutoff(&run.started_at, retention.as_deref())?;
            for bytes in keystore::restore_bytes(&keystore::path(&spec.layout.dir, key), cutoff)? {
                stage.restore(&bytes)?;
            }
        }
        // Every snapshot the stage wrote in the completed checkpoints, in order.
        for snapshot in spec.snapshots.iter().filter(|s| s.stage == id) {
            stage.restore(&SnapshotStore::read(&spec.layout.dir, snapshot)?)?;
        }
        stages.push((id, stage));
    }
    Ok((stages, schema))
}

fn sink_for(spec: &Spec, schema: &Schema, first_checkpoint: u64) -> Result<TableSink> {
    let run = spec.run;
    let rejects_before = spec.resume.map_or(0, |_| spec.rejects_before);
    TableSink::new(
        spec.layout,
        &run.run_id,
        schema,
        &run.options.partition_by,
        first_checkpoint,
        Output {
            format: run.options.format,
            compression: run.options.compression,
            target_file_size: run.options.target_file_size,
            data_dir: run.options.table_format.data_dir(),
        },
        Rejects {
            inputs: run.inputs.iter().map(|i| i.path.clone()).collect(),
            max: spec.max_errors,
            before: rejects_before,
            per_input: run.options.on_bad_input == crate::core::options::OnBadInput::Quarantine,
        },
    )
    .map(|sink| sink.with_field_ids(&run.field_ids))
}

/// How a load's `--threads` are spent beside the source's own thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Threads {
    /// Parse workers (`source/parallel.rs`); 0: the source thread parses.
    pub(crate) workers: usize,
    /// Sinks splitting the partitions (`sink/router.rs`), with a router in front when
    /// there are several and no `spread_from`.
    pub(crate) sinks: usize,
    /// Partitions a checkpoint has before the sinks past the first take any; 0: every
    /// sink from the first row. With a mark, the first sink routes on its own thread.
    pub(crate) spread_from: usize,
}

/// Partitions in a checkpoint from which a two-thread load's second sink takes some.
/// At 4,000 the one sink's thread is the bottleneck at 100% of a core while the
/// source's leaves about half of the other idle (`perf`): two sinks took 2.43 s against
/// 2.70 s, and 2.17 s against 2.28 s at 2,000; at 1,480 they were even (1.91 s against
/// 1.87 s), and at 1,000, 400 and 280 one sink was up to 6% faster (2,000,000 orders,
/// `-p country,b`, medians of 5 alternated rounds, journaled ext4, 2026-12-07).
pub(crate) const SPREAD_FROM: usize = 1536;

/// The mark: [`SPREAD_FROM`] or `INGEST_SPREAD_FROM` (tests set a low one to put two
/// sinks under a small load).
fn spread_from() -> usize {
    static FROM: OnceLock<usize> = OnceLock::new();
    *FROM.get_or_init(|| {
        std::env::var("INGEST_SPREAD_FROM")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(SPREAD_FROM)
    })
}

impl Threads {
    /// Up to two threads: the source's and one sink's, as the default on two cores, and
    /// at two a second sink that takes partitions only once a checkpoint has
    /// [`SPREAD_FROM`]. On two cores the sink alone keeps one busy, and parse workers
    /// or a second sink beside it only take turns with it (`bench.py --scaling`:
    /// --threads 1 at 0.83-0.86 of the time of two parse workers, 1 GB in 4 files and in
    /// 1; two sinks no faster than one over 40 partitions). Beyond, the sink's work
    /// (encoding, copying, the kernel's page-cache copy: 47-50% of a plain load's
    /// samples) about equals the parsing (40%): half the threads write, the rest parse
    /// (at least two workers, so chunks finish out of order even on one core; never
    /// more than the cores).
    pub(crate) fn for_load(threads: usize) -> Threads {
        if threads <= 2 {
            return Threads {
                workers: 0,
                sinks: threads.clamp(1, 2),
                spread_from: spread_from(),
            };
        }
        let sinks = (threads / 2).min(sink::router::MAX_SINKS);
        Threads {
            workers: (threads - sinks - 1).max(2),
            sinks,
            spread_from: 0,
        }
    }
}

/// Checks that the options fit the columns, before anything is journaled; returns the
/// schema the sink would receive (the table contract's columns).
pub(crate) fn validate(layout: &JobLayout, run: &RunStarted, columns: &[String]) -> Result<Schema> {
    let spec = Spec {
        layout,
        run,
        columns: columns.to_vec(),
        resume: None,
        snapshots: Vec::new(),
        counters: Arc::default(),
        max_errors: run.options.max_errors,
        rejects_before: 0,
        threads: 1,
        skip: Default::default(),
    };
    let (_, schema) = build_stages(&spec)?;
    sink_for(&spec, &schema, 1)?;
    Ok(schema)
}

/// Runs the pipeline to the final checkpoint, committing each checkpoint as it completes.
pub(crate) fn execute(spec: Spec, journal: &mut Journal) -> Result<()> {
    let run = spec.run;
    let (stages, schema) = build_stages(&spec)?;
    let store = SnapshotStore::new(&spec.layout.dir, &run.run_id);
    if !stages.is_empty() {
        fsutil::create_dir_all_durable(&store.dir())?;
        fsutil::sync_ancestors(&store.dir(), &spec.layout.dir)?;
    }
    let first_checkpoint = spec.resume.map_or(1, |c| c.checkpoint + 1);
    let Threads {
        workers,
        sinks,
        spread_from,
    } = Threads::for_load(spec.threads);
    let table_sinks = (0..sinks)
        .map(|index| {
            let shard = SinkShare {
                index,
                count: sinks,
            };
            Ok(sink_for(&spec, &schema, first_checkpoint)?.into_shard(shard))
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = SourcePlan {
        inputs: run.inputs.clone(),
        columns: spec.columns.clone(),
        delimiter: run.options.delimiter,
        drop_new_keys: run.options.json_new_keys == crate::core::options::NewKeys::Drop,
        checkpoint_rows: run.options.checkpoint_rows,
        workers,
        first_checkpoint,
        resume: spec.resume.map(|c| c.position.clone()),
        skip: spec.skip.clone(),
        fill_missing: run.options.fill_missing,
        counters: spec.counters.clone(),
    };
    let nstages = stages.len();
    let cancel = Arc::new(AtomicBool::new(false));
    let (ack_tx, ack_rx) = channel();

    thread::scope(|scope| {
        let depth = if workers == 0 {
            TWO_THREAD_DEPTH
        } else {
            CHANNEL_DEPTH
        };
        let (tx, mut rx) = sync_channel(depth);
        let (returns, spares) = batch::recycling(CHANNEL_DEPTH);
        let mut handles = Vec::new();
        let (acks, flag) = (ack_tx.clone(), cancel.clone());
        let named = |name: &str| thread::Builder::new().name(format!("ingest-{name}"));
        let source =
            named("source").spawn_scoped(scope, move || source::run(plan, tx, spares, acks, flag));
        handles.push(("source", source));
        if !stages.is_empty() {
            let (tx, next_rx) = sync_channel(CHANNEL_DEPTH);
            let (acks, store) = (ack_tx.clone(), store.clone());
            let input = std::mem::replace(&mut rx, next_rx);
            let handle = named("stages")
                .spawn_scoped(scope, move || stage::run(stages, input, tx, acks, store));
            handles.push(("stages", handle));
        }
        let router = table_sinks[0].router(sinks).spreading_from(spread_from);
        // Each sink's window of checkpoints in flight (`sink/window.rs`).
        let (releases, permits): (Vec<_>, Vec<_>) =
            (0..sinks).map(|_| sink::window::window()).unzip();
        let mut jobs: Vec<_> = table_sinks.into_iter().zip(permits).collect();
        // One sink, or a spreading mark: the first sink routes on its own thread as it
        // reads the pipeline's output; otherwise a router thread feeds every sink.
        let inline = sinks == 1 || spread_from > 0;
        let first = inline.then(|| jobs.remove(0));
        let mut outlets = Vec::with_capacity(sinks);
        for (sink, permits) in jobs {
            let (tx, work) = sync_channel(OUTLET_DEPTH);
            outlets.push(tx);
            let (acks, returns) = (ack_tx.clone(), returns.clone());
            let name = format!("sink-{}", sink.shard_index());
            let handle = named(&name).spawn_scoped(scope, move || {
                sink::run(sink, work, returns, (acks, permits), nstages == 0)
            });
            handles.push(("sink", handle));
        }
        let handle = match first {
            Some((sink, permits)) => {
                let acks = ack_tx.clone();
                named("sink").spawn_scoped(scope, move || {
                    let work = sink::route_inline(router, rx, outlets);
                    sink::run(sink, work, returns, (acks, permits), nstages == 0)
                })
            }
            None => named("router").spawn_scoped(scope, move || sink::route(router, rx, outlets)),
        };
        handles.push((if inline { "sink" } else { "router" }, handle));
        drop(ack_tx);

        let mut coordinator = Coordinator::new(
            journal,
            spec.layout,
            spec.columns.clone(),
            spec.run,
            (nstages, sinks),
            spec.counters.clone(),
        );
        let mut outcome = Ok(());
        for ack in ack_rx.iter() {
            let committed = coordinator.last_committed();
            if let Err(e) = coordinator.on_ack(ack) {
                outcome = Err(e);
                break;
            }
            if coordinator.last_committed() != committed {
                releases.iter().for_each(sink::window::Release::give);
            }
        }
        let finished = coordinator.finished();
        cancel.store(true, Ordering::Relaxed);
        drop(ack_rx);
        // Wakes a sink waiting for a permit.
        drop(releases);

        let mut errors = Vec::new();
        for (name, handle) in handles {
            let handle = match handle {
                Ok(handle) => handle,
                Err(e) => {
                    errors.push(anyhow!("cannot start the {name} thread: {e}"));
                    continue;
                }
            };
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(anyhow!("internal error: the {name} thread panicked")),
            }
        }
        if let Err(e) = outcome {
            errors.push(e);
        }
        // Secondary errors ("the pipeline stopped") only echo the first real one.
        if let Some(pos) = errors
            .iter()
            .position(|e| !crate::core::bad_input::is_echo(e))
        {
            return Err(errors.swap_remove(pos));
        }
        if let Some(e) = errors.into_iter().next() {
            return Err(e);
        }
        if !finished {
            bail!("the pipeline ended before its final checkpoint");
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_go_half_to_sinks_and_the_rest_to_parsing() {
        let split = |threads| {
            let t = Threads::for_load(threads);
            (t.workers, t.sinks, t.spread_from)
        };
        assert_eq!(split(1), (0, 1, SPREAD_FROM));
        assert_eq!(
            split(2),
            (0, 2, SPREAD_FROM),
            "two threads: a second sink once a checkpoint has many partitions"
        );
        assert_eq!(split(3), (2, 1, 0));
        assert_eq!(split(4), (2, 2, 0));
        assert_eq!(split(8), (3, 4, 0));
        assert_eq!(split(64), (31, 32, 0));
        assert_eq!(split(1024).1, sink::router::MAX_SINKS);
    }

    #[test]
    fn compressed_inputs_leave_the_decoded_size_unknown() {
        let input = |path: &str, size| Fingerprint {
            path: path.into(),
            size,
            mtime_ns: 0,
            dev: 0,
            ino: 0,
            etag: None,
        };
        assert_eq!(
            decoded_bytes(&[input("a.csv", 10), input("b.jsonl", 5)]),
            15
        );
        assert_eq!(
            decoded_bytes(&[input("a.csv", 10), input("b.csv.gz", 5)]),
            0
        );
        assert_eq!(decoded_bytes(&[input("a.jsonl.zst", 10)]), 0);
        assert_eq!(decoded_bytes(&[]), 0);
    }
}
