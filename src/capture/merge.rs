//! Putting datagrams in exact time order (sans-I/O): the pieces `replay`
//! sorts a capture with, whatever its order, in bounded memory.
//!
//! - [`RunFinder`] splits a stream of stamps into its maximal sorted runs
//!   (a capture merged `cat`-style is two runs; a sorted one is one).
//! - [`Merge`] merges sorted [`DatagramSource`]s into one, in timestamp
//!   order, the earlier source first among equal stamps: with the runs of
//!   the files in file order, that is a stable sort of the whole input.
//! - [`SortBuffer`] sorts a bounded chunk of datagrams in memory (stably),
//!   for the runs too many to read at once: sorted chunks are spilled and
//!   merged (an external merge sort).
//! - [`plan`] decides between the two from the memory budget.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddrV4;

use super::pcap::CaptureError;
use super::source::{DatagramMeta, DatagramRun, DatagramSource};

/// Maximal sorted (non-decreasing) runs of a stream of stamps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFinder {
    last: Option<i64>,
    newest: Option<i64>,
    runs: u64,
    out_of_order: u64,
}

impl RunFinder {
    /// Takes the next stamp; true if it starts a run (the first one, or
    /// one stamped earlier than the stamp before it).
    pub fn push(&mut self, ts: i64) -> bool {
        if self.newest.is_some_and(|n| ts < n) {
            self.out_of_order += 1;
        }
        self.newest = Some(self.newest.map_or(ts, |n| n.max(ts)));
        let starts = self.last.is_none_or(|l| ts < l);
        self.last = Some(ts);
        if starts {
            self.runs += 1;
        }
        starts
    }

    /// Runs found so far.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Stamps earlier than the newest before them.
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }
}

/// Why the merge stopped early: the source (by index) and its error.
#[derive(Debug)]
pub struct MergeError {
    pub source: usize,
    pub error: CaptureError,
    /// The source handed out a datagram stamped earlier than its previous
    /// one: it was not sorted after all.
    pub went_back: bool,
}

struct Head<S> {
    source: S,
    meta: Option<DatagramMeta>,
    buf: Vec<u8>,
}

/// k-way merge of sorted sources (see the module documentation). Each
/// source holds the one datagram it is next to give; the merge hands out
/// the earliest, swapping buffers (no copy).
pub struct Merge<S> {
    heads: Vec<Head<S>>,
    /// (stamp, source index) of every head holding a datagram.
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    started: bool,
    error: Option<MergeError>,
    handed: u64,
    /// Most bytes held at once: every payload buffer (the heads' and the
    /// one handed out) plus what the sources say they hold.
    peak_bytes: usize,
}

impl<S: DatagramSource> Merge<S> {
    /// Sources in tie order: among equal stamps, the lower index first.
    pub fn new(sources: Vec<S>) -> Self {
        Merge {
            heap: BinaryHeap::with_capacity(sources.len()),
            heads: sources
                .into_iter()
                .map(|source| Head {
                    source,
                    meta: None,
                    buf: Vec::new(),
                })
                .collect(),
            started: false,
            error: None,
            handed: 0,
            peak_bytes: 0,
        }
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.heads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    fn start(&mut self) {
        if !self.started {
            self.started = true;
            for i in 0..self.heads.len() {
                self.refill(i);
            }
            self.note_memory(0);
        }
    }

    fn refill(&mut self, i: usize) {
        if self.error.is_some() {
            return;
        }
        let h = &mut self.heads[i];
        // the stamp of what it gave last (its meta is still there)
        let prev = h.meta.take().map(|m| m.ts_ns);
        match h.source.next(&mut h.buf) {
            Ok(Some(m)) if prev.is_some_and(|p| m.ts_ns < p) => {
                self.error = Some(MergeError {
                    source: i,
                    went_back: true,
                    error: CaptureError::Corrupt {
                        offset: 0,
                        what: format!(
                            "a sorted run went back in time ({} after {}): the file changed while it was read",
                            m.ts_ns,
                            prev.unwrap_or_default()
                        ),
                    },
                });
            }
            Ok(Some(m)) => {
                h.meta = Some(m);
                self.heap.push(Reverse((m.ts_ns, i)));
            }
            Ok(None) => {}
            Err(error) => {
                self.error = Some(MergeError {
                    source: i,
                    error,
                    went_back: false,
                })
            }
        }
    }

    fn note_memory(&mut self, out: usize) {
        let held = out + DatagramSource::memory(self);
        self.peak_bytes = self.peak_bytes.max(held);
    }

    /// Stamp of the next datagram (`None` at the end or at an error).
    pub fn peek_ts(&mut self) -> Option<i64> {
        self.start();
        if self.error.is_some() {
            return None;
        }
        self.heap.peek().map(|Reverse((ts, _))| *ts)
    }

    /// The next datagram in time order into `buf`; `Err` once, where a
    /// source failed (what came before it was handed out).
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, MergeError> {
        self.start();
        if let Some(e) = self.error.take() {
            self.heap.clear();
            return Err(e);
        }
        let Some(Reverse((_, i))) = self.heap.pop() else {
            return Ok(None);
        };
        let h = &mut self.heads[i];
        let meta = h.meta.expect("a head in the heap holds a datagram");
        std::mem::swap(buf, &mut h.buf);
        // the head reads its next datagram into the caller's old buffer
        self.refill(i);
        // buffers only grow and swapping keeps their sum: a sample now and
        // then (and at the end) sees the peak
        self.handed += 1;
        if self.handed % 1024 == 1 || self.heap.is_empty() {
            self.note_memory(buf.capacity());
        }
        Ok(Some(meta))
    }

    /// The next datagrams as one run (`DatagramSource::next_run`) of a
    /// merge of one source, which has nothing to put in order:
    /// `Ok(Some(false))` at the end; `Ok(None)` when there are other
    /// sources, the source hands out datagrams only, or the merge holds
    /// its next datagram already ([`Self::next_into`] then goes on).
    pub fn next_run(&mut self, run: &mut DatagramRun) -> Result<Option<bool>, MergeError> {
        if self.heads.len() != 1 || !self.heap.is_empty() || self.error.is_some() {
            return Ok(None);
        }
        let Some(got) = self.heads[0].source.next_run(run) else {
            return Ok(None);
        };
        match got {
            Ok(more) => {
                self.handed += run.len() as u64;
                self.note_memory(run.memory());
                Ok(Some(more))
            }
            Err(error) => Err(MergeError {
                source: 0,
                error,
                went_back: false,
            }),
        }
    }

    /// Most bytes held at once (see the field).
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }
}

