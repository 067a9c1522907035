//! Delta Lake tables (`--table-format delta`): one commit per checkpoint with its `txn`,
//! exactly once across every crash point and random kills, read back through the log
//! by a reader written here (not the code under test): replay `_delta_log/N.json` in
//! order, keep the files added and not removed, read them as Parquet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::crash::{
    big_orders, operators_loop, operators_loop_killing_at_most, whole_load_ms, Rng,
};
use crate::util::*;

const LOAD: &[&str] = &[
    "-t",
    "t",
    "--table-format",
    "delta",
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
];

/// The table as the Delta log says it is.
#[derive(Debug, Default)]
pub struct DeltaLog {
    /// Files in the latest version: path (decoded, relative) → partition values (null
    /// as the empty string, as an empty CSV field reads).
    pub files: BTreeMap<String, (Row, u64)>,
    /// Every `txn` action in commit order: (app id, version).
    pub txns: Vec<(String, i64)>,
    /// The latest version.
    pub version: u64,
}

pub fn delta_log(table: &Path) -> DeltaLog {
    let dir = table.join("_delta_log");
    let mut commits: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            assert!(
                !name.contains("checkpoint"),
                "a Delta checkpoint appeared; these tests stay under its interval: {name}"
            );
            let version = name.strip_suffix(".json")?.parse().ok()?;
            Some((version, p))
        })
        .collect();
    commits.sort();
    let mut log = DeltaLog::default();
    for (i, (version, path)) in commits.iter().enumerate() {
        assert_eq!(*version, i as u64, "the log skips a version: {commits:?}");
        log.version = *version;
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let action: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(add) = action.get("add") {
                let path = percent_decode(add["path"].as_str().unwrap());
                let values = add["partitionValues"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let size = add["size"].as_u64().unwrap();
                assert!(
                    log.files.insert(path.clone(), (values, size)).is_none(),
                    "{path} added twice"
                );
            }
            if let Some(remove) = action.get("remove") {
                let path = percent_decode(remove["path"].as_str().unwrap());
                assert!(
                    log.files.remove(&path).is_some(),
                    "{path} removed, never added"
                );
            }
            if let Some(txn) = action.get("txn") {
                log.txns.push((
                    txn["appId"].as_str().unwrap().to_string(),
                    txn["version"].as_i64().unwrap(),
                ));
            }
        }
    }
    log
}

/// Every row of the table's latest version; every file the log names must exist whole.
pub fn delta_rows(table: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for (path, (partition, size)) in delta_log(table).files {
        let file = table.join(&path);
        let meta = std::fs::metadata(&file)
            .unwrap_or_else(|e| panic!("the log names {path}, which is missing: {e}"));
        assert_eq!(meta.len(), size, "{path} is not the size the log gives");
        rows.extend(parquet_file_rows(&file, &partition));
    }
    rows
}

/// Input rows as a load with `LOAD`'s casts and dedupe commits them.
fn expected(w: &Workdir) -> Vec<Row> {
    orders_with_decimal_amounts(w)
}

/// Each app's txn versions, in commit order, must be strictly rising: no checkpoint's
/// commit was applied twice.
#[track_caller]
pub fn assert_txns_once(log: &DeltaLog, what: &str) {
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for (app, version) in &log.txns {
        if let Some(before) = last.insert(app, *version) {
            assert!(
                *version > before,
                "{what}: txn {app} {version} after {before}: {:?}",
                log.txns
            );
        }
    }
}

#[track_caller]
fn assert_settled(w: &Workdir, what: &str) {
    assert_same_rows(delta_rows(&w.path("t")), expected(w), what);
    let log = delta_log(&w.path("t"));
    assert_txns_once(&log, what);
    let again = w.run(&["-t", "t", "--recover"]);
    assert_code(&again, 0);
    assert!(
        stderr(&again).contains("nothing to recover"),
        "{what}: {}",
        stderr(&again)
    );
    let rerun = w.run(LOAD);
    assert_code(&rerun, 0);
    assert!(
        stderr(&rerun).contains("nothing to load"),
        "{what}: {}",
        stderr(&rerun)
    );
    assert_eq!(
        delta_log(&w.path("t")).version,
        log.version,
        "{what}: a re-run committed"
    );
}

#[test]
fn each_checkpoint_is_one_delta_commit_with_the_jobs_txn() {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(LOAD);
    assert_code(&out, 0);
    let log = delta_log(&w.path("t"));
    let checkpoints = log.txns.len() as i64;
    assert!(checkpoints >= 5, "{:?}", log.txns);
    // One commit per checkpoint, txn 1, 2, …; the first (version 0) also creates the
    // table, so nothing of a run that never committed is in the log.
    assert_eq!(log.version, checkpoints as u64 - 1);
    let wanted: Vec<(String, i64)> = (1..=checkpoints)
        .map(|v| ("ingest:default".to_string(), v))
        .collect();
    assert_eq!(log.txns, wanted);
    assert_same_rows(delta_rows(&w.path("t")), expected(&w), "delta load");
    // The schema and partitioning are in the log, for every Delta reader.
    let first = std::fs::read_to_string(w.path("t/_delta_log/00000000000000000000.json")).unwrap();
    let metadata = first
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find_map(|a| a.get("metaData").cloned())
        .unwrap();
    assert_eq!(metadata["partitionColumns"], serde_json::json!(["country"]));
    let schema: serde_json::Value =
        serde_json::from_str(metadata["schemaString"].as_str().unwrap()).unwrap();
    let types: BTreeMap<String, serde_json::Value> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap().to_string(), f["type"].clone()))
        .collect();
    assert_eq!(types["order_id"], "long");
    assert_eq!(types["amount"], "decimal(12,2)");
    assert_eq!(types["country"], "string");

    // A second run of the job goes on from the job's last version.
    w.write("orders/2026-11-29.csv", "order_id,dt,ts,customer,email,country,amount,currency,note\n9999,2026-11-29,2026-11-29T00:00:00Z,A,a@x,FR,1.50,EUR,\n");
    assert_code(&w.run(LOAD), 0);
    let log = delta_log(&w.path("t"));
    assert_eq!(
        log.txns.last(),
        Some(&("ingest:default".to_string(), checkpoints + 1))
    );

    let status = w.run(&["-t", "t", "--status"]);
    assert_code(&status, 0);
    let text = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(
        text.contains(&format!(
            "delta: table version {}; this job's last transaction version {}",
            log.version,
            checkpoints + 1
        )),
        "{text}"
    );
}

