//! The retry policy of `tickgate fills push` (fills.md "The retrying
//! client"), sans-I/O: no clock, no sockets, no hidden randomness. The caller
//! passes what happened, the server's `Retry-After` and a random number; the
//! policy answers "wait this long and retry" or "give up".
//!
//! K6: a `429` or `5xx` says nothing about whether the work was done; K1-K4
//! make retrying harmless, so the client retries those with the same key.

use std::time::Duration;

/// What one attempt ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The server answered with this status.
    Status(u16),
    /// No complete answer within the per-attempt timeout.
    Timeout,
    /// Could not connect, or the connection broke mid-exchange.
    Connection,
}

/// Whether an outcome is worth retrying with the same key: `429`, `409`
/// (K5: the first attempt is still running), `5xx`, timeouts and
/// connection errors. Every other `4xx` is the client's fault and a retry
/// would get the same answer.
pub fn is_retryable(outcome: AttemptOutcome) -> bool {
    match outcome {
        AttemptOutcome::Status(s) => s == 409 || s == 429 || (500..=599).contains(&s),
        AttemptOutcome::Timeout | AttemptOutcome::Connection => true,
    }
}

/// Full-jitter exponential backoff with a cap and an attempt budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    pub base: Duration,
    pub cap: Duration,
    /// Total attempts per batch, the first one included (at least 1).
    pub max_attempts: u32,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(30),
            max_attempts: 5,
        }
    }
}

/// The policy's answer after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Sleep this long, then send the same batch with the same key again.
    Retry(Duration),
    /// Not retryable (a `4xx` other than `409`/`429`).
    GiveUpNotRetryable,
    /// Retryable, but the attempt budget is spent.
    GiveUpExhausted,
}

impl BackoffPolicy {
    /// The upper bound of the jitter window before retry number `retry`
    /// (0 for the wait after the first attempt): `min(cap, base * 2^retry)`,
    /// saturating instead of overflowing.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.cap)
    }

    /// The wait before retry number `retry`: full jitter
    /// `uniform(0, ceiling(retry))` drawn from `random`, or the server's
    /// `Retry-After` when that is longer, clamped to the cap.
    pub fn wait(&self, retry: u32, retry_after: Option<Duration>, random: u64) -> Duration {
        let ceiling = self.ceiling(retry);
        let ceiling_ns = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        let jitter = Duration::from_nanos(uniform_inclusive(random, ceiling_ns));
        match retry_after {
            Some(ra) => jitter.max(ra.min(self.cap)),
            None => jitter,
        }
    }

    /// Decide after attempt number `attempts_made` (1 for the first) ended
    /// with `outcome`.
    pub fn decide(
        &self,
        attempts_made: u32,
        outcome: AttemptOutcome,
        retry_after: Option<Duration>,
        random: u64,
    ) -> Decision {
        if !is_retryable(outcome) {
            return Decision::GiveUpNotRetryable;
        }
        if attempts_made >= self.max_attempts.max(1) {
            return Decision::GiveUpExhausted;
        }
        Decision::Retry(self.wait(attempts_made.saturating_sub(1), retry_after, random))
    }
}

/// Maps a uniformly random `u64` onto `0..=max` (the modulo bias is below
/// 2^-20 for any ceiling under 30 minutes in nanoseconds, irrelevant here).
fn uniform_inclusive(random: u64, max: u64) -> u64 {
    match max.checked_add(1) {
        Some(n) => random % n,
        None => random,
    }
}

