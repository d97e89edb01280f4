//! Symbol rules S1-S8 of `semantics.md`: one symbol's state and what a
//! Quote, Heartbeat or Snapshot does to it. Pure: time is `ctx.now`.
//!
//! C5 is applied lazily here (`catch_up`): a session change only bumps the
//! feed's `session_epoch`; each symbol forgets its sequence when its next
//! message arrives (and the verdict resolves it meanwhile). C3 needs no
//! catching up: verified means `verified_epoch == ctx.gap_epoch` (S7).

use super::counters::FeedCounters;
use super::settings::Mode;
use super::view::{
    SuspectCause, SymbolView, SYM_ASK, SYM_BID, SYM_HALTED, SYM_HAS_QUOTE, SYM_HAS_SEQ,
};
use crate::feed::clock::ts_i64;
pub use crate::venue::EntryOutcome;
use crate::wire::{Heartbeat, Quote, Side, Symbol, FLAG_ASK, FLAG_BID};

/// What the symbol rules need to know about the feed, per message.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub mode: Mode,
    /// S5 `max_seq_jump` (>= 1).
    pub max_jump: u64,
    pub gap_epoch: u32,
    pub session_epoch: u16,
    pub now: i64,
}

/// One symbol of a feed: the published view plus writer-only bookkeeping.
///
/// `repr(C)` with the fields every message touches first (the index
/// compares `symbol`, an in-sequence Quote writes `view` and `run_len`):
/// `HOT_BYTES` (104) of 112 bytes, aligned so that a slot is exactly two
/// cache lines. The counters a message rarely touches live beside it, in
/// the feed's `SymbolTally` of the same slot (BENCHMARKS.md, "With symbols
/// of up to 20 characters").
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct SymbolState {
    pub symbol: Symbol,
    pub view: SymbolView,
    /// S5r: length of the current run of S5-rejected Quotes (0: none) and
    /// the seq that would extend it.
    pub run_len: u8,
    pub configured: bool,
    /// V2: one bit per venue halt source (trading status, operational
    /// halt, quote flag...); `SYM_HALTED` is set while any is.
    pub halt_sources: u8,
    pub run_next: u64,
}

/// The leading bytes of `SymbolState` that the common case touches.
pub const HOT_BYTES: usize = std::mem::offset_of!(SymbolState, run_next);
const _: () = assert!(
    std::mem::size_of::<SymbolState>() == 128,
    "a symbol's state is two cache lines"
);

/// One symbol's counters of what the rules dropped or repaired: touched
/// only off the common path, so kept out of `SymbolState`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SymbolTally {
    pub ticks_lost: u64,
    pub stale_dropped: u64,
    pub seq_anomalies: u64,
    pub seq_resyncs: u64,
    pub snapshots_applied: u64,
}

/// A feed's symbols by slot: their states, and beside them their tallies
/// (one per state, pushed together). Reads and writes of the states go
/// through the slice it derefs to.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    states: Vec<SymbolState>,
    tallies: Vec<SymbolTally>,
}

impl Symbols {
    pub fn with_capacity(capacity: usize) -> Symbols {
        Symbols {
            states: Vec::with_capacity(capacity),
            tallies: Vec::with_capacity(capacity),
        }
    }

    /// A new symbol's state, with an empty tally, in the next slot.
    pub fn push(&mut self, state: SymbolState) {
        self.states.push(state);
        self.tallies.push(SymbolTally::default());
    }

    pub fn tally(&self, slot: u32) -> SymbolTally {
        self.tallies[slot as usize]
    }

