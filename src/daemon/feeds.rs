//! The glue between the config, the core's `Feed` (sans-I/O), the state
//! table the gate reads, the receiver thread and the metrics.
//!
//! A [`FeedWriter`] is the receiver's handler: it lives on the feed's
//! thread and owns the `Feed`, so nothing on the datagram path is shared or
//! locked. From the receiver's periodic `on_poll` it publishes a counters
//! snapshot for the metrics, merges its latency samples, proves progress
//! to the watchdog and applies threshold reloads sent over a channel.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::config::{self, FeedConfig, FeedThresholds, InterfaceSpec, SymbolConfig};
use crate::feed::reader::{feed_table, feed_table_in, FeedReader, TablePublisher};
use crate::feed::{Feed, FeedSettings, SnapshotPhase};
use crate::gate::links::{GrpLink, Links, SharedLinks, SpinLink, UnitLink};
use crate::metrics::{FeedMetrics, FeedStats, LineStats, UnitStats};
use crate::net::glimpse::{GlimpseClient, Outcome};
use crate::net::grp::{GrpClient, GrpClientEvent};
use crate::net::receiver::{self, DatagramHandler, LineSpec};
use crate::net::spin::{Outcome as SpinOutcome, SpinClient};
use crate::util::histogram::LatencyRecorder;
use crate::venue::cboe_pitch::grp::GapRequest;
use crate::venue::cboe_pitch::session::GapStatus;
use crate::venue::cboe_pitch::session::LoginStatus;
use crate::venue::refill::AnyRequest;
use crate::venue::rerequest::REQUEST_LEN;
use crate::wire::Symbol;

use super::watchdog::Beat;

/// Counters are published at most this often (ns): cheap, but not per batch.
const PUBLISH_EVERY_NS: i64 = 50_000_000;
/// `symbols_suspect` costs O(symbols): computed less often (ns).
const SUSPECT_EVERY_NS: i64 = 1_000_000_000;

/// What the control side asks of a running feed writer.
#[derive(Debug, Clone)]
pub enum Control {
    /// New thresholds from a reload (SIGHUP).
    Thresholds(FeedThresholds),
}

/// The core's settings for a configured feed.
pub fn settings(f: &FeedConfig) -> FeedSettings {
    f.feed_settings()
}

/// The receiver's line specs, with interface names resolved now, so that
/// a missing interface is a config error naming its key, before anything
/// starts. `feed_index` is for the key path.
pub fn line_specs(feed_index: usize, f: &FeedConfig) -> Result<Vec<LineSpec>, config::ConfigError> {
    // Every line's problem, not only the first.
    let (ok, problems): (Vec<_>, Vec<_>) = f
        .lines
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let interface = match &l.interface {
                // INADDR_ANY: the kernel picks the interface by route.
                None => receiver::InterfaceSpec::Addr(std::net::Ipv4Addr::UNSPECIFIED),
                Some(InterfaceSpec::Addr(a)) => {
                    if !local_ipv4_addresses().contains(a) {
                        return Err(config::ConfigError::Invalid {
                            key: format!("feed[{feed_index}].line[{k}].interface"),
                            problem: format!("{a} is not an address of this host's interfaces"),
                        });
                    }
                    receiver::InterfaceSpec::Addr(*a)
                }
                Some(InterfaceSpec::Name(n)) => {
                    if !interface_exists(n) {
                        return Err(config::ConfigError::Invalid {
                            key: format!("feed[{feed_index}].line[{k}].interface"),
                            problem: format!("no network interface named \"{n}\" on this host"),
                        });
                    }
                    let spec = receiver::InterfaceSpec::Name(n.clone());
                    match spec.resolve() {
                        Ok(a) => receiver::InterfaceSpec::Addr(a),
                        Err(e) => {
                            return Err(config::ConfigError::Invalid {
                                key: format!("feed[{feed_index}].line[{k}].interface"),
                                problem: crate::util::errors::chain(&e).to_string(),
                            })
                        }
                    }
                }
            };
            Ok(LineSpec {
                name: l.name.clone(),
                group: l.group,
                port: l.port,
                interface,
                source: l.source,
                rcvbuf: l.rcvbuf,
            })
        })
        .partition(Result::is_ok);
    config::ConfigError::from_all(problems.into_iter().filter_map(Result::err).collect())?;
    Ok(ok.into_iter().filter_map(Result::ok).collect())
}

