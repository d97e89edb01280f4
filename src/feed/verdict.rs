//! The pre-trade check's verdict (semantics.md "The pre-trade check"):
//! a pure function of a symbol view, its feed view, `now` and thresholds.
//! Read-only, no allocation; the concurrent table, `Feed` and the
//! shared-memory client all judge through it. The venue rules that change
//! the verdict (venues.md V2 halted, V3 channel source time, nasdaq-itch's
//! trust rules replacing S7) are here too, switched by feed flags.

use crate::feed::settings::ms_to_ns;
use crate::feed::view::{
    FeedView, SuspectCause, SymbolView, FEED_CHANNEL_ALIVE, FEED_CHANNEL_SOURCE_TIME,
    FEED_LIVENESS_CHANNEL, FEED_RECOVERING, FEED_TRUST_GAP, FEED_TRUST_LATE_JOIN, SYM_HALTED,
};
use crate::wire::Side;

/// Thresholds compared in nanoseconds (`> 500 ms` is `> 500_000_000 ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    pub stale_ns: i64,
    pub source_max_age_ns: i64,
}

impl Thresholds {
    pub fn from_ms(stale_ms: u64, source_max_age_ms: u64) -> Thresholds {
        Thresholds {
            stale_ns: ms_to_ns(stale_ms),
            source_max_age_ns: ms_to_ns(source_max_age_ms),
        }
    }

    /// The per-symbol thresholds a view carries.
    pub fn of(view: &SymbolView) -> Thresholds {
        Thresholds::from_ms(view.stale_ms as u64, view.source_max_age_ms as u64)
    }
}

impl Default for Thresholds {
    /// The config defaults: `stale_ms = 500`, `source_max_age_ms = 2000`.
    fn default() -> Self {
        Thresholds::from_ms(500, 2000)
    }
}

/// Reasons as a bitset. Bits 0-5 follow gate.md's reason order; `crossed`
/// (added later, gate.md "One symbol on several feeds") is bit 6 so that
/// the older bits keep their values (the C library's `TICKGATE_R_*`): it
/// is written between `halted` and `suspect` (`REASON_ORDER`).
pub const R_UNKNOWN_SYMBOL: u8 = 1;
pub const R_NO_DATA: u8 = 2;
pub const R_STALE_QUOTE: u8 = 4;
pub const R_STALE_AT_SOURCE: u8 = 8;
/// V2: the venue says the symbol is not trading.
pub const R_HALTED: u8 = 16;
pub const R_SUSPECT: u8 = 32;
/// Several feeds: one feed's bid stays above another's offer for
/// `crossed_ms` (gate.md "One symbol on several feeds").
pub const R_CROSSED: u8 = 64;

/// Reason names indexed by bit position.
pub const REASON_NAMES: [&str; 7] = [
    "unknown_symbol",
    "no_data",
    "stale_quote",
    "stale_at_source",
    "halted",
    "suspect",
    "crossed",
];

/// Bit positions in gate.md's reason order (`crossed` after `halted`).
pub const REASON_ORDER: [u8; 7] = [0, 1, 2, 3, 4, 6, 5];

/// The first of `reasons` in gate.md's order (`None` when OK).
#[inline]
pub fn first_reason(reasons: u8) -> Option<&'static str> {
    REASON_ORDER
        .iter()
        .find(|&&bit| reasons & (1 << bit) != 0)
        .map(|&bit| REASON_NAMES[bit as usize])
}

// Bit i of the reasons is REASON_NAMES[i].
const _: () = assert!(
    R_UNKNOWN_SYMBOL == 1
        && R_NO_DATA == 1 << 1
        && R_STALE_QUOTE == 1 << 2
        && R_STALE_AT_SOURCE == 1 << 3
        && R_HALTED == 1 << 4
        && R_SUSPECT == 1 << 5
        && R_CROSSED == 1 << 6
);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `R_*` bits; 0 means OK.
    pub reasons: u8,
    /// Set exactly when `R_SUSPECT` is.
    pub cause: SuspectCause,
    /// The quote judged (`None` sides are empty); meaningful with a quote.
    pub has_quote: bool,
    pub seq: u64,
    pub bid: Option<Side>,
    pub ask: Option<Side>,
    /// `now - alive` in ns (with a quote).
    pub silence_ns: i64,
    /// `now - quote_source_ts - offset` in ns (with a quote).
    pub source_age_ns: i64,
}

impl Verdict {
    #[inline]
    pub fn ok(&self) -> bool {
        self.reasons == 0
    }

