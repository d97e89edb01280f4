//! Sessions of a unit (venues.md `cboe-pitch`, Mapping: Sessions). PITCH
//! has no session id: a unit's numbering restarts at 1 each trading day
//! and after a Cboe restart, so whether a datagram begins a new session is
//! decided from what the unit has seen: its End of Session, the data
//! packet at sequence 1 it kept, the New York dates of arrival, and a
//! Unit Clear at sequence 1. Pure code, one [`UnitSession`] per unit;
//! `next` (the unit's next expected sequence) is the channel's, passed in.
//!
//! Not here: the channel rules themselves (C1-C4, holes), which stay the
//! engine's, and the lagging-copy window after a restart by rule 4 (a
//! datagram byte-identical to one the replaced session processed in its
//! last `max_hole_ms`), which needs the recent datagrams' digests.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::frame::Datagram;
use super::messages::{TYPE_TIME, TYPE_UNIT_CLEAR};
use crate::venue::nasdaq_itch::new_york;

/// Which kind of line a datagram came from (venues.md `cboe-pitch`,
/// Lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum PitchLine {
    /// One of Cboe's real-time multicast groups.
    #[default]
    Realtime,
    /// A gap response multicast group (R4c).
    Gap,
}

/// Why a datagram begins a new session of its unit (venues.md's rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewSessionRule {
    /// 1: after End of Session, sequence 1, not the ended session's data
    /// packet at sequence 1 again.
    SequenceOneAfterEnd,
    /// 2: after End of Session, a data packet on a later date.
    LaterDateAfterEnd,
    /// 3: no End of Session seen, a data packet on a later date than the
    /// unit's latest processed datagram.
    LaterDate,
    /// 4: a data packet at sequence 1 whose Unit Clear follows only Time
    /// messages, wholly below `next`, not the current session's data
    /// packet at sequence 1 again (a restart within the day).
    UnitClearRestart,
}

/// What the session rules make of one valid datagram of a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hdr Sequence 0: part of no unit's sequence; changes nothing,
    /// counted (`unsequenced`).
    Unsequenced,
    /// The unit has no session yet and this realtime datagram begins its
    /// first (C1 baselines it).
    FirstSession,
    /// C5 for this unit alone: a new session begins with this datagram.
    NewSession(NewSessionRule),
    /// Of the unit's current running session: the channel rules decide.
    Current,
    /// The unit's session ended and this is a copy from it (C6): dropped,
    /// counted.
    EndedCopy,
    /// A gap-line datagram for a unit with no session yet or an ended one
    /// (R4c): dropped, counted.
    GapDropped,
}

/// The New York calendar date of an arrival, cached for the day it falls
/// in: one zone conversion a day, not one a datagram.
#[derive(Clone, Debug)]
pub struct NyDates {
    tz: TimeZone,
    /// `[start, end)` of the cached day, Unix ns, and its date.
    start: i64,
    end: i64,
    date: Date,
}

impl Default for NyDates {
    fn default() -> NyDates {
        NyDates::new()
    }
}

impl NyDates {
    pub fn new() -> NyDates {
        NyDates {
            tz: new_york(),
            start: 0,
            end: 0,
            date: Date::default(),
        }
    }

    /// The New York date of `arrival` (Unix ns).
    #[inline]
    pub fn date(&mut self, arrival: i64) -> Date {
        if arrival < self.start || arrival >= self.end {
            self.load(arrival);
        }
        self.date
    }

