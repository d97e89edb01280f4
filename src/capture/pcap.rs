//! Capture files (I/O): a streaming reader for pcap (micro- and nanosecond,
//! either byte order, also the "modified" Kuznetzov variant) and pcapng
//! (SHB/IDB/EPB/SPB/OPB, several sections and interfaces, per-interface
//! `if_tsresol` and `if_tsoffset`), and a nanosecond pcap writer producing
//! Ethernet + IPv4 + UDP frames that Wireshark/tshark read.
//!
//! Parsed by hand: the formats are small, and owning every bounds check is
//! what lets the reader promise "an error or a skip count, never a panic"
//! on any bytes (see the proptests in `tests/capture_fuzz.rs`).

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::net::SocketAddrV4;
use std::ops::Range;
use std::path::Path;

use super::compress::{CaptureInput, CaptureOutput, Compression};
use super::frame::{linktype, udp_span, SkipCounts, UdpSpan};

const PCAP_MAGIC_US: u32 = 0xA1B2_C3D4;
const PCAP_MAGIC_NS: u32 = 0xA1B2_3C4D;
/// Kuznetzov's patched libpcap: 8 more bytes per record header.
const PCAP_MAGIC_MODIFIED: u32 = 0xA1B2_CD34;
const NG_SHB: u32 = 0x0A0D_0D0A;
const NG_BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const NG_IDB: u32 = 1;
const NG_OPB: u32 = 2;
const NG_SPB: u32 = 3;
const NG_EPB: u32 = 6;
/// A record or block claiming more than this is corruption, not a frame:
/// refuse it instead of allocating whatever the length field says.
const MAX_RECORD: usize = 16 << 20;

/// One UDP datagram of a capture, owning its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedDatagram {
    /// Capture timestamp, Unix nanoseconds.
    pub ts_ns: i64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: Vec<u8>,
}

/// One UDP datagram borrowing the reader's buffer (valid until the next read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramRef<'a> {
    pub ts_ns: i64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: &'a [u8],
}

impl DatagramRef<'_> {
    pub fn to_owned(&self) -> CapturedDatagram {
        CapturedDatagram {
            ts_ns: self.ts_ns,
            src: self.src,
            dst: self.dst,
            payload: self.payload.to_vec(),
        }
    }
}

impl From<io::Error> for CaptureError {
    fn from(e: io::Error) -> Self {
        CaptureError::Io(e)
    }
}

/// A capture that cannot be read on (skipped frames are not errors).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The I/O error is in the message, not also a source: an error chain
    /// (`{:#}`) would say it twice.
    #[error("reading the capture: {0}")]
    Io(io::Error),
    #[error("not a pcap, pcapng or Nasdaq BinaryFILE (first bytes {0:02x?})")]
    NotACapture(Vec<u8>),
    #[error("corrupt capture at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    /// A Nasdaq BinaryFILE (`binaryfile`): the message (from 1) and the
    /// byte (of the decompressed file) where its length starts.
    #[error("BinaryFILE message {message} at byte {offset}: {what}")]
    BinaryFile {
        message: u64,
        offset: u64,
        what: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    Pcap { nanosecond: bool, big_endian: bool },
    PcapNg,
}

/// What a reader has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Packet records (frames) read, usable or not.
    pub frames: u64,
    /// IPv4 UDP datagrams handed out.
    pub datagrams: u64,
    /// Frames skipped, per reason.
    pub skipped: SkipCounts,
    /// The file ends in the middle of a record (a capture cut short or
    /// still being written): what came before was read.
    pub truncated_tail: bool,
}

#[derive(Clone, Copy, Debug)]
enum TsRes {
    /// Ticks of 10^-n seconds.
    Pow10(u8),
    /// Ticks of 2^-n seconds.
    Pow2(u8),
}

#[derive(Clone, Copy, Debug)]
struct Interface {
    link: u32,
    snaplen: u32,
    res: TsRes,
    offset_s: i64,
}

#[derive(Clone, Debug)]
enum Kind {
    Pcap {
        big: bool,
        frac_to_ns: i64,
        modified: bool,
        link: u32,
    },
    Ng {
        big: bool,
        ifaces: Vec<Interface>,
    },
}

