//! `ingest --status`: what each job of a table is doing, read without changing anything.

use std::fmt::Write;

use anyhow::Result;
use serde::Serialize;

use crate::core::layout::JobLayout;
use crate::core::options::Mode;
use crate::core::records::RunLog;
use crate::ops::job::lock_holder;
use crate::ops::settings::Common;
use crate::state::journal;
use crate::state::manifest::Manifest;

/// One job's state.
#[derive(Debug, Serialize)]
pub(crate) struct JobStatus {
    pub(crate) job: String,
    /// `running`, `interrupted`, `finished` or `never-run`.
    pub(crate) state: &'static str,
    /// Who holds the job's lock, if anyone.
    pub(crate) locked_by: Option<String>,
    pub(crate) run_id: Option<String>,
    pub(crate) started_at: Option<String>,
    pub(crate) checkpoints_completed: u64,
    pub(crate) checkpoints_committed: u64,
    /// Rows of the completed checkpoints (decided: published, or published by recovery).
    pub(crate) rows_completed: u64,
    /// Rows of the checkpoints already published.
    pub(crate) rows_committed: u64,
    pub(crate) run_inputs: u64,
    pub(crate) run_inputs_done: u64,
    pub(crate) inputs_loaded: u64,
    /// What `--recover` would do, step by step; empty when there is nothing to recover.
    pub(crate) recover_would: Vec<String>,
    /// What `--abort` would do (the files it would remove, each named); empty when there
    /// is nothing to abort.
    pub(crate) abort_would: Vec<String>,
    /// A Delta table: its log's current version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) delta_version: Option<u64>,
    /// A Delta table: the job's last transaction version in it (app id `ingest:JOB`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) delta_txn_version: Option<i64>,
    /// An Iceberg table: its current snapshot's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) iceberg_snapshot_id: Option<i64>,
    /// An Iceberg table: the job's last committed checkpoint in it, `RUN:N` (its table
    /// property `ingest.checkpoint.JOB`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) iceberg_checkpoint: Option<String>,
    /// Inputs set aside (`--on-bad-input quarantine`) and not loaded since, with why.
    pub(crate) quarantined: Vec<crate::core::bad_input::Quarantined>,
    /// A compaction run (job `compact`): how many files its merged files replace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) compaction_replaces: Option<u64>,
}

