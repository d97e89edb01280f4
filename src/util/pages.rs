//! Memory for large tables: zeroed tables whose untouched pages are never
//! resident ([`filled`], [`Zeroed`]), and hints for those read at random
//! (the ITCH books' order table, level pool, per-locate books and level
//! cache, in replay: docs/venues.md "Tables in replay"). Backed by 2 MiB
//! pages, a random probe needs one TLB entry per 2 MiB instead of one per
//! 4 KiB, so the probes of a 256 MiB table stop missing the TLB as well as
//! the cache; populated ahead of use, a table's first writes take no page
//! fault. The hints read and write nothing, and where the kernel declines
//! (transparent huge pages off, an older kernel, another system) the
//! memory stays as it was.

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

/// A `T` of all-zero bytes in an anonymous mapping of its own: pages
/// never touched are never resident, and the mapping is page-aligned, so
/// an alignment of up to 4 KiB costs nothing. (The system allocator
/// serves a zeroed block aligned beyond 16 bytes with an aligned malloc
/// and a memset, making every page of it resident at once.)
pub struct Zeroed<T> {
    ptr: std::ptr::NonNull<T>,
}

// SAFETY: `Zeroed<T>` owns its `T` as a `Box<T>` does.
unsafe impl<T: Send> Send for Zeroed<T> {}
// SAFETY: as above; shared access only hands out `&T`.
unsafe impl<T: Sync> Sync for Zeroed<T> {}

impl<T> Zeroed<T> {
    /// A fresh zeroed `T`.
    ///
    /// # Safety
    ///
    /// All-zero bytes must be a valid `T`.
    pub unsafe fn new() -> Zeroed<T> {
        let layout = std::alloc::Layout::new::<T>();
        assert!(
            layout.size() > 0 && layout.align() <= PAGE,
            "a mapping holds a sized, at most page-aligned value"
        );
        // SAFETY: a fresh private anonymous mapping chosen by the kernel
        // (addr null); it aliases nothing, and the kernel fills it with
        // zeros. The result is checked for MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        match std::ptr::NonNull::new(p.cast::<T>()) {
            Some(ptr) if p != libc::MAP_FAILED => Zeroed { ptr },
            _ => std::alloc::handle_alloc_error(layout),
        }
    }
}

impl<T> std::ops::Deref for Zeroed<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: `ptr` is valid, aligned and initialised (zeros, a valid
        // `T` by `new`'s contract) until `self` is dropped.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> std::ops::DerefMut for Zeroed<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> Drop for Zeroed<T> {
    fn drop(&mut self) {
        // SAFETY: the value is dropped in place once, then its mapping
        // (made by `new` with this size) is removed; nothing refers to it
        // afterwards.
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            libc::munmap(self.ptr.as_ptr().cast(), std::mem::size_of::<T>());
        }
    }
}

/// A range of a process's memory, by address: what a table asks a helper
/// thread to make resident ([`populate_range`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRange {
    pub addr: usize,
    pub len: usize,
}

impl MemRange {
    /// The memory of `slice`.
    pub fn of<T>(slice: &[T]) -> MemRange {
        MemRange {
            addr: slice.as_ptr() as usize,
            len: std::mem::size_of_val(slice),
        }
    }

    /// The smallest range that covers both.
    pub fn hull(self, other: MemRange) -> MemRange {
        let addr = self.addr.min(other.addr);
        let end = (self.addr + self.len).max(other.addr + other.len);
        MemRange {
            addr,
            len: end - addr,
        }
    }
}

/// Makes every page of `range` resident and writable now
/// (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14 and later), so that the
/// first writes to it take no page fault; the bytes stay as they are. A
/// hint: where the kernel declines, pages fault in as they are touched.
/// Safe from any thread, and on a range that no longer belongs to the
/// table that asked for it (a table freed meanwhile): the advice changes
/// no byte of what it reaches, and fails on memory not mapped writable.
pub fn populate_range(range: MemRange) {
    populate_bytes(range.addr as *mut u8, range.len);
}

#[cfg(target_os = "linux")]
fn populate_bytes(ptr: *mut u8, len: usize) {
    advise_whole(ptr, len, PAGE, libc::MADV_POPULATE_WRITE);
}

#[cfg(not(target_os = "linux"))]
fn populate_bytes(_ptr: *mut u8, _len: usize) {}

const HUGE: usize = 2 << 20;

/// The base page size on x86-64 (where a system has larger pages, the
/// kernel declines a hint whose range is not aligned to them).
const PAGE: usize = 4096;

#[cfg(target_os = "linux")]
fn advise_huge_bytes(ptr: *const u8, len: usize) {
    advise_whole(ptr, len, HUGE, libc::MADV_HUGEPAGE);
}

/// `madvise(advice)` over the `granule`-aligned blocks wholly inside the
/// range: the hint must not reach memory that belongs to something else.
/// For the advice given here (huge pages, populating for writing), which
/// read and write no byte of the range; where the kernel declines, the
/// memory stays as it was.
#[cfg(target_os = "linux")]
fn advise_whole(ptr: *const u8, len: usize, granule: usize, advice: libc::c_int) {
    let start = (ptr as usize).next_multiple_of(granule);
    let end = (ptr as usize).saturating_add(len) & !(granule - 1);
    if end <= start {
        return;
    }
    // SAFETY: the advice given by this module's callers changes no byte
    // (see above); the range lies inside an allocation this process owns.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, advice);
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
        populate_range(MemRange::of(&big[1..]));
        assert_eq!(big[12345], 9);
        assert_eq!(big.iter().filter(|&&v| v != 0).count(), 1);
        let filled = filled([0u64, 5], 1 << 18, true);
        assert_eq!(filled.len(), 1 << 18);
        assert!(filled.iter().all(|&v| v == [0, 5]));
    }

    /// An over-aligned zeroed table: every element zero, writable, aligned,
    /// and only the pages written become resident.
    #[test]
    fn zeroed_tables_are_resident_only_where_written() {
        #[derive(Clone, Copy)]
        #[repr(C, align(64))]
        struct Line([u64; 8]);
        const N: usize = (8 << 20) / 64;
        // SAFETY: a Line of zero bytes is a valid Line.
        let mut t = unsafe { Zeroed::<[Line; N]>::new() };
        assert_eq!(t.as_ptr() as usize % 64, 0);
        t[N / 2].0[3] = 7;
        let page = PAGE;
        let pages = (8 << 20) / page;
        let mut resident = vec![0u8; pages];
        // SAFETY: the range is the mapping `t` owns (page-aligned, its
        // whole size); mincore only writes the vector of `pages` bytes.
        let rc =
            unsafe { libc::mincore(t.as_mut_ptr().cast(), pages * page, resident.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // One page written: one resident (a 2 MiB page where transparent
        // huge pages are always on), not the whole table.
        let written = resident.iter().filter(|&&r| r & 1 == 1).count();
        assert!(
            (1..=512).contains(&written),
            "{written} of {pages} pages resident"
        );
        // (Read after the count: reading maps the shared zero page, which
        // mincore reports as resident.)
        assert_eq!(t[N / 2].0[3], 7);
        assert_eq!(t.iter().filter(|l| l.0 != [0; 8]).count(), 1);
        drop(t);
    }
}
