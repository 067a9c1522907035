//! `--abort` (issue 13.2): an interrupted run undone as if it had never started, from
//! the journal alone, crash-safe at every one of its steps.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::util::*;

/// Every file of the table outside `_ingest/` (data, rejects), with its bytes: what a
/// reader, or a glob, can find.
fn table_files(w: &Workdir) -> BTreeMap<PathBuf, Vec<u8>> {
    let table = w.path("t");
    if !table.exists() {
        return BTreeMap::new();
    }
    walk(&table)
        .into_iter()
        .filter(|p| !p.strip_prefix(&table).unwrap().starts_with("_ingest"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.strip_prefix(&table).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

/// Asserts two listings from [`table_files`] are equal, naming the paths that differ.
#[track_caller]
fn assert_same_files(
    got: &BTreeMap<PathBuf, Vec<u8>>,
    want: &BTreeMap<PathBuf, Vec<u8>>,
    what: &str,
) {
    let differ: Vec<&PathBuf> = got
        .keys()
        .chain(want.keys())
        .filter(|p| got.get(*p) != want.get(*p))
        .collect();
    assert!(differ.is_empty(), "{what}: these files differ: {differ:?}");
}

/// The table's directories outside `_ingest/`: an aborted run leaves no empty partition.
fn table_dirs(w: &Workdir) -> Vec<PathBuf> {
    let table = w.path("t");
    let mut out = Vec::new();
    let mut stack = vec![table.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("_ingest") {
                out.push(path.strip_prefix(&table).unwrap().to_path_buf());
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The trap: a run stopped by a bad row, the file fixed, `--recover` refusing
/// (the input changed) and a plain load refusing (a run is interrupted).
#[test]
fn a_run_stopped_by_a_bad_row_is_undone_and_the_fixed_file_loads() {
    let w = Workdir::new();
    w.write("in.csv", "id,amount\n1,2.50\n2,3.00\n3,abc\n4,1.00\n");
    let load = [
        "-t",
        "t",
        "--cast",
        "amount=decimal(10,2)",
        "--checkpoint-rows",
        "1",
        "in.csv",
    ];
    let out = w.run(&load);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("--recover") && stderr(&out).contains("ingest --target t --abort"),
        "{}",
        stderr(&out)
    );
    assert_eq!(table_rows(&w.path("t")).len(), 2);
    let status = w.run(&["-t", "t", "--status"]);
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        text.contains("--abort would:")
            && text.contains("remove 2 published file(s) with 2 row(s)"),
        "{text}"
    );
    for (path, _) in table_files(&w) {
        assert!(
            text.contains(path.to_str().unwrap()),
            "{text} lacks {path:?}"
        );
    }

    w.write("in.csv", "id,amount\n1,2.50\n2,3.00\n3,0.50\n4,1.00\n");
    let out = w.run(&["-t", "t", "--recover"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("--abort"), "{}", stderr(&out));
    let out = w.run(&load);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("or undo it with: ingest --target t --abort"),
        "{}",
        stderr(&out)
    );

    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("removed 2 published file(s) with 2 row(s)"),
        "{}",
        stderr(&out)
    );
    assert!(table_files(&w).is_empty(), "{:?}", table_files(&w));
    assert!(table_dirs(&w).is_empty(), "{:?}", table_dirs(&w));
    assert!(
        !w.path("t/_ingest/contract.json").exists(),
        "the first run's contract stayed"
    );
    let again = w.run(&["-t", "t", "--abort"]);
    assert_code(&again, 0);
    assert!(
        stderr(&again).contains("nothing to abort"),
        "{}",
        stderr(&again)
    );

    assert_code(&w.run(&load), 0);
    let mut amounts: Vec<String> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["amount"].clone())
        .collect();
    amounts.sort();
    assert_eq!(amounts, ["0.50", "1.00", "2.50", "3.00"]);
}

/// A table with a first load, then a second load (other inputs, partitions old and new,
/// rejects) killed after some checkpoints committed.
fn interrupted_second_load() -> (Workdir, BTreeMap<PathBuf, Vec<u8>>, Vec<&'static str>) {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    assert_code(
        &w.run(&["-t", "t", "-p", "dt", "--max-errors", "10", "orders"]),
        0,
    );
    let mut text = String::from("order_id,dt,ts,customer,email,country,amount,currency,note\n");
    for i in 0..400 {
        text.push_str(&format!(
            "{},2026-12-{:02},t,c,e,DE,1.00,EUR,n\n",
            70000 + i,
            1 + i % 4
        ));
        if i % 97 == 0 {
            text.push_str("broken,row\n");
        }
    }
    w.write("more/orders.csv", text);
    let _ = orders;
    let before = table_files(&w);
    let load = vec![
        "-t",
        "t",
        "-p",
        "dt",
        "--max-errors",
        "10",
        "--checkpoint-rows",
        "50",
        "more",
    ];
    let out = w.run_failing("checkpoint.committed.after:4", &load);
    assert!(crashed(&out), "{}", stderr(&out));
    assert!(
        table_files(&w) != before,
        "the killed run published nothing"
    );
    (w, before, load)
}

#[test]
fn every_fail_point_of_an_abort_then_abort_or_recover_restores_the_table() {
    let points = abort_fail_points();
    assert!(points.len() >= 4, "{points:?}");
    let mut crashes = 0;
    for point in &points {
        for hit in [1, 2] {
            for finish in ["--abort", "--recover"] {
                let (w, before, load) = interrupted_second_load();
                let spec = format!("{point}:{hit}");
                let out = w.run_failing(&spec, &["-t", "t", "--abort"]);
                if crashed(&out) {
                    crashes += 1;
                    assert!(stderr(&out).contains(&format!("fail point {point} reached")));
                    let out = w.run(&["-t", "t", finish]);
                    assert_code(&out, 0);
                } else {
                    assert_code(&out, 0);
                }
                let what = format!("{spec} then {finish}");
                assert_same_files(&table_files(&w), &before, &what);
                assert!(
                    table_dirs(&w)
                        .iter()
                        .all(|d| !d.starts_with("dt=2026-12-01")),
                    "{what}: {:?}",
                    table_dirs(&w)
                );
                assert!(
                    !w.path("t/_ingest/default/pending")
                        .read_dir()
                        .is_ok_and(|mut d| d.next().is_some()),
                    "{what}: staging left"
                );
                // Nothing left to recover or abort; the inputs count as not loaded.
                assert!(stderr(&w.run(&["-t", "t", "--recover"])).contains("nothing to recover"));
                assert!(stderr(&w.run(&["-t", "t", "--abort"])).contains("nothing to abort"));
                let out = w.run(&load);
                assert_code(&out, 0);
                assert!(
                    stderr(&out).contains("loaded 400 rows"),
                    "{what}: {}",
                    stderr(&out)
                );
            }
        }
    }
    assert!(crashes >= 8, "only {crashes} crashes");
}

#[test]
fn an_overwrite_whose_exchange_began_is_finished_not_half_undone() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&["-t", "t", "-p", "country", "orders"]), 0);
    let overwrite = [
        "-t",
        "t",
        "-p",
        "country",
        "--mode",
        "overwrite-partitions",
        "--reload",
        "--checkpoint-rows",
        "150",
        "orders",
    ];
    assert!(crashed(
        &w.run_failing("overwrite.exchange.mid", &overwrite)
    ));
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("exchange of partitions began") && err.contains("--recover"),
        "{err}"
    );
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("orders")]),
        "finished",
    );
}

