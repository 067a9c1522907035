//! Where bytes live: local paths, and objects in S3-compatible stores. An input or
//! target argument is either a local path or a URL; `url.rs` tells them apart and
//! refuses, before anything is contacted, what it cannot serve or must not echo (a URL
//! carrying credentials).
//!
//! The seam: a table's data files go through a [`TableStore`], one file per store.
//! - `local.rs`: a table in a directory, through `fsutil` (rename, fsync).
//! - `object.rs`: a table in a bucket: open multipart uploads, completed at commit.
//!
//! And what a table in a bucket needs besides:
//! - `s3.rs`: the client, and `s3://` inputs read as streams.
//! - `bucket.rs`: a table's objects: conditional writes, multipart uploads, listing.
//! - `lease.rs`: the job lock of a table in a bucket; `holder.rs`: whether its holder
//!   still runs, when that holder was on this host.
//! - `replica.rs`: the job's state in the bucket, and its local working copy.
//! - `paged.rs`: manifest segments left in the bucket, read in pages as lookups need.

use std::fmt::Debug;
use std::path::PathBuf;

use anyhow::Result;

use crate::protocol::StagedFile;
use crate::report::Messages;
use crate::table::JobLayout;

#[cfg(feature = "s3")]
pub mod bucket;
#[cfg(feature = "s3")]
pub mod holder;
#[cfg(feature = "s3")]
pub mod lease;
pub mod local;
#[cfg(feature = "s3")]
mod object;
#[cfg(feature = "s3")]
pub mod paged;
#[cfg(feature = "s3")]
pub mod replica;
#[cfg(feature = "s3")]
pub mod s3;
pub mod url;

#[cfg(feature = "s3")]
pub use replica::Remote;

/// Where a table's data files live: the sink's staging made durable, the commit's
/// publish, and their undoing. Every method acts on files named by the journal alone,
/// so the coordinator, `--recover` and `--abort` share them.
pub trait TableStore: Debug + Send + Sync {
    /// preCommit, once the checkpoint's staged files (with their local paths) are
    /// durable on local disk: make them durable in the store, still invisible to readers;
    /// may record how in each [`StagedFile`] (the journal keeps it).
    fn stage(&self, files: &mut [(StagedFile, PathBuf)]) -> Result<()>;

    /// commit: makes each file of checkpoint `checkpoint` visible at its destination.
    /// Idempotent (a file already published by an earlier attempt is done) and never
    /// replaces anything else found there.
    fn publish(&self, layout: &JobLayout, checkpoint: u64, files: &[&StagedFile]) -> Result<()>;

    /// The size of what is at `dest` (relative to the table), if anything.
    fn size(&self, layout: &JobLayout, dest: &str) -> Result<Option<u64>>;

    /// Drops staged files of journaled checkpoints that will never be published.
    fn discard(&self, files: &[&StagedFile]) -> Result<()>;

    /// Drops what run `run` staged for checkpoints after `last_journaled`: they never
    /// completed, and no journal record names them.
    fn discard_unjournaled(&self, run: &str, last_journaled: u64) -> Result<()>;

    /// `--abort`: removes the run's published files (those that still have their
    /// journaled size; others are noted and left); returns (files, rows) removed.
    fn unpublish(
        &self,
        layout: &JobLayout,
        files: &[&StagedFile],
        run: &str,
        messages: Messages,
    ) -> Result<(u64, u64)>;
}

/// Bytes readable at any offset: a local file, or an object read in pages.
pub trait ReadAt: Debug + Send + Sync {
    /// The length in bytes.
    fn size(&self) -> Result<u64>;
    /// Fills `buf` from byte `at`; short of bytes is an error.
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> Result<()>;
}

#[derive(Debug)]
struct LocalFile(std::fs::File);

impl ReadAt for LocalFile {
    fn size(&self) -> Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> Result<()> {
        Ok(std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, at)?)
    }
}

/// Opens `path` for positioned reads: the file itself, or, when it is a reference to
/// an object that the working copy of a bucket's state left in the bucket
/// (`paged.rs`), that object.
pub fn open_read_at(path: &std::path::Path) -> Result<Box<dyn ReadAt>> {
    use anyhow::Context;
    use std::io::Read;
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut start = Vec::new();
    (&file)
        .take(8)
        .read_to_end(&mut start)
        .with_context(|| format!("cannot read {}", path.display()))?;
    #[cfg(feature = "s3")]
    if paged::is_reference(&start) {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        return paged::open(path, &bytes);
    }
    Ok(Box::new(LocalFile(file)))
}

/// The jobs with state in the table at `url`, sorted.
pub fn jobs_in(url: &url::ObjectUrl) -> anyhow::Result<Vec<String>> {
    #[cfg(feature = "s3")]
    return Ok(Remote::jobs(url)?.into_iter().collect());
    #[cfg(not(feature = "s3"))]
    anyhow::bail!("{url}: this ingest was built without object-store support")
}

/// Without object-store support no remote table exists; the type keeps the code that
/// asks "is this table remote?" free of feature gates.
#[cfg(not(feature = "s3"))]
#[derive(Debug)]
pub enum Remote {}

#[cfg(not(feature = "s3"))]
impl Remote {
    pub fn push(&self) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn journal_append(&self, _: &[u8]) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn journal_start(&self, _: &[u8]) -> anyhow::Result<()> {
        match *self {}
    }
}
