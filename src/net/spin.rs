//! The Spin client of one `cboe-pitch` feed (recovery.md R5c), I/O shell:
//! one thread per unit that has a Spin Server, each of which, when the
//! feed thread asks, connects to its unit's server, logs in, requests a
//! spin and reads it to Spin Finished, closes the connection, and hands the
//! finished spin back. Attempts of different units run at the same time,
//! each on its own connection (R5c: they are independent); a unit has at
//! most one attempt at a time. The threads are made with the client, one
//! per configured unit, never per attempt. The feed thread never blocks
//! on TCP: it sends a start and polls for the outcomes.
//! The conversation's rules are the core's session machine
//! (`feed::recovery::image::ImageSession`) over the venue's codec
//! (`venue::cboe_pitch::spin::SpinCodec`); what to do with the spin is the
//! core's (`Feed::units().on_image`). This file connects, moves bytes and
//! reads the clock.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::image_conn::{self, AttemptLimits};
use crate::feed::recovery::image::SessionOutcome;
use crate::feed::SnapshotFailure;
use crate::util::stoppable::StoppableThread;
use crate::venue::cboe_pitch::session::{Login, LoginStatus};
use crate::venue::cboe_pitch::spin::SpinCodec;

/// The login and R5c's limits, the same for every unit of the feed.
#[derive(Clone, Debug)]
pub struct SpinOptions {
    /// R5c step 2: the same Login as the Gap Request Proxy's.
    pub login: Login,
    /// R5c: an attempt fails after this long without a whole block.
    pub silence: Duration,
    /// R5c: an attempt fails after this long from its start without
    /// Spin Finished.
    pub whole: Duration,
    /// R5c step 2: a client heartbeat after this long without sending.
    pub heartbeat: Duration,
    /// Most bytes of the spin's own messages (`spin.max_mib`).
    pub max_bytes: usize,
    /// How long a connection may take to be made.
    pub connect_timeout: Duration,
}

