//! A string column of a Parquet part's next Arrow batch, gathered row by row from the
//! record batches the sink routes to the part.
//!
//! Arrow's `BinaryBuilder` copies each value with a `memcpy` call; the benchmark's
//! values are about ten bytes, so the call was most of the copy (7% of a Parquet
//! load's CPU, and another 7% looking each value up through `RecordBatch::cell`). Here
//! the column's view is resolved once per batch, and a value is copied in blocks of a
//! fixed size ([`BLOCK`] bytes), rounded up: the record batch's buffer goes on past the
//! value and this column keeps zeroed room past its end, so the last block may carry
//! bytes that follow the value, which the next copy overwrites or `finish` cuts off.

use anyhow::{bail, Result};
use arrow_array::builder::NullBufferBuilder;
use arrow_array::StringArray;
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};

use crate::batch::ColumnView;

/// Bytes copied at once for a short value.
const BLOCK: usize = 16;

/// The values, offsets and nulls of one string column, until [`Strings::finish`].
pub struct Strings {
    /// The values' bytes: `len` of them, then zeroed room for the next copies.
    bytes: Vec<u8>,
    len: usize,
    /// Where each value ends in `bytes`, after a leading 0.
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
}

impl Strings {
    /// An empty column with room for `values` values of `bytes` bytes in all.
    pub fn with_capacity(values: usize, bytes: usize) -> Strings {
        let mut offsets = Vec::with_capacity(values + 1);
        offsets.push(0);
        Strings {
            bytes: vec![0; bytes + BLOCK],
            len: 0,
            offsets,
            nulls: NullBufferBuilder::new(values),
        }
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Appends rows `rows` of `column`.
    pub fn append_rows(&mut self, column: ColumnView<'_>, rows: &[usize]) -> Result<()> {
        for &row in rows {
            match column.get_with_tail(row) {
                Some((tail, len)) => self.push(tail, len)?,
                None => {
                    self.offsets.push(self.end()?);
                    self.nulls.append_null();
                }
            }
        }
        Ok(())
    }

    /// Appends `tail[..len]`, in blocks of `BLOCK` bytes when `tail` holds the last
    /// block whole (it does but at the very end of a record batch's buffer).
    #[inline]
    fn push(&mut self, tail: &[u8], len: usize) -> Result<()> {
        let blocks = len.div_ceil(BLOCK).max(1) * BLOCK;
        let copied = if blocks <= tail.len() { blocks } else { len };
        if self.len + copied > self.bytes.len() {
            let room = (self.len + copied).max(self.bytes.len() * 2);
            self.bytes.resize(room, 0);
        }
        let to = &mut self.bytes[self.len..self.len + copied];
        if copied == blocks {
            for (to, from) in to.chunks_exact_mut(BLOCK).zip(tail.chunks_exact(BLOCK)) {
                to.copy_from_slice(from);
            }
        } else {
            to.copy_from_slice(&tail[..len]);
        }
        self.len += len;
        self.offsets.push(self.end()?);
        self.nulls.append_non_null();
        Ok(())
    }

    /// Where the next value starts, as an Arrow offset.
    fn end(&self) -> Result<i32> {
        match i32::try_from(self.len) {
            Ok(end) => Ok(end),
            Err(_) => bail!("a Parquet batch's strings exceed 2 GiB"),
        }
    }

    /// The column as a `StringArray`, leaving this one empty, with room for as many
    /// values as it had. Checked exactly as Arrow's own conversion checks strings
    /// (`StringArray::try_new`), only faster: the whole buffer with simdutf8 (Arrow's
    /// `std::str::from_utf8` per value was 3-4% of a Parquet load's CPU), then each
    /// offset on a character boundary.
    pub fn finish(&mut self) -> Result<StringArray> {
        let values = self.len();
        let room = self.bytes.len();
        let mut bytes = std::mem::replace(&mut self.bytes, vec![0; room]);
        bytes.truncate(self.len);
        self.len = 0;
        let mut offsets = std::mem::replace(&mut self.offsets, Vec::with_capacity(values + 1));
        self.offsets.push(0);
        let nulls = self.nulls.finish();
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
        offsets.shrink_to_fit();
        // SAFETY: the offsets start at 0 and never decrease (each is the length of the
        // bytes after a push), the last is the bytes' length, and there is one null bit
        // per value: what `OffsetBuffer::new` and `StringArray::try_new` check besides
        // the UTF-8 checked above.
        let offsets = unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)) };
        Ok(unsafe { StringArray::new_unchecked(offsets, Buffer::from_vec(bytes), nulls) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::RecordBatch;
    use proptest::prelude::*;

    /// A record batch of one column holding `values`, then a second column, so that
    /// each value is followed in the buffer by another field's bytes.
    fn batch(values: &[Option<Vec<u8>>]) -> RecordBatch {
        let mut batch = RecordBatch::new(2);
        for value in values {
            batch.push_cell(value.as_deref());
            batch.push_cell(Some(b"0123456789abcdefghij"));
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
        ) {
            let batch = batch(&values);
            let rows: Vec<usize> = order.iter().map(|i| i.index(values.len())).collect();
            let (first, second) = rows.split_at(rows.len() / 2);
            let mut strings = Strings::with_capacity(1, room);
            for _ in 0..2 {
                strings.append_rows(batch.column(0), first).map_err(|e| TestCaseError::fail(e.to_string()))?;
                strings.append_rows(batch.column(0), second).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let ours = strings.finish().ok();
                let mut reference = arrow_array::builder::BinaryBuilder::new();
                for &row in &rows {
                    reference.append_option(values[row].as_deref());
                }
                let arrows = StringArray::try_from_binary(reference.finish()).ok();
                prop_assert_eq!(ours, arrows);
                prop_assert_eq!(strings.len(), 0);
            }
        }
    }
}
