//! The per-feed order table: order reference -> (live shares, price level).
//!
//! Fixed-capacity open addressing: linear probing in Robin Hood order
//! (within a run of occupied slots, entries are ordered by home slot) with
//! backward-shift deletion (no tombstones, so a long day of adds and
//! deletes never degrades probes; see [`OrderTable::remove_at`] for why
//! Robin Hood). All storage is one zeroed allocation made in `new`
//! (`vec![[0u64; 2]; n]` is a calloc: untouched pages are never resident).
//!
//! Slot: 16 bytes, `[order ref, shares | level << 32]`; `level == 0` marks
//! an empty slot (level 0 is the book's null node). The capacity is the
//! power of two at or above 1.5 x `max_orders` (load at most 2/3; 10M
//! orders: 2^24 slots, 256 MiB of virtual memory).
//!
//! Where a reference lands is the [`RefHash`] type parameter. The book uses
//! [`Sequential`] (`slot = ref & mask`): Nasdaq numbers orders
//! sequentially through the day, so consecutive adds fill consecutive
//! slots (one cache line holds 4), the executions and cancels that follow
//! soon after find their order in cache, and refs that are live at the
//! same time rarely collide (two refs collide only when they differ by a
//! multiple of the capacity). [`Scattered`] (Fibonacci hashing) is there
//! for comparison in `benches/itch_book.rs` and for ref streams that are
//! strided by a power of two, where `Sequential` would cluster. Measured
//! (`itch table` bench, 1M live orders, 2^24 slots, thread CPU time on a
//! loaded 2-core host, 2026-12-01): `Sequential` 66 ns per operation,
//! `Scattered` 87 ns; neither had any displacement on that stream.

use std::marker::PhantomData;

use crate::util::pages::MemRange;
use crate::util::prefetch::prefetch;

/// Maps an order reference to its home slot in a table of `1 << bits`.
pub trait RefHash {
    fn home(order_ref: u64, bits: u32) -> usize;
}

/// `ref & mask`: keeps sequential refs in sequential slots.
#[derive(Debug, Clone, Copy)]
pub struct Sequential;

impl RefHash for Sequential {
    #[inline(always)]
    fn home(order_ref: u64, bits: u32) -> usize {
        (order_ref & ((1u64 << bits) - 1)) as usize
    }
}

/// Fibonacci hashing (top bits of `ref * 2^64/phi`): spreads any pattern.
#[derive(Debug, Clone, Copy)]
pub struct Scattered;

impl RefHash for Scattered {
    #[inline(always)]
    fn home(order_ref: u64, bits: u32) -> usize {
        (order_ref.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }
}

/// A live order as the table holds it: its shares and its level's index
/// (never 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    pub shares: u32,
    pub level: u32,
}

/// Fixed-capacity map from order reference to [`Order`].
pub struct OrderTable<H: RefHash = Sequential> {
    slots: Vec<[u64; 2]>,
    bits: u32,
    len: usize,
    /// Whether the slots are laid out for a replay (`with_tables`).
    replay_tables: bool,
    /// What of the slots was asked to be made resident ([`AHEAD_BYTES`]).
    ahead: Ahead,
    _hash: PhantomData<H>,
}

/// The stretches of a table's slots asked to be made resident ahead of
/// its inserts ([`AHEAD_BYTES`]).
#[derive(Debug)]
struct Ahead {
    /// Slots before this were asked for.
    to: usize,
    /// An insert at or past this slot asks for the next stretch
    /// (`usize::MAX`: never, or the whole table was asked for).
    ask_at: usize,
    /// A stretch asked for and not yet taken ([`OrderTable::take_populate`]).
    asked: Option<MemRange>,
}

impl Ahead {
    /// Nothing asked yet; a replay's table asks at its first insert, a
    /// live feed's never.
    fn new(replay_tables: bool) -> Ahead {
        Ahead {
            to: 0,
            ask_at: if replay_tables { 0 } else { usize::MAX },
            asked: None,
        }
    }
}

