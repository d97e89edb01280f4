//! Recovery from CME's snapshot loop (venues.md `cme-mdp3`, Snapshots):
//! which snapshot an instrument that waits can use, and the incremental
//! entries kept while it waits, so that a snapshot older than them can be
//! continued by them. Pure: no time, no I/O.
//!
//! A snapshot (its SendingTime, LastMsgSeqNumProcessed `m`, RptSeq `r`) is
//! used for a waiting instrument when it was sent after the current
//! session began, `m` covers the latest channel reset and every packet
//! declared lost in the session, and either the instrument has no
//! sequence, or `r >= last_seq`, or a kept entry has RptSeq `r + 1`. The
//! adapter adds what needs the channel and the book: `m` below `next`,
//! each side's levels 1, 2, ... without a repeat, and any `r` for an
//! instrument whose sequence is not believed (`adapter.rs`, `snapshot`).

use std::collections::BTreeSet;

use super::messages::{BookEntry, EntryKind};

/// The default bound on kept entries, per feed (venues.md).
pub const DEFAULT_RECOVERY_ENTRIES: usize = 1_000_000;

/// What a snapshot must cover in the current session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// SendingTime of the session's first packet.
    session_start: u64,
    /// The highest MsgSeqNum a snapshot must have processed: the latest
    /// channel reset's packet and every packet declared lost (0: none).
    must_cover: u64,
}

impl Coverage {
    /// A session began (the feed's first packet, or C5) with a packet sent
    /// at `sent`: nothing lost yet.
    pub fn new_session(&mut self, sent: u64) {
        *self = Coverage {
            session_start: sent,
            must_cover: 0,
        };
    }

    /// The packet `seq` carried a channel reset.
    pub fn channel_reset(&mut self, seq: u32) {
        self.must_cover = self.must_cover.max(u64::from(seq));
    }

    /// Packets `from` to `to` (inclusive) were declared lost (C3).
    pub fn lost(&mut self, from: u64, to: u64) {
        if to >= from {
            self.must_cover = self.must_cover.max(to);
        }
    }

    /// Whether a snapshot sent at `sent` after the incremental packets up
    /// to `m` reflects everything the session lost or reset.
    pub fn covers(&self, sent: u64, m: u32) -> bool {
        sent > self.session_start && u64::from(m) >= self.must_cover
    }
}

/// Whether a snapshot with RptSeq `r` can be used for a waiting instrument
/// whose sequence is `last_seq` (`None`: none yet), given whether a kept
/// entry continues it (has RptSeq `r + 1`). Coverage is checked apart.
pub fn continues(r: u32, last_seq: Option<u32>, kept_continues: bool) -> bool {
    match last_seq {
        None => true,
        Some(last) => r >= last || kept_continues,
    }
}

/// An incremental entry kept while its instrument waits for a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptEntry {
    pub rpt_seq: u32,
    pub transact_time: u64,
    pub kind: EntryKind,
    pub book: Option<BookEntry>,
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    entry: KeptEntry,
    next: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
    /// Set while the instrument waits: its place in the wait order.
    since: Option<u64>,
}

/// The entries kept for waiting instruments (indices are the channel's
/// instrument indices), at most `cap` in all: beyond it, the kept entries
/// of the instrument that has waited longest (among those that hold some)
/// are dropped. Entries live in one slab that grows to the largest number
/// kept at once and is reused; keeping an entry allocates only when the
/// slab grows.
///
/// Cost and memory: the instruments holding entries are ordered by when
/// they started waiting (`holders`), so the one to drop is found at once,
/// whatever the number of waiting instruments without entries; an
/// instrument enters or leaves that order only when it gains its first
/// entry or loses them all (O(log h) for h holders), every other entry is
/// O(1). The bookkeeping is one record per instrument, one node per kept
/// entry and one order item per holder: nothing grows with the number of
/// gaps or waits.
#[derive(Debug)]
pub struct Kept {
    cap: usize,
    slab: Vec<Node>,
    free: u32,
    lists: Vec<List>,
    /// The waiting instruments that hold entries, by when they started
    /// waiting: (`since`, instrument).
    holders: BTreeSet<(u64, u32)>,
    clock: u64,
    kept: usize,
    waiting: usize,
    dropped: u64,
}

impl Kept {
    pub fn new(cap: usize) -> Kept {
        Kept {
            cap,
            slab: Vec::new(),
            free: NONE,
            lists: Vec::new(),
            holders: BTreeSet::new(),
            clock: 0,
            kept: 0,
            waiting: 0,
            dropped: 0,
        }
    }

    /// Entries kept now (the `recovery_entries` gauge).
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// Entries dropped over the bound so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Instruments waiting for a snapshot (a gauge).
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    pub fn is_waiting(&self, instrument: u32) -> bool {
        self.lists
            .get(instrument as usize)
            .is_some_and(|l| l.since.is_some())
    }

