//! Seeded Cboe US Equities Multicast PITCH traffic for `tickgate simulate
//! --venue cboe-pitch` (venues.md `cboe-pitch`): several units, each with
//! its own symbols and sequence numbers, one datagram per unit at a time.
//!
//! A unit's datagram starts with a Time message whenever the second
//! changed since the unit's last one; its events carry the offset within
//! that second. A session opens with a Trading Status `T` per symbol, then
//! order flow: Add Orders (long and short forms) near the top of each book,
//! executions, partial cancels (Reduce Size), Modify (price and size),
//! deletes and trades of hidden orders. The books are never crossed nor
//! locked: an order that would reach the other side rests one cent short
//! of it. Heartbeats (count 0, the unit's next sequence) rotate over the
//! units; the gap line carries a heartbeat of one unit (sequence 0) every
//! second, as Cboe's gap lines do when nobody asks for anything.
//!
//! The simulator's own channel sequence counts every unit's messages
//! together; each datagram carries its unit's sequence.

use std::collections::BTreeMap;

use super::seeded::SplitMix64;
use super::servers::SpinImage;
use super::venue_sim::{venue_symbol, VenueFlow};
use crate::capture::frame::MAX_DATAGRAM;
use crate::venue::cboe_pitch::adapter::session_id;
use crate::venue::cboe_pitch::frame::{frame, HEADER_LEN};
use crate::venue::cboe_pitch::messages::{self, Message, RawPrice, Width};
use crate::venue::nasdaq_itch::{midnight_in, new_york};
use crate::venue::LineKind;

/// Most units a simulated PITCH feed has (a unit is a u8, 0 is TCP's).
pub const MAX_UNITS: usize = 255;
/// A price in cents as PITCH's 10^-9 units.
const CENT: i64 = 10_000_000;
/// The gap line's heartbeat period.
const GAP_HEARTBEAT_NS: i64 = 1_000_000_000;

#[derive(Clone, Copy, Debug)]
struct Live {
    id: u64,
    symbol: u32,
    /// 0 buy, 1 sell.
    side: usize,
    shares: u32,
    /// Cents.
    price: u32,
}

#[derive(Debug)]
struct Unit {
    number: u8,
    /// The sequence of the unit's next message.
    next: u32,
    /// The second of the unit's last Time message this session.
    second: Option<u32>,
    /// Symbol indices of this unit.
    symbols: Vec<u32>,
    /// Trading Status messages still to send at the session's start.
    status_left: usize,
    live: Vec<Live>,
}

/// PITCH order flow over several units.
pub struct PitchFlow {
    units: Vec<Unit>,
    /// Mid price in cents and the unit of each symbol.
    mids: Vec<u32>,
    /// Live shares' order count per price, per symbol and side.
    levels: Vec<[BTreeMap<u32, u32>; 2]>,
    target_per_unit: usize,
    next_id: u64,
    next_exec: u64,
    session_index: u32,
    midnight_ns: i64,
    tz: jiff::tz::TimeZone,
    start_ns: i64,
    turn: usize,
    heartbeat_turn: usize,
    /// The unit whose End of Session is written next.
    end_turn: usize,
    gap_turn: usize,
    next_gap_t: i64,
    body: Vec<u8>,
    scratch: Vec<u8>,
}

impl PitchFlow {
    /// `symbols` symbols (`S00001`...) spread over `units` units (1..),
    /// holding about `target_orders` live orders in all.
    pub fn new(
        symbols: usize,
        units: usize,
        target_orders: usize,
        start_ns: i64,
        seed: u64,
    ) -> PitchFlow {
        let mut m = SplitMix64::new(seed ^ 0xC60E_5EED);
        let n_units = units.clamp(1, MAX_UNITS);
        let count = symbols.max(1);
        let mut units: Vec<Unit> = (0..n_units)
            .map(|u| Unit {
                number: u as u8 + 1,
                next: 1,
                second: None,
                symbols: Vec::new(),
                status_left: 0,
                live: Vec::new(),
            })
            .collect();
        for i in 0..count {
            units[i % n_units].symbols.push(i as u32);
        }
        PitchFlow {
            units,
            // $10.00 to $500.00: short prices (u16 cents) fit.
            mids: (0..count).map(|_| 1_000 + m.below(49_000) as u32).collect(),
            levels: vec![Default::default(); count],
            target_per_unit: (target_orders / n_units).max(1),
            next_id: 1,
            next_exec: 1,
            session_index: 0,
            midnight_ns: 0,
            tz: new_york(),
            start_ns,
            turn: 0,
            heartbeat_turn: 0,
            end_turn: 0,
            gap_turn: 0,
            next_gap_t: start_ns,
            body: Vec::with_capacity(MAX_DATAGRAM),
            scratch: Vec::with_capacity(64),
        }
    }

