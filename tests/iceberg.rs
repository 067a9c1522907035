//! Apache Iceberg tables (`--table-format iceberg`): one snapshot per checkpoint,
//! committed through a SQL catalog in a SQLite file, exactly once across every crash
//! point, a lost reply and random kills; read back by a reader written here (not the
//! code under test): the catalog's row, the current metadata file, its snapshot's
//! manifest list and manifests, the live entries' Parquet files with the partition
//! values the manifests give them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use apache_avro::types::Value;

use crate::crash::{big_orders, operators_loop, whole_load_ms, Rng};
use crate::util::*;

fn load(catalog: &str) -> Vec<String> {
    [
        "-t",
        "t",
        "--table-format",
        "iceberg",
        "--catalog",
        catalog,
        "-p",
        "country",
        "--dedupe-key",
        "order_id",
        "--cast",
        "order_id=int",
        "--cast",
        "amount=decimal(12,2)",
        "--checkpoint-rows",
        "100",
        "orders",
    ]
    .map(str::to_string)
    .to_vec()
}

fn catalog_uri(w: &Workdir) -> String {
    format!("sqlite://{}", w.path("catalog.db").display())
}

/// The table as its catalog says it is.
#[derive(Debug, Default)]
pub struct IcebergTable {
    /// Live data files of the current snapshot: path → (partition values, records).
    pub files: BTreeMap<String, (Row, u64)>,
    /// The summaries of the current snapshot's ancestry, oldest first.
    pub summaries: Vec<BTreeMap<String, String>>,
    /// The ancestry's commit times (`timestamp-ms`), oldest first.
    pub timestamps: Vec<i64>,
    pub properties: BTreeMap<String, String>,
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Union(_, inner) => text(inner),
        Value::String(s) => s.clone(),
        Value::Long(n) => n.to_string(),
        Value::Int(n) => n.to_string(),
        Value::Date(days) => {
            (jiff::civil::date(1970, 1, 1) + jiff::Span::new().days(*days)).to_string()
        }
        other => panic!("unexpected partition value {other:?}"),
    }
}

fn field<'a>(record: &'a Value, name: &str) -> &'a Value {
    let Value::Record(fields) = record else {
        panic!("not a record: {record:?}")
    };
    let value = &fields.iter().find(|(n, _)| n == name).unwrap().1;
    match value {
        Value::Union(_, inner) => inner,
        v => v,
    }
}

fn avro_records(bytes: &[u8]) -> Vec<Value> {
    apache_avro::Reader::new(bytes)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// Reads table `namespace.name` of the `ingest` catalog in the SQLite file `db`; `None`
/// when the catalog has no such table.
pub fn iceberg_table(db: &Path, name: &str) -> Option<IcebergTable> {
    TestCatalog::sqlite(db).table(name)
}

/// A catalog the tests load through and read back: a SQLite file, a database of its
/// own on the test PostgreSQL server (`.ci/pg-store`), or the SeaweedFS Iceberg REST
/// catalog of the test store (`.ci/s3-store`).
pub enum TestCatalog {
    Sqlite {
        db: PathBuf,
        /// The directory of a catalog outside the work directories, for tests whose
        /// load arguments cannot name each case's own.
        _dir: Option<tempfile::TempDir>,
    },
    /// The database's URI, without the password (`PGPASSWORD` gives it).
    Postgres(String),
    /// `http://HOST:PORT?warehouse=s3://BUCKET/`.
    #[cfg(feature = "s3")]
    Rest(String),
}

/// A client of the test PostgreSQL server at `uri`, with the password `.ci/pg-store`
/// exported.
pub fn pg_client(uri: &str) -> postgres::Client {
    let mut config: postgres::Config = uri.parse().unwrap();
    if let Ok(password) = std::env::var("PGPASSWORD") {
        config.password(password);
    }
    config
        .connect(postgres::NoTls)
        .unwrap_or_else(|e| panic!("{uri}: {e}"))
}

impl TestCatalog {
    /// The SQLite file `db`.
    pub fn sqlite(db: &Path) -> TestCatalog {
        TestCatalog::Sqlite {
            db: db.to_path_buf(),
            _dir: None,
        }
    }

    /// A SQLite file outside the work directories.
    pub fn shared_sqlite() -> TestCatalog {
        let dir = tempfile::tempdir().unwrap();
        TestCatalog::Sqlite {
            db: dir.path().join("catalog.db"),
            _dir: Some(dir),
        }
    }

    /// A new database on the test PostgreSQL server; `None`, with the reason printed,
    /// where the tests run without one (plain `cargo test`: `.ci/test` starts one).
    pub fn postgres() -> Option<TestCatalog> {
        let Ok(admin) = std::env::var("INGEST_TEST_PG_ADMIN") else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no PostgreSQL server under CI; run the tests through .ci/test"
            );
            // Straight to the terminal: the harness swallows a passing test's eprintln!.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no PostgreSQL server (INGEST_TEST_PG_ADMIN is unset; .ci/test \
                 starts one)"
            );
            return None;
        };
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("iceberg_{}_{n}", std::process::id());
        pg_client(&admin)
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let (server, _) = admin.rsplit_once('/').unwrap();
        Some(TestCatalog::Postgres(format!("{server}/{name}")))
    }

    /// The catalog `--catalog URI` names (a table's contract records it).
    #[cfg_attr(not(feature = "s3"), allow(dead_code))] // read by the bucket tests
    pub fn from_uri(uri: &str) -> TestCatalog {
        #[cfg(feature = "s3")]
        if uri.starts_with("http://") {
            return TestCatalog::Rest(uri.to_string());
        }
        match uri.strip_prefix("sqlite://") {
            Some(db) => TestCatalog::sqlite(Path::new(db)),
            None => TestCatalog::Postgres(uri.to_string()),
        }
    }

    /// `--catalog`.
    pub fn uri(&self) -> String {
        match self {
            TestCatalog::Sqlite { db, .. } => format!("sqlite://{}", db.display()),
            TestCatalog::Postgres(uri) => uri.clone(),
            #[cfg(feature = "s3")]
            TestCatalog::Rest(uri) => uri.clone(),
        }
    }

    /// Empties the catalog for the next case.
    pub fn fresh(&self) {
        match self {
            TestCatalog::Sqlite { db, .. } => {
                for suffix in ["", "-journal"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
                }
            }
            TestCatalog::Postgres(uri) => pg_client(uri)
                .batch_execute("DROP TABLE IF EXISTS iceberg_tables, iceberg_namespace_properties")
                .unwrap(),
            // Each case of a REST test names a table of its own (`s3_iceberg.rs`).
            #[cfg(feature = "s3")]
            TestCatalog::Rest(_) => panic!("no test empties the REST catalog"),
        }
    }

    /// The current metadata file of table `namespace.name` of the `ingest` catalog.
    pub fn location(&self, name: &str) -> Option<String> {
        let (namespace, table) = name.rsplit_once('.').unwrap();
        let query = "SELECT metadata_location FROM iceberg_tables
             WHERE catalog_name = 'ingest' AND table_namespace = $1 AND table_name = $2";
        match self {
            TestCatalog::Sqlite { db, .. } => {
                if !db.exists() {
                    return None;
                }
                let conn = rusqlite::Connection::open(db).unwrap();
                conn.query_row(query, [namespace, table], |row| row.get(0))
                    .ok()
            }
            TestCatalog::Postgres(uri) => {
                let mut client = pg_client(uri);
                let present: bool = client
                    .query_one("SELECT to_regclass('iceberg_tables') IS NOT NULL", &[])
                    .unwrap()
                    .get(0);
                if !present {
                    return None;
                }
                client
                    .query_opt(query, &[&namespace, &table])
                    .unwrap()
                    .map(|row| row.get(0))
            }
            #[cfg(feature = "s3")]
            TestCatalog::Rest(uri) => crate::s3_iceberg::rest_location(uri, namespace, table),
        }
    }

    /// Table `namespace.name` as the catalog says it is; `None` when it has no such table.
    pub fn table(&self, name: &str) -> Option<IcebergTable> {
        read_table(&self.location(name)?)
    }

    /// Every row of the table's current snapshot.
    pub fn rows(&self, name: &str) -> Vec<Row> {
        let Some(table) = self.table(name) else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        for (path, (partition, records)) in table.files {
            let file_rows = parquet_file_rows(Path::new(&path), &partition);
            assert_eq!(file_rows.len() as u64, records, "{path}: record_count");
            rows.extend(file_rows);
        }
        rows
    }
}