/// Streaming capture reader. Iterate owned datagrams (`Iterator`), or use
/// [`CaptureReader::next_ref`] to borrow each payload without allocating.
/// After an `Err` the reader is finished.
pub struct CaptureReader<R> {
    r: R,
    kind: Kind,
    buf: Vec<u8>,
    offset: u64,
    stats: CaptureStats,
    last_ts: i64,
    /// Offset of the record (pcap) or block (pcapng) read last.
    frame_start: u64,
    done: bool,
}

/// Where a reader stood before the frame it handed out last, with what it
/// knew then (byte order, interfaces): a reader resumed there (see
/// [`CaptureReader::resume`]) reads that frame next. Taken with
/// [`CaptureReader::resume_point`].
#[derive(Clone, Debug)]
pub struct ResumePoint {
    /// Byte offset in the (decompressed) capture.
    pub offset: u64,
    kind: Kind,
    last_ts: i64,
}

impl CaptureReader<CaptureInput> {
    /// Opens a capture file, plain, gzip or zstd compressed (decided by its
    /// first bytes, see `compress`). Errors do not repeat the path: the
    /// caller names the file once.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        // The caller says which file: not repeated here.
        CaptureReader::new(CaptureInput::open(path.as_ref()).map_err(CaptureError::Io)?)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header (pcap) or the first section header (pcapng).
    pub fn new(r: R) -> Result<Self, CaptureError> {
        let mut me = CaptureReader {
            r,
            kind: Kind::Pcap {
                big: false,
                frac_to_ns: 1000,
                modified: false,
                link: linktype::ETHERNET,
            },
            buf: Vec::with_capacity(2048),
            offset: 0,
            stats: CaptureStats::default(),
            last_ts: 0,
            frame_start: 0,
            done: false,
        };
        let mut magic = [0u8; 4];
        let n = me.fill(&mut magic)?;
        if n < 4 {
            return Err(CaptureError::NotACapture(magic[..n].to_vec()));
        }
        let le = u32::from_le_bytes(magic);
        let be = u32::from_be_bytes(magic);
        if le == NG_SHB {
            me.kind = Kind::Ng {
                big: false,
                ifaces: Vec::new(),
            };
            match me.read_ng_block_after_type(NG_SHB)? {
                Some(_) => {}
                None => return Err(me.corrupt("file ends inside the first section header")),
            }
            return Ok(me);
        }
        let (big, m) = match (le, be) {
            (PCAP_MAGIC_US | PCAP_MAGIC_NS | PCAP_MAGIC_MODIFIED, _) => (false, le),
            (_, PCAP_MAGIC_US | PCAP_MAGIC_NS | PCAP_MAGIC_MODIFIED) => (true, be),
            _ => return Err(CaptureError::NotACapture(magic.to_vec())),
        };
        let mut hdr = [0u8; 20];
        if me.fill(&mut hdr)? < 20 {
            return Err(me.corrupt("file ends inside the pcap header"));
        }
        let link = rd32(&hdr, 16, big) & 0xFFFF; // upper bits: FCS information
        me.kind = Kind::Pcap {
            big,
            frac_to_ns: if m == PCAP_MAGIC_NS { 1 } else { 1000 },
            modified: m == PCAP_MAGIC_MODIFIED,
            link,
        };
        Ok(me)
    }

    /// A reader over `r`, which is positioned at `at.offset` of a capture
    /// read before by a reader that gave `at`: it reads on from there (the
    /// file header is not read again).
    pub fn resume(r: R, at: ResumePoint) -> Self {
        CaptureReader {
            r,
            kind: at.kind,
            buf: Vec::with_capacity(2048),
            offset: at.offset,
            stats: CaptureStats::default(),
            last_ts: at.last_ts,
            frame_start: at.offset,
            done: false,
        }
    }

    /// Where to resume to read again the frame of the datagram handed out
    /// last (see [`ResumePoint`]).
    pub fn resume_point(&self) -> ResumePoint {
        ResumePoint {
            offset: self.frame_start,
            kind: self.kind.clone(),
            last_ts: self.last_ts,
        }
    }

