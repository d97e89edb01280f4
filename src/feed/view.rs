//! The plain-data views the check reads, and the seam through which a feed
//! publishes them (`Publish`). Views are integers only (no pointers), sizes
//! are multiples of 8 bytes, so a concurrent table can store them as u64
//! words in seqlock slots.
//!
//! C3 (channel gap), C5 (session change) and C6 (end of session) touch every
//! symbol of a feed. To keep them O(1) per packet they are epochs in
//! `FeedView` compared with the symbol's own epochs in `SymbolView`:
//! - a symbol is verified (S7) iff `verified_epoch == feed.gap_epoch`;
//! - a symbol whose `session_epoch != feed.session_epoch` has not yet seen
//!   the session change: it is resolved lazily (by the symbol rules when its
//!   next message arrives, and by the verdict meanwhile);
//! - `FEED_ENDED` in `FeedView` is C6.

use crate::wire::{Side, Symbol};

/// One suspect cause (semantics.md "one cause"). `ChannelGap` and
/// `SessionEnded` are only ever reported (they come from feed epochs and
/// flags); a symbol's own stored cause is one of the others or `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum SuspectCause {
    #[default]
    None = 0,
    Gap = 1,
    ChannelGap = 2,
    SeqAnomaly = 3,
    SessionChange = 4,
    NoSnapshot = 5,
    SessionEnded = 6,
    /// R3: the feed has an open hole (reported only, never stored).
    Recovering = 7,
}

impl SuspectCause {
    pub fn from_u8(v: u8) -> SuspectCause {
        match v {
            1 => SuspectCause::Gap,
            2 => SuspectCause::ChannelGap,
            3 => SuspectCause::SeqAnomaly,
            4 => SuspectCause::SessionChange,
            5 => SuspectCause::NoSnapshot,
            6 => SuspectCause::SessionEnded,
            7 => SuspectCause::Recovering,
            _ => SuspectCause::None,
        }
    }

    /// Whether `v` is the code of a cause (`from_u8` reads any other as
    /// `None`).
    pub fn is_code(v: u8) -> bool {
        v <= SuspectCause::Recovering as u8
    }

    /// The name gate.md uses (`suspect=<cause>`); "" for `None`.
    pub fn as_str(self) -> &'static str {
        match self {
            SuspectCause::None => "",
            SuspectCause::Gap => "gap",
            SuspectCause::ChannelGap => "channel_gap",
            SuspectCause::SeqAnomaly => "seq_anomaly",
            SuspectCause::SessionChange => "session_change",
            SuspectCause::NoSnapshot => "no_snapshot",
            SuspectCause::SessionEnded => "session_ended",
            SuspectCause::Recovering => "recovering",
        }
    }
}

/// `SymbolView::flags`: the symbol has a quote (a full Quote with neither
/// side is a quote too: an empty book).
pub const SYM_HAS_QUOTE: u8 = 1;
/// Bid side present.
pub const SYM_BID: u8 = 2;
/// Ask side present.
pub const SYM_ASK: u8 = 4;
/// `seq` is the current `last_seq` (clear: none yet, or forgotten by a
/// session change while `seq` still shows the number last set).
pub const SYM_HAS_SEQ: u8 = 8;
/// V2: the venue says the symbol is not trading (any of its halt sources).
/// Forgotten by a session change (C5), also while it is still pending.
pub const SYM_HALTED: u8 = 16;

