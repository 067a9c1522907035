//! JSON lines input: one JSON object per line, its keys the columns.
//!
//! The columns come from a sample: the first [`SAMPLE_ROWS`] objects of the run's JSON
//! inputs, in order, every key in the order it first appears. So do their types (see
//! [`Kinds`]): a key whose sampled values are all integers is an `int` column, all
//! numbers `float`, all booleans `bool`, all objects or arrays `json`, anything else
//! `string`; the load casts them, so a later row that breaks the type is a bad row that
//! names it. Every object is matched by key, in any order: a missing key is null. A key
//! the sample did not have is a bad row (`--json-new-keys error`, the default) or is
//! ignored (`drop`); a key given twice, or a line that is not a JSON object, makes the
//! row bad, exactly like a ragged CSV row (it fails the run, or goes to the rejects with
//! `--max-errors`).
//!
//! Values: strings unescaped; numbers and booleans as written (a `decimal` cast sees the
//! digits the producer wrote); `null` is null; nested objects and arrays are kept as
//! their JSON text, as written, and stay JSON in JSON lines output. Blank lines are
//! skipped.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A string that borrows from the line unless it holds escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// An object's members in the order written, values left as raw JSON.
struct Object<'a>(Vec<(Text<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Object<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Object<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Object(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// Objects sampled for the columns and their types.
pub(crate) const SAMPLE_ROWS: usize = 1000;

/// What the sampled values of one key were (nulls aside).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Kinds {
    pub(crate) int: bool,
    pub(crate) float: bool,
    pub(crate) boolean: bool,
    pub(crate) string: bool,
    pub(crate) nested: bool,
}

impl Kinds {
    /// Notes one raw JSON value.
    fn add(&mut self, raw: &str) {
        match raw.as_bytes().first() {
            Some(b'"') => self.string = true,
            Some(b't' | b'f') => self.boolean = true,
            Some(b'n') | None => {}
            Some(b'{' | b'[') => self.nested = true,
            Some(_) if raw.contains(['.', 'e', 'E']) || raw.parse::<i64>().is_err() => {
                self.float = true
            }
            Some(_) => self.int = true,
        }
    }

    /// The column type every sampled value fits: numbers stay numbers (an integer
    /// column with one fraction is a float column), anything mixed is a string.
    pub(crate) fn column_type(self) -> crate::core::schema::ColumnType {
        use crate::core::schema::ColumnType;
        let Kinds {
            int,
            float,
            boolean,
            string,
            nested,
        } = self;
        match (int, float, boolean, string, nested) {
            (true, false, false, false, false) => ColumnType::Int,
            (_, true, false, false, false) => ColumnType::Float,
            (false, false, true, false, false) => ColumnType::Bool,
            (false, false, false, false, true) => ColumnType::Json,
            _ => ColumnType::String,
        }
    }
}

/// Adds one sampled line's keys (in first-seen order) and value kinds; `false` for a
/// line that is not an object (the load then reports it as a bad row).
pub(crate) fn sample(line: &[u8], columns: &mut Vec<(String, Kinds)>) -> bool {
    let Ok(object) = parse(line) else {
        return false;
    };
    for (key, raw) in object.0 {
        let at = match columns.iter().position(|(k, _)| *k == key.0) {
            Some(at) => at,
            None => {
                columns.push((key.0.into_owned(), Kinds::default()));
                columns.len() - 1
            }
        };
        columns[at].1.add(raw.get());
    }
    true
}

/// The line without its line ending.
pub(crate) fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn parse(line: &[u8]) -> Result<Object<'_>, String> {
    serde_json::from_slice(content(line)).map_err(|e| {
        // Every record is one line: its column is what locates the mistake.
        let text = e.to_string();
        match text.rsplit_once(" at line ") {
            Some((what, _)) if e.column() > 0 => {
                format!("not a JSON object: {what} at column {}", e.column())
            }
            Some((what, _)) => format!("not a JSON object: {what}"),
            None => format!("not a JSON object: {text}"),
        }
    })
}

/// True for a line holding nothing but whitespace.
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// The keys of an input's first object: its columns.
pub(crate) fn keys(line: &[u8]) -> Result<Vec<String>, String> {
    let object = parse(line)?;
    let mut keys: Vec<String> = Vec::with_capacity(object.0.len());
    for (key, _) in object.0 {
        if keys.iter().any(|k| *k == key.0) {
            return Err(format!("key {:?} appears twice", key.0));
        }
        keys.push(key.0.into_owned());
    }
    Ok(keys)
}

