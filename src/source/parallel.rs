//! Parsing with several threads, as if with one.
//!
//! The source thread plans the inputs in order into units: each large uncompressed local
//! CSV input (after its header) becomes chunks of `chunk::chunk_bytes()` that a pool of workers
//! parses at once (`chunk.rs`); any other input (compressed, JSON lines, an object in a
//! bucket) is one unit the source thread reads itself when its turn comes. A bounded
//! window of units is in flight, so workers run ahead across chunks and inputs while
//! memory stays flat.
//!
//! The source thread then takes the units back in plan order, so the rows leave in
//! exactly the order one thread would read them, and does what needs that order:
//! - proves each chunk's first record boundary (see `chunk.rs`), or parses the chunk
//!   again from where the one before ended;
//! - hashes every byte of the input in order (the same content hash a serial read
//!   computes) and counts its lines, from the chunks' own bytes;
//! - numbers the rows' lines in the input, cuts batches where a barrier falls, and
//!   emits barriers every `--checkpoint-rows` rows at the exact position after the
//!   row, with the hash and line count there.
//!
//! So a checkpoint is still one cut of one ordered stream: every row before its position
//! is in it, none after; recovery and the journal know nothing of the workers.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use anyhow::{anyhow, Result};

use super::chunk::{self, chunk_bytes, ChunkBytes, ChunkJob, OpenInput, Piece};
use super::content_hash::ContentHash;
use super::reader::{self, InputReader};
use super::{open, Columns, Opened, Source};
use crate::core::batch::RecordBatch;
use crate::core::error::Stopped;
use crate::core::protocol::Position;

/// Pieces a worker may send ahead for one chunk before it waits for the source thread.
const PIECES_AHEAD: usize = 2;

/// A planned unit of reading, in input order.
enum Unit {
    /// Input `index` has no header: empty.
    Empty { index: usize, hash: u128 },
    /// Input `index`, read on the source thread.
    Serial {
        index: usize,
        reader: Box<InputReader>,
        columns: Columns,
    },
    /// A chunk of input `index`, parsed by a worker.
    Chunk {
        index: usize,
        nominal: Range<u64>,
        /// The input's first chunk: where its reading begins.
        first: Option<Box<Begin>>,
        last: bool,
        pieces: Receiver<Piece>,
    },
    /// Opening input `index` failed: the run fails when its turn comes.
    Failed { index: usize, error: anyhow::Error },
}

impl Unit {
    /// The input the unit belongs to.
    fn input(&self) -> usize {
        match self {
            Unit::Empty { index, .. }
            | Unit::Serial { index, .. }
            | Unit::Chunk { index, .. }
            | Unit::Failed { index, .. } => *index,
        }
    }
}

/// An input's reading state where its first chunk starts.
struct Begin {
    at: Cursor,
    columns: Columns,
}

/// The running state of the input being put back in order: every byte before `offset`
/// hashed, and the parser's line number there.
#[derive(Clone)]
struct Cursor {
    offset: u64,
    lines: u64,
    hasher: ContentHash,
}

impl Cursor {
    fn of(reader: &InputReader) -> Cursor {
        Cursor {
            offset: reader.offset(),
            lines: reader.lines(),
            hasher: reader.content_hash(),
        }
    }

    /// Hashes and counts the bytes up to `to`, which `bytes` holds.
    fn advance(&mut self, bytes: &ChunkBytes, to: u64) {
        if to <= self.offset {
            return;
        }
        let run = bytes.range(self.offset..to);
        self.hasher.update(run);
        self.lines += memchr::memchr_iter(b'\n', run).count() as u64;
        self.offset = to;
    }

    fn position(&self, input: usize) -> Position {
        Position {
            input,
            offset: self.offset,
            lines: self.lines,
            prefix_hash: self.hasher.position(),
        }
    }
}

