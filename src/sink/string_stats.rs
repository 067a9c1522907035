//! The minimum and maximum of a string column chunk, for its Parquet statistics.
//!
//! parquet-rs finds them with two `memcmp` calls per value (`compute_min_max`), a tenth
//! of a Parquet load's CPU on the benchmark's short strings. Here each value is first
//! compared by a [`Key`], one 128-bit integer: its first 15 bytes and its length. A
//! batch of values is first reduced to its least and greatest key (two integer
//! comparisons per value, no call); the values' bytes are looked at only where such a
//! key can move a bound, and compared only when keys tie and both values are longer
//! than 15 bytes.
//!
//! The bounds are written the way parquet-rs writes its own (`truncate_min_value`,
//! `truncate_max_value`): cut to [`TRUNCATE`] bytes on a character boundary, the
//! maximum's last character then incremented so that it still bounds from above, and
//! marked inexact when cut.

use std::ops::Range;

use arrow_array::{Array, StringArray};
use parquet::data_type::ByteArray;
use parquet::file::statistics::{Statistics, ValueStatistics};

/// Bytes of a value in its key.
const PREFIX: usize = 15;
/// Longest bound written, as parquet-rs's default `statistics_truncate_length`.
pub(crate) const TRUNCATE: usize = 64;

/// A value's place in byte order, as far as its first [`PREFIX`] bytes tell: those
/// bytes big-endian, zero-padded, then one byte of length, capped at `PREFIX + 1`.
///
/// Keys compare as their values do whenever they differ: bytes that differ decide at the
/// first difference (a zero of padding only ever meets a real byte of a longer value
/// that starts with the shorter one, and the shorter sorts first); equal bytes with
/// different lengths mean one value starts the other, and the shorter sorts first. Equal
/// keys mean equal values unless both values are longer than [`PREFIX`] bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) struct Key(u128);

/// `KEEP[n]`: the first `n` bytes of a big-endian `u128` (a table, not a shift by a
/// variable amount, which on a `u128` is a handful of instructions per value).
const KEEP: [u128; PREFIX + 1] = {
    let mut keep = [0u128; PREFIX + 1];
    let mut n = 1;
    while n <= PREFIX {
        keep[n] = !(u128::MAX >> (8 * n));
        n += 1;
    }
    keep
};

impl Key {
    /// Above every value's key.
    const ABOVE: Key = Key(u128::MAX);
    /// The empty value's key, below every other.
    const EMPTY: Key = Key(0);

    /// The key of the value at `start..end` of `data`.
    #[inline(always)]
    pub(crate) fn of(data: &[u8], start: usize, end: usize) -> Key {
        let len = end - start;
        let mut bytes = [0u8; 16];
        match data.get(start..start + 16) {
            // The value's bytes and whatever follows them, masked off below.
            Some(block) => bytes.copy_from_slice(block),
            None => {
                let own = len.min(16);
                bytes[..own].copy_from_slice(&data[start..start + own]);
            }
        }
        let kept = u128::from_be_bytes(bytes) & KEEP[len.min(PREFIX)];
        Key(kept | len.min(PREFIX + 1) as u128)
    }

    /// Whether equal keys can hide different values.
    #[inline(always)]
    fn is_partial(self) -> bool {
        (self.0 & 0xff) as usize > PREFIX
    }

    /// Whether `value`, of this key, sorts before `other`, of key `theirs`.
    #[inline(always)]
    fn before(self, value: &[u8], theirs: Key, other: &[u8]) -> bool {
        self < theirs || (self == theirs && self.is_partial() && value < other)
    }
}

/// Which of a column's values so far are the least and the greatest, by their index in
/// the column the caller gathers: nothing is copied until [`Extremes::bounds`].
///
/// Values are taken in a run at a time ([`Extremes::scan`]): the run's least and
/// greatest key first, then, only if one of them can move a bound, the value it belongs
/// to. Only values tying by key with a bound, both longer than [`PREFIX`] bytes, have
/// their bytes compared.
#[derive(Clone, Copy)]
pub(crate) struct Extremes {
    min: Key,
    max: Key,
    min_at: usize,
    max_at: usize,
}

impl Default for Extremes {
    /// The least above every value; the greatest the empty value at index 0, which is
    /// what it stays only if every value is empty (or null: then no value is taken in,
    /// and no bounds are made).
    fn default() -> Extremes {
        Extremes {
            min: Key::ABOVE,
            max: Key::EMPTY,
            min_at: 0,
            max_at: 0,
        }
    }
}

