//! An Apache Iceberg table (`--table-format iceberg`, issue 43): the same two-phase
//! commit, with a snapshot committed through the table's catalog as the thing that
//! makes files visible, written without the `iceberg` crate (see below). The table is a
//! directory (on a local or shared filesystem) or a bucket prefix; its catalog a SQLite
//! file or a PostgreSQL server (`catalog/`).
//!
//! ```text
//! preCommit   staged Parquet files fsynced (or uploaded)                 (as for any table)
//! decide      CheckpointComplete(n) fsynced in the job's journal         (the commit point)
//! commit      1. publish each file under TABLE/COL=VALUE/                (invisible: no
//!                                                                         manifest names it)
//!             2. metadata/<uuid>-m0.avro: a manifest adding them all     (fsynced, as
//!             3. metadata/snap-<id>-1-<uuid>.avro: the parent's manifests   are 2 and 4,
//!                and this one                                            then metadata/)
//!             4. metadata/<n>-<uuid>.metadata.json: the snapshot, summary ingest.job,
//!                ingest.run, ingest.checkpoint, and the property
//!                ingest.checkpoint.JOB = RUN:n (survives snapshot expiry)
//!             5. the catalog's compare-and-swap of the metadata location  (visible)
//!             6. Committed(n) in the journal
//! ```
//!
//! In a bucket (`-t s3://…`), step 1 completes the files' multipart uploads under their
//! keys (as for any table in a bucket) and steps 2 to 4 are put-if-absent objects,
//! durable once the store acknowledges them (`table.rs`); nothing is fsynced.
//!
//! A checkpoint's snapshot id is derived from (job, run, checkpoint), so a commit whose
//! reply was lost is found again by id and marker in the ancestry, never made twice: on
//! a failed swap the table is reloaded, and the commit made again on the new current
//! metadata only if no snapshot of the ancestry carries this checkpoint's marker and the
//! property does not already name it or a later one.
//!
//! # Why not the `iceberg` crate
//! iceberg 0.10 with its SQL and REST catalogs, measured in a scratch crate against
//! ingest's own build: +9 min 20 s of CPU for a cold debug build (+21 min 40 s in
//! release), +57 MB of debug binary, 138 more crates, among them arrow and parquet 58
//! beside our 59. The spec's metadata JSON and its two Avro files, written here with
//! `apache-avro`, plus SQLite and PostgreSQL clients: +2 min 8 s of CPU, +12 MB. The
//! files are checked by the readers that matter (pyiceberg, DuckDB, polars) in CI.

mod catalog;
mod commit;
mod manifest;
mod metadata;
mod rewrite;
mod table;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};

use super::{Begun, Format, Journaled};
use crate::core::catalog::CatalogTable;
use crate::core::layout::JobLayout;
use crate::core::options::{Evolve, Mode, RunOptions, TableFormat};
use crate::core::protocol::StagedFile;
use crate::core::records::{Checkpoint, Record, RunLog, RunStarted};
use crate::core::schema::Schema;
use metadata::TableMetadata;
use table::Table;

/// An Apache Iceberg table: a snapshot committed through its catalog makes files part
/// of it.
#[derive(Debug)]
pub(crate) struct Iceberg;

/// The catalog and name a run's options give its Iceberg table.
fn target(options: &RunOptions) -> Result<&CatalogTable> {
    options
        .catalog
        .as_ref()
        .context("a run of an Iceberg table has no --catalog in its journal")
}

/// `--status`: the current snapshot of the table `target` names (none before its first
/// commit) and the job's last committed checkpoint there (`RUN:N`, its property).
pub(crate) fn status(
    layout: &JobLayout,
    target: &CatalogTable,
) -> Result<Option<(i64, Option<String>)>> {
    let table = Table::open(target, layout)?;
    Ok(table.current()?.and_then(|current| {
        let checkpoint = current
            .metadata
            .properties
            .get(&commit::property(&layout.job))
            .cloned();
        current
            .metadata
            .current_snapshot_id
            .map(|id| (id, checkpoint))
    }))
}