#[test]
fn an_overwrite_aborted_before_its_exchange_leaves_the_old_partitions_byte_for_byte() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&["-t", "t", "-p", "country", "orders"]), 0);
    let before = table_files(&w);
    let overwrite = [
        "-t",
        "t",
        "-p",
        "country",
        "--mode",
        "overwrite-partitions",
        "--reload",
        "--checkpoint-rows",
        "150",
        "orders",
    ];
    // Half of the new files assembled in the shadow partitions; no Exchange journaled.
    assert!(crashed(
        &w.run_failing("overwrite.assemble.mid", &overwrite)
    ));
    assert_code(&w.run(&["-t", "t", "--abort"]), 0);
    assert_same_files(&table_files(&w), &before, "aborted overwrite");
    assert!(
        w.path("t/_ingest/contract.json").exists(),
        "the first load's contract went"
    );
}

#[test]
fn abort_without_job_undoes_the_one_interrupted_job_and_names_several() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = |job: &'static str| {
        vec![
            "-t",
            "t",
            "--job",
            job,
            "--checkpoint-rows",
            "100",
            "orders",
        ]
    };
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:2", &load("alpha"))
    ));
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:2", &load("beta"))
    ));
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("2 jobs of t are interrupted (alpha, beta)"),
        "{}",
        stderr(&out)
    );
    assert_code(&w.run(&["-t", "t", "--job", "alpha", "--abort"]), 0);
    let out = w.run(&["-t", "t", "--abort", "--json"]);
    assert_code(&out, 0);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["outcome"], "aborted");
    assert_eq!(summary["job"], "beta");
    assert!(table_rows(&w.path("t")).is_empty());
}

/// The inputs an aborted run finished before it stopped count as not loaded too: the
/// next load reads them again (the fold of an aborted run adds nothing to the manifest).
#[test]
fn an_input_the_aborted_run_had_finished_loads_again() {
    let w = Workdir::new();
    w.write("in/a.csv", "id,amount\n1,2.50\n2,3.00\n");
    let b = w.write("in/b.csv", "id,amount\n3,1.00\n4,abc\n");
    let load = [
        "-t",
        "t",
        "--cast",
        "amount=decimal(10,2)",
        "--checkpoint-rows",
        "1",
        "in",
    ];
    let out = w.run(&load);
    assert_code(&out, 1);
    let status = w.run(&["-t", "t", "--status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        json[0]["checkpoints_committed"].as_u64().unwrap() >= 2,
        "a.csv was finished before the bad row: {json}"
    );
    assert_code(&w.run(&["-t", "t", "--abort"]), 0);
    std::fs::write(&b, "id,amount\n3,1.00\n4,4.00\n").unwrap();
    let out = w.run(&load);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("loaded 4 rows") && stderr(&out).contains("from 2 input(s)"),
        "{}",
        stderr(&out)
    );
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("in")]),
        "after abort and the fixed load",
    );
}
