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

/// The inferred `[schema]` section, as TOML.
pub fn infer(inputs: &[std::path::PathBuf], delimiter: u8) -> Result<String> {
    let files = discover::discover(
        inputs,
        Path::new("/nonexistent/ingest-table"),
        &crate::source::select::Selection::default(),
    )?;
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
                if text.is_empty() {
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
    let mut out = String::from(
        "[schema]\n# inferred from the first rows of the inputs; check before use\ncolumns = {",
    );
    for (i, name) in columns.iter().enumerate() {
        let ty = if seen[i] {
            fits[i].iter().position(|&f| f).map(|k| CANDIDATES[k])
        } else {
            None
        };
        let ty = ty.unwrap_or(ColumnType::String);
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
    Ok(out)
}
