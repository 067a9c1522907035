//! The dedupe stage's set of key digests: open addressing with linear probing over one
//! flat array of digests, probed a batch at a time with the slots of the rows
//! ahead prefetched.
//!
//! Why not `HashSet<u128>`: past a million keys the set no longer fits in the CPU caches,
//! every probe is a cache miss (~100 ns), and one after another those misses made dedupe
//! the slowest part of a load (a third of all CPU time on 8.7 million keys). Here the
//! whole batch's digests are known before the first probe, so while row i is probed the
//! memory system is already fetching the slots of rows i+1 … i+`AHEAD`: the misses
//! overlap instead of adding up. Growth rehashes the same way.
//!
//! Each slot keeps 96 of the digest's 128 bits: 12 bytes instead of 16, and the table is
//! sized to the keys expected rather than rounded up to a power of two (the home slot is
//! the hash scaled to the table's length). Both matter because a dedupe table is the
//! one large allocation of a load and the kernel must find and zero every page of it:
//! on this kind of VM that first touch cost up to 0.7 s for 256 MB, more than the
//! inserts themselves. 96 bits keep collisions out of reach: the chance that any two of
//! n distinct keys share a slot value is about n² / 2⁹⁷, 6·10⁻¹² for a billion keys.
//!
//! Slot placement hashes the digest again with a per-process random seed (foldhash), so
//! input crafted to collide in the low bits of XXH3 cannot build long probe chains.

use std::hash::BuildHasher;
use std::thread::JoinHandle;

use foldhash::fast::RandomState;

/// Rows whose slots are requested ahead of the one being probed.
const AHEAD: usize = 16;
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
pub struct KeySet {
    /// The slot value equal to `EMPTY` lives in `has_empty` instead.
    slots: Vec<Slot>,
    len: usize,
    has_empty: bool,
    state: RandomState,
    /// Slot of each digest of the batch being inserted (reused).
    homes: Vec<usize>,
    /// The thread populating the pages of `slots`, if it may still be running.
    populating: Option<JoinHandle<()>>,
}

impl Drop for KeySet {
    fn drop(&mut self) {
        self.populated();
    }
}

impl Default for KeySet {
    fn default() -> Self {
        KeySet::with_slots(1024)
    }
}

impl KeySet {
    fn with_slots(slots: usize) -> KeySet {
        KeySet {
            slots: vec![EMPTY; slots],
            len: 0,
            has_empty: false,
            state: RandomState::default(),
            homes: Vec::new(),
            populating: None,
        }
    }

    /// Waits for the thread populating the table, so that its range is never freed
    /// while it runs.
    fn populated(&mut self) {
        if let Some(thread) = self.populating.take() {
            let _ = thread.join();
        }
    }

    /// Number of digests in the set.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Inserts every digest of `digests`, in order, pushing to `fresh` whether each one
    /// was new (a digest repeated within the batch is new only the first time).
    pub fn insert_batch(&mut self, digests: &[u128], fresh: &mut Vec<bool>) {
        self.reserve(digests.len());
        let mut homes = std::mem::take(&mut self.homes);
        homes.clear();
        homes.extend(digests.iter().map(|&d| self.home(d)));
        for (i, (&digest, &home)) in digests.iter().zip(&homes).enumerate() {
            if let Some(&ahead) = homes.get(i + AHEAD) {
                crate::prefetch::to_l1(&self.slots[ahead]);
            }
            fresh.push(self.insert_at(slot_of(digest), home));
        }
        self.homes = homes;
    }

    /// Makes room for `additional` more digests (so no batch grows the table midway):
    /// when the table is empty (sized once for a whole load), a table they fill to 4/5,
    /// else at least twice the old size.
    pub fn reserve(&mut self, additional: usize) {
        let needed = self.len.saturating_add(additional);
        if needed.saturating_mul(MAX_LOAD.1) <= self.slots.len() * MAX_LOAD.0 {
            return;
        }
        let mut size = needed.saturating_mul(SIZED_LOAD.1) / SIZED_LOAD.0 + 1;
        if self.len > 0 {
            size = size.max(self.slots.len() * 2);
        }
        self.populated();
        let (slots, populating) = zeroed_slots(size);
        let old = std::mem::replace(&mut self.slots, slots);
        self.populating = populating;
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

/// A zeroed table of `size` slots, backed by transparent huge pages where the kernel
/// allows: probes land anywhere in hundreds of megabytes, and with 4 KiB pages nearly
/// each one also missed the TLB. Measured on 8.7 million inserts into a presized table
/// (`keyset` benchmark in the issue 4 note): 0.74 s with 4 KiB pages, 0.37 s with 2 MiB.
///
/// A large table's pages are then populated, writable, by a helper thread (returned, to
/// be joined before the table is freed). Left to the first probes, each page was read
/// first (mapping the shared zero page), then written: a second fault, a copy-on-write
/// and a TLB shootdown across both cores per page (2.3% of all samples at 100 MB of
/// input). Populated on the stage thread itself, the zeroing of 150 MB stalled the
/// whole pipeline for 0.1-0.4 s at the first batch; beside it, the probes go on (a
/// page they reach first is simply faulted in by them, as it would have been).
fn zeroed_slots(size: usize) -> (Vec<Slot>, Option<JoinHandle<()>>) {
    let slots = vec![EMPTY; size];
    let bytes = size * std::mem::size_of::<Slot>();
    if bytes < 4 << 20 {
        return (slots, None);
    }
    // madvise takes whole pages: those inside the allocation.
    const PAGE: usize = 4096;
    let start = slots.as_ptr() as usize;
    let first = start.next_multiple_of(PAGE);
    let len = (start + bytes).saturating_sub(first) / PAGE * PAGE;
    // SAFETY (both calls): the range lies inside the live allocation of `slots`, which
    // the caller keeps until the helper is joined; both advices change only how the
    // kernel backs those pages (huge pages; mapped now rather than at first touch),
    // never their contents, which stay whatever the program wrote. Failure (a kernel
    // without THP, or older than 5.14) is harmless: the results are ignored.
    let _ = unsafe {
        rustix::mm::madvise(
            first as *mut std::ffi::c_void,
            len,
            rustix::mm::Advice::LinuxHugepage,
        )
    };
    let populating = std::thread::Builder::new()
        .name("ingest-dedupe-pages".into())
        .spawn(move || {
            // SAFETY: as above.
            let _ = unsafe {
                rustix::mm::madvise(
                    first as *mut std::ffi::c_void,
                    len,
                    rustix::mm::Advice::LinuxPopulateWrite,
                )
            };
        })
        .ok();
    (slots, populating)
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
            let mut set = KeySet::default();
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
        let mut set = KeySet::default();
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