    #[cold]
    fn load(&mut self, arrival: i64) {
        let at = Timestamp::from_nanosecond(arrival as i128).unwrap_or(Timestamp::UNIX_EPOCH);
        let zoned = jiff::ZonedDateTime::new(at, self.tz.clone());
        self.date = zoned.date();
        let start = zoned.start_of_day().map(|z| z.timestamp());
        let end = zoned
            .tomorrow()
            .and_then(|t| t.start_of_day())
            .map(|z| z.timestamp());
        match (start, end) {
            (Ok(s), Ok(e)) => {
                self.start = s.as_nanosecond() as i64;
                self.end = e.as_nanosecond() as i64;
            }
            // At the ends of the representable range: no cache.
            _ => {
                self.start = arrival;
                self.end = arrival;
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No datagram of the unit processed yet.
    None,
    Running,
    /// End of Session processed, on this date.
    Ended(Date),
}

/// One unit's session state.
#[derive(Clone, Debug)]
pub struct UnitSession {
    state: State,
    /// The data packet at sequence 1 of the current (or ended) session,
    /// as received; empty when the session was joined later. Its capacity
    /// is kept from one session to the next.
    first_packet: Vec<u8>,
    /// The New York date of the unit's latest processed datagram.
    last_date: Option<Date>,
}

impl Default for UnitSession {
    fn default() -> UnitSession {
        UnitSession::new()
    }
}

impl UnitSession {
    pub fn new() -> UnitSession {
        UnitSession {
            state: State::None,
            first_packet: Vec::new(),
            last_date: None,
        }
    }

    /// Whether the unit's session ended (End of Session processed).
    pub fn ended(&self) -> bool {
        matches!(self.state, State::Ended(_))
    }

    /// Whether the unit has a session (running or ended).
    pub fn started(&self) -> bool {
        self.state != State::None
    }

    /// What `d` (valid, of this unit, `bytes` as received) is to the unit,
    /// arriving on New York date `date` from a `line`, with the unit's
    /// channel expecting `next`. Changes nothing: the caller reports what
    /// it did with [`UnitSession::begin`] and [`UnitSession::processed`].
    pub fn classify(
        &self,
        line: PitchLine,
        d: &Datagram<'_>,
        bytes: &[u8],
        date: Date,
        next: u64,
    ) -> Verdict {
        let h = d.header;
        if h.is_unsequenced() {
            return Verdict::Unsequenced;
        }
        if line == PitchLine::Gap {
            // A gap line never begins, baselines or moves a session.
            return match self.state {
                State::Running => Verdict::Current,
                _ => Verdict::GapDropped,
            };
        }
        let data = h.count > 0;
        match self.state {
            State::None => Verdict::FirstSession,
            State::Ended(end_date) => {
                if h.sequence == 1 && bytes != self.first_packet.as_slice() {
                    Verdict::NewSession(NewSessionRule::SequenceOneAfterEnd)
                } else if data && date > end_date {
                    Verdict::NewSession(NewSessionRule::LaterDateAfterEnd)
                } else {
                    Verdict::EndedCopy
                }
            }
            State::Running => {
                if data && self.last_date.is_some_and(|last| date > last) {
                    Verdict::NewSession(NewSessionRule::LaterDate)
                } else if data
                    && h.sequence == 1
                    && h.next_sequence() <= next
                    && restarts(d)
                    && bytes != self.first_packet.as_slice()
                {
                    Verdict::NewSession(NewSessionRule::UnitClearRestart)
                } else {
                    Verdict::Current
                }
            }
        }
    }

    /// A session begins with this datagram (`FirstSession` or
    /// `NewSession`): the previous one's kept packet and state are
    /// forgotten.
    pub fn begin(&mut self) {
        self.state = State::Running;
        self.first_packet.clear();
    }

    /// The datagram was processed as part of the current session (not
    /// dropped): its date becomes the unit's latest; the session's first
    /// data packet at sequence 1 is kept as received (a later copy does
    /// not replace it); an End of Session among its messages ends the
    /// session (after the packet, C6).
    pub fn processed(&mut self, d: &Datagram<'_>, bytes: &[u8], date: Date, end_of_session: bool) {
        if d.header.is_unsequenced() {
            return;
        }
        self.last_date = Some(date);
        if d.header.sequence == 1 && d.header.count > 0 && self.first_packet.is_empty() {
            self.first_packet.clear();
            self.first_packet.extend_from_slice(bytes);
        }
        if end_of_session && self.state == State::Running {
            self.state = State::Ended(date);
        }
    }
}

impl UnitSession {
    /// The running session's End of Session was applied on New York date
    /// `date` (C6, after its packet).
    pub fn end(&mut self, date: Date) {
        if self.state == State::Running {
            self.state = State::Ended(date);
        }
    }
}

/// Rule 4's content: a Unit Clear preceded only by Time messages.
fn restarts(d: &Datagram<'_>) -> bool {
    for m in d.messages() {
        match m[1] {
            TYPE_TIME => continue,
            TYPE_UNIT_CLEAR => return true,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cboe_pitch::frame::frame;

    fn time(s: u32) -> Vec<u8> {
        let mut m = vec![6, TYPE_TIME];
        m.extend_from_slice(&s.to_le_bytes());
        m
    }

    fn clear() -> Vec<u8> {
        vec![6, TYPE_UNIT_CLEAR, 0, 0, 0, 0]
    }

    fn eos() -> Vec<u8> {
        vec![6, 0x2D, 0, 0, 0, 0]
    }

    fn delete(id: u64) -> Vec<u8> {
        let mut m = vec![14, 0x29, 0, 0, 0, 0];
        m.extend_from_slice(&id.to_le_bytes());
        m
    }

    fn dgram(seq: u32, msgs: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        frame(1, seq, msgs.len() as u8, &msgs.concat(), &mut out).unwrap();
        out
    }

    fn day(d: i8) -> Date {
        jiff::civil::date(2026, 12, d)
    }

    /// Classifies then, unless dropped, begins or continues and processes.
    fn feed(u: &mut UnitSession, line: PitchLine, bytes: &[u8], date: Date, next: u64) -> Verdict {
        let d = Datagram::parse(bytes).unwrap();
        let v = u.classify(line, &d, bytes, date, next);
        match v {
            Verdict::FirstSession | Verdict::NewSession(_) => u.begin(),
            Verdict::Current => {}
            _ => return v,
        }
        let end = d.messages().any(|m| m[1] == 0x2D);
        u.processed(&d, bytes, date, end);
        v
    }

    #[test]
    fn the_first_realtime_datagram_begins_the_first_session() {
        let mut u = UnitSession::new();
        assert!(!u.started());
        let hb = dgram(1, &[]);
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &hb, day(1), 1),
            Verdict::FirstSession
        );
        assert!(u.started());
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &hb, day(1), 1),
            Verdict::Current
        );
    }

    #[test]
    fn sequence_zero_is_unsequenced_on_any_line() {
        let mut u = UnitSession::new();
        for line in [PitchLine::Realtime, PitchLine::Gap] {
            let d = dgram(0, &[time(1)]);
            assert_eq!(feed(&mut u, line, &d, day(1), 1), Verdict::Unsequenced);
        }
        assert!(!u.started(), "it begins nothing");
    }

    #[test]
    fn a_gap_line_never_begins_a_session_and_is_dropped_for_an_ended_one() {
        let mut u = UnitSession::new();
        let d = dgram(1, &[time(1), delete(1)]);
        assert_eq!(
            feed(&mut u, PitchLine::Gap, &d, day(1), 1),
            Verdict::GapDropped
        );
        assert!(!u.started());
        feed(&mut u, PitchLine::Realtime, &d, day(1), 1);
        assert_eq!(
            feed(&mut u, PitchLine::Gap, &dgram(3, &[time(2)]), day(1), 3),
            Verdict::Current
        );
        feed(&mut u, PitchLine::Realtime, &dgram(4, &[eos()]), day(1), 4);
        assert!(u.ended());
        assert_eq!(
            feed(&mut u, PitchLine::Gap, &dgram(4, &[eos()]), day(1), 5),
            Verdict::GapDropped
        );
        // Not even sequence 1 on a later date moves it.
        assert_eq!(
            feed(&mut u, PitchLine::Gap, &dgram(1, &[time(3)]), day(2), 5),
            Verdict::GapDropped
        );
    }

    #[test]
    fn rule_1_sequence_one_after_end_unless_the_same_packet() {
        let mut u = UnitSession::new();
        let first = dgram(1, &[time(1), delete(1)]);
        feed(&mut u, PitchLine::Realtime, &first, day(1), 1);
        feed(&mut u, PitchLine::Realtime, &dgram(3, &[eos()]), day(1), 3);
        // Line B's lagging copy of the ended session's first packet.
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &first, day(1), 4),
            Verdict::EndedCopy
        );
        // Any other datagram of the ended session, heartbeats included.
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &dgram(4, &[]), day(1), 4),
            Verdict::EndedCopy
        );
        assert_eq!(
            feed(
                &mut u,
                PitchLine::Realtime,
                &dgram(2, &[time(1)]),
                day(1),
                4
            ),
            Verdict::EndedCopy
        );
        // A pre-open heartbeat saying "next is 1" begins the new session.
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &dgram(1, &[]), day(1), 4),
            Verdict::NewSession(NewSessionRule::SequenceOneAfterEnd)
        );
        assert!(!u.ended());
        assert_eq!(
            feed(
                &mut u,
                PitchLine::Realtime,
                &dgram(1, &[time(9), clear()]),
                day(1),
                1
            ),
            Verdict::Current
        );
    }

    #[test]
    fn rule_1_a_different_data_packet_at_one_after_end() {
        let mut u = UnitSession::new();
        feed(
            &mut u,
            PitchLine::Realtime,
            &dgram(1, &[time(1), delete(1)]),
            day(1),
            1,
        );
        feed(&mut u, PitchLine::Realtime, &dgram(3, &[eos()]), day(1), 3);
        assert_eq!(
            feed(
                &mut u,
                PitchLine::Realtime,
                &dgram(1, &[time(5), clear()]),
                day(1),
                4
            ),
            Verdict::NewSession(NewSessionRule::SequenceOneAfterEnd)
        );
    }

    #[test]
    fn rule_2_a_data_packet_on_a_later_date_after_end_whatever_its_sequence() {
        let mut u = UnitSession::new();
        feed(
            &mut u,
            PitchLine::Realtime,
            &dgram(1, &[time(1), delete(1)]),
            day(1),
            1,
        );
        feed(&mut u, PitchLine::Realtime, &dgram(3, &[eos()]), day(1), 3);
        // A heartbeat on the next day is not a data packet: still a copy.
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &dgram(50, &[]), day(2), 4),
            Verdict::EndedCopy
        );
        assert_eq!(
            feed(
                &mut u,
                PitchLine::Realtime,
                &dgram(50, &[time(2)]),
                day(2),
                4
            ),
            Verdict::NewSession(NewSessionRule::LaterDateAfterEnd)
        );
    }

    #[test]
    fn rule_3_a_data_packet_on_a_later_date_without_end_of_session() {
        let mut u = UnitSession::new();
        feed(
            &mut u,
            PitchLine::Realtime,
            &dgram(7, &[time(1), delete(1)]),
            day(1),
            7,
        );
        // A heartbeat on a later date: not a data packet.
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &dgram(9, &[]), day(2), 9),
            Verdict::Current
        );
        // The heartbeat was processed on day 2: a data packet of day 2 is
        // no longer later than the latest processed datagram.
        assert_eq!(
            feed(
                &mut u,
                PitchLine::Realtime,
                &dgram(9, &[time(2)]),
                day(2),
                9
            ),
            Verdict::Current
        );
        assert_eq!(
            feed(
                &mut u,
                PitchLine::Realtime,
                &dgram(40, &[time(2)]),
                day(3),
                10
            ),
            Verdict::NewSession(NewSessionRule::LaterDate)
        );
    }

    #[test]
    fn rule_4_a_unit_clear_at_one_below_next_is_a_restart() {
        let mut u = UnitSession::new();
        let first = dgram(1, &[time(1), clear()]);
        feed(&mut u, PitchLine::Realtime, &first, day(1), 1);
        feed(
            &mut u,
            PitchLine::Realtime,
            &dgram(3, &[time(2), delete(1)]),
            day(1),
            3,
        );
        // Line B's copy of the first packet: a duplicate, not a restart.
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &first, day(1), 5),
            Verdict::Current
        );
        // Not below next: the channel rules decide.
        let restart = dgram(1, &[time(7), time(8), clear(), delete(3)]);
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &restart, day(1), 4),
            Verdict::Current
        );
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &restart, day(1), 5),
            Verdict::NewSession(NewSessionRule::UnitClearRestart)
        );
        // The restart's own first packet is now the kept one.
        assert_eq!(
            feed(&mut u, PitchLine::Realtime, &restart, day(1), 5),
            Verdict::Current
        );
    }

    #[test]
    fn rule_4_needs_the_unit_clear_after_only_time_messages() {
        let mut u = UnitSession::new();
        feed(
            &mut u,
            PitchLine::Realtime,
            &dgram(1, &[time(1), delete(9)]),
            day(1),
            1,
        );
        feed(
            &mut u,
            PitchLine::Realtime,
            &dgram(3, &[time(2), delete(1)]),
            day(1),
            3,
        );
        for msgs in [
            vec![time(7), delete(2), clear()],
            vec![time(7), delete(2)],
            vec![delete(2), clear()],
        ] {
            assert_eq!(
                feed(&mut u, PitchLine::Realtime, &dgram(1, &msgs), day(1), 9),
                Verdict::Current,
                "{msgs:?}"
            );
        }
        assert_eq!(
            feed(
                &mut u,
                PitchLine::Realtime,
                &dgram(1, &[clear()]),
                day(1),
                9
            ),
            Verdict::NewSession(NewSessionRule::UnitClearRestart),
            "a Unit Clear first"
        );
    }

    #[test]
    fn new_york_dates_change_at_new_york_midnight() {
        let mut dates = NyDates::new();
        let ns = |s: &str| s.parse::<Timestamp>().unwrap().as_nanosecond() as i64;
        // EST: midnight is 05:00 UTC.
        assert_eq!(dates.date(ns("2026-12-02T04:59:59.999999999Z")), day(1));
        assert_eq!(dates.date(ns("2026-12-02T05:00:00Z")), day(2));
        assert_eq!(dates.date(ns("2026-12-01T05:00:00Z")), day(1));
        assert_eq!(
            dates.date(ns("2026-12-01T04:59:59Z")),
            jiff::civil::date(2026, 11, 30)
        );
        // EDT: midnight is 04:00 UTC.
        assert_eq!(
            dates.date(ns("2026-07-01T03:59:59Z")),
            jiff::civil::date(2026, 6, 30)
        );
        assert_eq!(
            dates.date(ns("2026-07-01T04:00:00Z")),
            jiff::civil::date(2026, 7, 1)
        );
    }
}