/// The table whose current metadata file is `location`, read file by file.
fn read_table(location: &str) -> Option<IcebergTable> {
    read_table_with(location, &|path| {
        std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
    })
}

/// The table whose current metadata file is `location`, each file's bytes from `fetch`
/// (given the location the table names it by).
pub fn read_table_with(location: &str, fetch: &dyn Fn(&str) -> Vec<u8>) -> Option<IcebergTable> {
    let metadata: serde_json::Value = serde_json::from_slice(&fetch(location)).unwrap();
    let mut out = IcebergTable {
        properties: serde_json::from_value(metadata["properties"].clone()).unwrap_or_default(),
        ..IcebergTable::default()
    };
    let snapshots = metadata["snapshots"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let find = |id: &serde_json::Value| snapshots.iter().find(|s| &s["snapshot-id"] == id);
    let Some(mut snapshot) = find(&metadata["current-snapshot-id"]) else {
        return Some(out);
    };
    let current = snapshot.clone();
    loop {
        out.summaries
            .push(serde_json::from_value(snapshot["summary"].clone()).unwrap());
        out.timestamps
            .push(snapshot["timestamp-ms"].as_i64().unwrap());
        match find(&snapshot["parent-snapshot-id"]) {
            Some(parent) => snapshot = parent,
            None => break,
        }
    }
    out.summaries.reverse();
    out.timestamps.reverse();
    // The manifests this snapshot added carry its sequence number (an entry added with
    // a null one inherits it from them).
    let sequence = current["sequence-number"].as_i64().unwrap();
    let id = current["snapshot-id"].as_i64().unwrap();
    let spec: Vec<String> = metadata["partition-specs"][0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    for manifest in avro_records(&fetch(current["manifest-list"].as_str().unwrap())) {
        let Value::String(path) = field(&manifest, "manifest_path") else {
            panic!("no manifest_path")
        };
        if field(&manifest, "added_snapshot_id") == &Value::Long(id) {
            assert_eq!(
                field(&manifest, "sequence_number"),
                &Value::Long(sequence),
                "{path}: a manifest of snapshot {id} with another sequence number"
            );
        }
        for entry in avro_records(&fetch(path)) {
            if field(&entry, "status") == &Value::Int(2) {
                continue;
            }
            let file = field(&entry, "data_file");
            let Value::String(file_path) = field(file, "file_path") else {
                panic!("no file_path")
            };
            let partition = spec
                .iter()
                .map(|name| (name.clone(), text(field(field(file, "partition"), name))))
                .collect();
            let Value::Long(records) = field(file, "record_count") else {
                panic!("no record_count")
            };
            let dup = out
                .files
                .insert(file_path.clone(), (partition, *records as u64));
            assert!(dup.is_none(), "{file_path} is live twice in the snapshot");
        }
    }
    Some(out)
}

/// Every row of the table's current snapshot, in the catalog in the SQLite file `db`.
pub fn iceberg_rows(db: &Path, name: &str) -> Vec<Row> {
    TestCatalog::sqlite(db).rows(name)
}

/// No two snapshots carry the same (job, run, checkpoint).
#[track_caller]
pub fn assert_markers_once(table: &IcebergTable, what: &str) {
    let abort = "abort".to_string();
    let mut seen = BTreeSet::new();
    for summary in &table.summaries {
        let marker = (
            summary.get("ingest.job").cloned(),
            summary.get("ingest.run").cloned(),
            summary
                .get("ingest.checkpoint")
                .or(summary.get("ingest.abort").map(|_| &abort))
                .cloned(),
        );
        assert!(marker.0.is_some(), "{what}: a snapshot without a marker");
        assert!(seen.insert(marker.clone()), "{what}: {marker:?} twice");
    }
}

/// Input rows as a load with `load`'s casts and dedupe commits them.
fn expected(w: &Workdir) -> Vec<Row> {
    orders_with_decimal_amounts(w)
}

/// The table `t` of `w`, in `catalog`, holds every input row once.
#[track_caller]
fn assert_settled(w: &Workdir, catalog: &TestCatalog, what: &str) {
    let rows = catalog.rows("default.t");
    let want = as_typed_by_contract(&w.path("t"), expected(w));
    assert_same_rows(rows, want, what);
    let table = catalog.table("default.t").unwrap();
    assert_markers_once(&table, what);
}

/// An Iceberg load partitioned by day into `t` through the catalog `uri`, then `extra`.
fn by_day(uri: &str, extra: &[&str]) -> Vec<String> {
    let mut load: Vec<String> = [
        "-t",
        "t",
        "--table-format",
        "iceberg",
        "--catalog",
        uri,
        "-p",
        "dt",
    ]
    .map(str::to_string)
    .to_vec();
    load.extend(extra.iter().map(|a| a.to_string()));
    load
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Data files go under the table's `data/`, in its partitions' directories or straight
/// in it, and the load's summary counts the partitions, not `data/` as one.
#[test]
fn data_files_are_under_the_tables_data_directory_and_partitions_are_counted_there() {
    let w = Workdir::new();
    w.fixture("orders");
    let uri = catalog_uri(&w);
    let days: std::collections::BTreeSet<String> = input_rows(&[w.path("orders")])
        .into_iter()
        .map(|r| r["dt"].clone())
        .collect();
    let out = w.run(&args(&by_day(&uri, &["orders"])));
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains(&format!(" in {} partition(s)", days.len())),
        "{}",
        stderr(&out)
    );
    let out = w.run(&[
        "-t",
        "flat",
        "--table-format",
        "iceberg",
        "--catalog",
        &uri,
        "orders",
    ]);
    assert_code(&out, 0);
    assert!(!stderr(&out).contains("partition(s)"), "{}", stderr(&out));
    let catalog = TestCatalog::sqlite(&w.path("catalog.db"));
    for (name, dir, depth) in [("default.t", "t", 1), ("default.flat", "flat", 0)] {
        let table = catalog.table(name).unwrap();
        assert!(!table.files.is_empty(), "{name}");
        let data = w.path(dir).join("data").canonicalize().unwrap();
        for path in table.files.keys() {
            let rel = Path::new(path)
                .strip_prefix(&data)
                .unwrap_or_else(|_| panic!("{path} is outside {}", data.display()));
            assert_eq!(rel.components().count(), depth + 1, "{path}");
        }
    }
}

#[test]
fn each_checkpoint_is_one_snapshot_with_the_jobs_marker_and_property() {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 1_000;
    let w = Workdir::new();
    w.fixture("orders");
    let load = load(&catalog_uri(&w));
    let out = w.run(&args(&load));
    assert_code(&out, 0);
    let db = w.path("catalog.db");
    assert_settled(&w, &TestCatalog::sqlite(&db), "one load");
    let table = iceberg_table(&w.path("catalog.db"), "default.t").unwrap();
    let checkpoints: Vec<&str> = table
        .summaries
        .iter()
        .map(|s| s["ingest.checkpoint"].as_str())
        .collect();
    let n = checkpoints.len();
    assert!(n >= 5, "{checkpoints:?}");
    let want: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    assert_eq!(checkpoints, want);
    assert!(table.summaries.iter().all(|s| s["operation"] == "append"));
    let run = &table.summaries[0]["ingest.run"];
    assert_eq!(
        table.properties.get("ingest.checkpoint.default"),
        Some(&format!("{run}:{n}"))
    );
    // Each snapshot was committed during the load, by the clock.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        table.timestamps.iter().all(|&t| t > started && t <= now),
        "{:?} not within {started}..{now}",
        table.timestamps
    );
    // The running totals readers plan with (and pyiceberg adds to) are the table's.
    let last = table.summaries.last().unwrap();
    let rows = iceberg_rows(&db, "default.t").len();
    let bytes: u64 = table
        .files
        .keys()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(last["total-records"], rows.to_string());
    assert_eq!(last["total-data-files"], table.files.len().to_string());
    assert_eq!(last["total-files-size"], bytes.to_string());
    let added: u64 = table
        .summaries
        .iter()
        .map(|s| s["added-records"].parse::<u64>().unwrap())
        .sum();
    assert_eq!(added, rows as u64);
    let out = w.run(&["-t", "t", "--status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status[0]["iceberg_checkpoint"],
        format!("{run}:{n}"),
        "{status}"
    );
    assert!(
        status[0]["iceberg_snapshot_id"].as_i64().unwrap() > 0,
        "{status}"
    );
    let out = w.run(&["-t", "t", "--status"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("iceberg: current snapshot"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Partition columns come from the manifests, not the data files, which are in
    // Hive-style directories under the table's data/, as Iceberg writers put them.
    for (path, (partition, _)) in &table.files {
        let table_dir = w.path("t").canonicalize().unwrap();
        assert!(
            path.starts_with(&format!(
                "{}/data/country={}/part-",
                table_dir.display(),
                partition["country"]
            )),
            "{path}"
        );
    }
    let (path, _) = table.files.iter().next().unwrap();
    // The data files carry the table's field ids, which Iceberg readers match by.
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
    use parquet::file::reader::FileReader;
    let schema = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .root_schema()
        .clone();
    let ids: Vec<(String, i32)> = schema
        .get_fields()
        .iter()
        .map(|f| (f.name().to_string(), f.get_basic_info().id()))
        .collect();
    assert_eq!(ids[0], ("order_id".to_string(), 1), "{ids:?}");
    assert!(ids.iter().all(|(name, _)| name != "country"), "{ids:?}");

    // A second load of new rows appends on top, the first's snapshots still there.
    let more = input_rows(&[w.path("orders/2026-11-27.csv")])
        .into_iter()
        .map(|mut r| {
            let id: i64 = r["order_id"].parse().unwrap();
            r.insert("order_id".into(), (id + 1_000_000).to_string());
            r
        })
        .collect::<Vec<_>>();
    write_orders(&w, "orders/more.csv", &more);
    assert_code(&w.run(&args(&load)), 0);
    let again = iceberg_table(&w.path("catalog.db"), "default.t").unwrap();
    assert!(again.summaries.len() > n);
    assert_markers_once(&again, "two loads");
    assert_settled(&w, &TestCatalog::sqlite(&db), "two loads");
}

#[test]
fn every_fail_point_then_recover_commits_each_checkpoint_once() {
    let points: Vec<String> = load_fail_points()
        .into_iter()
        .filter(|p| !p.starts_with("overwrite."))
        .collect();
    every_fail_point_then_recover(&TestCatalog::shared_sqlite(), &points);
}

/// Every fail point a load into an Iceberg table can reach (a Hive load's and its
/// commit's, all but the lost reply, which is not a crash).
pub fn load_fail_points() -> Vec<String> {
    let points: Vec<String> = all_fail_points()
        .into_iter()
        .chain(
            listed_fail_points()
                .into_iter()
                .filter(|p| p.starts_with("iceberg.") && p != "iceberg.commit.reply-lost"),
        )
        .collect();
    assert!(points.iter().any(|p| p == "iceberg.commit.written"));
    points
}

/// The fail points of a load where its catalog is read or written, or a recovery next
/// reads it (the run's start checks the table's schema against the catalog's): what the
/// PostgreSQL and bucket matrices add to the SQLite matrix of every point.
pub fn catalog_fail_points() -> Vec<String> {
    let points = commit_fail_points(load_fail_points(), "iceberg.");
    assert!(points.len() >= 8, "{points:?}");
    points
}

/// A load crashed at each of `points` (first and third hit), then recovered, through
/// `catalog`: each checkpoint committed once.
pub fn every_fail_point_then_recover(catalog: &TestCatalog, points: &[String]) {
    let load = load(&catalog.uri());
    let crashes = crash_matrix(
        points,
        &[1, 3],
        true,
        &args(&load),
        || {
            catalog.fresh();
            let w = Workdir::new();
            w.fixture("orders");
            (w, ())
        },
        // Whatever the catalog names is whole, at every instant.
        |_| drop(catalog.rows("default.t")),
        |run| assert_settled(&run.w, catalog, &run.spec),
    );
    assert!(crashes >= points.len(), "{crashes} crashes");
}

#[test]
fn a_commit_whose_reply_is_lost_is_found_in_the_table_and_never_made_twice() {
    a_lost_reply_is_found_in_the_table(&TestCatalog::shared_sqlite());
}

/// The swap happens and the load is told it failed (at commits 1, 2 and 4): it must look
/// before it commits again, and find its snapshot there.
pub fn a_lost_reply_is_found_in_the_table(catalog: &TestCatalog) {
    for hit in ["1", "2", "4"] {
        catalog.fresh();
        let w = Workdir::new();
        w.fixture("orders");
        let load = load(&catalog.uri());
        let out = w.run_failing(&format!("iceberg.commit.reply-lost:{hit}"), &args(&load));
        assert_code(&out, 0);
        assert_settled(&w, catalog, &format!("reply lost at commit {hit}"));
        let table = catalog.table("default.t").unwrap();
        let metadata_files = std::fs::read_dir(w.path("t/metadata"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".metadata.json")
            })
            .count();
        assert_eq!(
            metadata_files,
            table.summaries.len(),
            "reply lost at commit {hit}: a commit was made again"
        );
    }
}

#[test]
fn random_sigkill_of_iceberg_loads_and_recoveries_loses_and_duplicates_nothing() {
    random_sigkill_through(&TestCatalog::shared_sqlite(), 3);
}

/// Loads and recoveries through `catalog` killed at random moments (`rounds` loads of
/// 20,000 rows, and more, up to twice as many, while fewer than two kills have landed),
/// then recovered: every row once.
pub fn random_sigkill_through(catalog: &TestCatalog, rounds: u32) {
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let uri = catalog.uri();
    let load = [
        "-t",
        "t",
        "--table-format",
        "iceberg",
        "--catalog",
        &uri,
        "-p",
        "dt",
        "--checkpoint-rows",
        "2000",
        "orders",
    ];
    let full = whole_load_ms(&load, || {
        catalog.fresh();
        let w = Workdir::new();
        big_orders(&w, 20_000, &mut Rng(seed));
        w
    });
    let mut kills = 0;
    for round in 0..rounds * 2 {
        if kill_rounds_done(round, rounds, kills) {
            break;
        }
        catalog.fresh();
        let w = Workdir::new();
        big_orders(&w, 20_000, &mut Rng(seed));
        kills += operators_loop(&w, &load, &mut rng, full, seed);
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        let what = format!("seed {seed}, round {round}");
        let rows = catalog.rows("default.t");
        let want = as_typed_by_contract(&w.path("t"), input_rows(&[w.path("orders")]));
        assert_same_rows(rows, want, &what);
        assert_markers_once(&catalog.table("default.t").unwrap(), &what);
    }
    eprintln!(
        "random SIGKILL (iceberg, {}): seed {seed}, {kills} kills landed over {rounds} loads or more",
        catalog.uri()
    );
    assert!(kills >= 2, "seed {seed}: only {kills} kills landed mid-run");
}

/// Four shard jobs loading one table at once, each killed at a random moment within
/// `window` ms (or not), then all four again at once, each recovering its own run and
/// loading what is left: the table holds every row once. Returns the kills that landed
/// and how long the first four took.
fn four_shards_round(catalog: &TestCatalog, seed: u64, rng: &mut Rng, window: u64) -> (u32, u64) {
    catalog.fresh();
    let w = Workdir::new();
    big_orders(&w, 12_000, &mut Rng(7));
    // Many small inputs, so that every shard gets some.
    let all = input_rows(&[w.path("orders")]);
    std::fs::remove_dir_all(w.path("orders")).unwrap();
    for (i, chunk) in all.chunks(250).enumerate() {
        write_orders(&w, &format!("orders/part-{i:03}.csv"), chunk);
    }
    let uri = catalog.uri();
    let shards = 4;
    let load = |i: usize| -> Vec<String> {
        [
            "-t",
            "t",
            "--table-format",
            "iceberg",
            "--catalog",
            &uri,
            "-p",
            "dt",
            "--checkpoint-rows",
            "300",
            "--job",
            &format!("shard{i}"),
            "--shard",
            &format!("{i}/{shards}"),
            "orders",
        ]
        .map(str::to_string)
        .to_vec()
    };
    let started = std::time::Instant::now();
    let children: Vec<_> = (0..shards)
        .map(|i| {
            w.cmd()
                .args(load(i))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut kills = 0;
    for mut child in children {
        let at = std::time::Duration::from_millis(rng.below(window.max(1)));
        std::thread::sleep(at.saturating_sub(started.elapsed()));
        if window > 0 && child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            kills += 1;
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() || crashed(&out),
            "seed {seed}: {}",
            stderr(&out)
        );
    }
    let took = started.elapsed().as_millis() as u64;
    let children: Vec<_> = (0..shards)
        .map(|i| {
            let load = load(i).join(" ");
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "{bin} -t t --job shard{i} --recover && {bin} {load}",
                    bin = bin().display()
                ))
                .current_dir(w.path(""))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_code(&out, 0);
    }
    let what = format!("seed {seed}: four shards, {kills} killed");
    let all = as_typed_by_contract(&w.path("t"), all);
    assert_same_rows(catalog.rows("default.t"), all, &what);
    let table = catalog.table("default.t").unwrap();
    assert_markers_once(&table, &what);
    let jobs: BTreeSet<_> = table
        .summaries
        .iter()
        .map(|s| s["ingest.job"].clone())
        .collect();
    assert_eq!(jobs.len(), shards, "{what}: {jobs:?}");
    for i in 0..shards {
        assert!(table
            .properties
            .contains_key(&format!("ingest.checkpoint.shard{i}")));
    }
    (kills, took)
}

#[test]
fn four_shards_killed_at_random_leave_an_exact_table() {
    four_shards_killed_at_random(&TestCatalog::shared_sqlite(), 3);
}

/// Four shard jobs through `catalog`, killed at random in `rounds` rounds (more, up to
/// twice as many, while fewer than two kills have landed), then recovered and loaded
/// again: an exact table.
pub fn four_shards_killed_at_random(catalog: &TestCatalog, rounds: u32) {
    let seed = clock_seed();
    let mut rng = Rng(seed);
    // A first round unkilled measures how long the four take on this machine.
    let (_, full) = four_shards_round(catalog, seed, &mut rng, 0);
    let mut kills = 0;
    for round in 0..rounds * 2 {
        if kill_rounds_done(round, rounds, kills) {
            break;
        }
        kills += four_shards_round(catalog, seed, &mut rng, full).0;
    }
    eprintln!(
        "four iceberg shards ({}): seed {seed}, {kills} kills landed over {rounds} rounds or more",
        catalog.uri()
    );
    assert!(
        kills >= 2,
        "seed {seed}: only {kills} kills landed mid-load"
    );
}

#[test]
fn usage_mistakes_of_an_iceberg_load_exit_2_before_anything_is_written() {
    let w = Workdir::new();
    w.fixture("orders");
    let uri = catalog_uri(&w);
    let cases: &[(&[&str], &str)] = &[
        (&["--table-format", "iceberg"], "needs --catalog"),
        (
            &["--table-format", "iceberg", "--catalog", "sqlite://rel.db"],
            "sqlite:///ABSOLUTE",
        ),
        (
            &[
                "--table-format",
                "iceberg",
                "--catalog",
                "thrift://hms:9083",
            ],
            "sqlite:///ABSOLUTE",
        ),
        (
            &[
                "--table-format",
                "iceberg",
                "--catalog",
                &uri,
                "--format",
                "csv",
            ],
            "Iceberg table's data files are Parquet",
        ),
        (
            &[
                "--table-format",
                "iceberg",
                "--catalog",
                &uri,
                "--table-name",
                "nodot",
            ],
            "NAMESPACE.NAME",
        ),
        (&["--catalog", &uri], "with --table-format iceberg"),
    ];
    for (flags, says) in cases {
        let mut a = vec!["-t", "t"];
        a.extend_from_slice(flags);
        a.push("orders");
        let out = w.run(&a);
        assert_code(&out, 2);
        assert!(stderr(&out).contains(says), "{flags:?}: {}", stderr(&out));
        assert!(!w.path("t").exists(), "{flags:?} left a table");
        assert!(!w.path("catalog.db").exists(), "{flags:?} made a catalog");
    }
}

#[test]
fn a_name_the_catalog_gives_a_table_elsewhere_is_refused_before_a_row_is_read() {
    let w = Workdir::new();
    w.fixture("orders");
    let uri = catalog_uri(&w);
    let first = [
        "-t",
        "a/t",
        "--table-format",
        "iceberg",
        "--catalog",
        &uri,
        "orders",
    ];
    assert_code(&w.run(&first), 0);
    // Another directory, the same name (default.t) in the same catalog.
    let second = [
        "-t",
        "b/t",
        "--table-format",
        "iceberg",
        "--catalog",
        &uri,
        "orders",
    ];
    let out = w.run(&second);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("is the Iceberg table at"),
        "{}",
        stderr(&out)
    );
    assert!(!w.path("b/t/metadata").exists());
    // Under its own name it is a table of its own.
    let mut third = second.to_vec();
    third.extend(["--table-name", "other.t"]);
    third.retain(|a| *a != "orders");
    third.push("orders");
    assert_code(&w.run(&third), 0);
    let a = iceberg_rows(&w.path("catalog.db"), "default.t");
    let b = iceberg_rows(&w.path("catalog.db"), "other.t");
    assert_eq!(a.len(), b.len());
    assert!(!a.is_empty());
}

fn table_in(w: &Workdir) -> IcebergTable {
    iceberg_table(&w.path("catalog.db"), "default.t").unwrap()
}

#[test]
fn abort_takes_the_runs_files_out_in_one_delete_snapshot_at_any_fail_point() {
    let points: Vec<String> = abort_fail_points()
        .into_iter()
        .chain(
            [
                "iceberg.commit.before",
                "iceberg.commit.written",
                "iceberg.commit.after",
            ]
            .map(String::from),
        )
        .chain([String::new()])
        .collect();
    for point in &points {
        let w = Workdir::new();
        w.fixture("orders");
        let load = load(&catalog_uri(&w));
        assert!(crashed(
            &w.run_failing("checkpoint.committed.after:3", &args(&load))
        ));
        let before = table_in(&w);
        assert_eq!(before.summaries.len(), 3);
        let db = w.path("catalog.db");
        let committed = iceberg_rows(&db, "default.t").len();
        assert!(committed > 0);
        if point.is_empty() {
            assert_code(&w.run(&["-t", "t", "--abort"]), 0);
        } else {
            let out = w.run_failing(&format!("{point}:1"), &["-t", "t", "--abort"]);
            if crashed(&out) {
                assert_code(&w.run(&["-t", "t", "--abort"]), 0);
            } else {
                // Between the removals of a Hive table's files: an Iceberg table's
                // files leave it in one snapshot instead.
                assert_eq!(point, "abort.remove.mid", "{point} was never reached");
                assert_code(&out, 0);
            }
        }
        let after = table_in(&w);
        assert!(iceberg_rows(&db, "default.t").is_empty(), "{point}");
        assert!(after.files.is_empty(), "{point}");
        let deletes: Vec<_> = after
            .summaries
            .iter()
            .filter(|s| s.contains_key("ingest.abort"))
            .collect();
        assert_eq!(deletes.len(), 1, "{point}: one delete snapshot");
        assert_eq!(deletes[0]["operation"], "delete");
        assert_eq!(
            deletes[0]["deleted-records"],
            committed.to_string(),
            "{point}"
        );
        assert_eq!(deletes[0]["total-records"], "0", "{point}");
        assert_eq!(deletes[0]["total-data-files"], "0", "{point}");
        assert_eq!(deletes[0]["total-files-size"], "0", "{point}");
        assert_eq!(after.summaries.len(), 4, "{point}");
        assert_markers_once(&after, point);
        // The inputs count as not loaded: the next load takes them, once.
        assert_code(&w.run(&args(&load)), 0);
        assert_settled(
            &w,
            &TestCatalog::sqlite(&db),
            &format!("{point}: after abort and load"),
        );
    }
}

#[test]
fn overwrite_replaces_the_partitions_it_touches_in_one_snapshot_across_crashes() {
    let points = [
        "checkpoint.committed.after:2",
        "iceberg.commit.before:1",
        "iceberg.commit.written:1",
        "iceberg.commit.after:1",
        "run.finished.before:1",
        "",
    ];
    for point in points {
        let w = Workdir::new();
        w.fixture("orders");
        let uri = catalog_uri(&w);
        let base = by_day(&uri, &["--checkpoint-rows", "100", "orders"]);
        assert_code(&w.run(&args(&base)), 0);
        let before = table_in(&w).summaries.len();
        let (_, new_rows) = corrected_day(&w);
        let touched: BTreeSet<String> = new_rows.iter().map(|r| r["dt"].clone()).collect();
        let mut want: Vec<Row> = input_rows(&[w.path("orders")])
            .into_iter()
            .filter(|r| !touched.contains(&r["dt"]))
            .collect();
        want.extend(new_rows);
        let overwrite = by_day(
            &uri,
            &[
                "--checkpoint-rows",
                "5",
                "--mode",
                "overwrite-partitions",
                "fix",
            ],
        );
        if point.is_empty() {
            assert_code(&w.run(&args(&overwrite)), 0);
        } else {
            assert!(crashed(&w.run_failing(point, &args(&overwrite))), "{point}");
            let now = table_in(&w).summaries.len();
            assert!(now <= before + 1, "{point}: more than one snapshot");
            if now == before + 1 {
                // The snapshot is in: an abort would lose the replaced files for good.
                assert_code(&w.run(&["-t", "t", "--abort"]), 1);
            }
            assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        }
        let want = as_typed_by_contract(&w.path("t"), want);
        let db = w.path("catalog.db");
        assert_same_rows(iceberg_rows(&db, "default.t"), want, point);
        let after = table_in(&w);
        assert_eq!(after.summaries.len(), before + 1, "{point}: one snapshot");
        let last = after.summaries.last().unwrap();
        assert_eq!(last["operation"], "overwrite", "{point}");
        assert_markers_once(&after, point);
    }
}

#[test]
fn an_abort_whose_committed_files_another_writer_replaced_refuses_to_say_aborted() {
    let w = Workdir::new();
    w.fixture("orders");
    let uri = catalog_uri(&w);
    let base = by_day(&uri, &["--checkpoint-rows", "100", "orders"]);
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:3", &args(&base))
    ));
    // Another job replaces the partition of the crashed run's first rows.
    let (_, _) = corrected_day(&w);
    let overwrite = by_day(
        &uri,
        &["--mode", "overwrite-partitions", "--job", "fix", "fix"],
    );
    assert_code(&w.run(&args(&overwrite)), 0);
    let before = table_in(&w).summaries.len();
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no longer in the Iceberg table's current snapshot"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        table_in(&w).summaries.len(),
        before,
        "the refused abort committed"
    );
    // Recovery finishes the run instead.
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_markers_once(&table_in(&w), "recovered");
}

