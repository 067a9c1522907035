//! Merging CSV and JSON lines files: their bytes, decompressed, one after another (a CSV
//! file's header once), compressed again as they were. Rows are never parsed and written
//! again, only parsed to be counted and summed into the [`Digest`].

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::{Digest, FileKind};
use crate::core::options::{Compression, Format};
use crate::core::sys::fsutil;

/// The header line of a CSV file, as written.
pub(super) fn header(kind: FileKind, path: &Path) -> Result<String> {
    let bytes = decoded(kind, path)?;
    let end = header_end(&bytes, path)?;
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// Writes the rows of `inputs` into a new file `out` and fsyncs it; returns the digest
/// of the rows read and the file's size.
pub(super) fn merge(kind: FileKind, inputs: &[PathBuf], out: &Path) -> Result<(Digest, u64)> {
    let file = fsutil::create_new(out)?;
    let mut writer = Encoder::new(BufWriter::new(file), kind.compression)?;
    let mut digest = Digest::default();
    let mut header: Option<Vec<u8>> = None;
    for input in inputs {
        let bytes = decoded(kind, input)?;
        let body = match kind.format {
            Format::Csv => {
                let end = header_end(&bytes, input)?;
                match &header {
                    None => {
                        writer.write_all(&bytes[..end])?;
                        header = Some(bytes[..end].to_vec());
                    }
                    Some(first) if first[..] == bytes[..end] => {}
                    Some(_) => bail!(
                        "{} has another header than the files merged before it",
                        input.display()
                    ),
                }
                &bytes[end..]
            }
            _ => &bytes[..],
        };
        add_rows(kind, body, &mut digest)
            .with_context(|| format!("cannot read the rows of {}", input.display()))?;
        writer.write_all(body)?;
        if body.last().is_some_and(|b| *b != b'\n') {
            writer.write_all(b"\n")?;
        }
    }
    let file = writer.finish()?;
    fsutil::sync_file(&file, out)?;
    let size = file
        .metadata()
        .with_context(|| format!("cannot stat {}", out.display()))?
        .len();
    Ok((digest, size))
}

/// The digest of the rows of a file, read from disk.
pub(super) fn digest(kind: FileKind, path: &Path) -> Result<Digest> {
    let bytes = decoded(kind, path)?;
    let body = match kind.format {
        Format::Csv => &bytes[header_end(&bytes, path)?..],
        _ => &bytes[..],
    };
    let mut digest = Digest::default();
    add_rows(kind, body, &mut digest)
        .with_context(|| format!("cannot read the rows of {}", path.display()))?;
    Ok(digest)
}

/// Adds each row of `body` (no header) to `digest`: a CSV record's fields, each with its
/// length, or a JSON line's bytes.
fn add_rows(kind: FileKind, body: &[u8], digest: &mut Digest) -> Result<()> {
    match kind.format {
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(body);
            let mut record = csv::ByteRecord::new();
            let mut row = Vec::new();
            while reader.read_byte_record(&mut record)? {
                row.clear();
                for field in record.iter() {
                    row.extend_from_slice(&(field.len() as u64).to_le_bytes());
                    row.extend_from_slice(field);
                }
                digest.add(&row);
            }
        }
        _ => {
            for line in body.split(|b| *b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if !line.is_empty() {
                    digest.add(line);
                }
            }
        }
    }
    Ok(())
}

/// Where a CSV file's first record (its header) ends, terminator included.
fn header_end(bytes: &[u8], path: &Path) -> Result<usize> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut record = csv::ByteRecord::new();
    if !reader
        .read_byte_record(&mut record)
        .with_context(|| format!("cannot read the header of {}", path.display()))?
    {
        bail!("{} has no header line", path.display());
    }
    Ok(usize::try_from(reader.position().byte())?.min(bytes.len()))
}

/// The whole content of a file, decompressed. The files merged are small (that is why
/// they are merged: below the target size), so each is read whole, one at a time.
fn decoded(kind: FileKind, path: &Path) -> Result<Vec<u8>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut bytes = Vec::new();
    let read = match kind.compression {
        Compression::None | Compression::Snappy => {
            std::io::BufReader::new(file).read_to_end(&mut bytes)
        }
        Compression::Gzip => flate2::read::MultiGzDecoder::new(file).read_to_end(&mut bytes),
        Compression::Zstd => zstd::stream::read::Decoder::new(file)?.read_to_end(&mut bytes),
    };
    read.with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes)
}

