//! nasdaq-itch decode + book + BBO per message on a day-like mix: 8,000
//! symbols, books built up to over 1,000,000 live orders, then a steady
//! flow of adds, executions, partial cancels, replaces, deletes, trades and
//! halts (the simulator's `ItchFlow`), 8 messages per MoldUDP64 packet;
//! 90% of executions, cancels, replaces and deletes act on one of the
//! 2,000 most recent orders (`ITCH_DAY_RECENT=0`: on any live order).
//!
//! `cargo bench --bench itch_day`
//!
//! A bench binary, not criterion: applying a packet changes the books, so
//! each measured message is applied exactly once, in order, to books that
//! already hold a day's worth of orders. The packets are generated before
//! the timed passes (held in memory, read once, as a receive buffer is).
//! Reported per pass: wall and thread-CPU ns per message; then the same
//! packets once more through decode alone (validation + ITCH decode, no
//! book), to say where the time goes.

#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::thread_cpu_now;

use std::hint::black_box;
use std::time::{Duration, Instant};

use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind, VenueSettings};
use tickgate::sim::seeded::SplitMix64;
use tickgate::sim::venue_sim::{ItchFlow, VenueFlow};
use tickgate::venue::nasdaq_itch::messages;
use tickgate::wire::Packet;

const SYMBOLS: usize = 8_000;
const TARGET_ORDERS: usize = 1_100_000;
const PER_PACKET: usize = 8;
const PASS_MESSAGES: u64 = 2_000_000;
const PASSES: usize = 3;
const T0: i64 = 1_784_122_200_000_000_000;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct Gen {
    flow: ItchFlow,
    m: SplitMix64,
    seq: u64,
    t: i64,
}

impl Gen {
    /// Packets holding about `messages` messages.
    fn packets(&mut self, messages: u64) -> (Vec<(Vec<u8>, i64)>, u64) {
        let mut out = Vec::with_capacity(messages as usize / PER_PACKET + 1);
        let mut n = 0;
        while n < messages {
            let mut buf = Vec::with_capacity(PER_PACKET * 40 + 20);
            self.t += 250;
            let c = self
                .flow
                .data_packet(&mut self.m, self.seq, self.t, PER_PACKET, &mut buf);
            self.seq += c as u64;
            n += c as u64;
            out.push((buf, self.t + 5_000));
        }
        (out, n)
    }
}

fn main() {
    // `cargo bench` passes --bench; ITCH_DAY_RECENT overrides the share of
    // removals on recent orders (0.9 by default; 0 = any live order).
    let recent: f64 = std::env::var("ITCH_DAY_RECENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.9);
    println!(
        "removals on one of the 2,000 most recent orders: {:.0}%",
        recent * 100.0
    );
    let mut feed = Feed::new(
        FeedSettings {
            venue: VenueSettings {
                kind: VenueKind::NasdaqItch,
                max_orders: 4_000_000,
                ..VenueSettings::default()
            },
            ..FeedSettings::for_venue(VenueKind::NasdaqItch)
        },
        1,
    );
    let mut g = Gen {
        flow: ItchFlow::new(SYMBOLS, TARGET_ORDERS, T0, 42).with_recent_removals(recent),
        m: SplitMix64::new(42),
        seq: 1,
        t: T0,
    };
    g.flow.start_session(0, T0);
    // Build the books up (untimed).
    let start = Instant::now();
    while feed.counters().live_orders < 1_000_000 {
        let (packets, _) = g.packets(100_000);
        for (p, now) in &packets {
            assert_eq!(feed.on_datagram(0, p, *now), DatagramOutcome::Applied);
        }
    }
    println!(
        "warm-up: {} live orders, {} symbols, {} messages applied, {:.1} s, RSS {} MiB",
        feed.counters().live_orders,
        feed.symbol_count(),
        g.seq - 1,
        start.elapsed().as_secs_f64(),
        rss_kib() / 1024
    );
    let mut rates = Vec::new();
    for pass in 0..PASSES {
        let (packets, n) = g.packets(PASS_MESSAGES);
        let (w0, c0) = (Instant::now(), thread_cpu_now());
        for (p, now) in &packets {
            feed.on_datagram(0, black_box(p), *now);
        }
        let (wall, cpu) = (w0.elapsed(), thread_cpu_now() - c0);
        // Decode alone, same packets: MoldUDP64 validation + ITCH decode.
        let d0 = thread_cpu_now();
        let mut sum = 0u64;
        for (p, _) in &packets {
            let p = Packet::parse_with(black_box(p), |k| messages::message_size(k).unwrap_or(1))
                .unwrap();
            for b in p.blocks() {
                if let Some(m) = messages::decode(b) {
                    sum = sum.wrapping_add(m.timestamp() ^ m.locate() as u64);
                }
            }
        }
        black_box(sum);
        let decode = thread_cpu_now() - d0;
        let per = |d: Duration| d.as_nanos() as f64 / n as f64;
        println!(
            "pass {pass}: {n} messages, decode+book+BBO {:.1} ns/msg wall ({:.1} M msg/s), {:.1} ns/msg thread CPU; decode alone {:.1} ns/msg CPU; live orders {}",
            per(wall),
            1e3 / per(wall),
            per(cpu),
            per(decode),
            feed.counters().live_orders
        );
        rates.push(per(cpu));
    }
    let c = feed.counters();
    assert_eq!(
        (c.invalid_packets, c.unknown_orders, c.order_conflicts),
        (0, 0, 0)
    );
    rates.sort_by(|a, b| a.total_cmp(b));
    println!(
        "median {:.1} ns/msg thread CPU ({:.1} M msg/s); RSS {} MiB",
        rates[PASSES / 2],
        1e3 / rates[PASSES / 2],
        rss_kib() / 1024
    );
}
