//! Crash safety, tested by really crashing: every fail point at several hits, recovery
//! that itself crashes, and SIGKILL at random instants. After the last successful
//! `ingest --recover` the table must hold exactly the expected rows.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::*;

/// Partitioned by two columns (so commits rename many files), with dedupe (so stage
/// snapshots happen) and small checkpoints (so there are ten of them).
const LOAD: &[&str] = &[
    "-t",
    "t",
    "-p",
    "dt,country",
    "--dedupe-key",
    "order_id",
    "--checkpoint-rows",
    "100",
    "orders",
];

/// The fail points an append load reaches (`overwrite.*` belong to the overwrite mode,
/// whose own matrix is in `overwrite.rs`).
fn fail_points() -> Vec<String> {
    all_fail_points()
        .into_iter()
        .filter(|p| !p.starts_with("overwrite."))
        .collect()
}

fn expected(w: &Workdir) -> Vec<Row> {
    dedupe(input_rows(&[w.path("orders")]), "order_id")
}

/// The invariant: exact rows, nothing staged visible, nothing left to recover, and a
/// re-run loads nothing.
#[track_caller]
fn assert_settled(w: &Workdir, what: &str) {
    assert_same_rows(table_rows(&w.path("t")), expected(w), what);
    assert!(
        visible_debris(&w.path("t")).is_empty(),
        "{what}: {:?}",
        visible_debris(&w.path("t"))
    );
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
    let pending = w.path("t/_ingest/default/pending");
    let left: Vec<_> = std::fs::read_dir(&pending)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{what}: staging left behind: {left:?}");
}

#[test]
fn every_fail_point_then_recover_gives_exact_rows() {
    let crashes = crash_matrix(
        &fail_points(),
        &[1, 2, 4, 9],
        true,
        LOAD,
        || {
            let w = Workdir::new();
            w.fixture("orders");
            (w, ())
        },
        |_| {},
        |run| assert_settled(&run.w, &run.spec),
    );
    eprintln!("crash matrix: {crashes} crashes, each followed by --recover and a full check");
    assert!(crashes >= 40, "only {crashes} crashes happened");
}

#[test]
fn recovery_that_crashes_is_rerun_until_done() {
    let during_recovery = [
        "commit.rename.after",
        "commit.mid",
        "checkpoint.committed.after",
        "stage.snapshot.after",
        "sink.precommit.after",
        "checkpoint.complete.after",
        "run.finished.before",
        "manifest.fold.after",
        "journal.write.after",
        "mkdir.after",
    ];
    for first in [
        "checkpoint.complete.after:3",
        "commit.mid:2",
        "sink.precommit.before:5",
    ] {
        for second in during_recovery {
            let w = Workdir::new();
            w.fixture("orders");
            assert!(
                crashed(&w.run_failing(first, LOAD)),
                "{first} did not crash"
            );
            let out = w.run_failing(&format!("{second}:1"), &["-t", "t", "--recover"]);
            assert!(
                crashed(&out),
                "recovery never reached {second}: {}",
                stderr(&out)
            );
            let out = w.run_failing(&format!("{second}:2"), &["-t", "t", "--recover"]);
            if !crashed(&out) {
                assert_code(&out, 0);
            }
            assert_code(&w.run(&["-t", "t", "--recover"]), 0);
            assert_settled(&w, &format!("{first} then {second} in recovery"));
        }
    }
}

#[test]
fn a_plain_load_over_an_interrupted_run_names_recover() {
    let w = Workdir::new();
    w.fixture("orders");
    assert!(crashed(&w.run_failing("checkpoint.complete.after:2", LOAD)));
    let out = w.run(LOAD);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("--recover"), "{}", stderr(&out));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_settled(&w, "recover after a refused load");
}

#[test]
fn a_torn_journal_tail_is_ignored_and_recovered() {
    for (cut, garbage) in [
        (5usize, &b""[..]),
        (1, b""),
        (0, b"\x13\x00\x00\x00garbage"),
    ] {
        let w = Workdir::new();
        w.fixture("orders");
        assert!(crashed(&w.run_failing("checkpoint.complete.after:4", LOAD)));
        let journal = w.path("t/_ingest/default/journal");
        let mut bytes = std::fs::read(&journal).unwrap();
        bytes.truncate(bytes.len() - cut);
        bytes.extend_from_slice(garbage);
        std::fs::write(&journal, bytes).unwrap();
        let out = w.run(&["-t", "t", "--recover"]);
        assert_code(&out, 0);
        assert!(
            stderr(&out).contains("torn journal record"),
            "{}",
            stderr(&out)
        );
        assert_settled(&w, &format!("journal cut by {cut} bytes"));
    }
}

