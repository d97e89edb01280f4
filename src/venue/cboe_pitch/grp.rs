//! The Gap Request Proxy as a refill service (recovery.md R4c): the codec
//! the refill machine (`feed::recovery::refill`) asks through, and what
//! each Gap Response status asks of the client. Pure code.
//!
//! The TCP connection, its login and heartbeats are `grp_conn`'s. Not
//! here (not built yet, docs/venues.md): the per-unit outstanding
//! requests, the pauses and the engine's wiring (the engine's refill
//! machine is MoldUDP64's today).

use super::adapter::unit_of_session;
use super::session::{encode_block, GapStatus, SessionMessage};
use crate::venue::codec::{Gap, RefillAction, RefillCodec};
use crate::venue::nasdaq_itch::{midnight_of, new_york};

/// R4c `D`: the start (Unix ns) of the New York calendar day after the one
/// `now` falls on.
pub fn next_new_york_day(now: i64) -> i64 {
    let tz = new_york();
    let at = jiff::Timestamp::from_nanosecond(now as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let today = tz.to_datetime(at).date();
    today.tomorrow().map_or(i64::MAX, |d| midnight_of(&tz, d))
}

/// One Gap Request: the hole's unit, its first missing message, and how
/// many from there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapRequest {
    pub unit: u8,
    pub sequence: u32,
    pub count: u16,
}

/// R4c's request codec. It keeps the feed's count limit, which starts at
/// `grp.max_count` and halves on a `C` refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapRequestCodec {
    count_limit: u16,
}

impl GapRequestCodec {
    /// `max_count`: config `grp.max_count` (1 to 65535; 0 is read as 1).
    pub fn new(max_count: u16) -> GapRequestCodec {
        GapRequestCodec {
            count_limit: max_count.max(1),
        }
    }

    pub fn count_limit(&self) -> u16 {
        self.count_limit
    }

    /// R4c `C`: halves the count limit (down to 1). `false` when it was 1
    /// already: `C` for a count of 1 is handled as `O`.
    pub fn halve(&mut self) -> bool {
        if self.count_limit == 1 {
            return false;
        }
        self.count_limit /= 2;
        true
    }
}

impl RefillCodec for GapRequestCodec {
    type Request = GapRequest;

    /// The hole's unit is its channel's (the synthetic session id names
    /// it); a sequence is a u32 on this venue (a valid datagram never
    /// passes it).
    fn request(&self, gap: Gap) -> GapRequest {
        GapRequest {
            unit: unit_of_session(gap.session).unwrap_or(0),
            sequence: gap.first.min(u32::MAX as u64) as u32,
            count: gap.missing.clamp(1, self.count_limit as u64) as u16,
        }
    }

    /// One block holding the Gap Request (Hdr Unit and Sequence 0).
    fn encode(&self, r: &GapRequest, out: &mut Vec<u8>) {
        encode_block(
            &[SessionMessage::GapRequest {
                unit: r.unit,
                sequence: r.sequence,
                count: r.count,
            }],
            out,
        )
        .expect("one Gap Request always fits a block");
    }

    fn count(&self, r: &GapRequest) -> u64 {
        r.count as u64
    }

    /// R4c: the messages come again on the gap multicast.
    fn answers_on_lines(&self) -> bool {
        true
    }

    /// R5c step 1: Gap Requests for holes among a spin's held datagrams
    /// go out as usual.
    fn asks_during_image(&self) -> bool {
        true
    }

    /// R4c's table of statuses, as the refill machine carries it out.
    fn on_response(&mut self, status: u8, now: i64) -> RefillAction {
        match on_gap_response(GapStatus::from_byte(status), self) {
            GapAction::Wait => RefillAction::Wait,
            GapAction::DeclareLost => RefillAction::DeclareLost,
            GapAction::AskSmaller => RefillAction::AskAgain {
                count_limit: self.count_limit as u64,
            },
            GapAction::PauseSecond => RefillAction::PauseFeed {
                until: now.saturating_add(1_000_000_000),
            },
            GapAction::PauseMinute => RefillAction::OffFeed {
                until: now.saturating_add(60_000_000_000),
            },
            GapAction::PauseDay => RefillAction::OffFeed {
                until: next_new_york_day(now),
            },
            GapAction::UnitNotServed => RefillAction::OffChannel,
            GapAction::Retry => RefillAction::Retry,
        }
    }

    /// R6: counted by status in `GAP_STATUSES` order, then any other.
    fn status_slot(&self, status: u8) -> Option<usize> {
        Some(GapStatus::from_byte(status).slot())
    }

    /// R4c: the count limit is the feed's, whichever unit's request was
    /// refused.
    fn set_count_limit(&mut self, limit: u64) {
        self.count_limit = limit.clamp(1, u16::MAX as u64) as u16;
    }
}

