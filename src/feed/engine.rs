//! `Feed`: one provider feed, sans-I/O. Datagrams go in with their line and
//! arrival time; the channel rules (`channel`), symbol rules (`state`) and
//! clock estimator (`clock`) update plain state; observable changes go out
//! through `Publish`. No allocation, lock or syscall per message: the
//! symbol states are allocated once (`max_symbols`), and the symbol index
//! grows only when a new symbol arrives, a few times in all (`index`).
//!
//! The feed drives its recovery machines (`recovery`, recovery.md): one
//! driver per channel, kept with what the channels share by `Units`, routes
//! what a feed that holds receives through the hold, refill and image
//! machines and hands datagrams back to the rules through `Deliver`
//! (`UnitRules` to select a channel); the loops machine (CME's snapshot
//! and definition loops) reaches the venue's adapter with the symbol
//! rules.

use super::channel::{Channel, PacketAction};
use super::clock::ClockEstimator;
use super::counters::{ChannelCounters, ChannelReport, FeedCounters, LineCounters, SymbolSummary};
use super::index::{Slot, SymbolIndex};
use super::recovery::driver::Deliver;
use super::recovery::loops::Loops;
use super::recovery::skew::LineSkew;
use super::recovery::store::Source;
use super::recovery::units::{Driving, UnitRules, Units};
use super::settings::{ms_to_ns, FeedSettings, Liveness};
use super::state::{Ctx, SymbolState, Symbols, HOT_BYTES};
use super::verdict::{report_cause, Thresholds};
use super::view::{
    FeedView, NoPublish, Publish, SuspectCause, SymbolView, FEED_CHANNEL_ALIVE,
    FEED_CHANNEL_SOURCE_TIME, FEED_ENDED, FEED_HAS_SESSION, FEED_LIVENESS_CHANNEL, FEED_RECOVERING,
    FEED_TRUST_GAP, FEED_TRUST_LATE_JOIN, SYM_HALTED,
};
use crate::venue::refill::{AnyRefill, AnyRequest};
use crate::venue::rerequest::Request;
use crate::venue::ChannelSet;
use crate::venue::{
    AnyVenue, ChannelHeader, Count, EntryOutcome, Header, LineKind, LoopEntry, MoldParts,
    Placement, Policy, Rules, Venue, VenueKind, VenueRecovery,
};
use crate::wire::{Heartbeat, PacketKind, Quote, SessionId, Side, Symbol};

pub use super::outcome::DatagramOutcome;
pub use super::recovery::image::{SnapshotFailure, SnapshotPhase, SNAPSHOT_HOLD_MAX};
pub use super::recovery::units::RefillStatus;

/// What `process` applies: a whole datagram, or the message blocks of a
/// MoldUDP64 one (`Feed::on_blocks`).
#[derive(Clone, Copy)]
enum Payload<'a> {
    Datagram(&'a [u8]),
    Blocks(&'a [u8]),
}

pub struct Feed<P: Publish = NoPublish> {
    core: Core<P>,
    /// R1-R6: the hold, refill and image machines and their driver, of
    /// each channel, and what the channels share (`recovery::units`). The
    /// refill codec is the feed's service's (R4 MoldUDP64, R4c Cboe's Gap
    /// Request Proxy).
    units: Units<AnyRefill>,
}

/// A channel's state while another is selected (venues of several
/// channels): its channel rules and its part of the feed view.
struct Parked {
    channel: Channel,
    view: FeedView,
}

/// The `FeedView::flags` that belong to a channel rather than to the feed
/// (venues of several channels keep them per channel).
const CHANNEL_FLAGS: u8 = FEED_ENDED
    | FEED_CHANNEL_ALIVE
    | FEED_HAS_SESSION
    | FEED_TRUST_LATE_JOIN
    | FEED_TRUST_GAP
    | FEED_RECOVERING;

/// The view of the channels `views` as the verdict reads them for a
/// symbol they all reach (venues.md `cboe-pitch`: a symbol takes every
/// cause of each of its units, and the earliest of their `alive_at` and
/// channel source times), on the feed's own fields (`base`). No channel:
/// no channel cause and no channel liveness.
pub fn fold_channels<'a>(base: &FeedView, views: impl Iterator<Item = &'a FeedView>) -> FeedView {
    let mut out = *base;
    out.flags &= !CHANNEL_FLAGS;
    out.recovery = 0;
    let mut any = false;
    let mut all_alive = true;
    let mut alive = i64::MAX;
    let mut source = i64::MAX;
    for v in views {
        any = true;
        out.flags |= v.flags & (CHANNEL_FLAGS & !FEED_CHANNEL_ALIVE);
        if v.flags & FEED_CHANNEL_ALIVE == 0 {
            all_alive = false;
        } else {
            alive = alive.min(v.channel_alive_at);
        }
        source = source.min(v.channel_source_ts);
        out.recovery = out.recovery.max(v.recovery);
    }
    if any && all_alive {
        out.flags |= FEED_CHANNEL_ALIVE;
        out.channel_alive_at = alive;
    } else {
        out.channel_alive_at = 0;
    }
    out.channel_source_ts = if any { source } else { i64::MIN };
    out
}

/// The view a symbol of unit `unit` alone reads (`fold_channels` of that
/// one unit on the feed's own fields in `feed`): what the shared readers
/// compute from the feed cell and the unit's cell, equal to
/// `Feed::feed_view_for` of such a symbol.
#[inline]
pub fn unit_view(feed: &FeedView, unit: &FeedView) -> FeedView {
    fold_channels(feed, std::iter::once(unit))
}

/// The unit the gate's readers judge a symbol of these channels by: its
/// one channel, or 0 (several or none: the feed view, every unit folded).
#[inline]
fn single(channels: &ChannelSet) -> u8 {
    match channels.len() {
        1 => channels.iter().next().unwrap_or(0),
        _ => 0,
    }
}

/// The feed's rules and their state: the channel rules, the symbol rules
/// and their table, the clock estimator, the venue's adapter and its
/// loops; what the recovery driver hands datagrams to (`Deliver`).
struct Core<P: Publish> {
    settings: FeedSettings,
    max_jump: u64,
    channel: Channel,
    clock: ClockEstimator,
    index: SymbolIndex,
    symbols: Symbols,
    view: FeedView,
    counters: FeedCounters,
    /// What each line carries (venues.md `cme-mdp3`, Lines).
    line_kinds: Vec<LineKind>,
    publisher: P,
    venue: AnyVenue,
    policy: Policy,
    /// The channel header of the latest valid datagram (for replay's
    /// session notes, without parsing it again).
    last_header: Option<ChannelHeader>,
    /// venues.md `cme-mdp3`, Snapshots: the snapshot and definition loops.
    loops: Loops<LoopEntry>,
    /// Line skew (recovery.md), measured from the lines' copies.
    skew: LineSkew,
    /// R5: whether the selected channel has an image server (R5c: the
    /// unit's Spin Server), and when the rules last wanted an image (taken
    /// by the recovery driver).
    images: bool,
    image_wanted: Option<i64>,
    /// The venue keeps several channels (`Venue::channels` > 1): `channel`
    /// and `view` are the selected one's (`cur`), the others are parked.
    multi: bool,
    cur: u8,
    /// By channel id (empty for a venue of one channel); `parked[cur]` is
    /// a placeholder while `cur` is selected.
    parked: Vec<Parked>,
    /// Channel ids selected so far, in order of their first datagram.
    heard: Vec<u8>,
    /// The per-channel counters, by channel id (one entry for a venue of
    /// one channel).
    channel_counters: Vec<ChannelCounters>,
    /// What readers see of a feed of several channels: its channels
    /// folded (`fold_channels`), as last published.
    folded: FeedView,
    /// Scratch for `sync_units`: the slots whose units changed.
    unit_changes: Vec<u32>,
}

impl Feed<NoPublish> {
    pub fn new(settings: FeedSettings, lines: usize) -> Feed<NoPublish> {
        Feed::with_publisher(settings, lines, NoPublish)
    }
}

impl<P: Publish> Feed<P> {
    pub fn with_publisher(settings: FeedSettings, lines: usize, publisher: P) -> Feed<P> {
        let mut venue = AnyVenue::new(&settings.venue);
        venue.set_max_symbols(settings.max_symbols);
        venue.set_max_hole_ns(ms_to_ns(settings.recovery.max_hole_ms));
        let policy = venue.policy();
        let mut view = FeedView {
            channel_source_ts: i64::MIN,
            ..FeedView::default()
        };
        if settings.liveness == Liveness::Channel {
            view.flags |= FEED_LIVENESS_CHANNEL;
            if policy.channel_source_time {
                // V3 is for venue feeds with channel liveness only.
                view.flags |= FEED_CHANNEL_SOURCE_TIME;
            }
        }
        let mut core = Core {
            settings,
            max_jump: settings.max_seq_jump.max(1),
            channel: Channel::with_max_jump(settings.max_channel_jump),
            clock: ClockEstimator::new(settings.clock_offset),
            index: SymbolIndex::with_capacity(settings.table_slots()),
            symbols: Symbols::with_capacity(settings.table_slots()),
            view,
            counters: FeedCounters::new(lines),
            line_kinds: vec![LineKind::Incremental; lines],
            publisher,
            venue,
            policy,
            last_header: None,
            loops: Loops::new(settings.venue.recovery_entries),
            skew: LineSkew::default(),
            images: settings.recovery.images_on(0),
            image_wanted: None,
            multi: false,
            cur: 0,
            parked: Vec::new(),
            heard: Vec::new(),
            channel_counters: vec![ChannelCounters::default()],
            folded: FeedView::default(),
            unit_changes: Vec::new(),
        };
        let channels = core.venue.channels();
        if channels > 1 {
            core.multi = true;
            let fresh = FeedView {
                channel_source_ts: i64::MIN,
                ..FeedView::default()
            };
            core.parked = (0..channels)
                .map(|_| Parked {
                    channel: Channel::with_max_jump(settings.max_channel_jump),
                    view: fresh,
                })
                .collect();
            core.channel_counters = vec![ChannelCounters::default(); channels];
        }
        core.view.offset_ns = core.clock.offset_ns();
        core.publish_view();
        let codec = AnyRefill::new(settings.recovery.gap_proxy);
        Feed {
            core,
            units: Units::new(&settings, codec, channels),
        }
    }

