//! PITCH messages and datagrams for the tests that feed a `cboe-pitch`
//! feed by hand (`pitch_spin_core`, `pitch_spin_client`).

#![allow(dead_code)]

use tickgate::venue::cboe_pitch::frame::frame;
use tickgate::venue::cboe_pitch::messages::{encode, Message, Width};
use tickgate::wire::Symbol;

pub fn sym(s: &str) -> Symbol {
    Symbol::parse(s).unwrap()
}

/// A long-form Add Order of `symbol` (price in 10^-9 dollars).
pub fn add(id: u64, side: u8, shares: u32, symbol: &str, price: i64) -> Message {
    Message::AddOrder {
        width: Width::Long,
        offset: 0,
        order_id: id,
        side,
        shares,
        symbol: sym(symbol),
        price,
        flags: 1,
    }
}

pub fn status(symbol: &str, status: u8) -> Message {
    Message::TradingStatus {
        offset: 0,
        symbol: sym(symbol),
        status,
        reg_sho: b'0',
    }
}

/// `msgs` framed as one datagram of `unit` from sequence `seq`.
pub fn dgram(unit: u8, seq: u32, msgs: &[Message]) -> Vec<u8> {
    let mut body = Vec::new();
    for m in msgs {
        encode(m, &mut body).unwrap();
    }
    let mut out = Vec::new();
    frame(unit, seq, msgs.len() as u8, &body, &mut out).unwrap();
    out
}
