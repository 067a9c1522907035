//! `--threads`: large CSV inputs parsed in chunks by several workers and put back in
//! order. The rows committed never depend on it, nor on where chunks fall: every load
//! here runs with tiny chunks (`INGEST_CHUNK_BYTES`), so that chunk boundaries land
//! inside quoted fields, on CRLF pairs, on blank lines and on bad rows. Crashes and
//! SIGKILLs with four threads are recovered exactly as with one.

use std::collections::BTreeMap;
use std::path::Path;

use crate::crash::{sigkill_rounds, Rng, SIGKILL_LOAD};
use crate::util::*;

/// Every committed file of a table (rejects too), by its name with the run id taken
/// out, and its bytes: what two loads of the same inputs must agree on exactly,
/// partition by partition and checkpoint by checkpoint.
pub(crate) fn committed_files(table: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let workdir = table.parent().unwrap().canonicalize().unwrap();
    for entry in walkdir::WalkDir::new(table) {
        let entry = entry.unwrap();
        let rel = entry
            .path()
            .strip_prefix(table)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if !entry.file_type().is_file() || rel.starts_with("_ingest") {
            continue;
        }
        // part-JOB-RUN-CHECKPOINT-SEQ.ext, RUN being DATE T TIME Z - HEX. SEQ numbers a
        // checkpoint's files in the order their partitions first appear, which depends on
        // where batches are cut (a batch's bad rows are written first): it goes too. A
        // checkpoint has one file per partition (no --target-file-size here).
        let rel = match rel.rsplit_once('-') {
            Some((head, tail)) if rel.contains("/part-") => {
                format!("{head}{}", &tail[tail.find('.').unwrap_or(0)..])
            }
            _ => rel,
        };
        let name: Vec<&str> = rel.split('-').collect();
        let normal = name
            .iter()
            .enumerate()
            .filter(|(i, part)| {
                !(part.len() == 16 && part.ends_with('Z') || is_run_suffix(&name, *i))
            })
            .map(|(_, part)| *part)
            .collect::<Vec<_>>()
            .join("-");
        // Rejects name their input by its path, which is the work directory's.
        let bytes = String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap())
            .replace(&*workdir.to_string_lossy(), "WORKDIR")
            .into_bytes();
        files.insert(normal, bytes);
    }
    files
}

/// The 8 hex digits after a run id's time.
fn is_run_suffix(parts: &[&str], i: usize) -> bool {
    i > 0 && parts[i - 1].len() == 16 && parts[i - 1].ends_with('Z') && parts[i].len() == 8
}

/// Inputs that put every kind of record boundary at risk: quoted line ends, CRLF and
/// CR, blank lines, bad rows (wrong field count, bad UTF-8, a stray quote), columns in
/// another order, a gzip input (read whole), a header-only input and an empty one.
fn hard_inputs(w: &Workdir, rng: &mut Rng) {
    let notes = [
        "plain",
        "\"multi\nline, with \"\"quotes\"\"\n\"",
        "\"\r\n\"",
        "",
        "\"\n\"",
        "ünï",
    ];
    let ends = ["\n", "\r\n", "\n\n", "\n"];
    for (file, header) in [("a.csv", "id,country,note"), ("b.csv", "note,id,country")] {
        let mut text = format!("{header}\n");
        for i in 0..1500u64 {
            let country = ["de", "fr", "us", ""][rng.below(4) as usize];
            let note = notes[rng.below(notes.len() as u64) as usize];
            let end = ends[rng.below(ends.len() as u64) as usize];
            let id = format!("{file}{i}");
            match rng.below(150) {
                0 => text.push_str(&format!("{id},{country}{end}")),
                1 => text.push_str(&format!("{id},{country},x\"y{end}")),
                _ if header.starts_with("note") => {
                    text.push_str(&format!("{note},{id},{country}{end}"))
                }
                _ => text.push_str(&format!("{id},{country},{note}{end}")),
            }
        }
        w.write(&format!("in/{file}"), text);
    }
    let mut bad_utf8 = b"id,country,note\n1,de,ok\n2,fr,caf\xE9\n3,us,fine".to_vec();
    bad_utf8.extend_from_slice(b"\n4,de,\"last\"");
    w.write("in/c.csv", bad_utf8);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"id,country,note\ng1,de,\"zip\nped\"\ng2,us,x\n").unwrap();
    w.write("in/d.csv.gz", gz.finish().unwrap());
    w.write("in/e.csv", "id,country,note\n");
    w.write("in/f.csv", "");
}

