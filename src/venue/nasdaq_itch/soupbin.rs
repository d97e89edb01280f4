//! SoupBinTCP 4.00 framing (recovery.md R5), the TCP session layer GLIMPSE
//! 5.0 runs over: pure codec, no I/O.
//!
//! Every packet is a u16 big-endian length (of what follows: the type byte
//! and the payload), a u8 type and the payload. R5's packets:
//!
//! | packet | type | direction | payload |
//! |---|---|---|---|
//! | Login Request | `L` | client | username char[6], password char[10], requested session char[10], requested sequence number char[20] |
//! | Login Accepted | `A` | server | session char[10], sequence number char[20] |
//! | Login Rejected | `J` | server | reason char (`A` not authorized, `S` session not available) |
//! | Sequenced Data | `S` | server | one message |
//! | Server Heartbeat | `H` | server | none |
//! | End of Session | `Z` | server | none |
//! | Debug | `+` | either | text |
//! | Client Heartbeat | `R` | client | none |
//! | Logout Request | `O` | client | none |
//!
//! Alphanumeric fields are left-aligned and space-padded; numeric fields
//! are ASCII decimal, right-aligned and space-padded.
//!
//! [`Decoder`] takes bytes as they arrive from a TCP stream, split
//! anywhere, and yields whole packets. Its length bound is checked before
//! anything is buffered for a packet: a length field larger than any legal
//! packet is an error at once (garbage never makes it allocate or wait for
//! bytes that will not come).

use std::fmt;

use thiserror::Error;

use crate::wire::SessionId;

pub const TYPE_LOGIN_REQUEST: u8 = b'L';
pub const TYPE_LOGIN_ACCEPTED: u8 = b'A';
pub const TYPE_LOGIN_REJECTED: u8 = b'J';
pub const TYPE_SEQUENCED_DATA: u8 = b'S';
pub const TYPE_SERVER_HEARTBEAT: u8 = b'H';
pub const TYPE_END_OF_SESSION: u8 = b'Z';
pub const TYPE_DEBUG: u8 = b'+';
pub const TYPE_CLIENT_HEARTBEAT: u8 = b'R';
pub const TYPE_LOGOUT_REQUEST: u8 = b'O';

/// Login Rejected reasons.
pub const REJECT_NOT_AUTHORIZED: u8 = b'A';
pub const REJECT_SESSION_UNAVAILABLE: u8 = b'S';

/// Payload sizes of the fixed-size packets (after the type byte).
pub const LOGIN_REQUEST_PAYLOAD: usize = 6 + 10 + 10 + 20;
pub const LOGIN_ACCEPTED_PAYLOAD: usize = 10 + 20;
pub const LOGIN_REJECTED_PAYLOAD: usize = 1;

/// Width of a numeric field (sequence numbers).
pub const NUMERIC_WIDTH: usize = 20;

/// The default bound on a packet's length field (type byte + payload): a
/// Sequenced Data packet carries one ITCH or GLIMPSE message (at most 50
/// bytes in ITCH 5.0), and Debug text is the only free-size payload. 1 KiB
/// leaves room for both; anything larger is garbage.
pub const DEFAULT_MAX_PACKET_LEN: u16 = 1024;

/// Why bytes are not a SoupBinTCP packet of R5's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum SoupError {
    /// A length field of 0: every packet has a type byte.
    #[error("SoupBinTCP packet with length 0 (no type byte)")]
    EmptyPacket,
    /// The length field is beyond the decoder's bound.
    #[error("SoupBinTCP packet length {len} exceeds the limit of {max} bytes")]
    TooLong { len: usize, max: usize },
    /// A type byte R5's table does not define.
    #[error("unknown SoupBinTCP packet type 0x{kind:02x}")]
    UnknownType { kind: u8 },
    /// A fixed-size packet with another payload size.
    #[error("SoupBinTCP packet '{}' has a {len}-byte payload, expected {expected}", *kind as char)]
    BadLength {
        kind: u8,
        len: usize,
        expected: usize,
    },
    /// A numeric field that is not right-aligned ASCII decimal.
    #[error("SoupBinTCP packet '{}': {error}", *kind as char)]
    BadNumber { kind: u8, error: NumericError },
    /// An alphanumeric field that is not printable ASCII.
    #[error("SoupBinTCP packet '{}': field is not printable ASCII", *kind as char)]
    BadText { kind: u8 },
    /// A Login Rejected reason other than `A` or `S`.
    #[error("SoupBinTCP Login Rejected with unknown reason 0x{reason:02x}")]
    BadRejectReason { reason: u8 },
    /// Encoding: a field does not fit its width.
    #[error("SoupBinTCP {field} {len} bytes long does not fit {width}")]
    FieldTooLong {
        field: &'static str,
        len: usize,
        width: usize,
    },
    /// Encoding: a payload longer than a u16 length can frame.
    #[error("SoupBinTCP payload of {len} bytes is too long to frame")]
    PayloadTooLong { len: usize },
}

