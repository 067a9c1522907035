//! Typed columns without a job file: a first Parquet or Delta load infers its CSV
//! columns' types from a sample of every input, records them in the contract, and later
//! loads cast to them; `--infer-schema` prints the same inference; text tables and
//! `--no-infer` keep strings.

#![cfg(feature = "parquet")]

use std::collections::BTreeMap;
use std::path::Path;

use crate::util::*;

/// Column name to Arrow type, as a Parquet file of the table stores them.
fn parquet_types(table: &Path) -> BTreeMap<String, String> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let (path, _) = data_files(table)
        .into_iter()
        .find(|(p, _)| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a Parquet file");
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    builder
        .schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect()
}

fn types(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const FIRST: &str = "id,zip,amount,day,paid,at,note\n\
    1,02134,1.50,2026-11-28,true,2026-11-28 10:00:00,hello\n\
    2,10001,NA,2026-11-29,FALSE,2026-11-28T11:30:00+01:00,\n\
    3,,2e3,,,,NA\n";

#[test]
fn a_first_parquet_load_types_its_columns_and_later_loads_cast_to_them() {
    let w = Workdir::new();
    w.write("in/a.csv", FIRST);
    let args = ["-t", "t", "--format", "parquet", "--null-markers", "NA"];
    let out = w.run(&[&args[..], &["in"]].concat());
    assert_code(&out, 0);
    let expected = [
        ("id", "int"),
        ("zip", "string"),
        ("amount", "float"),
        ("day", "date"),
        ("paid", "bool"),
        ("at", "timestamp"),
        ("note", "string"),
    ];
    assert_eq!(contract_types(&w.path("t")), types(&expected));
    let stored = parquet_types(&w.path("t"));
    assert_eq!(stored["id"], "Int64");
    assert_eq!(stored["amount"], "Float64");
    assert_eq!(stored["day"], "Date32");
    assert_eq!(stored["paid"], "Boolean");
    assert_eq!(stored["at"], "Timestamp(µs, \"UTC\")");
    assert_eq!(stored["zip"], "Utf8");

    // --infer-schema prints what the load inferred, by the same rules.
    let out = w.run(&["--infer-schema", "--null-markers", "NA", "in"]);
    assert_code(&out, 0);
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    for (name, ty) in expected {
        assert!(printed.contains(&format!("{name} = \"{ty}\"")), "{printed}");
    }

    // A later load casts to the contract: its columns in another order, no NA markers,
    // a value that does not fit is a bad row.
    w.write(
        "in/b.csv",
        "amount,id,zip,day,paid,at,note\n3.25,4,07001,2026-11-30,false,2026-11-30 09:00:00,x\n\
         abc,5,1,2026-11-30,true,,y\n",
    );
    let later = ["-t", "t", "--format", "parquet", "in"];
    let out = w.run(&later);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("cannot read \"abc\" as float"),
        "{}",
        stderr(&out)
    );
    let out = w.run(&[&later[..], &["--max-errors", "1"]].concat());
    assert_code(&out, 0);

    let mut rows: Vec<Vec<String>> = data_files(&w.path("t"))
        .into_iter()
        .flat_map(|(path, part)| parquet_file_rows(&path, &part))
        .map(|r| {
            ["id", "zip", "amount", "day", "paid", "at", "note"]
                .map(|c| r[c].clone())
                .to_vec()
        })
        .collect();
    rows.sort();
    let expected_rows = [
        [
            "1",
            "02134",
            "1.5",
            "2026-11-28",
            "true",
            "2026-11-28T10:00:00Z",
            "hello",
        ],
        [
            "2",
            "10001",
            "",
            "2026-11-29",
            "false",
            "2026-11-28T10:30:00Z",
            "",
        ],
        ["3", "", "2000", "", "", "", ""],
        [
            "4",
            "07001",
            "3.25",
            "2026-11-30",
            "false",
            "2026-11-30T09:00:00Z",
            "x",
        ],
    ]
    .map(|r| r.map(String::from).to_vec());
    assert_eq!(rows, expected_rows);
}

