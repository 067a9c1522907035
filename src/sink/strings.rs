//! A string column of a Parquet part's next Arrow batch, gathered row by row from the
//! record batches the sink routes to the part.
//!
//! Arrow's `BinaryBuilder` copies each value with a `memcpy` call; the benchmark's
//! values are about ten bytes, so the call was most of the copy (7% of a Parquet
//! load's CPU, and another 7% looking each value up through `RecordBatch::cell`). Here
//! the column's view is resolved once per batch, and a value is appended in blocks of a
//! fixed size ([`BLOCK`] bytes), rounded up, which compile to a few vector moves: the
//! record batch's buffer goes on past the value, so the last block may carry bytes that
//! follow it, which are cut off again at once (a `truncate`, so the next value
//! overwrites them).

use anyhow::{bail, Result};
use arrow_array::builder::NullBufferBuilder;
use arrow_array::StringArray;
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};

use super::string_stats::{value, Extremes, MinMax};
use crate::core::batch::ColumnView;

/// Bytes copied at once for a short value.
const BLOCK: usize = 16;

/// The values, offsets and nulls of one string column, until [`Strings::finish`].
pub(crate) struct Strings {
    /// The values' bytes.
    bytes: Vec<u8>,
    /// Where each value ends in `bytes`, after a leading 0.
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
    /// Where the least and the greatest value are, for the column's statistics: found
    /// while each value is at hand (looked for afterwards, in the encoder, they cost a
    /// second trip through memory), and kept as places in `bytes`, not copies (an
    /// increasing id is a new greatest value in every row).
    extremes: Extremes,
}

impl Strings {
    /// An empty column with room for `values` values of `bytes` bytes in all.
    pub(crate) fn with_capacity(values: usize, bytes: usize) -> Strings {
        let mut offsets = Vec::with_capacity(values + 1);
        offsets.push(0);
        Strings {
            bytes: Vec::with_capacity(bytes + BLOCK),
            offsets,
            nulls: NullBufferBuilder::new(values),
            extremes: Extremes::default(),
        }
    }

