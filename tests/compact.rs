//! `--compact`: each partition's small files merged into few, the same rows before,
//! during (readers list a partition whole) and after, wherever it is killed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::crash::{big_orders, operators_loop_killing_at_most, whole_load_ms, Rng};
use crate::util::*;

/// The shipped orders by country, a file per partition every 50 rows: 151 small files in
/// 8 partitions.
const LOAD: &[&str] = &[
    "-t",
    "t",
    "-p",
    "country",
    "--checkpoint-rows",
    "50",
    "orders",
];

const COMPACT: &[&str] = &["-t", "t", "--compact"];

fn loaded(extra: &[&str]) -> Workdir {
    let w = Workdir::new();
    w.fixture("orders");
    let args: Vec<&str> = LOAD.iter().chain(extra).copied().collect();
    assert_code(&w.run(&args), 0);
    w
}

/// The data files of each partition, by name.
fn files_by_partition(table: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut by = BTreeMap::<String, BTreeSet<String>>::new();
    for (file, _) in data_files(table) {
        let rel = file.strip_prefix(table).unwrap();
        let partition = rel.parent().unwrap().to_string_lossy().into_owned();
        let name = rel.file_name().unwrap().to_string_lossy().into_owned();
        by.entry(partition).or_default().insert(name);
    }
    by
}

/// Files a reader would list that are no data file of any format.
fn debris(table: &Path) -> Vec<PathBuf> {
    visible_debris(table)
        .into_iter()
        .filter(|f| !f.to_string_lossy().ends_with(".parquet"))
        .collect()
}

/// Every row of a table whatever its format, as readers see it.
fn rows_of(table: &Path) -> Vec<Row> {
    let mut rows = table_rows(table);
    rows.extend(table_jsonl_rows(table));
    #[cfg(feature = "parquet")]
    for (file, partition) in data_files(table) {
        if file.to_string_lossy().ends_with(".parquet") {
            rows.extend(parquet_file_rows(&file, &partition));
        }
    }
    rows
}

#[test]
fn compaction_merges_each_partitions_small_files_into_one_with_every_row_kept() {
    let mut formats: Vec<(&[&str], &str)> = vec![
        (&[], ".csv"),
        (&["--compression", "gzip"], ".csv.gz"),
        (&["--compression", "zstd"], ".csv.zst"),
        (&["--format", "jsonl"], ".jsonl"),
    ];
    if cfg!(feature = "parquet") {
        formats.push((&["--format", "parquet"], ".parquet"));
    }
    for (extra, suffix) in formats {
        let w = loaded(extra);
        let table = w.path("t");
        let before = rows_of(&table);
        let files_before = files_by_partition(&table);
        assert_eq!(files_before.len(), 8, "{extra:?}");
        assert!(files_before.values().all(|f| f.len() >= 18), "{extra:?}");
        let out = w.run(COMPACT);
        assert_code(&out, 0);
        assert!(
            stderr(&out).contains("compacted 8 partition(s): 151 file(s)")
                && stderr(&out).contains(&format!(", {} rows,", before.len())),
            "{extra:?}: {}",
            stderr(&out)
        );
        assert_same_rows(rows_of(&table), before.clone(), &format!("{extra:?}"));
        let after = files_by_partition(&table);
        for (partition, names) in &after {
            assert_eq!(names.len(), 1, "{extra:?} {partition}: {names:?}");
            let name = names.iter().next().unwrap();
            assert!(
                name.starts_with("part-compact-") && name.ends_with(suffix),
                "{extra:?}: {name}"
            );
            assert!(files_before[partition].is_disjoint(names));
        }
        assert!(debris(&table).is_empty(), "{:?}", debris(&table));
        // Nothing is left to merge; the loads' job still knows its inputs.
        let again = w.run(COMPACT);
        assert_code(&again, 0);
        assert!(
            stderr(&again).contains("nothing to compact"),
            "{}",
            stderr(&again)
        );
        let reload = w.run(&LOAD.iter().chain(extra).copied().collect::<Vec<_>>());
        assert_code(&reload, 0);
        assert!(
            stderr(&reload).contains("nothing to load"),
            "{}",
            stderr(&reload)
        );
        assert_same_rows(rows_of(&table), before, &format!("{extra:?} at the end"));
    }
}

