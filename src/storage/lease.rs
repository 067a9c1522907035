//! The job lock of an object-store table: a lease object, `TABLE/_ingest/JOB/lease`.
//!
//! - acquire: create the object if absent (`If-None-Match: *`). If it exists and its
//!   expiry has passed, a crashed holder left it: replace it only if it is still that
//!   object (`If-Match` on its ETag), so of two processes taking over at once exactly
//!   one wins. A live lease means another holder: wait up to `--lock-wait`, then exit 75.
//! - renew: a thread rewrites it (`If-Match` again) every third of the lease time. A
//!   renewal that finds another holder's object, or that cannot reach the store before
//!   the lease runs out, marks the lease lost; the run then stops before its next
//!   journal record ([`Lease::check`]).
//! - release: delete it, if it is still ours.
//!
//! The lease is advisory between well-behaved processes; the journal is the fence. Its
//! records are created only if absent at the next sequence number (`replica.rs`), so a
//! holder that stalled past its lease, and lost it, fails its next record instead of
//! interleaving with the new holder's.
//!
//! A lease whose holder ran on this host and no longer runs (`holder.rs`) is taken at
//! once, as an expired one is: `--recover` after a `kill -9` need not wait out the lease.
//!
//! Expiry is judged by the waiter's clock against the holder's: clocks must agree to
//! well within the lease time (30 s unless `INGEST_LEASE_SECS` says otherwise).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

use super::bucket::{Bucket, Mode, Put};
use super::holder::Process;
use crate::core::error::LockHeld;
use crate::core::sys::signals;

/// The lease time unless `INGEST_LEASE_SECS` sets another.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Races for the lease lost in a row before taking it is given up (each lost race is
/// followed by a read that finds the winner's lease: one or two are normal).
const LOST_RACES: u32 = 20;

/// The holder of `job`'s lease if it is live, as the exit-75 message names it.
pub(crate) fn live_holder(bucket: &Bucket, job: &str) -> Result<Option<String>> {
    let key = format!("_ingest/{job}/lease");
    Ok(bucket
        .get(&key)?
        .and_then(|(bytes, _)| serde_json::from_slice::<Holder>(&bytes).ok())
        .filter(Holder::is_live)
        .map(|held| format!("{} (lease {})", held.holder, bucket.url_of(&key))))
}

/// What the lease object holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Holder {
    /// Who: host, pid and start time, for the exit-75 message.
    holder: String,
    /// Milliseconds since the epoch after which the lease is free.
    expires_ms: u64,
    /// The holder, for a taker on the same host to tell whether it still runs (absent
    /// from leases of earlier versions, and where `/proc` does not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    process: Option<Process>,
}

impl Holder {
    /// Whether the lease still keeps others out: not expired, and not held by a process
    /// of this host that no longer runs.
    fn is_live(&self) -> bool {
        self.expires_ms > now_ms() && !self.process.as_ref().is_some_and(Process::is_gone)
    }
}

/// The lease time: `INGEST_LEASE_SECS`, or 30 seconds.
pub(crate) fn lease_time() -> Duration {
    lease_time_from(std::env::var("INGEST_LEASE_SECS").ok().as_deref())
}

/// The lease time a setting gives: whole seconds above zero; anything else is the default
/// (a zero lease would expire as it is written).
fn lease_time_from(setting: Option<&str>) -> Duration {
    setting
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&secs| secs > 0)
        .map_or(DEFAULT_LEASE, Duration::from_secs)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct State {
    etag: String,
    lost: Option<String>,
}

