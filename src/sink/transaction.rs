//! A checkpoint's open transaction: its staged part files, the partition → file map,
//! and the cap on files open at once (closing the longest-open one, and reopening it to
//! append, or for Parquet starting a new part).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use anyhow::{Context, Result};
use foldhash::fast::RandomState;

use super::encode::{Compression, Encoder};
use crate::cli::Format;
use crate::fsutil;
use crate::table::JobLayout;

pub(super) struct PartFile {
    pub(super) staged: PathBuf,
    pub(super) staged_rel: String,
    pub(super) dest: String,
    /// `None` while the file is closed to stay under the open-file cap.
    pub(super) writer: Option<Encoder>,
    pub(super) format: Format,
    pub(super) compression: Compression,
    /// The partition key (for Parquet parts, which a close seals).
    pub(super) key: Vec<u8>,
    pub(super) rows: u64,
}

/// The open transaction of one checkpoint.
pub(super) struct Transaction {
    pub(super) checkpoint: u64,
    pub(super) dir: PathBuf,
    pub(super) parts: Vec<PartFile>,
    /// Partition key (length-prefixed raw values) → index in `parts`.
    /// foldhash: fast on short keys, and seeded per process against crafted collisions.
    pub(super) by_key: HashMap<Vec<u8>, usize, RandomState>,
    pub(super) rows: u64,
    /// The rejects file of this checkpoint, once it has a bad row.
    pub(super) rejects_part: Option<usize>,
    pub(super) rejects: u64,
    /// Parts whose file is open, oldest first.
    pub(super) open: VecDeque<usize>,
}

/// Staged files open at once per transaction. A load touching more partitions in one
/// checkpoint closes the longest-open file and reopens it (appending) when needed, so
/// 10,000 partitions need neither 10,000 descriptors nor 10,000 write buffers.
const MAX_OPEN: usize = 256;
/// The write buffer of a staged file once a checkpoint has many partitions.
pub(super) const SMALL_WRITE_BUFFER: usize = 16 * 1024;

impl Transaction {
    /// The writer of `part`, reopening its file (and closing the oldest) if needed.
    pub(super) fn writer(&mut self, part: usize) -> Result<&mut Encoder> {
        if self.parts[part].writer.is_none() {
            self.make_room()?;
            let path = &self.parts[part].staged;
            let file = fsutil::open_append(path)?;
            let (format, compression) = (self.parts[part].format, self.parts[part].compression);
            self.parts[part].writer =
                Some(Encoder::new(format, compression, file, SMALL_WRITE_BUFFER)?);
            self.open.push_back(part);
        }
        self.parts[part]
            .writer
            .as_mut()
            .context("a staged file's writer vanished")
    }

    /// Closes the longest-open file when the cap is reached.
    pub(super) fn make_room(&mut self) -> Result<()> {
        while self.open.len() >= MAX_OPEN {
            let Some(victim) = self.open.pop_front() else {
                break;
            };
            let part = &mut self.parts[victim];
            if let Some(writer) = part.writer.take() {
                let sealed = writer.sealed_when_closed();
                // Ends a compressed stream properly (a gzip member, a zstd frame), or a
                // Parquet file (its footer). The first kind is reopened to append.
                writer.into_file().with_context(|| {
                    format!("cannot write staged file {}", part.staged.display())
                })?;
                if sealed {
                    // A finished Parquet file takes no more rows: the partition's next
                    // row opens a new part file.
                    let key = std::mem::take(&mut part.key);
                    if self.by_key.get(&key) == Some(&victim) {
                        self.by_key.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Transaction {
    pub(super) fn new(layout: &JobLayout, run_id: &str, checkpoint: u64) -> Transaction {
        Transaction {
            checkpoint,
            dir: layout.pending_txn(run_id, checkpoint),
            parts: Vec::new(),
            by_key: HashMap::default(),
            rows: 0,
            rejects_part: None,
            rejects: 0,
            open: VecDeque::new(),
        }
    }
}
