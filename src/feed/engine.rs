//! `Feed`: one provider feed, sans-I/O. Datagrams go in with their line and
//! arrival time; the channel rules (`channel`), symbol rules (`state`) and
//! clock estimator (`clock`) update plain state; observable changes go out
//! through `Publish`. No allocation, lock or syscall per message: the
//! symbol table is sized once (`max_symbols`).

use super::channel::{Channel, PacketAction};
use super::clock::ClockEstimator;
use super::counters::{FeedCounters, SymbolSummary};
use super::index::SymbolIndex;
use super::settings::{ms_to_ns, FeedSettings, Liveness};
use super::state::{Ctx, SymbolState};
use super::view::{
    FeedView, NoPublish, Publish, SuspectCause, SymbolView, FEED_CHANNEL_ALIVE, FEED_ENDED,
    FEED_HAS_SESSION, FEED_LIVENESS_CHANNEL,
};
use crate::gate::verdict::{resolve_cause, Thresholds};
use crate::wire::{decode_block, Message, Packet, SessionId, Symbol, WireError};

/// What one datagram did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatagramOutcome {
    /// Processed (blocks applied to the symbol rules, or a channel
    /// heartbeat / end of session taken into account).
    Applied,
    /// Invalid per wire.md: dropped whole, counted, no state changed.
    Invalid(WireError),
    /// C2: already delivered (by the other line).
    Duplicate,
    /// C5/C6: a packet of a replaced or ended session.
    StaleSession,
    /// `line` is not one of the feed's lines: ignored, nothing counted.
    UnknownLine,
}

pub struct Feed<P: Publish = NoPublish> {
    settings: FeedSettings,
    max_jump: u64,
    channel: Channel,
    clock: ClockEstimator,
    index: SymbolIndex,
    symbols: Vec<SymbolState>,
    view: FeedView,
    counters: FeedCounters,
    publisher: P,
}

impl Feed<NoPublish> {
    pub fn new(settings: FeedSettings, lines: usize) -> Feed<NoPublish> {
        Feed::with_publisher(settings, lines, NoPublish)
    }
}

impl<P: Publish> Feed<P> {
    pub fn with_publisher(settings: FeedSettings, lines: usize, publisher: P) -> Feed<P> {
        let mut view = FeedView::default();
        if settings.liveness == Liveness::Channel {
            view.flags |= FEED_LIVENESS_CHANNEL;
        }
        let mut feed = Feed {
            settings,
            max_jump: settings.max_seq_jump.max(1),
            channel: Channel::new(),
            clock: ClockEstimator::new(settings.clock_offset),
            index: SymbolIndex::with_capacity(settings.max_symbols),
            symbols: Vec::with_capacity(settings.max_symbols),
            view,
            counters: FeedCounters::new(lines),
            publisher,
        };
        feed.view.offset_ns = feed.clock.offset_ns();
        feed.publisher.publish_feed(&feed.view);
        feed
    }

    pub fn settings(&self) -> &FeedSettings {
        &self.settings
    }

    pub fn counters(&self) -> &FeedCounters {
        &self.counters
    }

    pub fn feed_view(&self) -> &FeedView {
        &self.view
    }

    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    pub fn publisher_mut(&mut self) -> &mut P {
        &mut self.publisher
    }

    pub fn clock_offset_ns(&self) -> i64 {
        self.view.offset_ns
    }

    /// Sessions seen, oldest first (bounded, see `channel::SESSION_HISTORY`).
    pub fn sessions(&self) -> &[SessionId] {
        self.channel.sessions()
    }

    pub fn current_session(&self) -> Option<SessionId> {
        self.channel.current_session()
    }

    pub fn session_ended(&self) -> bool {
        self.channel.ended()
    }

    /// Number of symbols known (seen or configured).
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// The feed-wide default thresholds.
    pub fn default_thresholds(&self) -> Thresholds {
        Thresholds {
            stale_ns: ms_to_ns(self.settings.stale_ms),
            source_max_age_ns: ms_to_ns(self.settings.source_max_age_ms),
        }
    }

