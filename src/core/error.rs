//! The error kinds callers match on: each names a situation a caller decides about
//! (wait for a lock, stop at a boundary, reject the command line, set an input aside),
//! and the command line turns each into its exit code (`cli/exit.rs`). An error travels
//! as `anyhow::Error`, with the context that names the file and line; [`kind`] finds its
//! kind once, and callers match on the [`Kind`], never downcast.

use std::fmt;

/// Another process holds the job's lock.
#[derive(Debug)]
pub(crate) struct LockHeld {
    pub(crate) table: String,
    pub(crate) job: String,
    pub(crate) holder: String,
}

impl fmt::Display for LockHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holder = if self.holder.is_empty() {
            "another process"
        } else {
            &self.holder
        };
        write!(
            f,
            "job {:?} of table {} is locked by {holder}; another ingest is running, try again later",
            self.job, self.table
        )
    }
}

impl std::error::Error for LockHeld {}

/// A command line that parses but makes no sense (clap reports the rest itself).
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A signal stopped the run at a checkpoint boundary.
#[derive(Debug)]
pub(crate) struct Stopped {
    pub(crate) signal: i32,
    /// What to tell the user: what is committed, and what to run next.
    pub(crate) detail: String,
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stopped by {}: {}",
            crate::core::sys::signals::name(self.signal),
            self.detail
        )
    }
}

impl std::error::Error for Stopped {}

/// An input of the run could not load; with `--on-bad-input quarantine` it is set aside.
#[derive(Debug)]
pub(crate) struct BadInput {
    /// The input's index in the run.
    pub(crate) input: usize,
    /// What went wrong, as the run would have failed with it.
    pub(crate) reason: String,
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for BadInput {}

/// What a caller can decide on about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Another process holds the job's lock ([`LockHeld`], exit 75).
    LockHeld,
    /// The command line makes no sense ([`UsageError`], exit 2).
    Usage,
    /// The reader of stdout went away (exit 141).
    StdoutClosed,
    /// A signal stopped the run at a checkpoint boundary ([`Stopped`], exit 130 / 143).
    Stopped { signal: i32 },
    /// An input of the run could not load ([`BadInput`]).
    BadInput { input: usize },
    /// Anything else: the command failed (exit 1).
    Failed,
}

/// The kind of `err`: that of the outermost typed cause in its chain.
pub(crate) fn kind(err: &anyhow::Error) -> Kind {
    for cause in err.chain() {
        if cause.is::<LockHeld>() {
            return Kind::LockHeld;
        }
        if cause.is::<UsageError>() {
            return Kind::Usage;
        }
        if cause.is::<crate::core::sys::output::StdoutClosed>() {
            return Kind::StdoutClosed;
        }
        if let Some(stopped) = cause.downcast_ref::<Stopped>() {
            return Kind::Stopped {
                signal: stopped.signal,
            };
        }
        if let Some(bad) = cause.downcast_ref::<BadInput>() {
            return Kind::BadInput { input: bad.input };
        }
    }
    Kind::Failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outermost_typed_cause_gives_the_kind() {
        let stopped = anyhow::Error::new(Stopped {
            signal: 15,
            detail: String::new(),
        });
        assert_eq!(
            kind(&stopped.context("job \"a\"")),
            Kind::Stopped { signal: 15 }
        );
        let usage = anyhow::Error::new(UsageError("no".into()));
        assert_eq!(kind(&usage), Kind::Usage);
        assert_eq!(kind(&anyhow::anyhow!("disk full")), Kind::Failed);
        let bad = anyhow::Error::new(BadInput {
            input: 2,
            reason: "x".into(),
        });
        assert_eq!(kind(&bad), Kind::BadInput { input: 2 });
    }
}
