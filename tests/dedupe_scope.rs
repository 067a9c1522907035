//! `--dedupe-scope job` (issue 13.6): keys of the job's earlier runs are remembered, so a
//! re-sent order is dropped the next day too; exactly once across crashes; bounded by
//! `--dedupe-retention`.

use std::collections::BTreeSet;

use crate::util::*;

const HEADER: &str = "order_id,dt,ts,customer,email,country,amount,currency,note\n";

fn orders(ids: impl IntoIterator<Item = u32>) -> String {
    let mut text = String::from(HEADER);
    for id in ids {
        text.push_str(&format!("{id},2026-11-2{},t,c,e,DE,1.00,EUR,n\n", id % 3));
    }
    text
}

fn ids(w: &Workdir) -> Vec<u32> {
    let mut ids: Vec<u32> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["order_id"].parse().unwrap())
        .collect();
    ids.sort();
    ids
}

fn load<'a>(dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "-t",
        "t",
        "-p",
        "dt",
        "--dedupe-key",
        "order_id",
        "--checkpoint-rows",
        "40",
    ];
    args.extend_from_slice(extra);
    args.push(dir);
    args
}

#[test]
fn the_job_scope_drops_keys_an_earlier_run_loaded_and_the_run_scope_does_not() {
    for (scope, want_dupes) in [("job", false), ("run", true)] {
        let w = Workdir::new();
        w.write("day1/a.csv", orders(0..100));
        w.write("day2/b.csv", orders(50..150));
        assert_code(&w.run(&load("day1", &["--dedupe-scope", scope])), 0);
        assert_code(&w.run(&load("day2", &["--dedupe-scope", scope])), 0);
        let got = ids(&w);
        let unique: BTreeSet<u32> = got.iter().copied().collect();
        assert_eq!(unique.len(), 150, "{scope}");
        assert_eq!(
            got.len() > unique.len(),
            want_dupes,
            "{scope}: {} rows",
            got.len()
        );
    }
}

#[test]
fn job_scope_holds_exactly_once_through_every_crash_of_the_second_run() {
    let points: Vec<String> = all_fail_points()
        .into_iter()
        .filter(|p| !p.starts_with("overwrite.") && p != "mkdir.after")
        .collect();
    let args = load("day2", &["--dedupe-scope", "job"]);
    let crashes = crash_matrix(
        &points,
        &[1, 3],
        false,
        &args,
        || {
            let w = Workdir::new();
            w.write("day1/a.csv", orders(0..100));
            w.write("day2/b.csv", orders(50..170));
            assert_code(&w.run(&load("day1", &["--dedupe-scope", "job"])), 0);
            (w, ())
        },
        |_| {},
        |run| {
            assert_eq!(ids(&run.w), (0..170).collect::<Vec<_>>(), "{}", run.spec);
            // And the keys of both runs are remembered for the next day.
            run.w.write("day3/c.csv", orders(160..180));
            assert_code(&run.w.run(&load("day3", &["--dedupe-scope", "job"])), 0);
            assert_eq!(
                ids(&run.w),
                (0..180).collect::<Vec<_>>(),
                "{} then day 3",
                run.spec
            );
        },
    );
    assert!(crashes >= 15, "only {crashes} crashes");
}

#[test]
fn an_aborted_run_leaves_no_keys_behind() {
    let w = Workdir::new();
    w.write("day1/a.csv", orders(0..100));
    let args = load("day1", &["--dedupe-scope", "job"]);
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:2", &args)
    ));
    assert_code(&w.run(&["-t", "t", "--abort"]), 0);
    assert_code(&w.run(&args), 0);
    assert_eq!(ids(&w), (0..100).collect::<Vec<_>>());
}

#[test]
fn retention_forgets_the_keys_of_old_runs() {
    let w = Workdir::new();
    w.write("day1/a.csv", orders(0..100));
    w.write("day2/b.csv", orders(50..150));
    let extra = ["--dedupe-scope", "job", "--dedupe-retention", "1s"];
    assert_code(&w.run(&load("day1", &extra)), 0);
    // Run starts are journaled to the second: two seconds later, day 1 is out of reach.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_code(&w.run(&load("day2", &extra)), 0);
    let got = ids(&w);
    assert_eq!(got.len(), 200, "the keys of day 1 were still remembered");
    let out = w.run(&load("day2", &["--dedupe-retention", "1s"]));
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("--dedupe-scope job"),
        "{}",
        stderr(&out)
    );
}

/// The `i`th of a sequence of distinct order ids spread over fifteen digits (a
/// multiplication modulo 10^15 by a number prime to 10 is one-to-one): each falls in a
/// 65,536-value block of its own.
fn scattered(i: u64) -> u64 {
    i.wrapping_mul(2_654_435_761_013) % 1_000_000_000_000_000
}

fn scattered_orders(range: std::ops::Range<u64>) -> String {
    let mut text = String::from(HEADER);
    for id in range.map(scattered) {
        text.push_str(&format!("{id},2026-11-2{},t,c,e,DE,1.00,EUR,n\n", id % 3));
    }
    text
}

/// Integer keys too scattered for the stage's bit set (one block each) move to digests
/// in the middle of a run: a run killed after the move recovers, rows repeated within
/// the run and by the next run are dropped, and every id lands once.
#[test]
fn scattered_integer_keys_dedupe_exactly_across_a_crash_and_the_next_run() {
    let w = Workdir::new();
    w.write("day1/a.csv", scattered_orders(0..1000));
    w.write("day1/b.csv", scattered_orders(600..1200));
    w.write("day2/c.csv", scattered_orders(1100..1500));
    let day1 = load("day1", &["--dedupe-scope", "job"]);
    // Checkpoints of 40 rows: the move (past 64 blocks) comes in the second.
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:5", &day1)
    ));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_code(&w.run(&load("day2", &["--dedupe-scope", "job"])), 0);
    let got: Vec<u64> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["order_id"].parse().unwrap())
        .collect();
    let want: BTreeSet<u64> = (0..1500).map(scattered).collect();
    assert_eq!(got.len(), want.len(), "rows loaded twice");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
}
