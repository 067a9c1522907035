//! Test helpers: a work directory per test, hermetic commands, and reading a table back
//! into a multiset of rows, independently of the code under test.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// One row: column → value, partition columns restored from directory names.
pub type Row = BTreeMap<String, String>;

/// A temporary directory holding copies of fixtures and the tables a test makes.
pub struct Workdir {
    pub dir: tempfile::TempDir,
    /// Variables every command of this directory runs with.
    env: Vec<(String, String)>,
    /// The open-file limit (soft and hard) every command runs under, if set.
    open_files: Option<u64>,
}

impl Workdir {
    pub fn new() -> Workdir {
        Workdir {
            dir: tempfile::tempdir().expect("temp dir"),
            env: Vec::new(),
            open_files: None,
        }
    }

    /// Runs every command under an open-file limit of `n`, soft and hard, as on a system
    /// whose limit is `n`: `ingest` cannot raise it, and keeps a quarter of it open.
    pub fn with_open_file_limit(mut self, n: u64) -> Workdir {
        self.open_files = Some(n);
        self
    }

    /// Runs every command with `key=value` too.
    pub fn with_env(mut self, key: &str, value: &str) -> Workdir {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Copies `fixtures/<name>` into the work directory; returns the copy's path.
    pub fn fixture(&self, name: &str) -> PathBuf {
        let src = fixtures().join(name);
        let dst = self.path(name);
        copy_tree(&src, &dst);
        dst
    }

    /// A new work directory holding a copy of this one's files (modification times
    /// kept) and running commands as this one does: a crash matrix starts each case from
    /// the same table without loading it again.
    pub fn copy(&self) -> Workdir {
        let copy = Workdir {
            dir: tempfile::tempdir().expect("temp dir"),
            env: self.env.clone(),
            open_files: self.open_files,
        };
        copy_tree(self.dir.path(), copy.dir.path());
        copy
    }

    /// Writes a file (creating parents) and returns its path.
    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// `ingest` with no `INGEST_*` variable inherited, run in the work directory.
    pub fn cmd(&self) -> Command {
        self.cmd_of(bin())
    }

    /// `program` (`ingest`, or a tracer in front of it) as [`Workdir::cmd`] runs it.
    pub fn cmd_of(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("INGEST_") {
                cmd.env_remove(key);
            }
        }
        cmd.current_dir(self.dir.path());
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(n) = self.open_files {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            // SAFETY: setrlimit is async-signal-safe and `limit` is a copy owned by the
            // closure; the child runs nothing else between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        cmd
    }

    /// Runs `ingest` with `args`.
    pub fn run(&self, args: &[&str]) -> Output {
        output_within(self.cmd().args(args))
    }

    /// Runs `ingest` with a fail point armed.
    pub fn run_failing(&self, point: &str, args: &[&str]) -> Output {
        output_within(self.cmd().env("INGEST_FAIL_POINT", point).args(args))
    }
}

/// Reads a child's pipe to its end on a thread of its own.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            pipe.read_to_end(&mut bytes)
                .expect("read the child's output");
        }
        bytes
    })
}

/// Longest a single `ingest` run in a test may take: none takes a tenth of it, so a
/// run still going is hung (say, a sink waiting for a permit never given back).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Runs `cmd` to its end like `Command::output`, but kills it and fails the test if it
/// runs past [`RUN_LIMIT`]: a deadlock fails the test instead of hanging the suite.
pub fn output_within(cmd: &mut Command) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ingest");
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let pid = child.id() as libc::pid_t;
    let (done, ended) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    let status = match ended.recv_timeout(RUN_LIMIT) {
        Ok(status) => status.expect("wait for ingest"),
        Err(_) => {
            // SAFETY: kill(2) on the child's pid, which the waiter has not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = waiter.join();
            panic!("{cmd:?} still ran after {RUN_LIMIT:?}: killed as hung");
        }
    };
    Output {
        status,
        stdout: stdout.join().expect("the stdout reader"),
        stderr: stderr.join().expect("the stderr reader"),
    }
}