/// What R4c asks of the client on a Gap Response to its outstanding
/// request (one that does not echo the request is dropped and counted
/// before this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapAction {
    /// `A`: wait for the messages on the gap lines.
    Wait,
    /// `O` (and `C` at a count of 1): the hole is declared lost at once,
    /// a spin follows where `spin` names the unit.
    DeclareLost,
    /// `C`: the count limit was halved; ask again at once for the smaller
    /// count (not an attempt).
    AskSmaller,
    /// `S`: no request for 1 s; holes' deadlines move past the pause.
    PauseSecond,
    /// `M`: no request for 60 s; holes get R2's deadline without
    /// re-requests meanwhile.
    PauseMinute,
    /// `D`: no request until the next New York day; holes as after `M`.
    PauseDay,
    /// `I`: no request for that unit until its next session; its holes as
    /// after `M`; counted and logged (a configuration to fix).
    UnitNotServed,
    /// `U` and undocumented statuses: ask again after
    /// `rerequest_timeout_ms`, an attempt without progress.
    Retry,
}

/// R4c's table of statuses. `C` halves `codec`'s count limit.
pub fn on_gap_response(status: GapStatus, codec: &mut GapRequestCodec) -> GapAction {
    match status {
        GapStatus::Accepted => GapAction::Wait,
        GapStatus::OutOfRange => GapAction::DeclareLost,
        GapStatus::CountTooLarge if codec.halve() => GapAction::AskSmaller,
        GapStatus::CountTooLarge => GapAction::DeclareLost,
        GapStatus::SecondLimit => GapAction::PauseSecond,
        GapStatus::MinuteLimit => GapAction::PauseMinute,
        GapStatus::DayLimit => GapAction::PauseDay,
        GapStatus::InvalidUnit => GapAction::UnitNotServed,
        GapStatus::Unavailable | GapStatus::Other(_) => GapAction::Retry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cboe_pitch::adapter::session_id;

    /// recovery.md R4c and `cboe-pitch-grp.pcap`: a Gap Request for unit
    /// 1, sequence 14, count 1, byte for byte.
    #[test]
    fn the_request_is_the_captures_block() {
        let c = GapRequestCodec::new(100);
        let r = c.request(Gap {
            session: session_id(1, 1),
            first: 14,
            missing: 1,
        });
        assert_eq!(
            r,
            GapRequest {
                unit: 1,
                sequence: 14,
                count: 1
            }
        );
        let mut out = Vec::new();
        c.encode(&r, &mut out);
        assert_eq!(
            out,
            [0x11, 0, 1, 0, 0, 0, 0, 0, 9, 3, 1, 0x0e, 0, 0, 0, 1, 0]
        );
    }

    #[test]
    fn the_count_is_the_hole_within_the_limit_which_c_halves() {
        let mut c = GapRequestCodec::new(100);
        let gap = Gap {
            session: session_id(7, 3),
            first: 500,
            missing: 1_000,
        };
        assert_eq!(c.request(gap).count, 100);
        assert_eq!(c.request(gap).unit, 7);
        assert_eq!(
            on_gap_response(GapStatus::CountTooLarge, &mut c),
            GapAction::AskSmaller
        );
        assert_eq!(c.request(gap).count, 50);
        let mut one = GapRequestCodec::new(1);
        assert_eq!(
            on_gap_response(GapStatus::CountTooLarge, &mut one),
            GapAction::DeclareLost,
            "C at a count of 1 is O"
        );
        assert_eq!(one.count_limit(), 1);
    }

    #[test]
    fn every_status_has_its_action() {
        let mut c = GapRequestCodec::new(100);
        for (b, want) in [
            (b'A', GapAction::Wait),
            (b'O', GapAction::DeclareLost),
            (b'S', GapAction::PauseSecond),
            (b'M', GapAction::PauseMinute),
            (b'D', GapAction::PauseDay),
            (b'I', GapAction::UnitNotServed),
            (b'U', GapAction::Retry),
            (b'?', GapAction::Retry),
        ] {
            assert_eq!(on_gap_response(GapStatus::from_byte(b), &mut c), want);
        }
        assert_eq!(c.count_limit(), 100, "only C changes the limit");
    }

    const NS: i64 = 1_000_000_000;

    #[test]
    fn each_status_is_an_action_of_the_refill_machine() {
        let mut c = GapRequestCodec::new(100);
        // 2026-12-04 17:00 New York (22:00 UTC).
        let now = 1_796_421_600 * NS;
        assert_eq!(c.on_response(b'A', now), RefillAction::Wait);
        assert_eq!(c.on_response(b'O', now), RefillAction::DeclareLost);
        assert_eq!(
            c.on_response(b'C', now),
            RefillAction::AskAgain { count_limit: 50 }
        );
        assert_eq!(
            c.on_response(b'S', now),
            RefillAction::PauseFeed { until: now + NS }
        );
        assert_eq!(
            c.on_response(b'M', now),
            RefillAction::OffFeed {
                until: now + 60 * NS
            }
        );
        // The next New York midnight: 2026-12-05 05:00 UTC.
        assert_eq!(
            c.on_response(b'D', now),
            RefillAction::OffFeed {
                until: 1_796_446_800 * NS
            }
        );
        assert_eq!(c.on_response(b'I', now), RefillAction::OffChannel);
        assert_eq!(c.on_response(b'U', now), RefillAction::Retry);
        assert_eq!(c.on_response(b'x', now), RefillAction::Retry);
        c.set_count_limit(1);
        assert_eq!(
            c.on_response(b'C', now),
            RefillAction::DeclareLost,
            "C at a count of 1 is O"
        );
    }
}
