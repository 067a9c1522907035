//! Opening a job to act on it, shared by load, recover and abort: its lock (and, for a
//! table in a bucket, its lease), then its state settled and read ([`Job::open`]); and
//! the hints that name the commands finishing or undoing an interrupted run.

use std::fs::File;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;

use crate::core::error::{LockHeld, Stopped};
use crate::core::layout::{JobLayout, COMPACT_JOB};
use crate::core::messages::Messages;
use crate::core::records::RunLog;
use crate::core::sys::fsutil::{self, LockError};
use crate::core::sys::signals;
use crate::ops::report::Summary;
use crate::ops::settings::Common;
use crate::state::journal::{self, Replay};
use crate::state::manifest::Manifest;

/// The locks a command holds while it acts on a job: the job's own, and the table's
/// (shared by every job, exclusive for a compaction; none for a table in a bucket,
/// which is never compacted).
pub(crate) struct Locks {
    _job: File,
    _table: Option<File>,
}

/// A job whose lock this process holds, with its state made durable and read.
pub(crate) struct Job {
    pub(crate) layout: JobLayout,
    /// The job's locks, held while this is alive: bind them for as long as the command acts.
    pub(crate) lock: Locks,
    /// When the lock was taken: a command's time and rate are its own, not the wait.
    pub(crate) started: Instant,
    pub(crate) manifest: Manifest,
    pub(crate) replay: Replay,
}

impl Job {
    /// Takes the job's lock (waiting up to `wait`), then settles and reads its manifest
    /// and journal. Both were written by a process that may have crashed before fsyncing
    /// them: they are made durable before a word of them is acted on (issue 12).
    pub(crate) fn open(mut layout: JobLayout, wait: Option<Duration>) -> Result<Job> {
        let lock = lock_job(&mut layout, wait)?;
        let started = Instant::now();
        let manifest = Manifest::load_settled(&layout.manifest())?;
        let replay = journal::replay_settled(&layout.journal())?;
        Ok(Job {
            layout,
            lock,
            started,
            manifest,
            replay,
        })
    }
}

/// Creates the job's directory and takes its lock, waiting up to `wait` for it, or fails
/// with `LockHeld` (exit 75). For a table in a bucket, the local lock guards the working
/// copy on this machine, and then the job's lease guards the job everywhere; with the
/// lease held, the working copy is replaced by the bucket's state (`layout.remote`).
pub(crate) fn lock_job(layout: &mut JobLayout, wait: Option<Duration>) -> Result<Locks> {
    let deadline = Instant::now() + wait.unwrap_or_default();
    let lock = Locks {
        _job: lock_local(layout, deadline)?,
        _table: match layout.target {
            None => Some(lock_table(layout, deadline)?),
            Some(_) => None,
        },
    };
    if let Some(url) = &layout.target {
        #[cfg(feature = "s3")]
        {
            let remote =
                crate::state::replica::Remote::open(url, &layout.table, &layout.job, wait)?;
            layout.store = remote.clone();
            layout.remote = Some(remote);
        }
        #[cfg(not(feature = "s3"))]
        anyhow::bail!("{url}: this ingest was built without object-store support");
    }
    Ok(lock)
}

