//! Checked, resolved settings. Nothing below this module sees a clap type or re-parses
//! a flag string.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::cli::args::{Cli, DEFAULT_CHECKPOINT_ROWS};
use crate::cli::jobfile::{self, JobFile};
use crate::core::error::UsageError;
use crate::core::layout::COMPACT_JOB;
use crate::core::options::Compression;
use crate::core::options::RunOptions;
use crate::core::options::{Format, Mode, TableFormat};
use crate::core::schema::ColumnType;
use crate::core::spec::StageSpec;
use crate::ops::settings::{
    default_threads, Command, Common, CompactConfig, LoadConfig, VacuumConfig,
};

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Splits `KEY=VALUE` for flags like `--cast` and `--derive`.
fn key_value<'a>(flag: &str, item: &'a str) -> Result<(&'a str, &'a str)> {
    item.split_once('=')
        .map(|(k, v)| (k.trim(), v.trim()))
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| usage(format!("{flag} takes NAME=VALUE, not {item:?}")))
}

/// The stages the command-line flags ask for, in their documented order: null markers,
/// trim, cast, derive, filter, dedupe, rename, select, drop.
fn cli_stages(cli: &Cli) -> Result<Vec<StageSpec>> {
    let mut stages = Vec::new();
    if let Some(markers) = &cli.null_markers {
        stages.push(StageSpec::NullMarkers {
            markers: markers.clone(),
            columns: Vec::new(),
        });
    }
    if cli.trim {
        stages.push(StageSpec::Trim {
            columns: Vec::new(),
        });
    }
    if !cli.cast.is_empty() {
        // `COL=TYPE`, or `COL=TYPE:FORMAT` (a strftime format for a date or timestamp:
        // `dt=date:%d/%m/%Y`); one cast stage per format, as a job file's stages are.
        let mut by_format: std::collections::BTreeMap<
            Option<String>,
            std::collections::BTreeMap<String, ColumnType>,
        > = Default::default();
        for item in &cli.cast {
            let (col, spec) = key_value("--cast", item)?;
            let (ty, format) = match spec.split_once(':') {
                Some((ty, format)) => (ty, Some(format.to_string())),
                None => (spec, None),
            };
            let ty: ColumnType = ty
                .parse()
                .map_err(|e: String| usage(format!("--cast {item}: {e}")))?;
            if format.is_some() && !matches!(ty, ColumnType::Date | ColumnType::Timestamp) {
                return Err(usage(format!(
                    "--cast {item}: a format applies to date and timestamp casts"
                )));
            }
            by_format
                .entry(format)
                .or_default()
                .insert(col.to_string(), ty);
        }
        for (format, columns) in by_format {
            stages.push(StageSpec::Cast {
                columns,
                format,
                timezone: cli.timezone.clone(),
            });
        }
    } else if cli.timezone.is_some() {
        return Err(usage(
            "--timezone applies to --cast COL=timestamp; no --cast was given",
        ));
    }
    for item in &cli.derive {
        let (col, expr) = key_value("--derive", item)?;
        stages.push(StageSpec::Derive {
            column: col.to_string(),
            expr: expr.to_string(),
        });
    }
    for expr in &cli.filter {
        stages.push(StageSpec::Filter { expr: expr.clone() });
    }
    if !cli.dedupe_key.is_empty() {
        check_columns("--dedupe-key", &cli.dedupe_key)?;
        stages.push(StageSpec::Dedupe {
            key: cli.dedupe_key.clone(),
            scope: cli.dedupe_scope.unwrap_or_default(),
            retention: cli.dedupe_retention.clone(),
        });
    } else if cli.dedupe_scope.is_some() || cli.dedupe_retention.is_some() {
        return Err(usage(
            "--dedupe-scope and --dedupe-retention apply to --dedupe-key, which was not given",
        ));
    }
    if !cli.rename.is_empty() {
        let mut columns = std::collections::BTreeMap::new();
        for item in &cli.rename {
            let (old, new) = key_value("--rename", item)?;
            columns.insert(old.to_string(), new.to_string());
        }
        stages.push(StageSpec::Rename { columns });
    }
    if !cli.select.is_empty() {
        check_columns("--select", &cli.select)?;
        stages.push(StageSpec::Select {
            columns: cli.select.clone(),
        });
    }
    if !cli.drop_columns.is_empty() {
        stages.push(StageSpec::Drop {
            columns: cli.drop_columns.clone(),
        });
    }
    Ok(stages)
}

