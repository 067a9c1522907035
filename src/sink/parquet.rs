//! Parquet part files: typed columns from the schema (strings where nothing was cast),
//! nulls as nulls, statistics on, row groups of at most 64 Ki rows, compressed with
//! zstd (default), snappy or nothing. Dictionary encoding is off: on the benchmark's
//! orders it cost 12% of the load time and zstd made the files smaller without it
//! (182 MB for 1 GB of CSV, against about 223 MB with it).
//!
//! A Parquet file is only readable once its footer is written, so the file is finished
//! at preCommit (`finish`: the part's encoder thread writes the footer while the sink
//! goes on; the coordinator waits for it before the fsync and the journal record); it
//! is never appended to afterwards. When the open-file cap closes a Parquet part, the part is finished and
//! the partition's next rows start a new part file.

use std::fs::File;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder,
    Int64Builder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch as ArrowBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::encode::{Compression, Counted, Layout};
use crate::batch::RecordBatch;
use crate::canonical;
use crate::schema::ColumnType;

/// Rows buffered in the Arrow builders before they go to the Parquet writer.
const ARROW_BATCH_ROWS: usize = 8192;
/// Rows per row group.
const ROW_GROUP_ROWS: usize = 64 * 1024;

enum Builder {
    /// Strings as bytes: validated as UTF-8 once per Arrow batch (`finish`), not value by
    /// value (a tenth of the Parquet sink's time went to validating short strings).
    Str(BinaryBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Decimal(Decimal128Builder, u8),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    Ts(TimestampMicrosecondBuilder),
}

fn data_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::String => DataType::Utf8,
        ColumnType::Int => DataType::Int64,
        ColumnType::Float => DataType::Float64,
        ColumnType::Decimal { precision, scale } => DataType::Decimal128(precision, scale as i8),
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
    }
}

