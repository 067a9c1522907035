//! A Hive-style table: the files under `COL=VALUE` directories are the table, so a
//! published file is committed and an overwrite is a directory exchange
//! (`sink/overwrite.rs`).

use anyhow::Result;

use super::{Begun, Format, Journaled};
use crate::core::layout::JobLayout;
use crate::core::options::Evolve;
use crate::core::protocol::StagedFile;
use crate::core::records::{Checkpoint, RunLog, RunStarted};
use crate::core::schema::Schema;

/// Hive-style directories.
#[derive(Debug)]
pub(crate) struct Hive;

impl Format for Hive {
    fn begin(&self, _: &JobLayout, _: &RunStarted, _: &Schema, _: Evolve) -> Result<Begun> {
        Ok(Begun::default())
    }

    fn commit(&self, _: &JobLayout, _: &RunStarted, _: &Checkpoint) -> Result<()> {
        Ok(())
    }

    fn replace_partitions(
        &self,
        layout: &JobLayout,
        log: &RunLog,
        journal: Journaled<'_>,
    ) -> Result<()> {
        crate::sink::overwrite::replace_partitions(layout, log, journal)
    }

    fn uncommit(&self, _: &JobLayout, _: &RunLog, _: &[&StagedFile]) -> Result<Option<(u64, u64)>> {
        Ok(None)
    }

    fn status(&self, _: &JobLayout) -> Result<Option<(u64, Option<i64>)>> {
        Ok(None)
    }

    fn live_files(&self, _: &JobLayout) -> Result<Option<super::LiveFiles>> {
        Ok(None)
    }

    fn undo_refusal(&self, _: &JobLayout, _: &RunLog) -> Result<Option<String>> {
        Ok(None)
    }

    fn vacuum(
        &self,
        _: &JobLayout,
        _: Option<std::time::Duration>,
        _: bool,
    ) -> Result<Option<Vec<String>>> {
        Ok(None)
    }
}
