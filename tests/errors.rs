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

/// Issue 13.5: csv_core read an unterminated quote as one field holding every later
/// line, so rows 2 to 4 loaded as one merged row.
#[test]
fn an_unterminated_quote_fails_naming_the_line_it_opened_on_never_merging_rows() {
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&["-t", "t", "bad/unterminated.csv"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("bad/unterminated.csv:3: the quoted field opened on line 3 never closes"),
        "{err}"
    );
    assert!(table_rows(&w.path("t")).is_empty());

    // With room for errors it fails all the same (issue 39.3): no parser can tell where
    // the record really ended, so lines 4 and 5 must not vanish into one reject. The
    // checkpoint before it stays committed, and nothing is rejected.
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&[
        "-t",
        "t",
        "--max-errors",
        "1",
        "--checkpoint-rows",
        "1",
        "bad/unterminated.csv",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("bad/unterminated.csv:3: the quoted field opened on line 3 never closes")
            && err.contains("runs on to line 5")
            && err.contains("even with --max-errors"),
        "{err}"
    );
    let ids: Vec<String> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(ids, ["1"]);
    assert!(rejects_of(&w.path("t")).is_empty());
}

/// Issue 13.5: `"quoted"tail` was read as the field `quotedtail`.
#[test]
fn text_after_a_closing_quote_is_a_bad_row() {
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&["-t", "t", "bad/after-quote.csv"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(
            "bad/after-quote.csv:3: text follows the closing quote of the field opened on line 3"
        ),
        "{err}"
    );
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&["-t", "t", "--max-errors", "1", "bad/after-quote.csv"]);
    assert_code(&out, 0);
    let names: Vec<String> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["name"].clone())
        .collect();
    assert_eq!(names, ["ok", "fine \"x\""]);
    assert_eq!(rejects_of(&w.path("t")).len(), 1);
}

/// Issue 13.5: the wrong delimiter built a one-column table without a word.
#[test]
fn a_header_of_one_column_holding_another_delimiter_names_the_right_flag() {
    let w = Workdir::new();
    w.fixture("bad");
    let out = w.run(&["-t", "t", "bad/semicolons.csv"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("the header parsed as one column, \"id;name;amount\"")
            && err.contains("pass --delimiter \";\""),
        "{err}"
    );
    assert!(!w.path("t/_ingest/default/journal").exists());
    let out = w.run(&["-t", "t", "-d", ";", "bad/semicolons.csv"]);
    assert_code(&out, 0);
    assert_eq!(table_rows(&w.path("t")).len(), 2);

    // Tab, spelled the ways users type it.
    for spelling in ["\\t", "tab", "\t"] {
        let w = Workdir::new();
        w.fixture("bad");
        let out = w.run(&["-t", "t", "-d", spelling, "bad/tabs.tsv"]);
        assert_code(&out, 0);
        let rows = table_rows(&w.path("t"));
        assert_eq!(rows.len(), 2, "{spelling:?}");
        assert_eq!(rows[0]["amount"], "10", "{spelling:?}");
    }
    let out = Workdir::new();
    out.fixture("bad");
    let run = out.run(&["-t", "t", "bad/tabs.tsv"]);
    assert_code(&run, 1);
    assert!(
        stderr(&run).contains("pass --delimiter \"tab\""),
        "{}",
        stderr(&run)
    );
}

fn rejects_of(table: &std::path::Path) -> Vec<Row> {
    let dir = table.join("_rejects/default");
    let mut rows = Vec::new();
    if !dir.exists() {
        return rows;
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        rows.extend(read_csv(&entry.unwrap().path(), b','));
    }
    rows
}

#[test]
fn credentials_in_a_url_are_refused_before_anything_is_contacted_or_repeated() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    let secret = "FAKE-secret-in-url-91c2";
    for args in [
        vec![
            "-t",
            "t",
            "s3://AKIDEXAMPLE:FAKE-secret-in-url-91c2@bucket/in/",
        ],
        vec![
            "-t",
            "s3://AKIDEXAMPLE:FAKE-secret-in-url-91c2@bucket/table",
            "a.csv",
        ],
    ] {
        let out = w.run(&args);
        assert_code(&out, 2);
        let said = stderr(&out);
        assert!(said.contains("must not carry credentials"), "{said}");
        assert!(
            !said.contains(secret) && !said.contains("AKIDEXAMPLE"),
            "{said}"
        );
    }
    assert!(!w.path("t").exists(), "a refused load made the table");
}

#[test]
fn an_unreachable_object_store_target_is_a_clear_error_and_nothing_is_made_locally() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    let out = w
        .cmd()
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test-key")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret-9f3b")
        .env("AWS_REGION", "us-east-1")
        .env("INGEST_WORK_DIR", w.path("work"))
        .args(["-t", "s3://bucket/tables/orders", "a.csv"])
        .output()
        .unwrap();
    if cfg!(feature = "s3") {
        assert_code(&out, 1);
        assert!(
            stderr(&out).contains("s3://bucket/tables/orders/_ingest/default/lease"),
            "names what it could not reach: {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("test-secret-9f3b"));
    } else {
        assert_code(&out, 2);
        assert!(
            stderr(&out).contains("built without object-store support"),
            "{}",
            stderr(&out)
        );
    }
    assert!(
        !w.path("s3:").exists(),
        "made a local directory named after the URL"
    );
}
