//! Exit codes, as the README and the man page list them, and the few typed errors that
//! select them.
//!
//! Everything else is an `anyhow` error and exits 1. `main` walks an error's chain once
//! to find one of the typed errors here.

use crate::core::error::{kind, Kind};

/// The process exit codes of the command-line contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
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
pub(crate) const TABLE: &[(u8, &str)] = &[
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
    /// The exit code for an error of its kind.
    pub(crate) fn for_error(err: &anyhow::Error) -> Exit {
        match kind(err) {
            Kind::LockHeld => Exit::Locked,
            Kind::Usage => Exit::Usage,
            Kind::StdoutClosed => Exit::StdoutClosed,
            Kind::Stopped { signal } if signal == signal_hook::consts::SIGTERM => Exit::Terminated,
            Kind::Stopped { .. } => Exit::Interrupted,
            Kind::BadInput { .. } | Kind::Failed => Exit::Failure,
        }
    }

    /// The numeric code handed to the OS.
    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::{LockHeld, Stopped, UsageError};

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
