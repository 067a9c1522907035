//! `cast`: checks that values are of a type and rewrites them in the type's canonical
//! text, so every later stage and every reader sees one spelling.
//!
//! | type | accepts | writes |
//! | --- | --- | --- |
//! | `int` | `-12`, `+7` | `-12`, `7` |
//! | `float` | `1.5`, `2e3` (finite) | shortest round-trip form: `1.5`, `2000` |
//! | `decimal(P,S)` | `3.456`, `1e2` | exactly S decimals, rounded half away from zero: `3.46` |
//! | `bool` | `true/false`, `t/f`, `yes/no`, `y/n`, `1/0` (any case) | `true`, `false` |
//! | `date` | ISO `2026-11-28`, or `format` (strftime) | `2026-11-28` |
//! | `timestamp` | RFC 3339 with an offset; without one (`2026-11-28 10:00:00`), in `timezone` (default UTC); or `format` | RFC 3339 in UTC: `2026-11-28T09:00:00Z` |
//!
//! An empty value becomes null for every type but `string`. A value that does not fit is
//! a bad row: it fails the run, or goes to the rejects with `--max-errors`.

use std::collections::BTreeMap;
use std::str::FromStr;

use anyhow::Result;
use jiff::civil::{Date, DateTime};
use jiff::tz::{Offset, TimeZone};
use jiff::Timestamp;
use rust_decimal::{Decimal, RoundingStrategy};

use super::{set_aside, Stage};
use crate::core::batch::{Column, RecordBatch};
use crate::core::canonical;
use crate::core::schema::{ColumnType, Schema};

/// Converts text into one type's canonical text.
#[derive(Debug, Clone)]
pub(crate) struct Caster {
    ty: ColumnType,
    format: Option<String>,
    tz: TimeZone,
}

/// Reads `UTC`, `Z`, `+HH:MM` / `-HH:MM`, or an IANA name such as `Europe/Paris`.
pub(crate) fn parse_timezone(name: &str) -> Result<TimeZone, String> {
    if matches!(name, "UTC" | "utc" | "Z") {
        return Ok(TimeZone::UTC);
    }
    if let Some(rest) = name
        .strip_prefix('+')
        .map(|r| (1, r))
        .or_else(|| name.strip_prefix('-').map(|r| (-1, r)))
    {
        let (sign, hm) = rest;
        let (h, m) = hm.split_once(':').unwrap_or((hm, "0"));
        let (h, m): (i32, i32) = (
            h.parse().map_err(|_| format!("bad offset {name:?}"))?,
            m.parse().map_err(|_| format!("bad offset {name:?}"))?,
        );
        let offset = Offset::from_seconds(sign * (h * 3600 + m * 60))
            .map_err(|e| format!("bad offset {name:?}: {e}"))?;
        return Ok(TimeZone::fixed(offset));
    }
    TimeZone::get(name).map_err(|e| format!("unknown time zone {name:?}: {e}"))
}

impl Caster {
    /// A caster to `ty`, with an optional strftime `format` and `timezone`.
    pub(crate) fn new(
        ty: ColumnType,
        format: Option<&str>,
        timezone: Option<&str>,
    ) -> Result<Caster, String> {
        let tz = timezone
            .map(parse_timezone)
            .transpose()?
            .unwrap_or(TimeZone::UTC);
        if format.is_some() && !matches!(ty, ColumnType::Date | ColumnType::Timestamp) {
            return Err(format!(
                "a format applies to date and timestamp casts, not {ty}"
            ));
        }
        Ok(Caster {
            ty,
            format: format.map(str::to_string),
            tz,
        })
    }

