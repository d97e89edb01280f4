//! The TCP connections of Cboe's recovery services: the Gap Request Proxy
//! (recovery.md R4c) and the Spin Server (R5c). Pure codec, no I/O: the
//! clients' machines and their I/O shells build on it.
//!
//! Each direction is a stream of blocks: a Sequenced Unit Header (venues.md
//! `cboe-pitch`, Framing) then Hdr Count messages. On these connections Hdr
//! Unit and Hdr Sequence are 0: tickgate writes 0 and does not check what
//! it reads. A block with Hdr Count 0 is a heartbeat.
//!
//! | message | type | direction | size | layout (offset, field) |
//! |---|---|---|---|---|
//! | Login | 0x01 | client | 22 | 2 session sub id char[4], 6 username char[4], 10 filler char[2] (spaces), 12 password char[10]; text left-aligned, space-padded |
//! | Login Response | 0x02 | server | 3 | 2 status |
//! | Gap Request | 0x03 | client (GRP) | 9 | 2 unit u8, 3 sequence u32, 7 count u16 |
//! | Gap Response | 0x04 | server (GRP) | 10 | 2 unit u8, 3 sequence u32, 7 count u16, 9 status |
//! | Spin Image Available | 0x80 | server (Spin) | 6 | 2 sequence u32 |
//! | Spin Request | 0x81 | client (Spin) | 6 | 2 sequence u32 |
//! | Spin Response | 0x82 | server (Spin) | 11 | 2 sequence u32, 6 order count u32, 10 status |
//! | Spin Finished | 0x83 | server (Spin) | 6 | 2 sequence u32 |
//!
//! Between an accepted Spin Response and Spin Finished the Spin Server
//! sends the unit's PITCH messages (`messages`), in blocks of the same
//! framing. As on the multicast, a message longer than its size is read up
//! to its size.
//!
//! [`BlockDecoder`] takes the bytes as a stream delivers them, split
//! anywhere, and yields whole blocks; a Hdr Length below 8 is an error as
//! soon as its two bytes are in (R4c: the connection is closed), and the
//! u16 Hdr Length bounds what one block can make it buffer.

use std::fmt;

use thiserror::Error;

use super::frame::{Block, FrameError, Messages, UnitHeader, HEADER_LEN};
use super::messages::{self, DecodeError, Message};

pub const TYPE_LOGIN: u8 = 0x01;
pub const TYPE_LOGIN_RESPONSE: u8 = 0x02;
pub const TYPE_GAP_REQUEST: u8 = 0x03;
pub const TYPE_GAP_RESPONSE: u8 = 0x04;
pub const TYPE_SPIN_IMAGE_AVAILABLE: u8 = 0x80;
pub const TYPE_SPIN_REQUEST: u8 = 0x81;
pub const TYPE_SPIN_RESPONSE: u8 = 0x82;
pub const TYPE_SPIN_FINISHED: u8 = 0x83;

pub const SIZE_LOGIN: usize = 22;
pub const SIZE_LOGIN_RESPONSE: usize = 3;
pub const SIZE_GAP_REQUEST: usize = 9;
pub const SIZE_GAP_RESPONSE: usize = 10;
pub const SIZE_SPIN_IMAGE_AVAILABLE: usize = 6;
pub const SIZE_SPIN_REQUEST: usize = 6;
pub const SIZE_SPIN_RESPONSE: usize = 11;
pub const SIZE_SPIN_FINISHED: usize = 6;

/// The size of a session message of type `kind` (`None`: not one).
pub fn session_message_size(kind: u8) -> Option<usize> {
    Some(match kind {
        TYPE_LOGIN => SIZE_LOGIN,
        TYPE_LOGIN_RESPONSE => SIZE_LOGIN_RESPONSE,
        TYPE_GAP_REQUEST => SIZE_GAP_REQUEST,
        TYPE_GAP_RESPONSE => SIZE_GAP_RESPONSE,
        TYPE_SPIN_IMAGE_AVAILABLE => SIZE_SPIN_IMAGE_AVAILABLE,
        TYPE_SPIN_REQUEST => SIZE_SPIN_REQUEST,
        TYPE_SPIN_RESPONSE => SIZE_SPIN_RESPONSE,
        TYPE_SPIN_FINISHED => SIZE_SPIN_FINISHED,
        _ => return None,
    })
}

