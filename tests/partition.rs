//! Hostile partition values stay inside the table and read back exactly.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::util::*;

#[test]
fn hostile_partition_values_stay_inside_the_table_and_round_trip() {
    let w = Workdir::new();
    let input = w.fixture("hostile");
    assert_code(&w.run(&["-t", "t", "-p", "p", "hostile/values.csv"]), 0);
    let table = w.path("t").canonicalize().unwrap();
    let mut dirs = 0;
    for entry in std::fs::read_dir(&table).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name == "_ingest" {
            continue;
        }
        assert!(name.starts_with("p="), "unexpected entry {name}");
        assert!(path.canonicalize().unwrap().starts_with(&table));
        dirs += 1;
    }
    // Every distinct value got its own directory; `""` and the sentinel did not merge.
    assert_eq!(dirs, 15);
    assert!(w.path("t/p=__HIVE_DEFAULT_PARTITION__").is_dir());
    assert!(w.path("t/p=%5F_HIVE_DEFAULT_PARTITION__").is_dir());
    assert!(w.path("t/p=..%2F..%2Fetc").is_dir());
    assert!(!w.dir.path().join("etc").exists());
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[input.join("values.csv")]),
        "hostile values",
    );
}

#[test]
fn two_level_partitions_nest_in_order() {
    let w = Workdir::new();
    w.write("a.csv", "id,dt,country\n1,2026-11-28,US\n2,2026-11-28,DE\n");
    assert_code(&w.run(&["-t", "t", "-p", "dt,country", "a.csv"]), 0);
    assert!(w.path("t/dt=2026-11-28/country=US").is_dir());
    assert!(w.path("t/dt=2026-11-28/country=DE").is_dir());
}

#[test]
fn more_partitions_than_open_files_allowed_still_land_exactly_once() {
    // 600 partitions in one checkpoint exceed the 256 staged files a sink keeps open under
    // an open-file limit of 1024, so files are closed and reopened while writing; a crash
    // in between changes nothing.
    let w = Workdir::new().with_open_file_limit(FEW_OPEN_FILES);
    let input = many_partitions(&w);
    assert!(crashed(&w.run_failing(
        "checkpoint.complete.after:2",
        MANY_PARTITIONS_LOAD
    )));
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[input]),
        "600 partitions",
    );
    let dirs = std::fs::read_dir(w.path("t")).unwrap().count();
    assert_eq!(dirs, 601);
}

#[test]
fn closing_and_reopening_staged_files_changes_no_committed_byte() {
    // 600 partitions: all open at once under this machine's limit, 256 at a time under
    // a limit of 1024, and 16 under a limit of 64.
    let open = Workdir::new();
    many_partitions(&open);
    assert_code(&open.run(MANY_PARTITIONS_LOAD), 0);
    let expected = crate::parallel::committed_files(&open.path("t"));
    assert_eq!(expected.len(), 1800, "600 partitions in 3 checkpoints");
    for limit in [FEW_OPEN_FILES, 64] {
        let w = Workdir::new().with_open_file_limit(limit);
        many_partitions(&w);
        assert_code(&w.run(MANY_PARTITIONS_LOAD), 0);
        assert_eq!(
            crate::parallel::committed_files(&w.path("t")),
            expected,
            "open-file limit {limit}"
        );
    }
}

#[test]
fn slow_fsyncs_hold_the_sink_back_instead_of_running_out_of_open_files() {
    // Every fsync takes 5 ms longer (strace), so the coordinator makes checkpoints
    // durable far slower than the sink writes them, and each checkpoint it has not yet
    // committed keeps up to 32 staged files open under a limit of 128 (300 partitions
    // per checkpoint). Unbounded, that queue ran out of descriptors by the fourth
    // checkpoint; the sink now waits for the coordinator with two in flight.
    let w = Workdir::new().with_open_file_limit(128);
    let input = many_partitions(&w);
    let out = w
        .cmd_of("timeout")
        .args(["-s", "KILL", "60", "strace", "-f", "-qq", "--seccomp-bpf"])
        .args(["-e", "trace=fsync", "-e", "inject=fsync:delay_enter=5000"])
        .args(["-o", "/dev/null"])
        .arg(bin())
        .args(["-t", "t", "-p", "p", "--checkpoint-rows", "300", "many.csv"])
        .output()
        .expect("strace is installed (the CI script installs it)");
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("11 checkpoint(s)"),
        "{}",
        stderr(&out)
    );
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[input]),
        "600 partitions, fsyncs slowed down",
    );
}

