//! The gate socket's line protocol, sans-I/O: framing a byte stream into
//! request lines (`LineFramer`) and answering each (`answer`) through the
//! core's check (`feed::check`: request grammar, lookup, verdict, answer
//! text) into a reused buffer. The Unix-socket server and
//! `replay --checks` both use it.

use crate::feed::across::GateRules;
use crate::feed::check::{answer_over, write_error, ProtoError, SymbolLookup, MAX_LINE};

/// Answers one request line (without `\r\n`) at `now` over unnamed feeds
/// (`feeds=` shows each by its position) with the default `[gate]` rules:
/// appends exactly one answer line, `\n`-terminated, to `out`.
pub fn answer(line: &[u8], feeds: &[&dyn SymbolLookup], now: i64, out: &mut Vec<u8>) {
    answer_with_rules(line, feeds, &GateRules::default(), now, out)
}

/// `answer` with these `[gate]` rules.
pub fn answer_with_rules(
    line: &[u8],
    feeds: &[&dyn SymbolLookup],
    rules: &GateRules,
    now: i64,
    out: &mut Vec<u8>,
) {
    match answer_over(line, feeds, rules, now, out) {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

/// One item of a request stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A request line without its `\n` (and without a `\r` before it).
    Line(&'a [u8]),
    /// A line longer than `MAX_LINE`: answer `ERR line too long`; the rest
    /// of it, up to its newline, is skipped.
    TooLong,
}

/// Splits a byte stream into request lines, buffering at most
/// `MAX_LINE + 1` bytes of an incomplete line. An unterminated line at the
/// end of the stream is not a request.
#[derive(Clone, Debug)]
pub struct LineFramer {
    buf: Vec<u8>,
    /// Skipping the rest of an over-long line up to its newline.
    discarding: bool,
}

impl Default for LineFramer {
    fn default() -> Self {
        LineFramer::new()
    }
}

impl LineFramer {
    pub fn new() -> LineFramer {
        LineFramer {
            buf: Vec::with_capacity(MAX_LINE + 1),
            discarding: false,
        }
    }

    /// Bytes of an incomplete line held.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Feeds received bytes; calls `f` for each complete frame, in order.
    /// Lines wholly inside `data` are passed without copying.
    pub fn push(&mut self, mut data: &[u8], mut f: impl FnMut(Frame<'_>)) {
        while !data.is_empty() {
            let Some(pos) = data.iter().position(|&c| c == b'\n') else {
                if !self.discarding {
                    // `MAX_LINE` bytes plus a possible `\r` may still be fine.
                    if self.buf.len() + data.len() > MAX_LINE + 1 {
                        self.buf.clear();
                        self.discarding = true;
                        f(Frame::TooLong);
                    } else {
                        self.buf.extend_from_slice(data);
                    }
                }
                return;
            };
            let chunk = &data[..pos];
            data = &data[pos + 1..];
            if self.discarding {
                self.discarding = false;
                continue;
            }
            let line: &[u8] = if self.buf.is_empty() {
                chunk
            } else if self.buf.len() + chunk.len() > MAX_LINE + 1 {
                self.buf.clear();
                f(Frame::TooLong);
                continue;
            } else {
                self.buf.extend_from_slice(chunk);
                &self.buf
            };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.len() > MAX_LINE {
                f(Frame::TooLong);
            } else {
                f(Frame::Line(line));
            }
            self.buf.clear();
        }
    }
}

/// Answers one frame: a line as `answer`, `TooLong` as `ERR line too long`.
pub fn answer_frame(frame: Frame<'_>, feeds: &[&dyn SymbolLookup], now: i64, out: &mut Vec<u8>) {
    match frame {
        Frame::Line(line) => answer(line, feeds, now, out),
        Frame::TooLong => write_error(out, ProtoError::LineTooLong),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::{Feed, FeedSettings};
    use crate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

    const T0: i64 = 1_796_025_600_000_000_000;
    const MS: i64 = 1_000_000;

    fn feed_with_quote() -> Feed {
        let settings = FeedSettings {
            clock_offset: crate::feed::ClockOffset::Off,
            ..FeedSettings::default()
        };
        let mut f = Feed::new(settings, 1);
        let mut b = PacketBuilder::new();
        let q = Quote::new(
            Symbol::parse("EURUSD").unwrap(),
            4,
            (T0 - 3 * MS) as u64,
            Some(Side {
                px: 1_085_120_000,
                qty: 10,
            }),
            None,
        );
        b.start(SessionId::parse("S1").unwrap(), 1).quote(&q);
        f.on_datagram(0, b.bytes(), T0);
        f
    }

    fn ask(feeds: &[&dyn SymbolLookup], line: &str, now: i64) -> String {
        let mut out = Vec::new();
        answer(line.as_bytes(), feeds, now, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn answers() {
        let f = Feed::new(FeedSettings::default(), 1);
        let mut g = feed_with_quote();
        let feeds: [&dyn SymbolLookup; 2] = [&f, &g];
        assert_eq!(ask(&feeds, "PING", T0), "PONG\n");
        assert_eq!(
            ask(&feeds, "CHECK EURUSD", T0 + 1_500),
            "OK EURUSD seq=4 bid=1.08512@10 ask=- silence_us=1 source_age_us=3001\n"
        );
        assert_eq!(
            ask(&feeds, "CHECK EURUSD stale_ms=0", T0 + 1_500),
            "REJECT EURUSD stale_quote seq=4 bid=1.08512@10 ask=- silence_us=1 source_age_us=3001\n"
        );
        // Equal to the configured value is not looser.
        assert!(ask(&feeds, "CHECK EURUSD stale_ms=500 source_ms=2000", T0).starts_with("OK "));
        assert_eq!(
            ask(&feeds, "CHECK EURUSD stale_ms=501", T0),
            "ERR threshold looser than configured\n"
        );
        assert_eq!(
            ask(&feeds, "CHECK EURUSD source_ms=2001", T0),
            "ERR threshold looser than configured\n"
        );
        assert_eq!(
            ask(&feeds, "CHECK TOOLONGSYMBOL", T0),
            "REJECT TOOLONGSYMBOL unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-\n"
        );
        assert_eq!(
            ask(&feeds, "CHECK GBPUSD stale_ms=100000", T0),
            "REJECT GBPUSD unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-\n"
        );
        assert_eq!(ask(&feeds, "CHECK", T0), "ERR missing symbol\n");
        // Ages truncate toward zero, also when negative.
        assert!(ask(&feeds, "CHECK EURUSD", T0 - 1_999)
            .ends_with(" silence_us=-1 source_age_us=2998\n"));

        // Per-symbol thresholds make a symbol known and bound the request.
        let gbp = Symbol::parse("GBPUSD").unwrap();
        g.set_symbol_thresholds(gbp, 100, 300);
        let feeds: [&dyn SymbolLookup; 2] = [&f, &g];
        assert_eq!(
            ask(&feeds, "CHECK GBPUSD", T0),
            "REJECT GBPUSD no_data seq=- bid=- ask=- silence_us=- source_age_us=-\n"
        );
        assert_eq!(
            ask(&feeds, "CHECK GBPUSD stale_ms=101", T0),
            "ERR threshold looser than configured\n"
        );
    }

    #[test]
    fn every_feed_that_knows_the_symbol_answers() {
        let mut empty = Feed::new(FeedSettings::default(), 1);
        empty.add_symbol(Symbol::parse("EURUSD").unwrap());
        let g = feed_with_quote();
        let feeds: [&dyn SymbolLookup; 2] = [&empty, &g];
        // A feed without a quote takes no part; unnamed feeds are shown by
        // position.
        assert_eq!(
            ask(&feeds, "CHECK EURUSD", T0),
            "OK EURUSD seq=- bid=1.08512@10 ask=- silence_us=0 source_age_us=3000 feeds=0:no_data,1:OK\n"
        );
        assert_eq!(
            ask(&feeds, "CHECK EURUSD feed=1", T0),
            "OK EURUSD seq=4 bid=1.08512@10 ask=- silence_us=0 source_age_us=3000\n"
        );
        assert_eq!(ask(&feeds, "CHECK EURUSD feed=2", T0), "ERR unknown feed\n");
        let feeds: [&dyn SymbolLookup; 1] = [&empty];
        assert!(ask(&feeds, "CHECK EURUSD", T0).starts_with("REJECT EURUSD no_data"));
    }

    fn frames(framer: &mut LineFramer, chunks: &[&[u8]]) -> Vec<String> {
        let mut got = Vec::new();
        for c in chunks {
            framer.push(c, |f| {
                got.push(match f {
                    Frame::Line(l) => String::from_utf8_lossy(l).into_owned(),
                    Frame::TooLong => "<too long>".to_string(),
                })
            });
        }
        got
    }

    #[test]
    fn framer_splits_lines_across_chunks() {
        let mut f = LineFramer::new();
        assert_eq!(
            frames(
                &mut f,
                &[b"PI", b"NG\nCHECK A\r", b"\nCHECK B\n\nX\rY\n", b"tail"]
            ),
            ["PING", "CHECK A", "CHECK B", "", "X\rY"]
        );
        assert_eq!(f.pending(), 4);
    }

    #[test]
    fn framer_line_length_limit() {
        let ok = vec![b'A'; MAX_LINE];
        let long = vec![b'A'; MAX_LINE + 1];
        let mut f = LineFramer::new();
        // Exactly 1024 (+ \r) in one chunk and byte by byte.
        let mut one = ok.clone();
        one.extend_from_slice(b"\r\n");
        assert_eq!(
            frames(&mut f, &[&one]),
            [String::from_utf8(ok.clone()).unwrap()]
        );
        let bytes: Vec<&[u8]> = one.chunks(1).collect();
        assert_eq!(frames(&mut f, &bytes).len(), 1);
        assert_eq!(frames(&mut f, &bytes)[0].len(), MAX_LINE);
        // 1025 bytes: too long, in one chunk or split.
        let mut two = long.clone();
        two.extend_from_slice(b"\nPING\n");
        assert_eq!(frames(&mut f, &[&two]), ["<too long>", "PING"]);
        let bytes: Vec<&[u8]> = two.chunks(7).collect();
        assert_eq!(frames(&mut f, &bytes), ["<too long>", "PING"]);
        // A huge line is reported once, skipped to its newline, and never
        // buffered beyond the limit.
        let huge = vec![b'B'; 100_000];
        let mut got = frames(&mut f, &[&huge[..50_000], &huge[50_000..]]);
        assert!(f.pending() <= MAX_LINE + 1);
        got.extend(frames(&mut f, &[b"xx\r\nPING\n"]));
        assert_eq!(got, ["<too long>", "PING"]);
    }
}
