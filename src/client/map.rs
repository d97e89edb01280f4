//! A file mapped into memory as atomic words: read-only for clients,
//! read-write for the daemon that publishes it. The only `unsafe` of the
//! shared-memory path is here: `mmap`, `munmap`, and viewing the mapping
//! as `[AtomicU64]`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::feed::table::WordStore;

/// Largest file mapped (a typo'd or hostile size must not map terabytes).
pub const MAX_BYTES: u64 = 1 << 36;

/// A whole file mapped `MAP_SHARED`. Unmapped on drop; the words are
/// shared with every process mapping the same file.
pub struct Mapping {
    ptr: NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: the mapping is plain memory accessed only through `AtomicU64`
// (which is Sync); the pointer is owned by this value and valid until drop.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared access is atomic loads and stores only.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all of `file` read-only. Its size must be a non-zero multiple
    /// of 8 bytes and at most `MAX_BYTES`.
    pub fn read_only(file: &File) -> io::Result<Mapping> {
        let len = file.metadata()?.len();
        if len == 0 || !len.is_multiple_of(8) || len > MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("file size {len} is not a state file's (a multiple of 8 bytes, at most {MAX_BYTES})"),
            ));
        }
        Self::map(file, len as usize, libc::PROT_READ)
    }

    /// Sizes `file` (new and empty) to `bytes` (a multiple of 8) and maps
    /// it read-write; the words start zeroed.
    pub fn create(file: &File, bytes: usize) -> io::Result<Mapping> {
        if bytes == 0 || !bytes.is_multiple_of(8) || bytes as u64 > MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot map {bytes} bytes as words"),
            ));
        }
        file.set_len(bytes as u64)?;
        Self::map(file, bytes, libc::PROT_READ | libc::PROT_WRITE)
    }

    fn map(file: &File, bytes: usize, prot: libc::c_int) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel (addr null) of a
        // file descriptor we hold open; it aliases no Rust object. The
        // result is checked for MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<AtomicU64>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Mapping {
            ptr,
            words: bytes / 8,
        })
    }
}

impl WordStore for Mapping {
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is page-aligned (so 8-aligned) and valid for
        // `words * 8` bytes until `self` is dropped (the borrow ties the
        // slice to `self`). Other processes write these bytes concurrently,
        // which is why they are only ever accessed as `AtomicU64` (lock-free
        // 64-bit loads and stores on every supported target; a read-only
        // mapping is only ever loaded from, never written or
        // compare-exchanged, so PROT_READ does not fault). `AtomicU64` has
        // the size and alignment of `u64`, and any bit pattern is valid.
        // The file cannot shrink under us unless someone with write access
        // truncates it (docs/shm.md, security model).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `map` with this length and is
        // unmapped once; no slice from `words()` outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.words * 8);
        }
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("bytes", &(self.words * 8))
            .finish()
    }
}
