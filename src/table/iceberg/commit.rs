//! One snapshot per checkpoint, exactly once: the optimistic commit of an Iceberg
//! table, with the checkpoint's marker in the snapshot's summary and in a table
//! property, and no commit ever retried without first looking for that marker.
//!
//! A commit is made on the table's current metadata: new manifest, new manifest list
//! (the parent's manifests and the new one), new metadata file, each under a name of
//! its own, all fsynced, then the catalog's swap from the metadata it was made on to the
//! new one. A swap that loses to another writer's, or whose answer never comes (an
//! error, a crash), decides nothing by itself: the table is loaded again, and if the
//! checkpoint's marker is there the commit is done; only if it is not is the commit
//! made again, on the new metadata (appends commute, so another writer's snapshot in
//! between changes nothing of ours).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use super::catalog::Swap;
use super::manifest::{self, DataFile, ManifestFile};
use super::metadata::{Snapshot, TableMetadata};
use super::rewrite::{self, Counts, LiveFile};
use super::table::Table;
use crate::core::schema::ColumnType;
use crate::core::sys::failpoint;

/// Commits tried while other writers keep winning the swap: each lost race costs one
/// reload, so only a table committed to many times a second exhausts these.
const ATTEMPTS: usize = 20;

/// The table property that holds a job's last committed checkpoint, `RUN:N`: written by
/// the commit that makes it, so snapshot expiry, which can remove the snapshot that
/// carries a marker (apache/iceberg#5846), never removes what it records.
pub(crate) fn property(job: &str) -> String {
    format!("ingest.checkpoint.{job}")
}

/// The snapshot id of checkpoint `checkpoint` of `run` of `job`: the same in every
/// process that commits it, so the snapshot of a commit made twice (it never is) would
/// collide instead of adding rows twice. 63 bits, positive, as the spec's ids are.
pub(crate) fn snapshot_id(job: &str, run: &str, checkpoint: &str) -> i64 {
    let key = format!("ingest\0{job}\0{run}\0{checkpoint}");
    let hash = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) >> 1;
    i64::try_from(hash).unwrap_or(i64::MAX).max(1)
}

/// What a snapshot of `ingest` is, for its marker: a checkpoint of a run, or the undoing
/// of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Checkpoint(u64),
    Abort,
}

/// Who makes a snapshot and why: the marker its summary carries, and the property the
/// same commit writes.
pub(crate) struct Marker<'a> {
    pub(crate) job: &'a str,
    pub(crate) run: &'a str,
    pub(crate) step: Step,
}

impl Marker<'_> {
    fn snapshot_id(&self) -> i64 {
        match self.step {
            Step::Checkpoint(n) => snapshot_id(self.job, self.run, &n.to_string()),
            Step::Abort => snapshot_id(self.job, self.run, "abort"),
        }
    }

    /// The marker's keys in a snapshot summary.
    fn summary(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("ingest.job".to_string(), self.job.to_string()),
            ("ingest.run".to_string(), self.run.to_string()),
        ];
        out.push(match self.step {
            Step::Checkpoint(n) => ("ingest.checkpoint".to_string(), n.to_string()),
            Step::Abort => ("ingest.abort".to_string(), "true".to_string()),
        });
        out
    }

    /// The table property the commit writes: the job's last checkpoint (`RUN:N`), or
    /// its last run undone.
    fn property(&self) -> (String, String) {
        match self.step {
            Step::Checkpoint(n) => (property(self.job), format!("{}:{n}", self.run)),
            Step::Abort => (abort_property(self.job), self.run.to_string()),
        }
    }

    /// Whether the table holds this snapshot: the job's property names it (or, for a
    /// checkpoint, a later one of the same run), or a snapshot of the current ancestry
    /// carries its marker.
    pub(crate) fn is_in(&self, metadata: &TableMetadata) -> bool {
        let by_property = match self.step {
            Step::Checkpoint(checkpoint) => metadata
                .properties
                .get(&property(self.job))
                .and_then(|v| v.rsplit_once(':'))
                .is_some_and(|(run, n)| {
                    run == self.run && n.parse::<u64>().is_ok_and(|n| n >= checkpoint)
                }),
            Step::Abort => {
                metadata.properties.get(&abort_property(self.job)) == Some(&self.run.to_string())
            }
        };
        let marker = self.summary();
        by_property
            || metadata.ancestry().any(|s| {
                marker
                    .iter()
                    .all(|(k, v)| s.summary.get(k).is_some_and(|has| has == v))
            })
    }
}

