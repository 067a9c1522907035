//! A load from start to finish: lock the job, refuse to start over an interrupted run,
//! pick the inputs the manifest does not know (`plan.rs`), check the space and the table
//! contract, journal the run, execute the pipeline, finish. Recovery (`recover.rs`)
//! shares `finish`, `lock_job` and the pipeline.

use std::time::{Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::core::error::Stopped;
use crate::core::layout::JobLayout;
use crate::core::messages::Messages;
use crate::core::options::{Mode, OnBadInput, TableFormat};
use crate::core::protocol::Fingerprint;
use crate::core::records::RunStarted;
use crate::core::sys::failpoint;
use crate::core::sys::signals;
use crate::ops::abort::stopped;
use crate::ops::finish::{finish, fold_finished};
use crate::ops::job::Job;
use crate::ops::job::{after_signal, interrupted_error, nothing_committed};
use crate::ops::pipeline;
use crate::ops::plan::{dry_run, json_types, plan};
use crate::ops::progress::Progress;
use crate::ops::report::Summary;
use crate::ops::settings::{Common, LoadConfig};
use crate::sink::overwrite;
use crate::source;
use crate::state::contract::{self, Contract, Settled};
use crate::state::journal::Journal;

/// A run id: UTC start time plus random bits, unique per job.
pub(crate) fn new_run_id() -> String {
    let now = SystemTime::now();
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let salt = xxhash_rust::xxh3::xxh3_64(format!("{nanos}-{}", std::process::id()).as_bytes());
    format!("{stamp}-{:08x}", salt as u32)
}

/// Fails early when the inputs clearly cannot fit on the table's filesystem.
///
/// The estimate is the inputs' stored size: a lower bound for compressed inputs, close
/// for plain CSV (the output holds the same fields). A real ENOSPC later still fails the
/// run cleanly, with nothing of the failing checkpoint visible.
fn check_space(common: &Common, inputs: &[Fingerprint]) -> Result<()> {
    let needed: u64 = inputs.iter().map(|i| i.size).sum();
    let available = fs2::available_space(&common.table)
        .with_context(|| format!("cannot read the free space of {}", common.table.display()))?;
    if available < needed {
        bail!(
            "not enough free space for this load: the inputs need about {} bytes in {}, and only \
             {available} are available; free some space or load fewer inputs",
            needed,
            common.table.display()
        );
    }
    Ok(())
}

/// Loads the configured inputs.
pub(crate) fn load(cfg: &LoadConfig, messages: Messages) -> Result<Summary> {
    if cfg.dry_run {
        return dry_run(cfg, messages);
    }
    let common = &cfg.common;
    let layout = common.layout();
    if layout.target.is_none() {
        refuse_other_table_format(&common.table, cfg.options.table_format)?;
    }
    let mut made = Made::before(&layout);
    // Settled: the fold below and the plan act on them (see `fsutil::settle`).
    let Job {
        layout,
        lock: _lock,
        started,
        mut manifest,
        replay,
    } = Job::open(layout, common.lock_wait)?;
    if let Some(log) = replay.log {
        if !log.finished && !nothing_committed(&log) {
            return Err(interrupted_error(common, &log));
        }
        if !log.finished {
            // Killed before its first checkpoint: nothing of it was ever visible, so it
            // needs no `--abort` from anyone.
            let quiet = Messages { quiet: true };
            crate::ops::abort::undo(&layout, &log, replay.valid_len, quiet, Instant::now())?;
            messages.note(&format!(
                "cleared run {} of job {:?}, which stopped before its first checkpoint (nothing \
                 of it was loaded)",
                log.started.run_id, common.job
            ));
        } else {
            // Normally done when the run finished; a crash in between leaves it to us.
            fold_finished(&layout, &mut manifest, &log)?;
        }
    }

    let mut plan = plan(cfg, &layout, &manifest)?;
    if let (Some(age), false) = (cfg.min_age, plan.too_new.is_empty()) {
        messages.note(&format!(
            "{} input(s) modified less than {} ago wait for a later run (--min-age)",
            plan.too_new.len(),
            humantime::format_duration(age)
        ));
    }
    let quarantining = cfg.options.on_bad_input == OnBadInput::Quarantine;
    // Inputs set aside before the run: (input, why, rows of its path are in the table).
    let mut set_aside: Vec<(Fingerprint, String, bool)> = Vec::new();
    if quarantining {
        for (input, original, run) in plan.copies.drain(..) {
            let why = copy_refusal(&input, &original, run.as_deref());
            set_aside.push((input, why, false));
        }
        for (input, was) in plan.changed.drain(..) {
            let why = change_refusal(&input, &was);
            set_aside.push((input, why, true));
        }
        for elsewhere in plan.elsewhere.drain(..) {
            let why = elsewhere.refusal(&common.job);
            set_aside.push((elsewhere.input, why, true));
        }
    }
    if let Some(elsewhere) = plan.elsewhere.first() {
        bail!("{}", elsewhere.refusal(&common.job));
    }
    if let Some((input, original, run)) = plan.copies.first() {
        bail!("{}", copy_refusal(input, original, run.as_deref()));
    }
    if let Some((input, was)) = plan.changed.first() {
        bail!("{}", change_refusal(input, was));
    }
    let skipped = plan.loaded.len() as u64;
    let waiting = plan.too_new.len() as u64;
    let in_quarantine = plan.in_quarantine.len() as u64;
    if layout.remote.is_none() && !plan.new.is_empty() {
        check_space(common, &plan.new)?;
    }
    // The run's columns: the first input's header (a JSON sample). Quarantining, an
    // input whose header cannot be read or that the table's contract refuses is set
    // aside, and the next one's is tried.
    let run_id = new_run_id();
    let started_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let chosen = loop {
        if plan.new.is_empty() {
            break None;
        }
        let columns = match read_columns(&plan.new, cfg) {
            Ok(columns) => columns,
            Err((index, e)) if quarantining => {
                let input = plan.new.remove(index);
                set_aside.push((input, format!("{e:#}"), false));
                continue;
            }
            Err((_, e)) => return Err(e),
        };
        let run = (run_id.as_str(), started_at.as_str());
        let columns = align(&layout, cfg, run, &plan.new, columns)?;
        let prepared = prepare(&layout, cfg, run, &plan.new, &columns)?;
        if quarantining && !columns.is_empty() && !source::is_jsonl_load(&plan.new) {
            let proposed = Contract::of(&prepared.1, &prepared.0);
            if let Some(why) = contract::refusal(&common.table, &proposed, cfg.evolve)? {
                let index = first_with_header(&plan.new, cfg)?;
                let input = plan.new.remove(index);
                let why = format!(
                    "{}: its header does not fit table {}'s contract: {why}",
                    input.path,
                    layout.table_name()
                );
                set_aside.push((input, why, false));
                continue;
            }
        }
        break Some((columns, prepared.0, prepared.1));
    };
    let mut quarantined = Vec::new();
    if !set_aside.is_empty() {
        manifest.quarantine(
            &layout.manifest(),
            &format!("quarantine-{}", new_run_id()),
            &set_aside,
        )?;
        if let Some(remote) = &layout.remote {
            remote.push()?;
        }
        for (input, reason, _) in &set_aside {
            messages.note(&format!("quarantined {}: {reason}", input.path));
            quarantined.push(crate::core::bad_input::Quarantined {
                path: input.path.clone(),
                reason: reason.clone(),
                committed_through_line: 0,
            });
        }
    }
    let Some((columns, options, schema)) = chosen else {
        let mut summary =
            Summary::nothing("nothing-to-load", &common.job, skipped, started.elapsed());
        summary.inputs_waiting = waiting;
        summary.inputs_in_quarantine = in_quarantine;
        summary.quarantined = quarantined;
        return Ok(summary);
    };
    let mut run = RunStarted {
        run_id,
        started_at,
        options,
        inputs: plan.new,
        contract_recorded: false,
        delta_txn_base: None,
        contract_before: None,
        table_create: None,
        field_ids: Default::default(),
        compaction: None,
    };
    if run.options.mode == Mode::OverwritePartitions
        && run.options.table_format == TableFormat::Hive
    {
        overwrite::check_supported(&layout)?;
    }
    if let Some(signal) = signals::requested() {
        return Err(Stopped {
            signal,
            detail: "before anything was loaded".into(),
        }
        .into());
    }
    // Last of the checks, since it may record the contract: before the journal exists
    // and before a row is read. A contract recorded here by a load that then fails to
    // start its journal goes again with it (`Made`).
    let proposed = Contract::of(&schema, &run.options);
    let settled = contract::settle(
        &common.table,
        &layout.table_name(),
        &proposed,
        cfg.evolve,
        &common.job,
        &run.run_id,
    )?;
    run.contract_recorded = settled == Settled::Recorded;
    if run.contract_recorded {
        made.contract = Some(contract::path(&common.table));
    }
    if let Settled::Evolved(before) = settled {
        messages.note(&format!(
            "the table's contract now has the columns {}",
            schema.names().join(", ")
        ));
        made.contract_before = Some((common.table.clone(), run.run_id.clone(), before.clone()));
        run.contract_before = Some(before);
    }
    // A Delta log or an Iceberg table's metadata holds the table's schema, which every
    // reader checks: compared by every load before a row is read; a table that does not
    // exist yet is created by the run's first commit (`table/delta/`, `table/iceberg/`).
    let begun = crate::table::format(run.options.table_format)?
        .begin(&layout, &run, &schema, cfg.evolve)?;
    run.delta_txn_base = begun.txn_base;
    run.table_create = begun.create;
    run.field_ids = begun.field_ids;
    let mut journal = Journal::create(&layout, &run)?;
    made.keep();
    failpoint::hit("run.started.after");
    let total: u64 = run.inputs.iter().map(|i| i.size).sum();
    let progress = Progress::start(common.progress, common.quiet, total, 0);
    let spec = pipeline::Spec {
        layout: &layout,
        run: &run,
        columns,
        resume: None,
        snapshots: Vec::new(),
        counters: progress.counters.clone(),
        max_errors: run.options.max_errors,
        rejects_before: 0,
        threads: common.threads,
        skip: Default::default(),
    };
    let outcome = pipeline::execute(spec, &mut journal);
    let mut rows_here = progress
        .counters
        .rows
        .load(std::sync::atomic::Ordering::Relaxed);
    progress.finish();
    match outcome {
        Err(e) if quarantining && crate::core::bad_input::bad_input(&e).is_some() => {
            // Set aside, then go on as a recovery would: from the last completed
            // checkpoint, without the input (`quarantine.rs`).
            crate::ops::quarantine::set_aside(&mut journal, &layout, &e, messages)?;
            rows_here += crate::ops::recover::run_to_end(
                &layout,
                &mut journal,
                common,
                None,
                messages,
                false,
            )?;
        }
        other => other.map_err(|e| stopped(e, common, &layout))?,
    }
    let log = finish(&layout, &mut journal, &mut manifest)?;
    let mut summary =
        Summary::from_log("loaded", &common.job, &log, started.elapsed()).with_rate(rows_here);
    summary.inputs_skipped = skipped;
    summary.inputs_waiting = waiting;
    summary.inputs_in_quarantine = in_quarantine;
    quarantined.extend(crate::ops::quarantine::of_run(&log));
    summary.quarantined = quarantined;
    after_signal(summary, common)
}

/// Why a copy of a loaded input (or of another input of the load) is not loaded.
fn copy_refusal(input: &Fingerprint, original: &str, run: Option<&str>) -> String {
    let by = match run {
        Some(run) => format!("loaded by run {run}"),
        None => "also in this load".to_string(),
    };
    format!(
        "input {} has the same content as {original} ({by}): a copy or a renamed file would \
         load its rows twice; pass --reload to load it anyway, or move it aside",
        input.path
    )
}

/// Why a loaded input whose content changed is not loaded again.
fn change_refusal(input: &Fingerprint, was: &crate::state::manifest::Entry) -> String {
    if was.quarantine.is_some() {
        return format!(
            "input {} changed again since it was quarantined ({} bytes then, {} now), and rows \
             of an earlier content of it are in the table: loading it again would duplicate \
             them; pass --reload to load it again in full, or move it aside",
            input.path, was.fingerprint.size, input.size
        );
    }
    format!(
        "input {} changed since run {} loaded it ({} bytes then, {} now); loading it again \
         would duplicate its old rows: pass --reload to load it again in full, or move it aside",
        input.path, was.run_id, was.fingerprint.size, input.size
    )
}

/// The run's columns from `inputs` (the first header, or the JSON sample); on failure,
/// the index of the input that failed with it.
fn read_columns(
    inputs: &[Fingerprint],
    cfg: &LoadConfig,
) -> std::result::Result<Vec<String>, (usize, anyhow::Error)> {
    match source::read_columns(inputs, cfg.options.delimiter) {
        Ok(columns) => Ok(columns.unwrap_or_default()),
        Err(e) => {
            let index = first_with_header(inputs, cfg).unwrap_or(0);
            Err((index, e))
        }
    }
}

/// The index of the first input that is not empty (whose header gives the columns).
fn first_with_header(inputs: &[Fingerprint], cfg: &LoadConfig) -> Result<usize> {
    for (index, input) in inputs.iter().enumerate() {
        match source::read_columns(std::slice::from_ref(input), cfg.options.delimiter) {
            Ok(None) => continue,
            _ => return Ok(index),
        }
    }
    Ok(0)
}

/// The run's columns matched to the table's by name: in the order of the table's
/// contract when the first input has them in another order, and with the contract's
/// columns it lacks added (null in its rows) under `--evolve add-columns`. Unchanged
/// when neither fits the contract (a rename or a derived column in between), whose
/// check then explains what differs.
fn align(
    layout: &JobLayout,
    cfg: &LoadConfig,
    run: (&str, &str),
    inputs: &[Fingerprint],
    columns: Vec<String>,
) -> Result<Vec<String>> {
    if columns.is_empty() || source::is_jsonl_load(inputs) {
        return Ok(columns);
    }
    let Some(contract) = contract::load(&cfg.common.table)? else {
        return Ok(columns);
    };
    let fits = |candidate: &[String]| -> bool {
        prepare(layout, cfg, run, inputs, candidate).is_ok_and(|(options, schema)| {
            let proposed = Contract::of(&schema, &options);
            matches!(
                contract::refusal(&cfg.common.table, &proposed, cfg.evolve),
                Ok(None)
            )
        })
    };
    if fits(&columns) {
        return Ok(columns);
    }
    let order: Vec<&String> = contract.columns.iter().map(|c| &c.name).collect();
    let extra = columns.iter().filter(|c| !order.contains(c)).cloned();
    let mut aligned: Vec<String> = order
        .iter()
        .filter(|name| columns.contains(name))
        .map(|name| name.to_string())
        .collect();
    aligned.extend(extra.clone());
    if aligned != columns && fits(&aligned) {
        return Ok(aligned);
    }
    if cfg.options.fill_missing {
        let mut filled: Vec<String> = order.iter().map(|name| name.to_string()).collect();
        filled.extend(extra);
        if fits(&filled) {
            return Ok(filled);
        }
    }
    Ok(columns)
}

/// The options of run `(id, started at)` for these columns (the job file's schema and a
/// JSON sample's types as the first stages) and the schema its sink receives.
fn prepare(
    layout: &JobLayout,
    cfg: &LoadConfig,
    (run_id, started_at): (&str, &str),
    inputs: &[Fingerprint],
    columns: &[String],
) -> Result<(
    crate::core::options::RunOptions,
    crate::core::schema::Schema,
)> {
    let mut options = cfg.options.clone();
    // Casts go after the leading null markers and trimming, whose nulls they then skip.
    let cleaning = crate::ops::infer::leading_cleaning(&options.stages);
    if let (Some(schema), false) = (&options.schema, columns.is_empty()) {
        // The schema's checks and casts run first, and are journaled like any stage.
        let first = schema.stages_for(columns)?;
        options.stages.splice(cleaning..cleaning, first);
    }
    if let Some(cast) = json_types(inputs, &options)? {
        // JSON carries types: the sampled ones are cast first, journaled like any stage.
        options.stages.insert(0, cast);
    } else if let Some(cast) = csv_types(cfg, inputs, columns, &options)? {
        options.stages.insert(cleaning, cast);
    }
    let probe = RunStarted {
        run_id: run_id.to_string(),
        started_at: started_at.to_string(),
        options,
        inputs: inputs.to_vec(),
        contract_recorded: false,
        delta_txn_base: None,
        contract_before: None,
        table_create: None,
        field_ids: Default::default(),
        compaction: None,
    };
    let schema = pipeline::validate(layout, &probe, columns)?;
    Ok((probe.options, schema))
}

/// The cast a CSV load gets for the columns its job does not type itself: to the types
/// of the table's contract, or, on a first load into a typed table (Parquet or Delta)
/// whose job types nothing, to the types a sample of its inputs shows (`infer.rs`;
/// `--no-infer` keeps text). Journaled with the run like any stage.
fn csv_types(
    cfg: &LoadConfig,
    inputs: &[Fingerprint],
    columns: &[String],
    options: &crate::core::options::RunOptions,
) -> Result<Option<crate::core::spec::StageSpec>> {
    use crate::core::schema::ColumnType;
    use crate::core::spec::StageSpec;
    if columns.is_empty() || options.schema.is_some() || source::is_jsonl_load(inputs) {
        return Ok(None);
    }
    let cast_by_the_job = |name: &str| {
        options
            .stages
            .iter()
            .any(|s| matches!(s, StageSpec::Cast { columns, .. } if columns.contains_key(name)))
    };
    let Some(contract) = contract::load(&cfg.common.table)? else {
        let typed_output = options.format == crate::core::options::Format::Parquet
            || options.table_format == TableFormat::Delta;
        let casts_nothing = !options
            .stages
            .iter()
            .any(|s| matches!(s, StageSpec::Cast { .. }));
        return Ok((cfg.infer && typed_output && casts_nothing)
            .then(|| {
                crate::ops::infer::inferred_cast(
                    inputs,
                    columns,
                    options.delimiter,
                    &options.stages,
                )
            })
            .flatten());
    };
    let typed: std::collections::BTreeMap<String, ColumnType> = contract
        .columns
        .iter()
        .filter(|c| c.ty != ColumnType::String)
        .filter(|c| columns.contains(&c.name) && !cast_by_the_job(&c.name))
        .map(|c| (c.name.clone(), c.ty))
        .collect();
    Ok((!typed.is_empty()).then_some(StageSpec::Cast {
        columns: typed,
        format: None,
        timezone: None,
    }))
}

/// The directories a load made for a table or job that did not exist, removed again (with
/// the lock file) if the load stops before its journal exists: a load refused by its
/// checks leaves no trace, and `--status` still says there is no table.
///
/// Best effort and not a durability step: nothing was journaled, so nothing depends on
/// these names; a directory that is not empty (another job appeared) stays.
struct Made {
    lock: Option<std::path::PathBuf>,
    /// The contract this load recorded on a table that had none.
    contract: Option<std::path::PathBuf>,
    /// The contract this load evolved: (table, run id, the file as it was).
    contract_before: Option<(std::path::PathBuf, String, String)>,
    dirs: Vec<std::path::PathBuf>,
}

impl Made {
    /// Notes which of the job's directories do not exist yet, deepest first.
    fn before(layout: &JobLayout) -> Made {
        let ingest = layout.table.join("_ingest");
        let dirs = [layout.dir.clone(), ingest, layout.table.clone()]
            .into_iter()
            .filter(|d| !d.exists())
            .collect();
        Made {
            lock: (!layout.dir.exists()).then(|| layout.lock()),
            contract: None,
            contract_before: None,
            dirs,
        }
    }

    /// The run's journal exists: everything made stays.
    fn keep(&mut self) {
        self.dirs.clear();
        self.lock = None;
        self.contract = None;
        self.contract_before = None;
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            let _ = std::fs::remove_file(lock);
        }
        if let Some(contract) = &self.contract {
            let _ = std::fs::remove_file(contract);
        }
        if let Some((table, run, before)) = &self.contract_before {
            let _ = contract::restore(table, run, before);
        }
        for dir in &self.dirs {
            // Fails, harmlessly, on a directory that is not empty.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Refuses, before anything is written, a load into a directory that holds a table of
/// the other format: Hive files written into a Delta table are read by no Delta reader
/// (and a Delta log over Hive files hides them).
fn refuse_other_table_format(table: &std::path::Path, wanted: TableFormat) -> Result<()> {
    let delta_log = table.join("_delta_log");
    let has = if delta_log.is_dir() {
        Some(TableFormat::Delta)
    } else {
        contract::table_format(table).ok().flatten()
    };
    match has {
        Some(has) if has != wanted => {
            let name = |f: TableFormat| match f {
                TableFormat::Hive => ("hive", "Hive-style"),
                TableFormat::Delta => ("delta", "Delta"),
                TableFormat::Iceberg => ("iceberg", "Iceberg"),
            };
            Err(crate::core::error::UsageError(format!(
                "{} is a {} table; load it with --table-format {} (this load asked for {})",
                table.display(),
                name(has).1,
                name(has).0,
                name(wanted).0
            ))
            .into())
        }
        _ => Ok(()),
    }
}