/// What a load's JSON summary counts: rows read, written, rejected; files,
/// partitions, checkpoints.
fn counts(out: &std::process::Output) -> Vec<u64> {
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = [
        "rows_read",
        "rows_written",
        "rows_rejected",
        "files_written",
        "partitions",
        "checkpoints",
    ];
    keys.iter().map(|k| summary[k].as_u64().unwrap()).collect()
}

const HARD_LOAD: &[&str] = &[
    "-t",
    "t",
    "-p",
    "country",
    "--checkpoint-rows",
    "333",
    "--max-errors",
    "1000",
    "in",
];

#[test]
fn threads_and_chunk_sizes_never_change_a_committed_byte() {
    let seed = clock_seed();
    let serial = Workdir::new();
    hard_inputs(&serial, &mut Rng(seed));
    let out = serial.run(&[HARD_LOAD, &["--threads", "1", "--json"]].concat());
    assert_code(&out, 0);
    let expected = committed_files(&serial.path("t"));
    let expected_counts = counts(&out);
    assert!(
        expected.keys().any(|k| k.starts_with("_rejects")),
        "the inputs hold bad rows"
    );
    for (threads, chunk) in [
        ("4", "1"),
        ("2", "13"),
        ("3", "200"),
        ("4", "4096"),
        ("2", "0"),
    ] {
        let w = Workdir::new().with_env("INGEST_CHUNK_BYTES", chunk);
        hard_inputs(&w, &mut Rng(seed));
        let out = w.run(&[HARD_LOAD, &["--threads", threads, "--json"]].concat());
        assert_code(&out, 0);
        assert_eq!(
            counts(&out),
            expected_counts,
            "seed {seed}, {threads} threads, {chunk}-byte chunks"
        );
        let got = committed_files(&w.path("t"));
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "seed {seed}, {threads} threads, {chunk}-byte chunks"
        );
        for (name, bytes) in &expected {
            let (ours, theirs) = (
                String::from_utf8_lossy(&got[name]),
                String::from_utf8_lossy(bytes),
            );
            let first = ours.lines().zip(theirs.lines()).find(|(a, b)| a != b);
            assert!(
                got[name] == *bytes,
                "seed {seed}, {threads} threads, {chunk}-byte chunks: {name} differs: {first:?}"
            );
        }
        let status = w.run(&["-t", "t", "--status", "--json"]);
        assert_code(&status, 0);
        assert!(String::from_utf8_lossy(&status.stdout).contains("\"rows_committed\""));
    }
}

const HEADER: &str = "order_id,dt,ts,customer,email,country,amount,currency,note\n";

/// A CSV input in which every chunk boundary (every `chunk` bytes after the header) is
/// straddled by a quoted field holding a line feed: each chunk's guessed first record
/// is wrong.
fn straddled(chunk: usize, records: usize) -> String {
    let mut text = String::from(HEADER);
    let row = |id: usize, note: &str| {
        format!(
            "{id},2026-11-2{},2026-11-01T00:00:00Z,c,e@x,C{},1.00,EUR,{note}\n",
            id % 8,
            id % 5
        )
    };
    let mut next = text.len() + chunk;
    for id in 0..records {
        let plain = row(id, "plain");
        if text.len() + plain.len() < next {
            text.push_str(&plain);
            continue;
        }
        // The note opens before the boundary and holds a line feed at or after the byte
        // before it: the first line feed the chunk's reader finds is quoted.
        let head = row(id, "\"");
        let head = &head[..head.len() - 1];
        let fill = (next - 1).saturating_sub(text.len() + head.len());
        text.push_str(head);
        text.push_str(&"x".repeat(fill));
        text.push_str("\nrest\"\n");
        while next <= text.len() {
            next += chunk;
        }
    }
    text
}

#[test]
fn straddled_chunks_are_read_as_one_thread_reads_them() {
    let text = straddled(150, 600);
    // Each boundary's first line feed at or after it is inside quotes.
    let bytes = text.as_bytes();
    let mut quoted = false;
    let mut inside = vec![false; bytes.len()];
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'"' {
            quoted = !quoted;
        }
        inside[i] = quoted;
    }
    let mut checked = 0;
    for boundary in (HEADER.len() + 150..bytes.len()).step_by(150) {
        if let Some(lf) = bytes[boundary - 1..].iter().position(|&b| b == b'\n') {
            assert!(
                inside[boundary - 1 + lf],
                "boundary {boundary} is not straddled"
            );
            checked += 1;
        }
    }
    assert!(checked > 150, "only {checked} boundaries");
    let serial = Workdir::new();
    serial.write("big/big.csv", &text);
    assert_code(
        &serial.run(&["-t", "t", "-p", "dt", "--threads", "1", "big"]),
        0,
    );
    let w = Workdir::new().with_env("INGEST_CHUNK_BYTES", "150");
    w.write("big/big.csv", &text);
    assert_code(&w.run(&["-t", "t", "-p", "dt", "--threads", "4", "big"]), 0);
    assert_eq!(
        committed_files(&w.path("t")),
        committed_files(&serial.path("t"))
    );
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("big")]),
        "straddled",
    );
}

