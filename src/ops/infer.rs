//! Column types from the data. A first load into a typed table (Parquet or Delta) whose
//! job types no column itself casts each CSV column to what a sample of every input shows;
//! `--infer-schema` prints the same inference as a job file's `[schema]`.
//!
//! The sample is the first [`SAMPLE_ROWS`] rows of each input. A column takes the
//! narrowest type that every non-null sampled value is, read back unchanged in meaning:
//!
//! | type | every value is |
//! | --- | --- |
//! | `int` | an integer without leading zeros that fits 64 bits (`02134` stays text) |
//! | `float` | a finite number of at most 15 significant digits (more would not survive a double) |
//! | `bool` | `true` or `false`, in any case (`y`/`n` and `1`/`0` stay as they are) |
//! | `date` | `YYYY-MM-DD` |
//! | `timestamp` | a date, with a time of day, that `cast` reads (no offset: UTC) |
//! | `string` | anything else, or no value at all in the sample |
//!
//! Null is an empty value, or one the run's leading `null_markers` stage turns into null
//! (`--null-markers`); values are trimmed first when a leading `trim` stage would. Those
//! leading stages run before the inferred cast, so every sampled value the cast meets it
//! reads; a later value that does not fit is a bad row, as for any cast.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};

use crate::core::canonical;
use crate::core::protocol::Fingerprint;
use crate::core::schema::ColumnType;
use crate::core::spec::StageSpec;
use crate::source::reader::InputReader;
use crate::source::{discover, read_header};
use crate::stage::cast::Caster;

/// Rows sampled from each input.
pub(crate) const SAMPLE_ROWS: usize = 10_000;

/// The number of stages at the start of `stages` that only clean values (null markers
/// and trimming): an inferred or declared cast goes after them.
pub(crate) fn leading_cleaning(stages: &[StageSpec]) -> usize {
    stages
        .iter()
        .take_while(|s| matches!(s, StageSpec::NullMarkers { .. } | StageSpec::Trim { .. }))
        .count()
}

/// The cast to the sampled types of `columns` over `inputs` (CSV), for the columns whose
/// type is not `string`; `None` when every column stays text. An input that cannot be
/// sampled (unreadable, undecodable) adds nothing: the load meets it, and says why.
pub(crate) fn inferred_cast(
    inputs: &[Fingerprint],
    columns: &[String],
    delimiter: u8,
    stages: &[StageSpec],
) -> Option<StageSpec> {
    let mut sample = Sample::new(columns, stages);
    for input in inputs {
        // Ignored on purpose: see above.
        let _ = sample.read(input, delimiter);
    }
    let typed: BTreeMap<String, ColumnType> = sample
        .types()
        .into_iter()
        .filter(|(_, ty)| *ty != ColumnType::String)
        .collect();
    (!typed.is_empty()).then_some(StageSpec::Cast {
        columns: typed,
        format: None,
        timezone: None,
    })
}

/// `--infer-schema`: the `[schema]` section, as TOML, that a load of `inputs` with these
/// stages would infer. JSON lines inputs are typed by the load's own sample
/// (`jsonl.rs`): numbers, booleans, and `json` for nested objects and arrays.
pub(crate) fn schema_of(
    inputs: &[std::path::PathBuf],
    delimiter: u8,
    stages: &[StageSpec],
) -> Result<String> {
    let files = discover::discover(
        inputs,
        Path::new("/nonexistent/ingest-table"),
        &crate::source::select::Selection::default(),
    )?;
    if let Some(sampled) = crate::source::sample_json(&files)? {
        let columns: Vec<(String, ColumnType)> = sampled
            .into_iter()
            .map(|(name, kinds)| (name, kinds.column_type()))
            .collect();
        return Ok(schema_toml(&columns));
    }
    let Some(columns) = crate::source::read_columns(&files, delimiter)? else {
        bail!("the inputs hold no header to infer a schema from");
    };
    let mut sample = Sample::new(&columns, stages);
    for file in &files {
        sample.read(file, delimiter)?;
    }
    Ok(schema_toml(&sample.types()))
}

/// Which types every non-null value of a column seen so far is.
#[derive(Debug, Clone, Copy)]
struct Votes {
    seen: bool,
    int: bool,
    float: bool,
    bool: bool,
    date: bool,
    timestamp: bool,
}

impl Votes {
    const ALL: Votes = Votes {
        seen: false,
        int: true,
        float: true,
        bool: true,
        date: true,
        timestamp: true,
    };

