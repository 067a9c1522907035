//! Iceberg tables in a bucket (`-t s3://… --table-format iceberg`) against the real
//! store `.ci/test` starts: the crash matrix and the kill loop of `s3_table.rs` on two
//! "machines" that share nothing but the bucket and the catalog, read back as a reader
//! of the bucket reads the table (the catalog's row, then the metadata file, manifest
//! list, manifests and Parquet files, each an object of the bucket). The same through
//! the store's Iceberg REST catalog, whose tables live in its table bucket.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::iceberg::{
    assert_markers_once, catalog_fail_points, read_table_with, IcebergTable, TestCatalog,
};
use crate::s3::{store, table_bucket, Store};
use crate::s3_table::{
    crash_matrix_on_two_machines, crash_matrix_reading_from, kill_loop_on_two_machines,
    typed_as_in, TableReader, POLL_PAUSE,
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

/// `--catalog` for the test store's REST catalog, whose warehouse is its table bucket.
fn rest_catalog() -> String {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is unset"));
    format!(
        "{}?warehouse=s3://{}/",
        var("INGEST_TEST_ICEBERG_REST"),
        var("INGEST_TEST_ICEBERG_BUCKET")
    )
}

/// A bearer token of the REST catalog at `base` for the store's own credentials (its
/// OAuth2 client-credentials grant).
fn rest_token(client: &reqwest::blocking::Client, base: &str) -> String {
    let var = |name: &str| std::env::var(name).unwrap();
    let token: serde_json::Value = client
        .post(format!("{base}/v1/oauth/tokens"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", &var("INGEST_TEST_S3_KEY_ID")),
            ("client_secret", &var("INGEST_TEST_S3_SECRET")),
            ("scope", "catalog"),
        ])
        .send()
        .unwrap()
        .json()
        .unwrap();
    token["access_token"].as_str().unwrap().to_string()
}

/// The current metadata file of `namespace.table` in the REST catalog `uri` (given as
/// `--catalog`), read with a token of the store's own credentials; `None` when the
/// catalog has no such table.
pub fn rest_location(uri: &str, namespace: &str, table: &str) -> Option<String> {
    let (base, query) = uri.split_once('?').unwrap();
    let warehouse = query.strip_prefix("warehouse=").unwrap();
    let client = reqwest::blocking::Client::new();
    let token = rest_token(&client, base);
    let token = token.as_str();
    let config: serde_json::Value = client
        .get(format!("{base}/v1/config"))
        .query(&[("warehouse", warehouse)])
        .bearer_auth(token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let prefix = config["overrides"]["prefix"].as_str().unwrap();
    let response = client
        .get(format!(
            "{base}/v1/{prefix}/namespaces/{namespace}/tables/{table}"
        ))
        .bearer_auth(token)
        .send()
        .unwrap();
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return None;
    }
    assert!(response.status().is_success(), "{}", response.status());
    let body: serde_json::Value = response.json().unwrap();
    Some(body["metadata-location"].as_str().unwrap().to_string())
}

#[test]
fn an_iceberg_load_through_a_rest_catalog_killed_at_every_point_is_finished_on_another_machine() {
    let (Some(s3), Some(inputs)) = (
        table_bucket("iceberg-rest-crash"),
        store("iceberg-rest-inputs"),
    ) else {
        return;
    };
    let uri = rest_catalog();
    crash_matrix_reading_from(
        &inputs,
        Arc::new(s3),
        &catalog_fail_points(),
        &["--table-format", "iceberg", "--catalog", &uri],
        &ICEBERG_READER,
    );
}

/// The kill loop in a bucket runs through the REST catalog (the SQLite and PostgreSQL
/// catalogs have theirs on disk, `iceberg.rs`, and the bucket code is the same for every
/// catalog).
#[test]
fn random_sigkill_of_iceberg_loads_through_a_rest_catalog_loses_and_duplicates_nothing() {
    let Some(s3) = table_bucket("iceberg-rest-kill") else {
        return;
    };
    let uri = rest_catalog();
    kill_loop_on_two_machines(
        Arc::new(s3),
        &["--table-format", "iceberg", "--catalog", &uri],
        &ICEBERG_READER,
    );
}

#[test]
fn a_rest_catalogs_credentials_are_never_written_or_printed_and_a_lost_reply_is_not_committed_twice(
) {
    let Some(s3) = table_bucket("iceberg-rest-secret") else {
        return;
    };
    let uri = rest_catalog();
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let table = s3.table("t");
    let load = |cmd: &mut std::process::Command| {
        cmd.args(["-t", &table, "--table-format", "iceberg", "--catalog", &uri])
            .args(["-p", "dt", "--checkpoint-rows", "300", "orders"])
            .output()
            .unwrap()
    };
    // A secret the catalog refuses: the load says which variables to give, names no
    // secret, and the catalog gets no table.
    let wrong = "not-the-secret-7f3a";
    let key_id = std::env::var("INGEST_TEST_S3_KEY_ID").unwrap();
    let refused = load(
        s3.on(&w, "machine-a")
            .env("ICEBERG_CREDENTIAL", format!("{key_id}:{wrong}")),
    );
    assert_code(&refused, 1);
    assert!(
        stderr(&refused).contains("ICEBERG_CREDENTIAL"),
        "{}",
        stderr(&refused)
    );
    assert!(!stderr(&refused).contains(wrong), "{}", stderr(&refused));
    assert_eq!(rest_location(&uri, "default", "t"), None);
    // A bearer token (ICEBERG_TOKEN) instead, and the catalog's reply to the second
    // commit lost: the load looks before it commits again, and finds it made.
    let base = std::env::var("INGEST_TEST_ICEBERG_REST").unwrap();
    let token = rest_token(&reqwest::blocking::Client::new(), &base);
    let out = load(
        s3.on(&w, "machine-a")
            .env_remove("ICEBERG_CREDENTIAL")
            .env("ICEBERG_TOKEN", &token)
            .env("INGEST_FAIL_POINT", "iceberg.commit.reply-lost:2"),
    );
    assert_code(&out, 0);
    let want = typed_as_in(&s3, "t", input_rows(&[orders]));
    assert_same_rows(iceberg_rows_in(&s3, "t", "reply lost"), want, "reply lost");
    let snapshots = table_in(&s3, "t").unwrap().summaries.len();
    assert_eq!(
        snapshots, 4,
        "912 rows at 300 a checkpoint, one snapshot each"
    );
    // The catalog writes the metadata files (its creation's and one per commit), ingest
    // none of its own beside them.
    let metadata_files = s3
        .list("t/metadata")
        .into_iter()
        .filter(|(key, _)| key.ends_with(".metadata.json"))
        .count();
    assert_eq!(metadata_files, 1 + snapshots, "metadata files");
    // Neither the token nor the store's secret is in any output, any file of the
    // machine, or any object of the table.
    let secret = std::env::var("INGEST_TEST_S3_SECRET").unwrap();
    for needle in [token.as_str(), secret.as_str(), wrong] {
        for text in [&refused.stderr, &refused.stdout, &out.stderr, &out.stdout] {
            assert!(!String::from_utf8_lossy(text).contains(needle), "printed");
        }
        for file in walk(&w.path("")) {
            let bytes = std::fs::read(&file).unwrap();
            let held = bytes.windows(needle.len()).any(|b| b == needle.as_bytes());
            assert!(!held, "{} holds a credential", file.display());
        }
        for (key, _) in s3.list("t") {
            let bytes = s3.get(&key).unwrap();
            let held = bytes.windows(needle.len()).any(|b| b == needle.as_bytes());
            assert!(!held, "{key} holds a credential");
        }
    }
}
