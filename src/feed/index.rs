//! Symbol -> dense slot index: open addressing with linear probing over a
//! table kept at most a quarter full. It starts small and doubles when a
//! new symbol would fill it past a quarter, up to 4x capacity: a table
//! sized to the symbols in use stays in cache (1,000 symbols use 32 KB
//! where a table sized for `max_symbols` = 100,000 would spread them over
//! 4 MB), and only a new symbol can allocate, log2(capacity) times in all.
//! A bucket holds the slot and 32 bits of the symbol's hash: the key is
//! compared in the slot's own state (which the caller touches next
//! anyway) only when the hash bits match, so a lookup touches one state,
//! however long its probe.

use crate::wire::Symbol;

const EMPTY: u32 = u32::MAX;

/// Buckets of a new table (room for a quarter as many symbols before it
/// first doubles): 8 KB.
const INITIAL_BUCKETS: usize = 1024;

/// The table holds at most one symbol in `MAX_LOAD` buckets. With linear
/// probing a lookup of a known symbol takes about 1.17 probes at a quarter
/// full and 1.5 at half full (Knuth's estimate); a probe past the home
/// bucket is a branch the CPU cannot predict, which cost more than the
/// larger table (BENCHMARKS.md, "The stall behind it").
const MAX_LOAD: usize = 4;

/// A slot and the top 32 bits of its symbol's hash.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(8))]
struct Bucket {
    slot: u32,
    tag: u32,
}

const VACANT: Bucket = Bucket {
    slot: EMPTY,
    tag: 0,
};

/// Outcome of `SymbolIndex::find_or_insert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    Found(u32),
    /// Not present; `new_slot` was recorded for it.
    Inserted,
    /// Not present and the index is full.
    Full,
}

#[derive(Clone, Debug)]
pub struct SymbolIndex {
    slots: Box<[Bucket]>,
    mask: usize,
    shift: u32,
    len: usize,
    capacity: usize,
    /// Buckets of the largest table: 4x capacity, a power of two.
    max_buckets: usize,
}

impl SymbolIndex {
    /// Room for `capacity` symbols (capped below u32::MAX).
    pub fn with_capacity(capacity: usize) -> SymbolIndex {
        let capacity = capacity.min(u32::MAX as usize - 1);
        let max_buckets = (capacity.max(4) * MAX_LOAD).next_power_of_two();
        let size = max_buckets.min(INITIAL_BUCKETS);
        SymbolIndex {
            slots: vec![VACANT; size].into_boxed_slice(),
            mask: size - 1,
            shift: 64 - size.trailing_zeros(),
            len: 0,
            capacity,
            max_buckets,
        }
    }

