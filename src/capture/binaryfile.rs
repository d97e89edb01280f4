//! Nasdaq BinaryFILE: the historical TotalView-ITCH 5.0 days Nasdaq
//! publishes (`MMDDYYYY.NASDAQ_ITCH50.gz`). Each message is a big-endian
//! `u16` length followed by the message; there is no MoldUDP64 framing
//! and no capture time.
//!
//! Reading turns a file into what the `nasdaq-itch` venue receives live
//! (docs/venues.md "Nasdaq BinaryFILE"):
//!
//! - one MoldUDP64 session whose id is the file's date, `YYYYMMDDBF`
//!   ([`session_for`]); messages are numbered from 1 as its channel
//!   sequence;
//! - consecutive messages with the same ITCH timestamp go into one
//!   datagram of at most [`MAX_DATAGRAM`] bytes (a message longer than
//!   that goes alone), stamped New York midnight of the file's date plus
//!   that timestamp (nanoseconds since midnight, daylight saving
//!   included), so every message keeps its own stamp; a stamp earlier
//!   than the datagram before is raised to it (counted): the file's order
//!   is its sequence, which reordering by stamp would break;
//! - every datagram is sent from [`SOURCE`] to [`DESTINATION`], the
//!   simulator's default line A.
//!
//! [`BinaryFileReader::next_run`] hands out the same datagrams a run at a
//! time, their message blocks back to back without headers: the file's
//! framing is already theirs, so `replay` gives the feed the blocks as
//! they are rather than building datagrams for it to parse again.
//!
//! The date comes from the file name (`MMDDYYYY.` prefix, [`date_from_name`])
//! or is given (`replay --date`). The framing ([`message_at`], [`check_message`],
//! [`message_ts`]) is pure; [`BinaryFileReader`] is the thin shell over a
//! buffered reader (plain, gzip or zstd: `compress`), [`BinaryFileWriter`]
//! writes the format. Lengths are `u16`, so no buffer grows past 64 KiB
//! plus a datagram.

use std::io::{self, BufRead, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use jiff::civil::Date;

use super::frame::MAX_DATAGRAM;
use super::pcap::CaptureError;
use super::source::{DatagramMeta, DatagramRun, DatagramSource, RunDatagram};
use crate::venue::nasdaq_itch::messages::{message_size, TYPE_SYSTEM_EVENT};
use crate::venue::nasdaq_itch::{midnight_of, new_york};
use crate::venue::BlocksChecked;
use crate::wire::{mold_header_bytes, SessionId, HEADER_LEN};

/// Where a BinaryFILE's datagrams are sent to: the simulator's line A
/// (`simulate --group-a`), so one config serves a simulated and a
/// historical day.
pub const DESTINATION: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 0, 1), 30001);
/// Where they come from: the simulator's default `--source`.
pub const SOURCE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40000);

/// Bytes of messages a run ([`BinaryFileReader::next_run`]) gathers at
/// most (a few datagrams of [`MAX_DATAGRAM`], or a few hundred messages
/// each alone): enough that the cost of handing one out is spread thin.
pub const RUN_BYTES: usize = 8 << 10;

/// Bytes of an ITCH message's header before its timestamp (type, stock
/// locate, tracking number) and of the timestamp itself.
const TS_AT: usize = 5;
const TS_LEN: usize = 6;

// ------------------------------------------------------------ framing

/// The whole message whose 2-byte length is at `at` in `buf`, when every
/// byte of it is there (`None`: more bytes are needed). The framing both
/// of the reader's walks (`walk` and `build`) read by.
#[inline(always)]
pub fn message_at(buf: &[u8], at: usize) -> Option<&[u8]> {
    let Some(&[hi, lo]) = buf.get(at..at + 2) else {
        return None;
    };
    let len = u16::from_be_bytes([hi, lo]) as usize;
    buf.get(at + 2..at + 2 + len)
}

/// A message the venue could not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("zero length")]
    Empty,
    #[error("type {} ({kind:#04x}) is {size} bytes but the length says {len}", printable(*kind))]
    Short { kind: u8, len: usize, size: usize },
}

fn printable(b: u8) -> char {
    if b.is_ascii_graphic() {
        b as char
    } else {
        '?'
    }
}

/// Whether the venue knows the message's type (`Ok(true)`) or will skip
/// and count it (`Ok(false)`); a known type shorter than its size, or an
/// empty message, cannot be carried. Longer than its size is fine (the
/// venue ignores the extra bytes, as in a live packet).
#[inline]
pub fn check_message(msg: &[u8]) -> Result<bool, MessageError> {
    let Some(&kind) = msg.first() else {
        return Err(MessageError::Empty);
    };
    match message_size(kind) {
        Some(size) if msg.len() < size => Err(MessageError::Short {
            kind,
            len: msg.len(),
            size,
        }),
        Some(_) => Ok(true),
        None => Ok(false),
    }
}

