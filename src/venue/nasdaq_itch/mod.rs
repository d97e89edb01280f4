//! `nasdaq-itch`: Nasdaq TotalView-ITCH 5.0 over MoldUDP64 (venues.md).
//! MoldUDP64 framing and the channel rules exactly as wire.md, ITCH 5.0
//! message sizes (`messages`); order messages build per-locate books
//! (`book`, `orders`), and after each packet a book whose best bid or
//! offer changed gives its symbol a new quote (V1). Stock Trading Action
//! and Operational Halt are the trading state (V2). The trust rules that
//! replace S7 for this venue (late join, channel gap) are the engine's
//! `Policy::trust_from_start`, judged in `feed::verdict`. Sans-I/O.

pub mod book;
pub mod glimpse;
pub mod image;
pub mod messages;
pub mod orders;
pub mod soupbin;

use jiff::tz::TimeZone;

use self::book::{BestKey, Books, Level, OrderError};
use self::messages::{message_size, Message};
use super::tickgate::mold_header;
use super::{
    Applied, BlocksChecked, ChannelHeader, Count, DatagramError, Header, MoldParts, Policy, Rules,
    SnapshotError, Venue,
};
use crate::util::pages::{MemRange, Zeroed};
use crate::util::prefetch::prefetch;
use crate::wire::{Blocks, Packet, Side, Symbol, HEADER_LEN};

/// V4: 4 implied decimals to the 10^-9 fixed point of wire.md.
pub const PRICE_SCALE: i64 = 100_000;

/// V2 halt sources: halted while either says so.
const HALT_TRADING_ACTION: u8 = 1;
const HALT_OPERATIONAL: u8 = 2;

const LOCATES: usize = 1 << 16;

/// R5: snapshot messages are applied in packets of this many.
const SNAPSHOT_CHUNK: u16 = 1024;
/// A snapshot packet's buffer: 1024 messages of at most 50 bytes.
const SNAPSHOT_PACKET_BYTES: usize = 20 + SNAPSHOT_CHUNK as usize * 52;

/// How many messages ahead of the one applied the level nodes are
/// prefetched (the order slots and books of the whole packet are
/// prefetched before its first message).
const LEVEL_AHEAD: usize = 4;

/// What the adapter keeps per stock locate, read by every message: 16
/// bytes, four locates to a line (what a packet needs only while it is
/// applied is in its [`Touched`] list). Integers only, and all zeros is a
/// locate never seen: the array (1 MiB) is a fresh zeroed mapping of its
/// own (`util::pages::Zeroed`, aligned to the line), so nothing is
/// written per locate and only the pages of locates in use become
/// resident.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(16))]
struct Locate {
    /// The feed's symbol slot the locate names, plus one (0: none yet, or
    /// the symbol table was full).
    slot1: u32,
    /// While the packet being applied has touched the locate: its place
    /// in that packet's [`Touched`] list, plus one (0: untouched).
    touched1: u32,
    /// The stock it names: an ITCH name is 8 bytes (`Symbol::from_wire`),
    /// so its first word is all of it.
    stock: u64,
}

const _: () = assert!(
    std::mem::size_of::<Locate>() == 16,
    "four locates to a cache line"
);

/// A locate the packet being applied touched, in the order first touched.
#[derive(Clone, Copy, Debug)]
struct Touched {
    locate: u16,
    /// Whether its symbol's state was hinted for the quote to come.
    hinted: bool,
    /// The book's best before the packet's first message on it, which is
    /// its best as of the end of the last packet that touched it: what the
    /// symbol's quote was last set from (V1).
    before: BestKey,
    /// The last message of this packet whose own effect changed the best:
    /// its channel sequence and time (the quote's `seq` and `source_ts`).
    change_seq: u64,
    change_ts: i64,
}

/// `LOCATES` never-seen locates from one zeroed mapping. A fixed-size
/// array, so that indexing it by a `u16` locate needs no bounds check.
fn zeroed_locates() -> Zeroed<[Locate; LOCATES]> {
    // SAFETY: every field of Locate is an integer or a bool, for each of
    // which all-zero bits are a valid value (false for the bool); all
    // zeros is the Default locate.
    unsafe { Zeroed::new() }
}