    /// A verdict of `reason` alone, without a quote.
    pub const fn only(reason: u8) -> Verdict {
        Verdict {
            reasons: reason,
            cause: SuspectCause::None,
            has_quote: false,
            seq: 0,
            bid: None,
            ask: None,
            silence_ns: 0,
            source_age_ns: 0,
        }
    }
}

/// The cause the check reports for a symbol (assuming it has a quote), or
/// `None` when it is neither suspect nor unverified: `session_ended` if
/// the feed's session ended (C6), else the symbol's own cause (with a
/// pending session change resolved as C5 would), else `channel_gap` when
/// unverified (C3/S7).
#[inline]
pub fn resolve_cause(sym: &SymbolView, feed: &FeedView) -> SuspectCause {
    if feed.ended() {
        return SuspectCause::SessionEnded;
    }
    let own = if sym.session_epoch != feed.session_epoch {
        // C5 not yet applied to this symbol.
        if sym.has_quote() {
            SuspectCause::SessionChange
        } else {
            SuspectCause::None
        }
    } else {
        sym.own_cause()
    };
    if own != SuspectCause::None {
        own
    } else if feed.flags & FEED_TRUST_LATE_JOIN != 0 {
        // nasdaq-itch (replaces S7): joined after sequence 1, books may
        // miss orders; only a new session from its sequence 1 clears it.
        SuspectCause::NoSnapshot
    } else if feed.flags & FEED_TRUST_GAP != 0 || sym.verified_epoch != feed.gap_epoch {
        // C3/S7; on nasdaq-itch (FEED_TRUST_GAP) no message verifies again.
        SuspectCause::ChannelGap
    } else {
        SuspectCause::None
    }
}

/// The cause the check reports: `resolve_cause`, and last (R3)
/// `recovering` while the feed has an open hole.
#[inline]
pub fn report_cause(sym: &SymbolView, feed: &FeedView) -> SuspectCause {
    match resolve_cause(sym, feed) {
        SuspectCause::None if feed.flags & FEED_RECOVERING != 0 => SuspectCause::Recovering,
        cause => cause,
    }
}

