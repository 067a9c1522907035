//! `ingest`: load CSV and JSON lines files into a Hive-partitioned table, exactly once.
//!
//! The pipeline applies the checkpoint-barrier plus two-phase-commit protocol of stream
//! processors to a batch load (see `checkpoint.rs` for the protocol, failure case by
//! failure case):
//!
//! ```text
//! source ──batches + barrier(n)──► stage … stage ──► sink (2PC)
//!   │ position                       │ snapshot         │ preCommit: staged files fsynced
//!   └──────────── ack(n) ───────────►│◄──── ack(n) ─────┘
//!                              coordinator: CheckpointComplete(n) in the journal (fsync)
//!                                           ──► publish: rename into partitions
//! ```
//!
//! - [`source`]: discover and fingerprint inputs, read CSV and JSON lines with exact
//!   positions.
//! - [`stage`]: transforms, chained on one thread, with snapshot/restore.
//! - [`sink`]: staging areas, preCommit, publish (commit), abort; Hive paths; the
//!   partition exchange of `--mode overwrite-partitions`; the router that splits the
//!   partitions over several sinks, each acking every barrier.
//! - [`checkpoint`]: the coordinator; [`journal`]: its durable log; [`manifest`]: loaded
//!   inputs; [`recover`]: roll forward, roll back, resume; [`abort`]: undo an
//!   interrupted run as if it had never started.
//! - [`run`], [`plan`] and [`pipeline`]: a load end to end (the inputs it takes, the
//!   threads it runs); [`contract`]: what every file of the table agrees on;
//!   [`fsutil`]: every fsync, rename and lock; [`failpoint`]: named crash points for the
//!   crash tests.
//! - Around them: [`cli`] → [`config`] (flags into checked settings; [`options`]: the
//!   output options as plain enums, so nothing below the command line imports `cli`),
//!   [`exit`] (exit codes), [`report`] (summaries), [`progress`] (the bar), [`signals`]
//!   (stop at a checkpoint boundary), [`status`] (`--status`).

pub mod abort;
pub mod batch;
pub mod cache_hint;
pub mod canonical;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod contract;
pub mod exit;
pub mod expr;
pub mod failpoint;
pub mod fsutil;
pub mod infer;
pub mod jobfile;
pub mod journal;
pub mod malloc;
pub mod manifest;
pub mod manpage;
pub mod options;
pub mod output;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod protocol;
pub mod quarantine;
pub mod recover;
pub mod report;
pub mod run;
pub mod schema;
pub mod shard;
pub mod signals;
pub mod sink;
pub mod source;
pub mod stage;
pub mod status;
pub mod storage;
pub mod table;

use anyhow::Result;

use config::Command;
use report::{Messages, Summary};

/// Runs a checked command; returns its summaries (one per job it acted on), if it has any.
pub fn execute(command: Command) -> Result<Option<(Vec<Summary>, bool, Messages)>> {
    failpoint::check_env()?;
    fsutil::raise_open_file_limit();
    signals::install()?;
    match command {
        Command::ListFailPoints => {
            let points: String = failpoint::POINTS.iter().map(|p| format!("{p}\n")).collect();
            output::print(&points)?;
            Ok(None)
        }
        Command::Completions(shell) => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli::Cli::command(), "ingest", &mut script);
            output::print(&String::from_utf8_lossy(&script))?;
            Ok(None)
        }
        Command::Status(common, job) => {
            status::print(&common, job.as_deref())?;
            Ok(None)
        }
        Command::Load(cfg) => {
            let messages = Messages {
                quiet: cfg.common.quiet,
            };
            let summary = run::load(&cfg, messages)?;
            Ok(Some((vec![summary], cfg.common.json, messages)))
        }
        Command::InferSchema {
            inputs,
            delimiter,
            stages,
        } => {
            output::print(&infer::schema_of(&inputs, delimiter, &stages)?)?;
            Ok(None)
        }
        Command::Abort(common, job) => {
            let messages = Messages {
                quiet: common.quiet,
            };
            let summary = match job {
                Some(_) => abort::abort(&common, messages)?,
                None => abort::abort_the_interrupted_job(&common, messages)?,
            };
            Ok(Some((vec![summary], common.json, messages)))
        }
        Command::Recover(common, max_errors, job) => {
            let messages = Messages {
                quiet: common.quiet,
            };
            let summaries = match job {
                Some(_) => vec![recover::recover(&common, max_errors, messages)?],
                None => recover::recover_every_job(&common, max_errors, messages)?,
            };
            Ok(Some((summaries, common.json, messages)))
        }
    }
}
