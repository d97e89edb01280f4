//! Captures streamed in exact time order with bounded memory (I/O shell
//! over `merge`): what `replay` and `replay --send` read. One or more
//! capture files (plain, gzip or zstd, pcap or pcapng, or a Nasdaq
//! BinaryFILE, told by its content), through a
//! destination filter, come out as one stream in timestamp order, capture
//! order among equal stamps (the files in the order given, then each
//! file's own order). Nothing is loaded whole.
//!
//! 1. A first pass reads each file once and finds its maximal sorted runs
//!    (where each starts, how many datagrams it holds). A sorted file is
//!    one run; one `cat`-merged from two lines is two.
//! 2. If every run's reader fits the memory budget at once, each run is
//!    read by its own reader (re-opening the file where the run starts) and
//!    the readers are merged. A single sorted file is one reader: the
//!    ordinary stream.
//! 3. Otherwise (many runs: a capture interleaved thousands of times) the
//!    datagrams are sorted in chunks that fit the budget, spilled to a
//!    temporary directory, and the chunks merged, a bounded number at a
//!    time (more than one pass if they are many). A capture whose datagrams
//!    fit one chunk is sorted in memory without spilling.
//!
//! [`CaptureStream::open_assuming_sorted`] skips the first pass: one
//! reader per file, merged as they are read. Most captures are sorted, so
//! this is one streaming pass; a file that turns out not to be stops the
//! stream ([`CaptureStream::went_back`]) and the caller starts again with
//! [`CaptureStream::open`] (`replay` does, and discards what it had
//! answered).
//!
//! A Nasdaq BinaryFILE is one sequenced stream whose reader never hands
//! out a stamp earlier than the one before (`binaryfile`): it is one run by
//! construction, merged as it is read, with no first pass.
//!
//! A file that cannot be read to its end (corrupt or cut in the middle of a
//! compressed stream) takes part with what came before the fault; the error
//! ends the stream once nothing later than what was read from that file is
//! left (see [`CaptureStream::next_through`]).

use std::cell::Cell;
use std::io::{BufRead, Read};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use jiff::civil::Date;

use super::binaryfile::{self, BinaryFileReader, BinaryFileStats};
use super::compress::{CaptureInput, Compression};
use super::frame::MAX_DATAGRAM;
use super::merge::{plan, Merge, Plan, RunFinder, SortBuffer, READ_BUF, WRITE_BUF};
use super::pcap::{CaptureError, CaptureReader, CaptureStats, ResumePoint};
use super::source::{DatagramMeta, DatagramRun, DatagramSource, Released};
use super::spill::{ChunkReader, SpillDir, SpillStats};

/// Default memory budget of the sort (readers, chunks, buffers).
pub const DEFAULT_MEMORY_BYTES: usize = 64 << 20;

/// Least room for a chunk being sorted when the budget is raised to fit a
/// file's reader.
const MIN_CHUNK: usize = 512 << 10;

/// How captures are streamed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// Keep only datagrams sent to these destinations (all when empty).
    pub filter: Vec<SocketAddrV4>,
    /// Most memory the ordering holds (at least 1 MiB, and at least one
    /// file reader, decoder included, plus 512 KiB).
    pub memory_bytes: usize,
    /// Where spill files go (the system's temporary directory if `None`).
    pub spill_dir: Option<PathBuf>,
    /// The day of a Nasdaq BinaryFILE (its messages carry only the time
    /// since midnight); default: from its `MMDDYYYY.` file name.
    pub date: Option<Date>,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            filter: Vec::new(),
            memory_bytes: DEFAULT_MEMORY_BYTES,
            spill_dir: None,
            date: None,
        }
    }
}

/// One file of a stream, as its first pass read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSummary {
    pub path: PathBuf,
    pub compression: Compression,
    pub stats: CaptureStats,
    /// Datagrams removed by the destination filter.
    pub filtered_out: u64,
    /// Datagrams kept.
    pub datagrams: u64,
    /// Maximal sorted runs of the datagrams kept (1: in time order).
    pub runs: u64,
    /// Datagrams stamped earlier than one before them in the file.
    pub out_of_order: u64,
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

/// How the stream was put in time order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderSummary {
    /// Sorted runs over all files.
    pub runs: u64,
    /// Sources merged at the end (run readers, or chunks).
    pub sources: usize,
    /// Whether the runs were sorted in chunks (spilled unless one chunk).
    pub chunked: bool,
    pub spill: SpillStats,
    /// The budget (as asked, or raised to fit a file's reader).
    pub memory_bytes: usize,
    /// Most bytes held at once by the ordering's own accounting: readers'
    /// buffers and decoders, chunk being sorted, payload buffers.
    pub peak_bytes: usize,
}

