//! Reads one input: decompresses, hashes every byte, parses CSV records, knows its
//! exact position between two records, and resumes at such a position.
//!
//! The reader owns its input buffer and drives `csv_core` itself, so it knows exactly
//! which bytes the parser has consumed. That is what makes positions exact: a checkpoint
//! stores the offset just after a record, the number of lines before it and the hash of
//! every byte before it. Resuming reads that prefix again (decompressing if needed)
//! without parsing it, proves with the hash that it is the same content, and starts
//! parsing right after it. Nothing is re-parsed and skipped by count. An uncompressed
//! object is fetched again only from the last 4 MiB block boundary before the position,
//! its hash being chained over blocks (`content_hash.rs`).
//!
//! Offsets, lines and hashes are all of the *decoded* stream (what the CSV parser sees),
//! so a `.gz` input is positioned and fingerprinted like the plain file it contains.
//!
//! A `.jsonl` or `.ndjson` input (compressed or not) is read the same way, a record being
//! a line (`jsonl.rs` turns it into fields): the same offsets, line counts and hashes, the
//! same resumption.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use csv_core::{ReadRecordResult, ReaderBuilder};

use super::content_hash::ContentHash;
use super::jsonl;
pub(crate) use super::names::{is_compressed, is_jsonl};
use super::quoted_records;
use super::quotes::QuoteCheck;
use super::specials::Specials;
use crate::core::batch::{RecordBatch, MAX_RECORD_BYTES};
use crate::core::protocol::Fingerprint;

const CHUNK: usize = 256 * 1024;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The bytes a reader parses: its own buffer, refilled from its input, or a chunk of the
/// input read whole by a source worker and shared with the thread that hashes it, parsed
/// where it lies (`over_chunk`).
enum Buffer {
    Owned(Vec<u8>),
    /// The chunk's bytes from index `.1` on.
    Shared(Arc<Vec<u8>>, usize),
}

impl std::ops::Deref for Buffer {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Buffer::Owned(bytes) => bytes,
            Buffer::Shared(bytes, from) => bytes.get(*from..).unwrap_or_default(),
        }
    }
}

/// A positioned, hashing CSV reader over one input.
pub(crate) struct InputReader {
    name: String,
    inner: Box<dyn Read + Send>,
    /// The ETag the input was opened under, for a ranged reopen at a resume.
    etag: Option<String>,
    raw: Arc<AtomicU64>,
    buf: Buffer,
    start: usize,
    end: usize,
    eof: bool,
    utf8: Utf8Check,
    offset: u64,
    /// The hash of the bytes before `buf[hashed]`: the consumed bytes after it are
    /// hashed when the buffer is refilled, or when a hash is asked for.
    hasher: ContentHash,
    hashed: usize,
    /// False for a chunk parsed apart from the rest of its input: whoever put the chunks
    /// back in order hashes the bytes (`parallel.rs`).
    hashing: bool,
    core: csv_core::Reader,
    delimiter: u8,
    fields: Vec<u8>,
    ends: Vec<usize>,
    nfields: usize,
    record_line: u64,
    /// Stream offset where the current record starts.
    record_start: u64,
    /// Strict quoting, beside the lenient parser (`quotes.rs`).
    quotes: QuoteCheck,
    /// Index in `buf` of its next quote byte at or after `start` (`end` when there is
    /// none), as the parser's path needs it: the quoting check skips records before it.
    /// The fast paths leave it behind; the parser's path finds it again.
    next_quote: usize,
    /// The special bytes of `buf` (`specials.rs`), for the fast paths.
    specials: Specials,
    /// Why the current record's quoting is malformed.
    malformed: Option<String>,
    /// The current record was ended by the end of the stream, not by a line end: in a
    /// chunk that stops before the input does, it may go on in the bytes after.
    ended_by_eof: bool,
    /// Where in `buf` the current record's raw bytes lie (start, length without the line
    /// end) when they are exactly its fields joined by the delimiter: it held no quote
    /// and came in one read of the buffer.
    joined: Option<(usize, usize)>,
    /// True when the current record was split without the parser (`read_unquoted`): its
    /// fields are in `buf` (at `joined`), not in `fields`.
    split_in_buf: bool,
    /// True when the current record was split without the parser (`read_quoted`): its
    /// fields are in `fields`, each followed by a `,` that `ends` does not count.
    separated: bool,
    /// Which fields of a `separated` record need CSV quoting, as the split found.
    quoting: Option<u64>,
    /// Set for a JSON lines input.
    jsonl: Option<JsonLines>,
    /// The most stored bytes a record may hold ([`MAX_RECORD_BYTES`]); a larger one is
    /// a bad row.
    max_record: usize,
}

/// The state of a JSON lines input.
#[derive(Default)]
struct JsonLines {
    /// The first object's keys, once read.
    columns: Vec<String>,
    /// The current line.
    line: Vec<u8>,
    /// Lines consumed.
    lines: u64,
    /// The first object was read for its keys and is still to be returned as a record.
    pending: bool,
    values: jsonl::Values,
    /// Why the current line is not a record.
    error: Option<String>,
    /// The table's columns, when the load gives them (its sample of the inputs): then
    /// the first object is a record like any other, and names nothing.
    given: Option<Vec<String>>,
    /// Ignore keys that are not columns, rather than make the row bad.
    drop_new_keys: bool,
}

/// Counts the bytes read from the file itself (compressed, for a `.gz`), for progress.
struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Opens `path` (a file, or an `s3://` object, read only if its ETag is still `etag`) as
/// a decoded byte stream (decompressing `.gz` and `.zst`) from byte `from` of the file
/// (0 for a compressed one); `raw` counts the bytes read from the file.
fn open_counted(
    path: &Path,
    etag: Option<&str>,
    from: u64,
    raw: Arc<AtomicU64>,
) -> Result<Box<dyn Read + Send>> {
    let file = open_raw(path, etag, from)?;
    let file = CountingReader {
        inner: file,
        count: raw,
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => Ok(Box::new(flate2::read::MultiGzDecoder::new(
            std::io::BufReader::with_capacity(CHUNK, file),
        ))),
        Some("zst") => Ok(Box::new(
            zstd::stream::read::Decoder::new(file)
                .with_context(|| format!("cannot read input {}", path.display()))?,
        )),
        _ => Ok(Box::new(file)),
    }
}

fn open_raw(path: &Path, etag: Option<&str>, from: u64) -> Result<Box<dyn Read + Send>> {
    if crate::core::url::is_url_path(path) {
        return open_object(path, etag, from);
    }
    let mut file =
        File::open(path).with_context(|| format!("cannot open input {}", path.display()))?;
    if from > 0 {
        use std::io::{Seek, SeekFrom};
        file.seek(SeekFrom::Start(from))
            .with_context(|| format!("cannot read input {}", path.display()))?;
    }
    Ok(Box::new(super::readahead::Prefetched::new(file, from)))
}

#[cfg(feature = "s3")]
fn open_object(path: &Path, etag: Option<&str>, from: u64) -> Result<Box<dyn Read + Send>> {
    let url = crate::core::url::parse(&path.to_string_lossy())?;
    crate::storage::s3::open(&url, etag, from)
}