impl Workdir {
    /// Takes the default job's lock on table `t`, as another `ingest` would, writing
    /// `note` where the holder's pid and start time go.
    pub fn hold_lock(&self, note: &str) -> std::fs::File {
        use fs2::FileExt;
        std::fs::create_dir_all(self.path("t/_ingest/default")).unwrap();
        let path = self.path("t/_ingest/default/lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap();
        lock.try_lock_exclusive().unwrap();
        std::fs::write(&path, note).unwrap();
        lock
    }
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ingest"))
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn copy_tree(src: &Path, dst: &Path) {
    if src.is_dir() {
        std::fs::create_dir_all(dst).unwrap();
        for entry in std::fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &dst.join(entry.file_name()));
        }
    } else {
        std::fs::copy(src, dst).unwrap();
    }
    let modified = std::fs::metadata(src).unwrap().modified().unwrap();
    // After the children: copying them changed a directory's own time.
    std::fs::File::open(dst)
        .unwrap()
        .set_modified(modified)
        .unwrap();
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts an exit code, showing stderr when it differs.
#[track_caller]
pub fn assert_code(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "status {:?}, stderr:\n{}",
        out.status,
        stderr(out)
    );
}

/// True when the process died of a signal (a fail point's abort, or a kill).
pub fn crashed(out: &Output) -> bool {
    use std::os::unix::process::ExitStatusExt;
    out.status.signal().is_some()
}

/// A file's bytes, decompressed if it is a `.gz` or `.zst` (every member or frame).
pub fn read_decoded(path: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    let file = std::fs::File::open(path).unwrap();
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::MultiGzDecoder::new(file)
            .read_to_end(&mut bytes)
            .unwrap();
    } else if path.extension().is_some_and(|e| e == "zst") {
        zstd::stream::read::Decoder::new(file)
            .unwrap()
            .read_to_end(&mut bytes)
            .unwrap();
    } else {
        std::io::BufReader::new(file)
            .read_to_end(&mut bytes)
            .unwrap();
    }
    bytes
}

/// Reads CSV rows (header first) from a file, decompressing `.gz` and `.zst`.
pub fn read_csv(path: &Path, delimiter: u8) -> Vec<Row> {
    let bytes = read_decoded(path);
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .from_reader(bytes.as_slice());
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(|h| h.trim_start_matches('\u{feff}').to_string())
        .collect();
    reader
        .records()
        .map(|r| {
            header
                .iter()
                .cloned()
                .zip(r.unwrap().iter().map(str::to_string))
                .collect()
        })
        .collect()
}

/// Input rows of files or directories, in the order `ingest` reads them.
pub fn input_rows(paths: &[PathBuf]) -> Vec<Row> {
    let mut rows = Vec::new();
    for path in paths {
        let mut files: Vec<PathBuf> = if path.is_dir() {
            walk(path)
                .into_iter()
                .filter(|p| !hidden(p.strip_prefix(path).unwrap()))
                .collect()
        } else {
            vec![path.clone()]
        };
        files.sort();
        for file in files {
            rows.extend(read_csv(&file, b','));
        }
    }
    rows
}

/// Keeps the first row of each key, in order.
pub fn dedupe(rows: Vec<Row>, key: &str) -> Vec<Row> {
    let mut seen = std::collections::HashSet::new();
    rows.into_iter()
        .filter(|r| seen.insert(r[key].clone()))
        .collect()
}

/// Every file under `dir`, recursively, sorted.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn hidden(rel: &Path) -> bool {
    rel.components().any(|c| {
        let s = c.as_os_str().to_string_lossy();
        s.starts_with('.') || s.starts_with('_')
    })
}

/// Undoes Hive escaping of a partition directory value (written here independently).
pub fn hive_unescape(value: &str) -> String {
    if value == "__HIVE_DEFAULT_PARTITION__" {
        return String::new();
    }
    percent_decode(value)
}

/// Undoes `%XX` escapes (Hive's path escaping, a URI path's percent-encoding).
pub fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(
                std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                16,
            ) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// A committed CSV data file, plain or compressed.
pub fn is_csv_data(path: &Path) -> bool {
    let name = path.to_string_lossy();
    name.ends_with(".csv") || name.ends_with(".csv.gz") || name.ends_with(".csv.zst")
}

/// Every committed row of a table, as readers see it: `*.csv` files outside hidden
/// paths, partition columns restored from `COL=VALUE` directories.
pub fn table_rows(table: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for (file, partition) in data_files(table) {
        if !is_csv_data(&file) {
            continue;
        }
        for mut row in read_csv(&file, b',') {
            row.extend(partition.clone());
            rows.push(row);
        }
    }
    rows
}

/// Every committed row of a table of JSON lines (`*.jsonl`, maybe compressed), its
/// values as text (a string's own text, else its JSON), partition columns restored from
/// the path.
pub fn table_jsonl_rows(table: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for (file, partition) in data_files(table) {
        if !file.to_string_lossy().contains(".jsonl") {
            continue;
        }
        let bytes = read_decoded(&file);
        for line in std::str::from_utf8(&bytes).unwrap().lines() {
            let object: BTreeMap<String, serde_json::Value> =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{file:?}: {e}: {line}"));
            let mut row: Row = object
                .into_iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => (k, s),
                    v => (k, v.to_string()),
                })
                .collect();
            row.extend(partition.clone());
            rows.push(row);
        }
    }
    rows
}

