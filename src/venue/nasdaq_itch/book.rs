//! The books of one ITCH feed: every live order (in the [`OrderTable`]) and,
//! per stock locate and side, its price levels, so that the best bid and
//! offer is read in O(1) after each message (venues.md `nasdaq-itch`).
//!
//! Structure, all allocated in [`Books::new`] and [`Books::clear`], nothing
//! per message:
//! - the order table: 16 bytes per slot, at most 2/3 full (see `orders`);
//! - one pool of level nodes (24 bytes each: price, two children, book id,
//!   aggregate shares) with a free list. A level exists while it has live
//!   shares; there are never more levels than live orders, so the pool
//!   holds `max_orders + 1` nodes (node 0 is the null link). The pool is
//!   reserved but filled by `push` as levels are first needed, so its pages
//!   become resident only when used;
//! - per locate and side (2 x 65,536): the root of a treap of its levels
//!   keyed by price, and its best level (highest bid, lowest ask), 8 bytes;
//! - a 4 MiB direct-mapped cache from (book, price) to level, a hint that
//!   spares most adds the treap search.
//!
//! Virtual memory for `max_orders` = 10M: 256 MiB of slots + 240 MiB of
//! level nodes + 1 MiB of sides + 4 MiB of level cache, about 501 MiB,
//! resident only as touched.
//!
//! Cost per message: an order's slot keeps its level's index, so an
//! execution, cancel or delete finds its level in O(1); only adding a level
//! (a new price) or removing one (its last shares gone) walks the treap,
//! O(log levels) expected. The cached best changes on a new better level
//! (O(1)) or when the best level empties (one more walk down the treap).
//! An add at the best price, or at a level the cache remembers, skips the
//! treap search.
//!
//! The treap's heap priority is a hash of the node's index (not stored:
//! nodes stay 24 bytes), so its shape does not depend on the order in which
//! prices arrive.

use super::messages::Side;
use super::orders::{Order, OrderTable, Sequential};

/// Stock locates are u16: one book per value.
pub const LOCATES: usize = 1 << 16;

/// log2 of the entries of the level cache (4 MiB of u32).
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

/// A price level: a treap node in the shared pool.
#[derive(Clone, Copy, Debug, Default)]
struct Node {
    price: u32,
    left: u32,
    right: u32,
    /// `locate << 1 | side` (0 buy, 1 sell).
    book: u32,
    /// Live shares at this price; 0 only while the node is free.
    shares: u64,
}

#[inline(always)]
fn book_id(locate: u16, side: Side) -> usize {
    (locate as usize) << 1 | (side == Side::Sell) as usize
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
    /// Head of the free list of nodes (linked through `left`), 0: empty.
    free: u32,
    /// `[treap root, best level]` per `book_id`.
    sides: Vec<[u32; 2]>,
    /// Direct-mapped hint from (book, price) to a level index: lets an add
    /// at an existing level skip the treap search (one cache miss instead
    /// of one per treap node, which `perf` showed as most of an add). A
    /// hint is used only when that node is live with the same book and
    /// price, and a live level is unique per book and price, so a stale
    /// or colliding hint just falls back to the search.
    level_cache: Vec<u32>,
    max_orders: usize,
}

impl Books {
    /// Books holding at most `max_orders` live orders across all locates
    /// (configuration `max_orders`, default 10,000,000). `max_orders` must
    /// be below 2^32 (level indices are u32).
    pub fn new(max_orders: usize) -> Books {
        assert!(max_orders < u32::MAX as usize, "max_orders too large");
        let mut b = Books {
            orders: OrderTable::new(max_orders),
            nodes: Vec::new(),
            free: 0,
            sides: Vec::new(),
            level_cache: Vec::new(),
            max_orders,
        };
        b.reset_levels();
        b
    }

