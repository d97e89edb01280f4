//! PITCH time (venues.md `cboe-pitch`, Prices, sizes, symbols, time).
//!
//! A Time message carries a New York wall-clock time of day as whole
//! seconds since the clock's midnight. Its **moment** is that wall-clock
//! time on the New York date that puts it nearest the message's arrival.
//! Every later message of the unit carries a Time Offset (ns) from that
//! moment. A message before the unit's first Time of the session, or after
//! a loss on the unit and before its next Time, is **untimed**.
//!
//! The zone is America/New_York from the zone database built into the
//! binary (jiff's bundled tzdb, as for `nasdaq-itch`), daylight saving
//! included. Pure code: arrival times are passed in.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};

use crate::venue::nasdaq_itch::{midnight_in, new_york};

/// Unix ns of the wall-clock time `seconds` after midnight on `date` in
/// `tz`. The seconds are added to the civil midnight as a wall-clock
/// duration (so 09:30 is 34,200 whatever the day's daylight-saving
/// change), and a wall-clock time that falls in a spring-forward gap or a
/// fall-back fold resolves as jiff's "compatible" rule does (the later
/// instant in a gap, the earlier in a fold). `None` when out of range.
fn wall_clock(tz: &TimeZone, date: Date, seconds: u32) -> Option<i64> {
    let dt: DateTime = date
        .to_datetime(jiff::civil::Time::midnight())
        .checked_add(Span::new().try_seconds(seconds as i64).ok()?)
        .ok()?;
    let ts = tz.to_ambiguous_timestamp(dt).compatible().ok()?;
    i64::try_from(ts.as_nanosecond()).ok()
}

/// The moment of a Time message of `seconds` that arrived at `arrival`
/// (Unix ns): the wall-clock time on the New York date (the arrival's, the
/// day before or the day after) that puts it nearest the arrival. A tie
/// takes the earlier date. `None` only for an arrival outside the range
/// the calendar can represent.
pub fn time_moment(tz: &TimeZone, seconds: u32, arrival: i64) -> Option<i64> {
    let at = Timestamp::from_nanosecond(arrival as i128).ok()?;
    let today = tz.to_datetime(at).date();
    let mut best: Option<i64> = None;
    for date in [today.yesterday().ok(), Some(today), today.tomorrow().ok()]
        .into_iter()
        .flatten()
    {
        let Some(m) = wall_clock(tz, date, seconds) else {
            continue;
        };
        let better = match best {
            None => true,
            Some(b) => m.abs_diff(arrival) < b.abs_diff(arrival),
        };
        if better {
            best = Some(m);
        }
    }
    best
}

/// One unit's clock: the moment of its last Time message, while the
/// unit's messages are timed.
#[derive(Clone, Debug)]
pub struct UnitClock {
    tz: TimeZone,
    /// The last Time's moment, `None` while messages are untimed.
    base: Option<i64>,
}

impl Default for UnitClock {
    fn default() -> UnitClock {
        UnitClock::new()
    }
}

impl UnitClock {
    /// A clock with no Time yet (untimed).
    pub fn new() -> UnitClock {
        UnitClock::with_zone(new_york())
    }

    pub fn with_zone(tz: TimeZone) -> UnitClock {
        UnitClock { tz, base: None }
    }

    /// A Time message of `seconds` arriving at `arrival`: its moment, which
    /// is also its own `source_ts`; later messages are timed from it.
    pub fn on_time(&mut self, seconds: u32, arrival: i64) -> Option<i64> {
        self.base = time_moment(&self.tz, seconds, arrival);
        self.base
    }

    /// The `source_ts` of a message with Time Offset `offset` (ns), `None`
    /// when it is untimed.
    #[inline]
    pub fn stamp(&self, offset: u32) -> Option<i64> {
        self.base.map(|b| b.saturating_add(offset as i64))
    }

    /// A loss was declared on the unit (C3), or its session begins: the
    /// lost datagrams may have held a Time, so messages are untimed until
    /// the next Time.
    pub fn untime(&mut self) {
        self.base = None;
    }

    /// Whether the unit's messages are timed now.
    pub fn is_timed(&self) -> bool {
        self.base.is_some()
    }

    /// The `source_ts` an untimed message gives a quote: New York midnight
    /// of its arrival date.
    pub fn untimed_ts(&self, arrival: i64) -> i64 {
        midnight_in(&self.tz, arrival)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn unix(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_nanosecond() as i64
    }

    #[test]
    fn the_fixtures_clock_is_an_hour_behind_new_york() {
        // cboe-pitch-realtime.pcap: Time 76051 (21:07:31) seen at
        // 2014-09-01 02:07:31.548122 UTC, i.e. 22:07:31 EDT on 08-31.
        let arrival = unix("2014-09-01T02:07:31.548122Z");
        let m = time_moment(&new_york(), 76051, arrival).unwrap();
        assert_eq!(m, unix("2014-09-01T01:07:31Z"));
        assert_eq!((arrival - m) / 1_000_000, 3_600_548);
    }

    #[test]
    fn the_nearest_date_wins_around_midnight() {
        let ny = new_york();
        // 23:59:59 EST read at 00:00:01 EST the next day: yesterday.
        let arrival = unix("2026-12-02T05:00:01Z");
        assert_eq!(
            time_moment(&ny, 86_399, arrival),
            Some(unix("2026-12-02T04:59:59Z"))
        );
        // 00:00:01 read at 23:59:59 the day before: tomorrow.
        let arrival = unix("2026-12-02T04:59:59Z");
        assert_eq!(
            time_moment(&ny, 1, arrival),
            Some(unix("2026-12-02T05:00:01Z"))
        );
        // 09:30 on the day (EST: UTC-5).
        let arrival = unix("2026-12-01T14:30:00.25Z");
        assert_eq!(
            time_moment(&ny, 34_200, arrival),
            Some(unix("2026-12-01T14:30:00Z"))
        );
    }

    #[test]
    fn daylight_saving_is_the_zone_s() {
        let ny = new_york();
        // 09:30 in July is EDT: UTC-4.
        assert_eq!(
            time_moment(&ny, 34_200, unix("2026-07-01T13:30:00Z")),
            Some(unix("2026-07-01T13:30:00Z"))
        );
        // On the spring-forward day (2026-03-08) 09:30 is EDT already.
        assert_eq!(
            time_moment(&ny, 34_200, unix("2026-03-08T13:30:00Z")),
            Some(unix("2026-03-08T13:30:00Z"))
        );
        // On the fall-back day (2026-11-01) 09:30 is EST again.
        assert_eq!(
            time_moment(&ny, 34_200, unix("2026-11-01T14:30:00Z")),
            Some(unix("2026-11-01T14:30:00Z"))
        );
    }

    #[test]
    fn stamps_are_the_last_time_plus_the_offset_until_untimed() {
        let mut c = UnitClock::new();
        let arrival = unix("2026-12-01T14:30:00.5Z");
        assert_eq!(c.stamp(5), None, "before the first Time: untimed");
        assert_eq!(c.untimed_ts(arrival), unix("2026-12-01T05:00:00Z"));
        let moment = c.on_time(34_200, arrival).unwrap();
        assert_eq!(moment, unix("2026-12-01T14:30:00Z"));
        assert!(c.is_timed());
        assert_eq!(c.stamp(250_000_000), Some(moment + S / 4));
        c.on_time(34_201, arrival + S).unwrap();
        assert_eq!(c.stamp(7), Some(moment + S + 7));
        c.untime();
        assert_eq!(c.stamp(7), None, "after a loss: untimed until a Time");
        assert!(!c.is_timed());
    }
}