    /// Makes `symbol` known (a check answers `no_data`, not
    /// `unknown_symbol`) with the feed's default thresholds. Returns its
    /// slot, or `None` when the table is full.
    pub fn add_symbol(&mut self, symbol: Symbol) -> Option<u32> {
        let idx = self.slot(symbol)?;
        self.symbols[idx as usize].configured = true;
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
        let idx = self.slot(symbol)?;
        let st = &mut self.symbols[idx as usize];
        st.configured = true;
        st.view.stale_ms = stale_ms.min(u32::MAX as u64) as u32;
        st.view.source_max_age_ms = source_max_age_ms.min(u32::MAX as u64) as u32;
        let st = &self.symbols[idx as usize];
        self.publisher.publish_symbol(idx, st.symbol, &st.view);
        Some(idx)
    }

    /// The symbol's slot and view, if known.
    pub fn symbol_view(&self, symbol: Symbol) -> Option<(u32, &SymbolView)> {
        let idx = self.index.get(symbol)?;
        Some((idx, &self.symbols[idx as usize].view))
    }

    /// Slot lookup or creation; counts and returns `None` when full.
    #[inline]
    fn slot(&mut self, symbol: Symbol) -> Option<u32> {
        let new_slot = self.symbols.len() as u32;
        match self.index.get_or_insert(symbol, new_slot) {
            Ok(idx) => Some(idx),
            Err(false) => {
                let st = SymbolState::new(
                    symbol,
                    self.view.gap_epoch,
                    self.view.session_epoch,
                    self.settings.stale_ms,
                    self.settings.source_max_age_ms,
                );
                self.publisher.publish_symbol(new_slot, symbol, &st.view);
                self.symbols.push(st);
                Some(new_slot)
            }
            Err(true) => {
                self.counters.symbols_overflow += 1;
                None
            }
        }
    }

    /// One datagram received on `line` at `now` (Unix ns). The whole
    /// datagram is validated before anything is applied.
    pub fn on_datagram(&mut self, line: usize, datagram: &[u8], now: i64) -> DatagramOutcome {
        if line >= self.counters.lines.len() {
            return DatagramOutcome::UnknownLine;
        }
        let packet = match Packet::parse(datagram) {
            Ok(p) => p,
            Err(e) => {
                self.counters.invalid_packets += 1;
                self.counters.lines[line].invalid_packets += 1;
                return DatagramOutcome::Invalid(e);
            }
        };
        let lc = &mut self.counters.lines[line];
        lc.packets += 1;
        lc.messages += packet.message_count() as u64;

        let before = self.view;
        let (action, ev) = self.channel.on_packet(&packet);
        match action {
            PacketAction::Duplicate => {
                self.counters.lines[line].duplicate_packets += 1;
                return DatagramOutcome::Duplicate;
            }
            PacketAction::StaleSession => {
                self.counters.stale_session_dropped += 1;
                return DatagramOutcome::StaleSession;
            }
            _ => {}
        }
        self.view.flags |= FEED_HAS_SESSION;
        if ev.session_change {
            // C5, O(1): symbols catch up lazily (state::catch_up, verdict).
            self.counters.session_changes += 1;
            self.view.flags &= !FEED_ENDED;
            self.view.session_epoch = self.view.session_epoch.wrapping_add(1);
            if self.view.session_epoch == 0 {
                self.sweep_session_wrap();
            }
        }
        if ev.lost > 0 {
            // C3, O(1): every symbol is unverified until S7.
            self.counters.channel_messages_lost += ev.lost;
            self.counters.channel_gaps += 1;
            self.view.gap_epoch = self.view.gap_epoch.wrapping_add(1);
            if self.view.gap_epoch == 0 {
                self.sweep_gap_wrap();
            }
        }
        if ev.alive {
            // C4
            self.view.channel_alive_at = now;
            self.view.flags |= FEED_CHANNEL_ALIVE;
        }
        if action == PacketAction::EndOfSession {
            // C6
            self.counters.sessions_ended += 1;
            self.view.flags |= FEED_ENDED;
        }
        // Feed-level changes first (see `Publish`).
        if self.view != before {
            self.publisher.publish_feed(&self.view);
        }
        if let PacketAction::Data { skip } = action {
            let ctx = Ctx {
                mode: self.settings.mode,
                max_jump: self.max_jump,
                gap_epoch: self.view.gap_epoch,
                session_epoch: self.view.session_epoch,
                now,
            };
            for payload in packet.blocks().skip(skip as usize) {
                self.on_message(payload, &ctx);
            }
            let offset = self.clock.offset_ns();
            if offset != self.view.offset_ns {
                self.view.offset_ns = offset;
                self.publisher.publish_feed(&self.view);
            }
        }
        DatagramOutcome::Applied
    }

