//! Iceberg tables in a bucket (`-t s3://… --table-format iceberg`) against the real
//! store `.ci/test` starts: the crash matrix and the kill loop of `s3_table.rs` on two
//! "machines" that share nothing but the bucket and the catalog, read back as a reader
//! of the bucket reads the table (the catalog's row, then the metadata file, manifest
//! list, manifests and Parquet files, each an object of the bucket).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::iceberg::{
    assert_markers_once, catalog_fail_points, read_table_with, IcebergTable, TestCatalog,
};
use crate::s3::{store, Store};
use crate::s3_table::{
    crash_matrix_on_two_machines, kill_loop_on_two_machines, TableReader, POLL_PAUSE,
};
use crate::util::*;

/// An Iceberg table: readers go through its catalog, which its contract names.
const ICEBERG_READER: TableReader = TableReader {
    poll: poll_catalog,
    rows: iceberg_rows_in,
};

/// Table `table` (relative to the test's prefix) as its catalog says it is now; `None`
/// before its contract or its first commit.
fn table_in(s3: &Store, table: &str) -> Option<IcebergTable> {
    let contract: serde_json::Value =
        serde_json::from_slice(&s3.get(&format!("{table}/_ingest/contract.json"))?).unwrap();
    let target = &contract["contract"]["catalog"];
    let catalog = TestCatalog::from_uri(target["catalog"].as_str().unwrap());
    let location = catalog.location(target["name"].as_str().unwrap())?;
    read_table_with(&location, &|l| fetch(s3, l))
}

/// The object at `location`, `s3://BUCKET/PREFIX/…`, which must be there.
fn fetch(s3: &Store, location: &str) -> Vec<u8> {
    let base = s3.url("");
    let rel = location
        .strip_prefix(&base)
        .unwrap_or_else(|| panic!("{location} is outside {base}"));
    s3.get(rel)
        .unwrap_or_else(|| panic!("{location} is named and missing"))
}

/// The rows of the table's current snapshot, every marker once.
fn iceberg_rows_in(s3: &Store, table: &str, what: &str) -> Vec<Row> {
    let Some(current) = table_in(s3, table) else {
        return Vec::new();
    };
    assert_markers_once(&current, what);
    let copy = tempfile::tempdir().unwrap();
    let mut rows = Vec::new();
    for (i, (location, (partition, records))) in current.files.iter().enumerate() {
        let file = copy.path().join(format!("{i}.parquet"));
        std::fs::write(&file, fetch(s3, location)).unwrap();
        let file_rows = parquet_file_rows(&file, partition);
        assert_eq!(file_rows.len() as u64, *records, "{what}: {location}");
        rows.extend(file_rows);
    }
    rows
}

/// Reads the table through its catalog over and over while `running`: the metadata,
/// manifest list and manifests it names must be readable, every data file they name in
/// the bucket (listed after the table was read, so the listing cannot be early).
/// Returns the reads, and each file named too soon.
fn poll_catalog(s3: Arc<Store>, table: String, running: Arc<AtomicBool>) -> (usize, Vec<String>) {
    let (mut reads, mut early) = (0, Vec::new());
    let base = s3.url("");
    while running.load(Ordering::Relaxed) {
        if reads > 0 {
            std::thread::sleep(POLL_PAUSE);
        }
        reads += 1;
        let Some(current) = table_in(&s3, &table) else {
            continue;
        };
        let listed: std::collections::BTreeSet<String> =
            s3.list(&table).into_iter().map(|(key, _)| key).collect();
        for location in current.files.keys() {
            let rel = location.strip_prefix(&base).unwrap_or(location);
            if !listed.contains(rel) {
                early.push(location.clone());
            }
        }
    }
    (reads, early)
}

#[test]
fn an_iceberg_load_in_a_bucket_killed_at_every_point_is_finished_on_another_machine() {
    let Some(s3) = store("iceberg-crash") else {
        return;
    };
    // The two machines share the catalog on the PostgreSQL server where there is one,
    // as machines do; a SQLite file beside them otherwise.
    let shared = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::postgres()
        .unwrap_or_else(|| TestCatalog::sqlite(&shared.path().join("catalog.db")));
    let uri = catalog.uri();
    // The points of staging and uploading are the bucket matrix of `s3_table.rs` (the
    // same code for every table format); here, those of the catalog and the commit.
    crash_matrix_on_two_machines(
        Arc::new(s3),
        &catalog_fail_points(),
        &["--table-format", "iceberg", "--catalog", &uri],
        &ICEBERG_READER,
    );
}

#[test]
fn random_sigkill_of_iceberg_loads_in_a_bucket_on_two_machines_loses_and_duplicates_nothing() {
    let Some(s3) = store("iceberg-kill") else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let uri = format!("sqlite://{}/catalog.db", shared.path().display());
    kill_loop_on_two_machines(
        Arc::new(s3),
        &["--table-format", "iceberg", "--catalog", &uri],
        &ICEBERG_READER,
    );
}
