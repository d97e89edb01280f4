//! Seeded synthetic venue traffic for `tickgate simulate --venue` and the
//! benchmarks: what a provider writes into each packet. The simulator
//! (`simulate.rs`) owns the schedule, the lines and their faults; a
//! `VenueFlow` only fills packets, so every fault works on every venue.
//!
//! - `ItchFlow`: Nasdaq TotalView-ITCH 5.0 over MoldUDP64. A session opens
//!   with System Event `O` and a Stock Directory per symbol, then realistic
//!   order flow: adds near the top of each book, partial and full
//!   executions, partial cancels, replaces, deletes, trades, and halts with
//!   their resumptions; the live order count is held around a target.
//! - `IexFlow`: IEX TOPS 1.6 over IEX-TP. A session opens with System
//!   Events and a Trading Status `T` per symbol, then Quote Updates, trade
//!   reports and halts with resumptions; heartbeats and System Event `C`.

use super::seeded::SplitMix64;
use crate::capture::frame::MAX_DATAGRAM;
use crate::venue::iex_tops::SegmentBuilder;
use crate::venue::nasdaq_itch::messages::{self, Header, Message, Side};
use crate::venue::nasdaq_itch::{midnight_in, new_york};
use crate::venue::LineKind;
use crate::wire::{PacketBuilder, SessionId, Symbol, COUNT_END_OF_SESSION, HEADER_LEN};