/// True for an input whose chunks can be parsed apart: plain CSV in a local file.
fn splittable(path: &str) -> bool {
    !reader::is_compressed(path)
        && !reader::is_jsonl(path)
        && !crate::core::url::is_url_path(std::path::Path::new(path))
}

/// Plans the inputs into units, opening each in turn.
struct Planner {
    next_input: usize,
    /// The input being cut into chunks: its index, its next chunk's start, its columns.
    chunking: Option<(usize, u64, Columns)>,
    jobs: SyncSender<ChunkJob>,
}

impl Planner {
    /// The next unit, or `None` when every input is planned.
    fn next(&mut self, source: &Source) -> Result<Option<Unit>> {
        let plan = source.plan;
        if let Some((index, from, columns)) = self.chunking.take() {
            return self.chunk(source, index, from, columns, None).map(Some);
        }
        let mut index = self.next_input;
        while plan.skip.contains(&index) {
            index += 1;
        }
        if index >= plan.inputs.len() {
            return Ok(None);
        }
        self.next_input = index + 1;
        let (reader, columns) = match open(plan, index) {
            Err(error) => return Ok(Some(Unit::Failed { index, error })),
            Ok(Opened::Empty(hash)) => return Ok(Some(Unit::Empty { index, hash })),
            Ok(Opened::Reading(reader, columns)) => (reader, columns),
        };
        // An input lacking columns is rare: read whole, it keeps the workers simple.
        if !splittable(&plan.inputs[index].path) || columns.lacks_some() {
            return Ok(Some(Unit::Serial {
                index,
                reader,
                columns,
            }));
        }
        let at = Cursor::of(&reader);
        let from = at.offset;
        let begin = Begin {
            at,
            columns: columns.clone(),
        };
        self.chunk(source, index, from, columns, Some(Box::new(begin)))
            .map(Some)
    }

    /// Hands the chunk of input `index` that starts at `from` to the workers.
    fn chunk(
        &mut self,
        source: &Source,
        index: usize,
        from: u64,
        columns: Columns,
        first: Option<Box<Begin>>,
    ) -> Result<Unit> {
        let plan = source.plan;
        let input = &plan.inputs[index];
        let bytes = chunk_bytes();
        let end = from.saturating_add(bytes).min(input.size);
        // A small rest joins this chunk rather than make one of its own.
        let end = if input.size - end < bytes / 4 {
            input.size
        } else {
            end
        };
        let last = end >= input.size;
        let (reply, pieces) = sync_channel(PIECES_AHEAD);
        let job = ChunkJob {
            input: index,
            path: Arc::from(input.path.as_str()),
            size: input.size,
            nominal: from..end,
            proven: first.is_some(),
            delimiter: plan.delimiter,
            mapping: columns.mapping.clone(),
            header_len: columns.header_len,
            reply,
        };
        if !last {
            self.chunking = Some((index, end, columns));
        }
        self.jobs
            .send(job)
            .map_err(|_| anyhow!("the source workers stopped"))?;
        Ok(Unit::Chunk {
            index,
            nominal: from..end,
            first,
            last,
            pieces,
        })
    }
}

/// Reads every input with up to `workers` parse workers; `Some` when a signal stopped it.
pub(crate) fn read_all(source: &mut Source, workers: usize) -> Result<Option<Stopped>> {
    // More workers than cores parse no faster, and each holds a chunk and its batches;
    // two at least, so that chunks finish out of order even on one core.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let workers = workers.clamp(1, cores.max(2));
    // Units in flight: one being put in order and one in every worker's hands. Each
    // holds its chunk's bytes and up to `PIECES_AHEAD` batches: with more, peak memory
    // grew by 10 MiB per worker and the load was no faster.
    let window = workers + 1;
    let (jobs, queue) = sync_channel::<ChunkJob>(window);
    let queue = Mutex::new(queue);
    let ncols = source.plan.columns.len();
    let spares = source.emit.spares.clone();
    let spares = &spares;
    thread::scope(|scope| {
        for i in 0..workers {
            let queue = &queue;
            let spawned = thread::Builder::new()
                .name(format!("ingest-parse-{i}"))
                .spawn_scoped(scope, move || {
                    let mut open = OpenInput::default();
                    let spare = || {
                        spares
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .take(ncols)
                    };
                    loop {
                        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok(job) = job else { return };
                        chunk::parse(&job, &mut open, spare);
                    }
                });
            if let Err(e) = spawned {
                return Err(anyhow!("cannot start a source worker: {e}"));
            }
        }
        let mut planner = Planner {
            next_input: source.plan.resume.as_ref().map_or(0, |p| p.input),
            chunking: None,
            jobs,
        };
        // The planner (the job queue) and the units (the replies) are dropped on the way
        // out, which lets every worker finish.
        Sequencer {
            units: VecDeque::new(),
            window,
        }
        .run(source, &mut planner)
    })
}

