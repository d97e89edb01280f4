//! MoldUDP64 re-request packet (recovery.md R4), the 20 bytes a feed sends
//! to a venue's re-request server: pure codec, no I/O.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 10 | session |
//! | 10 | 8 | sequence: the first missing message (big-endian) |
//! | 18 | 2 | requested message count (big-endian) |

use super::codec::{Gap, RefillCodec};
use crate::wire::SessionId;

/// Length of a request datagram.
pub const REQUEST_LEN: usize = 20;

/// R4: a request asks for at most this many messages (0xFFFF is the end of
/// session marker in a downstream packet's count field).
pub const MAX_REQUEST_COUNT: u16 = 65534;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub session: SessionId,
    /// First message wanted.
    pub sequence: u64,
    /// Messages wanted from `sequence` on (1..=`MAX_REQUEST_COUNT`).
    pub count: u16,
}

impl Request {
    /// The request for the hole `[sequence, sequence + missing)`, its count
    /// capped at `MAX_REQUEST_COUNT` (the rest is asked for next time).
    pub fn for_hole(session: SessionId, sequence: u64, missing: u64) -> Request {
        Request {
            session,
            sequence,
            count: missing.clamp(1, MAX_REQUEST_COUNT as u64) as u16,
        }
    }

    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[..10].copy_from_slice(&self.session.0);
        out[10..18].copy_from_slice(&self.sequence.to_be_bytes());
        out[18..20].copy_from_slice(&self.count.to_be_bytes());
        out
    }

    /// A request as a server receives it: exactly 20 bytes, a count of
    /// 1..=65534 and a sequence of at least 1 (sequences start at 1), else
    /// `None` (the server drops and counts it).
    pub fn decode(datagram: &[u8]) -> Option<Request> {
        let bytes: &[u8; REQUEST_LEN] = datagram.try_into().ok()?;
        let mut session = [0u8; 10];
        session.copy_from_slice(&bytes[..10]);
        let sequence = u64::from_be_bytes(bytes[10..18].try_into().ok()?);
        let count = u16::from_be_bytes([bytes[18], bytes[19]]);
        if sequence == 0 || count == 0 || count > MAX_REQUEST_COUNT {
            return None;
        }
        Some(Request {
            session: SessionId(session),
            sequence,
            count,
        })
    }
}

/// MoldUDP64's refill codec (R4): the 20-byte request above.
#[derive(Clone, Copy, Debug)]
pub struct MoldUdp64;

impl RefillCodec for MoldUdp64 {
    type Request = Request;

    fn request(&self, gap: Gap) -> Request {
        Request::for_hole(gap.session, gap.first, gap.missing)
    }

    fn encode(&self, request: &Request, out: &mut Vec<u8>) {
        out.extend_from_slice(&request.encode());
    }

    fn count(&self, request: &Request) -> u64 {
        request.count as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let r = Request {
            session: SessionId(*b"0000012345"),
            sequence: 0x0102_0304_0506_0708,
            count: 0x0a0b,
        };
        let b = r.encode();
        assert_eq!(&b[..10], b"0000012345");
        assert_eq!(&b[10..18], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[18..], &[0x0a, 0x0b]);
        assert_eq!(Request::decode(&b), Some(r));
    }

    #[test]
    fn decode_refuses_what_no_client_sends() {
        let ok = Request::for_hole(SessionId(*b"SESSION001"), 5, 3).encode();
        assert!(Request::decode(&ok[..19]).is_none());
        let mut long = ok.to_vec();
        long.push(0);
        assert!(Request::decode(&long).is_none());
        let mut zero = ok;
        zero[18..].copy_from_slice(&0u16.to_be_bytes());
        assert!(Request::decode(&zero).is_none());
        let mut end = ok;
        end[18..].copy_from_slice(&0xffffu16.to_be_bytes());
        assert!(Request::decode(&end).is_none());
        let mut seq0 = ok;
        seq0[10..18].copy_from_slice(&0u64.to_be_bytes());
        assert!(Request::decode(&seq0).is_none());
    }

    #[test]
    fn for_hole_caps_the_count() {
        let s = SessionId(*b"SESSION001");
        assert_eq!(Request::for_hole(s, 1, 1_000_000).count, MAX_REQUEST_COUNT);
        assert_eq!(Request::for_hole(s, 1, 7).count, 7);
    }

    #[test]
    fn the_refill_codec_caps_the_count_and_encodes_the_request() {
        let gap = Gap {
            session: SessionId(*b"SESSION001"),
            first: 7,
            missing: 100_000,
        };
        let r = MoldUdp64.request(gap);
        assert_eq!(r.count, MAX_REQUEST_COUNT);
        let mut out = vec![0xAA];
        MoldUdp64.encode(&r, &mut out);
        assert_eq!(out.len(), 1 + REQUEST_LEN);
        assert_eq!(Request::decode(&out[1..]), Some(r));
    }
}
