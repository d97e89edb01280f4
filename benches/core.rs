//! Core benchmarks: wire decode per message, decode + apply per message over
//! a realistic stream (1,000 symbols, 20 quotes per packet, full feed), the
//! same stream on lines A and B, and the in-process check.
//!
//! `cargo bench --bench core -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use tickgate::feed::{ClockOffset, Feed, FeedSettings, Mode};
use tickgate::gate::protocol::{answer, write_verdict, SymbolLookup};
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

fn decode(c: &mut Criterion) {
    let packets = stream();
    let mut g = c.benchmark_group("decode");
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

fn apply(c: &mut Criterion) {
    let packets = stream();
    let mut g = c.benchmark_group("feed");
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

fn check(c: &mut Criterion) {
    let packets = stream();
    let mut feed = Feed::new(settings(), 2);
    for (p, now) in &packets {
        feed.on_datagram(0, p, *now);
    }
    let now = packets.last().unwrap().1 + 1_000;
    let sym = Symbol::parse("S00421").unwrap();
    let feeds: [&dyn SymbolLookup; 1] = [&feed];
    let mut out = Vec::with_capacity(256);
    let mut g = c.benchmark_group("check");
    g.throughput(Throughput::Elements(1));
    g.bench_function("judge", |bench| {
        let (view, fv, t) = feed.lookup(sym).unwrap();
        bench.iter(|| judge(Some(black_box(&view)), black_box(&fv), black_box(now), &t))
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

criterion_group!(benches, decode, apply, check);
criterion_main!(benches);
