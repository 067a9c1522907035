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
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::reader::InputReader;
use crate::batch::{RecordBatch, BATCH_ROWS};

/// Bytes per chunk: enough to amortise a hand-over, few enough that a chunk in flight
/// per worker (and its parsed batches) keeps memory flat.
const CHUNK_BYTES: u64 = 1 << 20;

/// Bytes per chunk: `CHUNK_BYTES`, or `INGEST_CHUNK_BYTES` when set (for tests: small
/// chunks put chunk boundaries all over small inputs).
pub fn chunk_bytes() -> u64 {
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
pub struct ChunkJob {
    pub input: usize,
    pub path: Arc<str>,
    /// The input's size when the run began.
    pub size: u64,
    pub nominal: Range<u64>,
    /// `nominal.start` is a proven record boundary.
    pub proven: bool,
    pub delimiter: u8,
    /// For each table column, the input field that holds it.
    pub mapping: Arc<Vec<usize>>,
    pub header_len: usize,
    pub reply: SyncSender<Piece>,
}

/// A chunk's bytes as read, from stream position `at`.
#[derive(Clone)]
pub struct ChunkBytes {
    pub bytes: Arc<Vec<u8>>,
    pub at: u64,
}

impl ChunkBytes {
    /// The bytes of stream range `range`, which must lie within the chunk's.
    pub fn range(&self, range: Range<u64>) -> &[u8] {
        let from = (range.start - self.at) as usize;
        let to = (range.end - self.at) as usize;
        &self.bytes[from..to]
    }

    /// The stream position just past the last byte.
    pub fn end(&self) -> u64 {
        self.at + self.bytes.len() as u64
    }
}

/// True when a chunk whose first record was guessed to start at `start` really starts
/// there, the chunk before having ended at `end_before`: nothing but line ends lie
/// between (which a parser at a record's start skips, as the serial parser would).
pub fn proves(end_before: u64, start: u64, bytes: &ChunkBytes) -> bool {
    start >= end_before
        && bytes.at <= end_before
        && start <= bytes.end()
        && bytes
            .range(end_before..start)
            .iter()
            .all(|&b| b == b'\n' || b == b'\r')
}

/// A view of the bytes from stream position `from` on, for the chunk's reader.
struct Tail(ChunkBytes, usize);

impl AsRef<[u8]> for Tail {
    fn as_ref(&self) -> &[u8] {
        &self.0.bytes[self.1..]
    }
}

/// What a worker reports of a chunk, in order: `Begin`, then `Batch`es, then `End`;
/// or, at any point, `Redo` or `Failed`. Batches are nearly every piece: not boxed (as
/// `batch::Msg`).
#[allow(clippy::large_enum_variant)]
pub enum Piece {
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
pub struct OpenInput {
    input: Option<usize>,
    file: Option<File>,
}

/// Parses `job`, sending its pieces; stops early (quietly) when the reply channel is
/// closed: the chunk was given up, or the pipeline stopped.
pub fn parse(job: &ChunkJob, open: &mut OpenInput, spare: impl Fn() -> RecordBatch) {
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
        // The first line feed at or after the byte before the chunk.
        memchr::memchr(b'\n', &bytes.bytes).map_or(bytes.end(), |i| bytes.at + i as u64 + 1)
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
    let mut reader = InputReader::over_chunk(&job.path, Tail(bytes, from), start, job.delimiter)?;
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
    let mut bytes = vec![0; (end - at) as usize];
    read_exact_at(file, &mut bytes, at, job)?;
    // Then on to the line feed that ends the chunk's last line.
    let mut scanned = bytes.len().saturating_sub(1);
    let mut pos = end;
    while pos < job.size {
        if let Some(i) = memchr::memchr(b'\n', &bytes[scanned..]) {
            bytes.truncate(scanned + i + 1);
            return Ok(ChunkBytes {
                bytes: Arc::new(bytes),
                at,
            });
        }
        scanned = bytes.len();
        let more = (64 << 10).min(job.size - pos) as usize;
        bytes.resize(scanned + more, 0);
        read_exact_at(file, &mut bytes[scanned..], pos, job)?;
        pos += more as u64;
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

fn read_exact_at(file: &File, mut buf: &mut [u8], mut at: u64, job: &ChunkJob) -> Result<()> {
    while !buf.is_empty() {
        let n = read_at(file, buf, at, job)?;
        if n == 0 {
            bail!(
                "input {} changed while it was being read (it is now shorter than the {} bytes \
                 it had when the run began)",
                job.path,
                job.size
            );
        }
        buf = &mut buf[n..];
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Fingerprint;
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
    /// of the chunk parsed serially from where the one before ended.
    fn read_in_chunks(path: &std::path::Path, size: u64, header_end: u64, chunk: u64) -> Records {
        let mut records = Records::new();
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
                mapping: Arc::new(vec![0, 1]),
                header_len: 2,
                reply,
            };
            parse(&job, &mut open, || RecordBatch::new(2));
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
                            let fields = (0..2).map(|c| batch.field(row, c).to_vec()).collect();
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
        records
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
            let chunked = read_in_chunks(&path, bytes.len() as u64, header_end, chunk);
            prop_assert_eq!(chunked, serial);
        }
    }
}
