//! A Cboe Gap Request Proxy (recovery.md R4c) for the simulator: TCP, one
//! thread per connection (connections capped). It never answers with the
//! data on the connection: a Gap Request accepted is sent again, from the
//! [`PitchHistory`], on the gap multicast line (the unit's datagrams with
//! their original sequences, to every subscriber), after the Gap Response.
//!
//! A connection: the Login within `login_timeout` (the configured
//! credentials: Login Response `A`; others: `N` and the connection
//! closes). Then each Gap Request gets one Gap Response echoing its unit,
//! sequence and count, with the status R4c's table names: `A` (the
//! messages follow on the gap line), `O` (not wholly kept: too old or not
//! yet sent), `C` (count above `max_count`), `S` (more than `per_second`
//! requests in this second on the connection), `M` (more than
//! `per_minute` in this minute), `D` (more than `per_day` on the
//! connection), `U` (the connection's first `unavailable` requests), `I`
//! (a unit never produced, or one of `not_served`). The server sends a heartbeat after each `heartbeat` without
//! sending, and closes a connection silent for `idle_timeout`, or one that
//! sends what is not a heartbeat or a Gap Request.

use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::pitch_conn::{accept_loop, bump, listen, Closed, Conn, ConnCounters, ConnCounts};
use super::pitch_history::PitchHistory;
use crate::sim::live::McastSender;
use crate::util::stoppable::StoppableThread;
use crate::venue::cboe_pitch::session::{GapStatus, Login, SessionMessage};

#[derive(Clone, Debug)]
pub struct GrpOptions {
    /// The Login a client must send (sub id, username, password).
    pub login: Login,
    /// Where the messages asked for are sent again: the gap line.
    pub gap_line: SocketAddrV4,
    /// Cboe's count limit for one request (`C` above it).
    pub max_count: u16,
    /// Requests a connection may make in one second (`S` beyond).
    pub per_second: u32,
    /// Requests a connection may make in one minute (`M` beyond).
    pub per_minute: u32,
    /// Requests a connection may make in all (`D` beyond: the simulated
    /// day is the connection's life).
    pub per_day: u32,
    /// A connection's first `unavailable` requests get `U` (the unit
    /// cannot be served right now); the later ones are answered.
    pub unavailable: u32,
    /// Units this proxy does not serve: their requests get `I`, as for a
    /// unit never produced.
    pub not_served: Vec<u8>,
    pub login_timeout: Duration,
    pub idle_timeout: Duration,
    pub heartbeat: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

impl GrpOptions {
    pub fn new(login: Login, gap_line: SocketAddrV4) -> GrpOptions {
        GrpOptions {
            login,
            gap_line,
            max_count: 1_000,
            per_second: 100,
            per_minute: u32::MAX,
            per_day: u32::MAX,
            unavailable: 0,
            not_served: Vec::new(),
            login_timeout: Duration::from_secs(5),
            // R4c: the client sends a heartbeat after 1 s without sending.
            idle_timeout: Duration::from_secs(15),
            // R4c: the server sends one every second when idle.
            heartbeat: Duration::from_secs(1),
            write_timeout: Duration::from_secs(5),
            max_connections: 16,
        }
    }
}

/// What the server did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrpCounts {
    /// Connections, logins and their failures.
    pub conn: ConnCounts,
    pub requests: u64,
    pub accepted: u64,
    pub out_of_range: u64,
    pub count_too_large: u64,
    pub second_limit: u64,
    pub minute_limit: u64,
    pub day_limit: u64,
    pub unavailable: u64,
    pub invalid_unit: u64,
    /// Datagrams and messages sent again on the gap line.
    pub gap_datagrams: u64,
    pub gap_messages: u64,
    pub gap_send_errors: u64,
}

#[derive(Default)]
struct Counters {
    conn: Arc<ConnCounters>,
    requests: AtomicU64,
    accepted: AtomicU64,
    out_of_range: AtomicU64,
    count_too_large: AtomicU64,
    second_limit: AtomicU64,
    minute_limit: AtomicU64,
    day_limit: AtomicU64,
    unavailable: AtomicU64,
    invalid_unit: AtomicU64,
    gap_datagrams: AtomicU64,
    gap_messages: AtomicU64,
    gap_send_errors: AtomicU64,
}

pub struct GrpServer {
    addr: SocketAddr,
    counters: Arc<Counters>,
    thread: StoppableThread,
}