/// The message's ITCH timestamp (ns since midnight), if it is long enough
/// to hold one (every known type is).
#[inline]
pub fn message_ts(msg: &[u8]) -> Option<u64> {
    // One 8-byte load ending at the timestamp's last byte, its first two
    // bytes (the tracking number) masked off.
    let b = msg.get(TS_AT + TS_LEN - 8..TS_AT + TS_LEN)?;
    let w = u64::from_be_bytes(b.try_into().expect("8 bytes"));
    Some(w & ((1 << (8 * TS_LEN)) - 1))
}

/// Whether a file starting with `head` is a BinaryFILE: a first message of
/// a known ITCH type at least its size (usually a System Event `S`, 12
/// bytes). No pcap or pcapng magic starts with a zero byte.
pub fn looks_like(head: &[u8]) -> bool {
    match head {
        [0, len, kind, ..] => message_size(*kind).is_some_and(|s| *len as usize >= s),
        _ => false,
    }
}

/// The date of a file named `MMDDYYYY.…` (Nasdaq's naming), if it has one.
pub fn date_from_name(path: &Path) -> Option<Date> {
    let name = path.file_name()?.to_str()?.as_bytes();
    let digits = name.get(..8)?;
    if name.get(8) != Some(&b'.') || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| {
        digits[r]
            .iter()
            .fold(0i32, |a, &d| a * 10 + (d - b'0') as i32)
    };
    Date::new(n(4..8) as i16, n(0..2) as i8, n(2..4) as i8).ok()
}

/// Whether `path` names a BinaryFILE to write: `….NASDAQ_ITCH50`, plain
/// or followed by `.gz` or `.zst` (any case).
pub fn is_binaryfile_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let name = name.to_ascii_uppercase();
    let stem = name
        .strip_suffix(".GZ")
        .or_else(|| name.strip_suffix(".ZST"))
        .unwrap_or(&name);
    stem.ends_with(".NASDAQ_ITCH50")
}

/// The MoldUDP64 session of a BinaryFILE's day: `YYYYMMDDBF`.
pub fn session_for(date: Date) -> SessionId {
    let s = format!("{:04}{:02}{:02}BF", date.year(), date.month(), date.day());
    SessionId::parse(&s).unwrap_or_default()
}

/// New York midnight of `date`, Unix ns.
pub fn midnight_ns(date: Date) -> i64 {
    midnight_of(&new_york(), date)
}

// ------------------------------------------------------------- reader

/// One message of `len` bytes, of type `kind`, was put in a datagram.
#[inline]
fn count_message(stats: &mut BinaryFileStats, known: bool, kind: u8, len: usize) {
    if !known {
        count_unknown(stats, 0, 0, kind);
    }
    stats.messages += 1;
    stats.bytes += 2 + len as u64;
}

/// A message of a type the venue does not know, `messages` and `bytes`
/// past those `stats` has counted so far.
#[cold]
#[inline(never)]
fn count_unknown(stats: &mut BinaryFileStats, messages: u64, bytes: usize, kind: u8) {
    stats.unknown_types += 1;
    if stats.first_unknown.is_none() {
        stats.first_unknown = Some((
            stats.messages + messages + 1,
            stats.bytes + bytes as u64,
            kind,
        ));
    }
}

/// Whether a message of ITCH timestamp `t`, `len` bytes long, at `at`
/// starts a new datagram after the open one at `start` (its blocks
/// `start..at`, of timestamp `ts`): a datagram holds messages of one
/// timestamp in at most [`MAX_DATAGRAM`] bytes with its header, and always
/// takes its first message, however long (every block takes bytes: the
/// open datagram is empty only before its first). The one rule `walk` and
/// `build` both frame by.
#[inline(always)]
fn closes_datagram(start: usize, at: usize, ts: u64, t: u64, len: usize) -> bool {
    at > start && (t != ts || HEADER_LEN + at - start + 2 + len > MAX_DATAGRAM)
}

/// The stamp of a datagram of ITCH timestamp `ts` on a day starting at
/// `midnight_ns`, after a datagram stamped `last_stamp`; counted as handed
/// out.
#[inline]
fn stamp_at(midnight_ns: i64, last_stamp: &mut i64, stats: &mut BinaryFileStats, ts: u64) -> i64 {
    let mut stamp = midnight_ns.saturating_add(ts as i64);
    if stamp < *last_stamp {
        // Sequence order is the file's order: applied at the previous
        // stamp rather than moved ahead of the messages before it.
        stats.backwards += 1;
        stamp = *last_stamp;
    }
    *last_stamp = stamp;
    stats.datagrams += 1;
    stamp
}

