//! Gap recovery (spec/recovery.md) measured against what a user would run
//! without it. Four modes, all by default, or the ones named as arguments
//! (`cargo bench --bench recovery -- skew_loss glimpse_apply`) or in
//! `RECOVERY_BENCH` (comma separated):
//!
//! - `hold_overhead`: the cost of the hold (R1) when nothing is missing:
//!   the same valid datagrams through `Feed::on_datagram` with
//!   `gap_hold_us = 0` (C3 as written, nothing held) and `= 1000`, runs
//!   interleaved, on the tickgate protocol (10,000 symbols, 20 quotes a
//!   packet) and on nasdaq-itch (the day generator, books past 1,000,000
//!   live orders). Target: within 2%.
//! - `skew_loss`: messages counted lost (`channel_messages_lost`) when
//!   line B lags line A by 0 to 2 ms, the provider sending bursts, each
//!   line dropping 1% of packets independently: hold off, 1000 us and
//!   2500 us, against the truth (packets lost on both lines). Pure: no
//!   sockets, `now` = the simulated arrival, exact and repeatable.
//! - `rerequest_rtt`: on loopback, a hole opened by skipping one packet,
//!   closed by the answer of a `RerequestServer` (R4) to the request the
//!   core queues; the time from the held datagram's arrival to the hole's
//!   close, p50/p99/max, beside a bare UDP echo round trip (the socket's
//!   floor) interleaved in the same run.
//! - `glimpse_apply`: a GLIMPSE snapshot (R5) of over 1,000,000 live orders
//!   over 8,000 symbols applied by `Feed::on_snapshot` on a feed that
//!   joined late, against the same messages as ordinary multicast packets
//!   through `on_datagram` (the live path); then the held buffer's peak
//!   with 100,000 datagrams held while the snapshot runs. Target: the whole
//!   snapshot in under one second.
//!
//! A bench binary, not criterion: applying a datagram changes the feed, so
//! each one is applied exactly once, in order.

#[path = "common/env.rs"]
mod env;
#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use env::env_usize;
use thread_cpu::thread_cpu_now;

use std::hint::black_box;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind, VenueSettings};
use tickgate::net::rerequest::{Received, RerequestSocket};
use tickgate::sim::seeded::SplitMix64;
use tickgate::sim::servers::{History, RerequestOptions, RerequestServer};
use tickgate::sim::venue_sim::{ItchFlow, VenueFlow};
use tickgate::venue::nasdaq_itch::messages::{self, Header, Message};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

const MODES: [&str; 4] = [
    "hold_overhead",
    "skew_loss",
    "rerequest_rtt",
    "glimpse_apply",
];

fn main() {
    let mut chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if let Ok(v) = std::env::var("RECOVERY_BENCH") {
        chosen.extend(v.split(',').filter(|s| !s.is_empty()).map(String::from));
    }
    if chosen.is_empty() {
        chosen = MODES.iter().map(|s| s.to_string()).collect();
    }
    for mode in &chosen {
        match mode.as_str() {
            "hold_overhead" => hold_overhead(),
            "skew_loss" => skew_loss(),
            "rerequest_rtt" => rerequest_rtt(),
            "glimpse_apply" => glimpse_apply(),
            other => panic!("unknown mode {other:?}; modes: {}", MODES.join(", ")),
        }
    }
}

// ------------------------------------------------------------ helpers

const T0: i64 = 1_784_122_200_000_000_000;

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The value at quantile `q` of sorted `v`.
fn quantile(v: &[i64], q: f64) -> i64 {
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}

fn wall_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i64
}

/// The tickgate protocol's provider: packets of `per_packet` two-sided
/// quotes over `symbols` symbols picked pseudo-randomly, per-symbol and
/// channel sequences in order.
struct TickgateStream {
    syms: Vec<Symbol>,
    seqs: Vec<u64>,
    session: SessionId,
    chan: u64,
    x: u64,
    per_packet: usize,
    builder: PacketBuilder,
}

impl TickgateStream {
    fn new(symbols: usize, per_packet: usize) -> TickgateStream {
        TickgateStream {
            syms: (0..symbols)
                .map(|i| Symbol::parse(&format!("S{i:05}")).unwrap())
                .collect(),
            seqs: vec![0; symbols],
            session: SessionId::parse("20261201A1").unwrap(),
            chan: 1,
            x: 0x9E37_79B9,
            per_packet,
            builder: PacketBuilder::new(),
        }
    }

