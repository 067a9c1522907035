//! The Delta log through delta-rs: open or create a table, read the job's transaction
//! version, commit a checkpoint's files, and make what delta-rs wrote durable.
//!
//! delta-rs is async; its futures run here on a runtime of their own, so no async code
//! reaches the pipeline's threads. delta-rs writes a local table's log through
//! `object_store`'s file system store, which never fsyncs: every log file this process
//! acts on is settled (`fsutil::settle`) before the journal relies on it.

use std::future::IntoFuture;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, StructField, Transaction};
use deltalake::operations::create::CreateBuilder;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableBuilder};
use tokio::runtime::Runtime;

use crate::core::layout::JobLayout;
use crate::core::sys::fsutil;

/// Commits lost to other writers in a row before a commit gives up: each loss means
/// another writer's commit landed first, so the table moves on; the run then stops
/// and `--recover` commits again.
const MAX_RETRIES: usize = 100;

/// The log's directory inside a table.
const LOG_DIR: &str = "_delta_log";

fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| anyhow!("cannot start the Delta client: {e}"))
}

/// A Delta table's log, loaded at its latest version.
pub(crate) struct Log {
    table: DeltaTable,
    /// The log's directory, for a table in a directory; `None` in a bucket, where a
    /// commit the store acknowledged is durable.
    dir: Option<PathBuf>,
    name: String,
}

/// The table's Delta version and the job's last transaction version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) version: u64,
    pub(crate) txn: Option<i64>,
}

/// Where the table's log is: its URL for delta-rs, and, for a table in a directory,
/// the log's directory (`None` for a table in a bucket).
fn location(layout: &JobLayout) -> Result<(url::Url, Option<PathBuf>)> {
    if let Some(target) = &layout.target {
        return in_bucket(target);
    }
    let dir = layout.table.canonicalize().with_context(|| {
        format!(
            "cannot resolve the table directory {}",
            layout.table.display()
        )
    })?;
    let url = url::Url::from_directory_path(&dir)
        .map_err(|()| anyhow!("{} cannot be named by a URL", dir.display()))?;
    Ok((url, Some(dir.join(LOG_DIR))))
}

#[cfg(feature = "s3")]
fn in_bucket(target: &crate::core::url::ObjectUrl) -> Result<(url::Url, Option<PathBuf>)> {
    super::bucket::register()?;
    crate::storage::s3::check_endpoint(&target.bucket)?;
    Ok((super::bucket::table_url(target)?, None))
}

#[cfg(not(feature = "s3"))]
fn in_bucket(target: &crate::core::url::ObjectUrl) -> Result<(url::Url, Option<PathBuf>)> {
    anyhow::bail!("{target}: this ingest was built without object-store support")
}

/// Opens the table's log; a table without one is an error.
pub(crate) fn open(layout: &JobLayout) -> Result<Log> {
    try_open(layout)?.ok_or_else(|| anyhow!("{} has no Delta log", layout.table_name()))
}

/// Opens the table's log, if it has one: a `_delta_log/` holding at least one commit
/// (a crash while the first load created the table can leave it empty).
pub(crate) fn try_open(layout: &JobLayout) -> Result<Option<Log>> {
    let (url, dir) = location(layout)?;
    if let Some(dir) = &dir {
        if !has_commits(dir)? {
            return Ok(None);
        }
    }
    let name = layout.table_name();
    let loaded = runtime()?.block_on(async { DeltaTableBuilder::from_url(url)?.load().await });
    let table = match loaded {
        Ok(table) => table,
        // A log in a bucket is its commits, each whole or absent: without one the
        // table has no log.
        Err(deltalake::DeltaTableError::NotATable(_)) if dir.is_none() => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read the Delta log of {name}")),
    };
    Ok(Some(Log { table, dir, name }))
}

