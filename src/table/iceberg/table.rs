//! An Iceberg table as a run reaches it: its catalog, its name there, its directory, and
//! the files of its `metadata/` directory (metadata JSON, manifest lists, manifests).
//!
//! Every file written here gets a name no other commit uses (a fresh UUID in it) and is
//! fsynced before the directory is, and the directory before the catalog's swap names
//! the metadata file: once a reader can reach a file through the catalog, a power cut
//! cannot take it away.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::catalog::{self, Catalog, TableName};
use super::metadata::TableMetadata;
use crate::core::catalog::CatalogTable;
use crate::core::sys::fsutil;

/// The name `ingest` registers its tables under in a SQL catalog: pyiceberg reads them
/// with `SqlCatalog("ingest", uri=...)`, Java's `JdbcCatalog` as catalog `ingest`.
pub(crate) const CATALOG_NAME: &str = "ingest";

/// A table's metadata as its catalog names it now: the file's location and its content.
pub(crate) struct Current {
    pub(crate) location: String,
    pub(crate) metadata: TableMetadata,
}

/// An Iceberg table of a run: where its files go and the catalog that commits it.
pub(crate) struct Table {
    catalog: Box<dyn Catalog>,
    pub(crate) name: TableName,
    /// The table's directory, absolute: its location.
    pub(crate) dir: PathBuf,
}

impl Table {
    /// Opens the catalog of `target` for the table in directory `dir` (which exists).
    pub(crate) fn open(target: &CatalogTable, dir: &Path) -> Result<Table> {
        let dir = std::fs::canonicalize(dir)
            .with_context(|| format!("cannot resolve the table directory {}", dir.display()))?;
        Ok(Table {
            catalog: catalog::open(target, CATALOG_NAME)?,
            name: TableName::parse(&target.name)?,
            dir,
        })
    }

    /// The table's location, as its metadata and manifests name it.
    pub(crate) fn location(&self) -> Result<String> {
        match self.dir.to_str() {
            Some(dir) => Ok(dir.to_string()),
            None => bail!("the table directory {} is not UTF-8", self.dir.display()),
        }
    }

    /// The table's current metadata, or `None` when the catalog has no such table.
    pub(crate) fn current(&self) -> Result<Option<Current>> {
        let Some(location) = self.catalog.load(&self.name)? else {
            return Ok(None);
        };
        let bytes = std::fs::read(local_path(&location)).with_context(|| {
            format!(
                "cannot read {location}, the current metadata of {} in the catalog",
                self.describe()
            )
        })?;
        let metadata = TableMetadata::parse(&bytes)
            .with_context(|| format!("the metadata file {location}"))?;
        let here = self.location()?;
        if local_path(&metadata.location).trim_end_matches('/') != here {
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

    /// Writes `bytes` as the new file `name` of the table's `metadata/` directory and
    /// fsyncs it (not the directory: [`Table::sync_metadata_dir`], once per commit);
    /// returns its location.
    pub(crate) fn write_new(&self, name: &str, bytes: &[u8]) -> Result<String> {
        let dir = self.metadata_dir();
        fsutil::create_dir_all_durable(&dir)?;
        let path = dir.join(name);
        let mut file = fsutil::create_new(&path)?;
        file.write_all(bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        fsutil::sync_file(&file, &path)?;
        match path.to_str() {
            Some(path) => Ok(path.to_string()),
            None => bail!("{} is not UTF-8", path.display()),
        }
    }

    /// Makes the names of the files [`Table::write_new`] wrote durable.
    pub(crate) fn sync_metadata_dir(&self) -> Result<()> {
        fsutil::sync_dir(&self.metadata_dir())
    }

    fn metadata_dir(&self) -> PathBuf {
        self.dir.join("metadata")
    }

    /// Registers the table with its first metadata file; false when another writer
    /// registered it first.
    pub(crate) fn create(&self, metadata: &str) -> Result<bool> {
        self.catalog.create(&self.name, metadata)
    }

    /// The catalog's compare-and-swap: `new` becomes current if `expected` still is.
    pub(crate) fn swap(&self, expected: &str, new: &str) -> Result<bool> {
        self.catalog.swap(&self.name, expected, new)
    }

    /// Makes a commit found in the catalog durable before it is trusted (it may be one a
    /// crashed process made a moment before the crash).
    pub(crate) fn settle(&self) -> Result<()> {
        self.catalog.settle()
    }
}

/// A local file's path from a location: an absolute path, or a `file:` URI as other
/// writers (pyiceberg, Spark) give a local table's locations.
pub(crate) fn local_path(location: &str) -> &str {
    location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_of_other_writers_are_read_as_local_paths() {
        assert_eq!(local_path("/t/metadata/a.json"), "/t/metadata/a.json");
        assert_eq!(
            local_path("file:///t/metadata/a.json"),
            "/t/metadata/a.json"
        );
        assert_eq!(local_path("file:/t/metadata/a.json"), "/t/metadata/a.json");
    }
}
