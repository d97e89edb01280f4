//! The Gap Request Proxy client of one `cboe-pitch` feed (recovery.md
//! R4c), I/O shell: a thread that owns the TCP connection and its machine
//! (`venue::cboe_pitch::grp_conn::GrpConnection`), keeps the connection
//! open and logged in, writes the Gap Requests the feed hands it and hands
//! back the Gap Responses. The feed thread never blocks on TCP: requests
//! and events go through channels. The rules (login, heartbeats, silence,
//! what closes, the reconnection pace) are the machine's; this file
//! connects, moves bytes and reads the clock.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};

use crate::util::stoppable::StoppableThread;
use crate::venue::cboe_pitch::grp::GapRequest;
use crate::venue::cboe_pitch::grp_conn::{
    CloseReason, GrpConnection, GrpCounts, GrpEvent, PACE_BASE_NS,
};
use crate::venue::cboe_pitch::session::{GapStatus, Login, LoginStatus};

/// Requests waiting for the thread, and events waiting for the feed: the
/// feed asks at most 100 a second (R4c), so these bound only a stalled
/// side.
const QUEUE: usize = 4096;

/// Where and how to log in.
#[derive(Clone, Debug)]
pub struct GrpOptions {
    /// `grp.address`.
    pub address: SocketAddr,
    /// `grp`'s credentials.
    pub login: Login,
    /// The reconnection pace's first wait (R4c: 1 s, doubling up to 60 s).
    /// Only tests shorten it: a venue cuts off a login that reconnects in
    /// a loop.
    pub pace_base: Duration,
    /// Longest wait for a TCP connect.
    pub connect_timeout: Duration,
    /// Longest wait in one read: how late a request may leave, and how
    /// often the clock's rules are checked.
    pub poll: Duration,
}

impl GrpOptions {
    pub fn new(address: SocketAddr, login: Login) -> GrpOptions {
        GrpOptions {
            address,
            login,
            pace_base: Duration::from_nanos(PACE_BASE_NS as u64),
            connect_timeout: Duration::from_secs(1),
            poll: Duration::from_millis(5),
        }
    }
}

/// Why the connection is not logged in any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownReason {
    /// A Login Response other than `A`.
    Refused(LoginStatus),
    /// The connection ended (R4c's reasons, or the socket).
    Closed(CloseReason),
}

/// What the client reports to the feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpClientEvent {
    /// Logged in: requests may be sent.
    LoggedIn,
    /// A connection ended without or after logging in (R4c: while not
    /// logged in, any outstanding request is void). A failed TCP connect
    /// reports nothing: the feed knows the client is down already.
    Down(DownReason),
    /// A Gap Response, as the server sent it.
    Response {
        unit: u8,
        sequence: u32,
        count: u16,
        status: GapStatus,
    },
}

/// The connection's counters, and what the shell dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrpClientCounts {
    pub conn: GrpCounts,
    /// Requests not sent: not logged in, or the queue full.
    pub requests_void: u64,
    /// Events the feed did not take in time (the queue full).
    pub events_dropped: u64,
}

#[derive(Default)]
struct Shared {
    conn: Mutex<GrpCounts>,
    requests_void: AtomicU64,
    events_dropped: AtomicU64,
}

pub struct GrpClient {
    requests: Sender<GapRequest>,
    events: Receiver<GrpClientEvent>,
    shared: Arc<Shared>,
    /// Stopped and joined when the client is dropped.
    _thread: StoppableThread,
}

