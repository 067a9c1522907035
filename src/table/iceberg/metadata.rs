//! An Iceberg table's metadata file (format version 2): the JSON a catalog points at,
//! naming the table's schemas, partition specs, snapshots and properties.
//!
//! Only what `ingest` writes and reads back is modelled; every other key of a metadata
//! file another writer made is kept as it was (`rest`), so a commit of ours never drops
//! what we do not know (statistics files, say, or a sort order with fields).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::schema::{ColumnType, Schema};

/// The first id of a partition field, as the spec reserves (1000 and up).
pub(crate) const FIRST_PARTITION_FIELD_ID: i32 = 1000;

/// The table metadata, as the spec's JSON names it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct TableMetadata {
    pub(crate) format_version: u8,
    pub(crate) table_uuid: String,
    pub(crate) location: String,
    pub(crate) last_sequence_number: i64,
    pub(crate) last_updated_ms: i64,
    pub(crate) last_column_id: i32,
    pub(crate) schemas: Vec<IcebergSchema>,
    pub(crate) current_schema_id: i32,
    pub(crate) partition_specs: Vec<PartitionSpec>,
    pub(crate) default_spec_id: i32,
    pub(crate) last_partition_id: i32,
    #[serde(default)]
    pub(crate) properties: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub(crate) snapshots: Vec<Snapshot>,
    #[serde(default)]
    pub(crate) snapshot_log: Vec<SnapshotLogEntry>,
    #[serde(default)]
    pub(crate) metadata_log: Vec<MetadataLogEntry>,
    #[serde(default)]
    pub(crate) refs: BTreeMap<String, SnapshotRef>,
    /// Every other key, kept as it was.
    #[serde(flatten)]
    pub(crate) rest: BTreeMap<String, Value>,
}

/// A schema: a struct of fields, each with an id unique in the table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct IcebergSchema {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) schema_id: i32,
    pub(crate) fields: Vec<Field>,
    #[serde(flatten)]
    pub(crate) rest: BTreeMap<String, Value>,
}

/// A top-level field of a schema (`ingest` writes no nested types).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Field {
    pub(crate) id: i32,
    pub(crate) name: String,
    pub(crate) required: bool,
    /// A primitive type's name (`long`, `decimal(12, 2)`), or a nested type's JSON.
    #[serde(rename = "type")]
    pub(crate) ty: Value,
    #[serde(flatten)]
    pub(crate) rest: BTreeMap<String, Value>,
}

/// A partition spec: which fields partition the table, by which transform.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct PartitionSpec {
    pub(crate) spec_id: i32,
    pub(crate) fields: Vec<PartitionField>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct PartitionField {
    pub(crate) source_id: i32,
    pub(crate) field_id: i32,
    pub(crate) name: String,
    pub(crate) transform: String,
}

/// A snapshot: the table's files at one commit, through its manifest list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct Snapshot {
    pub(crate) snapshot_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent_snapshot_id: Option<i64>,
    pub(crate) sequence_number: i64,
    pub(crate) timestamp_ms: i64,
    pub(crate) manifest_list: String,
    pub(crate) summary: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) schema_id: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct SnapshotLogEntry {
    pub(crate) snapshot_id: i64,
    pub(crate) timestamp_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct MetadataLogEntry {
    pub(crate) metadata_file: String,
    pub(crate) timestamp_ms: i64,
}

/// A branch or tag; `main` is the table's current state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct SnapshotRef {
    pub(crate) snapshot_id: i64,
    #[serde(rename = "type")]
    pub(crate) kind: String,
    #[serde(flatten)]
    pub(crate) rest: BTreeMap<String, Value>,
}

