//! Packet encoder for the simulator and the tests: builds a MoldUDP64
//! datagram in a reusable buffer.

use super::{
    Heartbeat, Message, Quote, SessionId, COUNT_END_OF_SESSION, HEADER_LEN, TYPE_QUOTE,
    TYPE_SNAPSHOT,
};

/// Builds one packet at a time into a buffer that is reused across packets.
#[derive(Debug, Default, Clone)]
pub struct PacketBuilder {
    buf: Vec<u8>,
    count: u16,
}

impl PacketBuilder {
    pub fn new() -> PacketBuilder {
        PacketBuilder {
            buf: Vec::with_capacity(1500),
            count: 0,
        }
    }

    /// Starts a data packet whose first block carries channel `sequence`.
    pub fn start(&mut self, session: SessionId, sequence: u64) -> &mut Self {
        self.buf.clear();
        self.buf.extend_from_slice(&session.0);
        self.buf.extend_from_slice(&sequence.to_be_bytes());
        self.buf.extend_from_slice(&0u16.to_be_bytes());
        self.count = 0;
        self
    }

    /// Appends a raw block payload (any type, any length up to u16::MAX).
    pub fn push_raw(&mut self, payload: &[u8]) -> &mut Self {
        assert!(payload.len() <= u16::MAX as usize, "block payload too long");
        assert!(self.count < COUNT_END_OF_SESSION - 1, "too many blocks");
        self.buf
            .extend_from_slice(&(payload.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(payload);
        self.count += 1;
        self.buf[18..20].copy_from_slice(&self.count.to_be_bytes());
        self
    }

    pub fn push(&mut self, msg: &Message<'_>) -> &mut Self {
        match msg {
            Message::Quote(q) => self.push_raw(&q.encode(TYPE_QUOTE)),
            Message::Snapshot(q) => self.push_raw(&q.encode(TYPE_SNAPSHOT)),
            Message::Heartbeat(h) => self.push_raw(&h.encode()),
            Message::Unknown { payload, .. } => self.push_raw(payload),
        }
    }

    pub fn quote(&mut self, q: &Quote) -> &mut Self {
        self.push_raw(&q.encode(TYPE_QUOTE))
    }

    pub fn snapshot(&mut self, q: &Quote) -> &mut Self {
        self.push_raw(&q.encode(TYPE_SNAPSHOT))
    }

    pub fn heartbeat(&mut self, h: &Heartbeat) -> &mut Self {
        self.push_raw(&h.encode())
    }

    /// Number of blocks so far.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Bytes of the packet so far (header included).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The finished datagram. A packet with no blocks is a channel heartbeat.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// A channel heartbeat: `sequence` is the next sequence number.
    pub fn channel_heartbeat(session: SessionId, sequence: u64) -> [u8; HEADER_LEN] {
        mold_header_bytes(session, sequence, 0)
    }

    /// End of session.
    pub fn end_of_session(session: SessionId, sequence: u64) -> [u8; HEADER_LEN] {
        mold_header_bytes(session, sequence, COUNT_END_OF_SESSION)
    }
}

/// The 20-byte MoldUDP64 header of a datagram of `count` messages from
/// `sequence` (wire.md).
pub fn mold_header_bytes(session: SessionId, sequence: u64, count: u16) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..10].copy_from_slice(&session.0);
    h[10..18].copy_from_slice(&sequence.to_be_bytes());
    h[18..20].copy_from_slice(&count.to_be_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Packet, PacketKind, Side, Symbol};

    #[test]
    fn round_trip() {
        let s = SessionId::parse("20261201A1").unwrap();
        let q = Quote::new(
            Symbol::parse("EURUSD").unwrap(),
            3,
            17,
            Some(Side { px: 1, qty: 2 }),
            None,
        );
        let h = Heartbeat {
            flags: 0,
            symbol: q.symbol,
            next_seq: 4,
            source_ts: 18,
        };
        let mut b = PacketBuilder::new();
        b.start(s, 10).quote(&q).heartbeat(&h).push_raw(b"Zxyz");
        let p = Packet::parse(b.bytes()).unwrap();
        assert_eq!(p.session, s);
        assert_eq!(p.sequence, 10);
        assert_eq!(p.kind(), PacketKind::Data);
        let msgs: Vec<_> = p.messages().collect();
        assert_eq!(msgs[0], Message::Quote(q));
        assert_eq!(msgs[1], Message::Heartbeat(h));
        assert_eq!(
            msgs[2],
            Message::Unknown {
                kind: b'Z',
                payload: b"Zxyz"
            }
        );
        let hb = PacketBuilder::channel_heartbeat(s, 13);
        assert_eq!(Packet::parse(&hb).unwrap().kind(), PacketKind::Heartbeat);
        let eos = PacketBuilder::end_of_session(s, 13);
        assert_eq!(
            Packet::parse(&eos).unwrap().kind(),
            PacketKind::EndOfSession
        );
    }
}
