//! `--infer-schema`: reads the first rows of the inputs and prints a `[schema]` section
//! for a job file, with the narrowest type every non-empty sample value fits.

use std::path::Path;

use anyhow::{bail, Result};

use crate::schema::ColumnType;
use crate::source::reader::InputReader;
use crate::source::{discover, read_header};
use crate::stage::cast::Caster;

/// Rows sampled from each input.
const SAMPLE_ROWS: usize = 1000;

/// Candidate types, narrowest first.
/// `bool` comes after the numbers, so a column of 0s and 1s stays a number.
const CANDIDATES: [ColumnType; 5] = [
    ColumnType::Int,
    ColumnType::Float,
    ColumnType::Bool,
    ColumnType::Date,
    ColumnType::Timestamp,
];

/// The inferred `[schema]` section, as TOML. A value in `null_markers` (as
/// `--null-markers` takes them) is null, as an empty one is: it votes for no type.
/// JSON lines inputs are typed by the load's own sample (`jsonl.rs`): numbers, booleans,
/// and `json` for nested objects and arrays.
pub fn infer(
    inputs: &[std::path::PathBuf],
    delimiter: u8,
    null_markers: &[String],
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
    let casters: Vec<Caster> = CANDIDATES
        .iter()
        .map(|ty| Caster::new(*ty, None, None))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    let mut columns: Vec<String> = Vec::new();
    // For each column, which candidates every value so far fits.
    let mut fits: Vec<[bool; 5]> = Vec::new();
    let mut seen: Vec<bool> = Vec::new();
    for file in &files {
        let mut reader = InputReader::open_input(file, delimiter)?;
        let Some(header) = read_header(&mut reader)? else {
            continue;
        };
        if columns.is_empty() {
            columns = header.clone();
            fits = vec![[true; 5]; columns.len()];
            seen = vec![false; columns.len()];
        }
        for _ in 0..SAMPLE_ROWS {
            if !reader.read_record()? {
                break;
            }
            for (i, value) in reader.fields().enumerate() {
                let Some(col) = columns.iter().position(|c| Some(c) == header.get(i)) else {
                    continue;
                };
                let text = String::from_utf8_lossy(value);
                if text.is_empty() || null_markers.iter().any(|m| *m == text) {
                    continue;
                }
                seen[col] = true;
                for (k, caster) in casters.iter().enumerate() {
                    fits[col][k] = fits[col][k] && caster.cast(&text).is_ok();
                }
            }
        }
    }
    if columns.is_empty() {
        bail!("the inputs hold no header to infer a schema from");
    }
    let typed: Vec<(String, ColumnType)> = columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let ty = if seen[i] {
                fits[i].iter().position(|&f| f).map(|k| CANDIDATES[k])
            } else {
                None
            };
            (name.clone(), ty.unwrap_or(ColumnType::String))
        })
        .collect();
    Ok(schema_toml(&typed))
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
