//! A venue's snapshot and definition loops (venues.md `cme-mdp3`,
//! Snapshots) as a state machine beside the feed's rules: which instruments
//! wait for a snapshot, the incremental entries kept while they wait, what
//! a loop snapshot must cover to be used, and which loop lines are wanted.
//! Sans-I/O: `now` is passed in; the venue's adapter decodes the loops and
//! tells the machine what it saw through [`LoopMachine`] (the book, the
//! instrument's names and the symbol rules stay the adapter's and the
//! feed's).
//!
//! States: each instrument is [`Instrument::Unknown`] (never given a
//! slot), [`Instrument::Live`] (its entries apply in order) or
//! [`Instrument::Waiting`] (since `now`: it waits for a snapshot or its
//! next entry, and its entries are kept). The snapshot loop is wanted while
//! any instrument waits; the definition loop until it was seen whole
//! (TotNumReports) and while an entry names an instrument without a
//! definition ([`Loops::wants`]).
//!
//! One `Loops` serves one channel: instruments are the channel's indices.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::venue::codec::LoopMachine;
use crate::venue::{LineKind, VenueRecovery};

/// An instrument's place in the loops' rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instrument {
    /// Never given a slot: nothing waits for it.
    Unknown,
    /// Its entries apply in order; no snapshot is wanted for it.
    Live,
    /// Waits for a snapshot (or its next entry) since `since`; its entries
    /// are kept.
    Waiting { since: i64 },
}

/// What a loop snapshot must cover in the current session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// The send time of the session's first packet.
    session_start: u64,
    /// The highest packet sequence a snapshot must have processed: the
    /// latest channel reset's packet and every packet declared lost (0:
    /// none).
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

    /// Whether a snapshot sent at `sent` after the packets up to `m`
    /// reflects everything the session lost or reset.
    pub fn covers(&self, sent: u64, m: u32) -> bool {
        sent > self.session_start && u64::from(m) >= self.must_cover
    }
}

/// Whether a snapshot with sequence `r` can be used for a waiting
/// instrument whose sequence is `last_seq` (`None`: none yet), given
/// whether a kept entry continues it (has sequence `r + 1`): a snapshot
/// never rolls an instrument back. Coverage is checked apart.
pub fn continues(r: u32, last_seq: Option<u32>, kept_continues: bool) -> bool {
    match last_seq {
        None => true,
        Some(last) => r >= last || kept_continues,
    }
}

/// The definition loop's progress.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Definitions {
    /// The loop's TotNumReports, once a definition carried it.
    total: Option<u32>,
    /// Instruments with a definition.
    defined: u32,
    /// Instruments named by an entry and still without a definition.
    undefined_named: u32,
}

const NONE: u32 = u32::MAX;

/// Nodes of the slab taken at once by an instrument: its entries lie in
/// runs of this many neighbours, so that a walk of them (a snapshot's
/// drain) reads whole lines in turn instead of missing the cache on every
/// entry, as nodes interleaved with other instruments' would.
const BLOCK: u32 = 4;

/// The waiting instruments that hold entries, by when they started waiting:
/// a min-heap of (wait order, instrument). An item is current while its
/// instrument still waits with that order and holds entries; one that is
/// not is stale and skipped when it comes to the top. So an instrument
/// leaves the order without a search (the snapshot path), and the stale
/// items are swept out whenever they outnumber the current ones.
#[derive(Debug, Default)]
struct DropOrder {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Current items: the waiting instruments that hold entries.
    holders: usize,
}

/// Sweep when the heap holds more than this many stale items beyond the
/// current ones (a constant, so that a few holders never sweep often).
const STALE_SLACK: usize = 64;

impl DropOrder {
    /// `instrument`, waiting with `order`, gained its first entry.
    fn push(&mut self, order: u64, instrument: u32, lists: &[List]) {
        self.holders += 1;
        if self.heap.len() >= 2 * self.holders + STALE_SLACK {
            self.heap.retain(|&Reverse((o, i))| holds(lists, o, i));
        }
        self.heap.push(Reverse((order, instrument)));
    }
}

/// Whether `instrument` waits with the wait order `order` and holds entries
/// (its drop order item is current).
#[inline]
fn holds(lists: &[List], order: u64, instrument: u32) -> bool {
    lists
        .get(instrument as usize)
        .is_some_and(|l| l.len > 0 && l.since.is_some_and(|(o, _)| o == order))
}