/// Every IPv4 address of this host's interfaces (`getifaddrs`); empty if
/// the call fails (then the join reports the problem).
fn local_ipv4_addresses() -> Vec<std::net::Ipv4Addr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to at least a sockaddr header.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET {
            // SAFETY: AF_INET: the address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            out.push(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

fn interface_exists(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

/// A feed's writer half and the gate's reader half, with the configured
/// symbols and thresholds in place.
pub fn build(f: &FeedConfig) -> (Feed<TablePublisher>, FeedReader) {
    build_in(f, None)
}

/// `build` with the table in `region` of the shared state file (sized for
/// the feed's `max_symbols` by `daemon::shm`), or on the heap.
pub fn build_in(
    f: &FeedConfig,
    region: Option<&super::shm::FeedRegion>,
) -> (Feed<TablePublisher>, FeedReader) {
    let settings = settings(f);
    let (publisher, reader) = match region {
        Some(r) => feed_table_in(r.capacity, &r.cell, &r.table, r.units, &r.units_region)
            .expect("the region is laid out for this capacity"),
        None => feed_table(&settings),
    };
    let mut feed = Feed::with_publisher(settings, f.lines.len(), publisher);
    for (i, line) in f.lines.iter().enumerate() {
        feed.set_line_kind(i, line.kind);
    }
    apply_overrides(&mut feed, f.stale_ms, f.source_max_age_ms, &f.symbols);
    (feed, reader)
}

/// Sets every configured symbol's thresholds (which also makes it known).
fn apply_overrides(
    feed: &mut Feed<TablePublisher>,
    stale_ms: u64,
    source_max_age_ms: u64,
    symbols: &[SymbolConfig],
) {
    for s in symbols {
        let stale = s.stale_ms.unwrap_or(stale_ms);
        let source = s.source_max_age_ms.unwrap_or(source_max_age_ms);
        if feed
            .set_symbol_thresholds(s.symbol, stale, source)
            .is_none()
        {
            tracing::error!(symbol = %s.symbol, "symbol table full: configured symbol not added");
        }
    }
}

/// The receiver's handler for one feed.
pub struct FeedWriter {
    feed: Feed<TablePublisher>,
    metrics: Arc<FeedMetrics>,
    latency: LatencyRecorder,
    beat: Arc<Beat>,
    control: Receiver<Control>,
    last_arrival: Vec<i64>,
    last_publish: i64,
    last_suspect: i64,
    symbols_suspect: u64,
    symbols_halted: u64,
    /// The full symbol table was logged (once per feed).
    overflow_logged: bool,
    /// Feed-wide thresholds set by a reload, when they differ from the
    /// ones the feed was created with: symbols created later get the
    /// feed's original defaults from the core, so they are corrected here.
    reloaded: Option<FeedThresholds>,
    /// Symbols already given the reloaded thresholds (dense slots 0..n).
    corrected: usize,
    /// R5: the feed's GLIMPSE client, when it has a snapshot server.
    glimpse: Option<GlimpseClient>,
    /// R4c: the feed's Gap Request Proxy client, when it has `grp`.
    grp: Option<GrpClient>,
    /// R5c: the feed's Spin client and each unit's Spin Server, when
    /// `spin` is set. The client runs the attempts of different units at
    /// the same time, each on its own connection (R5c: they are
    /// independent), and at most one per unit; it knows which units'
    /// attempts run (`SpinClient::running`).
    spin: Option<(SpinClient, Vec<(u8, std::net::SocketAddr)>)>,
    /// R4c, R5c: what the GRP connection and the units' spins are doing,
    /// for the gate's `STATUS` (made by `links`).
    links: Option<SharedLinks>,
    /// A spin started or ended, or the GRP connection said something,
    /// since `links` was last written: written at the next poll rather
    /// than the next publication, so that `STATUS` never lags the check
    /// answers the change produced by up to `PUBLISH_EVERY_NS`.
    links_changed: bool,
}

impl FeedWriter {
    pub fn new(
        feed: Feed<TablePublisher>,
        metrics: Arc<FeedMetrics>,
        beat: Arc<Beat>,
    ) -> (FeedWriter, Sender<Control>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let lines = metrics.lines.len();
        let latency = metrics.apply_latency.recorder();
        let w = FeedWriter {
            feed,
            metrics,
            latency,
            beat,
            control: rx,
            last_arrival: vec![0; lines],
            last_publish: i64::MIN,
            last_suspect: i64::MIN,
            symbols_suspect: 0,
            symbols_halted: 0,
            overflow_logged: false,
            reloaded: None,
            corrected: 0,
            glimpse: None,
            grp: None,
            spin: None,
            links: None,
            links_changed: false,
        };
        (w, tx)
    }

    /// R5: snapshots come from this client.
    pub fn set_glimpse(&mut self, client: GlimpseClient) {
        self.glimpse = Some(client);
    }

    /// R4c: re-requests go through this client. Until it logs in, holes get
    /// R2's deadline without re-requests.
    pub fn set_grp(&mut self, client: GrpClient) {
        self.feed
            .units()
            .set_refill_logged_in(false, receiver::realtime_ns());
        self.grp = Some(client);
    }

    /// R4c: what the Gap Request Proxy's connection reported, into the
    /// core; the requests the core has due, out.
    fn drive_grp(&mut self, now: i64) {
        let Some(client) = &self.grp else {
            return;
        };
        let feed = self.metrics.name.as_str();
        while let Some(event) = client.try_event() {
            self.links_changed = true;
            match event {
                GrpClientEvent::LoggedIn => self.feed.units().set_refill_logged_in(true, now),
                GrpClientEvent::Down(why) => {
                    // The client logs the connection's failures.
                    tracing::debug!(feed, ?why, "Gap Request Proxy not logged in");
                    self.feed.units().set_refill_logged_in(false, now);
                }
                GrpClientEvent::Response {
                    unit,
                    sequence,
                    count,
                    status,
                } => {
                    let request = AnyRequest::GapProxy(GapRequest {
                        unit,
                        sequence,
                        count,
                    });
                    let known =
                        self.feed
                            .units()
                            .on_refill_response(unit, request, status.byte(), now);
                    if !known {
                        tracing::debug!(
                            feed,
                            unit,
                            sequence,
                            count,
                            "a Gap Response that echoes no outstanding request, dropped"
                        );
                    } else if status == GapStatus::InvalidUnit {
                        // R4c `I`: a configuration to fix.
                        tracing::warn!(
                            feed,
                            unit,
                            "the Gap Request Proxy does not serve this unit (I): no Gap Request \
                             for it until its next session"
                        );
                    }
                }
            }
        }
        while let Some((_, request)) = self.feed.units().poll_refill(now) {
            if let AnyRequest::GapProxy(r) = request {
                client.send(r);
            }
        }
    }

    /// R5: starts an attempt the core asks for, applies a finished one.
    fn drive_snapshot(&mut self, now: i64) {
        let Some(client) = &self.glimpse else {
            return;
        };
        let feed = self.metrics.name.as_str();
        if let Some(outcome) = client.try_outcome() {
            match outcome {
                Outcome::Done(s) => {
                    let orders_before = self.feed.counters().live_orders;
                    match self.feed.on_snapshot(s.next, &s.blocks, s.end_at) {
                        Ok(()) => tracing::info!(
                            feed,
                            next = s.next,
                            soupbin_session = %s.session,
                            bytes = s.blocks.len(),
                            live_orders = self.feed.counters().live_orders,
                            orders_before,
                            "GLIMPSE snapshot applied"
                        ),
                        Err(why) => tracing::warn!(
                            feed,
                            reason = why.as_str(),
                            "GLIMPSE snapshot not applied; retrying with backoff"
                        ),
                    }
                }
                Outcome::Failed(why, detail) => {
                    self.feed.on_snapshot_failed(why, now);
                    tracing::warn!(
                        feed,
                        reason = why.as_str(),
                        detail = detail.as_str(),
                        "GLIMPSE snapshot failed; retrying with backoff"
                    );
                }
            }
        }
        if self.feed.poll_snapshot_start(now) {
            client.start();
        }
    }

    /// R5c: spins come from this client, from each unit's server in
    /// `servers` (the units of `spin.servers`).
    pub fn set_spin(&mut self, client: SpinClient, servers: Vec<(u8, std::net::SocketAddr)>) {
        self.spin = Some((client, servers));
    }

    /// R5c: hands every finished attempt to the core, then starts the
    /// attempt of every unit the core says is due, whatever other units'
    /// attempts are running (R5c: attempts of different units are
    /// independent and may run at the same time).
    fn drive_spin(&mut self, now: i64) {
        let Some((client, servers)) = &self.spin else {
            return;
        };
        let feed = self.metrics.name.as_str();
        while let Some((unit, outcome)) = client.try_outcome() {
            self.links_changed = true;
            match outcome {
                SpinOutcome::Done(s) => match self
                    .feed
                    .units()
                    .on_image(unit, s.next, &s.blocks, s.end_at)
                {
                    Ok(()) => {
                        tracing::info!(
                            feed,
                            unit,
                            sequence = s.next - 1,
                            bytes = s.blocks.len(),
                            live_orders = self.feed.counters().live_orders,
                            "spin applied"
                        );
                        if s.trading_statuses == 0 {
                            // R5c: a halt that began before the late join
                            // stays unknown until the symbol's next change.
                            tracing::warn!(
                                feed,
                                unit,
                                "spin without Trading Status: halts before the join are unknown"
                            );
                        }
                    }
                    Err(why) => tracing::warn!(
                        feed,
                        unit,
                        reason = why.as_str(),
                        "spin not applied; retrying with backoff"
                    ),
                },
                SpinOutcome::Failed { why, detail, login } => {
                    if login == Some(LoginStatus::SessionInUse) {
                        // R5c: not counted for the unit's pace; it tries
                        // again when another attempt of the feed ends, or
                        // at the latest one backoff after.
                        self.feed.units().on_image_session_in_use(unit, now);
                    } else {
                        self.feed.units().on_image_failed(unit, why, now);
                    }
                    tracing::warn!(
                        feed,
                        unit,
                        reason = why.as_str(),
                        session_in_use = login == Some(LoginStatus::SessionInUse),
                        detail = detail.as_str(),
                        "spin failed; retrying with backoff"
                    );
                }
            }
        }
        // Every due unit, skipping those whose attempt the client still
        // runs (one the core ended early, on a session change): each
        // starts once its outcome is in.
        while let Some((unit, n0)) = self
            .feed
            .units()
            .poll_image_start_except(now, |u| client.running(u))
        {
            match servers.iter().find(|(u, _)| *u == unit) {
                Some(&(_, address)) if client.start(unit, address, n0) => {
                    self.links_changed = true;
                }
                _ => {
                    // Not reached: the core wants spins of configured
                    // units only, and passes over those running.
                    self.feed.units().on_image_failed(
                        unit,
                        crate::feed::SnapshotFailure::Refused,
                        now,
                    );
                }
            }
        }
    }

    pub fn feed(&self) -> &Feed<TablePublisher> {
        &self.feed
    }

    /// The cell this writer publishes its GRP connection and its units'
    /// spins into (R4c, R5c), for the gate's `STATUS`; `None` for a feed
    /// with neither `grp` nor `spin`.
    pub fn links(&mut self) -> Option<SharedLinks> {
        if self.grp.is_none() && self.spin.is_none() {
            return None;
        }
        let links = self.links.get_or_insert_with(SharedLinks::default).clone();
        self.publish_links(receiver::realtime_ns());
        Some(links)
    }

    /// R4c, R5c: the GRP connection and each unit's spin, as the core
    /// sees them at `now`, into the `links` cell (skipped while the gate
    /// reads it: the next publication catches up).
    fn publish_links(&mut self, now: i64) {
        let Some(cell) = &self.links else {
            return;
        };
        let grp = self
            .grp
            .as_ref()
            .and_then(|_| self.feed.recovery().refill_status(now));
        let servers: &[(u8, std::net::SocketAddr)] =
            self.spin.as_ref().map_or(&[], |(_, s)| s.as_slice());
        let mut ids: Vec<u8> = self
            .feed
            .channel_reports()
            .iter()
            .map(|r| r.channel)
            .chain(servers.iter().map(|(u, _)| *u))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let units = ids
            .into_iter()
            .map(|unit| UnitLink {
                unit,
                spin: if servers.iter().any(|(u, _)| *u == unit) {
                    match self.feed.recovery().image_phase(unit) {
                        (SnapshotPhase::Idle, _) => SpinLink::Idle,
                        (SnapshotPhase::Running { since }, _) => SpinLink::Running { since },
                        (SnapshotPhase::Wanted { not_before }, last_failure) => SpinLink::Wanted {
                            not_before,
                            last_failure,
                        },
                    }
                } else {
                    SpinLink::NoServer
                },
                grp_off: grp.map(|_| self.feed.recovery().refill_unit_off(unit)),
            })
            .collect();
        let links = Links {
            grp: grp.map(|g| GrpLink {
                logged_in: g.logged_in,
                count_limit: g.count_limit,
                pause: g.pause,
            }),
            units,
        };
        if let Ok(mut l) = cell.try_lock() {
            *l = links;
            self.links_changed = false;
        }
    }

    /// Copies the core's counters into the metrics cells.
    pub fn publish(&mut self, now: i64) {
        if now.saturating_sub(self.last_suspect) >= SUSPECT_EVERY_NS {
            self.symbols_suspect = self.feed.symbols_suspect() as u64;
            self.symbols_halted = self.feed.symbols_halted() as u64;
            self.last_suspect = now;
        }
        let grp = self
            .grp
            .as_ref()
            .map(|g| g.counts().conn)
            .unwrap_or_default();
        let c = self.feed.counters();
        if c.symbols_overflow > 0 && !self.overflow_logged {
            // Once: every further symbol is counted, not logged.
            self.overflow_logged = true;
            tracing::warn!(
                feed = self.metrics.name.as_str(),
                max_symbols = self.feed.settings().max_symbols,
                "symbol table full: new symbols are ignored and counted (symbols_overflow)"
            );
        }
        self.metrics.stats.store(&FeedStats {
            invalid_packets: c.invalid_packets,
            invalid_messages: c.invalid_messages,
            unknown_messages: c.unknown_messages,
            channel_gaps: c.channel_gaps,
            channel_messages_lost: c.channel_messages_lost,
            ticks_lost: c.ticks_lost,
            stale_dropped: c.stale_dropped,
            seq_anomalies: c.seq_anomalies,
            seq_resyncs: c.seq_resyncs,
            snapshots_applied: c.snapshots_applied,
            snapshots_ignored: c.snapshots_ignored,
            spins_without_status: c.spins_without_status,
            session_changes: c.session_changes,
            sessions_ended: c.sessions_ended,
            stale_session_dropped: c.stale_session_dropped,
            symbols_overflow: c.symbols_overflow,
            unknown_orders: c.unknown_orders,
            orders_overflow: c.orders_overflow,
            order_conflicts: c.order_conflicts,
            locate_conflicts: c.locate_conflicts,
            live_orders: c.live_orders,
            book_errors: c.book_errors,
            unit_clears: c.unit_clears,
            prices_unbookable: c.prices_unbookable,
            unsequenced: c.unsequenced,
            gap_dropped: c.gap_dropped,
            units_not_followed: c.units_not_followed,
            instruments_waiting: self.feed.venue_recovery().waiting,
            recovery_entries: self.feed.venue_recovery().kept_entries,
            recovery_entries_dropped: self.feed.venue_recovery().kept_dropped,
            symbols_halted: self.symbols_halted,
            symbols: self.feed.symbol_count() as u64,
            symbols_suspect: self.symbols_suspect,
            session_ended: u64::from(self.feed.session_ended()),
            channel_seq_anomalies: c.channel_seq_anomalies,
            stale_ends_of_session: c.stale_ends_of_session,
            holes_opened: c.recovery.holes_opened,
            holes_filled: c.recovery.holes_filled,
            holes_lost: c.recovery.holes_lost,
            hold_overflows: c.recovery.hold_overflows,
            messages_recovered: c.recovery.messages_recovered,
            rerequests_sent: c.recovery.requests_sent,
            rerequest_answers: c.recovery.answers_received,
            rerequest_answers_wrong_source: c.recovery.answers_wrong_source,
            rerequest_answers_wrong_session: c.recovery.answers_wrong_session,
            rerequest_answers_not_data: c.recovery.answers_not_data,
            rerequest_answers_malformed: c.recovery.answers_malformed,
            conflicts: c.recovery.conflicts,
            conflict_copies_dropped: c.recovery.conflict_copies_dropped,
            snapshots_started: c.recovery.snapshots_started,
            snapshots_applied_r5: c.recovery.snapshots_applied,
            snapshots_failed: c.recovery.snapshots_failed.iter().sum(),
            recovering: u64::from(self.feed.recovering()),
            held_datagrams: self.feed.hold_usage().0 as u64,
            grp_logged_in: u64::from(grp.logged_in),
            grp_logins: grp.logins,
            grp_login_failures: grp.login_failures.not_authorized
                + grp.login_failures.session_in_use
                + grp.login_failures.invalid_session
                + grp.login_failures.other,
            grp_reconnections: grp.reconnections,
            gap_responses: c.recovery.responses_by_status.iter().sum(),
            gap_responses_refused: c.recovery.responses_by_status[1..].iter().sum(),
            gap_responses_dropped: c.recovery.responses_dropped,
            grp_count_limit: self.feed.recovery().refill_count_limit().unwrap_or(0),
        });
        for (i, l) in c.lines.iter().enumerate() {
            if let Some((_, cell)) = self.metrics.lines.get(i) {
                // Socket-level fields (datagrams, bytes, drops) come from
                // the receiver's own counters at scrape time.
                cell.store(&LineStats {
                    packets: l.packets,
                    messages: l.messages,
                    duplicate_packets: l.duplicate_packets,
                    invalid_packets: l.invalid_packets,
                    last_datagram_ns: self.last_arrival[i].max(0) as u64,
                    ..LineStats::default()
                });
            }
        }
        self.metrics
            .clock_offset_ns
            .store(self.feed.clock_offset_ns(), Ordering::Relaxed);
        if self.feed.has_units() {
            if let Ok(mut units) = self.metrics.units.try_lock() {
                units.clear();
                units.extend(self.feed.channel_reports().iter().map(|r| {
                    (
                        r.channel,
                        UnitStats {
                            channel_gaps: r.counters.channel_gaps,
                            channel_messages_lost: r.counters.channel_messages_lost,
                            session_changes: r.counters.session_changes,
                            sessions_ended: r.counters.sessions_ended,
                            stale_session_dropped: r.counters.stale_session_dropped,
                            holes_opened: r.holes.opened,
                            holes_filled: r.holes.filled,
                            holes_lost: r.holes.lost,
                            recovering: u64::from(r.holes.open_now),
                            next_sequence: r.next,
                            session_ended: u64::from(r.ended),
                        },
                    )
                }));
            }
        }
        if self.grp.is_some() {
            if let Ok(mut g) = self.metrics.gap_responses.try_lock() {
                *g = Some(self.feed.counters().recovery.responses_by_status);
            }
        }
        if let Ok(mut t) = self.metrics.recovery_times.try_lock() {
            let r = &self.feed.counters().recovery;
            *t = [r.hole_time, r.line_skew];
        }
        self.publish_links(now);
        self.last_publish = now;
    }

    fn apply(&mut self, t: FeedThresholds) {
        let defaults_changed = {
            let s = self.feed.settings();
            s.stale_ms != t.stale_ms || s.source_max_age_ms != t.source_max_age_ms
        };
        // Every known symbol gets its new effective thresholds.
        let known: Vec<Symbol> = self.feed.symbols().map(|(s, _)| s).collect();
        for symbol in &known {
            let (stale, source) = effective(&t, *symbol);
            self.feed.set_symbol_thresholds(*symbol, stale, source);
        }
        apply_overrides(&mut self.feed, t.stale_ms, t.source_max_age_ms, &t.symbols);
        tracing::info!(
            feed = self.metrics.name.as_str(),
            stale_ms = t.stale_ms,
            source_max_age_ms = t.source_max_age_ms,
            overrides = t.symbols.len(),
            "thresholds reloaded"
        );
        self.corrected = self.feed.symbol_count();
        self.reloaded = defaults_changed.then_some(t);
    }

    /// Symbols created since a reload changed the feed's defaults carry the
    /// original defaults: give them the reloaded ones.
    fn correct_new_symbols(&mut self) {
        let Some(t) = &self.reloaded else { return };
        let n = self.feed.symbol_count();
        if n == self.corrected {
            return;
        }
        let fresh: Vec<Symbol> = self
            .feed
            .symbols()
            .skip(self.corrected)
            .map(|(s, _)| s)
            .collect();
        for symbol in fresh {
            let (stale, source) = effective(t, symbol);
            self.feed.set_symbol_thresholds(symbol, stale, source);
        }
        self.corrected = n;
    }
}

fn effective(t: &FeedThresholds, symbol: Symbol) -> (u64, u64) {
    match t.symbols.iter().find(|s| s.symbol == symbol) {
        Some(s) => (
            s.stale_ms.unwrap_or(t.stale_ms),
            s.source_max_age_ms.unwrap_or(t.source_max_age_ms),
        ),
        None => (t.stale_ms, t.source_max_age_ms),
    }
}

impl DatagramHandler for FeedWriter {
    #[inline]
    fn on_datagram(&mut self, line: usize, datagram: &[u8], arrival_ns: i64) {
        self.feed.on_datagram(line, datagram, arrival_ns);
        let applied = receiver::realtime_ns();
        self.latency.record(applied - arrival_ns, applied);
        if let Some(t) = self.last_arrival.get_mut(line) {
            *t = arrival_ns;
        }
    }

    #[inline]
    fn prefetch(&mut self, datagram: &[u8]) {
        self.feed.prefetch_state(datagram);
    }

    #[inline]
    fn prefetch_early(&mut self, datagram: &[u8]) {
        self.feed.prefetch_index(datagram);
    }

    fn next_timeout(&self) -> Option<i64> {
        self.feed.next_timeout()
    }

    fn on_rerequest_answer(&mut self, datagram: &[u8], arrival_ns: i64) {
        self.feed.on_rerequest_answer(datagram, arrival_ns);
    }

    fn on_foreign_answer(&mut self) {
        self.feed.count_foreign_answer();
    }

    fn poll_request(&mut self) -> Option<(usize, [u8; REQUEST_LEN])> {
        self.feed.poll_request().map(|(i, r)| (i, r.encode()))
    }

    fn line_wanted(&self, line: usize) -> bool {
        self.feed.line_wanted(line)
    }

    fn on_poll(&mut self, now: i64) {
        // R2/R4: deadlines and requests that fell due; R5.
        self.feed.handle_timeout(now);
        self.drive_grp(now);
        self.drive_snapshot(now);
        self.drive_spin(now);
        self.beat.beat();
        while let Ok(msg) = self.control.try_recv() {
            match msg {
                Control::Thresholds(t) => self.apply(t),
            }
        }
        self.correct_new_symbols();
        if now.saturating_sub(self.last_publish) >= PUBLISH_EVERY_NS {
            self.publish(now);
        } else if self.links_changed {
            self.publish_links(now);
        }
        self.latency.try_flush(now);
    }
}

impl Drop for FeedWriter {
    fn drop(&mut self) {
        self.publish(receiver::realtime_ns());
        self.latency.flush();
        self.beat.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FeedMode, LineConfig};
    use crate::feed::check::SymbolLookup;
    use crate::wire::{PacketBuilder, Quote, SessionId, Side};

    fn feed_config() -> FeedConfig {
        let mut f = FeedConfig::new("fx", FeedMode::Full);
        f.lines.push(LineConfig {
            name: "A".into(),
            group: "239.1.1.1".parse().unwrap(),
            port: 1,
            interface: None,
            source: None,
            rcvbuf: None,
            kind: Default::default(),
        });
        f.symbols.push(SymbolConfig {
            symbol: Symbol::parse("EURUSD").unwrap(),
            stale_ms: Some(100),
            source_max_age_ms: None,
        });
        f
    }

    fn quote_packet(seq: u64, symbol: &str, qseq: u64, ts: u64) -> Vec<u8> {
        let mut b = PacketBuilder::new();
        let side = Some(Side { px: 1, qty: 1 });
        b.start(SessionId::parse("S1").unwrap(), seq)
            .quote(&Quote::new(
                Symbol::parse(symbol).unwrap(),
                qseq,
                ts,
                side,
                side,
            ));
        b.bytes().to_vec()
    }

    #[test]
    fn configured_symbols_exist_with_their_thresholds() {
        let (_feed, reader) = build(&feed_config());
        let (_, _, t) = reader.lookup(Symbol::parse("EURUSD").unwrap()).unwrap();
        assert_eq!(t.stale_ns, 100_000_000);
        assert_eq!(t.source_max_age_ns, 2_000_000_000);
    }

    #[test]
    fn writer_publishes_counters_and_applies_reloads() {
        let cfg = feed_config();
        let (feed, reader) = build(&cfg);
        let m = Arc::new(FeedMetrics::new("fx", &["A"]));
        let beat = Beat::new("feed-fx");
        let (mut w, tx) = FeedWriter::new(feed, m.clone(), beat);
        let t0 = 1_764_489_600_000_000_000;
        w.on_datagram(0, &quote_packet(1, "GBPUSD", 1, t0 as u64), t0);
        // Channel sequence 2..=4 never arrives.
        w.on_datagram(0, &quote_packet(5, "GBPUSD", 2, t0 as u64), t0 + 1);
        w.on_poll(t0 + 2);
        let s = m.stats.load();
        assert_eq!(s.channel_gaps, 1);
        assert_eq!(s.channel_messages_lost, 3);
        assert_eq!(s.symbols, 2);
        assert_eq!(m.line(0).load().packets, 2);

        let mut t = FeedThresholds::of(0, &cfg);
        t.stale_ms = 300;
        t.symbols[0].stale_ms = Some(50);
        tx.send(Control::Thresholds(t)).unwrap();
        w.on_poll(t0 + 3);
        let th = |s: &str| reader.lookup(Symbol::parse(s).unwrap()).unwrap().2.stale_ns;
        assert_eq!(th("EURUSD"), 50_000_000);
        assert_eq!(th("GBPUSD"), 300_000_000);
        // A symbol first seen after the reload gets the reloaded default.
        w.on_datagram(0, &quote_packet(6, "USDJPY", 1, t0 as u64), t0 + 4);
        w.on_poll(t0 + 5);
        assert_eq!(th("USDJPY"), 300_000_000);
    }
}