    /// Values held.
    pub(crate) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// About the memory the values take.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.len() + self.offsets.len() * std::mem::size_of::<i32>()
    }

    /// Appends rows `rows` of `column`.
    pub(crate) fn append_rows(&mut self, column: ColumnView<'_>, rows: &[usize]) -> Result<()> {
        let first = self.len();
        let mut nulls = false;
        for &row in rows {
            match column.get_with_tail(row) {
                Some((tail, len)) => self.push(tail, len),
                None => {
                    self.offsets.push(self.bytes.len() as i32);
                    self.nulls.append_null();
                    nulls = true;
                }
            }
        }
        // Offsets only grow, so one that wrapped leaves the last past `i32::MAX` too.
        if i32::try_from(self.bytes.len()).is_err() {
            bail!("a Parquet batch's strings exceed 2 GiB");
        }
        self.take_extremes(first, nulls);
        Ok(())
    }

    /// Takes values `first..` into the column's extremes, in a loop of its own over the
    /// values just appended (still in the cache): done value by value in the gather
    /// loop above, with the extremes competing for registers there, it cost a third
    /// more (`perf record` of the benchmark's Parquet load, sink samples). Without
    /// nulls, the loop asks nothing of the null bits.
    fn take_extremes(&mut self, first: usize, nulls: bool) {
        let values = first..self.len();
        let (bytes, offsets) = (&self.bytes, &self.offsets);
        if nulls {
            let valid = &self.nulls;
            self.extremes
                .scan(bytes, offsets, values, |i| !valid.is_valid(i));
        } else {
            self.extremes.scan(bytes, offsets, values, |_| false);
        }
    }

    /// Appends `tail[..len]`, in blocks of `BLOCK` bytes when `tail` holds the last
    /// block whole (it does but at the very end of a record batch's buffer).
    #[inline]
    fn push(&mut self, tail: &[u8], len: usize) {
        let end = self.bytes.len() + len;
        match tail.get(..len.div_ceil(BLOCK).max(1) * BLOCK) {
            Some(mut blocks) => {
                while let Some((block, rest)) = blocks.split_first_chunk::<BLOCK>() {
                    self.bytes.extend_from_slice(block);
                    blocks = rest;
                }
                self.bytes.truncate(end);
            }
            None => self.bytes.extend_from_slice(&tail[..len]),
        }
        // Truncated if past `i32::MAX`, which `append_rows` then refuses.
        self.offsets.push(self.bytes.len() as i32);
        self.nulls.append_non_null();
    }

    /// The column as a `StringArray`, leaving this one empty, with room for as many
    /// values as it had. Checked exactly as Arrow's own conversion checks strings
    /// (`StringArray::try_new`), only faster: the whole buffer with simdutf8 (Arrow's
    /// `std::str::from_utf8` per value was 3-4% of a Parquet load's CPU), then each
    /// offset on a character boundary.
    pub(crate) fn finish(&mut self) -> Result<(StringArray, MinMax)> {
        let values = self.len();
        let room = self.bytes.capacity();
        let bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(room));
        let offsets = std::mem::replace(&mut self.offsets, Vec::with_capacity(values + 1));
        self.offsets.push(0);
        let nulls = self.nulls.finish();
        let nulls_seen = nulls.as_ref().map_or(0, |n| n.null_count() as u64);
        let extremes = std::mem::take(&mut self.extremes);
        let bounds = extremes.bounds(|i| value(&bytes, &offsets, i), nulls_seen);
        // No offset wrapped (an `append_rows` that refused the batch may have pushed
        // some), so the offsets never decrease.
        if i32::try_from(bytes.len()).is_err() {
            bail!("a Parquet batch's strings exceed 2 GiB");
        }
        if simdutf8::basic::from_utf8(&bytes).is_err() {
            bail!("a field is not UTF-8");
        }
        // A boundary: the end, or any byte but a continuation byte (0b10xx_xxxx).
        let boundary = |o: &i32| {
            usize::try_from(*o).is_ok_and(|o| bytes.get(o).is_none_or(|&b| (b as i8) >= -0x40))
        };
        if !offsets.iter().all(boundary) {
            bail!("a field is not UTF-8 (a value ends inside a character)");
        }
        // SAFETY: the offsets start at 0 and never decrease (each is the length of the
        // bytes after a push), the last is the bytes' length, and there is one null bit
        // per value: what `OffsetBuffer::new` and `StringArray::try_new` check besides
        // the UTF-8 checked above.
        let offsets = unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)) };
        let array = unsafe { StringArray::new_unchecked(offsets, Buffer::from_vec(bytes), nulls) };
        Ok((array, bounds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::RecordBatch;
    use proptest::prelude::*;

    /// A record batch of two columns, one holding `values` and the other a 20-byte
    /// field: with `values` first, each value is followed in the buffer by another
    /// field's bytes; last, the last value ends the buffer (but for its separator).
    fn batch(values: &[Option<Vec<u8>>], first: bool) -> RecordBatch {
        let mut batch = RecordBatch::new(2);
        let other = Some(&b"0123456789abcdefghij"[..]);
        for value in values {
            let (a, b) = if first {
                (value.as_deref(), other)
            } else {
                (other, value.as_deref())
            };
            batch.push_cell(a);
            batch.push_cell(b);
            batch.end_row(0, 1);
        }
        batch
    }

    proptest! {
        /// Any values (short, longer than a block, empty, null, not UTF-8, cut inside a
        /// character), gathered in any order in two runs, then a second array from the
        /// same column: each array is what Arrow's checked conversion of the same
        /// values gives, or an error exactly where that conversion fails.
        #[test]
        fn gathered_strings_are_arrows(
            values in prop::collection::vec(prop::option::weighted(0.9, prop_oneof![
                prop::collection::vec(any::<u8>(), 0..40),
                "\\PC{0,24}".prop_map(String::into_bytes),
                Just("é李".as_bytes().to_vec()),
                Just(vec![0xC3]),
            ]), 1..40),
            order in prop::collection::vec(any::<prop::sample::Index>(), 0..60),
            room in 0usize..64,
            first in any::<bool>(),
        ) {
            let batch = batch(&values, first);
            let column = batch.column(usize::from(!first));
            let rows: Vec<usize> = order.iter().map(|i| i.index(values.len())).collect();
            let (head, tail) = rows.split_at(rows.len() / 2);
            let mut strings = Strings::with_capacity(1, room);
            for _ in 0..2 {
                strings.append_rows(column, head).map_err(|e| TestCaseError::fail(e.to_string()))?;
                strings.append_rows(column, tail).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(strings.len(), rows.len());
                let ours = strings.finish().ok();
                let mut reference = arrow_array::builder::BinaryBuilder::new();
                for &row in &rows {
                    reference.append_option(values[row].as_deref());
                }
                let arrows = StringArray::try_from_binary(reference.finish()).ok();
                // The bounds gathered on the way are those of the array made.
                let bounds = |array: &StringArray| {
                    let mut bounds = MinMax::default();
                    bounds.observe(array);
                    bounds.summary()
                };
                prop_assert_eq!(
                    ours.as_ref().map(|(array, gathered)| (array.clone(), gathered.summary())),
                    arrows.as_ref().map(|array| (array.clone(), bounds(array)))
                );
                prop_assert_eq!(strings.len(), 0);
            }
        }
    }
}
