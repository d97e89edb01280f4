//! The refill service of a feed, whichever its venue (recovery.md R4 and
//! R4c): the registry of refill codecs, as `AnyVenue` is of venues. The
//! refill machine (`feed::recovery::refill`) asks through it; the I/O
//! shell sends a MoldUDP64 request as a datagram and a Gap Request over
//! the Gap Request Proxy's connection.

use super::cboe_pitch::grp::{GapRequest, GapRequestCodec};
use super::codec::{Gap, RefillAction, RefillCodec};
use super::rerequest::{MoldUdp64, Request};

/// A feed's refill codec.
#[derive(Clone, Copy, Debug)]
pub enum AnyRefill {
    /// R4: the MoldUDP64 re-request servers (`rerequest`).
    MoldUdp64(MoldUdp64),
    /// R4c: Cboe's Gap Request Proxy (`grp`); the messages come on the
    /// gap lines.
    GapProxy(GapRequestCodec),
}

/// One request of either service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyRequest {
    MoldUdp64(Request),
    GapProxy(GapRequest),
}

impl AnyRefill {
    /// The feed's codec: the Gap Request Proxy's with its count limit
    /// (`grp.max_count`) where the feed has one, else MoldUDP64's (a feed
    /// without any refill server never asks).
    pub fn new(gap_proxy: Option<u16>) -> AnyRefill {
        match gap_proxy {
            Some(max_count) => AnyRefill::GapProxy(GapRequestCodec::new(max_count)),
            None => AnyRefill::MoldUdp64(MoldUdp64),
        }
    }

    /// R4c: the Gap Request Proxy's codec, if this is it.
    pub fn gap_proxy_mut(&mut self) -> Option<&mut GapRequestCodec> {
        match self {
            AnyRefill::GapProxy(c) => Some(c),
            AnyRefill::MoldUdp64(_) => None,
        }
    }
}

impl RefillCodec for AnyRefill {
    type Request = AnyRequest;

    #[inline]
    fn request(&self, gap: Gap) -> AnyRequest {
        match self {
            AnyRefill::MoldUdp64(c) => AnyRequest::MoldUdp64(c.request(gap)),
            AnyRefill::GapProxy(c) => AnyRequest::GapProxy(c.request(gap)),
        }
    }

    fn encode(&self, request: &AnyRequest, out: &mut Vec<u8>) {
        match (self, request) {
            (AnyRefill::MoldUdp64(c), AnyRequest::MoldUdp64(r)) => c.encode(r, out),
            (AnyRefill::GapProxy(c), AnyRequest::GapProxy(r)) => c.encode(r, out),
            // A request is only ever built by its own codec.
            (AnyRefill::MoldUdp64(_), AnyRequest::GapProxy(r)) => {
                GapRequestCodec::new(r.count).encode(r, out)
            }
            (AnyRefill::GapProxy(_), AnyRequest::MoldUdp64(r)) => MoldUdp64.encode(r, out),
        }
    }

    fn count(&self, request: &AnyRequest) -> u64 {
        match request {
            AnyRequest::MoldUdp64(r) => r.count as u64,
            AnyRequest::GapProxy(r) => r.count as u64,
        }
    }

    fn on_response(&mut self, status: u8, now: i64) -> RefillAction {
        match self {
            AnyRefill::MoldUdp64(c) => c.on_response(status, now),
            AnyRefill::GapProxy(c) => c.on_response(status, now),
        }
    }

    fn status_slot(&self, status: u8) -> Option<usize> {
        match self {
            AnyRefill::MoldUdp64(c) => c.status_slot(status),
            AnyRefill::GapProxy(c) => c.status_slot(status),
        }
    }

    fn set_count_limit(&mut self, limit: u64) {
        match self {
            AnyRefill::MoldUdp64(c) => c.set_count_limit(limit),
            AnyRefill::GapProxy(c) => c.set_count_limit(limit),
        }
    }

    #[inline]
    fn answers_on_lines(&self) -> bool {
        matches!(self, AnyRefill::GapProxy(_))
    }

    #[inline]
    fn asks_during_image(&self) -> bool {
        match self {
            AnyRefill::MoldUdp64(c) => c.asks_during_image(),
            AnyRefill::GapProxy(c) => c.asks_during_image(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cboe_pitch::adapter::session_id;
    use crate::wire::SessionId;

    #[test]
    fn each_service_asks_in_its_own_form() {
        let mold = AnyRefill::new(None);
        let gap = Gap {
            session: SessionId(*b"SESSION001"),
            first: 5,
            missing: 4,
        };
        assert_eq!(
            mold.request(gap),
            AnyRequest::MoldUdp64(Request {
                session: gap.session,
                sequence: 5,
                count: 4
            })
        );
        assert!(!mold.answers_on_lines());
        assert!(!mold.asks_during_image(), "R5: GLIMPSE's hold waits");
        let grp = AnyRefill::new(Some(2));
        let gap = Gap {
            session: session_id(3, 1),
            ..gap
        };
        assert_eq!(
            grp.request(gap),
            AnyRequest::GapProxy(GapRequest {
                unit: 3,
                sequence: 5,
                count: 2
            }),
            "within grp.max_count"
        );
        assert!(grp.answers_on_lines());
        assert!(grp.asks_during_image(), "R5c step 1");
        let mut out = Vec::new();
        grp.encode(&grp.request(gap), &mut out);
        assert_eq!(out, [0x11, 0, 1, 0, 0, 0, 0, 0, 9, 3, 3, 5, 0, 0, 0, 2, 0]);
    }
}
