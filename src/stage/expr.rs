//! Expression stages: `derive` a column, `filter` rows (see `crate::core::expr` for the
//! language). A row whose expression fails at run time is a bad row.

use anyhow::Result;

use super::{set_aside, Stage};
use crate::core::batch::{self, RecordBatch, Reject};
use crate::core::expr::{Expr, Value};
use crate::core::schema::{Column, Schema};

fn compile(text: &str, schema: &Schema) -> Result<Expr, String> {
    Expr::compile(text, schema).map_err(|e| e.render(text))
}

/// Adds a column computed by an expression, or replaces the column of that name.
pub(crate) struct Derive {
    expr: Expr,
    /// The column replaced, or `None` to append.
    replace: Option<usize>,
    text: String,
}

impl Derive {
    /// `column = expr` over `schema`.
    pub(crate) fn new(
        schema: &Schema,
        column: &str,
        text: &str,
    ) -> Result<(Derive, Schema), String> {
        let expr = compile(text, schema)?;
        let mut output = schema.clone();
        let ty = expr.ty().column_type();
        let replace = schema.index(column).ok();
        match replace {
            Some(i) => output.columns[i].ty = ty,
            None => output.columns.push(Column {
                name: column.to_string(),
                ty,
            }),
        }
        Ok((
            Derive {
                expr,
                replace,
                text: text.to_string(),
            },
            output,
        ))
    }
}

impl Stage for Derive {
    fn name(&self) -> &'static str {
        "derive"
    }

    /// Writes only the new column; the others are not copied.
    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        let mut values = batch::Column::with_rows(batch.len());
        let mut bad = Vec::new();
        let mut text = Vec::new();
        for row in 0..batch.len() {
            text.clear();
            match self.expr.eval_text(batch, row, &mut text) {
                Ok(present) => values.push(present.then_some(text.as_slice())),
                Err(e) => {
                    values.push(None);
                    bad.push((row, format!("{}: {e}", self.text)));
                }
            }
        }
        let replace = self.replace;
        set_aside(batch, bad, |b| match replace {
            Some(col) => b.replace_column(col, values),
            None => b.add_column(values),
        });
        Ok(())
    }
}

/// Keeps the rows for which an expression is true (false and null drop the row).
pub(crate) struct Filter {
    expr: Expr,
    text: String,
    keep: Vec<bool>,
}

impl Filter {
    /// `expr` over `schema`, which must be a bool.
    pub(crate) fn new(schema: &Schema, text: &str) -> Result<(Filter, Schema), String> {
        let expr = compile(text, schema)?;
        if !matches!(
            expr.ty(),
            crate::core::expr::Ty::Bool | crate::core::expr::Ty::Null
        ) {
            return Err(format!(
                "the filter {text:?} is not a condition (it gives a {:?})",
                expr.ty()
            ));
        }
        Ok((
            Filter {
                expr,
                text: text.to_string(),
                keep: Vec::new(),
            },
            schema.clone(),
        ))
    }
}

impl Stage for Filter {
    fn name(&self) -> &'static str {
        "filter"
    }

    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        self.keep.clear();
        let mut rejects = Vec::new();
        for row in 0..batch.len() {
            match self.expr.eval(batch, row) {
                Ok(Value::Bool(true)) => self.keep.push(true),
                Ok(_) => self.keep.push(false),
                Err(e) => {
                    self.keep.push(false);
                    rejects.push(Reject {
                        input: batch.input(row),
                        line: batch.line(row),
                        reason: format!("filter {}: {e}", self.text),
                        record: batch.encode_row(row),
                    });
                }
            }
        }
        batch.rejects.extend(rejects);
        batch.retain(&self.keep);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schema::ColumnType;
    use crate::stage::cast::Cast;
    use proptest::prelude::*;

    fn schema() -> Schema {
        Schema {
            columns: vec![
                Column {
                    name: "id".into(),
                    ty: "int".parse().unwrap(),
                },
                Column {
                    name: "ts".into(),
                    ty: "timestamp".parse().unwrap(),
                },
            ],
        }
    }

    fn batch() -> RecordBatch {
        let mut b = RecordBatch::new(2);
        b.push([&b"1"[..], b"2026-11-28T23:00:00Z"], 0, 2);
        b.push([&b"0"[..], b"2026-11-29T01:00:00Z"], 0, 3);
        b.push([&b"5"[..], b"2026-11-30T01:00:00Z"], 0, 4);
        b
    }

    #[test]
    fn derive_appends_typed_columns_and_rejects_failing_rows() {
        let (mut d, out) = Derive::new(&schema(), "dt", "date(ts)").unwrap();
        assert_eq!(out.columns[2].ty.to_string(), "date");
        let mut b = batch();
        d.process(&mut b).unwrap();
        assert_eq!(b.field(1, 2), b"2026-11-29");
        let (mut ratio, _) = Derive::new(&schema(), "r", "10 / id").unwrap();
        let mut b = batch();
        ratio.process(&mut b).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b.rejects.len(), 1);
        assert_eq!(b.rejects[0].line, 3);
        assert!(
            b.rejects[0].reason.contains("division by zero"),
            "{}",
            b.rejects[0].reason
        );
    }

    #[test]
    fn filter_keeps_true_rows_and_rejects_errors() {
        let (mut f, _) = Filter::new(&schema(), "10 / id > 2 AND date(ts) < '2026-11-30'").unwrap();
        let mut b = batch();
        f.process(&mut b).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b.field(0, 0), b"1");
        assert_eq!(b.rejects.len(), 1);
        assert!(Filter::new(&schema(), "id + 1").is_err());
    }

    proptest! {
        /// After `cast`, `derive dt = date(ts)` trusts a column cast found canonical and
        /// checks any other: either way every row gets the date `eval` computes, and
        /// only an all-canonical batch is marked (so both paths are taken here).
        #[test]
        fn date_after_cast_is_the_same_whether_or_not_the_column_is_marked(
            values in prop::collection::vec(prop_oneof![
                4 => (-62_135_596_800i64..253_402_207_200)
                    .prop_map(|s| jiff::Timestamp::from_second(s).unwrap().to_string()),
                1 => prop_oneof![
                    Just("2026-11-28T23:30:00+01:00"),
                    Just("2026-11-28 23:30:00"),
                    Just("2026-11-28T23:30:00.25Z"),
                    Just(""),
                    Just("not a time"),
                ].prop_map(String::from),
            ], 1..8),
        ) {
            let mut b = RecordBatch::new(2);
            for (i, v) in values.iter().enumerate() {
                b.push([&b"1"[..], v.as_bytes()], 0, i as u64 + 2);
            }
            let strings = Schema::strings(&["id".to_string(), "ts".to_string()]);
            let casts = [("ts".to_string(), ColumnType::Timestamp)].into();
            let (mut cast, typed) = Cast::new(&strings, &casts, None, None).unwrap();
            cast.process(&mut b).unwrap();
            // An empty value is not canonical: cast turns it into a null.
            let all_canonical = values
                .iter()
                .all(|v| crate::core::canonical::timestamp_date(v.as_bytes()).is_some());
            prop_assert_eq!(b.is_canonical(1, ColumnType::Timestamp), all_canonical);
            let expr = Expr::compile("date(ts)", &typed).unwrap();
            for row in 0..b.len() {
                let mut fast = Vec::new();
                let got = expr.eval_text(&b, row, &mut fast).map(|present| (present, fast));
                let want = expr.eval(&b, row).map(|v| {
                    let mut slow = Vec::new();
                    (v.write_text(&mut slow), slow)
                });
                prop_assert_eq!(got, want);
            }
        }
    }
}