fn has_commits(dir: &std::path::Path) -> Result<bool> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".json") && name[..name.len() - 5].bytes().all(|b| b.is_ascii_digit())
            || name.ends_with(".checkpoint.parquet")
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Creates the table with `fields` partitioned by `partition_by`, holding `adds` and
/// `txn { app, version }` in that same first commit (version 0, settled): a run's first
/// checkpoint, so that a table nobody committed to has no log. `None` when another
/// writer created the table first: the caller checks it and commits on top.
pub(crate) fn create_with(
    layout: &JobLayout,
    fields: &[StructField],
    partition_by: &[String],
    adds: Vec<Add>,
    (app, version): (&str, i64),
) -> Result<Option<u64>> {
    let (url, dir) = location(layout)?;
    let name = layout.table_name();
    // No retries: delta-rs 1.1.3 retries a create that finds version 0 taken as a commit
    // at the next version, which writes a second protocol and metaData (a new table id)
    // over the winner's table and fails every writer that read the first. Without
    // retries the loser gets an error, finds the table, and commits on top of it.
    let properties = CommitProperties::default()
        .with_max_retries(0)
        .with_application_transaction(Transaction::new(app, version));
    let created = runtime()?.block_on(
        CreateBuilder::new()
            .with_location(url.as_str())
            .with_columns(fields.iter().cloned())
            .with_partition_columns(partition_by.iter().cloned())
            .with_actions(adds.into_iter().map(Action::Add))
            .with_commit_properties(properties)
            .with_save_mode(SaveMode::ErrorIfExists)
            .into_future(),
    );
    match created {
        Ok(table) => {
            let log = Log { table, dir, name };
            log.settle_version(0)?;
            Ok(Some(0))
        }
        Err(e) => match try_open(layout)? {
            Some(_) => Ok(None),
            None => Err(e).with_context(|| format!("cannot create the Delta table {name}")),
        },
    }
}

/// A write's description in the commit's `commitInfo`. Without a predicate it reads
/// nothing, for delta-rs's conflict check: a concurrent blind append never conflicts
/// with it (Delta's default isolation, WriteSerializable, orders that append after it),
/// while removing a file that a concurrent commit removed does.
fn write(mode: SaveMode, partition_by: &[String]) -> DeltaOperation {
    DeltaOperation::Write {
        mode,
        partition_by: (!partition_by.is_empty()).then(|| partition_by.to_vec()),
        predicate: None,
    }
}

/// Partition values in a canonical order, to compare two files' partitions.
fn sorted(
    values: &std::collections::HashMap<String, Option<String>>,
) -> Vec<(String, Option<String>)> {
    let mut pairs: Vec<_> = values.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    pairs.sort();
    pairs
}

/// The table's version and the job's transaction version, if the table has a log.
pub(crate) fn status(layout: &JobLayout) -> Result<Option<Status>> {
    let Some(log) = try_open(layout)? else {
        return Ok(None);
    };
    Ok(Some(Status {
        version: log.version(),
        txn: log.txn_version(&super::app_id(&layout.job))?,
    }))
}

impl Log {
    /// The version this log was loaded at.
    pub(crate) fn version(&self) -> u64 {
        self.table.version().unwrap_or(0)
    }

    /// The table's fields, partition columns included.
    pub(crate) fn schema(&self) -> Result<Vec<StructField>> {
        Ok(self.state()?.schema().fields().cloned().collect())
    }

    /// The table's partition columns, in order.
    pub(crate) fn partition_columns(&self) -> Result<Vec<String>> {
        Ok(self.state()?.metadata().partition_columns().to_vec())
    }

    /// The last transaction version of app `app` in the table, if it has one.
    pub(crate) fn txn_version(&self, app: &str) -> Result<Option<i64>> {
        let state = self.state()?;
        let store = self.table.log_store();
        runtime()?
            .block_on(state.transaction_version(store.as_ref(), app))
            .with_context(|| format!("cannot read the Delta transactions of {}", self.name))
    }

    /// One commit: `adds` and `txn { app, version }`, retried past other writers'
    /// commits as the Delta protocol says. Returns the log version it got.
    pub(crate) fn commit_adds(
        &mut self,
        adds: Vec<Add>,
        app: &str,
        version: i64,
        partition_by: &[String],
    ) -> Result<u64> {
        let operation = write(SaveMode::Append, partition_by);
        let actions = adds.into_iter().map(Action::Add).collect();
        self.commit(actions, operation, Some(Transaction::new(app, version)))
    }

