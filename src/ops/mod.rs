//! The operations: a load end to end (plan, pipeline, checkpoint coordinator), recover,
//! abort and status. The only layer that appends to the journal; it takes settings from
//! the command line and drives the participants (`source`, `stage`, `sink`, `table`).

pub(crate) mod abort;
pub(crate) mod checkpoint;
pub(crate) mod compact;
pub(crate) mod finish;
pub(crate) mod infer;
pub(crate) mod job;
pub(crate) mod pipeline;
pub(crate) mod plan;
pub(crate) mod progress;
pub(crate) mod quarantine;
pub(crate) mod recover;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod settings;
pub(crate) mod status;
pub(crate) mod table_files;
pub(crate) mod vacuum;
