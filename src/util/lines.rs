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
    /// A line longer than the bound: skipped through its `\n` (or the end
    /// of input); the buffer holds its first `max` bytes.
    TooLong,
}

/// Reads one line of at most `max` bytes (its `\n` not counted) into
/// `buf` (cleared first). A longer line is consumed and dropped, never
/// held whole: at most `max + 1` bytes are ever in `buf`.
pub fn read_line<R: BufRead + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let (done, used) = {
            let chunk = match r.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                return Ok(match (too_long, buf.is_empty()) {
                    (true, _) => Line::TooLong,
                    (false, true) => Line::Eof,
                    (false, false) => Line::Read,
                });
            }
            let (take, done) = match chunk.iter().position(|&c| c == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if !too_long {
                let body = if done { take - 1 } else { take };
                if buf.len() + body > max {
                    too_long = true;
                    let room = max - buf.len();
                    buf.extend_from_slice(&chunk[..room]);
                } else {
                    buf.extend_from_slice(&chunk[..take]);
                }
            }
            (done, take)
        };
        r.consume(used);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Read });
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
        let mut r = io::BufReader::new(io::Read::take(io::repeat(0), 10 << 20));
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 1000).unwrap(), Line::TooLong);
        assert_eq!(buf.len(), 1000);
        assert!(buf.capacity() < 1 << 20);
        assert_eq!(read_line(&mut r, &mut buf, 1000).unwrap(), Line::Eof);
    }
}
