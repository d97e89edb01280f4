//! Image (recovery.md R5): a picture of the channel from a server (a
//! snapshot), joined with the datagrams held meanwhile. Two sans-I/O
//! machines, `now` passed in:
//!
//! - [`Image`]: when an attempt is wanted and may start (late join, lost
//!   hole; the pace: backoff from each start, 1 s doubling to 60 s, back
//!   to 1 s after 60 s without need), what bounds the hold while one runs,
//!   and whether its end is plausible. States: [`SnapshotPhase`]. The
//!   driver (`Feed`) applies the picture and releases the hold.
//! - [`ImageSession`]: one attempt's conversation with the server through
//!   the venue's [`ImageCodec`]: log in, heartbeats, silence and time
//!   limits, the image's byte bound, the end. States: [`SessionState`].
//!   The I/O shell (`net::glimpse`) only connects and moves bytes.

use super::hold::Limit;
use crate::feed::counters::RecoveryCounters;
use crate::venue::codec::{ImageCodec, ImageError, ImageEvent};
use crate::wire::SessionId;

/// R5: where a feed's snapshot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotPhase {
    /// No snapshot is needed (or the feed has no snapshot server).
    Idle,
    /// One is needed; the next attempt may start at `not_before`.
    Wanted { not_before: i64 },
    /// An attempt started at `since`: every datagram of the session is
    /// held until its `G` or its failure.
    Running { since: i64 },
}

/// R5: why a snapshot attempt failed (the I/O shell reports the
/// connection's failures; the core finds the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotFailure {
    /// The TCP connection was refused or could not be made.
    Refused,
    /// Login Rejected (`J`).
    LoginRejected,
    /// End of Session (`Z`) or the connection closed before `G`.
    Closed,
    /// 15 s without a whole packet from the server.
    Silence,
    /// 30 s without `G`.
    NoEndOfSnapshot,
    /// A packet or message that does not parse.
    Malformed,
    /// More than `SNAPSHOT_HOLD_MAX` datagrams, or more than
    /// `snapshot.hold_mib` of them, held meanwhile.
    HeldBound,
    /// The snapshot's own messages passed `snapshot.max_mib`.
    SnapshotBound,
    /// `G` is `max_channel_jump` or more beyond the furthest held datagram,
    /// or as far below the first one (C3b's rule for a snapshot).
    Implausible,
    /// The feed's session changed (or ended) during the attempt.
    SessionChanged,
    /// The server refused the image request itself (R5c: Spin Response
    /// `S`, a spin already running on the connection).
    RequestRefused,
}

impl SnapshotFailure {
    pub const ALL: [SnapshotFailure; 11] = [
        SnapshotFailure::Refused,
        SnapshotFailure::LoginRejected,
        SnapshotFailure::Closed,
        SnapshotFailure::Silence,
        SnapshotFailure::NoEndOfSnapshot,
        SnapshotFailure::Malformed,
        SnapshotFailure::HeldBound,
        SnapshotFailure::SnapshotBound,
        SnapshotFailure::Implausible,
        SnapshotFailure::SessionChanged,
        SnapshotFailure::RequestRefused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotFailure::Refused => "refused",
            SnapshotFailure::LoginRejected => "login_rejected",
            SnapshotFailure::Closed => "closed_before_end",
            SnapshotFailure::Silence => "silence",
            SnapshotFailure::NoEndOfSnapshot => "no_end_of_snapshot",
            SnapshotFailure::Malformed => "malformed",
            SnapshotFailure::HeldBound => "held_bound",
            SnapshotFailure::SnapshotBound => "snapshot_bound",
            SnapshotFailure::Implausible => "implausible_end",
            SnapshotFailure::SessionChanged => "session_changed",
            SnapshotFailure::RequestRefused => "request_refused",
        }
    }

    /// Its place in `ALL` (counters, the feed view's reason code).
    pub fn index(self) -> usize {
        SnapshotFailure::ALL
            .iter()
            .position(|&f| f == self)
            .unwrap_or(0)
    }
}

/// R5: most datagrams held while a snapshot runs.
pub const SNAPSHOT_HOLD_MAX: usize = 1_000_000;
/// R5 "Pace": an attempt starts at the earliest this long after the
/// previous one started, doubling up to the maximum while attempts keep
/// being needed.
const SNAPSHOT_BACKOFF_MIN_NS: i64 = 1_000_000_000;
const SNAPSHOT_BACKOFF_MAX_NS: i64 = 60_000_000_000;
/// R5 "Pace": after this long without needing a snapshot, the backoff is
/// back to its minimum.
const SNAPSHOT_BACKOFF_RESET_NS: i64 = 60_000_000_000;

