//! Plain loads: what lands in the table, re-runs, reloads, summaries.

use crate::util::*;

#[test]
fn fixture_load_lands_every_row_once_with_partitions_restored() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let out = w.run(&["--target", "t", "--partition-by", "dt,country", "orders"]);
    assert_code(&out, 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[orders]),
        "orders load",
    );
    assert!(visible_debris(&w.path("t")).is_empty());
    let summary = stderr(&out);
    assert!(
        summary.contains("loaded 912 rows (912 read, 0 dropped, 0 rejected) from 3 input(s)"),
        "{summary}"
    );
}

/// Rows of about 300 KB: a batch is full after four (at 1 MiB, not 4096 rows), so
/// barriers every 7 rows fall inside batches, and chunks of 1 MB hold a few rows each.
#[test]
fn wide_rows_load_exactly_in_batches_cut_by_bytes() {
    let mut text = String::from("id,country,blob\n");
    for i in 0..30 {
        let blob = format!("{i}").repeat(300_000 / (1 + i / 10));
        let blob = if i % 3 == 0 {
            format!("\"{blob}\n\"\"\"")
        } else {
            blob
        };
        text.push_str(&format!("{i},{},{blob}\n", ["de", "fr"][i % 2]));
    }
    for threads in ["1", "4"] {
        let w = Workdir::new().with_env("INGEST_CHUNK_BYTES", "1000000");
        let input = w.write("in/wide.csv", &text);
        let out = w.run(&[
            "-t",
            "t",
            "-p",
            "country",
            "--checkpoint-rows",
            "7",
            "--threads",
            threads,
            "--json",
            "in",
        ]);
        assert_code(&out, 0);
        assert_same_rows(
            table_rows(&w.path("t")),
            input_rows(&[input]),
            &format!("wide rows, {threads} thread(s)"),
        );
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["checkpoints"], 5, "{summary}");
    }
}

#[test]
fn partition_columns_leave_the_file_body_and_files_have_a_header() {
    let w = Workdir::new();
    w.write("in/a.csv", "id,dt,v\n1,2026-11-28,x\n2,2026-11-29,y\n");
    assert_code(&w.run(&["-t", "t", "-p", "dt", "in"]), 0);
    let dir = w.path("t/dt=2026-11-28");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with("part-default-") && name.ends_with(".csv"),
        "{name}"
    );
    assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), "id,v\n1,x\n");
}

#[test]
fn rerun_loads_nothing_and_exits_zero() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&["-t", "t", "orders"]), 0);
    let before = table_rows(&w.path("t"));
    let out = w.run(&["-t", "t", "orders", "--json"]);
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outcome"], "nothing-to-load");
    assert_eq!(json["inputs_skipped"], 3);
    assert_same_rows(table_rows(&w.path("t")), before, "after re-run");
}

#[test]
fn a_new_file_in_the_directory_is_the_only_thing_loaded_next_time() {
    let w = Workdir::new();
    w.write("in/a.csv", "id\n1\n");
    assert_code(&w.run(&["-t", "t", "in"]), 0);
    w.write("in/b.csv", "id\n2\n");
    let out = w.run(&["-t", "t", "in", "--json"]);
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            json["inputs_loaded"].as_u64(),
            json["inputs_skipped"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(table_rows(&w.path("t")).len(), 2);
}

#[test]
fn a_touched_but_identical_input_still_counts_as_loaded() {
    let w = Workdir::new();
    let a = w.write("a.csv", "id\n1\n");
    assert_code(&w.run(&["-t", "t", "a.csv"]), 0);
    std::fs::write(&a, "id\n1\n").unwrap();
    let out = w.run(&["-t", "t", "a.csv"]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("nothing to load"), "{}", stderr(&out));
    assert_eq!(table_rows(&w.path("t")).len(), 1);
}

#[test]
fn a_changed_loaded_input_is_refused_until_reload() {
    let w = Workdir::new();
    let a = w.write("a.csv", "id\n1\n");
    assert_code(&w.run(&["-t", "t", "a.csv"]), 0);
    std::fs::write(&a, "id\n1\n2\n").unwrap();
    let out = w.run(&["-t", "t", "a.csv"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("changed since run") && stderr(&out).contains("--reload"),
        "{}",
        stderr(&out)
    );
    assert_eq!(table_rows(&w.path("t")).len(), 1);
    assert_code(&w.run(&["-t", "t", "a.csv", "--reload"]), 0);
    assert_eq!(table_rows(&w.path("t")).len(), 3);
}

#[test]
fn reload_loads_again_on_purpose() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    assert_code(&w.run(&["-t", "t", "a.csv"]), 0);
    assert_code(&w.run(&["-t", "t", "a.csv", "--reload"]), 0);
    assert_eq!(table_rows(&w.path("t")).len(), 2);
}

#[test]
fn dedupe_keeps_the_first_occurrence_across_files() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    assert_code(
        &w.run(&["-t", "t", "--dedupe-key", "order_id", "-p", "dt", "orders"]),
        0,
    );
    let expected = dedupe(input_rows(&[orders]), "order_id");
    assert_eq!(expected.len(), 900);
    assert_same_rows(table_rows(&w.path("t")), expected, "deduped orders");
}

