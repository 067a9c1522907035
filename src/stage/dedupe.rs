//! `--dedupe-key`: keeps the first record of each key within a run.
//!
//! Its state, the set of keys seen, is part of every checkpoint. A key is remembered as
//! the 128-bit XXH3 digest of its (length-prefixed) column values: 16 bytes a key, no
//! allocation a row, one probe a row. Two distinct keys share a digest with probability
//! about n²/2¹²⁹ (under 10⁻²⁴ for a billion keys), which is far below the odds of the
//! disk returning a wrong bit. Snapshots are deltas (the digests first seen since the
//! previous checkpoint), so a checkpoint costs what it added, not the whole set.

use std::collections::HashSet;

use anyhow::{anyhow, bail, Result};
use foldhash::fast::RandomState;
use xxhash_rust::xxh3::xxh3_128;

use super::Stage;
use crate::batch::RecordBatch;
use crate::schema::Schema;

/// The dedupe stage.
pub struct Dedupe {
    key_cols: Vec<usize>,
    /// Key digests. foldhash places them in the table, seeded per process, so crafted
    /// input cannot aim at one bucket.
    seen: HashSet<u128, RandomState>,
    /// Digests added since the last snapshot, 16 bytes LE each.
    delta: Vec<u8>,
    key: Vec<u8>,
    keep: Vec<bool>,
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
            seen: HashSet::default(),
            delta: Vec::new(),
            key: Vec::new(),
            keep: Vec::new(),
        })
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

    /// Hot path: the key buffer and keep mask are reused; nothing is allocated per row.
    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        self.keep.clear();
        for row in 0..batch.len() {
            self.key.clear();
            for &col in &self.key_cols {
                match batch.cell(row, col) {
                    Some(value) => push_framed(&mut self.key, value),
                    // Null is its own key, distinct from the empty string.
                    None => self.key.extend_from_slice(&u32::MAX.to_le_bytes()),
                }
            }
            let digest = xxh3_128(&self.key);
            let new = self.seen.insert(digest);
            if new {
                self.delta.extend_from_slice(&digest.to_le_bytes());
            }
            self.keep.push(new);
        }
        batch.retain(&self.keep);
        Ok(())
    }

    fn snapshot(&mut self) -> Result<Option<Vec<u8>>> {
        if self.delta.is_empty() {
            return Ok(None);
        }
        Ok(Some(std::mem::take(&mut self.delta)))
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() % 16 != 0 {
            bail!(
                "dedupe snapshot is {} bytes, not a whole number of 16-byte keys",
                bytes.len()
            );
        }
        self.seen.reserve(bytes.len() / 16);
        for chunk in bytes.chunks_exact(16) {
            let mut digest = [0u8; 16];
            digest.copy_from_slice(chunk);
            self.seen.insert(u128::from_le_bytes(digest));
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
        let snap1 = d.snapshot().unwrap().unwrap();
        let mut b2 = batch(&[("2", "d"), ("3", "e")]);
        d.process(&mut b2).unwrap();
        assert_eq!(values(&b2), ["e"]);
        let snap2 = d.snapshot().unwrap().unwrap();
        assert_eq!(d.snapshot().unwrap(), None);

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