impl Extremes {
    /// Takes in values `values` of a column of `bytes` cut at `offsets` (value `i` is
    /// `bytes[offsets[i]..offsets[i + 1]]`), but those `is_null` says are null.
    ///
    /// In two passes. The first finds only the least and the greatest key among the
    /// values: four words of state, which stay in registers (kept with the values'
    /// indices, the loop spilled half of them around every value; `valgrind
    /// --tool=callgrind`: about 90 instructions per value). Only when a key found could
    /// move a bound does a second pass look for the value it belongs to: from the start
    /// for the least, from the end for the greatest (where an increasing id's is). Once
    /// a column's bounds have settled, most batches need no second pass.
    #[inline]
    pub(crate) fn scan(
        &mut self,
        bytes: &[u8],
        offsets: &[i32],
        values: Range<usize>,
        is_null: impl Fn(usize) -> bool,
    ) {
        let Some(ends) = offsets.get(values.start..values.end.saturating_add(1)) else {
            return;
        };
        let key = |ends: &[i32]| Key::of(bytes, ends[0] as usize, ends[1] as usize);
        let (mut least, mut greatest) = (Key::ABOVE, Key::EMPTY);
        for (at, ends) in (values.start..).zip(ends.windows(2)) {
            if is_null(at) {
                continue;
            }
            let key = key(ends);
            least = least.min(key);
            greatest = greatest.max(key);
        }
        if least == Key::ABOVE {
            return;
        }
        // A key equal to a bound's moves it only if the two values' bytes can differ.
        let moves = |found: Key, bound: Key| found != bound || found.is_partial();
        let value = |i| value(bytes, offsets, i);
        let candidates = values.clone().zip(ends.windows(2));
        if least <= self.min && moves(least, self.min) {
            for (at, ends) in candidates.clone() {
                if is_null(at) || key(ends) != least {
                    continue;
                }
                if least.before(value(at), self.min, value(self.min_at)) {
                    (self.min, self.min_at) = (least, at);
                }
                if !least.is_partial() {
                    break;
                }
            }
        }
        if greatest >= self.max && moves(greatest, self.max) {
            for (at, ends) in candidates.rev() {
                if is_null(at) || key(ends) != greatest {
                    continue;
                }
                if self.max.before(value(self.max_at), greatest, value(at)) {
                    (self.max, self.max_at) = (greatest, at);
                }
                if !greatest.is_partial() {
                    break;
                }
            }
        }
    }

    /// The bounds of the values taken in (none if none was), `value(i)` being value
    /// `i`, with `nulls` nulls.
    pub(crate) fn bounds<'a>(&self, value: impl Fn(usize) -> &'a [u8], nulls: u64) -> MinMax {
        let taken = self.min != Key::ABOVE;
        let bound = |key: Key, at: usize| Bound::new(key, value(at));
        MinMax {
            bounds: taken.then(|| (bound(self.min, self.min_at), bound(self.max, self.max_at))),
            nulls,
        }
    }
}

/// Value `i` of a column of `bytes` cut at `offsets` (empty if an offset is out of
/// place, as one that wrapped past 2 GiB, which the column then refuses).
pub(crate) fn value<'a>(bytes: &'a [u8], offsets: &[i32], i: usize) -> &'a [u8] {
    let at = |i: usize| offsets.get(i).map_or(0, |&o| o as usize);
    bytes.get(at(i)..at(i + 1)).unwrap_or_default()
}

/// A bound found so far, with its key.
struct Bound {
    key: Key,
    value: Vec<u8>,
}

impl Bound {
    fn new(key: Key, value: &[u8]) -> Bound {
        Bound {
            key,
            value: value.to_vec(),
        }
    }

    fn set(&mut self, key: Key, value: &[u8]) {
        self.key = key;
        self.value.clear();
        self.value.extend_from_slice(value);
    }
}

/// The minimum, maximum and null count of the string values seen.
#[derive(Default)]
pub(crate) struct MinMax {
    bounds: Option<(Bound, Bound)>,
    nulls: u64,
}

impl MinMax {
    /// Takes in every value of `array`.
    pub(crate) fn observe(&mut self, array: &StringArray) {
        self.nulls += array.null_count() as u64;
        let offsets = array.value_offsets();
        let data = array.value_data();
        let nulls = array.nulls().filter(|n| n.null_count() > 0);
        for (i, ends) in offsets.windows(2).enumerate() {
            if nulls.is_some_and(|n| n.is_null(i)) {
                continue;
            }
            let (start, end) = (ends[0] as usize, ends[1] as usize);
            self.take_keyed(Key::of(data, start, end), &data[start..end]);
        }
    }

