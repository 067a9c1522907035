//! commit: publishing a completed checkpoint's staged files into the table, from the
//! journal's record alone (the coordinator and recovery run the same code).

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::failpoint;
use crate::fsutil;
use crate::journal::Checkpoint;
use crate::options::Mode;
use crate::table::JobLayout;

/// commit: publishes a completed checkpoint's staged files into the table.
///
/// Idempotent: a file already at its destination with the journaled size is done. Never
/// replaces a file: a different file at a destination is an error, not a clobber. In
/// overwrite mode only the rejects are published: the data files wait in staging for
/// the exchange that replaces whole partitions at the end of the run (`overwrite.rs`).
pub fn publish(layout: &JobLayout, checkpoint: &Checkpoint, mode: Mode) -> Result<()> {
    let mut dirs = BTreeSet::new();
    let files: Vec<_> = checkpoint
        .files
        .iter()
        .filter(|f| mode == Mode::Append || f.is_rejects())
        .collect();
    if let Some(remote) = &layout.remote {
        remote.publish(&files, &layout.dir)?;
        failpoint::hit("commit.dirsync.after");
        return Ok(());
    }
    let mid = files.len().div_ceil(2);
    for (i, file) in files.into_iter().enumerate() {
        let staged = layout.dir.join(&file.staged);
        let dest = layout.in_table(&file.dest);
        let dir = dest
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| layout.table.clone());
        fsutil::refuse_symlinks(&layout.table, &dest)?;
        fsutil::create_dir_all_durable(&dir)?;
        if !staged.exists() && !dest.exists() {
            bail!(
                "checkpoint {} is journaled as complete but its staged file {} is missing and \
                 was never published to {}; the table may have lost rows",
                checkpoint.checkpoint,
                staged.display(),
                dest.display()
            );
        }
        fsutil::rename_noreplace(&staged, &dest)?;
        let size = std::fs::metadata(&dest)
            .with_context(|| format!("cannot stat {}", dest.display()))?
            .len();
        if size != file.size {
            bail!(
                "{} has {size} bytes but checkpoint {} journaled {}; it was not written by this run",
                dest.display(),
                checkpoint.checkpoint,
                file.size
            );
        }
        failpoint::hit("commit.rename.after");
        if i + 1 == mid {
            // Some files renamed, the others not (with one file: renamed, its directory
            // not yet fsynced and the commit not journaled).
            failpoint::hit("commit.mid");
        }
        // The partition directory and its parents up to the table: a directory made by
        // an earlier, crashed attempt may never have been fsynced into its parent.
        let mut ancestor = Some(dir.as_path());
        while let Some(d) = ancestor.filter(|d| d.starts_with(&layout.table)) {
            if !dirs.insert(d.to_path_buf()) {
                break;
            }
            ancestor = d.parent();
        }
    }
    // Deepest first, so every entry is durable before the directory that names it.
    for dir in dirs.iter().rev() {
        // Survives: a power cut after `Committed(n)` that would otherwise undo the renames.
        fsutil::sync_dir(dir)?;
    }
    failpoint::hit("commit.dirsync.after");
    Ok(())
}
