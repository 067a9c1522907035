//! `--dedupe-scope job`: the keys earlier runs of the job kept, so a dedupe stage drops a
//! row whose key any finished run already loaded, not only one seen earlier in its own
//! run.
//!
//! One file per key (the columns it is made of), `_ingest/JOB/keys/KEY.keys`: the
//! journal's framing (`journal.rs`) with magic `INGESTK\x01`; the first frame is a
//! `Header`, then two frames per folded run, a `Segment` and the run's new digests
//! (16 bytes each, exactly what its dedupe snapshots held).
//!
//! # Exactly once
//! The file changes only when a finished run is folded into it, in the same step that
//! folds the run's inputs into the manifest (`run::fold_finished`), before the run's
//! snapshots are removed: rewritten atomically, and skipped when the header already
//! names the run, so a crash between `RunFinished` and the fold just folds again. A
//! running or interrupted run only reads it, and the job's lock keeps any other run of
//! the job from folding meanwhile, so a run and its recovery see the same keys. An
//! aborted run folds nothing.
//!
//! # Retention
//! With `--dedupe-retention`, keys of runs started before the run's own start minus the
//! retention are forgotten: not restored, and dropped from the file at the next fold.
//! The cut-off is computed from the journaled start time, so a recovery forgets exactly
//! what the run it finishes forgot.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::core::protocol::SnapshotRef;
use crate::core::records::RunLog;
use crate::core::spec::StageSpec;
use crate::core::sys::fsutil;
use crate::state::framed::{decode_frames, encode_frame};
use crate::state::snapshots::SnapshotStore;

const MAGIC: &[u8; 8] = b"INGESTK\x01";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Header {
    /// The last run folded in.
    folded_run: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Segment {
    run_id: String,
    /// The run's start, seconds since the Unix epoch.
    started: i64,
}

/// The key file of a dedupe on `key`.
pub(crate) fn path(job_dir: &Path, key: &[String]) -> PathBuf {
    let name = xxhash_rust::xxh3::xxh3_64(key.join("\u{0}").as_bytes());
    job_dir.join("keys").join(format!("{name:016x}.keys"))
}

/// The run's start as Unix seconds, from its journaled RFC 3339 time.
pub(crate) fn started_unix(started_at: &str) -> Result<i64> {
    let ts: jiff::Timestamp = started_at
        .parse()
        .with_context(|| format!("bad run start time {started_at:?} in the journal"))?;
    Ok(ts.as_second())
}

/// Parses a retention such as `30d` or `12h` (humantime).
pub(crate) fn parse_retention(text: &str) -> Result<u64, String> {
    humantime::parse_duration(text)
        .map(|d| d.as_secs())
        .map_err(|e| format!("retention {text:?}: {e} (write e.g. 30d, 12h or 90min)"))
}

/// Runs started before this are forgotten (`None`: nothing is).
pub(crate) fn cutoff(started_at: &str, retention: Option<&str>) -> Result<Option<i64>> {
    let Some(text) = retention else {
        return Ok(None);
    };
    let secs = parse_retention(text).map_err(anyhow::Error::msg)?;
    Ok(Some(
        started_unix(started_at)?.saturating_sub(i64::try_from(secs).unwrap_or(i64::MAX)),
    ))
}

type Segments = Vec<(Segment, Vec<u8>)>;

fn read(file: &Path) -> Result<(Header, Segments)> {
    let bytes = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Header::default(), Vec::new()))
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let (frames, valid) = decode_frames(&bytes, MAGIC, file)?;
    if valid != bytes.len() || frames.len() % 2 != 1 {
        // Written atomically: a bad tail is damage, not a crash.
        bail!("{} is damaged; restore it from a backup", file.display());
    }
    let bad = || format!("{} holds a record this ingest cannot read", file.display());
    let header: Header = serde_json::from_slice(frames[0]).with_context(bad)?;
    let mut segments = Vec::new();
    for pair in frames[1..].chunks_exact(2) {
        let segment: Segment = serde_json::from_slice(pair[0]).with_context(bad)?;
        segments.push((segment, pair[1].to_vec()));
    }
    Ok((header, segments))
}

/// The digests earlier runs kept, oldest first, without those `cutoff` forgets: what a
/// job-scope dedupe restores before its own run's snapshots.
pub(crate) fn restore_bytes(file: &Path, cutoff: Option<i64>) -> Result<Vec<Vec<u8>>> {
    fsutil::settle(file)?;
    let (_, segments) = read(file)?;
    Ok(segments
        .into_iter()
        .filter(|(s, _)| cutoff.is_none_or(|c| s.started >= c))
        .map(|(_, bytes)| bytes)
        .collect())
}

/// Folds a finished run's new keys into the key file of each job-scope dedupe it had.
pub(crate) fn fold(job_dir: &Path, log: &RunLog) -> Result<()> {
    if log.aborted {
        return Ok(());
    }
    for (i, spec) in log.started.options.stages.iter().enumerate() {
        let StageSpec::Dedupe {
            key,
            scope: crate::core::spec::DedupeScope::Job,
            retention,
        } = spec
        else {
            continue;
        };
        let id = format!("{}-dedupe", i + 1);
        let file = path(job_dir, key);
        let (mut header, mut segments) = read(&file)?;
        if header.folded_run.as_deref() == Some(log.started.run_id.as_str()) {
            continue;
        }
        let mut digests = Vec::new();
        let snapshots: Vec<&SnapshotRef> = log
            .checkpoints
            .iter()
            .flat_map(|c| &c.snapshots)
            .filter(|s| s.stage == id)
            .collect();
        for snapshot in snapshots {
            digests.extend(SnapshotStore::read(job_dir, snapshot)?);
        }
        if let Some(cut) = cutoff(&log.started.started_at, retention.as_deref())? {
            segments.retain(|(s, _)| s.started >= cut);
        }
        segments.push((
            Segment {
                run_id: log.started.run_id.clone(),
                started: started_unix(&log.started.started_at)?,
            },
            digests,
        ));
        header.folded_run = Some(log.started.run_id.clone());
        let mut bytes = MAGIC.to_vec();
        encode_frame(&serde_json::to_vec(&header)?, &mut bytes);
        for (segment, digests) in &segments {
            encode_frame(&serde_json::to_vec(segment)?, &mut bytes);
            encode_frame(digests, &mut bytes);
        }
        let dir = file.parent().context("a key file needs a directory")?;
        fsutil::create_dir_all_durable(dir)?;
        // `keys/` may predate a crash that skipped its fsync into the job directory, and
        // the snapshots these keys come from are removed right after this fold. (Today
        // the journal's settle at the start of every fold already fsyncs that directory;
        // this keeps the key file from relying on it.)
        fsutil::sync_parent(dir)?;
        fsutil::write_atomic(&file, &bytes)?;
    }
    Ok(())
}