    /// Slot `slot`'s state, and its tally counted with the feed's counters.
    #[inline]
    pub fn counted<'a>(
        &'a mut self,
        slot: u32,
        feed: &'a mut FeedCounters,
    ) -> Option<(&'a mut SymbolState, Counts<'a>)> {
        let state = self.states.get_mut(slot as usize)?;
        let symbol = &mut self.tallies[slot as usize];
        Some((state, Counts { feed, symbol }))
    }

    /// Slot `to` shows slot `from`'s state and tally (`SymbolState::show`);
    /// false (nothing done) for one slot or a slot that does not exist.
    pub fn mirror(&mut self, from: u32, to: u32) -> bool {
        let (from, to) = (from as usize, to as usize);
        if from == to || from >= self.states.len() || to >= self.states.len() {
            return false;
        }
        let src = self.states[from].clone();
        self.states[to].show(&src);
        self.tallies[to] = self.tallies[from];
        true
    }

    /// Slot `slot` shows `fresh` (`SymbolState::show`), its tally emptied.
    pub fn reset(&mut self, slot: u32, fresh: &SymbolState) {
        if let Some(st) = self.states.get_mut(slot as usize) {
            st.show(fresh);
            self.tallies[slot as usize] = SymbolTally::default();
        }
    }
}

impl std::ops::Deref for Symbols {
    type Target = [SymbolState];
    fn deref(&self) -> &[SymbolState] {
        &self.states
    }
}

impl std::ops::DerefMut for Symbols {
    fn deref_mut(&mut self) -> &mut [SymbolState] {
        &mut self.states
    }
}

/// The feed's counters and one symbol's tally, counted together.
pub struct Counts<'a> {
    pub feed: &'a mut FeedCounters,
    pub symbol: &'a mut SymbolTally,
}

impl Counts<'_> {
    #[inline]
    fn resync(&mut self) {
        self.feed.seq_resyncs += 1;
        self.symbol.seq_resyncs += 1;
    }

    #[inline]
    fn anomaly(&mut self) {
        self.feed.seq_anomalies += 1;
        self.symbol.seq_anomalies += 1;
    }

    #[inline]
    fn stale(&mut self) {
        self.feed.stale_dropped += 1;
        self.symbol.stale_dropped += 1;
    }

    #[inline]
    fn lost(&mut self, n: u64) {
        self.feed.ticks_lost = self.feed.ticks_lost.saturating_add(n);
        self.symbol.ticks_lost = self.symbol.ticks_lost.saturating_add(n);
    }

    #[inline]
    fn snapshot_applied(&mut self) {
        self.feed.snapshots_applied += 1;
        self.symbol.snapshots_applied += 1;
    }
}

/// S5: `seq` differs from `expected` (= last_seq + 1) by `max_jump` or more,
/// either way.
#[inline]
fn unbelievable(seq: u64, expected: u64, max_jump: u64) -> bool {
    seq.abs_diff(expected) >= max_jump
}

/// What S1-S5 make of a message's own sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// S1 (no `last_seq`) or S5r's third rejected message: a new baseline.
    Baseline,
    /// S5: refused; `changed` when the cause became `seq_anomaly`.
    Refused { changed: bool },
    /// S2: old or repeated.
    Stale,
    /// S3: beyond `last_seq + 1` (the loss counted).
    Gap,
    /// S4: `last_seq + 1`.
    InOrder,
}

/// The words of a view that make its shown quote (whether it has one and
/// which sides, each side's price and size), read before a change to
/// compare with after (`note_quote_change`).
type ShownQuote = [u64; 5];

#[inline(always)]
fn shown_quote(v: &SymbolView) -> ShownQuote {
    [
        u64::from(v.flags & (SYM_HAS_QUOTE | SYM_BID | SYM_ASK)),
        v.bid_px as u64,
        v.bid_qty,
        v.ask_px as u64,
        v.ask_qty,
    ]
}

