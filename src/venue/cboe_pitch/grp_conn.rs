//! The Gap Request Proxy connection (recovery.md R4c, "The connection"),
//! sans-I/O: when to connect, the Login, heartbeats both ways, what closes
//! the connection, and R4c's reconnection pace. The I/O shell
//! (`net::grp`) connects, moves bytes and reads the clock; it hands every
//! `now` (Unix ns) in. Which requests to send and what a Gap Response
//! means for a hole are the engine's (`grp::on_gap_response`), not this
//! machine's: it only delivers the responses.
//!
//! The shell's loop: while no socket is open, `poll_connect` says when to
//! connect; then `connected` (or `connect_failed`), then `on_bytes` with
//! what each read returned, `poll` between reads, `send_request` when the
//! engine asks, and `closed` when the socket closes. Whatever the machine
//! appends to `out` is written to the socket. After an event
//! [`GrpEvent::Refused`] or [`GrpEvent::Closed`] the shell closes the
//! socket: the machine is `Down` already.

use super::grp::GapRequest;
use super::session::{
    encode_block, BlockDecoder, GapCounts, GapStatus, Login, LoginStatus, SessionError,
    SessionMessage, HEARTBEAT,
};

const SECOND_NS: i64 = 1_000_000_000;
/// R4c: a heartbeat whenever tickgate has sent nothing for 1 s.
pub const HEARTBEAT_NS: i64 = SECOND_NS;
/// R4c: 5 s without a whole block from the server: the connection is dead.
pub const SILENCE_NS: i64 = 5 * SECOND_NS;
/// R4c (R5's pace): the first wait between attempts' starts.
pub const PACE_BASE_NS: i64 = SECOND_NS;
/// R4c: the wait doubles up to 60 s...
pub const PACE_MAX_NS: i64 = 60 * SECOND_NS;
/// ...and is back to its base after 60 s logged in.
pub const PACE_RESET_NS: i64 = 60 * SECOND_NS;

/// Where the connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpState {
    /// No socket; the next attempt starts at `not_before` at the earliest.
    Down { not_before: i64 },
    /// The shell is connecting (the attempt started at `started`).
    Connecting { started: i64 },
    /// Connected, the Login sent at `since`; no Login Response yet.
    LoggingIn { since: i64 },
    /// Login Response `A` arrived at `since`.
    LoggedIn { since: i64 },
}

/// Why the machine ended a connection (counted by reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// R4c: the server's Hdr Length is below 8.
    HeaderLength,
    /// R4c: a block or message that does not parse.
    Unparsable(SessionError),
    /// R4c: a message that is not a Login Response, Gap Response or
    /// heartbeat (or a Gap Response before the login was accepted: it
    /// answers nothing).
    Unexpected { kind: u8 },
    /// R4c: 5 s without a whole block from the server (also while the
    /// Login waits for its response: a server that never answers is dead).
    Silence,
    /// The socket closed or failed (the shell's `closed`).
    Socket,
}

/// What the connection reports to its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpEvent {
    /// Login Response `A`: requests may be sent.
    LoggedIn,
    /// A Login Response other than `A` (R4c: a failed connection; the
    /// server is about to close it).
    Refused(LoginStatus),
    /// A Gap Response, as the server sent it (the engine matches it with
    /// its outstanding request).
    Response {
        unit: u8,
        sequence: u32,
        count: u16,
        status: GapStatus,
    },
    /// The connection is over (not logged in any more).
    Closed(CloseReason),
}

/// Login failures by Login Response status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoginFailures {
    /// `N`: username or password not authorized.
    pub not_authorized: u64,
    /// `B`: the session is already in use.
    pub session_in_use: u64,
    /// `S`: invalid session.
    pub invalid_session: u64,
    /// Any other status.
    pub other: u64,
}

/// Gap Responses by status (R4c's table, `GAP_STATUSES` order, then any
/// other status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponsesByStatus(pub GapCounts);

impl ResponsesByStatus {
    /// The responses of status `status` (every undocumented status
    /// together).
    pub fn of(&self, status: GapStatus) -> u64 {
        self.0[status.slot()]
    }
}

/// Closes by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Closes {
    pub header_length: u64,
    pub unparsable: u64,
    pub unexpected: u64,
    pub silence: u64,
    pub socket: u64,
}

