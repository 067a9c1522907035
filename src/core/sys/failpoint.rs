//! Named crash points, compiled into release builds, for crash tests.
//!
//! `INGEST_FAIL_POINT=NAME[:N]` aborts the process (SIGABRT: no destructors, no flushes,
//! exactly like a crash) the N-th time it reaches the point called NAME. Every durable
//! step of the protocol has a point before and after it, so the crash tests can stop the
//! process between any two steps and check that `--recover` finishes the job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Every point, in protocol order; `--list-fail-points` prints these.
pub(crate) const POINTS: &[&str] = &[
    "mkdir.after",
    "mkdir.synced.after",
    "run.started.after",
    "journal.write.after",
    "source.barrier",
    "stage.snapshot.before",
    "stage.snapshot.after",
    "sink.precommit.before",
    "sink.precommit.after",
    "checkpoint.complete.before",
    "checkpoint.complete.after",
    "commit.rename.after",
    "commit.mid",
    "commit.dirsync.after",
    "delta.commit.before",
    "delta.commit.written",
    "delta.commit.after",
    "iceberg.commit.before",
    "iceberg.commit.written",
    "iceberg.commit.reply-lost",
    "iceberg.commit.after",
    "checkpoint.committed.after",
    "compact.write.mid",
    "compact.verified.after",
    "overwrite.assemble.mid",
    "compact.linked.after",
    "overwrite.exchange.before",
    "overwrite.exchange.mid",
    "overwrite.exchanged.after",
    "run.finished.before",
    "run.finished.after",
    "manifest.fold.before",
    "manifest.fold.after",
    "quarantine.after",
    "abort.started.after",
    "abort.remove.mid",
    "abort.removed.after",
    "abort.finished.after",
];

struct Armed {
    name: String,
    at: u64,
    seen: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("INGEST_FAIL_POINT").ok()?;
            let (name, at) = match spec.split_once(':') {
                Some((name, n)) => (name, n.trim().parse().unwrap_or(1)),
                None => (spec.as_str(), 1),
            };
            Some(Armed {
                name: name.trim().to_string(),
                at: at.max(1),
                seen: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Crashes here if this point is armed and this is the N-th time it is reached.
pub(crate) fn hit(name: &'static str) {
    debug_assert!(POINTS.contains(&name), "unlisted fail point {name}");
    if let Some(armed) = armed() {
        if armed.name == name && armed.seen.fetch_add(1, Ordering::SeqCst) + 1 == armed.at {
            eprintln!("ingest: fail point {name} reached, aborting");
            std::process::abort();
        }
    }
}

/// A failure instead of a crash: true the N-th time this armed point is reached, and
/// the caller acts as if the step it just took failed (the step happened; its answer,
/// a catalog's reply say, was lost on the way back).
#[cfg(feature = "iceberg")]
pub(crate) fn fails(name: &'static str) -> bool {
    debug_assert!(POINTS.contains(&name), "unlisted fail point {name}");
    armed().is_some_and(|armed| {
        armed.name == name && armed.seen.fetch_add(1, Ordering::SeqCst) + 1 == armed.at
    })
}

/// Rejects an `INGEST_FAIL_POINT` that names no point, so a typo cannot make a crash
/// test pass by never crashing.
pub(crate) fn check_env() -> anyhow::Result<()> {
    if let Some(armed) = armed() {
        if !POINTS.contains(&armed.name.as_str()) {
            anyhow::bail!(
                "INGEST_FAIL_POINT names an unknown point {:?}; see ingest --list-fail-points",
                armed.name
            );
        }
    }
    Ok(())
}