/// gate.md "One symbol on several feeds" (`crossed`): the receive time at
/// which the quote last changed, moved only by a new value of a side's
/// price or size, a side appearing or going, or a first quote; a message
/// that repeats the same quote leaves it. A side's price and size count
/// only where the quote shows the side after: where it did not before,
/// the flags differ already, and what an empty side holds is not shown.
/// Branch-free: it runs on every quote applied.
#[inline(always)]
fn note_quote_change(v: &mut SymbolView, before: ShownQuote, now: i64) {
    let after = shown_quote(v);
    let bid = u64::from(v.flags & SYM_BID != 0).wrapping_neg();
    let ask = u64::from(v.flags & SYM_ASK != 0).wrapping_neg();
    let differ = (before[0] ^ after[0])
        | (((before[1] ^ after[1]) | (before[2] ^ after[2])) & bid)
        | (((before[3] ^ after[3]) | (before[4] ^ after[4])) & ask);
    if differ != 0 {
        v.quote_changed_at = now;
    }
}

impl SymbolState {
    pub fn new(
        symbol: Symbol,
        gap_epoch: u32,
        session_epoch: u16,
        stale_ms: u64,
        source_max_age_ms: u64,
    ) -> SymbolState {
        SymbolState {
            symbol,
            view: SymbolView {
                // A new symbol has nothing to verify: it did not exist
                // when earlier gaps happened.
                verified_epoch: gap_epoch,
                session_epoch,
                stale_ms: stale_ms.min(u32::MAX as u64) as u32,
                source_max_age_ms: source_max_age_ms.min(u32::MAX as u64) as u32,
                ..SymbolView::default()
            },
            run_len: 0,
            run_next: 0,
            configured: false,
            halt_sources: 0,
        }
    }

    #[inline]
    fn cause(&self) -> SuspectCause {
        SuspectCause::from_u8(self.view.cause)
    }

    #[inline]
    fn set_cause(&mut self, cause: SuspectCause) {
        self.view.cause = cause as u8;
    }

    #[inline]
    fn verified(&self, ctx: &Ctx) -> bool {
        self.view.verified_epoch == ctx.gap_epoch
    }

    /// S7: verified again (clears only the channel gap).
    #[inline]
    fn verify(&mut self, ctx: &Ctx) {
        self.view.verified_epoch = ctx.gap_epoch;
    }

    /// "healthy": a quote and a `last_seq`, not suspect, verified.
    #[inline]
    fn healthy(&self, ctx: &Ctx) -> bool {
        self.view.flags & (SYM_HAS_QUOTE | SYM_HAS_SEQ) == SYM_HAS_QUOTE | SYM_HAS_SEQ
            && self.view.cause == SuspectCause::None as u8
            && self.verified(ctx)
    }

    /// C5, applied when this symbol first meets the new session.
    #[inline]
    fn catch_up(&mut self, ctx: &Ctx) -> bool {
        if self.view.session_epoch == ctx.session_epoch {
            return false;
        }
        self.forget_session(ctx.session_epoch);
        true
    }

    /// C5: forget the sequence (the number shown stays), a quoted symbol
    /// becomes suspect `session_change`, one without a quote loses any
    /// cause; a pending S5r run ends; the trading state is forgotten (V2).
    pub fn forget_session(&mut self, session_epoch: u16) {
        self.view.flags &= !(SYM_HAS_SEQ | SYM_HALTED);
        self.halt_sources = 0;
        self.set_cause(if self.view.has_quote() {
            SuspectCause::SessionChange
        } else {
            SuspectCause::None
        });
        self.run_len = 0;
        self.view.session_epoch = session_epoch;
    }

