//! The replay's helper thread (I/O shell): it has the kernel make table
//! memory resident ahead of the message loop, on the other core, so that
//! the loop does not stop at each new page while the kernel zeroes it
//! (docs/venues.md, "Tables in replay"). It reads and writes none of the
//! tables' bytes: it only passes the ranges the tables asked for to
//! `madvise(MADV_POPULATE_WRITE)`.

use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::util::pages::{populate_range, MemRange};

/// See the module documentation. Dropping it waits for the range being
/// made resident, if any, and ends the thread.
pub struct Populator {
    tx: Option<Sender<MemRange>>,
    thread: Option<JoinHandle<()>>,
}

impl Populator {
    /// The helper thread, or `None` if the system will not start one (the
    /// loop then takes its page faults itself, as a live feed does).
    pub fn spawn() -> Option<Populator> {
        let (tx, rx) = crossbeam_channel::unbounded::<MemRange>();
        let thread = std::thread::Builder::new()
            .name("tickgate-populate".into())
            .spawn(move || {
                for range in rx {
                    populate_range(range);
                }
            });
        match thread {
            Ok(thread) => Some(Populator {
                tx: Some(tx),
                thread: Some(thread),
            }),
            Err(e) => {
                tracing::debug!(error = %e, "no helper thread for the tables' pages");
                None
            }
        }
    }

    /// Has `range` made resident, soon, on the helper thread.
    pub fn ask(&self, range: MemRange) {
        if let Some(tx) = &self.tx {
            // The thread outlives the sender; a send cannot fail.
            let _ = tx.send(range);
        }
    }
}

impl Drop for Populator {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages asked for become resident, their bytes unchanged, and the
    /// helper ends when dropped.
    #[test]
    fn asked_pages_become_resident() {
        const LEN: usize = 8 << 20;
        // SAFETY: all zeros is a valid byte array.
        let table = unsafe { crate::util::pages::Zeroed::<[u8; LEN]>::new() };
        let p = table.as_ptr() as *mut libc::c_void;
        // 4 KiB pages whatever the system's huge-page setting, so that
        // exactly the pages asked for become resident.
        // SAFETY: advice on the table's own mapping; it changes no byte.
        unsafe { libc::madvise(p, LEN, libc::MADV_NOHUGEPAGE) };
        let resident = || {
            let mut v = vec![0u8; LEN / 4096];
            // SAFETY: `p` is the table's live mapping of LEN bytes; one
            // byte a page.
            assert_eq!(unsafe { libc::mincore(p, LEN, v.as_mut_ptr()) }, 0);
            v.iter().filter(|&&b| b & 1 == 1).count()
        };
        assert_eq!(resident(), 0);
        let populator = Populator::spawn().expect("a thread");
        populator.ask(MemRange {
            addr: p as usize + (2 << 20),
            len: 4 << 20,
        });
        drop(populator);
        assert_eq!(resident(), 1024, "the 4 MiB asked for, no more");
        assert!(table.iter().all(|&b| b == 0));
    }
}
