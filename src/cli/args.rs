//! The clap definition: the one source of `--help` (and, later, the man page).
//!
//! Nothing here is interpreted; `config.rs` turns these raw flags into checked settings.

use std::path::PathBuf;

use clap::Parser;

use crate::core::options::{Compression, Format, Mode, ProgressMode, TableFormat};

/// Rows between checkpoints when `--checkpoint-rows` is not given: each checkpoint
/// writes a file per partition it touches, so long checkpoints make few, full files
/// (2,000,000 orders into 4,000 partitions made 8,000 files of 29 KB at 1,000,000). A
/// checkpoint also ends early once the Parquet files it has yet to finish hold 512 MiB
/// (`core/pressure.rs`), so memory stays bounded however long it is.
pub(crate) const DEFAULT_CHECKPOINT_ROWS: u64 = 10_000_000;

/// Load CSV and JSON lines files into a Hive-partitioned table, exactly once.
///
/// Inputs are CSV with a header row, or JSON lines (`.jsonl`, `.ndjson`: one object per
/// line, the keys of the first 1,000 objects naming the columns); `.gz` and `.zst` are decompressed
/// on the fly. They are read in checkpointed chunks; each checkpoint's output is staged in hidden
/// files and published into the table's partitions only after the checkpoint is durable
/// in a journal. After a crash, `ingest --target T --recover` finishes the run: nothing is
/// lost and nothing is loaded twice.
#[derive(Debug, Parser)]
#[command(name = "ingest", version, about, long_about, max_term_width = 100, after_long_help = crate::cli::help::after_help())]
pub(crate) struct Cli {
    /// The table: a directory (created if missing), or s3://BUCKET/PREFIX for a table in
    /// an S3-compatible bucket, its state kept there too
    #[arg(short = 't', long, value_name = "TABLE",
        required_unless_present_any = ["list_fail_points", "completions", "config", "infer_schema"])]
    pub(crate) target: Option<PathBuf>,

    /// Input files or directories (walked recursively in sorted order, hidden entries
    /// skipped), or s3://BUCKET/KEY objects and key prefixes (listed in key order)
    #[arg(value_name = "INPUT",
        required_unless_present_any = ["recover", "status", "abort", "compact", "vacuum", "list_fail_points", "completions", "config"])]
    pub(crate) inputs: Vec<PathBuf>,

    /// Finish an interrupted run: commit completed checkpoints, discard the rest, resume
    /// (every interrupted job of the table without --job or --config)
    #[arg(long, conflicts_with_all = LOAD_ONLY)]
    pub(crate) recover: bool,

    /// Show each job's last run, its checkpoints and inputs, and what --recover and
    /// --abort would do
    #[arg(long, conflicts_with_all = LOAD_ONLY, conflicts_with = "recover")]
    pub(crate) status: bool,

    /// With --status: each partition's data files, their count and sizes, and what
    /// --compact would merge
    #[arg(long, requires = "status")]
    pub(crate) files: bool,

    /// Undo an interrupted run as if it had never started: remove what it published and
    /// staged; its inputs count as not loaded
    #[arg(long, conflicts_with_all = LOAD_ONLY, conflicts_with_all = ["recover", "status"])]
    pub(crate) abort: bool,

    /// Merge each partition's files smaller than --target-file-size (default 128M) into as
    /// few as that size allows: same rows, format and compression, as a journaled run of
    /// job `compact` (--recover and --abort work on it); with --dry-run, list them
    #[arg(long, conflicts_with_all = COMPACT_CONFLICTS)]
    pub(crate) compact: bool,

    /// Delete what no reader or run needs: a Delta table's files that no version within
    /// --retention names, and leftovers of runs that are over under _ingest/ (never a
    /// journal or manifest); with --dry-run, list them
    #[arg(long, conflicts_with_all = COMPACT_CONFLICTS, conflicts_with_all = ["compact", "target_file_size"])]
    pub(crate) vacuum: bool,

    /// With --vacuum: how long replaced files stay for readers of older versions
    /// (e.g. 7d, 12h, 0s) [default: the Delta table's delta.deletedFileRetentionDuration,
    /// else 7d]
    #[arg(long, value_name = "DURATION", requires = "vacuum")]
    pub(crate) retention: Option<String>,

    /// With --compact: only the partitions whose COL is VALUE (repeatable; all must match)
    #[arg(long, value_name = "COL=VALUE", requires = "compact")]
    pub(crate) partition: Vec<String>,

    /// List what a load would do (new, already loaded, changed inputs), or what --compact
    /// would merge, and write nothing
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// Wait up to SECONDS for another ingest of the job to finish instead of exiting 75
    /// (for a table in a bucket: for the job's lease)
    #[arg(long, value_name = "SECONDS")]
    pub(crate) lock_wait: Option<u64>,

    /// Threads the load may use: the source's, the sink's (at two, a second sink once a
    /// checkpoint has thousands of partitions); beyond two, workers that parse large CSV
    /// files in chunks, and beyond three, N/2 sinks that split the partitions [default:
    /// the cores available]; the rows committed never depend on it
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) threads: Option<u64>,

    /// Progress bar on stderr: auto (only on a terminal), always, never
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto, value_name = "WHEN")]
    pub(crate) progress: ProgressMode,

    /// Print a shell completion script for SHELL to stdout
    #[arg(long, value_name = "SHELL", exclusive = true)]
    pub(crate) completions: Option<clap_complete::Shell>,

    /// Print the names of the fault-injection points, one per line
    #[arg(long, exclusive = true)]
    pub(crate) list_fail_points: bool,

    /// Input field delimiter: one ASCII character, or `tab`
    #[arg(short = 'd', long, value_name = "CHAR")]
    pub(crate) delimiter: Option<String>,

    /// Partition the table by these columns (Hive layout: COL=VALUE directories)
    #[arg(short = 'p', long, value_name = "COL[,COL...]", value_delimiter = ',')]
    pub(crate) partition_by: Vec<String>,

    /// Output file format [default: csv; parquet for a Delta table]
    #[arg(long, value_enum)]
    pub(crate) format: Option<Format>,

    /// The table's layout: plain Hive partition directories, a Delta Lake table
    /// (Parquet files named by a transaction log in _delta_log/, one commit per
    /// checkpoint), or an Apache Iceberg table (Parquet files named by a snapshot
    /// committed through --catalog, one per checkpoint) [default: hive]
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub(crate) table_format: Option<TableFormat>,

    /// An Iceberg table's catalog: the SQL catalog pyiceberg's SqlCatalog and Java's
    /// JdbcCatalog read (catalog name `ingest`) in sqlite:///ABS/PATH.db (a SQLite file,
    /// one host) or postgresql://USER@HOST:PORT/DATABASE (a PostgreSQL server; the
    /// password from PGPASSWORD, or in the URI, which is never written or printed); or an
    /// Iceberg REST catalog, http(s)://HOST[:PORT][/PATH][?warehouse=W] (a token from
    /// ICEBERG_TOKEN, or OAuth2 client credentials ICEBERG_CREDENTIAL=ID:SECRET; never
    /// printed)
    #[arg(long, value_name = "URI")]
    pub(crate) catalog: Option<String>,

    /// An Iceberg table's name in its catalog [default: default.NAME, NAME the last
    /// component of --target]
    #[arg(long, value_name = "NAMESPACE.NAME")]
    pub(crate) table_name: Option<String>,

    /// Compress data files: .csv.gz, .jsonl.zst, …; Parquet inside the file [default: none; zstd for parquet]
    #[arg(long, value_enum)]
    pub(crate) compression: Option<Compression>,

    /// How the load changes the table: add files, or replace every partition it touches
    /// as a whole (atomically, at the end of the run) [default: append]
    #[arg(long, value_enum)]
    pub(crate) mode: Option<Mode>,

    /// An input that cannot load (unreadable, a header the table refuses, changed since
    /// it was loaded, more bad rows than --max-errors) fails the run, or is set aside
    /// while the others load (exit 3; --status lists it; retried once it changes)
    /// [default: fail]
    #[arg(long, value_enum, value_name = "POLICY")]
    pub(crate) on_bad_input: Option<crate::core::options::OnBadInput>,

    /// Start a new part file once one reaches about SIZE bytes (e.g. 128M); with
    /// --compact, the size merged files aim at, and files of that size are left alone
    #[arg(long, value_name = "SIZE")]
    pub(crate) target_file_size: Option<String>,

    /// Rows between checkpoints (each checkpoint publishes its rows atomically; Parquet
    /// loads also end one once 512 MiB wait for their files) [default: 10000000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) checkpoint_rows: Option<u64>,

    /// Let this load add columns after the table's recorded ones (`add-columns`); files
    /// already in the table read them as null [default: never]
    #[arg(long, value_name = "POLICY")]
    pub(crate) evolve: Option<crate::core::options::Evolve>,

    /// JSON lines inputs: what a key the first 1,000 objects did not have does to its
    /// row, `error` (a bad row) or `drop` (the key is ignored) [default: error]
    #[arg(long, value_name = "POLICY")]
    pub(crate) json_new_keys: Option<crate::core::options::NewKeys>,

    /// A job file (TOML): inputs, target, partitioning, schema, stages, error policy
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Print the [schema] a first Parquet or Delta load of the inputs would infer (from
    /// the first 10,000 rows of each), and exit
    // The help text names the job file's table; rustdoc would take it for a link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, conflicts_with_all = ["recover", "status"])]
    pub(crate) infer_schema: bool,

    /// A first load into Parquet or Delta keeps every column as text, instead of the
    /// types a sample of the inputs shows (int, float, bool, date, timestamp)
    #[arg(long)]
    pub(crate) no_infer: bool,

    /// Send up to N bad rows to TABLE/_rejects/ instead of failing at the first one
    #[arg(long, value_name = "N")]
    pub(crate) max_errors: Option<u64>,

    /// Stage: map these values to null (comma-separated; a leading comma adds the empty string)
    #[arg(
        long,
        value_name = "MARKER[,MARKER...]",
        value_delimiter = ',',
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) null_markers: Option<Vec<String>>,

    /// Stage: trim surrounding whitespace from every string column
    #[arg(long, help_heading = "Stages (run in this order)")]
    pub(crate) trim: bool,

    /// Stage: cast a column to int, float, decimal(P,S), bool, date or timestamp
    /// (repeatable); `COL=date:%d/%m/%Y` or `COL=timestamp:FORMAT` gives a strftime
    /// format
    #[arg(
        long,
        value_name = "COL=TYPE",
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) cast: Vec<String>,

    /// Time zone of timestamps cast without an offset (IANA name or +HH:MM) [default: UTC]
    #[arg(long, value_name = "ZONE", help_heading = "Stages (run in this order)")]
    pub(crate) timezone: Option<String>,

    /// Stage: add or replace a column computed by an expression (repeatable)
    #[arg(
        long,
        value_name = "NAME=EXPR",
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) derive: Vec<String>,

    /// Stage: keep rows for which the expression is true (repeatable)
    #[arg(long, value_name = "EXPR", help_heading = "Stages (run in this order)")]
    pub(crate) filter: Vec<String>,

    /// Stage: keep only the first row of each key within the run
    #[arg(
        long,
        value_name = "COL[,COL...]",
        value_delimiter = ',',
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) dedupe_key: Vec<String>,

    /// How far back --dedupe-key remembers keys: the run, or every run of the job
    /// [default: run]
    #[arg(
        long,
        value_name = "SCOPE",
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) dedupe_scope: Option<crate::core::spec::DedupeScope>,

    /// With --dedupe-scope job: forget the keys of runs started longer ago than this
    /// (e.g. 30d, 12h), so the remembered keys stay bounded [default: never]
    #[arg(
        long,
        value_name = "DURATION",
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) dedupe_retention: Option<String>,

    /// Stage: rename a column (repeatable)
    #[arg(
        long,
        value_name = "OLD=NEW",
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) rename: Vec<String>,

    /// Stage: keep only these columns, in this order
    #[arg(
        long,
        value_name = "COL[,COL...]",
        value_delimiter = ',',
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) select: Vec<String>,

    /// Stage: remove these columns
    #[arg(
        long = "drop",
        value_name = "COL[,COL...]",
        value_delimiter = ',',
        help_heading = "Stages (run in this order)"
    )]
    pub(crate) drop_columns: Vec<String>,

    /// Take only the inputs whose path below a given directory (or key below a given
    /// prefix) matches GLOB; repeatable. A GLOB without `/` matches the name at any depth
    /// (`*.csv`); `**` crosses directories. Names starting with `.` or `_` are never taken
    #[arg(long, value_name = "GLOB")]
    pub(crate) include: Vec<String>,

    /// Leave out the inputs whose path matches GLOB (as for --include); repeatable
    #[arg(long, value_name = "GLOB")]
    pub(crate) exclude: Vec<String>,

    /// Leave an input modified less than DURATION ago (`90s`, `5m`, `1h`) for a later
    /// run: a file still being copied in is not loaded half-written
    #[arg(long, value_name = "DURATION")]
    pub(crate) min_age: Option<String>,

    /// Load inputs again even if the manifest says they are loaded
    #[arg(long)]
    pub(crate) reload: bool,

    /// Keep only share I of N of the inputs (0 <= I < N), by a stable hash of each
    /// input's path or key: N machines given the same inputs, each its own --job, load
    /// disjoint shares that together are every input
    #[arg(long, value_name = "I/N")]
    pub(crate) shard: Option<String>,

    /// Job name: each job has its own journal, manifest and lock under TABLE/_ingest/
    /// [default: default; --status and --recover without it act on every job]
    #[arg(long, value_name = "NAME")]
    pub(crate) job: Option<String>,

    /// Print nothing on stderr but errors
    #[arg(short, long)]
    pub(crate) quiet: bool,

    /// Print a machine-readable JSON summary on stdout
    #[arg(long)]
    pub(crate) json: bool,
}

