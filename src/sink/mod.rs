//! The two-phase-commit sink: one transaction per checkpoint.
//!
//! - beginTransaction: the first record of checkpoint n creates its staging area
//!   `_ingest/JOB/pending/RUN/n/` (hidden, same filesystem as the table).
//! - write: records go to one staged file per partition value, named `….inprogress` so
//!   that no reader's glob ever matches it.
//! - preCommit (barrier n): flush and fsync every staged file, the staging directory and
//!   its parent, then acknowledge n with the list of staged → final paths.
//! - commit ([`publish`], run by the coordinator after `CheckpointComplete(n)` is durable,
//!   and by recovery): rename each file into `TABLE/COL=VALUE/part-….csv` without
//!   replacing anything, fsync every touched directory.
//! - abort: remove the staging area of a checkpoint that never completed
//!   (see [`pending`]).
//!
//! The four primitives (stage, make durable, publish, discard) are the seam where an
//! object-store implementation would plug in multipart uploads.

pub(crate) mod columns;
mod commit;
mod counting;
pub(crate) mod encode;
pub(crate) mod merge;
pub(crate) mod overwrite;
#[cfg(feature = "parquet")]
pub(crate) mod parquet;
#[cfg(feature = "parquet")]
mod parquet_file;
#[cfg(feature = "parquet")]
mod part_rows;
pub(crate) mod partition;
pub(crate) mod pending;
mod route;
pub(crate) mod router;
#[cfg(feature = "parquet")]
mod string_stats;
#[cfg(feature = "parquet")]
mod strings;
mod transaction;
pub(crate) mod window;

pub(crate) use commit::publish;
use transaction::{PartFile, Transaction};

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, SyncSender};

use anyhow::{anyhow, bail, Context, Result};

use crate::core::batch::{Msg, RecordBatch, Returns};
use crate::core::layout::JobLayout;
use crate::core::layout::TableStore;
use crate::core::options::Compression;
use crate::core::options::Format;
use crate::core::protocol::{Ack, Barrier, Flushed, StagedFile, REJECTS_DIR};
use crate::core::schema::Schema;
use crate::core::sys::failpoint;
use crate::core::sys::fsutil;
use crate::core::sys::syncfs::{self, FsSync};
use columns::FileColumns;
use encode::{Encoder, Finished};
use router::{Routed, Router, Work};

/// Suffix of staged files: matches no reader's glob for a committed extension.
pub(crate) const STAGED_SUFFIX: &str = ".inprogress";

/// Descriptors a load may hold at once, as a power of two: two sinks' staged files at
/// their cap, with the inputs, journal and fsync threads in the margin.
pub(crate) const MOST_FILES_OPEN: u64 = 2 * transaction::MAX_OPEN as u64;

/// How data files are written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub(crate) format: Format,
    pub(crate) compression: Compression,
    /// Start a new part file once one reaches this many bytes on disk.
    pub(crate) target_file_size: Option<u64>,
    /// The data files' directory under the table's root, `""` or ending in `/`
    /// ([`crate::core::options::TableFormat::data_dir`]).
    pub(crate) data_dir: &'static str,
}

/// Where bad rows go, and how many may.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rejects {
    /// Input paths, by input index, for the rejects file and messages.
    pub(crate) inputs: Vec<String>,
    /// Bad rows allowed in the whole run; 0 fails the run at the first.
    pub(crate) max: u64,
    /// Bad rows already committed by earlier checkpoints of the run.
    pub(crate) before: u64,
    /// `--on-bad-input quarantine`: the limit holds per input, and an input past it is
    /// the input's failure ([`crate::core::error::BadInput`]), not the run's.
    pub(crate) per_input: bool,
}

/// The rejects file's columns.
const REJECTS_HEADER: [&str; 4] = ["source_file", "line", "reason", "record"];

/// One sink among the `count` that split a load's partitions (see `router.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SinkShare {
    pub(crate) index: usize,
    pub(crate) count: usize,
}

