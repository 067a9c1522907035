//! What flows between pipeline threads: batches of records, and checkpoint barriers.
//!
//! A batch stores its records row-major in one byte buffer with one end offset per
//! field, so moving a batch across a channel moves a few allocations, not one per field.
//! Each stored field is followed by one separator byte, `,` ([`SEP`]): a record that
//! needs no CSV quoting is then already its CSV line, and a sink copies runs of its
//! fields at once instead of field by field (the source copies a record that held no
//! quote from its raw bytes in one piece too).
//! Every record of a batch has exactly the batch's number of columns. Nulls (which CSV
//! input never has, but casts and expressions make) live in a bitmap allocated only when
//! the first one appears. Bad rows a stage turns away travel with the batch as rejects,
//! so they reach the sink, and the same checkpoint, as the rows around them.

use crate::core::protocol::Barrier;
use crate::core::schema::ColumnType;

/// The byte after every stored field.
pub(crate) const SEP: u8 = b',';

/// A record's quoting mask (see [`RecordBatch::needs_quotes`]) when the source did not
/// find it: the sink scans the record. A record of 64 fields that all need quotes has
/// this mask too, and is scanned again to the same answer.
const UNKNOWN: u64 = u64::MAX;

/// Rows per batch: large enough to amortise a channel hop, small enough to stay in cache.
pub(crate) const BATCH_ROWS: usize = 4096;

/// Bytes of stored fields after which a batch is full whatever its rows: the batches in
/// flight then hold about the same memory however wide the rows are. The benchmark's
/// 100-byte rows fill 4096 rows in 400 KB; rows of 10 KB made 40 MB batches and a
/// 230 MB peak RSS before this cut.
pub(crate) const BATCH_BYTES: usize = 1 << 20;

/// The largest record a batch takes, in stored bytes (its fields, each with its
/// separator): the reader turns a larger one away as a bad row. With the cut at
/// [`BATCH_BYTES`] a batch's data then stays below 4 GiB, so its field offsets fit a
/// `u32`.
pub(crate) const MAX_RECORD_BYTES: usize = 1 << 30;
const _: () = assert!(MAX_RECORD_BYTES + BATCH_BYTES < u32::MAX as usize);

/// A field's end in a batch's data, as stored. It fits: the reader and the stages turn
/// away a record of more than [`MAX_RECORD_BYTES`], and a batch is cut at
/// [`BATCH_BYTES`]. Were that ever broken, this stops the thread (the run fails,
/// resumable) rather than store a wrong offset.
#[inline(always)]
fn offset(at: usize) -> u32 {
    match u32::try_from(at) {
        Ok(at) => at,
        Err(_) => panic!("internal error: a batch outgrew 4 GiB ({at} bytes)"),
    }
}

/// A row that failed, on its way to the rejects file (or to fail the run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reject {
    pub(crate) input: u32,
    pub(crate) line: u64,
    pub(crate) reason: String,
    /// The record as CSV text, as the stage that turned it away saw it.
    pub(crate) record: Vec<u8>,
}

/// A batch of records.
#[derive(Debug, Clone)]
pub(crate) struct RecordBatch {
    /// Fields per record as stored.
    ncols: usize,
    /// The columns readers see, as stored column indices: select, drop and rename only
    /// change this, never the data. `None` shows every stored column in order.
    view: Option<Vec<usize>>,
    data: Vec<u8>,
    /// End offset in `data` of every field, row after row; a [`SEP`] follows each, so
    /// field `i` starts at `ends[i - 1] + 1`. Four bytes, not eight: a batch's offsets
    /// were nearly half the bytes the source writes and the sink reads per field.
    ends: Vec<u32>,
    /// Per record: which of its stored fields need CSV quoting (they hold a `,`, a quote
    /// or a line end), field `i` as bit `i`, when the source knew ([`UNKNOWN`] when it
    /// did not). 0 is a plain record: its stored bytes from one field to another are CSV
    /// as they are.
    quoting: Vec<u64>,
    /// Per field, true when null; `None` while the batch has no null at all.
    nulls: Option<Vec<bool>>,
    /// The 1-based source line where each record starts (for error messages).
    lines: Vec<u64>,
    /// Index of the input each record came from.
    inputs: Vec<u32>,
    /// Columns added by stages after the stored ones (stored index `ncols + k`), one
    /// value per row: deriving or casting a column writes only that column.
    added: Vec<Column>,
    /// Stored columns whose every non-null value is known to be its type's canonical
    /// text (see `canonical.rs`), as `cast` found them: a later stage may take such a
    /// value as it is, without checking it again. Stored data never changes in place
    /// (rows are only removed), so a mark holds for the batch's life.
    canonical: Vec<(usize, ColumnType)>,
    /// Rows turned away so far, in order.
    pub(crate) rejects: Vec<Reject>,
}