/// The Iceberg type of a column: the type its Parquet data has (`sink/parquet.rs`), as
/// for Delta. Timestamps are UTC instants, so `timestamptz`.
pub(crate) fn iceberg_type(ty: ColumnType) -> String {
    match ty {
        ColumnType::String | ColumnType::Json => "string".into(),
        ColumnType::Int => "long".into(),
        ColumnType::Float => "double".into(),
        ColumnType::Decimal { precision, scale } => format!("decimal({precision}, {scale})"),
        ColumnType::Bool => "boolean".into(),
        ColumnType::Date => "date".into(),
        ColumnType::Timestamp => "timestamptz".into(),
    }
}

/// The column type of an Iceberg type `ingest` writes (the inverse of
/// [`iceberg_type`]); `None` for one it does not (`int`, `float`, `timestamp` without a
/// zone, nested types), whose data ingest's Parquet would not match.
pub(crate) fn column_type(ty: &Value) -> Option<ColumnType> {
    let text = ty.as_str()?;
    Some(match text {
        "string" => ColumnType::String,
        "long" => ColumnType::Int,
        "double" => ColumnType::Float,
        "boolean" => ColumnType::Bool,
        "date" => ColumnType::Date,
        "timestamptz" => ColumnType::Timestamp,
        _ => {
            let inner = text.strip_prefix("decimal(")?.strip_suffix(')')?;
            let (precision, scale) = inner.split_once(',')?;
            ColumnType::Decimal {
                precision: precision.trim().parse().ok()?,
                scale: scale.trim().parse().ok()?,
            }
        }
    })
}

impl TableMetadata {
    /// A new table at `location`: the load's columns (ids 1 and up, in order, every one
    /// optional: an empty field is a null), identity-partitioned by `partition_by`, with
    /// no snapshot yet.
    pub(crate) fn new(
        uuid: String,
        location: String,
        schema: &Schema,
        partition_by: &[String],
        now_ms: i64,
    ) -> Result<TableMetadata> {
        let fields: Vec<Field> = schema
            .columns
            .iter()
            .zip(1..)
            .map(|(c, id)| Field {
                id,
                name: c.name.clone(),
                required: false,
                ty: Value::String(iceberg_type(c.ty)),
                rest: BTreeMap::new(),
            })
            .collect();
        let mut spec = Vec::new();
        for (name, field_id) in partition_by.iter().zip(FIRST_PARTITION_FIELD_ID..) {
            let Some(source) = fields.iter().find(|f| &f.name == name) else {
                bail!("the partition column {name} is not a column of the load");
            };
            spec.push(PartitionField {
                source_id: source.id,
                field_id,
                name: name.clone(),
                transform: "identity".into(),
            });
        }
        let last_column_id = fields.last().map_or(0, |f| f.id);
        let last_partition_id = spec
            .last()
            .map_or(FIRST_PARTITION_FIELD_ID - 1, |f| f.field_id);
        let mut rest = BTreeMap::new();
        rest.insert(
            "sort-orders".into(),
            serde_json::json!([{ "order-id": 0, "fields": [] }]),
        );
        rest.insert("default-sort-order-id".into(), Value::from(0));
        Ok(TableMetadata {
            format_version: 2,
            table_uuid: uuid,
            location,
            last_sequence_number: 0,
            last_updated_ms: now_ms,
            last_column_id,
            schemas: vec![IcebergSchema {
                kind: "struct".into(),
                schema_id: 0,
                fields,
                rest: BTreeMap::new(),
            }],
            current_schema_id: 0,
            partition_specs: vec![PartitionSpec {
                spec_id: 0,
                fields: spec,
            }],
            default_spec_id: 0,
            last_partition_id,
            properties: BTreeMap::new(),
            current_snapshot_id: None,
            snapshots: Vec::new(),
            snapshot_log: Vec::new(),
            metadata_log: Vec::new(),
            refs: BTreeMap::new(),
            rest,
        })
    }

