//! `tickgate simulate --venue cboe-pitch` (venues.md `cboe-pitch`):
//! several units on lines A and B and a gap line G, each unit's datagrams
//! in its own sequence, read by a `cboe-pitch` feed (in process, and
//! through `tickgate replay`) without a book error.
//!
//! Every unit is a channel of the feed (venues.md, the unit is the
//! channel): each unit's `next` ends where the simulator's sequence did,
//! and no datagram is counted `units_not_followed`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};

#[path = "common/cli.rs"]
mod cli;
use cli::tickgate;

use serde_json::Value;
use tickgate::feed::{Feed, FeedSettings, VenueKind};
use tickgate::sim::simulate::{default_lines, SimConfig, SimLine, Simulator};
use tickgate::venue::cboe_pitch::frame::Datagram;
use tickgate::venue::cboe_pitch::messages::TYPE_TIME;
use tickgate::venue::LineKind;

fn cfg(seed: u64, units: usize) -> SimConfig {
    let mut c = SimConfig::new(seed);
    c.venue = VenueKind::CboePitch;
    c.units = units;
    c.symbols = 24;
    c.rate = 20_000;
    c.batch = 4;
    c.orders = 2_000;
    c.duration_ns = 2_000_000_000;
    // As `simulate` sets for a venue: no tickgate-protocol rounds.
    c.heartbeat_ms = 0;
    c.snapshot_ms = 0;
    c.lines = default_lines(&["A", "B"], Ipv4Addr::LOCALHOST, 40000, 10_000);
    c.lines.push(SimLine {
        name: "G".into(),
        src: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40000),
        dst: SocketAddrV4::new(Ipv4Addr::new(239, 255, 0, 5), 30001),
        delay_ns: 0,
        loss: 0.0,
        kind: LineKind::Gap,
    });
    c
}

/// Per unit, line A's datagrams run in sequence from 1 with no gap, each
/// data datagram's first message in a new second is a Time; the gap line
/// carries only heartbeats with sequence 0; and a feed with line G as a
/// gap line reads the followed unit with no book error, no unknown order,
/// no loss, and never a crossed quote.
#[test]
fn simulated_units_are_sequenced_and_read_without_book_errors() {
    let mut sim = Simulator::new(cfg(3, 3)).unwrap();
    let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::CboePitch), 3);
    feed.set_line_kind(2, LineKind::Gap);
    let mut next: BTreeMap<u8, u32> = BTreeMap::new();
    let (mut gap_heartbeats, mut times, mut two_sided) = (0, 0, 0u64);
    let mut buf = Vec::new();
    while let Some(ev) = sim.next_into(&mut buf) {
        let d = Datagram::parse(&buf).unwrap();
        let h = d.header;
        match ev.line {
            0 if h.count > 0 => {
                let n = next.entry(h.unit).or_insert(1);
                assert_eq!(h.sequence, *n, "unit {} in sequence", h.unit);
                *n += h.count as u32;
                times += d.messages().filter(|m| m[1] == TYPE_TIME).count();
            }
            2 => {
                assert_eq!((h.count, h.sequence), (0, 0), "gap line heartbeats");
                gap_heartbeats += 1;
            }
            _ => {}
        }
        feed.on_datagram(ev.line, &buf, ev.t_ns);
        let symbols: Vec<_> = feed.symbols().map(|(s, _)| s).collect();
        for s in symbols {
            let (_, v) = feed.symbol_view(s).unwrap();
            if let (Some(b), Some(a)) = (v.bid(), v.ask()) {
                assert!(b.px < a.px, "{s}: bid {} ask {}", b.px, a.px);
                two_sided += 1;
            }
        }
    }
    assert_eq!(next.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
    assert!(gap_heartbeats >= 2, "{gap_heartbeats}");
    // Each unit stamps the seconds it sends in: 2 s of stream, 3 units.
    assert!(times >= 6, "{times}");
    assert!(two_sided > 1_000, "{two_sided}");
    let c = feed.counters();
    assert_eq!(
        (
            c.invalid_packets,
            c.unknown_messages,
            c.book_errors,
            c.unknown_orders,
            c.order_conflicts,
            c.channel_gaps
        ),
        (0, 0, 0, 0, 0, 0)
    );
    assert!(c.live_orders > 100, "{}", c.live_orders);
    assert_eq!(c.units_not_followed, 0);
    // Each unit a channel of its own, ending where the stream did.
    let reports = feed.channel_reports();
    let followed: BTreeMap<u8, u64> = reports.iter().map(|r| (r.channel, r.next)).collect();
    let sent: BTreeMap<u8, u64> = next.iter().map(|(&u, &n)| (u, n as u64)).collect();
    assert_eq!(followed, sent);
    assert!(reports
        .iter()
        .all(|r| !r.ended && r.counters.channel_gaps == 0));
    let truth = sim.truth();
    assert_eq!(truth.mode, "cboe-pitch");
    assert_eq!(truth.sessions, ["U001S00001"]);
    // The truth's book tops are what the feed that read every message
    // quotes, each side as the gate shows it.
    let side = |l: Option<tickgate::wire::Side>| {
        l.map_or(Value::Null, |l| {
            let mut px = String::new();
            tickgate::wire::write_price(&mut px, l.px).unwrap();
            Value::String(format!("{px}@{}", l.qty))
        })
    };
    let tops = truth.venue.as_ref().unwrap()["symbols"].as_array().unwrap();
    assert_eq!(tops.len(), 24);
    for top in tops {
        let symbol = top["symbol"].as_str().unwrap();
        let (_, v) = feed
            .symbol_view(tickgate::wire::Symbol::parse(symbol).unwrap())
            .unwrap();
        assert_eq!(
            (side(v.bid()), side(v.ask())),
            (top["bid"].clone(), top["ask"].clone()),
            "{symbol}"
        );
        // Symbol i (from 0) is on unit i mod 3 + 1.
        let i: u64 = symbol[1..].parse::<u64>().unwrap() - 1;
        assert_eq!(top["unit"].as_u64(), Some(i % 3 + 1), "{symbol}");
    }
}