fn builder(ty: ColumnType) -> Result<Builder> {
    Ok(match ty {
        ColumnType::String => Builder::Str(BinaryBuilder::new()),
        ColumnType::Int => Builder::Int(Int64Builder::new()),
        ColumnType::Float => Builder::Float(Float64Builder::new()),
        ColumnType::Decimal { precision, scale } => Builder::Decimal(
            Decimal128Builder::new().with_precision_and_scale(precision, scale as i8)?,
            scale,
        ),
        ColumnType::Bool => Builder::Bool(BooleanBuilder::new()),
        ColumnType::Date => Builder::Date(Date32Builder::new()),
        ColumnType::Timestamp => {
            Builder::Ts(TimestampMicrosecondBuilder::new().with_timezone("UTC"))
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
                Builder::Str(b) => b.append_null(),
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
            Builder::Str(b) => b.append_value(bytes),
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

    fn finish(&mut self) -> Result<ArrayRef> {
        Ok(match self {
            Builder::Str(b) => {
                Arc::new(StringArray::try_from_binary(b.finish()).context("a field is not UTF-8")?)
            }
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Decimal(b, _) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Date(b) => Arc::new(b.finish()),
            Builder::Ts(b) => Arc::new(b.finish()),
        })
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
/// The sink thread only appends values to Arrow builders; full Arrow batches go over a
/// small bounded channel to a thread of the part's own that owns the Parquet writer
/// (dictionary encoding and compression, the expensive half), so encoding runs beside
/// parsing and partitioning instead of after them. Finishing the part joins that thread
/// and gets the complete file back.
pub struct ParquetPart {
    schema: Arc<ArrowSchema>,
    builders: Vec<Builder>,
    batches: Option<SyncSender<ArrowBatch>>,
    encoder: Option<JoinHandle<Result<File>>>,
    written: Arc<AtomicU64>,
}

/// Arrow batches waiting for a part's encoder thread.
const ENCODER_QUEUE: usize = 2;

impl ParquetPart {
    /// Starts a Parquet file with the layout's columns.
    pub fn new(file: File, layout: &Layout, compression: Compression) -> Result<ParquetPart> {
        let fields: Vec<Field> = layout
            .header
            .iter()
            .zip(&layout.types)
            .map(|(name, ty)| Field::new(name, data_type(*ty), true))
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
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_dictionary_enabled(false)
            .build();
        let mut writer = ArrowWriter::try_new(Counted::new(file), schema.clone(), Some(props))?;
        let builders = layout
            .types
            .iter()
            .map(|ty| builder(*ty))
            .collect::<Result<_>>()?;
        let (tx, rx) = sync_channel::<ArrowBatch>(ENCODER_QUEUE);
        let written = Arc::new(AtomicU64::new(0));
        let shared = written.clone();
        let encoder = std::thread::Builder::new()
            .name("ingest-parquet".into())
            .spawn(move || -> Result<File> {
                for batch in rx {
                    writer.write(&batch)?;
                    shared.store(writer.inner().written(), Ordering::Relaxed);
                }
                // The sender is gone: the part is finished. Write the footer.
                Ok(writer.into_inner()?.into_file())
            })
            .context("cannot start a Parquet encoder thread")?;
        Ok(ParquetPart {
            schema,
            builders,
            batches: Some(tx),
            encoder: Some(encoder),
            written,
        })
    }

    /// Appends row `row` of `batch`.
    pub fn write_row(&mut self, layout: &Layout, batch: &RecordBatch, row: usize) -> Result<()> {
        for (builder, &col) in self.builders.iter_mut().zip(&layout.cols) {
            builder.append(batch.cell(row, col))?;
        }
        if self
            .builders
            .first()
            .is_some_and(|b| b.len() >= ARROW_BATCH_ROWS)
        {
            self.flush_builders()?;
        }
        Ok(())
    }

    fn flush_builders(&mut self) -> Result<()> {
        if self.builders.first().is_none_or(|b| b.len() == 0) {
            return Ok(());
        }
        let columns: Vec<ArrayRef> = self
            .builders
            .iter_mut()
            .map(Builder::finish)
            .collect::<Result<_>>()?;
        let batch = ArrowBatch::try_new(self.schema.clone(), columns)?;
        let sent = self.batches.as_ref().map(|tx| tx.send(batch));
        if !matches!(sent, Some(Ok(()))) {
            // The encoder stopped: its own error says why.
            return Err(self
                .join()
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("the Parquet encoder stopped")));
        }
        Ok(())
    }

    fn join(&mut self) -> Result<File> {
        self.batches = None;
        match self.encoder.take() {
            Some(handle) => handle
                .join()
                .map_err(|_| anyhow::anyhow!("internal error: a Parquet encoder panicked"))?,
            None => bail!("the Parquet part was already finished"),
        }
    }

    /// Bytes that reached the file (as of the encoder's last batch).
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Writes the last rows and the footer; the file is then complete.
    pub fn into_file(self) -> Result<File> {
        self.finish()?.wait()
    }

    /// Hands the last rows to the encoder and lets it write the footer on its own
    /// thread: the sink goes on with the next checkpoint while it does.
    pub fn finish(mut self) -> Result<Tail> {
        self.flush_builders()?;
        self.batches = None;
        Ok(Tail {
            encoder: self.encoder.take(),
        })
    }
}

/// A Parquet part whose encoder is writing its last row group and footer.
#[derive(Debug)]
pub struct Tail {
    encoder: Option<JoinHandle<Result<File>>>,
}

impl Tail {
    /// Waits for the encoder; the file it returns is complete.
    pub fn wait(mut self) -> Result<File> {
        match self.encoder.take() {
            Some(handle) => handle
                .join()
                .map_err(|_| anyhow::anyhow!("internal error: a Parquet encoder panicked"))?,
            None => bail!("the Parquet part was already finished"),
        }
    }
}

impl Drop for Tail {
    /// An abandoned tail (an aborted checkpoint) still lets its encoder end.
    fn drop(&mut self) {
        if let Some(handle) = self.encoder.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for ParquetPart {
    /// A part dropped unfinished (an aborted checkpoint) stops its encoder.
    fn drop(&mut self) {
        self.batches = None;
        if let Some(handle) = self.encoder.take() {
            let _ = handle.join();
        }
    }
}
