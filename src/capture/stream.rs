//! A capture streamed in time order with bounded memory: a
//! [`CaptureReader`] (plain, gzip or zstd, pcap or pcapng) or a Nasdaq
//! BinaryFILE ([`BinaryFileReader`], told by its content) through a
//! destination filter and a [`ReorderWindow`]. What `replay` and
//! `replay --send` read; nothing is loaded whole.

use std::io::BufRead;
use std::net::SocketAddrV4;
use std::path::Path;

use jiff::civil::Date;

use super::binaryfile::{self, BinaryFileReader, BinaryFileStats};
use super::compress::{CaptureInput, Compression};
use super::pcap::{CaptureError, CaptureReader, CaptureStats, DatagramRef};
use super::source::DatagramSource;
use super::window::{Released, ReorderWindow, WindowStats, DEFAULT_MAX_BYTES, DEFAULT_WINDOW_NS};

/// How a capture is streamed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// Keep only datagrams sent to these destinations (all when empty).
    pub filter: Vec<SocketAddrV4>,
    /// Capture time a datagram may arrive behind the newest one and still
    /// be put in its place.
    pub window_ns: i64,
    /// Most bytes the reorder window holds.
    pub max_bytes: usize,
    /// The day of a Nasdaq BinaryFILE (its messages carry only the time
    /// since midnight); default: from its `MMDDYYYY.` file name.
    pub date: Option<Date>,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            filter: Vec::new(),
            window_ns: DEFAULT_WINDOW_NS,
            max_bytes: DEFAULT_MAX_BYTES,
            date: None,
        }
    }
}

/// What a stream read and how it ordered it, for the summaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSummary {
    pub stats: CaptureStats,
    pub compression: Compression,
    /// Datagrams removed by the destination filter.
    pub filtered_out: u64,
    /// Datagrams handed out (in time order).
    pub released: u64,
    pub window: WindowStats,
    pub window_ns: i64,
    pub max_bytes: usize,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// `pcap`, `pcapng` or `binaryfile`.
    pub format: &'static str,
    /// A Nasdaq BinaryFILE: what its reader saw.
    pub binaryfile: Option<BinaryFileSummary>,
}

/// What was read of a Nasdaq BinaryFILE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryFileSummary {
    pub date: Date,
    pub session: crate::wire::SessionId,
    pub stats: BinaryFileStats,
}

impl StreamSummary {
    /// Whether every datagram came in time order (nothing was reordered).
    pub fn was_sorted(&self) -> bool {
        self.window.out_of_order == 0
    }
}

/// Where a stream's datagrams come from.
enum Input<R> {
    Pcap(CaptureReader<R>),
    /// With the buffer its datagrams are built in.
    BinaryFile(BinaryFileReader<R>, Vec<u8>),
}

/// See the module documentation.
pub struct CaptureStream<R = CaptureInput> {
    input: Input<R>,
    window: ReorderWindow,
    filter: Vec<SocketAddrV4>,
    compression: Compression,
    filtered_out: u64,
    released: u64,
    eof: bool,
    error: Option<CaptureError>,
}

impl CaptureStream<CaptureInput> {
    /// Opens `path`, a pcap, pcapng or Nasdaq BinaryFILE (told by its
    /// decompressed content); the error names it once.
    pub fn open(path: &Path, opts: StreamOptions) -> anyhow::Result<Self> {
        let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}: {e}", path.display());
        let mut input = CaptureInput::open(path).map_err(|e| fail(&CaptureError::Io(e)))?;
        let c = input.compression();
        let head = input.fill_buf().map_err(|e| fail(&CaptureError::Io(e)))?;
        let mut s = if binaryfile::looks_like(head) {
            let Some(date) = opts.date.or_else(|| binaryfile::date_from_name(path)) else {
                anyhow::bail!(
                    "{}: a Nasdaq BinaryFILE, whose messages carry only the time since midnight: name it MMDDYYYY.NASDAQ_ITCH50[.gz] as Nasdaq does, or give its day with --date YYYY-MM-DD",
                    path.display()
                );
            };
            CaptureStream::from_binaryfile(BinaryFileReader::new(input, date), opts)
        } else {
            CaptureStream::new(CaptureReader::new(input).map_err(|e| fail(&e))?, opts)
        };
        s.compression = c;
        Ok(s)
    }
}

impl<R: BufRead> CaptureStream<R> {
    pub fn new(reader: CaptureReader<R>, opts: StreamOptions) -> Self {
        Self::with_input(Input::Pcap(reader), opts)
    }

    /// A Nasdaq BinaryFILE's datagrams (`binaryfile`). One sequenced
    /// stream, whose order is its sequence: the reader never hands out a
    /// stamp earlier than the one before (one that goes back is applied at
    /// the previous stamp and counted), so nothing is reordered and the
    /// window holds one datagram whatever `opts.window_ns` says.
    pub fn from_binaryfile(reader: BinaryFileReader<R>, opts: StreamOptions) -> Self {
        let buf = Vec::with_capacity(binaryfile::MAX_DATAGRAM);
        let opts = StreamOptions {
            window_ns: 0,
            ..opts
        };
        Self::with_input(Input::BinaryFile(reader, buf), opts)
    }