/// Reads a size like `134217728`, `512K`, `128M` or `1G` (powers of 1024).
fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let scale: u64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches('B')
        .trim_end_matches('I')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => {
            return Err(usage(format!(
                "--target-file-size {text:?}: write a number of bytes, or 512K, 128M, 1G"
            )))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| usage(format!("--target-file-size {text:?} is not a size")))?;
    match n.checked_mul(scale) {
        Some(size) if size >= 1024 => Ok(size),
        _ => Err(usage(format!(
            "--target-file-size {text:?}: use at least 1K"
        ))),
    }
}

/// One ASCII byte that cannot be confused with quoting or line ends.
fn parse_delimiter(raw: &str) -> Result<u8> {
    let byte = match raw {
        "tab" | "\\t" | "\t" => b'\t',
        s if s.len() == 1 && s.is_ascii() => s.as_bytes()[0],
        s => {
            return Err(usage(format!(
                "--delimiter must be one ASCII character or `tab`, not {s:?}"
            )))
        }
    };
    if matches!(byte, b'"' | b'\n' | b'\r') {
        return Err(usage(format!("--delimiter cannot be {:?}", byte as char)));
    }
    Ok(byte)
}

fn check_columns(flag: &str, cols: &[String]) -> Result<()> {
    for (i, col) in cols.iter().enumerate() {
        if col.is_empty() {
            return Err(usage(format!("{flag} has an empty column name")));
        }
        if cols[..i].contains(col) {
            return Err(usage(format!("{flag} names column {col:?} twice")));
        }
    }
    Ok(())
}

/// The local working copy of a table in a bucket (`storage/replica.rs`): under
/// `INGEST_WORK_DIR` if set, else the user's cache directory (`XDG_CACHE_HOME`, or
/// `~/.cache`), at `ingest/s3/BUCKET/PREFIX`. It holds nothing the bucket does not:
/// deleting it loses nothing, and a new machine starts with none.
fn working_copy(url: &crate::core::url::ObjectUrl) -> Result<PathBuf> {
    if !cfg!(feature = "s3") {
        return Err(usage(format!(
            "--target {url}: this ingest was built without object-store support (the `s3` \
             feature)"
        )));
    }
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let root = var("INGEST_WORK_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("ingest")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("ingest")))
        .ok_or_else(|| {
            usage(format!(
                "--target {url}: set INGEST_WORK_DIR (or HOME) to a directory for the table's \
                 local working copy"
            ))
        })?;
    let mut dir = root.join("s3").join(&url.bucket);
    for part in url.key.split('/').filter(|p| !p.is_empty()) {
        dir.push(part);
    }
    Ok(dir)
}

/// Job names become file names under `_ingest/`, so they are kept to a safe alphabet.
fn check_job_name(job: &str) -> Result<()> {
    let ok = !job.is_empty()
        && job.len() <= 64
        && job
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && job.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(usage(format!(
            "--job {job:?} is not a valid job name: use 1 to 64 letters, digits, '_' or '-', \
             starting with a letter or digit"
        )))
    }
}

/// The size `--compact` aims at when `--target-file-size` is not given: what Delta's
/// OPTIMIZE and Iceberg's rewrite_data_files default to.
const DEFAULT_COMPACT_TARGET: u64 = 128 << 20;

