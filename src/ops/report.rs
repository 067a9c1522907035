//! Everything `ingest` tells its user besides errors: notes on stderr (silenced by
//! `--quiet`), the one-line summary, and the `--json` summary on stdout.

use std::collections::BTreeSet;
use std::time::Duration;

use indicatif::{HumanBytes, HumanCount};
use serde::Serialize;

use crate::core::records::RunLog;

/// What a command did; `--json` prints it as one object.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Summary {
    /// `loaded`, `nothing-to-load`, `recovered`, `nothing-to-recover`, `aborted`,
    /// `nothing-to-abort` or `dry-run`.
    pub(crate) outcome: &'static str,
    pub(crate) job: String,
    pub(crate) run_id: Option<String>,
    pub(crate) inputs_loaded: u64,
    pub(crate) inputs_skipped: u64,
    /// Inputs loaded before whose content changed (reported by `--dry-run`).
    pub(crate) inputs_changed: u64,
    /// Inputs modified within `--min-age`, left for a later run.
    pub(crate) inputs_waiting: u64,
    /// Inputs set aside by earlier runs and unchanged since: skipped.
    pub(crate) inputs_in_quarantine: u64,
    /// Inputs this run set aside (`--on-bad-input quarantine`); the exit code is 3.
    pub(crate) quarantined: Vec<crate::core::bad_input::Quarantined>,
    pub(crate) rows_read: u64,
    pub(crate) rows_written: u64,
    /// Rows a filter or dedupe dropped.
    pub(crate) rows_dropped: u64,
    /// Bad rows set aside in the rejects (with --max-errors).
    pub(crate) rows_rejected: u64,
    pub(crate) files_written: u64,
    pub(crate) partitions: u64,
    pub(crate) checkpoints: u64,
    pub(crate) bytes_written: u64,
    pub(crate) elapsed_seconds: f64,
    /// Rows this process read per second (a recovery counts only what it read itself).
    pub(crate) rows_per_second: f64,
    /// `--dry-run`: every input offered, with its verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) inputs: Option<Vec<InputVerdict>>,
    /// `--compact`: each partition merged (or, with `--dry-run`, that would be).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) compacted: Option<Vec<PartitionReport>>,
    /// `--vacuum`: what it deleted (or, with `--dry-run`, would).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vacuumed: Option<Vacuumed>,
}

/// What `--vacuum` deleted, relative to the table.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Vacuumed {
    /// A Delta table's data files that no version within the retention names.
    pub(crate) data_files: Vec<String>,
    /// Staging, snapshots and shadows of runs that are over, under `_ingest/`.
    pub(crate) leftovers: Vec<String>,
}

/// What `--compact` says of a partition (`--json` lists them).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PartitionReport {
    pub(crate) partition: String,
    /// The files merged, and what they hold.
    pub(crate) files_before: u64,
    pub(crate) bytes_before: u64,
    /// The files they become.
    pub(crate) files_after: u64,
}

/// What a load would do with one input (`--dry-run --json`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InputVerdict {
    pub(crate) path: String,
    pub(crate) size: u64,
    /// `new`, `loaded`, `changed` (loaded before, with other content: refused), `copy`
    /// (the content of a loaded input, or of another input of this load: refused) or
    /// `waiting` (modified within `--min-age`: left for a later run).
    pub(crate) verdict: &'static str,
    /// The run that loaded it, for `loaded` and `changed`.
    pub(crate) loaded_by: Option<String>,
}

impl Summary {
    /// The figures of a run as its journal records them (a recovered run counts the work
    /// before the crash too).
    pub(crate) fn from_log(
        outcome: &'static str,
        job: &str,
        log: &RunLog,
        elapsed: Duration,
    ) -> Summary {
        let mut summary = Summary {
            outcome,
            job: job.to_string(),
            run_id: Some(log.started.run_id.clone()),
            elapsed_seconds: elapsed.as_secs_f64(),
            ..Summary::default()
        };
        let mut partitions = BTreeSet::new();
        let data_dir = log.started.options.table_format.data_dir();
        for c in &log.checkpoints {
            summary.checkpoints += 1;
            summary.inputs_loaded += c.inputs_done.len() as u64;
            summary.rows_read += c.rows_read;
            summary.rows_written += c.rows_written;
            summary.rows_rejected += c.rejects;
            for f in c.files.iter().filter(|f| !f.dest.starts_with("_rejects/")) {
                summary.files_written += 1;
                summary.bytes_written += f.size;
                // A file straight in the data directory is in no partition (an
                // unpartitioned table).
                let dest = f.dest.strip_prefix(data_dir).unwrap_or(&f.dest);
                if let Some((dir, _)) = dest.rsplit_once('/') {
                    partitions.insert(dir);
                }
            }
        }
        summary.partitions = partitions.len() as u64;
        summary.rows_dropped = summary
            .rows_read
            .saturating_sub(summary.rows_written + summary.rows_rejected);
        summary
    }