fn job_status(layout: &JobLayout) -> Result<JobStatus> {
    let manifest = Manifest::load(&layout.manifest())?;
    let replay = journal::replay(&layout.journal())?;
    let locked_by = lock_holder(layout);
    let mut status = JobStatus {
        job: layout.job.clone(),
        state: "never-run",
        locked_by,
        run_id: None,
        started_at: None,
        checkpoints_completed: 0,
        checkpoints_committed: 0,
        rows_completed: 0,
        rows_committed: 0,
        run_inputs: 0,
        run_inputs_done: 0,
        inputs_loaded: manifest.len(),
        recover_would: Vec::new(),
        abort_would: Vec::new(),
        delta_version: None,
        delta_txn_version: None,
        iceberg_snapshot_id: None,
        iceberg_checkpoint: None,
        quarantined: manifest
            .quarantined()?
            .into_iter()
            .map(|e| {
                let set_aside = e
                    .quarantine
                    .unwrap_or_else(|| crate::state::manifest::SetAside {
                        reason: String::new(),
                        committed_through_line: 0,
                        rows_in_table: false,
                    });
                crate::core::bad_input::Quarantined {
                    path: e.fingerprint.path,
                    reason: set_aside.reason,
                    committed_through_line: set_aside.committed_through_line,
                }
            })
            .collect(),
        compaction_replaces: None,
    };
    // A table with a Delta log, whatever this job's runs say (none may have run yet).
    let delta = crate::table::format(crate::core::options::TableFormat::Delta).ok();
    if let Some(delta) = delta.map(|d| d.status(layout)).transpose()?.flatten() {
        status.delta_version = Some(delta.0);
        status.delta_txn_version = delta.1;
    }
    #[cfg(feature = "iceberg")]
    if let Some(target) = crate::state::contract::catalog(&layout.table)? {
        if let Some((id, checkpoint)) = crate::table::iceberg::status(layout, &target)? {
            status.iceberg_snapshot_id = Some(id);
            status.iceberg_checkpoint = checkpoint;
        }
    }
    let Some(log) = replay.log else {
        return Ok(status);
    };
    status.state = match (log.finished, status.locked_by.is_some()) {
        (true, _) => "finished",
        (false, true) => "running",
        (false, false) => "interrupted",
    };
    status.compaction_replaces = log
        .started
        .compaction
        .as_ref()
        .map(|c| c.replaces.len() as u64);
    status.run_id = Some(log.started.run_id.clone());
    status.started_at = Some(log.started.started_at.clone());
    status.checkpoints_completed = log.checkpoints.len() as u64;
    status.checkpoints_committed = log.committed.len() as u64;
    status.rows_completed = log.checkpoints.iter().map(|c| c.rows_written).sum();
    status.rows_committed = log
        .checkpoints
        .iter()
        .filter(|c| log.committed.contains(&c.checkpoint))
        .map(|c| c.rows_written)
        .sum();
    status.run_inputs = log.started.inputs.len() as u64;
    status.run_inputs_done = log
        .checkpoints
        .iter()
        .map(|c| c.inputs_done.len() as u64)
        .sum();
    if status.state == "interrupted" {
        status.recover_would = if log.aborting {
            vec!["finish the abort that a crash cut short (as --abort would)".into()]
        } else {
            recovery_plan(&log, replay.file_len - replay.valid_len)
        };
        status.abort_would = crate::ops::abort::plan(layout, &log)?.describe();
    }
    Ok(status)
}

fn recovery_plan(log: &RunLog, torn: u64) -> Vec<String> {
    let mut steps = Vec::new();
    if torn > 0 {
        steps.push(format!("ignore a torn journal record ({torn} bytes)"));
    }
    if log.started.compaction.is_some() && log.checkpoints.is_empty() {
        steps.push(
            "discard the compaction's staging: it stopped before its commit point, so the \
             table is as it was (--compact starts it over)"
                .into(),
        );
        return steps;
    }
    let overwrite = log.started.options.mode == Mode::OverwritePartitions;
    for c in log.uncommitted() {
        steps.push(format!(
            "{} checkpoint {} ({} file(s), {} row(s))",
            if overwrite { "commit" } else { "publish" },
            c.checkpoint,
            c.files.len(),
            c.rows_written
        ));
    }
    let last = log.last_checkpoint();
    steps.push(format!(
        "discard the staging of checkpoints after {}",
        last.map_or_else(|| "the start".to_string(), |c| c.checkpoint.to_string())
    ));
    match last {
        Some(c) if c.last => steps.push("finish the run (every input was read)".into()),
        Some(c) => {
            let input = log
                .started
                .inputs
                .get(c.position.input)
                .map_or("?", |i| i.path.as_str());
            steps.push(format!(
                "resume {input} at byte {} (line {}) and read {} more input(s) to the end",
                c.position.offset,
                c.position.lines,
                log.started
                    .inputs
                    .len()
                    .saturating_sub(c.position.input + 1)
            ));
        }
        None => steps.push(format!(
            "read all {} input(s) from the start",
            log.started.inputs.len()
        )),
    }
    if overwrite && log.started.options.table_format == crate::core::options::TableFormat::Delta {
        steps.push(if log.exchanged {
            "finish the run (the replacing commit is in the Delta log)".into()
        } else {
            "replace the partitions the run wrote to in one Delta commit (unless the job's \
             transaction version shows it made)"
                .into()
        });
    } else if overwrite
        && log.started.options.table_format == crate::core::options::TableFormat::Iceberg
    {
        steps.push(if log.exchanged {
            "finish the run (the replacing snapshot is in the Iceberg table)".into()
        } else {
            "replace the partitions the run wrote to in one Iceberg overwrite snapshot \
             (unless the table's marker shows it made)"
                .into()
        });
    } else if overwrite {
        steps.push(match (&log.exchange, log.exchanged) {
            (_, true) => "remove the old content of the replaced partitions".into(),
            (Some(swaps), false) => format!(
                "finish replacing {} partition(s) (the exchange is journaled), then remove \
                 their old content",
                swaps.len()
            ),
            (None, false) => "replace every partition the run wrote to with its new content, \
                              then remove the old content"
                .into(),
        });
    }
    steps
}

