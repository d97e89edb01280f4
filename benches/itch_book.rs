//! ITCH book benchmarks on a day-like mix: 1,000,000 live orders over
//! 8,000 locates (about 62 per side, prices within 50 ticks of a
//! per-symbol mid), the table sized for the default `max_orders` of
//! 10,000,000, then a stream of adds (45%), deletes (35%), replaces (10%),
//! partial cancels (5%) and executions (5%) near the top of book, refs
//! sequential, half of the activity on 100 hot symbols (the stream:
//! `common/book_mix.rs`, shared with `pitch_book.rs`).
//!
//! `cargo bench --bench itch_book -- --warm-up-time 1 --measurement-time 3`
//!
//! Per message (one iteration = one operation):
//! - `book`: `Books` operations alone, the stream pre-built as values;
//! - `table (Sequential|Scattered)`: the same stream against the order
//!   table alone (no levels), for both ref hashes: the split between
//!   order-table work and level work, and the measurement behind
//!   `Sequential`;
//! - `decode`: ITCH decode alone of the same stream, encoded;
//! - `decode+book+bbo`: decode, apply, then read the BBO of the locate the
//!   message changed (the adapter's per-message path).
//!
//! Each runs with wall time and with the thread's CPU time (as in
//! `benches/core.rs`: on a shared machine CPU time leaves out waiting for
//! a core). Chunks of the stream are generated outside the timed region.

#[path = "common/book_mix.rs"]
mod book_mix;
use book_mix::{Op, Venue, LIVE};

#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::{thread_cpu_now, ThreadCpu};

use criterion::measurement::Measurement;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tickgate::venue::nasdaq_itch::book::Books;
use tickgate::venue::nasdaq_itch::messages::{decode, encode, Header, Message};
use tickgate::venue::nasdaq_itch::orders::{Order, OrderTable, RefHash, Scattered, Sequential};
use tickgate::wire::Symbol;

const MAX_ORDERS: usize = 10_000_000;
const CHUNK: usize = 100_000;

/// `op` as an ITCH message; every add names `stock`.
fn message(op: &Op, stock: Symbol, ts: u64) -> Message {
    let header = |locate| Header {
        locate,
        tracking: 0,
        timestamp: ts,
    };
    match *op {
        Op::Add {
            locate,
            order_ref,
            side,
            shares,
            price,
        } => Message::AddOrder {
            header: header(locate),
            order_ref,
            side,
            shares,
            stock,
            price,
            attribution: None,
        },
        Op::Execute { order_ref, shares } => Message::Executed {
            header: header(1),
            order_ref,
            shares,
            match_number: ts,
            price: None,
        },
        Op::Cancel { order_ref, shares } => Message::Cancel {
            header: header(1),
            order_ref,
            shares,
        },
        Op::Delete { order_ref } => Message::Delete {
            header: header(1),
            order_ref,
        },
        Op::Replace {
            original,
            new_ref,
            shares,
            price,
        } => Message::Replace {
            header: header(1),
            original,
            new_ref,
            shares,
            price,
        },
    }
}

/// The ops as ITCH messages back to back, with their offsets.
fn encode_ops(ops: &[Op], buf: &mut Vec<u8>, offs: &mut Vec<u32>) {
    let stock = Symbol::parse("BENCH").unwrap();
    buf.clear();
    offs.clear();
    for (i, op) in ops.iter().enumerate() {
        offs.push(buf.len() as u32);
        encode(&message(op, stock, 34_200_000_000_000 + i as u64), buf);
    }
}

fn apply(books: &mut Books, op: &Op) -> u16 {
    match *op {
        Op::Add {
            locate,
            order_ref,
            side,
            shares,
            price,
        } => {
            books.add(locate, order_ref, side, shares, price).unwrap();
            locate
        }
        Op::Execute { order_ref, shares } | Op::Cancel { order_ref, shares } => {
            books.reduce(order_ref, shares).unwrap().locate
        }
        Op::Delete { order_ref } => books.delete(order_ref).unwrap().locate,
        Op::Replace {
            original,
            new_ref,
            shares,
            price,
        } => {
            books
                .replace(original, new_ref, shares, price)
                .unwrap()
                .locate
        }
    }
}