pub struct NasdaqItch {
    books: Books,
    locates: Zeroed<[Locate; LOCATES]>,
    /// Locates touched by the packet being applied (capacity: every locate,
    /// so pushing never allocates).
    touched: Vec<Touched>,
    /// Unix ns of New York midnight of the session's date.
    midnight_ns: i64,
    new_york: TimeZone,
    /// Messages applied, by type byte.
    types: Box<[u64; 256]>,
}

impl NasdaqItch {
    pub fn new(max_orders: usize) -> NasdaqItch {
        NasdaqItch::with_tables(max_orders, false)
    }

    /// [`NasdaqItch::new`], its books laid out for a replay when
    /// `replay_tables` (see [`Books::with_tables`]).
    pub fn with_tables(max_orders: usize, replay_tables: bool) -> NasdaqItch {
        NasdaqItch {
            books: Books::with_tables(max_orders, replay_tables),
            locates: zeroed_locates(),
            touched: Vec::with_capacity(LOCATES),
            midnight_ns: 0,
            new_york: new_york(),
            types: Box::new([0; 256]),
        }
    }

    /// The books (for tests and diagnostics).
    pub fn books(&self) -> &Books {
        &self.books
    }

    /// The locate's symbol slot, naming it first if `stock` is new to it.
    #[inline(always)]
    fn name<R: Rules>(&mut self, locate: u16, stock: Symbol, rules: &mut R) -> Option<u32> {
        let l = &self.locates[locate as usize];
        debug_assert!(stock.fits_wire());
        // The wire's 8 bytes only (the symbol's other words are padding):
        // no whole symbol is made for a locate that names it already.
        let wire = stock.words()[0];
        if l.slot1 == 0 || l.stock != wire {
            return self.rename(locate, wire, rules);
        }
        Some(l.slot1 - 1)
    }

    /// [`NasdaqItch::name`] when the locate names another stock or none
    /// yet: once per locate and session, kept out of the message loop.
    #[cold]
    #[inline(never)]
    fn rename<R: Rules>(&mut self, locate: u16, wire: u64, rules: &mut R) -> Option<u32> {
        let l = &mut self.locates[locate as usize];
        l.slot1 = rules
            .symbol(Symbol::from_wire(wire.to_be_bytes()))
            .and_then(|s| s.checked_add(1))
            .unwrap_or(0);
        l.stock = wire;
        l.slot1.checked_sub(1)
    }

    /// Cache hints for the state `block` (a message not yet applied) will
    /// touch, read from its raw bytes (ITCH: locate at 1, order reference
    /// at 11, an add's side at 19 and price at 32). A hint changes
    /// nothing, so a short or unknown block just gets none.
    #[inline(always)]
    fn prefetch(&self, block: &[u8]) {
        let (Some(&kind), Some(&[hi, lo])) = (block.first(), block.get(1..3)) else {
            return;
        };
        let locate = u16::from_be_bytes([hi, lo]);
        match kind {
            messages::TYPE_ADD | messages::TYPE_ADD_MPID => {
                prefetch(&self.locates[locate as usize]);
                let side = match block.get(19) {
                    Some(b'S') => messages::Side::Sell,
                    _ => messages::Side::Buy,
                };
                // A block too short for its price is no add: no hint.
                if let Some(&[a, b, c, d]) = block.get(32..36) {
                    let price = u32::from_be_bytes([a, b, c, d]);
                    self.books.prefetch_add(locate, side, price);
                }
            }
            messages::TYPE_EXECUTED
            | messages::TYPE_EXECUTED_PRICE
            | messages::TYPE_CANCEL
            | messages::TYPE_DELETE
            | messages::TYPE_REPLACE => {
                if let Some(r) = block.get(11..19) {
                    let r: [u8; 8] = r.try_into().expect("8 bytes");
                    self.books.prefetch_order(u64::from_be_bytes(r));
                }
                prefetch(&self.locates[locate as usize]);
                // A replace adds on its order's side (unknown here): both
                // sides. A reduce or delete needs a side only when its
                // level empties: its top alone.
                if kind == messages::TYPE_REPLACE {
                    self.books.prefetch_book(locate);
                } else {
                    self.books.prefetch_top(locate);
                }
            }
            _ => {}
        }
    }

