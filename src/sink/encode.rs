//! Output encodings of staged files: CSV with a header row, or JSON lines.
//!
//! JSON lines write one object per row with the (non-partition) columns as keys: typed
//! numbers and booleans (from a cast or derive) as JSON numbers and booleans, nulls as
//! `null`, everything else as strings.

use std::fs::File;
use std::io::{BufWriter, Write};

use anyhow::{Context, Result};

use crate::batch::RecordBatch;
use crate::options::{Compression, Format};
use crate::schema::ColumnType;

/// How each body column is written in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsonKind {
    /// A number or boolean: its canonical text is already valid JSON.
    Raw,
    Text,
}

/// The columns a staged file holds and how to spell them.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Column indices of the batch, in file order.
    pub cols: Vec<usize>,
    /// CSV header cells (and Parquet field names).
    pub header: Vec<String>,
    /// Column types (Parquet's typed columns; JSON's numbers and booleans).
    pub types: Vec<ColumnType>,
    /// `"name":` per column, JSON-escaped once.
    json_keys: Vec<Vec<u8>>,
    json_kinds: Vec<JsonKind>,
}

impl Layout {
    /// About the bytes row `row` takes in a file of `format`: fields, delimiters and the
    /// line end; a JSON line adds its keys, quotes and braces.
    pub fn row_bytes(&self, batch: &RecordBatch, row: usize, format: Format) -> u64 {
        let mut bytes = 0;
        for &col in &self.cols {
            let field = batch.field(row, col);
            bytes += field.len();
            // A quoted CSV field: two quotes, and each quote inside doubled.
            if format == Format::Csv
                && field
                    .iter()
                    .any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'))
            {
                bytes += 2 + field.iter().filter(|&&b| b == b'"').count();
            }
        }
        bytes += match format {
            Format::Jsonl => {
                self.json_keys.iter().map(Vec::len).sum::<usize>() + 3 * self.cols.len() + 2
            }
            _ => self.cols.len(),
        };
        bytes as u64
    }

    /// A layout for columns `cols` with these names and types.
    pub fn new(cols: Vec<usize>, names: Vec<String>, types: &[ColumnType]) -> Layout {
        let json_keys = names
            .iter()
            .map(|n| {
                let mut key = serde_json::to_vec(n).unwrap_or_else(|_| b"\"\"".to_vec());
                key.push(b':');
                key
            })
            .collect();
        let json_kinds = types
            .iter()
            .map(|t| {
                if t.is_numeric() || matches!(t, ColumnType::Bool | ColumnType::Json) {
                    JsonKind::Raw
                } else {
                    JsonKind::Text
                }
            })
            .collect();
        Layout {
            cols,
            header: names,
            types: types.to_vec(),
            json_keys,
            json_kinds,
        }
    }
}

/// The file under the encoder, counting the bytes that reach it (for
/// `--target-file-size`, which therefore counts compressed bytes).
pub struct Counted {
    file: File,
    written: u64,
}

