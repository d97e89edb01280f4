//! Refill (recovery.md R4): asking a venue's server for the messages an
//! open hole lacks. Sans-I/O: the machine decides what to ask (the
//! channel's first missing message and the hole's size, through the
//! venue's [`RefillCodec`]), when (the first request `gap_hold_us` after
//! the hole opened, again `rerequest_timeout_ms` after an unanswered one,
//! to the next server in turn, at once after an answer that filled part
//! of the hole) and how fast (one outstanding request, at most
//! [`RATE_LIMIT`] in any second). The I/O shell takes a due request with
//! [`Refill::poll`] and sends it; answers go through the hold (R1) like
//! any datagram, and the driver tells the machine what they did.
//!
//! States ([`RefillState`]): `Idle` (nothing asked for the open hole, or
//! the last answer filled part of it) and `Asked` (a request left at
//! `since` and is unanswered).
//!
//! A service that answers on the feed's own lines (R4c, Cboe's Gap Request
//! Proxy: [`RefillCodec::answers_on_lines`]) differs: a request stays
//! outstanding until every message it asked for was processed, its
//! response refuses it, or its timeout; and the service may be out of
//! reach for a while ([`Availability`]: not logged in, a pause it asked
//! for, a unit it does not serve), when holes get R2's deadline without
//! re-requests.

use crate::feed::counters::RecoveryCounters;
use crate::feed::settings::{ms_to_ns, Recovery};
use crate::venue::codec::{Gap, RefillCodec};
use crate::wire::SessionId;

/// R4: at most this many requests leave a feed in any second.
pub const RATE_LIMIT: usize = 100;

/// R4: where the refill of the open hole stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefillState {
    /// No request is outstanding.
    Idle,
    /// A request left at `since`, unanswered so far.
    Asked { since: i64 },
}

/// R4c: whether the refill service can be asked now, and what the hold's
/// deadlines count on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Asked as R2 says with a refill service (`rerequest_attempts` x
    /// `rerequest_timeout_ms`).
    On,
    /// R4c `S`: nothing is asked before `until`; an open hole's deadline
    /// is at least `until` plus the attempts' window.
    PausedUntil(i64),
    /// Not logged in, R4c `M`, `D` or `I`: nothing is asked, and holes get
    /// R2's deadline without re-requests.
    Off,
}

/// R4c: what keeps the service out of reach, each cleared on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Availability {
    /// The connection is logged in (replay: as if all along).
    pub logged_in: bool,
    /// `S`: no request before this (Unix ns).
    pub brief_until: i64,
    /// `M`, `D`: no request, and no re-request window, before this.
    pub off_until: i64,
    /// `I`: the unit is not served until its next session.
    pub unit_off: bool,
}

impl Default for Availability {
    fn default() -> Availability {
        Availability {
            logged_in: true,
            brief_until: i64::MIN,
            off_until: i64::MIN,
            unit_off: false,
        }
    }
}

impl Availability {
    /// What the hold counts on at `now`.
    pub fn window(&self, now: i64) -> Window {
        if !self.logged_in || self.unit_off || now < self.off_until {
            Window::Off
        } else if now < self.brief_until {
            Window::PausedUntil(self.brief_until)
        } else {
            Window::On
        }
    }
}

/// The open hole as the machine needs it to build a request: the
/// channel's session and `next`, and where the held datagrams begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hole {
    pub session: SessionId,
    /// The channel's `next`: the first missing message.
    pub next: u64,
    /// The sequence of the first held datagram: the hole ends before it.
    pub first_held: u64,
}

