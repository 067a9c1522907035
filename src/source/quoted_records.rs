//! Records with quoted fields, split without the parser when they are well formed.
//!
//! `csv_core` steps through a record byte by byte; on the benchmark's orders, where
//! about half the records quote a field (names with commas, notes with line ends), it
//! was the largest item of a load's profile once unquoted records had their own path
//! (`InputReader::read_unquoted`). A record whose quoting is well formed has only one
//! reading, so it can be split by stepping from one special byte to the next (the
//! buffer's bitmap of them, `specials.rs`):
//! an unquoted field runs to the next delimiter or line end; a quoted one to its closing
//! quote, a doubled quote inside it standing for one quote.
//!
//! Anything else is left to the parser, having consumed nothing: a record that does not
//! end in the buffer, a quote inside an unquoted field, text after a closing quote, a
//! bare CR. There `csv_core`'s lenient rules and the strict quoting check
//! (`quotes.rs`) decide, exactly as before.

use super::specials::Specials;

/// A record [`split`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Split {
    /// Bytes of the record with its line end (LF or CRLF).
    pub(crate) consumed: usize,
    /// Its fields (their ends are the first `nfields` of `ends`).
    pub(crate) nfields: usize,
    /// Line feeds inside its quoted fields.
    pub(crate) inner_lines: u64,
    /// Which fields need quoting in CSV written with `,` (they hold a `,`, a quote or a
    /// line end), field `i` as bit `i`; `None` past 64 fields.
    pub(crate) quoting: Option<u64>,
    /// It has a quoted field.
    pub(crate) quoted: bool,
}

/// Splits the record at `start` of `input` into `fields` (unescaped, each followed by
/// one `,`, so that the record is copied into a batch in one piece) and `ends` (each
/// field's end in `fields` as if the commas were not there, which is where `csv_core`
/// puts it), as `csv_core` would with `delimiter` and its defaults (quote `"`, doubled
/// to escape). `specials` indexes `input` (`specials.rs`) for `delimiter`. `None` when
/// the record is not one this path takes (see the module's doc); the buffers may then
/// hold anything.
///
/// The record must not start with a line end (the reader skips those before a record),
/// and `delimiter` must not be a quote or a line end.
pub(crate) fn split(
    input: &[u8],
    start: usize,
    delimiter: u8,
    specials: &Specials,
    fields: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Option<Split> {
    debug_assert!(!matches!(delimiter, b'"' | b'\n' | b'\r'));
    let mut out = Fields {
        fields,
        ends,
        len: 0,
        n: 0,
        run: start..start,
    };
    let mut inner_lines = 0;
    let mut quoting = 0u64;
    let mut quoted = false;
    let mut at = start;
    loop {
        // One field, starting at `at`; then the byte that ends it, at `at`.
        let needs_quotes = if input.get(at) == Some(&b'"') {
            quoted = true;
            at += 1;
            let mut special = false;
            // Up to the closing quote: a quote that is not doubled.
            loop {
                let mut next = specials.next(at)?;
                loop {
                    match input[next] {
                        b'"' => break,
                        b'\n' => {
                            inner_lines += 1;
                            special = true;
                        }
                        b',' | b'\r' => special = true,
                        _ => {} // the delimiter, when it is not a comma: text here
                    }
                    next = specials.next(next + 1)?;
                }
                // A doubled quote: the first of the two is the one quote it stands for.
                let doubled = input.get(next + 1) == Some(&b'"');
                out.take(input, at..next + usize::from(doubled));
                at = next + 1;
                if !doubled {
                    break;
                }
                special = true;
                at += 1;
            }
            special
        } else {
            // Up to the delimiter or line end; a comma inside needs quoting.
            let mut comma = false;
            let mut next = specials.next(at)?;
            loop {
                match input[next] {
                    b'"' => return None, // a quote inside an unquoted field
                    b',' if delimiter != b',' => comma = true,
                    _ => break,
                }
                next = specials.next(next + 1)?;
            }
            out.take(input, at..next);
            at = next;
            comma
        };
        if needs_quotes && out.n < 64 {
            quoting |= 1 << out.n;
        }
        out.end_field();
        match input.get(at) {
            // The comma that ends the field is the one stored after it.
            Some(b',') if delimiter == b',' => out.take(input, at..at + 1),
            Some(&b) if b == delimiter || b == b'\n' => out.push(input, b","),
            Some(b'\r') if input.get(at + 1) == Some(&b'\n') => {
                out.push(input, b",");
                at += 1;
            }
            // Text after a closing quote, a bare CR, or the end of the buffer.
            _ => return None,
        }
        at += 1;
        if input[at - 1] == b'\n' {
            out.flush(input);
            return Some(Split {
                consumed: at - start,
                nfields: out.n,
                inner_lines,
                quoting: (out.n <= 64).then_some(quoting),
                quoted,
            });
        }
    }
}

/// The output buffers, grown as needed. Bytes that follow each other in the input and
/// in `fields` alike (unquoted fields with the commas between them, a quoted field's
/// text) are copied as one run: about four copies for a record of eleven fields with a
/// quoted one, not twenty-two (the source thread's largest item was `memcpy`, called
/// for each field and each comma).
struct Fields<'a> {
    fields: &'a mut Vec<u8>,
    ends: &'a mut Vec<usize>,
    /// Bytes in `fields`, commas and `run` included.
    len: usize,
    /// Fields ended.
    n: usize,
    /// The input bytes that end `fields`, not copied yet.
    run: std::ops::Range<usize>,
}