#[derive(Clone, Copy, Debug)]
struct Node<E> {
    entry: E,
    rank: u32,
    next: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
    /// The first and last entry's ranks, and whether every entry's rank is
    /// the one before it plus one (so the ranks kept are exactly
    /// `first..=last`: `has` answers without a walk, as on a feed that lost
    /// nothing while the instrument waited).
    first: u32,
    last: u32,
    dense: bool,
    /// Given a slot: `all_wait` makes it wait.
    known: bool,
    /// Set while the instrument waits: its place in the wait order, and
    /// when it started.
    since: Option<(u64, i64)>,
}

const EMPTY: List = List {
    head: NONE,
    tail: NONE,
    len: 0,
    first: 0,
    last: 0,
    dense: false,
    known: false,
    since: None,
};

/// The loops of one channel. Kept entries (`E`, the venue's, each with its
/// instrument sequence as `rank`) are at most `cap` in all: beyond it, the
/// kept entries of the instrument that has waited longest (among those
/// that hold some) are dropped. Entries live in one slab, in blocks of
/// `BLOCK` nodes that an instrument takes one at a time; the slab grows to
/// the most blocks held at once (at most one per entry kept, and at most
/// the entries kept plus one block per holder) and is reused; keeping an
/// entry allocates only when the slab grows.
///
/// Cost and memory: the instruments holding entries are ordered by when
/// they started waiting (`DropOrder`), so the one to drop is found at
/// once, whatever the number of waiting instruments without entries; an
/// instrument enters that order when it gains its first entry (O(log h)
/// for h holders) and leaves it for free when it loses them all (a
/// snapshot used, a wait ended); every other entry is O(1). The
/// bookkeeping is one record per instrument, one node per kept entry and
/// at most two order items per holder of the most held at once (plus a
/// constant): nothing grows with the number of gaps or waits.
#[derive(Debug)]
pub struct Loops<E> {
    cap: usize,
    slab: Vec<Node<E>>,
    free: u32,
    lists: Vec<List>,
    order: DropOrder,
    clock: u64,
    kept: usize,
    waiting: usize,
    dropped: u64,
    coverage: Coverage,
    definitions: Definitions,
}

