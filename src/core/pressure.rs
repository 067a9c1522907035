//! Memory held for output not yet written, and the early checkpoint it asks for.
//!
//! A checkpoint's Parquet files are finished only at its preCommit (a Parquet file is
//! readable only once its footer is written), so until then each part holds its rows:
//! in memory on the sink thread until it has a batch's worth, then in its writer's open
//! row group. Over thousands of partitions that is most of the checkpoint's rows. The
//! parts count what they hold here; past [`BUDGET`] the source ends the checkpoint at
//! its next batch (`source/mod.rs`), which finishes every file and frees it all. So
//! checkpoints can be long by default (few, full files: one per partition per run for
//! most loads) and memory still stays bounded, however many partitions and however
//! wide the rows.
//!
//! One load per process: the count is the process's. Only Parquet parts hold rows, so
//! without the `parquet` feature nothing counts and no checkpoint ends early.

use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "parquet")]
use std::sync::{atomic::AtomicUsize, OnceLock};

/// Bytes held for unwritten output beyond which a checkpoint ends early;
/// `INGEST_MEMORY_BUDGET` (bytes) overrides it (tests set a small one to reach it).
/// 2,000,000 orders (231 MB of CSV) into 4,000 Parquet partitions hold about 400 MiB
/// at the end of one checkpoint, at 461 MiB of peak RSS.
#[cfg(feature = "parquet")]
pub(crate) const BUDGET: usize = 512 << 20;

/// The budget: [`BUDGET`] or `INGEST_MEMORY_BUDGET`.
#[cfg(feature = "parquet")]
fn budget() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("INGEST_MEMORY_BUDGET")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(BUDGET)
    })
}

#[cfg(feature = "parquet")]
static HELD: AtomicUsize = AtomicUsize::new(0);
static WANTED: AtomicBool = AtomicBool::new(false);

/// One holder's share of the count: what it says it holds, until it is dropped.
#[cfg(feature = "parquet")]
#[derive(Debug, Default)]
pub(crate) struct Account(usize);

#[cfg(feature = "parquet")]
impl Account {
    /// This holder now holds `bytes`. Crossing the budget upwards asks for a checkpoint.
    pub(crate) fn set(&mut self, bytes: usize) {
        let before = self.0;
        self.0 = bytes;
        if bytes > before {
            let grown = bytes - before;
            let total = HELD.fetch_add(grown, Ordering::Relaxed) + grown;
            let budget = budget();
            if total > budget && total - grown <= budget {
                WANTED.store(true, Ordering::Relaxed);
            }
        } else {
            HELD.fetch_sub(before - bytes, Ordering::Relaxed);
        }
    }
}

#[cfg(feature = "parquet")]
impl Drop for Account {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// Whether a checkpoint was asked for since the last call (and forgets the request).
pub(crate) fn checkpoint_wanted() -> bool {
    WANTED.load(Ordering::Relaxed) && WANTED.swap(false, Ordering::Relaxed)
}

#[cfg(all(test, feature = "parquet"))]
mod tests {
    use super::*;

    #[test]
    fn crossing_the_budget_asks_for_one_checkpoint() {
        // The only test touching the process's count (and no test sets the variable).
        assert_eq!(budget(), BUDGET);
        checkpoint_wanted();
        let mut a = Account::default();
        let mut b = Account::default();
        a.set(BUDGET / 2);
        b.set(BUDGET / 2);
        assert!(!checkpoint_wanted(), "at the budget, not past it");
        b.set(BUDGET / 2 + 1);
        assert!(checkpoint_wanted());
        assert!(!checkpoint_wanted(), "asked once");
        // Growing further while still over it asks nothing more...
        a.set(BUDGET);
        assert!(!checkpoint_wanted());
        // ...until the held bytes fell under it and cross it again.
        drop(a);
        b.set(BUDGET + 1);
        assert!(checkpoint_wanted());
        drop(b);
        assert_eq!(HELD.load(Ordering::Relaxed), 0);
    }
}
