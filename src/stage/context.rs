//! What stages may know of the run they are in: the run's identity and inputs.

/// What stages may know about the run.
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    pub run_id: String,
    pub started_at: String,
    pub inputs: Vec<String>,
    /// The bytes the parser will see in all, what stages that keep state size it by; 0
    /// when unknown (a compressed input's size on disk says little about it).
    pub input_bytes: u64,
}
