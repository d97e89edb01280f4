//! The recovery driver (recovery.md R1-R6): routes each datagram of a feed
//! that holds through the machines ([`Hold`], [`Refill`], [`Image`]) and
//! carries out what they decide: processing a datagram, releasing what
//! continues, declaring a hole lost, queueing a request, resuming after an
//! image. Sans-I/O: `now` is passed in; the channel and symbol rules are
//! reached through [`Deliver`], which the feed (`engine`) implements, so
//! the driver needs no `Feed` (its tests use a channel alone).
//!
//! One `Recovery` serves one channel (a feed's session; on a venue with
//! several units, one unit).

use super::hold::{Hold, HoldLimits, Limit, Step};
use super::image::{self, Image, SnapshotFailure, SnapshotPhase};
use super::refill::{self, Availability, Refill, RefillState};
use super::store::Source;
use crate::feed::channel::Channel;
use crate::feed::counters::{FeedCounters, HoleCounts, LineCounters};
use crate::feed::outcome::DatagramOutcome;
use crate::feed::settings::FeedSettings;
use crate::feed::view::{
    RECOVERY_HOLDING, RECOVERY_LIVE, RECOVERY_REREQUESTING, RECOVERY_SNAPSHOT,
    RECOVERY_SNAPSHOT_WANTED,
};
use crate::venue::codec::{RefillAction, RefillCodec};
use crate::venue::Header;
use crate::wire::PacketKind;

/// What the driver needs of the feed's rules.
pub trait Deliver {
    /// Applies a valid datagram to the channel rules and, for data, the
    /// symbol rules, at `now`.
    fn process(
        &mut self,
        source: Source,
        datagram: &[u8],
        header: &Header,
        now: i64,
    ) -> DatagramOutcome;
    /// R5: when the rules last wanted an image (a late join, a lost hole)
    /// since the last call.
    fn take_image_wanted(&mut self) -> Option<i64>;
    /// R5c step 3: a held datagram about to be processed after an image
    /// applied up to `next`: what of it is below `next` is skipped, but
    /// may still set the channel's time base. Nothing by default.
    fn before_resume(&mut self, _datagram: &[u8], _header: &Header, _next: u64, _now: i64) {}
    fn channel(&self) -> &Channel;
    fn counters(&mut self) -> &mut FeedCounters;
    /// R6: the recovery state readers see (`FeedView::recovery`).
    fn recovery_state(&self) -> u8;
    /// Sets it, published on change.
    fn set_recovery_state(&mut self, code: u8);
    /// R3: whether a hole is open (`FEED_RECOVERING`), published on change.
    fn set_recovering(&mut self, on: bool);
}

/// The counters of a datagram's source.
fn source_counters(c: &mut FeedCounters, source: Source) -> &mut LineCounters {
    match source {
        Source::Line(l) => &mut c.lines[l],
        Source::Rerequest => &mut c.rerequest,
    }
}

#[derive(Debug)]
pub struct Recovery<C: RefillCodec> {
    /// Whether the feed holds at all (`Recovery::holds`).
    holds: bool,
    /// C3b's `max_channel_jump` (an image's end is judged by it).
    max_channel_jump: u64,
    /// R1-R2: datagrams held beyond the open hole.
    hold: Hold,
    /// R4: the refill service's requests.
    refill: Refill<C>,
    /// R5: the image service's phase and pace.
    image: Image,
    /// R5c step 1: holes among the datagrams an image attempt holds are
    /// asked for while it runs (the refill codec says so:
    /// `RefillCodec::asks_during_image`), and none is declared during
    /// the attempt. Without, the image's hold waits for the image (R5).
    image_refill: bool,
    /// A held datagram's bytes while it is processed (capacity kept).
    scratch: Vec<u8>,
    /// Datagrams the feed's other channels hold (recovery.md:
    /// `gap_hold_packets` counts the whole feed); 0 for one channel.
    others_held: usize,
    /// Holding the datagram just judged would exceed `gap_hold_packets`
    /// while this channel has no hole: the feed declares its oldest hole
    /// (another channel's) and offers the datagram again.
    needs_room: bool,
    /// R6 per unit: this channel's holes (the feed's counters hold every
    /// channel's).
    holes: HoleCounts,
}

impl<C: RefillCodec> Recovery<C> {
    pub fn new(settings: &FeedSettings, codec: C) -> Recovery<C> {
        let r = &settings.recovery;
        Recovery {
            holds: r.holds(),
            max_channel_jump: settings.max_channel_jump,
            hold: Hold::new(HoldLimits::new(r, settings.max_channel_jump), r.holds()),
            image_refill: r.refill_servers() > 0 && codec.asks_during_image(),
            refill: Refill::new(r, codec),
            image: Image::new(r.snapshot, r.snapshot_hold_bytes),
            scratch: Vec::new(),
            others_held: 0,
            needs_room: false,
            holes: HoleCounts::default(),
        }
    }

    /// R6 per unit: this channel's holes, and whether one is open now.
    pub fn hole_counts(&self) -> HoleCounts {
        HoleCounts {
            open_now: !self.hold.is_empty(),
            ..self.holes
        }
    }

    /// R5c: whether this channel (a unit) has an image server of its own;
    /// set when its machines are made.
    pub fn set_image_enabled(&mut self, enabled: bool) {
        self.image.set_enabled(enabled);
    }

    /// Datagrams held now.
    #[inline]
    pub fn held(&self) -> usize {
        self.hold.len()
    }

    /// Datagrams held now that count against `gap_hold_packets`: none
    /// while an image attempt holds them (R5c step 1: they count only
    /// against the attempt's bounds).
    #[inline]
    pub fn held_against_limit(&self) -> usize {
        if self.image.running() {
            0
        } else {
            self.hold.len()
        }
    }

    /// R5c step 1: whether the holes among the held datagrams are asked
    /// for now (an image attempt holds them, and the refill codec asks
    /// during one).
    #[inline]
    fn image_asks(&self) -> bool {
        self.image_refill && self.image.running()
    }

    /// What the feed's other channels hold now (recovery.md:
    /// `gap_hold_packets` counts the whole feed).
    #[inline]
    pub fn set_others_held(&mut self, n: usize) {
        self.others_held = n;
    }

    /// Whether the last datagram offered was refused for want of room
    /// while this channel has no hole (then the feed's oldest hole is
    /// declared and the datagram offered again); cleared by the call.
    #[inline]
    pub fn take_needs_room(&mut self) -> bool {
        std::mem::take(&mut self.needs_room)
    }

    /// When the open hole opened (R2), if one is open with datagrams held
    /// and may be declared to make room (R5c step 1: what an image attempt
    /// holds counts only against its own bounds).
    pub fn hole_opened_at(&self) -> Option<i64> {
        (!self.image.running() && !self.hold.is_empty()).then(|| self.hold.opened_at())
    }