impl SinkShare {
    /// The only sink.
    pub(crate) const ONE: SinkShare = SinkShare { index: 0, count: 1 };

    /// The first sink also writes the rejects and reaches the stage-snapshot fail
    /// points of a load without stages.
    fn is_first(self) -> bool {
        self.index == 0
    }
}

/// Staged files a sink may keep open at once under this process's open-file limit,
/// while `sinks` sinks share the checkpoint's partitions.
fn open_cap(output: Output, sinks: usize) -> usize {
    let compressed = output.compression != Compression::None;
    transaction::open_cap(fsutil::open_file_limit(), sinks, compressed)
}

/// Writes records into per-checkpoint transactions of part files.
pub(crate) struct TableSink {
    layout: JobLayout,
    run_id: String,
    partition_cols: Vec<(usize, String)>,
    layout_cols: FileColumns,
    format: Format,
    output: Output,
    shard: SinkShare,
    txn: Transaction,
    routes: route::Routes,
    runs: encode::Runs,
    dir_name: String,
    ancestors_synced: bool,
    rejects: Rejects,
    rejects_total: u64,
    /// Bad rows of each input this sink has met (with `Rejects::per_input`).
    rejects_by_input: std::collections::HashMap<u32, u64>,
}

impl TableSink {
    /// Writes each column's Parquet field id: `ids` has them by name.
    pub(crate) fn with_field_ids(mut self, ids: &std::collections::BTreeMap<String, i32>) -> Self {
        self.layout_cols.set_field_ids(ids);
        self
    }

    /// A sink for `schema`, partitioned by `partition_by`, starting at `first_checkpoint`.
    pub(crate) fn new(
        layout: &JobLayout,
        run_id: &str,
        schema: &Schema,
        partition_by: &[String],
        first_checkpoint: u64,
        output: Output,
        rejects: Rejects,
    ) -> Result<TableSink> {
        let columns = schema.names();
        let mut partition_cols = Vec::new();
        // Inputs with no header at all (empty files) have no columns and write nothing.
        let partition_by = if columns.is_empty() {
            &[]
        } else {
            partition_by
        };
        for col in partition_by {
            match columns.iter().position(|c| c == col) {
                Some(i) => partition_cols.push((i, col.clone())),
                None => bail!(
                    "--partition-by column {col:?} is not in the records (columns: {})",
                    columns.join(", ")
                ),
            }
        }
        let body_cols: Vec<usize> = (0..columns.len())
            .filter(|i| !partition_cols.iter().any(|(p, _)| p == i))
            .collect();
        if body_cols.is_empty() && !columns.is_empty() {
            bail!(
                "every column is a partition column; at least one column must remain in the files"
            );
        }
        let names = body_cols.iter().map(|&i| columns[i].clone()).collect();
        let types: Vec<_> = body_cols.iter().map(|&i| schema.columns[i].ty).collect();
        let rejects_total = rejects.before;
        Ok(TableSink {
            layout: layout.clone(),
            run_id: run_id.to_string(),
            partition_cols,
            layout_cols: FileColumns::new(body_cols, names, &types),
            format: output.format,
            output,
            shard: SinkShare::ONE,
            txn: Transaction::new(
                layout,
                run_id,
                first_checkpoint,
                (open_cap(output, 1), SinkShare::ONE),
            ),
            runs: encode::Runs::default(),
            routes: route::Routes::default(),
            dir_name: String::new(),
            ancestors_synced: false,
            rejects,
            rejects_total,
            rejects_by_input: Default::default(),
        })
    }

    /// This sink as sink `shard.index` of `shard.count`: it writes only the rows the
    /// router gives it, and its part files' sequence numbers are its own.
    pub(crate) fn into_shard(self, shard: SinkShare) -> TableSink {
        let txn = Transaction::new(
            &self.layout,
            &self.run_id,
            self.txn.checkpoint,
            (open_cap(self.output, 1), shard),
        );
        TableSink { shard, txn, ..self }
    }

