//! The books of one ITCH feed: every live order (in the [`OrderTable`]) and,
//! per stock locate and side, its price levels, so that the best bid and
//! offer is read in O(1) after each message (venues.md `nasdaq-itch`).
//!
//! Structure, all allocated in [`Books::new`] and [`Books::clear`], nothing
//! per message:
//! - the order table: 16 bytes per slot, at most 2/3 full (see `orders`);
//! - one pool of level nodes (16 bytes each, four to a line: price, book
//!   id, aggregate shares) with a free list, and beside it, by the same
//!   index, each node's two treap children (8 bytes, read only off the
//!   ladder). A level exists while it has live shares; there are never
//!   more levels than live orders, so the pool holds `max_orders + 1`
//!   nodes (node 0 is the null link). The pool is reserved but filled by
//!   `push` as levels are first needed, so its pages become resident only
//!   when used;
//! - per locate and side (2 x 65,536, 280 bytes each): the best level, a
//!   price ladder (a window of 64 cent ticks holding level indices
//!   directly, tick `price / 100` in slot `tick % 64`, with a bitmap of the
//!   occupied slots) and the root of a treap, keyed by price, of the
//!   levels off the window or off the cent grid;
//! - per locate (65,536 x 32 bytes): its top, both sides' best level
//!   index, price and shares, which is all `best` reads; with the sides,
//!   one zeroed allocation of about 39 MiB (see `PerLocate`);
//! - a direct-mapped cache from (book, price) to level (one u32 entry per
//!   order up to 2^20, 4 MiB), a hint that spares most adds off the ladder
//!   the treap search.
//!
//! Virtual memory for `max_orders` = 10M: 256 MiB of slots + 240 MiB of
//! level nodes + 39 MiB per locate + 4 MiB of level cache, about 539 MiB,
//! resident only as touched.
//!
//! Cost per message: an order's slot keeps its level's index, so an
//! execution, cancel or delete finds its level in O(1). A price on the
//! ladder is O(1) to add or to empty; the best moves in O(1) on a new
//! better level and, when the best level empties, to the better of the
//! ladder's extreme (a bit scan) and the treap's (cached per side). Off the
//! window, adding or removing a level walks the treap, O(log levels)
//! expected. The window follows the market: a grid price past its better
//! end (or any grid price while the ladder is empty) re-centres it with
//! that price 16 ticks from the better end, moving at most 64 levels
//! between ladder and treap (rare: only when the best leaves the window).
//!
//! The treap's heap priority is a hash of the node's index (not stored:
//! nodes stay 16 bytes), so its shape does not depend on the order in which
//! prices arrive.

use super::messages::Side;
use super::orders::{Order, OrderTable, Sequential, MAX_LEVEL};
use crate::util::prefetch::{prefetch, prefetch_prefix};

/// Stock locates are u16: one book per value.
pub const LOCATES: usize = 1 << 16;

/// log2 of the most entries of the level cache (4 MiB of u32); a feed of
/// fewer orders gets one entry per order (at least 1,024).
const LEVEL_CACHE_BITS: u32 = 20;

/// One side of a book's best: a price and the sum of the live shares there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    /// u32 with 4 implied decimals, as on the wire.
    pub price: u32,
    pub shares: u64,
}

/// Best bid and offer of a book; an empty side is `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bbo {
    pub bid: Option<Level>,
    pub ask: Option<Level>,
}

/// A [`Bbo`] as integers, bid first: price and shares 0 for an empty side
/// (a level always has live shares), so all zeros is the empty book and
/// equal keys are equal bests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct BestKey {
    pub price: [u32; 2],
    pub shares: [u64; 2],
}

impl BestKey {
    pub fn of(b: Bbo) -> BestKey {
        let (bid_price, bid_shares) = b.bid.map_or((0, 0), |l| (l.price, l.shares));
        let (ask_price, ask_shares) = b.ask.map_or((0, 0), |l| (l.price, l.shares));
        BestKey {
            price: [bid_price, ask_price],
            shares: [bid_shares, ask_shares],
        }
    }
}

/// Why an order operation did not do (all of) what it was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// No live order has that reference (a venue error, or missed messages).
    #[error("unknown order reference")]
    Unknown,
    /// The table holds `max_orders` live orders already.
    #[error("order table full")]
    Overflow,
    /// An add named a reference that is live.
    #[error("order reference already live")]
    RefInUse,
    /// An execution or cancel of more shares than the order had.
    #[error("more shares than the order has")]
    TooLarge,
    /// An add of 0 shares (a live order always has shares).
    #[error("order of zero shares")]
    ZeroShares,
}

/// The outcome of an operation on a known order: the book of `locate` may
/// have changed; `error`, when set, is a venue error to count (the
/// operation still did what it could, as documented per method).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effect {
    pub locate: u16,
    pub error: Option<OrderError>,
}

/// A live order as seen from outside (tests, diagnostics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveOrder {
    pub locate: u16,
    pub side: Side,
    pub shares: u32,
    pub price: u32,
}

/// A price level: a node in the shared pool, on its side's ladder or in its
/// side's treap. 16 bytes, aligned, so that a node never spans two cache
/// lines; its treap children are apart (`Links`, same index), read only
/// off the ladder.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(16))]
struct Node {
    price: u32,
    /// `locate << 1 | side` (0 buy, 1 sell); while the node is free, the
    /// next free node (0: none).
    book: u32,
    /// Live shares at this price; 0 only while the node is free.
    shares: u64,
}

const _: () = assert!(std::mem::size_of::<Node>() == 16, "four nodes to a line");

/// A level's treap children (meaningful only while it is in a treap).
#[derive(Clone, Copy, Debug, Default)]
struct Links {
    left: u32,
    right: u32,
}

/// The ladder's grid: one slot per $0.01 (V4: 4 implied decimals, so 100).
const TICK: u32 = 100;
/// Slots of a ladder window (one bit each in `SideBook::bits`).
const LADDER: u32 = 64;
/// Ticks kept free on the better side of the price a window is re-centred
/// on, so a best that moves a little stays in the window.
const HEADROOM: u32 = 16;

/// One side of one book: its best, its price ladder (a direct-indexed
/// window of `LADDER` ticks from `base`: the level of tick `t` in slot
/// `t % LADDER`) and, for the levels off the window (or off the cent
/// grid), a treap.
///
/// The slot of a tick does not depend on where the window starts, so a
/// message's price alone names the line of the ladder it needs: the
/// first stage of an add's cache hints asks for that line and the
/// side's first, not the whole side (`Books::prefetch_add`).
///
/// Invariants: a level whose price is a multiple of `TICK` inside the
/// window is on the ladder, never in the treap; `bits` has bit `i` set
/// exactly when `slots[i] != 0`; `tree_best` is the treap's extreme (0:
/// empty treap); `best` is the better of the ladder's and the treap's
/// extremes. All zeros is an empty side (so the array comes from a zeroed
/// allocation, resident only where touched).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct SideBook {
    best: u32,
    root: u32,
    tree_best: u32,
    /// First tick (`price / TICK`) of the window.
    base: u32,
    bits: u64,
    slots: [u32; LADDER as usize],
}

/// Bytes of a [`SideBook`] before its ladder's slots: what every add
/// reads whatever its price.
const SIDE_HEAD: usize = std::mem::offset_of!(SideBook, slots);

/// The ladder slot of `tick` in any window that holds it.
#[inline(always)]
fn slot_of_tick(tick: u32) -> usize {
    (tick % LADDER) as usize
}

impl SideBook {
    /// The ladder slot `price` belongs to, if it is on the grid and in the
    /// window.
    #[inline(always)]
    fn slot(&self, price: u32) -> Option<usize> {
        if !price.is_multiple_of(TICK) {
            return None;
        }
        let tick = price / TICK;
        (tick.wrapping_sub(self.base) < LADDER).then_some(slot_of_tick(tick))
    }

    /// The tick of slot `i` in the window (whether or not it holds a level).
    #[cfg(test)]
    fn tick_of_slot(&self, i: usize) -> u32 {
        self.base + (i as u32).wrapping_sub(self.base) % LADDER
    }

