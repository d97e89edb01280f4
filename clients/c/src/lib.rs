//! `libtickgate`: the C ABI of `tickgate::client` (include/tickgate.h,
//! which a test keeps in step with this file). Every function is a thin
//! wrapper: the mapping, validation, verdict and answer text are the Rust
//! client's. The `unsafe` here is only the C ABI's own: dereferencing the
//! caller's pointers, each checked for null first.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use arrayvec::ArrayVec;

use tickgate_core::client::{realtime_ns, Client, Error};
use tickgate_core::feed::across::{Answer, FeedItem, Options};
use tickgate_core::feed::check::{write_verdict, ProtoError};
use tickgate_core::feed::verdict::Verdict;
use tickgate_core::feed::SuspectCause;
use tickgate_core::wire::Side;

/// An open client (opaque to C).
pub struct tickgate_client {
    client: Client,
}

/// The answer of one check (see tickgate.h for each field).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tickgate_answer {
    pub verdict: i32,
    pub reasons: u32,
    pub cause: u32,
    pub has_quote: u32,
    pub seq: u64,
    pub price_scale: u32,
    pub sides: u32,
    pub bid_px: i64,
    pub bid_qty: u64,
    pub ask_px: i64,
    pub ask_qty: u64,
    pub silence_ns: i64,
    pub source_age_ns: i64,
    pub feed_count: u32,
    pub feed_index: [u8; 64],
    pub feed_reasons: [u8; 64],
}

impl Default for tickgate_answer {
    fn default() -> Self {
        tickgate_answer {
            verdict: 0,
            reasons: 0,
            cause: 0,
            has_quote: 0,
            seq: 0,
            price_scale: 0,
            sides: 0,
            bid_px: 0,
            bid_qty: 0,
            ask_px: 0,
            ask_qty: 0,
            silence_ns: 0,
            source_age_ns: 0,
            feed_count: 0,
            feed_index: [0; 64],
            feed_reasons: [0; 64],
        }
    }
}

pub const TICKGATE_OK: i32 = 0;
pub const TICKGATE_REJECT: i32 = 1;
pub const TICKGATE_SIDE_BID: u32 = 1;
pub const TICKGATE_SIDE_ASK: u32 = 2;
/// Prices are fixed-point: `px / 10^TICKGATE_PRICE_SCALE`.
pub const TICKGATE_PRICE_SCALE: u32 = 9;

pub const TICKGATE_E_ARG: c_int = -1;
pub const TICKGATE_E_SYMBOL: c_int = -2;
pub const TICKGATE_E_LOOSER: c_int = -3;
pub const TICKGATE_E_READ: c_int = -4;
pub const TICKGATE_E_PANIC: c_int = -5;
pub const TICKGATE_E_CLOCK: c_int = -6;
pub const TICKGATE_E_FEED: c_int = -7;
/// Most feeds an answer names (`feeds=`).
pub const TICKGATE_MAX_FEEDS: u32 = 64;
// The header's literal must be the core's limit (the state file's too).
const _: () = assert!(TICKGATE_MAX_FEEDS as usize == tickgate_core::feed::across::MAX_FEEDS);

/// The earliest `now_ns` taken as wall-clock time (2001-09-09T01:46:40Z):
/// a CLOCK_MONOTONIC or CLOCK_BOOTTIME reading, or Unix time in µs or ms,
/// is below it for decades of uptime, and judging with such a `now` would
/// make every age meaningless.
const MIN_REALTIME_NS: i64 = 1_000_000_000_000_000_000;

