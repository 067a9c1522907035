//! Exactly once per table, not only per job: an input that another job of the same
//! table loaded (the same canonical path or URL, or the same content) is not loaded
//! again without `--reload`.
//!
//! Each job keeps its own manifest (`manifest.rs`), so a job looks up its new inputs in
//! every other job's manifest too, as it looks them up in its own: a path lookup that
//! the segments' Bloom filters answer without a read for a path no job loaded, and a
//! content lookup only for an input of a size some other job loaded (hashed once, for
//! all jobs). A `--shard` job skips this: shard jobs split one input list into disjoint
//! shares, and never meet.
//!
//! A job that loads concurrently with this one may still load the same file at the same
//! time: the jobs' locks are their own. The check is for what another job loaded before.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;

use super::Plan;
use crate::core::layout::JobLayout;
use crate::core::protocol::Fingerprint;
use crate::source;
use crate::state::manifest::Manifest;

/// A new input another job of the table loaded.
#[derive(Debug, Clone)]
pub(crate) struct LoadedElsewhere {
    pub(crate) input: Fingerprint,
    pub(crate) job: String,
    pub(crate) run: String,
    /// The path that job loaded: the input's own, or another with the same content.
    pub(crate) path: String,
}

impl LoadedElsewhere {
    /// Why the input is not loaded, as the run fails with it (or sets it aside).
    pub(crate) fn refusal(&self, job: &str) -> String {
        let what = if self.path == self.input.path {
            String::new()
        } else {
            format!(" as {} (the same content)", self.path)
        };
        format!(
            "input {} was loaded into this table by job {:?} (run {}){what}; loading it again \
             under job {job:?} would repeat its rows: pass --reload to load it anyway, or \
             move it aside",
            self.input.path, self.job, self.run
        )
    }
}

/// Moves every new input of `plan` that another job of the table loaded into
/// `plan.elsewhere`.
pub(crate) fn find(plan: &mut Plan, layout: &JobLayout) -> Result<()> {
    if plan.new.is_empty() {
        return Ok(());
    }
    let mut hashes: HashMap<String, Option<String>> = HashMap::new();
    for job in other_jobs(layout)? {
        let found = with_manifest(layout, &job, |manifest| {
            let mut found = Vec::new();
            for (index, input) in plan.new.iter().enumerate() {
                if let Some(entry) = manifest.loaded(&input.path)? {
                    found.push((index, entry.run_id, entry.fingerprint.path));
                    continue;
                }
                if !manifest.has_size(input.size)? {
                    continue;
                }
                let hash = match hashes.get(&input.path) {
                    Some(hash) => hash.clone(),
                    None => {
                        let hash = content_hash(input)?;
                        hashes.insert(input.path.clone(), hash.clone());
                        hash
                    }
                };
                if let Some(entry) = hash
                    .map(|hash| manifest.copy_of(input.size, &hash))
                    .transpose()?
                    .flatten()
                {
                    found.push((index, entry.run_id, entry.fingerprint.path));
                }
            }
            Ok(found)
        })?;
        for (index, run, path) in found.into_iter().rev() {
            let input = plan.new.remove(index);
            plan.elsewhere.push(LoadedElsewhere {
                input,
                job: job.clone(),
                run,
                path,
            });
        }
        if plan.new.is_empty() {
            break;
        }
    }
    plan.elsewhere
        .sort_by(|a, b| a.input.path.cmp(&b.input.path));
    Ok(())
}

/// The content hash a manifest keeps for an input; `None` for one without data rows (a
/// header alone), which is never a copy (see `find_copies`).
fn content_hash(input: &Fingerprint) -> Result<Option<String>> {
    let (hash, lines) = source::reader::hash_input_lines(Path::new(&input.path))?;
    let header_lines = u64::from(!source::reader::is_jsonl(&input.path));
    Ok((lines > header_lines).then(|| crate::core::hash::hash_hex(hash)))
}

/// The table's jobs other than this one.
fn other_jobs(layout: &JobLayout) -> Result<Vec<String>> {
    #[cfg(feature = "s3")]
    if let Some(url) = &layout.target {
        let jobs = crate::state::replica::Remote::jobs(url)?;
        return Ok(jobs.into_iter().filter(|j| *j != layout.job).collect());
    }
    Ok(crate::core::layout::jobs(&layout.table)?
        .into_iter()
        .filter(|j| *j != layout.job)
        .collect())
}

/// Runs `look` on job `job`'s manifest, read-only (a table in a bucket: through a
/// scratch copy of the job's state, whose segments are read in pages as looked up).
fn with_manifest<T>(
    layout: &JobLayout,
    job: &str,
    look: impl FnOnce(&Manifest) -> Result<T>,
) -> Result<T> {
    #[cfg(feature = "s3")]
    if let Some(url) = &layout.target {
        return crate::state::replica::Remote::with_read_only(url, job, |_, scratch| {
            look(&Manifest::load(&JobLayout::new(scratch, job).manifest())?)
        });
    }
    look(&Manifest::load(
        &JobLayout::new(&layout.table, job).manifest(),
    )?)
}
