//! Recognising values already written in their canonical text (what `cast` writes), so
//! the hot paths skip the general parsers: a load that casts a column already in shape,
//! or derives from a column cast upstream, then costs a few comparisons a value.
//!
//! Each function accepts only the exact canonical spelling and leaves everything else to
//! the general parser (which the tests check it agrees with). Calendar rules stay with
//! jiff: these functions only split digits and hand them to jiff's constructors.

use jiff::civil::{Date, Time};
use jiff::tz::Offset;
use jiff::Timestamp;

/// The number written by the two ASCII digits at `b[i]`, `b[i + 1]`, or `None`.
#[inline(always)]
fn two_digits(b: &[u8], i: usize) -> Option<i32> {
    let (tens, ones) = (b[i].wrapping_sub(b'0'), b[i + 1].wrapping_sub(b'0'));
    (tens <= 9 && ones <= 9).then(|| i32::from(tens) * 10 + i32::from(ones))
}

/// `YYYY-MM-DD`, a valid date in the years 0001 to 9999.
pub(crate) fn date(b: &[u8]) -> Option<Date> {
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year = two_digits(b, 0)? * 100 + two_digits(b, 2)?;
    let (month, day) = (two_digits(b, 5)?, two_digits(b, 8)?);
    if year == 0 {
        return None;
    }
    Date::new(year as i16, month as i8, day as i8).ok()
}

/// `YYYY-MM-DDTHH:MM:SSZ`: a whole-second UTC timestamp, as `cast` writes one.
pub(crate) fn timestamp(b: &[u8]) -> Option<Timestamp> {
    let (date, [hour, minute, second]) = civil(b)?;
    let time = Time::new(hour, minute, second, 0).ok()?;
    Offset::UTC.to_timestamp(date.to_datetime(time)).ok()
}

/// The UTC date (`YYYY-MM-DD`) of a canonical timestamp, straight from its text:
/// accepted exactly when [`timestamp`] accepts, without building the instant.
pub(crate) fn timestamp_date(b: &[u8]) -> Option<&[u8]> {
    let (date, _) = civil(b)?;
    // jiff's instants end late on 9999-12-30 (UTC): that year takes the full check.
    if date.year() == 9999 {
        timestamp(b)?;
    }
    Some(&b[..10])
}

/// The date and the time of day (hour 0-23, minute and second 0-59) of a
/// `YYYY-MM-DDTHH:MM:SSZ` text.
fn civil(b: &[u8]) -> Option<(Date, [i8; 3])> {
    if b.len() != 20 || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z' {
        return None;
    }
    let (hour, minute, second) = (two_digits(b, 11)?, two_digits(b, 14)?, two_digits(b, 17)?);
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    Some((date(&b[..10])?, [hour as i8, minute as i8, second as i8]))
}

/// Appends a date's canonical text (`YYYY-MM-DD`, as jiff writes it) and returns true;
/// digits are written directly for the years 0001 to 9999, jiff formats the rest.
pub(crate) fn write_date(date: Date, out: &mut Vec<u8>) -> bool {
    let year = date.year();
    if !(1..=9999).contains(&year) {
        use std::io::Write;
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{date}");
        return true;
    }
    let digit = |n: i16| b'0' + n as u8;
    let (month, day) = (i16::from(date.month()), i16::from(date.day()));
    out.extend_from_slice(&[
        digit(year / 1000),
        digit(year / 100 % 10),
        digit(year / 10 % 10),
        digit(year % 10),
        b'-',
        digit(month / 10),
        digit(month % 10),
        b'-',
        digit(day / 10),
        digit(day % 10),
    ]);
    true
}

/// `-?(0|[1-9][0-9]*)` short enough to fit any `i64`.
pub(crate) fn is_int(b: &[u8]) -> bool {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    match digits {
        [] => false,
        [b'0'] => b.len() == 1,
        [first, ..] => {
            *first != b'0' && digits.len() <= 18 && digits.iter().all(u8::is_ascii_digit)
        }
    }
}