    pub fn units(&self) -> usize {
        self.units.len()
    }

    /// The best bid and offer (cents) of symbol `i`.
    pub fn best(&self, i: usize) -> (Option<u32>, Option<u32>) {
        let [bids, asks] = &self.levels[i];
        (
            bids.last_key_value().map(|(p, _)| *p),
            asks.first_key_value().map(|(p, _)| *p),
        )
    }

    fn level(&mut self, symbol: u32, side: usize, price: u32, add: bool) {
        let book = &mut self.levels[symbol as usize][side];
        if add {
            *book.entry(price).or_insert(0) += 1;
        } else if let Some(n) = book.get_mut(&price) {
            *n -= 1;
            if *n == 0 {
                book.remove(&price);
            }
        }
    }

    /// A price near the top of `side`, never reaching the other side.
    fn near(&mut self, m: &mut SplitMix64, symbol: u32, side: usize) -> u32 {
        let mid = &mut self.mids[symbol as usize];
        match m.below(16) {
            0 => *mid = mid.saturating_sub(1).max(10),
            1 => *mid = (*mid + 1).min(60_000),
            _ => {}
        }
        let mid = *mid;
        let depth = (m.next_u64().trailing_zeros() % 8) + m.below(2) as u32;
        let price = if side == 0 {
            mid.saturating_sub(1 + depth).max(1)
        } else {
            mid + 1 + depth
        };
        match (side, self.best(symbol as usize)) {
            (0, (_, Some(ask))) if price >= ask => ask.saturating_sub(1).max(1),
            (1, (Some(bid), _)) if price <= bid => bid + 1,
            _ => price,
        }
    }

    /// Appends `msg` to the datagram body if it fits.
    fn push(&mut self, msg: &Message) -> bool {
        self.scratch.clear();
        messages::encode(msg, &mut self.scratch).expect("the flow writes encodable messages");
        if HEADER_LEN + self.body.len() + self.scratch.len() > MAX_DATAGRAM {
            return false;
        }
        self.body.extend_from_slice(&self.scratch);
        true
    }

