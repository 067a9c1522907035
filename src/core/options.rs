//! The options that shape a run's output, as plain enums: the command line parses them
//! (clap's `ValueEnum`), job files and the journal store them (serde), and everything
//! below the command line reads them from here, never from `cli.rs`.

use crate::core::catalog::CatalogTable;
use crate::core::spec::{SchemaSpec, StageSpec};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// When to draw the progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ProgressMode {
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
pub(crate) enum Format {
    /// CSV with a header row (`.csv`)
    Csv,
    /// JSON lines, one object per row (`.jsonl`)
    Jsonl,
    /// Apache Parquet (`.parquet`)
    Parquet,
}

/// How a table is laid out, and what makes its files visible.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TableFormat {
    /// Files in COL=VALUE directories: a file is in the table once it has its name
    #[default]
    Hive,
    /// A Delta Lake table: a file is in the table once the log in _delta_log/ names it
    Delta,
    /// An Apache Iceberg table: a file is in the table once a snapshot committed through
    /// its catalog (--catalog) names it
    Iceberg,
}

impl TableFormat {
    /// Where the table's data files go under its root: an Iceberg table's in `data/`, as
    /// every Iceberg writer lays them out (`write.data.path`) and as S3 Tables and other
    /// table buckets require; a Hive or Delta table's partitions are at its root.
    pub(crate) fn data_dir(self) -> &'static str {
        match self {
            TableFormat::Hive | TableFormat::Delta => "",
            TableFormat::Iceberg => "data/",
        }
    }
}

/// Write modes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mode {
    /// Add the load's files to the table; existing files are never touched
    #[default]
    Append,
    /// Replace each partition the load writes to, as a whole, when the run finishes;
    /// partitions it does not write to are never changed
    OverwritePartitions,
}

/// What an input that cannot load does to the run (`--on-bad-input`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum OnBadInput {
    /// The run fails, naming the input and what is wrong with it
    #[default]
    Fail,
    /// The input is set aside (quarantined) and the others load; exit 3
    Quarantine,
}

/// Output compression of data files.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Compression {
    /// Plain files
    #[default]
    None,
    /// gzip (`.gz`)
    Gzip,
    /// Zstandard (`.zst`; inside Parquet files, their default)
    Zstd,
    /// Snappy (Parquet only)
    Snappy,
}

impl Compression {
    /// The suffix after the format's extension.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zstd => ".zst",
            Compression::Snappy => "",
        }
    }
}

/// The options that shape a run's output. They are journaled with the run, so that
/// `--recover` finishes it exactly as it began, whatever flags it is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOptions {
    pub(crate) delimiter: u8,
    pub(crate) partition_by: Vec<String>,
    pub(crate) checkpoint_rows: u64,
    pub(crate) format: Format,
    /// Hive directories, or a Delta Lake or Iceberg table.
    #[serde(default)]
    pub(crate) table_format: TableFormat,
    /// An Iceberg table: its catalog and its name there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) catalog: Option<CatalogTable>,
    /// Bad rows allowed into the rejects before the run fails (0: fail at the first).
    #[serde(default)]
    pub(crate) max_errors: u64,
    /// The input schema a job file declared; turned into stages when the run starts.
    #[serde(default)]
    pub(crate) schema: Option<SchemaSpec>,
    /// The transform stages, in order.
    #[serde(default)]
    pub(crate) stages: Vec<StageSpec>,
    /// Compression of the data files.
    #[serde(default)]
    pub(crate) compression: Compression,
    /// Part files are cut at about this many bytes.
    #[serde(default)]
    pub(crate) target_file_size: Option<u64>,
    /// Append, or replace the partitions the run writes to.
    #[serde(default)]
    pub(crate) mode: Mode,
    /// JSON lines: what a key the sampled objects did not have does to its row.
    #[serde(default)]
    pub(crate) json_new_keys: NewKeys,
    /// An input that cannot load fails the run, or is quarantined.
    #[serde(default)]
    pub(crate) on_bad_input: crate::core::options::OnBadInput,
    /// A column an input lacks loads as null (`--evolve add-columns`, the union by name
    /// of DuckDB's `union_by_name` and Spark's `mergeSchema`); else it is an error.
    #[serde(default)]
    pub(crate) fill_missing: bool,
}

/// What a JSON lines key that is not a column does (`--json-new-keys`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NewKeys {
    /// The row is bad: it fails the run, or goes to the rejects with --max-errors
    #[default]
    Error,
    /// The key is ignored
    Drop,
}

/// How a load may change the recorded contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Evolve {
    /// The load must match the contract exactly
    #[default]
    Never,
    /// The load may add columns after the recorded ones (older files read them as null)
    AddColumns,
}
