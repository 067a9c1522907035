//! Durability rules checked on a syscall trace (strace), since a `kill -9` keeps the page
//! cache and cannot tell an fsync from no fsync. For every checkpoint in the journal:
//!
//! 1. its staged files, its staging directory and its stage snapshots are fsynced before
//!    the `CheckpointComplete` record is written;
//! 2. the journal is fsynced after that record and before any of its files is renamed;
//! 3. every rename into the table uses `RENAME_NOREPLACE`, and every directory it touched
//!    is fsynced before the `Committed` record is written;
//! 4. every directory created is fsynced in its parent before a journal record that
//!    relies on it is written;
//! 5. a new journal is fsynced, renamed into place and its directory fsynced before any
//!    data is staged;
//! 6. overwrite mode: the shadow partitions are fsynced before the `Exchange` record, each
//!    exchange follows that record's fsync and both of its parents are fsynced before
//!    `Exchanged` is written, and no old file is removed before `Exchanged` is durable.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ingest::core::records::Record;
use ingest::state::journal;

use crate::util::*;

#[derive(Debug, Clone)]
enum Call {
    Sync(String),
    Write(String),
    Rename {
        from: String,
        to: String,
        noreplace: bool,
        exchange: bool,
    },
    Mkdir(String),
    /// `unlinkat(dirfd, name)`: the directory's path (strace -y) joined with the name;
    /// `unlink(path)` and `rmdir(path)`: the path.
    Unlink(String),
    /// `syncfs`: every file and directory of the (one) filesystem made durable.
    SyncFs,
}

impl Call {
    /// True when this call makes `path` durable: its fsync, or a `syncfs`.
    fn syncs(&self, path: &str) -> bool {
        match self {
            Call::Sync(p) => p == path,
            Call::SyncFs => true,
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
struct Event {
    call: Call,
    start: usize,
    end: usize,
}

/// Quoted string arguments of a syscall line, in order.
fn quoted(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.by_ref().next() {
        if c == '"' {
            let mut s = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => s.push(chars.next().unwrap_or('\\')),
                    '"' => break,
                    c => s.push(c),
                }
            }
            out.push(s);
        }
    }
    out
}

/// The path strace -y prints for the first fd argument: `name(3</a/b>, …`.
fn fd_path(text: &str) -> Option<String> {
    let open = text.find('<')?;
    let close = text[open..].find('>')? + open;
    Some(text[open + 1..close].to_string())
}

fn parse(trace: &str) -> Vec<Event> {
    let mut pending: HashMap<&str, (String, usize)> = HashMap::new();
    let mut events = Vec::new();
    for (i, line) in trace.lines().enumerate() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let (text, start) = if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            pending.insert(pid, (head.to_string(), i));
            continue;
        } else if rest.starts_with("<...") {
            let Some((head, start)) = pending.remove(pid) else {
                continue;
            };
            let tail = rest.split_once("resumed>").map_or("", |(_, t)| t);
            (format!("{head}{tail}"), start)
        } else {
            (rest.to_string(), i)
        };
        // strace appends ` = RET` (padded after a resume); failures return -1.
        let ret = text.rsplit('=').next().unwrap_or("").trim();
        let ok = text.contains('=') && !ret.starts_with('-') && !ret.starts_with('?');
        if !ok {
            continue;
        }
        let call = if text.starts_with("fsync(") || text.starts_with("fdatasync(") {
            fd_path(&text).map(Call::Sync)
        } else if text.starts_with("syncfs(") {
            Some(Call::SyncFs)
        } else if text.starts_with("write(") {
            fd_path(&text).map(Call::Write)
        } else if text.starts_with("renameat2(")
            || text.starts_with("rename(")
            || text.starts_with("renameat(")
        {
            let q = quoted(&text);
            (q.len() >= 2).then(|| Call::Rename {
                from: q[0].clone(),
                to: q[1].clone(),
                noreplace: text.contains("RENAME_NOREPLACE"),
                exchange: text.contains("RENAME_EXCHANGE"),
            })
        } else if text.starts_with("mkdir(") || text.starts_with("mkdirat(") {
            quoted(&text).into_iter().next().map(Call::Mkdir)
        } else if text.starts_with("unlink(") || text.starts_with("rmdir(") {
            quoted(&text).into_iter().next().map(Call::Unlink)
        } else if text.starts_with("unlinkat(") {
            let name = quoted(&text).into_iter().next();
            fd_path(&text)
                .zip(name)
                .map(|(dir, name)| Call::Unlink(format!("{dir}/{name}")))
        } else {
            None
        };
        if let Some(call) = call {
            events.push(Event {
                call,
                start,
                end: i,
            });
        }
    }
    events
}