/// What a venue writes into the provider's packets.
pub trait VenueFlow: Send {
    /// A session starts at `t` (index 0 first; sequences restart at 1).
    fn start_session(&mut self, index: u32, t: i64);
    /// One data packet of at most `batch` messages, the first with
    /// channel sequence `seq`, sent at `t`, into `out`; returns the count.
    fn data_packet(
        &mut self,
        m: &mut SplitMix64,
        seq: u64,
        t: i64,
        batch: usize,
        out: &mut Vec<u8>,
    ) -> u16;
    /// A channel heartbeat: `seq` is the next sequence number.
    fn heartbeat(&mut self, seq: u64, t: i64, out: &mut Vec<u8>);
    /// The end of the session; returns its message count (`0xFFFF` for a
    /// MoldUDP64 end-of-session packet, the messages of a data packet that
    /// ends it otherwise).
    fn end_of_session(&mut self, seq: u64, t: i64, out: &mut Vec<u8>) -> u16;
    /// How many `end_of_session` datagrams end the stream: one, or one
    /// per channel where each ends on its own (`cboe-pitch`: each unit's
    /// End of Session, in turn).
    fn end_of_session_datagrams(&self) -> usize {
        1
    }
    /// The session id as the receiver reports it.
    fn session_name(&self) -> String;
    /// Live orders now (order-book venues).
    fn live_orders(&self) -> usize {
        0
    }
    /// Order-book venues (R5): the messages that rebuild the book as of the
    /// last packet written, into `out`; returns the session. `None`: the
    /// venue serves no snapshot.
    fn book_snapshot(&self, _out: &mut Vec<Message>) -> Option<SessionId> {
        None
    }
    /// Sequence numbers a channel heartbeat takes: 0 on MoldUDP64 and
    /// IEX-TP (it names the next one), 1 on CME (every packet is one).
    fn heartbeat_count(&self) -> u16 {
        0
    }
    /// Venues with recovery loops on lines of their own (CME): the loop
    /// packet of `kind` sent at `t`, into `out`; `false`: none.
    fn loop_packet(&mut self, _kind: LineKind, _t: i64, _out: &mut Vec<u8>) -> bool {
        false
    }
    /// An event the next data packet carries (CME: a channel reset, a
    /// SecurityGroup's trading state). Venues without them ignore it.
    fn request(&mut self, _r: FlowRequest) {}
    /// The last data packet was lost on every line.
    fn lost_everywhere(&mut self) {}
    /// Cboe PITCH (recovery.md R5c): unit `unit`'s book as a Spin Server
    /// gives it, as of the unit's last message. `None`: not a PITCH
    /// venue, or nothing of the unit produced yet.
    fn spin_image(&self, _unit: u8) -> Option<super::servers::SpinImage> {
        None
    }
    /// What a receiver must end with, for the truth file (CME: every
    /// instrument's book top and the instruments a lost packet touched).
    fn venue_truth(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Events a venue's channel carries on request (`VenueFlow::request`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowRequest {
    /// Every book emptied, every instrument's sequence restarted.
    ChannelReset,
    /// A SecurityGroup stops (`halted`) or starts trading.
    GroupStatus { group: &'static [u8], halted: bool },
}

/// The symbols of a simulated venue: `S00001`, `S00002`, ...
pub fn venue_symbol(i: usize) -> Symbol {
    Symbol::parse(&format!("S{:05}", i + 1)).expect("valid generated symbol")
}

// ----------------------------------------------------------------- ITCH

fn side_index(side: Side) -> usize {
    match side {
        Side::Buy => 0,
        Side::Sell => 1,
    }
}

#[derive(Clone, Copy, Debug)]
struct LiveOrder {
    order_ref: u64,
    locate: u16,
    side: Side,
    shares: u32,
    price: u32,
}

#[derive(Clone, Copy, Debug)]
struct ItchSymbol {
    /// Mid price in ticks of $0.01 (ITCH prices have 4 decimals: x100).
    mid: u32,
    halted: bool,
}

/// ITCH 5.0 order flow over MoldUDP64.
pub struct ItchFlow {
    symbols: Vec<ItchSymbol>,
    live: Vec<LiveOrder>,
    target_orders: usize,
    next_ref: u64,
    next_match: u64,
    session: SessionId,
    midnight_ns: i64,
    tz: jiff::tz::TimeZone,
    /// Stock Directory messages still to send at the session's start.
    directory_left: usize,
    system_event_sent: bool,
    /// Order-flow messages written; halted symbols resume at a count.
    messages: u64,
    resumes: std::collections::VecDeque<(u64, usize)>,
    builder: PacketBuilder,
    scratch: Vec<u8>,
    start_ns: i64,
    /// Share of executions, cancels, replaces and deletes that act on one
    /// of the most recent orders rather than any live order.
    recent: f64,
    /// Send time of the last data packet (the snapshot's timestamp).
    last_t: i64,
    /// Live orders per price, per symbol (locate - 1) and side (buy,
    /// sell): the best bid and offer, which a new price may not reach.
    levels: Vec<[std::collections::BTreeMap<u32, u32>; 2]>,
}

/// "Recent" orders: the last this many added (approximately: removals
/// swap the newest order into the removed one's place).
const RECENT_ORDERS: u64 = 2_000;

impl ItchFlow {
    /// `symbols` books (locates 1..), holding about `target_orders` live
    /// orders once the flow has built them up.
    pub fn new(symbols: usize, target_orders: usize, start_ns: i64, seed: u64) -> ItchFlow {
        let mut m = SplitMix64::new(seed ^ 0x17C4_5EED);
        let count = symbols.clamp(1, 65_535);
        let symbols = (0..count)
            .map(|_| ItchSymbol {
                mid: 1_000 + m.below(49_000) as u32,
                halted: false,
            })
            .collect();
        ItchFlow {
            symbols,
            live: Vec::with_capacity(target_orders + 1024),
            target_orders: target_orders.max(1),
            next_ref: 1,
            next_match: 1,
            session: SessionId::default(),
            midnight_ns: 0,
            tz: new_york(),
            directory_left: 0,
            system_event_sent: false,
            messages: 0,
            resumes: std::collections::VecDeque::new(),
            builder: PacketBuilder::new(),
            scratch: Vec::with_capacity(64),
            start_ns,
            recent: 0.9,
            last_t: start_ns,
            levels: vec![Default::default(); count],
        }
    }

    /// A live order at `price` (counted at its level).
    fn level_add(&mut self, locate: u16, side: Side, price: u32) {
        *self.levels[locate as usize - 1][side_index(side)]
            .entry(price)
            .or_insert(0) += 1;
    }

    /// A live order at `price` gone.
    fn level_remove(&mut self, locate: u16, side: Side, price: u32) {
        let book = &mut self.levels[locate as usize - 1][side_index(side)];
        if let Some(n) = book.get_mut(&price) {
            *n -= 1;
            if *n == 0 {
                book.remove(&price);
            }
        }
    }

    /// The best bid and offer of a symbol's book.
    fn best(&self, locate: u16) -> (Option<u32>, Option<u32>) {
        let [bids, asks] = &self.levels[locate as usize - 1];
        (
            bids.last_key_value().map(|(p, _)| *p),
            asks.first_key_value().map(|(p, _)| *p),
        )
    }

    /// Sets the share of removals that hit a recent order (default 0.9:
    /// on Nasdaq most orders are cancelled or filled soon after they are
    /// added, while a deep book rests; 0.0 picks any live order, the
    /// cache-hostile extreme).
    pub fn with_recent_removals(mut self, share: f64) -> ItchFlow {
        self.recent = share;
        self
    }

    fn header(&self, locate: u16, t: i64) -> Header {
        Header {
            locate,
            tracking: 0,
            timestamp: (t - self.midnight_ns).clamp(0, messages::TIMESTAMP_MAX as i64) as u64,
        }
    }

    /// The next order-flow message at `t`.
    fn next_message(&mut self, m: &mut SplitMix64, t: i64) -> Message {
        let n = self.symbols.len();
        // Halts: rare; a halted symbol resumes after a while.
        if m.below(20_000) == 0 {
            let i = m.below(n as u64) as usize;
            if !self.symbols[i].halted {
                self.symbols[i].halted = true;
                let at = self.messages + 1_000 + m.below(5_000);
                self.resumes.push_back((at, i));
                return Message::TradingAction {
                    header: self.header(i as u16 + 1, t),
                    stock: venue_symbol(i),
                    state: b'H',
                    reason: *b"T1  ",
                };
            }
        }
        let fill = self.live.len() as f64 / self.target_orders as f64;
        let r = m.below(1000);
        // Below the target: mostly adds; at or above it: removals balance.
        let add_share = if fill < 0.95 { 800 } else { 400 };
        if self.live.is_empty() || r < add_share {
            return self.add(m, t);
        }
        let len = self.live.len() as u64;
        let k = if m.chance(self.recent) {
            (len - 1 - m.below(len.min(RECENT_ORDERS))) as usize
        } else {
            m.below(len) as usize
        };
        let o = self.live[k];
        let h = self.header(o.locate, t);
        match r % 100 {
            // Delete (the most common removal on Nasdaq).
            0..=54 => {
                self.live.swap_remove(k);
                self.level_remove(o.locate, o.side, o.price);
                Message::Delete {
                    header: h,
                    order_ref: o.order_ref,
                }
            }
            // Replace: new ref, price moves a tick or two, size changes.
            55..=74 => {
                self.live.swap_remove(k);
                self.level_remove(o.locate, o.side, o.price);
                let new_ref = self.fresh_ref();
                let price = self.near(m, o.locate, o.side);
                self.level_add(o.locate, o.side, price);
                let shares = lot(m);
                self.live.push(LiveOrder {
                    order_ref: new_ref,
                    price,
                    shares,
                    ..o
                });
                Message::Replace {
                    header: h,
                    original: o.order_ref,
                    new_ref,
                    shares,
                    price,
                }
            }
            // Partial cancel.
            75..=84 if o.shares > 100 => {
                let shares = (1 + m.below(o.shares as u64 - 1)) as u32;
                self.live[k].shares -= shares;
                Message::Cancel {
                    header: h,
                    order_ref: o.order_ref,
                    shares,
                }
            }
            // Execution, partial or whole, with or without a price.
            _ => {
                let shares = if m.chance(0.5) {
                    o.shares
                } else {
                    (1 + m.below(o.shares as u64)) as u32
                };
                if shares >= o.shares {
                    self.live.swap_remove(k);
                    self.level_remove(o.locate, o.side, o.price);
                } else {
                    self.live[k].shares -= shares;
                }
                let match_number = self.next_match;
                self.next_match += 1;
                let price = m.chance(0.1).then_some(messages::ExecPrice {
                    printable: b'Y',
                    price: o.price,
                });
                Message::Executed {
                    header: h,
                    order_ref: o.order_ref,
                    shares,
                    match_number,
                    price,
                }
            }
        }
    }

    fn fresh_ref(&mut self) -> u64 {
        let r = self.next_ref;
        self.next_ref += 1;
        r
    }

    /// A price near the top of the book's `side`, moving the mid a little.
    fn near(&mut self, m: &mut SplitMix64, locate: u16, side: Side) -> u32 {
        let s = &mut self.symbols[locate as usize - 1];
        match m.below(16) {
            0 => s.mid = s.mid.saturating_sub(1).max(2),
            1 => s.mid += 1,
            _ => {}
        }
        // Geometric-ish depth: most orders within a few ticks of the top.
        let depth = (m.next_u64().trailing_zeros() % 8) + m.below(2) as u32;
        let ticks = match side {
            Side::Buy => s.mid.saturating_sub(1 + depth).max(1),
            Side::Sell => s.mid + 1 + depth,
        };
        // A venue's book is never crossed nor locked: its matching engine
        // would execute an order that reaches the other side. Here such an
        // order rests one tick short of the other side's best instead (as
        // a post-only order is repriced), so the mid's drift never leaves
        // older orders on the wrong side.
        let price = ticks * 100;
        match (side, self.best(locate)) {
            (Side::Buy, (_, Some(ask))) if price >= ask => ask.saturating_sub(100).max(100),
            (Side::Sell, (Some(bid), _)) if price <= bid => bid + 100,
            _ => price,
        }
    }

    fn add(&mut self, m: &mut SplitMix64, t: i64) -> Message {
        let i = m.below(self.symbols.len() as u64) as usize;
        let locate = i as u16 + 1;
        let side = if m.chance(0.5) { Side::Buy } else { Side::Sell };
        let price = self.near(m, locate, side);
        self.level_add(locate, side, price);
        let shares = lot(m);
        let order_ref = self.fresh_ref();
        self.live.push(LiveOrder {
            order_ref,
            locate,
            side,
            shares,
            price,
        });
        Message::AddOrder {
            header: self.header(locate, t),
            order_ref,
            side,
            shares,
            stock: venue_symbol(i),
            price,
            attribution: m.chance(0.05).then_some(*b"NSDQ"),
        }
    }

    fn push(&mut self, msg: &Message) -> bool {
        self.scratch.clear();
        messages::encode(msg, &mut self.scratch);
        if self.builder.len() + 2 + self.scratch.len() > MAX_DATAGRAM {
            return false;
        }
        self.builder.push_raw(&self.scratch);
        true
    }
}

fn lot(m: &mut SplitMix64) -> u32 {
    100 * (1 + m.below(10) as u32)
}

impl VenueFlow for ItchFlow {
    fn start_session(&mut self, index: u32, t: i64) {
        let date = midnight_in(&self.tz, self.start_ns.max(t));
        self.midnight_ns = date;
        self.session = SessionId::parse(&format!("{:09}{}", 10_059 + index as u64, 'A'))
            .expect("10-byte session id");
        self.live.clear();
        for l in &mut self.levels {
            l[0].clear();
            l[1].clear();
        }
        self.directory_left = self.symbols.len();
        self.system_event_sent = false;
        self.resumes.clear();
        for s in &mut self.symbols {
            s.halted = false;
        }
    }

    fn data_packet(
        &mut self,
        m: &mut SplitMix64,
        seq: u64,
        t: i64,
        batch: usize,
        out: &mut Vec<u8>,
    ) -> u16 {
        self.builder.start(self.session, seq);
        self.last_t = t;
        let mut count = 0;
        while count < batch {
            let msg = if !self.system_event_sent {
                self.system_event_sent = true;
                Message::SystemEvent {
                    header: self.header(0, t),
                    event: b'O',
                }
            } else if self.directory_left > 0 {
                let i = self.symbols.len() - self.directory_left;
                self.directory_left -= 1;
                Message::StockDirectory {
                    header: self.header(i as u16 + 1, t),
                    stock: venue_symbol(i),
                }
            } else if let Some(&(_, i)) = self.resumes.front().filter(|r| r.0 <= self.messages) {
                self.resumes.pop_front();
                self.symbols[i].halted = false;
                Message::TradingAction {
                    header: self.header(i as u16 + 1, t),
                    stock: venue_symbol(i),
                    state: b'T',
                    reason: *b"    ",
                }
            } else {
                self.messages += 1;
                self.next_message(m, t)
            };
            if !self.push(&msg) {
                break;
            }
            count += 1;
        }
        out.clear();
        out.extend_from_slice(self.builder.bytes());
        count as u16
    }

    fn heartbeat(&mut self, seq: u64, _t: i64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&PacketBuilder::channel_heartbeat(self.session, seq));
    }

    fn end_of_session(&mut self, seq: u64, _t: i64, out: &mut Vec<u8>) -> u16 {
        out.clear();
        out.extend_from_slice(&PacketBuilder::end_of_session(self.session, seq));
        debug_assert_eq!(out.len(), HEADER_LEN);
        COUNT_END_OF_SESSION
    }

    fn session_name(&self) -> String {
        self.session.to_string()
    }

    fn live_orders(&self) -> usize {
        self.live.len()
    }

    /// R5: System Event `O` once sent, a Stock Directory and a Stock
    /// Trading Action (its current state) for each symbol announced so
    /// far, and an Add Order for every live order, stamped with the last
    /// packet's time.
    fn book_snapshot(&self, out: &mut Vec<Message>) -> Option<SessionId> {
        let t = self.last_t;
        if self.system_event_sent {
            out.push(Message::SystemEvent {
                header: self.header(0, t),
                event: b'O',
            });
        }
        let announced = self.symbols.len() - self.directory_left;
        for (i, s) in self.symbols.iter().enumerate().take(announced) {
            let header = self.header(i as u16 + 1, t);
            out.push(Message::StockDirectory {
                header,
                stock: venue_symbol(i),
            });
            out.push(Message::TradingAction {
                header,
                stock: venue_symbol(i),
                state: if s.halted { b'H' } else { b'T' },
                reason: if s.halted { *b"T1  " } else { *b"    " },
            });
        }
        out.extend(self.live.iter().map(|o| Message::AddOrder {
            header: self.header(o.locate, t),
            order_ref: o.order_ref,
            side: o.side,
            shares: o.shares,
            stock: venue_symbol(o.locate as usize - 1),
            price: o.price,
            attribution: None,
        }));
        Some(self.session)
    }
}

// ------------------------------------------------------------------ IEX

#[derive(Clone, Copy, Debug)]
struct IexSymbol {
    /// Bid in cents; the ask is `bid + spread`.
    bid: i64,
    spread: i64,
    halted_for: u32,
}

/// TOPS 1.6 over IEX-TP.
pub struct IexFlow {
    symbols: Vec<IexSymbol>,
    session_id: u32,
    /// Trading Status `T` messages still to send at the session's start.
    status_left: usize,
    system_events_left: u8,
    builder: SegmentBuilder,
}

impl IexFlow {
    pub fn new(symbols: usize, seed: u64) -> IexFlow {
        let mut m = SplitMix64::new(seed ^ 0x01E8_5EED);
        IexFlow {
            symbols: (0..symbols.max(1))
                .map(|_| IexSymbol {
                    bid: 1_000 + m.below(40_000) as i64,
                    spread: 1 + m.below(3) as i64,
                    halted_for: 0,
                })
                .collect(),
            session_id: 0,
            status_left: 0,
            system_events_left: 0,
            builder: SegmentBuilder::new(),
        }
    }

