//! Latency histograms recorded without making the measuring thread wait:
//! each measuring thread has a recorder (`LatencyRecorder`, or a
//! `SmallRecorder` for one thread among many) whose samples are merged
//! into a [`SharedHistogram`] with `try_lock` now and then; a scrape reads
//! the shared one. Below both the gate server, which records its service
//! time, and `metrics`, which exports it.

use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;

/// Values above this (ns) are clamped: a minute is "very late" already.
const HDR_MAX_NS: u64 = 60_000_000_000;
/// Samples a recorder keeps before it tries to merge them.
const FLUSH_EVERY: usize = 256;
/// Or this long after the last merge (ns).
const FLUSH_AFTER_NS: i64 = 100_000_000;

fn new_hdr() -> Histogram<u64> {
    // 3 significant digits: a bucket is at most 0.1% wide.
    Histogram::new_with_bounds(1, HDR_MAX_NS, 3).expect("valid HDR bounds")
}

/// The merged histogram of one latency, read by the scrape.
#[derive(Debug)]
pub struct SharedHistogram {
    inner: Mutex<HistogramData>,
}

#[derive(Debug)]
struct HistogramData {
    hdr: Histogram<u64>,
    /// Exact sum of the recorded values in ns (HDR keeps only buckets).
    sum_ns: u128,
}

impl HistogramData {
    /// Records latencies in ns (clamped to the HDR range; the sum exact).
    fn record_all(&mut self, values: &[u64]) {
        for &v in values {
            self.hdr.saturating_record(v.clamp(1, HDR_MAX_NS));
            self.sum_ns += v as u128;
        }
    }
}

impl Default for SharedHistogram {
    fn default() -> Self {
        SharedHistogram {
            inner: Mutex::new(HistogramData {
                hdr: new_hdr(),
                sum_ns: 0,
            }),
        }
    }
}

impl SharedHistogram {
    /// A recorder for the one thread that measures this latency.
    pub fn recorder(self: &Arc<Self>) -> LatencyRecorder {
        LatencyRecorder {
            shared: Arc::clone(self),
            pending: Vec::with_capacity(FLUSH_EVERY),
            overflow: new_hdr(),
            overflow_sum_ns: 0,
            last_flush_ns: i64::MIN,
        }
    }

    /// A recorder for a thread among many (one per gate connection): no
    /// HDR histogram of its own (one with this range and precision is
    /// ~200 KB), only a few pending samples.
    pub fn small_recorder(self: &Arc<Self>) -> SmallRecorder {
        SmallRecorder {
            shared: Arc::clone(self),
            pending: [0; SMALL_PENDING],
            len: 0,
        }
    }

    /// Cumulative counts at `bounds` (seconds), total count and sum (seconds).
    pub fn snapshot(&self, bounds: &[f64]) -> HistogramSnapshot {
        let data = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let bounds_ns: Vec<u64> = bounds.iter().map(|b| (b * 1e9).round() as u64).collect();
        let mut cumulative = vec![0u64; bounds.len()];
        for v in data.hdr.iter_recorded() {
            // A recorded value stands for its HDR bucket; comparing the
            // bucket's top with the bound never reports a value as faster
            // than it was.
            let top = data.hdr.highest_equivalent(v.value_iterated_to());
            if let Some(first) = bounds_ns.iter().position(|&b| top <= b) {
                cumulative[first] += v.count_at_value();
            }
        }
        let mut running = 0;
        for c in cumulative.iter_mut() {
            running += *c;
            *c = running;
        }
        HistogramSnapshot {
            bounds: bounds.to_vec(),
            cumulative,
            count: data.hdr.len(),
            sum_seconds: data.sum_ns as f64 / 1e9,
        }
    }

    /// A quantile in ns (0 when empty), for the demo's status line.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let data = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if data.hdr.is_empty() {
            0
        } else {
            data.hdr.value_at_quantile(q)
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    pub bounds: Vec<f64>,
    /// Samples `<=` each bound.
    pub cumulative: Vec<u64>,
    pub count: u64,
    pub sum_seconds: f64,
}

/// The measuring thread's side of a [`SharedHistogram`]. Recording never
/// blocks and never allocates: samples go to a buffer allocated once, and
/// are merged into the shared histogram every `FLUSH_EVERY` samples or
/// `FLUSH_AFTER_NS`, with `try_lock` (cost: one HDR record per sample, not
/// a walk over the histogram's buckets). While a scrape holds the lock
/// the merge is retried later; should the buffer fill meanwhile, samples
/// go to a private HDR histogram merged once the lock is free again.
#[derive(Debug)]
pub struct LatencyRecorder {
    shared: Arc<SharedHistogram>,
    pending: Vec<u64>,
    overflow: Histogram<u64>,
    overflow_sum_ns: u128,
    last_flush_ns: i64,
}

