//! The columns a staged file holds, in file order, and how each is spelled: CSV header
//! cells, Parquet field names and types, JSON keys.

use crate::core::batch::RecordBatch;
use crate::core::options::Format;
use crate::core::schema::ColumnType;

/// How each body column is written in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JsonKind {
    /// A number or boolean: its canonical text is already valid JSON.
    Raw,
    Text,
}

/// The columns a staged file holds and how to spell them.
#[derive(Debug, Clone)]
pub(crate) struct FileColumns {
    /// Column indices of the batch, in file order.
    pub(crate) cols: Vec<usize>,
    /// CSV header cells (and Parquet field names).
    pub(crate) header: Vec<String>,
    /// Column types (Parquet's typed columns; JSON's numbers and booleans).
    #[cfg_attr(not(feature = "parquet"), allow(dead_code))]
    pub(crate) types: Vec<ColumnType>,
    /// `"name":` per column, JSON-escaped once.
    pub(super) json_keys: Vec<Vec<u8>>,
    pub(super) json_kinds: Vec<JsonKind>,
    /// Parquet field ids, per column (none for a table whose readers match by name).
    #[cfg_attr(not(feature = "parquet"), allow(dead_code))]
    pub(crate) field_ids: Vec<Option<i32>>,
}

impl FileColumns {
    /// About the bytes row `row` takes in a file of `format`: fields, delimiters and the
    /// line end; a JSON line adds its keys, quotes and braces.
    pub(crate) fn row_bytes(&self, batch: &RecordBatch, row: usize, format: Format) -> u64 {
        let mut bytes = 0;
        for &col in &self.cols {
            let field = batch.field(row, col);
            bytes += field.len();
            // A quoted CSV field: two quotes, and each quote inside doubled.
            if format == Format::Csv
                && field
                    .iter()
                    .any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'))
            {
                bytes += 2 + field.iter().filter(|&&b| b == b'"').count();
            }
        }
        bytes += match format {
            Format::Jsonl => {
                self.json_keys.iter().map(Vec::len).sum::<usize>() + 3 * self.cols.len() + 2
            }
            _ => self.cols.len(),
        };
        bytes as u64
    }

    /// A layout for columns `cols` with these names and types.
    /// Gives each column the field id `ids` has for its name (Iceberg's readers match
    /// a data file's columns to the table's by these ids).
    pub(crate) fn set_field_ids(&mut self, ids: &std::collections::BTreeMap<String, i32>) {
        self.field_ids = self.header.iter().map(|n| ids.get(n).copied()).collect();
    }

    pub(crate) fn new(cols: Vec<usize>, names: Vec<String>, types: &[ColumnType]) -> FileColumns {
        let json_keys = names
            .iter()
            .map(|n| {
                let mut key = serde_json::to_vec(n).unwrap_or_else(|_| b"\"\"".to_vec());
                key.push(b':');
                key
            })
            .collect();
        let json_kinds = types
            .iter()
            .map(|t| {
                if t.is_numeric() || matches!(t, ColumnType::Bool | ColumnType::Json) {
                    JsonKind::Raw
                } else {
                    JsonKind::Text
                }
            })
            .collect();
        FileColumns {
            cols,
            header: names,
            types: types.to_vec(),
            json_keys,
            json_kinds,
            field_ids: Vec::new(),
        }
    }
}
