//! The "no guarantees" baseline partitioner for the benchmark.
//!
//!     baseline-partitioner OUT_DIR COLUMN INPUT...
//!
//! Two threads (one parses with a reused `csv::ByteRecord`, one partitions and writes),
//! one buffered writer per partition, and at the end per-file fsync + rename + directory
//! fsync. Nothing else: no journal, no checkpoints, no recovery, no manifest. The gap
//! between it and `ingest` is the price of exactly-once.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;

type Batch = Vec<csv::ByteRecord>;
const BATCH: usize = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        return Err("usage: baseline-partitioner OUT_DIR COLUMN INPUT...".into());
    }
    let out = PathBuf::from(&args[0]);
    let column = args[1].clone();
    let inputs: Vec<PathBuf> = args[2..].iter().map(PathBuf::from).collect();
    fs::create_dir_all(&out)?;

    let header = csv::Reader::from_path(&inputs[0])?.byte_headers()?.clone();
    let col = header
        .iter()
        .position(|h| h == column.as_bytes())
        .ok_or("no such column")?;
    let body_header: Vec<&[u8]> = header
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != col)
        .map(|(_, h)| h)
        .collect();

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

    let mut writers: HashMap<Vec<u8>, (PathBuf, csv::Writer<BufWriter<File>>)> = HashMap::new();
    for mut batch in full_rx {
        for record in &batch {
            let value = &record[col];
            if !writers.contains_key(value) {
                let dir = out.join(format!("{column}={}", String::from_utf8_lossy(value)));
                fs::create_dir_all(&dir)?;
                let tmp = dir.join(".part-0.csv.tmp");
                let mut w = csv::Writer::from_writer(BufWriter::with_capacity(
                    256 * 1024,
                    File::create(&tmp)?,
                ));
                w.write_record(&body_header)?;
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
        }
        batch.resize_with(BATCH, csv::ByteRecord::new);
        let _ = empty_tx.send(batch);
    }
    parser.join().map_err(|_| "parser panicked")??;
    for (_, (tmp, w)) in writers {
        let file = w
            .into_inner()
            .map_err(|e| e.to_string())?
            .into_inner()
            .map_err(|e| e.to_string())?;
        file.sync_all()?;
        let dir = tmp.parent().ok_or("no parent")?;
        fs::rename(&tmp, dir.join("part-0.csv"))?;
        File::open(dir)?.sync_all()?;
    }
    File::open(Path::new(&out))?.sync_all()?;
    Ok(())
}