impl<E: Copy> Loops<E> {
    pub fn new(cap: usize) -> Loops<E> {
        Loops {
            cap,
            slab: Vec::new(),
            free: NONE,
            lists: Vec::new(),
            order: DropOrder::default(),
            clock: 0,
            kept: 0,
            waiting: 0,
            dropped: 0,
            coverage: Coverage::default(),
            definitions: Definitions::default(),
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

    /// The gauges readers see (venues.md `cme-mdp3`).
    pub fn gauges(&self) -> VenueRecovery {
        VenueRecovery {
            waiting: self.waiting as u64,
            kept_entries: self.kept as u64,
            kept_dropped: self.dropped,
        }
    }

    pub fn state(&self, instrument: u32) -> Instrument {
        match self.lists.get(instrument as usize) {
            Some(List {
                since: Some((_, t)),
                ..
            }) => Instrument::Waiting { since: *t },
            Some(List { known: true, .. }) => Instrument::Live,
            _ => Instrument::Unknown,
        }
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

    /// Whether a line of `kind` should be received now: incremental lines
    /// always; the snapshot loop while an instrument waits; the definition
    /// loop until it was seen whole and while an entry names an instrument
    /// without a definition.
    pub fn wants(&self, kind: LineKind) -> bool {
        let d = &self.definitions;
        match kind {
            // (CME has no gap lines: config refuses them.)
            LineKind::Incremental | LineKind::Gap => true,
            LineKind::Snapshot => self.waiting > 0,
            LineKind::Definition => {
                d.total.is_none_or(|total| d.defined < total) || d.undefined_named > 0
            }
        }
    }

    /// A new session (C5, not the feed's first): every kept entry and wait
    /// is forgotten, then every known instrument waits.
    pub fn new_session(&mut self, now: i64) {
        self.forget_waits();
        self.all_wait(now);
    }

    fn list(&mut self, instrument: u32) -> &mut List {
        let i = instrument as usize;
        if self.lists.len() <= i {
            self.lists.resize(i + 1, EMPTY);
        }
        &mut self.lists[i]
    }

    fn clear(&mut self, instrument: u32) {
        self.drain(instrument, |_| {});
    }

    /// Empties the instrument's list in one walk, handing each node to
    /// `each` in order; its blocks go back to the free list (each list
    /// begins its blocks at their first node, so a node at a block's start
    /// stands for its block).
    #[inline]
    fn drain(&mut self, instrument: u32, mut each: impl FnMut(&Node<E>)) {
        let l = &mut self.lists[instrument as usize];
        let (mut at, n) = (l.head, l.len);
        if n > 0 && l.since.is_some() {
            // Its item in the drop order is stale from now on.
            self.order.holders -= 1;
        }
        l.head = NONE;
        l.tail = NONE;
        l.len = 0;
        while at != NONE {
            let node = &mut self.slab[at as usize];
            each(node);
            let next = node.next;
            if at.is_multiple_of(BLOCK) {
                node.next = self.free;
                self.free = at;
            }
            at = next;
        }
        self.kept -= n as usize;
    }

    /// At the bound: the kept entries of the longest waiter holding some
    /// are dropped (false: nobody holds any).
    fn drop_longest_waiting(&mut self) -> bool {
        while let Some(Reverse((order, i))) = self.order.heap.pop() {
            if holds(&self.lists, order, i) {
                self.dropped += u64::from(self.lists[i as usize].len);
                self.clear(i);
                return true;
            }
        }
        false
    }

    /// The waiting instruments that hold entries now.
    pub fn holders(&self) -> usize {
        self.order.holders
    }

    /// Whether an entry ranked `rank` is kept for `instrument`: a walk of
    /// its entries only when their ranks are not consecutive.
    pub fn has(&self, instrument: u32, rank: u32) -> bool {
        match self.lists.get(instrument as usize) {
            None => false,
            Some(l) if l.dense => l.len > 0 && l.first <= rank && rank <= l.last,
            Some(_) => self.ranked(instrument).any(|(r, _)| r == rank),
        }
    }

    /// The kept entries of `instrument`, in order.
    pub fn entries(&self, instrument: u32) -> impl Iterator<Item = E> + '_ {
        self.ranked(instrument).map(|(_, e)| e)
    }

    fn ranked(&self, instrument: u32) -> impl Iterator<Item = (u32, E)> + '_ {
        let mut at = self.lists.get(instrument as usize).map_or(NONE, |l| l.head);
        std::iter::from_fn(move || {
            if at == NONE {
                return None;
            }
            let n = self.slab[at as usize];
            at = n.next;
            Some((n.rank, n.entry))
        })
    }
}

impl<E: Copy> LoopMachine<E> for Loops<E> {
    fn start_waiting(&mut self, instrument: u32, now: i64) {
        let l = self.list(instrument);
        l.known = true;
        if l.since.is_some() {
            return;
        }
        self.clock += 1;
        let order = self.clock;
        self.list(instrument).since = Some((order, now));
        self.waiting += 1;
    }

    fn stop_waiting(&mut self, instrument: u32) {
        if !self.is_waiting(instrument) {
            return;
        }
        self.clear(instrument);
        self.lists[instrument as usize].since = None;
        self.waiting -= 1;
    }

    fn all_wait(&mut self, now: i64) {
        for i in 0..self.lists.len() as u32 {
            if self.lists[i as usize].known {
                self.start_waiting(i, now);
            }
        }
    }

    fn forget_waits(&mut self) {
        for i in 0..self.lists.len() as u32 {
            self.stop_waiting(i);
        }
        debug_assert_eq!(self.order.holders, 0);
        self.order.heap.clear();
    }

    fn keep(&mut self, instrument: u32, rank: u32, entry: E) {
        if !self.is_waiting(instrument) {
            return;
        }
        if self.kept >= self.cap && !self.drop_longest_waiting() {
            self.dropped += 1;
            return;
        }
        let node = Node {
            entry,
            rank,
            next: NONE,
        };
        let tail = self.lists[instrument as usize].tail;
        // The next node of the tail's block, or the first of a new block.
        let at = if tail != NONE && !(tail + 1).is_multiple_of(BLOCK) {
            tail + 1
        } else if self.free != NONE {
            let at = self.free;
            self.free = self.slab[at as usize].next;
            at
        } else {
            let at = self.slab.len() as u32;
            // The block's other nodes hold copies until used.
            self.slab.extend(std::iter::repeat_n(node, BLOCK as usize));
            at
        };
        self.slab[at as usize] = node;
        if tail == NONE {
            self.lists[instrument as usize].head = at;
        } else {
            self.slab[tail as usize].next = at;
        }
        let l = &mut self.lists[instrument as usize];
        l.tail = at;
        l.len += 1;
        if l.len == 1 {
            (l.first, l.last, l.dense) = (rank, rank, true);
            if let Some((order, _)) = l.since {
                self.order.push(order, instrument, &self.lists);
            }
        } else {
            l.dense &= l.last.checked_add(1) == Some(rank);
            l.last = rank;
        }
        self.kept += 1;
    }

