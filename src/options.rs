//! The options that shape a run's output, as plain enums: the command line parses them
//! (clap's `ValueEnum`), job files and the journal store them (serde), and everything
//! below the command line reads them from here, never from `cli.rs`.

use clap::ValueEnum;

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

/// How a table is laid out, and what makes its files visible.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TableFormat {
    /// Files in COL=VALUE directories: a file is in the table once it has its name
    #[default]
    Hive,
    /// A Delta Lake table: a file is in the table once the log in _delta_log/ names it
    Delta,
}

/// Write modes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
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
pub enum OnBadInput {
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
pub enum Compression {
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
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zstd => ".zst",
            Compression::Snappy => "",
        }
    }
}