#[test]
fn json_summary_agrees_with_the_table() {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&[
        "-t",
        "t",
        "-p",
        "dt",
        "--checkpoint-rows",
        "100",
        "--json",
        "--quiet",
        "orders",
    ]);
    assert_code(&out, 0);
    assert!(out.stderr.is_empty(), "--quiet printed: {}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outcome"], "loaded");
    assert_eq!(
        json["rows_written"].as_u64(),
        Some(table_rows(&w.path("t")).len() as u64)
    );
    assert_eq!(json["checkpoints"].as_u64(), Some(10));
    assert_eq!(json["inputs_loaded"].as_u64(), Some(3));
    assert!(json["run_id"].as_str().is_some_and(|id| !id.is_empty()));
}

#[test]
fn other_delimiters_and_column_order_per_file() {
    let w = Workdir::new();
    w.write("in/a.tsv", "id\tname\n1\tx,y\n");
    w.write("in/b.tsv", "name\tid\nz\t2\n");
    assert_code(&w.run(&["-t", "t", "--delimiter", "tab", "in"]), 0);
    let rows = table_rows(&w.path("t"));
    let pairs: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r["id"].clone(), r["name"].clone()))
        .collect();
    assert_eq!(
        pairs,
        [("1".into(), "x,y".into()), ("2".into(), "z".into())]
    );
}

#[test]
fn empty_inputs_load_nothing_but_count_as_loaded() {
    let w = Workdir::new();
    w.write("in/empty.csv", "");
    w.write("in/header-only.csv", "id,v\n");
    assert_code(&w.run(&["-t", "t", "in"]), 0);
    assert!(table_rows(&w.path("t")).is_empty());
    assert!(stderr(&w.run(&["-t", "t", "in"])).contains("nothing to load"));
}

#[test]
fn list_fail_points_names_the_contract_points() {
    let w = Workdir::new();
    let out = w.run(&["--list-fail-points"]);
    assert_code(&out, 0);
    let text = String::from_utf8(out.stdout).unwrap();
    for point in [
        "stage.snapshot.before",
        "sink.precommit.after",
        "checkpoint.complete.before",
        "commit.mid",
        "run.finished.before",
    ] {
        assert!(
            text.lines().any(|l| l == point),
            "{point} missing from:\n{text}"
        );
    }
}

#[test]
fn a_table_inside_its_input_directory_never_loads_itself() {
    let w = Workdir::new();
    w.write("data/a.csv", "id\n1\n");
    assert_code(&w.run(&["-t", "data/table", "data"]), 0);
    w.write("data/b.csv", "id\n2\n");
    let out = w.run(&["-t", "data/table", "data", "--json"]);
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["inputs_loaded"].as_u64(), Some(1));
    assert_eq!(table_rows(&w.path("data/table")).len(), 2);
}

/// The manifest, not only the last run's journal, is what remembers loaded inputs: a
/// third run still skips what the first one loaded.
#[test]
fn inputs_of_every_earlier_run_stay_loaded_not_only_the_last_runs() {
    let w = Workdir::new();
    w.write("in/a.csv", "id\n1\n");
    assert_code(&w.run(&["-q", "-t", "t", "in"]), 0);
    w.write("in/b.csv", "id\n2\n");
    assert_code(&w.run(&["-q", "-t", "t", "in"]), 0);
    w.write("in/c.csv", "id\n3\n");
    let out = w.run(&["-t", "t", "in"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("from 1 input(s)")
            && stderr(&out).contains("2 input(s) already loaded"),
        "{}",
        stderr(&out)
    );
    assert_eq!(table_rows(&w.path("t")).len(), 3);
}