/// One record's values in `columns` order: bytes back to back, end offsets, nulls.
#[derive(Debug, Default)]
pub(crate) struct Values {
    pub(crate) bytes: Vec<u8>,
    pub(crate) ends: Vec<usize>,
    pub(crate) nulls: Vec<bool>,
}

/// Parses one line into `out`, ordered by `columns`; `Err` says why the row is bad. A
/// key that is not a column is an error, or ignored with `drop_new_keys`.
pub(crate) fn values(
    line: &[u8],
    columns: &[String],
    drop_new_keys: bool,
    out: &mut Values,
) -> Result<(), String> {
    let object = parse(line)?;
    let mut slots: Vec<Option<Option<Cow<str>>>> = vec![None; columns.len()];
    for (key, raw) in object.0 {
        let Some(i) = columns.iter().position(|c| *c == key.0) else {
            if drop_new_keys {
                continue;
            }
            return Err(format!(
                "key {:?} is not a column (the columns, from the first objects: {}); pass \
                 --json-new-keys drop to ignore keys they did not have",
                key.0,
                columns.join(", ")
            ));
        };
        if slots[i].is_some() {
            return Err(format!("key {:?} appears twice", key.0));
        }
        slots[i] = Some(value(raw)?);
    }
    out.bytes.clear();
    out.ends.clear();
    out.nulls.clear();
    for slot in slots {
        let value = slot.flatten();
        if let Some(text) = &value {
            out.bytes.extend_from_slice(text.as_bytes());
        }
        out.ends.push(out.bytes.len());
        out.nulls.push(value.is_none());
    }
    Ok(())
}

fn value(raw: &RawValue) -> Result<Option<Cow<'_, str>>, String> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<Text>(text)
            .map(|t| Some(t.0))
            .map_err(|e| format!("bad string {text}: {e}")),
        Some(b'n') => Ok(None),
        _ => Ok(Some(Cow::Borrowed(text))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn row(line: &str, columns: &[&str]) -> Result<Vec<Option<String>>, String> {
        let mut out = Values::default();
        values(line.as_bytes(), &cols(columns), false, &mut out)?;
        let mut start = 0;
        Ok(out
            .ends
            .iter()
            .zip(&out.nulls)
            .map(|(&end, &null)| {
                let text = String::from_utf8(out.bytes[start..end].to_vec()).unwrap();
                start = end;
                (!null).then_some(text)
            })
            .collect())
    }

    #[test]
    fn keys_come_in_the_order_written() {
        assert_eq!(
            keys(br#"{"b":1,"a":"x","c":null}"#).unwrap(),
            cols(&["b", "a", "c"])
        );
        assert!(keys(br#"{"a":1,"a":2}"#).unwrap_err().contains("twice"));
    }

    #[test]
    fn values_are_matched_by_key_and_kept_as_written() {
        let got = row(
            r#"{"n": 1.50, "s": "a\"b\u00e9", "nested": {"x": [1, 2]}, "ok": true, "z": null}"#,
            &["s", "n", "ok", "nested", "z", "missing"],
        )
        .unwrap();
        let want = [
            Some("a\"bé"),
            Some("1.50"),
            Some("true"),
            Some(r#"{"x": [1, 2]}"#),
            None,
            None,
        ];
        assert_eq!(got, want.map(|v| v.map(str::to_string)).to_vec());
    }

    #[test]
    fn bad_lines_say_why_and_where() {
        let err = row(r#"{"a": 1, "b": 2}"#, &["a"]).unwrap_err();
        assert!(err.contains(r#"key "b" is not a column"#), "{err}");
        let err = row(r#"{"a": 1,, }"#, &["a"]).unwrap_err();
        assert!(
            err.starts_with("not a JSON object") && err.contains("column 9"),
            "{err}"
        );
        let err = row("[1, 2]", &["a"]).unwrap_err();
        assert!(err.contains("a JSON object"), "{err}");
        assert!(row(r#"{"a": 1, "a": 2}"#, &["a"])
            .unwrap_err()
            .contains("twice"));
        let err = values(
            b"{\"a\": \"\xff\"}",
            &cols(&["a"]),
            false,
            &mut Values::default(),
        )
        .unwrap_err();
        assert!(err.starts_with("not a JSON object"), "{err}");
    }
}
