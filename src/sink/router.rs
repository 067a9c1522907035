//! Which sink writes which row: the partition key space split over several sinks, so
//! that writing scales across partitions.
//!
//! The router gives each partition key of the run a dense id (one hash lookup per row;
//! the sinks then find a row's part file by indexing, not hashing) and an owner among
//! the sinks. Within a checkpoint a partition has exactly one owner, so it still gets
//! one file per checkpoint with its rows in input order: what a single sink writes,
//! whatever the number of sinks. At each barrier the owners are dealt out again by the
//! rows each partition took in the checkpoint just ended (largest first, each to the
//! least loaded sink), which costs nothing: every checkpoint starts new files anyway.
//! Ids are assigned in the order keys first appear, and owners from row counts only, so
//! the same input gives the same assignment.
//!
//! A router may hold its sinks past the first back until a checkpoint has many
//! partitions ([`Router::spreading_from`]): the default two-thread load has a second
//! sink that takes partitions only once a checkpoint has thousands, where one sink's
//! thread is the bottleneck of the load and the source's leaves half a core idle.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use crate::core::batch::{Msg, RecordBatch};
use crate::core::protocol::Barrier;

/// A batch with each good row's partition id and owning sink.
#[derive(Debug)]
pub(crate) struct Routed {
    pub(crate) batch: RecordBatch,
    /// Partition id of each row, in row order.
    pub(crate) ids: Vec<u32>,
    /// The sink that writes each row, in row order.
    pub(crate) owners: Vec<u8>,
    /// Bit `i` set: sink `i` owns at least one row of the batch.
    pub(crate) sinks: u64,
    /// Whether the checkpoint's partitions are spread over every sink (so far, with
    /// this batch); false: the first sink has them all, and may use what the sinks
    /// share (open files, memory) alone.
    pub(crate) spread: bool,
}

impl Routed {
    /// Whether sink `index` has rows in this batch to write.
    pub(crate) fn has_rows_for(&self, index: usize) -> bool {
        self.sinks & (1 << index) != 0
    }
}

/// What a sink receives: batches shared by every sink (each writes its own rows), and
/// barriers.
#[derive(Debug)]
pub(crate) enum Work {
    Batch(Arc<Routed>),
    Barrier(Barrier),
}

/// Most sinks one router feeds (owners are bytes, and `Routed::sinks` a 64-bit mask).
pub(crate) const MAX_SINKS: usize = 64;

/// Assigns partition ids and owners, on the thread in front of the sinks.
pub(crate) struct Router {
    partition_cols: Vec<usize>,
    sinks: usize,
    /// Partition key → id, column by column (see [`Keys`]).
    keys: Keys,
    /// Per id: its owner in the current checkpoint.
    owner: Vec<u8>,
    /// Per id: rows routed to it in the current checkpoint.
    load: Vec<u64>,
    /// Per sink: rows routed to it in the current checkpoint.
    sink_load: Vec<u64>,
    /// Partitions with rows in the current checkpoint.
    partitions: usize,
    /// Partitions a checkpoint has before sinks past the first take any (0: all sinks
    /// take partitions from the first row).
    spread_from: usize,
    /// The current checkpoint's partitions were dealt over every sink at its start (the
    /// checkpoint before it spread).
    dealt: bool,
    /// Per row of the batch being routed: the code of its values in the partition
    /// columns before the last (see [`Keys`]).
    prefixes: Vec<u32>,
}

impl Router {
    /// A router over the partition columns `partition_cols` (batch column indices) for
    /// `sinks` sinks (1 to [`MAX_SINKS`]).
    pub(crate) fn new(partition_cols: Vec<usize>, sinks: usize) -> Router {
        let sinks = sinks.clamp(1, MAX_SINKS);
        Router {
            keys: Keys::new(partition_cols.len()),
            partition_cols,
            sinks,
            owner: Vec::new(),
            load: Vec::new(),
            sink_load: vec![0; sinks],
            partitions: 0,
            spread_from: 0,
            dealt: false,
            prefixes: Vec::new(),
        }
    }

    /// This router, giving every partition to the first sink until a checkpoint has
    /// `partitions` of them: new partitions then go to the least loaded sink, and the
    /// next checkpoint starts with its partitions dealt over every sink. A checkpoint
    /// with fewer stays on the first sink alone, and so does the next one.
    pub(crate) fn spreading_from(mut self, partitions: usize) -> Router {
        self.spread_from = partitions;
        self
    }

    /// Routes a message: a batch's rows get ids and owners; a barrier deals out the
    /// owners for the next checkpoint.
    pub(crate) fn route(&mut self, msg: Msg) -> Work {
        match msg {
            Msg::Batch(batch) => Work::Batch(Arc::new(self.route_batch(batch))),
            Msg::Barrier(barrier) => {
                self.rebalance();
                Work::Barrier(barrier)
            }
        }
    }

