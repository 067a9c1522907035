//! Checked, resolved settings. Nothing below this module sees a clap type or re-parses
//! a flag string.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::cli::{Cli, Format, ProgressMode};
use crate::exit::UsageError;

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Print the fault-injection points.
    ListFailPoints,
    /// Print a shell completion script.
    Completions(clap_complete::Shell),
    /// Load inputs into a table.
    Load(LoadConfig),
    /// Finish an interrupted run.
    Recover(Common),
    /// Describe the table's jobs; `None` for every job.
    Status(Common, Option<String>),
}

/// Settings shared by every command that touches a table.
#[derive(Debug, Clone)]
pub struct Common {
    pub table: PathBuf,
    pub job: String,
    pub quiet: bool,
    pub json: bool,
    pub progress: ProgressMode,
    /// How long to wait for the job's lock; `None` fails at once (exit 75).
    pub lock_wait: Option<Duration>,
}

/// A load: where, what, and how.
#[derive(Debug)]
pub struct LoadConfig {
    pub common: Common,
    pub inputs: Vec<PathBuf>,
    pub reload: bool,
    pub dry_run: bool,
    pub options: RunOptions,
}

/// The options that shape a run's output. They are journaled with the run, so that
/// `--recover` finishes it exactly as it began, whatever flags it is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOptions {
    pub delimiter: u8,
    pub partition_by: Vec<String>,
    pub dedupe_key: Vec<String>,
    pub checkpoint_rows: u64,
    pub format: Format,
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

impl Command {
    /// Checks and resolves the parsed flags.
    pub fn from_cli(cli: Cli) -> Result<Command> {
        if cli.list_fail_points {
            return Ok(Command::ListFailPoints);
        }
        if let Some(shell) = cli.completions {
            return Ok(Command::Completions(shell));
        }
        let table = cli.target.ok_or_else(|| usage("--target is required"))?;
        if let Some(job) = &cli.job {
            check_job_name(job)?;
        }
        let common = Common {
            table,
            job: cli.job.clone().unwrap_or_else(|| "default".to_string()),
            quiet: cli.quiet,
            json: cli.json,
            progress: cli.progress,
            lock_wait: cli.lock_wait.map(Duration::from_secs),
        };
        if cli.status {
            return Ok(Command::Status(common, cli.job));
        }
        if cli.recover {
            return Ok(Command::Recover(common));
        }
        if cli.format != Format::Csv {
            return Err(usage(format!(
                "--format {} is not available yet; this build writes csv",
                match cli.format {
                    Format::Jsonl => "jsonl",
                    _ => "parquet",
                }
            )));
        }
        let delimiter = parse_delimiter(cli.delimiter.as_deref().unwrap_or(","))?;
        check_columns("--partition-by", &cli.partition_by)?;
        for col in &cli.partition_by {
            if col.starts_with('_') || col.starts_with('.') {
                return Err(usage(format!(
                    "--partition-by column {col:?} starts with '{}', which would make its \
                     partitions hidden from Hive, Spark and DuckDB; rename the column first",
                    &col[..1]
                )));
            }
        }
        check_columns("--dedupe-key", &cli.dedupe_key)?;
        Ok(Command::Load(LoadConfig {
            common,
            inputs: cli.inputs,
            reload: cli.reload,
            dry_run: cli.dry_run,
            options: RunOptions {
                delimiter,
                partition_by: cli.partition_by,
                dedupe_key: cli.dedupe_key,
                checkpoint_rows: cli.checkpoint_rows,
                format: cli.format,
            },
        }))
    }
}

/// One ASCII byte that cannot be confused with quoting or line ends.
fn parse_delimiter(raw: &str) -> Result<u8> {
    let byte = match raw {
        "tab" | "\\t" | "\t" => b'\t',
        s if s.len() == 1 && s.is_ascii() => s.as_bytes()[0],
        s => {
            return Err(usage(format!(
                "--delimiter must be one ASCII character or `tab`, not {s:?}"
            )))
        }
    };
    if matches!(byte, b'"' | b'\n' | b'\r') {
        return Err(usage(format!("--delimiter cannot be {:?}", byte as char)));
    }
    Ok(byte)
}

fn check_columns(flag: &str, cols: &[String]) -> Result<()> {
    for (i, col) in cols.iter().enumerate() {
        if col.is_empty() {
            return Err(usage(format!("{flag} has an empty column name")));
        }
        if cols[..i].contains(col) {
            return Err(usage(format!("{flag} names column {col:?} twice")));
        }
    }
    Ok(())
}

/// Job names become file names under `_ingest/`, so they are kept to a safe alphabet.
fn check_job_name(job: &str) -> Result<()> {
    let ok = !job.is_empty()
        && job.len() <= 64
        && job
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && job.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(usage(format!(
            "--job {job:?} is not a valid job name: use 1 to 64 letters, digits, '_' or '-', \
             starting with a letter or digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delimiters() {
        assert_eq!(parse_delimiter(",").unwrap(), b',');
        assert_eq!(parse_delimiter("tab").unwrap(), b'\t');
        assert_eq!(parse_delimiter(";").unwrap(), b';');
        assert!(parse_delimiter("\"").is_err());
        assert!(parse_delimiter(";;").is_err());
        assert!(parse_delimiter("é").is_err());
    }

    #[test]
    fn job_names_cannot_walk_out_of_ingest_dir() {
        assert!(check_job_name("nightly-orders_2").is_ok());
        for bad in ["", "..", "a/b", "-x", ".hidden", "a b"] {
            assert!(check_job_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