    fn take_keyed(&mut self, key: Key, value: &[u8]) {
        // A bound is copied out each time it moves: this path is for the rare batch
        // split between row groups, and for merging gathered bounds.
        let Some((min, max)) = &mut self.bounds else {
            self.bounds = Some((Bound::new(key, value), Bound::new(key, value)));
            return;
        };
        if key.before(value, min.key, &min.value) {
            min.set(key, value);
        }
        if max.key.before(&max.value, key, value) {
            max.set(key, value);
        }
    }

    /// Takes in what `other` took in.
    pub(crate) fn merge(&mut self, other: &MinMax) {
        self.nulls += other.nulls;
        if let Some((min, max)) = &other.bounds {
            self.take_keyed(min.key, &min.value);
            self.take_keyed(max.key, &max.value);
        }
    }

    /// The values' minimum and maximum, untruncated (`None` when every value was null).
    #[cfg(test)]
    fn bounds(&self) -> Option<(&[u8], &[u8])> {
        self.bounds
            .as_ref()
            .map(|(min, max)| (&min.value[..], &max.value[..]))
    }

    /// The bounds and the null count, to compare.
    #[cfg(test)]
    pub(crate) fn summary(&self) -> (Option<[Vec<u8>; 2]>, u64) {
        let bounds = self.bounds().map(|(min, max)| [min.to_vec(), max.to_vec()]);
        (bounds, self.nulls)
    }

    /// Parquet statistics of the values seen: null count, and the bounds cut to
    /// [`TRUNCATE`] bytes as parquet-rs cuts them.
    pub(crate) fn statistics(&self) -> Statistics {
        let (min, max) = match &self.bounds {
            Some((min, max)) => (Some(lower(&min.value)), Some(upper(&max.value))),
            None => (None, None),
        };
        let exact = |b: &Option<(Vec<u8>, bool)>| b.as_ref().is_some_and(|b| b.1);
        let (min_exact, max_exact) = (exact(&min), exact(&max));
        let stats = ValueStatistics::new(
            min.map(|b| ByteArray::from(b.0)),
            max.map(|b| ByteArray::from(b.0)),
            None,
            Some(self.nulls),
            false,
        )
        .with_min_is_exact(min_exact)
        .with_max_is_exact(max_exact);
        Statistics::ByteArray(stats)
    }
}

/// A lower bound of `value` at most [`TRUNCATE`] bytes long, and whether it is `value`.
fn lower(value: &[u8]) -> (Vec<u8>, bool) {
    if value.len() <= TRUNCATE {
        return (value.to_vec(), true);
    }
    let cut = match std::str::from_utf8(value) {
        Ok(text) => (1..=TRUNCATE).rev().find(|&i| text.is_char_boundary(i)),
        Err(_) => Some(TRUNCATE),
    };
    match cut {
        Some(cut) => (value[..cut].to_vec(), false),
        None => (value.to_vec(), true),
    }
}

/// An upper bound of `value` at most [`TRUNCATE`] bytes long, and whether it is `value`:
/// cut, then its last character (its last byte, if `value` is not UTF-8) incremented.
fn upper(value: &[u8]) -> (Vec<u8>, bool) {
    if value.len() <= TRUNCATE {
        return (value.to_vec(), true);
    }
    let bound = match std::str::from_utf8(value) {
        Ok(text) => (TRUNCATE.saturating_sub(3)..=TRUNCATE)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .and_then(|cut| increment_utf8(&text[..cut])),
        Err(_) => increment(value[..TRUNCATE].to_vec()),
    };
    match bound {
        Some(bound) => (bound, false),
        None => (value.to_vec(), true),
    }
}

/// `text` with its last character that can be incremented without growing in UTF-8
/// incremented, and what followed it dropped.
fn increment_utf8(text: &str) -> Option<Vec<u8>> {
    text.char_indices().rev().find_map(|(at, c)| {
        let next = char::from_u32(c as u32 + 1).filter(|n| n.len_utf8() == c.len_utf8())?;
        let mut bound = text.as_bytes()[..at + c.len_utf8()].to_vec();
        next.encode_utf8(&mut bound[at..]);
        Some(bound)
    })
}

