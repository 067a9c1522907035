//! Output encodings of staged files: CSV with a header row, or JSON lines.
//!
//! JSON lines write one object per row with the (non-partition) columns as keys: typed
//! numbers and booleans (from a cast or derive) as JSON numbers and booleans, nulls as
//! `null`, everything else as strings.

use std::fs::File;
use std::io::Write;

use anyhow::{Context, Result};

#[cfg(test)]
use crate::core::batch::Column;
use crate::core::batch::RecordBatch;
use crate::core::options::{Compression, Format};
#[cfg(test)]
use crate::core::schema::ColumnType;
use crate::core::sys::cache_hint;

use super::columns::{FileColumns, JsonKind};
use super::counting::{CountingFile, PAGE};

/// A layout's columns in one batch as pieces: runs of consecutive stored fields, each
/// `first..=last`, and columns a stage added. For a record whose quoting the source
/// knew, each run's stored bytes are its CSV but for the fields that must be quoted
/// (`batch.rs` keeps a `,` after every stored field), copied at once; an added column
/// whose values never need quotes (a cast's canonical numbers or dates) is copied as
/// it is. Found once per batch.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    pieces: Vec<Piece>,
    /// False when the record has one field (an empty one must be quoted). A batch
    /// of more than 64 stored fields has no quoting masks at all.
    masked: bool,
}

#[derive(Debug, Clone, Copy)]
enum Piece {
    /// Stored fields `first..=last`.
    Stored(usize, usize),
    /// Visible column `col`, added by a stage; `plain` when no value needs quotes.
    Added { col: usize, plain: bool },
}

impl Runs {
    /// The pieces of `layout`'s columns in `batch`.
    pub(crate) fn find(&mut self, layout: &FileColumns, batch: &RecordBatch) {
        self.pieces.clear();
        self.masked = layout.cols.len() > 1;
        for &col in &layout.cols {
            let Some(stored) = batch.stored_field(col) else {
                let plain = batch.never_quoted(col);
                self.pieces.push(Piece::Added { col, plain });
                continue;
            };
            match self.pieces.last_mut() {
                Some(Piece::Stored(_, last)) if *last + 1 == stored => *last = stored,
                _ => self.pieces.push(Piece::Stored(stored, stored)),
            }
        }
    }
}

/// A zstd stream at level 3 with a 128 KiB window and 32 Ki-entry match tables, not the
/// level's 2 MiB window and 128/64 Ki-entry tables. A load writes to one open encoder per
/// partition, and each new frame (a file, or a closed file reopened) zeroes its tables:
/// 100 MB by country (40 partitions) took 1.19 s and 171 MB peak RSS with the level's
/// own sizes, 0.60 s and 73 MB with these (3 alternated rounds), for a table 1.2%
/// larger (2.1% unpartitioned, 0.71 -> 0.59 s); by country and dt (1,200 partitions,
/// 256 open), CSV 6.5 -> 4.9 s and 375 -> 166 MB, JSON lines 6.1 -> 5.0 s and 254 ->
/// 215 MB, the same sizes. gzip's window is 32 KiB.
fn zstd_encoder(
    out: CountingFile,
) -> std::io::Result<zstd::stream::write::Encoder<'static, CountingFile>> {
    use zstd::stream::raw::CParameter;
    let mut encoder = zstd::stream::write::Encoder::new(out, 3)?;
    encoder.window_log(17)?;
    encoder.set_parameter(CParameter::HashLog(15))?;
    encoder.set_parameter(CParameter::ChainLog(15))?;
    Ok(encoder)
}

/// The byte stream of a staged file: plain or compressed. Reopening a closed file for
/// appending starts a new gzip member or zstd frame; readers decode concatenations.
pub(crate) enum Out {
    Plain(CountingFile),
    Gzip(flate2::write::GzEncoder<CountingFile>),
    Zstd(zstd::stream::write::Encoder<'static, CountingFile>),
}

impl Out {
    fn new(file: File, compression: Compression) -> Result<Out> {
        let counted = CountingFile::new(file);
        Ok(match compression {
            Compression::None => Out::Plain(counted),
            Compression::Gzip => Out::Gzip(flate2::write::GzEncoder::new(
                counted,
                flate2::Compression::default(),
            )),
            Compression::Zstd => Out::Zstd(zstd_encoder(counted)?),
            Compression::Snappy => anyhow::bail!("snappy compresses Parquet files only"),
        })
    }

    fn written(&self) -> u64 {
        match self {
            Out::Plain(c) => c.written(),
            Out::Gzip(g) => g.get_ref().written(),
            Out::Zstd(z) => z.get_ref().written(),
        }
    }

