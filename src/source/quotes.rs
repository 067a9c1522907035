//! Strict quoting: the two malformations that `csv_core` accepts silently, found.
//!
//! `csv_core` never fails. An unterminated quoted field swallows every later line of the
//! input into one field, and text after a closing quote (`"a"b,c`) is glued onto the
//! field: both quietly merge or mangle rows. This check walks the bytes of each record
//! beside the parser, with the same rules (RFC 4180 plus what `csv_core` reads the same
//! way: a quote inside an unquoted field is a literal character, so `5'11"` stays
//! readable), and names the line where the offending quoted field opened. The record
//! then becomes a bad row: it fails the run, or goes to the rejects with `--max-errors`.
//!
//! Hot path: the reader knows where the next quote byte of its buffer is (one `memchr`
//! from quote to quote over the buffer), so a record before it is not looked at while no
//! quoted field is open; a record with quotes is walked from quote to quote (`memchr`,
//! and `memchr2` inside quoted fields, where line ends are counted for the messages).
//! Nothing is allocated until a record is bad.

/// Where the walk is inside the current record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a field (after a delimiter, a line end, or at the record's start).
    FieldStart,
    /// Inside an unquoted field.
    Unquoted,
    /// Inside a quoted field.
    Quoted,
    /// Just after a quote inside a quoted field: it closes the field or doubles a quote.
    QuoteInQuoted,
}

/// The quoting check of one input's records.
#[derive(Debug)]
pub(crate) struct QuoteCheck {
    quote: u8,
    delimiter: u8,
    state: State,
    /// The line the walk is on (1-based), and the one the open quoted field began on.
    line: u64,
    opened: u64,
    /// The current record held a quoted field.
    quoted: bool,
    error: Option<String>,
}

impl QuoteCheck {
    /// A check for records separated by `delimiter`, quoted with `"`.
    pub(crate) fn new(delimiter: u8) -> QuoteCheck {
        QuoteCheck {
            quote: b'"',
            delimiter,
            state: State::FieldStart,
            line: 1,
            opened: 1,
            quoted: false,
            error: None,
        }
    }

    /// A record begins on `line`.
    pub(crate) fn begin(&mut self, line: u64) {
        self.state = State::FieldStart;
        self.line = line;
        self.quoted = false;
        self.error = None;
    }

