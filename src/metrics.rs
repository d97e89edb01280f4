//! Metrics: the Prometheus registry, and the HTTP endpoint serving
//! `/metrics`, `/healthz` and `/readyz` (I/O at the bottom of the file).
//!
//! Ownership: a feed's state and counters belong to its writer thread and
//! are never locked. The writer *publishes* a snapshot of its counters to a
//! [`FeedStatsCell`] (one relaxed atomic store per counter, no lock, no
//! allocation) whenever it likes, and the scrape reads the cell. Counters
//! are read one by one, so two counters of one scrape may come from two
//! publishes; each one is still monotonic, which is all Prometheus needs.
//!
//! Latencies are recorded by the thread that measures them into a private
//! HDR histogram (`util::histogram::LatencyRecorder`), which is merged into
//! a shared one ([`SharedHistogram`]) with `try_lock` now and then, so a
//! scrape never makes a writer wait. They are exported as Prometheus histograms with
//! fixed bucket bounds; `_sum` is exact (kept beside the HDR counts).
//!
//! Labels are feed and line names only: never symbols (cardinality).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{Encoder, IntGauge, Opts, Registry, TextEncoder};

use crate::feed::{NsHistogram, NS_HISTOGRAM_BOUNDS};
use crate::gate::server::{GateStats, REJECT_REASONS};
use crate::net::receiver::LineStats as SocketStats;
use crate::util::histogram::{HistogramSnapshot, SharedHistogram};
use crate::venue::cboe_pitch::session::{GapCounts, GapStatus};

/// How a value of a stats struct is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// A Unix time in nanoseconds, exported in seconds (0 = never).
    TimestampNs,
}

/// One exported value of a stats struct.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub metric: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