    /// Ends the compressed stream (its trailer) and hands back the file.
    fn finish(self) -> std::io::Result<File> {
        Ok(match self {
            Out::Plain(c) => c.into_file(),
            Out::Gzip(g) => g.finish()?.into_file(),
            Out::Zstd(z) => z.finish()?.into_file(),
        })
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Out::Plain(c) => c.write(buf),
            Out::Gzip(g) => g.write(buf),
            Out::Zstd(z) => z.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Plain(c) => c.flush(),
            Out::Gzip(g) => g.flush(),
            Out::Zstd(z) => z.flush(),
        }
    }
}

/// Cache hints for the two lines after `bytes`, where the next row goes.
#[inline(always)]
fn lines_after(bytes: &[u8]) {
    let end = bytes.as_ptr().wrapping_add(bytes.len());
    cache_hint::address_to_l1(end);
    cache_hint::address_to_l1(end.wrapping_add(64));
}

/// How full a CSV write buffer (or a closed file's pending rows) of `buffer` bytes gets
/// before it is written out: once a row takes it past this, the eighth left holds that
/// row without a doubling of the buffer, unless the row is longer.
pub(crate) fn spill_at(buffer: usize) -> usize {
    buffer - buffer / 8
}

/// A staged file's encoder.
pub(crate) enum Encoder {
    /// Boxed: with the compression crates' features that delta-rs turns on, an `Out`
    /// is larger than the Parquet variant's box.
    Csv(Box<TextOut>),
    Json(Box<TextOut>),
    #[cfg(feature = "parquet")]
    Parquet(Box<super::parquet::ParquetPart>),
}

impl Encoder {
    /// An encoder writing `format` to `file` with a `buffer`-byte write buffer. CSV
    /// and JSON lines write it out at [`spill_at`], or, uncompressed, in whole pages
    /// from `buffer` bytes on, with a quarter more room for the rows that take it there
    /// ([`TextOut`]).
    pub(crate) fn new(
        format: Format,
        compression: Compression,
        file: File,
        buffer: usize,
    ) -> Result<Encoder> {
        let out = Out::new(file, compression)?;
        let whole_pages = matches!(out, Out::Plain(_)) && buffer >= 2 * PAGE;
        let (room, capacity) = match whole_pages {
            true => (buffer + buffer / 4, buffer),
            false => (buffer, spill_at(buffer)),
        };
        let text = Box::new(TextOut {
            out,
            buf: Vec::with_capacity(room),
            capacity,
            whole_pages,
        });
        Ok(match format {
            Format::Jsonl => Encoder::Json(text),
            _ => Encoder::Csv(text),
        })
    }

    /// A Parquet file with the layout's columns, created at `path` when first needed;
    /// `ordinal`: its place among its checkpoint's parts.
    #[cfg(feature = "parquet")]
    pub(crate) fn parquet(
        path: std::path::PathBuf,
        layout: &FileColumns,
        compression: Compression,
        target_size: Option<u64>,
        ordinal: usize,
    ) -> Result<Encoder> {
        Ok(Encoder::Parquet(Box::new(
            super::parquet::ParquetPart::new(path, layout, compression, target_size, ordinal)?,
        )))
    }

    /// True when the encoder holds a file descriptor only part of the time and needs no
    /// place under the open-file cap (Parquet: see `ParquetPart`).
    pub(crate) fn opens_lazily(&self) -> bool {
        #[cfg(feature = "parquet")]
        if let Encoder::Parquet(_) = self {
            return true;
        }
        false
    }

    /// Bytes that reached the file so far (the encoder's own buffer not counted).
    pub(crate) fn written(&self) -> u64 {
        match self {
            Encoder::Csv(w) | Encoder::Json(w) => w.out.written(),
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => p.written(),
        }
    }

    /// The first of two cache hints for rows on their way here: where this encoder's
    /// buffer is described. With that in cache, [`Encoder::hint_tail`] can find where
    /// the buffer ends without waiting.
    #[inline(always)]
    pub(crate) fn hint_state(&self) {
        match self {
            Encoder::Csv(w) | Encoder::Json(w) => cache_hint::to_l1(&w.buf),
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => p.hint_state(),
        }
    }

    /// The second hint: the end of the buffer, where the rows go (for CSV and JSON
    /// lines, two lines of it: a row is about 100 bytes). A load over thousands of partitions writes
    /// each row into a buffer of its own that has left the cache since its last row;
    /// the hints, given rows ahead, overlap those misses instead of taking them one at
    /// a time.
    #[inline(always)]
    pub(crate) fn hint_tail(&self) {
        match self {
            Encoder::Csv(w) | Encoder::Json(w) => lines_after(&w.buf),
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => p.hint_tail(),
        }
    }