impl Counted {
    /// Counts what is written to `file`.
    pub fn new(file: File) -> Counted {
        Counted { file, written: 0 }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The file.
    pub fn into_file(self) -> File {
        self.file
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The byte stream of a staged file: plain or compressed. Reopening a closed file for
/// appending starts a new gzip member or zstd frame; readers decode concatenations.
pub enum Out {
    Plain(Counted),
    Gzip(flate2::write::GzEncoder<Counted>),
    Zstd(zstd::stream::write::Encoder<'static, Counted>),
}

impl Out {
    fn new(file: File, compression: Compression) -> Result<Out> {
        let counted = Counted::new(file);
        Ok(match compression {
            Compression::None => Out::Plain(counted),
            Compression::Gzip => Out::Gzip(flate2::write::GzEncoder::new(
                counted,
                flate2::Compression::default(),
            )),
            Compression::Zstd => Out::Zstd(zstd::stream::write::Encoder::new(counted, 3)?),
            Compression::Snappy => anyhow::bail!("snappy compresses Parquet files only"),
        })
    }

    fn written(&self) -> u64 {
        match self {
            Out::Plain(c) => c.written,
            Out::Gzip(g) => g.get_ref().written,
            Out::Zstd(z) => z.get_ref().written,
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

/// A staged file's encoder.
pub enum Encoder {
    /// Boxed: the CSV writer's state is ten times the size of a `BufWriter`.
    Csv(Box<CsvOut>),
    Json(BufWriter<Out>),
    #[cfg(feature = "parquet")]
    Parquet(Box<super::parquet::ParquetPart>),
}

impl Encoder {
    /// An encoder writing `format` to `file` with a `buffer`-byte write buffer.
    pub fn new(
        format: Format,
        compression: Compression,
        file: File,
        buffer: usize,
    ) -> Result<Encoder> {
        let out = Out::new(file, compression)?;
        Ok(match format {
            Format::Jsonl => Encoder::Json(BufWriter::with_capacity(buffer, out)),
            _ => Encoder::Csv(Box::new(CsvOut {
                writer: csv::WriterBuilder::new()
                    .buffer_capacity(buffer)
                    .from_writer(out),
                row: csv::ByteRecord::new(),
            })),
        })
    }

    /// A Parquet file with the layout's columns, created at `path` when first needed.
    #[cfg(feature = "parquet")]
    pub fn parquet(
        path: std::path::PathBuf,
        layout: &Layout,
        compression: Compression,
        target_size: Option<u64>,
    ) -> Result<Encoder> {
        Ok(Encoder::Parquet(Box::new(
            super::parquet::ParquetPart::new(path, layout, compression, target_size)?,
        )))
    }

    /// True when the encoder holds a file descriptor only part of the time and needs no
    /// place under the open-file cap (Parquet: see `ParquetPart`).
    pub fn opens_lazily(&self) -> bool {
        #[cfg(feature = "parquet")]
        if let Encoder::Parquet(_) = self {
            return true;
        }
        false
    }

    /// Bytes that reached the file so far (the encoder's own buffer not counted).
    pub fn written(&self) -> u64 {
        match self {
            Encoder::Csv(w) => w.writer.get_ref().written(),
            Encoder::Json(w) => w.get_ref().written(),
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => p.written(),
        }
    }

    /// Writes what a new file starts with (the CSV header; nothing for JSON lines).
    pub fn start<H: AsRef<[u8]>>(&mut self, header: &[H]) -> Result<()> {
        if let Encoder::Csv(w) = self {
            w.writer.write_record(header)?;
        }
        Ok(())
    }

    /// Writes rows `rows` of `batch`, in that order. Hot path: no allocation per row.
    pub fn write_rows(
        &mut self,
        layout: &Layout,
        batch: &RecordBatch,
        rows: &[usize],
    ) -> Result<()> {
        match self {
            // Nulls are written as empty fields: CSV has no other spelling for them.
            Encoder::Csv(w) => {
                let CsvOut {
                    writer,
                    row: record,
                } = &mut **w;
                for &row in rows {
                    record.clear();
                    for &c in &layout.cols {
                        record.push_field(batch.field(row, c));
                    }
                    writer.write_byte_record(record)?;
                }
            }
            Encoder::Json(w) => {
                for &row in rows {
                    write_json_row(w, layout, batch, row)?;
                }
            }
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => p.write_rows(layout, batch, rows)?,
        }
        Ok(())
    }

    /// Writes a record of raw cells (for rejects files, which are always CSV).
    pub fn write_cells(&mut self, cells: &[&[u8]]) -> Result<()> {
        match self {
            Encoder::Csv(w) => w.writer.write_record(cells)?,
            _ => anyhow::bail!("rejects files are CSV"),
        }
        Ok(())
    }

    /// Flushes, ends the compressed stream, and closes the file.
    pub fn close(self) -> Result<()> {
        self.finish()?.wait().map(drop)
    }

    /// Starts finishing the file: flushed and closed at once for CSV and JSON lines; a
    /// Parquet part's encoder thread goes on writing its last row group and footer, and
    /// [`Finished::wait`] collects the file.
    pub fn finish(self) -> Result<Finished> {
        let out = match self {
            Encoder::Csv(w) => w
                .writer
                .into_inner()
                .map_err(|e| anyhow::Error::new(e.into_error()))?,
            Encoder::Json(w) => w
                .into_inner()
                .map_err(|e| anyhow::Error::new(e.into_error()))?,
            #[cfg(feature = "parquet")]
            Encoder::Parquet(p) => return Ok(Finished::Parquet(p.finish()?)),
        };
        Ok(Finished::File(out.finish()?))
    }
}

/// A CSV file's writer and the record it assembles each row in: `write_byte_record`,
/// given a whole record that fits its buffer, copies each field that needs no quotes
/// straight in, which the field-at-a-time `write_record` does through `csv_core`'s state
/// machine a byte at a time (a third of the sink thread's time on `bench/bench.py`'s
/// load). The same crate, the same bytes out.
pub struct CsvOut {
    writer: csv::Writer<Out>,
    row: csv::ByteRecord,
}

/// Writes row `row` of `batch` as one JSON object on its line.
fn write_json_row(
    w: &mut BufWriter<Out>,
    layout: &Layout,
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
pub enum Finished {
    File(File),
    #[cfg(feature = "parquet")]
    Parquet(super::parquet::Tail),
}

impl Finished {
    /// The complete file, still open (CSV, JSON lines), or `None` once a Parquet part's
    /// encoder has written the footer and closed it.
    pub fn wait(self) -> Result<Option<File>> {
        match self {
            Finished::File(file) => Ok(Some(file)),
            #[cfg(feature = "parquet")]
            Finished::Parquet(tail) => tail.wait().map(|()| None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let layout = Layout::new(vec![0, 1, 2, 3], names, &types);
        let mut enc = Encoder::new(
            Format::Jsonl,
            Compression::None,
            File::create(&path).unwrap(),
            1024,
        )
        .unwrap();
        enc.start(&layout.header).unwrap();
        enc.write_rows(&layout, &b, &[0]).unwrap();
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