    /// recovery.md: another channel needs room within `gap_hold_packets`:
    /// this channel's first hole is declared lost at `now` (R2).
    pub fn declare_oldest<D: Deliver>(&mut self, d: &mut D, now: i64) {
        if !self.hold.is_empty() {
            self.declare_first(d, now);
            self.refresh_view(d);
        }
    }

    /// Whether the feed holds at all: without, every datagram is processed
    /// as it comes.
    #[inline]
    pub fn holds(&self) -> bool {
        self.holds
    }

    /// Nothing held, no snapshot wanted or running, the view says `live`,
    /// and the datagram continues the current session without going
    /// beyond `next`: no rule of recovery.md has anything to do.
    #[inline]
    pub fn steady<D: Deliver>(&self, d: &D, header: &Header) -> bool {
        let ch = &header.channel;
        let channel = d.channel();
        self.hold.is_idle()
            && d.recovery_state() == 0
            && self.image.phase() == SnapshotPhase::Idle
            && ch.sequence <= channel.next_sequence()
            && !channel.ended()
            && channel.current_session() == Some(ch.session)
            && !ch.stale_session
    }

    /// R1-R2: a valid datagram of a line (or an answer) at `now`, on a
    /// feed that holds: holes whose deadline passed are declared first.
    pub fn on_datagram<D: Deliver>(
        &mut self,
        d: &mut D,
        source: Source,
        datagram: &[u8],
        header: &Header,
        now: i64,
    ) -> DatagramOutcome {
        self.expire(d, now);
        let out = self.route(d, source, datagram, header, now);
        self.refresh_view(d);
        out
    }

    /// R4: a valid datagram from a configured re-request server, counted.
    /// An answer of another session, a heartbeat or an end of session is
    /// dropped: answers never change the session (C5 needs the lines).
    pub fn on_answer<D: Deliver>(
        &mut self,
        d: &mut D,
        datagram: &[u8],
        header: &Header,
        now: i64,
    ) -> DatagramOutcome {
        let same_session = d.channel().current_session() == Some(header.channel.session);
        let c = d.counters();
        c.rerequest.packets += 1;
        c.rerequest.messages += header.channel.count as u64;
        c.recovery.answers_received += 1;
        if !same_session {
            c.recovery.answers_wrong_session += 1;
            return DatagramOutcome::Ignored;
        }
        if header.channel.kind != PacketKind::Data {
            c.recovery.answers_not_data += 1;
            return DatagramOutcome::Ignored;
        }
        self.on_datagram(d, Source::Rerequest, datagram, header, now)
    }

    /// R2/R4: time passes to `now` without a datagram.
    pub fn handle_timeout<D: Deliver>(&mut self, d: &mut D, now: i64) {
        self.expire(d, now);
        if self.holds {
            self.refresh_view(d);
        }
    }

    /// Holes whose deadline is before `now` are declared lost, a request
    /// that falls due is queued; the recovery state is not published.
    fn expire<D: Deliver>(&mut self, d: &mut D, now: i64) {
        // R4c: the deadlines count on the refill service only while it
        // can be asked.
        self.hold.set_window(self.refill.availability().window(now));
        if self.image.running() {
            // R5: the snapshot's hold has no deadline of its own. R5c step
            // 1: its holes are asked for as usual, and none is declared.
            if self.image_refill {
                self.schedule_request(d, now);
            }
            return;
        }
        while !self.hold.is_empty() {
            let deadline = self.hold.deadline();
            if deadline >= now {
                break;
            }
            // R2: right after the deadline, processed with now = deadline.
            self.declare_first(d, deadline);
        }
        self.schedule_request(d, now);
    }

    /// When `handle_timeout` next has something to do: a hole's deadline
    /// passing, a request or a snapshot attempt falling due.
    pub fn next_timeout(&self) -> Option<i64> {
        let snapshot = match self.image.phase() {
            SnapshotPhase::Wanted { not_before } => Some(not_before),
            SnapshotPhase::Running { .. } if self.image_refill => return self.image_request_due(),
            SnapshotPhase::Running { .. } => return None,
            SnapshotPhase::Idle => None,
        };
        if self.hold.is_empty() {
            return snapshot;
        }
        // Declared right after the deadline: wake 1 ns past it.
        let deadline = self.hold.deadline().saturating_add(1);
        let t = match self.refill.due(self.hold.ask_from()) {
            Some(due) if !self.refill.has_queued() => deadline.min(due),
            _ => deadline,
        };
        Some(snapshot.map_or(t, |s| s.min(t)))
    }

    /// R5c step 1: when the first hole among an image attempt's held
    /// datagrams is next asked for, or (right after its R2 deadline) no
    /// longer asked for.
    fn image_request_due(&self) -> Option<i64> {
        let (ask_from, deadline) = self.hold.image_gap_times()?;
        let past = deadline.saturating_add(1);
        if self.refill.has_queued() {
            return Some(past);
        }
        Some(
            self.refill
                .due(Some(ask_from))
                .map_or(past, |due| due.min(past)),
        )
    }

    /// R5: where the image stands, and the last failure.
    pub fn snapshot_phase(&self) -> (SnapshotPhase, Option<SnapshotFailure>) {
        (self.image.phase(), self.image.last_failure())
    }

    /// R5c: an image the rules wanted while the datagram took the steady
    /// path (a book error, a Unit Clear) is taken up.
    pub fn take_image_wanted<D: Deliver>(&mut self, d: &mut D) {
        if let Some(t) = d.take_image_wanted() {
            self.image.want(t);
            self.refresh_view(d);
        }
    }

    /// R5: whether an attempt starts now.
    pub fn poll_snapshot_start<D: Deliver>(&mut self, d: &mut D, now: i64) -> bool {
        if !self.image.poll_start(now, &mut d.counters().recovery) {
            return false;
        }
        if self.image_refill {
            // R5c step 1: the holes among what the attempt holds, from
            // the unit's `next` now, are asked for as usual.
            let next = d.channel().next_sequence();
            self.hold.track_image_gaps(Some(next));
            self.schedule_request(d, now);
        }
        self.refresh_view(d);
        true
    }

    /// R5: the attempt failed: nothing of it is applied; the held
    /// datagrams are processed as without a snapshot (R1-R2) and the next
    /// attempt waits for its pace.
    pub fn snapshot_failed<D: Deliver>(&mut self, d: &mut D, why: SnapshotFailure, now: i64) {
        if !self.image.failed(why, now, &mut d.counters().recovery) {
            return;
        }
        self.resume_after_snapshot(d, None, now);
        self.refresh_view(d);
    }

    /// R5c: the attempt was refused with session in use: nothing of it is
    /// applied, and it does not count for the pace (`Image::session_in_use`).
    pub fn snapshot_session_in_use<D: Deliver>(&mut self, d: &mut D, now: i64) {
        if !self.image.session_in_use(now, &mut d.counters().recovery) {
            return;
        }
        self.resume_after_snapshot(d, None, now);
        self.refresh_view(d);
    }

    /// R5c: another channel's attempt ended at `now`.
    pub fn another_image_ended(&mut self, now: i64) {
        self.image.another_ended(now);
    }

