//! Stage specifications: what a job file's `[[stage]]` tables and the CLI's stage flags
//! say, journaled with the run so that `--recover` builds the very same pipeline.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use super::cast::Cast;
use super::clean::{NullMarkers, Trim};
use super::context::{MetaField, RunContext};
use super::dedupe::Dedupe;
use super::expr::{Derive, Filter};
use super::reshape::{Append, Reshape};
use super::Stage;
use crate::schema::{ColumnType, Schema};

/// One stage of the pipeline, as written in a job file (`type = "…"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum StageSpec {
    /// Keep these columns, in this order.
    Select { columns: Vec<String> },
    /// Remove these columns.
    Drop { columns: Vec<String> },
    /// Rename columns: `{ old = "new" }`.
    Rename { columns: BTreeMap<String, String> },
    /// Trim surrounding whitespace (of these columns; of every string column if empty).
    Trim {
        #[serde(default)]
        columns: Vec<String>,
    },
    /// Map marker values to null (in these columns; in every column if empty).
    NullMarkers {
        #[serde(default = "default_markers")]
        markers: Vec<String>,
        #[serde(default)]
        columns: Vec<String>,
    },
    /// Check and convert columns to types: `{ amount = "decimal(12,2)" }`. `format` is a
    /// strftime pattern for dates and timestamps; `timezone` (an IANA name or `+HH:MM`)
    /// applies to timestamps that carry no offset.
    Cast {
        columns: BTreeMap<String, ColumnType>,
        #[serde(default)]
        format: Option<String>,
        #[serde(default)]
        timezone: Option<String>,
    },
    /// Add (or replace) a column computed by an expression.
    Derive { column: String, expr: String },
    /// Keep the rows for which the expression is true.
    Filter { expr: String },
    /// Add a column holding a constant.
    Constant { column: String, value: String },
    /// Add a column holding load metadata.
    Metadata { column: String, field: MetaField },
    /// Keep the first row of each key within the run, or (`scope = "job"`) within every
    /// run of the job, keys of runs older than `retention` forgotten.
    Dedupe {
        key: Vec<String>,
        #[serde(default)]
        scope: DedupeScope,
        #[serde(default)]
        retention: Option<String>,
    },
}

/// How far back a dedupe remembers keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DedupeScope {
    /// The first row of a key within the run
    #[default]
    Run,
    /// The first row of a key within every run of the job (see --dedupe-retention)
    Job,
}

fn default_markers() -> Vec<String> {
    ["", "NULL", "\\N"].map(String::from).to_vec()
}

impl StageSpec {
    /// The stage's type name, as in a job file.
    pub fn kind(&self) -> &'static str {
        match self {
            StageSpec::Select { .. } => "select",
            StageSpec::Drop { .. } => "drop",
            StageSpec::Rename { .. } => "rename",
            StageSpec::Trim { .. } => "trim",
            StageSpec::NullMarkers { .. } => "null_markers",
            StageSpec::Cast { .. } => "cast",
            StageSpec::Derive { .. } => "derive",
            StageSpec::Filter { .. } => "filter",
            StageSpec::Constant { .. } => "constant",
            StageSpec::Metadata { .. } => "metadata",
            StageSpec::Dedupe { .. } => "dedupe",
        }
    }
}

/// Builds the stages in order, each against the schema the previous one produces;
/// returns them with the final schema. Errors name the stage.
pub fn build(
    specs: &[StageSpec],
    input: &Schema,
    ctx: &RunContext,
) -> Result<(Vec<Box<dyn Stage>>, Schema)> {
    let mut schema = input.clone();
    let mut stages: Vec<Box<dyn Stage>> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let named = |e: String| anyhow!("stage {} ({}): {e}", i + 1, spec.kind());
        let (stage, next): (Box<dyn Stage>, Schema) = match spec {
            StageSpec::Select { columns } => {
                boxed(Reshape::select(&schema, columns).map_err(named)?)
            }
            StageSpec::Drop { columns } => boxed(Reshape::drop(&schema, columns).map_err(named)?),
            StageSpec::Rename { columns } => {
                boxed(Reshape::rename(&schema, columns).map_err(named)?)
            }
            StageSpec::Trim { columns } => boxed(Trim::new(&schema, columns).map_err(named)?),
            StageSpec::NullMarkers { markers, columns } => {
                boxed(NullMarkers::new(&schema, markers, columns).map_err(named)?)
            }
            StageSpec::Cast {
                columns,
                format,
                timezone,
            } => boxed(
                Cast::new(&schema, columns, format.as_deref(), timezone.as_deref())
                    .map_err(named)?,
            ),
            StageSpec::Derive { column, expr } => {
                boxed(Derive::new(&schema, column, expr).map_err(named)?)
            }
            StageSpec::Filter { expr } => boxed(Filter::new(&schema, expr).map_err(named)?),
            StageSpec::Constant { column, value } => {
                boxed(Append::constant(&schema, column, value).map_err(named)?)
            }
            StageSpec::Metadata { column, field } => {
                boxed(Append::metadata(&schema, column, *field, ctx).map_err(named)?)
            }
            StageSpec::Dedupe { key, scope, .. } => {
                let stage = Dedupe::new(key, &schema)
                    .map_err(|e| named(e.to_string()))?
                    .expecting(ctx.input_bytes)
                    .keeping_final_state(*scope == DedupeScope::Job);
                (Box::new(stage), schema.clone())
            }
        };
        stages.push(stage);
        schema = next;
    }
    Ok((stages, schema))
}

fn boxed<S: Stage + 'static>((stage, schema): (S, Schema)) -> (Box<dyn Stage>, Schema) {
    (Box::new(stage), schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_file_stage_list_parses_and_unknown_keys_are_refused() {
        #[derive(Deserialize)]
        struct File {
            stage: Vec<StageSpec>,
        }
        let text = r#"
            [[stage]]
            type = "cast"
            columns = { amount = "decimal(12,2)", ts = "timestamp" }
            timezone = "Europe/Paris"
            [[stage]]
            type = "derive"
            column = "dt"
            expr = "date(ts)"
            [[stage]]
            type = "null_markers"
        "#;
        let file: File = toml::from_str(text).unwrap();
        assert_eq!(file.stage.len(), 3);
        assert_eq!(
            file.stage[2],
            StageSpec::NullMarkers {
                markers: default_markers(),
                columns: vec![]
            }
        );
        let err = toml::from_str::<File>("[[stage]]\ntype = \"filter\"\nexpr = \"1\"\nextra = 2\n")
            .err()
            .unwrap();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
    }

    #[test]
    fn build_checks_each_stage_against_the_schema_before_it() {
        let schema = Schema::strings(&["a".into(), "b".into()]);
        let specs = vec![
            StageSpec::Rename {
                columns: [("a".to_string(), "x".to_string())].into(),
            },
            StageSpec::Derive {
                column: "y".into(),
                expr: "x || b".into(),
            },
            StageSpec::Select {
                columns: vec!["y".into(), "x".into()],
            },
        ];
        let (stages, out) = build(&specs, &schema, &RunContext::default()).unwrap();
        assert_eq!(stages.len(), 3);
        assert_eq!(out.names(), vec!["y", "x"]);
        let bad = vec![
            StageSpec::Select {
                columns: vec!["a".into()],
            },
            StageSpec::Filter {
                expr: "b = 'x'".into(),
            },
        ];
        let err = build(&bad, &schema, &RunContext::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("stage 2 (filter): "), "{err}");
        assert!(err.contains("no column \"b\""), "{err}");
    }
}
