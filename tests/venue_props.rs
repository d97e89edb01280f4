//! Property tests of the venue adapters (venues.md) through the public
//! `Feed`: arbitrary and mutated datagrams never panic and an invalid one
//! changes nothing (no counter but the invalid ones, no symbol, no book),
//! nor do cache hints for any bytes;
//! and on nasdaq-itch the quote of every symbol equals the best bid and
//! offer of a naive model of the live orders after every packet.

use std::collections::HashMap;

use proptest::prelude::*;
use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind};
use tickgate::venue::iex_tops::SegmentBuilder;
use tickgate::venue::nasdaq_itch::messages::{self, Header, Message, Side as ItchSide};
use tickgate::wire::{PacketBuilder, SessionId, Side, Symbol};

const T0: i64 = 1_784_122_200_000_000_000;

fn sym(i: u8) -> Symbol {
    Symbol::parse(&format!("S{i}")).unwrap()
}

/// Everything observable of a feed except the invalid-datagram counters.
fn state(f: &Feed) -> String {
    let mut c = f.counters().clone();
    c.invalid_packets = 0;
    for l in &mut c.lines {
        l.invalid_packets = 0;
    }
    let symbols: Vec<_> = f.symbols().collect();
    format!(
        "{c:?} {:?} {symbols:?} {:?} {:?}",
        f.feed_view(),
        f.message_types().map(|t| t.to_vec()),
        f.last_header()
    )
}

/// Mutations of a valid datagram: truncated, one byte changed, bytes added.
fn mutate(d: Vec<u8>, how: u8, at: usize, byte: u8) -> Vec<u8> {
    let mut d = d;
    match how % 4 {
        0 => d.truncate(at % (d.len() + 1)),
        1 if !d.is_empty() => {
            let i = at % d.len();
            d[i] ^= byte | 1;
        }
        2 => d.insert(at % (d.len() + 1), byte),
        _ => {}
    }
    d
}

fn check_invalid_changes_nothing(venue: VenueKind, datagrams: &[(Vec<u8>, usize)]) {
    let mut f = Feed::new(
        FeedSettings {
            venue: tickgate::feed::VenueSettings {
                kind: venue,
                max_orders: 64,
                ..Default::default()
            },
            ..FeedSettings::for_venue(venue)
        },
        2,
    );
    for (i, (d, line)) in datagrams.iter().enumerate() {
        let before = state(&f);
        // Cache hints take any bytes (the datagram's blocks, or the whole
        // datagram read as blocks) and change nothing.
        f.prefetch_blocks(d.get(20..).unwrap_or_default());
        f.prefetch_blocks(d);
        assert_eq!(state(&f), before, "hints for datagram {i} changed state");
        let out = f.on_datagram(*line, d, T0 + i as i64 * 1_000_000);
        if let DatagramOutcome::Invalid(_) = out {
            assert_eq!(
                state(&f),
                before,
                "datagram {i} was invalid yet changed state"
            );
        }
    }
}

// ------------------------------------------------------------------- IEX

fn iex_message() -> impl Strategy<Value = (u8, u8, u8, u32, i64, i64, u32)> {
    (
        0u8..7,
        0u8..4,
        any::<u8>(),
        0u32..500,
        1i64..3_000_000,
        1i64..3_000_000,
        0u32..500,
    )
}

fn iex_segment() -> impl Strategy<Value = Vec<u8>> {
    (
        1u32..3,
        1u64..40,
        prop::collection::vec(iex_message(), 0..5),
    )
        .prop_map(|(session, seq, msgs)| {
            let mut b = SegmentBuilder::new();
            b.start(session, seq, T0);
            for (kind, s, flags, bs, bp, ap, asz) in msgs {
                let symbol = sym(s);
                match kind {
                    0 | 1 => {
                        b.quote_update(flags & 0xC0, T0, symbol, bs, bp, ap, asz);
                    }
                    2 => {
                        b.trading_status(b"HOPTX"[flags as usize % 5], T0, symbol, *b"NONE");
                    }
                    3 => {
                        b.operational_halt(b"ONX"[flags as usize % 3], T0, symbol);
                    }
                    4 => {
                        b.system_event(b"OSRMEC"[flags as usize % 6], T0);
                    }
                    5 => {
                        // a known type that changes no quote (Trade Report)
                        b.raw(&[b'T'; 38]);
                    }
                    _ => {
                        // an unknown type, skipped by length
                        b.raw(&[b'Z', flags]);
                    }
                }
            }
            b.bytes().to_vec()
        })
}

