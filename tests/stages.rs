//! Transform stages, job files and bad rows, driven through the binary. Expected rows
//! are computed here from the fixture files, independently of `ingest`.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use crate::util::*;

/// The messy-orders pipeline: nulls, casts, two derived columns (one divides), a filter,
/// dedupe, a dropped column, partitions, small checkpoints, rejects allowed.
const MESSY: &[&str] = &[
    "-t",
    "t",
    "--null-markers",
    ",NULL",
    "--cast",
    "order_id=int",
    "--cast",
    "amount=decimal(12,2)",
    "--cast",
    "qty=int",
    "--cast",
    "ts=timestamp",
    "--derive",
    "dt=date(ts)",
    "--derive",
    "unit_price=amount / qty",
    "--filter",
    "country != 'XX'",
    "--dedupe-key",
    "order_id",
    "--drop",
    "email",
    "-p",
    "dt",
    "--checkpoint-rows",
    "50",
    "--max-errors",
    "1000",
    "messy",
];

fn is_decimal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, "0"));
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// What the messy pipeline must produce: (table rows, rejected (file name, line)).
fn messy_expected(dir: &Path) -> (Vec<Row>, Vec<(String, u64)>) {
    let mut rows = Vec::new();
    let mut rejects = Vec::new();
    let mut seen = HashSet::new();
    for name in ["orders-0.csv", "orders-1.csv"] {
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .from_path(dir.join(name))
            .unwrap();
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        for record in reader.records() {
            let record = record.unwrap();
            let line = record.position().unwrap().line();
            if record.len() != header.len() {
                rejects.push((name.to_string(), line));
                continue;
            }
            let r: BTreeMap<String, String> = header
                .iter()
                .cloned()
                .zip(record.iter().map(String::from))
                .collect();
            let ts_ok =
                r["ts"].len() == 20 && r["ts"].ends_with('Z') && r["ts"].as_bytes()[10] == b'T';
            if !is_decimal(&r["amount"]) || !ts_ok || r["qty"] == "0" {
                rejects.push((name.to_string(), line));
                continue;
            }
            if r["country"] == "XX" || !seen.insert(r["order_id"].clone()) {
                continue;
            }
            let amount: f64 = r["amount"].parse().unwrap();
            let qty: i64 = r["qty"].parse().unwrap();
            let mut out = r.clone();
            out.remove("email");
            out.insert("amount".into(), format!("{amount:.2}"));
            out.insert("dt".into(), r["ts"][..10].to_string());
            out.insert(
                "unit_price".into(),
                (format!("{amount:.2}").parse::<f64>().unwrap() / qty as f64).to_string(),
            );
            if out["note"] == "NULL" {
                out.insert("note".into(), String::new());
            }
            rows.push(out);
        }
    }
    (rows, rejects)
}