#[test]
fn compact_and_vacuum_of_an_iceberg_table_are_refused_and_change_nothing() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = load(&catalog_uri(&w));
    assert_code(&w.run(&args(&load)), 0);
    let before = table_in(&w);
    for (flag, says) in [
        ("--compact", "does not rewrite Iceberg tables"),
        ("--vacuum", "does not clean Iceberg tables"),
    ] {
        let out = w.run(&["-t", "t", flag]);
        assert_code(&out, 1);
        assert!(stderr(&out).contains(says), "{flag}: {}", stderr(&out));
        assert!(
            !w.path("t/_ingest/compact").exists(),
            "{flag} made the compaction's job"
        );
        let after = table_in(&w);
        assert_eq!(after.summaries, before.summaries, "{flag}");
        assert_eq!(after.files, before.files, "{flag}");
    }
    assert_settled(
        &w,
        &TestCatalog::sqlite(&w.path("catalog.db")),
        "after the refusals",
    );
}

/// What snapshot expiry by another tool leaves: only the current snapshot, its parent
/// gone (a new metadata file, swapped in through the catalog).
fn expire_all_but_current(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let location: String = conn
        .query_row(
            "SELECT metadata_location FROM iceberg_tables WHERE table_name = 't'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let mut metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&location).unwrap()).unwrap();
    let current = metadata["current-snapshot-id"].clone();
    let keep = |list: &serde_json::Value| -> serde_json::Value {
        list.as_array()
            .unwrap()
            .iter()
            .filter(|s| s["snapshot-id"] == current)
            .cloned()
            .collect()
    };
    metadata["snapshots"] = keep(&metadata["snapshots"]);
    metadata["snapshot-log"] = keep(&metadata["snapshot-log"]);
    let expired = format!("{location}.expired.metadata.json");
    std::fs::write(&expired, serde_json::to_vec(&metadata).unwrap()).unwrap();
    conn.execute(
        "UPDATE iceberg_tables SET metadata_location = ?1 WHERE table_name = 't'",
        [&expired],
    )
    .unwrap();
}

/// Another job (`other`) loads other rows than the fixture's into the same table, with
/// `load`'s options.
fn other_job_loads(w: &Workdir, load: &[String]) {
    other_orders(w);
    let mut other = load.to_vec();
    other.retain(|a| a != "orders");
    other.extend(["--job".into(), "other".into(), "more".into()]);
    assert_code(&w.run(&args(&other)), 0);
}

/// Other rows than the fixture's, for another job's load into the same table.
fn other_orders(w: &Workdir) {
    let more: Vec<Row> = input_rows(&[w.path("orders/2026-11-27.csv")])
        .into_iter()
        .map(|mut r| {
            let id: i64 = r["order_id"].parse().unwrap();
            r.insert("order_id".into(), (id + 1_000_000).to_string());
            r
        })
        .collect();
    write_orders(w, "more/more.csv", &more);
}

#[test]
fn a_commit_whose_snapshot_was_expired_is_found_by_the_jobs_property_and_not_made_again() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = load(&catalog_uri(&w));
    // Checkpoint 3's snapshot is committed; the load dies before it hears so.
    assert!(crashed(
        &w.run_failing("iceberg.commit.written:3", &args(&load))
    ));
    // Another job commits on top, then another tool expires every older snapshot,
    // checkpoint 3's among them.
    other_job_loads(&w, &load);
    let db = w.path("catalog.db");
    expire_all_but_current(&db);
    assert_eq!(table_in(&w).summaries.len(), 1);
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    let mut want = expected(&w);
    want.extend(
        input_rows(&[w.path("more/more.csv")])
            .into_iter()
            .map(|mut r| {
                let mut amount: rust_decimal::Decimal = r["amount"].parse().unwrap();
                amount.rescale(2);
                r.insert("amount".into(), amount.to_string());
                r
            }),
    );
    let want = as_typed_by_contract(&w.path("t"), want);
    assert_same_rows(
        iceberg_rows(&db, "default.t"),
        want,
        "after expiry and recovery",
    );
    let checkpoints: Vec<String> = table_in(&w)
        .summaries
        .iter()
        .filter(|s| s["ingest.job"] == "default")
        .map(|s| s["ingest.checkpoint"].clone())
        .collect();
    assert!(!checkpoints.contains(&"3".to_string()), "{checkpoints:?}");
}

