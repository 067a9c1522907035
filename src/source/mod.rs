//! The source: enumerates inputs, reads their records, and emits a checkpoint barrier
//! every `checkpoint_rows` records and at the end, each carrying the exact position to
//! resume from. Its acknowledgement of barrier n is that position.

mod chunk;
mod content_hash;
pub(crate) mod discover;
pub(crate) mod jsonl;
pub(crate) mod names;
mod parallel;
mod quoted_records;
mod quotes;
mod readahead;
pub(crate) mod reader;
pub(crate) mod select;
mod specials;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, SyncSender};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};

use crate::core::bad_input::of_input;
use crate::core::batch::{Msg, RecordBatch, Reject, Spares};
use crate::core::counters::Counters;
use crate::core::error::Stopped;
use crate::core::hash::hash_hex;
use crate::core::pressure;
use crate::core::protocol::{Ack, Barrier, Fingerprint, InputDone, Position};
use crate::core::sys::failpoint;
use crate::core::sys::signals;
use reader::InputReader;

/// The byte of its input from which a resume at `position` reads again: the last block
/// boundary before it for an object's chained hash (a ranged GET), else the first byte.
pub(crate) fn reread_from(position: &Position) -> u64 {
    match content_hash::ContentHash::resume(&position.prefix_hash, position.offset) {
        Ok(Some((from, _))) => from,
        _ => 0,
    }
}

/// Reads the header of the first non-empty input: the table's columns for this run; for
/// JSON lines, the keys of a sample of the objects (`jsonl.rs`).
pub(crate) fn read_columns(inputs: &[Fingerprint], delimiter: u8) -> Result<Option<Vec<String>>> {
    if let Some(sampled) = sample_json(inputs)? {
        return Ok(Some(sampled.into_iter().map(|(k, _)| k).collect()));
    }
    for input in inputs {
        let mut reader = InputReader::open_input(input, delimiter)?;
        if let Some(header) = read_header(&mut reader)? {
            return Ok(Some(header));
        }
    }
    Ok(None)
}

/// Whether a load's columns come from a JSON lines sample (its first input is JSON
/// lines) rather than a CSV header.
pub(crate) fn is_jsonl_load(inputs: &[Fingerprint]) -> bool {
    inputs.first().is_some_and(|i| reader::is_jsonl(&i.path))
}

/// The columns of a load whose first input is JSON lines, with the kinds of values the
/// first `jsonl::SAMPLE_ROWS` objects of its JSON inputs hold; `None` when the first
/// input is not JSON lines (or no JSON input holds an object).
pub(crate) fn sample_json(inputs: &[Fingerprint]) -> Result<Option<Vec<(String, jsonl::Kinds)>>> {
    use std::io::BufRead;
    if !inputs.first().is_some_and(|i| reader::is_jsonl(&i.path)) {
        return Ok(None);
    }
    let mut columns = Vec::new();
    let mut sampled = 0;
    for input in inputs.iter().filter(|i| reader::is_jsonl(&i.path)) {
        let path = Path::new(&input.path);
        let mut lines = std::io::BufReader::new(reader::open_decoded(path)?);
        let mut line = Vec::new();
        while sampled < jsonl::SAMPLE_ROWS {
            line.clear();
            let n = lines
                .read_until(b'\n', &mut line)
                .with_context(|| format!("cannot read input {}", path.display()))?;
            if n == 0 {
                break;
            }
            if !jsonl::is_blank(&line) && jsonl::sample(&line, &mut columns) {
                sampled += 1;
            }
        }
    }
    Ok((!columns.is_empty()).then_some(columns))
}