/// One column's values, one per row, built by a stage (see [`RecordBatch::add_column`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Column {
    data: Vec<u8>,
    ends: Vec<usize>,
    nulls: Vec<bool>,
}

impl Column {
    /// An empty column with room for `rows` values.
    pub(crate) fn with_rows(rows: usize) -> Column {
        Column {
            data: Vec::with_capacity(rows * 16),
            ends: Vec::with_capacity(rows),
            nulls: Vec::with_capacity(rows),
        }
    }

    /// Appends the next row's value (`None` is null).
    pub(crate) fn push(&mut self, value: Option<&[u8]>) {
        if let Some(v) = value {
            self.data.extend_from_slice(v);
        }
        self.ends.push(self.data.len());
        self.nulls.push(value.is_none());
    }

    fn get(&self, row: usize) -> &[u8] {
        let (tail, len) = self.get_with_tail(row);
        &tail[..len]
    }

    /// Row `row`'s value as [`ColumnView::get_with_tail`] gives it.
    fn get_with_tail(&self, row: usize) -> (&[u8], usize) {
        let start = if row == 0 { 0 } else { self.ends[row - 1] };
        (&self.data[start..], self.ends[row] - start)
    }

    fn retain(&mut self, keep: &[bool]) {
        let mut out = Column::with_rows(keep.len());
        for (row, &k) in keep.iter().enumerate() {
            if k {
                out.push(if self.nulls[row] {
                    None
                } else {
                    Some(self.get(row))
                });
            }
        }
        *self = out;
    }
}

/// One visible column of a batch (see [`RecordBatch::column`]): what a per-row lookup
/// would find out for every row, found out once.
#[derive(Clone, Copy)]
pub(crate) enum ColumnView<'a> {
    /// A stored column: field `col` of every `stride` fields.
    Stored {
        data: &'a [u8],
        ends: &'a [u32],
        nulls: Option<&'a [bool]>,
        stride: usize,
        col: usize,
    },
    /// A column a stage added.
    Added(&'a Column),
}

impl<'a> ColumnView<'a> {
    /// The value of row `row`, `None` when null.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> Option<&'a [u8]> {
        self.get_with_tail(row).map(|(tail, len)| &tail[..len])
    }

    /// The value of row `row` as the batch's bytes from the value's start to the end of
    /// its buffer and the value's length (`None` when null): `&tail[..len]` is the
    /// value, the rest of `tail` whatever follows it, so a copy may read past the value
    /// in blocks of a fixed size.
    #[inline(always)]
    pub(crate) fn get_with_tail(&self, row: usize) -> Option<(&'a [u8], usize)> {
        match *self {
            ColumnView::Stored {
                data,
                ends,
                nulls,
                stride,
                col,
            } => {
                let i = row * stride + col;
                if nulls.is_some_and(|n| n[i]) {
                    return None;
                }
                let start = if i == 0 { 0 } else { ends[i - 1] as usize + 1 };
                Some((&data[start..], ends[i] as usize - start))
            }
            ColumnView::Added(column) => (!column.nulls[row]).then(|| column.get_with_tail(row)),
        }
    }
}

impl RecordBatch {
    /// An empty batch of records with `ncols` fields each.
    pub(crate) fn new(ncols: usize) -> RecordBatch {
        RecordBatch::with_capacity(ncols, BATCH_ROWS * 64)
    }

    /// An empty batch whose data buffer starts with room for `bytes`.
    pub(crate) fn with_capacity(ncols: usize, bytes: usize) -> RecordBatch {
        RecordBatch {
            ncols,
            view: None,
            data: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(BATCH_ROWS * ncols),
            quoting: Vec::with_capacity(BATCH_ROWS),
            nulls: None,
            lines: Vec::with_capacity(BATCH_ROWS),
            inputs: Vec::with_capacity(BATCH_ROWS),
            added: Vec::new(),
            canonical: Vec::new(),
            rejects: Vec::new(),
        }
    }

    /// An empty batch with another width that carries over this batch's rejects.
    pub(crate) fn successor(&mut self, ncols: usize) -> RecordBatch {
        // Room for about as much data as this batch holds, so building it never regrows.
        let mut next =
            RecordBatch::with_capacity(ncols, self.data.len() + self.data.len() / 4 + 64);
        next.rejects = std::mem::take(&mut self.rejects);
        next
    }

    /// Empties the batch for records of `ncols` fields, keeping its buffers' capacity.
    pub(crate) fn reset(&mut self, ncols: usize) {
        self.ncols = ncols;
        self.view = None;
        self.data.clear();
        self.ends.clear();
        self.quoting.clear();
        self.nulls = None;
        self.lines.clear();
        self.inputs.clear();
        self.added.clear();
        self.canonical.clear();
        self.rejects.clear();
    }