    /// Number of lines (valid `line` arguments are `0..lines`).
    pub fn lines(&self) -> usize {
        self.core.counters.lines.len()
    }

    /// One more line (its counters start at zero); returns its index.
    /// Lines only count: the channel rules do not depend on them.
    pub fn add_line(&mut self) -> usize {
        self.core.counters.lines.push(Default::default());
        self.core.line_kinds.push(LineKind::Incremental);
        self.core.counters.lines.len() - 1
    }

    pub fn settings(&self) -> &FeedSettings {
        &self.core.settings
    }

    pub fn venue(&self) -> VenueKind {
        self.core.venue.kind()
    }

    /// The venue's table memory asked to be made resident ahead of use
    /// since the last call (replay only: docs/venues.md "Tables in
    /// replay").
    pub fn take_populate(&mut self) -> Option<crate::util::pages::MemRange> {
        self.core.venue.take_populate()
    }

    /// The loops' recovery gauges (venues.md `cme-mdp3`: instruments
    /// waiting for a snapshot, entries kept).
    pub fn venue_recovery(&self) -> VenueRecovery {
        self.core.loops.gauges()
    }

    /// The channel header of the latest datagram the venue found valid
    /// (duplicates and packets of stale sessions included).
    pub fn last_header(&self) -> Option<&ChannelHeader> {
        self.core.last_header.as_ref()
    }

    /// Messages applied, by type byte (venues that count them), e.g. to
    /// prove a capture's message mix.
    pub fn message_types(&self) -> Option<&[u64; 256]> {
        self.core.venue.message_types()
    }

    pub fn counters(&self) -> &FeedCounters {
        &self.core.counters
    }

    /// The feed's view as readers see it (a venue of several channels:
    /// its channels folded, `fold_channels`).
    pub fn feed_view(&self) -> &FeedView {
        if self.core.multi {
            &self.core.folded
        } else {
            &self.core.view
        }
    }

    /// The feed view the verdict reads for the symbol at `slot`: the
    /// feed's, or on a venue of several channels, that of the channels
    /// that reach the symbol (venues.md `cboe-pitch`, Units and symbols).
    #[inline]
    pub fn feed_view_for(&self, slot: u32) -> FeedView {
        self.core.view_for(slot)
    }

    pub fn publisher(&self) -> &P {
        &self.core.publisher
    }

    pub fn publisher_mut(&mut self) -> &mut P {
        &mut self.core.publisher
    }

    pub fn clock_offset_ns(&self) -> i64 {
        self.core.view.offset_ns
    }

    /// Sessions seen, oldest first (bounded, see `channel::SESSION_HISTORY`).
    pub fn sessions(&self) -> &[SessionId] {
        self.core.channel.sessions()
    }

    /// Every channel heard (venues.md `cboe-pitch`: per unit, `next`, the
    /// session's state and the per-channel counters), by id; for a venue
    /// of one channel, that channel (id 0).
    /// Whether the venue keeps several channels (`cboe-pitch`: its units).
    pub fn has_units(&self) -> bool {
        self.core.multi
    }

    pub fn channel_reports(&self) -> Vec<ChannelReport> {
        let c = &self.core;
        let report = |ch: u8| {
            let recovery = self.units.of(ch);
            let channel = if ch == c.cur {
                &c.channel
            } else {
                &c.parked[ch as usize].channel
            };
            ChannelReport {
                channel: ch,
                session: channel.current_session(),
                next: channel.next_sequence(),
                ended: channel.ended(),
                counters: c.channel_counters[ch as usize],
                holes: recovery.map(|r| r.hole_counts()).unwrap_or_default(),
            }
        };
        if !c.multi {
            return vec![report(0)];
        }
        let mut ids = c.heard.clone();
        ids.sort_unstable();
        ids.into_iter().map(report).collect()
    }

    pub fn current_session(&self) -> Option<SessionId> {
        self.core.channel.current_session()
    }

    pub fn session_ended(&self) -> bool {
        self.core.channel.ended()
    }

    /// Number of symbols known (seen or configured).
    pub fn symbol_count(&self) -> usize {
        self.core.symbols.len()
    }

    /// The feed-wide default thresholds.
    pub fn default_thresholds(&self) -> Thresholds {
        let s = &self.core.settings;
        Thresholds {
            stale_ns: ms_to_ns(s.stale_ms),
            source_max_age_ns: ms_to_ns(s.source_max_age_ms),
        }
    }

    /// Makes `symbol` known (a check answers `no_data`, not
    /// `unknown_symbol`) with the feed's default thresholds. Returns its
    /// slot, or `None` when the table is full.
    pub fn add_symbol(&mut self, symbol: Symbol) -> Option<u32> {
        let idx = self.core.slot(symbol)?;
        self.core.symbols[idx as usize].configured = true;
        Some(idx)
    }

    /// Per-symbol thresholds from the config (saturated to u32 ms); also
    /// makes the symbol known. `None` when the table is full.
    pub fn set_symbol_thresholds(
        &mut self,
        symbol: Symbol,
        stale_ms: u64,
        source_max_age_ms: u64,
    ) -> Option<u32> {
        let c = &mut self.core;
        let idx = c.slot(symbol)?;
        let st = &mut c.symbols[idx as usize];
        st.configured = true;
        st.view.stale_ms = stale_ms.min(u32::MAX as u64) as u32;
        st.view.source_max_age_ms = source_max_age_ms.min(u32::MAX as u64) as u32;
        let st = &c.symbols[idx as usize];
        c.publisher.publish_symbol(idx, st.symbol, &st.view);
        Some(idx)
    }

    /// The symbol's slot and view, if known. Not marked `#[inline]`: a
    /// `CHECK` answer ran 60 more instructions with it (BENCHMARKS.md,
    /// "The CHECK answer with and without `symbol_view` inline").
    pub fn symbol_view(&self, symbol: Symbol) -> Option<(u32, &SymbolView)> {
        self.core.symbol_view(symbol)
    }

    /// Prefetch, first stage (a datagram several places ahead of the one
    /// being applied): the index bucket of the datagram's first symbol.
    /// Changes nothing; any bytes are accepted (nothing is validated).
    #[inline]
    pub fn prefetch_index(&self, datagram: &[u8]) {
        if let Some(symbol) = self.core.venue.peek_symbol(datagram) {
            self.core.index.prefetch(symbol);
        }
    }

    /// Prefetch, second stage (a few places ahead, after `prefetch_index`
    /// on the same datagram): through the now cached index bucket, the
    /// symbol's state and its published slot (`Publish::prefetch_symbol`).
    /// Changes nothing; any bytes are accepted.
    #[inline]
    pub fn prefetch_state(&self, datagram: &[u8]) {
        let c = &self.core;
        let Some(symbol) = c.venue.peek_symbol(datagram) else {
            return;
        };
        if let Some(idx) = c.index.home_slot(symbol) {
            prefetch_slot(&c.symbols, &c.publisher, idx);
        }
    }

    /// Cache hints for the message blocks of the datagram that follows
    /// the one about to be applied through [`Feed::on_blocks`] (the
    /// venue's `prefetch_blocks`). Changes nothing; any bytes are
    /// accepted.
    #[inline]
    pub fn prefetch_blocks(&self, blocks: &[u8]) {
        self.core.venue.prefetch_blocks(blocks);
    }

    /// The second stage of the venue's hints for the first messages of
    /// the datagram after the one about to be applied (the venue's
    /// `prefetch_levels`). Changes nothing; any bytes are accepted.
    #[inline]
    pub fn prefetch_levels(&self, blocks: &[u8]) {
        self.core.venue.prefetch_levels(blocks);
    }

    /// One datagram received on `line` at `now` (Unix ns). The whole
    /// datagram is validated (by the feed's venue) before anything is
    /// applied. With recovery on (recovery.md), a datagram beyond a hole is
    /// held (R1) and holes whose deadline passed before `now` are declared
    /// first (R2).
    pub fn on_datagram(&mut self, line: usize, datagram: &[u8], now: i64) -> DatagramOutcome {
        let c = &mut self.core;
        if line >= c.counters.lines.len() {
            return DatagramOutcome::UnknownLine;
        }
        let kind = c.line_kinds[line];
        if !kind.sequenced() {
            return c.on_loop_datagram(line, kind, datagram, now);
        }
        let mut header = match c.venue.parse(datagram) {
            Ok(h) => h,
            Err(e) => {
                c.counters.invalid_packets += 1;
                c.counters.lines[line].invalid_packets += 1;
                return DatagramOutcome::Invalid(e);
            }
        };
        if c.venue.set_aside(datagram) {
            // venues.md `cme-mdp3`: a session candidate changes nothing
            // until the next packet of its numbering confirms it.
            c.counters.lines[line].packets += 1;
            return DatagramOutcome::Ignored;
        }
        if c.multi {
            // venues.md `cboe-pitch`: the unit is the channel. Other
            // channels' holes due before `now` are declared first (R2).
            let ch = c.venue.channel_of(datagram);
            let mut units = self.units.drive(&mut self.core);
            if units.others_hold() {
                units.expire_parked(now);
            }
            units.select(ch);
        }
        let c = &mut self.core;
        let next = c.channel.next_sequence();
        let placed = c.venue.place(kind, datagram, &mut header, next, now);
        if placed != Placement::Channel {
            // Of no session: nothing for replay's session notes.
            c.last_header = None;
            c.count_unplaced(line, placed);
            return DatagramOutcome::Ignored;
        }
        c.last_header = Some(header.channel);
        if c.multi && !c.heard.contains(&c.cur) {
            // A channel is heard once a datagram is placed on it (an
            // unsequenced one belongs to no unit).
            c.heard.push(c.cur);
        }
        let lc = &mut c.counters.lines[line];
        lc.packets += 1;
        lc.messages += header.channel.count as u64;
        let r = self.units.current();
        if !r.holds() || r.steady(&self.core, &header) {
            // No hole, no snapshot, and this datagram opens none: exactly
            // the path of a feed that does not hold.
            let out = self
                .core
                .process(Source::Line(line), datagram, &header, now);
            if self.core.image_wanted.is_some() {
                // R5c: a book error or a Unit Clear of a steady unit.
                self.units.current_mut().take_image_wanted(&mut self.core);
            }
            return out;
        }
        self.units
            .drive(&mut self.core)
            .on_datagram(Source::Line(line), datagram, &header, now)
    }