#[test]
fn several_sinks_commit_each_checkpoint_as_one_delta_commit() {
    let w = Workdir::new();
    w.fixture("orders");
    // Four threads: two sinks split the partitions, each its own Parquet files.
    assert_code(&w.run(&[LOAD, &["--threads", "4"]].concat()), 0);
    let log = delta_log(&w.path("t"));
    let checkpoints = log.txns.len() as u64;
    assert!(checkpoints >= 5, "{:?}", log.txns);
    assert_eq!(log.version + 1, checkpoints, "one commit per checkpoint");
    // Sink i of 2 numbers its files i, i + 2, …: both wrote.
    let parity: std::collections::BTreeSet<u64> = log
        .files
        .keys()
        .map(|path| {
            let stem = path.rsplit('/').next().unwrap().split('.').next().unwrap();
            stem.rsplit('-').next().unwrap().parse::<u64>().unwrap() % 2
        })
        .collect();
    assert_eq!(parity.len(), 2, "{:?}", log.files.keys());
    assert_settled(&w, "two sinks");
}

#[test]
fn every_fail_point_then_recover_commits_each_checkpoint_once() {
    let points: Vec<String> = all_fail_points()
        .into_iter()
        .chain(delta_fail_points())
        .filter(|p| !p.starts_with("overwrite."))
        .collect();
    assert!(points.iter().any(|p| p == "delta.commit.written"));
    let crashes = crash_matrix(
        &points,
        &[1, 3],
        true,
        LOAD,
        || {
            let w = Workdir::new();
            w.fixture("orders");
            (w, ())
        },
        |run| {
            // Whatever the log names is whole, at every instant.
            if run.w.path("t/_delta_log").exists() {
                delta_rows(&run.w.path("t"));
            }
        },
        |run| assert_settled(&run.w, &run.spec),
    );
    assert!(crashes >= points.len(), "{crashes} crashes");
}

#[test]
fn random_sigkill_of_delta_loads_and_recoveries_loses_and_duplicates_nothing() {
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let load = [
        "-t",
        "t",
        "--table-format",
        "delta",
        "-p",
        "dt",
        "--checkpoint-rows",
        "2000",
        "orders",
    ];
    let full = whole_load_ms(&load, || {
        let w = Workdir::new();
        big_orders(&w, 20_000, &mut Rng(seed));
        w
    });
    // Three rounds, and more (up to six) while fewer than two kills have landed: a
    // round whose first load outlives its delay lands none.
    let mut kills = 0;
    for round in 0..6 {
        if kill_rounds_done(round, 3, kills) {
            break;
        }
        let w = Workdir::new();
        big_orders(&w, 20_000, &mut Rng(seed));
        kills += operators_loop(&w, &load, &mut rng, full, seed);
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        let what = format!("seed {seed}, round {round}");
        let rows = delta_rows(&w.path("t"));
        let want = as_typed_by_contract(&w.path("t"), input_rows(&[w.path("orders")]));
        assert_same_rows(rows, want, &what);
        assert_txns_once(&delta_log(&w.path("t")), &what);
    }
    eprintln!("random SIGKILL (delta): seed {seed}, {kills} kills landed over 3 loads or more");
    assert!(kills >= 2, "seed {seed}: only {kills} kills landed mid-run");
}

#[test]
fn csv_or_json_lines_output_for_a_delta_table_is_a_usage_error() {
    let w = Workdir::new();
    w.fixture("orders");
    for format in ["csv", "jsonl"] {
        let out = w.run(&[
            "-t",
            "t",
            "--table-format",
            "delta",
            "--format",
            format,
            "orders",
        ]);
        assert_code(&out, 2);
        assert!(stderr(&out).contains("Parquet"), "{}", stderr(&out));
    }
    assert!(!w.path("t").exists());
}

#[test]
fn a_load_whose_schema_differs_from_the_delta_tables_fails_before_reading_a_row() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(LOAD), 0);
    let version = delta_log(&w.path("t")).version;
    // As if another writer had made the table: only its Delta log says what it is.
    std::fs::remove_file(w.path("t/_ingest/contract.json")).unwrap();
    let out = w.run(&[
        "-t",
        "t",
        "--table-format",
        "delta",
        "-p",
        "country",
        "--job",
        "other",
        "--reload",
        // Text columns, against the table's typed ones.
        "--no-infer",
        "orders",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("the Delta table's schema differs"), "{err}");
    assert!(err.contains("order_id long"), "{err}");
    assert!(err.contains("order_id string"), "{err}");
    assert_eq!(delta_log(&w.path("t")).version, version);
    assert!(!w.path("t/_ingest/other/journal").exists());
}

