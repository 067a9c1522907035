//! The man page and the end of `--help`, generated from the clap definition and from the
//! tables the code itself uses (exit codes), so neither can drift from the program.
//! `tests/operator.rs` fails when the committed `man/ingest.1` is stale.

use std::io::Write;

use clap::CommandFactory;
use roff::{bold, roman, Roff};

use crate::cli::Cli;
use crate::exit;

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
];

const EXAMPLES: &[(&str, &str)] = &[
    (
        "ingest -t /data/orders -p dt --dedupe-key order_id /data/incoming",
        "load new files, partitioned by day",
    ),
    (
        "ingest -t /data/orders --recover",
        "finish a run that a crash interrupted",
    ),
    (
        "ingest -t /data/orders --status",
        "what each job is doing, and what --recover would do",
    ),
];

/// The text after the options in `--help`.
pub fn after_help() -> String {
    let mut text = String::from("Exit status:\n");
    for (code, meaning) in exit::TABLE {
        text.push_str(&format!("  {code:<4} {meaning}\n"));
    }
    text.push_str("\nExamples:\n");
    for (example, _) in EXAMPLES {
        text.push_str(&format!("  {example}\n"));
    }
    text
}

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