    /// Walks `bytes`, the next bytes the parser consumed of the current record;
    /// `may_quote` is false when they hold no quote byte.
    ///
    /// Jumps from quote to quote with `memchr` rather than looking at every byte: only
    /// a quote changes the state inside a quoted field, and outside one only a quote
    /// (with the byte before it) does anything that can be wrong.
    pub(crate) fn feed(&mut self, bytes: &[u8], may_quote: bool) {
        let Some(&last) = bytes.last() else {
            return;
        };
        if !may_quote && self.outside() {
            // No quote can open, close or be misplaced here: only where it ends matters,
            // and the line, which moves only over blank lines the parser skipped before
            // the record (outside quotes, any other line end ends the record).
            self.line += leading_lines(bytes);
            self.state = self.after(last);
            return;
        }
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            match self.state {
                State::FieldStart | State::Unquoted => {
                    let Some(i) = memchr::memchr(self.quote, rest) else {
                        self.state = self.after(last);
                        return;
                    };
                    let opens = match i {
                        0 => self.state == State::FieldStart,
                        _ => self.after(rest[i - 1]) == State::FieldStart,
                    };
                    // Outside quotes a line end ends the record, so lines before a quote
                    // are blank lines the parser skipped.
                    self.line += leading_lines(&rest[..i]);
                    if opens {
                        self.opened = self.line;
                        self.quoted = true;
                        self.state = State::Quoted;
                    } else {
                        // A quote inside an unquoted field is a literal character.
                        self.state = State::Unquoted;
                    }
                    at += i + 1;
                }
                State::Quoted => match memchr::memchr2(self.quote, b'\n', rest) {
                    None => return,
                    Some(i) => {
                        if rest[i] == b'\n' {
                            self.line += 1;
                        } else {
                            self.state = State::QuoteInQuoted;
                        }
                        at += i + 1;
                    }
                },
                State::QuoteInQuoted => {
                    let b = rest[0];
                    if b == b'\n' {
                        self.line += 1;
                    }
                    self.state = if b == self.quote {
                        State::Quoted
                    } else if self.after(b) == State::FieldStart {
                        State::FieldStart
                    } else {
                        if self.error.is_none() {
                            self.error = Some(format!(
                                "text follows the closing quote of the field opened on line {} \
                                 (a quote inside a quoted field is written twice: \"\")",
                                self.opened
                            ));
                        }
                        // As the parser does: the rest of the field is unquoted text.
                        State::Unquoted
                    };
                    at += 1;
                }
            }
        }
    }

    /// True outside a quoted field.
    fn outside(&self) -> bool {
        matches!(self.state, State::FieldStart | State::Unquoted)
    }

    /// The state after byte `b` outside a quoted field.
    fn after(&self, b: u8) -> State {
        if b == self.delimiter || b == b'\n' || b == b'\r' {
            State::FieldStart
        } else {
            State::Unquoted
        }
    }

    /// The record was read whole and found well formed elsewhere
    /// (`quoted_records.rs`); `quoted` when it held a quoted field.
    pub(crate) fn well_formed(&mut self, quoted: bool) {
        self.state = State::FieldStart;
        self.quoted = quoted;
        self.error = None;
    }

    /// The record ended: why it is malformed, if it is.
    pub(crate) fn end(&mut self) -> Option<String> {
        if self.state == State::Quoted {
            self.state = State::FieldStart;
            return Some(format!(
                "the quoted field opened on line {} never closes: every line after it would \
                 become part of that one field (a quote inside a quoted field is written \
                 twice: \"\")",
                self.opened
            ));
        }
        self.error.take()
    }

    /// True when the last record held a quoted field.
    pub(crate) fn was_quoted(&self) -> bool {
        self.quoted
    }
}

