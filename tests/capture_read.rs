//! Capture reading: the real exchange captures, tool-made pcapng files, and
//! hand-built files covering byte orders, resolutions and link types.

use std::io::Cursor;
use std::net::SocketAddrV4;

use tickgate::capture::frame::linktype;
use tickgate::capture::{CaptureFormat, CaptureReader, CapturedDatagram, SkipCounts};
use tickgate::wire::{Message, Packet, PacketKind};

fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn read_all(path: &str) -> (Vec<CapturedDatagram>, tickgate::capture::CaptureStats) {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    for d in r.by_ref() {
        out.push(d.unwrap());
    }
    (out, *r.stats())
}

fn read_bytes(bytes: Vec<u8>) -> (Vec<CapturedDatagram>, tickgate::capture::CaptureStats) {
    let mut r = CaptureReader::new(Cursor::new(bytes)).unwrap();
    let mut out = Vec::new();
    for d in r.by_ref() {
        out.push(d.unwrap());
    }
    (out, *r.stats())
}

fn addr(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}

fn check_nasdaq(ds: &[CapturedDatagram]) {
    assert_eq!(ds.len(), 2);
    assert_eq!(ds[0].ts_ns, 1_692_711_000_007_661_955);
    assert_eq!(ds[1].ts_ns, 1_692_711_038_952_561_782);
    let expect = [(14_764_496u64, 1u16), (19_009_117, 38)];
    for (d, (seq, count)) in ds.iter().zip(expect) {
        assert_eq!(
            d.src.ip(),
            &"206.200.127.138".parse::<std::net::Ipv4Addr>().unwrap()
        );
        assert_eq!(d.dst, addr("233.54.12.111:26477"));
        let p = Packet::parse(&d.payload).unwrap();
        assert_eq!(p.session.to_string(), "000010059B");
        assert_eq!(p.sequence, seq);
        assert_eq!(p.count, count);
        assert_eq!(p.kind(), PacketKind::Data);
        // ITCH messages are unknown to the tickgate protocol, skipped by length
        let kinds: Vec<u8> = p
            .messages()
            .map(|m| match m {
                Message::Unknown { kind, .. } => kind,
                other => panic!("ITCH decoded as {other:?}"),
            })
            .collect();
        assert_eq!(kinds.len(), count as usize);
    }
    let first: Vec<_> = Packet::parse(&ds[0].payload).unwrap().blocks().collect();
    assert_eq!(first[0].len(), 19);
    assert_eq!(first[0][0], b'D');
    let second = Packet::parse(&ds[1].payload).unwrap();
    assert!(second
        .blocks()
        .all(|b| (b[0] == b'A' && b.len() == 36) || (b[0] == b'F' && b.len() == 40)));
}

#[test]
fn real_nasdaq_totalview() {
    let r = CaptureReader::open(fixture("real/nasdaq-totalview-itch50-moldudp64.pcap")).unwrap();
    assert_eq!(
        r.format(),
        CaptureFormat::Pcap {
            nanosecond: true,
            big_endian: false
        }
    );
    let (ds, stats) = read_all(&fixture("real/nasdaq-totalview-itch50-moldudp64.pcap"));
    check_nasdaq(&ds);
    assert_eq!(stats.frames, 2);
    assert_eq!(stats.skipped, SkipCounts::default());
    assert!(!stats.truncated_tail);
}

#[test]
fn real_ise_heartbeat() {
    let (ds, stats) = read_all(&fixture("real/nasdaq-ise-moldudp64-heartbeat.pcap"));
    assert_eq!(ds.len(), 1);
    assert_eq!(stats.frames, 1);
    assert_eq!(ds[0].payload.len(), 20);
    assert_eq!(ds[0].dst, addr("233.54.12.158:18024"));
    assert_eq!(ds[0].ts_ns, 1_546_549_462_615_241_000); // microsecond pcap
    let p = Packet::parse(&ds[0].payload).unwrap();
    assert_eq!(p.kind(), PacketKind::Heartbeat);
    assert_eq!(p.session.to_string(), "000008367I");
    assert_eq!(p.sequence, 383_265);
    assert_eq!(p.count, 0);
}

#[test]
fn real_iex_is_read_but_not_tickgate_protocol() {
    let (ds, stats) = read_all(&fixture("real/iex-tops16-quote-update.pcap"));
    assert_eq!(ds.len(), 1);
    assert_eq!(stats.skipped.total(), 0);
    assert_eq!(ds[0].dst, addr("233.215.21.3:10377"));
    assert!(Packet::parse(&ds[0].payload).is_err());
}

