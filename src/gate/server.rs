//! The gate's Unix-socket server (gate.md): text lines in, one answer line
//! per request out, in order, pipelining allowed. I/O only: what a request
//! means is the [`Backend`]'s business (`gate::protocol` over the state
//! table); this file frames lines, streams `STATUS`, and moves bytes.
//!
//! Three I/O modes, all read-only against the table (a request never
//! blocks a feed writer):
//! - [`IoMode::Blocking`]: one thread per connection in blocking reads.
//! - [`IoMode::Epoll`]: one thread in a blocking `epoll_wait`.
//! - [`IoMode::BusyPoll`]: one thread spinning on `epoll_wait(timeout 0)`,
//!   optionally pinned to a CPU: no sleep and no cross-core wake-up on the
//!   request path, at the price of one busy core.
//!
//! Per connection the buffers are allocated once (input 16 KiB, output
//! grows to ~64 KiB at most); answering a request does not allocate.
//!
//! `STATUS` (a request this server adds; gate.md allows it) answers one
//! line per feed and per symbol, then `END`:
//!
//! ```text
//! FEED <name> symbols=<n> state=<live|session_ended|no_session> channel_silence_us=<n|-> clock_offset_us=<n> gap_epoch=<n> session_epoch=<n> recovery=<state>[:last_failure=<reason>] line_skew_max_us=<n|-> waiting=<n> kept_entries=<n>
//! SYMBOL <feed> <the verdict line a CHECK of the symbol gets from that feed>
//! END
//! ```
//!
//! A `cboe-pitch` feed with a Gap Request Proxy or Spin Servers has `GRP`
//! and `UNIT` lines after its `FEED` line (`gate::links`).
//!
//! The listing is produced as the client reads it (never more than the
//! output high-water mark buffered), and pipelined requests after it are
//! answered after `END`, in order.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::feed::across::{Feeds, GateRules};
use crate::feed::check::{
    answer_over, write_error, write_i64, write_u64, write_verdict, ProtoError, SymbolLookup,
};
use crate::feed::reader::{FeedReader, Found};
use crate::feed::verdict::{judge, Thresholds};
use crate::feed::view::{recovery_state_name, FEED_CHANNEL_ALIVE, FEED_HAS_SESSION};
use crate::feed::SnapshotFailure;
use crate::gate::links::SharedLinks;
use crate::util::histogram::{SharedHistogram, SmallRecorder};
use crate::wire::Symbol;

use crate::feed::check::MAX_LINE;
/// Default socket path (gate.md).
pub const DEFAULT_SOCKET: &str = "/run/tickgate/gate.sock";
/// Default socket file mode (gate.md).
pub const DEFAULT_MODE: u32 = 0o660;

const IN_CAP: usize = 16 * 1024;
/// Stop producing answers (and reading requests) above this much unsent
/// output: a client that pipelines without reading is held back by its
/// own socket, not by our memory.
const OUT_HIGH: usize = 64 * 1024;
/// The request this server adds (gate.md allows new requests).
const STATUS: &[u8] = b"STATUS";

/// What the requests mean. `answer` is called with one request line
/// (without `\n` or `\r`, at most `MAX_LINE` bytes) and appends exactly one
/// answer line, `\n` included. It must not block and should not allocate.
///
/// `STATUS` is answered by the server through the `status_*` calls: one
/// `status_feed` line per feed followed by one `status_symbol` line per
/// slot it announced, then `END`. Each call appends whole lines.
pub trait Backend: Send + Sync + 'static {
    fn answer(&self, line: &[u8], now: i64, out: &mut Vec<u8>);
    /// Number of feeds listed by `STATUS`.
    fn status_feeds(&self) -> usize {
        0
    }
    /// Appends the feed's line; returns how many symbol slots follow.
    fn status_feed(&self, _feed: usize, _now: i64, _out: &mut Vec<u8>) -> u32 {
        0
    }
    /// Appends the line of one symbol slot of a feed.
    fn status_symbol(&self, _feed: usize, _slot: u32, _now: i64, _out: &mut Vec<u8>) {}
}

impl<B: Backend> Backend for Arc<B> {
    fn answer(&self, line: &[u8], now: i64, out: &mut Vec<u8>) {
        (**self).answer(line, now, out)
    }
    fn status_feeds(&self) -> usize {
        (**self).status_feeds()
    }
    fn status_feed(&self, feed: usize, now: i64, out: &mut Vec<u8>) -> u32 {
        (**self).status_feed(feed, now, out)
    }
    fn status_symbol(&self, feed: usize, slot: u32, now: i64, out: &mut Vec<u8>) {
        (**self).status_symbol(feed, slot, now, out)
    }
}

/// The live daemon's backend: the feeds' readers, by config name, in
/// config order, and the `[gate]` rules of a symbol on several feeds.
/// Read-only and lock-free (`FeedReader`).
#[derive(Clone, Debug)]
pub struct Gate {
    feeds: Vec<(String, FeedReader)>,
    rules: GateRules,
    /// Each feed's recovery connections (R4c, R5c), by feed index; `None`
    /// for a feed without any.
    links: Vec<Option<SharedLinks>>,
}

impl Gate {
    /// The default `[gate]` rules (`across = "all"`, `crossed_ms = 50`).
    pub fn new(feeds: Vec<(String, FeedReader)>) -> Gate {
        Gate::with_rules(feeds, GateRules::default())
    }

    pub fn with_rules(feeds: Vec<(String, FeedReader)>, rules: GateRules) -> Gate {
        let links = vec![None; feeds.len()];
        Gate {
            feeds,
            rules,
            links,
        }
    }

    /// Lists what feed `feed`'s recovery connections are doing (R4c,
    /// R5c) after its `FEED` line in `STATUS`.
    pub fn set_links(&mut self, feed: usize, links: SharedLinks) {
        if let Some(l) = self.links.get_mut(feed) {
            *l = Some(links);
        }
    }

    pub fn feeds(&self) -> &[(String, FeedReader)] {
        &self.feeds
    }

    pub fn rules(&self) -> &GateRules {
        &self.rules
    }
}

impl Feeds for Gate {
    type Error = std::convert::Infallible;
    #[inline]
    fn count(&self) -> usize {
        self.feeds.len()
    }
    #[inline]
    fn name(&self, i: usize) -> &[u8] {
        self.feeds[i].0.as_bytes()
    }
    #[inline]
    fn find(&self, i: usize, symbol: Symbol) -> Result<Option<Found>, Self::Error> {
        Ok(self.feeds[i].1.lookup(symbol))
    }
}

impl Backend for Gate {
    #[inline]
    fn answer(&self, line: &[u8], now: i64, out: &mut Vec<u8>) {
        match answer_over(line, self, &self.rules, now, out) {
            Ok(()) => {}
            Err(never) => match never {},
        }
    }

    fn status_feeds(&self) -> usize {
        self.feeds.len()
    }

