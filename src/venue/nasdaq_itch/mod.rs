//! `nasdaq-itch`: Nasdaq TotalView-ITCH 5.0 over MoldUDP64 (venues.md).
//! Work in progress: framing only; the books come next.

use super::tickgate::mold_header;
use super::{Applied, DatagramError, Header, Policy, Rules, Venue};
use crate::wire::Packet;

pub struct NasdaqItch {
    _max_orders: usize,
}

impl NasdaqItch {
    pub fn new(max_orders: usize) -> NasdaqItch {
        NasdaqItch {
            _max_orders: max_orders,
        }
    }
}

impl Venue for NasdaqItch {
    fn policy(&self) -> Policy {
        Policy {
            channel_source_time: true,
            trust_from_start: true,
        }
    }

    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        Ok(mold_header(&Packet::parse_with(datagram, |_| 1)?))
    }

    fn on_session_start(&mut self, _now: i64, _first_session: bool) {}

    fn apply<R: Rules>(&mut self, _: &[u8], _: &Header, _: u16, _: &mut R) -> Applied {
        Applied::default()
    }
}
