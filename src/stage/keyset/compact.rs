//! The presized table of the key set: 64 bits of each digest, in buckets of eight slots
//! that fill one cache line each, with the bucket itself standing for more of the digest
//! (quotienting). 8 bytes a slot instead of the wide table's 12, so the table of a load
//! takes less memory: 87 MB for 8.7 million keys, where the wide table takes 130 MB.
//!
//! A key's home bucket is its whole digest hashed with a per-process seed and scaled to
//! the number of buckets; a slot keeps the digest's high 64 bits. A full bucket passes
//! new keys on to the next one (linear probing by buckets), so a key is looked for from
//! its home up to the first bucket with a free slot: slots fill in order and are never
//! emptied, so no key of that home went past a bucket that still has room.
//!
//! Two distinct keys are taken for one only if their kept bits agree and one lies within
//! the other's probe range. Filling a table to 4/5, a new key is compared with about 4
//! kept values (simulated: 4.2; 6.0 when filled to 22/25), each equal by chance with
//! probability 2⁻⁶⁴: over a load of n keys about n · 3·10⁻¹⁹ (3·10⁻¹⁰ for a billion
//! keys), far below the odds of the disk returning a wrong bit.
//!
//! The table does not grow: quotienting forgot the bits a bigger table would place keys
//! by. Past its limit it stops taking keys (it still answers for those it has), and the
//! key set puts new ones in its wide table.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;

use super::pages::Pages;
use super::AHEAD;

/// Slots in a bucket: 8 × 8 bytes, one cache line.
const SLOTS: usize = 8;
/// The table is sized for its expected keys to fill 4/5 of its slots…
const SIZED_LOAD: (usize, usize) = (4, 5);
/// …and takes keys up to 22/25 of them, so an estimate 10% short still fits. Not more:
/// once full, every new key is looked for here before it goes to the wide table, and
/// that search scans 5 buckets at 22/25 (simulated), 10 at 23/25.
const MAX_LOAD: (usize, usize) = (22, 25);

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Found,
    Added,
    /// Not there, and the table takes no more keys.
    Absent,
}

/// A fixed-size set of digests (see the module notes).
pub(crate) struct Compact {
    /// The slots, bucket after bucket from `base`; 0 is a free slot.
    words: Pages<u64>,
    /// Index in `words` of bucket 0's first slot, the first on a cache-line boundary.
    base: usize,
    buckets: usize,
    len: usize,
    /// Keys the table takes before it stops.
    limit: usize,
    state: RandomState,
    /// Home bucket of each digest of the batch being inserted (reused).
    homes: Vec<usize>,
}

impl Compact {
    /// A table for about `keys` keys.
    pub(crate) fn for_keys(keys: usize) -> Compact {
        let buckets = (keys.saturating_mul(SIZED_LOAD.1) / SIZED_LOAD.0 / SLOTS).max(1) + 1;
        // `vec![0; n]` gets untouched zeroed pages; one line more leaves room to start
        // the buckets on a line boundary.
        let words = Pages::new(vec![0u64; buckets * SLOTS + SLOTS - 1]);
        let line = std::mem::size_of::<[u64; SLOTS]>();
        let start = words.as_ptr() as usize;
        let base = (start.next_multiple_of(line) - start) / std::mem::size_of::<u64>();
        Compact {
            words,
            base,
            buckets,
            len: 0,
            limit: buckets * SLOTS * MAX_LOAD.0 / MAX_LOAD.1,
            state: RandomState::default(),
            homes: Vec::new(),
        }
    }

    /// Number of digests in the table.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Looks up every digest of `digests`, in order, adding those not there while the
    /// table takes keys. Pushes to `fresh` whether each one was new; for a digest that
    /// is not there and found the table full, pushes `false` and its index to `absent`.
    pub(crate) fn insert_batch(
        &mut self,
        digests: &[u128],
        fresh: &mut Vec<bool>,
        absent: &mut Vec<usize>,
    ) {
        let mut homes = std::mem::take(&mut self.homes);
        homes.clear();
        homes.extend(digests.iter().map(|&d| self.home(d)));
        for (i, (&digest, &home)) in digests.iter().zip(&homes).enumerate() {
            if let Some(&ahead) = homes.get(i + AHEAD) {
                crate::core::sys::cache_hint::to_l1(&self.words[self.base + ahead * SLOTS]);
            }
            match self.insert(fingerprint(digest), home) {
                Probe::Found => fresh.push(false),
                Probe::Added => fresh.push(true),
                Probe::Absent => {
                    fresh.push(false);
                    absent.push(i);
                }
            }
        }
        self.homes = homes;
    }