    /// Reads a metadata file's JSON; refuses a format version `ingest` does not write.
    pub(crate) fn parse(bytes: &[u8]) -> Result<TableMetadata> {
        let mut metadata: TableMetadata =
            serde_json::from_slice(bytes).context("an Iceberg metadata file")?;
        // No snapshot yet, as Java's writer (and catalogs built on it) says it.
        if metadata.current_snapshot_id == Some(-1) {
            metadata.current_snapshot_id = None;
        }
        if metadata.format_version != 2 {
            bail!(
                "Iceberg format version {} (ingest writes version 2 tables)",
                metadata.format_version
            );
        }
        Ok(metadata)
    }

    pub(crate) fn to_json(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec_pretty(self)?)
    }

    /// The current schema.
    pub(crate) fn current_schema(&self) -> Result<&IcebergSchema> {
        self.schemas
            .iter()
            .find(|s| s.schema_id == self.current_schema_id)
            .with_context(|| {
                format!(
                    "the metadata names schema {} as current, and has no such schema",
                    self.current_schema_id
                )
            })
    }

    /// The default partition spec.
    pub(crate) fn default_spec(&self) -> Result<&PartitionSpec> {
        self.partition_specs
            .iter()
            .find(|s| s.spec_id == self.default_spec_id)
            .with_context(|| {
                format!(
                    "the metadata names partition spec {} as default, and has no such spec",
                    self.default_spec_id
                )
            })
    }

    /// The current snapshot and its ancestors, newest first: the table's history as its
    /// main branch sees it (snapshots expired away end the walk).
    pub(crate) fn ancestry(&self) -> impl Iterator<Item = &Snapshot> {
        let mut next = self.current_snapshot_id;
        std::iter::from_fn(move || {
            let id = next?;
            let snapshot = self.snapshots.iter().find(|s| s.snapshot_id == id)?;
            next = snapshot.parent_snapshot_id;
            Some(snapshot)
        })
    }

    /// Makes `snapshot` the table's current one, the child of the current one, with the
    /// next sequence number; the metadata file it replaces (`previous`, if any) goes
    /// into the metadata log.
    pub(crate) fn add_snapshot(
        &mut self,
        mut snapshot: Snapshot,
        previous: Option<&str>,
        now_ms: i64,
    ) {
        snapshot.parent_snapshot_id = self.current_snapshot_id;
        snapshot.sequence_number = self.last_sequence_number + 1;
        snapshot.schema_id = Some(self.current_schema_id);
        self.last_sequence_number = snapshot.sequence_number;
        self.last_updated_ms = now_ms;
        self.current_snapshot_id = Some(snapshot.snapshot_id);
        self.snapshot_log.push(SnapshotLogEntry {
            snapshot_id: snapshot.snapshot_id,
            timestamp_ms: snapshot.timestamp_ms,
        });
        if let Some(file) = previous {
            self.metadata_log.push(MetadataLogEntry {
                metadata_file: file.to_string(),
                timestamp_ms: now_ms,
            });
        }
        self.refs.insert(
            "main".into(),
            SnapshotRef {
                snapshot_id: snapshot.snapshot_id,
                kind: "branch".into(),
                rest: BTreeMap::new(),
            },
        );
        self.snapshots.push(snapshot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schema::Column;

    fn schema() -> Schema {
        Schema {
            columns: vec![
                Column {
                    name: "id".into(),
                    ty: ColumnType::Int,
                },
                Column {
                    name: "amount".into(),
                    ty: ColumnType::Decimal {
                        precision: 12,
                        scale: 2,
                    },
                },
                Column {
                    name: "dt".into(),
                    ty: ColumnType::Date,
                },
            ],
        }
    }

    fn snapshot(id: i64, checkpoint: u64) -> Snapshot {
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: None,
            sequence_number: 0,
            timestamp_ms: 1_000 + id,
            manifest_list: format!("/t/metadata/snap-{id}.avro"),
            summary: BTreeMap::from([
                ("operation".to_string(), "append".to_string()),
                ("ingest.checkpoint".to_string(), checkpoint.to_string()),
            ]),
            schema_id: None,
        }
    }

    #[test]
    fn a_new_table_numbers_its_columns_and_partition_fields_as_the_spec_says() {
        let m = TableMetadata::new("u".into(), "/t".into(), &schema(), &["dt".into()], 5).unwrap();
        let json: Value = serde_json::from_slice(&m.to_json().unwrap()).unwrap();
        assert_eq!(json["format-version"], 2);
        assert_eq!(json["last-column-id"], 3);
        assert_eq!(json["schemas"][0]["fields"][1]["type"], "decimal(12, 2)");
        assert_eq!(json["schemas"][0]["fields"][2]["id"], 3);
        let spec = &json["partition-specs"][0]["fields"][0];
        assert_eq!(spec["source-id"], 3);
        assert_eq!(spec["field-id"], 1000);
        assert_eq!(spec["transform"], "identity");
        assert_eq!(json["last-partition-id"], 1000);
        assert_eq!(json["default-sort-order-id"], 0);
        assert!(json.get("current-snapshot-id").is_none());
        assert!(
            TableMetadata::new("u".into(), "/t".into(), &schema(), &["nope".into()], 5).is_err()
        );
    }

    #[test]
    fn snapshots_chain_into_an_ancestry_with_growing_sequence_numbers() {
        let mut m = TableMetadata::new("u".into(), "/t".into(), &schema(), &[], 5).unwrap();
        m.add_snapshot(snapshot(11, 1), None, 10);
        m.add_snapshot(snapshot(22, 2), Some("/t/metadata/1.json"), 20);
        m.add_snapshot(snapshot(33, 3), Some("/t/metadata/2.json"), 30);
        let ids: Vec<(i64, i64)> = m
            .ancestry()
            .map(|s| (s.snapshot_id, s.sequence_number))
            .collect();
        assert_eq!(ids, [(33, 3), (22, 2), (11, 1)]);
        assert_eq!(m.refs["main"].snapshot_id, 33);
        assert_eq!(m.metadata_log.len(), 2);
        // An expired snapshot ends the walk where it was.
        m.snapshots.retain(|s| s.snapshot_id != 22);
        assert_eq!(m.ancestry().count(), 1);
    }

    #[test]
    fn the_types_ingest_writes_read_back_and_others_do_not() {
        for ty in [
            ColumnType::String,
            ColumnType::Int,
            ColumnType::Float,
            ColumnType::Bool,
            ColumnType::Date,
            ColumnType::Timestamp,
            ColumnType::Decimal {
                precision: 12,
                scale: 2,
            },
        ] {
            assert_eq!(column_type(&Value::String(iceberg_type(ty))), Some(ty));
        }
        for other in ["int", "timestamp", "float", "decimal(12)", "uuid"] {
            assert_eq!(column_type(&Value::from(other)), None, "{other}");
        }
        assert_eq!(column_type(&serde_json::json!({ "type": "list" })), None);
    }

    #[test]
    fn keys_it_does_not_know_survive_a_read_and_a_write() {
        let mut m = TableMetadata::new("u".into(), "/t".into(), &schema(), &[], 5).unwrap();
        m.rest.insert(
            "statistics".into(),
            serde_json::json!([{ "snapshot-id": 1 }]),
        );
        let again = TableMetadata::parse(&m.to_json().unwrap()).unwrap();
        assert_eq!(again, m);
        // A table with no snapshot, as Java's writer says it.
        let mut java: Value = serde_json::from_slice(&m.to_json().unwrap()).unwrap();
        java["current-snapshot-id"] = Value::from(-1);
        let read = TableMetadata::parse(&serde_json::to_vec(&java).unwrap()).unwrap();
        assert_eq!(read.current_snapshot_id, None);
        let mut v1: Value = serde_json::from_slice(&m.to_json().unwrap()).unwrap();
        v1["format-version"] = Value::from(1);
        let err = TableMetadata::parse(&serde_json::to_vec(&v1).unwrap()).unwrap_err();
        assert!(err.to_string().contains("version 1"), "{err}");
    }
}