/// What a reader has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinaryFileStats {
    /// Messages read (the last one's channel sequence).
    pub messages: u64,
    /// Datagrams handed out.
    pub datagrams: u64,
    /// Messages of a type the venue does not know (passed on: the venue
    /// skips and counts them).
    pub unknown_types: u64,
    /// The first of them: message number, byte offset, type.
    pub first_unknown: Option<(u64, u64, u8)>,
    /// Datagrams whose messages are stamped earlier than the datagram
    /// before: handed out at that datagram's stamp, in sequence order.
    pub backwards: u64,
    /// Bytes read (decompressed).
    pub bytes: u64,
}

/// A BinaryFILE as MoldUDP64 datagrams (see the module documentation).
pub struct BinaryFileReader<R> {
    r: R,
    date: Date,
    session: SessionId,
    midnight_ns: i64,
    stats: BinaryFileStats,
    /// A message that straddled the reader's buffer, read whole but not
    /// yet put in a datagram.
    pending: Vec<u8>,
    has_pending: bool,
    /// The ITCH timestamp of the last message read.
    last_ts: u64,
    last_stamp: i64,
    /// An error found after the datagram being built had messages: handed
    /// out on the next call.
    deferred: Option<CaptureError>,
    done: bool,
}

impl<R: BufRead> BinaryFileReader<R> {
    /// A BinaryFILE of `date` (the file's day, New York).
    pub fn new(r: R, date: Date) -> Self {
        BinaryFileReader {
            r,
            date,
            session: session_for(date),
            midnight_ns: midnight_ns(date),
            stats: BinaryFileStats::default(),
            pending: Vec::new(),
            has_pending: false,
            last_ts: 0,
            last_stamp: i64::MIN,
            deferred: None,
            done: false,
        }
    }

    pub fn stats(&self) -> &BinaryFileStats {
        &self.stats
    }

    pub fn date(&self) -> Date {
        self.date
    }

    pub fn session(&self) -> SessionId {
        self.session
    }

    pub fn get_ref(&self) -> &R {
        &self.r
    }

    fn error(&self, what: String) -> CaptureError {
        CaptureError::BinaryFile {
            message: self.stats.messages + 1,
            offset: self.stats.bytes,
            what,
        }
    }

    fn io_error(&self, e: io::Error) -> CaptureError {
        self.error(format!("reading: {e}"))
    }

