//! Delta tables in a bucket (`--target s3://… --table-format delta`) against the real
//! store `.ci/test` starts: the crash matrix and the kill loop of `s3_table.rs`, read
//! through the Delta log (`delta.rs`'s reader, over a download of the table), and many
//! writers on "machines" (`INGEST_WORK_DIR`s) that share nothing but the bucket.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::crash::{big_orders, Rng};
use crate::delta::{assert_txns_once, delta_log, delta_rows, DeltaLog};
use crate::s3::{store, Store, LEASE_SECS};
use crate::s3_table::{
    assert_killed_or_clean, assert_no_open_uploads, crash_matrix_on_two_machines,
    kill_loop_on_two_machines, run_killed_at, typed_as_in, TableReader, POLL_PAUSE,
};
use crate::util::*;

const DELTA: &[&str] = &["--table-format", "delta"];

/// A Delta table: readers replay its log and read the files it names.
const DELTA_READER: TableReader = TableReader {
    poll: poll_log,
    rows: delta_rows_in,
};

/// The rows of the table's latest version, read as a reader downloading it would;
/// every file the log names must be there whole, and no `txn` applied twice.
fn delta_rows_in(s3: &Store, table: &str, what: &str) -> Vec<Row> {
    let copy = tempfile::tempdir().unwrap();
    s3.download(table, copy.path());
    assert_txns_once(&delta_log(copy.path()), what);
    delta_rows(copy.path())
}

/// The table's log as a reader of the bucket replays it.
fn delta_log_in(s3: &Store, table: &str) -> DeltaLog {
    let copy = tempfile::tempdir().unwrap();
    s3.download(
        &format!("{table}/_delta_log"),
        &copy.path().join("_delta_log"),
    );
    delta_log(copy.path())
}

/// Reads the table's log over and over while `running`: every file it names must
/// already be in the bucket at the size it gives (listed after the log was read, so
/// the listing cannot be early). Returns the reads, and each file named too soon.
fn poll_log(s3: Arc<Store>, table: String, running: Arc<AtomicBool>) -> (usize, Vec<String>) {
    let (mut reads, mut early) = (0, Vec::new());
    while running.load(Ordering::Relaxed) {
        if reads > 0 {
            std::thread::sleep(POLL_PAUSE);
        }
        let copy = tempfile::tempdir().unwrap();
        let log = format!("{table}/_delta_log");
        s3.download(&log, &copy.path().join("_delta_log"));
        reads += 1;
        if !copy.path().join("_delta_log").exists() {
            continue;
        }
        let named = delta_log(copy.path()).files;
        let listed: std::collections::BTreeMap<String, u64> = s3
            .list(&table)
            .into_iter()
            .map(|(key, size)| (key[table.len() + 1..].to_string(), size))
            .collect();
        for (path, (_, size)) in named {
            if listed.get(&path) != Some(&size) {
                early.push(format!(
                    "{path} ({size} bytes; in the bucket: {:?})",
                    listed.get(&path)
                ));
            }
        }
    }
    (reads, early)
}

#[test]
fn a_delta_load_killed_at_every_point_on_one_machine_is_finished_on_another() {
    let Some(s3) = store("delta-crash") else {
        return;
    };
    // The points of staging and uploading are the bucket matrix of `s3_table.rs` (the
    // same code for every table format); here, the run's and each checkpoint's around the
    // log's commit, where a Delta table in a bucket differs.
    let points = commit_fail_points(
        all_fail_points()
            .into_iter()
            .chain(delta_fail_points())
            .collect(),
        "delta.",
    );
    assert!(points.len() >= 9, "{points:?}");
    assert!(points.iter().any(|p| p == "delta.commit.written"));
    crash_matrix_on_two_machines(Arc::new(s3), &points, DELTA, &DELTA_READER);
}

#[test]
fn random_sigkill_of_delta_loads_and_recoveries_on_two_machines_loses_and_duplicates_nothing() {
    let Some(s3) = store("delta-kill") else {
        return;
    };
    kill_loop_on_two_machines(Arc::new(s3), DELTA, &DELTA_READER);
}