    /// [`Feed::on_datagram`] of the MoldUDP64 datagram `parts` make,
    /// without building it: a reader that holds messages apart from any
    /// datagram (a Nasdaq BinaryFILE) hands them over as they are.
    /// `None`, with nothing changed, when only the datagram will do: a
    /// venue framed otherwise, a line that is not incremental, or a feed
    /// whose recovery rules have something to do with it (they may hold
    /// it); the caller then builds the datagram and calls `on_datagram`.
    /// The caller gives the blocks their cache hints first
    /// ([`Feed::prefetch_blocks`], best a datagram ahead).
    #[inline]
    pub fn on_blocks(
        &mut self,
        line: usize,
        parts: &MoldParts<'_>,
        now: i64,
    ) -> Option<DatagramOutcome> {
        let c = &mut self.core;
        if line >= c.counters.lines.len() {
            return Some(DatagramOutcome::UnknownLine);
        }
        if c.line_kinds[line] != LineKind::Incremental {
            return None;
        }
        let header = match c.venue.parse_blocks(parts)? {
            Ok(h) => h,
            Err(e) => {
                c.counters.invalid_packets += 1;
                c.counters.lines[line].invalid_packets += 1;
                return Some(DatagramOutcome::Invalid(e));
            }
        };
        let r = self.units.current();
        if r.holds() && !r.steady(&self.core, &header) {
            return None;
        }
        // From here exactly `on_datagram`'s path of a steady datagram.
        let c = &mut self.core;
        c.last_header = Some(header.channel);
        let lc = &mut c.counters.lines[line];
        lc.packets += 1;
        lc.messages += header.channel.count as u64;
        Some(c.process_payload(
            Source::Line(line),
            Payload::Blocks(parts.blocks),
            &header,
            now,
        ))
    }

    /// What `line` carries (venues.md `cme-mdp3`, Lines; every line is
    /// incremental unless set). A venue without such lines counts their
    /// datagrams invalid.
    pub fn set_line_kind(&mut self, line: usize, kind: LineKind) {
        if let Some(k) = self.core.line_kinds.get_mut(line) {
            *k = kind;
        }
    }

    /// Whether `line` should be received now: incremental lines always;
    /// a snapshot or definition line while the loops machine wants that
    /// loop (venues.md `cme-mdp3`, Snapshots). The I/O shell joins or
    /// leaves the line's group by it.
    pub fn line_wanted(&self, line: usize) -> bool {
        match self.line_kind(line) {
            LineKind::Incremental => true,
            kind => !self.core.policy.loops || self.core.loops.wants(kind),
        }
    }

    pub fn line_kind(&self, line: usize) -> LineKind {
        self.core.line_kinds.get(line).copied().unwrap_or_default()
    }

    /// R4: one datagram from a configured re-request server (the I/O shell
    /// has checked its UDP source) at `now`. Processed as if a line named
    /// `rerequest` had delivered it, except that an answer of another
    /// session, a heartbeat or an end of session is dropped and counted:
    /// answers never change the session (C5 needs the multicast lines).
    pub fn on_rerequest_answer(&mut self, datagram: &[u8], now: i64) -> DatagramOutcome {
        let c = &mut self.core;
        let header = match c.venue.parse(datagram) {
            Ok(h) => h,
            Err(e) => {
                // R6: a malformed answer is an answer dropped, too.
                c.counters.invalid_packets += 1;
                c.counters.rerequest.invalid_packets += 1;
                c.counters.recovery.answers_received += 1;
                c.counters.recovery.answers_malformed += 1;
                return DatagramOutcome::Invalid(e);
            }
        };
        let r = self.units.current_mut();
        r.on_answer(&mut self.core, datagram, &header, now)
    }

    /// R4: a datagram arrived on the re-request socket from an address that
    /// is not a configured server: dropped by the I/O shell, counted here.
    pub fn count_foreign_answer(&mut self) {
        self.core.counters.recovery.answers_wrong_source += 1;
    }

    /// R2/R4: time passes to `now` without a datagram: holes whose deadline
    /// is before `now` are declared lost, requests that fall due are
    /// queued (`poll_request`). The I/O shell calls it at `next_timeout`;
    /// replay and the check's tests before a check stamped `now`.
    pub fn handle_timeout(&mut self, now: i64) {
        self.units.drive(&mut self.core).handle_timeout(now);
    }

    /// When `handle_timeout` next has something to do (Unix ns): a hole's
    /// deadline passing or a request falling due. `None`: nothing pending.
    pub fn next_timeout(&self) -> Option<i64> {
        self.units.next_timeout()
    }

    /// R5: where the feed's snapshot stands, and the last failure.
    pub fn snapshot_phase(&self) -> (SnapshotPhase, Option<SnapshotFailure>) {
        self.units.current().snapshot_phase()
    }

    /// R5: whether a snapshot attempt starts now (the I/O shell then
    /// connects to the snapshot server). From now until `on_snapshot` or
    /// `on_snapshot_failed`, every datagram of the session is held.
    pub fn poll_snapshot_start(&mut self, now: i64) -> bool {
        let r = self.units.current_mut();
        r.poll_snapshot_start(&mut self.core, now)
    }

    /// R5: the attempt failed: nothing of it is applied; the held
    /// datagrams are processed as without a snapshot (R1-R2) and the next
    /// attempt waits for its pace (the backoff from this one's start).
    pub fn on_snapshot_failed(&mut self, why: SnapshotFailure, now: i64) {
        let r = self.units.current_mut();
        r.snapshot_failed(&mut self.core, why, now);
    }

    /// R5: the snapshot arrived whole: `next` from End of Snapshot (`G`),
    /// `blocks` its messages (each a u16 big-endian length then the
    /// message), `now` the arrival of `G`. Applied to the feed's current
    /// session as R5 says (Login Accepted's session is SoupBinTCP's own and
    /// is not compared with it: `G` alone places the snapshot), or failed
    /// (then as `on_snapshot_failed`).
    pub fn on_snapshot(
        &mut self,
        next: u64,
        blocks: &[u8],
        now: i64,
    ) -> Result<(), SnapshotFailure> {
        self.units
            .drive(&mut self.core)
            .on_snapshot(next, blocks, now)
    }

    /// R4: the request to send now, if one fell due: the index of the
    /// configured server to send it to, and the request. At most one is
    /// outstanding per feed. A feed with a Gap Request Proxy asks through
    /// `units().poll_refill` instead.
    pub fn poll_request(&mut self) -> Option<(usize, Request)> {
        if self.core.settings.recovery.gap_proxy.is_some() {
            return None;
        }
        match self
            .units
            .current_mut()
            .poll_request(&mut self.core.counters)?
        {
            (server, AnyRequest::MoldUdp64(r)) => Some((server, r)),
            (_, AnyRequest::GapProxy(_)) => None,
        }
    }

    /// Whether a hole is open now (R3: the check answers `recovering`).
    pub fn recovering(&self) -> bool {
        self.units.recovering()
    }

    /// The held datagrams now, and the most held at once and the arena's
    /// peak size so far (bytes).
    pub fn hold_usage(&self) -> (usize, usize, usize) {
        self.units.hold_usage()
    }

    /// The feed's recovery machines, one per channel (recovery.md
    /// "Architecture"): where each unit's image and the refill service's
    /// count limit stand.
    pub fn recovery(&self) -> &Units<AnyRefill> {
        &self.units
    }

    /// The feed's recovery machines driving its rules: what the I/O shells
    /// call for the refill service's requests and responses (R4c) and the
    /// units' images (R5c).
    pub fn units(&mut self) -> Driving<'_, AnyRefill, impl UnitRules + '_> {
        self.units.drive(&mut self.core)
    }

    /// Per-symbol summaries, in slot order.
    pub fn symbols(&self) -> impl Iterator<Item = (Symbol, SymbolSummary)> + '_ {
        let c = &self.core;
        c.symbols
            .iter()
            .enumerate()
            .map(|(i, st)| (st.symbol, c.summary(i as u32, st)))
    }

    pub fn symbol_summary(&self, symbol: Symbol) -> Option<SymbolSummary> {
        let c = &self.core;
        let (idx, _) = c.symbol_view(symbol)?;
        Some(c.summary(idx, &c.symbols[idx as usize]))
    }

    /// Symbols the venue says are not trading (V2; computed: O(symbols)).
    pub fn symbols_halted(&self) -> usize {
        let epoch = self.core.view.session_epoch;
        self.core
            .symbols
            .iter()
            .filter(|st| st.view.session_epoch == epoch && st.view.flags & SYM_HALTED != 0)
            .count()
    }

    /// Symbols currently suspect or unverified (computed: O(symbols)).
    pub fn symbols_suspect(&self) -> usize {
        let c = &self.core;
        c.symbols
            .iter()
            .enumerate()
            .filter(|(i, st)| report_cause(&st.view, &c.view_for(*i as u32)) != SuspectCause::None)
            .count()
    }
}

