//! How far a sink may run ahead of the coordinator: at most [`IN_FLIGHT`] of its
//! checkpoints preCommitted and not yet committed.
//!
//! A preCommitted checkpoint keeps its staged files open until the coordinator has
//! fsynced them, and the sink keeps up to a quarter of the open-file limit open per
//! checkpoint (`transaction::open_cap`). Where fsyncs are slow (a network filesystem)
//! and a checkpoint has thousands of partitions, the sink used to finish checkpoints
//! faster than the coordinator made them durable, and the queue of open files grew
//! until a load stopped with "Too many open files", and so did each `--recover` after
//! it. With the window, the sink waits at a barrier instead, holding the checkpoint it
//! wrote plus the ones in flight: three quarters of the limit at most.
//!
//! A counting semaphore made of a bounded channel: the sink takes a permit before each
//! preCommit, and the coordinator's side gives one back when a checkpoint is committed.
//! If the coordinator stops, dropping its side wakes a waiting sink with an error.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use anyhow::{anyhow, Result};

/// Checkpoints a sink may have preCommitted and not yet committed.
pub(crate) const IN_FLIGHT: usize = 2;

/// A window of `IN_FLIGHT` checkpoints: the coordinator's side and the sink's.
pub(crate) fn window() -> (Release, Permits) {
    let (give, take) = sync_channel(IN_FLIGHT);
    for _ in 0..IN_FLIGHT {
        // Cannot fail: the channel has room for each, and its receiver is here.
        let _ = give.try_send(());
    }
    (Release(give), Permits(take))
}

/// The coordinator's side: hands a permit back for each committed checkpoint.
pub(crate) struct Release(SyncSender<()>);

impl Release {
    /// One of the sink's checkpoints is committed. Never blocks: the sink holds the
    /// permit it took for it, so the channel has room.
    pub(crate) fn give(&self) {
        let _ = self.0.try_send(());
    }
}

/// The sink's side.
pub(crate) struct Permits(Receiver<()>);

impl Permits {
    /// Waits until fewer than `IN_FLIGHT` of the sink's checkpoints await their commit.
    pub(crate) fn take(&self) -> Result<()> {
        self.0
            .recv()
            .map_err(|_| anyhow!("the coordinator stopped"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::TryRecvError;

    // Never a blocking `take` where a bug would leave no permit: the tests fail
    // instead of hanging.

    #[test]
    fn a_sink_waits_once_its_checkpoints_in_flight_fill_the_window() {
        let (release, permits) = window();
        for _ in 0..IN_FLIGHT {
            assert_eq!(permits.0.try_recv(), Ok(()));
        }
        assert_eq!(permits.0.try_recv(), Err(TryRecvError::Empty));
        release.give();
        assert_eq!(permits.0.try_recv(), Ok(()), "a commit gives a permit back");
        assert_eq!(permits.0.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn a_waiting_sink_wakes_with_an_error_when_the_coordinator_stops() {
        let (release, permits) = window();
        for _ in 0..IN_FLIGHT {
            assert_eq!(permits.0.try_recv(), Ok(()));
        }
        let (woke, wakes) = std::sync::mpsc::channel();
        std::thread::spawn(move || woke.send(permits.take().map_err(|e| e.to_string())));
        drop(release);
        let woke = wakes
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the waiting sink woke");
        assert_eq!(woke, Err("the coordinator stopped".to_string()));
    }
}
