//! Where a compaction reads the files it merges: the table's directory, where they are
//! read in place, or the table's bucket, where a file's shape comes from its footer
//! (one ranged GET) and a bin's files are fetched into the staging area to be merged,
//! then dropped.
//!
//! Memory stays bounded by the target size either way; the local disk of a compaction
//! in a bucket holds, per merging thread, one bin's inputs and its merged file.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::sink::merge::FileKind;
#[cfg(feature = "s3")]
use crate::storage::bucket::Bucket;

/// The table a compaction reads.
pub(crate) enum Inputs {
    /// A table in a directory.
    Dir(PathBuf),
    /// A table in a bucket.
    #[cfg(feature = "s3")]
    Bucket(Bucket),
}

impl Inputs {
    /// The shape of each of `files` (kind, path relative to the table, size), in order:
    /// what must be the same for two files to merge (`FileKind::shape`).
    pub(crate) fn shapes(&self, files: &[(FileKind, String, u64)]) -> Result<Vec<String>> {
        match self {
            Inputs::Dir(table) => files
                .iter()
                .map(|(kind, rel, _)| kind.shape(&table.join(rel)))
                .collect(),
            #[cfg(feature = "s3")]
            Inputs::Bucket(bucket) => footers::shapes(bucket, files),
        }
    }

    /// Local paths holding `files` (path relative to the table, size), in order: the
    /// table's own, or copies fetched from the bucket into `scratch` (made here; the
    /// caller removes it once merged).
    #[cfg_attr(not(feature = "s3"), allow(unused_variables))]
    pub(crate) fn fetch(&self, files: &[(String, u64)], scratch: &Path) -> Result<Vec<PathBuf>> {
        match self {
            Inputs::Dir(table) => Ok(files.iter().map(|(rel, _)| table.join(rel)).collect()),
            #[cfg(feature = "s3")]
            Inputs::Bucket(bucket) => {
                crate::core::sys::fsutil::create_dir_all_durable(scratch)?;
                let mut paths = Vec::with_capacity(files.len());
                for (i, (rel, size)) in files.iter().enumerate() {
                    let path = scratch.join(format!("{i:05}"));
                    bucket.download(rel, *size, &path)?;
                    paths.push(path);
                }
                Ok(paths)
            }
        }
    }
}

/// Shapes of files in a bucket, from their footers.
#[cfg(feature = "s3")]
mod footers {
    use anyhow::{bail, Result};

    use super::FileKind;
    use crate::core::options::Format;
    use crate::storage::bucket::Bucket;

    /// The last bytes of a file read first: a Parquet footer of a few hundred columns'
    /// chunk statistics fits; a larger one costs a second GET of exactly its size.
    const TAIL: u64 = 64 * 1024;

    pub(super) fn shapes(
        bucket: &Bucket,
        files: &[(FileKind, String, u64)],
    ) -> Result<Vec<String>> {
        if let Some((kind, rel, _)) = files.iter().find(|(k, ..)| k.format != Format::Parquet) {
            bail!(
                "{}: only Parquet files are compacted in a bucket (a {:?} table's files are \
                 its directories', and a bucket has none to exchange)",
                bucket.url_of(rel),
                kind.format
            );
        }
        let wanted: Vec<(&str, u64, u64)> = files
            .iter()
            .map(|(_, rel, size)| (rel.as_str(), *size, TAIL))
            .collect();
        let tails = bucket.tails(&wanted)?;
        let mut shapes = Vec::with_capacity(files.len());
        for ((_, rel, size), tail) in files.iter().zip(tails) {
            let shape = match crate::sink::merge::parquet_shape_of_tail(&tail, *size) {
                Ok(Ok(shape)) => shape,
                Ok(Err(needed)) => {
                    let tail = bucket.tail(rel, *size, needed as u64)?;
                    match crate::sink::merge::parquet_shape_of_tail(&tail, *size) {
                        Ok(Ok(shape)) => shape,
                        Ok(Err(more)) => bail!(
                            "{}: its footer asks for {more} bytes after {needed} were read",
                            bucket.url_of(rel)
                        ),
                        Err(e) => return Err(e.context(bucket.url_of(rel).to_string())),
                    }
                }
                Err(e) => return Err(e.context(bucket.url_of(rel).to_string())),
            };
            shapes.push(shape);
        }
        Ok(shapes)
    }
}