impl<P: Publish> Deliver for Core<P> {
    #[inline]
    fn process(
        &mut self,
        source: Source,
        datagram: &[u8],
        header: &Header,
        now: i64,
    ) -> DatagramOutcome {
        self.process_payload(source, Payload::Datagram(datagram), header, now)
    }

    fn take_image_wanted(&mut self) -> Option<i64> {
        self.image_wanted.take()
    }

    fn before_resume(&mut self, datagram: &[u8], header: &Header, next: u64, now: i64) {
        self.venue
            .skipped_below(datagram, header.channel.sequence, next, now);
    }

    #[inline]
    fn channel(&self) -> &Channel {
        &self.channel
    }

    #[inline]
    fn counters(&mut self) -> &mut FeedCounters {
        &mut self.counters
    }

    #[inline]
    fn recovery_state(&self) -> u8 {
        self.view.recovery
    }

    fn set_recovery_state(&mut self, code: u8) {
        if self.view.recovery != code {
            self.view.recovery = code;
            self.publish_view();
        }
    }

    fn set_recovering(&mut self, on: bool) {
        if (self.view.flags & FEED_RECOVERING != 0) != on {
            self.view.flags ^= FEED_RECOVERING;
            self.publish_view();
        }
    }
}

impl<P: Publish> UnitRules for Core<P> {
    fn select_unit(&mut self, unit: u8) {
        self.select(unit);
    }

    fn apply_image(&mut self, next: u64, blocks: &[u8], now: i64) -> bool {
        let Ok(messages) = self.venue.validate_snapshot(blocks) else {
            return false;
        };
        self.apply_snapshot(next, blocks, messages, now);
        true
    }
}

impl<P: Publish> Core<P> {
    /// Publishes the feed view: the selected channel's, or on a venue of
    /// several channels, every channel folded (`fold_channels`).
    #[inline]
    fn publish_view(&mut self) {
        if !self.multi {
            self.publisher.publish_feed(&self.view);
            return;
        }
        let (view, parked, cur) = (&self.view, &self.parked, self.cur);
        let views = self.heard.iter().map(|&ch| {
            if ch == cur {
                view
            } else {
                &parked[ch as usize].view
            }
        });
        self.folded = fold_channels(view, views);
        // Unit cell before the feed cell, as symbols after both (`Publish`).
        self.publisher.publish_unit_view(cur, view);
        self.publisher.publish_feed(&self.folded);
    }

    /// The feed view the verdict reads for the symbol at `slot`.
    #[inline]
    fn view_for(&self, slot: u32) -> FeedView {
        if !self.multi {
            return self.view;
        }
        let set: ChannelSet = self.venue.channels_of(slot);
        let views = set.iter().map(|ch| {
            if ch == self.cur {
                &self.view
            } else {
                &self.parked[ch as usize].view
            }
        });
        fold_channels(&self.view, views)
    }

    /// Venues of several channels: channel `ch` becomes the selected one
    /// (`Units::select` swaps the recovery machines first).
    fn select(&mut self, ch: u8) {
        let old = self.cur as usize;
        let new = ch as usize;
        // `parked[old]` takes the outgoing channel, `parked[new]` the
        // placeholder.
        std::mem::swap(&mut self.channel, &mut self.parked[old].channel);
        std::mem::swap(&mut self.channel, &mut self.parked[new].channel);
        self.parked[old].view = self.view;
        // Its cell holds its latest view while parked.
        self.publisher.publish_unit_view(self.cur, &self.view);
        let incoming = self.parked[new].view;
        let v = &mut self.view;
        v.flags = (v.flags & !CHANNEL_FLAGS) | (incoming.flags & CHANNEL_FLAGS);
        v.channel_alive_at = incoming.channel_alive_at;
        v.channel_source_ts = incoming.channel_source_ts;
        v.recovery = incoming.recovery;
        self.cur = ch;
        // Its cell is current from its selection on, before any of its
        // symbols is told to read it.
        self.publisher.publish_unit_view(ch, &self.view);
        // R5c: each unit has its own Spin Server, or none.
        self.images = self.settings.recovery.images_on(ch);
        self.venue.select_channel(ch);
    }

    /// A valid datagram the venue kept from the channel rules (venues.md
    /// `cboe-pitch`): received on its line, counted by why.
    #[cold]
    fn count_unplaced(&mut self, line: usize, placed: Placement) {
        self.counters.lines[line].packets += 1;
        let c = &mut self.counters;
        match placed {
            Placement::Channel => {}
            Placement::Unsequenced => c.unsequenced += 1,
            Placement::GapDropped => c.gap_dropped += 1,
            Placement::OtherUnit => c.units_not_followed += 1,
            Placement::LaggingCopy => {
                // C5: a packet of a replaced session, dropped.
                c.stale_session_dropped += 1;
                self.channel_counters[self.cur as usize].stale_session_dropped += 1;
            }
        }
    }

    /// The symbol's slot and view, if known.
    #[inline]
    fn symbol_view(&self, symbol: Symbol) -> Option<(u32, &SymbolView)> {
        let idx = self
            .index
            .get(symbol, |i| &self.symbols[i as usize].symbol)?;
        Some((idx, &self.symbols[idx as usize].view))
    }

    /// Slot lookup or creation; counts and returns `None` when full.
    #[inline]
    fn slot(&mut self, symbol: Symbol) -> Option<u32> {
        slot(
            &mut self.index,
            &mut self.symbols,
            &mut self.counters,
            &mut self.publisher,
            &self.settings,
            &self.view,
            symbol,
        )
    }

    /// One datagram of a snapshot or definition line: validated whole by
    /// the venue, then applied without channel rules (the loops are judged
    /// message by message). Counted on its line as any datagram.
    fn on_loop_datagram(
        &mut self,
        line: usize,
        kind: LineKind,
        datagram: &[u8],
        now: i64,
    ) -> DatagramOutcome {
        let applied =
            self.with_venue_rules(now, |venue, rules| venue.apply_loop(kind, datagram, rules));
        let before = self.view;
        self.set_venue_gauges();
        if self.view != before {
            self.publish_view();
        }
        match applied {
            Ok(()) => {
                self.counters.lines[line].packets += 1;
                DatagramOutcome::Applied
            }
            Err(e) => {
                self.counters.invalid_packets += 1;
                self.counters.lines[line].invalid_packets += 1;
                DatagramOutcome::Invalid(e)
            }
        }
    }

    /// The loops' recovery gauges into the feed view (published with it).
    #[inline]
    fn set_venue_gauges(&mut self) {
        let r = self.loops.gauges();
        let sat = |n: u64| n.min(u32::MAX as u64) as u32;
        self.view.venue_waiting = sat(r.waiting);
        self.view.venue_kept = sat(r.kept_entries);
    }