#[test]
fn dry_run_changes_nothing_and_partition_and_target_size_limit_what_merges() {
    let w = loaded(&[]);
    let table = w.path("t");
    let before = rows_of(&table);
    let files_before = files_by_partition(&table);
    let out = w.run(&["-t", "t", "--compact", "--dry-run", "--json"]);
    assert_code(&out, 0);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["outcome"], "would-compact");
    let partitions = summary["compacted"].as_array().unwrap();
    assert_eq!(partitions.len(), 8);
    assert_eq!(partitions[0]["files_after"], 1);
    assert_eq!(files_by_partition(&table), files_before);
    assert!(!w.path("t/_ingest/compact/journal").exists());

    // One partition only.
    let out = w.run(&["-t", "t", "--compact", "--partition", "country=US"]);
    assert_code(&out, 0);
    let after = files_by_partition(&table);
    for (partition, names) in &after {
        match partition.as_str() {
            "country=US" => assert_eq!(names.len(), 1),
            _ => assert_eq!(names, &files_before[partition], "{partition}"),
        }
    }
    // A small target: files merge into several, each under it.
    let out = w.run(&["-t", "t", "--compact", "--target-file-size", "3K"]);
    assert_code(&out, 0);
    let after = files_by_partition(&table);
    let de = &after["country=DE"];
    assert!(
        de.len() > 1 && de.len() < files_before["country=DE"].len(),
        "{de:?}"
    );
    for name in de.iter().filter(|n| n.starts_with("part-compact-")) {
        let size = std::fs::metadata(table.join("country=DE").join(name))
            .unwrap()
            .len();
        assert!(size <= 3 * 1024 + 200, "{name}: {size} bytes");
    }
    assert_same_rows(rows_of(&table), before, "after limited compactions");

    let out = w.run(&["-t", "t", "--compact", "--partition", "nosuch=1"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("not a partition column"),
        "{}",
        stderr(&out)
    );
    let out = w.run(&["-t", "t", "--compact", "--partition", "country"]);
    assert_code(&out, 2);
    let out = w.run(&["-t", "t", "--compact", "--format", "csv"]);
    assert_code(&out, 2);
}

#[test]
fn compaction_refuses_unpartitioned_tables_tables_in_no_state_and_a_load_named_compact() {
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(COMPACT);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("no ingest table"), "{}", stderr(&out));
    assert_code(
        &w.run(&["-t", "t", "--checkpoint-rows", "100", "orders"]),
        0,
    );
    let out = w.run(COMPACT);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("not partitioned"), "{}", stderr(&out));
    let out = w.run(&["-t", "u", "--job", "compact", "orders"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--compact"), "{}", stderr(&out));
}

#[test]
fn compaction_and_loads_exclude_each_other_and_an_interrupted_load_comes_first() {
    use fs2::FileExt;
    let w = loaded(&[]);
    // A load of another job holds the table's lock (on _ingest/) shared: a compaction
    // waits, or exits 75.
    let lock_dir = w.path("t/_ingest");
    let shared = std::fs::File::open(&lock_dir).unwrap();
    FileExt::try_lock_shared(&shared).unwrap();
    let out = w.run(COMPACT);
    assert_code(&out, 75);
    assert!(
        stderr(&out).contains("loads of other jobs"),
        "{}",
        stderr(&out)
    );
    drop(shared);
    // A compaction holds it exclusive: a load exits 75 naming it by its job's lock note.
    let exclusive = std::fs::File::open(&lock_dir).unwrap();
    exclusive.try_lock_exclusive().unwrap();
    std::fs::create_dir_all(w.path("t/_ingest/compact")).unwrap();
    std::fs::write(w.path("t/_ingest/compact/lock"), "pid 4242 since noon").unwrap();
    let more = w.write("more/x.csv", "order_id,country\n1,US\n");
    let out = w.run(&[
        "-t",
        "t",
        "-p",
        "country",
        "--job",
        "more",
        more.to_str().unwrap(),
    ]);
    assert_code(&out, 75);
    assert!(
        stderr(&out).contains("a compaction of the table (pid 4242 since noon)"),
        "{}",
        stderr(&out)
    );
    drop(exclusive);

    // A load of another job killed after its commit point: its recovery publishes by
    // name, so the compaction waits for it.
    let out = w.run_failing(
        "checkpoint.complete.after",
        &[
            "-t",
            "t",
            "-p",
            "country",
            "--job",
            "more",
            "--evolve",
            "add-columns",
            "more",
        ],
    );
    assert!(crashed(&out), "{}", stderr(&out));
    let out = w.run(COMPACT);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("interrupted") && stderr(&out).contains("--job more --recover"),
        "{}",
        stderr(&out)
    );
    assert_code(&w.run(&["-t", "t", "--job", "more", "--recover"]), 0);
    assert_code(&w.run(COMPACT), 0);
    assert_eq!(files_by_partition(&w.path("t"))["country=US"].len(), 1);
}

