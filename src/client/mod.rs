//! The check without a round trip: read the daemon's state file
//! (docs/shm.md) through a read-only mapping and judge a symbol in this
//! process, with the verdict code and the answer formatting of the socket
//! (`feed::verdict::judge` through `feed::check::verdict_for`, and
//! `feed::check::write_verdict`). No tokio, no allocation per check.
//!
//! ```no_run
//! let mut gate = tickgate::client::Client::open_default()?;
//! let v = gate.check_now(b"EURUSD", None, None)?;
//! if v.ok() { /* send the order */ }
//! # Ok::<(), tickgate::client::Error>(())
//! ```
//!
//! A `Client` is used by one thread at a time (`&mut self`; open one per
//! thread, they share the kernel's pages). It follows the daemon: when the
//! file's `state` word changes (the daemon stopped, or a newer one
//! replaced the file), and at least once a second of `now` otherwise, it
//! looks at the path again and remaps a new file on the next check. A file
//! it cannot validate is never mapped in; until a good one appears the old
//! mapping stays, so that quotes age into `stale_quote`.

pub mod map;

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::cell::Cell;

use crate::feed::across::{check_across_then, Answer, CheckError, Checked, Feeds, Options};
use crate::feed::check::{parse_check, to_symbol, write_answer, write_error, Parsed, ProtoError};
use crate::feed::reader::{feed_reader_in, FeedReader, Found, ReadError};
use crate::feed::shm::{self, Header, LayoutError, STATE_LIVE};
use crate::feed::table::{WordStore, Words};
use crate::feed::verdict::Verdict;
use crate::wire::Symbol;
use map::Mapping;

/// Default path of the state file (`[gate] shm`).
pub const DEFAULT_PATH: &str = "/run/tickgate/state.shm";
/// Environment variable overriding the default path.
pub const PATH_ENV: &str = "TICKGATE_SHM";
/// Seqlock attempts per read before `Busy` (a writer descheduled
/// mid-write is waited for; one that never finishes is not).
pub const DEFAULT_TRIES: u32 = 1 << 20;
/// A live file's path is looked at again this often (ns of `now`).
const LOOK_EVERY_NS: i64 = 1_000_000_000;

/// `path`, else `$TICKGATE_SHM`, else the default.
pub fn shm_path(arg: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    match std::env::var_os(PATH_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_PATH),
    }
}

/// The wall clock (CLOCK_REALTIME, the clock of the daemon's receive
/// timestamps) in Unix ns: the default `now`.
#[inline]
pub fn realtime_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open the state file {path} (is tickgate running with [gate] shm?): {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The path is not a regular file (or is a symbolic link): it is not
    /// opened further.
    #[error(
        "refusing the state file {path}: it is {what}, not a regular file the daemon published"
    )]
    Refused { path: PathBuf, what: String },
    #[error("state file {path}: {source}")]
    Layout { path: PathBuf, source: LayoutError },
    /// The request is refused as the socket would refuse it (`ERR`).
    #[error("{0}")]
    Proto(ProtoError),
    /// The mapped memory is not what tickgate writes (treat as REJECT).
    #[error("state file {path}: {source}")]
    Read { path: PathBuf, source: ReadError },
}

/// Counters of one client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub checks: u64,
    /// Seqlock retries (a read raced the writer and was taken again).
    pub retries: u64,
    /// New files mapped after the first.
    pub remaps: u64,
}

