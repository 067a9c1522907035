//! The coordinator's journal: an append-only, framed, checksummed, versioned log.
//!
//! It is the single source of truth for `--recover`: what the run is (its id, options and
//! input fingerprints), which checkpoints completed (with the source position, the stage
//! snapshots and every staged → final path), which were committed, and whether the run
//! finished. One journal holds one run; when a run finishes, its loaded inputs are folded
//! into the manifest and the next run starts a fresh journal, so history never makes a
//! start or a recovery slower.
//!
//! # File layout (version 1)
//! ```text
//! header  : 8 bytes   b"INGESTJ" followed by the format version (1)
//! frame*  : u32 LE    payload length in bytes
//!           u32 LE    CRC-32 (IEEE) of the payload
//!           payload   one `Record`, serialized as JSON
//! ```
//! A crash can tear only the last frame. Replay stops at the first frame that is short or
//! whose checksum fails; everything from there on is ignored and, when the journal is
//! reopened for writing, truncated away (durably) before anything new is appended.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::core::layout::JobLayout;
use crate::core::layout::StateMirror;
use crate::core::records::{Record, RunLog, RunStarted};
use crate::core::sys::fsutil;
use crate::state::framed::{decode_frames, encode_frame, FRAME_HEADER};

const JOURNAL_MAGIC: &[u8; 8] = b"INGESTJ\x01";

/// Replays a run from its records, in order.
fn run_log(records: Vec<Record>, path: &Path) -> Result<Option<RunLog>> {
    let mut records = records.into_iter();
    let started = match records.next() {
        None => return Ok(None),
        Some(Record::RunStarted(s)) => s,
        Some(other) => bail!(
            "journal {} does not start with a run: {other:?}",
            path.display()
        ),
    };
    let mut log = RunLog {
        started,
        checkpoints: Vec::new(),
        committed: BTreeSet::new(),
        exchange: None,
        exchanged: false,
        finished: false,
        aborting: false,
        aborted: false,
        quarantined: Vec::new(),
    };
    for record in records {
        if !log.apply(record) {
            bail!("journal {} holds two runs", path.display());
        }
    }
    Ok(Some(log))
}

/// True when `payload` is a run's first record (`RunStarted`).
#[cfg(feature = "s3")]
pub(crate) fn starts_run(payload: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<Record>(payload),
        Ok(Record::RunStarted(_))
    )
}

/// A journal file holding `payloads`, in order.
pub(crate) fn file_of<'a>(payloads: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut bytes = JOURNAL_MAGIC.to_vec();
    for payload in payloads {
        encode_frame(payload, &mut bytes);
    }
    bytes
}

/// What replay found in a journal file.
pub struct Replay {
    pub log: Option<RunLog>,
    /// Bytes of valid records (header included); anything after is a torn tail.
    pub valid_len: u64,
    pub file_len: u64,
}

/// Reads a journal in order to act on it: replays it, then makes what was read durable.
///
/// The journal may end in records that a crashed process wrote and never fsynced (a
/// crash between `write` and `fsync` of `append`): the page cache serves them to this
/// replay, but a power cut would still lose them. Anything this process does because of
/// a record (publish a checkpoint, exchange a partition, fold the run into the manifest)
/// must not outlive the record, so the journal and its directory are fsynced here, before
/// the caller takes its first step. A torn tail is made durable too; it is harmless,
/// since replay ignores it and `open_append` cuts it off.
pub(crate) fn replay_settled(path: &Path) -> Result<Replay> {
    fsutil::settle(path)?;
    replay(path)
}

/// Reads a journal without changing it, to report on it (`--status`, `--dry-run`); code
/// that acts on what it reads uses [`replay_settled`]. A missing journal is an empty one.
pub fn replay(path: &Path) -> Result<Replay> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)
                .with_context(|| format!("cannot read journal {}", path.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot open journal {}", path.display())),
    }
    let (frames, valid_len) = decode_frames(&bytes, JOURNAL_MAGIC, path)?;
    let records = frames
        .iter()
        .map(|f| serde_json::from_slice::<Record>(f))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| {
            format!(
                "journal {} holds a record this ingest cannot read",
                path.display()
            )
        })?;
    Ok(Replay {
        log: run_log(records, path)?,
        valid_len: valid_len as u64,
        file_len: bytes.len() as u64,
    })
}

