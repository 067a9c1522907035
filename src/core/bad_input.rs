//! An input that cannot load: the error that names it, and how the journal and the
//! summaries record an input set aside (`--on-bad-input quarantine`).

use serde::{Deserialize, Serialize};

use crate::core::error::{kind, BadInput, Kind};

/// An input of the run set aside, as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    /// The input's index in the run.
    pub(crate) input: usize,
    pub(crate) reason: String,
    /// The input's rows up to and including this line are in the table, committed by
    /// earlier checkpoints; 0 when none of its rows are.
    #[serde(default)]
    pub(crate) committed_through_line: u64,
}

/// A quarantined input, as `--json` and `--status` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Quarantined {
    pub(crate) path: String,
    pub(crate) reason: String,
    /// The input's rows up to and including this line are in the table (committed
    /// before the input failed); 0 when none of its rows are.
    pub(crate) committed_through_line: u64,
}

/// True for the errors a pipeline thread reports only because another one failed.
pub(crate) fn is_echo(err: &anyhow::Error) -> bool {
    let text = err.to_string();
    text == "the pipeline stopped" || text == "the coordinator stopped"
}

/// Marks an error met while reading input `input` as that input's, unless it only
/// echoes another thread's failure (or already names its input).
pub(crate) fn of_input(input: usize, err: anyhow::Error) -> anyhow::Error {
    if is_echo(&err) || matches!(kind(&err), Kind::BadInput { .. } | Kind::Stopped { .. }) {
        return err;
    }
    anyhow::Error::new(BadInput {
        input,
        reason: format!("{err:#}"),
    })
}

/// The input a failure belongs to, if it is an input's own.
pub(crate) fn bad_input(err: &anyhow::Error) -> Option<&BadInput> {
    err.chain().find_map(|c| c.downcast_ref::<BadInput>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_error_is_marked_and_an_echo_is_not() {
        let marked = of_input(3, anyhow::anyhow!("a.csv:7: bad header"));
        let bad = bad_input(&marked).expect("marked");
        assert_eq!((bad.input, bad.reason.as_str()), (3, "a.csv:7: bad header"));
        assert_eq!(marked.to_string(), "a.csv:7: bad header");
        assert!(bad_input(&of_input(3, anyhow::anyhow!("the pipeline stopped"))).is_none());
        // Marked once, by the innermost reader that knew the input.
        let twice = of_input(5, marked);
        assert_eq!(bad_input(&twice).map(|b| b.input), Some(3));
    }
}
