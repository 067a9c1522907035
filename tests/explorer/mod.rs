//! The crash-state explorer: records the system calls of a real history (a load; a load
//! killed by a fail point, then `--recover`), replays them on a model of the table's
//! files and directory entries, and materialises the states a power cut can leave at
//! every point of the history under the strict persistence model (`model.rs`). Each
//! state is then handed to a check (the tests in `crash_states.rs` run `--recover` and
//! the load again, and compare the table with the inputs).
//!
//! A `kill -9` keeps the page cache and cannot see a missing or misordered fsync; this
//! can. Self-check: replaying every operation must give the real table byte for byte,
//! so a write the model does not see (an unmodelled system call) fails loudly instead of
//! making states that never were.

pub mod model;
pub mod strace;

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use model::{Fs, Ino, Node, Op, Recorder, Step};

use crate::crash::Rng;

/// The system calls the model needs: every way this program opens, writes, syncs,
/// names and removes files.
const TRACED: &str = "trace=open,openat,creat,close,dup,dup2,dup3,fcntl,lseek,write,pwrite64,\
writev,pwritev,pwritev2,ftruncate,fsync,fdatasync,syncfs,sync,mkdir,mkdirat,link,linkat,\
unlink,unlinkat,rmdir,rename,renameat,renameat2";

/// One command of a history: arguments and extra environment.
pub struct Invocation<'a> {
    /// The program, if not `ingest` (the explorer's own tests trace a script).
    pub program: Option<&'a Path>,
    pub args: &'a [&'a str],
    pub env: &'a [(&'a str, &'a str)],
}

/// A recorded history of one table.
pub struct History {
    /// The table's name in the work directory.
    pub table: String,
    pub steps: Vec<Step>,
    durable_at: Vec<usize>,
    initial: Fs,
    /// Every inode the history made, empty, as a crash state starts from.
    blank: Vec<Node>,
    /// Each command's exit status.
    pub statuses: Vec<std::process::ExitStatus>,
    /// Each command's stderr.
    pub stderrs: Vec<String>,
    /// The real inode number of each directory at the end of the history, and its
    /// inode in the model: the journal names an overwrite's directories by inode.
    real_inodes: HashMap<u64, Ino>,
}

/// The binary under test: `EXPLORE_BIN` if set (to explore another build), else this
/// build's.
pub fn binary() -> PathBuf {
    std::env::var_os("EXPLORE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(crate::util::bin)
}

/// Runs `invocations` in `dir` one after the other under strace and records them. The
/// table `dir/table` may exist (then it is the starting state, all of it durable).
pub fn record(dir: &Path, table: &str, invocations: &[Invocation]) -> History {
    let dir = dir.canonicalize().expect("work directory");
    let traces = tempfile::tempdir().expect("temp dir");
    let mut recorder = Recorder::new(&dir, table);
    let (mut statuses, mut stderrs) = (Vec::new(), Vec::new());
    let mut first_line = 0;
    for (i, invocation) in invocations.iter().enumerate() {
        let trace = traces.path().join(format!("{i}.txt"));
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-qq", "-xx", "-s", "268435456", "-e", TRACED, "-o"])
            .arg(&trace)
            .arg(invocation.program.map_or_else(binary, Path::to_path_buf))
            .args(invocation.args)
            .current_dir(&dir);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("INGEST_") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(invocation.env.iter().copied());
        let out = cmd
            .output()
            .expect("strace is installed (the CI script installs it)");
        statuses.push(out.status);
        stderrs.push(String::from_utf8_lossy(&out.stderr).into_owned());
        let text = std::fs::read_to_string(&trace).expect("trace written");
        recorder.next_process();
        let trace = strace::parse(&text, first_line);
        for call in &trace.calls {
            recorder.record(call);
        }
        recorder.settle(&trace.in_flight, table, || {
            model::listing_on_disk(&dir, table)
        });
        first_line += text.lines().count() + 1;
    }
    // Self-check: every operation replayed gives the real table, byte for byte.
    let real = model::listing_on_disk(&dir, table);
    let modelled = recorder.fs.listing(table);
    if real != modelled {
        let differ: Vec<String> = real
            .iter()
            .filter(|entry| !modelled.contains(entry))
            .map(|(p, b)| format!("real {p} ({:?} bytes)", b.as_ref().map(Vec::len)))
            .chain(
                modelled
                    .iter()
                    .filter(|entry| !real.contains(entry))
                    .map(|(p, b)| format!("model {p} ({:?} bytes)", b.as_ref().map(Vec::len))),
            )
            .collect();
        panic!(
            "the model of the trace is not the real table:\n{}",
            differ.join("\n")
        );
    }
    let real_inodes = recorder
        .fs
        .dirs(table)
        .into_iter()
        .filter_map(|(path, ino)| Some((real_inode(&dir.join(path))?, ino)))
        .collect();
    let blank = recorder
        .fs
        .nodes
        .iter()
        .map(|n| match n {
            Node::File(_) => Node::File(Vec::new()),
            Node::Dir(_) => Node::Dir(BTreeMap::new()),
        })
        .collect();
    History {
        table: table.to_string(),
        durable_at: recorder.durable_at(),
        steps: recorder.steps,
        initial: recorder.initial,
        blank,
        statuses,
        stderrs,
        real_inodes,
    }
}

fn real_inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// Steps whose fate a crash state's report names; the rest are counted.
const MAX_FATES_TOLD: usize = 40;

/// What happened to a step that was not durable at the crash.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Lost,
    Kept,
    /// A write of which only this many bytes reached the disk.
    Torn(usize),
}

