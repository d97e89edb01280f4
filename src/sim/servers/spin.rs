//! A Cboe Spin Server (recovery.md R5c) for one unit of the simulator:
//! TCP, one thread per connection (connections capped).
//!
//! A connection: the Login within `login_timeout` (the configured
//! credentials: Login Response `A`; others: `N` and the connection
//! closes). Then, every `image_interval`, a Spin Image Available for the
//! unit's last produced sequence `S`: the server takes the unit's book
//! (its [`SpinSource`]) at that moment and keeps it for the connection. A
//! Spin Request for that `S` gets Spin Response `A` with the number of
//! Add Orders, then the spin (Time, a Trading Status per symbol, an Add
//! Order per live order, in blocks of at most 1,400 bytes) and Spin
//! Finished `S`. A request for any other sequence gets `O`: beyond what
//! was offered, or (a simplification of the simulator, which keeps no
//! older books) an older image. The server sends a heartbeat when it has
//! nothing to offer for a second, and closes a connection silent for
//! `idle_timeout`, or one that sends what is not a heartbeat or a Spin
//! Request. Hdr Unit and Hdr Sequence are 0 on every block, the spin's
//! included.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::pitch_conn::{accept_loop, bump, listen, Closed, Conn, ConnCounters, ConnCounts};
use crate::capture::frame::MAX_DATAGRAM;
use crate::util::stoppable::StoppableThread;
use crate::venue::cboe_pitch::frame::HEADER_LEN;
use crate::venue::cboe_pitch::messages::{self, Message};
use crate::venue::cboe_pitch::session::{Login, SessionMessage, SpinStatus};

/// A unit's book as of `sequence` (every message up to it reflected, none
/// after): the spin's messages, Add Orders and others, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpinImage {
    pub sequence: u32,
    pub messages: Vec<Message>,
}

impl SpinImage {
    /// The Add Orders among the messages: the Spin Response's order count.
    pub fn order_count(&self) -> u32 {
        self.messages
            .iter()
            .filter(|m| matches!(m, Message::AddOrder { .. }))
            .count() as u32
    }
}

/// Takes the unit's image now (`None`: nothing produced yet, nothing is
/// offered).
pub type SpinSource = Arc<dyn Fn() -> Option<SpinImage> + Send + Sync>;

#[derive(Clone, Debug)]
pub struct SpinOptions {
    /// The Login a client must send.
    pub login: Login,
    /// R5c: Spin Image Available about once a second.
    pub image_interval: Duration,
    pub login_timeout: Duration,
    /// R5c: the client sends a heartbeat after 1 s without sending.
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
    /// The whole spin must be written within this long.
    pub spin_timeout: Duration,
    pub max_connections: usize,
}

impl SpinOptions {
    pub fn new(login: Login) -> SpinOptions {
        SpinOptions {
            login,
            image_interval: Duration::from_secs(1),
            login_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(15),
            write_timeout: Duration::from_secs(5),
            // R5c: a client waits 30 s for Spin Finished.
            spin_timeout: Duration::from_secs(30),
            max_connections: 16,
        }
    }
}

/// What the server did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinCounts {
    /// Connections, logins and their failures.
    pub conn: ConnCounts,
    pub images_offered: u64,
    pub requests: u64,
    pub spins_sent: u64,
    /// Add Orders in the spins sent.
    pub orders_sent: u64,
    pub out_of_range: u64,
}

#[derive(Default)]
struct Counters {
    conn: Arc<ConnCounters>,
    images_offered: AtomicU64,
    requests: AtomicU64,
    spins_sent: AtomicU64,
    orders_sent: AtomicU64,
    out_of_range: AtomicU64,
}

pub struct SpinServer {
    addr: SocketAddr,
    counters: Arc<Counters>,
    thread: StoppableThread,
}