    /// The next packet, sent at `t`, written over `out`.
    fn next_into(&mut self, t: i64, out: &mut Vec<u8>) {
        let b = &mut self.builder;
        b.start(self.session, self.chan);
        for _ in 0..self.per_packet {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            let s = (self.x % self.syms.len() as u64) as usize;
            self.seqs[s] += 1;
            let px = 1_085_120_000 + (self.x % 1000) as i64 * 10_000;
            b.quote(&Quote::new(
                self.syms[s],
                self.seqs[s],
                (t - 300_000) as u64,
                Some(Side { px, qty: 1_000_000 }),
                Some(Side {
                    px: px + 30_000,
                    qty: 2_000_000,
                }),
            ));
        }
        self.chan += self.per_packet as u64;
        out.clear();
        out.extend_from_slice(b.bytes());
    }
}

/// The nasdaq-itch day generator (as benches/itch_day.rs): 8 messages a
/// MoldUDP64 packet, 250 ns apart.
struct ItchGen {
    flow: ItchFlow,
    m: SplitMix64,
    seq: u64,
    t: i64,
}

impl ItchGen {
    fn new(symbols: usize, orders: usize) -> ItchGen {
        let mut flow = ItchFlow::new(symbols, orders, T0, 42);
        flow.start_session(0, T0);
        ItchGen {
            flow,
            m: SplitMix64::new(42),
            seq: 1,
            t: T0,
        }
    }

    /// The next `n` packets (each with its arrival time) over `out`.
    fn packets_into(&mut self, n: usize, out: &mut Vec<(Vec<u8>, i64)>) {
        out.resize_with(n, || (Vec::with_capacity(8 * 40 + 20), 0));
        for (buf, now) in out.iter_mut() {
            self.t += 250;
            buf.clear();
            let c = self.flow.data_packet(&mut self.m, self.seq, self.t, 8, buf);
            self.seq += c as u64;
            *now = self.t + 5_000;
        }
    }
}

// ------------------------------------------------------- hold_overhead

/// Applies `packets` to `feed` on line 0; thread-CPU ns per datagram.
fn apply_timed(feed: &mut Feed, packets: &[(Vec<u8>, i64)]) -> f64 {
    let c0 = thread_cpu_now();
    for (p, now) in packets {
        black_box(feed.on_datagram(0, black_box(p), *now));
    }
    (thread_cpu_now() - c0).as_nanos() as f64 / packets.len() as f64
}

/// Rounds of fresh packets, each applied to the feed without the hold and
/// to the one with it, in alternating order (so that neither is always
/// the one that reads the packets from memory first).
fn overhead_rounds(
    label: &str,
    off: &mut Feed,
    on: &mut Feed,
    rounds: usize,
    mut next_round: impl FnMut(&mut Vec<(Vec<u8>, i64)>),
    messages_per_packet: f64,
) {
    let mut buf = Vec::new();
    let (mut t_off, mut t_on, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        next_round(&mut buf);
        let (a, b) = if r % 2 == 0 {
            let a = apply_timed(off, &buf);
            (a, apply_timed(on, &buf))
        } else {
            let b = apply_timed(on, &buf);
            (apply_timed(off, &buf), b)
        };
        t_off.push(a);
        t_on.push(b);
        ratio.push(b / a);
    }
    for f in [&*off, &*on] {
        let c = f.counters();
        assert_eq!(
            (c.invalid_packets, c.channel_gaps, c.recovery.holes_opened),
            (0, 0, 0),
            "{label}: a clean stream"
        );
    }
    let (m_off, m_on, m_ratio) = (median(&mut t_off), median(&mut t_on), median(&mut ratio));
    ratio.sort_by(|a, b| a.total_cmp(b));
    println!(
        "hold_overhead {label}: {rounds} rounds of {} datagrams; thread CPU median ns/datagram: hold off {m_off:.1} ({:.2} ns/msg), second feed (hold 1000 us unless control) {m_on:.1} ({:.2} ns/msg); on/off median of per-round ratios {m_ratio:.4} (quartiles {:.4}-{:.4}), {:+.2}%",
        buf.len(),
        m_off / messages_per_packet,
        m_on / messages_per_packet,
        ratio[rounds / 4],
        ratio[rounds * 3 / 4],
        (m_ratio - 1.0) * 100.0
    );
}