    /// Runs `f` with the venue and the symbol rules it drives for a
    /// datagram arriving at `now` (the feed's table, counters, publisher
    /// and loops, borrowed apart from the venue).
    #[inline]
    fn with_venue_rules<T>(
        &mut self,
        now: i64,
        f: impl FnOnce(&mut AnyVenue, &mut SymbolRules<'_, P>) -> T,
    ) -> T {
        let mut rules = SymbolRules {
            ctx: self.ctx(now),
            index: &mut self.index,
            symbols: &mut self.symbols,
            counters: &mut self.counters,
            publisher: &mut self.publisher,
            settings: &self.settings,
            view: &self.view,
            loops: &mut self.loops,
        };
        f(&mut self.venue, &mut rules)
    }

    /// A feed of several units, after a unit's new session (C5): publishes
    /// the unit of each symbol it took out of the unit
    /// (`Publish::publish_symbol_unit`), before the session's messages.
    #[inline(never)]
    fn sync_units(&mut self) {
        self.venue.take_channel_changes(&mut self.unit_changes);
        for &slot in &self.unit_changes {
            let unit = single(&self.venue.channels_of(slot));
            self.publisher.publish_symbol_unit(slot, unit);
        }
        self.unit_changes.clear();
    }

    /// R5 steps 1-2 and `next` of step 3: a validated snapshot of
    /// `messages` messages replaces every symbol's state, then the
    /// channel continues from `next`.
    fn apply_snapshot(&mut self, next: u64, blocks: &[u8], messages: usize, now: i64) {
        if self.multi {
            self.apply_unit_image(next, blocks, messages, now);
            return;
        }
        let quote_seq = next - 1;
        let ctx = self.ctx(now);
        // Step 1-2. Symbols are published before the feed's trust flags
        // clear, so a reader never trusts a symbol's pre-snapshot view.
        for st in self.symbols.iter_mut() {
            st.reset_for_snapshot(quote_seq, &ctx);
        }
        let latest = self.with_venue_rules(now, |venue, rules| {
            venue.rebuild(blocks, messages, next, rules)
        });
        for (i, st) in self.symbols.iter_mut().enumerate() {
            if st.view.has_quote() && st.view.source_ts == i64::MIN {
                st.view.source_ts = latest;
            }
            self.publisher.publish_symbol(i as u32, st.symbol, &st.view);
        }
        self.view.flags &= !(FEED_TRUST_LATE_JOIN | FEED_TRUST_GAP);
        if latest != i64::MIN {
            self.view.channel_source_ts = latest;
        }
        self.publish_view();
        self.counters.live_orders = self.venue.live_orders();
        // Step 3.
        self.channel.set_next(next);
    }

    /// R5c "On Spin Finished" steps 1-2 and `next` of step 3, on the
    /// selected unit only: the venue replaces its books and quotes its
    /// symbols (`rebuild`), the unit's late-join and loss flags clear. Spin
    /// messages give no clock sample (V5) and do not move the unit's
    /// channel source time (V3).
    fn apply_unit_image(&mut self, next: u64, blocks: &[u8], messages: usize, now: i64) {
        self.with_venue_rules(now, |venue, rules| {
            venue.rebuild(blocks, messages, next, rules)
        });
        self.view.flags &= !(FEED_TRUST_LATE_JOIN | FEED_TRUST_GAP);
        self.publish_view();
        self.counters.live_orders = self.venue.live_orders();
        // Step 3.
        self.channel.set_next(next);
    }

    fn source_counters(&mut self, source: Source) -> &mut LineCounters {
        match source {
            Source::Line(l) => &mut self.counters.lines[l],
            Source::Rerequest => &mut self.counters.rerequest,
        }
    }

    /// Line skew (recovery.md, for choosing `gap_hold_us`): a packet's
    /// second copy arrived at `now`.
    fn measure_skew(&mut self, seq: u64, now: i64) {
        let Some(skew) = self.skew.second(seq, now) else {
            return;
        };
        self.counters.recovery.line_skew.observe(skew);
        if skew > self.view.line_skew_max_ns {
            self.view.line_skew_max_ns = skew;
            self.publish_view();
        }
    }

    /// R5: a late join or a lost hole wants an image (on a feed with an
    /// image server; the recovery driver takes it up).
    #[inline]
    fn want_image(&mut self, now: i64) {
        if self.images && self.image_wanted.is_none() {
            self.image_wanted = Some(now);
        }
    }

    /// The symbol rules' context at `now`.
    #[inline]
    fn ctx(&self, now: i64) -> Ctx {
        Ctx {
            mode: self.settings.mode,
            max_jump: self.max_jump,
            gap_epoch: self.view.gap_epoch,
            session_epoch: self.view.session_epoch,
            now,
        }
    }

    /// [`Deliver::process`] of a datagram or of its blocks alone.
    fn process_payload(
        &mut self,
        source: Source,
        payload: Payload<'_>,
        header: &Header,
        now: i64,
    ) -> DatagramOutcome {
        let before = self.view;
        let (action, ev) = self.channel.on_packet(&header.channel);
        match action {
            PacketAction::Duplicate => {
                self.source_counters(source).duplicate_packets += 1;
                if header.channel.kind == PacketKind::Data && source != Source::Rerequest {
                    self.measure_skew(header.channel.sequence, now);
                }
                return DatagramOutcome::Duplicate;
            }
            PacketAction::StaleSession => {
                self.counters.stale_session_dropped += 1;
                self.channel_counters[self.cur as usize].stale_session_dropped += 1;
                return DatagramOutcome::StaleSession;
            }
            PacketAction::Unbelievable => {
                self.counters.channel_seq_anomalies += 1;
                return DatagramOutcome::Ignored;
            }
            PacketAction::StaleEnd => {
                self.counters.stale_ends_of_session += 1;
                return DatagramOutcome::Ignored;
            }
            _ => {}
        }
        let first_session = self.view.flags & FEED_HAS_SESSION == 0;
        self.view.flags |= FEED_HAS_SESSION;
        if ev.session_change {
            self.counters.session_changes += 1;
            self.channel_counters[self.cur as usize].session_changes += 1;
            self.view.flags &= !FEED_ENDED;
            if self.multi {
                // C5 on one channel of several (venues.md `cboe-pitch`):
                // it reaches that channel's symbols only, now.
                self.with_venue_rules(now, |venue, rules| venue.forget_channel_session(rules));
            } else {
                // C5, O(1): symbols catch up lazily (state::catch_up, verdict).
                self.view.session_epoch = self.view.session_epoch.wrapping_add(1);
                if self.view.session_epoch == 0 {
                    self.sweep_session_wrap();
                }
            }
        }
        if ev.baseline {
            // V3: the channel's source time belongs to its session.
            self.view.channel_source_ts = i64::MIN;
            if self.policy.trust_from_start {
                // nasdaq-itch trust (replaces S7): only a session received
                // from its sequence 1 starts trusted.
                self.view.flags &= !(FEED_TRUST_LATE_JOIN | FEED_TRUST_GAP);
                if header.channel.sequence != 1 {
                    self.view.flags |= FEED_TRUST_LATE_JOIN;
                    // R5: a late join asks for a snapshot.
                    self.want_image(now);
                }
            }
            self.venue.on_session_start(now, first_session);
            if self.multi {
                self.sync_units();
            }
            if !first_session {
                // C5: every wait and kept entry of the loops is forgotten.
                self.loops.new_session(now);
            }
        }
        if ev.lost > 0 {
            self.venue.on_loss();
            // C3, O(1): every symbol is unverified until S7.
            // Saturating: a forged sequence near u64::MAX must not wrap it.
            self.counters.channel_messages_lost =
                self.counters.channel_messages_lost.saturating_add(ev.lost);
            self.counters.channel_gaps += 1;
            let cc = &mut self.channel_counters[self.cur as usize];
            cc.channel_messages_lost = cc.channel_messages_lost.saturating_add(ev.lost);
            cc.channel_gaps += 1;
            if !self.multi {
                self.view.gap_epoch = self.view.gap_epoch.wrapping_add(1);
                if self.view.gap_epoch == 0 {
                    self.sweep_gap_wrap();
                }
            }
            // A venue of several channels has the trust rules
            // (`FEED_TRUST_GAP` per channel): its gap epoch never moves.
            if self.policy.trust_from_start {
                // nasdaq-itch: no message verifies a symbol again.
                self.view.flags |= FEED_TRUST_GAP;
                // R5: a lost hole asks for a snapshot.
                self.want_image(now);
            }
        }
        if ev.alive {
            // C4
            self.view.channel_alive_at = now;
            self.view.flags |= FEED_CHANNEL_ALIVE;
        }
        if action == PacketAction::EndOfSession {
            self.end_session();
        }
        // V5: a heartbeat that reaches the rules samples the venue's send
        // time, where it has one; V3 likewise for the channel's time.
        if action == PacketAction::Heartbeat {
            if let Some(sent) = header.send_time {
                self.clock.sample_delays(now, now.saturating_sub(sent), 1);
                self.view.offset_ns = self.clock.offset_ns();
                if ev.alive {
                    self.view.channel_source_ts = sent;
                }
            }
        }
        // Feed-level changes first (see `Publish`).
        if self.view != before {
            self.publish_view();
        }
        if let PacketAction::Data { skip } = action {
            if skip == 0 {
                self.skew.first(header.channel.sequence, now);
            }
            let applied = self.with_venue_rules(now, |venue, rules| match payload {
                Payload::Datagram(datagram) => venue.apply(datagram, header, skip, rules),
                Payload::Blocks(blocks) => venue.apply_blocks(blocks, header, skip, rules),
            });
            if source == Source::Rerequest {
                // R6: messages applied from a re-request answer.
                self.counters.recovery.messages_recovered +=
                    (header.channel.count as u64).saturating_sub(skip as u64);
            }
            let before = self.view;
            // V5: one sample per packet: the send time where packets carry
            // one, else the packet's smallest message delay (samples of one
            // packet share `now`: only the smallest matters).
            match header.send_time {
                Some(sent) => self.clock.sample_delays(now, now.saturating_sub(sent), 1),
                None => {
                    self.clock
                        .sample_delays(now, applied.min_delay(now), applied.samples as u64)
                }
            }
            self.view.offset_ns = self.clock.offset_ns();
            if ev.alive {
                // V3: the send time, else the latest message time.
                if let Some(t) = header.send_time.or(applied.max_ts()) {
                    self.view.channel_source_ts = t;
                }
            }
            if applied.image_wanted {
                // R5c: a book error or a Unit Clear that removed orders.
                self.want_image(now);
            }
            if applied.end_of_session {
                // C6 signalled by a message, after the packet's others.
                self.channel.end_session();
                self.end_session();
            }
            self.counters.live_orders = self.venue.live_orders();
            self.set_venue_gauges();
            if self.view != before {
                self.publish_view();
            }
        }
        DatagramOutcome::Applied
    }

    /// C6
    fn end_session(&mut self) {
        self.counters.sessions_ended += 1;
        self.channel_counters[self.cur as usize].sessions_ended += 1;
        self.view.flags |= FEED_ENDED;
    }

    /// C5 when `session_epoch` wraps to 0: resolve the session change
    /// eagerly for every symbol so that an old epoch can never look
    /// current (once per 65,536 session changes).
    #[cold]
    fn sweep_session_wrap(&mut self) {
        let epoch = self.view.session_epoch;
        self.publish_view();
        for (i, st) in self.symbols.iter_mut().enumerate() {
            st.forget_session(epoch);
            self.publisher.publish_symbol(i as u32, st.symbol, &st.view);
        }
    }

    /// C3 when `gap_epoch` wraps to 0: jump to epoch 1 with every symbol
    /// at 0 (unverified), so no stale epoch can ever equal the feed's.
    #[cold]
    fn sweep_gap_wrap(&mut self) {
        self.view.gap_epoch = 1;
        self.publish_view();
        for (i, st) in self.symbols.iter_mut().enumerate() {
            st.view.verified_epoch = 0;
            self.publisher.publish_symbol(i as u32, st.symbol, &st.view);
        }
    }

    fn summary(&self, index: u32, st: &SymbolState) -> SymbolSummary {
        let v = &st.view;
        let session_current = v.session_epoch == self.view.session_epoch;
        let has_quote = v.has_quote();
        let cause = report_cause(v, &self.view_for(index));
        let tally = self.symbols.tally(index);
        SymbolSummary {
            index,
            last_seq: (session_current && v.has_seq()).then_some(v.seq),
            shown_seq: (has_quote || v.has_seq()).then_some(v.seq),
            has_quote,
            bid: v.bid(),
            ask: v.ask(),
            alive_at: has_quote.then_some(v.alive_at),
            quote_source_ts: has_quote.then_some(v.source_ts),
            suspect: (cause != SuspectCause::None).then_some(cause),
            verified: v.verified_epoch == self.view.gap_epoch,
            // V2; a pending session change has forgotten it (C5).
            halted: session_current && v.flags & SYM_HALTED != 0,
            ticks_lost: tally.ticks_lost,
            stale_dropped: tally.stale_dropped,
            seq_anomalies: tally.seq_anomalies,
            seq_resyncs: tally.seq_resyncs,
            snapshots_applied: tally.snapshots_applied,
            configured: st.configured,
            stale_ms: v.stale_ms as u64,
            source_max_age_ms: v.source_max_age_ms as u64,
        }
    }
}

/// The symbol rules as a venue adapter drives them (`venue::Rules`): the
/// feed's symbol table, counters and publisher, borrowed for one datagram.
struct SymbolRules<'a, P: Publish> {
    ctx: Ctx,
    index: &'a mut SymbolIndex,
    symbols: &'a mut Symbols,
    counters: &'a mut FeedCounters,
    publisher: &'a mut P,
    settings: &'a FeedSettings,
    view: &'a FeedView,
    loops: &'a mut Loops<LoopEntry>,
}

