//! tickgate's own protocol (wire.md): MoldUDP64 packets of Quote, Heartbeat
//! and Snapshot messages, each with a per-symbol sequence (S1-S8).

use super::{Applied, ChannelHeader, Count, DatagramError, Header, Policy, Rules, Venue};
use crate::wire::{decode_block, peek_first_symbol, ts_i64, Message, Packet, Symbol};

#[derive(Clone, Copy, Debug, Default)]
pub struct Tickgate;

/// MoldUDP64 header of a validated packet, for the channel rules.
#[inline]
pub fn mold_header(p: &Packet<'_>) -> Header {
    Header {
        channel: ChannelHeader {
            session: p.session,
            sequence: p.sequence,
            kind: p.kind(),
            count: p.message_count(),
            stale_session: false,
        },
        send_time: None,
    }
}

impl Venue for Tickgate {
    fn policy(&self) -> Policy {
        // semantics.md as it is: no V3, S7 verifies.
        Policy::default()
    }

    #[inline]
    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        Ok(mold_header(&Packet::parse(datagram)?))
    }

    fn on_session_start(&mut self, _now: i64, _first_session: bool) {}

    #[inline]
    fn apply<R: Rules>(
        &mut self,
        datagram: &[u8],
        _header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied {
        let mut out = Applied::default();
        for payload in Packet::validated(datagram).blocks().skip(skip as usize) {
            let msg = decode_block(payload);
            // Per-symbol sequences start at 1 (a Snapshot may carry 0).
            let (ts, zero) = match &msg {
                Message::Quote(q) => (q.source_ts, q.seq == 0),
                Message::Snapshot(s) => (s.source_ts, false),
                Message::Heartbeat(h) => (h.source_ts, h.next_seq == 0),
                Message::Unknown { .. } => {
                    rules.count(Count::UnknownMessage);
                    continue;
                }
            };
            if zero {
                rules.count(Count::InvalidMessage);
                continue;
            }
            // A sample about the provider's clock, whatever the rules decide.
            out.stamp(ts_i64(ts));
            match &msg {
                Message::Quote(q) => rules.quote(q),
                Message::Snapshot(s) => rules.snapshot(s),
                Message::Heartbeat(h) => rules.heartbeat(h),
                Message::Unknown { .. } => {}
            }
        }
        out
    }

    #[inline]
    fn peek_symbol(&self, datagram: &[u8]) -> Option<Symbol> {
        peek_first_symbol(datagram)
    }
}