/// Every fail point a compaction reaches: the table right after the crash holds the same
/// rows (each partition old or new, whole), and `--recover` (or `--abort`, which refuses
/// once the exchange began) then `--compact` again leave them, one file per partition.
#[test]
fn a_compaction_killed_at_any_fail_point_leaves_every_row_once_after_recover_or_abort() {
    let mut crashes = BTreeSet::new();
    let template = loaded(&["--compression", "gzip"]);
    let before = rows_of(&template.path("t"));
    for point in listed_fail_points() {
        for finish in ["--recover", "--abort"] {
            let w = template.copy();
            let table = w.path("t");
            let out = w.run_failing(&format!("{point}:1"), COMPACT);
            let what = format!("{point}, then {finish}");
            if !crashed(&out) {
                assert_code(&out, 0);
                assert_same_rows(rows_of(&table), before.clone(), &what);
                continue;
            }
            crashes.insert(point.clone());
            assert_same_rows(
                rows_of(&table),
                before.clone(),
                &format!("{what}: the crash"),
            );
            assert!(
                visible_debris(&table).is_empty(),
                "{what}: {:?}",
                visible_debris(&table)
            );
            let out = w.run(&["-t", "t", "--job", "compact", finish]);
            if finish == "--abort" && out.status.code() == Some(1) {
                assert!(
                    stderr(&out).contains("--recover"),
                    "{what}: {}",
                    stderr(&out)
                );
                assert_code(&w.run(&["-t", "t", "--recover"]), 0);
            } else {
                assert_code(&out, 0);
            }
            assert_same_rows(
                rows_of(&table),
                before.clone(),
                &format!("{what}: finished"),
            );
            assert!(
                visible_debris(&table).is_empty(),
                "{what}: {:?}",
                visible_debris(&table)
            );
            assert_code(&w.run(COMPACT), 0);
            assert_same_rows(
                rows_of(&table),
                before.clone(),
                &format!("{what}: compacted again"),
            );
            let files = files_by_partition(&table);
            assert!(files.values().all(|f| f.len() == 1), "{what}: {files:?}");
            let status = w.run(&["-t", "t", "--status"]);
            assert!(stderr(&status).is_empty(), "{what}: {}", stderr(&status));
        }
    }
    for point in [
        "run.started.after",
        "compact.write.mid",
        "compact.verified.after",
        "checkpoint.complete.before",
        "checkpoint.complete.after",
        "checkpoint.committed.after",
        "overwrite.assemble.mid",
        "compact.linked.after",
        "overwrite.exchange.before",
        "overwrite.exchange.mid",
        "overwrite.exchanged.after",
        "run.finished.before",
        "run.finished.after",
    ] {
        assert!(
            crashes.contains(point),
            "{point} was never reached: {crashes:?}"
        );
    }
}

