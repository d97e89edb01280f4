//! The pre-trade check's verdict (semantics.md "The pre-trade check"):
//! a pure function of a symbol view, its feed view, `now` and thresholds.
//! Read-only, no allocation; the concurrent table and `Feed` both feed it.

use crate::feed::settings::ms_to_ns;
use crate::feed::view::{
    FeedView, SuspectCause, SymbolView, FEED_CHANNEL_ALIVE, FEED_LIVENESS_CHANNEL,
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

/// Reasons as a bitset; the bit order is gate.md's reason order.
pub const R_UNKNOWN_SYMBOL: u8 = 1;
pub const R_NO_DATA: u8 = 2;
pub const R_STALE_QUOTE: u8 = 4;
pub const R_STALE_AT_SOURCE: u8 = 8;
pub const R_SUSPECT: u8 = 16;

/// Reason names in gate.md order, indexed by bit position.
pub const REASON_NAMES: [&str; 5] = [
    "unknown_symbol",
    "no_data",
    "stale_quote",
    "stale_at_source",
    "suspect",
];

// Bit i of the reasons is REASON_NAMES[i].
const _: () = assert!(
    R_UNKNOWN_SYMBOL == 1
        && R_NO_DATA == 1 << 1
        && R_STALE_QUOTE == 1 << 2
        && R_STALE_AT_SOURCE == 1 << 3
        && R_SUSPECT == 1 << 4
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

    fn only(reason: u8) -> Verdict {
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
    } else if sym.verified_epoch != feed.gap_epoch {
        SuspectCause::ChannelGap
    } else {
        SuspectCause::None
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
    let silence_ns = now.saturating_sub(alive);
    let source_age_ns = now
        .saturating_sub(sym.source_ts)
        .saturating_sub(feed.offset_ns);
    let mut reasons = 0;
    if silence_ns > t.stale_ns {
        reasons |= R_STALE_QUOTE;
    }
    if source_age_ns > t.source_max_age_ns {
        reasons |= R_STALE_AT_SOURCE;
    }
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