/// Everything the verdict needs about one symbol. 80 bytes (10 words).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct SymbolView {
    /// `last_seq` as last set (gate.md `seq=`), meaningful with a quote.
    pub seq: u64,
    pub bid_px: i64,
    pub bid_qty: u64,
    pub ask_px: i64,
    pub ask_qty: u64,
    /// Last time the symbol was alive (S4, S6 e=0, S8), Unix ns.
    pub alive_at: i64,
    /// `quote_source_ts` of the quote shown (provider clock, Unix ns).
    pub source_ts: i64,
    /// The feed `gap_epoch` at which the symbol was last verified (S7).
    pub verified_epoch: u32,
    /// The feed `session_epoch` the symbol has caught up with (C5).
    pub session_epoch: u16,
    /// `SuspectCause` as u8: the symbol's own cause.
    pub cause: u8,
    /// `SYM_*` bits.
    pub flags: u8,
    /// Per-symbol `stale_ms` threshold (saturated to u32).
    pub stale_ms: u32,
    /// Per-symbol `source_max_age_ms` threshold (saturated to u32).
    pub source_max_age_ms: u32,
    /// Receive time (Unix ns) at which the quote last changed: a new value
    /// of either side's price or size, a side appearing or going, or the
    /// first quote; a message repeating the same quote leaves it (gate.md
    /// "One symbol on several feeds", the `crossed` rule). 0 before any.
    pub quote_changed_at: i64,
}

impl SymbolView {
    #[inline]
    pub fn has_quote(&self) -> bool {
        self.flags & SYM_HAS_QUOTE != 0
    }

    #[inline]
    pub fn has_seq(&self) -> bool {
        self.flags & SYM_HAS_SEQ != 0
    }

    #[inline]
    pub fn bid(&self) -> Option<Side> {
        (self.flags & SYM_BID != 0).then_some(Side {
            px: self.bid_px,
            qty: self.bid_qty,
        })
    }

    #[inline]
    pub fn ask(&self) -> Option<Side> {
        (self.flags & SYM_ASK != 0).then_some(Side {
            px: self.ask_px,
            qty: self.ask_qty,
        })
    }

    /// The symbol's own cause as stored (not resolved against the feed).
    #[inline]
    pub fn own_cause(&self) -> SuspectCause {
        SuspectCause::from_u8(self.cause)
    }

    /// As u64 words, for a seqlock slot (safe packing, no transmute).
    #[inline]
    pub fn to_words(&self) -> [u64; SYMBOL_VIEW_WORDS] {
        [
            self.seq,
            self.bid_px as u64,
            self.bid_qty,
            self.ask_px as u64,
            self.ask_qty,
            self.alive_at as u64,
            self.source_ts as u64,
            self.verified_epoch as u64
                | (self.session_epoch as u64) << 32
                | (self.cause as u64) << 48
                | (self.flags as u64) << 56,
            self.stale_ms as u64 | (self.source_max_age_ms as u64) << 32,
            self.quote_changed_at as u64,
        ]
    }

    #[inline]
    pub fn from_words(w: &[u64; SYMBOL_VIEW_WORDS]) -> SymbolView {
        SymbolView {
            seq: w[0],
            bid_px: w[1] as i64,
            bid_qty: w[2],
            ask_px: w[3] as i64,
            ask_qty: w[4],
            alive_at: w[5] as i64,
            source_ts: w[6] as i64,
            verified_epoch: w[7] as u32,
            session_epoch: (w[7] >> 32) as u16,
            cause: (w[7] >> 48) as u8,
            flags: (w[7] >> 56) as u8,
            stale_ms: w[8] as u32,
            source_max_age_ms: (w[8] >> 32) as u32,
            quote_changed_at: w[9] as i64,
        }
    }
}

/// `SymbolView` size in u64 words.
pub const SYMBOL_VIEW_WORDS: usize = 10;
/// `FeedView` size in u64 words.
pub const FEED_VIEW_WORDS: usize = 6;

