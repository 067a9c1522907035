//! `--mode overwrite-partitions`: each partition a load writes to is replaced as a whole,
//! atomically; partitions it does not write to stay byte-identical; a crash anywhere
//! ends, after `--recover`, with exactly the new content.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::util::*;

const LOAD_OLD: &[&str] = &["-t", "t", "-p", "country", "old"];

/// Small checkpoints (many of them, several files per partition) and one bad row, so the
/// rejects are committed checkpoint by checkpoint while the data waits for the exchange.
const OVERWRITE: &[&str] = &[
    "-t",
    "t",
    "-p",
    "country",
    "--mode",
    "overwrite-partitions",
    "--checkpoint-rows",
    "50",
    "--max-errors",
    "5",
    "new",
];

/// The partitions the new data writes to: two that exist and one that does not yet.
const TOUCHED: [&str; 3] = ["C1", "C3", "C9"];

fn note(i: usize) -> &'static str {
    [
        "plain",
        "\"comma, inside\"",
        "\"quote \"\"q\"\"\"",
        "\"multi\nline\"",
    ][i % 4]
}

/// Old rows over eight countries; new rows over `TOUCHED`, with one ragged row.
fn write_data(w: &Workdir) {
    let mut old = String::from("id,country,amount,note\n");
    for i in 0..400 {
        old.push_str(&format!(
            "{i},C{},{}.{:02},{}\n",
            i % 8,
            i,
            i % 100,
            note(i)
        ));
    }
    w.write("old/orders.csv", old);
    let mut new = String::from("id,country,amount,note\n");
    let mut good = new.clone();
    for i in 0..240 {
        let row = format!("{},{},{}.50,{}\n", 10_000 + i, TOUCHED[i % 3], i, note(i));
        new.push_str(&row);
        good.push_str(&row);
        if i == 77 {
            new.push_str("ragged,row\n");
        }
    }
    w.write("new/orders.csv", new);
    // The good rows alone, outside the inputs, for the expectation.
    w.write("new-good.csv", good);
}

fn expected(w: &Workdir) -> Vec<Row> {
    let mut rows: Vec<Row> = input_rows(&[w.path("old")])
        .into_iter()
        .filter(|r| !TOUCHED.contains(&r["country"].as_str()))
        .collect();
    rows.extend(input_rows(&[w.path("new-good.csv")]));
    rows
}