    /// Bytes of field data held (of the stored columns; for estimates).
    pub(crate) fn data_len(&self) -> usize {
        self.data.len()
    }

    /// True when the batch should go: it holds [`BATCH_ROWS`] rows or [`BATCH_BYTES`]
    /// bytes.
    pub(crate) fn is_full(&self) -> bool {
        self.len() >= BATCH_ROWS || self.data.len() >= BATCH_BYTES
    }

    /// Number of records.
    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }

    /// True when the batch holds no record.
    pub(crate) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Number of fields per record, as readers see them.
    pub(crate) fn width(&self) -> usize {
        self.view.as_ref().map_or(self.ncols, Vec::len)
    }

    /// Adds a column after the visible ones (`values` holds one value per row).
    pub(crate) fn add_column(&mut self, values: Column) {
        debug_assert_eq!(values.ends.len(), self.len());
        let mut view: Vec<usize> = (0..self.width()).map(|c| self.stored(c)).collect();
        view.push(self.ncols + self.added.len());
        self.added.push(values);
        self.view = Some(view);
    }

    /// Shows `values` in place of visible column `col` (the old values stay unseen).
    pub(crate) fn replace_column(&mut self, col: usize, values: Column) {
        debug_assert_eq!(values.ends.len(), self.len());
        let mut view: Vec<usize> = (0..self.width()).map(|c| self.stored(c)).collect();
        view[col] = self.ncols + self.added.len();
        self.added.push(values);
        self.view = Some(view);
    }

    /// Shows only the columns `from` (indices of the current view), in that order,
    /// without moving any data.
    pub(crate) fn project(&mut self, from: &[usize]) {
        let view = from.iter().map(|&c| self.stored(c)).collect();
        self.view = Some(view);
    }

    /// Records that every non-null value of visible column `col` is canonical text of
    /// `ty` (the caller has checked each one).
    pub(crate) fn mark_canonical(&mut self, col: usize, ty: ColumnType) {
        self.canonical.push((self.stored(col), ty));
    }

    /// True when every non-null value of visible column `col` is known to be canonical
    /// text of `ty` (see [`RecordBatch::mark_canonical`]).
    pub(crate) fn is_canonical(&self, col: usize, ty: ColumnType) -> bool {
        let stored = self.stored(col);
        self.canonical.contains(&(stored, ty))
    }

    /// True when no value of visible column `col` can need CSV quoting: every non-null
    /// value is known to be the canonical text of a type whose text never holds a
    /// comma, a quote or a line end (numbers, booleans, dates, timestamps).
    pub(crate) fn never_quoted(&self, col: usize) -> bool {
        let stored = self.stored(col);
        self.canonical
            .iter()
            .any(|&(c, ty)| c == stored && !matches!(ty, ColumnType::String | ColumnType::Json))
    }

    /// The stored column behind visible column `col`.
    fn stored(&self, col: usize) -> usize {
        self.view.as_ref().map_or(col, |v| v[col])
    }

    /// Appends one record, field by field; the caller supplies exactly `ncols` fields.
    pub(crate) fn push<'a>(
        &mut self,
        fields: impl IntoIterator<Item = &'a [u8]>,
        input: u32,
        line: u64,
    ) {
        for field in fields {
            self.push_cell(Some(field));
        }
        self.end_row(input, line);
    }

    /// Appends one record given as its fields' bytes back to back and their end offsets
    /// (relative to `bytes`).
    pub(crate) fn push_fields(&mut self, bytes: &[u8], ends: &[usize], input: u32, line: u64) {
        let mut start = 0;
        for &end in ends {
            self.push_cell(Some(&bytes[start..end]));
            start = end;
        }
        self.end_row(input, line);
    }

    /// Appends one record given as its raw bytes, which are exactly its fields joined by
    /// `delimiter` (it held no quote), and its fields' end offsets without the
    /// delimiters: one copy per record.
    pub(crate) fn push_joined(
        &mut self,
        joined: &[u8],
        delimiter: u8,
        ends: &[usize],
        input: u32,
        line: u64,
    ) {
        // Unquoted, a field holds no quote and no line end; nor the delimiter, so with
        // `,` no field needs quoting. With another delimiter a `,` may be in one.
        let plain = delimiter == SEP || memchr::memchr(SEP, joined).is_none();
        self.push_whole(joined, delimiter, ends);
        self.end_row(input, line);
        if let (true, Some(last)) = (plain, self.quoting.last_mut()) {
            *last = 0;
        }
    }

    /// Appends one record given as its fields, each followed by a `,`, and their end
    /// offsets without the commas: one copy per record. `quoting` is which fields need
    /// CSV quoting, if known (see [`RecordBatch::needs_quotes`]).
    pub(crate) fn push_separated(
        &mut self,
        separated: &[u8],
        ends: &[usize],
        quoting: Option<u64>,
        input: u32,
        line: u64,
    ) {
        let fields = separated.len().saturating_sub(1);
        self.push_whole(&separated[..fields], SEP, ends);
        self.end_row(input, line);
        if let (Some(mask), Some(last)) = (quoting, self.quoting.last_mut()) {
            *last = mask;
        }
    }

    /// Appends the fields of `joined`, separated by `delimiter` and ending at `ends` (not
    /// counting the delimiters), storing a `,` after each.
    fn push_whole(&mut self, joined: &[u8], delimiter: u8, ends: &[usize]) {
        debug_assert!(
            self.view.is_none(),
            "records are appended to unprojected batches only"
        );
        debug_assert_eq!(joined.len() + 1, ends.last().map_or(1, |e| e + ends.len()));
        let base = self.data.len();
        self.data.extend_from_slice(joined);
        self.data.push(SEP);
        for (i, &end) in ends.iter().enumerate() {
            self.ends.push(offset(base + end + i));
        }
        if delimiter != SEP {
            for &end in &self.ends[self.ends.len() - ends.len()..] {
                self.data[end as usize] = SEP;
            }
        }
        if let Some(nulls) = &mut self.nulls {
            nulls.resize(self.ends.len(), false);
        }
    }

    /// Appends one field of the record being built; `None` is null.
    pub(crate) fn push_cell(&mut self, value: Option<&[u8]>) {
        debug_assert!(
            self.view.is_none(),
            "records are appended to unprojected batches only"
        );
        if let Some(bytes) = value {
            self.data.extend_from_slice(bytes);
        }
        self.ends.push(offset(self.data.len()));
        self.data.push(SEP);
        match (&mut self.nulls, value) {
            (Some(nulls), _) => nulls.push(value.is_none()),
            (None, None) => {
                let mut nulls = vec![false; self.ends.len()];
                nulls[self.ends.len() - 1] = true;
                self.nulls = Some(nulls);
            }
            (None, Some(_)) => {}
        }
    }

    /// Finishes the record started with `push_cell`.
    pub(crate) fn end_row(&mut self, input: u32, line: u64) {
        debug_assert_eq!(self.ends.len(), (self.lines.len() + 1) * self.ncols);
        self.lines.push(line);
        self.inputs.push(input);
        self.quoting.push(UNKNOWN);
    }

    /// Field `col` of record `row` (empty when null).
    pub(crate) fn field(&self, row: usize, col: usize) -> &[u8] {
        let stored = self.stored(col);
        if stored >= self.ncols {
            return self.added[stored - self.ncols].get(row);
        }
        let i = row * self.ncols + stored;
        &self.data[self.start(i)..self.end(i)]
    }

    /// Where stored field `i` (counted over every row) ends in `data`.
    #[inline]
    fn end(&self, i: usize) -> usize {
        self.ends[i] as usize
    }

    /// Where stored field `i` (counted over every row) starts in `data`.
    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.end(i - 1) + 1
        }
    }

    /// True when record `row`'s stored fields need no CSV quoting.
    #[cfg(test)]
    pub(crate) fn is_plain(&self, row: usize) -> bool {
        self.quoting[row] == 0
    }

    /// The stored fields of record `row` that need CSV quoting (they hold a `,`, a quote
    /// or a line end), field `i` as bit `i`: as the source found them when it did, found
    /// with one scan of the record's bytes for each kind otherwise; `None` past 64
    /// stored fields.
    pub(crate) fn needs_quotes(&self, row: usize) -> Option<u64> {
        if self.quoting[row] != UNKNOWN {
            return Some(self.quoting[row]);
        }
        if self.ncols == 0 || self.ncols > 64 {
            return (self.ncols == 0).then_some(0);
        }
        let first = row * self.ncols;
        let start = self.start(first);
        let ends = &self.ends[first..first + self.ncols];
        let bytes = &self.data[start..ends[self.ncols - 1] as usize];
        let mut mask = 0u64;
        // The field holding byte `at`: the first whose end is at or after it.
        let field_at = |at: usize| ends.partition_point(|&e| (e as usize) < start + at);
        for at in memchr::memchr3_iter(b'"', b'\n', b'\r', bytes) {
            mask |= 1 << field_at(at);
        }
        // Separators sit exactly at the fields' ends; any other `,` is in a field.
        let mut field = 0;
        for at in memchr::memchr_iter(SEP, bytes) {
            while (ends[field] as usize) < start + at {
                field += 1;
            }
            if ends[field] as usize != start + at {
                mask |= 1 << field;
            }
        }
        Some(mask)
    }

    /// Stored fields `first..=last` of record `row` as they are stored: with `,` between
    /// them. For a plain record (one whose fields need no quoting) that is their CSV.
    pub(crate) fn stored_span(&self, row: usize, first: usize, last: usize) -> &[u8] {
        let at = row * self.ncols;
        &self.data[self.start(at + first)..self.end(at + last)]
    }

    /// The stored field visible column `col` shows, if it is a stored one (not added by
    /// a stage).
    pub(crate) fn stored_field(&self, col: usize) -> Option<usize> {
        Some(self.stored(col)).filter(|&s| s < self.ncols)
    }

    /// Field `col` of record `row`, `None` when null.
    pub(crate) fn cell(&self, row: usize, col: usize) -> Option<&[u8]> {
        self.column(col).get(row)
    }

    /// Visible column `col`, resolved once for a loop over its rows.
    pub(crate) fn column(&self, col: usize) -> ColumnView<'_> {
        let stored = self.stored(col);
        match stored.checked_sub(self.ncols) {
            Some(added) => ColumnView::Added(&self.added[added]),
            None => ColumnView::Stored {
                data: &self.data,
                ends: &self.ends,
                nulls: self.nulls.as_deref(),
                stride: self.ncols,
                col: stored,
            },
        }
    }

    /// True when field `col` of record `row` is null.
    pub(crate) fn is_null(&self, row: usize, col: usize) -> bool {
        let stored = self.stored(col);
        if stored >= self.ncols {
            return self.added[stored - self.ncols].nulls[row];
        }
        self.nulls
            .as_ref()
            .is_some_and(|n| n[row * self.ncols + stored])
    }

    /// The source line where record `row` starts.
    pub(crate) fn line(&self, row: usize) -> u64 {
        self.lines[row]
    }

    /// The input index record `row` came from.
    pub(crate) fn input(&self, row: usize) -> u32 {
        self.inputs[row]
    }

    /// The record as one line of CSV, for a rejects file.
    pub(crate) fn encode_row(&self, row: usize) -> Vec<u8> {
        encode_csv((0..self.width()).map(|c| self.field(row, c)))
    }

    #[cfg(test)]
    /// Turns away the rows in `bad` (row, reason), in row order, and drops them.
    pub(crate) fn reject(&mut self, bad: Vec<(usize, String)>) {
        if bad.is_empty() {
            return;
        }
        let mut keep = vec![true; self.len()];
        for (row, reason) in bad {
            keep[row] = false;
            let record = self.encode_row(row);
            self.rejects.push(Reject {
                input: self.inputs[row],
                line: self.lines[row],
                reason,
                record,
            });
        }
        self.retain(&keep);
    }

    /// Moves records `at..` into `tail` (emptied first): a source batch cut where a
    /// checkpoint barrier falls. For batches as the source builds them: no view, no
    /// added column, no rejects.
    pub(crate) fn split_off(&mut self, at: usize, tail: &mut RecordBatch) {
        debug_assert!(self.view.is_none() && self.added.is_empty() && self.rejects.is_empty());
        tail.reset(self.ncols);
        if at >= self.len() {
            return;
        }
        let first = at * self.ncols;
        let base = self.start(first);
        tail.data.extend_from_slice(&self.data[base..]);
        let base32 = offset(base);
        tail.ends
            .extend(self.ends[first..].iter().map(|end| end - base32));
        if let Some(nulls) = &mut self.nulls {
            tail.nulls = Some(nulls.split_off(first));
        }
        tail.lines.extend_from_slice(&self.lines[at..]);
        tail.inputs.extend_from_slice(&self.inputs[at..]);
        tail.quoting.extend_from_slice(&self.quoting[at..]);
        self.data.truncate(base);
        self.ends.truncate(first);
        self.lines.truncate(at);
        self.inputs.truncate(at);
        self.quoting.truncate(at);
    }

    /// Adds `delta` to every record's line: a chunk parsed on its own counts lines from
    /// its first byte, and learns what precedes it only once the chunks before it are in.
    pub(crate) fn shift_lines(&mut self, delta: u64) {
        if delta == 0 {
            return;
        }
        for line in &mut self.lines {
            *line += delta;
        }
        for reject in &mut self.rejects {
            reject.line += delta;
        }
    }

    /// Keeps only the records for which `keep[row]` is true, compacting in place.
    pub(crate) fn retain(&mut self, keep: &[bool]) {
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
            let start = self.start(first);
            // Through the last field's separator.
            let end = if self.ncols == 0 {
                start
            } else {
                self.end(first + self.ncols - 1) + 1
            };
            self.data.copy_within(start..end, out_byte);
            for col in 0..self.ncols {
                self.ends[out_row * self.ncols + col] =
                    offset(self.end(first + col) - start + out_byte);
                if let Some(nulls) = &mut self.nulls {
                    nulls[out_row * self.ncols + col] = nulls[first + col];
                }
            }
            self.lines[out_row] = self.lines[row];
            self.inputs[out_row] = self.inputs[row];
            self.quoting[out_row] = self.quoting[row];
            out_byte += end - start;
            out_row += 1;
        }
        self.data.truncate(out_byte);
        self.ends.truncate(out_row * self.ncols);
        if let Some(nulls) = &mut self.nulls {
            nulls.truncate(out_row * self.ncols);
        }
        self.lines.truncate(out_row);
        self.inputs.truncate(out_row);
        self.quoting.truncate(out_row);
        for column in &mut self.added {
            column.retain(keep);
        }
    }
}