impl<P: Publish> SymbolRules<'_, P> {
    #[inline]
    fn publish(&mut self, idx: u32) {
        let st = &self.symbols[idx as usize];
        self.publisher.publish_symbol(idx, st.symbol, &st.view);
    }
}

impl<P: Publish> Rules for SymbolRules<'_, P> {
    type Loops = Loops<LoopEntry>;

    #[inline]
    fn loops(&mut self) -> &mut Loops<LoopEntry> {
        self.loops
    }

    #[inline]
    fn now(&self) -> i64 {
        self.ctx.now
    }

    #[inline]
    fn quote(&mut self, q: &Quote) {
        let Some(idx) = self.symbol(q.symbol) else {
            return;
        };
        let Some((st, mut c)) = self.symbols.counted(idx, self.counters) else {
            return;
        };
        if st.on_quote(q, &self.ctx, &mut c) {
            self.publish(idx);
        }
    }

    #[inline]
    fn heartbeat(&mut self, h: &Heartbeat) {
        let Some(idx) = self.symbol(h.symbol) else {
            return;
        };
        let Some((st, mut c)) = self.symbols.counted(idx, self.counters) else {
            return;
        };
        if st.on_heartbeat(h, &self.ctx, &mut c) {
            self.publish(idx);
        }
    }

    #[inline]
    fn snapshot(&mut self, s: &Quote) {
        let Some(idx) = self.symbol(s.symbol) else {
            return;
        };
        let Some((st, mut c)) = self.symbols.counted(idx, self.counters) else {
            return;
        };
        if st.on_snapshot(s, &self.ctx, &mut c) {
            self.publish(idx);
        }
    }

    /// The state's leading bytes and the published slot (the ones a
    /// venue quote writes).
    #[inline]
    fn prefetch_symbol(&self, slot: u32) {
        prefetch_slot(self.symbols, &*self.publisher, slot);
    }

    /// Slot lookup or creation; counts and returns `None` when full.
    /// Always inlined: a venue's name field (8 bytes for most) then reaches
    /// the hash and the compare as constants and one loaded word.
    #[inline(always)]
    fn symbol(&mut self, symbol: Symbol) -> Option<u32> {
        slot(
            self.index,
            self.symbols,
            self.counters,
            self.publisher,
            self.settings,
            self.view,
            symbol,
        )
    }

    #[inline]
    fn venue_quote(
        &mut self,
        slot: u32,
        seq: u64,
        source_ts: i64,
        bid: Option<Side>,
        ask: Option<Side>,
    ) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            st.on_venue_quote(seq, source_ts, bid, ask, &self.ctx);
            self.publish(slot);
        }
    }

    #[inline]
    fn set_halt(&mut self, slot: u32, source: u8, halted: bool) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            if st.set_halt(source, halted, &self.ctx) {
                self.publish(slot);
            }
        }
    }

    #[inline]
    fn channels_changed(&mut self, slot: u32, channels: ChannelSet) {
        self.publisher.publish_symbol_unit(slot, single(&channels));
    }

    fn suspect_gap(&mut self, slot: u32) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            if st.suspect_gap(&self.ctx) {
                self.publish(slot);
            }
        }
    }

    #[inline]
    fn count(&mut self, what: Count) {
        let c = &mut *self.counters;
        match what {
            Count::UnknownMessage => c.unknown_messages += 1,
            Count::InvalidMessage => c.invalid_messages += 1,
            Count::UnknownOrder => c.unknown_orders += 1,
            Count::OrderOverflow => c.orders_overflow += 1,
            Count::OrderConflict => c.order_conflicts += 1,
            Count::LocateConflict => c.locate_conflicts += 1,
            Count::BookError => c.book_errors += 1,
            Count::UnitClear => c.unit_clears += 1,
            Count::PriceUnbookable => c.prices_unbookable += 1,
            Count::SnapshotIgnored => c.snapshots_ignored += 1,
            Count::SpinWithoutStatus => c.spins_without_status += 1,
            Count::SymbolOverflow => c.symbols_overflow += 1,
        }
    }

    #[inline]
    fn entry(&mut self, slot: u32, seq: u64, source_ts: i64, new: bool) -> EntryOutcome {
        let Some((st, mut c)) = self.symbols.counted(slot, self.counters) else {
            return EntryOutcome::NotApplied;
        };
        let (out, changed) = st.on_entry(seq, source_ts, new, &self.ctx, &mut c);
        if changed {
            self.publish(slot);
        }
        out
    }

    fn book_quote(&mut self, slot: u32, bid: Option<Side>, ask: Option<Side>) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            st.set_book_quote(bid, ask, &self.ctx);
            self.publish(slot);
        }
    }

    fn use_snapshot(
        &mut self,
        slot: u32,
        seq: u64,
        source_ts: i64,
        bid: Option<Side>,
        ask: Option<Side>,
    ) {
        if let Some((st, mut c)) = self.symbols.counted(slot, self.counters) {
            st.use_snapshot(seq, source_ts, bid, ask, &self.ctx, &mut c);
            self.publish(slot);
        }
    }

    fn forget_sequence(&mut self, slot: u32) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            st.forget_sequence(&self.ctx);
            self.publish(slot);
        }
    }

    fn forget_session(&mut self, slot: u32) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            st.forget_session(self.ctx.session_epoch);
            self.publish(slot);
        }
    }

    fn reset_for_spin(&mut self, slot: u32) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            st.reset_for_spin(&self.ctx);
            self.publish(slot);
        }
    }

    fn suspect_book(&mut self, slot: u32) {
        if let Some(st) = self.symbols.get_mut(slot as usize) {
            if st.suspect_unless_caused(SuspectCause::Gap, &self.ctx) {
                self.publish(slot);
            }
        }
    }

    fn sequence(&self, slot: u32) -> Option<u64> {
        let st = self.symbols.get(slot as usize)?;
        (st.view.session_epoch == self.ctx.session_epoch && st.view.has_seq())
            .then_some(st.view.seq)
    }

    fn waits(&self, slot: u32) -> bool {
        self.symbols
            .get(slot as usize)
            .is_some_and(|st| st.waits(&self.ctx))
    }

    fn mirror(&mut self, from: u32, to: u32) {
        if self.symbols.mirror(from, to) {
            self.publish(to);
        }
    }

    fn clear_symbol(&mut self, slot: u32) {
        if let Some(st) = self.symbols.get(slot as usize) {
            let fresh = new_state(st.symbol, self.settings, self.view);
            self.symbols.reset(slot, &fresh);
            self.publish(slot);
        }
    }
}

/// A new symbol in the next slot, published. Out of line: the common
/// lookup then keeps a small frame (a state is built on the stack here).
#[cold]
#[inline(never)]
fn add_symbol<P: Publish>(
    symbols: &mut Symbols,
    publisher: &mut P,
    settings: &FeedSettings,
    view: &FeedView,
    symbol: Symbol,
) {
    let st = new_state(symbol, settings, view);
    publisher.publish_symbol(symbols.len() as u32, symbol, &st.view);
    symbols.push(st);
}

/// A new symbol's state, with the feed's thresholds.
fn new_state(symbol: Symbol, settings: &FeedSettings, view: &FeedView) -> SymbolState {
    SymbolState::new(
        symbol,
        view.gap_epoch,
        view.session_epoch,
        settings.stale_ms,
        settings.source_max_age_ms,
    )
}

/// Slot lookup or creation; counts and returns `None` when full. A free
/// function over the borrowed parts so that `Feed` and `SymbolRules` share it.
/// The lookup of a known symbol (every message but a symbol's first) is
/// inlined into the caller; a new symbol is added out of line, so that its
/// registers and stack do not weigh on every message.
#[inline(always)]
fn slot<P: Publish>(
    index: &mut SymbolIndex,
    symbols: &mut Symbols,
    counters: &mut FeedCounters,
    publisher: &mut P,
    settings: &FeedSettings,
    view: &FeedView,
    symbol: Symbol,
) -> Option<u32> {
    match index.get(symbol, |i| &symbols[i as usize].symbol) {
        Some(idx) => Some(idx),
        None => new_slot(index, symbols, counters, publisher, settings, view, symbol),
    }
}

