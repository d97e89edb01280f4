//! One image attempt's TCP conversation (recovery.md R5 GLIMPSE, R5c
//! Spin), I/O shell shared by the image clients: connect, hand what the
//! server sends to the core's session machine
//! (`feed::recovery::image::ImageSession`) with the time since the attempt
//! started as `now`, send what it asks for, until it has an outcome. What
//! the conversation means is the machine's and its venue codec's.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::feed::recovery::image::{ImageSession, SessionLimits, SessionOutcome};
use crate::feed::SnapshotFailure;
use crate::venue::codec::ImageCodec;

/// An attempt that ended before its session machine had an outcome.
pub type Broken = (SnapshotFailure, String);

/// R5's limits of one attempt.
#[derive(Clone, Copy, Debug)]
pub struct AttemptLimits {
    /// No whole packet or block from the server for this long.
    pub silence: Duration,
    /// No end of the image this long after the start.
    pub whole: Duration,
    /// A client heartbeat after this long without sending.
    pub heartbeat: Duration,
    /// Most bytes of the image's own messages.
    pub max_bytes: usize,
}

/// One attempt from connect to the session machine's outcome: its
/// outcome, the arrival of its last bytes (Unix ns), and the machine (for
/// what its codec learnt; none when it could not start). The connection is closed either way. `end` names
/// the image's end in the failure when the server closes before it.
pub fn attempt<C: ImageCodec>(
    address: SocketAddr,
    connect_timeout: Duration,
    codec: C,
    limits: AttemptLimits,
    stop: &AtomicBool,
    end: &str,
) -> Result<(SessionOutcome, i64, Option<ImageSession<C>>), Broken> {
    let mut tcp = super::connect::connect(&address, connect_timeout)
        .map_err(|e| (SnapshotFailure::Refused, format!("connecting: {e}")))?;
    let _ = tcp.set_nodelay(true);
    tcp.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| (SnapshotFailure::Closed, format!("socket: {e}")))?;
    let started = Instant::now();
    let now = || ns(started.elapsed());
    let session_limits = SessionLimits {
        silence_ns: ns(limits.silence),
        whole_ns: ns(limits.whole),
        heartbeat_ns: ns(limits.heartbeat),
        max_bytes: limits.max_bytes,
    };
    let mut out = Vec::with_capacity(64);
    let mut session = match ImageSession::start(codec, session_limits, now(), &mut out) {
        Ok(session) => session,
        Err(o) => return Ok((o, now_ns(), None)),
    };
    let result = converse(&mut tcp, &mut session, &mut out, stop, now, end);
    let _ = tcp.shutdown(Shutdown::Both);
    result.map(|(o, end_at)| (o, end_at, Some(session)))
}

/// The attempt's reads and writes until the session machine has an
/// outcome (or the client stops).
fn converse<C: ImageCodec>(
    tcp: &mut TcpStream,
    session: &mut ImageSession<C>,
    out: &mut Vec<u8>,
    stop: &AtomicBool,
    now: impl Fn() -> i64,
    end: &str,
) -> Result<(SessionOutcome, i64), Broken> {
    let broken = |why, detail: String| Err((why, detail));
    if let Err(e) = tcp.write_all(out) {
        return broken(SnapshotFailure::Closed, format!("sending the login: {e}"));
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if stop.load(Ordering::Relaxed) {
            return broken(SnapshotFailure::Closed, "stopping".into());
        }
        out.clear();
        if let Some(o) = session.poll(now(), out) {
            return Ok((o, now_ns()));
        }
        if !out.is_empty() {
            if let Err(e) = tcp.write_all(out) {
                return broken(SnapshotFailure::Closed, format!("sending a heartbeat: {e}"));
            }
        }
        let n = match tcp.read(&mut buf) {
            Ok(0) => {
                return broken(
                    SnapshotFailure::Closed,
                    format!("connection closed before {end}"),
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
            Err(e) => return broken(SnapshotFailure::Closed, format!("reading: {e}")),
        };
        out.clear();
        let outcome = session.on_bytes(&buf[..n], now(), out);
        let end_at = now_ns();
        if !out.is_empty() {
            // Replies (a Spin Request), or a Logout Request after the end:
            // a failure to send that does not undo a whole image.
            let sent = tcp.write_all(out);
            if outcome.is_none() {
                if let Err(e) = sent {
                    return broken(SnapshotFailure::Closed, format!("sending: {e}"));
                }
            }
        }
        if let Some(o) = outcome {
            return Ok((o, end_at));
        }
    }
}

/// The wall clock, Unix ns: when an image's end arrived.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn ns(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}