#[cfg(not(feature = "s3"))]
fn open_object(path: &Path, _etag: Option<&str>, _from: u64) -> Result<Box<dyn Read + Send>> {
    crate::core::url::parse(&path.to_string_lossy())?;
    anyhow::bail!(crate::core::error::UsageError(
        "this ingest was built without object storage (cargo feature \"s3\")".to_string()
    ))
}

/// Opens `path` as a decoded byte stream (gunzipping a `.gz` name).
pub(crate) fn open_decoded(path: &Path) -> Result<Box<dyn Read + Send>> {
    open_counted(path, None, 0, Arc::default())
}

/// Validates the raw input as UTF-8 chunk by chunk (SIMD), carrying a character cut by a
/// chunk boundary over to the next chunk; remembers where the first bad byte is, so the
/// record that holds it can be named when the parser reaches it.
#[derive(Default)]
struct Utf8Check {
    carry: Vec<u8>,
    /// Stream positions of bad bytes not yet passed by the parser, in order.
    bad: std::collections::VecDeque<u64>,
}

impl Utf8Check {
    /// Checks `chunk`, which starts at stream position `at`; an empty chunk is the end.
    fn check(&mut self, chunk: &[u8], at: u64) {
        let carried = self.carry.len() as u64;
        if chunk.is_empty() {
            if carried > 0 {
                self.bad.push_back(at - carried);
                self.carry.clear();
            }
            return;
        }
        let (mut rest, mut pos) = (chunk, at);
        if carried > 0 {
            // The lead byte says how long the cut character is.
            let need = match self.carry[0] {
                0xC2..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (need - self.carry.len()).min(rest.len());
            self.carry.extend_from_slice(&rest[..take]);
            if self.carry.len() < need {
                return; // a tiny chunk: still cut
            }
            if std::str::from_utf8(&self.carry).is_err() {
                // Resynchronise right after the carried lead byte.
                self.bad.push_back(at - carried);
                let skip = 1usize.saturating_sub(carried as usize);
                rest = &rest[skip..];
                pos += skip as u64;
            } else {
                rest = &rest[take..];
                pos += take as u64;
            }
            self.carry.clear();
        }
        loop {
            match simdutf8::compat::from_utf8(rest) {
                Ok(_) => return,
                // A valid start of a character, cut by the chunk's end.
                Err(e) if e.error_len().is_none() => {
                    self.carry = rest[e.valid_up_to()..].to_vec();
                    return;
                }
                Err(e) => {
                    let bad = e.valid_up_to();
                    self.bad.push_back(pos + bad as u64);
                    let skip = bad + e.error_len().unwrap_or(1);
                    rest = &rest[skip..];
                    pos += skip as u64;
                }
            }
        }
    }

    /// True when a bad byte lies in `[start, end)`; forgets bad bytes before `start`.
    fn bad_within(&mut self, start: u64, end: u64) -> bool {
        while self.bad.front().is_some_and(|&b| b < start) {
            self.bad.pop_front();
        }
        self.bad.front().is_some_and(|&b| b < end)
    }
}

/// Hashes a whole input the way the reader does (decoded bytes), for the manifest.
pub(crate) fn hash_input(path: &Path) -> Result<u128> {
    Ok(hash_input_lines(path)?.0)
}

/// The hash of [`hash_input`], and the number of line feeds in the decoded bytes.
pub(crate) fn hash_input_lines(path: &Path) -> Result<(u128, u64)> {
    let mut inner = open_decoded(path)?;
    let mut hasher = ContentHash::for_input(&path.to_string_lossy());
    let mut buf = vec![0; CHUNK];
    let mut lines = 0;
    loop {
        let n = read_some(&mut inner, &mut buf, path)?;
        if n == 0 {
            return Ok((hasher.digest128(), lines));
        }
        hasher.update(&buf[..n]);
        lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
}

fn read_some(inner: &mut dyn Read, buf: &mut [u8], path: &Path) -> Result<usize> {
    loop {
        match inner.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read input {}", path.display()))
            }
        }
    }
}

impl InputReader {
    /// Opens a file for reading from its first byte.
    #[cfg(test)]
    pub(crate) fn open(path: &Path, delimiter: u8) -> Result<InputReader> {
        Self::open_with(path, None, delimiter)
    }

    /// Opens an input as the run fingerprinted it (an object only if its ETag is the same).
    pub(crate) fn open_input(input: &Fingerprint, delimiter: u8) -> Result<InputReader> {
        Self::open_with(Path::new(&input.path), input.etag.as_deref(), delimiter)
    }

    fn open_with(path: &Path, etag: Option<&str>, delimiter: u8) -> Result<InputReader> {
        let raw = Arc::new(AtomicU64::new(0));
        let inner = open_counted(path, etag, 0, raw.clone())?;
        let mut reader =
            InputReader::open_with_inner(&path.display().to_string(), inner, etag, delimiter);
        reader.raw = raw;
        reader.fill()?;
        if reader.buf[reader.start..reader.end].starts_with(UTF8_BOM) {
            reader.consume(UTF8_BOM.len());
        }
        Ok(reader)
    }

    /// A CSV reader over `bytes[from..]`, which lie at stream position `at` of the input
    /// `name` and begin at a record boundary: a chunk of a large input, parsed on its own
    /// where it lies (no copy). Lines count from 1 at its first byte; nothing is hashed.
    pub(crate) fn over_chunk(
        name: &str,
        bytes: Arc<Vec<u8>>,
        from: usize,
        at: u64,
        delimiter: u8,
    ) -> InputReader {
        let mut reader = InputReader::with_buffer(
            name,
            Box::new(std::io::empty()),
            None,
            delimiter,
            Buffer::Shared(bytes, from),
        );
        reader.offset = at;
        reader.hashing = false;
        reader.jsonl = None;
        let n = reader.buf.len();
        reader.took(n);
        reader
    }

    /// Opens a CSV input to go on reading at `offset` (a record boundary after its
    /// header), where the stream has `lines` lines behind it hashing to `hasher`.
    pub(super) fn open_at(
        input: &Fingerprint,
        delimiter: u8,
        offset: u64,
        lines: u64,
        hasher: ContentHash,
    ) -> Result<InputReader> {
        let path = Path::new(&input.path);
        let raw = Arc::new(AtomicU64::new(offset));
        let inner = open_counted(path, input.etag.as_deref(), offset, raw.clone())?;
        let mut reader =
            InputReader::open_with_inner(&input.path, inner, input.etag.as_deref(), delimiter);
        reader.raw = raw;
        reader.offset = offset;
        reader.hasher = hasher;
        reader.jsonl = None;
        reader.core.set_line(lines);
        reader.fill()?;
        Ok(reader)
    }

    fn open_with_inner(
        name: &str,
        inner: Box<dyn Read + Send>,
        etag: Option<&str>,
        delimiter: u8,
    ) -> InputReader {
        let buf = Buffer::Owned(vec![0; CHUNK]);
        InputReader::with_buffer(name, inner, etag, delimiter, buf)
    }

