//! Parquet part files: typed columns from the schema (strings where nothing was cast),
//! nulls as nulls, statistics on (a string column's taken in as its builder gathers it:
//! see `parquet_file`), row groups of at most 64 Ki rows, compressed with
//! zstd (default), snappy or nothing. A string column is dictionary-encoded when its
//! values repeat (see `dictionary_columns`), as DuckDB and Spark decide it per column
//! too: a dictionary for every column cost 12% of the benchmark's load (its ids,
//! timestamps and emails never repeat, and each filled a dictionary before falling back),
//! none at all left zstd compressing every status and currency in full.
//!
//! A Parquet file is only readable once its footer is written, so the file is finished
//! at preCommit (`finish`: the part's encoder thread writes the footer while the sink
//! goes on; the coordinator waits for it before the fsync and the journal record); it
//! is never appended to afterwards. A part creates its file only when its first full
//! batch is ready (or at preCommit), so many partitions cost memory, not descriptors,
//! and each partition gets one file per checkpoint (or per `--target-file-size`); the
//! memory is counted (`core/pressure.rs`), and past a budget ends the checkpoint early.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int64Builder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch as ArrowBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::columns::FileColumns;
use super::counting::CountingFile;
use super::parquet_file::ParquetFile;
use super::part_rows::PartRows;
use super::string_stats::MinMax;
use super::strings::Strings;
use crate::core::batch::{ColumnView, RecordBatch};
use crate::core::canonical;
use crate::core::options::Compression;
use crate::core::pressure;
use crate::core::schema::ColumnType;
use crate::core::sys::{cache_hint, fsutil};

/// Rows buffered in the Arrow builders before they go to the Parquet writer.
const ARROW_BATCH_ROWS: usize = 8192;
/// Rows per row group.
const ROW_GROUP_ROWS: usize = 64 * 1024;
/// Values of a string column looked at to decide on its dictionary.
const DICTIONARY_SAMPLE: usize = 1024;
/// A string column gets a dictionary when its sample has at most one distinct value per
/// this many values.
const DICTIONARY_REPEATS: usize = 4;

/// Which columns of `batch` (a part's first Arrow batch) are dictionary-encoded: the
/// string columns whose first [`DICTIONARY_SAMPLE`] values hold at most one distinct
/// value per [`DICTIONARY_REPEATS`] (nulls aside). Such a column's pages become short
/// runs of small indices: on the benchmark's orders (statuses, currencies, dates,
/// names, notes) zstd had far less to compress. A column of ids or timestamps never
/// repeats, and a dictionary would cost a hash per value before Parquet's writer gave
/// up on it. Decided once per file from its first rows: a column that changes
/// character later still loads, the writer falling back to plain pages past a 1 MiB
/// dictionary.
fn dictionary_columns(batch: &ArrowBatch) -> Vec<bool> {
    let rows = batch.num_rows().min(DICTIONARY_SAMPLE);
    batch
        .columns()
        .iter()
        .map(|column| {
            let Some(strings) = column.as_any().downcast_ref::<StringArray>() else {
                return false;
            };
            let values = strings.iter().take(rows).flatten();
            let limit = rows / DICTIONARY_REPEATS;
            let mut seen = foldhash::HashSet::with_capacity_and_hasher(
                limit + 1,
                foldhash::fast::RandomState::default(),
            );
            let mut sampled = 0;
            for value in values {
                sampled += 1;
                if seen.insert(value) && seen.len() > limit {
                    return false;
                }
            }
            sampled > 0 && seen.len() * DICTIONARY_REPEATS <= sampled
        })
        .collect()
}

enum Builder {
    /// Strings as bytes: validated as UTF-8 once per Arrow batch (`finish`), not value by
    /// value (a tenth of the Parquet sink's time went to validating short strings).
    Str(Strings),
    Int(Int64Builder),
    Float(Float64Builder),
    Decimal(Decimal128Builder, u8),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    Ts(TimestampMicrosecondBuilder),
}

fn data_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::String | ColumnType::Json => DataType::Utf8,
        ColumnType::Int => DataType::Int64,
        ColumnType::Float => DataType::Float64,
        ColumnType::Decimal { precision, scale } => DataType::Decimal128(precision, scale as i8),
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
    }
}

/// Values a builder has room for before it first grows: small, since a load over many
/// partitions keeps one builder per column per partition.
const BUILDER_START: usize = 64;