fn to_c(a: &Answer) -> tickgate_answer {
    let v = &a.verdict;
    let side = |s: Option<Side>| s.map_or((0, 0), |s| (s.px, s.qty));
    let (bid_px, bid_qty) = side(v.bid);
    let (ask_px, ask_qty) = side(v.ask);
    let mut out = tickgate_answer {
        verdict: if v.ok() { TICKGATE_OK } else { TICKGATE_REJECT },
        reasons: v.reasons as u32,
        cause: v.cause as u32,
        has_quote: v.has_quote as u32,
        seq: if a.across() { 0 } else { v.seq },
        price_scale: TICKGATE_PRICE_SCALE,
        sides: (v.bid.is_some() as u32 * TICKGATE_SIDE_BID)
            | (v.ask.is_some() as u32 * TICKGATE_SIDE_ASK),
        bid_px,
        bid_qty,
        ask_px,
        ask_qty,
        silence_ns: v.silence_ns,
        source_age_ns: v.source_age_ns,
        ..tickgate_answer::default()
    };
    out.feed_count = a.feeds.len() as u32;
    for (k, item) in a.feeds.iter().enumerate() {
        out.feed_index[k] = item.feed;
        out.feed_reasons[k] = item.reasons;
    }
    out
}

/// The answer a C struct holds, or `None` when it is not one a check
/// gives (a cause or reasons no check writes, too many feeds).
fn from_c(a: &tickgate_answer) -> Option<Answer> {
    if u8::try_from(a.cause).map_or(true, |c| !SuspectCause::is_code(c))
        || a.reasons > 0x7f
        || a.feed_count > TICKGATE_MAX_FEEDS
    {
        return None;
    }
    let side = |bit: u32, px: i64, qty: u64| (a.sides & bit != 0).then_some(Side { px, qty });
    let verdict = Verdict {
        reasons: a.reasons as u8,
        cause: SuspectCause::from_u8(a.cause as u8),
        has_quote: a.has_quote != 0,
        seq: a.seq,
        bid: side(TICKGATE_SIDE_BID, a.bid_px, a.bid_qty),
        ask: side(TICKGATE_SIDE_ASK, a.ask_px, a.ask_qty),
        silence_ns: a.silence_ns,
        source_age_ns: a.source_age_ns,
    };
    let mut feeds = ArrayVec::new();
    for k in 0..a.feed_count as usize {
        feeds.push(FeedItem {
            feed: a.feed_index[k],
            reasons: a.feed_reasons[k],
        });
    }
    Some(Answer { verdict, feeds })
}

/// Copies `msg` into `buf` (`len` bytes, NUL-terminated, truncated).
///
/// # Safety
/// `buf` is null or valid for `len` bytes.
unsafe fn put_message(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller gives `len` writable bytes at `buf`; n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// Opens the state file at `path` (NULL: `$TICKGATE_SHM`, else
/// `/run/tickgate/state.shm`). NULL on error, with the reason in `err`.
///
/// # Safety
/// `path` is null or a NUL-terminated string; `err` is null or valid for
/// `err_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tickgate_open(
    path: *const c_char,
    err: *mut c_char,
    err_len: usize,
) -> *mut tickgate_client {
    let opened = catch_unwind(|| {
        if path.is_null() {
            return Client::open_default().map_err(|e| e.to_string());
        }
        // SAFETY: non-null and NUL-terminated per the contract.
        let p = unsafe { CStr::from_ptr(path) };
        let p = std::str::from_utf8(p.to_bytes()).map_err(|_| "path is not UTF-8".to_string())?;
        Client::open(p).map_err(|e| e.to_string())
    });
    match opened {
        Ok(Ok(client)) => Box::into_raw(Box::new(tickgate_client { client })),
        Ok(Err(msg)) => {
            // SAFETY: per the contract on `err`.
            unsafe { put_message(err, err_len, &msg) };
            std::ptr::null_mut()
        }
        Err(_) => {
            // SAFETY: per the contract on `err`.
            unsafe { put_message(err, err_len, "internal error") };
            std::ptr::null_mut()
        }
    }
}

/// Closes a client from `tickgate_open` (NULL is ignored).
///
/// # Safety
/// `c` is null or from `tickgate_open`, not closed before.
#[no_mangle]
pub unsafe extern "C" fn tickgate_close(c: *mut tickgate_client) {
    if !c.is_null() {
        // SAFETY: from Box::into_raw in tickgate_open, closed once.
        drop(unsafe { Box::from_raw(c) });
    }
}