    fn with_buffer(
        name: &str,
        inner: Box<dyn Read + Send>,
        etag: Option<&str>,
        delimiter: u8,
        buf: Buffer,
    ) -> InputReader {
        InputReader {
            name: name.to_string(),
            inner,
            etag: etag.map(str::to_string),
            raw: Arc::default(),
            buf,
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            hasher: ContentHash::for_input(name),
            hashed: 0,
            hashing: true,
            core: parser(delimiter),
            delimiter,
            fields: vec![0; 1024],
            ends: vec![0; 64],
            nfields: 0,
            record_line: 0,
            record_start: 0,
            quotes: QuoteCheck::new(delimiter),
            next_quote: 0,
            specials: Specials::new(delimiter),
            malformed: None,
            ended_by_eof: false,
            joined: None,
            split_in_buf: false,
            separated: false,
            quoting: None,
            utf8: Utf8Check::default(),
            jsonl: is_jsonl(name).then(JsonLines::default),
            max_record: MAX_RECORD_BYTES,
        }
    }

    /// A reader that turns away records of more than `bytes` stored bytes, for tests.
    #[cfg(test)]
    fn with_max_record(mut self, bytes: usize) -> Self {
        self.max_record = bytes;
        self
    }

    /// The running hash of every byte consumed so far, to go on from elsewhere.
    pub(super) fn content_hash(&self) -> ContentHash {
        let mut hasher = self.hasher.clone();
        if self.hashing {
            hasher.update(&self.buf[self.hashed..self.start]);
        }
        hasher
    }

    /// Hashes the consumed bytes of the buffer not hashed yet.
    fn hash_consumed(&mut self) {
        if self.hashing {
            self.hasher.update(&self.buf[self.hashed..self.start]);
        }
        self.hashed = self.start;
    }

    /// True when the fast paths may split records: they need the delimiter to be
    /// none of the bytes that quote or end a record.
    fn splits_fast(&self) -> bool {
        self.jsonl.is_none() && !matches!(self.delimiter, b'"' | b'\n' | b'\r')
    }

    /// True when the current record was ended by the end of the stream.
    pub(crate) fn ended_by_eof(&self) -> bool {
        self.ended_by_eof
    }

    fn fill(&mut self) -> Result<()> {
        if self.start == self.end && !self.eof {
            self.hash_consumed();
            let n = match &mut self.buf {
                Buffer::Owned(buf) => {
                    if buf.is_empty() {
                        buf.resize(CHUNK, 0);
                    }
                    read_some(&mut self.inner, buf, Path::new(&self.name))?
                }
                // A chunk is read whole: its stream ends with it.
                Buffer::Shared(..) => {
                    self.buf = Buffer::Owned(Vec::new());
                    0
                }
            };
            self.took(n);
        }
        Ok(())
    }

    /// Takes the first `n` bytes of the buffer, all new, as the bytes to parse next; 0:
    /// the stream ended.
    fn took(&mut self, n: usize) {
        self.start = 0;
        self.hashed = 0;
        self.end = n;
        self.eof = n == 0;
        self.next_quote = memchr::memchr(b'"', &self.buf[..n]).unwrap_or(n);
        if self.splits_fast() {
            self.specials.index(&self.buf[..n]);
        }
        // The buffer was empty, so `offset` is the stream position of its first byte.
        self.utf8.check(&self.buf[..n], self.offset);
    }

    /// Reads the input again from byte `from` (a block boundary; 0 for the first byte)
    /// with `hasher` standing for the bytes before it.
    fn reopen(&mut self, from: u64, hasher: ContentHash) -> Result<()> {
        self.inner = open_counted(
            Path::new(&self.name),
            self.etag.as_deref(),
            from,
            self.raw.clone(),
        )?;
        self.raw.store(from, Ordering::Relaxed);
        self.start = 0;
        self.end = 0;
        self.eof = false;
        self.offset = from;
        self.hasher = hasher;
        self.hashed = 0;
        self.utf8 = Utf8Check::default();
        Ok(())
    }

    /// Why the current record is bad, if it holds a byte that is not UTF-8 (or, in JSON
    /// lines, is not an object of the input's columns).
    pub(crate) fn invalid(&mut self) -> Option<String> {
        let bad_utf8 = self.utf8.bad_within(self.record_start, self.offset);
        let size = self.stored_size();
        let too_large = (size > self.max_record).then(|| {
            format!(
                "the record holds {size} bytes, more than the {} a record may hold",
                self.max_record
            )
        });
        if let Some(json) = &mut self.jsonl {
            return json.error.take().or(too_large);
        }
        if let Some(why) = self.malformed.take() {
            return Some(why);
        }
        if too_large.is_some() {
            return too_large;
        }
        if !bad_utf8 {
            return None;
        }
        let field = (0..self.nfields)
            .find(|&i| std::str::from_utf8(self.field(i)).is_err())
            .map_or_else(
                || "a quote or delimiter".to_string(),
                |i| format!("field {}", i + 1),
            );
        Some(format!("{field} is not valid UTF-8 (inputs must be UTF-8)"))
    }

    /// The current record's size as a batch stores it: its fields' bytes, each followed
    /// by a separator.
    fn stored_size(&self) -> usize {
        self.ends[..self.nfields]
            .last()
            .map_or(0, |&end| end + self.nfields)
    }

    /// Marks `n` buffered bytes as consumed: they count in the offset and the hash.
    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    /// Reads the header: the first record of a CSV input, the keys of the first object
    /// of a JSON lines input (that object is then the first record). `false` when empty.
    pub(crate) fn read_header_record(&mut self) -> Result<bool> {
        if self.jsonl.is_none() {
            return self.read_record();
        }
        if !self.next_json_line()? {
            return Ok(false);
        }
        let Some(json) = &mut self.jsonl else {
            return Ok(false);
        };
        // The load's sampled columns when it gave them, else the first object's keys;
        // either way that first object is still to be returned as a record.
        let keys = match json.given.clone() {
            Some(keys) => keys,
            None => jsonl::keys(&json.line).map_err(|e| {
                anyhow::anyhow!(
                    "{}:{}: the first line must be a JSON object whose keys name the columns; {e}",
                    self.name,
                    self.record_line
                )
            })?,
        };
        let mut names = Vec::new();
        let mut ends = Vec::with_capacity(keys.len());
        for key in &keys {
            names.extend_from_slice(key.as_bytes());
            ends.push(names.len());
        }
        json.columns = keys;
        json.pending = true;
        self.set_fields(&names, &ends);
        Ok(true)
    }

    /// Reads the next non-blank line of a JSON lines input into its line buffer.
    fn next_json_line(&mut self) -> Result<bool> {
        loop {
            let Some(json) = &mut self.jsonl else {
                return Ok(false);
            };
            json.line.clear();
            self.record_line = json.lines + 1;
            self.record_start = self.offset;
            loop {
                self.fill()?;
                let Some(json) = &mut self.jsonl else {
                    return Ok(false);
                };
                let input = &self.buf[self.start..self.end];
                if input.is_empty() {
                    if json.line.is_empty() {
                        return Ok(false);
                    }
                    json.lines += 1;
                    break;
                }
                let (take, done) = match input.iter().position(|&b| b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (input.len(), false),
                };
                json.line.extend_from_slice(&input[..take]);
                if done {
                    json.lines += 1;
                }
                self.consume(take);
                if done {
                    break;
                }
            }
            if !self
                .jsonl
                .as_ref()
                .is_some_and(|json| jsonl::is_blank(&json.line))
            {
                return Ok(true);
            }
        }
    }