    /// Which of the load's sinks this is (0: the first).
    pub(crate) fn shard_index(&self) -> usize {
        self.shard.index
    }

    /// A router for this sink's partition columns, feeding `sinks` sinks.
    pub(crate) fn router(&self, sinks: usize) -> Router {
        Router::new(self.partition_cols.iter().map(|&(c, _)| c).collect(), sinks)
    }

    /// Writes this sink's rows of a routed batch into the open transaction; the first
    /// sink also writes its bad rows to the rejects file (or fails the run, as the
    /// policy says).
    ///
    /// Hot path: a row's part file is found by its partition id (the router hashed the
    /// key once); a file is opened only for a partition new to this checkpoint.
    /// CSV and JSON lines rows are written as they come: the batch is read once, in
    /// order. Parquet rows are routed first and then written part by part, a column at
    /// a time (see `route.rs`): measured on the 1 GB benchmark, 6.5 s → 5.8 s for
    /// Parquet, while CSV lost 5-10% to reading the batch once per part.
    pub(crate) fn write(&mut self, routed: &Routed) -> Result<()> {
        let batch = &routed.batch;
        if !batch.rejects.is_empty() && self.shard.is_first() {
            self.write_rejects(batch)?;
        }
        // Open files and memory for closed files' rows are the sinks' to share once the
        // router spreads the checkpoint's partitions; until then the first sink's alone.
        let sharing = if routed.spread { self.shard.count } else { 1 };
        if sharing != self.txn.sharing() {
            self.txn
                .share_with(sharing, open_cap(self.output, sharing))?;
        }
        let grouped = self.format == Format::Parquet;
        self.runs.find(&self.layout_cols, batch);
        let mut routes = std::mem::take(&mut self.routes);
        routes.clear();
        let me = self.shard.index as u8;
        let mut mine = 0u64;
        // Rows written into many part files hint the cache where the rows (or, grouped,
        // the parts) some way ahead go (`Transaction::hint_ahead`).
        let hints = self.txn.parts.len() >= HINT_FROM_PARTS;
        let ahead = |row: usize| {
            routed
                .ids
                .get(row)
                .zip(routed.owners.get(row))
                .filter(|(_, &owner)| owner == me)
                .map(|(&id, _)| id)
        };
        let written = (|| -> Result<()> {
            for (row, (&id, &owner)) in routed.ids.iter().zip(&routed.owners).enumerate() {
                if hints && !grouped {
                    let txn = &self.txn;
                    txn.hint_ahead(row, |r| ahead(r).and_then(|id| txn.part_of(id)));
                }
                if owner != me {
                    continue;
                }
                mine += 1;
                let part = match self.txn.part_of(id) {
                    Some(part) => part,
                    None => self.open_part(batch, row, id)?,
                };
                if grouped {
                    routes.push(row, part);
                } else {
                    self.write_rows(batch, part, &[row])?;
                }
            }
            routes.group();
            for (i, (part, rows)) in routes.groups().enumerate() {
                if hints {
                    self.txn.hint_ahead(i, |g| routes.part_at(g));
                }
                self.write_rows(batch, part, rows)?;
            }
            Ok(())
        })();
        self.routes = routes;
        written?;
        self.txn.rows += mine;
        Ok(())
    }