/// An open journal, positioned at its end, that appends durable records.
pub(crate) struct Journal {
    file: File,
    path: PathBuf,
    /// A table in a bucket: each record goes there too, and only counts once it has.
    remote: Option<Arc<dyn StateMirror>>,
}

impl Journal {
    /// Starts a new journal holding only `started`, replacing the previous one atomically.
    ///
    /// The caller has already folded the previous run into the manifest.
    pub(crate) fn create(layout: &JobLayout, started: &RunStarted) -> Result<Journal> {
        let path = &layout.journal();
        let payload = serde_json::to_vec(&Record::RunStarted(started.clone()))?;
        let bytes = file_of(std::iter::once(&payload[..]));
        fsutil::write_atomic(path, &bytes)?;
        if let Some(remote) = &layout.remote {
            remote.journal_start(&payload)?;
        }
        Journal::open_append(layout, bytes.len() as u64)
    }

    /// Opens an existing journal for appending, cutting off a torn tail first.
    pub(crate) fn open_append(layout: &JobLayout, valid_len: u64) -> Result<Journal> {
        let path = &layout.journal();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open journal {}", path.display()))?;
        let len = file
            .metadata()
            .with_context(|| format!("cannot stat {}", path.display()))?
            .len();
        if len != valid_len {
            // A torn record from a crash: drop it before appending, or the next reader
            // would stop at the tear and never see the records written after it.
            fsutil::truncate_durable(&file, path, valid_len)?;
        }
        let mut journal = Journal {
            file,
            path: path.to_path_buf(),
            remote: layout.remote.clone(),
        };
        use std::io::Seek;
        journal
            .file
            .seek(std::io::SeekFrom::Start(valid_len))
            .with_context(|| format!("cannot seek journal {}", path.display()))?;
        Ok(journal)
    }

    /// Appends one record and fsyncs it: when this returns, the record survives a power cut.
    pub(crate) fn append(&mut self, record: &Record) -> Result<()> {
        let payload = serde_json::to_vec(record)?;
        let mut frame = Vec::with_capacity(payload.len() + FRAME_HEADER);
        encode_frame(&payload, &mut frame);
        self.file
            .write_all(&frame)
            .with_context(|| format!("cannot append to journal {}", self.path.display()))?;
        // The record is in the page cache only: a process that reads it now (a recovery
        // after a crash here) must make it durable before acting on it (`replay_settled`).
        crate::core::sys::failpoint::hit("journal.write.after");
        fsutil::sync_file(&self.file, &self.path)?;
        match &self.remote {
            Some(remote) => remote.journal_append(&payload),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_stop_at_a_torn_tail() {
        let mut bytes = JOURNAL_MAGIC.to_vec();
        encode_frame(b"one", &mut bytes);
        encode_frame(b"two", &mut bytes);
        let whole = bytes.len();
        encode_frame(b"three", &mut bytes);
        for cut in whole..bytes.len() {
            let (frames, valid) =
                decode_frames(&bytes[..cut], JOURNAL_MAGIC, Path::new("j")).unwrap();
            assert_eq!(frames, vec![&b"one"[..], &b"two"[..]]);
            assert_eq!(valid, whole);
        }
        let (frames, valid) = decode_frames(&bytes, JOURNAL_MAGIC, Path::new("j")).unwrap();
        assert_eq!(frames.len(), 3);
        assert_eq!(valid, bytes.len());
    }

    #[test]
    fn a_flipped_bit_ends_the_valid_prefix() {
        let mut bytes = JOURNAL_MAGIC.to_vec();
        encode_frame(b"one", &mut bytes);
        let first = bytes.len();
        encode_frame(b"two", &mut bytes);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        let (frames, valid) = decode_frames(&bytes, JOURNAL_MAGIC, Path::new("j")).unwrap();
        assert_eq!(frames, vec![&b"one"[..]]);
        assert_eq!(valid, first);
    }

    #[test]
    fn another_version_is_refused_not_misread() {
        let mut bytes = b"INGESTJ\x09".to_vec();
        encode_frame(b"one", &mut bytes);
        let err = decode_frames(&bytes, JOURNAL_MAGIC, Path::new("j")).unwrap_err();
        assert!(err.to_string().contains("version 9"), "{err}");
    }
}