/// Every file outside hidden paths, with the partition values its directories name.
pub fn data_files(table: &Path) -> Vec<(PathBuf, Row)> {
    if !table.exists() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for file in walk(table) {
        let rel = file.strip_prefix(table).unwrap();
        if hidden(rel) {
            continue;
        }
        let mut partition = Row::new();
        for comp in rel.parent().unwrap().components() {
            let comp = comp.as_os_str().to_str().unwrap();
            let (col, value) = comp.split_once('=').expect("partition dir is COL=VALUE");
            partition.insert(hive_unescape(col), hive_unescape(value));
        }
        out.push((file, partition));
    }
    out
}

/// A load of [`many_partitions`]'s input by `p`, in three checkpoints.
/// An open-file limit under which one sink keeps 256 staged files open at once.
pub const FEW_OPEN_FILES: u64 = 1024;

pub const MANY_PARTITIONS_LOAD: &[&str] = &[
    "-t",
    "t",
    "-p",
    "p",
    "--checkpoint-rows",
    "1000",
    "many.csv",
];

/// A CSV of 3,000 rows over 600 partition values (column `p`), in rows that keep
/// switching partitions: more than a sink keeps open at once under an open-file limit of
/// [`FEW_OPEN_FILES`].
pub fn many_partitions(w: &Workdir) -> PathBuf {
    let mut text = String::from("id,p\n");
    for i in 0..3000 {
        text.push_str(&format!("{i},v{}\n", (i * 7919) % 600));
    }
    w.write("many.csv", text)
}

