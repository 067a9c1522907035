//! Where the special bytes of the reader's buffer are, found once per buffer.
//!
//! Splitting a record means finding its delimiters, quotes and line end. With one
//! `memchr` call per field, most of the source thread's time went to the calls
//! themselves (a third of its samples, on fields of ten bytes or so). Instead, each
//! buffer the reader fills is scanned once, 64 bytes at a time, into one bit per byte,
//! set where the byte is the delimiter, a comma, a quote, LF or CR; the record loops
//! then step from one set bit to the next (`trailing_zeros`). The comma is special
//! whatever the delimiter, because a field holding one must be quoted in CSV written
//! with `,` (the quoting mask of `quoted_records.rs`).

/// The bitmap of special bytes over one buffer.
pub(crate) struct Specials {
    /// The needles: delimiter, `,`, `"`, LF, CR (the delimiter may repeat one of them).
    needles: [u8; 5],
    /// Bit `i % 64` of word `i / 64` is set when byte `i` is special.
    words: Vec<u64>,
}

impl Specials {
    pub(crate) fn new(delimiter: u8) -> Specials {
        Specials {
            needles: [delimiter, b',', b'"', b'\n', b'\r'],
            words: Vec::new(),
        }
    }

    /// Indexes `buf`, forgetting the last buffer; bytes past its end are not special.
    pub(crate) fn index(&mut self, buf: &[u8]) {
        self.words.clear();
        let blocks = buf.chunks_exact(64);
        let tail = blocks.remainder();
        let needles = &self.needles;
        self.words
            .extend(blocks.map(|block| block_mask(block, needles)));
        if !tail.is_empty() {
            let mut block = [0; 64];
            block[..tail.len()].copy_from_slice(tail);
            let real = u64::MAX >> (64 - tail.len());
            self.words.push(block_mask(&block, &self.needles) & real);
        }
    }

    /// The first special byte at or after `from`, if the buffer holds one.
    #[inline]
    pub(crate) fn next(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.words.get(word)? & (u64::MAX << (from % 64));
        while bits == 0 {
            word += 1;
            bits = *self.words.get(word)?;
        }
        Some(word * 64 + bits.trailing_zeros() as usize)
    }
}

/// The special bytes of a block of 64 bytes, byte `i` as bit `i`: 16 bytes at a time,
/// compared with each needle at once (SSE2).
#[cfg(target_arch = "x86_64")]
fn block_mask(block: &[u8], needles: &[u8; 5]) -> u64 {
    debug_assert_eq!(block.len(), 64);
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let mut mask = 0;
    // SAFETY: SSE2 is part of x86_64 itself, so every x86_64 CPU has these
    // instructions; each load reads 16 bytes inside `block`, unaligned loads allowed.
    unsafe {
        let [a, b, c, d, e] = needles.map(|n| _mm_set1_epi8(n as i8));
        for (i, lane) in block.chunks_exact(16).enumerate() {
            let bytes = _mm_loadu_si128(lane.as_ptr().cast::<__m128i>());
            let hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(bytes, a), _mm_cmpeq_epi8(bytes, b)),
                _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(bytes, c), _mm_cmpeq_epi8(bytes, d)),
                    _mm_cmpeq_epi8(bytes, e),
                ),
            );
            mask |= u64::from(_mm_movemask_epi8(hit) as u16) << (16 * i);
        }
    }
    mask
}

#[cfg(not(target_arch = "x86_64"))]
fn block_mask(block: &[u8], needles: &[u8; 5]) -> u64 {
    debug_assert_eq!(block.len(), 64);
    portable_mask(block, needles)
}

/// [`block_mask`] one byte at a time: the reference the vector code is tested against,
/// and the code elsewhere.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn portable_mask(block: &[u8], needles: &[u8; 5]) -> u64 {
    block
        .iter()
        .enumerate()
        .filter(|(_, b)| needles.contains(b))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(buf: &[u8], delimiter: u8, from: usize) -> Option<usize> {
        let special = [delimiter, b',', b'"', b'\n', b'\r'];
        (from..buf.len()).find(|&i| special.contains(&buf[i]))
    }

    proptest! {
        /// From any position, the next special byte is the first one a byte-by-byte
        /// search finds, whatever the buffer's length (a last block cut short, bytes of
        /// zero that are not past its end).
        #[test]
        fn next_is_the_first_special_byte_at_or_after(
            buf in prop::collection::vec(
                prop::sample::select(b"ab;,\"\n\r\t\0\xff".to_vec()), 0..300),
            delimiter in prop::sample::select(vec![b',', b';', b'\t', b'\0']),
            from in 0usize..310,
        ) {
            let mut specials = Specials::new(delimiter);
            specials.index(&buf);
            prop_assert_eq!(specials.next(from), naive(&buf, delimiter, from));
        }

        /// The vector code marks exactly the bytes the portable code marks.
        #[test]
        fn the_block_masks_agree(
            block in prop::array::uniform32(any::<u8>()),
            more in prop::array::uniform32(prop::sample::select(b",;\"\n\rx".to_vec())),
            delimiter in any::<u8>(),
        ) {
            let mut whole = [0u8; 64];
            whole[..32].copy_from_slice(&block);
            whole[32..].copy_from_slice(&more);
            let needles = [delimiter, b',', b'"', b'\n', b'\r'];
            prop_assert_eq!(block_mask(&whole, &needles), portable_mask(&whole, &needles));
        }
    }

    #[test]
    fn a_new_buffer_replaces_the_last() {
        let mut specials = Specials::new(b',');
        specials.index(&[b'x'; 200]);
        assert_eq!(specials.next(0), None);
        specials.index(b"ab\"");
        assert_eq!(specials.next(0), Some(2));
        assert_eq!(specials.next(3), None);
        assert_eq!(specials.next(64), None);
    }
}