    /// Bytes the reader's record buffer holds now (it grows to the
    /// largest record read).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    pub fn format(&self) -> CaptureFormat {
        match self.kind {
            Kind::Pcap {
                big, frac_to_ns, ..
            } => CaptureFormat::Pcap {
                nanosecond: frac_to_ns == 1,
                big_endian: big,
            },
            Kind::Ng { .. } => CaptureFormat::PcapNg,
        }
    }

    pub fn stats(&self) -> &CaptureStats {
        &self.stats
    }

    /// The source being read.
    pub fn get_ref(&self) -> &R {
        &self.r
    }

    /// Bytes of (decompressed) capture read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next IPv4 UDP datagram, borrowing the reader's buffer. Frames
    /// that carry none are counted in [`CaptureStats::skipped`] and passed.
    pub fn next_ref(&mut self) -> Option<Result<DatagramRef<'_>, CaptureError>> {
        match self.advance() {
            Ok(Some((ts_ns, span))) => Some(Ok(DatagramRef {
                ts_ns,
                src: span.src,
                dst: span.dst,
                payload: &self.buf[span.payload],
            })),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn advance(&mut self) -> Result<Option<(i64, UdpSpan)>, CaptureError> {
        while let Some((ts, link, range)) = self.next_frame()? {
            self.stats.frames += 1;
            match udp_span(link, &self.buf[range.clone()]) {
                Ok(mut span) => {
                    span.payload = span.payload.start + range.start..span.payload.end + range.start;
                    self.stats.datagrams += 1;
                    return Ok(Some((ts, span)));
                }
                Err(reason) => self.stats.skipped.add(reason),
            }
        }
        Ok(None)
    }

    /// The next frame in `self.buf[range]` with its timestamp and link type.
    fn next_frame(&mut self) -> Result<Option<(i64, u32, Range<usize>)>, CaptureError> {
        if self.done {
            return Ok(None);
        }
        let got = match self.kind {
            Kind::Pcap { .. } => self.next_pcap_record(),
            Kind::Ng { .. } => self.next_ng_packet(),
        };
        match got {
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            other => other,
        }
    }

    fn next_pcap_record(&mut self) -> Result<Option<(i64, u32, Range<usize>)>, CaptureError> {
        let Kind::Pcap {
            big,
            frac_to_ns,
            modified,
            link,
        } = self.kind
        else {
            unreachable!("pcap record in a pcapng file")
        };
        let hlen = if modified { 24 } else { 16 };
        self.frame_start = self.offset;
        let mut hdr = [0u8; 24];
        match self.fill(&mut hdr[..hlen])? {
            0 => return Ok(None),
            n if n < hlen => return Ok(self.tail()),
            _ => {}
        }
        let sec = rd32(&hdr, 0, big) as i64;
        let frac = rd32(&hdr, 4, big) as i64;
        let incl = rd32(&hdr, 8, big) as usize;
        if incl > MAX_RECORD {
            return Err(self.corrupt(&format!("record of {incl} bytes")));
        }
        self.buf.clear();
        self.buf.resize(incl, 0);
        let mut buf = std::mem::take(&mut self.buf);
        let n = self.fill(&mut buf);
        self.buf = buf;
        if n? < incl {
            return Ok(self.tail());
        }
        let ts = sec
            .saturating_mul(1_000_000_000)
            .saturating_add(frac.saturating_mul(frac_to_ns));
        self.last_ts = ts;
        Ok(Some((ts, link, 0..incl)))
    }

    fn next_ng_packet(&mut self) -> Result<Option<(i64, u32, Range<usize>)>, CaptureError> {
        loop {
            self.frame_start = self.offset;
            let mut head = [0u8; 4];
            match self.fill(&mut head)? {
                0 => return Ok(None),
                n if n < 4 => return Ok(self.tail()),
                _ => {}
            }
            let big = matches!(self.kind, Kind::Ng { big: true, .. });
            let btype = if big {
                u32::from_be_bytes(head)
            } else {
                u32::from_le_bytes(head)
            };
            let Some(body) = self.read_ng_block_after_type(btype)? else {
                return Ok(self.tail());
            };
            if let Some(frame) = self.ng_frame(btype, body)? {
                return Ok(Some(frame));
            }
        }
    }

    /// Reads the rest of a block whose type was read; leaves its body in
    /// `self.buf[range]`. A section header is also applied here. `None`:
    /// the file ended inside the block.
    fn read_ng_block_after_type(
        &mut self,
        btype: u32,
    ) -> Result<Option<Range<usize>>, CaptureError> {
        let mut len_bytes = [0u8; 4];
        if self.fill(&mut len_bytes)? < 4 {
            return Ok(None);
        }
        let mut big = matches!(self.kind, Kind::Ng { big: true, .. });
        self.buf.clear();
        if btype == NG_SHB {
            // The byte-order magic that follows decides this section's order.
            let mut bom = [0u8; 4];
            if self.fill(&mut bom)? < 4 {
                return Ok(None);
            }
            big = match (u32::from_le_bytes(bom), u32::from_be_bytes(bom)) {
                (NG_BYTE_ORDER_MAGIC, _) => false,
                (_, NG_BYTE_ORDER_MAGIC) => true,
                _ => return Err(self.corrupt("section header without byte-order magic")),
            };
            self.buf.extend_from_slice(&bom);
        }
        let total = rd32(&len_bytes, 0, big) as usize;
        if !(12..=MAX_RECORD).contains(&total) || (btype == NG_SHB && total < 28) {
            return Err(self.corrupt(&format!("block of type {btype:#x} claims {total} bytes")));
        }
        let have = self.buf.len();
        let rest = total - 8 - have;
        self.buf.resize(have + rest, 0);
        let mut buf = std::mem::take(&mut self.buf);
        let n = self.fill(&mut buf[have..]);
        self.buf = buf;
        if n? < rest {
            return Ok(None);
        }
        let body_end = self.buf.len() - 4;
        let trailer = rd32(&self.buf, body_end, big) as usize;
        if trailer != total {
            return Err(self.corrupt(&format!(
                "block of type {btype:#x}: length {total} at the start but {trailer} at the end"
            )));
        }
        if btype == NG_SHB {
            // new section: its own byte order, and interfaces start again
            self.kind = Kind::Ng {
                big,
                ifaces: Vec::new(),
            };
        }
        Ok(Some(0..body_end))
    }

    /// Interprets one block body: an interface description is recorded, a
    /// packet block gives a frame, anything else is passed.
    fn ng_frame(
        &mut self,
        btype: u32,
        body: Range<usize>,
    ) -> Result<Option<(i64, u32, Range<usize>)>, CaptureError> {
        let Kind::Ng {
            big,
            ref mut ifaces,
        } = self.kind
        else {
            unreachable!("pcapng block in a pcap file")
        };
        let b = &self.buf[body.clone()];
        match btype {
            NG_IDB => {
                if b.len() < 8 {
                    return Err(CaptureError::Corrupt {
                        offset: self.offset,
                        what: "interface description shorter than 8 bytes".into(),
                    });
                }
                let mut iface = Interface {
                    link: rd16(b, 0, big) as u32,
                    snaplen: rd32(b, 4, big),
                    res: TsRes::Pow10(6),
                    offset_s: 0,
                };
                for (code, val) in NgOptions::new(&b[8..], big) {
                    match (code, val.len()) {
                        (9, 1) => {
                            iface.res = if val[0] & 0x80 == 0 {
                                TsRes::Pow10(val[0])
                            } else {
                                TsRes::Pow2(val[0] & 0x7F)
                            }
                        }
                        (14, 8) => iface.offset_s = rd64(val, 0, big) as i64,
                        _ => {}
                    }
                }
                ifaces.push(iface);
                Ok(None)
            }
            NG_EPB | NG_OPB => {
                // EPB: iface u32, ts hi, ts lo, caplen, origlen, data
                // OPB: iface u16, drops u16, ts hi, ts lo, caplen, len, data
                if b.len() < 20 {
                    self.stats.frames += 1;
                    self.stats.skipped.truncated += 1;
                    return Ok(None);
                }
                let if_id = if btype == NG_EPB {
                    rd32(b, 0, big) as usize
                } else {
                    rd16(b, 0, big) as usize
                };
                let ticks = ((rd32(b, 4, big) as u64) << 32) | rd32(b, 8, big) as u64;
                let caplen = rd32(b, 12, big) as usize;
                let Some(iface) = ifaces.get(if_id).copied() else {
                    self.stats.frames += 1;
                    self.stats.skipped.malformed += 1;
                    return Ok(None);
                };
                if caplen > b.len() - 20 {
                    self.stats.frames += 1;
                    self.stats.skipped.malformed += 1;
                    return Ok(None);
                }
                let ts = ticks_to_ns(ticks, iface.res, iface.offset_s);
                self.last_ts = ts;
                let start = body.start + 20;
                Ok(Some((ts, iface.link, start..start + caplen)))
            }
            NG_SPB => {
                // origlen u32, data: no timestamp, interface 0. It gets the
                // previous packet's stamp so that ordering stays as captured.
                let Some(iface) = ifaces.first().copied() else {
                    self.stats.frames += 1;
                    self.stats.skipped.malformed += 1;
                    return Ok(None);
                };
                if b.len() < 4 {
                    self.stats.frames += 1;
                    self.stats.skipped.truncated += 1;
                    return Ok(None);
                }
                let orig = rd32(b, 0, big) as usize;
                let mut caplen = orig.min(b.len() - 4);
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                let start = body.start + 4;
                Ok(Some((self.last_ts, iface.link, start..start + caplen)))
            }
            _ => Ok(None),
        }
    }

    fn tail(&mut self) -> Option<(i64, u32, Range<usize>)> {
        self.stats.truncated_tail = true;
        None
    }

    fn corrupt(&self, what: &str) -> CaptureError {
        CaptureError::Corrupt {
            offset: self.offset,
            what: what.to_string(),
        }
    }

    /// Reads until `buf` is full or the file ends; returns the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, CaptureError> {
        let n = crate::util::read::read_up_to(&mut self.r, buf).map_err(CaptureError::Io)?;
        self.offset += n as u64;
        Ok(n)
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<CapturedDatagram, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref().map(|r| r.map(|d| d.to_owned()))
    }
}

