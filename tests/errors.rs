//! Bad inputs and bad command lines: the exact message users see, the exit code, and
//! nothing of a failing checkpoint visible.

use crate::util::*;

#[test]
fn a_ragged_row_fails_with_file_line_and_reason_and_hides_its_checkpoint() {
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&["-t", "t", "--checkpoint-rows", "1", "bad/ragged.csv"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("bad/ragged.csv:3: expected 3 fields as in the header, found 2"),
        "{err}"
    );
    assert!(err.contains("--recover"), "{err}");
    // Checkpoint 1 (line 2) committed; the failing checkpoint 2 left nothing visible.
    let rows = table_rows(&w.path("t"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["id"], "1");
    assert!(visible_debris(&w.path("t")).is_empty());
}

#[test]
fn invalid_utf8_fails_naming_file_line_and_field() {
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&["-t", "t", "bad/latin1.csv"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("bad/latin1.csv:2: field 2 is not valid UTF-8"),
        "{}",
        stderr(&out)
    );
    assert!(table_rows(&w.path("t")).is_empty());
}

#[test]
fn inputs_with_different_columns_fail_before_writing() {
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&["-t", "t", "bad/mismatch"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("mismatch/b.csv:1: the header does not match the table"),
        "{err}"
    );
    assert!(err.contains("column \"name\" is missing"), "{err}");
}

#[test]
fn a_partition_column_missing_from_the_input_is_named_before_anything_starts() {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&["-t", "t", "-p", "region", "orders"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("--partition-by column \"region\" is not in the records"),
        "{}",
        stderr(&out)
    );
    assert!(
        !w.path("t/_ingest/default/journal").exists(),
        "a run was started"
    );
}

#[test]
fn a_missing_input_is_an_error_not_an_empty_load() {
    let w = Workdir::new();
    let out = w.run(&["-t", "t", "nope.csv"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("input nope.csv cannot be read"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_errors_exit_2() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    for args in [
        &["a.csv"][..],
        &["-t", "t"],
        &["-t", "t", "--delimiter", "ab", "a.csv"],
        &["-t", "t", "--checkpoint-rows", "0", "a.csv"],
        &["-t", "t", "--job", "../x", "a.csv"],
        &["-t", "t", "-p", "_hidden", "a.csv"],
        &["-t", "t", "--recover", "a.csv"],
        &["-t", "t", "--no-such-flag", "a.csv"],
    ] {
        let out = w.run(args);
        assert_code(&out, 2);
        assert!(!stderr(&out).is_empty(), "{args:?} printed nothing");
    }
}

#[test]
fn an_unknown_fail_point_is_refused_rather_than_ignored() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    let out = w.run_failing("no.such.point", &["-t", "t", "a.csv"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("unknown point"), "{}", stderr(&out));
}
