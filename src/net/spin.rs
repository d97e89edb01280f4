//! The Spin client of one `cboe-pitch` feed (recovery.md R5c), I/O shell:
//! a thread that, when the feed thread asks, connects to one unit's Spin
//! Server, logs in, requests a spin and reads it to Spin Finished, closes
//! the connection, and hands the finished spin back. One attempt at a time
//! per feed (a login serves one spin at a time); the feed thread never
//! blocks on TCP: it sends a start and polls for the outcome.
//! The conversation's rules are the core's session machine
//! (`feed::recovery::image::ImageSession`) over the venue's codec
//! (`venue::cboe_pitch::spin::SpinCodec`); what to do with the spin is the
//! core's (`Feed::on_image`). This file connects, moves bytes and reads
//! the clock.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::feed::recovery::image::{ImageSession, SessionLimits, SessionOutcome};
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

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn ns(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}

fn failed(why: SnapshotFailure, detail: impl Into<String>) -> Outcome {
    Outcome::Failed {
        why,
        detail: detail.into(),
        login: None,
    }
}

/// One R5c attempt, from connect to Spin Finished or failure: the bytes
/// the session machine asks for go out, what the server sends goes in,
/// with the time since the attempt started as `now`. The connection is
/// closed either way (R5c: the protocol has no logout).
fn attempt(opts: &SpinOptions, s: Start, stop: &AtomicBool) -> Outcome {
    let mut tcp = match TcpStream::connect_timeout(&s.address, opts.connect_timeout) {
        Ok(t) => t,
        Err(e) => return failed(SnapshotFailure::Refused, format!("connecting: {e}")),
    };
    let _ = tcp.set_nodelay(true);
    if let Err(e) = tcp.set_read_timeout(Some(Duration::from_millis(50))) {
        return failed(SnapshotFailure::Closed, format!("socket: {e}"));
    }
    let started = Instant::now();
    let now = || ns(started.elapsed());
    let limits = SessionLimits {
        silence_ns: ns(opts.silence),
        whole_ns: ns(opts.whole),
        heartbeat_ns: ns(opts.heartbeat),
        max_bytes: opts.max_bytes,
    };
    let mut out = Vec::with_capacity(64);
    let codec = SpinCodec::new(opts.login, s.n0);
    let mut session = match ImageSession::start(codec, limits, now(), &mut out) {
        Ok(session) => session,
        Err(o) => return outcome_of(o, None, 0, now_ns()),
    };
    let outcome = converse(&mut tcp, &mut session, &mut out, stop, now);
    let _ = tcp.shutdown(Shutdown::Both);
    outcome
}

/// The attempt's reads and writes until the session machine has an
/// outcome (or the client stops).
fn converse(
    tcp: &mut TcpStream,
    session: &mut ImageSession<SpinCodec>,
    out: &mut Vec<u8>,
    stop: &AtomicBool,
    now: impl Fn() -> i64,
) -> Outcome {
    if let Err(e) = tcp.write_all(out) {
        return failed(SnapshotFailure::Closed, format!("sending the login: {e}"));
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if stop.load(Ordering::Relaxed) {
            return failed(SnapshotFailure::Closed, "stopping");
        }
        out.clear();
        let polled = session.poll(now(), out);
        if let Some(o) = polled {
            return finish(session, o, now_ns());
        }
        if !out.is_empty() {
            if let Err(e) = tcp.write_all(out) {
                return failed(SnapshotFailure::Closed, format!("sending a heartbeat: {e}"));
            }
        }
        let n = match tcp.read(&mut buf) {
            Ok(0) => {
                return failed(
                    SnapshotFailure::Closed,
                    "connection closed before Spin Finished",
                )
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return failed(SnapshotFailure::Closed, format!("reading: {e}")),
        };
        out.clear();
        let outcome = session.on_bytes(&buf[..n], now(), out);
        let end_at = now_ns();
        if !out.is_empty() {
            // A Spin Request (its failure does not undo a whole spin).
            let sent = tcp.write_all(out);
            if outcome.is_none() {
                if let Err(e) = sent {
                    return failed(SnapshotFailure::Closed, format!("sending: {e}"));
                }
            }
        }
        if let Some(o) = outcome {
            return finish(session, o, end_at);
        }
    }
}

/// The session machine's outcome with what the codec learnt.
fn finish(session: &ImageSession<SpinCodec>, o: SessionOutcome, end_at: i64) -> Outcome {
    let codec = session.codec();
    outcome_of(o, codec.login_status(), codec.trading_statuses(), end_at)
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
