//! One manifest segment: an immutable, sorted file of loaded inputs, searched in place.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! "INGESTS\x02"
//! entry frames, sorted by path        (journal framing: length, CRC-32, JSON Entry)
//! path index: count × u64             offset of each entry frame, in path order
//! content index: count × 32 bytes     (size u64, hash u128, frame offset u64),
//!                                     sorted by (size, hash)
//! path filter: BLOOM_BITS_PER_ENTRY × count bits, rounded up to whole u64 words
//! size filter: as many words, of the entries' sizes
//! footer: path index offset u64, content index offset u64, path filter offset u64,
//!         size filter offset u64, count u64, CRC-32 of those 40 bytes u32, "INGX"
//! ```
//!
//! A lookup asks the segment's Bloom filter of paths first (read once, at 1.25 bytes per
//! entry: about 1% false positives), so a path that is not in the segment (a new input;
//! a loaded one that lives in another segment) costs no read at all; one that may be
//! there is a binary search through the path index with positioned reads, a few dozen
//! small reads whatever the segment's size. The size filter does the same for the
//! question every new input asks (could it be a copy of a loaded one?), so a run of new
//! inputs reads nothing but the filters. Both matter most when the segment is an object
//! read in pages (`storage/paged.rs`).
//!
//! Version 1 (`"INGESTS\x01"`, written before the size filter) has no size filter and a
//! 32-byte footer body without its offset; it is read as it is, and a merge rewrites it.
//! A segment is written whole to a temporary name, fsynced, renamed into place and its
//! directory fsynced before the manifest's head names it, so a named segment is complete.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::Entry;
use crate::core::sys::fsutil;
use crate::state::framed::encode_frame;
use crate::storage::{open_read_at, ReadAt};

const MAGIC: &[u8; 8] = b"INGESTS\x02";
const MAGIC_V1: &[u8; 8] = b"INGESTS\x01";
const TAIL: &[u8; 4] = b"INGX";
const FOOTER: u64 = 48;
const FOOTER_V1: u64 = 40;
const BLOOM_BITS_PER_ENTRY: u64 = 10;
const BLOOM_HASHES: u64 = 7;
const CONTENT_RECORD: u64 = 32;
const FRAME_HEADER: u64 = 8;
/// Bytes read at once for an entry: its frame header and (usually) all of its payload.
const ENTRY_READ: u64 = 512;
/// Upper bound on binary-search steps (a u64 range halves to nothing in 64).
const SEARCH_STEPS: usize = 65;

/// An open segment.
#[derive(Debug)]
pub(crate) struct Segment {
    bytes: Arc<dyn ReadAt>,
    path: PathBuf,
    count: u64,
    path_index: u64,
    content_index: u64,
    /// The path filter's words.
    filter: Vec<u64>,
    /// The size filter's words (`None` in a version-1 segment).
    sizes: Option<Vec<u64>>,
}

/// The filter bits a path sets (double hashing of one 128-bit hash).
fn filter_bits(path: &str, words: u64) -> impl Iterator<Item = u64> {
    filter_bits_of(xxhash_rust::xxh3::xxh3_128(path.as_bytes()), words)
}

fn size_bits(size: u64, words: u64) -> impl Iterator<Item = u64> {
    filter_bits_of(xxhash_rust::xxh3::xxh3_128(&size.to_le_bytes()), words)
}

