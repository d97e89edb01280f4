//! A feed's recovery machines, one [`Recovery`] per channel (recovery.md
//! "Architecture"; `cboe-pitch`: one per unit), and what they share:
//! `gap_hold_packets` counted over the whole feed, the refill service's
//! reach, its count limit and its 100 requests a second (R4c), and the
//! image attempts of the units (R5c). Sans-I/O: `now` is passed in, and
//! the channel and symbol rules are reached through [`UnitRules`], which
//! the feed (`engine`) implements, so these machines need no `Feed`.
//!
//! One channel is selected at a time: its machines are `Units::current`,
//! its channel rules the feed's. A datagram, a response or an image of
//! another channel selects that channel first ([`Driving::select`]).

use super::driver::{Deliver, Recovery};
use super::image::{SnapshotFailure, SnapshotPhase};
use super::refill::{Availability, RATE_LIMIT};
use super::store::Source;
use crate::feed::outcome::DatagramOutcome;
use crate::feed::settings::FeedSettings;
use crate::venue::codec::{RefillAction, RefillCodec};
use crate::venue::Header;

/// What the units' machines need of the feed's rules beyond [`Deliver`].
pub trait UnitRules: Deliver {
    /// Venues of several channels: channel `unit` becomes the selected one
    /// (its channel rules, its part of the feed view, the venue's state of
    /// it).
    fn select_unit(&mut self, unit: u8);
    /// R5: validates an image's messages (`blocks`) whole and, only if
    /// they are valid, applies them to the selected channel up to `next`
    /// at `now`. Returns whether they were valid (nothing applied if not).
    fn apply_image(&mut self, next: u64, blocks: &[u8], now: i64) -> bool;
}

/// The recovery machines of every channel of a feed.
#[derive(Debug)]
pub struct Units<C: RefillCodec> {
    /// The settings each channel's machines are made with.
    settings: FeedSettings,
    /// The refill codec each channel's machines start with.
    codec: C,
    /// The selected channel, and its machines.
    cur: u8,
    recovery: Recovery<C>,
    /// A venue of several channels: the other channels' machines by
    /// channel id, made when the channel is first selected (recovery.md:
    /// R1-R3 apply to each unit). Empty for one channel.
    parked: Vec<Option<Recovery<C>>>,
    /// Datagrams the parked machines hold (recovery.md:
    /// `gap_hold_packets` counts the whole feed).
    parked_held: usize,
    /// R4c: what keeps the feed's refill service out of reach (its
    /// `unit_off` is each channel's own) and its count limit, given to
    /// each channel's machines when they are made.
    reach: Availability,
    /// R4c: the status (`M` or `D`) behind `reach.off_until`.
    off_status: u8,
    count_limit: Option<u64>,
    /// R4c: the feed's last `RATE_LIMIT` request send times (a ring): at
    /// most that many leave the feed in any second, whichever units.
    sent: [i64; RATE_LIMIT],
    sent_at: usize,
}

impl<C: RefillCodec + Clone> Units<C> {
    /// The machines of a feed of `channels` channels (channel 0 selected),
    /// each made with `settings` and `codec`.
    pub fn new(settings: &FeedSettings, codec: C, channels: usize) -> Units<C> {
        let mut parked = Vec::new();
        if channels > 1 {
            parked.resize_with(channels, || None);
        }
        Units {
            settings: *settings,
            recovery: Recovery::new(settings, codec.clone()),
            codec,
            cur: 0,
            parked,
            parked_held: 0,
            reach: Availability::default(),
            off_status: b'M',
            count_limit: None,
            sent: [i64::MIN; RATE_LIMIT],
            sent_at: 0,
        }
    }

    /// Channel `ch`'s machines, made when it is first selected: the
    /// feed's refill codec, reach and count limit, and (R5c) the unit's
    /// own image server, if it has one.
    fn new_recovery(&self, ch: u8) -> Recovery<C> {
        let s = &self.settings;
        let mut r = Recovery::new(s, self.codec.clone());
        r.set_image_enabled(s.recovery.images_on(ch));
        if let Some(limit) = self.count_limit {
            r.set_count_limit(limit);
        }
        r.set_reach(self.reach);
        r
    }
}

impl<C: RefillCodec> Units<C> {
    /// The selected channel's machines.
    #[inline]
    pub fn current(&self) -> &Recovery<C> {
        &self.recovery
    }

    #[inline]
    pub fn current_mut(&mut self) -> &mut Recovery<C> {
        &mut self.recovery
    }