    /// The ladder's extreme level (highest bid, lowest ask), 0 if none.
    #[inline(always)]
    fn ladder_extreme(&self, buy: bool) -> u32 {
        if self.bits == 0 {
            return 0;
        }
        // Bit `i` of `window` is tick `base + i`: the window's order.
        let window = self.bits.rotate_right(self.base % LADDER);
        let i = if buy {
            63 - window.leading_zeros()
        } else {
            window.trailing_zeros()
        };
        self.slots[slot_of_tick(self.base + i)]
    }

    #[inline(always)]
    fn put(&mut self, i: usize, n: u32) {
        self.slots[i] = n;
        self.bits |= 1 << i;
    }
}

/// Per locate, both sides' best level as `best` reads it (index, price,
/// shares; `[buy, sell]`), 32 bytes: two books per cache line, so a
/// message's best-before and best-after read one line and no level node.
/// A mirror of `SideBook::best` and its node, kept by `set_best` and
/// `sync_top` (a new level reads the best's price here, `best_price`,
/// not from its node); all zeros is an empty book.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Top {
    level: [u32; 2],
    price: [u32; 2],
    shares: [u64; 2],
}

/// The per-locate part of the books: every top and every side, in one
/// zeroed allocation (a calloc of about 39 MiB: the pages of books never
/// used are never resident). One allocation, and larger than glibc's
/// largest dynamic mmap threshold (32 MiB), so that it is always a fresh
/// mapping: a zeroed allocation of a size the heap can serve would be
/// cleared by a memset, touching every page (this is what keeps a
/// short-lived feed, in the fuzz targets, cheap to build).
#[repr(C)]
struct PerLocate {
    tops: [Top; LOCATES],
    sides: [SideBook; 2 * LOCATES],
}

fn zeroed_per_locate(replay_tables: bool) -> Box<PerLocate> {
    let m = Box::<PerLocate>::new_zeroed();
    // SAFETY: Top and SideBook are integers only: all zeros is a valid
    // value of both (an empty book), so of PerLocate.
    let m = unsafe { m.assume_init() };
    if replay_tables {
        crate::util::pages::advise_huge(std::slice::from_ref(&*m));
    }
    m
}

/// The level pool (nodes, or their links): room for `max_orders` levels
/// and the null node 0, reserved (its pages become resident as levels are
/// pushed).
fn level_pool<T: Default>(max_orders: usize, replay_tables: bool) -> Vec<T> {
    let mut nodes = Vec::with_capacity(max_orders + 1);
    if replay_tables {
        crate::util::pages::advise_huge_reserved(nodes.as_ptr(), nodes.capacity());
    }
    nodes.push(T::default());
    nodes
}

#[inline(always)]
fn book_id(locate: u16, side: Side) -> usize {
    (locate as usize) << 1 | (side == Side::Sell) as usize
}

#[inline(always)]
fn is_buy(b: usize) -> bool {
    b & 1 == 0
}

/// Whether `a` is a better price than `than` on book side `b`.
#[inline(always)]
fn better(b: usize, a: u32, than: u32) -> bool {
    if is_buy(b) {
        a > than
    } else {
        a < than
    }
}

/// The treap priority of node `i`: a bijective mix of its index (murmur3's
/// finaliser), so distinct nodes never tie.
#[inline(always)]
fn prio(i: u32) -> u32 {
    let mut x = i;
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^ (x >> 16)
}

/// The order table and the books of every locate of one feed.
pub struct Books {
    orders: OrderTable<Sequential>,
    nodes: Vec<Node>,
    /// Each node's treap children, by the node's index.
    links: Vec<Links>,
    /// Head of the free list of nodes (linked through `book`), 0: empty.
    free: u32,
    /// Tops per locate, sides per `book_id`.
    mem: Box<PerLocate>,
    /// Direct-mapped hint from (book, price) to a level index: lets an add
    /// at an existing level off the ladder skip the treap search. A hint
    /// is used only when that node is live with the same book and price,
    /// and a live level is unique per book and price, so a stale or
    /// colliding hint just falls back to the search.
    level_cache: Vec<u32>,
    level_cache_bits: u32,
    max_orders: usize,
    /// Whether the tables are laid out for a replay (`with_tables`).
    replay_tables: bool,
}

/// An order found by [`Books::lookup`]: where it is, what it is, its
/// locate. Valid until the next change to the books.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    slot: usize,
    order: Order,
    pub locate: u16,
}

impl Books {
    /// Books holding at most `max_orders` live orders across all locates
    /// (configuration `max_orders`, default 10,000,000). `max_orders` must
    /// be below 2^31 (level indices share a u32 with a flag of the order
    /// table's).
    pub fn new(max_orders: usize) -> Books {
        Books::with_tables(max_orders, false)
    }

    /// [`Books::new`], laid out for a replay when `replay_tables`: the
    /// order table, the level pool, the per-locate books and the level
    /// cache advised onto huge pages, and the order table's pages ahead
    /// of its inserts asked to be made resident ([`Books::take_populate`];
    /// docs/venues.md, "Tables in replay").
    pub fn with_tables(max_orders: usize, replay_tables: bool) -> Books {
        // A level index is at most `max_orders` (node 0 is the null link).
        assert!(max_orders <= MAX_LEVEL as usize, "max_orders too large");
        let level_cache_bits = max_orders
            .next_power_of_two()
            .trailing_zeros()
            .clamp(10, LEVEL_CACHE_BITS);
        Books {
            orders: OrderTable::with_tables(max_orders, replay_tables),
            nodes: level_pool(max_orders, replay_tables),
            links: level_pool(max_orders, replay_tables),
            free: 0,
            mem: zeroed_per_locate(replay_tables),
            level_cache: crate::util::pages::filled(0u32, 1 << level_cache_bits, replay_tables),
            level_cache_bits,
            max_orders,
            replay_tables,
        }
    }

    fn reset_levels(&mut self) {
        // Free the old storage before the new one is reserved.
        self.nodes = Vec::new();
        self.links = Vec::new();
        self.nodes = level_pool(self.max_orders, self.replay_tables);
        self.links = level_pool(self.max_orders, self.replay_tables);
        self.free = 0;
        // (The new mapping exists for a moment beside the old one: virtual
        // memory only, none of its pages is touched before the old goes.)
        self.mem = zeroed_per_locate(self.replay_tables);
        self.level_cache = Vec::new();
        self.level_cache =
            crate::util::pages::filled(0u32, 1 << self.level_cache_bits, self.replay_tables);
    }

    /// Empties every book (a session change, C5). Nothing is written per
    /// order or level: the order table and the books are replaced by fresh
    /// zeroed allocations and the level pool by a fresh reservation. The
    /// cost is returning the pages that were resident to the system (a
    /// kernel `munmap`, proportional to what the session touched, about
    /// 1 ms per 100k pages), then one page fault per page as the new
    /// session touches it again.
    pub fn clear(&mut self) {
        self.orders.clear();
        self.reset_levels();
    }

    pub fn max_orders(&self) -> usize {
        self.max_orders
    }

    pub fn live_orders(&self) -> usize {
        self.orders.len()
    }

    /// Price levels in use across all books (walks the free list:
    /// diagnostics and benches, not the message path).
    pub fn live_levels(&self) -> usize {
        let mut free = 0;
        let mut f = self.free;
        while f != 0 {
            free += 1;
            f = self.nodes[f as usize].book;
        }
        self.nodes.len() - 1 - free
    }

    /// The order table (benches: probe lengths).
    pub fn orders(&self) -> &OrderTable<Sequential> {
        &self.orders
    }

    /// The order table's memory asked to be made resident since the last
    /// call ([`OrderTable::take_populate`]).
    pub fn take_populate(&mut self) -> Option<crate::util::pages::MemRange> {
        self.orders.take_populate()
    }