/// How many times each staged file was opened by a load with `args` (strace).
fn staged_file_opens(w: &Workdir, args: &[&str]) -> BTreeMap<String, usize> {
    let trace = w.path("opens.txt");
    let out = w
        .cmd_of("strace")
        .args(["-f", "-s", "4096", "-e", "trace=open,openat", "-o"])
        .arg(&trace)
        .arg(bin())
        .args(args)
        .output()
        .expect("strace is installed (the CI script installs it)");
    assert_code(&out, 0);
    let mut opens = BTreeMap::new();
    for line in std::fs::read_to_string(&trace).unwrap().lines() {
        if let Some(path) = line
            .split('"')
            .nth(1)
            .filter(|p| p.ends_with(".inprogress"))
        {
            *opens.entry(path.to_string()).or_insert(0) += 1;
        }
    }
    opens
}

#[test]
fn a_sink_keeps_a_quarter_of_the_open_file_limit_open() {
    // Under a limit of 4096 a sink keeps 1024 staged files open: the 600 partitions of
    // each checkpoint are written without closing any, so each file is opened once
    // (created). Under 1024 it keeps 256, and files are closed and reopened.
    let w = Workdir::new().with_open_file_limit(4096);
    many_partitions(&w);
    let opens = staged_file_opens(&w, MANY_PARTITIONS_LOAD);
    assert_eq!(opens.len(), 1800, "600 partitions in 3 checkpoints");
    let reopened: Vec<_> = opens.iter().filter(|(_, &n)| n > 1).collect();
    assert!(reopened.is_empty(), "reopened: {reopened:?}");

    let w = Workdir::new().with_open_file_limit(FEW_OPEN_FILES);
    many_partitions(&w);
    let opens = staged_file_opens(&w, MANY_PARTITIONS_LOAD);
    assert_eq!(opens.len(), 1800);
    let reopened = opens.values().filter(|&&n| n > 1).count();
    assert!(reopened > 600, "only {reopened} files reopened");
}

/// 12,000 rows over 600 partition values (column `p`), interleaved.
fn many_rows_per_partition(w: &Workdir) -> PathBuf {
    let mut text = String::from("id,p\n");
    for i in 0..12_000 {
        text.push_str(&format!("{i},v{}\n", (i * 7919) % 600));
    }
    w.write("many.csv", text)
}

#[test]
fn a_closed_staged_file_takes_its_rows_in_memory_until_its_buffer_fills() {
    // The 600 partitions of one checkpoint under a limit of 1024: the sink keeps 256
    // files open, and a closed one keeps its next rows in memory, so each file is
    // opened at most three times: created, reopened at preCommit to write those rows,
    // and reopened for its fsync. Reopened for every row instead, a file was opened
    // about 20 times.
    // A compressed file too: reopened for every row, it also took a new compressor
    // and a new gzip member or zstd frame per row. And a JSON lines file.
    let load = ["-t", "t", "-p", "p", "many.csv"];
    for (format, codec) in [
        ("csv", "none"),
        ("csv", "gzip"),
        ("csv", "zstd"),
        ("jsonl", "none"),
        ("jsonl", "zstd"),
    ] {
        let w = Workdir::new().with_open_file_limit(FEW_OPEN_FILES);
        let input = many_rows_per_partition(&w);
        let options = ["--format", format, "--compression", codec];
        let opens = staged_file_opens(&w, &[&load[..], &options].concat());
        assert_eq!(
            opens.len(),
            600,
            "{format}, {codec}: 600 partitions in one checkpoint"
        );
        let most = opens.values().max().copied().unwrap_or(0);
        assert!(
            most <= 3,
            "{format}, {codec}: a staged file opened {most} times"
        );
        assert!(
            opens.values().any(|&n| n > 1),
            "{format}, {codec}: no file was closed: the cap did not bind"
        );
        let table = match format {
            "csv" => table_rows(&w.path("t")),
            _ => table_jsonl_rows(&w.path("t")),
        };
        assert_same_rows(
            table,
            input_rows(&[input]),
            &format!("{format}, {codec}: 600 partitions, 12,000 rows"),
        );
    }

    // Each file's journaled row count (what --abort reports, and a Delta table's
    // numRecords) counts the rows it kept in memory too, and the rows it took once its
    // memory was full: 80 rows of 300 bytes per partition fill a closed file's 16 KiB,
    // and its next row reopens it.
    let w = Workdir::new().with_open_file_limit(FEW_OPEN_FILES);
    let mut text = String::from("id,p,pad\n");
    let pad = "x".repeat(300);
    for i in 0..48_000 {
        text.push_str(&format!("{i},v{},{pad}\n", (i * 7919) % 600));
    }
    w.write("many.csv", text);
    assert!(crashed(&w.run_failing("run.finished.before", &load)));
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("removed 600 published file(s) with 48000 row(s)"),
        "{}",
        stderr(&out)
    );
}
