//! Counters every feed exports (semantics.md "Counters every feed exports"),
//! and the per-symbol summary for replay and metrics. Plain integers,
//! updated in place on the hot path.

use super::view::SuspectCause;
use crate::venue::cboe_pitch::session::GapCounts;
use crate::wire::Side;

/// Per line (multicast group) of a feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineCounters {
    /// Valid packets received on the line (duplicates included).
    pub packets: u64,
    /// Message blocks in those packets.
    pub messages: u64,
    /// C2: packets whose every block was already delivered (by the other
    /// line), plus lagging channel heartbeats and end-of-session copies.
    pub duplicate_packets: u64,
    /// Invalid datagrams received on the line.
    pub invalid_packets: u64,
}

/// The counters `semantics.md` keeps per channel, for one channel of a
/// venue of several (venues.md `cboe-pitch`: per unit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelCounters {
    /// C3: channel sequence numbers never received.
    pub channel_messages_lost: u64,
    /// C3: number of channel gaps.
    pub channel_gaps: u64,
    /// C5: sessions that replaced the channel's previous one.
    pub session_changes: u64,
    /// C5/C6: packets of a replaced or ended session, dropped.
    pub stale_session_dropped: u64,
    /// C6: sessions ended.
    pub sessions_ended: u64,
}

/// R6 per unit: the holes of one channel's recovery machines, and whether
/// one is open now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoleCounts {
    pub opened: u64,
    /// Closed without loss.
    pub filled: u64,
    pub lost: u64,
    pub open_now: bool,
}

/// One channel of a venue of several (venues.md `cboe-pitch`: a unit):
/// its id, its current session, `next`, whether the session ended, and its
/// counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelReport {
    pub channel: u8,
    pub session: Option<crate::wire::SessionId>,
    pub next: u64,
    pub ended: bool,
    pub counters: ChannelCounters,
    /// Its recovery machines' holes.
    pub holes: HoleCounts,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedCounters {
    pub lines: Vec<LineCounters>,
    /// Invalid datagrams, all lines (wire.md "valid").
    pub invalid_packets: u64,
    /// Blocks of an unknown type, skipped by their length.
    pub unknown_messages: u64,
    /// Quotes with `seq = 0` and Heartbeats with `next_seq = 0` (ignored).
    pub invalid_messages: u64,
    /// C3: channel sequence numbers never received.
    pub channel_messages_lost: u64,
    /// C3: number of channel gaps.
    pub channel_gaps: u64,
    /// S3 + S6: ticks lost, summed over symbols (`tick_loss_total`).
    pub ticks_lost: u64,
    /// S2 + S6 e<0: old or repeated Quotes and old Heartbeats.
    pub stale_dropped: u64,
    /// S5: messages rejected as unbelievable jumps.
    pub seq_anomalies: u64,
    /// S5r: new baselines after three consecutive rejected Quotes.
    pub seq_resyncs: u64,
    /// S8.
    pub snapshots_applied: u64,
    pub snapshots_ignored: u64,
    /// cboe-pitch (recovery.md R5c): spins applied that held no Trading
    /// Status (a halt that began before a late join stays unknown).
    pub spins_without_status: u64,
    /// cme-mdp3: Book entries that could not apply to their book.
    pub book_errors: u64,
    /// cboe-pitch: Unit Clear messages.
    pub unit_clears: u64,
    /// cboe-pitch: prices the books cannot hold (above $429,496.7295):
    /// the order is not booked and its symbol is suspect `gap`.
    pub prices_unbookable: u64,
    /// cboe-pitch: datagrams with Hdr Sequence 0 (no unit's sequence),
    /// which change nothing.
    pub unsequenced: u64,
    /// cboe-pitch: gap-line datagrams of a unit with no session or an
    /// ended one, and gap-line heartbeats, which change nothing (R4c).
    pub gap_dropped: u64,
    /// cboe-pitch: datagrams the adapter could not place on their unit's
    /// channel (none: every unit is a channel of its own; kept for the
    /// metric and replay's summary, which name it).
    pub units_not_followed: u64,
    /// C5: provider restarts seen (the first session is not a change).
    pub session_changes: u64,
    /// C5/C6: packets of a replaced or ended session, dropped.
    pub stale_session_dropped: u64,
    /// C6: end-of-session packets that ended a session.
    pub sessions_ended: u64,
    /// Messages for new symbols ignored because the table was full.
    pub symbols_overflow: u64,
    /// nasdaq-itch (venues.md): messages naming an order the book does not
    /// hold (a venue error, or a late join or gap's consequence).
    pub unknown_orders: u64,
    /// nasdaq-itch: Adds that did not fit the order table (`max_orders`).
    pub orders_overflow: u64,
    /// nasdaq-itch: an order reference reused while live, or an execution
    /// or cancel larger than the order (the book stays consistent).
    pub order_conflicts: u64,
    /// nasdaq-itch (R5): stocks a snapshot named by two locates (not
    /// trusted: which book is theirs is unknown).
    pub locate_conflicts: u64,
    /// nasdaq-itch: live orders in the books (a gauge, not a counter).
    pub live_orders: u64,
    /// C3b: packets beyond `max_channel_jump`, not believed.
    pub channel_seq_anomalies: u64,
    /// C6: end-of-session packets below `next` (stale or forged), and ones
    /// at `next` while later datagrams were held (R1): nothing changed.
    pub stale_ends_of_session: u64,
    /// R4: re-request answers as a line of their own (`rerequest`).
    pub rerequest: LineCounters,
    /// R6.
    pub recovery: RecoveryCounters,
}

