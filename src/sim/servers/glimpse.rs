//! A GLIMPSE 5.0 server over SoupBinTCP 4.00 (R5) serving a simulated
//! book. One thread accepts; each connection has its own thread (at most
//! `max_connections` at once; more are closed at once), so a slow or
//! hostile client blocks nobody else, and never the simulator: the
//! snapshot is taken under the simulator's lock (a copy of its book) and
//! written after it is released.
//!
//! A connection: a Login Request within `login_timeout` (Debug packets
//! aside, anything else first, or bytes that are not SoupBinTCP, close it);
//! wrong username or password: Login Rejected `A`; a requested session
//! other than the current one: Login Rejected `S`. Then Login Accepted
//! (the current session; sequence 1, the number of the first Sequenced
//! Data packet), the snapshot as Sequenced Data (ITCH messages, then End
//! of Snapshot `G`), then a Server Heartbeat after each `heartbeat`
//! without sending, until the client logs out (`O`), closes, sends what is
//! not a Client Heartbeat, Debug or Logout, or is silent for
//! `idle_timeout`. Writes time out after `write_timeout`, and the snapshot
//! must be written within `snapshot_timeout`: a reader that does not keep
//! up is closed.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::util::stoppable::StoppableThread;
use crate::venue::nasdaq_itch::glimpse::encode_end_of_snapshot;
use crate::venue::nasdaq_itch::messages::{self, Message};
use crate::venue::nasdaq_itch::soupbin::{
    Decoder, LoginRequest, Packet, SoupError, REJECT_NOT_AUTHORIZED, REJECT_SESSION_UNAVAILABLE,
};
use crate::wire::SessionId;

/// The book at one instant (R5): every message before `next_sequence` is
/// reflected, none after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlimpseSnapshot {
    pub session: SessionId,
    /// End of Snapshot's number: the first multicast sequence the snapshot
    /// does not reflect.
    pub next_sequence: u64,
    pub messages: Vec<Message>,
}

/// Takes a snapshot (`None`: none available, the login is rejected `S`).
pub type SnapshotSource = Arc<dyn Fn() -> Option<GlimpseSnapshot> + Send + Sync>;

#[derive(Clone, Debug)]
pub struct GlimpseOptions {
    pub username: String,
    pub password: String,
    pub login_timeout: Duration,
    pub idle_timeout: Duration,
    pub heartbeat: Duration,
    pub write_timeout: Duration,
    pub snapshot_timeout: Duration,
    pub max_connections: usize,
    /// The SoupBinTCP session Login Accepted names (and a Login Request may
    /// ask for): the multicast session when `None`. A GLIMPSE server may
    /// name its own (recovery.md R5: the client does not compare them).
    pub soupbin_session: Option<SessionId>,
}

impl GlimpseOptions {
    pub fn new(username: &str, password: &str) -> GlimpseOptions {
        GlimpseOptions {
            username: username.to_string(),
            password: password.to_string(),
            login_timeout: Duration::from_secs(5),
            // R5: a client heartbeat after 1 s without sending.
            idle_timeout: Duration::from_secs(15),
            heartbeat: Duration::from_secs(1),
            write_timeout: Duration::from_secs(5),
            // R5: a client waits 30 s for `G`.
            snapshot_timeout: Duration::from_secs(30),
            max_connections: 16,
            soupbin_session: None,
        }
    }

    /// SoupBinTCP's fields: username char[6], password char[10].
    pub fn validate(&self) -> anyhow::Result<()> {
        LoginRequest::new(&self.username, &self.password, None, 1)
            .context("GLIMPSE credentials")?;
        if !(self.username.is_ascii() && self.password.is_ascii()) {
            anyhow::bail!("GLIMPSE username and password must be ASCII");
        }
        Ok(())
    }
}

/// What the server did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlimpseCounts {
    pub connections: u64,
    /// Closed at once: `max_connections` were open.
    pub refused: u64,
    pub logins_accepted: u64,
    pub logins_rejected: u64,
    pub snapshots_sent: u64,
    pub logouts: u64,
    /// Bytes that were not SoupBinTCP, or a packet out of place.
    pub garbage: u64,
    pub login_timeouts: u64,
    pub idle_timeouts: u64,
    /// Writes that failed or timed out (slow or gone readers).
    pub write_failures: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    refused: AtomicU64,
    logins_accepted: AtomicU64,
    logins_rejected: AtomicU64,
    snapshots_sent: AtomicU64,
    logouts: AtomicU64,
    garbage: AtomicU64,
    login_timeouts: AtomicU64,
    idle_timeouts: AtomicU64,
    write_failures: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

pub struct GlimpseServer {
    addr: SocketAddr,
    counters: Arc<Counters>,
    thread: StoppableThread,
}

