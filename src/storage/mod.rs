//! Where bytes live: local paths, and objects in S3-compatible stores. An input or
//! target argument is either a local path or a URL; `url.rs` tells them apart and
//! refuses, before anything is contacted, what it cannot serve or must not echo (a URL
//! carrying credentials).
//!
//! - `s3.rs`: the client, and `s3://` inputs read as streams.
//! - `bucket.rs`: a table's objects: conditional writes, multipart staging, publish.
//! - `lease.rs`: the job lock of a table in a bucket.
//! - `replica.rs`: the job's state in the bucket, and its local working copy.
//!
//! A local table needs none of them: its storage is the filesystem, through `fsutil`.

#[cfg(feature = "s3")]
pub mod bucket;
#[cfg(feature = "s3")]
pub mod lease;
#[cfg(feature = "s3")]
pub mod replica;
#[cfg(feature = "s3")]
pub mod s3;
pub mod url;

#[cfg(feature = "s3")]
pub use replica::Remote;

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
    pub fn upload(
        &self,
        _: &mut [(crate::protocol::StagedFile, std::path::PathBuf)],
    ) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn settle_uploads(&self, _: &str, _: u64) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn publish(
        &self,
        _: &[&crate::protocol::StagedFile],
        _: &std::path::Path,
    ) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn discard(&self, _: &[&crate::protocol::StagedFile]) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn remove(&self, _: &str) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn size(&self, _: &str) -> anyhow::Result<Option<u64>> {
        match *self {}
    }
}
