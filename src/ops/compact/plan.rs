//! What a compaction rewrites: for each partition, its small files grouped into bins of
//! at most the target size, each bin one new file.

use std::path::Path;

use crate::core::options::Format;
use crate::ops::report::PartitionReport;
use crate::sink::merge::FileKind;
use anyhow::{bail, Context, Result};

/// One table file, by its name in its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableFile {
    pub(crate) name: String,
    pub(crate) size: u64,
}

/// Files of one kind and shape, in name order (for the files of one job, the order they
/// were written in), that become one new file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bin {
    pub(crate) kind: FileKind,
    pub(crate) files: Vec<TableFile>,
}

impl Bin {
    pub(crate) fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// A partition with something to merge.
#[derive(Debug, Clone)]
pub(crate) struct Partition {
    /// Relative to the table (`country=US/dt=2026-11-28`).
    pub(crate) path: String,
    pub(crate) bins: Vec<Bin>,
}

impl Partition {
    pub(crate) fn report(&self) -> PartitionReport {
        PartitionReport {
            partition: self.path.clone(),
            files_before: self.bins.iter().map(|b| b.files.len() as u64).sum(),
            bytes_before: self.bins.iter().map(Bin::bytes).sum(),
            files_after: self.bins.len() as u64,
        }
    }
}

/// The partitions of the table at `table` (partitioned by `partition_by`, its files of
/// `format`) that have two or more files under `target` bytes that can merge, limited to
/// those matching every `only` filter (`COL=VALUE` directory components).
pub(crate) fn plan(
    table: &Path,
    partition_by: &[String],
    format: Format,
    target: u64,
    only: &[(String, String)],
) -> Result<Vec<Partition>> {
    for (column, _) in only {
        if !partition_by.contains(column) {
            bail!(
                "--partition {column}=…: {column} is not a partition column of the table \
                 (it is partitioned by {})",
                partition_by.join(", ")
            );
        }
    }
    let mut partitions = Vec::new();
    let walk = walkdir::WalkDir::new(table)
        .min_depth(partition_by.len())
        .max_depth(partition_by.len())
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !hidden(&e.file_name().to_string_lossy()));
    for entry in walk {
        let entry = entry.with_context(|| format!("cannot list {}", table.display()))?;
        if !entry.file_type().is_dir() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(table)
            .with_context(|| format!("{} is outside the table", entry.path().display()))?;
        let components: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if !is_partition(&components, partition_by) || !matches(&components, only)? {
            continue;
        }
        let bins = bins(entry.path(), format, target)?;
        if !bins.is_empty() {
            partitions.push(Partition {
                path: components.join("/"),
                bins,
            });
        }
    }
    Ok(partitions)
}

fn hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

/// Whether each component is `COL=…` for the partition column at its depth.
fn is_partition(components: &[String], partition_by: &[String]) -> bool {
    components.len() == partition_by.len()
        && components
            .iter()
            .zip(partition_by)
            .all(|(c, col)| c.split_once('=').is_some_and(|(name, _)| *name == **col))
}

