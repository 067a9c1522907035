//! SIGINT and SIGTERM: the first one asks the run to stop at the next checkpoint
//! boundary (the source emits a barrier at once, the coordinator commits it, and the run
//! is left resumable); a second one exits at once, which the protocol also survives.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;

static STOP: AtomicBool = AtomicBool::new(false);
static WHICH: AtomicUsize = AtomicUsize::new(0);

/// Installs the handlers. Call once, before any work starts.
pub(crate) fn install() -> Result<()> {
    for (signal, code) in [(SIGINT, 130), (SIGTERM, 143)] {
        // Order matters: the conditional exit sees the flag as it was before this signal,
        // so only a second signal exits at once.
        flag::register_conditional_shutdown(signal, code, &STOP)
            .context("cannot install signal handlers")?;
        flag::register_usize(signal, &WHICH, signal as usize)
            .context("cannot install signal handlers")?;
        flag::register(signal, &STOP).context("cannot install signal handlers")?;
    }
    Ok(())
}

/// The signal that asked the run to stop, if any.
pub(crate) fn requested() -> Option<i32> {
    if STOP.load(Ordering::Relaxed) {
        Some(WHICH.load(Ordering::Relaxed) as i32)
    } else {
        None
    }
}

/// The signal's name for messages.
pub(crate) fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
