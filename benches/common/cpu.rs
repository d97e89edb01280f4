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

/// CPU time every process on the machine spent busy so far (user, system,
/// interrupts; `/proc/stat`'s first line, in its 10 ms ticks), ns. `nice`
/// time is left out on purpose, so a niced build beside a bench does not
/// count, while a database server's backends (not niced) do. Zero where
/// `/proc/stat` cannot be read.
pub fn machine_busy_ns() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
    let busy = at(0) + at(2) + at(5) + at(6);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    busy * 1_000_000_000 / hz
}