/// Line feeds among the line-end bytes `bytes` starts with (blank lines).
fn leading_lines(bytes: &[u8]) -> u64 {
    let blank = bytes.iter().take_while(|&&b| b == b'\n' || b == b'\r');
    blank.filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(record: &[u8], chunks: usize) -> Option<String> {
        let mut q = QuoteCheck::new(b',');
        q.begin(1);
        let size = record.len().div_ceil(chunks.max(1)).max(1);
        for piece in record.chunks(size) {
            q.feed(piece, piece.contains(&b'"'));
        }
        q.end()
    }

    #[test]
    fn well_formed_records_pass_in_any_pieces() {
        for record in [
            &b"a,b,c\n"[..],
            b"\"a,b\",\"c\"\"d\",e\n",
            b"\"multi\nline\",x\r\n",
            b"5'11\",tall\n",
            b"\"\",\"\"\"\"\n",
            b"plain",
        ] {
            for chunks in 1..=record.len() {
                assert_eq!(check(record, chunks), None, "{:?}", record);
            }
        }
    }

    #[test]
    fn an_unterminated_quote_names_the_line_it_opened_on() {
        let mut q = QuoteCheck::new(b',');
        q.begin(2);
        q.feed(b"1,\"x\n2,y\n3,z\n", true);
        let why = q.end().unwrap();
        assert!(why.contains("opened on line 2 never closes"), "{why}");
    }

    #[test]
    fn text_after_a_closing_quote_is_an_error() {
        let why = check(b"\"a\"b,c\n", 1).unwrap();
        assert!(
            why.contains("closing quote of the field opened on line 1"),
            "{why}"
        );
        let mut q = QuoteCheck::new(b';');
        q.begin(7);
        q.feed(b"x;\"two\nlines\"!;y\n", true);
        assert!(q.end().unwrap().contains("opened on line 7"));
    }

    #[test]
    fn an_unquoted_chunk_is_skipped_but_its_end_counts() {
        let mut q = QuoteCheck::new(b',');
        q.begin(1);
        q.feed(b"abc,", false);
        q.feed(b"\"q\"", true);
        assert_eq!(q.end(), None);
        assert!(q.was_quoted());
        q.begin(2);
        q.feed(b"abc", false);
        // A quote inside an unquoted field is literal.
        q.feed(b"\"q", true);
        assert_eq!(q.end(), None);
    }

    /// The rules one byte at a time, as the module header states them, over one record
    /// as the parser cuts it: blank lines first, then up to the first line end outside
    /// quotes. Returns the verdict and the length of that record.
    fn reference(bytes: &[u8]) -> (Option<String>, usize) {
        #[derive(PartialEq)]
        enum S {
            Start,
            Plain,
            Quoted,
            QuoteIn,
        }
        let (mut s, mut line, mut opened, mut error) = (S::Start, 1, 1, None);
        let mut content = false;
        let mut len = bytes.len();
        for (i, &b) in bytes.iter().enumerate() {
            let line_end = b == b'\n' || b == b'\r';
            if line_end && content && matches!(s, S::Start | S::Plain | S::QuoteIn) {
                len = i + 1;
                if b == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                    len += 1;
                }
                break;
            }
            content |= !line_end;
            let ends = b == b',' || line_end;
            s = match s {
                S::Start | S::Plain if ends => S::Start,
                S::Start if b == b'"' => {
                    opened = line;
                    S::Quoted
                }
                S::Start | S::Plain => S::Plain,
                S::Quoted if b == b'"' => S::QuoteIn,
                S::Quoted => S::Quoted,
                S::QuoteIn if b == b'"' => S::Quoted,
                S::QuoteIn if ends => S::Start,
                S::QuoteIn => {
                    error.get_or_insert(opened);
                    S::Plain
                }
            };
            if b == b'\n' {
                line += 1;
            }
        }
        let verdict = match (s == S::Quoted, error) {
            (true, _) => Some(format!("opened on line {opened} never closes")),
            (false, Some(at)) => Some(format!("field opened on line {at} ")),
            (false, None) => None,
        };
        (verdict, len)
    }

    /// One record as a parser hands it over: blank lines, then fields (plain, quoted,
    /// quoted and never closed, quoted with text after the closing quote), a line end.
    fn record() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let plain = proptest::collection::vec(prop::sample::select(vec![b'a', b'"', b' ']), 0..4)
            .prop_filter("a plain field does not start with a quote", |f| {
                f.first() != Some(&b'"')
            });
        let inner = proptest::collection::vec(
            prop::sample::select(vec![&b"a"[..], b",", b"\n", b"\r\n", b"\"\""]),
            0..4,
        )
        .prop_map(|parts| parts.concat());
        let field = (0u8..4, plain, inner).prop_map(|(kind, plain, inner)| match kind {
            0 => plain,
            1 => [&b"\""[..], &inner, b"\""].concat(),
            2 => [&b"\""[..], &inner].concat(),
            _ => [&b"\""[..], &inner, b"\"x"].concat(),
        });
        (
            0usize..3,
            proptest::collection::vec(field, 1..4),
            any::<bool>(),
        )
            .prop_map(|(blank, fields, crlf)| {
                let mut out = b"\n".repeat(blank);
                out.extend(fields.join(&b','));
                out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
                out
            })
    }

    proptest::proptest! {
        #[test]
        fn jumping_between_quotes_agrees_with_the_byte_walk(
            record in record(),
            cut in 0usize..64,
        ) {
            let (want, len) = reference(&record);
            let record = &record[..len];
            let cut = cut.min(record.len());
            let mut q = QuoteCheck::new(b',');
            q.begin(1);
            let (a, b) = record.split_at(cut);
            q.feed(a, a.contains(&b'"'));
            q.feed(b, b.contains(&b'"'));
            let got = q.end();
            match (want, got) {
                (None, None) => {}
                (Some(want), Some(got)) => proptest::prop_assert!(got.contains(&want), "{} vs {}", got, want),
                (want, got) => proptest::prop_assert!(false, "{:?}: {:?} vs {:?}", record, got, want),
            }
        }
    }
}
