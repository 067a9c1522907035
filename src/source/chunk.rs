//! One chunk of a large CSV input, parsed on its own by a source worker.
//!
//! A chunk is a byte range of an uncompressed local input, `[nominal.start, nominal.end)`.
//! Its records are those that start in it: the worker begins at the first byte after a
//! line feed at or after `nominal.start` (or exactly at `nominal.start` when that is
//! already proven to be a record boundary: the end of the header, a resume position) and
//! parses until the first record boundary at or after `nominal.end`, which is where it
//! ends. That first byte is only a guess: a line feed may sit inside a quoted field. The
//! guess is proven when the chunks are put back in order (`parallel.rs`): it holds if the
//! chunk before ended exactly there, or only line ends lie between (which a parser at a
//! record's start skips). A chunk whose guess fails is parsed again, serially, from where
//! the one before really ended; so are chunks holding a bad row (their rejects carry
//! line numbers that must be the input's, and their order among good rows matters) and
//! chunks whose last record runs past the bytes read. Whatever the guess, the rows that
//! reach the sink are the serial parser's, in its order.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::reader::InputReader;
use crate::core::batch::{RecordBatch, BATCH_ROWS};

/// Bytes per chunk: enough to amortise a hand-over, few enough that a chunk in flight
/// per worker (and its parsed batches) keeps memory flat.
const CHUNK_BYTES: u64 = 1 << 20;

/// Bytes read past a chunk's nominal end at first, looking for the line feed that ends
/// its last line; doubled up to 64 KiB while none is found.
const TAIL_STEP: usize = 4 << 10;

/// Bytes per chunk: `CHUNK_BYTES`, or `INGEST_CHUNK_BYTES` when set (for tests: small
/// chunks put chunk boundaries all over small inputs).
pub(crate) fn chunk_bytes() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("INGEST_CHUNK_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(CHUNK_BYTES)
    })
}

/// What a worker is asked to parse.
pub(crate) struct ChunkJob {
    pub(crate) input: usize,
    pub(crate) path: Arc<str>,
    /// The input's size when the run began.
    pub(crate) size: u64,
    pub(crate) nominal: Range<u64>,
    /// `nominal.start` is a proven record boundary.
    pub(crate) proven: bool,
    pub(crate) delimiter: u8,
    /// For each table column, the input field that holds it.
    pub(crate) mapping: Arc<Vec<usize>>,
    pub(crate) header_len: usize,
    pub(crate) reply: SyncSender<Piece>,
}

/// A chunk's bytes as read, from stream position `at`.
#[derive(Clone)]
pub(crate) struct ChunkBytes {
    pub(crate) bytes: Arc<Vec<u8>>,
    pub(crate) at: u64,
}

impl ChunkBytes {
    /// The bytes of stream range `range`, which must lie within the chunk's.
    pub(crate) fn range(&self, range: Range<u64>) -> &[u8] {
        let from = (range.start - self.at) as usize;
        let to = (range.end - self.at) as usize;
        &self.bytes[from..to]
    }

    /// The stream position just past the last byte.
    pub(crate) fn end(&self) -> u64 {
        self.at + self.bytes.len() as u64
    }
}

/// True when a chunk whose first record was guessed to start at `start` really starts
/// there, the chunk before having ended at `end_before`: nothing but line ends lie
/// between (which a parser at a record's start skips, as the serial parser would).
pub(crate) fn proves(end_before: u64, start: u64, bytes: &ChunkBytes) -> bool {
    start >= end_before
        && bytes.at <= end_before
        && start <= bytes.end()
        && bytes
            .range(end_before..start)
            .iter()
            .all(|&b| b == b'\n' || b == b'\r')
}

/// What a worker reports of a chunk, in order: `Begin`, then `Batch`es, then `End`;
/// or, at any point, `Redo` or `Failed`. Batches are nearly every piece: not boxed (as
/// `batch::Msg`).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Piece {
    /// Where the chunk's first record starts (a guess unless proven) and its bytes.
    Begin {
        start: u64,
        bytes: ChunkBytes,
    },
    /// Good rows, lines counted from 1 at `start`, with each row's end position.
    Batch {
        batch: RecordBatch,
        ends: Vec<u64>,
    },
    /// The chunk ends at `end`, having sent every row.
    End {
        end: u64,
    },
    /// The rows after the ones sent must be parsed serially (see the module doc).
    Redo,
    Failed(anyhow::Error),
}