    /// True when `bytes` already are this type's canonical text, so that `cast` would
    /// return them unchanged (checked without the general parsers; see `canonical.rs`).
    pub(crate) fn is_canonical(&self, bytes: &[u8]) -> bool {
        if self.format.is_some() || bytes.is_empty() {
            return false;
        }
        match self.ty {
            ColumnType::String => true,
            ColumnType::Int => canonical::is_int(bytes),
            ColumnType::Decimal { precision, scale } => {
                canonical::is_decimal(bytes, precision, scale)
            }
            ColumnType::Bool => bytes == b"true" || bytes == b"false",
            ColumnType::Date => canonical::date(bytes).is_some(),
            ColumnType::Timestamp => canonical::timestamp_date(bytes).is_some(),
            ColumnType::Float | ColumnType::Json => false,
        }
    }

    /// The canonical text of `text` as this type; `None` for null.
    pub(crate) fn cast(&self, text: &str) -> Result<Option<String>, String> {
        if text.is_empty() && self.ty != ColumnType::String {
            return Ok(None);
        }
        // In the user's words, not the parser's: what was expected, and what to do.
        let bad = |why: String| format!("cannot read {text:?} as {}: {why}", self.ty);
        let expected = || bad(self.expected());
        Ok(Some(match self.ty {
            ColumnType::String => text.to_string(),
            ColumnType::Int => i64::from_str(text).map_err(|_| expected())?.to_string(),
            ColumnType::Float => {
                let f = f64::from_str(text).map_err(|_| expected())?;
                if !f.is_finite() {
                    return Err(bad("not a finite number".into()));
                }
                f.to_string()
            }
            ColumnType::Decimal { precision, scale } => {
                let d = Decimal::from_str(text)
                    .or_else(|_| Decimal::from_scientific(text))
                    .map_err(|_| expected())?;
                let mut d =
                    d.round_dp_with_strategy(scale.into(), RoundingStrategy::MidpointAwayFromZero);
                d.rescale(scale.into());
                if d.mantissa().unsigned_abs() >= 10u128.pow(precision.into()) {
                    return Err(bad(format!(
                        "more than {} digits before the point",
                        precision - scale
                    )));
                }
                d.to_string()
            }
            ColumnType::Bool => match text.to_ascii_lowercase().as_str() {
                "true" | "t" | "yes" | "y" | "1" => "true".into(),
                "false" | "f" | "no" | "n" | "0" => "false".into(),
                _ => return Err(expected()),
            },
            ColumnType::Date => {
                let date = match &self.format {
                    Some(f) => jiff::fmt::strtime::parse(f, text).and_then(|t| t.to_date()),
                    None => Date::from_str(text),
                };
                date.map_err(|_| expected())?.to_string()
            }
            ColumnType::Timestamp => self.timestamp(text).map_err(|_| expected())?.to_string(),
            // Checked, and kept exactly as written (spacing and all).
            ColumnType::Json => {
                serde_json::from_str::<&serde_json::value::RawValue>(text)
                    .map_err(|_| expected())?;
                text.to_string()
            }
        }))
    }

    /// What a value of this type looks like, and how to read other spellings.
    fn expected(&self) -> String {
        let format_hint = |example: &str| match &self.format {
            Some(f) => format!("the cast's format is {f:?}"),
            None => format!(
                "for another spelling give the cast a format, e.g. format = {example:?} in the \
                 job file's cast stage"
            ),
        };
        match self.ty {
            ColumnType::String => "any text".into(),
            ColumnType::Int => "expected a whole number, such as 42 or -7".into(),
            ColumnType::Float => "expected a number, such as 3.25, -0.5 or 1e-3".into(),
            ColumnType::Decimal { scale, .. } => format!(
                "expected a number, such as 1234.{}",
                "5".repeat(scale.max(1).into())
            ),
            ColumnType::Bool => "expected true or false (also yes/no, t/f, y/n, 1/0)".into(),
            ColumnType::Json => "expected a JSON value, such as {\"a\": [1, 2]}".into(),
            ColumnType::Date => format!(
                "expected a date such as 2026-11-28; {}",
                format_hint("%d/%m/%Y")
            ),
            ColumnType::Timestamp => format!(
                "expected a timestamp such as 2026-11-28T10:00:00Z or 2026-11-28 10:00:00 (in \
                 the cast's time zone, UTC unless --timezone says otherwise); {}",
                format_hint("%d/%m/%Y %H:%M")
            ),
        }
    }

