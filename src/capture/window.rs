//! The reorder window (sans-I/O): datagrams of a capture go in in file
//! order and come out in timestamp order (file order among equal stamps),
//! holding at most a bounded amount.
//!
//! A datagram is held until the watermark passes it: the watermark is the
//! highest stamp pushed so far minus the window (`window_ns` of capture
//! time), so a datagram that arrives up to `window_ns` behind the newest one
//! still goes to its place. The bytes held are bounded too (`max_bytes`):
//! beyond it the earliest datagram is released whatever its stamp, so the
//! memory used never depends on the capture's size or rate.
//!
//! A datagram that arrives after one stamped later than it was already
//! released (or, see [`ReorderWindow::close_through`], after a check at or
//! after its stamp was answered) cannot go to its place any more: it is
//! *beyond the window*. It is counted (`out_of_order_beyond_window`) and
//! released next, stamped with the watermark it missed (the stamp of the
//! last datagram released, or of the closed check), so time never goes back
//! for whoever consumes the stream.
//!
//! In-order datagrams (the common case: a capture sorted by time) go to a
//! FIFO; only those that arrive earlier than one before them go to a heap;
//! both are merged on the way out. Payload buffers are recycled, so a
//! stream allocates only until the window is at its largest.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddrV4;

/// Default capture time a datagram may arrive behind the newest one.
pub const DEFAULT_WINDOW_NS: i64 = 1_000_000_000;
/// Default bound of what the window holds (payload capacity + bookkeeping).
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// Size classes of payload buffers: 64 B, 128 B, ... 64 KiB.
const CLASSES: usize = 11;

fn class_of(len: usize) -> usize {
    ((len.max(64).next_power_of_two().trailing_zeros() - 6) as usize).min(CLASSES - 1)
}

/// Bookkeeping counted per held datagram on top of its payload's capacity.
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Entry>();

/// What the window has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowStats {
    /// Datagrams pushed.
    pub pushed: u64,
    /// Datagrams that arrived stamped earlier than one pushed before them
    /// (put back in their place, or beyond the window).
    pub out_of_order: u64,
    /// Datagrams that arrived too late to go to their place: released at
    /// the watermark instead (see the module documentation).
    pub out_of_order_beyond_window: u64,
    /// Datagrams released early because the window held `max_bytes`.
    pub forced_by_size: u64,
    /// Most bytes held at once (payload capacity + bookkeeping).
    pub peak_bytes: usize,
    /// Most datagrams held at once.
    pub peak_len: usize,
}

#[derive(Debug)]
struct Entry {
    ts: i64,
    seq: u64,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: Vec<u8>,
}

impl Entry {
    fn key(&self) -> (i64, u64) {
        (self.ts, self.seq)
    }
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        self.key().cmp(&o.key())
    }
}

/// One datagram out of the window, borrowing its buffer until the next pop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released<'a> {
    /// The stamp to apply it at: its own, or the watermark it missed.
    pub ts: i64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: &'a [u8],
}

/// See the module documentation.
#[derive(Debug)]
pub struct ReorderWindow {
    window_ns: i64,
    max_bytes: usize,
    /// Datagrams pushed in order (stamps non-decreasing).
    fifo: VecDeque<Entry>,
    /// Datagrams pushed out of order.
    heap: BinaryHeap<Reverse<Entry>>,
    /// Buffers of released datagrams, for the next pushes, by size class
    /// (capacity a power of two from 64 bytes): a buffer never has to
    /// grow, so a stream allocates nothing once each class has been at its
    /// largest.
    pool: [Vec<Vec<u8>>; CLASSES],
    /// The buffer handed out by the last pop, recycled at the next call.
    out: Option<Vec<u8>>,
    seq: u64,
    /// Highest stamp pushed.
    newest: Option<i64>,
    /// Stamp of the last datagram released.
    released: Option<i64>,
    first_released: Option<i64>,
    /// Every datagram stamped at or before this is taken as released.
    closed: Option<i64>,
    bytes: usize,
    stats: WindowStats,
}

impl Default for ReorderWindow {
    fn default() -> Self {
        ReorderWindow::new(DEFAULT_WINDOW_NS, DEFAULT_MAX_BYTES)
    }
}

