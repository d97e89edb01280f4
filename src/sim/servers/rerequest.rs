//! A MoldUDP64 re-request server (R4) on one UDP socket, in its own
//! thread: each request (`venue::rerequest::Request`, 20 bytes) of the
//! current session is answered from the [`History`] with one downstream
//! packet of at most 1,400 bytes, sent to the request's source. Malformed
//! requests, requests of another session, older than the history or not
//! yet sent get no answer and are counted. Each source may ask `rate`
//! times a second (token bucket, `rate` deep), and all sources together
//! `total_rate` times: a flood costs the simulator at most that many
//! answers, whatever it sends.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::history::{History, Unanswered};
use crate::util::stoppable::StoppableThread;
use crate::venue::rerequest::Request;
use crate::wire::PacketBuilder;

#[derive(Clone, Copy, Debug)]
pub struct RerequestOptions {
    /// Requests a second one source may make (and how many at once).
    pub rate: u32,
    /// Requests a second answered from all sources together.
    pub total_rate: u32,
    /// Sources tracked at once for the per-source limit; when full, a new
    /// source waits until an idle one is forgotten.
    pub max_sources: usize,
}

impl Default for RerequestOptions {
    fn default() -> RerequestOptions {
        RerequestOptions {
            // R4: a client sends at most 100 requests a second.
            rate: 100,
            total_rate: 5_000,
            max_sources: 4_096,
        }
    }
}

/// What the server did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RerequestCounts {
    pub datagrams: u64,
    pub answered: u64,
    /// Messages sent in answers.
    pub messages: u64,
    pub malformed: u64,
    pub other_session: u64,
    pub too_old: u64,
    pub not_yet_sent: u64,
    pub rate_limited: u64,
    pub send_errors: u64,
}

#[derive(Default)]
struct Counters {
    datagrams: AtomicU64,
    answered: AtomicU64,
    messages: AtomicU64,
    malformed: AtomicU64,
    other_session: AtomicU64,
    too_old: AtomicU64,
    not_yet_sent: AtomicU64,
    rate_limited: AtomicU64,
    send_errors: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A token bucket: `rate` tokens a second, at most `rate` held.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: u32, now: Instant) -> Bucket {
        Bucket {
            tokens: rate as f64,
            at: now,
        }
    }

    fn take(&mut self, rate: u32, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * rate as f64).min(rate as f64);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub struct RerequestServer {
    addr: SocketAddr,
    counters: Arc<Counters>,
    thread: StoppableThread,
}

impl RerequestServer {
    /// Binds `addr` and serves requests from `history` until stopped (or
    /// dropped).
    pub fn spawn(
        addr: SocketAddr,
        history: Arc<Mutex<History>>,
        opts: RerequestOptions,
    ) -> anyhow::Result<RerequestServer> {
        let socket = UdpSocket::bind(addr)
            .with_context(|| format!("binding the re-request server to {addr}"))?;
        let addr = socket.local_addr().context("re-request server address")?;
        // Wakes up to see the stop flag.
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .context("re-request server socket")?;
        let counters = Arc::new(Counters::default());
        let thread = {
            let counters = counters.clone();
            StoppableThread::spawn("rerequest-server".into(), move |stop| {
                serve(socket, history, opts, &counters, &stop)
            })
            .context("starting the re-request server thread")?
        };
        tracing::info!(%addr, "re-request server listening");
        Ok(RerequestServer {
            addr,
            counters,
            thread,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn counts(&self) -> RerequestCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RerequestCounts {
            datagrams: get(&c.datagrams),
            answered: get(&c.answered),
            messages: get(&c.messages),
            malformed: get(&c.malformed),
            other_session: get(&c.other_session),
            too_old: get(&c.too_old),
            not_yet_sent: get(&c.not_yet_sent),
            rate_limited: get(&c.rate_limited),
            send_errors: get(&c.send_errors),
        }
    }

    /// Stops the server thread and waits for it.
    pub fn stop(mut self) -> RerequestCounts {
        self.thread.stop();
        self.counts()
    }
}

fn serve(
    socket: UdpSocket,
    history: Arc<Mutex<History>>,
    opts: RerequestOptions,
    c: &Counters,
    stop: &AtomicBool,
) {
    let rate = opts.rate.max(1);
    let total_rate = opts.total_rate.max(1);
    let mut sources: HashMap<SocketAddr, Bucket> = HashMap::new();
    let mut total = Bucket::full(total_rate, Instant::now());
    let mut buf = [0u8; 2048];
    let mut answer = PacketBuilder::new();
    while !stop.load(Ordering::Relaxed) {
        let (n, src) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                // ICMP errors from earlier sends surface here on some
                // systems: not fatal.
                tracing::debug!(error = %e, "re-request server receive");
                continue;
            }
        };
        bump(&c.datagrams);
        let now = Instant::now();
        if !sources.contains_key(&src) && sources.len() >= opts.max_sources {
            // Forget the sources whose buckets have refilled (idle ones).
            sources.retain(|_, b| now.saturating_duration_since(b.at) < Duration::from_secs(1));
        }
        let full = sources.len() >= opts.max_sources;
        let allowed = match sources.get_mut(&src) {
            Some(b) => b.take(rate, now),
            None if !full => {
                let mut b = Bucket::full(rate, now);
                let ok = b.take(rate, now);
                sources.insert(src, b);
                ok
            }
            None => false,
        };
        if !allowed || !total.take(total_rate, now) {
            bump(&c.rate_limited);
            continue;
        }
        let Some(req) = Request::decode(&buf[..n]) else {
            bump(&c.malformed);
            continue;
        };
        let result = history
            .lock()
            .expect("history lock")
            .answer(&req, &mut answer);
        match result {
            Ok(count) => {
                if let Err(e) = socket.send_to(answer.bytes(), src) {
                    tracing::debug!(error = %e, %src, "re-request answer not sent");
                    bump(&c.send_errors);
                    continue;
                }
                bump(&c.answered);
                c.messages.fetch_add(count as u64, Ordering::Relaxed);
            }
            Err(Unanswered::OtherSession) => bump(&c.other_session),
            Err(Unanswered::TooOld) => bump(&c.too_old),
            Err(Unanswered::NotYetSent) => bump(&c.not_yet_sent),
        }
    }
}