#[derive(Debug)]
pub struct Refill<C: RefillCodec> {
    /// Configured servers (0: no refill service).
    servers: usize,
    timeout_ns: i64,
    state: RefillState,
    /// Index of the server asked last (in turn after a timeout).
    server: usize,
    /// A request due, waiting for the I/O shell (`poll`): the server, the
    /// request, and when it fell due. Counted as sent (and in the rate
    /// ceiling) only when the shell takes it: a hole that closes or is
    /// declared first drops it unsent.
    queued: Option<(usize, C::Request, i64)>,
    /// The last `RATE_LIMIT` send times (a ring), for the ceiling.
    sent: [i64; RATE_LIMIT],
    sent_at: usize,
    codec: C,
    /// The request taken by the I/O shell and not ended (R4c: a response
    /// must echo it).
    outstanding: Option<C::Request>,
    /// R4c: the first sequence beyond what the outstanding request asked.
    asked_end: u64,
    /// R4c: what keeps the service out of reach.
    availability: Availability,
}

impl<C: RefillCodec> Refill<C> {
    pub fn new(r: &Recovery, codec: C) -> Refill<C> {
        Refill {
            servers: r.refill_servers(),
            timeout_ns: ms_to_ns(r.rerequest_timeout_ms),
            state: RefillState::Idle,
            server: 0,
            queued: None,
            sent: [i64::MIN; RATE_LIMIT],
            sent_at: 0,
            codec,
            outstanding: None,
            asked_end: 0,
            availability: Availability::default(),
        }
    }

    /// R4c: what keeps the service out of reach now.
    pub fn availability(&self) -> Availability {
        self.availability
    }

    /// R4c: a change of what keeps the service out of reach. A service
    /// out of reach voids the outstanding request.
    pub fn set_availability(&mut self, a: Availability, now: i64) {
        self.availability = a;
        if a.window(now) == Window::Off {
            self.end_request();
        }
    }

    /// R4c: the request the I/O shell took and that has not ended.
    pub fn outstanding(&self) -> Option<C::Request> {
        self.outstanding
    }

    /// R4c: the outstanding request ended (refused, or void): the next
    /// one, if the hole is still open, leaves at once within the limits.
    pub fn end_request(&mut self) {
        self.state = RefillState::Idle;
        self.outstanding = None;
        self.queued = None;
    }

    /// R4c `U` and undocumented statuses: asked again after
    /// `rerequest_timeout_ms` from `now`, an attempt without progress.
    pub fn retry_later(&mut self, now: i64) {
        self.state = RefillState::Asked { since: now };
        self.outstanding = None;
    }

    /// R4c: the channel's `next` moved to `next` while a request was
    /// outstanding: once every message it asked for was processed, it
    /// ends, and the rest of the hole is asked for at once.
    pub fn progressed(&mut self, next: u64) {
        if self.outstanding.is_some() && next >= self.asked_end {
            self.end_request();
        }
    }

    /// R5c step 1: the first hole among an image attempt's held datagrams
    /// now begins at `front`: a request, taken or not, for what is
    /// already covered (or no longer asked for) ends, and the rest is
    /// asked for at once.
    pub fn covered(&mut self, front: u64) {
        let asked = self.outstanding.is_some() || self.queued.is_some();
        if asked && front >= self.asked_end {
            self.end_request();
        }
    }

    /// The venue's codec (a driver tells it what the service's answers
    /// say, e.g. a lower count limit).
    pub fn codec_mut(&mut self) -> &mut C {
        &mut self.codec
    }

    pub fn codec(&self) -> &C {
        &self.codec
    }

    pub fn state(&self) -> RefillState {
        self.state
    }

    /// Whether a request is waiting for the I/O shell.
    pub fn has_queued(&self) -> bool {
        self.queued.is_some()
    }

    /// A hole opened or closed: nothing is outstanding for it, and a
    /// request not yet taken is dropped unsent.
    pub fn reset(&mut self) {
        self.state = RefillState::Idle;
        self.queued = None;
        self.outstanding = None;
    }

    /// R4: an answer filled part of the hole: the rest is asked for at
    /// once (within the ceiling).
    pub fn answered_in_part(&mut self) {
        self.state = RefillState::Idle;
    }

    /// The earliest time one more request keeps within the ceiling.
    fn rate_free_at(&self) -> i64 {
        self.sent[self.sent_at].saturating_add(1_000_000_000)
    }