    /// Buckets of the table now.
    pub fn buckets(&self) -> usize {
        self.slots.len()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn home(&self, symbol: Symbol) -> usize {
        self.place(symbol.hash64())
    }

    /// The home bucket of a hash: its top bits, which depend on every byte
    /// of the symbol.
    #[inline]
    fn place(&self, hash: u64) -> usize {
        (hash >> self.shift) as usize
    }

    #[inline]
    fn tag(hash: u64) -> u32 {
        (hash >> 32) as u32
    }

    /// Prefetch hint for `symbol`'s home bucket (see `util::prefetch`).
    #[inline]
    pub fn prefetch(&self, symbol: Symbol) {
        super::prefetch::prefetch(&self.slots[self.home(symbol)]);
    }

    /// The slot in `symbol`'s home bucket, without comparing keys (that
    /// would touch the slot's state, the very miss a prefetch avoids): the
    /// symbol's own slot unless it collided, then another symbol's. Only a
    /// prefetch hint; `None` when the bucket is empty.
    #[inline]
    pub fn home_slot(&self, symbol: Symbol) -> Option<u32> {
        let slot = self.slots[self.home(symbol)].slot;
        (slot != EMPTY).then_some(slot)
    }

    /// The slot of `symbol`; `key_of(slot)` gives the symbol stored there.
    #[inline]
    pub fn get<'k>(&self, symbol: Symbol, key_of: impl Fn(u32) -> &'k Symbol) -> Option<u32> {
        let hash = symbol.hash64();
        let tag = Self::tag(hash);
        let mut i = self.place(hash);
        loop {
            let b = self.slots[i];
            if b.slot == EMPTY {
                return None;
            }
            if b.tag == tag && *key_of(b.slot) == symbol {
                return Some(b.slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The slot of `symbol`, or records `new_slot` for it when absent and
    /// there is room.
    #[inline]
    pub fn find_or_insert<'k>(
        &mut self,
        symbol: Symbol,
        new_slot: u32,
        key_of: impl Fn(u32) -> &'k Symbol,
    ) -> Slot {
        let hash = symbol.hash64();
        let tag = Self::tag(hash);
        let mut i = self.place(hash);
        loop {
            let b = self.slots[i];
            if b.slot == EMPTY {
                if self.len >= self.capacity {
                    return Slot::Full;
                }
                if (self.len + 1) * MAX_LOAD > self.slots.len()
                    && self.slots.len() < self.max_buckets
                {
                    self.grow(&key_of);
                    i = self.vacancy(hash);
                }
                self.slots[i] = Bucket {
                    slot: new_slot,
                    tag,
                };
                self.len += 1;
                return Slot::Inserted;
            }
            if b.tag == tag && *key_of(b.slot) == symbol {
                return Slot::Found(b.slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Twice the buckets, every slot placed again by its key.
    #[cold]
    #[inline(never)]
    fn grow<'k>(&mut self, key_of: &impl Fn(u32) -> &'k Symbol) {
        let size = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![VACANT; size].into_boxed_slice());
        self.mask = size - 1;
        self.shift = 64 - size.trailing_zeros();
        for b in old.iter().filter(|b| b.slot != EMPTY) {
            let i = self.vacancy(key_of(b.slot).hash64());
            self.slots[i] = *b;
        }
    }

    /// The first empty bucket from a hash's home.
    fn vacancy(&self, hash: u64) -> usize {
        let mut i = self.place(hash);
        while self.slots[i].slot != EMPTY {
            i = (i + 1) & self.mask;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_and_full() {
        let mut ix = SymbolIndex::with_capacity(3);
        let mut keys: Vec<Symbol> = Vec::new();
        let s = |n: &str| Symbol::parse(n).unwrap();
        let add = |ix: &mut SymbolIndex, keys: &mut Vec<Symbol>, sym: Symbol| {
            let r = ix.find_or_insert(sym, keys.len() as u32, |i| &keys[i as usize]);
            if r == Slot::Inserted {
                keys.push(sym);
            }
            r
        };
        assert_eq!(add(&mut ix, &mut keys, s("A")), Slot::Inserted);
        assert_eq!(add(&mut ix, &mut keys, s("B")), Slot::Inserted);
        assert_eq!(add(&mut ix, &mut keys, s("A")), Slot::Found(0));
        assert_eq!(
            add(&mut ix, &mut keys, Symbol::from_wire([0; 8])),
            Slot::Inserted
        );
        assert_eq!(add(&mut ix, &mut keys, s("C")), Slot::Full);
        assert_eq!(
            ix.get(Symbol::from_wire([0; 8]), |i| &keys[i as usize]),
            Some(2)
        );
        assert_eq!(ix.get(s("B"), |i| &keys[i as usize]), Some(1));
        assert_eq!(ix.get(s("C"), |i| &keys[i as usize]), None);
        assert_eq!(ix.len(), 3);
    }

    #[test]
    fn many_keys_including_first_byte_only_differences() {
        let mut ix = SymbolIndex::with_capacity(20_000);
        let mut keys: Vec<Symbol> = Vec::new();
        let names = (0..10_000u32).map(|i| format!("S{i}")).chain(
            (0..10_000u32).map(|i| format!("{}{}XYZ", (b'A' + (i % 26) as u8) as char, i / 26)),
        );
        for n in names {
            let sym = Symbol::parse(&n).unwrap();
            let r = ix.find_or_insert(sym, keys.len() as u32, |i| &keys[i as usize]);
            assert_eq!(r, Slot::Inserted, "{n}");
            keys.push(sym);
        }
        for (i, sym) in keys.iter().enumerate() {
            assert_eq!(ix.get(*sym, |j| &keys[j as usize]), Some(i as u32));
        }
        assert_eq!(ix.buckets(), 131_072, "grown to 4x capacity, no further");
    }

    /// Two symbols whose hashes agree in their top 32 bits (the bucket's
    /// tag) are still told apart by their keys.
    #[test]
    fn equal_tags_are_told_apart_by_the_key() {
        let mut seen = std::collections::HashMap::new();
        let (a, b) = (0u32..)
            .map(|i| Symbol::parse(&format!("T{i}")).unwrap())
            .find_map(|s| {
                let tag = SymbolIndex::tag(s.hash64());
                seen.insert(tag, s).map(|other| (other, s))
            })
            .unwrap();
        let mut ix = SymbolIndex::with_capacity(4);
        let keys = [a, b];
        assert_eq!(
            ix.find_or_insert(a, 0, |i| &keys[i as usize]),
            Slot::Inserted
        );
        assert_eq!(
            ix.find_or_insert(b, 1, |i| &keys[i as usize]),
            Slot::Inserted
        );
        assert_eq!(ix.get(a, |i| &keys[i as usize]), Some(0));
        assert_eq!(ix.get(b, |i| &keys[i as usize]), Some(1));
    }

    #[test]
    fn the_table_grows_with_the_symbols_in_use() {
        let mut ix = SymbolIndex::with_capacity(100_000);
        let mut keys: Vec<Symbol> = Vec::new();
        assert_eq!(ix.buckets(), INITIAL_BUCKETS);
        for n in 0..1_000u32 {
            let sym = Symbol::parse(&format!("S{n:05}")).unwrap();
            assert_eq!(
                ix.find_or_insert(sym, n, |i| &keys[i as usize]),
                Slot::Inserted
            );
            keys.push(sym);
            assert!(
                ix.len() * MAX_LOAD <= ix.buckets(),
                "at most a quarter full"
            );
        }
        assert_eq!(ix.buckets(), 4_096);
        for (i, sym) in keys.iter().enumerate() {
            let found = ix.find_or_insert(*sym, u32::MAX, |j| &keys[j as usize]);
            assert_eq!(found, Slot::Found(i as u32));
        }
        // A small capacity is its own limit: the table never outgrows it.
        let small = SymbolIndex::with_capacity(3);
        assert_eq!(small.buckets(), 16);
    }
}