    /// `FEED <name> symbols=<n> state=<live|session_ended|no_session>
    /// channel_silence_us=<n|-> clock_offset_us=<n> gap_epoch=<n>
    /// session_epoch=<n> recovery=<state>[:last_failure=<reason>]
    /// line_skew_max_us=<n|-> waiting=<n> kept_entries=<n>`
    fn status_feed(&self, feed: usize, now: i64, out: &mut Vec<u8>) -> u32 {
        let Some((name, reader)) = self.feeds.get(feed) else {
            return 0;
        };
        let view = reader.feed_view();
        let n = reader.len();
        out.extend_from_slice(b"FEED ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b" symbols=");
        write_u64(out, n as u64);
        out.extend_from_slice(b" state=");
        out.extend_from_slice(if view.flags & FEED_HAS_SESSION == 0 {
            b"no_session"
        } else if view.ended() {
            b"session_ended"
        } else {
            b"live"
        });
        out.extend_from_slice(b" channel_silence_us=");
        if view.flags & FEED_CHANNEL_ALIVE != 0 {
            write_i64(out, now.saturating_sub(view.channel_alive_at) / 1000);
        } else {
            out.push(b'-');
        }
        out.extend_from_slice(b" clock_offset_us=");
        write_i64(out, view.offset_ns / 1000);
        out.extend_from_slice(b" gap_epoch=");
        write_u64(out, view.gap_epoch as u64);
        out.extend_from_slice(b" session_epoch=");
        write_u64(out, view.session_epoch as u64);
        // recovery.md R6: what the feed's recovery is doing, and the line
        // skew operators set `gap_hold_us` from.
        out.extend_from_slice(b" recovery=");
        out.extend_from_slice(recovery_state_name(view.recovery).as_bytes());
        let failure = (view.recovery >> 3) as usize;
        if let Some(f) = failure
            .checked_sub(1)
            .and_then(|i| SnapshotFailure::ALL.get(i))
        {
            out.extend_from_slice(b":last_failure=");
            out.extend_from_slice(f.as_str().as_bytes());
        }
        out.extend_from_slice(b" line_skew_max_us=");
        if view.line_skew_max_ns > 0 {
            write_i64(out, view.line_skew_max_ns / 1000);
        } else {
            out.push(b'-');
        }
        // venues.md `cme-mdp3`: instruments waiting for a snapshot and the
        // entries kept for them (0 on venues without per-instrument
        // recovery).
        out.extend_from_slice(b" waiting=");
        write_u64(out, view.venue_waiting as u64);
        out.extend_from_slice(b" kept_entries=");
        write_u64(out, view.venue_kept as u64);
        out.push(b'\n');
        if let Some(links) = self.links.get(feed).and_then(|l| l.as_ref()) {
            // R4c, R5c: the feed's writer holds the lock only to copy in.
            if let Ok(l) = links.lock() {
                l.write_lines(name, now, out);
            }
        }
        n
    }

    /// `SYMBOL <feed> ` followed by the verdict line a `CHECK` of the
    /// symbol would get from this feed with its configured thresholds.
    fn status_symbol(&self, feed: usize, slot: u32, now: i64, out: &mut Vec<u8>) {
        let Some((name, reader)) = self.feeds.get(feed) else {
            return;
        };
        let Some((symbol, view)) = reader.slot(slot) else {
            return;
        };
        // A symbol of one unit reads its unit's state (venues.md `cboe-pitch`).
        let fv = reader.feed_view_of(slot);
        let verdict = judge(Some(&view), &fv, now, &Thresholds::of(&view));
        // A venue's raw name may hold any byte: keep the listing one token
        // per symbol and one line per entry.
        let mut sym = [0u8; crate::wire::SYMBOL_MAX];
        let (bytes, len) = symbol.trimmed();
        let trimmed = &bytes[..len];
        for (d, &c) in sym.iter_mut().zip(trimmed) {
            *d = if c.is_ascii_graphic() { c } else { b'?' };
        }
        let sym = if trimmed.is_empty() {
            &b"?"[..]
        } else {
            &sym[..trimmed.len()]
        };
        out.extend_from_slice(b"SYMBOL ");
        out.extend_from_slice(name.as_bytes());
        out.push(b' ');
        write_verdict(out, sym, &verdict);
    }
}

/// How connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoMode {
    /// A thread per connection, blocking reads.
    #[default]
    Blocking,
    /// One thread, blocking `epoll_wait`.
    Epoll,
    /// One thread spinning on `epoll_wait(0)`; see [`ServerConfig::cpu`].
    /// When idle it calls `sched_yield` between polls, so a thread woken
    /// on its CPU runs at once instead of waiting out its time slice.
    BusyPoll,
}

impl std::str::FromStr for IoMode {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<IoMode> {
        Ok(match s {
            "blocking" => IoMode::Blocking,
            "epoll" => IoMode::Epoll,
            "busy_poll" => IoMode::BusyPoll,
            _ => bail!("unknown gate io mode {s:?} (blocking, epoll, busy_poll)"),
        })
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub path: PathBuf,
    /// File mode of the socket (default 0660).
    pub mode: u32,
    pub io: IoMode,
    /// `BusyPoll`/`Epoll`: pin the serving thread to this CPU.
    pub cpu: Option<usize>,
    /// Connections beyond this are refused (`ERR too_many_connections`,
    /// then closed).
    pub max_connections: usize,
    /// Connections of one peer user (SO_PEERCRED) beyond this are refused
    /// (`ERR too_many_connections_for_uid`), so that one local user cannot
    /// take every slot.
    pub max_connections_per_uid: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            path: PathBuf::from(DEFAULT_SOCKET),
            mode: DEFAULT_MODE,
            io: IoMode::Blocking,
            cpu: None,
            max_connections: 1024,
            max_connections_per_uid: 1024,
        }
    }
}

/// Reasons of `REJECT` in gate.md's order; `GateStats::rejects_by_reason`
/// counts them in this order.
pub const REJECT_REASONS: [&str; 7] = [
    "unknown_symbol",
    "no_data",
    "stale_quote",
    "stale_at_source",
    "halted",
    "crossed",
    "suspect",
];

/// Plain atomic counters of the server, for the metrics exporter. Counted
/// per read batch (one atomic add per field touched, not per request).
#[derive(Debug, Default)]
pub struct GateStats {
    pub ok: AtomicU64,
    pub reject: AtomicU64,
    /// Per reason (a REJECT with two reasons counts in both).
    pub rejects_by_reason: [AtomicU64; REJECT_REASONS.len()],
    pub err: AtomicU64,
    pub pong: AtomicU64,
    pub status: AtomicU64,
    /// Answers of requests this server does not classify.
    pub other: AtomicU64,
    pub connections_accepted: AtomicU64,
    /// Every refusal (the server full, or the peer's user at its cap).
    pub connections_refused: AtomicU64,
    /// The refusals because the peer's user was at its cap.
    pub connections_refused_uid: AtomicU64,
    /// Connections whose client had already hung up when the server came
    /// to them (connect-and-close churn): closed without taking a slot.
    pub connections_reaped: AtomicU64,
    pub connections_open: AtomicI64,
    /// Time from a batch of request bytes read to its answers written
    /// (HDR; each serving thread records through its own recorder).
    pub service: Arc<SharedHistogram>,
    pub batches: AtomicU64,
}

