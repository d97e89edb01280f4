//! The `cboe-pitch` adapter (venues.md `cboe-pitch`): each unit's
//! datagrams onto the channel rules of its own channel (the unit is the
//! channel: the engine keeps one per unit and selects it before every
//! call), its order messages into a book per symbol, and the best bid and
//! offer of each book as its symbol's quote, "as `nasdaq-itch`" (the books
//! are `nasdaq_itch::book::Books`). Pure code.
//!
//! **Sessions.** PITCH names no session, so `place` decides with
//! venues.md's rules 1-4 (`sessions::UnitSession`, one per unit) and gives
//! the unit's channel a synthetic session id per unit and session,
//! `U001S00001` (unit, then the unit's sessions begun since start), which
//! is what replay and status print.
//!
//! **Books.** One `Books` per unit (order ids are the unit's own: an order
//! message acts on its unit's order), made when the unit is first heard,
//! `max_orders` live orders counting every unit's; and a dense book id per
//! symbol of the unit's session, so that `Books`'s 65,536 books serve any
//! `max_symbols`. `Books` holds ITCH's u32 prices (4 decimals): a PITCH
//! price above $429,496.7295 cannot be booked; it is counted
//! (`prices_unbookable`) and its symbol is suspect `gap`, a known limit
//! (docs/venues.md).

use jiff::civil::Date;

use super::frame::{Datagram, Messages, UnitHeader, HEADER_LEN};
use super::lagging::Lagging;
use super::messages::{self, BookMessage, Message, LONG_PRICE_SCALE};
use super::sessions::{NewSessionRule, NyDates, PitchLine, UnitSession, Verdict};
use super::time::UnitClock;
use super::units::{Membership, UnitSet};
use crate::util::pages::Zeroed;
use crate::util::prefetch::prefetch;
use crate::venue::nasdaq_itch::book::{BestKey, Books, OrderError, LOCATES};
use crate::venue::nasdaq_itch::messages::Side as BookSide;
use crate::venue::{
    Applied, ChannelHeader, Count, DatagramError, Header, LineKind, Placement, Policy, Rules,
    SnapshotError, Venue,
};
use crate::wire::{PacketKind, SessionId, Side};

/// V2: the halt source of Trading Status (PITCH has one).
const HALT_TRADING_STATUS: u8 = 1;

/// No book: a slot's entry in `book_of` before its first Add this session.
const NO_BOOK: u32 = u32::MAX;

/// Unit ids are 1-255 (0 never reaches a channel: `Datagram::parse`
/// refuses it); the engine's channel ids are the unit ids.
const UNITS: usize = 256;

/// Entries of a unit's table of names (`Names`): a power of two, at most
/// `NAMES_USED` of them in use.
const NAMES: usize = 1 << 16;
const NAMES_USED: usize = NAMES / 2;

/// How many messages ahead of the one applied the second stage of the
/// cache hints goes (the first stage hints every message of the datagram
/// before the first is applied), as the `nasdaq-itch` adapter.
const LEVEL_AHEAD: usize = 4;

/// A symbol the unit named in an Add Order: the first word of its key (a
/// PITCH symbol is at most 8 bytes: the whole key), the feed's slot for
/// it, and its book id this session when `session` is the unit's
/// `names_session`. All zeros: unused (no symbol's word is 0).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Name {
    word: u64,
    slot: u32,
    book: u16,
    session: u16,
}

const _: () = assert!(std::mem::size_of::<Name>() == 16, "four names a cache line");

/// A unit's symbols by name, so that an Add Order finds its symbol's slot
/// and book in one probe of the adapter's own table instead of the feed's
/// symbol index and the symbol's state (the feed never takes a slot back,
/// so a slot once found stays the symbol's). Insert only; once
/// `NAMES_USED` symbols are in it, others are looked up in the feed each
/// time.
struct Names {
    table: Zeroed<[Name; NAMES]>,
    len: usize,
    /// The book ids of entries stamped with another session are stale
    /// (1-65535: 0 is no entry's).
    session: u16,
}

impl Names {
    fn new() -> Names {
        Names {
            // SAFETY: every field of Name is an integer; all zeros is the
            // Default name, an unused entry.
            table: unsafe { Zeroed::new() },
            len: 0,
            session: 1,
        }
    }

    #[inline(always)]
    fn home(word: u64) -> usize {
        (word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) as usize
    }

    /// The entry of `word`: `Ok` when present, `Err` the free entry where
    /// it would go.
    #[inline(always)]
    fn find(&self, word: u64) -> Result<usize, usize> {
        let mut i = Self::home(word);
        loop {
            let e = &self.table[i];
            if e.word == word {
                return Ok(i);
            }
            if e.word == 0 {
                return Err(i);
            }
            i = (i + 1) & (NAMES - 1);
        }
    }

    /// The slot of a symbol the feed gave `slot`, at the free entry `at`
    /// that `find` gave (nothing when the table is at its limit).
    #[inline]
    fn insert(&mut self, at: usize, word: u64, slot: u32) -> Option<usize> {
        if self.len >= NAMES_USED {
            return None;
        }
        self.len += 1;
        self.table[at] = Name {
            word,
            slot,
            book: 0,
            session: 0,
        };
        Some(at)
    }

    /// The book id of entry `i` this session, if it has one.
    #[inline(always)]
    fn book(&self, i: usize) -> Option<u16> {
        let e = &self.table[i];
        (e.session == self.session).then_some(e.book)
    }

    #[inline(always)]
    fn set_book(&mut self, i: usize, book: u16) {
        let session = self.session;
        let e = &mut self.table[i];
        e.book = book;
        e.session = session;
    }

    /// Every entry's book id becomes stale (the unit's books were reset).
    fn forget_books(&mut self) {
        self.session = self.session.wrapping_add(1);
        if self.session == 0 {
            // Once in 65,535 resets: no old stamp may match again.
            for e in self.table.iter_mut() {
                e.session = 0;
            }
            self.session = 1;
        }
    }

    /// Cache hint for the entry `word` starts its probe at.
    #[inline(always)]
    fn prefetch(&self, word: u64) {
        prefetch(&self.table[Self::home(word)]);
    }
}

/// An order message's change to the order it names.
#[derive(Clone, Copy, Debug)]
enum OrderOp {
    /// Order Executed, Reduce Size: `shares` leave it.
    Reduce(u32),
    /// Order Executed at Price/Size: it keeps `remaining` shares.
    SetShares(u32),
    Modify {
        shares: u32,
        price: i64,
    },
    Delete,
}

/// What the adapter keeps per book (per symbol of the unit's session).
#[derive(Clone, Copy, Debug, Default)]
struct BookState {
    /// The symbol slot the book is of.
    slot: u32,
    /// In the dirty list of the packet being applied.
    dirty: bool,
    /// The best as of the end of the last packet that touched it: what the
    /// symbol's quote was last set from.
    published: BestKey,
    /// The packet's last message whose own effect changed the best: the
    /// quote's `seq` and `source_ts`.
    change_seq: u64,
    change_ts: i64,
}

