//! The Sequenced Unit Header framing of Cboe PITCH (venues.md `cboe-pitch`,
//! Framing) and the validity of a multicast datagram. Pure code: parsing
//! borrows the datagram and allocates nothing; [`Messages`] walks the
//! messages of a parsed datagram or block without copying them.
//!
//! All integers are little-endian. The header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | Hdr Length: the whole datagram, header included |
//! | 2 | 1 | Hdr Count: messages that follow |
//! | 3 | 1 | Hdr Unit |
//! | 4 | 4 | Hdr Sequence: of the first message; 0 is unsequenced |
//!
//! Each message starts with Length u8 (the whole message) and Type u8.
//! The same framing carries the blocks of the Gap Request Proxy and Spin
//! Server connections (`session`), where unit and sequence are 0.

use thiserror::Error;

use super::messages::{self, DecodeError};

/// Bytes of the Sequenced Unit Header.
pub const HEADER_LEN: usize = 8;

/// The Sequenced Unit Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UnitHeader {
    /// Hdr Length: the whole datagram or block, header included.
    pub length: u16,
    /// Hdr Count: how many messages follow.
    pub count: u8,
    /// Hdr Unit (0 only on TCP connections).
    pub unit: u8,
    /// Hdr Sequence of the first message; 0 means unsequenced.
    pub sequence: u32,
}

impl UnitHeader {
    /// The header of `bytes` (its first 8), `None` when shorter.
    #[inline]
    pub fn read(bytes: &[u8]) -> Option<UnitHeader> {
        let h = bytes.first_chunk::<HEADER_LEN>()?;
        Some(UnitHeader {
            length: u16::from_le_bytes([h[0], h[1]]),
            count: h[2],
            unit: h[3],
            sequence: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
        })
    }

    /// The 8 bytes of this header.
    pub fn bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&self.length.to_le_bytes());
        b[2] = self.count;
        b[3] = self.unit;
        b[4..8].copy_from_slice(&self.sequence.to_le_bytes());
        b
    }

    /// A heartbeat (count 0) or a data packet (count > 0).
    pub fn is_heartbeat(&self) -> bool {
        self.count == 0
    }

    /// Hdr Sequence 0: outside any unit's sequence (venues.md, Mapping).
    pub fn is_unsequenced(&self) -> bool {
        self.sequence == 0
    }

    /// The unit sequence number of message `i` (0-based) of a sequenced
    /// datagram: `Hdr Sequence + i` (a valid datagram never passes u32).
    #[inline]
    pub fn sequence_of(&self, i: u8) -> u32 {
        self.sequence.wrapping_add(i as u32)
    }

    /// The sequence one past the datagram's last message (a heartbeat's
    /// own sequence: the next message), as u64 so that it cannot wrap.
    pub fn next_sequence(&self) -> u64 {
        self.sequence as u64 + self.count as u64
    }
}

/// Why bytes are not a valid PITCH datagram or block (venues.md `cboe-pitch`,
/// Framing: an invalid datagram is dropped whole and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("PITCH datagram of {len} bytes is shorter than its 8-byte header")]
    Short { len: usize },
    #[error("PITCH Hdr Length {header} but the datagram is {actual} bytes")]
    Length { header: u16, actual: usize },
    #[error("PITCH message {index} has Length {len}, below 2")]
    MessageTooShort { index: u8, len: u8 },
    #[error("PITCH message {index} of Length {len} runs past the datagram")]
    MessageOverrun { index: u8, len: u8 },
    #[error("PITCH datagram ends after {found} messages, Hdr Count says {count}")]
    MissingMessages { found: u8, count: u8 },
    #[error("PITCH datagram has {bytes} bytes left over after its {count} messages")]
    TrailingBytes { bytes: usize, count: u8 },
    #[error("PITCH datagram of unit 0 (unit 0 is only used on TCP connections)")]
    UnitZero,
    #[error("PITCH sequence {sequence} with {count} messages passes 4,294,967,295")]
    SequenceOverflow { sequence: u32, count: u8 },
    #[error("PITCH message {index}: {error}")]
    Message { index: u8, error: DecodeError },
}

/// A block whose framing is valid: Hdr Length equals its length, and Hdr
/// Count messages of Length 2 or more fill it exactly. Nothing is said of
/// unit, sequence or message contents (a TCP block, or the first half of
/// a datagram's validation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block<'a> {
    pub header: UnitHeader,
    /// The messages, back to back (everything after the header).
    pub body: &'a [u8],
}

