//! How a failed command reports itself: its error on stderr (one line under `--quiet`,
//! for cron's mail) and, with `--json`, one object on stdout naming the commands that
//! finish or undo an interrupted run.

use serde::Serialize;

use crate::cli::exit::Exit;
use crate::core::layout::JobLayout;
use crate::ops::job::{abort_command, recover_command};
use crate::ops::settings::Common;
use crate::state::journal;

/// What a failed command says with `--json`: one object on stdout, so a script reads the
/// outcome of every run the same way, failed or not.
#[derive(Debug, Serialize)]
pub(crate) struct Failure {
    /// `failed` (exit 1), `usage-error` (2), `locked` (75), `stopped` (130 / 143).
    pub(crate) outcome: &'static str,
    pub(crate) exit_code: u8,
    pub(crate) error: String,
    pub(crate) job: Option<String>,
    /// The job has an interrupted run: the commands that finish it, or undo it.
    pub(crate) interrupted: bool,
    pub(crate) recover_command: Option<String>,
    pub(crate) abort_command: Option<String>,
}

impl Failure {
    /// The report of `err`, which ended a command on `common`'s table (if it got that far).
    pub(crate) fn of(err: &anyhow::Error, common: Option<&Common>) -> Failure {
        let exit = Exit::for_error(err);
        let outcome = match exit {
            Exit::Usage => "usage-error",
            Exit::Locked => "locked",
            Exit::Interrupted | Exit::Terminated => "stopped",
            _ => "failed",
        };
        let interrupted = common.is_some_and(|c| {
            let layout = JobLayout::new(&c.table, &c.job);
            journal::replay(&layout.journal())
                .ok()
                .and_then(|r| r.log)
                .is_some_and(|log| !log.finished)
        });
        Failure {
            outcome,
            exit_code: exit.code(),
            error: format!("{err:#}"),
            job: common.map(|c| c.job.clone()),
            interrupted,
            recover_command: common.filter(|_| interrupted).map(recover_command),
            abort_command: common.filter(|_| interrupted).map(abort_command),
        }
    }
}

/// An error as one line, for `--quiet` (cron mails one line per failure): the lines of
/// a multi-line message joined with "; ".
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    format!("{err:#}")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