/// Why credentials cannot make a Login (recovery.md Settings: at most 4, 4
/// and 10 printable ASCII characters; a password may be empty). A
/// configuration error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum CredentialError {
    #[error("{field} is empty")]
    Empty { field: &'static str },
    #[error("{field} is {len} characters long, at most {max} allowed")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{field} holds a character that is not printable ASCII (0x21-0x7E)")]
    NotPrintable { field: &'static str },
}

fn credential<const N: usize>(
    field: &'static str,
    value: &str,
    may_be_empty: bool,
) -> Result<[u8; N], CredentialError> {
    let b = value.as_bytes();
    if b.is_empty() && !may_be_empty {
        return Err(CredentialError::Empty { field });
    }
    if b.len() > N {
        return Err(CredentialError::TooLong {
            field,
            len: b.len(),
            max: N,
        });
    }
    if !b.iter().all(|c| c.is_ascii_graphic()) {
        return Err(CredentialError::NotPrintable { field });
    }
    let mut out = [b' '; N];
    out[..b.len()].copy_from_slice(b);
    Ok(out)
}

fn trim(field: &[u8]) -> &[u8] {
    let end = field.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &field[..end]
}

/// The Login of both services (R4c, R5c), its text fields as on the wire
/// (padded with spaces).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Login {
    pub session_sub_id: [u8; 4],
    pub username: [u8; 4],
    pub password: [u8; 10],
}

impl Login {
    /// The login Cboe issues; an error names the field that cannot be sent.
    pub fn new(
        session_sub_id: &str,
        username: &str,
        password: &str,
    ) -> Result<Login, CredentialError> {
        Ok(Login {
            session_sub_id: credential("session_sub_id", session_sub_id, false)?,
            username: credential("username", username, false)?,
            password: credential("password", password, true)?,
        })
    }

    pub fn session_sub_id(&self) -> &[u8] {
        trim(&self.session_sub_id)
    }

    pub fn username(&self) -> &[u8] {
        trim(&self.username)
    }

    pub fn password(&self) -> &[u8] {
        trim(&self.password)
    }
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password is never printed.
        f.debug_struct("Login")
            .field(
                "session_sub_id",
                &String::from_utf8_lossy(self.session_sub_id()),
            )
            .field("username", &String::from_utf8_lossy(self.username()))
            .finish_non_exhaustive()
    }
}

/// Login Response status (R4c).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginStatus {
    /// `A`: logged in.
    Accepted,
    /// `N`: username or password not authorized.
    NotAuthorized,
    /// `B`: the session is already in use.
    SessionInUse,
    /// `S`: invalid session.
    InvalidSession,
    /// Any other byte: a failed login too.
    Other(u8),
}

impl LoginStatus {
    pub fn from_byte(b: u8) -> LoginStatus {
        match b {
            b'A' => LoginStatus::Accepted,
            b'N' => LoginStatus::NotAuthorized,
            b'B' => LoginStatus::SessionInUse,
            b'S' => LoginStatus::InvalidSession,
            other => LoginStatus::Other(other),
        }
    }

    pub fn byte(self) -> u8 {
        match self {
            LoginStatus::Accepted => b'A',
            LoginStatus::NotAuthorized => b'N',
            LoginStatus::SessionInUse => b'B',
            LoginStatus::InvalidSession => b'S',
            LoginStatus::Other(b) => b,
        }
    }
}

/// Gap Response status (R4c's table; what the client does with each is
/// the GRP machine's, not the codec's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapStatus {
    /// `A`: accepted; the messages come on the gap lines.
    Accepted,
    /// `O`: out of range (ahead of what was sent, or too old).
    OutOfRange,
    /// `C`: the count is over Cboe's limit for one request.
    CountTooLarge,
    /// `S`: the login's allowance for this second is spent.
    SecondLimit,
    /// `M`: the allowance for this minute is spent.
    MinuteLimit,
    /// `D`: the allowance for the day is spent.
    DayLimit,
    /// `I`: the GRP does not serve that unit.
    InvalidUnit,
    /// `U`: the unit cannot be served right now.
    Unavailable,
    /// Undocumented: handled as `U`.
    Other(u8),
}

