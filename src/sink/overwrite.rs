//! `--mode overwrite-partitions`: every partition a run writes to is replaced as a whole,
//! atomically, when the run's last checkpoint is committed; no other partition is touched.
//!
//! In this mode a checkpoint's commit publishes only its rejects: its data files stay in
//! the staging area, decided (the journal names them) and durable, so no reader sees part
//! of the new content early. When the last checkpoint is committed, `finish` replaces the
//! partitions, each step safe to repeat from the journal alone:
//! 1. Assemble: move every data file of the run from staging into a shadow copy of its
//!    partition, `_ingest/JOB/overwrite/RUN/COL=VALUE/`, under its final name; fsync.
//!    *Crash*: the next attempt moves what is left (a file already moved is done).
//! 2. Journal `Exchange`: each partition with the inode of its shadow directory.
//! 3. Swap each partition with `renameat2(RENAME_EXCHANGE)` (a partition that does not
//!    exist yet is renamed into place without replacing anything), then fsync both parent
//!    directories. Readers of the partition's path see the old directory or the new one,
//!    never a mix and never nothing. *Crash midway*: a partition whose live directory
//!    already has the journaled inode is done; the others are swapped now.
//! 4. Journal `Exchanged`. Only now do the shadows (holding the old content) stop
//!    mattering; they are removed with the run's other leftovers after `RunFinished`.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::core::layout::JobLayout;
use crate::core::records::{Record, RunLog, Swap};
use crate::core::sys::failpoint;
use crate::core::sys::fsutil;

/// Steps 1 to 4 for a run whose last checkpoint is committed.
pub(crate) fn replace_partitions(
    layout: &JobLayout,
    log: &RunLog,
    journal: &mut dyn FnMut(&Record) -> Result<()>,
) -> Result<()> {
    if log.exchanged {
        return Ok(());
    }
    let shadow_root = layout.overwrite_run(&log.started.run_id);
    let swaps = match &log.exchange {
        Some(swaps) => swaps.clone(),
        None => {
            let swaps = assemble(layout, log, &shadow_root)?;
            journal(&Record::Exchange {
                partitions: swaps.clone(),
            })?;
            swaps
        }
    };
    failpoint::hit("overwrite.exchange.before");
    // Every live partition's parent, durable in the table before a partition is renamed
    // into it (a parent made by an earlier, crashed attempt may not be).
    let mut live_parents = BTreeSet::new();
    for swap in &swaps {
        let live = layout.in_table(&swap.partition);
        fsutil::refuse_symlinks(&layout.table, &live)?;
        live_parents.insert(parent(&live)?.to_path_buf());
    }
    fsutil::create_dirs_durable(live_parents.iter().map(|p| p.as_path()), &layout.table)?;
    for (i, swap) in swaps.iter().enumerate() {
        let live = layout.in_table(&swap.partition);
        let shadow = shadow_root.join(&swap.partition);
        swap_in(&layout.table, &live, &shadow, swap.inode)?;
        // Survives: a power cut after `Exchanged` that would undo the swap; both names
        // changed.
        fsutil::sync_dir(parent(&live)?)?;
        fsutil::sync_dir(parent(&shadow)?)?;
        if i == 0 {
            // One partition swapped, the others (if any) not yet.
            failpoint::hit("overwrite.exchange.mid");
        }
    }
    journal(&Record::Exchanged)?;
    failpoint::hit("overwrite.exchanged.after");
    Ok(())
}

