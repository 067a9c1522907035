//! A table in a bucket as a [`TableStore`]: two-phase commit on objects.
//!
//! S3 has no rename; an object appears atomically when its upload completes. So:
//! - stage (preCommit): each staged file becomes a multipart upload with every part sent
//!   and left open: durable in the store, in no listing. The journal record names the
//!   upload (id, part ETags, content hash).
//! - publish (commit): `CompleteMultipartUpload` with `If-None-Match: *` at the final
//!   key. An object already there with the upload's bytes was published by an earlier
//!   attempt; anything else there is another writer's and is never replaced.
//! - discard: `AbortMultipartUpload`, for uploads the journal names (`--abort`) and for
//!   those of checkpoints that never completed, found in the store's own list of open
//!   uploads (a crash can come before any record names them).

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::replica::{remove_if_exists, Remote};
use crate::core::layout::JobLayout;
use crate::core::layout::{unpublish_each, AtDest, TableStore};
use crate::core::messages::Messages;
use crate::core::protocol::StagedFile;
use crate::core::sys::failpoint;
use crate::storage::bucket::Completed;

impl TableStore for Remote {
    fn stage(&self, files: &mut [(StagedFile, PathBuf)]) -> Result<()> {
        self.check_lease()?;
        let named: Vec<(&str, &std::path::Path)> = files
            .iter()
            .map(|(staged, path)| (staged.dest.as_str(), path.as_path()))
            .collect();
        let uploads = self.bucket.upload_all(&named)?;
        for ((staged, _), upload) in files.iter_mut().zip(uploads) {
            staged.upload = Some(upload);
        }
        Ok(())
    }

    fn publish(&self, layout: &JobLayout, checkpoint: u64, files: &[&StagedFile]) -> Result<()> {
        let mut named = Vec::with_capacity(files.len());
        for file in files {
            let upload = file.upload.as_ref().with_context(|| {
                format!(
                    "checkpoint {checkpoint} journaled staged file {} without its upload; it \
                     cannot be published to {}",
                    file.staged,
                    self.bucket.url()
                )
            })?;
            named.push((file.dest.as_str(), upload, file.size));
        }
        // In two halves, so a crash test can stop between them: some objects published,
        // the others not, the commit not journaled.
        let mid = named.len().div_ceil(2);
        for (from, to) in [(0, mid), (mid, named.len())] {
            let outcomes = self.bucket.complete_all(&named[from..to])?;
            for (outcome, file) in outcomes.into_iter().zip(&files[from..to]) {
                match outcome? {
                    Completed::Published | Completed::AlreadyThere => {}
                }
                // The working copy's bytes are in the object now.
                remove_if_exists(&layout.dir.join(&file.staged))?;
                failpoint::hit("commit.rename.after");
            }
            if from == 0 && mid > 0 {
                failpoint::hit("commit.mid");
            }
        }
        failpoint::hit("commit.dirsync.after");
        Ok(())
    }

    fn size(&self, _layout: &JobLayout, dest: &str) -> Result<Option<u64>> {
        self.bucket.size(dest)
    }

    fn discard(&self, files: &[&StagedFile]) -> Result<()> {
        for file in files {
            if let Some(upload) = &file.upload {
                self.bucket.abort(&file.dest, &upload.id)?;
            }
        }
        Ok(())
    }

    /// The part files' names carry the run and the checkpoint
    /// (`part-JOB-RUN-CHECKPOINT-N`, `rejects-JOB-RUN-CHECKPOINT`), so the store's list
    /// of open uploads tells which ones belong to checkpoints after `last_journaled`.
    /// Uploads of journaled checkpoints are the journal's to complete or discard.
    fn discard_unjournaled(&self, run: &str, last_journaled: u64) -> Result<()> {
        let tag = format!("-{run}-");
        for (rel, id) in self.bucket.open_uploads("")? {
            let name = rel.rsplit('/').next().unwrap_or(&rel);
            let checkpoint = name
                .find(&tag)
                .and_then(|at| name.get(at + tag.len()..at + tag.len() + 6))
                .and_then(crate::core::layout::parse_checkpoint_dir_name);
            if checkpoint.is_some_and(|n| n > last_journaled) {
                self.bucket.abort(&rel, &id)?;
            }
        }
        Ok(())
    }

    fn unpublish(
        &self,
        _layout: &JobLayout,
        files: &[&StagedFile],
        run: &str,
        messages: Messages,
    ) -> Result<(u64, u64)> {
        let look = |file: &StagedFile| {
            let found = match self.bucket.size(&file.dest)? {
                Some(size) if size == file.size => AtDest::Published,
                Some(size) => AtDest::Other(size),
                None => AtDest::Nothing,
            };
            Ok((found, self.bucket.url_of(&file.dest).to_string()))
        };
        unpublish_each(files, run, messages, look, |file| {
            self.bucket.delete(&file.dest)
        })
    }
}
