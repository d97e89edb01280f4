//! The hold of recovery.md R1-R2 as a state machine: which datagram of the
//! current session is processed, held, dropped as a copy or as a conflict;
//! when the open hole's deadline falls; when the hold is full. Sans-I/O:
//! `next` (the channel's) and `now` are passed in, and the machine answers
//! with a [`Step`] that its driver (`Feed`) carries out: processing a
//! datagram, declaring a hole lost and publishing the feed's state stay
//! the driver's.
//!
//! States ([`HoleState`]): `Live` (nothing held) and `Open` (a hole is
//! open since `t_open`, progress last at `t_progress`). The datagrams
//! themselves are in the [`Store`].
//!
//! One `Hold` serves one channel (a feed's session; on a venue with
//! several units, one unit): `gap_hold_packets` is checked against the
//! limit its driver gives.

use super::refill::Window;
use super::store::{Against, Held, Source, Store};
use crate::feed::counters::RecoveryCounters;
use crate::feed::settings::{ms_to_ns, Recovery};
use crate::venue::Header;
use crate::wire::PacketKind;

/// R1: most sequences remembered as conflicted at once (their copies from
/// the lines are dropped until the hole reaches past them).
pub const CONFLICTS_MAX: usize = 1024;

/// R1-R2: where the hold stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoleState {
    /// Nothing held: no hole is open.
    Live,
    /// A hole is open since `t_open`; `t_progress` is the arrival of the
    /// last datagram that filled part of it (`t_open` if none did).
    Open { t_open: i64, t_progress: i64 },
}

/// The hold's bounds and times, from the feed's settings (recovery.md
/// "Settings").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldLimits {
    /// `gap_hold_us`, in ns.
    pub gap_hold_ns: i64,
    /// `max_hole_ms`, in ns.
    pub max_hole_ns: i64,
    /// R2 with a refill service: `rerequest_attempts x
    /// rerequest_timeout_ms`, in ns; `None` without one.
    pub refill_window_ns: Option<i64>,
    /// `gap_hold_packets` (at least 1).
    pub max_packets: usize,
    /// C3b's `max_channel_jump` (at least 1).
    pub max_jump: u64,
}

impl HoldLimits {
    pub fn new(r: &Recovery, max_channel_jump: u64) -> HoldLimits {
        HoldLimits {
            gap_hold_ns: r.gap_hold_us.saturating_mul(1_000).min(i64::MAX as u64) as i64,
            max_hole_ns: ms_to_ns(r.max_hole_ms),
            refill_window_ns: (r.refill_servers() > 0).then(|| {
                ms_to_ns(r.rerequest_timeout_ms).saturating_mul(r.rerequest_attempts as i64)
            }),
            max_packets: r.gap_hold_packets.max(1),
            max_jump: max_channel_jump.max(1),
        }
    }
}

/// How many datagrams the hold may keep for the datagram being judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// R1-R2: only datagrams beyond `next` (a hole) are held, at most
    /// `packets` in this hold: `gap_hold_packets` less what the feed's
    /// other channels hold (it counts the whole feed), as the driver
    /// counts them ([`Hold::room`] for a feed of one channel).
    Hole { packets: usize },
    /// R5: an image is being read: every datagram of the session beyond
    /// what `next` already covers is held, up to these bounds.
    Image { packets: usize, bytes: usize },
}

/// What the driver does with a valid datagram of the current session
/// (not ended, not stale) that [`Hold::judge`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Apply it: nothing held concerns it.
    Process,
    /// C3b: beyond belief even from the furthest datagram held. Apply it
    /// (the channel rules drop it, or resync on the third of a run: the
    /// driver declares every open hole first).
    Unbelieved,
    /// At or below `next` while datagrams are held: apply it; if it moved
    /// `next`, the held datagrams that continue follow (R1 fill).
    Fill,
    /// A copy of a held datagram, or a lagging line's heartbeat: a
    /// duplicate of its source (C2).
    Duplicate,
    /// An end of session at or below `next` while later datagrams are
    /// held: not the provider's, changes nothing (counted with C6's stale
    /// ends).
    StaleEnd,
    /// Dropped, counted here: a conflict (R1), or a line's copy of a
    /// conflicted sequence.
    Ignored,
    /// A conflict removed the last held datagram: dropped, and the hole
    /// closes.
    IgnoredHoleClosed,
    /// Hold it ([`Hold::push`]; the hole opens with the first one held).
    Keep,
    /// Holding one more would exceed the limit: the driver declares the
    /// first hole (R2) or fails the image (R5), then judges it again.
    Full,
}