/// R4c's table of Gap Response statuses, each with its byte (as the
/// metrics' `status` label), in the order counts by status are kept
/// ([`GapStatus::slot`]; any other status is counted last, `other`): the
/// one list that the codec, the GRP connection's counts, the feed's
/// recovery counters and the metrics read.
pub const GAP_STATUSES: [(&str, GapStatus); 8] = [
    ("A", GapStatus::Accepted),
    ("O", GapStatus::OutOfRange),
    ("C", GapStatus::CountTooLarge),
    ("S", GapStatus::SecondLimit),
    ("M", GapStatus::MinuteLimit),
    ("D", GapStatus::DayLimit),
    ("I", GapStatus::InvalidUnit),
    ("U", GapStatus::Unavailable),
];

/// Gap Responses counted by status: one count per [`GAP_STATUSES`] entry,
/// in its order, then one for any other status.
pub type GapCounts = [u64; GAP_STATUSES.len() + 1];

impl GapStatus {
    pub fn from_byte(b: u8) -> GapStatus {
        GAP_STATUSES
            .iter()
            .find(|(label, _)| label.as_bytes() == [b])
            .map_or(GapStatus::Other(b), |&(_, s)| s)
    }

    pub fn byte(self) -> u8 {
        match self {
            GapStatus::Other(b) => b,
            s => GAP_STATUSES[s.slot()].0.as_bytes()[0],
        }
    }

    /// This status's place in [`GapCounts`]: its index in
    /// [`GAP_STATUSES`], or the last for any other status.
    pub fn slot(self) -> usize {
        GAP_STATUSES
            .iter()
            .position(|&(_, s)| s == self)
            .unwrap_or(GAP_STATUSES.len())
    }

    /// The `status` label of slot `slot` of [`GapCounts`]: the status
    /// byte, or `other`.
    pub fn slot_label(slot: usize) -> &'static str {
        GAP_STATUSES.get(slot).map_or("other", |&(label, _)| label)
    }
}

/// Spin Response status (R5c).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpinStatus {
    /// `A`: the spin follows.
    Accepted,
    /// `O`: the sequence is beyond what the next spin can reflect.
    OutOfRange,
    /// `S`: a spin is already running on this connection.
    AlreadyRunning,
    /// Any other byte.
    Other(u8),
}

impl SpinStatus {
    pub fn from_byte(b: u8) -> SpinStatus {
        match b {
            b'A' => SpinStatus::Accepted,
            b'O' => SpinStatus::OutOfRange,
            b'S' => SpinStatus::AlreadyRunning,
            other => SpinStatus::Other(other),
        }
    }

    pub fn byte(self) -> u8 {
        match self {
            SpinStatus::Accepted => b'A',
            SpinStatus::OutOfRange => b'O',
            SpinStatus::AlreadyRunning => b'S',
            SpinStatus::Other(b) => b,
        }
    }
}

/// One message of a GRP or Spin connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionMessage {
    Login(Login),
    LoginResponse(LoginStatus),
    GapRequest {
        unit: u8,
        sequence: u32,
        count: u16,
    },
    GapResponse {
        unit: u8,
        sequence: u32,
        count: u16,
        status: GapStatus,
    },
    SpinImageAvailable {
        sequence: u32,
    },
    SpinRequest {
        sequence: u32,
    },
    SpinResponse {
        sequence: u32,
        order_count: u32,
        status: SpinStatus,
    },
    SpinFinished {
        sequence: u32,
    },
    /// A PITCH message of venues.md's table (a spin's own messages).
    Pitch(Message),
    /// A type neither this table nor venues.md's defines (a spin skips and
    /// counts it as the multicast does; the GRP closes the connection).
    Unknown {
        kind: u8,
    },
}