/// Checks `symbol` at `now_ns` (CLOCK_REALTIME in Unix ns, the clock of
/// the daemon's timestamps; 0: read it now; anything before 2001 is not
/// that clock: `TICKGATE_E_CLOCK`) with
/// `stale_ms` / `source_ms` tightening the configured thresholds (< 0:
/// as configured). 0 and `*out` filled when answered (OK or REJECT),
/// else a `TICKGATE_E_*` code.
///
/// # Safety
/// `c` from `tickgate_open`, used by one thread at a time; `symbol`
/// NUL-terminated; `out` valid for writing a `tickgate_answer`.
#[no_mangle]
pub unsafe extern "C" fn tickgate_check(
    c: *mut tickgate_client,
    symbol: *const c_char,
    now_ns: i64,
    stale_ms: i64,
    source_ms: i64,
    out: *mut tickgate_answer,
) -> c_int {
    // SAFETY: the same contract, with no feed named.
    unsafe {
        tickgate_check_feed(
            c,
            symbol,
            std::ptr::null(),
            now_ns,
            stale_ms,
            source_ms,
            out,
        )
    }
}

/// `tickgate_check` with `feed=<name>` (gate.md): that feed's verdict
/// alone; `feed` NULL: every feed that knows the symbol.
/// `TICKGATE_E_FEED` when no feed has that name.
///
/// # Safety
/// As `tickgate_check`; `feed` null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tickgate_check_feed(
    c: *mut tickgate_client,
    symbol: *const c_char,
    feed: *const c_char,
    now_ns: i64,
    stale_ms: i64,
    source_ms: i64,
    out: *mut tickgate_answer,
) -> c_int {
    if c.is_null() || symbol.is_null() || out.is_null() {
        return TICKGATE_E_ARG;
    }
    // SAFETY: non-null, from tickgate_open, one thread at a time.
    let client = unsafe { &mut (*c).client };
    // SAFETY: non-null and NUL-terminated per the contract.
    let sym = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let now = match now_ns {
        0 => realtime_ns(),
        n if n < MIN_REALTIME_NS => return TICKGATE_E_CLOCK,
        n => n,
    };
    let feed = if feed.is_null() {
        None
    } else {
        // SAFETY: non-null and NUL-terminated per the contract.
        let name = unsafe { CStr::from_ptr(feed) }.to_bytes();
        match client.feed_index(name) {
            Some(i) => Some(i),
            None => return TICKGATE_E_FEED,
        }
    };
    let opt = |ms: i64| u64::try_from(ms).ok();
    let opts = Options {
        stale_ms: opt(stale_ms),
        source_ms: opt(source_ms),
        feed,
    };
    let got = catch_unwind(AssertUnwindSafe(|| client.check_answer(sym, now, &opts)));
    match got {
        Ok(Ok(a)) => {
            // SAFETY: non-null and writable per the contract.
            unsafe { out.write(to_c(&a)) };
            0
        }
        Ok(Err(Error::Proto(ProtoError::LooserThanConfigured))) => TICKGATE_E_LOOSER,
        Ok(Err(Error::Proto(ProtoError::UnknownFeed))) => TICKGATE_E_FEED,
        Ok(Err(Error::Proto(_))) => TICKGATE_E_SYMBOL,
        Ok(Err(_)) => TICKGATE_E_READ,
        Err(_) => TICKGATE_E_PANIC,
    }
}

/// Copies `line` into `buf` (NUL-terminated) when it fits in `len`;
/// returns its length.
///
/// # Safety
/// `buf` null or valid for `len` bytes.
unsafe fn put_line(line: &[u8], buf: *mut c_char, len: usize) -> i64 {
    if !buf.is_null() && line.len() < len {
        // SAFETY: `buf` has `len` > line.len() writable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(line.as_ptr(), buf.cast::<u8>(), line.len());
            *buf.add(line.len()) = 0;
        }
    }
    line.len() as i64
}