/// Flags that make no sense with --compact: a load's, but for the two it shares.
const COMPACT_CONFLICTS: &[&str] = &[
    "recover",
    "status",
    "abort",
    "config",
    "compression",
    "on_bad_input",
    "include",
    "exclude",
    "min_age",
    "shard",
    "table_format",
    "catalog",
    "table_name",
    "mode",
    "inputs",
    "reload",
    "delimiter",
    "partition_by",
    "format",
    "checkpoint_rows",
    "dedupe_key",
    "dedupe_scope",
    "dedupe_retention",
    "evolve",
    "json_new_keys",
    "infer_schema",
    "no_infer",
    "null_markers",
    "trim",
    "cast",
    "timezone",
    "derive",
    "filter",
    "rename",
    "select",
    "drop_columns",
    "max_errors",
];

/// Flags that only make sense for a load.
const LOAD_ONLY: [&str; 34] = [
    "compression",
    "on_bad_input",
    "include",
    "exclude",
    "min_age",
    "shard",
    "table_format",
    "catalog",
    "table_name",
    "mode",
    "target_file_size",
    "inputs",
    "reload",
    "delimiter",
    "partition_by",
    "format",
    "checkpoint_rows",
    "dedupe_key",
    "dedupe_scope",
    "dedupe_retention",
    "dry_run",
    "evolve",
    "json_new_keys",
    "infer_schema",
    "no_infer",
    "null_markers",
    "trim",
    "cast",
    "timezone",
    "derive",
    "filter",
    "rename",
    "select",
    "drop_columns",
];
