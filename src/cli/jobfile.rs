//! Job files (`--config job.toml`): a load's inputs, target, partitioning, schema, stages
//! and error policy in one reviewed file. Command-line flags override its scalar settings.
//!
//! ```toml
//! job = "orders"
//! target = "/data/orders"              # relative paths are relative to this file
//! inputs = ["incoming/orders"]
//! partition_by = ["dt"]
//! max_errors = 100
//!
//! [schema]                             # the input's columns and their types
//! columns = { order_id = "int", amount = "decimal(12,2)", ts = "timestamp" }
//! extra_columns = "error"              # or "drop"
//!
//! [[stage]]
//! type = "derive"
//! column = "dt"
//! expr = "date(ts)"
//! ```
//! An invalid file fails before anything is read, naming the key and its line.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::core::options::Format;
use crate::core::spec::SchemaSpec;
use crate::core::spec::StageSpec;

/// Every top-level key of a job file, with an example value and what it means: the man
/// page's JOB FILE section, checked against the parser by a unit test below.
pub(crate) const KEYS: &[(&str, &str, &str)] = &[
    ("target", "\"/data/orders\"", "the table directory (--target)"),
    ("inputs", "[\"incoming\"]", "files or directories to load, relative to the job file"),
    ("job", "\"orders\"", "the job's name (--job)"),
    ("include", "[\"*.csv\"]", "globs an input below a directory must match one of (--include)"),
    ("exclude", "[\"archive/**\"]", "globs no input below a directory may match (--exclude)"),
    ("min_age", "\"5m\"", "leave inputs modified more recently for a later run (--min-age)"),
    ("partition_by", "[\"dt\"]", "Hive partition columns (--partition-by)"),
    ("delimiter", "\";\"", "the input delimiter, or \"tab\" (--delimiter)"),
    ("checkpoint_rows", "100000", "rows per checkpoint (--checkpoint-rows)"),
    ("max_errors", "10", "bad rows allowed into TABLE/_rejects/ (--max-errors)"),
    ("format", "\"parquet\"", "csv, jsonl or parquet (--format)"),
    ("table_format", "\"delta\"", "hive (directories of files), delta (a Delta Lake table) or iceberg (an Iceberg table) (--table-format)"),
    ("catalog", "\"sqlite:///data/catalog.db\"", "an Iceberg table's catalog (--catalog)"),
    ("table_name", "\"sales.orders\"", "an Iceberg table's name in its catalog (--table-name)"),
    ("compression", "\"zstd\"", "none, gzip, zstd or snappy (--compression)"),
    ("target_file_size", "\"128M\"", "cut part files at about this size (--target-file-size)"),
    ("mode", "\"overwrite-partitions\"", "append or overwrite-partitions (--mode)"),
    ("on_bad_input", "\"quarantine\"", "fail, or set aside an input that cannot load and load the others (--on-bad-input)"),
    ("infer", "false", "false keeps a first Parquet or Delta load's columns as text, not inferred types (--no-infer)"),
    ("evolve", "\"add-columns\"", "let the load add columns to the table contract (--evolve)"),
    ("json_new_keys", "\"drop\"", "JSON lines: a key the sampled objects lacked is an error or dropped (--json-new-keys)"),
    ("dedupe_key", "[\"order_id\"]", "keep the first row of each key in the run (--dedupe-key)"),
    ("dedupe_scope", "\"job\"", "remember the keys of the job's earlier runs too (--dedupe-scope)"),
    ("dedupe_retention", "\"30d\"", "with the job scope, forget keys of runs older than this (--dedupe-retention)"),
    ("[schema]", "columns = { id = \"int\" }", "the input's columns and types; extra_columns = \"drop\" drops undeclared ones"),
    ("[[stage]]", "type = \"filter\"", "a stage: null_markers, trim, cast, derive, filter, constant, metadata, dedupe, rename, select, drop"),
];

/// A parsed job file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobFile {
    pub(crate) target: Option<PathBuf>,
    #[serde(default)]
    pub(crate) inputs: Vec<PathBuf>,
    pub(crate) job: Option<String>,
    /// Globs that choose the inputs below the directories (--include, --exclude).
    #[serde(default)]
    pub(crate) include: Vec<String>,
    #[serde(default)]
    pub(crate) exclude: Vec<String>,
    /// An input modified more recently waits for a later run (--min-age).
    pub(crate) min_age: Option<String>,
    #[serde(default)]
    pub(crate) partition_by: Vec<String>,
    pub(crate) delimiter: Option<String>,
    pub(crate) checkpoint_rows: Option<u64>,
    pub(crate) max_errors: Option<u64>,
    pub(crate) format: Option<Format>,
    pub(crate) table_format: Option<crate::core::options::TableFormat>,
    pub(crate) catalog: Option<String>,
    pub(crate) table_name: Option<String>,
    pub(crate) compression: Option<crate::core::options::Compression>,
    pub(crate) target_file_size: Option<String>,
    pub(crate) mode: Option<crate::core::options::Mode>,
    /// `fail` (default) or `quarantine` (--on-bad-input).
    pub(crate) on_bad_input: Option<crate::core::options::OnBadInput>,
    /// JSON lines: `error` (default) or `drop` for keys the sample did not have.
    pub(crate) json_new_keys: Option<crate::core::options::NewKeys>,
    /// `false`: a first Parquet or Delta load keeps its columns as text (--no-infer).
    pub(crate) infer: Option<bool>,
    /// How the load may change the table's contract (`add-columns`).
    pub(crate) evolve: Option<crate::core::options::Evolve>,
    #[serde(default)]
    pub(crate) dedupe_key: Vec<String>,
    /// `run` (default) or `job` (--dedupe-scope).
    pub(crate) dedupe_scope: Option<crate::core::spec::DedupeScope>,
    /// With the job scope: forget keys of runs older than this (--dedupe-retention).
    pub(crate) dedupe_retention: Option<String>,
    pub(crate) schema: Option<SchemaSpec>,
    #[serde(default, rename = "stage")]
    pub(crate) stages: Vec<StageSpec>,
}