/// R6's GRP counters that the connection sees (the engine keeps the rest:
/// responses dropped, the count limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrpCounts {
    /// Connection attempts started.
    pub connects: u64,
    /// Attempts after the first: R6's reconnections.
    pub reconnections: u64,
    /// Attempts whose TCP connect failed.
    pub connect_failures: u64,
    /// Login Responses `A`.
    pub logins: u64,
    pub login_failures: LoginFailures,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Gap Requests sent.
    pub requests: u64,
    pub responses: ResponsesByStatus,
    pub closes: Closes,
    /// Whether the connection is logged in now.
    pub logged_in: bool,
}

/// The GRP connection's machine (R4c).
#[derive(Debug)]
pub struct GrpConnection {
    login: Login,
    state: GrpState,
    /// The wait from the next attempt's start to the one after it.
    delay_ns: i64,
    pace_base_ns: i64,
    /// When the current (or last) attempt started.
    attempt_started: i64,
    last_sent: i64,
    /// The last whole block from the server (or the connect).
    last_heard: i64,
    decoder: BlockDecoder,
    msgs: Vec<SessionMessage>,
    counts: GrpCounts,
}

impl GrpConnection {
    /// Down, due to connect at once; R4c's pace from 1 s.
    pub fn new(login: Login) -> GrpConnection {
        GrpConnection::with_pace_base(login, PACE_BASE_NS)
    }

    /// As `new`, the pace starting at `pace_base_ns` instead of 1 s and
    /// doubling up to 60 s all the same (tests of the shell that must not
    /// wait seconds; a venue cuts off a login that reconnects in a loop).
    pub fn with_pace_base(login: Login, pace_base_ns: i64) -> GrpConnection {
        let base = pace_base_ns.clamp(1, PACE_MAX_NS);
        GrpConnection {
            login,
            state: GrpState::Down {
                not_before: i64::MIN,
            },
            delay_ns: base,
            pace_base_ns: base,
            attempt_started: i64::MIN,
            last_sent: 0,
            last_heard: 0,
            decoder: BlockDecoder::new(),
            msgs: Vec::new(),
            counts: GrpCounts::default(),
        }
    }

    pub fn state(&self) -> GrpState {
        self.state
    }

    pub fn is_logged_in(&self) -> bool {
        matches!(self.state, GrpState::LoggedIn { .. })
    }

    pub fn counts(&self) -> GrpCounts {
        GrpCounts {
            logged_in: self.is_logged_in(),
            ..self.counts
        }
    }

    /// Whether the shell should connect now: down, and the pace allows
    /// it. `true` starts the attempt (state `Connecting`), and the next
    /// one waits from this start (R4c: at the earliest the wait after the
    /// previous attempt started, 1 s doubling up to 60 s).
    pub fn poll_connect(&mut self, now: i64) -> bool {
        let GrpState::Down { not_before } = self.state else {
            return false;
        };
        if now < not_before {
            return false;
        }
        if self.counts.connects > 0 {
            self.counts.reconnections += 1;
        }
        self.counts.connects += 1;
        self.attempt_started = now;
        self.state = GrpState::Connecting { started: now };
        true
    }

    /// The TCP connection is open: the Login is appended to `out` (R4c:
    /// the first block tickgate sends).
    pub fn connected(&mut self, now: i64, out: &mut Vec<u8>) {
        if !matches!(self.state, GrpState::Connecting { .. }) {
            return;
        }
        encode_block(&[SessionMessage::Login(self.login)], out).expect("a Login fits a block");
        self.decoder = BlockDecoder::new();
        self.last_sent = now;
        self.last_heard = now;
        self.state = GrpState::LoggingIn { since: now };
    }

    /// The TCP connect failed: down until the pace allows the next.
    pub fn connect_failed(&mut self, _now: i64) {
        if matches!(self.state, GrpState::Connecting { .. }) {
            self.counts.connect_failures += 1;
            self.go_down(None);
        }
    }

    /// The socket closed or failed. `Some(Closed(Socket))` if the machine
    /// had not ended the connection itself.
    pub fn closed(&mut self, now: i64) -> Option<GrpEvent> {
        match self.state {
            GrpState::Down { .. } => None,
            GrpState::Connecting { .. } => {
                self.connect_failed(now);
                None
            }
            GrpState::LoggingIn { .. } | GrpState::LoggedIn { .. } => {
                Some(self.close(now, CloseReason::Socket))
            }
        }
    }