#[test]
fn pcapng_written_by_editcap() {
    let r = CaptureReader::open(fixture("gen/nasdaq.pcapng")).unwrap();
    assert_eq!(r.format(), CaptureFormat::PcapNg);
    let (ds, _) = read_all(&fixture("gen/nasdaq.pcapng"));
    check_nasdaq(&ds);
}

#[test]
fn pcapng_merged_three_interfaces_keep_their_resolution() {
    // mergecap of the three real captures: one interface each, nanosecond
    // and microsecond resolutions mixed.
    let (ds, stats) = read_all(&fixture("gen/merged3.pcapng"));
    assert_eq!(stats.frames, 4);
    let ts: Vec<i64> = ds.iter().map(|d| d.ts_ns).collect();
    assert_eq!(
        ts,
        [
            1_517_065_700_931_787_000,
            1_546_549_462_615_241_000,
            1_692_711_000_007_661_955,
            1_692_711_038_952_561_782
        ]
    );
    check_nasdaq(&ds[2..]);
}

// ---- hand-built captures ----

fn ipv4_udp(
    src: [u8; 4],
    dst: [u8; 4],
    dport: u16,
    payload: &[u8],
    proto: u8,
    frag: u16,
) -> Vec<u8> {
    let total = (28 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 7]);
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[32, proto, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(&5000u16.to_be_bytes());
    ip.extend_from_slice(&dport.to_be_bytes());
    ip.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(payload);
    ip
}

fn udp(payload: &[u8]) -> Vec<u8> {
    ipv4_udp([10, 1, 1, 1], [239, 1, 1, 1], 30001, payload, 17, 0)
}

fn ether(ip: &[u8], ethertype: u16) -> Vec<u8> {
    let mut f = vec![1, 0, 0x5e, 1, 1, 1, 2, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

fn sll(ip: &[u8]) -> Vec<u8> {
    let mut f = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 2, 0, 0];
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

struct Classic {
    big: bool,
    nanos: bool,
    out: Vec<u8>,
}

impl Classic {
    fn new(big: bool, nanos: bool, link: u32) -> Self {
        let magic: u32 = if nanos { 0xA1B2_3C4D } else { 0xA1B2_C3D4 };
        let mut c = Classic {
            big,
            nanos,
            out: Vec::new(),
        };
        c.u32(magic);
        c.u16(2);
        c.u16(4);
        c.u32(0);
        c.u32(0);
        c.u32(65535);
        c.u32(link);
        c
    }
    fn u16(&mut self, v: u16) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
    }
    fn u32(&mut self, v: u32) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
    }
    fn record(&mut self, ts_ns: i64, frame: &[u8], caplen: usize) {
        self.u32((ts_ns / 1_000_000_000) as u32);
        let frac = ts_ns % 1_000_000_000;
        self.u32(if self.nanos { frac } else { frac / 1000 } as u32);
        self.u32(caplen as u32);
        self.u32(frame.len() as u32);
        self.out.extend_from_slice(&frame[..caplen]);
    }
}

#[test]
fn classic_pcap_byte_orders_resolutions_and_links() {
    for big in [false, true] {
        for nanos in [false, true] {
            for (link, frame) in [
                (linktype::ETHERNET, ether(&udp(b"abc"), 0x0800)),
                (linktype::RAW, udp(b"abc")),
                (linktype::LINUX_SLL, sll(&udp(b"abc"))),
            ] {
                let mut c = Classic::new(big, nanos, link);
                c.record(1_700_000_000_123_456_789, &frame, frame.len());
                let (ds, stats) = read_bytes(c.out);
                assert_eq!(ds.len(), 1, "big={big} nanos={nanos} link={link}");
                assert_eq!(stats.skipped.total(), 0);
                let want = if nanos {
                    1_700_000_000_123_456_789
                } else {
                    1_700_000_000_123_456_000
                };
                assert_eq!(ds[0].ts_ns, want);
                assert_eq!(ds[0].payload, b"abc");
                assert_eq!(ds[0].dst, addr("239.1.1.1:30001"));
                assert_eq!(ds[0].src, addr("10.1.1.1:5000"));
            }
        }
    }
}

