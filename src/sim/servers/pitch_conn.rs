//! What the Gap Request Proxy and Spin servers share (recovery.md R4c,
//! R5c): the accept loop (one thread per connection, connections capped),
//! a connection's block reads with deadlines, its writes, and the Login
//! check. I/O shell over `venue::cboe_pitch::session`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::venue::cboe_pitch::session::{
    encode_block, BlockDecoder, Login, LoginStatus, SessionError, SessionMessage,
};

pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Counters every connection keeps.
#[derive(Default)]
pub(super) struct ConnCounters {
    pub connections: AtomicU64,
    pub refused: AtomicU64,
    pub logins_accepted: AtomicU64,
    pub logins_rejected: AtomicU64,
    pub garbage: AtomicU64,
    pub login_timeouts: AtomicU64,
    pub idle_timeouts: AtomicU64,
    pub write_failures: AtomicU64,
}

/// What every connection did, as the servers report it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounts {
    pub connections: u64,
    pub refused: u64,
    pub logins_accepted: u64,
    pub logins_rejected: u64,
    pub garbage: u64,
    pub login_timeouts: u64,
    pub idle_timeouts: u64,
    pub write_failures: u64,
}

impl ConnCounters {
    pub(super) fn counts(&self) -> ConnCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ConnCounts {
            connections: get(&self.connections),
            refused: get(&self.refused),
            logins_accepted: get(&self.logins_accepted),
            logins_rejected: get(&self.logins_rejected),
            garbage: get(&self.garbage),
            login_timeouts: get(&self.login_timeouts),
            idle_timeouts: get(&self.idle_timeouts),
            write_failures: get(&self.write_failures),
        }
    }
}

/// What serves one connection (its own thread), until `stop` or the end.
pub(super) type Serve = Arc<dyn Fn(TcpStream, &AtomicBool) + Send + Sync>;

/// Accepts on `listener` until `stop`; each connection runs `serve` in a
/// thread of its own, at most `max` at once (more are closed at once).
pub(super) fn accept_loop(
    name: &'static str,
    listener: TcpListener,
    max: usize,
    counters: Arc<ConnCounters>,
    stop: Arc<AtomicBool>,
    serve: Serve,
) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        let (stream, peer) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, server = name, "accept");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        bump(&counters.connections);
        if active.load(Ordering::Relaxed) >= max {
            bump(&counters.refused);
            tracing::warn!(%peer, max, server = name, "connection refused: too many open");
            drop(stream);
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (stop, active2, serve) = (stop.clone(), active.clone(), serve.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-conn"))
            .spawn(move || {
                serve(stream, &stop);
                tracing::debug!(%peer, server = name, "connection closed");
                active2.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, server = name, "connection thread not started");
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Why a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Closed {
    ByPeer,
    Rejected,
    Garbage,
    LoginTimeout,
    IdleTimeout,
    WriteFailed,
    Stopped,
}

/// One connection: blocks in, blocks out.
pub(super) struct Conn<'a> {
    pub stream: TcpStream,
    pub decoder: BlockDecoder,
    pub counters: &'a ConnCounters,
    pub stop: &'a AtomicBool,
    pub last_sent: Instant,
    pub last_heard: Instant,
    out: Vec<u8>,
}

impl<'a> Conn<'a> {
    pub fn new(
        stream: TcpStream,
        counters: &'a ConnCounters,
        stop: &'a AtomicBool,
        write_timeout: Duration,
    ) -> Result<Conn<'a>, Closed> {
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(write_timeout))
            .map_err(|_| Closed::WriteFailed)?;
        let now = Instant::now();
        Ok(Conn {
            stream,
            decoder: BlockDecoder::new(),
            counters,
            stop,
            last_sent: now,
            last_heard: now,
            out: Vec::with_capacity(2048),
        })
    }

    /// The next whole block's messages (empty: a heartbeat), waiting until
    /// `deadline`; `Ok(None)` at the deadline.
    pub fn next_block(&mut self, deadline: Instant) -> Result<Option<Vec<SessionMessage>>, Closed> {
        loop {
            match self.decoder.next_block() {
                Ok(Some(b)) => {
                    self.last_heard = Instant::now();
                    let msgs: Result<Vec<_>, SessionError> = b.messages().collect();
                    return match msgs {
                        Ok(m) => Ok(Some(m)),
                        Err(e) => Err(self.garbage(&e.to_string())),
                    };
                }
                Ok(None) => {}
                Err(e) => return Err(self.garbage(&e.to_string())),
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(Closed::Stopped);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait = (deadline - now).clamp(Duration::from_millis(1), Duration::from_millis(250));
            self.stream
                .set_read_timeout(Some(wait))
                .map_err(|_| Closed::ByPeer)?;
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(Closed::ByPeer),
                Ok(n) => self.decoder.push(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => return Err(Closed::ByPeer),
            }
        }
    }

    pub fn garbage(&self, why: &str) -> Closed {
        bump(&self.counters.garbage);
        tracing::debug!(why, "client sent what has no place here");
        Closed::Garbage
    }

    /// One block holding `msgs` (a heartbeat when empty).
    pub fn send(&mut self, msgs: &[SessionMessage]) -> Result<(), Closed> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        encode_block(msgs, &mut out).map_err(|_| Closed::WriteFailed)?;
        let r = self.write(&out);
        self.out = out;
        r
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<(), Closed> {
        match self.stream.write_all(bytes) {
            Ok(()) => {
                self.last_sent = Instant::now();
                Ok(())
            }
            Err(e) => {
                bump(&self.counters.write_failures);
                tracing::debug!(error = %e, "write failed");
                Err(Closed::WriteFailed)
            }
        }
    }

    /// R4c, R5c: the first block must be a Login alone, within
    /// `timeout`; Login Response `A` if it carries `want`'s credentials,
    /// `N` (and the connection closes) if not.
    pub fn login(&mut self, want: &Login, timeout: Duration) -> Result<(), Closed> {
        let deadline = Instant::now() + timeout;
        let first = loop {
            match self.next_block(deadline)? {
                Some(m) if m.is_empty() => continue,
                Some(m) => break m,
                None => {
                    bump(&self.counters.login_timeouts);
                    return Err(Closed::LoginTimeout);
                }
            }
        };
        let [SessionMessage::Login(l)] = first[..] else {
            return Err(self.garbage("the first block is not a Login"));
        };
        if l != *want {
            bump(&self.counters.logins_rejected);
            let _ = self.send(&[SessionMessage::LoginResponse(LoginStatus::NotAuthorized)]);
            return Err(Closed::Rejected);
        }
        bump(&self.counters.logins_accepted);
        self.send(&[SessionMessage::LoginResponse(LoginStatus::Accepted)])
    }
}

/// Binds a loopback-or-given TCP address for a server, polled so that the
/// accept loop sees the stop flag.
pub(super) fn listen(addr: SocketAddr, what: &str) -> anyhow::Result<(TcpListener, SocketAddr)> {
    use anyhow::Context;
    let listener =
        TcpListener::bind(addr).with_context(|| format!("binding the {what} to {addr}"))?;
    let addr = listener
        .local_addr()
        .with_context(|| format!("{what} address"))?;
    listener
        .set_nonblocking(true)
        .with_context(|| format!("{what} socket"))?;
    Ok((listener, addr))
}
