//! cboe-pitch against nasdaq-itch, per message, in the same run: one
//! day-like operation stream (`common/book_mix.rs`: 1,000,000 live orders
//! over 8,000 symbols, then adds 45%, deletes 35%, replaces 10%, partial
//! cancels 5%, executions 5%) encoded once as ITCH datagrams and once as
//! PITCH datagrams, 20 messages a datagram, each applied by its own
//! `Feed` (the engine with the venue's adapter, a publisher that does
//! nothing).
//!
//! `cargo bench --bench pitch_book -- --warm-up-time 1 --measurement-time 3`
//!
//! Both adapters apply a whole datagram at a time (`Venue::apply`), so the
//! per-message path is measured as the datagram path, divided by its
//! messages (one iteration = one message; a chunk's last datagram holds
//! the remainder):
//! - `itch decode+book+bbo`: `Feed::on_datagram` of MoldUDP64 datagrams:
//!   the engine's sequence and session rules, the ITCH adapter's message
//!   loop (its fields read in place, cache hints a message ahead), the
//!   books, then the best bid and offer of each book the datagram touched
//!   (V1), handed to the publisher;
//! - `pitch decode+book+bbo`: the same through `Feed::on_datagram` of
//!   Sequenced Unit Header datagrams (unit 1): the unit's session rules
//!   (venues.md `cboe-pitch`, rules 1-4) and lagging-copy record (C5),
//!   `messages::decode` of each message, the symbol's slot by name on
//!   every Add Order, the same `Books`, the same quotes;
//! - `itch decode` and `pitch decode`: validation of the datagram and the
//!   venue's `messages::decode` of each message, no book, no engine (the
//!   ITCH adapter reads its book messages without `decode`: this is the
//!   decoder's cost, not the adapter's).
//!
//! The stream as each venue says it: an add is ITCH Add Order `A` (its
//! locate named by the add's own stock) and PITCH Add Order short (0x22,
//! the symbol by name; every size and price of the stream fits the short
//! form); a replace is ITCH Order Replace `U` (a new reference) and PITCH
//! Modify Order short (0x28, the order keeps its id: later operations on
//! the new reference name the original id); a partial cancel is `X` and
//! Reduce Size short (0x26); an execution `E` and Order Executed (0x23); a
//! delete `D` and Delete Order (0x29). PITCH datagrams also carry a Time
//! message whenever the second changes (250 ns of stream time a message:
//! one Time every 4,000,000 messages, not counted as a measured message).
//!
//! Each runs with wall time and with the thread's CPU time (as in
//! `itch_book.rs`: on a shared machine CPU time leaves out waiting for a
//! core). Chunks of the stream are generated and encoded outside the
//! timed region.

#[path = "common/book_mix.rs"]
mod book_mix;
use book_mix::{Op, Venue, LIVE, LOCATES};

#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::{thread_cpu_now, ThreadCpu};

use criterion::measurement::Measurement;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;
use tickgate::feed::view::NoPublish;
use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind};
use tickgate::sim::venue_sim::venue_symbol;
use tickgate::venue::cboe_pitch::frame::{frame, Datagram};
use tickgate::venue::cboe_pitch::messages::{
    self as pitch, Message as PitchMessage, Width, LONG_PRICE_SCALE,
};
use tickgate::venue::nasdaq_itch::messages::{self as itch, Header, Message as ItchMessage, Side};
use tickgate::wire::{Packet, PacketBuilder, SessionId, Symbol};

const CHUNK: usize = 100_000;
const PER_DATAGRAM: usize = 20;
/// 2026-07-15 09:30 New York (13:30 UTC): the stream's first message.
const T0: i64 = 1_784_122_200_000_000_000;
/// New York midnight of that day.
const MIDNIGHT: i64 = T0 - 34_200 * 1_000_000_000;
/// Stream time between two messages.
const STEP_NS: i64 = 250;
/// A datagram arrives this long after its last message's time.
const TRANSIT_NS: i64 = 5_000;

/// Datagrams back to back in one buffer, each with its arrival time and
/// its count of measured messages.
#[derive(Default)]
struct Datagrams {
    buf: Vec<u8>,
    at: Vec<(usize, usize, i64)>,
    messages: usize,
}