/// Opens `path` read-only without blocking and without following a
/// symbolic link at its last component, and requires a regular file: a
/// FIFO or a device at the path must give an error, not a hang (opening a
/// FIFO for reading waits for a writer) or a mapping of something
/// tickgate did not write.
fn open_regular(path: &Path) -> Result<File, Error> {
    let refused = |what: &str| Error::Refused {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(refused("a symbolic link")),
        Err(source) => {
            return Err(Error::Open {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let kind = file
        .metadata()
        .map_err(|source| Error::Open {
            path: path.to_path_buf(),
            source,
        })?
        .file_type();
    if kind.is_file() {
        return Ok(file);
    }
    use std::os::unix::fs::FileTypeExt;
    Err(refused(if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "some other kind of file"
    }))
}

/// One mapped, validated file.
struct Mapped {
    mapping: Arc<Mapping>,
    header: Header,
    feeds: Vec<FeedReader>,
    id: (u64, u64),
}

impl Mapped {
    fn open(path: &Path) -> Result<Mapped, Error> {
        let open_err = |source| Error::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = open_regular(path)?;
        let meta = file.metadata().map_err(open_err)?;
        let mapping = Arc::new(Mapping::read_only(&file).map_err(open_err)?);
        let header = shm::parse_header(mapping.words()).map_err(|source| Error::Layout {
            path: path.to_path_buf(),
            source,
        })?;
        let all = Words::shared(mapping.clone());
        let mut feeds = Vec::with_capacity(header.feeds.len());
        for (spec, place) in header.feeds.iter().zip(&header.plan.feeds) {
            // parse_header checked every offset against the plan, and the
            // plan against the file size: these ranges exist.
            let region = |at: usize, len: usize| {
                all.range(at, len).ok_or(Error::Layout {
                    path: path.to_path_buf(),
                    source: LayoutError::TooShort {
                        bytes: all.len() * 8,
                    },
                })
            };
            let cell = region(place.cell_at, place.table_at - place.cell_at)?;
            let table = region(place.table_at, place.table.words)?;
            let units = region(place.units_at, place.units.words)?;
            let reader = feed_reader_in(spec.capacity, &cell, &table, place.units.units, &units)
                .map_err(|_| Error::Layout {
                    path: path.to_path_buf(),
                    source: LayoutError::TooShort {
                        bytes: all.len() * 8,
                    },
                })?;
            feeds.push(reader);
        }
        Ok(Mapped {
            mapping,
            header,
            feeds,
            id: (meta.dev(), meta.ino()),
        })
    }

    #[inline]
    fn state(&self) -> u64 {
        shm::state(self.mapping.words())
    }
}

/// A reader of the daemon's state file.
pub struct Client {
    path: PathBuf,
    tries: u32,
    map: Mapped,
    seen_state: u64,
    last_look_ns: i64,
    next_look_ns: i64,
    stats: Stats,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("path", &self.path)
            .field("generation", &self.generation())
            .field("stats", &self.stats)
            .finish()
    }
}

/// The state of the file a client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    Live,
    Stopped,
    Retired,
    Unknown(u64),
}

impl FileState {
    pub fn as_str(self) -> &'static str {
        match self {
            FileState::Live => "live",
            FileState::Stopped => "stopped",
            FileState::Retired => "retired",
            FileState::Unknown(_) => "unknown",
        }
    }
}

