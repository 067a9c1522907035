//! The SQL catalog in a SQLite file (`--catalog sqlite:///ABS/PATH.db`), one host.
//!
//! SQLite with its rollback journal and `synchronous=EXTRA`: a transaction that returned
//! is on disk, the unlinking of its journal included (with `FULL`, a power cut right
//! after the commit could bring the journal back, and the next opener would roll the
//! commit back), so a swap the catalog acknowledged survives a power cut.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

use super::{Catalog, Swap, TableName, CREATE_TABLES};

/// How long a statement waits for another writer's lock before it fails (a commit is a
/// single short `UPDATE`, so only a stuck writer holds it this long).
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A SQL catalog in a SQLite file.
pub(crate) struct SqliteCatalog {
    conn: Connection,
    /// The database file.
    path: std::path::PathBuf,
    /// The catalog's name: rows of other catalogs in the same database are not ours.
    catalog: String,
}

impl SqliteCatalog {
    /// Opens (creating if needed) the catalog database at `uri`, `sqlite:///ABS/PATH`.
    pub(crate) fn open(uri: &str, catalog: &str) -> Result<SqliteCatalog> {
        let Some(path) = uri.strip_prefix("sqlite://") else {
            bail!("--catalog {uri:?}: expected sqlite:///ABSOLUTE/PATH.db");
        };
        if !Path::new(path).is_absolute() {
            bail!("--catalog {uri:?}: the SQLite file's path must be absolute (sqlite:///...)");
        }
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the SQLite catalog {path}"))?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "synchronous", "EXTRA")?;
        conn.execute_batch(CREATE_TABLES)
            .with_context(|| format!("cannot create the catalog's tables in {path}"))?;
        Ok(SqliteCatalog {
            conn,
            path: path.into(),
            catalog: catalog.to_string(),
        })
    }
}

impl Catalog for SqliteCatalog {
    fn load(&self, table: &TableName) -> Result<Option<String>> {
        let location: Option<Option<String>> = self
            .conn
            .query_row(
                "SELECT metadata_location FROM iceberg_tables
                 WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3",
                params![self.catalog, table.namespace, table.name],
                |row| row.get(0),
            )
            .optional()?;
        Ok(location.flatten())
    }

    fn create(&self, table: &TableName, metadata: &str) -> Result<bool> {
        let tx = self.conn.unchecked_transaction()?;
        let added = tx.execute(
            "INSERT OR IGNORE INTO iceberg_tables
             (catalog_name, table_namespace, table_name, metadata_location,
              previous_metadata_location, iceberg_type)
             VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')",
            params![self.catalog, table.namespace, table.name, metadata],
        )?;
        // The namespace exists for every reader of the catalog, as pyiceberg records it.
        tx.execute(
            "INSERT OR IGNORE INTO iceberg_namespace_properties
             (catalog_name, namespace, property_key, property_value)
             VALUES (?1, ?2, 'exists', 'true')",
            params![self.catalog, table.namespace],
        )?;
        tx.commit()?;
        Ok(added == 1)
    }

    /// The database file and its directory fsynced: a commit found after a crash may be
    /// one whose journal's unlinking the crash kept from reaching the disk.
    fn settle(&self) -> Result<()> {
        crate::core::sys::fsutil::settle(&self.path)
    }

    fn swap(&self, table: &TableName, swap: &Swap<'_>) -> Result<bool> {
        let (expected, new) = (swap.expected, swap.new);
        let changed = self.conn.execute(
            "UPDATE iceberg_tables
             SET metadata_location = ?5, previous_metadata_location = ?4
             WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3
               AND metadata_location = ?4",
            params![self.catalog, table.namespace, table.name, expected, new],
        )?;
        Ok(changed == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(dir: &tempfile::TempDir, name: &str) -> SqliteCatalog {
        let uri = format!("sqlite://{}/catalog.db", dir.path().display());
        SqliteCatalog::open(&uri, name).unwrap()
    }

    #[test]
    fn a_swap_lands_only_on_the_metadata_it_was_made_on() {
        let dir = tempfile::tempdir().unwrap();
        let t = TableName::parse("default.orders").unwrap();
        super::super::tests::swaps_land_only_on_the_metadata_they_were_made_on(
            &catalog(&dir, "ingest"),
            &catalog(&dir, "ingest"),
            &catalog(&dir, "elsewhere"),
            &t,
        );
    }

    #[test]
    fn uris_are_checked() {
        assert!(SqliteCatalog::open("sqlite://relative.db", "ingest").is_err());
        assert!(SqliteCatalog::open("mysql://h/db", "ingest").is_err());
    }
}
