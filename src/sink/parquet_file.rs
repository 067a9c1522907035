//! One Parquet file written row group by row group: parquet-rs encodes and compresses
//! each column chunk, and the chunk statistics of string columns are ours ([`MinMax`],
//! taken in as the builders gather the values: parquet-rs's two `memcmp` calls per value
//! were 10-11% of the benchmark's Parquet load).
//!
//! This is what `ArrowWriter::write` does (row groups of at most `max_rows` rows, each
//! column's leaves to its `ArrowColumnWriter`, the chunks appended to the file when the
//! row group closes), with one step added at the close: each string column's chunk gets
//! the statistics `MinMax` gathered from the same arrays. The writer properties turn
//! parquet-rs's statistics off for exactly those columns (see [`ParquetFile::props`]),
//! so they carry chunk statistics (minimum, maximum, null count), not per-page ones;
//! every other column keeps parquet-rs's page statistics.

use std::io::Write;

use anyhow::{bail, Context, Result};
use arrow_array::{Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, SchemaRef};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::{EnabledStatistics, WriterPropertiesBuilder};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

use super::string_stats::MinMax;

/// Whether `field`'s statistics are ours rather than parquet-rs's.
fn ours(field: &Field) -> bool {
    field.data_type() == &DataType::Utf8
}

/// A Parquet file being written.
pub(crate) struct ParquetFile<W: Write + Send> {
    file: SerializedFileWriter<W>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// Rows per row group at most.
    max_rows: usize,
    /// The row group being written, if any.
    open: Option<RowGroup>,
    /// Row groups written.
    closed: usize,
}

/// A row group's column writers, its rows so far, and its string columns' bounds (one
/// per column, `None` for the columns parquet-rs keeps statistics of).
struct RowGroup {
    writers: Vec<ArrowColumnWriter>,
    rows: usize,
    bounds: Vec<Option<MinMax>>,
}

impl<W: Write + Send> ParquetFile<W> {
    /// `props` with parquet-rs's statistics off for the columns whose statistics are
    /// ours (the string columns of `schema`).
    pub(crate) fn props(
        schema: &SchemaRef,
        props: WriterPropertiesBuilder,
    ) -> WriterPropertiesBuilder {
        schema
            .fields()
            .iter()
            .filter(|f| ours(f))
            .fold(props, |props, f| {
                props.set_column_statistics_enabled(
                    ColumnPath::from(f.name().as_str()),
                    EnabledStatistics::None,
                )
            })
    }

    /// A file of `schema` written to `out`; `props` must have come through
    /// [`ParquetFile::props`], and set `max_rows` rows per row group.
    pub(crate) fn try_new(
        out: W,
        schema: SchemaRef,
        props: parquet::file::properties::WriterProperties,
        max_rows: usize,
    ) -> Result<ParquetFile<W>> {
        let (file, factory) =
            ArrowWriter::try_new(out, schema.clone(), Some(props))?.into_serialized_writer()?;
        Ok(ParquetFile {
            file,
            factory,
            schema,
            max_rows: max_rows.max(1),
            open: None,
            closed: 0,
        })
    }

