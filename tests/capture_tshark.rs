//! wire.md "Framing checks anyone can run": tshark's `moldudp64` dissector
//! and tickgate's reader + `Packet::parse` agree packet by packet, on a
//! simulator capture (with every fault injected) and on the real Nasdaq
//! capture. Skipped (with a message) when tshark is not installed.

use std::path::Path;
use std::process::Command;

use tickgate::capture::{CaptureReader, PcapWriter};
use tickgate::feed::{Feed, FeedSettings, VenueKind};
use tickgate::sim::simulate::{SimConfig, SimMode, Simulator};
use tickgate::venue::nasdaq_itch::messages::message_size;
use tickgate::wire::Packet;

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// (session, sequence, count) per packet, as tshark decodes them.
fn tshark_fields(file: &Path, port: u16) -> Vec<(String, u64, u16)> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-d", &format!("udp.port=={port},moldudp64")])
        .args([
            "-T",
            "fields",
            "-e",
            "moldudp64.session",
            "-e",
            "moldudp64.sequence",
        ])
        .args(["-e", "moldudp64.count"])
        .output()
        .expect("running tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "tshark line {l:?}");
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

fn tickgate_fields(file: &Path) -> Vec<(String, u64, u16)> {
    CaptureReader::open(file)
        .unwrap()
        .map(|d| {
            let d = d.unwrap();
            let p = Packet::parse(&d.payload).unwrap();
            (p.session.to_string(), p.sequence, p.count)
        })
        .collect()
}

/// The simulator's whole stream written to `file` (nanosecond pcap).
fn write_capture(c: SimConfig, file: &Path) -> Simulator {
    let mut sim = Simulator::new(c).unwrap();
    let mut w = PcapWriter::create(file).unwrap();
    let mut buf = Vec::new();
    while let Some(ev) = sim.next_into(&mut buf) {
        w.write_udp(ev.t_ns, ev.src, ev.dst, &buf).unwrap();
    }
    w.into_inner().unwrap();
    sim
}

#[test]
fn simulator_capture_decodes_the_same_in_tshark() {
    if !tshark_available() {
        println!("skipped: tshark is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sim.pcap");
    let mut c = SimConfig::new(21);
    c.duration_ns = 1_500_000_000;
    c.mode = SimMode::Delta;
    c.snapshot_ms = 500;
    c.batch = 4;
    c.rate = 2000;
    c.channel_heartbeat_ms = 1; // packets are ~2 ms apart: channel heartbeats in between
    c.symbols = 60; // heartbeat and snapshot rounds span several packets
    c.lines[0].loss = 0.05;
    c.lines[1].loss = 0.05;
    c.dup = 0.02;
    c.reorder = 0.02;
    c.session_change_at_ns = Some(700_000_000);
    c.bad_seq_at_ns = Some(300_000_000);
    c.end_session = true;
    let sim = write_capture(c, &file);
    let ours = tickgate_fields(&file);
    let theirs = tshark_fields(&file, 30001);
    assert_eq!(ours.len() as u64, sim.truth().datagrams);
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "packet {i}");
    }
    // heartbeats (count 0) and the end of session (65535) are in there
    assert!(theirs.iter().any(|p| p.2 == 0));
    assert!(theirs.iter().any(|p| p.2 == 65535));
    assert!(theirs.iter().any(|p| p.2 > 1));
}

#[test]
fn real_nasdaq_capture_decodes_the_same_in_tshark() {
    if !tshark_available() {
        println!("skipped: tshark is not installed");
        return;
    }
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/real/nasdaq-totalview-itch50-moldudp64.pcap");
    let ours = tickgate_fields(&file);
    let theirs = tshark_fields(&file, 26477);
    assert_eq!(ours, theirs);
    assert_eq!(
        ours,
        [
            ("000010059B".to_string(), 14_764_496, 1),
            ("000010059B".to_string(), 19_009_117, 38)
        ]
    );
}

/// `simulate --venue nasdaq-itch`: tshark's moldudp64 dissector sees the
/// sessions and sequences the nasdaq-itch venue reports, packet by packet,
/// and its nasdaq_itch dissector decodes the message types tickgate reads.
#[test]
fn simulated_itch_decodes_the_same_in_tshark() {
    if !tshark_available() {
        println!("skipped: tshark is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("itch.pcap");
    let mut c = SimConfig::new(5);
    c.venue = VenueKind::NasdaqItch;
    c.heartbeat_ms = 0;
    c.symbols = 20;
    c.orders = 500;
    c.rate = 5000;
    c.batch = 6;
    c.duration_ns = 400_000_000;
    c.channel_heartbeat_ms = 1;
    c.lines[0].loss = 0.05;
    c.lines[1].loss = 0.05;
    c.session_change_at_ns = Some(200_000_000);
    c.end_session = true;
    write_capture(c, &file);

    // tickgate: the venue's header of each datagram, and its block types.
    let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::NasdaqItch), 1);
    let mut ours = Vec::new();
    let mut our_types = Vec::new();
    for d in CaptureReader::open(&file).unwrap() {
        let d = d.unwrap();
        feed.on_datagram(0, &d.payload, 0);
        let h = feed.last_header().unwrap();
        let count = match h.kind {
            tickgate::wire::PacketKind::EndOfSession => 65535,
            _ => h.count,
        };
        ours.push((h.session.to_string(), h.sequence, count));
        let p = Packet::parse_with(&d.payload, |k| message_size(k).unwrap_or(1)).unwrap();
        let types: Vec<String> = p.blocks().map(|b| format!("'{}'", b[0] as char)).collect();
        our_types.push(types.join(","));
    }
    assert_eq!(feed.counters().invalid_packets, 0);
    let theirs = tshark_fields(&file, 30001);
    assert_eq!(ours, theirs);

    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-d", "udp.port==30001,moldudp64"])
        .args(["-d", "moldudp64.payload,nasdaq_itch"])
        .args(["-T", "fields", "-e", "nasdaq-itch.message_type"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let their_types: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(our_types, their_types);
    let all = their_types.join(",");
    for t in ["'R'", "'A'", "'D'", "'U'", "'E'"] {
        assert!(all.contains(t), "tshark decoded no {t}");
    }
}