/// Defines a plain stats struct (what the writer fills in), its atomic
/// mirror (what the scrape reads) and the table of metric names, from one
/// list, so the three cannot drift apart.
macro_rules! stats {
    (
        $(#[$doc:meta])* $stats:ident, $cell:ident, $fields:ident {
            $( $(#[$fdoc:meta])* $field:ident: $kind:ident, $metric:literal, $help:literal; )*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $stats {
            $( $(#[$fdoc])* pub $field: u64, )*
        }

        /// The atomic mirror of the stats struct of the same name.
        #[derive(Debug, Default)]
        pub struct $cell {
            $( $field: AtomicU64, )*
        }

        impl $cell {
            /// Publishes a snapshot (writer side): relaxed stores only.
            pub fn store(&self, s: &$stats) {
                $( self.$field.store(s.$field, Ordering::Relaxed); )*
            }

            /// Reads the last published values (scrape side).
            pub fn load(&self) -> $stats {
                $stats { $( $field: self.$field.load(Ordering::Relaxed), )* }
            }
        }

        impl $stats {
            /// The values in the order of the field table.
            pub fn values(&self) -> Vec<u64> {
                vec![ $( self.$field, )* ]
            }
        }

        /// Metric name, help and kind of every field, in declaration order.
        pub const $fields: &[Field] = &[
            $( Field { metric: $metric, help: $help, kind: Kind::$kind }, )*
        ];
    };
}

stats! {
    /// The counters `semantics.md` asks of every feed, as a whole (labels: feed).
    FeedStats, FeedStatsCell, FEED_FIELDS {
        invalid_packets: Counter, "tickgate_feed_invalid_packets_total",
            "Datagrams that are not a valid packet (wire.md), dropped.";
        invalid_messages: Counter, "tickgate_feed_invalid_messages_total",
            "Messages ignored as invalid (a Quote with seq 0, a Heartbeat with next_seq 0).";
        unknown_messages: Counter, "tickgate_feed_unknown_messages_total",
            "Messages of an unknown type, skipped.";
        channel_gaps: Counter, "tickgate_feed_channel_gaps_total",
            "Channel gaps (C3): packets ahead of the next expected sequence, after line arbitration.";
        channel_messages_lost: Counter, "tickgate_feed_channel_messages_lost_total",
            "Channel messages lost (C3): sequence numbers no line delivered.";
        ticks_lost: Counter, "tickgate_feed_ticks_lost_total",
            "Per-symbol ticks lost (S3, S6), summed over the feed's symbols.";
        stale_dropped: Counter, "tickgate_feed_stale_messages_dropped_total",
            "Old or repeated Quotes (S2) and old Heartbeats (S6), dropped.";
        seq_anomalies: Counter, "tickgate_feed_seq_anomalies_total",
            "Messages whose sequence jumped by max_seq_jump or more, not applied (S5).";
        seq_resyncs: Counter, "tickgate_feed_seq_resyncs_total",
            "Symbols re-baselined after three consecutive unbelievable Quotes (S5r).";
        snapshots_applied: Counter, "tickgate_feed_snapshots_applied_total",
            "Snapshots applied (S8).";
        snapshots_ignored: Counter, "tickgate_feed_snapshots_ignored_total",
            "Snapshots ignored: not newer than a healthy symbol's state (S8); cme-mdp3: of an instrument that does not wait, or not covering what was lost.";
        spins_without_status: Counter, "tickgate_feed_spins_without_status_total",
            "cboe-pitch spins applied without any Trading Status: a halt that began before the join is unknown until its next change (recovery.md R5c).";
        session_changes: Counter, "tickgate_feed_session_changes_total",
            "Provider restarts: packets with a new session id (C5).";
        sessions_ended: Counter, "tickgate_feed_sessions_ended_total",
            "End-of-session packets that ended a session (C6).";
        stale_session_dropped: Counter, "tickgate_feed_stale_session_packets_total",
            "Packets of a replaced or ended session, dropped (C5, C6).";
        symbols_overflow: Counter, "tickgate_feed_symbols_overflow_total",
            "Messages for new symbols ignored because the symbol table was full (max_symbols).";
        unknown_orders: Counter, "tickgate_feed_unknown_orders_total",
            "nasdaq-itch: order messages naming an order the book does not hold (venues.md).";
        orders_overflow: Counter, "tickgate_feed_orders_overflow_total",
            "nasdaq-itch: Adds that did not fit the order table (max_orders); the symbol is suspect gap.";
        order_conflicts: Counter, "tickgate_feed_order_conflicts_total",
            "nasdaq-itch: an order reference reused while live, or an execution or cancel larger than the order.";
        locate_conflicts: Counter, "tickgate_feed_locate_conflicts_total",
            "nasdaq-itch: stocks a GLIMPSE snapshot named by two locates; the symbol is not trusted (recovery.md R5).";
        live_orders: Gauge, "tickgate_feed_live_orders",
            "nasdaq-itch: live orders in the feed's books.";
        book_errors: Counter, "tickgate_feed_book_errors_total",
            "cme-mdp3: Book entries that could not apply to their book; the instrument waits for a snapshot. cboe-pitch: Add Orders with a bad side or an order id already live (venues.md).";
        unit_clears: Counter, "tickgate_feed_unit_clears_total",
            "cboe-pitch: Unit Clear messages (venues.md).";
        prices_unbookable: Counter, "tickgate_feed_prices_unbookable_total",
            "cboe-pitch: prices above $429,496.7295 that the books cannot hold; the symbol is suspect gap (docs/venues.md).";
        unsequenced: Counter, "tickgate_feed_unsequenced_total",
            "cboe-pitch: datagrams with sequence 0, part of no unit's sequence; they change nothing (venues.md).";
        gap_dropped: Counter, "tickgate_feed_gap_line_dropped_total",
            "cboe-pitch: gap-line heartbeats, and gap-line datagrams of a unit with no running session; they change nothing (recovery.md R4c).";
        units_not_followed: Counter, "tickgate_feed_units_not_followed_total",
            "cboe-pitch: datagrams not placed on their unit's channel; none, since every unit is a channel of its own (kept for dashboards that chart it).";
        instruments_waiting: Gauge, "tickgate_feed_instruments_waiting",
            "cme-mdp3: instruments waiting for a snapshot (venues.md).";
        recovery_entries: Gauge, "tickgate_feed_recovery_entries",
            "cme-mdp3: incremental entries kept for instruments waiting for a snapshot (recovery_entries bounds them).";
        recovery_entries_dropped: Counter, "tickgate_feed_recovery_entries_dropped_total",
            "cme-mdp3: kept entries dropped over the recovery_entries bound; their instrument waits for a later snapshot.";
        symbols_halted: Gauge, "tickgate_feed_symbols_halted",
            "Symbols the venue says are not trading (venues.md V2).";
        symbols: Gauge, "tickgate_feed_symbols",
            "Symbols the feed tracks.";
        symbols_suspect: Gauge, "tickgate_feed_symbols_suspect",
            "Symbols currently suspect or unverified.";
        session_ended: Gauge, "tickgate_feed_session_ended",
            "1 while the feed's session has ended (C6) and no new one has started.";
        channel_seq_anomalies: Counter, "tickgate_feed_channel_seq_anomalies_total",
            "Packets max_channel_jump or more beyond the next expected sequence, not believed (C3b).";
        stale_ends_of_session: Counter, "tickgate_feed_stale_ends_of_session_total",
            "End-of-session packets below the next expected sequence (stale or forged), ignored (C6).";
        holes_opened: Counter, "tickgate_feed_holes_opened_total",
            "Holes opened: a datagram beyond the next expected sequence was held (recovery.md R1).";
        holes_filled: Counter, "tickgate_feed_holes_filled_total",
            "Holes closed without loss (R1).";
        holes_lost: Counter, "tickgate_feed_holes_lost_total",
            "Holes declared lost at their deadline, on overflow or on a session change (R2).";
        hold_overflows: Counter, "tickgate_feed_hold_overflows_total",
            "Holes declared at once because gap_hold_packets datagrams were held (R2).";
        messages_recovered: Counter, "tickgate_feed_messages_recovered_total",
            "Messages applied from re-request answers (R4).";
        rerequests_sent: Counter, "tickgate_feed_rerequests_sent_total",
            "Re-requests sent to the feed's servers (R4), or Gap Requests to its Gap Request Proxy (R4c).";
        rerequest_answers: Counter, "tickgate_feed_rerequest_answers_total",
            "Valid datagrams received from the feed's re-request servers (R4).";
        rerequest_answers_wrong_source: Counter, "tickgate_feed_rerequest_answers_wrong_source_total",
            "Datagrams on the re-request socket from an address that is not a configured server, dropped (R4).";
        rerequest_answers_wrong_session: Counter, "tickgate_feed_rerequest_answers_wrong_session_total",
            "Re-request answers of another session, dropped (R4).";
        rerequest_answers_not_data: Counter, "tickgate_feed_rerequest_answers_not_data_total",
            "Heartbeats and ends of session among re-request answers, dropped (R4).";
        rerequest_answers_malformed: Counter, "tickgate_feed_rerequest_answers_malformed_total",
            "Re-request answers that are not valid datagrams of the feed's venue, dropped (R4, R6).";
        conflicts: Counter, "tickgate_feed_conflicts_total",
            "Copies of a held datagram with the same sequence and message count but other bytes: neither applied, the sequence re-requested or lost (recovery.md R1).";
        conflict_copies_dropped: Counter, "tickgate_feed_conflict_copies_dropped_total",
            "Later copies of a conflicted sequence from the lines, dropped until the hole reaches past it (R1).";
        snapshots_started: Counter, "tickgate_feed_snapshots_started_total",
            "GLIMPSE snapshot attempts started (recovery.md R5); cboe-pitch: spin attempts of every unit (R5c).";
        snapshots_applied_r5: Counter, "tickgate_feed_glimpse_snapshots_applied_total",
            "GLIMPSE snapshots applied: books rebuilt (R5); cboe-pitch: spins applied, a unit's books rebuilt (R5c).";
        snapshots_failed: Counter, "tickgate_feed_snapshots_failed_total",
            "GLIMPSE snapshot attempts failed, every reason (R5; the reason is logged and in status); cboe-pitch: spin attempts failed (R5c).";
        recovering: Gauge, "tickgate_feed_recovering",
            "1 while the feed has an open hole: its symbols answer suspect=recovering (R3).";
        held_datagrams: Gauge, "tickgate_feed_held_datagrams",
            "Datagrams held beyond the open hole now (R1).";
        grp_logged_in: Gauge, "tickgate_feed_grp_logged_in",
            "cboe-pitch: 1 while the Gap Request Proxy connection is logged in (recovery.md R4c).";
        grp_logins: Counter, "tickgate_feed_grp_logins_total",
            "cboe-pitch: Gap Request Proxy logins accepted (R4c).";
        grp_login_failures: Counter, "tickgate_feed_grp_login_failures_total",
            "cboe-pitch: Gap Request Proxy Login Responses other than A, every status (R4c; the status is logged).";
        grp_reconnections: Counter, "tickgate_feed_grp_reconnections_total",
            "cboe-pitch: Gap Request Proxy connection attempts after the first (R4c).";
        gap_responses: Counter, "tickgate_feed_gap_responses_total",
            "cboe-pitch: Gap Responses received, every status (R4c).";
        gap_responses_refused: Counter, "tickgate_feed_gap_responses_refused_total",
            "cboe-pitch: Gap Responses other than A (O, C, S, M, D, I, U and undocumented; R4c).";
        gap_responses_dropped: Counter, "tickgate_feed_gap_responses_dropped_total",
            "cboe-pitch: Gap Responses that echo no outstanding request, dropped (R4c).";
        grp_count_limit: Gauge, "tickgate_feed_grp_count_limit",
            "cboe-pitch: the most messages one Gap Request asks for now (grp.max_count, halved by each C; R4c).";
    }
}

stats! {
    /// The counters of one line of a feed (labels: feed, line).
    LineStats, LineStatsCell, LINE_FIELDS {
        datagrams: Counter, "tickgate_line_datagrams_received_total",
            "Datagrams read from the line's socket.";
        bytes: Counter, "tickgate_line_received_bytes_total",
            "UDP payload bytes read from the line's socket.";
        packets: Counter, "tickgate_line_packets_received_total",
            "Valid packets received on the line (duplicates included).";
        messages: Counter, "tickgate_line_messages_received_total",
            "Messages in the valid packets received on the line.";
        duplicate_packets: Counter, "tickgate_line_duplicate_packets_total",
            "Packets the other line had already delivered (C2), dropped.";
        invalid_packets: Counter, "tickgate_line_invalid_packets_total",
            "Invalid datagrams received on the line.";
        kernel_drops: Counter, "tickgate_line_kernel_drops_total",
            "Datagrams the kernel dropped on the socket for lack of buffer (SO_RXQ_OVFL).";
        truncated: Counter, "tickgate_line_truncated_datagrams_total",
            "Datagrams longer than the receive buffer, dropped.";
        last_datagram_ns: TimestampNs, "tickgate_line_last_datagram_timestamp_seconds",
            "Arrival time of the line's last datagram, Unix seconds; 0 before any.";
    }
}

stats! {
    /// The counters of one unit of a `cboe-pitch` feed (labels: feed,
    /// unit): recovery.md R6 per unit.
    UnitStats, UnitStatsCell, UNIT_FIELDS {
        channel_gaps: Counter, "tickgate_unit_channel_gaps_total",
            "cboe-pitch: the unit's channel gaps (C3).";
        channel_messages_lost: Counter, "tickgate_unit_channel_messages_lost_total",
            "cboe-pitch: the unit's sequence numbers declared lost (C3, R2).";
        session_changes: Counter, "tickgate_unit_session_changes_total",
            "cboe-pitch: the unit's new sessions that replaced a running one (venues.md rules 1-4, C5).";
        sessions_ended: Counter, "tickgate_unit_sessions_ended_total",
            "cboe-pitch: the unit's sessions ended (End of Session, C6).";
        stale_session_dropped: Counter, "tickgate_unit_stale_session_packets_total",
            "cboe-pitch: the unit's datagrams of a replaced or ended session, dropped (C5, C6).";
        holes_opened: Counter, "tickgate_unit_holes_opened_total",
            "cboe-pitch: the unit's holes opened (R1).";
        holes_filled: Counter, "tickgate_unit_holes_filled_total",
            "cboe-pitch: the unit's holes closed without loss (R1, R4c).";
        holes_lost: Counter, "tickgate_unit_holes_lost_total",
            "cboe-pitch: the unit's holes declared lost (R2).";
        recovering: Gauge, "tickgate_unit_recovering",
            "cboe-pitch: 1 while the unit has an open hole (R3).";
        next_sequence: Gauge, "tickgate_unit_next_sequence",
            "cboe-pitch: the unit's next expected sequence.";
        session_ended: Gauge, "tickgate_unit_session_ended",
            "cboe-pitch: 1 while the unit's session has ended and no new one has started (C6).";
    }
}

/// Bucket upper bounds (seconds) of arrival-to-applied latency: 1 us to 1 s.
pub const APPLY_LATENCY_BUCKETS: &[f64] = &[
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
    0.1, 0.25, 0.5, 1.0,
];

/// Bucket upper bounds (seconds) of the gate's service time (a batch of
/// request bytes read to its answers written): 250 ns to 10 ms.
pub const GATE_SERVICE_BUCKETS: &[f64] = &[
    2.5e-7, 5e-7, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1e-2,
];

/// What one feed publishes.
#[derive(Debug)]
pub struct FeedMetrics {
    pub name: String,
    pub stats: FeedStatsCell,
    /// The clock offset estimate (semantics.md), ns.
    pub clock_offset_ns: AtomicI64,
    /// Lines in config order: (name, counters).
    pub lines: Vec<(String, LineStatsCell)>,
    /// Arrival (kernel timestamp) to state applied, per datagram.
    pub apply_latency: Arc<SharedHistogram>,
    /// The receiver's socket counters per line (datagrams, bytes, kernel
    /// drops), atomics it maintains itself; set once the lines are open.
    pub sockets: OnceLock<Arc<[SocketStats]>>,
    /// recovery.md R6: hole open-to-close times and line skew, as the
    /// core's fixed buckets, published by the feed writer (`try_lock`:
    /// it never waits for a scrape).
    pub recovery_times: Mutex<[NsHistogram; 2]>,
    /// recovery.md R6 per unit (`cboe-pitch`), by unit id, as last
    /// published by the feed writer (`try_lock`); empty for a venue of one
    /// channel.
    pub units: Mutex<Vec<(u8, UnitStats)>>,
    /// recovery.md R6: Gap Responses by status (`GapCounts`), as
    /// last published by the feed writer; `None` for a feed without a Gap
    /// Request Proxy.
    pub gap_responses: Mutex<Option<GapCounts>>,
}

impl FeedMetrics {
    pub fn new(name: &str, lines: &[&str]) -> FeedMetrics {
        FeedMetrics {
            name: name.to_string(),
            stats: FeedStatsCell::default(),
            clock_offset_ns: AtomicI64::new(0),
            lines: lines
                .iter()
                .map(|l| (l.to_string(), LineStatsCell::default()))
                .collect(),
            apply_latency: Arc::new(SharedHistogram::default()),
            sockets: OnceLock::new(),
            recovery_times: Mutex::new([NsHistogram::default(); 2]),
            units: Mutex::new(Vec::new()),
            gap_responses: Mutex::new(None),
        }
    }

    /// A line's counters: the writer's published ones, with the socket
    /// fields from the receiver.
    pub fn line_stats(&self, index: usize) -> LineStats {
        let mut s = self.lines[index].1.load();
        if let Some(sock) = self.sockets.get().and_then(|v| v.get(index)) {
            let snap = sock.snapshot();
            s.datagrams = snap.datagrams;
            s.bytes = snap.bytes;
            s.kernel_drops = snap.kernel_drops;
            s.truncated = snap.truncated;
        }
        s
    }

    pub fn line(&self, index: usize) -> &LineStatsCell {
        &self.lines[index].1
    }
}

/// Liveness and readiness, as `/healthz` and `/readyz` report them.
#[derive(Debug, Default)]
pub struct Health {
    /// Feeds joined and the gate socket listening.
    pub ready: AtomicBool,
    /// Shutting down: not ready any more.
    pub stopping: AtomicBool,
    /// Set by the watchdog when a worker thread stopped making progress.
    pub stalled: AtomicBool,
}

/// The registry and every handle the daemon's threads publish to.
pub struct Metrics {
    pub registry: Registry,
    pub feeds: Vec<Arc<FeedMetrics>>,
    /// The gate server's counters (written by its threads).
    pub gate: Arc<GateStats>,
    pub health: Arc<Health>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("feeds", &self.feeds.len())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// `feeds`: (feed name, its line names), in config order; `gate`: the
    /// stats the gate server counts into.
    pub fn new(feeds: &[(&str, Vec<&str>)], gate: Arc<GateStats>) -> prometheus::Result<Metrics> {
        let registry = Registry::new();
        let feeds: Vec<Arc<FeedMetrics>> = feeds
            .iter()
            .map(|(name, lines)| Arc::new(FeedMetrics::new(name, lines)))
            .collect();
        let build = IntGauge::with_opts(
            Opts::new(
                "tickgate_build_info",
                "Always 1; labels: the running version.",
            )
            .const_label("version", env!("CARGO_PKG_VERSION")),
        )?;
        build.set(1);
        registry.register(Box::new(build))?;
        let health = Arc::new(Health::default());
        registry.register(Box::new(SnapshotCollector::new(
            feeds.clone(),
            Arc::clone(&gate),
            Arc::clone(&health),
        )?))?;
        Ok(Metrics {
            registry,
            feeds,
            gate,
            health,
        })
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Reads the published snapshots at scrape time.
struct SnapshotCollector {
    feeds: Vec<Arc<FeedMetrics>>,
    gate: Arc<GateStats>,
    health: Arc<Health>,
    descs: Vec<Desc>,
}

const APPLY_LATENCY: (&str, &str) = (
    "tickgate_feed_apply_latency_seconds",
    "From a datagram's arrival (kernel timestamp) to its messages applied to the state.",
);
const HOLE_TIME: (&str, &str) = (
    "tickgate_feed_hole_open_seconds",
    "From a hole's opening to its closing, filled or declared lost (recovery.md R6).",
);
const LINE_SKEW: (&str, &str) = (
    "tickgate_feed_line_skew_seconds",
    "From the first copy of a packet to the second (on another line): what gap_hold_us must cover (recovery.md).",
);

/// The core's fixed buckets as a Prometheus histogram snapshot.
fn fixed_snapshot(h: &NsHistogram) -> HistogramSnapshot {
    let mut running = 0;
    let cumulative = NS_HISTOGRAM_BOUNDS
        .iter()
        .zip(&h.counts)
        .map(|(_, c)| {
            running += c;
            running
        })
        .collect();
    HistogramSnapshot {
        bounds: NS_HISTOGRAM_BOUNDS
            .iter()
            .map(|&b| b as f64 / 1e9)
            .collect(),
        cumulative,
        count: h.count(),
        sum_seconds: h.sum_ns as f64 / 1e9,
    }
}

const SERVICE_TIME: (&str, &str) = (
    "tickgate_gate_service_duration_seconds",
    "Gate service time per batch of requests read at once (one request unless the client pipelines), from read to answers written.",
);
const GATE_REQUESTS: (&str, &str) = (
    "tickgate_gate_requests_total",
    "Requests answered on the gate socket, by verdict: ok, reject, error, pong, status, other.",
);
const GATE_REASONS: (&str, &str) = (
    "tickgate_gate_reject_reasons_total",
    "Reasons given in REJECT answers (one answer may give several).",
);
const GATE_ACCEPTED: (&str, &str) = (
    "tickgate_gate_connections_accepted_total",
    "Client connections accepted on the gate socket.",
);
const GATE_REFUSED: (&str, &str) = (
    "tickgate_gate_connections_refused_total",
    "Client connections refused (max_connections or max_connections_per_uid reached).",
);
const GATE_REFUSED_UID: (&str, &str) = (
    "tickgate_gate_connections_refused_uid_total",
    "Client connections refused because the peer's user held max_connections_per_uid.",
);
const GATE_REAPED: (&str, &str) = (
    "tickgate_gate_connections_reaped_total",
    "Client connections closed because the client had already hung up (connect-and-close churn).",
);
const GATE_OPEN: (&str, &str) = (
    "tickgate_gate_connections",
    "Client connections open on the gate socket.",
);
const GAP_RESPONSES: (&str, &str) = (
    "tickgate_feed_gap_responses_by_status_total",
    "cboe-pitch: Gap Responses received, by status (recovery.md R4c; other: undocumented statuses).",
);
const CLOCK_OFFSET: (&str, &str) = (
    "tickgate_feed_clock_offset_seconds",
    "The provider clock offset in use (arrival minus source timestamp), seconds.",
);
const READY: (&str, &str) = (
    "tickgate_ready",
    "1 when the feeds are joined and the gate socket listens.",
);

impl SnapshotCollector {
    fn new(
        feeds: Vec<Arc<FeedMetrics>>,
        gate: Arc<GateStats>,
        health: Arc<Health>,
    ) -> prometheus::Result<SnapshotCollector> {
        let feed = || vec!["feed".to_string()];
        let line = || vec!["feed".to_string(), "line".to_string()];
        let unit = || vec!["feed".to_string(), "unit".to_string()];
        let mut descs = Vec::new();
        for f in FEED_FIELDS {
            descs.push(Desc::new(
                f.metric.into(),
                f.help.into(),
                feed(),
                Default::default(),
            )?);
        }
        for f in LINE_FIELDS {
            descs.push(Desc::new(
                f.metric.into(),
                f.help.into(),
                line(),
                Default::default(),
            )?);
        }
        for f in UNIT_FIELDS {
            descs.push(Desc::new(
                f.metric.into(),
                f.help.into(),
                unit(),
                Default::default(),
            )?);
        }
        for (name, help, labels) in [
            (CLOCK_OFFSET.0, CLOCK_OFFSET.1, feed()),
            (
                GAP_RESPONSES.0,
                GAP_RESPONSES.1,
                vec!["feed".to_string(), "status".to_string()],
            ),
            (APPLY_LATENCY.0, APPLY_LATENCY.1, feed()),
            (HOLE_TIME.0, HOLE_TIME.1, feed()),
            (LINE_SKEW.0, LINE_SKEW.1, feed()),
            (SERVICE_TIME.0, SERVICE_TIME.1, vec![]),
            (
                GATE_REQUESTS.0,
                GATE_REQUESTS.1,
                vec!["verdict".to_string()],
            ),
            (GATE_REASONS.0, GATE_REASONS.1, vec!["reason".to_string()]),
            (GATE_ACCEPTED.0, GATE_ACCEPTED.1, vec![]),
            (GATE_REFUSED.0, GATE_REFUSED.1, vec![]),
            (GATE_REFUSED_UID.0, GATE_REFUSED_UID.1, vec![]),
            (GATE_REAPED.0, GATE_REAPED.1, vec![]),
            (GATE_OPEN.0, GATE_OPEN.1, vec![]),
            (READY.0, READY.1, vec![]),
        ] {
            descs.push(Desc::new(
                name.into(),
                help.into(),
                labels,
                Default::default(),
            )?);
        }
        Ok(SnapshotCollector {
            feeds,
            gate,
            health,
            descs,
        })
    }
}

fn label(name: &str, value: &str) -> proto::LabelPair {
    let mut l = proto::LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

fn family(name: &str, help: &str, kind: MetricType) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f
}

fn sample(labels: Vec<proto::LabelPair>, kind: Kind, value: u64) -> proto::Metric {
    let mut m = proto::Metric::from_label(labels);
    match kind {
        Kind::Counter => {
            let mut c = proto::Counter::default();
            c.set_value(value as f64);
            m.set_counter(c);
        }
        Kind::Gauge => {
            let mut g = proto::Gauge::default();
            g.set_value(value as f64);
            m.set_gauge(g);
        }
        Kind::TimestampNs => {
            let mut g = proto::Gauge::default();
            g.set_value(value as f64 / 1e9);
            m.set_gauge(g);
        }
    }
    m
}

fn gauge(labels: Vec<proto::LabelPair>, value: f64) -> proto::Metric {
    let mut m = proto::Metric::from_label(labels);
    let mut g = proto::Gauge::default();
    g.set_value(value);
    m.set_gauge(g);
    m
}

fn histogram(labels: Vec<proto::LabelPair>, snap: &HistogramSnapshot) -> proto::Metric {
    let mut h = proto::Histogram::default();
    h.set_sample_count(snap.count);
    h.set_sample_sum(snap.sum_seconds);
    h.set_bucket(
        snap.bounds
            .iter()
            .zip(&snap.cumulative)
            .map(|(&b, &c)| {
                let mut bucket = proto::Bucket::default();
                bucket.set_upper_bound(b);
                bucket.set_cumulative_count(c);
                bucket
            })
            .collect(),
    );
    let mut m = proto::Metric::from_label(labels);
    m.set_histogram(h);
    m
}

fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Counter => MetricType::COUNTER,
        Kind::Gauge | Kind::TimestampNs => MetricType::GAUGE,
    }
}

impl Collector for SnapshotCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut out = Vec::new();
        let feed_stats: Vec<Vec<u64>> =
            self.feeds.iter().map(|f| f.stats.load().values()).collect();
        for (i, field) in FEED_FIELDS.iter().enumerate() {
            let mut fam = family(field.metric, field.help, metric_type(field.kind));
            for (feed, values) in self.feeds.iter().zip(&feed_stats) {
                fam.mut_metric().push(sample(
                    vec![label("feed", &feed.name)],
                    field.kind,
                    values[i],
                ));
            }
            out.push(fam);
        }
        let line_stats: Vec<Vec<(&str, &str, Vec<u64>)>> = self
            .feeds
            .iter()
            .map(|f| {
                f.lines
                    .iter()
                    .enumerate()
                    .map(|(i, (l, _))| (f.name.as_str(), l.as_str(), f.line_stats(i).values()))
                    .collect()
            })
            .collect();
        for (i, field) in LINE_FIELDS.iter().enumerate() {
            let mut fam = family(field.metric, field.help, metric_type(field.kind));
            for (feed, line, values) in line_stats.iter().flatten() {
                fam.mut_metric().push(sample(
                    vec![label("feed", feed), label("line", line)],
                    field.kind,
                    values[i],
                ));
            }
            out.push(fam);
        }
        let unit_stats: Vec<(&str, String, Vec<u64>)> = self
            .feeds
            .iter()
            .flat_map(|f| {
                let units = f.units.lock().unwrap_or_else(|e| e.into_inner()).clone();
                units
                    .into_iter()
                    .map(move |(u, s)| (f.name.as_str(), u.to_string(), s.values()))
            })
            .collect();
        if !unit_stats.is_empty() {
            for (i, field) in UNIT_FIELDS.iter().enumerate() {
                let mut fam = family(field.metric, field.help, metric_type(field.kind));
                for (feed, unit, values) in &unit_stats {
                    fam.mut_metric().push(sample(
                        vec![label("feed", feed), label("unit", unit)],
                        field.kind,
                        values[i],
                    ));
                }
                out.push(fam);
            }
        }
        let mut gap = family(GAP_RESPONSES.0, GAP_RESPONSES.1, MetricType::COUNTER);
        for f in &self.feeds {
            let counts = *f.gap_responses.lock().unwrap_or_else(|e| e.into_inner());
            for (slot, n) in counts.into_iter().flatten().enumerate() {
                let status = GapStatus::slot_label(slot);
                gap.mut_metric().push(sample(
                    vec![label("feed", &f.name), label("status", status)],
                    Kind::Counter,
                    n,
                ));
            }
        }
        if !gap.get_metric().is_empty() {
            out.push(gap);
        }
        let mut offset = family(CLOCK_OFFSET.0, CLOCK_OFFSET.1, MetricType::GAUGE);
        let mut latency = family(APPLY_LATENCY.0, APPLY_LATENCY.1, MetricType::HISTOGRAM);
        for f in &self.feeds {
            let ns = f.clock_offset_ns.load(Ordering::Relaxed);
            offset
                .mut_metric()
                .push(gauge(vec![label("feed", &f.name)], ns as f64 / 1e9));
            let snap = f.apply_latency.snapshot(APPLY_LATENCY_BUCKETS);
            latency
                .mut_metric()
                .push(histogram(vec![label("feed", &f.name)], &snap));
        }
        out.push(offset);
        out.push(latency);
        let mut holes = family(HOLE_TIME.0, HOLE_TIME.1, MetricType::HISTOGRAM);
        let mut skew = family(LINE_SKEW.0, LINE_SKEW.1, MetricType::HISTOGRAM);
        for f in &self.feeds {
            let [h, k] = *f.recovery_times.lock().unwrap_or_else(|e| e.into_inner());
            holes
                .mut_metric()
                .push(histogram(vec![label("feed", &f.name)], &fixed_snapshot(&h)));
            skew.mut_metric()
                .push(histogram(vec![label("feed", &f.name)], &fixed_snapshot(&k)));
        }
        out.push(holes);
        out.push(skew);
        out.extend(gate_families(&self.gate));
        let mut ready = family(READY.0, READY.1, MetricType::GAUGE);
        let is_ready = self.health.ready.load(Ordering::Relaxed)
            && !self.health.stopping.load(Ordering::Relaxed);
        ready
            .mut_metric()
            .push(gauge(vec![], f64::from(u8::from(is_ready))));
        out.push(ready);
        out
    }
}

/// The gate server's counters and its HDR service-time histogram.
fn gate_families(g: &GateStats) -> Vec<MetricFamily> {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut out = Vec::new();
    let mut req = family(GATE_REQUESTS.0, GATE_REQUESTS.1, MetricType::COUNTER);
    for (verdict, n) in [
        ("ok", load(&g.ok)),
        ("reject", load(&g.reject)),
        ("error", load(&g.err)),
        ("pong", load(&g.pong)),
        ("status", load(&g.status)),
        ("other", load(&g.other)),
    ] {
        req.mut_metric()
            .push(sample(vec![label("verdict", verdict)], Kind::Counter, n));
    }
    out.push(req);
    let mut reasons = family(GATE_REASONS.0, GATE_REASONS.1, MetricType::COUNTER);
    for (reason, n) in REJECT_REASONS.iter().zip(&g.rejects_by_reason) {
        reasons.mut_metric().push(sample(
            vec![label("reason", reason)],
            Kind::Counter,
            load(n),
        ));
    }
    out.push(reasons);
    for (meta, kind, v) in [
        (GATE_ACCEPTED, Kind::Counter, load(&g.connections_accepted)),
        (GATE_REFUSED, Kind::Counter, load(&g.connections_refused)),
        (
            GATE_REFUSED_UID,
            Kind::Counter,
            load(&g.connections_refused_uid),
        ),
        (GATE_REAPED, Kind::Counter, load(&g.connections_reaped)),
        (
            GATE_OPEN,
            Kind::Gauge,
            g.connections_open.load(Ordering::Relaxed).max(0) as u64,
        ),
    ] {
        let mut f = family(meta.0, meta.1, metric_type(kind));
        f.mut_metric().push(sample(vec![], kind, v));
        out.push(f);
    }
    let snap = g.service.snapshot(GATE_SERVICE_BUCKETS);
    let mut f = family(SERVICE_TIME.0, SERVICE_TIME.1, MetricType::HISTOGRAM);
    f.mut_metric().push(histogram(vec![], &snap));
    out.push(f);
    out
}

// ---------------------------------------------------------------------------
// HTTP (I/O)

/// The metrics endpoint's routes.
pub fn router(metrics: Arc<Metrics>) -> axum::Router {
    use axum::http::{header, StatusCode};
    use axum::routing::get;
    let m1 = Arc::clone(&metrics);
    let m2 = Arc::clone(&metrics);
    let m3 = metrics;
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = Arc::clone(&m1);
                async move {
                    // Rendering reads atomics and locks histograms briefly;
                    // it is cheap enough for the runtime thread.
                    (
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        m.render(),
                    )
                }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let h = Arc::clone(&m2.health);
                async move {
                    if h.stalled.load(Ordering::Relaxed) {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "stalled: a worker thread stopped\n",
                        )
                    } else {
                        (StatusCode::OK, "ok\n")
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let h = Arc::clone(&m3.health);
                async move {
                    if h.stopping.load(Ordering::Relaxed) {
                        (StatusCode::SERVICE_UNAVAILABLE, "stopping\n")
                    } else if h.stalled.load(Ordering::Relaxed) {
                        (StatusCode::SERVICE_UNAVAILABLE, "stalled\n")
                    } else if !h.ready.load(Ordering::Relaxed) {
                        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
                    } else {
                        (StatusCode::OK, "ready\n")
                    }
                }
            }),
        )
}