impl GateStats {
    /// Requests answered so far, all kinds.
    pub fn requests(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
            + self.reject.load(Ordering::Relaxed)
            + self.err.load(Ordering::Relaxed)
            + self.pong.load(Ordering::Relaxed)
            + self.status.load(Ordering::Relaxed)
            + self.other.load(Ordering::Relaxed)
    }

    /// Adds and clears a connection's counts; true if there were any.
    fn add(&self, c: &mut BatchCounts) -> bool {
        if !c.any() {
            return false;
        }
        fn bump(a: &AtomicU64, n: &mut u64) {
            if *n != 0 {
                a.fetch_add(*n, Ordering::Relaxed);
                *n = 0;
            }
        }
        bump(&self.ok, &mut c.ok);
        bump(&self.reject, &mut c.reject);
        for (a, n) in self.rejects_by_reason.iter().zip(c.reasons.iter_mut()) {
            bump(a, n);
        }
        bump(&self.err, &mut c.err);
        bump(&self.pong, &mut c.pong);
        bump(&self.status, &mut c.status);
        bump(&self.other, &mut c.other);
        true
    }

    fn record_service(&self, service: &mut SmallRecorder, ns: u64) {
        service.record(ns);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
struct BatchCounts {
    ok: u64,
    reject: u64,
    reasons: [u64; REJECT_REASONS.len()],
    err: u64,
    pong: u64,
    status: u64,
    other: u64,
}

impl BatchCounts {
    fn any(&self) -> bool {
        self.ok + self.reject + self.err + self.pong + self.status + self.other != 0
    }

    /// Classifies one answer line by its first words (cheap: no parsing of
    /// numbers).
    fn classify(&mut self, answer: &[u8]) {
        if answer.starts_with(b"OK ") {
            self.ok += 1;
        } else if let Some(rest) = answer.strip_prefix(b"REJECT ") {
            self.reject += 1;
            // REJECT <SYMBOL> <reason>[,<reason>...] ...
            let after_sym = rest
                .iter()
                .position(|&c| c == b' ')
                .map_or(&[][..], |i| &rest[i + 1..]);
            let reasons = after_sym.split(|&c| c == b' ').next().unwrap_or(&[]);
            for r in reasons.split(|&c| c == b',') {
                if let Some(i) = REJECT_REASONS.iter().position(|x| x.as_bytes() == r) {
                    self.reasons[i] += 1;
                }
            }
        } else if answer.starts_with(b"ERR") {
            self.err += 1;
        } else if answer.starts_with(b"PONG") {
            self.pong += 1;
        } else {
            self.other += 1;
        }
    }
}

/// The wall clock as Unix nanoseconds (`now` of the check).
#[inline]
pub fn unix_now() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.as_nanos() as i64
}

/// `STATUS` in progress: where the listing stands.
#[derive(Debug, Clone, Copy)]
struct StatusCursor {
    now: i64,
    feed: usize,
    slot: u32,
    slots: u32,
    in_feed: bool,
}

/// One connection's protocol state: input framing, output, `STATUS`
/// streaming. Sans-I/O: the mode loops feed it bytes and drain its output.
struct Conn {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Skipping the rest of an over-long line (its ERR already sent).
    discarding: bool,
    out: Vec<u8>,
    sent: usize,
    status: Option<StatusCursor>,
    counts: BatchCounts,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            buf: vec![0u8; IN_CAP].into_boxed_slice(),
            start: 0,
            end: 0,
            discarding: false,
            out: Vec::with_capacity(4096),
            sent: 0,
            status: None,
            counts: BatchCounts::default(),
        }
    }

    /// Where the next read goes (never empty: a complete line is always
    /// consumed before reading, and a partial line is at most
    /// `MAX_LINE + 1` bytes before it is dropped).
    fn read_space(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.buf.len() - self.end < MAX_LINE + 2 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    fn filled(&mut self, n: usize) {
        self.end += n;
    }

    fn pending_out(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    fn consumed_out(&mut self, n: usize) {
        self.sent += n;
        if self.sent == self.out.len() {
            self.sent = 0;
            self.out.clear();
        }
    }

    /// A complete line or a listing is waiting to be answered.
    fn has_work(&self) -> bool {
        self.status.is_some() || self.buf[self.start..self.end].contains(&b'\n')
    }

    /// Answers complete lines in order until the output reaches its high
    /// water mark or no complete line is left.
    fn process<B: Backend>(&mut self, backend: &B, now: i64) {
        while self.out.len() - self.sent < OUT_HIGH {
            if let Some(cursor) = self.status.as_mut() {
                if stream_status(backend, cursor, &mut self.out) {
                    self.status = None;
                }
                continue;
            }
            let pending = &self.buf[self.start..self.end];
            match pending.iter().position(|&c| c == b'\n') {
                Some(i) => {
                    let next = self.start + i + 1;
                    if self.discarding {
                        self.discarding = false;
                        self.start = next;
                        continue;
                    }
                    let mut line = &pending[..i];
                    if let Some(l) = line.strip_suffix(b"\r") {
                        line = l;
                    }
                    if line.len() > MAX_LINE {
                        write_error(&mut self.out, ProtoError::LineTooLong);
                        self.counts.err += 1;
                    } else if line == STATUS {
                        self.counts.status += 1;
                        self.status = Some(StatusCursor {
                            now,
                            feed: 0,
                            slot: 0,
                            slots: 0,
                            in_feed: false,
                        });
                    } else {
                        let at = self.out.len();
                        backend.answer(line, now, &mut self.out);
                        self.counts.classify(&self.out[at..]);
                    }
                    self.start = next;
                }
                None => {
                    if self.discarding {
                        self.start = self.end;
                    } else if pending.len() > MAX_LINE + 1 {
                        // Even a trailing `\r` cannot make this line legal:
                        // answer now, skip the rest up to its newline.
                        write_error(&mut self.out, ProtoError::LineTooLong);
                        self.counts.err += 1;
                        self.discarding = true;
                        self.start = self.end;
                    }
                    return;
                }
            }
        }
    }
}

/// Appends listing lines until the output is full; true when done.
fn stream_status<B: Backend>(backend: &B, c: &mut StatusCursor, out: &mut Vec<u8>) -> bool {
    while out.len() < OUT_HIGH {
        if !c.in_feed {
            if c.feed >= backend.status_feeds() {
                out.extend_from_slice(b"END\n");
                return true;
            }
            c.slots = backend.status_feed(c.feed, c.now, out);
            c.slot = 0;
            c.in_feed = true;
        } else if c.slot < c.slots {
            backend.status_symbol(c.feed, c.slot, c.now, out);
            c.slot += 1;
        } else {
            c.feed += 1;
            c.in_feed = false;
        }
    }
    false
}

/// A running server. `stop()` (or drop) shuts it down and removes the
/// socket file if it is still ours.
pub struct ServerHandle {
    path: PathBuf,
    identity: Option<(u64, u64)>,
    stopper: Stopper,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<GateStats>,
}

/// Stops a server from any thread (a signal-handling thread, say): stops
/// accepting, wakes the serving threads and closes every connection. The
/// owner of the `ServerHandle` then joins with `join()` or `stop()`.
#[derive(Clone)]
pub struct Stopper {
    stop: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
    registry: Option<Arc<Registry>>,
}

impl Stopper {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        wake(&self.wake);
        if let Some(reg) = &self.registry {
            reg.close_all();
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

impl ServerHandle {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> &Arc<GateStats> {
        &self.stats
    }

    /// A cloneable handle that stops the server from another thread.
    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    /// Stops accepting, closes every connection, joins the threads and
    /// removes the socket file (if it is still the one we bound).
    pub fn stop(mut self) {
        self.stopper.stop();
        self.shutdown();
    }

    /// Waits until a `Stopper` stops the server, then cleans up as `stop`.
    pub fn join(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(reg) = &self.stopper.registry {
            reg.join_all();
        }
        if let Some(id) = self.identity.take() {
            if let Ok(m) = std::fs::symlink_metadata(&self.path) {
                if (m.dev(), m.ino()) == id {
                    let _ = std::fs::remove_file(&self.path);
                }
            }
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stopper.stop();
        self.shutdown();
    }
}

fn wake(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a valid u64 to an eventfd we own.
    unsafe { libc::write(fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned from here on.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A fresh temporary name beside `path` (its directory created if need
/// be), so that the finished file can be renamed into place atomically:
/// a reader of `path` sees the old file or the new one, never half of one.
/// `what` names the file in errors ("socket", "state file").
pub fn temp_beside(path: &Path, what: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the {what} directory {}", dir.display()))?;
    }
    let name = path
        .file_name()
        .with_context(|| format!("{what} path {} has no file name", path.display()))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    Ok(tmp)
}

/// Binds the socket at `path` with `mode` (gate.md), replacing a stale
/// socket file from a crashed run and refusing when a live server answers
/// there. The socket is bound under a temporary name, given its mode and
/// renamed into place, so it is never reachable with looser permissions.
pub fn bind(path: &Path, mode: u32) -> anyhow::Result<UnixListener> {
    bind_socket(path, mode, "gate")
}

/// [`bind`] for any of the daemon's Unix sockets; `what` names its server
/// in messages ("gate", "fills API").
pub fn bind_socket(path: &Path, mode: u32, what: &str) -> anyhow::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => bail!(
                "another {what} server is already listening on {} (is tickgate already running?)",
                path.display()
            ),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "replacing stale {what} socket");
                std::fs::remove_file(path)
                    .with_context(|| format!("removing stale socket {}", path.display()))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("checking whether {} is a live socket", path.display())
                })
            }
        },
        Ok(_) => bail!(
            "{} exists and is not a socket; refusing to replace it",
            path.display()
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("inspecting {}", path.display())),
    }
    let tmp = temp_beside(path, "socket")?;
    let listener =
        UnixListener::bind(&tmp).with_context(|| format!("binding {}", tmp.display()))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting mode {mode:o} on {}", tmp.display()))
        .and_then(|_| {
            std::fs::rename(&tmp, path)
                .with_context(|| format!("moving socket into place at {}", path.display()))
        });
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// Binds `config.path` and serves `backend` in `config.io` mode until the
/// handle is stopped or dropped.
pub fn serve<B: Backend>(config: &ServerConfig, backend: B) -> anyhow::Result<ServerHandle> {
    serve_with_stats(config, backend, Arc::new(GateStats::default()))
}

/// As `serve`, counting into the given stats.
pub fn serve_with_stats<B: Backend>(
    config: &ServerConfig,
    backend: B,
    stats: Arc<GateStats>,
) -> anyhow::Result<ServerHandle> {
    let listener = bind(&config.path, config.mode)?;
    let identity = std::fs::symlink_metadata(&config.path)
        .ok()
        .map(|m| (m.dev(), m.ino()));
    let stop = Arc::new(AtomicBool::new(false));
    let wake_fd = Arc::new(eventfd().context("creating the gate's wake-up eventfd")?);
    let backend = Arc::new(backend);
    let mut threads = Vec::new();
    let mut registry = None;
    match config.io {
        IoMode::Blocking => {
            let reg = Arc::new(Registry::default());
            registry = Some(reg.clone());
            let (stop, wake_fd, stats) = (stop.clone(), wake_fd.clone(), stats.clone());
            let (max, per_uid) = (config.max_connections, config.max_connections_per_uid);
            threads.push(
                std::thread::Builder::new()
                    .name("gate-accept".into())
                    .spawn(move || {
                        accept_loop(listener, backend, stats, stop, wake_fd, reg, max, per_uid)
                    })
                    .context("spawning the gate acceptor")?,
            );
        }
        IoMode::Epoll | IoMode::BusyPoll => {
            let spin = config.io == IoMode::BusyPoll;
            let (stop, wake_fd, stats) = (stop.clone(), wake_fd.clone(), stats.clone());
            let (cpu, max) = (config.cpu, config.max_connections);
            let per_uid = config.max_connections_per_uid;
            listener
                .set_nonblocking(true)
                .context("making the gate listener non-blocking")?;
            threads.push(
                std::thread::Builder::new()
                    .name(if spin { "gate-spin" } else { "gate-epoll" }.into())
                    .spawn(move || {
                        if let Some(cpu) = cpu {
                            pin_to_cpu(cpu);
                        }
                        let limits = (max, per_uid);
                        if let Err(e) =
                            epoll_loop(listener, &*backend, &stats, &stop, &wake_fd, spin, limits)
                        {
                            tracing::error!(error = %e, "gate server loop failed");
                        }
                    })
                    .context("spawning the gate server thread")?,
            );
        }
    }
    tracing::info!(path = %config.path.display(), mode = ?config.io, "gate socket listening");
    Ok(ServerHandle {
        path: config.path.clone(),
        identity,
        stopper: Stopper {
            stop,
            wake: wake_fd,
            registry,
        },
        threads,
        stats,
    })
}

/// Pins the calling thread to one CPU (a failure is logged, not fatal).
pub fn pin_to_cpu(cpu: usize) {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        tracing::warn!(cpu, "cpu number out of range: gate thread not pinned");
        return;
    }
    // SAFETY: cpu_set_t is plain data and `cpu` is within it (checked above).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        tracing::warn!(cpu, error = %io::Error::last_os_error(), "could not pin the gate thread");
    }
}