/// A `decimal(P,S)` value as `cast` writes it: an optional `-`, an integer part without
/// leading zeros and of at most P-S digits, and exactly S decimals; never `-0.00`.
pub(crate) fn is_decimal(b: &[u8], precision: u8, scale: u8) -> bool {
    if precision > 18 || scale > precision {
        return false;
    }
    let negative = b.first() == Some(&b'-');
    let unsigned = if negative { &b[1..] } else { b };
    let (int, frac) = if scale == 0 {
        (unsigned, &[][..])
    } else {
        match unsigned.iter().position(|&c| c == b'.') {
            Some(i) => (&unsigned[..i], &unsigned[i + 1..]),
            None => return false,
        }
    };
    let int_ok = match int {
        [] => false,
        [b'0'] => true,
        [first, ..] => *first != b'0' && int.len() <= usize::from(precision - scale),
    };
    int_ok
        && frac.len() == usize::from(scale)
        && int.iter().chain(frac).all(u8::is_ascii_digit)
        && !(negative && int == b"0" && frac.iter().all(|&c| c == b'0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schema::ColumnType;
    use crate::stage::cast::Caster;
    use proptest::prelude::*;

    fn slow(ty: ColumnType, text: &str) -> Option<String> {
        Caster::new(ty, None, None).ok()?.cast(text).ok().flatten()
    }

    #[test]
    fn exact_spellings_only() {
        assert!(timestamp(b"2026-11-28T09:00:00Z").is_some());
        assert!(timestamp(b"2024-02-29T23:59:59Z").is_some());
        assert_eq!(
            timestamp_date(b"9999-12-30T21:59:59Z"),
            Some(&b"9999-12-30"[..])
        );
        assert_eq!(timestamp_date(b"9999-12-31T00:00:00Z"), None);
        for no in [
            &b"2026-02-29T09:00:00Z"[..],
            b"2026-11-28T24:00:00Z",
            b"2026-11-28T09:00:60Z",
            b"2026-11-28 09:00:00Z",
            b"2026-11-28T09:00:00+00:00",
            b"0000-01-01T00:00:00Z",
            b"2026-11-28T09:00:00.5Z",
        ] {
            assert!(timestamp(no).is_none(), "{}", String::from_utf8_lossy(no));
        }
        assert!(is_decimal(b"839.54", 12, 2) && is_decimal(b"-0.50", 12, 2));
        for no in [
            "839.5",
            "0839.54",
            "-0.00",
            "1e2",
            "+1.00",
            "1234567890123.00",
            ".50",
        ] {
            assert!(!is_decimal(no.as_bytes(), 12, 2), "{no}");
        }
        assert!(is_int(b"0") && is_int(b"-12") && !is_int(b"-0") && !is_int(b"007"));
    }

    proptest! {
        /// Whatever the fast path accepts, the general cast writes back unchanged.
        #[test]
        fn accepted_means_the_cast_would_not_change_it(
            y in 0i32..10000, m in 0i32..14, d in 0i32..33, h in 0i32..25, mi in 0i32..61,
            s in 0i32..61, int in -100_000i64..100_000_000_000, frac in 0u32..1000,
        ) {
            let ts = format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z");
            if let Some(t) = timestamp(ts.as_bytes()) {
                prop_assert_eq!(slow(ColumnType::Timestamp, &ts), Some(ts.clone()));
                let day = Offset::UTC.to_datetime(t).date().to_string();
                prop_assert_eq!(timestamp_date(ts.as_bytes()), Some(day.as_bytes()));
            } else {
                prop_assert_eq!(timestamp_date(ts.as_bytes()), None);
            }
            let day = &ts[..10];
            if date(day.as_bytes()).is_some() {
                prop_assert_eq!(slow(ColumnType::Date, day), Some(day.to_string()));
            } else {
                prop_assert!(timestamp(ts.as_bytes()).is_none());
            }
            for text in [format!("{int}.{:02}", frac % 100), format!("{int}.{frac:03}"), format!("{int}")] {
                for (p, sc) in [(12u8, 2u8), (4, 2), (18, 3), (10, 0)] {
                    if is_decimal(text.as_bytes(), p, sc) {
                        let ty = ColumnType::Decimal { precision: p, scale: sc };
                        prop_assert_eq!(slow(ty, &text), Some(text.clone()), "{}", ty);
                    }
                }
                if is_int(text.as_bytes()) {
                    prop_assert_eq!(slow(ColumnType::Int, &text), Some(text.clone()));
                }
            }
        }

        /// Dates are written exactly as jiff writes them.
        #[test]
        fn dates_are_written_as_jiff_writes_them(days in -2_700_000i32..2_900_000) {
            let date = Date::new(1970, 1, 1).unwrap().checked_add(jiff::Span::new().days(days)).unwrap();
            let mut out = Vec::new();
            prop_assert!(write_date(date, &mut out));
            prop_assert_eq!(String::from_utf8(out).unwrap(), date.to_string());
        }

        /// And it accepts what the cast writes (so the fast path is the common path).
        #[test]
        fn what_the_cast_writes_is_accepted(secs in 0i64..253_402_300_799, cents in -10_000_000i64..10_000_000) {
            let ts = Timestamp::from_second(secs).unwrap().to_string();
            prop_assert!(timestamp(ts.as_bytes()).is_some(), "{}", ts);
            let text = format!("{}{}", if cents < 0 { "-" } else { "" }, cents.unsigned_abs());
            let money = slow(ColumnType::Decimal { precision: 12, scale: 2 }, &format!("{text}e-2")).unwrap();
            prop_assert!(is_decimal(money.as_bytes(), 12, 2) || money == "-0.00", "{}", money);
        }
    }
}
