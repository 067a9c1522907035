//! The content hash of an input's decoded bytes, and what a checkpoint's position records
//! of it.
//!
//! A file is hashed whole (xxh3-128): resuming it reads its prefix again (a local read,
//! or a decompression that must start at the first byte anyway) and proves by the
//! prefix's hash that it is unchanged.
//!
//! An uncompressed object in a bucket is hashed in 4 MiB blocks, chained: after each
//! block the chain becomes `xxh3_128(chain ‖ xxh3_128(block))`, and the hash is
//! `xxh3_128(chain ‖ xxh3_128(partial block) ‖ its length)`. A position records the chain
//! at its last block boundary and the digest of the bytes since, so a resume fetches the
//! object from that boundary with a ranged GET (less than a block again, not the whole
//! prefix), rebuilds the hash from the chain, and still proves the bytes it re-reads
//! unchanged; the bytes before the boundary are the same because the GET is conditional
//! on the object's ETag. Both kinds are functions of the content alone, so copies of one
//! object under other keys are still recognised; a local file and an object are hashed
//! differently and are not recognised as copies of each other.

use anyhow::{Context, Result};
use xxhash_rust::xxh3::{xxh3_128, Xxh3};

/// Bytes per block of a chained hash.
pub(crate) const BLOCK: u64 = 4 << 20;

/// How a chained hash's position is spelled: `blocks:CHAIN:PARTIAL`, 32 hex digits each.
const BLOCKS_TAG: &str = "blocks:";

/// The running content hash of one input.
#[derive(Clone)]
pub(crate) enum ContentHash {
    Whole(Xxh3),
    Blocks {
        /// The chain over every whole block so far.
        chain: u128,
        /// The bytes since the last block boundary.
        block: Xxh3,
        in_block: u64,
    },
}

impl ContentHash {
    /// The hash `path` gets: chained for an uncompressed object, whole otherwise.
    pub(crate) fn for_input(path: &str) -> ContentHash {
        let object = crate::core::url::is_url_path(std::path::Path::new(path));
        if object && !super::names::is_compressed(path) {
            ContentHash::chained(0)
        } else {
            ContentHash::Whole(Xxh3::new())
        }
    }

    fn chained(chain: u128) -> ContentHash {
        ContentHash::Blocks {
            chain,
            block: Xxh3::new(),
            in_block: 0,
        }
    }

    /// True for a chained hash, which a resume can rebuild from a block boundary.
    pub(crate) fn is_chained(&self) -> bool {
        matches!(self, ContentHash::Blocks { .. })
    }

    pub(crate) fn update(&mut self, mut bytes: &[u8]) {
        match self {
            ContentHash::Whole(hasher) => hasher.update(bytes),
            ContentHash::Blocks {
                chain,
                block,
                in_block,
            } => {
                while !bytes.is_empty() {
                    let take = ((BLOCK - *in_block) as usize).min(bytes.len());
                    block.update(&bytes[..take]);
                    *in_block += take as u64;
                    bytes = &bytes[take..];
                    if *in_block == BLOCK {
                        *chain = link(*chain, block.digest128());
                        block.reset();
                        *in_block = 0;
                    }
                }
            }
        }
    }

    /// The hash of every byte so far: the input's hash once it is read to the end.
    pub(crate) fn digest128(&self) -> u128 {
        match self {
            ContentHash::Whole(hasher) => hasher.digest128(),
            ContentHash::Blocks {
                chain,
                block,
                in_block,
            } => {
                let mut last = [0u8; 40];
                last[..16].copy_from_slice(&chain.to_le_bytes());
                last[16..32].copy_from_slice(&block.digest128().to_le_bytes());
                last[32..].copy_from_slice(&in_block.to_le_bytes());
                xxh3_128(&last)
            }
        }
    }

    /// What a position records of the bytes before it (a whole hash: its hex digits, as
    /// journals have always held).
    pub(crate) fn position(&self) -> String {
        match self {
            ContentHash::Whole(_) => crate::core::hash::hash_hex(self.digest128()),
            ContentHash::Blocks { chain, block, .. } => {
                format!("{BLOCKS_TAG}{chain:032x}:{:032x}", block.digest128())
            }
        }
    }