    /// R5: whether an image ending at `next` (End of Snapshot) may be
    /// applied to the current session; if not, the attempt fails as
    /// `snapshot_failed` and the failure is returned.
    pub fn check_end<D: Deliver>(
        &mut self,
        d: &mut D,
        next: u64,
        now: i64,
    ) -> Result<(), SnapshotFailure> {
        if !self.image.running() {
            return Err(SnapshotFailure::SessionChanged);
        }
        let channel = d.channel();
        let why = if channel.current_session().is_none() || channel.ended() {
            SnapshotFailure::SessionChanged
        } else if next == 0 || self.implausible_end(channel, next) {
            SnapshotFailure::Implausible
        } else {
            return Ok(());
        };
        self.snapshot_failed(d, why, now);
        Err(why)
    }

    /// R5: a `G` that C3b's rule does not believe: `max_channel_jump` or
    /// more beyond the furthest held datagram (or `next`, nothing held),
    /// or as far below the first one.
    fn implausible_end(&self, channel: &Channel, next: u64) -> bool {
        let current = channel.next_sequence();
        let furthest = current.max(self.hold.max_end());
        let first = self.hold.first().map_or(current, |h| h.sequence());
        image::implausible_end(next, furthest, first, self.max_channel_jump)
    }

    /// R5 step 3: the image was applied up to `next` (the channel's `next`
    /// is set): held datagrams that continue are processed, the rest is a
    /// hole open since `now`.
    pub fn snapshot_applied<D: Deliver>(&mut self, d: &mut D, next: u64, now: i64) {
        self.hold.forget_conflicts_below(next);
        self.image.applied(now, &mut d.counters().recovery);
        self.resume_after_snapshot(d, Some(now), now);
        self.refresh_view(d);
    }

    /// After a snapshot attempt: held datagrams that continue from `next`
    /// are processed; what remains beyond is a hole (R1, R2, R4) whose open
    /// time is the arrival of `G` when one was applied (`end_at`, R5 step
    /// 3), else the earliest held arrival. The hold then gives back what
    /// the attempt grew (R5: its buffers are released).
    fn resume_after_snapshot<D: Deliver>(&mut self, d: &mut D, end_at: Option<i64>, now: i64) {
        self.hold.track_image_gaps(None);
        if end_at.is_some() {
            self.release_after_image(d, now);
        }
        self.release(d, now);
        if self.hold.is_empty() {
            self.close_hole(d, now);
        } else {
            let t = end_at.unwrap_or_else(|| self.hold.earliest_arrival().unwrap_or(now));
            self.open_hole(d, t);
            self.schedule_request(d, now);
        }
        self.hold.shrink();
    }

    /// R4c: the request the I/O shell took and that has not ended (a
    /// response must echo it).
    pub fn outstanding(&self) -> Option<C::Request> {
        self.refill.outstanding()
    }

    /// R4c: what keeps the refill service out of reach now.
    pub fn availability(&self) -> Availability {
        self.refill.availability()
    }

    /// R4c: the machines of a channel first selected take the feed's reach
    /// as it stands (nothing is open yet).
    pub fn set_reach(&mut self, a: Availability) {
        self.refill.set_availability(a, i64::MIN);
    }

    /// R4c: the open hole's deadline, if its request is waiting for the
    /// I/O shell.
    pub fn queued_deadline(&self) -> Option<i64> {
        if self.image_asks() {
            // R5c step 1: the first hole among the attempt's held datagrams.
            let deadline = self.hold.image_gap_times().map(|t| t.1);
            return deadline.filter(|_| self.refill.has_queued());
        }
        (self.refill.has_queued() && !self.hold.is_empty()).then(|| self.hold.deadline())
    }

    /// R4c: a change of what keeps the refill service out of reach (a
    /// login, a lost connection, a pause): the outstanding request is void
    /// when it is out of reach, and holes past the deadline they now get
    /// are declared at `now`.
    pub fn set_availability<D: Deliver>(&mut self, d: &mut D, a: Availability, now: i64) {
        self.refill.set_availability(a, now);
        self.expire(d, now);
        self.refresh_view(d);
    }

    /// R4c: the feed's count limit (a refusal of another channel's count).
    pub fn set_count_limit(&mut self, limit: u64) {
        self.refill.codec_mut().set_count_limit(limit);
    }

    /// R4c: the service's response `status` to the outstanding request
    /// (the caller checked that it echoes it), carried out on this channel.
    /// Returned for what concerns the whole feed (a pause, the count
    /// limit), which the caller spreads over every channel.
    pub fn on_response<D: Deliver>(&mut self, d: &mut D, status: u8, now: i64) -> RefillAction {
        let action = self.refill.codec_mut().on_response(status, now);
        match action {
            RefillAction::Wait => {}
            RefillAction::DeclareLost if self.image_asks() => {
                // R5c step 1: no hole is declared during the attempt; the
                // service cannot fill this one, so it is no longer asked
                // for (the spin's end decides), and the next one is.
                self.refill.end_request();
                self.hold.skip_image_gap(now);
                self.schedule_request(d, now);
            }
            RefillAction::DeclareLost => {
                // R4c `O`: declared at once, `now` = the response's arrival.
                self.refill.end_request();
                if !self.hold.is_empty() {
                    self.declare_first(d, now);
                }
                self.schedule_request(d, now);
            }
            RefillAction::AskAgain { .. } => {
                // R4c `C`: not an attempt; the smaller count at once.
                self.refill.end_request();
                self.schedule_request(d, now);
            }
            RefillAction::Retry => self.refill.retry_later(now),
            RefillAction::PauseFeed { .. } | RefillAction::OffFeed { .. } => {
                // The request ended; the pause is the feed's.
                self.refill.end_request();
            }
            RefillAction::OffChannel => {
                let a = Availability {
                    unit_off: true,
                    ..self.refill.availability()
                };
                self.refill.set_availability(a, now);
                self.expire(d, now);
            }
        }
        self.refresh_view(d);
        action
    }

    /// R4: the request to send now, if one fell due: the index of the
    /// configured server to send it to, and the request.
    pub fn poll_request(&mut self, counters: &mut FeedCounters) -> Option<(usize, C::Request)> {
        self.refill.poll(&mut counters.recovery)
    }

    /// Whether a hole is open now (R3: the check answers `recovering`).
    pub fn recovering(&self) -> bool {
        !self.hold.is_empty()
    }

    /// The held datagrams now, the most held at once, and the arena's peak
    /// size so far (bytes).
    pub fn hold_usage(&self) -> (usize, usize, usize) {
        self.hold.usage()
    }

    /// Processes through the rules, then takes up an image they wanted.
    fn process<D: Deliver>(
        &mut self,
        d: &mut D,
        source: Source,
        datagram: &[u8],
        header: &Header,
        now: i64,
    ) -> DatagramOutcome {
        let out = d.process(source, datagram, header, now);
        if let Some(t) = d.take_image_wanted() {
            self.image.want(t);
        }
        out
    }