impl SessionMessage {
    /// The wire type byte.
    pub fn kind(&self) -> u8 {
        match self {
            SessionMessage::Login(_) => TYPE_LOGIN,
            SessionMessage::LoginResponse(_) => TYPE_LOGIN_RESPONSE,
            SessionMessage::GapRequest { .. } => TYPE_GAP_REQUEST,
            SessionMessage::GapResponse { .. } => TYPE_GAP_RESPONSE,
            SessionMessage::SpinImageAvailable { .. } => TYPE_SPIN_IMAGE_AVAILABLE,
            SessionMessage::SpinRequest { .. } => TYPE_SPIN_REQUEST,
            SessionMessage::SpinResponse { .. } => TYPE_SPIN_RESPONSE,
            SessionMessage::SpinFinished { .. } => TYPE_SPIN_FINISHED,
            SessionMessage::Pitch(m) => m.kind(),
            SessionMessage::Unknown { kind } => *kind,
        }
    }

    /// Appends the message (its exact size) to `out`. Panics on `Unknown`,
    /// which has no layout; a PITCH message that cannot be encoded is an
    /// error.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), messages::EncodeError> {
        let mut head = |size: usize| {
            out.push(size as u8);
            out.push(self.kind());
        };
        match *self {
            SessionMessage::Login(l) => {
                head(SIZE_LOGIN);
                out.extend_from_slice(&l.session_sub_id);
                out.extend_from_slice(&l.username);
                out.extend_from_slice(b"  ");
                out.extend_from_slice(&l.password);
            }
            SessionMessage::LoginResponse(s) => {
                head(SIZE_LOGIN_RESPONSE);
                out.push(s.byte());
            }
            SessionMessage::GapRequest {
                unit,
                sequence,
                count,
            } => {
                head(SIZE_GAP_REQUEST);
                out.push(unit);
                out.extend_from_slice(&sequence.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
            }
            SessionMessage::GapResponse {
                unit,
                sequence,
                count,
                status,
            } => {
                head(SIZE_GAP_RESPONSE);
                out.push(unit);
                out.extend_from_slice(&sequence.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.push(status.byte());
            }
            SessionMessage::SpinImageAvailable { sequence } => {
                head(SIZE_SPIN_IMAGE_AVAILABLE);
                out.extend_from_slice(&sequence.to_le_bytes());
            }
            SessionMessage::SpinRequest { sequence } => {
                head(SIZE_SPIN_REQUEST);
                out.extend_from_slice(&sequence.to_le_bytes());
            }
            SessionMessage::SpinResponse {
                sequence,
                order_count,
                status,
            } => {
                head(SIZE_SPIN_RESPONSE);
                out.extend_from_slice(&sequence.to_le_bytes());
                out.extend_from_slice(&order_count.to_le_bytes());
                out.push(status.byte());
            }
            SessionMessage::SpinFinished { sequence } => {
                head(SIZE_SPIN_FINISHED);
                out.extend_from_slice(&sequence.to_le_bytes());
            }
            SessionMessage::Pitch(m) => messages::encode(&m, out)?,
            SessionMessage::Unknown { kind } => {
                panic!("encode: type 0x{kind:02x} has no layout")
            }
        }
        Ok(())
    }
}

/// Why a connection's bytes do not parse (R4c, R5c: the connection is
/// closed, or the spin attempt fails).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum SessionError {
    #[error("block Hdr Length {length} is below the 8-byte header")]
    HeaderLength { length: u16 },
    #[error("block: {0}")]
    Frame(FrameError),
    #[error("session message type 0x{kind:02x} of {len} bytes is shorter than its size {size}")]
    TooShort { kind: u8, len: usize, size: usize },
    #[error("spin message: {0}")]
    Pitch(DecodeError),
}

