//! The per-feed order table: order reference -> (live shares, price level).
//!
//! Fixed-capacity open addressing: probing in Robin Hood order (within a
//! run of occupied slots, entries are ordered by home slot) with
//! backward-shift deletion (no tombstones, so a long day of adds and
//! deletes never degrades probes; see [`OrderTable::remove_at`] for why
//! Robin Hood). All storage is one zeroed allocation made in `new`
//! (`vec![[0u64; 2]; n]` is a calloc: untouched pages are never resident).
//!
//! A probe steps half the table plus one slot at a time (`step`), not one:
//! the probe sequence from slot `h` is `h`, `h + step`, `h + 2`, `h + 2 +
//! step`, ... (mod capacity; `step` is odd, so it visits every slot, and
//! it is its own inverse, so a slot's distance from a home is one
//! multiplication). Why: once references wrap around the table (a day of
//! more adds than slots, as every real Nasdaq day is), a new reference's
//! home can hold an order that has lived a whole lap. With a step of one,
//! the new order took the next slot, which is the home of the next
//! reference, which then took the one after: every later add probed two
//! slots and every removal in that train shifted the rest of it back, until
//! the train broke. With the long step the displaced order lands half the
//! table away, on the home of a reference half a lap old or half a lap to
//! come, and the next references find their homes free (BENCHMARKS.md,
//! "Order references past the table's size").
//!
//! The next probe of a slot is half the table away, so a removal must not
//! read it to learn whether the run goes on: each slot carries a flag
//! (`NEXT_DISPLACED`) saying whether its next probe holds an entry away
//! from its home, kept by every insert and removal that displaces or moves
//! one (rare: only those read or write the far slot).
//!
//! Slot: 16 bytes, `[order ref, shares | level << 32]`, the level's top
//! bit being the slot's `NEXT_DISPLACED` flag; `level == 0` marks an
//! empty slot (level 0 is the book's null node; an empty slot is all
//! zeros). The capacity is the
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
use crate::util::prefetch::prefetch_prefix;

/// Maps an order reference to its home slot in a table of `1 << bits`
/// slots (`mask`: `(1 << bits) - 1`, kept by the table so that no probe
/// computes it).
pub trait RefHash {
    fn home(order_ref: u64, bits: u32, mask: usize) -> usize;
}

/// `ref & mask`: keeps sequential refs in sequential slots.
#[derive(Debug, Clone, Copy)]
pub struct Sequential;

impl RefHash for Sequential {
    #[inline(always)]
    fn home(order_ref: u64, _bits: u32, mask: usize) -> usize {
        order_ref as usize & mask
    }
}

/// Fibonacci hashing (top bits of `ref * 2^64/phi`): spreads any pattern.
#[derive(Debug, Clone, Copy)]
pub struct Scattered;