    /// Writes what a new file starts with (the CSV header; nothing for JSON lines).
    pub(crate) fn start<H: AsRef<[u8]>>(&mut self, header: &[H]) -> Result<()> {
        if let Encoder::Csv(w) = self {
            w.push_record(header.iter().map(AsRef::as_ref))?;
        }
        Ok(())
    }

    /// Writes rows `rows` of `batch`, in that order; `runs` are the layout's columns in
    /// `batch` (see [`Runs`]). Hot path: no allocation per row.
    pub(crate) fn write_rows(
        &mut self,
        layout: &FileColumns,
        batch: &RecordBatch,
        rows: &[usize],
        runs: &Runs,
    ) -> Result<()> {
        match self {
            Encoder::Csv(w) => {
                for &row in rows {
                    push_csv_row(&mut w.buf, layout, batch, row, runs);
                    w.spill()?;
                }
            }
            Encoder::Json(w) => {
                for &row in rows {
                    write_json_row(&mut w.buf, layout, batch, row)?;
                    w.spill()?;
                }
            }
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => p.write_rows(layout, batch, rows)?,
        }
        Ok(())
    }

    /// Writes rows already encoded by [`push_row`] (a closed file's rows kept in memory,
    /// see `transaction.rs`) after whatever the buffer holds, in one write: they fill a
    /// write buffer on their own.
    pub(crate) fn write_encoded(&mut self, bytes: &[u8]) -> Result<()> {
        match self {
            Encoder::Csv(w) | Encoder::Json(w) => {
                if !w.buf.is_empty() {
                    w.out.write_all(&w.buf)?;
                    w.buf.clear();
                }
                w.out.write_all(bytes)?;
            }
            #[cfg(feature = "parquet")]
            Encoder::Parquet(_) => anyhow::bail!("Parquet rows are never kept encoded"),
        }
        Ok(())
    }

    /// Writes a record of raw cells (for rejects files, which are always CSV).
    pub(crate) fn write_cells(&mut self, cells: &[&[u8]]) -> Result<()> {
        match self {
            Encoder::Csv(w) => w.push_record(cells.iter().copied())?,
            _ => anyhow::bail!("rejects files are CSV"),
        }
        Ok(())
    }

    /// Flushes, ends the compressed stream, and closes the file.
    pub(crate) fn close(self) -> Result<()> {
        self.finish()?.wait().map(drop)
    }

    /// Starts finishing the file: flushed and closed at once for CSV and JSON lines; a
    /// Parquet part's encoder thread goes on writing its last row group and footer, and
    /// [`Finished::wait`] collects the file.
    pub(crate) fn finish(self) -> Result<Finished> {
        let out = match self {
            Encoder::Csv(w) | Encoder::Json(w) => {
                let TextOut { mut out, buf, .. } = *w;
                out.write_all(&buf)?;
                out
            }
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => return Ok(Finished::Parquet(p.finish()?)),
        };
        Ok(Finished::File(out.finish()?))
    }
}

/// The CSV every staged file is written in: RFC 4180 with `,` and `"`, each line ended
/// by `\n`, a field quoted only when it must be (it holds the delimiter, a quote or a
/// line break; or it is the only field of its record and empty, which would otherwise
/// be an empty line). That is the `csv` crate's default writer, byte for byte (a test
/// holds it to that). Written by hand for speed: the crate checks each field a byte at
/// a time through a table and copies every row twice; here one SIMD scan (`memchr`) of
/// a row's stored bytes finds the few fields that need quotes, and the rest are copied
/// once, into a buffer spilled to the file in large writes (16% of a plain load's
/// samples went to `write_byte_record`).
const DELIMITER: u8 = b',';

/// True when a field with these bytes must be quoted.
fn needs_quotes(bytes: &[u8]) -> bool {
    memchr::memchr3(DELIMITER, b'"', b'\n', bytes).is_some()
        || memchr::memchr(b'\r', bytes).is_some()
}