    fn observe(&mut self, text: &str, timestamps: &Caster) {
        self.seen = true;
        self.int = self.int && is_int(text);
        self.float = self.float && is_float(text);
        self.bool =
            self.bool && (text.eq_ignore_ascii_case("true") || text.eq_ignore_ascii_case("false"));
        self.date = self.date && canonical::date(text.as_bytes()).is_some();
        self.timestamp = self.timestamp
            && text
                .get(..10)
                .is_some_and(|d| canonical::date(d.as_bytes()).is_some())
            && timestamps.cast(text).is_ok();
    }

    /// The narrowest type voted for; `string` when none (or nothing was seen).
    fn column_type(&self) -> ColumnType {
        match *self {
            Votes { seen: false, .. } => ColumnType::String,
            Votes { int: true, .. } => ColumnType::Int,
            Votes { float: true, .. } => ColumnType::Float,
            Votes { bool: true, .. } => ColumnType::Bool,
            Votes { date: true, .. } => ColumnType::Date,
            Votes {
                timestamp: true, ..
            } => ColumnType::Timestamp,
            _ => ColumnType::String,
        }
    }
}

/// The votes of every column over the inputs read so far.
struct Sample {
    columns: Vec<String>,
    votes: Vec<Votes>,
    cleaning: Vec<StageSpec>,
    timestamps: Caster,
}

impl Sample {
    fn new(columns: &[String], stages: &[StageSpec]) -> Sample {
        Sample {
            columns: columns.to_vec(),
            votes: vec![Votes::ALL; columns.len()],
            cleaning: stages[..leading_cleaning(stages)].to_vec(),
            timestamps: Caster::new(ColumnType::Timestamp, None, None)
                .unwrap_or_else(|_| unreachable!("a timestamp caster without format or zone")),
        }
    }

    /// Votes with the first [`SAMPLE_ROWS`] rows of `input`, matched to the columns by its
    /// own header's names.
    fn read(&mut self, input: &Fingerprint, delimiter: u8) -> Result<()> {
        let mut reader = InputReader::open_input(input, delimiter)?;
        let Some(header) = read_header(&mut reader)? else {
            return Ok(());
        };
        let at: Vec<Option<usize>> = header
            .iter()
            .map(|name| self.columns.iter().position(|c| c == name))
            .collect();
        for _ in 0..SAMPLE_ROWS {
            if !reader.read_record()? {
                break;
            }
            for (i, value) in reader.fields().enumerate() {
                let Some(col) = at.get(i).copied().flatten() else {
                    continue;
                };
                let Ok(text) = std::str::from_utf8(value) else {
                    // Not text: the load rejects the row; it votes for no type.
                    self.votes[col] = Votes {
                        seen: true,
                        ..Votes::ALL
                    };
                    continue;
                };
                if let Some(text) = clean(&self.cleaning, &self.columns[col], text) {
                    self.votes[col].observe(text, &self.timestamps);
                }
            }
        }
        Ok(())
    }

    fn types(&self) -> Vec<(String, ColumnType)> {
        self.columns
            .iter()
            .zip(&self.votes)
            .map(|(name, votes)| (name.clone(), votes.column_type()))
            .collect()
    }
}

/// `text` of `column` as the cleaning stages leave it; `None` for null.
fn clean<'a>(cleaning: &[StageSpec], column: &str, mut text: &'a str) -> Option<&'a str> {
    let applies = |columns: &[String]| columns.is_empty() || columns.iter().any(|c| c == column);
    for stage in cleaning {
        match stage {
            StageSpec::Trim { columns } if applies(columns) => text = text.trim(),
            StageSpec::NullMarkers { markers, columns }
                if applies(columns) && markers.iter().any(|m| m == text) =>
            {
                return None
            }
            _ => {}
        }
    }
    (!text.is_empty()).then_some(text)
}

/// An integer without leading zeros (or `0`) that fits an `i64`.
fn is_int(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text.parse::<i64>().is_ok()
}

/// A finite decimal number (`1.5`, `-0.25`, `2e3`) without leading zeros in its integer
/// part and with at most 15 significant digits, which a double holds exactly as written.
fn is_float(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let mantissa = unsigned.split(['e', 'E']).next().unwrap_or_default();
    let (int_part, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int_part.is_empty() && frac.is_empty())
        || !int_part
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
        || (int_part.len() > 1 && int_part.starts_with('0'))
    {
        return false;
    }
    let digits: String = int_part.chars().chain(frac.chars()).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    significant.len() <= 15 && text.parse::<f64>().is_ok_and(f64::is_finite)
}