    fn fits(&self, size: usize) -> bool {
        self.builder.bytes().len() + 2 + size <= MAX_DATAGRAM
    }
}

impl VenueFlow for IexFlow {
    fn start_session(&mut self, index: u32, _t: i64) {
        self.session_id = 0x43D0_0000 + index;
        self.status_left = self.symbols.len();
        self.system_events_left = 2; // O (start of messages), S (system hours)
        for s in &mut self.symbols {
            s.halted_for = 0;
        }
    }

    fn data_packet(
        &mut self,
        m: &mut SplitMix64,
        seq: u64,
        t: i64,
        batch: usize,
        out: &mut Vec<u8>,
    ) -> u16 {
        self.builder.start(self.session_id, seq, t);
        let n = self.symbols.len();
        while (self.builder.count() as usize) < batch && self.fits(42) {
            // Created up to 20 us before it is sent.
            let ts = t - m.below(20_000) as i64;
            if self.system_events_left > 0 {
                let e = if self.system_events_left == 2 {
                    b'O'
                } else {
                    b'S'
                };
                self.system_events_left -= 1;
                self.builder.system_event(e, ts);
                continue;
            }
            if self.status_left > 0 {
                let i = n - self.status_left;
                self.status_left -= 1;
                self.builder
                    .trading_status(b'T', ts, venue_symbol(i), *b"    ");
                continue;
            }
            let i = m.below(n as u64) as usize;
            let s = &mut self.symbols[i];
            if s.halted_for > 0 {
                s.halted_for -= 1;
                if s.halted_for == 0 {
                    self.builder
                        .trading_status(b'T', ts, venue_symbol(i), *b"    ");
                    continue;
                }
            } else if m.below(20_000) == 0 {
                s.halted_for = 100 + m.below(400) as u32;
                self.builder
                    .trading_status(b'H', ts, venue_symbol(i), *b"T1  ");
                continue;
            }
            if m.below(10) == 0 {
                // A trade report: known by size, changes no quote.
                let mut tr = [0u8; 38];
                tr[0] = b'T';
                tr[2..10].copy_from_slice(&ts.to_le_bytes());
                tr[10..18].copy_from_slice(&venue_symbol(i).wire());
                self.builder.raw(&tr);
                continue;
            }
            match m.below(8) {
                0 => s.bid = (s.bid - 1).max(1),
                1 => s.bid += 1,
                _ => {}
            }
            let (bid, ask) = (s.bid, s.bid + s.spread);
            let bid_size = 100 * (1 + m.below(10) as u32);
            let ask_size = 100 * (1 + m.below(10) as u32);
            // cents to 4 implied decimals
            self.builder.quote_update(
                0,
                ts,
                venue_symbol(i),
                bid_size,
                bid * 100,
                ask * 100,
                ask_size,
            );
        }
        out.clear();
        out.extend_from_slice(self.builder.bytes());
        self.builder.count()
    }