/// `check(symbol, now)`: every reason that applies, in gate.md order.
#[inline]
pub fn judge(sym: Option<&SymbolView>, feed: &FeedView, now: i64, t: &Thresholds) -> Verdict {
    let Some(sym) = sym else {
        return Verdict::only(R_UNKNOWN_SYMBOL);
    };
    if !sym.has_quote() {
        return Verdict::only(R_NO_DATA);
    }
    let cause = resolve_cause(sym, feed);
    let mut alive = sym.alive_at;
    // C4: with liveness = channel, the channel's alive_at counts for a
    // verified, non-suspect symbol.
    if cause == SuspectCause::None
        && feed.flags & (FEED_LIVENESS_CHANNEL | FEED_CHANNEL_ALIVE)
            == FEED_LIVENESS_CHANNEL | FEED_CHANNEL_ALIVE
    {
        alive = alive.max(feed.channel_alive_at);
    }
    let mut source_ts = sym.source_ts;
    // V3: on venue feeds the channel vouches for the time of a verified,
    // non-suspect symbol's unchanged quote too.
    if cause == SuspectCause::None && feed.flags & FEED_CHANNEL_SOURCE_TIME != 0 {
        source_ts = source_ts.max(feed.channel_source_ts);
    }
    let silence_ns = now.saturating_sub(alive);
    let source_age_ns = now.saturating_sub(source_ts).saturating_sub(feed.offset_ns);
    let mut reasons = 0;
    if silence_ns > t.stale_ns {
        reasons |= R_STALE_QUOTE;
    }
    if source_age_ns > t.source_max_age_ns {
        reasons |= R_STALE_AT_SOURCE;
    }
    // V2; a pending session change (C5) has already forgotten it.
    if sym.flags & SYM_HALTED != 0 && sym.session_epoch == feed.session_epoch {
        reasons |= R_HALTED;
    }
    // R3: an open hole is the last cause; it changes nothing else of the
    // answer (liveness and source time above are judged without it).
    let cause = if cause == SuspectCause::None && feed.flags & FEED_RECOVERING != 0 {
        SuspectCause::Recovering
    } else {
        cause
    };
    if cause != SuspectCause::None {
        reasons |= R_SUSPECT;
    }
    Verdict {
        reasons,
        cause,
        has_quote: true,
        seq: sym.seq,
        bid: sym.bid(),
        ask: sym.ask(),
        silence_ns,
        source_age_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::view::{FEED_ENDED, SYM_BID, SYM_HAS_QUOTE, SYM_HAS_SEQ};

    const MS: i64 = 1_000_000;

    fn quoted() -> SymbolView {
        SymbolView {
            seq: 9,
            bid_px: 5,
            bid_qty: 1,
            alive_at: 100 * MS,
            source_ts: 100 * MS,
            flags: SYM_HAS_QUOTE | SYM_HAS_SEQ | SYM_BID,
            ..SymbolView::default()
        }
    }

    #[test]
    fn unknown_and_no_data_are_alone() {
        let f = FeedView::default();
        let t = Thresholds::default();
        assert_eq!(judge(None, &f, 0, &t).reasons, R_UNKNOWN_SYMBOL);
        let mut v = quoted();
        v.flags = SYM_HAS_SEQ;
        v.cause = SuspectCause::Gap as u8;
        let got = judge(Some(&v), &f, 10_000 * MS, &t);
        assert_eq!(got.reasons, R_NO_DATA);
        assert!(!got.has_quote);
    }

    #[test]
    fn thresholds_are_strictly_greater_in_nanoseconds() {
        let f = FeedView::default();
        let t = Thresholds::from_ms(500, 2000);
        let v = quoted();
        assert!(judge(Some(&v), &f, 600 * MS, &t).ok());
        assert_eq!(judge(Some(&v), &f, 600 * MS + 1, &t).reasons, R_STALE_QUOTE);
        assert_eq!(
            judge(Some(&v), &f, 2100 * MS + 1, &t).reasons,
            R_STALE_QUOTE | R_STALE_AT_SOURCE
        );
    }

    #[test]
    fn offset_is_subtracted_and_ages_may_be_negative() {
        let f = FeedView {
            offset_ns: 50 * MS,
            ..FeedView::default()
        };
        let got = judge(Some(&quoted()), &f, 120 * MS, &Thresholds::default());
        assert_eq!(got.source_age_ns, -30 * MS);
        assert_eq!(got.silence_ns, 20 * MS);
    }

    #[test]
    fn cause_precedence_ended_then_own_then_channel_gap() {
        let mut f = FeedView {
            gap_epoch: 3,
            ..FeedView::default()
        };
        let mut v = quoted();
        let t = Thresholds::default();
        let at = 100 * MS;
        assert_eq!(judge(Some(&v), &f, at, &t).cause, SuspectCause::ChannelGap);
        v.cause = SuspectCause::Gap as u8;
        assert_eq!(judge(Some(&v), &f, at, &t).cause, SuspectCause::Gap);
        // A pending session change (C5) resolves to session_change.
        f.session_epoch = 1;
        assert_eq!(
            judge(Some(&v), &f, at, &t).cause,
            SuspectCause::SessionChange
        );
        f.flags |= FEED_RECOVERING;
        assert_eq!(
            judge(Some(&v), &f, at, &t).cause,
            SuspectCause::SessionChange
        );
        f.flags |= FEED_ENDED;
        let got = judge(Some(&v), &f, at, &t);
        assert_eq!(got.cause, SuspectCause::SessionEnded);
        assert_eq!(got.reasons, R_SUSPECT);
    }

    #[test]
    fn recovering_is_last_and_changes_nothing_else() {
        let mut f = FeedView {
            channel_alive_at: 900 * MS,
            flags: FEED_LIVENESS_CHANNEL | FEED_CHANNEL_ALIVE,
            ..FeedView::default()
        };
        let t = Thresholds::default();
        let v = quoted();
        let healthy = judge(Some(&v), &f, 1000 * MS, &t);
        f.flags |= FEED_RECOVERING;
        let held = judge(Some(&v), &f, 1000 * MS, &t);
        assert_eq!(held.cause, SuspectCause::Recovering);
        assert_eq!(held.reasons, R_SUSPECT);
        // R3: the channel still vouches for liveness as without the hole.
        assert_eq!(held.silence_ns, healthy.silence_ns);
        assert_eq!(report_cause(&v, &f), SuspectCause::Recovering);
    }

    #[test]
    fn channel_liveness_only_for_verified_healthy_symbols() {
        let mut f = FeedView {
            channel_alive_at: 900 * MS,
            flags: FEED_LIVENESS_CHANNEL | FEED_CHANNEL_ALIVE,
            ..FeedView::default()
        };
        let t = Thresholds::default();
        let v = quoted();
        assert_eq!(judge(Some(&v), &f, 1000 * MS, &t).silence_ns, 100 * MS);
        f.gap_epoch = 1; // unverified: the channel does not vouch for it
        assert_eq!(judge(Some(&v), &f, 1000 * MS, &t).silence_ns, 900 * MS);
        f.gap_epoch = 0;
        f.flags = FEED_CHANNEL_ALIVE; // liveness = symbol
        assert_eq!(judge(Some(&v), &f, 1000 * MS, &t).silence_ns, 900 * MS);
    }
}
