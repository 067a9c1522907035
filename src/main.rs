//! Parse, run, turn the outcome into an exit code; nothing else.

use std::process::ExitCode;

use clap::Parser;
use ingest::cli::Cli;
use ingest::config::Command;
use ingest::exit::Exit;
use ingest::report::{one_line, Failure};

fn main() -> ExitCode {
    ingest::malloc::keep_freed_memory();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return bad_command_line(err),
    };
    let (json, quiet) = (cli.json, cli.quiet);
    let command = match Command::from_cli(cli) {
        Ok(command) => command,
        Err(err) => return failed(&err, None, json, quiet),
    };
    let common = command.common().cloned();
    match ingest::execute(command) {
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
        Ok(None) => ExitCode::SUCCESS,
        Err(err) => failed(&err, common.as_ref(), json, quiet),
    }
}

/// Reports an error: on stderr (one line under `--quiet`), and with `--json` as one
/// object on stdout too.
fn failed(
    err: &anyhow::Error,
    common: Option<&ingest::config::Common>,
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
        let err = anyhow::Error::new(ingest::exit::UsageError(first.to_string()));
        print_json(&Failure::of(&err, None));
    }
    ExitCode::from(Exit::Usage.code())
}

/// Prints one JSON object on its own line; false if it could not be made or written
/// (a reader that closed stdout is no failure: it chose not to read).
fn print_json<T: serde::Serialize>(value: &T) -> bool {
    match serde_json::to_string(value) {
        Ok(text) => match ingest::output::print(&format!("{text}\n")) {
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