    /// R4: when the next request falls due, for a hole asked for from
    /// `ask_from` (`Hold::ask_from`; `None`: no hole is open): then, or
    /// `rerequest_timeout_ms` after the unanswered one, and never more
    /// than `RATE_LIMIT` in any second.
    pub fn due(&self, ask_from: Option<i64>) -> Option<i64> {
        let ask_from = ask_from?;
        if self.servers == 0 {
            return None;
        }
        let a = &self.availability;
        if !a.logged_in || a.unit_off {
            return None;
        }
        let due = match self.state {
            RefillState::Asked { since } => since.saturating_add(self.timeout_ns),
            RefillState::Idle => ask_from,
        };
        Some(
            due.max(self.rate_free_at())
                .max(a.brief_until)
                .max(a.off_until),
        )
    }

    /// R4: queues the request that falls due at `now`, if any, for the
    /// `hole` (`None`: no session or nothing held).
    pub fn schedule(&mut self, now: i64, ask_from: Option<i64>, hole: Option<Hole>) {
        let Some(due) = self.due(ask_from) else {
            return;
        };
        if due > now || self.queued.is_some() {
            return;
        }
        let Some(h) = hole else {
            return;
        };
        if let RefillState::Asked { .. } = self.state {
            // Unanswered: the next server, in turn.
            self.server = (self.server + 1) % self.servers;
        }
        self.state = RefillState::Asked { since: now };
        let gap = Gap {
            session: h.session,
            first: h.next,
            missing: h.first_held.saturating_sub(h.next),
        };
        let request = self.codec.request(gap);
        self.asked_end = h.next + self.codec.count(&request);
        self.queued = Some((self.server, request, now));
    }

