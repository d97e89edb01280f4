//! Compressed captures (I/O): reading `.pcap.gz` / `.pcap.zst` (and pcapng
//! in either) by their content, and writing them.
//!
//! Whether a file is compressed is decided by its first bytes (gzip
//! `1f 8b`, zstd `28 b5 2f fd`), never by its name, so a renamed or
//! extension-less file reads the same. Gzip is read with a multi-member
//! decoder: `cat a.gz b.gz` and files written by parallel gzip tools hold
//! several members, and a single-member decoder would stop silently after
//! the first. A zstd stream may likewise hold several frames; all are read.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// Reads from the file and from the decoder go through buffers this large.
pub const BUF: usize = 1 << 16;

/// How a capture is (or is to be) compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }

    /// From a file's first bytes.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&ZSTD_MAGIC) {
            Compression::Zstd
        } else if head.starts_with(&GZIP_MAGIC) {
            Compression::Gzip
        } else {
            Compression::None
        }
    }

    /// From a file name (`.gz`, `.zst`): what to write when not told.
    pub fn from_name(path: &Path) -> Compression {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Compression::Gzip,
            Some("zst" | "zstd") => Compression::Zstd,
            _ => Compression::None,
        }
    }

    /// The level used when none is given: zstd's own default (3: fast,
    /// already smaller than gzip -6), gzip's usual 6.
    pub fn default_level(self) -> i32 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 6,
            Compression::Zstd => 3,
        }
    }

    /// Levels the encoder accepts.
    pub fn check_level(self, level: i32) -> io::Result<()> {
        let ok = match self {
            Compression::None => true,
            Compression::Gzip => (0..=9).contains(&level),
            Compression::Zstd => zstd::compression_level_range().contains(&level),
        };
        if ok {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{level} is not a {} compression level", self.name()),
            ))
        }
    }
}

/// `--compress` and `--compress-level` of the commands that write captures.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct CompressArgs {
    /// Compress the capture written: none, gzip or zstd (default: from the
    /// file name, `.gz` gzip, `.zst` zstd, otherwise none). `replay` reads
    /// either.
    #[arg(long, value_enum, value_name = "HOW")]
    pub compress: Option<Compression>,
    /// Compression level (default: 3 for zstd, 6 for gzip).
    #[arg(long, value_name = "N")]
    pub compress_level: Option<i32>,
}

impl CompressArgs {
    /// What to write to `path`.
    pub fn for_path(&self, path: &Path) -> io::Result<(Compression, Option<i32>)> {
        let c = self
            .compress
            .unwrap_or_else(|| Compression::from_name(path));
        if c == Compression::None && self.compress_level.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--compress-level needs a compressed capture (--compress, or a .gz/.zst name)",
            ));
        }
        Ok((c, self.compress_level))
    }
}

/// A capture file's bytes, decompressed if they are compressed.
pub enum CaptureInput {
    Plain(BufReader<File>),
    Gzip(BufReader<MultiGzDecoder<BufReader<File>>>),
    /// With the window of its first frame (what the decoder holds).
    Zstd(BufReader<zstd::Decoder<'static, BufReader<File>>>, usize),
}

/// What a gzip decoder holds beside its buffers: the 32 KiB window and
/// inflate's tables, rounded up.
const GZIP_STATE: usize = 64 << 10;
/// What a zstd decoder holds beside its window: block buffers, rounded up.
const ZSTD_STATE: usize = 256 << 10;
/// The window assumed when a zstd frame header does not say: 8 MiB, the
/// most the default levels (up to 19) use.
const ZSTD_DEFAULT_WINDOW: usize = 8 << 20;
/// The decoder refuses windows over 2^27 bytes (zstd's default limit).
const ZSTD_MAX_WINDOW: usize = 1 << 27;

/// The window a zstd frame header declares (RFC 8878 3.1.1.1), or `None`
/// when `head` is not the start of one.
pub fn zstd_window(head: &[u8]) -> Option<usize> {
    if !head.starts_with(&ZSTD_MAGIC) {
        return None;
    }
    let fhd = *head.get(4)?;
    let single_segment = fhd & 0x20 != 0;
    if !single_segment {
        let wd = *head.get(5)?;
        let log = 10 + (wd >> 3) as u32;
        let base = 1usize.checked_shl(log)?;
        let window = base + (base / 8) * (wd & 7) as usize;
        return Some(window.min(ZSTD_MAX_WINDOW));
    }
    // single segment: the window is the content size that follows the
    // descriptor (and the dictionary id)
    let dict_len = [0usize, 1, 2, 4][(fhd & 3) as usize];
    let fcs_len = [1usize, 2, 4, 8][(fhd >> 6) as usize];
    let at = 5 + dict_len;
    let b = head.get(at..at + fcs_len)?;
    let mut v = 0u64;
    for (i, x) in b.iter().enumerate() {
        v |= (*x as u64) << (8 * i);
    }
    if fcs_len == 2 {
        v += 256;
    }
    Some((v as usize).min(ZSTD_MAX_WINDOW))
}

impl CaptureInput {
    /// Opens `path`, deciding by its first bytes whether to decompress.
    pub fn open(path: &Path) -> io::Result<CaptureInput> {
        let mut f = BufReader::with_capacity(BUF, File::open(path)?);
        let head = f.fill_buf()?;
        Ok(match Compression::sniff(head) {
            Compression::None => CaptureInput::Plain(f),
            Compression::Gzip => {
                CaptureInput::Gzip(BufReader::with_capacity(BUF, MultiGzDecoder::new(f)))
            }
            Compression::Zstd => {
                let window = zstd_window(head).unwrap_or(ZSTD_DEFAULT_WINDOW);
                CaptureInput::Zstd(
                    BufReader::with_capacity(BUF, zstd::Decoder::with_buffer(f)?),
                    window,
                )
            }
        })
    }