fn parent(path: &str) -> String {
    Path::new(path)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

/// The end of the first fsync of `path` (or syncfs) that began after `after` (a trace
/// line index): one that began earlier may have missed what happened at `after`.
fn synced_after(events: &[Event], path: &str, after: usize) -> Option<usize> {
    events
        .iter()
        .filter(|e| e.call.syncs(path) && e.start > after)
        .map(|e| e.end)
        .min()
}

fn strace(w: &Workdir, args: &[&str], env: Option<(&str, &str)>) -> String {
    let trace = w.path("trace.txt");
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-y", "-s", "64", "-o"]).arg(&trace);
    cmd.args([
        "-e",
        "trace=fsync,fdatasync,syncfs,write,rename,renameat,renameat2,mkdir,mkdirat,unlink,unlinkat,rmdir",
    ]);
    cmd.arg(bin()).args(args).current_dir(w.dir.path());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("INGEST_") {
            cmd.env_remove(key);
        }
    }
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .expect("strace is installed (the CI script installs it)");
    assert!(
        out.status.success() || env.is_some(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&trace).unwrap()
}

/// The journal records this trace wrote (the journal's last ones, in order), each with
/// the traced write that appended it; and the journal's path.
fn traced_records<'e>(events: &'e [Event], job: &Path) -> (String, Vec<(&'e Event, Record)>) {
    let journal_path = job.join("journal").to_str().unwrap().to_string();
    let records = journal_records(&job.join("journal"));
    let writes: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(&e.call, Call::Write(p) if *p == journal_path))
        .collect();
    assert!(!writes.is_empty(), "the trace wrote no journal record");
    assert!(
        writes.len() <= records.len(),
        "{} journal writes traced, {} records: {:?}",
        writes.len(),
        records.len(),
        writes.iter().map(|w| w.start).collect::<Vec<_>>()
    );
    let written = records[records.len() - writes.len()..].to_vec();
    (journal_path, writes.into_iter().zip(written).collect())
}