/// The first `[[stage]]` table that is not a stage, by its number and line: serde reads
/// the tagged stage enum through a buffer, so the parser's own error points at the
/// first `[[stage]]` whichever one is wrong.
fn stage_error(text: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let stages = table.get("stage")?.as_array()?;
    let (index, err) = stages
        .iter()
        .enumerate()
        .find_map(|(i, stage)| StageSpec::deserialize(stage.clone()).err().map(|e| (i, e)))?;
    if index == 0 {
        // The parser's own error points there, often at the very line.
        return None;
    }
    let line = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("[[stage]]"))
        .nth(index)
        .map_or(String::new(), |(n, _)| format!(" (line {})", n + 1));
    Some(format!(
        "[[stage]] number {}{line}: {}",
        index + 1,
        err.to_string().trim_end()
    ))
}

/// Reads and checks a job file; relative paths in it are made relative to its folder.
pub(crate) fn load(path: &Path) -> Result<JobFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let mut file: JobFile = toml::from_str(&text).map_err(|e| {
        let why = stage_error(&text).unwrap_or_else(|| e.to_string().trim_end().to_string());
        let msg = format!("job file {} is invalid: {why}", path.display());
        anyhow::Error::new(crate::core::error::UsageError(msg))
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &PathBuf| {
        if crate::core::url::is_url_path(p) {
            p.clone()
        } else {
            base.join(p)
        }
    };
    file.target = file.target.as_ref().map(resolve);
    file.inputs = file.inputs.iter().map(resolve).collect();
    Ok(file)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_documented_key_is_one_the_parser_takes() {
        let mut text = String::new();
        let mut tables = String::new();
        for (key, example, _) in super::KEYS {
            match *key {
                "[schema]" => tables.push_str(&format!("[schema]\n{example}\n")),
                "[[stage]]" => tables.push_str(&format!("[[stage]]\n{example}\nexpr = \"TRUE\"\n")),
                key => text.push_str(&format!("{key} = {example}\n")),
            }
        }
        text.push_str(&tables);
        let parsed: Result<JobFile, _> = toml::from_str(&text);
        assert!(parsed.is_ok(), "{text}\n{parsed:?}");
    }

    #[test]
    fn every_key_the_parser_takes_is_documented() {
        // serde names every field it expects when it meets one it does not.
        let err = toml::from_str::<JobFile>("no_such_key = 1\n")
            .expect_err("an unknown key is refused")
            .to_string();
        let expected = err
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("serde lists the fields: {err}"));
        let documented: Vec<&str> = super::KEYS
            .iter()
            .map(|(k, _, _)| k.trim_matches(['[', ']']))
            .collect();
        let fields: Vec<&str> = expected
            .split(", ")
            .map(|f| f.trim().trim_matches('`'))
            .collect();
        assert!(fields.len() > 10, "{fields:?}");
        for field in fields {
            assert!(
                documented.contains(&field),
                "job-file key {field} is not in KEYS"
            );
        }
    }

    use super::*;

    fn parse(text: &str) -> Result<JobFile> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("job.toml");
        std::fs::write(&path, text)?;
        load(&path)
    }

    #[test]
    fn an_error_in_a_later_stage_names_that_stage_and_its_line() {
        let err = parse(
            "[[stage]]\ntype = \"trim\"\n[[stage]]\ntype = \"trim\"\n[[stage]]\ntype = \"cast\"\ncolumns = { id = 5 }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("[[stage]] number 3 (line 5)"), "{err}");
    }

    #[test]
    fn a_full_job_file_parses() {
        let file = parse(
            r#"
            job = "orders"
            inputs = ["in"]
            partition_by = ["dt"]
            max_errors = 5
            format = "csv"
            [schema]
            columns = { id = "int", amount = "decimal(12,2)" }
            [[stage]]
            type = "filter"
            expr = "amount > 0"
            "#,
        )
        .unwrap();
        assert_eq!(file.job.as_deref(), Some("orders"));
        assert!(file.inputs[0].ends_with("in") && file.inputs[0].is_absolute());
        assert_eq!(
            file.schema.unwrap().columns["amount"].to_string(),
            "decimal(12,2)"
        );
        assert_eq!(file.stages.len(), 1);
    }

    #[test]
    fn mistakes_name_the_key_and_line() {
        let err = format!(
            "{:#}",
            parse("job = \"x\"\n\npartition_bye = [\"dt\"]\n").unwrap_err()
        );
        assert!(
            err.contains("line 3") && err.contains("partition_bye"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            parse("[schema]\ncolumns = { id = \"integr\" }\n").unwrap_err()
        );
        assert!(
            err.contains("line 2") && err.contains("unknown type"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            parse("[[stage]]\ntype = \"explode\"\n").unwrap_err()
        );
        assert!(err.contains("line 2") && err.contains("explode"), "{err}");
    }
}
