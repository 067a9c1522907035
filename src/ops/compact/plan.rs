//! What a compaction rewrites: for each partition, its small files grouped into bins of
//! at most the target size, each bin one new file.

use std::path::Path;

use super::inputs::Inputs;
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

/// The partitions of the table `inputs` reads (partitioned by `partition_by`, its files
/// of `format`) that have two or more files under `target` bytes that can merge, limited
/// to those matching every `only` filter (`COL=VALUE` directory components). The files
/// are those its directories hold, or `listed` (path relative to the table, size) for a
/// table whose log names them.
pub(crate) fn plan(
    inputs: &Inputs,
    partition_by: &[String],
    format: Format,
    target: u64,
    only: &[(String, String)],
    listed: Option<&[(String, u64)]>,
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
    let by_partition = match (listed, inputs) {
        (Some(files), _) => grouped(files),
        (None, Inputs::Dir(table)) => listed_in_directories(table, partition_by)?,
        #[cfg(feature = "s3")]
        (None, Inputs::Bucket(bucket)) => {
            bail!(
                "{}: a table in a bucket is compacted by its log's list of files",
                bucket.url()
            )
        }
    };
    // Each partition's small files of the table's kinds, then the shape of each (read
    // all at once: from a bucket, concurrently), then the bins.
    let mut candidates = Vec::new();
    for (path, files) in by_partition {
        let components: Vec<String> = match path.as_str() {
            "" => Vec::new(),
            path => path.split('/').map(str::to_string).collect(),
        };
        if !is_partition(&components, partition_by) || !matches(&components, only)? {
            continue;
        }
        let mut small: Vec<(FileKind, TableFile)> = files
            .into_iter()
            .filter(|f| f.size < target)
            .filter_map(|f| FileKind::of(&f.name, format).map(|kind| (kind, f)))
            .collect();
        small.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        // One file alone is already as few as it gets: its shape is never needed.
        if small.len() >= 2 {
            candidates.push((path, small));
        }
    }
    let wanted: Vec<(FileKind, String, u64)> = candidates
        .iter()
        .flat_map(|(path, small)| {
            small
                .iter()
                .map(move |(kind, f)| (*kind, in_partition(path, &f.name), f.size))
        })
        .collect();
    let mut shapes = inputs.shapes(&wanted)?.into_iter();
    let mut partitions = Vec::new();
    for (path, small) in candidates {
        let shaped = small
            .into_iter()
            .map(|(kind, f)| {
                let shape = shapes.next().context("a file's shape is missing")?;
                Ok((kind, shape, f))
            })
            .collect::<Result<Vec<_>>>()?;
        let bins = bins(shaped, target);
        if !bins.is_empty() {
            partitions.push(Partition { path, bins });
        }
    }
    Ok(partitions)
}

/// A file's path relative to the table: in its partition's directory, or in the table's
/// own (an unpartitioned Delta table).
pub(crate) fn in_partition(partition: &str, name: &str) -> String {
    match partition {
        "" => name.to_string(),
        partition => format!("{partition}/{name}"),
    }
}

/// The files of each partition of the table (the log's `listed`, or its directories'),
/// by partition path, data files of `format` only, in name order.
pub(crate) fn files_by_partition(
    table: &Path,
    partition_by: &[String],
    format: Format,
    listed: Option<&[(String, u64)]>,
) -> Result<std::collections::BTreeMap<String, Vec<TableFile>>> {
    let mut by = match listed {
        Some(files) => grouped(files),
        None => listed_in_directories(table, partition_by)?,
    };
    for files in by.values_mut() {
        files.retain(|f| FileKind::of(&f.name, format).is_some());
        files.sort_by(|a, b| a.name.cmp(&b.name));
    }
    by.retain(|_, files| !files.is_empty());
    Ok(by)
}

