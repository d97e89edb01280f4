//! Clock-offset estimator of `semantics.md` ("Clock offset (per feed)").
//!
//! Each sample is `arrival - source_ts` in nanoseconds. With `auto`, the
//! offset is the minimum of the samples of the last 10 s (`now - t <= 10 s`),
//! but may rise by at most 1 ms per second of arrival time (it may fall at
//! once), so that frozen provider timestamps cannot be absorbed:
//! `offset = window_min` for the first sample, else
//! `offset = min(window_min, offset + (now - prev_now) / 1000)`.
//!
//! The window minimum is a monotonic deque in a fixed ring (no allocation
//! after construction). If more than `WINDOW_CAP` strictly increasing
//! samples are pending inside one window (only possible with >4096 distinct
//! rising samples in 10 s, e.g. frozen timestamps at a high rate), the new
//! sample is merged into the newest entry, which keeps that entry's smaller
//! value alive a little longer: the estimate can only come out lower, i.e.
//! source ages come out larger (the conservative direction).

use super::settings::ClockOffset;

/// Samples older than this leave the window (`now - t <= WINDOW_NS` stays).
pub const WINDOW_NS: i64 = 10_000_000_000;
/// Capacity of the monotonic deque (power of two).
pub const WINDOW_CAP: usize = 4096;

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    t: i64,
    v: i64,
}

#[derive(Clone, Debug)]
pub struct ClockEstimator {
    mode: ClockOffset,
    /// Ring of (time, sample), strictly increasing in `v` from head to tail.
    ring: Box<[Entry]>,
    head: usize,
    len: usize,
    offset: i64,
    prev_now: i64,
    samples: u64,
}

impl ClockEstimator {
    pub fn new(mode: ClockOffset) -> ClockEstimator {
        let cap = if mode == ClockOffset::Auto {
            WINDOW_CAP
        } else {
            0
        };
        ClockEstimator {
            mode,
            ring: vec![Entry::default(); cap].into_boxed_slice(),
            head: 0,
            len: 0,
            offset: match mode {
                ClockOffset::FixedNs(ns) => ns,
                _ => 0,
            },
            prev_now: 0,
            samples: 0,
        }
    }

    /// The offset as of the latest sample (0 before any; fixed or 0 when
    /// not `auto`).
    #[inline]
    pub fn offset_ns(&self) -> i64 {
        self.offset
    }

    /// Number of samples taken (all modes).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// One sample: a message that reached the symbol rules, sent at
    /// `source_ts` (provider clock) and received at `now` (ours).
    #[inline]
    pub fn sample(&mut self, now: i64, source_ts: u64) {
        self.sample_delays(now, delay_ns(now, source_ts), 1);
    }

    /// `count` samples received at the same `now` (one packet), of which
    /// `min_delay` is the smallest `now - source_ts`. Exactly equivalent to
    /// taking them one by one: between samples at the same time the offset
    /// may not rise (`(now - now) / 1000 = 0`), so only the smallest one
    /// can lower it, and the larger ones expire from the window together
    /// with it, so they can never become its minimum.
    #[inline]
    pub fn sample_delays(&mut self, now: i64, min_delay: i64, count: u64) {
        if count == 0 {
            return;
        }
        let first = self.samples == 0;
        self.samples += count;
        if self.mode != ClockOffset::Auto {
            return;
        }
        let v = min_delay;
        let mask = WINDOW_CAP - 1;
        // Drop pending entries that can never be the minimum again.
        while self.len > 0 {
            let tail = (self.head + self.len - 1) & mask;
            if self.ring[tail].v >= v {
                self.len -= 1;
            } else {
                break;
            }
        }
        if self.len == WINDOW_CAP {
            // Full (see module doc): merge into the newest entry.
            let tail = (self.head + self.len - 1) & mask;
            self.ring[tail].t = now;
        } else {
            let slot = (self.head + self.len) & mask;
            self.ring[slot] = Entry { t: now, v };
            self.len += 1;
        }
        // Expire samples older than the window (`now - t > 10 s`).
        while self.len > 1 && now.saturating_sub(self.ring[self.head].t) > WINDOW_NS {
            self.head = (self.head + 1) & mask;
            self.len -= 1;
        }
        let window_min = self.ring[self.head].v;
        self.offset = if first {
            window_min
        } else {
            let rise = now.saturating_sub(self.prev_now) / 1000;
            window_min.min(self.offset.saturating_add(rise))
        };
        self.prev_now = now;
    }
}

/// A sample: `arrival - source_ts`, saturating.
#[inline]
pub fn delay_ns(now: i64, source_ts: u64) -> i64 {
    now.saturating_sub(ts_i64(source_ts))
}