#[derive(Debug)]
pub struct Hold {
    store: Store,
    /// R1: sequences whose held copy met a conflicting one, ascending; all
    /// at or beyond `next` (pruned as `next` passes them).
    conflicted: Vec<u64>,
    /// Whether a hole is open (`open` until `close`): the store may be
    /// empty meanwhile, after its last datagram was released.
    open: bool,
    /// The open hole's times (kept after it closes: the next `open`
    /// replaces them).
    t_open: i64,
    t_progress: i64,
    limits: HoldLimits,
    /// R4c: whether the refill service can be counted on now.
    window: Window,
    /// R4c `S`: the open hole waits at least until this pause's end plus
    /// the attempts' window (kept after the pause, until the hole closes).
    pause_end: i64,
    /// Entries the store keeps room for (given back to after an image).
    capacity: usize,
    /// R5c step 1: while an image attempt holds and its holes are asked
    /// for, where that stands ([`ImageGaps`]); `None` otherwise.
    gaps: Option<ImageGaps>,
}

/// R5c step 1: the holes among the datagrams an image attempt holds, as
/// the refill service is asked for them: the first one at a time. Kept
/// incrementally (each held datagram is passed over once), so no datagram
/// costs a walk of the hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ImageGaps {
    /// The channel's `next` when the attempt started (it does not move
    /// while the attempt holds), or the end of the last hole given up
    /// (`skip_image_gap`), if later: below it nothing is asked for again.
    base: u64,
    /// The first sequence from `base` that the held datagrams do not cover
    /// one after another (or that a hole given up skipped): the first hole
    /// begins here when a datagram is held beyond it. Every held datagram
    /// whose sequence is at or below it ends at or below it.
    front: u64,
    /// The first hole's open time: the arrival of the first datagram held
    /// beyond it (R2), and its progress (R2: the last arrival that moved
    /// `front` without closing it).
    t_open: i64,
    t_progress: i64,
}

impl Hold {
    /// `holds`: whether the feed holds at all (`Recovery::holds`); a hold
    /// that never holds reserves nothing.
    pub fn new(limits: HoldLimits, holds: bool) -> Hold {
        let capacity = limits.max_packets.min(1 << 16);
        Hold {
            store: if holds {
                Store::with_capacity(capacity)
            } else {
                Store::default()
            },
            conflicted: Vec::new(),
            open: false,
            t_open: 0,
            t_progress: 0,
            limits,
            window: Window::On,
            pause_end: i64::MIN,
            capacity,
            gaps: None,
        }
    }

    pub fn limits(&self) -> &HoldLimits {
        &self.limits
    }

    /// R2: the hole limit of a feed of one channel (`gap_hold_packets`).
    #[inline]
    pub fn room(&self) -> Limit {
        Limit::Hole {
            packets: self.limits.max_packets,
        }
    }

    pub fn state(&self) -> HoleState {
        if self.store.is_empty() {
            HoleState::Live
        } else {
            HoleState::Open {
                t_open: self.t_open,
                t_progress: self.t_progress,
            }
        }
    }

    /// Nothing held and no conflicted sequence remembered: no rule of R1
    /// has anything to do with a datagram that does not go beyond `next`.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.store.is_empty() && self.conflicted.is_empty()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// The held datagram with the lowest sequence.
    #[inline]
    pub fn first(&self) -> Option<&Held> {
        self.store.first()
    }

    /// The sequence after the furthest datagram held (0 when empty).
    #[inline]
    pub fn max_end(&self) -> u64 {
        self.store.max_end()
    }

    /// Memory the held datagrams take now (R5 bounds an image's hold).
    #[inline]
    pub fn bytes(&self) -> usize {
        self.store.bytes()
    }

    /// The held datagrams now, the most held at once and the arena's peak
    /// size so far (bytes).
    pub fn usage(&self) -> (usize, usize, usize) {
        (
            self.store.len(),
            self.store.peak_entries,
            self.store.peak_bytes,
        )
    }

