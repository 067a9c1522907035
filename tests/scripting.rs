//! Scripts and cron (issue 13.7): every run answers `--json` with one object, failed or
//! not; `--dry-run --json` lists the verdicts; `-q` errors are one line; usage mistakes
//! exit 2; cast errors say what was expected.

use crate::util::*;

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

#[test]
fn a_failed_run_still_prints_one_json_object_with_both_ways_out() {
    let w = Workdir::new();
    w.write("in.csv", "id,ts\n1,2026-11-28T10:00:00Z\n2,n/a\n");
    let out = w.run(&[
        "-t",
        "t",
        "--json",
        "--cast",
        "ts=timestamp",
        "--checkpoint-rows",
        "1",
        "in.csv",
    ]);
    assert_code(&out, 1);
    let objects = json_lines(&out);
    assert_eq!(objects.len(), 1, "{objects:?}");
    let o = &objects[0];
    assert_eq!(o["outcome"], "failed");
    assert_eq!(o["exit_code"], 1);
    assert_eq!(o["interrupted"], true);
    assert_eq!(o["recover_command"], "ingest --target t --recover");
    assert_eq!(o["abort_command"], "ingest --target t --abort");
    let error = o["error"].as_str().unwrap();
    assert!(
        error.contains("cannot read \"n/a\" as timestamp: expected a timestamp such as")
            && error.contains("give the cast a format, e.g. format = \"%d/%m/%Y %H:%M\""),
        "{error}"
    );
}

#[test]
fn usage_mistakes_exit_2_with_a_json_object_whatever_catches_them() {
    let w = Workdir::new();
    w.write("in.csv", "id,ts\n1,2026-11-28 10:00:00\n");
    w.write("bad-zone.toml", "inputs = [\"in.csv\"]\n[[stage]]\ntype = \"cast\"\ncolumns = { ts = \"timestamp\" }\ntimezone = \"Mars/Olympus\"\n");
    for args in [
        &["-t", "t", "--json", "--cast", "ts=instant", "in.csv"][..],
        &[
            "-t",
            "t",
            "--json",
            "--cast",
            "ts=timestamp",
            "--timezone",
            "Mars/Olympus",
            "in.csv",
        ],
        &["-t", "t", "--json", "--config", "bad-zone.toml"],
        &["-t", "t", "--json", "--frobnicate", "in.csv"],
    ] {
        let out = w.run(args);
        assert_code(&out, 2);
        let objects = json_lines(&out);
        assert_eq!(objects.len(), 1, "{args:?}: {objects:?}");
        assert_eq!(objects[0]["outcome"], "usage-error", "{args:?}");
        assert_eq!(objects[0]["exit_code"], 2, "{args:?}");
    }
    assert!(!w.path("t").exists());
}

#[test]
fn quiet_errors_are_exactly_one_line() {
    let w = Workdir::new();
    w.fixture("orders");
    w.write("bad.csv", "id,amount\n1,x\n");
    // A bad row (its message has a hint line and a what-next line), a contract mismatch
    // (both sides on lines of their own), an unknown flag (clap's usage block).
    assert_code(&w.run(&["-q", "-t", "t", "-p", "dt", "orders"]), 0);
    for args in [
        &["-q", "-t", "b", "--cast", "amount=int", "bad.csv"][..],
        &["-q", "-t", "t", "--job", "x", "-p", "country", "orders"],
        &["-q", "-t", "t", "--frobnicate", "orders"],
    ] {
        let out = w.run(args);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("ingest: "), "{err}");
    }
}

#[test]
fn dry_run_json_lists_every_input_with_its_verdict() {
    let w = Workdir::new();
    w.write("in/a.csv", "id\n1\n");
    w.write("in/b.csv", "id\n2\n");
    assert_code(&w.run(&["-q", "-t", "t", "in/a.csv", "in/b.csv"]), 0);
    w.write("in/b.csv", "id\n2\n3\n");
    w.write("in/c.csv", "id\n4\n");
    let out = w.run(&["-t", "t", "--dry-run", "--json", "in"]);
    assert_code(&out, 0);
    let objects = json_lines(&out);
    assert_eq!(objects.len(), 1);
    let mut verdicts: Vec<(String, String)> = objects[0]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let path = i["path"].as_str().unwrap();
            let name = path.rsplit('/').next().unwrap().to_string();
            (name, i["verdict"].as_str().unwrap().to_string())
        })
        .collect();
    verdicts.sort();
    let want: Vec<(String, String)> = [("a.csv", "loaded"), ("b.csv", "changed"), ("c.csv", "new")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(verdicts, want);
    assert!(objects[0]["inputs"][0]["size"].is_u64());
}