/// Several inputs (one gzip, read whole) and one large input whose every chunk boundary
/// is straddled by a quoted line feed; dedupe, so stage snapshots ride along.
const CRASH_LOAD: &[&str] = &[
    "-t",
    "t",
    "-p",
    "dt,country",
    "--dedupe-key",
    "order_id",
    "--checkpoint-rows",
    "100",
    "--threads",
    "4",
    "orders",
];

fn crash_workdir() -> Workdir {
    let w = Workdir::new().with_env("INGEST_CHUNK_BYTES", "150");
    w.fixture("orders");
    w.write("orders/2026-11-29.csv", straddled(150, 400));
    w
}

#[test]
fn a_load_without_stages_on_two_sinks_reaches_the_stage_snapshot_fail_points() {
    // Without stages the first sink reaches the stage-snapshot points (`sink::run`), so
    // a crash there is tested on every pipeline, several sinks included.
    let load: Vec<&str> = CRASH_LOAD
        .iter()
        .copied()
        .filter(|&arg| arg != "--dedupe-key" && arg != "order_id")
        .collect();
    let expected = input_rows(&[crash_workdir().path("orders")]);
    let points = ["stage.snapshot.before", "stage.snapshot.after"].map(String::from);
    let crashes = crash_matrix(
        &points,
        &[1, 3],
        true,
        &load,
        || (crash_workdir(), ()),
        |_| {},
        |run| assert_same_rows(table_rows(&run.w.path("t")), expected.clone(), &run.spec),
    );
    assert_eq!(crashes, 4, "each point at its first and third hit");
}

#[test]
fn every_fail_point_with_four_threads_then_recover_gives_exact_rows() {
    let expected = {
        let w = crash_workdir();
        dedupe(input_rows(&[w.path("orders")]), "order_id")
    };
    let points: Vec<String> = all_fail_points()
        .into_iter()
        .filter(|p| !p.starts_with("overwrite."))
        .collect();
    let crashes = crash_matrix(
        &points,
        &[1, 3],
        true,
        CRASH_LOAD,
        || (crash_workdir(), ()),
        |_| {},
        |run| {
            let what = &run.spec;
            assert_same_rows(table_rows(&run.w.path("t")), expected.clone(), what);
            assert!(visible_debris(&run.w.path("t")).is_empty(), "{what}");
            let again = run.w.run(&["-t", "t", "--recover"]);
            assert_code(&again, 0);
            assert!(stderr(&again).contains("nothing to recover"), "{what}");
            let rerun = run.w.run(CRASH_LOAD);
            assert_code(&rerun, 0);
            assert!(stderr(&rerun).contains("nothing to load"), "{what}");
        },
    );
    eprintln!("crash matrix, 4 threads: {crashes} crashes, each recovered and checked");
    assert!(
        crashes > points.len(),
        "only {crashes} crashes happened: the second hits were never reached"
    );
}

#[test]
fn random_sigkill_with_four_threads_loses_and_duplicates_nothing() {
    let load = [SIGKILL_LOAD, &["--threads", "4"]].concat();
    let chunked = || Workdir::new().with_env("INGEST_CHUNK_BYTES", "4099");
    let (seed, kills) = sigkill_rounds(&load, 6, chunked);
    eprintln!("random SIGKILL, 4 threads: seed {seed}, {kills} kills landed over 6 loads or more");
    assert!(kills >= 3, "seed {seed}: only {kills} kills landed mid-run");
}

#[test]
fn an_error_names_the_same_input_line_with_any_threads() {
    // Line ends of every kind before the bad row, so its line number is earned; no
    // quoted line feed in its last thousand rows, so the chunks there are the workers'.
    let mut text = String::from("id,country,note\n");
    for i in 0..1500 {
        let note = if i < 500 {
            ["\"a\nb\"", "x", "\"\r\n\""][i % 3]
        } else {
            "\"a,b\""
        };
        let end = ["\n", "\r\n", "\n\n"][i % 3];
        text.push_str(&format!("{i},c{},{note}{end}", i % 4));
    }
    let line = text.matches('\n').count() + 1;
    text.push_str(&format!("1500,{},x\n1501,c1,y\n", "z".repeat(300)));
    let message = |threads: &str| {
        let w = Workdir::new().with_env("INGEST_CHUNK_BYTES", "200");
        w.write("in/a.csv", &text);
        let out = w.run(&["-t", "t", "-p", "country", "--threads", threads, "in"]);
        assert_code(&out, 1);
        stderr(&out)
    };
    let serial = message("1");
    assert!(
        serial.contains(&format!("input line {line}")),
        "expected line {line}: {serial}"
    );
    assert_eq!(message("4"), serial.replace("--threads 1", "--threads 4"));
}