/// Takes the units back in plan order.
struct Sequencer {
    units: VecDeque<Unit>,
    window: usize,
}

impl Sequencer {
    fn run(mut self, source: &mut Source, planner: &mut Planner) -> Result<Option<Stopped>> {
        let plan = source.plan;
        let first = plan.resume.as_ref().map_or(0, |p| p.input);
        source.bytes_before = plan.inputs.iter().take(first).map(|i| i.size).sum();
        let mut reading: Option<(Cursor, Columns)> = None;
        loop {
            while self.units.len() < self.window {
                match planner.next(source)? {
                    Some(unit) => self.units.push_back(unit),
                    None => break,
                }
            }
            let Some(unit) = self.units.pop_front() else {
                return Ok(None);
            };
            let index = unit.input();
            let stopped = self
                .take(source, unit, &mut reading)
                .map_err(|e| crate::core::bad_input::of_input(index, e))?;
            if stopped.is_some() {
                return Ok(stopped);
            }
        }
    }

    /// Puts one unit in order: its rows sent on, its input done if it was the last.
    fn take(
        &mut self,
        source: &mut Source,
        unit: Unit,
        reading: &mut Option<(Cursor, Columns)>,
    ) -> Result<Option<Stopped>> {
        let plan = source.plan;
        {
            let stopped = match unit {
                Unit::Failed { index, error } => {
                    if let Some(stopped) = source.stop_before_input(index)? {
                        return Ok(Some(stopped));
                    }
                    return Err(error);
                }
                Unit::Empty { index, hash } => {
                    if let Some(stopped) = source.stop_before_input(index)? {
                        return Ok(Some(stopped));
                    }
                    source.input_done(index, hash);
                    None
                }
                Unit::Serial {
                    index,
                    mut reader,
                    columns,
                } => {
                    if let Some(stopped) = source.stop_before_input(index)? {
                        return Ok(Some(stopped));
                    }
                    source.read_whole(index, &mut reader, &columns)?
                }
                Unit::Chunk {
                    index,
                    nominal,
                    first,
                    last,
                    pieces,
                } => {
                    if let Some(begin) = first {
                        if let Some(stopped) = source.stop_before_input(index)? {
                            return Ok(Some(stopped));
                        }
                        plan.counters.set_file(&plan.inputs[index].path);
                        *reading = Some((begin.at, begin.columns));
                    }
                    let Some((at, columns)) = reading else {
                        return Err(anyhow!("internal error: a chunk before its input began"));
                    };
                    let chunk = Chunk {
                        index,
                        nominal,
                        last,
                    };
                    let stopped = chunk.take(source, pieces, at, columns)?;
                    if stopped.is_none() && last {
                        source.check_whole(index, at.offset)?;
                        source.input_done(index, at.hasher.digest128());
                        *reading = None;
                    }
                    stopped
                }
            };
            Ok(stopped)
        }
    }
}

/// A chunk being put in order.
struct Chunk {
    index: usize,
    nominal: Range<u64>,
    last: bool,
}