/// The capture `simulate` writes, with losses on line A that line B
/// repairs, replayed with `--venue cboe-pitch` and no config (every group
/// a realtime line): no invalid datagram, no book error, no loss; the gap
/// line's heartbeats (sequence 0) count as unsequenced.
#[test]
fn replay_of_a_simulated_capture_reads_without_book_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("pitch.pcap");
    let (code, out, err) = tickgate(&[
        "simulate",
        "--venue",
        "cboe-pitch",
        "--units",
        "4",
        "--symbols",
        "40",
        "--rate",
        "5000",
        "--batch",
        "3",
        "--duration",
        "3",
        "--loss-a",
        "0.05",
        "--out",
        pcap.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cboe-pitch"), "{out}");
    let (code, out, err) = tickgate(&[
        "replay",
        pcap.to_str().unwrap(),
        "--venue",
        "cboe-pitch",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let f = &v["feeds"][0];
    assert_eq!(f["venue"], "cboe-pitch");
    for key in [
        "invalid_packets",
        "unknown_orders",
        "book_errors",
        "channel_lost",
        "channel_gaps",
    ] {
        assert_eq!(f[key], 0, "{key}: {f}");
    }
    assert!(
        f["unsequenced"].as_u64().unwrap() >= 3,
        "{}",
        f["unsequenced"]
    );
    assert_eq!(f["units_not_followed"], 0);
    let units = f["units"].as_array().unwrap();
    let ids: Vec<u64> = units.iter().map(|u| u["unit"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4], "{units:?}");
    for u in units {
        assert_eq!(u["channel_lost"], 0, "{u}");
        assert_eq!(
            u["session"],
            format!("U{:03}S00001", u["unit"].as_u64().unwrap()),
            "{u}"
        );
    }
    assert!(f["live_orders"].as_u64().unwrap() > 0);
    // One session per unit, each from sequence 1.
    let sessions = f["sessions"].as_array().unwrap();
    let ids: Vec<&str> = sessions.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["U001S00001", "U002S00001", "U003S00001", "U004S00001"],
        "{sessions:?}"
    );
    assert!(sessions.iter().all(|s| s["first_sequence"] == 1));
}

#[test]
fn simulate_refuses_what_cboe_pitch_does_not_have() {
    for (args, says) in [
        (
            &["--units", "0"][..],
            "--units must be 1..=255 for --venue cboe-pitch",
        ),
        (
            &["--units", "50", "--symbols", "10"][..],
            "--units must not exceed",
        ),
    ] {
        let mut all = vec!["simulate", "--venue", "cboe-pitch", "--out", "/dev/null"];
        all.extend_from_slice(args);
        let (code, _, err) = tickgate(&all);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (code, _, err) = tickgate(&["simulate", "--units", "2", "--out", "/dev/null"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--units applies to --venue cboe-pitch"),
        "{err}"
    );
}

/// `--end-session` with several units: each unit ends with an End of
/// Session of its own (venues.md `cboe-pitch`), and the truth file counts
/// each unit in its own sequence. A feed reading lines A and B, with
/// packets lost on both, ends every unit, at the `next_sequence` the truth
/// gives it, having counted lost exactly each unit's expected messages.
#[test]
fn every_unit_ends_its_session_and_the_truth_is_per_unit() {
    let mut c = cfg(5, 3);
    c.end_session = true;
    c.drop_both_every = Some(97);
    let mut sim = Simulator::new(c).unwrap();
    let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::CboePitch), 3);
    feed.set_line_kind(2, LineKind::Gap);
    let mut buf = Vec::new();
    let mut last = 0;
    while let Some(ev) = sim.next_into(&mut buf) {
        feed.on_datagram(ev.line, &buf, ev.t_ns);
        last = ev.t_ns;
    }
    // Every hole still open is declared (R2) well after the stream.
    feed.handle_timeout(last + 60_000_000_000);
    let truth = sim.truth().clone();
    assert_eq!(truth.end_of_session_packets, 3);
    let units: Vec<u8> = truth.units.iter().map(|u| u.unit).collect();
    assert_eq!(units, [1, 2, 3]);
    assert!(truth.units.iter().all(|u| u.end_of_session));
    assert!(truth.units.iter().any(|u| u.messages_lost_all_lines > 0));
    // Per unit, the feed-wide counts split.
    let sum = |f: fn(&tickgate::sim::simulate::UnitTruth) -> u64| -> u64 {
        truth.units.iter().map(f).sum()
    };
    assert_eq!(sum(|u| u.messages), truth.messages);
    assert_eq!(
        sum(|u| u.packets_lost_all_lines),
        truth.packets_lost_all_lines
    );
    assert_eq!(
        sum(|u| u.messages_lost_all_lines),
        truth.messages_lost_all_lines
    );
    assert_eq!(
        sum(|u| u.expected_channel_lost),
        truth.expected_channel_lost
    );
    assert_eq!(
        sum(|u| u.expected_duplicate_packets),
        truth.expected_duplicate_packets
    );
    // The feed counts what the truth's feed-wide model expects.
    assert_eq!(
        feed.counters().channel_messages_lost,
        truth.expected_channel_lost
    );
    let reports = feed.channel_reports();
    assert_eq!(reports.len(), 3);
    for (r, u) in reports.iter().zip(&truth.units) {
        assert_eq!(r.channel, u.unit);
        assert!(r.ended, "unit {} ended: {r:?} {u:?}", u.unit);
        assert_eq!(r.next, u.next_sequence, "unit {}", u.unit);
        assert_eq!(
            r.counters.channel_messages_lost, u.expected_channel_lost,
            "unit {}",
            u.unit
        );
        assert_eq!(u.expected_channel_lost, u.messages_lost_all_lines);
    }
    // The truth file carries the units.
    let json = serde_json::to_value(&truth).unwrap();
    let first: &Value = &json["units"][0];
    assert_eq!(first["unit"], 1);
    assert_eq!(first["end_of_session"], true);
    assert!(first.get("rx").is_none());
}