/// The table property naming a job's last undone run.
fn abort_property(job: &str) -> String {
    format!("ingest.abort.{job}")
}

/// A snapshot's change to the table's data files.
pub(crate) struct Change<'a> {
    /// Files added: each path relative to the table, partition values, rows and bytes.
    pub(crate) add: Vec<DataFile>,
    /// Live files taken out, picked by this (none: an append).
    pub(crate) remove: Option<&'a dyn Fn(&LiveFile) -> bool>,
}

impl Change<'_> {
    fn operation(&self) -> &'static str {
        match (self.add.is_empty(), self.remove.is_some()) {
            (_, false) => "append",
            (true, true) => "delete",
            (false, true) => "overwrite",
        }
    }
}

/// Commits `change` as the snapshot `marker` names, unless the table already holds it;
/// `create` is the table's first metadata (JSON) if the catalog may not have it yet.
/// Returns what the commit took out of the table (nothing when it was made before).
pub(crate) fn commit(
    table: &Table,
    marker: &Marker,
    create: Option<&str>,
    change: &Change,
) -> Result<Counts> {
    let id = marker.snapshot_id();
    // The error of a swap whose answer never came: the next look at the table decides.
    let mut unanswered: Option<anyhow::Error> = None;
    for _ in 0..ATTEMPTS {
        let (metadata, previous) = match table.current()? {
            Some(current) => (current.metadata, Some(current.location)),
            None => match create {
                Some(create) => (TableMetadata::parse(create.as_bytes())?, None),
                None => bail!("{} is not in its catalog", table.describe()),
            },
        };
        if let (Some(create), Some(_)) = (create, &previous) {
            same_columns(&TableMetadata::parse(create.as_bytes())?, &metadata, table)?;
        }
        if marker.is_in(&metadata) {
            // Made before, by this process a moment ago or by one that crashed right
            // after: settled before it is trusted.
            table.settle()?;
            return Ok(Counts::default());
        }
        if let Some(e) = unanswered {
            // The swap failed, and did not happen: the error is the run's.
            return Err(e.context(format!(
                "cannot commit {:?} of run {} to {}",
                marker.step,
                marker.run,
                table.describe()
            )));
        }
        if metadata.snapshots.iter().any(|s| s.snapshot_id == id) {
            bail!(
                "{} has a snapshot with id {id}, this checkpoint's, that does not carry its \
                 marker",
                table.describe()
            );
        }
        let (next, counts) = snapshot(table, &metadata, previous.as_deref(), marker, id, change)?;
        // A catalog that writes the metadata file itself is sent the snapshot alone.
        let location = if table.catalog_manages_metadata() {
            String::new()
        } else {
            let name = format!(
                "{:05}-{}.metadata.json",
                next.metadata_log.len(),
                uuid::Uuid::new_v4()
            );
            table.write_new(&name, &next.to_json()?)?
        };
        table.sync_metadata_dir()?;
        failpoint::hit("iceberg.commit.before");
        let swapped = match &previous {
            None => table.create(&location),
            Some(previous) => table.swap(&Swap {
                expected: previous,
                new: &location,
                base: &metadata,
                next: &next,
            }),
        };
        failpoint::hit("iceberg.commit.written");
        let swapped = if failpoint::fails("iceberg.commit.reply-lost") {
            Err(anyhow::anyhow!("the catalog's reply was lost (fail point)"))
        } else {
            swapped
        };
        match swapped {
            Ok(true) => {
                failpoint::hit("iceberg.commit.after");
                return Ok(counts);
            }
            // Another writer's commit came first: commit again on top of it.
            Ok(false) => {}
            Err(e) => unanswered = Some(e),
        }
    }
    bail!(
        "{}: {ATTEMPTS} commits of {:?} of run {} lost the race to other writers; run \
         `ingest --recover` to try again",
        table.describe(),
        marker.step,
        marker.run
    )
}