fn builder(ty: ColumnType) -> Result<Builder> {
    let n = BUILDER_START;
    Ok(match ty {
        ColumnType::String | ColumnType::Json => Builder::Str(Strings::with_capacity(n, n * 16)),
        ColumnType::Int => Builder::Int(Int64Builder::with_capacity(n)),
        ColumnType::Float => Builder::Float(Float64Builder::with_capacity(n)),
        ColumnType::Decimal { precision, scale } => Builder::Decimal(
            Decimal128Builder::with_capacity(n).with_precision_and_scale(precision, scale as i8)?,
            scale,
        ),
        ColumnType::Bool => Builder::Bool(BooleanBuilder::with_capacity(n)),
        ColumnType::Date => Builder::Date(Date32Builder::with_capacity(n)),
        ColumnType::Timestamp => {
            Builder::Ts(TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC"))
        }
    })
}

/// Days from 1970-01-01 to `date`.
fn epoch_days(date: jiff::civil::Date) -> Result<i32> {
    let days = date.since(jiff::civil::date(1970, 1, 1))?.get_days();
    Ok(days)
}

impl Builder {
    /// Appends one value in its canonical text (as the cast stage writes it).
    fn append(&mut self, value: Option<&[u8]>) -> Result<()> {
        let Some(bytes) = value else {
            match self {
                Builder::Str(_) => bail!("strings are appended by column"),
                Builder::Int(b) => b.append_null(),
                Builder::Float(b) => b.append_null(),
                Builder::Decimal(b, _) => b.append_null(),
                Builder::Bool(b) => b.append_null(),
                Builder::Date(b) => b.append_null(),
                Builder::Ts(b) => b.append_null(),
            }
            return Ok(());
        };
        let text = || std::str::from_utf8(bytes).context("a field is not UTF-8");
        let bad = |what: &str| {
            let shown = String::from_utf8_lossy(bytes);
            format!("{shown:?} is not a {what} (cast the column first)")
        };
        match self {
            Builder::Str(_) => bail!("strings are appended by column"),
            Builder::Int(b) => b.append_value(text()?.parse().with_context(|| bad("int"))?),
            Builder::Float(b) => b.append_value(text()?.parse().with_context(|| bad("float"))?),
            Builder::Decimal(b, scale) => {
                let mut d =
                    rust_decimal::Decimal::from_str(text()?).with_context(|| bad("decimal"))?;
                d.rescale((*scale).into());
                b.append_value(d.mantissa());
            }
            Builder::Bool(b) => b.append_value(bytes == b"true"),
            Builder::Date(b) => {
                let date = match canonical::date(bytes) {
                    Some(date) => date,
                    None => text()?.parse().with_context(|| bad("date"))?,
                };
                b.append_value(epoch_days(date)?)
            }
            Builder::Ts(b) => {
                let ts: jiff::Timestamp = match canonical::timestamp(bytes) {
                    Some(ts) => ts,
                    None => text()?.parse().with_context(|| bad("timestamp"))?,
                };
                b.append_value(ts.as_microsecond());
            }
        }
        Ok(())
    }

    /// Appends rows `rows` of `column`.
    fn append_rows(&mut self, column: ColumnView<'_>, rows: &[usize]) -> Result<()> {
        // Strings, the common case, without matching on the builder per value.
        if let Builder::Str(b) = self {
            return b.append_rows(column, rows);
        }
        rows.iter()
            .try_for_each(|&row| self.append(column.get(row)))
    }

    /// The column built, and a string column's bounds (see `Strings`).
    fn finish(&mut self) -> Result<(ArrayRef, Option<MinMax>)> {
        Ok(match self {
            Builder::Str(b) => {
                let (strings, bounds) = b.finish()?;
                (Arc::new(strings), Some(bounds))
            }
            Builder::Int(b) => (Arc::new(b.finish()), None),
            Builder::Float(b) => (Arc::new(b.finish()), None),
            Builder::Decimal(b, _) => (Arc::new(b.finish()), None),
            Builder::Bool(b) => (Arc::new(b.finish()), None),
            Builder::Date(b) => (Arc::new(b.finish()), None),
            Builder::Ts(b) => (Arc::new(b.finish()), None),
        })
    }

    /// About the memory the values take.
    fn bytes(&self) -> usize {
        match self {
            Builder::Str(b) => b.bytes(),
            Builder::Int(b) => b.len() * 8,
            Builder::Float(b) => b.len() * 8,
            Builder::Decimal(b, _) => b.len() * 16,
            Builder::Bool(b) => b.len().div_ceil(8),
            Builder::Date(b) => b.len() * 4,
            Builder::Ts(b) => b.len() * 8,
        }
    }

    fn len(&self) -> usize {
        match self {
            Builder::Str(b) => b.len(),
            Builder::Int(b) => b.len(),
            Builder::Float(b) => b.len(),
            Builder::Decimal(b, _) => b.len(),
            Builder::Bool(b) => b.len(),
            Builder::Date(b) => b.len(),
            Builder::Ts(b) => b.len(),
        }
    }
}

/// One Parquet part file being written.
///
/// The sink thread only copies a part's rows into one buffer (`part_rows.rs`); every
/// `ARROW_BATCH_ROWS` rows they go to one of the run's encoder threads (the `Pool`),
/// which builds the Arrow columns and owns the part's Parquet writer (typing, encoding
/// and compression, the expensive half), so that work runs beside parsing and
/// partitioning instead of after them. A part always goes to the same encoder, so its
/// batches are written in order.
///
/// The file itself is created only when the first full batch (or the checkpoint's end)
/// needs it: a checkpoint over 10,000 partitions with a few rows each holds their rows
/// in memory, not in 10,000 open files, and still ends with one file per partition.
/// Files open at once are at most the checkpoint's rows / `ARROW_BATCH_ROWS`.
pub(crate) struct ParquetPart {
    schema: Arc<ArrowSchema>,
    types: Arc<[ColumnType]>,
    held: Held,
    path: PathBuf,
    props: WriterProperties,
    /// The encoder that owns this part's writer, once the file exists.
    encoder: Option<(u64, SyncSender<Job>)>,
    written: Arc<AtomicU64>,
    /// `--target-file-size`, if any.
    target_size: Option<u64>,
    /// Set once the part was handed its last batch.
    finished: bool,
    /// Rows of the part's first Arrow batch (see [`first_batch_rows`]).
    first_batch: usize,
    /// What `held` takes, counted against the memory for unwritten output.
    account: pressure::Account,
}

/// Bytes of rows a part holds at most before it hands them to its encoder, however
/// few: wide rows make smaller batches.
const PART_ROWS_BYTES: usize = 16 << 20;

/// Parts of a checkpoint (per sink) that build their Arrow columns on the sink thread;
/// the checkpoint's later parts copy their rows for the encoders to build them.
///
/// A part takes a batch's rows in one run (`route.rs`). Over a few partitions those
/// runs are long, and the builders stay hot in the cache while they take them: built on
/// the sink thread, the values are copied once. Over thousands a run is a row or two,
/// and the sink thread spent its time on cache misses into 40,000 builders and on their
/// growth (see `part_rows.rs`). 2,000,000 orders, one checkpoint, two cores: 4,000
/// partitions took 5.2 s with every part building its columns and 4.1 s with none; 40
/// partitions took 1.20 s against 1.37 s the other way round.
const BUILDING_PARTS: usize = 256;

/// What a part holds before its encoder takes it.
enum Held {
    /// Values already in the Arrow builders (the checkpoint's first parts).
    Builders(Vec<Builder>),
    /// Rows copied as they are.
    Rows(PartRows),
}

impl Held {
    fn len(&self) -> usize {
        match self {
            Held::Builders(builders) => builders.first().map_or(0, Builder::len),
            Held::Rows(rows) => rows.len(),
        }
    }

    /// About the memory the rows take.
    fn bytes(&self) -> usize {
        match self {
            Held::Builders(builders) => builders.iter().map(Builder::bytes).sum(),
            Held::Rows(rows) => rows.bytes(),
        }
    }

    /// Whether the rows take [`PART_ROWS_BYTES`] or more.
    fn is_large(&self) -> bool {
        match self {
            Held::Builders(_) => false,
            Held::Rows(rows) => rows.bytes() >= PART_ROWS_BYTES,
        }
    }

    /// Appends rows `rows` of `batch`, columns `cols`.
    fn append(&mut self, batch: &RecordBatch, cols: &[usize], rows: &[usize]) -> Result<()> {
        match self {
            Held::Builders(builders) => builders
                .iter_mut()
                .zip(cols)
                .try_for_each(|(builder, &col)| builder.append_rows(batch.column(col), rows)),
            Held::Rows(held) => held.push_rows(batch, cols, rows),
        }
    }
}

/// A part on its encoder thread: its file and columns, then its writer once the first
/// rows decided the columns' encodings.
struct Writing {
    file: Writer,
    schema: Arc<ArrowSchema>,
    types: Arc<[ColumnType]>,
    /// Bytes written so far, shared with the sink.
    written: Arc<AtomicU64>,
    /// Where row groups end early (`--target-file-size`).
    row_group_bytes: Option<u64>,
    /// What the open row group takes, counted against the memory for unwritten output.
    account: pressure::Account,
}

enum Writer {
    /// Created, nothing written yet.
    Created(Box<(CountingFile, WriterProperties)>),
    Open(Box<ParquetFile<CountingFile>>),
    /// While the writer is being made (or after it failed to be).
    Taken,
}

impl Writing {
    /// The writer, made on the first batch (`None`: a part without rows), whose values
    /// decide which columns get a dictionary.
    fn writer(&mut self, first: Option<&ArrowBatch>) -> Result<&mut ParquetFile<CountingFile>> {
        if let Writer::Created(..) = self.file {
            let Writer::Created(created) = std::mem::replace(&mut self.file, Writer::Taken) else {
                bail!("a Parquet part's writer changed under it");
            };
            let (file, props) = *created;
            let mut props = props.into_builder();
            if let Some(first) = first {
                let dictionary = dictionary_columns(first);
                for (field, _) in self.schema.fields().iter().zip(dictionary).filter(|d| d.1) {
                    props = props.set_column_dictionary_enabled(
                        ColumnPath::from(field.name().as_str()),
                        true,
                    );
                }
            }
            let writer =
                ParquetFile::try_new(file, self.schema.clone(), props.build(), ROW_GROUP_ROWS)?;
            self.file = Writer::Open(Box::new(writer));
        }
        match &mut self.file {
            Writer::Open(writer) => Ok(writer),
            _ => bail!("a Parquet part's writer was not made"),
        }
    }

    /// Writes the footer (making the writer first if no rows came) and closes the file.
    fn close(mut self) -> Result<()> {
        self.writer(None)?;
        match self.file {
            Writer::Open(writer) => writer.into_inner().map(|out| drop(out.into_file())),
            _ => bail!("a Parquet part's writer was not made"),
        }
    }
}

/// The Arrow builders of one encoder thread, reused from part to part while the
/// columns' types stay the same (every part of a load has the same).
#[derive(Default)]
struct Builders {
    types: Option<Arc<[ColumnType]>>,
    builders: Vec<Builder>,
    /// `0..n`: every row of a part's rows.
    every: Vec<usize>,
}

impl Builders {
    /// An Arrow batch of `rows`, with its string columns' bounds.
    fn build(
        &mut self,
        part: &Writing,
        rows: &PartRows,
    ) -> Result<(ArrowBatch, Vec<Option<MinMax>>)> {
        if !self
            .types
            .as_ref()
            .is_some_and(|t| Arc::ptr_eq(t, &part.types))
        {
            self.builders = part
                .types
                .iter()
                .map(|ty| builder(*ty))
                .collect::<Result<_>>()?;
            self.types = Some(part.types.clone());
        }
        let n = rows.len();
        if self.every.len() < n {
            self.every.extend(self.every.len()..n);
        }
        let every = &self.every[..n];
        let built = (|| {
            for (col, builder) in self.builders.iter_mut().enumerate() {
                builder.append_rows(rows.column(col), every)?;
            }
            let (columns, bounds): (Vec<ArrayRef>, Vec<Option<MinMax>>) = self
                .builders
                .iter_mut()
                .map(Builder::finish)
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .unzip();
            Ok((ArrowBatch::try_new(part.schema.clone(), columns)?, bounds))
        })();
        if built.is_err() {
            // Builders left halfway are not used again.
            self.types = None;
        }
        built
    }
}

/// Work for an encoder thread.
enum Job {
    Open {
        id: u64,
        part: Box<Writing>,
    },
    /// Rows to write.
    Write {
        id: u64,
        rows: Handed,
        /// Their bytes, counted among the queued ones until the job is dropped.
        queued: Queued,
        /// Told once the rows are written (see `ParquetPart::flush`).
        done: Option<SyncSender<()>>,
    },
    /// Write the footer, close the file, and say so (or send the part's first error).
    Finish {
        id: u64,
        done: SyncSender<Result<()>>,
    },
    /// The part was abandoned (an aborted checkpoint): drop its writer.
    Drop {
        id: u64,
    },
}

/// A part's rows as the sink hands them over.
enum Handed {
    /// Columns built on the sink thread, with their string columns' bounds.
    Built(ArrowBatch, Vec<Option<MinMax>>),
    /// Rows for the encoder to build.
    Copied(PartRows),
}

/// Jobs waiting per encoder thread. A checkpoint's end hands each part its last batch
/// and its footer at once (80 jobs on the benchmark's 40 partitions): with 8 a job, the
/// sink waited on one encoder's full queue while the other had nothing to do, and the
/// parser behind it stopped too. With 64 (and staggered first batches, see
/// [`first_batch_rows`]) the 1 GB Parquet load left a core idle 0.25 s instead of 0.52 s
/// (idle time from `/proc/stat`, median of 4 rounds), 2.38 s instead of 2.56 s, at the
/// same peak RSS there. What the queues hold in bytes is bounded by [`QUEUED_BYTES`].
const ENCODER_QUEUE: usize = 64;

/// Bytes of rows queued for the encoders (all parts together) beyond which
/// the sink waits before it hands over another. The queues' depth bounds the jobs, this
/// their memory, however wide the rows: one partition of 1 KiB rows filled 64 jobs of
/// 8 MiB (peak RSS 399-445 MiB against 311 MiB with queues of 8; 262-273 MiB with this
/// bound).
const QUEUED_BYTES: usize = 64 << 20;

/// Bytes of the rows handed to the encoders and not yet written, with the
/// sink's wait for them to fall.
static QUEUED: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// A batch's bytes among the queued ones, from its hand-over until its job is dropped
/// (written, failed, or never run: a stopped encoder drops its jobs, so no wait here
/// outlives the encoders).
struct Queued(usize);

impl Queued {
    /// Counts `bytes` in, first waiting while more than [`QUEUED_BYTES`] are queued.
    fn new(bytes: usize) -> Queued {
        let (count, fallen) = &QUEUED;
        let mut queued = count.lock().unwrap_or_else(PoisonError::into_inner);
        while *queued > QUEUED_BYTES {
            // Re-checked at least every 100 ms, whatever wakes it.
            queued = fallen
                .wait_timeout(queued, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *queued += bytes;
        Queued(bytes)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        let (count, fallen) = &QUEUED;
        let mut queued = count.lock().unwrap_or_else(PoisonError::into_inner);
        *queued = queued.saturating_sub(self.0);
        fallen.notify_all();
    }
}

/// How many sizes a part's first Arrow batch comes in.
const STAGGER: usize = 8;
const _: () = assert!(ARROW_BATCH_ROWS / STAGGER >= DICTIONARY_SAMPLE);

/// Rows of the first Arrow batch of the checkpoint's part number `ordinal`: one of
/// [`STAGGER`] steps up to `ARROW_BATCH_ROWS`, by its number.
///
/// Rows spread evenly over partitions fill every part's builders at once: all forty
/// of the benchmark's parts handed the encoders a batch in the same instant, and the
/// encoders idled between those bursts while the sink and the parser waited out each
/// one. Parts cut first at different sizes stay out of step for the rest of the
/// checkpoint. By number, not at random, so that a part's batches (and with
/// `--target-file-size`, where it is cut) depend on the input alone; at least
/// `DICTIONARY_SAMPLE` rows, so the first batch still decides the dictionaries as before.
fn first_batch_rows(ordinal: usize) -> usize {
    ARROW_BATCH_ROWS / STAGGER * (1 + ordinal % STAGGER)
}

/// The encoder threads, one per core, started on first use and kept for the process.
///
/// A thread per part (the first design) started 40 threads per checkpoint on the
/// benchmark; each allocated its buffers afresh in a new malloc arena, and page faults
/// and TLB shootdowns took a fifth of the encoders' time. Long-lived threads reuse
/// their memory.
struct Pool {
    workers: Vec<SyncSender<Job>>,
    next: AtomicU64,
}

fn pool() -> Result<&'static Pool> {
    static POOL: OnceLock<std::result::Result<Pool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = sync_channel::<Job>(ENCODER_QUEUE);
            std::thread::Builder::new()
                .name(format!("ingest-parquet-{i}"))
                .spawn(move || encode(rx))
                .map_err(|e| format!("cannot start a Parquet encoder thread: {e}"))?;
            workers.push(tx);
        }
        Ok(Pool {
            workers,
            next: AtomicU64::new(0),
        })
    })
    .as_ref()
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// An encoder thread: writes the rows of the parts it was given, in order.
fn encode(jobs: std::sync::mpsc::Receiver<Job>) {
    let mut parts: HashMap<u64, Writing> = HashMap::new();
    let mut failed: HashMap<u64, anyhow::Error> = HashMap::new();
    let mut builders = Builders::default();
    for job in jobs {
        match job {
            Job::Open { id, part } => {
                parts.insert(id, *part);
            }
            Job::Write {
                id,
                rows,
                queued,
                done,
            } => {
                // Dropped at the end of this arm, written or not: `done` is the signal,
                // and the rows leave the queued bytes.
                let (_done, _queued) = (done, queued);
                let Some(part) = parts.get_mut(&id) else {
                    continue; // the part already failed
                };
                let written = match rows {
                    Handed::Built(batch, bounds) => write_batch(part, &batch, &bounds),
                    Handed::Copied(rows) => builders
                        .build(part, &rows)
                        .and_then(|(batch, bounds)| write_batch(part, &batch, &bounds)),
                };
                if let Err(e) = written {
                    parts.remove(&id);
                    failed.insert(id, e);
                }
            }
            Job::Finish { id, done } => {
                let result = match (parts.remove(&id), failed.remove(&id)) {
                    (_, Some(e)) => Err(e),
                    // The file is closed here (the coordinator reopens it to fsync it),
                    // so finished parts hold no descriptor while a checkpoint completes.
                    (Some(part), None) => part.close(),
                    (None, None) => Err(anyhow::anyhow!("unknown Parquet part {id}")),
                };
                let _ = done.send(result);
            }
            Job::Drop { id } => {
                parts.remove(&id);
                failed.remove(&id);
            }
        }
    }
}

