//! An Iceberg snapshot's Avro files: the manifest that lists a checkpoint's data files
//! (one entry per file, with its partition tuple), and the manifest list that names
//! every manifest of the snapshot. Written by `apache-avro`, with the field ids of the
//! spec's schemas in each file's embedded Avro schema (readers match fields by id).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use apache_avro::types::{Record, Value};
use apache_avro::{Reader, Schema as AvroSchema, Writer};
use serde_json::json;

use super::metadata::{PartitionSpec, TableMetadata};
use crate::core::schema::ColumnType;

/// A data file a checkpoint adds: where it is, its partition values (as the canonical
/// text of `core/schema.rs`, `None` for a null), rows and bytes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DataFile {
    pub(crate) path: String,
    pub(crate) partition: Vec<Option<String>>,
    pub(crate) records: u64,
    pub(crate) bytes: u64,
}

/// One manifest of a manifest list, as the spec's `manifest_file` struct has it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ManifestFile {
    pub(crate) path: String,
    pub(crate) length: u64,
    pub(crate) spec_id: i32,
    pub(crate) sequence_number: i64,
    pub(crate) min_sequence_number: i64,
    pub(crate) added_snapshot_id: i64,
    pub(crate) added_files: u32,
    pub(crate) existing_files: u32,
    pub(crate) deleted_files: u32,
    pub(crate) added_rows: u64,
    pub(crate) existing_rows: u64,
    pub(crate) deleted_rows: u64,
}

/// The Avro type of a partition value of a column of type `ty` (the spec's Avro type
/// mapping), nullable.
fn partition_value_type(ty: ColumnType) -> serde_json::Value {
    let inner = match ty {
        ColumnType::String | ColumnType::Json => json!("string"),
        ColumnType::Int => json!("long"),
        ColumnType::Float => json!("double"),
        ColumnType::Bool => json!("boolean"),
        ColumnType::Date => json!({ "type": "int", "logicalType": "date" }),
        ColumnType::Timestamp => json!({
            "type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": true
        }),
        ColumnType::Decimal { precision, scale } => json!({
            "type": "fixed",
            "name": format!("decimal_{precision}_{scale}"),
            "size": decimal_bytes(precision),
            "logicalType": "decimal",
            "precision": precision,
            "scale": scale,
        }),
    };
    json!(["null", inner])
}

/// Bytes of a decimal of `precision` digits, as the spec sizes its fixed type: the
/// fewest that hold 10^precision - 1 in two's complement.
fn decimal_bytes(precision: u8) -> usize {
    (1..=16)
        .find(|n: &usize| {
            let bits = 8 * *n as u32 - 1;
            (bits as f64) * std::f64::consts::LOG10_2 >= f64::from(precision)
        })
        .unwrap_or(16)
}

/// The manifest entry schema (format version 2) for a table partitioned by `spec`
/// over columns of `types` (the spec's fields' source types, in order).
fn manifest_entry_schema(spec: &PartitionSpec, types: &[ColumnType]) -> Result<AvroSchema> {
    let partition_fields: Vec<serde_json::Value> = spec
        .fields
        .iter()
        .zip(types)
        .map(|(f, ty)| {
            json!({
                "name": f.name, "type": partition_value_type(*ty), "default": null,
                "field-id": f.field_id,
            })
        })
        .collect();
    let schema = json!({
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            { "name": "status", "type": "int", "field-id": 0 },
            { "name": "snapshot_id", "type": ["null", "long"], "default": null, "field-id": 1 },
            { "name": "sequence_number", "type": ["null", "long"], "default": null, "field-id": 3 },
            { "name": "file_sequence_number", "type": ["null", "long"], "default": null, "field-id": 4 },
            { "name": "data_file", "field-id": 2, "type": {
                "type": "record",
                "name": "r2",
                "fields": [
                    { "name": "content", "type": "int", "field-id": 134 },
                    { "name": "file_path", "type": "string", "field-id": 100 },
                    { "name": "file_format", "type": "string", "field-id": 101 },
                    { "name": "partition", "field-id": 102, "type": {
                        "type": "record", "name": "r102", "fields": partition_fields,
                    }},
                    { "name": "record_count", "type": "long", "field-id": 103 },
                    { "name": "file_size_in_bytes", "type": "long", "field-id": 104 },
                ],
            }},
        ],
    });
    AvroSchema::parse(&schema).context("the manifest entry schema")
}