    fn heartbeat(&mut self, seq: u64, t: i64, out: &mut Vec<u8>) {
        self.builder.start(self.session_id, seq, t);
        out.clear();
        out.extend_from_slice(self.builder.bytes());
    }

    fn end_of_session(&mut self, seq: u64, t: i64, out: &mut Vec<u8>) -> u16 {
        // System Event C (End of Messages) ends the session (C6).
        self.builder
            .start(self.session_id, seq, t)
            .system_event(b'C', t);
        out.clear();
        out.extend_from_slice(self.builder.bytes());
        1
    }

    fn session_name(&self) -> String {
        crate::venue::iex_tops::session_id(self.session_id).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind};

    /// Every packet the flows write is valid for its venue, applies
    /// without unknown orders or invalid messages, and quotes symbols.
    fn run(kind: VenueKind, flow: &mut dyn VenueFlow) -> Feed {
        let mut feed = Feed::new(FeedSettings::for_venue(kind), 1);
        let mut m = SplitMix64::new(7);
        let mut out = Vec::new();
        let t0 = 1_784_122_200_000_000_000;
        flow.start_session(0, t0);
        let mut seq = 1;
        for i in 0..3_000 {
            let t = t0 + i * 10_000;
            let n = flow.data_packet(&mut m, seq, t, 8, &mut out);
            assert!(n > 0 && out.len() <= MAX_DATAGRAM);
            assert_eq!(
                feed.on_datagram(0, &out, t + 1_000),
                DatagramOutcome::Applied
            );
            seq += n as u64;
        }
        flow.heartbeat(seq, t0 + 40_000_000, &mut out);
        assert_eq!(
            feed.on_datagram(0, &out, t0 + 40_000_000),
            DatagramOutcome::Applied
        );
        let c = feed.counters();
        assert_eq!(
            (c.invalid_packets, c.invalid_messages, c.unknown_messages),
            (0, 0, 0)
        );
        assert_eq!(
            (c.unknown_orders, c.order_conflicts, c.channel_gaps),
            (0, 0, 0)
        );
        assert!(feed.symbols().filter(|(_, s)| s.has_quote).count() > 10);
        feed
    }

