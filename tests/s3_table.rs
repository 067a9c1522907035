//! Tables in a bucket (`--target s3://…`) against the real store `.ci/test` starts: the
//! same rows exactly once whatever is killed when, state that lets another machine
//! finish a run, nothing visible before its checkpoint, nothing overwritten, no upload
//! left open. "Machines" are separate working copies (`INGEST_WORK_DIR`) sharing
//! nothing but the bucket.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::crash::{big_orders, Rng};
use crate::s3::{store, Store, LEASE_SECS};
use crate::util::*;

/// A finished load's summary line and JSON.
fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// The table's rows as a reader downloading it sees them.
fn rows_in(s3: &Store, table: &str) -> Vec<Row> {
    let copy = tempfile::tempdir().unwrap();
    s3.download(table, copy.path());
    table_rows(copy.path())
}

/// Data objects of the table: everything outside `_ingest/` and `_rejects/`.
fn data_objects(s3: &Store, table: &str) -> BTreeSet<String> {
    s3.list(table)
        .into_iter()
        .map(|(key, _)| key[table.len() + 1..].to_string())
        .filter(|rel| !rel.starts_with('_'))
        .collect()
}

/// The destinations the job's journal in the bucket names, by journal record: what the
/// protocol has promised at this moment.
struct JournalReader {
    seen: BTreeMap<String, BTreeSet<String>>,
}

impl JournalReader {
    fn new() -> JournalReader {
        JournalReader {
            seen: BTreeMap::new(),
        }
    }

    /// Every destination journaled so far (records are immutable: each is read once).
    fn journaled(&mut self, s3: &Store, table: &str) -> BTreeSet<String> {
        for (key, _) in s3.list(&format!("{table}/_ingest/default/journal.d")) {
            if self.seen.contains_key(&key) {
                continue;
            }
            // A record deleted between the listing and the read belongs to an old run.
            let Some(bytes) = s3.get(&key) else { continue };
            let record: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let dests = record["files"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|f| f["dest"].as_str().unwrap().to_string())
                .collect();
            self.seen.insert(key, dests);
        }
        self.seen.values().flatten().cloned().collect()
    }
}

/// Lists the table over and over while `running`: every data object it ever sees must
/// already be named by a journal record (read after the listing, so it cannot be late).
fn poll_visibility(
    s3: Arc<Store>,
    table: String,
    running: Arc<AtomicBool>,
) -> (usize, Vec<String>) {
    let mut journal = JournalReader::new();
    let (mut listings, mut early) = (0, Vec::new());
    while running.load(Ordering::Relaxed) {
        if listings > 0 {
            std::thread::sleep(POLL_PAUSE);
        }
        let visible = data_objects(&s3, &table);
        let promised = journal.journaled(&s3, &table);
        listings += 1;
        early.extend(visible.difference(&promised).cloned());
    }
    (listings, early)
}

/// A load into table `t` crashed on machine A right after its first checkpoint was
/// journaled, before anything was published; returns one file that record names.
fn crash_with_a_journaled_file(s3: &Store, w: &Workdir, inputs: &std::path::Path) -> String {
    let out = s3
        .on(w, "machine-a")
        .env("INGEST_FAIL_POINT", "checkpoint.complete.after:1")
        .args(["-t", &s3.table("t"), "-p", "dt", "--checkpoint-rows", "100"])
        .arg(inputs)
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    JournalReader::new()
        .journaled(s3, "t")
        .into_iter()
        .next()
        .expect("a journaled file")
}

/// No multipart upload under the test's prefix is open (listed through the S3 API).
pub fn assert_no_open_uploads(s3: &Store, what: &str) {
    if let Some(open) = s3.check(&["uploads", s3.prefix()]) {
        assert!(open.trim().is_empty(), "{what}: uploads left open:\n{open}");
    }
}

