//! One check as the gate socket and the shared-memory client both answer
//! it (gate.md), sans-I/O: the request line's grammar (`parse_request`),
//! looking a symbol up over feeds (`SymbolLookup`), the verdict with a
//! request's thresholds (`verdict_for`), and the answer line's text
//! (`write_verdict`, `write_error`), written into a reused buffer without
//! any other allocation. The socket's framing and server are `gate`'s.

pub use crate::feed::across::Options;
use crate::feed::across::{
    check_across_then, tighten, Answer, CheckError, Checked, Feeds, GateRules,
};
use crate::feed::verdict::{
    first_reason, judge, Thresholds, Verdict, REASON_NAMES, REASON_ORDER, R_SUSPECT,
};
use crate::feed::view::{FeedView, SymbolView};
use crate::feed::{Feed, Publish};
use crate::wire::{write_price, Side, Symbol};

/// Longest request line, not counting `\r\n`.
pub const MAX_LINE: usize = 1024;

/// A parsed request line (gate.md "Requests").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `CHECK <SYMBOL> [stale_ms=<n>] [source_ms=<n>] [feed=<name>]`.
    /// `symbol` is the token as sent (printable ASCII; it may be longer
    /// than 20 bytes, which no feed can know: `unknown_symbol`); `feed` the
    /// name as sent (resolved against the feeds by the caller).
    Check {
        symbol: &'a [u8],
        stale_ms: Option<u64>,
        source_ms: Option<u64>,
        feed: Option<&'a [u8]>,
    },
    Ping,
}

/// Why a request is answered `ERR <reason>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    LineTooLong,
    Empty,
    /// Tokens must be separated by single spaces (no leading, trailing or
    /// doubled space).
    BadSpacing,
    UnknownRequest,
    MissingSymbol,
    /// A symbol with bytes other than printable ASCII.
    InvalidSymbol,
    UnknownOption,
    RepeatedOption,
    /// An option value that is not a whole number (or overflows u64).
    BadValue,
    /// A threshold looser than the symbol's configured one.
    LooserThanConfigured,
    /// `PING` takes no argument.
    UnexpectedArgument,
    /// `feed=<name>` names no configured feed.
    UnknownFeed,
}

impl ProtoError {
    pub fn reason(self) -> &'static str {
        match self {
            ProtoError::LineTooLong => "line too long",
            ProtoError::Empty => "empty request",
            ProtoError::BadSpacing => "tokens must be separated by single spaces",
            ProtoError::UnknownRequest => "unknown request",
            ProtoError::MissingSymbol => "missing symbol",
            ProtoError::InvalidSymbol => "invalid symbol",
            ProtoError::UnknownOption => "unknown option",
            ProtoError::RepeatedOption => "repeated option",
            ProtoError::BadValue => "option value is not a whole number",
            ProtoError::LooserThanConfigured => "threshold looser than configured",
            ProtoError::UnexpectedArgument => "unexpected argument",
            ProtoError::UnknownFeed => "unknown feed",
        }
    }
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for ProtoError {}

