//! The clap definition: the one source of `--help` (and, later, the man page).
//!
//! Nothing here is interpreted; `config.rs` turns these raw flags into checked settings.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Rows between checkpoints when `--checkpoint-rows` is not given.
pub const DEFAULT_CHECKPOINT_ROWS: u64 = 500_000;

/// Load CSV files into a Hive-partitioned table, exactly once.
///
/// Inputs are read in checkpointed chunks; each checkpoint's output is staged in hidden
/// files and published into the table's partitions only after the checkpoint is durable
/// in a journal. After a crash, `ingest --target T --recover` finishes the run: nothing is
/// lost and nothing is loaded twice.
#[derive(Debug, Parser)]
#[command(name = "ingest", version, about, long_about, max_term_width = 100, after_long_help = crate::manpage::after_help())]
pub struct Cli {
    /// The table directory (created if missing)
    #[arg(short = 't', long, value_name = "TABLE_DIR",
        required_unless_present_any = ["list_fail_points", "completions"])]
    pub target: Option<PathBuf>,

    /// Input files or directories (walked recursively in sorted order, hidden entries skipped)
    #[arg(value_name = "INPUT",
        required_unless_present_any = ["recover", "status", "list_fail_points", "completions"])]
    pub inputs: Vec<PathBuf>,

    /// Finish an interrupted run: commit completed checkpoints, discard the rest, resume
    #[arg(long, conflicts_with_all = LOAD_ONLY)]
    pub recover: bool,

    /// Show each job's last run, its checkpoints and inputs, and what --recover would do
    #[arg(long, conflicts_with_all = LOAD_ONLY, conflicts_with = "recover")]
    pub status: bool,

    /// List what a load would do (new, already loaded, changed inputs) and write nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Wait up to SECONDS for another ingest of the job to finish instead of exiting 75
    #[arg(long, value_name = "SECONDS")]
    pub lock_wait: Option<u64>,

    /// Progress bar on stderr: auto (only on a terminal), always, never
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto, value_name = "WHEN")]
    pub progress: ProgressMode,

    /// Print a shell completion script for SHELL to stdout
    #[arg(long, value_name = "SHELL", exclusive = true)]
    pub completions: Option<clap_complete::Shell>,

    /// Print the names of the fault-injection points, one per line
    #[arg(long, exclusive = true)]
    pub list_fail_points: bool,

    /// Input field delimiter: one ASCII character, or `tab`
    #[arg(short = 'd', long, value_name = "CHAR")]
    pub delimiter: Option<String>,

    /// Partition the table by these columns (Hive layout: COL=VALUE directories)
    #[arg(short = 'p', long, value_name = "COL[,COL...]", value_delimiter = ',')]
    pub partition_by: Vec<String>,

    /// Output file format
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,

    /// Rows between checkpoints (each checkpoint publishes its rows atomically)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CHECKPOINT_ROWS,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_rows: u64,

    /// Keep only the first row of each key within the run
    #[arg(long, value_name = "COL[,COL...]", value_delimiter = ',')]
    pub dedupe_key: Vec<String>,

    /// Load inputs again even if the manifest says they are loaded
    #[arg(long)]
    pub reload: bool,

    /// Job name: each job has its own journal, manifest and lock under TABLE_DIR/_ingest/
    /// [default: default; --status without it shows every job]
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,

    /// Print nothing on stderr but errors
    #[arg(short, long)]
    pub quiet: bool,

    /// Print a machine-readable JSON summary on stdout
    #[arg(long)]
    pub json: bool,
}

/// Flags that only make sense for a load.
const LOAD_ONLY: [&str; 8] = [
    "inputs",
    "reload",
    "delimiter",
    "partition_by",
    "format",
    "checkpoint_rows",
    "dedupe_key",
    "dry_run",
];

/// When to draw the progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressMode {
    /// Only when stderr is a terminal
    Auto,
    /// Even when stderr is not a terminal
    Always,
    /// Never
    Never,
}

/// Output file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// CSV with a header row (`.csv`)
    Csv,
    /// JSON lines, one object per row (`.jsonl`)
    Jsonl,
    /// Apache Parquet (`.parquet`)
    Parquet,
}