#[test]
fn a_table_in_a_bucket_loads_exactly_once_and_lives_only_in_the_bucket() {
    let Some(s3) = store("table-load") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let inputs: Vec<String> = walk(&orders)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let table = s3.table("t");
    let mut args = vec!["-t", &table, "-p", "dt,country", "--json"];
    args.extend(inputs.iter().map(String::as_str));

    let out = s3.on(&w, "machine-a").args(&args).output().unwrap();
    assert_code(&out, 0);
    assert_eq!(json(&out)["rows_written"], 912);
    assert_same_rows(
        rows_in(&s3, "t"),
        input_rows(std::slice::from_ref(&orders)),
        "load",
    );
    assert!(
        data_objects(&s3, "t")
            .iter()
            .all(|o| o.starts_with("dt=") && o.contains("/country=") && o.ends_with(".csv")),
        "{:?}",
        data_objects(&s3, "t")
    );
    assert!(
        s3.get("t/_ingest/default/lease").is_none(),
        "lease released"
    );
    // Nothing ingest keeps, in the bucket or in the working copy, holds the credentials.
    let kept: Vec<Vec<u8>> = s3
        .list("t")
        .into_iter()
        .map(|(key, _)| s3.get(&key).unwrap())
        .chain(
            walk(&w.path("machine-a"))
                .iter()
                .map(|f| std::fs::read(f).unwrap()),
        )
        .collect();
    for secret in s3.credentials() {
        assert!(
            !kept
                .iter()
                .any(|bytes| String::from_utf8_lossy(bytes).contains(secret)),
            "a credential leaked into the table's state"
        );
    }
    assert_no_open_uploads(&s3, "after a load");

    // The next command on the same machine keeps the manifest segments it already has
    // (the job's history is not downloaded again); one changed locally is fetched anew.
    let segment = walk(&w.path("machine-a"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .expect("a manifest segment in the working copy");
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&segment).unwrap().ino();
    let again = s3.on(&w, "machine-a").args(&args).output().unwrap();
    assert_eq!(json(&again)["outcome"], "nothing-to-load");
    assert_eq!(std::fs::metadata(&segment).unwrap().ino(), inode, "kept");
    let len = std::fs::metadata(&segment).unwrap().len() as usize;
    std::fs::write(&segment, vec![0u8; len]).unwrap();
    let again = s3.on(&w, "machine-a").args(&args).output().unwrap();
    assert_eq!(
        json(&again)["outcome"],
        "nothing-to-load",
        "{}",
        stderr(&again)
    );

    // The working copy is a cache: without it, and on another machine, the bucket's
    // manifest still knows every input.
    std::fs::remove_dir_all(w.path("machine-a")).unwrap();
    for machine in ["machine-a", "machine-b"] {
        let again = s3.on(&w, machine).args(&args).output().unwrap();
        assert_code(&again, 0);
        assert_eq!(json(&again)["outcome"], "nothing-to-load", "{machine}");
    }
    assert_eq!(rows_in(&s3, "t").len(), 912);

    // --status reads the bucket's state, from any machine, without the lease.
    let status = s3.run_on(&w, "machine-c", &["-t", &table, "--status", "--json"]);
    assert_code(&status, 0);
    let status = json(&status);
    assert_eq!(status[0]["state"], "finished", "{status}");
    assert_eq!(status[0]["inputs_loaded"], inputs.len(), "{status}");
    assert_eq!(status[0]["locked_by"], serde_json::Value::Null, "{status}");

    // --dry-run too: every input is known as loaded, on a machine that never loaded one.
    let dry = s3
        .on(&w, "machine-c")
        .args(["-t", &table, "--dry-run"])
        .args(&inputs)
        .output()
        .unwrap();
    assert_code(&dry, 0);
    let verdicts: Vec<&str> = std::str::from_utf8(&dry.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split('\t').next())
        .collect();
    assert_eq!(verdicts, vec!["loaded"; inputs.len()], "{}", stderr(&dry));

    // What a table in a bucket cannot do yet is refused up front, with exit 2.
    let out = s3
        .on(&w, "machine-b")
        .args(["-t", &table, "--mode", "overwrite-partitions", "-p", "dt"])
        .arg(&inputs[0])
        .output()
        .unwrap();
    assert_code(&out, 2);
    assert!(stderr(&out).contains("not supported"), "{}", stderr(&out));
}

#[test]
fn other_engines_read_the_table_back_csv_and_parquet() {
    let Some(s3) = store("table-read") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let expected = input_rows(std::slice::from_ref(&orders));
    let amount: f64 = expected
        .iter()
        .map(|r| r["amount"].parse::<f64>().unwrap())
        .sum();
    for (format, pyarrow_format) in [("csv", "csv"), ("parquet", "parquet")] {
        if format == "parquet" && !cfg!(feature = "parquet") {
            continue;
        }
        let table = s3.table(format);
        let out = s3
            .on(&w, "machine-a")
            .args(["-t", &table, "-p", "dt,country", "--format", format])
            .arg(&orders)
            .output()
            .unwrap();
        assert_code(&out, 0);
        let Some(read) = s3.check(&["read", &format!("{}/{format}", s3.prefix()), pyarrow_format])
        else {
            return;
        };
        let read: serde_json::Value = serde_json::from_str(&read).unwrap();
        assert_eq!(read["rows"], expected.len(), "{format}: {read}");
        // Data objects declare the type S3 gives untyped ones, so that no store guesses
        // (SeaweedFS would sniff CSV parts as text and gzip them at rest).
        let types = s3
            .check(&["types", &format!("{}/{format}", s3.prefix())])
            .unwrap_or_default();
        assert!(!types.trim().is_empty(), "{format}: no data objects listed");
        for found in types.lines() {
            assert_eq!(found, "binary/octet-stream", "{format}: {types}");
        }
        let read_amount = read["amount"].as_f64().unwrap();
        assert!(
            (read_amount - amount).abs() < 0.01,
            "{format}: pyarrow sums {read_amount}, the inputs {amount}"
        );
    }
}

/// Every fail point a load into a bucket reaches, at its first and third hit; the load
/// crashes on machine A and machine B finishes it with `--recover`, waiting out A's
/// lease. Meanwhile a lister polls the bucket: no data object before its checkpoint's
/// journal record.
#[test]
fn a_load_killed_at_every_point_on_one_machine_is_finished_on_another() {
    let Some(s3) = store("table-crash") else {
        return;
    };
    let points: Vec<String> = all_fail_points()
        .into_iter()
        // A bucket table makes no directories; the overwrite points are a Hive table's on disk.
        .filter(|p| !p.starts_with("overwrite.") && !p.starts_with("mkdir."))
        .collect();
    crash_matrix_on_two_machines(Arc::new(s3), &points, &[], &HIVE);
}

/// Polls a table (`s3`, the table's path) until `running` turns false, while loads run:
/// returns how many times it looked, and what a reader was shown that it must not see.
pub type Poll = fn(s3: Arc<Store>, table: String, running: Arc<AtomicBool>) -> (usize, Vec<String>);

/// A polling reader's rest between two reads (before each but the first: a reader
/// that skips a read halfway still rests). Without it, the reader and the store it
/// drives took most of the two cores the loads it watches (and a second test) run on;
/// with it, a reader still reads each checkpoint's state several times.
pub const POLL_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// How a test reads a table of some format in the bucket.
pub struct TableReader {
    pub poll: Poll,
    /// The table's rows as a reader sees them, its format's invariants checked
    /// (`what` names the case in a failure).
    pub rows: fn(&Store, &str, &str) -> Vec<Row>,
}

/// `rows` (input text) as table `table` in the bucket gives them back: in its contract's
/// types (`as_typed_by_contract`); unchanged for a table of text.
pub fn typed_as_in(s3: &Store, table: &str, rows: Vec<Row>) -> Vec<Row> {
    let copy = tempfile::tempdir().unwrap();
    let contract = s3
        .get(&format!("{table}/_ingest/contract.json"))
        .unwrap_or_else(|| panic!("{table} has no contract"));
    std::fs::create_dir_all(copy.path().join("_ingest")).unwrap();
    std::fs::write(copy.path().join("_ingest/contract.json"), contract).unwrap();
    as_typed_by_contract(copy.path(), rows)
}

/// A Hive table: readers list it, and see every data object.
const HIVE: TableReader = TableReader {
    poll: poll_visibility,
    rows: |s3, table, _| rows_in(s3, table),
};

/// The crash matrix on a table in the bucket: for every point in `points`, at hits 1
/// and 3, machine A's load (with `extra` arguments) crashes there and machine B, sharing
/// nothing but the bucket, finishes it; a reader polling throughout never sees what it
/// must not, the table then holds the orders fixture exactly once, and a load again
/// finds nothing to load.
pub fn crash_matrix_on_two_machines(
    s3: Arc<Store>,
    points: &[String],
    extra: &[&str],
    reader: &TableReader,
) {
    let inputs = s3.clone();
    crash_matrix_reading_from(&inputs, s3, points, extra, reader);
}

/// [`crash_matrix_on_two_machines`] with the inputs in `inputs` (a table bucket holds
/// objects only in its tables' own directories).
pub fn crash_matrix_reading_from(
    inputs: &Store,
    s3: Arc<Store>,
    points: &[String],
    extra: &[&str],
    reader: &TableReader,
) {
    let fixtures = Workdir::new();
    let orders = fixtures.fixture("orders");
    inputs.put_dir(&orders, "in");
    let inputs = inputs.url("in");
    let expected = input_rows(&[orders]);
    let mut crashes = 0;
    for point in points {
        for hit in [1, 3] {
            let rel = format!("t-{}-{hit}", point.replace('.', "-"));
            let table = s3.table(&rel);
            // Four checkpoints of the fixture's 912 rows: the third hit of a point
            // reached once per checkpoint is still inside the load.
            let mut args = vec!["-t", &table, "-p", "dt", "--checkpoint-rows", "300"];
            args.extend(extra);
            args.push(&inputs);
            let w = Workdir::new();
            let running = Arc::new(AtomicBool::new(true));
            let lister = {
                let (s3, rel, running) = (s3.clone(), rel.clone(), running.clone());
                let poll = reader.poll;
                std::thread::spawn(move || poll(s3, rel, running))
            };
            let spec = format!("{point}:{hit}");
            let out = s3
                .on(&w, "machine-a")
                .env("INGEST_FAIL_POINT", &spec)
                .args(&args)
                .output()
                .unwrap();
            let crashed_here = crashed(&out);
            if !crashed_here {
                assert_code(&out, 0);
                assert!(hit > 1, "{spec}: never reached: {}", stderr(&out));
            }
            crashes += usize::from(crashed_here);
            let recovered = s3.run_on(
                &w,
                "machine-b",
                &["-t", &table, "--recover", "--lock-wait", "30"],
            );
            assert_code(&recovered, 0);
            if stderr(&recovered).contains("nothing to recover") {
                // The crash came before the run's first record reached the bucket, or
                // after its last: the load itself, run again, finishes the job.
                assert_code(
                    &s3.on(&w, "machine-b")
                        .args(&args)
                        .arg("--lock-wait")
                        .arg("30")
                        .output()
                        .unwrap(),
                    0,
                );
            }
            running.store(false, Ordering::Relaxed);
            let (listings, early) = lister.join().unwrap();
            assert!(listings > 0, "{spec}: the lister never listed");
            assert!(early.is_empty(), "{spec}: shown too early: {early:?}");
            let want = typed_as_in(&s3, &rel, expected.clone());
            assert_same_rows((reader.rows)(&s3, &rel, &spec), want, &spec);
            let again = s3
                .on(&w, "machine-a")
                .args(&args)
                .args(["--lock-wait", "30", "--json"])
                .output()
                .unwrap();
            assert_code(&again, 0);
            assert_eq!(json(&again)["outcome"], "nothing-to-load", "{spec}");
        }
    }
    assert!(crashes >= points.len(), "only {crashes} crashes");
    assert_no_open_uploads(&s3, "after the crash matrix");
}

#[test]
fn an_object_already_at_a_final_key_is_never_replaced() {
    let Some(s3) = store("table-clobber") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let table = s3.table("t");
    let dest = crash_with_a_journaled_file(&s3, &w, &orders);
    assert!(data_objects(&s3, "t").is_empty(), "nothing published yet");
    let intruder = b"someone else's object\n";
    s3.put(&format!("t/{dest}"), intruder.to_vec());

    let out = s3.run_on(
        &w,
        "machine-b",
        &["-t", &table, "--recover", "--lock-wait", "30"],
    );
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("already exists") && stderr(&out).contains("left untouched"),
        "{}",
        stderr(&out)
    );
    assert_eq!(s3.get(&format!("t/{dest}")).unwrap(), intruder);

    // The refused upload stays open, named by the journal: once the intruder is moved
    // aside, the same recovery publishes the run's own file and finishes.
    s3.delete(&format!("t/{dest}"));
    let out = s3.run_on(
        &w,
        "machine-b",
        &["-t", &table, "--recover", "--lock-wait", "30"],
    );
    assert_code(&out, 0);
    assert_same_rows(
        rows_in(&s3, "t"),
        input_rows(&[orders]),
        "after the intruder left",
    );
    assert_no_open_uploads(&s3, "after recovery");
}