impl LatencyRecorder {
    /// Records one latency (ns; negative values, from clocks that
    /// disagree, count as 0). `now` (ns) paces the merges.
    #[inline]
    pub fn record(&mut self, value_ns: i64, now: i64) {
        let v = value_ns.max(0) as u64;
        if self.pending.len() < FLUSH_EVERY {
            self.pending.push(v);
        } else {
            self.overflow.saturating_record(v.clamp(1, HDR_MAX_NS));
            self.overflow_sum_ns += v as u128;
        }
        if self.pending.len() >= FLUSH_EVERY
            || now.saturating_sub(self.last_flush_ns) >= FLUSH_AFTER_NS
        {
            self.try_flush(now);
        }
    }

    fn merge_into(&mut self, shared: &mut HistogramData) {
        shared.record_all(&self.pending);
        self.pending.clear();
        if !self.overflow.is_empty() {
            // Same bounds on both sides: `add` cannot fail or resize.
            let _ = shared.hdr.add(&self.overflow);
            shared.sum_ns += self.overflow_sum_ns;
            self.overflow.reset();
            self.overflow_sum_ns = 0;
        }
    }

    /// Merges what is pending unless a scrape holds the lock right now.
    /// Owners call it from their idle path so that quiet periods are seen.
    pub fn try_flush(&mut self, now: i64) -> bool {
        self.last_flush_ns = now;
        if self.pending.is_empty() {
            return true;
        }
        let shared = Arc::clone(&self.shared);
        let Ok(mut data) = shared.inner.try_lock() else {
            return false;
        };
        self.merge_into(&mut data);
        true
    }

    /// Merges what is pending, waiting for the lock (at shutdown).
    pub fn flush(&mut self) {
        if self.pending.is_empty() && self.overflow.is_empty() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let mut data = shared.inner.lock().unwrap_or_else(|e| e.into_inner());
        self.merge_into(&mut data);
    }
}

const SMALL_PENDING: usize = 32;

/// See [`SharedHistogram::small_recorder`]. Each sample is merged at once
/// unless a scrape or another recorder holds the lock (`try_lock`); it then
/// waits in a fixed buffer for the next sample. Only when that buffer is
/// full does recording wait for the lock, which is held for the length of
/// a merge or a scrape's copy. Never allocates.
#[derive(Debug)]
pub struct SmallRecorder {
    shared: Arc<SharedHistogram>,
    pending: [u64; SMALL_PENDING],
    len: usize,
}

impl SmallRecorder {
    pub fn record(&mut self, value_ns: u64) {
        if self.len == SMALL_PENDING {
            self.flush();
        }
        self.pending[self.len] = value_ns;
        self.len += 1;
        if let Ok(mut data) = self.shared.inner.try_lock() {
            data.record_all(&self.pending[..self.len]);
            self.len = 0;
        }
    }

    /// Merges what is pending, waiting for the lock.
    pub fn flush(&mut self) {
        if self.len == 0 {
            return;
        }
        let mut data = self.shared.inner.lock().unwrap_or_else(|e| e.into_inner());
        data.record_all(&self.pending[..self.len]);
        self.len = 0;
    }
}

impl Drop for SmallRecorder {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Drop for LatencyRecorder {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_merges_only_when_due() {
        let shared = Arc::new(SharedHistogram::default());
        let mut rec = shared.recorder();
        rec.record(1_000, 0); // first record: due (never flushed)
        rec.record(1_000, 1_000); // 1 us later: not due
        assert_eq!(shared.snapshot(&[1.0]).count, 1);
        rec.record(1_000, FLUSH_AFTER_NS + 10);
        assert_eq!(shared.snapshot(&[1.0]).count, 3);
        // A held lock (a scrape) makes the merge wait, not the recorder,
        // even beyond the buffer's capacity.
        let guard = shared.inner.lock().unwrap();
        for i in 0..FLUSH_EVERY as i64 + 10 {
            rec.record(1_000, 10 * FLUSH_AFTER_NS + i);
        }
        assert!(!rec.try_flush(10 * FLUSH_AFTER_NS));
        drop(guard);
        assert!(rec.try_flush(11 * FLUSH_AFTER_NS));
        let snap = shared.snapshot(&[1.0]);
        assert_eq!(snap.count, 3 + FLUSH_EVERY as u64 + 10);
        assert!((snap.sum_seconds - snap.count as f64 * 1e-6).abs() < 1e-12);
    }
}