/// Committed rejects as (file name, line).
fn committed_rejects(table: &Path) -> Vec<(String, u64)> {
    let dir = table.join("_rejects/default");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        assert!(path.to_str().unwrap().ends_with(".csv.rejects"), "{path:?}");
        for row in read_csv(&path, b',') {
            let file = Path::new(&row["source_file"])
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            out.push((file, row["line"].parse().unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn the_messy_pipeline_gives_exactly_the_expected_rows_and_rejects() {
    let w = Workdir::new();
    let dir = w.fixture("messy");
    let out = w.run(MESSY);
    assert_code(&out, 0);
    let (rows, mut rejects) = messy_expected(&dir);
    assert_same_rows(table_rows(&w.path("t")), rows, "messy pipeline");
    rejects.sort();
    assert_eq!(committed_rejects(&w.path("t")), rejects);
    assert!(
        stderr(&out).contains(&format!("{} rejected", rejects.len())),
        "{}",
        stderr(&out)
    );
}

#[test]
fn stages_keep_exactly_once_through_every_crash_point() {
    let reference = Workdir::new();
    reference.fixture("messy");
    assert_code(&reference.run(MESSY), 0);
    let want_rows = table_rows(&reference.path("t"));
    let want_rejects = committed_rejects(&reference.path("t"));
    let points = [
        "stage.snapshot.after",
        "sink.precommit.after",
        "checkpoint.complete.after",
        "commit.mid",
        "run.finished.before",
    ]
    .map(String::from);
    let crashes = crash_matrix(
        &points,
        &[1, 3, 6],
        false,
        MESSY,
        || {
            let w = Workdir::new();
            w.fixture("messy");
            (w, ())
        },
        |_| {},
        |run| {
            assert_same_rows(table_rows(&run.w.path("t")), want_rows.clone(), &run.spec);
            let rejects = committed_rejects(&run.w.path("t"));
            assert_eq!(rejects, want_rejects, "{}: rejects", run.spec);
        },
    );
    assert!(crashes >= 12, "only {crashes} crashes");
}

#[test]
fn the_first_bad_row_fails_the_run_with_file_line_column_and_reason() {
    let w = Workdir::new();
    w.write("in.csv", "id,amount\n1,2.50\n2,abc\n3,1.00\n");
    let out = w.run(&[
        "-t",
        "t",
        "--cast",
        "amount=decimal(10,2)",
        "--checkpoint-rows",
        "1",
        "in.csv",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(
            "in.csv:3: column \"amount\": cannot read \"abc\" as decimal(10,2): expected a \
             number, such as 1234.55"
        ),
        "{err}"
    );
    assert!(err.contains("--max-errors"), "{err}");
    // Checkpoint 1 (line 2) is committed; nothing of the failing checkpoint is visible.
    let rows = table_rows(&w.path("t"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["amount"], "2.50");
    // The same run finishes once bad rows may go to the rejects.
    assert_code(&w.run(&["-t", "t", "--recover", "--max-errors", "5"]), 0);
    assert_eq!(table_rows(&w.path("t")).len(), 2);
    assert_eq!(
        committed_rejects(&w.path("t")),
        vec![("in.csv".to_string(), 3)]
    );
}

#[test]
fn exceeding_max_errors_fails_cleanly() {
    let w = Workdir::new();
    w.write("in.csv", "id\n1\nx\ny\n4\nz\n");
    let out = w.run(&["-t", "t", "--cast", "id=int", "--max-errors", "2", "in.csv"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("too many bad rows: 3 exceed --max-errors 2; the last one: "),
        "{err}"
    );
    assert!(
        err.contains("in.csv:6: column \"id\": cannot read \"z\" as int"),
        "{err}"
    );
    assert!(table_rows(&w.path("t")).is_empty());
    assert!(committed_rejects(&w.path("t")).is_empty());
}

#[test]
fn the_readme_job_file_loads_the_fixtures() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    std::fs::copy(fixtures().join("orders.toml"), w.path("orders.toml")).unwrap();
    let out = w.run(&["--config", "orders.toml", "--target", "t"]);
    assert_code(&out, 0);
    // Independently: dedupe by order_id, drop email, "N/A" and "" notes are null (empty).
    let mut expected = dedupe(input_rows(&[orders]), "order_id");
    for row in &mut expected {
        row.remove("email");
        if row["note"] == "N/A" {
            row.insert("note".into(), String::new());
        }
    }
    assert_same_rows(table_rows(&w.path("t")), expected, "job file load");
    assert!(
        w.path("t/_ingest/orders/manifest").exists(),
        "the job name comes from the file"
    );
}

#[test]
fn a_schema_refuses_inputs_that_do_not_conform() {
    let w = Workdir::new();
    w.write("in.csv", "id,extra\n1,x\n");
    w.write(
        "job.toml",
        "inputs = [\"in.csv\"]\n[schema]\ncolumns = { id = \"int\" }\n",
    );
    let out = w.run(&["--config", "job.toml", "-t", "t"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("input column(s) \"extra\" are not in the schema"),
        "{}",
        stderr(&out)
    );
    w.write(
        "job.toml",
        "inputs = [\"in.csv\"]\n[schema]\ncolumns = { id = \"int\" }\nextra_columns = \"drop\"\n",
    );
    assert_code(&w.run(&["--config", "job.toml", "-t", "t"]), 0);
    assert_eq!(
        table_rows(&w.path("t")),
        vec![[("id".to_string(), "1".to_string())].into()]
    );
    w.write(
        "job2.toml",
        "inputs = [\"in.csv\"]\n[schema]\ncolumns = { id = \"int\", missing = \"date\" }\n",
    );
    let out = w.run(&["--config", "job2.toml", "-t", "t2"]);
    assert!(
        stderr(&out).contains("the schema declares column(s) \"missing\" that the input lacks"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_invalid_job_file_fails_before_reading_naming_key_and_line() {
    let w = Workdir::new();
    w.write("in.csv", "id\n1\n");
    w.write(
        "job.toml",
        "inputs = [\"in.csv\"]\n\n[[stage]]\ntype = \"filter\"\nexprs = \"id > 0\"\n",
    );
    let out = w.run(&["--config", "job.toml", "-t", "t"]);
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("job.toml is invalid") && err.contains("line 3") && err.contains("exprs"),
        "{err}"
    );
    assert!(!w.path("t").exists(), "something was written");
}

#[test]
fn expression_mistakes_point_at_the_column() {
    let w = Workdir::new();
    w.write("in.csv", "id,name\n1,a\n");
    let out = w.run(&["-t", "t", "--filter", "name = 'a' AND id >", "in.csv"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("stage 1 (filter): expected a value, found end of expression (at column 20)"),
        "{err}"
    );
    assert!(
        err.contains("name = 'a' AND id >\n                     ^"),
        "{err}"
    );
    let out = w.run(&["-t", "t", "--filter", "name > 3", "in.csv"]);
    assert!(
        stderr(&out).contains("cannot compare string and int; cast a column first (at column 6)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn metadata_constant_select_and_rename_columns() {
    let w = Workdir::new();
    w.write("in.csv", "id,name,secret\n1,  Ann  ,x\n");
    w.write(
        "job.toml",
        r#"inputs = ["in.csv"]
[[stage]]
type = "metadata"
column = "src_line"
field = "source_line"
[[stage]]
type = "constant"
column = "origin"
value = "crm"
[[stage]]
type = "trim"
[[stage]]
type = "rename"
columns = { name = "customer" }
[[stage]]
type = "select"
columns = ["customer", "id", "src_line", "origin"]
"#,
    );
    assert_code(&w.run(&["--config", "job.toml", "-t", "t"]), 0);
    let rows = table_rows(&w.path("t"));
    let want: Row = [
        ("customer", "Ann"),
        ("id", "1"),
        ("src_line", "2"),
        ("origin", "crm"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(rows, vec![want]);
}

#[test]
fn infer_schema_prints_a_schema_section_for_a_job_file() {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&["--infer-schema", "orders"]);
    assert_code(&out, 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("[schema]\n"), "{text}");
    for part in [
        "order_id = \"int\"",
        "dt = \"date\"",
        "ts = \"timestamp\"",
        "amount = \"float\"",
        "note = \"string\"",
    ] {
        assert!(text.contains(part), "{part} missing: {text}");
    }
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    assert!(parsed["schema"]["columns"].as_table().unwrap().len() == 9);
}