/// R5: the feed's image service: its phase, pace and last failure.
#[derive(Clone, Copy, Debug)]
pub struct Image {
    /// Whether the feed has an image server.
    enabled: bool,
    phase: SnapshotPhase,
    /// The wait between the next attempt's start and the one after it.
    backoff_ns: i64,
    /// The earliest start of the next attempt (the last start plus the
    /// backoff then): whatever ended the last one, none starts sooner.
    earliest_next: i64,
    /// Since when no snapshot has been needed (the last one applied), if
    /// one was ever started.
    idle_since: Option<i64>,
    last_failure: Option<SnapshotFailure>,
    /// `snapshot.hold_mib`, in bytes.
    hold_bytes: usize,
    /// The backoff and earliest next start before the running attempt
    /// started (R5c: an attempt refused with session in use does not
    /// count for the pace).
    before_start: (i64, i64),
    /// R5c: refused with session in use: the next attempt may start as
    /// soon as another attempt of the feed ends.
    after_another: bool,
}

impl Image {
    pub fn new(enabled: bool, hold_bytes: usize) -> Image {
        Image {
            enabled,
            phase: SnapshotPhase::Idle,
            backoff_ns: SNAPSHOT_BACKOFF_MIN_NS,
            earliest_next: i64::MIN,
            idle_since: None,
            last_failure: None,
            hold_bytes,
            before_start: (SNAPSHOT_BACKOFF_MIN_NS, i64::MIN),
            after_another: false,
        }
    }

    /// Whether the channel has an image server (R5c: a unit's is its
    /// own), set when the channel's machines are made.
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    #[inline]
    pub fn phase(&self) -> SnapshotPhase {
        self.phase
    }

    pub fn last_failure(&self) -> Option<SnapshotFailure> {
        self.last_failure
    }

    #[inline]
    pub fn running(&self) -> bool {
        matches!(self.phase, SnapshotPhase::Running { .. })
    }

    /// R5: what the hold may keep while an attempt runs.
    pub fn hold_limit(&self) -> Limit {
        Limit::Image {
            packets: SNAPSHOT_HOLD_MAX,
            bytes: self.hold_bytes,
        }
    }

    /// R5: a late join or a lost hole: an attempt is wanted (on a feed
    /// with an image server, none wanted or running yet).
    pub fn want(&mut self, now: i64) {
        if self.enabled && self.phase == SnapshotPhase::Idle {
            if self
                .idle_since
                .is_some_and(|t| now.saturating_sub(t) >= SNAPSHOT_BACKOFF_RESET_NS)
            {
                // Pace: 60 s without needing one, back to the minimum.
                self.backoff_ns = SNAPSHOT_BACKOFF_MIN_NS;
            }
            self.phase = SnapshotPhase::Wanted {
                not_before: now.max(self.earliest_next),
            };
        }
    }

    /// R5: whether an attempt starts now (then `Running`).
    pub fn poll_start(&mut self, now: i64, counters: &mut RecoveryCounters) -> bool {
        match self.phase {
            SnapshotPhase::Wanted { not_before } if now >= not_before => {
                self.phase = SnapshotPhase::Running { since: now };
                self.before_start = (self.backoff_ns, self.earliest_next);
                self.after_another = false;
                // Pace: the next attempt, whatever ends this one, waits
                // the backoff from this start.
                self.earliest_next = now.saturating_add(self.backoff_ns);
                self.backoff_ns = (self.backoff_ns * 2).min(SNAPSHOT_BACKOFF_MAX_NS);
                counters.snapshots_started += 1;
                true
            }
            _ => false,
        }
    }

    /// R5: the running attempt failed (`false`: none was running); the
    /// next waits for its pace.
    pub fn failed(
        &mut self,
        why: SnapshotFailure,
        now: i64,
        counters: &mut RecoveryCounters,
    ) -> bool {
        if !self.running() {
            return false;
        }
        counters.snapshots_failed[why.index()] += 1;
        self.last_failure = Some(why);
        self.phase = SnapshotPhase::Wanted {
            not_before: now.max(self.earliest_next),
        };
        true
    }