/// Writes `batch` to `part`'s file.
fn write_batch(part: &mut Writing, batch: &ArrowBatch, bounds: &[Option<MinMax>]) -> Result<()> {
    let row_group_bytes = part.row_group_bytes;
    let written = part.written.clone();
    let writer = part.writer(Some(batch))?;
    writer.write(batch, bounds)?;
    // With a target file size, row groups end at a quarter of it (counted before
    // compression), so that what reached the file tracks the part's size closely enough
    // to cut it there.
    if let Some(limit) = row_group_bytes {
        if writer.in_progress_size() as u64 >= limit {
            writer.flush()?;
        }
    }
    written.store(writer.inner().written(), Ordering::Relaxed);
    let open = writer.in_progress_size();
    part.account.set(open);
    Ok(())
}

impl ParquetPart {
    /// A Parquet part with the layout's columns, to be written at `path` (created when
    /// its first batch is ready); `ordinal` is its place among its checkpoint's parts.
    pub(crate) fn new(
        path: PathBuf,
        layout: &FileColumns,
        compression: Compression,
        target_size: Option<u64>,
        ordinal: usize,
    ) -> Result<ParquetPart> {
        let fields: Vec<Field> = layout
            .header
            .iter()
            .zip(&layout.types)
            .enumerate()
            .map(|(i, (name, ty))| {
                let field = Field::new(name, data_type(*ty), true);
                match layout.field_ids.get(i).copied().flatten() {
                    Some(id) => field.with_metadata(
                        [(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())].into(),
                    ),
                    None => field,
                }
            })
            .collect();
        let schema = Arc::new(ArrowSchema::new(fields));
        let codec = match compression {
            Compression::None => ParquetCompression::UNCOMPRESSED,
            Compression::Snappy => ParquetCompression::SNAPPY,
            Compression::Zstd => ParquetCompression::ZSTD(ZstdLevel::default()),
            Compression::Gzip => {
                bail!("Parquet files are compressed with zstd, snappy or none, not gzip")
            }
        };
        let props = WriterProperties::builder()
            .set_compression(codec)
            .set_dictionary_enabled(false);
        let props = ParquetFile::<CountingFile>::props(&schema, props).build();
        Ok(ParquetPart {
            schema,
            types: layout.types.clone().into(),
            held: if ordinal < BUILDING_PARTS {
                Held::Builders(
                    layout
                        .types
                        .iter()
                        .map(|ty| builder(*ty))
                        .collect::<Result<_>>()?,
                )
            } else {
                Held::Rows(PartRows::new(layout.cols.len()))
            },
            path,
            props,
            encoder: None,
            written: Arc::new(AtomicU64::new(0)),
            target_size,
            finished: false,
            first_batch: first_batch_rows(ordinal),
            account: pressure::Account::default(),
        })
    }

