//! Column types and schemas: what the cast stage checks, what expressions are typed
//! against, and what a job file's `[schema]` declares.
//!
//! Every typed value travels as text in its canonical form (`int` as `-12`, `decimal(9,2)`
//! as `3.50`, `date` as `2026-11-28`, `timestamp` as RFC 3339 in UTC), so CSV output needs
//! no conversion and a value is parsed again only where an expression reads it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub(crate) enum ColumnType {
    String,
    Int,
    Float,
    /// Fixed point with `precision` digits, `scale` of them after the point.
    Decimal {
        precision: u8,
        scale: u8,
    },
    Bool,
    Date,
    Timestamp,
    /// A JSON value (an object or an array, say) kept as its JSON text: written as JSON
    /// into JSON lines, as text into CSV and Parquet.
    Json,
}

impl ColumnType {
    /// True for `int`, `float` and `decimal`.
    pub(crate) fn is_numeric(self) -> bool {
        matches!(
            self,
            ColumnType::Int | ColumnType::Float | ColumnType::Decimal { .. }
        )
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnType::String => f.write_str("string"),
            ColumnType::Int => f.write_str("int"),
            ColumnType::Float => f.write_str("float"),
            ColumnType::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            ColumnType::Bool => f.write_str("bool"),
            ColumnType::Date => f.write_str("date"),
            ColumnType::Timestamp => f.write_str("timestamp"),
            ColumnType::Json => f.write_str("json"),
        }
    }
}

impl FromStr for ColumnType {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        let simple = match t.as_str() {
            "string" | "text" | "varchar" => Some(ColumnType::String),
            "int" | "integer" | "bigint" => Some(ColumnType::Int),
            "float" | "double" => Some(ColumnType::Float),
            "bool" | "boolean" => Some(ColumnType::Bool),
            "date" => Some(ColumnType::Date),
            "timestamp" => Some(ColumnType::Timestamp),
            "json" => Some(ColumnType::Json),
            _ => None,
        };
        if let Some(ty) = simple {
            return Ok(ty);
        }
        let args = t
            .strip_prefix("decimal(")
            .and_then(|rest| rest.strip_suffix(')'))
            .ok_or_else(|| format!("unknown type {text:?} (string, int, float, decimal(P,S), bool, date, timestamp)"))?;
        let (p, s) = args
            .split_once(',')
            .ok_or_else(|| format!("{text:?}: write decimal(PRECISION,SCALE)"))?;
        let precision: u8 = p
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: bad precision"))?;
        let scale: u8 = s
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: bad scale"))?;
        if precision == 0 || precision > 38 || scale > precision {
            return Err(format!(
                "{text:?}: need 1 <= precision <= 38 and scale <= precision"
            ));
        }
        Ok(ColumnType::Decimal { precision, scale })
    }
}

impl TryFrom<String> for ColumnType {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<ColumnType> for String {
    fn from(ty: ColumnType) -> String {
        ty.to_string()
    }
}

/// One column of a schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Column {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) ty: ColumnType,
}

/// The columns of the records at one point of the pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Schema {
    pub(crate) columns: Vec<Column>,
}

impl Schema {
    /// All-string columns with these names (what a CSV header gives).
    pub(crate) fn strings(names: &[String]) -> Schema {
        Schema {
            columns: names
                .iter()
                .map(|n| Column {
                    name: n.clone(),
                    ty: ColumnType::String,
                })
                .collect(),
        }
    }

    /// The index of a column, or an error that lists the columns there are.
    pub(crate) fn index(&self, name: &str) -> Result<usize, String> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| format!("no column {name:?} (columns: {})", self.names().join(", ")))
    }

    /// The column names, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.columns.iter().map(|c| c.name.clone()).collect()
    }

    /// Number of columns.
    pub(crate) fn len(&self) -> usize {
        self.columns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse_and_print_round_trip() {
        for text in [
            "string",
            "int",
            "float",
            "decimal(12,2)",
            "bool",
            "date",
            "timestamp",
        ] {
            let ty: ColumnType = text.parse().unwrap();
            assert_eq!(ty.to_string(), text);
        }
        assert_eq!(
            "DECIMAL( 5 , 0 )".parse::<ColumnType>().unwrap(),
            ColumnType::Decimal {
                precision: 5,
                scale: 0
            }
        );
        assert!("decimal(2,3)".parse::<ColumnType>().is_err());
        assert!("money"
            .parse::<ColumnType>()
            .unwrap_err()
            .contains("unknown type"));
    }
}
