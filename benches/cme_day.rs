//! cme-mdp3 decode, book and quote per book entry, beside nasdaq-itch
//! decode, book and BBO per message, in one run; then the cost of applying
//! a whole snapshot loop.
//!
//! `cargo bench --bench cme_day`
//!
//! A bench binary, not criterion: applying a packet changes the books, so
//! each measured packet is applied once, in order. The packets are made
//! before the timed passes (held in memory, read once, as a receive buffer
//! is). Passes alternate CME and ITCH so that both see the same machine.
//!
//! - CME: the simulator's channel (`sim::cme_flow`), 1,000 instruments with
//!   Market By Price books of 5 levels, 8 book entries a packet (template
//!   46), every instrument built from RptSeq 1 before the timed passes.
//! - ITCH: the simulator's order flow (`sim::venue_sim::ItchFlow`), 8,000
//!   symbols around 100,000 live orders, 8 messages a packet (a lighter
//!   book than `itch_day`'s million orders: the same order of state as the
//!   CME channel's).
//! - Snapshot loop: a second CME feed joins late (every instrument waits
//!   for a snapshot); the whole loop (1,000 snapshots of 10 levels) is
//!   applied and timed per snapshot, for `CME_DAY_LATE_PASSES` (default 7)
//!   late joiners in turn, each a new feed given the same packets; the
//!   median is printed last. (For callgrind's count of one loop, set
//!   `CME_DAY_LATE_PASSES=1`.)

#[path = "common/cpu.rs"]
mod cpu;
#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::thread_cpu_now;

use std::hint::black_box;
use std::time::Duration;

use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind, VenueSettings};
use tickgate::sim::cme_flow::CmeFlow;
use tickgate::sim::seeded::SplitMix64;
use tickgate::sim::venue_sim::{ItchFlow, VenueFlow};
use tickgate::venue::LineKind;

const INSTRUMENTS: usize = 1_000;
const ITCH_SYMBOLS: usize = 8_000;
const ITCH_ORDERS: usize = 100_000;
const PER_PACKET: usize = 8;
const PASS_PACKETS: usize = 200_000;
const PASSES: usize = 3;
const T0: i64 = 1_784_122_200_000_000_000;

struct Gen<F: VenueFlow> {
    flow: F,
    m: SplitMix64,
    seq: u64,
    t: i64,
}

impl<F: VenueFlow> Gen<F> {
    /// `packets` packets and the messages (CME: book entries) in them.
    fn packets(
        &mut self,
        packets: usize,
        per_message: impl Fn(&[u8]) -> u64,
    ) -> (Vec<(Vec<u8>, i64)>, u64) {
        let mut out = Vec::with_capacity(packets);
        let mut n = 0;
        for _ in 0..packets {
            let mut buf = Vec::with_capacity(1400);
            self.t += 1_000;
            let c = self
                .flow
                .data_packet(&mut self.m, self.seq, self.t, PER_PACKET, &mut buf);
            self.seq += c as u64;
            n += per_message(&buf);
            out.push((buf, self.t + 5_000));
        }
        (out, n)
    }
}

/// Book entries in a CME packet of one template-46 message (its group's
/// count, after the 12-byte packet header, MsgSize, the SBE header and the
/// 11-byte root).
fn cme_entries(p: &[u8]) -> u64 {
    let at = 12 + 2 + 8 + 11 + 2;
    p.get(at).copied().unwrap_or(0) as u64
}