/// Cache hints for what a message for `slot` writes: the leading bytes of
/// its state and its published slot. Changes nothing.
#[inline]
fn prefetch_slot<P: Publish>(symbols: &Symbols, publisher: &P, slot: u32) {
    if let Some(st) = symbols.get(slot as usize) {
        super::prefetch::prefetch_prefix(st, HOT_BYTES);
    }
    publisher.prefetch_symbol(slot);
}

/// [`slot`] of a symbol the index does not hold yet.
#[cold]
#[inline(never)]
fn new_slot<P: Publish>(
    index: &mut SymbolIndex,
    symbols: &mut Symbols,
    counters: &mut FeedCounters,
    publisher: &mut P,
    settings: &FeedSettings,
    view: &FeedView,
    symbol: Symbol,
) -> Option<u32> {
    let new_slot = symbols.len() as u32;
    match index.find_or_insert(symbol, new_slot, |i| &symbols[i as usize].symbol) {
        Slot::Found(idx) => Some(idx),
        Slot::Inserted => {
            add_symbol(symbols, publisher, settings, view, symbol);
            Some(new_slot)
        }
        Slot::Full => {
            counters.symbols_overflow += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fold_every_cause_and_the_earliest_times() {
        let base = FeedView {
            offset_ns: 7,
            flags: FEED_LIVENESS_CHANNEL | FEED_CHANNEL_SOURCE_TIME,
            ..FeedView::default()
        };
        let a = FeedView {
            channel_alive_at: 100,
            channel_source_ts: 90,
            flags: FEED_CHANNEL_ALIVE | FEED_HAS_SESSION,
            ..FeedView::default()
        };
        let b = FeedView {
            channel_alive_at: 50,
            channel_source_ts: 95,
            flags: FEED_CHANNEL_ALIVE | FEED_HAS_SESSION | FEED_TRUST_GAP | FEED_RECOVERING,
            recovery: 1,
            ..FeedView::default()
        };
        let one = fold_channels(&base, [&a].into_iter());
        assert_eq!((one.channel_alive_at, one.channel_source_ts), (100, 90));
        assert_eq!(one.flags & (FEED_TRUST_GAP | FEED_RECOVERING), 0);
        assert_eq!(one.offset_ns, 7, "the feed's own fields stay");
        let both = fold_channels(&base, [&a, &b].into_iter());
        assert_eq!((both.channel_alive_at, both.channel_source_ts), (50, 90));
        let want = FEED_TRUST_GAP | FEED_RECOVERING | FEED_CHANNEL_ALIVE | FEED_LIVENESS_CHANNEL;
        assert_eq!(both.flags & want, want);
        assert_eq!(both.recovery, 1);
        // A channel never alive: no channel liveness for the symbol.
        let silent = FeedView {
            flags: FEED_HAS_SESSION | FEED_ENDED,
            channel_source_ts: i64::MIN,
            ..FeedView::default()
        };
        let with_silent = fold_channels(&base, [&a, &silent].into_iter());
        assert_eq!(with_silent.flags & FEED_CHANNEL_ALIVE, 0);
        assert!(with_silent.ended());
        assert_eq!(with_silent.channel_source_ts, i64::MIN);
        // No channel: no channel cause, no channel liveness.
        let none = fold_channels(&b, std::iter::empty());
        assert_eq!(none.flags & CHANNEL_FLAGS, 0);
        assert_eq!(none.channel_source_ts, i64::MIN);
    }
    use crate::feed::settings::{ClockOffset, Mode};
    use crate::wire::{Heartbeat, PacketBuilder, Quote, Side};

    const T0: i64 = 1_796_025_600_000_000_000;
    const MS: i64 = 1_000_000;

    fn sym(s: &str) -> Symbol {
        Symbol::parse(s).unwrap()
    }

    fn sess(s: &str) -> SessionId {
        SessionId::parse(s).unwrap()
    }

    fn q(s: &str, seq: u64, ts: i64) -> Quote {
        Quote::new(
            sym(s),
            seq,
            ts as u64,
            Some(Side { px: 1, qty: 1 }),
            Some(Side { px: 2, qty: 1 }),
        )
    }

    fn packet(session: &str, chan: u64, quotes: &[Quote]) -> Vec<u8> {
        let mut b = PacketBuilder::new();
        b.start(sess(session), chan);
        for x in quotes {
            b.quote(x);
        }
        b.bytes().to_vec()
    }

    #[derive(Default)]
    struct Recorder {
        events: Vec<String>,
    }

    impl Publish for Recorder {
        fn publish_symbol(&mut self, index: u32, symbol: Symbol, view: &SymbolView) {
            self.events.push(format!(
                "sym {index} {symbol} seq={} verified={}",
                view.seq, view.verified_epoch
            ));
        }
        fn publish_feed(&mut self, view: &FeedView) {
            self.events.push(format!(
                "feed gap={} session={}",
                view.gap_epoch, view.session_epoch
            ));
        }
    }

    #[test]
    fn clock_offset_survives_a_session_change() {
        let mut f = Feed::new(FeedSettings::default(), 1);
        f.on_datagram(0, &packet("S1", 1, &[q("A", 1, T0 - 7 * MS)]), T0);
        assert_eq!(f.clock_offset_ns(), 7 * MS);
        // New session, samples of 9 ms: the 7 ms minimum is still in the window.
        f.on_datagram(0, &packet("S2", 1, &[q("A", 1, T0 - 9 * MS)]), T0 + MS);
        assert_eq!(f.counters().session_changes, 1);
        assert_eq!(f.clock_offset_ns(), 7 * MS);
    }

    #[test]
    fn samples_come_from_dropped_messages_but_not_from_duplicates() {
        let s = FeedSettings {
            clock_offset: ClockOffset::Auto,
            ..FeedSettings::default()
        };
        let mut f = Feed::new(s, 2);
        let p = packet("S1", 1, &[q("A", 5, T0 - 7 * MS)]);
        f.on_datagram(0, &p, T0);
        // Same packet on B (C2 duplicate): no sample even though it would lower it.
        f.on_datagram(1, &p, T0 - 5 * MS);
        assert_eq!(f.clock_offset_ns(), 7 * MS);
        // An old tick (S2) in a new packet still gives a sample.
        f.on_datagram(0, &packet("S1", 2, &[q("A", 3, T0 - 2 * MS)]), T0 + MS);
        assert_eq!(f.clock_offset_ns(), 3 * MS);
        assert_eq!(f.counters().stale_dropped, 1);
    }

    #[test]
    fn full_table_counts_and_ignores_new_symbols() {
        let s = FeedSettings {
            max_symbols: 2,
            ..FeedSettings::default()
        };
        let mut f = Feed::new(s, 1);
        let p = packet(
            "S1",
            1,
            &[q("A", 1, T0), q("B", 1, T0), q("C", 1, T0), q("A", 2, T0)],
        );
        assert_eq!(f.on_datagram(0, &p, T0), DatagramOutcome::Applied);
        assert_eq!(f.symbol_count(), 2);
        assert_eq!(f.counters().symbols_overflow, 1);
        assert!(f.symbol_view(sym("C")).is_none());
        assert_eq!(f.symbol_view(sym("A")).unwrap().1.seq, 2);
        assert!(f.add_symbol(sym("D")).is_none());
        assert_eq!(f.add_symbol(sym("B")), Some(1));
    }

    #[test]
    fn zero_sequences_are_invalid_messages() {
        let mut f = Feed::new(FeedSettings::default(), 1);
        f.on_datagram(0, &packet("S1", 1, &[q("A", 0, T0)]), T0);
        assert_eq!(f.counters().invalid_messages, 1);
        assert_eq!(f.symbol_count(), 0);
        // A Snapshot may carry 0.
        let mut b = PacketBuilder::new();
        b.start(sess("S1"), 2).snapshot(&q("A", 0, T0));
        f.on_datagram(0, b.bytes(), T0);
        assert_eq!(f.counters().snapshots_applied, 1);
    }

    #[test]
    fn feed_is_published_before_symbols_of_a_gap_packet() {
        let mut f = Feed::with_publisher(FeedSettings::default(), 1, Recorder::default());
        f.on_datagram(0, &packet("S1", 1, &[q("A", 1, T0)]), T0);
        f.publisher_mut().events.clear();
        f.on_datagram(0, &packet("S1", 5, &[q("A", 2, T0)]), T0 + MS);
        let ev = &f.publisher().events;
        assert_eq!(ev[0], "feed gap=1 session=0");
        assert_eq!(ev[1], "sym 0 A seq=2 verified=1");
    }

    #[test]
    fn session_epoch_wrap_resolves_every_symbol() {
        let mut f = Feed::new(
            FeedSettings {
                mode: Mode::Full,
                ..FeedSettings::default()
            },
            1,
        );
        f.on_datagram(0, &packet("X0", 1, &[q("A", 7, T0)]), T0);
        f.on_datagram(0, &packet("X0", 2, &[q("B", 3, T0)]), T0);
        // 65,536 session changes bring the epoch back to 0; symbol A then
        // gets a Quote in the newest session, B stays untouched.
        for i in 1..=65_536u32 {
            let id = format!("Y{i:09}");
            f.on_datagram(0, &PacketBuilder::channel_heartbeat(sess(&id), 1), T0);
        }
        assert_eq!(f.feed_view().session_epoch, 0);
        let b = f.symbol_summary(sym("B")).unwrap();
        assert_eq!(b.suspect, Some(SuspectCause::SessionChange));
        assert_eq!(b.last_seq, None);
        assert_eq!(b.shown_seq, Some(3));
        assert_eq!(f.sessions().len(), super::super::channel::SESSION_HISTORY);
    }

    #[test]
    fn gap_epoch_wrap_unverifies_every_symbol() {
        let mut f = Feed::new(FeedSettings::default(), 1);
        f.on_datagram(0, &packet("S1", 1, &[q("A", 1, T0), q("B", 1, T0)]), T0);
        f.core.view.gap_epoch = u32::MAX - 1;
        for st in f.core.symbols.iter_mut() {
            st.view.verified_epoch = u32::MAX - 1;
        }
        // Gap 1: epoch u32::MAX; A verified again by its next Quote.
        f.on_datagram(0, &packet("S1", 10, &[q("A", 2, T0)]), T0);
        assert!(f.symbol_summary(sym("A")).unwrap().verified);
        assert!(!f.symbol_summary(sym("B")).unwrap().verified);
        // Gap 2 wraps: nobody may look verified by accident.
        f.on_datagram(0, &PacketBuilder::channel_heartbeat(sess("S1"), 20), T0);
        assert_eq!(f.feed_view().gap_epoch, 1);
        for (_, s) in f.symbols() {
            assert!(!s.verified);
            assert_eq!(s.suspect, Some(SuspectCause::ChannelGap));
        }
        f.on_datagram(0, &packet("S1", 20, &[q("B", 2, T0)]), T0);
        assert!(f.symbol_summary(sym("B")).unwrap().verified);
    }

    #[test]
    fn lagging_session_and_end_of_session_copies() {
        let mut f = Feed::new(FeedSettings::default(), 2);
        f.on_datagram(0, &packet("S1", 1, &[q("A", 1, T0)]), T0);
        let eos = PacketBuilder::end_of_session(sess("S1"), 2);
        assert_eq!(f.on_datagram(0, &eos, T0), DatagramOutcome::Applied);
        assert_eq!(f.on_datagram(1, &eos, T0), DatagramOutcome::Duplicate);
        assert_eq!(
            f.on_datagram(1, &packet("S1", 2, &[q("A", 2, T0)]), T0),
            DatagramOutcome::StaleSession
        );
        assert_eq!(
            f.symbol_summary(sym("A")).unwrap().suspect,
            Some(SuspectCause::SessionEnded)
        );
        f.on_datagram(0, &packet("S2", 1, &[q("B", 1, T0)]), T0);
        assert!(!f.session_ended());
        assert_eq!(
            f.symbol_summary(sym("A")).unwrap().suspect,
            Some(SuspectCause::SessionChange)
        );
        assert_eq!(f.symbol_summary(sym("B")).unwrap().suspect, None);
        assert_eq!(f.counters().stale_session_dropped, 1);
        assert_eq!(f.sessions(), &[sess("S1"), sess("S2")]);
    }

    /// Records which slots were hinted (`prefetch_symbol` takes `&self`).
    #[derive(Default)]
    struct Hinted {
        rec: Recorder,
        hints: std::cell::RefCell<Vec<u32>>,
    }

    impl Publish for Hinted {
        fn publish_symbol(&mut self, index: u32, symbol: Symbol, view: &SymbolView) {
            self.rec.publish_symbol(index, symbol, view);
        }
        fn publish_feed(&mut self, view: &FeedView) {
            self.rec.publish_feed(view);
        }
        fn prefetch_symbol(&self, index: u32) {
            self.hints.borrow_mut().push(index);
        }
    }

    #[test]
    fn prefetch_hints_the_first_symbols_slot() {
        let mut f = Feed::with_publisher(FeedSettings::default(), 1, Hinted::default());
        f.on_datagram(0, &packet("S1", 1, &[q("A", 1, T0), q("B", 1, T0)]), T0);
        f.on_datagram(0, &packet("S1", 3, &[q("C", 1, T0)]), T0);
        f.prefetch_index(&packet("S1", 4, &[q("B", 2, T0), q("A", 2, T0)]));
        f.prefetch_state(&packet("S1", 4, &[q("B", 2, T0), q("A", 2, T0)]));
        f.prefetch_state(&packet("S1", 5, &[q("C", 2, T0)]));
        // Unknown symbol, heartbeat, end of session, garbage: no hint.
        f.prefetch_state(&packet("S1", 6, &[q("D", 1, T0)]));
        f.prefetch_state(&PacketBuilder::channel_heartbeat(sess("S1"), 6));
        f.prefetch_state(&PacketBuilder::end_of_session(sess("S1"), 6));
        f.prefetch_state(&[0xFF; 25]);
        f.prefetch_state(&[]);
        assert_eq!(*f.publisher().hints.borrow(), vec![1, 2]);
    }

    /// nasdaq-itch: a packet hints the state of each symbol whose book it
    /// changed, once, before the quotes are written at its end; an
    /// operation on an order the book does not hold hints nothing.
    #[test]
    fn itch_packet_hints_the_symbols_it_touches() {
        use crate::venue::nasdaq_itch::messages::{encode_to_vec, Header, Message, Side};
        let hdr = |locate| Header {
            locate,
            tracking: 0,
            timestamp: 34_200_000_000_000,
        };
        let add = |locate, order_ref, name: &str| Message::AddOrder {
            header: hdr(locate),
            order_ref,
            side: Side::Buy,
            shares: 100,
            stock: sym(name),
            price: 1_000_000,
            attribution: None,
        };
        let itch = |seq, msgs: &[Message]| {
            let mut b = PacketBuilder::new();
            b.start(sess("S1"), seq);
            for m in msgs {
                b.push_raw(&encode_to_vec(m));
            }
            b.bytes().to_vec()
        };
        let mut f = Feed::with_publisher(
            FeedSettings::for_venue(VenueKind::NasdaqItch),
            1,
            Hinted::default(),
        );
        f.on_datagram(
            0,
            &itch(1, &[add(7, 1, "AAA"), add(9, 2, "BBB"), add(7, 3, "AAA")]),
            T0,
        );
        assert_eq!(*f.publisher().hints.borrow(), vec![0, 1]);
        f.publisher().hints.borrow_mut().clear();
        let delete = |order_ref| Message::Delete {
            header: hdr(0),
            order_ref,
        };
        f.on_datagram(0, &itch(4, &[delete(99), delete(2)]), T0);
        assert_eq!(*f.publisher().hints.borrow(), vec![1]);
    }

    mod prefetch_props {
        use super::*;
        use proptest::prelude::*;

        /// Datagrams of every kind, valid or not, over few symbols (so
        /// that the index, sized for 4, has collisions and fills up).
        fn datagram() -> impl Strategy<Value = Vec<u8>> {
            let name = prop::sample::select(vec!["A", "B", "C", "D", "E", "F"]);
            let msg = (name, 0u64..8, 0u8..3, -5i64..5);
            let data = (
                prop::sample::select(vec!["S1", "S2"]),
                1u64..30,
                prop::collection::vec(msg, 1..4),
            )
                .prop_map(|(session, chan, msgs)| {
                    let mut b = PacketBuilder::new();
                    b.start(sess(session), chan);
                    for (n, seq, kind, ms) in msgs {
                        let x = q(n, seq, T0 + ms * MS);
                        match kind {
                            0 => b.quote(&x),
                            1 => b.snapshot(&x),
                            _ => b.heartbeat(&Heartbeat {
                                flags: 0,
                                symbol: sym(n),
                                next_seq: seq,
                                source_ts: (T0 + ms * MS) as u64,
                            }),
                        };
                    }
                    b.bytes().to_vec()
                });
            prop_oneof![
                4 => data.clone(),
                1 => (data, 0usize..80).prop_map(|(mut d, n)| {
                    d.truncate(n);
                    d
                }),
                1 => (1u64..30).prop_map(|c| PacketBuilder::channel_heartbeat(sess("S1"), c).to_vec()),
                1 => (1u64..30).prop_map(|c| PacketBuilder::end_of_session(sess("S2"), c).to_vec()),
                1 => prop::collection::vec(any::<u8>(), 0..70),
            ]
        }

        fn state(f: &Feed<Recorder>) -> String {
            let symbols: Vec<_> = f.symbols().collect();
            format!(
                "{:?} {:?} {:?} {:?}",
                f.publisher().events,
                f.counters(),
                f.feed_view(),
                symbols
            )
        }

        proptest! {
            /// The prefetch hints change nothing: the same datagrams give
            /// the same outcomes, publications, counters and symbols
            /// whether or not any hints (for any datagrams) come between.
            #[test]
            fn prefetch_changes_nothing(
                ops in prop::collection::vec((datagram(), 0usize..3, any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..60),
            ) {
                let settings = FeedSettings { max_symbols: 4, ..FeedSettings::default() };
                let mut plain = Feed::with_publisher(settings, 2, Recorder::default());
                let mut hinted = Feed::with_publisher(settings, 2, Recorder::default());
                for (i, (d, line, early, late)) in ops.iter().enumerate() {
                    let now = T0 + i as i64 * MS;
                    hinted.prefetch_index(&ops[early.index(ops.len())].0);
                    hinted.prefetch_state(&ops[late.index(ops.len())].0);
                    hinted.prefetch_index(d);
                    hinted.prefetch_state(d);
                    let a = plain.on_datagram(*line, d, now);
                    let b = hinted.on_datagram(*line, d, now);
                    prop_assert_eq!(a, b);
                    prop_assert_eq!(state(&plain), state(&hinted));
                }
            }
        }
    }
}