/// Appends row `row` of `batch` as a CSV line of `layout`'s columns; `runs` are the
/// layout's columns in `batch` (see [`Runs`]). Nulls are written as empty fields: CSV
/// has no other spelling for them. Hot path: no allocation.
#[inline]
pub(crate) fn push_csv_row(
    buf: &mut Vec<u8>,
    layout: &FileColumns,
    batch: &RecordBatch,
    row: usize,
    runs: &Runs,
) {
    let fields = layout.cols.len();
    let quoted = batch.needs_quotes(row).filter(|_| runs.masked);
    for (i, &piece) in runs.pieces.iter().enumerate() {
        if i > 0 {
            buf.push(DELIMITER);
        }
        match (piece, quoted) {
            (Piece::Stored(first, last), Some(quoted)) => {
                // The fields between two that need quotes are copied in one piece.
                let mut marked = quoted & (u64::MAX >> (63 - last)) & (u64::MAX << first);
                let mut from = first;
                for _ in 0..marked.count_ones() {
                    let field = marked.trailing_zeros() as usize;
                    marked &= marked - 1;
                    if field > from {
                        buf.extend_from_slice(batch.stored_span(row, from, field - 1));
                        buf.push(DELIMITER);
                    }
                    push_quoted(buf, batch.stored_span(row, field, field));
                    if field < last {
                        buf.push(DELIMITER);
                    }
                    from = field + 1;
                }
                if from <= last {
                    buf.extend_from_slice(batch.stored_span(row, from, last));
                }
            }
            (Piece::Stored(first, last), None) => {
                for field in first..=last {
                    if field > first {
                        buf.push(DELIMITER);
                    }
                    let bytes = batch.stored_span(row, field, field);
                    push_field(buf, bytes, fields);
                }
            }
            (Piece::Added { col, plain }, _) => {
                let bytes = batch.field(row, col);
                if plain && fields > 1 {
                    buf.extend_from_slice(bytes);
                } else {
                    push_field(buf, bytes, fields);
                }
            }
        }
    }
    buf.push(b'\n');
}

/// Appends one field of a record of `fields` fields, quoted if it must be.
fn push_field(buf: &mut Vec<u8>, field: &[u8], fields: usize) {
    let must = needs_quotes(field) || (field.is_empty() && fields == 1);
    if must {
        push_quoted(buf, field);
    } else {
        buf.extend_from_slice(field);
    }
}

/// Appends a field that must be quoted (the source's quoting mask or `push_field`
/// says so), its quotes doubled.
fn push_quoted(buf: &mut Vec<u8>, field: &[u8]) {
    buf.push(b'"');
    let mut rest = field;
    while let Some(at) = memchr::memchr(b'"', rest) {
        buf.extend_from_slice(&rest[..=at]);
        buf.push(b'"');
        rest = &rest[at + 1..];
    }
    buf.extend_from_slice(rest);
    buf.push(b'"');
}

/// A CSV or JSON lines file being written: rows are assembled in `buf`, which goes to
/// the file once it holds `capacity` bytes.
///
/// An uncompressed file is written in whole pages: what `buf` holds up to the file's
/// last page boundary goes out, and the rest (less than a page) stays for the rows
/// after it. The kernel's cost of a buffered write is mostly per page it touches and
/// per call: a write of 7 KiB that ends wherever its last row did leaves a page half
/// written for the next one to look up and fill, and its folios cannot be larger than
/// a page. Over 4,000 partitions, 8 KiB page-aligned writes took 12% less system time
/// and 9% less wall time than 7 KiB ones (paired medians of 12 alternated runs,
/// 2,000,000 orders, journaled ext4).
pub(crate) struct TextOut {
    out: Out,
    buf: Vec<u8>,
    capacity: usize,
    /// Writes end on page boundaries of the file.
    whole_pages: bool,
}

impl TextOut {
    /// Writes `buf` to the file once it is full: up to the file's last page boundary
    /// it reaches when written in whole pages, otherwise all of it.
    fn spill(&mut self) -> Result<()> {
        if self.buf.len() < self.capacity {
            return Ok(());
        }
        let keep = match &self.out {
            Out::Plain(file) if self.whole_pages => {
                ((file.offset() + self.buf.len() as u64) % PAGE as u64) as usize
            }
            _ => 0,
        };
        // `capacity` is two pages or more, so `keep` is less than what `buf` holds.
        let end = self.buf.len() - keep;
        self.out.write_all(&self.buf[..end])?;
        self.buf.drain(..end);
        Ok(())
    }

    /// Appends one record (a header, a reject), every field checked.
    fn push_record<'a>(&mut self, fields: impl ExactSizeIterator<Item = &'a [u8]>) -> Result<()> {
        let n = fields.len();
        for (i, field) in fields.enumerate() {
            if i > 0 {
                self.buf.push(DELIMITER);
            }
            push_field(&mut self.buf, field, n);
        }
        self.buf.push(b'\n');
        self.spill()
    }
}