    fn reset_levels(&mut self) {
        // Free the old storage before the new one is reserved.
        self.nodes = Vec::new();
        self.nodes = Vec::with_capacity(self.max_orders + 1);
        self.nodes.push(Node::default());
        self.free = 0;
        self.sides = Vec::new();
        self.sides = vec![[0u32; 2]; 2 * LOCATES];
        self.level_cache = Vec::new();
        self.level_cache = vec![0u32; 1 << LEVEL_CACHE_BITS];
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
            f = self.nodes[f as usize].left;
        }
        self.nodes.len() - 1 - free
    }

    /// The order table (benches: probe lengths).
    pub fn orders(&self) -> &OrderTable<Sequential> {
        &self.orders
    }

    /// Adds a live order. Checked in this order, each leaving every book
    /// unchanged: `ZeroShares` for 0 shares, `RefInUse` when `order_ref` is
    /// live, `Overflow` when `max_orders` orders are live.
    #[inline]
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
        let level = self.level_for(book_id(locate, side), side, price);
        self.nodes[level as usize].shares += shares as u64;
        self.orders
            .insert_at(slot, order_ref, Order { shares, level });
        Ok(())
    }

    /// E, C, X: removes `shares` from the order; at 0 the order leaves.
    /// More than it has: the order leaves and `Effect.error` is
    /// `Some(TooLarge)`. 0 shares changes nothing (no error: nothing
    /// contradicts the book). `Err(Unknown)`: nothing changed.
    #[inline]
    pub fn reduce(&mut self, order_ref: u64, shares: u32) -> Result<Effect, OrderError> {
        let slot = self
            .orders
            .probe(order_ref)
            .map_err(|_| OrderError::Unknown)?;
        let order = self.orders.at(slot);
        let locate = self.locate_of(order.level);
        if shares < order.shares {
            self.nodes[order.level as usize].shares -= shares as u64;
            self.orders.set_shares(slot, order.shares - shares);
            return Ok(Effect {
                locate,
                error: None,
            });
        }
        self.remove(slot, order);
        Ok(Effect {
            locate,
            error: (shares > order.shares).then_some(OrderError::TooLarge),
        })
    }

    /// D: removes the order. `Err(Unknown)`: nothing changed.
    #[inline]
    pub fn delete(&mut self, order_ref: u64) -> Result<Effect, OrderError> {
        let slot = self
            .orders
            .probe(order_ref)
            .map_err(|_| OrderError::Unknown)?;
        let order = self.orders.at(slot);
        let locate = self.locate_of(order.level);
        self.remove(slot, order);
        Ok(Effect {
            locate,
            error: None,
        })
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
        let slot = self
            .orders
            .probe(original)
            .map_err(|_| OrderError::Unknown)?;
        let order = self.orders.at(slot);
        let book = self.nodes[order.level as usize].book;
        let locate = (book >> 1) as u16;
        let side = if book & 1 == 0 { Side::Buy } else { Side::Sell };
        self.remove(slot, order);
        Ok(Effect {
            locate,
            error: self.add(locate, new_ref, side, shares, price).err(),
        })
    }

    /// Best bid and offer of `locate`, O(1).
    #[inline]
    pub fn best(&self, locate: u16) -> Bbo {
        let level = |n: u32| {
            (n != 0).then(|| {
                let n = &self.nodes[n as usize];
                Level {
                    price: n.price,
                    shares: n.shares,
                }
            })
        };
        Bbo {
            bid: level(self.sides[book_id(locate, Side::Buy)][1]),
            ask: level(self.sides[book_id(locate, Side::Sell)][1]),
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
    #[inline]
    fn remove(&mut self, slot: usize, order: Order) {
        self.orders.remove_at(slot);
        let n = &mut self.nodes[order.level as usize];
        n.shares -= order.shares as u64;
        if n.shares == 0 {
            self.drop_level(order.level);
        }
    }

    /// The level at `price` in book side `b`, created when absent.
    #[inline]
    fn level_for(&mut self, b: usize, side: Side, price: u32) -> u32 {
        let [root, best] = self.sides[b];
        // Most adds arrive at or near the top: skip the search at the best.
        if best != 0 && self.nodes[best as usize].price == price {
            return best;
        }
        let h = ((b as u64) << 32 | price as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - LEVEL_CACHE_BITS);
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
        self.insert(b, n);
        self.level_cache[h as usize] = n;
        let better = best == 0 || {
            let bp = self.nodes[best as usize].price;
            match side {
                Side::Buy => price > bp,
                Side::Sell => price < bp,
            }
        };
        if better {
            self.sides[b][1] = n;
        }
        n
    }

    fn alloc(&mut self, price: u32, book: u32) -> u32 {
        let node = Node {
            price,
            left: 0,
            right: 0,
            book,
            shares: 0,
        };
        if self.free != 0 {
            let n = self.free;
            self.free = self.nodes[n as usize].left;
            self.nodes[n as usize] = node;
            n
        } else {
            // Levels never outnumber live orders, which stay under
            // `max_orders`: this push stays within the reservation.
            debug_assert!(self.nodes.len() < self.nodes.capacity());
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        }
    }

    fn find(&self, mut t: u32, price: u32) -> u32 {
        while t != 0 {
            let n = &self.nodes[t as usize];
            if price == n.price {
                return t;
            }
            t = if price < n.price { n.left } else { n.right };
        }
        0
    }

    /// Splits treap `t` (which has no node at `price`) into the nodes below
    /// and above `price`.
    fn split(&mut self, t: u32, price: u32) -> (u32, u32) {
        if t == 0 {
            return (0, 0);
        }
        let n = self.nodes[t as usize];
        if n.price < price {
            let (l, r) = self.split(n.right, price);
            self.nodes[t as usize].right = l;
            (t, r)
        } else {
            let (l, r) = self.split(n.left, price);
            self.nodes[t as usize].left = r;
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
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            a
        } else {
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            b
        }
    }

    /// Links new node `n` into book side `b`: down from the root while the
    /// nodes outrank it, then it takes that place with the subtree split
    /// around its price as children.
    fn insert(&mut self, b: usize, n: u32) {
        let price = self.nodes[n as usize].price;
        let pn = prio(n);
        let (mut parent, mut left) = (0u32, false);
        let mut t = self.sides[b][0];
        while t != 0 && prio(t) > pn {
            let node = &self.nodes[t as usize];
            parent = t;
            left = price < node.price;
            t = if left { node.left } else { node.right };
        }
        let (l, r) = self.split(t, price);
        let node = &mut self.nodes[n as usize];
        node.left = l;
        node.right = r;
        self.set_link(b, parent, left, n);
    }

    fn set_link(&mut self, b: usize, parent: u32, left: bool, to: u32) {
        if parent == 0 {
            self.sides[b][0] = to;
        } else if left {
            self.nodes[parent as usize].left = to;
        } else {
            self.nodes[parent as usize].right = to;
        }
    }

    /// Unlinks an emptied level from its treap, moves the best when it was
    /// the best, and frees the node.
    fn drop_level(&mut self, n: u32) {
        let Node {
            price,
            left: nl,
            right: nr,
            book,
            ..
        } = self.nodes[n as usize];
        let b = book as usize;
        let (mut parent, mut left) = (0u32, false);
        let mut t = self.sides[b][0];
        while t != n {
            let node = &self.nodes[t as usize];
            parent = t;
            left = price < node.price;
            t = if left { node.left } else { node.right };
        }
        let m = self.merge(nl, nr);
        self.set_link(b, parent, left, m);
        if self.sides[b][1] == n {
            // The new best is the extreme of what is left: right-most for
            // bids, left-most for asks.
            let mut t = self.sides[b][0];
            if t != 0 {
                loop {
                    let node = &self.nodes[t as usize];
                    let next = if book & 1 == 0 { node.right } else { node.left };
                    if next == 0 {
                        break;
                    }
                    t = next;
                }
            }
            self.sides[b][1] = t;
        }
        let node = &mut self.nodes[n as usize];
        node.shares = 0;
        node.left = self.free;
        node.right = 0;
        self.free = n;
    }

    /// Full consistency check, O(everything): every treap is ordered by
    /// price and heap-ordered by priority, holds only its own book's
    /// levels, each with shares equal to the sum of its live orders, and
    /// each side's best is its extreme. Tests only.
    #[cfg(test)]
    fn check(&self) {
        let mut sum = vec![0u64; self.nodes.len()];
        for (_, o) in self.orders.iter() {
            assert!(o.shares > 0, "live order without shares");
            sum[o.level as usize] += o.shares as u64;
        }
        let mut seen_levels = 0usize;
        for b in 0..2 * LOCATES {
            let [root, best] = self.sides[b];
            if root == 0 {
                assert_eq!(best, 0, "best of an empty side");
                continue;
            }
            let mut stack = vec![(root, 0u32, u32::MAX, u32::MAX)];
            let mut extreme = 0u32;
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
                let better = extreme == 0 || {
                    let e = self.nodes[extreme as usize].price;
                    if b & 1 == 0 {
                        n.price > e
                    } else {
                        n.price < e
                    }
                };
                if better {
                    extreme = t;
                }
                if n.price > 0 {
                    stack.push((n.left, lo, n.price - 1, prio(t)));
                }
                if n.price < u32::MAX {
                    stack.push((n.right, n.price + 1, hi, prio(t)));
                }
            }
            assert_eq!(best, extreme, "best is not the extreme of book {b}");
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