/// What a stream read and how it ordered it, for the summaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSummary {
    /// Over all files.
    pub stats: CaptureStats,
    /// The files' compression when they share it (else the first's).
    pub compression: Compression,
    pub files: Vec<FileSummary>,
    /// Datagrams removed by the destination filter.
    pub filtered_out: u64,
    /// Datagrams handed out (in time order).
    pub released: u64,
    /// Datagrams stamped earlier than one before them in their file.
    pub out_of_order: u64,
    pub order: OrderSummary,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// The first file's format (`pcap`, `pcapng` or `binaryfile`).
    pub format: &'static str,
    /// The first Nasdaq BinaryFILE's summary, if any.
    pub binaryfile: Option<BinaryFileSummary>,
}

impl StreamSummary {
    /// Whether every file was in time order (the merge moved nothing
    /// inside a file).
    pub fn was_sorted(&self) -> bool {
        self.out_of_order == 0
    }
}

/// A file that could not be read (to its end), named.
#[derive(Debug)]
pub struct StreamError {
    pub path: PathBuf,
    pub error: CaptureError,
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for StreamError {}

/// A capture reader through the destination filter, handing out at most
/// `limit` datagrams kept: a whole file, or one sorted run of it.
pub struct FilteredReader<R> {
    reader: CaptureReader<R>,
    filter: Vec<SocketAddrV4>,
    limit: u64,
    filtered_out: u64,
    input_memory: usize,
}

impl<R: Read> FilteredReader<R> {
    pub fn new(reader: CaptureReader<R>, filter: Vec<SocketAddrV4>, limit: u64) -> Self {
        FilteredReader {
            reader,
            filter,
            limit,
            filtered_out: 0,
            input_memory: 0,
        }
    }

    pub fn reader(&self) -> &CaptureReader<R> {
        &self.reader
    }
}

impl<R: Read> DatagramSource for FilteredReader<R> {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        while self.limit > 0 {
            let Some(d) = self.reader.next_ref() else {
                return Ok(None);
            };
            let d = d?;
            if !self.filter.is_empty() && !self.filter.contains(&d.dst) {
                self.filtered_out += 1;
                continue;
            }
            self.limit -= 1;
            buf.clear();
            buf.extend_from_slice(d.payload);
            return Ok(Some(DatagramMeta {
                ts_ns: d.ts_ns,
                src: d.src,
                dst: d.dst,
                len: d.payload.len(),
            }));
        }
        Ok(None)
    }

    fn memory(&self) -> usize {
        self.input_memory + self.reader.buffer_capacity()
    }
}

impl FilteredReader<CaptureInput> {
    fn with_input_memory(mut self) -> Self {
        self.input_memory = self.reader.get_ref().memory();
        self
    }
}

/// One sorted run of a file, found by the first pass.
struct Run {
    /// Where it starts (`None`: at the start of the file).
    from: Option<ResumePoint>,
    datagrams: u64,
}

/// What the first pass found in one file.
struct Scan {
    summary: FileSummary,
    /// The runs, unless there are more than any budget reads at once.
    runs: Option<Vec<Run>>,
    /// What one reader of the file holds (input buffers and decoder,
    /// record buffer, payload buffer).
    reader_bytes: usize,
    max_payload: usize,
    error: Option<CaptureError>,
    /// Stamp of the last datagram kept before the error.
    last_ts: Option<i64>,
}

/// The first pass over `path`, read by `reader` (opened at its start).
fn scan(
    path: &Path,
    mut reader: CaptureReader<CaptureInput>,
    filter: &[SocketAddrV4],
    max_runs: usize,
) -> anyhow::Result<Scan> {
    let compression = reader.get_ref().compression();
    let mut finder = RunFinder::default();
    let mut runs: Option<Vec<Run>> = Some(Vec::new());
    let mut kept = 0u64;
    let mut filtered_out = 0u64;
    let mut max_payload = 0usize;
    let mut last_ts = None;
    let mut error = None;
    loop {
        let (ts, len) = match reader.next_ref() {
            None => break,
            Some(Err(e)) => {
                error = Some(e);
                break;
            }
            Some(Ok(d)) => {
                if !filter.is_empty() && !filter.contains(&d.dst) {
                    filtered_out += 1;
                    continue;
                }
                (d.ts_ns, d.payload.len())
            }
        };
        if finder.push(ts) {
            if runs.as_ref().is_some_and(|r| r.len() >= max_runs) {
                runs = None;
            }
            if let Some(r) = &mut runs {
                r.push(Run {
                    from: (kept > 0).then(|| reader.resume_point()),
                    datagrams: 0,
                });
            }
        }
        if let Some(r) = runs.as_mut().and_then(|r| r.last_mut()) {
            r.datagrams += 1;
        }
        kept += 1;
        max_payload = max_payload.max(len);
        last_ts = Some(ts);
    }
    Ok(Scan {
        reader_bytes: reader.get_ref().memory() + reader.buffer_capacity() + max_payload,
        max_payload,
        summary: FileSummary {
            path: path.to_path_buf(),
            compression,
            stats: *reader.stats(),
            filtered_out,
            datagrams: kept,
            runs: finder.runs(),
            out_of_order: finder.out_of_order(),
            format: format_name(&reader),
            binaryfile: None,
        },
        runs,
        error,
        last_ts,
    })
}