    /// R2: the open time of a hole left when the previous one closed.
    pub fn earliest_arrival(&self) -> Option<i64> {
        self.store.earliest_arrival()
    }

    /// R2: a hole opens at `t_open`.
    pub fn open(&mut self, t_open: i64, counters: &mut RecoveryCounters) {
        counters.holes_opened += 1;
        self.open = true;
        self.t_open = t_open;
        self.t_progress = t_open;
        self.pause_end = match self.window {
            Window::PausedUntil(until) => until,
            _ => i64::MIN,
        };
    }

    /// The hole closed (filled or declared) at `now`: its time is
    /// observed. Without an open hole (an image that ends with nothing
    /// held) nothing is.
    pub fn close(&mut self, now: i64, counters: &mut RecoveryCounters) {
        if std::mem::take(&mut self.open) {
            counters.hole_time.observe(now.saturating_sub(self.t_open));
        }
    }

    /// R4c: what the deadlines count on from now (the refill machine's
    /// [`Availability`](super::refill::Availability) at this time).
    pub fn set_window(&mut self, window: Window) {
        self.window = window;
        if let Window::PausedUntil(until) = window {
            self.pause_end = self.pause_end.max(until);
        }
    }

    /// R2: a datagram filled part of the hole at `now`.
    pub fn progress(&mut self, now: i64) {
        self.t_progress = now;
    }

    /// When the open hole opened (meaningful while one is open).
    #[inline]
    pub fn opened_at(&self) -> i64 {
        self.t_open
    }

    /// R2: the open hole's deadline, never more than `max_hole_ms` after
    /// its open time. Meaningful while a hole is open.
    pub fn deadline(&self) -> i64 {
        self.deadline_of(self.t_open, self.t_progress)
    }

    /// R2: the deadline of a hole opened at `t_open`, progress last at
    /// `t_progress`.
    fn deadline_of(&self, t_open: i64, t_progress: i64) -> i64 {
        let l = &self.limits;
        let held_until = t_open.saturating_add(l.gap_hold_ns);
        let deadline = match (l.refill_window_ns, self.window) {
            // R4c: a service out of reach (not logged in, `M`, `D`, `I`).
            (None, _) | (Some(_), Window::Off) => held_until,
            // R4c `S`: at least the pause's end plus the attempts' window.
            (Some(window), Window::On | Window::PausedUntil(_)) => held_until
                .max(t_progress)
                .max(self.pause_end)
                .saturating_add(window),
        };
        deadline.min(t_open.saturating_add(l.max_hole_ns))
    }

    /// R4: from when the open hole is asked for: `max(t_open +
    /// gap_hold_us, t_progress)`. `None`: no hole is open.
    pub fn ask_from(&self) -> Option<i64> {
        if self.store.is_empty() {
            return None;
        }
        Some(
            self.t_open
                .saturating_add(self.limits.gap_hold_ns)
                .max(self.t_progress),
        )
    }

    /// C3b while datagrams are held: a sequence is judged from the
    /// furthest one held (the provider's stream goes on while `next` waits
    /// for the hole, for as long as an image takes), else from `next`.
    pub fn believed(&self, seq: u64, next: u64) -> bool {
        let from = next.max(self.store.max_end());
        seq <= from || seq - from < self.limits.max_jump
    }