    /// The encoder of this part, creating the file and handing it over first (the
    /// encoder makes the writer when the first rows come).
    fn encoder(&mut self) -> Result<(u64, &SyncSender<Job>)> {
        if self.encoder.is_none() {
            let file = fsutil::create_new(&self.path)?;
            let pool = pool()?;
            let id = pool.next.fetch_add(1, Ordering::Relaxed);
            let encoder = pool.workers[id as usize % pool.workers.len()].clone();
            let part = Writing {
                file: Writer::Created(Box::new((CountingFile::new(file), self.props.clone()))),
                schema: self.schema.clone(),
                types: self.types.clone(),
                written: self.written.clone(),
                row_group_bytes: self.target_size.map(|t| (t / 4).max(1)),
                account: pressure::Account::default(),
            };
            encoder
                .send(Job::Open {
                    id,
                    part: Box::new(part),
                })
                .map_err(|_| anyhow::anyhow!("the Parquet encoder stopped"))?;
            self.encoder = Some((id, encoder));
        }
        match &self.encoder {
            Some((id, encoder)) => Ok((*id, encoder)),
            None => bail!("the Parquet part has no encoder"),
        }
    }

    /// The first of the sink's two cache hints for rows on their way here (see
    /// `Encoder::hint_state`): where the rows the part holds are described.
    #[inline(always)]
    pub(crate) fn hint_state(&self) {
        cache_hint::to_l1(&self.held);
    }