pub use crate::wire::ts_i64;

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const T0: i64 = 1_796_025_600_000_000_000;

    fn sample(c: &mut ClockEstimator, now: i64, delay: i64) {
        c.sample(now, (now - delay) as u64);
    }

    #[test]
    fn zero_before_any_sample_and_first_sample_sets_it() {
        let mut c = ClockEstimator::new(ClockOffset::Auto);
        assert_eq!(c.offset_ns(), 0);
        sample(&mut c, T0, 7 * MS);
        assert_eq!(c.offset_ns(), 7 * MS);
    }

    #[test]
    fn window_minimum() {
        let mut c = ClockEstimator::new(ClockOffset::Auto);
        sample(&mut c, T0, 9 * MS);
        sample(&mut c, T0 + 1, 5 * MS);
        assert_eq!(c.offset_ns(), 5 * MS);
        // A larger sample does not raise it while the 5 ms one is in the window.
        sample(&mut c, T0 + 5_000 * MS, 20 * MS);
        assert_eq!(c.offset_ns(), 5 * MS);
        // `now - t <= 10 s` is still inside.
        sample(&mut c, T0 + 1 + 10_000 * MS, 20 * MS);
        assert_eq!(c.offset_ns(), 5 * MS);
    }

    #[test]
    fn falls_at_once() {
        let mut c = ClockEstimator::new(ClockOffset::Auto);
        sample(&mut c, T0, 50 * MS);
        sample(&mut c, T0 + MS, -3 * MS);
        assert_eq!(c.offset_ns(), -3 * MS);
    }

    #[test]
    fn rise_limited_to_one_ms_per_second() {
        let mut c = ClockEstimator::new(ClockOffset::Auto);
        sample(&mut c, T0, 5 * MS);
        // Every later sample is 100 ms; the 5 ms sample expires after 10 s.
        let mut now = T0;
        for _ in 0..110 {
            now += 100 * MS;
            sample(&mut c, now, 100 * MS);
        }
        // At T0+11 s the window holds only 100 ms samples; the offset rose
        // 0.1 ms per 100 ms step since the 5 ms sample left (after T0+10 s).
        let expected = 5 * MS + 10 * (100 * MS / 1000);
        assert_eq!(c.offset_ns(), expected);
        // Keeps rising by 1 ms/s, never past the window minimum.
        for _ in 0..2000 {
            now += 100 * MS;
            sample(&mut c, now, 100 * MS);
        }
        assert_eq!(c.offset_ns(), 100 * MS);
    }

    #[test]
    fn rise_uses_truncated_integer_division() {
        let mut c = ClockEstimator::new(ClockOffset::Auto);
        sample(&mut c, T0, 0);
        // The 0 sample expires (now - t > 10 s): the offset may rise by
        // (10 s + 1 ns) / 1000 = 10_000_000 ns only.
        sample(&mut c, T0 + 10_000 * MS + 1, 1_000 * MS);
        assert_eq!(c.offset_ns(), 10_000_000);
        // 1999 ns later: + 1999 / 1000 = 1 (truncated).
        sample(&mut c, T0 + 10_000 * MS + 2000, 1_000 * MS);
        assert_eq!(c.offset_ns(), 10_000_001);
    }

    /// The estimator as the contract words it, with unbounded memory.
    fn reference(samples: &[(i64, i64)]) -> Vec<i64> {
        let mut out = Vec::new();
        let mut offset = 0i64;
        for (i, &(now, _)) in samples.iter().enumerate() {
            let window_min = samples[..=i]
                .iter()
                .filter(|(t, _)| now - t <= WINDOW_NS)
                .map(|&(_, v)| v)
                .min()
                .unwrap();
            offset = if i == 0 {
                window_min
            } else {
                window_min.min(offset + (now - samples[i - 1].0) / 1000)
            };
            out.push(offset);
        }
        out
    }

    #[test]
    fn matches_the_contract_wording() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..50 {
            let mut now = T0;
            let mut samples = Vec::new();
            for _ in 0..300 {
                now += rnd(400) as i64 * MS + rnd(1000) as i64;
                samples.push((now, rnd(200) as i64 * MS - 20 * MS));
            }
            let mut c = ClockEstimator::new(ClockOffset::Auto);
            let got: Vec<i64> = samples
                .iter()
                .map(|&(now, v)| {
                    sample(&mut c, now, v);
                    c.offset_ns()
                })
                .collect();
            assert_eq!(got, reference(&samples));
        }
    }

    #[test]
    fn a_packet_of_samples_equals_its_samples_one_by_one() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..50 {
            let mut one = ClockEstimator::new(ClockOffset::Auto);
            let mut batched = ClockEstimator::new(ClockOffset::Auto);
            let mut now = T0;
            for _ in 0..200 {
                now += rnd(3000) as i64 * MS;
                let k = 1 + rnd(5);
                let delays: Vec<i64> = (0..k).map(|_| rnd(300) as i64 * MS - 50 * MS).collect();
                for &d in &delays {
                    sample(&mut one, now, d);
                }
                batched.sample_delays(now, *delays.iter().min().unwrap(), k);
                assert_eq!(one.offset_ns(), batched.offset_ns());
                assert_eq!(one.samples(), batched.samples());
            }
        }
    }

    #[test]
    fn fixed_and_off() {
        let mut c = ClockEstimator::new(ClockOffset::FixedNs(2500 * MS));
        sample(&mut c, T0, 3 * MS);
        assert_eq!(c.offset_ns(), 2500 * MS);
        let mut c = ClockEstimator::new(ClockOffset::Off);
        sample(&mut c, T0, 3 * MS);
        assert_eq!(c.offset_ns(), 0);
        assert_eq!(c.samples(), 1);
    }

    #[test]
    fn full_ring_merges_conservatively() {
        // Strictly rising samples, more than the ring holds in one window.
        let mut samples = Vec::new();
        for i in 0..(WINDOW_CAP as i64 + 500) {
            samples.push((T0 + i * 3 * MS, i * 1000));
        }
        let exact = reference(&samples);
        let mut c = ClockEstimator::new(ClockOffset::Auto);
        for (i, &(now, v)) in samples.iter().enumerate() {
            sample(&mut c, now, v);
            assert!(c.offset_ns() <= exact[i], "sample {i}");
        }
        assert!(c.offset_ns() > 0, "the estimate still rises");
    }
}
