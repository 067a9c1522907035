//! `--dedupe-key`: keeps the first record of each key within a run.
//!
//! Its state, the set of keys seen, is part of every checkpoint. A key is remembered by
//! the 128-bit XXH3 digest of its (length-prefixed) column values: no allocation a row,
//! one probe a row. The in-memory set keeps fewer bits of each digest (about 10 bytes a
//! key when the input's size is known, see `keyset/`): the chance that two distinct
//! keys are taken for one over a whole load is about 3·10⁻¹⁰ for a billion keys, far
//! below the odds of the disk returning a wrong bit.
//!
//! A single-column key that is a canonical non-negative integer (an order id) is kept
//! exactly instead, as a bit in `keyset/ints.rs`, while such keys stay dense: a load of
//! consecutive ids then needs about a megabyte and no table at all. Other keys of the
//! same load are digests as above; a key's spelling decides where it goes, so equal keys
//! always meet. When the integers turn out scattered, they move to digests for good.
//!
//! Snapshots are deltas of whole digests, whatever set a key is in (those first seen
//! since the previous checkpoint), so a checkpoint costs what it added, not the whole
//! set; a run restored from them keeps every key as a digest.

use anyhow::{anyhow, bail, Result};
use xxhash_rust::xxh3::xxh3_128;

use super::keyset::ints::IntSet;
use super::keyset::KeySet;
use super::Stage;
use crate::core::batch::RecordBatch;
use crate::core::schema::Schema;

/// The dedupe stage.
pub(crate) struct Dedupe {
    key_cols: Vec<usize>,
    /// Keys seen in the run that are canonical non-negative integers, while they are
    /// dense enough (single-column keys of a run not restored from snapshots).
    ints: Option<IntSet>,
    /// Digests of the other keys seen in the run.
    seen: KeySet,
    /// The row estimate, while `ints` takes the keys it was meant for.
    deferred_rows: Option<usize>,
    /// Digests added since the last snapshot, 16 bytes LE each.
    delta: Vec<u8>,
    key: Vec<u8>,
    /// The digests of the batch being processed that go to `seen`, their rows, and
    /// whether each is new.
    digests: Vec<u128>,
    digest_rows: Vec<usize>,
    fresh: Vec<bool>,
    /// Whether each row of the batch is kept.
    keep: Vec<bool>,
    /// The run's input size, until the first batch turns it into a row estimate.
    expected_bytes: Option<u64>,
    /// Job scope: the keys outlive the run, so the final barrier is snapshotted too.
    final_state: bool,
}

impl Dedupe {
    /// Dedupes on the given columns of the table.
    pub(crate) fn new(key_cols: &[String], schema: &Schema) -> Result<Dedupe> {
        let mut idx = Vec::new();
        for col in key_cols {
            idx.push(schema.index(col).map_err(|e| anyhow!("dedupe key: {e}"))?);
        }
        Ok(Dedupe {
            ints: (idx.len() == 1).then(IntSet::default),
            key_cols: idx,
            seen: KeySet::default(),
            deferred_rows: None,
            delta: Vec::new(),
            key: Vec::new(),
            digests: Vec::new(),
            digest_rows: Vec::new(),
            fresh: Vec::new(),
            keep: Vec::new(),
            expected_bytes: None,
            final_state: false,
        })
    }

    /// Job scope (`keystore.rs`): every key the run kept is snapshotted, the final
    /// barrier's too, to be folded into the job's key file when the run finishes.
    pub(crate) fn keeping_final_state(mut self, keep: bool) -> Dedupe {
        self.final_state = keep;
        self
    }

    /// Sizes the key set for inputs of `bytes` in all, at the first batch: growing it
    /// step by step rehashes every key again at each doubling, and with the set out of
    /// cache that was half of the stage's time.
    pub(crate) fn expecting(mut self, bytes: u64) -> Dedupe {
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
        let rows = rows.min(MOST) as usize;
        if self.ints.is_some() {
            // Integer keys need no table; it is made when they turn out not to be.
            self.deferred_rows = Some(rows);
        } else {
            self.seen.expect(rows);
        }
    }

    /// Gives up the integer set: its keys move to digests (the digests of the keys
    /// they are the canonical spellings of), and from here on every key is a digest.
    fn leave_ints(&mut self) {
        let Some(ints) = self.ints.take() else {
            return;
        };
        if let Some(rows) = self.deferred_rows.take() {
            self.seen.expect(rows);
        }
        let mut digests = Vec::with_capacity(ints.len());
        for value in ints.values() {
            self.key.clear();
            push_framed(&mut self.key, value.to_string().as_bytes());
            digests.push(xxh3_128(&self.key));
        }
        for chunk in digests.chunks(4096) {
            self.fresh.clear();
            self.seen.insert_batch(chunk, &mut self.fresh);
        }
    }

