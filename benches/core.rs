//! Core benchmarks: wire decode per message, decode + apply per message over
//! a realistic stream (1,000 symbols, 20 quotes per packet, full feed, one
//! long-lived feed, packets hot in cache as after the kernel's copy), the
//! same stream on lines A and B, the same stream as IEX TOPS Quote Updates
//! over IEX-TP (the iex-tops venue, venues.md), and the in-process check.
//!
//! `cargo bench --bench core -- --warm-up-time 1 --measurement-time 3`
//!
//! Each benchmark runs twice: with wall-clock time (criterion's default)
//! and with the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which does
//! not count time spent waiting for a CPU: on a shared, loaded machine the
//! second is the closer estimate of the code's own cost (cache pollution by
//! other processes still shows in it).

#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::{thread_cpu_now, ThreadCpu};

use criterion::measurement::Measurement;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tickgate::feed::check::{parse_request, write_verdict, SymbolLookup};
use tickgate::feed::verdict::judge;
use tickgate::feed::VenueKind;
use tickgate::feed::{ClockOffset, Feed, FeedSettings, Mode};
use tickgate::gate::protocol::answer;
use tickgate::venue::iex_tops::SegmentBuilder;
use tickgate::wire::{Message, Packet, PacketBuilder, Quote, SessionId, Side, Symbol};

const T0: i64 = 1_796_025_600_000_000_000;
const SYMBOLS: usize = 1_000;
const PER_PACKET: usize = 20;
const PACKETS: usize = 5_000;

fn symbols() -> Vec<Symbol> {
    (0..SYMBOLS)
        .map(|i| Symbol::parse(&format!("S{i:05}")).unwrap())
        .collect()
}

/// An endless provider stream: packets of 20 full quotes over 1,000
/// symbols picked pseudo-randomly, per-symbol and channel sequences in
/// order, 1 us apart.
struct Provider {
    syms: Vec<Symbol>,
    seqs: Vec<u64>,
    session: SessionId,
    chan: u64,
    now: i64,
    x: u64,
    builder: PacketBuilder,
}

impl Provider {
    fn new() -> Provider {
        Provider {
            syms: symbols(),
            seqs: vec![0; SYMBOLS],
            session: SessionId::parse("20261201A1").unwrap(),
            chan: 1,
            now: T0,
            x: 0x9E37_79B9,
            builder: PacketBuilder::new(),
        }
    }

    /// The next packet, written over `out` (buffers are reused).
    fn next_into(&mut self, out: &mut (Vec<u8>, i64)) {
        self.now += 1_000;
        let b = &mut self.builder;
        b.start(self.session, self.chan);
        for _ in 0..PER_PACKET {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            let s = (self.x % SYMBOLS as u64) as usize;
            self.seqs[s] += 1;
            let px = 1_085_120_000 + (self.x % 1000) as i64 * 10_000;
            b.quote(&Quote::new(
                self.syms[s],
                self.seqs[s],
                (self.now - 300_000) as u64,
                Some(Side { px, qty: 1_000_000 }),
                Some(Side {
                    px: px + 30_000,
                    qty: 2_000_000,
                }),
            ));
        }
        self.chan += PER_PACKET as u64;
        out.0.clear();
        out.0.extend_from_slice(b.bytes());
        out.1 = self.now;
    }
}

/// A stream of packets for `timed_packets`.
trait Stream {
    fn next_into(&mut self, out: &mut (Vec<u8>, i64));

    /// The next `CHUNK` packets into `chunk`.
    fn fill(&mut self, chunk: &mut [(Vec<u8>, i64)]) {
        for p in chunk {
            self.next_into(p);
        }
    }
}

impl Stream for Provider {
    fn next_into(&mut self, out: &mut (Vec<u8>, i64)) {
        Provider::next_into(self, out)
    }
}

/// The same market as `Provider` (1,000 symbols, 20 whole quotes per
/// packet, the same prices) as IEX TOPS Quote Updates in IEX-TP segments.
struct IexProvider {
    syms: Vec<Symbol>,
    seq: u64,
    now: i64,
    x: u64,
    builder: SegmentBuilder,
}

impl IexProvider {
    fn new() -> IexProvider {
        IexProvider {
            syms: symbols(),
            seq: 1,
            now: T0,
            x: 0x9E37_79B9,
            builder: SegmentBuilder::new(),
        }
    }
}