/// One unit: its session, clock, orders and books.
struct Unit {
    session: UnitSession,
    /// Sessions begun since start: the synthetic session id's number.
    begun: u32,
    current: SessionId,
    clock: UnitClock,
    books: Books,
    /// Book id by symbol slot (`NO_BOOK`: none this session); grows to the
    /// largest slot the unit has booked.
    book_of: Vec<u32>,
    /// By book id, `next_book` of them in use this session.
    book_state: Vec<BookState>,
    next_book: u32,
    /// C5: the latest datagrams, and a restarted session's lagging copies.
    lagging: Lagging,
    /// The symbols of its Add Orders by name, with their book ids.
    names: Names,
}

impl Unit {
    fn new(max_orders: usize, max_hole_ns: i64) -> Unit {
        Unit {
            session: UnitSession::new(),
            begun: 0,
            current: SessionId::default(),
            clock: UnitClock::new(),
            books: Books::new(max_orders),
            book_of: Vec::new(),
            book_state: vec![BookState::default(); LOCATES],
            next_book: 0,
            lagging: Lagging::new(max_hole_ns),
            names: Names::new(),
        }
    }

    /// The book of `slot`, given one if it has none yet this session.
    /// `None` when the unit's 65,536 books are all in use.
    #[inline]
    fn book(&mut self, slot: u32) -> Option<u16> {
        let i = slot as usize;
        if i >= self.book_of.len() {
            self.book_of.resize(i + 1, NO_BOOK);
        }
        if self.book_of[i] != NO_BOOK {
            return Some(self.book_of[i] as u16);
        }
        if self.next_book as usize >= LOCATES {
            return None;
        }
        let b = self.next_book;
        self.next_book += 1;
        self.book_of[i] = b;
        self.book_state[b as usize] = BookState {
            slot,
            ..BookState::default()
        };
        Some(b as u16)
    }

    /// Empties the unit's books and forgets its book ids (C5).
    fn reset_books(&mut self) {
        self.books.clear();
        self.book_of.iter_mut().for_each(|b| *b = NO_BOOK);
        self.names.forget_books();
        self.next_book = 0;
    }
}

pub struct CboePitch {
    /// The unit the engine selected (`select_channel`).
    cur: u8,
    /// By unit id, made when the unit is first selected.
    units: Vec<Option<Box<Unit>>>,
    /// The units made so far, in order (what `live_orders` sums).
    heard: Vec<u8>,
    max_orders: usize,
    /// Live orders of the units other than the selected one, as of the
    /// packet being applied (`max_orders` counts the whole feed).
    others_live: usize,
    /// R2's `max_hole_ms` (ns): the lagging-copy window (C5).
    max_hole_ns: i64,
    dates: NyDates,
    members: Membership,
    /// Books touched by the packet being applied (capacity: every book,
    /// so pushing never allocates).
    dirty: Vec<u16>,
    /// Messages applied, by type byte.
    types: Box<[u64; 256]>,
    /// recovery.md R5c "When": the packet being applied made the unit's
    /// books untrustworthy (a bad side, a duplicate order id, a Unit
    /// Clear that removed live orders): a spin is wanted.
    want_spin: bool,
}

/// The synthetic session id of a unit's `n`th session: `U001S00001`.
pub fn session_id(unit: u8, n: u32) -> SessionId {
    let text = format!("U{unit:03}S{:05}", n % 100_000);
    SessionId::parse(&text).expect("10 bytes")
}

/// The unit a synthetic session id names (`U001S00001`: 1), `None` for
/// any other id.
pub fn unit_of_session(id: SessionId) -> Option<u8> {
    let b = id.0;
    if b[0] != b'U' || b[4] != b'S' {
        return None;
    }
    std::str::from_utf8(&b[1..4]).ok()?.parse().ok()
}

/// A price in 10^-9 as `Books` holds it (4 decimals, u32), `None` when it
/// does not fit. Every price the messages give is a multiple of 10^5 (V4).
#[inline]
fn book_price(price: i64) -> Option<u32> {
    u32::try_from(price / LONG_PRICE_SCALE).ok()
}

#[inline]
fn quote_side(level: Option<crate::venue::nasdaq_itch::book::Level>) -> Option<Side> {
    level.map(|l| Side {
        px: l.price as i64 * LONG_PRICE_SCALE,
        qty: l.shares,
    })
}

impl CboePitch {
    /// A feed of at most `max_orders` live orders, every unit's together
    /// (venues.md: as `nasdaq-itch`'s `max_orders`).
    pub fn new(max_orders: usize) -> CboePitch {
        let mut units = Vec::with_capacity(UNITS);
        units.resize_with(UNITS, || None);
        CboePitch {
            cur: 0,
            units,
            heard: Vec::with_capacity(UNITS),
            others_live: 0,
            max_orders,
            // recovery.md: `max_hole_ms`'s default, until the feed sets it.
            max_hole_ns: 2_000 * 1_000_000,
            dates: NyDates::new(),
            members: Membership::new(0),
            dirty: Vec::with_capacity(LOCATES),
            types: Box::new([0; 256]),
            want_spin: false,
        }
    }

    /// The unit selected last, once one was.
    pub fn unit(&self) -> Option<u8> {
        (self.cur != 0).then_some(self.cur)
    }

