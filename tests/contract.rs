//! The table contract (issue 13.3): the first load records the table's columns, types,
//! format, compression and partitioning; a later load of any job that disagrees fails
//! before reading a row, showing both sides; `--evolve add-columns` grows it on purpose.

use crate::util::*;

/// A table loaded once from the orders fixture, partitioned by day.
fn table() -> Workdir {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&["-t", "t", "-p", "dt", "orders"]), 0);
    assert!(w.path("t/_ingest/contract.json").exists());
    w
}

/// The load was refused before its run began: no journal, no job directory, the table's
/// rows unchanged.
#[track_caller]
fn refused_before_reading(w: &Workdir, job: &str, rows_before: usize) {
    assert!(
        !w.path(&format!("t/_ingest/{job}")).exists(),
        "job {job} started a run"
    );
    assert_eq!(table_rows(&w.path("t")).len(), rows_before);
}

#[test]
fn another_format_from_another_job_fails_before_reading_showing_both_sides() {
    let w = table();
    let before = table_rows(&w.path("t")).len();
    let out = w.run(&[
        "-t", "t", "--job", "b", "--reload", "-p", "dt", "--format", "jsonl", "orders",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("does not fit table t's contract"), "{err}");
    assert!(
        err.contains("table:     csv, compression none")
            && err.contains("this load: jsonl, compression none"),
        "{err}"
    );
    assert!(
        err.contains("format: the table is csv, this load writes jsonl"),
        "{err}"
    );
    refused_before_reading(&w, "b", before);
}

#[test]
fn other_partitioning_or_columns_fail_naming_each_difference() {
    let w = table();
    let before = table_rows(&w.path("t")).len();
    // --reload: the same inputs, another job's, on purpose (else refused as loaded).
    let out = w.run(&[
        "-t", "t", "--job", "b", "--reload", "-p", "country", "orders",
    ]);
    assert_code(&out, 1);
    assert!(
        stderr(&out)
            .contains("partitioning: the table is partitioned by [dt], this load by [country]"),
        "{}",
        stderr(&out)
    );
    refused_before_reading(&w, "b", before);

    let out = w.run(&[
        "-t",
        "t",
        "--job",
        "c",
        "--reload",
        "-p",
        "dt",
        "--drop",
        "email",
        "--cast",
        "amount=decimal(12,2)",
        "orders",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("this load lacks email string"), "{err}");
    assert!(
        err.contains("column amount: the table has string, this load has decimal(12,2)"),
        "{err}"
    );
    refused_before_reading(&w, "c", before);
}

#[test]
fn a_new_column_is_added_only_on_purpose_and_old_files_read_it_as_missing() {
    let w = table();
    let before = table_rows(&w.path("t")).len();
    let mut extra =
        String::from("order_id,dt,ts,customer,email,country,amount,currency,note,channel\n");
    extra.push_str("99001,2026-11-29,2026-11-29T10:00:00Z,c,e,DE,1.00,EUR,,web\n");
    extra.push_str("99002,2026-11-29,2026-11-29T11:00:00Z,c,e,FR,2.00,EUR,,shop\n");
    w.write("new/2026-11-29.csv", extra);
    let out = w.run(&["-t", "t", "-p", "dt", "new"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains(
            "this load adds channel string after the table's columns; pass --evolve add-columns"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(table_rows(&w.path("t")).len(), before);

    let out = w.run(&["-t", "t", "-p", "dt", "--evolve", "add-columns", "new"]);
    assert_code(&out, 0);
    let contract: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.path("t/_ingest/contract.json")).unwrap()).unwrap();
    let names: Vec<&str> = contract["contract"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"channel"));
    let rows = table_rows(&w.path("t"));
    assert_eq!(rows.len(), before + 2);
    assert_eq!(rows.iter().filter(|r| r.contains_key("channel")).count(), 2);

    // The evolved contract is the table's now: the old column list no longer fits.
    let out = w.run(&["-t", "t", "--job", "late", "--reload", "-p", "dt", "orders"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("this load lacks channel string"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_matching_load_of_another_job_passes_and_the_contract_stays() {
    let w = table();
    let recorded = std::fs::read(w.path("t/_ingest/contract.json")).unwrap();
    let out = w.run(&["-t", "t", "--job", "b", "--reload", "-p", "dt", "orders"]);
    assert_code(&out, 0);
    assert_eq!(
        std::fs::read(w.path("t/_ingest/contract.json")).unwrap(),
        recorded
    );
}

/// Issue 40.4: columns match by name. A later file with the table's columns in another
/// order loads each value under its own name; one lacking a column is refused naming the
/// column and `--evolve add-columns`, with which it loads that column as null (the
/// union by name of DuckDB's `union_by_name` and Spark's `mergeSchema`), across runs
/// and within one.
#[test]
fn columns_match_by_name_and_a_missing_one_loads_as_null_on_purpose() {
    let w = Workdir::new();
    w.write("a.csv", "id,name,amount\n1,ann,10\n");
    assert_code(&w.run(&["-t", "t", "a.csv"]), 0);
    w.write("b.csv", "amount,id,name\n20,2,bob\n");
    let out = w.run(&["-t", "t", "b.csv"]);
    assert_code(&out, 0);

    w.write("c.csv", "name,id\ncat,3\n");
    let out = w.run(&["-t", "t", "c.csv"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("lacks amount string; pass --evolve add-columns"),
        "{}",
        stderr(&out)
    );
    let out = w.run(&["-t", "t", "--evolve", "add-columns", "c.csv"]);
    assert_code(&out, 0);

    // Within one run: the first input sets the columns, a later one lacks one.
    w.write("d/1.csv", "id,name,amount\n4,dan,40\n");
    w.write("d/2.csv", "id,amount\n5,50\n");
    let out = w.run(&["-t", "t", "d"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("column \"name\" is missing")
            && stderr(&out).contains("--evolve add-columns"),
        "{}",
        stderr(&out)
    );
    let out = w.run(&["-t", "t", "--evolve", "add-columns", "d"]);
    assert_code(&out, 0);

    let mut rows: Vec<(String, String, String)> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| (r["id"].clone(), r["name"].clone(), r["amount"].clone()))
        .collect();
    rows.sort();
    let expected = [
        ("1", "ann", "10"),
        ("2", "bob", "20"),
        ("3", "cat", ""),
        ("4", "dan", "40"),
        ("5", "", "50"),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(rows, expected);
}