    /// Adds a live order. Checked in this order, each leaving every book
    /// unchanged: `ZeroShares` for 0 shares, `RefInUse` when `order_ref` is
    /// live, `Overflow` when `max_orders` orders are live. Always inlined:
    /// an add is most of a day's messages, and a call's saved registers
    /// cost it about a sixth of its instructions.
    #[inline(always)]
    pub fn add(
        &mut self,
        locate: u16,
        order_ref: u64,
        side: Side,
        shares: u32,
        price: u32,
    ) -> Result<(), OrderError> {
        if shares == 0 {
            return Err(OrderError::ZeroShares);
        }
        let slot = match self.orders.probe(order_ref) {
            Ok(_) => return Err(OrderError::RefInUse),
            Err(slot) => slot,
        };
        if self.orders.len() >= self.max_orders {
            return Err(OrderError::Overflow);
        }
        let b = book_id(locate, side);
        let level = self.level_for(b, price);
        self.nodes[level as usize].shares += shares as u64;
        self.sync_top(b, level);
        self.orders
            .insert_at(slot, order_ref, Order { shares, level });
        Ok(())
    }

    /// The live order `order_ref` and its locate, for one of the `*_found`
    /// operations (one probe of the order table for both).
    #[inline]
    pub fn lookup(&self, order_ref: u64) -> Option<Found> {
        let slot = self.orders.probe(order_ref).ok()?;
        let order = self.orders.at(slot);
        Some(Found {
            slot,
            order,
            locate: self.locate_of(order.level),
        })
    }

    /// E, C, X: removes `shares` from the order; at 0 the order leaves.
    /// More than it has: the order leaves and `Effect.error` is
    /// `Some(TooLarge)`. 0 shares changes nothing (no error: nothing
    /// contradicts the book). `Err(Unknown)`: nothing changed.
    #[inline]
    pub fn reduce(&mut self, order_ref: u64, shares: u32) -> Result<Effect, OrderError> {
        let found = self.lookup(order_ref).ok_or(OrderError::Unknown)?;
        Ok(self.reduce_found(found, shares))
    }

    /// [`Books::reduce`] of an order [`Books::lookup`] just found.
    #[inline]
    pub fn reduce_found(&mut self, found: Found, shares: u32) -> Effect {
        let Found {
            slot,
            order,
            locate,
        } = found;
        if shares < order.shares {
            let n = &mut self.nodes[order.level as usize];
            n.shares -= shares as u64;
            let b = n.book as usize;
            self.sync_top(b, order.level);
            self.orders.set_shares(slot, order.shares - shares);
            return Effect {
                locate,
                error: None,
            };
        }
        self.remove(slot, order);
        Effect {
            locate,
            error: (shares > order.shares).then_some(OrderError::TooLarge),
        }
    }

    /// The live shares of an order [`Books::lookup`] just found.
    #[inline]
    pub fn found_shares(&self, found: &Found) -> u32 {
        found.order.shares
    }

    /// Sets the order's shares to `shares`, keeping its side, price and
    /// place (Cboe PITCH's Executed at Price/Size, whose remaining shares
    /// may be more or fewer than the book holds); at 0 the order leaves.
    /// Never an error.
    #[inline]
    pub fn set_shares_found(&mut self, found: Found, shares: u32) -> Effect {
        let Found {
            slot,
            order,
            locate,
        } = found;
        if shares == 0 {
            self.remove(slot, order);
        } else if shares != order.shares {
            let n = &mut self.nodes[order.level as usize];
            n.shares = n.shares - order.shares as u64 + shares as u64;
            let b = n.book as usize;
            self.sync_top(b, order.level);
            self.orders.set_shares(slot, shares);
        }
        Effect {
            locate,
            error: None,
        }
    }

    /// D: removes the order. `Err(Unknown)`: nothing changed.
    #[inline]
    pub fn delete(&mut self, order_ref: u64) -> Result<Effect, OrderError> {
        let found = self.lookup(order_ref).ok_or(OrderError::Unknown)?;
        Ok(self.delete_found(found))
    }

    /// [`Books::delete`] of an order [`Books::lookup`] just found.
    #[inline]
    pub fn delete_found(&mut self, found: Found) -> Effect {
        self.remove(found.slot, found.order);
        Effect {
            locate: found.locate,
            error: None,
        }
    }

    /// U: removes `original`, then adds `new_ref` with the original's side
    /// and locate. `Err(Unknown)` when `original` is not live: nothing
    /// changed, nothing added. When the add fails (`RefInUse`,
    /// `ZeroShares`; `Overflow` cannot happen as a slot was just freed) the
    /// original stays removed and `Effect.error` says why. `new_ref` may
    /// equal `original`.
    #[inline]
    pub fn replace(
        &mut self,
        original: u64,
        new_ref: u64,
        shares: u32,
        price: u32,
    ) -> Result<Effect, OrderError> {
        let found = self.lookup(original).ok_or(OrderError::Unknown)?;
        Ok(self.replace_found(found, new_ref, shares, price))
    }

    /// [`Books::replace`] of an order [`Books::lookup`] just found.
    #[inline]
    pub fn replace_found(&mut self, found: Found, new_ref: u64, shares: u32, price: u32) -> Effect {
        let book = self.nodes[found.order.level as usize].book;
        let side = if book & 1 == 0 { Side::Buy } else { Side::Sell };
        self.remove(found.slot, found.order);
        Effect {
            locate: found.locate,
            error: self.add(found.locate, new_ref, side, shares, price).err(),
        }
    }

    /// Cache hints ahead of a message (they change nothing): the order
    /// table slot `order_ref` starts its probe at.
    #[inline(always)]
    pub fn prefetch_order(&self, order_ref: u64) {
        self.orders.prefetch(order_ref);
    }

    /// `locate`'s top (both bests) and the first line (best, treap root,
    /// window) of both its sides.
    #[inline(always)]
    pub fn prefetch_book(&self, locate: u16) {
        prefetch(&self.mem.tops[locate as usize]);
        prefetch_prefix(&self.mem.sides[book_id(locate, Side::Buy)], 64);
        prefetch_prefix(&self.mem.sides[book_id(locate, Side::Sell)], 64);
    }

    /// `locate`'s top (both bests) alone.
    #[inline(always)]
    pub fn prefetch_top(&self, locate: u16) {
        prefetch(&self.mem.tops[locate as usize]);
    }

    /// `locate`'s top and the whole ladder of one side of its book (ahead
    /// of an add whose price is not known yet).
    #[inline(always)]
    pub fn prefetch_side(&self, locate: u16, side: Side) {
        prefetch(&self.mem.tops[locate as usize]);
        prefetch(&self.mem.sides[book_id(locate, side)]);
    }

    /// What an add at `price` reads of its book: `locate`'s top, the
    /// first bytes of its side and, for a price on the grid, the ladder
    /// slot the price would take (a tick's slot does not depend on the
    /// window, so a price outside the window only asks for a line it will
    /// not use).
    #[inline(always)]
    pub fn prefetch_add(&self, locate: u16, side: Side, price: u32) {
        prefetch(&self.mem.tops[locate as usize]);
        let s = &self.mem.sides[book_id(locate, side)];
        prefetch_prefix(s, SIDE_HEAD);
        if price.is_multiple_of(TICK) {
            prefetch(&s.slots[slot_of_tick(price / TICK)]);
        }
    }

    /// The level node of live order `order_ref` (second stage: reads the
    /// order's slot, which `prefetch_order` asked for earlier).
    #[inline(always)]
    pub fn prefetch_order_level(&self, order_ref: u64) {
        if let Ok(slot) = self.orders.probe(order_ref) {
            prefetch(&self.nodes[self.orders.at(slot).level as usize]);
        }
    }

    /// The level node an add at `price` would join, when it is on the
    /// ladder (second stage: reads the side, which `prefetch_add` asked
    /// for earlier).
    #[inline(always)]
    pub fn prefetch_add_level(&self, locate: u16, side: Side, price: u32) {
        let s = &self.mem.sides[book_id(locate, side)];
        if let Some(i) = s.slot(price) {
            prefetch(&self.nodes[s.slots[i] as usize]);
        }
    }

    /// The best of both sides of `locate` as plain integers, read straight
    /// from its top record: equal keys are equal bests ([`Bbo`]s), and two
    /// keys compare in three words where two `Bbo`s take a dozen branches.
    #[inline(always)]
    pub fn best_key(&self, locate: u16) -> BestKey {
        let t = &self.mem.tops[locate as usize];
        let key = BestKey {
            price: t.price,
            shares: t.shares,
        };
        debug_assert_eq!(key, BestKey::of(self.best(locate)));
        key
    }