    /// The commit of an overwrite: removes every file of the partitions that `adds` go
    /// to (by their partition values), adds them, and `txn { app, version }`.
    pub(crate) fn commit_overwrite(
        &mut self,
        adds: Vec<Add>,
        app: &str,
        version: i64,
        partition_by: &[String],
    ) -> Result<u64> {
        let touched: std::collections::HashSet<Vec<(String, Option<String>)>> =
            adds.iter().map(|a| sorted(&a.partition_values)).collect();
        let mut actions: Vec<Action> = self
            .state()?
            .log_data()
            .iter()
            .filter(|f| touched.contains(&sorted(&f.partition_values_map())))
            .map(|f| Action::Remove(f.remove_action(true)))
            .collect();
        actions.extend(adds.into_iter().map(Action::Add));
        let operation = write(SaveMode::Overwrite, partition_by);
        self.commit(actions, operation, Some(Transaction::new(app, version)))
    }

    /// Writes `actions` (and `txn`) as the log's next version, after settling what is
    /// there (see [`Log::settle_log`]); delta-rs retries past other writers' commits
    /// that do not conflict with it. Returns the version it got.
    fn commit(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
        txn: Option<Transaction>,
    ) -> Result<u64> {
        self.settle_log()?;
        let mut properties = CommitProperties::default().with_max_retries(MAX_RETRIES);
        if let Some(txn) = &txn {
            properties = properties.with_application_transaction(txn.clone());
        }
        let state = self.state()?;
        let committed = runtime()?
            .block_on(
                CommitBuilder::from(properties)
                    .with_actions(actions)
                    .build(Some(state), self.table.log_store(), operation)
                    .into_future(),
            )
            .with_context(|| match &txn {
                Some(t) => format!(
                    "cannot commit to the Delta log of {} (txn {} {})",
                    self.name, t.app_id, t.version
                ),
                None => format!("cannot commit to the Delta log of {}", self.name),
            })?;
        Ok(committed.version)
    }

    /// Adds `fields` after the table's (a commit of their own, settled), and returns
    /// the table at that commit. Files written before it read them as nulls.
    pub(crate) fn add_columns(self, fields: Vec<StructField>) -> Result<Log> {
        self.settle_log()?;
        let Log { table, dir, name } = self;
        let names: Vec<String> = fields.iter().map(|f| f.name().to_string()).collect();
        let table = runtime()?
            .block_on(table.add_columns().with_fields(fields).into_future())
            .with_context(|| format!("cannot add the columns {} to {name}", names.join(", ")))?;
        let widened = Log { table, dir, name };
        widened.settle_version(widened.version())?;
        Ok(widened)
    }

    /// Makes log version `version` durable with its name, and the checkpoint delta-rs
    /// may have written with it.
    pub(crate) fn settle_version(&self, version: u64) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        fsutil::settle(&dir.join(format!("{version:020}.json")))?;
        fsutil::settle(&dir.join(format!("{version:020}.checkpoint.parquet")))?;
        fsutil::settle(&dir.join("_last_checkpoint"))?;
        fsutil::settle(dir)
    }

    /// Makes every log file this process has not made durable yet durable, with its
    /// name: a commit found in the log may have been written by a process that crashed
    /// before fsyncing it (delta-rs never does). Done before trusting a commit found
    /// there, and before writing a commit on top of the log: a commit made durable over
    /// one that a power cut can still take away would leave a gap in the versions, which
    /// no reader can read past. The first call in a process settles the whole log; later
    /// ones only what appeared since.
    pub(crate) fn settle_log(&self) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        static SETTLED: Mutex<Option<(PathBuf, u64)>> = Mutex::new(None);
        let mut settled = SETTLED
            .lock()
            .map_err(|_| anyhow!("the Delta log's settle record is poisoned"))?;
        let through = settled
            .as_ref()
            .filter(|(settled_dir, _)| settled_dir == dir)
            .map(|(_, v)| *v);
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
        let mut newest = through;
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // NNN.json and NNN.checkpoint.parquet: by version; _last_checkpoint always.
            let version = name.split('.').next().and_then(|v| v.parse::<u64>().ok());
            let is_log_file = version.is_some() || name == "_last_checkpoint";
            if !is_log_file || version.is_some_and(|v| through.is_some_and(|t| v <= t)) {
                continue;
            }
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                fsutil::settle(&entry.path())?;
            }
            newest = newest.max(version);
        }
        fsutil::settle(dir)?;
        if let Some(newest) = newest {
            *settled = Some((dir.clone(), newest));
        }
        Ok(())
    }

    fn state(&self) -> Result<&deltalake::table::state::DeltaTableState> {
        self.table
            .snapshot()
            .with_context(|| format!("the Delta table {} has no snapshot", self.name))
    }
}