/// The Parquet field id of each of the load's columns in the table's current schema,
/// after checking that the table has them, with the same types, and is partitioned by
/// `partition_by` (identity transforms, in order).
fn field_ids(
    metadata: &TableMetadata,
    schema: &Schema,
    partition_by: &[String],
    table: &str,
) -> Result<BTreeMap<String, i32>> {
    let fields = &metadata.current_schema()?.fields;
    let mut ids = BTreeMap::new();
    let mut missing = Vec::new();
    for column in &schema.columns {
        let Some(field) = fields.iter().find(|f| f.name == column.name) else {
            missing.push(column.name.as_str());
            continue;
        };
        let wanted = metadata::iceberg_type(column.ty);
        if field.ty.as_str() != Some(wanted.as_str()) {
            bail!(
                "{table}: the column {} is {} in the Iceberg table, and {wanted} in this load",
                column.name,
                field.ty
            );
        }
        ids.insert(column.name.clone(), field.id);
    }
    if !missing.is_empty() {
        bail!(
            "{table}: the Iceberg table has no column {} (its columns: {}); ingest does not \
             add columns to an Iceberg table",
            missing.join(", "),
            fields
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let spec = metadata.default_spec()?;
    let partitioned: Vec<Option<&str>> = spec
        .fields
        .iter()
        .map(|p| {
            let source = fields.iter().find(|f| f.id == p.source_id);
            source
                .filter(|_| p.transform == "identity")
                .map(|f| f.name.as_str())
        })
        .collect();
    if partitioned.len() != partition_by.len()
        || partitioned
            .iter()
            .zip(partition_by)
            .any(|(has, wanted)| *has != Some(wanted.as_str()))
    {
        bail!(
            "{table}: the Iceberg table is partitioned by [{}], this load by [{}]",
            spec.fields
                .iter()
                .map(|p| format!("{}({})", p.transform, p.name))
                .collect::<Vec<_>>()
                .join(", "),
            partition_by.join(", ")
        );
    }
    Ok(ids)
}

/// The data files of `checkpoints` (their rejects files stay outside the table), with
/// their partition values read back from the directories the sink gave them under the
/// table's `data/` (at its root, in a run journaled before data files went there).
fn data_files(
    checkpoints: &[Checkpoint],
    partition_by: &[String],
) -> Result<Vec<manifest::DataFile>> {
    checkpoints
        .iter()
        .flat_map(|c| &c.files)
        .filter(|f| !f.is_rejects())
        .map(|f| {
            Ok(manifest::DataFile {
                path: f.dest.clone(),
                partition: crate::sink::partition::values_of(
                    f.dest
                        .strip_prefix(TableFormat::Iceberg.data_dir())
                        .unwrap_or(&f.dest),
                    partition_by,
                )?,
                records: f.rows,
                bytes: f.size,
            })
        })
        .collect()
}

/// How many files of checkpoints run `log` committed the table's current snapshot no
/// longer has, said as a reason, if any: removing what is left would leave their rows.
fn merged_away(
    table: &Table,
    metadata: &TableMetadata,
    layout: &JobLayout,
    log: &RunLog,
) -> Result<Option<String>> {
    let location = table.location()?;
    let live: BTreeSet<String> =
        rewrite::live_files(table, &commit::current_manifests(table, metadata)?)?
            .into_iter()
            .map(|f| f.path)
            .collect();
    let mut gone = 0;
    for checkpoint in &log.checkpoints {
        let marker = commit::Marker {
            job: &layout.job,
            run: &log.started.run_id,
            step: commit::Step::Checkpoint(checkpoint.checkpoint),
        };
        if !marker.is_in(metadata) {
            continue;
        }
        gone += checkpoint
            .files
            .iter()
            .filter(|f| !f.is_rejects() && !live.contains(&format!("{location}/{}", f.dest)))
            .count();
    }
    Ok((gone > 0).then(|| {
        format!(
            "{gone} file(s) the run committed are no longer in the Iceberg table's current \
             snapshot (another writer removed them or rewrote them into files holding other \
             rows), so undoing the run would leave their rows"
        )
    }))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Format for Iceberg {
    /// Checks the load against the table its catalog has, or, for a table the catalog
    /// does not have yet, makes its first metadata (journaled; the first commit
    /// registers it).
    fn begin(
        &self,
        layout: &JobLayout,
        run: &RunStarted,
        schema: &Schema,
        _evolve: Evolve,
    ) -> Result<Begun> {
        let table = Table::open(target(&run.options)?, layout)?;
        let partition_by = &run.options.partition_by;
        let (metadata, create) = match table.current()? {
            Some(current) => (current.metadata, None),
            None => {
                let uuid = uuid::Uuid::new_v4().to_string();
                let new =
                    TableMetadata::new(uuid, table.location()?, schema, partition_by, now_ms())?;
                if table.catalog_manages_metadata() {
                    // A REST catalog makes the table now, and may give its columns other
                    // field ids than planned: the data files carry the ones it gave.
                    table.create_empty(&new)?;
                    match table.current()? {
                        Some(current) => (current.metadata, None),
                        None => bail!(
                            "{}: the catalog created the table and then did not have it",
                            table.describe()
                        ),
                    }
                } else {
                    let json = String::from_utf8(new.to_json()?)?;
                    (new, Some(json))
                }
            }
        };
        Ok(Begun {
            txn_base: None,
            create,
            field_ids: field_ids(&metadata, schema, partition_by, &table.describe())?,
        })
    }

    fn commit(&self, layout: &JobLayout, run: &RunStarted, checkpoint: &Checkpoint) -> Result<()> {
        if run.compaction.is_some() {
            bail!("ingest does not compact Iceberg tables");
        }
        if run.options.mode == Mode::OverwritePartitions {
            // The data files wait in staging for the one snapshot that replaces the
            // partitions when the run finishes (`replace_partitions`).
            return Ok(());
        }
        let table = Table::open(target(&run.options)?, layout)?;
        let marker = commit::Marker {
            job: &layout.job,
            run: &run.run_id,
            step: commit::Step::Checkpoint(checkpoint.checkpoint),
        };
        let change = commit::Change {
            add: data_files(std::slice::from_ref(checkpoint), &run.options.partition_by)?,
            remove: None,
        };
        commit::commit(&table, &marker, run.table_create.as_deref(), &change).map(drop)
    }

    /// `--mode overwrite-partitions`, once the run's last checkpoint is complete: one
    /// overwrite snapshot that takes out every live file of the partitions the run
    /// wrote to and adds the run's files, with the marker of the run's last checkpoint.
    /// `Exchange` is journaled first, so that `--abort` refuses from there and
    /// `--recover` finishes; a repeat finds the marker and commits nothing.
    fn replace_partitions(
        &self,
        layout: &JobLayout,
        log: &RunLog,
        journal: Journaled<'_>,
    ) -> Result<()> {
        if !super::begin_replacing(layout, log, journal)? {
            return Ok(());
        }
        let run = &log.started;
        let table = Table::open(target(&run.options)?, layout)?;
        let add = data_files(&log.checkpoints, &run.options.partition_by)?;
        let last = log
            .checkpoints
            .iter()
            .map(|c| c.checkpoint)
            .max()
            .unwrap_or(0);
        let marker = commit::Marker {
            job: &layout.job,
            run: &run.run_id,
            step: commit::Step::Checkpoint(last),
        };
        // The partitions the run wrote to, as keys of their typed values; the table's
        // types are the run's (checked when it began).
        let types = match table.current()? {
            Some(current) => commit::partition_types(&current.metadata)?,
            None => Vec::new(),
        };
        let mut replaced = BTreeSet::new();
        for file in &add {
            let mut key = Vec::with_capacity(types.len());
            for (ty, value) in types.iter().zip(&file.partition) {
                let value = manifest::partition_value(*ty, value.as_deref())?;
                key.push(rewrite::value_key(&value).context("a partition value of the run")?);
            }
            replaced.insert(key);
        }
        let in_replaced = |f: &rewrite::LiveFile| {
            let key: Option<Vec<String>> = f
                .partition
                .iter()
                .map(|(_, v)| rewrite::value_key(v))
                .collect();
            key.is_some_and(|k| replaced.contains(&k))
        };
        let change = commit::Change {
            add,
            remove: Some(&in_replaced),
        };
        commit::commit(&table, &marker, run.table_create.as_deref(), &change)?;
        journal(&Record::Exchanged)
    }

    /// `--abort`: one delete snapshot that takes the run's files out of the table
    /// (they stay on disk for readers of older snapshots, until snapshots are expired).
    /// Refused when files of checkpoints the run committed are gone from the table
    /// (another writer rewrote them, merging their rows with others'), as for Delta.
    fn uncommit(
        &self,
        layout: &JobLayout,
        log: &RunLog,
        files: &[&StagedFile],
    ) -> Result<Option<(u64, u64)>> {
        let table = Table::open(target(&log.started.options)?, layout)?;
        let Some(current) = table.current()? else {
            // Nothing of the run is in the table: its published files go as a Hive
            // table's do.
            return Ok(None);
        };
        let marker = commit::Marker {
            job: &layout.job,
            run: &log.started.run_id,
            step: commit::Step::Abort,
        };
        if !marker.is_in(&current.metadata) {
            if let Some(why) = merged_away(&table, &current.metadata, layout, log)? {
                bail!(
                    "{why}; its committed files still in the table are left too, and the \
                     abort stays unfinished: its rows are in the table as if it had been \
                     recovered"
                );
            }
        }
        let location = table.location()?;
        let ours: BTreeSet<String> = files
            .iter()
            .filter(|f| !f.is_rejects())
            .map(|f| format!("{location}/{}", f.dest))
            .collect();
        let remove = |f: &rewrite::LiveFile| ours.contains(&f.path);
        let change = commit::Change {
            add: Vec::new(),
            remove: Some(&remove),
        };
        let removed = commit::commit(&table, &marker, None, &change)?;
        Ok(Some((removed.deleted_files, removed.deleted_rows)))
    }

    /// None: `--status` asks [`status`] with the catalog the table's contract names.
    fn status(&self, _: &JobLayout) -> Result<Option<(u64, Option<i64>)>> {
        Ok(None)
    }

    fn live_files(&self, _: &JobLayout) -> Result<Option<super::LiveFiles>> {
        bail!("--compact does not rewrite Iceberg tables yet")
    }

    fn undo_refusal(&self, layout: &JobLayout, log: &RunLog) -> Result<Option<String>> {
        if log.aborting {
            return Ok(None);
        }
        let table = Table::open(target(&log.started.options)?, layout)?;
        let Some(current) = table.current()? else {
            return Ok(None);
        };
        merged_away(&table, &current.metadata, layout, log)
    }

    fn vacuum(
        &self,
        _: &JobLayout,
        _: Option<std::time::Duration>,
        _: bool,
    ) -> Result<Option<Vec<String>>> {
        bail!("--vacuum does not clean Iceberg tables yet (expire snapshots with another tool)")
    }
}