/// pcapng options: (code, value) until `opt_endofopt` or the end.
struct NgOptions<'a> {
    rest: &'a [u8],
    big: bool,
}

impl<'a> NgOptions<'a> {
    fn new(rest: &'a [u8], big: bool) -> Self {
        NgOptions { rest, big }
    }
}

impl<'a> Iterator for NgOptions<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.len() < 4 {
            return None;
        }
        let code = rd16(self.rest, 0, self.big);
        let len = rd16(self.rest, 2, self.big) as usize;
        if code == 0 || self.rest.len() < 4 + len {
            self.rest = &[];
            return None;
        }
        let val = &self.rest[4..4 + len];
        let padded = (4 + len).div_ceil(4) * 4;
        self.rest = self.rest.get(padded..).unwrap_or(&[]);
        Some((code, val))
    }
}

fn ticks_to_ns(ticks: u64, res: TsRes, offset_s: i64) -> i64 {
    let t = ticks as i128;
    let ns: i128 = match res {
        TsRes::Pow10(v) if v <= 9 => t * 10i128.pow(9 - v as u32),
        TsRes::Pow10(v) => 10i128.checked_pow(v as u32 - 9).map_or(0, |d| t / d),
        // ticks < 2^64 and 1e9 < 2^30: no overflow
        TsRes::Pow2(v) => (t * 1_000_000_000) >> v.min(127),
    };
    let ns = ns + offset_s as i128 * 1_000_000_000;
    ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn rd16(b: &[u8], at: usize, big: bool) -> u16 {
    let x = [b[at], b[at + 1]];
    if big {
        u16::from_be_bytes(x)
    } else {
        u16::from_le_bytes(x)
    }
}

fn rd32(b: &[u8], at: usize, big: bool) -> u32 {
    let x = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    }
}