    /// Writes `rows` (ascending) of `batch` to `part`. With `--target-file-size`, row by
    /// row: once the file reaches the size it is cut, and the partition's next row
    /// opens its next part.
    fn write_rows(&mut self, batch: &RecordBatch, mut part: usize, rows: &[usize]) -> Result<()> {
        let Some(limit) = self.output.target_file_size else {
            // A closed file takes rows in memory first (`transaction.rs`).
            let mut rest = rows;
            let format = self.txn.parts[part].format;
            let size = self.txn.write_buffer(part);
            if let Some(pending) = self.txn.pending(part) {
                while let Some((&row, tail)) = rest.split_first() {
                    if pending.len() >= encode::spill_at(size) {
                        break;
                    }
                    encode::push_row(format, pending, &self.layout_cols, batch, row, &self.runs)?;
                    rest = tail;
                }
                self.txn.parts[part].rows += (rows.len() - rest.len()) as u64;
            }
            if rest.is_empty() {
                return Ok(());
            }
            let rows = rest;
            let written =
                self.txn
                    .writer(part)?
                    .write_rows(&self.layout_cols, batch, rows, &self.runs);
            let file = &mut self.txn.parts[part];
            written
                .with_context(|| format!("cannot write staged file {}", file.staged.display()))?;
            file.rows += rows.len() as u64;
            return Ok(());
        };
        for (i, &row) in rows.iter().enumerate() {
            let written =
                self.txn
                    .writer(part)?
                    .write_rows(&self.layout_cols, batch, &[row], &self.runs);
            let file = &mut self.txn.parts[part];
            written
                .with_context(|| format!("cannot write staged file {}", file.staged.display()))?;
            file.rows += 1;
            file.plain_bytes += self.layout_cols.row_bytes(batch, row, self.format);
            if self.txn.size(part, self.output.compression) >= limit {
                self.txn.cut(part)?;
                if let (Some(&next), Some(id)) = (rows.get(i + 1), self.txn.parts[part].id) {
                    part = self.open_part(batch, next, id)?;
                }
            }
        }
        Ok(())
    }

    fn write_rejects(&mut self, batch: &RecordBatch) -> Result<()> {
        let inputs = self.rejects.inputs.clone();
        let input_name = |input: u32| {
            inputs
                .get(input as usize)
                .map_or("?", String::as_str)
                .to_string()
        };
        let first = &batch.rejects[0];
        if self.rejects.per_input {
            for reject in &batch.rejects {
                let seen = self.rejects_by_input.entry(reject.input).or_default();
                *seen += 1;
                if *seen > self.rejects.max {
                    return Err(anyhow::Error::new(crate::core::error::BadInput {
                        input: reject.input as usize,
                        reason: format!(
                            "{}:{}: {} ({} bad row(s) in this input, over --max-errors {})",
                            input_name(reject.input),
                            reject.line,
                            reject.reason,
                            seen,
                            self.rejects.max
                        ),
                    }));
                }
            }
        } else if self.rejects.max == 0 {
            bail!(
                "{}:{}: {}\n(to set bad rows aside in TABLE/_rejects/ instead, pass --max-errors N; \
                 to this run: --recover --max-errors N)",
                input_name(first.input),
                first.line,
                first.reason
            );
        }
        self.rejects_total += batch.rejects.len() as u64;
        if !self.rejects.per_input && self.rejects_total > self.rejects.max {
            let last = &batch.rejects[batch.rejects.len() - 1];
            bail!(
                "too many bad rows: {} exceed --max-errors {}; the last one: {}:{}: {}",
                self.rejects_total,
                self.rejects.max,
                input_name(last.input),
                last.line,
                last.reason
            );
        }
        let part = match self.txn.rejects_part {
            Some(part) => part,
            None => {
                let name = format!(
                    "rejects-{}-{}-{:06}.csv.rejects",
                    self.layout.job, self.run_id, self.txn.checkpoint
                );
                // `.csv.rejects`: CSV inside, but no reader's `**/*.csv` glob (DuckDB's
                // descends into `_` directories) mistakes it for table data.
                let dest = format!("{REJECTS_DIR}/{}/{name}", self.layout.job);
                let part = self.open_file(
                    name,
                    dest,
                    (Format::Csv, Compression::None),
                    &REJECTS_HEADER,
                )?;
                self.txn.rejects_part = Some(part);
                part
            }
        };
        for reject in &batch.rejects {
            let file = input_name(reject.input);
            let line = reject.line.to_string();
            let cells = [
                file.as_bytes(),
                line.as_bytes(),
                reject.reason.as_bytes(),
                &reject.record,
            ];
            let written = self.txn.writer(part)?.write_cells(&cells);
            let part = &mut self.txn.parts[part];
            written
                .with_context(|| format!("cannot write staged file {}", part.staged.display()))?;
            part.rows += 1;
        }
        self.txn.rejects += batch.rejects.len() as u64;
        Ok(())
    }