    /// How many entries are kept for `instrument`.
    pub fn len(&self, instrument: u32) -> usize {
        self.lists
            .get(instrument as usize)
            .map_or(0, |l| l.len as usize)
    }

    fn list(&mut self, instrument: u32) -> &mut List {
        let i = instrument as usize;
        if self.lists.len() <= i {
            self.lists.resize(
                i + 1,
                List {
                    head: NONE,
                    tail: NONE,
                    len: 0,
                    since: None,
                },
            );
        }
        &mut self.lists[i]
    }

    /// `instrument` starts waiting (no effect if it already does).
    pub fn start_waiting(&mut self, instrument: u32) {
        if self.list(instrument).since.is_some() {
            return;
        }
        self.clock += 1;
        let at = self.clock;
        self.list(instrument).since = Some(at);
        self.waiting += 1;
    }

    /// `instrument` no longer waits: its kept entries are forgotten.
    pub fn stop_waiting(&mut self, instrument: u32) {
        if !self.is_waiting(instrument) {
            return;
        }
        self.clear(instrument);
        self.lists[instrument as usize].since = None;
        self.waiting -= 1;
    }

    /// Forgets every instrument's entries and waits (a session change).
    pub fn reset(&mut self) {
        for i in 0..self.lists.len() as u32 {
            self.stop_waiting(i);
        }
        debug_assert!(self.holders.is_empty());
        self.holders.clear();
    }

    fn clear(&mut self, instrument: u32) {
        let l = &mut self.lists[instrument as usize];
        let (mut at, n) = (l.head, l.len);
        if n > 0 {
            if let Some(since) = l.since {
                self.holders.remove(&(since, instrument));
            }
        }
        *l = List {
            head: NONE,
            tail: NONE,
            len: 0,
            since: l.since,
        };
        while at != NONE {
            let next = self.slab[at as usize].next;
            self.slab[at as usize].next = self.free;
            self.free = at;
            at = next;
        }
        self.kept -= n as usize;
    }

    /// Keeps an entry of a waiting instrument, in order. At the bound, the
    /// kept entries of the instrument that has waited longest (and has
    /// some) are dropped first; with a bound of 0 nothing is kept.
    pub fn keep(&mut self, instrument: u32, entry: KeptEntry) {
        if !self.is_waiting(instrument) {
            return;
        }
        if self.kept >= self.cap && !self.drop_longest_waiting() {
            self.dropped += 1;
            return;
        }
        let node = Node { entry, next: NONE };
        let at = if self.free != NONE {
            let at = self.free;
            self.free = self.slab[at as usize].next;
            self.slab[at as usize] = node;
            at
        } else {
            self.slab.push(node);
            (self.slab.len() - 1) as u32
        };
        let l = &mut self.lists[instrument as usize];
        if l.tail == NONE {
            l.head = at;
        } else {
            let tail = l.tail;
            self.slab[tail as usize].next = at;
        }
        let l = &mut self.lists[instrument as usize];
        l.tail = at;
        l.len += 1;
        if l.len == 1 {
            if let Some(since) = l.since {
                self.holders.insert((since, instrument));
            }
        }
        self.kept += 1;
    }

    /// At the bound: the kept entries of the longest waiter holding some
    /// are dropped (false: nobody holds any).
    fn drop_longest_waiting(&mut self) -> bool {
        let Some(&(_, i)) = self.holders.first() else {
            return false;
        };
        self.dropped += u64::from(self.lists[i as usize].len);
        self.clear(i);
        true
    }

    /// Whether an entry with RptSeq `rpt` is kept for `instrument`.
    pub fn has(&self, instrument: u32, rpt: u32) -> bool {
        self.entries(instrument).any(|e| e.rpt_seq == rpt)
    }