    /// What the summary line says of quarantined inputs: this run's, by name and
    /// reason, and how many earlier ones wait unchanged.
    fn quarantine_note(&self) -> String {
        let mut note = String::new();
        if !self.quarantined.is_empty() {
            note.push_str(&format!(
                "; quarantined {} input(s): {}",
                self.quarantined.len(),
                self.quarantined
                    .iter()
                    .map(|q| q.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self.inputs_in_quarantine > 0 {
            note.push_str(&format!(
                "; {} input(s) wait in quarantine, unchanged (--status lists them)",
                self.inputs_in_quarantine
            ));
        }
        note
    }

    /// A summary for a command that found nothing to do.
    pub(crate) fn nothing(
        outcome: &'static str,
        job: &str,
        skipped: u64,
        elapsed: Duration,
    ) -> Summary {
        Summary {
            outcome,
            job: job.to_string(),
            inputs_skipped: skipped,
            elapsed_seconds: elapsed.as_secs_f64(),
            ..Summary::default()
        }
    }

    /// Sets the rate from the rows this process read.
    pub(crate) fn with_rate(mut self, rows_here: u64) -> Summary {
        self.rows_per_second = rows_here as f64 / self.elapsed_seconds.max(1e-9);
        self
    }

    /// The one-line human summary.
    pub(crate) fn line(&self) -> String {
        match self.outcome {
            "nothing-to-load" => format!(
                "nothing to load: {} input(s) already loaded{}",
                self.inputs_skipped,
                self.quarantine_note()
            ),
            "nothing-to-recover" => "nothing to recover".to_string(),
            "nothing-to-vacuum" => "nothing to vacuum".to_string(),
            "vacuumed" | "would-vacuum" => {
                let v = self.vacuumed.clone().unwrap_or_default();
                format!(
                    "{} {} data file(s) that no version within the retention names, and {} \
                     leftover(s) of runs that are over under _ingest/",
                    if self.outcome == "vacuumed" {
                        "vacuumed: deleted"
                    } else {
                        "dry run: would delete"
                    },
                    v.data_files.len(),
                    v.leftovers.len()
                )
            }
            "nothing-to-compact" => {
                "nothing to compact: no partition has two or more small files that can merge"
                    .to_string()
            }
            "would-compact" | "compacted" => {
                let reports = self.compacted.as_deref().unwrap_or_default();
                let before: u64 = reports.iter().map(|r| r.files_before).sum();
                let after: u64 = reports.iter().map(|r| r.files_after).sum();
                let bytes: u64 = reports.iter().map(|r| r.bytes_before).sum();
                if self.outcome == "would-compact" {
                    format!(
                        "dry run: would merge {before} file(s) ({}) of {} partition(s) into \
                         {after}; nothing was written",
                        HumanBytes(bytes),
                        reports.len()
                    )
                } else {
                    format!(
                        "compacted {} partition(s): {before} file(s) ({}) merged into {after} \
                         ({}), {} rows, in {:.2} s (run {})",
                        reports.len(),
                        HumanBytes(bytes),
                        HumanBytes(self.bytes_written),
                        self.rows_written,
                        self.elapsed_seconds,
                        self.run_id.as_deref().unwrap_or("?")
                    )
                }
            }
            "nothing-to-abort" => "nothing to abort: no run is interrupted".to_string(),
            "aborted" => format!(
                "aborted run {} of job {}: removed {} published file(s) with {} row(s) and its \
                 staging; its inputs count as not loaded",
                self.run_id.as_deref().unwrap_or("?"),
                self.job,
                self.files_written,
                self.rows_written
            ),
            "dry-run" => format!(
                "dry run: {} new input(s) would be loaded, {} already loaded, {} changed; nothing was written",
                self.inputs_loaded, self.inputs_skipped, self.inputs_changed
            ),
            _ => {
                let mut line = format!(
                    "{} {} rows ({} read, {} dropped, {} rejected) from {} input(s) into {} file(s){}, \
                     {} checkpoint(s), {} in {:.2} s ({} rows/s)",
                    self.outcome,
                    self.rows_written,
                    self.rows_read,
                    self.rows_dropped,
                    self.rows_rejected,
                    self.inputs_loaded,
                    self.files_written,
                    match self.partitions {
                        0 => String::new(),
                        n => format!(" in {n} partition(s)"),
                    },
                    self.checkpoints,
                    HumanBytes(self.bytes_written),
                    self.elapsed_seconds,
                    HumanCount(self.rows_per_second as u64),
                );
                if self.inputs_skipped > 0 {
                    line.push_str(&format!("; {} input(s) already loaded", self.inputs_skipped));
                }
                if self.inputs_waiting > 0 {
                    line.push_str(&format!("; {} input(s) too new (--min-age)", self.inputs_waiting));
                }
                line.push_str(&self.quarantine_note());
                line
            }
        }
    }
}
