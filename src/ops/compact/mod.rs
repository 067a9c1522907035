//! `ingest -t TABLE --compact`: each partition's small files rewritten into as few as the
//! target size allows, as one journaled run of job `compact`, with a load's guarantees.
//!
//! A compaction is an overwrite of the partitions it rewrites whose new content is the
//! old content, merged: the run's one checkpoint stages the merged files, and
//! `RunStarted` names the files they replace. From there the overwrite's exchange
//! (`sink/overwrite.rs`) does the rest, step for step:
//!
//! ```text
//! plan        the partitions' small files, in bins of at most the target size
//! RunStarted  the files replaced                                   (journal, fsynced)
//! stage       each bin merged into one file under pending/, fsynced, read back and
//!             checked: same row count, same checksum of the rows   (compact.write.mid,
//!                                                                  compact.verified.after)
//! decide      CheckpointComplete(1), fsynced                       (the commit point)
//! assemble    each partition's shadow: the merged files, and every file not replaced,
//!             linked; fsynced                                      (compact.linked.after)
//! Exchange    journaled; each partition exchanged whole with its shadow
//!             (renameat2 RENAME_EXCHANGE): a reader listing it sees the old files or
//!             the new, never both, never neither
//! Exchanged   then RunFinished; the shadows, now the old directories, are removed
//! ```
//!
//! # Why no row is lost or doubled, wherever it is killed
//! - *Before the commit point*: the table is untouched (the merged files are staged
//!   under `_ingest/`). `--recover` and `--abort` both drop the staging; nothing of the
//!   compaction happened, and `--compact` again starts over.
//! - *After it*: `--recover` goes on exactly as an overwrite's recovery does: assembling
//!   again is safe (a file already moved or linked is there), and a partition whose live
//!   directory already has the shadow's inode is exchanged. `--abort` refuses once the
//!   exchange began, as for an overwrite.
//! - *A Delta table*: the same checkpoint, published under the partitions' paths
//!   (invisible: no version names them), then one commit removes the files replaced and
//!   adds the merged ones, `dataChange: false`, with job `compact`'s txn, so that
//!   `--recover` never commits it twice (`table/delta/mod.rs`). Readers of older versions
//!   keep reading the replaced files until a vacuum.
//! - *Other jobs*: every job holds the table's lock shared while it acts, and a
//!   compaction holds it exclusive (`ops/job.rs`), so no load publishes into a partition
//!   between its listing and its exchange; and a compaction refuses to start while
//!   another job has an interrupted run, whose recovery or abort acts on files by name
//!   (a Hive table's; a Delta run's abort checks the log instead: files of its that a
//!   compaction merged make it refuse, and `--recover` finishes the run).

pub(crate) mod inputs;
pub(crate) mod plan;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};

use crate::core::layout::{JobLayout, COMPACT_JOB};
use crate::core::messages::Messages;
use crate::core::options::{Mode, NewKeys, OnBadInput, RunOptions, TableFormat};
use crate::core::protocol::StagedFile;
use crate::core::records::{Checkpoint, Compaction, RunStarted};
use crate::core::sys::{failpoint, fsutil, signals};
use crate::ops::compact::plan::in_partition;
use crate::ops::job::{nothing_committed, Job};
use crate::ops::report::{PartitionReport, Summary};
use crate::ops::settings::{Common, CompactConfig};
use crate::sink::merge;
use crate::state::contract;
use crate::state::journal::Journal;

