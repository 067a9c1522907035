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
    w.write("b.csv", "id\n2\n");
    assert_code(&w.run(&["-t", "t", "b.csv"]), 0);
}

/// Issue 40.3: exactly once per table. A job with a mistyped name offered the files
/// another job loaded refuses them (by path, and by content under another name),
/// naming that job and its run; `--reload` loads them anyway, quarantine sets them
/// aside; shard jobs never meet.
#[test]
fn an_input_another_job_loaded_is_refused_naming_that_job() {
    let w = Workdir::new();
    w.write("in/a.csv", "id,v\n1,a\n2,b\n");
    w.write("in/b.csv", "id,v\n3,c\n");
    let first = w.run(&["-t", "t", "--job", "nightly", "--json", "in"]);
    assert_code(&first, 0);
    let run: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let run = run["run_id"].as_str().unwrap().to_string();

    let out = w.run(&["-t", "t", "--job", "nightly-typo", "in"]);
    assert_code(&out, 1);
    let said = stderr(&out);
    assert!(
        said.contains("loaded into this table by job \"nightly\"") && said.contains(&run),
        "{said}"
    );
    assert_eq!(table_rows(&w.path("t")).len(), 3, "nothing loaded twice");

    // The same content under another name is the same input.
    w.write("elsewhere/a-copy.csv", "id,v\n1,a\n2,b\n");
    let out = w.run(&["-t", "t", "--job", "other", "elsewhere"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("the same content"),
        "{}",
        stderr(&out)
    );

    // Set aside under quarantine, with the others loading.
    w.write("in/c.csv", "id,v\n4,d\n");
    let out = w.run(&[
        "-t",
        "t",
        "--job",
        "nightly-typo",
        "--on-bad-input",
        "quarantine",
        "in",
    ]);
    assert_code(&out, 3);
    let mut ids: Vec<String> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["id"].clone())
        .collect();
    ids.sort();
    assert_eq!(ids, ["1", "2", "3", "4"]);

    // --reload is the way to load them again on purpose.
    let out = w.run(&["-t", "t", "--job", "again", "--reload", "in/b.csv"]);
    assert_code(&out, 0);
    assert_eq!(table_rows(&w.path("t")).len(), 5);

    // Shard jobs split one list and never meet, even beside the jobs above.
    w.write("shards/x1.csv", "id,v\n10,x\n");
    w.write("shards/x2.csv", "id,v\n11,y\n");
    w.write("shards/x3.csv", "id,v\n12,z\n");
    for i in 0..2 {
        let shard = format!("{i}/2");
        let job = format!("shard-{i}");
        assert_code(
            &w.run(&["-t", "t", "--job", &job, "--shard", &shard, "shards"]),
            0,
        );
    }
    assert_eq!(table_rows(&w.path("t")).len(), 8);
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

/// Issue 13.4: a job-file run names its job; `--recover` without `--job` said "nothing
/// to recover" (it looked at the job `default` only) while `--status` showed the run
/// interrupted.
#[test]
fn recover_without_job_finishes_a_killed_job_file_run() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    w.write(
        "nightly.toml",
        "job = \"nightly\"\ninputs = [\"orders\"]\npartition_by = [\"dt\"]\ncheckpoint_rows = 100\n",
    );
    let out = w.run_failing(
        "checkpoint.complete.after:2",
        &["--config", "nightly.toml", "-t", "t"],
    );
    assert!(crashed(&out), "{}", stderr(&out));
    let status = w.run(&["--config", "nightly.toml", "-t", "t", "--status"]);
    assert_code(&status, 0);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("job nightly: interrupted"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let out = w.run(&["-t", "t", "--recover"]);
    assert_code(&out, 0);
    assert!(
        !stderr(&out).contains("nothing to recover") && stderr(&out).contains("recovered"),
        "{}",
        stderr(&out)
    );
    assert_same_rows(table_rows(&w.path("t")), input_rows(&[orders]), "recovered");
    let again = w.run(&["--config", "nightly.toml", "-t", "t", "--recover"]);
    assert_code(&again, 0);
    assert!(
        stderr(&again).contains("nothing to recover"),
        "{}",
        stderr(&again)
    );
}

/// Issue 13.4: without `--job`, every interrupted job is finished, each with its summary.
#[test]
fn recover_without_job_finishes_every_interrupted_job() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    for job in ["alpha", "beta"] {
        let out = w.run_failing(
            "commit.mid:2",
            &[
                "-t",
                "t",
                "--job",
                job,
                "--checkpoint-rows",
                "100",
                "orders",
            ],
        );
        assert!(crashed(&out), "{job}: {}", stderr(&out));
    }
    let out = w.run(&["-t", "t", "--recover", "--json"]);
    assert_code(&out, 0);
    let summaries: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let jobs: Vec<&str> = summaries
        .iter()
        .map(|s| s["job"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["alpha", "beta"]);
    assert!(summaries.iter().all(|s| s["outcome"] == "recovered"));
    let mut expected = input_rows(std::slice::from_ref(&orders));
    expected.extend(input_rows(&[orders]));
    assert_same_rows(table_rows(&w.path("t")), expected, "two jobs recovered");
    let again = w.run(&["-t", "t", "--recover"]);
    assert!(
        stderr(&again).contains("nothing to recover"),
        "{}",
        stderr(&again)
    );
}

/// Issue 13.4: `--status` on a typo'd path printed "no ingest job has run" and exited 0.
#[test]
fn status_of_a_path_that_holds_no_table_exits_1() {
    let w = Workdir::new();
    let out = w.run(&["-t", "nowhere", "--status"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no table at nowhere"),
        "{}",
        stderr(&out)
    );
    w.write("plain/readme.txt", "not a table");
    let out = w.run(&["-t", "plain", "--status"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("is not an ingest table"),
        "{}",
        stderr(&out)
    );
}

/// Issue 13.4: a load refused by its checks left `TABLE/_ingest/JOB/lock` behind (and
/// so a table that `--status` reported as existing).
#[test]
fn a_load_refused_before_it_starts_leaves_no_lock_behind() {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&["-t", "t", "-p", "region", "orders"]);
    assert_code(&out, 1);
    assert!(
        !w.path("t").exists(),
        "the refused load left {:?}",
        walk(&w.path("t"))
    );
    // Beside an existing job, only the new job's directory goes.
    assert_code(&w.run(&["-t", "t", "--job", "first", "orders"]), 0);
    let out = w.run(&["-t", "t", "--job", "second", "-p", "region", "orders"]);
    assert_code(&out, 1);
    assert!(!w.path("t/_ingest/second").exists());
    assert!(w.path("t/_ingest/first/manifest").exists());
}