    fn route_batch(&mut self, batch: RecordBatch) -> Routed {
        let mut ids = Vec::with_capacity(batch.len());
        let mut owners = Vec::with_capacity(batch.len());
        let mut sinks = 0u64;
        // The columns before the last, one at a time over the whole batch: each value's
        // code, then the code of the values so far.
        let (last, before) = match self.partition_cols.split_last() {
            Some((&last, before)) => (Some(batch.column(last)), before),
            None => (None, &[][..]),
        };
        self.prefixes.clear();
        self.prefixes.resize(batch.len(), 0);
        for (level, &col) in before.iter().enumerate() {
            let column = batch.column(col);
            for (row, prefix) in self.prefixes.iter_mut().enumerate() {
                let value = column.get(row).unwrap_or_default();
                *prefix = self.keys.prefix(level, *prefix, value);
            }
        }
        for row in 0..batch.len() {
            let value = last.map_or(&[][..], |c| c.get(row).unwrap_or_default());
            let prefix = self.prefixes[row];
            let id = match self.keys.id(prefix, value) {
                Some(id) => id,
                None => {
                    let id = self.new_id();
                    self.keys.insert(prefix, value, id);
                    id
                }
            } as usize;
            if self.load[id] == 0 {
                self.partitions += 1;
            }
            self.load[id] += 1;
            let owner = self.owner[id];
            self.sink_load[owner as usize] += 1;
            sinks |= 1 << owner;
            ids.push(id as u32);
            owners.push(owner);
        }
        Routed {
            batch,
            ids,
            owners,
            sinks,
            spread: self.spread(),
        }
    }

    /// Whether the current checkpoint's partitions go to every sink: dealt so at its
    /// start, or enough of them now.
    fn spread(&self) -> bool {
        self.dealt || self.partitions >= self.spread_from
    }

    /// The id of a new partition, owned by the least loaded sink (the first while the
    /// checkpoint has too few partitions to spread).
    fn new_id(&mut self) -> u32 {
        let id = self.owner.len() as u32;
        let owner = if self.spread() {
            least_loaded(&self.sink_load)
        } else {
            0
        };
        self.owner.push(owner as u8);
        self.load.push(0);
        id
    }

    /// Deals the partitions out again, largest of the ended checkpoint first, each to
    /// the sink with the fewest rows so far (all to the first if the ended checkpoint
    /// had too few to spread); then starts counting the next checkpoint.
    fn rebalance(&mut self) {
        let wide = self.partitions >= self.spread_from;
        self.dealt = wide && self.sinks > 1;
        if !wide {
            self.owner.iter_mut().for_each(|o| *o = 0);
        } else if self.sinks > 1 {
            let mut order: Vec<usize> = (0..self.owner.len()).collect();
            // Stable: equal loads keep id order, so the deal is deterministic.
            order.sort_by_key(|&id| std::cmp::Reverse(self.load[id]));
            let mut dealt = vec![0u64; self.sinks];
            for id in order {
                let sink = least_loaded(&dealt);
                dealt[sink] += self.load[id];
                self.owner[id] = sink as u8;
            }
        }
        self.load.iter_mut().for_each(|l| *l = 0);
        self.sink_load.iter_mut().for_each(|l| *l = 0);
        self.partitions = 0;
    }
}

/// Partition keys to dense ids, one column at a time. Each partition column's values
/// get codes of their own, from a dictionary as small as the column's distinct values
/// (40 countries, 100 buckets); the values of the columns up to column `i` then have a
/// code, found by the pair (code up to `i - 1`, value's code in `i`), an integer key.
/// The last column's pairs give the partition ids. A row costs one lookup per column in
/// tables that stay in cache, with no key built: a key of the raw values, length
/// prefixed and hashed whole, took twice the time over 4,000 partitions (`perf`).
#[derive(Debug)]
struct Keys {
    /// Per partition column: value → code. A column alone maps its values to partition
    /// ids directly.
    values: Vec<HashMap<Vec<u8>, u32, RandomState>>,
    /// Per partition column after the first: (code up to the column before, value's
    /// code) → code up to this one (for the last column: the partition id).
    pairs: Vec<HashMap<u64, u32, RandomState>>,
}

impl Keys {
    /// Keys of `columns` columns. No partition column is one partition, as if one
    /// column were always empty.
    fn new(columns: usize) -> Keys {
        Keys {
            values: (0..columns.max(1)).map(|_| HashMap::default()).collect(),
            pairs: (1..columns.max(1)).map(|_| HashMap::default()).collect(),
        }
    }