/// `--compact`'s settings.
fn compact(cli: &Cli, common: Common, job: Option<&str>) -> Result<Command> {
    if job.is_some_and(|j| j != COMPACT_JOB) {
        return Err(usage(format!(
            "--compact runs as job {COMPACT_JOB:?}; leave --job out"
        )));
    }
    let target_size = match cli.target_file_size.as_deref() {
        Some(size) => parse_size(size)?,
        None => DEFAULT_COMPACT_TARGET,
    };
    if target_size == 0 {
        return Err(usage("--target-file-size 0: give a size such as 128M"));
    }
    let mut partitions = Vec::new();
    for filter in &cli.partition {
        match filter.split_once('=') {
            Some((column, value)) if !column.is_empty() => {
                partitions.push((column.to_string(), value.to_string()))
            }
            _ => {
                return Err(usage(format!(
                    "--partition {filter:?}: give COL=VALUE, such as dt=2026-11-28"
                )))
            }
        }
    }
    Ok(Command::Compact(Box::new(CompactConfig {
        common,
        target_size,
        partitions,
        dry_run: cli.dry_run,
    })))
}

/// An Iceberg table's catalog and name (`--catalog`, `--table-name`), checked; `None`
/// for another table format, which takes neither.
fn catalog_table(
    table_format: TableFormat,
    catalog: Option<String>,
    name: Option<String>,
    common: &Common,
) -> Result<Option<crate::core::catalog::CatalogTable>> {
    if table_format != TableFormat::Iceberg {
        if catalog.is_some() || name.is_some() {
            return Err(usage(
                "--catalog and --table-name name an Iceberg table's catalog; give them with \
                 --table-format iceberg",
            ));
        }
        return Ok(None);
    }
    if !cfg!(feature = "iceberg") {
        return Err(usage(
            "--table-format iceberg: this ingest was built without the `iceberg` feature",
        ));
    }
    let Some(catalog) = catalog else {
        return Err(usage(
            "--table-format iceberg needs --catalog: the catalog that commits the table's \
             snapshots, e.g. --catalog sqlite:///data/catalog.db",
        ));
    };
    let name = match name {
        Some(name) => name,
        None => {
            let last = match &common.remote {
                Some(url) => url
                    .key
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .map(str::to_string),
                None => common
                    .table
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned()),
            };
            format!("default.{}", last.unwrap_or_default())
        }
    };
    match name.rsplit_once('.') {
        Some((namespace, table)) if !namespace.is_empty() && !table.is_empty() => {}
        _ => {
            return Err(usage(format!(
                "--table-name {name:?}: expected NAMESPACE.NAME, e.g. sales.orders"
            )))
        }
    }
    crate::core::catalog::CatalogTable::new(&catalog, name)
        .map(Some)
        .map_err(|e| usage(e.to_string()))
}

