//! Standard output, which its reader may close early (`ingest --dry-run DIR | head -1`).
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe is an `EPIPE` error, and `println!`
//! would panic on it. Everything `ingest` prints on stdout goes through here instead: a
//! closed stdout becomes [`StdoutClosed`], which `main` turns into a quiet exit 141, the
//! status a shell reports for a program that SIGPIPE ended.

use std::io::{self, Write};

use anyhow::Result;

/// Writes `text` to stdout and flushes it.
pub(crate) fn print(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(closed_or)
}

/// Turns a write error on stdout into [`StdoutClosed`] when the reader went away, and
/// into a plain error otherwise (a full disk behind `> file`).
pub(crate) fn closed_or(err: io::Error) -> anyhow::Error {
    if err.kind() == io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(err).context("cannot write to standard output")
    }
}

/// The reader of stdout closed it before `ingest` had printed everything.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}