/// Compacts the table as `cfg` says.
pub(crate) fn compact(cfg: &CompactConfig, messages: Messages) -> Result<Summary> {
    let common = Common {
        job: COMPACT_JOB.to_string(),
        ..cfg.common.clone()
    };
    let table = &common.table;
    let Some(contract) = table_contract(&common)? else {
        bail!(
            "no ingest table at {}: it has no contract (_ingest/contract.json), so nothing \
             was ever loaded there",
            common.layout().table_name()
        );
    };
    let hive = contract.table_format == TableFormat::Hive;
    if let (true, Some(url)) = (hive, &common.remote) {
        bail!(
            "cannot compact {url}: a bucket cannot swap a partition's files for others in one \
             step (it has no atomic rename of a directory), so readers would see old and new \
             files at once, which is why --mode overwrite-partitions is refused there too; a \
             Delta table in a bucket compacts (its log swaps the files)"
        );
    }
    if hive && contract.partition_by.is_empty() {
        bail!(
            "cannot compact {}: the table is not partitioned, and readers list its files in \
             the table's own directory, which cannot be exchanged in one step for one holding \
             the merged files (a partition's directory can)",
            table.display()
        );
    }
    if contract.table_format == TableFormat::Iceberg {
        // Refused before the compaction job's lock and journal exist.
        bail!("--compact does not rewrite Iceberg tables yet");
    }
    let job = Job::open(common.layout(), common.lock_wait)?;
    let Job {
        layout,
        lock: _lock,
        started,
        mut manifest,
        replay,
    } = job;
    if let Some(log) = replay.log {
        // Past its commit point (and not being undone): `--recover` finishes it.
        if !log.finished && !log.aborting && !nothing_committed(&log) {
            return Err(crate::ops::job::interrupted_error(&common, &log));
        }
        if log.finished {
            crate::ops::finish::fold_finished(&layout, &mut manifest, &log)?;
        } else {
            // Killed before its commit point, or while a compaction was clearing such a
            // run (its abort cut short: an abort of a compaction is refused past the
            // commit point): nothing of it was ever visible.
            let quiet = Messages { quiet: true };
            crate::ops::abort::undo(&layout, &log, replay.valid_len, quiet, started)?;
            messages.note(&format!(
                "cleared compaction run {}, which stopped before its commit point (it changed \
                 nothing)",
                log.started.run_id
            ));
        }
    }
    refuse_interrupted_jobs(&common, hive)?;
    // A Delta table's files are those its current version names, not its directories'.
    let live = crate::table::format(contract.table_format)?.live_files(&layout)?;
    if !hive && live.is_none() {
        bail!("{} has no Delta log: nothing to compact", table.display());
    }
    let inputs = inputs_of(&layout)?;
    let partitions = plan::plan(
        &inputs,
        &contract.partition_by,
        contract.format,
        cfg.target_size,
        &cfg.partitions,
        live.as_ref().map(|l| &l.files[..]),
    )?;
    let reports: Vec<PartitionReport> = partitions.iter().map(plan::Partition::report).collect();
    if partitions.is_empty() || cfg.dry_run {
        let outcome = match (partitions.is_empty(), cfg.dry_run) {
            (true, _) => "nothing-to-compact",
            (false, _) => "would-compact",
        };
        if cfg.dry_run {
            for r in &reports {
                messages.note(&format!(
                    "would merge {} file(s) of {} ({}) into {}",
                    r.files_before,
                    r.partition,
                    indicatif::HumanBytes(r.bytes_before),
                    r.files_after
                ));
            }
        }
        let mut summary = Summary::nothing(outcome, COMPACT_JOB, 0, started.elapsed());
        summary.compacted = Some(reports);
        return Ok(summary);
    }
    if let Some(signal) = signals::requested() {
        return Err(crate::core::error::Stopped {
            signal,
            detail: "before anything was compacted".into(),
        }
        .into());
    }
    if hive {
        crate::sink::overwrite::check_supported(&layout)?;
    }
    let run = started_run(
        &contract,
        &partitions,
        live.map(|l| l.txn_base),
        cfg.target_size,
    );
    let mut journal = Journal::create(&layout, &run)?;
    failpoint::hit("run.started.after");
    let checkpoint = stage(
        &layout,
        &run,
        &partitions,
        &contract,
        &inputs,
        common.threads,
    )?;
    crate::ops::checkpoint::complete_and_commit(&mut journal, &layout, checkpoint, &run)?;
    let log = crate::ops::finish::finish(&layout, &mut journal, &mut manifest)?;
    let mut summary = Summary::from_log("compacted", COMPACT_JOB, &log, started.elapsed());
    summary.compacted = Some(reports);
    Ok(summary)
}