    /// Opens the part file of partition `id` (whose values row `row` holds) in this
    /// checkpoint: a new file, numbered after this sink's earlier ones.
    fn open_part(&mut self, batch: &RecordBatch, row: usize, id: u32) -> Result<usize> {
        self.dir_name.clear();
        for (i, (col, name)) in self.partition_cols.iter().enumerate() {
            if i > 0 {
                self.dir_name.push('/');
            }
            partition::component(name, batch.field(row, *col), &mut self.dir_name)
                .with_context(|| format!("input line {}", batch.line(row)))?;
        }
        let (ext, suffix) = match self.format {
            Format::Csv => ("csv", self.output.compression.suffix()),
            Format::Jsonl => ("jsonl", self.output.compression.suffix()),
            // Parquet compresses inside the file.
            Format::Parquet => ("parquet", ""),
        };
        // Sinks number their files apart.
        let seq = self.txn.seq(self.txn.parts.len());
        let file_name = format!(
            "part-{}-{}-{:06}-{seq:05}.{ext}{suffix}",
            self.layout.job, self.run_id, self.txn.checkpoint,
        );
        let data_dir = self.output.data_dir;
        let dest = if self.dir_name.is_empty() {
            format!("{data_dir}{file_name}")
        } else {
            format!("{data_dir}{}/{file_name}", self.dir_name)
        };
        let header = self.layout_cols.header.clone();
        let part = self.open_file(
            file_name,
            dest,
            (self.format, self.output.compression),
            &header,
        )?;
        self.txn.parts[part].id = Some(id);
        self.txn.set_part(id, part);
        Ok(part)
    }

    /// Opens a new staged file in the transaction (beginning the transaction if it is
    /// the first), writes `header`, and returns its index.
    fn open_file<H: AsRef<[u8]>>(
        &mut self,
        file_name: String,
        dest: String,
        (format, compression): (Format, Compression),
        header: &[H],
    ) -> Result<usize> {
        let txn = &mut self.txn;
        if txn.parts.is_empty() {
            // beginTransaction: the staging area. Its name is made durable in preCommit
            // (`make_durable` fsyncs its parent), before the journal can name a file in
            // it; fsynced here, it held this thread, and the whole load, 42 ms per 1 GB
            // (`perf sched timehist`).
            let runs = txn.dir.parent().unwrap_or(&txn.dir);
            fsutil::create_dir_all_durable(runs)?;
            fsutil::create_dir_unsynced(&txn.dir)?; // or found made by an earlier process
            txn.fs_sync = FsSync::open(&txn.dir)?;
            if !self.ancestors_synced {
                // Once per process: `pending/RUN` may predate a crash that skipped its fsync.
                fsutil::sync_ancestors(&txn.dir, &self.layout.dir)?;
                self.ancestors_synced = true;
            }
        }
        let staged = txn.dir.join(format!("{file_name}{STAGED_SUFFIX}"));
        let staged_rel = format!(
            "pending/{}/{}/{file_name}{STAGED_SUFFIX}",
            self.run_id,
            crate::core::layout::staging_dir_name(txn.checkpoint, self.shard.index)
        );
        let buffer = txn.write_buffer(txn.parts.len());
        let mut writer = match format {
            #[cfg(feature = "parquet")]
            Format::Parquet => Encoder::parquet(
                staged.clone(),
                &self.layout_cols,
                compression,
                self.output.target_file_size,
                txn.parts.len(),
            )?,
            _ => {
                txn.make_room()?;
                let file = fsutil::create_new(&staged)?;
                Encoder::new(format, compression, file, buffer)?
            }
        };
        writer
            .start(header)
            .with_context(|| format!("cannot write staged file {}", staged.display()))?;
        txn.parts.push(PartFile {
            staged,
            staged_rel,
            dest,
            writer: Some(writer),
            id: None,
            format,
            compression,
            rows: 0,
            plain_bytes: 0,
            pending: Vec::new(),
        });
        if !txn.parts[txn.parts.len() - 1]
            .writer
            .as_ref()
            .is_some_and(Encoder::opens_lazily)
        {
            txn.open.push_back(txn.parts.len() - 1);
        }
        Ok(txn.parts.len() - 1)
    }