/// The socket's answer line for `a` (asked as `symbol`), feed names from
/// the file `c` maps: every answer, also one of several feeds
/// (`feeds=`). As `tickgate_format` otherwise.
///
/// # Safety
/// `c` from `tickgate_open`; `a` valid; `symbol` NUL-terminated; `buf`
/// null or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tickgate_format_with(
    c: *const tickgate_client,
    a: *const tickgate_answer,
    symbol: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    if c.is_null() || a.is_null() || symbol.is_null() {
        return TICKGATE_E_ARG as i64;
    }
    // SAFETY: non-null, valid per the contract.
    let Some(answer) = from_c(unsafe { &*a }) else {
        return TICKGATE_E_ARG as i64;
    };
    // SAFETY: non-null and NUL-terminated per the contract.
    let sym = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let mut line = Vec::with_capacity(128);
    // SAFETY: non-null, from tickgate_open.
    unsafe { (*c).client.write_answer(&mut line, sym, &answer) };
    // SAFETY: per the contract on `buf`.
    unsafe { put_line(&line, buf, len) }
}

/// Formats the socket's answer line for `a` (asked as `symbol`), with its
/// `\n`, NUL-terminated into `buf` when it fits in `len`. Returns the
/// line's length without the NUL (as snprintf: a value >= `len` means it
/// did not fit), or `TICKGATE_E_ARG` (also for a cause no check gives,
/// and for an answer over several feeds, `feed_count > 0`, whose feed
/// names only a client knows: `tickgate_format_with`).
///
/// # Safety
/// `a` valid; `symbol` NUL-terminated; `buf` null or valid for `len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn tickgate_format(
    a: *const tickgate_answer,
    symbol: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    if a.is_null() || symbol.is_null() {
        return TICKGATE_E_ARG as i64;
    }
    // SAFETY: non-null, valid per the contract.
    let a = unsafe { &*a };
    // A cause no check gives cannot be formatted as one; the feeds of an
    // answer over several feeds have names only a client knows.
    let Some(answer) = from_c(a).filter(|a| !a.across()) else {
        return TICKGATE_E_ARG as i64;
    };
    // SAFETY: non-null and NUL-terminated per the contract.
    let sym = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let mut line = Vec::with_capacity(128);
    write_verdict(&mut line, sym, &answer.verdict);
    // SAFETY: per the contract on `buf`.
    unsafe { put_line(&line, buf, len) }
}

/// The generation of the file the client maps now.
///
/// # Safety
/// `c` from `tickgate_open`.
#[no_mangle]
pub unsafe extern "C" fn tickgate_generation(c: *const tickgate_client) -> u64 {
    if c.is_null() {
        return 0;
    }
    // SAFETY: non-null, from tickgate_open.
    unsafe { (*c).client.generation() }
}

/// Seqlock retries this client took (a read raced the writer).
///
/// # Safety
/// `c` from `tickgate_open`.
#[no_mangle]
pub unsafe extern "C" fn tickgate_retries(c: *const tickgate_client) -> u64 {
    if c.is_null() {
        return 0;
    }
    // SAFETY: non-null, from tickgate_open.
    unsafe { (*c).client.stats().retries }
}

/// `sizeof(tickgate_answer)` as this library was built: a caller compiled
/// against another header can tell.
#[no_mangle]
pub extern "C" fn tickgate_answer_size() -> usize {
    std::mem::size_of::<tickgate_answer>()
}

/// A static description of a `TICKGATE_E_*` code.
#[no_mangle]
pub extern "C" fn tickgate_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        0 => c"answered",
        TICKGATE_E_ARG => c"invalid argument",
        TICKGATE_E_SYMBOL => c"invalid symbol",
        TICKGATE_E_LOOSER => c"threshold looser than configured",
        TICKGATE_E_READ => c"the state file cannot be read (corrupt or not written by tickgate)",
        TICKGATE_E_PANIC => c"internal error",
        TICKGATE_E_CLOCK => c"now_ns is not CLOCK_REALTIME in Unix nanoseconds",
        TICKGATE_E_FEED => c"unknown feed",
        _ => c"unknown error",
    };
    s.as_ptr()
}