/// A whole number: ASCII digits only, fits u64.
fn parse_whole(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &c in v {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(n)
}

/// Most tokens a request can usefully have (`CHECK <SYM>` and three
/// options, plus one to tell "too many").
const MAX_TOKENS: usize = 6;

/// The token at `(start, end)` of `line`. A function always inlined: as a
/// closure the optimizer left it out of line, a call a request.
#[inline(always)]
fn token(line: &[u8], (start, end): (usize, usize)) -> &[u8] {
    &line[start..end]
}

/// Parses one request line (without its `\r\n`). Options are fully
/// checked here, before any symbol lookup. One pass splits the line into
/// tokens (single spaces only) and notes which contain bytes other than
/// printable ASCII.
pub fn parse_request(line: &[u8]) -> Result<Request<'_>, ProtoError> {
    if line.is_empty() {
        return Err(ProtoError::Empty);
    }
    if line.len() > MAX_LINE {
        return Err(ProtoError::LineTooLong);
    }
    let mut tokens = [(0usize, 0usize); MAX_TOKENS];
    let mut count = 0;
    let mut start = 0;
    let mut unprintable = 0u32; // bit i: token i has a byte outside 0x21..=0x7e
    for (i, &c) in line.iter().enumerate() {
        if c == b' ' {
            if i == start {
                // Leading or doubled space.
                return Err(ProtoError::BadSpacing);
            }
            if count < MAX_TOKENS {
                tokens[count] = (start, i);
            }
            count += 1;
            start = i + 1;
        } else if !c.is_ascii_graphic() {
            unprintable |= 1 << count.min(31);
        }
    }
    if start == line.len() {
        // Trailing space.
        return Err(ProtoError::BadSpacing);
    }
    if count < MAX_TOKENS {
        tokens[count] = (start, line.len());
    }
    count += 1;
    match token(line, tokens[0]) {
        b"PING" => match count {
            1 => Ok(Request::Ping),
            _ => Err(ProtoError::UnexpectedArgument),
        },
        b"CHECK" => {
            if count < 2 {
                return Err(ProtoError::MissingSymbol);
            }
            let mut stale_ms = None;
            let mut source_ms = None;
            let mut feed = None;
            // At most three options can be valid: a fourth is repeated or
            // unknown, so looking at MAX_TOKENS tokens always finds the error.
            for &t in &tokens[2..count.min(MAX_TOKENS)] {
                let opt = token(line, t);
                let eq = opt
                    .iter()
                    .position(|&c| c == b'=')
                    .ok_or(ProtoError::UnknownOption)?;
                let (name, value) = (&opt[..eq], &opt[eq + 1..]);
                if name == b"feed" {
                    if feed.is_some() {
                        return Err(ProtoError::RepeatedOption);
                    }
                    feed = Some(value);
                    continue;
                }
                let slot = match name {
                    b"stale_ms" => &mut stale_ms,
                    b"source_ms" => &mut source_ms,
                    _ => return Err(ProtoError::UnknownOption),
                };
                if slot.is_some() {
                    return Err(ProtoError::RepeatedOption);
                }
                *slot = Some(parse_whole(value).ok_or(ProtoError::BadValue)?);
            }
            if unprintable & 2 != 0 {
                return Err(ProtoError::InvalidSymbol);
            }
            Ok(Request::Check {
                symbol: token(line, tokens[1]),
                stale_ms,
                source_ms,
                feed,
            })
        }
        _ => Err(ProtoError::UnknownRequest),
    }
}

/// `parse_request`, with `feed=<name>` resolved to a feed's index by
/// `resolve` (gate.md: `ERR unknown feed` is checked with the other
/// options, before the symbol).
pub fn parse_check<'a>(
    line: &'a [u8],
    resolve: impl Fn(&[u8]) -> Option<usize>,
) -> Result<Parsed<'a>, ProtoError> {
    let req = match parse_request(line) {
        Ok(r) => r,
        Err(ProtoError::InvalidSymbol) => {
            // The options were fine; an unknown feed still comes first.
            if let Some(name) = feed_option(line) {
                if resolve(name).is_none() {
                    return Err(ProtoError::UnknownFeed);
                }
            }
            return Err(ProtoError::InvalidSymbol);
        }
        Err(e) => return Err(e),
    };
    Ok(match req {
        Request::Ping => Parsed::Ping,
        Request::Check {
            symbol,
            stale_ms,
            source_ms,
            feed,
        } => Parsed::Check {
            symbol,
            opts: Options {
                stale_ms,
                source_ms,
                feed: match feed {
                    None => None,
                    Some(name) => Some(resolve(name).ok_or(ProtoError::UnknownFeed)?),
                },
            },
        },
    })
}

/// The value of a `feed=` option of a line whose options parsed.
fn feed_option(line: &[u8]) -> Option<&[u8]> {
    line.split(|&c| c == b' ')
        .skip(2)
        .find_map(|t| t.strip_prefix(b"feed="))
}

/// A request with its options resolved (`parse_check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    Check { symbol: &'a [u8], opts: Options },
    Ping,
}