    /// Reads until `buf` is full or the input ends; the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, CaptureError> {
        crate::util::read::read_up_to(&mut self.r, buf).map_err(|e| self.io_error(e))
    }

    /// Reads the next message whole into `pending` (the slow path, for a
    /// message the reader's buffer does not hold whole). `false` at the end.
    fn read_pending(&mut self) -> Result<bool, CaptureError> {
        let mut len = [0u8; 2];
        match self.fill(&mut len)? {
            0 => return Ok(false),
            2 => {}
            _ => {
                return Err(self
                    .error("the file ends inside the message's 2-byte length (truncated)".into()))
            }
        }
        let len = u16::from_be_bytes(len) as usize;
        let mut msg = std::mem::take(&mut self.pending);
        msg.clear();
        msg.resize(len, 0);
        let got = self.fill(&mut msg);
        self.pending = msg;
        let got = got?;
        if got < len {
            return Err(self.error(format!(
                "the message claims {len} bytes but the file ends after {got} (truncated)"
            )));
        }
        Ok(true)
    }

    /// Appends `msg` (whose stamp decided it belongs here) to the datagram.
    #[inline]
    fn take(&mut self, msg: &[u8], ts: u64, buf: &mut Vec<u8>) -> Result<(), CaptureError> {
        let known = check_message(msg).map_err(|e| self.error(e.to_string()))?;
        buf.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        buf.extend_from_slice(msg);
        count_message(&mut self.stats, known, msg[0], msg.len());
        self.last_ts = ts;
        Ok(())
    }

    /// Appends the next datagram's message blocks to `buf` (which holds
    /// its header, or the datagrams of a run before it); its ITCH
    /// timestamp and count.
    fn build(&mut self, buf: &mut Vec<u8>) -> Result<Option<(u64, u16)>, CaptureError> {
        // The datagram's blocks are what `buf` gains.
        let base = buf.len();
        let mut count = 0u16;
        let mut ts = 0u64;
        if self.has_pending {
            self.has_pending = false;
            let msg = std::mem::take(&mut self.pending);
            let t = message_ts(&msg).unwrap_or(self.last_ts);
            let r = self.take(&msg, t, buf);
            self.pending = msg;
            r?;
            count = 1;
            ts = t;
        }
        loop {
            let avail = match self.r.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return self.stop(count, ts, self.io_error(e)),
            };
            if avail.is_empty() {
                break;
            }
            // Fast path: the messages whole in the reader's buffer, checked
            // in place and copied at once (the file's framing is the
            // datagram's: a u16 length, then the message).
            let mut at = 0usize;
            let mut full = false;
            let mut bad = None;
            // The blocks the datagram holds before this walk's.
            let held = buf.len() - base;
            // Messages and bytes are counted once the walk ends.
            let mut taken = 0u64;
            let mut last_ts = self.last_ts;
            while let Some(msg) = message_at(avail, at) {
                let len = msg.len();
                let t = message_ts(msg).unwrap_or(last_ts);
                if closes_datagram(0, held + at, ts, t, len) {
                    full = true;
                    break;
                }
                match check_message(msg) {
                    Ok(true) => {}
                    Ok(false) => count_unknown(&mut self.stats, taken, at, msg[0]),
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
                last_ts = t;
                ts = t;
                count += 1;
                taken += 1;
                at += 2 + len;
            }
            self.last_ts = last_ts;
            self.stats.messages += taken;
            self.stats.bytes += at as u64;
            buf.extend_from_slice(&avail[..at]);
            self.r.consume(at);
            if let Some(e) = bad {
                let e = self.error(e.to_string());
                return self.stop(count, ts, e);
            }
            if full {
                break;
            }
            if at > 0 {
                continue;
            }
            // Slow path: the message straddles the reader's buffer.
            match self.read_pending() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return self.stop(count, ts, e),
            }
            let t = message_ts(&self.pending).unwrap_or(self.last_ts);
            if closes_datagram(base, buf.len(), ts, t, self.pending.len()) {
                self.has_pending = true;
                break;
            }
            let msg = std::mem::take(&mut self.pending);
            let r = self.take(&msg, t, buf);
            self.pending = msg;
            if let Err(e) = r {
                return self.stop(count, ts, e);
            }
            ts = t;
            count += 1;
        }
        if count == 0 {
            return Ok(None);
        }
        Ok(Some((ts, count)))
    }

    /// The stamp of a datagram of ITCH timestamp `ts`, counted as handed
    /// out.
    fn stamp(&mut self, ts: u64) -> i64 {
        stamp_at(self.midnight_ns, &mut self.last_stamp, &mut self.stats, ts)
    }

    /// The next datagrams, the same as [`DatagramSource::next`] hands out,
    /// as one run of at most about [`RUN_BYTES`] of messages (more only
    /// for a message longer than a datagram); `Ok(false)` at the end. An
    /// error found after the run's first datagram comes on the next call,
    /// as it would after that datagram.
    pub fn next_run(&mut self, run: &mut DatagramRun) -> Result<bool, CaptureError> {
        run.datagrams.clear();
        run.blocks.clear();
        // Room for a run from the start: the walk copies many datagrams at
        // once, which would otherwise grow it by steps of its own.
        run.blocks.reserve(RUN_BYTES);
        run.src = SOURCE;
        run.dst = DESTINATION;
        run.session = self.session;
        run.first_sequence = self.stats.messages + 1;
        // `walk` and `build` frame every block and check it by
        // `check_message`.
        run.checked = BlocksChecked::Itch50;
        if let Some(e) = self.deferred.take() {
            self.done = true;
            return Err(e);
        }
        while !self.done && run.blocks.len() + MAX_DATAGRAM <= RUN_BYTES {
            if self.walk(run) {
                continue;
            }
            let start = run.blocks.len();
            match self.build(&mut run.blocks) {
                Ok(Some((ts, count))) => {
                    let ts_ns = self.stamp(ts);
                    run.datagrams.push(RunDatagram {
                        ts_ns,
                        count,
                        len: (run.blocks.len() - start) as u32,
                    });
                    if self.deferred.is_some() {
                        break;
                    }
                }
                Ok(None) => self.done = true,
                Err(e) => {
                    self.done = true;
                    if run.datagrams.is_empty() {
                        return Err(e);
                    }
                    self.deferred = Some(e);
                }
            }
        }
        Ok(!run.datagrams.is_empty())
    }

    /// The fast path of [`Self::next_run`]: the datagrams whole in the
    /// reader's buffer, framed in one walk and copied at once (a
    /// datagram's fixed cost in `build` is a call, a copy and a buffer
    /// refill). Whatever the walk cannot settle (a datagram that may go on
    /// past the buffer, a message of an unknown type or a bad one, a
    /// message held over) is left to `build`: `false` when it closed no
    /// datagram.
    fn walk(&mut self, run: &mut DatagramRun) -> bool {
        if self.has_pending {
            return false;
        }
        let Ok(avail) = self.r.fill_buf() else {
            // `build` reports it.
            return false;
        };
        let base = run.blocks.len();
        // Bytes walked and where the open datagram starts; messages walked
        // and those of closed datagrams (the open one's count is the
        // difference); the open datagram's ITCH timestamp.
        let mut at = 0usize;
        let mut start = 0usize;
        let mut messages = 0u64;
        let mut closed = 0u64;
        let mut ts = 0u64;
        let mut closed_ts = self.last_ts;
        while let Some(msg) = message_at(avail, at) {
            let len = msg.len();
            // Known types only: `build` counts an unknown one and reports
            // a bad one.
            if check_message(msg) != Ok(true) {
                break;
            }
            let t = message_ts(msg).expect("a known type holds its timestamp");
            if closes_datagram(start, at, ts, t, len) {
                let ts_ns = stamp_at(self.midnight_ns, &mut self.last_stamp, &mut self.stats, ts);
                run.datagrams.push(RunDatagram {
                    ts_ns,
                    count: (messages - closed) as u16,
                    len: (at - start) as u32,
                });
                start = at;
                closed = messages;
                closed_ts = ts;
                if base + start + MAX_DATAGRAM > RUN_BYTES {
                    break;
                }
            }
            ts = t;
            messages += 1;
            at += 2 + len;
        }
        if start == 0 {
            return false;
        }
        // The open datagram (it may go on in the next buffer) is `build`'s.
        self.last_ts = closed_ts;
        self.stats.messages += closed;
        self.stats.bytes += start as u64;
        run.blocks.extend_from_slice(&avail[..start]);
        self.r.consume(start);
        true
    }

    /// An error while building: hand out what was built first.
    fn stop(
        &mut self,
        count: u16,
        ts: u64,
        e: CaptureError,
    ) -> Result<Option<(u64, u16)>, CaptureError> {
        if count == 0 {
            return Err(e);
        }
        self.deferred = Some(e);
        Ok(Some((ts, count)))
    }
}

