//! A checkpoint's data files as Delta `add` actions: the path relative to the table, the
//! partition values read back from the Hive directory names the sink gave the file, its
//! size and its row count (the `numRecords` statistic readers use to count without
//! opening a file).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use deltalake::kernel::{Add, DataType, StructField};

use crate::core::records::Checkpoint;
use crate::sink::partition::values_of;

/// The `add` actions of a checkpoint's data files (its rejects file stays outside the
/// table). `fields` are the table's, for the partition columns' types.
pub(crate) fn adds(
    checkpoint: &Checkpoint,
    partition_by: &[String],
    fields: &[StructField],
) -> Result<Vec<Add>> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut adds = Vec::new();
    for file in checkpoint.files.iter().filter(|f| !f.is_rejects()) {
        let partition_values = partition_values(&file.dest, partition_by, fields)?;
        adds.push(Add {
            path: file.dest.clone(),
            partition_values,
            size: i64::try_from(file.size)?,
            modification_time: now,
            data_change: true,
            stats: Some(format!("{{\"numRecords\":{}}}", file.rows)),
            ..Default::default()
        });
    }
    Ok(adds)
}

/// The partition values of the file at `dest` (`a=1/b=x%2Fy/part-….parquet`), by
/// column, as the Delta protocol writes them: the default partition as null.
fn partition_values(
    dest: &str,
    partition_by: &[String],
    fields: &[StructField],
) -> Result<HashMap<String, Option<String>>> {
    let mut values = HashMap::new();
    for (column, value) in partition_by.iter().zip(values_of(dest, partition_by)?) {
        let value = match value {
            None => None,
            Some(text) => {
                let ty = fields
                    .iter()
                    .find(|f| f.name() == column)
                    .map(|f| f.data_type());
                Some(delta_text(&text, ty)?)
            }
        };
        values.insert(column.clone(), value);
    }
    Ok(values)
}

/// A partition value as the Delta protocol writes its type: timestamps as
/// `YYYY-MM-DD HH:MM:SS.ffffff` in UTC (ingest's canonical form is RFC 3339, which not
/// every reader parses in a partition value); every other type's canonical text already
/// is Delta's.
fn delta_text(text: &str, ty: Option<&DataType>) -> Result<String> {
    if ty == Some(&DataType::TIMESTAMP) {
        let at: jiff::Timestamp = text
            .parse()
            .map_err(|e| anyhow::anyhow!("timestamp partition value {text:?}: {e}"))?;
        return Ok(at.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string());
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::protocol::{Position, StagedFile};

    fn checkpoint(dests: &[&str]) -> Checkpoint {
        Checkpoint {
            checkpoint: 1,
            position: Position {
                input: 0,
                offset: 0,
                lines: 0,
                prefix_hash: String::new(),
            },
            columns: Vec::new(),
            inputs_done: Vec::new(),
            snapshots: Vec::new(),
            files: dests
                .iter()
                .map(|d| StagedFile {
                    staged: "pending/x".into(),
                    dest: d.to_string(),
                    size: 100,
                    rows: 7,
                    upload: None,
                })
                .collect(),
            rows_read: 7,
            rows_written: 7,
            rejects: 0,
            last: true,
        }
    }

    fn field(name: &str, ty: DataType) -> StructField {
        StructField::new(name, ty, true)
    }

    #[test]
    fn partition_values_are_read_back_from_the_hive_path() {
        let fields = [
            field("c", DataType::STRING),
            field("at", DataType::TIMESTAMP),
        ];
        let by = ["c".to_string(), "at".to_string()];
        let adds = adds(
            &checkpoint(&[
                "c=a%2Fb/at=2026-11-28T10%3A00%3A00Z/part-1.parquet",
                "c=__HIVE_DEFAULT_PARTITION__/at=2026-11-28T10%3A00%3A00.5Z/part-2.parquet",
                "_rejects/default/x.csv",
            ]),
            &by,
            &fields,
        )
        .unwrap();
        assert_eq!(adds.len(), 2, "the rejects file is no table data");
        assert_eq!(adds[0].partition_values["c"].as_deref(), Some("a/b"));
        assert_eq!(
            adds[0].partition_values["at"].as_deref(),
            Some("2026-11-28 10:00:00.000000")
        );
        assert_eq!(adds[1].partition_values["c"], None);
        assert_eq!(
            adds[1].partition_values["at"].as_deref(),
            Some("2026-11-28 10:00:00.500000")
        );
        assert_eq!(adds[0].stats.as_deref(), Some("{\"numRecords\":7}"));
        assert!(adds.iter().all(|a| a.data_change && a.size == 100));
    }

    #[test]
    fn a_path_that_does_not_match_the_partitioning_is_an_error() {
        let fields = [field("c", DataType::STRING)];
        let by = ["c".to_string()];
        assert!(adds(&checkpoint(&["part-1.parquet"]), &by, &fields).is_err());
        assert!(adds(&checkpoint(&["d=1/part-1.parquet"]), &by, &fields).is_err());
        assert!(adds(&checkpoint(&["c/part-1.parquet"]), &by, &fields).is_err());
        assert!(adds(&checkpoint(&["part-1.parquet"]), &[], &fields).is_ok());
    }
}