/// Answers one request line (without `\r\n`) over `feeds` at `now`:
/// appends exactly one `\n`-terminated answer line to `out` (gate.md), or
/// returns the feeds' read error (memory another process writes).
#[inline]
pub fn answer_over<F: Feeds + ?Sized>(
    line: &[u8],
    feeds: &F,
    rules: &GateRules,
    now: i64,
    out: &mut Vec<u8>,
) -> Result<(), F::Error> {
    let parsed = parse_check(line, |name| {
        (0..feeds.count()).find(|&i| feeds.name(i) == name)
    });
    match parsed {
        Err(e) => write_error(out, e),
        Ok(Parsed::Ping) => out.extend_from_slice(b"PONG\n"),
        Ok(Parsed::Check { symbol, opts }) => {
            let written =
                check_across_then(feeds, to_symbol(symbol), &opts, rules, now, |c| match c {
                    Checked::One(v) => write_verdict(out, symbol, v),
                    Checked::Several(a) => write_answer(out, symbol, a, |i| feeds.name(i)),
                });
            match written {
                Ok(()) => {}
                Err(CheckError::Proto(e)) => write_error(out, e),
                Err(CheckError::Read(e)) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Where a check finds a symbol: a feed (single-threaded use: `Feed`), or
/// the daemon's concurrent table. Returns the symbol's view, its feed's
/// view and the symbol's configured thresholds.
pub trait SymbolLookup {
    fn lookup(&self, symbol: Symbol) -> Option<(SymbolView, FeedView, Thresholds)>;
}

impl<P: Publish> SymbolLookup for Feed<P> {
    /// A feed of one channel (most) copies its view straight into the
    /// answer; a feed of several units (venues.md `cboe-pitch`, Units and
    /// symbols) reads the symbol's unit out of line. One return of a view
    /// chosen by a branch had the compiler stage both views through the
    /// stack: 20 instructions a check on every feed.
    #[inline]
    fn lookup(&self, symbol: Symbol) -> Option<(SymbolView, FeedView, Thresholds)> {
        let (slot, view) = self.symbol_view(symbol)?;
        if self.has_units() {
            return Some(lookup_of_units(self, slot, view));
        }
        Some((*view, *self.feed_view(), Thresholds::of(view)))
    }
}

/// `Feed::lookup` of a symbol on a feed of several units: its view on the
/// view of the units that reach it (`Feed::feed_view_for`).
#[inline(never)]
fn lookup_of_units<P: Publish>(
    feed: &Feed<P>,
    slot: u32,
    view: &SymbolView,
) -> (SymbolView, FeedView, Thresholds) {
    (*view, feed.feed_view_for(slot), Thresholds::of(view))
}

/// The token as a symbol: `None` when longer than 20 bytes (gate.md: such
/// a symbol cannot exist).
#[inline]
pub fn to_symbol(token: &[u8]) -> Option<Symbol> {
    Symbol::from_raw(token)
}

/// The verdict of a check on one feed once its symbol is looked up
/// (`None`: unknown), with the request's thresholds applied: a request may
/// only tighten them.
#[inline]
pub fn verdict_for(
    found: Option<(SymbolView, FeedView, Thresholds)>,
    stale_ms: Option<u64>,
    source_ms: Option<u64>,
    now: i64,
) -> Result<Verdict, ProtoError> {
    Ok(match found {
        None => judge(None, &FeedView::default(), now, &Thresholds::default()),
        Some((view, feed, t)) => {
            let t = tighten(t, stale_ms, source_ms)?;
            judge(Some(&view), &feed, now, &t)
        }
    })
}

/// `ERR <reason>\n`.
pub fn write_error(out: &mut Vec<u8>, e: ProtoError) {
    out.extend_from_slice(b"ERR ");
    out.extend_from_slice(e.reason().as_bytes());
    out.push(b'\n');
}

/// The answer line of a check: a feed's verdict line, or with several
/// feeds the combined one (`seq=-`, `feeds=<name>:<verdict>,...` at the
/// end; gate.md "One symbol on several feeds"). `name` gives a feed's name
/// by its index.
#[inline]
pub fn write_answer<'n>(
    out: &mut Vec<u8>,
    symbol: &[u8],
    a: &Answer,
    name: impl Fn(usize) -> &'n [u8],
) {
    if !a.across() {
        return write_verdict(out, symbol, &a.verdict);
    }
    format_line(out, symbol, &a.verdict, false);
    out.put(b" feeds=");
    for (k, item) in a.feeds.iter().enumerate() {
        if k > 0 {
            out.put_byte(b',');
        }
        out.put(name(item.feed as usize));
        out.put_byte(b':');
        out.put(first_reason(item.reasons).unwrap_or("OK").as_bytes());
    }
    out.put_byte(b'\n');
}

/// An `OK ...` or `REJECT ...` line for `symbol` (the token as asked),
/// `\n`-terminated (gate.md "Verdict lines").
pub fn write_verdict(out: &mut Vec<u8>, symbol: &[u8], v: &Verdict) {
    if symbol.len() <= MAX_FAST_SYMBOL {
        // Hot path: the line is built on the stack without a capacity check
        // per piece, then copied once.
        let mut line = StackLine::new();
        format_verdict(&mut line, symbol, v);
        out.extend_from_slice(line.as_bytes());
    } else {
        format_verdict(out, symbol, v);
    }
}

fn format_verdict<S: TextSink>(out: &mut S, symbol: &[u8], v: &Verdict) {
    format_line(out, symbol, v, true);
    out.put_byte(b'\n');
}

/// A verdict line without its `\n`; `seq=-` unless `with_seq`.
#[inline]
fn format_line<S: TextSink>(out: &mut S, symbol: &[u8], v: &Verdict, with_seq: bool) {
    if v.ok() {
        out.put(b"OK ");
        out.put(symbol);
    } else {
        out.put(b"REJECT ");
        out.put(symbol);
        let mut sep = b' ';
        for bit in REASON_ORDER {
            if v.reasons & (1 << bit) != 0 {
                out.put_byte(sep);
                out.put(REASON_NAMES[bit as usize].as_bytes());
                sep = b',';
            }
        }
    }
    if v.has_quote {
        if with_seq {
            out.put(b" seq=");
            out.put_digits(v.seq);
        } else {
            out.put(b" seq=-");
        }
        out.put(b" bid=");
        put_side(out, v.bid);
        out.put(b" ask=");
        put_side(out, v.ask);
        out.put(b" silence_us=");
        put_i64(out, v.silence_ns / 1000);
        out.put(b" source_age_us=");
        put_i64(out, v.source_age_ns / 1000);
    } else {
        out.put(b" seq=- bid=- ask=- silence_us=- source_age_us=-");
    }
    if v.reasons & R_SUSPECT != 0 {
        out.put(b" suspect=");
        out.put(v.cause.as_str().as_bytes());
    }
}

/// `<px>@<qty>`, or `-` for an empty side.
#[inline]
fn put_side<S: TextSink>(out: &mut S, side: Option<Side>) {
    match side {
        None => out.put_byte(b'-'),
        Some(s) => {
            put_price(out, s.px);
            out.put_byte(b'@');
            out.put_digits(s.qty);
        }
    }
}

/// Where answer text goes: any `Vec`, or a fixed line on the stack.
trait TextSink {
    fn put(&mut self, s: &[u8]);
    fn put_byte(&mut self, b: u8);
    /// `n` in decimal.
    fn put_digits(&mut self, n: u64);
}

impl TextSink for Vec<u8> {
    #[inline]
    fn put(&mut self, s: &[u8]) {
        self.extend_from_slice(s);
    }
    #[inline]
    fn put_byte(&mut self, b: u8) {
        self.push(b);
    }
    #[inline]
    fn put_digits(&mut self, n: u64) {
        let mut buf = [0u8; 20];
        let len = decimal_len(n);
        write_digits(&mut buf[..len], n);
        self.extend_from_slice(&buf[..len]);
    }
}

/// Longest symbol token formatted on the stack.
const MAX_FAST_SYMBOL: usize = 64;
/// The longest verdict line of one feed is under 300 bytes plus the symbol.
const STACK_LINE: usize = 384;

struct StackLine {
    buf: [u8; STACK_LINE],
    len: usize,
}

impl StackLine {
    #[inline]
    fn new() -> StackLine {
        StackLine {
            buf: [0; STACK_LINE],
            len: 0,
        }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl TextSink for StackLine {
    #[inline(always)]
    fn put(&mut self, s: &[u8]) {
        self.buf[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }
    #[inline(always)]
    fn put_byte(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }
    #[inline]
    fn put_digits(&mut self, n: u64) {
        let end = self.len + decimal_len(n);
        write_digits(&mut self.buf[self.len..end], n);
        self.len = end;
    }
}

#[inline]
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// Fills `out` (exactly `decimal_len(n)` bytes) with the digits of `n`,
/// two per division.
#[inline]
fn write_digits(out: &mut [u8], mut n: u64) {
    let mut i = out.len();
    while n >= 100 {
        let r = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        out[i..i + 2].copy_from_slice(&DIGIT_PAIRS[r..r + 2]);
    }
    if n >= 10 {
        let r = n as usize * 2;
        out[i - 2..i].copy_from_slice(&DIGIT_PAIRS[r..r + 2]);
    } else {
        out[i - 1] = b'0' + n as u8;
    }
}

#[inline]
fn put_i64<S: TextSink>(out: &mut S, n: i64) {
    if n < 0 {
        out.put_byte(b'-');
    }
    out.put_digits(n.unsigned_abs());
}

/// The same text as `wire::write_price` (exact decimal of a fixed-point
/// price x 10^9, no exponent, no trailing zeros), written without the
/// formatting machinery: the check's hot path. A test holds the two equal.
#[inline]
fn put_price<S: TextSink>(out: &mut S, px: i64) {
    if px < 0 {
        out.put_byte(b'-');
    }
    let abs = px.unsigned_abs();
    out.put_digits(abs / 1_000_000_000);
    let frac = abs % 1_000_000_000;
    if frac != 0 {
        // `.` and exactly nine digits, then the trailing zeros cut off.
        let mut buf = [b'0'; 10];
        buf[0] = b'.';
        let len = decimal_len(frac);
        write_digits(&mut buf[10 - len..], frac);
        let mut end = buf.len();
        while buf[end - 1] == b'0' {
            end -= 1;
        }
        out.put(&buf[..end]);
    }
}

/// `put_price` into a `Vec`.
pub fn write_price_bytes(out: &mut Vec<u8>, px: i64) {
    put_price(out, px)
}

/// `wire::write_price` into a byte buffer (the reference formatter).
pub fn write_price_fmt(out: &mut Vec<u8>, px: i64) {
    struct VecWriter<'a>(&'a mut Vec<u8>);
    impl std::fmt::Write for VecWriter<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.extend_from_slice(s.as_bytes());
            Ok(())
        }
    }
    write_price(&mut VecWriter(out), px).expect("writing to a Vec cannot fail");
}

/// "00" to "99": two digits per division.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Decimal digits of `n`, without the formatting machinery.
#[inline]
pub fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.put_digits(n);
}

#[inline]
pub fn write_i64(out: &mut Vec<u8>, n: i64) {
    put_i64(out, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sym: &str, stale: Option<u64>, source: Option<u64>) -> Request<'_> {
        Request::Check {
            symbol: sym.as_bytes(),
            stale_ms: stale,
            source_ms: source,
            feed: None,
        }
    }

    #[test]
    fn requests_parse() {
        assert_eq!(parse_request(b"PING"), Ok(Request::Ping));
        assert_eq!(
            parse_request(b"CHECK EURUSD"),
            Ok(check("EURUSD", None, None))
        );
        assert_eq!(
            parse_request(b"CHECK EURUSD stale_ms=100 source_ms=200"),
            Ok(check("EURUSD", Some(100), Some(200)))
        );
        assert_eq!(
            parse_request(b"CHECK EURUSD source_ms=200 stale_ms=007"),
            Ok(check("EURUSD", Some(7), Some(200)))
        );
        // Longer than 8: a valid request for a symbol that cannot exist.
        assert_eq!(
            parse_request(b"CHECK TOOLONGSYMBOL"),
            Ok(check("TOOLONGSYMBOL", None, None))
        );
    }

    #[test]
    fn bad_requests_are_errors() {
        use ProtoError::*;
        let cases: &[(&[u8], ProtoError)] = &[
            (b"", Empty),
            (b"PING x", UnexpectedArgument),
            (b"ping", UnknownRequest),
            (b"check EURUSD", UnknownRequest),
            (b"STATUS", UnknownRequest),
            (b"CHECK", MissingSymbol),
            (b"CHECK  EURUSD", BadSpacing),
            (b"CHECK EURUSD ", BadSpacing),
            (b" PING", BadSpacing),
            (b"CHECK EURUSD stale_ms=1 stale_ms=2", RepeatedOption),
            (b"CHECK EURUSD source_ms=1 source_ms=1", RepeatedOption),
            (b"CHECK EURUSD STALE_MS=1", UnknownOption),
            (b"CHECK EURUSD max_ms=1", UnknownOption),
            (b"CHECK EURUSD stale_ms", UnknownOption),
            (b"CHECK EURUSD stale_ms=", BadValue),
            (b"CHECK EURUSD stale_ms=-1", BadValue),
            (b"CHECK EURUSD stale_ms=+1", BadValue),
            (b"CHECK EURUSD stale_ms=1.5", BadValue),
            (b"CHECK EURUSD stale_ms=1e3", BadValue),
            (b"CHECK EURUSD stale_ms=99999999999999999999", BadValue),
            (b"CHECK EUR\tUSD", InvalidSymbol),
            (b"CHECK EUR\xc3\xa9", InvalidSymbol),
            // Options are checked before the symbol.
            (b"CHECK EUR\tUSD stale_ms=x", BadValue),
        ];
        for (line, err) in cases {
            assert_eq!(
                parse_request(line),
                Err(*err),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert_eq!(parse_request(&[b'A'; MAX_LINE + 1]), Err(LineTooLong));
    }

    #[test]
    fn integers() {
        let mut out = Vec::new();
        write_u64(&mut out, 0);
        out.push(b' ');
        write_u64(&mut out, u64::MAX);
        out.push(b' ');
        write_i64(&mut out, i64::MIN);
        out.push(b' ');
        write_i64(&mut out, -7);
        assert_eq!(
            out,
            b"0 18446744073709551615 -9223372036854775808 -7".to_vec()
        );
        for n in (0..100_000u64).chain((0..64).map(|s| 1u64 << s)).chain([
            9,
            10,
            99,
            100,
            999_999_999_999,
            10u64.pow(19),
            u64::MAX - 1,
        ]) {
            out.clear();
            write_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn fast_price_text_equals_wire_write_price() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = vec![
            0,
            1,
            -1,
            10,
            100,
            1_000_000_000,
            -500_000_000,
            1_085_120_000,
            100_000_000_001,
            i64::MIN,
            i64::MAX,
            i64::MIN + 1,
        ];
        for _ in 0..100_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Mix magnitudes and trailing zeros.
            let shift = seed % 64;
            let v = (seed as i64) >> shift;
            values.push(v);
            values.push(v / 1000 * 1000);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for v in values {
            a.clear();
            b.clear();
            write_price_bytes(&mut a, v);
            write_price_fmt(&mut b, v);
            assert_eq!(a, b, "{v}");
        }
    }

    /// The grammar as gate.md words it, written plainly (several passes).
    fn reference_parse(line: &[u8]) -> Result<Request<'_>, ProtoError> {
        use ProtoError::*;
        if line.is_empty() {
            return Err(Empty);
        }
        if line.len() > MAX_LINE {
            return Err(LineTooLong);
        }
        let tokens: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
        if tokens.iter().any(|t| t.is_empty()) {
            return Err(BadSpacing);
        }
        match tokens[0] {
            b"PING" if tokens.len() == 1 => Ok(Request::Ping),
            b"PING" => Err(UnexpectedArgument),
            b"CHECK" => {
                let symbol = *tokens.get(1).ok_or(MissingSymbol)?;
                let (mut stale_ms, mut source_ms, mut feed) = (None, None, None);
                for opt in &tokens[2..] {
                    if let Some(name) = opt.strip_prefix(b"feed=") {
                        if feed.replace(name).is_some() {
                            return Err(RepeatedOption);
                        }
                        continue;
                    }
                    let text = std::str::from_utf8(opt).map_err(|_| UnknownOption)?;
                    let (name, value) = text.split_once('=').ok_or(UnknownOption)?;
                    let slot = match name {
                        "stale_ms" => &mut stale_ms,
                        "source_ms" => &mut source_ms,
                        _ => return Err(UnknownOption),
                    };
                    if slot.is_some() {
                        return Err(RepeatedOption);
                    }
                    if value.is_empty() || !value.bytes().all(|c| c.is_ascii_digit()) {
                        return Err(BadValue);
                    }
                    *slot = Some(value.parse::<u64>().map_err(|_| BadValue)?);
                }
                if !symbol.iter().all(|c| c.is_ascii_graphic()) {
                    return Err(InvalidSymbol);
                }
                Ok(Request::Check {
                    symbol,
                    stale_ms,
                    source_ms,
                    feed,
                })
            }
            _ => Err(UnknownRequest),
        }
    }

    #[test]
    fn parser_matches_the_plain_reference() {
        let words: &[&[u8]] = &[
            b"CHECK",
            b"PING",
            b"check",
            b"EURUSD",
            b"TOOLONGSYMBOL",
            b"stale_ms=5",
            b"stale_ms=05",
            b"source_ms=7",
            b"stale_ms=",
            b"stale_ms=x",
            b"source_ms",
            b"x=1",
            b"=",
            b"A\tB",
            b"\xff",
            b"stale_ms=99999999999999999999",
            b"feed=itch",
            b"feed=",
            b"feed=a=b",
            b"",
        ];
        let mut seed = 0x0000_ddb1_a5e5_u64;
        let mut rnd = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut line = Vec::new();
        for _ in 0..200_000 {
            line.clear();
            let n = 1 + rnd(8);
            for i in 0..n {
                if i > 0 {
                    line.extend_from_slice(if rnd(10) == 0 { b"  " } else { b" " });
                }
                line.extend_from_slice(words[rnd(words.len())]);
            }
            if rnd(20) == 0 {
                line.push(b' ');
            }
            assert_eq!(
                parse_request(&line),
                reference_parse(&line),
                "{}",
                String::from_utf8_lossy(&line)
            );
        }
    }

    #[test]
    fn stack_and_vec_lines_are_the_same_text() {
        use crate::feed::SuspectCause;
        let mut seed = 0x51_7cc1_b727_220au64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..20_000 {
            let side = |r: u64, x: u64| {
                (!r.is_multiple_of(3)).then_some(Side {
                    px: x as i64 >> (r % 64),
                    qty: x >> (r % 61),
                })
            };
            let (r1, r2, r3) = (rnd(), rnd(), rnd());
            let v = Verdict {
                reasons: (r1 % 128) as u8,
                cause: SuspectCause::from_u8((r2 % 7) as u8),
                has_quote: !r3.is_multiple_of(4),
                seq: rnd() >> (r1 % 64),
                bid: side(r2, rnd()),
                ask: side(r3, rnd()),
                silence_ns: rnd() as i64 >> (r2 % 64),
                source_age_ns: rnd() as i64 >> (r3 % 64),
            };
            let symbol =
                &b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                    [..i % 70];
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            write_verdict(&mut fast, symbol, &v);
            format_verdict(&mut slow, symbol, &v);
            assert_eq!(fast, slow);
        }
    }
}
