//! A Parquet part's rows on their way to its encoder: the values' bytes copied as they
//! are, one buffer per part, typed only on the encoder thread (for a checkpoint's parts
//! past its first `BUILDING_PARTS`, see `parquet.rs`).
//!
//! The sink thread appended each value straight to its part's Arrow builders, parsing
//! ints, decimals, dates and timestamps as it went. Over 4,000 partitions a batch holds
//! about one row per part, and each row touched ten of 40,000 builders and grew them
//! value by value: 1.65 s of the sink thread's CPU on 2,000,000 orders (`perf`, against
//! 0.35 s for the same rows over 40 partitions), and ~1 s more in `malloc` for the
//! builders' growth. Here a row costs one copy of its bytes into one buffer; the encoder
//! threads, which run beside the sink, build the Arrow columns from it a column at a
//! time, each builder hot in the cache while it takes all its values.

use anyhow::{bail, Result};

use crate::core::batch::{ColumnView, RecordBatch};
use crate::core::sys::cache_hint;

/// Rows of one part, laid out as a record batch lays out its stored fields (so the
/// builders read them through the same [`ColumnView`]): each value followed by one
/// separator byte, and where each value ends.
#[derive(Debug, Default)]
pub(crate) struct PartRows {
    /// Values per row.
    width: usize,
    data: Vec<u8>,
    /// Where each value ends in `data`, row by row.
    ends: Vec<u32>,
    /// Which values are null, row by row; `None` until the first null.
    nulls: Option<Vec<bool>>,
}