    /// The units heard so far, ascending.
    pub fn units(&self) -> impl Iterator<Item = u8> + '_ {
        (1..=255u8).filter(|&u| self.units[u as usize].is_some())
    }

    /// The books of `unit` (tests and diagnostics).
    pub fn books(&self, unit: u8) -> Option<&Books> {
        self.units[unit as usize].as_deref().map(|u| &u.books)
    }

    /// The selected unit (made by `select_channel`).
    #[inline]
    fn u(&mut self) -> &mut Unit {
        self.units[self.cur as usize]
            .as_deref_mut()
            .expect("the engine selects a unit before using it")
    }

    /// After a book operation on `book` whose best was `before`: note the
    /// message if its own effect changed the best, and mark the book for
    /// the end of the packet, where its symbol's state is written: hinted
    /// now, it is in cache by then.
    #[inline]
    fn touched<R: Rules>(&mut self, book: u16, before: BestKey, seq: u64, ts: i64, rules: &R) {
        let u = self.units[self.cur as usize]
            .as_deref_mut()
            .expect("selected");
        let s = &mut u.book_state[book as usize];
        if u.books.best_key(book) != before {
            s.change_seq = seq;
            s.change_ts = ts;
        }
        if !s.dirty {
            s.dirty = true;
            self.dirty.push(book);
            rules.prefetch_symbol(s.slot);
        }
    }

    /// A symbol an Add, Trade or Trading Status names: its slot, made a
    /// member of the unit (venues.md, Units and symbols).
    #[inline]
    fn carry<R: Rules>(&mut self, symbol: crate::wire::Symbol, rules: &mut R) -> Option<u32> {
        let slot = rules.symbol(symbol)?;
        self.carry_slot(slot, rules);
        Some(slot)
    }

    /// [`CboePitch::carry`] of a symbol whose slot is known.
    #[inline]
    fn carry_slot<R: Rules>(&mut self, slot: u32, rules: &mut R) {
        let c = self.members.carry(self.cur, slot);
        if c.joined || !c.left.is_empty() {
            rules.channels_changed(slot, self.members.units_of(slot));
        }
    }

    /// An Add Order's symbol: its slot, as `carry` (the unit's names
    /// first, the feed's symbol index for a symbol not among them), and
    /// its entry in the unit's names when it has one.
    #[inline]
    fn carry_named<R: Rules>(
        &mut self,
        symbol: crate::wire::Symbol,
        rules: &mut R,
    ) -> (Option<u32>, Option<usize>) {
        if !symbol.fits_wire() {
            // Never from a PITCH field: the names key 8 bytes only.
            return (self.carry(symbol, rules), None);
        }
        let word = symbol.words()[0];
        let names = &mut self.u().names;
        let (slot, name) = match names.find(word) {
            Ok(i) => (names.table[i].slot, Some(i)),
            Err(at) => {
                let Some(slot) = rules.symbol(symbol) else {
                    return (None, None);
                };
                (slot, self.u().names.insert(at, word, slot))
            }
        };
        self.carry_slot(slot, rules);
        (Some(slot), name)
    }

    /// Unit Clear: every order of the unit leaves; each book that had a
    /// best takes the change, stamped by this message.
    fn unit_clear<R: Rules>(&mut self, seq: u64, ts: i64, rules: &mut R) {
        rules.count(Count::UnitClear);
        if self.u().books.live_orders() > 0 {
            self.want_spin = true;
            // No message says when the book that follows is whole: the
            // unit's symbols are suspect `gap` until its next session.
            for slot in self.members.members(self.cur) {
                rules.suspect_gap(slot);
            }
        }
        let u = self.units[self.cur as usize]
            .as_deref_mut()
            .expect("selected");
        let books = u.next_book as u16;
        // Book ids are kept: the symbols stay the unit's.
        let keys: Vec<BestKey> = (0..books).map(|b| u.books.best_key(b)).collect();
        u.books.clear();
        for (b, key) in keys.into_iter().enumerate() {
            self.touched(b as u16, key, seq, ts, rules);
        }
    }

    /// An order message naming `order_id`, acting on the unit's order.
    #[inline]
    fn on_order<R: Rules>(&mut self, order_id: u64, op: OrderOp, seq: u64, ts: i64, rules: &mut R) {
        let u = self.u();
        let Some(found) = u.books.lookup(order_id) else {
            rules.count(Count::UnknownOrder);
            return;
        };
        let book = found.locate;
        let before = u.books.best_key(book);
        match op {
            // Removing more shares than the order has makes it leave: not
            // an error here (venues.md).
            OrderOp::Reduce(shares) => {
                u.books.reduce_found(found, shares);
            }
            OrderOp::SetShares(remaining) => {
                u.books.set_shares_found(found, remaining);
            }
            OrderOp::Modify { shares, price } => match book_price(price) {
                // It leaves at 0.
                _ if shares == 0 => {
                    u.books.delete_found(found);
                }
                Some(p) => {
                    u.books.replace_found(found, order_id, shares, p);
                }
                None => {
                    u.books.delete_found(found);
                    rules.count(Count::PriceUnbookable);
                    rules.suspect_gap(u.book_state[book as usize].slot);
                }
            },
            OrderOp::Delete => {
                u.books.delete_found(found);
            }
        }
        self.touched(book, before, seq, ts, rules);
    }

    #[allow(clippy::too_many_arguments)]
    fn add<R: Rules>(
        &mut self,
        order_id: u64,
        side: u8,
        shares: u32,
        symbol: crate::wire::Symbol,
        price: i64,
        seq: u64,
        ts: i64,
        rules: &mut R,
    ) {
        let (slot, name) = self.carry_named(symbol, rules);
        let side = match side {
            b'B' => BookSide::Buy,
            b'S' => BookSide::Sell,
            _ => {
                // Not placed; the book misses an order until the next
                // session (or a spin).
                self.want_spin = true;
                rules.count(Count::BookError);
                if let Some(slot) = slot {
                    rules.suspect_gap(slot);
                }
                return;
            }
        };
        // An id live on the unit: the old order leaves, the new replaces
        // it; both symbols are suspect (venues.md, Book messages).
        let u = self.u();
        if let Some(found) = u.books.lookup(order_id) {
            let old = found.locate;
            let before = u.books.best_key(old);
            u.books.delete_found(found);
            let old_slot = u.book_state[old as usize].slot;
            self.touched(old, before, seq, ts, rules);
            self.want_spin = true;
            rules.count(Count::BookError);
            rules.suspect_gap(old_slot);
            if let Some(slot) = slot {
                rules.suspect_gap(slot);
            }
        }
        let Some(slot) = slot else {
            // The symbol table is full (counted by the engine).
            return;
        };
        if shares == 0 {
            // No live shares: never a best price.
            return;
        }
        let Some(p) = book_price(price) else {
            rules.count(Count::PriceUnbookable);
            rules.suspect_gap(slot);
            return;
        };
        let room = self.max_orders.saturating_sub(self.others_live);
        let u = self.u();
        let book = match name.and_then(|i| u.names.book(i)) {
            Some(b) => Some(b),
            None => {
                let b = u.book(slot);
                if let (Some(b), Some(i)) = (b, name) {
                    u.names.set_book(i, b);
                }
                b
            }
        };
        let Some(book) = book else {
            // More symbols than one unit's books: the book misses orders.
            rules.count(Count::OrderOverflow);
            rules.suspect_gap(slot);
            return;
        };
        if u.books.live_orders() >= room {
            // venues.md: `max_orders` live orders per feed, every unit's.
            rules.count(Count::OrderOverflow);
            rules.suspect_gap(slot);
            return;
        }
        let before = u.books.best_key(book);
        match u.books.add(book, order_id, side, shares, p) {
            Ok(()) => self.touched(book, before, seq, ts, rules),
            Err(OrderError::Overflow) => {
                rules.count(Count::OrderOverflow);
                rules.suspect_gap(slot);
            }
            // Zero shares and a live id were handled above.
            Err(_) => {}
        }
    }

    /// Applies one decoded message of the selected unit, stamped `seq` and
    /// `ts`; `true` for End of Session (the caller ends the session after
    /// the packet's other messages).
    #[inline]
    fn on_message<R: Rules>(&mut self, msg: Message, seq: u64, ts: i64, rules: &mut R) -> bool {
        match msg {
            Message::Time { .. } => {}
            Message::UnitClear { .. } => self.unit_clear(seq, ts, rules),
            Message::AddOrder {
                order_id,
                side,
                shares,
                symbol,
                price,
                ..
            } => self.add(order_id, side, shares, symbol, price, seq, ts, rules),
            Message::OrderExecuted {
                order_id, shares, ..
            }
            | Message::ReduceSize {
                order_id, shares, ..
            } => self.on_order(order_id, OrderOp::Reduce(shares), seq, ts, rules),
            Message::ExecutedAtPriceSize {
                order_id,
                remaining,
                ..
            } => self.on_order(order_id, OrderOp::SetShares(remaining), seq, ts, rules),
            Message::ModifyOrder {
                order_id,
                shares,
                price,
                ..
            } => self.on_order(order_id, OrderOp::Modify { shares, price }, seq, ts, rules),
            Message::DeleteOrder { order_id, .. } => {
                self.on_order(order_id, OrderOp::Delete, seq, ts, rules)
            }
            Message::Trade { symbol, .. } => {
                self.carry(symbol, rules);
            }
            Message::TradingStatus { symbol, status, .. } => {
                let Some(slot) = self.carry(symbol, rules) else {
                    return false;
                };
                // V2: T trading; H, Q, S, A halted; others change nothing.
                match status {
                    b'T' => rules.set_halt(slot, HALT_TRADING_STATUS, false),
                    b'H' | b'Q' | b'S' | b'A' => rules.set_halt(slot, HALT_TRADING_STATUS, true),
                    _ => {}
                }
            }
            Message::EndOfSession { .. } => return true,
            Message::TradeBreak { .. }
            | Message::AuctionUpdate { .. }
            | Message::AuctionSummary { .. }
            | Message::RetailPriceImprovement { .. } => {}
        }
        false
    }

    /// A message's time: `timed` (its unit's clock's) noted in the
    /// packet's outcome, or when untimed New York midnight of the arrival
    /// date (`untimed`, computed once a packet).
    #[inline(always)]
    fn ts(
        &mut self,
        timed: Option<i64>,
        now: i64,
        untimed: &mut Option<i64>,
        out: &mut Applied,
    ) -> i64 {
        match timed {
            Some(t) => {
                // V3, V5: timed messages only.
                out.stamp(t);
                t
            }
            None => *untimed.get_or_insert_with(|| self.u().clock.untimed_ts(now)),
        }
    }

    /// The first stage of the cache hints for a message of the selected
    /// unit not yet applied, read from its raw bytes (a hint changes
    /// nothing; a short or unknown message gets none): the order table
    /// slot its order id starts at, an Add Order's entry in the names.
    #[inline(always)]
    fn prefetch_message(&self, block: &[u8]) {
        let Some(u) = self.units[self.cur as usize].as_deref() else {
            return;
        };
        if let Some(id) = messages::peek_order_id(block) {
            u.books.prefetch_order(id);
        }
        if let Some(word) = messages::peek_add_word(block) {
            u.names.prefetch(word);
        }
    }

    /// The second stage: what the message reaches through the state the
    /// first brought into cache. An Add Order of a named symbol: its
    /// book's top and side, its book state and its units; an order
    /// message: its order's level.
    #[inline(always)]
    fn prefetch_level(&self, block: &[u8]) {
        let Some(u) = self.units[self.cur as usize].as_deref() else {
            return;
        };
        if let Some(word) = messages::peek_add_word(block) {
            let Ok(i) = u.names.find(word) else {
                return;
            };
            if let Some(book) = u.names.book(i) {
                let side = match block.get(14) {
                    Some(b'S') => BookSide::Sell,
                    _ => BookSide::Buy,
                };
                u.books.prefetch_side(book, side);
                prefetch(&u.book_state[book as usize]);
            }
            self.members.prefetch(u.names.table[i].slot);
        } else if let Some(id) = messages::peek_order_id(block) {
            u.books.prefetch_order_level(id);
        }
    }

    /// Live orders of the units other than the selected one
    /// (`max_orders` counts the whole feed), before applying messages.
    fn count_others_live(&mut self) {
        let cur = self.cur;
        self.others_live = self
            .heard
            .iter()
            .filter(|&&u| u != cur)
            .filter_map(|&u| self.units[u as usize].as_deref())
            .map(|u| u.books.live_orders())
            .sum();
    }

    /// V1 after each packet: a book whose best changed over the packet
    /// quotes anew; one that changed and came back does not.
    fn publish<R: Rules>(&mut self, rules: &mut R) {
        let u = self.units[self.cur as usize]
            .as_deref_mut()
            .expect("selected");
        for &book in &self.dirty {
            let s = &mut u.book_state[book as usize];
            s.dirty = false;
            let key = u.books.best_key(book);
            if key == s.published {
                continue;
            }
            s.published = key;
            let best = u.books.best(book);
            rules.venue_quote(
                s.slot,
                s.change_seq,
                s.change_ts,
                quote_side(best.bid),
                quote_side(best.ask),
            );
        }
        self.dirty.clear();
    }
}

