//! What a run leaves behind when it fails or is undone (issue 39): a bad quote never
//! takes good lines with it; table state (the contract, a Delta table's log) belongs to
//! the run that made it; a run that committed nothing needs no `--abort`.

use std::path::Path;

use crate::util::*;

/// `rows` CSV rows `id,name,amount`, with `bad` (line number → the line's text) in place
/// of the generated lines.
fn csv_with(rows: usize, bad: &[(usize, &str)]) -> String {
    let mut out = String::from("id,name,amount\n");
    for i in 1..=rows {
        // Line i + 1 of the file holds row i.
        match bad.iter().find(|(line, _)| *line == i + 1) {
            Some((_, text)) => out.push_str(text),
            None => out.push_str(&format!("{i},name {i},{}.50", i * 3)),
        }
        out.push('\n');
    }
    out
}

#[test]
fn an_unterminated_quote_under_max_errors_fails_naming_its_lines_instead_of_swallowing_the_file() {
    for threads in ["1", "2", "4"] {
        let w = Workdir::new();
        w.write(
            "in/a.csv",
            csv_with(2000, &[(101, "100,\"unterminated,300.50")]),
        );
        let out = w.run(&["-t", "t", "--max-errors", "10", "--threads", threads, "in"]);
        assert_code(&out, 1);
        let err = stderr(&out);
        assert!(err.contains("a.csv:101:"), "{err}");
        assert!(err.contains("runs on to line 2001"), "{err}");
        assert!(err.contains("even with --max-errors"), "{err}");
        assert!(table_rows(&w.path("t")).is_empty(), "threads {threads}");
        assert!(
            !w.path("t/_rejects").exists(),
            "nothing goes to the rejects"
        );
    }
}

