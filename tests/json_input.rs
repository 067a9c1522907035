//! JSON lines inputs (`fixtures/events`: plain `.jsonl`, `.jsonl.gz`, `.ndjson.zst`):
//! loaded row for row, resumed on the exact record after a crash, bad lines reported.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

/// Columns holding JSON values other than strings: compared as parsed JSON, numbers by
/// value (a float column writes `1000.0` as `1000`), since the table keeps nested values
/// as the producer wrote them (spacing included).
const JSON_COLUMNS: [&str; 4] = ["event_id", "ms", "ok", "ctx"];

fn decoded(path: &Path) -> String {
    let file = std::fs::File::open(path).unwrap();
    let mut text = String::new();
    let name = path.to_string_lossy();
    if name.ends_with(".gz") {
        flate2::read::MultiGzDecoder::new(file)
            .read_to_string(&mut text)
            .unwrap();
    } else if name.ends_with(".zst") {
        zstd::stream::read::Decoder::new(file)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
    } else {
        std::io::BufReader::new(file)
            .read_to_string(&mut text)
            .unwrap();
    }
    text
}

fn canonical(column: &str, value: &str) -> String {
    if JSON_COLUMNS.contains(&column) && !value.is_empty() {
        let parsed: Value = serde_json::from_str(value).expect("a JSON value");
        match parsed.as_f64() {
            Some(n) => n.to_string(),
            None => parsed.to_string(),
        }
    } else {
        value.to_string()
    }
}

/// The events as rows, read here with serde_json: a missing key or null is an empty CSV
/// field, strings are their text, everything else its JSON.
fn expected(dir: &Path) -> Vec<Row> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut rows = Vec::new();
    for path in paths {
        for line in decoded(&path).lines().filter(|l| !l.trim().is_empty()) {
            let Value::Object(object) = serde_json::from_str(line).unwrap() else {
                panic!("{line}");
            };
            let mut row = Row::new();
            for column in [
                "event_id", "ts", "country", "user", "page", "ms", "ok", "ctx",
            ] {
                let text = match object.get(column) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                };
                row.insert(column.to_string(), canonical(column, &text));
            }
            rows.push(row);
        }
    }
    rows
}

fn actual(table: &Path) -> Vec<Row> {
    table_rows(table)
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|(k, v)| {
                    let v = canonical(&k, &v);
                    (k, v)
                })
                .collect()
        })
        .collect()
}

#[test]
fn json_lines_inputs_load_row_for_row_compressed_or_not() {
    let w = Workdir::new();
    let events = w.fixture("events");
    let out = w.run(&["-t", "t", "-p", "country", "events"]);
    assert_code(&out, 0);
    let want = expected(&events);
    assert_eq!(want.len(), 600);
    assert_same_rows(actual(&w.path("t")), want, "events");
    // A nested value is kept as the JSON text the producer wrote, spacing and all.
    let inputs: String = [
        "2026-11-26.jsonl",
        "2026-11-27.jsonl.gz",
        "2026-11-28.ndjson.zst",
    ]
    .iter()
    .map(|name| decoded(&events.join(name)))
    .collect();
    let nested: Vec<String> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["ctx"].clone())
        .filter(|t| t.starts_with('{') && t.len() > 2)
        .collect();
    assert!(nested
        .iter()
        .all(|t| inputs.contains(&format!("\"ctx\": {t}"))
            || inputs.contains(&format!("\"ctx\":{t}"))));
    assert!(nested.iter().any(|t| t.contains("\"ab\": ")));
    assert!(nested.iter().any(|t| t.contains("\"ab\":\"")));
}

#[test]
fn a_crashed_json_lines_load_resumes_on_the_exact_record() {
    for spec in [
        "source.barrier:2",
        "checkpoint.complete.after:4",
        "commit.mid:7",
        "sink.precommit.before:11",
        "checkpoint.committed.after:13",
    ] {
        let w = Workdir::new();
        let events = w.fixture("events");
        let load = [
            "-t",
            "t",
            "-p",
            "country",
            "--checkpoint-rows",
            "47",
            "events",
        ];
        let out = w.run_failing(spec, &load);
        assert!(crashed(&out), "{spec}: {}", stderr(&out));
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        assert_same_rows(actual(&w.path("t")), expected(&events), spec);
        assert!(visible_debris(&w.path("t")).is_empty(), "{spec}");
    }
}