fn hold_overhead() {
    let rounds = env_usize("RECOVERY_ROUNDS", 1001);
    // RECOVERY_CONTROL=1: both feeds without the hold, to see the
    // measurement's own bias between two identical feeds (an A/A run).
    let on_us = if env_usize("RECOVERY_CONTROL", 0) == 1 {
        println!("hold_overhead: control run, both feeds with gap_hold_us = 0");
        0
    } else {
        1000
    };
    // The tickgate protocol, full feed.
    {
        const SYMBOLS: usize = 10_000;
        const PER_PACKET: usize = 20;
        const PACKETS: usize = 4_000;
        let settings = |hold_us| {
            let mut s = FeedSettings::for_venue(VenueKind::Tickgate);
            s.recovery.gap_hold_us = hold_us;
            s
        };
        let (mut off, mut on) = (Feed::new(settings(0), 1), Feed::new(settings(on_us), 1));
        assert!(!off.settings().recovery.holds());
        let mut stream = TickgateStream::new(SYMBOLS, PER_PACKET);
        let mut t = T0;
        let mut next_round = |buf: &mut Vec<(Vec<u8>, i64)>| {
            buf.resize_with(PACKETS, || (Vec::new(), 0));
            for (p, now) in buf.iter_mut() {
                t += 1_000;
                stream.next_into(t, p);
                *now = t;
            }
        };
        // Every symbol seen once before timing (its first message adds it).
        for _ in 0..3 {
            let mut buf = Vec::new();
            next_round(&mut buf);
            apply_timed(&mut off, &buf);
            apply_timed(&mut on, &buf);
        }
        overhead_rounds(
            "tickgate protocol (10,000 symbols, 20 quotes a packet)",
            &mut off,
            &mut on,
            rounds,
            next_round,
            PER_PACKET as f64,
        );
    }
    // nasdaq-itch, books past 1,000,000 live orders.
    {
        let orders = env_usize("RECOVERY_ITCH_ORDERS", 1_100_000);
        let settings = |hold_us| {
            let mut s = FeedSettings {
                venue: VenueSettings {
                    kind: VenueKind::NasdaqItch,
                    max_orders: 4_000_000,
                    ..VenueSettings::default()
                },
                ..FeedSettings::for_venue(VenueKind::NasdaqItch)
            };
            s.recovery.gap_hold_us = hold_us;
            s
        };
        let (mut off, mut on) = (Feed::new(settings(0), 1), Feed::new(settings(on_us), 1));
        let mut g = ItchGen::new(8_000, orders);
        let mut buf = Vec::new();
        let warm = Instant::now();
        while (off.counters().live_orders as usize) < orders * 10 / 11 {
            g.packets_into(10_000, &mut buf);
            for (p, now) in &buf {
                off.on_datagram(0, p, *now);
                on.on_datagram(0, p, *now);
            }
        }
        println!(
            "hold_overhead nasdaq-itch warm-up: {} live orders in each feed, {:.1} s",
            off.counters().live_orders,
            warm.elapsed().as_secs_f64()
        );
        overhead_rounds(
            "nasdaq-itch (8,000 symbols, 1 M live orders, 8 messages a packet)",
            &mut off,
            &mut on,
            rounds,
            |buf| g.packets_into(5_000, buf),
            8.0,
        );
        for f in [&off, &on] {
            let c = f.counters();
            assert_eq!((c.unknown_orders, c.order_conflicts), (0, 0));
        }
    }
}

// ----------------------------------------------------------- skew_loss

