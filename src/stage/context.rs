//! What stages may know of the run they are in: the run's identity and inputs, and the
//! load metadata a `metadata` stage can add as a column.

use serde::{Deserialize, Serialize};

/// Load metadata a `metadata` stage can add as a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetaField {
    /// The input file's path.
    SourceFile,
    /// The line where the record starts in its input.
    SourceLine,
    /// The run's id.
    RunId,
    /// When the run started (the same value for every row, even across recovery).
    LoadTime,
}

/// What stages may know about the run.
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    pub run_id: String,
    pub started_at: String,
    pub inputs: Vec<String>,
    /// The bytes the parser will see in all, what stages that keep state size it by; 0
    /// when unknown (a compressed input's size on disk says little about it).
    pub input_bytes: u64,
}