impl RefHash for Scattered {
    #[inline(always)]
    fn home(order_ref: u64, bits: u32, _mask: usize) -> usize {
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
    /// `slots.len() - 1`.
    mask: usize,
    /// Slots between two probes: half the capacity plus one (odd, and its
    /// own inverse modulo the capacity).
    step: usize,
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

/// In a slot's second word: the slot one probe on (`i + step`) holds an
/// entry away from its home, so a removal here must shift the run back.
/// Never set on an empty slot (an entry's probe path is all occupied).
/// Levels are below 2^31 ([`MAX_LEVEL`]), so the bit is free.
const NEXT_DISPLACED: u64 = 1 << 63;

/// The largest level index a slot can hold (the top bit of the level's
/// half is `NEXT_DISPLACED`).
pub const MAX_LEVEL: u32 = (1 << 31) - 1;

#[inline(always)]
fn pack(o: Order) -> u64 {
    debug_assert!(o.level <= MAX_LEVEL);
    o.shares as u64 | (o.level as u64) << 32
}

#[inline(always)]
fn unpack(w: u64) -> Order {
    Order {
        shares: w as u32,
        level: (w >> 32) as u32 & MAX_LEVEL,
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
        let want = max_orders.saturating_add(max_orders.div_ceil(2)).max(4);
        // At least 4 slots: with 2, the step (2) would not be odd.
        let cap = want.next_power_of_two().max(4);
        OrderTable {
            step: cap / 2 + 1,
            slots: crate::util::pages::filled([0u64; 2], cap, replay_tables),
            replay_tables,
            ahead: Ahead::new(replay_tables),
            bits: cap.trailing_zeros(),
            mask: cap - 1,
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
        self.mask
    }

    #[inline(always)]
    fn home(&self, order_ref: u64) -> usize {
        H::home(order_ref, self.bits, self.mask)
    }

    /// How many probes the entry in slot `i` sits from its home: `i` is
    /// `home + dist * step`, and `step * step` is 1 modulo the capacity.
    #[inline(always)]
    fn dist(&self, i: usize, order_ref: u64) -> usize {
        i.wrapping_sub(self.home(order_ref)).wrapping_mul(self.step) & self.mask()
    }

    /// `Ok(slot)` where `order_ref` is, or `Err(slot)`: where it would be
    /// inserted (an empty slot, or the first entry closer to its home than
    /// `order_ref` would be there, which Robin Hood order says ends the
    /// search).
    #[inline]
    pub fn probe(&self, order_ref: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = self.home(order_ref);
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
            i = (i + self.step) & mask;
            if s[1] & NEXT_DISPLACED == 0 {
                // Nothing displaced one probe on: `order_ref` is not
                // there, and an insert goes there (empty, or an entry at
                // its home, closer than `order_ref` would be).
                return Err(i);
            }
            d += 1;
        }
    }

    /// Asks the CPU to bring `order_ref`'s home slot into the cache, ahead
    /// of a probe (a hint: changes nothing).
    #[inline(always)]
    pub fn prefetch(&self, order_ref: u64) {
        // One hint: the slots come from the system allocator, whose blocks
        // are 16-byte aligned, so a slot never spans two lines.
        prefetch_prefix(&self.slots[self.home(order_ref)], 1);
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
    #[inline(always)]
    pub fn insert_at(&mut self, slot: usize, order_ref: u64, order: Order) {
        debug_assert!(order.level != 0);
        debug_assert!(self.len + 1 < self.slots.len());
        // Most inserts: an empty home slot, inside what was asked for.
        let home = self.home(order_ref);
        if slot == home && home < self.ahead.ask_at && self.slots[slot][1] >> 32 == 0 {
            self.slots[slot] = [order_ref, pack(order)];
            self.len += 1;
            return;
        }
        self.insert_displacing(slot, home, order_ref, order);
    }

    /// [`OrderTable::insert_at`] past an empty home slot (`home`:
    /// `order_ref`'s).
    #[inline(never)]
    fn insert_displacing(&mut self, slot: usize, home: usize, order_ref: u64, order: Order) {
        // The sweep follows the homes: an order displaced half the table
        // away must not move the stretch asked for past the slots between.
        if home >= self.ahead.ask_at {
            self.ask_ahead(home);
        }
        let mask = self.mask();
        let mut cur = [order_ref, pack(order)];
        let mut d = self.dist(slot, order_ref);
        let mut i = slot;
        loop {
            let s = self.slots[i];
            if s[1] >> 32 == 0 {
                // An empty slot's next probe holds nothing displaced.
                self.slots[i] = cur;
                if d > 0 {
                    self.set_displaced_at(i, true);
                }
                break;
            }
            let ds = self.dist(i, s[0]);
            if d > ds {
                // The slot's own flag (about its next probe) stays; the
                // entry pushed on leaves its flag behind.
                self.slots[i] = [cur[0], cur[1] | s[1] & NEXT_DISPLACED];
                if ds == 0 {
                    self.set_displaced_at(i, true);
                }
                cur = [s[0], s[1] & !NEXT_DISPLACED];
                d = ds;
            }
            i = (i + self.step) & mask;
            d += 1;
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
    /// probe up to the first entry that is at its home (backward shift, no
    /// tombstones).
    ///
    /// Why Robin Hood order: sequential refs make long runs of occupied
    /// slots, each entry at its home. Plain linear probing must then scan
    /// to the end of the run on every removal to be sure no later entry
    /// belongs in the hole (measured, with a step of one: about 0.9 us per
    /// operation with 1M live orders); with Robin Hood order the next entry
    /// being at home ends the shift at once.
    ///
    /// The slot's `NEXT_DISPLACED` flag says whether there is a run to
    /// shift: the next probe, half the table away, is read only then.
    #[inline]
    pub fn remove_at(&mut self, slot: usize) {
        let first = self.slots[slot];
        if first[1] & NEXT_DISPLACED == 0 {
            self.slots[slot] = [0, 0];
            if self.dist(slot, first[0]) > 0 {
                self.set_displaced_at(slot, false);
            }
        } else {
            self.shift_back(slot, first);
        }
        self.len -= 1;
    }

    /// `remove_at` of a slot whose next probe holds a displaced entry:
    /// each displaced entry of the run moves back one probe, and the flag
    /// of the probe before each slot filled follows the distance of the
    /// entry now in it.
    #[cold]
    #[inline(never)]
    fn shift_back(&mut self, slot: usize, removed: [u64; 2]) {
        let mask = self.mask();
        // Whether the probe before the hole flags it (as the removed entry
        // displaced; each moved entry's own slot is written unflagged).
        let mut flagged = self.dist(slot, removed[0]) > 0;
        let mut hole = slot;
        let mut more = removed[1] & NEXT_DISPLACED != 0;
        while more {
            let j = (hole + self.step) & mask;
            let s = self.slots[j];
            let displaced = self.dist(j, s[0]) > 1;
            more = s[1] & NEXT_DISPLACED != 0;
            self.slots[hole] = [s[0], s[1] & !NEXT_DISPLACED];
            if displaced != flagged {
                self.set_displaced_at(hole, displaced);
            }
            flagged = false;
            hole = j;
        }
        self.slots[hole] = [0, 0];
        if flagged {
            self.set_displaced_at(hole, false);
        }
    }

    /// Slot `i` now holds an entry away from its home (`displaced`) or
    /// not: its previous probe's flag says so.
    #[inline(never)]
    #[cold]
    fn set_displaced_at(&mut self, i: usize, displaced: bool) {
        let prev = i.wrapping_sub(self.step) & self.mask();
        if displaced {
            self.slots[prev][1] |= NEXT_DISPLACED;
        } else {
            self.slots[prev][1] &= !NEXT_DISPLACED;
        }
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
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s[1] >> 32 != 0)
            .map(|(i, s)| self.dist(i, s[0]) as u64)
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
        assert_eq!(OrderTable::<Sequential>::new(0).capacity(), 4);
        assert_eq!(OrderTable::<Sequential>::new(1).capacity(), 4);
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

    /// Within a run (along the probe sequence), an entry is at most one
    /// probe further from its home than the one before it (what lets
    /// lookups and deletions stop early).
    fn robin_hood_order<H: RefHash>(t: &OrderTable<H>) {
        let n = t.slots.len();
        for i in 0..n {
            let j = (i + t.step) % n;
            let (a, b) = (t.slots[i], t.slots[j]);
            if a[1] >> 32 != 0 && b[1] >> 32 != 0 {
                assert!(t.dist(j, b[0]) <= t.dist(i, a[0]) + 1, "slot {i}");
            } else if b[1] >> 32 != 0 {
                assert_eq!(t.dist(j, b[0]), 0, "run starts away from home");
            }
            if a[1] >> 32 == 0 {
                assert_eq!(a, [0, 0], "an empty slot is all zeros");
            }
            let displaced = b[1] >> 32 != 0 && t.dist(j, b[0]) > 0;
            assert_eq!(a[1] & NEXT_DISPLACED != 0, displaced, "flag of slot {i}");
        }
    }

    /// The step visits every slot once per lap, and a slot's distance is
    /// the number of steps from the home to it.
    #[test]
    fn the_step_visits_every_slot_and_dist_counts_steps() {
        for max in [1usize, 3, 5, 40, 700] {
            let t = OrderTable::<Sequential>::new(max);
            let n = t.capacity();
            assert_eq!(t.step % 2, 1, "odd step for {n} slots");
            let home = 3 % n;
            let mut seen = vec![false; n];
            let mut i = home;
            for d in 0..n {
                assert!(!seen[i], "slot {i} visited twice");
                seen[i] = true;
                assert_eq!(t.dist(i, home as u64), d);
                i = (i + t.step) % n;
            }
        }
    }

    /// References that wrap around the table many times, a few orders
    /// living several laps and the rest briefly, as on a day of more adds
    /// than slots: each long-lived order displaces at most the reference
    /// that meets it once a lap, instead of starting a train in which every
    /// later add is displaced and every removal shifts the train's rest.
    /// (With a step of one slot this test counts thousands of probes; with
    /// the long step, at most a few per long-lived order.)
    #[test]
    fn wrapped_references_do_not_displace_the_orders_after_them() {
        let mut t = OrderTable::<Sequential>::new(700); // 2048 slots
        let n = t.capacity() as u64;
        let mut model: HashMap<u64, Order> = HashMap::new();
        let mut recent = std::collections::VecDeque::new();
        let mut probes = 0u64;
        let mut long_lived = 0u64;
        for r in 1..20 * n {
            let slot = t.probe(r).unwrap_err();
            t.insert_at(slot, r, o(r as u32, 1));
            model.insert(r, o(r as u32, 1));
            if r % 97 == 0 && long_lived < 400 {
                long_lived += 1; // never removed
                continue;
            }
            recent.push_back(r);
            if recent.len() > 300 {
                let old = recent.pop_front().expect("not empty");
                t.remove_at(t.probe(old).expect("live"));
                model.remove(&old);
            }
            probes += t.total_displacement();
            if r % 1024 == 0 {
                robin_hood_order(&t);
            }
        }
        assert_eq!(t.len(), model.len());
        for (r, v) in &model {
            assert_eq!(t.get(*r), Some(*v));
        }
        assert_eq!(long_lived, 400, "orders live for laps");
        // Summed over every add: on average at most one displaced order
        // per two long-lived ones at any moment.
        let per_add = probes as f64 / (20 * n) as f64;
        assert!(
            per_add < long_lived as f64 / 2.0,
            "{per_add} probes of displacement on average, {long_lived} long-lived orders"
        );
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