/// A new file's byte stream, compressed as its kind says.
enum Encoder {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

impl Encoder {
    fn new(out: BufWriter<File>, compression: Compression) -> Result<Encoder> {
        Ok(match compression {
            Compression::None | Compression::Snappy => Encoder::Plain(out),
            Compression::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                out,
                flate2::Compression::default(),
            )),
            Compression::Zstd => Encoder::Zstd(zstd::stream::write::Encoder::new(out, 3)?),
        })
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        match self {
            Encoder::Plain(w) => w.write_all(bytes),
            Encoder::Gzip(w) => w.write_all(bytes),
            Encoder::Zstd(w) => w.write_all(bytes),
        }
        .context("cannot write the merged file")
    }

    /// Ends the stream and flushes it; the file, not yet fsynced.
    fn finish(self) -> Result<File> {
        let buffered = match self {
            Encoder::Plain(w) => w,
            Encoder::Gzip(w) => w.finish()?,
            Encoder::Zstd(w) => w.finish()?,
        };
        buffered
            .into_inner()
            .map_err(|e| e.into_error())
            .context("cannot write the merged file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8], compression: Compression) -> PathBuf {
        let path = dir.join(name);
        let file = File::create(&path).unwrap();
        let mut encoder = Encoder::new(BufWriter::new(file), compression).unwrap();
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap();
        path
    }

    fn csv(compression: Compression) -> FileKind {
        FileKind {
            format: Format::Csv,
            compression,
        }
    }

    #[test]
    fn csv_files_merge_under_one_header_with_quoted_newlines_and_compression_kept() {
        let dir = tempfile::tempdir().unwrap();
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let kind = csv(compression);
            let a = write(
                dir.path(),
                "a",
                b"id,note\n1,\"two\nlines\"\n2,x\n",
                compression,
            );
            // No final line feed: the merge adds one before the next file's rows.
            let b = write(dir.path(), "b", b"id,note\n3,\"a,b\"", compression);
            let out = dir.path().join(format!("out.{}", kind.extension()));
            let (merged, size) = merge(kind, &[a.clone(), b.clone()], &out).unwrap();
            assert_eq!(merged.rows, 3);
            assert_eq!(size, std::fs::metadata(&out).unwrap().len());
            assert_eq!(
                decoded(kind, &out).unwrap(),
                b"id,note\n1,\"two\nlines\"\n2,x\n3,\"a,b\"\n"
            );
            assert_eq!(super::super::digest(kind, &out).unwrap(), merged);
            let mut both = digest(kind, &a).unwrap();
            let b = digest(kind, &b).unwrap();
            both.rows += b.rows;
            both.sum = both.sum.wrapping_add(b.sum);
            assert_eq!(both, merged);
            std::fs::remove_file(&out).unwrap();
        }
    }

    #[test]
    fn csv_files_with_other_headers_are_not_merged() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a", b"id,note\n1,x\n", Compression::None);
        let b = write(
            dir.path(),
            "b",
            b"id,note,extra\n1,x,y\n",
            Compression::None,
        );
        assert_eq!(header(csv(Compression::None), &a).unwrap(), "id,note\n");
        let err = merge(csv(Compression::None), &[a, b], &dir.path().join("out.csv"));
        assert!(format!("{:#}", err.unwrap_err()).contains("another header"));
    }

    #[test]
    fn json_lines_count_every_nonempty_line() {
        let dir = tempfile::tempdir().unwrap();
        let kind = FileKind {
            format: Format::Jsonl,
            compression: Compression::Gzip,
        };
        let a = write(
            dir.path(),
            "a",
            b"{\"a\":1}\n{\"a\":2}\n",
            Compression::Gzip,
        );
        let b = write(dir.path(), "b", b"{\"a\":3}\r\n", Compression::Gzip);
        let out = dir.path().join("out.jsonl.gz");
        let (digest, _) = merge(kind, &[a, b], &out).unwrap();
        assert_eq!(digest.rows, 3);
        assert_eq!(super::super::digest(kind, &out).unwrap(), digest);
    }

    #[test]
    fn a_merged_file_never_replaces_one_already_there() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a", b"id\n1\n", Compression::None);
        let out = write(dir.path(), "out.csv", b"id\n9\n", Compression::None);
        assert!(merge(csv(Compression::None), &[a], &out).is_err());
        assert_eq!(std::fs::read(&out).unwrap(), b"id\n9\n");
    }
}
