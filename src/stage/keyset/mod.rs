//! The dedupe stage's sets of keys: integer keys as bits (`ints.rs`), and the set of
//! key digests, open-addressing tables probed a batch at a time, with the slots of the
//! rows ahead prefetched.
//!
//! Why not `HashSet<u128>`: past a million keys the set no longer fits in the CPU caches,
//! every probe is a cache miss (~100 ns), and one after another those misses made dedupe
//! the slowest part of a load (a third of all CPU time on 8.7 million keys). Here the
//! whole batch's digests are known before the first probe, so while row i is probed the
//! memory system is already fetching the slots of rows i+1 … i+`AHEAD`: the misses
//! overlap instead of adding up.
//!
//! Two tables, because a dedupe table is the one large allocation of a load and the
//! kernel must find and zero every page of it (on this kind of VM that first touch cost
//! up to 0.7 s for 256 MB, more than the inserts themselves):
//! - `compact`: when the number of keys can be estimated (the input's size), a table
//!   of 8 bytes a slot, sized once, that cannot grow;
//! - `wide`: 12 bytes a slot, growable: for keys without an estimate, and for those
//!   that come after the compact table is full.
//!
//! A key is in at most one of them: the compact table stops taking keys once, and the
//! wide one gets only keys the compact table does not have.

mod compact;
pub(crate) mod ints;
mod pages;
mod wide;

use compact::Compact;
use wide::Wide;

/// Rows whose slots are requested ahead of the one being probed.
const AHEAD: usize = 16;

/// A set of 128-bit digests.
#[derive(Default)]
pub(crate) struct KeySet {
    compact: Option<Compact>,
    wide: Wide,
    /// Reused buffers for the keys the compact table turned away.
    absent: Vec<usize>,
    spilled: Vec<u128>,
    spilled_fresh: Vec<bool>,
}

impl KeySet {
    /// Number of digests in the set.
    pub(crate) fn len(&self) -> usize {
        self.compact.as_ref().map_or(0, Compact::len) + self.wide.len()
    }

    /// Makes room for about `keys` more digests: a compact table for them if the set is
    /// still empty, else room in the wide table.
    pub(crate) fn expect(&mut self, keys: usize) {
        if self.len() == 0 && self.compact.is_none() && keys > 0 {
            self.compact = Some(Compact::for_keys(keys));
        } else {
            self.wide.reserve(keys);
        }
    }

    /// Inserts every digest of `digests`, in order, pushing to `fresh` whether each one
    /// was new (a digest repeated within the batch is new only the first time).
    pub(crate) fn insert_batch(&mut self, digests: &[u128], fresh: &mut Vec<bool>) {
        let Some(compact) = &mut self.compact else {
            self.wide.insert_batch(digests, fresh);
            return;
        };
        let start = fresh.len();
        self.absent.clear();
        compact.insert_batch(digests, fresh, &mut self.absent);
        if self.absent.is_empty() {
            return;
        }
        self.spilled.clear();
        self.spilled.extend(self.absent.iter().map(|&i| digests[i]));
        self.spilled_fresh.clear();
        self.wide
            .insert_batch(&self.spilled, &mut self.spilled_fresh);
        for (&i, &new) in self.absent.iter().zip(&self.spilled_fresh) {
            fresh[start + i] = new;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    proptest! {
        /// Against the standard set, with a compact table sized for fewer keys than come
        /// (so keys spill to the wide table, within a batch and across batches) or none.
        /// Digests are random 128-bit values, as XXH3's are: with equal high bits and
        /// nearby homes two would be one key by design (see `compact.rs`).
        #[test]
        fn behaves_like_a_hash_set(
            expected in prop_oneof![Just(0usize), 1usize..400],
            batches in prop::collection::vec(
                prop::collection::vec((any::<u128>(), any::<prop::sample::Index>(), any::<bool>()), 0..300),
                1..8,
            ),
        ) {
            let mut set = KeySet::default();
            set.expect(expected);
            let mut model = HashSet::new();
            let mut seen: Vec<u128> = Vec::new();
            for batch in batches {
                // Half the digests repeat one seen before (or earlier in this batch).
                let mut digests = Vec::new();
                for (random, index, repeat) in batch {
                    let digest = if repeat && !seen.is_empty() { seen[index.index(seen.len())] } else { random };
                    seen.push(digest);
                    digests.push(digest);
                }
                let mut fresh = Vec::new();
                set.insert_batch(&digests, &mut fresh);
                let want: Vec<bool> = digests.iter().map(|&d| model.insert(d)).collect();
                prop_assert_eq!(fresh, want);
                prop_assert_eq!(set.len(), model.len());
            }
        }
    }

    #[test]
    fn a_million_keys_on_a_short_estimate_stay_exact() {
        let keys: Vec<u128> = (1..=1_000_000u128)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))
            .collect();
        for estimate in [1_000_000, 400_000] {
            let mut set = KeySet::default();
            set.expect(estimate);
            let mut fresh = Vec::new();
            for chunk in keys.chunks(4096) {
                set.insert_batch(chunk, &mut fresh);
            }
            assert!(fresh.iter().all(|&f| f));
            fresh.clear();
            set.insert_batch(&keys[..5000], &mut fresh);
            set.insert_batch(&keys[keys.len() - 5000..], &mut fresh);
            assert!(fresh.iter().all(|&f| !f));
            assert_eq!(set.len(), 1_000_000);
            let wide = set.wide.len();
            assert_eq!(
                wide > 0,
                estimate < 900_000,
                "{wide} keys in the wide table"
            );
        }
    }
}
