//! `iex-tops`: IEX TOPS 1.6 over IEX-TP v1 (venues.md). The segment is
//! validated whole (`segment`), then its messages reach the rules: Quote
//! Update as the whole quote (V1, V4), Trading Status, Operational Halt
//! and the quote's availability flag as the trading state (V2), System
//! Event `C` as the end of the session (C6). The channel is IEX-TP's
//! message sequence; the segment's send time is the channel's time (V3)
//! and the clock sample (V5).

mod encode;
mod segment;

pub use encode::SegmentBuilder;
pub use segment::{IexError, Segment, MESSAGE_PROTOCOL, SEGMENT_HEADER_LEN};

use super::{Applied, ChannelHeader, Count, DatagramError, Header, Policy, Rules, Venue};
use crate::wire::{PacketKind, SessionId, Side};

pub const TYPE_QUOTE_UPDATE: u8 = b'Q';
pub const TYPE_TRADING_STATUS: u8 = b'H';
pub const TYPE_OPERATIONAL_HALT: u8 = b'O';
pub const TYPE_SYSTEM_EVENT: u8 = b'S';

/// Quote Update flag: the symbol is not available for trading (V2).
pub const QUOTE_FLAG_HALTED: u8 = 0x80;

/// V2 halt sources: a symbol is halted while any of them says so.
const HALT_TRADING_STATUS: u8 = 1;
const HALT_OPERATIONAL: u8 = 2;
const HALT_QUOTE_FLAG: u8 = 4;

/// V4: 4 implied decimals to the 10^-9 fixed point of wire.md.
pub const PRICE_SCALE: i64 = 100_000;

/// The size of each TOPS 1.6 message type venues.md lists; `None` for a
/// type it does not know (skipped by length and counted).
#[inline]
pub fn message_size(kind: u8) -> Option<usize> {
    Some(match kind {
        b'Q' => 42,
        b'H' => 22,
        b'O' => 18,
        b'S' => 10,
        b'D' => 31,
        b'P' => 19,
        b'T' => 38,
        b'X' => 26,
        b'B' => 38,
        b'A' => 80,
        b'I' => 18,
        _ => return None,
    })
}

/// The IEX-TP session id as a channel session (C5 compares them): its
/// decimal digits, zero-padded to MoldUDP64's 10 bytes (u32 has at most
/// 10), so that replay and status print the number IEX uses.
pub fn session_id(id: u32) -> SessionId {
    let mut out = [b'0'; 10];
    let mut n = id;
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    SessionId(out)
}

pub struct IexTops {
    /// Messages applied, by type byte.
    types: Box<[u64; 256]>,
}

impl Default for IexTops {
    fn default() -> IexTops {
        IexTops {
            types: Box::new([0; 256]),
        }
    }
}

#[inline]
fn le_i64(b: &[u8]) -> i64 {
    i64::from_le_bytes(b[..8].try_into().unwrap())
}

#[inline]
fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().unwrap())
}

impl Venue for IexTops {
    fn policy(&self) -> Policy {
        Policy {
            channel_source_time: true,
            trust_from_start: false,
            loops: false,
        }
    }

    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        let seg = Segment::parse(datagram)?;
        Ok(Header {
            channel: ChannelHeader {
                session: session_id(seg.session_id),
                sequence: seg.first_sequence,
                // IEX-TP has no end-of-session segment: System Event C.
                kind: if seg.count == 0 {
                    PacketKind::Heartbeat
                } else {
                    PacketKind::Data
                },
                count: seg.count,
                stale_session: false,
            },
            send_time: Some(seg.send_time),
        })
    }

    fn on_session_start(&mut self, _now: i64, _first_session: bool) {}

    fn message_types(&self) -> Option<&[u64; 256]> {
        Some(&self.types)
    }

    fn apply<R: Rules>(
        &mut self,
        datagram: &[u8],
        header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied {
        let mut out = Applied::default();
        let first = header.channel.sequence;
        let seg = Segment::validated(datagram);
        for (i, msg) in seg.messages().enumerate().skip(skip as usize) {
            let seq = first.saturating_add(i as u64);
            self.types[msg[0] as usize] += 1;
            let Some(size) = message_size(msg[0]) else {
                rules.count(Count::UnknownMessage);
                continue;
            };
            debug_assert!(msg.len() >= size);
            match msg[0] {
                TYPE_QUOTE_UPDATE => {
                    let Some(slot) = rules.symbol(segment::symbol(&msg[10..18])) else {
                        continue;
                    };
                    let flags = msg[1];
                    // `Segment::parse` checked that both prices scale (V4).
                    let side = |size: u32, px: i64| {
                        (size > 0).then_some(Side {
                            px: px * PRICE_SCALE,
                            qty: size as u64,
                        })
                    };
                    let bid = side(le_u32(&msg[18..]), le_i64(&msg[22..]));
                    let ask = side(le_u32(&msg[38..]), le_i64(&msg[30..]));
                    // V2: flag 0x80 halts until a Quote Update without it.
                    rules.set_halt(slot, HALT_QUOTE_FLAG, flags & QUOTE_FLAG_HALTED != 0);
                    // V1/S4: the whole quote; seq is the channel sequence.
                    rules.venue_quote(slot, seq, le_i64(&msg[2..]), bid, ask);
                }
                TYPE_TRADING_STATUS => {
                    let Some(slot) = rules.symbol(segment::symbol(&msg[10..18])) else {
                        continue;
                    };
                    // V2: H halted, O order acceptance period, P paused;
                    // T trading; any other value changes nothing.
                    match msg[1] {
                        b'H' | b'O' | b'P' => rules.set_halt(slot, HALT_TRADING_STATUS, true),
                        b'T' => rules.set_halt(slot, HALT_TRADING_STATUS, false),
                        _ => {}
                    }
                }
                TYPE_OPERATIONAL_HALT => {
                    let Some(slot) = rules.symbol(segment::symbol(&msg[10..18])) else {
                        continue;
                    };
                    // V2: O halted operationally, N that halt ends.
                    match msg[1] {
                        b'O' => rules.set_halt(slot, HALT_OPERATIONAL, true),
                        b'N' => rules.set_halt(slot, HALT_OPERATIONAL, false),
                        _ => {}
                    }
                }
                // C6: End of Messages, after the packet's other messages.
                TYPE_SYSTEM_EVENT if msg[1] == b'C' => out.end_of_session = true,
                // Known types that change no quote.
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_ten_decimal_digits() {
        assert_eq!(session_id(1137508352).to_string(), "1137508352");
        assert_eq!(session_id(1).to_string(), "0000000001");
        assert_eq!(session_id(u32::MAX).to_string(), "4294967295");
    }
}