#[test]
fn abort_takes_the_runs_files_out_of_the_delta_table_in_one_commit() {
    let w = Workdir::new();
    w.fixture("orders");
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:3", LOAD)
    ));
    let before = delta_log(&w.path("t"));
    assert_eq!(before.txns.len(), 3);
    assert!(!delta_rows(&w.path("t")).is_empty());
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 0);
    let after = delta_log(&w.path("t"));
    assert_eq!(
        after.version,
        before.version + 1,
        "one commit removes them all"
    );
    assert!(delta_rows(&w.path("t")).is_empty());
    // The abort held the compaction's lock; no compaction ran, and none is shown.
    let out = w.run(&["-t", "t", "--status", "--json"]);
    assert_code(&out, 0);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["job"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["default"]);
    // The inputs count as not loaded: the next load takes them, once.
    assert_code(&w.run(LOAD), 0);
    assert_same_rows(
        delta_rows(&w.path("t")),
        expected(&w),
        "after abort and load",
    );
    assert_txns_once(&delta_log(&w.path("t")), "after abort and load");
}

#[test]
fn shards_loaded_at_once_by_separate_jobs_land_every_row_once() {
    let w = Workdir::new();
    let mut rng = Rng(7);
    big_orders(&w, 6_000, &mut rng);
    // Split into many small inputs so that every shard gets some.
    let all = input_rows(&[w.path("orders")]);
    std::fs::remove_dir_all(w.path("orders")).unwrap();
    for (i, chunk) in all.chunks(250).enumerate() {
        write_orders(&w, &format!("orders/part-{i:03}.csv"), chunk);
    }
    let shards = 4;
    let children: Vec<_> = (0..shards)
        .map(|i| {
            w.cmd()
                .args([
                    "-t",
                    "t",
                    "--table-format",
                    "delta",
                    "-p",
                    "dt",
                    "--checkpoint-rows",
                    "400",
                    "--job",
                    &format!("shard{i}"),
                    "--shard",
                    &format!("{i}/{shards}"),
                    "orders",
                ])
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
    let all = as_typed_by_contract(&w.path("t"), all);
    assert_same_rows(delta_rows(&w.path("t")), all, "four shards at once");
    // One of the four created the table; the others committed on top of it, never a
    // second create (a new table id that fails every writer that read the first).
    let creates = std::fs::read_dir(w.path("t/_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| std::fs::read_to_string(p).unwrap().contains("\"metaData\""))
        .count();
    assert_eq!(creates, 1, "the table was created more than once");
    let log = delta_log(&w.path("t"));
    assert_txns_once(&log, "four shards at once");
    let apps: std::collections::BTreeSet<_> = log.txns.iter().map(|(a, _)| a.clone()).collect();
    assert_eq!(apps.len(), shards, "{apps:?}");
}

const BASE: &[&str] = &[
    "-t",
    "t",
    "--table-format",
    "delta",
    "-p",
    "dt",
    "--checkpoint-rows",
    "100",
    "orders",
];

const OVERWRITE: &[&str] = &[
    "-t",
    "t",
    "--table-format",
    "delta",
    "-p",
    "dt",
    "--checkpoint-rows",
    "5",
    "--mode",
    "overwrite-partitions",
    "fix",
];

#[test]
fn overwrite_replaces_the_partitions_it_touches_in_one_commit_across_crashes() {
    let points = [
        "checkpoint.committed.after:2",
        "delta.commit.before:1",
        "delta.commit.written:1",
        "delta.commit.after:1",
        "run.finished.before:1",
        "",
    ];
    for point in points {
        let w = Workdir::new();
        w.fixture("orders");
        assert_code(&w.run(BASE), 0);
        let before = delta_log(&w.path("t")).version;
        let (_, new_rows) = corrected_day(&w);
        let touched: std::collections::BTreeSet<String> =
            new_rows.iter().map(|r| r["dt"].clone()).collect();
        let mut want: Vec<Row> = input_rows(&[w.path("orders")])
            .into_iter()
            .filter(|r| !touched.contains(&r["dt"]))
            .collect();
        want.extend(new_rows);
        if point.is_empty() {
            assert_code(&w.run(OVERWRITE), 0);
        } else {
            assert!(crashed(&w.run_failing(point, OVERWRITE)), "{point}");
            let log = delta_log(&w.path("t"));
            assert!(log.version <= before + 1, "{point}: more than one commit");
            if log.version == before + 1 {
                // The commit is in: an abort would lose the replaced files for good.
                assert_code(&w.run(&["-t", "t", "--abort"]), 1);
            }
            assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        }
        let want = as_typed_by_contract(&w.path("t"), want);
        assert_same_rows(delta_rows(&w.path("t")), want, point);
        let log = delta_log(&w.path("t"));
        assert_eq!(
            log.version,
            before + 1,
            "{point}: one commit replaces them all"
        );
        assert_txns_once(&log, point);
    }
}

/// `--evolve add-columns` on a Delta table: the load's new trailing columns are added to
/// the log's schema in a commit of their own before a row is read; the table's older
/// files read them as nulls. Without the flag the load fails before reading, and a
/// crash after the schema commit leaves a table that the recovery and readers accept.
#[test]
fn evolve_add_columns_widens_the_delta_schema_in_a_commit_of_its_own() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = |inputs: &str, extra: &[&str]| -> Vec<String> {
        ["-t", "t", "--table-format", "delta", "-p", "dt", inputs]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: Vec<String>| w.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_code(&run(load("orders", &[])), 0);
    let before = delta_log(&w.path("t"));
    let old_rows = delta_rows(&w.path("t")).len();
    w.write(
        "new/2026-11-29.csv",
        "order_id,dt,ts,customer,email,country,amount,currency,note,channel\n\
         9001,2026-11-29,2026-11-29T08:00:00Z,A,a@x,FR,1.50,EUR,,web\n\
         9002,2026-11-29,2026-11-29T09:00:00Z,B,b@x,DE,2.50,EUR,,\n",
    );
    // Without --evolve: refused before a row is read, the log unchanged.
    let out = run(load("new", &[]));
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("--evolve add-columns"),
        "{}",
        stderr(&out)
    );
    assert_eq!(delta_log(&w.path("t")).version, before.version);

    // Crashed before its first checkpoint's commit: the schema commit is in.
    let evolve = load(
        "new",
        &["--evolve", "add-columns", "--checkpoint-rows", "1"],
    );
    let args: Vec<&str> = evolve.iter().map(String::as_str).collect();
    assert!(crashed(&w.run_failing("delta.commit.before:1", &args)));
    let widened = delta_log(&w.path("t"));
    assert_eq!(widened.version, before.version + 1, "one schema commit");
    assert_eq!(
        widened.files, before.files,
        "the schema commit adds no file"
    );
    let schema = last_schema(&w.path("t"));
    assert_eq!(
        schema.last().map(String::as_str),
        Some("channel"),
        "{schema:?}"
    );
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);

    let rows = delta_rows(&w.path("t"));
    assert_eq!(rows.len(), old_rows + 2);
    let channels: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.get("channel").map(String::as_str))
        .collect();
    // The old files have no such column (a reader gives nulls); the new rows have it,
    // an empty field as a null.
    assert_eq!(channels.len(), 2, "{channels:?}");
    assert!(
        channels.contains(&"web") && channels.contains(&""),
        "{channels:?}"
    );
    assert_txns_once(&delta_log(&w.path("t")), "after evolve");
    // The same columns again: nothing to add, no schema commit.
    let version = delta_log(&w.path("t")).version;
    w.write(
        "new/2026-11-30.csv",
        "order_id,dt,ts,customer,email,country,amount,currency,note,channel\n\
         9003,2026-11-30,2026-11-30T08:00:00Z,C,c@x,FR,3.50,EUR,,app\n",
    );
    assert_code(&run(load("new", &["--evolve", "add-columns"])), 0);
    let log = delta_log(&w.path("t"));
    assert_eq!(log.version, version + 1, "one commit: the checkpoint's");
}