impl ReorderWindow {
    /// A window of `window_ns` of capture time (0: released as soon as a
    /// later stamp arrives), holding at most `max_bytes` (at least one
    /// datagram is always held).
    pub fn new(window_ns: i64, max_bytes: usize) -> ReorderWindow {
        ReorderWindow {
            window_ns: window_ns.max(0),
            max_bytes,
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            pool: Default::default(),
            out: None,
            seq: 0,
            newest: None,
            released: None,
            first_released: None,
            closed: None,
            bytes: 0,
            stats: WindowStats::default(),
        }
    }

    pub fn window_ns(&self) -> i64 {
        self.window_ns
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    pub fn stats(&self) -> &WindowStats {
        &self.stats
    }

    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held now (payload capacity + bookkeeping).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Highest stamp pushed so far.
    pub fn newest(&self) -> Option<i64> {
        self.newest
    }

    /// Stamp of the first datagram released.
    pub fn first_released(&self) -> Option<i64> {
        self.first_released
    }

    /// Stamp of the last datagram released (the highest: they never go back).
    pub fn last_released(&self) -> Option<i64> {
        self.released
    }

    /// Whether more than `max_bytes` is held.
    pub fn over_size(&self) -> bool {
        self.bytes > self.max_bytes && self.len() > 1
    }

    /// Whether [`Self::pop_ready`] would release a datagram.
    pub fn ready(&self) -> bool {
        match self.peek_ts() {
            None => false,
            Some(ts) => {
                let newest = self.newest.unwrap_or(ts);
                ts < newest.saturating_sub(self.window_ns) || self.over_size()
            }
        }
    }

    /// Stamp of the earliest datagram held.
    pub fn peek_ts(&self) -> Option<i64> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => Some(a.ts.min(b.ts)),
            (Some(a), None) => Some(a.ts),
            (None, Some(Reverse(b))) => Some(b.ts),
            (None, None) => None,
        }
    }

    /// Takes one datagram (copied into a recycled buffer). Returns whether
    /// it arrived beyond the window.
    pub fn push(&mut self, ts: i64, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> bool {
        self.recycle_out();
        self.stats.pushed += 1;
        let floor = match (self.released, self.closed) {
            (Some(r), Some(c)) => Some(r.max(c)),
            (r, c) => r.or(c),
        };
        let mut ts = ts;
        let late = self.released.is_some_and(|r| ts < r) || self.closed.is_some_and(|c| ts <= c);
        if late {
            self.stats.out_of_order_beyond_window += 1;
            ts = floor.expect("late only after a release or a close");
        }
        let in_order = self.newest.is_none_or(|n| ts >= n);
        if !in_order || late {
            self.stats.out_of_order += 1;
        }
        let class = class_of(payload.len());
        let mut buf = self.pool[class]
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(payload.len().max(64).next_power_of_two()));
        buf.clear();
        buf.extend_from_slice(payload);
        self.bytes += buf.capacity() + ENTRY_OVERHEAD;
        let e = Entry {
            ts,
            seq: self.seq,
            src,
            dst,
            payload: buf,
        };
        self.seq += 1;
        // A late datagram is stamped at the floor, which every held one is
        // at or above: it goes to the heap and comes out first.
        if in_order && !late {
            self.newest = Some(ts);
            self.fifo.push_back(e);
        } else {
            self.heap.push(Reverse(e));
        }
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.bytes);
        self.stats.peak_len = self.stats.peak_len.max(self.len());
        late
    }

    /// The earliest datagram if the watermark has passed it (or the window
    /// is over its size bound).
    pub fn pop_ready(&mut self) -> Option<Released<'_>> {
        let ts = self.peek_ts()?;
        let newest = self.newest.unwrap_or(ts);
        if ts < newest.saturating_sub(self.window_ns) {
            return self.pop();
        }
        if self.over_size() {
            self.stats.forced_by_size += 1;
            return self.pop();
        }
        None
    }

    /// The earliest datagram if it is stamped at or before `t`, whatever
    /// the watermark (for a check at `t` once [`Self::needs_more_for`] says
    /// enough was read, and `i64::MAX` to drain at the end).
    pub fn pop_through(&mut self, t: i64) -> Option<Released<'_>> {
        if self.peek_ts()? <= t {
            self.pop()
        } else {
            None
        }
    }

    /// The earliest datagram if it is stamped before `watermark` (for a
    /// caller whose watermark is another clock, like `record`'s).
    pub fn pop_before(&mut self, watermark: i64) -> Option<Released<'_>> {
        if self.peek_ts()? < watermark {
            self.pop()
        } else {
            None
        }
    }

    /// Whether a datagram stamped at or before `t` may still arrive within
    /// the window: more must be read before everything up to `t` is known.
    pub fn needs_more_for(&self, t: i64) -> bool {
        self.newest
            .is_none_or(|n| n.saturating_sub(self.window_ns) <= t)
    }

    /// Declares everything stamped at or before `t` released (a check at
    /// `t` was answered): one arriving later is beyond the window.
    pub fn close_through(&mut self, t: i64) {
        self.closed = Some(self.closed.map_or(t, |c| c.max(t)));
    }

    fn pop(&mut self) -> Option<Released<'_>> {
        self.recycle_out();
        let from_fifo = match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => a.key() < b.key(),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let e = if from_fifo {
            self.fifo.pop_front()
        } else {
            self.heap.pop().map(|Reverse(e)| e)
        }
        .expect("peeked");
        self.bytes -= e.payload.capacity() + ENTRY_OVERHEAD;
        self.released = Some(e.ts);
        self.first_released.get_or_insert(e.ts);
        let out = self.out.insert(e.payload);
        Some(Released {
            ts: e.ts,
            src: e.src,
            dst: e.dst,
            payload: out,
        })
    }

    fn recycle_out(&mut self) {
        if let Some(b) = self.out.take() {
            // the class whose payloads it holds without growing
            let class = match b.capacity() {
                c if c.is_power_of_two() => class_of(c),
                c => class_of(c / 2 + 1),
            };
            self.pool[class].push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new([239, 0, 0, 1].into(), port)
    }

    /// Pushes `(ts, tag)` in order, popping what is ready after each push,
    /// then drains; returns `(ts, tag)` as released.
    fn run(w: &mut ReorderWindow, input: &[(i64, u8)]) -> Vec<(i64, u8)> {
        let mut out = Vec::new();
        for &(ts, tag) in input {
            w.push(ts, a(1), a(2), &[tag]);
            while let Some(r) = w.pop_ready() {
                out.push((r.ts, r.payload[0]));
            }
        }
        while let Some(r) = w.pop_through(i64::MAX) {
            out.push((r.ts, r.payload[0]));
        }
        out
    }

    #[test]
    fn sorted_input_comes_out_as_it_went_in() {
        let mut w = ReorderWindow::new(10, 1 << 20);
        let input: Vec<(i64, u8)> = (0..100).map(|i| (i / 3, i as u8)).collect();
        assert_eq!(run(&mut w, &input), input);
        assert_eq!(w.stats().out_of_order, 0);
        assert_eq!(w.stats().out_of_order_beyond_window, 0);
        // at most the window (10 ns of stamps, 3 per ns) plus one is held
        assert!(w.stats().peak_len <= 34, "{:?}", w.stats());
    }

    #[test]
    fn reorders_within_the_window_keeping_file_order_among_equal_stamps() {
        let mut w = ReorderWindow::new(100, 1 << 20);
        let input = [
            (50, 1),
            (10, 2),
            (50, 3),
            (10, 4),
            (30, 5),
            (150, 6),
            (60, 7),
        ];
        let got = run(&mut w, &input);
        assert_eq!(
            got,
            [
                (10, 2),
                (10, 4),
                (30, 5),
                (50, 1),
                (50, 3),
                (60, 7),
                (150, 6)
            ]
        );
        assert_eq!(w.stats().out_of_order, 4);
        assert_eq!(w.stats().out_of_order_beyond_window, 0);
    }

    #[test]
    fn exactly_the_window_behind_is_in_time() {
        let mut w = ReorderWindow::new(100, 1 << 20);
        let got = run(&mut w, &[(200, 1), (100, 2)]);
        assert_eq!(got, [(100, 2), (200, 1)]);
        assert_eq!(w.stats().out_of_order_beyond_window, 0);
    }

    #[test]
    fn beyond_the_window_is_counted_and_applied_at_the_watermark() {
        let mut w = ReorderWindow::new(100, 1 << 20);
        // 0 and 5 leave once 150 arrives (watermark 50). 20 arrives 130
        // behind 150, but nothing later than it has left: it still goes to
        // its place (and leaves at once, being under the watermark). 3
        // arrives after 20 left: beyond the window, applied at 20.
        let got = run(
            &mut w,
            &[(0, 1), (5, 2), (150, 3), (20, 4), (3, 5), (160, 6)],
        );
        assert_eq!(got, [(0, 1), (5, 2), (20, 4), (20, 5), (150, 3), (160, 6)]);
        assert_eq!(w.stats().out_of_order_beyond_window, 1);
        assert_eq!(w.stats().out_of_order, 2);
    }

    #[test]
    fn released_stamps_never_go_back() {
        // whatever the input, the output is non-decreasing and complete
        let mut w = ReorderWindow::new(7, 200);
        let mut x: u64 = 12345;
        let input: Vec<(i64, u8)> = (0..2000)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (i as i64 + (x >> 60) as i64 * 3 - 20, (i % 251) as u8)
            })
            .collect();
        let got = run(&mut w, &input);
        assert_eq!(got.len(), input.len());
        assert!(got.windows(2).all(|p| p[0].0 <= p[1].0));
        let late = w.stats().out_of_order_beyond_window;
        assert!(late > 0, "the size bound of 200 bytes forces some");
        let mut tags_in: Vec<u8> = input.iter().map(|p| p.1).collect();
        let mut tags_out: Vec<u8> = got.iter().map(|p| p.1).collect();
        tags_in.sort_unstable();
        tags_out.sort_unstable();
        assert_eq!(tags_in, tags_out);
    }

    #[test]
    fn size_bound_holds_whatever_the_stream_length() {
        // 1 s window, but at most 64 KiB held: a stream of 1 M datagrams of
        // 100 bytes, a 1 ns apart (all within one window), never holds more.
        let max = 64 << 10;
        let mut w = ReorderWindow::new(1_000_000_000, max);
        let payload = [7u8; 100];
        let mut n = 0u64;
        for i in 0..1_000_000i64 {
            w.push(i, a(1), a(2), &payload);
            while let Some(r) = w.pop_ready() {
                assert_eq!(r.payload.len(), 100);
                n += 1;
            }
            assert!(w.bytes() <= max + 100 + ENTRY_OVERHEAD);
        }
        while w.pop_through(i64::MAX).is_some() {
            n += 1;
        }
        assert_eq!(n, 1_000_000);
        let st = w.stats();
        assert!(st.peak_bytes <= max + 100 + ENTRY_OVERHEAD, "{st:?}");
        assert!(st.peak_bytes > max / 2, "{st:?}");
        assert_eq!(st.out_of_order_beyond_window, 0);
        assert!(st.forced_by_size > 900_000);
        assert_eq!(w.bytes(), 0);
    }

    #[test]
    fn a_check_waits_for_the_window_then_closes_its_time() {
        let mut w = ReorderWindow::new(100, 1 << 20);
        w.push(10, a(1), a(2), &[1]);
        w.push(60, a(1), a(2), &[2]);
        // a check at 50: 150 not reached, a packet at <= 50 may still come
        assert!(w.needs_more_for(50));
        w.push(40, a(1), a(2), &[3]);
        w.push(151, a(1), a(2), &[4]);
        assert!(!w.needs_more_for(50));
        let mut got = Vec::new();
        while let Some(r) = w.pop_through(50) {
            got.push(r.payload[0]);
        }
        assert_eq!(got, [1, 3]);
        w.close_through(50);
        // stamped at the check's time, after it was answered: beyond
        assert!(w.push(50, a(1), a(2), &[5]));
        assert!(!w.push(51, a(1), a(2), &[6]));
        let r = w.pop_through(i64::MAX).unwrap();
        assert_eq!((r.ts, r.payload[0]), (50, 5));
        assert_eq!(w.stats().out_of_order_beyond_window, 1);
    }

    #[test]
    fn buffers_are_recycled() {
        let mut w = ReorderWindow::new(0, 1 << 20);
        for i in 0..1000 {
            w.push(i, a(1), a(2), &[0; 64]);
            while w.pop_ready().is_some() {}
        }
        // window 0: each is released when the next (later) one arrives
        assert!(w.stats().peak_len <= 2);
        let pooled: usize = w.pool.iter().map(Vec::len).sum();
        assert!(pooled + w.len() + w.out.is_some() as usize <= 3);
    }

    #[test]
    fn size_classes() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(64), 0);
        assert_eq!(class_of(65), 1);
        assert_eq!(class_of(1500), 5); // 2 KiB
        assert_eq!(class_of(65_507), 10);
        assert_eq!(class_of(1 << 20), 10);
    }
}
