//! `ingest --status --files`: each partition's data files, their count and sizes, and
//! whether `--compact` would merge them (readers open every file, so many small ones
//! cost every query).

use std::fmt::Write;
use std::path::Path;

use anyhow::Result;
use indicatif::HumanBytes;
use serde::Serialize;

use crate::core::layout::JobLayout;
use crate::ops::compact::plan::files_by_partition;
use crate::state::contract;

/// What `--compact` aims at by default; files under it are small.
pub(crate) const SMALL_BELOW: u64 = 128 << 20;

/// One partition's data files.
#[derive(Debug, Serialize)]
pub(crate) struct PartitionFiles {
    /// Relative to the table (`""`: the table's own directory).
    pub(crate) partition: String,
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) smallest: u64,
    pub(crate) largest: u64,
    /// Files under [`SMALL_BELOW`]: two or more of them, and `--compact` merges them.
    pub(crate) small: u64,
}

/// The table's data files, by partition: those its directories hold, or those its Delta
/// log's current version names.
#[derive(Debug, Default, Serialize)]
pub(crate) struct TableFiles {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) partitions: Vec<PartitionFiles>,
    /// Partitions with two or more small files, and how many files those hold.
    pub(crate) compactable_partitions: u64,
    pub(crate) compactable_files: u64,
}

/// The files of the local table at `table`; empty for a table nothing was loaded into.
pub(crate) fn of(table: &Path) -> Result<TableFiles> {
    let Some(contract) = contract::load(table)? else {
        return Ok(TableFiles::default());
    };
    let layout = JobLayout::new(table, "default");
    let live = crate::table::format(contract.table_format)?.live_files(&layout)?;
    let by = files_by_partition(
        table,
        &contract.partition_by,
        contract.format,
        live.as_ref().map(|l| &l.files[..]),
    )?;
    let mut out = TableFiles::default();
    for (partition, files) in by {
        let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
        let small = sizes.iter().filter(|s| **s < SMALL_BELOW).count() as u64;
        let p = PartitionFiles {
            partition,
            files: sizes.len() as u64,
            bytes: sizes.iter().sum(),
            smallest: sizes.iter().copied().min().unwrap_or(0),
            largest: sizes.iter().copied().max().unwrap_or(0),
            small,
        };
        out.files += p.files;
        out.bytes += p.bytes;
        if small >= 2 {
            out.compactable_partitions += 1;
            out.compactable_files += small;
        }
        out.partitions.push(p);
    }
    Ok(out)
}

/// The files as `--status --files` prints them, after the jobs.
pub(crate) fn write_text(out: &mut String, files: &TableFiles, table: &str) -> std::fmt::Result {
    writeln!(
        out,
        "files: {} in {} partition(s), {}",
        files.files,
        files.partitions.len(),
        HumanBytes(files.bytes)
    )?;
    for p in &files.partitions {
        let name = if p.partition.is_empty() {
            "(the table's directory)"
        } else {
            &p.partition
        };
        writeln!(
            out,
            "  {name}: {} file(s), {} (smallest {}, largest {})",
            p.files,
            HumanBytes(p.bytes),
            HumanBytes(p.smallest),
            HumanBytes(p.largest)
        )?;
    }
    if files.compactable_partitions > 0 {
        writeln!(
            out,
            "  {} partition(s) hold {} files under {} that readers open one by one; \
             `ingest --target {table} --compact` merges them (--dry-run lists what it would do)",
            files.compactable_partitions,
            files.compactable_files,
            HumanBytes(SMALL_BELOW)
        )?;
    }
    Ok(())
}
