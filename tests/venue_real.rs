//! The real exchange captures of fixtures/real/ (copied from
//! shared/fixtures/real/) replayed with their venue (venues.md): the facts
//! that folder's README states, and the IEX sample's checks answered
//! exactly as `iex-tops16-sample.expect` says.

use serde_json::Value;
use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, VenueKind};
use tickgate::venue::nasdaq_itch::messages;
use tickgate::wire::{Packet, SessionId};

#[path = "common/cli.rs"]
mod cli;
use cli::tickgate;

#[path = "common/captures.rs"]
mod captures;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn replay_json(args: &[&str]) -> Value {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    all.push("--json");
    let (code, out, err) = tickgate(&all);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn iex_sample_checks_answer_exactly_as_expected() {
    let (code, out, err) = tickgate(&[
        "replay",
        &fixture("iex-tops16-sample.pcap.gz"),
        "--venue",
        "iex-tops",
        "--checks",
        &fixture("iex-tops16-sample.checks"),
    ]);
    assert_eq!(code, 0, "{err}");
    let expect = std::fs::read_to_string(fixture("iex-tops16-sample.expect")).unwrap();
    assert_eq!(out, expect);
}

#[test]
fn iex_sample_gives_the_readme_facts() {
    let v = replay_json(&[&fixture("iex-tops16-sample.pcap.gz"), "--venue", "iex-tops"]);
    let f = &v["feeds"][0];
    assert_eq!(f["venue"], "iex-tops");
    assert_eq!(f["packets"], 13_022);
    assert_eq!(f["invalid_packets"], 0);
    assert_eq!(f["channel_lost"], 0);
    assert_eq!(f["channel_gaps"], 0);
    assert_eq!(f["messages"], 57_674);
    assert_eq!(f["unknown_messages"], 0);
    let sessions = f["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "one session");
    let s = &sessions[0];
    assert_eq!(s["id"], "1137508352");
    assert_eq!(
        (s["first_sequence"].as_u64(), s["next_sequence"].as_u64()),
        (Some(1), Some(57_675))
    );
    assert_eq!(s["heartbeats"], 237);
    // System Event C ends the session (C6).
    assert_eq!(s["end_of_session"], true);
    let types = &f["message_types"];
    for (t, n) in [
        ("Q", 27_217),
        ("H", 7_803),
        ("P", 7_802),
        ("O", 7_801),
        ("T", 6_390),
        ("A", 642),
        ("D", 10),
        ("S", 6),
        ("B", 3),
    ] {
        assert_eq!(types[t], n, "{t} messages");
    }
    assert_eq!(types.as_object().unwrap().len(), 9);
    assert_eq!(f["symbols_quoted"], 7_799);
}

/// The three symbols the README says IEX halted are answered `halted` at
/// some point of the replay, and a symbol it never halted never is.
#[test]
fn iex_sample_halts_mill_zeus_and_path() {
    let expect = std::fs::read_to_string(fixture("iex-tops16-sample.expect")).unwrap();
    for sym in ["MILL", "ZEUS", "PATH"] {
        assert!(
            expect
                .lines()
                .any(|l| l.starts_with(&format!("REJECT {sym} halted"))),
            "{sym}"
        );
    }
    let v = replay_json(&[&fixture("iex-tops16-sample.pcap.gz"), "--venue", "iex-tops"]);
    let syms = &v["feeds"][0]["symbols"];
    assert_eq!(syms["AAPL"]["trading"], "trading");
    // At the end ZEUS and PATH are still halted; MILL resumed.
    assert_eq!(syms["ZEUS"]["trading"], "halted");
    assert_eq!(syms["PATH"]["trading"], "halted");
    assert_eq!(syms["MILL"]["trading"], "trading");
}

#[test]
fn iex_single_quote_update_decodes() {
    let v = replay_json(&[
        &fixture("iex-tops16-quote-update.pcap"),
        "--venue",
        "iex-tops",
    ]);
    let f = &v["feeds"][0];
    assert_eq!(f["packets"], 1);
    assert_eq!(f["invalid_packets"], 0);
    assert_eq!(f["message_types"]["Q"], 1);
    assert_eq!(f["symbols_quoted"], 1);
}

#[test]
fn mode_does_not_apply_to_venue_feeds() {
    let (code, _, err) = tickgate(&[
        "replay",
        &fixture("iex-tops16-quote-update.pcap"),
        "--venue",
        "iex-tops",
        "--mode",
        "full",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--mode does not apply to --venue iex-tops"),
        "{err}"
    );
}

fn itch_feed() -> Feed {
    Feed::new(FeedSettings::for_venue(VenueKind::NasdaqItch), 1)
}

/// These captures keep a few packets millions of messages apart: beyond
/// the default `max_channel_jump` (C3b). A user replaying such samples
/// raises it; this is that setting.
const SAMPLE_MAX_CHANNEL_JUMP: u64 = 100_000_000;

/// Each packet's session, first sequence and message count as the
/// nasdaq-itch venue validated it; `max_channel_jump` as given, every
/// hold (recovery.md, 1 ms by default) declared at the end.
fn itch_headers(file: &str, max_channel_jump: u64) -> (Feed, Vec<(SessionId, u64, u16)>) {
    let mut settings = FeedSettings::for_venue(VenueKind::NasdaqItch);
    settings.max_channel_jump = max_channel_jump;
    let mut feed = Feed::new(settings, 1);
    let mut out = Vec::new();
    for (i, p) in captures::udp_payloads(&fixture(file)).iter().enumerate() {
        let got = feed.on_datagram(0, p, 1_692_711_000_000_000_000 + i as i64 * 1_000);
        assert!(
            !matches!(got, DatagramOutcome::Invalid(_)),
            "{file} packet {i}: {got:?}"
        );
        let h = feed.last_header().unwrap();
        out.push((h.session, h.sequence, h.count));
    }
    feed.handle_timeout(i64::MAX);
    assert!(!feed.recovering());
    (feed, out)
}

#[test]
fn nasdaq_totalview_late_join_then_gap() {
    let file = "nasdaq-totalview-itch50-moldudp64.pcap";
    // C3b by default: a packet 4,244,620 messages on is not believed.
    let (feed, _) = itch_headers(file, FeedSettings::default().max_channel_jump);
    let c = feed.counters();
    assert_eq!(c.channel_seq_anomalies, 1);
    assert_eq!((c.channel_messages_lost, c.channel_gaps), (0, 0));
    assert_eq!(c.live_orders, 0);

    let (feed, headers) = itch_headers(file, SAMPLE_MAX_CHANNEL_JUMP);
    let s = SessionId::parse("000010059B").unwrap();
    assert_eq!(headers, [(s, 14_764_496, 1), (s, 19_009_117, 38)]);
    let c = feed.counters();
    // Held 1 ms for the other line (recovery.md R1), then declared (R2).
    assert_eq!((c.recovery.holes_opened, c.recovery.holes_lost), (1, 1));
    assert_eq!(c.channel_messages_lost, 4_244_620);
    assert_eq!(c.channel_gaps, 1);
    assert_eq!(
        (c.invalid_packets, c.unknown_messages, c.invalid_messages),
        (0, 0, 0)
    );
    // The Delete names an order added before the join: unknown, counted.
    assert_eq!(c.unknown_orders, 1);
    assert_eq!(c.live_orders, 38);
    let types = feed.message_types().unwrap();
    assert_eq!(
        (
            types[b'D' as usize],
            types[b'A' as usize] + types[b'F' as usize]
        ),
        (1, 38)
    );
    // Joined late, then a gap: nothing on this feed may be trusted.
    for (sym, s) in feed.symbols() {
        assert!(s.suspect.is_some(), "{sym}");
    }
}

#[test]
fn nasdaq_real_merged_sessions_and_sequences() {
    let (feed, headers) = itch_headers(
        "nasdaq-totalview-itch50-real-merged.pcap",
        SAMPLE_MAX_CHANNEL_JUMP,
    );
    let seqs: Vec<u64> = headers.iter().map(|h| h.1).collect();
    assert_eq!(
        seqs,
        [
            14_757_701, 14_757_721, 14_757_722, 14_757_745, 14_757_919, 14_764_496, 17_861_990,
            19_009_117, 34_147_961
        ]
    );
    assert!(headers
        .iter()
        .all(|h| h.0 == SessionId::parse("000010059B").unwrap()));
    assert_eq!(headers.iter().map(|h| h.2 as u64).sum::<u64>(), 46);
    let c = feed.counters();
    assert_eq!(
        (c.invalid_packets, c.unknown_messages, c.invalid_messages),
        (0, 0, 0)
    );
    assert!(c.channel_gaps >= 1);

    let (feed, headers) =
        itch_headers("nasdaq-bx-itch50-real-merged.pcap", SAMPLE_MAX_CHANNEL_JUMP);
    let seqs: Vec<u64> = headers.iter().map(|h| h.1).collect();
    assert_eq!(seqs, [1_621_717, 1_621_741, 1_621_746]);
    assert!(headers
        .iter()
        .all(|h| h.0 == SessionId::parse("000010059D").unwrap()));
    assert_eq!(feed.counters().invalid_packets, 0);
}

/// The anonymized file: every packet validates as nasdaq-itch and every
/// message decodes; together they cover the types the README lists.
#[test]
fn nasdaq_anonymized_file_decodes_every_message_type() {
    let packets =
        captures::udp_payloads(&fixture("nasdaq-totalview-itch50-anon-message-types.pcap"));
    assert_eq!(packets.len(), 71);
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in packets.iter().enumerate() {
        // Framing and sizes as the venue validates them.
        let mut feed = itch_feed();
        assert_eq!(
            feed.on_datagram(0, p, 0),
            DatagramOutcome::Applied,
            "packet {i}"
        );
        assert_eq!(feed.counters().invalid_messages, 0);
        assert_eq!(feed.counters().unknown_messages, 0);
        let packet = Packet::parse_with(p, |k| messages::message_size(k).unwrap_or(1)).unwrap();
        for block in packet.blocks() {
            let m =
                messages::decode(block).unwrap_or_else(|| panic!("packet {i}: type {}", block[0]));
            assert_eq!(m.kind(), block[0]);
            seen.insert(block[0] as char);
        }
    }
    let want: std::collections::BTreeSet<char> = "AFPQUXDECLHYIJS".chars().collect();
    assert_eq!(seen, want);
}

#[test]
fn nasdaq_replay_cli_reports_the_venue_counters() {
    let v = replay_json(&[
        &fixture("nasdaq-totalview-itch50-moldudp64.pcap"),
        "--venue",
        "nasdaq-itch",
    ]);
    let f = &v["feeds"][0];
    assert_eq!(f["venue"], "nasdaq-itch");
    // C3b: the second packet is 4,244,620 messages on, not believed.
    assert_eq!(f["channel_lost"], 0);
    assert_eq!(f["channel_seq_anomalies"], 1);
    assert_eq!(f["unknown_orders"], 1);
    assert_eq!(f["live_orders"], 0);
    assert_eq!(f["message_types"]["D"], 1);
}