impl<S: DatagramSource> DatagramSource for Merge<S> {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        self.next_into(buf).map_err(|e| e.error)
    }

    fn memory(&self) -> usize {
        self.heads
            .iter()
            .map(|h| h.buf.capacity() + h.source.memory())
            .sum()
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    ts: i64,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    start: usize,
    len: usize,
}

/// Bookkeeping counted per datagram held on top of its payload.
pub const SORT_ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

/// A chunk of datagrams sorted in memory, holding at most `limit` bytes
/// (payloads + bookkeeping, by capacity).
#[derive(Debug)]
pub struct SortBuffer {
    entries: Vec<Entry>,
    arena: Vec<u8>,
    limit: usize,
    peak_bytes: usize,
}

impl SortBuffer {
    pub fn new(limit: usize) -> Self {
        SortBuffer {
            entries: Vec::new(),
            arena: Vec::new(),
            limit,
            peak_bytes: 0,
        }
    }

    /// Bytes held (by capacity).
    pub fn bytes(&self) -> usize {
        self.entries.capacity() * SORT_ENTRY_BYTES + self.arena.capacity()
    }

    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether one more datagram of `len` bytes fits without growing past
    /// the limit (an empty buffer takes one whatever its size).
    pub fn fits(&self, len: usize) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let entries = if self.entries.len() == self.entries.capacity() {
            (self.entries.capacity() * 2).max(64)
        } else {
            self.entries.capacity()
        };
        let arena = if self.arena.len() + len > self.arena.capacity() {
            (self.arena.capacity() * 2).max(self.arena.len() + len)
        } else {
            self.arena.capacity()
        };
        entries * SORT_ENTRY_BYTES + arena <= self.limit
    }

    /// Appends one datagram (check [`Self::fits`] first).
    pub fn push(&mut self, m: DatagramMeta, payload: &[u8]) {
        if self.entries.len() == self.entries.capacity() {
            // grow by doubling, but not past what the limit allows
            let room = (self.limit / SORT_ENTRY_BYTES).max(self.entries.len() + 1);
            let want = (self.entries.capacity() * 2).max(64).min(room);
            self.entries
                .reserve_exact(want.saturating_sub(self.entries.len()).max(1));
        }
        if self.arena.len() + payload.len() > self.arena.capacity() {
            let want = (self.arena.capacity() * 2).max(self.arena.len() + payload.len());
            let room = self
                .limit
                .saturating_sub(self.entries.capacity() * SORT_ENTRY_BYTES)
                .max(self.arena.len() + payload.len());
            self.arena.reserve_exact(want.min(room) - self.arena.len());
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(payload);
        self.entries.push(Entry {
            ts: m.ts_ns,
            src: m.src,
            dst: m.dst,
            start,
            len: payload.len(),
        });
        self.peak_bytes = self.peak_bytes.max(self.bytes());
    }

    /// Sorts what is held by stamp, stably (the order pushed among equal
    /// stamps), and hands each datagram to `out` in that order; the
    /// buffer is empty after (its memory kept for the next chunk).
    pub fn drain_sorted<E>(
        &mut self,
        mut out: impl FnMut(DatagramMeta, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.entries.sort_by_key(|e| e.ts);
        let r = self.entries.iter().try_for_each(|e| {
            out(
                DatagramMeta {
                    ts_ns: e.ts,
                    src: e.src,
                    dst: e.dst,
                    len: e.len,
                },
                &self.arena[e.start..e.start + e.len],
            )
        });
        self.entries.clear();
        self.arena.clear();
        r
    }
}

/// A [`SortBuffer`]'s datagrams, sorted, as a source (a chunk small
/// enough to stay in memory).
#[derive(Debug)]
pub struct SortedChunk {
    buf: SortBuffer,
    at: usize,
}

impl SortBuffer {
    /// What is held, sorted stably by stamp, as a source.
    pub fn into_sorted(mut self) -> SortedChunk {
        self.entries.sort_by_key(|e| e.ts);
        SortedChunk { buf: self, at: 0 }
    }
}

impl DatagramSource for SortedChunk {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        let Some(e) = self.buf.entries.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        buf.clear();
        buf.extend_from_slice(&self.buf.arena[e.start..e.start + e.len]);
        Ok(Some(DatagramMeta {
            ts_ns: e.ts,
            src: e.src,
            dst: e.dst,
            len: e.len,
        }))
    }

    fn memory(&self) -> usize {
        self.buf.bytes()
    }
}

