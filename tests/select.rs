//! Choosing inputs (issue 40.2): `--include` / `--exclude` globs below each given
//! directory, names starting with `.` or `_` never taken, `--min-age` leaving a file that
//! is still being written for a later run; the same as job-file keys.

use crate::util::*;

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)))
}

/// A landing zone as producers leave it: data, markers, a manifest, a copy in flight.
fn landing(w: &Workdir) {
    w.write("in/a.csv", "id,v\n1,a\n2,b\n");
    w.write("in/b.csv", "id,v\n3,c\n");
    w.write("in/sub/c.csv", "id,v\n4,d\n");
    w.write("in/sub/c_draft.csv", "id,v\n5,e\n");
    w.write("in/_SUCCESS", "");
    w.write("in/_temporary/0/part-0.csv", "id,v\n6,f\n");
    w.write("in/.b.csv.part", "id,v\n7,");
    w.write("in/manifest.json", "{\"files\": [\"a.csv\", \"b.csv\"]}\n");
}

fn ids(w: &Workdir, table: &str) -> Vec<String> {
    let mut ids: Vec<String> = table_rows(&w.path(table))
        .into_iter()
        .map(|r| r["id"].clone())
        .collect();
    ids.sort();
    ids
}

#[test]
fn include_and_exclude_choose_the_inputs_and_hidden_names_are_never_taken() {
    let w = Workdir::new();
    landing(&w);
    let out = w.run(&[
        "-t",
        "t",
        "--json",
        "--include",
        "*.csv",
        "--exclude",
        "*_draft.csv",
        "in",
    ]);
    assert_code(&out, 0);
    assert_eq!(json(&out)["inputs_loaded"], 3);
    assert_eq!(ids(&w, "t"), ["1", "2", "3", "4"]);

    // A pattern with a slash is matched against the whole path below the directory.
    let out = w.run(&["-t", "t2", "--include", "sub/*.csv", "in"]);
    assert_code(&out, 0);
    assert_eq!(ids(&w, "t2"), ["4", "5"]);

    // Without patterns, `_` and `.` names are still skipped; the manifest is not CSV
    // of the table's columns, so an exclude is the way to leave it out.
    let out = w.run(&["-t", "t3", "--exclude", "manifest.json", "in"]);
    assert_code(&out, 0);
    assert_eq!(ids(&w, "t3"), ["1", "2", "3", "4", "5"]);

    // A file named on the command line is taken as named.
    let out = w.run(&["-t", "t4", "--include", "*.json", "in/a.csv"]);
    assert_code(&out, 0);
    assert_eq!(ids(&w, "t4"), ["1", "2"]);

    let out = w.run(&["-t", "t5", "--include", "a[", "in"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("--include \"a[\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_input_younger_than_min_age_waits_for_a_later_run() {
    let w = Workdir::new();
    w.write("in/old.csv", "id,v\n1,a\n");
    w.write("in/new.csv", "id,v\n2,b\n");
    let touch = std::process::Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(w.path("in/old.csv"))
        .status()
        .unwrap();
    assert!(touch.success());

    let out = w.run(&["-t", "t", "--min-age", "1h", "--dry-run", "--json", "in"]);
    assert_code(&out, 0);
    let verdicts = json(&out)["inputs"].clone();
    let verdict_of = |name: &str| {
        verdicts
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["path"].as_str().unwrap().ends_with(name))
            .map(|v| v["verdict"].clone())
    };
    assert_eq!(verdict_of("old.csv").unwrap(), "new");
    assert_eq!(verdict_of("new.csv").unwrap(), "waiting");

    let out = w.run(&["-t", "t", "--min-age", "1h", "--json", "in"]);
    assert_code(&out, 0);
    assert_eq!(json(&out)["inputs_waiting"], 1);
    assert!(
        stderr(&out).contains("1 input(s) modified less than 1h ago wait for a later run"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ids(&w, "t"), ["1"]);

    // Once it is old enough, the next run takes it.
    let out = w.run(&["-t", "t", "--min-age", "1s", "--json", "in"]);
    let out = if json(&out)["inputs_waiting"] == 1 {
        std::thread::sleep(std::time::Duration::from_millis(1100));
        w.run(&["-t", "t", "--min-age", "1s", "--json", "in"])
    } else {
        out
    };
    assert_code(&out, 0);
    assert_eq!(ids(&w, "t"), ["1", "2"]);

    let out = w.run(&["-t", "t", "--min-age", "soon", "in"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("--min-age \"soon\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_job_file_chooses_inputs_the_same_way() {
    let w = Workdir::new();
    landing(&w);
    w.write(
        "job.toml",
        "target = \"t\"\ninputs = [\"in\"]\ninclude = [\"*.csv\"]\nexclude = [\"sub/**\"]\nmin_age = \"0s\"\n",
    );
    let out = w.run(&["--config", "job.toml"]);
    assert_code(&out, 0);
    assert_eq!(ids(&w, "t"), ["1", "2", "3"]);
    // The command line's patterns replace the file's, each list on its own.
    let out = w.run(&["--config", "job.toml", "-t", "t2", "--include", "c.csv"]);
    assert_code(&out, 0);
    assert_eq!(
        ids(&w, "t2"),
        Vec::<String>::new(),
        "the file's exclude still holds"
    );
    let out = w.run(&[
        "--config",
        "job.toml",
        "-t",
        "t3",
        "--include",
        "c.csv",
        "--exclude",
        "x",
    ]);
    assert_code(&out, 0);
    assert_eq!(ids(&w, "t3"), ["4"]);
}

/// The crash matrix with `--include` and `--exclude`: beside the orders, a same-shaped
/// file the exclude leaves out and a note no include takes. Whatever the crash, the
/// recovery (and the load again) commits the orders exactly once and nothing else: the
/// journaled inputs are the chosen ones.
#[test]
fn the_crash_matrix_holds_with_include_and_exclude() {
    let args = [
        "-t",
        "t",
        "-p",
        "dt",
        "--checkpoint-rows",
        "100",
        "--include",
        "*.csv",
        "--include",
        "*.csv.gz",
        "--exclude",
        "held/**",
        "orders",
    ];
    let crashes = crash_matrix(
        &all_fail_points(),
        &[1, 3],
        false,
        &args,
        || {
            let w = Workdir::new();
            let orders = w.fixture("orders");
            let first = std::fs::read_dir(&orders)
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.extension().is_some_and(|e| e == "csv"))
                .unwrap();
            let expected = input_rows(std::slice::from_ref(&orders));
            std::fs::create_dir_all(orders.join("held")).unwrap();
            std::fs::copy(&first, orders.join("held/again.csv")).unwrap();
            w.write("orders/NOTES.txt", "not, a table\n\"unterminated\n");
            (w, expected)
        },
        |_| {},
        |run| {
            assert_same_rows(table_rows(&run.w.path("t")), run.extra.clone(), &run.spec);
            let again = run.w.run(&args);
            assert_code(&again, 0);
            assert!(
                stderr(&again).contains("nothing to load"),
                "{}: {}",
                run.spec,
                stderr(&again)
            );
        },
    );
    assert!(crashes >= 20, "only {crashes} crashes happened");
}