    /// The next order-flow event of unit `u` at time offset `offset`.
    fn event(&mut self, m: &mut SplitMix64, u: usize, offset: u32) -> Message {
        let unit = &self.units[u];
        let fill = unit.live.len() as f64 / self.target_per_unit as f64;
        let r = m.below(1000);
        let add_share = if fill < 0.95 { 800 } else { 400 };
        if unit.live.is_empty() || r < add_share {
            let symbol = unit.symbols[m.below(unit.symbols.len() as u64) as usize];
            let side = m.below(2) as usize;
            let price = self.near(m, symbol, side);
            self.level(symbol, side, price, true);
            let shares = 100 * (1 + m.below(10) as u32);
            let id = self.next_id;
            self.next_id += 1;
            self.units[u].live.push(Live {
                id,
                symbol,
                side,
                shares,
                price,
            });
            return Message::AddOrder {
                width: if m.chance(0.3) {
                    Width::Long
                } else {
                    Width::Short
                },
                offset,
                order_id: id,
                side: if side == 0 { b'B' } else { b'S' },
                shares,
                symbol: venue_symbol(symbol as usize),
                price: price as i64 * CENT,
                flags: 1,
            };
        }
        let len = unit.live.len() as u64;
        // Most removals hit a recent order.
        let k = if m.chance(0.9) {
            (len - 1 - m.below(len.min(2_000))) as usize
        } else {
            m.below(len) as usize
        };
        let o = unit.live[k];
        let width = if m.chance(0.3) {
            Width::Long
        } else {
            Width::Short
        };
        match r % 100 {
            0..=49 => {
                self.units[u].live.swap_remove(k);
                self.level(o.symbol, o.side, o.price, false);
                Message::DeleteOrder {
                    offset,
                    order_id: o.id,
                }
            }
            50..=64 => {
                // Modify: price and size; the side is kept.
                self.level(o.symbol, o.side, o.price, false);
                let price = self.near(m, o.symbol, o.side);
                self.level(o.symbol, o.side, price, true);
                let shares = 100 * (1 + m.below(10) as u32);
                self.units[u].live[k].price = price;
                self.units[u].live[k].shares = shares;
                Message::ModifyOrder {
                    width,
                    offset,
                    order_id: o.id,
                    shares,
                    price: price as i64 * CENT,
                    flags: 1,
                }
            }
            65..=74 if o.shares > 100 => {
                let shares = (1 + m.below(o.shares as u64 - 1)) as u32;
                self.units[u].live[k].shares -= shares;
                Message::ReduceSize {
                    width,
                    offset,
                    order_id: o.id,
                    shares,
                }
            }
            75..=84 => {
                // A trade against a hidden order: no book change.
                let exec = self.next_exec;
                self.next_exec += 1;
                Message::Trade {
                    width,
                    offset,
                    order_id: 0,
                    side: if o.side == 0 { b'B' } else { b'S' },
                    shares: 100,
                    symbol: venue_symbol(o.symbol as usize),
                    price: match width {
                        // Short prices have 2 decimals, long ones 4.
                        Width::Short => RawPrice::Short(o.price as u16),
                        _ => RawPrice::Long(o.price as u64 * 100),
                    },
                    execution_id: exec,
                }
            }
            _ => {
                let shares = if m.chance(0.5) {
                    o.shares
                } else {
                    (1 + m.below(o.shares as u64)) as u32
                };
                if shares >= o.shares {
                    self.units[u].live.swap_remove(k);
                    self.level(o.symbol, o.side, o.price, false);
                } else {
                    self.units[u].live[k].shares -= shares;
                }
                let exec = self.next_exec;
                self.next_exec += 1;
                Message::OrderExecuted {
                    offset,
                    order_id: o.id,
                    shares,
                    execution_id: exec,
                }
            }
        }
    }

    /// Seconds since New York midnight at `t`, and the ns within it.
    fn time_of(&self, t: i64) -> (u32, u32) {
        let since = (t - self.midnight_ns).max(0);
        (
            (since / 1_000_000_000) as u32,
            (since % 1_000_000_000) as u32,
        )
    }

    /// R5c: unit `unit`'s book as a spin would give it, as of the unit's
    /// last message (`None`: no message of this session yet): its Time,
    /// a Trading Status for each symbol announced, an Add Order (long
    /// form) per live order.
    pub fn spin_image(&self, unit: u8) -> Option<SpinImage> {
        let u = self.units.iter().find(|u| u.number == unit)?;
        if u.next <= 1 {
            return None;
        }
        let mut messages = Vec::with_capacity(u.live.len() + u.symbols.len() + 1);
        if let Some(seconds) = u.second {
            messages.push(Message::Time { seconds });
        }
        let announced = u.symbols.len() - u.status_left;
        for &s in u.symbols.iter().take(announced) {
            messages.push(Message::TradingStatus {
                offset: 0,
                symbol: venue_symbol(s as usize),
                status: b'T',
                reg_sho: b'0',
            });
        }
        messages.extend(u.live.iter().map(|o| Message::AddOrder {
            width: Width::Long,
            offset: 0,
            order_id: o.id,
            side: if o.side == 0 { b'B' } else { b'S' },
            shares: o.shares,
            symbol: venue_symbol(o.symbol as usize),
            price: o.price as i64 * CENT,
            flags: 1,
        }));
        Some(SpinImage {
            sequence: u.next - 1,
            messages,
        })
    }
}

impl VenueFlow for PitchFlow {
    fn start_session(&mut self, index: u32, t: i64) {
        self.session_index = index;
        self.midnight_ns = midnight_in(&self.tz, self.start_ns.max(t));
        for u in &mut self.units {
            u.next = 1;
            u.second = None;
            u.status_left = u.symbols.len();
            u.live.clear();
        }
        for l in &mut self.levels {
            l[0].clear();
            l[1].clear();
        }
    }