#[test]
fn a_bad_json_line_fails_with_file_line_and_reason_or_goes_to_the_rejects() {
    let w = Workdir::new();
    w.write(
        "in/e.jsonl",
        "{\"id\": 1, \"v\": \"a\"}\n{\"id\": 2, \"v\": \"b\", \"w\": 0}\n{\"id\": 3,, }\n{\"v\": \"d\"}\n",
    );
    let out = w.run(&["-t", "t", "in"]);
    assert_code(&out, 1);
    let text = stderr(&out);
    assert!(
        text.contains("in/e.jsonl:3: not a JSON object: key must be a string at column 10"),
        "{text}"
    );
    // The failed run committed nothing and removed itself: the same command, with room
    // for the bad line, loads.
    assert!(text.contains("nothing was loaded"), "{text}");
    let out = w.run(&["-t", "t", "--max-errors", "2", "in"]);
    assert_code(&out, 0);
    // "w", first seen on line 2, is a column: null where an object lacks it.
    let rows: Vec<(String, String, String)> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| (r["id"].clone(), r["v"].clone(), r["w"].clone()))
        .collect();
    let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(rows, [s("1", "a", ""), s("2", "b", "0"), s("", "d", "")]);
    let rejects = w.path("t/_rejects/default");
    let file = std::fs::read_dir(&rejects)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let rejected = read_csv(&file.path(), b',');
    let reasons: Vec<(&str, &str, &str)> = rejected
        .iter()
        .map(|r| {
            (
                r["line"].as_str(),
                r["reason"].as_str(),
                r["record"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [(
            "3",
            "not a JSON object: key must be a string at column 10",
            "{\"id\": 3,, }"
        )]
    );
}

/// 1,001 objects: the first 1,000 are the sample (ids are integers, there is no key
/// "late"); the last breaks both.
fn past_the_sample(w: &Workdir) {
    let mut text = String::new();
    for i in 0..1000 {
        text.push_str(&format!("{{\"id\": {i}, \"v\": \"x\"}}\n"));
    }
    text.push_str("{\"id\": \"n/a\", \"v\": \"y\", \"late\": 1}\n");
    w.write("in/e.jsonl", text);
}

#[test]
fn a_key_or_a_type_the_sample_did_not_see_is_a_bad_row_naming_the_way_out() {
    let w = Workdir::new();
    past_the_sample(&w);
    let out = w.run(&["-t", "t", "in"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("in/e.jsonl:1001: key \"late\" is not a column")
            && err.contains("--json-new-keys drop"),
        "{err}"
    );
    let w = Workdir::new();
    past_the_sample(&w);
    let out = w.run(&["-t", "t", "--json-new-keys", "drop", "in"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("in/e.jsonl:1001: column \"id\": cannot read \"n/a\" as int"),
        "{}",
        stderr(&out)
    );
    let out = w.run(&[
        "-t",
        "t",
        "--json-new-keys",
        "drop",
        "--max-errors",
        "1",
        "in",
    ]);
    assert_code(&out, 0);
    assert_eq!(table_rows(&w.path("t")).len(), 1000);
}

/// Issue 13.8: JSON lines in, JSON lines out turned 1 into "1", true into "true" and
/// nested values into strings, and a key the first object lacked failed its row.
#[test]
fn json_keeps_its_types_from_json_lines_to_json_lines() {
    let w = Workdir::new();
    w.write(
        "in/e.jsonl",
        "{\"id\": 1, \"ok\": true, \"ms\": 1.5}\n\
         {\"id\": 2, \"ok\": false, \"ms\": 3, \"ctx\": {\"a\": [1, {\"b\": null}]}, \"tag\": \"x\"}\n\
         {\"id\": 3, \"ok\": null, \"ms\": null, \"ctx\": [], \"tag\": null}\n",
    );
    let out = w.run(&["-t", "t", "--format", "jsonl", "in"]);
    assert_code(&out, 0);
    let file = walk(&w.path("t"))
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".jsonl"))
        .unwrap();
    let rows: Vec<Value> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want: Vec<Value> = [
        r#"{"id": 1, "ok": true, "ms": 1.5, "ctx": null, "tag": null}"#,
        r#"{"id": 2, "ok": false, "ms": 3.0, "ctx": {"a": [1, {"b": null}]}, "tag": "x"}"#,
        r#"{"id": 3, "ok": null, "ms": null, "ctx": [], "tag": null}"#,
    ]
    .iter()
    .map(|t| serde_json::from_str(t).unwrap())
    .collect();
    // ms: 3 read as a float is 3 in JSON, which serde_json tells from 3.0: compare ms by value.
    let by_value = |rows: &[Value]| -> Vec<String> {
        rows.iter()
            .map(|r| {
                let mut r = r.clone();
                if let Some(ms) = r["ms"].as_f64() {
                    r["ms"] = Value::String(ms.to_string());
                }
                r.to_string()
            })
            .collect()
    };
    assert_eq!(by_value(&rows), by_value(&want));
    assert!(rows[0]["id"].is_i64() && rows[0]["ok"].is_boolean());
}

#[test]
fn a_first_line_that_is_not_an_object_is_a_clear_error() {
    let w = Workdir::new();
    w.write("in/e.ndjson", "[1, 2]\n");
    let out = w.run(&["-t", "t", "in"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains(
            "e.ndjson:1: the first line must be a JSON object whose keys name the columns; \
             not a JSON object: invalid type: sequence, expected a JSON object\n"
        ),
        "{}",
        stderr(&out)
    );
}

/// Issue 13.8: into Parquet, the sampled types are the column types; nested values are
/// JSON text in a string column.
#[cfg(feature = "parquet")]
#[test]
fn json_types_become_parquet_types() {
    use arrow_schema::DataType;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let w = Workdir::new();
    w.fixture("events");
    let out = w.run(&["-t", "t", "--format", "parquet", "events"]);
    assert_code(&out, 0);
    let file = walk(&w.path("t"))
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".parquet"))
        .unwrap();
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap()).unwrap();
    let schema = reader.schema().clone();
    let ty = |name: &str| schema.field_with_name(name).unwrap().data_type().clone();
    assert_eq!(ty("event_id"), DataType::Int64);
    assert_eq!(ty("ms"), DataType::Float64);
    assert_eq!(ty("ok"), DataType::Boolean);
    assert_eq!(ty("ctx"), DataType::Utf8);
    assert_eq!(ty("user"), DataType::Utf8);
}
