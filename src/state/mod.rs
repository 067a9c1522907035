//! The job's durable state: framed files, the journal, the manifest of loaded inputs, the
//! table's contract, dedupe keys and the bucket replica. Each stores and replays; none
//! decides what to do with what it reads (that is `ops/`).

#[cfg(feature = "s3")]
mod bucket_table;
pub(crate) mod contract;
pub mod framed;
pub mod journal;
pub(crate) mod keystore;
pub(crate) mod manifest;
#[cfg(feature = "s3")]
pub(crate) mod replica;
pub(crate) mod snapshots;

/// The jobs with state in the table at `url`, sorted.
pub(crate) fn jobs_in(url: &crate::core::url::ObjectUrl) -> anyhow::Result<Vec<String>> {
    #[cfg(feature = "s3")]
    return Ok(replica::Remote::jobs(url)?.into_iter().collect());
    #[cfg(not(feature = "s3"))]
    anyhow::bail!("{url}: this ingest was built without object-store support")
}
