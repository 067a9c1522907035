//! An Iceberg table as a run reaches it: its catalog, its name there, its location, and
//! the files of its `metadata/` directory (metadata JSON, manifest lists, manifests).
//!
//! Every file written here gets a name no other commit uses (a fresh UUID in it). In a
//! directory, it is fsynced before the directory is, and the directory before the
//! catalog's swap names the metadata file: once a reader can reach a file through the
//! catalog, a power cut cannot take it away. In a bucket, it is a put-if-absent, durable
//! once the store acknowledges it.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::catalog::{self, Catalog, TableName};
use super::metadata::TableMetadata;
use crate::core::catalog::CatalogTable;
use crate::core::layout::JobLayout;
use crate::core::sys::fsutil;

/// The name `ingest` registers its tables under in a SQL catalog: pyiceberg reads them
/// with `SqlCatalog("ingest", uri=...)`, Java's `JdbcCatalog` as catalog `ingest`.
pub(crate) const CATALOG_NAME: &str = "ingest";

/// A table's metadata as its catalog names it now: the file's location and its content.
pub(crate) struct Current {
    pub(crate) location: String,
    pub(crate) metadata: TableMetadata,
}

/// Where the table's files are.
enum Files {
    /// A directory: its canonical absolute path.
    Local(PathBuf),
    /// A bucket prefix (`-t s3://BUCKET/PREFIX`).
    #[cfg(feature = "s3")]
    Bucket(crate::storage::bucket::Bucket),
}

/// An Iceberg table of a run: where its files go and the catalog that commits it.
pub(crate) struct Table {
    catalog: Box<dyn Catalog>,
    pub(crate) name: TableName,
    files: Files,
}

impl Table {
    /// Opens the catalog of `target` for the table of `layout`: its directory (which
    /// exists), or its bucket prefix.
    pub(crate) fn open(target: &CatalogTable, layout: &JobLayout) -> Result<Table> {
        let files = match &layout.target {
            #[cfg(feature = "s3")]
            Some(url) => Files::Bucket(crate::storage::bucket::Bucket::open(url)?),
            #[cfg(not(feature = "s3"))]
            Some(url) => bail!("{url}: a table in a bucket needs the `s3` feature"),
            None => {
                let dir = std::fs::canonicalize(&layout.table).with_context(|| {
                    format!(
                        "cannot resolve the table directory {}",
                        layout.table.display()
                    )
                })?;
                Files::Local(dir)
            }
        };
        Ok(Table {
            catalog: catalog::open(target, CATALOG_NAME)?,
            name: TableName::parse(&target.name)?,
            files,
        })
    }

    /// The table's location, as its metadata and manifests name it: an absolute path,
    /// or `s3://BUCKET/PREFIX`.
    pub(crate) fn location(&self) -> Result<String> {
        match &self.files {
            Files::Local(dir) => match dir.to_str() {
                Some(dir) => Ok(dir.to_string()),
                None => bail!("the table directory {} is not UTF-8", dir.display()),
            },
            #[cfg(feature = "s3")]
            Files::Bucket(bucket) => Ok(bucket.url().to_string().trim_end_matches('/').into()),
        }
    }

    /// The table's current metadata, or `None` when the catalog has no such table.
    pub(crate) fn current(&self) -> Result<Option<Current>> {
        let Some(location) = self.catalog.load(&self.name)? else {
            return Ok(None);
        };
        let bytes = self.read(&location).with_context(|| {
            format!(
                "cannot read {location}, the current metadata of {} in the catalog",
                self.describe()
            )
        })?;
        let metadata = TableMetadata::parse(&bytes)
            .with_context(|| format!("the metadata file {location}"))?;
        let here = self.location()?;
        if canonical(&metadata.location).trim_end_matches('/') != here {
            bail!(
                "{} is the Iceberg table at {}, not at {here}: give --target {} or another \
                 --table-name",
                self.describe(),
                metadata.location,
                metadata.location
            );
        }
        Ok(Some(Current { location, metadata }))
    }

    /// The table and its catalog, as messages name them.
    pub(crate) fn describe(&self) -> String {
        format!("{}.{}", self.name.namespace, self.name.name)
    }

