//! A table in a directory: the filesystem as a [`TableStore`]. Staged files are made
//! durable where they are (the sink fsyncs them); publish makes every partition
//! directory durable in its parent, renames the files into them without replacing
//! anything, then fsyncs the partitions (`checkpoint.rs`, step 3); abort
//! removes them again, directories included, just as durably.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context, Result};

use crate::core::layout::JobLayout;
use crate::core::layout::{unpublish_each, AtDest, LocalTable, TableStore};
use crate::core::messages::Messages;
use crate::core::protocol::StagedFile;
use crate::core::sys::failpoint;
use crate::core::sys::fsutil;
use crate::core::sys::syncfs::{self, FsSync};

/// The names in the staging directories of a checkpoint's files, each listed once: one
/// `getdents` pass instead of a `statx` per file (4,000 of them in a 4,000-partition
/// commit, on the thread the commit waits for).
#[derive(Default)]
struct Staging(HashMap<PathBuf, HashSet<OsString>>);

impl Staging {
    /// Whether `staged` is in its directory (as it was when first listed).
    fn holds(&mut self, staged: &Path) -> Result<bool> {
        let (Some(dir), Some(name)) = (staged.parent(), staged.file_name()) else {
            return Ok(false);
        };
        if !self.0.contains_key(dir) {
            let names = match std::fs::read_dir(dir) {
                Ok(entries) => entries
                    .map(|e| e.map(|e| e.file_name()))
                    .collect::<std::io::Result<HashSet<_>>>()
                    .with_context(|| format!("cannot list {}", dir.display()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashSet::new(),
                Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
            };
            self.0.insert(dir.to_path_buf(), names);
        }
        Ok(self.0.get(dir).is_some_and(|names| names.contains(name)))
    }
}

impl TableStore for LocalTable {
    fn stage(&self, _files: &mut [(StagedFile, PathBuf)]) -> Result<()> {
        // The sink's fsyncs made them durable in the staging area, on the table's
        // filesystem: publishing is a rename away.
        Ok(())
    }

    fn publish(&self, layout: &JobLayout, checkpoint: u64, files: &[&StagedFile]) -> Result<()> {
        let mut moves = Vec::with_capacity(files.len());
        // Each partition directory once, told apart by its name in the journal (a set of
        // paths compares them component by component: 16 ms for 4,000 files).
        let mut dirs = Vec::new();
        let mut seen = HashSet::new();
        let mut staging = Staging::default();
        let mut links = fsutil::Links::default();
        for file in files {
            let staged = layout.dir.join(&file.staged);
            let dest = layout.in_table(&file.dest);
            // Before anything is renamed: a checkpoint missing a file is not published in part.
            if !staging.holds(&staged)? && !dest.exists() {
                bail!(
                    "checkpoint {} is journaled as complete but its staged file {} is missing and \
                     was never published to {}; the table may have lost rows",
                    checkpoint,
                    staged.display(),
                    dest.display()
                );
            }
            // A link planted at a file's own name is refused by the rename, which follows
            // none.
            let rel = file.dest.rsplit_once('/').map_or("", |(dir, _)| dir);
            if seen.insert(rel) {
                let dir = dest
                    .parent()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| layout.table.clone());
                links.refuse(&layout.table, &dir)?;
                dirs.push(dir);
            }
            moves.push((staged, dest, file.size));
        }
        // Every partition directory, with its name durable in its parent, before anything
        // is renamed into it: a rename made durable by the fsync of a partition whose own
        // name is not would leave the file in neither place.
        fsutil::create_dirs_durable(dirs.iter().map(PathBuf::as_path), &layout.table)?;
        // Many partitions: one `syncfs` after the renames instead of an fsync of each.
        let bulk = match syncfs::worth_it(dirs.len()) {
            true => FsSync::open(&layout.table)?,
            false => None,
        };
        let mid = moves.len().div_ceil(2);
        let renamed = AtomicUsize::new(0);
        // From as many threads as there are cores: a 4,000-partition commit spent 60 ms
        // renaming on one of two.
        fsutil::each_concurrently(
            &moves,
            fsutil::cores(),
            "ingest-rename",
            |(staged, dest, journaled)| {
                fsutil::rename_noreplace(staged, dest)?;
                let size = std::fs::metadata(dest)
                    .with_context(|| format!("cannot stat {}", dest.display()))?
                    .len();
                if size != *journaled {
                    bail!(
                    "{} has {size} bytes but checkpoint {} journaled {}; it was not written by this run",
                    dest.display(),
                    checkpoint,
                    journaled
                );
                }
                failpoint::hit("commit.rename.after");
                if renamed.fetch_add(1, Ordering::SeqCst) + 1 == mid {
                    // Some files renamed, the others not (with one file: renamed, its directory
                    // not yet fsynced and the commit not journaled).
                    failpoint::hit("commit.mid");
                }
                Ok(())
            },
        )?;
        // Survives: a power cut after `Committed(n)` that would otherwise undo the renames.
        // The directories' own names were made durable above.
        match bulk {
            Some(fs_sync) => fs_sync.sync()?,
            None => {
                fsutil::sync_concurrently(&dirs, |dir| fsutil::sync_dir(dir))?;
            }
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
        let mut dirs = BTreeSet::new();
        let look = |file: &StagedFile| {
            let dest = layout.in_table(&file.dest);
            fsutil::refuse_symlinks(&layout.table, &dest)?;
            let mut dir = dest.parent().map(Path::to_path_buf);
            while let Some(d) = dir.filter(|d| d.starts_with(&layout.table) && *d != layout.table) {
                dir = d.parent().map(Path::to_path_buf);
                dirs.insert(d);
            }
            let found = match std::fs::symlink_metadata(&dest) {
                Ok(meta) if meta.is_file() && meta.len() == file.size => AtDest::Published,
                Ok(meta) => AtDest::Other(meta.len()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => AtDest::Nothing,
                Err(e) => return Err(e).with_context(|| format!("cannot stat {}", dest.display())),
            };
            Ok((found, dest.display().to_string()))
        };
        let remove =
            |file: &StagedFile| fsutil::remove_file_if_exists(&layout.in_table(&file.dest));
        let (count, rows) = unpublish_each(files, run, messages, look, remove)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_holds_what_its_directory_listed_and_fails_on_what_it_cannot_list() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("000001");
        std::fs::create_dir(&dir).expect("dir");
        std::fs::write(dir.join("a.csv.inprogress"), b"x").expect("staged");
        let mut staging = Staging::default();
        assert!(staging
            .holds(&dir.join("a.csv.inprogress"))
            .expect("listed"));
        assert!(!staging
            .holds(&dir.join("b.csv.inprogress"))
            .expect("listed"));
        // A directory gone (every file published, the area removed) holds nothing.
        assert!(!staging
            .holds(&root.path().join("000002/a.csv.inprogress"))
            .expect("nothing to list"));
        // Anything else that stops the listing is an error, not an empty area.
        let file = root.path().join("000003");
        std::fs::write(&file, b"not a directory").expect("file");
        let err = staging
            .holds(&file.join("a.csv.inprogress"))
            .expect_err("not a directory");
        assert!(err.to_string().contains("cannot list"), "{err:#}");
    }
}
