//! The GLIMPSE 5.0 client of one `nasdaq-itch` feed (recovery.md R5), I/O
//! shell: a thread that, when the feed thread asks, logs in to the
//! snapshot server over SoupBinTCP 4.00, reads the snapshot to its End of
//! Snapshot (`G`), logs out, and hands the finished snapshot back. The feed
//! thread never blocks on TCP: it sends a start and polls for the outcome.
//! The conversation's rules are the core's session machine
//! (`feed::recovery::image::ImageSession`) over the venue's codec
//! (`venue::nasdaq_itch::image::GlimpseCodec`); what to do with the
//! snapshot is the core's (`Feed::on_snapshot`). This file connects,
//! moves bytes and reads the clock.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::image_conn::{self, AttemptLimits};
use crate::feed::recovery::image::SessionOutcome;
use crate::feed::SnapshotFailure;
use crate::util::stoppable::StoppableThread;
use crate::venue::nasdaq_itch::image::GlimpseCodec;
use crate::wire::SessionId;

/// Where and how to log in, and R5's time limits.
#[derive(Clone, Debug)]
pub struct GlimpseOptions {
    pub address: SocketAddr,
    pub username: String,
    pub password: String,
    /// R5: an attempt fails after this long without a whole packet.
    pub silence: Duration,
    /// R5: an attempt fails after this long without `G`.
    pub whole: Duration,
    /// SoupBinTCP: a client heartbeat after this long without sending.
    pub heartbeat: Duration,
    /// Most snapshot bytes accepted (`snapshot.max_mib`: a server that
    /// never sends `G` must not exhaust memory before the time limit).
    pub max_bytes: usize,
}

impl GlimpseOptions {
    pub fn new(address: SocketAddr, username: &str, password: &str) -> GlimpseOptions {
        GlimpseOptions {
            address,
            username: username.to_string(),
            password: password.to_string(),
            silence: Duration::from_secs(15),
            whole: Duration::from_secs(30),
            heartbeat: Duration::from_secs(1),
            max_bytes: crate::feed::settings::DEFAULT_SNAPSHOT_MAX_BYTES,
        }
    }
}

/// A finished snapshot: Login Accepted's session (SoupBinTCP's own, for
/// the log only: R5 does not compare it with the multicast session), `G`'s
/// next sequence, the messages as MoldUDP64 blocks (u16 length, message),
/// the arrival of `G`.
#[derive(Debug)]
pub struct Snapshot {
    pub session: SessionId,
    pub next: u64,
    pub blocks: Vec<u8>,
    pub end_at: i64,
}

/// One attempt's outcome.
#[derive(Debug)]
pub enum Outcome {
    Done(Snapshot),
    Failed(SnapshotFailure, String),
}

pub struct GlimpseClient {
    start: Sender<()>,
    outcomes: Receiver<Outcome>,
    /// Stopped and joined when the client is dropped.
    _thread: StoppableThread,
}

impl GlimpseClient {
    /// Starts thread `glimpse-<feed>`, idle until `start`.
    pub fn spawn(feed: &str, opts: GlimpseOptions) -> std::io::Result<GlimpseClient> {
        let (start_tx, start_rx) = crossbeam_channel::bounded::<()>(1);
        let (out_tx, out_rx) = crossbeam_channel::bounded::<Outcome>(1);
        let name = feed.to_string();
        let thread = StoppableThread::spawn(format!("glimpse-{feed}"), move |stop| {
            while !stop.load(Ordering::Relaxed) {
                match start_rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(()) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                }
                tracing::info!(feed = name.as_str(), server = %opts.address, "GLIMPSE snapshot started");
                let outcome = attempt(&opts, &stop);
                if out_tx.send(outcome).is_err() {
                    break;
                }
            }
        })?;
        Ok(GlimpseClient {
            start: start_tx,
            outcomes: out_rx,
            _thread: thread,
        })
    }

    /// Asks for one attempt (never blocks; one at a time: the core starts
    /// the next only after this one's outcome).
    pub fn start(&self) {
        let _ = self.start.try_send(());
    }

    /// The outcome of the attempt, once it is over.
    pub fn try_outcome(&self) -> Option<Outcome> {
        self.outcomes.try_recv().ok()
    }
}

fn failed(why: SnapshotFailure, detail: impl Into<String>) -> Outcome {
    Outcome::Failed(why, detail.into())
}

/// One R5 attempt, from connect to `G` (then Logout Request; R5: after
/// `G` the client closes) or failure.
fn attempt(opts: &GlimpseOptions, stop: &AtomicBool) -> Outcome {
    let limits = AttemptLimits {
        silence: opts.silence,
        whole: opts.whole,
        heartbeat: opts.heartbeat,
        max_bytes: opts.max_bytes,
    };
    let codec = GlimpseCodec::new(&opts.username, &opts.password);
    match image_conn::attempt(
        opts.address,
        Duration::from_secs(5),
        codec,
        limits,
        stop,
        "End of Snapshot",
    ) {
        Ok((o, end_at, _)) => outcome_of(o, end_at),
        Err((why, detail)) => failed(why, detail),
    }
}

/// The session machine's outcome as the feed thread takes it; `end_at`
/// the arrival of `G` (Unix ns).
fn outcome_of(o: SessionOutcome, end_at: i64) -> Outcome {
    match o {
        SessionOutcome::Failed(why, detail) => Outcome::Failed(why, detail),
        SessionOutcome::Done(p) => Outcome::Done(Snapshot {
            // GLIMPSE names its session at login (`G` cannot come before
            // it: the session machine refuses data before the login).
            session: p.session.unwrap_or(SessionId(*b"          ")),
            next: p.next,
            blocks: p.blocks,
            end_at,
        }),
    }
}