/// Blocking mode: open connections, so that stop can close them.
#[derive(Default)]
struct Registry {
    inner: Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    next: u64,
    /// Id, a clone of the stream, the thread, the peer's uid.
    conns: Vec<(u64, UnixStream, Option<JoinHandle<()>>, u32)>,
    closed: bool,
    uids: UidCounts,
}

impl Registry {
    fn close_all(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.closed = true;
        for (_, s, _, _) in &g.conns {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn join_all(&self) {
        let handles: Vec<_> = {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.conns
                .iter_mut()
                .filter_map(|(_, _, h, _)| h.take())
                .collect()
        };
        for h in handles {
            let _ = h.join();
        }
    }

    fn remove(&self, id: u64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = g.conns.iter().position(|(x, _, _, _)| *x == id) {
            let (_, _, _, uid) = g.conns.swap_remove(i);
            g.uids.remove(uid);
        }
    }
}

impl RegistryInner {
    /// Takes out every connection whose client has hung up (its thread
    /// sees the shutdown and ends by itself): their slots are free now,
    /// not when their threads get round to it. Returns how many.
    fn reap(&mut self, sweep: &mut Vec<libc::pollfd>) -> usize {
        sweep.clear();
        sweep.extend(self.conns.iter().map(|(_, s, _, _)| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        }));
        if !poll_now(sweep) {
            return 0;
        }
        let mut reaped = 0;
        // Backwards: swap_remove moves the last entry into the hole, and
        // `sweep` is in the same order as `conns`.
        for i in (0..sweep.len()).rev() {
            if hung_up(sweep[i].revents) {
                let (_, s, _, uid) = self.conns.swap_remove(i);
                let _ = s.shutdown(std::net::Shutdown::Both);
                self.uids.remove(uid);
                reaped += 1;
            }
        }
        reaped
    }
}

/// Open connections per peer uid.
#[derive(Default)]
struct UidCounts {
    map: std::collections::HashMap<u32, usize>,
}

impl UidCounts {
    fn get(&self, uid: u32) -> usize {
        self.map.get(&uid).copied().unwrap_or(0)
    }
    fn add(&mut self, uid: u32) {
        *self.map.entry(uid).or_insert(0) += 1;
    }
    fn remove(&mut self, uid: u32) {
        if let Some(n) = self.map.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.map.remove(&uid);
            }
        }
    }
}