/// The column names of the latest schema in the table's log.
fn last_schema(table: &Path) -> Vec<String> {
    let dir = table.join("_delta_log");
    let mut commits: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    let metadata = commits
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter_map(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .unwrap()
                        .get("metaData")
                        .cloned()
                })
                .collect::<Vec<_>>()
        })
        .last()
        .expect("a metaData action");
    let schema: serde_json::Value =
        serde_json::from_str(metadata["schemaString"].as_str().unwrap()).unwrap();
    schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// Two jobs whose loads add the same column start at once on one Delta table: the one
/// that loses the race for the schema commit reloads the table, finds the column there
/// and loads (five rounds, so that the two race at least once in practice).
#[test]
fn two_loads_adding_the_same_column_at_once_both_load_and_the_column_is_added_once() {
    for round in 0..5 {
        let w = Workdir::new();
        w.fixture("orders");
        let base = ["-t", "t", "--table-format", "delta", "-p", "dt", "orders"];
        assert_code(&w.run(&base), 0);
        let header = "order_id,dt,ts,customer,email,country,amount,currency,note,channel";
        for job in ["a", "b"] {
            w.write(
                &format!("{job}/2026-11-29.csv"),
                format!("{header}\n9{round}{},2026-11-29,2026-11-29T08:00:00Z,A,a@x,FR,1.50,EUR,,{job}\n", job.len()),
            );
        }
        let children: Vec<_> = ["a", "b"]
            .map(|job| {
                w.cmd()
                    .args(["-t", "t", "--table-format", "delta", "-p", "dt"])
                    .args(["--evolve", "add-columns", "--job", job, job])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .into_iter()
            .collect();
        for child in children {
            assert_code(&child.wait_with_output().unwrap(), 0);
        }
        let schema = last_schema(&w.path("t"));
        assert_eq!(
            schema.iter().filter(|c| *c == "channel").count(),
            1,
            "round {round}: {schema:?}"
        );
        let channels: Vec<String> = delta_rows(&w.path("t"))
            .into_iter()
            .filter_map(|r| r.get("channel").cloned())
            .collect();
        assert_eq!(channels.len(), 2, "round {round}: {channels:?}");
    }
}

/// `LOAD` (into table `t`: `[1]` is its name) with a commit every `rows` rows, of `input`.
pub fn load_of<'a>(rows: &'a str, input: &'a str) -> Vec<&'a str> {
    let mut args = LOAD.to_vec();
    let at = args.iter().position(|a| *a == "--checkpoint-rows").unwrap() + 1;
    args[at] = rows;
    *args.last_mut().unwrap() = input;
    args
}

/// `LOAD` with a commit every 30 rows: 33 small files over 8 partitions (and under the
/// log's checkpoint interval, which `delta_log` reads no further than).
fn small_commits() -> Vec<&'static str> {
    load_of("30", "orders")
}

/// A work directory whose `small_commits` load was killed at fail point `point`.
fn small_commits_killed_at(point: &str) -> Workdir {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run_failing(point, &small_commits());
    assert!(crashed(&out), "{point}: {}", stderr(&out));
    w
}

/// `--abort` refuses: files the run committed were merged away.
#[track_caller]
fn assert_abort_refused_merged(w: &Workdir) {
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no longer in the Delta table"),
        "{}",
        stderr(&out)
    );
}

