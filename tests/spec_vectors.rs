//! Every datagram of `spec/vectors.json`:
//! - a valid vector decodes to exactly the listed session, sequence, count
//!   and messages, and the packet rebuilt from the listed fields with
//!   `wire::PacketBuilder` is the vector byte for byte;
//! - an invalid vector is rejected by `Packet::parse` (with the error its
//!   name describes), and fed to a `Feed` it counts one invalid packet and
//!   changes nothing else.

#[path = "common/captures.rs"]
mod captures;
#[path = "common/scenarios.rs"]
mod scenarios;

use serde_json::Value;
use tickgate::feed::{Feed, FeedSettings};
use tickgate::wire::{
    Heartbeat, Message, Packet, PacketBuilder, PacketKind, Quote, SessionId, Symbol, WireError,
    QUOTE_LEN, TYPE_QUOTE, TYPE_SNAPSHOT,
};

fn vectors() -> Vec<Value> {
    let path = scenarios::spec_path("vectors.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["vectors"].as_array().unwrap().clone()
}

fn side(v: &Value) -> (i64, u64) {
    match v {
        Value::Null => (0, 0),
        v => (v[0].as_i64().unwrap(), v[1].as_u64().unwrap()),
    }
}

/// The Quote/Snapshot the JSON lists (absent sides are zeros on the wire).
fn listed_quote(m: &Value) -> Quote {
    let (bid_px, bid_qty) = side(&m["bid"]);
    let (ask_px, ask_qty) = side(&m["ask"]);
    Quote {
        flags: m["flags"].as_u64().unwrap() as u8,
        symbol: Symbol::parse(m["symbol"].as_str().unwrap()).unwrap(),
        seq: m["seq"].as_u64().unwrap(),
        source_ts: m["ts"].as_u64().unwrap(),
        bid_px,
        bid_qty,
        ask_px,
        ask_qty,
    }
}

fn check_decoded(name: &str, listed: &Value, got: &Message<'_>) {
    match (listed["type"].as_str().unwrap(), got) {
        ("Q", Message::Quote(q)) | ("S", Message::Snapshot(q)) => {
            assert_eq!(*q, listed_quote(listed), "{name}");
            assert_eq!(q.symbol.to_string(), listed["symbol"].as_str().unwrap());
            let bid = q.bid().map(|s| (s.px, s.qty));
            let ask = q.ask().map(|s| (s.px, s.qty));
            assert_eq!(bid.is_some(), !listed["bid"].is_null(), "{name} bid");
            assert_eq!(ask.is_some(), !listed["ask"].is_null(), "{name} ask");
            if let Some(b) = bid {
                assert_eq!(b, side(&listed["bid"]), "{name}");
            }
            if let Some(a) = ask {
                assert_eq!(a, side(&listed["ask"]), "{name}");
            }
            assert_eq!(q.reset(), listed["reset"].as_bool().unwrap(), "{name}");
        }
        ("H", Message::Heartbeat(h)) => {
            assert_eq!(h.symbol.to_string(), listed["symbol"].as_str().unwrap());
            assert_eq!(h.next_seq, listed["next_seq"].as_u64().unwrap(), "{name}");
            assert_eq!(h.source_ts, listed["ts"].as_u64().unwrap(), "{name}");
            assert_eq!(h.flags, 0, "{name}");
        }
        ("?", Message::Unknown { kind, .. }) => {
            assert!(![b'Q', b'S', b'H'].contains(kind), "{name}");
        }
        (t, m) => panic!("{name}: listed type {t}, decoded {m:?}"),
    }
}

#[test]
fn valid_vectors_decode_and_reencode() {
    let mut seen = 0;
    for v in vectors().iter().filter(|v| v["valid"].as_bool().unwrap()) {
        let name = v["name"].as_str().unwrap();
        let bytes = hex::decode(v["hex"].as_str().unwrap()).unwrap();
        let p = Packet::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let session = SessionId::parse(v["session"].as_str().unwrap()).unwrap();
        assert_eq!(p.session, session, "{name}");
        assert_eq!(p.sequence, v["sequence"].as_u64().unwrap(), "{name}");
        assert_eq!(p.count as u64, v["count"].as_u64().unwrap(), "{name}");
        let listed = v["messages"].as_array().unwrap();
        let decoded: Vec<Message<'_>> = p.messages().collect();
        assert_eq!(decoded.len(), listed.len(), "{name}");
        for (l, m) in listed.iter().zip(&decoded) {
            check_decoded(name, l, m);
        }

        // Rebuild from the listed fields.
        let rebuilt: Vec<u8> = match p.kind() {
            PacketKind::Heartbeat => PacketBuilder::channel_heartbeat(session, p.sequence).to_vec(),
            PacketKind::EndOfSession => PacketBuilder::end_of_session(session, p.sequence).to_vec(),
            PacketKind::Data => {
                let mut b = PacketBuilder::new();
                b.start(session, p.sequence);
                for (l, raw) in listed.iter().zip(p.blocks()) {
                    match l["type"].as_str().unwrap() {
                        t @ ("Q" | "S") => {
                            let kind = if t == "Q" { TYPE_QUOTE } else { TYPE_SNAPSHOT };
                            let known = listed_quote(l).encode(kind);
                            // longer_block_ok: the known fields re-encode to
                            // the block's first 58 bytes; the bytes past the
                            // type's size (ignored by the decoder) are
                            // carried over verbatim from the vector.
                            let mut payload = known.to_vec();
                            payload.extend_from_slice(&raw[QUOTE_LEN..]);
                            b.push_raw(&payload);
                        }
                        "H" => {
                            b.heartbeat(&Heartbeat {
                                flags: 0,
                                symbol: Symbol::parse(l["symbol"].as_str().unwrap()).unwrap(),
                                next_seq: l["next_seq"].as_u64().unwrap(),
                                source_ts: l["ts"].as_u64().unwrap(),
                            });
                        }
                        // An unknown type has no listed fields: its raw
                        // payload (type byte included) is re-framed as is,
                        // which checks the length prefix and the position
                        // of the blocks around it.
                        _ => {
                            b.push_raw(raw);
                        }
                    }
                }
                b.bytes().to_vec()
            }
        };
        assert_eq!(hex::encode(&rebuilt), hex::encode(&bytes), "{name}");
        seen += 1;
    }
    assert_eq!(seen, 10);
}

fn expected_error(name: &str, e: WireError) -> bool {
    match name {
        "truncated" => matches!(e, WireError::Truncated { .. }),
        "trailing_bytes" | "heartbeat_with_body" => matches!(e, WireError::TrailingBytes { .. }),
        "short_quote_block" => matches!(e, WireError::ShortBlock { kind: b'Q', .. }),
        "short_header" => matches!(e, WireError::ShortHeader { .. }),
        "zero_length_block" => matches!(e, WireError::EmptyBlock { .. }),
        _ => true,
    }
}

#[test]
fn invalid_vectors_are_rejected_and_change_nothing() {
    let all = vectors();
    let first_valid = hex::decode(all[0]["hex"].as_str().unwrap()).unwrap();
    let mut seen = 0;
    for v in all.iter().filter(|v| !v["valid"].as_bool().unwrap()) {
        let name = v["name"].as_str().unwrap();
        let bytes = hex::decode(v["hex"].as_str().unwrap()).unwrap();
        let err = Packet::parse(&bytes).expect_err(name);
        assert!(expected_error(name, err), "{name}: {err:?}");

        // A feed with some state, then the invalid datagram on line B.
        let mut feed = Feed::new(FeedSettings::default(), 2);
        let t = 1_796_025_600_000_000_000;
        feed.on_datagram(0, &first_valid, t);
        let counters = feed.counters().clone();
        let symbols: Vec<_> = feed.symbols().collect();
        let view = *feed.feed_view();
        let sessions = feed.sessions().to_vec();
        let out = feed.on_datagram(1, &bytes, t + 1_000_000);
        assert_eq!(
            out,
            tickgate::feed::DatagramOutcome::Invalid(err.into()),
            "{name}"
        );
        let mut expected = counters.clone();
        expected.invalid_packets += 1;
        expected.lines[1].invalid_packets += 1;
        assert_eq!(*feed.counters(), expected, "{name}");
        assert_eq!(feed.symbols().collect::<Vec<_>>(), symbols, "{name}");
        assert_eq!(*feed.feed_view(), view, "{name}");
        assert_eq!(feed.sessions(), &sessions[..], "{name}");
        seen += 1;
    }
    assert_eq!(seen, 6);
}

/// UDP payloads of a capture in `fixtures/real/`.
fn real_payloads(file: &str) -> Vec<Vec<u8>> {
    captures::udp_payloads(&format!(
        "{}/fixtures/real/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

/// Real Nasdaq MoldUDP64 traffic frames correctly: ITCH messages are
/// unknown types, skipped by length; the second packet opens the channel
/// gap tshark reports (fixtures README), once `max_channel_jump` (C3b) is
/// raised above its 4,244,620 messages.
#[test]
fn real_moldudp64_captures_frame_correctly() {
    let packets = real_payloads("nasdaq-totalview-itch50-moldudp64.pcap");
    assert_eq!(packets.len(), 2);
    let mut feed = Feed::new(
        FeedSettings {
            max_channel_jump: 10_000_000,
            ..FeedSettings::default()
        },
        1,
    );
    for (i, p) in packets.iter().enumerate() {
        let parsed = Packet::parse(p).unwrap();
        assert_eq!(parsed.session, SessionId::parse("000010059B").unwrap());
        assert!(parsed
            .messages()
            .all(|m| matches!(m, Message::Unknown { .. })));
        assert_eq!(
            feed.on_datagram(0, p, 1_692_711_000_000_000_000 + i as i64),
            tickgate::feed::DatagramOutcome::Applied
        );
    }
    let c = feed.counters();
    assert_eq!(c.lines[0].packets, 2);
    assert_eq!(c.lines[0].messages, 1 + 38);
    assert_eq!(c.unknown_messages, 39);
    assert_eq!(c.channel_messages_lost, 19_009_117 - (14_764_496 + 1));
    assert_eq!(c.channel_gaps, 1);
    assert_eq!(feed.symbol_count(), 0);

    let hb = real_payloads("nasdaq-ise-moldudp64-heartbeat.pcap");
    let parsed = Packet::parse(&hb[0]).unwrap();
    assert_eq!(parsed.kind(), PacketKind::Heartbeat);
    assert_eq!(parsed.sequence, 383_265);
    let mut feed = Feed::new(FeedSettings::default(), 1);
    feed.on_datagram(0, &hb[0], 7);
    assert_eq!(feed.feed_view().channel_alive_at, 7);
}