    /// The code of a value of column `level` after values whose code is `before`
    /// (ignored for the first column): found, or given the next one.
    fn prefix(&mut self, level: usize, before: u32, value: &[u8]) -> u32 {
        let code = code_of(&mut self.values[level], value);
        if level == 0 {
            return code;
        }
        let pairs = &mut self.pairs[level - 1];
        let next = pairs.len() as u32;
        *pairs.entry(pair(before, code)).or_insert(next)
    }

    /// The partition id of `value` in the last column after the columns before it
    /// (whose code is `before`), if the key has one.
    fn id(&self, before: u32, value: &[u8]) -> Option<u32> {
        match self.values.len() {
            1 => self.values[0].get(value).copied(),
            n => {
                let code = *self.values[n - 1].get(value)?;
                self.pairs[n - 2].get(&pair(before, code)).copied()
            }
        }
    }

    /// Records `id` as the partition id of the key [`Keys::id`] did not find.
    fn insert(&mut self, before: u32, value: &[u8], id: u32) {
        match self.values.len() {
            1 => {
                self.values[0].insert(value.to_vec(), id);
            }
            n => {
                let code = code_of(&mut self.values[n - 1], value);
                self.pairs[n - 2].insert(pair(before, code), id);
            }
        }
    }
}

/// `value`'s code in `codes`: found, or given the next one.
fn code_of(codes: &mut HashMap<Vec<u8>, u32, RandomState>, value: &[u8]) -> u32 {
    if let Some(&code) = codes.get(value) {
        return code;
    }
    let code = codes.len() as u32;
    codes.insert(value.to_vec(), code);
    code
}

/// Two codes as one integer key.
fn pair(before: u32, code: u32) -> u64 {
    (u64::from(before) << 32) | u64::from(code)
}