    /// Reads the next JSON lines record; a line that is not one is kept as a single field
    /// (the raw record of a reject) with `invalid()` saying why.
    fn read_json_record(&mut self) -> Result<bool> {
        let pending = self.jsonl.as_ref().is_some_and(|json| json.pending);
        if pending {
            if let Some(json) = &mut self.jsonl {
                json.pending = false;
            }
        } else if !self.next_json_line()? {
            self.nfields = 0;
            return Ok(false);
        }
        let Some(json) = &mut self.jsonl else {
            return Ok(false);
        };
        match jsonl::values(
            &json.line,
            &json.columns,
            json.drop_new_keys,
            &mut json.values,
        ) {
            Ok(()) => {
                let (bytes, ends) = (
                    std::mem::take(&mut json.values.bytes),
                    std::mem::take(&mut json.values.ends),
                );
                self.set_fields(&bytes, &ends);
                if let Some(json) = &mut self.jsonl {
                    json.values.bytes = bytes;
                    json.values.ends = ends;
                }
            }
            Err(why) => {
                json.error = Some(why);
                let line = std::mem::take(&mut json.line);
                let text = jsonl::content(&line);
                self.set_fields(text, &[text.len()]);
                if let Some(json) = &mut self.jsonl {
                    json.values.nulls.clear();
                    json.line = line;
                }
            }
        }
        Ok(true)
    }

    /// Makes `bytes` (fields back to back, ending at `ends`) the current record.
    fn set_fields(&mut self, bytes: &[u8], ends: &[usize]) {
        if self.fields.len() < bytes.len() {
            self.fields.resize(bytes.len(), 0);
        }
        self.fields[..bytes.len()].copy_from_slice(bytes);
        if self.ends.len() < ends.len() {
            self.ends.resize(ends.len(), 0);
        }
        self.ends[..ends.len()].copy_from_slice(ends);
        self.nfields = ends.len();
    }

    /// Field `i` of the current record, `None` when null (only JSON lines has nulls).
    pub(crate) fn cell(&self, i: usize) -> Option<&[u8]> {
        let null = self
            .jsonl
            .as_ref()
            .is_some_and(|json| json.values.nulls.get(i).copied().unwrap_or(false));
        (!null).then(|| self.field(i))
    }

    /// The current record as it was written, for the rejects: its line for JSON lines,
    /// its fields CSV-encoded for CSV.
    pub(crate) fn raw_record(&self) -> Vec<u8> {
        match &self.jsonl {
            Some(json) => jsonl::content(&json.line).to_vec(),
            None => crate::core::batch::encode_csv(self.fields()),
        }
    }

    /// True when records may hold nulls (read them with `cell`).
    pub(crate) fn has_nulls(&self) -> bool {
        self.jsonl.is_some()
    }

    /// Reads the next record into the reader; `false` at the end of the input.
    ///
    /// Hot path: the field and end buffers are reused; nothing is allocated per record.
    pub(crate) fn read_record(&mut self) -> Result<bool> {
        self.split_in_buf = false;
        self.separated = false;
        if self.jsonl.is_some() {
            return self.read_json_record();
        }
        self.skip_line_ends()?;
        // csv_core counts lines from 1: before a record, line() is the line it starts on.
        self.record_line = self.core.line();
        self.record_start = self.offset;
        self.quotes.begin(self.record_line);
        self.malformed = None;
        self.joined = None;
        if self.read_unquoted()? || self.read_quoted() {
            return Ok(true);
        }
        if self.next_quote < self.start {
            self.find_next_quote();
        }
        let (mut outlen, mut endlen) = (0, 0);
        let (mut reads, mut quoted) = (0, false);
        loop {
            self.fill()?;
            let begin = self.start;
            reads += 1;
            let input = &self.buf[self.start..self.end];
            let at_eof = input.is_empty();
            let (res, nin, nout, nend) =
                self.core
                    .read_record(input, &mut self.fields[outlen..], &mut self.ends[endlen..]);
            let consumed = self.start + nin;
            let may_quote = self.next_quote < consumed;
            quoted |= may_quote;
            self.quotes.feed(&input[..nin], may_quote);
            if may_quote {
                let rest = &self.buf[consumed..self.end];
                self.next_quote = consumed + memchr::memchr(b'"', rest).unwrap_or(rest.len());
            }
            self.consume(nin);
            outlen += nout;
            endlen += nend;
            match res {
                ReadRecordResult::InputEmpty => {}
                ReadRecordResult::OutputFull => {
                    let len = self.fields.len();
                    self.fields.resize(len * 2, 0);
                }
                ReadRecordResult::OutputEndsFull => {
                    let len = self.ends.len();
                    self.ends.resize(len * 2, 0);
                }
                ReadRecordResult::Record => {
                    self.nfields = endlen;
                    self.ended_by_eof = at_eof;
                    self.malformed = self.quotes.end();
                    // Without quotes the parser only drops the delimiters and the line
                    // end: the raw bytes are the fields joined by the delimiter.
                    let len = outlen + endlen.saturating_sub(1);
                    if reads == 1 && !quoted && endlen > 0 && len <= nin {
                        debug_assert!(len == nin || matches!(self.buf[begin + len], b'\n' | b'\r'));
                        self.joined = Some((begin, len));
                    }
                    return Ok(true);
                }
                ReadRecordResult::End => {
                    self.nfields = 0;
                    return Ok(false);
                }
            }
        }
    }

    /// The fast path of [`InputReader::read_record`]: a record that ends with a line end
    /// in the buffer and holds no quote and no bare CR is split at its delimiters
    /// (`memchr`) where the parser would have stepped through it byte by byte (a quarter
    /// of a plain load's samples went to `csv_core`); its fields stay in the buffer.
    /// Outside quotes the parser does nothing else to a record: the same fields, the
    /// same line (one line feed), the same bytes consumed. False, having consumed
    /// nothing, when the record is not such a one.
    fn read_unquoted(&mut self) -> Result<bool> {
        self.fill()?;
        if !self.splits_fast() {
            return Ok(false);
        }
        let (input, start, delimiter) = (&self.buf[..self.end], self.start, self.delimiter);
        let mut nfields = 0;
        let mut next = self.specials.next(start);
        let (end, line_end) = loop {
            // No line end in the buffer: the record goes on past it.
            let Some(at) = next else {
                return Ok(false);
            };
            match input[at] {
                b if b == delimiter => {
                    if nfields == self.ends.len() {
                        self.ends.resize(nfields * 2, 0);
                    }
                    // Offsets without the delimiters, as the parser gives them.
                    self.ends[nfields] = at - start - nfields;
                    nfields += 1;
                }
                b'\n' => break (at, 1),
                b'\r' if input.get(at + 1) == Some(&b'\n') => break (at, 2),
                // A quote, or a bare CR (it ends a record too, but counts no line): the
                // other paths' business.
                b'"' | b'\r' => return Ok(false),
                _ => {} // a comma that is not the delimiter
            }
            next = self.specials.next(at + 1);
        };
        if nfields == self.ends.len() {
            self.ends.resize(nfields * 2, 0);
        }
        self.ends[nfields] = end - start - nfields;
        self.nfields = nfields + 1;
        self.joined = Some((start, end - start));
        self.split_in_buf = true;
        self.ended_by_eof = false;
        self.malformed = self.quotes.end();
        self.consume(end - start + line_end);
        self.core.set_line(self.core.line() + 1);
        Ok(true)
    }