fn skew_loss() {
    const BURSTS: usize = 4_000;
    const BURST: usize = 50;
    const SPACING_NS: i64 = 2_000;
    const PERIOD_NS: i64 = 1_000_000;
    const PER_PACKET: usize = 4;
    const DROP: f64 = 0.01;
    let n = BURSTS * BURST;
    let mut stream = TickgateStream::new(1_000, PER_PACKET);
    let mut packets = Vec::with_capacity(n);
    let mut sent = Vec::with_capacity(n);
    for b in 0..BURSTS {
        for i in 0..BURST {
            let t = T0 + b as i64 * PERIOD_NS + i as i64 * SPACING_NS;
            let mut p = Vec::new();
            stream.next_into(t, &mut p);
            packets.push(p);
            sent.push(t);
        }
    }
    // Each line drops 1% of packets, independently; the same drops for
    // every skew and setting, so that rows compare exactly.
    let (mut ra, mut rb) = (SplitMix64::new(0xA11CE), SplitMix64::new(0xB0B));
    let drop_a: Vec<bool> = (0..n).map(|_| ra.chance(DROP)).collect();
    let drop_b: Vec<bool> = (0..n).map(|_| rb.chance(DROP)).collect();
    let lost_both = (0..n).filter(|&i| drop_a[i] && drop_b[i]).count();
    let truth = (lost_both * PER_PACKET) as u64;
    println!(
        "skew_loss: {n} packets ({PER_PACKET} messages each) in bursts of {BURST}, {} us apart, every {} ms; each line drops {:.0}%: {} on A, {} on B, {lost_both} on both = {truth} messages truly lost",
        SPACING_NS / 1_000,
        PERIOD_NS / 1_000_000,
        DROP * 100.0,
        drop_a.iter().filter(|&&d| d).count(),
        drop_b.iter().filter(|&&d| d).count(),
    );
    println!(
        "skew_loss: skew (B behind A) | counted lost: hold off | hold 1000 us | hold 2500 us | truth | (holes filled/declared at 1000 us; at 2500 us; peak held at 2500 us)"
    );
    for skew_us in [0i64, 50, 100, 250, 500, 1_000, 2_000] {
        // Arrivals merged by time; at equal times A's copy first.
        let mut arrivals: Vec<(i64, usize, usize)> = Vec::with_capacity(2 * n);
        for i in 0..n {
            if !drop_a[i] {
                arrivals.push((sent[i], 0, i));
            }
            if !drop_b[i] {
                arrivals.push((sent[i] + skew_us * 1_000, 1, i));
            }
        }
        arrivals.sort_unstable();
        let mut lost = Vec::new();
        let mut holes = Vec::new();
        for hold_us in [0u64, 1_000, 2_500] {
            let mut s = FeedSettings::for_venue(VenueKind::Tickgate);
            s.recovery.gap_hold_us = hold_us;
            let mut feed = Feed::new(s, 2);
            for &(at, line, i) in &arrivals {
                feed.on_datagram(line, &packets[i], at);
            }
            // Holes still open at the end are declared (R2).
            feed.handle_timeout(arrivals.last().unwrap().0 + 10_000_000_000);
            let c = feed.counters();
            lost.push(c.channel_messages_lost);
            holes.push((
                c.recovery.holes_filled,
                c.recovery.holes_lost,
                feed.hold_usage().1,
            ));
        }
        println!(
            "skew_loss: {:>5} us | {:>6} | {:>6} | {:>6} | {:>4} | ({}/{}; {}/{}; {})",
            skew_us,
            lost[0],
            lost[1],
            lost[2],
            truth,
            holes[1].0,
            holes[1].1,
            holes[2].0,
            holes[2].1,
            holes[2].2
        );
    }
}

// ------------------------------------------------------- rerequest_rtt

/// One bare UDP round trip to the echo server, ns.
fn echo_rtt(client: &UdpSocket, echo_addr: SocketAddr) -> i64 {
    let t = Instant::now();
    client.send_to(&[0u8; 20], echo_addr).unwrap();
    let mut buf = [0u8; 2048];
    loop {
        match client.recv_from(&mut buf) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("echo: {e}"),
        }
    }
    t.elapsed().as_nanos() as i64
}