    /// preCommit, first half: flushes every staged file of the transaction, hands them
    /// over, and starts the next transaction at once. The coordinator runs the second
    /// half ([`PreCommitted::make_durable`]) while this thread writes the next checkpoint,
    /// so the fsyncs overlap with parsing instead of stalling it.
    pub(crate) fn pre_commit(&mut self, barrier: Barrier) -> Result<PreCommitted> {
        failpoint::hit("sink.precommit.before");
        let next = Transaction::new(
            &self.layout,
            &self.run_id,
            barrier.checkpoint + 1,
            (open_cap(self.output, 1), self.shard),
        );
        let txn = std::mem::replace(&mut self.txn, next);
        if txn.checkpoint != barrier.checkpoint {
            bail!(
                "sink expected barrier {}, got {}",
                txn.checkpoint,
                barrier.checkpoint
            );
        }
        let mut files = Vec::with_capacity(txn.parts.len());
        for part in txn.parts {
            let file = match part.writer {
                Some(writer) => Some(writer.finish().with_context(|| {
                    format!("cannot write staged file {}", part.staged.display())
                })?),
                None => {
                    // A closed file's last rows: written, and closed again at once so
                    // that the files open stay under the cap.
                    if !part.pending.is_empty() {
                        let file = fsutil::open_append(&part.staged)?;
                        let mut writer = Encoder::new(part.format, part.compression, file, 0)?;
                        writer
                            .write_encoded(&part.pending)
                            .and_then(|()| writer.close())
                            .with_context(|| {
                                format!("cannot write staged file {}", part.staged.display())
                            })?;
                    }
                    None
                }
            };
            let staged = StagedFile {
                staged: part.staged_rel,
                dest: part.dest,
                size: 0,
                rows: part.rows,
                upload: None,
            };
            files.push((file, part.staged, staged));
        }
        Ok(PreCommitted {
            store: self.layout.store.clone(),
            dir: txn.dir,
            fs_sync: txn.fs_sync,
            files,
            rows: txn.rows,
            rejects: txn.rejects,
        })
    }

    /// abort: discards the open transaction (its checkpoint will never complete): this
    /// sink's staged files, then its staging area if nothing else is left in it.
    pub(crate) fn abort(self) -> Result<()> {
        let Transaction { dir, parts, .. } = self.txn;
        let staged: Vec<PathBuf> = parts.into_iter().map(|p| p.staged).collect();
        // Closes every writer (a Parquet part's encoder thread ends) before removing.
        for path in &staged {
            fsutil::remove_file_if_exists(path)?;
        }
        fsutil::remove_dir_if_empty_durable(&dir)
    }
}

/// Part files a transaction has before its sink gives cache hints: with fewer, where
/// each one's buffer ends stays in cache from one of its rows to the next (40
/// partitions: no gain, 4% more user time).
const HINT_FROM_PARTS: usize = 256;

/// A transaction whose files are flushed but not yet durable.
#[derive(Debug)]
pub(crate) struct PreCommitted {
    /// Where the files go: once durable here, [`TableStore::stage`] makes them durable
    /// there (for a table in a bucket: uploads).
    store: std::sync::Arc<dyn TableStore>,
    dir: PathBuf,
    /// The staging area's filesystem, to make many files durable at once.
    fs_sync: Option<FsSync>,
    /// Each staged file, still open (or finishing) unless the open-file cap closed it.
    files: Vec<(Option<Finished>, PathBuf, StagedFile)>,
    rows: u64,
    rejects: u64,
}