    /// The second stage of [`NasdaqItch::prefetch`]: the level node the
    /// message will touch (a live order's level, or the ladder level an
    /// add joins).
    #[inline(always)]
    fn prefetch_level(&self, block: &[u8]) {
        match block.first() {
            Some(&(messages::TYPE_ADD | messages::TYPE_ADD_MPID)) => {
                let (Some(&[hi, lo]), Some(&side), Some(p)) =
                    (block.get(1..3), block.get(19), block.get(32..36))
                else {
                    return;
                };
                let side = if side == b'S' {
                    messages::Side::Sell
                } else {
                    messages::Side::Buy
                };
                let price = u32::from_be_bytes(p.try_into().expect("4 bytes"));
                self.books
                    .prefetch_add_level(u16::from_be_bytes([hi, lo]), side, price);
            }
            Some(
                &(messages::TYPE_EXECUTED
                | messages::TYPE_EXECUTED_PRICE
                | messages::TYPE_CANCEL
                | messages::TYPE_DELETE
                | messages::TYPE_REPLACE),
            ) => {
                if let Some(r) = block.get(11..19) {
                    let r: [u8; 8] = r.try_into().expect("8 bytes");
                    self.books.prefetch_order_level(u64::from_be_bytes(r));
                }
            }
            _ => {}
        }
    }

    /// After a book operation on `locate` whose best was `before`: list
    /// the locate for the end of the packet (its first operation in the
    /// packet gives the best the packet started from), and note the
    /// message if its own effect changed the best. A change will likely
    /// be quoted at the end of the packet, where its symbol's state is
    /// written: hinted now, it is in cache by then (a packet that leaves
    /// a book's best alone does not touch its symbol's state).
    #[inline]
    fn touched<R: Rules>(&mut self, locate: u16, before: BestKey, seq: u64, ts: i64, rules: &R) {
        let l = &mut self.locates[locate as usize];
        let i = match l.touched1.checked_sub(1) {
            Some(i) => i as usize,
            None => {
                self.touched.push(Touched {
                    locate,
                    hinted: false,
                    before,
                    change_seq: 0,
                    change_ts: 0,
                });
                l.touched1 = self.touched.len() as u32;
                self.touched.len() - 1
            }
        };
        if self.books.best_key(locate) != before {
            let t = &mut self.touched[i];
            t.change_seq = seq;
            t.change_ts = ts;
            if !t.hinted {
                t.hinted = true;
                if let Some(slot) = l.slot1.checked_sub(1) {
                    rules.prefetch_symbol(slot);
                }
            }
        }
    }
}

/// America/New_York from the zone database built into the binary (jiff's
/// tzdb-bundle-always), so it cannot be missing at run time.
pub fn new_york() -> TimeZone {
    TimeZone::get("America/New_York").expect("America/New_York is in the bundled zone database")
}