    /// The fast path for a record with quoted fields (`quoted_records.rs`), once
    /// [`read_unquoted`](Self::read_unquoted) filled the buffer: a record in the buffer
    /// whose quoting is well formed is split from quote to quote, into `fields` as the
    /// parser would have put it, consuming the same bytes and counting the same lines;
    /// the quoting check has nothing to find in it. False, having consumed nothing,
    /// otherwise.
    fn read_quoted(&mut self) -> bool {
        if !self.splits_fast() {
            return false;
        }
        let Some(split) = quoted_records::split(
            &self.buf[..self.end],
            self.start,
            self.delimiter,
            &self.specials,
            &mut self.fields,
            &mut self.ends,
        ) else {
            return false;
        };
        self.nfields = split.nfields;
        self.separated = true;
        self.quoting = split.quoting;
        self.ended_by_eof = false;
        self.quotes.well_formed(split.quoted);
        self.malformed = None;
        self.consume(split.consumed);
        self.core.set_line(self.core.line() + 1 + split.inner_lines);
        true
    }

    /// Finds the buffer's next quote at or after `start`.
    fn find_next_quote(&mut self) {
        let rest = &self.buf[self.start..self.end];
        self.next_quote = self.start + memchr::memchr(b'"', rest).unwrap_or(rest.len());
    }

    /// Consumes the line ends before the next record: the LF of a CRLF that ended the
    /// last one, and blank lines, which the parser skips at a record's start. Then the
    /// parser's line number is the line the record starts on, and its start offset is
    /// its first byte; whoever reads a chunk starting after those bytes agrees.
    fn skip_line_ends(&mut self) -> Result<()> {
        loop {
            self.fill()?;
            let input = &self.buf[self.start..self.end];
            let run = input
                .iter()
                .take_while(|&&b| b == b'\n' || b == b'\r')
                .count();
            if run == 0 {
                return Ok(());
            }
            // At a record's start the parser discards line ends, counting the LFs.
            let (res, nin, _, _) =
                self.core
                    .read_record(&input[..run], &mut self.fields, &mut self.ends);
            debug_assert!(matches!(res, ReadRecordResult::InputEmpty) && nin == run);
            self.consume(nin);
        }
    }

    /// Number of fields of the current record.
    pub(crate) fn len(&self) -> usize {
        self.nfields
    }

    /// True when the current record has no field (never after a successful read).
    pub(crate) fn is_empty(&self) -> bool {
        self.nfields == 0
    }

    /// Field `i` of the current record.
    pub(crate) fn field(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        match self.joined {
            // Field i lies after i delimiters.
            Some((at, _)) if self.split_in_buf => &self.buf[at + start + i..at + self.ends[i] + i],
            _ if self.separated => &self.fields[start + i..self.ends[i] + i],
            _ => &self.fields[start..self.ends[i]],
        }
    }

    /// The current record's raw bytes when they are exactly its fields joined by the
    /// delimiter (no quote in them): copied as they are, they need no delimiters put
    /// back.
    pub(crate) fn joined(&self) -> Option<&[u8]> {
        self.joined
            .map(|(start, len)| &self.buf[start..start + len])
    }

    /// Appends the current record, all its fields in order, to `batch`.
    pub(crate) fn push_to(&self, batch: &mut RecordBatch, input: u32) {
        let ends = &self.ends[..self.nfields];
        match self.joined() {
            Some(joined) => {
                batch.push_joined(joined, self.delimiter, ends, input, self.record_line)
            }
            None if self.separated => {
                let bytes = &self.fields[..ends.last().map_or(0, |end| end + ends.len())];
                batch.push_separated(bytes, ends, self.quoting, input, self.record_line)
            }
            None => {
                let bytes = &self.fields[..ends.last().copied().unwrap_or(0)];
                batch.push_fields(bytes, ends, input, self.record_line)
            }
        }
    }

    /// All fields of the current record.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.nfields).map(|i| self.field(i))
    }

    /// A JSON lines input's columns, as the load's sample found them (the header
    /// becomes these), and what to do with a key that is not one. No effect on CSV.
    pub(crate) fn with_json_columns(mut self, columns: &[String], drop_new_keys: bool) -> Self {
        if let Some(json) = &mut self.jsonl {
            json.given = Some(columns.to_vec());
            json.drop_new_keys = drop_new_keys;
        }
        self
    }

    /// The field delimiter.
    pub(crate) fn delimiter(&self) -> u8 {
        self.delimiter
    }

    /// True when the current record held a quoted field.
    pub(crate) fn was_quoted(&self) -> bool {
        self.quotes.was_quoted()
    }

    /// The 1-based line where the current record starts.
    pub(crate) fn record_line(&self) -> u64 {
        self.record_line
    }

    /// Bytes of the decoded stream consumed so far (always between two records).
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes read from the file itself so far (ahead of `offset` by the buffer; of the
    /// compressed file for a `.gz`): for progress only.
    pub(crate) fn raw_bytes(&self) -> u64 {
        self.raw.load(Ordering::Relaxed)
    }

    /// Lines consumed so far.
    pub(crate) fn lines(&self) -> u64 {
        match &self.jsonl {
            Some(json) => json.lines,
            None => self.core.line(),
        }
    }

    /// Hash of every decoded byte consumed so far; the whole input's hash at the end.
    pub(crate) fn hash(&self) -> u128 {
        self.content_hash().digest128()
    }

    /// The input's display name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// What a position just here records of the bytes before it (`content_hash.rs`).
    pub(crate) fn position_hash(&self) -> String {
        self.content_hash().position()
    }

    /// Moves from just after the header to a recorded position, reading (never parsing)
    /// the bytes in between, and proves by their hash that the content is unchanged.
    /// `recorded` is what the position holds of the hash: for an uncompressed object's
    /// chained hash, the object is fetched again from the last block boundary before
    /// `offset` (a ranged GET, on the ETag the run listed), not from its first byte.
    pub(crate) fn resume_at(&mut self, offset: u64, lines: u64, recorded: &str) -> Result<()> {
        if offset < self.offset {
            bail!(
                "{}: resume position {offset} lies inside the header",
                self.name
            );
        }
        match ContentHash::resume(recorded, offset)? {
            Some((from, hasher)) if self.hasher.is_chained() => self.reopen(from, hasher)?,
            // A position written before objects were hashed in blocks: the whole prefix
            // again, under the whole hash it recorded.
            None if self.hasher.is_chained() => {
                self.reopen(0, ContentHash::Whole(xxhash_rust::xxh3::Xxh3::new()))?
            }
            _ => {}
        }
        while self.offset < offset {
            self.fill()?;
            if self.start == self.end {
                bail!(
                    "input {} changed since the interrupted run began: it is now shorter than \
                     the {offset} bytes already loaded from it",
                    self.name
                );
            }
            let want = (offset - self.offset).min((self.end - self.start) as u64) as usize;
            self.consume(want);
        }
        if self.position_hash() != recorded {
            bail!(
                "input {} changed since the interrupted run began: its first {offset} bytes \
                 differ from the ones already loaded",
                self.name
            );
        }
        if let Some(json) = &mut self.jsonl {
            // The first object, read for its keys, was loaded before this position.
            json.pending = false;
            json.lines = lines;
        }
        // The parser that read the header goes on: a new one would take bytes EF BB BF
        // at the start of its first input for a BOM and drop them, and the record at the
        // position may begin with U+FEFF. Between two records it holds no other state.
        self.core.set_line(lines);
        Ok(())
    }
}