/// Prints the status of the table's jobs on stdout.
///
/// A path that holds no table is an error (exit 1), not an empty listing: a typo in a
/// script's path must not read as "all is well".
pub(crate) fn print(common: &Common, job: Option<&str>, files: bool) -> Result<()> {
    #[cfg(feature = "s3")]
    if let Some(url) = &common.remote {
        if files {
            anyhow::bail!(
                "--status --files lists the files of tables on a filesystem; for {url}, list \
                 its partitions with your object store's tools"
            );
        }
        return print_remote(common, url, job);
    }
    let table = &common.table;
    if !table.is_dir() {
        anyhow::bail!(
            "no table at {}: nothing was ever loaded there",
            table.display()
        );
    }
    if !table.join("_ingest").is_dir() {
        anyhow::bail!(
            "{} is not an ingest table: it has no _ingest/ directory",
            table.display()
        );
    }
    let jobs = match job {
        Some(job) => vec![job.to_string()],
        None => crate::core::layout::jobs(table)?
            .into_iter()
            .filter(|job| ran(&JobLayout::new(table, job)))
            .collect(),
    };
    let statuses = jobs
        .iter()
        .map(|job| job_status(&JobLayout::new(&common.table, job)))
        .collect::<Result<Vec<_>>>()?;
    if files {
        let files = crate::ops::table_files::of(table)?;
        let name = table.display().to_string();
        let out = if common.json {
            let both = serde_json::json!({ "jobs": statuses, "files": files });
            format!("{}\n", serde_json::to_string(&both)?)
        } else {
            let mut out = String::new();
            write_text(&mut out, &statuses, &name)?;
            crate::ops::table_files::write_text(&mut out, &files, &name)?;
            out
        };
        return crate::core::sys::output::print(&out);
    }
    show(common, &statuses, &table.display().to_string())
}

/// `--status` of a table in a bucket: each job's state copied, without its lease, into a
/// scratch directory that goes again once read; the lease object says who holds it.
#[cfg(feature = "s3")]
fn print_remote(
    common: &Common,
    url: &crate::core::url::ObjectUrl,
    job: Option<&str>,
) -> Result<()> {
    let jobs = match job {
        Some(job) => vec![job.to_string()],
        None => crate::state::jobs_in(url)?,
    };
    if jobs.is_empty() {
        anyhow::bail!("no ingest table at {url}: it has no _ingest/ state");
    }
    let mut statuses = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let status = crate::state::replica::Remote::with_read_only(url, job, |view, scratch| {
            let mut layout = JobLayout::new(scratch, job);
            layout.target = Some(url.clone());
            layout.store = view.clone();
            layout.remote = Some(view.clone());
            if !ran(&layout) {
                return Ok(None);
            }
            job_status(&layout).map(Some)
        })?;
        statuses.extend(status);
    }
    show(common, &statuses, &url.to_string())
}

/// Files an abort would remove that the text of `--status` names one by one.
const FILES_SHOWN: usize = 10;