    /// R1: what to do with a valid datagram of the current session (not
    /// ended, not of a replaced session) from `source`, with the channel
    /// at `next`.
    pub fn judge(
        &mut self,
        source: Source,
        header: &Header,
        datagram: &[u8],
        next: u64,
        limit: Limit,
        counters: &mut RecoveryCounters,
    ) -> Step {
        let ch = &header.channel;
        let seq = ch.sequence;
        if !self.conflicted.is_empty() {
            // R1: the lines' copies of a conflicted sequence are dropped
            // until the hole reaches past it; the servers decide.
            let passed = self.conflicted.partition_point(|&c| c < next);
            self.conflicted.drain(..passed);
            if matches!(source, Source::Line(_))
                && ch.kind == PacketKind::Data
                && self.conflicted.binary_search(&seq).is_ok()
            {
                counters.conflict_copies_dropped += 1;
                return Step::Ignored;
            }
        }
        match limit {
            Limit::Image { packets, bytes } => {
                // R5: every datagram of the session is held meanwhile.
                let end = seq.saturating_add(ch.count as u64);
                if ch.kind == PacketKind::Data && end <= next {
                    return Step::Process;
                }
                if !self.believed(seq, next) {
                    return Step::Process;
                }
                if let Some(step) = self.against_held(header, datagram, counters) {
                    return step;
                }
                if self.store.len() >= packets || self.store.bytes() + datagram.len() > bytes {
                    return Step::Full;
                }
                Step::Keep
            }
            Limit::Hole { packets } => {
                if seq > next {
                    if !self.believed(seq, next) {
                        return Step::Unbelieved;
                    }
                    if let Some(step) = self.against_held(header, datagram, counters) {
                        return step;
                    }
                    if self.store.len() >= packets {
                        // R2: holding one more would exceed the bound.
                        return Step::Full;
                    }
                    return Step::Keep;
                }
                if self.store.is_empty() {
                    return Step::Process;
                }
                match ch.kind {
                    // R1: a lagging line's heartbeat changes nothing (no C4).
                    PacketKind::Heartbeat => Step::Duplicate,
                    // C6 below `next`; at `next` while later datagrams are
                    // held it cannot be the provider's: changes nothing.
                    PacketKind::EndOfSession => Step::StaleEnd,
                    PacketKind::Data => Step::Fill,
                }
            }
        }
    }

    /// R1: a datagram beyond `next` against the held ones: the other
    /// line's copy of a held packet adds nothing; one with the same
    /// sequence and message count but other bytes is a conflict: neither is
    /// applied, the held one is removed, and its sequence is missing (its
    /// later copies from the lines are dropped, a server's answer decides).
    /// `None`: hold it.
    fn against_held(
        &mut self,
        header: &Header,
        datagram: &[u8],
        counters: &mut RecoveryCounters,
    ) -> Option<Step> {
        match self.store.compare(header, datagram) {
            Against::New => None,
            Against::Copy => Some(Step::Duplicate),
            Against::Conflict(at) => {
                counters.conflicts += 1;
                let seq = header.channel.sequence;
                self.store.remove(at);
                if self.conflicted.binary_search(&seq).is_err() {
                    if self.conflicted.len() >= CONFLICTS_MAX {
                        // Bounded: the furthest mark goes (the nearest to
                        // `next` are re-requested first).
                        self.conflicted.pop();
                    }
                    let at = self.conflicted.partition_point(|&c| c < seq);
                    self.conflicted.insert(at, seq);
                }
                if let Some(g) = &mut self.gaps {
                    // R5c step 1: what was covered may not be any more.
                    g.front = g.base;
                    self.chain(0);
                }
                if self.store.is_empty() {
                    // Nothing held beyond `next`: no hole is open until a
                    // datagram beyond the conflicted sequence arrives.
                    Some(Step::IgnoredHoleClosed)
                } else {
                    Some(Step::Ignored)
                }
            }
        }
    }

    /// R1: holds `datagram` (after [`Step::Keep`]).
    #[inline]
    pub fn push(&mut self, header: Header, datagram: &[u8], arrival: i64, source: Source) {
        let before = self.image_gap();
        self.store.push(header, datagram, arrival, source);
        if let Some(g) = &mut self.gaps {
            let seq = header.channel.sequence;
            if seq <= g.front {
                // R5c step 1: it continues (or overlaps) what is covered.
                let end = seq.saturating_add(header.channel.count as u64);
                let from = g.front;
                g.front = g.front.max(end);
                self.chain(from);
            }
            self.gap_times(before, arrival);
        }
    }

    /// R5c step 1: an image attempt holds from the channel's `next`
    /// (`Some`; the holes among what it holds are asked for) or no longer
    /// does (`None`).
    pub fn track_image_gaps(&mut self, next: Option<u64>) {
        self.gaps = next.map(|base| ImageGaps {
            base,
            front: base,
            t_open: i64::MIN,
            t_progress: i64::MIN,
        });
        if self.gaps.is_some() {
            self.chain(0);
            self.gap_times(None, i64::MIN);
        }
    }