    /// R1: hold, fill or process a valid datagram of a feed that holds.
    fn route<D: Deliver>(
        &mut self,
        d: &mut D,
        source: Source,
        datagram: &[u8],
        header: &Header,
        now: i64,
    ) -> DatagramOutcome {
        let ch = header.channel;
        if ch.stale_session {
            // C5: a replaced session's packet is never held.
            return self.process(d, source, datagram, header, now);
        }
        loop {
            let channel = d.channel();
            let current = channel.current_session();
            if current != Some(ch.session) || channel.ended() {
                if current.is_some()
                    && current != Some(ch.session)
                    && !channel.sessions().contains(&ch.session)
                {
                    // R5: a session change abandons a running snapshot.
                    if self.image.running() {
                        self.snapshot_failed(d, SnapshotFailure::SessionChanged, now);
                    }
                    // R2: every open hole is declared before C5 applies.
                    self.declare_all(d, now);
                    self.hold.clear_conflicts();
                    // R4c `I`: a unit not served until its next session.
                    let a = self.refill.availability();
                    if a.unit_off {
                        let a = Availability {
                            unit_off: false,
                            ..a
                        };
                        self.refill.set_availability(a, now);
                    }
                }
                return self.process(d, source, datagram, header, now);
            }
            let next = channel.next_sequence();
            let limit = if self.image.running() {
                self.image.hold_limit()
            } else if self.others_held > 0 {
                // recovery.md: the limit counts every channel's held
                // datagrams together.
                let max = self.hold.limits().max_packets;
                Limit::Hole {
                    packets: max.saturating_sub(self.others_held),
                }
            } else {
                self.hold.room()
            };
            let step = self.hold.judge(
                source,
                header,
                datagram,
                next,
                limit,
                &mut d.counters().recovery,
            );
            return match step {
                Step::Process => self.process(d, source, datagram, header, now),
                Step::Unbelieved => {
                    // C3b: dropped, or (the third of a run) a gap from
                    // `next`: held datagrams are older, declare them first.
                    if d.channel().jump_would_resync(&ch) {
                        self.declare_all(d, now);
                    }
                    self.process(d, source, datagram, header, now)
                }
                Step::Duplicate => {
                    source_counters(d.counters(), source).duplicate_packets += 1;
                    DatagramOutcome::Duplicate
                }
                Step::StaleEnd => {
                    d.counters().stale_ends_of_session += 1;
                    DatagramOutcome::Ignored
                }
                Step::Ignored => DatagramOutcome::Ignored,
                Step::IgnoredHoleClosed => {
                    self.close_hole(d, now);
                    DatagramOutcome::Ignored
                }
                Step::Full => {
                    if self.image.running() {
                        // R5: the attempt fails; judged again without it.
                        self.snapshot_failed(d, SnapshotFailure::HeldBound, now);
                    } else if self.hold.is_empty() {
                        // recovery.md: no hole of this channel, so the
                        // feed's oldest (another channel's) is declared.
                        self.needs_room = true;
                        return DatagramOutcome::Ignored;
                    } else {
                        // R2: holding one more would exceed the bound.
                        d.counters().recovery.hold_overflows += 1;
                        self.declare_first(d, now);
                    }
                    continue;
                }
                Step::Keep => {
                    // R1: the hole opens with the first datagram held.
                    if self.hold.is_empty() {
                        self.open_hole(d, now);
                    }
                    self.hold.push(*header, datagram, now, source);
                    if self.image_asks() {
                        // R5c step 1: a held datagram may fill part of
                        // the first hole among them (the request for what
                        // it covers ends) or open one (asked for).
                        if let Some(front) = self.hold.image_front() {
                            self.refill.covered(front);
                        }
                        self.schedule_request(d, now);
                    }
                    DatagramOutcome::Held
                }
                Step::Fill => {
                    let out = self.process(d, source, datagram, header, now);
                    if d.channel().next_sequence() > next {
                        self.fill(d, source, now);
                    }
                    out
                }
            };
        }
    }

    /// R1: a datagram moved `next` while a hole was open: the held
    /// datagrams that now continue are processed in order; the hole closes
    /// when one of them was reached, else it was filled in part.
    fn fill<D: Deliver>(&mut self, d: &mut D, source: Source, now: i64) {
        let reached = self.release(d, now);
        if self.hold.is_empty() || reached {
            d.counters().recovery.holes_filled += 1;
            self.holes.filled += 1;
            self.close_hole(d, now);
            if !self.hold.is_empty() {
                // R2: the next hole opens at its earliest held arrival.
                let t = self.hold.earliest_arrival().unwrap_or(now);
                self.open_hole(d, t);
            }
        } else {
            // R2: progress moves a re-requesting hole's deadline.
            self.hold.progress(now);
            if self.refill.codec().answers_on_lines() {
                // R4c: the request ends once all it asked for is here.
                self.refill.progressed(d.channel().next_sequence());
            } else if source == Source::Rerequest {
                // R4: an answer that fills part is followed at once by a
                // request for the rest.
                self.refill.answered_in_part();
            }
        }
        self.schedule_request(d, now);
    }

    /// Processes the held datagrams that continue from `next` (C2 skips
    /// what was already processed), with `now` for every rule; after the
    /// session ended, every held datagram (they are dropped as C6 says).
    /// Returns whether any was processed.
    fn release<D: Deliver>(&mut self, d: &mut D, now: i64) -> bool {
        let mut any = false;
        let mut bytes = std::mem::take(&mut self.scratch);
        loop {
            let channel = d.channel();
            let (next, ended) = (channel.next_sequence(), channel.ended());
            let Some(held) = self.hold.pop_continuing(next, ended, &mut bytes) else {
                break;
            };
            self.process(d, held.source, &bytes, &held.header, now);
            any = true;
        }
        self.scratch = bytes;
        any
    }

    /// R5c step 3: the held datagrams that reach below the image's `next`
    /// (the spin reflects what is below), each shown to the rules first
    /// (`Deliver::before_resume`: the skipped part still sets the time
    /// base), then processed (C2 skips what is below `next`).
    fn release_after_image<D: Deliver>(&mut self, d: &mut D, now: i64) {
        let mut bytes = std::mem::take(&mut self.scratch);
        loop {
            let next = d.channel().next_sequence();
            if self.hold.first().is_none_or(|h| h.sequence() >= next) {
                break;
            }
            let Some(held) = self.hold.pop_continuing(next, false, &mut bytes) else {
                break;
            };
            d.before_resume(&bytes, &held.header, next, now);
            self.process(d, held.source, &bytes, &held.header, now);
        }
        self.scratch = bytes;
    }