/// Decodes one message of a block (`msg` is as long as its Length byte).
/// Session types first, then PITCH types (checked as venues.md checks
/// them on the multicast), then `Unknown`.
pub fn decode_message(msg: &[u8]) -> Result<SessionMessage, SessionError> {
    let [_, kind] = *msg
        .first_chunk::<2>()
        .ok_or(SessionError::Pitch(DecodeError::Empty { len: msg.len() }))?;
    if let Some(size) = session_message_size(kind) {
        if msg.len() < size {
            return Err(SessionError::TooShort {
                kind,
                len: msg.len(),
                size,
            });
        }
        let u32_at = |at: usize| u32::from_le_bytes(msg[at..at + 4].try_into().expect("4 bytes"));
        let u16_at = |at: usize| u16::from_le_bytes([msg[at], msg[at + 1]]);
        return Ok(match kind {
            TYPE_LOGIN => SessionMessage::Login(Login {
                session_sub_id: msg[2..6].try_into().expect("4 bytes"),
                username: msg[6..10].try_into().expect("4 bytes"),
                password: msg[12..22].try_into().expect("10 bytes"),
            }),
            TYPE_LOGIN_RESPONSE => SessionMessage::LoginResponse(LoginStatus::from_byte(msg[2])),
            TYPE_GAP_REQUEST => SessionMessage::GapRequest {
                unit: msg[2],
                sequence: u32_at(3),
                count: u16_at(7),
            },
            TYPE_GAP_RESPONSE => SessionMessage::GapResponse {
                unit: msg[2],
                sequence: u32_at(3),
                count: u16_at(7),
                status: GapStatus::from_byte(msg[9]),
            },
            TYPE_SPIN_IMAGE_AVAILABLE => SessionMessage::SpinImageAvailable {
                sequence: u32_at(2),
            },
            TYPE_SPIN_REQUEST => SessionMessage::SpinRequest {
                sequence: u32_at(2),
            },
            TYPE_SPIN_RESPONSE => SessionMessage::SpinResponse {
                sequence: u32_at(2),
                order_count: u32_at(6),
                status: SpinStatus::from_byte(msg[10]),
            },
            _ => SessionMessage::SpinFinished {
                sequence: u32_at(2),
            },
        });
    }
    match messages::decode(msg) {
        Ok(m) => Ok(SessionMessage::Pitch(m)),
        Err(DecodeError::UnknownType { kind }) => Ok(SessionMessage::Unknown { kind }),
        Err(e) => Err(SessionError::Pitch(e)),
    }
}

/// Appends one block (Hdr Unit 0, Hdr Sequence 0) holding `msgs` to
/// `out`: what a client or a test server writes. A heartbeat is
/// `encode_block(&[], out)`. On an error `out` is unchanged.
pub fn encode_block(msgs: &[SessionMessage], out: &mut Vec<u8>) -> Result<(), BlockEncodeError> {
    if msgs.len() > u8::MAX as usize {
        return Err(BlockEncodeError::TooMany { count: msgs.len() });
    }
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    for m in msgs {
        if let Err(e) = m.encode(out) {
            out.truncate(start);
            return Err(BlockEncodeError::Message(e));
        }
    }
    let Ok(length) = u16::try_from(out.len() - start) else {
        let len = out.len() - start;
        out.truncate(start);
        return Err(BlockEncodeError::TooLong { len });
    };
    let h = UnitHeader {
        length,
        count: msgs.len() as u8,
        unit: 0,
        sequence: 0,
    };
    out[start..start + HEADER_LEN].copy_from_slice(&h.bytes());
    Ok(())
}

/// The heartbeat block both sides send: the header alone.
pub const HEARTBEAT: [u8; HEADER_LEN] = [8, 0, 0, 0, 0, 0, 0, 0];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum BlockEncodeError {
    #[error("{count} messages do not fit one block (at most 255)")]
    TooMany { count: usize },
    #[error("a block of {len} bytes passes Hdr Length's 65,535")]
    TooLong { len: usize },
    #[error("{0}")]
    Message(messages::EncodeError),
}

/// A whole block of a connection, borrowing the decoder's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionBlock<'a> {
    pub header: UnitHeader,
    pub body: &'a [u8],
}

