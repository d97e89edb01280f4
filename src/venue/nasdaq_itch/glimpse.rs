//! GLIMPSE 5.0 messages (recovery.md R5): what a Sequenced Data packet of
//! a GLIMPSE session carries. ITCH 5.0 messages of venues.md's table
//! (encoded and decoded by `messages`), then End of Snapshot `G`: type `G`
//! then char[20], the first multicast sequence number the snapshot does
//! not reflect (ASCII decimal, right-aligned, space-padded). Pure codec.

use thiserror::Error;

use super::messages::{self, message_size, Message};
use super::soupbin::{numeric_field, parse_numeric_field, NumericError, NUMERIC_WIDTH};

pub const TYPE_END_OF_SNAPSHOT: u8 = b'G';

/// Size of an End of Snapshot message (type and char[20]).
pub const END_OF_SNAPSHOT_LEN: usize = 1 + NUMERIC_WIDTH;

/// Why a GLIMPSE message does not parse (R5: the attempt fails).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum GlimpseError {
    #[error("empty GLIMPSE message")]
    Empty,
    #[error("End of Snapshot is {len} bytes, expected {END_OF_SNAPSHOT_LEN}")]
    EndOfSnapshotLength { len: usize },
    #[error("End of Snapshot sequence: {0}")]
    EndOfSnapshotNumber(NumericError),
    /// A multicast sequence starts at 1: `G` with 0 is not a sequence.
    #[error("End of Snapshot sequence 0 (multicast sequences start at 1)")]
    EndOfSnapshotZero,
    #[error("GLIMPSE message of unknown type 0x{kind:02x}")]
    UnknownType { kind: u8 },
    #[error("GLIMPSE message '{}' is {len} bytes, shorter than its size {size}", *kind as char)]
    Short { kind: u8, len: usize, size: usize },
}

/// One message of a GLIMPSE snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlimpseMessage {
    /// An ITCH 5.0 message (venues.md), applied into empty books.
    Itch(Message),
    /// End of Snapshot: the first multicast sequence the snapshot does not
    /// reflect.
    EndOfSnapshot(u64),
}

/// Appends an End of Snapshot message for `next_sequence` to `out`.
pub fn encode_end_of_snapshot(next_sequence: u64, out: &mut Vec<u8>) {
    out.push(TYPE_END_OF_SNAPSHOT);
    out.extend_from_slice(&numeric_field(next_sequence));
}

/// The sequence number of an End of Snapshot message (the whole message,
/// type byte included): exactly 21 bytes, a right-aligned decimal of at
/// least 1.
pub fn parse_end_of_snapshot(msg: &[u8]) -> Result<u64, GlimpseError> {
    match msg.first() {
        None => return Err(GlimpseError::Empty),
        Some(&TYPE_END_OF_SNAPSHOT) => {}
        Some(&kind) => return Err(GlimpseError::UnknownType { kind }),
    }
    if msg.len() != END_OF_SNAPSHOT_LEN {
        return Err(GlimpseError::EndOfSnapshotLength { len: msg.len() });
    }
    match parse_numeric_field(&msg[1..]) {
        Ok(0) => Err(GlimpseError::EndOfSnapshotZero),
        Ok(n) => Ok(n),
        Err(e) => Err(GlimpseError::EndOfSnapshotNumber(e)),
    }
}

/// Decodes one GLIMPSE message: End of Snapshot, or an ITCH 5.0 message
/// of a known type at least its size (bytes past it are ignored, as on
/// the multicast). Anything else is an error.
pub fn decode(msg: &[u8]) -> Result<GlimpseMessage, GlimpseError> {
    let kind = *msg.first().ok_or(GlimpseError::Empty)?;
    if kind == TYPE_END_OF_SNAPSHOT {
        return parse_end_of_snapshot(msg).map(GlimpseMessage::EndOfSnapshot);
    }
    let size = message_size(kind).ok_or(GlimpseError::UnknownType { kind })?;
    if msg.len() < size {
        return Err(GlimpseError::Short {
            kind,
            len: msg.len(),
            size,
        });
    }
    messages::decode(msg)
        .map(GlimpseMessage::Itch)
        .ok_or(GlimpseError::UnknownType { kind })
}

/// Appends a GLIMPSE message's bytes to `out` (the payload of one
/// Sequenced Data packet).
pub fn encode(msg: &GlimpseMessage, out: &mut Vec<u8>) {
    match msg {
        GlimpseMessage::Itch(m) => messages::encode(m, out),
        GlimpseMessage::EndOfSnapshot(n) => encode_end_of_snapshot(*n, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::nasdaq_itch::messages::{Header, Side};
    use crate::wire::Symbol;

    #[test]
    fn end_of_snapshot_layout_and_round_trip() {
        let mut out = Vec::new();
        encode_end_of_snapshot(1234, &mut out);
        assert_eq!(out, b"G                1234");
        assert_eq!(parse_end_of_snapshot(&out), Ok(1234));
        assert_eq!(decode(&out), Ok(GlimpseMessage::EndOfSnapshot(1234)));
        out.clear();
        encode_end_of_snapshot(u64::MAX, &mut out);
        assert_eq!(parse_end_of_snapshot(&out), Ok(u64::MAX));
    }

    #[test]
    fn malformed_end_of_snapshot_is_refused() {
        use GlimpseError::*;
        let cases: [(&[u8], GlimpseError); 8] = [
            (b"", Empty),
            (b"G", EndOfSnapshotLength { len: 1 }),
            (
                b"G                 12 ",
                EndOfSnapshotNumber(NumericError::NotDigit { byte: b' ' }),
            ),
            (b"G                   ", EndOfSnapshotLength { len: 20 }),
            (
                b"G                    ",
                EndOfSnapshotNumber(NumericError::Empty),
            ),
            (
                b"G                12a4",
                EndOfSnapshotNumber(NumericError::NotDigit { byte: b'a' }),
            ),
            (
                b"G99999999999999999999",
                EndOfSnapshotNumber(NumericError::Overflow),
            ),
            (b"G                   0", EndOfSnapshotZero),
        ];
        for (msg, want) in cases {
            assert_eq!(
                parse_end_of_snapshot(msg),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(msg)
            );
        }
        assert_eq!(
            parse_end_of_snapshot(b"G                   12"),
            Err(EndOfSnapshotLength { len: 22 })
        );
    }

    #[test]
    fn itch_messages_decode_through_messages() {
        let add = Message::AddOrder {
            header: Header {
                locate: 3,
                tracking: 0,
                timestamp: 34_200_000_000_000,
            },
            order_ref: 77,
            side: Side::Sell,
            shares: 300,
            stock: Symbol::parse("S00003").unwrap(),
            price: 1_234_500,
            attribution: None,
        };
        let mut out = Vec::new();
        encode(&GlimpseMessage::Itch(add), &mut out);
        assert_eq!(decode(&out), Ok(GlimpseMessage::Itch(add)));
        assert_eq!(
            decode(&out[..20]),
            Err(GlimpseError::Short {
                kind: b'A',
                len: 20,
                size: 36
            })
        );
        assert_eq!(
            decode(b"zzz"),
            Err(GlimpseError::UnknownType { kind: b'z' })
        );
        assert_eq!(decode(b""), Err(GlimpseError::Empty));
    }
}