fn any_datagram(valid: BoxedStrategy<Vec<u8>>) -> impl Strategy<Value = (Vec<u8>, usize)> {
    let mutated = (valid.clone(), any::<u8>(), any::<usize>(), any::<u8>())
        .prop_map(|(d, how, at, byte)| mutate(d, how, at, byte));
    (
        prop_oneof![
            3 => valid,
            3 => mutated,
            1 => prop::collection::vec(any::<u8>(), 0..120),
        ],
        0usize..2,
    )
}

proptest! {
    #[test]
    fn iex_invalid_datagrams_change_nothing(
        datagrams in prop::collection::vec(any_datagram(iex_segment().boxed()), 1..40)
    ) {
        check_invalid_changes_nothing(VenueKind::IexTops, &datagrams);
    }
}

// ------------------------------------------------------------------ ITCH

/// One ITCH operation over few locates, refs and prices.
#[derive(Clone, Copy, Debug)]
enum Op {
    Add {
        locate: u16,
        r: u64,
        buy: bool,
        shares: u32,
        price: u32,
    },
    Exec {
        r: u64,
        shares: u32,
    },
    Cancel {
        r: u64,
        shares: u32,
    },
    Delete {
        r: u64,
    },
    Replace {
        r: u64,
        new: u64,
        shares: u32,
        price: u32,
    },
    Halt {
        locate: u16,
        state: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let locate = 1u16..4;
    let r = 1u64..12;
    prop_oneof![
        4 => (locate.clone(), r.clone(), any::<bool>(), 0u32..300, 100u32..106)
            .prop_map(|(locate, r, buy, shares, price)| Op::Add { locate, r, buy, shares, price }),
        2 => (r.clone(), 0u32..300).prop_map(|(r, shares)| Op::Exec { r, shares }),
        1 => (r.clone(), 0u32..300).prop_map(|(r, shares)| Op::Cancel { r, shares }),
        2 => r.clone().prop_map(|r| Op::Delete { r }),
        2 => (r.clone(), 1u64..12, 0u32..300, 100u32..106)
            .prop_map(|(r, new, shares, price)| Op::Replace { r, new, shares, price }),
        1 => (locate, 0u8..4).prop_map(|(locate, s)| Op::Halt { locate, state: b"HPQT"[s as usize] }),
    ]
}

fn hdr(locate: u16) -> Header {
    Header {
        locate,
        tracking: 0,
        timestamp: 34_200_000_000_000,
    }
}

fn encode(op: &Op) -> Vec<u8> {
    let m = match *op {
        Op::Add {
            locate,
            r,
            buy,
            shares,
            price,
        } => Message::AddOrder {
            header: hdr(locate),
            order_ref: r,
            side: if buy { ItchSide::Buy } else { ItchSide::Sell },
            shares,
            stock: sym(locate as u8),
            price,
            attribution: None,
        },
        Op::Exec { r, shares } => Message::Executed {
            header: hdr(0),
            order_ref: r,
            shares,
            match_number: 1,
            price: None,
        },
        Op::Cancel { r, shares } => Message::Cancel {
            header: hdr(0),
            order_ref: r,
            shares,
        },
        Op::Delete { r } => Message::Delete {
            header: hdr(0),
            order_ref: r,
        },
        Op::Replace {
            r,
            new,
            shares,
            price,
        } => Message::Replace {
            header: hdr(0),
            original: r,
            new_ref: new,
            shares,
            price,
        },
        Op::Halt { locate, state } => Message::TradingAction {
            header: hdr(locate),
            stock: sym(locate as u8),
            state,
            reason: *b"    ",
        },
    };
    messages::encode_to_vec(&m)
}

fn itch_packet(session: &str, seq: u64, ops: &[Op]) -> Vec<u8> {
    let mut b = PacketBuilder::new();
    b.start(SessionId::parse(session).unwrap(), seq);
    for o in ops {
        b.push_raw(&encode(o));
    }
    b.bytes().to_vec()
}

fn itch_datagram() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec!["S1", "S2"]),
        1u64..30,
        prop::collection::vec(op(), 0..5),
    )
        .prop_map(|(s, seq, ops)| itch_packet(s, seq, &ops))
}

