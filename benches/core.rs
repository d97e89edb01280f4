//! Core benchmarks: wire decode per message, decode + apply per message over
//! a realistic stream (1,000 symbols, 20 quotes per packet, full feed), the
//! same stream on lines A and B, and the in-process check.
//!
//! `cargo bench --bench core -- --warm-up-time 1 --measurement-time 3`
//!
//! Each benchmark runs twice: with wall-clock time (criterion's default)
//! and with the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which does
//! not count time spent waiting for a CPU: on a shared, loaded machine the
//! second is the closer estimate of the code's own cost (cache pollution by
//! other processes still shows in it).

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tickgate::feed::{ClockOffset, Feed, FeedSettings, Mode};
use tickgate::gate::protocol::{answer, parse_request, write_verdict, SymbolLookup};
use tickgate::gate::verdict::judge;
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

/// A provider stream: packets of 20 full quotes over 1,000 symbols picked
/// pseudo-randomly, per-symbol and channel sequences in order, 1 us apart.
fn stream() -> Vec<(Vec<u8>, i64)> {
    let syms = symbols();
    let mut seqs = vec![0u64; SYMBOLS];
    let mut b = PacketBuilder::new();
    let session = SessionId::parse("20261201A1").unwrap();
    let mut chan = 1;
    let mut x = 0x9E37_79B9u64;
    let mut out = Vec::with_capacity(PACKETS);
    for p in 0..PACKETS {
        let now = T0 + p as i64 * 1_000;
        b.start(session, chan);
        for _ in 0..PER_PACKET {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = (x % SYMBOLS as u64) as usize;
            seqs[s] += 1;
            let px = 1_085_120_000 + (x % 1000) as i64 * 10_000;
            b.quote(&Quote::new(
                syms[s],
                seqs[s],
                (now - 300_000) as u64,
                Some(Side { px, qty: 1_000_000 }),
                Some(Side {
                    px: px + 30_000,
                    qty: 2_000_000,
                }),
            ));
        }
        chan += PER_PACKET as u64;
        out.push((b.bytes().to_vec(), now));
    }
    out
}

fn settings() -> FeedSettings {
    FeedSettings {
        mode: Mode::Full,
        clock_offset: ClockOffset::Auto,
        max_symbols: 100_000,
        ..FeedSettings::default()
    }
}

/// The calling thread's CPU time.
struct ThreadCpu;

fn thread_cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a
    // constant Linux supports for every thread.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu_now().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

fn decode<M: Measurement>(c: &mut Criterion<M>, label: &str) {
    let packets = stream();
    let mut g = c.benchmark_group(format!("decode ({label})"));
    g.throughput(Throughput::Elements((PACKETS * PER_PACKET) as u64));
    g.bench_function("parse+decode per message", |bench| {
        bench.iter(|| {
            let mut sum = 0u64;
            for (p, _) in &packets {
                let p = Packet::parse(black_box(p)).unwrap();
                for m in p.messages() {
                    if let Message::Quote(q) = m {
                        sum = sum.wrapping_add(q.seq ^ q.bid_px as u64);
                    }
                }
            }
            sum
        })
    });
    g.finish();
}

fn apply<M: Measurement>(c: &mut Criterion<M>, label: &str) {
    let packets = stream();
    let mut g = c.benchmark_group(format!("feed ({label})"));
    g.throughput(Throughput::Elements((PACKETS * PER_PACKET) as u64));
    g.bench_function("decode+apply per message (full, 1000 symbols)", |bench| {
        bench.iter_batched_ref(
            || Feed::new(settings(), 2),
            |feed| {
                for (p, now) in &packets {
                    feed.on_datagram(0, black_box(p), *now);
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("lines A+B per message (second copy duplicate)", |bench| {
        bench.iter_batched_ref(
            || Feed::new(settings(), 2),
            |feed| {
                for (p, now) in &packets {
                    feed.on_datagram(0, black_box(p), *now);
                    feed.on_datagram(1, black_box(p), *now);
                }
            },
            BatchSize::LargeInput,
        )
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
    g.finish();
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
    decode(c, "wall");
    apply(c, "wall");
    check(c, "wall");
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    decode(c, "thread cpu");
    apply(c, "thread cpu");
    check(c, "thread cpu");
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);