fn rd64(b: &[u8], at: usize, big: bool) -> u64 {
    let x: [u8; 8] = b[at..at + 8].try_into().expect("8 bytes");
    if big {
        u64::from_be_bytes(x)
    } else {
        u64::from_le_bytes(x)
    }
}

/// Largest UDP payload an IPv4 datagram can carry.
pub const MAX_UDP_PAYLOAD: usize = 65_535 - 20 - 8;

/// Writes a nanosecond pcap (little-endian, `LINKTYPE_ETHERNET`) of
/// Ethernet + IPv4 + UDP frames. Multicast destinations get the matching
/// 01:00:5e MAC; the IPv4 header checksum and the UDP checksum are computed.
pub struct PcapWriter<W: Write> {
    w: W,
    frame: Vec<u8>,
    ip_id: u16,
    packets: u64,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) `path` and writes the file header.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let f = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        PcapWriter::new(BufWriter::with_capacity(1 << 16, f))
    }
}

impl PcapWriter<CaptureOutput> {
    /// Creates (or truncates) `path`, compressed as told, and writes the
    /// file header. End with [`PcapWriter::finish`].
    pub fn create_compressed(
        path: impl AsRef<Path>,
        compression: Compression,
        level: Option<i32>,
    ) -> io::Result<Self> {
        PcapWriter::new(CaptureOutput::create(path.as_ref(), compression, level)?)
    }

