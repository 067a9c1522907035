//! The bottom layer: the vocabulary every other layer speaks, and nothing that acts on a
//! table. Protocol messages and options, the job's layout, error kinds, schema, batches,
//! canonical values and expressions; `sys/` wraps the operating system.

pub(crate) mod bad_input;
pub(crate) mod batch;
pub(crate) mod canonical;
pub(crate) mod catalog;
pub(crate) mod counters;
pub(crate) mod error;
pub(crate) mod expr;
pub(crate) mod hash;
pub(crate) mod layout;
pub(crate) mod messages;
pub(crate) mod options;
pub(crate) mod pressure;
pub(crate) mod protocol;
pub mod records;
pub(crate) mod schema;
pub(crate) mod shard;
pub(crate) mod spec;
pub(crate) mod sys;
pub(crate) mod url;