#[test]
fn of_two_processes_racing_for_a_lease_one_loads_and_the_other_exits_75() {
    let Some(s3) = store("table-lease") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let table = s3.table("t");

    // A live lease: another holder, named in the message; exit 75 after --lock-wait.
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    let live = format!(r#"{{"holder":"pid 1 on elsewhere","expires_ms":{far}}}"#);
    s3.put("t/_ingest/default/lease", live.clone());
    let started = Instant::now();
    let out = s3
        .on(&w, "machine-a")
        .args(["-t", &table, "--lock-wait", "1"])
        .arg(&orders)
        .output()
        .unwrap();
    assert_code(&out, 75);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(
        stderr(&out).contains("pid 1 on elsewhere"),
        "{}",
        stderr(&out)
    );
    assert!(data_objects(&s3, "t").is_empty());
    let status = s3.run_on(&w, "machine-b", &["-t", &table, "--status", "--json"]);
    let status = json(&status);
    assert!(
        status[0]["locked_by"]
            .as_str()
            .is_some_and(|h| h.contains("pid 1 on elsewhere")),
        "--status names the live lease's holder: {status}"
    );

    // An expired one (its holder crashed): taken over.
    s3.put(
        "t/_ingest/default/lease",
        r#"{"holder":"pid 1 on elsewhere","expires_ms":1}"#,
    );
    let out = s3
        .on(&w, "machine-a")
        .args(["-t", &table, "--json"])
        .arg(&orders)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert_eq!(json(&out)["rows_written"], 912);

    // Two loads at once from two machines, new inputs: exactly one loads them; the other
    // exits 75, or (if it came second) finds them loaded.
    let more = w.write(
        "more/a.csv",
        "order_id,dt,ts,customer,email,country,amount,currency,note\n\
         9001,2026-12-01,2026-12-01T08:00:00Z,Ana,ana@example.com,FR,1.50,EUR,\n",
    );
    let spawn = |machine: &str| {
        s3.on(&w, machine)
            .args(["-t", &table, "--json", "--checkpoint-rows", "1"])
            .arg(&more)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("machine-a"), spawn("machine-b"));
    let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let loaded = outs
        .iter()
        .filter(|o| o.status.code() == Some(0) && json(o)["rows_written"] == 1)
        .count();
    assert_eq!(
        loaded,
        1,
        "{:?}",
        outs.iter().map(stderr).collect::<Vec<_>>()
    );
    for out in &outs {
        let code = out.status.code();
        assert!(
            code == Some(0) || code == Some(75),
            "{code:?}: {}",
            stderr(out)
        );
    }
    assert_eq!(rows_in(&s3, "t").len(), 913);
}

/// Loads of two jobs started at once on a new table in the bucket each record the
/// table's contract: with the same terms both load (the second takes the first's
/// record), with different ones exactly one does (whether they raced or not), and the
/// table keeps the winner's terms.
#[test]
fn first_loads_of_two_jobs_at_once_share_an_equal_contract_and_refuse_a_different_one() {
    let Some(s3) = store("table-contract-race") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    for round in 0..4 {
        for same in [true, false] {
            let table = s3.table(&format!("t-{round}-{same}"));
            let partitioning = |job: &str| if same || job == "a" { "dt" } else { "country" };
            let outs: Vec<Output> = std::thread::scope(|scope| {
                let handles: Vec<_> = ["a", "b"]
                    .map(|job| {
                        let (s3, w, table, orders) = (&s3, &w, &table, &orders);
                        scope.spawn(move || {
                            // Both jobs take the same inputs on purpose (--reload): a
                            // job that starts after the other finished would refuse them.
                            s3.on(w, &format!("machine-{job}"))
                                .args(["-t", table, "--job", job, "--reload"])
                                .args(["-p", partitioning(job)])
                                .arg(orders)
                                .output()
                                .unwrap()
                        })
                    })
                    .into_iter()
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let loaded = outs.iter().filter(|o| o.status.success()).count();
            let what = format!("round {round}, same terms: {same}");
            if same {
                assert_eq!(loaded, 2, "{what}: {}", stderr(&outs[1]));
            } else {
                assert_eq!(loaded, 1, "{what}: both loaded");
                let loser = outs.iter().find(|o| !o.status.success()).unwrap();
                assert_code(loser, 1);
                assert!(
                    stderr(loser).contains("contract"),
                    "{what}: {}",
                    stderr(loser)
                );
            }
        }
    }
}

#[test]
fn an_interrupted_run_in_a_bucket_is_aborted_from_another_machine() {
    let Some(s3) = store("table-abort") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let table = s3.table("t");
    let args = ["-t", &table, "-p", "dt", "--checkpoint-rows", "100"];
    let out = s3
        .on(&w, "machine-a")
        .env("INGEST_FAIL_POINT", "commit.mid:4")
        .args(args)
        .arg(&orders)
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    assert!(!data_objects(&s3, "t").is_empty());
    // Once the crashed holder's lease has run out, --status on a third machine shows
    // the interrupted run and what --abort would remove.
    std::thread::sleep(Duration::from_millis(1500));
    let status = s3.run_on(&w, "machine-c", &["-t", &table, "--status", "--json"]);
    assert_code(&status, 0);
    let status = json(&status);
    assert_eq!(status[0]["state"], "interrupted", "{status}");
    assert!(
        !status[0]["abort_would"].as_array().unwrap().is_empty(),
        "{status}"
    );

    let published = data_objects(&s3, "t");
    let abort_would = status[0]["abort_would"].as_array().unwrap();
    assert_eq!(
        abort_would
            .iter()
            .filter(|s| s.as_str().unwrap().starts_with("  "))
            .count(),
        published.len(),
        "--abort would remove exactly the published files: {status}"
    );
    let published_rows = rows_in(&s3, "t").len();
    let out = s3.run_on(
        &w,
        "machine-b",
        &["-t", &table, "--abort", "--lock-wait", "30", "--json"],
    );
    assert_code(&out, 0);
    let summary = json(&out);
    assert_eq!(summary["outcome"], "aborted");
    assert_eq!(summary["files_written"], published.len(), "{summary}");
    assert_eq!(summary["rows_written"], published_rows, "{summary}");
    assert!(
        data_objects(&s3, "t").is_empty(),
        "{:?}",
        data_objects(&s3, "t")
    );
    assert_no_open_uploads(&s3, "after --abort");

    // The inputs count as never loaded: the next load takes them all, once.
    let out = s3
        .on(&w, "machine-a")
        .args(args)
        .arg(&orders)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert_same_rows(
        rows_in(&s3, "t"),
        input_rows(&[orders]),
        "after abort and load",
    );
}

/// The operator's loop against a bucket, killed at random: load on one machine, recover
/// on the other, each attempt `kill -9`ed at a random moment, until a load finishes;
/// then the table holds every row once, no object was ever visible before its journal
/// record (a lister polls throughout), and no upload is left open.
#[test]
fn random_sigkill_of_loads_and_recoveries_on_two_machines_loses_and_duplicates_nothing() {
    let Some(s3) = store("table-kill") else {
        return;
    };
    kill_loop_on_two_machines(Arc::new(s3), &[], &HIVE);
}

/// Two rounds of 20,000 orders loaded (with `extra` arguments) into a table in the
/// bucket, with loads on machine A and recoveries on machine B killed at random
/// moments until a load finishes; a reader polls throughout, and each table then holds
/// every row exactly once. (Two, not more: every format's loop runs in each CI run, a new
/// seed each time, and the kills at random moments are what is sampled.)
pub fn kill_loop_on_two_machines(s3: Arc<Store>, extra: &[&str], reader: &TableReader) {
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let mut kills = 0;
    for round in 0..2 {
        let w = Workdir::new();
        // Ten checkpoints a load: kills land between commits, in them and in uploads.
        big_orders(&w, 10_000, &mut Rng(seed + round));
        let rel = format!("t{round}");
        let table = s3.table(&rel);
        let probe = s3.table(&format!("{rel}-probe"));
        let load_into = |table| {
            let mut args = vec!["-t", table, "-p", "dt", "--checkpoint-rows", "1000"];
            args.extend(extra);
            args.extend(["--lock-wait", "10", "orders"]);
            args
        };
        let load = load_into(&table);
        let recover = ["-t", &table, "--recover", "--lock-wait", "10"];
        // One clean run of the same size elsewhere tells how long a whole load takes.
        let clock = Instant::now();
        assert_code(
            &s3.on(&w, "probe").args(load_into(&probe)).output().unwrap(),
            0,
        );
        let full = clock.elapsed().as_millis() as u64 + 1;

        let running = Arc::new(AtomicBool::new(true));
        let lister = {
            let (s3, rel, running) = (s3.clone(), rel.clone(), running.clone());
            let poll = reader.poll;
            std::thread::spawn(move || poll(s3, rel, running))
        };
        let mut landed = false;
        let mut tried = Vec::new();
        let mut killed = false;
        for attempt in 0..40 {
            let (machine, args): (&str, &[&str]) = if attempt % 2 == 0 {
                ("machine-a", &load)
            } else {
                ("machine-b", &recover)
            };
            // An attempt after a kill first waits out the dead holder's lease: its kill
            // comes that much later, or on a fast machine no attempt would outlive the
            // wait (40 in a row did not, with runs of 0.6 s and a lease of 1 s).
            let wait = if killed { LEASE_SECS * 1000 } else { 0 };
            let delay = wait + crate::crash::first_kill_delay(&mut rng, attempt, full);
            let out;
            (out, killed) = run_killed_at(s3.on(&w, machine).args(args), delay);
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
            "seed {seed}: no load finished in 40 attempts, a whole load taking {full} ms \
             (delay ms, exit code): {tried:?}"
        );
        assert_code(&s3.on(&w, "machine-b").args(recover).output().unwrap(), 0);
        running.store(false, Ordering::Relaxed);
        let (listings, early) = lister.join().unwrap();
        assert!(listings > 0);
        assert!(early.is_empty(), "seed {seed}: shown too early: {early:?}");
        let what = format!("seed {seed}, round {round}");
        assert_same_rows(
            (reader.rows)(&s3, &rel, &what),
            typed_as_in(&s3, &rel, input_rows(&[w.path("orders")])),
            &what,
        );
    }
    assert_no_open_uploads(&s3, &format!("seed {seed}"));
    eprintln!("random SIGKILL on a bucket: seed {seed}, {kills} kills landed mid-run");
    assert!(kills >= 2, "seed {seed}: only {kills} kills landed mid-run");
}

/// Runs `cmd`, killing it (SIGKILL) if it still runs after `ms` milliseconds; returns
/// its output and whether the kill landed.
pub fn run_killed_at(cmd: &mut std::process::Command, ms: u64) -> (Output, bool) {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(ms));
    let killed = child.try_wait().unwrap().is_none();
    if killed {
        child.kill().unwrap();
    }
    (child.wait_with_output().unwrap(), killed)
}

/// A load or recovery of a kill loop ended as one may: finished, killed, stopped
/// saying to recover (1), or waiting out another's lease (75).
#[track_caller]
pub fn assert_killed_or_clean(out: &Output, seed: u64) {
    let code = out.status.code();
    assert!(
        out.status.success() || crashed(out) || code == Some(1) || code == Some(75),
        "seed {seed}: {}",
        stderr(out)
    );
    if code == Some(1) {
        assert!(
            stderr(out).contains("--recover"),
            "seed {seed}: {}",
            stderr(out)
        );
    }
}

/// A part file larger than an upload part (8 MiB) goes up in several parts, sent
/// concurrently, and reads back byte for byte in order.
#[test]
fn a_file_larger_than_a_part_is_uploaded_in_parts_and_reads_back_whole() {
    let Some(s3) = store("table-parts") else {
        return;
    };
    let w = Workdir::new();
    big_orders(&w, 300_000, &mut Rng(7));
    let table = s3.table("t");
    let out = s3.run_on(
        &w,
        "machine-a",
        &["-t", &table, "--checkpoint-rows", "10000000", "orders"],
    );
    assert_code(&out, 0);
    let objects: Vec<(String, u64)> = s3
        .list("t")
        .into_iter()
        .filter(|(key, _)| !key.contains("/_"))
        .collect();
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert!(
        objects[0].1 > 16 << 20,
        "{objects:?}: want at least three parts"
    );
    assert_same_rows(rows_in(&s3, "t"), input_rows(&[w.path("orders")]), "parts");
}

/// `--abort` removes only what the run published: an object another writer put at one
/// of the run's journaled keys (with other bytes) stays.
#[test]
fn an_abort_leaves_another_writers_object_at_a_journaled_key() {
    let Some(s3) = store("table-abort-foreign") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let table = s3.table("t");
    let dest = crash_with_a_journaled_file(&s3, &w, &orders);
    let foreign = b"order_id\n1\n".to_vec();
    s3.put(&format!("t/{dest}"), foreign.clone());
    let out = s3.run_on(
        &w,
        "machine-b",
        &["-t", &table, "--abort", "--lock-wait", "30", "--json"],
    );
    assert_code(&out, 0);
    assert_eq!(json(&out)["files_written"], 0);
    assert!(stderr(&out).contains("left alone"), "{}", stderr(&out));
    assert_eq!(s3.get(&format!("t/{dest}")).unwrap(), foreign);
    assert_no_open_uploads(&s3, "after --abort");
}

/// A crash while a new run deletes the previous run's journal records leaves some of
/// them behind, below the new run's first record: the journal read back is the new
/// run's alone.
#[test]
fn old_journal_records_left_below_a_new_run_are_not_part_of_it() {
    let Some(s3) = store("table-old-records") else {
        return;
    };
    let w = Workdir::new();
    let table = s3.table("t");
    let header = "order_id,dt,ts,customer,email,country,amount,currency,note\n";
    let first = w.write(
        "in/a.csv",
        format!("{header}1,2026-12-01,t,c,e,FR,1.00,EUR,\n"),
    );
    let out = s3
        .on(&w, "machine-a")
        .arg("-t")
        .arg(&table)
        .arg(&first)
        .output()
        .unwrap();
    assert_code(&out, 0);
    let old: Vec<(String, Vec<u8>)> = s3
        .list("t/_ingest/default/journal.d")
        .into_iter()
        .map(|(key, _)| {
            let bytes = s3.get(&key).unwrap();
            (key, bytes)
        })
        .collect();
    assert!(!old.is_empty());
    // The second run, killed after its first record; then the first run's records are
    // put back, as a crash in the middle of deleting them would have left them.
    let second = w.write(
        "in/b.csv",
        format!("{header}2,2026-12-02,t,c,e,DE,2.00,EUR,\n"),
    );
    let out = s3
        .on(&w, "machine-a")
        .env("INGEST_FAIL_POINT", "run.started.after")
        .arg("-t")
        .arg(&table)
        .arg(&second)
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    for (key, bytes) in &old {
        s3.put(key, bytes.clone());
    }
    let out = s3.run_on(
        &w,
        "machine-b",
        &["-t", &table, "--recover", "--lock-wait", "30", "--json"],
    );
    assert_code(&out, 0);
    assert_eq!(json(&out)["rows_written"], 1, "{}", stderr(&out));
    assert_eq!(rows_in(&s3, "t").len(), 2);
}

/// A crash after a checkpoint's files are uploaded and before its journal record leaves
/// uploads that nothing names yet; `--recover` finds them in the store and aborts them.
#[test]
fn uploads_of_a_checkpoint_never_journaled_are_aborted_by_recover() {
    let Some(s3) = store("table-unjournaled") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let table = s3.table("t");
    let out = s3
        .on(&w, "machine-a")
        .env("INGEST_FAIL_POINT", "sink.precommit.after:2")
        .args(["-t", &table, "-p", "dt", "--checkpoint-rows", "100"])
        .arg(&orders)
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    if let Some(open) = s3.check(&["uploads", s3.prefix()]) {
        assert!(
            !open.trim().is_empty(),
            "the crash left no upload to clean up"
        );
    }
    let out = s3.run_on(
        &w,
        "machine-b",
        &["-t", &table, "--recover", "--lock-wait", "30"],
    );
    assert_code(&out, 0);
    assert_same_rows(rows_in(&s3, "t"), input_rows(&[orders]), "recovered");
    assert_no_open_uploads(&s3, "after --recover");
}

/// A holder whose lease another process took (it stalled past it, say) stops before
/// its next step instead of writing beside the new holder; the run stays recoverable.
#[test]
fn a_load_that_loses_its_lease_stops_and_stays_recoverable() {
    let Some(s3) = store("table-lost-lease") else {
        return;
    };
    let w = Workdir::new();
    // 25 checkpoints: the load is still running when its lease is taken.
    big_orders(&w, 50_000, &mut Rng(11));
    let table = s3.table("t");
    let load = s3
        .on(&w, "machine-a")
        .args([
            "-t",
            &table,
            "-p",
            "dt",
            "--checkpoint-rows",
            "2000",
            "orders",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the load holds the lease, another process replaces it (as a taker would once
    // it had expired).
    let started = Instant::now();
    while s3.get("t/_ingest/default/lease").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the load never took its lease"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    s3.put(
        "t/_ingest/default/lease",
        format!(r#"{{"holder":"pid 2 on elsewhere","expires_ms":{far}}}"#),
    );
    let out = load.wait_with_output().unwrap();
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("lost the job's lease"),
        "{}",
        stderr(&out)
    );

    // The other holder goes away: recovery finishes the run, every row once.
    s3.delete("t/_ingest/default/lease");
    let out = s3.run_on(
        &w,
        "machine-b",
        &["-t", &table, "--recover", "--lock-wait", "30"],
    );
    assert_code(&out, 0);
    assert_same_rows(
        rows_in(&s3, "t"),
        input_rows(&[w.path("orders")]),
        "after the lost lease",
    );
}

#[test]
fn a_fresh_machine_reads_the_job_history_in_the_bucket_not_a_download_of_it() {
    let Some(s3) = store("table-paged") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let mut inputs: Vec<String> = walk(&orders)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let table = s3.table("t");
    let load = |machine: &str, inputs: &[String]| {
        let mut args = vec!["-t", table.as_str(), "-p", "country", "--json"];
        args.extend(inputs.iter().map(String::as_str));
        s3.on(&w, machine).args(&args).output().unwrap()
    };
    assert_code(&load("machine-a", &inputs), 0);

    // A machine that never saw the job: the history stays in the bucket, and its
    // lookups still know every loaded input, by path and by content.
    let new = w.path("new.csv");
    let header = "order_id,dt,ts,customer,email,country,amount,currency,note";
    let row =
        |id: u32| format!("{id},2026-11-28,2026-11-28T01:00:00Z,Kim,k@example.com,NZ,1.50,NZD,\n");
    std::fs::write(&new, format!("{header}\n{}{}", row(9001), row(9002))).unwrap();
    inputs.push(new.display().to_string());
    let out = load("machine-b", &inputs);
    assert_code(&out, 0);
    assert_eq!(json(&out)["rows_written"], 2, "{}", stderr(&out));
    assert_eq!(
        json(&out)["inputs_skipped"],
        inputs.len() - 1,
        "{}",
        stderr(&out)
    );
    let references = walk(&w.path("machine-b"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .filter(|p| std::fs::read(p).unwrap().starts_with(b"INGESTR"))
        .count();
    assert!(references > 0, "machine B downloaded the history");
    let copy = w.path("renamed.csv");
    std::fs::copy(&new, &copy).unwrap();
    let out = s3
        .on(&w, "machine-c")
        .args(["-t", &table, "-p", "country"])
        .arg(&copy)
        .output()
        .unwrap();
    assert_code(&out, 1);
    assert!(stderr(&out).contains("same content as"), "{}", stderr(&out));

    // Folds on the fresh machine merge what they only reference; the merged history is
    // whole, as a third machine sees it.
    for n in 0..3 {
        let more = w.path(&format!("more-{n}.csv"));
        std::fs::write(&more, format!("{header}\n{}", row(9100 + n))).unwrap();
        inputs.push(more.display().to_string());
        assert_code(&load("machine-b", &inputs), 0);
    }
    let out = load("machine-d", &inputs);
    assert_eq!(json(&out)["outcome"], "nothing-to-load", "{}", stderr(&out));
    let status = s3.run_on(&w, "machine-d", &["-t", &table, "--status", "--json"]);
    assert_eq!(
        json(&status)[0]["inputs_loaded"],
        inputs.len(),
        "{}",
        stderr(&status)
    );
    assert_eq!(rows_in(&s3, "t").len(), 912 + 5);
}

/// A holder killed on this host leaves a lease that has not run out; `--recover` here
/// sees that its process is gone and takes the lease at once, and its message, when it
/// does wait (a holder elsewhere), names the job once.
#[test]
fn recover_on_the_host_of_a_killed_holder_takes_its_lease_at_once() {
    let Some(s3) = store("table-dead-holder") else {
        return;
    };
    let w = Workdir::new();
    let table = s3.table("t");
    let out = s3
        .on(&w, "machine-a")
        .env("INGEST_LEASE_SECS", "600")
        .env("INGEST_FAIL_POINT", "checkpoint.complete.after:1")
        .args(["-t", &table, "-p", "dt", "--checkpoint-rows", "100"])
        .arg(w.fixture("orders"))
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    let lease = s3
        .get("t/_ingest/default/lease")
        .expect("the killed holder's lease is left behind");
    assert!(
        String::from_utf8_lossy(&lease).contains("start_ticks"),
        "the lease names its process precisely"
    );

    let started = Instant::now();
    let out = s3
        .on(&w, "machine-a")
        .env("INGEST_LEASE_SECS", "600")
        .args(["-t", &table, "--recover", "--json"])
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "recovery waited {:?} for a dead holder's 600 s lease",
        started.elapsed()
    );
    assert_eq!(json(&out)["outcome"], "recovered");
    assert_eq!(rows_in(&s3, "t").len(), 912);

    // A live holder on another host is waited for; the message names the job once.
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    s3.put(
        "t/_ingest/default/lease",
        format!(r#"{{"holder":"pid 1 on elsewhere","expires_ms":{far}}}"#),
    );
    let out = s3.run_on(&w, "machine-a", &["-t", &table, "--recover"]);
    assert_code(&out, 75);
    assert_eq!(
        stderr(&out).matches("job \"default\"").count(),
        1,
        "{}",
        stderr(&out)
    );
}

/// An http endpoint without `AWS_ALLOW_HTTP` is refused up front, naming the setting
/// (the client's own error is "HTTP error: builder error"). No store is contacted.
#[test]
fn an_http_endpoint_without_allow_http_names_the_setting() {
    let w = Workdir::new();
    let mut commands = vec![vec!["-t", "s3://bucket/t"]];
    if cfg!(feature = "delta") {
        commands.push(vec!["-t", "s3://bucket/t", "--table-format", "delta"]);
    }
    for args in commands {
        let out = w
            .cmd()
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env_remove("AWS_ALLOW_HTTP")
            .env("AWS_ACCESS_KEY_ID", "k")
            .env("AWS_SECRET_ACCESS_KEY", "s")
            .env("AWS_REGION", "us-east-1")
            .args(&args)
            .arg(w.fixture("orders"))
            .output()
            .unwrap();
        assert_code(&out, 1);
        assert!(
            stderr(&out).contains("AWS_ALLOW_HTTP=true"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