    /// Moves the front over the held datagrams that continue it, starting
    /// after those at or below `from` (already covered).
    fn chain(&mut self, from: u64) {
        let Some(g) = &mut self.gaps else { return };
        let mut i = self.store.index_beyond(from);
        while let Some(h) = self.store.get(i) {
            if h.sequence() > g.front {
                break;
            }
            g.front = g.front.max(h.end());
            i += 1;
        }
    }

    /// R2's times of the first hole after the front moved from `before`
    /// (the first hole then, if any) at `now`: a new hole opens at the
    /// arrival of the first datagram held beyond it; one the front moved
    /// into progressed.
    fn gap_times(&mut self, before: Option<(u64, u64)>, now: i64) {
        let after = self.image_gap();
        let Some(g) = &mut self.gaps else { return };
        let Some((front, _)) = after else { return };
        match before {
            Some((f0, b0)) if front < b0 => {
                if front > f0 {
                    g.t_progress = now;
                }
            }
            _ => {
                let i = self.store.index_beyond(front);
                let t = self.store.get(i).map_or(now, |h| h.arrival);
                g.t_open = t;
                g.t_progress = t;
            }
        }
    }

    /// R5c step 1: where the first hole among an image attempt's held
    /// datagrams begins (or would begin); `None` when not tracked.
    pub fn image_front(&self) -> Option<u64> {
        self.gaps.map(|g| g.front)
    }

    /// R5c step 1: the first hole among the datagrams an image attempt
    /// holds: its first missing sequence, and the sequence of the first
    /// datagram held beyond it (the hole ends before it). `None`: no hole
    /// (or the attempt's holes are not asked for).
    pub fn image_gap(&self) -> Option<(u64, u64)> {
        let g = self.gaps.as_ref()?;
        let i = self.store.index_beyond(g.front);
        self.store.get(i).map(|h| (g.front, h.sequence()))
    }

    /// R5c step 1: from when the first hole among an image attempt's held
    /// datagrams is asked for (as R4c: `max(t_open + gap_hold_us,
    /// t_progress)`), and R2's deadline it would have without the
    /// attempt: past it the hole is no longer asked for (it is not
    /// declared: it waits for the attempt's end).
    pub fn image_gap_times(&self) -> Option<(i64, i64)> {
        let g = self.gaps.as_ref()?;
        self.image_gap()?;
        let ask_from = g
            .t_open
            .saturating_add(self.limits.gap_hold_ns)
            .max(g.t_progress);
        Some((ask_from, self.deadline_of(g.t_open, g.t_progress)))
    }

    /// R5c step 1: the first hole among an image attempt's held datagrams
    /// is no longer asked for (past its deadline, or the service cannot
    /// fill it): the front moves past it, and the next hole, if any, is
    /// the one asked for. Returns the new front.
    pub fn skip_image_gap(&mut self, now: i64) -> Option<u64> {
        let before = self.image_gap();
        let (_, beyond) = before?;
        let g = self.gaps.as_mut()?;
        let from = g.front;
        g.front = beyond;
        g.base = beyond;
        self.chain(from);
        self.gap_times(None, now);
        self.gaps.map(|g| g.front)
    }

    /// The first held datagram, its bytes into `out`, if it continues from
    /// `next` (or the session ended: every held datagram goes then, C6
    /// drops them).
    pub fn pop_continuing(&mut self, next: u64, ended: bool, out: &mut Vec<u8>) -> Option<Held> {
        let first = self.store.first()?;
        if first.sequence() > next && !ended {
            return None;
        }
        self.store.pop_into(out)
    }

    /// The first held datagram, its bytes into `out` (R2: the first of a
    /// hole declared lost).
    pub fn pop_first(&mut self, out: &mut Vec<u8>) -> Option<Held> {
        self.store.pop_into(out)
    }

    /// R5 step 3: `next` moved to an image's end; conflicted sequences
    /// below it are forgotten.
    pub fn forget_conflicts_below(&mut self, next: u64) {
        self.conflicted.retain(|&seq| seq >= next);
    }

    /// C5: a new session forgets the conflicted sequences.
    pub fn clear_conflicts(&mut self) {
        self.conflicted.clear();
    }