/// Whether a job is worth a line: every job but the compaction, which exists from the
/// first `--abort` of a Delta run (the abort holds its lock), until it has run once.
fn ran(layout: &JobLayout) -> bool {
    layout.job != crate::core::layout::COMPACT_JOB || layout.journal().exists()
}

/// Prints the statuses, as text or JSON.
fn show(common: &Common, statuses: &[JobStatus], table: &str) -> Result<()> {
    let mut out = String::new();
    if common.json {
        out = serde_json::to_string(&statuses)?;
        out.push('\n');
    } else {
        write_text(&mut out, statuses, table)?;
    }
    crate::core::sys::output::print(&out)
}

/// The statuses as the text `--status` prints.
fn write_text(out: &mut String, statuses: &[JobStatus], table: &str) -> std::fmt::Result {
    if statuses.is_empty() {
        writeln!(out, "no ingest job has run on {table}")?;
    }
    for s in statuses {
        let lock = s
            .locked_by
            .as_deref()
            .map_or("lock free".to_string(), |h| format!("locked by {h}"));
        match (&s.run_id, &s.started_at) {
            (Some(run), Some(at)) => writeln!(
                out,
                "job {}: {} run {run} (started {at}), {lock}",
                s.job, s.state
            )?,
            _ => writeln!(out, "job {}: no run yet, {lock}", s.job)?,
        }
        writeln!(
            out,
            "  checkpoints: {} completed ({} rows), {} committed ({} rows)",
            s.checkpoints_completed, s.rows_completed, s.checkpoints_committed, s.rows_committed
        )?;
        match s.compaction_replaces {
            Some(n) => writeln!(out, "  compaction: its merged files replace {n} file(s)")?,
            None => writeln!(
                out,
                "  inputs: {} of {} in this run read to the end; {} loaded by finished runs",
                s.run_inputs_done, s.run_inputs, s.inputs_loaded
            )?,
        }
        if let Some(version) = s.delta_version {
            let txn = s
                .delta_txn_version
                .map_or("none yet".to_string(), |v| v.to_string());
            writeln!(
                out,
                "  delta: table version {version}; this job's last transaction version {txn} \
                 (app id ingest:{})",
                s.job
            )?;
        }
        if let Some(id) = s.iceberg_snapshot_id {
            writeln!(
                out,
                "  iceberg: current snapshot {id}; this job's last committed checkpoint {}",
                s.iceberg_checkpoint.as_deref().unwrap_or("none yet")
            )?;
        }
        if !s.quarantined.is_empty() {
            writeln!(
                out,
                "  quarantined: {} input(s), skipped until they change:",
                s.quarantined.len()
            )?;
            for q in &s.quarantined {
                let kept = match q.committed_through_line {
                    0 => String::new(),
                    line => format!(" (its rows through line {line} are in the table)"),
                };
                writeln!(out, "    - {}{kept}: {}", q.path, q.reason)?;
            }
        }
        if s.recover_would.is_empty() {
            writeln!(out, "  --recover would: nothing")?;
        } else {
            writeln!(out, "  --recover would:")?;
            for step in &s.recover_would {
                writeln!(out, "    - {step}")?;
            }
        }
        if !s.abort_would.is_empty() {
            writeln!(out, "  --abort would:")?;
            // The files, after the step that counts them: the first few, then how many
            // more (`--json` names every one).
            let mut files = 0;
            let total = s.abort_would.iter().filter(|l| l.starts_with("  ")).count();
            for step in &s.abort_would {
                match step.strip_prefix("  ") {
                    Some(file) => {
                        files += 1;
                        if files <= FILES_SHOWN {
                            writeln!(out, "        {file}")?;
                        } else if files == FILES_SHOWN + 1 {
                            writeln!(
                                out,
                                "        ... and {} more (--status --json lists every one)",
                                total - FILES_SHOWN
                            )?;
                        }
                    }
                    None => writeln!(out, "    - {step}")?,
                }
            }
        }
    }
    Ok(())
}