const COMPACT: &[&str] = &["-t", "t", "--compact"];

/// Fail points every Delta compaction's crash matrix must reach, on disk or in a bucket.
pub const COMPACTION_POINTS: [&str; 9] = [
    "compact.write.mid",
    "compact.verified.after",
    "checkpoint.complete.after",
    "commit.mid",
    "delta.commit.before",
    "delta.commit.written",
    "delta.commit.after",
    "checkpoint.committed.after",
    "run.finished.before",
];

/// The last commit's actions, one JSON object each.
fn last_commit(table: &Path) -> Vec<serde_json::Value> {
    let version = delta_log(table).version;
    let path = table.join(format!("_delta_log/{version:020}.json"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Files per partition of the table's latest version.
fn files_per_partition(table: &Path) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for path in delta_log(table).files.keys() {
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        *by.entry(dir).or_default() += 1;
    }
    by
}

#[test]
fn compaction_of_a_delta_table_is_one_optimize_commit_and_older_versions_still_read() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&small_commits()), 0);
    let table = w.path("t");
    let before = delta_rows(&table);
    let old = delta_log(&table);
    assert!(old.files.len() > 20, "{}", old.files.len());
    let out = w.run(COMPACT);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("compacted 8 partition(s)"),
        "{}",
        stderr(&out)
    );
    let new = delta_log(&table);
    assert_eq!(new.version, old.version + 1, "one commit");
    assert_same_rows(delta_rows(&table), before.clone(), "after the compaction");
    assert!(files_per_partition(&table).values().all(|n| *n == 1));
    let actions = last_commit(&table);
    let info = actions.iter().find_map(|a| a.get("commitInfo")).unwrap();
    assert_eq!(info["operation"], "OPTIMIZE");
    let (mut adds, mut removes) = (0, 0);
    for action in &actions {
        for (kind, count) in [("add", &mut adds), ("remove", &mut removes)] {
            if let Some(a) = action.get(kind) {
                assert_eq!(a["dataChange"], false, "{action}");
                *count += 1;
            }
        }
    }
    assert_eq!((adds, removes), (8, old.files.len()));
    assert!(new.txns.contains(&("ingest:compact".to_string(), 1)));
    // The replaced files stay for readers of older versions (until a vacuum).
    for path in old.files.keys() {
        assert!(table.join(path).exists(), "{path} was deleted");
    }
    let again = w.run(COMPACT);
    assert_code(&again, 0);
    assert!(
        stderr(&again).contains("nothing to compact"),
        "{}",
        stderr(&again)
    );
    // A later load adds files; the next compaction is the job's txn 2.
    let new_orders: Vec<Row> = input_rows(&[w.path("orders/2026-11-26.csv")])
        .into_iter()
        .map(|mut row| {
            let id: u64 = row["order_id"].parse().unwrap();
            row.insert("order_id".into(), (id + 100_000).to_string());
            row
        })
        .collect();
    let more = write_orders(&w, "more/x.csv", &new_orders);
    let mut args = load_of("30", more.to_str().unwrap());
    args.extend(["--job", "more"]);
    assert_code(&w.run(&args), 0);
    assert_code(&w.run(COMPACT), 0);
    let log = delta_log(&table);
    assert!(log.txns.contains(&("ingest:compact".to_string(), 2)));
    assert_txns_once(&log, "two compactions");
}

/// Every fail point a Delta compaction reaches, then `--abort` (refused once the
/// compaction passed its commit point) and `--recover`: the table's latest version
/// holds the same rows at every instant, each commit's txn is applied once, and a
/// compaction again leaves one file per partition.
#[test]
fn a_delta_compaction_killed_at_any_fail_point_commits_once_and_keeps_every_row() {
    let mut crashed_at = std::collections::BTreeSet::new();
    let loaded = Workdir::new();
    loaded.fixture("orders");
    // Twelve commits (several files in each partition to merge): each point's case
    // compacts a copy of them twice and reads the log four times.
    assert_code(&loaded.run(&load_of("100", "orders")), 0);
    let before = delta_rows(&loaded.path("t"));
    for point in listed_fail_points() {
        let w = loaded.copy();
        let table = w.path("t");
        let out = w.run_failing(&format!("{point}:1"), COMPACT);
        if crashed(&out) {
            crashed_at.insert(point.clone());
            assert_same_rows(
                delta_rows(&table),
                before.clone(),
                &format!("{point}: crash"),
            );
            let aborted = w.run(&["-t", "t", "--job", "compact", "--abort"]);
            match aborted.status.code() {
                Some(0) => {}
                Some(1) => assert!(stderr(&aborted).contains("--recover"), "{point}"),
                _ => panic!("{point}: {}", stderr(&aborted)),
            }
            assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        } else {
            assert_code(&out, 0);
        }
        assert_same_rows(
            delta_rows(&table),
            before.clone(),
            &format!("{point}: after"),
        );
        assert_txns_once(&delta_log(&table), &point);
        assert_code(&w.run(COMPACT), 0);
        assert_same_rows(
            delta_rows(&table),
            before.clone(),
            &format!("{point}: again"),
        );
        assert!(
            files_per_partition(&table).values().all(|n| *n == 1),
            "{point}"
        );
        assert_txns_once(&delta_log(&table), &point);
    }
    for point in COMPACTION_POINTS {
        assert!(
            crashed_at.contains(point),
            "{point} never reached: {crashed_at:?}"
        );
    }
}