fn apply(feed: &mut Feed, packets: &[(Vec<u8>, i64)]) -> Duration {
    let c0 = thread_cpu_now();
    for (p, now) in packets {
        let out = feed.on_datagram(0, black_box(p), *now);
        debug_assert_eq!(out, DatagramOutcome::Applied);
    }
    thread_cpu_now() - c0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut cme = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 1);
    let mut cme_gen = Gen {
        flow: CmeFlow::new(INSTRUMENTS, 7),
        m: SplitMix64::new(7),
        seq: 1,
        t: T0,
    };
    cme_gen.flow.start_session(0, T0);
    let mut itch = Feed::new(
        FeedSettings {
            venue: VenueSettings {
                kind: VenueKind::NasdaqItch,
                max_orders: 1_000_000,
                ..VenueSettings::default()
            },
            ..FeedSettings::for_venue(VenueKind::NasdaqItch)
        },
        1,
    );
    let mut itch_gen = Gen {
        flow: ItchFlow::new(ITCH_SYMBOLS, ITCH_ORDERS, T0, 42),
        m: SplitMix64::new(42),
        seq: 1,
        t: T0,
    };
    itch_gen.flow.start_session(0, T0);
    // Untimed warm-up: every CME book built, the ITCH books up to their
    // target.
    let (warm, _) = cme_gen.packets(50_000, cme_entries);
    apply(&mut cme, &warm);
    while itch.counters().live_orders < (ITCH_ORDERS * 9 / 10) as u64 {
        let (p, _) = itch_gen.packets(20_000, |_| 0);
        apply(&mut itch, &p);
    }
    println!(
        "warm-up: cme {} instruments ({} slots), itch {} symbols and {} live orders",
        INSTRUMENTS,
        cme.symbol_count(),
        itch.symbol_count(),
        itch.counters().live_orders
    );
    let (mut cme_rates, mut itch_rates) = (Vec::new(), Vec::new());
    for pass in 0..PASSES {
        let (p, n) = cme_gen.packets(PASS_PACKETS, cme_entries);
        let cpu = apply(&mut cme, &p);
        let per_entry = cpu.as_nanos() as f64 / n as f64;
        let (q, m) = itch_gen.packets(PASS_PACKETS, |p| u16::from_be_bytes([p[18], p[19]]) as u64);
        let icpu = apply(&mut itch, &q);
        let per_msg = icpu.as_nanos() as f64 / m as f64;
        println!(
            "pass {pass}: cme {n} entries, decode+book+quote {per_entry:.1} ns/entry thread CPU; itch {m} messages, decode+book+BBO {per_msg:.1} ns/msg thread CPU"
        );
        cme_rates.push(per_entry);
        itch_rates.push(per_msg);
    }
    let c = cme.counters();
    assert_eq!(
        (c.invalid_packets, c.book_errors),
        (0, 0),
        "the simulated channel is clean"
    );
    let (mc, mi) = (median(cme_rates), median(itch_rates));
    println!(
        "median: cme {mc:.1} ns/entry, itch {mi:.1} ns/msg thread CPU: cme/itch {:.2}",
        mc / mi
    );

    // Late joiners: every instrument waits; the whole snapshot loop. Each
    // pass is a new feed given the same packets (a late join is a cold
    // pass by nature, so one pass a run says little).
    let (p, _) = cme_gen.packets(2_000, cme_entries);
    let t = cme_gen.t + 10_000;
    // Exactly one loop: every instrument's snapshot once.
    let mut loop_packets = Vec::new();
    let mut snapshots = 0;
    while snapshots < INSTRUMENTS {
        let mut buf = Vec::with_capacity(1400);
        cme_gen.flow.snapshot_packet(t as u64, &mut buf);
        snapshots += tickgate::venue::cme_mdp3::sbe::packet(&buf)
            .unwrap()
            .1
            .count();
        loop_packets.push(buf);
    }
    let faults = || {
        let ru = cpu::rusage(libc::RUSAGE_THREAD);
        ru.ru_minflt + ru.ru_majflt
    };
    let late_passes: usize = std::env::var("CME_DAY_LATE_PASSES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7)
        .max(1);
    let mut per_snapshot = Vec::new();
    for pass in 0..late_passes {
        let mut late = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 3);
        late.set_line_kind(1, LineKind::Snapshot);
        late.set_line_kind(2, LineKind::Definition);
        apply(&mut late, &p);
        let waiting = late.venue_recovery().waiting;
        let f0 = faults();
        let c0 = thread_cpu_now();
        snapshot_loop(&mut late, &loop_packets, t);
        let cpu = thread_cpu_now() - c0;
        let faulted = faults() - f0;
        let applied = late.counters().snapshots_applied;
        let ns = cpu.as_nanos() as f64 / applied.max(1) as f64;
        per_snapshot.push(ns);
        println!(
            "snapshot loop, late joiner {pass}: {waiting} instruments waiting, {} packets, {applied} snapshots used in {:.2} ms thread CPU ({ns:.0} ns a snapshot, {faulted} page faults); waiting after: {}",
            loop_packets.len(),
            cpu.as_secs_f64() * 1e3,
            late.venue_recovery().waiting
        );
    }
    println!(
        "snapshot loop: median {:.0} ns a snapshot over {late_passes} late joiners",
        median(per_snapshot)
    );
}

/// The snapshot loop given to a late joiner: a function of its own, so
/// that `valgrind --tool=callgrind --toggle-collect='cme_day::snapshot_loop'`
/// counts it alone.
#[inline(never)]
fn snapshot_loop(late: &mut Feed, packets: &[Vec<u8>], t: i64) {
    for p in packets {
        late.on_datagram(1, black_box(p), t);
    }
}