/// The uid of the process at the other end (SO_PEERCRED: the credentials
/// of the connecting process, as of `connect`). `u32::MAX` when the
/// kernel does not say (then all such peers share one count).
fn peer_uid(fd: RawFd) -> u32 {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for getsockopt to write.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        cred.uid
    } else {
        u32::MAX
    }
}

/// Polls `fds` without waiting; false when nothing is ready (or on error).
fn poll_now(fds: &mut [libc::pollfd]) -> bool {
    // SAFETY: `fds` is a valid array of pollfd of that length.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) > 0 }
}

/// POLLHUP on a Unix stream socket: the peer has closed (both directions
/// shut). Nothing it sent can be answered, so the connection can go.
fn hung_up(revents: i16) -> bool {
    revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Whether the client of a just-accepted connection is already gone.
fn peer_gone(fd: RawFd) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    }];
    poll_now(&mut p) && hung_up(p[0].revents)
}

/// Why a connection is refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Full,
    Uid,
}

/// Says why, in one line the client can read (best effort, never
/// blocking), then closes.
fn refuse(
    stream: UnixStream,
    why: Refusal,
    stats: &GateStats,
    log: &mut Throttle,
    max: usize,
    per_uid: usize,
) {
    stats.connections_refused.fetch_add(1, Ordering::Relaxed);
    let line: &[u8] = match why {
        Refusal::Full => {
            log.warn(
                "connection refused",
                &format_args!("{max} connections open"),
            );
            b"ERR too_many_connections\n"
        }
        Refusal::Uid => {
            stats
                .connections_refused_uid
                .fetch_add(1, Ordering::Relaxed);
            log.warn(
                "connection refused",
                &format_args!(
                    "the peer's user has {per_uid} connections open (max_connections_per_uid)"
                ),
            );
            b"ERR too_many_connections_for_uid\n"
        }
    };
    // SAFETY: a valid socket and buffer; MSG_DONTWAIT never blocks,
    // MSG_NOSIGNAL never raises SIGPIPE.
    unsafe {
        libc::send(
            stream.as_raw_fd(),
            line.as_ptr().cast(),
            line.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    drop(stream);
}

/// At most this many connections are accepted per turn of the epoll loop
/// before the connections' own events (hang-ups among them) are handled:
/// closed peers are reaped as fast as new ones arrive.
const ACCEPT_BATCH: usize = 32;

/// At most one warning a second for a repeating condition (accept
/// failures, refused connections), with the count of the ones left out.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    fn warn(&mut self, what: &str, detail: &dyn std::fmt::Display) {
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1));
        if due {
            tracing::warn!(suppressed = self.suppressed, "gate {what}: {detail}");
            self.last = Some(Instant::now());
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
    }
}

/// Pause after an accept failure (out of descriptors, memory) so that a
/// listener that stays readable does not turn the loop hot.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(10);