/// The first sink with the least load.
fn least_loaded(load: &[u64]) -> usize {
    let mut best = 0;
    for (i, &l) in load.iter().enumerate() {
        if l < load[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(values: &[&str]) -> RecordBatch {
        let mut b = RecordBatch::new(2);
        for (i, v) in values.iter().enumerate() {
            let row = i.to_string();
            b.push([v.as_bytes(), row.as_bytes()], 0, i as u64 + 2);
        }
        b
    }

    fn routed(router: &mut Router, values: &[&str]) -> Arc<Routed> {
        match router.route(Msg::Batch(batch(values))) {
            Work::Batch(r) => r,
            Work::Barrier(_) => panic!("a batch routed as a barrier"),
        }
    }

    fn barrier(router: &mut Router) {
        router.route(Msg::Barrier(Barrier {
            checkpoint: 1,
            last: false,
        }));
    }

    #[test]
    fn one_key_one_id_and_one_owner_per_checkpoint() {
        let mut router = Router::new(vec![0], 3);
        let r = routed(&mut router, &["a", "b", "a", "c", "d", "b"]);
        assert_eq!(r.ids, [0, 1, 0, 2, 3, 1]);
        // New keys go to the least loaded sink at the time: a, b, c, then d to the
        // sink with fewest rows (b's and c's have one each, a's two).
        assert_eq!(r.owners, [0, 1, 0, 2, 1, 1]);
        let r = routed(&mut router, &["d", "a"]);
        assert_eq!((r.ids.clone(), r.owners.clone()), (vec![3, 0], vec![1, 0]));
    }

    #[test]
    fn a_barrier_deals_the_largest_partitions_apart() {
        let mut router = Router::new(vec![0], 2);
        // a and b first land on sinks 0 and 1; then a, b and c all grow.
        let mut rows = vec!["a", "b"];
        rows.extend(std::iter::repeat_n("a", 9));
        rows.extend(std::iter::repeat_n("b", 9));
        rows.extend(std::iter::repeat_n("c", 8));
        let r = routed(&mut router, &rows);
        assert_eq!(r.owners[..2], [0, 1]);
        barrier(&mut router);
        // Loads a 10, b 10, c 8: a → 0, b → 1, c → 0 (ties go to the first sink).
        let r = routed(&mut router, &["c", "b", "a"]);
        assert_eq!(r.owners, [0, 1, 0]);
        barrier(&mut router);
        // Loads c 1, b 1, a 1: in id order a → 0, b → 1, c → 0.
        let r = routed(&mut router, &["a", "b", "c"]);
        assert_eq!(r.owners, [0, 1, 0]);
    }

    #[test]
    fn later_sinks_take_partitions_only_once_a_checkpoint_has_enough() {
        let mut router = Router::new(vec![0], 2).spreading_from(3);
        assert!(!routed(&mut router, &[]).spread);
        let r = routed(&mut router, &["a", "b", "a", "c", "d", "e"]);
        // a, b and c go to the first sink: d is the fourth partition, and the first
        // sink then has four rows against none; e follows the rows too.
        assert_eq!(r.owners, [0, 0, 0, 0, 1, 1]);
        assert!(r.has_rows_for(0) && r.has_rows_for(1));
        assert!(r.spread);
        barrier(&mut router);
        // Five partitions spread: the next checkpoint deals them over both sinks
        // (a's two rows first: a → 0, then b → 1, c → 1, d → 0, e → 1 by rows dealt).
        let r = routed(&mut router, &["a", "b", "c", "d", "e"]);
        assert_eq!(r.owners, [0, 1, 1, 0, 1]);
        barrier(&mut router);
        // Loads all 1: dealt in id order, a → 0, b → 1, c → 0, d → 1, e → 0. A checkpoint
        // of two partitions, below the mark: the next one is on the first sink alone,
        // whichever sinks its partitions had.
        let r = routed(&mut router, &["b", "d"]);
        assert_eq!(r.owners, [1, 1]);
        assert!(
            !r.has_rows_for(0),
            "no row of this batch is the first sink's"
        );
        assert!(r.spread, "dealt over both sinks from its start");
        barrier(&mut router);
        let r = routed(&mut router, &["b", "f"]);
        assert_eq!(r.owners, [0, 0]);
        assert!(!r.has_rows_for(1));
        assert!(!r.spread);
    }

    #[test]
    fn a_router_that_spreads_from_the_first_partition_is_the_plain_one() {
        let values = ["a", "b", "a", "c", "d", "b"];
        let mut plain = Router::new(vec![0], 3);
        let mut spreading = Router::new(vec![0], 3).spreading_from(0);
        assert_eq!(
            routed(&mut plain, &values).owners,
            routed(&mut spreading, &values).owners
        );
    }

    #[test]
    fn keys_of_several_columns_are_told_apart_by_every_value() {
        let mut b = RecordBatch::new(3);
        let rows: [[&str; 3]; 7] = [
            ["a", "b", "x"],
            ["ab", "", "x"],
            ["a", "b", "y"],
            ["b", "a", "x"],
            ["a", "b", "x"],
            ["", "ab", "x"],
            ["ab", "", "x"],
        ];
        for (i, row) in rows.iter().enumerate() {
            b.push(row.map(str::as_bytes), 0, i as u64 + 2);
        }
        let mut router = Router::new(vec![0, 1, 2], 1);
        let Work::Batch(r) = router.route(Msg::Batch(b.clone())) else {
            panic!("a batch routed as a barrier");
        };
        // Ids in order of first appearance; equal keys share one, and no two keys whose
        // values only join alike ("a" "b" against "ab" "") do.
        assert_eq!(r.ids, [0, 1, 2, 3, 0, 4, 1]);
        // The same keys in a later batch keep their ids; the last two columns alone
        // make other keys.
        let Work::Batch(again) = router.route(Msg::Batch(b.clone())) else {
            panic!("a batch routed as a barrier");
        };
        assert_eq!(again.ids, r.ids);
        let mut two = Router::new(vec![1, 2], 1);
        let Work::Batch(r) = two.route(Msg::Batch(b)) else {
            panic!("a batch routed as a barrier");
        };
        assert_eq!(r.ids, [0, 1, 2, 3, 0, 4, 1]);
    }

    proptest::proptest! {
        /// Ids are the keys' order of first appearance, whatever the columns' values
        /// share: a few short values over one to four columns make every kind of
        /// overlap between the codes of one column, of the columns so far, and ids.
        #[test]
        fn ids_number_the_keys_in_order_of_first_appearance(
            columns in 1usize..=4,
            rows in proptest::collection::vec(proptest::collection::vec(0usize..4, 4), 1..200),
        ) {
            const VALUES: [&str; 4] = ["", "a", "b", "ab"];
            let mut b = RecordBatch::new(columns);
            for (i, row) in rows.iter().enumerate() {
                b.push(row[..columns].iter().map(|&v| VALUES[v].as_bytes()), 0, i as u64 + 2);
            }
            let mut router = Router::new((0..columns).collect(), 2);
            let Work::Batch(routed) = router.route(Msg::Batch(b)) else {
                panic!("a batch routed as a barrier");
            };
            let mut first_seen: HashMap<&[usize], u32> = HashMap::new();
            let want: Vec<u32> = rows
                .iter()
                .map(|row| {
                    let next = first_seen.len() as u32;
                    *first_seen.entry(&row[..columns]).or_insert(next)
                })
                .collect();
            proptest::prop_assert_eq!(&routed.ids, &want);
        }
    }

    #[test]
    fn without_partition_columns_every_row_has_one_id() {
        let mut router = Router::new(Vec::new(), 4);
        let r = routed(&mut router, &["x", "y"]);
        assert_eq!((r.ids.clone(), r.owners.clone()), (vec![0, 0], vec![0, 0]));
    }
}
