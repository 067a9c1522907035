//! Locking and jobs: one writer per job, several jobs per table.

use std::process::Stdio;

use crate::util::*;

#[test]
fn a_second_ingest_of_the_same_job_exits_75_naming_the_holder() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    let lock = w.hold_lock("pid 4242 since 2026-11-30T00:00:00Z");
    for args in [&["-t", "t", "a.csv"][..], &["-t", "t", "--recover"]] {
        let out = w.run(args);
        assert_code(&out, 75);
        assert!(
            stderr(&out).contains("locked by pid 4242 since 2026-11-30T00:00:00Z"),
            "{}",
            stderr(&out)
        );
    }
    // Another job of the same table is not blocked.
    assert_code(&w.run(&["-t", "t", "--job", "other", "a.csv"]), 0);
    fs2::FileExt::unlock(&lock).unwrap();
    assert_code(&w.run(&["-t", "t", "a.csv"]), 0);
}

#[test]
fn the_lock_dies_with_a_killed_process() {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run_failing(
        "checkpoint.complete.after:1",
        &["-t", "t", "--checkpoint-rows", "100", "orders"],
    );
    assert!(crashed(&out));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
}

#[test]
fn two_jobs_load_one_table_at_once_and_both_land_completely() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let mut other = String::from("order_id,dt,ts,customer,email,country,amount,currency,note\n");
    for i in 0..5000 {
        other.push_str(&format!(
            "{},2026-11-{:02},t,c,e,XX,1.00,EUR,\"n, {i}\"\n",
            90000 + i,
            26 + i % 3
        ));
    }
    let extra = w.write("extra/orders.csv", other);
    let spawn = |job: &str, input: &str| {
        w.cmd()
            .args([
                "-t",
                "t",
                "-p",
                "dt",
                "--checkpoint-rows",
                "50",
                "--job",
                job,
                input,
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn("alpha", "orders");
    let b = spawn("beta", "extra");
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_code(&out, 0);
    }
    let mut expected = input_rows(&[orders]);
    expected.extend(input_rows(&[extra]));
    assert_same_rows(table_rows(&w.path("t")), expected, "two jobs");
    assert!(
        w.path("t/_ingest/alpha/manifest").exists() && w.path("t/_ingest/beta/manifest").exists()
    );
}