fn open(path: &Path) -> anyhow::Result<CaptureReader<CaptureInput>> {
    CaptureReader::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// A file's reader resumed where a run starts.
fn open_run(
    path: &Path,
    from: &Option<ResumePoint>,
) -> anyhow::Result<CaptureReader<CaptureInput>> {
    match from {
        None => open(path),
        Some(at) => {
            let input = CaptureInput::open_at(path, at.offset).map_err(|e| {
                anyhow::anyhow!("{}: reading the capture again: {e}", path.display())
            })?;
            Ok(CaptureReader::resume(input, at.clone()))
        }
    }
}

/// What a file's reader has read so far, shared with the stream's summary
/// when there was no first pass to count it.
#[derive(Clone, Copy, Debug, Default)]
struct ReadSoFar {
    stats: CaptureStats,
    filtered_out: u64,
    datagrams: u64,
}

/// A whole file read as one sorted run (no first pass), counting as it
/// goes for the summary.
struct AssumedSorted {
    inner: FilteredReader<CaptureInput>,
    kept: u64,
    counts: Rc<Cell<ReadSoFar>>,
}

impl DatagramSource for AssumedSorted {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        let got = self.inner.next(buf);
        if let Ok(Some(_)) = got {
            self.kept += 1;
        }
        self.counts.set(ReadSoFar {
            stats: *self.inner.reader.stats(),
            filtered_out: self.inner.filtered_out,
            datagrams: self.kept,
        });
        got
    }

    fn memory(&self) -> usize {
        self.inner.memory()
    }
}

/// A Nasdaq BinaryFILE as a source: its reader, the destination filter,
/// and its counts shared with the stream's summary.
struct BinarySource {
    reader: BinaryFileReader<CaptureInput>,
    filter: Vec<SocketAddrV4>,
    stats: Rc<Cell<BinaryFileStats>>,
}

impl DatagramSource for BinarySource {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        loop {
            let got = self.reader.next(buf);
            self.stats.set(*self.reader.stats());
            match got? {
                Some(m) if !self.filter.is_empty() && !self.filter.contains(&m.dst) => continue,
                other => return Ok(other),
            }
        }
    }

    fn memory(&self) -> usize {
        self.reader.get_ref().memory() + MAX_DATAGRAM
    }

    fn next_run(&mut self, run: &mut DatagramRun) -> Option<Result<bool, CaptureError>> {
        Some(loop {
            let got = self.reader.next_run(run);
            self.stats.set(*self.reader.stats());
            match got {
                Ok(true) if !self.filter.is_empty() && !self.filter.contains(&run.dst) => continue,
                other => break other,
            }
        })
    }
}

/// A BinaryFILE of the stream, for its summary.
struct BinaryFile {
    /// Its place among the files.
    file: usize,
    date: Date,
    compression: Compression,
    stats: Rc<Cell<BinaryFileStats>>,
}

impl BinaryFile {
    /// A BinaryFILE's reader as a source of the merge (`file`: its place
    /// among the files), and its entry for the summary.
    fn source(
        file: usize,
        reader: BinaryFileReader<CaptureInput>,
        filter: &[SocketAddrV4],
    ) -> (Box<dyn DatagramSource>, BinaryFile) {
        let stats = Rc::new(Cell::new(BinaryFileStats::default()));
        let entry = BinaryFile {
            file,
            date: reader.date(),
            compression: reader.get_ref().compression(),
            stats: stats.clone(),
        };
        let source = BinarySource {
            reader,
            filter: filter.to_vec(),
            stats,
        };
        (Box::new(source), entry)
    }

    /// Its summary before anything is read (counts come in as it is).
    fn summary(&self, path: &Path) -> FileSummary {
        FileSummary::one_run(
            path,
            self.compression,
            "binaryfile",
            Some(BinaryFileSummary {
                date: self.date,
                session: binaryfile::session_for(self.date),
                stats: BinaryFileStats::default(),
            }),
        )
    }
}

impl FileSummary {
    /// A file read as one sorted run, nothing counted yet.
    fn one_run(
        path: &Path,
        compression: Compression,
        format: &'static str,
        binaryfile: Option<BinaryFileSummary>,
    ) -> FileSummary {
        FileSummary {
            path: path.to_path_buf(),
            compression,
            stats: CaptureStats::default(),
            filtered_out: 0,
            datagrams: 0,
            runs: 1,
            out_of_order: 0,
            format,
            binaryfile,
        }
    }
}

fn format_name<R: Read>(reader: &CaptureReader<R>) -> &'static str {
    match reader.format() {
        super::pcap::CaptureFormat::Pcap { .. } => "pcap",
        super::pcap::CaptureFormat::PcapNg => "pcapng",
    }
}

/// A file opened and told by its content.
enum Opened {
    BinaryFile(BinaryFileReader<CaptureInput>),
    Capture(CaptureReader<CaptureInput>),
}