    /// R5: after an image attempt the store gives back what it grew beyond
    /// `gap_hold_packets` entries (only when empty).
    pub fn shrink(&mut self) {
        self.store.shrink_to(self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::conflict_tests::header;
    use super::*;

    const MS: i64 = 1_000_000;

    fn data(seq: u64, count: u16) -> Header {
        header(seq, count, PacketKind::Data)
    }

    fn limits(refill: bool) -> HoldLimits {
        let r = Recovery {
            gap_hold_us: 1_000,
            gap_hold_packets: 3,
            rerequest_servers: usize::from(refill),
            rerequest_timeout_ms: 50,
            rerequest_attempts: 3,
            max_hole_ms: 200,
            ..Recovery::default()
        };
        HoldLimits::new(&r, 1_000)
    }

    /// Judges, and holds what it says to keep (opening the hole with the
    /// first), as a driver does.
    fn offer(
        h: &mut Hold,
        c: &mut RecoveryCounters,
        source: Source,
        hd: Header,
        bytes: &[u8],
        next: u64,
        now: i64,
    ) -> Step {
        let step = h.judge(source, &hd, bytes, next, h.room(), c);
        if step == Step::Keep {
            if h.is_empty() {
                h.open(now, c);
            }
            h.push(hd, bytes, now, source);
        }
        step
    }

    #[test]
    fn a_hole_opens_holds_in_order_and_releases_what_continues() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        assert_eq!(h.state(), HoleState::Live);
        let line = Source::Line(0);
        // next = 5: 5 is missing, 7 and 6 arrive.
        assert_eq!(
            offer(&mut h, &mut c, line, data(7, 1), b"7", 5, 10),
            Step::Keep
        );
        assert_eq!(
            offer(&mut h, &mut c, line, data(6, 1), b"6", 5, 20),
            Step::Keep
        );
        assert_eq!(
            h.state(),
            HoleState::Open {
                t_open: 10,
                t_progress: 10
            }
        );
        assert_eq!(c.holes_opened, 1);
        // The other line's copy takes no room.
        assert_eq!(
            offer(&mut h, &mut c, Source::Line(1), data(7, 1), b"7", 5, 30),
            Step::Duplicate
        );
        // A lagging heartbeat, a stale end, the filling datagram.
        assert_eq!(
            offer(
                &mut h,
                &mut c,
                line,
                header(5, 0, PacketKind::Heartbeat),
                b"h",
                5,
                31
            ),
            Step::Duplicate
        );
        assert_eq!(
            offer(
                &mut h,
                &mut c,
                line,
                header(5, 0, PacketKind::EndOfSession),
                b"e",
                5,
                32
            ),
            Step::StaleEnd
        );
        assert_eq!(
            offer(&mut h, &mut c, line, data(5, 1), b"5", 5, 33),
            Step::Fill
        );
        // The driver applied 5: next is 6; 6 and 7 continue, in order.
        let mut out = Vec::new();
        assert_eq!(h.pop_continuing(6, false, &mut out).unwrap().sequence(), 6);
        assert_eq!(out, b"6");
        assert_eq!(h.pop_continuing(7, false, &mut out).unwrap().sequence(), 7);
        assert!(h.pop_continuing(8, false, &mut out).is_none());
        assert_eq!(h.state(), HoleState::Live);
        h.close(33, &mut c);
        assert_eq!(c.hole_time.count(), 1);
        assert_eq!(c.hole_time.sum_ns, 23);
    }

    #[test]
    fn held_beyond_a_second_hole_stay_until_it_is_reached() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        offer(&mut h, &mut c, Source::Line(0), data(9, 1), b"9", 5, 1);
        let mut out = Vec::new();
        assert!(h.pop_continuing(8, false, &mut out).is_none());
        // After an end of session every held datagram goes.
        assert!(h.pop_continuing(8, true, &mut out).is_some());
    }

    #[test]
    fn deadline_without_and_with_a_refill_service() {
        let mut c = RecoveryCounters::default();
        let mut h = Hold::new(limits(false), true);
        offer(&mut h, &mut c, Source::Line(0), data(7, 1), b"7", 5, 0);
        assert_eq!(h.deadline(), MS, "gap_hold_us");
        assert_eq!(h.ask_from(), Some(MS));

        let mut h = Hold::new(limits(true), true);
        offer(&mut h, &mut c, Source::Line(0), data(7, 1), b"7", 5, 0);
        assert_eq!(h.deadline(), MS + 150 * MS, "hold + attempts x timeout");
        h.progress(40 * MS);
        assert_eq!(h.ask_from(), Some(40 * MS));
        assert_eq!(
            h.deadline(),
            190 * MS,
            "max(t_open + hold, t_progress) + window"
        );
        h.progress(100 * MS);
        assert_eq!(h.deadline(), 200 * MS, "never past max_hole_ms");
    }

