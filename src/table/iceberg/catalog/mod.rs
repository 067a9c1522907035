//! The catalog of an Iceberg table: what names the table's current metadata file, and
//! the compare-and-swap every commit of the table goes through.
//!
//! Both catalogs here are Iceberg's SQL catalog (the JDBC catalog's layout, which
//! pyiceberg's `SqlCatalog` and Java's `JdbcCatalog` read and write): the table
//! `iceberg_tables`, one row per table naming its current metadata file. A commit is one
//! `UPDATE` whose `WHERE` names the metadata file the commit was made on, so of two
//! commits made on the same metadata one lands and the other changes no row and starts
//! again from the new one. The same tables in a SQLite file ([`sqlite`], one host) or
//! on a PostgreSQL server ([`postgres`], every host that reaches it).

mod postgres;
mod sqlite;

use anyhow::{bail, Result};

use crate::core::catalog::{CatalogKind, CatalogTable};

/// The catalog's tables, as pyiceberg and Java's `JdbcCatalog` create them (the same
/// text for SQLite and PostgreSQL).
const CREATE_TABLES: &str = "
    CREATE TABLE IF NOT EXISTS iceberg_tables (
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
        PRIMARY KEY (catalog_name, namespace, property_key));";

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

/// A catalog's four operations. Each is one statement or transaction: none retries, so
/// a commit whose answer was lost is decided by the caller looking at the table again.
pub(crate) trait Catalog {
    /// The table's current metadata file, or `None` when the catalog has no such table.
    fn load(&self, table: &TableName) -> Result<Option<String>>;

    /// Registers a new table whose first metadata file is `metadata`; false when another
    /// writer registered it first (load it, and commit on its metadata instead).
    fn create(&self, table: &TableName, metadata: &str) -> Result<bool>;

    /// Makes `new` the table's metadata file if `expected` still is: true when it was
    /// swapped, false when another commit came first.
    fn swap(&self, table: &TableName, expected: &str, new: &str) -> Result<bool>;

    /// Makes every commit the catalog shows durable, another process's too (a commit
    /// found after a crash may be one the crash kept from reaching the disk).
    fn settle(&self) -> Result<()>;
}

/// Opens (creating its tables if needed) the catalog `target` names, as catalog `name`.
pub(crate) fn open(target: &CatalogTable, name: &str) -> Result<Box<dyn Catalog>> {
    Ok(match CatalogKind::of(&target.catalog)? {
        CatalogKind::Sqlite => Box::new(sqlite::SqliteCatalog::open(&target.catalog, name)?),
        CatalogKind::Postgres => Box::new(postgres::PgCatalog::open(target, name)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every catalog must do, run against each (the PostgreSQL one where the test
    /// environment has a server).
    pub(super) fn swaps_land_only_on_the_metadata_they_were_made_on(
        a: &dyn Catalog,
        b: &dyn Catalog,
        elsewhere: &dyn Catalog,
        t: &TableName,
    ) {
        assert_eq!(a.load(t).unwrap(), None);
        assert!(a.create(t, "m1").unwrap());
        assert!(!b.create(t, "other").unwrap(), "created twice");
        assert_eq!(b.load(t).unwrap().as_deref(), Some("m1"));
        // Two writers commit on m1: one lands, the other changes nothing.
        assert!(a.swap(t, "m1", "m2a").unwrap());
        assert!(!b.swap(t, "m1", "m2b").unwrap());
        assert_eq!(b.load(t).unwrap().as_deref(), Some("m2a"));
        assert!(b.swap(t, "m2a", "m3b").unwrap());
        assert_eq!(a.load(t).unwrap().as_deref(), Some("m3b"));
        a.settle().unwrap();
        // Another catalog name in the same database is another catalog.
        assert_eq!(elsewhere.load(t).unwrap(), None);
    }

    #[test]
    fn names_are_checked() {
        let t = TableName::parse("a.b.t").unwrap();
        assert_eq!((t.namespace.as_str(), t.name.as_str()), ("a.b", "t"));
        for bad in ["t", ".t", "ns."] {
            assert!(TableName::parse(bad).is_err(), "{bad}");
        }
    }
}