/// `ingest --dry-run DIR | head -1`: a reader that closes stdout early ends the command
/// quietly with 141, as SIGPIPE would (a panic on the closed pipe exited 101); a load
/// whose `--json` summary finds stdout closed still exits 0, its work done.
#[test]
fn a_closed_stdout_ends_quietly() {
    use std::process::Stdio;
    let w = Workdir::new();
    let orders = w.fixture("orders");
    let orders = orders.to_str().unwrap();
    assert_code(&w.run(&["-t", "t", "-p", "dt", orders]), 0);
    let closed = |args: &[&str]| {
        let mut child = w
            .cmd()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // No reader from the start: every write of the child finds the pipe closed.
        drop(child.stdout.take());
        child.wait_with_output().unwrap()
    };
    for args in [
        vec!["-t", "t2", "--dry-run", orders],
        vec!["-t", "t", "--status"],
        vec!["-t", "t", "--status", "--json"],
        vec!["--list-fail-points"],
        vec!["--infer-schema", orders],
        vec!["--completions", "bash"],
    ] {
        let out = closed(&args);
        assert_code(&out, 141);
        assert_eq!(stderr(&out), "", "{args:?}");
    }
    let out = closed(&["-t", "t3", "--json", orders]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("loaded"), "{}", stderr(&out));
}

/// Issue 40.8: `--cast` takes a date format on the command line; `--infer-schema`
/// honours `--null-markers` and calls nested JSON `json`.
#[test]
fn cast_formats_on_the_command_line_and_infer_schema_manners() {
    let w = Workdir::new();
    w.write("in.csv", "id,day,n\n1,28/11/2026,NA\n2,01/12/2026,3\n");
    let out = w.run(&["-t", "t", "--cast", "day=date:%d/%m/%Y", "in.csv"]);
    assert_code(&out, 0);
    let mut days: Vec<String> = table_rows(&w.path("t"))
        .into_iter()
        .map(|r| r["day"].clone())
        .collect();
    days.sort();
    assert_eq!(days, ["2026-11-28", "2026-12-01"]);
    let out = w.run(&["-t", "t2", "--cast", "id=int:%d", "in.csv"]);
    assert_code(&out, 2);

    let out = w.run(&["--infer-schema", "--null-markers", "NA", "in.csv"]);
    assert_code(&out, 0);
    let schema = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(schema.contains("n = \"int\""), "{schema}");
    let out = w.run(&["--infer-schema", "in.csv"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("n = \"string\""));

    w.write(
        "in.jsonl",
        "{\"id\": 1, \"tags\": {\"a\": 1}, \"ok\": true}\n",
    );
    let out = w.run(&["--infer-schema", "in.jsonl"]);
    assert_code(&out, 0);
    let schema = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        schema.contains("tags = \"json\"")
            && schema.contains("id = \"int\"")
            && schema.contains("ok = \"bool\""),
        "{schema}"
    );
}

/// Issue 40.8: `--status` names the first ten files an abort would remove, then how many
/// more; `--json` keeps every one.
#[test]
fn status_names_ten_files_an_abort_would_remove_then_counts_the_rest() {
    let w = Workdir::new();
    let mut csv = String::from("id,p\n");
    for i in 0..15 {
        csv.push_str(&format!("{i},p{i}\n"));
    }
    w.write("in.csv", csv);
    let out = w.run_failing("run.finished.before", &["-t", "t", "-p", "p", "in.csv"]);
    assert!(crashed(&out), "{}", stderr(&out));
    let status = w.run(&["-t", "t", "--status"]);
    let text = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(text.contains("remove 15 published file(s)"), "{text}");
    assert!(
        text.contains("... and 5 more (--status --json lists every one)"),
        "{text}"
    );
    assert_eq!(text.matches(".csv (").count(), 10, "{text}");
    let json: serde_json::Value =
        serde_json::from_slice(&w.run(&["-t", "t", "--status", "--json"]).stdout).unwrap();
    let files = json[0]["abort_would"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.as_str().unwrap().starts_with("  "))
        .count();
    assert_eq!(files, 15);
}