    /// Best bid and offer of `locate`, O(1): one 32-byte record.
    #[inline]
    pub fn best(&self, locate: u16) -> Bbo {
        let t = &self.mem.tops[locate as usize];
        let level = |s: usize| {
            (t.level[s] != 0).then_some(Level {
                price: t.price[s],
                shares: t.shares[s],
            })
        };
        Bbo {
            bid: level(0),
            ask: level(1),
        }
    }

    /// Makes `n` (0: none) the best of side `b`.
    #[inline(always)]
    fn set_best(&mut self, b: usize, n: u32) {
        self.mem.sides[b].best = n;
        let node = self.nodes[n as usize];
        let t = &mut self.mem.tops[b >> 1];
        let s = b & 1;
        t.level[s] = n;
        t.price[s] = if n == 0 { 0 } else { node.price };
        t.shares[s] = node.shares;
    }

    /// After the shares of level `n` of side `b` changed: the top follows
    /// when `n` is the best.
    #[inline(always)]
    fn sync_top(&mut self, b: usize, n: u32) {
        let t = &mut self.mem.tops[b >> 1];
        if t.level[b & 1] == n {
            t.shares[b & 1] = self.nodes[n as usize].shares;
        }
    }

    /// The live order `order_ref`, if any.
    pub fn order(&self, order_ref: u64) -> Option<LiveOrder> {
        let o = self.orders.get(order_ref)?;
        let n = &self.nodes[o.level as usize];
        Some(LiveOrder {
            locate: (n.book >> 1) as u16,
            side: if n.book & 1 == 0 {
                Side::Buy
            } else {
                Side::Sell
            },
            shares: o.shares,
            price: n.price,
        })
    }

    #[inline(always)]
    fn locate_of(&self, level: u32) -> u16 {
        (self.nodes[level as usize].book >> 1) as u16
    }

    /// Removes a live order whole, and its level when that empties.
    #[inline(always)]
    fn remove(&mut self, slot: usize, order: Order) {
        self.orders.remove_at(slot);
        let n = &mut self.nodes[order.level as usize];
        n.shares -= order.shares as u64;
        if n.shares == 0 {
            self.drop_level(order.level);
        } else {
            let b = n.book as usize;
            self.sync_top(b, order.level);
        }
    }

    /// The level at `price` in book side `b`, created when absent. The
    /// common case, a level on the ladder already, is inlined into the
    /// add; the rest is a call.
    #[inline(always)]
    fn level_for(&mut self, b: usize, price: u32) -> u32 {
        let s = &self.mem.sides[b];
        if let Some(i) = s.slot(price) {
            let n = s.slots[i];
            if n != 0 {
                return n;
            }
        }
        self.new_level_for(b, price)
    }

    /// [`Books::level_for`] past a level on the ladder.
    #[inline(never)]
    fn new_level_for(&mut self, b: usize, price: u32) -> u32 {
        let s = &self.mem.sides[b];
        if let Some(i) = s.slot(price) {
            // `level_for` found no level in that slot.
            debug_assert_eq!(s.slots[i], 0);
            return self.new_ladder_level(b, i, price);
        }
        if price.is_multiple_of(TICK) && {
            // Off the window: move the window when the side has no ladder
            // level or the price is past its better end (the best moved).
            let tick = price / TICK;
            s.bits == 0
                || if is_buy(b) {
                    tick >= s.base + LADDER
                } else {
                    tick < s.base
                }
        } {
            self.recenter(b, price / TICK);
            let s = &self.mem.sides[b];
            let i = s.slot(price).expect("the window was just centred on it");
            let n = s.slots[i];
            if n != 0 {
                // A treap level the new window took in.
                return n;
            }
            return self.new_ladder_level(b, i, price);
        }
        self.tree_level_for(b, price)
    }

    #[inline]
    fn new_ladder_level(&mut self, b: usize, i: usize, price: u32) -> u32 {
        let n = self.alloc(price, b as u32);
        let best = self.mem.sides[b].best;
        let s = &mut self.mem.sides[b];
        s.put(i, n);
        if best == 0 || better(b, price, self.best_price(b)) {
            self.set_best(b, n);
        }
        n
    }

    /// The price of side `b`'s best level (not 0), read from its top
    /// record, which mirrors it: a line the message has in cache already,
    /// where the best's node may be a miss.
    #[inline(always)]
    fn best_price(&self, b: usize) -> u32 {
        let t = &self.mem.tops[b >> 1];
        debug_assert_eq!(t.level[b & 1], self.mem.sides[b].best);
        debug_assert_eq!(
            t.price[b & 1],
            self.nodes[self.mem.sides[b].best as usize].price
        );
        t.price[b & 1]
    }

    /// The level at `price` (off the ladder) in the treap of `b`, created
    /// when absent.
    fn tree_level_for(&mut self, b: usize, price: u32) -> u32 {
        let SideBook { root, best, .. } = self.mem.sides[b];
        if best != 0 && self.best_price(b) == price {
            return best;
        }
        let h = ((b as u64) << 32 | price as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - self.level_cache_bits);
        let hint = self.level_cache[h as usize];
        if hint != 0 {
            let n = &self.nodes[hint as usize];
            if n.shares != 0 && n.book == b as u32 && n.price == price {
                return hint;
            }
        }
        let found = self.find(root, price);
        if found != 0 {
            self.level_cache[h as usize] = found;
            return found;
        }
        let n = self.alloc(price, b as u32);
        self.tree_insert(b, n);
        self.level_cache[h as usize] = n;
        if best == 0 || better(b, price, self.best_price(b)) {
            self.set_best(b, n);
        }
        n
    }