/// Every fail point, as `ingest --list-fail-points` prints them.
pub fn listed_fail_points() -> Vec<String> {
    let out = Workdir::new().run(&["--list-fail-points"]);
    assert_code(&out, 0);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every fail point a load or a recovery of a Hive table can reach (all but `--abort`'s
/// own and a Delta or Iceberg table's commit's).
pub fn all_fail_points() -> Vec<String> {
    listed_fail_points()
        .into_iter()
        .filter(|p| {
            !p.starts_with("abort.")
                && !p.starts_with("delta.")
                && !p.starts_with("iceberg.")
                && !p.starts_with("quarantine.")
                && !p.starts_with("compact.")
        })
        .collect()
}

/// Whether a kill loop has done enough: at least `rounds` rounds, and at least two kills
/// landed (a round whose first command outlives its delay lands none, so a loop goes
/// on past `rounds`, up to the bound its caller sets, until two have).
pub fn kill_rounds_done(round: u32, rounds: u32, kills: u32) -> bool {
    round >= rounds && kills >= 2
}

/// Of `points`, those around a table format's commit: the run's start and end, each
/// checkpoint's completion and commit, and the format's own (`format_prefix`, such as
/// `"delta."`). Where only the table's place or catalog differs from a matrix of every
/// point, these are the cases it can change: staging and uploading never reach a log or
/// a catalog, and run the same code for every table.
#[cfg(any(feature = "iceberg", all(feature = "s3", feature = "delta")))]
pub fn commit_fail_points(points: Vec<String>, format_prefix: &str) -> Vec<String> {
    points
        .into_iter()
        .filter(|p| {
            ["run.", "checkpoint.", format_prefix]
                .iter()
                .any(|s| p.starts_with(s))
        })
        .collect()
}

/// The fail points of a Delta table's commit.
#[cfg(feature = "delta")]
pub fn delta_fail_points() -> Vec<String> {
    listed_fail_points()
        .into_iter()
        .filter(|p| p.starts_with("delta."))
        .collect()
}

/// The fail points of `--abort`.
pub fn abort_fail_points() -> Vec<String> {
    listed_fail_points()
        .into_iter()
        .filter(|p| p.starts_with("abort."))
        .collect()
}

/// Files a reader would list that are not committed data: must always be empty.
pub fn visible_debris(table: &Path) -> Vec<PathBuf> {
    if !table.exists() {
        return Vec::new();
    }
    walk(table)
        .into_iter()
        .filter(|f| {
            let rel = f.strip_prefix(table).unwrap();
            let name = f.to_string_lossy();
            !hidden(rel)
                && !is_csv_data(f)
                && !name.ends_with(".jsonl")
                && !name.ends_with(".jsonl.gz")
                && !name.ends_with(".jsonl.zst")
        })
        .collect()
}

/// Column name to type, as `table`'s contract records them.
#[cfg(any(feature = "parquet", feature = "s3"))]
pub fn contract_types(table: &Path) -> BTreeMap<String, String> {
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(table.join("_ingest/contract.json")).unwrap())
            .unwrap();
    recorded["contract"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Input `rows` as a typed table gives them back: each value in the canonical spelling
/// of its column's type in `table`'s contract (a `float` `1.50` as `1.5`, a `timestamp`
/// `2026-11-28 10:00:00` as `2026-11-28T10:00:00Z`), as [`parquet_file_rows`] renders
/// them. Columns the contract keeps as text are unchanged.
#[cfg(any(feature = "parquet", feature = "s3"))]
pub fn as_typed_by_contract(table: &Path, rows: Vec<Row>) -> Vec<Row> {
    let types = contract_types(table);
    let canonical = |ty: &str, v: &str| -> String {
        if v.is_empty() {
            return String::new();
        }
        match ty {
            "int" => v.parse::<i64>().unwrap().to_string(),
            "float" => v.parse::<f64>().unwrap().to_string(),
            "bool" => v.to_ascii_lowercase(),
            "timestamp" => v
                .parse::<jiff::Timestamp>()
                .or_else(|_| {
                    v.parse::<jiff::civil::DateTime>()
                        .map(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp())
                })
                .unwrap()
                .to_string(),
            _ => v.to_string(),
        }
    };
    rows.into_iter()
        .map(|row| {
            row.into_iter()
                .map(|(k, v)| {
                    let v = match types.get(&k) {
                        Some(ty) => canonical(ty, &v),
                        None => v,
                    };
                    (k, v)
                })
                .collect()
        })
        .collect()
}

/// Asserts two multisets of rows are equal, with a readable difference.
#[track_caller]
pub fn assert_same_rows(actual: Vec<Row>, expected: Vec<Row>, what: &str) {
    let mut a = actual;
    let mut e = expected;
    a.sort();
    e.sort();
    if a != e {
        let missing: Vec<_> = e.iter().filter(|r| !a.contains(r)).take(3).collect();
        let extra: Vec<_> = a.iter().filter(|r| !e.contains(r)).take(3).collect();
        panic!(
            "{what}: table has {} rows, expected {}\nmissing (first 3): {missing:#?}\nunexpected (first 3): {extra:#?}",
            a.len(),
            e.len()
        );
    }
}

/// Finishes table `t` after a crash of the load `args`: `--recover` must succeed. A crash
/// before the run's journal existed (while making the table's own directories,
/// `mkdir.after`) leaves nothing to recover, and `--recover` must say so; the re-run of
/// the load, as cron would make it, is then what loads the inputs.
#[track_caller]
pub fn recover_after_crash(w: &Workdir, args: &[&str], what: &str) {
    let started = w.path("t/_ingest/default/journal").exists();
    let recovered = w.run(&["-t", "t", "--recover"]);
    assert_code(&recovered, 0);
    if !started {
        assert!(
            stderr(&recovered).contains("nothing to recover"),
            "{what}: {}",
            stderr(&recovered)
        );
        assert_code(&w.run(args), 0);
    }
}

/// One run of a crash matrix (see [`crash_matrix`]).
pub struct CrashRun<'a, T> {
    /// The fail point's name.
    pub point: &'a str,
    /// The fail point armed: `point:hit`.
    pub spec: String,
    pub w: Workdir,
    /// What the setup returned beside the work directory.
    pub extra: T,
}

/// The crash matrix: for every fail point of `points` and every hit of `hits`, the load
/// `args` in a fresh work directory from `setup`, crashed there. A point must be reached
/// at hit 1 when `reach_all` (a later hit may lie past the end of the load: the load then
/// simply finishes). After a crash, the abort must name the point, `after_crash` checks
/// the table as the crash left it, and `--recover` must succeed (followed by the load
/// again when the crash came before the run's journal existed); then `settled` checks
/// the finished table, crashed or not. Returns the number of crashes.
pub fn crash_matrix<T>(
    points: &[String],
    hits: &[u32],
    reach_all: bool,
    args: &[&str],
    setup: impl Fn() -> (Workdir, T),
    after_crash: impl Fn(&CrashRun<T>),
    settled: impl Fn(&CrashRun<T>),
) -> usize {
    let mut crashes = 0;
    for point in points {
        for hit in hits {
            let (w, extra) = setup();
            let run = CrashRun {
                point,
                spec: format!("{point}:{hit}"),
                w,
                extra,
            };
            let out = run.w.run_failing(&run.spec, args);
            if reach_all && *hit == 1 {
                assert!(
                    crashed(&out),
                    "{} was never reached: {}",
                    run.spec,
                    stderr(&out)
                );
            }
            if crashed(&out) {
                crashes += 1;
                assert!(
                    stderr(&out).contains(&format!("fail point {point} reached")),
                    "{}: {}",
                    run.spec,
                    stderr(&out)
                );
                after_crash(&run);
                recover_after_crash(&run.w, args, &run.spec);
            } else {
                assert_code(&out, 0);
            }
            settled(&run);
        }
    }
    crashes
}

/// The rows of one Parquet file as text (typed values in the cast stage's canonical
/// spelling), each with the columns of `partition` added.
#[cfg(feature = "parquet")]
pub fn parquet_file_rows(path: &Path, partition: &Row) -> Vec<Row> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Date32Type, Decimal128Type, Float64Type, Int64Type, TimestampMicrosecondType,
    };
    use arrow_array::Array;
    use arrow_schema::DataType;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let mut rows = Vec::new();
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    for batch in reader {
        let batch = batch.unwrap();
        for row in 0..batch.num_rows() {
            let mut out = partition.clone();
            for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
                let text = if column.is_null(row) {
                    String::new()
                } else {
                    match column.data_type() {
                        DataType::Utf8 => column.as_string::<i32>().value(row).to_string(),
                        DataType::Int64 => {
                            column.as_primitive::<Int64Type>().value(row).to_string()
                        }
                        DataType::Float64 => {
                            column.as_primitive::<Float64Type>().value(row).to_string()
                        }
                        DataType::Boolean => column.as_boolean().value(row).to_string(),
                        DataType::Decimal128(_, scale) => {
                            let m = column.as_primitive::<Decimal128Type>().value(row);
                            rust_decimal::Decimal::from_i128_with_scale(m, *scale as u32)
                                .to_string()
                        }
                        DataType::Date32 => {
                            let days = column.as_primitive::<Date32Type>().value(row);
                            (jiff::civil::date(1970, 1, 1) + jiff::Span::new().days(days))
                                .to_string()
                        }
                        DataType::Timestamp(_, _) => {
                            let us = column.as_primitive::<TimestampMicrosecondType>().value(row);
                            jiff::Timestamp::from_microsecond(us).unwrap().to_string()
                        }
                        other => panic!("unexpected Parquet type {other}"),
                    }
                };
                out.insert(field.name().clone(), text);
            }
            rows.push(out);
        }
    }
    rows
}

