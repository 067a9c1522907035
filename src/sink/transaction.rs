//! A checkpoint's open transaction: its staged part files, the partition → file map,
//! and the cap on files open at once (closing the longest-open one, and reopening it to
//! append). Parquet parts take no place under the cap: they open their file only while
//! they have full batches to write (see `parquet.rs`).
//!
//! A closed CSV or JSON lines part keeps taking rows in memory
//! ([`PartFile::pending`]), up to its write buffer's size, and is reopened only to
//! write them out. Reopened for every row instead, a checkpoint with more partitions than the cap (interleaved, as rows
//! come) cost an `openat`, a `write` and a `close` per row: 1 GB by country and day
//! under an open-file limit of 2,000 (cap 500, 1,200 partitions) took 37 s, against
//! 7 s with every file open. A compressed part paid more: a new compressor, and a new
//! gzip member or zstd frame in the file, for each row.

use std::collections::VecDeque;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::encode::{self, Encoder};
use super::SinkShare;
use crate::core::layout::JobLayout;
use crate::core::options::Compression;
use crate::core::options::Format;
use crate::core::sys::cache_hint;
use crate::core::sys::fsutil;
use crate::core::sys::syncfs::FsSync;

pub(super) struct PartFile {
    pub(super) staged: PathBuf,
    pub(super) staged_rel: String,
    pub(super) dest: String,
    /// The partition (router id) whose rows it holds; `None` for the rejects file.
    pub(super) id: Option<u32>,
    /// `None` while the file is closed to stay under the open-file cap.
    pub(super) writer: Option<Encoder>,
    pub(super) format: Format,
    pub(super) compression: Compression,
    pub(super) rows: u64,
    /// Bytes of the rows written, as CSV would hold them (counted only with
    /// `--target-file-size`): the size of a plain file that its write buffer still hides.
    pub(super) plain_bytes: u64,
    /// Rows of a closed CSV or JSON lines file, encoded (before compression), that its
    /// file has yet to get: written when it is reopened, or at preCommit.
    pub(super) pending: Vec<u8>,
}

/// The open transaction of one checkpoint.
pub(super) struct Transaction {
    pub(super) checkpoint: u64,
    pub(super) dir: PathBuf,
    pub(super) parts: Vec<PartFile>,
    /// Partition id (see `router.rs`) → index in `parts` + 1; 0: no file yet.
    slots: Vec<usize>,
    pub(super) rows: u64,
    /// The rejects file of this checkpoint, once it has a bad row.
    pub(super) rejects_part: Option<usize>,
    pub(super) rejects: u64,
    /// Parts whose file is open, oldest first.
    pub(super) open: VecDeque<usize>,
    /// How many may be open at once ([`open_cap`]).
    max_open: usize,
    /// The sinks sharing the checkpoint's partitions, and so its open files and the
    /// memory for closed files' rows: 1 until the router spreads them.
    sharing: usize,
    /// Which sink's transaction this is: its files are numbered apart from the other
    /// sinks' ([`Transaction::seq`]).
    share: SinkShare,
    /// Bytes the closed parts' `pending` rows have taken of the budget.
    pending_held: usize,
    /// The staging area's filesystem, opened when the transaction began (before any of
    /// its writes, so that a `syncfs` at preCommit reports their writeback errors);
    /// `None` where the filesystem is not trusted with it.
    pub(super) fs_sync: Option<FsSync>,
}

/// Memory for the rows of closed files, all parts of a checkpoint together (shared out
/// by its sinks): 4,096 partitions' worth of the smallest write buffer. Past it, a
/// closed file is reopened for its rows at once.
const PENDING_BUDGET: usize = 16 << 20;

