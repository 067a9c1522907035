//! Cleaning stages: trim whitespace, map null markers (`''`, `NULL`, `\N`) to null.

use anyhow::Result;

use super::{rebuild, Stage};
use crate::core::batch::RecordBatch;
use crate::core::schema::{ColumnType, Schema};

/// Which columns a cleaning stage touches (every one, or the string ones, by default).
fn targets(schema: &Schema, names: &[String], strings_only: bool) -> Result<Vec<bool>, String> {
    let mut on = vec![names.is_empty(); schema.len()];
    if names.is_empty() && strings_only {
        for (i, c) in schema.columns.iter().enumerate() {
            on[i] = c.ty == ColumnType::String;
        }
    }
    for name in names {
        on[schema.index(name)?] = true;
    }
    Ok(on)
}

/// Trims surrounding whitespace (Unicode's definition).
pub(crate) struct Trim {
    on: Vec<bool>,
}

impl Trim {
    /// Trims `columns`, or every string column when empty.
    pub(crate) fn new(schema: &Schema, columns: &[String]) -> Result<(Trim, Schema), String> {
        Ok((
            Trim {
                on: targets(schema, columns, true)?,
            },
            schema.clone(),
        ))
    }
}

fn trim_bytes(bytes: &[u8]) -> &[u8] {
    // Inputs are UTF-8 (checked by the reader); a lossy view would only copy.
    match std::str::from_utf8(bytes) {
        Ok(text) => text.trim().as_bytes(),
        Err(_) => bytes,
    }
}

impl Stage for Trim {
    fn name(&self) -> &'static str {
        "trim"
    }

    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        let on = &self.on;
        rebuild(batch, on.len(), |b, row, out| {
            for (col, &trim) in on.iter().enumerate() {
                out.push(
                    b.cell(row, col)
                        .map(|v| if trim { trim_bytes(v) } else { v }),
                );
            }
            Ok(())
        });
        Ok(())
    }
}

/// Maps marker values to null.
pub(crate) struct NullMarkers {
    markers: Vec<Vec<u8>>,
    on: Vec<bool>,
}

impl NullMarkers {
    /// Nulls `markers` in `columns`, or in every column when empty.
    pub(crate) fn new(
        schema: &Schema,
        markers: &[String],
        columns: &[String],
    ) -> Result<(NullMarkers, Schema), String> {
        let markers = markers.iter().map(|m| m.as_bytes().to_vec()).collect();
        Ok((
            NullMarkers {
                markers,
                on: targets(schema, columns, false)?,
            },
            schema.clone(),
        ))
    }
}

impl Stage for NullMarkers {
    fn name(&self) -> &'static str {
        "null_markers"
    }

    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        let (on, markers) = (&self.on, &self.markers);
        rebuild(batch, on.len(), |b, row, out| {
            for (col, &check) in on.iter().enumerate() {
                let cell = b.cell(row, col);
                let is_marker = check && cell.is_some_and(|v| markers.iter().any(|m| m == v));
                out.push(if is_marker { None } else { cell });
            }
            Ok(())
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_and_null_markers() {
        let schema = Schema::strings(&["a".into(), "b".into()]);
        let mut b = RecordBatch::new(2);
        b.push([&b" x\t"[..], b" NULL"], 0, 2);
        b.push([&b"\\N"[..], b""], 0, 3);
        let (mut trim, _) = Trim::new(&schema, &[]).unwrap();
        trim.process(&mut b).unwrap();
        assert_eq!((b.field(0, 0), b.field(0, 1)), (&b"x"[..], &b"NULL"[..]));
        let (mut nulls, _) =
            NullMarkers::new(&schema, &["".into(), "NULL".into(), "\\N".into()], &[]).unwrap();
        nulls.process(&mut b).unwrap();
        assert_eq!(
            (b.cell(0, 0), b.cell(0, 1), b.cell(1, 0), b.cell(1, 1)),
            (Some(&b"x"[..]), None, None, None)
        );
        assert!(NullMarkers::new(&schema, &[], &["zz".into()]).is_err());
    }
}
