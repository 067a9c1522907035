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

use anyhow::{Context, Result};

use crate::core::bad_input::{bad_input, Quarantine, Quarantined};
use crate::core::layout::JobLayout;
use crate::core::messages::Messages;
use crate::core::options::OnBadInput;
use crate::core::records::{Record, RunLog};
use crate::state::journal::{self, Journal};

/// Whether the run of `log` sets aside the input `err` belongs to, instead of failing.
pub(crate) fn sets_aside(log: &RunLog, err: &anyhow::Error) -> bool {
    log.started.options.on_bad_input == OnBadInput::Quarantine
        && bad_input(err).is_some_and(|bad| !log.is_quarantined(bad.input))
}

/// Journals that the input `err` belongs to is set aside, with the lines of it that
/// completed checkpoints committed, and says so. The pipeline has stopped: the record
/// goes after the last completed checkpoint, and the run resumes from there.
pub(crate) fn set_aside(
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
    crate::core::sys::failpoint::hit("quarantine.after");
    Ok(())
}

/// The inputs a run set aside, as the summary lists them.
pub(crate) fn of_run(log: &RunLog) -> Vec<Quarantined> {
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
