//! commit: publishing a completed checkpoint's staged files into the table, from the
//! journal's record alone (the coordinator and recovery run the same code).

use anyhow::Result;

use crate::core::layout::JobLayout;
use crate::core::options::Mode;
use crate::core::records::Checkpoint;

/// commit: publishes a completed checkpoint's staged files into the table, through its
/// store (`storage/local.rs`: rename and fsync; `storage/object.rs`: complete uploads).
///
/// Idempotent: a file already at its destination with the journaled size is done. Never
/// replaces a file: a different file at a destination is an error, not a clobber. In
/// overwrite mode only the rejects are published: the data files wait in staging for
/// the exchange that replaces whole partitions at the end of the run (`overwrite.rs`).
pub(crate) fn publish(layout: &JobLayout, checkpoint: &Checkpoint, mode: Mode) -> Result<()> {
    let files: Vec<_> = checkpoint
        .files
        .iter()
        .filter(|f| mode == Mode::Append || f.is_rejects())
        .collect();
    layout.store.publish(layout, checkpoint.checkpoint, &files)
}