/// Why a numeric field (char[20], right-aligned ASCII decimal) does not
/// parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum NumericError {
    #[error("numeric field is empty (all spaces)")]
    Empty,
    #[error("numeric field has a byte 0x{byte:02x} that is not a digit or leading space")]
    NotDigit { byte: u8 },
    #[error("numeric field overflows 64 bits")]
    Overflow,
    #[error("numeric field is {len} bytes, expected {NUMERIC_WIDTH}")]
    Width { len: usize },
}

/// `v` as a numeric field: ASCII decimal, right-aligned, space-padded.
pub fn numeric_field(v: u64) -> [u8; NUMERIC_WIDTH] {
    let mut out = [b' '; NUMERIC_WIDTH];
    let mut v = v;
    let mut i = NUMERIC_WIDTH;
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out
}

/// Parses a numeric field: leading spaces, then at least one digit, and
/// nothing else (u64::MAX has 20 digits: the width always fits, a larger
/// value is an overflow).
pub fn parse_numeric_field(field: &[u8]) -> Result<u64, NumericError> {
    if field.len() != NUMERIC_WIDTH {
        return Err(NumericError::Width { len: field.len() });
    }
    let digits = match field.iter().position(|&b| b != b' ') {
        Some(i) => &field[i..],
        None => return Err(NumericError::Empty),
    };
    let mut v: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(NumericError::NotDigit { byte: b });
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add((b - b'0') as u64))
            .ok_or(NumericError::Overflow)?;
    }
    Ok(v)
}

/// `s` as an alphanumeric field of `N` bytes: left-aligned, space-padded.
pub fn alpha_field<const N: usize>(field: &'static str, s: &[u8]) -> Result<[u8; N], SoupError> {
    if s.len() > N {
        return Err(SoupError::FieldTooLong {
            field,
            len: s.len(),
            width: N,
        });
    }
    let mut out = [b' '; N];
    out[..s.len()].copy_from_slice(s);
    Ok(out)
}

/// An alphanumeric field without its padding.
pub fn trim_alpha(field: &[u8]) -> &[u8] {
    let end = field.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &field[..end]
}

/// A Login Request's fields as on the wire (padded).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LoginRequest {
    pub username: [u8; 6],
    pub password: [u8; 10],
    /// All spaces: the current session.
    pub session: SessionId,
    pub sequence: u64,
}

impl LoginRequest {
    /// A request for `session` (`None`: the current one, all spaces) from
    /// `sequence` on; an error when the username exceeds 6 bytes or the
    /// password 10.
    pub fn new(
        username: &str,
        password: &str,
        session: Option<SessionId>,
        sequence: u64,
    ) -> Result<LoginRequest, SoupError> {
        Ok(LoginRequest {
            username: alpha_field("username", username.as_bytes())?,
            password: alpha_field("password", password.as_bytes())?,
            session: session.unwrap_or(SessionId([b' '; 10])),
            sequence,
        })
    }

    /// The username without its padding.
    pub fn username(&self) -> &[u8] {
        trim_alpha(&self.username)
    }

    /// The password without its padding.
    pub fn password(&self) -> &[u8] {
        trim_alpha(&self.password)
    }

    /// The requested session, `None` for all spaces (the current one).
    pub fn requested_session(&self) -> Option<SessionId> {
        (self.session.0 != [b' '; 10]).then_some(self.session)
    }
}

impl fmt::Debug for LoginRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password is never printed.
        f.debug_struct("LoginRequest")
            .field("username", &String::from_utf8_lossy(self.username()))
            .field("session", &self.session)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