/// recovery.md R6: what the hold and the re-requests did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryCounters {
    pub holes_opened: u64,
    /// Closed without loss.
    pub holes_filled: u64,
    pub holes_lost: u64,
    /// Messages applied from re-request answers.
    pub messages_recovered: u64,
    pub requests_sent: u64,
    /// Answers from a configured server (malformed ones included).
    pub answers_received: u64,
    /// Dropped answers: from an address that is not a configured server,
    /// of another session, heartbeats and ends of session, malformed.
    pub answers_wrong_source: u64,
    pub answers_wrong_session: u64,
    pub answers_not_data: u64,
    pub answers_malformed: u64,
    /// R1: copies whose bytes differ from the held one of their sequence
    /// and message count (neither applied).
    pub conflicts: u64,
    /// R1: later copies of a conflicted sequence from the lines, dropped.
    pub conflict_copies_dropped: u64,
    /// R2: holes declared because the hold was full.
    pub hold_overflows: u64,
    /// R5: snapshot attempts started, applied, and failed by reason (in
    /// `SnapshotFailure::ALL` order).
    pub snapshots_started: u64,
    pub snapshots_applied: u64,
    pub snapshots_failed: [u64; 11],
    /// R4c: Gap Responses by status (the refill codec's `status_slot`:
    /// Cboe's `GAP_STATUSES` order, then any other) and those dropped
    /// (echoing no outstanding request).
    pub responses_by_status: GapCounts,
    pub responses_dropped: u64,
    /// From a hole's opening to its closing (filled or declared).
    pub hole_time: NsHistogram,
    /// Line skew: from a packet's first copy to its second.
    pub line_skew: NsHistogram,
}

/// Bucket upper bounds (ns) of `NsHistogram`, for a Prometheus
/// histogram: from a few microseconds of line skew to a re-request that
/// gave up.
pub const NS_HISTOGRAM_BOUNDS: [i64; 14] = [
    1_000,
    5_000,
    10_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    50_000_000,
    250_000_000,
    1_000_000_000,
];

/// A fixed-bucket histogram of durations (no allocation), for hole times
/// and line skew: `counts[i]` samples were at most `NS_HISTOGRAM_BOUNDS[i]`
/// and more than the bound before; the last bucket is the rest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NsHistogram {
    pub counts: [u64; NS_HISTOGRAM_BOUNDS.len() + 1],
    pub sum_ns: u64,
}

impl NsHistogram {
    pub fn observe(&mut self, ns: i64) {
        let ns = ns.max(0);
        let i = NS_HISTOGRAM_BOUNDS.partition_point(|&b| b < ns);
        self.counts[i] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns as u64);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

impl FeedCounters {
    pub fn new(lines: usize) -> FeedCounters {
        FeedCounters {
            lines: vec![LineCounters::default(); lines],
            ..FeedCounters::default()
        }
    }

    /// Packets received, all lines (valid ones).
    pub fn packets(&self) -> u64 {
        self.lines.iter().map(|l| l.packets).sum()
    }

    /// Messages received, all lines.
    pub fn messages(&self) -> u64 {
        self.lines.iter().map(|l| l.messages).sum()
    }

    pub fn duplicate_packets(&self) -> u64 {
        self.lines.iter().map(|l| l.duplicate_packets).sum()
    }
}

/// One symbol as replay and metrics see it. `suspect` is resolved against
/// the feed exactly as the verdict does (C5 lazily, C3 by epochs, C6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolSummary {
    /// Dense slot index (stable for the feed's lifetime).
    pub index: u32,
    /// Current `last_seq` (`None`: none yet, or forgotten by C5).
    pub last_seq: Option<u64>,
    /// `last_seq` as last set (what gate.md shows as `seq=`).
    pub shown_seq: Option<u64>,
    pub has_quote: bool,
    pub bid: Option<Side>,
    pub ask: Option<Side>,
    /// `None` before the symbol was ever alive.
    pub alive_at: Option<i64>,
    pub quote_source_ts: Option<i64>,
    /// Suspect or unverified, with the cause the check would report.
    pub suspect: Option<SuspectCause>,
    /// S7: verified since the last channel gap.
    pub verified: bool,
    /// V2: the venue says the symbol is not trading.
    pub halted: bool,
    pub ticks_lost: u64,
    pub stale_dropped: u64,
    pub seq_anomalies: u64,
    pub seq_resyncs: u64,
    pub snapshots_applied: u64,
    /// Configured (by name or thresholds) before any message.
    pub configured: bool,
    pub stale_ms: u64,
    pub source_max_age_ms: u64,
}
