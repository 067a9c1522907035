//! `--on-bad-input quarantine` (issue 40.1): one bad input cannot stop a landing zone.
//! It is set aside with its reason, the others load, the run exits 3 and lists it; the
//! same command again skips it while it is unchanged; a changed one is tried again. No
//! row of a quarantined input is in the table, except the lines its record names (an
//! input that failed after earlier checkpoints had committed some of its rows).

use std::collections::BTreeMap;
use std::process::Output;

use crate::util::*;

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)))
}

fn ids(w: &Workdir) -> Vec<u64> {
    let mut ids: Vec<u64> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["id"].parse().unwrap())
        .collect();
    ids.sort();
    ids
}

/// `id,v` rows for ids `from..to`.
fn rows(from: u64, to: u64) -> String {
    let mut text = String::from("id,v\n");
    for id in from..to {
        text.push_str(&format!("{id},v{id}\n"));
    }
    text
}

/// The quarantined inputs of a `--json` summary, by file name.
fn quarantined(summary: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    summary["quarantined"]
        .as_array()
        .expect("a quarantined list")
        .iter()
        .map(|q| {
            let name = q["path"].as_str().unwrap().rsplit('/').next().unwrap();
            (name.to_string(), q.clone())
        })
        .collect()
}

const LOAD: &[&str] = &["-t", "t", "--on-bad-input", "quarantine", "--json", "in"];