/// Every committed file of the partitions the overwrite must not change, with its bytes.
fn untouched_files(w: &Workdir) -> BTreeMap<PathBuf, Vec<u8>> {
    data_files(&w.path("t"))
        .into_iter()
        .filter(|(_, p)| !TOUCHED.contains(&p["country"].as_str()))
        .map(|(f, _)| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect()
}

/// A table holding the old data, and its untouched partitions' files.
fn old_table() -> (Workdir, BTreeMap<PathBuf, Vec<u8>>) {
    let w = Workdir::new();
    write_data(&w);
    assert_code(&w.run(LOAD_OLD), 0);
    let untouched = untouched_files(&w);
    assert!(untouched.len() >= 6, "{untouched:?}");
    (w, untouched)
}

fn rejected_rows(w: &Workdir) -> usize {
    let dir = w.path("t/_rejects/default");
    std::fs::read_dir(&dir)
        .map(|d| {
            d.map(|e| read_csv(&e.unwrap().path(), b',').len())
                .sum::<usize>()
        })
        .unwrap_or(0)
}

/// The invariant of an overwrite: exactly the new content in every touched partition,
/// untouched partitions byte-identical, the bad row rejected once, nothing left over.
#[track_caller]
fn assert_replaced(w: &Workdir, untouched: &BTreeMap<PathBuf, Vec<u8>>, what: &str) {
    assert_same_rows(table_rows(&w.path("t")), expected(w), what);
    assert!(
        untouched_files(w) == *untouched,
        "{what}: untouched changed"
    );
    assert!(
        visible_debris(&w.path("t")).is_empty(),
        "{what}: {:?}",
        visible_debris(&w.path("t"))
    );
    assert_eq!(rejected_rows(w), 1, "{what}: rejects");
    let again = w.run(&["-t", "t", "--recover"]);
    assert_code(&again, 0);
    assert!(
        stderr(&again).contains("nothing to recover"),
        "{what}: {}",
        stderr(&again)
    );
    for area in ["overwrite", "pending"] {
        let left: Vec<_> = std::fs::read_dir(w.path(&format!("t/_ingest/default/{area}")))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{what}: {area} left behind: {left:?}");
    }
}

#[test]
fn touched_partitions_are_replaced_and_the_others_kept_byte_for_byte() {
    let (w, untouched) = old_table();
    let out = w.run(OVERWRITE);
    assert_code(&out, 0);
    assert_replaced(&w, &untouched, "overwrite");
    // The partition that did not exist before is there, with only new rows.
    assert!(w.path("t/country=C9").is_dir());

    // A re-run loads nothing; `--reload` replaces the same partitions again: the rows are
    // not doubled, which is what makes an overwrite safe to repeat.
    let rerun = w.run(OVERWRITE);
    assert_code(&rerun, 0);
    assert!(
        stderr(&rerun).contains("nothing to load"),
        "{}",
        stderr(&rerun)
    );
    let mut reload = OVERWRITE.to_vec();
    reload.insert(0, "--reload");
    assert_code(&w.run(&reload), 0);
    assert_same_rows(table_rows(&w.path("t")), expected(&w), "reload");
    assert!(untouched_files(&w) == untouched, "reload changed untouched");
}

#[test]
fn overwrite_without_partitions_is_a_usage_error() {
    let (w, _) = old_table();
    let out = w.run(&["-t", "t", "--mode", "overwrite-partitions", "new"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("--mode overwrite-partitions")
            && stderr(&out).contains("--partition-by"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn nested_partitions_are_replaced_at_the_leaf() {
    let w = Workdir::new();
    w.write(
        "old/a.csv",
        "id,region,country\n1,EU,DE\n2,EU,FR\n3,US,DE\n4,EU,DE\n",
    );
    w.write("new/b.csv", "id,region,country\n5,EU,DE\n");
    let load =
        |dir: &str, mode: &str| w.run(&["-t", "t", "-p", "region,country", "--mode", mode, dir]);
    assert_code(&load("old", "append"), 0);
    assert_code(&load("new", "overwrite-partitions"), 0);
    let ids: BTreeSet<String> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| format!("{}/{}/{}", r["region"], r["country"], r["id"]))
        .collect();
    let want: BTreeSet<String> = ["EU/DE/5", "EU/FR/2", "US/DE/3"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(ids, want);
}

#[test]
fn every_fail_point_of_an_overwrite_then_recover_gives_exactly_the_new_content() {
    let crashes = crash_matrix(
        &all_fail_points(),
        &[1, 3],
        true,
        OVERWRITE,
        old_table,
        |run| {
            // Until the recovery, readers still see the old partitions, whole, unless the
            // crash came after the exchange of some of them.
            let point = run.point;
            if !point.starts_with("overwrite.exchange")
                && !point.starts_with("overwrite.exchanged")
                && !point.starts_with("run.finished")
                && !point.starts_with("manifest.")
            {
                let old: Vec<Row> = input_rows(&[run.w.path("old")]);
                let what = format!("{}, before", run.spec);
                assert_same_rows(table_rows(&run.w.path("t")), old, &what);
            }
        },
        |run| assert_replaced(&run.w, &run.extra, &run.spec),
    );
    eprintln!("overwrite crash matrix: {crashes} crashes, each recovered and checked");
    assert!(crashes >= 25, "only {crashes} crashes happened");
}

#[test]
fn an_overwrite_recovery_that_crashes_is_rerun_until_done() {
    for first in [
        "overwrite.assemble.mid:1",
        "overwrite.exchange.mid:1",
        "overwrite.exchanged.after:1",
        "checkpoint.complete.after:3",
    ] {
        for second in [
            "overwrite.assemble.mid",
            "overwrite.exchange.before",
            "overwrite.exchange.mid",
            "overwrite.exchanged.after",
            "run.finished.before",
        ] {
            let (w, untouched) = old_table();
            assert!(crashed(&w.run_failing(first, OVERWRITE)), "{first}");
            let out = w.run_failing(&format!("{second}:1"), &["-t", "t", "--recover"]);
            if !crashed(&out) {
                assert_code(&out, 0);
            }
            assert_code(&w.run(&["-t", "t", "--recover"]), 0);
            assert_replaced(&w, &untouched, &format!("{first} then {second}"));
        }
    }
}

#[test]
fn a_reader_polling_a_partition_sees_the_old_files_or_the_new_never_a_mix_or_nothing() {
    use std::os::unix::fs::MetadataExt;
    let (w, _) = old_table();
    let partition = w.path("t/country=C1");
    let listing = move |dir: &PathBuf| -> Result<BTreeSet<String>, std::io::Error> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    };
    // A listing is opendir then getdents. One whose directory was swapped in between
    // (the path names another inode after it than before it) may have opened the old
    // directory and read it while the replaced files were being deleted: POSIX gives it
    // some of the old names (README, "Replacing partitions"). Such a listing is "torn";
    // every other one must be exactly the old files or exactly the new.
    let inode = |dir: &PathBuf| std::fs::metadata(dir).map(|m| m.ino()).ok();
    let old = listing(&partition).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (started, first_listing) = std::sync::mpsc::channel();
    let poller = {
        let (stop, partition) = (stop.clone(), partition.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<Result<BTreeSet<String>, String>> = Vec::new();
            let mut torn: Vec<Result<BTreeSet<String>, String>> = Vec::new();
            let mut polls = 0u64;
            loop {
                // Read the flag before listing: the listing after the flag was seen set
                // is taken after the run ended, so the last one always shows the end
                // state, however the threads were scheduled (it once saw only "old").
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
    // The run starts only once the reader has listed the partition: the first listing
    // is always of the old content.
    first_listing.recv().unwrap();
    let out = w.run(OVERWRITE);
    stop.store(true, Ordering::SeqCst);
    let (seen, torn, polls) = poller.join().unwrap();
    assert_code(&out, 0);
    let new = listing(&partition).unwrap();
    assert!(old.is_disjoint(&new), "{old:?} {new:?}");
    for listing in &torn {
        let names = listing
            .as_ref()
            .expect("a torn listing still finds the directory");
        assert!(
            names.is_subset(&old) || *names == new,
            "a listing across the swap mixed old and new files: {names:?}"
        );
    }
    assert_eq!(
        seen,
        vec![Ok(old), Ok(new)],
        "over {polls} listings, a reader saw something other than old then new"
    );
    eprintln!(
        "{polls} listings during the overwrite, {} across the swap",
        torn.len()
    );
}
