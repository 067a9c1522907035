//! What a load would read, decided before anything is written: the inputs offered,
//! sorted by what the manifest says of them (new, loaded, changed, a copy of a loaded
//! one), the cast a JSON lines load gets from its sample, and `--dry-run`, which prints
//! that and stops.

mod other_jobs;

use std::time::Instant;

use anyhow::Result;

use crate::core::layout::JobLayout;
use crate::core::messages::Messages;
use crate::core::protocol::Fingerprint;
use crate::core::spec::StageSpec;
use crate::ops::job::interrupted_error;
use crate::ops::report::{InputVerdict, Summary};
use crate::ops::settings::LoadConfig;
use crate::source::{self, discover};
use crate::state::journal;
use crate::state::manifest::{Entry, Manifest, Status};

/// The inputs a load would read, sorted by what the manifest says of them.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) new: Vec<Fingerprint>,
    pub(crate) loaded: Vec<Fingerprint>,
    pub(crate) changed: Vec<(Fingerprint, crate::state::manifest::Entry)>,
    /// New paths whose content is a loaded input's, or an earlier new input's: a copy
    /// or a renamed file; (the input, the path it copies, the run that loaded that).
    pub(crate) copies: Vec<(Fingerprint, String, Option<String>)>,
    /// Inputs modified within `--min-age`: left for a later run.
    pub(crate) too_new: Vec<Fingerprint>,
    /// Inputs set aside by an earlier run and unchanged since: skipped.
    pub(crate) in_quarantine: Vec<Fingerprint>,
    /// New inputs another job of the table loaded: refused, as copies are.
    pub(crate) elsewhere: Vec<other_jobs::LoadedElsewhere>,
}

/// Sorts the inputs `cfg` offers by what `manifest` (and the manifests of the table's
/// other jobs) say of them.
pub(crate) fn plan(cfg: &LoadConfig, layout: &JobLayout, manifest: &Manifest) -> Result<Plan> {
    let mut plan = Plan::default();
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    for fingerprint in discover::discover(&cfg.inputs, &cfg.common.table, &cfg.select)? {
        if cfg
            .shard
            .is_some_and(|shard| !shard.keeps(&fingerprint.path))
        {
            continue;
        }
        if cfg
            .min_age
            .is_some_and(|age| now_ns.saturating_sub(fingerprint.mtime_ns) < age.as_nanos() as i64)
        {
            plan.too_new.push(fingerprint);
            continue;
        }
        if cfg.reload {
            plan.new.push(fingerprint);
            continue;
        }
        match manifest.status(&fingerprint, |loaded| same_content(loaded, &fingerprint))? {
            Status::New => plan.new.push(fingerprint),
            Status::Loaded => plan.loaded.push(fingerprint),
            Status::Changed(was) => plan.changed.push((fingerprint, was)),
            Status::Quarantined => plan.in_quarantine.push(fingerprint),
        }
    }
    if !cfg.reload {
        find_copies(&mut plan, manifest)?;
        if cfg.shard.is_none() {
            other_jobs::find(&mut plan, layout)?;
        }
    }
    Ok(plan)
}

/// Moves new inputs whose whole content equals a loaded input's (or an earlier new
/// input's) into `plan.copies`: the manifest is keyed by path, so a copied or renamed
/// file would otherwise load its rows again.
///
/// Only inputs of a size some other input has are hashed (a full read, before the
/// load): a copy has its original's size, and a file of a size nothing else has cannot
/// be one, so an ordinary load reads nothing twice.
fn find_copies(plan: &mut Plan, manifest: &Manifest) -> Result<()> {
    let mut new_sizes: std::collections::HashMap<u64, usize> = Default::default();
    for input in &plan.new {
        *new_sizes.entry(input.size).or_default() += 1;
    }
    let mut seen: std::collections::HashMap<String, String> = Default::default();
    let mut keep = Vec::with_capacity(plan.new.len());
    for input in std::mem::take(&mut plan.new) {
        let twins = manifest.has_size(input.size)?;
        if !twins && new_sizes.get(&input.size).is_none_or(|&n| n < 2) {
            keep.push(input);
            continue;
        }
        let (hash, lines) = source::reader::hash_input_lines(std::path::Path::new(&input.path))?;
        let hash = crate::core::hash::hash_hex(hash);
        // A file with no data rows (a header alone, or nothing) loads nothing twice: the
        // empty exports of quiet days all look alike and are no copies.
        let header_lines = u64::from(!source::reader::is_jsonl(&input.path));
        if lines <= header_lines {
            keep.push(input);
            continue;
        }
        let loaded = if twins {
            manifest.copy_of(input.size, &hash)?
        } else {
            None
        };
        if let Some(entry) = loaded {
            plan.copies
                .push((input, entry.fingerprint.path, Some(entry.run_id)));
        } else if let Some(first) = seen.get(&hash) {
            let first = first.clone();
            plan.copies.push((input, first, None));
        } else {
            seen.insert(hash, input.path.clone());
            keep.push(input);
        }
    }
    plan.new = keep;
    Ok(())
}

