//! The progress line of a long replay, on standard error when it is a
//! terminal (never on a pipe or a file: scripts and tests read stderr):
//! packets, capture time reached, packets/s and capture-seconds per
//! wall-second, redrawn at most four times a second and cleared at the end.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Least time between two redraws.
const REDRAW: Duration = Duration::from_millis(250);
/// Packets between two looks at the clock.
const CLOCK_EVERY: u32 = 4096;

pub struct Progress {
    enabled: bool,
    start: Instant,
    last_draw: Instant,
    countdown: u32,
    first_ts: Option<i64>,
    drawn: bool,
}

impl Progress {
    /// On standard error if it is a terminal; otherwise does nothing.
    pub fn stderr() -> Progress {
        Progress::new(std::io::stderr().is_terminal())
    }

    pub fn new(enabled: bool) -> Progress {
        let now = Instant::now();
        Progress {
            enabled,
            start: now,
            last_draw: now,
            countdown: CLOCK_EVERY,
            first_ts: None,
            drawn: false,
        }
    }

    /// `packets` handed out so far, the last stamped `ts`.
    #[inline]
    pub fn tick(&mut self, packets: u64, ts: i64) {
        if !self.enabled {
            return;
        }
        self.first_ts.get_or_insert(ts);
        self.countdown -= 1;
        if self.countdown > 0 {
            return;
        }
        self.countdown = CLOCK_EVERY;
        let now = Instant::now();
        if now - self.last_draw < REDRAW {
            return;
        }
        self.last_draw = now;
        let line = progress_line(packets, self.first_ts.unwrap_or(ts), ts, now - self.start);
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r{line}\x1b[K");
        let _ = e.flush();
        self.drawn = true;
    }

    /// Clears the line (if one was drawn).
    pub fn finish(&mut self) {
        if self.drawn {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `12.35 M packets, capture 2026-11-30 09:30:01.123, 1.24 M packets/s, 45.6 capture-s/s`
pub fn progress_line(packets: u64, first_ts: i64, ts: i64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let capture_s = (ts.saturating_sub(first_ts)) as f64 / 1e9;
    format!(
        "{} packets, capture {}, {} packets/s, {:.1} capture-s/s",
        si(packets as f64),
        clock(ts),
        si(packets as f64 / secs),
        capture_s / secs
    )
}

fn si(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn clock(ts: i64) -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(ts as i128)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| ts.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_says_packets_time_and_speeds() {
        // 2026-11-30T09:30:01.123Z, 10 s of capture in 2 s
        let t0 = 1_796_031_001_123_000_000 - 10_000_000_000;
        let line = progress_line(12_345_678, t0, t0 + 10_000_000_000, Duration::from_secs(2));
        assert_eq!(
            line,
            "12.35 M packets, capture 2026-11-30 09:30:01.123, 6.17 M packets/s, 5.0 capture-s/s"
        );
        assert_eq!(
            progress_line(500, 0, 0, Duration::from_secs(1)),
            "500 packets, capture 1970-01-01 00:00:00.000, 500 packets/s, 0.0 capture-s/s"
        );
    }

    #[test]
    fn disabled_draws_nothing() {
        let mut p = Progress::new(false);
        for i in 0..100_000 {
            p.tick(i, i as i64);
        }
        assert!(!p.drawn);
    }
}