    /// S4 (and S1's apply): sides, `last_seq`, `alive_at`, `quote_source_ts`.
    /// Always inlined: it is most of a quote's cost, and out of line (as
    /// the compiler chose once it also noted the quote's change) it cost a
    /// call and its spills on every quote.
    #[inline(always)]
    fn apply_quote(&mut self, q: &Quote, ctx: &Ctx) {
        let before = shown_quote(&self.view);
        let v = &mut self.view;
        match ctx.mode {
            // Full: the Quote is the whole quote; an unflagged side is empty.
            Mode::Full => {
                v.bid_px = q.bid_px;
                v.bid_qty = q.bid_qty;
                v.ask_px = q.ask_px;
                v.ask_qty = q.ask_qty;
                v.flags = (v.flags & !(SYM_BID | SYM_ASK))
                    | if q.flags & FLAG_BID != 0 { SYM_BID } else { 0 }
                    | if q.flags & FLAG_ASK != 0 { SYM_ASK } else { 0 };
            }
            // Delta: only the flagged sides change.
            Mode::Delta => {
                if q.flags & FLAG_BID != 0 {
                    v.bid_px = q.bid_px;
                    v.bid_qty = q.bid_qty;
                    v.flags |= SYM_BID;
                }
                if q.flags & FLAG_ASK != 0 {
                    v.ask_px = q.ask_px;
                    v.ask_qty = q.ask_qty;
                    v.flags |= SYM_ASK;
                }
            }
        }
        v.flags |= SYM_HAS_QUOTE | SYM_HAS_SEQ;
        v.seq = q.seq;
        v.alive_at = ctx.now;
        v.source_ts = ts_i64(q.source_ts);
        note_quote_change(&mut self.view, before, ctx.now);
    }

    /// S1: a new baseline from a Quote (no `last_seq`, or S5r).
    fn baseline(&mut self, q: &Quote, ctx: &Ctx) {
        self.apply_quote(q, ctx);
        self.run_len = 0;
        match ctx.mode {
            // Full: trustworthy from this Quote on (S7: an applied full Quote).
            Mode::Full => {
                self.set_cause(SuspectCause::None);
                self.verify(ctx);
            }
            // Delta: unknown sides; keep the cause it had, else no_snapshot.
            Mode::Delta => {
                if self.cause() == SuspectCause::None {
                    self.set_cause(SuspectCause::NoSnapshot);
                }
            }
        }
    }

    /// S1-S5 for a message with its own sequence `seq` (a Quote, or an
    /// entry of a venue that numbers each instrument's updates): what the
    /// sequence says, with the counters and the S5/S5r bookkeeping done.
    /// The caller applies the message's content as the step says.
    #[inline]
    /// `contradicts_old`: a `seq` at or below `last_seq` contradicts the
    /// sequence (venues.md `cme-mdp3`, Entries; it replaces S2 there).
    fn sequence_step(
        &mut self,
        seq: u64,
        contradicts_old: bool,
        ctx: &Ctx,
        c: &mut Counts<'_>,
    ) -> Step {
        if !self.view.has_seq() {
            return Step::Baseline; // S1
        }
        let last = self.view.seq;
        let expected = last.saturating_add(1);
        if unbelievable(seq, expected, ctx.max_jump) {
            // S5r: a run of rejected messages with consecutive seqs.
            if self.run_len > 0 && seq == self.run_next {
                self.run_len += 1;
            } else {
                self.run_len = 1;
            }
            self.run_next = seq.wrapping_add(1);
            if self.run_len >= 3 {
                // The third is a new baseline, not a rejection.
                c.resync();
                return Step::Baseline;
            }
            // S5: not applied, `last_seq` unchanged, liveness unchanged.
            c.anomaly();
            let changed = self.cause() != SuspectCause::SeqAnomaly;
            self.set_cause(SuspectCause::SeqAnomaly);
            return Step::Refused { changed };
        }
        // Any message not rejected by S5 ends an S5r run.
        self.run_len = 0;
        if seq <= last && contradicts_old {
            // cme-mdp3: CME never repeats an RptSeq, so the sequence held
            // came from something this feed should not have believed:
            // nothing changes, suspect `seq_anomaly`.
            c.anomaly();
            let changed = self.cause() != SuspectCause::SeqAnomaly;
            self.set_cause(SuspectCause::SeqAnomaly);
            return Step::Refused { changed };
        }
        if seq <= last {
            // S2: old or repeated, changes nothing.
            c.stale();
            return Step::Stale;
        }
        if seq > expected {
            // S3: forward gap, counted once (last_seq moves past it).
            let lost = seq - expected;
            c.lost(lost);
            return Step::Gap;
        }
        Step::InOrder
    }