    /// R5c: the running attempt was refused with session in use (Login
    /// Response `B`): counted as a refused login, but not for the pace:
    /// the backoff is as before the attempt, and the next starts when
    /// another attempt of the feed ends (`another_ended`), or at the
    /// latest one backoff after this one started (`false`: none running).
    pub fn session_in_use(&mut self, now: i64, counters: &mut RecoveryCounters) -> bool {
        let SnapshotPhase::Running { since } = self.phase else {
            return false;
        };
        let why = SnapshotFailure::LoginRejected;
        counters.snapshots_failed[why.index()] += 1;
        self.last_failure = Some(why);
        (self.backoff_ns, self.earliest_next) = self.before_start;
        self.phase = SnapshotPhase::Wanted {
            not_before: now.max(since.saturating_add(self.backoff_ns)),
        };
        self.after_another = true;
        true
    }

    /// R5c: another attempt of the feed ended at `now`: one that waits for
    /// that (refused with session in use) may start now.
    pub fn another_ended(&mut self, now: i64) {
        if let SnapshotPhase::Wanted { not_before } = self.phase {
            if std::mem::take(&mut self.after_another) {
                self.phase = SnapshotPhase::Wanted {
                    not_before: not_before.min(now.max(self.earliest_next)),
                };
            }
        }
    }

    /// R5: the running attempt's image was applied at `now`. Pace: the
    /// backoff stays as it is until 60 s pass without need.
    pub fn applied(&mut self, now: i64, counters: &mut RecoveryCounters) {
        counters.snapshots_applied += 1;
        self.phase = SnapshotPhase::Idle;
        self.idle_since = Some(now);
        self.last_failure = None;
    }
}

/// R5: an end `next` that C3b's rule does not believe: `max_jump` or more
/// beyond the furthest held datagram (`furthest`: the channel's `next`
/// when nothing is held), or as far below the first one (`first`: the
/// channel's `next` when nothing is held).
pub fn implausible_end(next: u64, furthest: u64, first: u64, max_jump: u64) -> bool {
    let jump = max_jump.max(1);
    next >= furthest.saturating_add(jump) || next.saturating_add(jump) <= first
}

/// R5: one attempt's time limits and bounds (`snapshot` settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// The attempt fails after this long without a whole packet.
    pub silence_ns: i64,
    /// The attempt fails after this long without the image's end.
    pub whole_ns: i64,
    /// A client heartbeat after this long without sending.
    pub heartbeat_ns: i64,
    /// Most image bytes (as blocks) accepted (`snapshot.max_mib`).
    pub max_bytes: usize,
}

/// R5: where one attempt's conversation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionState {
    /// The login left; no answer yet.
    LoggingIn,
    /// Logged in: the image's messages are arriving.
    Receiving,
    /// The image is whole (the goodbye was written).
    Done,
    /// The attempt failed.
    Failed,
}

/// A whole image: the server's session name where its protocol has one
/// (for the log only), the first sequence after it, its messages as
/// blocks (u16 big-endian length, message).
#[derive(Debug, PartialEq, Eq)]
pub struct Picture {
    pub session: Option<SessionId>,
    pub next: u64,
    pub blocks: Vec<u8>,
}

/// What the conversation came to.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionOutcome {
    Done(Picture),
    Failed(SnapshotFailure, String),
}

/// R5: one attempt's conversation with an image server, sans-I/O: the
/// I/O shell connects, hands in what it reads with `now`
/// ([`ImageSession::on_bytes`]), calls [`ImageSession::poll`] between
/// reads, and sends whatever the machine appended to `out`. The venue's
/// [`ImageCodec`] supplies the bytes and reads the server's.
#[derive(Debug)]
pub struct ImageSession<C: ImageCodec> {
    codec: C,
    limits: SessionLimits,
    state: SessionState,
    started: i64,
    /// The last whole packet from the server (bytes that never complete
    /// one do not count).
    last_heard: i64,
    last_sent: i64,
    session: Option<SessionId>,
    blocks: Vec<u8>,
}

impl<C: ImageCodec> ImageSession<C> {
    /// The conversation starts at `now` (connected): the login is
    /// appended to `out`.
    pub fn start(
        mut codec: C,
        limits: SessionLimits,
        now: i64,
        out: &mut Vec<u8>,
    ) -> Result<ImageSession<C>, SessionOutcome> {
        codec.login(out).map_err(failure)?;
        Ok(ImageSession {
            codec,
            limits,
            state: SessionState::LoggingIn,
            started: now,
            last_heard: now,
            last_sent: now,
            session: None,
            blocks: Vec::new(),
        })
    }