/// A worker's cached handle on the input it read last.
#[derive(Default)]
pub(crate) struct OpenInput {
    input: Option<usize>,
    file: Option<File>,
}

/// Parses `job`, sending its pieces; stops early (quietly) when the reply channel is
/// closed: the chunk was given up, or the pipeline stopped.
pub(crate) fn parse(job: &ChunkJob, open: &mut OpenInput, spare: impl Fn() -> RecordBatch) {
    match parse_chunk(job, open, spare) {
        Ok(()) | Err(Sent::Closed) => {}
        Err(Sent::Failed(e)) => {
            let _ = job.reply.send(Piece::Failed(e));
        }
    }
}

enum Sent {
    Closed,
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Sent {
    fn from(e: anyhow::Error) -> Sent {
        Sent::Failed(e)
    }
}

fn send(job: &ChunkJob, piece: Piece) -> std::result::Result<(), Sent> {
    job.reply.send(piece).map_err(|_| Sent::Closed)
}

fn parse_chunk(
    job: &ChunkJob,
    open: &mut OpenInput,
    spare: impl Fn() -> RecordBatch,
) -> std::result::Result<(), Sent> {
    let bytes = read_chunk(job, open)?;
    let start = if job.proven {
        job.nominal.start
    } else {
        bytes.at + guess_start(&bytes.bytes, job.delimiter, job.header_len) as u64
    };
    send(
        job,
        Piece::Begin {
            start,
            bytes: bytes.clone(),
        },
    )?;
    let stop = job.nominal.end;
    if start >= stop.min(bytes.end()) {
        return send(job, Piece::End { end: start });
    }
    let whole_rest = bytes.end() == job.size;
    let from = (start - bytes.at) as usize;
    let mut reader = InputReader::over_chunk(&job.path, bytes.bytes, from, start, job.delimiter);
    let identity = job.mapping.iter().enumerate().all(|(i, &m)| i == m);
    let mut batch = spare();
    let mut ends = Vec::with_capacity(BATCH_ROWS);
    while reader.offset() < stop {
        if !reader.read_record()? {
            break;
        }
        let bad = reader.invalid().is_some() || reader.len() != job.header_len;
        if bad || (reader.ended_by_eof() && !whole_rest) {
            if !batch.is_empty() {
                send(job, Piece::Batch { batch, ends })?;
            }
            return send(job, Piece::Redo);
        }
        let line = reader.record_line();
        if identity {
            reader.push_to(&mut batch, job.input as u32);
        } else {
            batch.push(
                job.mapping.iter().map(|&m| reader.field(m)),
                job.input as u32,
                line,
            );
        }
        ends.push(reader.offset());
        if batch.is_full() {
            let full = std::mem::replace(&mut batch, spare());
            let full_ends = std::mem::replace(&mut ends, Vec::with_capacity(BATCH_ROWS));
            send(
                job,
                Piece::Batch {
                    batch: full,
                    ends: full_ends,
                },
            )?;
        }
    }
    if !batch.is_empty() {
        send(job, Piece::Batch { batch, ends })?;
    }
    send(
        job,
        Piece::End {
            end: reader.offset(),
        },
    )
}

/// Line feeds tried as a chunk's first boundary before falling back to the first one.
const GUESSES: usize = 32;

/// Records that must follow a line feed for it to be taken as a boundary.
const RECORDS_TO_FIT: usize = 2;

/// Where the chunk's first record probably starts in `bytes`, which begin with the byte
/// before the chunk (see [`guess`]); the end of `bytes` if no line feed is in them.
fn guess_start(bytes: &[u8], delimiter: u8, fields: usize) -> usize {
    guess(bytes, delimiter, fields, true).unwrap_or(bytes.len())
}

/// Just after the first of the first [`GUESSES`] line feeds of `bytes` that is followed
/// by records that fit the header ([`records_fit`]); else just after the first line
/// feed, as a parser would guess. Only a guess, proven or redone when the chunks are put
/// in order; but a line feed inside a quoted field (an address, a note) made the first
/// one wrong for a fifth of the chunks of the benchmark's orders, each then parsed
/// again on the source thread. `None` when `bytes` stop before the guess is known and
/// are not `complete` (the input goes on); the chunk before reads on to the same guess
/// this way, so that it ends where the next one starts.
fn guess(bytes: &[u8], delimiter: u8, fields: usize, complete: bool) -> Option<usize> {
    let mut first = None;
    let mut seen = 0;
    for at in memchr::memchr_iter(b'\n', bytes)
        .map(|i| i + 1)
        .take(GUESSES)
    {
        first.get_or_insert(at);
        seen += 1;
        match records_fit(&bytes[at..], delimiter, fields) {
            Fit::Yes => return Some(at),
            Fit::No => {}
            Fit::Short if complete => {}
            Fit::Short => return None,
        }
    }
    if seen < GUESSES && !complete {
        return None;
    }
    first
}

/// Whether bytes begin with records that fit the header.
#[derive(Debug, PartialEq, Eq)]
enum Fit {
    /// [`RECORDS_TO_FIT`] records of the header's number of fields, in strict CSV (after
    /// any blank lines), each ended by a line end.
    Yes,
    No,
    /// The bytes end before that is known.
    Short,
}

fn records_fit(bytes: &[u8], delimiter: u8, fields: usize) -> Fit {
    let line_end = |b: u8| b == b'\n' || b == b'\r';
    let mut i = bytes.iter().take_while(|&&b| line_end(b)).count();
    for _ in 0..RECORDS_TO_FIT {
        let mut n = 1;
        loop {
            if bytes.get(i) == Some(&b'"') {
                // A quoted field: on to its closing quote ("" is an escaped quote).
                i += 1;
                loop {
                    let Some(q) = memchr::memchr(b'"', &bytes[i..]) else {
                        return Fit::Short;
                    };
                    i += q + 1;
                    if bytes.get(i) != Some(&b'"') {
                        break;
                    }
                    i += 1;
                }
            } else {
                while let Some(&b) = bytes.get(i) {
                    if b == delimiter || line_end(b) {
                        break;
                    }
                    if b == b'"' {
                        return Fit::No;
                    }
                    i += 1;
                }
            }
            match bytes.get(i) {
                Some(&b) if b == delimiter => {
                    n += 1;
                    i += 1;
                }
                Some(&b) if line_end(b) => break,
                Some(_) => return Fit::No,
                None => return Fit::Short,
            }
        }
        if n != fields {
            return Fit::No;
        }
        i += bytes[i..].iter().take_while(|&&b| line_end(b)).count();
    }
    Fit::Yes
}

/// Reads the chunk's bytes: from the byte before it (to see whether a line feed ends
/// there) through its nominal end, and on to the first line feed at or after its last
/// byte, where the next chunk's guess starts; or to the end of the input.
fn read_chunk(job: &ChunkJob, open: &mut OpenInput) -> Result<ChunkBytes> {
    if open.input != Some(job.input) || open.file.is_none() {
        let file =
            File::open(&*job.path).with_context(|| format!("cannot open input {}", job.path))?;
        open.file = Some(file);
        open.input = Some(job.input);
    }
    let Some(file) = &open.file else {
        bail!("cannot open input {}", job.path);
    };
    let at = if job.proven {
        job.nominal.start
    } else {
        job.nominal.start - 1
    };
    let end = job.nominal.end.min(job.size);
    let len = (end - at) as usize;
    // Read into fresh capacity: zeroing a buffer first (`vec![0; len]`) cost a pass over
    // every byte of the input.
    let mut bytes = Vec::with_capacity(len + TAIL_STEP);
    let mut reading = file;
    reading
        .seek(SeekFrom::Start(at))
        .and_then(|_| reading.take(len as u64).read_to_end(&mut bytes))
        .with_context(|| format!("cannot read input {}", job.path))?;
    if bytes.len() < len {
        bail!(changed_shorter(job));
    }
    // Then on to where the next chunk will guess that its first record starts (its
    // bytes begin with this chunk's last byte), a little at a time: it is usually a few
    // rows away.
    let from = bytes.len().saturating_sub(1);
    let mut pos = end;
    let mut step = TAIL_STEP;
    loop {
        let complete = pos >= job.size;
        if let Some(i) = guess(&bytes[from..], job.delimiter, job.header_len, complete) {
            if from + i < bytes.len() {
                bytes.truncate(from + i);
                return Ok(ChunkBytes {
                    bytes: Arc::new(bytes),
                    at,
                });
            }
        }
        if complete {
            break;
        }
        let read = bytes.len();
        let more = (step as u64).min(job.size - pos).max(1) as usize;
        bytes.resize(read + more, 0);
        read_exact_at(file, &mut bytes[read..], pos, job)?;
        pos += more as u64;
        step = (step * 2).min(64 << 10);
    }
    // The input must end here, as it did when the run began.
    let mut probe = [0u8; 1];
    if read_at(file, &mut probe, pos, job)? != 0 {
        bail!(
            "input {} changed while it was being read (it grew past the {} bytes it had when \
             the run began)",
            job.path,
            job.size
        );
    }
    Ok(ChunkBytes {
        bytes: Arc::new(bytes),
        at,
    })
}

fn read_at(file: &File, buf: &mut [u8], at: u64, job: &ChunkJob) -> Result<usize> {
    loop {
        match file.read_at(buf, at) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read input {}", job.path)),
        }
    }
}