impl Flushed for PreCommitted {
    fn rows(&self) -> u64 {
        self.rows
    }

    fn rejects(&self) -> u64 {
        self.rejects
    }

    /// preCommit, second half: fsyncs every staged file, the staging directory and its
    /// parent (beginTransaction created the directory without an fsync), and returns the
    /// files as the journal records them.
    fn make_durable(self: Box<Self>) -> Result<Vec<StagedFile>> {
        let mut finished = Vec::with_capacity(self.files.len());
        for (file, path, staged) in self.files {
            let open = match file {
                Some(finished) => finished
                    .wait()
                    .with_context(|| format!("cannot write staged file {}", path.display()))?,
                None => None,
            };
            finished.push((open, path, staged));
        }
        // Survives: a power cut after CheckpointComplete names these files, with their
        // names in the staging area and the area's own name (beginTransaction did not
        // fsync it). Many files: one `syncfs` (4,000 partitions staged 4,000 files, whose
        // fsyncs were most of the load's system time); a few: their fsyncs all at once
        // (the last checkpoint's 40 fsyncs took 1.05 ms each one after the other,
        // `strace -T`, each waiting for its own file's tail to be written).
        let bulk = self
            .fs_sync
            .as_ref()
            .filter(|_| syncfs::worth_it(finished.len()));
        let sizes = match bulk {
            Some(fs_sync) => {
                fs_sync.sync()?;
                // From every core: 4,000 files' sizes took 16 ms of the thread the commit
                // waits for.
                fsutil::each_concurrently(
                    &finished,
                    fsutil::cores(),
                    "ingest-stat",
                    |(open, path, _)| {
                        let meta = match open {
                            Some(file) => file.metadata(),
                            None => std::fs::metadata(path),
                        };
                        Ok(meta
                            .with_context(|| format!("cannot stat {}", path.display()))?
                            .len())
                    },
                )?
            }
            None => fsutil::sync_concurrently(&finished, |(open, path, _)| {
                let reopened;
                let file = match open {
                    Some(file) => file,
                    None => {
                        reopened = fsutil::open_for_sync(path)?;
                        &reopened
                    }
                };
                fsutil::sync_file(file, path)?;
                Ok(file
                    .metadata()
                    .with_context(|| format!("cannot stat {}", path.display()))?
                    .len())
            })?,
        };
        let mut out: Vec<(StagedFile, PathBuf)> = finished
            .into_iter()
            .zip(sizes)
            .map(|((_, path, mut staged), size)| {
                staged.size = size;
                (staged, path)
            })
            .collect();
        if !out.is_empty() && bulk.is_none() {
            fsutil::sync_dir(&self.dir)?;
            if let Some(runs) = self.dir.parent() {
                fsutil::sync_dir(runs)?;
            }
        }
        // Durable in the table's store, and seen by no reader until commit.
        self.store.stage(&mut out)?;
        let out: Vec<StagedFile> = out.into_iter().map(|(staged, _)| staged).collect();
        failpoint::hit("sink.precommit.after");
        Ok(out)
    }
}