#[test]
fn bad_inputs_are_set_aside_the_others_load_and_a_rerun_skips_them_until_they_change() {
    let w = Workdir::new();
    w.write("in/a.csv", rows(1, 4));
    // A quote that never closes: no parser can tell where the record ends.
    w.write("in/b.csv", "id,v\n10,ok\n11,\"never closed\n12,x\n");
    w.write("in/c.csv", rows(20, 23));
    w.write("in/d.csv", "x,y,z\n1,2,3\n");
    w.write("in/e.csv.gz", b"\x1f\x8b\x08 not gzip at all");
    w.write("in/f.csv", "id,v\n30,a\n31,b,extra\n32,c\n");
    let out = w.run(LOAD);
    assert_code(&out, 3);
    let summary = json(&out);
    let set_aside = quarantined(&summary);
    assert_eq!(
        set_aside.keys().collect::<Vec<_>>(),
        ["b.csv", "d.csv", "e.csv.gz", "f.csv"],
        "{summary}"
    );
    assert!(set_aside["b.csv"]["reason"]
        .as_str()
        .unwrap()
        .contains("never closes"));
    assert!(set_aside["d.csv"]["reason"]
        .as_str()
        .unwrap()
        .contains("column \"id\" is missing"));
    assert!(set_aside["e.csv.gz"]["reason"]
        .as_str()
        .unwrap()
        .contains("gzip"));
    assert!(set_aside["f.csv"]["reason"]
        .as_str()
        .unwrap()
        .contains("f.csv:3"));
    for q in set_aside.values() {
        assert_eq!(q["committed_through_line"], 0, "{q}");
    }
    assert_eq!(summary["inputs_loaded"], 2);
    assert_eq!(
        ids(&w),
        [1, 2, 3, 20, 21, 22],
        "no row of a quarantined input"
    );

    // The same command again: nothing new, exit 0, one line naming the quarantine.
    let out = w.run(&["-t", "t", "--on-bad-input", "quarantine", "in"]);
    assert_code(&out, 0);
    let said = stderr(&out);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("4 input(s) wait in quarantine"), "{said}");

    // --status lists them with their reasons, and so does its JSON.
    let status = w.run(&["-t", "t", "--status"]);
    assert_code(&status, 0);
    let text = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(text.contains("quarantined: 4 input(s)"), "{text}");
    assert!(text.contains("never closes"), "{text}");
    let status = json(&w.run(&["-t", "t", "--status", "--json"]));
    assert_eq!(status[0]["quarantined"].as_array().unwrap().len(), 4);

    // A fixed input is tried again and loads; a loaded input that changed is set aside.
    w.write("in/b.csv", "id,v\n10,ok\n11,closed\n12,x\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(w.path("in/a.csv"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"4,v4\n"))
        .unwrap();
    let out = w.run(LOAD);
    assert_code(&out, 3);
    let summary = json(&out);
    assert_eq!(quarantined(&summary).keys().collect::<Vec<_>>(), ["a.csv"]);
    assert!(quarantined(&summary)["a.csv"]["reason"]
        .as_str()
        .unwrap()
        .contains("changed since run"));
    assert_eq!(summary["inputs_in_quarantine"], 3);
    assert_eq!(ids(&w), [1, 2, 3, 10, 11, 12, 20, 21, 22]);
    // Changed again, it stays a changed input: its first rows are in the table.
    std::fs::OpenOptions::new()
        .append(true)
        .open(w.path("in/a.csv"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"5,v5\n"))
        .unwrap();
    let out = w.run(LOAD);
    assert_code(&out, 3);
    assert!(quarantined(&json(&out))["a.csv"]["reason"]
        .as_str()
        .unwrap()
        .contains("changed again"));
    assert_eq!(ids(&w), [1, 2, 3, 10, 11, 12, 20, 21, 22]);

    // Without quarantine a bad input still fails the run (exit 1), as before.
    w.write("in/g.csv", "id,v\n40,\"open\n");
    let out = w.run(&["-t", "t", "in"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("g.csv"), "{}", stderr(&out));
}

/// An input whose bad row comes after earlier checkpoints committed some of its rows:
/// those stay, exactly its rows through line `committed_through_line`; the rows of the
/// checkpoint it failed in (its own and other inputs') are read again without it.
#[test]
fn an_input_that_fails_after_committed_checkpoints_keeps_exactly_the_lines_its_record_names() {
    for threads in ["1", "4"] {
        let w = Workdir::new();
        w.write("in/a.csv", rows(1, 6));
        let mut big = rows(100, 140);
        big.push_str("140,bad,extra\n");
        big.push_str(&rows(141, 150)[5..]);
        w.write("in/b.csv", big);
        w.write("in/c.csv", rows(200, 204));
        let out = w.run(&[
            "-t",
            "t",
            "--on-bad-input",
            "quarantine",
            "--json",
            "--checkpoint-rows",
            "7",
            "--threads",
            threads,
            "in",
        ]);
        assert_code(&out, 3);
        let summary = json(&out);
        let b = &quarantined(&summary)["b.csv"];
        let through = b["committed_through_line"].as_u64().unwrap();
        // Checkpoints of 7 rows: a.csv's 5 and b.csv's lines 2-3, then 7 lines of b.csv
        // each, the last complete one ending at line 38; its bad row is on line 42.
        assert_eq!(through, 38, "{summary}");
        let mut expected: Vec<u64> = (1..6).collect();
        expected.extend(100..100 + (through - 1));
        expected.extend(200..204);
        assert_eq!(ids(&w), expected, "--threads {threads}");
        let status = json(&w.run(&["-t", "t", "--status", "--json"]));
        assert_eq!(
            status[0]["quarantined"][0]["committed_through_line"], through,
            "{status}"
        );
    }
}

/// Killed at every fail point (and right after a quarantine is journaled), then
/// recovered: the table ends with the good inputs' rows exactly once, and the bad input
/// set aside.
#[test]
fn crashes_around_a_quarantine_lose_and_duplicate_nothing() {
    let mut points = all_fail_points();
    points.push("quarantine.after".into());
    let args = [
        "-t",
        "t",
        "--on-bad-input",
        "quarantine",
        "--checkpoint-rows",
        "4",
        "-p",
        "p",
        "in",
    ];
    let mut crashes = 0;
    for point in &points {
        for hit in [1, 3] {
            let w = Workdir::new();
            w.write("in/a.csv", "id,v,p\n1,a,x\n2,b,y\n3,c,x\n4,d,y\n5,e,x\n");
            w.write("in/b.csv", "id,v,p\n10,a,x\n11,\"b,y\n");
            w.write("in/c.csv", "id,v,p\n20,a,x\n21,b,y\n22,c,x\n");
            let spec = format!("{point}:{hit}");
            let out = w.run_failing(&spec, &args);
            if crashed(&out) {
                crashes += 1;
                let recovered = w.run(&["-t", "t", "--recover"]);
                assert!(
                    matches!(recovered.status.code(), Some(0 | 3)),
                    "{spec}: {}",
                    stderr(&recovered)
                );
                let again = w.run(&args);
                assert!(
                    matches!(again.status.code(), Some(0 | 3)),
                    "{spec}: {}",
                    stderr(&again)
                );
            } else {
                assert_code(&out, 3);
            }
            assert_eq!(ids(&w), [1, 2, 3, 4, 5, 20, 21, 22], "{spec}");
            assert!(visible_debris(&w.path("t")).is_empty(), "{spec}");
            let out = w.run(&args);
            assert_code(&out, 0);
            assert!(
                stderr(&out).contains("1 input(s) wait in quarantine"),
                "{spec}: {}",
                stderr(&out)
            );
        }
    }
    assert!(crashes >= 20, "only {crashes} crashes");
}

/// Mutation testing's survivors (issue 40.1): an input that fails while the last
/// completed checkpoint stands inside an earlier input has no committed lines; a run
/// that fails on a bad input without quarantine is recovered without quarantine too (a
/// recovery fails on it, exit 1, and sets nothing aside).
#[test]
fn committed_lines_are_the_failing_inputs_own_and_a_failing_run_recovers_failing() {
    let w = Workdir::new();
    // Checkpoint 1 ends at a.csv's end; b.csv's row 10 is in checkpoint 2, never complete.
    w.write("in/a.csv", rows(1, 3));
    w.write("in/b.csv", "id,v\n10,ok\n11,\"never closed\n");
    let out = w.run(&[
        "-t",
        "t",
        "--on-bad-input",
        "quarantine",
        "--json",
        "--checkpoint-rows",
        "2",
        "in",
    ]);
    assert_code(&out, 3);
    assert_eq!(
        quarantined(&json(&out))["b.csv"]["committed_through_line"],
        0
    );
    assert_eq!(ids(&w), [1, 2]);

    let w = Workdir::new();
    w.write("in/a.csv", rows(1, 6));
    w.write("in/b.csv", "id,v\n10,ok\n11,\"never closed\n");
    let args = ["-t", "t", "--checkpoint-rows", "2", "in"];
    let out = w.run_failing("checkpoint.complete.after:1", &args);
    assert!(crashed(&out), "{}", stderr(&out));
    let out = w.run(&["-t", "t", "--recover", "--json"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("b.csv"), "{}", stderr(&out));
    let status = json(&w.run(&["-t", "t", "--status", "--json"]));
    assert_eq!(status[0]["quarantined"].as_array().map(Vec::len), Some(0));
}