/// `path` opened, once (a pipe can be read this way), and told by its
/// content: a Nasdaq BinaryFILE or a capture.
fn open_any(path: &Path, opts: &StreamOptions) -> anyhow::Result<Opened> {
    let fail = |e: CaptureError| anyhow::anyhow!("{}: {e}", path.display());
    let mut input = CaptureInput::open(path).map_err(|e| fail(CaptureError::Io(e)))?;
    if !binaryfile::looks_like(input.fill_buf().map_err(|e| fail(CaptureError::Io(e)))?) {
        return Ok(Opened::Capture(CaptureReader::new(input).map_err(fail)?));
    }
    let Some(date) = opts.date.or_else(|| binaryfile::date_from_name(path)) else {
        anyhow::bail!(
            "{}: a Nasdaq BinaryFILE, whose messages carry only the time since midnight: name it MMDDYYYY.NASDAQ_ITCH50[.gz] as Nasdaq does, or give its day with --date YYYY-MM-DD",
            path.display()
        );
    };
    Ok(Opened::BinaryFile(BinaryFileReader::new(input, date)))
}

/// A file that failed part way, kept until the stream reaches its fault.
struct Deferred {
    error: StreamError,
    last_ts: Option<i64>,
}

/// See the module documentation.
pub struct CaptureStream {
    merge: Merge<Box<dyn DatagramSource>>,
    /// What each merged source reads, for its errors.
    labels: Vec<PathBuf>,
    out: Vec<u8>,
    /// What [`Self::next_run`] hands out.
    run: DatagramRun,
    deferred: Vec<Deferred>,
    error: Option<StreamError>,
    files: Vec<FileSummary>,
    order: OrderSummary,
    binaryfiles: Vec<BinaryFile>,
    /// Files read without a first pass: their place and counts.
    assumed_sorted: Vec<(usize, Rc<Cell<ReadSoFar>>)>,
    /// A file assumed sorted went back in time (see the module docs).
    went_back: bool,
    released: u64,
    first_ts: Option<i64>,
    last_ts: Option<i64>,
    /// Kept until the stream is dropped: the chunks being merged.
    _spill: Option<SpillDir>,
}

impl CaptureStream {
    /// Opens `paths` as if each were sorted: one reader each, merged as
    /// read, no first pass (see the module documentation). `None` when one
    /// reader per file does not fit the memory budget (then [`Self::open`]).
    pub fn open_assuming_sorted(
        paths: &[PathBuf],
        opts: StreamOptions,
    ) -> anyhow::Result<Option<Self>> {
        anyhow::ensure!(!paths.is_empty(), "no capture to read");
        let budget = opts.memory_bytes.max(super::merge::MIN_BUDGET);
        let mut sources: Vec<Box<dyn DatagramSource>> = Vec::with_capacity(paths.len());
        let mut files = Vec::with_capacity(paths.len());
        let mut binaryfiles = Vec::new();
        let mut assumed_sorted = Vec::new();
        let mut memory = 0usize;
        for (i, path) in paths.iter().enumerate() {
            let reader = match open_any(path, &opts)? {
                Opened::Capture(r) => r,
                Opened::BinaryFile(reader) => {
                    memory += reader.get_ref().memory() + MAX_DATAGRAM;
                    let (source, entry) = BinaryFile::source(i, reader, &opts.filter);
                    files.push(entry.summary(path));
                    binaryfiles.push(entry);
                    sources.push(source);
                    continue;
                }
            };
            let compression = reader.get_ref().compression();
            let format = format_name(&reader);
            let inner =
                FilteredReader::new(reader, opts.filter.clone(), u64::MAX).with_input_memory();
            memory += inner.memory();
            let counts = Rc::new(Cell::new(ReadSoFar::default()));
            assumed_sorted.push((i, counts.clone()));
            files.push(FileSummary::one_run(path, compression, format, None));
            sources.push(Box::new(AssumedSorted {
                inner,
                kept: 0,
                counts,
            }));
        }
        if memory > budget {
            return Ok(None);
        }
        let order = OrderSummary {
            runs: paths.len() as u64,
            sources: sources.len(),
            memory_bytes: budget,
            ..OrderSummary::default()
        };
        Ok(Some(CaptureStream {
            merge: Merge::new(sources),
            labels: paths.to_vec(),
            out: Vec::new(),
            run: DatagramRun::default(),
            deferred: Vec::new(),
            error: None,
            files,
            order,
            binaryfiles,
            assumed_sorted,
            went_back: false,
            released: 0,
            first_ts: None,
            last_ts: None,
            _spill: None,
        }))
    }

