//! The transforms a job asks for, as plain data: the stage specs of the command line and
//! job files, and a job file's `[schema]`. They are journaled with a run; `stage/spec.rs`
//! builds the stages from them.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::core::schema::ColumnType;

/// One stage of the pipeline, as written in a job file (`type = "…"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum StageSpec {
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
pub(crate) enum DedupeScope {
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
    pub(crate) fn kind(&self) -> &'static str {
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

/// What to do with input columns a `[schema]` does not declare.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ExtraColumns {
    /// Fail before loading, naming them.
    #[default]
    Error,
    /// Drop them.
    Drop,
}

/// A `[schema]` section: the input's columns and types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SchemaSpec {
    pub(crate) columns: BTreeMap<String, ColumnType>,
    #[serde(default)]
    pub(crate) extra_columns: ExtraColumns,
}

impl SchemaSpec {
    /// True when the schema declares the column (so its type is the schema's).
    pub(crate) fn declares(&self, column: &str) -> bool {
        self.columns.contains_key(column)
    }

    /// The stages that make the input conform: drop undeclared columns (if allowed),
    /// then cast every declared column that is not a string.
    pub(crate) fn stages_for(&self, header: &[String]) -> Result<Vec<StageSpec>> {
        let missing: Vec<&String> = self
            .columns
            .keys()
            .filter(|c| !header.contains(c))
            .collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "the schema declares column(s) {} that the input lacks (its columns: {})",
                missing
                    .iter()
                    .map(|c| format!("{c:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                header.join(", ")
            );
        }
        let extra: Vec<String> = header
            .iter()
            .filter(|c| !self.columns.contains_key(*c))
            .cloned()
            .collect();
        let mut stages = Vec::new();
        if !extra.is_empty() {
            match self.extra_columns {
                ExtraColumns::Error => anyhow::bail!(
                    "input column(s) {} are not in the schema; declare them, or set \
                     extra_columns = \"drop\" in [schema]",
                    extra
                        .iter()
                        .map(|c| format!("{c:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                ExtraColumns::Drop => stages.push(StageSpec::Drop { columns: extra }),
            }
        }
        let casts: BTreeMap<String, ColumnType> = self
            .columns
            .iter()
            .filter(|(_, ty)| **ty != ColumnType::String)
            .map(|(c, t)| (c.clone(), *t))
            .collect();
        if !casts.is_empty() {
            stages.push(StageSpec::Cast {
                columns: casts,
                format: None,
                timezone: None,
            });
        }
        Ok(stages)
    }
}

/// Load metadata a `metadata` stage can add as a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MetaField {
    /// The input file's path.
    SourceFile,
    /// The line where the record starts in its input.
    SourceLine,
    /// The run's id.
    RunId,
    /// When the run started (the same value for every row, even across recovery).
    LoadTime,
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
}