    /// R2: the first hole is lost: its first held datagram goes through C3
    /// at `at`, then the ones that continue. Held datagrams beyond the next
    /// hole stay, and that hole keeps its own open time.
    fn declare_first<D: Deliver>(&mut self, d: &mut D, at: i64) {
        d.counters().recovery.holes_lost += 1;
        self.holes.lost += 1;
        let mut bytes = std::mem::take(&mut self.scratch);
        if let Some(held) = self.hold.pop_first(&mut bytes) {
            self.process(d, held.source, &bytes, &held.header, at);
        }
        self.scratch = bytes;
        self.release(d, at);
        self.close_hole(d, at);
        if !self.hold.is_empty() {
            let t = self.hold.earliest_arrival().unwrap_or(at);
            self.open_hole(d, t);
        }
    }

    /// R2: every open hole, in order, at `at`.
    fn declare_all<D: Deliver>(&mut self, d: &mut D, at: i64) {
        while !self.hold.is_empty() {
            self.declare_first(d, at);
        }
    }

    fn open_hole<D: Deliver>(&mut self, d: &mut D, t_open: i64) {
        self.hold.open(t_open, &mut d.counters().recovery);
        self.holes.opened += 1;
        self.refill.reset();
        d.set_recovering(true);
    }

    /// The current hole is gone (filled or declared): `recovering` ends
    /// unless another opens at once.
    fn close_hole<D: Deliver>(&mut self, d: &mut D, now: i64) {
        self.hold.close(now, &mut d.counters().recovery);
        self.refill.reset();
        if self.hold.is_empty() {
            d.set_recovering(false);
        }
    }

    /// R6: the recovery state readers see (`status`), published on change.
    fn refresh_view<D: Deliver>(&mut self, d: &mut D) {
        let state = match self.image.phase() {
            SnapshotPhase::Running { .. } => RECOVERY_SNAPSHOT,
            SnapshotPhase::Wanted { .. } => RECOVERY_SNAPSHOT_WANTED,
            SnapshotPhase::Idle if self.hold.is_empty() => RECOVERY_LIVE,
            SnapshotPhase::Idle if matches!(self.refill.state(), RefillState::Asked { .. }) => {
                RECOVERY_REREQUESTING
            }
            SnapshotPhase::Idle => RECOVERY_HOLDING,
        };
        let reason = self
            .image
            .last_failure()
            .map_or(0, |f| (f.index() as u8 + 1) << 3);
        d.set_recovery_state(state | reason);
    }

    /// R4: queues the request that falls due at `now`, if any.
    fn schedule_request<D: Deliver>(&mut self, d: &mut D, now: i64) {
        if self.image_asks() {
            self.schedule_image_request(d, now);
            return;
        }
        let channel = d.channel();
        let hole = match (channel.current_session(), self.hold.first()) {
            (Some(session), Some(first)) => Some(refill::Hole {
                session,
                next: channel.next_sequence(),
                first_held: first.sequence(),
            }),
            _ => None,
        };
        self.refill.schedule(now, self.hold.ask_from(), hole);
    }
}