    /// Opens `path` positioned at byte `offset` of its (decompressed)
    /// content: a seek for a plain file; a compressed one is decompressed
    /// up to there.
    pub fn open_at(path: &Path, offset: u64) -> io::Result<CaptureInput> {
        let mut input = CaptureInput::open(path)?;
        match &mut input {
            CaptureInput::Plain(f) => {
                f.seek(SeekFrom::Start(offset))?;
            }
            _ => {
                let n = io::copy(&mut (&mut input).take(offset), &mut io::sink())?;
                if n < offset {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "the file is shorter than when it was scanned ({n} < {offset} bytes)"
                        ),
                    ));
                }
            }
        }
        Ok(input)
    }

    /// Bytes a reader of this input holds: its buffers and, compressed,
    /// the decoder's state (estimated: the libraries do not say).
    pub fn memory(&self) -> usize {
        match self {
            CaptureInput::Plain(_) => BUF,
            CaptureInput::Gzip(_) => 2 * BUF + GZIP_STATE,
            CaptureInput::Zstd(_, window) => 2 * BUF + ZSTD_STATE + window,
        }
    }

    pub fn compression(&self) -> Compression {
        match self {
            CaptureInput::Plain(_) => Compression::None,
            CaptureInput::Gzip(_) => Compression::Gzip,
            CaptureInput::Zstd(..) => Compression::Zstd,
        }
    }
}

impl Read for CaptureInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = match self {
            CaptureInput::Plain(r) => return r.read(buf),
            CaptureInput::Gzip(r) => r.read(buf),
            CaptureInput::Zstd(r, _) => r.read(buf),
        };
        r.map_err(|e| name_layer(self.compression().name(), e))
    }
}

impl BufRead for CaptureInput {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let what = self.compression().name();
        let r = match self {
            CaptureInput::Plain(r) => return r.fill_buf(),
            CaptureInput::Gzip(r) => r.fill_buf(),
            CaptureInput::Zstd(r, _) => r.fill_buf(),
        };
        r.map_err(|e| name_layer(what, e))
    }

    fn consume(&mut self, n: usize) {
        match self {
            CaptureInput::Plain(r) => r.consume(n),
            CaptureInput::Gzip(r) => r.consume(n),
            CaptureInput::Zstd(r, _) => r.consume(n),
        }
    }
}

/// A decoder's error says what broke, not in which layer: name it.
fn name_layer(what: &str, e: io::Error) -> io::Error {
    let kind = e.kind();
    if kind == io::ErrorKind::UnexpectedEof {
        io::Error::new(kind, format!("{what} stream ends early ({e})"))
    } else {
        io::Error::new(kind, format!("{what} stream: {e}"))
    }
}

/// A capture file being written, compressed or not. Call
/// [`CaptureOutput::finish`] at the end: a compressed stream is complete
/// only once its trailer is written.
pub enum CaptureOutput {
    Plain(BufWriter<File>),
    Gzip(GzEncoder<BufWriter<File>>),
    Zstd(zstd::Encoder<'static, BufWriter<File>>),
}

impl CaptureOutput {
    /// Creates (or truncates) `path`; `level` `None` is the default one.
    pub fn create(path: &Path, c: Compression, level: Option<i32>) -> io::Result<CaptureOutput> {
        let level = level.unwrap_or(c.default_level());
        c.check_level(level)?;
        let f = BufWriter::with_capacity(BUF, File::create(path)?);
        Ok(match c {
            Compression::None => CaptureOutput::Plain(f),
            Compression::Gzip => {
                CaptureOutput::Gzip(GzEncoder::new(f, flate2::Compression::new(level as u32)))
            }
            Compression::Zstd => CaptureOutput::Zstd(zstd::Encoder::new(f, level)?),
        })
    }