    /// Appends the block of `request` to `out` (`false`, nothing written,
    /// when not logged in: R4c, a request while the connection is not
    /// logged in is void).
    pub fn send_request(&mut self, now: i64, request: &GapRequest, out: &mut Vec<u8>) -> bool {
        if !self.is_logged_in() {
            return false;
        }
        encode_block(
            &[SessionMessage::GapRequest {
                unit: request.unit,
                sequence: request.sequence,
                count: request.count,
            }],
            out,
        )
        .expect("a Gap Request fits a block");
        self.counts.requests += 1;
        self.last_sent = now;
        true
    }

    /// The clock's rules: `Closed(Silence)` after 5 s without a whole
    /// block from the server; once logged in, a heartbeat appended to
    /// `out` after 1 s without sending.
    pub fn poll(&mut self, now: i64, out: &mut Vec<u8>) -> Option<GrpEvent> {
        match self.state {
            GrpState::LoggingIn { .. } | GrpState::LoggedIn { .. } => {}
            _ => return None,
        }
        if now.saturating_sub(self.last_heard) >= SILENCE_NS {
            return Some(self.close(now, CloseReason::Silence));
        }
        if self.is_logged_in() && now.saturating_sub(self.last_sent) >= HEARTBEAT_NS {
            out.extend_from_slice(&HEARTBEAT);
            self.counts.heartbeats += 1;
            self.last_sent = now;
        }
        None
    }

