//! The "no guarantees" baseline partitioners for the benchmark.
//!
//!     baseline-partitioner [--split] OUT_DIR COLUMN INPUT...
//!
//! Default: two threads as a pipeline (one parses with a reused `csv::ByteRecord`, one
//! partitions and writes). `--split`: two threads side by side, each parsing and writing
//! its own half of the input files (file i to thread i mod 2), the simplest program that
//! uses both cores on several files (and only one on a single file). Either way one
//! buffered writer per partition (per thread), and at the end per-file fsync + rename +
//! directory fsync. Nothing else: no journal, no checkpoints, no recovery, no manifest.
//! The gap between them and `ingest` is the price of exactly-once.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;

type Batch = Vec<csv::ByteRecord>;
const BATCH: usize = 4096;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Writers = HashMap<Vec<u8>, (PathBuf, csv::Writer<BufWriter<File>>)>;

fn main() -> Result<(), Error> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.first().is_some_and(|a| a == "--split");
    if split {
        args.remove(0);
    }
    if args.len() < 3 {
        return Err("usage: baseline-partitioner [--split] OUT_DIR COLUMN INPUT...".into());
    }
    if split {
        return split_main(&args);
    }
    let Setup {
        out,
        column,
        inputs,
        col,
        body_header,
    } = setup(&args)?;
    let body_header: Vec<&[u8]> = body_header.iter().map(Vec::as_slice).collect();

    let (full_tx, full_rx) = sync_channel::<Batch>(4);
    let (empty_tx, empty_rx) = sync_channel::<Batch>(8);
    for _ in 0..6 {
        empty_tx.send((0..BATCH).map(|_| csv::ByteRecord::new()).collect())?;
    }
    let parser = std::thread::spawn(move || -> Result<(), csv::Error> {
        for input in inputs {
            let mut reader = csv::Reader::from_path(input)?;
            let mut batch = empty_rx.recv().unwrap_or_default();
            let mut n = 0;
            loop {
                if n == batch.len() {
                    batch.push(csv::ByteRecord::new());
                }
                if !reader.read_byte_record(&mut batch[n])? {
                    break;
                }
                n += 1;
                if n == BATCH {
                    if full_tx.send(batch).is_err() {
                        return Ok(());
                    }
                    batch = empty_rx.recv().unwrap_or_default();
                    n = 0;
                }
            }
            batch.truncate(n);
            if full_tx.send(batch).is_err() {
                return Ok(());
            }
        }
        Ok(())
    });

    let mut writers = Writers::new();
    for mut batch in full_rx {
        for record in &batch {
            write(&mut writers, &out, &column, col, &body_header, 0, record)?;
        }
        batch.resize_with(BATCH, csv::ByteRecord::new);
        let _ = empty_tx.send(batch);
    }
    parser.join().map_err(|_| "parser panicked")??;
    finish(writers, 0)?;
    File::open(Path::new(&out))?.sync_all()?;
    Ok(())
}

/// The command line read, the output directory made, the partition column found.
struct Setup {
    out: PathBuf,
    column: String,
    inputs: Vec<PathBuf>,
    /// The partition column's index.
    col: usize,
    /// The header without the partition column.
    body_header: Vec<Vec<u8>>,
}

fn setup(args: &[String]) -> Result<Setup, Error> {
    let out = PathBuf::from(&args[0]);
    let column = args[1].clone();
    let inputs: Vec<PathBuf> = args[2..].iter().map(PathBuf::from).collect();
    fs::create_dir_all(&out)?;
    let header = csv::Reader::from_path(&inputs[0])?.byte_headers()?.clone();
    let col = header
        .iter()
        .position(|h| h == column.as_bytes())
        .ok_or("no such column")?;
    let body_header = header
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != col)
        .map(|(_, h)| h.to_vec())
        .collect();
    Ok(Setup {
        out,
        column,
        inputs,
        col,
        body_header,
    })
}

/// `--split`: each of two threads parses and writes its own half of the files.
fn split_main(args: &[String]) -> Result<(), Error> {
    let Setup {
        out,
        column,
        inputs,
        col,
        body_header,
    } = setup(args)?;
    std::thread::scope(|scope| -> Result<(), Error> {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let (out, column, body_header) = (&out, &column, &body_header);
                let mine: Vec<&PathBuf> = inputs.iter().skip(t).step_by(2).collect();
                scope.spawn(move || -> Result<(), Error> {
                    let header: Vec<&[u8]> = body_header.iter().map(Vec::as_slice).collect();
                    let mut writers = Writers::new();
                    let mut record = csv::ByteRecord::new();
                    for input in mine {
                        let mut reader = csv::Reader::from_path(input)?;
                        while reader.read_byte_record(&mut record)? {
                            write(&mut writers, out, column, col, &header, t, &record)?;
                        }
                    }
                    finish(writers, t)
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "worker panicked")??;
        }
        Ok(())
    })?;
    File::open(Path::new(&out))?.sync_all()?;
    Ok(())
}

/// Appends `record` to its partition's file of thread `t`, opening it on first use.
fn write(
    writers: &mut Writers,
    out: &Path,
    column: &str,
    col: usize,
    body_header: &[&[u8]],
    t: usize,
    record: &csv::ByteRecord,
) -> Result<(), Error> {
    let value = &record[col];
    if !writers.contains_key(value) {
        let dir = out.join(format!("{column}={}", String::from_utf8_lossy(value)));
        fs::create_dir_all(&dir)?;
        let tmp = dir.join(format!(".part-{t}.csv.tmp"));
        let mut w =
            csv::Writer::from_writer(BufWriter::with_capacity(256 * 1024, File::create(&tmp)?));
        w.write_record(body_header)?;
        writers.insert(value.to_vec(), (tmp, w));
    }
    let (_, w) = writers.get_mut(value).ok_or("writer vanished")?;
    w.write_record(
        record
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != col)
            .map(|(_, f)| f),
    )?;
    Ok(())
}

/// Per file: fsync, rename to its final name, fsync the directory.
fn finish(writers: Writers, t: usize) -> Result<(), Error> {
    for (_, (tmp, w)) in writers {
        let file = w
            .into_inner()
            .map_err(|e| e.to_string())?
            .into_inner()
            .map_err(|e| e.to_string())?;
        file.sync_all()?;
        let dir = tmp.parent().ok_or("no parent")?;
        fs::rename(&tmp, dir.join(format!("part-{t}.csv")))?;
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}