/// One SoupBinTCP packet of R5's table. Borrowed payloads point into the
/// decoder's buffer (or the caller's bytes when encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    LoginRequest(LoginRequest),
    LoginAccepted {
        session: SessionId,
        sequence: u64,
    },
    /// `reason`: [`REJECT_NOT_AUTHORIZED`] or [`REJECT_SESSION_UNAVAILABLE`].
    LoginRejected {
        reason: u8,
    },
    /// One message (GLIMPSE: an ITCH 5.0 message or End of Snapshot).
    SequencedData(&'a [u8]),
    ServerHeartbeat,
    EndOfSession,
    Debug(&'a [u8]),
    ClientHeartbeat,
    LogoutRequest,
}

impl Packet<'_> {
    /// The type byte.
    pub fn kind(&self) -> u8 {
        match self {
            Packet::LoginRequest(_) => TYPE_LOGIN_REQUEST,
            Packet::LoginAccepted { .. } => TYPE_LOGIN_ACCEPTED,
            Packet::LoginRejected { .. } => TYPE_LOGIN_REJECTED,
            Packet::SequencedData(_) => TYPE_SEQUENCED_DATA,
            Packet::ServerHeartbeat => TYPE_SERVER_HEARTBEAT,
            Packet::EndOfSession => TYPE_END_OF_SESSION,
            Packet::Debug(_) => TYPE_DEBUG,
            Packet::ClientHeartbeat => TYPE_CLIENT_HEARTBEAT,
            Packet::LogoutRequest => TYPE_LOGOUT_REQUEST,
        }
    }

    /// Appends the framed packet (length, type, payload) to `out`. Fails
    /// only for a Sequenced Data or Debug payload too long to frame (more
    /// than 65,534 bytes); `out` is then unchanged.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), SoupError> {
        let mut frame = |payload: &[&[u8]]| -> Result<(), SoupError> {
            let len: usize = payload.iter().map(|p| p.len()).sum();
            if len + 1 > u16::MAX as usize {
                return Err(SoupError::PayloadTooLong { len });
            }
            out.reserve(3 + len);
            out.extend_from_slice(&((len + 1) as u16).to_be_bytes());
            out.push(self.kind());
            for p in payload {
                out.extend_from_slice(p);
            }
            Ok(())
        };
        match self {
            Packet::LoginRequest(l) => frame(&[
                &l.username,
                &l.password,
                &l.session.0,
                &numeric_field(l.sequence),
            ]),
            Packet::LoginAccepted { session, sequence } => {
                frame(&[&session.0, &numeric_field(*sequence)])
            }
            Packet::LoginRejected { reason } => frame(&[&[*reason]]),
            Packet::SequencedData(p) | Packet::Debug(p) => frame(&[p]),
            Packet::ServerHeartbeat
            | Packet::EndOfSession
            | Packet::ClientHeartbeat
            | Packet::LogoutRequest => frame(&[]),
        }
    }

    /// The framed packet in a new buffer.
    pub fn encode_to_vec(&self) -> Result<Vec<u8>, SoupError> {
        let mut out = Vec::new();
        self.encode(&mut out)?;
        Ok(out)
    }

    /// The packet of type `kind` with `payload` (what follows the type
    /// byte): exact sizes for the fixed-size packets, numbers and text
    /// checked.
    pub fn parse(kind: u8, payload: &[u8]) -> Result<Packet<'_>, SoupError> {
        let exact = |expected: usize| {
            if payload.len() == expected {
                Ok(())
            } else {
                Err(SoupError::BadLength {
                    kind,
                    len: payload.len(),
                    expected,
                })
            }
        };
        let number = |field: &[u8]| {
            parse_numeric_field(field).map_err(|error| SoupError::BadNumber { kind, error })
        };
        let text = |field: &[u8]| {
            if field.iter().all(|b| (b' '..=b'~').contains(b)) {
                Ok(())
            } else {
                Err(SoupError::BadText { kind })
            }
        };
        Ok(match kind {
            TYPE_LOGIN_REQUEST => {
                exact(LOGIN_REQUEST_PAYLOAD)?;
                text(&payload[..26])?;
                Packet::LoginRequest(LoginRequest {
                    username: payload[0..6].try_into().expect("6 bytes"),
                    password: payload[6..16].try_into().expect("10 bytes"),
                    session: SessionId(payload[16..26].try_into().expect("10 bytes")),
                    sequence: number(&payload[26..46])?,
                })
            }
            TYPE_LOGIN_ACCEPTED => {
                exact(LOGIN_ACCEPTED_PAYLOAD)?;
                text(&payload[..10])?;
                Packet::LoginAccepted {
                    session: SessionId(payload[0..10].try_into().expect("10 bytes")),
                    sequence: number(&payload[10..30])?,
                }
            }
            TYPE_LOGIN_REJECTED => {
                exact(LOGIN_REJECTED_PAYLOAD)?;
                let reason = payload[0];
                if reason != REJECT_NOT_AUTHORIZED && reason != REJECT_SESSION_UNAVAILABLE {
                    return Err(SoupError::BadRejectReason { reason });
                }
                Packet::LoginRejected { reason }
            }
            TYPE_SEQUENCED_DATA => Packet::SequencedData(payload),
            TYPE_DEBUG => Packet::Debug(payload),
            TYPE_SERVER_HEARTBEAT => {
                exact(0)?;
                Packet::ServerHeartbeat
            }
            TYPE_END_OF_SESSION => {
                exact(0)?;
                Packet::EndOfSession
            }
            TYPE_CLIENT_HEARTBEAT => {
                exact(0)?;
                Packet::ClientHeartbeat
            }
            TYPE_LOGOUT_REQUEST => {
                exact(0)?;
                Packet::LogoutRequest
            }
            _ => return Err(SoupError::UnknownType { kind }),
        })
    }
}

