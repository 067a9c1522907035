//! Figures the pipeline updates as it goes, shared with the progress bar.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

/// Figures the pipeline updates as it goes.
#[derive(Debug, Default)]
pub struct Counters {
    /// Input bytes (as stored, compressed or not) consumed, over all inputs.
    pub bytes: AtomicU64,
    pub rows: AtomicU64,
    pub checkpoints: AtomicU64,
    pub file: Mutex<String>,
    /// The load is over: the bar stops drawing.
    pub done: AtomicBool,
}

impl Counters {
    /// Names the file being read.
    pub fn set_file(&self, name: &str) {
        if let Ok(mut file) = self.file.lock() {
            name.clone_into(&mut file);
        }
    }
}
