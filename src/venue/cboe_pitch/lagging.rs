//! Lagging copies after a restart (venues.md `cboe-pitch`, Sessions): for
//! `max_hole_ms` after a unit's restart by rule 4, a datagram of the unit
//! byte-identical to one that the replaced session processed in its last
//! `max_hole_ms` is a lagging line's copy of the replaced session: dropped
//! and counted (C5), never a hole.
//!
//! Each unit keeps the bytes of its latest datagrams in a ring of fixed
//! slots, allocated once with the unit: recording one is a copy, never an
//! allocation. A restart swaps the ring into the replaced session's place
//! (O(1)); only during the window is an arrival compared with it. Bounds
//! (a choice where venues.md is silent): the latest `SLOTS` datagrams of
//! the replaced session, each of at most `SLOT_BYTES` bytes (Cboe's
//! datagrams fit an Ethernet frame); a copy of an older or longer one is
//! taken as a datagram of the new session. Pure code.

/// Datagrams kept per unit.
pub const SLOTS: usize = 1024;
/// The longest datagram kept.
pub const SLOT_BYTES: usize = 1536;

/// The latest datagrams of a session, as received, with their arrival.
struct Ring {
    bytes: Vec<u8>,
    /// By slot: arrival (Unix ns) and length; length 0 is an empty slot.
    meta: Vec<(i64, u16)>,
    next: usize,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            bytes: vec![0; SLOTS * SLOT_BYTES],
            meta: vec![(0, 0); SLOTS],
            next: 0,
        }
    }

    fn clear(&mut self) {
        self.meta.iter_mut().for_each(|m| *m = (0, 0));
        self.next = 0;
    }

    fn record(&mut self, datagram: &[u8], at: i64) {
        let len = datagram.len();
        if len == 0 || len > SLOT_BYTES {
            return;
        }
        let start = self.next * SLOT_BYTES;
        self.bytes[start..start + len].copy_from_slice(datagram);
        self.meta[self.next] = (at, len as u16);
        self.next = (self.next + 1) % SLOTS;
    }

    /// Whether `datagram` is kept, having arrived at or after `since`.
    fn holds(&self, datagram: &[u8], since: i64) -> bool {
        self.meta.iter().enumerate().any(|(i, &(at, len))| {
            len as usize == datagram.len()
                && at >= since
                && &self.bytes[i * SLOT_BYTES..i * SLOT_BYTES + datagram.len()] == datagram
        })
    }
}

/// One unit's record of its session's latest datagrams, and after a
/// restart by rule 4, the replaced session's.
pub struct Lagging {
    current: Ring,
    replaced: Ring,
    /// `max_hole_ms` in ns.
    window_ns: i64,
    /// The restart's arrival; `None`: no window open.
    restart_at: Option<i64>,
}

impl Lagging {
    pub fn new(window_ns: i64) -> Lagging {
        Lagging {
            current: Ring::new(),
            replaced: Ring::new(),
            window_ns,
            restart_at: None,
        }
    }

    /// A datagram of the unit's current session arrived at `at`.
    #[inline]
    pub fn record(&mut self, datagram: &[u8], at: i64) {
        self.current.record(datagram, at);
    }

    /// A new session began at `now`: by rule 4 (`restart`), the current
    /// session's latest datagrams become the replaced session's and the
    /// window opens; by any other rule, nothing is kept.
    pub fn new_session(&mut self, restart: bool, now: i64) {
        if restart {
            std::mem::swap(&mut self.current, &mut self.replaced);
            self.restart_at = Some(now);
        } else {
            self.restart_at = None;
        }
        self.current.clear();
    }

    /// Whether `datagram`, arriving at `now`, is a lagging copy of the
    /// session a restart replaced.
    #[inline]
    pub fn is_copy(&mut self, datagram: &[u8], now: i64) -> bool {
        let Some(restart) = self.restart_at else {
            return false;
        };
        if now.saturating_sub(restart) > self.window_ns {
            self.restart_at = None;
            return false;
        }
        self.replaced
            .holds(datagram, restart.saturating_sub(self.window_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    #[test]
    fn a_copy_of_the_replaced_session_is_known_for_the_window_only() {
        let mut l = Lagging::new(2_000 * MS);
        l.record(b"old-1", 0);
        l.record(b"old-2", 1_000 * MS);
        l.record(b"old-3", 2_500 * MS);
        assert!(!l.is_copy(b"old-3", 2_600 * MS), "no restart yet");
        l.new_session(true, 3_000 * MS);
        l.record(b"new-1", 3_000 * MS);
        assert!(l.is_copy(b"old-3", 3_100 * MS));
        assert!(l.is_copy(b"old-2", 3_100 * MS), "1 s before the restart");
        assert!(!l.is_copy(b"old-1", 3_100 * MS), "3 s before it");
        assert!(!l.is_copy(b"old-", 3_100 * MS), "byte-identical only");
        assert!(!l.is_copy(b"new-1", 3_100 * MS), "the new session's own");
        assert!(l.is_copy(b"old-3", 5_000 * MS), "the window's last ns");
        assert!(!l.is_copy(b"old-3", 5_000 * MS + 1), "closed");
        assert!(!l.is_copy(b"old-3", 5_100 * MS));
    }

    #[test]
    fn other_rules_keep_nothing_and_the_ring_is_bounded() {
        let mut l = Lagging::new(2_000 * MS);
        l.record(b"old", 0);
        l.new_session(false, MS);
        assert!(!l.is_copy(b"old", 2 * MS));
        for i in 0..=SLOTS as u32 {
            l.record(&i.to_le_bytes(), 10 * MS);
        }
        l.record(&[7; SLOT_BYTES + 1], 10 * MS);
        l.new_session(true, 11 * MS);
        assert!(!l.is_copy(&0u32.to_le_bytes(), 12 * MS), "overwritten");
        assert!(l.is_copy(&1u32.to_le_bytes(), 12 * MS));
        assert!(l.is_copy(&(SLOTS as u32).to_le_bytes(), 12 * MS));
        assert!(
            !l.is_copy(&[7; SLOT_BYTES + 1], 12 * MS),
            "too long to keep"
        );
    }
}
