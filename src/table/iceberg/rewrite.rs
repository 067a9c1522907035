//! Taking data files out of an Iceberg table (`--abort`, `--mode overwrite-partitions`):
//! each manifest of the current snapshot that lists a file to remove is written again,
//! with that file's entry marked DELETED by the new snapshot and every other live entry
//! kept as EXISTING; manifests with nothing to remove are carried over as they are.
//!
//! A manifest is rewritten in the Avro schema it was written in (another writer's, with
//! column statistics, say, is kept whole), and an entry's inherited values (the snapshot
//! id and sequence numbers an ADDED entry leaves null, to take from its manifest list
//! entry) are written out, as the spec requires of an entry that is no longer ADDED.

use anyhow::{bail, Context, Result};
use apache_avro::types::Value;
use apache_avro::{Reader, Writer};

use super::manifest::ManifestFile;
use super::table::Table;

const EXISTING: i32 = 0;
const ADDED: i32 = 1;
const DELETED: i32 = 2;

/// A live data file of a manifest: its location, partition values and size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LiveFile {
    pub(crate) path: String,
    /// The partition tuple's values, by field name, as the manifest has them.
    pub(crate) partition: Vec<(String, Value)>,
    pub(crate) records: u64,
    pub(crate) bytes: u64,
}

/// What a rewrite removed and left.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Counts {
    pub(crate) deleted_files: u64,
    pub(crate) deleted_rows: u64,
    pub(crate) deleted_bytes: u64,
}

fn field<'a>(fields: &'a [(String, Value)], name: &str) -> Result<&'a Value> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .with_context(|| format!("a manifest entry without {name}"))
}

fn field_mut<'a>(fields: &'a mut [(String, Value)], name: &str) -> Result<&'a mut Value> {
    fields
        .iter_mut()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .with_context(|| format!("a manifest entry without {name}"))
}

fn long(value: &Value) -> Option<i64> {
    match value {
        Value::Long(v) => Some(*v),
        Value::Int(v) => Some(i64::from(*v)),
        Value::Union(_, inner) => long(inner),
        _ => None,
    }
}

/// The live file an entry names, and its status.
fn live_file(entry: &[(String, Value)]) -> Result<(i32, LiveFile)> {
    let status = match field(entry, "status")? {
        Value::Int(s) => *s,
        other => bail!("a manifest entry's status is {other:?}"),
    };
    let Value::Record(file) = field(entry, "data_file")? else {
        bail!("a manifest entry's data_file is not a record");
    };
    let path = match field(file, "file_path")? {
        Value::String(p) => p.clone(),
        other => bail!("a data file's path is {other:?}"),
    };
    let partition = match field(file, "partition")? {
        Value::Record(values) => values.clone(),
        other => bail!("{path}: its partition is {other:?}"),
    };
    let number = |name: &str| -> Result<u64> {
        let value = field(file, name)?;
        long(value)
            .and_then(|v| u64::try_from(v).ok())
            .with_context(|| format!("{path}: {name} is {value:?}"))
    };
    Ok((
        status,
        LiveFile {
            records: number("record_count")?,
            bytes: number("file_size_in_bytes")?,
            path,
            partition,
        },
    ))
}

/// The live data files of the manifests of a snapshot (`manifests`, its manifest list).
pub(crate) fn live_files(table: &Table, manifests: &[ManifestFile]) -> Result<Vec<LiveFile>> {
    let mut out = Vec::new();
    for manifest in manifests {
        let bytes = table.read(&manifest.path)?;
        for entry in Reader::new(&bytes[..]).context("a manifest")? {
            let Value::Record(entry) = entry.context("a manifest entry")? else {
                bail!("{}: an entry is not a record", manifest.path);
            };
            let (status, file) = live_file(&entry)?;
            if status != DELETED {
                out.push(file);
            }
        }
    }
    Ok(out)
}