/// The cast a JSON lines load gets from its sample (`jsonl.rs`): every column whose
/// sampled values are all integers, numbers, booleans or nested JSON, except columns the
/// job already types itself (its `[schema]` or a cast stage), whose word is final.
pub(crate) fn json_types(
    inputs: &[Fingerprint],
    options: &crate::core::options::RunOptions,
) -> Result<Option<StageSpec>> {
    let Some(sampled) = source::sample_json(inputs)? else {
        return Ok(None);
    };
    let typed_by_the_job = |name: &str| {
        options.schema.as_ref().is_some_and(|s| s.declares(name))
            || options
                .stages
                .iter()
                .any(|s| matches!(s, StageSpec::Cast { columns, .. } if columns.contains_key(name)))
    };
    let columns: std::collections::BTreeMap<String, crate::core::schema::ColumnType> = sampled
        .into_iter()
        .map(|(name, kinds)| (name, kinds.column_type()))
        .filter(|(name, ty)| {
            *ty != crate::core::schema::ColumnType::String && !typed_by_the_job(name)
        })
        .collect();
    Ok((!columns.is_empty()).then_some(StageSpec::Cast {
        columns,
        format: None,
        timezone: None,
    }))
}

/// `--dry-run`: what a load would do, reading only. A table in a bucket is read through
/// a read-only copy of the job's state (no lease taken).
pub(crate) fn dry_run(cfg: &LoadConfig, messages: Messages) -> Result<Summary> {
    #[cfg(feature = "s3")]
    if let Some(url) = &cfg.common.remote {
        return crate::state::replica::Remote::with_read_only(
            url,
            &cfg.common.job,
            |_, scratch| dry_run_in(cfg, scratch, messages),
        );
    }
    dry_run_in(cfg, &cfg.common.table, messages)
}

/// `--dry-run` against the job's state under `table`.
fn dry_run_in(cfg: &LoadConfig, table: &std::path::Path, messages: Messages) -> Result<Summary> {
    let started = Instant::now();
    let mut layout = JobLayout::new(table, &cfg.common.job);
    // A table in a bucket: the other jobs' manifests are read from there.
    layout.target = cfg.common.remote.clone();
    let manifest = Manifest::load(&layout.manifest())?;
    if let Some(log) = journal::replay(&layout.journal())?.log {
        if !log.finished {
            messages.note(&format!(
                "a load would refuse to start: {}",
                interrupted_error(&cfg.common, &log)
            ));
        }
    }
    let plan = plan(cfg, &layout, &manifest)?;
    let mut verdicts = Vec::new();
    for input in &plan.new {
        verdicts.push(InputVerdict {
            path: input.path.clone(),
            size: input.size,
            verdict: "new",
            loaded_by: None,
        });
    }
    for input in &plan.loaded {
        verdicts.push(InputVerdict {
            path: input.path.clone(),
            size: input.size,
            verdict: "loaded",
            loaded_by: manifest.loaded_by(&input.path)?,
        });
    }
    for elsewhere in &plan.elsewhere {
        verdicts.push(InputVerdict {
            path: elsewhere.input.path.clone(),
            size: elsewhere.input.size,
            verdict: "loaded-by-another-job",
            loaded_by: Some(elsewhere.run.clone()),
        });
    }
    for input in &plan.in_quarantine {
        verdicts.push(InputVerdict {
            path: input.path.clone(),
            size: input.size,
            verdict: "quarantined",
            loaded_by: None,
        });
    }
    for input in &plan.too_new {
        verdicts.push(InputVerdict {
            path: input.path.clone(),
            size: input.size,
            verdict: "waiting",
            loaded_by: None,
        });
    }
    for (input, _, run) in &plan.copies {
        verdicts.push(InputVerdict {
            path: input.path.clone(),
            size: input.size,
            verdict: "copy",
            loaded_by: run.clone(),
        });
    }
    for (input, was) in &plan.changed {
        verdicts.push(InputVerdict {
            path: input.path.clone(),
            size: input.size,
            verdict: "changed",
            loaded_by: Some(was.run_id.clone()),
        });
    }
    if !cfg.common.json {
        let mut lines = String::new();
        for v in &verdicts {
            match (v.verdict, &v.loaded_by) {
                ("changed", Some(run)) => {
                    let was = plan
                        .changed
                        .iter()
                        .find(|(i, _)| i.path == v.path)
                        .map_or(0, |(_, e)| e.fingerprint.size);
                    lines.push_str(&format!(
                        "changed\t{}\t{} bytes (was {was} bytes, loaded by run {run})\n",
                        v.path, v.size
                    ))
                }
                (verdict, _) => {
                    lines.push_str(&format!("{verdict}\t{}\t{} bytes\n", v.path, v.size))
                }
            }
        }
        crate::core::sys::output::print(&lines)?;
    }
    let mut summary = Summary::nothing(
        "dry-run",
        &cfg.common.job,
        plan.loaded.len() as u64,
        started.elapsed(),
    );
    summary.inputs_loaded = plan.new.len() as u64;
    summary.inputs_changed = plan.changed.len() as u64;
    summary.inputs_waiting = plan.too_new.len() as u64;
    summary.inputs_in_quarantine = plan.in_quarantine.len() as u64;
    summary.inputs = Some(verdicts);
    Ok(summary)
}

/// Whether an input whose metadata changed since it was loaded still has the content it
/// was loaded with: its whole content hashed, when its size (or, compressed, nothing)
/// says it may.
fn same_content(loaded: &Entry, input: &Fingerprint) -> Result<bool> {
    if loaded.fingerprint.size != input.size && !source::reader::is_compressed(&input.path) {
        return Ok(false);
    }
    let hash = source::reader::hash_input(std::path::Path::new(&input.path))?;
    Ok(crate::core::hash::hash_hex(hash) == loaded.hash)
}