    /// A Quote (`seq >= 1`) reaching the symbol. Returns whether the view
    /// changed.
    pub fn on_quote(&mut self, q: &Quote, ctx: &Ctx, c: &mut Counts<'_>) -> bool {
        let caught_up = self.catch_up(ctx);
        let had_quote = self.view.has_quote();
        match self.sequence_step(q.seq, false, ctx, c) {
            Step::Baseline => self.baseline(q, ctx),
            Step::Refused { changed } => return changed || caught_up,
            Step::Stale => return caught_up,
            Step::Gap => {
                self.apply_quote(q, ctx);
                match ctx.mode {
                    // The Quote is the new whole price (S7: applied full Quote).
                    Mode::Full => {
                        self.set_cause(SuspectCause::None);
                        self.verify(ctx);
                    }
                    Mode::Delta => self.set_cause(SuspectCause::Gap),
                }
            }
            Step::InOrder => {
                // S4 in sequence; S7: `seq = last_seq + 1` verifies.
                self.apply_quote(q, ctx);
                self.verify(ctx);
                match ctx.mode {
                    Mode::Full => self.set_cause(SuspectCause::None),
                    // A delta symbol's first Quote (after a Heartbeat baseline)
                    // leaves it without a whole quote: no_snapshot (S1).
                    Mode::Delta => {
                        if !had_quote && self.cause() == SuspectCause::None {
                            self.set_cause(SuspectCause::NoSnapshot);
                        }
                    }
                }
            }
        }
        true
    }

    /// A Heartbeat (`next_seq >= 1`) reaching the symbol (S1, S5, S6).
    pub fn on_heartbeat(&mut self, h: &Heartbeat, ctx: &Ctx, c: &mut Counts<'_>) -> bool {
        let caught_up = self.catch_up(ctx);
        if !self.view.has_seq() {
            // S1: sets last_seq = next_seq - 1 and nothing else.
            self.view.seq = h.next_seq - 1;
            self.view.flags |= SYM_HAS_SEQ;
            return true;
        }
        let expected = self.view.seq.saturating_add(1);
        if unbelievable(h.next_seq, expected, ctx.max_jump) {
            // S5 (Heartbeats neither extend nor end an S5r run).
            c.anomaly();
            let changed = self.cause() != SuspectCause::SeqAnomaly;
            self.set_cause(SuspectCause::SeqAnomaly);
            return changed || caught_up;
        }
        if h.next_seq > expected {
            // S6 e > 0: count once, move last_seq, suspect gap, no liveness.
            let lost = h.next_seq - expected;
            c.lost(lost);
            self.view.seq = h.next_seq - 1;
            self.set_cause(SuspectCause::Gap);
            true
        } else if h.next_seq == expected {
            // S6 e = 0: alive, and verified (S7).
            self.view.alive_at = ctx.now;
            self.verify(ctx);
            true
        } else {
            // S6 e < 0: old heartbeat, dropped and counted.
            c.stale();
            caught_up
        }
    }

    /// A Snapshot reaching the symbol (S5, S8).
    pub fn on_snapshot(&mut self, s: &Quote, ctx: &Ctx, c: &mut Counts<'_>) -> bool {
        let caught_up = self.catch_up(ctx);
        let healthy = self.healthy(ctx);
        if healthy
            && !s.reset()
            && unbelievable(s.seq, self.view.seq.saturating_add(1), ctx.max_jump)
        {
            // S5: a Snapshot without RESET reaching a healthy symbol.
            c.anomaly();
            self.set_cause(SuspectCause::SeqAnomaly);
            return true;
        }
        // S8: applied when suspect/unverified/no quote/no seq (= not
        // healthy), or newer, or RESET.
        if !healthy || s.seq > self.view.seq || s.reset() {
            let before = shown_quote(&self.view);
            let v = &mut self.view;
            v.bid_px = s.bid_px;
            v.bid_qty = s.bid_qty;
            v.ask_px = s.ask_px;
            v.ask_qty = s.ask_qty;
            v.flags = SYM_HAS_QUOTE
                | SYM_HAS_SEQ
                | if s.flags & FLAG_BID != 0 { SYM_BID } else { 0 }
                | if s.flags & FLAG_ASK != 0 { SYM_ASK } else { 0 };
            v.seq = s.seq;
            v.alive_at = ctx.now;
            v.source_ts = ts_i64(s.source_ts);
            v.cause = SuspectCause::None as u8;
            note_quote_change(&mut self.view, before, ctx.now);
            self.verify(ctx);
            c.snapshot_applied();
            return true;
        }
        // A duplicate or a late copy: never roll a healthy symbol back.
        c.feed.snapshots_ignored += 1;
        caught_up
    }
}