/// Midnight, as Unix ns, of the calendar date `now` falls on in `tz`
/// (New York: daylight saving included).
pub fn midnight_in(tz: &TimeZone, now: i64) -> i64 {
    let at = jiff::Timestamp::from_nanosecond(now as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    midnight_of(tz, tz.to_datetime(at).date())
}

/// Midnight, as Unix ns, of `date` in `tz` (New York: daylight saving
/// included). 0 if that instant cannot be represented.
pub fn midnight_of(tz: &TimeZone, date: jiff::civil::Date) -> i64 {
    date.to_zoned_datetime(tz.clone())
        .map_or(0, |z| z.timestamp().as_nanosecond() as i64)
}

#[inline]
fn side(level: Option<Level>) -> Option<Side> {
    level.map(|l| Side {
        px: l.price as i64 * PRICE_SCALE,
        qty: l.shares,
    })
}

#[inline]
fn itch_min_len(kind: u8) -> usize {
    message_size(kind).unwrap_or(1)
}

impl Venue for NasdaqItch {
    fn policy(&self) -> Policy {
        Policy {
            channel_source_time: true,
            trust_from_start: true,
            loops: false,
        }
    }

    #[inline]
    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        // wire.md framing; a known ITCH type shorter than its size is
        // invalid, longer is fine (bytes past its size are ignored).
        Ok(mold_header(&Packet::parse_with(datagram, itch_min_len)?))
    }

    fn on_session_start(&mut self, now: i64, first_session: bool) {
        // The session's date: the New York date of its first packet.
        self.midnight_ns = midnight_in(&self.new_york, now);
        if !first_session {
            // C5: a new session empties every book; locates are the
            // session's own numbering.
            self.books.clear();
            // A fresh zeroed allocation: nothing written per locate.
            self.locates = zeroed_locates();
        }
    }

    fn validate_snapshot(&self, blocks: &[u8]) -> Result<usize, SnapshotError> {
        let mut count = 0usize;
        let mut at = 0usize;
        while at < blocks.len() {
            let len = match blocks.get(at..at + 2) {
                Some(b) => u16::from_be_bytes([b[0], b[1]]) as usize,
                None => return Err(SnapshotError::Malformed { index: count }),
            };
            let Some(msg) = blocks.get(at + 2..at + 2 + len) else {
                return Err(SnapshotError::Malformed { index: count });
            };
            // A known type must decode; others are skipped by length as
            // in a live packet.
            let known = msg.first().and_then(|&k| message_size(k));
            if msg.is_empty() || (known.is_some() && messages::decode(msg).is_none()) {
                return Err(SnapshotError::Malformed { index: count });
            }
            count += 1;
            at += 2 + len;
        }
        Ok(count)
    }

    /// R5: the snapshot's messages into empty books, as `apply` would
    /// apply them (in packets of the session's framing), then every named
    /// symbol quoted from its book.
    fn rebuild<R: Rules>(&mut self, blocks: &[u8], count: usize, next: u64, rules: &mut R) -> i64 {
        self.books.clear();
        self.locates = zeroed_locates();
        self.touched.clear();
        // The messages as packets of at most SNAPSHOT_CHUNK blocks, so
        // that they take exactly the path of live ones.
        let mut packet = Vec::with_capacity(SNAPSHOT_PACKET_BYTES);
        let mut latest = i64::MIN;
        let mut at = 0usize;
        let first_seq = next.saturating_sub(count as u64).max(1);
        let mut seq = first_seq;
        while at < blocks.len() {
            packet.clear();
            packet.extend_from_slice(&[0u8; 20]);
            let mut n = 0u16;
            let start = at;
            while at < blocks.len() && n < SNAPSHOT_CHUNK {
                let len = u16::from_be_bytes([blocks[at], blocks[at + 1]]) as usize;
                at += 2 + len;
                n += 1;
            }
            packet.extend_from_slice(&blocks[start..at]);
            packet[10..18].copy_from_slice(&seq.to_be_bytes());
            packet[18..20].copy_from_slice(&n.to_be_bytes());
            let header = Header {
                channel: ChannelHeader {
                    session: crate::wire::SessionId([0; 10]),
                    sequence: seq,
                    kind: crate::wire::PacketKind::Data,
                    count: n,
                    stale_session: false,
                },
                send_time: None,
            };
            let applied = self.apply(&packet, &header, 0, rules);
            if let Some(t) = applied.max_ts() {
                latest = latest.max(t);
            }
            seq = seq.saturating_add(n as u64);
        }
        // Every symbol a locate names takes its book's best, stamped as
        // of the snapshot (R5 step 2). A stock two locates name has two
        // books and no way to tell which is its own: counted, and its
        // symbol is not trusted (the first locate's book is quoted).
        let quote_seq = next.saturating_sub(1);
        let mut quoted = std::collections::HashSet::new();
        for locate in 0..LOCATES {
            let l = &self.locates[locate];
            if l.slot1 == 0 {
                continue;
            }
            if !quoted.insert(l.slot1) {
                rules.count(Count::LocateConflict);
                rules.suspect_gap(l.slot1 - 1);
                continue;
            }
            let locate = locate as u16;
            let best = self.books.best(locate);
            rules.venue_quote(
                self.locates[locate as usize].slot1 - 1,
                quote_seq,
                latest,
                side(best.bid),
                side(best.ask),
            );
        }
        latest
    }

    /// The first stage of [`NasdaqItch::prefetch`] for every message of
    /// the blocks (up to the first that does not fit: nothing is
    /// validated here).
    #[inline]
    fn prefetch_blocks(&self, blocks: &[u8]) {
        for block in Blocks::over(blocks) {
            self.prefetch(block);
        }
    }

    /// The level nodes of the first `LEVEL_AHEAD` messages of the blocks
    /// (the part of the second stage that `apply_blocks` cannot give
    /// ahead of them).
    #[inline]
    fn prefetch_levels(&self, blocks: &[u8]) {
        for block in Blocks::over(blocks).take(LEVEL_AHEAD) {
            self.prefetch_level(block);
        }
    }

    #[inline]
    fn parse_blocks(&self, parts: &MoldParts<'_>) -> Option<Result<Header, DatagramError>> {
        let &MoldParts {
            session,
            sequence,
            count,
            blocks,
            checked,
        } = parts;
        if checked == BlocksChecked::Itch50 {
            // Exactly `parse`'s checks, made by the reader as it framed
            // the blocks: not a second walk of every block.
            debug_assert!(
                Packet::from_parts(session, sequence, count, blocks, itch_min_len).is_ok(),
                "blocks checked by ITCH 5.0 sizes"
            );
            let p = Packet::validated_parts(session, sequence, count, blocks);
            return Some(Ok(mold_header(&p)));
        }
        // `parse`'s checks, on the datagram these parts make.
        Some(
            Packet::from_parts(session, sequence, count, blocks, itch_min_len)
                .map(|p| mold_header(&p))
                .map_err(DatagramError::from),
        )
    }

    #[inline]
    fn apply<R: Rules>(
        &mut self,
        datagram: &[u8],
        header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied {
        let blocks = &datagram[HEADER_LEN..];
        // A datagram as it arrived: no one hinted its messages yet. Hints
        // for all of them first, so that the misses of one message's order
        // slot, book and locate overlap those of the others instead of
        // following one another.
        self.prefetch_blocks(blocks);
        self.apply_blocks(blocks, header, skip, rules)
    }

    fn apply_blocks<R: Rules>(
        &mut self,
        blocks: &[u8],
        header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied {
        let mut out = Applied::default();
        let first = header.channel.sequence;
        let ch = &header.channel;
        let packet = Packet::validated_parts(ch.session, ch.sequence, ch.count, blocks);
        // The first stage of the hints is the caller's (`apply` here, or
        // the reader's `prefetch_blocks` a datagram ahead). The second,
        // `LEVEL_AHEAD` messages ahead of the one applied: through the
        // slots now in cache, the level nodes.
        // The blocks already applied skipped once here, not by adapters
        // asked at every message.
        let mut blocks = packet.blocks();
        for _ in 0..skip {
            blocks.next();
        }
        let mut ahead = blocks.clone();
        for block in ahead.by_ref().take(LEVEL_AHEAD) {
            self.prefetch_level(block);
        }
        let mut next_seq = first.saturating_add(skip as u64);
        for block in blocks {
            if let Some(next) = ahead.next() {
                self.prefetch_level(next);
            }
            let seq = next_seq;
            next_seq = seq.saturating_add(1);
            let kind = block[0];
            self.types[kind as usize] += 1;
            // The book's own messages, most of a day, straight from their
            // bytes: a `Message` built and matched goes through the stack
            // (decode's size checks, kept here: a block too short for its
            // type goes on to `decode`, which does not decode it).
            match kind {
                messages::TYPE_ADD | messages::TYPE_ADD_MPID => {
                    let m = if kind == messages::TYPE_ADD {
                        block.first_chunk::<{ messages::SIZE_ADD }>()
                    } else {
                        block
                            .first_chunk::<{ messages::SIZE_ADD_MPID }>()
                            .and_then(|m| m.first_chunk())
                    };
                    if let Some(m) = m {
                        let add = messages::add_fields(m);
                        let ts = self.stamp(&mut out, add.header.timestamp);
                        let side = match add.side {
                            b'B' => messages::Side::Buy,
                            b'S' => messages::Side::Sell,
                            _ => {
                                // It still names its locate's symbol (venues.md).
                                self.name(add.header.locate, add.stock, rules);
                                rules.count(Count::InvalidMessage);
                                continue;
                            }
                        };
                        self.on_add(add, side, seq, ts, rules);
                        continue;
                    }
                }
                messages::TYPE_EXECUTED | messages::TYPE_EXECUTED_PRICE | messages::TYPE_CANCEL => {
                    let m = match kind {
                        messages::TYPE_EXECUTED => block
                            .first_chunk::<{ messages::SIZE_EXECUTED }>()
                            .and_then(|m| m.first_chunk()),
                        messages::TYPE_EXECUTED_PRICE => block
                            .first_chunk::<{ messages::SIZE_EXECUTED_PRICE }>()
                            .and_then(|m| m.first_chunk()),
                        _ => block.first_chunk::<{ messages::SIZE_CANCEL }>(),
                    };
                    if let Some(m) = m {
                        let ts = self.stamp(&mut out, stamp_of(m));
                        let (order_ref, shares) = messages::reduce_fields(m);
                        self.on_order(self_reduce(order_ref, shares), seq, ts, rules);
                        continue;
                    }
                }
                messages::TYPE_DELETE => {
                    if let Some(m) = block.first_chunk::<{ messages::SIZE_DELETE }>() {
                        let ts = self.stamp(&mut out, stamp_of(m));
                        let order_ref = messages::order_ref_of(m);
                        self.on_order(OrderOp::Delete(order_ref), seq, ts, rules);
                        continue;
                    }
                }
                messages::TYPE_REPLACE => {
                    if let Some(m) = block.first_chunk::<{ messages::SIZE_REPLACE }>() {
                        let ts = self.stamp(&mut out, stamp_of(m));
                        let (original, new_ref, shares, price) = messages::replace_fields(m);
                        let op = OrderOp::Replace {
                            original,
                            new_ref,
                            shares,
                            price,
                        };
                        self.on_order(op, seq, ts, rules);
                        continue;
                    }
                }
                _ => {}
            }
            let Some(msg) = messages::decode(block) else {
                rules.count(Count::UnknownMessage);
                continue;
            };
            let ts = self.stamp(&mut out, msg.timestamp());
            match msg {
                Message::StockDirectory { header, stock } => {
                    self.name(header.locate, stock, rules);
                }
                Message::AddOrder {
                    header,
                    order_ref,
                    side,
                    shares,
                    stock,
                    price,
                    ..
                } => {
                    let add = messages::AddFields {
                        header,
                        order_ref,
                        side: side.to_byte(),
                        shares,
                        stock,
                        price,
                    };
                    self.on_add(add, side, seq, ts, rules);
                }
                Message::AddOrderBadSide { header, stock, .. } => {
                    // It still names its locate's symbol (venues.md).
                    self.name(header.locate, stock, rules);
                    rules.count(Count::InvalidMessage);
                }
                Message::Executed {
                    order_ref, shares, ..
                }
                | Message::Cancel {
                    order_ref, shares, ..
                } => self.on_order(self_reduce(order_ref, shares), seq, ts, rules),
                Message::Delete { order_ref, .. } => {
                    self.on_order(OrderOp::Delete(order_ref), seq, ts, rules)
                }
                Message::Replace {
                    original,
                    new_ref,
                    shares,
                    price,
                    ..
                } => self.on_order(
                    OrderOp::Replace {
                        original,
                        new_ref,
                        shares,
                        price,
                    },
                    seq,
                    ts,
                    rules,
                ),
                Message::TradingAction {
                    header,
                    stock,
                    state,
                    ..
                } => {
                    let Some(slot) = self.name(header.locate, stock, rules) else {
                        continue;
                    };
                    // V2: H halted, P paused, Q quotation only; T trading.
                    match state {
                        b'H' | b'P' | b'Q' => rules.set_halt(slot, HALT_TRADING_ACTION, true),
                        b'T' => rules.set_halt(slot, HALT_TRADING_ACTION, false),
                        _ => {}
                    }
                }
                Message::OperationalHalt {
                    header,
                    stock,
                    action,
                    ..
                } => {
                    let Some(slot) = self.name(header.locate, stock, rules) else {
                        continue;
                    };
                    // V2: H halted; T that halt ends, whatever the market.
                    match action {
                        b'H' => rules.set_halt(slot, HALT_OPERATIONAL, true),
                        b'T' => rules.set_halt(slot, HALT_OPERATIONAL, false),
                        _ => {}
                    }
                }
                Message::SystemEvent { .. } | Message::Other { .. } => {}
            }
        }
        // V1: a book whose best changed over the packet quotes anew; one
        // that changed and came back does not.
        for t in &self.touched {
            let l = &mut self.locates[t.locate as usize];
            l.touched1 = 0;
            if self.books.best_key(t.locate) == t.before {
                continue;
            }
            let best = self.books.best(t.locate);
            if let Some(slot) = l.slot1.checked_sub(1) {
                rules.venue_quote(
                    slot,
                    t.change_seq,
                    t.change_ts,
                    side(best.bid),
                    side(best.ask),
                );
            }
        }
        self.touched.clear();
        out
    }

    fn live_orders(&self) -> u64 {
        self.books.live_orders() as u64
    }

    fn take_populate(&mut self) -> Option<MemRange> {
        self.books.take_populate()
    }

    fn message_types(&self) -> Option<&[u64; 256]> {
        Some(&self.types)
    }
}

/// An order message acting on an order the book may hold.
#[derive(Clone, Copy, Debug)]
enum OrderOp {
    Reduce {
        order_ref: u64,
        shares: u32,
    },
    Delete(u64),
    Replace {
        original: u64,
        new_ref: u64,
        shares: u32,
        price: u32,
    },
}

#[inline]
fn self_reduce(order_ref: u64, shares: u32) -> OrderOp {
    OrderOp::Reduce { order_ref, shares }
}

/// The timestamp of a message block (its common header).
#[inline(always)]
fn stamp_of<const N: usize>(m: &[u8; N]) -> u64 {
    messages::timestamp_of(m.first_chunk().expect("an order message holds the header"))
}

impl NasdaqItch {
    /// The message's time (ns since midnight on the wire) as Unix ns,
    /// noted in the packet's outcome.
    #[inline(always)]
    fn stamp(&self, out: &mut Applied, timestamp: u64) -> i64 {
        let ts = self.midnight_ns.saturating_add(timestamp as i64);
        out.stamp(ts);
        ts
    }

    /// A, F of a valid side: names the locate's symbol, then adds the
    /// order to its book. Inlined: the message loop's hottest case.
    #[inline(always)]
    fn on_add<R: Rules>(
        &mut self,
        add: messages::AddFields,
        side: messages::Side,
        seq: u64,
        ts: i64,
        rules: &mut R,
    ) {
        let locate = add.header.locate;
        let slot = self.name(locate, add.stock, rules);
        let before = self.books.best_key(locate);
        match self
            .books
            .add(locate, add.order_ref, side, add.shares, add.price)
        {
            Ok(()) => self.touched(locate, before, seq, ts, rules),
            Err(OrderError::Overflow) => {
                // The book misses an order until the next session.
                rules.count(Count::OrderOverflow);
                if let Some(slot) = slot {
                    rules.suspect_gap(slot);
                }
            }
            Err(OrderError::ZeroShares) => rules.count(Count::InvalidMessage),
            Err(_) => rules.count(Count::OrderConflict),
        }
    }

    /// E, C, X, D, U: act on the book of the order's own locate. An order
    /// the book does not hold changes nothing and is counted. Inlined: one
    /// call site, in the message loop.
    #[inline(always)]
    fn on_order<R: Rules>(&mut self, op: OrderOp, seq: u64, ts: i64, rules: &mut R) {
        // One probe of the order table: the order's locate (to read its
        // best before the change), then the operation on that slot.
        let order_ref = match op {
            OrderOp::Reduce { order_ref, .. } | OrderOp::Delete(order_ref) => order_ref,
            OrderOp::Replace { original, .. } => original,
        };
        let Some(found) = self.books.lookup(order_ref) else {
            rules.count(Count::UnknownOrder);
            return;
        };
        let before = self.books.best_key(found.locate);
        let effect = match op {
            OrderOp::Reduce { shares, .. } => self.books.reduce_found(found, shares),
            OrderOp::Delete(_) => self.books.delete_found(found),
            OrderOp::Replace {
                new_ref,
                shares,
                price,
                ..
            } => self.books.replace_found(found, new_ref, shares, price),
        };
        self.touched(effect.locate, before, seq, ts, rules);
        match effect.error {
            None => {}
            Some(OrderError::ZeroShares) => rules.count(Count::InvalidMessage),
            Some(_) => rules.count(Count::OrderConflict),
        }
    }
}
