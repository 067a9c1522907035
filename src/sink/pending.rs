//! Staging areas ("pending" transactions): where they are, and removing exactly the ones
//! a run owns.
//!
//! Cleanup is driven by the journal, never by globs or ages: a run's staging areas live
//! under `pending/RUN/` and its snapshots under `state/RUN/`, and only the run named in
//! the journal is touched. Anything else found there is reported and left alone.

use std::path::Path;

use anyhow::{Context, Result};

use crate::core::layout::{parse_checkpoint_dir_name, parse_staging_dir_name, JobLayout};
use crate::core::sys::fsutil;

/// Removes staging areas and snapshots of checkpoints after `last_complete` (they never
/// completed: abort), and the emptied areas of committed ones. Returns names of entries
/// it did not recognise and left in place.
pub(crate) fn discard_incomplete(
    layout: &JobLayout,
    run: &str,
    last_complete: u64,
) -> Result<Vec<String>> {
    layout.store.discard_unjournaled(run, last_complete)?;
    let mut unknown = Vec::new();
    let pending = layout.pending_run(run);
    for name in list(&pending)? {
        match parse_staging_dir_name(&name) {
            Some(n) if n > last_complete => fsutil::remove_dir_all_durable(&pending.join(&name))?,
            // A committed checkpoint's area holds nothing a reader needs once published.
            Some(_) => remove_if_empty(&pending.join(&name))?,
            None => unknown.push(pending.join(&name).display().to_string()),
        }
    }
    let state = layout.state_run(run);
    for name in list(&state)? {
        let checkpoint = name
            .rsplit_once('-')
            .and_then(|(_, tail)| tail.strip_suffix(".snap"))
            .and_then(parse_checkpoint_dir_name);
        match checkpoint {
            Some(n) if n > last_complete => fsutil::remove_file_if_exists(&state.join(&name))?,
            Some(_) => {}
            None => unknown.push(state.join(&name).display().to_string()),
        }
    }
    Ok(unknown)
}

/// Removes a finished run's (now empty) staging and snapshot directories, and the old
/// content of the partitions an overwrite run replaced.
pub(crate) fn remove_run(layout: &JobLayout, run: &str) -> Result<()> {
    fsutil::remove_dir_all_durable(&layout.overwrite_run(run))?;
    fsutil::remove_dir_all_durable(&layout.pending_run(run))?;
    fsutil::remove_dir_all_durable(&layout.state_run(run))
}

/// Lists other runs' leftovers under `pending/`, `state/` and `overwrite/`: never removed
/// automatically.
pub(crate) fn foreign_runs(layout: &JobLayout, run: Option<&str>) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for area in ["pending", "state", "overwrite"] {
        let dir = layout.dir.join(area);
        for name in list(&dir)? {
            if Some(name.as_str()) != run {
                found.push(dir.join(name).display().to_string());
            }
        }
    }
    Ok(found)
}

fn remove_if_empty(dir: &Path) -> Result<()> {
    if list(dir)?.is_empty() {
        fsutil::remove_dir_all_durable(dir)?;
    }
    Ok(())
}

fn list(dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}