#[allow(clippy::too_many_arguments)]
fn accept_loop<B: Backend>(
    listener: UnixListener,
    backend: Arc<B>,
    stats: Arc<GateStats>,
    stop: Arc<AtomicBool>,
    wake_fd: Arc<OwnedFd>,
    reg: Arc<Registry>,
    max: usize,
    per_uid: usize,
) {
    let mut sweep: Vec<libc::pollfd> = Vec::new();
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake_fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let (mut throttle, mut refused) = (Throttle::default(), Throttle::default());
    while !stop.load(Ordering::SeqCst) {
        // SAFETY: `fds` is a valid array of two pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "gate accept poll failed");
            return;
        }
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if fds[0].revents == 0 {
            continue;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                throttle.warn("accept failed", &e);
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        // A client that connected and closed again: no thread for it.
        if peer_gone(stream.as_raw_fd()) {
            stats.connections_reaped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let uid = peer_uid(stream.as_raw_fd());
        let mut g = reg.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.closed {
            return;
        }
        // Full, or this user at its cap: first free the slots of clients
        // that have gone (their threads may not have noticed yet), so that
        // only connections really open count.
        if g.conns.len() >= max || g.uids.get(uid) >= per_uid {
            let n = g.reap(&mut sweep);
            stats
                .connections_reaped
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        if g.conns.len() >= max || g.uids.get(uid) >= per_uid {
            let why = if g.conns.len() >= max {
                Refusal::Full
            } else {
                Refusal::Uid
            };
            drop(g);
            refuse(stream, why, &stats, &mut refused, max, per_uid);
            continue;
        }
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        let id = g.next;
        g.next += 1;
        let (backend, stats2, reg2) = (backend.clone(), stats.clone(), reg.clone());
        stats.connections_accepted.fetch_add(1, Ordering::Relaxed);
        stats.connections_open.fetch_add(1, Ordering::Relaxed);
        // Registered before its thread exists: growing the list once the
        // thread answers would allocate while requests are being served
        // (tests/gate_alloc.rs caught that once). The lock is held until
        // the handle is stored, so the thread cannot remove it before.
        g.conns.push((id, clone, None, uid));
        g.uids.add(uid);
        let spawned = std::thread::Builder::new()
            .name("gate-conn".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if let Err(e) = serve_blocking(stream, &*backend, &stats2) {
                    tracing::debug!(error = %e, "gate connection ended with an error");
                }
                stats2.connections_open.fetch_sub(1, Ordering::Relaxed);
                reg2.remove(id);
            });
        match spawned {
            Ok(h) => {
                if let Some(last) = g.conns.last_mut() {
                    last.2 = Some(h);
                }
            }
            Err(e) => {
                g.conns.pop();
                g.uids.remove(uid);
                stats.connections_open.fetch_sub(1, Ordering::Relaxed);
                tracing::error!(error = %e, "could not spawn a gate connection thread");
            }
        }
    }
}

/// Blocking mode: one connection on its own thread.
fn serve_blocking<B: Backend>(
    mut stream: UnixStream,
    backend: &B,
    stats: &GateStats,
) -> io::Result<()> {
    let mut conn = Conn::new();
    let mut service = stats.service.small_recorder();
    loop {
        let n = match stream.read(conn.read_space()) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let t0 = Instant::now();
        conn.filled(n);
        let now = unix_now();
        let mut answered = false;
        loop {
            conn.process(backend, now);
            // Counted before the answers leave, so that a client that has
            // its answer also sees it counted.
            answered |= stats.add(&mut conn.counts);
            while !conn.pending_out().is_empty() {
                let w = stream.write(conn.pending_out())?;
                if w == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                conn.consumed_out(w);
            }
            if !conn.has_work() {
                break;
            }
        }
        if answered {
            stats.record_service(&mut service, t0.elapsed().as_nanos() as u64);
        }
    }
}

const LISTENER: u64 = u64::MAX;
const WAKE: u64 = u64::MAX - 1;

struct EpollConn {
    stream: UnixStream,
    conn: Conn,
    /// The peer's uid (SO_PEERCRED), for the per-uid cap.
    uid: u32,
    /// Registered for EPOLLOUT (output blocked) instead of EPOLLIN.
    want_out: bool,
    /// In the `again` list (at most once).
    queued: bool,
}

fn epoll_ctl(ep: RawFd, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: valid epoll fd and event struct.
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `Epoll` and `BusyPoll` modes: one thread serves every connection.
fn epoll_loop<B: Backend>(
    listener: UnixListener,
    backend: &B,
    stats: &GateStats,
    stop: &AtomicBool,
    wake_fd: &OwnedFd,
    spin: bool,
    (max, per_uid): (usize, usize),
) -> io::Result<()> {
    // SAFETY: plain syscall; the fd is owned from here on.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    let ep_fd = unsafe { OwnedFd::from_raw_fd(ep) };
    let in_ev = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
    epoll_ctl(
        ep,
        libc::EPOLL_CTL_ADD,
        listener.as_raw_fd(),
        libc::EPOLLIN as u32,
        LISTENER,
    )?;
    epoll_ctl(
        ep,
        libc::EPOLL_CTL_ADD,
        wake_fd.as_raw_fd(),
        libc::EPOLLIN as u32,
        WAKE,
    )?;
    let mut conns: Vec<Option<EpollConn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut open = 0usize;
    let mut uids = UidCounts::default();
    let mut sweep: (Vec<libc::pollfd>, Vec<usize>) = (Vec::new(), Vec::new());
    // Connections with complete lines left in their buffer (served in
    // turns so that one pipelining client cannot starve the others).
    let mut again: Vec<usize> = Vec::new();
    let mut service = stats.service.small_recorder();
    let mut again_now: Vec<usize> = Vec::new();
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    let (mut throttle, mut refused) = (Throttle::default(), Throttle::default());
    let mut resume_accept: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let timeout = if spin || !again.is_empty() {
            0
        } else if let Some(t) = resume_accept {
            t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1
        } else {
            -1
        };
        // SAFETY: `events` is a valid buffer of 64 entries.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 64, timeout) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if let Some(t) = resume_accept {
            if Instant::now() >= t {
                let fd = listener.as_raw_fd();
                epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32, LISTENER)?;
                resume_accept = None;
            }
        }
        if n == 0 && spin && again.is_empty() {
            // Idle spin: give the core away for a moment if anything else
            // is runnable on it (a client woken on this core would
            // otherwise wait for our whole time slice); returns at once
            // when nothing is.
            std::thread::yield_now();
            continue;
        }
        std::mem::swap(&mut again, &mut again_now);
        let mut listener_ready = false;
        for ev in &events[..n as usize] {
            let token = ev.u64;
            if token == WAKE {
                continue;
            }
            if token == LISTENER {
                // After the connections' events of this turn: hang-ups
                // free their slots before new connections take any.
                listener_ready = true;
                continue;
            }
            let idx = token as usize;
            service_epoll(
                ep,
                &mut conns,
                &mut free,
                &mut open,
                &mut uids,
                idx,
                backend,
                stats,
                &mut service,
                &mut again,
            );
        }
        // A bounded batch: the listener stays readable (level-triggered),
        // the rest is accepted next turn, after the hang-ups of this one.
        for _ in 0..if listener_ready { ACCEPT_BATCH } else { 0 } {
            match listener.accept() {
                Ok((s, _)) => {
                    // A client that connected and closed again: gone
                    // before it took a slot.
                    if peer_gone(s.as_raw_fd()) {
                        stats.connections_reaped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let uid = peer_uid(s.as_raw_fd());
                    if open >= max || uids.get(uid) >= per_uid {
                        let n = reap_epoll(
                            ep, &mut conns, &mut free, &mut open, &mut uids, stats, &mut sweep,
                        );
                        stats
                            .connections_reaped
                            .fetch_add(n as u64, Ordering::Relaxed);
                    }
                    if open >= max || uids.get(uid) >= per_uid {
                        let why = if open >= max {
                            Refusal::Full
                        } else {
                            Refusal::Uid
                        };
                        refuse(s, why, stats, &mut refused, max, per_uid);
                        continue;
                    }
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let idx = free.pop().unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    if epoll_ctl(ep, libc::EPOLL_CTL_ADD, s.as_raw_fd(), in_ev, idx as u64).is_err()
                    {
                        free.push(idx);
                        continue;
                    }
                    conns[idx] = Some(EpollConn {
                        stream: s,
                        conn: Conn::new(),
                        uid,
                        want_out: false,
                        queued: false,
                    });
                    open += 1;
                    uids.add(uid);
                    stats.connections_accepted.fetch_add(1, Ordering::Relaxed);
                    stats.connections_open.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    throttle.warn("accept failed", &e);
                    // Stop listening for a moment (the listener
                    // stays readable while descriptors are short).
                    let fd = listener.as_raw_fd();
                    if epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, 0, LISTENER).is_ok() {
                        resume_accept = Some(Instant::now() + ACCEPT_BACKOFF);
                    }
                    break;
                }
            }
        }
        for idx in again_now.drain(..) {
            if let Some(Some(c)) = conns.get_mut(idx) {
                c.queued = false;
            }
            service_epoll(
                ep,
                &mut conns,
                &mut free,
                &mut open,
                &mut uids,
                idx,
                backend,
                stats,
                &mut service,
                &mut again,
            );
        }
    }
    for c in conns.iter().flatten() {
        let _ = c.stream.shutdown(std::net::Shutdown::Both);
        stats.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
    drop(ep_fd);
    Ok(())
}

