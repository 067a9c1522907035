//! The manifest: which inputs this job has loaded, so a re-run skips them.
//!
//! An input becomes loaded in the journal record that commits its last rows
//! (`CheckpointComplete.inputs_done`); the manifest is only a compacted copy of finished
//! runs' journals, rewritten atomically when a run finishes (or, after a crash between
//! `RunFinished` and the rewrite, by the next start). So the manifest and the data can
//! never disagree: folding the same journal twice changes nothing.
//!
//! File layout: the journal's framing (see `journal.rs`) with magic `INGESTM\x01`; the
//! first frame is a [`Header`], each further frame one [`Entry`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::failpoint;
use crate::fsutil;
use crate::journal::{decode_frames, encode_frame, RunLog};
use crate::protocol::Fingerprint;
use crate::source::{hash_hex, reader};

const MANIFEST_MAGIC: &[u8; 8] = b"INGESTM\x01";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Header {
    /// The last run folded in; folding it again is skipped.
    folded_run: Option<String>,
}

/// One loaded input.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub fingerprint: Fingerprint,
    pub hash: String,
    pub run_id: String,
}

/// What the manifest says about an input.
#[derive(Debug)]
pub enum Status {
    New,
    Loaded,
    /// Loaded before, with other content.
    Changed(Entry),
}

/// The loaded inputs of one job, by canonical path.
#[derive(Debug, Default)]
pub struct Manifest {
    header: Header,
    entries: BTreeMap<String, Entry>,
}

impl Manifest {
    /// Reads the manifest in order to act on it (skip loaded inputs, fold a run into it):
    /// first makes it durable, file and name, since the process that renamed it into
    /// place may have crashed before fsyncing its directory (see `fsutil::settle`).
    pub fn load_settled(path: &Path) -> Result<Manifest> {
        fsutil::settle(path)?;
        Manifest::load(path)
    }

    /// Reads the manifest; a missing one is empty.
    pub fn load(path: &Path) -> Result<Manifest> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Manifest::default()),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read manifest {}", path.display()))
            }
        };
        let (frames, valid) = decode_frames(&bytes, MANIFEST_MAGIC, path)?;
        if valid != bytes.len() {
            // Written atomically, so a bad tail is damage, not a crash: refuse to guess.
            anyhow::bail!(
                "manifest {} is damaged at byte {valid}; restore it from a backup",
                path.display()
            );
        }
        let mut manifest = Manifest::default();
        let bad = || {
            format!(
                "manifest {} holds a record this ingest cannot read",
                path.display()
            )
        };
        let mut frames = frames.into_iter();
        if let Some(first) = frames.next() {
            manifest.header = serde_json::from_slice(first).with_context(bad)?;
        }
        for frame in frames {
            let entry: Entry = serde_json::from_slice(frame).with_context(bad)?;
            manifest
                .entries
                .insert(entry.fingerprint.path.clone(), entry);
        }
        Ok(manifest)
    }

    /// Loaded inputs by their size on disk: where a copy of a new input could hide.
    pub fn by_size(&self) -> std::collections::HashMap<u64, Vec<&Entry>> {
        let mut index: std::collections::HashMap<u64, Vec<&Entry>> = Default::default();
        for entry in self.entries.values() {
            index.entry(entry.fingerprint.size).or_default().push(entry);
        }
        index
    }

    /// The run that loaded the input at `path`, if one did.
    pub fn loaded_by(&self, path: &str) -> Option<String> {
        self.entries.get(path).map(|e| e.run_id.clone())
    }

    /// Number of loaded inputs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is loaded yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Classifies an input. Unchanged metadata means loaded; changed metadata costs a
    /// full hash, so a file that was merely touched is still recognised as loaded.
    pub fn status(&self, input: &Fingerprint) -> Result<Status> {
        let Some(entry) = self.entries.get(&input.path) else {
            return Ok(Status::New);
        };
        if entry.fingerprint.same_metadata(input) {
            return Ok(Status::Loaded);
        }
        if entry.fingerprint.size == input.size || reader::is_compressed(&input.path) {
            let hash = reader::hash_input(Path::new(&input.path))?;
            if hash_hex(hash) == entry.hash {
                return Ok(Status::Loaded);
            }
        }
        Ok(Status::Changed(entry.clone()))
    }

    /// Adds a finished run's loaded inputs and rewrites the manifest atomically. An
    /// aborted run loaded nothing: the manifest stays as it is.
    pub fn fold(&mut self, path: &Path, log: &RunLog) -> Result<()> {
        if self.header.folded_run.as_deref() == Some(log.started.run_id.as_str()) || log.aborted {
            return Ok(());
        }
        for checkpoint in &log.checkpoints {
            for done in &checkpoint.inputs_done {
                let fingerprint = log
                    .started
                    .inputs
                    .get(done.input)
                    .with_context(|| {
                        format!(
                            "journal names input {} of a run with fewer inputs",
                            done.input
                        )
                    })?
                    .clone();
                let entry = Entry {
                    fingerprint,
                    hash: done.hash.clone(),
                    run_id: log.started.run_id.clone(),
                };
                self.entries.insert(entry.fingerprint.path.clone(), entry);
            }
        }
        self.header.folded_run = Some(log.started.run_id.clone());
        let mut bytes = MANIFEST_MAGIC.to_vec();
        encode_frame(&serde_json::to_vec(&self.header)?, &mut bytes);
        for entry in self.entries.values() {
            encode_frame(&serde_json::to_vec(entry)?, &mut bytes);
        }
        fsutil::write_atomic(path, &bytes)?;
        failpoint::hit("manifest.fold.after");
        Ok(())
    }
}