impl Log {
    /// The data files of this version: path relative to the table, size.
    pub(crate) fn files(&self) -> Result<Vec<(String, u64)>> {
        Ok(self
            .state()?
            .log_data()
            .iter()
            .map(|f| (f.path().to_string(), u64::try_from(f.size()).unwrap_or(0)))
            .collect())
    }

    /// A compaction's commit: `adds` (the merged files) and a `remove` of every file of
    /// `replaces`, all with `dataChange: false`, and `txn { app, version }`, as an
    /// OPTIMIZE aiming at `target_size` bytes a file. Fails, committing nothing, if a file of `replaces` is no longer in this
    /// version; delta-rs fails it too if a concurrent commit removes one. Returns the log
    /// version it got.
    pub(crate) fn commit_compaction(
        &mut self,
        adds: Vec<Add>,
        replaces: &std::collections::HashSet<String>,
        (app, version): (&str, i64),
        target_size: u64,
    ) -> Result<u64> {
        let mut actions: Vec<Action> = self
            .state()?
            .log_data()
            .iter()
            .filter(|f| replaces.contains(f.path().as_ref()))
            .map(|f| Action::Remove(f.remove_action(false)))
            .collect();
        if actions.len() != replaces.len() {
            bail!(
                "{} of the {} files the compaction replaces are no longer in {} (another \
                 writer removed them since it began); nothing was changed: `--abort` the \
                 compaction and run it again",
                replaces.len() - actions.len(),
                replaces.len(),
                self.name
            );
        }
        let target_size = i64::try_from(target_size).unwrap_or(i64::MAX);
        actions.extend(adds.into_iter().map(Action::Add));
        let operation = DeltaOperation::Optimize {
            predicate: None,
            target_size,
        };
        let committed = self.commit(actions, operation, Some(Transaction::new(app, version)))?;
        Ok(committed)
    }

    /// delta-rs's VACUUM in its lite mode: deletes the files that `remove` actions older
    /// than `retention` (the table's `delta.deletedFileRetentionDuration`, 7 days by
    /// default, when `None`) took out and no version since names. Files no commit ever
    /// named (a run's, published before its commit) are never its business. Its
    /// VACUUM START and END commits are settled like any. Returns the files deleted (or,
    /// with `dry_run`, that would be), relative to the table.
    pub(crate) fn vacuum(
        self,
        retention: Option<std::time::Duration>,
        dry_run: bool,
    ) -> Result<Vec<String>> {
        self.settle_log()?;
        let Log { table, dir, name } = self;
        let mut builder = table.vacuum().with_dry_run(dry_run);
        if let Some(retention) = retention {
            let retention = chrono::Duration::from_std(retention)
                .with_context(|| format!("--retention {retention:?} is too long"))?;
            // Asked for: shorter than the table's own retention is the user's call.
            builder = builder
                .with_retention_period(retention)
                .with_enforce_retention_duration(false);
        }
        let (table, metrics) = runtime()?
            .block_on(builder.into_future())
            .with_context(|| format!("cannot vacuum {name}"))?;
        Log { table, dir, name }.settle_log()?;
        Ok(metrics.files_deleted)
    }

    /// Removes from the table, in one commit, those files of `paths` (table-relative)
    /// that its current version has; returns how many and their rows. A repeat finds
    /// none and commits nothing.
    pub(crate) fn commit_removes(
        &mut self,
        paths: &std::collections::HashSet<String>,
        marker: Option<(String, i64)>,
    ) -> Result<(u64, u64)> {
        let state = self.state()?;
        let mut actions = Vec::new();
        let mut rows = 0;
        for file in state.log_data().iter() {
            if paths.contains(file.path().as_ref()) {
                rows += file.num_records().unwrap_or(0) as u64;
                actions.push(Action::Remove(file.remove_action(true)));
            }
        }
        if actions.is_empty() {
            return Ok((0, 0));
        }
        let files = actions.len() as u64;
        let operation = DeltaOperation::Delete { predicate: None };
        let txn = marker.map(|(app, version)| Transaction::new(app, version));
        let committed = self.commit(actions, operation, txn)?;
        self.settle_version(committed)?;
        Ok((files, rows))
    }
}