/// Staged files one sink keeps open at once per transaction, at most. A checkpoint
/// touching more partitions closes the longest-open file and reopens it (appending)
/// when needed, so 10,000 partitions need neither 10,000 descriptors nor 10,000 write
/// buffers. The cap is a quarter of the open-file limit shared by the sinks (see
/// [`open_cap`]), up to this.
pub(super) const MAX_OPEN: usize = 4096;
/// The cap for compressed files: each holds a compressor's state (hundreds of KiB), and
/// this many already take tens of MiB.
const MAX_OPEN_COMPRESSED: usize = 256;
/// The cap however low the open-file limit is.
const MIN_OPEN: usize = 16;

/// The staged files each of `sinks` sinks may keep open at once under an open-file limit
/// of `limit` (`None`: no limit): a quarter of the limit, shared by the sinks, since two
/// transactions' files are open together (the one being written and the one being made
/// durable) and the inputs, the journal and Parquet parts need the rest.
///
/// A fixed cap of 256 sent a load partitioned by country and day (1,200 partitions per
/// checkpoint, interleaved) through a close and a reopen for most rows: 690,000
/// `openat` calls and 4.67 s for 100 MB, against 0.81-0.93 s with every file open
/// (`/usr/bin/time`, `strace -c`).
pub(super) fn open_cap(limit: Option<u64>, sinks: usize, compressed: bool) -> usize {
    let most = if compressed {
        MAX_OPEN_COMPRESSED
    } else {
        MAX_OPEN
    };
    let share = match limit {
        Some(limit) => usize::try_from(limit / 4 / sinks.max(1) as u64).unwrap_or(most),
        None => most,
    };
    share.clamp(MIN_OPEN, most)
}

/// Rows ahead of the one being written whose part file's buffer end the sink asks the
/// cache for (twice that ahead, the buffer's description; three times, the part's
/// entry). Over 4,000 partitions the sinks' user time fell by 17% with 4 or 8, and not
/// at all with 16, whose lines were gone again by the time their rows came (medians of
/// 10 alternated runs of `-p country,b`, 2,000,000 orders).
const HINT_AHEAD: usize = 8;

/// The write buffer of a checkpoint's first staged files.
const WRITE_BUFFER: usize = 64 * 1024;
/// The write buffer of a staged file once a checkpoint has many partitions.
const SMALL_WRITE_BUFFER: usize = 16 * 1024;
/// The write buffer once it has more than 512: 4,096 uncompressed files open take 49 MiB
/// (their buffers a quarter larger, `encode.rs`).
///
/// Not smaller: on ext4 a `write` of 4 KiB cost as much system time per byte as two of
/// 8 KiB, and four of 16 KiB (232 MB into 4,000 files: 0.27 s, 0.17 s, 0.11 s; a
/// write's page-cache folio is as large as the write). With 4 KiB past the 1,024th
/// file, a 4,000-partition CSV load made 47,500 writes; with 8 KiB past the 512th it
/// took 1.03 s instead of 1.10 s (medians of 8 alternated runs).
const TINY_WRITE_BUFFER: usize = 8 * 1024;

/// The write buffer of the checkpoint's staged file numbered `seq` (0-based, counting
/// every sink's files: [`Transaction::seq`]): a power of two. A compressed file's takes
/// that memory and is written out once it holds [`encode::spill_at`] of it; an
/// uncompressed one's takes a quarter more and is written out in whole pages once it
/// holds that much (both sizes the allocator rounds nothing up from).
pub(super) fn write_buffer(seq: usize) -> usize {
    match seq {
        0..64 => WRITE_BUFFER,
        64..512 => SMALL_WRITE_BUFFER,
        _ => TINY_WRITE_BUFFER,
    }
}

/// The memory a closed part's pending rows take: its write buffer's.
fn pending_capacity(seq: usize) -> usize {
    write_buffer(seq)
}

impl Transaction {
    /// The number of this sink's `part`th file among the checkpoint's (in its name):
    /// sink i of k numbers its files i, i + k, i + 2k, …
    pub(super) fn seq(&self, part: usize) -> usize {
        part * self.share.count + self.share.index
    }