/// A CSV parser that takes every byte as data. csv_core drops EF BB BF at the start of
/// the first input it is given, as a BOM; the reader drops an input's BOM itself, and
/// the first input this parser sees may be any record (the fast path of `read_record`
/// reads the header and plain records without it): so it is given a blank line first,
/// which it skips, counting a line that is then taken back.
fn parser(delimiter: u8) -> csv_core::Reader {
    let mut core = ReaderBuilder::new().delimiter(delimiter).build();
    let (mut field, mut end) = ([0u8; 1], [0usize; 1]);
    let (res, nin, _, _) = core.read_record(b"\n", &mut field, &mut end);
    debug_assert!(matches!(res, ReadRecordResult::InputEmpty) && nin == 1);
    core.set_line(1);
    core
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn records(r: &mut InputReader) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        while r.read_record().unwrap() {
            out.push(
                r.fields()
                    .map(|f| String::from_utf8(f.to_vec()).unwrap())
                    .collect(),
            );
        }
        out
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn first_bad_byte(text: &[u8], split: usize) -> Option<u64> {
        let mut check = Utf8Check::default();
        check.check(&text[..split], 0);
        check.check(&text[split..], split as u64);
        check.check(&[], text.len() as u64);
        check.bad.front().copied()
    }

    #[test]
    fn a_record_after_a_crlf_or_blank_lines_is_on_the_line_it_starts_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "l.csv", b"h\r\na\r\n\r\nb\n\n\nc\r\"x\ny\"\nd");
        let mut r = InputReader::open(&path, b',').unwrap();
        let mut lines = Vec::new();
        let mut starts = Vec::new();
        while r.read_record().unwrap() {
            lines.push(r.record_line());
            starts.push(r.record_start);
        }
        // Lines are counted by line feeds, as csv_core does (a lone CR ends a record).
        assert_eq!(lines, [1, 2, 4, 7, 7, 9]);
        assert_eq!(starts, [0, 3, 8, 12, 14, 20]);
    }

    #[test]
    fn only_a_record_without_quotes_is_handed_over_joined() {
        let dir = tempfile::tempdir().unwrap();
        let text = b"h,i\r\na,b\r\n\"c\",d\nx,\"y\nz\"\n,\ne,f";
        let path = write(dir.path(), "j.csv", text);
        let mut r = InputReader::open(&path, b',').unwrap();
        let mut joined = Vec::new();
        while r.read_record().unwrap() {
            joined.push(r.joined().map(|j| String::from_utf8_lossy(j).into_owned()));
        }
        // The last record has no line end: the parser asks for more input and learns of
        // the end in a second read, after which its bytes are copied field by field.
        let want = [Some("h,i"), Some("a,b"), None, None, Some(","), None];
        assert_eq!(joined, want.map(|j| j.map(String::from)));
        // The first record the parser sees may begin with U+FEFF (the header and the
        // records before took the fast paths; a quote inside an unquoted field does
        // not): it is data, not a BOM.
        let path = write(dir.path(), "bom.csv", b"a,b\n1,\"2\"\n\xEF\xBB\xBFq,y\"\n");
        let mut r = InputReader::open(&path, b',').unwrap();
        assert_eq!(records(&mut r)[2], ["\u{FEFF}q", "y\""]);
        // Another delimiter: the raw bytes keep it.
        let path = write(dir.path(), "k.csv", b"a;b,c\n");
        let mut r = InputReader::open(&path, b';').unwrap();
        assert!(r.read_record().unwrap());
        assert_eq!(r.joined(), Some(&b"a;b,c"[..]));
    }

    #[test]
    fn a_record_of_more_fields_than_the_first_guess_reads_whole_on_every_path() {
        let dir = tempfile::tempdir().unwrap();
        let wide: Vec<String> = (0..150).map(|i| format!("f{i}")).collect();
        let plain = wide.join(",");
        let quoted = wide
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect::<Vec<_>>()
            .join(",");
        // Unquoted, quoted, and (a quote inside an unquoted field) the parser's.
        let odd = format!("{plain},5'11\"");
        let text = format!("{plain}\n{quoted}\n{odd}\n");
        let path = write(dir.path(), "wide.csv", text.as_bytes());
        let mut r = InputReader::open(&path, b',').unwrap();
        let read = records(&mut r);
        let mut odd_fields = wide.clone();
        odd_fields.push("5'11\"".into());
        assert_eq!(read, [wide.clone(), wide, odd_fields]);
    }

    #[test]
    fn a_well_formed_quoted_record_reads_as_the_parser_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let text = b"h,i\n\"a, b\",\"c\"\"d\"\n\"multi\nline\",x\r\n5'11\",\"q\"\n\"z\"w,\"\"\n\"end\",\"\"";
        let path = write(dir.path(), "q.csv", text);
        let mut r = InputReader::open(&path, b',').unwrap();
        let mut batch = RecordBatch::new(2);
        let (mut read, mut fast) = (Vec::new(), Vec::new());
        while r.read_record().unwrap() {
            let fields: Vec<String> = r
                .fields()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect();
            read.push((
                fields,
                r.record_line(),
                r.was_quoted(),
                r.invalid().is_some(),
            ));
            fast.push(r.split_in_buf || r.separated);
            r.push_to(&mut batch, 0);
        }
        assert_eq!(
            fast,
            [true, true, true, false, false, false],
            "the fast paths"
        );
        let row =
            |f: [&str; 2], line, quoted, bad| (f.map(String::from).to_vec(), line, quoted, bad);
        // The records of lines 1-3 take the fast paths, the ones of lines 5 (a quote
        // inside an unquoted field), 6 (text after a closing quote: a bad row) and 7 (no
        // line end) the parser: both agree on fields, lines and quoting.
        let want = [
            row(["h", "i"], 1, false, false),
            row(["a, b", "c\"d"], 2, true, false),
            row(["multi\nline", "x"], 3, true, false),
            row(["5'11\"", "q"], 5, true, false),
            row(["zw", ""], 6, true, true),
            row(["end", ""], 7, true, false),
        ];
        assert_eq!(read, want);
        let csv = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(&text[..])
            .into_byte_records()
            .map(|r| {
                r.unwrap()
                    .iter()
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>();
        assert_eq!(read.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), csv);
        // In the batch, a field holding a comma, a quote or a line end needs quotes.
        assert_eq!(batch.field(1, 0), b"a, b");
        assert_eq!(batch.field(2, 0), b"multi\nline");
        assert_eq!(batch.needs_quotes(1), Some(0b11));
        assert_eq!(batch.needs_quotes(2), Some(0b01));
        assert_eq!(batch.needs_quotes(5), Some(0b00));
    }

    proptest::proptest! {
        /// Whatever the bytes and wherever the buffer ends, the reader's records are the
        /// csv crate's, on the lines it says, and the hash at each position is the hash
        /// of every byte before it.
        #[test]
        fn records_are_the_csv_crates_wherever_the_buffer_ends(
            text in crate::source::quoted_records::tests::csv_bytes(12, 60),
            chunk in 1usize..160,
            delimiter in proptest::sample::select(vec![b',', b';']),
        ) {
            let cursor = Box::new(std::io::Cursor::new(text.clone()));
            let mut r = InputReader::open_with_inner("t.csv", cursor, None, delimiter);
            r.buf = Buffer::Owned(vec![0; chunk]);
            let mut ours = Vec::new();
            while r.read_record().unwrap() {
                let fields: Vec<Vec<u8>> = r.fields().map(<[u8]>::to_vec).collect();
                ours.push((fields, r.record_line()));
                let mut hasher = ContentHash::for_input("t.csv");
                hasher.update(&text[..r.offset() as usize]);
                proptest::prop_assert_eq!(r.position_hash(), hasher.position());
            }
            let mut csv = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .delimiter(delimiter)
                .from_reader(&text[..]);
            let mut theirs = Vec::new();
            let mut record = csv::ByteRecord::new();
            while csv.read_byte_record(&mut record).unwrap() {
                // The line the record starts on, after the line ends the parser skips.
                let from = record.position().map_or(0, |p| p.byte() as usize);
                let skipped = text[from..].iter().take_while(|b| b"\r\n".contains(b)).count();
                let line = 1 + memchr::memchr_iter(b'\n', &text[..from + skipped]).count() as u64;
                theirs.push((record.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), line));
            }
            proptest::prop_assert_eq!(ours, theirs);
            let mut whole = ContentHash::for_input("t.csv");
            whole.update(&text);
            proptest::prop_assert_eq!(r.hash(), whole.digest128());
        }
    }

    #[test]
    fn utf8_is_checked_across_every_chunk_boundary() {
        let good = "a,é,€,𝄞,北京\n".as_bytes();
        for split in 0..=good.len() {
            assert_eq!(first_bad_byte(good, split), None, "split at {split}");
        }
        for (bad, at) in [
            (&b"ab\xB0cd"[..], 2),
            (b"a\xE2\x82", 1),
            (b"\xF0\x9D\x84x", 0),
            (b"ok\xC3", 2),
        ] {
            for split in 0..=bad.len() {
                assert_eq!(
                    first_bad_byte(bad, split),
                    Some(at),
                    "{bad:?} split at {split}"
                );
            }
        }
    }

    #[test]
    fn invalid_utf8_names_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "bad.csv", b"a,b\n1,2\n3,\xB0C\n");
        let mut r = InputReader::open(&path, b',').unwrap();
        r.read_record().unwrap();
        r.read_record().unwrap();
        assert_eq!(r.invalid(), None);
        assert!(r.read_record().unwrap());
        assert_eq!(r.record_line(), 3);
        assert_eq!(
            r.invalid().unwrap(),
            "field 2 is not valid UTF-8 (inputs must be UTF-8)"
        );
        assert!(!r.read_record().unwrap());
    }

    #[test]
    fn a_record_larger_than_a_batch_may_hold_is_a_bad_row() {
        let dir = tempfile::tempdir().unwrap();
        // Stored sizes (fields unescaped, a separator after each): 4 for the header, 5
        // for "1,22", 6 for "1,333"; the quoted record's is 5 ("1" and `"3`); a bare CR
        // ends a record (read by the parser) without counting a line.
        let path = write(
            dir.path(),
            "wide.csv",
            b"a,b\n1,22\n1,333\n\"1\",\"\"\"3\"\n1,22\r\n12,33\r4,5\n",
        );
        let mut r = InputReader::open(&path, b',').unwrap().with_max_record(5);
        let mut verdicts = Vec::new();
        while r.read_record().unwrap() {
            verdicts.push((r.record_line(), r.invalid()));
        }
        let too_large = |n: usize| {
            Some(format!(
                "the record holds {n} bytes, more than the 5 a record may hold"
            ))
        };
        assert_eq!(
            verdicts,
            vec![
                (1, None),
                (2, None),
                (3, too_large(6)),
                (4, None),
                (5, None),
                (6, too_large(6)),
                (6, None),
            ]
        );
        let path = write(
            dir.path(),
            "wide.jsonl",
            b"{\"a\":\"xy\"}\n{\"a\":\"xyz\"}\n",
        );
        let mut r = InputReader::open(&path, b',').unwrap().with_max_record(3);
        assert!(r.read_header_record().unwrap());
        assert!(r.read_record().unwrap());
        assert_eq!(r.invalid(), None);
        assert_eq!(r.cell(0), Some(&b"xy"[..]));
        assert!(r.read_record().unwrap());
        assert_eq!(
            r.invalid(),
            Some("the record holds 4 bytes, more than the 3 a record may hold".to_string())
        );
    }

    #[test]
    fn resuming_at_every_record_boundary_yields_the_rest_exactly() {
        let dir = tempfile::tempdir().unwrap();
        // A record may begin with U+FEFF too: only the input's first bytes are a BOM.
        let text =
            b"\xEF\xBB\xBFa,b\r\n1,\"x,\"\"y\"\"\"\r\n2,\"multi\nline\"\n\xEF\xBB\xBF4,w\n3,z\r\n";
        let path = write(dir.path(), "t.csv", text);
        let mut r = InputReader::open(&path, b',').unwrap();
        assert!(r.read_record().unwrap());
        let mut positions = vec![(r.offset(), r.lines(), r.position_hash())];
        let mut all = Vec::new();
        while r.read_record().unwrap() {
            all.push(r.fields().map(|f| f.to_vec()).collect::<Vec<_>>());
            positions.push((r.offset(), r.lines(), r.position_hash()));
        }
        assert_eq!(all.len(), 4);
        assert_eq!(all[2][0], "\u{FEFF}4".as_bytes());
        assert_eq!(r.hash(), hash_input(&path).unwrap());
        for (k, (offset, lines, hash)) in positions.iter().enumerate() {
            let mut again = InputReader::open(&path, b',').unwrap();
            assert!(again.read_record().unwrap());
            again.resume_at(*offset, *lines, hash).unwrap();
            let rest: Vec<Vec<Vec<u8>>> = std::iter::from_fn(|| {
                again
                    .read_record()
                    .unwrap()
                    .then(|| again.fields().map(|f| f.to_vec()).collect())
            })
            .collect();
            assert_eq!(rest, all[k..].to_vec(), "resumed after record {k}");
        }
    }

    #[test]
    fn json_lines_resume_at_every_record_boundary_compressed_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(CHUNK + 1000); // a line that spans two buffer fills
        let text = format!(
            "{{\"a\": 1, \"b\": \"one\"}}\n\n{{\"b\": \"{long}\", \"a\": 2}}\r\n\
             {{\"a\": null}}\nnot json\n{{\"a\": [1, {{\"b\": 2}}], \"b\": \"\\u00e9\"}}"
        );
        let zst = zstd::encode_all(text.as_bytes(), 3).unwrap();
        for (name, bytes) in [("t.jsonl", text.as_bytes()), ("t.jsonl.zst", &zst[..])] {
            let path = write(dir.path(), name, bytes);
            let mut r = InputReader::open(&path, b',').unwrap();
            assert!(r.read_header_record().unwrap());
            assert_eq!(r.fields().collect::<Vec<_>>(), [b"a".as_slice(), b"b"]);
            let mut positions = Vec::new();
            let mut all = Vec::new();
            let mut raw = Vec::new();
            while r.read_record().unwrap() {
                raw.push(r.raw_record());
                let why = r.invalid();
                let cells: Vec<Option<Vec<u8>>> = (0..r.len())
                    .map(|i| r.cell(i).map(<[u8]>::to_vec))
                    .collect();
                all.push((r.record_line(), why, cells));
                positions.push((r.offset(), r.lines(), r.position_hash()));
            }
            let lines: Vec<u64> = all.iter().map(|(line, _, _)| *line).collect();
            assert_eq!(lines, [1, 3, 4, 5, 6], "{name}");
            assert_eq!(all[0].2, [Some(b"1".to_vec()), Some(b"one".to_vec())]);
            assert_eq!(all[1].2[1].as_ref().map(Vec::len), Some(long.len()));
            assert_eq!(all[2].2, [None, None]);
            assert!(all[3]
                .1
                .as_deref()
                .unwrap()
                .starts_with("not a JSON object"));
            assert_eq!(
                raw[1].len(),
                long.len() + 17,
                "a CRLF line, without its line end"
            );
            assert_eq!(raw[3], b"not json");
            assert_eq!(
                all[4].2,
                [
                    Some(b"[1, {\"b\": 2}]".to_vec()),
                    Some("é".as_bytes().to_vec())
                ]
            );
            assert_eq!(r.hash(), hash_input(&path).unwrap());
            for (k, (offset, lines, hash)) in positions.iter().enumerate() {
                let mut again = InputReader::open(&path, b',').unwrap();
                assert!(again.read_header_record().unwrap());
                again.resume_at(*offset, *lines, hash).unwrap();
                let mut rest = Vec::new();
                while again.read_record().unwrap() {
                    let why = again.invalid();
                    let cells: Vec<Option<Vec<u8>>> = (0..again.len())
                        .map(|i| again.cell(i).map(<[u8]>::to_vec))
                        .collect();
                    rest.push((again.record_line(), why, cells));
                }
                assert_eq!(
                    rest,
                    all[k + 1..].to_vec(),
                    "{name}: resumed after record {k}"
                );
            }
        }
    }

    #[test]
    fn gzip_inputs_are_positioned_in_decoded_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv.gz");
        let mut gz = flate2::write::GzEncoder::new(
            File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(b"a\n1\n2\n3\n").unwrap();
        gz.finish().unwrap();
        let mut r = InputReader::open(&path, b',').unwrap();
        assert_eq!(records(&mut r).len(), 4);
        let mut again = InputReader::open(&path, b',').unwrap();
        assert!(again.read_record().unwrap());
        let mut probe = InputReader::open(&path, b',').unwrap();
        for _ in 0..3 {
            probe.read_record().unwrap();
        }
        again
            .resume_at(probe.offset(), probe.lines(), &probe.position_hash())
            .unwrap();
        assert_eq!(records(&mut again), vec![vec!["3".to_string()]]);
        assert_eq!(again.record_line(), 5);
    }

    #[test]
    fn a_changed_prefix_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "t.csv", b"a\n1\n2\n");
        let mut r = InputReader::open(&path, b',').unwrap();
        r.read_record().unwrap();
        r.read_record().unwrap();
        let (offset, lines, hash) = (r.offset(), r.lines(), r.position_hash());
        write(dir.path(), "t.csv", b"a\n9\n2\n");
        let mut again = InputReader::open(&path, b',').unwrap();
        again.read_record().unwrap();
        let err = again
            .resume_at(offset, lines, &hash)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("changed since the interrupted run began"),
            "{err}"
        );
    }

    /// A reader hashing as it does an uncompressed object (chained over blocks); the
    /// reopen at a block boundary works on a file too (a seek for the ranged GET), and a
    /// file, unlike an object, can be changed in place to show what is read again.
    fn chained(path: &Path) -> InputReader {
        let mut r = InputReader::open(path, b',').unwrap();
        assert_eq!(r.offset(), 0, "nothing consumed before the header yet");
        r.hasher = ContentHash::for_input("s3://bucket/key.csv");
        r
    }

    #[test]
    fn a_chained_resume_reads_again_from_the_block_boundary_and_yields_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = b"id,note\n".to_vec();
        let mut i = 0;
        while text.len() < 9 << 20 {
            let note = if i % 5 == 0 {
                "\"a, \"\"b\"\"\nc\""
            } else {
                "plain"
            };
            text.extend_from_slice(format!("{i},{note}\n").as_bytes());
            i += 1;
        }
        let path = write(dir.path(), "big.csv", &text);
        let mut r = chained(&path);
        let mut positions = Vec::new();
        let mut rows = 0u64;
        assert!(r.read_header_record().unwrap());
        while r.read_record().unwrap() {
            rows += 1;
            if rows % 150_000 == 0 {
                positions.push((rows, r.offset(), r.lines(), r.position_hash()));
            }
        }
        let whole = r.hash();
        let block = super::super::content_hash::BLOCK;
        assert!(positions.iter().any(|p| p.1 < block));
        assert!(positions.iter().any(|p| p.1 > block));
        // A byte of the first block changes (an object's ETag would forbid that): only a
        // resume that reads the first block again can see it.
        let mut changed = text.clone();
        changed[1000] = if changed[1000] == b'7' { b'8' } else { b'7' };
        std::fs::write(&path, &changed).unwrap();
        for (done, offset, lines, recorded) in positions {
            let mut again = chained(&path);
            assert!(again.read_header_record().unwrap());
            let resumed = again.resume_at(offset, lines, &recorded);
            if offset < block {
                let err = resumed.unwrap_err().to_string();
                assert!(err.contains("changed since the interrupted run"), "{err}");
                continue;
            }
            resumed.unwrap();
            let mut rest = 0;
            let mut first = None;
            while again.read_record().unwrap() {
                first.get_or_insert_with(|| again.field(0).to_vec());
                rest += 1;
            }
            assert_eq!(done + rest, rows, "resumed at {offset}");
            assert_eq!(
                first,
                Some(done.to_string().into_bytes()),
                "resumed at {offset}"
            );
            // The hash is the unchanged content's: the changed byte was never read.
            assert_eq!(again.hash(), whole, "resumed at {offset}");
        }
        // What hash_input gives an object: the reader's hash of the same bytes.
        let mut plain = ContentHash::for_input("s3://bucket/key.csv");
        plain.update(&text);
        assert_eq!(plain.digest128(), whole);
    }

    #[test]
    fn a_position_from_before_chained_hashes_reads_an_object_again_from_its_first_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "t.csv", b"a\n1\n2\n3\n");
        // The position an older ingest recorded: the whole hash of the prefix.
        let mut old = InputReader::open(&path, b',').unwrap();
        for _ in 0..3 {
            old.read_record().unwrap();
        }
        let (offset, lines, recorded) = (old.offset(), old.lines(), old.position_hash());
        assert!(!recorded.starts_with("blocks:"));
        let mut again = chained(&path);
        assert!(again.read_record().unwrap());
        again.resume_at(offset, lines, &recorded).unwrap();
        assert_eq!(records(&mut again), vec![vec!["3".to_string()]]);
    }
}