/// Iteration `it`: packet 3it applied, 3it+2 held (3it+1 is the hole),
/// then the I/O shell's loop (R4) until the answer closes the hole; ns
/// from the held datagram's arrival to the close.
fn hole_rtt(feed: &mut Feed, sock: &mut RerequestSocket, packets: &[Vec<u8>], it: usize) -> i64 {
    let k = 3 * it;
    assert_eq!(
        feed.on_datagram(0, &packets[k], wall_ns()),
        DatagramOutcome::Applied
    );
    let t_open = wall_ns();
    assert_eq!(
        feed.on_datagram(0, &packets[k + 2], t_open),
        DatagramOutcome::Held
    );
    loop {
        let now = wall_ns();
        if feed.next_timeout().is_some_and(|t| now >= t) {
            feed.handle_timeout(now);
        }
        if let Some((srv, req)) = feed.poll_request() {
            sock.send(srv, &req.encode(), now);
        }
        match sock.recv().expect("re-request socket") {
            Some(Received::Answer(d)) => {
                let now = wall_ns();
                feed.on_rerequest_answer(d, now);
                if !feed.recovering() {
                    return now - t_open;
                }
            }
            Some(Received::Foreign) => feed.count_foreign_answer(),
            None => {}
        }
    }
}

fn rerequest_rtt() {
    let iterations = env_usize("RECOVERY_RTT_N", 2_000);
    const PER_PACKET: usize = 4;
    // Three packets an iteration: k applied, k+1 skipped (the hole), k+2
    // held until the answer brings k+1.
    let mut stream = TickgateStream::new(1_000, PER_PACKET);
    let packets: Vec<Vec<u8>> = (0..3 * (iterations + 1))
        .map(|i| {
            let mut p = Vec::new();
            stream.next_into(T0 + i as i64 * 1_000, &mut p);
            p
        })
        .collect();
    let mut history = History::new(packets.len() * PER_PACKET);
    for p in &packets {
        history.record(p);
    }
    let server = RerequestServer::spawn(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(Mutex::new(history)),
        // The bench paces its own requests (below); the server's limit
        // per source must not be what is measured.
        RerequestOptions {
            rate: 1_000_000,
            total_rate: 1_000_000,
            max_sources: 16,
        },
    )
    .expect("re-request server");
    let mut sock = RerequestSocket::open(&[server.local_addr()]).expect("re-request socket");

    // The floor: a bare UDP echo server, blocking as the re-request server
    // is, answering a 20-byte datagram with one the size of an answer.
    let answer_len = packets[1].len();
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    let echo_addr: SocketAddr = echo.local_addr().unwrap();
    echo.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let echo_thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let reply = vec![7u8; answer_len];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok((_, from)) = echo.recv_from(&mut buf) {
                    let _ = echo.send_to(&reply, from);
                }
            }
        })
    };
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_nonblocking(true).unwrap();

    for hold_us in [0u64, 1_000] {
        let n = if hold_us == 0 {
            iterations
        } else {
            iterations / 4
        };
        let mut s = FeedSettings::for_venue(VenueKind::Tickgate);
        s.recovery.gap_hold_us = hold_us;
        s.recovery.rerequest_servers = 1;
        let mut feed = Feed::new(s, 1);
        // [cold, warm]: measured first after the sleep (the CPUs and the
        // server's thread wake from idle) or right after the other one.
        let mut hole: [Vec<i64>; 2] = [Vec::new(), Vec::new()];
        let mut floor: [Vec<i64>; 2] = [Vec::new(), Vec::new()];
        for it in 0..n {
            // R4: at most 100 requests a second leave a feed; 11 ms apart
            // never meets that limit, so that it is not what is measured.
            std::thread::sleep(Duration::from_millis(11));
            // The floor and the hole in alternating order, so that each is
            // measured both cold and warm in the same minutes.
            if it % 2 == 0 {
                floor[0].push(echo_rtt(&client, echo_addr));
                hole[1].push(hole_rtt(&mut feed, &mut sock, &packets, it));
            } else {
                hole[0].push(hole_rtt(&mut feed, &mut sock, &packets, it));
                floor[1].push(echo_rtt(&client, echo_addr));
            }
        }
        let c = feed.counters();
        assert_eq!(c.channel_messages_lost, 0);
        assert_eq!(c.recovery.holes_filled, n as u64);
        println!(
            "rerequest_rtt gap_hold_us={hold_us}: {n} holes filled by re-request; requests {}, answers {}, messages recovered {}",
            c.recovery.requests_sent, c.recovery.answers_received, c.recovery.messages_recovered,
        );
        let us = |v: i64| v as f64 / 1_000.0;
        let [hole_cold, hole_warm] = &mut hole;
        let [floor_cold, floor_warm] = &mut floor;
        for (what, v) in [
            ("hole open to close, cold", hole_cold),
            ("hole open to close, warm", hole_warm),
            ("bare UDP echo, cold", floor_cold),
            ("bare UDP echo, warm", floor_warm),
        ] {
            v.sort_unstable();
            println!(
                "rerequest_rtt gap_hold_us={hold_us}: {what}: n {} p50 {:.1} us, p99 {:.1} us, max {:.1} us",
                v.len(),
                us(quantile(v, 0.5)),
                us(quantile(v, 0.99)),
                us(*v.last().unwrap()),
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    echo_thread.join().unwrap();
    let counts = server.stop();
    println!(
        "rerequest_rtt server: {} requests, {} answered, {} rate limited",
        counts.datagrams, counts.answered, counts.rate_limited
    );
}

// ------------------------------------------------------- glimpse_apply

/// A snapshot's messages as MoldUDP64 message blocks (u16 length, message).
fn encode_blocks(msgs: &[Message]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msgs.len() * 40);
    for m in msgs {
        let b = messages::encode_to_vec(m);
        out.extend_from_slice(&(b.len() as u16).to_be_bytes());
        out.extend_from_slice(&b);
    }
    out
}

/// Each block of `blocks` (without its length).
fn each_block(blocks: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + 2 > blocks.len() {
            return None;
        }
        let n = u16::from_be_bytes([blocks[at], blocks[at + 1]]) as usize;
        let b = &blocks[at + 2..at + 2 + n];
        at += 2 + n;
        Some(b)
    })
}