    /// The second: where the rows' values and their ends go, if the part copies rows
    /// as they are (its first parts go straight into the Arrow builders instead).
    #[inline(always)]
    pub(crate) fn hint_tail(&self) {
        if let Held::Rows(rows) = &self.held {
            rows.hint_tail();
        }
    }

    /// Takes rows `rows` of `batch`, handing them to the encoder whenever the part
    /// holds `ARROW_BATCH_ROWS` rows (or [`PART_ROWS_BYTES`]).
    pub(crate) fn write_rows(
        &mut self,
        layout: &FileColumns,
        batch: &RecordBatch,
        rows: &[usize],
    ) -> Result<()> {
        let mut rows = rows;
        while !rows.is_empty() {
            let held = self.held.len();
            let limit = match self.encoder {
                None => self.first_batch,
                Some(_) => ARROW_BATCH_ROWS,
            };
            let (now, later) = rows.split_at(rows.len().min(limit.saturating_sub(held)));
            if now.is_empty() {
                // Rows at the limit were handed over below: no progress here would be a
                // loop without end, so it is an error instead.
                bail!("a Parquet part held {held} rows past its {limit}");
            }
            self.held.append(batch, &layout.cols, now)?;
            if held + now.len() >= limit || self.held.is_large() {
                self.flush()?;
            }
            rows = later;
        }
        self.account.set(self.held.bytes());
        Ok(())
    }