    fn timestamp(&self, text: &str) -> Result<Timestamp, String> {
        let in_zone = |dt: DateTime| {
            dt.to_zoned(self.tz.clone())
                .map(|z| z.timestamp())
                .map_err(|e| e.to_string())
        };
        match &self.format {
            Some(f) => {
                let parsed = jiff::fmt::strtime::parse(f, text).map_err(|e| e.to_string())?;
                if parsed.offset().is_some() {
                    parsed.to_timestamp().map_err(|e| e.to_string())
                } else {
                    in_zone(parsed.to_datetime().map_err(|e| e.to_string())?)
                }
            }
            None => match Timestamp::from_str(text) {
                Ok(ts) => Ok(ts),
                Err(_) => in_zone(DateTime::from_str(text).map_err(|e| e.to_string())?),
            },
        }
    }
}

/// The cast stage: several columns, each with its caster.
pub(crate) struct Cast {
    casters: Vec<Option<Caster>>,
    names: Vec<String>,
    text: String,
}

impl Cast {
    /// Casts `columns` (name → type) of `schema`.
    pub(crate) fn new(
        schema: &Schema,
        columns: &BTreeMap<String, ColumnType>,
        format: Option<&str>,
        timezone: Option<&str>,
    ) -> Result<(Cast, Schema), String> {
        let mut casters = vec![None; schema.len()];
        let mut output = schema.clone();
        for (name, ty) in columns {
            let i = schema.index(name)?;
            casters[i] = Some(
                Caster::new(*ty, format, timezone).map_err(|e| format!("column {name:?}: {e}"))?,
            );
            output.columns[i].ty = *ty;
        }
        Ok((
            Cast {
                casters,
                names: schema.names(),
                text: String::new(),
            },
            output,
        ))
    }
}

