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
    /// Partition key → id: the raw value of a single partition column, else the
    /// length-prefixed raw values.
    ids: HashMap<Vec<u8>, u32, RandomState>,
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
    key: Vec<u8>,
}

impl Router {
    /// A router over the partition columns `partition_cols` (batch column indices) for
    /// `sinks` sinks (1 to [`MAX_SINKS`]).
    pub(crate) fn new(partition_cols: Vec<usize>, sinks: usize) -> Router {
        let sinks = sinks.clamp(1, MAX_SINKS);
        Router {
            partition_cols,
            sinks,
            ids: HashMap::default(),
            owner: Vec::new(),
            load: Vec::new(),
            sink_load: vec![0; sinks],
            partitions: 0,
            spread_from: 0,
            dealt: false,
            key: Vec::new(),
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
        // One partition column (the usual case): its value is the key as it is.
        let single = match self.partition_cols[..] {
            [col] => Some(batch.column(col)),
            _ => None,
        };
        for row in 0..batch.len() {
            let known = match single {
                Some(column) => self.ids.get(column.get(row).unwrap_or_default()),
                None => {
                    self.key.clear();
                    for &col in &self.partition_cols {
                        let value = batch.field(row, col);
                        self.key
                            .extend_from_slice(&(value.len() as u32).to_le_bytes());
                        self.key.extend_from_slice(value);
                    }
                    self.ids.get(self.key.as_slice())
                }
            };
            let id = match known {
                Some(&id) => id,
                None => {
                    if let Some(column) = single {
                        self.key.clear();
                        self.key
                            .extend_from_slice(column.get(row).unwrap_or_default());
                    }
                    self.new_id()
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

    /// An id for the key in `self.key`, owned by the least loaded sink (the first while
    /// the checkpoint has too few partitions to spread).
    fn new_id(&mut self) -> u32 {
        let id = self.owner.len() as u32;
        let owner = if self.spread() {
            least_loaded(&self.sink_load)
        } else {
            0
        };
        self.ids.insert(self.key.clone(), id);
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
    fn without_partition_columns_every_row_has_one_id() {
        let mut router = Router::new(Vec::new(), 4);
        let r = routed(&mut router, &["x", "y"]);
        assert_eq!((r.ids.clone(), r.owners.clone()), (vec![0, 0], vec![0, 0]));
    }
}