    /// For a position recorded by a chained hash at `offset`: the block boundary to read
    /// again from, and the hash as it stood there. `None` for a whole hash's position.
    pub(crate) fn resume(recorded: &str, offset: u64) -> Result<Option<(u64, ContentHash)>> {
        let Some(rest) = recorded.strip_prefix(BLOCKS_TAG) else {
            return Ok(None);
        };
        let chain = rest
            .split_once(':')
            .and_then(|(chain, _)| u128::from_str_radix(chain, 16).ok())
            .with_context(|| format!("bad hash {recorded:?} in the journal"))?;
        Ok(Some((offset - offset % BLOCK, ContentHash::chained(chain))))
    }
}

fn link(chain: u128, block: u128) -> u128 {
    let mut both = [0u8; 32];
    both[..16].copy_from_slice(&chain.to_le_bytes());
    both[16..].copy_from_slice(&block.to_le_bytes());
    xxh3_128(&both)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn chained_in(bytes: &[u8], step: usize) -> ContentHash {
        let mut hash = ContentHash::chained(0);
        for piece in bytes.chunks(step) {
            hash.update(piece);
        }
        hash
    }

    #[test]
    fn a_chained_hash_depends_on_the_bytes_not_on_how_they_arrive() {
        let bytes = data(2 * BLOCK as usize + 12345);
        let whole = chained_in(&bytes, bytes.len()).digest128();
        for step in [1 << 10, 256 * 1024, BLOCK as usize, 3 << 20, 5 << 20] {
            assert_eq!(chained_in(&bytes, step).digest128(), whole, "step {step}");
        }
        let mut other = bytes.clone();
        other[BLOCK as usize + 7] ^= 1;
        assert_ne!(chained_in(&other, 1 << 16).digest128(), whole);
        // One byte more or less, at a boundary or not, is another hash.
        for len in [BLOCK as usize - 1, BLOCK as usize, BLOCK as usize + 1] {
            let a = chained_in(&bytes[..len], 1 << 16).digest128();
            let b = chained_in(&bytes[..len + 1], 1 << 16).digest128();
            assert_ne!(a, b, "length {len}");
        }
    }

    #[test]
    fn a_resume_from_any_position_rebuilds_the_same_hash_and_position() {
        let bytes = data(3 * BLOCK as usize + 999);
        let full = chained_in(&bytes, 1 << 16).digest128();
        for offset in [
            0,
            1,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            2 * BLOCK + 77_777,
            3 * BLOCK,
            bytes.len() as u64,
        ] {
            let at = offset as usize;
            let recorded = chained_in(&bytes[..at], 1 << 16).position();
            let (start, mut hash) = ContentHash::resume(&recorded, offset).unwrap().unwrap();
            assert_eq!(start, offset - offset % BLOCK);
            hash.update(&bytes[start as usize..at]);
            assert_eq!(hash.position(), recorded, "offset {offset}");
            hash.update(&bytes[at..]);
            assert_eq!(hash.digest128(), full, "offset {offset}");
        }
    }

    #[test]
    fn a_changed_byte_after_the_boundary_changes_the_position() {
        let bytes = data(BLOCK as usize + 5000);
        let recorded = chained_in(&bytes, 1 << 16).position();
        let mut other = bytes.clone();
        other[BLOCK as usize + 10] ^= 1;
        let (start, mut hash) = ContentHash::resume(&recorded, bytes.len() as u64)
            .unwrap()
            .unwrap();
        hash.update(&other[start as usize..]);
        assert_ne!(hash.position(), recorded);
    }

    #[test]
    fn a_whole_hash_position_is_the_hex_journals_always_held() {
        let bytes = data(10_000);
        let mut hash = ContentHash::Whole(Xxh3::new());
        hash.update(&bytes);
        assert_eq!(hash.position(), format!("{:032x}", xxh3_128(&bytes)));
        assert_eq!(hash.digest128(), xxh3_128(&bytes));
        assert!(ContentHash::resume(&hash.position(), 10_000)
            .unwrap()
            .is_none());
        assert!(ContentHash::resume("blocks:zz:00", 5).is_err());
    }

    #[test]
    fn only_uncompressed_objects_get_the_chained_hash() {
        assert!(ContentHash::for_input("s3://b/k/a.csv").is_chained());
        assert!(!ContentHash::for_input("s3://b/k/a.csv.gz").is_chained());
        assert!(!ContentHash::for_input("/data/a.csv").is_chained());
    }
}