impl Stage for Cast {
    fn name(&self) -> &'static str {
        "cast"
    }

    /// Writes only the cast columns; the others are not copied.
    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        let mut columns = Vec::new();
        let mut canonical = Vec::new();
        let mut bad: Vec<(usize, String)> = Vec::new();
        for (col, caster) in self.casters.iter().enumerate() {
            let Some(caster) = caster else { continue };
            // Built only once a value changes: a column already in canonical form (the
            // common case) is left as it is, without a copy.
            let mut changed: Option<Column> = None;
            let column = batch.column(col);
            for row in 0..batch.len() {
                let cell = column.get(row);
                let Some(bytes) = cell.filter(|b| !caster.is_canonical(b)) else {
                    if let Some(values) = &mut changed {
                        values.push(cell);
                    }
                    continue;
                };
                let values = changed.get_or_insert_with(|| {
                    let mut values = Column::with_rows(batch.len());
                    for earlier in 0..row {
                        values.push(column.get(earlier));
                    }
                    values
                });
                self.text.clear();
                self.text.push_str(&String::from_utf8_lossy(bytes));
                match caster.cast(&self.text) {
                    Ok(value) => values.push(value.as_deref().map(str::as_bytes)),
                    Err(e) => {
                        values.push(None);
                        if !bad.iter().any(|(r, _)| *r == row) {
                            bad.push((row, format!("column {:?}: {e}", self.names[col])));
                        }
                    }
                }
            }
            match changed {
                Some(values) => columns.push((col, values)),
                // Every value was checked canonical: later stages need not check again.
                None => canonical.push((col, caster.ty)),
            }
        }
        bad.sort_by_key(|(row, _)| *row);
        set_aside(batch, bad, |b| {
            for (col, values) in columns {
                b.replace_column(col, values);
            }
            for (col, ty) in canonical {
                b.mark_canonical(col, ty);
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cast(ty: &str, text: &str) -> Result<Option<String>, String> {
        Caster::new(ty.parse().unwrap(), None, None)
            .unwrap()
            .cast(text)
    }

    fn ok(ty: &str, text: &str) -> String {
        cast(ty, text).unwrap().unwrap()
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(ok("int", "+007"), "7");
        assert_eq!(ok("float", "2e3"), "2000");
        assert_eq!(ok("float", "0.1"), "0.1");
        assert_eq!(ok("decimal(10,2)", "3.456"), "3.46");
        assert_eq!(ok("decimal(10,2)", "-3.455"), "-3.46");
        assert_eq!(ok("decimal(10,2)", "7"), "7.00");
        assert_eq!(ok("decimal(4,2)", "99.994"), "99.99");
        assert_eq!(ok("bool", "YES"), "true");
        assert_eq!(ok("date", "2026-11-28"), "2026-11-28");
        assert_eq!(
            ok("timestamp", "2026-11-28T10:00:00+01:00"),
            "2026-11-28T09:00:00Z"
        );
        assert_eq!(
            ok("timestamp", "2026-11-28 10:00:00"),
            "2026-11-28T10:00:00Z"
        );
        assert_eq!(ok("string", ""), "");
        assert_eq!(cast("int", "").unwrap(), None);
    }

    #[test]
    fn formats_and_time_zones() {
        let paris = Caster::new(ColumnType::Timestamp, None, Some("Europe/Paris")).unwrap();
        assert_eq!(
            paris.cast("2026-07-01 12:00:00").unwrap().unwrap(),
            "2026-07-01T10:00:00Z"
        );
        assert_eq!(
            paris.cast("2026-12-01 12:00:00").unwrap().unwrap(),
            "2026-12-01T11:00:00Z"
        );
        let us = Caster::new(ColumnType::Date, Some("%m/%d/%Y"), None).unwrap();
        assert_eq!(us.cast("11/28/2026").unwrap().unwrap(), "2026-11-28");
        let fixed = Caster::new(
            ColumnType::Timestamp,
            Some("%d.%m.%Y %H:%M"),
            Some("-05:00"),
        )
        .unwrap();
        assert_eq!(
            fixed.cast("28.11.2026 07:30").unwrap().unwrap(),
            "2026-11-28T12:30:00Z"
        );
        assert!(Caster::new(ColumnType::Timestamp, None, Some("Mars/Olympus")).is_err());
        assert!(Caster::new(ColumnType::Int, Some("%Y"), None).is_err());
    }

    #[test]
    fn bad_values_say_why() {
        assert_eq!(
            cast("int", "12.5").unwrap_err(),
            "cannot read \"12.5\" as int: expected a whole number, such as 42 or -7"
        );
        let ts = cast("timestamp", "n/a").unwrap_err();
        assert!(
            ts.starts_with("cannot read \"n/a\" as timestamp: expected a timestamp such as")
                && ts.contains("give the cast a format, e.g. format = \"%d/%m/%Y %H:%M\""),
            "{ts}"
        );
        assert!(cast("decimal(4,2)", "123.4")
            .unwrap_err()
            .contains("more than 2 digits before the point"));
        assert!(cast("float", "inf")
            .unwrap_err()
            .contains("not a finite number"));
        assert!(cast("bool", "maybe").is_err());
        assert!(cast("date", "2026-02-30").is_err());
        assert!(cast("timestamp", "yesterday").is_err());
    }

    proptest! {
        #[test]
        fn casting_a_canonical_value_again_changes_nothing(n in any::<i64>(), f in -1e12f64..1e12, cents in -99_999_999i64..99_999_999) {
            for (ty, text) in [("int", n.to_string()), ("float", f.to_string()), ("decimal(10,2)", format!("{}.{:02}", cents / 100, (cents % 100).abs()))] {
                let once = ok(ty, &text);
                prop_assert_eq!(ok(ty, &once), once.clone());
            }
        }

        #[test]
        fn no_input_panics(text in "\\PC{0,30}") {
            for ty in ["int", "float", "decimal(12,3)", "bool", "date", "timestamp"] {
                let _ = cast(ty, &text);
            }
        }
    }
}