#[test]
fn an_abort_whose_snapshot_was_expired_is_found_by_the_jobs_property_and_not_made_again() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = load(&catalog_uri(&w));
    // Two jobs, each killed after two commits, each aborted, each abort killed after
    // its delete snapshot is committed and before it hears so: each job's property
    // must name its own last abort.
    for job in ["default", "second"] {
        let mut load = load.clone();
        load.extend(["--job".to_string(), job.to_string()]);
        assert!(crashed(
            &w.run_failing("checkpoint.committed.after:2", &args(&load))
        ));
        assert!(crashed(&w.run_failing(
            "iceberg.commit.written:1",
            &["-t", "t", "--job", job, "--abort"]
        )));
    }
    other_job_loads(&w, &load);
    expire_all_but_current(&w.path("catalog.db"));
    let before = table_in(&w);
    for job in ["default", "second"] {
        let out = w.run(&["-t", "t", "--job", job, "--abort"]);
        assert_code(&out, 0);
    }
    let after = table_in(&w);
    assert_eq!(
        after.summaries, before.summaries,
        "the abort committed again"
    );
    assert_eq!(after.files, before.files);
}

/// A run that found no table, and so meant to create it, and finds it registered by
/// another writer by the time it commits: it commits on top when the columns (ids and
/// types) and partitioning are the ones it planned, and refuses when they are not.
#[test]
fn a_table_another_writer_created_first_is_committed_to_only_with_the_planned_columns() {
    for differs in [false, true] {
        let w = Workdir::new();
        w.fixture("orders");
        let load = load(&catalog_uri(&w));
        assert!(crashed(
            &w.run_failing("iceberg.commit.before:1", &args(&load))
        ));
        let db = w.path("catalog.db");
        assert!(iceberg_table(&db, "default.t").is_none());
        // The other writer's table: the run's planned metadata (its first, unswapped
        // file), another uuid, no snapshot; a column of another type if `differs`.
        let planned = std::fs::read_dir(w.path("t/metadata"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".metadata.json"))
            .unwrap();
        let mut metadata: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&planned).unwrap()).unwrap();
        metadata["table-uuid"] = "00000000-0000-4000-8000-000000000001".into();
        metadata["snapshots"] = serde_json::json!([]);
        metadata["snapshot-log"] = serde_json::json!([]);
        metadata["refs"] = serde_json::json!({});
        metadata["properties"] = serde_json::json!({});
        metadata
            .as_object_mut()
            .unwrap()
            .remove("current-snapshot-id");
        if differs {
            metadata["schemas"][0]["fields"][0]["type"] = "string".into();
        }
        let theirs = w.path("t/metadata/theirs.metadata.json");
        std::fs::write(&theirs, serde_json::to_vec(&metadata).unwrap()).unwrap();
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "INSERT INTO iceberg_tables VALUES ('ingest', 'default', 't', ?1, NULL, 'TABLE')",
            [theirs.to_str().unwrap()],
        )
        .unwrap();
        let out = w.run(&["-t", "t", "--recover"]);
        if differs {
            assert_code(&out, 1);
            assert!(
                stderr(&out).contains("another writer created the Iceberg table first"),
                "{}",
                stderr(&out)
            );
            assert!(table_in(&w).summaries.is_empty());
        } else {
            assert_code(&out, 0);
            assert_settled(
                &w,
                &TestCatalog::sqlite(&db),
                "committed on the other writer's table",
            );
        }
    }
}
