//! Keys that are canonical non-negative integers, kept exactly as bits: one bit per value
//! in chunks of 65,536 values (8 KiB each), found by a hash map from the chunk's number.
//!
//! Keys are very often such integers (order ids, event ids) and then mostly dense: 8.7
//! million consecutive ids take 134 chunks, about 1 MiB that stays in the CPU caches,
//! where their digests take an 87 MB table whose every probe is a cache miss. And a bit
//! per value is exact: no two keys are ever taken for one.
//!
//! Sparse values would cost a chunk each; [`IntSet::is_dense`] tells the dedupe stage
//! when to give the set up and move its keys to digests.

use std::collections::HashMap;

use foldhash::fast::RandomState;

/// Values per chunk: 2^16.
const CHUNK_SHIFT: u32 = 16;
const CHUNK_WORDS: usize = 1 << (CHUNK_SHIFT - 6);

/// A set of non-negative integers (see the module notes).
#[derive(Default)]
pub(crate) struct IntSet {
    chunks: HashMap<u64, Box<[u64]>, RandomState>,
    len: usize,
}

impl IntSet {
    /// The value a key spells if it is a canonical non-negative integer: ASCII digits
    /// without a leading zero (`0` itself is one), at most 18 of them. Each value has
    /// exactly one such spelling, so equal keys give equal values and different keys
    /// different values or none.
    pub(crate) fn value_of(key: &[u8]) -> Option<u64> {
        if key.is_empty() || key.len() > 18 || (key[0] == b'0' && key.len() > 1) {
            return None;
        }
        let mut value = 0u64;
        for &c in key {
            let digit = c.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            value = value * 10 + u64::from(digit);
        }
        Some(value)
    }

    /// Adds `value`; true if it was not there yet.
    pub(crate) fn insert(&mut self, value: u64) -> bool {
        let chunk = self
            .chunks
            .entry(value >> CHUNK_SHIFT)
            .or_insert_with(|| vec![0u64; CHUNK_WORDS].into_boxed_slice());
        let bit = value & ((1 << CHUNK_SHIFT) - 1);
        let (word, mask) = ((bit >> 6) as usize, 1u64 << (bit & 63));
        let new = chunk[word] & mask == 0;
        chunk[word] |= mask;
        self.len += usize::from(new);
        new
    }

    /// Number of values in the set.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// False once the set spends more than 8 bytes a value (beyond its first 64 chunks):
    /// by then digests would take less memory.
    pub(crate) fn is_dense(&self) -> bool {
        self.chunks.len() <= 64 || self.chunks.len() * CHUNK_WORDS <= self.len
    }

    /// Every value in the set, in no particular order: each set bit of each non-zero
    /// word, lowest first (a sparse chunk costs its 1,024 words, not its 65,536 bits).
    pub(crate) fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().flat_map(|(&number, words)| {
            words
                .iter()
                .enumerate()
                .filter(|(_, &word)| word != 0)
                .flat_map(move |(i, &word)| {
                    let base = number << CHUNK_SHIFT | (i as u64) << 6;
                    // The word, then it with its lowest set bit cleared, while any is
                    // left (never 0: the word is not, and the last step stops there).
                    std::iter::successors(Some(word), |&w| {
                        let rest = w & (w - 1);
                        (rest != 0).then_some(rest)
                    })
                    .map(move |w| base | u64::from(w.trailing_zeros()))
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn only_the_canonical_spelling_of_an_integer_is_one() {
        for (key, want) in [
            (&b"0"[..], Some(0)),
            (b"7", Some(7)),
            (b"12179445", Some(12_179_445)),
            (b"999999999999999999", Some(999_999_999_999_999_999)),
            (b"1000000000000000000", None),
            (b"007", None),
            (b"00", None),
            (b"+5", None),
            (b"-5", None),
            (b"5 ", None),
            (b"1e3", None),
            (b"", None),
            (b"\xd9\xa3", None),
        ] {
            assert_eq!(
                IntSet::value_of(key),
                want,
                "{:?}",
                String::from_utf8_lossy(key)
            );
        }
    }

    proptest! {
        /// Against a standard set, across chunk boundaries; `values` gives the set back.
        #[test]
        fn behaves_like_a_set(values in prop::collection::vec(
            prop_oneof![0u64..200_000, Just(65_535), Just(65_536), any::<u64>()], 0..500,
        )) {
            let mut set = IntSet::default();
            let mut model = BTreeSet::new();
            for v in values {
                prop_assert_eq!(set.insert(v), model.insert(v));
            }
            prop_assert_eq!(set.len(), model.len());
            prop_assert_eq!(set.values().collect::<BTreeSet<_>>(), model);
        }
    }

    #[test]
    fn dense_ids_stay_dense_and_scattered_ones_do_not() {
        let mut dense = IntSet::default();
        for v in 12_000_000..13_000_000 {
            dense.insert(v);
        }
        assert!(dense.is_dense());
        let mut scattered = IntSet::default();
        for v in 0..100u64 {
            scattered.insert(v.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
        assert!(!scattered.is_dense());
    }
}
