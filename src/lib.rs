//! `ingest`: load CSV and JSON lines files into a Hive-partitioned or Delta Lake table,
//! exactly once.
//!
//! The pipeline applies the checkpoint-barrier plus two-phase-commit protocol of stream
//! processors to a batch load (`ops/checkpoint.rs` walks through it, failure case by
//! failure case; `docs/ARCHITECTURE.md` draws it):
//!
//! ```text
//! source ──batches + barrier(n)──► stage … stage ──► sink (2PC)
//!   │ position                       │ snapshot         │ preCommit: staged files fsynced
//!   └──────────── ack(n) ───────────►│◄──── ack(n) ─────┘
//!                              coordinator: CheckpointComplete(n) in the journal (fsync)
//!                                           ──► publish: rename into partitions
//! ```
//!
//! Each folder is a layer and imports only the layers below it (a unit test below reads
//! every `use crate::` line and holds the code to it):
//!
//! ```text
//! cli/                         clap args, config, job files, man page, exit codes
//! ops/                         load, recover, abort, status: the journal's only writers
//! table/  sink/  stage/  source/   the participants: prepare and hand over
//! state/                       framed files, journal, manifest, contract, keys, replica
//! storage/                     local files and object stores; knows no protocol
//! core/                        messages, options, layout, error kinds, schema, sys/
//! ```

pub mod cli;
pub mod core;
#[cfg(test)]
mod layering;
pub(crate) mod ops;
pub(crate) mod sink;
pub(crate) mod source;
pub(crate) mod stage;
pub mod state;
pub(crate) mod storage;
pub(crate) mod table;
