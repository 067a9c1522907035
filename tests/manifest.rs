//! The manifest over many runs: segments folded and merged, a crash between writing
//! them and naming them, and what later runs see.

use crate::util::*;

/// Twelve days of files, loaded one run per day: enough folds for several merges.
fn days(w: &Workdir) -> Vec<std::path::PathBuf> {
    (1..=12)
        .map(|day| {
            for n in 0..(day % 3 + 1) {
                w.write(
                    &format!("in/day{day:02}/part{n}.csv"),
                    format!("id,day\n{day}{n}1,{day}\n{day}{n}2,{day}\n"),
                );
            }
            w.path(&format!("in/day{day:02}"))
        })
        .collect()
}

fn status_loaded(w: &Workdir) -> u64 {
    let out = w.run(&["-t", "t", "--status", "--json"]);
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json[0]["inputs_loaded"].as_u64().unwrap()
}

#[test]
fn many_runs_fold_into_few_segments_and_every_input_stays_loaded() {
    let w = Workdir::new();
    let days = days(&w);
    let mut files = 0;
    for day in &days {
        assert_code(&w.run(&["-t", "t", day.to_str().unwrap()]), 0);
        files += std::fs::read_dir(day).unwrap().count() as u64;
        assert_eq!(status_loaded(&w), files);
    }
    let segments = std::fs::read_dir(w.path("t/_ingest/default/manifest.d"))
        .unwrap()
        .count();
    assert!(
        (1..=5).contains(&segments),
        "{segments} segments after 12 runs"
    );
    let again = w.run(&["-t", "t", "in", "--json"]);
    assert_code(&again, 0);
    let json: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(json["outcome"], "nothing-to-load", "{json}");
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("in")]),
        "12 runs",
    );
}

#[test]
fn a_crash_between_writing_segments_and_naming_them_loses_and_repeats_nothing() {
    for crash_at in [1, 4, 7] {
        let w = Workdir::new();
        let days = days(&w);
        for (i, day) in days.iter().enumerate() {
            let args = ["-t", "t", day.to_str().unwrap()];
            if i + 1 == crash_at {
                let out = w.run_failing("manifest.fold.before", &args);
                assert!(
                    crashed(&out),
                    "run {crash_at} did not crash: {}",
                    stderr(&out)
                );
                // The run finished; only its fold is left, which the next start does.
                let status = w.run(&["-t", "t", "--status"]);
                assert_code(&status, 0);
            } else {
                assert_code(&w.run(&args), 0);
            }
        }
        let again = w.run(&["-t", "t", "in", "--json"]);
        assert_code(&again, 0);
        let json: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        assert_eq!(
            json["outcome"], "nothing-to-load",
            "crash at run {crash_at}: {json}"
        );
        assert_same_rows(
            table_rows(&w.path("t")),
            input_rows(&[w.path("in")]),
            &format!("crash in run {crash_at}'s fold"),
        );
        let files: usize = days
            .iter()
            .map(|d| std::fs::read_dir(d).unwrap().count())
            .sum();
        assert_eq!(status_loaded(&w), files as u64);
    }
}