    /// Opens `paths` (one or more), finds their runs and prepares the
    /// merge; errors name the file.
    pub fn open(paths: &[PathBuf], opts: StreamOptions) -> anyhow::Result<Self> {
        anyhow::ensure!(!paths.is_empty(), "no capture to read");
        for p in paths {
            // read twice (runs, then datagrams): a pipe would block or
            // give its second half
            let regular = std::fs::metadata(p).map(|m| m.is_file());
            if let Ok(false) = regular {
                anyhow::bail!(
                    "{}: not a regular file, and a capture that is not in time order is read twice (its runs, then its datagrams): write it to a file first",
                    p.display()
                );
            }
        }
        let asked = opts.memory_bytes.max(super::merge::MIN_BUDGET);
        // more runs than this cannot all be read at once, whatever the file
        let max_runs = asked / super::compress::BUF + 1;
        let mut scans = Vec::with_capacity(paths.len());
        // (place among the files, reader) of each BinaryFILE: one run each
        let mut binaries = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            match open_any(p, &opts)? {
                Opened::BinaryFile(r) => binaries.push((i, r)),
                Opened::Capture(r) => scans.push(scan(p, r, &opts.filter, max_runs)?),
            }
        }
        let binary_bytes: usize = binaries
            .iter()
            .map(|(_, r)| r.get_ref().memory() + MAX_DATAGRAM)
            .sum();
        // A file is read by at least one reader, whose decoder holds its
        // window (a zstd capture's can be MiBs): the budget is raised to
        // one reader and room for a chunk.
        let largest = scans.iter().map(|s| s.reader_bytes).max().unwrap_or(0);
        let budget = asked.max(largest + WRITE_BUF + MIN_CHUNK + binary_bytes);
        let runs: u64 = scans.iter().map(|s| s.summary.runs).sum();
        let direct_bytes = scans.iter().try_fold(0usize, |acc, s| {
            let n = s.runs.as_ref()?.len();
            Some(acc.saturating_add(s.reader_bytes.saturating_mul(n)))
        });
        let max_payload = scans.iter().map(|s| s.max_payload).max().unwrap_or(0);
        let input_bytes = scans.iter().map(|s| s.reader_bytes).max().unwrap_or(0) + WRITE_BUF;
        // a chunk reader's buffer, its head's payload buffer and its share
        // of the one handed out
        let chunk_reader_bytes = READ_BUF + 2 * max_payload;
        let p = plan(
            runs,
            direct_bytes.unwrap_or(usize::MAX),
            input_bytes,
            chunk_reader_bytes,
            budget - binary_bytes,
        );
        let mut order = OrderSummary {
            runs,
            memory_bytes: budget,
            ..OrderSummary::default()
        };
        let mut deferred = Vec::new();
        let mut files = Vec::with_capacity(scans.len());
        let mut sources: Vec<Box<dyn DatagramSource>> = Vec::new();
        let mut labels = Vec::new();
        let mut spill = None;
        let mut binaryfiles = Vec::new();
        // Each BinaryFILE as one source, its counts kept for the summary.
        let mut binary_source = |i: usize, reader: BinaryFileReader<CaptureInput>| {
            let (source, entry) = BinaryFile::source(i, reader, &opts.filter);
            binaryfiles.push(entry);
            source
        };
        let mut binaries = binaries.into_iter().peekable();
        match p {
            Plan::Direct => {
                // in the files' order: equal stamps go in that order
                let mut scanned = scans.iter();
                for (i, path) in paths.iter().enumerate() {
                    if let Some((_, r)) = binaries.next_if(|(at, _)| *at == i) {
                        sources.push(binary_source(i, r));
                        labels.push(path.clone());
                        continue;
                    }
                    let Some(s) = scanned.next() else { break };
                    for run in s.runs.as_deref().unwrap_or_default() {
                        let r = open_run(&s.summary.path, &run.from)?;
                        let f = FilteredReader::new(r, opts.filter.clone(), run.datagrams)
                            .with_input_memory();
                        sources.push(Box::new(f));
                        labels.push(s.summary.path.clone());
                    }
                }
            }
            Plan::Spill {
                chunk_bytes,
                fan_in,
            } => {
                order.chunked = true;
                let mut dir = SpillDir::new(opts.spill_dir.as_deref())?;
                let mut sorter = SortBuffer::new(chunk_bytes);
                let mut chunks = Vec::new();
                let mut buf = Vec::new();
                let mut reader_peak = 0usize;
                for s in &scans {
                    let path = &s.summary.path;
                    let mut f =
                        FilteredReader::new(open(path)?, opts.filter.clone(), s.summary.datagrams)
                            .with_input_memory();
                    while let Some(m) = f.next(&mut buf).map_err(|e| {
                        anyhow::anyhow!("{}: reading the capture again: {e}", path.display())
                    })? {
                        if !sorter.fits(m.len) {
                            let mut w = dir.create()?;
                            sorter.drain_sorted(|m, p| w.write(m, p))?;
                            chunks.push(w.finish(&mut dir.stats)?);
                        }
                        sorter.push(m, &buf);
                    }
                    reader_peak = reader_peak.max(f.memory() + buf.capacity());
                }
                let write_buf = if chunks.is_empty() { 0 } else { WRITE_BUF };
                order.peak_bytes = sorter.peak_bytes() + reader_peak + write_buf;
                if chunks.is_empty() {
                    // everything fits one chunk: sorted in memory
                    sources.push(Box::new(sorter.into_sorted()));
                    labels.push(paths[0].clone());
                } else {
                    if !sorter.is_empty() {
                        let mut w = dir.create()?;
                        sorter.drain_sorted(|m, p| w.write(m, p))?;
                        chunks.push(w.finish(&mut dir.stats)?);
                    }
                    drop(sorter);
                    dir.stats.chunks = chunks.len() as u64;
                    let left = dir.merge_down(chunks, fan_in)?;
                    if dir.stats.passes > 0 {
                        let merging = fan_in * (READ_BUF + 2 * max_payload) + WRITE_BUF;
                        order.peak_bytes = order.peak_bytes.max(merging);
                    }
                    for c in left {
                        sources.push(Box::new(ChunkReader::open(&c)?));
                        labels.push(c);
                    }
                    order.spill = dir.stats;
                    spill = Some(dir);
                }
            }
        }
        // Spilled: the BinaryFILEs after the chunks (among equal stamps,
        // after every capture).
        for (i, r) in binaries {
            sources.push(binary_source(i, r));
            labels.push(paths[i].clone());
        }
        let mut scans = scans.into_iter();
        for (i, path) in paths.iter().enumerate() {
            if let Some(b) = binaryfiles.iter().find(|b| b.file == i) {
                files.push(b.summary(path));
                continue;
            }
            let Some(s) = scans.next() else { break };
            if let Some(error) = s.error {
                deferred.push(Deferred {
                    error: StreamError {
                        path: s.summary.path.clone(),
                        error,
                    },
                    last_ts: s.last_ts,
                });
            }
            files.push(s.summary);
        }
        order.sources = sources.len();
        tracing::debug!(?order, "capture order planned");
        Ok(CaptureStream {
            merge: Merge::new(sources),
            labels,
            out: Vec::new(),
            run: DatagramRun::default(),
            deferred,
            error: None,
            files,
            order,
            binaryfiles,
            assumed_sorted: Vec::new(),
            went_back: false,
            released: 0,
            first_ts: None,
            last_ts: None,
            _spill: spill,
        })
    }

    /// The next datagram in time order; `None` at the end (or at an error:
    /// see [`Self::error`]).
    pub fn next_datagram(&mut self) -> Option<Released<'_>> {
        if self.error.is_some() {
            return None;
        }
        match self.merge.next_into(&mut self.out) {
            Ok(Some(m)) => {
                self.released += 1;
                self.first_ts.get_or_insert(m.ts_ns);
                self.last_ts = Some(m.ts_ns);
                Some(Released {
                    ts: m.ts_ns,
                    src: m.src,
                    dst: m.dst,
                    payload: &self.out,
                })
            }
            Ok(None) => {
                if !self.deferred.is_empty() {
                    self.error = Some(self.deferred.remove(0).error);
                }
                None
            }
            Err(e) => {
                self.went_back |= e.went_back;
                self.error = Some(StreamError {
                    path: self.labels[e.source].clone(),
                    error: e.error,
                });
                None
            }
        }
    }

    /// The next datagrams as one run (see [`DatagramRun`]), when the
    /// stream is one source that hands them out so (a Nasdaq BinaryFILE
    /// alone): there is nothing to put in order. `None` at the end, at an
    /// error (see [`Self::error`]), or when the stream hands out datagrams
    /// one by one: [`Self::next_datagram`] then goes on from there.
    pub fn next_run(&mut self) -> Option<&DatagramRun> {
        if self.error.is_some() {
            return None;
        }
        match self.merge.next_run(&mut self.run) {
            Ok(Some(true)) => {
                let first = self.run.datagrams.first()?.ts_ns;
                let last = self.run.datagrams.last()?.ts_ns;
                self.released += self.run.len() as u64;
                self.first_ts.get_or_insert(first);
                self.last_ts = Some(last);
                Some(&self.run)
            }
            Ok(_) => None,
            Err(e) => {
                self.went_back |= e.went_back;
                self.error = Some(StreamError {
                    path: self.labels[e.source].clone(),
                    error: e.error,
                });
                None
            }
        }
    }

    /// The next datagram stamped at or before `t`; `None` when there is
    /// none left. Then everything stamped at or before `t` was handed out,
    /// unless [`Self::error`] says a file failed before its datagrams up to
    /// `t` could all be read (its last datagram read is stamped at or
    /// before `t`).
    pub fn next_through(&mut self, t: i64) -> Option<Released<'_>> {
        if self.error.is_some() {
            return None;
        }
        match self.merge.peek_ts() {
            Some(ts) if ts > t => {
                if let Some(i) = self
                    .deferred
                    .iter()
                    .position(|d| d.last_ts.is_none_or(|l| l <= t))
                {
                    self.error = Some(self.deferred.remove(i).error);
                }
                None
            }
            _ => self.next_datagram().filter(|d| d.ts <= t),
        }
    }

    /// Reads what is left of the captures without handing it out, only to
    /// learn whether they were sorted: a replay whose checks ended early
    /// answered them as if nothing later in a file could be stamped
    /// earlier, which is only known at the end. Returns
    /// [`Self::went_back`]. A read error found here is not the replay's:
    /// it came after everything that was answered.
    pub fn read_rest_for_order(&mut self) -> bool {
        if self.error.is_none() {
            let mut buf = Vec::new();
            loop {
                match self.merge.next_into(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        self.went_back |= e.went_back;
                        break;
                    }
                }
            }
        }
        self.went_back
    }

    /// Whether a file opened by [`Self::open_assuming_sorted`] turned out
    /// not to be in time order: the stream stopped there, and the captures
    /// must be read again with [`Self::open`].
    pub fn went_back(&self) -> bool {
        self.went_back
    }

    /// The error that ended the stream early, if any (what came before it
    /// was handed out).
    pub fn error(&self) -> Option<&StreamError> {
        self.error.as_ref()
    }

    pub fn take_error(&mut self) -> Option<StreamError> {
        self.error.take()
    }

    /// Datagrams handed out so far.
    pub fn released(&self) -> u64 {
        self.released
    }

    pub fn summary(&self) -> StreamSummary {
        let mut files = self.files.clone();
        for (i, counts) in &self.assumed_sorted {
            let c = counts.get();
            let f = &mut files[*i];
            f.stats = c.stats;
            f.filtered_out = c.filtered_out;
            f.datagrams = c.datagrams;
        }
        for b in &self.binaryfiles {
            let st = b.stats.get();
            let f = &mut files[b.file];
            f.stats.frames = st.datagrams;
            f.stats.datagrams = st.datagrams;
            f.datagrams = st.datagrams;
            if let Some(s) = &mut f.binaryfile {
                s.stats = st;
            }
        }
        let mut stats = CaptureStats::default();
        for f in &files {
            let s = &f.stats;
            stats.frames += s.frames;
            stats.datagrams += s.datagrams;
            stats.truncated_tail |= s.truncated_tail;
            stats.skipped.add_all(&s.skipped);
        }
        let first = files[0].compression;
        let mut order = self.order;
        order.peak_bytes = order.peak_bytes.max(self.merge.peak_bytes());
        StreamSummary {
            stats,
            compression: first,
            filtered_out: files.iter().map(|f| f.filtered_out).sum(),
            out_of_order: files.iter().map(|f| f.out_of_order).sum(),
            format: files[0].format,
            binaryfile: files.iter().find_map(|f| f.binaryfile),
            files,
            released: self.released,
            order,
            first_ts: self.first_ts,
            last_ts: self.last_ts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::pcap::PcapWriter;

    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    /// A pcap of `(ts, tag)` datagrams to 239.0.0.1:1 (to 239.0.0.2:1 when
    /// the tag is odd and `two_dst`), in this order, with a payload of
    /// `size` bytes starting with the tag (two bytes, little-endian).
    fn pcap(path: &Path, items: &[(i64, u16)], size: usize, two_dst: bool) {
        let mut w = PcapWriter::create(path).unwrap();
        for &(ts, tag) in items {
            let mut p = vec![0u8; size.max(2)];
            p[..2].copy_from_slice(&tag.to_le_bytes());
            let dst = if two_dst && tag % 2 == 1 {
                addr("239.0.0.2:1")
            } else {
                addr("239.0.0.1:1")
            };
            w.write_udp(ts, addr("10.0.0.1:5"), dst, &p).unwrap();
        }
        w.into_inner().unwrap();
    }

    fn drain(s: &mut CaptureStream) -> Vec<(i64, u16)> {
        let mut got = Vec::new();
        while let Some(d) = s.next_datagram() {
            got.push((d.ts, u16::from_le_bytes([d.payload[0], d.payload[1]])));
        }
        got
    }

    fn opts(memory: usize) -> StreamOptions {
        StreamOptions {
            memory_bytes: memory,
            ..StreamOptions::default()
        }
    }

    #[test]
    fn streams_in_exact_time_order_with_one_reader_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        let items = [(100, 1), (0, 2), (100, 3), (50, 4), (300, 5)];
        pcap(&path, &items, 4, false);
        let mut s = CaptureStream::open(&[path], StreamOptions::default()).unwrap();
        assert_eq!(
            drain(&mut s),
            [(0, 2), (50, 4), (100, 1), (100, 3), (300, 5)]
        );
        let sum = s.summary();
        assert!(!sum.was_sorted());
        assert_eq!(sum.out_of_order, 2);
        assert_eq!((sum.order.runs, sum.order.sources), (3, 3));
        assert!(!sum.order.chunked);
        assert_eq!((sum.first_ts, sum.last_ts), (Some(0), Some(300)));
        assert_eq!(sum.released, 5);
        assert!(s.error().is_none());
    }

    #[test]
    fn a_sorted_capture_is_one_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        let items: Vec<(i64, u16)> = (0..1000).map(|i| (i / 3, i as u16)).collect();
        pcap(&path, &items, 100, false);
        let mut s = CaptureStream::open(&[path], StreamOptions::default()).unwrap();
        assert_eq!(drain(&mut s), items);
        let sum = s.summary();
        assert!(sum.was_sorted());
        assert_eq!((sum.order.runs, sum.order.sources), (1, 1));
        assert_eq!(sum.order.spill, SpillStats::default());
    }

    #[test]
    fn many_runs_over_the_budget_are_sorted_in_spilled_chunks() {
        // 20,000 datagrams of 200 bytes (4 MB) alternating between two
        // clocks 5 s apart: each step back starts a run (10,001 runs), far
        // more than 1 MiB reads at once
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        let items: Vec<(i64, u16)> = (0..20_000i64)
            .map(|i| {
                (
                    i / 2 * 1_000 + if i % 2 == 0 { 5_000_000_000 } else { 0 },
                    i as u16,
                )
            })
            .collect();
        pcap(&path, &items, 200, false);
        let mut s = CaptureStream::open(&[path], opts(1 << 20)).unwrap();
        let mut want = items.clone();
        want.sort_by_key(|p| p.0);
        assert_eq!(drain(&mut s), want);
        let o = s.summary().order;
        assert_eq!(o.runs, 10_001);
        assert!(o.chunked);
        assert!(o.spill.chunks >= 4, "{o:?}");
        assert!(o.peak_bytes <= 1 << 20, "{o:?}");
        assert!(o.spill.bytes_written >= 20_000 * 200);
    }

    #[test]
    fn many_runs_that_fit_one_chunk_are_sorted_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        let items: Vec<(i64, u16)> = (0..5_000i64)
            .map(|i| ((i * 7919) % 1000, i as u16))
            .collect();
        pcap(&path, &items, 10, false);
        let mut s = CaptureStream::open(&[path], opts(1 << 20)).unwrap();
        let mut want = items.clone();
        want.sort_by_key(|p| p.0);
        assert_eq!(drain(&mut s), want);
        let o = s.summary().order;
        assert!(o.chunked && o.spill.chunks == 0 && o.sources == 1, "{o:?}");
    }

    #[test]
    fn several_files_merge_in_file_order_among_equal_stamps() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pcap");
        let b = dir.path().join("b.pcap");
        pcap(&a, &[(10, 1), (20, 2), (5, 3)], 4, false);
        pcap(&b, &[(5, 4), (10, 5), (20, 6)], 4, false);
        let mut s = CaptureStream::open(&[a.clone(), b.clone()], StreamOptions::default()).unwrap();
        assert_eq!(
            drain(&mut s),
            [(5, 3), (5, 4), (10, 1), (10, 5), (20, 2), (20, 6)]
        );
        let sum = s.summary();
        assert_eq!(sum.files.len(), 2);
        assert_eq!((sum.files[0].runs, sum.files[1].runs), (2, 1));
        let mut s = CaptureStream::open(&[b, a], StreamOptions::default()).unwrap();
        assert_eq!(
            drain(&mut s),
            [(5, 4), (5, 3), (10, 5), (10, 1), (20, 6), (20, 2)]
        );
    }

    #[test]
    fn filter_applies_before_the_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        // odd tags go to the other destination; kept: 0, 2, 4 in order
        pcap(&path, &[(1, 0), (0, 1), (2, 2), (1, 3), (3, 4)], 4, true);
        let mut s = CaptureStream::open(
            &[path],
            StreamOptions {
                filter: vec![addr("239.0.0.1:1")],
                ..StreamOptions::default()
            },
        )
        .unwrap();
        assert_eq!(drain(&mut s), [(1, 0), (2, 2), (3, 4)]);
        let sum = s.summary();
        assert_eq!(sum.filtered_out, 2);
        assert_eq!(sum.order.runs, 1);
    }

    #[test]
    fn checks_see_everything_up_to_their_time_and_nothing_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        pcap(
            &path,
            &[(100, 1), (0, 2), (150, 3), (120, 4), (400, 5), (20, 6)],
            4,
            false,
        );
        let mut s = CaptureStream::open(&[path], StreamOptions::default()).unwrap();
        let mut at = |t: i64| {
            let mut v = Vec::new();
            while let Some(d) = s.next_through(t) {
                assert!(d.ts <= t);
                v.push(d.payload[0]);
            }
            v
        };
        assert_eq!(at(50), [2, 6]);
        assert_eq!(at(120), [1, 4]);
        assert_eq!(at(1000), [3, 5]);
    }

    #[test]
    fn a_file_cut_short_ends_the_stream_where_its_data_ends() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pcap");
        let b = dir.path().join("b.pcap");
        pcap(&a, &[(10, 1), (30, 2), (50, 3)], 4, false);
        pcap(&b, &[(20, 4), (40, 5), (60, 6)], 4, false);
        // a corrupt record length after the second datagram of a
        let mut bytes = std::fs::read(&a).unwrap();
        let third = 24 + 2 * (16 + 46);
        bytes[third + 8..third + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&a, bytes).unwrap();
        let mut s = CaptureStream::open(&[a.clone(), b], StreamOptions::default()).unwrap();
        let mut got = Vec::new();
        for t in [25, 29, 30] {
            while let Some(d) = s.next_through(t) {
                got.push(d.ts);
            }
            if s.error().is_some() {
                break;
            }
        }
        // a check at 25 or 29 is exact (a is known up to 30); at 30 what a
        // holds after its fault is unknown
        assert_eq!(got, [10, 20, 30]);
        let e = s.error().unwrap().to_string();
        assert!(e.starts_with(&a.display().to_string()), "{e}");
        assert!(e.contains("corrupt"), "{e}");
    }
}