    fn data_packet(
        &mut self,
        m: &mut SplitMix64,
        _seq: u64,
        t: i64,
        batch: usize,
        out: &mut Vec<u8>,
    ) -> u16 {
        let u = self.turn % self.units.len();
        self.turn = self.turn.wrapping_add(1);
        let (second, offset) = self.time_of(t);
        self.body.clear();
        let mut count = 0usize;
        if self.units[u].second != Some(second) {
            self.units[u].second = Some(second);
            self.push(&Message::Time { seconds: second });
            count += 1;
        }
        let mut events = 0;
        while events < batch && count < u8::MAX as usize {
            let msg = if self.units[u].status_left > 0 {
                let unit = &mut self.units[u];
                let s = unit.symbols[unit.symbols.len() - unit.status_left];
                unit.status_left -= 1;
                Message::TradingStatus {
                    offset,
                    symbol: venue_symbol(s as usize),
                    status: b'T',
                    reg_sho: b'0',
                }
            } else {
                self.event(m, u, offset)
            };
            if !self.push(&msg) {
                // Only a message that fits is applied to the books: the
                // flow never writes one it could not send. (Each message
                // is at most 41 bytes, so a batch simply ends here.)
                break;
            }
            count += 1;
            events += 1;
        }
        let unit = &mut self.units[u];
        out.clear();
        frame(unit.number, unit.next, count as u8, &self.body, out).expect("within a datagram");
        unit.next += count as u32;
        count as u16
    }

    fn heartbeat(&mut self, _seq: u64, _t: i64, out: &mut Vec<u8>) {
        let u = &self.units[self.heartbeat_turn % self.units.len()];
        self.heartbeat_turn = self.heartbeat_turn.wrapping_add(1);
        out.clear();
        frame(u.number, u.next, 0, &[], out).expect("a header");
    }

    fn end_of_session(&mut self, _seq: u64, t: i64, out: &mut Vec<u8>) -> u16 {
        // venues.md `cboe-pitch`: each unit ends its own session; the
        // simulator asks once per unit, in turn.
        let (_, offset) = self.time_of(t);
        self.body.clear();
        self.push(&Message::EndOfSession { offset });
        let k = self.end_turn % self.units.len();
        self.end_turn = self.end_turn.wrapping_add(1);
        let u = &mut self.units[k];
        out.clear();
        frame(u.number, u.next, 1, &self.body, out).expect("within a datagram");
        u.next += 1;
        1
    }

    fn end_of_session_datagrams(&self) -> usize {
        self.units.len()
    }

    fn session_name(&self) -> String {
        session_id(self.units[0].number, self.session_index + 1).to_string()
    }

    fn live_orders(&self) -> usize {
        self.units.iter().map(|u| u.live.len()).sum()
    }

    /// Every symbol's book top as a receiver must end with it, as the
    /// gate shows a side (`<price>@<shares>`, the shares of every live
    /// order at the best price), and its unit.
    fn venue_truth(&self) -> Option<serde_json::Value> {
        let mut tops = vec![[(0u32, 0u64); 2]; self.levels.len()];
        for (i, top) in tops.iter_mut().enumerate() {
            let (bid, ask) = self.best(i);
            top[0].0 = bid.unwrap_or(0);
            top[1].0 = ask.unwrap_or(0);
        }
        for o in self.units.iter().flat_map(|u| &u.live) {
            let top = &mut tops[o.symbol as usize][o.side];
            if top.0 == o.price {
                top.1 += u64::from(o.shares);
            }
        }
        let side = |(cents, shares): (u32, u64)| {
            if shares == 0 {
                return serde_json::Value::Null;
            }
            let mut s = String::new();
            let _ = crate::wire::write_price(&mut s, i64::from(cents) * CENT);
            serde_json::Value::String(format!("{s}@{shares}"))
        };
        let symbols = self.units.iter().flat_map(|u| {
            u.symbols.iter().map(|&i| {
                let [bid, ask] = tops[i as usize];
                serde_json::json!({
                    "symbol": venue_symbol(i as usize).to_string(),
                    "unit": u.number,
                    "bid": side(bid),
                    "ask": side(ask),
                })
            })
        });
        Some(serde_json::json!({ "symbols": symbols.collect::<Vec<_>>() }))
    }