#[test]
fn status_files_of_a_delta_table_counts_the_files_of_its_latest_version_only() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&small_commits()), 0);
    let table = w.path("t");
    let named = delta_log(&table).files.len() as u64;
    let status = |w: &Workdir| -> serde_json::Value {
        let out = w.run(&["-t", "t", "--status", "--files", "--json"]);
        assert_code(&out, 0);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(status(&w)["files"]["files"], named);
    assert_code(&w.run(COMPACT), 0);
    // The replaced files are still on disk; the latest version names 8.
    assert_eq!(status(&w)["files"]["files"], 8);
    assert_eq!(status(&w)["files"]["compactable_partitions"], 0);
}

/// Past delta-rs's checkpoint interval (a Parquet checkpoint of the log every 100
/// versions), the job's txn lives on in the checkpoint: with the JSON commits it covers
/// gone (as the log's cleanup of expired entries removes them), a recovery still finds
/// which checkpoints were committed and commits none twice.
#[test]
fn past_a_log_checkpoint_the_jobs_txn_survives_the_cleanup_of_older_commits() {
    let w = Workdir::new();
    let rows: String = (0..110).map(|i| format!("{i},v{i}\n")).collect();
    w.write("in/rows.csv", format!("id,v\n{rows}"));
    let load = [
        "-t",
        "t",
        "--table-format",
        "delta",
        "--checkpoint-rows",
        "1",
        "in",
    ];
    let out = w.run_failing("checkpoint.committed.after:105", &load);
    assert!(crashed(&out), "{}", stderr(&out));
    let log = w.path("t/_delta_log");
    assert!(log.join(format!("{:020}.checkpoint.parquet", 99)).exists());
    assert!(log.join("_last_checkpoint").exists());
    for version in 0..=99 {
        std::fs::remove_file(log.join(format!("{version:020}.json"))).unwrap();
    }
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    // 110 checkpoints of a row and the run's last, empty one (its barrier comes after the
    // last row), the first creating the table: versions 0 to 110, none twice.
    let commits: Vec<u64> = std::fs::read_dir(&log)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json")?.parse().ok()
        })
        .collect();
    assert_eq!(commits.iter().max(), Some(&110), "{commits:?}");
    assert_eq!(commits.len(), 11);
    let out = w.run(&["-t", "t", "--status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status[0]["delta_txn_version"], 111, "{status}");
    assert_eq!(status[0]["delta_version"], 110, "{status}");
    let again = w.run(&load);
    assert_code(&again, 0);
    assert!(
        stderr(&again).contains("nothing to load"),
        "{}",
        stderr(&again)
    );
    // Every row once in the data files (each commit added one file, none removed).
    let mut rows = Vec::new();
    for (file, partition) in data_files(&w.path("t")) {
        if file.to_string_lossy().ends_with(".parquet") && !file.starts_with(&log) {
            rows.extend(parquet_file_rows(&file, &partition));
        }
    }
    assert_same_rows(rows, input_rows(&[w.path("in")]), "past a checkpoint");
}

/// A Delta compaction needs no other job to be finished: a run killed mid-load keeps its
/// committed files in the table until a compaction merges them; its `--abort` then
/// refuses (removing what is left would leave the merged rows) and names `--recover`,
/// which finishes it, every row once.
#[test]
fn a_compaction_over_an_interrupted_runs_files_turns_its_abort_into_a_recovery() {
    let w = small_commits_killed_at("checkpoint.committed.after:20");
    let out = w.run(COMPACT);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("compacted"), "{}", stderr(&out));
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no longer in the Delta table") && stderr(&out).contains("--recover"),
        "{}",
        stderr(&out)
    );
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_settled(&w, "recovered after a compaction");
}

#[test]
fn random_sigkill_of_delta_compactions_and_recoveries_loses_and_duplicates_nothing() {
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let load = [
        "-t",
        "t",
        "--table-format",
        "delta",
        "-p",
        "dt",
        "--checkpoint-rows",
        "500",
        "orders",
    ];
    // Every round compacts a copy of one loaded table.
    let loaded = Workdir::new();
    big_orders(&loaded, 20_000, &mut Rng(seed));
    assert_code(&loaded.run(&load), 0);
    let setup = || loaded.copy();
    let full = whole_load_ms(COMPACT, setup);
    // Two rounds, and more (up to four) while fewer than two kills have landed.
    let mut kills = 0;
    for round in 0..4 {
        if kill_rounds_done(round, 2, kills) {
            break;
        }
        let w = setup();
        let table = w.path("t");
        let before = delta_rows(&table);
        kills += operators_loop_killing_at_most(&w, COMPACT, &mut rng, full, seed, 4);
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        let what = format!("seed {seed}, round {round}");
        assert_same_rows(delta_rows(&table), before, &what);
        assert_txns_once(&delta_log(&table), &what);
        assert!(
            files_per_partition(&table).values().all(|n| *n == 1),
            "{what}"
        );
    }
    eprintln!(
        "random SIGKILL (delta --compact): seed {seed}, {kills} kills landed over 2 rounds or more"
    );
    assert!(
        kills >= 2,
        "seed {seed}: only {kills} kills landed mid-command"
    );
}