impl Venue for CboePitch {
    fn policy(&self) -> Policy {
        Policy {
            channel_source_time: true,
            // venues.md: the nasdaq-itch rule that replaces S7, per unit.
            trust_from_start: true,
            loops: false,
        }
    }

    fn channels(&self) -> usize {
        UNITS
    }

    #[inline]
    fn channel_of(&self, datagram: &[u8]) -> u8 {
        UnitHeader::read(datagram).map_or(0, |h| h.unit)
    }

    fn select_channel(&mut self, channel: u8) {
        self.cur = channel;
        if self.units[channel as usize].is_none() {
            // Once per unit: its books and book table.
            self.units[channel as usize] =
                Some(Box::new(Unit::new(self.max_orders, self.max_hole_ns)));
            self.heard.push(channel);
        }
    }

    fn channels_of(&self, slot: u32) -> UnitSet {
        self.members.units_of(slot)
    }

    fn take_channel_changes(&mut self, out: &mut Vec<u32>) {
        self.members.take_changed(out);
    }

    fn forget_channel_session<R: Rules>(&mut self, rules: &mut R) {
        // C5 reaches the unit's symbols only (they keep the cause it gives
        // them once the unit forgets them as members).
        for slot in self.members.members(self.cur) {
            rules.forget_session(slot);
        }
    }

    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        let d = Datagram::parse(datagram)?;
        let h = d.header;
        Ok(Header {
            channel: ChannelHeader {
                // `place` sets the session.
                session: SessionId::default(),
                sequence: h.sequence as u64,
                kind: if h.count == 0 {
                    PacketKind::Heartbeat
                } else {
                    PacketKind::Data
                },
                count: h.count as u16,
                stale_session: false,
            },
            send_time: None,
        })
    }

    fn place(
        &mut self,
        kind: LineKind,
        datagram: &[u8],
        header: &mut Header,
        next: u64,
        now: i64,
    ) -> Placement {
        let h = UnitHeader::read(datagram).expect("a datagram `parse` accepted");
        if h.is_unsequenced() {
            // venues.md: part of no unit's sequence, no C4.
            return Placement::Unsequenced;
        }
        let line = if kind == LineKind::Gap {
            PitchLine::Gap
        } else {
            PitchLine::Realtime
        };
        if h.unit != self.cur {
            // The engine selects the datagram's unit first.
            return Placement::OtherUnit;
        }
        if line == PitchLine::Gap && h.count == 0 {
            // Gap-line heartbeats change nothing.
            return Placement::GapDropped;
        }
        // `parse` validated it whole: no need to walk it again.
        let d = Datagram {
            header: h,
            body: &datagram[HEADER_LEN..],
            unknown: 0,
        };
        let date: Date = self.dates.date(now);
        let unit = self.cur;
        let u = self.u();
        if line == PitchLine::Realtime && u.lagging.is_copy(datagram, now) {
            // C5: a lagging line's copy of the session a restart replaced.
            return Placement::LaggingCopy;
        }
        match u.session.classify(line, &d, datagram, date, next) {
            Verdict::Unsequenced => return Placement::Unsequenced,
            Verdict::GapDropped => return Placement::GapDropped,
            verdict @ (Verdict::FirstSession | Verdict::NewSession(_)) => {
                let restart = verdict == Verdict::NewSession(NewSessionRule::UnitClearRestart);
                u.lagging.new_session(restart, now);
                u.lagging.record(datagram, now);
                u.session.begin();
                u.begun = u.begun.wrapping_add(1);
                u.current = session_id(unit, u.begun);
                u.session.processed(&d, datagram, date, false);
            }
            Verdict::Current => {
                if line == PitchLine::Realtime {
                    u.lagging.record(datagram, now);
                }
                u.session.processed(&d, datagram, date, false)
            }
            // The engine drops it as a copy of the ended session (C6).
            Verdict::EndedCopy => {}
        }
        header.channel.session = u.current;
        Placement::Channel
    }

    fn on_loss(&mut self) {
        // venues.md, Time: the lost datagrams may have held a Time.
        self.u().clock.untime();
    }

    fn set_max_symbols(&mut self, max: usize) {
        self.members = Membership::new(max);
    }

    fn set_max_hole_ns(&mut self, ns: i64) {
        self.max_hole_ns = ns;
    }

    fn on_session_start(&mut self, _now: i64, first_session: bool) {
        // Messages are untimed until the session's first Time.
        self.u().clock.untime();
        self.members.new_session(self.cur);
        if !first_session {
            // C5 for the unit: its orders and books are emptied; symbols
            // keep their quotes, suspect `session_change`, until their book
            // quotes in the new session.
            self.u().reset_books();
            self.dirty.clear();
        }
    }

    // Kept out of line: inlined into `AnyVenue`'s dispatch, this body
    // changes the code generated for the other venues' arms of the same
    // function (BENCHMARKS.md, ITCH's instructions a datagram); the call
    // costs PITCH about 0.2% of its instructions a datagram.
    #[inline(never)]
    fn apply<R: Rules>(
        &mut self,
        datagram: &[u8],
        header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied {
        let now = rules.now();
        let mut out = Applied::default();
        let Some(h) = UnitHeader::read(datagram) else {
            return out;
        };
        let first = header.channel.sequence;
        self.count_others_live();
        self.want_spin = false;
        // New York midnight of the arrival date, for untimed messages:
        // computed once a packet, when needed.
        let mut untimed: Option<i64> = None;
        let mut ended = false;
        let msgs = Messages::over(&datagram[HEADER_LEN..], h.count);
        // Cache hints for every message first, so that the misses of one
        // message's order slot and symbol overlap those of the others
        // instead of following one another; then, `LEVEL_AHEAD` messages
        // ahead of the one applied, what they reach through those.
        for block in msgs.clone().skip(skip as usize) {
            self.prefetch_message(block);
        }
        let mut ahead = msgs.clone().skip(skip as usize);
        for block in ahead.by_ref().take(LEVEL_AHEAD) {
            self.prefetch_level(block);
        }
        for (i, block) in msgs.enumerate().skip(skip as usize) {
            if let Some(next) = ahead.next() {
                self.prefetch_level(next);
            }
            let seq = first.saturating_add(i as u64);
            self.types[block[1] as usize] += 1;
            // The book's own messages, most of a day, read in place (the
            // fields `decode` gives them, of a datagram `parse` accepted).
            if let Some(m) = messages::book_message(block) {
                let timed = self.u().clock.stamp(m.offset());
                let ts = self.ts(timed, now, &mut untimed, &mut out);
                match m {
                    BookMessage::Add {
                        order_id,
                        side,
                        shares,
                        symbol,
                        price,
                        ..
                    } => self.add(order_id, side, shares, symbol, price, seq, ts, rules),
                    BookMessage::Reduce {
                        order_id, shares, ..
                    } => self.on_order(order_id, OrderOp::Reduce(shares), seq, ts, rules),
                    BookMessage::Modify {
                        order_id,
                        shares,
                        price,
                        ..
                    } => {
                        let op = OrderOp::Modify { shares, price };
                        self.on_order(order_id, op, seq, ts, rules)
                    }
                    BookMessage::Delete { order_id, .. } => {
                        self.on_order(order_id, OrderOp::Delete, seq, ts, rules)
                    }
                }
                continue;
            }
            let Ok(msg) = messages::decode(block) else {
                // Unknown types only: `parse` refused every other error.
                rules.count(Count::UnknownMessage);
                continue;
            };
            let clock = &mut self.u().clock;
            let timed = match msg {
                Message::Time { seconds } => clock.on_time(seconds, now),
                _ => clock.stamp(msg.time_offset().unwrap_or(0)),
            };
            let ts = self.ts(timed, now, &mut untimed, &mut out);
            if self.on_message(msg, seq, ts, rules) {
                ended = true;
            }
        }
        self.publish(rules);
        out.image_wanted = std::mem::take(&mut self.want_spin);
        if ended {
            // C6 after the packet's other messages (the engine), and the
            // unit's session rules learn that it ended.
            out.end_of_session = true;
            let date = self.dates.date(now);
            self.u().session.end(date);
            self.members.end_session(self.cur);
        }
        out
    }

    /// recovery.md R5c step 3: held messages up to `S` are skipped, since
    /// the spin reflects them, but their Time messages still set the
    /// unit's Time base.
    fn skipped_below(&mut self, datagram: &[u8], first: u64, next: u64, now: i64) {
        let Some(h) = UnitHeader::read(datagram) else {
            return;
        };
        let msgs = Messages::over(&datagram[HEADER_LEN..], h.count);
        for (i, block) in msgs.enumerate() {
            if first.saturating_add(i as u64) >= next {
                break;
            }
            if let Ok(Message::Time { seconds }) = messages::decode(block) {
                self.u().clock.on_time(seconds, now);
            }
        }
    }

    /// recovery.md R5c step 5: a spin's messages (each a u16 big-endian
    /// length, then the PITCH message, Length byte first and equal to
    /// that length), checked whole as a datagram's are: a known type must
    /// decode; an unknown one is skipped by its Length.
    fn validate_snapshot(&self, blocks: &[u8]) -> Result<usize, SnapshotError> {
        let mut count = 0usize;
        let mut at = 0usize;
        while at < blocks.len() {
            let bad = SnapshotError::Malformed { index: count };
            let len = match blocks.get(at..at + 2) {
                Some(b) => u16::from_be_bytes([b[0], b[1]]) as usize,
                None => return Err(bad),
            };
            let Some(msg) = blocks.get(at + 2..at + 2 + len) else {
                return Err(bad);
            };
            if msg.len() < 2 || msg[0] as usize != len {
                return Err(bad);
            }
            match messages::decode(msg) {
                Ok(_) | Err(messages::DecodeError::UnknownType { .. }) => {}
                Err(_) => return Err(bad),
            }
            count += 1;
            at += 2 + len;
        }
        Ok(count)
    }

    /// recovery.md R5c "On Spin Finished" steps 1-2, on the selected unit
    /// only: its symbols lose their causes, its books are emptied and the
    /// spin's messages applied to them in order with the spin's own clock
    /// (untimed before its first Time; the unit's clock is left as it
    /// was), then every symbol of the unit, and every one the spin named,
    /// takes its book's best with `seq = S` (`next - 1`) and `source_ts` =
    /// the latest timed message (New York midnight when none). Returns
    /// that latest time (`i64::MIN`: no timed message).
    fn rebuild<R: Rules>(&mut self, blocks: &[u8], _count: usize, next: u64, rules: &mut R) -> i64 {
        let now = rules.now();
        let seq = next.saturating_sub(1);
        let cur = self.cur;
        // Step 2: causes go first, so that the spin's own book errors give
        // theirs back.
        let before: Vec<u32> = self.members.members(cur).collect();
        for &slot in &before {
            rules.reset_for_spin(slot);
        }
        // Step 1: the unit's books alone are replaced.
        self.count_others_live();
        self.u().reset_books();
        self.dirty.clear();
        let unit_clock = std::mem::take(&mut self.u().clock);
        let mut latest = i64::MIN;
        let mut statuses = 0usize;
        let mut at = 0usize;
        while at + 2 <= blocks.len() {
            let len = u16::from_be_bytes([blocks[at], blocks[at + 1]]) as usize;
            let Some(block) = blocks.get(at + 2..at + 2 + len) else {
                break;
            };
            at += 2 + len;
            let Ok(msg) = messages::decode(block) else {
                rules.count(Count::UnknownMessage);
                continue;
            };
            let clock = &mut self.u().clock;
            let timed = match msg {
                Message::Time { seconds } => clock.on_time(seconds, now),
                _ => clock.stamp(msg.time_offset().unwrap_or(0)),
            };
            // R5c step 5: no clock sample, no V3 move: the time only
            // stamps the quotes.
            let ts = match timed {
                Some(t) => {
                    latest = latest.max(t);
                    t
                }
                None => clock.untimed_ts(now),
            };
            if matches!(msg, Message::TradingStatus { .. }) {
                statuses += 1;
            }
            // An End of Session in a spin is no session event.
            self.on_message(msg, seq, ts, rules);
        }
        let u = self.units[cur as usize].as_deref_mut().expect("selected");
        let ts = if latest == i64::MIN {
            u.clock.untimed_ts(now)
        } else {
            latest
        };
        u.clock = unit_clock;
        if statuses == 0 {
            // R5c: a halt that began before the join stays unknown.
            rules.count(Count::SpinWithoutStatus);
        }
        // A book error of the spin's own messages leaves its `gap` cause;
        // the next spin comes when something else wants one.
        self.want_spin = false;
        // The spin's changes are quoted once, below.
        for &book in &self.dirty {
            u.book_state[book as usize].dirty = false;
        }
        self.dirty.clear();
        let mut slots: Vec<u32> = self.members.members(cur).collect();
        slots.extend(before);
        slots.sort_unstable();
        slots.dedup();
        for slot in slots {
            let book = u.book_of.get(slot as usize).copied().unwrap_or(NO_BOOK);
            let (bid, ask) = if book == NO_BOOK {
                (None, None)
            } else {
                let b = book as u16;
                u.book_state[b as usize].published = u.books.best_key(b);
                let best = u.books.best(b);
                (quote_side(best.bid), quote_side(best.ask))
            };
            rules.venue_quote(slot, seq, ts, bid, ask);
        }
        latest
    }

    fn live_orders(&self) -> u64 {
        self.heard
            .iter()
            .filter_map(|&u| self.units[u as usize].as_deref())
            .map(|u| u.books.live_orders() as u64)
            .sum()
    }

    fn message_types(&self) -> Option<&[u64; 256]> {
        Some(&self.types)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::counters::FeedCounters;
    use crate::feed::engine::{DatagramOutcome, Feed};
    use crate::feed::settings::FeedSettings;
    use crate::feed::view::SuspectCause;
    use crate::venue::cboe_pitch::frame::frame;
    use crate::venue::cboe_pitch::messages::{encode, Width};
    use crate::venue::VenueKind;
    use crate::wire::Symbol;

    /// 2026-12-01 09:30 New York, as in pitch_scenarios.json.
    const T0: i64 = 1_796_135_400_000_020_000;
    const MS: i64 = 1_000_000;
    /// $20.00 in 10^-9.
    const P20: i64 = 20_000_000_000;

    fn sym(s: &str) -> Symbol {
        Symbol::parse(s).unwrap()
    }

    fn add(id: u64, side: u8, shares: u32, symbol: &str, price: i64) -> Message {
        Message::AddOrder {
            width: Width::Long,
            offset: 0,
            order_id: id,
            side,
            shares,
            symbol: sym(symbol),
            price,
            flags: 1,
        }
    }

    fn dgram(unit: u8, seq: u32, msgs: &[Message]) -> Vec<u8> {
        let mut body = Vec::new();
        for m in msgs {
            encode(m, &mut body).unwrap();
        }
        let mut out = Vec::new();
        frame(unit, seq, msgs.len() as u8, &body, &mut out).unwrap();
        out
    }

    /// A feed of unit 1, its session begun at sequence 1 by a Time.
    fn feed() -> Feed {
        let mut f = Feed::new(FeedSettings::for_venue(VenueKind::CboePitch), 2);
        let out = f.on_datagram(0, &dgram(1, 1, &[Message::Time { seconds: 34_200 }]), T0);
        assert_eq!(out, DatagramOutcome::Applied);
        f
    }

    struct Unit {
        f: Feed,
        seq: u32,
        t: i64,
    }

    impl Unit {
        fn new() -> Unit {
            Unit {
                f: feed(),
                seq: 2,
                t: T0,
            }
        }

        fn send(&mut self, msgs: &[Message]) -> DatagramOutcome {
            self.t += MS;
            let d = dgram(1, self.seq, msgs);
            self.seq += msgs.len() as u32;
            self.f.on_datagram(0, &d, self.t)
        }

        fn bid(&self, s: &str) -> Option<(i64, u64)> {
            let q = self.f.symbol_summary(sym(s)).unwrap();
            q.bid.map(|b| (b.px, b.qty))
        }

        fn ask(&self, s: &str) -> Option<(i64, u64)> {
            let q = self.f.symbol_summary(sym(s)).unwrap();
            q.ask.map(|b| (b.px, b.qty))
        }

        fn suspect(&self, s: &str) -> Option<SuspectCause> {
            self.f.symbol_summary(sym(s)).unwrap().suspect
        }

        fn counters(&self) -> &FeedCounters {
            self.f.counters()
        }
    }

    fn executed_at(id: u64, remaining: u32) -> Message {
        Message::ExecutedAtPriceSize {
            offset: 0,
            order_id: id,
            shares: 1,
            remaining,
            execution_id: 9,
            price: messages::RawPrice::Long(200_000),
        }
    }

    #[test]
    fn session_ids_name_the_unit_and_count_its_sessions() {
        assert_eq!(session_id(1, 1).to_string(), "U001S00001");
        assert_eq!(session_id(255, 12).to_string(), "U255S00012");
        assert_eq!(unit_of_session(session_id(255, 12)), Some(255));
        assert_eq!(unit_of_session(SessionId(*b"SESSION001")), None);
        let f = feed();
        assert_eq!(f.current_session(), Some(session_id(1, 1)));
    }

    #[test]
    fn executed_at_price_size_sets_the_remaining_shares_up_or_down() {
        let mut u = Unit::new();
        u.send(&[add(7, b'B', 100, "AAPL", P20)]);
        assert_eq!(u.bid("AAPL"), Some((P20, 100)));
        // More than the book holds (Cboe's remaining is the truth).
        u.send(&[executed_at(7, 150)]);
        assert_eq!(u.bid("AAPL"), Some((P20, 150)));
        u.send(&[executed_at(7, 40)]);
        assert_eq!(u.bid("AAPL"), Some((P20, 40)));
        // At 0 the order leaves: a later Delete names an unknown order.
        u.send(&[executed_at(7, 0)]);
        assert_eq!(u.bid("AAPL"), None);
        assert_eq!(u.counters().live_orders, 0);
        u.send(&[Message::DeleteOrder {
            offset: 0,
            order_id: 7,
        }]);
        assert_eq!(u.counters().unknown_orders, 1);
        assert_eq!(u.suspect("AAPL"), None);
    }

    #[test]
    fn modify_keeps_the_side_and_to_zero_shares_removes_the_order() {
        let mut u = Unit::new();
        u.send(&[add(3, b'S', 100, "MSFT", P20)]);
        u.send(&[Message::ModifyOrder {
            width: Width::Short,
            offset: 0,
            order_id: 3,
            shares: 300,
            price: 2_005 * 10_000_000,
            flags: 0,
        }]);
        assert_eq!(u.ask("MSFT"), Some((20_050_000_000, 300)));
        assert_eq!(u.bid("MSFT"), None);
        u.send(&[Message::ModifyOrder {
            width: Width::Long,
            offset: 0,
            order_id: 3,
            shares: 0,
            price: P20,
            flags: 0,
        }]);
        assert_eq!(u.ask("MSFT"), None);
        let c = u.counters();
        assert_eq!(
            (c.unknown_orders, c.book_errors, c.invalid_messages),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_live_id_added_again_replaces_the_order_and_suspects_both_symbols() {
        let mut u = Unit::new();
        u.send(&[add(1, b'B', 100, "AAPL", P20), add(2, b'B', 50, "IBM", P20)]);
        u.send(&[add(1, b'S', 70, "IBM", 2 * P20)]);
        assert_eq!(u.counters().book_errors, 1);
        assert_eq!(u.bid("AAPL"), None, "the old order left AAPL's book");
        assert_eq!(u.ask("IBM"), Some((2 * P20, 70)));
        assert_eq!(u.suspect("AAPL"), Some(SuspectCause::Gap));
        assert_eq!(u.suspect("IBM"), Some(SuspectCause::Gap));
    }

    #[test]
    fn an_add_of_another_side_is_not_placed() {
        let mut u = Unit::new();
        u.send(&[add(1, b'B', 100, "AAPL", P20)]);
        u.send(&[add(2, b'X', 100, "AAPL", 2 * P20)]);
        assert_eq!(u.counters().book_errors, 1);
        assert_eq!(u.ask("AAPL"), None);
        assert_eq!(u.bid("AAPL"), Some((P20, 100)));
        assert_eq!(u.suspect("AAPL"), Some(SuspectCause::Gap));
        // A refused Add still makes its symbol known (no_data).
        u.send(&[add(3, b'X', 100, "ZVZZT", P20)]);
        let z = u.f.symbol_summary(sym("ZVZZT")).unwrap();
        assert!(!z.has_quote);
    }

    /// The known limit: `Books` holds u32 prices with 4 decimals.
    #[test]
    fn a_price_above_what_the_books_hold_is_counted_and_suspect() {
        let mut u = Unit::new();
        // $429,496.7295 is the most the books hold; one tick more is not.
        let most = u32::MAX as i64 * LONG_PRICE_SCALE;
        u.send(&[add(1, b'S', 1, "BRKA", most)]);
        assert_eq!(u.ask("BRKA"), Some((most, 1)));
        assert_eq!(u.suspect("BRKA"), None);
        u.send(&[add(2, b'S', 1, "BRKA", most + LONG_PRICE_SCALE)]);
        assert_eq!(u.counters().prices_unbookable, 1);
        assert_eq!(u.ask("BRKA"), Some((most, 1)));
        assert_eq!(u.suspect("BRKA"), Some(SuspectCause::Gap));
        // A Modify to such a price takes the order off the book.
        u.send(&[Message::ModifyOrder {
            width: Width::Long,
            offset: 0,
            order_id: 1,
            shares: 1,
            price: most + LONG_PRICE_SCALE,
            flags: 0,
        }]);
        assert_eq!(u.counters().prices_unbookable, 2);
        assert_eq!(u.ask("BRKA"), None);
    }

    #[test]
    fn another_unit_is_a_channel_of_its_own_and_sequence_zero_changes_nothing() {
        let mut u = Unit::new();
        u.send(&[add(1, b'B', 100, "AAPL", P20)]);
        // Unit 2 joins at sequence 5 (late join): its own channel, its own
        // order ids (the same id 1 is no conflict), its own trust.
        let other = dgram(2, 5, &[add(1, b'S', 50, "MSFT", P20)]);
        assert_eq!(
            u.f.on_datagram(0, &other, T0 + 2 * MS),
            DatagramOutcome::Applied
        );
        assert_eq!(u.counters().units_not_followed, 0);
        assert_eq!(u.counters().book_errors, 0);
        assert_eq!(u.ask("MSFT"), Some((P20, 50)));
        assert_eq!(u.suspect("MSFT"), Some(SuspectCause::NoSnapshot));
        assert_eq!(u.suspect("AAPL"), None, "unit 1 was received from 1");
        assert_eq!(u.counters().live_orders, 2);
        // Unit 1 goes on from its own `next`.
        assert_eq!(
            u.send(&[Message::DeleteOrder {
                offset: 0,
                order_id: 1
            }]),
            DatagramOutcome::Applied
        );
        assert_eq!(u.bid("AAPL"), None);
        assert_eq!(u.ask("MSFT"), Some((P20, 50)));
        assert_eq!(u.counters().channel_gaps, 0);
        let unsequenced = dgram(1, 0, &[add(1, b'B', 100, "IBM", P20)]);
        assert_eq!(
            u.f.on_datagram(1, &unsequenced, T0 + 2 * MS),
            DatagramOutcome::Ignored
        );
        assert_eq!(u.counters().unsequenced, 1);
        assert!(u.f.symbol_summary(sym("IBM")).is_none());
        // Each was received on its line.
        assert_eq!(u.counters().lines[0].packets, 4);
        assert_eq!(u.counters().lines[1].packets, 1);
    }

    #[test]
    fn end_of_session_then_sequence_one_begins_the_units_next_session() {
        let mut u = Unit::new();
        u.send(&[add(1, b'B', 100, "AAPL", P20)]);
        u.send(&[Message::EndOfSession { offset: 0 }]);
        assert!(u.f.session_ended());
        let next = dgram(1, 1, &[Message::Time { seconds: 34_300 }]);
        assert_eq!(
            u.f.on_datagram(0, &next, T0 + 100 * MS),
            DatagramOutcome::Applied
        );
        assert_eq!(u.f.current_session(), Some(session_id(1, 2)));
        assert_eq!(u.counters().live_orders, 0, "C5 empties the unit's books");
        // AAPL keeps its quote, suspect session_change.
        assert_eq!(u.bid("AAPL"), Some((P20, 100)));
        assert_eq!(u.suspect("AAPL"), Some(SuspectCause::SessionChange));
    }

    #[test]
    fn each_unit_reports_its_own_next_session_and_counters() {
        let mut u = Unit::new();
        u.send(&[add(1, b'B', 100, "AAPL", P20)]);
        u.send(&[Message::EndOfSession { offset: 0 }]);
        let two = dgram(2, 1, &[add(9, b'S', 10, "MSFT", P20)]);
        u.f.on_datagram(0, &two, T0 + 10 * MS);
        // Unit 2 loses 3..4.
        let later = dgram(2, 5, &[add(10, b'S', 10, "MSFT", P20)]);
        u.f.on_datagram(0, &later, T0 + 11 * MS);
        u.f.handle_timeout(T0 + 20 * MS);
        let r = u.f.channel_reports();
        assert_eq!(r.iter().map(|c| c.channel).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            (r[0].session, r[0].next, r[0].ended),
            (Some(session_id(1, 1)), 4, true)
        );
        assert_eq!(r[0].counters.sessions_ended, 1);
        assert_eq!(r[0].counters.channel_gaps, 0);
        assert_eq!(
            (r[1].session, r[1].next, r[1].ended),
            (Some(session_id(2, 1)), 6, false)
        );
        assert_eq!(r[1].counters.channel_gaps, 1);
        assert_eq!(r[1].counters.channel_messages_lost, 3);
        // C6 on unit 1 and C3 on unit 2 reach their own symbols only.
        assert_eq!(u.suspect("AAPL"), Some(SuspectCause::SessionEnded));
        assert_eq!(u.suspect("MSFT"), Some(SuspectCause::ChannelGap));
        // Readers of the feed view see every unit folded: fail closed.
        let v = u.f.feed_view();
        assert!(v.ended());
        assert_ne!(v.flags & crate::feed::view::FEED_TRUST_GAP, 0);
    }

    #[test]
    fn after_a_restart_the_replaced_sessions_lagging_copies_are_dropped_for_max_hole_ms() {
        let mut u = Unit::new();
        // Line B lags: what line A carried of the session before the
        // restart reaches B after it.
        let old2 = dgram(1, 2, &[add(1, b'B', 100, "AAPL", P20)]);
        let old3 = dgram(1, 3, &[add(2, b'B', 50, "AAPL", P20)]);
        u.f.on_datagram(0, &old2, T0 + MS);
        u.f.on_datagram(0, &old3, T0 + 2 * MS);
        // Rule 4: sequence 1, Time then Unit Clear, below `next`.
        let restart = dgram(
            1,
            1,
            &[
                Message::Time { seconds: 34_201 },
                Message::UnitClear { offset: 0 },
            ],
        );
        u.f.on_datagram(0, &restart, T0 + 10 * MS);
        assert_eq!(u.f.current_session(), Some(session_id(1, 2)));
        let before = u.counters().stale_session_dropped;
        // B's copy of the old sequence 3: beyond the new `next` (3), but a
        // copy of the replaced session: dropped, no hole.
        assert_eq!(
            u.f.on_datagram(1, &old3, T0 + 20 * MS),
            DatagramOutcome::Ignored
        );
        assert_eq!(u.counters().stale_session_dropped, before + 1);
        assert!(!u.f.recovering());
        assert_eq!(u.counters().channel_gaps, 0);
        assert_eq!(u.counters().live_orders, 0);
        // After max_hole_ms (2 s) the same bytes are the new session's.
        let late = T0 + 10 * MS + 2_000 * MS + 1;
        u.f.on_datagram(1, &old3, late);
        assert_eq!(u.counters().stale_session_dropped, before + 1);
        assert_eq!(
            u.counters().live_orders,
            1,
            "applied as a datagram of the session"
        );
    }

    #[test]
    fn max_orders_counts_every_units_orders() {
        let mut settings = FeedSettings::for_venue(VenueKind::CboePitch);
        settings.venue.max_orders = 2;
        let mut f = Feed::new(settings, 1);
        f.on_datagram(0, &dgram(1, 1, &[add(1, b'B', 10, "AAPL", P20)]), T0);
        f.on_datagram(0, &dgram(2, 1, &[add(1, b'B', 10, "MSFT", P20)]), T0 + MS);
        assert_eq!(f.counters().live_orders, 2);
        // A third, on either unit, does not fit the feed's table.
        f.on_datagram(
            0,
            &dgram(2, 2, &[add(2, b'S', 10, "MSFT", P20)]),
            T0 + 2 * MS,
        );
        assert_eq!(f.counters().orders_overflow, 1);
        assert_eq!(f.counters().live_orders, 2);
        let s = f.symbol_summary(sym("MSFT")).unwrap();
        assert_eq!(s.suspect, Some(SuspectCause::Gap));
        // Once unit 1's order leaves, unit 2 has room.
        let delete = Message::DeleteOrder {
            offset: 0,
            order_id: 1,
        };
        f.on_datagram(0, &dgram(1, 2, &[delete]), T0 + 3 * MS);
        f.on_datagram(
            0,
            &dgram(2, 3, &[add(3, b'S', 10, "MSFT", P20)]),
            T0 + 4 * MS,
        );
        assert_eq!(f.counters().orders_overflow, 1);
        assert_eq!(f.counters().live_orders, 2);
    }
}