/// A run that meant to create the table and finds it created: the table's columns
/// (names, types, field ids: the run's data files carry the ids it planned) and
/// partitioning must be the ones it planned, or its files would be misread.
fn same_columns(planned: &TableMetadata, found: &TableMetadata, table: &Table) -> Result<()> {
    if planned.table_uuid == found.table_uuid {
        return Ok(());
    }
    let columns = |m: &TableMetadata| -> Result<Vec<(i32, String, serde_json::Value)>> {
        Ok(m.current_schema()?
            .fields
            .iter()
            .map(|f| (f.id, f.name.clone(), f.ty.clone()))
            .collect())
    };
    let spec = |m: &TableMetadata| -> Result<Vec<(i32, String)>> {
        Ok(m.default_spec()?
            .fields
            .iter()
            .map(|f| (f.source_id, f.transform.clone()))
            .collect())
    };
    if columns(planned)? != columns(found)? || spec(planned)? != spec(found)? {
        bail!(
            "{}: another writer created the Iceberg table first, with other columns or \
             partitioning than this run's",
            table.describe()
        );
    }
    Ok(())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The metadata with the snapshot added on top of `metadata`: its manifests and
/// manifest list written (and fsynced; their directory is the caller's). Returns it and
/// what it takes out.
fn snapshot(
    table: &Table,
    metadata: &TableMetadata,
    previous: Option<&str>,
    marker: &Marker,
    id: i64,
    change: &Change,
) -> Result<(TableMetadata, Counts)> {
    let mut next = metadata.clone();
    let sequence = metadata.last_sequence_number + 1;
    let parent_manifests = current_manifests(table, metadata)?;
    let uuid = uuid::Uuid::new_v4();
    let mut manifests = Vec::with_capacity(parent_manifests.len() + 1);
    let mut removed = Counts::default();
    for (i, parent) in parent_manifests.into_iter().enumerate() {
        let rewritten = match change.remove {
            Some(remove) => rewrite::rewrite(table, &parent, id, sequence, remove)?,
            None => None,
        };
        let Some((bytes, mut entry, counts)) = rewritten else {
            manifests.push(parent);
            continue;
        };
        entry.path = table.write_new(&format!("{uuid}-r{i}.avro"), &bytes)?;
        entry.length = bytes.len() as u64;
        manifests.push(entry);
        removed.deleted_files += counts.deleted_files;
        removed.deleted_rows += counts.deleted_rows;
        removed.deleted_bytes += counts.deleted_bytes;
    }
    let location = table.location()?;
    let files: Vec<DataFile> = change
        .add
        .iter()
        .map(|f| DataFile {
            path: format!("{location}/{}", f.path),
            ..f.clone()
        })
        .collect();
    let (rows, bytes) = files
        .iter()
        .fold((0, 0), |(r, b), f| (r + f.records, b + f.bytes));
    if !files.is_empty() {
        let written = manifest::write_manifest(metadata, &partition_types(metadata)?, id, &files)?;
        let path = table.write_new(&format!("{uuid}-m0.avro"), &written)?;
        manifests.push(ManifestFile {
            path,
            length: written.len() as u64,
            spec_id: metadata.default_spec_id,
            sequence_number: sequence,
            min_sequence_number: sequence,
            added_snapshot_id: id,
            added_files: u32::try_from(files.len())?,
            existing_files: 0,
            deleted_files: 0,
            added_rows: rows,
            existing_rows: 0,
            deleted_rows: 0,
        });
    }
    let list =
        manifest::write_manifest_list(id, metadata.current_snapshot_id, sequence, &manifests)?;
    let list = table.write_new(&format!("snap-{id}-1-{uuid}.avro"), &list)?;
    let mut summary = BTreeMap::from([
        ("operation".to_string(), change.operation().to_string()),
        ("added-data-files".to_string(), files.len().to_string()),
        ("added-records".to_string(), rows.to_string()),
        ("added-files-size".to_string(), bytes.to_string()),
    ]);
    if change.remove.is_some() {
        summary.extend([
            (
                "deleted-data-files".to_string(),
                removed.deleted_files.to_string(),
            ),
            (
                "deleted-records".to_string(),
                removed.deleted_rows.to_string(),
            ),
            (
                "removed-files-size".to_string(),
                removed.deleted_bytes.to_string(),
            ),
        ]);
    }
    summary.extend(marker.summary());
    summary.extend(totals(metadata, (files.len() as u64, rows, bytes), removed));
    let now = now_ms();
    next.add_snapshot(
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: None,
            sequence_number: 0,
            timestamp_ms: now,
            manifest_list: list,
            summary,
            schema_id: None,
        },
        previous,
        now,
    );
    let (key, value) = marker.property();
    next.properties.insert(key, value);
    Ok((next, removed))
}

