//! What stages may know of the run they are in: the run's identity and inputs.

/// What stages may know about the run.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunContext {
    pub(crate) run_id: String,
    pub(crate) started_at: String,
    pub(crate) inputs: Vec<String>,
    /// The bytes the parser will see in all, what stages that keep state size it by; 0
    /// when unknown (a compressed input's size on disk says little about it).
    pub(crate) input_bytes: u64,
}