/// Appends row `row` of `batch` to `buf` as a line of `format` (CSV or JSON lines: the
/// text formats, whose rows a closed file can keep in memory; see `transaction.rs`).
pub(crate) fn push_row(
    format: Format,
    buf: &mut Vec<u8>,
    layout: &FileColumns,
    batch: &RecordBatch,
    row: usize,
    runs: &Runs,
) -> Result<()> {
    match format {
        Format::Csv => push_csv_row(buf, layout, batch, row, runs),
        Format::Jsonl => write_json_row(buf, layout, batch, row)?,
        Format::Parquet => anyhow::bail!("Parquet rows are never kept encoded"),
    }
    Ok(())
}

/// Writes row `row` of `batch` as one JSON object on its line.
fn write_json_row(
    w: &mut impl Write,
    layout: &FileColumns,
    batch: &RecordBatch,
    row: usize,
) -> Result<()> {
    w.write_all(b"{")?;
    for (i, &col) in layout.cols.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(&layout.json_keys[i])?;
        match batch.cell(row, col) {
            None => w.write_all(b"null")?,
            Some(v) if layout.json_kinds[i] == JsonKind::Raw && !v.is_empty() => w.write_all(v)?,
            Some(v) => {
                // Field bytes are checked UTF-8 by the reader; stages write UTF-8.
                let text = std::str::from_utf8(v).context("a field is not UTF-8")?;
                serde_json::to_writer(&mut *w, text)?;
            }
        }
    }
    w.write_all(b"}\n")?;
    Ok(())
}

/// A staged file whose writing is done or finishing.
#[derive(Debug)]
pub(crate) enum Finished {
    File(File),
    #[cfg(feature = "parquet")]
    Parquet(super::parquet::Tail),
}