    /// What one read returned (blocks may be split anywhere across
    /// reads). Events are appended to `events`; after a `Refused` or a
    /// `Closed` the rest of the bytes are ignored.
    pub fn on_bytes(&mut self, now: i64, bytes: &[u8], events: &mut Vec<GrpEvent>) {
        if !matches!(
            self.state,
            GrpState::LoggingIn { .. } | GrpState::LoggedIn { .. }
        ) {
            return;
        }
        self.decoder.push(bytes);
        loop {
            let block = match self.decoder.next_block() {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(SessionError::HeaderLength { .. }) => {
                    events.push(self.close(now, CloseReason::HeaderLength));
                    return;
                }
                Err(e) => {
                    events.push(self.close(now, CloseReason::Unparsable(e)));
                    return;
                }
            };
            self.last_heard = now;
            self.msgs.clear();
            let mut bad = None;
            for m in block.messages() {
                match m {
                    Ok(m) => self.msgs.push(m),
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = bad {
                events.push(self.close(now, CloseReason::Unparsable(e)));
                return;
            }
            for i in 0..self.msgs.len() {
                let m = self.msgs[i];
                if let Some(e) = self.on_message(now, m) {
                    let over = matches!(e, GrpEvent::Refused(_) | GrpEvent::Closed(_));
                    events.push(e);
                    if over {
                        return;
                    }
                }
            }
        }
    }

    fn on_message(&mut self, now: i64, m: SessionMessage) -> Option<GrpEvent> {
        let logged_in = self.is_logged_in();
        match m {
            SessionMessage::LoginResponse(LoginStatus::Accepted) if !logged_in => {
                self.counts.logins += 1;
                self.state = GrpState::LoggedIn { since: now };
                Some(GrpEvent::LoggedIn)
            }
            SessionMessage::LoginResponse(status) if !logged_in => {
                let f = &mut self.counts.login_failures;
                *match status {
                    LoginStatus::NotAuthorized => &mut f.not_authorized,
                    LoginStatus::SessionInUse => &mut f.session_in_use,
                    LoginStatus::InvalidSession => &mut f.invalid_session,
                    LoginStatus::Accepted | LoginStatus::Other(_) => &mut f.other,
                } += 1;
                self.go_down(None);
                Some(GrpEvent::Refused(status))
            }
            // A Login Response once logged in is one of R4c's allowed
            // messages: nothing to do with it.
            SessionMessage::LoginResponse(_) => None,
            SessionMessage::GapResponse {
                unit,
                sequence,
                count,
                status,
            } if logged_in => {
                self.counts.responses.0[status.slot()] += 1;
                Some(GrpEvent::Response {
                    unit,
                    sequence,
                    count,
                    status,
                })
            }
            other => Some(self.close(now, CloseReason::Unexpected { kind: other.kind() })),
        }
    }

    /// Ends the connection for `why` (counted) and goes down.
    fn close(&mut self, now: i64, why: CloseReason) -> GrpEvent {
        let c = &mut self.counts.closes;
        *match why {
            CloseReason::HeaderLength => &mut c.header_length,
            CloseReason::Unparsable(_) => &mut c.unparsable,
            CloseReason::Unexpected { .. } => &mut c.unexpected,
            CloseReason::Silence => &mut c.silence,
            CloseReason::Socket => &mut c.socket,
        } += 1;
        let since = match self.state {
            GrpState::LoggedIn { since } => Some(since),
            _ => None,
        };
        self.go_down(since.map(|s| now.saturating_sub(s)));
        GrpEvent::Closed(why)
    }

    /// R4c: down; the next attempt at the earliest `delay` after this
    /// attempt's start, the delay doubling up to 60 s, or back to its base
    /// when the connection had been logged in for 60 s (`logged_in_for`).
    fn go_down(&mut self, logged_in_for: Option<i64>) {
        if logged_in_for.is_some_and(|d| d >= PACE_RESET_NS) {
            self.delay_ns = self.pace_base_ns;
        }
        let not_before = self.attempt_started.saturating_add(self.delay_ns);
        self.delay_ns = self.delay_ns.saturating_mul(2).min(PACE_MAX_NS);
        self.state = GrpState::Down { not_before };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cboe_pitch::frame::FrameError;

    const T0: i64 = 1_784_122_200_000_000_000;
    const S: i64 = SECOND_NS;
    const MS: i64 = 1_000_000;

    fn login() -> Login {
        Login::new("0006", "MKDA", "secret").unwrap()
    }

    fn block(msgs: &[SessionMessage]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_block(msgs, &mut out).unwrap();
        out
    }

    fn login_response(status: u8) -> Vec<u8> {
        block(&[SessionMessage::LoginResponse(LoginStatus::from_byte(
            status,
        ))])
    }

    fn response(unit: u8, sequence: u32, count: u16, status: u8) -> SessionMessage {
        SessionMessage::GapResponse {
            unit,
            sequence,
            count,
            status: GapStatus::from_byte(status),
        }
    }

    fn bytes(c: &mut GrpConnection, now: i64, b: &[u8]) -> Vec<GrpEvent> {
        let mut ev = Vec::new();
        c.on_bytes(now, b, &mut ev);
        ev
    }

    /// Connected at `now`, logged in at `now` too.
    fn logged_in(c: &mut GrpConnection, now: i64) {
        assert!(c.poll_connect(now));
        c.connected(now, &mut Vec::new());
        assert_eq!(bytes(c, now, &login_response(b'A')), [GrpEvent::LoggedIn]);
    }

    /// R4c: the first block is the Login, with the configured credentials
    /// padded as the contract lays them out; `A` logs in.
    #[test]
    fn the_login_is_the_first_block_and_a_logs_in() {
        let mut c = GrpConnection::new(login());
        assert_eq!(
            c.state(),
            GrpState::Down {
                not_before: i64::MIN
            }
        );
        assert!(c.poll_connect(T0), "connects at once when the feed starts");
        assert_eq!(c.state(), GrpState::Connecting { started: T0 });
        assert!(!c.poll_connect(T0), "one attempt at a time");
        let mut out = Vec::new();
        c.connected(T0 + MS, &mut out);
        assert_eq!(&out[..8], [30, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(&out[8..], b"\x16\x010006MKDA  secret    ");
        assert_eq!(c.state(), GrpState::LoggingIn { since: T0 + MS });
        let mut req = Vec::new();
        let r = GapRequest {
            unit: 1,
            sequence: 14,
            count: 1,
        };
        assert!(!c.send_request(T0 + MS, &r, &mut req), "not logged in yet");
        assert!(req.is_empty());
        assert_eq!(
            bytes(&mut c, T0 + 2 * MS, &login_response(b'A')),
            [GrpEvent::LoggedIn]
        );
        assert_eq!(c.state(), GrpState::LoggedIn { since: T0 + 2 * MS });
        let n = c.counts();
        assert_eq!((n.connects, n.logins, n.logged_in), (1, 1, true));
    }

    /// R4c and `cboe-pitch-grp.pcap`: the request for unit 1, sequence 14,
    /// count 1 is the capture's 17 bytes.
    #[test]
    fn a_request_is_the_captures_block() {
        let mut c = GrpConnection::new(login());
        logged_in(&mut c, T0);
        let mut out = Vec::new();
        let r = GapRequest {
            unit: 1,
            sequence: 14,
            count: 1,
        };
        assert!(c.send_request(T0, &r, &mut out));
        assert_eq!(
            out,
            [
                0x11, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x03, 0x01, 0x0e, 0x00, 0x00,
                0x00, 0x01, 0x00
            ]
        );
        assert_eq!(c.counts().requests, 1);
    }

    /// R4c: any status but `A` is a failed connection, counted by status.
    #[test]
    fn a_login_refused_n_b_s_is_a_failed_connection() {
        let mut c = GrpConnection::with_pace_base(login(), S);
        let mut t = T0;
        for status in [b'N', b'B', b'S', b'Z'] {
            assert!(c.poll_connect(t));
            c.connected(t, &mut Vec::new());
            // Whatever follows the refusal in the same read is ignored.
            let mut b = login_response(status);
            b.extend_from_slice(&login_response(b'A'));
            assert_eq!(
                bytes(&mut c, t, &b),
                [GrpEvent::Refused(LoginStatus::from_byte(status))]
            );
            assert!(matches!(c.state(), GrpState::Down { .. }));
            assert!(!c.is_logged_in());
            assert_eq!(
                c.closed(t),
                None,
                "the socket's close after it adds nothing"
            );
            t += 60 * S;
        }
        let n = c.counts();
        assert_eq!(
            n.login_failures,
            LoginFailures {
                not_authorized: 1,
                session_in_use: 1,
                invalid_session: 1,
                other: 1
            }
        );
        assert_eq!((n.logins, n.connects, n.reconnections), (0, 4, 3));
    }

    /// R4c (R5's pace): each attempt at the earliest 1 s after the previous
    /// one started, the wait doubling up to 60 s, whatever ended it.
    #[test]
    fn the_pace_doubles_from_each_start_up_to_a_minute() {
        let mut c = GrpConnection::new(login());
        let mut t = T0;
        let mut waits = Vec::new();
        for i in 0..9 {
            assert!(c.poll_connect(t));
            // Attempts end in every way: connect refused, login refused,
            // closed by the server.
            match i % 3 {
                0 => c.connect_failed(t + MS),
                1 => {
                    c.connected(t + MS, &mut Vec::new());
                    bytes(&mut c, t + 2 * MS, &login_response(b'N'));
                }
                _ => {
                    c.connected(t + MS, &mut Vec::new());
                    bytes(&mut c, t + 2 * MS, &login_response(b'A'));
                    assert!(c.closed(t + 3 * MS).is_some());
                }
            }
            let GrpState::Down { not_before } = c.state() else {
                panic!("down after {i}")
            };
            assert!(!c.poll_connect(not_before - 1), "not before the pace");
            waits.push((not_before - t) / S);
            t = not_before;
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(c.counts().connect_failures, 3);
    }

    /// R4c: the pace is back to 1 s after 60 s logged in (not before).
    #[test]
    fn the_pace_resets_after_a_minute_logged_in() {
        let mut c = GrpConnection::new(login());
        let mut t = T0;
        for _ in 0..5 {
            assert!(c.poll_connect(t));
            c.connect_failed(t);
            let GrpState::Down { not_before } = c.state() else {
                panic!()
            };
            t = not_before;
        }
        // Waits so far 1, 2, 4, 8, 16: the next is 32 s from this start.
        logged_in(&mut c, t);
        assert!(c.closed(t + 59 * S).is_some());
        assert_eq!(
            c.state(),
            GrpState::Down {
                not_before: t + 32 * S
            }
        );
        t += 32 * S;
        logged_in(&mut c, t);
        assert!(c.closed(t + 60 * S).is_some());
        assert_eq!(
            c.state(),
            GrpState::Down { not_before: t + S },
            "1 s from the start: at once"
        );
        assert!(c.poll_connect(t + 60 * S));
        c.connect_failed(t + 60 * S);
        assert_eq!(
            c.state(),
            GrpState::Down {
                not_before: t + 62 * S
            },
            "and doubling again"
        );
    }

    /// R4c: a heartbeat whenever nothing was sent for 1 s, once logged in;
    /// a request counts as sending.
    #[test]
    fn a_heartbeat_after_a_second_without_sending() {
        let mut c = GrpConnection::new(login());
        assert!(c.poll_connect(T0));
        c.connected(T0, &mut Vec::new());
        let mut out = Vec::new();
        assert_eq!(c.poll(T0 + 2 * S, &mut out), None);
        assert!(out.is_empty(), "none before the login is accepted");
        bytes(&mut c, T0 + 2 * S, &login_response(b'A'));
        // Nothing sent since the Login at T0: one at once.
        assert_eq!(c.poll(T0 + 2 * S, &mut out), None);
        assert_eq!(out, HEARTBEAT);
        out.clear();
        assert_eq!(c.poll(T0 + 3 * S - 1, &mut out), None);
        assert!(out.is_empty(), "1 s is not over since the last");
        assert_eq!(c.poll(T0 + 3 * S, &mut out), None);
        assert_eq!(out, HEARTBEAT);
        out.clear();
        let r = GapRequest {
            unit: 2,
            sequence: 5,
            count: 3,
        };
        assert!(c.send_request(T0 + 3 * S + 500 * MS, &r, &mut out));
        out.clear();
        // The server keeps talking so that silence does not interfere.
        bytes(&mut c, T0 + 4 * S, &HEARTBEAT);
        c.poll(T0 + 4 * S, &mut out);
        assert!(out.is_empty(), "the request was sent 0.5 s ago");
        c.poll(T0 + 4 * S + 500 * MS, &mut out);
        assert_eq!(out, HEARTBEAT);
        assert_eq!(c.counts().heartbeats, 3);
    }

    /// R4c: 5 s without a whole block from the server closes; bytes that
    /// never complete a block do not count.
    #[test]
    fn five_seconds_without_a_whole_block_is_a_dead_connection() {
        let mut c = GrpConnection::new(login());
        logged_in(&mut c, T0);
        let mut out = Vec::new();
        assert!(bytes(&mut c, T0 + 4 * S, &HEARTBEAT).is_empty());
        assert!(bytes(&mut c, T0 + 8 * S, &HEARTBEAT[..5]).is_empty());
        assert_eq!(c.poll(T0 + 9 * S - 1, &mut out), None);
        assert_eq!(
            c.poll(T0 + 9 * S, &mut out),
            Some(GrpEvent::Closed(CloseReason::Silence))
        );
        assert!(matches!(c.state(), GrpState::Down { .. }));
        assert_eq!(c.poll(T0 + 20 * S, &mut out), None, "down: nothing more");
        assert_eq!(c.closed(T0 + 20 * S), None);
        assert_eq!(c.counts().closes.silence, 1);
        // A server that never answers the Login is dead after 5 s too.
        let GrpState::Down { not_before } = c.state() else {
            panic!()
        };
        assert!(c.poll_connect(not_before));
        c.connected(not_before, &mut Vec::new());
        assert_eq!(
            c.poll(not_before + 5 * S, &mut out),
            Some(GrpEvent::Closed(CloseReason::Silence))
        );
    }

    /// Blocks split anywhere across reads give the same events, and the
    /// Gap Responses come out as sent.
    #[test]
    fn blocks_split_across_reads() {
        let mut stream = login_response(b'A');
        stream.extend_from_slice(&HEARTBEAT);
        stream.extend_from_slice(&block(&[
            response(1, 14, 1, b'A'),
            response(2, 9, 50, b'C'),
        ]));
        stream.extend_from_slice(&block(&[response(3, 1, 1, b'Q')]));
        let want = [
            GrpEvent::LoggedIn,
            GrpEvent::Response {
                unit: 1,
                sequence: 14,
                count: 1,
                status: GapStatus::Accepted,
            },
            GrpEvent::Response {
                unit: 2,
                sequence: 9,
                count: 50,
                status: GapStatus::CountTooLarge,
            },
            GrpEvent::Response {
                unit: 3,
                sequence: 1,
                count: 1,
                status: GapStatus::Other(b'Q'),
            },
        ];
        for cut in 0..=stream.len() {
            for cut2 in [cut, (cut + 7).min(stream.len())] {
                let mut c = GrpConnection::new(login());
                assert!(c.poll_connect(T0));
                c.connected(T0, &mut Vec::new());
                let mut ev = Vec::new();
                for part in [&stream[..cut], &stream[cut..cut2], &stream[cut2..]] {
                    c.on_bytes(T0, part, &mut ev);
                }
                assert_eq!(ev, want, "cut at {cut} and {cut2}");
                let r = c.counts().responses;
                let of = |s: u8| r.of(GapStatus::from_byte(s));
                assert_eq!((of(b'A'), of(b'C'), of(b'Q')), (1, 1, 1));
            }
        }
    }

    fn closed_by(server: &[u8]) -> (Vec<GrpEvent>, GrpConnection) {
        let mut c = GrpConnection::new(login());
        logged_in(&mut c, T0);
        let mut b = server.to_vec();
        b.extend_from_slice(&block(&[response(1, 1, 1, b'A')]));
        let ev = bytes(&mut c, T0, &b);
        assert!(matches!(c.state(), GrpState::Down { .. }));
        let mut out = Vec::new();
        assert!(
            !c.send_request(
                T0,
                &GapRequest {
                    unit: 1,
                    sequence: 1,
                    count: 1
                },
                &mut out
            ),
            "void once closed"
        );
        (ev, c)
    }

    /// R4c: a Hdr Length below 8, a block that does not parse, or a message
    /// that is not a Login Response, Gap Response or heartbeat closes the
    /// connection (and what follows is not read).
    #[test]
    fn garbage_closes_the_connection() {
        let (ev, c) = closed_by(&[7, 0]);
        assert_eq!(ev, [GrpEvent::Closed(CloseReason::HeaderLength)]);
        assert_eq!(c.counts().closes.header_length, 1);

        let mut b = block(&[response(1, 1, 1, b'A')]);
        b[2] = 2; // Hdr Count 2, one message
        let (ev, c) = closed_by(&b);
        assert_eq!(
            ev,
            [GrpEvent::Closed(CloseReason::Unparsable(
                SessionError::Frame(FrameError::MissingMessages { found: 1, count: 2 })
            ))]
        );
        assert_eq!(c.counts().closes.unparsable, 1);

        // A Gap Response cut short (its size byte says 9).
        let mut b = block(&[response(1, 1, 1, b'A')]);
        b.truncate(b.len() - 1);
        b[0] -= 1;
        b[8] = 9;
        let (ev, _) = closed_by(&b);
        assert!(
            matches!(
                ev[..],
                [GrpEvent::Closed(CloseReason::Unparsable(
                    SessionError::TooShort { .. }
                ))]
            ),
            "{ev:?}"
        );

        for m in [
            SessionMessage::SpinImageAvailable { sequence: 3 },
            SessionMessage::GapRequest {
                unit: 1,
                sequence: 1,
                count: 1,
            },
        ] {
            let (ev, c) = closed_by(&block(&[m]));
            assert_eq!(
                ev,
                [GrpEvent::Closed(CloseReason::Unexpected { kind: m.kind() })]
            );
            assert_eq!(c.counts().closes.unexpected, 1);
        }
        // A type no table defines.
        let (ev, _) = closed_by(&[10, 0, 1, 0, 0, 0, 0, 0, 2, 0x7F]);
        assert_eq!(
            ev,
            [GrpEvent::Closed(CloseReason::Unexpected { kind: 0x7F })]
        );
    }

    /// Before the Login Response, a Gap Response answers nothing: closed.
    /// Once logged in, another Login Response is allowed and ignored.
    #[test]
    fn messages_out_of_their_place() {
        let mut c = GrpConnection::new(login());
        assert!(c.poll_connect(T0));
        c.connected(T0, &mut Vec::new());
        assert_eq!(
            bytes(&mut c, T0, &block(&[response(1, 1, 1, b'A')])),
            [GrpEvent::Closed(CloseReason::Unexpected {
                kind: super::super::session::TYPE_GAP_RESPONSE
            })]
        );
        let mut c = GrpConnection::new(login());
        logged_in(&mut c, T0);
        assert!(bytes(&mut c, T0, &login_response(b'N')).is_empty());
        assert!(c.is_logged_in());
    }

    /// The socket's close ends a connection once; down, reads are ignored.
    #[test]
    fn the_socket_closing() {
        let mut c = GrpConnection::new(login());
        assert!(c.poll_connect(T0));
        assert_eq!(c.closed(T0), None, "while connecting: a failed connect");
        assert_eq!(c.counts().connect_failures, 1);
        let GrpState::Down { not_before } = c.state() else {
            panic!()
        };
        logged_in(&mut c, not_before);
        assert_eq!(
            c.closed(not_before + S),
            Some(GrpEvent::Closed(CloseReason::Socket))
        );
        assert_eq!(c.closed(not_before + S), None);
        assert!(bytes(&mut c, not_before + S, &login_response(b'A')).is_empty());
        let n = c.counts();
        assert_eq!((n.closes.socket, n.logged_in, n.logins), (1, false, 1));
    }
}
