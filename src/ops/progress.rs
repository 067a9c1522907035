//! The progress bar on a terminal: one bar over the input bytes with rows/s, bytes/s, ETA,
//! the current file and the checkpoint count.
//!
//! The pipeline only bumps a few atomics once per batch; a ticker thread reads them five
//! times a second and draws, so the hot path never formats or writes to the terminal.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{HumanCount, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::core::counters::Counters;
use crate::core::options::ProgressMode;

/// A running progress display (or nothing, when it is off).
pub(crate) struct Progress {
    pub(crate) counters: Arc<Counters>,
    ticker: Option<(ProgressBar, JoinHandle<()>)>,
}

impl Progress {
    /// Starts a display over `total_bytes` when `mode` and the terminal say so.
    pub(crate) fn start(
        mode: ProgressMode,
        quiet: bool,
        total_bytes: u64,
        done_bytes: u64,
    ) -> Progress {
        let counters = Arc::new(Counters::default());
        counters.bytes.store(done_bytes, Ordering::Relaxed);
        let show = !quiet
            && match mode {
                ProgressMode::Never => false,
                ProgressMode::Always => true,
                ProgressMode::Auto => std::io::stderr().is_terminal(),
            };
        if !show {
            return Progress {
                counters,
                ticker: None,
            };
        }
        let target = ProgressDrawTarget::term_like_with_hz(Box::new(console::Term::stderr()), 5);
        let bar = ProgressBar::with_draw_target(Some(total_bytes), target);
        let style = ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{bar:24}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        let (shared, drawn) = (counters.clone(), bar.clone());
        let started = Instant::now();
        let handle = std::thread::spawn(move || {
            while !shared.done.load(Ordering::Relaxed) {
                let rows = shared.rows.load(Ordering::Relaxed);
                let rate = rows as f64 / started.elapsed().as_secs_f64().max(1e-3);
                let path = shared.file.lock().map(|f| f.clone()).unwrap_or_default();
                let file = path.rsplit('/').next().unwrap_or_default();
                drawn.set_position(shared.bytes.load(Ordering::Relaxed));
                drawn.set_message(format!(
                    "{} rows ({}/s), checkpoint {}, {file}",
                    HumanCount(rows),
                    HumanCount(rate as u64),
                    shared.checkpoints.load(Ordering::Relaxed)
                ));
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Progress {
            counters,
            ticker: Some((bar, handle)),
        }
    }

    /// Stops the display and clears it, so the summary line stands alone.
    pub(crate) fn finish(self) {
        self.counters.done.store(true, Ordering::Relaxed);
        if let Some((bar, handle)) = self.ticker {
            let _ = handle.join();
            bar.finish_and_clear();
        }
    }
}