impl SpinServer {
    /// Binds `addr` and serves spins of one unit from `source` until
    /// stopped (or dropped).
    pub fn spawn(
        addr: SocketAddr,
        source: SpinSource,
        opts: SpinOptions,
    ) -> anyhow::Result<SpinServer> {
        let (listener, addr) = listen(addr, "Spin Server")?;
        let counters = Arc::new(Counters::default());
        let thread = {
            let counters = counters.clone();
            let conn_counters = counters.conn.clone();
            let opts = Arc::new(opts);
            StoppableThread::spawn("spin-accept".into(), move |stop| {
                let max = opts.max_connections;
                let serve = Arc::new(move |stream: TcpStream, stop: &AtomicBool| {
                    let closed = serve(stream, &source, &opts, &counters, stop);
                    tracing::debug!(?closed, "Spin Server connection closed");
                });
                accept_loop("spin", listener, max, conn_counters, stop, serve)
            })
            .context("starting the Spin Server thread")?
        };
        tracing::info!(%addr, "Spin Server listening");
        Ok(SpinServer {
            addr,
            counters,
            thread,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn counts(&self) -> SpinCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SpinCounts {
            conn: c.conn.counts(),
            images_offered: get(&c.images_offered),
            requests: get(&c.requests),
            spins_sent: get(&c.spins_sent),
            orders_sent: get(&c.orders_sent),
            out_of_range: get(&c.out_of_range),
        }
    }

    /// Stops accepting and asks every connection to close.
    pub fn stop(mut self) -> SpinCounts {
        self.thread.stop();
        self.counts()
    }
}

fn serve(
    stream: TcpStream,
    source: &SpinSource,
    opts: &SpinOptions,
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
    // The image last offered on this connection.
    let mut offered: Option<SpinImage> = None;
    let mut next_offer = Instant::now();
    loop {
        let idle_at = conn.last_heard + opts.idle_timeout;
        let now = Instant::now();
        if now >= idle_at {
            bump(&c.conn.idle_timeouts);
            return Closed::IdleTimeout;
        }
        if now >= next_offer {
            next_offer = now + opts.image_interval;
            let sent = match source() {
                Some(image) => {
                    let s = image.sequence;
                    offered = Some(image);
                    bump(&c.images_offered);
                    conn.send(&[SessionMessage::SpinImageAvailable { sequence: s }])
                }
                // Nothing to offer yet: a heartbeat keeps the client's
                // silence limit away.
                None => conn.send(&[]),
            };
            if let Err(closed) = sent {
                return closed;
            }
            continue;
        }
        let msgs = match conn.next_block(idle_at.min(next_offer)) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(closed) => return closed,
        };
        for m in msgs {
            let SessionMessage::SpinRequest { sequence } = m else {
                return conn.garbage("not a Spin Request");
            };
            bump(&c.requests);
            match offered.as_ref().filter(|i| i.sequence == sequence) {
                Some(image) => {
                    if let Err(closed) = send_spin(&mut conn, image, opts) {
                        return closed;
                    }
                    bump(&c.spins_sent);
                    c.orders_sent
                        .fetch_add(image.order_count() as u64, Ordering::Relaxed);
                }
                None => {
                    bump(&c.out_of_range);
                    let refused = conn.send(&[SessionMessage::SpinResponse {
                        sequence,
                        order_count: 0,
                        status: SpinStatus::OutOfRange,
                    }]);
                    if let Err(closed) = refused {
                        return closed;
                    }
                }
            }
        }
    }
}

/// Spin Response `A`, the spin in blocks of at most 1,400 bytes, Spin
/// Finished in the last one; written within `spin_timeout`.
fn send_spin(conn: &mut Conn<'_>, image: &SpinImage, opts: &SpinOptions) -> Result<(), Closed> {
    let deadline = Instant::now() + opts.spin_timeout;
    conn.send(&[SessionMessage::SpinResponse {
        sequence: image.sequence,
        order_count: image.order_count(),
        status: SpinStatus::Accepted,
    }])?;
    let mut block: Vec<SessionMessage> = Vec::with_capacity(64);
    let mut size = HEADER_LEN;
    let mut scratch = Vec::with_capacity(64);
    for m in &image.messages {
        scratch.clear();
        messages::encode(m, &mut scratch).map_err(|_| Closed::WriteFailed)?;
        if size + scratch.len() > MAX_DATAGRAM || block.len() == u8::MAX as usize {
            if Instant::now() >= deadline {
                bump(&conn.counters.write_failures);
                return Err(Closed::WriteFailed);
            }
            conn.send(&block)?;
            block.clear();
            size = HEADER_LEN;
        }
        size += scratch.len();
        block.push(SessionMessage::Pitch(*m));
    }
    if size + 6 > MAX_DATAGRAM || block.len() == u8::MAX as usize {
        conn.send(&block)?;
        block.clear();
    }
    block.push(SessionMessage::SpinFinished {
        sequence: image.sequence,
    });
    conn.send(&block)
}
