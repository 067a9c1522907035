//! Finds the inputs (files, or directories walked in sorted order; objects, or key
//! prefixes listed in key order), keeps those `select.rs` chooses (never a hidden name
//! below a directory or prefix), and fingerprints them from their metadata.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use walkdir::WalkDir;

use super::select::Selection;
use crate::core::protocol::Fingerprint;
use crate::core::url;

/// Expands the command-line inputs into fingerprinted files (canonical paths) and
/// objects (`s3://` URLs): argument order, then sorted path (key) order inside each
/// directory (prefix); an input named twice is read once. Nothing under `exclude` (the
/// target table) is ever an input, so a table kept inside its input directory does not
/// load itself. Below a directory or prefix, only what `select` takes.
pub(crate) fn discover(
    args: &[PathBuf],
    exclude: &Path,
    select: &Selection,
) -> Result<Vec<Fingerprint>> {
    let exclude = exclude.canonicalize().ok();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    let mut found = Vec::new();
    for arg in args {
        if url::is_url_path(arg) {
            let prefix = arg.to_string_lossy().trim_end_matches('/').to_string();
            for object in list_objects(arg)? {
                // Empty for the object the argument names itself: taken as named.
                let rel = object
                    .path
                    .strip_prefix(&prefix)
                    .map_or("", |rel| rel.trim_start_matches('/'));
                if !rel.is_empty() && !select.takes(rel) {
                    continue;
                }
                if seen.insert(PathBuf::from(&object.path)) {
                    found.push(object);
                }
            }
            continue;
        }
        files.clear();
        let meta = std::fs::metadata(arg)
            .with_context(|| format!("input {} cannot be read", arg.display()))?;
        if meta.is_dir() {
            let root = arg
                .canonicalize()
                .with_context(|| format!("input {} cannot be resolved", arg.display()))?;
            let walk = WalkDir::new(&root)
                .follow_links(true)
                .sort_by_file_name()
                .into_iter()
                .filter_entry(|e| {
                    (e.depth() == 0 || !is_hidden(e.file_name()))
                        && Some(e.path()) != exclude.as_deref()
                });
            for entry in walk {
                let entry = entry
                    .with_context(|| format!("cannot walk input directory {}", arg.display()))?;
                if !entry.file_type().is_file() {
                    continue;
                }
                let rel = entry.path().strip_prefix(&root).unwrap_or(entry.path());
                // A name that is not UTF-8 is taken here and refused by name below.
                if rel.to_str().is_some_and(|rel| !select.takes(rel)) {
                    continue;
                }
                push_canonical(entry.path(), exclude.as_deref(), &mut seen, &mut files)?;
            }
        } else {
            push_canonical(arg, exclude.as_deref(), &mut seen, &mut files)?;
        }
        for file in &files {
            found.push(fingerprint(file)?);
        }
    }
    Ok(found)
}

#[cfg(feature = "s3")]
fn list_objects(arg: &Path) -> Result<Vec<Fingerprint>> {
    let url = url::parse(&arg.to_string_lossy())?;
    crate::storage::s3::list(&url)
}

#[cfg(not(feature = "s3"))]
fn list_objects(arg: &Path) -> Result<Vec<Fingerprint>> {
    url::parse(&arg.to_string_lossy())?;
    Err(no_object_storage())
}

#[cfg(not(feature = "s3"))]
fn no_object_storage() -> anyhow::Error {
    anyhow::Error::new(crate::core::error::UsageError(
        "this ingest was built without object storage (cargo feature \"s3\")".to_string(),
    ))
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    matches!(name.as_encoded_bytes().first(), Some(b'.' | b'_'))
}

fn push_canonical(
    path: &Path,
    exclude: Option<&Path>,
    seen: &mut HashSet<PathBuf>,
    files: &mut Vec<PathBuf>,
) -> Result<()> {
    let canonical = path
        .canonicalize()
        .with_context(|| format!("input {} cannot be resolved", path.display()))?;
    if exclude.is_some_and(|table| canonical.starts_with(table)) {
        return Ok(());
    }
    if canonical.to_str().is_none() {
        bail!(
            "input path {} is not valid UTF-8; rename it to load it",
            canonical.display()
        );
    }
    if seen.insert(canonical.clone()) {
        files.push(canonical);
    }
    Ok(())
}

/// Fingerprints a file (or an object) by its metadata; the content hash is taken while
/// it is read.
pub(crate) fn fingerprint(path: &Path) -> Result<Fingerprint> {
    if url::is_url_path(path) {
        return head_object(path);
    }
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot stat input {}", path.display()))?;
    let path = path
        .to_str()
        .context("input paths are UTF-8 (checked at discovery)")?;
    Ok(Fingerprint {
        path: path.to_string(),
        size: meta.len(),
        mtime_ns: meta
            .mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec()),
        dev: meta.dev(),
        ino: meta.ino(),
        etag: None,
    })
}

#[cfg(feature = "s3")]
fn head_object(path: &Path) -> Result<Fingerprint> {
    crate::storage::s3::head(&url::parse(&path.to_string_lossy())?)
}

#[cfg(not(feature = "s3"))]
fn head_object(path: &Path) -> Result<Fingerprint> {
    url::parse(&path.to_string_lossy())?;
    Err(no_object_storage())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_walked_sorted_without_hidden_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in [
            "b.csv",
            "a.csv",
            ".hidden.csv",
            "sub/c.csv",
            ".git/x.csv",
            "sub/.y.csv",
            "_SUCCESS",
            "_temporary/0/part.csv",
        ] {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "x\n").unwrap();
        }
        let found = discover(
            &[root.to_path_buf(), root.join("a.csv")],
            Path::new("/nonexistent"),
            &Selection::default(),
        )
        .unwrap();
        let canonical_root = root.canonicalize().unwrap();
        let names: Vec<_> = found
            .iter()
            .map(|f| Path::new(&f.path).strip_prefix(&canonical_root).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                Path::new("a.csv"),
                Path::new("b.csv"),
                Path::new("sub/c.csv")
            ]
        );
    }

    #[test]
    fn a_missing_input_is_a_clear_error() {
        let err = discover(
            &[PathBuf::from("/no/such/input.csv")],
            Path::new("t"),
            &Selection::default(),
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").starts_with("input /no/such/input.csv cannot be read"),
            "{err:#}"
        );
    }
}