/// Reads an input's header row; `None` for an input without one (empty).
pub(crate) fn read_header(reader: &mut InputReader) -> Result<Option<Vec<String>>> {
    if !reader.read_header_record()? {
        return Ok(None);
    }
    if let Some(why) = reader.invalid() {
        bail!(
            "{}:{}: bad header: {why}",
            reader.name(),
            reader.record_line()
        );
    }
    let mut header = Vec::with_capacity(reader.len());
    for (i, field) in reader.fields().enumerate() {
        match std::str::from_utf8(field) {
            Ok(name) => header.push(name.to_string()),
            Err(_) => bail!(
                "{}:{}: header field {} is not valid UTF-8 (inputs must be UTF-8)",
                reader.name(),
                reader.record_line(),
                i + 1
            ),
        }
    }
    if let [only] = header.as_slice() {
        // One column whose name holds another common delimiter: almost surely the wrong
        // --delimiter, which would load every row as one field.
        let delimiter = reader.delimiter();
        let other = [b',', b';', b'\t', b'|']
            .into_iter()
            .find(|&d| d != delimiter && only.as_bytes().contains(&d));
        if let (Some(other), false) = (other, reader.was_quoted()) {
            let spell = |d: u8| match d {
                b'\t' => "tab".to_string(),
                d => (d as char).to_string(),
            };
            bail!(
                "{}:{}: the header parsed as one column, {only:?}, with the delimiter {:?}, \
                 but it holds {:?}: pass --delimiter {:?} (a single column whose name holds \
                 it must be quoted)",
                reader.name(),
                reader.record_line(),
                spell(delimiter),
                spell(other),
                spell(other)
            );
        }
    }
    for (i, name) in header.iter().enumerate() {
        if header[..i].contains(name) {
            bail!(
                "{}:{}: the header names column {name:?} twice",
                reader.name(),
                reader.record_line()
            );
        }
    }
    Ok(Some(header))
}

/// What the source thread needs.
pub(crate) struct SourcePlan {
    pub(crate) inputs: Vec<Fingerprint>,
    pub(crate) columns: Vec<String>,
    pub(crate) delimiter: u8,
    /// JSON lines: ignore keys that are not columns (`--json-new-keys drop`).
    pub(crate) drop_new_keys: bool,
    pub(crate) checkpoint_rows: u64,
    /// Parse workers (see `pipeline::Threads`); 0: the source thread reads every input
    /// itself.
    pub(crate) workers: usize,
    /// The first barrier's checkpoint number.
    pub(crate) first_checkpoint: u64,
    /// Where to start; `None` for the beginning of the first input.
    pub(crate) resume: Option<Position>,
    /// Inputs set aside (`--on-bad-input quarantine`): never read.
    pub(crate) skip: std::collections::BTreeSet<usize>,
    /// A column an input lacks is null in its rows (`--evolve add-columns`), not an error.
    pub(crate) fill_missing: bool,
    pub(crate) counters: Arc<Counters>,
}

/// The source's side of the pipeline: its channels and its count of checkpoints.
struct Emitter {
    out: SyncSender<Msg>,
    /// Shared with the chunk workers, which fill batches too.
    spares: Arc<std::sync::Mutex<Spares>>,
    acks: Sender<Ack>,
    checkpoint: u64,
    rows_since_barrier: u64,
    rows_read: u64,
    done: Vec<InputDone>,
}

impl Emitter {
    /// Counts a batch and sends it on (if it holds anything).
    fn flush(&mut self, batch: &mut RecordBatch, plan: &SourcePlan) -> Result<()> {
        if batch.is_empty() && batch.rejects.is_empty() {
            return Ok(());
        }
        plan.counters
            .rows
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let full = std::mem::replace(batch, self.spare(plan.columns.len()));
        self.send(Msg::Batch(full))
    }

    /// An empty batch: a recycled one if any is waiting.
    fn spare(&self, ncols: usize) -> RecordBatch {
        self.spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(ncols)
    }

    fn send(&self, msg: Msg) -> Result<()> {
        self.out
            .send(msg)
            .map_err(|_| anyhow!("the pipeline stopped"))
    }

    /// Acknowledges checkpoint n with its position, then sends barrier n downstream.
    fn barrier(&mut self, position: Position, last: bool) -> Result<()> {
        failpoint::hit("source.barrier");
        self.acks
            .send(Ack::Source {
                checkpoint: self.checkpoint,
                position,
                inputs_done: std::mem::take(&mut self.done),
                rows_read: std::mem::take(&mut self.rows_read),
                last,
            })
            .map_err(|_| anyhow!("the coordinator stopped"))?;
        self.send(Msg::Barrier(Barrier {
            checkpoint: self.checkpoint,
            last,
        }))?;
        self.checkpoint += 1;
        self.rows_since_barrier = 0;
        Ok(())
    }
}