    /// The selected channel.
    #[inline]
    pub fn selected(&self) -> u8 {
        self.cur
    }

    /// Whether another channel holds datagrams now.
    #[inline]
    pub fn others_hold(&self) -> bool {
        self.parked_held > 0
    }

    /// Channel `ch`'s machines, if it has been selected.
    pub fn of(&self, ch: u8) -> Option<&Recovery<C>> {
        if ch == self.cur {
            Some(&self.recovery)
        } else {
            self.parked.get(ch as usize).and_then(|r| r.as_ref())
        }
    }

    /// Every channel's machines made so far, the selected one last.
    fn all(&self) -> impl Iterator<Item = &Recovery<C>> {
        self.parked.iter().flatten().chain(Some(&self.recovery))
    }

    /// These machines driving the feed's rules `rules`.
    #[inline]
    pub fn drive<'a, D: UnitRules>(&'a mut self, rules: &'a mut D) -> Driving<'a, C, D> {
        Driving { units: self, rules }
    }

    /// When the machines next have something to do (Unix ns): a hole's
    /// deadline passing or a request falling due, on any channel. `None`:
    /// nothing pending.
    pub fn next_timeout(&self) -> Option<i64> {
        let parked = self.parked.iter().flatten();
        parked
            .filter_map(|r| r.next_timeout())
            .chain(self.recovery.next_timeout())
            .min()
    }

    /// Whether a hole is open now on any channel (R3: the check answers
    /// `recovering`).
    pub fn recovering(&self) -> bool {
        self.all().any(|r| r.recovering())
    }

    /// The held datagrams now, the most held at once and the arena's peak
    /// size so far (bytes), summed over the channels.
    pub fn hold_usage(&self) -> (usize, usize, usize) {
        let parked = self.parked.iter().flatten();
        parked
            .map(|r| r.hold_usage())
            .fold(self.recovery.hold_usage(), |a, b| {
                (a.0 + b.0, a.1 + b.1, a.2 + b.2)
            })
    }

    /// R5c: where unit `unit`'s image stands, and its last failure
    /// (`Idle` for a unit not heard yet).
    pub fn image_phase(&self, unit: u8) -> (SnapshotPhase, Option<SnapshotFailure>) {
        if unit == self.cur || self.parked.is_empty() {
            return self.recovery.snapshot_phase();
        }
        self.parked
            .get(unit as usize)
            .and_then(|r| r.as_ref())
            .map_or((SnapshotPhase::Idle, None), |r| r.snapshot_phase())
    }

    /// R4c: the most messages one request asks for now (`grp.max_count`,
    /// halved by each `C`); `None` without a Gap Request Proxy.
    pub fn refill_count_limit(&self) -> Option<u64> {
        let max = self.settings.recovery.gap_proxy?;
        Some(self.count_limit.unwrap_or(max as u64))
    }

    /// R4c, for the status listing: whether the feed's Gap Request Proxy
    /// connection is logged in, its count limit, and the pause a refusal
    /// (`S`, `M`, `D`) imposes at `now`, if any; `None` without a Gap
    /// Request Proxy.
    pub fn refill_status(&self, now: i64) -> Option<RefillStatus> {
        let count_limit = self.refill_count_limit()?;
        let a = self.reach;
        let pause = if now < a.off_until {
            Some((self.off_status, a.off_until))
        } else if now < a.brief_until {
            Some((b'S', a.brief_until))
        } else {
            None
        };
        Some(RefillStatus {
            logged_in: a.logged_in,
            count_limit,
            pause,
        })
    }

    /// R4c `I`: whether the Gap Request Proxy refused to serve unit `unit`
    /// for the rest of its session.
    pub fn refill_unit_off(&self, unit: u8) -> bool {
        let r = if unit == self.cur || self.parked.is_empty() {
            Some(&self.recovery)
        } else {
            self.parked.get(unit as usize).and_then(|r| r.as_ref())
        };
        r.is_some_and(|r| r.availability().unit_off)
    }
}

/// R4c: where a feed's Gap Request Proxy stands (`Units::refill_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefillStatus {
    /// The connection is logged in (requests may leave).
    pub logged_in: bool,
    /// The most messages one Gap Request asks for now (`grp.max_count`,
    /// halved by each `C`).
    pub count_limit: u64,
    /// The refusal (`S`, `M` or `D`) that holds every Gap Request back,
    /// and until when (Unix ns).
    pub pause: Option<(u8, i64)>,
}

