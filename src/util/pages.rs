//! Memory hints for large tables read at random (the ITCH books' order
//! table, level pool, per-locate books and level cache, in replay:
//! docs/venues.md "Huge pages"): backed by 2 MiB pages, a random probe
//! needs one TLB entry per 2 MiB instead of one per 4 KiB, so the probes
//! of a 256 MiB table stop missing the TLB as well as the cache.
//! A hint only: nothing is read or written, and where the kernel declines
//! (transparent huge pages off, or another system) the memory stays as it
//! was.

/// Asks that the whole 2 MiB pages inside `slice`'s memory be backed by
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`; Linux only, where the
/// system's setting is `always` or `madvise`). Pages already touched keep
/// their size until the kernel collapses them; call it before filling.
pub fn advise_huge<T>(slice: &[T]) {
    advise_huge_bytes(slice.as_ptr().cast(), std::mem::size_of_val(slice));
}

/// [`advise_huge`] for the `capacity` elements reserved from `ptr` (a
/// `Vec`'s spare capacity, filled later).
pub fn advise_huge_reserved<T>(ptr: *const T, capacity: usize) {
    advise_huge_bytes(
        ptr.cast(),
        capacity.saturating_mul(std::mem::size_of::<T>()),
    );
}

/// `vec![elem; len]` (a calloc where `elem` is all zeros: untouched pages
/// are never resident), advised onto huge pages when `huge_pages`.
pub fn filled<T: Clone>(elem: T, len: usize, huge_pages: bool) -> Vec<T> {
    let v = vec![elem; len];
    if huge_pages {
        advise_huge(&v);
    }
    v
}

const HUGE: usize = 2 << 20;

#[cfg(target_os = "linux")]
fn advise_huge_bytes(ptr: *const u8, len: usize) {
    // Only the 2 MiB pages wholly inside the range: the hint must not
    // reach memory that belongs to something else.
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize).saturating_add(len) & !(HUGE - 1);
    if end <= start {
        return;
    }
    // SAFETY: madvise with MADV_HUGEPAGE reads and writes no memory; the
    // range lies inside an allocation this process owns.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_bytes(_ptr: *const u8, _len: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range too small for a whole huge page, an empty one and a large
    /// one are all accepted, the hint changes no byte, and `filled` holds
    /// its element everywhere.
    #[test]
    fn hints_change_no_memory() {
        advise_huge::<u64>(&[]);
        let small = vec![7u8; 1000];
        advise_huge(&small[1..]);
        let mut big = vec![0u64; (6 << 20) / 8];
        big[12345] = 9;
        advise_huge(&big);
        assert_eq!(big[12345], 9);
        assert_eq!(big.iter().filter(|&&v| v != 0).count(), 1);
        let mut reserved: Vec<u32> = Vec::with_capacity(3 << 20);
        advise_huge_reserved(reserved.as_ptr(), reserved.capacity());
        reserved.extend(0..1000);
        assert_eq!(reserved[999], 999);
        assert!(small.iter().all(|&b| b == 7));
        let filled = filled([0u64, 5], 1 << 18, true);
        assert_eq!(filled.len(), 1 << 18);
        assert!(filled.iter().all(|&v| v == [0, 5]));
    }
}