impl<R: BufRead> DatagramSource for BinaryFileReader<R> {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        if let Some(e) = self.deferred.take() {
            self.done = true;
            return Err(e);
        }
        if self.done {
            return Ok(None);
        }
        let first = self.stats.messages + 1;
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        let (ts, count) = match self.build(buf) {
            Ok(Some(v)) => v,
            Ok(None) => {
                self.done = true;
                return Ok(None);
            }
            Err(e) => {
                self.done = true;
                return Err(e);
            }
        };
        buf[..HEADER_LEN].copy_from_slice(&mold_header_bytes(self.session, first, count));
        Ok(Some(DatagramMeta {
            ts_ns: self.stamp(ts),
            src: SOURCE,
            dst: DESTINATION,
            len: buf.len(),
        }))
    }
}

// ------------------------------------------------------------- writer

/// Writes messages in the BinaryFILE format.
pub struct BinaryFileWriter<W> {
    w: W,
    messages: u64,
}

impl<W: Write> BinaryFileWriter<W> {
    pub fn new(w: W) -> Self {
        BinaryFileWriter { w, messages: 0 }
    }

    /// One message (at most 65,535 bytes).
    pub fn write_message(&mut self, msg: &[u8]) -> io::Result<()> {
        let len = u16::try_from(msg.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a {}-byte message does not fit a u16 length", msg.len()),
            )
        })?;
        self.w.write_all(&len.to_be_bytes())?;
        self.w.write_all(msg)?;
        self.messages += 1;
        Ok(())
    }

    /// Every message block of a MoldUDP64 packet's body (the bytes after
    /// its 20-byte header), which has the same `u16` length framing.
    pub fn write_blocks(&mut self, blocks: &[u8]) -> io::Result<()> {
        self.w.write_all(blocks)
    }

    /// Counts messages written by [`Self::write_blocks`].
    pub fn add_count(&mut self, n: u64) {
        self.messages += n;
    }

    pub fn messages(&self) -> u64 {
        self.messages
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.w
    }

    pub fn into_inner(self) -> W {
        self.w
    }
}