/// The manifest list schema (format version 2).
fn manifest_list_schema() -> Result<AvroSchema> {
    let schema = json!({
        "type": "record",
        "name": "manifest_file",
        "fields": [
            { "name": "manifest_path", "type": "string", "field-id": 500 },
            { "name": "manifest_length", "type": "long", "field-id": 501 },
            { "name": "partition_spec_id", "type": "int", "field-id": 502 },
            { "name": "content", "type": "int", "field-id": 517 },
            { "name": "sequence_number", "type": "long", "field-id": 515 },
            { "name": "min_sequence_number", "type": "long", "field-id": 516 },
            { "name": "added_snapshot_id", "type": "long", "field-id": 503 },
            { "name": "added_files_count", "type": "int", "field-id": 504 },
            { "name": "existing_files_count", "type": "int", "field-id": 505 },
            { "name": "deleted_files_count", "type": "int", "field-id": 506 },
            { "name": "added_rows_count", "type": "long", "field-id": 512 },
            { "name": "existing_rows_count", "type": "long", "field-id": 513 },
            { "name": "deleted_rows_count", "type": "long", "field-id": 514 },
        ],
    });
    AvroSchema::parse(&schema).context("the manifest list schema")
}

/// A partition value's text as the Avro value of its type.
pub(crate) fn partition_value(ty: ColumnType, text: Option<&str>) -> Result<Value> {
    let Some(text) = text else {
        return Ok(Value::Union(0, Box::new(Value::Null)));
    };
    let bad = || format!("the partition value {text:?} is not a {ty}");
    let value = match ty {
        ColumnType::String | ColumnType::Json => Value::String(text.to_string()),
        ColumnType::Int => Value::Long(text.parse().with_context(bad)?),
        ColumnType::Float => Value::Double(text.parse().with_context(bad)?),
        ColumnType::Bool => Value::Boolean(text.parse().with_context(bad)?),
        ColumnType::Date => {
            let date: jiff::civil::Date = text.parse().with_context(bad)?;
            let days = date
                .since((jiff::Unit::Day, jiff::civil::date(1970, 1, 1)))
                .with_context(bad)?
                .get_days();
            Value::Date(days)
        }
        ColumnType::Timestamp => {
            let at: jiff::Timestamp = text.parse().with_context(bad)?;
            Value::TimestampMicros(at.as_microsecond())
        }
        ColumnType::Decimal { precision, scale } => {
            let mut d: rust_decimal::Decimal = text.parse().with_context(bad)?;
            d.rescale(u32::from(scale));
            if d.scale() != u32::from(scale) {
                bail!("{}", bad());
            }
            let size = decimal_bytes(precision);
            let unscaled = d.mantissa().to_be_bytes();
            Value::Fixed(size, unscaled[16 - size..].to_vec())
        }
    };
    Ok(Value::Union(1, Box::new(value)))
}

/// The manifest of `files`, all added by snapshot `snapshot_id`: its bytes.
pub(crate) fn write_manifest(
    metadata: &TableMetadata,
    types: &[ColumnType],
    snapshot_id: i64,
    files: &[DataFile],
) -> Result<Vec<u8>> {
    let spec = metadata.default_spec()?;
    let schema = manifest_entry_schema(spec, types)?;
    let data_file_schema = match &schema {
        AvroSchema::Record(record) => record
            .lookup
            .get("data_file")
            .map(|&i| &record.fields[i].schema)
            .context("the manifest entry schema has no data_file")?,
        _ => bail!("the manifest entry schema is not a record"),
    };
    let mut writer = Writer::new(&schema, Vec::new());
    let table_schema = serde_json::to_string(metadata.current_schema()?)?;
    let spec_fields = serde_json::to_string(&spec.fields)?;
    for (key, value) in [
        ("schema", table_schema),
        ("schema-id", metadata.current_schema_id.to_string()),
        ("partition-spec", spec_fields),
        ("partition-spec-id", spec.spec_id.to_string()),
        ("format-version", "2".to_string()),
        ("content", "data".to_string()),
    ] {
        writer.add_user_metadata(key.to_string(), value)?;
    }
    for file in files {
        if file.partition.len() != types.len() {
            bail!(
                "{} has {} partition values, the table {}",
                file.path,
                file.partition.len(),
                types.len()
            );
        }
        let partition = Value::Record(
            spec.fields
                .iter()
                .zip(types)
                .zip(&file.partition)
                .map(|((f, ty), v)| Ok((f.name.clone(), partition_value(*ty, v.as_deref())?)))
                .collect::<Result<_>>()?,
        );
        let mut data_file = Record::new(data_file_schema).context("the data_file record")?;
        data_file.put("content", Value::Int(0));
        data_file.put("file_path", Value::String(file.path.clone()));
        data_file.put("file_format", Value::String("PARQUET".into()));
        data_file.put("partition", partition);
        data_file.put("record_count", Value::Long(i64::try_from(file.records)?));
        data_file.put(
            "file_size_in_bytes",
            Value::Long(i64::try_from(file.bytes)?),
        );
        let mut entry = Record::new(&schema).context("the manifest entry record")?;
        entry.put("status", Value::Int(1));
        entry.put(
            "snapshot_id",
            Value::Union(1, Box::new(Value::Long(snapshot_id))),
        );
        // Added entries inherit the snapshot's sequence numbers (null here).
        entry.put("sequence_number", Value::Union(0, Box::new(Value::Null)));
        entry.put(
            "file_sequence_number",
            Value::Union(0, Box::new(Value::Null)),
        );
        entry.put("data_file", data_file);
        writer
            .append(entry)
            .with_context(|| format!("the manifest entry of {}", file.path))?;
    }
    Ok(writer.into_inner()?)
}