impl<'a> Block<'a> {
    /// Checks the framing rules of venues.md (`walk_framing`).
    pub fn parse(bytes: &'a [u8]) -> Result<Block<'a>, FrameError> {
        let (header, body) = walk_framing(bytes, |_, _| {})?;
        Ok(Block { header, body })
    }

    /// The messages, each with its Length and Type bytes.
    #[inline]
    pub fn messages(&self) -> Messages<'a> {
        Messages {
            rest: self.body,
            left: self.header.count,
        }
    }
}

/// The framing rules of venues.md (the first three bullets of a valid
/// datagram, shared by a TCP block and a multicast datagram): Hdr Length
/// equals the length, and Hdr Count messages of Length 2 or more fill it
/// exactly. `each` sees every message (its index, its bytes from Length
/// on) as the walk reaches it, so a caller checks contents in the same
/// pass. The header and the messages' bytes.
#[inline(always)]
fn walk_framing(
    bytes: &[u8],
    mut each: impl FnMut(u8, &[u8]),
) -> Result<(UnitHeader, &[u8]), FrameError> {
    let header = UnitHeader::read(bytes).ok_or(FrameError::Short { len: bytes.len() })?;
    if header.length as usize != bytes.len() {
        return Err(FrameError::Length {
            header: header.length,
            actual: bytes.len(),
        });
    }
    let body = &bytes[HEADER_LEN..];
    let mut at = 0usize;
    for index in 0..header.count {
        let Some(&len) = body.get(at) else {
            return Err(FrameError::MissingMessages {
                found: index,
                count: header.count,
            });
        };
        if len < 2 {
            return Err(FrameError::MessageTooShort { index, len });
        }
        let Some(msg) = body.get(at..at + len as usize) else {
            return Err(FrameError::MessageOverrun { index, len });
        };
        each(index, msg);
        at += len as usize;
    }
    if at != body.len() {
        return Err(FrameError::TrailingBytes {
            bytes: body.len() - at,
            count: header.count,
        });
    }
    Ok((header, body))
}

/// A valid multicast datagram (venues.md `cboe-pitch`, Framing: every rule
/// of a valid datagram holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub header: UnitHeader,
    pub body: &'a [u8],
    /// Messages of a type venues.md does not define: skipped by their
    /// Length, counted (`unknown_messages`).
    pub unknown: u8,
}

impl<'a> Datagram<'a> {
    /// Validates a UDP payload whole. Every rule of venues.md's list of
    /// what makes a datagram valid is checked here, and the first broken
    /// in its order is the error.
    pub fn parse(bytes: &'a [u8]) -> Result<Datagram<'a>, FrameError> {
        // Length, messages filling it exactly, Hdr Count, Length >= 2
        // (`walk_framing`, as a TCP block), in one walk with each message's own rules:
        // known types at least their size, symbols printable, prices that
        // fit i64 once scaled (`messages::validate`, `decode`'s verdict);
        // an unknown type is skipped and counted. A message's error comes
        // after the framing, unit and sequence rules: it is kept until
        // those are checked.
        let mut unknown = 0u8;
        let mut message_error: Option<FrameError> = None;
        let (header, body) = walk_framing(bytes, |index, msg| {
            if message_error.is_none() {
                match messages::validate(msg) {
                    Ok(()) => {}
                    Err(DecodeError::UnknownType { .. }) => unknown += 1,
                    Err(error) => message_error = Some(FrameError::Message { index, error }),
                }
            }
        })?;
        // Unit 0 appears only on TCP connections.
        if header.unit == 0 {
            return Err(FrameError::UnitZero);
        }
        // The last message's sequence must not pass u32 (unsequenced: any).
        if header.sequence != 0 && header.count > 0 {
            let last = header.sequence as u64 + header.count as u64 - 1;
            if last > u32::MAX as u64 {
                return Err(FrameError::SequenceOverflow {
                    sequence: header.sequence,
                    count: header.count,
                });
            }
        }
        if let Some(e) = message_error {
            return Err(e);
        }
        Ok(Datagram {
            header,
            body,
            unknown,
        })
    }

    /// The messages of a datagram that `parse` accepted.
    #[inline]
    pub fn messages(&self) -> Messages<'a> {
        Messages {
            rest: self.body,
            left: self.header.count,
        }
    }