    pub fn state(&self) -> SessionState {
        self.state
    }

    /// The venue's codec, for what it counted or learnt (a refusal's
    /// status, messages it skipped) that the image events do not carry.
    pub fn codec(&self) -> &C {
        &self.codec
    }

    /// Time passes to `now` without bytes: the silence and the whole
    /// attempt's limits, and a client heartbeat (appended to `out`) when
    /// one is due.
    pub fn poll(&mut self, now: i64, out: &mut Vec<u8>) -> Option<SessionOutcome> {
        if matches!(self.state, SessionState::Done | SessionState::Failed) {
            return None;
        }
        if now.saturating_sub(self.last_heard) > self.limits.silence_ns {
            return Some(self.fail(
                SnapshotFailure::Silence,
                format!(
                    "no whole packet from the server in {} s",
                    self.limits.silence_ns / 1_000_000_000
                ),
            ));
        }
        if now.saturating_sub(self.started) > self.limits.whole_ns {
            return Some(self.fail(
                SnapshotFailure::NoEndOfSnapshot,
                "no End of Snapshot in time".into(),
            ));
        }
        if now.saturating_sub(self.last_sent) >= self.limits.heartbeat_ns {
            self.codec.heartbeat(out);
            self.last_sent = now;
        }
        None
    }

    /// Bytes read from the server at `now`; replies (and the goodbye
    /// after the end) are appended to `out`.
    pub fn on_bytes(
        &mut self,
        bytes: &[u8],
        now: i64,
        out: &mut Vec<u8>,
    ) -> Option<SessionOutcome> {
        if matches!(self.state, SessionState::Done | SessionState::Failed) {
            return None;
        }
        self.codec.push(bytes);
        loop {
            let event = match self.codec.next_event(out) {
                Ok(Some(e)) => e,
                Ok(None) => return None,
                Err(e) => {
                    self.state = SessionState::Failed;
                    return Some(failure(e));
                }
            };
            // R5: silence is measured between whole packets.
            self.last_heard = now;
            let logged_in = self.state == SessionState::Receiving;
            match event {
                ImageEvent::Heard => {}
                ImageEvent::LoggedIn { session } => {
                    self.session = session;
                    self.state = SessionState::Receiving;
                }
                ImageEvent::Message(_) | ImageEvent::End { .. } if !logged_in => {
                    self.state = SessionState::Failed;
                    return Some(SessionOutcome::Failed(
                        SnapshotFailure::Malformed,
                        "data before Login Accepted".into(),
                    ));
                }
                ImageEvent::Message(msg) => {
                    if self.blocks.len() + msg.len() + 2 > self.limits.max_bytes {
                        let why = format!(
                            "snapshot larger than snapshot.max_mib ({} MiB)",
                            self.limits.max_bytes >> 20
                        );
                        self.state = SessionState::Failed;
                        return Some(SessionOutcome::Failed(SnapshotFailure::SnapshotBound, why));
                    }
                    self.blocks
                        .extend_from_slice(&(msg.len() as u16).to_be_bytes());
                    self.blocks.extend_from_slice(msg);
                }
                ImageEvent::End { next } => {
                    // R5: then the client logs out and closes.
                    self.codec.logout(out);
                    self.state = SessionState::Done;
                    return Some(SessionOutcome::Done(Picture {
                        session: self.session,
                        next,
                        blocks: std::mem::take(&mut self.blocks),
                    }));
                }
            }
        }
    }

    fn fail(&mut self, why: SnapshotFailure, detail: String) -> SessionOutcome {
        self.state = SessionState::Failed;
        SessionOutcome::Failed(why, detail)
    }
}

