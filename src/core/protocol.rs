//! The protocol's messages and records: what the participants (source, stages, sink)
//! tell the coordinator, and what the journal writes down. Every participant imports
//! this module and none owns it, so the dependency arrows all point here.
//!
//! A checkpoint in one picture: the source emits a [`Barrier`]; each participant
//! acknowledges it with an [`Ack`] (the source with the [`Position`] to resume from, each
//! stage with a [`SnapshotRef`] to its saved state, the sink with its [`Flushed`]
//! transaction); the coordinator makes those durable, journals `CheckpointComplete`
//! naming each [`StagedFile`], and only then publishes.

use std::fmt::Debug;

use anyhow::Result;
use serde::{Deserialize, Serialize};

/// A checkpoint barrier: every record sent before it belongs to checkpoint `checkpoint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint: u64,
    /// The final barrier of the run: no record follows it.
    pub last: bool,
}

/// A participant's acknowledgement of a checkpoint barrier.
#[derive(Debug)]
pub enum Ack {
    /// The source emitted barrier n at `position`.
    Source {
        checkpoint: u64,
        position: Position,
        inputs_done: Vec<InputDone>,
        rows_read: u64,
        last: bool,
    },
    /// A stage snapshotted its state for n.
    Stage {
        checkpoint: u64,
        snapshot: Option<SnapshotRef>,
    },
    /// The sink flushed n's files; the coordinator makes them durable before journaling.
    Sink {
        checkpoint: u64,
        flushed: Box<dyn Flushed>,
    },
}

/// preCommit's second half, which the coordinator runs off the sink's thread: a
/// transaction whose files are written but not yet durable.
pub trait Flushed: Debug + Send {
    /// Rows written in the transaction.
    fn rows(&self) -> u64;
    /// Bad rows written to its rejects file.
    fn rejects(&self) -> u64;
    /// Makes every file durable in the staging area and returns them as the journal
    /// records them.
    fn make_durable(self: Box<Self>) -> Result<Vec<StagedFile>>;
}

/// An input's identity when the run started: enough to notice that it changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
    pub dev: u64,
    pub ino: u64,
    /// An object's ETag (`s3://` inputs): the store's word that its bytes are the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
}

impl Fingerprint {
    /// Same metadata: the cheap proof that a file did not change.
    pub fn same_metadata(&self, other: &Fingerprint) -> bool {
        self == other
    }
}

/// An input read to its end, with the hash of all its (decoded) bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputDone {
    pub input: usize,
    pub hash: String,
}

/// Where the source resumes: input `input`, just after `offset` decoded bytes (which hold
/// `lines` lines and hash to `prefix_hash`: the hex of their hash, or for an object's
/// chained hash the chain at the last block boundary and the hash since,
/// `blocks:CHAIN:PARTIAL`; see `source/content_hash.rs`). Inputs before `input` are
/// finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub input: usize,
    pub offset: u64,
    pub lines: u64,
    pub prefix_hash: String,
}

/// A stage snapshot as the journal references it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    pub stage: String,
    /// Path relative to the job's directory.
    pub file: String,
    pub len: u64,
    pub hash: String,
}

/// The table directory holding each job's rejects files (hidden from readers).
pub const REJECTS_DIR: &str = "_rejects";

/// One staged file as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedFile {
    /// Relative to the job's directory.
    pub staged: String,
    /// Relative to the table directory.
    pub dest: String,
    pub size: u64,
    pub rows: u64,
    /// An object-store table: the open multipart upload that holds the file's bytes in
    /// the store until commit completes it at `dest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<Upload>,
}

/// A staged file's bytes in an object store: a multipart upload with every part uploaded
/// and not yet completed, durable and invisible (`storage/bucket.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upload {
    /// The store's upload id.
    pub id: String,
    /// Each part's ETag, in order: what completing the upload names.
    pub parts: Vec<String>,
    /// The content hash of the whole file, to recognise it once published.
    pub hash: String,
}

impl StagedFile {
    /// A rejects file, rather than table data.
    pub fn is_rejects(&self) -> bool {
        self.dest
            .strip_prefix(REJECTS_DIR)
            .is_some_and(|rest| rest.starts_with('/'))
    }
}

/// Where a stage hands over its snapshot at a barrier (`state/snapshots.rs`).
pub trait SnapshotWriter {
    /// Writes a snapshot; the coordinator makes it durable before the journal names it,
    /// off the stage's thread, so the stage goes on with the next checkpoint's rows while
    /// the disk works.
    fn write(&self, stage: &str, checkpoint: u64, bytes: &[u8]) -> anyhow::Result<SnapshotRef>;
}