    /// Hands what the part holds to the encoder.
    fn flush(&mut self) -> Result<()> {
        if self.held.len() == 0 {
            return Ok(());
        }
        // With a target file size the sink cuts parts by what reached the file, so it
        // waits for each batch to be written: where files are cut then depends on the
        // data alone, not on how far the encoder thread happened to lag behind.
        let (done, written) = match self.target_size {
            Some(_) => {
                let (done, written) = sync_channel(1);
                (Some(done), Some(written))
            }
            None => (None, None),
        };
        let id = self.encoder()?.0;
        let (rows, bytes) = match &mut self.held {
            Held::Builders(builders) => {
                let (columns, bounds): (Vec<ArrayRef>, Vec<Option<MinMax>>) = builders
                    .iter_mut()
                    .map(Builder::finish)
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .unzip();
                let batch = ArrowBatch::try_new(self.schema.clone(), columns)?;
                let bytes = batch.get_array_memory_size();
                (Handed::Built(batch, bounds), bytes)
            }
            Held::Rows(rows) => {
                let rows = std::mem::replace(rows, PartRows::new(self.types.len()));
                let bytes = rows.bytes();
                (Handed::Copied(rows), bytes)
            }
        };
        let job = Job::Write {
            id,
            rows,
            queued: Queued::new(bytes),
            done,
        };
        self.encoder()?
            .1
            .send(job)
            .map_err(|_| anyhow::anyhow!("the Parquet encoder stopped"))?;
        if let Some(written) = written {
            // Disconnected without a message: the batch's job ended (written or failed;
            // a failure is reported at finish).
            let _ = written.recv();
        }
        Ok(())
    }

