//! Exit codes, as the README and the man page list them, and the few typed errors that
//! select them.
//!
//! Everything else is an `anyhow` error and exits 1. `main` walks an error's chain once
//! to find one of the typed errors here.

use std::fmt;

/// The process exit codes of the command-line contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success, including "nothing to do".
    Success = 0,
    /// The run failed; the message says what, where and what to do.
    Failure = 1,
    /// The command line is wrong.
    Usage = 2,
    /// Loaded, but some inputs were set aside (`--on-bad-input quarantine`).
    Quarantined = 3,
    /// Another `ingest` of the same job holds the table's lock (EX_TEMPFAIL).
    Locked = 75,
    /// Stopped by SIGINT at a checkpoint boundary; resumable with `--recover`.
    Interrupted = 130,
    /// The reader of stdout went away (`| head`); as a shell reports a SIGPIPE.
    StdoutClosed = 141,
    /// Stopped by SIGTERM at a checkpoint boundary; resumable with `--recover`.
    Terminated = 143,
}

/// Every exit code with its meaning, for `--help` and the man page.
pub const TABLE: &[(u8, &str)] = &[
    (0, "success, including nothing to do"),
    (
        1,
        "the run failed; the message says what, where and what to do",
    ),
    (2, "usage error"),
    (
        3,
        "loaded, but some inputs were quarantined (--on-bad-input quarantine); --json lists them under \"quarantined\"",
    ),
    (
        75,
        "another ingest of the same job holds the table's lock (EX_TEMPFAIL: cron may retry later)",
    ),
    (
        130,
        "stopped by SIGINT at a checkpoint boundary; the run is resumable with --recover",
    ),
    (
        141,
        "stdout was closed by its reader (as after SIGPIPE: ingest --dry-run | head); a load that had finished exits 0",
    ),
    (
        143,
        "stopped by SIGTERM at a checkpoint boundary; the run is resumable with --recover",
    ),
];

impl Exit {
    /// Picks the exit code for an error by looking for a typed cause in its chain.
    pub fn for_error(err: &anyhow::Error) -> Exit {
        for cause in err.chain() {
            if cause.is::<LockHeld>() {
                return Exit::Locked;
            }
            if cause.is::<UsageError>() {
                return Exit::Usage;
            }
            if cause.is::<StdoutClosed>() {
                return Exit::StdoutClosed;
            }
            if let Some(stopped) = cause.downcast_ref::<Stopped>() {
                return if stopped.signal == signal_hook::consts::SIGTERM {
                    Exit::Terminated
                } else {
                    Exit::Interrupted
                };
            }
        }
        Exit::Failure
    }

    /// The numeric code handed to the OS.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Another process holds the job's lock.
#[derive(Debug)]
pub struct LockHeld {
    pub table: String,
    pub job: String,
    pub holder: String,
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
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The reader of stdout closed it before `ingest` had printed everything.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// A signal stopped the run at a checkpoint boundary.
#[derive(Debug)]
pub struct Stopped {
    pub signal: i32,
    /// What to tell the user: what is committed, and what to run next.
    pub detail: String,
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stopped by {}: {}",
            crate::signals::name(self.signal),
            self.detail
        )
    }
}

impl std::error::Error for Stopped {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_table_lists_every_code() {
        let codes: Vec<u8> = TABLE.iter().map(|(c, _)| *c).collect();
        let all = [
            Exit::Success,
            Exit::Failure,
            Exit::Usage,
            Exit::Quarantined,
            Exit::Locked,
            Exit::Interrupted,
            Exit::StdoutClosed,
            Exit::Terminated,
        ];
        assert_eq!(codes, all.map(Exit::code));
    }

    #[test]
    fn codes_match_the_contract() {
        assert_eq!(Exit::Success.code(), 0);
        assert_eq!(Exit::Failure.code(), 1);
        assert_eq!(Exit::Usage.code(), 2);
        assert_eq!(Exit::Locked.code(), 75);
        assert_eq!(Exit::Interrupted.code(), 130);
        assert_eq!(Exit::Terminated.code(), 143);
    }

    #[test]
    fn a_signal_picks_130_or_143() {
        let stop = |signal| {
            anyhow::Error::new(Stopped {
                signal,
                detail: String::new(),
            })
        };
        assert_eq!(
            Exit::for_error(&stop(signal_hook::consts::SIGINT)),
            Exit::Interrupted
        );
        assert_eq!(
            Exit::for_error(&stop(signal_hook::consts::SIGTERM)),
            Exit::Terminated
        );
    }

    #[test]
    fn typed_causes_are_found_under_context() {
        let locked = anyhow::Error::new(LockHeld {
            table: "t".into(),
            job: "j".into(),
            holder: String::new(),
        })
        .context("cannot start the load");
        assert_eq!(Exit::for_error(&locked), Exit::Locked);
        let usage = anyhow::Error::new(UsageError("bad".into())).context("while checking flags");
        assert_eq!(Exit::for_error(&usage), Exit::Usage);
        assert_eq!(
            Exit::for_error(&anyhow::anyhow!("disk on fire")),
            Exit::Failure
        );
    }
}