/// A System Event message (12 bytes) with `event` at `ts` ns after
/// midnight: what a day starts (`O`, `S`) and ends (`E`, `C`) with.
pub fn system_event(ts: u64, event: u8) -> [u8; 12] {
    let mut m = [0u8; 12];
    m[0] = TYPE_SYSTEM_EVENT;
    m[TS_AT..TS_AT + TS_LEN].copy_from_slice(&ts.to_be_bytes()[2..]);
    m[11] = event;
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn date(y: i16, m: i8, d: i8) -> Date {
        Date::new(y, m, d).unwrap()
    }

    /// A Delete (19 bytes) at `ts` for order `r`.
    fn delete(ts: u64, r: u64) -> Vec<u8> {
        let mut m = vec![0u8; 19];
        m[0] = b'D';
        m[TS_AT..TS_AT + TS_LEN].copy_from_slice(&ts.to_be_bytes()[2..]);
        m[11..19].copy_from_slice(&r.to_be_bytes());
        m
    }

    fn file(msgs: &[Vec<u8>]) -> Vec<u8> {
        let mut w = BinaryFileWriter::new(Vec::new());
        for m in msgs {
            w.write_message(m).unwrap();
        }
        w.into_inner()
    }

    fn all<R: BufRead>(
        r: &mut BinaryFileReader<R>,
    ) -> (Vec<(DatagramMeta, Vec<u8>)>, Option<String>) {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            match r.next(&mut buf) {
                Ok(Some(m)) => out.push((m, buf.clone())),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
    }

    #[test]
    fn frames_and_checks() {
        assert_eq!(message_at(&[0], 0), None);
        assert_eq!(message_at(&[0, 3, 1, 2], 0), None);
        assert_eq!(message_at(&[0, 2, 1, 2, 9], 0), Some(&[1u8, 2][..]));
        assert_eq!(message_at(&[9, 0, 2, 1, 2], 1), Some(&[1u8, 2][..]));
        assert_eq!(message_at(&[9, 0, 3, 1, 2], 1), None);
        assert_eq!(message_at(&[0, 0], 0), Some(&[][..]));
        assert_eq!(check_message(&[]), Err(MessageError::Empty));
        assert_eq!(check_message(&system_event(0, b'O')), Ok(true));
        assert_eq!(check_message(&[b'z', 1, 2]), Ok(false));
        assert!(matches!(
            check_message(&delete(1, 1)[..18]),
            Err(MessageError::Short {
                kind: b'D',
                len: 18,
                size: 19
            })
        ));
        assert_eq!(
            message_ts(&system_event(0x0102_0304_0506, b'O')),
            Some(0x0102_0304_0506)
        );
        assert!(looks_like(&[0, 12, b'S', 0]));
        assert!(!looks_like(&[0, 11, b'S', 0]));
        assert!(!looks_like(&0xA1B2_C3D4u32.to_le_bytes()));
        assert!(!looks_like(&[0x0a, 0x0d, 0x0d, 0x0a]));
    }

    #[test]
    fn names() {
        assert_eq!(
            date_from_name(Path::new("/x/01302019.NASDAQ_ITCH50.gz")),
            Some(date(2019, 1, 30))
        );
        assert_eq!(date_from_name(Path::new("13302019.NASDAQ_ITCH50")), None);
        assert_eq!(date_from_name(Path::new("0130201.NASDAQ_ITCH50")), None);
        assert_eq!(date_from_name(Path::new("day.NASDAQ_ITCH50")), None);
        assert!(is_binaryfile_name(Path::new("a/07152019.NASDAQ_ITCH50")));
        assert!(is_binaryfile_name(Path::new("x.nasdaq_itch50.gz")));
        assert!(is_binaryfile_name(Path::new("x.NASDAQ_ITCH50.zst")));
        assert!(!is_binaryfile_name(Path::new("x.pcap.gz")));
        assert_eq!(session_for(date(2019, 1, 30)).to_string(), "20190130BF");
    }

    #[test]
    fn midnight_follows_daylight_saving() {
        // January: EST (UTC-5); July: EDT (UTC-4)
        let jan = midnight_ns(date(2019, 1, 30));
        assert_eq!(jan, 1_548_824_400 * 1_000_000_000); // 2019-01-30T05:00:00Z
        let jul = midnight_ns(date(2019, 7, 15));
        assert_eq!(jul, 1_563_163_200 * 1_000_000_000); // 2019-07-15T04:00:00Z
    }

    #[test]
    fn same_stamp_shares_a_datagram_and_sequences_count_messages() {
        let msgs = vec![
            system_event(10, b'O').to_vec(),
            delete(20, 1),
            delete(20, 2),
            delete(30, 3),
        ];
        let d = date(2019, 1, 30);
        let mut r = BinaryFileReader::new(Cursor::new(file(&msgs)), d);
        let (got, err) = all(&mut r);
        assert!(err.is_none(), "{err:?}");
        let m0 = midnight_ns(d);
        let heads: Vec<(i64, u64, u16)> = got
            .iter()
            .map(|(m, b)| {
                (
                    m.ts_ns - m0,
                    u64::from_be_bytes(b[10..18].try_into().unwrap()),
                    u16::from_be_bytes([b[18], b[19]]),
                )
            })
            .collect();
        assert_eq!(heads, [(10, 1, 1), (20, 2, 2), (30, 4, 1)]);
        assert_eq!(&got[1].1[..10], b"20190130BF");
        assert_eq!(got[1].1.len(), 20 + 2 * 21);
        assert_eq!(r.stats().messages, 4);
        assert_eq!(r.stats().datagrams, 3);
        assert_eq!(got[0].0.dst, DESTINATION);
    }

    #[test]
    fn a_datagram_stays_within_its_size() {
        // 200 messages at one stamp: 21 bytes each in blocks
        let msgs: Vec<Vec<u8>> = (0..200).map(|i| delete(5, i)).collect();
        let mut r = BinaryFileReader::new(Cursor::new(file(&msgs)), date(2019, 1, 30));
        let (got, err) = all(&mut r);
        assert!(err.is_none());
        assert!(got.iter().all(|(m, _)| m.len <= MAX_DATAGRAM));
        let n: u64 = got
            .iter()
            .map(|(_, b)| u16::from_be_bytes([b[18], b[19]]) as u64)
            .sum();
        assert_eq!(n, 200);
        assert_eq!(got.len(), 200usize.div_ceil((MAX_DATAGRAM - 20) / 21));
    }

    #[test]
    fn small_buffers_take_the_slow_path_with_the_same_result() {
        let msgs: Vec<Vec<u8>> = (0..50).map(|i| delete(i / 3, i)).collect();
        let bytes = file(&msgs);
        let d = date(2019, 7, 15);
        let (fast, _) = all(&mut BinaryFileReader::new(Cursor::new(bytes.clone()), d));
        for cap in [1, 2, 3, 7, 20, 21, 22] {
            let br = io::BufReader::with_capacity(cap, Cursor::new(bytes.clone()));
            let (slow, err) = all(&mut BinaryFileReader::new(br, d));
            assert!(err.is_none());
            assert_eq!(slow, fast, "buffer of {cap}");
        }
    }

    /// Every run's datagrams, built whole, then the error if any.
    fn all_runs<R: BufRead>(
        r: &mut BinaryFileReader<R>,
    ) -> (Vec<(DatagramMeta, Vec<u8>)>, Option<String>) {
        let mut out = Vec::new();
        let mut run = DatagramRun::default();
        loop {
            match r.next_run(&mut run) {
                Ok(true) => {
                    assert!(run.blocks.len() <= RUN_BYTES + 2 + 2000);
                    for d in run.iter() {
                        let mut b = Vec::new();
                        run.datagram(&d, &mut b);
                        let meta = DatagramMeta {
                            ts_ns: d.ts,
                            src: run.src,
                            dst: run.dst,
                            len: b.len(),
                        };
                        out.push((meta, b));
                    }
                }
                Ok(false) => return (out, None),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
    }

    #[test]
    fn runs_hold_the_datagrams_one_by_one_gives() {
        // stamps shared by 100 messages (more than a datagram holds), then
        // by one or two, some going back; an unknown type with no stamp, one
        // longer than a datagram; a bad length after a good message
        let mut msgs: Vec<Vec<u8>> = (0..3000)
            .map(|i| delete(if i < 1500 { i / 100 } else { i / 100 + i % 7 }, i))
            .collect();
        msgs.insert(500, vec![b'y']);
        let mut big = delete(20, 0);
        big[0] = b'z';
        big.resize(2000, 7);
        msgs.insert(1700, big);
        let mut bytes = file(&msgs);
        bytes.extend_from_slice(&[0, 0]);
        let d = date(2019, 7, 15);
        let mut one = BinaryFileReader::new(Cursor::new(bytes.clone()), d);
        let (want, err) = all(&mut one);
        assert!(err.unwrap().contains("zero length"));
        assert!(want.len() > 10 * RUN_BYTES / MAX_DATAGRAM);
        for cap in [7, 21, 64, 1000, 1 << 16] {
            let br = io::BufReader::with_capacity(cap, Cursor::new(bytes.clone()));
            let mut runs = BinaryFileReader::new(br, d);
            let (got, err) = all_runs(&mut runs);
            assert!(err.unwrap().contains("message 3003 at byte"), "{cap}");
            assert_eq!(got, want, "buffer of {cap}");
            assert_eq!(runs.stats(), one.stats());
        }
    }

    #[test]
    fn a_datagram_filled_to_the_byte_is_one_datagram() {
        // 64 deletes of 21 bytes in blocks, then one longer delete at the
        // same stamp: 36 bytes fill a datagram exactly, 37 do not; then one
        // at the next stamp
        let d = date(2019, 7, 15);
        for (pad, want, first_len) in [(34, vec![65, 1], 1400), (35, vec![64, 1, 1], 1364)] {
            let mut msgs: Vec<Vec<u8>> = (0..64).map(|i| delete(5, i)).collect();
            let mut long = delete(5, 64);
            long.resize(pad, 0);
            msgs.push(long);
            msgs.push(delete(6, 65));
            let bytes = file(&msgs);
            let counts = |got: &[(DatagramMeta, Vec<u8>)]| -> Vec<u16> {
                got.iter()
                    .map(|(_, b)| u16::from_be_bytes([b[18], b[19]]))
                    .collect()
            };
            let (one, _) = all(&mut BinaryFileReader::new(Cursor::new(bytes.clone()), d));
            assert_eq!(counts(&one), want, "one by one, {pad}");
            assert!(one.iter().all(|(m, _)| m.len <= MAX_DATAGRAM));
            assert_eq!(one[0].0.len, first_len);
            for cap in [64, 1 << 16] {
                let br = io::BufReader::with_capacity(cap, Cursor::new(bytes.clone()));
                let (runs, err) = all_runs(&mut BinaryFileReader::new(br, d));
                assert!(err.is_none());
                assert_eq!(runs, one, "runs, {pad}, buffer of {cap}");
            }
        }
    }

    #[test]
    fn bad_input_is_an_error_naming_message_and_offset() {
        let d = date(2019, 1, 30);
        // truncated final message: 2 whole messages, then 10 of 19 bytes
        let mut bytes = file(&[delete(1, 1), delete(2, 2), delete(3, 3)]);
        bytes.truncate(2 * 21 + 2 + 10);
        let (got, err) = all(&mut BinaryFileReader::new(Cursor::new(bytes), d));
        assert_eq!(got.len(), 2);
        let err = err.unwrap();
        assert!(err.contains("message 3 at byte 42"), "{err}");
        assert!(
            err.contains("claims 19 bytes but the file ends after 10"),
            "{err}"
        );
        // a zero length after one good message at the same stamp: the good
        // one is handed out, then the error
        let mut bytes = file(&[delete(1, 1)]);
        bytes.extend_from_slice(&[0, 0]);
        let (got, err) = all(&mut BinaryFileReader::new(Cursor::new(bytes), d));
        assert_eq!(got.len(), 1);
        assert!(err.unwrap().contains("message 2 at byte 21: zero length"));
        // a known type too short
        let bytes = file(&[delete(1, 1)[..15].to_vec()]);
        let (_, err) = all(&mut BinaryFileReader::new(Cursor::new(bytes), d));
        assert!(err.unwrap().contains("message 1 at byte 0: type D"));
        // an odd byte at the end
        let mut bytes = file(&[delete(1, 1)]);
        bytes.push(0);
        let (_, err) = all(&mut BinaryFileReader::new(Cursor::new(bytes), d));
        assert!(err.unwrap().contains("inside the message's 2-byte length"));
    }

    #[test]
    fn unknown_types_are_passed_and_counted() {
        let d = date(2019, 1, 30);
        let mut odd = delete(7, 1);
        odd[0] = b'z';
        let bytes = file(&[delete(7, 0), odd, vec![b'y'], delete(8, 2)]);
        let mut r = BinaryFileReader::new(Cursor::new(bytes), d);
        let (got, err) = all(&mut r);
        assert!(err.is_none());
        // the 1-byte message has no stamp: it keeps the one before
        assert_eq!(got.len(), 2);
        assert_eq!(r.stats().unknown_types, 2);
        assert_eq!(r.stats().first_unknown, Some((2, 21, b'z')));
    }

    #[test]
    fn stamps_going_back_are_counted() {
        let bytes = file(&[delete(9, 0), delete(8, 1)]);
        let mut r = BinaryFileReader::new(Cursor::new(bytes), date(2019, 1, 30));
        let (got, _) = all(&mut r);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].0.ts_ns, got[0].0.ts_ns, "raised to the one before");
        assert_eq!(r.stats().backwards, 1);
    }
}