/// A crash state: the table as a power cut left it.
pub struct CrashState {
    /// The steps that had returned when the power failed.
    pub at: usize,
    /// How the steps not yet durable fared, as text (for a report).
    pub fates: String,
    /// Whether some step not durable was kept or torn (not every one lost).
    pub mixed: bool,
    /// Each directory's inode in the model.
    dirs: Vec<(String, Ino)>,
    pub listing: Vec<(String, Option<Vec<u8>>)>,
}

impl History {
    /// The points crashes are made at: after every step, or with `EXPLORE_POSITIONS=N`
    /// (for a load over thousands of partitions, whose tens of thousands of steps each
    /// replay the history before them) N + 1 spread evenly, and both sides of every
    /// step that makes something durable: just before it returns, everything since the
    /// last one is at stake.
    fn points(&self) -> Vec<usize> {
        let all = self.steps.len();
        let spread = std::env::var("EXPLORE_POSITIONS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0 && n < all);
        let Some(n) = spread else {
            return (0..=all).collect();
        };
        let mut points: std::collections::BTreeSet<usize> = (0..=n).map(|k| k * all / n).collect();
        for (i, step) in self.steps.iter().enumerate() {
            if matches!(step.op, Op::Fsync { .. } | Op::SyncAll) {
                points.insert(i);
                points.insert(i + 1);
            }
        }
        points.into_iter().collect()
    }

    /// Steps before `at` not durable at a crash there.
    pub fn volatile(&self, at: usize) -> Vec<usize> {
        (0..at).filter(|&i| self.durable_at[i] >= at).collect()
    }

    /// The state of a crash once `at` steps had returned, `fate` deciding each step not
    /// yet durable.
    pub fn crash(&self, at: usize, mut fate: impl FnMut(usize, &Step) -> Fate) -> CrashState {
        let mut fs = self.initial.clone();
        fs.nodes
            .extend(self.blank[fs.nodes.len()..].iter().cloned());
        let mut fates = Vec::new();
        let mut untold = 0;
        let mut mixed = false;
        for (i, step) in self.steps[..at].iter().enumerate() {
            if self.durable_at[i] < at {
                fs.apply(&step.op, None);
                continue;
            }
            let told = match fate(i, step) {
                Fate::Lost => format!("lost #{i} {}", step.what),
                Fate::Kept => {
                    mixed = true;
                    fs.apply(&step.op, None);
                    continue;
                }
                Fate::Torn(n) => {
                    mixed = true;
                    fs.apply(&step.op, Some(n));
                    format!("torn to {n} bytes #{i} {}", step.what)
                }
            };
            // A report names the first few; a load over thousands of partitions leaves
            // tens of thousands of steps to a crash, and their text in every state
            // took gigabytes.
            if fates.len() < MAX_FATES_TOLD {
                fates.push(told);
            } else {
                untold += 1;
            }
        }
        if untold > 0 {
            fates.push(format!("{untold} more"));
        }
        CrashState {
            at,
            fates: fates.join("; "),
            mixed,
            dirs: fs.dirs(&self.table),
            listing: fs.listing(&self.table),
        }
    }

    /// Distinct crash states over the whole history (a state seen at several points
    /// counts at the last): at every point, everything not durable lost, and `random` more with each such step lost, kept or (a write) torn
    /// at random. Returns them with how many were made before the duplicates went.
    pub fn states(&self, random: usize, rng: &mut Rng) -> (Vec<CrashState>, usize) {
        let mut seen = HashMap::new();
        let mut states: Vec<CrashState> = Vec::new();
        let mut made = 0;
        for at in self.points() {
            // The same files at a later point are kept in place of the earlier: a check
            // may expect more of a later point (what the load had acknowledged).
            let mut push = |state: CrashState| {
                made += 1;
                let mut h = std::collections::hash_map::DefaultHasher::new();
                state.listing.hash(&mut h);
                match seen.entry(h.finish()) {
                    std::collections::hash_map::Entry::Occupied(i) => states[*i.get()] = state,
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(states.len());
                        states.push(state);
                    }
                }
            };
            push(self.crash(at, |_, _| Fate::Lost));
            if self.volatile(at).is_empty() {
                continue;
            }
            for _ in 0..random {
                push(self.crash(at, |_, step| match rng.below(3) {
                    0 => Fate::Lost,
                    1 => Fate::Kept,
                    _ => match &step.op {
                        Op::Write { data, .. } if data.len() > 1 => {
                            Fate::Torn(rng.below(data.len() as u64) as usize)
                        }
                        _ => Fate::Kept,
                    },
                }));
            }
        }
        (states, made)
    }
}