    /// Encodes `batch`, closing row groups as they fill. `gathered` holds, per column,
    /// the bounds of a string column's values if the caller took them in already (see
    /// `Strings`); any string column without them, or a batch split between two row
    /// groups, is looked through here instead.
    pub(crate) fn write(&mut self, batch: &RecordBatch, gathered: &[Option<MinMax>]) -> Result<()> {
        let mut at = 0;
        while at < batch.num_rows() {
            let group = match &mut self.open {
                Some(group) => group,
                open => open.insert(RowGroup {
                    writers: self.factory.create_column_writers(self.closed)?,
                    rows: 0,
                    bounds: self
                        .schema
                        .fields()
                        .iter()
                        .map(|f| ours(f).then(MinMax::default))
                        .collect(),
                }),
            };
            let take = (self.max_rows - group.rows).min(batch.num_rows() - at);
            let whole = take == batch.num_rows();
            let rows = batch.slice(at, take);
            group.write(&self.schema, &rows, if whole { gathered } else { &[] })?;
            at += take;
            if group.rows >= self.max_rows {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Bytes the open row group will take, as parquet-rs estimates them.
    pub(crate) fn in_progress_size(&self) -> usize {
        self.open.as_ref().map_or(0, |group| {
            group
                .writers
                .iter()
                .map(ArrowColumnWriter::get_estimated_total_bytes)
                .sum()
        })
    }

    /// Closes the open row group, writing it to the file.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let Some(group) = self.open.take() else {
            return Ok(());
        };
        let mut row_group = self.file.next_row_group()?;
        for (writer, bounds) in group.writers.into_iter().zip(group.bounds) {
            let mut chunk = writer.close()?;
            if let Some(bounds) = bounds {
                let close = chunk.close_mut();
                let metadata = close.metadata.clone().into_builder();
                close.metadata = metadata
                    .set_statistics(bounds.statistics())
                    .build()
                    .context("cannot set a column chunk's statistics")?;
            }
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
        self.closed += 1;
        Ok(())
    }

    /// The output.
    pub(crate) fn inner(&self) -> &W {
        self.file.inner()
    }

    /// Closes the open row group, writes the footer and gives the output back.
    pub(crate) fn into_inner(mut self) -> Result<W> {
        self.flush()?;
        Ok(self.file.into_inner()?)
    }
}

impl RowGroup {
    fn write(
        &mut self,
        schema: &SchemaRef,
        batch: &RecordBatch,
        gathered: &[Option<MinMax>],
    ) -> Result<()> {
        let mut writers = self.writers.iter_mut();
        let columns = schema.fields().iter().zip(batch.columns());
        for (i, ((field, column), bounds)) in columns.zip(&mut self.bounds).enumerate() {
            if let Some(bounds) = bounds {
                match (
                    gathered.get(i),
                    column.as_any().downcast_ref::<StringArray>(),
                ) {
                    (Some(Some(theirs)), _) => bounds.merge(theirs),
                    (_, Some(strings)) => bounds.observe(strings),
                    (_, None) => bail!("column {} is not a string column", field.name()),
                }
            }
            for leaf in compute_leaves(field, column)? {
                match writers.next() {
                    Some(writer) => writer.write(&leaf)?,
                    None => bail!("more Parquet columns than writers"),
                }
            }
        }
        self.rows += batch.num_rows();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array};
    use arrow_schema::{Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::properties::WriterProperties;
    use parquet::file::statistics::Statistics;
    use std::sync::Arc;

    fn batch(schema: &SchemaRef, ids: std::ops::Range<i64>) -> RecordBatch {
        let names: Vec<Option<String>> = ids
            .clone()
            .map(|i| (i % 5 != 0).then(|| format!("n{i:03}")))
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(StringArray::from(names)),
        ];
        RecordBatch::try_new(schema.clone(), columns).expect("a batch")
    }

    /// The statistics of each row group of a file of `schema` written from `batches`
    /// in groups of 4 rows, each batch given with `gathered(batch)`, as (min, max, nulls)
    /// of column 1.
    fn name_statistics(
        batches: &[RecordBatch],
        gathered: impl Fn(&RecordBatch) -> Vec<Option<MinMax>>,
    ) -> Vec<(String, String, u64)> {
        let schema = batches[0].schema();
        let props = ParquetFile::<std::fs::File>::props(&schema, WriterProperties::builder());
        let out = tempfile::tempfile().expect("a temporary file");
        let mut file = ParquetFile::try_new(out, schema, props.build(), 4).expect("a file");
        for batch in batches {
            file.write(batch, &gathered(batch)).expect("written");
        }
        let out = file.into_inner().expect("closed");
        let reader = ParquetRecordBatchReaderBuilder::try_new(out).expect("a reader");
        let text = |b: Option<&parquet::data_type::ByteArray>| {
            String::from_utf8(b.expect("a bound").data().to_vec()).expect("text")
        };
        reader
            .metadata()
            .row_groups()
            .iter()
            .map(|group| match group.column(1).statistics() {
                Some(Statistics::ByteArray(s)) => (
                    text(s.min_opt()),
                    text(s.max_opt()),
                    s.null_count_opt().expect("a null count"),
                ),
                other => panic!("not string statistics: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn gathered_bounds_are_merged_and_a_split_batch_is_looked_through() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batches = [
            batch(&schema, 0..2),
            batch(&schema, 2..4),
            batch(&schema, 4..10),
        ];
        // Bounds as the sink would gather them, of each whole batch.
        let gathered = |b: &RecordBatch| {
            let mut bounds = MinMax::default();
            bounds.observe(
                b.column(1)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("strings"),
            );
            vec![None, Some(bounds)]
        };
        let expected = [
            ("n001".to_string(), "n003".to_string(), 1),
            ("n004".to_string(), "n007".to_string(), 1),
            ("n008".to_string(), "n009".to_string(), 0),
        ];
        // Two whole batches merged into the first group; the third split over the
        // second and third, its gathered bounds (n004..n009) set aside.
        assert_eq!(name_statistics(&batches, gathered), expected);
        assert_eq!(name_statistics(&batches, |_| Vec::new()), expected);
    }

    #[test]
    fn parquet_rs_keeps_statistics_only_of_the_columns_not_ours() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let props =
            ParquetFile::<std::fs::File>::props(&schema, WriterProperties::builder()).build();
        let enabled = |name: &str| props.statistics_enabled(&ColumnPath::from(name));
        assert_eq!(enabled("name"), EnabledStatistics::None);
        assert_eq!(enabled("id"), EnabledStatistics::Page);
    }

    #[test]
    fn row_groups_carry_their_own_string_statistics() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let props = ParquetFile::<std::fs::File>::props(&schema, WriterProperties::builder());
        let out = tempfile::tempfile().expect("a temporary file");
        let mut file = ParquetFile::try_new(out, schema.clone(), props.build(), 4).expect("a file");
        file.write(&batch(&schema, 0..3), &[]).expect("written");
        file.write(&batch(&schema, 3..10), &[]).expect("written");
        assert!(file.in_progress_size() > 0);
        let out = file.into_inner().expect("closed");

        let reader = ParquetRecordBatchReaderBuilder::try_new(out).expect("a reader");
        let groups = reader.metadata().row_groups().to_vec();
        // 10 rows in groups of 4: 4, 4, 2; each group's bounds are its own rows'.
        assert_eq!(
            groups.iter().map(|g| g.num_rows()).collect::<Vec<_>>(),
            [4, 4, 2]
        );
        let expected = [
            ("n001", "n003", 1),
            ("n004", "n007", 1),
            ("n008", "n009", 0),
        ];
        for (group, (min, max, nulls)) in groups.iter().zip(expected) {
            let Some(Statistics::ByteArray(s)) = group.column(1).statistics() else {
                panic!("no string statistics")
            };
            assert_eq!(s.min_opt().map(|b| b.data()), Some(min.as_bytes()));
            assert_eq!(s.max_opt().map(|b| b.data()), Some(max.as_bytes()));
            assert_eq!(s.null_count_opt(), Some(nulls));
            // The other column's statistics are still parquet-rs's.
            assert!(matches!(
                group.column(0).statistics(),
                Some(Statistics::Int64(_))
            ));
        }
        let rows: usize = reader
            .build()
            .expect("batches")
            .map(|b| b.expect("a batch").num_rows())
            .sum();
        assert_eq!(rows, 10);
    }
}