/// Eight machines, each with its own job and working directory, load their share
/// (`--shard I/8`) of one list of inputs in the bucket into one Delta table at once;
/// some are killed at random, and each is finished from a second working directory
/// (another machine). Every row lands exactly once, each job's commits once.
#[test]
fn eight_writers_killed_at_random_and_recovered_elsewhere_land_every_row_once() {
    let Some(s3) = store("delta-writers") else {
        return;
    };
    let s3 = Arc::new(s3);
    const N: usize = 8;
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let w = Workdir::new();
    big_orders(&w, 16_000, &mut Rng(seed));
    let all = input_rows(&[w.path("orders")]);
    std::fs::remove_dir_all(w.path("orders")).unwrap();
    for (i, chunk) in all.chunks(250).enumerate() {
        write_orders(&w, &format!("orders/part-{i:03}.csv"), chunk);
    }
    s3.put_dir(&w.path("orders"), "in");
    let inputs = s3.url("in");
    let table = s3.table("t");
    let job = |i: usize| format!("shard-{i}");
    let load = |i: usize, table: &str| -> Vec<String> {
        let mut args: Vec<String> = ["-t", table, "-p", "dt", "--checkpoint-rows", "500"]
            .into_iter()
            .chain(DELTA.iter().copied())
            .map(String::from)
            .collect();
        args.extend(["--job".into(), job(i), "--shard".into(), format!("{i}/{N}")]);
        args.extend(["--lock-wait".into(), "30".into(), inputs.clone()]);
        args
    };
    // How long one share takes alone; eight at once on this machine take longer.
    let clock = Instant::now();
    let probe = s3.table("probe");
    assert_code(
        &s3.on(&w, "probe").args(load(0, &probe)).output().unwrap(),
        0,
    );
    let full = clock.elapsed().as_millis() as u64 + 1;

    let running = Arc::new(AtomicBool::new(true));
    let poller = {
        let (s3, running) = (s3.clone(), running.clone());
        std::thread::spawn(move || poll_log(s3, "t".into(), running))
    };
    // Round 1: all eight at once, every other one (at random) killed at a random moment.
    let victims: Vec<bool> = (0..N).map(|_| rng.below(2) == 0).collect();
    let delays: Vec<u64> = (0..N).map(|_| rng.below(2 * full)).collect();
    let outcomes: Vec<(std::process::Output, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let (s3, w, args) = (&s3, &w, load(i, &table));
                let delay = if victims[i] { delays[i] } else { u64::MAX };
                scope.spawn(move || {
                    let mut cmd = s3.on(w, &format!("machine-{i}"));
                    cmd.args(&args);
                    if delay == u64::MAX {
                        let out = cmd.output().unwrap();
                        (out, false)
                    } else {
                        run_killed_at(&mut cmd, delay)
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut kills = 0;
    for (i, (out, killed)) in outcomes.iter().enumerate() {
        kills += usize::from(*killed);
        if !victims[i] {
            assert_code(out, 0);
        } else {
            assert_killed_or_clean(out, seed);
        }
    }
    // Round 2: each job finished on another machine, recovery then the load again
    // (a kill before the run's journal reached the bucket leaves nothing to recover),
    // all eight at once.
    std::thread::scope(|scope| {
        for i in 0..N {
            let (s3, w, table, args) = (&s3, &w, &table, load(i, &table));
            scope.spawn(move || {
                let other = format!("machine-{i}-b");
                let recover = [
                    "-t",
                    table,
                    "--job",
                    &job(i),
                    "--recover",
                    "--lock-wait",
                    "30",
                ];
                assert_code(&s3.run_on(w, &other, &recover), 0);
                assert_code(&s3.on(w, &other).args(&args).output().unwrap(), 0);
            });
        }
    });
    running.store(false, Ordering::Relaxed);
    let (reads, early) = poller.join().unwrap();
    assert!(reads > 0);
    assert!(
        early.is_empty(),
        "seed {seed}: named before whole: {early:?}"
    );
    let what = format!("seed {seed}: eight writers, {kills} killed");
    let all = typed_as_in(&s3, "t", all);
    assert_same_rows(delta_rows_in(&s3, "t", &what), all, &what);
    let apps: std::collections::BTreeSet<_> = delta_log_in(&s3, "t")
        .txns
        .into_iter()
        .map(|(app, _)| app)
        .collect();
    assert_eq!(apps.len(), N, "{what}: {apps:?}");
    assert_no_open_uploads(&s3, &what);
    eprintln!("eight Delta writers on a bucket: seed {seed}, {kills} kills landed mid-run");
    assert!(
        victims.iter().all(|v| !v) || kills > 0,
        "{what}: no kill landed mid-run"
    );
}

/// `--mode overwrite-partitions` on a Delta table in a bucket is one commit, as on a
/// directory (no object store can swap a Hive partition's files at once, so a Hive table
/// in a bucket refuses the mode): crashed at each step on one machine, it is finished
/// on another, and readers see the old table or the new one.
#[test]
fn a_delta_overwrite_in_a_bucket_is_one_commit_finished_on_another_machine() {
    let Some(s3) = store("delta-overwrite") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let (fix, new_rows) = corrected_day(&w);
    s3.put_dir(&orders, "in");
    s3.put_dir(fix.parent().unwrap(), "fix");
    let touched: std::collections::BTreeSet<String> =
        new_rows.iter().map(|r| r["dt"].clone()).collect();
    let mut want: Vec<Row> = input_rows(&[orders])
        .into_iter()
        .filter(|r| !touched.contains(&r["dt"]))
        .collect();
    want.extend(new_rows);
    for point in [
        "delta.commit.before:1",
        "delta.commit.written:1",
        "run.finished.before:1",
        "",
    ] {
        let rel = format!("t{}", point.replace([':', '.'], "-"));
        let table = s3.table(&rel);
        let args = |rows: &str, mode: &str, inputs: &str| -> Vec<String> {
            let mut args: Vec<String> = ["-t", &table, "-p", "dt", "--checkpoint-rows", rows]
                .into_iter()
                .chain(DELTA.iter().copied())
                .map(String::from)
                .collect();
            args.extend([
                "--mode".into(),
                mode.into(),
                "--lock-wait".into(),
                "30".into(),
            ]);
            args.push(s3.url(inputs));
            args
        };
        let base = args("100", "append", "in");
        assert_code(&s3.on(&w, "machine-a").args(&base).output().unwrap(), 0);
        let before = delta_log_in(&s3, &rel).version;
        let overwrite = args("5", "overwrite-partitions", "fix");
        let mut cmd = s3.on(&w, "machine-a");
        if !point.is_empty() {
            cmd.env("INGEST_FAIL_POINT", point);
        }
        let out = cmd.args(&overwrite).output().unwrap();
        if point.is_empty() {
            assert_code(&out, 0);
        } else {
            assert!(crashed(&out), "{point}: {}", stderr(&out));
            let recovered = s3.run_on(
                &w,
                "machine-b",
                &["-t", &table, "--recover", "--lock-wait", "30"],
            );
            assert_code(&recovered, 0);
        }
        let typed = typed_as_in(&s3, &rel, want.clone());
        assert_same_rows(delta_rows_in(&s3, &rel, point), typed, point);
        let after = delta_log_in(&s3, &rel).version;
        assert_eq!(after, before + 1, "{point}: one commit replaces them all");
    }
}

/// `delta.rs`'s `LOAD` into a table in the bucket, from machine A: 8 partitions, a
/// commit every 30 rows (33 small files).
fn small_commits_into(s3: &Store, w: &Workdir, table: &str) {
    // Twelve commits: several files in each partition to merge.
    let mut load: Vec<&str> = crate::delta::load_of("100", "orders");
    load[1] = table;
    assert_code(&s3.run_on(w, "machine-a", &load), 0);
}

/// Files per partition of the latest version of the table in the bucket.
fn files_per_partition_in(s3: &Store, table: &str) -> std::collections::BTreeMap<String, usize> {
    let mut by = std::collections::BTreeMap::new();
    for path in delta_log_in(s3, table).files.keys() {
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        *by.entry(dir).or_default() += 1;
    }
    by
}

/// A compaction of a Delta table in a bucket killed at every fail point it reaches on
/// machine A, then `--abort` (refused once its commit is in the log) and `--recover`
/// on machine B: the latest version holds the same rows at every instant, each txn is
/// applied once, no upload is left open, and a compaction again leaves one file per
/// partition.
#[test]
fn a_delta_compaction_in_a_bucket_killed_at_every_point_is_finished_on_another_machine() {
    let Some(s3) = store("delta-compact-crash") else {
        return;
    };
    // The points a compaction reaches (the local matrix of `delta.rs` runs every point
    // of the protocol), and the two before anything is uploaded.
    let before_upload = ["run.started.after", "checkpoint.complete.before"];
    let points: Vec<String> = crate::delta::COMPACTION_POINTS
        .into_iter()
        .chain(before_upload)
        .map(String::from)
        .collect();
    let mut crashed_at = std::collections::BTreeSet::new();
    let loaded = Workdir::new();
    loaded.fixture("orders");
    small_commits_into(&s3, &loaded, &s3.table("loaded"));
    let before = delta_rows_in(&s3, "loaded", "the load");
    assert!(files_per_partition_in(&s3, "loaded")
        .values()
        .any(|n| *n > 1));
    for point in &points {
        // Each case on a copy of the loaded table, from machines that never saw it.
        let w = Workdir::new();
        let rel = format!("t-{}", point.replace('.', "-"));
        s3.copy_dir("loaded", &rel);
        let table = s3.table(&rel);
        let compact = ["-t", &table, "--compact", "--lock-wait", "30"];
        let out = s3
            .on(&w, "machine-a")
            .env("INGEST_FAIL_POINT", format!("{point}:1"))
            .args(compact)
            .output()
            .unwrap();
        if crashed(&out) {
            crashed_at.insert(point.clone());
            assert_same_rows(
                delta_rows_in(&s3, &rel, point),
                before.clone(),
                &format!("{point}: crash"),
            );
            let aborted = s3.run_on(
                &w,
                "machine-b",
                &[
                    "-t",
                    &table,
                    "--job",
                    "compact",
                    "--abort",
                    "--lock-wait",
                    "30",
                ],
            );
            match aborted.status.code() {
                Some(0) => {}
                Some(1) => assert!(stderr(&aborted).contains("--recover"), "{point}"),
                _ => panic!("{point}: {}", stderr(&aborted)),
            }
            let recovered = s3.run_on(
                &w,
                "machine-b",
                &["-t", &table, "--recover", "--lock-wait", "30"],
            );
            assert_code(&recovered, 0);
        } else {
            assert_code(&out, 0);
        }
        assert_same_rows(
            delta_rows_in(&s3, &rel, point),
            before.clone(),
            &format!("{point}: after"),
        );
        assert_code(&s3.run_on(&w, "machine-a", &compact), 0);
        assert_same_rows(
            delta_rows_in(&s3, &rel, point),
            before.clone(),
            &format!("{point}: again"),
        );
        assert!(
            files_per_partition_in(&s3, &rel).values().all(|n| *n == 1),
            "{point}: {:?}",
            files_per_partition_in(&s3, &rel)
        );
    }
    for point in &points {
        assert!(
            crashed_at.contains(point),
            "{point} never reached: {crashed_at:?}"
        );
    }
    assert_no_open_uploads(&s3, "after the compaction crash matrix");
}

/// Compactions of a Delta table in a bucket on machine A and recoveries on machine B,
/// killed at random moments until a compaction finishes, while a reader polls the log:
/// every file the log names is in the bucket when the log names it, and the table ends
/// with the rows it had, one file per partition, each txn once.
#[test]
fn random_sigkill_of_delta_compactions_in_a_bucket_on_two_machines_loses_and_duplicates_nothing() {
    let Some(s3) = store("delta-compact-kill") else {
        return;
    };
    let s3 = Arc::new(s3);
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let mut kills = 0;
    for round in 0..2 {
        let w = Workdir::new();
        // Fifteen commits to merge (each a file per partition).
        big_orders(&w, 6_000, &mut Rng(seed + round));
        let rel = format!("t{round}");
        let table = s3.table(&rel);
        let load = [
            "-t",
            &table,
            "--table-format",
            "delta",
            "-p",
            "dt",
            "--checkpoint-rows",
            "400",
            "orders",
        ];
        assert_code(&s3.run_on(&w, "machine-a", &load), 0);
        // The same table elsewhere, a copy, for the probe below.
        let probe = s3.table(&format!("{rel}-probe"));
        s3.copy_dir(&rel, &format!("{rel}-probe"));
        let before = delta_rows_in(&s3, &rel, "before");
        // A whole compaction of the same table elsewhere tells how long one takes.
        let clock = Instant::now();
        assert_code(&s3.run_on(&w, "probe", &["-t", &probe, "--compact"]), 0);
        let full = clock.elapsed().as_millis() as u64 + 1;
        let compact = ["-t", &table, "--compact", "--lock-wait", "10"];
        let recover = ["-t", &table, "--recover", "--lock-wait", "10"];
        let running = Arc::new(AtomicBool::new(true));
        let lister = {
            let (s3, rel, running) = (s3.clone(), rel.clone(), running.clone());
            std::thread::spawn(move || poll_log(s3, rel, running))
        };
        // A compaction killed before its commit point starts over (it keeps no
        // progress, as a load does): after four kills in a round, none is killed.
        let (mut landed, mut killed, mut tried, mut round_kills) = (false, false, Vec::new(), 0);
        for attempt in 0..40 {
            let (machine, args): (&str, &[&str]) = if attempt % 2 == 0 {
                ("machine-a", &compact)
            } else {
                ("machine-b", &recover)
            };
            // After a kill, first the dead holder's lease runs out.
            let wait = if killed { LEASE_SECS * 1000 } else { 0 };
            let delay = wait + rng.below(full);
            let out;
            if round_kills < 4 {
                (out, killed) = run_killed_at(s3.on(&w, machine).args(args), delay);
            } else {
                (out, killed) = (s3.on(&w, machine).args(args).output().unwrap(), false);
            }
            round_kills += u32::from(killed);
            kills += u32::from(killed);
            tried.push((delay, out.status.code()));
            assert_killed_or_clean(&out, seed);
            if attempt % 2 == 0 && out.status.success() {
                landed = true;
                break;
            }
        }
        assert!(
            landed,
            "seed {seed}: no compaction finished in 40 attempts, one taking {full} ms: {tried:?}"
        );
        assert_code(&s3.run_on(&w, "machine-b", &recover), 0);
        running.store(false, Ordering::Relaxed);
        let (listings, early) = lister.join().unwrap();
        assert!(listings > 0);
        assert!(early.is_empty(), "seed {seed}: named too early: {early:?}");
        let what = format!("seed {seed}, round {round}");
        assert_same_rows(delta_rows_in(&s3, &rel, &what), before, &what);
        assert!(
            files_per_partition_in(&s3, &rel).values().all(|n| *n == 1),
            "{what}: {:?}",
            files_per_partition_in(&s3, &rel)
        );
    }
    assert_no_open_uploads(&s3, &format!("seed {seed}"));
    eprintln!("random SIGKILL (delta --compact in a bucket): seed {seed}, {kills} kills landed");
    assert!(kills >= 2, "seed {seed}: only {kills} kills landed mid-run");
}

/// `--vacuum` of a Delta table in a bucket: after a compaction, nothing within the
/// retention; past it (`--retention 0s`), exactly the files the compaction replaced,
/// the latest version whole; `--dry-run` lists them first and deletes nothing.
#[test]
fn a_vacuum_in_a_bucket_deletes_only_the_replaced_files_past_the_retention() {
    let Some(s3) = store("delta-vacuum") else {
        return;
    };
    let w = Workdir::new();
    w.fixture("orders");
    let table = s3.table("t");
    small_commits_into(&s3, &w, &table);
    let old: std::collections::BTreeSet<String> =
        delta_log_in(&s3, "t").files.keys().cloned().collect();
    let before = delta_rows_in(&s3, "t", "before");
    assert_code(&s3.run_on(&w, "machine-a", &["-t", &table, "--compact"]), 0);
    let data = |s3: &Store| -> std::collections::BTreeSet<String> {
        s3.list("t")
            .into_iter()
            .map(|(key, _)| key["t/".len()..].to_string())
            .filter(|k| !k.starts_with('_') && k.ends_with(".parquet"))
            .collect()
    };
    let all = data(&s3);
    let json = |out: &std::process::Output| -> serde_json::Value {
        assert_code(out, 0);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let kept = json(&s3.run_on(&w, "machine-b", &["-t", &table, "--vacuum", "--json"]));
    assert_eq!(kept["outcome"], "nothing-to-vacuum", "{kept}");
    let vacuum = ["-t", &table, "--vacuum", "--retention", "0s", "--json"];
    let mut dry = vacuum.to_vec();
    dry.push("--dry-run");
    let listed = json(&s3.run_on(&w, "machine-b", &dry));
    assert_eq!(listed["outcome"], "would-vacuum", "{listed}");
    assert_eq!(data(&s3), all, "a dry run deleted something");
    let done = json(&s3.run_on(&w, "machine-b", &vacuum));
    assert_eq!(done["outcome"], "vacuumed", "{done}");
    let deleted: std::collections::BTreeSet<String> = done["vacuumed"]["data_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(deleted, old, "exactly the replaced files");
    let left = data(&s3);
    assert_eq!(left, &all - &old);
    assert_same_rows(
        delta_rows_in(&s3, "t", "vacuumed"),
        before,
        "after the vacuum",
    );
}

/// An abort of a Delta run in a bucket cut short on machine A keeps a compaction on
/// machine B out (B reads the job's journal in the bucket: its own working copy has none)
/// until B finishes the abort; then B compacts, and the table holds nothing of the run.
#[test]
fn a_compaction_in_a_bucket_waits_for_an_abort_cut_short_on_another_machine() {
    let Some(s3) = store("delta-abort-compact") else {
        return;
    };
    let w = Workdir::new();
    w.fixture("orders");
    let table = s3.table("t");
    let load = [
        "-t",
        &table,
        "--table-format",
        "delta",
        "-p",
        "dt",
        "--checkpoint-rows",
        "60",
        "orders",
    ];
    let out = s3
        .on(&w, "machine-a")
        .env("INGEST_FAIL_POINT", "checkpoint.committed.after:3")
        .args(load)
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    let out = s3
        .on(&w, "machine-a")
        .env("INGEST_FAIL_POINT", "abort.started.after")
        .args(["-t", &table, "--abort"])
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    let compact = ["-t", &table, "--compact", "--lock-wait", "30"];
    let out = s3.run_on(&w, "machine-b", &compact);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("abort under way") && stderr(&out).contains("--abort"),
        "{}",
        stderr(&out)
    );
    assert_code(
        &s3.run_on(
            &w,
            "machine-b",
            &["-t", &table, "--abort", "--lock-wait", "30"],
        ),
        0,
    );
    assert!(delta_rows_in(&s3, "t", "aborted").is_empty());
    assert_code(&s3.run_on(&w, "machine-b", &compact), 0);
    assert!(delta_rows_in(&s3, "t", "compacted").is_empty());
    assert_no_open_uploads(&s3, "after the abort");
}