/// Bytes of a replay's table asked to be made resident ahead of the
/// newest insert. Refs are sequential, so inserts sweep the table from
/// one end to the other: the replay's helper thread has the kernel zero
/// the pages before the loop reaches them, instead of the loop stopping
/// at each page's first write while the kernel zeroes it (and the caches
/// are cleared). A day never holds more than this beyond the pages it
/// uses (docs/venues.md, "Tables in replay").
pub const AHEAD_BYTES: usize = 32 << 20;

#[inline(always)]
fn pack(o: Order) -> u64 {
    o.shares as u64 | (o.level as u64) << 32
}

#[inline(always)]
fn unpack(w: u64) -> Order {
    Order {
        shares: w as u32,
        level: (w >> 32) as u32,
    }
}

impl<H: RefHash> OrderTable<H> {
    /// A table that can hold `max_orders` orders with room to spare (the
    /// caller enforces the limit; the table is never filled, so a probe
    /// always meets an empty slot).
    pub fn new(max_orders: usize) -> OrderTable<H> {
        OrderTable::with_tables(max_orders, false)
    }

    /// [`OrderTable::new`], laid out for a replay when `replay_tables`: on
    /// huge pages, with the pages ahead of the inserts asked to be made
    /// resident (see [`AHEAD_BYTES`]).
    pub fn with_tables(max_orders: usize, replay_tables: bool) -> OrderTable<H> {
        let want = max_orders.saturating_add(max_orders.div_ceil(2)).max(2);
        let cap = want.next_power_of_two().max(2);
        OrderTable {
            slots: crate::util::pages::filled([0u64; 2], cap, replay_tables),
            replay_tables,
            ahead: Ahead::new(replay_tables),
            bits: cap.trailing_zeros(),
            len: 0,
            _hash: PhantomData,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// How far the entry in slot `i` sits from its home.
    #[inline(always)]
    fn dist(&self, i: usize, order_ref: u64) -> usize {
        i.wrapping_sub(H::home(order_ref, self.bits)) & self.mask()
    }

    /// `Ok(slot)` where `order_ref` is, or `Err(slot)`: where it would be
    /// inserted (an empty slot, or the first entry closer to its home than
    /// `order_ref` would be there, which Robin Hood order says ends the
    /// search).
    #[inline]
    pub fn probe(&self, order_ref: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = H::home(order_ref, self.bits);
        let mut d = 0;
        loop {
            let s = self.slots[i];
            if s[1] >> 32 == 0 {
                return Err(i);
            }
            if s[0] == order_ref {
                return Ok(i);
            }
            if self.dist(i, s[0]) < d {
                return Err(i);
            }
            i = (i + 1) & mask;
            d += 1;
        }
    }

    /// Asks the CPU to bring `order_ref`'s home slot into the cache, ahead
    /// of a probe (a hint: changes nothing).
    #[inline(always)]
    pub fn prefetch(&self, order_ref: u64) {
        prefetch(&self.slots[H::home(order_ref, self.bits)]);
    }

    #[inline]
    pub fn get(&self, order_ref: u64) -> Option<Order> {
        self.probe(order_ref).ok().map(|i| self.at(i))
    }

    /// The order in an occupied slot.
    #[inline(always)]
    pub fn at(&self, slot: usize) -> Order {
        unpack(self.slots[slot][1])
    }

    /// Changes the shares of the order in an occupied slot.
    #[inline(always)]
    pub fn set_shares(&mut self, slot: usize, shares: u32) {
        let w = &mut self.slots[slot][1];
        *w = (*w & !0xFFFF_FFFF) | shares as u64;
    }

    /// Inserts `order_ref` (not present) at the slot `probe` returned for
    /// it, with no other change in between. `order.level` must not be 0.
    /// An entry closer to its home is pushed on along the run (Robin Hood),
    /// so entries stay ordered by home within a run.
    #[inline]
    pub fn insert_at(&mut self, slot: usize, order_ref: u64, order: Order) {
        debug_assert!(order.level != 0);
        debug_assert!(self.len + 1 < self.slots.len());
        if slot >= self.ahead.ask_at {
            self.ask_ahead(slot);
        }
        let mask = self.mask();
        let mut cur = [order_ref, pack(order)];
        let mut i = slot;
        loop {
            let s = self.slots[i];
            if s[1] >> 32 == 0 {
                self.slots[i] = cur;
                break;
            }
            if self.dist(i, cur[0]) > self.dist(i, s[0]) {
                self.slots[i] = cur;
                cur = s;
            }
            i = (i + 1) & mask;
        }
        self.len += 1;
    }

    /// Asks for the slots from `slot` (or where the last stretch ended)
    /// to [`AHEAD_BYTES`] past it; the next stretch is asked for once
    /// inserts are half-way through this one. A stretch not yet taken is
    /// widened to cover the new one.
    #[cold]
    #[inline(never)]
    fn ask_ahead(&mut self, slot: usize) {
        let per = AHEAD_BYTES / std::mem::size_of::<[u64; 2]>();
        let cap = self.slots.len();
        let a = &mut self.ahead;
        let from = a.to.max(slot);
        let to = slot.saturating_add(per).min(cap);
        a.to = to;
        a.ask_at = if to == cap { usize::MAX } else { to - per / 2 };
        if from >= to {
            return;
        }
        let new = MemRange::of(&self.slots[from..to]);
        a.asked = Some(match a.asked {
            Some(old) => old.hull(new),
            None => new,
        });
    }

    /// The stretch of the table asked to be made resident since the last
    /// call (a replay's only; see [`AHEAD_BYTES`]). A hint for a helper
    /// thread: the caller may ignore it, and the stretch is the table's
    /// only until the next [`OrderTable::clear`].
    pub fn take_populate(&mut self) -> Option<MemRange> {
        self.ahead.asked.take()
    }

    /// Empties an occupied slot, then moves the rest of its run back one
    /// slot up to the first entry that is at its home (backward shift, no
    /// tombstones).
    ///
    /// Why Robin Hood order: sequential refs make the live orders one long
    /// run of occupied slots, each at its home. Plain linear probing must
    /// then scan to the end of the run on every removal to be sure no later
    /// entry belongs in the hole (measured: about 0.9 us per operation with
    /// 1M live orders); with Robin Hood order the next entry being at home
    /// ends the shift at once.
    #[inline]
    pub fn remove_at(&mut self, slot: usize) {
        let mask = self.mask();
        let mut hole = slot;
        loop {
            let j = (hole + 1) & mask;
            let s = self.slots[j];
            if s[1] >> 32 == 0 || self.dist(j, s[0]) == 0 {
                break;
            }
            self.slots[hole] = s;
            hole = j;
        }
        self.slots[hole] = [0, 0];
        self.len -= 1;
    }

    /// Empties the table by replacing its storage with a fresh zeroed
    /// allocation: the old pages are returned to the system (cost
    /// proportional to the pages that were resident, in the kernel) and
    /// the new ones cost a page fault each when first touched again (in
    /// a replay, asked for ahead of the inserts again). No slot is
    /// written.
    pub fn clear(&mut self) {
        let cap = self.slots.len();
        // Free first so that two tables never exist at once.
        self.slots = Vec::new();
        self.slots = crate::util::pages::filled([0u64; 2], cap, self.replay_tables);
        self.ahead = Ahead::new(self.replay_tables);
        self.len = 0;
    }

    /// Every live order with its reference, in slot order (O(capacity):
    /// diagnostics and tests).
    pub fn iter(&self) -> impl Iterator<Item = (u64, Order)> + '_ {
        self.slots
            .iter()
            .filter(|s| s[1] >> 32 != 0)
            .map(|s| (s[0], unpack(s[1])))
    }

    /// Length of the probe from each live order's home to its slot, summed
    /// (diagnostics and benches: 0 means no collision at all).
    pub fn total_displacement(&self) -> u64 {
        let mask = self.mask();
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s[1] >> 32 != 0)
            .map(|(i, s)| (i.wrapping_sub(H::home(s[0], self.bits)) & mask) as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn o(shares: u32, level: u32) -> Order {
        Order { shares, level }
    }

    #[test]
    fn capacity_leaves_room() {
        assert_eq!(OrderTable::<Sequential>::new(0).capacity(), 2);
        assert_eq!(OrderTable::<Sequential>::new(1).capacity(), 2);
        assert_eq!(OrderTable::<Sequential>::new(3).capacity(), 8);
        assert_eq!(
            OrderTable::<Sequential>::new(10_000_000).capacity(),
            1 << 24
        );
    }

    #[test]
    fn insert_get_set_remove() {
        let mut t = OrderTable::<Sequential>::new(4);
        let slot = t.probe(7).unwrap_err();
        t.insert_at(slot, 7, o(100, 3));
        assert_eq!(t.get(7), Some(o(100, 3)));
        assert_eq!(t.len(), 1);
        let slot = t.probe(7).unwrap();
        t.set_shares(slot, 40);
        assert_eq!(t.get(7), Some(o(40, 3)));
        t.remove_at(slot);
        assert_eq!(t.get(7), None);
        assert!(t.is_empty());
    }

    /// A replay's table asks for the stretch ahead of its first insert,
    /// then for the next one each time inserts are half-way through the
    /// last, until the end of the table; stretches not taken are widened;
    /// a live feed's table never asks; the entries stay as they were, and
    /// `clear` starts over.
    #[test]
    fn a_replay_table_asks_for_the_pages_ahead_of_its_inserts() {
        let per = AHEAD_BYTES / 16;
        for replay in [false, true] {
            let mut t = OrderTable::<Sequential>::with_tables(4_000_000, replay);
            let cap = t.capacity();
            assert!(cap >= 4 * per, "room for several stretches");
            let base = t.slots.as_ptr() as usize;
            let put = |t: &mut OrderTable<Sequential>, r: u64| {
                t.insert_at(t.probe(r).unwrap_err(), r, o(r as u32, 1));
            };
            assert_eq!(t.take_populate(), None);
            put(&mut t, 5);
            let first = t.take_populate();
            if !replay {
                for r in (4099..cap as u64).step_by(4099) {
                    put(&mut t, r);
                }
                assert_eq!(first, None);
                assert_eq!(t.take_populate(), None);
                continue;
            }
            assert_eq!(
                first,
                Some(MemRange {
                    addr: base + 5 * 16,
                    len: per * 16
                })
            );
            assert_eq!(t.take_populate(), None, "taken once");
            put(&mut t, (per / 2) as u64 - 1);
            assert_eq!(t.take_populate(), None, "not yet half-way");
            put(&mut t, (per / 2 + 5) as u64);
            let second = t.take_populate().expect("half-way: the next stretch");
            assert_eq!(second.addr, base + (per + 5) * 16);
            assert_eq!(second.len, (per / 2) * 16, "from where the last ended");
            // Not taken: the next stretch widens the one asked for.
            put(&mut t, (per + 10) as u64);
            put(&mut t, (2 * per) as u64);
            let wide = t.take_populate().expect("asked twice");
            assert_eq!(wide.addr, base + (per / 2 + 5 + per) * 16);
            assert_eq!(wide.addr + wide.len, base + (3 * per) * 16);
            // To the end of the table, and then never again.
            put(&mut t, (cap - per / 4) as u64);
            let last = t.take_populate().expect("the rest");
            assert_eq!(last.addr + last.len, base + cap * 16);
            put(&mut t, (cap + 7) as u64);
            assert_eq!(t.take_populate(), None);
            for r in [5, (per / 2) as u64 - 1, (2 * per) as u64, (cap + 7) as u64] {
                assert_eq!(t.get(r), Some(o(r as u32, 1)));
            }
            t.clear();
            assert!(t.is_empty());
            put(&mut t, 9);
            let again = t.take_populate().expect("the new memory is asked for");
            assert_eq!(again.addr, t.slots.as_ptr() as usize + 9 * 16);
        }
    }

    /// Refs that share a home slot, removed in every position of the run,
    /// including runs that wrap past the end of the table.
    fn colliding_run<H: RefHash>() {
        for first in 0..8u64 {
            for victim in 0..5usize {
                let mut t = OrderTable::<H>::new(5); // 8 slots
                let refs: Vec<u64> = (0..5).map(|k| first + 6 + k * 8).collect();
                for (k, &r) in refs.iter().enumerate() {
                    let s = t.probe(r).unwrap_err();
                    t.insert_at(s, r, o(k as u32 + 1, 1));
                }
                t.remove_at(t.probe(refs[victim]).unwrap());
                for (k, &r) in refs.iter().enumerate() {
                    let want = (k != victim).then(|| o(k as u32 + 1, 1));
                    assert_eq!(t.get(r), want, "first {first} victim {victim} ref {r}");
                }
            }
        }
    }

    #[test]
    fn backward_shift_keeps_every_entry_reachable() {
        colliding_run::<Sequential>();
        colliding_run::<Scattered>();
    }

    /// Within a run, an entry is at most one slot further from its home
    /// than the one before it (what lets lookups and deletions stop early).
    fn robin_hood_order<H: RefHash>(t: &OrderTable<H>) {
        let n = t.slots.len();
        for i in 0..n {
            let (a, b) = (t.slots[i], t.slots[(i + 1) % n]);
            if a[1] >> 32 != 0 && b[1] >> 32 != 0 {
                assert!(t.dist((i + 1) % n, b[0]) <= t.dist(i, a[0]) + 1, "slot {i}");
            } else if b[1] >> 32 != 0 {
                assert_eq!(t.dist((i + 1) % n, b[0]), 0, "run starts away from home");
            }
        }
    }

    /// A deterministic random walk against a HashMap, on a small table so
    /// that runs collide and wrap.
    fn random_walk<H: RefHash>() {
        let mut t = OrderTable::<H>::new(40);
        let mut model: HashMap<u64, Order> = HashMap::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = (x >> 8) % 97 * if x & 1 == 0 { 1 } else { 64 };
            match t.probe(r) {
                Ok(slot) => {
                    assert_eq!(Some(&t.at(slot)), model.get(&r));
                    t.remove_at(slot);
                    model.remove(&r);
                }
                Err(slot) => {
                    assert!(!model.contains_key(&r));
                    if model.len() < 40 {
                        let v = o(x as u32 >> 8, (x >> 40) as u32 | 1);
                        t.insert_at(slot, r, v);
                        model.insert(r, v);
                    }
                }
            }
            assert_eq!(t.len(), model.len());
            robin_hood_order(&t);
        }
        for (r, v) in &model {
            assert_eq!(t.get(*r), Some(*v));
        }
    }

    #[test]
    fn random_walk_matches_a_hashmap() {
        random_walk::<Sequential>();
        random_walk::<Scattered>();
    }

    #[test]
    fn clear_empties() {
        let mut t = OrderTable::<Sequential>::new(10);
        for r in 0..10 {
            let s = t.probe(r).unwrap_err();
            t.insert_at(s, r, o(1, 1));
        }
        assert_eq!(t.total_displacement(), 0);
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.capacity(), 16);
        for r in 0..10 {
            assert_eq!(t.get(r), None);
        }
    }
}