/// Files by the partition directory they are in (`""`: the table's own).
fn grouped(files: &[(String, u64)]) -> std::collections::BTreeMap<String, Vec<TableFile>> {
    let mut by = std::collections::BTreeMap::<String, Vec<TableFile>>::new();
    for (path, size) in files {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        by.entry(dir.to_string()).or_default().push(TableFile {
            name: name.to_string(),
            size: *size,
        });
    }
    by
}

/// The files of each partition directory of a Hive table, by walking it.
fn listed_in_directories(
    table: &Path,
    partition_by: &[String],
) -> Result<std::collections::BTreeMap<String, Vec<TableFile>>> {
    let mut by = std::collections::BTreeMap::new();
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
        let path = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let dir = entry.path();
        let mut files = Vec::new();
        for file in
            std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            let file = file.with_context(|| format!("cannot list {}", dir.display()))?;
            let meta = file
                .metadata()
                .with_context(|| format!("cannot stat {}", file.path().display()))?;
            if meta.is_file() {
                files.push(TableFile {
                    name: file.file_name().to_string_lossy().into_owned(),
                    size: meta.len(),
                });
            }
        }
        by.insert(path, files);
    }
    Ok(by)
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

/// The bins of one partition's small files (each with its kind and shape, in name
/// order): grouped by kind and shape, taken in order into bins of at most `target`
/// bytes; only bins of two or more files are kept (one file alone is already as few as
/// it gets).
fn bins(small: Vec<(FileKind, String, TableFile)>, target: u64) -> Vec<Bin> {
    // (kind, shape) → the bin being filled, then the full ones.
    let mut open: Vec<((FileKind, String), Bin)> = Vec::new();
    let mut bins = Vec::new();
    for (kind, shape, file) in small {
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
        if !bin.files.is_empty() && bin.bytes() + file.size > target {
            let full = std::mem::take(&mut bin.files);
            bins.push(Bin { kind, files: full });
        }
        bin.files.push(file);
    }
    bins.extend(open.into_iter().map(|(_, bin)| bin));
    bins.retain(|b| b.files.len() >= 2);
    bins
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
        let plan = plan(
            &Inputs::Dir(table.path().into()),
            &by,
            Format::Csv,
            40,
            &[],
            None,
        )
        .unwrap();
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
            plan(
                &Inputs::Dir(table.path().into()),
                &by,
                Format::Csv,
                1 << 20,
                only,
                None,
            )
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
            &Inputs::Dir(table.path().into()),
            &by,
            Format::Csv,
            1,
            &[("c".into(), "z".into())],
            None,
        );
        assert!(format!("{:#}", err.unwrap_err()).contains("not a partition column"));
    }

    #[test]
    fn listed_files_are_those_of_a_log_not_of_the_directories() {
        let table = tempfile::tempdir().unwrap();
        // On disk: four files in p=1, one named by no version; two at the root.
        let dir = table.path().join("p=1");
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["a.parquet", "b.parquet", "c.parquet", "gone.parquet"] {
            file(&dir, name, b"");
        }
        let listed: Vec<(String, u64)> = [
            ("p=1/a.parquet", 10),
            ("p=1/b.parquet", 10),
            ("p=1/c.parquet", 500),
            ("x.parquet", 10),
            ("y.parquet", 10),
        ]
        .into_iter()
        .map(|(p, s)| (p.to_string(), s))
        .collect();
        let by = vec!["p".to_string()];
        // Empty files have no Parquet schema: a shape is read only for files that bin.
        let plan = plan(
            &Inputs::Dir(table.path().into()),
            &by,
            Format::Parquet,
            100,
            &[],
            Some(&listed),
        );
        let err = format!("{:#}", plan.unwrap_err());
        assert!(err.contains("a.parquet"), "{err}");
        // Unpartitioned: the table's own files.
        let grouped = grouped(&listed);
        assert_eq!(
            grouped.keys().collect::<Vec<_>>(),
            vec![&"".to_string(), &"p=1".to_string()]
        );
        assert_eq!(grouped["p=1"].len(), 3);
        assert_eq!(grouped[""][1].name, "y.parquet");
    }
}
