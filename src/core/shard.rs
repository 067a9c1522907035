//! `--shard I/N`: one machine's share of an input list that N machines are given alike.
//!
//! An input belongs to share `xxh3_64(path) mod N`, where the path is the input as
//! `ingest` names it: the canonical path of a file (a directory argument's files each by
//! their own path) or the `s3://BUCKET/KEY` of an object. XXH3 is specified bit for bit
//! and the same on every platform and version, so machines that see the same inputs at
//! the same paths agree on every input's share without talking to each other: the N
//! shares are disjoint and together exactly the list, whatever N.

use std::fmt;

/// Share `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) index: u64,
    pub(crate) count: u64,
}

impl Shard {
    /// Parses `I/N` with `0 <= I < N`.
    pub(crate) fn parse(text: &str) -> Result<Shard, String> {
        let (index, count) = text
            .split_once('/')
            .ok_or_else(|| format!("--shard takes I/N (e.g. 0/8), not {text:?}"))?;
        let number = |part: &str| {
            part.trim()
                .parse::<u64>()
                .map_err(|_| format!("--shard {text:?}: {part:?} is not a whole number"))
        };
        let (index, count) = (number(index)?, number(count)?);
        if count == 0 || index >= count {
            return Err(format!(
                "--shard {text:?}: I must be at least 0 and less than N (shares 0/{count} to \
                 {}/{count})",
                count.saturating_sub(1)
            ));
        }
        Ok(Shard { index, count })
    }

    /// True when the input named `path` belongs to this share.
    pub(crate) fn keeps(&self, path: &str) -> bool {
        share(path, self.count) == self.index
    }
}

/// The share of `count` that the input named `path` belongs to.
pub(crate) fn share(path: &str, count: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64(path.as_bytes()) % count
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!(Shard::parse("0/1"), Ok(Shard { index: 0, count: 1 }));
        assert_eq!(Shard::parse("7/8"), Ok(Shard { index: 7, count: 8 }));
        for bad in ["8/8", "1/0", "0/0", "-1/4", "a/4", "3", "1/2/3", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_share_is_fixed_by_the_path_alone() {
        // Pinned: a machine with another build of ingest must put an input in the same
        // share, or two machines would both load it (or neither would).
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2d06800538d394c2);
        assert_eq!(share("/landing/2026-12-01/orders-0001.csv", 8), {
            xxhash_rust::xxh3::xxh3_64(b"/landing/2026-12-01/orders-0001.csv") % 8
        });
    }

    proptest! {
        #[test]
        fn the_shares_of_a_list_are_disjoint_and_cover_it(
            paths in proptest::collection::vec("[a-z/._-]{1,24}", 0..60),
            count in 1u64..20,
        ) {
            for path in &paths {
                let owners: Vec<u64> = (0..count)
                    .filter(|&index| Shard { index, count }.keeps(path))
                    .collect();
                prop_assert_eq!(owners.len(), 1, "{} is in shares {:?}", path, owners);
            }
        }
    }

    #[test]
    fn shares_are_even_enough_to_split_work() {
        let count = 8;
        let mut sizes = [0u32; 8];
        for i in 0..8000 {
            sizes[share(&format!("/landing/part-{i:05}.csv"), count) as usize] += 1;
        }
        assert!(sizes.iter().all(|&n| (800..1200).contains(&n)), "{sizes:?}");
    }
}
