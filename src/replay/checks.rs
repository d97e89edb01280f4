//! `replay --checks`: lines `<unix_ns> <request line>`, each answered as
//! the gate would have answered it at that time, by the same
//! `gate::protocol::answer` the socket uses, after every datagram stamped
//! at or before it and before any later one.

use std::fmt::Write as _;

use super::engine::Replay;
use super::progress::Progress;
use crate::capture::stream::CaptureStream;

/// Why a checks-file line is answered `ERR` before it reaches the gate.
fn split_check(line: &[u8]) -> Result<(i64, &[u8]), &'static str> {
    let (stamp, rest) = match line.iter().position(|&c| c == b' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &[][..]),
    };
    let digits = stamp.strip_prefix(b"-").unwrap_or(stamp);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err("missing timestamp");
    }
    let t = std::str::from_utf8(stamp)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or("timestamp out of range")?;
    Ok((t, rest))
}

/// Longest line of a checks file, without its `\n`: a timestamp (at most
/// 20 bytes with its sign), a space and a request line as long as the
/// socket takes (`MAX_LINE`), plus a `\r`.
pub const MAX_CHECK_LINE: usize = 22 + crate::feed::check::MAX_LINE;

/// Why the checks stopped before the end of their file.
#[derive(Debug)]
pub enum ChecksError {
    /// Line `line` (from 1) is longer than `MAX_CHECK_LINE`.
    TooLong {
        line: u64,
    },
    Read {
        line: u64,
        source: std::io::Error,
    },
}

impl std::fmt::Display for ChecksError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChecksError::TooLong { line } => write!(
                f,
                "line {line} is longer than {MAX_CHECK_LINE} bytes (a timestamp and a request line of at most {} bytes)",
                crate::feed::check::MAX_LINE
            ),
            ChecksError::Read { line, source } => write!(f, "reading line {line}: {source}"),
        }
    }
}

impl std::error::Error for ChecksError {}

/// Answers every line of `checks` against the capture streamed into
/// `replay`; appends one answer line per check to `out`. Blank lines and
/// lines starting with `#` are not checks and get no answer. A stream that
/// ends in an error stops the answers at the check it was reading for
/// (the caller reports the error): later answers would miss data. The
/// checks are read a line at a time, each at most `MAX_CHECK_LINE` bytes:
/// a longer one stops the answers there, with an error naming it.
pub fn run_checks<C: std::io::BufRead>(
    replay: &mut Replay,
    cap: &mut CaptureStream,
    checks: &mut C,
    out: &mut Vec<u8>,
    progress: &mut Progress,
) -> Result<(), ChecksError> {
    use crate::util::lines::{read_line, Line};
    let mut clock: Option<i64> = None;
    let mut buf = Vec::with_capacity(256);
    let mut line_no = 0u64;
    loop {
        line_no += 1;
        match read_line(checks, &mut buf, MAX_CHECK_LINE) {
            Ok(Line::Eof) => return Ok(()),
            Ok(Line::Read) => {}
            Ok(Line::TooLong) => return Err(ChecksError::TooLong { line: line_no }),
            Err(source) => {
                return Err(ChecksError::Read {
                    line: line_no,
                    source,
                })
            }
        }
        let raw = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let (t, request) = match split_check(line) {
            Ok(v) => v,
            Err(reason) => {
                let _ = writeln!(Utf8(out), "ERR {reason}");
                continue;
            }
        };
        if clock.is_some_and(|c| t < c) {
            // does not move the clock
            out.extend_from_slice(b"ERR check stamped earlier than the previous check\n");
            continue;
        }
        while let Some(d) = cap.next_through(t) {
            replay.on_datagram(d.src, d.dst, d.payload, d.ts);
            let ts = d.ts;
            progress.tick(cap.released(), ts);
        }
        if cap.error().is_some() {
            return Ok(());
        }
        replay.advance(t);
        replay.answer(request, t, out);
        clock = Some(t);
    }
}

/// `fmt::Write` over a byte buffer.
struct Utf8<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Utf8<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_lines_need_a_timestamp() {
        assert_eq!(split_check(b"12 CHECK X"), Ok((12, &b"CHECK X"[..])));
        assert_eq!(split_check(b"-5 PING"), Ok((-5, &b"PING"[..])));
        assert_eq!(split_check(b"12"), Ok((12, &b""[..])));
        assert_eq!(split_check(b"CHECK X"), Err("missing timestamp"));
        assert_eq!(split_check(b" 12 CHECK X"), Err("missing timestamp"));
        assert_eq!(split_check(b"1x CHECK X"), Err("missing timestamp"));
        assert_eq!(
            split_check(b"99999999999999999999 PING"),
            Err("timestamp out of range")
        );
    }
}
