//! Output formats other than plain CSV: JSON lines, compressed CSV, Parquet.

use std::collections::BTreeMap;
use std::path::Path;

use crate::util::*;

/// Every committed `.jsonl` row, with partition columns (as strings) from the path.
fn jsonl_rows(table: &Path) -> Vec<BTreeMap<String, serde_json::Value>> {
    let mut rows = Vec::new();
    for (path, partition) in data_files(table) {
        assert!(path.extension().is_some_and(|e| e == "jsonl"), "{path:?}");
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let mut row: BTreeMap<String, serde_json::Value> = serde_json::from_str(line).unwrap();
            row.extend(
                partition
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))),
            );
            rows.push(row);
        }
    }
    rows
}

/// The expected JSON of an input row after `--cast order_id=int --cast amount=decimal(12,2)`.
fn expected_json(row: &Row) -> String {
    let mut out = BTreeMap::new();
    for (k, v) in row {
        let value = match k.as_str() {
            "order_id" => serde_json::json!(v.parse::<i64>().unwrap()),
            "amount" => serde_json::json!(v.parse::<f64>().unwrap()),
            _ => serde_json::json!(v),
        };
        out.insert(k.clone(), value);
    }
    serde_json::to_string(&out).unwrap()
}

fn canonical(rows: Vec<BTreeMap<String, serde_json::Value>>) -> Vec<String> {
    let mut out: Vec<String> = rows
        .into_iter()
        .map(|row| {
            let row: BTreeMap<String, serde_json::Value> = row
                .into_iter()
                .map(|(k, v)| match (k.as_str(), &v) {
                    ("amount", serde_json::Value::Number(n)) => {
                        (k, serde_json::json!(n.as_f64().unwrap()))
                    }
                    _ => (k, v),
                })
                .collect();
            serde_json::to_string(&row).unwrap()
        })
        .collect();
    out.sort();
    out
}

const LOAD: &[&str] = &[
    "-t",
    "t",
    "--format",
    "jsonl",
    "-p",
    "dt",
    "--cast",
    "order_id=int",
    "--cast",
    "amount=decimal(12,2)",
    "--checkpoint-rows",
    "100",
    "orders",
];

#[test]
fn json_lines_output_holds_typed_rows_exactly_once_across_a_crash() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let mut expected: Vec<String> = input_rows(&[orders]).iter().map(expected_json).collect();
    expected.sort();
    assert!(crashed(&w.run_failing("commit.mid:4", LOAD)));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    let got = canonical(jsonl_rows(&w.path("t")));
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "first difference: {:?}",
        got.iter().zip(&expected).find(|(a, b)| a != b)
    );
}

#[cfg(not(feature = "parquet"))]
#[test]
fn parquet_is_refused_clearly_without_the_feature() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    let out = w.run(&["-t", "t", "--format", "parquet", "a.csv"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("built without the `parquet` feature"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn gzip_output_with_small_files_survives_a_crash_mid_commit() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let args = [
        "-t",
        "t",
        "-p",
        "dt",
        "--compression",
        "gzip",
        "--target-file-size",
        "2K",
        "--checkpoint-rows",
        "200",
        "orders",
    ];
    assert!(crashed(&w.run_failing("commit.mid:2", &args)));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[orders]),
        "gzip output",
    );
    let mut files = 0;
    for dir in std::fs::read_dir(w.path("t")).unwrap() {
        let dir = dir.unwrap().path();
        if dir.file_name().unwrap().to_string_lossy().starts_with('_') {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            assert!(f.to_string_lossy().ends_with(".csv.gz"), "{f:?}");
            // Capped at 2 KiB reaching the file, plus what the writer still buffered.
            assert!(
                std::fs::metadata(&f).unwrap().len() < 2048 + 64 * 1024,
                "{f:?}"
            );
            files += 1;
        }
    }
    assert!(files > 8, "the size cap made only {files} files");
}