/// `FeedView::flags`: the current session ended (C6).
pub const FEED_ENDED: u8 = 1;
/// `liveness = "channel"` (C4).
pub const FEED_LIVENESS_CHANNEL: u8 = 2;
/// `channel_alive_at` has been set at least once.
pub const FEED_CHANNEL_ALIVE: u8 = 4;
/// A session has been seen (C1).
pub const FEED_HAS_SESSION: u8 = 8;
/// V3: a verified, non-suspect symbol takes the later of its quote's
/// `source_ts` and the channel's `channel_source_ts` (venue feeds with
/// `liveness = "channel"`).
pub const FEED_CHANNEL_SOURCE_TIME: u8 = 16;
/// nasdaq-itch trust (replaces S7): the current session was joined after
/// its sequence 1, so every book may miss orders: `no_snapshot`.
pub const FEED_TRUST_LATE_JOIN: u8 = 32;
/// nasdaq-itch trust (replaces S7): a channel gap occurred in the current
/// session, so every book may be wrong: `channel_gap` until a new session.
pub const FEED_TRUST_GAP: u8 = 64;
/// R3: the feed has an open hole: symbols that would otherwise be answered
/// without `suspect` are `suspect=recovering`.
pub const FEED_RECOVERING: u8 = 128;

/// `FeedView::recovery` low 3 bits: what the feed's recovery is doing
/// (recovery.md R6), for `status` and the shared-memory readers.
pub const RECOVERY_LIVE: u8 = 0;
/// A hole is open, waiting for the other lines (R1).
pub const RECOVERY_HOLDING: u8 = 1;
/// A hole is open and a re-request is outstanding (R4).
pub const RECOVERY_REREQUESTING: u8 = 2;
/// A snapshot attempt is running (R5).
pub const RECOVERY_SNAPSHOT: u8 = 3;
/// A snapshot is wanted: the last attempt failed (its reason in the high
/// bits) and the next waits for its backoff, or none started yet.
pub const RECOVERY_SNAPSHOT_WANTED: u8 = 4;

/// The state's name in `status`.
pub fn recovery_state_name(code: u8) -> &'static str {
    match code & 7 {
        RECOVERY_HOLDING => "holding",
        RECOVERY_REREQUESTING => "rerequesting",
        RECOVERY_SNAPSHOT => "snapshot_in_progress",
        RECOVERY_SNAPSHOT_WANTED => "snapshot_wanted",
        _ => "live",
    }
}

/// Feed-level state the verdict needs, and the recovery gauges `STATUS`
/// shows. 48 bytes (6 words).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FeedView {
    /// C4: last gap-free packet or in-sequence channel heartbeat, Unix ns.
    pub channel_alive_at: i64,
    /// Clock offset as of the latest sample, ns (see `feed::clock`).
    pub offset_ns: i64,
    /// V3: the venue's send time of the latest packet or heartbeat that set
    /// `channel_alive_at` (venue feeds; `i64::MIN` when none yet).
    pub channel_source_ts: i64,
    /// Incremented by every channel gap (C3).
    pub gap_epoch: u32,
    /// Incremented by every session change (C5).
    pub session_epoch: u16,
    /// `FEED_*` bits.
    pub flags: u8,
    /// `RECOVERY_*` in bits 0-2; bits 3-7: the last snapshot failure
    /// (`SnapshotFailure` index + 1, 0 for none).
    pub recovery: u8,
    /// The largest time seen between the first and the second copy of a
    /// packet (line skew), ns; 0 before any second copy.
    pub line_skew_max_ns: i64,
    /// Venues with per-instrument recovery (venues.md `cme-mdp3`): the
    /// instruments waiting for a snapshot now (saturated to u32).
    /// Informational: the verdict does not read it.
    pub venue_waiting: u32,
    /// The entries kept for them now (saturated to u32). Informational.
    pub venue_kept: u32,
}

impl FeedView {
    #[inline]
    pub fn ended(&self) -> bool {
        self.flags & FEED_ENDED != 0
    }

    /// As u64 words, for a seqlock slot (safe packing, no transmute).
    #[inline]
    pub fn to_words(&self) -> [u64; FEED_VIEW_WORDS] {
        [
            self.channel_alive_at as u64,
            self.offset_ns as u64,
            self.channel_source_ts as u64,
            self.gap_epoch as u64
                | (self.session_epoch as u64) << 32
                | (self.flags as u64) << 48
                | (self.recovery as u64) << 56,
            self.line_skew_max_ns as u64,
            self.venue_waiting as u64 | (self.venue_kept as u64) << 32,
        ]
    }

