//! The Spin client of one `cboe-pitch` feed (recovery.md R5c), I/O shell:
//! a thread that, when the feed thread asks, connects to one unit's Spin
//! Server, logs in, requests a spin and reads it to Spin Finished, closes
//! the connection, and hands the finished spin back. One attempt at a time
//! per feed (a login serves one spin at a time); the feed thread never
//! blocks on TCP: it sends a start and polls for the outcome.
//! The conversation's rules are the core's session machine
//! (`feed::recovery::image::ImageSession`) over the venue's codec
//! (`venue::cboe_pitch::spin::SpinCodec`); what to do with the spin is the
//! core's (`Feed::units().on_image`). This file connects, moves bytes and
//! reads the clock.

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

/// What the feed thread asks for: a spin of `unit` from `address`, for an
/// attempt that started when the unit's next was `n0`.
#[derive(Clone, Copy, Debug)]
struct Start {
    unit: u8,
    address: SocketAddr,
    n0: u64,
}

pub struct SpinClient {
    start: Sender<Start>,
    outcomes: Receiver<(u8, Outcome)>,
    /// Stopped and joined when the client is dropped.
    _thread: StoppableThread,
}

impl SpinClient {
    /// Starts thread `spin-<feed>`, idle until `start`.
    pub fn spawn(feed: &str, opts: SpinOptions) -> std::io::Result<SpinClient> {
        let (start_tx, start_rx) = crossbeam_channel::bounded::<Start>(1);
        let (out_tx, out_rx) = crossbeam_channel::bounded::<(u8, Outcome)>(1);
        let name = feed.to_string();
        let thread = StoppableThread::spawn(format!("spin-{feed}"), move |stop| {
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
        })?;
        Ok(SpinClient {
            start: start_tx,
            outcomes: out_rx,
            _thread: thread,
        })
    }

    /// Asks for one attempt of `unit` from its server at `address`, the
    /// unit's next having been `n0` when the attempt started (never
    /// blocks). One at a time: the caller starts the next only after this
    /// one's outcome; a start while one runs is dropped (`false`).
    pub fn start(&self, unit: u8, address: SocketAddr, n0: u64) -> bool {
        self.start.try_send(Start { unit, address, n0 }).is_ok()
    }

    /// The unit and outcome of the attempt, once it is over.
    pub fn try_outcome(&self) -> Option<(u8, Outcome)> {
        self.outcomes.try_recv().ok()
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