/// Runs the source until the final barrier, until `cancel` is set, or until a signal
/// asks to stop (then it emits one more barrier first, so everything read is committed).
/// With parse workers, large CSV inputs are parsed by the pool in chunks and put back in
/// order (`parallel.rs`); the rows, barriers and positions are the same as one thread's.
pub(crate) fn run(
    plan: SourcePlan,
    out: SyncSender<Msg>,
    spares: Spares,
    acks: Sender<Ack>,
    cancel: Arc<AtomicBool>,
) -> Result<()> {
    let mut source = Source {
        emit: Emitter {
            out,
            spares: Arc::new(std::sync::Mutex::new(spares)),
            acks,
            checkpoint: plan.first_checkpoint,
            rows_since_barrier: 0,
            rows_read: 0,
            done: Vec::new(),
        },
        batch: RecordBatch::new(plan.columns.len()),
        bytes_before: 0,
        cancel,
        plan: &plan,
    };
    let stopped = if plan.workers > 0 {
        parallel::read_all(&mut source, plan.workers)?
    } else {
        source.read_all()?
    };
    if let Some(stopped) = stopped {
        return Err(stopped.into());
    }
    source.flush()?;
    let end = Position {
        input: plan.inputs.len(),
        offset: 0,
        lines: 0,
        prefix_hash: String::new(),
    };
    source.emit.barrier(end, true)
}

/// An input's columns, as its header gives them.
#[derive(Clone)]
pub(crate) struct Columns {
    /// Fields the header has: every record must have as many.
    pub(crate) header_len: usize,
    /// For each table column, the index of the input field that holds it, or
    /// [`MISSING`] for a column the input lacks (null in every row).
    pub(crate) mapping: Arc<Vec<usize>>,
}

/// The mapping of a table column that the input lacks (`--evolve add-columns`).
pub(crate) const MISSING: usize = usize::MAX;

impl Columns {
    fn identity(&self) -> bool {
        self.mapping.iter().enumerate().all(|(i, &m)| i == m)
    }

    /// True when the input lacks some column: its rows carry nulls there.
    pub(crate) fn lacks_some(&self) -> bool {
        self.mapping.contains(&MISSING)
    }
}

/// An input opened for reading: its header read and checked (and, for the input a
/// resume starts in, its loaded prefix read again and proven unchanged).
pub(crate) enum Opened {
    Reading(Box<InputReader>, Columns),
    /// No header: an empty input, whose hash is this.
    Empty(u128),
}

/// Where reading input `index` begins: where the run resumes, or its first byte.
fn input_start(plan: &SourcePlan, index: usize) -> Position {
    match &plan.resume {
        Some(resume) if resume.input == index => resume.clone(),
        _ => Position {
            input: index,
            offset: 0,
            lines: 0,
            prefix_hash: String::new(),
        },
    }
}

/// Opens input `index`, reads its header, and moves to where reading begins.
pub(crate) fn open(plan: &SourcePlan, index: usize) -> Result<Opened> {
    let input = &plan.inputs[index];
    let mut reader = InputReader::open_input(input, plan.delimiter)?
        .with_json_columns(&plan.columns, plan.drop_new_keys);
    let Some(header) = read_header(&mut reader)? else {
        return Ok(Opened::Empty(reader.hash()));
    };
    let mut mapping = Vec::with_capacity(plan.columns.len());
    map_columns(&plan.columns, &header, &mut mapping, plan.fill_missing).with_context(|| {
        format!(
            "{}:{}: the header does not match the table",
            reader.name(),
            1
        )
    })?;
    let start = input_start(plan, index);
    if start.offset > 0 {
        reader.resume_at(start.offset, start.lines, &start.prefix_hash)?;
    }
    Ok(Opened::Reading(
        Box::new(reader),
        Columns {
            header_len: header.len(),
            mapping: Arc::new(mapping),
        },
    ))
}

/// The source's state while it reads: its channels, the batch it fills, progress.
pub(crate) struct Source<'a> {
    emit: Emitter,
    batch: RecordBatch,
    /// Bytes of the inputs before the current one, for progress.
    bytes_before: u64,
    cancel: Arc<AtomicBool>,
    plan: &'a SourcePlan,
}