    /// Writes the compressed stream's end and flushes the file.
    pub fn finish(self) -> io::Result<()> {
        match self {
            CaptureOutput::Plain(mut w) => w.flush(),
            CaptureOutput::Gzip(w) => w.finish()?.flush(),
            CaptureOutput::Zstd(w) => w.finish()?.flush(),
        }
    }
}

impl Write for CaptureOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            CaptureOutput::Plain(w) => w.write(buf),
            CaptureOutput::Gzip(w) => w.write(buf),
            CaptureOutput::Zstd(w) => w.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            CaptureOutput::Plain(w) => w.write_all(buf),
            CaptureOutput::Gzip(w) => w.write_all(buf),
            CaptureOutput::Zstd(w) => w.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            CaptureOutput::Plain(w) => w.flush(),
            CaptureOutput::Gzip(w) => w.flush(),
            CaptureOutput::Zstd(w) => w.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_content() {
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
        assert_eq!(
            Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Compression::Zstd
        );
        assert_eq!(
            Compression::sniff(&0xA1B2_3C4Du32.to_le_bytes()),
            Compression::None
        );
        assert_eq!(Compression::sniff(&[0x1f]), Compression::None);
    }

    #[test]
    fn writes_read_back_whatever_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            // no telling extension: the content decides
            let path = dir.path().join(format!("capture-{}", c.name()));
            let mut w = CaptureOutput::create(&path, c, None).unwrap();
            w.write_all(&data).unwrap();
            w.finish().unwrap();
            let mut r = CaptureInput::open(&path).unwrap();
            assert_eq!(r.compression(), c);
            let mut back = Vec::new();
            r.read_to_end(&mut back).unwrap();
            assert_eq!(back, data, "{c:?}");
        }
    }

    #[test]
    fn gzip_members_are_all_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("two-members.gz");
        let mut bytes = Vec::new();
        for part in [&b"first member, "[..], b"second member"] {
            let mut e = GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(part).unwrap();
            bytes.extend(e.finish().unwrap());
        }
        std::fs::write(&path, bytes).unwrap();
        let mut back = String::new();
        CaptureInput::open(&path)
            .unwrap()
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, "first member, second member");
    }

    #[test]
    fn open_at_starts_at_the_offset_whatever_the_compression() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let path = dir.path().join(format!("at-{}", c.name()));
            let mut w = CaptureOutput::create(&path, c, None).unwrap();
            w.write_all(&data).unwrap();
            w.finish().unwrap();
            for at in [0u64, 1, 65_536, 299_999, 300_000] {
                let mut back = Vec::new();
                CaptureInput::open_at(&path, at)
                    .unwrap()
                    .read_to_end(&mut back)
                    .unwrap();
                assert_eq!(back, &data[at as usize..], "{c:?} at {at}");
            }
            let e = CaptureInput::open_at(&path, 300_001).err();
            assert_eq!(e.is_some(), c != Compression::None, "{c:?}");
            let input = CaptureInput::open(&path).unwrap();
            assert!(input.memory() >= BUF);
            if let CaptureInput::Zstd(_, window) = input {
                // level 3 of a stream of unknown size: a 2 MiB window
                assert_eq!(window, 2 << 20);
            }
        }
    }

    #[test]
    fn zstd_windows_are_read_from_the_frame_header() {
        // window descriptor: exponent 11, mantissa 0: 2^21
        assert_eq!(
            zstd_window(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 11 << 3]),
            Some(2 << 20)
        );
        // mantissa 4: 2^21 + 4 * 2^18
        assert_eq!(
            zstd_window(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, (11 << 3) | 4]),
            Some((2 << 20) + (1 << 20))
        );
        // single segment, 1-byte content size 200
        assert_eq!(zstd_window(&[0x28, 0xb5, 0x2f, 0xfd, 0x20, 200]), Some(200));
        // huge windows are capped at what the decoder accepts
        assert_eq!(
            zstd_window(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 31 << 3]),
            Some(1 << 27)
        );
        assert_eq!(zstd_window(&[0x28, 0xb5, 0x2f, 0xfd]), None);
        assert_eq!(zstd_window(b"\x1f\x8b"), None);
    }

    #[test]
    fn levels_are_checked() {
        assert!(Compression::Gzip.check_level(10).is_err());
        assert!(Compression::Zstd.check_level(3).is_ok());
        assert!(Compression::Zstd.check_level(1000).is_err());
        assert_eq!(
            Compression::from_name(Path::new("day.pcap.zst")),
            Compression::Zstd
        );
        assert_eq!(
            Compression::from_name(Path::new("day.pcapng.gz")),
            Compression::Gzip
        );
        assert_eq!(
            Compression::from_name(Path::new("day.pcap")),
            Compression::None
        );
    }
}