impl SpinOptions {
    pub fn new(login: Login) -> SpinOptions {
        SpinOptions {
            login,
            silence: Duration::from_secs(15),
            whole: Duration::from_secs(30),
            heartbeat: Duration::from_secs(1),
            max_bytes: crate::feed::settings::DEFAULT_SNAPSHOT_MAX_BYTES,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// A finished spin: `next` is `S + 1`, the messages as blocks (u16
/// big-endian length, then the PITCH message, Length byte first), the
/// arrival of Spin Finished (Unix ns), and how many Trading Status
/// messages it held (R5c: a spin with none is logged).
#[derive(Debug)]
pub struct Spin {
    pub next: u64,
    pub blocks: Vec<u8>,
    pub end_at: i64,
    pub trading_statuses: u32,
}

/// One attempt's outcome. A failure carries the Login Response's status
/// when one was read (R5c: `B`, session in use, is told apart).
#[derive(Debug)]
pub enum Outcome {
    Done(Spin),
    Failed {
        why: SnapshotFailure,
        detail: String,
        login: Option<LoginStatus>,
    },
}

/// What the feed thread asks of a unit's thread: a spin from `address`,
/// for an attempt that started when the unit's next was `n0`.
#[derive(Clone, Copy, Debug)]
struct Start {
    unit: u8,
    address: SocketAddr,
    n0: u64,
}

/// One unit's attempt thread and what the feed thread knows of it.
struct UnitThread {
    unit: u8,
    start: Sender<Start>,
    /// An attempt was started and its outcome not taken yet.
    busy: Cell<bool>,
    /// Stopped and joined when the client is dropped.
    thread: StoppableThread,
}

pub struct SpinClient {
    /// By unit id, ascending.
    units: Vec<UnitThread>,
    /// Every unit's outcomes: at most one each is waiting (a unit starts
    /// again only after its outcome was taken), so no thread ever blocks
    /// on sending.
    outcomes: Receiver<(u8, Outcome)>,
}

impl SpinClient {
    /// Starts one thread `spin-<feed>-<unit>` for each of `units` (the
    /// units of `spin.servers`), each idle until `start`.
    pub fn spawn(feed: &str, opts: SpinOptions, units: &[u8]) -> std::io::Result<SpinClient> {
        let mut ids = units.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let (out_tx, out_rx) = crossbeam_channel::bounded::<(u8, Outcome)>(ids.len().max(1));
        let mut threads = Vec::with_capacity(ids.len());
        for unit in ids {
            let (start_tx, start_rx) = crossbeam_channel::bounded::<Start>(1);
            let out_tx = out_tx.clone();
            let opts = opts.clone();
            let name = feed.to_string();
            let thread = StoppableThread::spawn(format!("spin-{feed}-{unit}"), move |stop| {
                while !stop.load(Ordering::Relaxed) {
                    let s = match start_rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(s) => s,
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                    };
                    tracing::info!(
                        feed = name.as_str(),
                        unit = s.unit,
                        server = %s.address,
                        n0 = s.n0,
                        "spin started"
                    );
                    let outcome = attempt(&opts, s, &stop);
                    if out_tx.send((s.unit, outcome)).is_err() {
                        break;
                    }
                }
            });
            match thread {
                Ok(thread) => threads.push(UnitThread {
                    unit,
                    start: start_tx,
                    busy: Cell::new(false),
                    thread,
                }),
                Err(e) => {
                    // Those already made stop together as the client would.
                    drop(SpinClient {
                        units: threads,
                        outcomes: out_rx,
                    });
                    return Err(e);
                }
            }
        }
        Ok(SpinClient {
            units: threads,
            outcomes: out_rx,
        })
    }

    fn unit(&self, unit: u8) -> Option<&UnitThread> {
        self.units
            .binary_search_by_key(&unit, |t| t.unit)
            .ok()
            .map(|i| &self.units[i])
    }

    /// Asks unit `unit`'s thread for one attempt from its server at
    /// `address`, the unit's next having been `n0` when the attempt
    /// started (never blocks). Other units' attempts may be running
    /// meanwhile. One at a time per unit: a start while the unit's attempt
    /// runs (its outcome not taken yet), or for a unit the client was not
    /// made with, is dropped (`false`).
    pub fn start(&self, unit: u8, address: SocketAddr, n0: u64) -> bool {
        let Some(t) = self.unit(unit) else {
            return false;
        };
        if t.busy.get() || t.start.try_send(Start { unit, address, n0 }).is_err() {
            return false;
        }
        t.busy.set(true);
        true
    }

    /// Whether unit `unit`'s attempt is running (started, its outcome not
    /// taken yet).
    pub fn running(&self, unit: u8) -> bool {
        self.unit(unit).is_some_and(|t| t.busy.get())
    }

    /// The unit and outcome of an attempt that is over, if any (one a
    /// call, in the order they ended).
    pub fn try_outcome(&self) -> Option<(u8, Outcome)> {
        let (unit, outcome) = self.outcomes.try_recv().ok()?;
        if let Some(t) = self.unit(unit) {
            t.busy.set(false);
        }
        Some((unit, outcome))
    }
}

impl Drop for SpinClient {
    fn drop(&mut self) {
        // Every thread is told first, then each is joined (when dropped).
        for t in &self.units {
            t.thread.signal();
        }
    }
}

fn failed(why: SnapshotFailure, detail: impl Into<String>) -> Outcome {
    Outcome::Failed {
        why,
        detail: detail.into(),
        login: None,
    }
}

/// One R5c attempt, from connect to Spin Finished or failure; the
/// connection is closed either way (R5c: the protocol has no logout).
fn attempt(opts: &SpinOptions, s: Start, stop: &AtomicBool) -> Outcome {
    let limits = AttemptLimits {
        silence: opts.silence,
        whole: opts.whole,
        heartbeat: opts.heartbeat,
        max_bytes: opts.max_bytes,
    };
    let codec = SpinCodec::new(opts.login, s.n0);
    match image_conn::attempt(
        s.address,
        opts.connect_timeout,
        codec,
        limits,
        stop,
        "Spin Finished",
    ) {
        Ok((o, end_at, Some(session))) => {
            let codec = session.codec();
            outcome_of(o, codec.login_status(), codec.trading_statuses(), end_at)
        }
        Ok((o, end_at, None)) => outcome_of(o, None, 0, end_at),
        Err((why, detail)) => failed(why, detail),
    }
}

/// The outcome as the feed thread takes it; `end_at` the arrival of Spin
/// Finished (Unix ns).
fn outcome_of(
    o: SessionOutcome,
    login: Option<LoginStatus>,
    trading_statuses: u32,
    end_at: i64,
) -> Outcome {
    match o {
        SessionOutcome::Failed(why, detail) => Outcome::Failed { why, detail, login },
        SessionOutcome::Done(p) => Outcome::Done(Spin {
            next: p.next,
            blocks: p.blocks,
            end_at,
            trading_statuses,
        }),
    }
}