/// The table's contract: in its directory, or, for a table in a bucket, read from
/// there (no lease is taken to read it).
fn table_contract(common: &Common) -> Result<Option<contract::Contract>> {
    #[cfg(feature = "s3")]
    if let Some(url) = &common.remote {
        return crate::state::replica::Remote::with_read_only(url, COMPACT_JOB, |_, scratch| {
            contract::load(scratch)
        });
    }
    contract::load(&common.table)
}

/// Where the compaction reads the files it merges.
fn inputs_of(layout: &JobLayout) -> Result<inputs::Inputs> {
    match &layout.target {
        None => Ok(inputs::Inputs::Dir(layout.table.clone())),
        #[cfg(feature = "s3")]
        Some(url) => Ok(inputs::Inputs::Bucket(
            crate::storage::bucket::Bucket::open(url)?,
        )),
        #[cfg(not(feature = "s3"))]
        Some(url) => bail!("{url}: this ingest was built without object-store support"),
    }
}

/// A Hive table's compaction may not start while another job has an interrupted run:
/// that run's `--recover` publishes files by name and its `--abort` removes them by
/// name, and a compaction in between would have merged them away. A Delta table's may,
/// except over a run whose abort a crash cut short: that abort goes on removing the
/// run's files from the log, which it cannot once some are merged into files holding
/// other rows (an abort under way keeps compactions out itself, `ops/job.rs`).
fn refuse_interrupted_jobs(common: &Common, hive: bool) -> Result<()> {
    let interrupted = crate::ops::job::jobs_with_run(common, |log| {
        log.started.compaction.is_none() && !log.finished && (hive || log.aborting)
    })?;
    if interrupted.is_empty() {
        return Ok(());
    }
    let table = common.layout().table_name();
    let commands: Vec<String> = interrupted
        .iter()
        .map(|job| match hive {
            true => crate::ops::job::recover_command_for(&table, job),
            false => format!("ingest --target {table} --job {job} --abort"),
        })
        .collect();
    let what = match hive {
        true => "have an interrupted run, whose recovery or abort acts on its files by name",
        false => "have an abort under way, which must find every file it committed",
    };
    bail!(
        "cannot compact {table}: job(s) {} {what}; finish them first ({}){}",
        interrupted.join(", "),
        commands.join("; "),
        if hive {
            ", or undo them with --abort"
        } else {
            ""
        }
    )
}

/// The compaction's `RunStarted`: the table's options and the files replaced; a Hive
/// table's in overwrite mode (the partitions are exchanged), a Delta table's in append
/// mode with its transaction base (one commit removes and adds).
fn started_run(
    contract: &contract::Contract,
    partitions: &[plan::Partition],
    delta_txn_base: Option<i64>,
    target_size: u64,
) -> RunStarted {
    let replaces = partitions
        .iter()
        .flat_map(|p| {
            p.bins.iter().flat_map(move |b| {
                b.files
                    .iter()
                    .map(move |f| format!("{}/{}", p.path, f.name))
            })
        })
        .collect();
    RunStarted {
        run_id: crate::ops::run::new_run_id(),
        started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        options: RunOptions {
            delimiter: b',',
            partition_by: contract.partition_by.clone(),
            checkpoint_rows: u64::MAX,
            format: contract.format,
            table_format: contract.table_format,
            catalog: contract.catalog.clone(),
            max_errors: 0,
            schema: None,
            stages: Vec::new(),
            compression: contract.compression,
            target_file_size: Some(target_size),
            mode: match delta_txn_base {
                None => Mode::OverwritePartitions,
                Some(_) => Mode::Append,
            },
            json_new_keys: NewKeys::Error,
            on_bad_input: OnBadInput::Fail,
            fill_missing: false,
        },
        inputs: Vec::new(),
        contract_recorded: false,
        delta_txn_base,
        contract_before: None,
        table_create: None,
        field_ids: Default::default(),
        compaction: Some(Compaction { replaces }),
    }
}