/// Fields as one line of CSV (without the line end).
pub(crate) fn encode_csv<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    // Writing to a Vec cannot fail.
    let _ = writer.write_record(fields);
    let mut bytes = writer.into_inner().unwrap_or_default();
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    bytes
}

/// Batches the sink has written, on their way back to the source to be filled again.
///
/// A batch's buffers are a few hundred kilobytes; allocating fresh ones for every batch
/// made the kernel find and zero new pages over and over (a quarter of a million page
/// faults on a 1 GB load), while a buffer that was just used is already mapped and warm.
/// The way back is bounded and never blocks: a batch that finds it full is dropped, one
/// the source finds none of is allocated.
pub(crate) fn recycling(depth: usize) -> (Returns, Spares) {
    let (tx, rx) = std::sync::mpsc::sync_channel(depth);
    (Returns(tx), Spares(rx))
}

/// The sinks' end of [`recycling`].
#[derive(Clone)]
pub(crate) struct Returns(std::sync::mpsc::SyncSender<RecordBatch>);

impl Returns {
    /// Hands a written batch back (or drops it if enough are waiting).
    pub(crate) fn give(&self, batch: RecordBatch) {
        let _ = self.0.try_send(batch);
    }
}

/// The source's end of [`recycling`].
pub(crate) struct Spares(std::sync::mpsc::Receiver<RecordBatch>);

