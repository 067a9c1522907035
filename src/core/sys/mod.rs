//! The operating system: every fsync, rename and lock (`fsutil`), the crash points of the
//! tests (`failpoint`), signals, the allocator's settings, page-cache hints, stdout.

pub mod cache_hint;
pub mod failpoint;
pub mod fsutil;
pub mod malloc;
pub mod output;
pub mod signals;
