//! The table contract: what every data file of a table agrees on, so that a reader can
//! read the table as one (DuckDB, Spark and Trino fail on the whole table when one file
//! has other columns or another format).
//!
//! The first load of a table records it in `TABLE/_ingest/contract.json`: the columns
//! the sink receives (names and types, partition columns included), the output format
//! and compression, the partition columns, and the delimiter of CSV output. Every later
//! load, of any job, compares its own contract with the recorded one after its options
//! are checked and before its journal exists, so a mismatch fails before a row is read,
//! with both sides shown.
//!
//! # Evolving a table on purpose
//! With `--evolve add-columns` a load may add columns after the recorded ones (the
//! recorded ones unchanged, in order and type); the contract then grows to the load's
//! columns. Older files lack the new columns, which readers fill with nulls: Parquet
//! readers by name, DuckDB's CSV reader with `union_by_name=true`. Nothing else evolves:
//! another format, compression, delimiter or partitioning is another table.
//!
//! Durability: the contract is written like every state file (temporary file, fsync,
//! rename, fsync of `_ingest/`), under a table-wide lock (`_ingest/contract.lock`) so
//! that two jobs' first loads, or two evolutions, cannot both win.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::core::catalog::CatalogTable;
use crate::core::options::Compression;
use crate::core::options::Evolve;
use crate::core::options::Format;
use crate::core::options::RunOptions;
use crate::core::options::TableFormat;
use crate::core::schema::{Column, Schema};
use crate::core::sys::fsutil;

const VERSION: u32 = 1;

/// What every data file of the table agrees on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Contract {
    /// The columns of every row, partition columns included, in order.
    pub(crate) columns: Vec<Column>,
    pub(crate) partition_by: Vec<String>,
    pub(crate) format: Format,
    /// Hive directories or a Delta table (contracts recorded before Delta tables existed
    /// are Hive's).
    #[serde(default, skip_serializing_if = "is_hive")]
    pub(crate) table_format: TableFormat,
    /// An Iceberg table: the catalog that commits it and its name there. Another
    /// catalog is another table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) catalog: Option<CatalogTable>,
    pub(crate) compression: Compression,
    /// The field delimiter of CSV output files; `None` for other formats.
    pub(crate) csv_delimiter: Option<char>,
}

impl Contract {
    /// The contract a load with these options and this sink schema would write.
    pub(crate) fn of(schema: &Schema, options: &RunOptions) -> Contract {
        Contract {
            columns: schema.columns.clone(),
            partition_by: options.partition_by.clone(),
            format: options.format,
            table_format: options.table_format,
            catalog: options.catalog.clone(),
            compression: options.compression,
            csv_delimiter: (options.format == Format::Csv).then_some(','),
        }
    }

    fn describe(&self) -> String {
        let mut text = format!(
            "{}{}, compression {}",
            match self.table_format {
                TableFormat::Hive => "",
                TableFormat::Delta => "a Delta table of ",
                TableFormat::Iceberg => "an Iceberg table of ",
            },
            name(&self.format),
            name(&self.compression)
        );
        if let Some(catalog) = &self.catalog {
            let _ = write!(
                text,
                ", {} in the catalog {}",
                catalog.name, catalog.catalog
            );
        }
        if let Some(d) = self.csv_delimiter {
            let _ = write!(text, ", delimiter {d:?}");
        }
        let _ = write!(
            text,
            ", partitioned by [{}], columns: {}",
            self.partition_by.join(", "),
            self.columns
                .iter()
                .map(|c| format!("{} {}", c.name, c.ty))
                .collect::<Vec<_>>()
                .join(", ")
        );
        text
    }
}

/// An option's name as users write it (`csv`, `zstd`): its serde name.
pub(crate) fn name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".to_string(),
    }
}

fn is_hive(format: &TableFormat) -> bool {
    *format == TableFormat::Hive
}

/// The contract as stored, with who recorded it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    version: u32,
    contract: Contract,
    recorded_by: Recorded,
}

/// Who recorded (or last evolved) the contract.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Recorded {
    job: String,
    run_id: String,
}