/// A Delta compaction does not stop loads: it shares the table's lock, and its commit
/// and a load's appends are ordered by the log. A load of another job runs while the
/// compaction runs, both finish, and the table holds every row of both once.
#[test]
fn a_delta_compaction_and_a_load_run_at_once_and_every_row_lands_once() {
    use fs2::FileExt;
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&small_commits()), 0);
    let table = w.path("t");
    let before = delta_rows(&table);
    // A load holding the lock shared does not keep the compaction out.
    let held = std::fs::File::open(table.join("_ingest")).unwrap();
    FileExt::try_lock_shared(&held).unwrap();
    assert_code(&w.run(COMPACT), 0);
    drop(held);
    // Another job's load, many commits long, with a compaction started in its middle.
    let new_orders: Vec<Row> = input_rows(&[w.path("orders")])
        .into_iter()
        .map(|mut row| {
            let id: u64 = row["order_id"].parse().unwrap();
            row.insert("order_id".into(), (id + 500_000).to_string());
            row
        })
        .collect();
    write_orders(&w, "more/x.csv", &new_orders);
    // A commit every 20 rows: 46 commits (under the log's checkpoint interval).
    let mut args = load_of("20", "more");
    args.extend(["--job", "more"]);
    let mut load = w
        .cmd()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let compacted = w.run(COMPACT);
    // The load (46 commits) was still under way: the two overlapped.
    assert!(load.try_wait().unwrap().is_none(), "the load ended first");
    let loaded = load.wait_with_output().unwrap();
    assert_code(&loaded, 0);
    assert_code(&compacted, 0);
    let mut want = before;
    want.extend(as_typed_by_contract(&table, dedupe(new_orders, "order_id")));
    assert_same_rows(delta_rows(&table), want, "a compaction during a load");
    assert_txns_once(&delta_log(&table), "a compaction during a load");
}

/// A compaction decided but not yet committed, whose replaced files another job's
/// overwrite removes in between, can neither commit (it would bring rows back) nor wait:
/// `--recover` fails naming `--abort`, and `--abort` undoes it (nothing of it was
/// visible); the table holds the overwrite's rows, and a compaction again works.
#[test]
fn a_compaction_whose_replaced_files_another_job_removed_is_aborted_not_committed() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&small_commits()), 0);
    let out = w.run_failing("checkpoint.complete.after", COMPACT);
    assert!(crashed(&out), "{}", stderr(&out));
    // Another job replaces one country's partition.
    let (day, _) = corrected_day(&w);
    let mut overwrite = load_of("30", day.to_str().unwrap());
    overwrite.extend(["--job", "fix", "--mode", "overwrite-partitions"]);
    assert_code(&w.run(&overwrite), 0);
    let table = w.path("t");
    let after_overwrite = delta_rows(&table);
    let out = w.run(&["-t", "t", "--job", "compact", "--recover"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("--abort"), "{}", stderr(&out));
    assert_code(&w.run(&["-t", "t", "--job", "compact", "--abort"]), 0);
    assert_same_rows(delta_rows(&table), after_overwrite.clone(), "aborted");
    assert_txns_once(&delta_log(&table), "aborted");
    assert_code(&w.run(COMPACT), 0);
    assert_same_rows(delta_rows(&table), after_overwrite, "compacted again");
}

/// An abort of a Delta run keeps compactions out from its check that every file the run
/// committed is still in the table to its commit removing them: it waits for a running
/// compaction (here: its lock, held), and one cut short by a crash makes the next
/// compaction refuse until it is finished. A repeat after the abort's commit (killed
/// before `Aborted`) finds its own commit in the log and finishes.
#[test]
fn an_abort_of_a_delta_run_and_a_compaction_never_overlap() {
    use fs2::FileExt;
    let w = small_commits_killed_at("checkpoint.committed.after:3");
    let table = w.path("t");
    std::fs::create_dir_all(table.join("_ingest/compact")).unwrap();
    let held = std::fs::File::create(table.join("_ingest/compact/lock")).unwrap();
    held.try_lock_exclusive().unwrap();
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 75);
    assert!(stderr(&out).contains("compact"), "{}", stderr(&out));
    // With --lock-wait it waits for the compaction to end, then aborts.
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        drop(held);
    });
    let out = w.run_failing(
        "abort.started.after",
        &["-t", "t", "--abort", "--lock-wait", "30"],
    );
    release.join().unwrap();
    // It got the lock, and was cut short after `Aborting`: a compaction now would merge
    // files it must remove.
    assert!(crashed(&out), "{}", stderr(&out));
    let out = w.run(COMPACT);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("abort under way") && stderr(&out).contains("--abort"),
        "{}",
        stderr(&out)
    );
    // Killed after its commit, before `Aborted`: the repeat finds its commit (all the
    // run's files gone from the version) and finishes.
    assert!(crashed(
        &w.run_failing("abort.removed.after", &["-t", "t", "--abort"])
    ));
    let log = delta_log(&table);
    assert!(
        log.txns
            .iter()
            .any(|(app, _)| app == "ingest-abort:default"),
        "{:?}",
        log.txns
    );
    assert_code(&w.run(&["-t", "t", "--abort"]), 0);
    assert!(delta_rows(&table).is_empty());
    assert_code(&w.run(&small_commits()), 0);
    assert_code(&w.run(COMPACT), 0);
    assert_same_rows(delta_rows(&table), expected(&w), "loaded again, compacted");
    assert_txns_once(&delta_log(&table), "after the abort");
}

