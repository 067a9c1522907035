//! The man page and the end of `--help`, generated from the clap definition and from the
//! tables the code itself uses (exit codes), so neither can drift from the program.
//! `tests/operator.rs` fails when the committed `man/ingest.1` is stale.

use std::io::Write;

use clap::CommandFactory;
use roff::{bold, roman, Roff};

use crate::cli::args::Cli;
use crate::cli::exit;
use crate::cli::help::EXAMPLES;

const FILES: &[(&str, &str)] = &[
    (
        "TABLE/COL=VALUE/part-JOB-RUN-CHECKPOINT-SEQ.csv",
        "committed data, one file per partition per checkpoint",
    ),
    (
        "TABLE/_ingest/JOB/journal",
        "the current or last run's journal (framed, checksummed)",
    ),
    (
        "TABLE/_ingest/JOB/manifest",
        "inputs loaded by the job's finished runs",
    ),
    (
        "TABLE/_ingest/JOB/lock",
        "the job's lock; holds the holder's pid and start time",
    ),
    (
        "TABLE/_ingest/JOB/pending/",
        "staged files of checkpoints not yet committed",
    ),
    (
        "TABLE/_ingest/contract.json",
        "the table contract: columns and types, format, compression, partition columns",
    ),
    (
        "s3://BUCKET/TABLE/_ingest/JOB/journal.d/SEQ",
        "a table in a bucket: one object per journal record, each created only if absent at \
         the next sequence number, so a second writer loses cleanly",
    ),
    (
        "s3://BUCKET/TABLE/_ingest/JOB/lease",
        "a table in a bucket: the job's lease, renewed by its holder every third of the lease \
         time (INGEST_LEASE_SECS, 30 s); a crashed holder's lease expires",
    ),
    (
        "$XDG_CACHE_HOME/ingest/s3/BUCKET/TABLE/",
        "a table in a bucket: this machine's working copy of its state (INGEST_WORK_DIR \
         overrides the place; ~/.cache without XDG_CACHE_HOME); replaced from the bucket by \
         every command, so deleting it loses nothing",
    ),
    (
        "TABLE/_rejects/JOB/rejects-JOB-RUN-CHECKPOINT.csv.rejects",
        "bad rows set aside with --max-errors, one file per checkpoint that had any: CSV with \
         the columns source_file, line, reason, record (the row as the failing stage saw it); \
         committed with their checkpoint, and named so that no *.csv glob reads them",
    ),
];

const EXPRESSIONS: &[(&str, &str)] = &[
    ("literals", "numbers, 'strings' (a quote doubled inside: 'it''s'), TRUE, FALSE, NULL"),
    ("columns", "by name; \"double quoted\" when not a plain word"),
    ("operators", "OR, AND, NOT, = != <> < <= > >=, IS [NOT] NULL, [NOT] IN (...), + - * / %, || (concatenation)"),
    ("functions", "date, year, month, day, hour, lower, upper, trim, length, concat (skips nulls), coalesce"),
    ("types", "checked before the load starts; a string compared with a date or timestamp is read as one; nulls behave as in SQL"),
];

const JSON_FIELDS: &[(&str, &str)] = &[
    ("outcome", "loaded, nothing-to-load, recovered, nothing-to-recover, aborted, nothing-to-abort, dry-run; for a failed command failed, usage-error, locked or stopped"),
    ("job, run_id", "the job, and the run's id (null when nothing ran)"),
    ("inputs_loaded, inputs_skipped, inputs_changed, inputs_waiting", "inputs read to the end; already loaded; (dry-run) loaded inputs whose content changed; modified within --min-age, left for a later run"),
    ("rows_read, rows_written, rows_dropped, rows_rejected", "rows in, committed, dropped by a filter or dedupe, set aside in _rejects/ (for aborted: the rows removed)"),
    ("files_written, partitions, checkpoints, bytes_written", "what the run committed (for aborted: the files removed)"),
    ("elapsed_seconds, rows_per_second", "this process's time, and the rows it read per second"),
    ("inputs_in_quarantine", "inputs set aside by earlier runs and unchanged since: skipped"),
    ("quarantined", "the inputs this run set aside (--on-bad-input quarantine; exit 3): path, reason, committed_through_line (its rows through that line are in the table; 0: none)"),
    ("inputs", "(dry-run) every input: path, size, verdict (new, loaded, changed, copy, waiting, quarantined), loaded_by"),
    ("exit_code, error, interrupted, recover_command, abort_command", "(a failed command) its exit status and message, and, when the job has an interrupted run, the commands that finish or undo it"),
];

const RUNBOOK: &[(&str, &str)] = &[
    ("1. ingest -t TABLE --status", "shows each job's interrupted run, what --recover would do and what --abort would remove, file by file"),
    ("2. ingest -t TABLE --recover", "publishes every checkpoint that completed, discards the rest and resumes to the end, for every interrupted job (--job NAME or --config FILE for one); it may itself be interrupted and rerun"),
    ("3. ingest -t TABLE [--job NAME] --abort", "when the run should not finish (an input was fixed, say): removes what it published and staged, only what its journal names with the journaled sizes; its inputs count as not loaded; crash-safe, finished by --abort or --recover; an overwrite whose exchange began is left to --recover"),
    ("a quarantined input", "--status lists it with its reason; fix or replace the file and the next run tries it again (a loaded input that changed needs --reload)"),
    ("a changed input", "--recover refuses it and loads nothing twice: restore the file and recover, or abort the run and load the new file"),
    ("a full disk", "the run fails cleanly with nothing of the failing checkpoint visible; free space and --recover"),
    ("a symbolic link inside the table", "refused, naming it; remove it and rerun"),
];

fn section(roff: &mut Roff, title: &str, items: &[(String, &str)]) {
    roff.control("SH", [title]);
    for (term, meaning) in items {
        roff.control("TP", []);
        roff.text([bold(term.as_str())]);
        roff.text([roman(*meaning)]);
    }
}

/// Renders the whole man page.
pub fn render() -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(Cli::command());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    let mut roff = Roff::new();
    let codes: Vec<(String, &str)> = exit::TABLE
        .iter()
        .map(|(c, m)| (c.to_string(), *m))
        .collect();
    section(&mut roff, "EXIT STATUS", &codes);
    section(
        &mut roff,
        "FILES",
        &FILES
            .iter()
            .map(|(f, m)| (f.to_string(), *m))
            .collect::<Vec<_>>(),
    );
    let pairs = |items: &[(&str, &'static str)]| -> Vec<(String, &'static str)> {
        items.iter().map(|(a, b)| (a.to_string(), *b)).collect()
    };
    let keys: Vec<(String, &str)> = crate::cli::jobfile::KEYS
        .iter()
        .map(|(k, example, m)| (format!("{k}  (e.g. {example})"), *m))
        .collect();
    section(&mut roff, "JOB FILE (--config FILE, TOML)", &keys);
    section(
        &mut roff,
        "EXPRESSIONS (--filter, --derive)",
        &pairs(EXPRESSIONS),
    );
    section(&mut roff, "JSON SUMMARY (--json)", &pairs(JSON_FIELDS));
    section(&mut roff, "RECOVERY AND ABORT", &pairs(RUNBOOK));
    section(
        &mut roff,
        "EXAMPLES",
        &EXAMPLES
            .iter()
            .map(|(e, m)| (e.to_string(), *m))
            .collect::<Vec<_>>(),
    );
    out.write_all(roff.to_roff().as_bytes())?;
    man.render_version_section(&mut out)?;
    Ok(out)
}