/// How a set of sorted runs is to be merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// One reader per run, all at once (their memory fits the budget).
    Direct,
    /// Sorted chunks of at most `chunk_bytes` spilled to disk, then merged
    /// at most `fan_in` at a time.
    Spill { chunk_bytes: usize, fan_in: usize },
}

/// Least budget: a spill needs room for a chunk and two chunk readers.
pub const MIN_BUDGET: usize = 1 << 20;

/// Buffer of a spill chunk being read (`spill`), counted in the budget.
pub const READ_BUF: usize = 32 << 10;
/// Buffer of a spill chunk being written (`spill`), counted in the budget.
pub const WRITE_BUF: usize = 64 << 10;

/// Chooses how to merge `runs` sorted runs whose readers would hold
/// `direct_bytes` together, within `budget` bytes (at least
/// [`MIN_BUDGET`]). A spill reads the input with one reader and writes a
/// chunk file (`input_bytes` together) and merges chunk files whose
/// readers hold `chunk_reader_bytes` each (while writing one more).
pub fn plan(
    runs: u64,
    direct_bytes: usize,
    input_bytes: usize,
    chunk_reader_bytes: usize,
    budget: usize,
) -> Plan {
    let budget = budget.max(MIN_BUDGET);
    if runs <= 1 || direct_bytes <= budget {
        return Plan::Direct;
    }
    let chunk_bytes = budget.saturating_sub(input_bytes).max(budget / 4);
    let fan_in = (budget.saturating_sub(WRITE_BUF) / chunk_reader_bytes.max(1)).max(2);
    Plan::Spill {
        chunk_bytes,
        fan_in,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::source::VecSource;

    fn a(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new([239, 0, 0, 1].into(), port)
    }

    fn src(items: &[(i64, u8)]) -> VecSource {
        VecSource::new(items.iter().map(|&(ts, tag)| (ts, a(1), a(2), vec![tag])))
    }

    fn drain<S: DatagramSource>(m: &mut Merge<S>) -> Vec<(i64, u8)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(meta) = m.next_into(&mut buf).unwrap() {
            assert_eq!(meta.len, buf.len());
            out.push((meta.ts_ns, buf[0]));
        }
        out
    }

    /// A deterministic pseudo-random sequence.
    fn lcg(x: &mut u64) -> u64 {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *x >> 33
    }

    #[test]
    fn runs_are_maximal_sorted_stretches() {
        let mut f = RunFinder::default();
        let starts: Vec<bool> = [5, 5, 7, 3, 4, 4, 9, 1]
            .iter()
            .map(|&t| f.push(t))
            .collect();
        assert_eq!(
            starts,
            [true, false, false, true, false, false, false, true]
        );
        assert_eq!(f.runs(), 3);
        // 3 and 4, 4 are behind 7; 1 is behind 9
        assert_eq!(f.out_of_order(), 4);
    }

    #[test]
    fn merge_is_a_stable_sort_of_the_sources_in_order() {
        let mut m = Merge::new(vec![
            src(&[(1, 1), (5, 2), (5, 3), (9, 4)]),
            src(&[(0, 5), (5, 6), (10, 7)]),
            src(&[]),
            src(&[(5, 8)]),
        ]);
        assert_eq!(m.peek_ts(), Some(0));
        assert_eq!(
            drain(&mut m),
            [
                (0, 5),
                (1, 1),
                (5, 2),
                (5, 3),
                (5, 6),
                (5, 8),
                (9, 4),
                (10, 7)
            ]
        );
        assert_eq!(m.peek_ts(), None);
    }

    #[test]
    fn merging_the_runs_of_any_input_equals_a_stable_sort() {
        let mut x = 7u64;
        for round in 0..50 {
            let n = 1 + (lcg(&mut x) % 400) as usize;
            let input: Vec<(i64, u8)> = (0..n)
                .map(|i| ((lcg(&mut x) % (1 + round as u64 * 3)) as i64, i as u8))
                .collect();
            // cut into maximal runs, as replay does
            let mut f = RunFinder::default();
            let mut runs: Vec<Vec<(i64, u8)>> = Vec::new();
            for &(ts, tag) in &input {
                if f.push(ts) {
                    runs.push(Vec::new());
                }
                runs.last_mut().unwrap().push((ts, tag));
            }
            assert_eq!(f.runs() as usize, runs.len());
            let mut m = Merge::new(runs.iter().map(|r| src(r)).collect());
            let mut want = input.clone();
            want.sort_by_key(|p| p.0);
            assert_eq!(drain(&mut m), want, "round {round}");
        }
    }

    #[test]
    fn a_source_going_back_in_time_is_an_error_after_what_came_before() {
        let mut m = Merge::new(vec![src(&[(1, 1), (3, 2), (2, 3)]), src(&[(10, 4)])]);
        let mut buf = Vec::new();
        assert_eq!(m.next_into(&mut buf).unwrap().unwrap().ts_ns, 1);
        assert_eq!(m.next_into(&mut buf).unwrap().unwrap().ts_ns, 3);
        let e = m.next_into(&mut buf).unwrap_err();
        assert_eq!(e.source, 0);
        assert!(
            e.error.to_string().contains("went back in time"),
            "{}",
            e.error
        );
        assert_eq!(m.next_into(&mut buf).unwrap(), None);
    }

    #[test]
    fn sort_buffer_is_stable_and_bounded() {
        let limit = 64 << 10;
        let mut b = SortBuffer::new(limit);
        let mut x = 3u64;
        let mut pushed = Vec::new();
        let mut chunks = Vec::new();
        for i in 0..5_000u32 {
            let ts = (lcg(&mut x) % 100) as i64;
            let len = 1 + (lcg(&mut x) % 300) as usize;
            let mut p = vec![0u8; len];
            p[..4.min(len)].copy_from_slice(&i.to_le_bytes()[..4.min(len)]);
            let m = DatagramMeta {
                ts_ns: ts,
                src: a(1),
                dst: a(2),
                len,
            };
            if !b.fits(len) {
                let mut c = Vec::new();
                b.drain_sorted::<()>(|m, p| {
                    c.push((m.ts_ns, p.to_vec()));
                    Ok(())
                })
                .unwrap();
                chunks.push(c);
            }
            b.push(m, &p);
            pushed.push((ts, p));
            assert!(b.bytes() <= limit, "{} > {limit}", b.bytes());
        }
        let mut c = Vec::new();
        b.drain_sorted::<()>(|m, p| {
            c.push((m.ts_ns, p.to_vec()));
            Ok(())
        })
        .unwrap();
        chunks.push(c);
        assert!(chunks.len() > 5, "{}", chunks.len());
        assert!(b.peak_bytes() > limit / 2);
        // each chunk is a stable sort of the datagrams pushed into it
        let mut at = 0;
        for c in &chunks {
            let mut want = pushed[at..at + c.len()].to_vec();
            want.sort_by_key(|p| p.0);
            assert_eq!(c, &want);
            at += c.len();
        }
        assert_eq!(at, pushed.len());
    }

    #[test]
    fn plan_reads_runs_directly_while_they_fit() {
        let mib = 1 << 20;
        let kib = 1 << 10;
        // one run: read as it is, whatever its reader holds
        assert_eq!(plan(1, 100 * mib, 0, 0, mib), Plan::Direct);
        assert_eq!(
            plan(4, 4 * 200 * kib, 200 * kib, 40 * kib, mib),
            Plan::Direct
        );
        match plan(6, 6 * 200 * kib, 200 * kib, 40 * kib, mib) {
            Plan::Spill {
                chunk_bytes,
                fan_in,
            } => {
                assert_eq!(chunk_bytes, mib - 200 * kib);
                assert_eq!(fan_in, (mib - 64 * kib) / (40 * kib));
            }
            p => panic!("{p:?}"),
        }
        // a budget under the least is raised to it
        assert_eq!(plan(4, 4 * 200 * kib, 200 * kib, 40 * kib, 1), Plan::Direct);
        assert!(matches!(plan(2, usize::MAX, 0, 1, mib), Plan::Spill { .. }));
    }
}
