//! A background thread that polls a stop flag, stopped and joined when
//! asked or dropped: the one shape of the servers and clients that must not
//! outlive their owner.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct StoppableThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StoppableThread {
    /// Starts thread `name` running `body` with the stop flag, which it
    /// must poll (and may hand to threads of its own).
    pub fn spawn(
        name: String,
        body: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) -> io::Result<StoppableThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(flag))?;
        Ok(StoppableThread {
            stop,
            thread: Some(thread),
        })
    }

    /// Raises the flag without waiting (a group of threads is told first,
    /// then joined, so that they wind down together).
    pub fn signal(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Raises the flag and waits for the thread (once; later calls return
    /// at once).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for StoppableThread {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn stop_raises_the_flag_and_joins() {
        let ticks = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&ticks);
        let mut t = StoppableThread::spawn("stoppable-test".into(), move |stop| {
            while !stop.load(Ordering::Relaxed) {
                seen.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
            seen.store(u64::MAX, Ordering::Relaxed);
        })
        .unwrap();
        t.stop();
        assert_eq!(
            ticks.load(Ordering::Relaxed),
            u64::MAX,
            "joined after the body ended"
        );
        t.stop();
    }
}