impl Stream for IexProvider {
    fn next_into(&mut self, out: &mut (Vec<u8>, i64)) {
        self.now += 1_000;
        let b = &mut self.builder;
        b.start(1, self.seq, self.now - 300_000);
        for _ in 0..PER_PACKET {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            let s = (self.x % SYMBOLS as u64) as usize;
            // 4 implied decimals (the tickgate stream's 1.08512 + k * 0.00001)
            let px = 10_851 + (self.x % 1000) as i64 / 10;
            b.quote_update(
                0,
                self.now - 300_000,
                self.syms[s],
                1_000,
                px,
                px + 3,
                2_000,
            );
        }
        self.seq += PER_PACKET as u64;
        out.0.clear();
        out.0.extend_from_slice(b.bytes());
        out.1 = self.now;
    }
}

/// Packets generated (untimed) between timed runs: small enough to stay in
/// cache, as a datagram the kernel just copied to the receiver is.
const CHUNK: usize = 64;

fn stream() -> Vec<(Vec<u8>, i64)> {
    let mut p = Provider::new();
    let mut out = vec![(Vec::new(), 0); PACKETS];
    p.fill(&mut out);
    out
}

/// Runs `work` over `iters` packets of a fresh provider stream, in chunks
/// of `CHUNK`; only `work` is timed (with `clock`).
fn timed_packets(
    iters: u64,
    clock: fn() -> Duration,
    mut work: impl FnMut(&[(Vec<u8>, i64)]),
    provider: &mut impl Stream,
) -> Duration {
    let mut chunk = vec![(Vec::with_capacity(1500), 0); CHUNK];
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(CHUNK);
        provider.fill(&mut chunk[..n]);
        let start = clock();
        work(&chunk[..n]);
        total += clock().saturating_sub(start);
        left -= n;
    }
    total
}

fn wall_now() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

fn settings() -> FeedSettings {
    FeedSettings {
        mode: Mode::Full,
        clock_offset: ClockOffset::Auto,
        max_symbols: 100_000,
        ..FeedSettings::default()
    }
}

fn decode<M: Measurement<Value = Duration>>(
    c: &mut Criterion<M>,
    label: &str,
    clock: fn() -> Duration,
) {
    let mut g = c.benchmark_group(format!("decode ({label})"));
    // One iteration is one packet of 20 messages.
    g.throughput(Throughput::Elements(PER_PACKET as u64));
    g.bench_function("parse+decode per message", |bench| {
        let mut provider = Provider::new();
        let mut sum = 0u64;
        bench.iter_custom(|iters| {
            timed_packets(
                iters,
                clock,
                |chunk| {
                    for (p, _) in chunk {
                        let p = Packet::parse(black_box(p)).unwrap();
                        for m in p.messages() {
                            if let Message::Quote(q) = m {
                                sum = sum.wrapping_add(q.seq ^ q.bid_px as u64);
                            }
                        }
                    }
                },
                &mut provider,
            )
        });
        black_box(sum);
    });
    g.finish();
}

fn apply<M: Measurement<Value = Duration>>(
    c: &mut Criterion<M>,
    label: &str,
    clock: fn() -> Duration,
) {
    let mut g = c.benchmark_group(format!("feed ({label})"));
    g.throughput(Throughput::Elements(PER_PACKET as u64));
    g.bench_function("decode+apply per message (full, 1000 symbols)", |bench| {
        let mut provider = Provider::new();
        let mut feed = Feed::new(settings(), 2);
        bench.iter_custom(|iters| {
            timed_packets(
                iters,
                clock,
                |chunk| {
                    for (p, now) in chunk {
                        feed.on_datagram(0, black_box(p), *now);
                    }
                },
                &mut provider,
            )
        });
        assert_eq!(feed.counters().ticks_lost, 0);
    });
    g.bench_function(
        "iex-tops decode+apply per message (Quote Updates, 1000 symbols)",
        |bench| {
            let mut provider = IexProvider::new();
            let mut feed = Feed::new(
                FeedSettings {
                    max_symbols: 100_000,
                    ..FeedSettings::for_venue(VenueKind::IexTops)
                },
                2,
            );
            bench.iter_custom(|iters| {
                timed_packets(
                    iters,
                    clock,
                    |chunk| {
                        for (p, now) in chunk {
                            feed.on_datagram(0, black_box(p), *now);
                        }
                    },
                    &mut provider,
                )
            });
            let c = feed.counters();
            assert_eq!((c.invalid_packets, c.channel_gaps), (0, 0));
            assert!(feed.symbol_count() <= SYMBOLS);
        },
    );
    g.bench_function("lines A+B per message (second copy duplicate)", |bench| {
        let mut provider = Provider::new();
        let mut feed = Feed::new(settings(), 2);
        bench.iter_custom(|iters| {
            timed_packets(
                iters,
                clock,
                |chunk| {
                    for (p, now) in chunk {
                        feed.on_datagram(0, black_box(p), *now);
                        feed.on_datagram(1, black_box(p), *now);
                    }
                },
                &mut provider,
            )
        });
        assert_eq!(
            feed.counters().lines[1].duplicate_packets,
            feed.counters().lines[0].packets
        );
    });
    g.finish();
}