/// A small deterministic generator (xorshift), so a failing seed can be replayed.
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn big_orders(w: &Workdir, rows: usize, rng: &mut Rng) {
    let notes = [
        "",
        "plain",
        "comma, inside",
        "quote \"q\"",
        "multi\nline",
        "ünïcødé",
    ];
    for file in 0..3 {
        let mut text = String::from("order_id,dt,ts,customer,email,country,amount,currency,note\n");
        for i in 0..rows / 3 {
            let id = if rng.below(20) == 0 {
                rng.below(1000)
            } else {
                (file * rows + i) as u64 + 1000
            };
            let note = notes[rng.below(notes.len() as u64) as usize].replace('"', "\"\"");
            text.push_str(&format!(
                "{id},2026-11-{:02},2026-11-01T00:00:00Z,c{},e{}@x,C{},{}.{:02},EUR,\"{note}\"\n",
                20 + rng.below(8),
                rng.below(50),
                id,
                rng.below(12),
                rng.below(1000),
                rng.below(100)
            ));
        }
        w.write(&format!("orders/part-{file}.csv"), text);
    }
}

/// The load the SIGKILL rounds repeat: dedupe (snapshots) and 700-row checkpoints.
pub const SIGKILL_LOAD: &[&str] = &[
    "-t",
    "t",
    "-p",
    "dt",
    "--dedupe-key",
    "order_id",
    "--checkpoint-rows",
    "700",
    "orders",
];

#[test]
fn random_sigkill_during_load_and_recovery_loses_and_duplicates_nothing() {
    let (seed, kills) = sigkill_rounds(SIGKILL_LOAD, 8, Workdir::new);
    eprintln!("random SIGKILL: seed {seed}, {kills} kills landed mid-run over 8 loads or more");
    assert!(kills >= 4, "seed {seed}: only {kills} kills landed mid-run");
}

/// A load over thousands of partitions (8 days x 12 countries x 50 customers: 4,800,
/// about 4,400 of them in each 10,000-row checkpoint): each checkpoint stages a file per
/// partition (made durable by one `syncfs` where the filesystem allows it) and renames
/// them into as many directories.
const SIGKILL_THOUSANDS: &[&str] = &[
    "-t",
    "t",
    "-p",
    "dt,country,customer",
    "--dedupe-key",
    "order_id",
    "--checkpoint-rows",
    "10000",
    "orders",
];

#[test]
fn random_sigkill_over_thousands_of_partitions_loses_and_duplicates_nothing() {
    let (seed, kills) = sigkill_rounds_within(SIGKILL_THOUSANDS, 2, Workdir::new, 2);
    eprintln!(
        "random SIGKILL, thousands of partitions: seed {seed}, {kills} kills landed mid-run over 2 loads or more"
    );
    assert!(kills >= 2, "seed {seed}: only {kills} kills landed mid-run");
}

/// `rounds` loads of `load` (orders from `big_orders` in a directory `workdir` makes,
/// deduplicated by order_id) under random SIGKILLs of loads and recoveries (the
/// operator's loop below), each then recovered and checked for exact rows and no debris.
/// Returns the seed and how many kills landed mid-command.
pub fn sigkill_rounds(load: &[&str], rounds: u32, workdir: impl Fn() -> Workdir) -> (u64, u32) {
    sigkill_rounds_within(load, rounds, workdir, 1)
}

/// [`sigkill_rounds`] with kills drawn from `stretch` times a whole load's time: a load
/// or a recovery after a kill first clears what the killed command left, which over
/// thousands of partitions takes longer than the load's own margin, so with kills drawn
/// from one load's time no command would ever finish.
///
/// A round whose first load outlives its delay lands no kill, so a few rounds can land
/// fewer than the two kills the callers require (CI saw one over three rounds at 4,000
/// partitions, `stretch` 2): past `rounds`, rounds go on while fewer than two kills have
/// landed, up to twice as many.
pub fn sigkill_rounds_within(
    load: &[&str],
    rounds: u32,
    workdir: impl Fn() -> Workdir,
    stretch: u64,
) -> (u64, u32) {
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let setup = || {
        let w = workdir();
        big_orders(&w, 30_000, &mut Rng(seed));
        w
    };
    let full = whole_load_ms(load, setup) * stretch;
    let mut kills = 0;
    for round in 0..rounds * 2 {
        if kill_rounds_done(round, rounds, kills) {
            break;
        }
        let w = setup();
        kills += operators_loop(&w, load, &mut rng, full, seed);
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        assert_same_rows(
            table_rows(&w.path("t")),
            dedupe(input_rows(&[w.path("orders")]), "order_id"),
            &format!("seed {seed}, round {round}"),
        );
        assert!(visible_debris(&w.path("t")).is_empty(), "seed {seed}");
    }
    (seed, kills)
}

