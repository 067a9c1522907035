//! Stages that reshape records: select, drop and rename columns; add a constant or a
//! load-metadata column.

use std::collections::BTreeMap;

use anyhow::Result;

use super::context::RunContext;
use super::{rebuild, Stage};
use crate::core::spec::MetaField;

use crate::core::batch::RecordBatch;
use crate::core::schema::{Column, ColumnType, Schema};

/// Select, drop or rename: every output column is one input column.
pub(crate) struct Reshape {
    name: &'static str,
    /// For each output column, its input column.
    from: Vec<usize>,
    identity: bool,
}

impl Reshape {
    fn new(
        name: &'static str,
        input: &Schema,
        from: Vec<usize>,
        output: Schema,
    ) -> (Reshape, Schema) {
        let identity = from.len() == input.len() && from.iter().enumerate().all(|(i, &f)| i == f);
        (
            Reshape {
                name,
                from,
                identity,
            },
            output,
        )
    }

    /// Keep `columns`, in that order.
    pub(crate) fn select(input: &Schema, columns: &[String]) -> Result<(Reshape, Schema), String> {
        let mut from = Vec::new();
        for (i, name) in columns.iter().enumerate() {
            if columns[..i].contains(name) {
                return Err(format!("column {name:?} is selected twice"));
            }
            from.push(input.index(name)?);
        }
        let output = Schema {
            columns: from.iter().map(|&i| input.columns[i].clone()).collect(),
        };
        Ok(Reshape::new("select", input, from, output))
    }

    /// Remove `columns`.
    pub(crate) fn drop(input: &Schema, columns: &[String]) -> Result<(Reshape, Schema), String> {
        for name in columns {
            input.index(name)?;
        }
        let from: Vec<usize> = (0..input.len())
            .filter(|&i| !columns.contains(&input.columns[i].name))
            .collect();
        if from.is_empty() {
            return Err("that would drop every column".into());
        }
        let output = Schema {
            columns: from.iter().map(|&i| input.columns[i].clone()).collect(),
        };
        Ok(Reshape::new("drop", input, from, output))
    }

    /// Rename `old → new`; the data does not move.
    pub(crate) fn rename(
        input: &Schema,
        renames: &BTreeMap<String, String>,
    ) -> Result<(Reshape, Schema), String> {
        let mut output = input.clone();
        for (old, new) in renames {
            let i = input.index(old)?;
            output.columns[i].name = new.clone();
        }
        for (i, c) in output.columns.iter().enumerate() {
            if output.columns[..i].iter().any(|o| o.name == c.name) {
                return Err(format!("two columns would be called {:?}", c.name));
            }
        }
        Ok(Reshape::new(
            "rename",
            input,
            (0..input.len()).collect(),
            output,
        ))
    }
}

impl Stage for Reshape {
    fn name(&self) -> &'static str {
        self.name
    }

    /// No data moves: the batch only gets a new view of its columns.
    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        if !self.identity {
            batch.project(&self.from);
        }
        Ok(())
    }
}

/// What an appended column holds.
enum Source {
    Constant(Vec<u8>),
    Meta(MetaField),
}

/// Adds one column at the end (a constant or load metadata).
pub(crate) struct Append {
    source: Source,
    ctx: RunContext,
}

fn appended(input: &Schema, column: &str, ty: ColumnType) -> Result<Schema, String> {
    if input.index(column).is_ok() {
        return Err(format!("column {column:?} exists already"));
    }
    let mut output = input.clone();
    output.columns.push(Column {
        name: column.to_string(),
        ty,
    });
    Ok(output)
}

impl Append {
    /// A column holding `value` in every row.
    pub(crate) fn constant(
        input: &Schema,
        column: &str,
        value: &str,
    ) -> Result<(Append, Schema), String> {
        let output = appended(input, column, ColumnType::String)?;
        Ok((
            Append {
                source: Source::Constant(value.as_bytes().to_vec()),
                ctx: RunContext::default(),
            },
            output,
        ))
    }

