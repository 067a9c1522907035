//! A load from start to finish: lock the job, refuse to start over an interrupted run,
//! pick the inputs the manifest does not know, journal the run, execute the pipeline,
//! finish. Recovery (`recover.rs`) shares `finish` and the pipeline.

use std::fs::File;
use std::time::{Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::config::{Common, LoadConfig};
use crate::exit::LockHeld;
use crate::failpoint;
use crate::fsutil::{self, LockError};
use crate::journal::{self, Journal, Record, RunLog, RunStarted};
use crate::manifest::{Manifest, Status};
use crate::pipeline;
use crate::report::{Messages, Summary};
use crate::sink::pending;
use crate::source::{self, discover};
use crate::table::JobLayout;

/// Creates the job's directory and takes its lock, or fails with `LockHeld` (exit 75).
pub fn lock_job(layout: &JobLayout) -> Result<File> {
    fsutil::create_dir_all_durable(&layout.dir)?;
    let now = humantime::format_rfc3339_seconds(SystemTime::now());
    let note = format!("pid {} since {now}", std::process::id());
    match fsutil::try_lock(&layout.lock(), &note) {
        Ok(file) => Ok(file),
        Err(LockError::Held(holder)) => Err(LockHeld {
            table: layout.table.display().to_string(),
            job: layout.job.clone(),
            holder,
        }
        .into()),
        Err(LockError::Other(e)) => Err(e),
    }
}

/// The error for a load that would start over an interrupted run.
pub fn interrupted_error(common: &Common, log: &RunLog) -> anyhow::Error {
    anyhow::anyhow!(
        "job {:?} has an interrupted run {} (started {}, {} checkpoint(s) completed); finish it \
         first with: ingest --target {} --job {} --recover",
        common.job,
        log.started.run_id,
        log.started.started_at,
        log.checkpoints.len(),
        common.table.display(),
        common.job
    )
}

/// A run id: UTC start time plus random bits, unique per job.
fn new_run_id() -> String {
    let now = SystemTime::now();
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let salt = xxhash_rust::xxh3::xxh3_64(format!("{nanos}-{}", std::process::id()).as_bytes());
    format!("{stamp}-{:08x}", salt as u32)
}

/// Loads the configured inputs.
pub fn load(cfg: &LoadConfig, _messages: Messages) -> Result<Summary> {
    let started = Instant::now();
    let common = &cfg.common;
    let layout = JobLayout::new(&common.table, &common.job);
    let _lock = lock_job(&layout)?;
    let mut manifest = Manifest::load(&layout.manifest())?;
    if let Some(log) = journal::replay(&layout.journal())?.log {
        if !log.finished {
            return Err(interrupted_error(common, &log));
        }
        // Normally done when the run finished; a crash in between leaves it to us.
        manifest.fold(&layout.manifest(), &log)?;
        pending::remove_run(&layout, &log.started.run_id)?;
    }

    let mut inputs = Vec::new();
    let mut skipped = 0;
    for path in discover::discover(&cfg.inputs, &common.table)? {
        let fingerprint = discover::fingerprint(&path)?;
        if cfg.reload {
            inputs.push(fingerprint);
            continue;
        }
        match manifest.status(&fingerprint)? {
            Status::New => inputs.push(fingerprint),
            Status::Loaded => skipped += 1,
            Status::Changed(was) => bail!(
                "input {} changed since run {} loaded it ({} bytes then, {} now); loading it again \
                 would duplicate its old rows: pass --reload to load it again in full, or move it aside",
                fingerprint.path,
                was.run_id,
                was.fingerprint.size,
                fingerprint.size
            ),
        }
    }
    if inputs.is_empty() {
        return Ok(Summary::nothing(
            "nothing-to-load",
            &common.job,
            skipped,
            started.elapsed(),
        ));
    }

    let columns = source::read_columns(&inputs, cfg.options.delimiter)?.unwrap_or_default();
    let run = RunStarted {
        run_id: new_run_id(),
        started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        options: cfg.options.clone(),
        inputs,
    };
    pipeline::validate(&layout, &run, &columns)?;
    let mut journal = Journal::create(&layout.journal(), &run)?;
    failpoint::hit("run.started.after");
    let spec = pipeline::Spec {
        layout: &layout,
        run: &run,
        columns,
        resume: None,
        snapshots: Vec::new(),
    };
    pipeline::execute(spec, &mut journal).map_err(|e| stopped(e, common))?;
    let log = finish(&layout, &mut journal, &mut manifest)?;
    let mut summary = Summary::from_log("loaded", &common.job, &log, started.elapsed());
    summary.inputs_skipped = skipped;
    Ok(summary)
}

/// Adds what to do next to the error that stopped a run.
pub fn stopped(err: anyhow::Error, common: &Common) -> anyhow::Error {
    anyhow::anyhow!(
        "{err:#}\nthe run stopped; the checkpoints it completed stay committed, and \
         `ingest --target {} --job {} --recover` resumes it once the cause is fixed",
        common.table.display(),
        common.job
    )
}

/// Journals the end of the run, folds its inputs into the manifest, removes its state.
pub fn finish(
    layout: &JobLayout,
    journal: &mut Journal,
    manifest: &mut Manifest,
) -> Result<RunLog> {
    failpoint::hit("run.finished.before");
    let before = journal::replay(&layout.journal())?
        .log
        .context("the journal lost its run")?;
    let rows_written = before.checkpoints.iter().map(|c| c.rows_written).sum();
    journal.append(&Record::RunFinished { rows_written })?;
    failpoint::hit("run.finished.after");
    let log = journal::replay(&layout.journal())?
        .log
        .context("the journal lost its run")?;
    manifest.fold(&layout.manifest(), &log)?;
    pending::remove_run(layout, &log.started.run_id)?;
    Ok(log)
}