/// A seed for a randomised test from the clock (odd, as xorshift needs), printed by the
/// test on failure so the run can be replayed.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1
}

/// Writes order rows as a CSV file with the orders' header, quoting as CSV does.
#[cfg(any(feature = "delta", feature = "iceberg"))]
pub fn write_orders(w: &Workdir, rel: &str, rows: &[Row]) -> PathBuf {
    let header = "order_id,dt,ts,customer,email,country,amount,currency,note";
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(header.split(',')).unwrap();
    for row in rows {
        writer
            .write_record(header.split(',').map(|c| row[c].as_str()))
            .unwrap();
    }
    w.write(rel, writer.into_inner().unwrap())
}

/// One day of the orders again, amounts changed, plus a row for a day not in the table.
#[cfg(any(feature = "delta", feature = "iceberg"))]
pub fn corrected_day(w: &Workdir) -> (PathBuf, Vec<Row>) {
    let day = input_rows(&[w.path("orders/2026-11-27.csv")]);
    let mut rows = Vec::new();
    for (i, row) in day.iter().take(20).enumerate() {
        let mut row = row.clone();
        row.insert("amount".into(), format!("{i}.00"));
        row.insert("note".into(), "corrected".into());
        row.insert("customer".into(), "c".into());
        rows.push(row);
    }
    let mut new_day = rows[0].clone();
    new_day.insert("dt".into(), "2026-12-01".into());
    new_day.insert("order_id".into(), "99999".into());
    rows.push(new_day);
    (write_orders(w, "fix/2026-11-27.csv", &rows), rows)
}

/// The fixture's orders as a load with `--dedupe-key order_id --cast
/// amount=decimal(12,2)` commits them: deduplicated, each amount with two places (the
/// canonical text of a decimal(12,2)).
#[cfg(any(feature = "delta", feature = "iceberg"))]
pub fn orders_with_decimal_amounts(w: &Workdir) -> Vec<Row> {
    dedupe(input_rows(&[w.path("orders")]), "order_id")
        .into_iter()
        .map(|mut row| {
            if let Some(amount) = row.get_mut("amount") {
                let mut value: rust_decimal::Decimal = amount.parse().unwrap();
                value.rescale(2);
                *amount = value.to_string();
            }
            row
        })
        .collect()
}
