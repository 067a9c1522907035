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

use anyhow::Result;

#[cfg(feature = "s3")]
pub(crate) mod bucket;
#[cfg(feature = "s3")]
pub(crate) mod holder;
#[cfg(feature = "s3")]
pub(crate) mod lease;
pub(crate) mod local;
#[cfg(feature = "s3")]
pub(crate) mod paged;
#[cfg(feature = "s3")]
pub(crate) mod s3;

/// Bytes readable at any offset: a local file, or an object read in pages.
pub(crate) trait ReadAt: Debug + Send + Sync {
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
pub(crate) fn open_read_at(path: &std::path::Path) -> Result<Box<dyn ReadAt>> {
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
