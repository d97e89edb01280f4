//! IEX-TP v1 segments (venues.md `iex-tops`): a 40-byte little-endian
//! header, then `message count` blocks of a u16 length and that many
//! bytes, filling the payload exactly. Validated whole before anything is
//! applied; a segment that parses is safe to walk without checks.

use std::fmt;

use super::{message_size, PRICE_SCALE, TYPE_QUOTE_UPDATE};
use crate::wire::Symbol;

pub const SEGMENT_HEADER_LEN: usize = 40;
/// TOPS's message protocol id in the IEX-TP header.
pub const MESSAGE_PROTOCOL: u16 = 0x8003;

/// Why an IEX-TP datagram is invalid (dropped whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IexError {
    /// Under the 40-byte segment header.
    ShortHeader { len: usize },
    /// Version other than 1.
    Version { version: u8 },
    /// Message protocol id other than 0x8003 (TOPS).
    Protocol { id: u16 },
    /// Payload length not the datagram length minus 40.
    PayloadLength { said: u16, actual: usize },
    /// A negative first message sequence number or send time.
    Negative,
    /// Block `block`'s length field or bytes run past the payload.
    Truncated { block: u16 },
    /// Bytes left after the last block.
    TrailingBytes { extra: usize },
    /// A block of length 0 has no type.
    EmptyBlock { block: u16 },
    /// A block of a known type shorter than that type's size.
    ShortBlock { block: u16, kind: u8, len: u16 },
    /// A Quote Update price that does not fit the 10^-9 fixed point (V4).
    PriceRange { block: u16 },
}

impl fmt::Display for IexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            IexError::ShortHeader { len } => write!(
                f,
                "datagram of {len} bytes is shorter than the 40-byte IEX-TP header"
            ),
            IexError::Version { version } => write!(f, "IEX-TP version {version}, not 1"),
            IexError::Protocol { id } => {
                write!(f, "message protocol 0x{id:04x}, not TOPS (0x8003)")
            }
            IexError::PayloadLength { said, actual } => {
                write!(
                    f,
                    "payload length {said}, but {actual} bytes follow the header"
                )
            }
            IexError::Negative => write!(f, "negative sequence number or send time"),
            IexError::Truncated { block } => write!(f, "block {block} runs past the payload"),
            IexError::TrailingBytes { extra } => write!(f, "{extra} bytes after the last block"),
            IexError::EmptyBlock { block } => write!(f, "block {block} has length 0"),
            IexError::ShortBlock { block, kind, len } => write!(
                f,
                "block {block} of type 0x{kind:02x} is {len} bytes, shorter than its type's size"
            ),
            IexError::PriceRange { block } => {
                write!(
                    f,
                    "block {block}: a quote price out of the fixed-point range"
                )
            }
        }
    }
}

impl std::error::Error for IexError {}

/// A validated IEX-TP segment borrowing its datagram.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    pub session_id: u32,
    pub count: u16,
    pub first_sequence: u64,
    /// Unix ns.
    pub send_time: i64,
    payload: &'a [u8],
}

#[inline]
fn le_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

#[inline]
fn le_i64(b: &[u8]) -> i64 {
    i64::from_le_bytes(b[..8].try_into().unwrap())
}

/// A TOPS symbol: 8 bytes of ASCII, space-padded, the layout of `Symbol`.
#[inline]
pub fn symbol(b: &[u8]) -> Symbol {
    Symbol::from_wire(b[..8].try_into().unwrap())
}

/// V4: a 4-decimal price scales exactly to 10^-9 without overflow.
#[inline]
fn scales(px: i64) -> bool {
    px.checked_mul(PRICE_SCALE).is_some()
}

impl<'a> Segment<'a> {
    /// Validates the whole datagram. The channel id, stream offset and
    /// reserved byte are not validated (venues.md).
    pub fn parse(buf: &'a [u8]) -> Result<Segment<'a>, IexError> {
        if buf.len() < SEGMENT_HEADER_LEN {
            return Err(IexError::ShortHeader { len: buf.len() });
        }
        if buf[0] != 1 {
            return Err(IexError::Version { version: buf[0] });
        }
        let id = le_u16(&buf[2..]);
        if id != MESSAGE_PROTOCOL {
            return Err(IexError::Protocol { id });
        }
        let said = le_u16(&buf[12..]);
        let payload = &buf[SEGMENT_HEADER_LEN..];
        if said as usize != payload.len() {
            return Err(IexError::PayloadLength {
                said,
                actual: payload.len(),
            });
        }
        let count = le_u16(&buf[14..]);
        let first = le_i64(&buf[24..]);
        let send_time = le_i64(&buf[32..]);
        if first < 0 || send_time < 0 {
            return Err(IexError::Negative);
        }
        let mut rest = payload;
        for block in 0..count {
            if rest.len() < 2 {
                return Err(IexError::Truncated { block });
            }
            let len = le_u16(rest);
            let end = 2 + len as usize;
            if rest.len() < end {
                return Err(IexError::Truncated { block });
            }
            if len == 0 {
                return Err(IexError::EmptyBlock { block });
            }
            let msg = &rest[2..end];
            if let Some(size) = message_size(msg[0]) {
                if msg.len() < size {
                    return Err(IexError::ShortBlock {
                        block,
                        kind: msg[0],
                        len,
                    });
                }
                if msg[0] == TYPE_QUOTE_UPDATE
                    && !(scales(le_i64(&msg[22..])) && scales(le_i64(&msg[30..])))
                {
                    return Err(IexError::PriceRange { block });
                }
            }
            rest = &rest[end..];
        }
        if !rest.is_empty() {
            return Err(IexError::TrailingBytes { extra: rest.len() });
        }
        Ok(Segment {
            session_id: u32::from_le_bytes(buf[8..12].try_into().unwrap()),
            count,
            first_sequence: first as u64,
            send_time,
            payload,
        })
    }

    /// A segment of a datagram `parse` already accepted, not validated
    /// again (walking the blocks of an unvalidated one may panic).
    #[inline]
    pub fn validated(buf: &'a [u8]) -> Segment<'a> {
        Segment {
            session_id: u32::from_le_bytes(buf[8..12].try_into().unwrap()),
            count: le_u16(&buf[14..]),
            first_sequence: le_i64(&buf[24..]) as u64,
            send_time: le_i64(&buf[32..]),
            payload: &buf[SEGMENT_HEADER_LEN..],
        }
    }

    /// The message blocks in order (message `i` has channel sequence
    /// `first_sequence + i`).
    pub fn messages(&self) -> Messages<'a> {
        Messages {
            rest: self.payload,
            left: self.count,
        }
    }
}

/// Message bytes of a validated segment.
#[derive(Clone, Debug)]
pub struct Messages<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for Messages<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let len = le_u16(self.rest) as usize;
        let msg = &self.rest[2..2 + len];
        self.rest = &self.rest[2 + len..];
        Some(msg)
    }
}
