//! The end of `--help`: the exit codes and examples, from the tables the man page shows
//! too (`manpage.rs`), so the two never disagree.

use crate::cli::exit;

/// Typical command lines, with what each does.
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
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
    (
        "ingest -t /data/orders --abort",
        "undo the interrupted run as if it had never started",
    ),
];

/// The text after the options in `--help`.
pub(crate) fn after_help() -> String {
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