    /// The kept entries of `instrument`, in order.
    pub fn entries(&self, instrument: u32) -> impl Iterator<Item = KeptEntry> + '_ {
        let mut at = self.lists.get(instrument as usize).map_or(NONE, |l| l.head);
        std::iter::from_fn(move || {
            if at == NONE {
                return None;
            }
            let n = self.slab[at as usize];
            at = n.next;
            Some(n.entry)
        })
    }

    /// A snapshot with RptSeq `r` was used: hands `apply` the kept entries
    /// above `r`, in order, and discards the rest. The instrument keeps
    /// waiting or not as `apply`'s caller decides (a gap among them
    /// leaves it waiting for the next loop).
    pub fn drain_after(&mut self, instrument: u32, r: u32, mut apply: impl FnMut(KeptEntry)) {
        if (instrument as usize) >= self.lists.len() {
            return;
        }
        let mut at = self.lists[instrument as usize].head;
        while at != NONE {
            let n = self.slab[at as usize];
            if n.entry.rpt_seq > r {
                apply(n.entry);
            }
            at = n.next;
        }
        self.clear(instrument);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(rpt: u32) -> KeptEntry {
        KeptEntry {
            rpt_seq: rpt,
            transact_time: u64::from(rpt) * 10,
            kind: EntryKind::Trade,
            book: None,
        }
    }

    fn rpts(k: &Kept, i: u32) -> Vec<u32> {
        k.entries(i).map(|e| e.rpt_seq).collect()
    }

    #[test]
    fn coverage_of_resets_and_lost_packets() {
        let mut c = Coverage::default();
        c.new_session(100);
        assert!(c.covers(101, 0));
        assert!(!c.covers(100, 5), "sent when the session began");
        c.lost(2, 2);
        assert!(!c.covers(200, 1));
        assert!(c.covers(200, 2));
        c.channel_reset(7);
        assert!(!c.covers(200, 6));
        assert!(c.covers(200, 7));
        c.lost(3, 4);
        assert!(c.covers(200, 7), "the highest counts");
        c.new_session(300);
        assert!(c.covers(301, 0));
        assert!(!c.covers(250, 9), "sent before this session");
    }

    #[test]
    fn snapshots_never_roll_an_instrument_back() {
        assert!(continues(3, None, false));
        assert!(continues(6, Some(6), false));
        assert!(!continues(4, Some(6), false));
        assert!(continues(4, Some(6), true), "kept entries 5.. continue it");
    }

    #[test]
    fn entries_are_kept_while_waiting_and_drained_above_the_snapshot() {
        let mut k = Kept::new(100);
        k.keep(1, e(5));
        assert_eq!(k.kept(), 0, "not waiting");
        k.start_waiting(1);
        for r in [5, 6, 7] {
            k.keep(1, e(r));
        }
        assert_eq!((k.kept(), k.waiting()), (3, 1));
        assert!(k.has(1, 5) && !k.has(1, 4));
        let mut applied = Vec::new();
        k.drain_after(1, 5, |x| applied.push(x.rpt_seq));
        assert_eq!(applied, [6, 7]);
        assert_eq!(k.kept(), 0);
        assert!(k.is_waiting(1), "the caller decides");
        k.keep(1, e(8));
        k.stop_waiting(1);
        assert_eq!((k.kept(), k.waiting(), k.len(1)), (0, 0, 0));
    }

    #[test]
    fn the_longest_waiter_loses_its_entries_at_the_bound() {
        let mut k = Kept::new(4);
        k.start_waiting(3);
        k.start_waiting(1);
        k.start_waiting(2);
        k.keep(3, e(1));
        k.keep(3, e(2));
        k.keep(1, e(10));
        k.keep(2, e(20));
        // Full: instrument 3 waited longest.
        k.keep(2, e(21));
        assert_eq!(rpts(&k, 3), Vec::<u32>::new());
        assert_eq!(rpts(&k, 2), [20, 21]);
        assert_eq!((k.kept(), k.dropped()), (3, 2));
        assert!(k.is_waiting(3), "it still waits");
        // 3 waits longest again, with an entry: it loses it.
        k.keep(3, e(3));
        k.keep(2, e(22));
        assert_eq!(rpts(&k, 3), Vec::<u32>::new());
        assert_eq!(rpts(&k, 1), [10]);
        assert_eq!(k.dropped(), 3);
        // 3 holds nothing: 1 is the longest waiter with entries.
        k.keep(2, e(23));
        assert_eq!(rpts(&k, 1), Vec::<u32>::new());
        assert_eq!(rpts(&k, 2), [20, 21, 22, 23]);
        assert_eq!((k.kept(), k.dropped()), (4, 4));
        // The slab is reused: it never grew past the bound.
        assert!(k.slab.len() <= 4);
        let mut none = Kept::new(0);
        none.start_waiting(0);
        none.keep(0, e(1));
        assert_eq!((none.kept(), none.dropped()), (0, 1));
        k.reset();
        assert_eq!((k.kept(), k.waiting()), (0, 0));
    }

    #[test]
    fn waits_without_entries_leave_nothing_behind() {
        // Gaps over quiet instruments: each waits, stops, waits again.
        let mut k = Kept::new(2);
        for _ in 0..1000 {
            for i in 0..50 {
                k.start_waiting(i);
            }
            for i in 0..50 {
                k.stop_waiting(i);
            }
        }
        assert_eq!((k.waiting(), k.holders.len()), (0, 0));
        // Quiet waiters ahead of the holders are not in the drop order.
        for i in 0..50 {
            k.start_waiting(i);
        }
        k.keep(49, e(1));
        k.keep(48, e(1));
        assert_eq!(k.holders.len(), 2);
        k.keep(49, e(2));
        assert_eq!(rpts(&k, 48), Vec::<u32>::new(), "48 waited longest");
        assert_eq!(rpts(&k, 49), [1, 2]);
        assert_eq!(k.holders.len(), 1);
    }
}
