//! `--dedupe-key`: keeps the first record of each key within a run.
//!
//! Its state, the set of keys seen, is part of every checkpoint. A key is remembered by
//! the 128-bit XXH3 digest of its (length-prefixed) column values: no allocation a row,
//! one probe a row. The in-memory set keeps fewer bits of each digest (about 10 bytes a
//! key when the input's size is known, see `keyset/`): the chance that two distinct
//! keys are taken for one over a whole load is about 3·10⁻¹⁰ for a billion keys, far
//! below the odds of the disk returning a wrong bit. Snapshots are deltas of whole
//! digests (those first seen since the previous checkpoint), so a checkpoint costs what
//! it added, not the whole set.

use anyhow::{anyhow, bail, Result};
use xxhash_rust::xxh3::xxh3_128;

use super::keyset::KeySet;
use super::Stage;
use crate::batch::RecordBatch;
use crate::schema::Schema;

/// The dedupe stage.
pub struct Dedupe {
    key_cols: Vec<usize>,
    /// Key digests seen in the run.
    seen: KeySet,
    /// Digests added since the last snapshot, 16 bytes LE each.
    delta: Vec<u8>,
    key: Vec<u8>,
    /// The digests of the batch being processed, and whether each is new.
    digests: Vec<u128>,
    keep: Vec<bool>,
    /// The run's input size, until the first batch turns it into a row estimate.
    expected_bytes: Option<u64>,
}

impl Dedupe {
    /// Dedupes on the given columns of the table.
    pub fn new(key_cols: &[String], schema: &Schema) -> Result<Dedupe> {
        let mut idx = Vec::new();
        for col in key_cols {
            idx.push(schema.index(col).map_err(|e| anyhow!("dedupe key: {e}"))?);
        }
        Ok(Dedupe {
            key_cols: idx,
            seen: KeySet::default(),
            delta: Vec::new(),
            key: Vec::new(),
            digests: Vec::new(),
            keep: Vec::new(),
            expected_bytes: None,
        })
    }

    /// Sizes the key set for inputs of `bytes` in all, at the first batch: growing it
    /// step by step rehashes every key again at each doubling, and with the set out of
    /// cache that was half of the stage's time.
    pub fn expecting(mut self, bytes: u64) -> Dedupe {
        self.expected_bytes = Some(bytes).filter(|&b| b > 0);
        self
    }

    /// Sizes the set for the rows the inputs likely hold, judged by this batch's bytes
    /// per row (the set's own headroom absorbs a guess a little short); a wrong guess
    /// costs only some idle memory, or keys in the set's slower growable table.
    fn size_for(&mut self, batch: &RecordBatch) {
        let Some(bytes) = self.expected_bytes.take() else {
            return;
        };
        let per_row = (batch.data_len() / batch.len().max(1)).max(8) as u64;
        let rows = bytes / per_row;
        // Beyond this (a 1.2 GiB table) the set grows as the keys come, not on a guess.
        const MOST: u64 = 1 << 27;
        self.seen.expect(rows.min(MOST) as usize);
    }
}

/// Appends `bytes` with a length prefix, so that multi-column keys cannot collide.
fn push_framed(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

impl Stage for Dedupe {
    fn name(&self) -> &'static str {
        "dedupe"
    }

    /// Hot path: the buffers are reused; nothing is allocated per row. All digests of
    /// the batch first, then one pass over the set (which prefetches ahead).
    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.size_for(batch);
        self.digests.clear();
        let columns: Vec<_> = self.key_cols.iter().map(|&col| batch.column(col)).collect();
        for row in 0..batch.len() {
            self.key.clear();
            for column in &columns {
                match column.get(row) {
                    Some(value) => push_framed(&mut self.key, value),
                    // Null is its own key, distinct from the empty string.
                    None => self.key.extend_from_slice(&u32::MAX.to_le_bytes()),
                }
            }
            self.digests.push(xxh3_128(&self.key));
        }
        self.keep.clear();
        self.seen.insert_batch(&self.digests, &mut self.keep);
        for (digest, _) in self.digests.iter().zip(&self.keep).filter(|(_, &new)| new) {
            self.delta.extend_from_slice(&digest.to_le_bytes());
        }
        batch.retain(&self.keep);
        Ok(())
    }

    /// The keys first seen since the last snapshot. The buffers trade places, so both
    /// keep their capacity from one checkpoint to the next.
    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<()> {
        if out.is_empty() {
            std::mem::swap(out, &mut self.delta);
        } else {
            out.append(&mut self.delta);
        }
        Ok(())
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() % 16 != 0 {
            bail!(
                "dedupe snapshot is {} bytes, not a whole number of 16-byte keys",
                bytes.len()
            );
        }
        for chunk in bytes.chunks(16 * 4096) {
            self.digests.clear();
            self.digests.extend(chunk.chunks_exact(16).map(|d| {
                let mut digest = [0u8; 16];
                digest.copy_from_slice(d);
                u128::from_le_bytes(digest)
            }));
            self.keep.clear();
            self.seen.insert_batch(&self.digests, &mut self.keep);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(rows: &[(&str, &str)]) -> RecordBatch {
        let mut b = RecordBatch::new(2);
        for (i, (k, v)) in rows.iter().enumerate() {
            b.push([k.as_bytes(), v.as_bytes()], 0, i as u64 + 2);
        }
        b
    }

    fn values(b: &RecordBatch) -> Vec<String> {
        (0..b.len())
            .map(|r| String::from_utf8_lossy(b.field(r, 1)).into_owned())
            .collect()
    }

    #[test]
    fn keeps_first_occurrence_across_batches_and_restores_from_deltas() {
        let cols = Schema::strings(&["id".to_string(), "v".to_string()]);
        let mut d = Dedupe::new(&["id".to_string()], &cols).unwrap();
        let mut b1 = batch(&[("1", "a"), ("2", "b"), ("1", "c")]);
        d.process(&mut b1).unwrap();
        assert_eq!(values(&b1), ["a", "b"]);
        // One buffer for every snapshot, cleared in between, as the stage runner does.
        let mut buf = Vec::new();
        let mut snapshot = |d: &mut Dedupe| {
            buf.clear();
            d.snapshot(&mut buf).unwrap();
            buf.clone()
        };
        let snap1 = snapshot(&mut d);
        assert_eq!(snap1.len(), 2 * 16);
        let mut b2 = batch(&[("2", "d"), ("3", "e")]);
        d.process(&mut b2).unwrap();
        assert_eq!(values(&b2), ["e"]);
        let snap2 = snapshot(&mut d);
        assert_eq!(snap2.len(), 16);
        assert!(snapshot(&mut d).is_empty());

        let mut restored = Dedupe::new(&["id".to_string()], &cols).unwrap();
        restored.restore(&snap1).unwrap();
        restored.restore(&snap2).unwrap();
        let mut b3 = batch(&[("3", "f"), ("4", "g"), ("1", "h")]);
        restored.process(&mut b3).unwrap();
        assert_eq!(values(&b3), ["g"]);
    }

    #[test]
    fn multi_column_keys_do_not_collide_by_concatenation() {
        let names = ["a".to_string(), "b".to_string()];
        let mut d = Dedupe::new(&names, &Schema::strings(&names)).unwrap();
        let mut b = batch(&[("ab", "c"), ("a", "bc")]);
        d.process(&mut b).unwrap();
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn an_unknown_key_column_is_named() {
        let cols = Schema::strings(&["a".to_string()]);
        let err = Dedupe::new(&["zz".to_string()], &cols)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("\"zz\""), "{err}");
    }
}
