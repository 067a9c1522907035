//! The SQL catalog (`--catalog sqlite:///ABS/PATH.db`): the table `iceberg_tables` of
//! Iceberg's JDBC catalog, as pyiceberg's `SqlCatalog` and the Java `JdbcCatalog` keep
//! it, one row per table naming its current metadata file. A commit is one `UPDATE`
//! whose `WHERE` names the metadata file the commit was made on: the compare-and-swap
//! every writer of the table goes through, so of two commits made on the same metadata
//! one lands and the other sees zero rows changed and starts again from the new one.
//!
//! SQLite with its rollback journal and `synchronous=EXTRA`: a transaction that returned
//! is on disk, the unlinking of its journal included (with `FULL`, a power cut right
//! after the commit could bring the journal back, and the next opener would roll the
//! commit back), so a swap the catalog acknowledged survives a power cut.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

/// How long a statement waits for another writer's lock before it fails (a commit is a
/// single short `UPDATE`, so only a stuck writer holds it this long).
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A table's name in a catalog: its namespace (dotted levels) and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableName {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl TableName {
    /// `NAMESPACE.NAME`: the last dot splits (namespaces may nest, `a.b.t`).
    pub(crate) fn parse(text: &str) -> Result<TableName> {
        match text.rsplit_once('.') {
            Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => Ok(TableName {
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
            _ => bail!("--table-name {text:?}: expected NAMESPACE.NAME"),
        }
    }
}

/// A SQL catalog in a SQLite file.
pub(crate) struct SqlCatalog {
    conn: Connection,
    /// The database file.
    path: std::path::PathBuf,
    /// The catalog's name: rows of other catalogs in the same database are not ours.
    catalog: String,
}

impl SqlCatalog {
    /// Opens (creating if needed) the catalog database at `uri`, `sqlite:///ABS/PATH`.
    pub(crate) fn open(uri: &str, catalog: &str) -> Result<SqlCatalog> {
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
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS iceberg_tables (
                catalog_name VARCHAR(255) NOT NULL,
                table_namespace VARCHAR(255) NOT NULL,
                table_name VARCHAR(255) NOT NULL,
                metadata_location VARCHAR(1000),
                previous_metadata_location VARCHAR(1000),
                iceberg_type VARCHAR(5),
                PRIMARY KEY (catalog_name, table_namespace, table_name));
             CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
                catalog_name VARCHAR(255) NOT NULL,
                namespace VARCHAR(255) NOT NULL,
                property_key VARCHAR(255) NOT NULL,
                property_value VARCHAR(1000) NOT NULL,
                PRIMARY KEY (catalog_name, namespace, property_key));",
        )
        .with_context(|| format!("cannot create the catalog's tables in {path}"))?;
        Ok(SqlCatalog {
            conn,
            path: path.into(),
            catalog: catalog.to_string(),
        })
    }

    /// The table's current metadata file, or `None` when the catalog has no such table.
    pub(crate) fn load(&self, table: &TableName) -> Result<Option<String>> {
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

    /// Registers a new table whose first metadata file is `metadata`; false when another
    /// writer registered it first (load it, and commit on its metadata instead).
    pub(crate) fn create(&self, table: &TableName, metadata: &str) -> Result<bool> {
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

    /// Makes every transaction committed so far durable, another process's too: the
    /// database file and its directory fsynced (a commit found after a crash may be one
    /// whose journal's unlinking the crash kept from reaching the disk).
    pub(crate) fn settle(&self) -> Result<()> {
        crate::core::sys::fsutil::settle(&self.path)
    }

    /// Makes `new` the table's metadata file if `expected` still is: true when it was
    /// swapped, false when another commit came first.
    pub(crate) fn swap(&self, table: &TableName, expected: &str, new: &str) -> Result<bool> {
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

    fn catalog(dir: &tempfile::TempDir) -> SqlCatalog {
        let uri = format!("sqlite://{}/catalog.db", dir.path().display());
        SqlCatalog::open(&uri, "ingest").unwrap()
    }

    #[test]
    fn a_swap_lands_only_on_the_metadata_it_was_made_on() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (catalog(&dir), catalog(&dir));
        let t = TableName::parse("default.orders").unwrap();
        assert_eq!(a.load(&t).unwrap(), None);
        assert!(a.create(&t, "m1").unwrap());
        assert!(!b.create(&t, "other").unwrap(), "created twice");
        assert_eq!(b.load(&t).unwrap().as_deref(), Some("m1"));
        // Two writers commit on m1: one lands, the other changes nothing.
        assert!(a.swap(&t, "m1", "m2a").unwrap());
        assert!(!b.swap(&t, "m1", "m2b").unwrap());
        assert_eq!(b.load(&t).unwrap().as_deref(), Some("m2a"));
        assert!(b.swap(&t, "m2a", "m3b").unwrap());
        // Another catalog name in the same file is another catalog.
        let uri = format!("sqlite://{}/catalog.db", dir.path().display());
        let other = SqlCatalog::open(&uri, "elsewhere").unwrap();
        assert_eq!(other.load(&t).unwrap(), None);
    }

    #[test]
    fn names_and_uris_are_checked() {
        let t = TableName::parse("a.b.t").unwrap();
        assert_eq!((t.namespace.as_str(), t.name.as_str()), ("a.b", "t"));
        for bad in ["t", ".t", "ns."] {
            assert!(TableName::parse(bad).is_err(), "{bad}");
        }
        assert!(SqlCatalog::open("sqlite://relative.db", "ingest").is_err());
        assert!(SqlCatalog::open("mysql://h/db", "ingest").is_err());
    }
}
