//! Cache prefetch hints for the feed thread's hot path. A hint changes no
//! state and cannot fault, so calling it early (on a datagram a few places
//! ahead of the one being applied) is invisible except in time: with
//! 100,000 symbols the symbol index, the symbol's state and its table slot
//! each miss the cache on almost every datagram otherwise.

/// Asks the CPU to bring the cache lines of `*r` into L1 (a no-op on other
/// architectures).
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    // An object no larger than its alignment (and at most a line) never
    // spans two lines: one hint. Decided from the type, at compile time.
    if std::mem::size_of::<T>() <= std::mem::align_of::<T>() && std::mem::align_of::<T>() <= 64 {
        hint((r as *const T).cast::<u8>());
        return;
    }
    prefetch_prefix(r, std::mem::size_of::<T>());
}

/// The same for the first `size` bytes of `*r` only (at most its size).
#[inline(always)]
pub fn prefetch_prefix<T>(r: &T, size: usize) {
    let start = (r as *const T).cast::<u8>();
    let size = size.min(std::mem::size_of::<T>());
    // One hint per line the object spans (the last byte's line included,
    // whatever the alignment); the loop is unrolled for a constant size.
    let mut off = 0;
    while off < size {
        hint(start.wrapping_add(off));
        off += 64;
    }
    if size > 1 {
        hint(start.wrapping_add(size - 1));
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn hint(p: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: PREFETCHT0 is only a hint: it never faults and writes
    // nothing, whatever the address (and `p` points into a live object).
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn hint(_p: *const u8) {}
