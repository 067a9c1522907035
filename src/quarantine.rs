//! `--on-bad-input quarantine`: an input that cannot load is set aside and the others
//! load.
//!
//! What sets an input aside: it cannot be opened, read or decoded; its header does not
//! fit the table; it was loaded before and its content changed (or it is a copy of a
//! loaded input); it has more bad rows than `--max-errors` (counted per input) or a bad
//! record that spans several lines.
//!
//! # Found before the run starts
//! A changed input or a copy is known from the manifest; a header the table refuses is
//! known when the run's columns are chosen. Such inputs never enter the run: they are
//! written to the manifest as quarantined (`Manifest::quarantine`) before it starts.
//!
//! # Found while reading
//! The pipeline stops with [`BadInput`]. Its current checkpoint never completed, so
//! nothing of it is visible: the run journals [`Quarantine`] for the input, discards the
//! checkpoint's staging, and runs the pipeline again from the last completed checkpoint
//! with that input left out, exactly as `--recover` resumes (the rows of other inputs in
//! the discarded checkpoint are read again). Each pass sets aside one more input, so
//! the passes are bounded by the number of inputs.
//!
//! Rows of the input that earlier, completed checkpoints committed stay (an input large
//! enough to span checkpoints): the record says exactly which, every row of the input
//! up to and including line `committed_through_line`. Once such an input changes, it is a loaded
//! input that changed (loading it again would duplicate those lines), not a new one.
//!
//! # Afterwards
//! The run's quarantines are folded into the manifest with its loaded inputs. A later
//! run skips a quarantined input whose metadata is unchanged (and says how many wait);
//! one that changed is tried again. `--status` lists them with their reasons.

use std::fmt;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::journal::{self, Journal, Record, RunLog};
use crate::options::OnBadInput;
use crate::report::Messages;
use crate::table::JobLayout;

/// An input of the run could not load; with `--on-bad-input quarantine` it is set aside.
#[derive(Debug)]
pub struct BadInput {
    /// The input's index in the run.
    pub input: usize,
    /// What went wrong, as the run would have failed with it.
    pub reason: String,
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for BadInput {}

/// An input of the run set aside, as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    /// The input's index in the run.
    pub input: usize,
    pub reason: String,
    /// The input's rows up to and including this line are in the table, committed by
    /// earlier checkpoints; 0 when none of its rows are.
    #[serde(default)]
    pub committed_through_line: u64,
}

/// A quarantined input, as `--json` and `--status` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    pub path: String,
    pub reason: String,
    /// The input's rows up to and including this line are in the table (committed
    /// before the input failed); 0 when none of its rows are.
    pub committed_through_line: u64,
}

/// True for the errors a pipeline thread reports only because another one failed.
pub fn is_echo(err: &anyhow::Error) -> bool {
    let text = err.to_string();
    text == "the pipeline stopped" || text == "the coordinator stopped"
}

/// Marks an error met while reading input `input` as that input's, unless it only
/// echoes another thread's failure (or already names its input).
pub fn of_input(input: usize, err: anyhow::Error) -> anyhow::Error {
    if is_echo(&err)
        || err
            .chain()
            .any(|c| c.is::<BadInput>() || c.is::<crate::exit::Stopped>())
    {
        return err;
    }
    anyhow::Error::new(BadInput {
        input,
        reason: format!("{err:#}"),
    })
}

/// The input a failure belongs to, if it is an input's own.
pub fn bad_input(err: &anyhow::Error) -> Option<&BadInput> {
    err.chain().find_map(|c| c.downcast_ref::<BadInput>())
}

/// Whether the run of `log` sets aside the input `err` belongs to, instead of failing.
pub fn sets_aside(log: &RunLog, err: &anyhow::Error) -> bool {
    log.started.options.on_bad_input == OnBadInput::Quarantine
        && bad_input(err).is_some_and(|bad| !log.is_quarantined(bad.input))
}

/// Journals that the input `err` belongs to is set aside, with the lines of it that
/// completed checkpoints committed, and says so. The pipeline has stopped: the record
/// goes after the last completed checkpoint, and the run resumes from there.
pub fn set_aside(
    journal: &mut Journal,
    layout: &JobLayout,
    err: &anyhow::Error,
    messages: Messages,
) -> Result<()> {
    let bad = bad_input(err).context("internal error: no input to set aside")?;
    let log = journal::replay(&layout.journal())?
        .log
        .context("the journal lost its run")?;
    let path = log
        .started
        .inputs
        .get(bad.input)
        .map_or("?", |i| i.path.as_str());
    // A CSV position counts the line it stands at (the next one to read); a JSON lines
    // position, the lines consumed.
    let jsonl = crate::source::reader::is_jsonl(path);
    let committed_through_line = log
        .last_checkpoint()
        .map(|c| &c.position)
        .filter(|p| p.input == bad.input && p.offset > 0)
        .map_or(0, |p| {
            if jsonl {
                p.lines
            } else {
                p.lines.saturating_sub(1)
            }
        });
    let kept = match committed_through_line {
        0 => String::new(),
        line => format!(" (its rows through line {line} were committed before, and stay)"),
    };
    messages.note(&format!(
        "quarantined {path}{kept}: {}; the other inputs go on",
        bad.reason
    ));
    journal.append(&Record::Quarantined(Quarantine {
        input: bad.input,
        reason: bad.reason.clone(),
        committed_through_line,
    }))?;
    crate::failpoint::hit("quarantine.after");
    Ok(())
}

/// The inputs a run set aside, as the summary lists them.
pub fn of_run(log: &RunLog) -> Vec<Quarantined> {
    log.quarantined
        .iter()
        .map(|q| Quarantined {
            path: log
                .started
                .inputs
                .get(q.input)
                .map_or_else(|| "?".to_string(), |i| i.path.clone()),
            reason: q.reason.clone(),
            committed_through_line: q.committed_through_line,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_error_is_marked_and_an_echo_is_not() {
        let marked = of_input(3, anyhow::anyhow!("a.csv:7: bad header"));
        let bad = bad_input(&marked).expect("marked");
        assert_eq!((bad.input, bad.reason.as_str()), (3, "a.csv:7: bad header"));
        assert_eq!(marked.to_string(), "a.csv:7: bad header");
        assert!(bad_input(&of_input(3, anyhow::anyhow!("the pipeline stopped"))).is_none());
        // Marked once, by the innermost reader that knew the input.
        let twice = of_input(5, marked);
        assert_eq!(bad_input(&twice).map(|b| b.input), Some(3));
    }
}