/// The sequence numbers of a table's part files (`part-JOB-RUN-CHECKPOINT-SEQ.ext`), by
/// checkpoint.
fn part_seqs(table: &Path) -> BTreeMap<u64, Vec<u64>> {
    let mut seqs: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for path in data_files(table).into_iter().map(|(path, _)| path) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let stem = &name[..name.find('.').unwrap()];
        let fields: Vec<&str> = stem.rsplitn(3, '-').collect();
        seqs.entry(fields[1].parse().unwrap())
            .or_default()
            .push(fields[0].parse().unwrap());
    }
    seqs
}

#[test]
fn several_sinks_split_the_partitions_and_write_what_one_writes() {
    let serial = Workdir::new();
    many_partitions(&serial);
    let load = MANY_PARTITIONS_LOAD;
    assert_code(&serial.run(&[load, &["--threads", "1"]].concat()), 0);
    // Two threads: a second sink, once a checkpoint has 1,536 partitions (here 256);
    // four: two sinks from the first row; eight: four. 600 partitions: more than a sink
    // keeps open under an open-file limit of 1024 (128 and 64 files), while the serial
    // run above keeps every file open.
    for (threads, sinks) in [("2", 2), ("4", 2), ("8", 4)] {
        let w = Workdir::new()
            .with_open_file_limit(FEW_OPEN_FILES)
            .with_env("INGEST_SPREAD_FROM", "256");
        many_partitions(&w);
        assert_code(&w.run(&[load, &["--threads", threads]].concat()), 0);
        assert_eq!(
            committed_files(&w.path("t")),
            committed_files(&serial.path("t")),
            "{threads} threads"
        );
        // Sink i of k numbers its files i, i + k, …: every sink wrote part of every
        // checkpoint.
        let seqs = part_seqs(&w.path("t"));
        assert_eq!(seqs.len(), 3, "{threads} threads: {seqs:?}");
        for (checkpoint, seqs) in seqs {
            let mut by_sink = vec![0; sinks];
            for seq in &seqs {
                by_sink[*seq as usize % sinks] += 1;
            }
            assert!(
                by_sink.iter().all(|&n| n >= 600 / sinks / 2),
                "{threads} threads, checkpoint {checkpoint}: files per sink {by_sink:?}"
            );
        }
    }
    // Fewer partitions a checkpoint than the mark: two threads keep to one sink, whose
    // files are numbered 0, 2, 4, …
    let w = Workdir::new().with_env("INGEST_SPREAD_FROM", "256");
    let mut text = String::from("id,p\n");
    for i in 0..3000 {
        text.push_str(&format!("{i},v{}\n", i % 200));
    }
    w.write("few.csv", &text);
    let few = ["-t", "t", "-p", "p", "--checkpoint-rows", "1000", "few.csv"];
    assert_code(&w.run(&[&few[..], &["--threads", "2"]].concat()), 0);
    let seqs = part_seqs(&w.path("t"));
    assert_eq!(seqs.len(), 3, "{seqs:?}");
    for (checkpoint, mut seqs) in seqs {
        seqs.sort_unstable();
        let first_sink: Vec<u64> = (0..200).map(|n| 2 * n).collect();
        assert_eq!(seqs, first_sink, "checkpoint {checkpoint}");
    }
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("few.csv")]),
        "200 partitions, two threads",
    );
    // Cut files (--target-file-size) keep their partition's sink and rows.
    let w = Workdir::new();
    let mut text = String::from("id,p,filler\n");
    for i in 0..4000 {
        text.push_str(&format!("{i},v{},{}\n", i % 8, "x".repeat(100)));
    }
    w.write("cut.csv", text);
    let cut = ["--threads", "4", "--target-file-size", "1K"];
    let load = ["-t", "t", "-p", "p", "--checkpoint-rows", "1000", "cut.csv"];
    assert_code(&w.run(&[&load[..], &cut[..]].concat()), 0);
    assert!(data_files(&w.path("t")).len() > 300);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("cut.csv")]),
        "cut files, two sinks",
    );
}