impl Datagrams {
    fn clear(&mut self) {
        self.buf.clear();
        self.at.clear();
        self.messages = 0;
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], i64)> + '_ {
        self.at.iter().map(|&(s, e, now)| (&self.buf[s..e], now))
    }
}

/// A venue's encoding of the operation stream, datagram after datagram.
trait Encoder {
    const KIND: VenueKind;
    const NAME: &'static str;
    /// Appends `ops` as datagrams of at most `PER_DATAGRAM` operations.
    fn encode(&mut self, ops: &[Op], out: &mut Datagrams);
    /// The datagram's messages, decoded without a book; a sum so that
    /// nothing is left out.
    fn decode(datagram: &[u8]) -> (u64, usize);
}

struct ItchEncoder {
    session: SessionId,
    next: u64,
    t: i64,
    stocks: Vec<Symbol>,
    packet: PacketBuilder,
    scratch: Vec<u8>,
}

impl ItchEncoder {
    fn new() -> ItchEncoder {
        ItchEncoder {
            session: SessionId::parse("20260715A1").unwrap(),
            next: 1,
            t: T0,
            stocks: (0..LOCATES).map(venue_symbol).collect(),
            packet: PacketBuilder::new(),
            scratch: Vec::with_capacity(64),
        }
    }

    fn message(&self, op: &Op, ts: u64) -> ItchMessage {
        let header = |locate| Header {
            locate,
            tracking: 0,
            timestamp: ts,
        };
        match *op {
            // Locates from 1: the ITCH adapter's locate is the add's.
            Op::Add {
                locate,
                order_ref,
                side,
                shares,
                price,
            } => ItchMessage::AddOrder {
                header: header(locate + 1),
                order_ref,
                side,
                shares,
                stock: self.stocks[locate as usize],
                price,
                attribution: None,
            },
            Op::Execute { order_ref, shares } => ItchMessage::Executed {
                header: header(1),
                order_ref,
                shares,
                match_number: ts,
                price: None,
            },
            Op::Cancel { order_ref, shares } => ItchMessage::Cancel {
                header: header(1),
                order_ref,
                shares,
            },
            Op::Delete { order_ref } => ItchMessage::Delete {
                header: header(1),
                order_ref,
            },
            Op::Replace {
                original,
                new_ref,
                shares,
                price,
            } => ItchMessage::Replace {
                header: header(1),
                original,
                new_ref,
                shares,
                price,
            },
        }
    }
}

impl Encoder for ItchEncoder {
    const KIND: VenueKind = VenueKind::NasdaqItch;
    const NAME: &'static str = "itch";

    fn encode(&mut self, ops: &[Op], out: &mut Datagrams) {
        for chunk in ops.chunks(PER_DATAGRAM) {
            self.packet.start(self.session, self.next);
            for op in chunk {
                self.t += STEP_NS;
                self.scratch.clear();
                let ts = (self.t - MIDNIGHT) as u64;
                itch::encode(&self.message(op, ts), &mut self.scratch);
                self.packet.push_raw(&self.scratch);
            }
            self.next += chunk.len() as u64;
            let start = out.buf.len();
            out.buf.extend_from_slice(self.packet.bytes());
            out.at.push((start, out.buf.len(), self.t + TRANSIT_NS));
            out.messages += chunk.len();
        }
    }

    fn decode(datagram: &[u8]) -> (u64, usize) {
        let p = Packet::parse_with(datagram, |k| itch::message_size(k).unwrap_or(1)).unwrap();
        let (mut sum, mut n) = (0u64, 0);
        for b in p.blocks() {
            let m = itch::decode(b).unwrap();
            sum = sum.wrapping_add(m.timestamp() ^ m.locate() as u64);
            n += 1;
        }
        (sum, n)
    }
}

struct PitchEncoder {
    /// The unit's next sequence.
    next: u32,
    t: i64,
    /// The second of the last Time message.
    second: Option<u32>,
    symbols: Vec<Symbol>,
    /// PITCH order id by ITCH reference, for the orders a Modify kept
    /// (ITCH gives a replaced order a new reference, PITCH does not).
    ids: HashMap<u64, u64>,
    execution: u64,
    body: Vec<u8>,
}