/// A manifest list naming `manifests`, for snapshot `snapshot_id`: its bytes.
pub(crate) fn write_manifest_list(
    snapshot_id: i64,
    parent: Option<i64>,
    sequence_number: i64,
    manifests: &[ManifestFile],
) -> Result<Vec<u8>> {
    let schema = manifest_list_schema()?;
    let mut writer = Writer::new(&schema, Vec::new());
    writer.add_user_metadata("snapshot-id".into(), snapshot_id.to_string())?;
    if let Some(parent) = parent {
        writer.add_user_metadata("parent-snapshot-id".into(), parent.to_string())?;
    }
    writer.add_user_metadata("sequence-number".into(), sequence_number.to_string())?;
    writer.add_user_metadata("format-version".into(), "2")?;
    for m in manifests {
        let mut r = Record::new(&schema).context("the manifest_file record")?;
        r.put("manifest_path", Value::String(m.path.clone()));
        r.put("manifest_length", Value::Long(i64::try_from(m.length)?));
        r.put("partition_spec_id", Value::Int(m.spec_id));
        r.put("content", Value::Int(0));
        r.put("sequence_number", Value::Long(m.sequence_number));
        r.put("min_sequence_number", Value::Long(m.min_sequence_number));
        r.put("added_snapshot_id", Value::Long(m.added_snapshot_id));
        r.put(
            "added_files_count",
            Value::Int(i32::try_from(m.added_files)?),
        );
        r.put(
            "existing_files_count",
            Value::Int(i32::try_from(m.existing_files)?),
        );
        r.put(
            "deleted_files_count",
            Value::Int(i32::try_from(m.deleted_files)?),
        );
        r.put(
            "added_rows_count",
            Value::Long(i64::try_from(m.added_rows)?),
        );
        r.put(
            "existing_rows_count",
            Value::Long(i64::try_from(m.existing_rows)?),
        );
        r.put(
            "deleted_rows_count",
            Value::Long(i64::try_from(m.deleted_rows)?),
        );
        writer
            .append(r)
            .with_context(|| format!("the manifest list entry of {}", m.path))?;
    }
    Ok(writer.into_inner()?)
}