    #[inline]
    pub fn from_words(w: &[u64; FEED_VIEW_WORDS]) -> FeedView {
        FeedView {
            channel_alive_at: w[0] as i64,
            offset_ns: w[1] as i64,
            channel_source_ts: w[2] as i64,
            gap_epoch: w[3] as u32,
            session_epoch: (w[3] >> 32) as u16,
            flags: (w[3] >> 48) as u8,
            recovery: (w[3] >> 56) as u8,
            line_skew_max_ns: w[4] as i64,
            venue_waiting: w[5] as u32,
            venue_kept: (w[5] >> 32) as u32,
        }
    }
}

/// The concurrency seam: a feed calls these whenever observable state
/// changes (after the change is complete). `index` is the symbol's stable
/// dense slot, assigned when the symbol is created (0..max_symbols).
///
/// Order guarantee: when a packet changes a feed epoch (C3, C5) or C6,
/// `publish_feed` is called before any `publish_symbol` of that packet, so
/// a reader that sees a newer symbol view with an older feed view can only
/// err on the suspect side (epoch mismatch).
pub trait Publish {
    fn publish_symbol(&mut self, index: u32, symbol: Symbol, view: &SymbolView);
    fn publish_feed(&mut self, view: &FeedView);

    /// Hint that `publish_symbol(index, ..)` may come soon: an
    /// implementation may prefetch the slot it writes. Must change nothing
    /// observable; `index` may be one that was never published.
    #[inline]
    fn prefetch_symbol(&self, _index: u32) {}

    /// A feed of several units (venues.md `cboe-pitch`): the raw view of
    /// unit `unit` (its channel fields; the feed's own fields are read
    /// from the feed view), published before `publish_feed` whenever the
    /// unit's view may have changed. Readers fold it on the feed view
    /// (`engine::unit_view`) for the symbols of that unit alone.
    #[inline]
    fn publish_unit_view(&mut self, _unit: u8, _view: &FeedView) {}

    /// A feed of several units: the symbol at `index` is now a member of
    /// `unit` alone, or (0) of several units or none, whose readers use
    /// the feed view (every unit folded: fails closed).
    #[inline]
    fn publish_symbol_unit(&mut self, _index: u32, _unit: u8) {}
}

/// Publishes nothing (replay, tests, single-threaded use).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPublish;

impl Publish for NoPublish {
    #[inline(always)]
    fn publish_symbol(&mut self, _: u32, _: Symbol, _: &SymbolView) {}
    #[inline(always)]
    fn publish_feed(&mut self, _: &FeedView) {}
}

const _: () = assert!(std::mem::size_of::<SymbolView>() == SYMBOL_VIEW_WORDS * 8);
const _: () = assert!(std::mem::size_of::<FeedView>() == FEED_VIEW_WORDS * 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_round_trip_through_words() {
        let v = SymbolView {
            seq: u64::MAX,
            bid_px: -5,
            bid_qty: 7,
            ask_px: i64::MIN,
            ask_qty: 9,
            alive_at: -1,
            source_ts: i64::MAX,
            verified_epoch: u32::MAX - 3,
            session_epoch: 0xBEEF,
            cause: SuspectCause::SessionEnded as u8,
            flags: 0xA5,
            stale_ms: 500,
            source_max_age_ms: u32::MAX,
            quote_changed_at: -77,
        };
        assert_eq!(SymbolView::from_words(&v.to_words()), v);
        let f = FeedView {
            channel_alive_at: -3,
            offset_ns: i64::MIN,
            channel_source_ts: 7,
            gap_epoch: 0xDEAD_BEEF,
            session_epoch: 0xFFFF,
            flags: 0x7F,
            recovery: 0xFF,
            line_skew_max_ns: -9,
            venue_waiting: u32::MAX,
            venue_kept: 0x8000_0001,
        };
        assert_eq!(FeedView::from_words(&f.to_words()), f);
    }
}