impl GrpServer {
    /// Binds `addr` and serves Gap Requests from `history`, sending the
    /// answers through `gap` to `opts.gap_line`, until stopped (or
    /// dropped).
    pub fn spawn(
        addr: SocketAddr,
        history: Arc<Mutex<PitchHistory>>,
        gap: McastSender,
        opts: GrpOptions,
    ) -> anyhow::Result<GrpServer> {
        let (listener, addr) = listen(addr, "Gap Request Proxy")?;
        let counters = Arc::new(Counters::default());
        let thread = {
            let counters = counters.clone();
            let conn_counters = counters.conn.clone();
            // One socket for every connection's answers.
            let gap = Arc::new(Mutex::new(gap));
            let opts = Arc::new(opts);
            StoppableThread::spawn("grp-accept".into(), move |stop| {
                let max = opts.max_connections;
                let serve = Arc::new(move |stream: TcpStream, stop: &AtomicBool| {
                    let closed = serve(stream, &history, &gap, &opts, &counters, stop);
                    tracing::debug!(?closed, "Gap Request Proxy connection closed");
                });
                accept_loop("grp", listener, max, conn_counters, stop, serve)
            })
            .context("starting the Gap Request Proxy thread")?
        };
        tracing::info!(%addr, "Gap Request Proxy listening");
        Ok(GrpServer {
            addr,
            counters,
            thread,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn counts(&self) -> GrpCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GrpCounts {
            conn: c.conn.counts(),
            requests: get(&c.requests),
            accepted: get(&c.accepted),
            out_of_range: get(&c.out_of_range),
            count_too_large: get(&c.count_too_large),
            second_limit: get(&c.second_limit),
            minute_limit: get(&c.minute_limit),
            day_limit: get(&c.day_limit),
            unavailable: get(&c.unavailable),
            invalid_unit: get(&c.invalid_unit),
            gap_datagrams: get(&c.gap_datagrams),
            gap_messages: get(&c.gap_messages),
            gap_send_errors: get(&c.gap_send_errors),
        }
    }

    /// Stops accepting and asks every connection to close (each notices
    /// within its next read timeout).
    pub fn stop(mut self) -> GrpCounts {
        self.thread.stop();
        self.counts()
    }
}

fn serve(
    stream: TcpStream,
    history: &Mutex<PitchHistory>,
    gap: &Mutex<McastSender>,
    opts: &GrpOptions,
    c: &Counters,
    stop: &AtomicBool,
) -> Closed {
    let mut conn = match Conn::new(stream, &c.conn, stop, opts.write_timeout) {
        Ok(conn) => conn,
        Err(closed) => return closed,
    };
    if let Err(closed) = conn.login(&opts.login, opts.login_timeout) {
        return closed;
    }
    let mut window = Instant::now();
    let mut in_window = 0u32;
    let mut minute = Instant::now();
    let mut in_minute = 0u32;
    let mut in_day = 0u32;
    let mut out = Vec::with_capacity(2048);
    let mut datagrams: Vec<Vec<u8>> = Vec::new();
    loop {
        let idle_at = conn.last_heard + opts.idle_timeout;
        let heartbeat_at = conn.last_sent + opts.heartbeat;
        let now = Instant::now();
        if now >= idle_at {
            bump(&c.conn.idle_timeouts);
            return Closed::IdleTimeout;
        }
        if now >= heartbeat_at {
            if let Err(closed) = conn.send(&[]) {
                return closed;
            }
            continue;
        }
        let msgs = match conn.next_block(idle_at.min(heartbeat_at)) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(closed) => return closed,
        };
        for m in msgs {
            let SessionMessage::GapRequest {
                unit,
                sequence,
                count,
            } = m
            else {
                return conn.garbage("not a Gap Request");
            };
            bump(&c.requests);
            let now = Instant::now();
            if now.duration_since(window) >= Duration::from_secs(1) {
                window = now;
                in_window = 0;
            }
            if now.duration_since(minute) >= Duration::from_secs(60) {
                minute = now;
                in_minute = 0;
            }
            in_window += 1;
            in_minute = in_minute.saturating_add(1);
            in_day = in_day.saturating_add(1);
            datagrams.clear();
            let status = if opts.not_served.contains(&unit) {
                GapStatus::InvalidUnit
            } else if in_day <= opts.unavailable {
                GapStatus::Unavailable
            } else if in_day > opts.per_day {
                GapStatus::DayLimit
            } else if in_minute > opts.per_minute {
                GapStatus::MinuteLimit
            } else if in_window > opts.per_second {
                GapStatus::SecondLimit
            } else {
                history.lock().expect("history lock").answer(
                    unit,
                    sequence,
                    count,
                    opts.max_count,
                    &mut out,
                    |d| datagrams.push(d.to_vec()),
                )
            };
            bump(match status {
                GapStatus::Accepted => &c.accepted,
                GapStatus::OutOfRange => &c.out_of_range,
                GapStatus::CountTooLarge => &c.count_too_large,
                GapStatus::SecondLimit => &c.second_limit,
                GapStatus::MinuteLimit => &c.minute_limit,
                GapStatus::DayLimit => &c.day_limit,
                GapStatus::Unavailable => &c.unavailable,
                _ => &c.invalid_unit,
            });
            // R4c: the response echoes the request; the data follows on
            // the gap line.
            if let Err(closed) = conn.send(&[SessionMessage::GapResponse {
                unit,
                sequence,
                count,
                status,
            }]) {
                return closed;
            }
            for d in &datagrams {
                let sent = gap.lock().expect("gap line lock").send(opts.gap_line, d);
                match sent {
                    Ok(()) => {
                        bump(&c.gap_datagrams);
                        c.gap_messages
                            .fetch_add(d.get(2).copied().unwrap_or(0) as u64, Ordering::Relaxed);
                    }
                    Err(e) => {
                        bump(&c.gap_send_errors);
                        tracing::debug!(error = %e, "gap line datagram not sent");
                    }
                }
            }
        }
    }
}