#[test]
fn the_sample_is_ten_thousand_rows_of_every_input() {
    let w = Workdir::new();
    let mut ints = String::from("n,m\n");
    for i in 0..10_000 {
        ints.push_str(&format!("{i},{i}\n"));
    }
    // Row 10,001 of its input is past the sample: n is inferred int, and that row is bad.
    w.write("late/a.csv", format!("{ints}x,1\n"));
    let out = w.run(&["-t", "late_t", "--format", "parquet", "late"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("cannot read \"x\" as int"),
        "{}",
        stderr(&out)
    );
    assert!(!w.path("late_t/_ingest/contract.json").exists());

    // Row 10,000 is in it: n stays text.
    let mut last_in = ints.clone();
    last_in.truncate(ints.rfind("9999,").unwrap());
    w.write("edge/a.csv", format!("{last_in}x,9999\n"));
    let out = w.run(&["-t", "edge_t", "--format", "parquet", "edge"]);
    assert_code(&out, 0);
    assert_eq!(
        contract_types(&w.path("edge_t")),
        types(&[("n", "string"), ("m", "int")])
    );

    // Every input is sampled, not only the first: a later input's text keeps m text.
    w.write("two/1.csv", "n,m\n1,2\n");
    w.write("two/2.csv", "n,m\n3,four\n");
    let out = w.run(&["-t", "two_t", "--format", "parquet", "two"]);
    assert_code(&out, 0);
    assert_eq!(
        contract_types(&w.path("two_t")),
        types(&[("n", "int"), ("m", "string")])
    );
}

#[test]
fn text_tables_no_infer_and_a_job_that_types_keep_their_own_word() {
    let w = Workdir::new();
    w.write("in/a.csv", FIRST);
    let all_text = types(&[
        ("id", "string"),
        ("zip", "string"),
        ("amount", "string"),
        ("day", "string"),
        ("paid", "string"),
        ("at", "string"),
        ("note", "string"),
    ]);
    // CSV and JSON lines tables keep text.
    assert_code(&w.run(&["-t", "csv_t", "in"]), 0);
    assert_eq!(contract_types(&w.path("csv_t")), all_text);
    assert_code(&w.run(&["-t", "jsonl_t", "--format", "jsonl", "in"]), 0);
    assert_eq!(contract_types(&w.path("jsonl_t")), all_text);
    // --no-infer, and its job-file key.
    let out = w.run(&["-t", "plain_t", "--format", "parquet", "--no-infer", "in"]);
    assert_code(&out, 0);
    assert_eq!(contract_types(&w.path("plain_t")), all_text);
    assert_eq!(parquet_types(&w.path("plain_t"))["id"], "Utf8");
    w.write("job.toml", "infer = false\nformat = \"parquet\"\n");
    let out = w.run(&["-t", "file_t", "--config", "job.toml", "in"]);
    assert_code(&out, 0);
    assert_eq!(contract_types(&w.path("file_t")), all_text);
    // A job that casts a column decides every type: the others stay text.
    let out = w.run(&[
        "-t", "cast_t", "--format", "parquet", "--cast", "id=int", "in",
    ]);
    assert_code(&out, 0);
    let mut one_cast = all_text.clone();
    one_cast.insert("id".into(), "int".into());
    assert_eq!(contract_types(&w.path("cast_t")), one_cast);
}

#[cfg(feature = "delta")]
#[test]
fn a_first_delta_load_types_its_columns() {
    let w = Workdir::new();
    w.write("in/a.csv", FIRST);
    let out = w.run(&[
        "-t",
        "t",
        "--table-format",
        "delta",
        "--null-markers",
        "NA",
        "-p",
        "day",
        "in",
    ]);
    assert_code(&out, 0);
    assert_eq!(contract_types(&w.path("t"))["amount"], "float");
    assert_eq!(contract_types(&w.path("t"))["day"], "date");
    let log = std::fs::read_to_string(w.path("t/_delta_log/00000000000000000000.json")).unwrap();
    for (name, ty) in [
        ("id", "long"),
        ("amount", "double"),
        ("day", "date"),
        ("paid", "boolean"),
    ] {
        assert!(
            log.contains(&format!(
                "\\\"name\\\":\\\"{name}\\\",\\\"type\\\":\\\"{ty}\\\""
            )),
            "{name} {ty}: {log}"
        );
    }
}