/// Incremental decoder: [`Decoder::push`] the bytes a read returned (any
/// split), then take packets with [`Decoder::next_packet`] until it
/// returns `Ok(None)` (more bytes needed). After an error the stream is
/// out of step and cannot be resynchronised: drop the connection.
///
/// Memory: the buffer holds at most one partial packet (bounded by
/// `max_len + 2`) plus the bytes of the last `push`; pushing again without
/// draining keeps growing it, so drain between reads.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Start of the bytes not yet consumed.
    start: usize,
    max_len: usize,
    failed: Option<SoupError>,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder with [`DEFAULT_MAX_PACKET_LEN`].
    pub fn new() -> Decoder {
        Decoder::with_max_len(DEFAULT_MAX_PACKET_LEN)
    }

    /// A decoder refusing length fields above `max_len` (type byte and
    /// payload).
    pub fn with_max_len(max_len: u16) -> Decoder {
        Decoder {
            buf: Vec::with_capacity(4096),
            start: 0,
            max_len: max_len.max(1) as usize,
            failed: None,
        }
    }

    /// The bound on a packet's length field.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Bytes received and not yet returned as packets.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Appends bytes as they arrived from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            // Only the partial packet is kept: a copy of at most
            // `max_len + 2` bytes.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole packet, `Ok(None)` when more bytes are needed. The
    /// length field is checked as soon as its two bytes are in (an error
    /// does not wait for the payload). Once an error is returned, every
    /// later call returns it again.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, SoupError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let rest = &self.buf[self.start..];
        if rest.len() < 2 {
            return Ok(None);
        }
        let len = u16::from_be_bytes([rest[0], rest[1]]) as usize;
        if len == 0 {
            return Err(*self.failed.insert(SoupError::EmptyPacket));
        }
        if len > self.max_len {
            return Err(*self.failed.insert(SoupError::TooLong {
                len,
                max: self.max_len,
            }));
        }
        if rest.len() < 2 + len {
            // Check the type as soon as it is in: an unknown one need not
            // wait for its payload.
            if rest.len() >= 3 {
                if let Err(e) = known_type(rest[2]) {
                    return Err(*self.failed.insert(e));
                }
            }
            return Ok(None);
        }
        let at = self.start;
        self.start += 2 + len;
        let kind = self.buf[at + 2];
        let payload = &self.buf[at + 3..at + 2 + len];
        match Packet::parse(kind, payload) {
            Ok(p) => Ok(Some(p)),
            Err(e) => {
                self.failed = Some(e);
                Err(e)
            }
        }
    }
}

