//! SIGINT and SIGTERM as a flag, for the long-running commands (`record`,
//! `replay --send`, `simulate --live`) that stop cleanly on them.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP_SIGNAL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_SIGNAL.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set the returned flag instead of killing the
/// process, so that long-running commands stop cleanly (files flushed,
/// counts printed).
pub fn stop_on_signals() -> &'static AtomicBool {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        let h = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
    }
    &STOP_SIGNAL
}