fn glimpse_feed(snapshot: bool) -> Feed {
    let mut s = FeedSettings {
        venue: VenueSettings {
            kind: VenueKind::NasdaqItch,
            max_orders: 2_000_000,
            ..VenueSettings::default()
        },
        ..FeedSettings::for_venue(VenueKind::NasdaqItch)
    };
    s.recovery.snapshot = snapshot;
    Feed::new(s, 1)
}

fn glimpse_apply() {
    const SYMBOLS: usize = 8_000;
    let orders = env_usize("RECOVERY_GLIMPSE_ORDERS", 1_050_000);
    let runs = env_usize("RECOVERY_GLIMPSE_RUNS", 5);
    println!(
        "glimpse_apply: VmHWM at start {} MiB",
        status_kib("VmHWM:") / 1024
    );
    // The venue's book, built by its order flow past `orders` live orders.
    let mut g = ItchGen::new(SYMBOLS, orders * 11 / 10);
    let mut buf = Vec::new();
    while g.flow.live_orders() < orders {
        g.packets_into(10_000, &mut buf);
    }
    let mut msgs = Vec::new();
    let session = g.flow.book_snapshot(&mut msgs).expect("an ITCH session");
    let next = g.seq;
    let adds = msgs
        .iter()
        .filter(|m| matches!(m, Message::AddOrder { .. }))
        .count();
    let blocks = encode_blocks(&msgs);
    drop(msgs);
    let message_count = each_block(&blocks).count();
    println!(
        "glimpse_apply: snapshot of {adds} live orders over {SYMBOLS} symbols, {message_count} messages, {:.1} MB of blocks, End of Snapshot at {next}",
        blocks.len() as f64 / 1e6
    );
    // A late join: one packet just before the snapshot's N, of a message
    // that leaves the books alone (the first symbol's directory again).
    let join = {
        let mut b = PacketBuilder::new();
        b.start(session, next - 1);
        b.push_raw(&messages::encode_to_vec(&Message::StockDirectory {
            header: Header {
                locate: 1,
                tracking: 0,
                timestamp: 0,
            },
            stock: tickgate::sim::venue_sim::venue_symbol(0),
        }));
        b.bytes().to_vec()
    };
    let now = g.t + 5_000;
    let late_feed = || {
        let mut f = glimpse_feed(true);
        assert_eq!(f.on_datagram(0, &join, now), DatagramOutcome::Applied);
        assert!(f.poll_snapshot_start(now));
        f
    };
    // The alternative: the same messages as the venue's multicast packets
    // from sequence 1, through the live path.
    let live_packets: Vec<Vec<u8>> = {
        let all: Vec<&[u8]> = each_block(&blocks).collect();
        let mut b = PacketBuilder::new();
        let mut seq = 1;
        all.chunks(32)
            .map(|c| {
                b.start(session, seq);
                for m in c {
                    b.push_raw(m);
                }
                seq += c.len() as u64;
                b.bytes().to_vec()
            })
            .collect()
    };
    let (mut snap_wall, mut snap_cpu, mut live_wall, mut live_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let mut f = late_feed();
        let (w0, c0) = (Instant::now(), thread_cpu_now());
        f.on_snapshot(next, black_box(&blocks), now)
            .expect("snapshot applied");
        let (w, c) = (w0.elapsed(), thread_cpu_now() - c0);
        assert_eq!(f.counters().live_orders as usize, adds);
        assert!(!f.recovering());
        snap_wall.push(w.as_secs_f64());
        snap_cpu.push(c.as_secs_f64());
        drop(f);

        let mut f = glimpse_feed(false);
        let (w0, c0) = (Instant::now(), thread_cpu_now());
        for p in &live_packets {
            f.on_datagram(0, black_box(p), now);
        }
        let (w, c) = (w0.elapsed(), thread_cpu_now() - c0);
        assert_eq!(f.counters().live_orders as usize, adds);
        assert_eq!(f.counters().invalid_packets, 0);
        live_wall.push(w.as_secs_f64());
        live_cpu.push(c.as_secs_f64());
        println!(
            "glimpse_apply run {run}: on_snapshot {:.3} s wall {:.3} s CPU; live path {:.3} s wall {:.3} s CPU ({} packets)",
            snap_wall[run],
            snap_cpu[run],
            live_wall[run],
            live_cpu[run],
            live_packets.len()
        );
    }
    let (sw, sc, lw, lc) = (
        median(&mut snap_wall),
        median(&mut snap_cpu),
        median(&mut live_wall),
        median(&mut live_cpu),
    );
    println!(
        "glimpse_apply: median of {runs}: on_snapshot {sw:.3} s wall ({:.2} M orders/s, {:.1} ns/message), {sc:.3} s thread CPU; live path, same messages: {lw:.3} s wall ({:.2} M orders/s), {lc:.3} s CPU; snapshot/live wall {:.2}",
        adds as f64 / sw / 1e6,
        sw * 1e9 / message_count as f64,
        adds as f64 / lw / 1e6,
        sw / lw
    );

    // The held buffer: 100,000 datagrams of the live session arrive while
    // the snapshot runs (R5: all held), then G releases them.
    let held_n = env_usize("RECOVERY_GLIMPSE_HELD", 100_000);
    let mut held = Vec::new();
    g.packets_into(held_n, &mut held);
    let hwm_before = status_kib("VmHWM:");
    let rss_before = status_kib("VmRSS:");
    let mut f = late_feed();
    for (p, _) in &held {
        assert_eq!(f.on_datagram(0, p, now), DatagramOutcome::Held);
    }
    let (held_now, peak_entries, peak_bytes) = f.hold_usage();
    let rss_held = status_kib("VmRSS:");
    let (w0, c0) = (Instant::now(), thread_cpu_now());
    f.on_snapshot(next, &blocks, now).expect("snapshot applied");
    let (w, c) = (w0.elapsed(), thread_cpu_now() - c0);
    let cnt = f.counters();
    assert!(!f.recovering());
    assert_eq!((cnt.unknown_orders, cnt.order_conflicts), (0, 0));
    let held_bytes: usize = held.iter().map(|(p, _)| p.len()).sum();
    println!(
        "glimpse_apply held: {held_now} datagrams ({:.1} MB of datagrams) held during the snapshot; hold_usage peak {peak_entries} entries, {:.1} MB arena; on_snapshot then released them: {:.3} s wall {:.3} s CPU; {} live orders after",
        held_bytes as f64 / 1e6,
        peak_bytes as f64 / 1e6,
        w.as_secs_f64(),
        c.as_secs_f64(),
        cnt.live_orders
    );
    println!(
        "glimpse_apply memory: VmHWM {} MiB at the end ({} MiB before the held run); VmRSS {} MiB before the held run's feed, {} MiB with 100,000 held",
        status_kib("VmHWM:") / 1024,
        hwm_before / 1024,
        rss_before / 1024,
        rss_held / 1024
    );
}