/// R5: a codec's error as the attempt's failure.
fn failure(e: ImageError) -> SessionOutcome {
    match e {
        ImageError::Rejected(d) => SessionOutcome::Failed(SnapshotFailure::LoginRejected, d),
        ImageError::Closed(d) => SessionOutcome::Failed(SnapshotFailure::Closed, d),
        ImageError::Malformed(d) => SessionOutcome::Failed(SnapshotFailure::Malformed, d),
        ImageError::RequestRefused(d) => SessionOutcome::Failed(SnapshotFailure::RequestRefused, d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn wanted_started_failed_and_paced_from_each_start() {
        let mut img = Image::new(true, 1 << 20);
        let mut c = RecoveryCounters::default();
        assert_eq!(img.phase(), SnapshotPhase::Idle);
        assert!(!img.poll_start(0, &mut c), "not wanted");
        img.want(10);
        assert_eq!(img.phase(), SnapshotPhase::Wanted { not_before: 10 });
        assert!(img.poll_start(10, &mut c));
        assert_eq!(img.phase(), SnapshotPhase::Running { since: 10 });
        assert!(img.running());
        img.want(11);
        assert!(
            img.running(),
            "wanting again changes nothing while one runs"
        );
        assert!(img.failed(SnapshotFailure::Refused, 20, &mut c));
        assert_eq!(img.last_failure(), Some(SnapshotFailure::Refused));
        // 1 s from the start, then 2 s from the next start.
        assert_eq!(img.phase(), SnapshotPhase::Wanted { not_before: 10 + S });
        assert!(!img.poll_start(S, &mut c));
        assert!(img.poll_start(10 + S, &mut c));
        assert!(img.failed(SnapshotFailure::Silence, 11 + S, &mut c));
        assert_eq!(
            img.phase(),
            SnapshotPhase::Wanted {
                not_before: 10 + 3 * S
            }
        );
        assert_eq!(c.snapshots_started, 2);
        assert_eq!(c.snapshots_failed[SnapshotFailure::Refused.index()], 1);
        assert_eq!(c.snapshots_failed[SnapshotFailure::Silence.index()], 1);
        assert!(
            !img.failed(SnapshotFailure::Silence, 12 + S, &mut c),
            "none running"
        );
    }

    #[test]
    fn the_backoff_doubles_to_a_minute_and_resets_after_a_minute_without_need() {
        let mut img = Image::new(true, 1 << 20);
        let mut c = RecoveryCounters::default();
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            img.want(now);
            let SnapshotPhase::Wanted { not_before } = img.phase() else {
                panic!("wanted");
            };
            waits.push(not_before - now);
            now = not_before;
            assert!(img.poll_start(now, &mut c));
            img.applied(now, &mut c);
        }
        assert_eq!(
            waits,
            [0, S, 2 * S, 4 * S, 8 * S, 16 * S, 32 * S, 60 * S],
            "applied, then needed again at once: paced all the same"
        );
        // 60 s without need: back to 1 s.
        now += 60 * S;
        img.want(now);
        assert!(img.poll_start(now, &mut c));
        img.applied(now, &mut c);
        img.want(now);
        assert_eq!(
            img.phase(),
            SnapshotPhase::Wanted {
                not_before: now + S
            }
        );
        assert_eq!(img.last_failure(), None);
        assert_eq!(c.snapshots_applied, 9);
    }

    #[test]
    fn a_feed_without_an_image_server_never_wants_one() {
        let mut img = Image::new(false, 0);
        img.want(5);
        assert_eq!(img.phase(), SnapshotPhase::Idle);
    }

    #[test]
    fn an_end_far_from_the_lines_is_implausible() {
        // Held 100..200, max jump 1,000.
        assert!(!implausible_end(150, 200, 100, 1_000));
        assert!(!implausible_end(1_199, 200, 100, 1_000));
        assert!(implausible_end(1_200, 200, 100, 1_000));
        assert!(implausible_end(1, 2_000, 1_001, 1_000));
        assert!(!implausible_end(2, 2_000, 1_001, 1_000));
    }

    #[test]
    fn the_hold_limit_is_the_images_own() {
        let img = Image::new(true, 4096);
        assert_eq!(
            img.hold_limit(),
            Limit::Image {
                packets: SNAPSHOT_HOLD_MAX,
                bytes: 4096
            }
        );
    }
}

#[cfg(test)]
mod session_tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// A made-up protocol, one byte a packet: `A` accepted, `J` rejected,
    /// `H` heartbeat, `Z` end of session, `m` a message "m", `G` the end
    /// at 42, anything else malformed. The client sends `L`, `R`, `O`.
    #[derive(Debug, Default)]
    struct Toy {
        bytes: std::collections::VecDeque<u8>,
        msg: [u8; 1],
    }

    impl ImageCodec for Toy {
        fn login(&mut self, out: &mut Vec<u8>) -> Result<(), ImageError> {
            out.push(b'L');
            Ok(())
        }
        fn heartbeat(&mut self, out: &mut Vec<u8>) {
            out.push(b'R');
        }
        fn logout(&mut self, out: &mut Vec<u8>) {
            out.push(b'O');
        }
        fn push(&mut self, bytes: &[u8]) {
            self.bytes.extend(bytes);
        }
        fn next_event(&mut self, _: &mut Vec<u8>) -> Result<Option<ImageEvent<'_>>, ImageError> {
            let Some(b) = self.bytes.pop_front() else {
                return Ok(None);
            };
            Ok(Some(match b {
                b'A' => ImageEvent::LoggedIn {
                    session: Some(SessionId(*b"SESSION001")),
                },
                b'J' => return Err(ImageError::Rejected("no".into())),
                b'H' => ImageEvent::Heard,
                b'Z' => return Err(ImageError::Closed("Z".into())),
                b'G' => ImageEvent::End { next: 42 },
                b'm' => {
                    self.msg = [b'm'];
                    ImageEvent::Message(&self.msg)
                }
                _ => return Err(ImageError::Malformed("?".into())),
            }))
        }
    }

    fn limits() -> SessionLimits {
        SessionLimits {
            silence_ns: 15 * S,
            whole_ns: 30 * S,
            heartbeat_ns: S,
            max_bytes: 9,
        }
    }

    fn start(out: &mut Vec<u8>) -> ImageSession<Toy> {
        ImageSession::start(Toy::default(), limits(), 0, out).unwrap()
    }

    #[test]
    fn logs_in_receives_and_logs_out_at_the_end() {
        let mut out = Vec::new();
        let mut s = start(&mut out);
        assert_eq!(out, b"L");
        assert_eq!(s.state(), SessionState::LoggingIn);
        assert_eq!(s.on_bytes(b"AHm", 1, &mut out), None);
        assert_eq!(s.state(), SessionState::Receiving);
        let done = s.on_bytes(b"mG", 2, &mut out);
        assert_eq!(
            done,
            Some(SessionOutcome::Done(Picture {
                session: Some(SessionId(*b"SESSION001")),
                next: 42,
                blocks: vec![0, 1, b'm', 0, 1, b'm'],
            }))
        );
        assert_eq!(out, b"LO");
        assert_eq!(s.state(), SessionState::Done);
    }

    #[test]
    fn heartbeats_after_each_second_without_sending() {
        let mut out = Vec::new();
        let mut s = start(&mut out);
        out.clear();
        assert_eq!(s.poll(S - 1, &mut out), None);
        assert!(out.is_empty());
        assert_eq!(s.poll(S, &mut out), None);
        assert_eq!(out, b"R");
        assert_eq!(s.poll(S + S / 2, &mut out), None);
        assert_eq!(out, b"R");
    }

    #[test]
    fn silence_counts_whole_packets_only_and_the_whole_attempt_is_bounded() {
        let mut out = Vec::new();
        let mut s = start(&mut out);
        s.on_bytes(b"A", 10 * S, &mut out);
        assert_eq!(s.poll(25 * S, &mut out), None);
        let Some(SessionOutcome::Failed(why, _)) = s.poll(25 * S + 1, &mut out) else {
            panic!("silence");
        };
        assert_eq!(why, SnapshotFailure::Silence);

        let mut s = start(&mut out);
        for t in 1..=30 {
            assert_eq!(s.on_bytes(b"H", t * S, &mut out), None);
            assert_eq!(s.poll(t * S, &mut out), None);
        }
        let Some(SessionOutcome::Failed(why, _)) = s.poll(30 * S + 1, &mut out) else {
            panic!("no end");
        };
        assert_eq!(why, SnapshotFailure::NoEndOfSnapshot);
    }

    #[test]
    fn each_failure_is_named() {
        let cases: [(&[u8], SnapshotFailure); 5] = [
            (b"J", SnapshotFailure::LoginRejected),
            (b"AZ", SnapshotFailure::Closed),
            (b"A?", SnapshotFailure::Malformed),
            (b"m", SnapshotFailure::Malformed),
            (b"Ammmm", SnapshotFailure::SnapshotBound),
        ];
        for (bytes, want) in cases {
            let mut out = Vec::new();
            let mut s = start(&mut out);
            match s.on_bytes(bytes, 1, &mut out) {
                Some(SessionOutcome::Failed(why, _)) => assert_eq!(why, want, "{bytes:?}"),
                other => panic!("{bytes:?}: {other:?}"),
            }
            assert_eq!(s.state(), SessionState::Failed);
            assert_eq!(s.on_bytes(b"G", 2, &mut out), None, "over");
        }
    }
}