impl Chunk {
    /// Puts the chunk in order after `at` (where the chunk before ended), from its
    /// worker's pieces or, where they cannot be used, by parsing it here.
    fn take(
        &self,
        source: &mut Source,
        pieces: Receiver<Piece>,
        at: &mut Cursor,
        columns: &Columns,
    ) -> Result<Option<Stopped>> {
        let mut bytes: Option<ChunkBytes> = None;
        let mut line_base = 0;
        // Where the rows already sent end.
        let mut sent_to = at.offset;
        loop {
            let Ok(piece) = pieces.recv() else {
                return Err(anyhow!("internal error: a source worker stopped"));
            };
            match piece {
                Piece::Begin { start, bytes: read } => {
                    if !chunk::proves(at.offset, start, &read) {
                        break;
                    }
                    at.advance(&read, start);
                    line_base = at.lines - 1;
                    sent_to = start;
                    bytes = Some(read);
                }
                Piece::Batch { mut batch, ends } => {
                    let Some(read) = &bytes else {
                        return Err(anyhow!("internal error: rows before their chunk began"));
                    };
                    batch.shift_lines(line_base);
                    sent_to = ends.last().copied().unwrap_or(sent_to);
                    if let Some(stopped) = source.send_rows(self.index, batch, ends, at, read)? {
                        return Ok(Some(stopped));
                    }
                }
                Piece::End { end } => {
                    let Some(read) = &bytes else {
                        return Err(anyhow!("internal error: a chunk ended before it began"));
                    };
                    at.advance(read, end);
                    source.progress(at.offset)?;
                    return Ok(None);
                }
                Piece::Redo => break,
                Piece::Failed(e) => return Err(e),
            }
        }
        // The worker's rows stop at `sent_to`: parse the rest of the chunk here.
        drop(pieces);
        if let Some(read) = &bytes {
            at.advance(read, sent_to);
        }
        let plan = source.plan;
        let mut reader = InputReader::open_at(
            &plan.inputs[self.index],
            plan.delimiter,
            at.offset,
            at.lines,
            at.hasher.clone(),
        )?;
        // The last chunk reads to the end of the input, to notice an input that grew.
        let stop = (!self.last).then_some(self.nominal.end);
        let stopped = source.read_records(&mut reader, self.index, columns, stop)?;
        *at = Cursor::of(&reader);
        Ok(stopped)
    }
}

impl Source<'_> {
    /// Sends a worker's rows on, cutting the batch where barriers fall; `ends` is each
    /// row's end position, `at` the cursor to advance to a barrier's position.
    fn send_rows(
        &mut self,
        index: usize,
        mut batch: RecordBatch,
        mut ends: Vec<u64>,
        at: &mut Cursor,
        bytes: &ChunkBytes,
    ) -> Result<Option<Stopped>> {
        let plan = self.plan;
        // Rows read here (a chunk parsed again) go first.
        self.flush()?;
        while !batch.is_empty() {
            let until_barrier = plan.checkpoint_rows - self.emit.rows_since_barrier;
            let rows = batch.len() as u64;
            if rows < until_barrier {
                self.emit.rows_read += rows;
                self.emit.rows_since_barrier += rows;
                let end = ends.last().copied().unwrap_or(at.offset);
                self.progress(end)?;
                self.batch = batch;
                self.flush()?;
                return self.stop_requested(|| {
                    at.advance(bytes, end);
                    at.position(index)
                });
            }
            let cut = until_barrier as usize;
            let mut tail = self.emit.spare(batch.width());
            batch.split_off(cut, &mut tail);
            let tail_ends = ends.split_off(cut);
            // (The barrier starts the next checkpoint's count.)
            self.emit.rows_read += until_barrier;
            let end = ends[cut - 1];
            self.progress(end)?;
            self.batch = batch;
            self.flush()?;
            at.advance(bytes, end);
            self.emit.barrier(at.position(index), false)?;
            batch = tail;
            ends = tail_ends;
        }
        Ok(None)
    }
}