impl GlimpseServer {
    pub fn spawn(
        addr: SocketAddr,
        source: SnapshotSource,
        opts: GlimpseOptions,
    ) -> anyhow::Result<GlimpseServer> {
        opts.validate()?;
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("binding the GLIMPSE server to {addr}"))?;
        let addr = listener.local_addr().context("GLIMPSE server address")?;
        // Polled, so that the accept loop sees the stop flag.
        listener
            .set_nonblocking(true)
            .context("GLIMPSE server socket")?;
        let counters = Arc::new(Counters::default());
        let thread = {
            let counters = counters.clone();
            StoppableThread::spawn("glimpse-accept".into(), move |stop| {
                accept_loop(listener, source, Arc::new(opts), counters, stop)
            })
            .context("starting the GLIMPSE server thread")?
        };
        tracing::info!(%addr, "GLIMPSE server listening");
        Ok(GlimpseServer {
            addr,
            counters,
            thread,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn counts(&self) -> GlimpseCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GlimpseCounts {
            connections: get(&c.connections),
            refused: get(&c.refused),
            logins_accepted: get(&c.logins_accepted),
            logins_rejected: get(&c.logins_rejected),
            snapshots_sent: get(&c.snapshots_sent),
            logouts: get(&c.logouts),
            garbage: get(&c.garbage),
            login_timeouts: get(&c.login_timeouts),
            idle_timeouts: get(&c.idle_timeouts),
            write_failures: get(&c.write_failures),
        }
    }

    /// Stops accepting and asks every connection to close (each notices
    /// within its next read timeout, at most `heartbeat`).
    pub fn stop(mut self) -> GlimpseCounts {
        self.thread.stop();
        self.counts()
    }
}

fn accept_loop(
    listener: TcpListener,
    source: SnapshotSource,
    opts: Arc<GlimpseOptions>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
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
                // EMFILE and the like: wait rather than spin.
                tracing::warn!(error = %e, "GLIMPSE accept");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        bump(&counters.connections);
        if active.load(Ordering::Relaxed) >= opts.max_connections {
            bump(&counters.refused);
            tracing::warn!(%peer, max = opts.max_connections, "GLIMPSE connection refused: too many open");
            drop(stream);
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (source, opts, counters, stop, active2) = (
            source.clone(),
            opts.clone(),
            counters.clone(),
            stop.clone(),
            active.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("glimpse-conn".into())
            .spawn(move || {
                let outcome = Connection {
                    stream,
                    decoder: Decoder::new(),
                    opts: &opts,
                    counters: &counters,
                    stop: &stop,
                    last_sent: Instant::now(),
                }
                .run(&source);
                tracing::debug!(%peer, ?outcome, "GLIMPSE connection closed");
                active2.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "GLIMPSE connection thread not started");
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Why a connection ended.
#[derive(Debug)]
enum Closed {
    Logout,
    ByPeer,
    Rejected,
    Garbage,
    LoginTimeout,
    IdleTimeout,
    WriteFailed,
    Stopped,
}

enum Read1 {
    Bytes,
    Timeout,
}

struct Connection<'a> {
    stream: TcpStream,
    decoder: Decoder,
    opts: &'a GlimpseOptions,
    counters: &'a Counters,
    stop: &'a AtomicBool,
    last_sent: Instant,
}

impl Connection<'_> {
    fn run(mut self, source: &SnapshotSource) -> Closed {
        let _ = self.stream.set_nodelay(true);
        if self
            .stream
            .set_write_timeout(Some(self.opts.write_timeout))
            .is_err()
        {
            return Closed::WriteFailed;
        }
        let login = match self.login() {
            Ok(l) => l,
            Err(c) => return c,
        };
        let opts = self.opts;
        if login.username() != opts.username.as_bytes()
            || login.password() != opts.password.as_bytes()
        {
            bump(&self.counters.logins_rejected);
            let _ = self.send(&[Packet::LoginRejected {
                reason: REJECT_NOT_AUTHORIZED,
            }]);
            return Closed::Rejected;
        }
        let snapshot = match source() {
            Some(s)
                if login
                    .requested_session()
                    .is_none_or(|r| r == opts.soupbin_session.unwrap_or(s.session)) =>
            {
                s
            }
            _ => {
                bump(&self.counters.logins_rejected);
                let _ = self.send(&[Packet::LoginRejected {
                    reason: REJECT_SESSION_UNAVAILABLE,
                }]);
                return Closed::Rejected;
            }
        };
        bump(&self.counters.logins_accepted);
        if let Err(c) = self.send_snapshot(&snapshot) {
            return c;
        }
        bump(&self.counters.snapshots_sent);
        self.after_snapshot()
    }

    /// Waits for the Login Request.
    fn login(&mut self) -> Result<LoginRequest, Closed> {
        let deadline = Instant::now() + self.opts.login_timeout;
        loop {
            loop {
                match self.decoder.next_packet() {
                    Ok(Some(Packet::LoginRequest(l))) => return Ok(l),
                    Ok(Some(Packet::Debug(_))) => continue,
                    Ok(Some(_)) => return Err(self.garbage(None)),
                    Ok(None) => break,
                    Err(e) => return Err(self.garbage(Some(e))),
                }
            }
            match self.read(deadline)? {
                Read1::Bytes => {}
                Read1::Timeout => {
                    bump(&self.counters.login_timeouts);
                    return Err(Closed::LoginTimeout);
                }
            }
        }
    }

    fn garbage(&self, e: Option<SoupError>) -> Closed {
        bump(&self.counters.garbage);
        if let Some(e) = &e {
            tracing::debug!(error = %e, "GLIMPSE client sent garbage");
        }
        Closed::Garbage
    }

    /// One read into the decoder, waiting until `deadline` at most (and
    /// never past the next stop check).
    fn read(&mut self, deadline: Instant) -> Result<Read1, Closed> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(Closed::Stopped);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Read1::Timeout);
        }
        let wait = (deadline - now).clamp(Duration::from_millis(1), Duration::from_millis(250));
        if self.stream.set_read_timeout(Some(wait)).is_err() {
            return Err(Closed::ByPeer);
        }
        let mut buf = [0u8; 1024];
        match self.stream.read(&mut buf) {
            Ok(0) => Err(Closed::ByPeer),
            Ok(n) => {
                self.decoder.push(&buf[..n]);
                Ok(Read1::Bytes)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if Instant::now() >= deadline {
                    Ok(Read1::Timeout)
                } else {
                    Ok(Read1::Bytes) // nothing yet: the caller looks again
                }
            }
            Err(_) => Err(Closed::ByPeer),
        }
    }