    /// The bytes of the table's file at `location` (a metadata file, a manifest list, a
    /// manifest), which must be the table's own.
    pub(crate) fn read(&self, location: &str) -> Result<Vec<u8>> {
        let location = canonical(location);
        match &self.files {
            Files::Local(_) => {
                std::fs::read(&*location).with_context(|| format!("cannot read {location}"))
            }
            #[cfg(feature = "s3")]
            Files::Bucket(bucket) => {
                let here = self.location()?;
                let Some(rel) = location.strip_prefix(&format!("{here}/")) else {
                    bail!("{location} is outside the table's location {here}");
                };
                match bucket.get(rel)? {
                    Some((bytes, _)) => Ok(bytes.to_vec()),
                    None => bail!("{location} is missing"),
                }
            }
        }
    }

    /// Writes `bytes` as the new file `name` of the table's `metadata/` directory,
    /// durably but for the directory's own fsync ([`Table::sync_metadata_dir`], once
    /// per commit); returns its location.
    pub(crate) fn write_new(&self, name: &str, bytes: &[u8]) -> Result<String> {
        let rel = format!("metadata/{name}");
        match &self.files {
            Files::Local(dir) => {
                use std::io::Write as _;
                fsutil::create_dir_all_durable(&dir.join("metadata"))?;
                let path = dir.join(&rel);
                let mut file = fsutil::create_new(&path)?;
                file.write_all(bytes)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                fsutil::sync_file(&file, &path)?;
            }
            #[cfg(feature = "s3")]
            Files::Bucket(bucket) => {
                use crate::storage::bucket::{Mode, Put};
                if bucket.put(&rel, bytes.to_vec(), Mode::Create)? == Put::Conflict {
                    bail!("{} exists already", bucket.url_of(&rel));
                }
            }
        }
        Ok(format!("{}/{rel}", self.location()?))
    }

    /// Makes the names of the files [`Table::write_new`] wrote durable (in a bucket,
    /// they are once written).
    pub(crate) fn sync_metadata_dir(&self) -> Result<()> {
        match &self.files {
            Files::Local(dir) => fsutil::sync_dir(&dir.join("metadata")),
            #[cfg(feature = "s3")]
            Files::Bucket(_) => Ok(()),
        }
    }

    /// Registers the table with its first metadata file; false when another writer
    /// registered it first.
    pub(crate) fn create(&self, metadata: &str) -> Result<bool> {
        self.catalog.create(&self.name, metadata)
    }

    /// Whether the catalog writes the metadata files of commits itself.
    pub(crate) fn catalog_manages_metadata(&self) -> bool {
        self.catalog.manages_metadata()
    }

    /// Creates the table empty, as `planned` describes it, in a catalog that
    /// manages its metadata (left as it is if another writer created it first).
    pub(crate) fn create_empty(&self, planned: &TableMetadata) -> Result<()> {
        self.catalog.create_empty(&self.name, planned)
    }

    /// The catalog's compare-and-swap: `swap.new` (`swap.next`) becomes current if
    /// `swap.expected` (`swap.base`) still is.
    pub(crate) fn swap(&self, swap: &catalog::Swap<'_>) -> Result<bool> {
        self.catalog.swap(&self.name, swap)
    }

    /// Makes a commit found in the catalog durable before it is trusted (it may be one a
    /// crashed process made a moment before the crash).
    pub(crate) fn settle(&self) -> Result<()> {
        self.catalog.settle()
    }
}

/// A location as this table names its own: a local path for a `file:` URI, `s3://`
/// for `s3a://` and `s3n://` (as other writers, pyiceberg and Spark, give them).
pub(crate) fn canonical(location: &str) -> std::borrow::Cow<'_, str> {
    if let Some(path) = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
    {
        return path.into();
    }
    for scheme in ["s3a://", "s3n://"] {
        if let Some(rest) = location.strip_prefix(scheme) {
            return format!("s3://{rest}").into();
        }
    }
    location.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_of_other_writers_are_read_as_this_tables() {
        for (given, read) in [
            ("/t/metadata/a.json", "/t/metadata/a.json"),
            ("file:///t/metadata/a.json", "/t/metadata/a.json"),
            ("file:/t/metadata/a.json", "/t/metadata/a.json"),
            ("s3://b/t/metadata/a.json", "s3://b/t/metadata/a.json"),
            ("s3a://b/t/metadata/a.json", "s3://b/t/metadata/a.json"),
            ("s3n://b/t/metadata/a.json", "s3://b/t/metadata/a.json"),
        ] {
            assert_eq!(canonical(given), read, "{given}");
        }
    }
}