/// The symbol rules of venue feeds (venues.md): V1 replaces S1-S6 (no
/// per-symbol sequence), V2 adds the trading state. Pure, like the rest.
impl SymbolState {
    /// V1: a venue quote is the whole quote (S4 on a full feed): both sides
    /// replaced (an empty side is `None`), `seq` = the channel sequence of
    /// the message that set it, `alive_at = now`, verified (S7). It clears
    /// the symbol's own cause except `gap`, which on nasdaq-itch (order
    /// table overflow) lasts until the next session, even once the book
    /// quotes again.
    pub fn on_venue_quote(
        &mut self,
        seq: u64,
        source_ts: i64,
        bid: Option<Side>,
        ask: Option<Side>,
        ctx: &Ctx,
    ) {
        self.catch_up(ctx);
        let before = shown_quote(&self.view);
        self.set_sides(bid, ask);
        note_quote_change(&mut self.view, before, ctx.now);
        self.mark_applied(seq, source_ts, ctx);
        if self.cause() != SuspectCause::Gap {
            self.set_cause(SuspectCause::None);
        }
        self.verify(ctx);
    }

    /// S4's bookkeeping of an applied message: `last_seq`, `alive_at`,
    /// `quote_source_ts`.
    #[inline]
    fn mark_applied(&mut self, seq: u64, source_ts: i64, ctx: &Ctx) {
        let v = &mut self.view;
        v.flags |= SYM_HAS_SEQ;
        v.seq = seq;
        v.alive_at = ctx.now;
        v.source_ts = source_ts;
    }

    /// The whole quote's sides (an empty side is `None`): a quote now.
    #[inline]
    fn set_sides(&mut self, bid: Option<Side>, ask: Option<Side>) {
        let v = &mut self.view;
        let b = bid.unwrap_or_default();
        let a = ask.unwrap_or_default();
        v.bid_px = b.px;
        v.bid_qty = b.qty;
        v.ask_px = a.px;
        v.ask_qty = a.qty;
        v.flags = (v.flags & !(SYM_BID | SYM_ASK))
            | SYM_HAS_QUOTE
            | if bid.is_some() { SYM_BID } else { 0 }
            | if ask.is_some() { SYM_ASK } else { 0 };
    }

    /// recovery.md R5, before a snapshot is applied: the session caught up
    /// with, no cause (the snapshot's books are whole), no trading state
    /// (the snapshot's replaces it) and, for a symbol that had a quote, an
    /// empty book quoted at `seq` (the snapshot quotes what it names).
    pub fn reset_for_snapshot(&mut self, seq: u64, ctx: &Ctx) {
        self.catch_up(ctx);
        self.halt_sources = 0;
        self.view.flags &= !SYM_HALTED;
        self.set_cause(SuspectCause::None);
        if self.view.has_quote() {
            self.on_venue_quote(seq, i64::MIN, None, None, ctx);
        }
    }

    /// recovery.md R5c step 2: a spin of the symbol's unit makes its book
    /// whole again: no cause (the spin's own messages may give one back).
    /// Its trading state and quote stay until the spin sets them.
    pub fn reset_for_spin(&mut self, ctx: &Ctx) {
        self.catch_up(ctx);
        self.set_cause(SuspectCause::None);
    }