    #[test]
    fn itch_flow_is_valid_and_builds_books() {
        let mut flow = ItchFlow::new(50, 2_000, 1_784_122_200_000_000_000, 1);
        let feed = run(VenueKind::NasdaqItch, &mut flow);
        assert_eq!(feed.counters().live_orders, flow.live_orders() as u64);
        assert!(flow.live_orders() > 1_000);
        let types = feed.message_types().unwrap();
        for t in *b"RAFEXDU" {
            assert!(types[t as usize] > 0, "no {}", t as char);
        }
    }

    /// A venue's books are never crossed nor locked (a matching engine
    /// executes an order that reaches the other side), at every packet of
    /// a long flow whose mid prices drift: the best bid of every quoted
    /// book stays below its best offer, in the flow and in the feed.
    #[test]
    fn itch_books_stay_uncrossed() {
        let mut flow = ItchFlow::new(40, 4_000, 1_784_122_200_000_000_000, 3);
        let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::NasdaqItch), 1);
        let mut m = SplitMix64::new(11);
        let mut out = Vec::new();
        let t0 = 1_784_122_200_000_000_000;
        flow.start_session(0, t0);
        let (mut seq, mut two_sided) = (1, 0u64);
        for i in 0..40_000 {
            let t = t0 + i * 10_000;
            let n = flow.data_packet(&mut m, seq, t, 8, &mut out);
            feed.on_datagram(0, &out, t + 1_000);
            seq += n as u64;
            if i % 50 != 49 {
                continue;
            }
            for locate in 1..=40u16 {
                if let (Some(bid), Some(ask)) = flow.best(locate) {
                    assert!(bid < ask, "packet {i}: flow book {locate} {bid} >= {ask}");
                }
            }
            let symbols: Vec<_> = feed.symbols().map(|(s, _)| s).collect();
            for sym in symbols {
                let (_, v) = feed.symbol_view(sym).unwrap();
                if let (Some(b), Some(a)) = (v.bid(), v.ask()) {
                    assert!(b.px < a.px, "packet {i}: {sym} bid {} ask {}", b.px, a.px);
                    two_sided += 1;
                }
            }
        }
        // The drift is real: mids moved far from where they started.
        assert!(two_sided > 10_000, "{two_sided}");
        assert_eq!(feed.counters().live_orders, flow.live_orders() as u64);
    }

    #[test]
    fn iex_flow_is_valid_and_ends_its_session() {
        let mut flow = IexFlow::new(50, 1);
        let mut feed = run(VenueKind::IexTops, &mut flow);
        let mut out = Vec::new();
        let seq = feed.last_header().map(|h| h.sequence).unwrap();
        let n = flow.end_of_session(seq, 1_784_122_300_000_000_000, &mut out);
        assert_eq!(n, 1);
        feed.on_datagram(0, &out, 1_784_122_300_000_000_000);
        assert!(feed.session_ended());
    }
}
