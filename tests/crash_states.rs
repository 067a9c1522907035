//! Power cuts at every point of a load and of a recovery, under the strict persistence
//! model (`explorer/`): whatever a power cut leaves, `--recover` never stops on it, and
//! `--recover` then the same load leave every input row in the table exactly once, no
//! visible file torn; a power cut after the load said "loaded" loses nothing at all.
//!
//! CI explores at most `EXPLORE_STATES` distinct states per history (default 1,000: all
//! of them for these histories) plus `EXPLORE_RANDOM` random ones per point (default 2);
//! `.ci/explore` runs thousands.
//! `EXPLORE_BIN` points it at another build, `EXPLORE_SEED` replays a sample,
//! `EXPLORE_POSITIONS=N` makes states at N points spread over a history (and around
//! each sync) instead of after every step: for the load over thousands of partitions,
//! `EXPLORE_PARTITIONS=4000 EXPLORE_POSITIONS=200 EXPLORE_STATES=100`.

use std::path::Path;

use crate::explorer::{self, CrashState, Figures, History, Invocation};
use crate::util::*;

const LOAD: &[&str] = &[
    "-t",
    "t",
    "-p",
    "dt",
    "--dedupe-key",
    "order_id",
    "--checkpoint-rows",
    "250",
    "orders",
];

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn expected(w: &Workdir) -> Vec<Row> {
    dedupe(input_rows(&[w.path("orders")]), "order_id")
}

/// The table's rows, or why they cannot be read (a torn visible file).
fn rows_of(table: &Path) -> Result<Vec<Row>, String> {
    let table = table.to_path_buf();
    std::panic::catch_unwind(move || table_rows(&table))
        .map_err(|_| "a visible file of the table is torn or unreadable".to_string())
}

fn same(mut actual: Vec<Row>, mut expected: Vec<Row>) -> Result<(), String> {
    actual.sort();
    expected.sort();
    if actual == expected {
        return Ok(());
    }
    let missing = expected.iter().filter(|r| !actual.contains(r)).count();
    let extra = actual.iter().filter(|r| !expected.contains(r)).count();
    Err(format!(
        "{} rows, expected {}: {missing} missing, {extra} unexpected",
        actual.len(),
        expected.len()
    ))
}

/// What the history's last command promised once it said it was done: the table's rows
/// from then on, whatever a power cut takes.
struct Promise<'a> {
    rows: &'a [Row],
    what: &'a str,
}

/// How a check reads the table's rows: its data files (a Hive table), or what its log
/// or catalog names.
type Reader<'a> = &'a dyn Fn(&Path) -> Result<Vec<Row>, String>;

/// The check every crash state must pass: what the last command promised holds if it
/// finished, and `load` (the history's command) leaves `expected` once `--recover` and
/// `load` again have run; the table's rows as `read` gives them.
fn check(
    w: &Workdir,
    history: &History,
    state: &CrashState,
    (load, expected): (&[&str], &[Row]),
    promise: &Promise,
    read: Reader,
) -> Result<(), String> {
    let rows_of = read;
    let table = w.path("t");
    let acknowledged =
        state.at == history.steps.len() && history.statuses.last().is_some_and(|s| s.success());
    if acknowledged {
        same(rows_of(&table)?, promise.rows.to_vec())
            .map_err(|e| format!("after {} said it was done: {e}", promise.what))?;
    }
    let recovered = w.run(&["-t", "t", "--recover"]);
    if recovered.status.code() != Some(0) {
        return Err(format!(
            "--recover: {:?}: {}",
            recovered.status,
            stderr(&recovered)
        ));
    }
    let loaded = w.run(load);
    if loaded.status.code() != Some(0) {
        return Err(format!(
            "the load again: {:?}: {}",
            loaded.status,
            stderr(&loaded)
        ));
    }
    same(rows_of(&table)?, expected.to_vec())
}

fn explore(
    w: &Workdir,
    history: &History,
    (load, expected): (&[&str], &[Row]),
    promise: &Promise,
    what: &str,
) -> Figures {
    explore_with(
        w,
        history,
        (load, expected),
        promise,
        what,
        (&rows_of, 2, 1000),
    )
}