    /// Flushes, ends the compressed stream and the file.
    pub fn finish(self) -> io::Result<()> {
        self.into_inner()?.finish()
    }
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut w: W) -> io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&PCAP_MAGIC_NS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone 0, sigfigs 0
        h[16..20].copy_from_slice(&262_144u32.to_le_bytes());
        h[20..24].copy_from_slice(&linktype::ETHERNET.to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter {
            w,
            frame: Vec::with_capacity(1600),
            ip_id: 0,
            packets: 0,
        })
    }

    /// Appends one UDP datagram stamped `ts_ns` (Unix ns, 1970..2106).
    pub fn write_udp(
        &mut self,
        ts_ns: i64,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &[u8],
    ) -> io::Result<()> {
        if payload.len() > MAX_UDP_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("UDP payload of {} bytes does not fit IPv4", payload.len()),
            ));
        }
        let (sec, nsec) = split_ts(ts_ns)?;
        let f = &mut self.frame;
        f.clear();
        // Ethernet
        let d = dst.ip().octets();
        if dst.ip().is_multicast() {
            f.extend_from_slice(&[0x01, 0x00, 0x5e, d[1] & 0x7F, d[2], d[3]]);
        } else {
            f.extend_from_slice(&[0x02, 0x00, d[0], d[1], d[2], d[3]]);
        }
        let s = src.ip().octets();
        f.extend_from_slice(&[0x02, 0x00, s[0], s[1], s[2], s[3]]);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        // IPv4
        let ip = f.len();
        let total = (20 + 8 + payload.len()) as u16;
        let ttl = if dst.ip().is_multicast() { 1 } else { 64 };
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&self.ip_id.to_be_bytes());
        f.extend_from_slice(&0x4000u16.to_be_bytes()); // DF, no fragment
        f.extend_from_slice(&[ttl, 17, 0, 0]);
        f.extend_from_slice(&s);
        f.extend_from_slice(&d);
        let sum = !fold(sum16(&f[ip..ip + 20], 0));
        f[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
        self.ip_id = self.ip_id.wrapping_add(1);
        // UDP
        let udp = f.len();
        let ulen = (8 + payload.len()) as u16;
        f.extend_from_slice(&src.port().to_be_bytes());
        f.extend_from_slice(&dst.port().to_be_bytes());
        f.extend_from_slice(&ulen.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        // pseudo header: src, dst, zero, protocol, UDP length
        let mut acc = sum16(&s, 0);
        acc = sum16(&d, acc);
        acc += 17 + ulen as u32;
        acc = sum16(&f[udp..], acc);
        let mut csum = !fold(acc);
        if csum == 0 {
            csum = 0xFFFF; // 0 means "no checksum" in UDP over IPv4
        }
        f[udp + 6..udp + 8].copy_from_slice(&csum.to_be_bytes());
        let len = f.len() as u32;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&sec.to_le_bytes());
        rec[4..8].copy_from_slice(&nsec.to_le_bytes());
        rec[8..12].copy_from_slice(&len.to_le_bytes());
        rec[12..16].copy_from_slice(&len.to_le_bytes());
        self.w.write_all(&rec)?;
        self.w.write_all(&self.frame)?;
        self.packets += 1;
        Ok(())
    }

    /// Datagrams written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// Flushes and returns the inner writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.w.flush()?;
        Ok(self.w)
    }
}