enum Step {
    Open,
    Close,
}

#[allow(clippy::too_many_arguments)]
fn service_epoll<B: Backend>(
    ep: RawFd,
    conns: &mut [Option<EpollConn>],
    free: &mut Vec<usize>,
    open: &mut usize,
    uids: &mut UidCounts,
    idx: usize,
    backend: &B,
    stats: &GateStats,
    service: &mut SmallRecorder,
    again: &mut Vec<usize>,
) {
    let Some(Some(c)) = conns.get_mut(idx) else {
        return;
    };
    let step = drive(ep, c, idx, backend, stats, service, again);
    if let Step::Close = step {
        close_epoll(ep, conns, free, open, uids, stats, idx);
    }
}

fn close_epoll(
    ep: RawFd,
    conns: &mut [Option<EpollConn>],
    free: &mut Vec<usize>,
    open: &mut usize,
    uids: &mut UidCounts,
    stats: &GateStats,
    idx: usize,
) {
    let Some(c) = conns[idx].take() else {
        return;
    };
    // SAFETY: deregistering an fd we registered; closing follows.
    unsafe {
        libc::epoll_ctl(
            ep,
            libc::EPOLL_CTL_DEL,
            c.stream.as_raw_fd(),
            std::ptr::null_mut(),
        )
    };
    uids.remove(c.uid);
    drop(c);
    free.push(idx);
    *open -= 1;
    stats.connections_open.fetch_sub(1, Ordering::Relaxed);
}

/// Closes every connection whose client has hung up (before its event
/// comes round): at the cap, only connections really open count.
/// Returns how many.
fn reap_epoll(
    ep: RawFd,
    conns: &mut [Option<EpollConn>],
    free: &mut Vec<usize>,
    open: &mut usize,
    uids: &mut UidCounts,
    stats: &GateStats,
    (fds, idxs): &mut (Vec<libc::pollfd>, Vec<usize>),
) -> usize {
    fds.clear();
    idxs.clear();
    for (i, c) in conns.iter().enumerate() {
        if let Some(c) = c {
            fds.push(libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            });
            idxs.push(i);
        }
    }
    if !poll_now(fds) {
        return 0;
    }
    let mut reaped = 0;
    for (p, &i) in fds.iter().zip(idxs.iter()) {
        if hung_up(p.revents) {
            close_epoll(ep, conns, free, open, uids, stats, i);
            reaped += 1;
        }
    }
    reaped
}

/// Serves one ready connection without blocking: flush, read, answer,
/// flush; at most a few reads per turn.
fn drive<B: Backend>(
    ep: RawFd,
    c: &mut EpollConn,
    idx: usize,
    backend: &B,
    stats: &GateStats,
    service: &mut SmallRecorder,
    again: &mut Vec<usize>,
) -> Step {
    let t0 = Instant::now();
    let mut now = None;
    let mut answered = false;
    // The last read returned less than it had room for: the socket is
    // empty, and level-triggered epoll reports it again when it is not, so
    // the read that would only say EAGAIN is skipped (one syscall less per
    // request).
    let mut drained = false;
    for _ in 0..8 {
        // Flush what is pending first.
        while !c.conn.pending_out().is_empty() {
            match (&c.stream).write(c.conn.pending_out()) {
                Ok(0) => return Step::Close,
                Ok(w) => c.conn.consumed_out(w),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !c.want_out {
                        let fd = c.stream.as_raw_fd();
                        let ev = (libc::EPOLLOUT | libc::EPOLLRDHUP) as u32;
                        if epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, ev, idx as u64).is_err() {
                            return Step::Close;
                        }
                        c.want_out = true;
                    }
                    finish_batch(stats, service, t0, answered);
                    return Step::Open;
                }
                Err(_) => return Step::Close,
            }
        }
        if c.want_out {
            let fd = c.stream.as_raw_fd();
            let ev = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            if epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, ev, idx as u64).is_err() {
                return Step::Close;
            }
            c.want_out = false;
        }
        if c.conn.has_work() {
            let now = *now.get_or_insert_with(unix_now);
            c.conn.process(backend, now);
            answered |= stats.add(&mut c.conn.counts);
            continue;
        }
        if drained {
            finish_batch(stats, service, t0, answered);
            return Step::Open;
        }
        let space = c.conn.read_space();
        let room = space.len();
        match (&c.stream).read(space) {
            Ok(0) => {
                finish_batch(stats, service, t0, answered);
                return Step::Close;
            }
            Ok(n) => {
                drained = n < room;
                c.conn.filled(n);
                let t = *now.get_or_insert_with(unix_now);
                c.conn.process(backend, t);
                answered |= stats.add(&mut c.conn.counts);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                finish_batch(stats, service, t0, answered);
                return Step::Open;
            }
            Err(_) => return Step::Close,
        }
    }
    // Turn used up with work left: come back after the others.
    finish_batch(stats, service, t0, answered);
    if !c.queued {
        c.queued = true;
        again.push(idx);
    }
    Step::Open
}