#[test]
fn random_sigkill_during_compaction_and_recovery_loses_and_duplicates_nothing() {
    let seed = clock_seed();
    // Every round compacts a copy of one loaded table.
    let loaded = Workdir::new();
    big_orders(&loaded, 30_000, &mut Rng(seed));
    let load = [
        "-t",
        "t",
        "-p",
        "country",
        "--checkpoint-rows",
        "500",
        "orders",
    ];
    assert_code(&loaded.run(&load), 0);
    let setup = || loaded.copy();
    let full = whole_load_ms(COMPACT, setup);
    let mut rng = Rng(seed);
    let mut kills = 0;
    for round in 0..4 {
        let w = setup();
        let table = w.path("t");
        let before = table_rows(&table);
        kills += operators_loop_killing_at_most(&w, COMPACT, &mut rng, full, seed, 4);
        assert_code(&w.run(&["-t", "t", "--recover"]), 0);
        let what = format!("seed {seed}, round {round}");
        assert_same_rows(table_rows(&table), before, &what);
        assert!(visible_debris(&table).is_empty(), "{what}");
        let files = files_by_partition(&table);
        assert!(files.values().all(|f| f.len() == 1), "{what}: {files:?}");
    }
    eprintln!("random SIGKILL of --compact: seed {seed}, {kills} kills landed over 4 rounds");
    assert!(
        kills >= 2,
        "seed {seed}: only {kills} kills landed mid-command"
    );
}

#[test]
fn a_reader_listing_a_partition_sees_the_old_files_or_the_merged_one_never_both_or_none() {
    use std::os::unix::fs::MetadataExt;
    let w = loaded(&[]);
    let partition = w.path("t/country=DE");
    let listing = move |dir: &PathBuf| -> Result<BTreeSet<String>, std::io::Error> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    };
    // As in the overwrite's reader test: a listing whose directory was exchanged while it
    // read is "torn" and may show some of the old names; every other one is whole.
    let inode = |dir: &PathBuf| std::fs::metadata(dir).map(|m| m.ino()).ok();
    let old = listing(&partition).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (started, first_listing) = std::sync::mpsc::channel();
    let poller = {
        let (stop, partition) = (stop.clone(), partition.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<Result<BTreeSet<String>, String>> = Vec::new();
            let mut torn = Vec::new();
            let mut polls = 0u64;
            loop {
                let stopping = stop.load(Ordering::SeqCst);
                let before = inode(&partition);
                let now = listing(&partition).map_err(|e| e.to_string());
                let after = inode(&partition);
                polls += 1;
                if before != after {
                    torn.push(now);
                } else if seen.last() != Some(&now) {
                    seen.push(now);
                }
                if polls == 1 {
                    let _ = started.send(());
                }
                if stopping {
                    return (seen, torn, polls);
                }
            }
        })
    };
    first_listing.recv().unwrap();
    let out = w.run(COMPACT);
    stop.store(true, Ordering::SeqCst);
    let (seen, torn, polls) = poller.join().unwrap();
    assert_code(&out, 0);
    let new = listing(&partition).unwrap();
    assert_eq!(new.len(), 1);
    assert!(old.is_disjoint(&new));
    for listing in &torn {
        let names = listing
            .as_ref()
            .expect("a torn listing still finds the directory");
        assert!(
            names.is_subset(&old) || *names == new,
            "a listing across the exchange mixed old and new files: {names:?}"
        );
    }
    assert_eq!(
        seen,
        vec![Ok(old), Ok(new)],
        "over {polls} listings, a reader saw something other than old then new"
    );
}

#[test]
fn status_files_counts_each_partitions_files_and_suggests_compact_until_it_ran() {
    let w = loaded(&[]);
    let out = w.run(&["-t", "t", "--status", "--files"]);
    assert_code(&out, 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("files: 151 in 8 partition(s)"), "{text}");
    assert!(text.contains("country=DE: 19 file(s)"), "{text}");
    assert!(text.contains("--compact"), "{text}");
    let out = w.run(&["-t", "t", "--status", "--files", "--json"]);
    assert_code(&out, 0);
    let both: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(both["jobs"][0]["job"], "default");
    assert_eq!(both["files"]["files"], 151);
    assert_eq!(both["files"]["compactable_partitions"], 8);
    let partitions = both["files"]["partitions"].as_array().unwrap();
    let bytes: u64 = partitions
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .sum();
    let on_disk: u64 = data_files(&w.path("t"))
        .iter()
        .map(|(f, _)| std::fs::metadata(f).unwrap().len())
        .sum();
    assert_eq!(bytes, on_disk);

    assert_code(&w.run(COMPACT), 0);
    let out = w.run(&["-t", "t", "--status", "--files"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("files: 8 in 8 partition(s)"), "{text}");
    assert!(!text.contains("ingest --target"), "{text}");
    // Without --status it means nothing.
    assert_code(&w.run(&["-t", "t", "--files"]), 2);
}
