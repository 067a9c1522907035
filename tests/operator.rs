//! Operator experience: progress on a terminal and off it, signals (130/143), --status,
//! --dry-run, --lock-wait, disk full, completions.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// Writes `rows` orders into `dir/orders-N.csv` files (quoted fields included).
fn many_orders(w: &Workdir, dir: &str, files: usize, rows: usize) {
    for f in 0..files {
        let mut text = String::from("order_id,dt,country,amount,note\n");
        for i in 0..rows / files {
            let id = f * rows + i;
            text.push_str(&format!(
                "{id},2026-11-{:02},C{},{}.50,\"note, {id}\"\n",
                1 + id % 28,
                id % 7,
                id % 1000
            ));
        }
        w.write(&format!("{dir}/orders-{f}.csv"), text);
    }
}

#[test]
fn progress_shows_on_a_terminal_and_not_under_cron() {
    let w = Workdir::new();
    w.fixture("orders");
    // A pseudo-terminal, through util-linux `script`.
    let cmd = format!("{} -t t -p dt orders", bin().display());
    let out = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .current_dir(w.dir.path())
        .env_remove("INGEST_FAIL_POINT")
        .stdin(Stdio::null())
        .output()
        .expect("util-linux script");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(
        screen.contains("rows (") && screen.contains("checkpoint"),
        "no bar on a terminal:\n{screen}"
    );
    assert!(screen.contains("ingest: loaded 912 rows"), "{screen}");

    // Not a terminal (cron): the summary only.
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&["-t", "t", "-p", "dt", "orders"]);
    assert_code(&out, 0);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("ingest: loaded 912 rows") && !err.contains('\u{1b}'),
        "{err}"
    );

    // Forced, and silenced.
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&["-t", "t", "--progress", "always", "orders"]);
    assert!(stderr(&out).contains("rows ("), "{}", stderr(&out));
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&["-t", "t", "--progress", "always", "--quiet", "orders"]);
    assert_code(&out, 0);
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

/// Starts a load, waits until its run is journaled, sends `signal` (once or twice).
/// Rows of the load a signal stops: five checkpoints of `load_and_signal`'s 20,000, so
/// the signal, sent once the run has begun, finds it loading.
const SIGNALLED_ROWS: usize = 100_000;

fn load_and_signal(w: &Workdir, signal: &str, times: usize) -> std::process::Output {
    let child = w
        .cmd()
        .args([
            "-t",
            "t",
            "-p",
            "country",
            "--checkpoint-rows",
            "20000",
            "orders",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let journal = w.path("t/_ingest/default/journal");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !journal.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    for _ in 0..times {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        std::thread::sleep(Duration::from_millis(1));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn sigterm_stops_at_a_checkpoint_and_recover_loses_nothing() {
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let w = Workdir::new();
        many_orders(&w, "orders", 4, SIGNALLED_ROWS);
        let out = load_and_signal(&w, signal, 1);
        assert_code(&out, code);
        let err = stderr(&out);
        assert!(err.contains(&format!("stopped by SIG{signal}")), "{err}");
        assert!(
            err.contains("--recover") || err.contains("nothing to recover"),
            "{err}"
        );
        assert!(visible_debris(&w.path("t")).is_empty());
        let recovered = w.run(&["-t", "t", "--recover"]);
        assert_code(&recovered, 0);
        assert_same_rows(
            table_rows(&w.path("t")),
            input_rows(&[w.path("orders")]),
            &format!("after SIG{signal}"),
        );
    }
}

#[test]
fn a_second_sigint_exits_at_once_and_stays_recoverable() {
    let w = Workdir::new();
    many_orders(&w, "orders", 4, SIGNALLED_ROWS);
    let out = load_and_signal(&w, "INT", 2);
    assert_code(&out, 130);
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("orders")]),
        "after two SIGINTs",
    );
}

#[test]
fn status_describes_an_interrupted_job_and_what_recover_would_do() {
    let w = Workdir::new();
    w.fixture("orders");
    assert!(crashed(&w.run_failing(
        "commit.mid:3",
        &["-t", "t", "-p", "dt", "--checkpoint-rows", "100", "orders"]
    )));
    let out = w.run(&["-t", "t", "--status"]);
    assert_code(&out, 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("job default: interrupted run"), "{text}");
    assert!(
        text.contains("checkpoints: 3 completed (300 rows), 2 committed (200 rows)"),
        "{text}"
    );
    assert!(text.contains("publish checkpoint 3"), "{text}");
    assert!(
        text.contains("resume ") && text.contains("2026-11-26.csv at byte"),
        "{text}"
    );
    let json = w.run(&["-t", "t", "--status", "--json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(jobs[0]["state"], "interrupted");
    assert_eq!(jobs[0]["checkpoints_committed"], 2);
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    let text = String::from_utf8_lossy(&w.run(&["-t", "t", "--status"]).stdout).into_owned();
    assert!(
        text.contains("job default: finished run") && text.contains("--recover would: nothing"),
        "{text}"
    );
    assert!(text.contains("3 loaded by finished runs"), "{text}");
}

#[test]
fn dry_run_lists_new_loaded_and_changed_inputs_and_writes_nothing() {
    let w = Workdir::new();
    let a = w.write("in/a.csv", "id\n1\n");
    w.write("in/b.csv", "id\n2\n");
    let out = w.run(&["-t", "t", "--dry-run", "in"]);
    assert_code(&out, 0);
    assert!(!w.path("t").exists(), "a dry run created the table");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("new\t"))
            .count(),
        2
    );
    assert_code(&w.run(&["-t", "t", "in/a.csv"]), 0);
    std::fs::write(&a, "id\n1\n3\n").unwrap();
    w.write("in/c.csv", "id\n4\n");
    let before = table_rows(&w.path("t"));
    let out = w.run(&["-t", "t", "--dry-run", "in"]);
    assert_code(&out, 0);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("changed\t") && l.contains("a.csv")),
        "{listing}"
    );
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("new\t") && l.contains("b.csv")),
        "{listing}"
    );
    assert_same_rows(table_rows(&w.path("t")), before, "after a dry run");
}

