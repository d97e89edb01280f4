//! Progress tracking for the systemd watchdog and `/healthz`.
//!
//! Each worker thread that must never stall (a feed's writer) owns a
//! [`Beat`] and bumps it from its loop, which runs at least every poll
//! timeout (100 ms) even when no datagram arrives. The watchdog loop sends
//! `WATCHDOG=1` only while every beat has moved recently: a feed thread
//! stuck in a syscall, a deadlock or an endless loop stops the pings and
//! systemd restarts the service. The check itself is pure (time is an
//! argument).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A worker's proof of progress.
#[derive(Debug)]
pub struct Beat {
    name: String,
    count: AtomicU64,
    /// Set when the worker ended (normally or not): an ended worker is
    /// stalled for good unless the daemon is stopping.
    ended: AtomicBool,
}

impl Beat {
    pub fn new(name: &str) -> Arc<Beat> {
        Arc::new(Beat {
            name: name.to_string(),
            count: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        })
    }

    /// Called by the worker from its loop (one relaxed add by the only writer).
    #[inline]
    pub fn beat(&self) {
        self.count
            .store(self.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    pub fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Decides whether every worker made progress recently.
#[derive(Debug)]
pub struct Watchdog {
    beats: Vec<(Arc<Beat>, u64, Instant)>,
    stall_after: Duration,
}

impl Watchdog {
    pub fn new(beats: Vec<Arc<Beat>>, stall_after: Duration, now: Instant) -> Watchdog {
        Watchdog {
            beats: beats.into_iter().map(|b| (b, 0, now)).collect(),
            stall_after,
        }
    }

    /// `Ok` when every worker beat within `stall_after`, else the names of
    /// those that did not (or ended).
    pub fn check(&mut self, now: Instant) -> Result<(), Vec<String>> {
        let mut stalled = Vec::new();
        for (beat, seen, at) in &mut self.beats {
            let count = beat.count.load(Ordering::Relaxed);
            if count != *seen {
                *seen = count;
                *at = now;
            }
            if beat.ended.load(Ordering::Relaxed) {
                stalled.push(format!("{} (ended)", beat.name));
            } else if now.saturating_duration_since(*at) > self.stall_after {
                stalled.push(beat.name.clone());
            }
        }
        if stalled.is_empty() {
            Ok(())
        } else {
            Err(stalled)
        }
    }
}

/// How often to ping: half of systemd's timeout (its recommendation),
/// at most every second so `/healthz` stays current without systemd.
pub fn ping_interval(timeout: Option<Duration>) -> Duration {
    match timeout {
        Some(t) => (t / 2).clamp(Duration::from_millis(10), Duration::from_secs(1)),
        None => Duration::from_secs(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_stops_beating_is_reported() {
        let t0 = Instant::now();
        let a = Beat::new("feed-fx");
        let b = Beat::new("feed-eq");
        let mut wd = Watchdog::new(vec![a.clone(), b.clone()], Duration::from_secs(2), t0);
        assert_eq!(wd.check(t0 + Duration::from_secs(1)), Ok(()));
        a.beat();
        b.beat();
        assert_eq!(wd.check(t0 + Duration::from_secs(2)), Ok(()));
        a.beat();
        // b has not moved since t0+2s.
        assert_eq!(
            wd.check(t0 + Duration::from_millis(4500)),
            Err(vec!["feed-eq".to_string()])
        );
        b.beat();
        assert_eq!(wd.check(t0 + Duration::from_millis(4600)), Ok(()));
        b.end();
        assert_eq!(
            wd.check(t0 + Duration::from_millis(4700)),
            Err(vec!["feed-eq (ended)".to_string()])
        );
    }

    #[test]
    fn ping_interval_is_half_the_timeout_within_bounds() {
        assert_eq!(
            ping_interval(Some(Duration::from_millis(400))),
            Duration::from_millis(200)
        );
        assert_eq!(
            ping_interval(Some(Duration::from_secs(30))),
            Duration::from_secs(1)
        );
        assert_eq!(ping_interval(None), Duration::from_secs(1));
    }
}