/// Runs the sink until the final barrier. On an early end (upstream failed) or its own
/// failure (say, ENOSPC) it aborts the open transaction, freeing its space at once.
///
/// `input` is routed work (`router.rs`): from the router's thread when several sinks
/// share the partitions, or routed on this thread as it is read when there is one.
/// `stageless`: the pipeline has no stage, so the stage-snapshot fail points are reached
/// here (by the first sink), where the (empty) stage state of each checkpoint is
/// complete; crash tests can then use every point on every pipeline. `permits`: each
/// preCommit waits for one, so that few checkpoints' files stay open (`window.rs`).
pub(crate) fn run(
    mut sink: TableSink,
    input: impl IntoIterator<Item = Work>,
    returns: Returns,
    (acks, permits): (Sender<Ack>, window::Permits),
    stageless: bool,
) -> Result<()> {
    let outcome = (|| {
        for work in input {
            match work {
                Work::Batch(routed) => {
                    sink.write(&routed)?;
                    // The last sink done with a batch hands it back.
                    if let Some(routed) = std::sync::Arc::into_inner(routed) {
                        returns.give(routed.batch);
                    }
                }
                Work::Barrier(barrier) => {
                    permits.take()?;
                    if stageless && sink.shard.is_first() {
                        failpoint::hit("stage.snapshot.before");
                        failpoint::hit("stage.snapshot.after");
                    }
                    let flushed = sink.pre_commit(barrier)?;
                    acks.send(Ack::Sink {
                        checkpoint: barrier.checkpoint,
                        flushed: Box::new(flushed),
                    })
                    .map_err(|_| anyhow!("the coordinator stopped"))?;
                    if barrier.last {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    })();
    match outcome {
        Ok(true) => Ok(()),
        // The input ended without a final barrier: upstream failed and reports why.
        Ok(false) => sink.abort(),
        Err(e) => {
            // Best effort: recovery removes whatever this leaves.
            let _ = sink.abort();
            Err(e)
        }
    }
}

/// Sends each routed message to the sinks it concerns: the router's thread when several
/// sinks share the partitions. Stops when the input ends or a sink has stopped (it
/// reports why).
pub(crate) fn route(
    mut router: Router,
    input: Receiver<Msg>,
    sinks: Vec<SyncSender<Work>>,
) -> Result<()> {
    for msg in input {
        let work = router.route(msg);
        for (index, sink) in sinks.iter().enumerate() {
            if let Some(copy) = work_for(&work, index) {
                sink.send(copy)
                    .map_err(|_| anyhow!("the pipeline stopped"))?;
            }
        }
    }
    Ok(())
}

/// The first sink's work, routed on its own thread as it is read: each batch with rows
/// of the sinks after it (`others`, sinks 1, 2, …), and every barrier, is handed to them
/// on the way. Ends early if one of them has stopped: it reports why, and the first
/// sink, its input ended without a final barrier, aborts.
pub(crate) fn route_inline(
    mut router: Router,
    input: Receiver<Msg>,
    others: Vec<SyncSender<Work>>,
) -> impl Iterator<Item = Work> {
    input.into_iter().map_while(move |msg| {
        let work = router.route(msg);
        for (index, sink) in (1..).zip(&others) {
            if let Some(copy) = work_for(&work, index) {
                sink.send(copy).ok()?;
            }
        }
        Some(work)
    })
}

/// What sink `index` gets of `work`: every barrier, and a batch if it has rows there to
/// write (or, for the first sink, bad rows for the rejects file).
fn work_for(work: &Work, index: usize) -> Option<Work> {
    match work {
        Work::Barrier(barrier) => Some(Work::Barrier(*barrier)),
        Work::Batch(routed)
            if routed.has_rows_for(index) || (index == 0 && !routed.batch.rejects.is_empty()) =>
        {
            Some(Work::Batch(routed.clone()))
        }
        Work::Batch(_) => None,
    }
}

/// Several sinks' preCommits of one checkpoint, made durable and journaled as one.
#[derive(Debug)]
pub(crate) struct Shards(pub(crate) Vec<Box<dyn Flushed>>);

impl Flushed for Shards {
    fn rows(&self) -> u64 {
        self.0.iter().map(|f| f.rows()).sum()
    }

    fn rejects(&self) -> u64 {
        self.0.iter().map(|f| f.rejects()).sum()
    }

    fn make_durable(self: Box<Self>) -> Result<Vec<StagedFile>> {
        let mut files = Vec::new();
        for flushed in self.0 {
            files.extend(flushed.make_durable()?);
        }
        Ok(files)
    }
}