/// A held lease, renewed until dropped.
pub(crate) struct Lease {
    bucket: Arc<Bucket>,
    key: String,
    state: Arc<Mutex<State>>,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl Lease {
    /// Takes the lease of `job`, waiting up to `wait` for a live holder to let go.
    pub(crate) fn acquire(bucket: Arc<Bucket>, job: &str, wait: Option<Duration>) -> Result<Lease> {
        Self::acquire_for(bucket, job, wait, lease_time())
    }

    /// [`Lease::acquire`] for a lease of `lease`.
    fn acquire_for(
        bucket: Arc<Bucket>,
        job: &str,
        wait: Option<Duration>,
        lease: Duration,
    ) -> Result<Lease> {
        let key = format!("_ingest/{job}/lease");
        let me = format!(
            "pid {} on {} since {}",
            std::process::id(),
            hostname(),
            humantime::format_rfc3339_seconds(SystemTime::now())
        );
        let process = Process::me();
        let body = |me: &str| {
            serde_json::to_vec(&Holder {
                holder: me.to_string(),
                expires_ms: now_ms() + lease.as_millis() as u64,
                process: process.clone(),
            })
        };
        let deadline = Instant::now() + wait.unwrap_or_default();
        // Bounded: each turn either takes the lease, sleeps toward the deadline (which
        // ends the waiting turns), or lost a race that someone else won and then finds a
        // live lease next turn. Races lost one after another without ever seeing that
        // lease mean a store that answers GET and conditional PUT inconsistently.
        let mut lost = 0;
        while lost < LOST_RACES {
            let taken = match bucket.get(&key)? {
                None => bucket.put(&key, body(&me)?, Mode::Create)?,
                Some((bytes, etag)) => {
                    let held: Option<Holder> = serde_json::from_slice(&bytes).ok();
                    match (held, etag) {
                        (Some(held), _) if held.is_live() => {
                            if Instant::now() >= deadline || signals::requested().is_some() {
                                return Err(LockHeld {
                                    table: bucket.url().to_string(),
                                    job: job.to_string(),
                                    holder: format!(
                                        "{} (lease object {}, renewed every {} s)",
                                        held.holder,
                                        bucket.url_of(&key),
                                        (lease / 3).as_secs().max(1)
                                    ),
                                }
                                .into());
                            }
                            std::thread::sleep(Duration::from_millis(250));
                            continue;
                        }
                        // Expired, its holder gone, or not a lease at all (a torn writer cannot make one:
                        // PUTs are atomic): take it over if nobody else has yet.
                        (_, Some(etag)) => bucket.put(&key, body(&me)?, Mode::Replace(etag))?,
                        (_, None) => {
                            return Err(anyhow!(
                                "the store gave no ETag for {}; a lease needs conditional writes",
                                bucket.url_of(&key)
                            ))
                        }
                    }
                }
            };
            if let Put::Done(Some(etag)) = taken {
                return Ok(Lease::start(bucket, key, etag, me, lease));
            }
            if let Put::Done(None) = taken {
                return Err(anyhow!(
                    "the store gave no ETag for {}; a lease needs conditional writes",
                    bucket.url_of(&key)
                ));
            }
            lost += 1;
        }
        Err(anyhow!(
            "could not take the lease {}: {LOST_RACES} conditional writes in a row lost to \
             a lease that reading it never showed; the store does not answer reads and \
             conditional writes consistently",
            bucket.url_of(&key)
        ))
    }

    fn start(bucket: Arc<Bucket>, key: String, etag: String, me: String, lease: Duration) -> Lease {
        let state = Arc::new(Mutex::new(State { etag, lost: None }));
        let (stop, stopped) = mpsc::channel::<()>();
        let renewer = {
            let (bucket, key, state) = (bucket.clone(), key.clone(), state.clone());
            std::thread::Builder::new()
                .name("ingest-lease".into())
                .spawn(move || renew(&bucket, &key, &state, &me, lease, &stopped))
                .ok()
        };
        let mut lease_handle = Lease {
            bucket,
            key,
            state,
            stop: Some(stop),
            renewer,
        };
        if lease_handle.renewer.is_none() {
            lease_handle.mark_lost("the lease's renewal thread could not start".into());
        }
        lease_handle
    }

    fn mark_lost(&mut self, why: String) {
        if let Ok(mut state) = self.state.lock() {
            state.lost.get_or_insert(why);
        }
    }

    /// Fails if the lease was lost: nothing more may be written for the job.
    pub(crate) fn check(&self) -> Result<()> {
        let state = self
            .state
            .lock()
            .map_err(|_| anyhow!("the lease state is poisoned"))?;
        match &state.lost {
            None => Ok(()),
            Some(why) => Err(anyhow!(
                "lost the job's lease {}: {why}; stopping before writing anything more",
                self.bucket.url_of(&self.key)
            )),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        let ours = self
            .state
            .lock()
            .ok()
            .filter(|s| s.lost.is_none())
            .map(|s| s.etag.clone());
        // Best effort: an object left behind expires. Deleted only while still ours.
        if let (Some(ours), Ok(Some((_, Some(now))))) = (ours, self.bucket.get(&self.key)) {
            if ours == now {
                let _ = self.bucket.delete(&self.key);
            }
        }
    }
}

/// The renewal loop: every third of the lease, rewrite the object if it is still ours.
fn renew(
    bucket: &Bucket,
    key: &str,
    state: &Mutex<State>,
    me: &str,
    lease: Duration,
    stopped: &mpsc::Receiver<()>,
) {
    let mut valid_until = Instant::now() + lease;
    loop {
        match stopped.recv_timeout(lease / 3) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Ok(etag) = state.lock().map(|s| s.etag.clone()) else {
            return;
        };
        let body = serde_json::to_vec(&Holder {
            holder: me.to_string(),
            expires_ms: now_ms() + lease.as_millis() as u64,
            process: Process::me(),
        });
        let renewed = body
            .context("cannot encode the lease")
            .and_then(|body| bucket.put(key, body, Mode::Replace(etag)));
        let lost = match renewed {
            Ok(Put::Done(Some(etag))) => {
                valid_until = Instant::now() + lease;
                if let Ok(mut s) = state.lock() {
                    s.etag = etag;
                }
                None
            }
            Ok(Put::Done(None)) => Some("the store gave no ETag on renewal".to_string()),
            Ok(Put::Conflict) => Some("another process holds it now".to_string()),
            Err(e) if Instant::now() >= valid_until => {
                Some(format!("it could not be renewed before it ran out: {e:#}"))
            }
            // A transient failure: try again at the next turn, while the lease lasts.
            Err(_) => None,
        };
        if let Some(why) = lost {
            if let Ok(mut s) = state.lock() {
                s.lost.get_or_insert(why);
            }
            return;
        }
    }
}

fn hostname() -> String {
    super::holder::host().unwrap_or_else(|| "an unknown host".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::{kind, Kind};
    use crate::core::url::ObjectUrl;

    /// A bucket table on the store `.ci/test` started, under a prefix of this test's own.
    fn test_bucket(test: &str) -> Option<Arc<Bucket>> {
        let Some((store, create_only, bucket)) = crate::storage::s3::test_clients() else {
            eprintln!("skipped lease::{test}: no S3 store (.ci/test starts one)");
            return None;
        };
        let url = ObjectUrl {
            bucket,
            key: format!("unit-lease-{test}-{}", std::process::id()),
        };
        Some(Arc::new(Bucket::with_clients(url, store, create_only)))
    }

    fn is_lock_held(result: Result<Lease>) -> bool {
        result.is_err_and(|e| kind(&e) == Kind::LockHeld)
    }

    /// Another process's attempt, bounded: a taker that never gives up fails the test
    /// instead of hanging it.
    fn try_take(bucket: &Arc<Bucket>, wait: Option<Duration>) -> (bool, Duration) {
        let (done, result) = mpsc::channel();
        let bucket = bucket.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let held = is_lock_held(Lease::acquire_for(
                bucket,
                "job",
                wait,
                Duration::from_secs(1),
            ));
            let _ = done.send((held, started.elapsed()));
        });
        result
            .recv_timeout(Duration::from_secs(20))
            .expect("a taker of a live lease did not give up within 20 s")
    }

    #[test]
    fn a_held_lease_is_renewed_past_its_time_and_keeps_others_out() {
        let Some(bucket) = test_bucket("renewed") else {
            return;
        };
        // A 3 s lease renewed every second: a renewal must run late by two seconds to let
        // it lapse, which a loaded CI machine does not do (a 1 s lease flaked there).
        let lease = Lease::acquire_for(bucket.clone(), "job", None, Duration::from_secs(3))
            .expect("a free lease is taken");
        // Two and a half lease times: only renewals keep it live that long.
        let until = Instant::now() + Duration::from_millis(7500);
        while Instant::now() < until {
            assert!(
                live_holder(&bucket, "job").unwrap().is_some(),
                "the lease lapsed while its holder ran"
            );
            std::thread::sleep(Duration::from_millis(150));
        }
        let (held, _) = try_take(&bucket, None);
        assert!(held, "another taker got a live lease");
        lease.check().expect("the holder still has its lease");
        drop(lease);
        assert!(live_holder(&bucket, "job").unwrap().is_none(), "released");
        let again = Lease::acquire_for(bucket, "job", None, Duration::from_secs(1));
        assert!(again.is_ok(), "a released lease is free");
    }

    #[test]
    fn a_lease_that_cannot_be_renewed_is_lost_when_its_time_runs_out_and_not_before() {
        // A store that refuses every connection (nothing listens on the discard port),
        // without retries: each renewal fails at once.
        let unreachable = || {
            object_store::aws::AmazonS3Builder::new()
                .with_endpoint("http://127.0.0.1:9")
                .with_allow_http(true)
                .with_region("us-east-1")
                .with_bucket_name("gone")
                .with_access_key_id("key")
                .with_secret_access_key("secret")
                .with_retry(object_store::RetryConfig {
                    max_retries: 0,
                    retry_timeout: Duration::from_secs(1),
                    ..Default::default()
                })
                .build()
                .unwrap()
        };
        let url = ObjectUrl {
            bucket: "gone".into(),
            key: "t".into(),
        };
        let bucket = Arc::new(Bucket::with_clients(
            url,
            Arc::new(unreachable()),
            unreachable(),
        ));
        let started = Instant::now();
        let lease = Lease::start(
            bucket,
            "_ingest/job/lease".into(),
            "\"etag\"".into(),
            "me".into(),
            Duration::from_secs(1),
        );
        // Renewals at a third and two thirds of the lease fail: still held, as the
        // store's copy is still live.
        std::thread::sleep(Duration::from_millis(800));
        lease
            .check()
            .expect("a failed renewal with time left is not a lost lease");
        let lost_by = Instant::now() + Duration::from_secs(5);
        let why = loop {
            if let Err(e) = lease.check() {
                break e.to_string();
            }
            assert!(
                Instant::now() < lost_by,
                "an unrenewable lease was never lost"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(started.elapsed() >= Duration::from_millis(950), "{why}");
        assert!(
            why.contains("could not be renewed before it ran out"),
            "{why}"
        );
    }

    #[test]
    fn a_taker_waits_for_a_live_lease_as_long_as_told_and_no_longer() {
        let Some(bucket) = test_bucket("waits") else {
            return;
        };
        let _held = Lease::acquire_for(bucket.clone(), "job", None, Duration::from_secs(1))
            .expect("a free lease is taken");
        let (held, waited) = try_take(&bucket, Some(Duration::from_millis(1200)));
        assert!(held, "the taker exits as a held lock does");
        assert!(
            waited >= Duration::from_millis(1200),
            "gave up after {waited:?}"
        );
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
        let (held, waited) = try_take(&bucket, None);
        assert!(held && waited < Duration::from_secs(5), "{waited:?}");
    }

    #[test]
    fn the_lease_time_is_whole_seconds_above_zero_else_thirty() {
        assert_eq!(lease_time_from(Some("5")), Duration::from_secs(5));
        assert_eq!(lease_time_from(Some(" 90 ")), Duration::from_secs(90));
        for bad in [
            None,
            Some("0"),
            Some("-3"),
            Some("1.5"),
            Some("soon"),
            Some(""),
        ] {
            assert_eq!(lease_time_from(bad), DEFAULT_LEASE, "{bad:?}");
        }
    }
}