#[test]
fn classic_pcap_counts_every_skip_reason() {
    let mut c = Classic::new(false, true, linktype::ETHERNET);
    let good = ether(&udp(b"payload"), 0x0800);
    c.record(1, &good, good.len());
    // snap length cut the payload
    c.record(2, &good, good.len() - 3);
    // IPv6 and ARP
    c.record(3, &ether(&[0x60; 48], 0x86DD), 62);
    c.record(4, &ether(&[0; 28], 0x0806), 42);
    // TCP and a fragment
    let tcp = ether(
        &ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 1, b"xx", 6, 0),
        0x0800,
    );
    c.record(5, &tcp, tcp.len());
    let frag = ether(
        &ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 1, b"xx", 17, 0x2000),
        0x0800,
    );
    c.record(6, &frag, frag.len());
    let frag2 = ether(
        &ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 1, b"xx", 17, 0x0010),
        0x0800,
    );
    c.record(7, &frag2, frag2.len());
    c.record(8, &good, good.len());
    let (ds, stats) = read_bytes(c.out);
    assert_eq!(ds.len(), 2);
    assert_eq!(ds.iter().map(|d| d.ts_ns).collect::<Vec<_>>(), [1, 8]);
    assert_eq!(stats.frames, 8);
    assert_eq!(stats.datagrams, 2);
    let s = stats.skipped;
    assert_eq!(
        (s.truncated, s.ipv6, s.not_ip, s.not_udp, s.fragment),
        (1, 1, 1, 1, 2)
    );
    assert_eq!(s.total(), 6);
}

/// pcapng builder (either byte order).
struct Ng {
    big: bool,
    out: Vec<u8>,
}