    #[test]
    fn full_at_gap_hold_packets() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        for seq in [7, 8, 9] {
            let b = [seq as u8];
            assert_eq!(
                offer(&mut h, &mut c, Source::Line(0), data(seq, 1), &b, 5, 1),
                Step::Keep
            );
        }
        assert_eq!(
            offer(&mut h, &mut c, Source::Line(0), data(10, 1), b"x", 5, 2),
            Step::Full
        );
        assert_eq!(h.len(), 3);
        // The driver's count: what other channels hold leaves less room.
        let shared = Limit::Hole { packets: 2 };
        assert_eq!(
            h.judge(Source::Line(0), &data(11, 1), b"y", 5, shared, &mut c),
            Step::Full
        );
    }

    #[test]
    fn a_hole_time_is_observed_once_per_hole_and_never_without_one() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        // An image that ends with nothing held closes no hole.
        h.close(5 * MS, &mut c);
        assert_eq!(c.hole_time.count(), 0);
        offer(&mut h, &mut c, Source::Line(0), data(7, 1), b"7", 5, MS);
        let mut out = Vec::new();
        h.pop_first(&mut out);
        h.close(3 * MS, &mut c);
        assert_eq!(c.hole_time.count(), 1);
        // Closed again with nothing held since: no second sample.
        h.close(9 * MS, &mut c);
        assert_eq!(c.hole_time.count(), 1);
    }

    #[test]
    fn beyond_belief_is_judged_from_the_furthest_held() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        assert_eq!(
            offer(&mut h, &mut c, Source::Line(0), data(1_005, 1), b"f", 5, 1),
            Step::Unbelieved
        );
        assert_eq!(
            offer(&mut h, &mut c, Source::Line(0), data(900, 1), b"a", 5, 1),
            Step::Keep
        );
        // From 901 on, 1,005 is believable.
        assert_eq!(
            offer(&mut h, &mut c, Source::Line(0), data(1_005, 1), b"f", 5, 1),
            Step::Keep
        );
    }

    #[test]
    fn a_conflict_removes_the_held_copy_and_later_line_copies_are_dropped() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        let line = Source::Line(0);
        offer(&mut h, &mut c, line, data(7, 2), b"seven", 5, 1);
        offer(&mut h, &mut c, line, data(9, 1), b"nine", 5, 1);
        assert_eq!(
            offer(&mut h, &mut c, Source::Line(1), data(7, 2), b"forged", 5, 2),
            Step::Ignored
        );
        assert_eq!(c.conflicts, 1);
        assert_eq!(h.len(), 1);
        assert!(!h.is_idle());
        // The lines' later copies of 7 are dropped; a server's is judged.
        assert_eq!(
            offer(&mut h, &mut c, line, data(7, 2), b"seven", 5, 3),
            Step::Ignored
        );
        assert_eq!(c.conflict_copies_dropped, 1);
        assert_eq!(
            offer(
                &mut h,
                &mut c,
                Source::Rerequest,
                data(7, 2),
                b"seven",
                5,
                3
            ),
            Step::Keep
        );
        // Once `next` passes 7 the mark goes.
        let mut out = Vec::new();
        while h.pop_first(&mut out).is_some() {}
        assert_eq!(
            h.judge(line, &data(8, 1), b"8", 8, h.room(), &mut c),
            Step::Process
        );
        assert!(h.is_idle());
    }

    #[test]
    fn a_conflict_with_the_only_held_datagram_closes_the_hole() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        offer(&mut h, &mut c, Source::Line(0), data(7, 1), b"a", 5, 1);
        assert_eq!(
            offer(&mut h, &mut c, Source::Line(1), data(7, 1), b"b", 5, 2),
            Step::IgnoredHoleClosed
        );
        assert_eq!(h.state(), HoleState::Live);
        h.forget_conflicts_below(8);
        assert!(h.is_idle());
    }

    #[test]
    fn an_image_holds_everything_beyond_next_up_to_its_own_bounds() {
        let mut h = Hold::new(limits(false), true);
        let mut c = RecoveryCounters::default();
        let image = Limit::Image {
            packets: 2,
            bytes: 1 << 20,
        };
        let line = Source::Line(0);
        // Data already covered by `next` is processed; the rest is held,
        // a heartbeat at `next` included, beyond `gap_hold_packets` too.
        assert_eq!(
            h.judge(line, &data(3, 2), b"3", 5, image, &mut c),
            Step::Process
        );
        let hb = header(5, 0, PacketKind::Heartbeat);
        assert_eq!(h.judge(line, &hb, b"h", 5, image, &mut c), Step::Keep);
        h.push(hb, b"h", 1, line);
        assert_eq!(
            h.judge(line, &data(5, 1), b"5", 5, image, &mut c),
            Step::Keep
        );
        h.push(data(5, 1), b"5", 1, line);
        assert_eq!(
            h.judge(line, &data(6, 1), b"6", 5, image, &mut c),
            Step::Full
        );
        let tight = Limit::Image {
            packets: 10,
            bytes: h.bytes(),
        };
        assert_eq!(
            h.judge(line, &data(6, 1), b"6", 5, tight, &mut c),
            Step::Full
        );
        // Beyond belief: processed (the channel rules decide), never held.
        assert_eq!(
            h.judge(line, &data(5_000, 1), b"x", 5, image, &mut c),
            Step::Process
        );
    }

    #[test]
    fn r5c_the_first_hole_among_an_images_held_datagrams_is_kept_as_they_arrive() {
        let mut h = Hold::new(limits(true), true);
        let mut c = RecoveryCounters::default();
        let image = Limit::Image {
            packets: 100,
            bytes: 1 << 20,
        };
        // The attempt starts with the channel at 5.
        h.track_image_gaps(Some(5));
        let mut keep = |h: &mut Hold, seq: u64, count: u16, bytes: &[u8], now: i64| {
            let hd = data(seq, count);
            let step = h.judge(Source::Line(0), &hd, bytes, 5, image, &mut c);
            if step == Step::Keep {
                h.push(hd, bytes, now, Source::Line(0));
            }
            step
        };
        assert_eq!(keep(&mut h, 5, 2, b"5", 10 * MS), Step::Keep);
        assert_eq!((h.image_front(), h.image_gap()), (Some(7), None));
        // 7 and 8 missing: the hole opens at 9's arrival.
        keep(&mut h, 9, 1, b"9", 20 * MS);
        assert_eq!(h.image_gap(), Some((7, 9)));
        // Asked from t_open + gap_hold_us; R2: + 3 x 50 ms.
        assert_eq!(h.image_gap_times(), Some((21 * MS, 171 * MS)));
        // 7 fills part of it: progress.
        keep(&mut h, 7, 1, b"7", 30 * MS);
        assert_eq!(h.image_gap(), Some((8, 9)));
        assert_eq!(h.image_gap_times(), Some((30 * MS, 180 * MS)));
        keep(&mut h, 12, 1, b"12", 40 * MS);
        keep(&mut h, 14, 1, b"14", 41 * MS);
        // 8 closes it: the next hole (10, 11) opened at 12's arrival.
        keep(&mut h, 8, 1, b"8", 50 * MS);
        assert_eq!(h.image_gap(), Some((10, 12)));
        assert_eq!(h.image_gap_times().map(|t| t.0), Some(41 * MS));
        // Given up: the next one (13) is the first, opened at 14's arrival.
        assert_eq!(h.skip_image_gap(60 * MS), Some(13));
        assert_eq!(h.image_gap(), Some((13, 14)));
        assert_eq!(h.image_gap_times().map(|t| t.0), Some(42 * MS));
        // A conflict removes 12: the hole given up is not asked for again.
        assert_eq!(keep(&mut h, 12, 1, b"XX", 70 * MS), Step::Ignored);
        assert_eq!(h.image_gap(), Some((12, 14)));
        // Not tracked once the attempt ends.
        h.track_image_gaps(None);
        assert_eq!((h.image_front(), h.image_gap()), (None, None));
    }
}
