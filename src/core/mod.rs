//! The bottom layer: the vocabulary every other layer speaks, and nothing that acts on a
//! table. Protocol messages and options, the job's layout, error kinds, schema, batches,
//! canonical values and expressions; `sys/` wraps the operating system.

pub mod bad_input;
pub mod batch;
pub mod canonical;
pub mod counters;
pub mod error;
pub mod expr;
pub mod hash;
pub mod layout;
pub mod messages;
pub mod options;
pub mod protocol;
pub mod records;
pub mod schema;
pub mod shard;
pub mod spec;
pub mod sys;
pub mod url;