/// The decode + book + BBO path of one message: what the adapter does,
/// less the quote bookkeeping.
#[inline]
fn apply_message(books: &mut Books, msg: &[u8]) -> u64 {
    let eff = match decode(msg) {
        Some(Message::AddOrder {
            header,
            order_ref,
            side,
            shares,
            price,
            ..
        }) => books
            .add(header.locate, order_ref, side, shares, price)
            .map(|()| header.locate),
        Some(Message::Executed {
            order_ref, shares, ..
        })
        | Some(Message::Cancel {
            order_ref, shares, ..
        }) => books.reduce(order_ref, shares).map(|e| e.locate),
        Some(Message::Delete { order_ref, .. }) => books.delete(order_ref).map(|e| e.locate),
        Some(Message::Replace {
            original,
            new_ref,
            shares,
            price,
            ..
        }) => books
            .replace(original, new_ref, shares, price)
            .map(|e| e.locate),
        _ => unreachable!(),
    };
    let bbo = books.best(eff.unwrap());
    bbo.bid.map_or(0, |l| l.price as u64 ^ l.shares) ^ bbo.ask.map_or(0, |l| l.price as u64)
}

fn table_apply<H: RefHash>(t: &mut OrderTable<H>, op: &Op) {
    let level = 1;
    match *op {
        Op::Add {
            order_ref, shares, ..
        } => {
            let s = t.probe(order_ref).unwrap_err();
            t.insert_at(s, order_ref, Order { shares, level });
        }
        Op::Execute { order_ref, shares } | Op::Cancel { order_ref, shares } => {
            let s = t.probe(order_ref).unwrap();
            let o = t.at(s);
            if shares >= o.shares {
                t.remove_at(s);
            } else {
                t.set_shares(s, o.shares - shares);
            }
        }
        Op::Delete { order_ref } => t.remove_at(t.probe(order_ref).unwrap()),
        Op::Replace {
            original,
            new_ref,
            shares,
            ..
        } => {
            t.remove_at(t.probe(original).unwrap());
            let s = t.probe(new_ref).unwrap_err();
            t.insert_at(s, new_ref, Order { shares, level });
        }
    }
}

fn loaded() -> (Venue, Books) {
    let mut venue = Venue::new();
    let mut books = Books::new(MAX_ORDERS);
    let mem0 = vm_status();
    for op in venue.preload() {
        apply(&mut books, &op);
    }
    assert_eq!(books.live_orders(), LIVE);
    eprintln!(
        "books: {} live orders, {} levels; max_orders {MAX_ORDERS}: {} table slots; \
         after new: {mem0}; loaded: {}",
        books.live_orders(),
        books.live_levels(),
        books.orders().capacity(),
        vm_status()
    );
    (venue, books)
}