#[test]
fn zstd_inputs_and_outputs_round_trip() {
    let w = Workdir::new();
    let plain = w.write(
        "in/orders.csv",
        std::fs::read(fixtures().join("orders/2026-11-26.csv")).unwrap(),
    );
    let compressed = zstd::encode_all(std::fs::read(&plain).unwrap().as_slice(), 3).unwrap();
    std::fs::remove_file(&plain).unwrap();
    w.write("in/orders.csv.zst", compressed);
    let args = [
        "-t",
        "t",
        "--format",
        "jsonl",
        "--compression",
        "zstd",
        "--checkpoint-rows",
        "50",
        "in",
    ];
    assert!(crashed(
        &w.run_failing("checkpoint.complete.after:3", &args)
    ));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    let mut rows = 0;
    for f in std::fs::read_dir(w.path("t")).unwrap() {
        let f = f.unwrap().path();
        if f.to_string_lossy().ends_with(".jsonl.zst") {
            let text =
                String::from_utf8(zstd::decode_all(std::fs::File::open(&f).unwrap()).unwrap())
                    .unwrap();
            rows += text.lines().count();
        }
    }
    assert_eq!(rows, 300);
}

/// Every committed Parquet row as text, with partition columns from the path.
#[cfg(feature = "parquet")]
fn parquet_rows(table: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for (path, partition) in data_files(table) {
        assert!(path.extension().is_some_and(|e| e == "parquet"), "{path:?}");
        rows.extend(parquet_file_rows(&path, &partition));
    }
    rows
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_output_is_typed_complete_and_exactly_once_across_crashes() {
    let args = [
        "-t",
        "t",
        "--format",
        "parquet",
        "-p",
        "dt",
        "--cast",
        "order_id=int",
        "--cast",
        "amount=decimal(12,2)",
        "--cast",
        "ts=timestamp",
        "--checkpoint-rows",
        "100",
        "orders",
    ];
    let runs = [
        ("sink.precommit.after:2", "zstd"),
        ("commit.mid:3", "snappy"),
        ("checkpoint.complete.after:5", "none"),
    ];
    for (point, codec) in runs {
        let args: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--compression", codec])
            .collect();
        let w = Workdir::new();
        let orders = w.fixture("orders");
        assert!(crashed(&w.run_failing(point, &args)), "{point}");
        // No half-written Parquet file is ever where a reader looks.
        for path in visible_debris(&w.path("t")) {
            assert!(
                path.to_string_lossy().ends_with(".parquet"),
                "{point}: {path:?}"
            );
        }
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        assert_same_rows(parquet_rows(&w.path("t")), input_rows(&[orders]), point);
    }
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_over_more_partitions_than_open_files_writes_one_file_per_partition() {
    // 600 partitions, more than the sink keeps files open: Parquet parts hold their rows
    // in builders until a batch is full or the checkpoint ends, so each partition still
    // gets exactly one file per checkpoint (not one per reopening).
    let w = Workdir::new();
    let input = many_partitions(&w);
    let args = [
        "-t", "t", "--format", "parquet", "-p", "p", "--cast", "id=int", "many.csv",
    ];
    assert_code(&w.run(&args), 0);
    assert_same_rows(
        parquet_rows(&w.path("t")),
        input_rows(&[input]),
        "600 Parquet partitions",
    );
    assert_eq!(data_files(&w.path("t")).len(), 600);
}

#[cfg(feature = "parquet")]
#[test]
fn a_parquet_load_holding_too_much_ends_its_checkpoint_early_and_loses_nothing() {
    // 200,000 rows over 600 partitions in one default checkpoint, with a memory budget of
    // 64 KiB for unfinished Parquet files (the default is 512 MiB): the source ends the
    // checkpoint early, at a batch's end, each time the parts cross it. The sink crosses it
    // within its first few batches (of 4,096 rows), and the source can be at most 34 batches
    // ahead of it (a channel of 32, one batch at each end): with 49 batches, the source is
    // still reading when it is asked for the checkpoint, however the threads are scheduled.
    // (With 25, a slow CI machine once had the source read everything first.)
    let w = Workdir::new().with_env("INGEST_MEMORY_BUDGET", "65536");
    let mut text = String::from("id,p\n");
    for i in 0..200_000_u64 {
        text.push_str(&format!("{i},v{}\n", (i * 7919) % 600));
    }
    let input = w.write("many.csv", text.clone());
    let args = [
        "-t", "t", "--format", "parquet", "-p", "p", "--cast", "id=int", "many.csv",
    ];
    let checkpoints = |out: &std::process::Output| -> u64 {
        assert_code(out, 0);
        let summary = stderr(out);
        summary
            .split(" checkpoint(s)")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no checkpoint count in {summary}"))
    };
    // Under the default budget: one checkpoint, one file per partition.
    let plain = Workdir::new();
    plain.write("many.csv", &text);
    assert_eq!(checkpoints(&plain.run(&args)), 1);
    assert_eq!(data_files(&plain.path("t")).len(), 600);

    let out = w.run(&args);
    let summary = stderr(&out);
    assert!(checkpoints(&out) >= 2, "{summary}");
    assert!(data_files(&w.path("t")).len() > 600, "{summary}");
    assert_same_rows(
        parquet_rows(&w.path("t")),
        input_rows(std::slice::from_ref(&input)),
        "early checkpoints",
    );

    // Killed after an early checkpoint's preCommit, recovered: exactly the input.
    let w2 = Workdir::new().with_env("INGEST_MEMORY_BUDGET", "65536");
    let input = w2.write("many.csv", std::fs::read(&input).expect("the input"));
    assert!(crashed(&w2.run_failing("sink.precommit.after:1", &args)));
    assert_code(&w2.run(&["-t", "t", "--recover"]), 0);
    assert_same_rows(
        parquet_rows(&w2.path("t")),
        input_rows(&[input]),
        "early checkpoints, killed and recovered",
    );
}

/// The crash matrix of the core, on Parquet (zstd) and gzipped CSV output: every fail
/// point of an append load, at its first and third hit. Right after each crash every
/// Parquet file a reader can see opens with its footer; after `--recover` the table
/// holds exactly the input.
#[cfg(feature = "parquet")]
#[test]
fn the_crash_matrix_holds_for_parquet_and_compressed_csv() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let points: Vec<String> = all_fail_points()
        .into_iter()
        .filter(|p| !p.starts_with("overwrite."))
        .collect();
    let mut crashes = 0;
    for (format, codec) in [("parquet", "zstd"), ("csv", "gzip")] {
        let args = [
            "-t",
            "t",
            "--format",
            format,
            "--compression",
            codec,
            "-p",
            "dt",
            "--checkpoint-rows",
            "100",
            "orders",
        ];
        crashes += crash_matrix(
            &points,
            &[1, 3],
            true,
            &args,
            || {
                let w = Workdir::new();
                let orders = w.fixture("orders");
                (w, orders)
            },
            |run| {
                // Every Parquet file a reader can see opens with its footer.
                for (path, _) in data_files(&run.w.path("t")) {
                    if format == "parquet" {
                        let file = std::fs::File::open(&path).unwrap();
                        assert!(
                            ParquetRecordBatchReaderBuilder::try_new(file).is_ok(),
                            "{}: a reader sees an unreadable {path:?}",
                            run.spec
                        );
                    }
                }
            },
            |run| {
                let table = run.w.path("t");
                let rows = if format == "parquet" {
                    parquet_rows(&table)
                } else {
                    table_rows(&table)
                };
                let what = format!("{format} {}", run.spec);
                let mut want = input_rows(std::slice::from_ref(&run.extra));
                if format == "parquet" {
                    want = as_typed_by_contract(&table, want);
                }
                assert_same_rows(rows, want, &what);
                let debris: Vec<_> = visible_debris(&table)
                    .into_iter()
                    .filter(|p| p.extension().is_none_or(|e| e != "parquet"))
                    .collect();
                assert!(debris.is_empty(), "{what}: {debris:?}");
            },
        );
    }
    eprintln!("parquet and csv.gz crash matrix: {crashes} crashes recovered and checked");
    assert!(crashes >= 40, "only {crashes} crashes");
}

/// `--target-file-size` cuts part files at about the size: plain CSV exactly (the cut
/// comes after the row that reaches it), compressed CSV within the compressor's block,
/// Parquet at row-group ends; every row stays exactly once.
#[test]
fn target_file_size_cuts_part_files_at_about_the_size() {
    let w = Workdir::new();
    let mut text = String::from("id,a,note\n");
    for i in 0..200_000u64 {
        text.push_str(&format!(
            "{i},{},\"n, {}\"\n",
            i * 7919 % 1_000_003,
            i % 977
        ));
    }
    let input = w.write("in/big.csv", text);
    let want = input_rows(&[input]);
    let mut cases = vec![
        ("csv", "none", 256 * 1024u64, 64u64),
        ("csv", "zstd", 64 * 1024, 192 * 1024),
    ];
    if cfg!(feature = "parquet") {
        // Row groups end at a quarter of the size (counted before compression), so a
        // file passes the size by less than one; one row group of 64 Ki rows would
        // be about 150 KB here.
        cases.push(("parquet", "zstd", 32 * 1024, 32 * 1024));
    }
    for (format, codec, limit, slack) in cases {
        let table = format!("t-{format}-{codec}");
        let size = limit.to_string();
        let args = [
            "-t",
            &table,
            "--format",
            format,
            "--compression",
            codec,
            "--target-file-size",
            &size,
            "in",
        ];
        assert_code(&w.run(&args), 0);
        let files = data_files(&w.path(&table));
        let sizes: Vec<u64> = files
            .iter()
            .map(|(f, _)| std::fs::metadata(f).unwrap().len())
            .collect();
        assert!(files.len() >= 3, "{format}/{codec}: {sizes:?}");
        assert!(
            sizes.iter().all(|&s| s <= limit + slack),
            "{format}/{codec} over {limit}: {sizes:?}"
        );
        // Only the last part of a run ends before the size is reached.
        let small = sizes.iter().filter(|&&s| s < limit).count();
        assert!(small <= 1, "{format}/{codec}: {sizes:?}");
        #[cfg(feature = "parquet")]
        let rows = if format == "parquet" {
            parquet_rows(&w.path(&table))
        } else {
            table_rows(&w.path(&table))
        };
        #[cfg(not(feature = "parquet"))]
        let rows = table_rows(&w.path(&table));
        assert_same_rows(rows, want.clone(), &table);
    }
}

/// String columns whose values repeat are dictionary-encoded, the others not: in every
/// file of a load, `currency` (three values) has a dictionary page and `order_id` and
/// `email` (never repeated) have none; and the rows read back are the input's.
#[cfg(feature = "parquet")]
#[test]
fn parquet_gives_repeating_string_columns_a_dictionary() {
    use parquet::file::reader::{FileReader, SerializedFileReader};

    let w = Workdir::new();
    let orders = w.fixture("orders");
    assert_code(
        &w.run(&["-t", "t", "--format", "parquet", "-p", "dt", "orders"]),
        0,
    );
    // Four days (a few late orders of 2026-11-25), one file each.
    let files = data_files(&w.path("t"));
    assert_eq!(files.len(), 4);
    for (path, _) in &files {
        let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
        let metadata = reader.metadata();
        assert!(metadata.num_row_groups() > 0, "{path:?}");
        for group in metadata.row_groups() {
            let dictionary = |name: &str| {
                let column = group
                    .columns()
                    .iter()
                    .find(|c| c.column_path().string() == name)
                    .unwrap_or_else(|| panic!("{path:?} has no column {name}"));
                column.dictionary_page_offset().is_some()
            };
            assert!(dictionary("currency"), "{path:?}: currency");
            assert!(!dictionary("order_id"), "{path:?}: order_id");
            assert!(!dictionary("email"), "{path:?}: email");
        }
    }
    assert_same_rows(
        parquet_rows(&w.path("t")),
        as_typed_by_contract(&w.path("t"), input_rows(&[orders])),
        "dictionary-encoded Parquet",
    );
}

/// Every string column chunk's statistics against its values read back: the minimum,
/// maximum and null count are the chunk's own (exact, or for a value past 64 bytes a
/// shorter bound on the right side, marked inexact), in files of several row groups, for
/// an increasing id, a column of a few values and nulls, values sharing long prefixes,
/// long and multi-byte values, and empty strings.
#[cfg(feature = "parquet")]
#[test]
fn parquet_string_statistics_are_each_row_groups_own() {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::statistics::Statistics;

    // The greatest name (it starts above 李雷), and past 64 bytes with a character
    // across byte 64: its bound is cut before that character.
    let long = format!("{}é tail past the limit", "龍".repeat(21));
    let names = ["", "Zoë", "李雷", "a", "Ada Lovelace", long.as_str()];
    // JSON lines, so that a string column has nulls (an empty CSV field is "").
    let mut lines = String::new();
    for i in 0..150_000u64 {
        let name = names[(i % 7 % 6) as usize];
        // Notes share their first 24 bytes, so their keys tie and their bytes decide.
        let note = format!("shared prefix beyond key {}", (i * 7919) % 1009);
        let code = match i % 11 {
            0 => serde_json::Value::Null,
            _ => serde_json::Value::String(format!("c{}", i % 5)),
        };
        let row = serde_json::json!({
            "id": format!("{i:08}"), "part": format!("{}", i % 2),
            "name": name, "note": note, "code": code,
        });
        lines.push_str(&format!("{row}\n"));
    }
    let w = Workdir::new();
    w.write("in/rows.jsonl", lines);
    assert_code(
        &w.run(&["-t", "t", "--format", "parquet", "-p", "part", "in"]),
        0,
    );

    let mut groups_seen = 0;
    let mut nulls_seen = 0;
    for (path, _) in data_files(&w.path("t")) {
        let file = || std::fs::File::open(&path).unwrap();
        let metadata = ParquetRecordBatchReaderBuilder::try_new(file())
            .unwrap()
            .metadata()
            .clone();
        for (g, group) in metadata.row_groups().iter().enumerate() {
            groups_seen += 1;
            let reader = ParquetRecordBatchReaderBuilder::try_new(file())
                .unwrap()
                .with_row_groups(vec![g])
                .build()
                .unwrap();
            let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
            for (c, chunk) in group.columns().iter().enumerate() {
                let name = chunk.column_path().string();
                let mut values: Vec<&[u8]> = Vec::new();
                let mut nulls = 0;
                for batch in &batches {
                    let strings = batch.column(c).as_string::<i32>();
                    nulls += strings.null_count() as u64;
                    values.extend(strings.iter().flatten().map(str::as_bytes));
                }
                let Some(Statistics::ByteArray(stats)) = chunk.statistics() else {
                    panic!("{path:?} group {g} {name}: no string statistics");
                };
                assert_eq!(stats.null_count_opt(), Some(nulls), "{path:?} {g} {name}");
                nulls_seen += nulls;
                let (min, max) = (values.iter().min(), values.iter().max());
                match (min, max) {
                    (Some(&min), Some(&max)) => {
                        let (lo, hi) = (
                            stats.min_opt().unwrap().data(),
                            stats.max_opt().unwrap().data(),
                        );
                        if stats.min_is_exact() {
                            assert_eq!(lo, min, "{path:?} {g} {name} min");
                        } else {
                            assert!(lo < min && lo.len() <= 64, "{path:?} {g} {name} min bound");
                        }
                        if stats.max_is_exact() {
                            assert_eq!(hi, max, "{path:?} {g} {name} max");
                        } else {
                            assert!(hi > max && hi.len() <= 64, "{path:?} {g} {name} max bound");
                        }
                    }
                    _ => assert_eq!((stats.min_opt(), stats.max_opt()), (None, None)),
                }
            }
        }
    }
    // Two partitions of 75,000 rows, row groups of at most 65,536.
    assert_eq!(groups_seen, 4);
    assert!(nulls_seen > 0, "the code column should have had nulls");
    let long_bound = data_files(&w.path("t")).iter().any(|(path, _)| {
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
        reader.metadata().row_groups().iter().any(|g| {
            g.columns().iter().any(
                |c| matches!(c.statistics(), Some(Statistics::ByteArray(s)) if !s.max_is_exact()),
            )
        })
    });
    assert!(
        long_bound,
        "the long name should have made a truncated, inexact maximum"
    );
}