#[test]
fn a_stray_quote_closed_fifty_lines_later_fails_the_run_and_rejects_no_good_line() {
    let w = Workdir::new();
    w.write(
        "in/a.csv",
        csv_with(
            200,
            &[(11, "10,\"stray,30.50"), (61, "60,closes\" here,180.50")],
        ),
    );
    let out = w.run(&["-t", "t", "--max-errors", "10", "--json", "in"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("a.csv:11:") && err.contains("line 61"),
        "{err}"
    );
    // The corrected file loads in full with the same command: no run to abort first.
    w.write("in/a.csv", csv_with(200, &[]));
    let out = w.run(&["-t", "t", "--max-errors", "10", "in"]);
    assert_code(&out, 0);
    assert_eq!(table_rows(&w.path("t")).len(), 200);
}

#[test]
fn a_multi_line_record_of_the_wrong_width_fails_the_run_even_with_max_errors() {
    let w = Workdir::new();
    w.write("in/a.csv", "id,name\n1,a\n2,\"b\nc\",extra\n3,d\n");
    let out = w.run(&["-t", "t", "--max-errors", "10", "in"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("a.csv:3:"), "{}", stderr(&out));
}

#[test]
fn a_bad_row_on_one_line_is_still_set_aside_with_max_errors() {
    let w = Workdir::new();
    w.write(
        "in/a.csv",
        csv_with(
            50,
            &[(5, "4,\"quoted\"tail,12.50"), (9, "8,too,many,fields")],
        ),
    );
    let out = w.run(&["-t", "t", "--max-errors", "10", "--json", "in"]);
    assert_code(&out, 0);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(summary["rows_rejected"], 2, "{summary}");
    assert_eq!(summary["rows_written"], 48, "{summary}");
    assert_eq!(table_rows(&w.path("t")).len(), 48);
}

#[test]
fn a_load_that_fails_before_its_first_checkpoint_leaves_no_run_behind() {
    let w = Workdir::new();
    w.fixture("orders");
    // A cast the data does not fit: the first bad row fails the run.
    let out = w.run(&["-t", "t", "--cast", "customer=int", "orders"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("nothing was loaded, and the run was removed"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("--abort"), "{}", stderr(&out));
    // The cron line's --recover has nothing to meet again, and the corrected command runs.
    let recovered = w.run(&["-t", "t", "--recover"]);
    assert_code(&recovered, 0);
    assert!(stderr(&recovered).contains("nothing to recover"));
    assert_code(&w.run(&["-t", "t", "orders"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("orders")]),
        "after the corrected load",
    );
}

#[test]
fn a_load_killed_before_its_first_checkpoint_is_cleared_by_the_next_load() {
    for point in [
        "run.started.after",
        "sink.precommit.before",
        "checkpoint.complete.before",
    ] {
        let w = Workdir::new();
        w.fixture("orders");
        let args = ["-t", "t", "-p", "dt", "orders"];
        let out = w.run_failing(point, &args);
        assert!(crashed(&out), "{point}: {}", stderr(&out));
        let out = w.run(&args);
        assert_code(&out, 0);
        let cleared: Vec<_> = stderr(&out)
            .lines()
            .filter(|l| l.contains("cleared run"))
            .map(str::to_string)
            .collect();
        assert_eq!(cleared.len(), 1, "{point}: {}", stderr(&out));
        assert!(
            cleared[0].contains("before its first checkpoint"),
            "{cleared:?}"
        );
        assert_same_rows(
            table_rows(&w.path("t")),
            input_rows(&[w.path("orders")]),
            point,
        );
    }
}

#[test]
fn a_load_killed_after_a_checkpoint_still_needs_recover_or_abort() {
    let w = Workdir::new();
    w.fixture("orders");
    let args = ["-t", "t", "--checkpoint-rows", "100", "orders"];
    let out = w.run_failing("checkpoint.committed.after", &args);
    assert!(crashed(&out));
    let out = w.run(&args);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("--recover"), "{}", stderr(&out));
}

fn old_and_new(w: &Workdir) {
    w.write("old/1.csv", "id,name\n1,a\n2,b\n");
    w.write("batch/1-new.csv", "id,name,extra\n3,c,x\n4,d,y\n");
    w.write("batch/2-old.csv", "id,name\n5,e\n");
    w.write("later/3-old.csv", "id,name\n6,f\n");
}

fn contract_columns(table: &Path) -> String {
    std::fs::read_to_string(table.join("_ingest/contract.json")).expect("contract")
}

#[test]
fn an_evolution_that_fails_before_committing_leaves_the_contract_as_it_was() {
    let w = Workdir::new();
    old_and_new(&w);
    assert_code(&w.run(&["-t", "t", "old"]), 0);
    let before = contract_columns(&w.path("t"));
    // A file lacking the new column loads it as null (issue 40.4); a bad row fails.
    w.write("bad/1-new.csv", "id,name,extra\n3,c,x\n");
    w.write("bad/2-short.csv", "id,name,extra\n5,e\n");
    let out = w.run(&["-t", "t", "--evolve", "add-columns", "bad"]);
    assert_code(&out, 1);
    assert_eq!(contract_columns(&w.path("t")), before);
    assert_code(&w.run(&["-t", "t", "later"]), 0);
}

#[test]
fn abort_puts_back_the_contract_a_run_evolved() {
    let w = Workdir::new();
    old_and_new(&w);
    assert_code(&w.run(&["-t", "t", "old"]), 0);
    let before = contract_columns(&w.path("t"));
    let out = w.run_failing(
        "checkpoint.committed.after",
        &[
            "-t",
            "t",
            "--evolve",
            "add-columns",
            "--checkpoint-rows",
            "1",
            "batch/1-new.csv",
        ],
    );
    assert!(crashed(&out), "{}", stderr(&out));
    assert!(contract_columns(&w.path("t")).contains("extra"));
    assert_code(&w.run(&["-t", "t", "--abort"]), 0);
    assert_eq!(contract_columns(&w.path("t")), before);
    assert_code(&w.run(&["-t", "t", "later"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("old"), w.path("later")]),
        "old-format files after the abort",
    );
}

// Without the delta feature `--table-format delta` is refused before the table is read.
#[cfg(feature = "delta")]
#[test]
fn a_hive_load_into_a_delta_table_and_the_other_way_round_are_refused_writing_nothing() {
    let w = Workdir::new();
    w.fixture("orders");
    w.write("delta/_delta_log/00000000000000000000.json", "{}\n");
    let out = w.run(&["-t", "delta", "orders"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("--table-format delta"),
        "{}",
        stderr(&out)
    );
    assert!(!w.path("delta/_ingest").exists(), "nothing is written");
    assert_code(&w.run(&["-t", "hive", "orders"]), 0);
    let listing = walk(&w.path("hive"));
    let out = w.run(&["-t", "hive", "--table-format", "delta", "orders"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("--table-format hive"),
        "{}",
        stderr(&out)
    );
    assert_eq!(walk(&w.path("hive")), listing, "nothing is written");
}

#[cfg(feature = "delta")]
#[test]
fn a_delta_table_is_created_by_its_first_commit_and_an_aborted_first_load_leaves_no_log() {
    let w = Workdir::new();
    w.fixture("orders");
    let args = [
        "-t",
        "t",
        "--table-format",
        "delta",
        "--cast",
        "order_id=int",
        "orders",
    ];
    let out = w.run_failing("checkpoint.complete.before", &args);
    assert!(crashed(&out));
    assert!(
        !w.path("t/_delta_log").exists(),
        "no log before the first commit"
    );
    assert_code(&w.run(&["-t", "t", "--abort"]), 0);
    assert!(!w.path("t/_delta_log").exists());
    // Another schema is no longer refused: the aborted load left no table behind.
    let other = ["-t", "t", "--table-format", "delta", "orders"];
    assert_code(&w.run(&other), 0);
    let first = std::fs::read_to_string(w.path("t/_delta_log/00000000000000000000.json"))
        .expect("version 0");
    for action in ["\"protocol\"", "\"metaData\"", "\"add\"", "\"txn\""] {
        assert!(first.contains(action), "version 0 lacks {action}:\n{first}");
    }
    let log = crate::delta::delta_log(&w.path("t"));
    assert_eq!(log.version, 0, "one commit");
    assert_eq!(log.txns, [("ingest:default".to_string(), 1)]);
    assert_eq!(crate::delta::delta_rows(&w.path("t")).len(), 912);
}