/// Parses a `Retry-After` value (RFC 9110 10.2.3): delay-seconds, or an
/// IMF-fixdate compared with `now_unix_secs`. A date in the past means 0.
/// Anything else is ignored (`None`), as the RFC allows.
pub fn parse_retry_after(value: &str, now_unix_secs: i64) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Very long digit strings saturate rather than fail: "wait long".
        return Some(Duration::from_secs(v.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let at = time::PrimitiveDateTime::parse(v, &format)
        .ok()?
        .assume_utc();
    let delta = at.unix_timestamp().saturating_sub(now_unix_secs);
    Some(Duration::from_secs(delta.max(0) as u64))
}

/// splitmix64: a small, fast PRNG for jitter and the test fault switch. Not
/// for anything secret.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// Seeded from the wall clock and the process id, so that many clients
    /// started together do not retry in lockstep.
    pub fn from_time() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        SplitMix64(nanos ^ (u64::from(std::process::id()) << 32))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in `[0, 1)` from the top 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn retryable_statuses() {
        for s in [409, 429, 500, 502, 503, 504, 599] {
            assert!(is_retryable(AttemptOutcome::Status(s)), "{s}");
        }
        for s in [200, 201, 400, 401, 403, 404, 413, 415, 422, 499, 600] {
            assert!(!is_retryable(AttemptOutcome::Status(s)), "{s}");
        }
        assert!(is_retryable(AttemptOutcome::Timeout));
        assert!(is_retryable(AttemptOutcome::Connection));
    }

    #[test]
    fn ceiling_doubles_then_caps() {
        let p = BackoffPolicy::default();
        assert_eq!(p.ceiling(0), ms(200));
        assert_eq!(p.ceiling(1), ms(400));
        assert_eq!(p.ceiling(4), ms(3200));
        assert_eq!(p.ceiling(7), ms(25_600));
        assert_eq!(p.ceiling(8), Duration::from_secs(30));
        assert_eq!(p.ceiling(40), Duration::from_secs(30));
        assert_eq!(p.ceiling(u32::MAX), Duration::from_secs(30));
        let huge = BackoffPolicy {
            base: Duration::from_secs(u64::MAX / 2),
            cap: Duration::MAX,
            max_attempts: 5,
        };
        assert_eq!(huge.ceiling(3), Duration::MAX);
    }

    #[test]
    fn jitter_stays_within_zero_and_ceiling() {
        let p = BackoffPolicy::default();
        let mut rng = SplitMix64::new(7);
        let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
        for _ in 0..10_000 {
            let w = p.wait(2, None, rng.next_u64());
            assert!(w <= ms(800), "{w:?}");
            lo = lo.min(w);
            hi = hi.max(w);
        }
        // Full jitter uses the whole window, not just its top.
        assert!(lo < ms(50), "{lo:?}");
        assert!(hi > ms(750), "{hi:?}");
        assert_eq!(p.wait(2, None, 0), Duration::ZERO);
        assert_eq!(p.wait(2, None, 800_000_000), ms(800));
        // Deep retries draw from the capped window [0, 30 s].
        assert_eq!(p.wait(20, None, 30_000_000_000), Duration::from_secs(30));
        assert_eq!(p.wait(20, None, 30_000_000_001), Duration::ZERO);
    }

    #[test]
    fn retry_after_wins_when_longer_and_is_clamped() {
        let p = BackoffPolicy::default();
        // Jitter 0 + Retry-After 2 s: the server's wait.
        assert_eq!(
            p.wait(0, Some(Duration::from_secs(2)), 0),
            Duration::from_secs(2)
        );
        // Jitter 800 ms (the window's top) beats a Retry-After of 0.
        assert_eq!(p.wait(2, Some(Duration::ZERO), 800_000_000), ms(800));
        // Retry-After above the cap is clamped to it.
        assert_eq!(
            p.wait(0, Some(Duration::from_secs(3600)), 0),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn decide_budget_and_non_retryable() {
        let p = BackoffPolicy::default();
        assert_eq!(
            p.decide(1, AttemptOutcome::Status(400), None, 0),
            Decision::GiveUpNotRetryable
        );
        assert_eq!(
            p.decide(1, AttemptOutcome::Status(422), None, 0),
            Decision::GiveUpNotRetryable
        );
        assert_eq!(
            p.decide(1, AttemptOutcome::Status(503), None, 0),
            Decision::Retry(Duration::ZERO)
        );
        assert_eq!(
            p.decide(
                1,
                AttemptOutcome::Status(429),
                Some(Duration::from_secs(1)),
                0
            ),
            Decision::Retry(Duration::from_secs(1))
        );
        // The first wait uses base * 2^0, the fourth base * 2^3.
        assert_eq!(
            p.decide(1, AttemptOutcome::Timeout, None, 200_000_000),
            Decision::Retry(ms(200))
        );
        assert_eq!(
            p.decide(1, AttemptOutcome::Timeout, None, 200_000_001),
            Decision::Retry(ms(0))
        );
        match p.decide(4, AttemptOutcome::Connection, None, 1_600_000_000) {
            Decision::Retry(w) => assert_eq!(w, ms(1600)),
            d => panic!("{d:?}"),
        }
        assert_eq!(
            p.decide(5, AttemptOutcome::Status(500), None, 0),
            Decision::GiveUpExhausted
        );
        let once = BackoffPolicy {
            max_attempts: 1,
            ..p
        };
        assert_eq!(
            once.decide(1, AttemptOutcome::Status(500), None, 0),
            Decision::GiveUpExhausted
        );
        let zero = BackoffPolicy {
            max_attempts: 0,
            ..p
        };
        assert_eq!(
            zero.decide(1, AttemptOutcome::Status(500), None, 0),
            Decision::GiveUpExhausted
        );
    }

    #[test]
    fn retry_after_parsing() {
        assert_eq!(parse_retry_after("5", 0), Some(Duration::from_secs(5)));
        assert_eq!(parse_retry_after(" 0 ", 0), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", 0),
            Some(Duration::from_secs(u64::MAX))
        );
        // 2026-11-30T08:00:00Z is 1796025600.
        let now = 1_796_025_600;
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 08:00:10 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("-3", 0), None);
        assert_eq!(parse_retry_after("1.5", 0), None);
        assert_eq!(parse_retry_after("soon", 0), None);
        assert_eq!(parse_retry_after("", 0), None);
    }

    #[test]
    fn prng_is_deterministic_and_spread() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert!(xs.windows(2).all(|w| w[0] != w[1]));
        let mut c = SplitMix64::new(1);
        let below_half = (0..10_000).filter(|_| c.next_f64() < 0.5).count();
        assert!((4_500..5_500).contains(&below_half), "{below_half}");
        let mut d = SplitMix64::new(3);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&d.next_f64())));
    }
}
