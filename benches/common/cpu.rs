//! CPU-time readings shared by the benches: on a shared machine wall time
//! includes waiting for a core, CPU time does not.

// Each bench uses part of this.
#![allow(dead_code)]

/// `getrusage(who)` (`libc::RUSAGE_SELF`, `libc::RUSAGE_THREAD`).
pub fn rusage(who: i32) -> libc::rusage {
    // SAFETY: plain syscall filling a zeroed struct.
    unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut r);
        r
    }
}

/// User + system CPU time of this process so far (every thread, exited
/// ones included), ns.
pub fn process_cpu_ns() -> u64 {
    let r = rusage(libc::RUSAGE_SELF);
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(r.ru_utime) + us(r.ru_stime)) * 1000
}