    /// A column holding load metadata.
    pub(crate) fn metadata(
        input: &Schema,
        column: &str,
        field: MetaField,
        ctx: &RunContext,
    ) -> Result<(Append, Schema), String> {
        let ty = match field {
            MetaField::SourceFile | MetaField::RunId => ColumnType::String,
            MetaField::SourceLine => ColumnType::Int,
            MetaField::LoadTime => ColumnType::Timestamp,
        };
        Ok((
            Append {
                source: Source::Meta(field),
                ctx: ctx.clone(),
            },
            appended(input, column, ty)?,
        ))
    }
}

impl Stage for Append {
    fn name(&self) -> &'static str {
        match self.source {
            Source::Constant(_) => "constant",
            Source::Meta(_) => "metadata",
        }
    }

    fn process(&mut self, batch: &mut RecordBatch) -> Result<()> {
        let width = batch.width() + 1;
        let (source, ctx) = (&self.source, &self.ctx);
        let mut line = String::new();
        rebuild(batch, width, |b, row, out| {
            for col in 0..b.width() {
                out.push(b.cell(row, col));
            }
            let value: &[u8] = match source {
                Source::Constant(v) => v,
                Source::Meta(MetaField::SourceFile) => ctx
                    .inputs
                    .get(b.input(row) as usize)
                    .map_or(&b""[..], |p| p.as_bytes()),
                Source::Meta(MetaField::SourceLine) => {
                    line.clear();
                    line.push_str(&b.line(row).to_string());
                    line.as_bytes()
                }
                Source::Meta(MetaField::RunId) => ctx.run_id.as_bytes(),
                Source::Meta(MetaField::LoadTime) => ctx.started_at.as_bytes(),
            };
            out.push(Some(value));
            Ok(())
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> RecordBatch {
        let mut b = RecordBatch::new(3);
        b.push([&b"1"[..], b"x", b"p"], 0, 2);
        b.push([&b"2"[..], b"y", b"q"], 1, 3);
        b
    }

    fn texts(b: &RecordBatch) -> Vec<Vec<String>> {
        (0..b.len())
            .map(|r| {
                (0..b.width())
                    .map(|c| String::from_utf8_lossy(b.field(r, c)).into_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn select_drop_rename_and_append() {
        let schema = Schema::strings(&["id".into(), "v".into(), "w".into()]);
        let (mut s, out) = Reshape::select(&schema, &["w".into(), "id".into()]).unwrap();
        let mut b = batch();
        s.process(&mut b).unwrap();
        assert_eq!(out.names(), ["w", "id"]);
        assert_eq!(texts(&b), [["p", "1"], ["q", "2"]]);

        let (mut d, out) = Reshape::drop(&schema, &["v".into()]).unwrap();
        let mut b = batch();
        d.process(&mut b).unwrap();
        assert_eq!(
            (out.names(), texts(&b)[1].clone()),
            (
                vec!["id".to_string(), "w".into()],
                vec!["2".into(), "q".into()]
            )
        );

        let (_, out) = Reshape::rename(&schema, &[("v".into(), "value".into())].into()).unwrap();
        assert_eq!(out.names(), ["id", "value", "w"]);
        assert!(Reshape::rename(&schema, &[("v".into(), "w".into())].into()).is_err());

        let ctx = RunContext {
            run_id: "R".into(),
            started_at: "T".into(),
            inputs: vec!["a.csv".into(), "b.csv".into()],
            input_bytes: 0,
        };
        let (mut m, out) = Append::metadata(&schema, "src", MetaField::SourceFile, &ctx).unwrap();
        let mut b = batch();
        m.process(&mut b).unwrap();
        assert_eq!(out.names().last().unwrap(), "src");
        assert_eq!(texts(&b)[1][3], "b.csv");
        let (mut l, _) = Append::metadata(&schema, "line", MetaField::SourceLine, &ctx).unwrap();
        let mut b = batch();
        l.process(&mut b).unwrap();
        assert_eq!(texts(&b)[0][3], "2");
    }
}
