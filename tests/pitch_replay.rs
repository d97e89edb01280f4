//! The real Cboe PITCH capture `fixtures/real/cboe-pitch-realtime.pcap`
//! (BATS's dissector's, GPL-2.0, licence beside it) through `tickgate
//! replay --venue cboe-pitch`: the facts `fixtures/real/README.md` states
//! of a replay with default settings and no config. The quote of `A` is
//! read after each data packet with a check 2 ms after it (past the 1 ms
//! `gap_hold_us` of the loss at the start; the packets are 1.2 s apart).

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};

#[path = "common/cli.rs"]
mod cli;
use cli::tickgate;

use serde_json::Value;
use tickgate::capture::CaptureReader;
use tickgate::venue::cboe_pitch::frame::Datagram;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"))
}

const REALTIME: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 39, 62, 190), 32001);

/// The realtime line's data packets: arrival (ns) and the sequence of
/// their last message.
fn data_packets() -> Vec<(i64, u64)> {
    let mut r = CaptureReader::open(fixture("cboe-pitch-realtime.pcap")).unwrap();
    let mut out = Vec::new();
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        if d.dst != REALTIME {
            continue;
        }
        let g = Datagram::parse(d.payload).unwrap();
        if g.header.count > 0 {
            out.push((d.ts_ns, g.header.next_sequence() - 1));
        }
    }
    out
}

/// The README's quote of `A` after the data packet ending at each
/// sequence: `seq` of the quote and its bid (`-` when empty). The ask is
/// always empty.
const QUOTES: &[(u64, &str)] = &[
    (4, "20@100"),
    (6, "-"),
    (10, "0.0025@100"),
    (12, "-"),
    (14, "0.0025@100"),
    (16, "-"),
    (20, "20.05@300"),
    (22, "20.05@400"),
    (24, "-"),
    (26, "0.0025@1000"),
    (28, "0.0026@1000"),
    (30, "-"),
    (32, "20.04@1000"),
    (34, "20.04@900"),
    (36, "-"),
    (38, "0.0029@1000"),
    (40, "0.0029@900"),
    (42, "-"),
];

#[test]
fn the_quote_of_a_after_each_data_packet_is_the_readmes() {
    let packets = data_packets();
    assert_eq!(packets.len(), 19, "19 data packets");
    let dir = tempfile::tempdir().unwrap();
    let checks = dir.path().join("checks");
    let mut f = std::fs::File::create(&checks).unwrap();
    for (t, _) in &packets {
        writeln!(f, "{} CHECK A", t + 2_000_000).unwrap();
    }
    drop(f);
    let (code, out, err) = tickgate(&[
        "replay",
        &fixture("cboe-pitch-realtime.pcap"),
        "--venue",
        "cboe-pitch",
        "--checks",
        checks.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let answers: Vec<&str> = out.lines().collect();
    assert_eq!(answers.len(), packets.len(), "{out}");
    // Packet sequence 7 (a Trade) changes no quote: its answer is the one
    // before it. Every other packet's answer is the README's next quote.
    let mut expected = QUOTES.iter();
    let mut current: Option<&(u64, &str)> = None;
    for ((_, last), answer) in packets.iter().zip(&answers) {
        if *last != 8 {
            current = expected.next();
        }
        let (seq, bid) = current.expect("a quote");
        // The loss of messages 1-2 at the start: suspect channel_gap for
        // the rest of the capture. (The test system's clock is an hour off
        // New York; the default clock_offset = "auto" takes that hour into
        // its offset, so no answer is stale at source.)
        // (After the Trade's packet the quote is 30 s old, and a suspect
        // symbol takes no liveness from the unit: also `stale_quote`.)
        let fresh = *last != 8;
        let reasons = if fresh {
            "suspect"
        } else {
            "stale_quote,stale_at_source,suspect"
        };
        assert!(
            answer.starts_with(&format!("REJECT A {reasons} seq=")),
            "{answer}"
        );
        assert!(
            answer.contains(&format!(" seq={seq} bid={bid} ask=- ")),
            "after the packet ending at {last}: expected seq={seq} bid={bid}: {answer}"
        );
        assert!(answer.ends_with(" suspect=channel_gap"), "{answer}");
    }
    assert!(expected.next().is_none(), "every README quote was seen");
}

#[test]
fn the_replay_summary_gives_the_readme_facts() {
    let (code, out, err) = tickgate(&[
        "replay",
        &fixture("cboe-pitch-realtime.pcap"),
        "--venue",
        "cboe-pitch",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let f = &v["feeds"][0];
    assert_eq!(f["venue"], "cboe-pitch");
    assert_eq!(f["invalid_packets"], 0);
    // Baselined at 1 by the first heartbeat; the packet at 3 reveals a
    // loss of 2 that nothing fills.
    assert_eq!(f["channel_lost"], 2);
    assert_eq!(f["channel_gaps"], 1);
    // The gap line's 364 heartbeats carry sequence 0: they change nothing.
    assert_eq!(f["unsequenced"], 364);
    assert_eq!(f["units_not_followed"], 0);
    assert_eq!(f["unknown_orders"], 0);
    assert_eq!(f["book_errors"], 0);
    // The book ends empty.
    assert_eq!(f["live_orders"], 0);
    let sessions = f["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "one session of unit 1: {sessions:?}");
    assert_eq!(sessions[0]["id"], "U001S00001");
    assert_eq!(sessions[0]["next_sequence"], 43);
    // The realtime line's 19 data packets and 356 heartbeats; the gap
    // line's heartbeats belong to no session.
    assert_eq!(sessions[0]["data_packets"], 19, "{}", sessions[0]);
    assert_eq!(sessions[0]["heartbeats"], 356, "{}", sessions[0]);
    // venues.md: per unit, `next`, the session's state, its counters.
    let units = f["units"].as_array().unwrap();
    assert_eq!(units.len(), 1, "{units:?}");
    assert_eq!(units[0]["unit"], 1);
    assert_eq!(units[0]["session"], "U001S00001");
    assert_eq!(units[0]["next_sequence"], 43);
    assert_eq!(units[0]["ended"], false);
    assert_eq!(units[0]["channel_lost"], 2);
    assert_eq!(units[0]["channel_gaps"], 1);
    let types = &f["message_types"];
    for (t, n) in [
        ("0x20", 19),
        ("0x21", 4),
        ("0x22", 3),
        ("0x23", 3),
        ("0x29", 4),
        ("0x27", 1),
        ("0x28", 1),
        ("0x26", 2),
        ("0x2a", 2),
        ("0x2b", 1),
    ] {
        assert_eq!(types[t], n, "{t} messages: {types}");
    }
    assert_eq!(types.as_object().unwrap().len(), 10, "{types}");
    let a = &f["symbols"]["A"];
    assert_eq!(a["suspect"], "channel_gap", "{a}");
}