/// Checks and resolves the parsed flags (and the job file they name).
pub(crate) fn command(cli: Cli) -> Result<Command> {
    if cli.list_fail_points {
        return Ok(Command::ListFailPoints);
    }
    if let Some(shell) = cli.completions {
        return Ok(Command::Completions(shell));
    }
    let file = match &cli.config {
        Some(path) => jobfile::load(path)?,
        None => JobFile::default(),
    };
    let delimiter = parse_delimiter(
        cli.delimiter
            .as_deref()
            .or(file.delimiter.as_deref())
            .unwrap_or(","),
    )?;
    let inputs = if cli.inputs.is_empty() {
        file.inputs.clone()
    } else {
        cli.inputs.clone()
    };
    if cli.infer_schema {
        if inputs.is_empty() {
            return Err(usage("--infer-schema needs inputs"));
        }
        let mut stages = file.stages.clone();
        stages.extend(cli_stages(&cli)?);
        return Ok(Command::InferSchema {
            inputs,
            delimiter,
            stages,
        });
    }
    let table = cli
        .target
        .clone()
        .or(file.target.clone())
        .ok_or_else(|| usage("no target: give --target or `target` in the job file"))?;
    let (table, remote) = if crate::core::url::is_url_path(&table) {
        // Refuses a URL carrying credentials without repeating it.
        let url = crate::core::url::parse(&table.to_string_lossy())?;
        (working_copy(&url)?, Some(url))
    } else {
        (table, None)
    };
    let job = cli.job.clone().or(file.job.clone());
    if let Some(job) = &job {
        check_job_name(job)?;
    }
    let common = Common {
        table,
        remote,
        job: job.clone().unwrap_or_else(|| "default".to_string()),
        quiet: cli.quiet,
        json: cli.json,
        progress: cli.progress,
        lock_wait: cli.lock_wait.map(Duration::from_secs),
        threads: cli.threads.map_or_else(default_threads, |n| n as usize),
    };
    if cli.status {
        return Ok(Command::Status(common, job, cli.files));
    }
    if cli.compact {
        return compact(&cli, common, job.as_deref());
    }
    if cli.vacuum {
        let retention = match cli.retention.as_deref() {
            Some(text) => Some(humantime::parse_duration(text).map_err(|e| {
                usage(format!(
                    "--retention {text:?} is not a duration such as 7d, 12h or 0s: {e}"
                ))
            })?),
            None => None,
        };
        return Ok(Command::Vacuum(Box::new(VacuumConfig {
            common,
            retention,
            dry_run: cli.dry_run,
        })));
    }
    if cli.abort {
        return Ok(Command::Abort(common, job));
    }
    if cli.recover {
        return Ok(Command::Recover(common, cli.max_errors, job));
    }
    if job.as_deref() == Some(COMPACT_JOB) {
        return Err(usage(format!(
            "--job {COMPACT_JOB}: the name is --compact's; give a load another job name"
        )));
    }
    if inputs.is_empty() {
        return Err(usage(
            "no inputs: give them on the command line or as `inputs` in the job file",
        ));
    }
    let table_format = cli.table_format.or(file.table_format).unwrap_or_default();
    let format = match (table_format, cli.format.or(file.format)) {
        (
            TableFormat::Delta | TableFormat::Iceberg,
            Some(format @ (Format::Csv | Format::Jsonl)),
        ) => {
            return Err(usage(format!(
                "--format {}: a {} table's data files are Parquet; leave --format out or \
                 give --format parquet",
                crate::state::contract::name(&format),
                if table_format == TableFormat::Delta {
                    "Delta"
                } else {
                    "Iceberg"
                }
            )))
        }
        (TableFormat::Delta | TableFormat::Iceberg, _) => Format::Parquet,
        (TableFormat::Hive, chosen) => chosen.unwrap_or(Format::Csv),
    };
    if table_format == TableFormat::Delta && !cfg!(feature = "delta") {
        return Err(usage(
            "--table-format delta: this ingest was built without the `delta` feature",
        ));
    }
    let catalog = catalog_table(
        table_format,
        cli.catalog.clone().or(file.catalog.clone()),
        cli.table_name.clone().or(file.table_name.clone()),
        &common,
    )?;
    if format == Format::Parquet && !cfg!(feature = "parquet") {
        return Err(usage(
            "--format parquet: this ingest was built without the `parquet` feature",
        ));
    }
    let compression = match (format, cli.compression.or(file.compression)) {
        (Format::Parquet, Some(Compression::Gzip)) => {
            return Err(usage(
                "Parquet files are compressed with zstd (the default), snappy or none",
            ))
        }
        (Format::Parquet, chosen) => chosen.unwrap_or(Compression::Zstd),
        (_, Some(Compression::Snappy)) => {
            return Err(usage(
                "--compression snappy applies to Parquet; CSV and JSON lines take gzip or zstd",
            ))
        }
        (_, chosen) => chosen.unwrap_or_default(),
    };
    let partition_by = if cli.partition_by.is_empty() {
        file.partition_by.clone()
    } else {
        cli.partition_by.clone()
    };
    check_columns("--partition-by", &partition_by)?;
    for col in &partition_by {
        if col.starts_with('_') || col.starts_with('.') {
            return Err(usage(format!(
                "--partition-by column {col:?} starts with '{}', which would make its \
                 partitions hidden from Hive, Spark and DuckDB; rename the column first",
                &col[..1]
            )));
        }
    }
    let mode = cli.mode.or(file.mode).unwrap_or_default();
    if mode == Mode::OverwritePartitions && partition_by.is_empty() {
        return Err(usage(
            "--mode overwrite-partitions replaces the partitions a load writes to, so it \
             needs --partition-by (or `partition_by` in the job file)",
        ));
    }
    if let (Mode::OverwritePartitions, Some(url), TableFormat::Hive) =
        (mode, &common.remote, table_format)
    {
        return Err(usage(format!(
            "--mode overwrite-partitions is not supported for a Hive table in a bucket \
             ({url}): an object store cannot swap a partition's files at once; use \
             --mode append, or a Delta table (--table-format delta), whose log does"
        )));
    }
    let mut stages = file.stages.clone();
    if !file.dedupe_key.is_empty() {
        stages.push(StageSpec::Dedupe {
            key: file.dedupe_key.clone(),
            scope: file.dedupe_scope.unwrap_or_default(),
            retention: file.dedupe_retention.clone(),
        });
    }
    stages.extend(cli_stages(&cli)?);
    // A time zone or a retention is a usage mistake however it was given (flag or job
    // file): exit 2 before anything is read, like an unknown cast type.
    for stage in &stages {
        if let StageSpec::Dedupe {
            scope,
            retention: Some(text),
            ..
        } = stage
        {
            if *scope != crate::core::spec::DedupeScope::Job {
                return Err(usage(
                    "a dedupe retention applies to the job scope (--dedupe-scope job)",
                ));
            }
            crate::state::keystore::parse_retention(text).map_err(usage)?;
        }
        if let StageSpec::Cast {
            timezone: Some(tz), ..
        } = stage
        {
            crate::stage::cast::parse_timezone(tz)
                .map_err(|e| usage(format!("--timezone: {e}")))?;
        }
    }
    Ok(Command::Load(Box::new(LoadConfig {
        common,
        inputs,
        reload: cli.reload,
        dry_run: cli.dry_run,
        shard: match &cli.shard {
            Some(text) => Some(crate::core::shard::Shard::parse(text).map_err(usage)?),
            None => None,
        },
        select: crate::source::select::Selection::new(
            if cli.include.is_empty() {
                &file.include
            } else {
                &cli.include
            },
            if cli.exclude.is_empty() {
                &file.exclude
            } else {
                &cli.exclude
            },
        )?,
        min_age: match cli.min_age.as_deref().or(file.min_age.as_deref()) {
            Some(text) => Some(humantime::parse_duration(text.trim()).map_err(|e| {
                usage(format!(
                    "--min-age {text:?} is not a duration such as 90s, 5m or 1h: {e}"
                ))
            })?),
            None => None,
        },
        evolve: cli.evolve.or(file.evolve).unwrap_or_default(),
        infer: !cli.no_infer && file.infer != Some(false),
        options: RunOptions {
            delimiter,
            partition_by,
            checkpoint_rows: cli
                .checkpoint_rows
                .or(file.checkpoint_rows)
                .unwrap_or(DEFAULT_CHECKPOINT_ROWS),
            format,
            table_format,
            catalog,
            max_errors: cli.max_errors.or(file.max_errors).unwrap_or(0),
            schema: file.schema,
            stages,
            compression,
            target_file_size: match cli
                .target_file_size
                .as_deref()
                .or(file.target_file_size.as_deref())
            {
                Some(size) => Some(parse_size(size)?),
                None => None,
            },
            mode,
            json_new_keys: cli.json_new_keys.or(file.json_new_keys).unwrap_or_default(),
            on_bad_input: cli.on_bad_input.or(file.on_bad_input).unwrap_or_default(),
            fill_missing: cli.evolve.or(file.evolve)
                == Some(crate::core::options::Evolve::AddColumns),
        },
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("128M").unwrap(), 128 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert!(parse_size("12X").is_err());
        assert!(parse_size("10").is_err());
    }

    #[test]
    fn delimiters() {
        assert_eq!(parse_delimiter(",").unwrap(), b',');
        assert_eq!(parse_delimiter("tab").unwrap(), b'\t');
        assert_eq!(parse_delimiter(";").unwrap(), b';');
        assert!(parse_delimiter("\"").is_err());
        assert!(parse_delimiter(";;").is_err());
        assert!(parse_delimiter("é").is_err());
    }

    #[test]
    fn job_names_cannot_walk_out_of_ingest_dir() {
        assert!(check_job_name("nightly-orders_2").is_ok());
        for bad in ["", "..", "a/b", "-x", ".hidden", "a b"] {
            assert!(check_job_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