    fn send(&mut self, packets: &[Packet<'_>]) -> Result<(), Closed> {
        let mut out = Vec::with_capacity(64);
        for p in packets {
            p.encode(&mut out).map_err(|_| Closed::WriteFailed)?;
        }
        self.write(&out)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Closed> {
        match self.stream.write_all(bytes) {
            Ok(()) => {
                self.last_sent = Instant::now();
                Ok(())
            }
            Err(e) => {
                bump(&self.counters.write_failures);
                tracing::debug!(error = %e, "GLIMPSE write failed");
                Err(Closed::WriteFailed)
            }
        }
    }

    /// Login Accepted, every message as Sequenced Data, End of Snapshot;
    /// written in chunks of 64 KiB within `snapshot_timeout`.
    fn send_snapshot(&mut self, s: &GlimpseSnapshot) -> Result<(), Closed> {
        const CHUNK: usize = 64 * 1024;
        let deadline = Instant::now() + self.opts.snapshot_timeout;
        let mut out = Vec::with_capacity(CHUNK + 64);
        Packet::LoginAccepted {
            session: self.opts.soupbin_session.unwrap_or(s.session),
            sequence: 1,
        }
        .encode(&mut out)
        .map_err(|_| Closed::WriteFailed)?;
        let mut msg = Vec::with_capacity(64);
        let frame = |msg: &[u8], out: &mut Vec<u8>| {
            Packet::SequencedData(msg)
                .encode(out)
                .expect("an ITCH message fits a SoupBinTCP packet")
        };
        for m in &s.messages {
            msg.clear();
            messages::encode(m, &mut msg);
            frame(&msg, &mut out);
            if out.len() >= CHUNK {
                self.write_before(&out, deadline)?;
                out.clear();
            }
        }
        msg.clear();
        encode_end_of_snapshot(s.next_sequence, &mut msg);
        frame(&msg, &mut out);
        self.write_before(&out, deadline)
    }

    fn write_before(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), Closed> {
        if Instant::now() >= deadline || self.stop.load(Ordering::Relaxed) {
            bump(&self.counters.write_failures);
            return Err(Closed::WriteFailed);
        }
        self.write(bytes)
    }

    /// Heartbeats until the client logs out, goes silent or misbehaves.
    fn after_snapshot(&mut self) -> Closed {
        let mut last_heard = Instant::now();
        loop {
            loop {
                match self.decoder.next_packet() {
                    Ok(Some(Packet::LogoutRequest)) => {
                        bump(&self.counters.logouts);
                        return Closed::Logout;
                    }
                    Ok(Some(Packet::ClientHeartbeat | Packet::Debug(_))) => {
                        last_heard = Instant::now();
                    }
                    Ok(Some(_)) => return self.garbage(None),
                    Ok(None) => break,
                    Err(e) => return self.garbage(Some(e)),
                }
            }
            let idle_at = last_heard + self.opts.idle_timeout;
            let heartbeat_at = self.last_sent + self.opts.heartbeat;
            if Instant::now() >= idle_at {
                bump(&self.counters.idle_timeouts);
                return Closed::IdleTimeout;
            }
            if Instant::now() >= heartbeat_at {
                if let Err(c) = self.send(&[Packet::ServerHeartbeat]) {
                    return c;
                }
                continue;
            }
            if let Err(c) = self.read(idle_at.min(heartbeat_at)) {
                return c;
            }
        }
    }
}
