//! `--recover` outside the crash matrix: nothing to do, changed inputs, other debris.

use crate::util::*;

const LOAD: &[&str] = &["-t", "t", "-p", "dt", "--checkpoint-rows", "100", "orders"];

#[test]
fn nothing_to_recover_exits_zero_and_says_so() {
    let w = Workdir::new();
    let out = w.run(&["-t", "t", "--recover"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("nothing to recover"),
        "{}",
        stderr(&out)
    );
    assert!(!w.path("t").exists(), "recover created a table");
    w.fixture("orders");
    assert_code(&w.run(LOAD), 0);
    let out = w.run(&["-t", "t", "--recover", "--json"]);
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outcome"], "nothing-to-recover");
}

#[test]
fn an_input_changed_before_recover_fails_clearly_and_loads_nothing_twice() {
    let w = Workdir::new();
    w.fixture("orders");
    // Crash during the second file; then change that file.
    let original = input_rows(&[w.path("orders")]);
    assert!(crashed(&w.run_failing("checkpoint.complete.after:4", LOAD)));
    let second = w.path("orders/2026-11-27.csv");
    let mut text = std::fs::read_to_string(&second).unwrap();
    text = text.replacen("1300,", "9999,", 1);
    std::fs::write(&second, text).unwrap();
    let out = w.run(&["-t", "t", "--recover"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("2026-11-27.csv changed since the interrupted run"),
        "{}",
        stderr(&out)
    );
    // Checkpoint 4 had completed, so recovery published it before checking the inputs;
    // the table holds exactly the first 400 original rows and nothing of the edit.
    assert_same_rows(
        table_rows(&w.path("t")),
        original[..400].to_vec(),
        "after refused recovery",
    );
}

#[test]
fn a_same_size_edit_inside_the_loaded_prefix_is_caught_by_the_content_hash() {
    let w = Workdir::new();
    w.fixture("orders");
    assert!(crashed(&w.run_failing("checkpoint.complete.after:2", LOAD)));
    let first = w.path("orders/2026-11-26.csv");
    let meta = std::fs::metadata(&first).unwrap();
    let text = std::fs::read_to_string(&first)
        .unwrap()
        .replacen("1001,", "1009,", 1);
    std::fs::write(&first, text).unwrap();
    // Put the metadata back as it was, so only the content tells.
    let mtime = filetime_of(&meta);
    set_mtime(&first, mtime);
    let out = w.run(&["-t", "t", "--recover"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("first") && stderr(&out).contains("differ"),
        "{}",
        stderr(&out)
    );
}

fn filetime_of(meta: &std::fs::Metadata) -> std::time::SystemTime {
    meta.modified().unwrap()
}

fn set_mtime(path: &std::path::Path, when: std::time::SystemTime) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_modified(when).unwrap();
}

#[test]
fn recovery_leaves_other_jobs_staging_alone() {
    let w = Workdir::new();
    w.fixture("orders");
    assert!(crashed(&w.run_failing("sink.precommit.after:2", LOAD)));
    let foreign = w.write(
        "t/_ingest/other/pending/RUN/000001/part-x.csv.inprogress",
        "id\n1\n",
    );
    let stray = w.write("t/_ingest/default/pending/not-a-run/file", "x");
    let out = w.run(&["-t", "t", "--recover"]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("left alone"), "{}", stderr(&out));
    assert!(foreign.exists() && stray.exists());
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("orders")]),
        "after recovery",
    );
}

#[test]
fn a_complete_checkpoint_missing_a_staged_file_is_refused_and_none_of_it_published() {
    let w = Workdir::new();
    w.fixture("orders");
    // Checkpoint 1 stages a file per country of its 100 rows, then the run dies with
    // the checkpoint journaled as complete and nothing published.
    let load = [
        "-t",
        "t",
        "-p",
        "country",
        "--checkpoint-rows",
        "100",
        "orders",
    ];
    assert!(crashed(
        &w.run_failing("checkpoint.complete.after:1", &load)
    ));
    // Checkpoint 1's (the sinks had begun checkpoint 2's).
    let staged: Vec<_> = walk(&w.path("t/_ingest"))
        .into_iter()
        .filter(|f| {
            let path = f.to_string_lossy();
            path.ends_with(".inprogress") && path.contains("/000001/")
        })
        .collect();
    assert!(staged.len() >= 2, "{staged:?}");
    std::fs::remove_file(&staged[0]).unwrap();
    let out = w.run(&["-t", "t", "--recover"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("is journaled as complete but its staged file"),
        "{}",
        stderr(&out)
    );
    // Not published in part: the checkpoint's other files stay staged, the table empty.
    assert!(table_rows(&w.path("t")).is_empty());
    for file in &staged[1..] {
        assert!(file.exists(), "{} was moved", file.display());
    }
}