    /// One message block that reached the symbol rules.
    #[inline]
    fn on_message(&mut self, payload: &[u8], ctx: &Ctx) {
        let msg = decode_block(payload);
        let (symbol, source_ts) = match &msg {
            Message::Quote(q) | Message::Snapshot(q) => (q.symbol, q.source_ts),
            Message::Heartbeat(h) => (h.symbol, h.source_ts),
            Message::Unknown { .. } => {
                self.counters.unknown_messages += 1;
                return;
            }
        };
        // Per-symbol sequences start at 1 (a Snapshot may carry 0).
        let zero = match &msg {
            Message::Quote(q) => q.seq == 0,
            Message::Heartbeat(h) => h.next_seq == 0,
            _ => false,
        };
        if zero {
            self.counters.invalid_messages += 1;
            return;
        }
        // A sample about the provider's clock, whatever the rules decide.
        self.clock.sample(ctx.now, source_ts);
        let Some(idx) = self.slot(symbol) else {
            return;
        };
        let st = &mut self.symbols[idx as usize];
        let changed = match &msg {
            Message::Quote(q) => st.on_quote(q, ctx, &mut self.counters),
            Message::Heartbeat(h) => st.on_heartbeat(h, ctx, &mut self.counters),
            Message::Snapshot(s) => st.on_snapshot(s, ctx, &mut self.counters),
            Message::Unknown { .. } => false,
        };
        if changed {
            self.publisher.publish_symbol(idx, symbol, &st.view);
        }
    }

    /// C5 when `session_epoch` wraps to 0: resolve the session change
    /// eagerly for every symbol so that an old epoch can never look
    /// current (once per 65,536 session changes).
    #[cold]
    fn sweep_session_wrap(&mut self) {
        let epoch = self.view.session_epoch;
        self.publisher.publish_feed(&self.view);
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
        self.publisher.publish_feed(&self.view);
        for (i, st) in self.symbols.iter_mut().enumerate() {
            st.view.verified_epoch = 0;
            self.publisher.publish_symbol(i as u32, st.symbol, &st.view);
        }
    }

    /// Per-symbol summaries, in slot order.
    pub fn symbols(&self) -> impl Iterator<Item = (Symbol, SymbolSummary)> + '_ {
        self.symbols
            .iter()
            .enumerate()
            .map(|(i, st)| (st.symbol, self.summary(i as u32, st)))
    }

    pub fn symbol_summary(&self, symbol: Symbol) -> Option<SymbolSummary> {
        let idx = self.index.get(symbol)?;
        Some(self.summary(idx, &self.symbols[idx as usize]))
    }

    fn summary(&self, index: u32, st: &SymbolState) -> SymbolSummary {
        let v = &st.view;
        let session_current = v.session_epoch == self.view.session_epoch;
        let has_quote = v.has_quote();
        let cause = resolve_cause(v, &self.view);
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
            ticks_lost: st.ticks_lost,
            stale_dropped: st.stale_dropped,
            seq_anomalies: st.seq_anomalies,
            seq_resyncs: st.seq_resyncs,
            snapshots_applied: st.snapshots_applied,
            configured: st.configured,
            stale_ms: v.stale_ms as u64,
            source_max_age_ms: v.source_max_age_ms as u64,
        }
    }

    /// Symbols currently suspect or unverified (computed: O(symbols)).
    pub fn symbols_suspect(&self) -> usize {
        self.symbols
            .iter()
            .filter(|st| resolve_cause(&st.view, &self.view) != SuspectCause::None)
            .count()
    }
}