    /// The write buffer of this sink's `part`th file: by its number in the checkpoint,
    /// so that however many sinks share a checkpoint, its files take the buffers one
    /// sink's would.
    pub(super) fn write_buffer(&self, part: usize) -> usize {
        write_buffer(self.seq(part))
    }

    /// The part file partition `id` is written to in this checkpoint, if it has one.
    pub(super) fn part_of(&self, id: u32) -> Option<usize> {
        match self.slots.get(id as usize) {
            Some(&slot) if slot > 0 => Some(slot - 1),
            _ => None,
        }
    }

    /// Cache hints for rows of part file `part` some rows ahead, in three steps, each
    /// taking the line the step before brought in: `0` (farthest ahead) the part's entry
    /// here, `1` its encoder's state ([`Encoder::hint_state`]), `2` where its rows go
    /// ([`Encoder::hint_tail`]). A hint changes nothing.
    #[inline(always)]
    pub(super) fn hint(&self, part: usize, step: u8) {
        let Some(file) = self.parts.get(part) else {
            return;
        };
        match (step, &file.writer) {
            (0, writer) => cache_hint::to_l1(writer),
            (1, Some(writer)) => writer.hint_state(),
            (_, Some(writer)) => writer.hint_tail(),
            (_, None) => {}
        }
    }

    /// The three hints of [`Transaction::hint`] for the rows (or groups of rows) at
    /// `at` plus one, two and three times [`HINT_AHEAD`], whose part files `part_at`
    /// gives (`None`: not this sink's, or no such row).
    #[inline(always)]
    pub(super) fn hint_ahead(&self, at: usize, part_at: impl Fn(usize) -> Option<usize>) {
        for step in 0..3u8 {
            if let Some(part) = part_at(at + (3 - step as usize) * HINT_AHEAD) {
                self.hint(part, step);
            }
        }
    }

    /// Partition `id`'s rows go to `part` from now on.
    pub(super) fn set_part(&mut self, id: u32, part: usize) {
        let id = id as usize;
        if self.slots.len() <= id {
            self.slots.resize(id + 1, 0);
        }
        self.slots[id] = part + 1;
    }

    /// The writer of `part`, reopening its file (and closing the oldest) if needed.
    pub(super) fn writer(&mut self, part: usize) -> Result<&mut Encoder> {
        if self.parts[part].writer.is_none() {
            self.make_room()?;
            let seq = self.seq(part);
            let file = &mut self.parts[part];
            let out = fsutil::open_append(&file.staged)?;
            let size = write_buffer(seq);
            let mut writer = Encoder::new(file.format, file.compression, out, size)?;
            if !file.pending.is_empty() {
                writer.write_encoded(&file.pending).with_context(|| {
                    format!("cannot write staged file {}", file.staged.display())
                })?;
                self.pending_held = self.pending_held.saturating_sub(pending_capacity(seq));
                file.pending = Vec::new();
            }
            file.writer = Some(writer);
            self.open.push_back(part);
        }
        self.parts[part]
            .writer
            .as_mut()
            .context("a staged file's writer vanished")
    }

    /// Where rows for `part` may be encoded while its file stays closed: its pending
    /// bytes, if it is a closed CSV or JSON lines file and they have room (its write
    /// buffer's size, within the transaction's budget). `None`: write through
    /// [`writer`].
    ///
    /// [`writer`]: Transaction::writer
    pub(super) fn pending(&mut self, part: usize) -> Option<&mut Vec<u8>> {
        let (seq, room) = (self.seq(part), self.pending_room());
        let file = &mut self.parts[part];
        if file.writer.is_some() || file.format == Format::Parquet {
            return None;
        }
        let size = write_buffer(seq);
        if file.pending.capacity() == 0 {
            let capacity = pending_capacity(seq);
            if capacity > room {
                return None;
            }
            self.pending_held += capacity;
            file.pending.reserve_exact(capacity);
        }
        (file.pending.len() < encode::spill_at(size)).then_some(&mut file.pending)
    }