impl Client {
    /// Maps and validates the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Client, Error> {
        let path = path.as_ref().to_path_buf();
        let map = Mapped::open(&path)?;
        let seen_state = map.state();
        Ok(Client {
            path,
            tries: DEFAULT_TRIES,
            map,
            seen_state,
            last_look_ns: i64::MIN,
            next_look_ns: i64::MIN,
            stats: Stats::default(),
        })
    }

    /// `open` at `$TICKGATE_SHM`, else the default path.
    pub fn open_default() -> Result<Client, Error> {
        Client::open(shm_path(None))
    }

    /// Seqlock attempts per read before `Error::Read` (`Busy`).
    pub fn set_tries(&mut self, tries: u32) {
        self.tries = tries.max(1);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The generation of the file mapped now (changes on every daemon
    /// start).
    pub fn generation(&self) -> u64 {
        self.map.header.generation
    }

    /// The header of the file mapped now.
    pub fn header(&self) -> &Header {
        &self.map.header
    }

    pub fn state(&self) -> FileState {
        match self.map.state() {
            shm::STATE_LIVE => FileState::Live,
            shm::STATE_STOPPED => FileState::Stopped,
            shm::STATE_RETIRED => FileState::Retired,
            s => FileState::Unknown(s),
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Follows the daemon: cheap (one load) unless the state word changed
    /// or a second of `now` passed since the last look.
    #[inline]
    fn follow(&mut self, now: i64) {
        let st = self.map.state();
        if st == self.seen_state && now >= self.last_look_ns && now < self.next_look_ns {
            return;
        }
        self.look(now, st);
    }

    #[cold]
    #[inline(never)]
    fn look(&mut self, now: i64, st: u64) {
        self.seen_state = st;
        self.last_look_ns = now;
        self.next_look_ns = now.saturating_add(LOOK_EVERY_NS);
        let same_file = std::fs::symlink_metadata(&self.path)
            .map(|m| (m.dev(), m.ino()) == self.map.id)
            .unwrap_or(false);
        if same_file && st == STATE_LIVE {
            return;
        }
        // Replaced, removed, stopped or retired: a good new file, if any,
        // is mapped; otherwise the current one stays (quotes age).
        if let Ok(m) = Mapped::open(&self.path) {
            if m.id != self.map.id || m.header.generation != self.map.header.generation {
                self.seen_state = m.state();
                self.map = m;
                self.stats.remaps += 1;
            }
        }
    }

    /// `check(symbol, now)` with the request's thresholds (which may only
    /// tighten the configured ones): the verdict the socket would give for
    /// `CHECK <symbol> [stale_ms=..] [source_ms=..]` at `now` (Unix ns).
    /// `symbol` is the token as asked (printable ASCII; longer than 20
    /// bytes is `unknown_symbol`). With several feeds knowing the symbol
    /// it is the combined verdict (gate.md "One symbol on several feeds";
    /// `check_answer` has each feed's too).
    #[inline]
    pub fn check(
        &mut self,
        symbol: &[u8],
        now: i64,
        stale_ms: Option<u64>,
        source_ms: Option<u64>,
    ) -> Result<Verdict, Error> {
        let opts = Options {
            stale_ms,
            source_ms,
            feed: None,
        };
        self.check_then(symbol, now, &opts, |c| match c {
            Checked::One(v) => *v,
            Checked::Several(a) => a.verdict,
        })
    }

    /// The answer to `CHECK <symbol>` with `opts` at `now`: the verdict and,
    /// when several feeds know the symbol, each one's (`feeds=`). Format it
    /// with `write_answer`.
    #[inline]
    pub fn check_answer(
        &mut self,
        symbol: &[u8],
        now: i64,
        opts: &Options,
    ) -> Result<Answer, Error> {
        let mut a = Answer::default();
        self.check_answer_into(symbol, now, opts, &mut a)?;
        Ok(a)
    }

    /// `check_answer`, written into `out`.
    #[inline]
    pub fn check_answer_into(
        &mut self,
        symbol: &[u8],
        now: i64,
        opts: &Options,
        out: &mut Answer,
    ) -> Result<(), Error> {
        self.check_then(symbol, now, opts, |checked| out.set(checked))
    }

    /// The check, handed to `then` where it is made (`check_across_then`):
    /// a symbol on one feed builds no combined answer.
    #[inline]
    fn check_then<R>(
        &mut self,
        symbol: &[u8],
        now: i64,
        opts: &Options,
        then: impl FnOnce(Checked<'_>) -> R,
    ) -> Result<R, Error> {
        self.follow(now);
        self.stats.checks += 1;
        if symbol.is_empty() || !symbol.iter().all(u8::is_ascii_graphic) {
            return Err(Error::Proto(ProtoError::InvalidSymbol));
        }
        if opts.feed.is_some_and(|i| i >= self.map.feeds.len()) {
            return Err(Error::Proto(ProtoError::UnknownFeed));
        }
        let feeds = MappedFeeds::new(&self.map, self.tries);
        let rules = &self.map.header.rules;
        let got = check_across_then(&feeds, to_symbol(symbol), opts, rules, now, then);
        self.stats.retries += feeds.retries.get();
        got.map_err(|e| match e {
            CheckError::Proto(e) => Error::Proto(e),
            CheckError::Read(source) => Error::Read {
                path: self.path.clone(),
                source,
            },
        })
    }

    /// The index of the feed named `name` in the file mapped now (as
    /// `feed=<name>` names it).
    pub fn feed_index(&self, name: &[u8]) -> Option<usize> {
        self.map
            .header
            .feeds
            .iter()
            .position(|f| f.name.as_bytes() == name)
    }

    /// Writes `a` (an answer of `check_answer` for `symbol`) as the
    /// socket's line, feed names from the file mapped now.
    pub fn write_answer(&self, out: &mut Vec<u8>, symbol: &[u8], a: &Answer) {
        let names = &self.map.header.feeds;
        write_answer(out, symbol, a, |i| {
            names.get(i).map_or(&b"?"[..], |f| f.name.as_bytes())
        });
    }

    /// `check` at the wall clock.
    #[inline]
    pub fn check_now(
        &mut self,
        symbol: &[u8],
        stale_ms: Option<u64>,
        source_ms: Option<u64>,
    ) -> Result<Verdict, Error> {
        self.check(symbol, realtime_ns(), stale_ms, source_ms)
    }

    /// Answers a request line (without `\r\n`) as the socket would,
    /// byte for byte, appending one `\n`-terminated line to `out`. Only a
    /// file that cannot be read (`Error::Read`) is an error.
    pub fn answer(&mut self, line: &[u8], now: i64, out: &mut Vec<u8>) -> Result<(), Error> {
        let parsed = parse_check(line, |name| self.feed_index(name));
        match parsed {
            Err(e) => write_error(out, e),
            Ok(Parsed::Ping) => out.extend_from_slice(b"PONG\n"),
            Ok(Parsed::Check { symbol, opts }) => {
                let mut a = Answer::default();
                match self.check_answer_into(symbol, now, &opts, &mut a) {
                    Ok(()) => self.write_answer(out, symbol, &a),
                    Err(Error::Proto(e)) => write_error(out, e),
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// The mapped feeds as the check looks over them, counting seqlock
/// retries.
struct MappedFeeds<'a> {
    map: &'a Mapped,
    tries: u32,
    retries: Cell<u64>,
}

impl<'a> MappedFeeds<'a> {
    #[inline]
    fn new(map: &'a Mapped, tries: u32) -> MappedFeeds<'a> {
        MappedFeeds {
            map,
            tries,
            retries: Cell::new(0),
        }
    }
}

impl Feeds for MappedFeeds<'_> {
    type Error = ReadError;
    #[inline]
    fn count(&self) -> usize {
        self.map.feeds.len()
    }
    #[inline]
    fn name(&self, i: usize) -> &[u8] {
        self.map.header.feeds[i].name.as_bytes()
    }
    /// Always inlined: the check's one hot lookup is this (as the lone
    /// feed's was before several feeds), not a call.
    #[inline(always)]
    fn find(&self, i: usize, symbol: Symbol) -> Result<Option<Found>, ReadError> {
        let mut retries = 0;
        let found = self.map.feeds[i].lookup_within(symbol, self.tries, &mut retries);
        self.retries.set(self.retries.get() + retries);
        found
    }
}

/// What `tickgate status` says about the file at `path`.
pub fn describe(path: &Path) -> String {
    match Client::open(path) {
        Ok(c) => {
            let h = c.header();
            format!(
                "shared memory {}: {}, generation {}, pid {}, feeds {}",
                path.display(),
                c.state().as_str(),
                h.generation,
                h.pid,
                h.feeds
                    .iter()
                    .map(|f| format!("{} ({} slots)", f.name, f.capacity))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        Err(e) => format!("shared memory: not published ({e})"),
    }
}