impl PitchEncoder {
    fn new() -> PitchEncoder {
        PitchEncoder {
            next: 1,
            t: T0,
            second: None,
            symbols: (0..LOCATES).map(venue_symbol).collect(),
            ids: HashMap::new(),
            execution: 1,
            body: Vec::with_capacity(1500),
        }
    }

    fn id(&self, order_ref: u64) -> u64 {
        self.ids.get(&order_ref).copied().unwrap_or(order_ref)
    }

    fn message(&mut self, op: &Op, offset: u32) -> PitchMessage {
        // ITCH prices have 4 decimals, PITCH's decoded ones 9.
        let scaled = |price: u32| price as i64 * LONG_PRICE_SCALE;
        // The short forms when size and price fit, as Cboe sends them.
        let width = |shares: u32, price: u32| {
            if shares <= u16::MAX as u32
                && price.is_multiple_of(100)
                && price / 100 <= u16::MAX as u32
            {
                Width::Short
            } else {
                Width::Long
            }
        };
        match *op {
            Op::Add {
                locate,
                order_ref,
                side,
                shares,
                price,
            } => PitchMessage::AddOrder {
                width: width(shares, price),
                offset,
                order_id: order_ref,
                side: match side {
                    Side::Buy => b'B',
                    Side::Sell => b'S',
                },
                shares,
                symbol: self.symbols[locate as usize],
                price: scaled(price),
                flags: 1,
            },
            Op::Execute { order_ref, shares } => {
                self.execution += 1;
                PitchMessage::OrderExecuted {
                    offset,
                    order_id: self.id(order_ref),
                    shares,
                    execution_id: self.execution,
                }
            }
            Op::Cancel { order_ref, shares } => PitchMessage::ReduceSize {
                width: width(shares, 0),
                offset,
                order_id: self.id(order_ref),
                shares,
            },
            Op::Delete { order_ref } => {
                let order_id = self.ids.remove(&order_ref).unwrap_or(order_ref);
                PitchMessage::DeleteOrder { offset, order_id }
            }
            Op::Replace {
                original,
                new_ref,
                shares,
                price,
            } => {
                let order_id = self.ids.remove(&original).unwrap_or(original);
                self.ids.insert(new_ref, order_id);
                PitchMessage::ModifyOrder {
                    width: width(shares, price),
                    offset,
                    order_id,
                    shares,
                    price: scaled(price),
                    flags: 1,
                }
            }
        }
    }
}

impl Encoder for PitchEncoder {
    const KIND: VenueKind = VenueKind::CboePitch;
    const NAME: &'static str = "pitch";

    fn encode(&mut self, ops: &[Op], out: &mut Datagrams) {
        for chunk in ops.chunks(PER_DATAGRAM) {
            self.body.clear();
            let mut count = 0u8;
            for op in chunk {
                self.t += STEP_NS;
                let since = self.t - MIDNIGHT;
                let second = (since / 1_000_000_000) as u32;
                if self.second != Some(second) {
                    self.second = Some(second);
                    pitch::encode(&PitchMessage::Time { seconds: second }, &mut self.body).unwrap();
                    count += 1;
                }
                let msg = self.message(op, (since % 1_000_000_000) as u32);
                pitch::encode(&msg, &mut self.body).unwrap();
                count += 1;
            }
            let start = out.buf.len();
            frame(1, self.next, count, &self.body, &mut out.buf).unwrap();
            self.next += count as u32;
            out.at.push((start, out.buf.len(), self.t + TRANSIT_NS));
            out.messages += chunk.len();
        }
    }

    fn decode(datagram: &[u8]) -> (u64, usize) {
        let d = Datagram::parse(datagram).unwrap();
        let (mut sum, mut n) = (0u64, 0);
        for m in d.messages() {
            let m = pitch::decode(m).unwrap();
            sum = sum.wrapping_add(m.time_offset().unwrap_or(0) as u64 ^ m.kind() as u64);
            n += 1;
        }
        (sum, n)
    }
}

