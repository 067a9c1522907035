//! The growable table of the key set: open addressing with linear probing over slots
//! of 96 digest bits, for keys no estimate sized a compact table for (input of unknown
//! size, recovery, an estimate far too short).
//!
//! Each slot keeps 96 of the digest's 128 bits (12 bytes), and the table is sized to the
//! keys expected rather than rounded up to a power of two (the home slot is the hash
//! scaled to the table's length). 96 bits keep collisions out of reach: the chance that
//! any two of n distinct keys share a slot value is about n² / 2⁹⁷, 6·10⁻¹² for a
//! billion keys.
//!
//! Slot placement hashes the digest again with a per-process random seed (foldhash), so
//! input crafted to collide in the low bits of XXH3 cannot build long probe chains.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;

use super::pages::Pages;
use super::AHEAD;

/// A table sized for a known number of keys is made 4/5 full by them…
const SIZED_LOAD: (usize, usize) = (4, 5);
/// …and grows only past 9/10, so an estimate up to 12% short still fits. Filled to 4/5
/// by linear probing, an insert scans 3 slots on average (36 bytes, mostly one cache
/// line); near 9/10 a new key scans ~50, but only the last keys of an underestimated
/// load get there.
const MAX_LOAD: (usize, usize) = (9, 10);

/// The part of a digest a slot keeps (96 bits: see the module notes).
type Slot = [u32; 3];

/// The digest bits a slot keeps.
const KEPT: u128 = (1 << 96) - 1;

/// `EMPTY` marks a free slot.
const EMPTY: Slot = [0; 3];

fn slot_of(digest: u128) -> Slot {
    [digest as u32, (digest >> 32) as u32, (digest >> 64) as u32]
}

/// A set of 128-bit digests (told apart by 96 of their bits).
pub(crate) struct Wide {
    /// The slot value equal to `EMPTY` lives in `has_empty` instead.
    slots: Pages<Slot>,
    len: usize,
    has_empty: bool,
    state: RandomState,
    /// Slot of each digest of the batch being inserted (reused).
    homes: Vec<usize>,
}

impl Default for Wide {
    fn default() -> Self {
        Wide {
            slots: Pages::new(vec![EMPTY; 1024]),
            len: 0,
            has_empty: false,
            state: RandomState::default(),
            homes: Vec::new(),
        }
    }
}

impl Wide {
    /// Number of digests in the set.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Inserts every digest of `digests`, in order, pushing to `fresh` whether each one
    /// was new (a digest repeated within the batch is new only the first time).
    pub(crate) fn insert_batch(&mut self, digests: &[u128], fresh: &mut Vec<bool>) {
        self.reserve(digests.len());
        let mut homes = std::mem::take(&mut self.homes);
        homes.clear();
        homes.extend(digests.iter().map(|&d| self.home(d)));
        for (i, (&digest, &home)) in digests.iter().zip(&homes).enumerate() {
            if let Some(&ahead) = homes.get(i + AHEAD) {
                crate::core::sys::cache_hint::to_l1(&self.slots[ahead]);
            }
            fresh.push(self.insert_at(slot_of(digest), home));
        }
        self.homes = homes;
    }

    /// Makes room for `additional` more digests (so no batch grows the table midway):
    /// when the table is empty (sized once for a whole load), a table they fill to 4/5,
    /// else at least twice the old size.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let needed = self.len.saturating_add(additional);
        if needed.saturating_mul(MAX_LOAD.1) <= self.slots.len() * MAX_LOAD.0 {
            return;
        }
        let mut size = needed.saturating_mul(SIZED_LOAD.1) / SIZED_LOAD.0 + 1;
        if self.len > 0 {
            size = size.max(self.slots.len() * 2);
        }
        let old = std::mem::replace(&mut self.slots, Pages::new(vec![EMPTY; size]));
        self.len = usize::from(self.has_empty);
        let mut chunk = Vec::with_capacity(4096);
        let mut fresh = Vec::with_capacity(4096);
        for full in old.chunks(4096) {
            chunk.clear();
            chunk.extend(
                full.iter()
                    .filter(|&&s| s != EMPTY)
                    .map(|s| u128::from(s[0]) | u128::from(s[1]) << 32 | u128::from(s[2]) << 64),
            );
            fresh.clear();
            // `reserve` inside returns at once: the table is already big enough.
            self.insert_batch(&chunk, &mut fresh);
        }
    }

    /// The slot a digest's probe starts at: the seeded hash of the bits a slot keeps,
    /// scaled to the table's length.
    fn home(&self, digest: u128) -> usize {
        let hash = self.state.hash_one(digest & KEPT);
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    /// Linear probing from `at`; true if the value was not there yet.
    fn insert_at(&mut self, value: Slot, mut at: usize) -> bool {
        if value == EMPTY {
            let new = !self.has_empty;
            self.has_empty = true;
            self.len += usize::from(new);
            return new;
        }
        loop {
            let there = self.slots[at];
            if there == EMPTY {
                self.slots[at] = value;
                self.len += 1;
                return true;
            }
            if there == value {
                return false;
            }
            at += 1;
            if at == self.slots.len() {
                at = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    proptest! {
        /// Against the standard set of the digests' low 96 bits, through growth, batches
        /// of any size, repeats within a batch, and the values that mark an empty slot.
        #[test]
        fn behaves_like_a_hash_set(batches in prop::collection::vec(
            prop::collection::vec(prop_oneof![0u128..64, Just(0), Just(1 << 100), any::<u128>()], 0..700),
            1..12,
        )) {
            let mut set = Wide::default();
            let mut model = HashSet::new();
            for batch in batches {
                let mut fresh = Vec::new();
                set.insert_batch(&batch, &mut fresh);
                let want: Vec<bool> = batch.iter().map(|d| model.insert(d & KEPT)).collect();
                prop_assert_eq!(fresh, want);
                prop_assert_eq!(set.len(), model.len());
            }
        }
    }

    #[test]
    fn a_million_keys_grow_the_table_and_stay_exact() {
        let mut set = Wide::default();
        let keys: Vec<u128> = (0..1_000_000u128)
            .map(|k| k * 0x9E37_79B9_7F4A_7C15)
            .collect();
        let mut fresh = Vec::new();
        for chunk in keys.chunks(8192) {
            set.insert_batch(chunk, &mut fresh);
        }
        assert!(fresh.iter().all(|&f| f));
        fresh.clear();
        set.insert_batch(&keys[..5000], &mut fresh);
        assert!(fresh.iter().all(|&f| !f));
        assert_eq!(set.len(), 1_000_000);
        assert!(set.slots.len() * MAX_LOAD.0 >= set.len() * MAX_LOAD.1);
    }
}