/// The manifests of the table's current snapshot (none before its first).
pub(crate) fn current_manifests(
    table: &Table,
    metadata: &TableMetadata,
) -> Result<Vec<ManifestFile>> {
    let Some(current) = metadata.current_snapshot_id else {
        return Ok(Vec::new());
    };
    let snapshot = metadata
        .snapshots
        .iter()
        .find(|s| s.snapshot_id == current)
        .context("the current snapshot is not among the table's snapshots")?;
    let bytes = table.read(&snapshot.manifest_list)?;
    manifest::read_manifest_list(&bytes)
}

/// The summary's running totals: the parent's plus what this snapshot adds (files,
/// rows, bytes) minus what it removes, when the parent has them (a table's first
/// snapshot starts them); none when it does not.
fn totals(
    metadata: &TableMetadata,
    (files, rows, bytes): (u64, u64, u64),
    removed: Counts,
) -> Vec<(String, String)> {
    let parent = metadata
        .current_snapshot_id
        .and_then(|id| metadata.snapshots.iter().find(|s| s.snapshot_id == id));
    let before = |key: &str| -> Option<u64> {
        match parent {
            None => Some(0),
            Some(parent) => parent.summary.get(key)?.parse().ok(),
        }
    };
    let mut out = Vec::new();
    for (key, added, taken) in [
        ("total-data-files", files, removed.deleted_files),
        ("total-records", rows, removed.deleted_rows),
        ("total-files-size", bytes, removed.deleted_bytes),
        ("total-delete-files", 0, 0),
        ("total-position-deletes", 0, 0),
        ("total-equality-deletes", 0, 0),
    ] {
        if let Some(before) = before(key) {
            out.push((
                key.to_string(),
                (before + added).saturating_sub(taken).to_string(),
            ));
        }
    }
    out
}

/// The types of the default partition spec's source columns, in order.
pub(crate) fn partition_types(metadata: &TableMetadata) -> Result<Vec<ColumnType>> {
    let schema = metadata.current_schema()?;
    metadata
        .default_spec()?
        .fields
        .iter()
        .map(|p| {
            let field = schema
                .fields
                .iter()
                .find(|f| f.id == p.source_id)
                .with_context(|| format!("partition field {} has no source column", p.name))?;
            super::metadata::column_type(&field.ty)
                .with_context(|| format!("the partition column {}", field.name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_has_one_snapshot_id_and_runs_have_different_ones() {
        let a = snapshot_id("nightly", "r1", "1");
        assert_eq!(a, snapshot_id("nightly", "r1", "1"));
        assert!(a > 0);
        assert_ne!(a, snapshot_id("nightly", "r1", "2"));
        assert_ne!(a, snapshot_id("nightly", "r2", "1"));
        assert_ne!(a, snapshot_id("hourly", "r1", "1"));
    }
}