impl Fields<'_> {
    /// Appends `input[range]`.
    fn take(&mut self, input: &[u8], range: std::ops::Range<usize>) {
        if range.start != self.run.end {
            self.flush(input);
            self.run = range.start..range.start;
        }
        self.len += range.len();
        self.run.end = range.end;
    }

    /// Appends `bytes`, which are not in the input.
    fn push(&mut self, input: &[u8], bytes: &[u8]) {
        self.flush(input);
        let end = self.len + bytes.len();
        self.reserve(end);
        self.fields[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    /// Copies the run.
    fn flush(&mut self, input: &[u8]) {
        if self.run.is_empty() {
            return;
        }
        self.reserve(self.len);
        self.fields[self.len - self.run.len()..self.len].copy_from_slice(&input[self.run.clone()]);
        self.run.start = self.run.end;
    }

    fn reserve(&mut self, end: usize) {
        if end > self.fields.len() {
            self.fields.resize(end.max(self.fields.len() * 2), 0);
        }
    }

    /// Ends a field; its comma is appended next.
    fn end_field(&mut self) {
        if self.n == self.ends.len() {
            self.ends.resize((self.n * 2).max(8), 0);
        }
        self.ends[self.n] = self.len - self.n;
        self.n += 1;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use csv_core::{ReadRecordResult, ReaderBuilder};
    use proptest::prelude::*;

    fn ours(input: &[u8], delimiter: u8) -> Option<(Vec<Vec<u8>>, Split)> {
        ours_after(b"", input, delimiter)
    }

    /// The split of the record that starts after `before` in one buffer.
    fn ours_after(before: &[u8], input: &[u8], delimiter: u8) -> Option<(Vec<Vec<u8>>, Split)> {
        let buf = [before, input].concat();
        let mut specials = Specials::new(delimiter);
        specials.index(&buf);
        let (mut fields, mut ends) = (Vec::new(), Vec::new());
        let split = split(
            &buf,
            before.len(),
            delimiter,
            &specials,
            &mut fields,
            &mut ends,
        )?;
        let ends = &ends[..split.nfields];
        // Each field is followed by a comma, not counted in `ends`.
        let separated = ends.last().map_or(0, |&end| end + ends.len());
        assert!(ends
            .iter()
            .enumerate()
            .all(|(i, &end)| fields[end + i] == b','));
        Some((cut(&fields[..separated], ends, 1), split))
    }

    /// The fields ending at `ends`, each followed by `gap` bytes.
    fn cut(fields: &[u8], ends: &[usize], gap: usize) -> Vec<Vec<u8>> {
        let mut start = 0;
        ends.iter()
            .enumerate()
            .map(|(i, &end)| {
                let field = fields[start..end + i * gap].to_vec();
                start = end + (i + 1) * gap;
                field
            })
            .collect()
    }

    /// `csv_core`'s first record of `input`: its fields, the bytes it consumed (with
    /// the LF after a CR, which it skips before the next record) and the line feeds in
    /// them; `None` when it needs more input to end the record.
    fn parsers(input: &[u8], delimiter: u8) -> Option<(Vec<Vec<u8>>, usize, u64)> {
        let mut core = ReaderBuilder::new().delimiter(delimiter).build();
        let (mut fields, mut ends) = (vec![0; input.len() + 1], vec![0; input.len() + 1]);
        let (res, nin, _, nend) = core.read_record(input, &mut fields, &mut ends);
        if !matches!(res, ReadRecordResult::Record) {
            return None;
        }
        let nin = match (input.get(nin - 1), input.get(nin)) {
            (Some(b'\r'), Some(b'\n')) => nin + 1,
            _ => nin,
        };
        let lines = memchr::memchr_iter(b'\n', &input[..nin]).count() as u64;
        Some((cut(&fields, &ends[..nend], 0), nin, lines))
    }

    /// Bytes that make every kind of field: quotes, doubled quotes, delimiters, line
    /// ends of each kind, text of up to `text` characters; up to `pieces` of them.
    pub(in crate::source) fn csv_bytes(
        text: usize,
        pieces: usize,
    ) -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"\"".to_vec()),
            Just(b"\"\"".to_vec()),
            Just(b",".to_vec()),
            Just(b";".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\r".to_vec()),
            prop::string::string_regex(&format!("[a-z é]{{0,{text}}}"))
                .expect("a valid regex")
                .prop_map(String::into_bytes),
        ];
        prop::collection::vec(piece, 0..pieces).prop_map(|p| p.concat())
    }

    proptest! {
        /// Wherever the split takes a record, the parser reads the same fields from the
        /// same bytes, counting the same lines, whatever came before it in the buffer.
        #[test]
        fn a_split_record_is_the_parsers_record(
            before in csv_bytes(5, 24),
            body in csv_bytes(5, 24),
            delimiter in prop::sample::select(vec![b',', b';', b'\t']),
        ) {
            // The reader hands over records that do not start with a line end.
            let start = body.iter().take_while(|&&b| b == b'\n' || b == b'\r').count();
            let input = &body[start..];
            if let Some((fields, split)) = ours_after(&before, input, delimiter) {
                let parsed = parsers(input, delimiter);
                prop_assert!(parsed.is_some(), "the parser needs more input than the split took");
                let (expected, consumed, lines) = parsed.unwrap_or_default();
                prop_assert_eq!(&fields, &expected);
                prop_assert_eq!(split.consumed, consumed);
                prop_assert_eq!(split.inner_lines + 1, lines);
                let special = |f: &Vec<u8>| f.iter().any(|b| b",\"\n\r".contains(b));
                let quoting = fields.iter().enumerate().filter(|(_, f)| special(f));
                let quoting = quoting.fold(0u64, |mask, (i, _)| mask | 1 << i);
                prop_assert_eq!(split.quoting, Some(quoting));
                prop_assert_eq!(split.quoted, input[..consumed].contains(&b'"'));
            }
        }
    }

    fn split_of(input: &[u8]) -> Option<Vec<String>> {
        let (fields, _) = ours(input, b',')?;
        Some(
            fields
                .into_iter()
                .map(|f| String::from_utf8_lossy(&f).into())
                .collect(),
        )
    }

    #[test]
    fn well_formed_quoting_is_split() {
        let fields = split_of(b"1,\"Smith, Jo\",\"say \"\"hi\"\"\",\"two\nlines\",\r\nnext");
        assert_eq!(
            fields,
            Some(vec![
                "1".into(),
                "Smith, Jo".into(),
                "say \"hi\"".into(),
                "two\nlines".into(),
                String::new(),
            ])
        );
        // With another delimiter a comma is text, which must be quoted in CSV.
        let (fields, split) = ours(b"a,b;\"c\";d\n", b';').unwrap_or_default();
        assert_eq!(fields, [&b"a,b"[..], b"c", b"d"]);
        assert_eq!(split.quoting, Some(0b001));
        let (_, split) = ours(b"\"a\nb\nc\",d\nrest", b',').unwrap_or_default();
        assert_eq!(
            (split.consumed, split.nfields, split.inner_lines),
            (10, 2, 2)
        );
    }

    #[test]
    fn anything_the_parser_reads_leniently_is_left_to_it() {
        for input in [
            &b"5'11\",x\n"[..],    // a quote inside an unquoted field
            b"\"a\"b,c\n",         // text after a closing quote
            b"\"a\",b\rc\n",       // a bare CR ends the record
            b"\"never closes,x\n", // the record does not end in the buffer
            b"a,\"b\"",            // nor does this one
            b"a,b",
        ] {
            assert_eq!(
                split_of(input),
                None,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