    fn loop_packet(&mut self, kind: LineKind, t: i64, out: &mut Vec<u8>) -> bool {
        if kind != LineKind::Gap || t < self.next_gap_t {
            return false;
        }
        self.next_gap_t = t + GAP_HEARTBEAT_NS;
        let u = &self.units[self.gap_turn % self.units.len()];
        self.gap_turn = self.gap_turn.wrapping_add(1);
        out.clear();
        frame(u.number, 0, 0, &[], out).expect("a header");
        true
    }

    fn spin_image(&self, unit: u8) -> Option<SpinImage> {
        PitchFlow::spin_image(self, unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind};
    use crate::venue::cboe_pitch::frame::Datagram;

    const T0: i64 = 1_784_122_200_000_000_000;

    fn flow_next(flow: &PitchFlow, unit: u8) -> u64 {
        flow.units.iter().find(|u| u.number == unit).unwrap().next as u64
    }

    #[test]
    fn datagrams_are_valid_sequenced_per_unit_and_books_uncrossed() {
        let mut flow = PitchFlow::new(30, 3, 3_000, T0, 5);
        let mut m = SplitMix64::new(9);
        let mut out = Vec::new();
        flow.start_session(0, T0);
        let mut next = [1u32; 4];
        let mut kinds = [0u64; 256];
        for i in 0..20_000 {
            let t = T0 + i * 100_000;
            let n = flow.data_packet(&mut m, 0, t, 4, &mut out);
            let d = Datagram::parse(&out).unwrap();
            assert_eq!(d.header.count as u16, n);
            assert_eq!(d.unknown, 0);
            let u = d.header.unit as usize;
            assert!((1..=3).contains(&u));
            assert_eq!(d.header.sequence, next[u], "unit {u} in sequence");
            next[u] += n as u32;
            for msg in d.messages() {
                kinds[msg[1] as usize] += 1;
            }
            for s in 0..30 {
                if let (Some(b), Some(a)) = flow.best(s) {
                    assert!(b < a, "packet {i}: symbol {s} {b} >= {a}");
                }
            }
        }
        for k in [
            0x20u8, 0x21, 0x22, 0x23, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x31,
        ] {
            assert!(kinds[k as usize] > 0, "no type 0x{k:02x}");
        }
        assert!(flow.live_orders() > 1_000);
        flow.heartbeat(0, T0, &mut out);
        let h = Datagram::parse(&out).unwrap().header;
        assert_eq!((h.count, h.sequence), (0, next[h.unit as usize]));
        assert!(flow.loop_packet(LineKind::Gap, T0, &mut out));
        let h = Datagram::parse(&out).unwrap().header;
        assert_eq!((h.count, h.sequence), (0, 0));
        assert!(!flow.loop_packet(LineKind::Gap, T0 + 999_999_999, &mut out));
        assert!(flow.loop_packet(LineKind::Gap, T0 + GAP_HEARTBEAT_NS, &mut out));
    }

    /// Unit 1 through a `cboe-pitch` feed: no book error, no unknown
    /// order, quotes never crossed; and its spin image is the feed's book.
    #[test]
    fn the_first_unit_reads_without_book_errors_and_its_spin_is_its_book() {
        let mut flow = PitchFlow::new(12, 1, 1_000, T0, 3);
        let mut m = SplitMix64::new(4);
        let mut out = Vec::new();
        flow.start_session(0, T0);
        let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::CboePitch), 1);
        for i in 0..5_000 {
            let t = T0 + i * 1_000_000;
            flow.data_packet(&mut m, 0, t, 3, &mut out);
            assert_eq!(
                feed.on_datagram(0, &out, t + 1_000),
                DatagramOutcome::Applied
            );
        }
        let c = feed.counters();
        assert_eq!(
            (
                c.invalid_packets,
                c.unknown_messages,
                c.unknown_orders,
                c.book_errors,
                c.channel_gaps
            ),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(c.live_orders, flow.live_orders() as u64);
        let image = flow.spin_image(1).unwrap();
        assert_eq!(image.sequence as u64 + 1, flow_next(&flow, 1));
        assert_eq!(image.order_count() as usize, flow.live_orders());
        assert!(flow.spin_image(2).is_none());
    }
}