/// A file of the run merged away between an abort's start and its commit (another
/// tool's OPTIMIZE: here an ingest compaction run while the abort was cut short, before
/// the refusal above existed) makes the abort refuse, never report the run undone with
/// its rows still in the table.
#[test]
fn an_abort_that_finds_its_files_merged_away_refuses_to_say_aborted() {
    let w = small_commits_killed_at("checkpoint.committed.after:3");
    assert!(crashed(
        &w.run_failing("abort.started.after", &["-t", "t", "--abort"])
    ));
    // What another writer's OPTIMIZE would do: merge every partition's files. Moving
    // the abort's journal aside lets ingest's compaction play that writer.
    let journal = w.path("t/_ingest/default/journal");
    let aside = w.path("journal.aside");
    std::fs::rename(&journal, &aside).unwrap();
    assert_code(&w.run(COMPACT), 0);
    std::fs::rename(&aside, &journal).unwrap();
    let table = w.path("t");
    let before = delta_rows(&table);
    assert_abort_refused_merged(&w);
    assert_same_rows(delta_rows(&table), before, "the abort removed nothing");
}

/// A run killed with a checkpoint decided but not yet in the log: its abort removes the
/// files of the checkpoints the log has (the undecided one's are in no version, and do
/// not count as merged away), and the table is as before the run.
#[test]
fn an_abort_with_a_checkpoint_not_yet_in_the_log_undoes_the_ones_that_are() {
    let w = small_commits_killed_at("delta.commit.before:3");
    let table = w.path("t");
    assert_eq!(
        delta_log(&table).txns.len(),
        2,
        "two checkpoints in the log"
    );
    assert!(!delta_rows(&table).is_empty());
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 0);
    assert!(delta_rows(&table).is_empty());
    assert_code(&w.run(&small_commits()), 0);
    assert_same_rows(delta_rows(&table), expected(&w), "loaded after the abort");
}

/// The files of the run's last checkpoint in the log count too: a compaction of the one
/// partition only that checkpoint wrote to (merging them with another job's file) makes
/// the run's abort refuse.
#[test]
fn an_abort_refuses_when_only_its_last_logged_checkpoints_files_were_merged() {
    let w = Workdir::new();
    w.write("other/x.csv", "id,p\n9,z\n");
    w.write("in/a.csv", "id,p\n1,a\n2,a\n3,b\n4,b\n5,z\n6,z\n");
    let load = |job: &'static str, input: &'static str| {
        [
            "-t",
            "t",
            "--table-format",
            "delta",
            "-p",
            "p",
            "--checkpoint-rows",
            "2",
            "--job",
            job,
            input,
        ]
    };
    assert_code(&w.run(&load("other", "other")), 0);
    // Checkpoints 1, 2 and 3 write p=a, p=b and p=z; the run stops after the third.
    let out = w.run_failing("checkpoint.committed.after:3", &load("default", "in"));
    assert!(crashed(&out), "{}", stderr(&out));
    let out = w.run(&["-t", "t", "--compact", "--partition", "p=z"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("compacted 1 partition"),
        "{}",
        stderr(&out)
    );
    assert_abort_refused_merged(&w);
}

/// ingest's txns carry no `lastUpdated`, and Delta's transaction expiry
/// (`delta.setTransactionRetentionDuration`) drops a txn only by its `lastUpdated`
/// (delta-rs's kernel, as Spark): with the retention at one second and the job's txns
/// older than that, a recovery of a checkpoint whose commit landed just before the crash
/// still finds the commit, and makes it once.
#[test]
fn an_expired_transaction_retention_never_lets_a_recovery_commit_twice() {
    let w = Workdir::new();
    w.fixture("orders");
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:1", LOAD)
    ));
    // The table's metadata again, with the retention: the next version of the log.
    let table = w.path("t");
    let first =
        std::fs::read_to_string(table.join("_delta_log/00000000000000000000.json")).unwrap();
    let mut metadata: serde_json::Value = first
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|a| a.get("metaData").is_some())
        .unwrap();
    metadata["metaData"]["configuration"]["delta.setTransactionRetentionDuration"] =
        "interval 1 second".into();
    let next = delta_log(&table).version + 1;
    std::fs::write(
        table.join(format!("_delta_log/{next:020}.json")),
        format!("{metadata}\n"),
    )
    .unwrap();
    // Checkpoint 2's commit is written; the crash comes before the journal says so.
    let out = w.run_failing("delta.commit.written", &["-t", "t", "--recover"]);
    assert!(crashed(&out), "{}", stderr(&out));
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    let log = delta_log(&table);
    assert_txns_once(&log, "past the transaction retention");
    assert_same_rows(
        delta_rows(&table),
        expected(&w),
        "past the transaction retention",
    );
    for entry in std::fs::read_dir(table.join("_delta_log")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let action: serde_json::Value = serde_json::from_str(line).unwrap();
                if let Some(txn) = action.get("txn") {
                    assert!(
                        txn.get("lastUpdated").is_none(),
                        "{}: {txn}",
                        path.display()
                    );
                }
            }
        }
    }
}

/// A compaction killed before its commit point is cleared by the next one; that next one
/// killed mid-clearing (its abort of the old run journaled, not finished) is no trap: the
/// compaction after it finishes the clearing and compacts.
#[test]
fn a_compaction_killed_while_clearing_an_earlier_one_is_cleared_by_the_next() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&small_commits()), 0);
    let table = w.path("t");
    let before = delta_rows(&table);
    assert!(crashed(&w.run_failing("compact.verified.after", COMPACT)));
    assert!(crashed(&w.run_failing("abort.started.after", COMPACT)));
    let out = w.run(COMPACT);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("cleared compaction run"),
        "{}",
        stderr(&out)
    );
    assert_same_rows(delta_rows(&table), before, "compacted after two kills");
    assert!(files_per_partition(&table).values().all(|n| *n == 1));
    assert_txns_once(&delta_log(&table), "compacted after two kills");
}