fn split_ts(ts_ns: i64) -> io::Result<(u32, u32)> {
    let sec = ts_ns.div_euclid(1_000_000_000);
    let nsec = ts_ns.rem_euclid(1_000_000_000) as u32;
    let sec = u32::try_from(sec).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("timestamp {ts_ns} ns is outside what pcap can hold (1970..2106)"),
        )
    })?;
    Ok((sec, nsec))
}

/// One's-complement sum of big-endian 16-bit words (odd length: zero pad).
fn sum16(b: &[u8], mut acc: u32) -> u32 {
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u32) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn sample() -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let a: SocketAddrV4 = "127.0.0.1:40000".parse().unwrap();
        let g: SocketAddrV4 = "239.255.0.1:30001".parse().unwrap();
        w.write_udp(1_764_489_600_000_000_001, a, g, b"one")
            .unwrap();
        w.write_udp(1_764_489_600_123_456_789, a, g, b"second")
            .unwrap();
        w.into_inner().unwrap()
    }

    #[test]
    fn write_then_read_nanosecond_pcap() {
        let bytes = sample();
        let r = CaptureReader::new(Cursor::new(bytes)).unwrap();
        assert_eq!(
            r.format(),
            CaptureFormat::Pcap {
                nanosecond: true,
                big_endian: false
            }
        );
        let got: Vec<_> = r.map(|d| d.unwrap()).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].ts_ns, 1_764_489_600_000_000_001);
        assert_eq!(got[1].ts_ns, 1_764_489_600_123_456_789);
        assert_eq!(got[1].payload, b"second");
        assert_eq!(got[0].dst, "239.255.0.1:30001".parse().unwrap());
    }

    #[test]
    fn checksums_verify() {
        let bytes = sample();
        let frame = &bytes[24 + 16..24 + 16 + 14 + 28 + 3];
        let ip = &frame[14..34];
        assert_eq!(fold(sum16(ip, 0)), 0xFFFF, "IPv4 header checksum");
        let udp = &frame[34..];
        let mut acc = sum16(&ip[12..20], 0);
        acc += 17 + udp.len() as u32;
        acc = sum16(udp, acc);
        assert_eq!(fold(acc), 0xFFFF, "UDP checksum");
        assert_eq!(&frame[0..6], &[0x01, 0x00, 0x5e, 0x7f, 0x00, 0x01]);
    }

    #[test]
    fn truncated_tail_keeps_what_came_before() {
        let bytes = sample();
        let cut = &bytes[..bytes.len() - 2];
        let mut r = CaptureReader::new(Cursor::new(cut)).unwrap();
        assert_eq!(r.next().unwrap().unwrap().payload, b"one");
        assert!(r.next().is_none());
        assert!(r.stats().truncated_tail);
    }

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(ticks_to_ns(1_500_000, TsRes::Pow10(6), 0), 1_500_000_000);
        assert_eq!(ticks_to_ns(7, TsRes::Pow10(9), 0), 7);
        assert_eq!(ticks_to_ns(12_345, TsRes::Pow10(12), 0), 12);
        assert_eq!(ticks_to_ns(3 << 30, TsRes::Pow2(30), 0), 3_000_000_000);
        assert_eq!(ticks_to_ns(5, TsRes::Pow10(0), 10), 15_000_000_000);
        assert_eq!(ticks_to_ns(u64::MAX, TsRes::Pow10(127), 0), 0);
        assert_eq!(ticks_to_ns(u64::MAX, TsRes::Pow10(0), 0), i64::MAX);
    }

    #[test]
    fn refuses_negative_and_oversized() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let a: SocketAddrV4 = "127.0.0.1:1".parse().unwrap();
        assert!(w.write_udp(-1, a, a, b"x").is_err());
        assert!(w.write_udp(0, a, a, &vec![0; MAX_UDP_PAYLOAD + 1]).is_err());
        assert!(w.write_udp(0, a, a, &vec![0; MAX_UDP_PAYLOAD]).is_ok());
    }
}