    /// The bucket a digest's probe starts at: its seeded hash scaled to the table.
    fn home(&self, digest: u128) -> usize {
        let hash = self.state.hash_one(digest);
        ((u128::from(hash) * self.buckets as u128) >> 64) as usize
    }

    /// Probes buckets from `bucket` on for `value` (see the module notes).
    fn insert(&mut self, value: u64, mut bucket: usize) -> Probe {
        loop {
            let at = self.base + bucket * SLOTS;
            let slots = &mut self.words[at..at + SLOTS];
            // Both masks at once over the line, without a branch per slot.
            let (mut hit, mut free) = (0u32, 0u32);
            for (i, &slot) in slots.iter().enumerate() {
                hit |= u32::from(slot == value) << i;
                free |= u32::from(slot == 0) << i;
            }
            if hit != 0 {
                return Probe::Found;
            }
            if free != 0 {
                if self.len >= self.limit {
                    return Probe::Absent;
                }
                slots[free.trailing_zeros() as usize] = value;
                self.len += 1;
                return Probe::Added;
            }
            // The limit leaves free slots, so some bucket ahead has one.
            bucket += 1;
            if bucket == self.buckets {
                bucket = 0;
            }
        }
    }
}

/// The digest bits a slot keeps: the high 64, never 0 (a free slot), which becomes 1.
fn fingerprint(digest: u128) -> u64 {
    ((digest >> 64) as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(table: &mut Compact, digests: &[u128]) -> (Vec<bool>, Vec<usize>) {
        let (mut fresh, mut absent) = (Vec::new(), Vec::new());
        table.insert_batch(digests, &mut fresh, &mut absent);
        (fresh, absent)
    }

    #[test]
    fn buckets_start_on_cache_lines() {
        for keys in [1, 100, 10_000, 1_000_000] {
            let table = Compact::for_keys(keys);
            assert_eq!(table.words[table.base..].as_ptr() as usize % 64, 0);
            assert!(table.words.len() >= table.base + table.buckets * SLOTS);
            assert!(table.limit >= keys, "{keys} keys, limit {}", table.limit);
            assert!(table.limit < table.buckets * SLOTS);
        }
    }

    #[test]
    fn equal_high_bits_are_told_apart_by_their_home_bucket() {
        let mut table = Compact::for_keys(10_000);
        let first = 7u128 << 64;
        let other = (1..)
            .map(|low| first | low)
            .find(|&d| table.home(d).abs_diff(table.home(first)) > 2)
            .unwrap();
        assert_eq!(
            insert(&mut table, &[first, other, first, other]).0,
            [true, true, false, false]
        );
    }

    #[test]
    fn high_bits_of_zero_are_kept() {
        let mut table = Compact::for_keys(100);
        assert_eq!(insert(&mut table, &[5, 5]).0, [true, false]);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn past_its_limit_it_answers_for_its_keys_and_turns_new_ones_away() {
        let mut table = Compact::for_keys(10);
        let keys: Vec<u128> = (1..=200u128)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))
            .collect();
        let (fresh, absent) = insert(&mut table, &keys);
        let taken = table.limit;
        assert_eq!(table.len(), taken);
        assert!(fresh[..taken].iter().all(|&f| f));
        assert!(fresh[taken..].iter().all(|&f| !f));
        assert_eq!(absent, (taken..200).collect::<Vec<_>>());
        let (fresh, absent) = insert(&mut table, &keys);
        assert!(fresh.iter().all(|&f| !f));
        assert_eq!(absent, (taken..200).collect::<Vec<_>>());
    }
}
