//! An IEX-TP / TOPS 1.6 encoder for the simulator and the tests: the exact
//! layout `Segment::parse` reads (little-endian throughout).

use super::segment::SEGMENT_HEADER_LEN;
use super::MESSAGE_PROTOCOL;
use crate::wire::Symbol;

/// Builds one IEX-TP segment in a reusable buffer.
#[derive(Clone, Debug, Default)]
pub struct SegmentBuilder {
    buf: Vec<u8>,
    count: u16,
}

impl SegmentBuilder {
    pub fn new() -> SegmentBuilder {
        SegmentBuilder {
            buf: Vec::with_capacity(1500),
            count: 0,
        }
    }

    /// Starts a segment (a heartbeat if no message follows).
    pub fn start(
        &mut self,
        session_id: u32,
        first_sequence: u64,
        send_time: i64,
    ) -> &mut SegmentBuilder {
        self.buf.clear();
        self.count = 0;
        self.buf.push(1); // version
        self.buf.push(0); // reserved
        self.buf.extend_from_slice(&MESSAGE_PROTOCOL.to_le_bytes());
        self.buf.extend_from_slice(&1u32.to_le_bytes()); // channel id
        self.buf.extend_from_slice(&session_id.to_le_bytes());
        self.buf.extend_from_slice(&0u16.to_le_bytes()); // payload length
        self.buf.extend_from_slice(&0u16.to_le_bytes()); // message count
        self.buf.extend_from_slice(&0i64.to_le_bytes()); // stream offset
        self.buf
            .extend_from_slice(&(first_sequence as i64).to_le_bytes());
        self.buf.extend_from_slice(&send_time.to_le_bytes());
        debug_assert_eq!(self.buf.len(), SEGMENT_HEADER_LEN);
        self
    }

    /// Appends one message block (type byte first).
    pub fn raw(&mut self, msg: &[u8]) -> &mut SegmentBuilder {
        self.buf
            .extend_from_slice(&(msg.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(msg);
        self.count += 1;
        let payload = (self.buf.len() - SEGMENT_HEADER_LEN) as u16;
        self.buf[12..14].copy_from_slice(&payload.to_le_bytes());
        self.buf[14..16].copy_from_slice(&self.count.to_le_bytes());
        self
    }

    /// Quote Update (`Q`): prices with 4 implied decimals, size 0 = empty.
    #[allow(clippy::too_many_arguments)]
    pub fn quote_update(
        &mut self,
        flags: u8,
        timestamp: i64,
        symbol: Symbol,
        bid_size: u32,
        bid_price: i64,
        ask_price: i64,
        ask_size: u32,
    ) -> &mut SegmentBuilder {
        let mut m = [0u8; 42];
        m[0] = b'Q';
        m[1] = flags;
        m[2..10].copy_from_slice(&timestamp.to_le_bytes());
        m[10..18].copy_from_slice(&symbol.wire());
        m[18..22].copy_from_slice(&bid_size.to_le_bytes());
        m[22..30].copy_from_slice(&bid_price.to_le_bytes());
        m[30..38].copy_from_slice(&ask_price.to_le_bytes());
        m[38..42].copy_from_slice(&ask_size.to_le_bytes());
        self.raw(&m)
    }

    /// Trading Status (`H`): `H`, `O`, `P` halted, `T` trading.
    pub fn trading_status(
        &mut self,
        status: u8,
        timestamp: i64,
        symbol: Symbol,
        reason: [u8; 4],
    ) -> &mut SegmentBuilder {
        let mut m = [0u8; 22];
        m[0] = b'H';
        m[1] = status;
        m[2..10].copy_from_slice(&timestamp.to_le_bytes());
        m[10..18].copy_from_slice(&symbol.wire());
        m[18..22].copy_from_slice(&reason);
        self.raw(&m)
    }

    /// Operational Halt (`O`): `O` halted, `N` not.
    pub fn operational_halt(
        &mut self,
        status: u8,
        timestamp: i64,
        symbol: Symbol,
    ) -> &mut SegmentBuilder {
        let mut m = [0u8; 18];
        m[0] = b'O';
        m[1] = status;
        m[2..10].copy_from_slice(&timestamp.to_le_bytes());
        m[10..18].copy_from_slice(&symbol.wire());
        self.raw(&m)
    }

    /// System Event (`S`): `O`, `S`, `R`, `M`, `E`, `C` (end of messages).
    pub fn system_event(&mut self, event: u8, timestamp: i64) -> &mut SegmentBuilder {
        let mut m = [0u8; 10];
        m[0] = b'S';
        m[1] = event;
        m[2..10].copy_from_slice(&timestamp.to_le_bytes());
        self.raw(&m)
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::super::{IexTops, Segment};
    use super::*;
    use crate::venue::Venue;
    use crate::wire::PacketKind;

    #[test]
    fn built_segments_parse_back() {
        let s = Symbol::parse("AAPL").unwrap();
        let mut b = SegmentBuilder::new();
        b.start(7, 41, 1_500_000_000)
            .quote_update(0, 1_400_000_000, s, 100, 1_852_300, 1_852_400, 200)
            .trading_status(b'H', 1, s, *b"LUDP")
            .operational_halt(b'O', 2, s)
            .system_event(b'C', 3);
        let seg = Segment::parse(b.bytes()).unwrap();
        assert_eq!((seg.session_id, seg.first_sequence, seg.count), (7, 41, 4));
        assert_eq!(seg.send_time, 1_500_000_000);
        let kinds: Vec<u8> = seg.messages().map(|m| m[0]).collect();
        assert_eq!(kinds, b"QHOS");
        b.start(7, 45, 9);
        let h = IexTops::default().parse(b.bytes()).unwrap();
        assert_eq!(h.channel.kind, PacketKind::Heartbeat);
        assert_eq!(h.channel.sequence, 45);
        assert_eq!(h.send_time, Some(9));
    }
}