impl Spares {
    /// An empty batch of `ncols` columns: a returned one if any is waiting.
    pub(crate) fn take(&self, ncols: usize) -> RecordBatch {
        match self.0.try_recv() {
            Ok(mut batch) => {
                batch.reset(ncols);
                batch
            }
            Err(_) => RecordBatch::new(ncols),
        }
    }
}

/// A message on a pipeline channel.
///
/// Batches are not boxed: they are nearly every message, a box would be one more
/// allocation per batch, and the space a barrier leaves unused is a few hundred bytes
/// per channel slot.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Msg {
    Batch(RecordBatch),
    Barrier(Barrier),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_record_read_with_another_delimiter_is_stored_with_commas() {
        let mut b = RecordBatch::new(3);
        b.push_joined(b"2;x,y;z", b';', &ends_of(&["2", "x,y", "z"]), 0, 1);
        assert_eq!(b.stored_span(0, 0, 2), b"2,x,y,z");
        assert_eq!(b.needs_quotes(0), Some(0b010));
        assert_eq!(
            (0..3).map(|c| b.field(0, c)).collect::<Vec<_>>(),
            [&b"2"[..], b"x,y", b"z"]
        );
    }

    #[test]
    fn a_batch_is_full_at_its_rows_or_at_its_bytes() {
        let mut narrow = RecordBatch::new(1);
        for i in 0..BATCH_ROWS {
            assert!(!narrow.is_full(), "{i} rows");
            narrow.push([&b"x"[..]], 0, i as u64);
        }
        assert!(narrow.is_full());
        // 1023 bytes and a separator: full at the row that reaches BATCH_BYTES.
        let value = vec![b'w'; 1023];
        let mut wide = RecordBatch::new(1);
        for i in 0..BATCH_BYTES / 1024 {
            assert!(!wide.is_full(), "{i} rows");
            wide.push([&value[..]], 0, i as u64);
        }
        assert!(wide.is_full());
        assert_eq!(wide.len(), 1024);
        assert_eq!(wide.field(1023, 0), &value[..]);
    }

    #[test]
    fn only_a_column_cast_to_a_type_without_commas_or_quotes_is_never_quoted() {
        let mut b = RecordBatch::new(2);
        b.push([&b"1.5"[..], b"a,b"], 0, 1);
        let column = |v: &[u8]| {
            let mut c = Column::with_rows(1);
            c.push(Some(v));
            c
        };
        b.add_column(column(b"2026-12-02"));
        b.add_column(column(b"x, \"y\""));
        assert!(!b.never_quoted(0), "not marked");
        b.mark_canonical(0, ColumnType::Float);
        b.mark_canonical(2, ColumnType::Date);
        b.mark_canonical(3, ColumnType::String);
        assert!(b.never_quoted(0));
        assert!(!b.never_quoted(1), "another column's mark is not its own");
        assert!(b.never_quoted(2));
        assert!(!b.never_quoted(3), "canonical text may hold anything");
    }

    #[test]
    fn a_split_batch_keeps_every_record_once_in_order() {
        for at in 0..=4 {
            let mut batch = RecordBatch::new(2);
            for i in 0..4u64 {
                let (a, b) = (format!("a{i}"), format!("bb{i}"));
                batch.push([a.as_bytes(), b.as_bytes()], 7, 10 + i);
            }
            let whole = rows(&batch);
            let mut tail = RecordBatch::new(5);
            tail.push_cell(Some(b"stale"));
            batch.split_off(at, &mut tail);
            assert_eq!(tail.width(), 2);
            let mut joined = rows(&batch);
            joined.extend(rows(&tail));
            assert_eq!(joined, whole, "split at {at}");
            assert_eq!(batch.len(), at);
            let lines: Vec<u64> = (0..tail.len()).map(|r| tail.line(r)).collect();
            assert_eq!(lines, (10 + at as u64..14).collect::<Vec<_>>());
            assert!((0..tail.len()).all(|r| tail.input(r) == 7));
            tail.rejects.push(Reject {
                input: 7,
                line: 5,
                reason: String::new(),
                record: Vec::new(),
            });
            tail.shift_lines(100);
            assert!((0..tail.len()).all(|r| tail.line(r) == 110 + (at + r) as u64));
            assert_eq!(tail.rejects[0].line, 105);
            tail.rejects.clear();
        }
    }

    /// Fields and their ends without delimiters, as the reader hands them over.
    fn ends_of(fields: &[&str]) -> Vec<usize> {
        let mut end = 0;
        fields
            .iter()
            .map(|f| {
                end += f.len();
                end
            })
            .collect()
    }

    #[test]
    fn joined_records_read_back_field_by_field_and_know_what_needs_quotes() {
        let mut b = RecordBatch::new(3);
        // From raw bytes with `,`: plain, every stored span is CSV.
        b.push_joined(b"1,ab,", b',', &ends_of(&["1", "ab", ""]), 0, 2);
        // With `;`: a `,` inside a field makes the record need quotes there.
        b.push_joined(b"2;x,y;z", b';', &ends_of(&["2", "x,y", "z"]), 0, 3);
        b.push_joined(b"3;;w", b';', &ends_of(&["3", "", "w"]), 0, 4);
        // Field by field (a quoted record): a quote, a line end, a comma, a CR.
        let quoted = ["say \"hi\"", "a\nb", "c,d"];
        b.push_fields(quoted.concat().as_bytes(), &ends_of(&quoted), 1, 5);
        b.push_fields(b"\rxyz", &[1, 2, 4], 1, 7);
        assert_eq!(
            rows(&b),
            [
                ["1", "ab", ""],
                ["2", "x,y", "z"],
                ["3", "", "w"],
                ["say \"hi\"", "a\nb", "c,d"],
                ["\r", "x", "yz"],
            ]
            .map(|r| r.map(|f| Some(f.to_string())).to_vec())
        );
        let masks: Vec<_> = (0..b.len()).map(|r| b.needs_quotes(r)).collect();
        assert_eq!(
            masks,
            [Some(0), Some(0b010), Some(0), Some(0b111), Some(0b001)]
        );
        assert!(b.is_plain(0) && !b.is_plain(1) && b.is_plain(2) && !b.is_plain(3));
        assert_eq!(b.stored_span(0, 0, 2), b"1,ab,");
        assert_eq!(b.stored_span(2, 1, 2), b",w");
        assert_eq!(b.stored_span(1, 0, 1), b"2,x,y");

        // Removing and splitting rows keeps each record's fields and plainness.
        b.retain(&[false, true, true, false, true]);
        assert_eq!(rows(&b)[1], ["3", "", "w"].map(|f| Some(f.to_string())));
        assert_eq!(
            (b.is_plain(0), b.is_plain(1), b.is_plain(2)),
            (false, true, false)
        );
        assert_eq!(b.needs_quotes(0), Some(0b010));
        let mut tail = RecordBatch::new(3);
        b.split_off(1, &mut tail);
        assert_eq!(
            rows(&b),
            [["2", "x,y", "z"].map(|f| Some(f.to_string())).to_vec()]
        );
        assert!(tail.is_plain(0) && !tail.is_plain(1));
        assert_eq!(tail.stored_span(0, 0, 2), b"3,,w");
        assert_eq!(tail.needs_quotes(1), Some(0b001));
    }

    fn rows(b: &RecordBatch) -> Vec<Vec<Option<String>>> {
        (0..b.len())
            .map(|r| {
                (0..b.width())
                    .map(|c| {
                        b.cell(r, c)
                            .map(|f| String::from_utf8_lossy(f).into_owned())
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn retain_compacts_fields_nulls_lines_and_inputs() {
        let mut b = RecordBatch::new(2);
        for (i, (x, y)) in [
            ("a", Some("1")),
            ("", Some("22")),
            ("ccc", None),
            ("d", Some("4")),
        ]
        .iter()
        .enumerate()
        {
            b.push_cell(Some(x.as_bytes()));
            b.push_cell(y.map(str::as_bytes));
            b.end_row(i as u32, 10 + i as u64);
        }
        b.retain(&[false, true, true, false]);
        assert_eq!(
            rows(&b),
            vec![
                vec![Some("".into()), Some("22".into())],
                vec![Some("ccc".into()), None]
            ]
        );
        assert_eq!((b.line(0), b.line(1), b.input(1)), (11, 12, 2));
        b.retain(&[false, false]);
        assert!(b.is_empty());
    }

    #[test]
    fn a_projection_shows_columns_without_moving_data() {
        let mut b = RecordBatch::new(3);
        b.push([&b"a"[..], b"b", b"c"], 0, 2);
        b.push_cell(Some(b"d"));
        b.push_cell(None);
        b.push_cell(Some(b"f"));
        b.end_row(0, 3);
        b.project(&[2, 1]);
        assert_eq!(b.width(), 2);
        assert_eq!(
            rows(&b),
            vec![
                vec![Some("c".into()), Some("b".into())],
                vec![Some("f".into()), None]
            ]
        );
        b.project(&[1]);
        assert_eq!(rows(&b), vec![vec![Some("b".into())], vec![None]]);
        assert_eq!(b.encode_row(0), b"b".to_vec());
        b.retain(&[false, true]);
        assert_eq!(rows(&b), vec![vec![None]]);
    }

    #[test]
    fn added_and_replaced_columns_read_like_stored_ones_and_survive_retain() {
        let mut b = RecordBatch::new(2);
        b.push([&b"1"[..], b"x"], 0, 2);
        b.push([&b"2"[..], b"y"], 0, 3);
        b.push([&b"3"[..], b"z"], 0, 4);
        let mut extra = Column::with_rows(3);
        for v in [Some(&b"a"[..]), None, Some(b"c")] {
            extra.push(v);
        }
        b.add_column(extra);
        let mut twice = Column::with_rows(3);
        for v in [&b"11"[..], b"22", b"33"] {
            twice.push(Some(v));
        }
        b.replace_column(0, twice);
        b.retain(&[true, false, true]);
        assert_eq!(
            rows(&b),
            vec![
                vec![Some("11".into()), Some("x".into()), Some("a".into())],
                vec![Some("33".into()), Some("z".into()), Some("c".into())]
            ]
        );
        b.project(&[2, 0]);
        assert_eq!(b.encode_row(1), b"c,33".to_vec());
    }

    #[test]
    fn a_returned_batch_comes_back_empty_with_its_capacity() {
        let (returns, spares) = recycling(1);
        let mut b = RecordBatch::new(2);
        b.push([&b"1"[..], b"x"], 0, 2);
        b.push_cell(None);
        b.push_cell(Some(b"y"));
        b.end_row(1, 3);
        let mut extra = Column::with_rows(2);
        extra.push(Some(b"e"));
        extra.push(None);
        b.add_column(extra);
        b.reject(vec![(0, "bad".into())]);
        let capacity = b.data.capacity();
        returns.give(b);
        returns.give(RecordBatch::new(9)); // the way back is full: dropped, no wait
        let mut again = spares.take(3);
        assert_eq!((again.len(), again.width(), again.rejects.len()), (0, 3, 0));
        assert_eq!(again.data.capacity(), capacity);
        again.push([&b"a"[..], b"b", b"c"], 0, 2);
        assert_eq!(
            rows(&again),
            vec![vec![Some("a".into()), Some("b".into()), Some("c".into())]]
        );
        assert_eq!(spares.take(1).width(), 1); // none waiting: a new one
    }

    #[test]
    fn rejects_keep_the_record_as_csv_and_leave_the_batch() {
        let mut b = RecordBatch::new(2);
        b.push([&b"1"[..], b"x, \"y\""], 3, 7);
        b.push([&b"2"[..], b"z"], 3, 8);
        b.reject(vec![(0, "bad cast".into())]);
        assert_eq!(b.len(), 1);
        assert_eq!(
            b.rejects,
            vec![Reject {
                input: 3,
                line: 7,
                reason: "bad cast".into(),
                record: b"1,\"x, \"\"y\"\"\"".to_vec()
            }]
        );
        let next = b.successor(5);
        assert_eq!(
            (next.width(), next.rejects.len(), b.rejects.len()),
            (5, 1, 0)
        );
    }
}