impl Source<'_> {
    /// Reads every input in order on this thread; `Some` when a signal stopped it.
    fn read_all(&mut self) -> Result<Option<Stopped>> {
        let plan = self.plan;
        let first = plan.resume.as_ref().map_or(0, |p| p.input);
        self.bytes_before = plan.inputs.iter().take(first).map(|i| i.size).sum();
        for index in first..plan.inputs.len() {
            if plan.skip.contains(&index) {
                self.bytes_before += plan.inputs[index].size;
                continue;
            }
            if let Some(stopped) = self.stop_before_input(index)? {
                return Ok(Some(stopped));
            }
            let stopped = match open(plan, index).map_err(|e| of_input(index, e))? {
                Opened::Empty(hash) => {
                    self.input_done(index, hash);
                    None
                }
                Opened::Reading(mut reader, columns) => self
                    .read_whole(index, &mut reader, &columns)
                    .map_err(|e| of_input(index, e))?,
            };
            if stopped.is_some() {
                return Ok(stopped);
            }
        }
        Ok(None)
    }

    /// Reads input `index` from `reader` (its header read) to its end on this thread.
    fn read_whole(
        &mut self,
        index: usize,
        reader: &mut InputReader,
        columns: &Columns,
    ) -> Result<Option<Stopped>> {
        self.plan.counters.set_file(&self.plan.inputs[index].path);
        let stopped = self.read_records(reader, index, columns, None)?;
        if stopped.is_none() {
            self.check_whole(index, reader.offset())?;
            self.input_done(index, reader.hash());
        }
        Ok(stopped)
    }

    /// Between two inputs: when a signal asks to stop, commits what was read and stops,
    /// to resume where input `index` begins.
    fn stop_before_input(&mut self, index: usize) -> Result<Option<Stopped>> {
        let Some(signal) = signals::requested() else {
            return Ok(None);
        };
        self.flush()?;
        self.emit.barrier(input_start(self.plan, index), false)?;
        Ok(Some(Stopped {
            signal,
            detail: String::new(),
        }))
    }

    /// An input read to its end must have the size it had when the run began.
    fn check_whole(&self, index: usize, read: u64) -> Result<()> {
        let input = &self.plan.inputs[index];
        if !reader::is_compressed(&input.path) && read != input.size {
            bail!(
                "input {} changed while it was being read ({} bytes when the run began, {} read)",
                input.path,
                input.size,
                read
            );
        }
        Ok(())
    }

    fn input_done(&mut self, index: usize, hash: u128) {
        self.emit.done.push(InputDone {
            input: index,
            hash: hash_hex(hash),
        });
        self.bytes_before += self.plan.inputs[index].size;
    }

    fn flush(&mut self) -> Result<()> {
        self.emit.flush(&mut self.batch, self.plan)
    }

    /// Reads records of input `index` from `reader` until its end, or with `stop` until
    /// the first record boundary at or after that offset. `Some` when a signal stopped
    /// it (after a barrier at the last record read).
    fn read_records(
        &mut self,
        reader: &mut InputReader,
        index: usize,
        columns: &Columns,
        stop: Option<u64>,
    ) -> Result<Option<Stopped>> {
        let plan = self.plan;
        let identity = columns.identity();
        let lacks_some = columns.lacks_some();
        let position = |reader: &InputReader| Position {
            input: index,
            offset: reader.offset(),
            lines: reader.lines(),
            prefix_hash: reader.position_hash(),
        };
        while stop.is_none_or(|stop| reader.offset() < stop) && reader.read_record()? {
            let batch = &mut self.batch;
            let bad = match reader.invalid() {
                Some(why) => Some(why),
                None if reader.len() != columns.header_len => Some(format!(
                    "expected {} fields as in the header, found {}",
                    columns.header_len,
                    reader.len()
                )),
                None => None,
            };
            if let Some(reason) = bad {
                if let Some(end) = runs_on(reader) {
                    bail!(
                        "{}:{}: {reason}; the record runs on to line {end}, and no parser can tell \
                         where it really ended, so its lines are not set aside as one bad row \
                         (even with --max-errors): fix the quoting from line {}, then load again",
                        plan.inputs[index].path,
                        reader.record_line(),
                        reader.record_line()
                    );
                }
                // A bad row travels with the batch as a reject: the sink fails the run or
                // sets it aside, in the checkpoint it belongs to.
                let record = reader.raw_record();
                batch.rejects.push(Reject {
                    input: index as u32,
                    line: reader.record_line(),
                    reason,
                    record,
                });
            } else if reader.has_nulls() || lacks_some {
                for &m in columns.mapping.iter() {
                    batch.push_cell(if m == MISSING { None } else { reader.cell(m) });
                }
                batch.end_row(index as u32, reader.record_line());
            } else if identity {
                reader.push_to(batch, index as u32);
            } else {
                batch.push(
                    columns.mapping.iter().map(|&m| reader.field(m)),
                    index as u32,
                    reader.record_line(),
                );
            }
            self.emit.rows_read += 1;
            self.emit.rows_since_barrier += 1;
            let at_barrier = self.emit.rows_since_barrier == plan.checkpoint_rows;
            if self.batch.is_full() || at_barrier {
                self.progress(reader.raw_bytes())?;
                self.flush()?;
                if at_barrier {
                    self.emit.barrier(position(reader), false)?;
                } else if let Some(stopped) = self.stop_requested(|| position(reader))? {
                    return Ok(Some(stopped));
                }
            }
        }
        Ok(None)
    }

    /// Fails when the pipeline was cancelled; records progress (`read` bytes of the
    /// current input).
    fn progress(&self, read: u64) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            bail!("the pipeline stopped");
        }
        self.plan
            .counters
            .bytes
            .store(self.bytes_before + read, Ordering::Relaxed);
        Ok(())
    }

    /// After a batch: when a signal asks to stop, a barrier at `here` (everything read is
    /// sent), and the stop. When the sinks hold too much for unwritten files
    /// (`core/pressure.rs`), a barrier at `here` too, and the load goes on.
    fn stop_requested(&mut self, here: impl FnOnce() -> Position) -> Result<Option<Stopped>> {
        let Some(signal) = signals::requested() else {
            if pressure::checkpoint_wanted() && self.emit.rows_since_barrier > 0 {
                self.emit.barrier(here(), false)?;
            }
            return Ok(None);
        };
        self.emit.barrier(here(), false)?;
        Ok(Some(Stopped {
            signal,
            detail: String::new(),
        }))
    }
}

