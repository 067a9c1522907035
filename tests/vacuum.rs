//! `--vacuum`: what no version and no run needs goes, after the retention; never a file
//! the latest version names, a file of a run in progress, a journal or a manifest.

use std::path::Path;

use crate::util::*;

/// Sets a path's modification time `days` days back, as time would.
fn age(path: &Path, days: u32) {
    let out = std::process::Command::new("touch")
        .args(["-d", &format!("{days} days ago")])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn leftovers_of_runs_that_are_over_go_after_the_retention_and_the_state_stays() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = ["-t", "t", "-p", "dt", "orders"];
    assert_code(&w.run(&load), 0);
    let pending = w.path("t/_ingest/default/pending");
    let old = pending.join("20261101T000000Z-0badc0de");
    let fresh = pending.join("20261204T000000Z-0badc0df");
    for dir in [&old, &fresh] {
        std::fs::create_dir_all(dir.join("000001")).unwrap();
        std::fs::write(dir.join("000001/part.csv.inprogress"), "x\n").unwrap();
    }
    age(&old, 10);
    let out = w.run(&["-t", "t", "--vacuum", "--dry-run"]);
    assert_code(&out, 0);
    assert!(old.exists() && fresh.exists());
    assert!(stderr(&out).contains("would delete _ingest/default/pending/20261101T000000Z-0badc0de"));
    let out = w.run(&["-t", "t", "--vacuum", "--json"]);
    assert_code(&out, 0);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["vacuumed"]["leftovers"],
        serde_json::json!(["_ingest/default/pending/20261101T000000Z-0badc0de"])
    );
    assert!(!old.exists() && fresh.exists());
    assert!(w.path("t/_ingest/default/journal").exists());
    assert!(w.path("t/_ingest/default/manifest").exists());
    let again = w.run(&load);
    assert!(
        stderr(&again).contains("nothing to load"),
        "{}",
        stderr(&again)
    );
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("orders")]),
        "vacuumed",
    );
    let out = w.run(&["-t", "t", "--vacuum", "--retention", "0s"]);
    assert_code(&out, 0);
    assert!(!fresh.exists());
    assert_code(&w.run(&["-t", "t", "--vacuum", "--retention", "soon"]), 2);
    assert_code(&w.run(&["-t", "t", "--retention", "1d"]), 2);
}

#[test]
fn an_interrupted_run_is_left_alone_and_recovers_every_row() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = ["-t", "t", "-p", "dt", "--checkpoint-rows", "100", "orders"];
    let out = w.run_failing("checkpoint.complete.after:3", &load);
    assert!(crashed(&out), "{}", stderr(&out));
    let staged: Vec<_> = walk(&w.path("t/_ingest/default/pending"));
    assert!(!staged.is_empty());
    for file in &staged {
        age(file, 30);
    }
    let out = w.run(&["-t", "t", "--vacuum", "--retention", "0s"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("left alone: job default has an interrupted run"),
        "{}",
        stderr(&out)
    );
    assert_eq!(walk(&w.path("t/_ingest/default/pending")), staged);
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("orders")]),
        "recovered",
    );
}

#[cfg(feature = "delta")]
mod delta {
    use super::*;
    use crate::delta::{delta_log, delta_rows};

    const LOAD: &[&str] = &[
        "-t",
        "t",
        "--table-format",
        "delta",
        "-p",
        "country",
        "--checkpoint-rows",
        "50",
        // Text columns: the rows read back as the inputs spell them.
        "--no-infer",
        "orders",
    ];

    fn parquet_on_disk(table: &Path) -> usize {
        walk(table)
            .iter()
            .filter(|f| {
                let rel = f
                    .strip_prefix(table)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                rel.ends_with(".parquet") && !rel.starts_with('_')
            })
            .count()
    }

    #[test]
    fn what_a_compaction_replaced_goes_after_the_retention_and_the_latest_version_stays_whole() {
        let w = Workdir::new();
        w.fixture("orders");
        assert_code(&w.run(LOAD), 0);
        let table = w.path("t");
        let before = delta_rows(&table);
        let loaded = parquet_on_disk(&table);
        assert_code(&w.run(&["-t", "t", "--compact"]), 0);
        assert_eq!(parquet_on_disk(&table), loaded + 8);
        // Within the table's retention (7 days): nothing goes.
        let out = w.run(&["-t", "t", "--vacuum"]);
        assert_code(&out, 0);
        assert!(
            stderr(&out).contains("nothing to vacuum"),
            "{}",
            stderr(&out)
        );
        let out = w.run(&[
            "-t",
            "t",
            "--vacuum",
            "--retention",
            "0s",
            "--dry-run",
            "--json",
        ]);
        assert_code(&out, 0);
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["outcome"], "would-vacuum");
        assert_eq!(
            summary["vacuumed"]["data_files"].as_array().unwrap().len(),
            loaded
        );
        assert_eq!(parquet_on_disk(&table), loaded + 8);
        assert_code(&w.run(&["-t", "t", "--vacuum", "--retention", "0s"]), 0);
        assert_eq!(parquet_on_disk(&table), 8);
        assert_same_rows(delta_rows(&table), before, "vacuumed");
        assert_eq!(delta_log(&table).files.len(), 8);
    }

    #[test]
    fn files_a_run_published_before_its_commit_are_never_vacuumed() {
        let w = Workdir::new();
        w.fixture("orders");
        let out = w.run_failing("delta.commit.before:3", LOAD);
        assert!(crashed(&out), "{}", stderr(&out));
        let published = parquet_on_disk(&w.path("t"));
        let out = w.run(&["-t", "t", "--vacuum", "--retention", "0s"]);
        assert_code(&out, 0);
        assert_eq!(parquet_on_disk(&w.path("t")), published);
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        assert_same_rows(
            delta_rows(&w.path("t")),
            input_rows(&[w.path("orders")]),
            "recovered after a vacuum",
        );
    }
}