#[test]
fn lock_wait_waits_for_the_holder_then_loads() {
    let w = Workdir::new();
    w.write("a.csv", "id\n1\n");
    let lock = w.hold_lock("");
    let started = Instant::now();
    let out = w.run(&["-t", "t", "--lock-wait", "1", "a.csv"]);
    assert_code(&out, 75);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "gave up after {:?}",
        started.elapsed()
    );
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        fs2::FileExt::unlock(&lock).unwrap();
    });
    assert_code(&w.run(&["-t", "t", "--lock-wait", "30", "a.csv"]), 0);
    releaser.join().unwrap();
    assert_eq!(table_rows(&w.path("t")).len(), 1);
}

/// Runs a shell script in a new user and mount namespace, where it may mount a tmpfs
/// without privileges; `$1` is the work directory, `$INGEST` the binary.
fn in_mount_namespace(w: &Workdir, script: &str) -> std::process::Output {
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh"])
        .arg(w.dir.path())
        .env("INGEST", bin())
        .env_remove("INGEST_FAIL_POINT")
        .output()
        .expect("unshare (util-linux)");
    assert!(
        out.status.success(),
        "namespace script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_full_disk_fails_cleanly_and_recover_finishes_after_space_is_freed() {
    let w = Workdir::new();
    let orders = w.fixture("orders");
    std::fs::create_dir_all(w.path("mnt")).unwrap();
    let out = in_mount_namespace(
        &w,
        r#"set -u
        mount -t tmpfs -o size=160k tmpfs "$1/mnt"
        "$INGEST" -t "$1/mnt/t" -p dt,country --checkpoint-rows 50 "$1/orders" 2>"$1/load.err"
        echo "load=$?"
        cp -a "$1/mnt/t" "$1/after-fail"
        mount -o remount,size=64m "$1/mnt"
        "$INGEST" -t "$1/mnt/t" --recover 2>"$1/recover.err"
        echo "recover=$?"
        cp -a "$1/mnt/t" "$1/after-recover""#,
    );
    let codes = String::from_utf8_lossy(&out.stdout);
    let load_err = std::fs::read_to_string(w.path("load.err")).unwrap();
    assert!(codes.contains("load=1"), "{codes} {load_err}");
    assert!(load_err.contains("No space left on device"), "{load_err}");
    assert!(load_err.contains("--recover"), "{load_err}");
    // What is visible after the failure is exactly the committed checkpoints' rows.
    let expected = input_rows(&[orders]);
    let visible = table_rows(&w.path("after-fail"));
    assert!(visible.len() < expected.len());
    assert!(visible_debris(&w.path("after-fail")).is_empty());
    let committed: u64 =
        ingest::state::journal::replay(&w.path("after-fail/_ingest/default/journal"))
            .unwrap()
            .log
            .map_or(0, |log| {
                log.checkpoints
                    .iter()
                    .filter(|c| log.committed.contains(&c.checkpoint))
                    .map(|c| c.rows_written)
                    .sum()
            });
    assert_eq!(visible.len() as u64, committed);
    assert!(
        codes.contains("recover=0"),
        "{codes} {}",
        std::fs::read_to_string(w.path("recover.err")).unwrap()
    );
    assert_same_rows(
        table_rows(&w.path("after-recover")),
        expected,
        "after freeing space",
    );
}

#[test]
fn a_load_that_cannot_fit_fails_before_starting() {
    let w = Workdir::new();
    w.fixture("orders");
    std::fs::create_dir_all(w.path("mnt")).unwrap();
    let out = in_mount_namespace(
        &w,
        r#"mount -t tmpfs -o size=32k tmpfs "$1/mnt"
        "$INGEST" -t "$1/mnt/t" "$1/orders" 2>"$1/load.err"; echo "load=$?"
        ls -A "$1/mnt" > "$1/state.txt""#,
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("load=1"));
    let err = std::fs::read_to_string(w.path("load.err")).unwrap();
    assert!(err.contains("not enough free space for this load"), "{err}");
    // No run was started, and the refused load left nothing behind: no table, no lock.
    assert_eq!(
        std::fs::read_to_string(w.path("state.txt")).unwrap().trim(),
        "",
        "the refused load left something behind"
    );
}

#[test]
fn completions_are_printed_for_each_shell() {
    let w = Workdir::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = w.run(&["--completions", shell]);
        assert_code(&out, 0);
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("partition-by") && script.contains("ingest"),
            "{shell}: {script}"
        );
    }
}

#[test]
fn the_committed_man_page_is_current() {
    let rendered = ingest::cli::manpage::render().unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("man/ingest.1");
    if std::env::var_os("UPDATE_MAN").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "man/ingest.1 is stale: regenerate it with `UPDATE_MAN=1 cargo test the_committed_man_page_is_current`"
    );
}