    /// Moves the window of side `b` so that `tick` is in it, `HEADROOM`
    /// ticks from its better end: ladder levels left outside go into the
    /// treap, treap levels now inside come onto the ladder. The set of
    /// levels (and so the best) is unchanged. At most `LADDER` levels move
    /// each way (a level is unique per price), each O(log levels).
    #[cold]
    fn recenter(&mut self, b: usize, tick: u32) {
        let base = if is_buy(b) {
            tick.saturating_sub(LADDER - 1 - HEADROOM)
        } else {
            tick.saturating_sub(HEADROOM)
        };
        let old = self.mem.sides[b];
        {
            let s = &mut self.mem.sides[b];
            s.base = base;
            s.bits = 0;
            s.slots = [0; LADDER as usize];
        }
        let mut bits = old.bits;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let n = old.slots[i];
            let price = self.nodes[n as usize].price;
            match self.mem.sides[b].slot(price) {
                Some(j) => self.mem.sides[b].put(j, n),
                None => self.tree_insert(b, n),
            }
        }
        // Treap levels on the grid inside the new window (at most one per
        // slot, and none of them was on the old ladder).
        let mut inside = [0u32; LADDER as usize];
        let mut count = 0;
        let (lo, hi) = (
            base as u64 * TICK as u64,
            (base as u64 + LADDER as u64) * TICK as u64,
        );
        self.collect_range(self.mem.sides[b].root, lo, hi, &mut inside, &mut count);
        for &n in &inside[..count] {
            self.tree_unlink(b, n);
            let price = self.nodes[n as usize].price;
            let i = self.mem.sides[b].slot(price).expect("collected inside");
            self.links[n as usize] = Links::default();
            self.mem.sides[b].put(i, n);
        }
    }

    /// The nodes of treap `t` on the `TICK` grid with `lo <= price < hi`
    /// (a range of at most `LADDER` ticks, so they fit `out`).
    fn collect_range(
        &self,
        t: u32,
        lo: u64,
        hi: u64,
        out: &mut [u32; LADDER as usize],
        count: &mut usize,
    ) {
        if t == 0 {
            return;
        }
        let price = self.nodes[t as usize].price;
        let Links { left, right } = self.links[t as usize];
        let p = price as u64;
        if p >= lo {
            self.collect_range(left, lo, hi, out, count);
        }
        if p >= lo && p < hi && price.is_multiple_of(TICK) {
            out[*count] = t;
            *count += 1;
        }
        if p < hi {
            self.collect_range(right, lo, hi, out, count);
        }
    }

    fn alloc(&mut self, price: u32, book: u32) -> u32 {
        let node = Node {
            price,
            book,
            shares: 0,
        };
        if self.free != 0 {
            let n = self.free;
            self.free = self.nodes[n as usize].book;
            self.nodes[n as usize] = node;
            n
        } else {
            // Levels never outnumber live orders, which stay under
            // `max_orders`: these pushes stay within the reservations.
            debug_assert!(self.nodes.len() < self.nodes.capacity());
            self.nodes.push(node);
            self.links.push(Links::default());
            (self.nodes.len() - 1) as u32
        }
    }

    fn find(&self, mut t: u32, price: u32) -> u32 {
        while t != 0 {
            let p = self.nodes[t as usize].price;
            if price == p {
                return t;
            }
            let l = self.links[t as usize];
            t = if price < p { l.left } else { l.right };
        }
        0
    }

    /// The extreme node of treap `t` for side `b` (right-most for bids,
    /// left-most for asks), 0 for an empty treap.
    fn tree_extreme(&self, b: usize, mut t: u32) -> u32 {
        if t == 0 {
            return 0;
        }
        loop {
            let l = self.links[t as usize];
            let next = if is_buy(b) { l.right } else { l.left };
            if next == 0 {
                return t;
            }
            t = next;
        }
    }

    /// Splits treap `t` (which has no node at `price`) into the nodes below
    /// and above `price`.
    fn split(&mut self, t: u32, price: u32) -> (u32, u32) {
        if t == 0 {
            return (0, 0);
        }
        let links = self.links[t as usize];
        if self.nodes[t as usize].price < price {
            let (l, r) = self.split(links.right, price);
            self.links[t as usize].right = l;
            (t, r)
        } else {
            let (l, r) = self.split(links.left, price);
            self.links[t as usize].left = r;
            (l, t)
        }
    }

    /// Joins treaps `a` and `b`, every price of `a` below every one of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == 0 {
            return b;
        }
        if b == 0 {
            return a;
        }
        if prio(a) > prio(b) {
            let r = self.merge(self.links[a as usize].right, b);
            self.links[a as usize].right = r;
            a
        } else {
            let l = self.merge(a, self.links[b as usize].left);
            self.links[b as usize].left = l;
            b
        }
    }

    /// Links node `n` (no treap level has its price) into the treap of
    /// side `b`: down from the root while the nodes outrank it, then it
    /// takes that place with the subtree split around its price as
    /// children. Keeps `tree_best`.
    fn tree_insert(&mut self, b: usize, n: u32) {
        let price = self.nodes[n as usize].price;
        let pn = prio(n);
        let (mut parent, mut left) = (0u32, false);
        let mut t = self.mem.sides[b].root;
        while t != 0 && prio(t) > pn {
            parent = t;
            left = price < self.nodes[t as usize].price;
            let l = self.links[t as usize];
            t = if left { l.left } else { l.right };
        }
        let (l, r) = self.split(t, price);
        self.links[n as usize] = Links { left: l, right: r };
        self.set_link(b, parent, left, n);
        let tb = self.mem.sides[b].tree_best;
        if tb == 0 || better(b, price, self.nodes[tb as usize].price) {
            self.mem.sides[b].tree_best = n;
        }
    }

    /// Unlinks node `n` from the treap of side `b`. Keeps `tree_best`.
    fn tree_unlink(&mut self, b: usize, n: u32) {
        let price = self.nodes[n as usize].price;
        let Links {
            left: nl,
            right: nr,
        } = self.links[n as usize];
        let (mut parent, mut left) = (0u32, false);
        let mut t = self.mem.sides[b].root;
        while t != n {
            parent = t;
            left = price < self.nodes[t as usize].price;
            let l = self.links[t as usize];
            t = if left { l.left } else { l.right };
        }
        let m = self.merge(nl, nr);
        self.set_link(b, parent, left, m);
        if self.mem.sides[b].tree_best == n {
            self.mem.sides[b].tree_best = self.tree_extreme(b, self.mem.sides[b].root);
        }
    }

    fn set_link(&mut self, b: usize, parent: u32, left: bool, to: u32) {
        if parent == 0 {
            self.mem.sides[b].root = to;
        } else if left {
            self.links[parent as usize].left = to;
        } else {
            self.links[parent as usize].right = to;
        }
    }

    /// Takes an emptied level off its ladder slot or out of its treap,
    /// moves the best when it was the best, and frees the node.
    #[inline]
    fn drop_level(&mut self, n: u32) {
        let Node { price, book, .. } = self.nodes[n as usize];
        let b = book as usize;
        let s = &mut self.mem.sides[b];
        match s.slot(price) {
            Some(i) => {
                debug_assert_eq!(s.slots[i], n, "a level in the window is on the ladder");
                s.slots[i] = 0;
                s.bits &= !(1 << i);
            }
            None => self.tree_unlink(b, n),
        }
        let s = &self.mem.sides[b];
        if s.best == n {
            // The new best: the better of the ladder's and the treap's.
            let (l, t) = (s.ladder_extreme(is_buy(b)), s.tree_best);
            let best = if l == 0 {
                t
            } else if t == 0 {
                l
            } else if better(
                b,
                self.nodes[t as usize].price,
                self.nodes[l as usize].price,
            ) {
                t
            } else {
                l
            };
            self.set_best(b, best);
        }
        let node = &mut self.nodes[n as usize];
        node.shares = 0;
        node.book = self.free;
        self.free = n;
    }

    /// Every level of book side `(locate, side)` as (price, shares), in
    /// price order, from the ladder and the treap. Tests only.
    #[cfg(test)]
    fn levels(&self, locate: u16, side: Side) -> Vec<(u32, u64)> {
        let b = book_id(locate, side);
        let s = &self.mem.sides[b];
        let mut out: Vec<(u32, u64)> = s
            .slots
            .iter()
            .filter(|&&n| n != 0)
            .map(|&n| (self.nodes[n as usize].price, self.nodes[n as usize].shares))
            .collect();
        let mut stack = vec![s.root];
        while let Some(t) = stack.pop() {
            if t != 0 {
                let n = self.nodes[t as usize];
                out.push((n.price, n.shares));
                stack.push(self.links[t as usize].left);
                stack.push(self.links[t as usize].right);
            }
        }
        out.sort_unstable();
        out
    }

    /// Full consistency check, O(everything): every treap is ordered by
    /// price and heap-ordered by priority, holds only its own book's
    /// levels and none that belong on its ladder; every ladder slot holds
    /// its own price's level and `bits` says which; each level's shares
    /// equal the sum of its live orders; `tree_best` and `best` are the
    /// extremes. Tests only.
    #[cfg(test)]
    fn check(&self) {
        self.check_first(2 * LOCATES);
    }

    /// [`Books::check`] of the first `books` book ids only (every level
    /// must be in them): the same result, faster, when the locates used
    /// are the first few.
    #[cfg(test)]
    fn check_first(&self, books: usize) {
        let mut sum = vec![0u64; self.nodes.len()];
        for (_, o) in self.orders.iter() {
            assert!(o.shares > 0, "live order without shares");
            sum[o.level as usize] += o.shares as u64;
        }
        let mut seen_levels = 0usize;
        for b in 0..books {
            let s = &self.mem.sides[b];
            if s.bits == 0 && s.root == 0 {
                assert_eq!((s.best, s.tree_best), (0, 0), "best of an empty side");
                let t = &self.mem.tops[b >> 1];
                assert_eq!(
                    (t.level[b & 1], t.price[b & 1], t.shares[b & 1]),
                    (0, 0, 0),
                    "top of empty book {b}"
                );
                continue;
            }
            let mut extreme = 0u32;
            let consider = |t: u32, extreme: &mut u32| {
                if *extreme == 0
                    || better(b, self.nodes[t as usize].price, {
                        self.nodes[*extreme as usize].price
                    })
                {
                    *extreme = t;
                }
            };
            for i in 0..LADDER as usize {
                let n = s.slots[i];
                assert_eq!(s.bits >> i & 1 == 1, n != 0, "bits disagree with slots");
                if n == 0 {
                    continue;
                }
                let node = self.nodes[n as usize];
                seen_levels += 1;
                assert_eq!(node.book as usize, b, "ladder level in the wrong book");
                assert_eq!(node.price, s.tick_of_slot(i) * TICK, "ladder slot price");
                assert!(node.shares > 0, "empty level kept");
                assert_eq!(sum[n as usize], node.shares, "level shares != its orders'");
                consider(n, &mut extreme);
            }
            let mut tree_extreme = 0u32;
            let mut stack = vec![(s.root, 0u32, u32::MAX, u32::MAX)];
            while let Some((t, lo, hi, parent_prio)) = stack.pop() {
                if t == 0 {
                    continue;
                }
                let n = self.nodes[t as usize];
                seen_levels += 1;
                assert_eq!(n.book as usize, b, "level in the wrong book");
                assert!(n.price >= lo && n.price <= hi, "treap out of order");
                assert!(prio(t) <= parent_prio, "heap order broken");
                assert!(n.shares > 0, "empty level kept");
                assert_eq!(sum[t as usize], n.shares, "level shares != its orders'");
                assert_eq!(
                    s.slot(n.price),
                    None,
                    "treap level that belongs on the ladder"
                );
                consider(t, &mut tree_extreme);
                consider(t, &mut extreme);
                let links = self.links[t as usize];
                if n.price > 0 {
                    stack.push((links.left, lo, n.price - 1, prio(t)));
                }
                if n.price < u32::MAX {
                    stack.push((links.right, n.price + 1, hi, prio(t)));
                }
            }
            assert_eq!(s.tree_best, tree_extreme, "tree_best of book {b}");
            assert_eq!(s.best, extreme, "best is not the extreme of book {b}");
            let t = &self.mem.tops[b >> 1];
            let e = self.nodes[extreme as usize];
            assert_eq!(
                (t.level[b & 1], t.price[b & 1], t.shares[b & 1]),
                (extreme, e.price, e.shares),
                "top of book {b}"
            );
        }
        assert_eq!(seen_levels, self.live_levels(), "levels leaked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lv(price: u32, shares: u64) -> Option<Level> {
        Some(Level { price, shares })
    }

    fn bbo(bid: Option<Level>, ask: Option<Level>) -> Bbo {
        Bbo { bid, ask }
    }

    #[test]
    fn empty_books_have_no_best() {
        let b = Books::new(10);
        assert_eq!(b.best(0), Bbo::default());
        assert_eq!(b.best(u16::MAX), Bbo::default());
        assert_eq!(b.live_orders(), 0);
        b.check();
    }

    #[test]
    fn add_builds_best_bid_and_offer_with_aggregate_shares() {
        let mut b = Books::new(100);
        b.add(7, 1, Side::Buy, 100, 10_000).unwrap();
        b.add(7, 2, Side::Buy, 50, 10_100).unwrap();
        b.add(7, 3, Side::Buy, 25, 10_100).unwrap();
        b.add(7, 4, Side::Sell, 10, 10_300).unwrap();
        b.add(7, 5, Side::Sell, 20, 10_200).unwrap();
        b.add(7, 6, Side::Sell, 30, 10_200).unwrap();
        assert_eq!(b.best(7), bbo(lv(10_100, 75), lv(10_200, 50)));
        // Other locates are untouched.
        assert_eq!(b.best(8), Bbo::default());
        assert_eq!(b.live_orders(), 6);
        assert_eq!(b.live_levels(), 4);
        assert_eq!(
            b.order(4),
            Some(LiveOrder {
                locate: 7,
                side: Side::Sell,
                shares: 10,
                price: 10_300
            })
        );
        b.check();
    }

    #[test]
    fn add_errors_leave_books_unchanged() {
        let mut b = Books::new(2);
        b.add(1, 10, Side::Buy, 5, 100).unwrap();
        let before = b.best(1);
        assert_eq!(b.add(1, 11, Side::Buy, 0, 200), Err(OrderError::ZeroShares));
        assert_eq!(b.add(2, 10, Side::Sell, 5, 90), Err(OrderError::RefInUse));
        b.add(1, 11, Side::Sell, 5, 300).unwrap();
        assert_eq!(b.add(1, 12, Side::Buy, 5, 200), Err(OrderError::Overflow));
        assert_eq!(b.best(1), bbo(before.bid, lv(300, 5)));
        assert_eq!(b.best(2), Bbo::default());
        assert_eq!(b.live_orders(), 2);
        // ZeroShares comes before RefInUse, RefInUse before Overflow.
        assert_eq!(b.add(1, 10, Side::Buy, 0, 1), Err(OrderError::ZeroShares));
        assert_eq!(b.add(1, 10, Side::Buy, 1, 1), Err(OrderError::RefInUse));
        b.check();
    }

    #[test]
    fn reduce_partial_exact_and_too_large() {
        let mut b = Books::new(10);
        b.add(3, 1, Side::Sell, 100, 500).unwrap();
        b.add(3, 2, Side::Sell, 40, 500).unwrap();
        b.add(3, 3, Side::Sell, 10, 600).unwrap();
        let ok = Ok(Effect {
            locate: 3,
            error: None,
        });
        assert_eq!(b.reduce(1, 30), ok);
        assert_eq!(b.best(3).ask, lv(500, 110));
        assert_eq!(b.order(1).unwrap().shares, 70);
        assert_eq!(b.reduce(1, 0), ok);
        assert_eq!(b.best(3).ask, lv(500, 110));
        // Exactly what is left: the order leaves.
        assert_eq!(b.reduce(1, 70), ok);
        assert_eq!(b.order(1), None);
        assert_eq!(b.best(3).ask, lv(500, 40));
        // More than it has: leaves, flagged; the level empties, the next
        // price becomes the best.
        assert_eq!(
            b.reduce(2, 41),
            Ok(Effect {
                locate: 3,
                error: Some(OrderError::TooLarge)
            })
        );
        assert_eq!(b.best(3), bbo(None, lv(600, 10)));
        assert_eq!(b.live_orders(), 1);
        assert_eq!(b.reduce(2, 1), Err(OrderError::Unknown));
        assert_eq!(b.reduce(99, 1), Err(OrderError::Unknown));
        assert_eq!(b.best(3), bbo(None, lv(600, 10)));
        b.check();
    }

    #[test]
    fn delete_moves_best_to_next_level() {
        let mut b = Books::new(10);
        b.add(0, 1, Side::Buy, 1, 100).unwrap();
        b.add(0, 2, Side::Buy, 2, 102).unwrap();
        b.add(0, 3, Side::Buy, 3, 101).unwrap();
        let eff = Ok(Effect {
            locate: 0,
            error: None,
        });
        assert_eq!(b.delete(2), eff);
        assert_eq!(b.best(0).bid, lv(101, 3));
        assert_eq!(b.delete(3), eff);
        assert_eq!(b.best(0).bid, lv(100, 1));
        assert_eq!(b.delete(3), Err(OrderError::Unknown));
        assert_eq!(b.delete(1), eff);
        assert_eq!(b.best(0), Bbo::default());
        assert_eq!(b.live_levels(), 0);
        b.check();
    }

    #[test]
    fn a_window_across_the_end_of_the_slots_keeps_price_order() {
        // A tick's slot is `tick % 64`: a window from tick 1,000 (slot 40)
        // holds ticks 1,024-1,063 in slots 0-39, after 1,000-1,023 in
        // slots 40-63. The best must follow price, not slot, order.
        let mut b = Books::new(1000);
        let (bid, ask) = (book_id(0, Side::Buy), book_id(0, Side::Sell));
        b.add(0, 1, Side::Buy, 10, 1_047 * TICK).unwrap();
        b.add(0, 2, Side::Sell, 10, 1_050 * TICK).unwrap();
        // Both windows were centred by their first price: 47 ticks below
        // the bid (at 1,000: slot 40), 16 below the ask (at 1,034).
        assert_eq!(b.mem.sides[bid].base, 1_000);
        assert_eq!(b.mem.sides[ask].base, 1_034);
        let mut r = 3;
        for tick in [1_000, 1_010, 1_023, 1_024, 1_030, 1_040] {
            b.add(0, r, Side::Buy, 1, tick * TICK).unwrap();
            r += 1;
        }
        for tick in [1_063, 1_064, 1_090, 1_097] {
            b.add(0, r, Side::Sell, 1, tick * TICK).unwrap();
            r += 1;
        }
        // Every level is on a ladder: no treap holds one.
        assert_eq!((b.mem.sides[bid].root, b.mem.sides[ask].root), (0, 0));
        b.check();
        // The best tick of one side, then after each delete in turn.
        let bests = |b: &mut Books, deletes: [u64; 4], side: fn(Bbo) -> Option<Level>| {
            let mut ticks = vec![side(b.best(0)).unwrap().price / TICK];
            for order in deletes {
                b.delete(order).unwrap();
                ticks.push(side(b.best(0)).unwrap().price / TICK);
                b.check();
            }
            ticks
        };
        // Bids fall through the slots' end: 1,047 (slot 23), 1,040,
        // 1,030, 1,024 (slot 0), then 1,023 (slot 63).
        assert_eq!(
            bests(&mut b, [1, 8, 7, 6], |q| q.bid),
            [1_047, 1_040, 1_030, 1_024, 1_023]
        );
        // Asks rise through it: 1,050 (slot 26), 1,063 (slot 39), 1,064
        // (slot 40), 1,090, 1,097 (slot 9: the window's last tick).
        assert_eq!(
            bests(&mut b, [2, 9, 10, 11], |q| q.ask),
            [1_050, 1_063, 1_064, 1_090, 1_097]
        );
    }

    #[test]
    fn replace_keeps_side_and_locate() {
        let mut b = Books::new(10);
        b.add(9, 1, Side::Sell, 100, 700).unwrap();
        b.add(9, 2, Side::Sell, 5, 710).unwrap();
        assert_eq!(
            b.replace(1, 3, 60, 720),
            Ok(Effect {
                locate: 9,
                error: None
            })
        );
        assert_eq!(b.order(1), None);
        assert_eq!(
            b.order(3),
            Some(LiveOrder {
                locate: 9,
                side: Side::Sell,
                shares: 60,
                price: 720
            })
        );
        assert_eq!(b.best(9).ask, lv(710, 5));
        // Same ref again is allowed.
        b.replace(3, 3, 61, 705).unwrap();
        assert_eq!(b.best(9).ask, lv(705, 61));
        assert_eq!(b.live_orders(), 2);
        b.check();
    }

    /// Cboe PITCH's Executed at Price/Size: the order's shares set, up or
    /// down, its level and place kept; at 0 it leaves.
    #[test]
    fn set_shares_moves_the_level_both_ways() {
        let mut b = Books::new(10);
        b.add(4, 1, Side::Buy, 10, 100).unwrap();
        b.add(4, 2, Side::Buy, 20, 100).unwrap();
        let f = b.lookup(1).unwrap();
        assert_eq!(b.found_shares(&f), 10);
        assert_eq!(b.set_shares_found(f, 25).error, None);
        assert_eq!(b.best(4).bid, lv(100, 45));
        assert_eq!(b.order(1).unwrap().shares, 25);
        b.set_shares_found(b.lookup(1).unwrap(), 5);
        assert_eq!(b.best(4).bid, lv(100, 25));
        b.set_shares_found(b.lookup(2).unwrap(), 0);
        assert_eq!(b.order(2), None);
        assert_eq!(b.best(4).bid, lv(100, 5));
        assert_eq!(b.live_orders(), 1);
        b.check();
    }

    #[test]
    fn replace_errors() {
        let mut b = Books::new(10);
        b.add(4, 1, Side::Buy, 10, 100).unwrap();
        b.add(4, 2, Side::Buy, 20, 90).unwrap();
        // Unknown original: nothing added.
        assert_eq!(b.replace(77, 5, 1, 1), Err(OrderError::Unknown));
        assert_eq!(b.order(5), None);
        // New ref live: the original is still removed.
        assert_eq!(
            b.replace(1, 2, 10, 100),
            Ok(Effect {
                locate: 4,
                error: Some(OrderError::RefInUse)
            })
        );
        assert_eq!(b.best(4).bid, lv(90, 20));
        assert_eq!(b.live_orders(), 1);
        // Zero shares: removed, nothing added.
        assert_eq!(
            b.replace(2, 3, 0, 100),
            Ok(Effect {
                locate: 4,
                error: Some(OrderError::ZeroShares)
            })
        );
        assert_eq!(b.best(4), Bbo::default());
        assert_eq!(b.live_orders(), 0);
        b.check();
    }

    #[test]
    fn clear_empties_every_book_and_frees_capacity() {
        let mut b = Books::new(3);
        b.add(1, 1, Side::Buy, 1, 1).unwrap();
        b.add(2, 2, Side::Sell, 1, 2).unwrap();
        b.add(65_535, 3, Side::Sell, 1, 3).unwrap();
        assert_eq!(b.add(1, 4, Side::Buy, 1, 1), Err(OrderError::Overflow));
        b.clear();
        assert_eq!(b.live_orders(), 0);
        for l in [1, 2, 65_535] {
            assert_eq!(b.best(l), Bbo::default());
        }
        assert_eq!(b.delete(1), Err(OrderError::Unknown));
        for r in 1..=3 {
            b.add(5, r, Side::Buy, 1, 10).unwrap();
        }
        assert_eq!(b.best(5).bid, lv(10, 3));
        b.check();
    }

    #[test]
    fn extreme_prices() {
        let mut b = Books::new(10);
        b.add(0, 1, Side::Buy, u32::MAX, u32::MAX).unwrap();
        b.add(0, 2, Side::Buy, u32::MAX, u32::MAX).unwrap();
        b.add(0, 3, Side::Sell, 1, 0).unwrap();
        assert_eq!(b.best(0), bbo(lv(u32::MAX, 2 * u32::MAX as u64), lv(0, 1)));
        b.check();
    }

    type Model = HashMap<u64, (u16, Side, u32, u32)>;

    /// The best of `locate` by a scan of every live order.
    fn model_best(model: &Model, locate: u16) -> Bbo {
        let side_best = |side: Side| {
            let prices = model
                .values()
                .filter(|o| o.0 == locate && o.1 == side)
                .map(|o| o.3);
            let price = match side {
                Side::Buy => prices.max(),
                Side::Sell => prices.min(),
            }?;
            let shares = model
                .values()
                .filter(|o| o.0 == locate && o.1 == side && o.3 == price)
                .map(|o| o.2 as u64)
                .sum();
            Some(Level { price, shares })
        };
        Bbo {
            bid: side_best(Side::Buy),
            ask: side_best(Side::Sell),
        }
    }

    /// Books on huge pages give the same results as books without.
    #[test]
    fn huge_pages_change_nothing_but_the_pages() {
        // Large enough that every table holds whole 2 MiB pages to advise.
        let mut plain = Books::new(1_000_000);
        let mut huge = Books::with_tables(1_000_000, true);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..2 {
            for _ in 0..5_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (locate, order_ref) = ((x >> 8) as u16 % 50, x % 3_000);
                let side = if x >> 30 & 1 == 0 {
                    Side::Buy
                } else {
                    Side::Sell
                };
                let (shares, price) = (1 + (x >> 40) as u32 % 50, 10_000 + (x >> 32) as u32 % 200);
                if x >> 62 == 0 {
                    assert_eq!(plain.delete(order_ref), huge.delete(order_ref));
                } else {
                    assert_eq!(
                        plain.add(locate, order_ref, side, shares, price),
                        huge.add(locate, order_ref, side, shares, price)
                    );
                }
            }
            for locate in 0..50 {
                assert_eq!(plain.best(locate), huge.best(locate), "round {round}");
            }
            assert_eq!(plain.live_orders(), huge.live_orders());
            assert_eq!(plain.live_levels(), huge.live_levels());
            assert!(huge.live_orders() > 0);
            plain.clear();
            huge.clear();
        }
    }

    /// Many levels per side in every arrival order, checked structurally
    /// after each step, with a model of the best.
    #[test]
    fn random_walk_keeps_treaps_consistent() {
        let mut b = Books::new(300);
        let mut model: Model = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..20_000 {
            let r = next();
            let order_ref = r % 400;
            let locate = (r >> 20) as u16 % 3;
            let side = if r >> 30 & 1 == 0 {
                Side::Buy
            } else {
                Side::Sell
            };
            let price = 1000 + (r >> 32) as u32 % 64;
            let shares = 1 + (r >> 40) as u32 % 50;
            match r >> 60 {
                0..=6 => {
                    let want = if model.contains_key(&order_ref) {
                        Err(OrderError::RefInUse)
                    } else if model.len() >= 300 {
                        Err(OrderError::Overflow)
                    } else {
                        model.insert(order_ref, (locate, side, shares, price));
                        Ok(())
                    };
                    assert_eq!(b.add(locate, order_ref, side, shares, price), want);
                }
                7..=10 => {
                    let got = b.reduce(order_ref, shares);
                    match model.get_mut(&order_ref) {
                        None => assert_eq!(got, Err(OrderError::Unknown)),
                        Some(o) => {
                            let l = o.0;
                            let err = (shares > o.2).then_some(OrderError::TooLarge);
                            if shares >= o.2 {
                                model.remove(&order_ref);
                            } else {
                                o.2 -= shares;
                            }
                            assert_eq!(
                                got,
                                Ok(Effect {
                                    locate: l,
                                    error: err
                                })
                            );
                        }
                    }
                }
                11..=12 => {
                    let got = b.delete(order_ref);
                    match model.remove(&order_ref) {
                        None => assert_eq!(got, Err(OrderError::Unknown)),
                        Some(o) => assert_eq!(got.unwrap().locate, o.0),
                    }
                }
                _ => {
                    let new_ref = next() % 400;
                    let got = b.replace(order_ref, new_ref, shares, price);
                    match model.remove(&order_ref) {
                        None => assert_eq!(got, Err(OrderError::Unknown)),
                        Some(o) => {
                            let err = match model.entry(new_ref) {
                                std::collections::hash_map::Entry::Occupied(_) => {
                                    Some(OrderError::RefInUse)
                                }
                                std::collections::hash_map::Entry::Vacant(v) => {
                                    v.insert((o.0, o.1, shares, price));
                                    None
                                }
                            };
                            assert_eq!(
                                got,
                                Ok(Effect {
                                    locate: o.0,
                                    error: err
                                })
                            );
                        }
                    }
                }
            }
            if step % 50 == 0 {
                b.check();
            }
            for l in 0..3u16 {
                assert_eq!(b.best(l), model_best(&model, l), "step {step} locate {l}");
            }
            assert_eq!(b.live_orders(), model.len());
        }
        b.check();
    }
}

