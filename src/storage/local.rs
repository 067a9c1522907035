//! A table in a directory: the filesystem as a [`TableStore`]. Staged files are made
//! durable where they are (the sink fsyncs them); publish renames them into their
//! partitions without replacing anything and fsyncs every directory it touched; abort
//! removes them again, directories included, just as durably.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::TableStore;
use crate::failpoint;
use crate::fsutil;
use crate::protocol::StagedFile;
use crate::report::Messages;
use crate::table::JobLayout;

/// The filesystem under the table's directory.
#[derive(Debug, Default)]
pub struct LocalTable;

impl TableStore for LocalTable {
    fn stage(&self, _files: &mut [(StagedFile, PathBuf)]) -> Result<()> {
        // The sink's fsyncs made them durable in the staging area, on the table's
        // filesystem: publishing is a rename away.
        Ok(())
    }

    fn publish(&self, layout: &JobLayout, checkpoint: u64, files: &[&StagedFile]) -> Result<()> {
        let mut dirs = BTreeSet::new();
        let mid = files.len().div_ceil(2);
        for (i, file) in files.iter().enumerate() {
            let staged = layout.dir.join(&file.staged);
            let dest = layout.in_table(&file.dest);
            let dir = dest
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| layout.table.clone());
            fsutil::refuse_symlinks(&layout.table, &dest)?;
            // Made durable with the renames below: every directory up to the table is
            // fsynced before `Committed` is journaled.
            fsutil::create_dir_all_unsynced(&dir)?;
            if !staged.exists() && !dest.exists() {
                bail!(
                    "checkpoint {} is journaled as complete but its staged file {} is missing and \
                     was never published to {}; the table may have lost rows",
                    checkpoint,
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
                    checkpoint,
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
        // Deepest first, so every entry is durable before the directory that names it;
        // the directories of one depth at once.
        let mut by_depth: Vec<Vec<PathBuf>> = Vec::new();
        for dir in dirs {
            let depth = dir.components().count();
            if by_depth.len() <= depth {
                by_depth.resize_with(depth + 1, Vec::new);
            }
            by_depth[depth].push(dir);
        }
        for level in by_depth.iter().rev().filter(|level| !level.is_empty()) {
            // Survives: a power cut after `Committed(n)` that would otherwise undo the
            // renames, or the directories they went into.
            fsutil::sync_concurrently(level, |dir| fsutil::sync_dir(dir))?;
        }
        failpoint::hit("commit.dirsync.after");
        Ok(())
    }

    fn size(&self, layout: &JobLayout, dest: &str) -> Result<Option<u64>> {
        let path = layout.in_table(dest);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot stat {}", path.display())),
        }
    }

    fn discard(&self, _files: &[&StagedFile]) -> Result<()> {
        // Their staging area goes with the run's (`pending.rs`).
        Ok(())
    }

    fn discard_unjournaled(&self, _run: &str, _last_journaled: u64) -> Result<()> {
        // Staging areas are directories named by checkpoint (`pending.rs`).
        Ok(())
    }

    fn unpublish(
        &self,
        layout: &JobLayout,
        files: &[&StagedFile],
        run: &str,
        messages: Messages,
    ) -> Result<(u64, u64)> {
        let mid = files.len().div_ceil(2);
        let (mut count, mut rows) = (0, 0);
        let mut dirs = BTreeSet::new();
        for (i, file) in files.iter().enumerate() {
            let dest = layout.in_table(&file.dest);
            fsutil::refuse_symlinks(&layout.table, &dest)?;
            match std::fs::symlink_metadata(&dest) {
                Ok(meta) if meta.is_file() && meta.len() == file.size => {
                    fsutil::remove_file_if_exists(&dest)?;
                    count += 1;
                    rows += file.rows;
                }
                Ok(meta) => messages.note(&format!(
                    "left alone: {} ({} bytes, not the {} bytes run {} journaled)",
                    dest.display(),
                    meta.len(),
                    file.size,
                    run
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("cannot stat {}", dest.display())),
            }
            let mut dir = dest.parent().map(Path::to_path_buf);
            while let Some(d) = dir.filter(|d| d.starts_with(&layout.table) && *d != layout.table) {
                dir = d.parent().map(Path::to_path_buf);
                dirs.insert(d);
            }
            if i + 1 == mid {
                failpoint::hit("abort.remove.mid");
            }
        }
        // Deepest first: a partition left empty goes, and so may its parent; every directory
        // that lost an entry is fsynced before `Aborted` is journaled.
        let mut touched: BTreeSet<PathBuf> = BTreeSet::new();
        for dir in dirs.iter().rev() {
            match std::fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // Not empty (the table's other files): it stays.
                Err(_) => {
                    touched.insert(dir.clone());
                }
            }
            if let Some(parent) = dir.parent() {
                touched.insert(parent.to_path_buf());
            }
        }
        for dir in touched.iter().rev().filter(|d| d.is_dir()) {
            // Survives: a power cut after `Aborted` that would bring removed files back.
            fsutil::sync_dir(dir)?;
        }
        Ok((count, rows))
    }
}