impl GrpClient {
    /// Starts thread `grp-<feed>`, which connects at once and keeps the
    /// connection open until the client is dropped.
    pub fn spawn(feed: &str, opts: GrpOptions) -> std::io::Result<GrpClient> {
        let (req_tx, req_rx) = crossbeam_channel::bounded::<GapRequest>(QUEUE);
        let (ev_tx, ev_rx) = crossbeam_channel::bounded::<GrpClientEvent>(QUEUE);
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            let feed = feed.to_string();
            StoppableThread::spawn(format!("grp-{feed}"), move |stop| {
                Shell::new(&feed, &opts, req_rx, ev_tx, &shared).run(&stop);
            })?
        };
        Ok(GrpClient {
            requests: req_tx,
            events: ev_rx,
            shared,
            _thread: thread,
        })
    }

    /// Hands `request` to the thread (never blocks). It is void, and
    /// counted, if the connection is not logged in when the thread takes
    /// it; `false` if the queue is full.
    pub fn send(&self, request: GapRequest) -> bool {
        let sent = self.requests.try_send(request).is_ok();
        if !sent {
            self.shared.requests_void.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// The next event, if any.
    pub fn try_event(&self) -> Option<GrpClientEvent> {
        self.events.try_recv().ok()
    }

    pub fn counts(&self) -> GrpClientCounts {
        GrpClientCounts {
            conn: *self.shared.conn.lock().expect("counts lock"),
            requests_void: self.shared.requests_void.load(Ordering::Relaxed),
            events_dropped: self.shared.events_dropped.load(Ordering::Relaxed),
        }
    }
}

/// A monotonic clock in Unix ns: the machine's timers must not jump with
/// the wall clock.
struct Clock {
    unix_at_start: i64,
    start: Instant,
}

impl Clock {
    fn new() -> Clock {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64);
        Clock {
            unix_at_start: unix,
            start: Instant::now(),
        }
    }

    fn now(&self) -> i64 {
        let e = self.start.elapsed().as_nanos().min(i64::MAX as u128) as i64;
        self.unix_at_start.saturating_add(e)
    }
}

struct Shell<'a> {
    feed: &'a str,
    opts: &'a GrpOptions,
    requests: Receiver<GapRequest>,
    events: Sender<GrpClientEvent>,
    shared: &'a Shared,
    conn: GrpConnection,
    tcp: Option<TcpStream>,
    clock: Clock,
    /// Failed connections since the last login (`None`: not failing), so
    /// that a connection that keeps failing is logged once.
    failing: Option<u64>,
    ever_logged_in: bool,
}

impl<'a> Shell<'a> {
    fn new(
        feed: &'a str,
        opts: &'a GrpOptions,
        requests: Receiver<GapRequest>,
        events: Sender<GrpClientEvent>,
        shared: &'a Shared,
    ) -> Shell<'a> {
        let base = opts.pace_base.as_nanos().min(i64::MAX as u128) as i64;
        Shell {
            feed,
            opts,
            requests,
            events,
            shared,
            conn: GrpConnection::with_pace_base(opts.login, base),
            tcp: None,
            clock: Clock::new(),
            failing: None,
            ever_logged_in: false,
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        let mut out = Vec::with_capacity(256);
        let mut evs = Vec::with_capacity(16);
        let mut buf = vec![0u8; 16 * 1024];
        while !stop.load(Ordering::Relaxed) {
            out.clear();
            evs.clear();
            if self.tcp.is_none() {
                self.while_down(&mut out);
            } else {
                self.while_up(&mut out, &mut evs, &mut buf);
            }
            // The counts first: a feed that takes an event then reads the
            // counts sees them include it.
            *self.shared.conn.lock().expect("counts lock") = self.conn.counts();
            for &e in evs.iter() {
                self.on_event(e);
            }
        }
        if let Some(tcp) = self.tcp.take() {
            let _ = tcp.shutdown(Shutdown::Both);
        }
    }

    /// Requests are void; connect when the pace allows.
    fn while_down(&mut self, out: &mut Vec<u8>) {
        self.void_requests();
        if !self.conn.poll_connect(self.clock.now()) {
            std::thread::sleep(self.opts.poll);
            return;
        }
        let tcp = match super::connect::connect(&self.opts.address, self.opts.connect_timeout) {
            Ok(tcp) => tcp,
            Err(e) => {
                self.conn.connect_failed(self.clock.now());
                self.failed(&format!("connecting: {e}"));
                return;
            }
        };
        let _ = tcp.set_nodelay(true);
        let ready = tcp
            .set_read_timeout(Some(self.opts.poll))
            .and_then(|()| tcp.set_write_timeout(Some(self.opts.connect_timeout)));
        self.conn.connected(self.clock.now(), out);
        let sent = ready.and_then(|()| (&tcp).write_all(out));
        match sent {
            Ok(()) => self.tcp = Some(tcp),
            Err(e) => {
                self.conn.closed(self.clock.now());
                self.failed(&format!("sending the Login: {e}"));
            }
        }
    }