/// A `[schema]` section declaring `columns`.
fn schema_toml(columns: &[(String, ColumnType)]) -> String {
    let mut out = String::from(
        "[schema]\n# inferred from the first rows of the inputs; check before use\ncolumns = {",
    );
    for (i, (name, ty)) in columns.iter().enumerate() {
        let key = if name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !name.is_empty()
        {
            name.clone()
        } else {
            format!("{name:?}")
        };
        out.push_str(&format!(
            "{} {key} = \"{ty}\"",
            if i == 0 { "" } else { "," }
        ));
    }
    out.push_str(" }\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infer(values: &[&str]) -> ColumnType {
        let caster = Caster::new(ColumnType::Timestamp, None, None).unwrap();
        let mut votes = Votes::ALL;
        for v in values {
            if let Some(v) = clean(&[], "c", v) {
                votes.observe(v, &caster);
            }
        }
        votes.column_type()
    }

    #[test]
    fn each_type_takes_only_values_that_keep_their_meaning() {
        assert_eq!(infer(&["1", "-7", "+3", "0"]), ColumnType::Int);
        assert_eq!(infer(&["1", "2.5", "1e3", "-0.125"]), ColumnType::Float);
        assert_eq!(infer(&["true", "FALSE", ""]), ColumnType::Bool);
        assert_eq!(infer(&["2026-11-28", "1999-01-01"]), ColumnType::Date);
        assert_eq!(
            infer(&["2026-11-28 10:00:00", "2026-11-28T10:00:00+01:00"]),
            ColumnType::Timestamp
        );
        // Leading zeros, long ids, y/n flags, other date spellings, nothing at all.
        assert_eq!(infer(&["02134", "10001"]), ColumnType::String);
        assert_eq!(infer(&["00.5"]), ColumnType::String);
        assert_eq!(infer(&["12345678901234567890"]), ColumnType::String);
        assert_eq!(infer(&["1234567890123456"]), ColumnType::Int);
        assert_eq!(infer(&["0.1234567890123456"]), ColumnType::String);
        assert_eq!(infer(&["y", "n"]), ColumnType::String);
        assert_eq!(infer(&["1", "0", "1"]), ColumnType::Int);
        assert_eq!(infer(&["28/11/2026"]), ColumnType::String);
        assert_eq!(infer(&["inf", "1"]), ColumnType::String);
        assert_eq!(infer(&["NaN"]), ColumnType::String);
        assert_eq!(infer(&["", ""]), ColumnType::String);
        assert_eq!(
            infer(&["2026-11-28", "2026-11-28 10:00:00"]),
            infer_mixed_dates()
        );
    }

    /// A column of dates and timestamps is a timestamp when `cast` reads a bare date as
    /// one (midnight), else text: never a type that would fail the cast.
    fn infer_mixed_dates() -> ColumnType {
        let caster = Caster::new(ColumnType::Timestamp, None, None).unwrap();
        if caster.cast("2026-11-28").is_ok() {
            ColumnType::Timestamp
        } else {
            ColumnType::String
        }
    }

    #[test]
    fn every_inferred_value_is_one_the_cast_reads() {
        for (values, ty) in [
            (&["+3", "-9223372036854775808"][..], ColumnType::Int),
            (&["1e3", ".5", "-0.125"][..], ColumnType::Float),
            (&["TRUE", "false"][..], ColumnType::Bool),
            (&["2024-02-29"][..], ColumnType::Date),
            (
                &["2026-11-28 10:00:00", "2026-11-28T10:00:00Z"][..],
                ColumnType::Timestamp,
            ),
        ] {
            assert_eq!(infer(values), ty, "{values:?}");
            let caster = Caster::new(ty, None, None).unwrap();
            for v in values {
                assert!(caster.cast(v).is_ok(), "{v} as {ty}");
            }
        }
    }

    #[test]
    fn leading_null_markers_and_trim_clean_the_sample() {
        let stages = vec![
            StageSpec::Trim { columns: vec![] },
            StageSpec::NullMarkers {
                markers: vec!["NA".into()],
                columns: vec!["a".into()],
            },
            StageSpec::Filter {
                expr: "a > 1".into(),
            },
            StageSpec::NullMarkers {
                markers: vec!["x".into()],
                columns: vec![],
            },
        ];
        assert_eq!(leading_cleaning(&stages), 2);
        let cleaning = &stages[..2];
        assert_eq!(clean(cleaning, "a", " NA "), None);
        assert_eq!(clean(cleaning, "b", " NA "), Some("NA"));
        assert_eq!(clean(cleaning, "b", " 7 "), Some("7"));
        // A marker of a later stage is a value here: that stage runs after the cast.
        assert_eq!(clean(cleaning, "b", "x"), Some("x"));
        assert_eq!(clean(cleaning, "a", "  "), None);
    }
}