/// The price ladder and its treap fallback against a model: a BTreeMap of
/// levels per book side. Prices come from a centre that drifts (so windows
/// re-centre, both ways), plus prices far outside any window, off the cent
/// grid, and at the ends of the u32 range; after every operation the books
/// pass the structural check and every side's levels equal the model's.
#[cfg(test)]
mod ladder_props {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, HashMap};

    const MAX_ORDERS: usize = 100;
    const USED_LOCATES: u16 = 2;

    #[derive(Clone, Copy, Debug)]
    enum Price {
        /// `centre + ticks` on the grid.
        Near(i32),
        /// Any grid price.
        Far(u32),
        /// `centre * TICK + sub` (sub in 1..TICK): off the grid.
        Off(u32),
        Min,
        Max,
    }

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Add(u16, u64, Side, u32, Price),
        Reduce(u64, u32),
        Delete(u64),
        Replace(u64, u64, u32, Price),
        /// Moves the centre by this many ticks.
        Drift(i32),
        Clear,
    }

    fn price() -> impl Strategy<Value = Price> {
        prop_oneof![
            12 => (-90i32..90).prop_map(Price::Near),
            2 => (0u32..=u32::MAX / TICK).prop_map(|t| Price::Far(t * TICK)),
            2 => (1u32..TICK).prop_map(Price::Off),
            1 => Just(Price::Min),
            1 => Just(Price::Max),
        ]
    }

    fn side() -> impl Strategy<Value = Side> {
        prop_oneof![Just(Side::Buy), Just(Side::Sell)]
    }

    fn op() -> impl Strategy<Value = Op> {
        let r = || 0u64..130;
        prop_oneof![
            10 => (0..USED_LOCATES, r(), side(), 0u32..5, price())
                .prop_map(|(l, o, s, n, p)| Op::Add(l, o, s, n, p)),
            3 => (r(), 0u32..6).prop_map(|(o, n)| Op::Reduce(o, n)),
            3 => r().prop_map(Op::Delete),
            3 => (r(), r(), 0u32..5, price()).prop_map(|(o, n, s, p)| Op::Replace(o, n, s, p)),
            2 => (-40i32..40).prop_map(Op::Drift),
            1 => Just(Op::Clear),
        ]
    }

    fn resolve(p: Price, centre: u32) -> u32 {
        match p {
            Price::Near(d) => {
                (centre as i64 + d as i64).clamp(0, (u32::MAX / TICK) as i64) as u32 * TICK
            }
            Price::Far(p) => p,
            Price::Off(sub) => centre * TICK + sub,
            Price::Min => 0,
            Price::Max => u32::MAX,
        }
    }

    type Orders = HashMap<u64, (u16, Side, u32, u32)>;

    fn model_levels(orders: &Orders, locate: u16, side: Side) -> Vec<(u32, u64)> {
        let mut m: BTreeMap<u32, u64> = BTreeMap::new();
        for &(l, s, shares, price) in orders.values() {
            if l == locate && s == side {
                *m.entry(price).or_default() += shares as u64;
            }
        }
        m.into_iter().collect()
    }

    fn model_add(orders: &mut Orders, r: u64, o: (u16, Side, u32, u32)) -> Option<OrderError> {
        if o.2 == 0 {
            Some(OrderError::ZeroShares)
        } else if orders.contains_key(&r) {
            Some(OrderError::RefInUse)
        } else if orders.len() >= MAX_ORDERS {
            Some(OrderError::Overflow)
        } else {
            orders.insert(r, o);
            None
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn ladder_and_treap_match_a_btreemap(
            start in prop_oneof![Just(1u32), 5u32..200_000, Just(u32::MAX / TICK - 20)],
            ops in prop::collection::vec(op(), 1..300),
        ) {
            let mut b = Books::new(MAX_ORDERS);
            let mut orders: Orders = HashMap::new();
            let mut centre = start;
            for (step, &op) in ops.iter().enumerate() {
                match op {
                    Op::Add(l, r, s, n, p) => {
                        let p = resolve(p, centre);
                        let want = model_add(&mut orders, r, (l, s, n, p));
                        prop_assert_eq!(b.add(l, r, s, n, p).err(), want, "step {}", step);
                    }
                    Op::Reduce(r, n) => {
                        let got = b.reduce(r, n);
                        match orders.get_mut(&r) {
                            None => prop_assert_eq!(got, Err(OrderError::Unknown)),
                            Some(o) => {
                                let want = Effect { locate: o.0, error: (n > o.2).then_some(OrderError::TooLarge) };
                                if n >= o.2 { orders.remove(&r); } else { o.2 -= n; }
                                prop_assert_eq!(got, Ok(want));
                            }
                        }
                    }
                    Op::Delete(r) => {
                        let got = b.delete(r);
                        match orders.remove(&r) {
                            None => prop_assert_eq!(got, Err(OrderError::Unknown)),
                            Some(o) => prop_assert_eq!(got, Ok(Effect { locate: o.0, error: None })),
                        }
                    }
                    Op::Replace(r, new, n, p) => {
                        let p = resolve(p, centre);
                        let got = b.replace(r, new, n, p);
                        match orders.remove(&r) {
                            None => prop_assert_eq!(got, Err(OrderError::Unknown)),
                            Some(o) => {
                                let error = model_add(&mut orders, new, (o.0, o.1, n, p));
                                prop_assert_eq!(got, Ok(Effect { locate: o.0, error }));
                            }
                        }
                    }
                    Op::Drift(d) => {
                        centre = (centre as i64 + d as i64).clamp(1, (u32::MAX / TICK) as i64 - 1) as u32;
                    }
                    Op::Clear => {
                        b.clear();
                        orders.clear();
                    }
                }
                b.check_first(2 * USED_LOCATES as usize);
                for l in 0..USED_LOCATES {
                    for s in [Side::Buy, Side::Sell] {
                        prop_assert_eq!(b.levels(l, s), model_levels(&orders, l, s), "step {} {:?}", step, op);
                    }
                }
                prop_assert_eq!(b.live_orders(), orders.len());
            }
        }
    }
}