/// The naive model: live orders by ref, as venues.md describes the book.
#[derive(Default)]
struct Model {
    orders: HashMap<u64, (u16, bool, u32, u32)>,
}

impl Model {
    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Add {
                locate,
                r,
                buy,
                shares,
                price,
            } => {
                if shares > 0 && !self.orders.contains_key(&r) {
                    self.orders.insert(r, (locate, buy, shares, price));
                }
            }
            Op::Exec { r, shares } | Op::Cancel { r, shares } => {
                if let Some(o) = self.orders.get_mut(&r) {
                    if shares >= o.2 {
                        self.orders.remove(&r);
                    } else {
                        o.2 -= shares;
                    }
                }
            }
            Op::Delete { r } => {
                self.orders.remove(&r);
            }
            Op::Replace {
                r,
                new,
                shares,
                price,
            } => {
                if let Some((locate, buy, _, _)) = self.orders.remove(&r) {
                    if shares > 0 && !self.orders.contains_key(&new) {
                        self.orders.insert(new, (locate, buy, shares, price));
                    }
                }
            }
            Op::Halt { .. } => {}
        }
    }

    /// Best bid and offer of `locate` by a full scan, at the 10^-9 scale.
    fn bbo(&self, locate: u16) -> (Option<Side>, Option<Side>) {
        let best = |buy: bool| {
            let px = self
                .orders
                .values()
                .filter(|o| o.0 == locate && o.1 == buy)
                .map(|o| o.3)
                .reduce(|a, b| if buy { a.max(b) } else { a.min(b) })?;
            let qty = self
                .orders
                .values()
                .filter(|o| o.0 == locate && o.1 == buy && o.3 == px)
                .map(|o| o.2 as u64)
                .sum();
            Some(Side {
                px: px as i64 * 100_000,
                qty,
            })
        };
        (best(true), best(false))
    }
}

proptest! {
    #[test]
    fn itch_invalid_datagrams_change_nothing(
        datagrams in prop::collection::vec(any_datagram(itch_datagram().boxed()), 1..40)
    ) {
        check_invalid_changes_nothing(VenueKind::NasdaqItch, &datagrams);
    }

    /// One session from sequence 1, packets in order on one line: after
    /// every packet each symbol's quote is its book's BBO by full scan.
    #[test]
    fn itch_quotes_equal_a_full_scan_of_the_live_orders(
        packets in prop::collection::vec(prop::collection::vec(op(), 1..6), 1..30)
    ) {
        let mut f = Feed::new(FeedSettings::for_venue(VenueKind::NasdaqItch), 1);
        let mut model = Model::default();
        let mut seq = 1;
        for (i, ops) in packets.iter().enumerate() {
            let d = itch_packet("S1", seq, ops);
            seq += ops.len() as u64;
            prop_assert_eq!(f.on_datagram(0, &d, T0 + i as i64 * 1_000), DatagramOutcome::Applied);
            for o in ops {
                model.apply(o);
            }
            for locate in 1u16..4 {
                let (bid, ask) = model.bbo(locate);
                match f.symbol_summary(sym(locate as u8)) {
                    Some(s) if s.has_quote => {
                        prop_assert_eq!((s.bid, s.ask), (bid, ask), "locate {}", locate);
                    }
                    // Never quoted: its book never had a best.
                    _ => prop_assert_eq!((bid, ask), (None, None), "locate {}", locate),
                }
            }
            prop_assert_eq!(f.counters().live_orders, model.orders.len() as u64);
        }
    }
}