    /// V2: halt source `source` (a bit) says halted or not. Returns whether
    /// the view changed.
    pub fn set_halt(&mut self, source: u8, halted: bool, ctx: &Ctx) -> bool {
        let caught_up = self.catch_up(ctx);
        if halted {
            self.halt_sources |= source;
        } else {
            self.halt_sources &= !source;
        }
        let flags = if self.halt_sources != 0 {
            self.view.flags | SYM_HALTED
        } else {
            self.view.flags & !SYM_HALTED
        };
        let changed = flags != self.view.flags;
        self.view.flags = flags;
        changed || caught_up
    }

    /// nasdaq-itch: an Add that did not fit the order table; the book is
    /// incomplete until the next session (cause `gap`).
    pub fn suspect_gap(&mut self, ctx: &Ctx) -> bool {
        let caught_up = self.catch_up(ctx);
        let changed = self.cause() != SuspectCause::Gap;
        self.set_cause(SuspectCause::Gap);
        changed || caught_up
    }
}

/// The symbol rules of a venue whose updates carry each instrument's own
/// sequence (venues.md `cme-mdp3`: every entry is a message of its
/// instrument, `seq = RptSeq`, delta mode). Pure, like the rest.
impl SymbolState {
    /// One entry: S1-S5 on `seq`; applying it (S4) sets `last_seq`,
    /// `alive_at` and `quote_source_ts`, never the quote's sides (the
    /// venue sets those from its book after the packet). Delta: S4 clears
    /// no cause, `seq = last_seq + 1` verifies (S7). A first entry with
    /// seq 1 starts the instrument from an empty book: no cause, verified.
    /// `new` (an entry of a packet processed now, not a kept one replayed):
    /// a `seq` at or below `last_seq` contradicts the sequence instead of
    /// being S2's (cme-mdp3, Entries): `Refused`, suspect `seq_anomaly`.
    /// Returns what happened and whether the view changed.
    pub fn on_entry(
        &mut self,
        seq: u64,
        source_ts: i64,
        new: bool,
        ctx: &Ctx,
        c: &mut Counts<'_>,
    ) -> (EntryOutcome, bool) {
        let caught_up = self.catch_up(ctx);
        let first = !self.view.has_seq();
        let mut fresh = false;
        match self.sequence_step(seq, new, ctx, c) {
            Step::Refused { changed } => return (EntryOutcome::Refused, changed || caught_up),
            Step::Stale => return (EntryOutcome::NotApplied, caught_up),
            Step::Baseline if first && seq == 1 => {
                fresh = true;
                self.set_cause(SuspectCause::None);
                self.verify(ctx);
            }
            // S1 on a delta feed: the book is unknown until a snapshot.
            Step::Baseline => {
                if self.cause() == SuspectCause::None {
                    self.set_cause(SuspectCause::NoSnapshot);
                }
            }
            Step::Gap => self.set_cause(SuspectCause::Gap),
            Step::InOrder => self.verify(ctx),
        }
        self.mark_applied(seq, source_ts, ctx);
        (EntryOutcome::Applied { fresh }, true)
    }

    /// The venue's book gave a new level 1: it is the quote (an empty side
    /// is `None`); sequence, liveness and cause stay.
    pub fn set_book_quote(&mut self, bid: Option<Side>, ask: Option<Side>, ctx: &Ctx) {
        self.catch_up(ctx);
        self.set_sides(bid, ask);
    }

    /// A snapshot the venue used (venues.md `cme-mdp3`, Snapshots; it
    /// replaces S8): `last_seq = seq`, `alive_at = now`, `quote_source_ts`,
    /// the whole quote, every cause cleared, verified.
    pub fn use_snapshot(
        &mut self,
        seq: u64,
        source_ts: i64,
        bid: Option<Side>,
        ask: Option<Side>,
        ctx: &Ctx,
        c: &mut Counts<'_>,
    ) {
        self.catch_up(ctx);
        let before = shown_quote(&self.view);
        self.set_sides(bid, ask);
        note_quote_change(&mut self.view, before, ctx.now);
        self.mark_applied(seq, source_ts, ctx);
        self.run_len = 0;
        self.set_cause(SuspectCause::None);
        self.verify(ctx);
        c.snapshot_applied();
    }