fn changed_shorter(job: &ChunkJob) -> String {
    format!(
        "input {} changed while it was being read (it is now shorter than the {} bytes it \
         had when the run began)",
        job.path, job.size
    )
}

fn read_exact_at(file: &File, mut buf: &mut [u8], mut at: u64, job: &ChunkJob) -> Result<()> {
    while !buf.is_empty() {
        let n = read_at(file, buf, at, job)?;
        if n == 0 {
            bail!(changed_shorter(job));
        }
        buf = &mut buf[n..];
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::protocol::Fingerprint;
    use proptest::prelude::*;
    use std::sync::mpsc::sync_channel;

    /// Each record's fields and the position just after it.
    type Records = Vec<(Vec<Vec<u8>>, u64)>;

    fn read_serially(reader: &mut InputReader, stop: Option<u64>, out: &mut Records) {
        while stop.is_none_or(|s| reader.offset() < s) && reader.read_record().unwrap() {
            let fields = reader.fields().map(<[u8]>::to_vec).collect();
            out.push((fields, reader.offset()));
        }
    }

    /// The records as the chunks give them, put in order the way the source thread
    /// does: a worker's rows where its start is proven and it needs no redo, the rest
    /// of the chunk parsed serially from where the one before ended; and how many
    /// chunks were parsed again that way.
    fn read_in_chunks(
        path: &std::path::Path,
        size: u64,
        header_end: u64,
        chunk: u64,
        fields: usize,
    ) -> (Records, usize) {
        let mut records = Records::new();
        let mut redone = 0;
        let mut at = header_end;
        let mut from = header_end;
        let mut open = OpenInput::default();
        while from < size {
            let end = (from + chunk).min(size);
            let (reply, pieces) = sync_channel(64);
            let job = ChunkJob {
                input: 0,
                path: Arc::from(path.to_str().unwrap()),
                size,
                nominal: from..end,
                proven: from == header_end,
                delimiter: b',',
                mapping: Arc::new((0..fields).collect()),
                header_len: fields,
                reply,
            };
            parse(&job, &mut open, || RecordBatch::new(fields));
            drop(job);
            let mut redo = true;
            for piece in pieces.iter() {
                match piece {
                    Piece::Begin { start, bytes } => {
                        if !proves(at, start, &bytes) {
                            break;
                        }
                        at = start;
                    }
                    Piece::Batch { batch, ends } => {
                        for (row, end) in ends.into_iter().enumerate() {
                            let fields = (0..fields).map(|c| batch.field(row, c).to_vec());
                            let fields = fields.collect();
                            records.push((fields, end));
                            at = end;
                        }
                    }
                    Piece::End { end } => {
                        at = end;
                        redo = false;
                    }
                    Piece::Redo => break,
                    Piece::Failed(e) => panic!("{e}"),
                }
            }
            if redo {
                redone += 1;
                let input = Fingerprint {
                    path: path.to_str().unwrap().to_string(),
                    size,
                    mtime_ns: 0,
                    dev: 0,
                    ino: 0,
                    etag: None,
                };
                let hash = super::super::content_hash::ContentHash::for_input(&input.path);
                let mut reader = InputReader::open_at(&input, b',', at, 1, hash).unwrap();
                read_serially(&mut reader, (end < size).then_some(end), &mut records);
                at = reader.offset();
            }
            from = end;
        }
        assert_eq!(at, size, "the chunks end where the input does");
        (records, redone)
    }

    /// Two-column CSV built from pieces that put quotes, line ends (LF, CRLF, CR) and
    /// blank lines anywhere, some of them malformed.
    fn csv() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(&b"a"[..]),
            Just(&b"bc"[..]),
            Just(&b","[..]),
            Just(&b"\n"[..]),
            Just(&b"\r\n"[..]),
            Just(&b"\r"[..]),
            Just(&b"\"x\ny\""[..]),
            Just(&b"\"q\"\"\r\n\""[..]),
            Just(&b"\""[..]),
            Just(&b"\"\n\n\""[..]),
            Just(&b"\xC3\xA9"[..]),
        ];
        proptest::collection::vec(piece, 0..120).prop_map(|pieces| {
            let mut bytes = b"k,v\n".to_vec();
            for p in pieces {
                bytes.extend_from_slice(p);
            }
            bytes
        })
    }

    #[test]
    fn the_guess_passes_line_feeds_inside_quoted_fields() {
        let guess = |bytes: &[u8]| guess_start(bytes, b',', 3);
        // The byte before the chunk ends a line: the guess is right after it.
        assert_eq!(guess(b"\n1,2,3\n4,5,6\n"), 1);
        // Inside a quoted field holding line feeds: the records after its close.
        let text = b"x\nb\nc\",3\n4,\"q\"\"\n\",6\r\n7,8,9\n";
        assert_eq!(guess(text), 9);
        // After two lines that do not fit, a blank line, then records that do.
        assert_eq!(guess(b"a\nb\n\n1,2,3\n4,5,6\n"), 4);
        // Records that fit but run out of bytes are no proof: the first line feed.
        assert_eq!(guess(b"\"\n1,2,3\n4,5"), 2);
        assert_eq!(guess(b"ab\n1,2\n3\n"), 3);
        // No line feed: nothing of the chunk starts a record.
        assert_eq!(guess(b"abc"), 3);
    }

    #[test]
    fn a_guess_waits_for_the_bytes_that_decide_it() {
        let text = b"x\nb\nc\",3\n4,\"q\"\"\n\",6\r\n7,8,9\n";
        // Cut anywhere before the second fitting record ends, the input going on: more
        // bytes are needed; then the same guess as with every byte.
        for cut in 0..text.len() {
            let guessed = guess(&text[..cut], b',', 3, false);
            assert!(
                guessed.is_none() || guessed == Some(9),
                "cut at {cut}: {guessed:?}"
            );
        }
        assert_eq!(guess(text, b',', 3, false), Some(9));
        // A quoted field still open where the bytes end may yet close: no later feed
        // is taken before it is known, unless the input ends there.
        let open = b"x\n1,\"a\n2,3,4\n5,6,7\n";
        assert_eq!(guess(open, b',', 3, false), None);
        assert_eq!(guess(open, b',', 3, true), Some(7));
        // Every line feed tried and none fits: the first, however many bytes follow.
        let mut lines = b"x".to_vec();
        lines.extend(b"\na,b".repeat(GUESSES));
        lines.push(b'\n');
        assert_eq!(guess(&lines, b',', 3, false), Some(2));
        assert_eq!(guess(&lines[..20], b',', 3, false), None);
        assert_eq!(guess(&lines[..20], b',', 3, true), Some(2));
        assert_eq!(records_fit(b"1,\"2\n\",3\n", b',', 3), Fit::Short);
        assert_eq!(records_fit(b"1,2\"x,3\n", b',', 3), Fit::No);
        assert_eq!(records_fit(b"1,\"2\"x,3\n", b',', 3), Fit::No);
        assert_eq!(records_fit(b"1,2,\"3\"4,5,6\n7,8,9\n", b',', 3), Fit::No);
        assert_eq!(records_fit(b"\r\n1,2,\"3\"\n4,5,6\n", b',', 3), Fit::Yes);
    }

    #[test]
    fn line_feeds_in_quoted_fields_send_no_chunk_back_to_the_source_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.csv");
        let mut text = b"id,note,n\n".to_vec();
        for i in 0..400 {
            let note = match i % 3 {
                0 => "\"line one\nline two\"",
                1 => "\"comma, quote \"\" and\r\nnewline\"",
                _ => "plain",
            };
            text.extend_from_slice(format!("{i},{note},{}\n", i * 7).as_bytes());
        }
        std::fs::write(&path, &text).unwrap();
        let mut serial = Records::new();
        let mut reader = InputReader::open(&path, b',').unwrap();
        assert!(reader.read_header_record().unwrap());
        let header_end = reader.offset();
        read_serially(&mut reader, None, &mut serial);
        for chunk in [97, 256, 1000, 4096] {
            let (chunked, redone) = read_in_chunks(&path, text.len() as u64, header_end, chunk, 3);
            assert_eq!(chunked, serial, "chunks of {chunk} bytes");
            assert_eq!(redone, 0, "chunks of {chunk} bytes parsed again");
        }
    }

    fn job(path: &std::path::Path, size: u64, nominal: Range<u64>, fields: usize) -> ChunkJob {
        ChunkJob {
            input: 0,
            path: Arc::from(path.to_str().unwrap()),
            size,
            proven: false,
            nominal,
            delimiter: b',',
            mapping: Arc::new((0..fields).collect()),
            header_len: fields,
            reply: sync_channel(1).0,
        }
    }

    #[test]
    fn a_chunk_reads_on_to_where_the_next_one_will_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.csv");
        // Notes with line feeds, one of them 100 KiB long: the tail of the chunk it
        // straddles is read in several steps.
        let mut text = b"id,note,n\n".to_vec();
        for i in 0..300 {
            let note = match i % 4 {
                0 => "\"a\nb\"".to_string(),
                1 if i == 101 => format!("\"{}\"", "long\nline, ".repeat(9000)),
                _ => "plain".to_string(),
            };
            text.extend_from_slice(format!("{i},{note},{i}\n").as_bytes());
        }
        std::fs::write(&path, &text).unwrap();
        let size = text.len() as u64;
        let mut open = OpenInput::default();
        for chunk in [300, 5000, 40_000] {
            let mut from = 10;
            while from + chunk < size {
                let end = from + chunk;
                let read = read_chunk(&job(&path, size, from..end, 3), &mut open).unwrap();
                let next = read_chunk(&job(&path, size, end..size, 3), &mut open).unwrap();
                let start = next.at + guess_start(&next.bytes, b',', 3) as u64;
                assert_eq!(read.end(), start, "the chunk at {from}..{end}");
                assert_eq!(
                    read.range(read.at..read.end()),
                    &text[read.at as usize..start as usize]
                );
                from = end;
            }
        }
    }

    #[test]
    fn an_input_that_shrank_or_grew_since_the_run_began_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, b"k,v\n1,2\n3,4\n").unwrap();
        let mut open = OpenInput::default();
        // (size when the run began, the chunk, what the error says)
        let cases: [(u64, Range<u64>, &str); 4] = [
            (40, 5..20, "now shorter than the 40 bytes"),
            // The last chunk: no tail to read would notice.
            (40, 5..40, "now shorter than the 40 bytes"),
            (10, 5..10, "grew past the 10 bytes"),
            // The chunk ends with a line end where the input then ended.
            (8, 5..8, "grew past the 8 bytes"),
        ];
        for (size, nominal, says) in cases {
            let Err(err) = read_chunk(&job(&path, size, nominal.clone(), 2), &mut open) else {
                panic!("{size} bytes, {nominal:?}: read");
            };
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[test]
    fn a_guess_is_proven_only_right_after_the_chunk_before_or_past_line_ends() {
        let bytes = ChunkBytes {
            bytes: Arc::new(b"x\n\r\nab,c\n".to_vec()),
            at: 100,
        };
        // The chunk before ended at 102: the guess at 104 lies past a CRLF only.
        assert!(proves(102, 104, &bytes));
        assert!(proves(104, 104, &bytes));
        assert!(proves(101, 101, &bytes));
        // A record's bytes between: the guess is inside or after a record.
        assert!(!proves(100, 104, &bytes));
        assert!(!proves(104, 106, &bytes));
        // The guess before where the chunk before ended.
        assert!(!proves(105, 104, &bytes));
        // Bytes that do not reach back to the end, or forward to the guess.
        assert!(!proves(99, 99, &bytes));
        assert!(!proves(110, 111, &bytes));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn chunks_put_in_order_give_the_serial_parsers_records(
            bytes in csv(),
            chunk in 1u64..40,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("in.csv");
            std::fs::write(&path, &bytes).unwrap();
            let mut serial = Records::new();
            let mut reader = InputReader::open(&path, b',').unwrap();
            assert!(reader.read_header_record().unwrap());
            let header_end = reader.offset();
            read_serially(&mut reader, None, &mut serial);
            let (chunked, _) = read_in_chunks(&path, bytes.len() as u64, header_end, chunk, 2);
            prop_assert_eq!(chunked, serial);
        }
    }
}
