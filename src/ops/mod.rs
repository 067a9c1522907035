//! The operations: a load end to end (plan, pipeline, checkpoint coordinator), recover,
//! abort and status. The only layer that appends to the journal; it takes settings from
//! the command line and drives the participants (`source`, `stage`, `sink`, `table`).

pub mod abort;
pub mod checkpoint;
pub mod finish;
pub mod infer;
pub mod job;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod quarantine;
pub mod recover;
pub mod report;
pub mod run;
pub mod settings;
pub mod status;