/// How long a whole load of `load` takes here, in milliseconds, untimed by any
/// assertion: the faster of two clean runs, each in a directory `setup` makes. A single
/// run slowed by a busy machine stretched every kill delay drawn from it past the loads
/// it was meant to interrupt (a CI run once saw only 2 kills land in 6 Delta loads).
pub fn whole_load_ms(load: &[&str], setup: impl Fn() -> Workdir) -> u64 {
    let run = || {
        let w = setup();
        let clock = Instant::now();
        assert_code(&w.run(load), 0);
        clock.elapsed().as_millis() as u64 + 1
    };
    run().min(run())
}

/// How long attempt `attempt` of a kill loop runs before its kill: a random share of
/// `full` (a whole load's milliseconds, or more), but for the first attempt of a loop,
/// a share of its first half. A first load that finished before its delay ended the
/// loop with no kill at all, and with delays drawn over the whole load about one in two
/// did: one CI run had two kill loops (thousands of partitions; a bucket table on two
/// machines) land one kill each where they need two. The later attempts still draw from
/// the whole load, so kills still land anywhere in it, the commit at its end included.
pub fn first_kill_delay(rng: &mut Rng, attempt: u32, full: u64) -> u64 {
    match attempt {
        0 => rng.below((full / 2).max(1)),
        _ => rng.below(full),
    }
}

/// The operator's loop under random SIGKILLs: run the load; if it was interrupted,
/// recover; again, until a load finishes. Each command is killed after a random share of
/// `full` (a whole load's milliseconds), if it is still running, up to [`MOST_KILLS`]
/// kills. Every outcome must be a success, a kill, or exit 1 naming `--recover`; a load
/// must land within 60 attempts. Returns how many kills landed mid-command.
pub fn operators_loop(w: &Workdir, load: &[&str], rng: &mut Rng, full: u64, seed: u64) -> u32 {
    operators_loop_killing_at_most(w, load, rng, full, seed, MOST_KILLS)
}

/// How many commands one operator's loop kills before it lets them run. Unbounded, a
/// machine busy enough to make every load outlive its delay failed a loop that had
/// nothing wrong: CI saw 60 commands in a row killed over thousands of partitions, where
/// each load after a kill first clears what the killed one staged. Past this many kills,
/// a load that still does not land within the 60 attempts is a real failure to finish.
pub const MOST_KILLS: u32 = 12;

/// [`operators_loop`] that kills at most `most` commands, then lets them run: a command
/// slowed by a busy machine past every delay drawn from `full` (a CI run saw 60 Delta
/// compactions in a row killed) still ends, and the kills before it still land.
pub fn operators_loop_killing_at_most(
    w: &Workdir,
    load: &[&str],
    rng: &mut Rng,
    full: u64,
    seed: u64,
    most: u32,
) -> u32 {
    let mut kills = 0;
    for attempt in 0..60 {
        let args: &[&str] = if attempt % 2 == 0 {
            load
        } else {
            &["-t", "t", "--recover"]
        };
        let mut child = w
            .cmd()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(first_kill_delay(rng, attempt, full)));
        if kills < most && child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            kills += 1;
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() || crashed(&out) || out.status.code() == Some(1),
            "seed {seed}: {}",
            stderr(&out)
        );
        if out.status.code() == Some(1) {
            assert!(
                stderr(&out).contains("--recover"),
                "seed {seed}: {}",
                stderr(&out)
            );
        }
        if attempt % 2 == 0 && out.status.success() {
            return kills;
        }
    }
    panic!("seed {seed}: no load finished in 60 attempts");
}

#[test]
fn every_fail_point_is_reached_by_the_plainest_load_too() {
    // No stage, no partition: one file per checkpoint. Every point still crashes once,
    // and recovery still gives exactly the input.
    for point in fail_points() {
        let w = Workdir::new();
        let orders = w.fixture("orders");
        let load = ["-t", "t", "--checkpoint-rows", "100", "orders"];
        let out = w.run_failing(&format!("{point}:1"), &load);
        assert!(
            crashed(&out),
            "{point} was never reached by a plain load: {}",
            stderr(&out)
        );
        recover_after_crash(&w, &load, &point);
        assert_same_rows(table_rows(&w.path("t")), input_rows(&[orders]), &point);
    }
}
