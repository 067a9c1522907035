//! Integration tests: every test drives the real `ingest` binary over copies of
//! `fixtures/` in a temporary directory.

mod util;

mod abort;
mod compact;
mod contract;
mod crash;
mod crash_states;
mod csv_edges;
mod dedupe_scope;
#[cfg(feature = "delta")]
mod delta;
mod duplicates;
mod durability;
mod errors;
mod explorer;
mod formats;
#[cfg(feature = "iceberg")]
mod iceberg;
#[cfg(feature = "iceberg")]
mod iceberg_postgres;
mod jobs;
mod json_input;
mod load;
mod manifest;
mod operator;
mod overwrite;
mod parallel;
mod partition;
mod quarantine;
mod recover;
mod run_state;
#[cfg(feature = "s3")]
mod s3;
#[cfg(all(feature = "s3", feature = "delta"))]
mod s3_delta;
#[cfg(all(feature = "s3", feature = "iceberg"))]
mod s3_iceberg;
#[cfg(feature = "s3")]
mod s3_table;
mod scripting;
mod select;
mod shard;
mod stages;
mod symlinks;
mod types;
mod vacuum;
