//! Figures the pipeline updates as it goes, shared with the progress bar.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

/// Figures the pipeline updates as it goes.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Input bytes (as stored, compressed or not) consumed, over all inputs.
    pub(crate) bytes: AtomicU64,
    pub(crate) rows: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) file: Mutex<String>,
    /// The load is over: the bar stops drawing.
    pub(crate) done: AtomicBool,
}

impl Counters {
    /// Names the file being read.
    pub(crate) fn set_file(&self, name: &str) {
        if let Ok(mut file) = self.file.lock() {
            name.clone_into(&mut file);
        }
    }
}