    /// The messages with their unit sequence numbers (`Hdr Sequence + i`;
    /// meaningless for an unsequenced datagram).
    pub fn sequenced(&self) -> impl Iterator<Item = (u32, &'a [u8])> + 'a {
        let header = self.header;
        self.messages()
            .enumerate()
            .map(move |(i, m)| (header.sequence_of(i as u8), m))
    }
}

/// The messages of a block, each a slice starting at its Length byte and
/// as long as that Length. Allocates nothing. On bytes that were not
/// validated it stops at the first message that does not fit (it never
/// panics).
#[derive(Clone, Debug)]
pub struct Messages<'a> {
    rest: &'a [u8],
    left: u8,
}

impl<'a> Messages<'a> {
    /// Up to `count` messages of `body` (no validation).
    pub fn over(body: &'a [u8], count: u8) -> Messages<'a> {
        Messages {
            rest: body,
            left: count,
        }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let len = *self.rest.first()? as usize;
        if len < 2 || len > self.rest.len() {
            self.left = 0;
            return None;
        }
        let (msg, rest) = self.rest.split_at(len);
        self.rest = rest;
        self.left -= 1;
        Some(msg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

/// Appends a header for `body` (the messages, back to back) and `body`
/// itself: a datagram or block for the encoders of tests and the
/// simulator. `None` when the whole would pass Hdr Length's 65,535 bytes.
pub fn frame(unit: u8, sequence: u32, count: u8, body: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let length = u16::try_from(HEADER_LEN + body.len()).ok()?;
    let h = UnitHeader {
        length,
        count,
        unit,
        sequence,
    };
    out.extend_from_slice(&h.bytes());
    out.extend_from_slice(body);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Time message (0x20) for `seconds`.
    fn time(seconds: u32) -> Vec<u8> {
        let mut m = vec![6, 0x20];
        m.extend_from_slice(&seconds.to_le_bytes());
        m
    }

    /// A Delete Order (0x29) of `id`.
    fn delete(id: u64) -> Vec<u8> {
        let mut m = vec![14, 0x29, 1, 0, 0, 0];
        m.extend_from_slice(&id.to_le_bytes());
        m
    }

    fn datagram(unit: u8, seq: u32, msgs: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = msgs.concat();
        let mut out = Vec::new();
        frame(unit, seq, msgs.len() as u8, &body, &mut out).unwrap();
        out
    }

    #[test]
    fn header_fields_are_little_endian_at_their_offsets() {
        let b = [0x1c, 0x00, 0x02, 0x01, 0x17, 0x00, 0x00, 0x00];
        let h = UnitHeader::read(&b).unwrap();
        assert_eq!(
            h,
            UnitHeader {
                length: 28,
                count: 2,
                unit: 1,
                sequence: 23
            }
        );
        assert_eq!(h.bytes(), b);
        assert_eq!(h.sequence_of(1), 24);
        assert_eq!(h.next_sequence(), 25);
        assert_eq!(UnitHeader::read(&b[..7]), None);
    }

    #[test]
    fn a_heartbeat_is_exactly_the_header() {
        let d = datagram(1, 43, &[]);
        assert_eq!(d, [8, 0, 0, 1, 43, 0, 0, 0]);
        let p = Datagram::parse(&d).unwrap();
        assert!(p.header.is_heartbeat());
        assert_eq!(p.messages().count(), 0);
        // A heartbeat with a byte more has bytes left over.
        let mut long = d.clone();
        long.push(0);
        long[0] = 9;
        assert_eq!(
            Datagram::parse(&long),
            Err(FrameError::TrailingBytes { bytes: 1, count: 0 })
        );
    }

    #[test]
    fn shorter_than_the_header_is_invalid() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Datagram::parse(&[8, 0, 0, 1, 1, 0, 0, 0][..n]),
                Err(FrameError::Short { len: n })
            );
        }
    }

    #[test]
    fn hdr_length_must_equal_the_datagram_length() {
        let mut d = datagram(1, 5, &[time(1), delete(7)]);
        assert!(Datagram::parse(&d).is_ok());
        d[0] += 1;
        assert_eq!(
            Datagram::parse(&d),
            Err(FrameError::Length {
                header: d.len() as u16 + 1,
                actual: d.len()
            })
        );
        d[0] -= 2;
        assert!(matches!(
            Datagram::parse(&d),
            Err(FrameError::Length { .. })
        ));
    }

    #[test]
    fn messages_must_number_exactly_hdr_count_and_fill_the_datagram() {
        let good = datagram(1, 5, &[time(1), delete(7)]);
        // One message fewer announced: 14 bytes left over.
        let mut fewer = good.clone();
        fewer[2] = 1;
        assert_eq!(
            Datagram::parse(&fewer),
            Err(FrameError::TrailingBytes {
                bytes: 14,
                count: 1
            })
        );
        // One more announced: the datagram ends first.
        let mut more = good.clone();
        more[2] = 3;
        assert_eq!(
            Datagram::parse(&more),
            Err(FrameError::MissingMessages { found: 2, count: 3 })
        );
    }

    #[test]
    fn a_message_length_below_2_or_past_the_end_is_invalid() {
        for len in [0u8, 1] {
            let mut d = datagram(1, 5, &[time(1)]);
            d[8] = len;
            assert_eq!(
                Datagram::parse(&d),
                Err(FrameError::MessageTooShort { index: 0, len })
            );
        }
        let mut d = datagram(1, 5, &[time(1), delete(3)]);
        d[14] = 15;
        assert_eq!(
            Datagram::parse(&d),
            Err(FrameError::MessageOverrun { index: 1, len: 15 })
        );
    }

    #[test]
    fn unit_0_is_invalid_on_a_datagram_but_a_valid_block() {
        let d = datagram(0, 5, &[time(1)]);
        assert_eq!(Datagram::parse(&d), Err(FrameError::UnitZero));
        assert!(Block::parse(&d).is_ok());
    }

    #[test]
    fn the_last_sequence_must_not_pass_u32_unless_unsequenced() {
        let two = [time(1), time(2)];
        assert!(Datagram::parse(&datagram(1, u32::MAX - 1, &two)).is_ok());
        assert_eq!(
            Datagram::parse(&datagram(1, u32::MAX, &two)),
            Err(FrameError::SequenceOverflow {
                sequence: u32::MAX,
                count: 2
            })
        );
        assert!(Datagram::parse(&datagram(1, u32::MAX, &two[..1])).is_ok());
        // A heartbeat carries the next sequence: u32::MAX is fine.
        assert!(Datagram::parse(&datagram(1, u32::MAX, &[])).is_ok());
        assert!(Datagram::parse(&datagram(1, 0, &two)).is_ok());
    }

    #[test]
    fn a_known_type_shorter_than_its_size_is_invalid_and_longer_is_read() {
        let mut short = delete(7);
        short.pop();
        short[0] = 13;
        assert_eq!(
            Datagram::parse(&datagram(1, 5, &[time(1), short])),
            Err(FrameError::Message {
                index: 1,
                error: DecodeError::TooShort {
                    kind: 0x29,
                    len: 13,
                    size: 14
                }
            })
        );
        let mut long = delete(7);
        long.extend_from_slice(&[0xEE; 5]);
        long[0] = 19;
        let d = datagram(1, 5, &[long.clone()]);
        let p = Datagram::parse(&d).unwrap();
        assert_eq!(p.messages().next(), Some(&long[..]));
    }

    #[test]
    fn unknown_types_are_skipped_by_length_and_counted() {
        // 0x2E (Symbol Mapping) exists only on options feeds.
        let unknown = vec![10, 0x2E, 0, 0, 0, 0, 1, 2, 3, 4];
        let other = vec![2, 0xFF];
        let d = datagram(1, 5, &[time(1), unknown.clone(), other.clone(), delete(9)]);
        let p = Datagram::parse(&d).unwrap();
        assert_eq!(p.unknown, 2);
        let seen: Vec<(u32, &[u8])> = p.sequenced().collect();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[1], (6, &unknown[..]));
        assert_eq!(seen[2], (7, &other[..]));
        assert_eq!(seen[3].0, 8);
    }

    #[test]
    fn the_iterator_never_runs_past_unvalidated_bytes() {
        let body = [6u8, 0x20, 0, 0, 0, 0, 0, 0x20, 9];
        // A 0 Length stops the walk.
        assert_eq!(Messages::over(&body, 5).count(), 1);
        let body = [6u8, 0x20, 0, 0, 0, 0, 50, 0x20];
        assert_eq!(Messages::over(&body, 5).count(), 1);
        assert_eq!(Messages::over(&body, 0).count(), 0);
    }
}