/// VmSize and VmRSS of this process, from /proc.
fn vm_status() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .filter(|l| l.starts_with("VmSize") || l.starts_with("VmRSS"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `work` over `iters` operations of the venue's stream in chunks;
/// only `work` is timed.
fn timed(
    iters: u64,
    clock: fn() -> Duration,
    venue: &mut Venue,
    ops: &mut Vec<Op>,
    mut work: impl FnMut(&Venue, &[Op]),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(CHUNK);
        venue.fill(ops, n);
        let start = clock();
        work(venue, ops);
        total += clock().saturating_sub(start);
        left -= n;
    }
    total
}

fn wall_now() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

fn table<H: RefHash, M: Measurement<Value = Duration>>(
    c: &mut Criterion<M>,
    label: &str,
    name: &str,
    clock: fn() -> Duration,
) {
    // State lives across criterion's calls of the routine: set up once.
    let mut venue = Venue::new();
    let mut t = OrderTable::<H>::new(MAX_ORDERS);
    for op in venue.preload() {
        table_apply(&mut t, &op);
    }
    let mut ops = Vec::with_capacity(CHUNK);
    let mut g = c.benchmark_group(format!("itch table ({label})"));
    g.throughput(Throughput::Elements(1));
    g.bench_function(format!("order table alone, {name}"), |bench| {
        bench.iter_custom(|iters| {
            timed(iters, clock, &mut venue, &mut ops, |_, ops| {
                for op in ops {
                    table_apply(&mut t, black_box(op));
                }
            })
        });
    });
    g.finish();
    eprintln!(
        "{name}: {} live, refs up to {}, mean displacement {:.3} slots",
        t.len(),
        venue.next_ref,
        t.total_displacement() as f64 / t.len() as f64
    );
}

fn book<M: Measurement<Value = Duration>>(
    c: &mut Criterion<M>,
    label: &str,
    clock: fn() -> Duration,
) {
    let mut g = c.benchmark_group(format!("itch book ({label})"));
    g.throughput(Throughput::Elements(1));
    {
        let (mut venue, mut books) = loaded();
        let mut ops = Vec::with_capacity(CHUNK);
        let mut sum = 0u64;
        g.bench_function("book op (1M live, 8k locates)", |bench| {
            bench.iter_custom(|iters| {
                timed(iters, clock, &mut venue, &mut ops, |_, ops| {
                    for op in ops {
                        sum = sum.wrapping_add(apply(&mut books, black_box(op)) as u64);
                    }
                })
            });
        });
        black_box(sum);
        eprintln!(
            "after book op: {} live, {} levels, refs up to {}",
            books.live_orders(),
            books.live_levels(),
            venue.next_ref
        );
    }
    {
        let mut venue = Venue::new();
        let mut ops = Vec::new();
        venue.fill(&mut ops, CHUNK);
        let (mut buf, mut offs) = (Vec::new(), Vec::new());
        encode_ops(&ops, &mut buf, &mut offs);
        let mut sum = 0u64;
        let mut at = 0usize;
        g.bench_function("decode", |bench| {
            bench.iter(|| {
                let m = decode(black_box(&buf[offs[at] as usize..])).unwrap();
                at = (at + 1) % offs.len();
                sum = sum.wrapping_add(m.timestamp());
            });
        });
        black_box(sum);
    }
    {
        let (mut venue, mut books) = loaded();
        let mut ops = Vec::with_capacity(CHUNK);
        let (mut buf, mut offs) = (Vec::new(), Vec::new());
        let mut sum = 0u64;
        g.bench_function("decode+book+bbo (1M live, 8k locates)", |bench| {
            bench.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters as usize;
                while left > 0 {
                    let n = left.min(CHUNK);
                    venue.fill(&mut ops, n);
                    encode_ops(&ops, &mut buf, &mut offs);
                    let start = clock();
                    for &o in &offs {
                        sum = sum
                            .wrapping_add(apply_message(&mut books, black_box(&buf[o as usize..])));
                    }
                    total += clock().saturating_sub(start);
                    left -= n;
                }
                total
            });
        });
        black_box(sum);
    }
    g.finish();
}

fn wall(c: &mut Criterion) {
    book(c, "wall", wall_now);
    table::<Sequential, _>(c, "wall", "Sequential (ref & mask)", wall_now);
    table::<Scattered, _>(c, "wall", "Scattered (Fibonacci)", wall_now);
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    book(c, "thread cpu", thread_cpu_now);
    table::<Sequential, _>(c, "thread cpu", "Sequential (ref & mask)", thread_cpu_now);
    table::<Scattered, _>(c, "thread cpu", "Scattered (Fibonacci)", thread_cpu_now);
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);
