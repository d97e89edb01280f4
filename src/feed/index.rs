//! Symbol -> dense slot index: open addressing with linear probing over a
//! table sized once (>= 2x capacity), so lookups and inserts never allocate
//! or rehash on the hot path. Keys are the 8 symbol bytes as a u64.

use crate::wire::Symbol;

const EMPTY: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct SymbolIndex {
    /// (key, slot) side by side: one cache line per probe.
    entries: Box<[(u64, u32)]>,
    mask: usize,
    shift: u32,
    len: usize,
    capacity: usize,
}

impl SymbolIndex {
    /// Room for `capacity` symbols (capped below u32::MAX).
    pub fn with_capacity(capacity: usize) -> SymbolIndex {
        let capacity = capacity.min(u32::MAX as usize - 1);
        let size = (capacity.max(4) * 2).next_power_of_two();
        SymbolIndex {
            entries: vec![(0, EMPTY); size].into_boxed_slice(),
            mask: size - 1,
            shift: 64 - size.trailing_zeros(),
            len: 0,
            capacity,
        }
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
    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: the top bits of key * 2^64/phi depend on every
        // byte of the symbol.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    pub fn get(&self, symbol: Symbol) -> Option<u32> {
        let key = symbol.key();
        let mut i = self.home(key);
        loop {
            let (k, slot) = self.entries[i];
            if slot == EMPTY {
                return None;
            }
            if k == key {
                return Some(slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The symbol's slot, or `Err(true)` when absent and the table is full;
    /// `Err(false)` when absent and `new_slot` was inserted.
    #[inline]
    pub fn get_or_insert(&mut self, symbol: Symbol, new_slot: u32) -> Result<u32, bool> {
        let key = symbol.key();
        let mut i = self.home(key);
        loop {
            let (k, slot) = self.entries[i];
            if slot == EMPTY {
                if self.len >= self.capacity {
                    return Err(true);
                }
                self.entries[i] = (key, new_slot);
                self.len += 1;
                return Err(false);
            }
            if k == key {
                return Ok(slot);
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_and_full() {
        let mut ix = SymbolIndex::with_capacity(3);
        let s = |n: &str| Symbol::parse(n).unwrap();
        assert_eq!(ix.get(s("A")), None);
        assert_eq!(ix.get_or_insert(s("A"), 0), Err(false));
        assert_eq!(ix.get_or_insert(s("B"), 1), Err(false));
        assert_eq!(ix.get_or_insert(s("A"), 7), Ok(0));
        assert_eq!(ix.get_or_insert(Symbol([0; 8]), 2), Err(false));
        assert_eq!(ix.get_or_insert(s("C"), 3), Err(true));
        assert_eq!(ix.get(Symbol([0; 8])), Some(2));
        assert_eq!(ix.get(s("B")), Some(1));
        assert_eq!(ix.get(s("C")), None);
        assert_eq!(ix.len(), 3);
    }

    #[test]
    fn many_keys() {
        let mut ix = SymbolIndex::with_capacity(10_000);
        for i in 0..10_000u32 {
            let sym = Symbol::parse(&format!("S{i}")).unwrap();
            assert_eq!(ix.get_or_insert(sym, i), Err(false));
        }
        for i in 0..10_000u32 {
            let sym = Symbol::parse(&format!("S{i}")).unwrap();
            assert_eq!(ix.get(sym), Some(i));
        }
    }
}