/// `manifest` written again for snapshot `snapshot_id` (sequence number `sequence`)
/// with the live entries `remove` picks marked DELETED; `None` when it picks none (the
/// manifest is carried over). Returns the new manifest's bytes, its manifest list entry
/// (path and length left for the caller to fill in) and what it deleted.
pub(crate) fn rewrite(
    table: &Table,
    manifest: &ManifestFile,
    snapshot_id: i64,
    sequence: i64,
    remove: &dyn Fn(&LiveFile) -> bool,
) -> Result<Option<(Vec<u8>, ManifestFile, Counts)>> {
    let bytes = table.read(&manifest.path)?;
    let reader = Reader::new(&bytes[..]).context("a manifest")?;
    let schema = reader.writer_schema().clone();
    let user_metadata = reader.user_metadata().clone();
    let mut entries = Vec::new();
    let mut any = false;
    for entry in reader {
        let Value::Record(entry) = entry.context("a manifest entry")? else {
            bail!("{}: an entry is not a record", manifest.path);
        };
        let (status, file) = live_file(&entry)?;
        if status == DELETED {
            // Deleted by the snapshot that wrote this manifest: not carried on.
            continue;
        }
        let removed = remove(&file);
        any |= removed;
        entries.push((entry, status, file, removed));
    }
    if !any {
        return Ok(None);
    }
    let mut writer = Writer::new(&schema, Vec::new());
    for (key, value) in user_metadata {
        writer.add_user_metadata(key, value)?;
    }
    let mut list = ManifestFile {
        path: String::new(),
        length: 0,
        spec_id: manifest.spec_id,
        sequence_number: sequence,
        min_sequence_number: sequence,
        added_snapshot_id: snapshot_id,
        added_files: 0,
        existing_files: 0,
        deleted_files: 0,
        added_rows: 0,
        existing_rows: 0,
        deleted_rows: 0,
    };
    let mut counts = Counts::default();
    for (mut entry, status, file, removed) in entries {
        // An ADDED entry's nulls inherit from the manifest list entry: spelled out now.
        let inherited = status == ADDED;
        let data_sequence = inherit(
            &mut entry,
            "sequence_number",
            inherited,
            manifest.sequence_number,
        )?;
        inherit(
            &mut entry,
            "file_sequence_number",
            inherited,
            manifest.sequence_number,
        )?;
        inherit(
            &mut entry,
            "snapshot_id",
            inherited,
            manifest.added_snapshot_id,
        )?;
        if removed {
            *field_mut(&mut entry, "status")? = Value::Int(DELETED);
            set_long(field_mut(&mut entry, "snapshot_id")?, snapshot_id);
            list.deleted_files += 1;
            list.deleted_rows += file.records;
            counts.deleted_files += 1;
            counts.deleted_rows += file.records;
            counts.deleted_bytes += file.bytes;
        } else {
            *field_mut(&mut entry, "status")? = Value::Int(EXISTING);
            list.existing_files += 1;
            list.existing_rows += file.records;
            list.min_sequence_number = list.min_sequence_number.min(data_sequence);
        }
        writer
            .append(Value::Record(entry))
            .with_context(|| format!("the manifest entry of {}", file.path))?;
    }
    Ok(Some((writer.into_inner()?, list, counts)))
}

/// A partition value as a key to compare by, whichever Avro form it was read or built
/// in (a decimal is a `fixed` when written and a `Decimal` when read back).
pub(crate) fn value_key(value: &Value) -> Option<String> {
    let be_int = |bytes: &[u8]| -> Option<String> {
        if bytes.len() > 16 {
            return None;
        }
        let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
            0xFF
        } else {
            0
        };
        let mut wide = [fill; 16];
        wide[16 - bytes.len()..].copy_from_slice(bytes);
        Some(i128::from_be_bytes(wide).to_string())
    };
    Some(match value {
        Value::Union(_, inner) => return value_key(inner),
        Value::Null => "null".to_string(),
        Value::String(s) => format!("s{s}"),
        Value::Long(n) => n.to_string(),
        Value::Int(n) | Value::Date(n) => n.to_string(),
        Value::TimestampMicros(n) => n.to_string(),
        Value::Double(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Fixed(_, bytes) => be_int(bytes)?,
        Value::Decimal(d) => be_int(&Vec::<u8>::try_from(d).ok()?)?,
        _ => return None,
    })
}

/// Fills an entry's nullable `name` with `value` when it is null and `inherited`;
/// returns its value.
fn inherit(entry: &mut [(String, Value)], name: &str, inherited: bool, value: i64) -> Result<i64> {
    let slot = field_mut(entry, name)?;
    if let Some(v) = long(slot) {
        return Ok(v);
    }
    if !inherited {
        bail!("a manifest entry that is not ADDED has no {name}");
    }
    set_long(slot, value);
    Ok(value)
}

/// Sets a `["null", "long"]` union (or a plain long) to `value`.
fn set_long(slot: &mut Value, value: i64) {
    *slot = match slot {
        Value::Union(_, _) => Value::Union(1, Box::new(Value::Long(value))),
        _ => Value::Long(value),
    };
}