    fn with_input(input: Input<R>, opts: StreamOptions) -> Self {
        CaptureStream {
            input,
            window: ReorderWindow::new(opts.window_ns, opts.max_bytes),
            filter: opts.filter,
            compression: Compression::None,
            filtered_out: 0,
            released: 0,
            eof: false,
            error: None,
        }
    }

    /// The next datagram in time order; `None` at the end of the capture
    /// (or at an error: see [`Self::error`]).
    pub fn next_datagram(&mut self) -> Option<Released<'_>> {
        loop {
            if self.window.ready() {
                break;
            }
            if self.eof {
                break;
            }
            self.read_one();
        }
        let r = if self.eof && !self.window.ready() {
            self.window.pop_through(i64::MAX)
        } else {
            self.window.pop_ready()
        };
        if r.is_some() {
            self.released += 1;
        }
        r
    }

    /// The next datagram stamped at or before `t`, once nothing stamped at
    /// or before `t` can still arrive within the window (or the window is
    /// full); `None` when there is none. Then call [`Self::close_through`].
    pub fn next_through(&mut self, t: i64) -> Option<Released<'_>> {
        loop {
            let due = self.window.peek_ts().is_some_and(|ts| ts <= t);
            if due && (self.window.ready() || self.eof) {
                break;
            }
            if self.eof || !self.window.needs_more_for(t) || self.window.over_size() {
                return None;
            }
            self.read_one();
        }
        self.released += 1;
        self.window.pop_through(t)
    }

    /// Everything up to `t` was applied (a check at `t` was answered).
    pub fn close_through(&mut self, t: i64) {
        self.window.close_through(t);
    }

    /// The error that ended the stream early, if any (what came before it
    /// was handed out).
    pub fn error(&self) -> Option<&CaptureError> {
        self.error.as_ref()
    }

    pub fn take_error(&mut self) -> Option<CaptureError> {
        self.error.take()
    }

    /// Datagrams handed out so far.
    pub fn released(&self) -> u64 {
        self.released
    }

    pub fn window(&self) -> &ReorderWindow {
        &self.window
    }

    pub fn summary(&self) -> StreamSummary {
        let (stats, binaryfile) = match &self.input {
            Input::Pcap(r) => (*r.stats(), None),
            Input::BinaryFile(r, _) => {
                let b = r.stats();
                let stats = CaptureStats {
                    frames: b.datagrams,
                    datagrams: b.datagrams,
                    ..CaptureStats::default()
                };
                let summary = BinaryFileSummary {
                    date: r.date(),
                    session: r.session(),
                    stats: *b,
                };
                (stats, Some(summary))
            }
        };
        let format = match &self.input {
            Input::Pcap(r) => match r.format() {
                super::pcap::CaptureFormat::Pcap { .. } => "pcap",
                super::pcap::CaptureFormat::PcapNg => "pcapng",
            },
            Input::BinaryFile(..) => "binaryfile",
        };
        StreamSummary {
            stats,
            format,
            binaryfile,
            compression: self.compression,
            filtered_out: self.filtered_out,
            released: self.released,
            window: *self.window.stats(),
            window_ns: self.window.window_ns(),
            max_bytes: self.window.max_bytes(),
            first_ts: self.window.first_released(),
            last_ts: self.window.last_released(),
        }
    }

    fn read_one(&mut self) {
        let got = match &mut self.input {
            Input::Pcap(r) => r.next_ref(),
            Input::BinaryFile(r, buf) => r.next(buf).transpose().map(|m| {
                m.map(|m| DatagramRef {
                    ts_ns: m.ts_ns,
                    src: m.src,
                    dst: m.dst,
                    payload: &buf[..],
                })
            }),
        };
        match got {
            Some(Ok(d)) => {
                if !self.filter.is_empty() && !self.filter.contains(&d.dst) {
                    self.filtered_out += 1;
                } else {
                    self.window.push(d.ts_ns, d.src, d.dst, d.payload);
                }
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "capture stream ends early");
                self.error = Some(e);
                self.eof = true;
            }
            None => self.eof = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::pcap::PcapWriter;
    use std::io::Cursor;

    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    /// A pcap of `(ts, tag)` datagrams to 239.0.0.1:1, in this order, with
    /// a payload of `size` bytes starting with the tag.
    fn pcap(items: &[(i64, u8)], size: usize) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        for &(ts, tag) in items {
            let mut p = vec![0u8; size];
            p[0] = tag;
            w.write_udp(ts, addr("10.0.0.1:5"), addr("239.0.0.1:1"), &p)
                .unwrap();
        }
        w.into_inner().unwrap()
    }

    fn stream(bytes: Vec<u8>, window_ns: i64, max_bytes: usize) -> CaptureStream<Cursor<Vec<u8>>> {
        let r = CaptureReader::new(Cursor::new(bytes)).unwrap();
        CaptureStream::new(
            r,
            StreamOptions {
                filter: Vec::new(),
                window_ns,
                max_bytes,
                date: None,
            },
        )
    }

    #[test]
    fn streams_in_time_order() {
        let bytes = pcap(&[(100, 1), (0, 2), (100, 3), (50, 4), (300, 5)], 4);
        let mut s = stream(bytes, 200, 1 << 20);
        let mut got = Vec::new();
        while let Some(d) = s.next_datagram() {
            got.push((d.ts, d.payload[0]));
        }
        assert_eq!(got, [(0, 2), (50, 4), (100, 1), (100, 3), (300, 5)]);
        let sum = s.summary();
        assert!(!sum.was_sorted());
        assert_eq!((sum.first_ts, sum.last_ts), (Some(0), Some(300)));
        assert_eq!(sum.released, 5);
        assert!(s.error().is_none());
    }

    #[test]
    fn a_capture_much_larger_than_the_window_is_held_in_bounded_memory() {
        // 100,000 datagrams of 1,000 bytes (100 MB of payload) a
        // microsecond apart, every 10th 300 us late: a 1 ms window holds
        // ~1,000 datagrams, whatever the length of the capture.
        let n = 100_000i64;
        let mut items = Vec::with_capacity(n as usize);
        for i in 0..n {
            let ts = i * 1_000 - if i % 10 == 9 { 300_000 } else { 0 };
            items.push((ts.max(0), (i % 256) as u8));
        }
        let bytes = pcap(&items, 1_000);
        let mut s = stream(bytes, 1_000_000, 64 << 20);
        let mut count = 0u64;
        let mut last = i64::MIN;
        while let Some(d) = s.next_datagram() {
            assert!(d.ts >= last);
            last = d.ts;
            count += 1;
        }
        assert_eq!(count, n as u64);
        let w = s.summary().window;
        assert_eq!(w.out_of_order_beyond_window, 0);
        assert_eq!(w.out_of_order, (n / 10) as u64);
        // ~1,001 datagrams of ~1 KB are in 1 ms; the capture is 100 times that
        assert!(w.peak_len <= 1_100, "{w:?}");
        assert!(w.peak_bytes <= 1_100 * 1_200, "{w:?}");
        assert_eq!(w.forced_by_size, 0);
    }

    #[test]
    fn the_size_bound_caps_memory_and_counts_what_it_costs() {
        // the same shape, but only 100 KB may be held: ~100 datagrams, so
        // the 300 us late ones (300 datagrams behind) miss their place
        let n = 20_000i64;
        let items: Vec<(i64, u8)> = (0..n)
            .map(|i| {
                (
                    (i * 1_000 - if i % 10 == 9 { 300_000 } else { 0 }).max(0),
                    0,
                )
            })
            .collect();
        let mut s = stream(pcap(&items, 1_000), 1_000_000, 100_000);
        let mut count = 0u64;
        while s.next_datagram().is_some() {
            count += 1;
        }
        assert_eq!(count, n as u64);
        let w = s.summary().window;
        assert!(w.peak_bytes <= 100_000 + 1_200, "{w:?}");
        assert!(w.forced_by_size > 0);
        assert!(
            w.out_of_order_beyond_window >= (n / 10) as u64 - 40,
            "{w:?}"
        );
    }

    #[test]
    fn checks_see_everything_up_to_their_time_even_when_it_comes_later() {
        let bytes = pcap(&[(100, 1), (0, 2), (150, 3), (120, 4), (400, 5)], 4);
        let mut s = stream(bytes, 100, 1 << 20);
        let at = |s: &mut CaptureStream<_>, t: i64| {
            let mut v = Vec::new();
            while let Some(d) = s.next_through(t) {
                v.push(d.payload[0]);
            }
            s.close_through(t);
            v
        };
        assert_eq!(at(&mut s, 50), [2]);
        assert_eq!(at(&mut s, 120), [1, 4]);
        assert_eq!(at(&mut s, 1000), [3, 5]);
        assert_eq!(s.summary().window.out_of_order_beyond_window, 0);
    }

    #[test]
    fn filter_drops_before_the_window() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_udp(1, addr("10.0.0.1:5"), addr("239.0.0.1:1"), b"a")
            .unwrap();
        w.write_udp(2, addr("10.0.0.1:5"), addr("239.0.0.2:1"), b"b")
            .unwrap();
        let r = CaptureReader::new(Cursor::new(w.into_inner().unwrap())).unwrap();
        let mut s = CaptureStream::new(
            r,
            StreamOptions {
                filter: vec![addr("239.0.0.2:1")],
                ..StreamOptions::default()
            },
        );
        assert_eq!(s.next_datagram().unwrap().payload, b"b");
        assert!(s.next_datagram().is_none());
        assert_eq!(s.summary().filtered_out, 1);
    }
}