/// Whether the partition matches every filter: its component for the column is
/// `COL=VALUE` as written, or as ingest escapes VALUE into a directory name.
fn matches(components: &[String], only: &[(String, String)]) -> Result<bool> {
    for (column, value) in only {
        let mut escaped = String::new();
        crate::sink::partition::component(column, value.as_bytes(), &mut escaped)?;
        let literal = format!("{column}={value}");
        let found = components.iter().any(|c| *c == escaped || *c == literal);
        if !found {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The bins of one partition's files: its data files under `target` bytes, grouped by
/// kind and shape, taken in name order into bins of at most `target` bytes; only bins of
/// two or more files are kept (one file alone is already as few as it gets).
fn bins(dir: &Path, format: Format, target: u64) -> Result<Vec<Bin>> {
    let mut small = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(kind) = FileKind::of(&name, format) else {
            continue;
        };
        let meta = entry
            .metadata()
            .with_context(|| format!("cannot stat {}", entry.path().display()))?;
        if !meta.is_file() || meta.len() >= target {
            continue;
        }
        small.push((kind, name, meta.len()));
    }
    small.sort_by(|a, b| a.1.cmp(&b.1));
    // (kind, shape) → the bin being filled, then the full ones.
    let mut open: Vec<((FileKind, String), Bin)> = Vec::new();
    let mut bins = Vec::new();
    for (kind, name, size) in small {
        let shape = kind.shape(&dir.join(&name))?;
        let key = (kind, shape);
        let at = match open.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                open.push((
                    key,
                    Bin {
                        kind,
                        files: Vec::new(),
                    },
                ));
                open.len() - 1
            }
        };
        let bin = &mut open[at].1;
        if !bin.files.is_empty() && bin.bytes() + size > target {
            let full = std::mem::take(&mut bin.files);
            bins.push(Bin { kind, files: full });
        }
        bin.files.push(TableFile { name, size });
    }
    bins.extend(open.into_iter().map(|(_, bin)| bin));
    bins.retain(|b| b.files.len() >= 2);
    Ok(bins)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, bytes: &[u8]) {
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    #[test]
    fn small_files_of_one_header_fill_bins_up_to_the_target() {
        let table = tempfile::tempdir().unwrap();
        let dir = table.path().join("dt=1");
        std::fs::create_dir_all(&dir).unwrap();
        let ten = b"id\n12345\n1"; // 10 bytes
        for name in ["a.csv", "b.csv", "c.csv", "d.csv", "e.csv"] {
            file(&dir, name, ten);
        }
        file(&dir, "f.csv", b"other\n1\n"); // another header: a bin of one, left alone
        file(&dir, "big.csv", &[b'x'; 40]); // at the target: left alone
        file(&dir, ".hidden.csv", ten);
        file(&dir, "notes.txt", ten);
        let by = vec!["dt".to_string()];
        let plan = plan(table.path(), &by, Format::Csv, 40, &[]).unwrap();
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].path, "dt=1");
        let names: Vec<Vec<&str>> = plan[0]
            .bins
            .iter()
            .map(|b| b.files.iter().map(|f| f.name.as_str()).collect())
            .collect();
        // 4 x 10 bytes fill the first bin; the fifth file alone is no bin.
        assert_eq!(names, vec![vec!["a.csv", "b.csv", "c.csv", "d.csv"]]);
        let report = plan[0].report();
        assert_eq!(
            (report.files_before, report.bytes_before, report.files_after),
            (4, 40, 1)
        );
    }

    #[test]
    fn filters_pick_partitions_by_column_and_value_and_name_only_partition_columns() {
        let table = tempfile::tempdir().unwrap();
        for p in ["a=1/b=x", "a=1/b=y", "a=2/b=x", "_ingest/b=x", "a=1/c=z"] {
            let dir = table.path().join(p);
            std::fs::create_dir_all(&dir).unwrap();
            file(&dir, "1.csv", b"id\n1\n");
            file(&dir, "2.csv", b"id\n2\n");
        }
        let by = vec!["a".to_string(), "b".to_string()];
        let paths = |only: &[(String, String)]| -> Vec<String> {
            plan(table.path(), &by, Format::Csv, 1 << 20, only)
                .unwrap()
                .into_iter()
                .map(|p| p.path)
                .collect()
        };
        assert_eq!(paths(&[]), vec!["a=1/b=x", "a=1/b=y", "a=2/b=x"]);
        assert_eq!(
            paths(&[("b".into(), "x".into())]),
            vec!["a=1/b=x", "a=2/b=x"]
        );
        assert_eq!(
            paths(&[("a".into(), "1".into()), ("b".into(), "y".into())]),
            vec!["a=1/b=y"]
        );
        let err = plan(
            table.path(),
            &by,
            Format::Csv,
            1,
            &[("c".into(), "z".into())],
        );
        assert!(format!("{:#}", err.unwrap_err()).contains("not a partition column"));
    }
}