/// Step 1: moves the run's data files into shadow partitions; returns the swaps to make.
fn assemble(layout: &JobLayout, log: &RunLog, shadow_root: &Path) -> Result<Vec<Swap>> {
    let mut partitions = BTreeSet::new();
    let files = log.checkpoints.iter().flat_map(|c| {
        c.files
            .iter()
            .filter(|f| !f.is_rejects())
            .map(move |f| (c, f))
    });
    let mut moves = Vec::new();
    for (checkpoint, file) in files {
        let Some((partition, _)) = file.dest.rsplit_once('/') else {
            bail!(
                "{} is not in a partition; overwrite-partitions needs --partition-by",
                file.dest
            );
        };
        let shadow = shadow_root.join(&file.dest);
        let staged = layout.dir.join(&file.staged);
        if !staged.exists() && !shadow.exists() {
            bail!(
                "checkpoint {} is committed but its staged file {} is missing; the new \
                 content of {partition} is incomplete, so no partition was replaced",
                checkpoint.checkpoint,
                staged.display()
            );
        }
        partitions.insert(partition.to_string());
        moves.push((staged, shadow));
    }
    // Each shadow partition, its name durable up to the job's directory, before a file is
    // renamed into it (a directory made by an earlier, crashed attempt may not be).
    let shadows: Vec<_> = partitions.iter().map(|p| shadow_root.join(p)).collect();
    fsutil::create_dirs_durable(shadows.iter().map(|p| p.as_path()), &layout.dir)?;
    let mid = moves.len().div_ceil(2);
    for (i, (staged, shadow)) in moves.iter().enumerate() {
        fsutil::rename_noreplace(staged, shadow)?;
        if i + 1 == mid {
            failpoint::hit("overwrite.assemble.mid");
        }
    }
    if let Some(compaction) = &log.started.compaction {
        link_kept(layout, &partitions, shadow_root, &compaction.replaces)?;
    }
    // Survives: a power cut after `Exchange` that would undo the renames into them.
    fsutil::sync_concurrently(&shadows, |dir| fsutil::sync_dir(dir))?;
    let mut swaps = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let dir = shadow_root.join(&partition);
        let inode = fsutil::inode(&dir)?
            .with_context(|| format!("shadow partition {} vanished", dir.display()))?;
        swaps.push(Swap { partition, inode });
    }
    Ok(swaps)
}

/// A compaction's step 1, after its new files are in the shadows: every file of each
/// live partition that the compaction does not replace is linked into the partition's
/// shadow under its own name, so that the exchange keeps it. Safe to repeat: a name
/// already in the shadow is the same file, linked by an earlier attempt. The caller
/// fsyncs the shadows.
fn link_kept(
    layout: &JobLayout,
    partitions: &BTreeSet<String>,
    shadow_root: &Path,
    replaces: &[String],
) -> Result<()> {
    let replaced: BTreeSet<&str> = replaces.iter().map(String::as_str).collect();
    for partition in partitions {
        let live = layout.in_table(partition);
        fsutil::refuse_symlinks(&layout.table, &live)?;
        let entries = std::fs::read_dir(&live)
            .with_context(|| format!("cannot list partition {}", live.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", live.display()))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                bail!("{} holds a name that is not UTF-8", live.display());
            };
            if replaced.contains(format!("{partition}/{name}").as_str()) {
                continue;
            }
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                bail!(
                    "{} is not a plain file; the compaction of {partition} would not keep it, \
                     so the partition was not replaced",
                    entry.path().display()
                );
            }
            let kept = shadow_root.join(partition).join(name);
            match std::fs::hard_link(entry.path(), &kept) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot link {} to {}",
                            entry.path().display(),
                            kept.display()
                        )
                    })
                }
            }
        }
    }
    failpoint::hit("compact.linked.after");
    Ok(())
}

/// Step 3 for one partition; a no-op when the live directory already is the new one.
fn swap_in(table: &Path, live: &Path, shadow: &Path, new_inode: u64) -> Result<()> {
    fsutil::refuse_symlinks(table, live)?;
    if fsutil::inode(live)? == Some(new_inode) {
        return Ok(());
    }
    if fsutil::inode(shadow)? != Some(new_inode) {
        bail!(
            "the new content of partition {} is no longer at {}; something outside this run \
             moved it, so the partition was not replaced",
            live.display(),
            shadow.display()
        );
    }
    if live.is_dir() {
        fsutil::exchange(shadow, live)
    } else {
        // Its parent is durable: `replace_partitions` made it so before the first swap.
        fsutil::rename_dir_noreplace(shadow, live)
    }
}

/// Fails early, before anything is loaded, on a filesystem that cannot exchange two
/// directories atomically (overwrite mode would otherwise fail only at the very end).
pub(crate) fn check_supported(layout: &JobLayout) -> Result<()> {
    let a = layout.dir.join("exchange-probe-a");
    let b = layout.dir.join("exchange-probe-b");
    for dir in [&a, &b] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let exchanged = fsutil::exchange(&a, &b);
    fsutil::remove_dir_all_durable(&a)?;
    fsutil::remove_dir_all_durable(&b)?;
    exchanged.with_context(|| {
        format!(
            "--mode overwrite-partitions needs a filesystem that can exchange two directories \
             atomically (renameat2 RENAME_EXCHANGE), and the one holding {} cannot",
            layout.table.display()
        )
    })
}

fn parent(path: &Path) -> Result<&Path> {
    path.parent()
        .with_context(|| format!("{} has no parent directory", path.display()))
}
