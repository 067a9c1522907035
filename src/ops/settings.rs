//! Checked, resolved settings: what a command asks the operations to do. The command line
//! builds them (`cli/config.rs`); nothing here sees clap's types.

use std::path::PathBuf;
use std::time::Duration;

use crate::core::layout::JobLayout;
use crate::core::options::{ProgressMode, RunOptions};
use crate::core::spec::StageSpec;

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Command {
    /// Print the fault-injection points.
    ListFailPoints,
    /// Print a shell completion script.
    Completions(clap_complete::Shell),
    /// Load inputs into a table.
    Load(Box<LoadConfig>),
    /// Finish the interrupted run of the job named, or of every interrupted job when
    /// `None`; `max_errors` overrides the journaled limit.
    Recover(Common, Option<u64>, Option<String>),
    /// Undo the interrupted run of the job named, or of the one interrupted job.
    Abort(Common, Option<String>),
    /// Describe the table's jobs; `None` for every job; with `files`, its partitions'
    /// files too (`--status --files`).
    Status(Common, Option<String>, bool),
    /// Merge the table's small files (`--compact`).
    Compact(Box<CompactConfig>),
    /// Delete what no version and no run needs (`--vacuum`).
    Vacuum(Box<VacuumConfig>),
    /// Print a `[schema]` inferred from the inputs.
    InferSchema {
        inputs: Vec<PathBuf>,
        delimiter: u8,
        /// The stages a load would run: its leading null markers and trimming clean
        /// the sample, as they would clean the load's values before the cast.
        stages: Vec<StageSpec>,
    },
}

/// Settings shared by every command that touches a table.
#[derive(Debug, Clone)]
pub(crate) struct Common {
    /// The table's directory; for a table in a bucket, its local working copy.
    pub(crate) table: PathBuf,
    /// A table in a bucket: its URL (`s3://BUCKET/PREFIX`).
    pub(crate) remote: Option<crate::core::url::ObjectUrl>,
    pub(crate) job: String,
    pub(crate) quiet: bool,
    pub(crate) json: bool,
    pub(crate) progress: ProgressMode,
    /// How long to wait for the job's lock; `None` fails at once (exit 75).
    pub(crate) lock_wait: Option<Duration>,
    /// Threads parsing inputs at once (`--threads`).
    pub(crate) threads: usize,
}

/// The cores this process may run on (its CPU affinity, as `taskset` sets it).
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// A compaction: which partitions, and how large a file it aims at.
#[derive(Debug)]
pub(crate) struct CompactConfig {
    pub(crate) common: Common,
    /// Files of at least this many bytes are left alone; merged files stay below it.
    pub(crate) target_size: u64,
    /// `--partition COL=VALUE`: only partitions with these components.
    pub(crate) partitions: Vec<(String, String)>,
    /// List what would be merged, and change nothing.
    pub(crate) dry_run: bool,
}

/// A vacuum: how old what it deletes must be.
#[derive(Debug)]
pub(crate) struct VacuumConfig {
    pub(crate) common: Common,
    /// `--retention`: `None` for the table's own (Delta) or 7 days.
    pub(crate) retention: Option<Duration>,
    pub(crate) dry_run: bool,
}

/// A load: where, what, and how.
#[derive(Debug)]
pub(crate) struct LoadConfig {
    pub(crate) common: Common,
    pub(crate) inputs: Vec<PathBuf>,
    pub(crate) reload: bool,
    pub(crate) dry_run: bool,
    /// `--shard`: only this share of the inputs.
    pub(crate) shard: Option<crate::core::shard::Shard>,
    /// `--include` / `--exclude`: which files below a directory or prefix are inputs.
    pub(crate) select: crate::source::select::Selection,
    /// `--min-age`: an input modified more recently waits for a later run.
    pub(crate) min_age: Option<Duration>,
    /// How this load may change the table's contract.
    pub(crate) evolve: crate::core::options::Evolve,
    /// A first load into a typed table infers its CSV columns' types (`infer.rs`);
    /// `--no-infer` keeps them text.
    pub(crate) infer: bool,
    pub(crate) options: RunOptions,
}

impl Command {
    /// The table and job the command acts on, if it acts on one.
    pub(crate) fn common(&self) -> Option<&Common> {
        match self {
            Command::Load(cfg) => Some(&cfg.common),
            Command::Compact(cfg) => Some(&cfg.common),
            Command::Vacuum(cfg) => Some(&cfg.common),
            Command::Recover(common, ..)
            | Command::Abort(common, _)
            | Command::Status(common, ..) => Some(common),
            _ => None,
        }
    }
}

impl Common {
    /// The layout of the command's job in its table, local or in a bucket.
    pub(crate) fn layout(&self) -> JobLayout {
        JobLayout {
            target: self.remote.clone(),
            ..JobLayout::new(&self.table, &self.job)
        }
    }
}