fn finish_batch(stats: &GateStats, service: &mut SmallRecorder, t0: Instant, answered: bool) {
    if answered {
        stats.record_service(service, t0.elapsed().as_nanos() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Echoes the request as `ECHO <line>`, `PONG` for PING, lists one feed
    /// of three symbols.
    struct Fake;

    impl Backend for Fake {
        fn answer(&self, line: &[u8], _now: i64, out: &mut Vec<u8>) {
            if line == b"PING" {
                out.extend_from_slice(b"PONG\n");
            } else {
                out.extend_from_slice(b"ECHO ");
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
        fn status_feeds(&self) -> usize {
            1
        }
        fn status_feed(&self, _: usize, _: i64, out: &mut Vec<u8>) -> u32 {
            out.extend_from_slice(b"FEED f\n");
            3
        }
        fn status_symbol(&self, _: usize, slot: u32, _: i64, out: &mut Vec<u8>) {
            out.extend_from_slice(format!("SYMBOL {slot}\n").as_bytes());
        }
    }

    fn feed(conn: &mut Conn, bytes: &[u8]) -> String {
        let mut rest = bytes;
        let mut all = Vec::new();
        while !rest.is_empty() || conn.has_work() {
            let space = conn.read_space();
            let n = space.len().min(rest.len());
            space[..n].copy_from_slice(&rest[..n]);
            conn.filled(n);
            rest = &rest[n..];
            conn.process(&Fake, 0);
            all.extend_from_slice(conn.pending_out());
            let k = conn.pending_out().len();
            conn.consumed_out(k);
        }
        String::from_utf8(all).unwrap()
    }

    #[test]
    fn lines_crlf_and_partial_input() {
        let mut c = Conn::new();
        assert_eq!(feed(&mut c, b"PING\r\nA B\nPAR"), "PONG\nECHO A B\n");
        assert_eq!(feed(&mut c, b"TIAL\n"), "ECHO PARTIAL\n");
        assert_eq!(feed(&mut c, b"\n"), "ECHO \n");
    }

    #[test]
    fn over_long_lines_are_answered_once_and_skipped() {
        let mut c = Conn::new();
        let ok = "X".repeat(MAX_LINE);
        assert_eq!(
            feed(&mut c, format!("{ok}\r\n").as_bytes()),
            format!("ECHO {ok}\n")
        );
        let long = "Y".repeat(MAX_LINE + 1);
        assert_eq!(
            feed(&mut c, format!("{long}\nPING\n").as_bytes()),
            "ERR line too long\nPONG\n"
        );
        // Arriving in small pieces, much longer than the buffer.
        let mut out = String::new();
        for _ in 0..100 {
            out += &feed(&mut c, &[b'Z'; 1000]);
        }
        out += &feed(&mut c, b"\r\nPING\n");
        assert_eq!(out, "ERR line too long\nPONG\n");
    }

    #[test]
    fn status_streams_then_resumes_pipelined_lines() {
        let mut c = Conn::new();
        assert_eq!(
            feed(&mut c, b"STATUS\nPING\n"),
            "FEED f\nSYMBOL 0\nSYMBOL 1\nSYMBOL 2\nEND\nPONG\n"
        );
    }

    #[test]
    fn output_stops_at_high_water_and_resumes() {
        struct Big;
        impl Backend for Big {
            fn answer(&self, _: &[u8], _: i64, out: &mut Vec<u8>) {
                out.extend_from_slice(b"PONG\n");
            }
            fn status_feeds(&self) -> usize {
                1
            }
            fn status_feed(&self, _: usize, _: i64, out: &mut Vec<u8>) -> u32 {
                out.extend_from_slice(b"FEED big\n");
                100_000
            }
            fn status_symbol(&self, _: usize, slot: u32, _: i64, out: &mut Vec<u8>) {
                out.extend_from_slice(format!("SYMBOL {slot:09}\n").as_bytes());
            }
        }
        let mut c = Conn::new();
        let req = b"STATUS\nPING\n";
        c.read_space()[..req.len()].copy_from_slice(req);
        c.filled(req.len());
        let mut lines = 0usize;
        let mut rounds = 0;
        let mut last = Vec::new();
        while c.has_work() {
            c.process(&Big, 0);
            let out = c.pending_out();
            // Bounded: the high-water mark plus one line.
            assert!(out.len() < OUT_HIGH + 64, "{}", out.len());
            lines += out.iter().filter(|&&b| b == b'\n').count();
            last = out.to_vec();
            let n = out.len();
            c.consumed_out(n);
            rounds += 1;
        }
        assert!(rounds > 10);
        // FEED, 100k symbols, END, then the pipelined PING in order.
        assert_eq!(lines, 1 + 100_000 + 1 + 1);
        assert!(last.ends_with(b"SYMBOL 000099999\nEND\nPONG\n"));
    }

    #[test]
    fn classify_counts_reasons() {
        let mut b = BatchCounts::default();
        b.classify(b"OK EURUSD seq=1 bid=1@1 ask=2@2 silence_us=0 source_age_us=0\n");
        b.classify(b"REJECT EURUSD stale_quote,suspect seq=1 bid=- ask=- silence_us=1 source_age_us=1 suspect=gap\n");
        b.classify(b"REJECT X unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-\n");
        b.classify(b"REJECT MILL halted seq=1 bid=- ask=- silence_us=1 source_age_us=1\n");
        b.classify(b"REJECT AAPL crossed seq=- bid=2@1 ask=1@1 silence_us=1 source_age_us=1 feeds=a:OK,b:OK\n");
        b.classify(b"ERR bad request\n");
        b.classify(b"PONG\n");
        assert_eq!((b.ok, b.reject, b.err, b.pong), (1, 4, 1, 1));
        assert_eq!(b.reasons, [1, 0, 1, 0, 1, 1, 1]);
    }

    #[test]
    fn service_time_goes_to_the_shared_histogram() {
        let s = GateStats::default();
        let mut rec = s.service.small_recorder();
        s.record_service(&mut rec, 100);
        s.record_service(&mut rec, 300);
        s.record_service(&mut rec, u64::MAX);
        drop(rec);
        let snap = s.service.snapshot(&[2e-7, 1e-6]);
        assert_eq!(snap.cumulative, vec![1, 2]);
        assert_eq!(snap.count, 3);
        assert_eq!(s.batches.load(Ordering::Relaxed), 3);
    }

    /// The server's framing answers exactly as `protocol::LineFramer` +
    /// `answer_frame` would, however the bytes are split into reads.
    mod framing_equivalence {
        use super::super::*;
        use crate::feed::check::SymbolLookup;
        use crate::gate::protocol::{answer, answer_frame, LineFramer};
        use proptest::prelude::*;

        struct NoFeeds;

        impl Backend for NoFeeds {
            fn answer(&self, line: &[u8], now: i64, out: &mut Vec<u8>) {
                answer(line, &[], now, out)
            }
        }

        fn piece() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                Just(b"PING".to_vec()),
                Just(b"CHECK EURUSD".to_vec()),
                Just(b"CHECK A stale_ms=1".to_vec()),
                Just(b"\r".to_vec()),
                Just(b"\n".to_vec()),
                Just(b"\r\n".to_vec()),
                Just(b" ".to_vec()),
                (1usize..1100).prop_map(|n| vec![b'X'; n]),
                // Around the limit: 1024 bytes is a request, 1025 is not.
                (1020usize..1030).prop_map(|n| vec![b'Y'; n]),
            ]
        }

        proptest! {
            #[test]
            fn same_answers_as_line_framer(
                pieces in proptest::collection::vec(piece(), 0..40),
                // Byte-at-a-time reads hit every boundary.
                cuts in prop_oneof![
                    Just(vec![1usize]),
                    proptest::collection::vec(1usize..3000, 1..20),
                ],
            ) {
                let input: Vec<u8> = pieces.concat();
                let mut want = Vec::new();
                let mut framer = LineFramer::new();
                let feeds: [&dyn SymbolLookup; 0] = [];
                framer.push(&input, |f| answer_frame(f, &feeds, 0, &mut want));

                let mut conn = Conn::new();
                let mut got = Vec::new();
                let mut rest = &input[..];
                let mut k = 0;
                while !rest.is_empty() || conn.has_work() {
                    let space = conn.read_space();
                    let n = space.len().min(rest.len()).min(cuts[k % cuts.len()]);
                    k += 1;
                    space[..n].copy_from_slice(&rest[..n]);
                    conn.filled(n);
                    rest = &rest[n..];
                    conn.process(&NoFeeds, 0);
                    got.extend_from_slice(conn.pending_out());
                    let m = conn.pending_out().len();
                    conn.consumed_out(m);
                }
                prop_assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap());
            }
        }
    }
}
