//! The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): what a loop
//! cost, whatever else the machine was doing.

/// The calling thread's CPU time so far, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is one
    // Linux supports for every thread.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