/// Merges each bin into a staged file, each fsynced and checked, and their directory
/// fsynced: the run's one checkpoint, ready to be journaled. `threads` merge bins at
/// once (each bin is one file, read and written by one thread); the files are numbered
/// by bin, whichever thread merges them.
fn stage(
    layout: &JobLayout,
    run: &RunStarted,
    partitions: &[plan::Partition],
    contract: &contract::Contract,
    inputs: &inputs::Inputs,
    threads: usize,
) -> Result<Checkpoint> {
    const CHECKPOINT: u64 = 1;
    let staging = layout.pending_txn(&run.run_id, CHECKPOINT);
    fsutil::create_dir_all_durable(&staging)?;
    fsutil::sync_ancestors(&staging, &layout.table)?;
    let bins: Vec<(&plan::Partition, &plan::Bin)> = partitions
        .iter()
        .flat_map(|p| p.bins.iter().map(move |b| (p, b)))
        .collect();
    let merge_one = |seq: usize| -> Result<StagedFile> {
        let (partition, bin) = bins[seq];
        if let Some(signal) = signals::requested() {
            return Err(crate::core::error::Stopped {
                signal,
                detail: "before the compaction's commit point; the table is unchanged".into(),
            }
            .into());
        }
        let name = format!(
            "part-{COMPACT_JOB}-{}-{CHECKPOINT:06}-{seq:05}.{}",
            run.run_id,
            bin.kind.extension()
        );
        let files: Vec<(String, u64)> = bin
            .files
            .iter()
            .map(|f| (in_partition(&partition.path, &f.name), f.size))
            .collect();
        let fetched = staging.join(format!(".inputs-{seq:05}"));
        let merged = inputs
            .fetch(&files, &fetched)
            .and_then(|paths| merge::merge(bin.kind, &paths, &staging.join(&name), &partition.path))
            .with_context(|| format!("cannot compact partition {}", partition.path))?;
        fsutil::remove_dir_all_durable(&fetched)?;
        let staged = staging
            .strip_prefix(&layout.dir)
            .context("the staging area is outside the job's directory")?
            .join(&name);
        Ok(StagedFile {
            staged: staged.to_string_lossy().into_owned(),
            dest: in_partition(&partition.path, &name),
            size: merged.size,
            rows: merged.rows,
            upload: None,
        })
    };
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<StagedFile>>>> =
        Mutex::new((0..bins.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, bins.len().max(1)) {
            scope.spawn(|| loop {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if seq >= bins.len() {
                    return;
                }
                let result = merge_one(seq);
                let failed = result.is_err();
                if done.fetch_add(1, Ordering::SeqCst) == 0 {
                    failpoint::hit("compact.write.mid");
                }
                if let Ok(mut results) = results.lock() {
                    results[seq] = Some(result);
                }
                if failed {
                    // The others stop at their next bin: the compaction has failed.
                    next.store(bins.len(), Ordering::Relaxed);
                    return;
                }
            });
        }
    });
    let results = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a thread merging files panicked"))?;
    let mut files = Vec::with_capacity(results.len());
    for result in results {
        match result {
            Some(file) => files.push(file?),
            // Never started: an earlier bin failed, and its error comes first.
            None => continue,
        }
    }
    if files.len() != bins.len() {
        bail!("a thread merging files stopped before its last bin");
    }
    fsutil::sync_dir(&staging)?;
    failpoint::hit("compact.verified.after");
    // Durable in the store, still invisible (a bucket's: open multipart uploads).
    let mut staged: Vec<(StagedFile, std::path::PathBuf)> = files
        .into_iter()
        .map(|f| {
            let path = layout.dir.join(&f.staged);
            (f, path)
        })
        .collect();
    layout.store.stage(&mut staged)?;
    let files: Vec<StagedFile> = staged.into_iter().map(|(f, _)| f).collect();
    let rows = files.iter().map(|f| f.rows).sum();
    Ok(Checkpoint {
        checkpoint: CHECKPOINT,
        columns: contract.columns.iter().map(|c| c.name.clone()).collect(),
        files,
        rows_read: rows,
        rows_written: rows,
        ..Checkpoint::empty_last(CHECKPOINT)
    })
}
