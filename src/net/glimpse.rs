//! The GLIMPSE 5.0 client of one `nasdaq-itch` feed (recovery.md R5), I/O
//! shell: a thread that, when the feed thread asks, logs in to the
//! snapshot server over SoupBinTCP 4.00, reads the snapshot to its End of
//! Snapshot (`G`), logs out, and hands the finished snapshot back. The feed
//! thread never blocks on TCP: it sends a start and polls for the outcome.
//! Framing and parsing are the pure codecs' (`venue::nasdaq_itch::soupbin`,
//! `glimpse`); what to do with the snapshot is the core's
//! (`Feed::on_snapshot`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::feed::SnapshotFailure;
use crate::util::stoppable::StoppableThread;
use crate::venue::nasdaq_itch::glimpse::{parse_end_of_snapshot, TYPE_END_OF_SNAPSHOT};
use crate::venue::nasdaq_itch::soupbin::{Decoder, LoginRequest, Packet};
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

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn failed(why: SnapshotFailure, detail: impl Into<String>) -> Outcome {
    Outcome::Failed(why, detail.into())
}

/// One R5 attempt, from connect to `G` (then Logout Request) or failure.
fn attempt(opts: &GlimpseOptions, stop: &AtomicBool) -> Outcome {
    let mut tcp = match TcpStream::connect_timeout(&opts.address, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => return failed(SnapshotFailure::Refused, format!("connecting: {e}")),
    };
    let _ = tcp.set_nodelay(true);
    if let Err(e) = tcp.set_read_timeout(Some(Duration::from_millis(50))) {
        return failed(SnapshotFailure::Closed, format!("socket: {e}"));
    }
    let login = match LoginRequest::new(&opts.username, &opts.password, None, 1) {
        Ok(l) => l,
        Err(e) => return failed(SnapshotFailure::LoginRejected, format!("login: {e}")),
    };
    let mut out = Vec::with_capacity(64);
    let send = |tcp: &mut TcpStream, p: Packet<'_>, out: &mut Vec<u8>| -> std::io::Result<()> {
        out.clear();
        p.encode(out).map_err(std::io::Error::other)?;
        tcp.write_all(out)
    };
    if let Err(e) = send(&mut tcp, Packet::LoginRequest(login), &mut out) {
        return failed(SnapshotFailure::Closed, format!("sending the login: {e}"));
    }
    let started = Instant::now();
    let mut last_heard = started;
    let mut last_sent = started;
    let mut session: Option<SessionId> = None;
    let mut blocks = Vec::new();
    let mut decoder = Decoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if stop.load(Ordering::Relaxed) {
            return failed(SnapshotFailure::Closed, "stopping");
        }
        if last_heard.elapsed() > opts.silence {
            return failed(
                SnapshotFailure::Silence,
                format!(
                    "no whole packet from the server in {} s",
                    opts.silence.as_secs()
                ),
            );
        }
        if started.elapsed() > opts.whole {
            return failed(
                SnapshotFailure::NoEndOfSnapshot,
                "no End of Snapshot in time",
            );
        }
        if last_sent.elapsed() >= opts.heartbeat {
            if let Err(e) = send(&mut tcp, Packet::ClientHeartbeat, &mut out) {
                return failed(SnapshotFailure::Closed, format!("sending a heartbeat: {e}"));
            }
            last_sent = Instant::now();
        }
        let n = match tcp.read(&mut buf) {
            Ok(0) => {
                return failed(
                    SnapshotFailure::Closed,
                    "connection closed before End of Snapshot",
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
        decoder.push(&buf[..n]);
        loop {
            let packet = match decoder.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => return failed(SnapshotFailure::Malformed, format!("SoupBinTCP: {e}")),
            };
            // R5: silence is measured between whole packets; bytes that
            // never complete one do not count.
            last_heard = Instant::now();
            match packet {
                Packet::LoginAccepted { session: s, .. } => session = Some(s),
                Packet::LoginRejected { reason } => {
                    return failed(
                        SnapshotFailure::LoginRejected,
                        format!("Login Rejected, reason {:?}", reason as char),
                    )
                }
                Packet::SequencedData(msg) => {
                    let Some(session) = session else {
                        return failed(SnapshotFailure::Malformed, "data before Login Accepted");
                    };
                    if msg.first() == Some(&TYPE_END_OF_SNAPSHOT) {
                        let next = match parse_end_of_snapshot(msg) {
                            Ok(n) => n,
                            Err(e) => {
                                return failed(
                                    SnapshotFailure::Malformed,
                                    format!("End of Snapshot: {e}"),
                                )
                            }
                        };
                        let end_at = now_ns();
                        // R5: then the client logs out and closes.
                        let _ = send(&mut tcp, Packet::LogoutRequest, &mut out);
                        let _ = tcp.shutdown(Shutdown::Both);
                        return Outcome::Done(Snapshot {
                            session,
                            next,
                            blocks,
                            end_at,
                        });
                    }
                    if blocks.len() + msg.len() + 2 > opts.max_bytes {
                        return failed(
                            SnapshotFailure::SnapshotBound,
                            format!(
                                "snapshot larger than snapshot.max_mib ({} MiB)",
                                opts.max_bytes >> 20
                            ),
                        );
                    }
                    blocks.extend_from_slice(&(msg.len() as u16).to_be_bytes());
                    blocks.extend_from_slice(msg);
                }
                Packet::EndOfSession => {
                    return failed(
                        SnapshotFailure::Closed,
                        "End of Session before End of Snapshot",
                    )
                }
                Packet::ServerHeartbeat | Packet::Debug(_) => {}
                Packet::LoginRequest(_) | Packet::ClientHeartbeat | Packet::LogoutRequest => {
                    return failed(
                        SnapshotFailure::Malformed,
                        "a client packet from the server",
                    )
                }
            }
        }
    }
}