/// Puts back the contract as it was before run `run_id` evolved it (`before`, the file's
/// text then), if the contract is still the one that run wrote: a later evolution by
/// another run stays. Returns whether it did.
///
/// Survives: a crash at any instant, as every state file (`fsutil::write_atomic`);
/// repeating it after a crash finds the old text in place and does nothing.
pub(crate) fn restore(table: &Path, run_id: &str, before: &str) -> Result<bool> {
    let _lock = fsutil::lock_wait(&table.join("_ingest").join("contract.lock"))?;
    fsutil::settle(&path(table))?;
    match load_stored(table)? {
        Some(stored) if stored.recorded_by.run_id == run_id => {
            fsutil::write_atomic(&path(table), before.as_bytes())?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The catalog table a table's contract records, if it has one (an Iceberg table).
#[cfg(feature = "iceberg")]
pub(crate) fn catalog(table: &Path) -> Result<Option<CatalogTable>> {
    Ok(load_stored(table)?.and_then(|s| s.contract.catalog))
}

/// The table format a table's contract records, if it has one.
pub(crate) fn table_format(table: &Path) -> Result<Option<TableFormat>> {
    Ok(load_stored(table)?.map(|s| s.contract.table_format))
}

/// The contract file of a table.
pub(crate) fn path(table: &Path) -> PathBuf {
    table.join("_ingest").join("contract.json")
}

/// The recorded contract of a table, if it has one.
pub(crate) fn load(table: &Path) -> Result<Option<Contract>> {
    Ok(load_stored(table)?.map(|s| s.contract))
}

/// True when two recorded contracts (the bytes of `contract.json`) hold the same terms,
/// whoever recorded them.
#[cfg(any(test, feature = "s3"))]
pub(crate) fn same_terms(a: &[u8], b: &[u8]) -> bool {
    let parse = |bytes| serde_json::from_slice::<Stored>(bytes).ok();
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a.version == b.version && a.contract == b.contract,
        _ => false,
    }
}

fn load_stored(table: &Path) -> Result<Option<Stored>> {
    let file = path(table);
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let stored: Stored = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is damaged; restore it from a backup", file.display()))?;
    if stored.version != VERSION {
        bail!(
            "{} has version {}, this ingest reads version {VERSION}",
            file.display(),
            stored.version
        );
    }
    Ok(Some(stored))
}

/// What [`settle`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The table had no contract: this load's is now recorded.
    Recorded,
    /// The load matches the recorded contract.
    Matches,
    /// The load added columns (`--evolve add-columns`); the contract grew. Holds the
    /// contract file as it was, for [`restore`].
    Evolved(String),
}

/// Checks a load's contract against the table's, recording it if the table has none (or
/// evolving it as `evolve` allows); fails, showing both sides, when they disagree. The
/// table is `shown` as the user named it (a URL for a table in a bucket, whose contract
/// here is the working copy's).
pub(crate) fn settle(
    table: &Path,
    shown: &str,
    proposed: &Contract,
    evolve: Evolve,
    job: &str,
    run_id: &str,
) -> Result<Settled> {
    let ingest = table.join("_ingest");
    let _lock = fsutil::lock_wait(&ingest.join("contract.lock"))?;
    // Settled before it is relied on, like the journal (checkpoint.rs, failure case 6).
    fsutil::settle(&path(table))?;
    let write = |contract: &Contract| -> Result<()> {
        let stored = Stored {
            version: VERSION,
            contract: contract.clone(),
            recorded_by: Recorded {
                job: job.to_string(),
                run_id: run_id.to_string(),
            },
        };
        let mut bytes = serde_json::to_vec_pretty(&stored)?;
        bytes.push(b'\n');
        fsutil::write_atomic(&path(table), &bytes)
    };
    let Some(stored) = load_stored(table)? else {
        write(proposed)?;
        return Ok(Settled::Recorded);
    };
    let differences = match judge(&stored.contract, proposed, evolve) {
        Ok(Verdict::Matches) => return Ok(Settled::Matches),
        Ok(Verdict::Evolves) => {
            let before = std::fs::read_to_string(path(table))
                .with_context(|| format!("cannot read {}", path(table).display()))?;
            write(proposed)?;
            return Ok(Settled::Evolved(before));
        }
        Err(differences) => differences,
    };
    let recorded = &stored.contract;
    bail!(
        "this load does not fit table {}'s contract ({}/_ingest/contract.json, recorded by job \
         {:?}, run {}):\n  \
         table:     {}\n  this load: {}\n{}\nload into another table, or change the load \
         (a cast, a rename, a drop) to match",
        shown,
        shown,
        stored.recorded_by.job,
        stored.recorded_by.run_id,
        recorded.describe(),
        proposed.describe(),
        differences
            .iter()
            .map(|d| format!("  - {d}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// How a load's contract meets the recorded one.
enum Verdict {
    Matches,
    /// It adds columns after the recorded ones, as `--evolve add-columns` allows.
    Evolves,
}

/// Compares a load's contract with the recorded one; the differences when they do not
/// fit.
fn judge(recorded: &Contract, proposed: &Contract, evolve: Evolve) -> Result<Verdict, Vec<String>> {
    if recorded == proposed {
        return Ok(Verdict::Matches);
    }
    let mut differences = Vec::new();
    if recorded.format != proposed.format {
        differences.push(format!(
            "format: the table is {}, this load writes {}",
            name(&recorded.format),
            name(&proposed.format)
        ));
    }
    if recorded.compression != proposed.compression {
        differences.push(format!(
            "compression: the table's files use {}, this load's {}",
            name(&recorded.compression),
            name(&proposed.compression)
        ));
    }
    if recorded.csv_delimiter != proposed.csv_delimiter && recorded.format == proposed.format {
        differences.push("CSV delimiter differs".to_string());
    }
    if recorded.partition_by != proposed.partition_by {
        differences.push(format!(
            "partitioning: the table is partitioned by [{}], this load by [{}]",
            recorded.partition_by.join(", "),
            proposed.partition_by.join(", ")
        ));
    }
    let (old, new) = (&recorded.columns, &proposed.columns);
    let prefix = new.len() > old.len() && new[..old.len()] == old[..];
    if old != new {
        if prefix && evolve == Evolve::AddColumns && differences.is_empty() {
            return Ok(Verdict::Evolves);
        }
        if prefix {
            let added: Vec<String> = new[old.len()..]
                .iter()
                .map(|c| format!("{} {}", c.name, c.ty))
                .collect();
            differences.push(format!(
                "columns: this load adds {} after the table's columns; pass --evolve \
                 add-columns to add them (files already in the table read them as null)",
                added.join(", ")
            ));
        } else {
            differences.extend(column_differences(old, new));
        }
    }
    Err(differences)
}

/// Why table `table`'s recorded contract refuses `proposed`, if it does; records
/// nothing (for choosing among inputs before one is settled).
pub(crate) fn refusal(table: &Path, proposed: &Contract, evolve: Evolve) -> Result<Option<String>> {
    let Some(stored) = load_stored(table)? else {
        return Ok(None);
    };
    Ok(judge(&stored.contract, proposed, evolve)
        .err()
        .map(|d| d.join("; ")))
}

/// The differences between two column lists, by name: missing, added, retyped, moved.
fn column_differences(old: &[Column], new: &[Column]) -> Vec<String> {
    let find = |cols: &[Column], name: &str| cols.iter().find(|c| c.name == name).cloned();
    let list = |cols: Vec<&Column>| {
        cols.iter()
            .map(|c| format!("{} {}", c.name, c.ty))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = Vec::new();
    let missing: Vec<&Column> = old
        .iter()
        .filter(|c| find(new, &c.name).is_none())
        .collect();
    if !missing.is_empty() {
        out.push(format!(
            "columns: this load lacks {}; pass --evolve add-columns to load them as null",
            list(missing)
        ));
    }
    let added: Vec<&Column> = new
        .iter()
        .filter(|c| find(old, &c.name).is_none())
        .collect();
    if !added.is_empty() {
        out.push(format!(
            "columns: this load adds {} (a load may add columns only after the table's, with \
             --evolve add-columns)",
            list(added)
        ));
    }
    for c in old {
        if let Some(n) = find(new, &c.name).filter(|n| n.ty != c.ty) {
            out.push(format!(
                "column {}: the table has {}, this load has {}",
                c.name, c.ty, n.ty
            ));
        }
    }
    let order = |cols: &[Column], other: &[Column]| -> Vec<String> {
        cols.iter()
            .filter(|c| find(other, &c.name).is_some())
            .map(|c| c.name.clone())
            .collect()
    };
    let (old_order, new_order) = (order(old, new), order(new, old));
    if old_order != new_order {
        out.push(format!(
            "columns are in another order: the table has {}, this load {}",
            old_order.join(", "),
            new_order.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schema::ColumnType;

    fn stored(job: &str, columns: &[&str]) -> Vec<u8> {
        let stored = Stored {
            version: VERSION,
            contract: Contract {
                columns: columns
                    .iter()
                    .map(|name| Column {
                        name: name.to_string(),
                        ty: ColumnType::String,
                    })
                    .collect(),
                partition_by: vec!["dt".into()],
                format: Format::Parquet,
                table_format: TableFormat::Delta,
                catalog: None,
                compression: Compression::Zstd,
                csv_delimiter: None,
            },
            recorded_by: Recorded {
                job: job.into(),
                run_id: format!("run-of-{job}"),
            },
        };
        serde_json::to_vec_pretty(&stored).unwrap()
    }

    #[test]
    fn contracts_recorded_by_different_jobs_have_the_same_terms_when_their_terms_agree() {
        let a = stored("shard-0", &["dt", "id"]);
        assert!(same_terms(&a, &stored("shard-1", &["dt", "id"])));
        assert!(!same_terms(&a, &stored("shard-1", &["dt", "id", "extra"])));
        assert!(!same_terms(&a, b"not json"));
        assert!(!same_terms(b"{}", b"{}"));
    }
}
