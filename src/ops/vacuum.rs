//! `ingest -t TABLE --vacuum`: deletes what no reader and no run can need any more.
//!
//! - A Delta table's data files that `remove` actions older than the retention took out
//!   and no later version names (delta-rs's VACUUM, lite mode): what compactions,
//!   overwrites and aborts replaced. Never a file the current version names, and never
//!   a file no commit ever named (a run's files are published before its commit).
//! - Under `_ingest/`, the staging, snapshots and partition shadows of runs that are
//!   over, older than the retention: a finished run removes its own as it finishes, so
//!   these are what a crash in that last step, or a process killed before its journal
//!   existed, left. A job that is running or interrupted is left alone, all of it, and
//!   no journal or manifest is ever touched: they are what keeps a re-run or
//!   `--recover` from loading anything twice.
//!
//! A table in a bucket: its Delta files as above; it keeps no staging under `_ingest/`
//! (a run's staged files are open multipart uploads, completed or aborted by the run,
//! its `--recover` or its `--abort`).
//!
//! Hive tables keep no old versions (an overwrite or a compaction deletes what it
//! replaced once the exchange is durable), so for them only `_ingest/` is vacuumed.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Result};

use crate::core::error::{kind, Kind};
use crate::core::layout::JobLayout;
use crate::core::messages::Messages;
use crate::core::sys::fsutil;
use crate::ops::job::Job;
use crate::ops::report::Summary;
use crate::ops::settings::VacuumConfig;
use crate::state::contract;

/// The retention of `_ingest/` leftovers, and of a Delta table without a retention of
/// its own: Delta's default `delta.deletedFileRetentionDuration`.
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Vacuums the table as `cfg` says.
pub(crate) fn vacuum(cfg: &VacuumConfig, messages: Messages) -> Result<Summary> {
    let started = std::time::Instant::now();
    let common = &cfg.common;
    let table = &common.table;
    let Some(contract) = table_contract(common)? else {
        bail!(
            "no ingest table at {}: it has no contract (_ingest/contract.json)",
            common.layout().table_name()
        );
    };
    if contract.table_format == crate::core::options::TableFormat::Iceberg {
        // Refused before anything is deleted, the jobs' leftovers included.
        bail!(
            "--vacuum does not clean Iceberg tables yet (expire snapshots and remove orphan \
             files with another tool)"
        );
    }
    let retention = cfg.retention.unwrap_or(DEFAULT_RETENTION);
    let mut removed = Vec::new();
    // A table in a bucket has no staging under `_ingest/` to vacuum: a run's staged
    // files are open multipart uploads, which its `--recover` or `--abort` completes
    // or aborts, and the rest of a job's state there is what keeps loads exactly once.
    let jobs = match common.remote {
        None => crate::core::layout::jobs(table)?,
        Some(_) => Vec::new(),
    };
    for job in jobs {
        let layout = JobLayout::new(table, &job);
        let opened = match Job::open(layout, common.lock_wait) {
            Ok(opened) => opened,
            Err(e) if kind(&e) == Kind::LockHeld => {
                messages.note(&format!("left alone: job {job} is running"));
                continue;
            }
            Err(e) => return Err(e),
        };
        if opened.replay.log.as_ref().is_some_and(|log| !log.finished) {
            messages.note(&format!(
                "left alone: job {job} has an interrupted run (--recover or --abort it)"
            ));
            continue;
        }
        removed.extend(leftovers(&opened.layout, retention, cfg.dry_run)?);
    }
    let layout = JobLayout {
        target: common.remote.clone(),
        ..JobLayout::new(table, "default")
    };
    let format = crate::table::format(contract.table_format)?;
    let files = format
        .vacuum(&layout, cfg.retention, cfg.dry_run)?
        .unwrap_or_default();
    if cfg.dry_run {
        for path in files.iter().chain(&removed) {
            messages.note(&format!("would delete {path}"));
        }
    }
    let outcome = match (files.is_empty() && removed.is_empty(), cfg.dry_run) {
        (true, _) => "nothing-to-vacuum",
        (false, true) => "would-vacuum",
        (false, false) => "vacuumed",
    };
    let mut summary = Summary::nothing(outcome, &common.job, 0, started.elapsed());
    summary.vacuumed = Some(crate::ops::report::Vacuumed {
        data_files: files,
        leftovers: removed,
    });
    Ok(summary)
}

/// The table's contract: in its directory, or read from its bucket (no lease taken).
fn table_contract(common: &crate::ops::settings::Common) -> Result<Option<contract::Contract>> {
    #[cfg(feature = "s3")]
    if let Some(url) = &common.remote {
        return crate::state::replica::Remote::with_read_only(url, &common.job, |_, scratch| {
            contract::load(scratch)
        });
    }
    contract::load(&common.table)
}

/// Removes (or lists) the entries of the job's `pending/`, `state/` and `overwrite/`
/// last modified longer than `retention` ago; the caller holds the job's lock and has
/// seen that no run of the job is under way. Returns them, relative to the table.
fn leftovers(layout: &JobLayout, retention: Duration, dry_run: bool) -> Result<Vec<String>> {
    let now = SystemTime::now();
    let mut removed = Vec::new();
    for area in ["pending", "state", "overwrite"] {
        let dir = layout.dir.join(area);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("cannot list {}", dir.display())))
            }
        };
        for entry in entries {
            let path = entry?.path();
            let age = std::fs::symlink_metadata(&path)?
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            if age < retention {
                continue;
            }
            if !dry_run {
                remove(&path)?;
            }
            removed.push(relative(&layout.table, &path));
        }
    }
    Ok(removed)
}

fn remove(path: &Path) -> Result<()> {
    if path.is_dir() && !path.is_symlink() {
        fsutil::remove_dir_all_durable(path)
    } else {
        fsutil::remove_file_if_exists(path)?;
        fsutil::sync_parent(path)
    }
}

fn relative(table: &Path, path: &Path) -> String {
    path.strip_prefix(table)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}