/// For each table column, the index of the input field that holds it.
fn map_columns(
    columns: &[String],
    header: &[String],
    mapping: &mut Vec<usize>,
    fill_missing: bool,
) -> Result<()> {
    mapping.clear();
    for col in columns {
        match header.iter().position(|h| h == col) {
            Some(i) => mapping.push(i),
            None if fill_missing => mapping.push(MISSING),
            None => bail!(
                "column {col:?} is missing (the table has {}); pass --evolve add-columns to \
                 load it as null",
                columns.join(", ")
            ),
        }
    }
    if header.iter().any(|h| !columns.contains(h)) {
        let extra: Vec<_> = header
            .iter()
            .filter(|h| !columns.contains(h))
            .cloned()
            .collect();
        bail!(
            "unexpected column(s) {} (the table has {})",
            extra.join(", "),
            columns.join(", ")
        );
    }
    Ok(())
}

/// The line where the current CSV record ended, when that is past the line it began on.
///
/// A bad record that spans several lines (a quote left open, one closed far away, a
/// quoted line feed in a record of the wrong width) may hold well-formed lines that a
/// stray quote swallowed: rejecting it as one row would drop them silently, so such a
/// record fails the run instead (`read_records`). JSON lines records are one line each.
fn runs_on(reader: &InputReader) -> Option<u64> {
    if reader.has_nulls() {
        return None;
    }
    let lines = reader.lines();
    // The line count includes the line feed that ends the record; at the end of the
    // input that line feed, if any, is the last byte of the record's last field.
    let last_field_ends_line =
        !reader.is_empty() && reader.field(reader.len() - 1).last() == Some(&b'\n');
    let end = if !reader.ended_by_eof() || last_field_ends_line {
        lines.saturating_sub(1)
    } else {
        lines
    };
    (end > reader.record_line()).then_some(end)
}