/// Puts a crash state in place of `dir/table`.
///
/// A power cut keeps inode numbers and a state written afresh cannot, so the inode
/// numbers a journal names (an overwrite's `Exchange`) are translated to those the
/// same directories have now; a directory the state lacks keeps its old number.
pub fn restore(dir: &Path, history: &History, state: &CrashState) {
    let path = dir.join(&history.table);
    if path.exists() {
        std::fs::remove_dir_all(&path).expect("old table removed");
    }
    model::materialise(dir, &state.listing);
    let now: HashMap<Ino, u64> = state
        .dirs
        .iter()
        .filter_map(|(p, ino)| Some((*ino, real_inode(&dir.join(p))?)))
        .collect();
    let translate = |old: u64| {
        let ino = history.real_inodes.get(&old)?;
        now.get(ino).copied()
    };
    for (p, bytes) in &state.listing {
        if p.ends_with("/journal") && p.contains("/_ingest/") {
            if let Some(bytes) = bytes {
                if let Some(patched) = translate_journal(bytes, &translate) {
                    std::fs::write(dir.join(p), patched).expect("journal rewritten");
                }
            }
        }
    }
}

/// The journal with every `"inode"` its records name translated (each frame's checksum
/// made anew; a torn tail kept as it is), or `None` when no record names one.
fn translate_journal(bytes: &[u8], translate: &impl Fn(u64) -> Option<u64>) -> Option<Vec<u8>> {
    const MAGIC: usize = 8;
    let mut out = bytes.get(..MAGIC)?.to_vec();
    let mut at = MAGIC;
    let mut changed = false;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().ok()?);
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        let mut record: serde_json::Value = serde_json::from_slice(payload).ok()?;
        if walk_inodes(&mut record, translate) {
            changed = true;
            let payload = serde_json::to_vec(&record).ok()?;
            ingest::state::framed::encode_frame(&payload, &mut out);
        } else {
            out.extend_from_slice(&bytes[at..at + 8 + len]);
        }
        at += 8 + len;
    }
    out.extend_from_slice(&bytes[at..]);
    changed.then_some(out)
}

fn walk_inodes(value: &mut serde_json::Value, translate: &impl Fn(u64) -> Option<u64>) -> bool {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut changed = false;
            for (key, v) in map.iter_mut() {
                if key == "inode" {
                    if let Some(new) = v.as_u64().and_then(translate) {
                        *v = Value::from(new);
                        changed = true;
                    }
                } else {
                    changed |= walk_inodes(v, translate);
                }
            }
            changed
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |c, v| walk_inodes(v, translate) | c),
        _ => false,
    }
}

/// How an exploration went.
#[derive(Debug, Default)]
pub struct Figures {
    pub steps: usize,
    pub made: usize,
    pub distinct: usize,
    pub checked: usize,
    pub failed: Vec<String>,
}

/// Checks up to `budget` of the history's distinct states (every state where all that
/// was not durable is lost comes first, then the random ones, each group shuffled), with
/// `check` run on the work directory holding the state; collects the failures.
pub fn explore(
    dir: &Path,
    history: &History,
    random: usize,
    budget: usize,
    seed: u64,
    check: impl Fn(&CrashState) -> Result<(), String>,
) -> Figures {
    let mut rng = Rng(seed | 1);
    let (states, made) = history.states(random, &mut rng);
    let mut order: Vec<usize> = (0..states.len()).collect();
    // Shuffle, then put the all-lost states (no fate recorded beyond "lost") first.
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order.sort_by_key(|&i| states[i].mixed);
    let mut figures = Figures {
        steps: history.steps.len(),
        made,
        distinct: states.len(),
        ..Figures::default()
    };
    for &i in order.iter().take(budget) {
        let state = &states[i];
        restore(dir, history, state);
        figures.checked += 1;
        if let Err(why) = check(state) {
            let at = history
                .steps
                .get(state.at.wrapping_sub(1))
                .map_or("the start".to_string(), |s| s.what.clone());
            figures.failed.push(format!(
                "crash after step {} ({at}); {}\n  => {why}",
                state.at,
                if state.fates.is_empty() {
                    "nothing else lost".into()
                } else {
                    state.fates.clone()
                }
            ));
        }
    }
    figures
}