impl<'a> SessionBlock<'a> {
    /// A heartbeat: no messages.
    pub fn is_heartbeat(&self) -> bool {
        self.header.count == 0
    }

    /// The raw messages.
    pub fn raw_messages(&self) -> Messages<'a> {
        Messages::over(self.body, self.header.count)
    }

    /// The messages, decoded one by one (an error does not stop the
    /// iteration: the caller decides).
    pub fn messages(&self) -> impl Iterator<Item = Result<SessionMessage, SessionError>> + 'a {
        self.raw_messages().map(decode_message)
    }
}

/// Incremental decoder of one direction of a connection: [`push`] the
/// bytes a read returned, then take blocks with [`next_block`] until it
/// returns `Ok(None)`. After an error the stream is out of step: drop the
/// connection (every later call returns the error again).
///
/// Memory: at most one partial block (Hdr Length is a u16, so under 64
/// KiB) plus the bytes of the last push.
///
/// [`push`]: BlockDecoder::push
/// [`next_block`]: BlockDecoder::next_block
#[derive(Debug, Default)]
pub struct BlockDecoder {
    buf: Vec<u8>,
    start: usize,
    failed: Option<SessionError>,
    blocks: u64,
}

impl BlockDecoder {
    pub fn new() -> BlockDecoder {
        BlockDecoder {
            buf: Vec::with_capacity(4096),
            ..BlockDecoder::default()
        }
    }