fn lock_local(layout: &JobLayout, deadline: Instant) -> Result<File> {
    // Nothing of the job's state may be a symlink: the lock file is truncated, the
    // journal appended to, staging written, all through these names.
    for path in layout.state_paths() {
        fsutil::refuse_symlinks(&layout.table, &path)?;
    }
    fsutil::create_dir_all_durable(&layout.dir)?;
    // Every directory from the job's up to the table's own name: an earlier process may
    // have made them and crashed before fsyncing their parents.
    fsutil::sync_ancestors(&layout.dir, &layout.table)?;
    fsutil::sync_parent(&layout.table)?;
    let now = humantime::format_rfc3339_seconds(SystemTime::now());
    let note = format!("pid {} since {now}", std::process::id());
    loop {
        match fsutil::try_lock(&layout.lock(), &note) {
            Ok(file) => return Ok(file),
            Err(LockError::Held(holder)) => {
                if Instant::now() >= deadline || signals::requested().is_some() {
                    return Err(LockHeld {
                        table: layout.table_name(),
                        job: layout.job.clone(),
                        holder,
                    }
                    .into());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(LockError::Other(e)) => return Err(e),
        }
    }
}

/// Takes the table's lock after the job's: shared, so that jobs act side by side, but
/// exclusive for a compaction of a Hive table, which exchanges whole partitions that a
/// load could otherwise be publishing into (`ops/compact/`). A Delta table's compaction
/// shares it: the log orders its commit with the loads' (appends never conflict with
/// it; a concurrent removal of a file it replaces fails one of the two commits), and
/// an abort of a run whose files it merged refuses (`table/delta/mod.rs`). Waits as the
/// job's lock does.
fn lock_table(layout: &JobLayout, deadline: Instant) -> Result<File> {
    let exclusive = layout.job == COMPACT_JOB && !layout.table.join("_delta_log").is_dir();
    loop {
        match fsutil::try_lock_dir(&layout.table_lock(), exclusive) {
            Ok(file) => return Ok(file),
            Err(LockError::Held(_)) => {
                if Instant::now() >= deadline || signals::requested().is_some() {
                    let holder = if exclusive {
                        "the loads of other jobs that are running".to_string()
                    } else {
                        // The compaction's own job lock says who it is.
                        let compaction = JobLayout::new(&layout.table, COMPACT_JOB).lock();
                        let note = std::fs::read_to_string(compaction).unwrap_or_default();
                        format!("a compaction of the table ({})", note.trim())
                    };
                    return Err(LockHeld {
                        table: layout.table_name(),
                        job: layout.job.clone(),
                        holder,
                    }
                    .into());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(LockError::Other(e)) => return Err(e),
        }
    }
}

/// What keeps compactions out while it is held: the compaction job's lock (or, for a
/// table in a bucket, its lease).
pub(crate) struct CompactionHold {
    _lock: Option<File>,
    #[cfg(feature = "s3")]
    _lease: Option<crate::storage::lease::Lease>,
}

/// Before an abort of `log` (a run of a Delta table) takes its files out of the log:
/// holds the compaction job's lock, waiting up to `wait`, so that no compaction merges
/// them between the abort's check that every file it committed is still in the table
/// and its commit removing them (merged files hold other rows too: removing what is
/// left would leave the run's rows in the table). `None` for a Hive table (its
/// compaction refuses to start over an interrupted run) and for the compaction itself.
pub(crate) fn exclude_compactions(
    layout: &JobLayout,
    log: &RunLog,
    wait: Option<Duration>,
) -> Result<Option<CompactionHold>> {
    use crate::core::options::TableFormat;
    if layout.job == COMPACT_JOB || log.started.options.table_format != TableFormat::Delta {
        return Ok(None);
    }
    if let Some(url) = &layout.target {
        #[cfg(feature = "s3")]
        {
            let bucket = std::sync::Arc::new(crate::storage::bucket::Bucket::open(url)?);
            let lease = crate::storage::lease::Lease::acquire(bucket, COMPACT_JOB, wait)?;
            return Ok(Some(CompactionHold {
                _lock: None,
                _lease: Some(lease),
            }));
        }
        #[cfg(not(feature = "s3"))]
        anyhow::bail!("{url}: this ingest was built without object-store support");
    }
    let deadline = Instant::now() + wait.unwrap_or_default();
    let compaction = JobLayout::new(&layout.table, COMPACT_JOB);
    Ok(Some(CompactionHold {
        _lock: Some(lock_local(&compaction, deadline)?),
        #[cfg(feature = "s3")]
        _lease: None,
    }))
}

/// The jobs of the table whose journal holds a run for which `unfinished` holds, read
/// without their locks (each journal in a bucket without its lease): what they are at
/// this moment, which the caller's own locks keep or do not keep from changing.
pub(crate) fn jobs_with_run(
    common: &Common,
    unfinished: impl Fn(&RunLog) -> bool,
) -> Result<Vec<String>> {
    let has = |layout: &JobLayout| -> Result<bool> {
        Ok(journal::replay(&layout.journal())?
            .log
            .is_some_and(|log| unfinished(&log)))
    };
    let mut jobs = Vec::new();
    match &common.remote {
        #[cfg(feature = "s3")]
        Some(url) => {
            for job in crate::state::jobs_in(url)? {
                let found =
                    crate::state::replica::Remote::with_read_only(url, &job, |_, scratch| {
                        has(&JobLayout::new(scratch, &job))
                    })?;
                if found {
                    jobs.push(job);
                }
            }
        }
        _ => {
            for job in crate::core::layout::jobs(&common.table)? {
                if has(&JobLayout::new(&common.table, &job))? {
                    jobs.push(job);
                }
            }
        }
    }
    Ok(jobs)
}

/// The error for a load that would start over an interrupted run.
pub(crate) fn interrupted_error(common: &Common, log: &RunLog) -> anyhow::Error {
    if log.aborting {
        return anyhow::anyhow!(
            "job {:?} has a run {} whose abort was cut short; finish it first with: {}",
            common.job,
            log.started.run_id,
            abort_command(common)
        );
    }
    anyhow::anyhow!(
        "job {:?} has an interrupted run {} (started {}, {} checkpoint(s) completed); finish it \
         first with: {}, or undo it with: {}",
        common.job,
        log.started.run_id,
        log.started.started_at,
        log.checkpoints.len(),
        recover_command(common),
        abort_command(common)
    )
}

/// The command line that finishes this job's interrupted run.
pub(crate) fn recover_command(common: &Common) -> String {
    recover_command_for(&common.layout().table_name(), &common.job)
}

/// The command line that finishes job `job`'s interrupted run in `table`.
pub(crate) fn recover_command_for(table: &str, job: &str) -> String {
    format!("ingest --target {table}{} --recover", job_flag(job))
}

/// The command line that undoes this job's interrupted run.
pub(crate) fn abort_command(common: &Common) -> String {
    format!(
        "ingest --target {}{} --abort",
        common.layout().table_name(),
        job_flag(&common.job)
    )
}

fn job_flag(job: &str) -> String {
    if job == "default" {
        String::new()
    } else {
        format!(" --job {job}")
    }
}

/// A run that finished although a signal arrived still reports the signal (130/143), so
/// a calling script stops too; the message says nothing is left to recover.
pub(crate) fn after_signal(summary: Summary, common: &Common) -> Result<Summary> {
    match signals::requested() {
        None => Ok(summary),
        Some(signal) => {
            Messages {
                quiet: common.quiet,
            }
            .note(&summary.line());
            Err(Stopped {
                signal,
                detail: "the run had already finished; nothing to recover".into(),
            }
            .into())
        }
    }
}

/// True for an interrupted run that completed no checkpoint and is not being aborted:
/// nothing of it was ever visible, so removing it needs nobody's word.
pub(crate) fn nothing_committed(log: &RunLog) -> bool {
    !log.finished && !log.aborting && log.checkpoints.is_empty()
}

/// Who holds the job's lock, if anyone (a shared lock probe: it never waits).
pub(crate) fn lock_holder(layout: &JobLayout) -> Option<String> {
    #[cfg(feature = "s3")]
    if let Some(remote) = &layout.remote {
        return remote.holder().ok().flatten();
    }
    let file = std::fs::File::open(layout.lock()).ok()?;
    if fs2::FileExt::try_lock_shared(&file).is_ok() {
        let _ = fs2::FileExt::unlock(&file);
        return None;
    }
    let note = std::fs::read_to_string(layout.lock()).unwrap_or_default();
    Some(if note.trim().is_empty() {
        "another process".into()
    } else {
        note.trim().to_string()
    })
}
