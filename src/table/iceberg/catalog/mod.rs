//! The catalog of an Iceberg table: what names the table's current metadata file, and
//! the compare-and-swap every commit of the table goes through.
//!
//! Two of the catalogs here are Iceberg's SQL catalog (the JDBC catalog's layout, which
//! pyiceberg's `SqlCatalog` and Java's `JdbcCatalog` read and write): the table
//! `iceberg_tables`, one row per table naming its current metadata file. A commit is one
//! `UPDATE` whose `WHERE` names the metadata file the commit was made on, so of two
//! commits made on the same metadata one lands and the other changes no row and starts
//! again from the new one. The same tables in a SQLite file ([`sqlite`], one host) or
//! on a PostgreSQL server ([`postgres`], every host that reaches it). The third is an
//! Iceberg REST catalog ([`rest`]): it creates tables and writes their metadata files
//! itself, and its compare-and-swap is a commit's requirements (the table's uuid, the
//! snapshot `main` was at).

mod postgres;
mod rest;
mod sqlite;

use anyhow::{bail, Result};

use super::metadata::TableMetadata;
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

/// A commit as a catalog makes it: a SQL catalog swaps the metadata file `expected` for
/// `new`; a REST catalog sends what `next` adds to `base` (the new snapshot, the `main`
/// branch moved to it, the properties set) on the condition that `main` is still where
/// `base` has it, and writes its own metadata file.
pub(crate) struct Swap<'a> {
    pub(crate) expected: &'a str,
    pub(crate) new: &'a str,
    pub(crate) base: &'a TableMetadata,
    pub(crate) next: &'a TableMetadata,
}

/// A catalog's operations. Each is one statement, transaction or request: none retries,
/// so a commit whose answer was lost is decided by the caller looking at the table again.
pub(crate) trait Catalog {
    /// The table's current metadata file, or `None` when the catalog has no such table.
    fn load(&self, table: &TableName) -> Result<Option<String>>;

    /// Registers a new table whose first metadata file is `metadata`; false when another
    /// writer registered it first (load it, and commit on its metadata instead).
    fn create(&self, table: &TableName, metadata: &str) -> Result<bool>;

    /// Whether the catalog makes the table's metadata files itself (a REST catalog): it
    /// creates a table from its schema and partitioning ([`Catalog::create_empty`]) and
    /// writes the metadata file of every commit, so a commit sends it no file of ours.
    fn manages_metadata(&self) -> bool {
        false
    }

    /// Creates the table empty, as `planned` describes it (location, columns,
    /// partitioning); a table some other writer created first is left as it is. Only a
    /// catalog that [`manages_metadata`](Catalog::manages_metadata) does this; the others
    /// register the first commit's metadata file ([`Catalog::create`]).
    fn create_empty(&self, table: &TableName, _planned: &TableMetadata) -> Result<()> {
        bail!(
            "{}.{}: this catalog registers a table with its first commit",
            table.namespace,
            table.name
        )
    }

    /// Commits `swap`: true when it landed, false when another commit came first.
    fn swap(&self, table: &TableName, swap: &Swap<'_>) -> Result<bool>;

    /// Makes every commit the catalog shows durable, another process's too (a commit
    /// found after a crash may be one the crash kept from reaching the disk).
    fn settle(&self) -> Result<()>;
}

/// Opens (creating its tables if needed) the catalog `target` names, as catalog `name`.
pub(crate) fn open(target: &CatalogTable, name: &str) -> Result<Box<dyn Catalog>> {
    Ok(match CatalogKind::of(&target.catalog)? {
        CatalogKind::Sqlite => Box::new(sqlite::SqliteCatalog::open(&target.catalog, name)?),
        CatalogKind::Postgres => Box::new(postgres::PgCatalog::open(target, name)?),
        CatalogKind::Rest => Box::new(rest::RestCatalog::open(target)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A swap of metadata file `expected` for `new` (a SQL catalog reads nothing else).
    fn swap<'a>(expected: &'a str, new: &'a str) -> Swap<'a> {
        static EMPTY: std::sync::OnceLock<TableMetadata> = std::sync::OnceLock::new();
        let empty = EMPTY.get_or_init(|| {
            let schema = crate::core::schema::Schema {
                columns: Vec::new(),
            };
            TableMetadata::new("u".into(), "/t".into(), &schema, &[], 0).unwrap()
        });
        Swap {
            expected,
            new,
            base: empty,
            next: empty,
        }
    }

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
        assert!(a.swap(t, &swap("m1", "m2a")).unwrap());
        assert!(!b.swap(t, &swap("m1", "m2b")).unwrap());
        assert_eq!(b.load(t).unwrap().as_deref(), Some("m2a"));
        assert!(b.swap(t, &swap("m2a", "m3b")).unwrap());
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