fn known_type(kind: u8) -> Result<(), SoupError> {
    match kind {
        TYPE_LOGIN_REQUEST
        | TYPE_LOGIN_ACCEPTED
        | TYPE_LOGIN_REJECTED
        | TYPE_SEQUENCED_DATA
        | TYPE_SERVER_HEARTBEAT
        | TYPE_END_OF_SESSION
        | TYPE_DEBUG
        | TYPE_CLIENT_HEARTBEAT
        | TYPE_LOGOUT_REQUEST => Ok(()),
        _ => Err(SoupError::UnknownType { kind }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> SessionId {
        SessionId(*b"000010059A")
    }

    fn all_packets() -> Vec<Packet<'static>> {
        vec![
            Packet::LoginRequest(LoginRequest::new("user", "secret", None, 1).unwrap()),
            Packet::LoginRequest(
                LoginRequest::new("abcdef", "0123456789", Some(session()), u64::MAX).unwrap(),
            ),
            Packet::LoginAccepted {
                session: session(),
                sequence: 1,
            },
            Packet::LoginRejected {
                reason: REJECT_NOT_AUTHORIZED,
            },
            Packet::LoginRejected {
                reason: REJECT_SESSION_UNAVAILABLE,
            },
            Packet::SequencedData(b"G                   7"),
            Packet::ServerHeartbeat,
            Packet::EndOfSession,
            Packet::Debug(b"hello"),
            Packet::Debug(b""),
            Packet::ClientHeartbeat,
            Packet::LogoutRequest,
        ]
    }

    #[test]
    fn login_request_layout() {
        let l = LoginRequest::new("user", "secret", None, 1).unwrap();
        let b = Packet::LoginRequest(l).encode_to_vec().unwrap();
        assert_eq!(&b[..3], &[0, 47, b'L']);
        assert_eq!(&b[3..9], b"user  ");
        assert_eq!(&b[9..19], b"secret    ");
        assert_eq!(&b[19..29], b"          ");
        assert_eq!(&b[29..49], b"                   1");
        assert_eq!(b.len(), 49);
        assert_eq!(l.username(), b"user");
        assert_eq!(l.password(), b"secret");
        assert_eq!(l.requested_session(), None);
        assert!(!format!("{l:?}").contains("secret"));
    }

    #[test]
    fn fixed_packets_layout() {
        let a = Packet::LoginAccepted {
            session: session(),
            sequence: 1234,
        }
        .encode_to_vec()
        .unwrap();
        assert_eq!(
            a,
            [&[0u8, 31, b'A'][..], b"000010059A", b"                1234"].concat()
        );
        for (p, kind) in [
            (Packet::ServerHeartbeat, b'H'),
            (Packet::EndOfSession, b'Z'),
            (Packet::ClientHeartbeat, b'R'),
            (Packet::LogoutRequest, b'O'),
        ] {
            assert_eq!(p.encode_to_vec().unwrap(), [0, 1, kind]);
        }
        assert_eq!(
            Packet::LoginRejected { reason: b'A' }
                .encode_to_vec()
                .unwrap(),
            [0, 2, b'J', b'A']
        );
        assert_eq!(
            Packet::SequencedData(b"xyz").encode_to_vec().unwrap(),
            [0, 4, b'S', b'x', b'y', b'z']
        );
        assert_eq!(
            Packet::Debug(b"hi").encode_to_vec().unwrap(),
            [0, 3, b'+', b'h', b'i']
        );
    }

    #[test]
    fn encode_refuses_what_cannot_be_framed() {
        assert_eq!(
            LoginRequest::new("toolong", "x", None, 1),
            Err(SoupError::FieldTooLong {
                field: "username",
                len: 7,
                width: 6
            })
        );
        assert!(LoginRequest::new("u", "01234567890", None, 1).is_err());
        let big = vec![0u8; 65_535];
        let mut out = vec![9];
        assert_eq!(
            Packet::SequencedData(&big).encode(&mut out),
            Err(SoupError::PayloadTooLong { len: 65_535 })
        );
        assert_eq!(out, [9]);
        assert!(Packet::SequencedData(&big[..65_534])
            .encode(&mut out)
            .is_ok());
    }

    #[test]
    fn round_trip_every_packet_at_every_split() {
        let packets = all_packets();
        let mut stream = Vec::new();
        for p in &packets {
            p.encode(&mut stream).unwrap();
        }
        // One byte at a time, and cut in two at every place.
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for b in &stream {
            d.push(std::slice::from_ref(b));
            while let Some(p) = d.next_packet().unwrap() {
                got.push(p.encode_to_vec().unwrap());
            }
        }
        let want: Vec<Vec<u8>> = packets.iter().map(|p| p.encode_to_vec().unwrap()).collect();
        assert_eq!(got, want);
        assert_eq!(d.buffered(), 0);
        for cut in 0..=stream.len() {
            let mut d = Decoder::new();
            let mut n = 0;
            for part in [&stream[..cut], &stream[cut..]] {
                d.push(part);
                while let Some(p) = d.next_packet().unwrap() {
                    assert_eq!(p, packets[n]);
                    n += 1;
                }
            }
            assert_eq!(n, packets.len());
        }
    }

    #[test]
    fn length_bound_fails_before_the_payload() {
        let mut d = Decoder::with_max_len(64);
        d.push(&[0x01, 0x00]); // 256: more than 64, no payload sent
        assert_eq!(
            d.next_packet(),
            Err(SoupError::TooLong { len: 256, max: 64 })
        );
        // Sticky: the stream cannot be resynchronised.
        d.push(&Packet::ServerHeartbeat.encode_to_vec().unwrap());
        assert!(d.next_packet().is_err());
        let mut d = Decoder::new();
        d.push(&[0xff, 0xff]);
        assert!(matches!(
            d.next_packet(),
            Err(SoupError::TooLong { len: 65_535, .. })
        ));
        let mut d = Decoder::new();
        d.push(&[0, 0]);
        assert_eq!(d.next_packet(), Err(SoupError::EmptyPacket));
    }

    #[test]
    fn unknown_type_fails_before_the_payload() {
        let mut d = Decoder::new();
        d.push(&[0, 100, b'x']);
        assert_eq!(d.next_packet(), Err(SoupError::UnknownType { kind: b'x' }));
        let mut d = Decoder::new();
        d.push(&[0, 100]);
        assert_eq!(d.next_packet(), Ok(None));
    }

    #[test]
    fn fixed_size_packets_with_another_size_are_refused() {
        for (kind, len) in [
            (b'H', 1),
            (b'Z', 2),
            (b'R', 1),
            (b'O', 1),
            (b'L', 45),
            (b'A', 31),
            (b'J', 0),
        ] {
            let payload = vec![b'1'; len];
            assert!(
                matches!(
                    Packet::parse(kind, &payload),
                    Err(SoupError::BadLength { .. })
                ),
                "{}",
                kind as char
            );
        }
        assert_eq!(
            Packet::parse(b'J', b"X"),
            Err(SoupError::BadRejectReason { reason: b'X' })
        );
    }

    #[test]
    fn numbers_and_text_are_checked() {
        let mut accepted = Packet::LoginAccepted {
            session: session(),
            sequence: 5,
        }
        .encode_to_vec()
        .unwrap();
        accepted[3 + 10 + 5] = b'x';
        let mut d = Decoder::new();
        d.push(&accepted);
        assert_eq!(
            d.next_packet(),
            Err(SoupError::BadNumber {
                kind: b'A',
                error: NumericError::NotDigit { byte: b'x' }
            })
        );
        let mut login = Packet::LoginRequest(LoginRequest::new("u", "p", None, 1).unwrap())
            .encode_to_vec()
            .unwrap();
        login[4] = 0;
        assert_eq!(
            Packet::parse(b'L', &login[3..]),
            Err(SoupError::BadText { kind: b'L' })
        );
    }

    #[test]
    fn numeric_fields() {
        assert_eq!(&numeric_field(0), b"                   0");
        assert_eq!(&numeric_field(u64::MAX), b"18446744073709551615");
        assert_eq!(parse_numeric_field(&numeric_field(u64::MAX)), Ok(u64::MAX));
        assert_eq!(parse_numeric_field(&numeric_field(42)), Ok(42));
        assert_eq!(parse_numeric_field(b"00000000000000000042"), Ok(42));
        assert_eq!(
            parse_numeric_field(b"18446744073709551616"),
            Err(NumericError::Overflow)
        );
        assert_eq!(
            parse_numeric_field(b"99999999999999999999"),
            Err(NumericError::Overflow)
        );
        assert_eq!(parse_numeric_field(&[b' '; 20]), Err(NumericError::Empty));
        // Left-aligned is not right-aligned.
        assert_eq!(
            parse_numeric_field(b"42                  "),
            Err(NumericError::NotDigit { byte: b' ' })
        );
        assert_eq!(
            parse_numeric_field(b"                  -1"),
            Err(NumericError::NotDigit { byte: b'-' })
        );
        assert_eq!(
            parse_numeric_field(b"1"),
            Err(NumericError::Width { len: 1 })
        );
    }

    #[test]
    fn errors_have_clear_messages() {
        assert_eq!(
            SoupError::TooLong { len: 300, max: 64 }.to_string(),
            "SoupBinTCP packet length 300 exceeds the limit of 64 bytes"
        );
        assert_eq!(
            SoupError::BadLength {
                kind: b'H',
                len: 3,
                expected: 0
            }
            .to_string(),
            "SoupBinTCP packet 'H' has a 3-byte payload, expected 0"
        );
    }
}