impl<C: RefillCodec> Recovery<C> {
    /// R5c step 1: queues the request for the first hole among the
    /// datagrams an image attempt holds, if one falls due at `now`: as
    /// R4c asks for a hole (from `t_open + gap_hold_us`, one outstanding,
    /// again after an attempt without progress), for as long as R2 would
    /// keep the hole open. Past that it is not declared but no longer
    /// asked for, and the next hole is.
    fn schedule_image_request<D: Deliver>(&mut self, d: &mut D, now: i64) {
        let Some(session) = d.channel().current_session() else {
            return;
        };
        while let (Some((front, beyond)), Some((ask_from, deadline))) =
            (self.hold.image_gap(), self.hold.image_gap_times())
        {
            if now > deadline {
                self.refill.end_request();
                self.hold.skip_image_gap(now);
                continue;
            }
            let hole = refill::Hole {
                session,
                next: front,
                first_held: beyond,
            };
            self.refill.schedule(now, Some(ask_from), Some(hole));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::conflict_tests::header;
    use super::*;
    use crate::feed::channel::PacketAction;
    use crate::feed::settings::Recovery as Settings;
    use crate::venue::rerequest::MoldUdp64;

    const MS: i64 = 1_000_000;

    /// The channel rules alone, recording what reaches the symbol rules.
    #[derive(Default)]
    struct Rules {
        channel: Channel,
        counters: FeedCounters,
        state: u8,
        recovering: bool,
        /// (sequence, `now`) of each data packet applied.
        applied: Vec<(u64, i64)>,
    }

    impl Deliver for Rules {
        fn process(&mut self, _: Source, _: &[u8], header: &Header, now: i64) -> DatagramOutcome {
            match self.channel.on_packet(&header.channel).0 {
                PacketAction::Duplicate => DatagramOutcome::Duplicate,
                PacketAction::Data { .. } => {
                    self.applied.push((header.channel.sequence, now));
                    DatagramOutcome::Applied
                }
                _ => DatagramOutcome::Applied,
            }
        }
        fn take_image_wanted(&mut self) -> Option<i64> {
            None
        }
        fn channel(&self) -> &Channel {
            &self.channel
        }
        fn counters(&mut self) -> &mut FeedCounters {
            &mut self.counters
        }
        fn recovery_state(&self) -> u8 {
            self.state
        }
        fn set_recovery_state(&mut self, code: u8) {
            self.state = code;
        }
        fn set_recovering(&mut self, on: bool) {
            self.recovering = on;
        }
    }

    fn driver(servers: usize) -> (Recovery<MoldUdp64>, Rules) {
        let settings = FeedSettings {
            recovery: Settings {
                gap_hold_us: 1_000,
                rerequest_servers: servers,
                ..Settings::default()
            },
            ..FeedSettings::default()
        };
        let rules = Rules {
            channel: Channel::with_max_jump(settings.max_channel_jump),
            counters: FeedCounters::new(1),
            ..Rules::default()
        };
        (Recovery::new(&settings, MoldUdp64), rules)
    }

    fn offer(r: &mut Recovery<MoldUdp64>, d: &mut Rules, seq: u64, now: i64) -> DatagramOutcome {
        let h = header(seq, 1, PacketKind::Data);
        r.on_datagram(d, Source::Line(0), &seq.to_be_bytes(), &h, now)
    }

    #[test]
    fn a_hole_holds_what_is_beyond_and_releases_it_in_order_when_filled() {
        let (mut r, mut d) = driver(0);
        assert_eq!(offer(&mut r, &mut d, 1, MS), DatagramOutcome::Applied);
        assert!(r.steady(&d, &header(2, 1, PacketKind::Data)));
        assert!(!r.steady(&d, &header(3, 1, PacketKind::Data)), "beyond");
        assert_eq!(offer(&mut r, &mut d, 3, 2 * MS), DatagramOutcome::Held);
        assert_eq!(offer(&mut r, &mut d, 4, 3 * MS), DatagramOutcome::Held);
        assert!(r.recovering() && d.recovering);
        assert_eq!(d.state, RECOVERY_HOLDING);
        assert_eq!(r.next_timeout(), Some(3 * MS + 1), "gap_hold_us after 3");
        // Before the deadline (3 ms): filled, not declared.
        assert_eq!(offer(&mut r, &mut d, 2, 3 * MS), DatagramOutcome::Applied);
        let order: Vec<u64> = d.applied.iter().map(|a| a.0).collect();
        assert_eq!(order, [1, 2, 3, 4]);
        assert!(!r.recovering() && !d.recovering);
        assert_eq!(d.state, RECOVERY_LIVE);
        let c = &d.counters.recovery;
        assert_eq!((c.holes_opened, c.holes_filled, c.holes_lost), (1, 1, 0));
        assert_eq!(c.hole_time.count(), 1);
    }

    #[test]
    fn a_hole_is_declared_lost_right_after_its_deadline_at_the_deadline() {
        let (mut r, mut d) = driver(0);
        offer(&mut r, &mut d, 1, MS);
        offer(&mut r, &mut d, 3, 2 * MS);
        r.handle_timeout(&mut d, 3 * MS);
        assert!(r.recovering(), "not past the deadline yet");
        r.handle_timeout(&mut d, 3 * MS + 1);
        assert_eq!(
            d.applied,
            [(1, MS), (3, 3 * MS)],
            "processed at the deadline"
        );
        assert!(!r.recovering() && r.next_timeout().is_none());
        assert_eq!(d.counters.recovery.holes_lost, 1);
    }

    #[test]
    fn a_refill_service_is_asked_when_the_hole_is_due_and_answers_fill_it() {
        let (mut r, mut d) = driver(1);
        offer(&mut r, &mut d, 1, MS);
        offer(&mut r, &mut d, 4, 2 * MS);
        assert!(r.poll_request(&mut d.counters).is_none(), "not due yet");
        r.handle_timeout(&mut d, 3 * MS);
        let (server, request) = r.poll_request(&mut d.counters).expect("due");
        assert_eq!((server, request.sequence, request.count), (0, 2, 2));
        r.handle_timeout(&mut d, 3 * MS);
        assert_eq!(d.state, RECOVERY_REREQUESTING);
        let h = header(2, 2, PacketKind::Data);
        let out = r.on_answer(&mut d, b"answer", &h, 4 * MS);
        assert_eq!(out, DatagramOutcome::Applied);
        let order: Vec<u64> = d.applied.iter().map(|a| a.0).collect();
        assert_eq!(order, [1, 2, 4]);
        assert_eq!(d.counters.recovery.answers_received, 1);
        assert!(!r.recovering());
        // An answer of another session changes nothing.
        let mut other = header(5, 1, PacketKind::Data);
        other.channel.session = crate::wire::SessionId(*b"SESSION002");
        let out = r.on_answer(&mut d, b"x", &other, 5 * MS);
        assert_eq!(out, DatagramOutcome::Ignored);
        assert_eq!(d.counters.recovery.answers_wrong_session, 1);
    }

    /// Two channels' machines, each with its own rules, under one
    /// `gap_hold_packets = 2` (recovery.md: it counts the whole feed).
    fn two_channels() -> ((Recovery<MoldUdp64>, Rules), (Recovery<MoldUdp64>, Rules)) {
        let settings = FeedSettings {
            recovery: Settings {
                gap_hold_us: 100_000,
                gap_hold_packets: 2,
                ..Settings::default()
            },
            ..FeedSettings::default()
        };
        let make = || {
            let rules = Rules {
                channel: Channel::with_max_jump(settings.max_channel_jump),
                counters: FeedCounters::new(1),
                ..Rules::default()
            };
            (Recovery::new(&settings, MoldUdp64), rules)
        };
        (make(), make())
    }

    #[test]
    fn the_hold_limit_counts_the_other_channels_and_asks_for_room_without_a_hole() {
        let ((mut r1, mut d1), (mut r2, mut d2)) = two_channels();
        offer(&mut r1, &mut d1, 1, MS);
        offer(&mut r2, &mut d2, 1, MS);
        // Channel 1 holds two beyond its hole.
        assert_eq!(offer(&mut r1, &mut d1, 4, 2 * MS), DatagramOutcome::Held);
        assert_eq!(offer(&mut r1, &mut d1, 5, 3 * MS), DatagramOutcome::Held);
        assert_eq!((r1.held(), r1.hole_opened_at()), (2, Some(2 * MS)));
        // Channel 2 has no hole: one more would exceed the feed's limit, so
        // it holds nothing and asks for room (the feed's oldest hole).
        r2.set_others_held(r1.held());
        assert_eq!(offer(&mut r2, &mut d2, 3, 4 * MS), DatagramOutcome::Ignored);
        assert!(r2.take_needs_room());
        assert!(!r2.take_needs_room(), "cleared by the call");
        assert_eq!((r2.held(), r2.hole_opened_at()), (0, None));
        assert!(!d2.recovering);
        // The feed declares channel 1's hole, then offers again.
        r1.declare_oldest(&mut d1, 4 * MS);
        assert_eq!(d1.applied, [(1, MS), (4, 4 * MS), (5, 4 * MS)]);
        assert_eq!(d1.counters.recovery.holes_lost, 1);
        assert!(!r1.recovering() && !d1.recovering);
        r2.set_others_held(r1.held());
        assert_eq!(offer(&mut r2, &mut d2, 3, 4 * MS), DatagramOutcome::Held);
        assert!(!r2.take_needs_room());
        assert!(d2.recovering);
    }

    #[test]
    fn a_channel_with_a_hole_declares_its_own_first() {
        let ((mut r1, mut d1), _) = two_channels();
        offer(&mut r1, &mut d1, 1, MS);
        assert_eq!(offer(&mut r1, &mut d1, 3, 2 * MS), DatagramOutcome::Held);
        // Another channel holds one: room for one here, and this channel
        // has a hole, so its own earliest hole goes (recovery.md).
        r1.set_others_held(1);
        assert_eq!(offer(&mut r1, &mut d1, 5, 3 * MS), DatagramOutcome::Held);
        assert!(!r1.take_needs_room());
        assert_eq!(d1.applied, [(1, MS), (3, 3 * MS)]);
        assert_eq!(d1.counters.recovery.hold_overflows, 1);
        assert_eq!((r1.held(), r1.hole_opened_at()), (1, Some(3 * MS)));
    }

    #[test]
    fn r5_a_snapshots_hold_asks_for_nothing_and_waits_for_the_snapshot() {
        // R5 (GLIMPSE, MoldUDP64 re-requests): unchanged by R5c step 1.
        let settings = FeedSettings {
            recovery: Settings {
                gap_hold_us: 1_000,
                rerequest_servers: 1,
                snapshot: true,
                ..Settings::default()
            },
            ..FeedSettings::default()
        };
        let mut d = Rules {
            channel: Channel::with_max_jump(settings.max_channel_jump),
            counters: FeedCounters::new(1),
            ..Rules::default()
        };
        let mut r = Recovery::new(&settings, MoldUdp64);
        assert!(!r.image_refill);
        offer(&mut r, &mut d, 1, MS);
        r.image.want(MS);
        assert!(r.poll_snapshot_start(&mut d, MS));
        assert_eq!(offer(&mut r, &mut d, 2, 2 * MS), DatagramOutcome::Held);
        assert_eq!(offer(&mut r, &mut d, 5, 3 * MS), DatagramOutcome::Held);
        assert_eq!(r.next_timeout(), None, "no deadline, no request");
        r.handle_timeout(&mut d, 10_000 * MS);
        assert!(r.poll_request(&mut d.counters).is_none());
        assert!(r.recovering());
        assert_eq!(d.applied, [(1, MS)]);
        assert_eq!(d.counters.recovery.requests_sent, 0);
        // Failed: processed as without a snapshot, the hole asked for.
        r.snapshot_failed(&mut d, SnapshotFailure::Silence, 10_001 * MS);
        assert_eq!(d.applied, [(1, MS), (2, 10_001 * MS)]);
        assert!(r.poll_request(&mut d.counters).is_some());
    }

    mod gap_proxy {
        //! R4c: a refill service that answers on the feed's own lines.
        use super::*;
        use crate::venue::cboe_pitch::grp::GapRequestCodec;

        type Grp = Recovery<GapRequestCodec>;

        /// `gap_hold_us` 1 ms, 2 attempts of 20 ms, `max_count` as given.
        fn driver(max_count: u16) -> (Grp, Rules) {
            let settings = FeedSettings {
                recovery: Settings {
                    gap_hold_us: 1_000,
                    gap_proxy: Some(max_count),
                    rerequest_timeout_ms: 20,
                    rerequest_attempts: 2,
                    ..Settings::default()
                },
                ..FeedSettings::default()
            };
            let rules = Rules {
                channel: Channel::with_max_jump(settings.max_channel_jump),
                counters: FeedCounters::new(2),
                ..Rules::default()
            };
            (
                Recovery::new(&settings, GapRequestCodec::new(max_count)),
                rules,
            )
        }

        /// Line 0 is realtime, line 1 the gap line.
        fn offer(r: &mut Grp, d: &mut Rules, line: usize, seq: u64, count: u16, now: i64) {
            let h = header(seq, count, PacketKind::Data);
            r.on_datagram(d, Source::Line(line), &seq.to_be_bytes(), &h, now);
        }

        fn ask(r: &mut Grp, d: &mut Rules, now: i64) -> Option<(u32, u16)> {
            r.handle_timeout(d, now);
            r.poll_request(&mut d.counters)
                .map(|(_, q)| (q.sequence, q.count))
        }

        /// A hole of sequences 2-4 (opened at 2 ms), its request taken at
        /// 3 ms (`t_open + gap_hold_us`).
        fn hole(max_count: u16) -> (Grp, Rules) {
            let (mut r, mut d) = driver(max_count);
            offer(&mut r, &mut d, 0, 1, 1, MS);
            offer(&mut r, &mut d, 0, 5, 1, 2 * MS);
            assert_eq!(
                ask(&mut r, &mut d, 3 * MS - 1),
                None,
                "not before t_open + hold"
            );
            (r, d)
        }

        #[test]
        fn a_partial_fill_waits_for_the_rest_of_the_same_answer() {
            let (mut r, mut d) = hole(100);
            assert_eq!(ask(&mut r, &mut d, 3 * MS), Some((2, 3)));
            offer(&mut r, &mut d, 1, 2, 1, 4 * MS);
            assert_eq!(ask(&mut r, &mut d, 4 * MS), None, "R4c: not re-asked");
            assert!(r.outstanding().is_some());
            // Progress moved the deadline: max(3 ms, 4 ms) + 2 x 20 ms.
            assert_eq!(r.next_timeout(), Some(23 * MS), "the request's timeout");
            offer(&mut r, &mut d, 1, 3, 2, 5 * MS);
            assert!(!r.recovering());
            let order: Vec<u64> = d.applied.iter().map(|a| a.0).collect();
            assert_eq!(order, [1, 2, 3, 5]);
        }

        #[test]
        fn a_request_ends_when_all_it_asked_for_is_here() {
            let (mut r, mut d) = hole(2);
            assert_eq!(ask(&mut r, &mut d, 3 * MS), Some((2, 2)), "max_count");
            offer(&mut r, &mut d, 1, 2, 2, 4 * MS);
            assert!(r.outstanding().is_none(), "2 and 3 are here");
            assert_eq!(ask(&mut r, &mut d, 4 * MS), Some((4, 1)), "at once");
        }

        #[test]
        fn o_declares_the_hole_at_once_and_c_asks_again_for_less() {
            let (mut r, mut d) = hole(100);
            assert_eq!(ask(&mut r, &mut d, 3 * MS), Some((2, 3)));
            assert_eq!(
                r.on_response(&mut d, b'C', 4 * MS),
                RefillAction::AskAgain { count_limit: 50 }
            );
            assert_eq!(
                ask(&mut r, &mut d, 4 * MS),
                Some((2, 3)),
                "3 < 50: as before"
            );
            assert_eq!(
                r.on_response(&mut d, b'O', 5 * MS),
                RefillAction::DeclareLost
            );
            assert!(!r.recovering());
            assert_eq!(
                d.applied.last(),
                Some(&(5, 5 * MS)),
                "declared at the response"
            );
            assert_eq!(d.counters.recovery.holes_lost, 1);
        }

        #[test]
        fn u_asks_again_after_the_timeout() {
            let (mut r, mut d) = hole(100);
            ask(&mut r, &mut d, 3 * MS).unwrap();
            assert_eq!(r.on_response(&mut d, b'U', 4 * MS), RefillAction::Retry);
            assert!(r.outstanding().is_none());
            assert_eq!(ask(&mut r, &mut d, 24 * MS - 1), None);
            assert_eq!(ask(&mut r, &mut d, 24 * MS), Some((2, 3)));
        }

        #[test]
        fn s_pauses_requests_and_moves_the_deadline_past_the_pause() {
            let (mut r, mut d) = hole(100);
            ask(&mut r, &mut d, 3 * MS).unwrap();
            let until = 4 * MS + 1_000 * MS;
            assert_eq!(
                r.on_response(&mut d, b'S', 4 * MS),
                RefillAction::PauseFeed { until }
            );
            // The feed spreads the pause to its channels.
            let a = Availability {
                brief_until: until,
                ..r.availability()
            };
            r.set_availability(&mut d, a, 4 * MS);
            assert_eq!(ask(&mut r, &mut d, until - 1), None, "paused");
            assert!(r.recovering(), "the deadline is the pause's end + 40 ms");
            assert_eq!(ask(&mut r, &mut d, until), Some((2, 3)));
            r.handle_timeout(&mut d, until + 40 * MS + 1);
            assert!(!r.recovering(), "declared past it");
        }

        #[test]
        fn out_of_reach_holes_get_the_deadline_without_refill() {
            // Not logged in: declared right after t_open + gap_hold_us.
            let (mut r, mut d) = driver(100);
            let down = Availability {
                logged_in: false,
                ..r.availability()
            };
            r.set_availability(&mut d, down, 0);
            offer(&mut r, &mut d, 0, 1, 1, MS);
            offer(&mut r, &mut d, 0, 5, 1, 2 * MS);
            assert_eq!(ask(&mut r, &mut d, 3 * MS), None);
            r.handle_timeout(&mut d, 3 * MS + 1);
            assert!(!r.recovering());
            // M: those already past t_open + hold are declared at once.
            let (mut r, mut d) = hole(100);
            ask(&mut r, &mut d, 3 * MS).unwrap();
            let until = 10 * MS + 60_000 * MS;
            assert_eq!(
                r.on_response(&mut d, b'M', 10 * MS),
                RefillAction::OffFeed { until }
            );
            assert!(r.recovering(), "the feed spreads it");
            let a = Availability {
                off_until: until,
                ..r.availability()
            };
            r.set_availability(&mut d, a, 10 * MS);
            assert!(!r.recovering());
            assert_eq!(d.applied.last(), Some(&(5, 3 * MS)), "at its deadline");
        }

        #[test]
        fn i_stops_the_unit_until_its_next_session() {
            let (mut r, mut d) = hole(100);
            ask(&mut r, &mut d, 3 * MS).unwrap();
            assert_eq!(
                r.on_response(&mut d, b'I', 4 * MS),
                RefillAction::OffChannel
            );
            assert!(!r.recovering(), "past t_open + hold: declared");
            assert!(r.availability().unit_off);
            offer(&mut r, &mut d, 0, 7, 1, 5 * MS);
            assert_eq!(ask(&mut r, &mut d, 7 * MS), None, "not served");
            // A new session of the unit serves it again.
            let mut h = header(1, 1, PacketKind::Data);
            h.channel.session = crate::wire::SessionId(*b"SESSION002");
            r.on_datagram(&mut d, Source::Line(0), b"x", &h, 8 * MS);
            assert!(!r.availability().unit_off);
        }

        /// As `driver(100)`, the unit with a Spin Server: sequence 1
        /// applied at 1 ms, then an attempt started (`n0` = 2).
        fn spinning() -> (Grp, Rules) {
            let settings = FeedSettings {
                recovery: Settings {
                    gap_hold_us: 1_000,
                    gap_proxy: Some(100),
                    rerequest_timeout_ms: 20,
                    rerequest_attempts: 2,
                    snapshot: true,
                    ..Settings::default()
                },
                ..FeedSettings::default()
            };
            let mut d = Rules {
                channel: Channel::with_max_jump(settings.max_channel_jump),
                counters: FeedCounters::new(2),
                ..Rules::default()
            };
            let mut r = Recovery::new(&settings, GapRequestCodec::new(100));
            assert!(r.image_refill);
            offer(&mut r, &mut d, 0, 1, 1, MS);
            r.image.want(MS);
            assert!(r.poll_snapshot_start(&mut d, MS));
            (r, d)
        }

        #[test]
        fn r5c_holes_among_a_spins_held_datagrams_are_asked_for_and_never_declared() {
            let (mut r, mut d) = spinning();
            offer(&mut r, &mut d, 0, 2, 1, 2 * MS);
            assert_eq!(ask(&mut r, &mut d, 2 * MS), None, "no hole: 2 continues");
            // 3 and 4 are missing: the hole opens at 5's arrival.
            offer(&mut r, &mut d, 0, 5, 1, 3 * MS);
            assert_eq!(r.next_timeout(), Some(4 * MS), "t_open + gap_hold_us");
            assert_eq!(ask(&mut r, &mut d, 4 * MS - 1), None);
            assert_eq!(ask(&mut r, &mut d, 4 * MS), Some((3, 2)));
            // The gap line's answer folds into the spin's hold.
            offer(&mut r, &mut d, 1, 3, 1, 5 * MS);
            assert!(r.outstanding().is_some(), "4 is still on its way");
            offer(&mut r, &mut d, 1, 4, 1, 6 * MS);
            assert!(r.outstanding().is_none(), "all it asked for is held");
            assert_eq!(d.applied, [(1, MS)], "nothing applied during the spin");
            // Another hole (6, 7), never answered: asked again after each
            // timeout while R2 would keep it open, then no more, and it is
            // not declared.
            offer(&mut r, &mut d, 0, 8, 1, 7 * MS);
            assert_eq!(ask(&mut r, &mut d, 8 * MS), Some((6, 2)));
            assert_eq!(ask(&mut r, &mut d, 28 * MS), Some((6, 2)), "timed out");
            // Deadline: max(8 ms, 7 ms) + 2 x 20 ms; asked through it, as
            // without a spin.
            assert_eq!(r.next_timeout(), Some(48 * MS));
            assert_eq!(ask(&mut r, &mut d, 48 * MS), Some((6, 2)));
            assert_eq!(r.next_timeout(), Some(48 * MS + 1));
            assert_eq!(ask(&mut r, &mut d, 48 * MS + 1), None);
            r.handle_timeout(&mut d, 10_000 * MS);
            assert_eq!(ask(&mut r, &mut d, 10_000 * MS), None);
            assert_eq!(r.next_timeout(), None);
            assert!(r.recovering(), "R3: still recovering");
            assert_eq!(d.counters.recovery.holes_lost, 0);
            assert_eq!(d.applied, [(1, MS)]);
            assert_eq!(d.counters.recovery.requests_sent, 4);
            // Spin Finished with S = 6: 2-5 are skipped, the hole (7) is
            // asked for from its arrival (R5c step 3).
            d.channel.set_next(7);
            let end = 10_001 * MS;
            r.snapshot_applied(&mut d, 7, end);
            assert!(r.recovering());
            assert_eq!(ask(&mut r, &mut d, end + MS), Some((7, 1)));
            offer(&mut r, &mut d, 1, 7, 1, end + 2 * MS);
            assert_eq!(d.applied, [(1, MS), (7, end + 2 * MS), (8, end + 2 * MS)]);
            assert!(!r.recovering());
        }

        #[test]
        fn r5c_an_out_of_range_during_a_spin_declares_nothing_and_asks_for_the_next_hole() {
            let (mut r, mut d) = spinning();
            offer(&mut r, &mut d, 0, 3, 1, 2 * MS);
            offer(&mut r, &mut d, 0, 6, 1, 2 * MS);
            assert_eq!(ask(&mut r, &mut d, 3 * MS), Some((2, 1)));
            assert_eq!(
                r.on_response(&mut d, b'O', 4 * MS),
                RefillAction::DeclareLost
            );
            assert_eq!(d.counters.recovery.holes_lost, 0, "not during the spin");
            assert!(r.recovering());
            assert_eq!(ask(&mut r, &mut d, 4 * MS), Some((4, 2)), "the next hole");
            // The spin fails: processed as without one (R1-R2), the hole
            // at 2 open since the earliest arrival held.
            r.snapshot_failed(&mut d, SnapshotFailure::Silence, 5 * MS);
            assert_eq!(d.applied, [(1, MS)]);
            assert_eq!(r.hole_opened_at(), Some(2 * MS));
        }
    }
}