impl PartRows {
    /// No rows yet, of `width` columns.
    pub(crate) fn new(width: usize) -> PartRows {
        PartRows {
            width,
            ..PartRows::default()
        }
    }

    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.ends.len().checked_div(self.width).unwrap_or(0)
    }

    /// Memory the rows take.
    pub(crate) fn bytes(&self) -> usize {
        self.data.capacity()
            + self.ends.capacity() * std::mem::size_of::<u32>()
            + self.nulls.as_ref().map_or(0, Vec::capacity)
    }

    /// Appends rows `rows` of `batch`, its columns `cols` (one per value). Fails past
    /// 4 GiB of values (ends are 32-bit): a part hands its rows over long before (see
    /// `parquet.rs`).
    pub(crate) fn push_rows(
        &mut self,
        batch: &RecordBatch,
        cols: &[usize],
        rows: &[usize],
    ) -> Result<()> {
        debug_assert_eq!(cols.len(), self.width);
        for &row in rows {
            for &col in cols {
                let value = batch.cell(row, col);
                self.data.extend_from_slice(value.unwrap_or_default());
                // Truncated if past `u32::MAX`, which the check below refuses.
                self.ends.push(self.data.len() as u32);
                self.data.push(b',');
                match (&mut self.nulls, value.is_none()) {
                    (Some(nulls), null) => nulls.push(null),
                    (None, true) => {
                        let mut nulls = vec![false; self.ends.len() - 1];
                        nulls.push(true);
                        self.nulls = Some(nulls);
                    }
                    (None, false) => {}
                }
            }
        }
        if u32::try_from(self.data.len()).is_err() {
            bail!("a Parquet part's rows exceed 4 GiB before they are encoded");
        }
        Ok(())
    }

    /// Cache hints for the next row: where its values and their ends go.
    #[inline(always)]
    pub(crate) fn hint_tail(&self) {
        cache_hint::address_to_l1(self.data.as_ptr().wrapping_add(self.data.len()));
        cache_hint::address_to_l1(self.ends.as_ptr().wrapping_add(self.ends.len()).cast());
    }

    /// Column `col` of the rows, for the Arrow builders.
    pub(crate) fn column(&self, col: usize) -> ColumnView<'_> {
        ColumnView::Stored {
            data: &self.data,
            ends: &self.ends,
            nulls: self.nulls.as_deref(),
            stride: self.width,
            col,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::Column;

    fn batch(rows: &[[Option<&str>; 3]]) -> RecordBatch {
        let mut batch = RecordBatch::new(3);
        for (i, row) in rows.iter().enumerate() {
            for cell in row {
                batch.push_cell(cell.map(str::as_bytes));
            }
            batch.end_row(0, i as u64 + 1);
        }
        batch
    }

    fn values(rows: &PartRows, col: usize) -> Vec<Option<String>> {
        let column = rows.column(col);
        (0..rows.len())
            .map(|r| {
                column
                    .get(r)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            })
            .collect()
    }

    #[test]
    fn rows_keep_their_values_nulls_and_order_across_batches() {
        let first = batch(&[
            [Some("1"), Some("a"), None],
            [Some("2"), Some(""), Some("x")],
            [Some("3"), None, Some("y")],
        ]);
        let second = batch(&[[Some("4"), Some("d"), Some("z")]]);
        let mut rows = PartRows::new(2);
        // Columns 2 and 0, rows 2 and 0 of the first batch, then row 0 of the second.
        rows.push_rows(&first, &[2, 0], &[0, 2]).expect("push");
        rows.push_rows(&second, &[2, 0], &[0]).expect("push");
        assert_eq!(rows.len(), 3);
        // What they take counts at least their values, a separator and an end each.
        let value_bytes = ["", "1", "y", "3", "z", "4"]
            .map(str::len)
            .iter()
            .sum::<usize>();
        assert!(rows.bytes() >= value_bytes + 6 + 6 * 4, "{}", rows.bytes());
        let s = |v: &str| Some(v.to_string());
        assert_eq!(values(&rows, 0), vec![None, s("y"), s("z")]);
        assert_eq!(values(&rows, 1), vec![s("1"), s("3"), s("4")]);
        // An empty string is a value, not a null.
        let mut rows = PartRows::new(1);
        rows.push_rows(&first, &[1], &[1, 2]).expect("push");
        assert_eq!(values(&rows, 0), vec![s(""), None]);
    }

    #[test]
    fn the_memory_counted_is_what_the_rows_take() {
        // 200 values of 3 bytes: 600 bytes, 200 separators and 200 ends of 4 bytes.
        let rows: Vec<[Option<&str>; 3]> =
            (0..100).map(|_| [Some("abc"), Some("def"), None]).collect();
        let wide = batch(&rows);
        let mut held = PartRows::new(2);
        let all: Vec<usize> = (0..100).collect();
        held.push_rows(&wide, &[0, 1], &all).expect("push");
        let least = 600 + 200 + 200 * 4;
        // Buffers grow by doubling: never more than twice what they hold, and a little.
        assert!(
            (least..=2 * least + 64).contains(&held.bytes()),
            "{} for {least}",
            held.bytes()
        );
        // Null flags count too: empty strings and nulls take the same bytes but those.
        let mut empty = PartRows::new(1);
        let mut null = PartRows::new(1);
        let sparse = batch(&vec![[Some(""), None, None]; 100]);
        empty.push_rows(&sparse, &[0], &all).expect("push");
        null.push_rows(&sparse, &[1], &all).expect("push");
        assert!(null.bytes() > empty.bytes());
    }

    #[test]
    fn a_column_a_stage_added_is_copied_too() {
        let mut batch = batch(&[
            [Some("1"), Some("a"), Some("b")],
            [Some("2"), Some("c"), None],
        ]);
        let mut added = Column::with_rows(2);
        added.push(Some(b"7"));
        added.push(None);
        batch.add_column(added);
        let mut rows = PartRows::new(2);
        rows.push_rows(&batch, &[3, 1], &[0, 1]).expect("push");
        let s = |v: &str| Some(v.to_string());
        assert_eq!(values(&rows, 0), vec![s("7"), None]);
        assert_eq!(values(&rows, 1), vec![s("a"), s("c")]);
    }
}
