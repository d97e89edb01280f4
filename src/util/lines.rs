//! Reading lines with a bound on their length: an input without a newline
//! (`/dev/zero`, a corrupt or hostile file) must not grow a buffer without
//! limit.

use std::io::{self, BufRead};

/// What `read_line` read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// End of input: nothing read.
    Eof,
    /// A line (in the buffer, with its `\n` when it had one).
    Read,
    /// The line is longer than the bound: the buffer holds its first `max`
    /// bytes, the rest is still to be read (`skip_line` drops it; an input
    /// that never ends the line, such as `/dev/zero`, is never drained).
    TooLong,
}

/// Reads one line of at most `max` bytes (its `\n` not counted) into
/// `buf` (cleared first). At most `max` bytes plus the `\n` are ever in
/// `buf`: a longer line stops the read at the bound.
pub fn read_line<R: BufRead + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(if buf.is_empty() {
                Line::Eof
            } else {
                Line::Read
            });
        }
        let newline = chunk.iter().position(|&c| c == b'\n');
        let body = newline.unwrap_or(chunk.len());
        if buf.len() + body > max {
            let room = max - buf.len();
            buf.extend_from_slice(&chunk[..room]);
            r.consume(room);
            return Ok(Line::TooLong);
        }
        let take = newline.map_or(body, |i| i + 1);
        buf.extend_from_slice(&chunk[..take]);
        r.consume(take);
        if newline.is_some() {
            return Ok(Line::Read);
        }
    }
}

/// Reads and drops the rest of a line, through its `\n`, keeping nothing:
/// after `Line::TooLong`, to go on with the next line. Reads until a `\n`
/// or the end of input, however far.
pub fn skip_line<R: BufRead + ?Sized>(r: &mut R) -> io::Result<()> {
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(());
        }
        match chunk.iter().position(|&c| c == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = chunk.len();
                r.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_within_the_bound_and_beyond() {
        let text = b"abc\n\nabcdef\nabcd\nxy";
        // A reader that hands out 2 bytes at a time.
        let mut r = io::BufReader::with_capacity(2, &text[..]);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        loop {
            let l = read_line(&mut r, &mut buf, 4).unwrap();
            if l == Line::Eof {
                break;
            }
            got.push((l, String::from_utf8(buf.clone()).unwrap()));
            assert!(buf.len() <= 5);
            if l == Line::TooLong {
                skip_line(&mut r).unwrap();
            }
        }
        assert_eq!(
            got,
            [
                (Line::Read, "abc\n".to_string()),
                (Line::Read, "\n".to_string()),
                (Line::TooLong, "abcd".to_string()),
                (Line::Read, "abcd\n".to_string()),
                (Line::Read, "xy".to_string()),
            ]
        );
    }

    #[test]
    fn an_endless_line_is_cut_not_held() {
        // Endless: the read stops at the bound.
        let mut r = io::BufReader::new(io::repeat(0));
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 1000).unwrap(), Line::TooLong);
        assert_eq!(buf.len(), 1000);
        assert!(buf.capacity() < 1 << 20);
        // Long but ended: skipped without being kept.
        let mut r = io::BufReader::new(io::Read::chain(
            io::Read::take(io::repeat(b'a'), 10 << 20),
            &b"\nnext\n"[..],
        ));
        assert_eq!(read_line(&mut r, &mut buf, 1000).unwrap(), Line::TooLong);
        skip_line(&mut r).unwrap();
        assert_eq!(read_line(&mut r, &mut buf, 1000).unwrap(), Line::Read);
        assert_eq!(buf, b"next\n");
        assert!(buf.capacity() < 1 << 20);
    }
}