/// Binds the metrics address (before the daemon reports ready, so a
/// taken port is an error at start, not a silent hole).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves until `shutdown` completes, with `limits` (timeouts and a
/// connection cap: `crate::http_limits`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    limits: crate::http_limits::HttpLimits,
    stats: crate::http_limits::LimitStats,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app =
        crate::http_limits::limit_requests(router(metrics), &limits, &[], 1 << 16, stats.clone());
    crate::http_limits::serve(listener, app, limits, stats, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new(
            &[("fx", vec!["A", "B"]), ("eq", vec!["A"])],
            Arc::new(GateStats::default()),
        )
        .unwrap()
    }

    #[test]
    fn published_counters_reach_the_exposition() {
        let m = metrics();
        let stats = FeedStats {
            channel_messages_lost: 7,
            ticks_lost: 3,
            symbols_suspect: 2,
            ..Default::default()
        };
        m.feeds[0].stats.store(&stats);
        m.feeds[0].line(1).store(&LineStats {
            packets: 10,
            duplicate_packets: 4,
            ..Default::default()
        });
        m.feeds[0]
            .clock_offset_ns
            .store(-1_500_000, Ordering::Relaxed);
        let text = m.render();
        assert!(
            text.contains("tickgate_feed_channel_messages_lost_total{feed=\"fx\"} 7\n"),
            "{text}"
        );
        assert!(text.contains("tickgate_feed_channel_messages_lost_total{feed=\"eq\"} 0\n"));
        assert!(text.contains("tickgate_feed_symbols_suspect{feed=\"fx\"} 2\n"));
        assert!(text.contains("tickgate_line_duplicate_packets_total{feed=\"fx\",line=\"B\"} 4\n"));
        assert!(text.contains("tickgate_line_packets_received_total{feed=\"fx\",line=\"B\"} 10\n"));
        assert!(text.contains("tickgate_feed_clock_offset_seconds{feed=\"fx\"} -0.0015\n"));
        assert!(text.contains("# TYPE tickgate_feed_ticks_lost_total counter"));
    }

    #[test]
    fn gate_stats_by_verdict_reason_and_service_time() {
        let m = metrics();
        m.gate.ok.store(3, Ordering::Relaxed);
        m.gate.reject.store(2, Ordering::Relaxed);
        let at = |name: &str| REJECT_REASONS.iter().position(|r| *r == name).unwrap();
        m.gate.rejects_by_reason[at("stale_quote")].store(2, Ordering::Relaxed);
        m.gate.rejects_by_reason[at("halted")].store(7, Ordering::Relaxed);
        m.gate.rejects_by_reason[at("suspect")].store(1, Ordering::Relaxed);
        m.gate.connections_open.store(1, Ordering::Relaxed);
        // 4 batches under 250 ns, 1 in (500 ns, 1 us], 1 beyond every bound.
        let mut rec = m.gate.service.small_recorder();
        for ns in [100, 100, 100, 100, 600, 2_999_999_000] {
            rec.record(ns);
        }
        drop(rec);
        let text = m.render();
        for want in [
            "tickgate_gate_requests_total{verdict=\"ok\"} 3\n",
            "tickgate_gate_requests_total{verdict=\"reject\"} 2\n",
            "tickgate_gate_reject_reasons_total{reason=\"stale_quote\"} 2\n",
            "tickgate_gate_reject_reasons_total{reason=\"halted\"} 7\n",
            "tickgate_gate_reject_reasons_total{reason=\"suspect\"} 1\n",
            "tickgate_gate_reject_reasons_total{reason=\"no_data\"} 0\n",
            "tickgate_gate_reject_reasons_total{reason=\"crossed\"} 0\n",
            "tickgate_gate_connections 1\n",
            "tickgate_gate_service_duration_seconds_bucket{le=\"0.00000025\"} 4\n",
            "tickgate_gate_service_duration_seconds_bucket{le=\"0.0000005\"} 4\n",
            "tickgate_gate_service_duration_seconds_bucket{le=\"0.000001\"} 5\n",
            "tickgate_gate_service_duration_seconds_bucket{le=\"0.01\"} 5\n",
            "tickgate_gate_service_duration_seconds_bucket{le=\"+Inf\"} 6\n",
            "tickgate_gate_service_duration_seconds_count 6\n",
            "tickgate_gate_service_duration_seconds_sum 3\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative_with_exact_sum() {
        let shared = Arc::new(SharedHistogram::default());
        let mut rec = shared.recorder();
        // 3 x 1.5 us, 1 x 40 us, 1 x 2 s (beyond the last bound), 1 negative.
        for v in [1_500, 1_500, 1_500, 40_000, 2_000_000_000, -5] {
            rec.record(v, 0);
        }
        rec.flush();
        let snap = shared.snapshot(APPLY_LATENCY_BUCKETS);
        assert_eq!(snap.count, 6);
        let expected_sum = (4_500 + 40_000 + 2_000_000_000) as f64 / 1e9;
        assert!((snap.sum_seconds - expected_sum).abs() < 1e-12);
        let at = |bound: f64| {
            let i = snap.bounds.iter().position(|&b| b == bound).unwrap();
            snap.cumulative[i]
        };
        assert_eq!(at(1e-6), 1, "the negative sample counts as 0");
        assert_eq!(at(2e-6), 4);
        assert_eq!(at(2e-5), 4);
        assert_eq!(at(5e-5), 5);
        assert_eq!(at(1.0), 5, "2 s is only in +Inf");
        let text = {
            let m = metrics();
            let mut r = m.feeds[0].apply_latency.recorder();
            r.record(1_500, 0);
            r.flush();
            m.render()
        };
        assert!(
            text.contains(
                "tickgate_feed_apply_latency_seconds_bucket{feed=\"fx\",le=\"0.000002\"} 1\n"
            ),
            "{text}"
        );
        assert!(text
            .contains("tickgate_feed_apply_latency_seconds_bucket{feed=\"fx\",le=\"+Inf\"} 1\n"));
        assert!(text.contains("tickgate_feed_apply_latency_seconds_count{feed=\"fx\"} 1\n"));
    }
}