/// `bytes` incremented as a big-endian number with its trailing 0xff bytes dropped.
fn increment(mut bytes: Vec<u8>) -> Option<Vec<u8>> {
    while let Some(last) = bytes.pop() {
        if last < u8::MAX {
            bytes.push(last + 1);
            return Some(bytes);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn observed(batches: &[Vec<Option<Vec<u8>>>]) -> MinMax {
        let mut stats = MinMax::default();
        for batch in batches {
            // Bytes, not text: the order is the bytes' order either way.
            let strings: Vec<Option<String>> = batch
                .iter()
                .map(|v| v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()))
                .collect();
            stats.observe(&StringArray::from(strings));
        }
        stats
    }

    fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
        // A start shorter than, as long as, or past a key's bytes (two of them alike in
        // their first PREFIX bytes), then a few bytes of three: values tie on their keys
        // often, and so must be told apart by their bytes.
        let start = prop_oneof![
            Just(Vec::new()),
            Just(b"0123456789abcd".to_vec()),
            Just(b"0123456789abcde".to_vec()),
            Just(b"0123456789abcdeX".to_vec()),
            Just(b"0123456789abcdeY".to_vec()),
        ];
        let rest = proptest::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(b'b')], 0..6);
        proptest::option::weighted(
            0.9,
            (start, rest).prop_map(|(mut start, rest)| {
                start.extend(rest);
                start
            }),
        )
    }

    proptest! {
        #[test]
        fn bounds_are_the_least_and_greatest_values(
            batches in proptest::collection::vec(proptest::collection::vec(value(), 0..30), 1..4),
            offset in 0usize..5,
        ) {
            let stats = observed(&batches);
            let values: Vec<&Vec<u8>> = batches.iter().flatten().flatten().collect();
            let expected = values.iter().min().map(|min| (&min[..], &values.iter().max().unwrap_or(min)[..]));
            prop_assert_eq!(stats.bounds(), expected);
            let nulls = batches.iter().flatten().filter(|v| v.is_none()).count() as u64;
            prop_assert_eq!(stats.nulls, nulls);

            // A sliced array (offsets not starting at 0, data before and after it).
            let all: Vec<Option<String>> = batches.iter().flatten()
                .map(|v| v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()))
                .collect();
            let array = StringArray::from(all);
            let offset = offset.min(array.len());
            let slice = array.slice(offset, array.len() - offset);
            let mut sliced = MinMax::default();
            sliced.observe(&slice);
            let rest: Vec<&[u8]> = slice.iter().flatten().map(str::as_bytes).collect();
            let expected = rest.iter().min().map(|min| (*min, *rest.iter().max().unwrap_or(min)));
            prop_assert_eq!(sliced.bounds(), expected);
        }

        /// Extremes over values laid end to end (as `Strings` holds them, the buffer
        /// going on past each value), taken in over consecutive runs of values as a
        /// column grows, nulls skipped, find the least and greatest; merging the bounds
        /// of two halves gives those of the whole.
        #[test]
        fn extremes_find_the_least_and_greatest_values(
            values in proptest::collection::vec(value(), 0..40),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..4),
            half in any::<proptest::sample::Index>(),
        ) {
            let mut bytes = Vec::new();
            let mut offsets = vec![0i32];
            for v in &values {
                bytes.extend_from_slice(v.as_deref().unwrap_or_default());
                offsets.push(bytes.len() as i32);
            }
            let value = |i: usize| &bytes[offsets[i] as usize..offsets[i + 1] as usize];
            let is_null = |i: usize| values[i].is_none();
            let cut = |at: &proptest::sample::Index| at.index(values.len() + 1);
            let extremes = |range: Range<usize>| {
                let mut cuts: Vec<usize> = cuts.iter().map(cut).filter(|c| range.contains(c)).collect();
                cuts.sort_unstable();
                let mut extremes = Extremes::default();
                let mut start = range.start;
                for end in cuts.into_iter().chain([range.end]) {
                    extremes.scan(&bytes, &offsets, start..end, is_null);
                    start = end;
                }
                extremes
            };
            let present: Vec<&Vec<u8>> = values.iter().flatten().collect();
            let expected = present.iter().min().map(|min| [min.to_vec(), present.iter().max().unwrap_or(min).to_vec()]);
            let whole = extremes(0..values.len()).bounds(value, 3);
            prop_assert_eq!(whole.summary(), (expected.clone(), 3));

            let half = cut(&half);
            let mut merged = extremes(0..half).bounds(value, 1);
            merged.merge(&extremes(half..values.len()).bounds(value, 2));
            prop_assert_eq!(merged.summary(), (expected, 3));
        }
    }

    #[test]
    fn keys_order_values_that_start_alike() {
        let key = |v: &[u8]| Key::of(v, 0, v.len());
        assert!(key(b"ab") < key(b"ab\0"));
        assert!(key(b"") < key(b"\0"));
        assert!(key(b"abc") < key(b"abd"));
        assert!(key(b"0123456789abcde") < key(b"0123456789abcde\0"));
        assert!(key(b"0123456789abcde") < key(b"0123456789abcde0X"));
        assert!(key(b"0123456789abcdX") < key(b"0123456789abcdY"));
        assert_eq!(key(b"0123456789abcdeX"), key(b"0123456789abcdeY"));
        assert!(key(b"0123456789abcdeX").is_partial());
        assert!(!key(b"0123456789abcde").is_partial());
        assert!(
            key(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
                < Key::ABOVE
        );
        assert_eq!(key(b""), Key::EMPTY);
        // Bytes after the value in the same buffer are not part of it.
        assert_eq!(Key::of(b"abXXXXXXXXXXXXXXXXXX", 0, 2), key(b"ab"));
    }

    #[test]
    fn short_bounds_are_written_whole_and_exact() {
        let mut stats = MinMax::default();
        stats.observe(&StringArray::from(vec![
            Some("b"),
            None,
            Some("a"),
            Some("c"),
        ]));
        let Statistics::ByteArray(s) = stats.statistics() else {
            panic!("not byte array statistics")
        };
        assert_eq!(s.min_opt().map(|b| b.data()), Some(&b"a"[..]));
        assert_eq!(s.max_opt().map(|b| b.data()), Some(&b"c"[..]));
        assert_eq!(s.null_count_opt(), Some(1));
        assert!(s.min_is_exact() && s.max_is_exact());
    }

    #[test]
    fn an_all_null_chunk_has_no_bounds() {
        let mut stats = MinMax::default();
        stats.observe(&StringArray::from(vec![None::<&str>, None]));
        let Statistics::ByteArray(s) = stats.statistics() else {
            panic!("not byte array statistics")
        };
        assert_eq!((s.min_opt(), s.max_opt()), (None, None));
        assert_eq!(s.null_count_opt(), Some(2));
    }

    #[test]
    fn long_bounds_are_cut_as_parquet_rs_cuts_them() {
        let long = "x".repeat(TRUNCATE + 10);
        assert_eq!(
            lower(long.as_bytes()),
            ("x".repeat(TRUNCATE).into_bytes(), false)
        );
        let mut up = "x".repeat(TRUNCATE - 1).into_bytes();
        up.push(b'y');
        assert_eq!(upper(long.as_bytes()), (up, false));
        // Cut on a character boundary: "é" is two bytes, straddling byte 64.
        let accented = format!("{}é{}", "a".repeat(TRUNCATE - 1), "z".repeat(5));
        assert_eq!(
            lower(accented.as_bytes()).0,
            "a".repeat(TRUNCATE - 1).into_bytes()
        );
        let (bound, exact) = upper(accented.as_bytes());
        assert!(!exact && bound.len() <= TRUNCATE);
        assert!(bound.as_slice() > accented.as_bytes());
        assert!(std::str::from_utf8(&bound).is_ok());
        // Nothing can be incremented: the value is kept whole.
        let top = "\u{10FFFF}".repeat(TRUNCATE);
        assert_eq!(upper(top.as_bytes()), (top.clone().into_bytes(), true));
        // Exactly the limit: untouched.
        let edge = "q".repeat(TRUNCATE);
        assert_eq!(upper(edge.as_bytes()), (edge.clone().into_bytes(), true));
        assert_eq!(increment(vec![1, 0xff]), Some(vec![2]));
        assert_eq!(increment(vec![0xff]), None);
    }

    #[test]
    fn bounds_match_what_parquet_rs_would_write() {
        // The same values through parquet-rs's own statistics and through MinMax.
        use arrow_array::RecordBatch;
        use arrow_schema::{DataType, Field, Schema};
        use parquet::arrow::ArrowWriter;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use std::sync::Arc;

        let long = format!("{}é{}", "m".repeat(TRUNCATE - 1), "z".repeat(9));
        let values = vec![
            Some("kiwi"),
            None,
            Some(long.as_str()),
            Some("apple"),
            Some("zz"),
        ];
        let array = StringArray::from(values);
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(array.clone())]).expect("a batch");
        let file = tempfile::tempfile().expect("a temporary file");
        let mut writer = ArrowWriter::try_new(file, schema, None).expect("a writer");
        writer.write(&batch).expect("written");
        let file = writer.into_inner().expect("closed");
        let reader = SerializedFileReader::new(file).expect("a reader");
        let theirs = reader
            .metadata()
            .row_group(0)
            .column(0)
            .statistics()
            .cloned();

        let mut ours = MinMax::default();
        ours.observe(&array);
        assert_eq!(Some(ours.statistics()), theirs);
    }
}