    /// About how large `part`'s file is: for plain CSV and JSON lines the bytes of its
    /// rows (the write buffer hides the rest from the file); for compressed files what
    /// the compressor has handed to the file (it holds back at most a block: ~128 KiB
    /// before compression); for Parquet the row groups written, which end at a quarter
    /// of the target size before compression.
    pub(super) fn size(&self, part: usize, compression: Compression) -> u64 {
        let file = &self.parts[part];
        let written = file.writer.as_ref().map_or(0, Encoder::written);
        match (file.format, compression) {
            (Format::Parquet, _) => written,
            (_, Compression::None) => file.plain_bytes,
            _ => written,
        }
    }

    /// Ends `part`'s file (`--target-file-size` reached): its partition's next row
    /// starts a new part file.
    pub(super) fn cut(&mut self, part: usize) -> Result<()> {
        let file = &mut self.parts[part];
        if let Some(writer) = file.writer.take() {
            writer
                .close()
                .with_context(|| format!("cannot write staged file {}", file.staged.display()))?;
        }
        self.open.retain(|&p| p != part);
        if let Some(slot) = file.id.and_then(|id| self.slots.get_mut(id as usize)) {
            *slot = 0;
        }
        Ok(())
    }

    /// Closes the longest-open file when the cap is reached.
    pub(super) fn make_room(&mut self) -> Result<()> {
        while self.open.len() >= self.max_open {
            let Some(victim) = self.open.pop_front() else {
                break;
            };
            let part = &mut self.parts[victim];
            if let Some(writer) = part.writer.take() {
                // Ends a compressed stream properly (a gzip member, a zstd frame); the
                // file is reopened to append when its partition has rows again.
                writer.close().with_context(|| {
                    format!("cannot write staged file {}", part.staged.display())
                })?;
            }
        }
        Ok(())
    }
}

impl Transaction {
    /// Sink `share`'s transaction of checkpoint `checkpoint`, keeping at most `max_open`
    /// files open.
    pub(super) fn new(
        layout: &JobLayout,
        run_id: &str,
        checkpoint: u64,
        (max_open, share): (usize, SinkShare),
    ) -> Transaction {
        let dir = layout.pending_txn_of(run_id, checkpoint, share.index);
        Transaction::in_dir(dir, checkpoint, (max_open, share))
    }

    /// Checkpoint `checkpoint`'s transaction, staging its files in `dir`.
    fn in_dir(dir: PathBuf, checkpoint: u64, (max_open, share): (usize, SinkShare)) -> Transaction {
        Transaction {
            checkpoint,
            dir,
            parts: Vec::new(),
            slots: Vec::new(),
            rows: 0,
            rejects_part: None,
            rejects: 0,
            open: VecDeque::new(),
            max_open,
            share,
            sharing: 1,
            pending_held: 0,
            fs_sync: None,
        }
    }

    /// Bytes the closed parts' `pending` rows may still take: this sink's share of
    /// [`PENDING_BUDGET`], less what they hold.
    fn pending_room(&self) -> usize {
        (PENDING_BUDGET / self.sharing.max(1)).saturating_sub(self.pending_held)
    }

    /// The sinks sharing this checkpoint's partitions ([`Transaction::share_with`]).
    pub(super) fn sharing(&self) -> usize {
        self.sharing
    }