    /// One turn of a connected socket: the clock's rules, the requests,
    /// one read; what the machine reports is left in `evs`.
    fn while_up(&mut self, out: &mut Vec<u8>, evs: &mut Vec<GrpEvent>, buf: &mut [u8]) {
        let now = self.clock.now();
        if let Some(e) = self.conn.poll(now, out) {
            evs.push(e);
        }
        while let Ok(r) = self.requests.try_recv() {
            if !self.conn.send_request(now, &r, out) {
                self.void(&r);
            }
        }
        let tcp = self.tcp.as_mut().expect("connected");
        if evs.is_empty() && !out.is_empty() {
            if let Err(e) = tcp.write_all(out) {
                tracing::debug!(feed = self.feed, error = %e, "GRP write failed");
                evs.extend(self.conn.closed(self.clock.now()));
            }
        }
        if evs.is_empty() {
            match tcp.read(buf) {
                Ok(0) => evs.extend(self.conn.closed(self.clock.now())),
                Ok(n) => self.conn.on_bytes(self.clock.now(), &buf[..n], evs),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    tracing::debug!(feed = self.feed, error = %e, "GRP read failed");
                    evs.extend(self.conn.closed(self.clock.now()));
                }
            }
        }
    }

    fn on_event(&mut self, e: GrpEvent) {
        let up = match e {
            GrpEvent::LoggedIn => {
                match self.failing.take() {
                    Some(failures) => tracing::info!(
                        feed = self.feed,
                        server = %self.opts.address,
                        failures,
                        "Gap Request Proxy logged in again"
                    ),
                    None if !self.ever_logged_in => tracing::info!(
                        feed = self.feed,
                        server = %self.opts.address,
                        "Gap Request Proxy logged in"
                    ),
                    None => {}
                }
                self.ever_logged_in = true;
                GrpClientEvent::LoggedIn
            }
            GrpEvent::Response {
                unit,
                sequence,
                count,
                status,
            } => GrpClientEvent::Response {
                unit,
                sequence,
                count,
                status,
            },
            GrpEvent::Refused(status) => {
                self.drop_socket();
                self.failed(&format!(
                    "Login Response {:?} ({status:?})",
                    status.byte() as char
                ));
                GrpClientEvent::Down(DownReason::Refused(status))
            }
            GrpEvent::Closed(why) => {
                self.drop_socket();
                self.failed(&format!("connection closed: {why:?}"));
                GrpClientEvent::Down(DownReason::Closed(why))
            }
        };
        self.emit(up);
    }

    fn emit(&self, e: GrpClientEvent) {
        if self.events.try_send(e).is_err() {
            self.shared.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn drop_socket(&mut self) {
        if let Some(tcp) = self.tcp.take() {
            let _ = tcp.shutdown(Shutdown::Both);
        }
    }

    /// A failed connection: logged when the failures begin, then quietly
    /// until the next login.
    fn failed(&mut self, what: &str) {
        match &mut self.failing {
            Some(n) => {
                *n += 1;
                tracing::debug!(feed = self.feed, server = %self.opts.address, what, "Gap Request Proxy connection failed again");
            }
            None => {
                self.failing = Some(1);
                tracing::warn!(
                    feed = self.feed,
                    server = %self.opts.address,
                    what,
                    "Gap Request Proxy connection failed; reconnecting at R4c's pace (logged again on login)"
                );
            }
        }
    }

    fn void_requests(&mut self) {
        while let Ok(r) = self.requests.try_recv() {
            self.void(&r);
        }
    }

    fn void(&self, r: &GapRequest) {
        self.shared.requests_void.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(feed = self.feed, ?r, "Gap Request void: not logged in");
    }
}