    /// Bytes received and not yet returned in blocks.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whole blocks returned so far (R4c and R5c time the server's
    /// silence by whole blocks).
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole block, its framing checked (Hdr Length, messages
    /// filling it, Hdr Count); `Ok(None)` when more bytes are needed.
    pub fn next_block(&mut self) -> Result<Option<SessionBlock<'_>>, SessionError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let rest = &self.buf[self.start..];
        if rest.len() < 2 {
            return Ok(None);
        }
        let length = u16::from_le_bytes([rest[0], rest[1]]);
        if (length as usize) < HEADER_LEN {
            return Err(*self.failed.insert(SessionError::HeaderLength { length }));
        }
        if rest.len() < length as usize {
            return Ok(None);
        }
        let at = self.start;
        self.start += length as usize;
        match Block::parse(&self.buf[at..at + length as usize]) {
            Ok(b) => {
                self.blocks += 1;
                Ok(Some(SessionBlock {
                    header: b.header,
                    body: b.body,
                }))
            }
            Err(e) => Err(*self.failed.insert(SessionError::Frame(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(msgs: &[SessionMessage]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_block(msgs, &mut out).unwrap();
        out
    }

    fn decode_all(bytes: &[u8]) -> Vec<Vec<SessionMessage>> {
        let mut d = BlockDecoder::new();
        d.push(bytes);
        let mut out = Vec::new();
        while let Some(b) = d.next_block().unwrap() {
            out.push(b.messages().collect::<Result<Vec<_>, _>>().unwrap());
        }
        assert_eq!(d.buffered(), 0);
        out
    }

    #[test]
    fn the_gap_request_of_the_contract_byte_for_byte() {
        let req = SessionMessage::GapRequest {
            unit: 1,
            sequence: 14,
            count: 1,
        };
        assert_eq!(
            block(&[req]),
            [
                0x11, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x03, 0x01, 0x0e, 0x00, 0x00,
                0x00, 0x01, 0x00
            ]
        );
        assert_eq!(decode_all(&block(&[req])), vec![vec![req]]);
    }

    #[test]
    fn login_layout_and_credentials() {
        let l = Login::new("0006", "MKDA", "").unwrap();
        let b = block(&[SessionMessage::Login(l)]);
        assert_eq!(b.len(), 8 + 22);
        assert_eq!(&b[8..], b"\x16\x010006MKDA            ");
        assert_eq!(l.password(), b"");
        assert_eq!(
            format!("{l:?}"),
            "Login { session_sub_id: \"0006\", username: \"MKDA\", .. }"
        );
        let l = Login::new("23", "BATS", "s1bats").unwrap();
        assert_eq!(l.session_sub_id, *b"23  ");
        assert_eq!(l.password, *b"s1bats    ");
        assert!(
            !format!("{l:?}").contains("s1bats"),
            "the password is never printed"
        );
        assert_eq!(
            Login::new("00061", "MKDA", ""),
            Err(CredentialError::TooLong {
                field: "session_sub_id",
                len: 5,
                max: 4
            })
        );
        assert_eq!(
            Login::new("0006", "MKDAX", ""),
            Err(CredentialError::TooLong {
                field: "username",
                len: 5,
                max: 4
            })
        );
        assert_eq!(
            Login::new("0006", "MKDA", "12345678901"),
            Err(CredentialError::TooLong {
                field: "password",
                len: 11,
                max: 10
            })
        );
        assert_eq!(
            Login::new("", "MKDA", ""),
            Err(CredentialError::Empty {
                field: "session_sub_id"
            })
        );
        assert_eq!(
            Login::new("0006", "", ""),
            Err(CredentialError::Empty { field: "username" })
        );
        assert_eq!(
            Login::new("0006", "MK A", ""),
            Err(CredentialError::NotPrintable { field: "username" })
        );
        assert_eq!(
            Login::new("0006", "MKDA", "pässwort"),
            Err(CredentialError::NotPrintable { field: "password" })
        );
    }

    #[test]
    fn gap_counts_keep_the_table_order_then_other() {
        let slots: Vec<usize> = b"AOCSMDIUX?"
            .iter()
            .map(|&b| GapStatus::from_byte(b).slot())
            .collect();
        assert_eq!(slots, [0, 1, 2, 3, 4, 5, 6, 7, 8, 8]);
        let labels: Vec<&str> = (0..GAP_STATUSES.len() + 1)
            .map(GapStatus::slot_label)
            .collect();
        assert_eq!(labels, ["A", "O", "C", "S", "M", "D", "I", "U", "other"]);
        assert_eq!(std::mem::size_of::<GapCounts>(), 9 * 8);
    }

    #[test]
    fn every_status_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(LoginStatus::from_byte(b).byte(), b);
            assert_eq!(GapStatus::from_byte(b).byte(), b);
            assert_eq!(SpinStatus::from_byte(b).byte(), b);
        }
        let gap: Vec<GapStatus> = b"AOCSMDIUX"
            .iter()
            .map(|&b| GapStatus::from_byte(b))
            .collect();
        assert_eq!(
            gap,
            [
                GapStatus::Accepted,
                GapStatus::OutOfRange,
                GapStatus::CountTooLarge,
                GapStatus::SecondLimit,
                GapStatus::MinuteLimit,
                GapStatus::DayLimit,
                GapStatus::InvalidUnit,
                GapStatus::Unavailable,
                GapStatus::Other(b'X'),
            ]
        );
        let login: Vec<LoginStatus> = b"ANBSZ"
            .iter()
            .map(|&b| LoginStatus::from_byte(b))
            .collect();
        assert_eq!(
            login,
            [
                LoginStatus::Accepted,
                LoginStatus::NotAuthorized,
                LoginStatus::SessionInUse,
                LoginStatus::InvalidSession,
                LoginStatus::Other(b'Z'),
            ]
        );
        let spin: Vec<SpinStatus> = b"AOSQ".iter().map(|&b| SpinStatus::from_byte(b)).collect();
        assert_eq!(
            spin,
            [
                SpinStatus::Accepted,
                SpinStatus::OutOfRange,
                SpinStatus::AlreadyRunning,
                SpinStatus::Other(b'Q'),
            ]
        );
    }

    #[test]
    fn every_session_message_round_trips_in_any_split() {
        let msgs = [
            SessionMessage::Login(Login::new("0023", "BATS", "s1bats").unwrap()),
            SessionMessage::LoginResponse(LoginStatus::SessionInUse),
            SessionMessage::GapRequest {
                unit: 7,
                sequence: 0xDEAD_BEEF,
                count: 65535,
            },
            SessionMessage::GapResponse {
                unit: 7,
                sequence: 0xDEAD_BEEF,
                count: 65535,
                status: GapStatus::MinuteLimit,
            },
            SessionMessage::SpinImageAvailable { sequence: 312 },
            SessionMessage::SpinRequest { sequence: 312 },
            SessionMessage::SpinResponse {
                sequence: 312,
                order_count: 1_000_000,
                status: SpinStatus::OutOfRange,
            },
            SessionMessage::SpinFinished { sequence: 312 },
            SessionMessage::Pitch(Message::Time { seconds: 75442 }),
        ];
        let mut bytes = block(&msgs[..3]);
        bytes.extend_from_slice(&HEARTBEAT);
        bytes.extend_from_slice(&block(&msgs[3..]));
        for (m, size) in msgs.iter().zip([22, 3, 9, 10, 6, 6, 11, 6, 6]) {
            let mut one = Vec::new();
            m.encode(&mut one).unwrap();
            assert_eq!(one.len(), size, "{m:?}");
            assert_eq!(one[0] as usize, size);
        }
        let whole = decode_all(&bytes);
        assert_eq!(whole, vec![msgs[..3].to_vec(), vec![], msgs[3..].to_vec()]);
        // Every split into two reads gives the same blocks.
        for cut in 0..=bytes.len() {
            let mut d = BlockDecoder::new();
            let mut got = Vec::new();
            for part in [&bytes[..cut], &bytes[cut..]] {
                d.push(part);
                while let Some(b) = d.next_block().unwrap() {
                    got.push(b.messages().collect::<Result<Vec<_>, _>>().unwrap());
                }
            }
            assert_eq!(got, whole, "cut at {cut}");
            assert_eq!(d.blocks(), 3);
        }
    }

    #[test]
    fn a_header_length_below_8_fails_at_once_and_for_good() {
        let mut d = BlockDecoder::new();
        d.push(&[7]);
        assert_eq!(d.next_block(), Ok(None));
        d.push(&[0]);
        assert_eq!(
            d.next_block(),
            Err(SessionError::HeaderLength { length: 7 })
        );
        d.push(&HEARTBEAT);
        assert_eq!(
            d.next_block(),
            Err(SessionError::HeaderLength { length: 7 })
        );
    }

    #[test]
    fn a_block_whose_messages_do_not_fill_it_is_an_error() {
        let mut b = block(&[SessionMessage::SpinFinished { sequence: 1 }]);
        b[2] = 2;
        let mut d = BlockDecoder::new();
        d.push(&b);
        assert_eq!(
            d.next_block(),
            Err(SessionError::Frame(FrameError::MissingMessages {
                found: 1,
                count: 2
            }))
        );
    }

    #[test]
    fn short_messages_are_errors_and_longer_ones_are_read_to_their_size() {
        for (kind, size) in [
            (TYPE_LOGIN, 22usize),
            (TYPE_LOGIN_RESPONSE, 3),
            (TYPE_GAP_REQUEST, 9),
            (TYPE_GAP_RESPONSE, 10),
            (TYPE_SPIN_IMAGE_AVAILABLE, 6),
            (TYPE_SPIN_REQUEST, 6),
            (TYPE_SPIN_RESPONSE, 11),
            (TYPE_SPIN_FINISHED, 6),
        ] {
            let mut m = vec![b'A'; size + 3];
            m[1] = kind;
            let full = decode_message(&m[..size]).unwrap();
            assert_eq!(full.kind(), kind);
            assert_eq!(decode_message(&m), Ok(full));
            assert_eq!(
                decode_message(&m[..size - 1]),
                Err(SessionError::TooShort {
                    kind,
                    len: size - 1,
                    size
                })
            );
        }
        // A PITCH type is checked as on the multicast; others are unknown.
        assert_eq!(
            decode_message(&[5, 0x20, 0, 0, 0]),
            Err(SessionError::Pitch(DecodeError::TooShort {
                kind: 0x20,
                len: 5,
                size: 6
            }))
        );
        assert_eq!(
            decode_message(&[2, 0x7F]),
            Ok(SessionMessage::Unknown { kind: 0x7F })
        );
    }
}