    /// R4: the request to send now, if one fell due: the index of the
    /// configured server to send it to, and the request.
    pub fn poll(&mut self, counters: &mut RecoveryCounters) -> Option<(usize, C::Request)> {
        let (server, request, at) = self.queued.take()?;
        if self.codec.answers_on_lines() {
            self.outstanding = Some(request);
        }
        self.sent[self.sent_at] = at;
        self.sent_at = (self.sent_at + 1) % RATE_LIMIT;
        counters.requests_sent += 1;
        Some((server, request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::rerequest::{MoldUdp64, Request, MAX_REQUEST_COUNT};

    const MS: i64 = 1_000_000;
    const S: SessionId = SessionId(*b"SESSION001");

    fn refill(servers: usize) -> Refill<MoldUdp64> {
        Refill::new(
            &Recovery {
                rerequest_servers: servers,
                rerequest_timeout_ms: 50,
                ..Recovery::default()
            },
            MoldUdp64,
        )
    }

    fn hole(next: u64, first_held: u64) -> Option<Hole> {
        Some(Hole {
            session: S,
            next,
            first_held,
        })
    }

    #[test]
    fn asks_for_the_hole_when_due_then_the_next_server_after_a_timeout() {
        let mut r = refill(2);
        let mut c = RecoveryCounters::default();
        let from = Some(MS);
        assert_eq!(r.due(from), Some(MS));
        r.schedule(MS - 1, from, hole(5, 9));
        assert!(r.poll(&mut c).is_none(), "not due yet");
        r.schedule(MS, from, hole(5, 9));
        let want = Request {
            session: S,
            sequence: 5,
            count: 4,
        };
        assert_eq!(r.poll(&mut c), Some((0, want)));
        assert_eq!(r.state(), RefillState::Asked { since: MS });
        assert_eq!(c.requests_sent, 1);
        // Unanswered: again 50 ms later, to server 1.
        assert_eq!(r.due(from), Some(51 * MS));
        r.schedule(51 * MS, from, hole(5, 9));
        assert_eq!(r.poll(&mut c), Some((1, want)));
        r.schedule(101 * MS, from, hole(5, 9));
        assert_eq!(r.poll(&mut c).map(|(s, _)| s), Some(0), "in turn");
    }

    #[test]
    fn a_partial_answer_asks_for_the_rest_at_once() {
        let mut r = refill(1);
        let mut c = RecoveryCounters::default();
        r.schedule(MS, Some(MS), hole(5, 9));
        r.poll(&mut c).unwrap();
        r.answered_in_part();
        assert_eq!(r.state(), RefillState::Idle);
        // The hole's progress moved `ask_from` to the answer's arrival.
        r.schedule(3 * MS, Some(3 * MS), hole(7, 9));
        let (_, req) = r.poll(&mut c).unwrap();
        assert_eq!((req.sequence, req.count), (7, 2));
    }

    #[test]
    fn no_service_no_hole_no_request() {
        let mut r = refill(0);
        let mut c = RecoveryCounters::default();
        assert_eq!(r.due(Some(0)), None);
        r.schedule(MS, Some(0), hole(5, 9));
        assert!(r.poll(&mut c).is_none());
        let mut r = refill(1);
        assert_eq!(r.due(None), None);
        r.schedule(MS, None, hole(5, 9));
        assert!(r.poll(&mut c).is_none());
    }

    #[test]
    fn a_request_not_taken_is_dropped_when_the_hole_goes() {
        let mut r = refill(1);
        let mut c = RecoveryCounters::default();
        r.schedule(MS, Some(MS), hole(5, 9));
        assert!(r.has_queued());
        r.reset();
        assert!(r.poll(&mut c).is_none());
        assert_eq!(c.requests_sent, 0, "counted only when taken");
    }

    #[test]
    fn never_more_than_the_ceiling_in_any_second() {
        let mut r = refill(1);
        let mut c = RecoveryCounters::default();
        let mut now = 0;
        for _ in 0..RATE_LIMIT {
            r.answered_in_part();
            r.schedule(now, Some(0), hole(5, 9));
            assert!(r.poll(&mut c).is_some());
            now += MS;
        }
        r.answered_in_part();
        // The first of the last 100 left at 0: the next waits until 1 s.
        assert_eq!(r.due(Some(0)), Some(1_000 * MS));
        r.schedule(now, Some(0), hole(5, 9));
        assert!(r.poll(&mut c).is_none());
        r.schedule(1_000 * MS, Some(0), hole(5, 9));
        assert!(r.poll(&mut c).is_some());
    }

    #[test]
    fn a_large_hole_is_asked_in_pieces_the_codec_allows() {
        let mut r = refill(1);
        let mut c = RecoveryCounters::default();
        r.schedule(0, Some(0), hole(1, 1_000_000));
        assert_eq!(r.poll(&mut c).unwrap().1.count, MAX_REQUEST_COUNT);
    }

    /// A service with a count limit of its own that the driver lowers (as
    /// a Gap Request Proxy's refusal of a count asks for).
    #[derive(Debug)]
    struct Limited {
        max_count: u64,
    }

    impl RefillCodec for Limited {
        type Request = (u64, u64);
        fn request(&self, gap: Gap) -> (u64, u64) {
            (gap.first, gap.missing.clamp(1, self.max_count))
        }
        fn encode(&self, r: &(u64, u64), out: &mut Vec<u8>) {
            out.extend_from_slice(&r.0.to_be_bytes());
            out.extend_from_slice(&r.1.to_be_bytes());
        }
        fn count(&self, r: &(u64, u64)) -> u64 {
            r.1
        }
    }

    #[test]
    fn a_codec_keeps_state_the_driver_can_change() {
        let mut r = Refill::new(
            &Recovery {
                rerequest_servers: 1,
                ..Recovery::default()
            },
            Limited { max_count: 100 },
        );
        let mut c = RecoveryCounters::default();
        r.schedule(0, Some(0), hole(5, 1_000));
        assert_eq!(r.poll(&mut c), Some((0, (5, 100))));
        r.codec_mut().max_count = 50;
        r.answered_in_part();
        r.schedule(1, Some(0), hole(5, 1_000));
        assert_eq!(r.poll(&mut c), Some((0, (5, 50))));
    }
}