impl Finished {
    /// The complete file, still open (CSV, JSON lines), or `None` once a Parquet part's
    /// encoder has written the footer and closed it.
    pub(crate) fn wait(self) -> Result<Option<File>> {
        match self {
            Finished::File(file) => Ok(Some(file)),
            #[cfg(feature = "parquet")]
            Finished::Parquet(tail) => tail.wait().map(|()| None),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An uncompressed encoder of `format` into a new file at `path`, with a
    /// `buffer`-byte write buffer.
    fn encoder_at(path: &std::path::Path, format: Format, buffer: usize) -> Encoder {
        Encoder::new(
            format,
            Compression::None,
            File::create(path).unwrap(),
            buffer,
        )
        .unwrap()
    }

    fn runs(layout: &FileColumns, batch: &RecordBatch) -> Runs {
        let mut runs = Runs::default();
        runs.find(layout, batch);
        runs
    }

    /// Fields made of the bytes that matter to quoting, and others.
    /// Mostly fields that need no quotes, so that whole records often do not either.
    fn field() -> impl Strategy<Value = Vec<u8>> {
        let plain = proptest::collection::vec(prop_oneof![Just(b'a'), Just(b' ')], 0..4);
        let any = proptest::collection::vec(
            prop_oneof![
                Just(b'a'),
                Just(b','),
                Just(b'"'),
                Just(b'\n'),
                Just(b'\r'),
                Just(b' '),
                Just(b';')
            ],
            0..6,
        );
        prop_oneof![3 => plain, 1 => any]
    }

    /// Columns, rows of that many fields, and a replacement value per row.
    type Rows = (usize, Vec<Vec<Vec<u8>>>, Vec<Vec<u8>>);

    fn rows() -> impl Strategy<Value = Rows> {
        (1usize..6).prop_flat_map(|n| {
            let rows = proptest::collection::vec(proptest::collection::vec(field(), n), 1..20);
            (Just(n), rows).prop_flat_map(|(n, rows)| {
                let len = rows.len();
                (Just(n), Just(rows), proptest::collection::vec(field(), len))
            })
        })
    }

    #[test]
    fn a_csv_write_buffer_is_written_out_before_it_must_grow() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv");
        let mut b = RecordBatch::new(2);
        let value = "x".repeat(100);
        for i in 0..1000u64 {
            b.push([i.to_string().as_bytes(), value.as_bytes()], 0, i + 2);
        }
        let layout = FileColumns::new(
            vec![0, 1],
            vec!["a".into(), "b".into()],
            &[ColumnType::String; 2],
        );
        let mut enc = encoder_at(&path, Format::Csv, 8192);
        let rows: Vec<usize> = (0..1000).collect();
        enc.write_rows(&layout, &b, &rows, &runs(&layout, &b))
            .unwrap();
        let Encoder::Csv(w) = &enc else {
            panic!("a CSV encoder")
        };
        // Rows of about 105 bytes: written out in whole pages once 8,192 bytes are
        // held, never past the 10,240 allocated (the allocator's size class, not one
        // twice as large).
        assert_eq!(w.buf.capacity(), 10240);
        assert!(w.out.written() >= 8192);
        assert_eq!(w.out.written() % 4096, 0);
        assert!(w.buf.len() < 8192);
        enc.close().unwrap();
        // Each row: its number, a comma, 100 bytes and a line feed.
        assert_eq!(
            std::fs::read(&path).unwrap().len(),
            1000 * 102 + 10 + 90 * 2 + 900 * 3
        );
    }

    #[test]
    fn a_file_reopened_where_a_page_ends_half_way_is_written_up_to_page_boundaries() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv");
        std::fs::write(&path, b"a,b\n").unwrap();
        let mut b = RecordBatch::new(2);
        let value = "y".repeat(60);
        for i in 0..500u64 {
            b.push([i.to_string().as_bytes(), value.as_bytes()], 0, i + 2);
        }
        let layout = FileColumns::new(
            vec![0, 1],
            vec!["a".into(), "b".into()],
            &[ColumnType::String; 2],
        );
        let file = crate::core::sys::fsutil::open_append(&path).unwrap();
        let mut enc = Encoder::new(Format::Csv, Compression::None, file, 8192).unwrap();
        let mut expected = b"a,b\n".to_vec();
        for row in 0..500usize {
            enc.write_rows(&layout, &b, &[row], &runs(&layout, &b))
                .unwrap();
            writeln!(expected, "{row},{value}").unwrap();
            let Encoder::Csv(w) = &enc else {
                panic!("a CSV encoder")
            };
            // What reached the file always ends on a page boundary, 4 bytes in.
            let on_disk = std::fs::metadata(&path).unwrap().len();
            assert!(
                on_disk == 4 || on_disk % 4096 == 0,
                "{on_disk} bytes at row {row}"
            );
            assert_eq!(on_disk, 4 + w.out.written());
        }
        enc.close().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn json_lines_are_written_in_whole_pages_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let mut b = RecordBatch::new(2);
        for i in 0..400u64 {
            b.push(
                [i.to_string().as_bytes(), "say \"hi\"".as_bytes()],
                0,
                i + 2,
            );
        }
        let layout = FileColumns::new(
            vec![0, 1],
            vec!["a".into(), "b".into()],
            &[ColumnType::Int, ColumnType::String],
        );
        let runs = runs(&layout, &b);
        let mut enc = encoder_at(&path, Format::Jsonl, 8192);
        let mut expected = Vec::new();
        for row in 0..400usize {
            enc.write_rows(&layout, &b, &[row], &runs).unwrap();
            push_row(Format::Jsonl, &mut expected, &layout, &b, row, &runs).unwrap();
            let on_disk = std::fs::metadata(&path).unwrap().len();
            assert_eq!(on_disk % 4096, 0, "{on_disk} bytes at row {row}");
        }
        assert!(enc.written() >= 8192);
        enc.close().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn a_small_buffer_is_written_out_whole_at_seven_eighths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv");
        let mut b = RecordBatch::new(2);
        let value = "x".repeat(100);
        for i in 0..20u64 {
            b.push([i.to_string().as_bytes(), value.as_bytes()], 0, i + 2);
        }
        let layout = FileColumns::new(
            vec![0, 1],
            vec!["a".into(), "b".into()],
            &[ColumnType::String; 2],
        );
        // Less than two pages: no page to keep the rest of, so all of it goes at 896.
        let mut enc = encoder_at(&path, Format::Csv, 1024);
        let rows: Vec<usize> = (0..9).collect();
        enc.write_rows(&layout, &b, &rows, &runs(&layout, &b))
            .unwrap();
        // Nine rows of 103 bytes (one digit, a comma, 100 bytes, a line feed).
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 9 * 103);
        assert_eq!(enc.written(), 9 * 103);
    }

    #[test]
    fn a_compressed_file_is_written_out_whole_at_seven_eighths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv.gz");
        let enc = Encoder::new(
            Format::Csv,
            Compression::Gzip,
            File::create(&path).unwrap(),
            8192,
        )
        .unwrap();
        let Encoder::Csv(w) = &enc else {
            panic!("a CSV encoder")
        };
        assert_eq!((w.buf.capacity(), w.capacity), (8192, 7168));
        assert!(!w.whole_pages);
    }

    #[test]
    fn a_record_wider_than_the_quoting_mask_is_quoted_where_it_must_be() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv");
        let n = 70;
        let fields: Vec<Vec<u8>> = (0..n)
            .map(|i| match i {
                3 => b"a,b".to_vec(),
                66 => b"say \"x\"".to_vec(),
                _ => format!("v{i}").into_bytes(),
            })
            .collect();
        let mut b = RecordBatch::new(n);
        b.push(fields.iter().map(Vec::as_slice), 0, 1);
        let header: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let layout = FileColumns::new(
            (0..n).collect(),
            header.clone(),
            &vec![ColumnType::String; n],
        );
        let mut enc = encoder_at(&path, Format::Csv, 1024);
        enc.write_rows(&layout, &b, &[0], &runs(&layout, &b))
            .unwrap();
        enc.close().unwrap();
        let mut want = csv::Writer::from_writer(Vec::new());
        want.write_record(&fields).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want.into_inner().unwrap());
    }

    #[test]
    fn a_run_of_columns_far_into_a_wide_record_is_quoted_where_it_must_be() {
        // 60 columns, the 21st left out of the file: the second run of stored columns
        // is 21..=59, and only its field 50 needs quotes. The run's bits in the quoting
        // mask reach past the 63rd bit counted from its first column: a run is copied
        // whole only if none of its own fields is quoted.
        let n = 60;
        let fields: Vec<Vec<u8>> = (0..n)
            .map(|i| match i {
                50 => b"a,b".to_vec(),
                _ => format!("v{i}").into_bytes(),
            })
            .collect();
        let mut b = RecordBatch::new(n);
        b.push(fields.iter().map(Vec::as_slice), 0, 1);
        let cols: Vec<usize> = (0..n).filter(|&c| c != 20).collect();
        let header: Vec<String> = cols.iter().map(|i| format!("c{i}")).collect();
        let layout = FileColumns::new(cols.clone(), header, &vec![ColumnType::String; cols.len()]);
        let runs = runs(&layout, &b);
        assert!(runs.masked, "60 fields fit the quoting mask");
        let mut got = Vec::new();
        push_csv_row(&mut got, &layout, &b, 0, &runs);
        let mut want = csv::Writer::from_writer(Vec::new());
        want.write_record(cols.iter().map(|&c| &fields[c])).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want.into_inner().unwrap())
        );
    }

    proptest! {
        /// The hand-written writer is the csv crate's default writer, byte for byte:
        /// header, stored fields, a column a stage replaced (with any text, or with
        /// numbers a cast marked canonical), rejects' cells.
        #[test]
        fn csv_out_writes_what_the_csv_crate_writes((n, rows, replaced) in rows(), replace in 0u8..3, skip in 0usize..6) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("x.csv");
            let mut b = RecordBatch::new(n);
            for row in &rows {
                // As the source stores them: a record without quotes or line ends from
                // its raw bytes (with either delimiter), others field by field.
                let special = |d: u8| row.iter().flatten().any(|&c| matches!(c, b'"' | b'\n' | b'\r') || c == d);
                let mut ends = Vec::new();
                let mut end = 0;
                for field in row {
                    end += field.len();
                    ends.push(end);
                }
                match [b',', b';'].into_iter().find(|&d| !special(d)) {
                    Some(d) => b.push_joined(&row.join(&d), d, &ends, 0, 1),
                    None => b.push(row.iter().map(Vec::as_slice), 0, 1),
                }
            }
            // The first number is null: written empty, quoted when it is the only field.
            let numbers: Vec<Vec<u8>> = (0..rows.len())
                .map(|r| if r == 0 { Vec::new() } else { format!("-{r}.5").into_bytes() })
                .collect();
            let replaced = if replace == 2 { numbers } else { replaced };
            if replace > 0 {
                let mut column = Column::with_rows(rows.len());
                for v in &replaced {
                    column.push(Some(v.as_slice()).filter(|v| replace == 1 || !v.is_empty()));
                }
                b.replace_column(n - 1, column);
                if replace == 2 {
                    b.mark_canonical(n - 1, ColumnType::Float);
                }
            }
            // A column left out of the files (as a partition column is), if there is one
            // to spare: the runs of stored columns break there.
            let cols: Vec<usize> = (0..n).filter(|&c| n == 1 || c != skip).collect();
            let header: Vec<String> = cols.iter().map(|&i| if i == 1 { "a,b".into() } else { format!("c{i}") }).collect();
            let layout = FileColumns::new(cols.clone(), header.clone(), &vec![ColumnType::String; cols.len()]);
            // A small buffer: rows spill to the file between writes too.
            let mut enc = encoder_at(&path, Format::Csv, 64);
            enc.start(&layout.header).unwrap();
            enc.write_rows(&layout, &b, &(0..rows.len()).collect::<Vec<_>>(), &runs(&layout, &b)).unwrap();
            let cells: Vec<&[u8]> = rows[0].iter().map(Vec::as_slice).collect();
            enc.write_cells(&cells).unwrap();
            enc.close().unwrap();

            let mut want = csv::WriterBuilder::new().flexible(true).from_writer(Vec::new());
            want.write_record(&header).unwrap();
            for (r, row) in rows.iter().enumerate() {
                let mut record: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
                if replace > 0 {
                    record[n - 1] = &replaced[r];
                }
                want.write_record(cols.iter().map(|&c| record[c])).unwrap();
            }
            want.write_record(&cells).unwrap();
            let want = want.into_inner().unwrap();
            let got = std::fs::read(&path).unwrap();
            prop_assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want));
        }
    }

    #[test]
    fn json_lines_type_their_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let mut b = RecordBatch::new(4);
        b.push_cell(Some(b"7"));
        b.push_cell(Some(b"say \"hi\"\n"));
        b.push_cell(None);
        b.push_cell(Some(b"true"));
        b.end_row(0, 2);
        let types =
            ["int", "string", "decimal(5,2)", "bool"].map(|t| t.parse::<ColumnType>().unwrap());
        let names = ["id", "note", "amount", "ok"].map(String::from).to_vec();
        let layout = FileColumns::new(vec![0, 1, 2, 3], names, &types);
        let mut enc = encoder_at(&path, Format::Jsonl, 1024);
        enc.start(&layout.header).unwrap();
        enc.write_rows(&layout, &b, &[0], &runs(&layout, &b))
            .unwrap();
        enc.close().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "{\"id\":7,\"note\":\"say \\\"hi\\\"\\n\",\"amount\":null,\"ok\":true}\n"
        );
        let parsed: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(parsed["id"], 7);
    }

    #[test]
    fn rows_kept_encoded_follow_the_rows_the_encoder_already_holds() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = RecordBatch::new(2);
        for (id, note) in [(&b"1"[..], &b"a,b"[..]), (b"2", b"c")] {
            b.push_cell(Some(id));
            b.push_cell(Some(note));
            b.end_row(0, 2);
        }
        let types = ["int", "string"].map(|t| t.parse::<ColumnType>().unwrap());
        let layout = FileColumns::new(
            vec![0, 1],
            ["id", "note"].map(String::from).to_vec(),
            &types,
        );
        let runs = runs(&layout, &b);
        for (format, expected) in [
            (Format::Csv, "id,note\n1,\"a,b\"\n2,c\n"),
            (
                Format::Jsonl,
                "{\"id\":1,\"note\":\"a,b\"}\n{\"id\":2,\"note\":\"c\"}\n",
            ),
        ] {
            let path = dir.path().join("x");
            let mut enc = encoder_at(&path, format, 1024);
            enc.start(&layout.header).unwrap();
            // Row 0 waits in the write buffer; row 1 was kept encoded, as a closed
            // file keeps it, and must land after it.
            enc.write_rows(&layout, &b, &[0], &runs).unwrap();
            let mut kept = Vec::new();
            push_row(format, &mut kept, &layout, &b, 1, &runs).unwrap();
            enc.write_encoded(&kept).unwrap();
            enc.close().unwrap();
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                expected,
                "{format:?}"
            );
        }
        assert!(push_row(Format::Parquet, &mut Vec::new(), &layout, &b, 0, &runs).is_err());
    }

    #[test]
    fn compressed_files_reopened_for_appending_decode_whole() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        for (compression, name) in [
            (Compression::Gzip, "x.csv.gz"),
            (Compression::Zstd, "x.csv.zst"),
        ] {
            let path = dir.path().join(name);
            let mut enc =
                Encoder::new(Format::Csv, compression, File::create(&path).unwrap(), 64).unwrap();
            enc.start(&["a"]).unwrap();
            enc.write_cells(&[b"1"]).unwrap();
            enc.close().unwrap();
            let file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            let mut enc = Encoder::new(Format::Csv, compression, file, 64).unwrap();
            enc.write_cells(&[b"2"]).unwrap();
            enc.close().unwrap();
            let raw = std::fs::read(&path).unwrap();
            let mut text = String::new();
            match compression {
                Compression::Gzip => flate2::read::MultiGzDecoder::new(&raw[..])
                    .read_to_string(&mut text)
                    .unwrap(),
                _ => zstd::stream::read::Decoder::new(&raw[..])
                    .unwrap()
                    .read_to_string(&mut text)
                    .unwrap(),
            };
            assert_eq!(text, "a\n1\n2\n", "{name}");
        }
    }
}
