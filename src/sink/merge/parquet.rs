//! Merging Parquet files: their record batches read and written again into one file with
//! the same schema and compression, row groups of up to [`ROW_GROUP_ROWS`] rows.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::RecordBatch;
use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression as ParquetCompression;
use parquet::file::properties::WriterProperties;

use super::Digest;
use crate::core::sys::fsutil;

/// Rows per row group of a merged file (parquet-rs's default is 1,048,576; this bounds
/// the memory a merge holds to one row group of a wide table).
const ROW_GROUP_ROWS: usize = 262_144;

/// Rows per batch read.
const BATCH_ROWS: usize = 8_192;

/// The schema of a Parquet file, as text: files merge only with files of the same.
pub(super) fn shape(path: &Path) -> Result<String> {
    Ok(format!("{:?}", reader(path)?.schema()))
}

/// [`shape`] of a Parquet file of `size` bytes from its last bytes, `tail`; or how many
/// last bytes its footer needs.
#[cfg(feature = "s3")]
pub(super) fn shape_of_tail(
    tail: &bytes::Bytes,
    size: u64,
) -> Result<std::result::Result<String, usize>> {
    use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
    use parquet::errors::ParquetError;
    use parquet::file::metadata::ParquetMetaDataReader;
    let mut reader = ParquetMetaDataReader::new();
    match reader.try_parse_sized(tail, size) {
        Ok(()) => {}
        Err(ParquetError::NeedMoreData(needed)) => return Ok(Err(needed)),
        Err(e) => return Err(e).context("cannot read its Parquet footer"),
    }
    let metadata = reader.finish().context("cannot read its Parquet footer")?;
    let arrow = ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
        .context("cannot read its Parquet schema")?;
    Ok(Ok(format!("{:?}", arrow.schema())))
}

/// Writes the rows of `inputs` into a new file `out` and fsyncs it; returns the digest
/// of the rows read and the file's size.
pub(super) fn merge(inputs: &[PathBuf], out: &Path) -> Result<(Digest, u64)> {
    let Some(first) = inputs.first() else {
        bail!("nothing to merge into {}", out.display());
    };
    let first = reader(first)?;
    let schema = first.schema().clone();
    let compression = first
        .metadata()
        .row_groups()
        .first()
        .and_then(|g| g.columns().first())
        .map_or(ParquetCompression::UNCOMPRESSED, |c| c.compression());
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build();
    let file = fsutil::create_new(out)?;
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
        .with_context(|| format!("cannot write {}", out.display()))?;
    let mut rows = Rows::new(&schema)?;
    for input in inputs {
        let builder = reader(input)?;
        if builder.schema() != &schema {
            bail!(
                "{} has another schema than the files merged before it",
                input.display()
            );
        }
        let batches = builder
            .with_batch_size(BATCH_ROWS)
            .build()
            .with_context(|| format!("cannot read {}", input.display()))?;
        for batch in batches {
            let batch = batch.with_context(|| format!("cannot read {}", input.display()))?;
            rows.add(&batch)?;
            writer
                .write(&batch)
                .with_context(|| format!("cannot write {}", out.display()))?;
        }
    }
    let file = writer
        .into_inner()
        .with_context(|| format!("cannot write {}", out.display()))?;
    fsutil::sync_file(&file, out)?;
    let size = file
        .metadata()
        .with_context(|| format!("cannot stat {}", out.display()))?
        .len();
    Ok((rows.digest, size))
}

/// The digest of the rows of a Parquet file, read from disk.
pub(super) fn digest(path: &Path) -> Result<Digest> {
    let builder = reader(path)?;
    let mut rows = Rows::new(builder.schema())?;
    let batches = builder
        .with_batch_size(BATCH_ROWS)
        .build()
        .with_context(|| format!("cannot read {}", path.display()))?;
    for batch in batches {
        rows.add(&batch.with_context(|| format!("cannot read {}", path.display()))?)?;
    }
    Ok(rows.digest)
}

fn reader(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("cannot read {} as Parquet", path.display()))
}

/// Rows summed into a digest: each row's values in Arrow's row format, which encodes
/// every type (nulls included) as bytes that two equal rows share.
struct Rows {
    converter: RowConverter,
    digest: Digest,
}

impl Rows {
    fn new(schema: &SchemaRef) -> Result<Rows> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Rows {
            converter: RowConverter::new(fields).context("cannot compare the files' rows")?,
            digest: Digest::default(),
        })
    }

    fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let columns: Vec<Arc<dyn arrow_array::Array>> = batch.columns().to_vec();
        let rows = self
            .converter
            .convert_columns(&columns)
            .context("cannot compare the files' rows")?;
        for row in rows.iter() {
            self.digest.add(row.as_ref());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn write(path: &Path, ids: &[Option<i64>], names: &[Option<&str>]) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_compression(ParquetCompression::SNAPPY)
            .build();
        let mut writer =
            ArrowWriter::try_new(File::create(path).unwrap(), schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }

    #[test]
    fn parquet_files_merge_with_their_rows_nulls_and_compression() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.parquet");
        let b = dir.path().join("b.parquet");
        write(&a, &[Some(1), None], &[Some("x"), Some("")]);
        write(&b, &[Some(3)], &[None]);
        assert_eq!(shape(&a).unwrap(), shape(&b).unwrap());
        let out = dir.path().join("out.parquet");
        let (digest, size) = merge(&[a.clone(), b.clone()], &out).unwrap();
        assert_eq!(digest.rows, 3);
        assert_eq!(size, std::fs::metadata(&out).unwrap().len());
        assert_eq!(super::digest(&out).unwrap(), digest);
        let merged = reader(&out).unwrap();
        assert_eq!(
            merged.metadata().row_group(0).column(0).compression(),
            ParquetCompression::SNAPPY
        );
        // An empty string and a null are other rows.
        let c = dir.path().join("c.parquet");
        write(&c, &[Some(1), None, Some(3)], &[Some("x"), None, None]);
        assert_ne!(super::digest(&c).unwrap(), digest);
    }
}
