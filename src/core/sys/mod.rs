//! The operating system: every fsync, rename and lock (`fsutil`), durability in bulk
//! (`syncfs`), the crash points of the tests (`failpoint`), signals, the allocator's
//! settings, zstd contexts kept for reuse (`zstd_contexts`), page-cache hints, stdout.

pub(crate) mod cache_hint;
pub(crate) mod failpoint;
pub(crate) mod fsutil;
pub(crate) mod malloc;
pub(crate) mod output;
pub(crate) mod signals;
pub(crate) mod syncfs;
#[cfg(target_os = "linux")]
pub(crate) mod zstd_contexts;
