//! The top layer: the command line. Clap's arguments (`args`), turned once into checked
//! settings (`config`, with job files), the man page, and the exit codes; `run` is all
//! `main` calls.

pub(crate) mod args;
pub(crate) mod config;
pub(crate) mod exit;
mod failure;
mod help;
pub(crate) mod jobfile;
pub mod manpage;

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use crate::core::messages::Messages;
use crate::core::sys::{failpoint, fsutil, output, signals};
use crate::ops::report::Summary;
use crate::ops::settings::Command;
use crate::ops::{abort, compact, infer, recover, run, status, vacuum};
use args::Cli;
use exit::Exit;
use failure::{one_line, Failure};

/// Runs a checked command; returns its summaries (one per job it acted on), if it has any.
fn execute(command: Command) -> Result<Option<(Vec<Summary>, bool, Messages)>> {
    failpoint::check_env()?;
    fsutil::raise_open_file_limit();
    // Before any thread starts: see there.
    fsutil::reserve_descriptor_table(crate::sink::MOST_FILES_OPEN);
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
            clap_complete::generate(shell, &mut args::Cli::command(), "ingest", &mut script);
            output::print(&String::from_utf8_lossy(&script))?;
            Ok(None)
        }
        Command::Compact(cfg) => {
            let messages = Messages {
                quiet: cfg.common.quiet,
            };
            let summary = compact::compact(&cfg, messages)?;
            Ok(Some((vec![summary], cfg.common.json, messages)))
        }
        Command::Vacuum(cfg) => {
            let messages = Messages {
                quiet: cfg.common.quiet,
            };
            let summary = vacuum::vacuum(&cfg, messages)?;
            Ok(Some((vec![summary], cfg.common.json, messages)))
        }
        Command::Status(common, job, files) => {
            status::print(&common, job.as_deref(), files)?;
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

/// The whole program: parse, run, report; the exit code for `main` to return.
pub fn main() -> ExitCode {
    crate::core::sys::malloc::keep_freed_memory();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return bad_command_line(err),
    };
    let (json, quiet) = (cli.json, cli.quiet);
    let command = match config::command(cli) {
        Ok(command) => command,
        Err(err) => return failed(&err, None, json, quiet),
    };
    let common = command.common().cloned();
    match execute(command) {
        Ok(Some((summaries, json, messages))) => {
            for summary in &summaries {
                messages.note(&summary.line());
                // The work is done and its summary is on stderr too: a reader that closed
                // stdout early does not turn a finished load into a failure.
                if json && !print_json(summary) {
                    return ExitCode::from(Exit::Failure.code());
                }
            }
            if summaries.iter().any(|s| !s.quarantined.is_empty()) {
                return ExitCode::from(Exit::Quarantined.code());
            }
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::from(Exit::Success.code()),
        Err(err) => failed(&err, common.as_ref(), json, quiet),
    }
}

/// Reports an error: on stderr (one line under `--quiet`), and with `--json` as one
/// object on stdout too.
fn failed(
    err: &anyhow::Error,
    common: Option<&crate::ops::settings::Common>,
    json: bool,
    quiet: bool,
) -> ExitCode {
    let exit = Exit::for_error(err);
    if exit == Exit::StdoutClosed {
        return ExitCode::from(exit.code());
    }
    if quiet {
        eprintln!("ingest: {}", one_line(err));
    } else {
        eprintln!("ingest: {err:#}");
    }
    if json {
        print_json(&Failure::of(err, common));
    }
    ExitCode::from(exit.code())
}

/// A command line clap refused (exit 2): as clap prints it, one line of it under
/// `--quiet`, and as a JSON failure too under `--json`.
fn bad_command_line(err: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        err.exit();
    }
    let args: Vec<String> = std::env::args().collect();
    let has = |flags: &[&str]| args.iter().any(|a| flags.contains(&a.as_str()));
    let text = err.to_string();
    let first = text.lines().next().unwrap_or("bad command line").trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    if has(&["--quiet", "-q"]) {
        eprintln!("ingest: {first}");
    } else {
        eprint!("{text}");
    }
    if has(&["--json"]) {
        let err = anyhow::Error::new(crate::core::error::UsageError(first.to_string()));
        print_json(&Failure::of(&err, None));
    }
    ExitCode::from(Exit::Usage.code())
}

/// Prints one JSON object on its own line; false if it could not be made or written
/// (a reader that closed stdout is no failure: it chose not to read).
fn print_json<T: serde::Serialize>(value: &T) -> bool {
    match serde_json::to_string(value) {
        Ok(text) => match output::print(&format!("{text}\n")) {
            Ok(()) => true,
            Err(err) if Exit::for_error(&err) == Exit::StdoutClosed => true,
            Err(err) => {
                eprintln!("ingest: {err:#}");
                false
            }
        },
        Err(err) => {
            eprintln!("ingest: cannot print the summary: {err}");
            false
        }
    }
}