/// [`explore`], reading the table with `read`, with `random` states of random fates at
/// each step beside the one where everything not durable is lost (`EXPLORE_RANDOM`
/// overrides it), checking at most `states` of them (`EXPLORE_STATES` overrides it).
fn explore_with(
    w: &Workdir,
    history: &History,
    (load, expected): (&[&str], &[Row]),
    promise: &Promise,
    what: &str,
    (read, random, states): (Reader, u64, u64),
) -> Figures {
    let seed = setting("EXPLORE_SEED", clock_seed());
    let figures = explorer::explore(
        w.dir.path(),
        history,
        setting("EXPLORE_RANDOM", random) as usize,
        setting("EXPLORE_STATES", states) as usize,
        seed,
        |state| check(w, history, state, (load, expected), promise, read),
    );
    eprintln!(
        "{what}: {} steps, {} crash states made, {} distinct, {} checked, {} failed (seed {seed})",
        figures.steps,
        figures.made,
        figures.distinct,
        figures.checked,
        figures.failed.len()
    );
    assert!(figures.checked > 0 && figures.steps > 0);
    assert!(
        figures.failed.is_empty(),
        "{what}: {} of {} crash states failed (EXPLORE_SEED={seed}); the first:\n{}",
        figures.failed.len(),
        figures.checked,
        figures
            .failed
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    figures
}

#[test]
fn power_cuts_during_a_load_lose_no_row() {
    let history = explored_load(&[], "a load");
    assert!(!history.steps.iter().any(|s| s.what.contains("syncfs")));
}

/// The history of `load` (run with `env` set) in `w`, which must succeed.
fn recorded_load(w: &Workdir, load: &[&str], env: &[(&str, &str)]) -> History {
    let history = explorer::record(
        w.dir.path(),
        "t",
        &[Invocation {
            program: None,
            args: load,
            env,
        }],
    );
    assert!(history.statuses[0].success(), "{}", history.stderrs[0]);
    history
}

/// The `syncfs` calls of `history`.
fn syncfs_calls(history: &History) -> usize {
    history
        .steps
        .iter()
        .filter(|s| s.what.contains("syncfs"))
        .count()
}

/// Whether `history` makes a directory named `name` (its last path component).
fn made_dir(history: &History, name: &str) -> bool {
    let tail = format!("/{name}\"");
    history
        .steps
        .iter()
        .any(|s| s.what.starts_with("mkdir") && s.what.contains(&tail))
}

/// The numbers of the part files `history` renames into the table (`…/part-…-SEQ.csv`).
fn published_seqs(history: &History) -> std::collections::BTreeSet<u64> {
    history
        .steps
        .iter()
        .flat_map(|s| s.what.split('"'))
        .filter_map(|arg| {
            let stem = arg.strip_suffix(".csv")?;
            stem.rsplit_once("/part-")?
                .1
                .rsplit('-')
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Records the load with `env` set and explores power cuts anywhere in it.
fn explored_load(env: &[(&str, &str)], what: &str) -> History {
    let w = Workdir::new();
    w.fixture("orders");
    let history = recorded_load(&w, LOAD, env);
    let expected = expected(&w);
    let promise = Promise {
        rows: &expected,
        what: "the load",
    };
    explore(&w, &history, (LOAD, &expected), &promise, what);
    history
}

/// Every step that makes files durable takes one `syncfs` of the table's filesystem
/// instead of an fsync of each file and directory (what a checkpoint of hundreds of
/// partitions does): the staged files, their staging area and the published partitions
/// are durable when the journal relies on them all the same.
#[test]
fn power_cuts_during_a_load_made_durable_by_syncfs_lose_no_row() {
    let history = explored_load(&[("INGEST_SYNCFS_FROM", "1")], "a load with syncfs");
    let syncfs = syncfs_calls(&history);
    assert!(
        syncfs >= 4,
        "{syncfs} syncfs calls: the bulk path was not taken"
    );
}

/// A load over many partitions: `EXPLORE_PARTITIONS` (140 by default; thousands by
/// hand, issue 44) in two checkpoints of one row each, on two threads: past the first 50
/// partitions of a checkpoint (`INGEST_SPREAD_FROM`; 256 without it) a second sink
/// stages files in a directory of its own beside the first's, as a load over thousands
/// does, 70 files each: past the 64 from which a step takes one `syncfs` (no override:
/// the real threshold). Its commit makes the partition directories side by side before
/// renaming into them (`create_dirs_durable`).
#[test]
fn power_cuts_during_a_load_over_many_partitions_lose_no_row() {
    let partitions = setting("EXPLORE_PARTITIONS", 140);
    two_sinks_load(partitions, &[("INGEST_SPREAD_FROM", "50")], true);
}

/// Two sinks each staging fewer files than a `syncfs` is worth (30 partitions, spread
/// from the 10th): each makes its own staging directory durable with fsyncs, of the
/// directory and of the run's directory that names it, before the journal names a file
/// in it.
#[test]
fn power_cuts_during_a_load_over_two_sinks_made_durable_by_fsyncs_lose_no_row() {
    two_sinks_load(
        30,
        &[
            ("INGEST_SPREAD_FROM", "10"),
            ("INGEST_SYNCFS_FROM", "1000000"),
        ],
        false,
    );
}

/// A load over `partitions` partitions in two checkpoints of one row each on two sinks
/// (`env` sets where the second takes partitions and where `syncfs` takes over), every
/// crash state of it explored: `bulk`, whether its steps were made durable by `syncfs`.
fn two_sinks_load(partitions: u64, env: &[(&str, &str)], bulk: bool) {
    let w = wide_input(partitions);
    let rows = partitions.to_string();
    let load = &wide_load(&rows);
    let history = recorded_load(&w, load, env);
    // Each sink's preCommit and each commit.
    let syncfs = syncfs_calls(&history);
    if bulk {
        assert!(
            syncfs >= 6,
            "{syncfs} syncfs calls: the bulk path was not taken"
        );
    } else {
        assert_eq!(syncfs, 0, "the bulk path was taken");
    }
    // Both sinks wrote files (sink i of 2 numbers its files i, i + 2, …), the second in
    // a staging directory of its own.
    let seqs = published_seqs(&history);
    assert!(
        seqs.iter().any(|n| n % 2 == 0) && seqs.iter().any(|n| n % 2 == 1),
        "the files of one sink only: {seqs:?}"
    );
    assert!(
        made_dir(&history, "000001.1"),
        "the second sink staged in the first's directory"
    );
    let expected = input_rows(&[w.path("wide")]);
    assert_eq!(expected.len() as u64, 2 * partitions);
    let promise = Promise {
        rows: &expected,
        what: "the load",
    };
    // Each state is a recovery and a load over hundreds of partitions (0.3 s): CI
    // checks 100 of the 1,600 distinct states of 100 partitions (the all-lost state of
    // every step first, then mixed ones); `.ci/explore` or `EXPLORE_STATES` more.
    let what = format!("a load over {partitions} partitions on two sinks");
    explore_with(
        &w,
        &history,
        (load, &expected),
        &promise,
        &what,
        (&rows_of, 2, 100),
    );
}

/// Two rows for each of `partitions` partitions (`a`, `b`) in `wide/rows.csv`.
fn wide_input(partitions: u64) -> Workdir {
    let w = Workdir::new();
    let mut csv = String::from("id,a,b,v\n");
    for i in 0..2 * partitions {
        let p = i % partitions;
        csv.push_str(&format!("{i},{},{},v{i}\n", p % 40, p / 40));
    }
    w.write("wide/rows.csv", csv);
    w
}

/// The load of [`wide_input`] on two threads, `rows` rows a checkpoint.
fn wide_load(rows: &str) -> [&str; 9] {
    [
        "-t",
        "t",
        "-p",
        "a,b",
        "--checkpoint-rows",
        rows,
        "--threads",
        "2",
        "wide",
    ]
}

/// Two sinks, each staging in a directory of its own made durable by fsyncs, killed
/// mid-commit of the second checkpoint, then `--recover`: power cuts anywhere in the
/// two, the killed process's unsynced operations included.
#[test]
fn power_cuts_during_a_recovery_of_two_sinks_lose_no_row() {
    let w = wide_input(30);
    let load = &wide_load("30");
    let env = [
        ("INGEST_SPREAD_FROM", "10"),
        ("INGEST_SYNCFS_FROM", "1000000"),
    ];
    let history = explorer::record(
        w.dir.path(),
        "t",
        &[
            Invocation {
                program: None,
                args: load,
                env: &[&env[..], &[("INGEST_FAIL_POINT", "commit.mid:2")]].concat(),
            },
            Invocation {
                program: None,
                args: &["-t", "t", "--recover"],
                env: &env,
            },
        ],
    );
    assert!(
        !history.statuses[0].success(),
        "commit.mid:2 was not reached"
    );
    assert!(history.statuses[1].success(), "{}", history.stderrs[1]);
    assert!(
        made_dir(&history, "000002.1"),
        "the second sink did not stage checkpoint 2"
    );
    let expected = input_rows(&[w.path("wide")]);
    let promise = Promise {
        rows: &expected,
        what: "the recovery",
    };
    explore_with(
        &w,
        &history,
        (load, &expected),
        &promise,
        "two sinks killed mid-commit, then --recover",
        (&rows_of, 1, 100),
    );
}

/// A recovery that publishes with one `syncfs`, after a kill -9 mid-commit.
#[test]
fn power_cuts_during_a_recovery_made_durable_by_syncfs_lose_no_row() {
    killed_then_with(
        "commit.mid:2",
        &["-t", "t", "--recover"],
        &[("INGEST_SYNCFS_FROM", "1")],
        "kill -9 mid-commit, then --recover, with syncfs",
    );
}

/// The load killed at fail point `point`, then `then` (a recovery or an abort) to the
/// end: power cuts anywhere in the two, the killed process's unsynced operations
/// included (a kill -9 keeps them in the page cache, a power cut may not).
fn killed_then(point: &str, then: &[&str], what: &str) {
    killed_then_with(point, then, &[], what);
}

/// [`killed_then`] with `env` set for both commands. One state of random fates a step
/// (the load alone is explored with two): the history is two commands long, and the
/// state where all that was not durable is lost, at every step, is what finds a missing
/// fsync.
fn killed_then_with(point: &str, then: &[&str], env: &[(&str, &str)], what: &str) {
    let w = Workdir::new();
    w.fixture("orders");
    let history = explorer::record(
        w.dir.path(),
        "t",
        &[
            Invocation {
                program: None,
                args: LOAD,
                env: &[env, &[("INGEST_FAIL_POINT", point)]].concat(),
            },
            Invocation {
                program: None,
                args: then,
                env,
            },
        ],
    );
    assert!(!history.statuses[0].success(), "{point} was not reached");
    assert!(history.statuses[1].success(), "{}", history.stderrs[1]);
    let expected = expected(&w);
    // A recovery promises the whole load; an abort, a table without the run's rows
    // (it was empty before).
    let promise = if then.contains(&"--abort") {
        Promise {
            rows: &[],
            what: "the abort",
        }
    } else {
        Promise {
            rows: &expected,
            what: "the recovery",
        }
    };
    explore_with(
        &w,
        &history,
        (LOAD, &expected),
        &promise,
        what,
        (&rows_of, 1, 1000),
    );
}

#[test]
fn power_cuts_during_a_recovery_after_kill_9_lose_no_row() {
    killed_then(
        "commit.mid:2",
        &["-t", "t", "--recover"],
        "kill -9 mid-commit, then --recover",
    );
}

/// Killed between a journal record's write and its fsync: the recovery reads a record
/// that only the page cache holds, and must make it durable before acting on it. The
/// third record written is checkpoint 2's CheckpointComplete, which the recovery
/// publishes (the fourth, a Committed, is harmless to lose, and exercised nothing).
#[test]
fn power_cuts_during_a_recovery_of_an_unsynced_journal_record_lose_no_row() {
    killed_then(
        "journal.write.after:3",
        &["-t", "t", "--recover"],
        "kill -9 before a journal record's fsync, then --recover",
    );
}

/// Killed after making a directory and before fsyncing its parent: the recovery finds
/// the directory and must make its name durable before it puts files in it.
#[test]
fn power_cuts_during_a_recovery_into_an_unsynced_directory_lose_no_row() {
    killed_then(
        "mkdir.after:8",
        &["-t", "t", "--recover"],
        "kill -9 after a mkdir, then --recover",
    );
}

/// An abort of a run killed mid-commit: a power cut must never bring back a file the
/// abort removed once it journaled `Aborted` (the load again would load its rows twice).
#[test]
fn power_cuts_during_an_abort_bring_no_file_back() {
    killed_then(
        "commit.mid:2",
        &["-t", "t", "--abort"],
        "kill -9 mid-commit, then --abort",
    );
}

/// `--mode overwrite-partitions` into a loaded table, killed in the middle of its
/// partition exchange, then recovered: the swapped partitions hold the new rows alone,
/// the others the old, whatever a power cut kept.
#[test]
fn power_cuts_during_an_overwrite_lose_no_partition() {
    let w = Workdir::new();
    w.fixture("orders");
    let first = ["-t", "t", "-p", "dt", "orders"];
    assert_code(&w.run(&first), 0);
    // Two days again, with fewer rows: their partitions are replaced.
    let mut next = String::new();
    for day in ["2026-11-26", "2026-11-27"] {
        let text = std::fs::read_to_string(w.path(&format!("orders/{day}.csv"))).expect("fixture");
        let lines: Vec<&str> = text.lines().collect();
        if next.is_empty() {
            next.push_str(lines[0]);
            next.push('\n');
        }
        for line in &lines[1..lines.len() / 2] {
            next.push_str(line);
            next.push('\n');
        }
    }
    let next = w.write("next/days.csv", next);
    let new_rows = input_rows(&[next]);
    let replaced: std::collections::HashSet<String> =
        new_rows.iter().map(|r| r["dt"].clone()).collect();
    let mut expected: Vec<Row> = input_rows(&[w.path("orders")])
        .into_iter()
        .filter(|r| !replaced.contains(&r["dt"]))
        .collect();
    expected.extend(new_rows);
    let load = [
        "-t",
        "t",
        "-p",
        "dt",
        "--mode",
        "overwrite-partitions",
        "--checkpoint-rows",
        "100",
        "next",
    ];
    let history = explorer::record(
        w.dir.path(),
        "t",
        &[
            Invocation {
                program: None,
                args: &load,
                env: &[("INGEST_FAIL_POINT", "overwrite.exchange.mid")],
            },
            Invocation {
                program: None,
                args: &["-t", "t", "--recover"],
                env: &[],
            },
        ],
    );
    assert!(!history.statuses[0].success(), "the fail point was reached");
    assert!(history.statuses[1].success(), "{}", history.stderrs[1]);
    let promise = Promise {
        rows: &expected,
        what: "the recovery",
    };
    explore(
        &w,
        &history,
        (&load, &expected),
        &promise,
        "overwrite killed mid-exchange, then --recover",
    );
}

/// `--compact` of a loaded table (large and small files each day), alone and killed in the
/// middle of its partition exchange then recovered: whatever a power cut keeps, every
/// row is in the table once after `--recover` and `--compact` again, and once the
/// command said it was done, the rows it promised (the same) are there.
#[test]
fn power_cuts_during_a_compaction_lose_no_row() {
    for (point, what) in [
        (None, "a compaction"),
        (
            Some("overwrite.exchange.mid"),
            "a compaction killed mid-exchange, then --recover",
        ),
    ] {
        let w = Workdir::new();
        w.fixture("orders");
        let load = ["-t", "t", "-p", "dt", "--checkpoint-rows", "100", "orders"];
        assert_code(&w.run(&load), 0);
        let expected = input_rows(&[w.path("orders")]);
        // Files of 8 KB stay (and are linked into the new partition), those of 1 KB merge.
        let compact = ["-t", "t", "--compact", "--target-file-size", "4K"];
        let recover = ["-t", "t", "--recover"];
        let armed = point.map(|p| [("INGEST_FAIL_POINT", p)]);
        let mut invocations = vec![Invocation {
            program: None,
            args: &compact,
            env: armed.as_ref().map_or(&[][..], |a| &a[..]),
        }];
        if point.is_some() {
            invocations.push(Invocation {
                program: None,
                args: &recover,
                env: &[],
            });
        }
        let history = explorer::record(w.dir.path(), "t", &invocations);
        assert_eq!(history.statuses[0].success(), point.is_none(), "{what}");
        let last = history.statuses.len() - 1;
        assert!(
            history.statuses[last].success(),
            "{}",
            history.stderrs[last]
        );
        assert!(
            history.steps.iter().any(|s| s.what.contains("link")),
            "{what}: the compaction linked nothing"
        );
        let promise = Promise {
            rows: &expected,
            what,
        };
        explore(&w, &history, (&compact, &expected), &promise, what);
    }
}

/// The explorer itself: a program that renames a durable file into a directory whose
/// own name it never makes durable (the bug of e66d0f2) must fail the check in some
/// state, and one that fsyncs the parent first must pass in all.
#[test]
fn the_explorer_finds_a_file_renamed_into_a_directory_that_is_not_durable() {
    let script = |sync_parent: bool| {
        format!(
            r#"
import os
def fsync(p):
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
os.mkdir("t"); fsync(".")
os.mkdir("t/staging"); fsync("t")
with open("t/staging/f", "w") as f:
    f.write("row\n"); f.flush(); os.fsync(f.fileno())
fsync("t/staging")
os.mkdir("t/dt=1")
if {sync_parent}: fsync("t")
os.rename("t/staging/f", "t/dt=1/f")
fsync("t/dt=1")
fsync("t")
"#,
            sync_parent = if sync_parent { "True" } else { "False" }
        )
    };
    for sync_parent in [false, true] {
        let w = Workdir::new();
        let py = w.write("make.py", script(sync_parent));
        let python = Path::new("/usr/bin/env");
        let args = ["python3", py.to_str().expect("utf-8 path")];
        let history = explorer::record(
            w.dir.path(),
            "t",
            &[Invocation {
                program: Some(python),
                args: &args,
                env: &[],
            }],
        );
        assert!(history.statuses[0].success(), "{}", history.stderrs[0]);
        let figures = explorer::explore(w.dir.path(), &history, 4, 10_000, 7, |state| {
            let staged = w.path("t/staging/f").exists();
            let published = w.path("t/dt=1/f").exists();
            // Once it is renamed, the file was durable in staging: it must be somewhere.
            let renamed = history.steps[..state.at]
                .iter()
                .any(|s| s.what.starts_with("rename"));
            if renamed && !staged && !published {
                return Err("the file is in neither place".into());
            }
            Ok(())
        });
        assert!(figures.checked >= 5, "{figures:?}");
        if sync_parent {
            assert!(figures.failed.is_empty(), "{:?}", figures.failed);
        } else {
            assert!(
                figures.failed.iter().any(|f| f.contains("neither place")),
                "the explorer missed the lost directory: {figures:?}"
            );
        }
    }
}

/// An Iceberg load's arguments, its SQL catalog a SQLite file inside the table's
/// directory (so the explorer models the catalog's writes too: its rollback journal, its
/// fsyncs), and the reader of the rows the catalog's current snapshot names.
#[cfg(feature = "iceberg")]
struct IcebergCase {
    w: Workdir,
    uri: String,
    db: std::path::PathBuf,
}

#[cfg(feature = "iceberg")]
impl IcebergCase {
    fn new() -> IcebergCase {
        let w = Workdir::new();
        w.fixture("orders");
        let db = w.dir.path().canonicalize().unwrap().join("t/catalog.db");
        let uri = format!("sqlite://{}", db.display());
        IcebergCase { w, uri, db }
    }

    /// `extra` and the inputs after the Iceberg load's own arguments.
    fn load<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut load = vec![
            "-t",
            "t",
            "--table-format",
            "iceberg",
            "--catalog",
            &self.uri,
            "-p",
            "dt",
            // Three checkpoints of the fixture's 1,106 rows: a first commit, which makes
            // the table, and two that append to it (five explored the same code more
            // often, for a quarter more states).
            "--checkpoint-rows",
            "400",
        ];
        load.extend_from_slice(extra);
        load
    }

    fn explore(
        &self,
        history: &History,
        load: &[&str],
        expected: &[Row],
        promise: &Promise,
        what: &str,
    ) {
        let db = self.db.clone();
        let read = move |_: &Path| -> Result<Vec<Row>, String> {
            let db = db.clone();
            std::panic::catch_unwind(move || crate::iceberg::iceberg_rows(&db, "default.t"))
                .map_err(|_| "a file the catalog names is torn or unreadable".to_string())
        };
        // One state of random fates a step: the staging and journal code these share
        // with every table is explored with two in the Hive cases above; here, each
        // state is a recovery, a load and two reads through the catalog.
        explore_with(
            &self.w,
            history,
            (load, expected),
            promise,
            what,
            (&read, 1, 1000),
        );
    }
}

/// A power cut anywhere in an Iceberg load, the catalog's swaps included, loses no row,
/// and once the load said "loaded", every row is in the snapshot the catalog names.
#[cfg(feature = "iceberg")]
#[test]
fn power_cuts_during_an_iceberg_load_lose_no_row() {
    let case = IcebergCase::new();
    let load = case.load(&["--dedupe-key", "order_id", "orders"]);
    let history = explorer::record(
        case.w.dir.path(),
        "t",
        &[Invocation {
            program: None,
            args: &load,
            env: &[],
        }],
    );
    assert!(history.statuses[0].success(), "{}", history.stderrs[0]);
    let expected = as_typed_by_contract(&case.w.path("t"), expected(&case.w));
    let promise = Promise {
        rows: &expected,
        what: "the Iceberg load",
    };
    case.explore(&history, &load, &expected, &promise, "an Iceberg load");
}

/// An Iceberg load killed after two commits, then `--abort`: a power cut never brings
/// the run's rows back once the abort said it was done (its delete snapshot and the
/// manifests it rewrote are durable before the catalog names them).
#[cfg(feature = "iceberg")]
#[test]
fn power_cuts_during_an_iceberg_abort_bring_no_row_back() {
    let case = IcebergCase::new();
    // Text columns: the abort takes the contract that would type them away with it.
    let load = case.load(&["--no-infer", "orders"]);
    let history = explorer::record(
        case.w.dir.path(),
        "t",
        &[
            Invocation {
                program: None,
                args: &load,
                env: &[("INGEST_FAIL_POINT", "checkpoint.committed.after:2")],
            },
            Invocation {
                program: None,
                args: &["-t", "t", "--abort"],
                env: &[],
            },
        ],
    );
    assert!(
        !history.statuses[0].success(),
        "the fail point was not reached"
    );
    assert!(history.statuses[1].success(), "{}", history.stderrs[1]);
    let expected = input_rows(&[case.w.path("orders")]);
    let promise = Promise {
        rows: &[],
        what: "the abort",
    };
    case.explore(
        &history,
        &load,
        &expected,
        &promise,
        "an Iceberg load killed, then --abort",
    );
}

/// `--mode overwrite-partitions` into a loaded Iceberg table, killed after its
/// overwrite snapshot was swapped in and before it heard so, then recovered: the
/// replaced days hold the new rows alone, the others the old, whatever a power cut kept.
#[cfg(feature = "iceberg")]
#[test]
fn power_cuts_during_an_iceberg_overwrite_lose_no_partition() {
    let case = IcebergCase::new();
    let w = &case.w;
    assert_code(&w.run(&case.load(&["orders"])), 0);
    let day = input_rows(&[w.path("orders/2026-11-27.csv")]);
    let fix: Vec<Row> = day.into_iter().take(30).collect();
    let fix = input_rows(&[write_orders(w, "fix/2026-11-27.csv", &fix)]);
    // The days those rows fall on (not only the file's) are the partitions replaced.
    let replaced: std::collections::BTreeSet<&String> = fix.iter().map(|r| &r["dt"]).collect();
    let mut expected: Vec<Row> = input_rows(&[w.path("orders")])
        .into_iter()
        .filter(|r| !replaced.contains(&r["dt"]))
        .collect();
    expected.extend(fix.iter().cloned());
    let expected = as_typed_by_contract(&w.path("t"), expected);
    let load = case.load(&["--mode", "overwrite-partitions", "fix"]);
    let history = explorer::record(
        w.dir.path(),
        "t",
        &[
            Invocation {
                program: None,
                args: &load,
                env: &[("INGEST_FAIL_POINT", "iceberg.commit.written:1")],
            },
            Invocation {
                program: None,
                args: &["-t", "t", "--recover"],
                env: &[],
            },
        ],
    );
    assert!(
        !history.statuses[0].success(),
        "the fail point was not reached"
    );
    assert!(history.statuses[1].success(), "{}", history.stderrs[1]);
    let promise = Promise {
        rows: &expected,
        what: "the recovery",
    };
    case.explore(
        &history,
        &load,
        &expected,
        &promise,
        "an Iceberg overwrite killed after its swap, then --recover",
    );
}
