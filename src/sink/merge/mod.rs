//! Merging a partition's small files into one, for `--compact` (`ops/compact/`): the
//! same rows, in the same order, in the same format and compression.
//!
//! Every merge checks itself before anyone relies on it: the inputs' rows are counted
//! and summed into a [`Digest`] (a checksum of the multiset of rows) as they are read,
//! the new file is written and fsynced, then read back from disk and digested again; a
//! difference fails the compaction before its commit point, so the table never changes.

#[cfg(feature = "parquet")]
mod parquet;
mod text;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::core::options::{Compression, Format};

/// What kind of data file a name is, by its extension; the kinds a table of `format`
/// writes (a file of another kind in a partition is no file of the table's, and is
/// left alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileKind {
    pub(crate) format: Format,
    /// The compression its suffix says (`.gz`, `.zst`); Parquet's is inside the file.
    pub(crate) compression: Compression,
}

impl FileKind {
    /// The kind of file `name` is, if it is a data file of a table of `format`.
    pub(crate) fn of(name: &str, format: Format) -> Option<FileKind> {
        if name.starts_with('.') || name.starts_with('_') {
            return None;
        }
        let (stem, compression) = if let Some(stem) = name.strip_suffix(".gz") {
            (stem, Compression::Gzip)
        } else if let Some(stem) = name.strip_suffix(".zst") {
            (stem, Compression::Zstd)
        } else {
            (name, Compression::None)
        };
        let extension = match format {
            Format::Csv => ".csv",
            Format::Jsonl => ".jsonl",
            Format::Parquet => ".parquet",
        };
        let parquet_compressed = format == Format::Parquet && compression != Compression::None;
        (stem.ends_with(extension) && !parquet_compressed).then_some(FileKind {
            format,
            compression,
        })
    }

    /// The extension of a new file of this kind (`csv.gz`, `parquet`).
    pub(crate) fn extension(self) -> String {
        let ext = match self.format {
            Format::Csv => "csv",
            Format::Jsonl => "jsonl",
            Format::Parquet => "parquet",
        };
        format!("{ext}{}", self.compression.suffix())
    }

    /// What must be the same in two files of this kind for them to be merged: a CSV
    /// file's header line, a Parquet file's schema (JSON lines carry their keys on every
    /// row: nothing).
    pub(crate) fn shape(self, path: &Path) -> Result<String> {
        match self.format {
            Format::Csv => text::header(self, path),
            Format::Jsonl => Ok(String::new()),
            #[cfg(feature = "parquet")]
            Format::Parquet => parquet::shape(path),
            #[cfg(not(feature = "parquet"))]
            Format::Parquet => bail!(
                "{}: this ingest was built without the `parquet` feature",
                path.display()
            ),
        }
    }
}

/// The shape [`FileKind::shape`] gives a Parquet file of `size` bytes, from its last
/// bytes `tail` (a ranged read of a file in a bucket); `Ok(Err(n))` when its footer needs
/// the last `n` bytes.
#[cfg(feature = "s3")]
pub(crate) fn parquet_shape_of_tail(
    tail: &bytes::Bytes,
    size: u64,
) -> Result<std::result::Result<String, usize>> {
    #[cfg(feature = "parquet")]
    return parquet::shape_of_tail(tail, size);
    #[cfg(not(feature = "parquet"))]
    bail!(
        "this ingest was built without the `parquet` feature ({size} bytes, {} read)",
        tail.len()
    )
}

/// A checksum of a multiset of rows: how many, and the wrapping sum of a 128-bit hash of
/// each row's values (so it does not depend on their order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Digest {
    pub(crate) rows: u64,
    sum: u128,
}

impl Digest {
    fn add(&mut self, row: &[u8]) {
        self.rows += 1;
        self.sum = self.sum.wrapping_add(xxhash_rust::xxh3::xxh3_128(row));
    }
}

/// A merged file, written, fsynced and checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Merged {
    pub(crate) rows: u64,
    pub(crate) size: u64,
}

/// Writes the rows of `inputs` (all of `kind`, and of one shape) into a new file at
/// `out`, fsyncs it, reads it back and checks that it holds exactly their rows.
/// `partition` names the files' partition in errors.
pub(crate) fn merge(
    kind: FileKind,
    inputs: &[PathBuf],
    out: &Path,
    partition: &str,
) -> Result<Merged> {
    let (wanted, size) = match kind.format {
        Format::Csv | Format::Jsonl => text::merge(kind, inputs, out)?,
        #[cfg(feature = "parquet")]
        Format::Parquet => parquet::merge(inputs, out)?,
        #[cfg(not(feature = "parquet"))]
        Format::Parquet => bail!("this ingest was built without the `parquet` feature"),
    };
    let got = digest(kind, out)?;
    if got != wanted {
        bail!(
            "the merged file of partition {partition} does not hold the rows of the {} files \
             it replaces ({} rows read back, {} expected, or their checksums differ); the \
             partition was not changed",
            inputs.len(),
            got.rows,
            wanted.rows
        );
    }
    Ok(Merged {
        rows: wanted.rows,
        size,
    })
}

/// The digest of the rows of one file of `kind`, as read from disk.
pub(crate) fn digest(kind: FileKind, path: &Path) -> Result<Digest> {
    match kind.format {
        Format::Csv | Format::Jsonl => text::digest(kind, path),
        #[cfg(feature = "parquet")]
        Format::Parquet => parquet::digest(path),
        #[cfg(not(feature = "parquet"))]
        Format::Parquet => bail!("this ingest was built without the `parquet` feature"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_by_the_extensions_a_table_of_the_format_writes() {
        let csv = |c| {
            Some(FileKind {
                format: Format::Csv,
                compression: c,
            })
        };
        assert_eq!(
            FileKind::of("part-a.csv", Format::Csv),
            csv(Compression::None)
        );
        assert_eq!(
            FileKind::of("part-a.csv.gz", Format::Csv),
            csv(Compression::Gzip)
        );
        assert_eq!(
            FileKind::of("part-a.csv.zst", Format::Csv),
            csv(Compression::Zstd)
        );
        assert_eq!(FileKind::of("part-a.jsonl", Format::Csv), None);
        assert_eq!(FileKind::of(".part-a.csv", Format::Csv), None);
        assert_eq!(FileKind::of("_part-a.csv", Format::Csv), None);
        assert_eq!(FileKind::of("part-a.csv.inprogress", Format::Csv), None);
        assert_eq!(FileKind::of("part-a.parquet.gz", Format::Parquet), None);
        assert_eq!(
            FileKind::of("part-a.parquet", Format::Parquet).map(|k| k.extension()),
            Some("parquet".to_string())
        );
        assert_eq!(
            csv(Compression::Zstd).map(|k| k.extension()),
            Some("csv.zst".into())
        );
    }

    #[test]
    fn a_digest_counts_rows_and_ignores_their_order() {
        let mut a = Digest::default();
        let mut b = Digest::default();
        for row in [&b"x"[..], b"y", b"y"] {
            a.add(row);
        }
        for row in [&b"y"[..], b"x", b"y"] {
            b.add(row);
        }
        assert_eq!(a, b);
        assert_eq!(a.rows, 3);
        b.add(b"z");
        assert_ne!(a, b);
        let mut c = Digest::default();
        for row in [&b"x"[..], b"y", b"z"] {
            c.add(row);
        }
        assert_ne!(a, c, "same count, other rows");
    }
}