/// The manifests a manifest list names (any writer's: fields this module does not
/// write, such as partition summaries, are read past).
pub(crate) fn read_manifest_list(bytes: &[u8]) -> Result<Vec<ManifestFile>> {
    let reader = Reader::new(bytes).context("a manifest list")?;
    let mut out = Vec::new();
    for value in reader {
        let Value::Record(fields) = value.context("a manifest list entry")? else {
            bail!("a manifest list entry is not a record");
        };
        let fields: BTreeMap<String, Value> = fields.into_iter().collect();
        let long = |name: &str| -> Result<i64> {
            match fields.get(name) {
                Some(Value::Long(v)) => Ok(*v),
                Some(Value::Int(v)) => Ok(i64::from(*v)),
                Some(Value::Union(_, v)) => match v.as_ref() {
                    Value::Long(v) => Ok(*v),
                    Value::Int(v) => Ok(i64::from(*v)),
                    // A count a version 2 list must have, missing: never read as 0.
                    _ => bail!("a manifest list entry with no {name}"),
                },
                _ => bail!("a manifest list entry without {name}"),
            }
        };
        let path = match fields.get("manifest_path") {
            Some(Value::String(p)) => p.clone(),
            _ => bail!("a manifest list entry without manifest_path"),
        };
        if long("content")? != 0 {
            bail!("{path} is a delete manifest (ingest appends to tables without deletes)");
        }
        out.push(ManifestFile {
            length: u64::try_from(long("manifest_length")?)?,
            spec_id: i32::try_from(long("partition_spec_id")?)?,
            sequence_number: long("sequence_number")?,
            min_sequence_number: long("min_sequence_number")?,
            added_snapshot_id: long("added_snapshot_id")?,
            added_files: u32::try_from(long("added_files_count")?)?,
            existing_files: u32::try_from(long("existing_files_count")?)?,
            deleted_files: u32::try_from(long("deleted_files_count")?)?,
            added_rows: u64::try_from(long("added_rows_count")?)?,
            existing_rows: u64::try_from(long("existing_rows_count")?)?,
            deleted_rows: u64::try_from(long("deleted_rows_count")?)?,
            path,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schema::{Column, Schema};

    fn table() -> TableMetadata {
        let columns = [
            ("id", ColumnType::Int),
            ("country", ColumnType::String),
            ("dt", ColumnType::Date),
            (
                "amount",
                ColumnType::Decimal {
                    precision: 12,
                    scale: 2,
                },
            ),
        ];
        let schema = Schema {
            columns: columns
                .iter()
                .map(|(name, ty)| Column {
                    name: name.to_string(),
                    ty: *ty,
                })
                .collect(),
        };
        let by = [
            "country".to_string(),
            "dt".to_string(),
            "amount".to_string(),
        ];
        TableMetadata::new("u".into(), "/t".into(), &schema, &by, 0).unwrap()
    }

    const TYPES: [ColumnType; 3] = [
        ColumnType::String,
        ColumnType::Date,
        ColumnType::Decimal {
            precision: 12,
            scale: 2,
        },
    ];

    #[test]
    fn a_manifest_carries_the_spec_field_ids_and_typed_partition_values() {
        let files = [DataFile {
            path: "/t/country=DE/dt=2026-11-28/amount=3.5/part-1.parquet".into(),
            partition: vec![
                Some("DE".into()),
                Some("2026-11-28".into()),
                Some("3.5".into()),
            ],
            records: 7,
            bytes: 1234,
        }];
        let bytes = write_manifest(&table(), &TYPES, 42, &files).unwrap();
        let reader = Reader::new(&bytes[..]).unwrap();
        let header = reader.user_metadata();
        assert_eq!(header["format-version"], b"2");
        assert_eq!(header["content"], b"data");
        let written = serde_json::to_string(reader.writer_schema()).unwrap();
        for id in [0, 1, 2, 100, 102, 103, 104, 134, 1000, 1001, 1002] {
            assert!(
                written.contains(&format!("\"field-id\":{id}")),
                "{id}: {written}"
            );
        }
        let entries: Vec<Value> = reader.map(|v| v.unwrap()).collect();
        assert_eq!(entries.len(), 1);
        let Value::Record(entry) = &entries[0] else {
            panic!("{entries:?}")
        };
        let Value::Record(data_file) = &entry[4].1 else {
            panic!("{entry:?}")
        };
        let Value::Record(partition) = &data_file[3].1 else {
            panic!("{data_file:?}")
        };
        // 2026-11-28 is day 20,785 since 1970-01-01; 3.5 at scale 2 is 350, in 6 bytes.
        assert_eq!(
            partition[1].1,
            Value::Union(1, Box::new(Value::Date(20_785)))
        );
        assert_eq!(
            partition[2].1,
            Value::Union(
                1,
                Box::new(Value::Decimal(apache_avro::Decimal::from(vec![
                    0, 0, 0, 0, 1, 94
                ])))
            )
        );
        assert_eq!(data_file[4].1, Value::Long(7));
    }

    #[test]
    fn a_bad_partition_value_or_a_missing_one_is_refused() {
        let file = |values: Vec<Option<String>>| DataFile {
            path: "p".into(),
            partition: values,
            records: 1,
            bytes: 1,
        };
        let bad_date = file(vec![Some("DE".into()), Some("28.11.2026".into()), None]);
        let err = write_manifest(&table(), &TYPES, 1, &[bad_date]).unwrap_err();
        assert!(format!("{err:#}").contains("not a date"), "{err:#}");
        let short = file(vec![Some("DE".into())]);
        assert!(write_manifest(&table(), &TYPES, 1, &[short]).is_err());
        let nulls = file(vec![None, None, None]);
        assert!(write_manifest(&table(), &TYPES, 1, &[nulls]).is_ok());
    }

    #[test]
    fn a_manifest_list_reads_back_as_written() {
        let manifests = vec![ManifestFile {
            path: "/t/metadata/m1.avro".into(),
            length: 999,
            spec_id: 0,
            sequence_number: 3,
            min_sequence_number: 3,
            added_snapshot_id: 42,
            added_files: 2,
            existing_files: 0,
            deleted_files: 0,
            added_rows: 10,
            existing_rows: 0,
            deleted_rows: 0,
        }];
        let bytes = write_manifest_list(42, Some(41), 3, &manifests).unwrap();
        assert_eq!(read_manifest_list(&bytes).unwrap(), manifests);
        let reader = Reader::new(&bytes[..]).unwrap();
        assert_eq!(reader.user_metadata()["parent-snapshot-id"], b"41");
    }

    #[test]
    fn decimal_sizes_follow_the_spec_table() {
        let sizes: Vec<usize> = [1, 2, 4, 9, 12, 18, 19, 38]
            .into_iter()
            .map(decimal_bytes)
            .collect();
        assert_eq!(sizes, [1, 1, 2, 4, 6, 8, 9, 16]);
    }
}