    /// A venue's channel reset: the sequence and trading state forgotten
    /// as by a session change (C5), in the same session.
    pub fn forget_sequence(&mut self, ctx: &Ctx) {
        self.catch_up(ctx);
        self.forget_session(ctx.session_epoch);
    }

    /// Suspect `cause` unless the symbol already has one (a book that can
    /// no longer be trusted). Returns whether the view changed.
    pub fn suspect_unless_caused(&mut self, cause: SuspectCause, ctx: &Ctx) -> bool {
        let caught_up = self.catch_up(ctx);
        if self.cause() != SuspectCause::None {
            return caught_up;
        }
        self.set_cause(cause);
        true
    }

    /// Another name of the same instrument: this slot shows `other`'s
    /// state, keeping what belongs to its own name (the symbol, and the
    /// thresholds and `configured` an operator set for it).
    pub fn show(&mut self, other: &SymbolState) {
        let own = (
            self.symbol,
            self.configured,
            self.view.stale_ms,
            self.view.source_max_age_ms,
        );
        *self = other.clone();
        (
            self.symbol,
            self.configured,
            self.view.stale_ms,
            self.view.source_max_age_ms,
        ) = own;
    }

    /// Whether the symbol waits for a snapshot: suspect (any cause),
    /// unverified, or without a sequence.
    pub fn waits(&self, ctx: &Ctx) -> bool {
        let session_current = self.view.session_epoch == ctx.session_epoch;
        !session_current
            || !self.view.has_seq()
            || self.cause() != SuspectCause::None
            || !self.verified(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(bid: Option<(i64, u64)>, ask: Option<(i64, u64)>) -> SymbolView {
        let mut v = SymbolView {
            flags: SYM_HAS_QUOTE,
            ..SymbolView::default()
        };
        if let Some((px, qty)) = bid {
            (v.bid_px, v.bid_qty, v.flags) = (px, qty, v.flags | SYM_BID);
        }
        if let Some((px, qty)) = ask {
            (v.ask_px, v.ask_qty, v.flags) = (px, qty, v.flags | SYM_ASK);
        }
        v
    }

    /// gate.md `crossed`: the shown quote's change time moves on a new
    /// price or size, a side appearing or going, or a first quote, and
    /// never on what an empty side holds or on fields outside the quote.
    #[test]
    fn the_quote_change_time_moves_only_when_the_shown_quote_changes() {
        let changed = |before: SymbolView, after: SymbolView| {
            let mut v = after;
            v.quote_changed_at = 1;
            note_quote_change(&mut v, shown_quote(&before), 2);
            v.quote_changed_at == 2
        };
        let q = quoted(Some((100, 5)), Some((101, 7)));
        assert!(!changed(q, q));
        let mut later = q;
        (later.seq, later.alive_at, later.source_ts) = (9, 9, 9);
        assert!(!changed(q, later), "seq and times are not the quote");
        assert!(changed(q, quoted(Some((100, 6)), Some((101, 7)))));
        assert!(changed(q, quoted(Some((99, 5)), Some((101, 7)))));
        assert!(changed(q, quoted(Some((100, 5)), Some((102, 7)))));
        assert!(changed(q, quoted(Some((100, 5)), Some((101, 8)))));
        assert!(changed(q, quoted(Some((100, 5)), None)), "a side goes");
        assert!(changed(quoted(None, Some((101, 7))), q), "a side appears");
        assert!(
            changed(SymbolView::default(), quoted(None, None)),
            "a first quote"
        );
        // What an empty side holds is not shown.
        let mut stale = quoted(None, Some((101, 7)));
        (stale.bid_px, stale.bid_qty) = (55, 3);
        assert!(!changed(quoted(None, Some((101, 7))), stale));
    }
}
