//! What flows between pipeline threads: batches of records, and checkpoint barriers.
//!
//! A batch stores its records row-major in one byte buffer with one end offset per
//! field, so moving a batch across a channel moves three allocations, not one per field.
//! Every record of a batch has exactly the table's number of columns.

/// Rows per batch: large enough to amortise a channel hop, small enough to stay in cache.
pub const BATCH_ROWS: usize = 4096;

/// A batch of records in the table's column order.
#[derive(Debug, Clone)]
pub struct RecordBatch {
    ncols: usize,
    data: Vec<u8>,
    /// End offset in `data` of every field, row after row.
    ends: Vec<usize>,
    /// The 1-based source line where each record starts (for error messages).
    lines: Vec<u64>,
    /// Index of the input each record came from.
    inputs: Vec<u32>,
}

impl RecordBatch {
    /// An empty batch of records with `ncols` fields each.
    pub fn new(ncols: usize) -> RecordBatch {
        RecordBatch {
            ncols,
            data: Vec::with_capacity(BATCH_ROWS * 64),
            ends: Vec::with_capacity(BATCH_ROWS * ncols),
            lines: Vec::with_capacity(BATCH_ROWS),
            inputs: Vec::with_capacity(BATCH_ROWS),
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Appends one record, field by field; the caller supplies exactly `ncols` fields.
    pub fn push<'a>(&mut self, fields: impl IntoIterator<Item = &'a [u8]>, input: u32, line: u64) {
        for field in fields {
            self.data.extend_from_slice(field);
            self.ends.push(self.data.len());
        }
        debug_assert_eq!(self.ends.len(), (self.lines.len() + 1) * self.ncols);
        self.lines.push(line);
        self.inputs.push(input);
    }

    /// Appends one record given as its fields' bytes back to back and their end offsets
    /// (relative to `bytes`): one copy per record instead of one per field.
    pub fn push_fields(&mut self, bytes: &[u8], ends: &[usize], input: u32, line: u64) {
        let base = self.data.len();
        self.data.extend_from_slice(bytes);
        self.ends.extend(ends.iter().map(|end| base + end));
        debug_assert_eq!(self.ends.len(), (self.lines.len() + 1) * self.ncols);
        self.lines.push(line);
        self.inputs.push(input);
    }

    /// Field `col` of record `row`.
    pub fn field(&self, row: usize, col: usize) -> &[u8] {
        let i = row * self.ncols + col;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }

    /// The source line where record `row` starts.
    pub fn line(&self, row: usize) -> u64 {
        self.lines[row]
    }

    /// The input index record `row` came from.
    pub fn input(&self, row: usize) -> u32 {
        self.inputs[row]
    }

    /// Keeps only the records for which `keep[row]` is true, compacting in place.
    pub fn retain(&mut self, keep: &[bool]) {
        debug_assert_eq!(keep.len(), self.len());
        if keep.iter().all(|&k| k) {
            return;
        }
        let (mut out_row, mut out_byte) = (0, 0);
        for (row, &k) in keep.iter().enumerate() {
            if !k {
                continue;
            }
            let first = row * self.ncols;
            let start = if first == 0 { 0 } else { self.ends[first - 1] };
            let end = self.ends[first + self.ncols - 1];
            self.data.copy_within(start..end, out_byte);
            for col in 0..self.ncols {
                self.ends[out_row * self.ncols + col] = self.ends[first + col] - start + out_byte;
            }
            self.lines[out_row] = self.lines[row];
            self.inputs[out_row] = self.inputs[row];
            out_byte += end - start;
            out_row += 1;
        }
        self.data.truncate(out_byte);
        self.ends.truncate(out_row * self.ncols);
        self.lines.truncate(out_row);
        self.inputs.truncate(out_row);
    }
}

/// A checkpoint barrier: every record sent before it belongs to checkpoint `checkpoint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint: u64,
    /// The final barrier of the run: no record follows it.
    pub last: bool,
}

/// A message on a pipeline channel.
#[derive(Debug)]
pub enum Msg {
    Batch(RecordBatch),
    Barrier(Barrier),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(b: &RecordBatch) -> Vec<Vec<String>> {
        (0..b.len())
            .map(|r| {
                (0..2)
                    .map(|c| String::from_utf8_lossy(b.field(r, c)).into_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn retain_compacts_fields_lines_and_inputs() {
        let mut b = RecordBatch::new(2);
        for (i, (x, y)) in [("a", "1"), ("", "22"), ("ccc", ""), ("d", "4")]
            .iter()
            .enumerate()
        {
            b.push([x.as_bytes(), y.as_bytes()], i as u32, 10 + i as u64);
        }
        b.retain(&[false, true, false, true]);
        assert_eq!(rows(&b), vec![vec!["", "22"], vec!["d", "4"]]);
        assert_eq!((b.line(0), b.line(1), b.input(1)), (11, 13, 3));
        b.retain(&[false, false]);
        assert!(b.is_empty());
    }
}