    fn take_after(&mut self, instrument: u32, rank: u32, out: &mut Vec<E>) {
        if (instrument as usize) < self.lists.len() {
            self.drain(instrument, |n| {
                if n.rank > rank {
                    out.push(n.entry);
                }
            });
        }
        self.stop_waiting(instrument);
    }

    fn session_began(&mut self, sent: u64) {
        self.coverage.new_session(sent);
    }

    fn channel_reset(&mut self, seq: u32) {
        self.coverage.channel_reset(seq);
    }

    fn lost(&mut self, from: u64, to: u64) {
        self.coverage.lost(from, to);
    }

    fn snapshot_usable(
        &self,
        instrument: u32,
        sent: u64,
        processed: u32,
        rank: u32,
        last: Option<u32>,
        believed: bool,
    ) -> bool {
        self.coverage.covers(sent, processed)
            && (!believed || continues(rank, last, self.has(instrument, rank.wrapping_add(1))))
    }

    fn defined(&mut self, first: bool, total: Option<u32>) {
        if first {
            self.definitions.defined += 1;
        }
        if let Some(t) = total {
            self.definitions.total = Some(t);
        }
    }

    fn named_undefined(&mut self, named: bool) {
        let d = &mut self.definitions;
        if named {
            d.undefined_named += 1;
        } else {
            d.undefined_named -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpts(k: &Loops<u32>, i: u32) -> Vec<u32> {
        k.entries(i).collect()
    }

    /// An entry whose content is its rank.
    fn keep(k: &mut Loops<u32>, i: u32, rank: u32) {
        k.keep(i, rank, rank);
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
    fn a_snapshot_is_usable_when_covered_and_continued_or_the_sequence_unbelieved() {
        let mut k = Loops::<u32>::new(100);
        k.session_began(100);
        k.lost(5, 9);
        k.start_waiting(1, 0);
        // Sent after the session began, covering packet 9; RptSeq 6 after 6.
        assert!(k.snapshot_usable(1, 200, 9, 6, Some(6), true));
        assert!(!k.snapshot_usable(1, 200, 8, 6, Some(6), true), "9 lost");
        assert!(!k.snapshot_usable(1, 100, 9, 6, Some(6), true), "too old");
        assert!(
            !k.snapshot_usable(1, 200, 9, 4, Some(6), true),
            "rolls back"
        );
        assert!(
            k.snapshot_usable(1, 200, 9, 4, Some(6), false),
            "unbelieved"
        );
        keep(&mut k, 1, 5);
        assert!(
            k.snapshot_usable(1, 200, 9, 4, Some(6), true),
            "5 continues 4"
        );
    }

    #[test]
    fn instruments_are_unknown_live_or_waiting_since_now() {
        let mut k = Loops::<u32>::new(10);
        assert_eq!(k.state(3), Instrument::Unknown);
        k.start_waiting(3, 50);
        assert_eq!(k.state(3), Instrument::Waiting { since: 50 });
        k.start_waiting(3, 60);
        assert_eq!(k.state(3), Instrument::Waiting { since: 50 }, "already");
        k.stop_waiting(3);
        assert_eq!(k.state(3), Instrument::Live);
        assert_eq!(k.state(2), Instrument::Unknown, "below a known one");
        // A gap, a reset or a session: every known instrument waits.
        k.all_wait(70);
        assert_eq!(k.state(3), Instrument::Waiting { since: 70 });
        assert_eq!((k.state(2), k.waiting()), (Instrument::Unknown, 1));
        k.new_session(80);
        assert_eq!(k.state(3), Instrument::Waiting { since: 80 });
    }

    #[test]
    fn entries_are_kept_while_waiting_and_taken_above_the_snapshot() {
        let mut k = Loops::<u32>::new(100);
        keep(&mut k, 1, 5);
        assert_eq!(k.kept(), 0, "not waiting");
        k.start_waiting(1, 0);
        for r in [5, 6, 7] {
            keep(&mut k, 1, r);
        }
        assert_eq!((k.kept(), k.waiting()), (3, 1));
        assert!(k.has(1, 5) && !k.has(1, 4));
        let mut taken = Vec::new();
        k.take_after(1, 5, &mut taken);
        assert_eq!(taken, [6, 7]);
        assert_eq!((k.kept(), k.waiting()), (0, 0));
        assert_eq!(k.state(1), Instrument::Live);
        keep(&mut k, 1, 8);
        assert_eq!((k.kept(), k.len(1)), (0, 0), "live: nothing kept");
    }

    #[test]
    fn has_answers_as_a_walk_of_the_entries_whatever_their_ranks() {
        // Consecutive ranks (answered without a walk), then a gap, a
        // repeat, a step back, entries dropped at the bound and drained
        // lists: `has` always equals a look at the entries kept.
        let mut k = Loops::<u32>::new(12);
        let mut x = 0x2545_f491_u32;
        for step in 0..4_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let i = x % 3;
            k.start_waiting(i, step);
            let last = k.entries(i).last().unwrap_or(x % 50);
            let rank = match x % 16 {
                0 => last.wrapping_add(2),
                1 => last,
                2 => last.saturating_sub(3),
                3 => u32::MAX,
                _ => last.wrapping_add(1),
            };
            if x.is_multiple_of(97) {
                k.take_after(i, rank, &mut Vec::new());
            } else {
                keep(&mut k, i, rank);
            }
            for i in 0..4 {
                let kept = rpts(&k, i);
                for r in kept
                    .iter()
                    .flat_map(|&r| [r.wrapping_sub(1), r, r.wrapping_add(1)])
                {
                    assert_eq!(k.has(i, r), kept.contains(&r), "{i} {r} of {kept:?}");
                }
            }
        }
    }

    #[test]
    fn an_instruments_entries_lie_in_blocks_of_neighbours_and_blocks_are_reused() {
        // Entries of many instruments interleaved, snapshots taken and
        // entries dropped at the bound: each instrument's entries are its
        // own, in order, in runs of neighbouring nodes, and the slab holds
        // no more blocks than the most entries kept at once.
        let mut k = Loops::<u32>::new(40);
        let mut model: Vec<Vec<u32>> = vec![Vec::new(); 9];
        let (mut x, mut peak) = (0x9e37_79b9_u32, 0);
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let i = x % 9;
            k.start_waiting(i, i64::from(step));
            if x % 23 == 0 {
                let mut taken = Vec::new();
                k.take_after(i, 0, &mut taken);
                assert_eq!(taken, std::mem::take(&mut model[i as usize]));
            } else {
                keep(&mut k, i, step + 1);
                model[i as usize].push(step + 1);
            }
            peak = peak.max(k.kept());
            for (i, m) in model.iter_mut().enumerate() {
                let kept = rpts(&k, i as u32);
                // Dropped at the bound: all its entries (then, if it was
                // the one keeping, the new entry alone is kept).
                if kept.len() < m.len() {
                    assert!(kept.is_empty() || kept[..] == m[m.len() - 1..]);
                    m.clone_from(&kept);
                }
                assert_eq!(&kept, m);
                let l = k.lists.get(i).copied().unwrap_or(EMPTY);
                let mut at = l.head;
                while at != NONE {
                    let next = k.slab[at as usize].next;
                    if next != NONE && !(at + 1).is_multiple_of(BLOCK) {
                        assert_eq!(next, at + 1, "within a block, the next node");
                    }
                    at = next;
                }
            }
            assert!(k.slab.len() <= BLOCK as usize * peak);
        }
        assert!(k.dropped() > 0, "the bound was reached");
    }

    #[test]
    fn the_longest_waiter_loses_its_entries_at_the_bound() {
        let mut k = Loops::<u32>::new(4);
        k.start_waiting(3, 0);
        k.start_waiting(1, 0);
        k.start_waiting(2, 0);
        keep(&mut k, 3, 1);
        keep(&mut k, 3, 2);
        keep(&mut k, 1, 10);
        keep(&mut k, 2, 20);
        // Full: instrument 3 waited longest.
        keep(&mut k, 2, 21);
        assert_eq!(rpts(&k, 3), Vec::<u32>::new());
        assert_eq!(rpts(&k, 2), [20, 21]);
        assert_eq!((k.kept(), k.dropped()), (3, 2));
        assert!(k.is_waiting(3), "it still waits");
        // 3 waits longest again, with an entry: it loses it.
        keep(&mut k, 3, 3);
        keep(&mut k, 2, 22);
        assert_eq!(rpts(&k, 3), Vec::<u32>::new());
        assert_eq!(rpts(&k, 1), [10]);
        assert_eq!(k.dropped(), 3);
        // 3 holds nothing: 1 is the longest waiter with entries.
        keep(&mut k, 2, 23);
        assert_eq!(rpts(&k, 1), Vec::<u32>::new());
        assert_eq!(rpts(&k, 2), [20, 21, 22, 23]);
        assert_eq!((k.kept(), k.dropped()), (4, 4));
        // The slab is reused: never more blocks than entries at the bound.
        assert!(k.slab.len() <= 4 * BLOCK as usize);
        let mut none = Loops::<u32>::new(0);
        none.start_waiting(0, 0);
        keep(&mut none, 0, 1);
        assert_eq!((none.kept(), none.dropped()), (0, 1));
        k.forget_waits();
        assert_eq!((k.kept(), k.waiting()), (0, 0));
    }

    #[test]
    fn waits_without_entries_leave_nothing_behind() {
        // Gaps over quiet instruments: each waits, stops, waits again.
        let mut k = Loops::<u32>::new(2);
        for _ in 0..1000 {
            for i in 0..50 {
                k.start_waiting(i, 0);
            }
            for i in 0..50 {
                k.stop_waiting(i);
            }
        }
        assert_eq!((k.waiting(), k.holders(), k.order.heap.len()), (0, 0, 0));
        // Quiet waiters ahead of the holders are not in the drop order.
        for i in 0..50 {
            k.start_waiting(i, 0);
        }
        keep(&mut k, 49, 1);
        keep(&mut k, 48, 1);
        assert_eq!(k.holders(), 2);
        keep(&mut k, 49, 2);
        assert_eq!(rpts(&k, 48), Vec::<u32>::new(), "48 waited longest");
        assert_eq!(rpts(&k, 49), [1, 2]);
        assert_eq!(k.holders(), 1);
    }

    /// Snapshots taken while others hold entries leave stale items behind;
    /// they are swept, so the order stays within twice the holders plus
    /// the slack, and the drop still picks the longest waiter.
    #[test]
    fn the_drop_order_stays_bounded_as_snapshots_come_and_go() {
        let mut k = Loops::<u32>::new(1_000);
        k.start_waiting(0, 0);
        keep(&mut k, 0, 1);
        for round in 0..10_000u32 {
            let i = 1 + round % 7;
            k.start_waiting(i, 0);
            keep(&mut k, i, round);
            k.take_after(i, 0, &mut Vec::new());
            // At most twice the holders at the last push (one more than now).
            assert!(k.order.heap.len() <= 2 * (k.holders() + 1) + STALE_SLACK);
        }
        assert_eq!(k.holders(), 1);
        assert_eq!(rpts(&k, 0), [1], "instrument 0 kept its entry throughout");
        // At a full bound the longest waiter holding entries loses them:
        // 6's first wait, stale at the top of the order, is passed over.
        let mut k2 = Loops::<u32>::new(2);
        k2.start_waiting(6, 0);
        k2.start_waiting(5, 0);
        keep(&mut k2, 6, 1);
        keep(&mut k2, 5, 1);
        k2.take_after(6, 0, &mut Vec::new());
        k2.start_waiting(6, 0);
        keep(&mut k2, 6, 2);
        keep(&mut k2, 6, 3);
        assert_eq!(rpts(&k2, 5), Vec::<u32>::new(), "5 waits longest now");
        assert_eq!(rpts(&k2, 6), [2, 3]);
        assert_eq!((k2.holders(), k2.dropped()), (1, 1));
    }

    #[test]
    fn the_snapshot_loop_is_wanted_while_an_instrument_waits() {
        let mut k = Loops::<u32>::new(10);
        assert!(k.wants(LineKind::Incremental));
        assert!(!k.wants(LineKind::Snapshot));
        k.start_waiting(0, 0);
        assert!(k.wants(LineKind::Snapshot));
        k.take_after(0, 0, &mut Vec::new());
        assert!(!k.wants(LineKind::Snapshot));
    }

    #[test]
    fn the_definition_loop_is_wanted_until_seen_whole_and_while_an_entry_names_an_undefined_one() {
        let mut k = Loops::<u32>::new(10);
        assert!(k.wants(LineKind::Definition), "total not known yet");
        k.defined(true, Some(2));
        assert!(k.wants(LineKind::Definition), "1 of 2");
        k.defined(false, Some(2));
        assert!(k.wants(LineKind::Definition), "the same one again");
        k.defined(true, None);
        assert!(!k.wants(LineKind::Definition), "2 of 2");
        k.named_undefined(true);
        assert!(k.wants(LineKind::Definition), "an entry names a third");
        k.named_undefined(false);
        assert!(!k.wants(LineKind::Definition));
    }
}