    /// Bytes that reached the file (as of the encoder's last batch).
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Hands the last rows to the encoder, which writes the footer while the sink goes
    /// on with the next checkpoint; [`Tail::wait`] collects the complete file.
    pub(crate) fn finish(mut self) -> Result<Tail> {
        self.flush()?;
        let (done, file) = sync_channel(1);
        self.finished = true;
        // A part without a row (never the case for a partition's part) is still a file.
        let (id, encoder) = self.encoder()?;
        encoder
            .send(Job::Finish { id, done })
            .map_err(|_| anyhow::anyhow!("the Parquet encoder stopped"))?;
        Ok(Tail { file })
    }
}

impl Drop for ParquetPart {
    /// A part dropped unfinished (an aborted checkpoint) frees its writer.
    fn drop(&mut self) {
        if let (false, Some((id, encoder))) = (self.finished, &self.encoder) {
            let _ = encoder.send(Job::Drop { id: *id });
        }
    }
}

/// A Parquet part whose encoder is writing its last row group and footer.
#[derive(Debug)]
pub(crate) struct Tail {
    file: std::sync::mpsc::Receiver<Result<()>>,
}

impl Tail {
    /// Waits for the encoder; the file is then complete and closed.
    pub(crate) fn wait(self) -> Result<()> {
        self.file
            .recv()
            .map_err(|_| anyhow::anyhow!("the Parquet encoder stopped"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    fn batch(columns: Vec<ArrayRef>) -> ArrowBatch {
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
            .collect();
        ArrowBatch::try_new(Arc::new(ArrowSchema::new(fields)), columns).expect("a batch")
    }

    fn strings(values: impl IntoIterator<Item = Option<String>>) -> ArrayRef {
        Arc::new(StringArray::from_iter(values))
    }

    /// The Parquet file at `path` read back, as Arrow batches.
    fn file_batches(path: &std::path::Path) -> Vec<ArrowBatch> {
        let file = std::fs::File::open(path).expect("open");
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .expect("a Parquet file")
            .build()
            .expect("a reader")
            .collect::<std::result::Result<_, _>>()
            .expect("batches")
    }

    #[test]
    fn parts_that_copy_rows_write_what_parts_that_build_columns_write() {
        // One part built on the sink thread (a checkpoint's first), one whose rows the
        // encoder builds (past `BUILDING_PARTS`): the same rows make the same file
        // contents, typed values and nulls alike, over several Arrow batches.
        let types = [
            ColumnType::Int,
            ColumnType::String,
            ColumnType::Decimal {
                precision: 12,
                scale: 2,
            },
            ColumnType::Timestamp,
            ColumnType::Date,
            ColumnType::Bool,
            ColumnType::Float,
        ];
        let names: Vec<String> = (0..types.len()).map(|i| format!("c{i}")).collect();
        let layout = FileColumns::new((0..types.len()).collect(), names, &types);
        let mut batch = RecordBatch::new(types.len());
        let rows = ARROW_BATCH_ROWS + 100;
        for i in 0..rows {
            let cells = [
                Some(i.to_string()),
                (i % 7 != 0).then(|| format!("name {}", i % 13)),
                Some(format!("{}.{:02}", i, i % 100)),
                (i % 5 != 0).then(|| "2026-11-28T10:00:00Z".to_string()),
                Some("2026-11-28".to_string()),
                (i % 3 != 0).then(|| (i % 2 == 0).to_string()),
                Some(format!("{i}.5")),
            ];
            for cell in &cells {
                batch.push_cell(cell.as_deref().map(str::as_bytes));
            }
            batch.end_row(0, i as u64 + 1);
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut written = Vec::new();
        for ordinal in [0, BUILDING_PARTS] {
            let path = dir.path().join(format!("part-{ordinal}.parquet"));
            let mut part =
                ParquetPart::new(path.clone(), &layout, Compression::Zstd, None, ordinal)
                    .expect("a part");
            assert_eq!(
                matches!(part.held, Held::Rows(_)),
                ordinal == BUILDING_PARTS
            );
            // In uneven runs, as a checkpoint's batches come.
            let all: Vec<usize> = (0..rows).collect();
            for run in all.chunks(777) {
                part.write_rows(&layout, &batch, run).expect("rows written");
            }
            part.finish()
                .expect("finished")
                .wait()
                .expect("file complete");
            written.push(file_batches(&path));
        }
        let read: usize = written[0].iter().map(ArrowBatch::num_rows).sum();
        assert_eq!(read, rows);
        let first = &written[0][0];
        let ids = first.column(0).as_any().downcast_ref::<Int64Array>();
        assert_eq!(ids.map(|a| a.value(7)), Some(7));
        assert!(first.column(1).is_null(7) && first.column(3).is_null(5));
        let cents = first
            .column(2)
            .as_any()
            .downcast_ref::<arrow_array::Decimal128Array>();
        assert_eq!(cents.map(|a| a.value(7)), Some(707));
        assert_eq!(written[0], written[1]);
    }

    #[test]
    fn a_value_the_encoder_cannot_type_fails_the_part_at_its_finish() {
        let layout = FileColumns::new(vec![0], vec!["n".into()], &[ColumnType::Int]);
        let mut batch = RecordBatch::new(1);
        batch.push_cell(Some(b"12x"));
        batch.end_row(0, 1);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("part.parquet");
        let mut part = ParquetPart::new(path, &layout, Compression::Zstd, None, BUILDING_PARTS)
            .expect("a part");
        part.write_rows(&layout, &batch, &[0]).expect("rows taken");
        let failed = part.finish().and_then(Tail::wait);
        let message = format!("{:#}", failed.expect_err("a bad int fails the part"));
        assert!(message.contains("\"12x\" is not a int"), "{message}");
    }

    #[test]
    fn a_hand_over_waits_while_too_many_bytes_are_queued() {
        // Other tests' batches are a few KiB: only this one crosses the bound.
        let held = Queued::new(QUEUED_BYTES + 1);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let next = Queued::new(1);
            let _ = tx.send(());
            drop(next);
        });
        let early = rx.recv_timeout(Duration::from_millis(300));
        assert!(early.is_err(), "handed over while over the bound");
        drop(held);
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "never handed over"
        );
        assert!(waiter.join().is_ok());
    }

    #[test]
    fn first_batches_come_in_every_size_up_to_a_full_one() {
        let sizes: Vec<usize> = (0..2 * STAGGER).map(first_batch_rows).collect();
        let (first, second) = sizes.split_at(STAGGER);
        assert_eq!(first, second, "by number alone");
        let mut distinct = first.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), STAGGER);
        assert_eq!(distinct.last(), Some(&ARROW_BATCH_ROWS));
        assert!(distinct[0] >= DICTIONARY_SAMPLE);
    }

    #[test]
    fn columns_whose_values_repeat_get_a_dictionary() {
        let rows = 2000;
        let status = |i: usize| Some(["paid", "shipped", "refunded"][i % 3].to_string());
        let batch = batch(vec![
            strings((0..rows).map(status)),
            strings((0..rows).map(|i| Some(format!("user{i}@example.com")))),
            // One distinct value per 4 in the sample (1024 values): the threshold.
            strings((0..rows).map(|i| Some((i / 4).to_string()))),
            // One more distinct value than that.
            strings((0..rows).map(|i| Some((i.max(1) / 4 + usize::from(i == 1023)).to_string()))),
            strings((0..rows).map(|i| (i % 100 != 0).then(|| "x".to_string()))),
            strings((0..rows).map(|_| None)),
            Arc::new(Int64Array::from_iter_values(
                (0..rows as i64).map(|i| i % 2),
            )),
            // Half null: 200 distinct among 512 values is under a quarter of the sample's
            // rows but over a quarter of its values.
            strings((0..rows).map(|i| (i % 2 == 0).then(|| (i / 2 % 200).to_string()))),
            // Half null, 128 distinct among 512 values: a quarter of the values.
            strings((0..rows).map(|i| (i % 2 == 0).then(|| (i / 2 % 128).to_string()))),
        ]);
        assert_eq!(
            dictionary_columns(&batch),
            [true, false, true, false, true, false, false, false, true]
        );
    }

    #[test]
    fn a_small_first_batch_decides_by_its_own_rows() {
        let few = batch(vec![
            strings(["a", "a", "a", "b"].map(|v| Some(v.to_string()))),
            strings(["a", "b", "c", "d"].map(|v| Some(v.to_string()))),
        ]);
        assert_eq!(dictionary_columns(&few), [false, false]);
        let repeated = batch(vec![strings(
            ["a", "a", "a", "a", "a", "a", "a", "b"].map(|v| Some(v.to_string())),
        )]);
        assert_eq!(dictionary_columns(&repeated), [true]);
    }
}