/// Checks rules 1 to 4 for the journal records this trace wrote.
fn check(trace: &str, table: &Path) {
    let events = parse(trace);
    let job = table.join("_ingest/default");
    let (journal_path, traced) = traced_records(&events, &job);
    let records = journal_records(&job.join("journal"));
    let mut checkpoints_seen = 0;
    let mut committed_seen = 0;
    let mut checked_files = 0;
    let mut complete_end: HashMap<u64, usize> = HashMap::new();
    for (write, record) in &traced {
        match record {
            Record::CheckpointComplete(c) => {
                checkpoints_seen += 1;
                let durable = synced_after(&events, &journal_path, write.start)
                    .expect("journal fsync after CheckpointComplete");
                complete_end.insert(c.checkpoint, durable);
                for f in &c.files {
                    let staged = job.join(&f.staged).to_str().unwrap().to_string();
                    // The fsync (or syncfs) began after the file's last write returned.
                    let written = events
                        .iter()
                        .filter(|e| matches!(&e.call, Call::Write(p) if *p == staged))
                        .map(|e| e.end)
                        .max()
                        .unwrap_or(0);
                    let synced = events
                        .iter()
                        .any(|e| e.call.syncs(&staged) && e.start > written && e.end < write.start);
                    assert!(
                        synced,
                        "rule 1: {staged} not fsynced before CheckpointComplete({})",
                        c.checkpoint
                    );
                    let dir = parent(&staged);
                    let dir_synced = events
                        .iter()
                        .any(|e| e.call.syncs(&dir) && e.end < write.start);
                    assert!(
                        dir_synced,
                        "rule 1: staging dir {dir} not fsynced before CheckpointComplete"
                    );
                    checked_files += 1;
                }
                for s in &c.snapshots {
                    let snap = job.join(&s.file).to_str().unwrap().to_string();
                    let synced = events
                        .iter()
                        .any(|e| e.call.syncs(&snap) && e.end < write.start);
                    assert!(
                        synced,
                        "rule 1: snapshot {snap} not fsynced before CheckpointComplete"
                    );
                }
                // Rule 4 for the staging directories this record relies on.
                for e in &events {
                    if let Call::Mkdir(d) = &e.call {
                        let d_abs = abs(table, d);
                        if c.files
                            .iter()
                            .any(|f| job.join(&f.staged).starts_with(&d_abs))
                        {
                            let p = parent(d_abs.to_str().unwrap());
                            let ok = synced_after(&events, &p, e.end)
                                .is_some_and(|end| end < write.start);
                            assert!(
                                ok,
                                "rule 4: {d} not fsynced in its parent before CheckpointComplete"
                            );
                        }
                    }
                }
            }
            Record::Committed { checkpoint } => {
                committed_seen += 1;
                let c = records
                    .iter()
                    .find_map(|r| match r {
                        Record::CheckpointComplete(c) if c.checkpoint == *checkpoint => Some(c),
                        _ => None,
                    })
                    .unwrap();
                for f in &c.files {
                    let dest = table.join(&f.dest).to_str().unwrap().to_string();
                    let Some(rename) = events.iter().find(|e| matches!(&e.call, Call::Rename { to, .. } if abs(table, to).to_str() == Some(&dest)))
                    else {
                        continue; // renamed by an earlier (crashed) process
                    };
                    let Call::Rename { noreplace, .. } = &rename.call else {
                        unreachable!()
                    };
                    assert!(noreplace, "rule 3: {dest} renamed without RENAME_NOREPLACE");
                    if let Some(&durable) = complete_end.get(checkpoint) {
                        assert!(
                            rename.start > durable,
                            "rule 2: {dest} renamed before the journal was fsynced"
                        );
                    }
                    let dir = parent(&dest);
                    let ok = synced_after(&events, &dir, rename.end)
                        .is_some_and(|end| end < write.start);
                    let syncs: Vec<_> = events
                        .iter()
                        .filter(|e| e.call.syncs(&dir))
                        .map(|e| e.end)
                        .collect();
                    assert!(ok, "rule 3: {dir} not fsynced after renaming {dest} (line {}) and before Committed({checkpoint}) (line {}); syncs at {syncs:?}", rename.end, write.start);
                    for e in &events {
                        if let Call::Mkdir(d) = &e.call {
                            if abs(table, d) == Path::new(&dir) {
                                let p = parent(&dir);
                                let ok = synced_after(&events, &p, e.end)
                                    .is_some_and(|end| end < write.start);
                                assert!(ok, "rule 4: partition dir {dir} not fsynced in its parent before Committed");
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    assert!(checkpoints_seen > 0 && committed_seen > 0 && checked_files > 0);
}

fn abs(table: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        table.parent().unwrap().join(p)
    }
}

fn journal_records(path: &Path) -> Vec<Record> {
    let replay = journal::replay(path).unwrap();
    let log = replay.log.unwrap();
    let mut records = vec![Record::RunStarted(log.started.clone())];
    // Rebuild the on-disk order: CC(n), Committed(n), …, RunFinished.
    for c in &log.checkpoints {
        records.push(Record::CheckpointComplete(c.clone()));
        if log.committed.contains(&c.checkpoint) {
            records.push(Record::Committed {
                checkpoint: c.checkpoint,
            });
        }
    }
    if let Some(partitions) = &log.exchange {
        records.push(Record::Exchange {
            partitions: partitions.clone(),
        });
    }
    if log.exchanged {
        records.push(Record::Exchanged);
    }
    if log.finished {
        records.push(Record::RunFinished { rows_written: 0 });
    }
    records
}

#[test]
fn a_load_fsyncs_in_protocol_order() {
    let w = Workdir::new();
    w.fixture("orders");
    let table = w.dir.path().join("t");
    let t = table.to_str().unwrap();
    let trace = strace(
        &w,
        &[
            "-t",
            t,
            "-p",
            "dt,country",
            "--dedupe-key",
            "order_id",
            "--checkpoint-rows",
            "150",
            "orders",
        ],
        None,
    );
    check(&trace, &table);
    // Rule 5: the journal is durable (file, rename, directory) before anything is staged.
    let events = parse(&trace);
    // A few partitions per checkpoint: their own fsyncs, never a `syncfs`, which would
    // also wait for whatever else the filesystem holds dirty.
    assert!(!events.iter().any(|e| matches!(e.call, Call::SyncFs)));
    let job = table.join("_ingest/default").to_str().unwrap().to_string();
    let tmp = format!("{job}/journal.tmp");
    let tmp_sync = events
        .iter()
        .find(|e| matches!(&e.call, Call::Sync(p) if *p == tmp))
        .expect("journal.tmp fsynced")
        .end;
    let rename = events
        .iter()
        .find(|e| matches!(&e.call, Call::Rename { from, .. } if from.ends_with("journal.tmp")))
        .unwrap();
    let dir_sync =
        synced_after(&events, &job, rename.end).expect("job dir fsynced after the journal rename");
    let first_staging = events
        .iter()
        .find(|e| matches!(&e.call, Call::Mkdir(d) if d.contains("/pending")))
        .unwrap();
    assert!(
        tmp_sync < rename.start && dir_sync < first_staging.start,
        "rule 5 violated"
    );
    assert_same_rows(
        table_rows(&table),
        dedupe(input_rows(&[w.path("orders")]), "order_id"),
        "traced load",
    );
}

/// The same rules when every step makes its files durable with one `syncfs` (as a
/// checkpoint of many partitions does): the staged files and directories are not
/// fsynced one by one, and the syncfs comes where their fsyncs would.
#[test]
fn a_load_that_syncs_the_filesystem_keeps_protocol_order() {
    let w = Workdir::new();
    w.fixture("orders");
    let table = w.dir.path().join("t");
    let t = table.to_str().unwrap();
    let args = [
        "-t",
        t,
        "-p",
        "dt,country",
        "--checkpoint-rows",
        "150",
        "orders",
    ];
    let trace = strace(&w, &args, Some(("INGEST_SYNCFS_FROM", "1")));
    check(&trace, &table);
    let events = parse(&trace);
    assert!(events.iter().any(|e| matches!(e.call, Call::SyncFs)));
    let staged_fsyncs = events
        .iter()
        .filter(|e| matches!(&e.call, Call::Sync(p) if p.ends_with(".inprogress")))
        .count();
    assert_eq!(staged_fsyncs, 0, "staged files fsynced one by one");
    assert_same_rows(
        table_rows(&table),
        input_rows(&[w.path("orders")]),
        "traced load",
    );
}

#[test]
fn recovery_fsyncs_in_protocol_order() {
    let w = Workdir::new();
    w.fixture("orders");
    let table = w.dir.path().join("t");
    let t = table.to_str().unwrap();
    let out = w.run_failing(
        "commit.mid:3",
        &[
            "-t",
            t,
            "-p",
            "dt,country",
            "--checkpoint-rows",
            "150",
            "orders",
        ],
    );
    assert!(crashed(&out));
    let trace = strace(&w, &["-t", t, "--recover"], None);
    check(&trace, &table);
    assert_same_rows(
        table_rows(&table),
        input_rows(&[w.path("orders")]),
        "traced recovery",
    );
}

#[test]
fn an_overwrite_fsyncs_in_protocol_order() {
    let w = Workdir::new();
    w.fixture("orders");
    let table = w.dir.path().join("t");
    let t = table.to_str().unwrap();
    assert_code(&w.run(&["-t", t, "-p", "country", "orders"]), 0);
    let trace = strace(
        &w,
        &[
            "-t",
            t,
            "-p",
            "country",
            "--mode",
            "overwrite-partitions",
            "--reload",
            "--checkpoint-rows",
            "150",
            "orders",
        ],
        None,
    );
    check(&trace, &table);
    let events = parse(&trace);
    let job = table.join("_ingest/default");
    let (journal_path, traced) = traced_records(&events, &job);
    let at = |wanted: fn(&Record) -> bool| {
        let (write, _) = traced
            .iter()
            .find(|(_, r)| wanted(r))
            .expect("record traced");
        write.start
    };
    let exchange_write = at(|r| matches!(r, Record::Exchange { .. }));
    let exchanged_write = at(|r| matches!(r, Record::Exchanged));
    let Some((_, Record::Exchange { partitions })) = traced
        .iter()
        .find(|(_, r)| matches!(r, Record::Exchange { .. }))
    else {
        unreachable!()
    };
    let exchange_durable = synced_after(&events, &journal_path, exchange_write).unwrap();
    let exchanged_durable = synced_after(&events, &journal_path, exchanged_write).unwrap();
    let countries: std::collections::BTreeSet<String> = input_rows(&[w.path("orders")])
        .into_iter()
        .map(|r| format!("country={}", r["country"]))
        .collect();
    let swapped: std::collections::BTreeSet<String> =
        partitions.iter().map(|s| s.partition.clone()).collect();
    assert_eq!(swapped, countries);
    let run_dir = job.join("overwrite").to_str().unwrap().to_string();
    for swap in partitions {
        let live = table.join(&swap.partition).to_str().unwrap().to_string();
        let swap_event = events
            .iter()
            .find(|e| matches!(&e.call, Call::Rename { to, exchange, .. } if *exchange && *to == live))
            .unwrap_or_else(|| panic!("rule 6: {live} never exchanged"));
        let Call::Rename { from: shadow, .. } = &swap_event.call else {
            unreachable!()
        };
        assert!(shadow.starts_with(&run_dir), "{shadow}");
        let shadow_synced = events
            .iter()
            .any(|e| matches!(&e.call, Call::Sync(p) if p == shadow) && e.end < exchange_write);
        assert!(
            shadow_synced,
            "rule 6: {shadow} not fsynced before Exchange"
        );
        assert!(
            swap_event.start > exchange_durable,
            "rule 6: {live} exchanged before the Exchange record was durable"
        );
        for dir in [parent(&live), parent(shadow)] {
            let ok = synced_after(&events, &dir, swap_event.end)
                .is_some_and(|end| end < exchanged_write);
            assert!(ok, "rule 6: {dir} not fsynced after the exchange of {live}");
        }
    }
    let early_unlink = events.iter().find(|e| {
        matches!(&e.call, Call::Unlink(p) if p.starts_with(&run_dir)) && e.start < exchanged_durable
    });
    assert!(
        early_unlink.is_none(),
        "rule 6: old content removed before Exchanged was durable: {early_unlink:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.call, Call::Unlink(p) if p.starts_with(&run_dir))),
        "the old content was never removed"
    );
    assert_same_rows(
        table_rows(&table),
        input_rows(&[w.path("orders")]),
        "traced overwrite",
    );
}

/// The journal records a load appends (all but `RunStarted`), counted on a clean run of
/// `args` in a fresh copy of the fixture: `journal.write.after:N` then crashes at the
/// N-th of them.
fn appended_records(args: &[&str], setup: impl Fn(&Workdir)) -> Vec<Record> {
    let w = Workdir::new();
    setup(&w);
    assert_code(&w.run(args), 0);
    let mut records = journal_records(&w.path("t/_ingest/default/journal"));
    records.remove(0);
    records
}

/// The first completed fsync of `path` in the trace.
fn first_sync(events: &[Event], path: &str) -> Option<usize> {
    synced_after(events, path, 0)
}

/// Issue 12: a load killed between a journal record's `write` and its `fsync` leaves a
/// record in the page cache only. Recovery must fsync the journal before it acts on that
/// record: before it renames a file into the table, exchanges a partition or folds the
/// run into the manifest. Otherwise a power cut during recovery keeps the table's new
/// files and loses the record that accounts for them.
#[test]
fn recovery_fsyncs_a_record_the_crashed_load_never_synced_before_acting_on_it() {
    let load: &[&str] = &[
        "-t",
        "t",
        "-p",
        "dt,country",
        "--checkpoint-rows",
        "150",
        "orders",
    ];
    let fixture = |w: &Workdir| {
        w.fixture("orders");
    };
    let records = appended_records(load, fixture);
    let first_complete = 1 + records
        .iter()
        .position(|r| matches!(r, Record::CheckpointComplete(_)))
        .unwrap();
    let run_finished = records.len();
    assert!(matches!(
        records[run_finished - 1],
        Record::RunFinished { .. }
    ));
    for hit in [first_complete, first_complete + 2, run_finished] {
        for verb in ["--recover", "load"] {
            let w = Workdir::new();
            fixture(&w);
            let spec = format!("journal.write.after:{hit}");
            let out = w.run_failing(&spec, load);
            assert!(crashed(&out), "{spec}: {}", stderr(&out));
            let table = w.path("t");
            let t = table.to_str().unwrap();
            let args: Vec<&str> = if verb == "load" {
                ["-t", t].iter().chain(&load[2..]).copied().collect()
            } else {
                vec!["-t", t, "--recover"]
            };
            if verb == "load" && hit != run_finished {
                // A plain load refuses an interrupted run; only the fold is its business.
                continue;
            }
            let trace = strace(&w, &args, None);
            let events = parse(&trace);
            let job = table.join("_ingest/default");
            let journal = job.join("journal").to_str().unwrap().to_string();
            let synced = first_sync(&events, &journal)
                .unwrap_or_else(|| panic!("{spec} {verb}: the journal was never fsynced"));
            let inside_table = |to: &str| {
                let to = abs(&table, to);
                to.starts_with(&table) && !to.starts_with(&job)
            };
            let first_publish = events
                .iter()
                .find(|e| matches!(&e.call, Call::Rename { to, .. } if inside_table(to)));
            let manifest = job.join("manifest").to_str().unwrap().to_string();
            let first_fold = events.iter().find(
                |e| matches!(&e.call, Call::Rename { to, .. } if abs(&table, to).to_str() == Some(&manifest)),
            );
            if hit == run_finished {
                let fold =
                    first_fold.unwrap_or_else(|| panic!("{spec} {verb}: the run was never folded"));
                assert!(
                    fold.start > synced,
                    "{spec} {verb}: the manifest was folded (line {}) before the journal holding \
                     RunFinished was fsynced (line {synced})",
                    fold.start
                );
            } else {
                let publish =
                    first_publish.unwrap_or_else(|| panic!("{spec} {verb}: nothing was published"));
                assert!(
                    publish.start > synced,
                    "{spec} {verb}: {:?} renamed into the table (line {}) before the journal was \
                     fsynced (line {synced})",
                    publish.call,
                    publish.start
                );
                check(&trace, &table);
            }
            assert_same_rows(
                table_rows(&table),
                input_rows(&[w.path("orders")]),
                &format!("{spec} then {verb}"),
            );
        }
    }
}

/// Issue 12, overwrite mode: a crash between the `Exchange` record's write and its fsync;
/// recovery must fsync the journal before its first exchange of a live partition.
#[test]
fn recovery_fsyncs_an_unsynced_exchange_record_before_exchanging() {
    let overwrite: &[&str] = &[
        "-t",
        "t",
        "-p",
        "country",
        "--mode",
        "overwrite-partitions",
        "--reload",
        "--checkpoint-rows",
        "150",
        "orders",
    ];
    let old_table = |w: &Workdir| {
        w.fixture("orders");
        assert_code(&w.run(&["-t", "t", "-p", "country", "orders"]), 0);
    };
    let records = appended_records(overwrite, old_table);
    let exchange = 1 + records
        .iter()
        .position(|r| matches!(r, Record::Exchange { .. }))
        .unwrap();
    let w = Workdir::new();
    old_table(&w);
    let spec = format!("journal.write.after:{exchange}");
    assert!(crashed(&w.run_failing(&spec, overwrite)), "{spec}");
    let table = w.path("t");
    let trace = strace(&w, &["-t", table.to_str().unwrap(), "--recover"], None);
    let events = parse(&trace);
    let journal = table.join("_ingest/default/journal");
    let synced = first_sync(&events, journal.to_str().unwrap()).expect("journal fsynced");
    let first_exchange = events
        .iter()
        .find(|e| matches!(&e.call, Call::Rename { exchange, .. } if *exchange))
        .expect("the recovery exchanged the partitions");
    assert!(
        first_exchange.start > synced,
        "{:?} (line {}) before the journal holding Exchange was fsynced (line {synced})",
        first_exchange.call,
        first_exchange.start
    );
    assert_same_rows(
        table_rows(&table),
        input_rows(&[w.path("orders")]),
        "overwrite recovered after an unsynced Exchange",
    );
}

/// Issue 12: a crash between a `mkdir` and the fsync of its parent leaves a directory a
/// later process finds but cannot trust. Whatever the recovery then journals must not
/// rest on such a name: every directory above a file that a record written during the
/// recovery names, up to the table's own parent, is fsynced by the recovery itself
/// before that record.
#[test]
fn recovery_after_an_unsynced_mkdir_fsyncs_every_directory_it_relies_on() {
    let load: &[&str] = &[
        "-t",
        "t",
        "-p",
        "dt,country",
        "--dedupe-key",
        "order_id",
        "--checkpoint-rows",
        "150",
        "orders",
    ];
    let mut crashes = 0;
    for hit in [3, 4, 5, 6, 8] {
        let w = Workdir::new();
        w.fixture("orders");
        let spec = format!("mkdir.after:{hit}");
        // The table one level down, so that its parent is not the working directory
        // (an fsync of "." must not pass for an fsync of the table's parent).
        let load: Vec<&str> = load
            .iter()
            .map(|a| if *a == "t" { "sub/t" } else { a })
            .collect();
        let out = w.run_failing(&spec, &load);
        if !crashed(&out) {
            assert_code(&out, 0);
            continue;
        }
        crashes += 1;
        let table = w.path("sub/t");
        let t = table.to_str().unwrap();
        let job = table.join("_ingest/default");
        let args: Vec<&str> = if job.join("journal").exists() {
            vec!["-t", t, "--recover"]
        } else {
            ["-t", t].iter().chain(&load[2..]).copied().collect()
        };
        let trace = strace(&w, &args, None);
        let events = parse(&trace);
        let (_, traced) = traced_records(&events, &job);
        let top = table.parent().unwrap();
        let chain_synced = |file: &Path, before: usize, what: &str| {
            let mut dir = file.parent();
            while let Some(d) = dir.filter(|d| d.starts_with(top)) {
                let ok = events.iter().any(|e| {
                    matches!(&e.call, Call::Sync(p) if Path::new(p) == d) && e.end < before
                });
                assert!(
                    ok,
                    "{spec}: {} not fsynced before {what} names {}",
                    d.display(),
                    file.display()
                );
                dir = d.parent();
            }
        };
        let mut files = 0;
        for (write, record) in &traced {
            match record {
                Record::CheckpointComplete(c) => {
                    for f in &c.files {
                        chain_synced(&job.join(&f.staged), write.start, "CheckpointComplete");
                        files += 1;
                    }
                    for s in &c.snapshots {
                        chain_synced(&job.join(&s.file), write.start, "CheckpointComplete");
                    }
                }
                Record::Committed { checkpoint } => {
                    let records = journal_records(&job.join("journal"));
                    let c = records
                        .iter()
                        .find_map(|r| match r {
                            Record::CheckpointComplete(c) if c.checkpoint == *checkpoint => Some(c),
                            _ => None,
                        })
                        .unwrap();
                    for f in &c.files {
                        chain_synced(&table.join(&f.dest), write.start, "Committed");
                    }
                }
                _ => {}
            }
        }
        assert!(files > 0, "{spec}: the recovery staged nothing");
        assert_same_rows(
            table_rows(&table),
            dedupe(input_rows(&[w.path("orders")]), "order_id"),
            &spec,
        );
    }
    assert!(crashes >= 3, "only {crashes} crashes");
}

/// `--abort` (issue 13.2): nothing of the table is removed before `Aborting` is durable
/// (else a power cut could leave a run that resumes over a hole), and every directory
/// that lost an entry is fsynced before `Aborted` is written (else a power cut after it
/// could bring the run's rows back, uncounted).
#[test]
fn an_abort_journals_first_and_fsyncs_its_removals_before_it_ends() {
    let w = Workdir::new();
    w.fixture("orders");
    let table = w.path("t");
    let t = table.to_str().unwrap();
    let load = [
        "-t",
        t,
        "-p",
        "dt,country",
        "--checkpoint-rows",
        "150",
        "orders",
    ];
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:3", &load)
    ));
    let trace = strace(&w, &["-t", t, "--abort"], None);
    let events = parse(&trace);
    let job = table.join("_ingest/default");
    let journal = job.join("journal").to_str().unwrap().to_string();
    let writes: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(&e.call, Call::Write(p) if *p == journal))
        .collect();
    assert_eq!(writes.len(), 2, "Aborting and Aborted");
    let aborting = synced_after(&events, &journal, writes[0].start).expect("Aborting fsynced");
    let aborted = writes[1].start;
    let in_table = |p: &str| {
        let p = Path::new(p);
        p.starts_with(&table) && !p.starts_with(table.join("_ingest"))
    };
    let removed: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(&e.call, Call::Unlink(p) if in_table(p)))
        .collect();
    assert!(
        removed.len() >= 3,
        "the abort removed {} entries",
        removed.len()
    );
    for e in &removed {
        let Call::Unlink(p) = &e.call else {
            unreachable!()
        };
        assert!(
            e.start > aborting,
            "{p} removed before Aborting was durable"
        );
        let dir = parent(p);
        let dir_removed = removed
            .iter()
            .any(|o| matches!(&o.call, Call::Unlink(q) if *q == dir));
        if !dir_removed {
            let ok = synced_after(&events, &dir, e.end).is_some_and(|end| end < aborted);
            assert!(
                ok,
                "{dir} not fsynced after removing {p} and before Aborted"
            );
        }
    }
    assert!(table_rows(&table).is_empty());
}

/// A Delta table's checkpoint is in the table once its log entry exists: that entry and
/// its directory are fsynced (delta-rs writes them without) before `Committed(n)` is
/// journaled, in a load and in the recovery of a load killed between the entry's write
/// and its fsync (`delta.commit.written`), which must fsync what the dead process wrote
/// before it journals the checkpoint as committed.
#[cfg(feature = "delta")]
#[test]
fn a_delta_commit_is_fsynced_before_its_checkpoint_is_journaled_committed() {
    let load: &[&str] = &[
        "-t",
        "t",
        "--table-format",
        "delta",
        "-p",
        "country",
        "--checkpoint-rows",
        "300",
        "orders",
    ];
    for crash in [None, Some("delta.commit.written:2")] {
        let w = Workdir::new();
        w.fixture("orders");
        let trace = match crash {
            None => strace(&w, load, None),
            Some(point) => {
                assert!(crashed(&w.run_failing(point, load)), "{point}");
                strace(&w, &["-t", "t", "--recover"], None)
            }
        };
        let events = parse(&trace);
        let table = w.path("t").canonicalize().unwrap();
        let job = table.join("_ingest/default");
        let (_, records) = traced_records(&events, &job);
        let log_dir = table.join("_delta_log");
        let mut checked = 0;
        for (write, record) in &records {
            let Record::Committed { checkpoint } = record else {
                continue;
            };
            // The first checkpoint's commit created the table: checkpoint n is version n - 1.
            let entry = log_dir.join(format!("{:020}.json", checkpoint - 1));
            for path in [&entry, &log_dir] {
                let synced = events.iter().any(|e| {
                    matches!(&e.call, Call::Sync(p) if Path::new(p) == path.as_path())
                        && e.end < write.start
                });
                assert!(
                    synced,
                    "{crash:?}: Committed({checkpoint}) was journaled before {} was fsynced",
                    path.display()
                );
            }
            checked += 1;
        }
        assert!(checked >= 2, "{crash:?}: only {checked} commits traced");
    }
}