    /// From now on `sinks` sinks share the checkpoint's partitions: this one keeps at
    /// most `max_open` files open (closing the longest-open ones now if it has more) and
    /// its share of the memory for closed files' rows (what it already holds counts).
    pub(super) fn share_with(&mut self, sinks: usize, max_open: usize) -> Result<()> {
        self.sharing = sinks;
        self.max_open = max_open;
        self.make_room()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_file_cap_is_a_quarter_of_the_limit_shared_by_the_sinks() {
        assert_eq!(open_cap(Some(1024), 1, false), 256);
        assert_eq!(open_cap(Some(1024), 2, false), 128);
        assert_eq!(open_cap(Some(20_000), 1, false), 4096, "at most MAX_OPEN");
        assert_eq!(open_cap(Some(10_000), 2, false), 1250);
        assert_eq!(open_cap(None, 1, false), 4096, "no limit");
        assert_eq!(open_cap(Some(32), 4, false), 16, "at least MIN_OPEN");
        assert_eq!(open_cap(Some(0), 0, false), 16, "no sinks counts as one");
    }

    #[test]
    fn compressed_files_keep_the_small_cap_whatever_the_limit() {
        assert_eq!(open_cap(Some(1 << 20), 1, true), 256);
        assert_eq!(open_cap(None, 1, true), 256);
        assert_eq!(open_cap(Some(256), 1, true), 64);
    }

    /// A transaction of `n` closed parts in `dir`, each a file of one line.
    fn closed_parts(dir: &std::path::Path, n: usize, compression: Compression) -> Transaction {
        let mut txn = Transaction::in_dir(dir.to_path_buf(), 1, (16, SinkShare::ONE));
        for i in 0..n {
            let staged = dir.join(format!("{i}.csv.inprogress"));
            std::fs::write(&staged, b"a\n").unwrap();
            txn.parts.push(PartFile {
                staged,
                staged_rel: String::new(),
                dest: String::new(),
                id: Some(i as u32),
                writer: None,
                format: Format::Csv,
                compression,
                rows: 0,
                plain_bytes: 0,
                pending: Vec::new(),
            });
        }
        txn
    }

    #[test]
    fn a_closed_file_keeps_rows_in_memory_and_writes_them_first_when_reopened() {
        for format in [Format::Csv, Format::Jsonl] {
            let dir = tempfile::tempdir().unwrap();
            let mut txn = closed_parts(dir.path(), 2, Compression::None);
            for part in &mut txn.parts {
                part.format = format;
            }
            txn.pending(0).unwrap().extend_from_slice(b"1\n2\n");
            // Full at its write buffer's size: the rows after go through the file.
            let full = write_buffer(1);
            txn.pending(1).unwrap().resize(full, b'x');
            assert!(txn.pending(1).is_none());
            txn.writer(0).unwrap().write_encoded(b"3\n").unwrap();
            assert!(txn.pending(0).is_none(), "an open file takes rows itself");
            assert!(txn.parts[0].pending.is_empty());
            txn.parts[0].writer.take().unwrap().close().unwrap();
            let text = std::fs::read(&txn.parts[0].staged).unwrap();
            assert_eq!(
                text, b"a\n1\n2\n3\n",
                "{format:?}: the kept rows, in order, before the new"
            );
            assert_eq!(txn.pending_room(), PENDING_BUDGET - pending_capacity(1));
        }
    }

    #[test]
    fn a_closed_compressed_file_keeps_rows_and_writes_them_in_one_member() {
        let dir = tempfile::tempdir().unwrap();
        for compression in [Compression::Gzip, Compression::Zstd] {
            let mut txn = closed_parts(dir.path(), 1, compression);
            std::fs::write(&txn.parts[0].staged, b"").unwrap();
            for row in 1..=3 {
                txn.pending(0)
                    .unwrap()
                    .extend_from_slice(format!("{row}\n").as_bytes());
            }
            txn.writer(0).unwrap().write_encoded(b"4\n").unwrap();
            txn.parts[0].writer.take().unwrap().close().unwrap();
            let raw = std::fs::read(&txn.parts[0].staged).unwrap();
            let mut text = String::new();
            match compression {
                Compression::Gzip => std::io::Read::read_to_string(
                    &mut flate2::read::GzDecoder::new(&raw[..]),
                    &mut text,
                ),
                _ => std::io::Read::read_to_string(
                    &mut zstd::stream::read::Decoder::new(&raw[..])
                        .unwrap()
                        .single_frame(),
                    &mut text,
                ),
            }
            .unwrap();
            // One member or frame holds them all: its decoder alone reads every row.
            assert_eq!(text, "1\n2\n3\n4\n", "{compression:?}");
        }
    }

    #[test]
    fn closed_files_keep_rows_within_the_budget_and_only_text() {
        let dir = tempfile::tempdir().unwrap();
        // Past the 4,096th file each keeps its 8 KiB write buffer's worth, so the 16 MiB
        // hold 2,048 files' rows.
        assert_eq!(pending_capacity(4096), 8192);
        let mut txn = closed_parts(dir.path(), 4096 + 4000, Compression::None);
        let kept = (4096..4096 + 4000)
            .filter(|&part| txn.pending(part).is_some())
            .count();
        assert_eq!(kept, 2048);
        assert_eq!(txn.pending_room(), 0);
        // Room for exactly one more is room.
        txn.pending_held = PENDING_BUDGET - 8192;
        assert!(txn.pending(4096 + 3999).is_some());
        assert_eq!(txn.pending_room(), 0);
        let mut text = closed_parts(dir.path(), 2, Compression::Gzip);
        text.parts[0].format = Format::Jsonl;
        assert!(
            text.pending(0).is_some(),
            "a JSON lines file keeps rows too"
        );
        text.parts[1].format = Format::Parquet;
        assert!(
            text.pending(1).is_none(),
            "a Parquet part encodes its own rows"
        );
    }

    #[test]
    fn sinks_number_their_files_apart() {
        let dir = tempfile::tempdir().unwrap();
        let share = SinkShare { index: 1, count: 3 };
        let txn = Transaction::in_dir(dir.path().to_path_buf(), 1, (16, share));
        let seqs: Vec<usize> = (0..4).map(|part| txn.seq(part)).collect();
        assert_eq!(seqs, [1, 4, 7, 10], "sink 1 of 3: 1, 1 + 3, …");
    }

    #[test]
    fn sinks_sharing_a_checkpoint_share_its_open_files_and_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut txn = closed_parts(dir.path(), 4, Compression::None);
        // Two files open, rows of a third kept in memory, by the first sink alone.
        for part in [0, 1] {
            txn.writer(part).unwrap();
        }
        txn.pending(2).unwrap().extend_from_slice(b"1\n");
        let held = pending_capacity(2);
        assert_eq!(txn.pending_room(), PENDING_BUDGET - held);
        // A second sink takes partitions: one file open at most (the oldest closed).
        txn.share_with(2, 1).unwrap();
        assert_eq!(txn.sharing(), 2);
        assert!(txn.open.is_empty(), "{:?} still open", txn.open);
        assert!(txn.parts[0].writer.is_none() && txn.parts[1].writer.is_none());
        assert_eq!(txn.pending_room(), PENDING_BUDGET / 2 - held);
        // Shared by more sinks than the memory held allows: no room, none negative.
        txn.share_with(1 << 30, 1).unwrap();
        assert_eq!(txn.pending_room(), 0);
        txn.share_with(1, 16).unwrap();
        assert_eq!(txn.pending_room(), PENDING_BUDGET - held);
    }

    #[test]
    fn write_buffers_shrink_as_a_checkpoint_gains_files() {
        assert_eq!(write_buffer(0), 64 * 1024);
        assert_eq!(write_buffer(63), 64 * 1024);
        assert_eq!(write_buffer(64), 16 * 1024);
        assert_eq!(write_buffer(511), 16 * 1024);
        assert_eq!(write_buffer(512), 8 * 1024);
        // The most one sink keeps open.
        let most: usize = (0..MAX_OPEN).map(write_buffer).sum();
        assert!(most <= 40 << 20, "{most} bytes of buffers");
    }
}