    /// A dedupe stage that keeps every key as a digest (to compare against, in tests).
    #[cfg(test)]
    fn digests_only(mut self) -> Dedupe {
        self.ints = None;
        self
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

    /// Hot path: the buffers are reused; nothing is allocated per row. Integer keys are
    /// looked up as they come; the digests of the others are gathered, then go through
    /// the set in one pass (which prefetches ahead).
    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.size_for(batch);
        self.digests.clear();
        self.digest_rows.clear();
        self.keep.clear();
        let columns: Vec<_> = self.key_cols.iter().map(|&col| batch.column(col)).collect();
        for row in 0..batch.len() {
            if let (Some(ints), [column]) = (&mut self.ints, columns.as_slice()) {
                let cell = column.get(row);
                if let Some((text, value)) = cell.and_then(|t| Some((t, IntSet::value_of(t)?))) {
                    let new = ints.insert(value);
                    if new {
                        // Snapshots hold digests whatever set a key is in; a repeated
                        // key needs none.
                        self.key.clear();
                        push_framed(&mut self.key, text);
                        self.delta
                            .extend_from_slice(&xxh3_128(&self.key).to_le_bytes());
                    }
                    self.keep.push(new);
                    if !ints.is_dense() {
                        self.leave_ints();
                    }
                    continue;
                }
            }
            self.key.clear();
            for column in &columns {
                match column.get(row) {
                    Some(value) => push_framed(&mut self.key, value),
                    // Null is its own key, distinct from the empty string.
                    None => self.key.extend_from_slice(&u32::MAX.to_le_bytes()),
                }
            }
            self.digests.push(xxh3_128(&self.key));
            self.digest_rows.push(row);
            // Decided below, with the batch's other digests.
            self.keep.push(false);
        }
        if !self.digests.is_empty() {
            self.fresh.clear();
            self.seen.insert_batch(&self.digests, &mut self.fresh);
            for ((&row, &new), digest) in
                self.digest_rows.iter().zip(&self.fresh).zip(&self.digests)
            {
                self.keep[row] = new;
                if new {
                    self.delta.extend_from_slice(&digest.to_le_bytes());
                }
            }
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

    fn keeps_final_state(&self) -> bool {
        self.final_state
    }

    /// Restored keys are digests: a restored run keeps every key as one (an integer set
    /// cannot be rebuilt from digests).
    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.ints = None;
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
    use proptest::prelude::*;

    /// Keys of every kind the integer path must tell apart: dense canonical integers,
    /// scattered large ones (which make the stage give the integer set up), spellings
    /// that are not canonical, and null.
    fn key() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            6 => (0u64..3000).prop_map(|k| Some(k.to_string())),
            1 => any::<u64>().prop_map(|k| Some((k % 1_000_000_000_000_000_000).to_string())),
            1 => prop_oneof![
                Just("007"), Just("+7"), Just("-7"), Just("7 "), Just(""), Just("abc"), Just("0"),
            ].prop_map(|k| Some(k.to_string())),
            1 => Just(None),
        ]
    }

    fn key_batch(keys: &[Option<String>]) -> RecordBatch {
        let mut b = RecordBatch::new(2);
        for (i, k) in keys.iter().enumerate() {
            b.push_cell(k.as_deref().map(str::as_bytes));
            b.push_cell(Some(i.to_string().as_bytes()));
            b.end_row(0, i as u64 + 2);
        }
        b
    }

    /// A snapshot's digests, sorted (the integer path writes them in another order).
    fn sorted(snapshot: &[u8]) -> Vec<&[u8]> {
        let mut digests: Vec<&[u8]> = snapshot.chunks(16).collect();
        digests.sort();
        digests
    }

    proptest! {
        /// With integer keys in a bit set, the stage keeps exactly the rows, and writes
        /// exactly the snapshot digests, of the stage that keeps every key as a digest;
        /// restored from those snapshots, both stages know every key.
        #[test]
        fn integer_keys_dedupe_exactly_as_digests_do(
            batches in prop::collection::vec(prop::collection::vec(key(), 0..300), 1..6),
        ) {
            let cols = Schema::strings(&["id".to_string(), "row".to_string()]);
            let new = || Dedupe::new(&["id".to_string()], &cols).unwrap().expecting(1 << 20);
            let (mut ints, mut digests) = (new(), new().digests_only());
            let (mut snap_ints, mut snap_digests) = (Vec::new(), Vec::new());
            let mut all = Vec::new();
            for keys in &batches {
                let (mut a, mut b) = (key_batch(keys), key_batch(keys));
                ints.process(&mut a).unwrap();
                digests.process(&mut b).unwrap();
                prop_assert_eq!(values(&a), values(&b));
                let (mut x, mut y) = (Vec::new(), Vec::new());
                ints.snapshot(&mut x).unwrap();
                digests.snapshot(&mut y).unwrap();
                prop_assert_eq!(sorted(&x), sorted(&y));
                snap_ints.push(x);
                snap_digests.push(y);
                all.extend(keys.iter().cloned());
            }
            for snapshots in [&snap_ints, &snap_digests] {
                let mut restored = new();
                for snapshot in snapshots {
                    restored.restore(snapshot).unwrap();
                }
                let mut again = key_batch(&all);
                restored.process(&mut again).unwrap();
                prop_assert_eq!(again.len(), 0);
            }
        }
    }

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