/// True when every bit is set in `filter`.
fn all_set(filter: &[u64], mut bits: impl Iterator<Item = u64>) -> bool {
    bits.all(|bit| filter[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
}

fn filter_bits_of(hash: u128, words: u64) -> impl Iterator<Item = u64> {
    let (h1, h2) = (hash as u64, ((hash >> 64) as u64) | 1);
    let bits = words * 64;
    (0..BLOOM_HASHES).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
}

fn filter_words(count: u64) -> u64 {
    (count * BLOOM_BITS_PER_ENTRY).div_ceil(64).max(1)
}

/// An entry's place in the content index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Content {
    size: u64,
    hash: u128,
    offset: u64,
}

impl Segment {
    /// Opens a segment (a file, or a reference to one in a bucket) and checks its
    /// footer.
    pub(crate) fn open(path: &Path) -> Result<Segment> {
        let bytes = open_read_at(path)
            .with_context(|| format!("cannot open manifest segment {}", path.display()))?;
        Segment::over(Arc::from(bytes), path)
    }

    /// The segment in `bytes` (read from `path`, the name its messages give).
    fn over(bytes: Arc<dyn ReadAt>, path: &Path) -> Result<Segment> {
        let damaged = || {
            format!(
                "manifest segment {} is damaged; restore it from a backup",
                path.display()
            )
        };
        let len = bytes.size().with_context(damaged)?;
        let mut magic = [0; 8];
        bytes.read_exact_at(&mut magic, 0).with_context(damaged)?;
        let footer_len = match &magic {
            MAGIC => FOOTER,
            MAGIC_V1 => FOOTER_V1,
            _ => bail!(damaged()),
        };
        let Some(footer_at) = len
            .checked_sub(footer_len)
            .filter(|&at| at >= MAGIC.len() as u64)
        else {
            bail!(damaged());
        };
        let mut footer = vec![0; footer_len as usize];
        bytes
            .read_exact_at(&mut footer, footer_at)
            .with_context(damaged)?;
        let body = footer_len as usize - 8;
        let word =
            |i: usize| u64::from_le_bytes(footer[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(footer[body..body + 4].try_into().unwrap_or_default());
        if &footer[body + 4..] != TAIL || crc32fast::hash(&footer[..body]) != crc {
            bail!(damaged());
        }
        let (path_index, content_index, filter_at) = (word(0), word(1), word(2));
        let (sizes_at, count) = if footer_len == FOOTER {
            (Some(word(3)), word(4))
        } else {
            (None, word(3))
        };
        let words = filter_words(count);
        let filters_end = filter_at + 8 * words * (1 + u64::from(sizes_at.is_some()));
        let consistent = path_index >= MAGIC.len() as u64
            && content_index == path_index + 8 * count
            && filter_at == content_index + CONTENT_RECORD * count
            && sizes_at.is_none_or(|at| at == filter_at + 8 * words)
            && filters_end == footer_at;
        if !consistent {
            bail!(damaged());
        }
        let mut raw = vec![0; (filters_end - filter_at) as usize];
        bytes
            .read_exact_at(&mut raw, filter_at)
            .with_context(damaged)?;
        let mut words_of = raw
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()));
        let filter = words_of.by_ref().take(words as usize).collect();
        let sizes = sizes_at.map(|_| words_of.collect());
        Ok(Segment {
            bytes,
            path: path.to_path_buf(),
            count,
            path_index,
            content_index,
            filter,
            sizes,
        })
    }

    /// Entries in the segment.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    fn read_u64(&self, at: u64) -> Result<u64> {
        let mut word = [0; 8];
        self.bytes
            .read_exact_at(&mut word, at)
            .with_context(|| format!("cannot read manifest segment {}", self.path.display()))?;
        Ok(u64::from_le_bytes(word))
    }

    fn entry_at(&self, offset: u64) -> Result<Entry> {
        let damaged = || {
            format!(
                "manifest segment {} is damaged at byte {offset}",
                self.path.display()
            )
        };
        if offset + FRAME_HEADER > self.path_index {
            bail!(damaged());
        }
        // One read covers header and payload of a typical entry; a longer one takes two.
        let mut frame = vec![0; ENTRY_READ.min(self.path_index - offset) as usize];
        self.bytes
            .read_exact_at(&mut frame, offset)
            .with_context(damaged)?;
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as u64;
        let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if offset + FRAME_HEADER + len > self.path_index {
            bail!(damaged());
        }
        let total = (FRAME_HEADER + len) as usize;
        if frame.len() < total {
            let have = frame.len();
            frame.resize(total, 0);
            self.bytes
                .read_exact_at(&mut frame[have..], offset + have as u64)
                .with_context(damaged)?;
        }
        let payload = &frame[FRAME_HEADER as usize..total];
        if crc32fast::hash(payload) != crc {
            bail!(damaged());
        }
        serde_json::from_slice(payload).with_context(damaged)
    }

    fn content_at(&self, i: u64) -> Result<Content> {
        let mut record = [0; CONTENT_RECORD as usize];
        self.bytes
            .read_exact_at(&mut record, self.content_index + CONTENT_RECORD * i)
            .with_context(|| format!("cannot read manifest segment {}", self.path.display()))?;
        let mut size = [0; 8];
        let mut hash = [0; 16];
        let mut offset = [0; 8];
        size.copy_from_slice(&record[..8]);
        hash.copy_from_slice(&record[8..24]);
        offset.copy_from_slice(&record[24..]);
        Ok(Content {
            size: u64::from_le_bytes(size),
            hash: u128::from_le_bytes(hash),
            offset: u64::from_le_bytes(offset),
        })
    }

    /// False when `path` is certainly not in the segment.
    fn may_hold(&self, path: &str) -> bool {
        all_set(&self.filter, filter_bits(path, self.filter.len() as u64))
    }

    /// The entry for `path`: the filter, then a binary search of the path index.
    pub(crate) fn find(&self, path: &str) -> Result<Option<Entry>> {
        if !self.may_hold(path) {
            return Ok(None);
        }
        let (mut lo, mut hi) = (0, self.count);
        for _ in 0..SEARCH_STEPS {
            if lo >= hi {
                return Ok(None);
            }
            let mid = lo + (hi - lo) / 2;
            let entry = self.entry_at(self.read_u64(self.path_index + 8 * mid)?)?;
            match entry.fingerprint.path.as_str().cmp(path) {
                std::cmp::Ordering::Equal => return Ok(Some(entry)),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        bail!(self.search_overrun())
    }

    /// The first content-index position at or after `(size, hash)`.
    fn lower_bound(&self, size: u64, hash: u128) -> Result<u64> {
        let (mut lo, mut hi) = (0, self.count);
        for _ in 0..SEARCH_STEPS {
            if lo >= hi {
                return Ok(lo);
            }
            let mid = lo + (hi - lo) / 2;
            let c = self.content_at(mid)?;
            if (c.size, c.hash) < (size, hash) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        bail!(self.search_overrun())
    }

    /// A binary search halves at least once per step: more steps than a u64 has bits
    /// means the search itself is broken, which must fail, never spin.
    fn search_overrun(&self) -> String {
        format!(
            "internal error: a search of manifest segment {} did not converge",
            self.path.display()
        )
    }

    /// True when some entry has this size: the size filter, then the content index.
    pub(crate) fn has_size(&self, size: u64) -> Result<bool> {
        if let Some(sizes) = &self.sizes {
            if !all_set(sizes, size_bits(size, sizes.len() as u64)) {
                return Ok(false);
            }
        }
        let at = self.lower_bound(size, 0)?;
        Ok(at < self.count && self.content_at(at)?.size == size)
    }

    /// The entries of this size and content hash.
    pub(crate) fn with_content(&self, size: u64, hash: u128) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let mut at = self.lower_bound(size, hash)?;
        while at < self.count {
            let c = self.content_at(at)?;
            if (c.size, c.hash) != (size, hash) {
                break;
            }
            out.push(self.entry_at(c.offset)?);
            at += 1;
        }
        Ok(out)
    }

    /// Every entry, in path order, read sequentially (for a merge).
    pub(crate) fn entries(&self) -> Result<Entries> {
        let sequential = Sequential {
            bytes: self.bytes.clone(),
            at: MAGIC.len() as u64,
            end: self.path_index,
        };
        Ok(Entries {
            reader: BufReader::with_capacity(256 * 1024, sequential),
            left: self.count,
            path: self.path.clone(),
        })
    }
}

/// Positioned reads as a `Read`, from `at` up to `end`.
struct Sequential {
    bytes: Arc<dyn ReadAt>,
    at: u64,
    end: u64,
}

impl Read for Sequential {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.end - self.at) as usize;
        self.bytes
            .read_exact_at(&mut buf[..n], self.at)
            .map_err(std::io::Error::other)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// A segment's entries in path order.
pub(crate) struct Entries {
    reader: BufReader<Sequential>,
    left: u64,
    path: PathBuf,
}

impl Iterator for Entries {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let path = &self.path;
        let mut read = || -> Result<Entry> {
            let damaged = || format!("manifest segment {} is damaged", path.display());
            let mut header = [0; FRAME_HEADER as usize];
            self.reader.read_exact(&mut header).with_context(damaged)?;
            let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
            let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
            let mut payload = vec![0; len];
            self.reader.read_exact(&mut payload).with_context(damaged)?;
            if crc32fast::hash(&payload) != crc {
                bail!(damaged());
            }
            serde_json::from_slice(&payload).with_context(damaged)
        };
        Some(read())
    }
}

/// Writes a segment of `entries` (strictly increasing paths) at `path`, durably: temp
/// file, fsync, rename, fsync of the directory. Memory: 40 bytes per entry for the
/// indexes, whatever the entries' size.
pub(crate) fn write(path: &Path, entries: impl Iterator<Item = Result<Entry>>) -> Result<u64> {
    let dir = path
        .parent()
        .context("a manifest segment needs a directory")?;
    let tmp = path.with_extension("seg.tmp");
    let file = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut out = BufWriter::with_capacity(256 * 1024, file);
    let fail = || format!("cannot write {}", tmp.display());
    out.write_all(MAGIC).with_context(fail)?;
    let mut at = MAGIC.len() as u64;
    let mut offsets = Vec::new();
    let mut contents = Vec::new();
    let mut frame = Vec::new();
    let mut last: Option<String> = None;
    let mut path_hashes: Vec<u128> = Vec::new();
    for entry in entries {
        let entry = entry?;
        if last
            .as_deref()
            .is_some_and(|l| l >= entry.fingerprint.path.as_str())
        {
            bail!(
                "manifest segment entries out of order at {}",
                entry.fingerprint.path
            );
        }
        frame.clear();
        encode_frame(&serde_json::to_vec(&entry)?, &mut frame);
        out.write_all(&frame).with_context(fail)?;
        offsets.push(at);
        contents.push(Content {
            size: entry.fingerprint.size,
            hash: u128::from_str_radix(&entry.hash, 16).with_context(|| {
                format!(
                    "bad content hash {:?} for {}",
                    entry.hash, entry.fingerprint.path
                )
            })?,
            offset: at,
        });
        at += frame.len() as u64;
        path_hashes.push(xxhash_rust::xxh3::xxh3_128(
            entry.fingerprint.path.as_bytes(),
        ));
        last = Some(entry.fingerprint.path);
    }
    contents.sort_unstable();
    let path_index = at;
    for offset in &offsets {
        out.write_all(&offset.to_le_bytes()).with_context(fail)?;
    }
    let content_index = path_index + 8 * offsets.len() as u64;
    for c in &contents {
        out.write_all(&c.size.to_le_bytes()).with_context(fail)?;
        out.write_all(&c.hash.to_le_bytes()).with_context(fail)?;
        out.write_all(&c.offset.to_le_bytes()).with_context(fail)?;
    }
    let filter_at = content_index + CONTENT_RECORD * offsets.len() as u64;
    let words = filter_words(offsets.len() as u64);
    let mut filter = vec![0u64; words as usize];
    for hash in path_hashes {
        for bit in filter_bits_of(hash, words) {
            filter[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }
    let mut sizes = vec![0u64; words as usize];
    for c in &contents {
        for bit in size_bits(c.size, words) {
            sizes[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }
    for word in filter.iter().chain(&sizes) {
        out.write_all(&word.to_le_bytes()).with_context(fail)?;
    }
    let sizes_at = filter_at + 8 * words;
    let mut footer = Vec::with_capacity(FOOTER as usize);
    footer.extend_from_slice(&path_index.to_le_bytes());
    footer.extend_from_slice(&content_index.to_le_bytes());
    footer.extend_from_slice(&filter_at.to_le_bytes());
    footer.extend_from_slice(&sizes_at.to_le_bytes());
    footer.extend_from_slice(&(offsets.len() as u64).to_le_bytes());
    footer.extend_from_slice(&crc32fast::hash(&footer).to_le_bytes());
    footer.extend_from_slice(TAIL);
    out.write_all(&footer).with_context(fail)?;
    let file = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(fail)?;
    fsutil::sync_file(&file, &tmp)?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    fsutil::sync_dir(dir)?;
    Ok(offsets.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::super::tests::entry;
    use super::*;
    use crate::core::hash::hash_hex;

    fn sample(n: u64) -> Vec<Entry> {
        let mut entries: Vec<Entry> = (0..n)
            .map(|i| {
                entry(
                    &format!("/d/{:08x}.csv", i * 7919 % 100_003),
                    i % 13,
                    i as u128 % 5,
                    "r",
                )
            })
            .collect();
        entries.sort_by(|a, b| a.fingerprint.path.cmp(&b.fingerprint.path));
        entries.dedup_by(|a, b| a.fingerprint.path == b.fingerprint.path);
        entries
    }

    #[test]
    fn every_entry_is_found_by_path_and_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.seg");
        let entries = sample(2000);
        let count = write(&path, entries.clone().into_iter().map(Ok)).unwrap();
        assert_eq!(count, entries.len() as u64);
        let segment = Segment::open(&path).unwrap();
        for e in &entries {
            let found = segment.find(&e.fingerprint.path).unwrap().unwrap();
            assert_eq!(found.fingerprint, e.fingerprint);
        }
        assert!(segment.find("/d/zzz.csv").unwrap().is_none());
        assert!(segment.find("").unwrap().is_none());
        for size in 0..13 {
            assert!(segment.has_size(size).unwrap(), "{size}");
            for hash in 0..5u128 {
                let want = entries
                    .iter()
                    .filter(|e| e.fingerprint.size == size && e.hash == hash_hex(hash))
                    .count();
                assert_eq!(segment.with_content(size, hash).unwrap().len(), want);
            }
        }
        assert!(!segment.has_size(13).unwrap());
        let read: Vec<String> = segment
            .entries()
            .unwrap()
            .map(|e| e.unwrap().fingerprint.path)
            .collect();
        let want: Vec<String> = entries.iter().map(|e| e.fingerprint.path.clone()).collect();
        assert_eq!(read, want);
    }

    #[test]
    fn the_path_filter_turns_away_nearly_every_absent_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.seg");
        let entries = sample(5000);
        write(&path, entries.clone().into_iter().map(Ok)).unwrap();
        let segment = Segment::open(&path).unwrap();
        assert!(entries
            .iter()
            .all(|e| segment.may_hold(&e.fingerprint.path)));
        let passed = (0..10_000)
            .filter(|i| segment.may_hold(&format!("/elsewhere/{i}.csv")))
            .count();
        // 10 bits and 7 hashes per entry: about 1% false positives.
        assert!(
            passed < 300,
            "{passed} of 10000 absent paths passed the filter"
        );
    }

    #[test]
    fn an_empty_segment_finds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.seg");
        write(&path, std::iter::empty()).unwrap();
        let segment = Segment::open(&path).unwrap();
        assert!(segment.find("/a").unwrap().is_none());
        assert!(!segment.has_size(0).unwrap());
        assert_eq!(segment.entries().unwrap().count(), 0);
    }

    #[test]
    fn absent_sizes_are_turned_away_by_the_filter_without_a_read() {
        #[derive(Debug)]
        struct Counted(Vec<u8>, std::sync::atomic::AtomicU64);
        impl ReadAt for Counted {
            fn size(&self) -> Result<u64> {
                Ok(self.0.len() as u64)
            }
            fn read_exact_at(&self, buf: &mut [u8], at: u64) -> Result<()> {
                self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                buf.copy_from_slice(&self.0[at as usize..at as usize + buf.len()]);
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.seg");
        // Sizes as real inputs have them: nearly all different.
        let entries: Vec<Entry> = (0..2000u64)
            .map(|i| entry(&format!("/d/{i:08}.csv"), 1_000 + 3 * i, i as u128, "r"))
            .collect();
        write(&path, entries.clone().into_iter().map(Ok)).unwrap();
        let counted = Arc::new(Counted(std::fs::read(&path).unwrap(), Default::default()));
        let segment = Segment::over(counted.clone(), &path).unwrap();
        let reads = || counted.1.load(std::sync::atomic::Ordering::Relaxed);
        for e in &entries {
            assert!(segment.has_size(e.fingerprint.size).unwrap());
        }
        let before = reads();
        let sizes: std::collections::HashSet<u64> =
            entries.iter().map(|e| e.fingerprint.size).collect();
        let absent: Vec<u64> = (0..100_000u64)
            .map(|i| i * 7 + 1)
            .filter(|s| !sizes.contains(s))
            .take(10_000)
            .collect();
        for size in &absent {
            assert!(!segment.has_size(*size).unwrap());
        }
        // A false positive costs a binary search (~12 reads); 1% of 10,000 of them ~1,200.
        assert!(reads() - before < 4_000, "{} reads", reads() - before);
    }

    #[test]
    fn a_version_1_segment_is_read_as_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.seg");
        let entries = sample(300);
        write(&path, entries.clone().into_iter().map(Ok)).unwrap();
        // The same segment as version 1 wrote it: no size filter, the shorter footer.
        let v2 = std::fs::read(&path).unwrap();
        let word = |i: usize| {
            let at = v2.len() - FOOTER as usize + 8 * i;
            u64::from_le_bytes(v2[at..at + 8].try_into().unwrap())
        };
        let (sizes_at, count) = (word(3), word(4));
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&v2[8..sizes_at as usize]);
        let mut body = Vec::new();
        for w in [word(0), word(1), word(2), count] {
            body.extend_from_slice(&w.to_le_bytes());
        }
        v1.extend_from_slice(&body);
        v1.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        v1.extend_from_slice(TAIL);
        std::fs::write(&path, &v1).unwrap();
        let segment = Segment::open(&path).unwrap();
        assert!(segment.sizes.is_none());
        assert_eq!(segment.count(), 300);
        for e in &entries {
            let found = segment.find(&e.fingerprint.path).unwrap().unwrap();
            assert_eq!(found.hash, e.hash);
            assert!(segment.has_size(e.fingerprint.size).unwrap());
            let hash = u128::from_str_radix(&e.hash, 16).unwrap();
            let same = segment.with_content(e.fingerprint.size, hash).unwrap();
            assert!(same
                .iter()
                .any(|s| s.fingerprint.path == e.fingerprint.path));
        }
        assert!(!segment.has_size(u64::MAX).unwrap());
        assert_eq!(segment.entries().unwrap().count(), 300);
    }

    #[test]
    fn damage_and_disorder_are_errors_not_guesses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.seg");
        write(&path, sample(50).into_iter().map(Ok)).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 10] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = Segment::open(&path).unwrap_err();
        assert!(format!("{err:#}").contains("is damaged"), "{err:#}");
        // Its last byte, outside what the footer's CRC covers; a cut file; a stub.
        bytes[n - 10] ^= 1;
        bytes[n - 1] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Segment::open(&path).is_err());
        bytes[n - 1] ^= 1;
        for cut in [n - 1, 60, 12, 3, 0] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let err = Segment::open(&path).unwrap_err();
            assert!(format!("{err:#}").contains("is damaged"), "{cut}: {err:#}");
        }
        std::fs::write(&path, &bytes).unwrap();
        assert!(Segment::open(&path).is_ok());
        // A footer that is whole (its CRC right) but places any part wrongly: refused.
        for (word, delta) in [
            (0usize, 8i64),
            (1, 8),
            (1, -8),
            (2, 8),
            (3, 8),
            (3, -8),
            (4, 1),
        ] {
            let mut bad = bytes.clone();
            let at = n - FOOTER as usize + 8 * word;
            let value = u64::from_le_bytes(bad[at..at + 8].try_into().unwrap());
            bad[at..at + 8].copy_from_slice(&value.wrapping_add_signed(delta).to_le_bytes());
            let body = n - FOOTER as usize..n - 8;
            let crc = crc32fast::hash(&bad[body.clone()]);
            bad[body.end..body.end + 4].copy_from_slice(&crc.to_le_bytes());
            std::fs::write(&path, &bad).unwrap();
            let err = Segment::open(&path).unwrap_err();
            assert!(
                format!("{err:#}").contains("is damaged"),
                "word {word}: {err:#}"
            );
        }

        // A flipped byte inside an entry: its frame's CRC catches it on lookup.
        write(&path, sample(50).into_iter().map(Ok)).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[30] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let segment = Segment::open(&path).unwrap();
        let first = sample(50)[0].fingerprint.path.clone();
        let found = segment.find(&first);
        assert!(found.is_err() || found.unwrap().is_none());
        assert!(segment.entries().unwrap().any(|e| e.is_err()));

        let mut backwards = sample(3);
        backwards.reverse();
        assert!(write(&dir.path().join("2.seg"), backwards.into_iter().map(Ok)).is_err());
    }
}
