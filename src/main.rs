//! Parse, run, turn the outcome into an exit code; nothing else.

use std::process::ExitCode;

use clap::Parser;
use ingest::cli::Cli;
use ingest::config::Command;
use ingest::exit::Exit;

fn main() -> ExitCode {
    ingest::malloc::keep_freed_memory();
    let cli = Cli::parse();
    let outcome = Command::from_cli(cli).and_then(ingest::execute);
    match outcome {
        Ok(Some((summaries, json, messages))) => {
            for summary in &summaries {
                messages.note(&summary.line());
                if json {
                    match serde_json::to_string(summary) {
                        Ok(text) => println!("{text}"),
                        Err(err) => {
                            eprintln!("ingest: cannot print the summary: {err}");
                            return ExitCode::from(Exit::Failure.code());
                        }
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("ingest: {err:#}");
            ExitCode::from(Exit::for_error(&err).code())
        }
    }
}