/// A feed's recovery machines ([`Units`]) and its rules, together: what
/// the feed and its I/O shells call to drive recovery (`Feed::units`).
pub struct Driving<'a, C: RefillCodec, D> {
    units: &'a mut Units<C>,
    rules: &'a mut D,
}

impl<C: RefillCodec, D> std::ops::Deref for Driving<'_, C, D> {
    type Target = Units<C>;

    fn deref(&self) -> &Units<C> {
        self.units
    }
}

impl<C: RefillCodec + Clone, D: UnitRules> Driving<'_, C, D> {
    /// Venues of several channels: channel `ch` becomes the selected one
    /// (its machines, and through `UnitRules::select_unit` its rules).
    /// Nothing for the selected channel or one the feed does not have.
    pub fn select(&mut self, ch: u8) {
        let u = &mut *self.units;
        let old = u.cur as usize;
        let new = ch as usize;
        if old == new || new >= u.parked.len() {
            return;
        }
        let incoming = match u.parked[new].take() {
            Some(r) => r,
            None => u.new_recovery(ch),
        };
        // R5c step 1: what an image attempt holds counts only against its
        // own bounds.
        u.parked_held += u.recovery.held_against_limit();
        u.parked_held = u.parked_held.saturating_sub(incoming.held_against_limit());
        let outgoing = std::mem::replace(&mut u.recovery, incoming);
        u.parked[old] = Some(outgoing);
        u.recovery.set_others_held(u.parked_held);
        u.cur = ch;
        self.rules.select_unit(ch);
    }

    /// recovery.md: holding one more datagram of the selected channel,
    /// which has no hole, would exceed `gap_hold_packets`: the feed's
    /// oldest hole (another channel's) is declared lost at once. Returns
    /// whether there was one.
    fn declare_oldest_elsewhere(&mut self, now: i64) -> bool {
        let here = self.units.cur;
        let oldest = self
            .units
            .parked
            .iter()
            .enumerate()
            .filter_map(|(ch, r)| Some((r.as_ref()?.hole_opened_at()?, ch)))
            .min();
        let Some((_, ch)) = oldest else {
            return false;
        };
        self.select(ch as u8);
        self.rules.counters().recovery.hold_overflows += 1;
        self.units.recovery.declare_oldest(self.rules, now);
        self.select(here);
        true
    }

    /// [`Recovery::on_datagram`] of the selected channel, the feed's hold
    /// limit counted over every channel.
    pub fn on_datagram(
        &mut self,
        source: Source,
        datagram: &[u8],
        header: &Header,
        now: i64,
    ) -> DatagramOutcome {
        loop {
            let out = self
                .units
                .recovery
                .on_datagram(self.rules, source, datagram, header, now);
            if !self.units.recovery.take_needs_room() || !self.declare_oldest_elsewhere(now) {
                return out;
            }
        }
    }

    /// R2/R4: time passes to `now`: the holes of every channel whose
    /// deadline is before `now` are declared lost, requests that fall due
    /// are queued.
    pub fn handle_timeout(&mut self, now: i64) {
        self.units.recovery.handle_timeout(self.rules, now);
        self.expire_parked(now);
    }

    /// Venues of several channels: the parked channels' holes whose
    /// deadline passed before `now` are declared (each channel's holes
    /// have their own deadlines, recovery.md).
    pub fn expire_parked(&mut self, now: i64) {
        for ch in 0..self.units.parked.len() {
            let due = self.units.parked[ch]
                .as_ref()
                .and_then(|r| r.next_timeout())
                .is_some_and(|t| t <= now);
            if due {
                self.select(ch as u8);
                self.units.recovery.handle_timeout(self.rules, now);
            }
        }
    }

    /// R5: the selected channel's image arrived whole: `next` its end,
    /// `blocks` its messages, `now` the arrival of its end. The end is
    /// checked, the messages validated whole and applied
    /// (`UnitRules::apply_image`), then what was held continues; or the
    /// attempt fails and nothing of it is applied.
    pub fn on_snapshot(
        &mut self,
        next: u64,
        blocks: &[u8],
        now: i64,
    ) -> Result<(), SnapshotFailure> {
        let (r, d) = (&mut self.units.recovery, &mut *self.rules);
        r.check_end(d, next, now)?;
        // Validated whole before anything changes (R5: nothing of a failed
        // attempt is applied).
        if !d.apply_image(next, blocks, now) {
            let why = SnapshotFailure::Malformed;
            r.snapshot_failed(d, why, now);
            return Err(why);
        }
        r.snapshot_applied(d, next, now);
        Ok(())
    }

    /// R5/R5c for a venue of several channels: a channel (a unit) whose
    /// image attempt starts now, selected or parked, and its `next` then
    /// (`n0`, the first message it has not applied). The I/O shell then
    /// connects to that unit's server; until `on_image` or
    /// `on_image_failed`, the unit's datagrams are held. One a call: R5c's
    /// attempts of different units are independent and may run at the
    /// same time, so the shell calls again until `None` to start every
    /// unit that is due.
    pub fn poll_image_start(&mut self, now: i64) -> Option<(u8, u64)> {
        self.poll_image_start_except(now, |_| false)
    }

    /// [`Driving::poll_image_start`], passing over the units for which
    /// `busy` says the I/O shell still runs an attempt (one the core
    /// already ended, by a session change): they stay wanted, and start
    /// once the shell is free for them.
    pub fn poll_image_start_except(
        &mut self,
        now: i64,
        busy: impl Fn(u8) -> bool,
    ) -> Option<(u8, u64)> {
        // The unit that has waited longest goes first (then the lowest id).
        let due = |r: &Recovery<C>, ch: u8| match r.snapshot_phase().0 {
            SnapshotPhase::Wanted { not_before } if now >= not_before && !busy(ch) => {
                Some(not_before)
            }
            _ => None,
        };
        let u = &*self.units;
        let here = due(&u.recovery, u.cur).map(|t| (t, u.cur));
        let parked = u
            .parked
            .iter()
            .enumerate()
            .filter_map(|(ch, r)| Some((due(r.as_ref()?, ch as u8)?, ch as u8)));
        let (_, ch) = parked.chain(here).min()?;
        self.select(ch);
        if !self.units.recovery.poll_snapshot_start(self.rules, now) {
            return None;
        }
        Some((ch, self.rules.channel().next_sequence()))
    }

    /// R5c: unit `unit`'s attempt failed: nothing of it is applied, the
    /// unit's held datagrams are processed as without a spin (R1-R2) and
    /// its next attempt waits for its pace.
    pub fn on_image_failed(&mut self, unit: u8, why: SnapshotFailure, now: i64) {
        self.select(unit);
        if self.units.cur == unit {
            self.units.recovery.snapshot_failed(self.rules, why, now);
        }
        self.image_ended(unit, now);
    }

    /// R5c: unit `unit`'s attempt got Login Response `B` (session in use):
    /// as `on_image_failed`, but it does not count for the unit's pace; the
    /// unit tries again when another attempt of the feed ends, or one
    /// backoff after this attempt started.
    pub fn on_image_session_in_use(&mut self, unit: u8, now: i64) {
        self.select(unit);
        if self.units.cur == unit {
            self.units.recovery.snapshot_session_in_use(self.rules, now);
        }
    }

    /// R5c: unit `unit`'s attempt ended at `now`: units refused with
    /// session in use may try again.
    fn image_ended(&mut self, unit: u8, now: i64) {
        let u = &mut *self.units;
        if u.cur != unit {
            u.recovery.another_image_ended(now);
        }
        for (ch, r) in u.parked.iter_mut().enumerate() {
            if ch != unit as usize {
                if let Some(r) = r {
                    r.another_image_ended(now);
                }
            }
        }
    }

    /// R5c "On Spin Finished": unit `unit`'s spin arrived whole: `next` is
    /// `S + 1`, `blocks` the spin's messages (each a u16 big-endian length
    /// then the PITCH message, Length byte first), `now` the arrival of
    /// Spin Finished. The end is checked (an implausible `S`, a session
    /// change), the messages validated whole, then applied to that unit
    /// only (its books, trading states, quotes, causes; `next = S + 1`,
    /// held datagrams continue); or the attempt fails as
    /// `on_image_failed` and nothing is applied.
    pub fn on_image(
        &mut self,
        unit: u8,
        next: u64,
        blocks: &[u8],
        now: i64,
    ) -> Result<(), SnapshotFailure> {
        self.select(unit);
        if self.units.cur != unit {
            return Err(SnapshotFailure::SessionChanged);
        }
        let out = self.on_snapshot(next, blocks, now);
        self.image_ended(unit, now);
        out
    }

    /// R4c: the request to send now on the feed's Gap Request Proxy
    /// connection, of whichever channel has one due: at most one
    /// outstanding per unit, at most `RATE_LIMIT` from the feed in any
    /// second, and while requests wait for that allowance the hole with
    /// the earliest deadline goes first.
    pub fn poll_refill(&mut self, now: i64) -> Option<(u8, C::Request)> {
        let u = &mut *self.units;
        if u.sent[u.sent_at].saturating_add(1_000_000_000) > now {
            return None;
        }
        let here = u.cur;
        let mut best = u.recovery.queued_deadline().map(|d| (d, here));
        for (ch, r) in u.parked.iter().enumerate() {
            if let Some(d) = r.as_ref().and_then(|r| r.queued_deadline()) {
                if best.is_none_or(|(b, _)| d < b) {
                    best = Some((d, ch as u8));
                }
            }
        }
        let (_, ch) = best?;
        let r = if ch == here {
            &mut u.recovery
        } else {
            u.parked[ch as usize].as_mut()?
        };
        let (_, request) = r.poll_request(self.rules.counters())?;
        u.sent[u.sent_at] = now;
        u.sent_at = (u.sent_at + 1) % RATE_LIMIT;
        Some((ch, request))
    }

    /// R4c: the refill service's connection logged in (`true`) or is down:
    /// while down, no request leaves, the outstanding ones are void and
    /// every hole gets R2's deadline without re-requests (those past it
    /// are declared at `now`). A feed starts as if logged in (replay).
    pub fn set_refill_logged_in(&mut self, logged_in: bool, now: i64) {
        self.units.reach.logged_in = logged_in;
        self.spread_reach(now);
    }

    /// R4c: the response `status` to `channel`'s outstanding `request`
    /// (the I/O shell read both from the service's response) at `now`,
    /// counted by status (R6, the codec's `status_slot`). A response that
    /// echoes no outstanding request is dropped and counted (`false`).
    pub fn on_refill_response(
        &mut self,
        channel: u8,
        request: C::Request,
        status: u8,
        now: i64,
    ) -> bool {
        let slot = self.units.codec.status_slot(status);
        let c = &mut self.rules.counters().recovery;
        if let Some(slot) = slot {
            c.responses_by_status[slot] += 1;
        }
        let known = (channel as usize) < self.units.parked.len() || channel == self.units.cur;
        if !known {
            c.responses_dropped += 1;
            return false;
        }
        self.select(channel);
        if self.units.recovery.outstanding() != Some(request) {
            self.rules.counters().recovery.responses_dropped += 1;
            return false;
        }
        match self.units.recovery.on_response(self.rules, status, now) {
            RefillAction::AskAgain { count_limit } => {
                // R4c `C`: the count limit is the feed's.
                self.units.count_limit = Some(count_limit);
                for r in self.units.parked.iter_mut().flatten() {
                    r.set_count_limit(count_limit);
                }
            }
            RefillAction::PauseFeed { until } => {
                self.units.reach.brief_until = until;
                self.spread_reach(now);
            }
            RefillAction::OffFeed { until } => {
                self.units.reach.off_until = until;
                self.units.off_status = status;
                self.spread_reach(now);
            }
            _ => {}
        }
        true
    }

    /// The feed's refill reach given to every channel's machines, then
    /// holes past their new deadlines declared at `now`.
    fn spread_reach(&mut self, now: i64) {
        let feed = self.units.reach;
        let reach = |own: Availability| Availability {
            unit_off: own.unit_off,
            ..feed
        };
        let a = reach(self.units.recovery.availability());
        self.units.recovery.set_availability(self.rules, a, now);
        for ch in 0..self.units.parked.len() {
            if self.units.parked[ch].is_some() {
                self.select(ch as u8);
                let a = reach(self.units.recovery.availability());
                self.units.recovery.set_availability(self.rules, a, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::conflict_tests::header;
    use super::*;
    use crate::feed::channel::{Channel, PacketAction};
    use crate::feed::counters::FeedCounters;
    use crate::feed::settings::Recovery as Settings;
    use crate::venue::cboe_pitch::grp::GapRequestCodec;
    use crate::wire::PacketKind;

    const MS: i64 = 1_000_000;
    const S: i64 = 1_000 * MS;

    /// The channel rules of several channels alone, one selected,
    /// recording what reaches the symbol rules.
    struct Rules {
        channels: Vec<Channel>,
        cur: usize,
        counters: FeedCounters,
        state: u8,
        /// (channel, sequence, `now`) of each data packet applied.
        applied: Vec<(usize, u64, i64)>,
        /// R5c: an image the rules want (a late join), taken once.
        want_image: Option<i64>,
    }

    impl Deliver for Rules {
        fn process(&mut self, _: Source, _: &[u8], header: &Header, now: i64) -> DatagramOutcome {
            match self.channels[self.cur].on_packet(&header.channel).0 {
                PacketAction::Duplicate => DatagramOutcome::Duplicate,
                PacketAction::Data { .. } => {
                    let seq = header.channel.sequence;
                    self.applied.push((self.cur, seq, now));
                    DatagramOutcome::Applied
                }
                _ => DatagramOutcome::Applied,
            }
        }
        fn take_image_wanted(&mut self) -> Option<i64> {
            self.want_image.take()
        }
        fn channel(&self) -> &Channel {
            &self.channels[self.cur]
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
        fn set_recovering(&mut self, _: bool) {}
    }

    impl UnitRules for Rules {
        fn select_unit(&mut self, unit: u8) {
            self.cur = unit as usize;
        }
        fn apply_image(&mut self, _: u64, _: &[u8], _: i64) -> bool {
            false
        }
    }

    /// `channels` channels behind a Gap Request Proxy (`max_count` 100,
    /// `gap_hold_us` 1 ms), the feed holding at most `hold_packets`.
    fn units(channels: usize, hold_packets: usize) -> (Units<GapRequestCodec>, Rules) {
        let settings = FeedSettings {
            recovery: Settings {
                gap_hold_us: 1_000,
                gap_hold_packets: hold_packets,
                gap_proxy: Some(100),
                rerequest_timeout_ms: 20,
                rerequest_attempts: 2,
                ..Settings::default()
            },
            ..FeedSettings::default()
        };
        let rules = Rules {
            channels: (0..channels)
                .map(|_| Channel::with_max_jump(settings.max_channel_jump))
                .collect(),
            cur: 0,
            counters: FeedCounters::new(1),
            state: 0,
            applied: Vec::new(),
            want_image: None,
        };
        let codec = GapRequestCodec::new(100);
        (Units::new(&settings, codec, channels), rules)
    }

    /// Data packet `seq` of channel `ch` at `now`.
    fn offer(
        u: &mut Units<GapRequestCodec>,
        d: &mut Rules,
        ch: u8,
        seq: u64,
        now: i64,
    ) -> DatagramOutcome {
        let mut units = u.drive(d);
        units.select(ch);
        let h = header(seq, 1, PacketKind::Data);
        units.on_datagram(Source::Line(0), &seq.to_be_bytes(), &h, now)
    }

    #[test]
    fn each_channel_has_its_own_machines_and_the_rules_follow_the_selection() {
        let (mut u, mut d) = units(3, 100);
        offer(&mut u, &mut d, 2, 1, MS);
        assert_eq!(offer(&mut u, &mut d, 2, 3, 2 * MS), DatagramOutcome::Held);
        assert_eq!(
            offer(&mut u, &mut d, 1, 1, 3 * MS),
            DatagramOutcome::Applied
        );
        assert_eq!((u.selected(), d.cur), (1, 1));
        assert!(u.recovering(), "channel 2's hole, parked");
        assert!(!u.current().recovering());
        assert!(u.of(2).is_some_and(|r| r.recovering()));
        assert!(u.of(0).is_some(), "made with the feed");
        assert!(u.of(5).is_none(), "no channel 5");
        assert_eq!(u.hold_usage().0, 1);
        assert_eq!(
            u.next_timeout(),
            Some(3 * MS),
            "channel 2's request falls due"
        );
        u.drive(&mut d).handle_timeout(3 * MS);
        assert_eq!(u.selected(), 2, "handled on its own channel");
        // R2: without an answer, declared at its deadline on channel 2.
        for _ in 0..10 {
            let Some(t) = u.next_timeout() else { break };
            u.drive(&mut d).handle_timeout(t);
        }
        assert!(!u.recovering());
        assert_eq!(d.applied.last().map(|a| (a.0, a.1)), Some((2, 3)));
    }

    #[test]
    fn the_hold_limit_counts_every_channel_and_the_oldest_hole_makes_room() {
        let (mut u, mut d) = units(3, 2);
        offer(&mut u, &mut d, 1, 1, MS);
        offer(&mut u, &mut d, 2, 1, MS);
        assert_eq!(offer(&mut u, &mut d, 1, 3, 2 * MS), DatagramOutcome::Held);
        assert_eq!(offer(&mut u, &mut d, 1, 4, 2 * MS), DatagramOutcome::Held);
        // Channel 2 has no hole and the feed holds 2: channel 1's hole is
        // declared at once, then channel 2 holds its datagram.
        assert_eq!(offer(&mut u, &mut d, 2, 3, 2 * MS), DatagramOutcome::Held);
        assert_eq!(d.counters.recovery.hold_overflows, 1);
        let ch1: Vec<u64> = d.applied.iter().filter(|a| a.0 == 1).map(|a| a.1).collect();
        assert_eq!(ch1, [1, 3, 4]);
        assert_eq!(u.selected(), 2, "the datagram's channel again");
        assert!(u.current().recovering() && !u.of(1).unwrap().recovering());
    }

    /// Channel `ch` with a hole of `missing` messages from sequence 2,
    /// opened at `t`.
    fn hole(u: &mut Units<GapRequestCodec>, d: &mut Rules, ch: u8, missing: u64, t: i64) {
        offer(u, d, ch, 1, t);
        assert_eq!(offer(u, d, ch, 2 + missing, t), DatagramOutcome::Held);
    }

    #[test]
    fn the_earliest_deadline_asks_first_and_the_feed_sends_100_a_second() {
        let (mut u, mut d) = units(102, 1_000);
        for ch in (0..101u8).rev() {
            hole(&mut u, &mut d, ch, 1, MS + i64::from(100 - ch));
        }
        // Every request falls due (`gap_hold_us` after its hole opened).
        let t = 2 * MS + 100;
        u.drive(&mut d).handle_timeout(t);
        let mut asked = Vec::new();
        while let Some((ch, r)) = u.drive(&mut d).poll_refill(t) {
            assert_eq!((r.sequence, r.count), (2, 1));
            asked.push(ch);
        }
        // Channel 100's hole opened first; 100 requests in this second.
        let want: Vec<u8> = (1..101u8).rev().collect();
        assert_eq!(asked, want);
        assert_eq!(u.drive(&mut d).poll_refill(t + S - 1), None);
        assert_eq!(u.drive(&mut d).poll_refill(t + S).map(|a| a.0), Some(0));
    }

    #[test]
    fn a_count_refusal_sets_the_feeds_limit_for_every_unit() {
        let (mut u, mut d) = units(3, 100);
        assert_eq!(u.refill_count_limit(), Some(100));
        hole(&mut u, &mut d, 1, 60, MS);
        let mut units = u.drive(&mut d);
        units.handle_timeout(2 * MS);
        let (ch, request) = units.poll_refill(2 * MS).unwrap();
        assert_eq!((ch, request.count), (1, 60));
        assert!(units.on_refill_response(1, request, b'A', 3 * MS));
        // Responses that echo no outstanding request are dropped.
        assert!(!units.on_refill_response(2, request, b'C', 4 * MS));
        assert!(
            !units.on_refill_response(9, request, b'A', 4 * MS),
            "no unit 9"
        );
        assert_eq!(units.refill_count_limit(), Some(100));
        assert!(units.on_refill_response(1, request, b'C', 4 * MS));
        assert_eq!(units.refill_count_limit(), Some(50));
        // R4c `C`: asked again at once, for less.
        let again = units.poll_refill(4 * MS).map(|(ch, r)| (ch, r.count));
        assert_eq!(again, Some((1, 50)));
        // Another unit's next request is within the feed's limit.
        hole(&mut u, &mut d, 2, 60, 5 * MS);
        let mut units = u.drive(&mut d);
        units.handle_timeout(6 * MS);
        let next = units.poll_refill(6 * MS).map(|(ch, r)| (ch, r.count));
        assert_eq!(next, Some((2, 50)));
        let r = &d.counters.recovery;
        assert_eq!(
            r.responses_by_status[0], 2,
            "A, counted before the echo check"
        );
        assert_eq!(r.responses_by_status[2], 2, "C");
        assert_eq!(r.responses_dropped, 2);
    }

    /// `units(channels, 100)` where every channel has an image server
    /// (R5c: a Spin Server per unit).
    fn spun(channels: usize) -> (Units<GapRequestCodec>, Rules) {
        spun_holding(channels, 100)
    }

    /// `spun(channels)`, the feed holding at most `hold_packets`.
    fn spun_holding(channels: usize, hold_packets: usize) -> (Units<GapRequestCodec>, Rules) {
        let (u, d) = units(channels, hold_packets);
        let mut settings = u.settings;
        settings.recovery.spin_units = (0..channels as u8).collect();
        (
            Units::new(&settings, GapRequestCodec::new(100), channels),
            d,
        )
    }

    /// Channel `ch` joins at `seq` at `now` and its rules want an image.
    fn join_wanting(u: &mut Units<GapRequestCodec>, d: &mut Rules, ch: u8, seq: u64, now: i64) {
        let mut units = u.drive(d);
        units.select(ch);
        let h = header(seq, 1, PacketKind::Data);
        units.on_datagram(Source::Line(0), &seq.to_be_bytes(), &h, now);
        d.want_image = Some(now);
        u.recovery.take_image_wanted(d);
    }

    #[test]
    fn attempts_of_different_units_run_at_the_same_time() {
        // R5c: attempts of different units are independent.
        let (mut u, mut d) = spun(3);
        join_wanting(&mut u, &mut d, 1, 100, MS);
        join_wanting(&mut u, &mut d, 2, 500, 2 * MS);
        let t = 3 * MS;
        let mut units = u.drive(&mut d);
        assert_eq!(units.poll_image_start(t), Some((1, 101)), "waited longest");
        assert_eq!(
            units.poll_image_start(t),
            Some((2, 501)),
            "while unit 1's runs"
        );
        assert_eq!(units.poll_image_start(t), None, "each once");
        let running = |u: &Units<GapRequestCodec>, ch| {
            matches!(u.image_phase(ch).0, SnapshotPhase::Running { .. })
        };
        assert!(running(&u, 1) && running(&u, 2));
        // Each unit holds its own datagrams meanwhile.
        assert_eq!(offer(&mut u, &mut d, 1, 101, 4 * MS), DatagramOutcome::Held);
        assert_eq!(offer(&mut u, &mut d, 2, 501, 4 * MS), DatagramOutcome::Held);
        // Unit 2's ends first; unit 1's still runs, and unit 2 continues.
        let mut units = u.drive(&mut d);
        units.on_image_failed(2, SnapshotFailure::Refused, 5 * MS);
        assert!(running(&u, 1) && !running(&u, 2));
        assert_eq!(d.applied.last().map(|a| (a.0, a.1)), Some((2, 501)));
        assert!(u.of(1).is_some_and(|r| r.held() == 1));
        assert_eq!(d.counters.recovery.snapshots_started, 2);
    }

    #[test]
    fn a_unit_the_shell_still_spins_waits_for_it() {
        let (mut u, mut d) = spun(3);
        join_wanting(&mut u, &mut d, 1, 100, MS);
        join_wanting(&mut u, &mut d, 2, 500, 2 * MS);
        let t = 3 * MS;
        let mut units = u.drive(&mut d);
        // The shell still runs unit 1's (ended) attempt: unit 2 goes, unit
        // 1 stays wanted until the shell is free for it.
        assert_eq!(
            units.poll_image_start_except(t, |ch| ch == 1),
            Some((2, 501))
        );
        assert_eq!(units.poll_image_start_except(t, |ch| ch == 1), None);
        assert!(matches!(u.image_phase(1).0, SnapshotPhase::Wanted { .. }));
        assert_eq!(u.drive(&mut d).poll_image_start(t), Some((1, 101)));
    }

    #[test]
    fn what_an_attempt_holds_counts_only_against_its_own_bounds() {
        // R5c step 1: not against `gap_hold_packets` (2 here).
        let (mut u, mut d) = spun_holding(3, 2);
        join_wanting(&mut u, &mut d, 1, 100, MS);
        assert_eq!(u.drive(&mut d).poll_image_start(MS), Some((1, 101)));
        for seq in [101, 103, 104] {
            assert_eq!(offer(&mut u, &mut d, 1, seq, 2 * MS), DatagramOutcome::Held);
        }
        offer(&mut u, &mut d, 2, 1, 3 * MS);
        assert_eq!(offer(&mut u, &mut d, 2, 3, 3 * MS), DatagramOutcome::Held);
        assert_eq!(offer(&mut u, &mut d, 2, 4, 3 * MS), DatagramOutcome::Held);
        assert_eq!(d.counters.recovery.hold_overflows, 0);
        // One more of unit 2 exceeds the bound: its own hole goes, never
        // one among the attempt's held datagrams.
        assert_eq!(offer(&mut u, &mut d, 2, 6, 4 * MS), DatagramOutcome::Held);
        assert_eq!(d.counters.recovery.hold_overflows, 1);
        let ch2: Vec<u64> = d.applied.iter().filter(|a| a.0 == 2).map(|a| a.1).collect();
        assert_eq!(ch2, [1, 3, 4]);
        assert!(matches!(u.image_phase(1).0, SnapshotPhase::Running { .. }));
        assert_eq!(u.of(1).map(|r| r.held()), Some(3));
        let ch1: Vec<u64> = d.applied.iter().filter(|a| a.0 == 1).map(|a| a.1).collect();
        assert_eq!(ch1, [100], "the join only");
    }
}