fn check<M: Measurement>(c: &mut Criterion<M>, label: &str) {
    let packets = stream();
    let mut feed = Feed::new(settings(), 2);
    for (p, now) in &packets {
        feed.on_datagram(0, p, *now);
    }
    let now = packets.last().unwrap().1 + 1_000;
    let sym = Symbol::parse("S00421").unwrap();
    let feeds: [&dyn SymbolLookup; 1] = [&feed];
    let mut out = Vec::with_capacity(256);
    let mut g = c.benchmark_group(format!("check ({label})"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("judge", |bench| {
        let (view, fv, t) = feed.lookup(sym).unwrap();
        bench.iter(|| judge(Some(black_box(&view)), black_box(&fv), black_box(now), &t))
    });
    g.bench_function("lookup", |bench| {
        bench.iter(|| feed.lookup(black_box(sym)).unwrap().0.seq)
    });
    g.bench_function("parse_request", |bench| {
        bench.iter(|| parse_request(black_box(b"CHECK S00421 stale_ms=100")).is_ok())
    });
    g.bench_function("format verdict line", |bench| {
        let (view, fv, t) = feed.lookup(sym).unwrap();
        let v = judge(Some(&view), &fv, now, &t);
        bench.iter(|| {
            out.clear();
            write_verdict(&mut out, b"S00421", black_box(&v));
            out.len()
        })
    });
    g.bench_function("lookup+judge+format", |bench| {
        bench.iter(|| {
            out.clear();
            let (view, fv, t) = feed.lookup(black_box(sym)).unwrap();
            let v = judge(Some(&view), &fv, now, &t);
            write_verdict(&mut out, b"S00421", &v);
            out.len()
        })
    });
    g.bench_function("answer(CHECK line)", |bench| {
        bench.iter(|| {
            out.clear();
            answer(black_box(b"CHECK S00421"), &feeds, black_box(now), &mut out);
            out.len()
        })
    });
    // gate.md "One symbol on several feeds": the same symbol on three
    // feeds, each judged, the answer combined (feeds=).
    let mut others = [Feed::new(settings(), 2), Feed::new(settings(), 2)];
    for f in &mut others {
        for (p, at) in &packets {
            f.on_datagram(0, p, *at);
        }
    }
    let three: [&dyn SymbolLookup; 3] = [&feed, &others[0], &others[1]];
    g.bench_function("answer(CHECK line), three feeds", |bench| {
        bench.iter(|| {
            out.clear();
            answer(black_box(b"CHECK S00421"), &three, black_box(now), &mut out);
            out.len()
        })
    });
    g.finish();
    out.clear();
    answer(b"CHECK S00421", &three, now, &mut out);
    assert!(
        out.starts_with(b"OK S00421 seq=- ") && out.ends_with(b" feeds=0:OK,1:OK,2:OK\n"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // The answer is the one we mean to measure.
    out.clear();
    answer(b"CHECK S00421", &feeds, now, &mut out);
    assert!(
        out.starts_with(b"OK S00421 seq="),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

fn wall(c: &mut Criterion) {
    decode(c, "wall", wall_now);
    apply(c, "wall", wall_now);
    check(c, "wall");
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    decode(c, "thread cpu", thread_cpu_now);
    apply(c, "thread cpu", thread_cpu_now);
    check(c, "thread cpu");
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);