fn wall_now() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// A feed of `E`'s venue holding the stream's initial 1,000,000 orders.
fn loaded<E: Encoder>(venue: &mut Venue, enc: &mut E) -> Feed<NoPublish> {
    let mut feed = Feed::new(FeedSettings::for_venue(E::KIND), 1);
    let mut d = Datagrams::default();
    enc.encode(&venue.preload(), &mut d);
    for (p, now) in d.iter() {
        assert_eq!(feed.on_datagram(0, p, now), DatagramOutcome::Applied);
    }
    assert_eq!(feed.counters().live_orders, LIVE as u64, "{}", E::NAME);
    feed
}

/// The stream so far applied whole: no order unknown, refused or lost.
fn check(name: &str, feed: &Feed<NoPublish>) {
    let c = feed.counters();
    eprintln!(
        "{name}: {} live orders, {} symbols",
        c.live_orders,
        feed.symbol_count()
    );
    assert_eq!(
        (
            c.invalid_packets,
            c.invalid_messages,
            c.unknown_messages,
            c.unknown_orders,
            c.order_conflicts,
            c.book_errors,
            c.prices_unbookable,
            c.channel_messages_lost,
        ),
        (0, 0, 0, 0, 0, 0, 0, 0),
        "{name}"
    );
}

fn path<E: Encoder, M: Measurement<Value = Duration>>(
    g: &mut BenchmarkGroup<'_, M>,
    mut enc: E,
    clock: fn() -> Duration,
) {
    // Loaded on the first call: criterion calls only the benches its
    // filter selects.
    let mut state: Option<(Venue, Feed<NoPublish>)> = None;
    let mut ops = Vec::with_capacity(CHUNK);
    let mut d = Datagrams::default();
    g.bench_function(format!("{} decode+book+bbo", E::NAME), |bench| {
        let (venue, feed) = state.get_or_insert_with(|| {
            let mut venue = Venue::new();
            let feed = loaded(&mut venue, &mut enc);
            (venue, feed)
        });
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters as usize;
            while left > 0 {
                let n = left.min(CHUNK);
                venue.fill(&mut ops, n);
                d.clear();
                enc.encode(&ops, &mut d);
                let start = clock();
                for (p, now) in d.iter() {
                    feed.on_datagram(0, black_box(p), now);
                }
                total += clock().saturating_sub(start);
                left -= n;
            }
            total
        });
    });
    if let Some((_, feed)) = &state {
        check(E::NAME, feed);
    }
}

fn decode<E: Encoder, M: Measurement<Value = Duration>>(
    g: &mut BenchmarkGroup<'_, M>,
    mut enc: E,
    clock: fn() -> Duration,
) {
    let mut d = Datagrams::default();
    let mut at = 0usize;
    let mut sum = 0u64;
    g.bench_function(format!("{} decode", E::NAME), |bench| {
        if d.at.is_empty() {
            let mut ops = Vec::new();
            Venue::new().fill(&mut ops, CHUNK);
            enc.encode(&ops, &mut d);
        }
        bench.iter_custom(|iters| {
            // Whole datagrams: the time of the messages decoded, scaled
            // to `iters` of them.
            let mut done = 0u64;
            let start = clock();
            while done < iters {
                let (s, n) = E::decode(black_box(&d.buf[d.at[at].0..d.at[at].1]));
                sum = sum.wrapping_add(s);
                done += n as u64;
                at = (at + 1) % d.at.len();
            }
            let took = clock().saturating_sub(start);
            took.mul_f64(iters as f64 / done as f64)
        });
    });
    black_box(sum);
}

fn both<M: Measurement<Value = Duration>>(
    c: &mut Criterion<M>,
    label: &str,
    clock: fn() -> Duration,
) {
    let mut g = c.benchmark_group(format!("itch vs pitch ({label})"));
    g.throughput(Throughput::Elements(1));
    path(&mut g, ItchEncoder::new(), clock);
    path(&mut g, PitchEncoder::new(), clock);
    decode(&mut g, ItchEncoder::new(), clock);
    decode(&mut g, PitchEncoder::new(), clock);
    g.finish();
}

fn wall(c: &mut Criterion) {
    both(c, "wall", wall_now);
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    both(c, "thread cpu", thread_cpu_now);
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);