impl Ng {
    fn new(big: bool) -> Self {
        let mut n = Ng {
            big,
            out: Vec::new(),
        };
        n.shb();
        n
    }
    fn b16(&self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn b32(&self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn block(&mut self, btype: u32, body: &[u8]) {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let total = (body.len() + 12) as u32;
        let (t, l) = (self.b32(btype), self.b32(total));
        self.out.extend_from_slice(&t);
        self.out.extend_from_slice(&l);
        self.out.extend_from_slice(&body);
        self.out.extend_from_slice(&l);
    }
    fn shb(&mut self) {
        let mut body = self.b32(0x1A2B_3C4D).to_vec();
        body.extend_from_slice(&self.b16(1));
        body.extend_from_slice(&self.b16(0));
        body.extend_from_slice(&[0xFF; 8]);
        self.block(0x0A0D_0D0A, &body);
    }
    fn idb(&mut self, link: u16, tsresol: Option<u8>) {
        let mut body = self.b16(link).to_vec();
        body.extend_from_slice(&self.b16(0));
        body.extend_from_slice(&self.b32(0));
        if let Some(r) = tsresol {
            body.extend_from_slice(&self.b16(9));
            body.extend_from_slice(&self.b16(1));
            body.extend_from_slice(&[r, 0, 0, 0]);
            body.extend_from_slice(&[0, 0, 0, 0]);
        }
        self.block(1, &body);
    }
    fn epb(&mut self, iface: u32, ticks: u64, frame: &[u8]) {
        let mut body = self.b32(iface).to_vec();
        body.extend_from_slice(&self.b32((ticks >> 32) as u32));
        body.extend_from_slice(&self.b32(ticks as u32));
        body.extend_from_slice(&self.b32(frame.len() as u32));
        body.extend_from_slice(&self.b32(frame.len() as u32));
        body.extend_from_slice(frame);
        self.block(6, &body);
    }
    fn spb(&mut self, frame: &[u8]) {
        let mut body = self.b32(frame.len() as u32).to_vec();
        body.extend_from_slice(frame);
        self.block(3, &body);
    }
}

#[test]
fn pcapng_both_orders_interfaces_resolutions_and_spb() {
    for big in [false, true] {
        let mut n = Ng::new(big);
        n.idb(linktype::ETHERNET as u16, None); // default: microseconds
        n.idb(linktype::LINUX_SLL as u16, Some(9));
        n.idb(linktype::RAW as u16, Some(0x80 | 20)); // 2^-20 s
        n.block(0x0000_0BAD, b"custom block, skipped");
        n.epb(0, 1_700_000_000_000_001, &ether(&udp(b"e"), 0x0800));
        n.epb(1, 1_700_000_000_000_000_002, &sll(&udp(b"s")));
        n.epb(2, 3 << 20, &udp(b"r"));
        n.spb(&ether(&udp(b"p"), 0x0800));
        n.epb(7, 0, &udp(b"no such interface"));
        // a second section starts over with its own interfaces
        n.shb();
        n.idb(linktype::RAW as u16, Some(9));
        n.epb(0, 42, &udp(b"second section"));
        let (ds, stats) = read_bytes(n.out);
        let got: Vec<(i64, &[u8])> = ds.iter().map(|d| (d.ts_ns, &d.payload[..])).collect();
        assert_eq!(
            got,
            [
                (1_700_000_000_000_001_000, &b"e"[..]),
                (1_700_000_000_000_000_002, b"s"),
                (3_000_000_000, b"r"),
                (3_000_000_000, b"p"), // SPB: the previous stamp
                (42, b"second section"),
            ],
            "big={big}"
        );
        assert_eq!(stats.skipped.malformed, 1);
        assert_eq!(stats.frames, 6);
    }
}

#[test]
fn not_a_capture_and_corrupt_block_are_errors() {
    assert!(CaptureReader::new(Cursor::new(b"hello world, not a pcap".to_vec())).is_err());
    assert!(CaptureReader::new(Cursor::new(Vec::new())).is_err());
    let mut n = Ng::new(false);
    n.idb(1, None);
    n.epb(0, 1, &ether(&udp(b"ok"), 0x0800));
    // trailer length that disagrees with the header
    let len = n.out.len();
    n.out[len - 1] ^= 0x40;
    let mut r = CaptureReader::new(Cursor::new(n.out)).unwrap();
    assert!(r.next().unwrap().is_err());
    assert!(r.next().is_none());
}

// ---- compressed captures (told by content, not by name) ----

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

/// Every datagram, or the error that ended the reading, with the stats.
fn read_until_error(
    path: &std::path::Path,
) -> (
    Vec<CapturedDatagram>,
    Option<String>,
    tickgate::capture::CaptureStats,
) {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    let mut err = None;
    for d in r.by_ref() {
        match d {
            Ok(d) => out.push(d),
            Err(e) => err = Some(e.to_string()),
        }
    }
    (out, err, *r.stats())
}

#[test]
fn real_iex_sample_gzip_reads_every_packet() {
    let path = fixture("real/iex-tops16-sample.pcap.gz");
    let r = CaptureReader::open(&path).unwrap();
    assert_eq!(
        r.get_ref().compression(),
        tickgate::capture::Compression::Gzip
    );
    assert_eq!(
        r.format(),
        CaptureFormat::Pcap {
            nanosecond: false,
            big_endian: false
        }
    );
    let (ds, stats) = read_all(&path);
    assert_eq!(stats.frames, 13_022);
    assert_eq!(stats.datagrams, 13_022);
    assert_eq!(ds.len(), 13_022);
    assert_eq!(stats.skipped.total(), 0);
    assert!(!stats.truncated_tail);
    assert!(ds.iter().all(|d| d.dst == addr("224.67.0.199:16642")));
    // microsecond stamps, 2017-07-10 14:32:18.433824 .. 14:38:58.888647
    assert_eq!(ds[0].ts_ns, 1_499_697_138_433_824_000);
    assert_eq!(ds[13_021].ts_ns, 1_499_697_538_888_647_000);
    assert!(ds.iter().all(|d| d.ts_ns % 1_000 == 0));
    // IEX-TP, not the tickgate protocol (a later adapter decodes it)
    assert!(ds.iter().all(|d| Packet::parse(&d.payload).is_err()));
}

#[test]
fn compressed_pcap_and_pcapng_read_as_the_plain_files() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "gen/nasdaq.pcapng",
        "gen/merged3.pcapng",
        "real/nasdaq-totalview-itch50-moldudp64.pcap",
    ] {
        let plain = std::fs::read(fixture(name)).unwrap();
        let (want, want_stats) = read_bytes(plain.clone());
        let plain_format = CaptureReader::new(Cursor::new(&plain)).unwrap().format();
        for (kind, bytes) in [("gz", gzip(&plain)), ("zst", zstd(&plain))] {
            // named as if plain: the first bytes decide
            let path = dir
                .path()
                .join(format!("{kind}-{}", name.replace('/', "-")));
            std::fs::write(&path, bytes).unwrap();
            let r = CaptureReader::open(&path).unwrap();
            assert_eq!(r.format(), plain_format, "{name} {kind}");
            let (got, err, stats) = read_until_error(&path);
            assert_eq!(err, None, "{name} {kind}");
            assert_eq!(got, want, "{name} {kind}");
            assert_eq!(stats, want_stats, "{name} {kind}");
        }
    }
}

#[test]
fn truncated_compressed_capture_is_an_error_after_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let plain = std::fs::read(fixture("real/iex-tops16-sample.pcap.gz")).unwrap();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&plain[..]), &mut raw)
        .unwrap();
    for (kind, bytes) in [("gzip", gzip(&raw)), ("zstd", zstd(&raw))] {
        let path = dir.path().join(format!("cut.{kind}"));
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let (got, err, stats) = read_until_error(&path);
        let err = err.unwrap_or_else(|| panic!("{kind}: a cut stream must be an error"));
        assert!(err.contains(&format!("{kind} stream")), "{kind}: {err}");
        // about half of the 13,022 packets came out before the error
        assert!(
            got.len() > 3_000 && got.len() < 13_022,
            "{kind}: {}",
            got.len()
        );
        assert_eq!(stats.datagrams, got.len() as u64);
    }
}
