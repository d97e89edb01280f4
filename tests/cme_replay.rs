//! `tickgate replay` on CME MDP 3.0 (venues.md `cme-mdp3`): the real
//! captures of fixtures/real/ (their README's facts, now through the
//! engine: channel rules, RptSeq, books, counters), and every scenario of
//! `cme_scenarios.json` written as a capture with one destination per line
//! and replayed with `--config` (the three kinds of line told by
//! destination) and `--checks`: each answer as the contract says.

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tickgate::capture::{CaptureReader, PcapWriter};
use tickgate::venue::cme_mdp3::messages::{self, Body, Item};
use tickgate::venue::cme_mdp3::sbe;

fn tickgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(args)
        .output()
        .expect("running tickgate")
}

fn replay_json(args: &[&str]) -> Value {
    let mut all = vec!["replay", "--json"];
    all.extend_from_slice(args);
    let out = tickgate(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn fixture(name: &str) -> String {
    format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The one feed of a replay summary.
fn feed_of(v: &Value) -> &Value {
    let feeds = v["feeds"].as_array().unwrap();
    assert_eq!(feeds.len(), 1);
    &feeds[0]
}

fn types(f: &Value) -> BTreeMap<String, u64> {
    f["message_types"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

#[test]
fn v6_channel_through_the_engine() {
    let v = replay_json(&[
        &fixture("cme-mdp3-v6-incremental-ab.pcapng"),
        "--venue",
        "cme-mdp3",
    ]);
    let f = feed_of(&v);
    // 5,000 packets a line, every A copy equal to its B copy: one is a
    // duplicate (C2), none invalid, nothing lost.
    let lines = f["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 2);
    for l in lines {
        assert_eq!(l["packets"], 5000, "{l}");
        assert_eq!(l["invalid_packets"], 0, "{l}");
    }
    assert_eq!(f["duplicate_packets"], 5000);
    assert_eq!(f["channel_lost"], 0);
    assert_eq!(f["channel_gaps"], 0);
    assert_eq!(f["invalid_messages"], 0);
    assert_eq!(f["unknown_messages"], 0);
    // One session, MsgSeqNum 5615 to 10614.
    let sessions = f["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["first_sequence"], 5615);
    assert_eq!(sessions[0]["next_sequence"], 10615);
    // Messages applied, by template: one line's worth.
    let want: BTreeMap<String, u64> = [
        ("12", 9),
        ("32", 9569),
        ("35", 307),
        ("37", 194),
        ("42", 194),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(types(f), want);
    // RptSeq is contiguous per instrument: no entry lost, none repeated.
    assert_eq!(f["ticks_lost"], 0);
    assert_eq!(f["stale_dropped"], 0);
    assert_eq!(f["seq_anomalies"], 0);
    // 127 instruments, every one joined late: each waits for a snapshot
    // (`no_snapshot`, never `gap`), none has a book error.
    let symbols = v["symbols"].as_object().unwrap();
    assert_eq!(symbols.len(), 127);
    for (name, s) in symbols {
        assert!(name.starts_with('#'), "{name}");
        assert_eq!(s["suspect"], "no_snapshot", "{name}: {s}");
    }
    // A late join's books lack the levels sent before it: the few entries
    // that change or delete such a level cannot apply (counted); their
    // instruments already wait, so the cause stays `no_snapshot`.
    assert_eq!(f["book_errors"], 5);
    assert_eq!(f["snapshots_applied"], 0);
    assert_eq!(f["instruments_waiting"], 127);
    assert!(f["recovery_entries_kept"].as_u64().unwrap() > 0);
    assert_eq!(f["recovery_entries_dropped"], 0);
    // SecurityID 411873 was first seen at RptSeq 111.
    let s = &symbols["#411873"];
    assert!(s["seq"].as_u64().unwrap() >= 111, "{s}");
}

#[test]
fn v8_security_status_messages_are_applied() {
    let v = replay_json(&[
        &fixture("cme-mdp3-v8-status-ab.pcapng"),
        "--venue",
        "cme-mdp3",
    ]);
    let f = feed_of(&v);
    for l in f["lines"].as_array().unwrap() {
        assert_eq!(l["packets"], 5000, "{l}");
        assert_eq!(l["invalid_packets"], 0, "{l}");
    }
    let sessions = f["sessions"].as_array().unwrap();
    assert_eq!(sessions[0]["first_sequence"], 17347815);
    assert_eq!(sessions[0]["next_sequence"], 17352815);
    assert_eq!(f["channel_lost"], 0);
    // 198 SecurityStatus messages on the two lines: 99 applied, their
    // copies duplicates.
    assert_eq!(types(f)["30"], 99);
}

/// What one destination's packets hold, decoded by the library directly.
struct Decoded {
    templates: BTreeMap<String, u64>,
    unknown: u64,
    /// Outright (bid or offer) Book entries, and how many of them are New.
    outright: u64,
    outright_new: u64,
}

fn decoded(file: &str, dst: SocketAddrV4) -> Decoded {
    let mut r = CaptureReader::open(file).unwrap();
    let mut out = Decoded {
        templates: BTreeMap::new(),
        unknown: 0,
        outright: 0,
        outright_new: 0,
    };
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        if d.dst != dst {
            continue;
        }
        let (_, msgs) = sbe::packet(d.payload).unwrap();
        for m in msgs {
            match messages::decode(&m.unwrap()).unwrap() {
                Item::Known { header, body } => {
                    *out.templates
                        .entry(header.template_id.to_string())
                        .or_insert(0) += 1;
                    if let Body::Incremental { entries, .. } = body {
                        for b in entries.filter_map(|e| e.book) {
                            if b.entry_type == b'0' || b.entry_type == b'1' {
                                out.outright += 1;
                                out.outright_new += u64::from(b.action == 0);
                            }
                        }
                    }
                }
                Item::Unknown { .. } => out.unknown += 1,
            }
        }
    }
    out
}

#[test]
fn v9_templates_through_the_engine() {
    // One line of one channel of the sample: its packets are in sequence.
    let file = fixture("cme-mdp3-v9-sample.pcap");
    let dst: SocketAddrV4 = "224.0.28.146:15360".parse().unwrap();
    let v = replay_json(&[&file, "--venue", "cme-mdp3", "--filter", &dst.to_string()]);
    let f = feed_of(&v);
    let d = decoded(&file, dst);
    assert!(d.templates.contains_key("46"), "{:?}", d.templates);
    assert_eq!(f["invalid_packets"], 0);
    assert_eq!(f["channel_lost"], 0);
    assert_eq!(f["duplicate_packets"], 0);
    assert_eq!(types(f), d.templates);
    // OrderBook 47 (Market By Order) is not read: skipped, counted.
    assert!(d.unknown > 0);
    assert_eq!(f["unknown_messages"], d.unknown);
    // Joined late with no New among them: every outright entry changes a
    // level the book never saw, so each is a book error.
    assert_eq!(d.outright_new, 0);
    assert_eq!(f["book_errors"], d.outright);
}

#[test]
fn v5_definitions_name_their_instruments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cme.toml");
    std::fs::write(
        &cfg,
        "[[feed]]\nname = \"es\"\nvenue = \"cme-mdp3\"\n\n\
         [[feed.line]]\nname = \"A\"\ngroup = \"224.0.31.1\"\nport = 14310\n\n\
         [[feed.line]]\nname = \"DA\"\ngroup = \"224.0.31.43\"\nport = 14310\nkind = \"definition\"\n",
    )
    .unwrap();
    let v = replay_json(&[
        &fixture("cme-mdp3-v5-definitions.pcap"),
        "--config",
        p(&cfg),
    ]);
    let f = feed_of(&v);
    let lines = f["lines"].as_array().unwrap();
    assert_eq!(lines[1]["packets"], 1);
    assert_eq!(lines[1]["invalid_packets"], 0);
    // Templates 27 (blockLength 214 on the wire) and 29 (193).
    assert_eq!(types(f)["27"], 2);
    assert_eq!(types(f)["29"], 3);
    let names: Vec<&str> = v["symbols"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    // The three 9-character spreads answer by name too (gate.md: symbols
    // of up to 20 characters).
    for n in [
        "ESU6",
        "ESZ5",
        "ESM6-ESU6",
        "ESM6-ESZ6",
        "ESU6-ESZ6",
        "#2615",
        "#13950",
        "#10123",
        "#7978",
        "#8036",
    ] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    assert_eq!(names.len(), 10, "{names:?}");
    // A definition gives no sequence and no quote.
    for s in v["symbols"].as_object().unwrap().values() {
        assert_eq!(s["seq"], Value::Null, "{s}");
    }
    // The gate's answers: a 9-character spread is known (no data yet); 20
    // characters can be asked for, 21 cannot exist.
    let chk = dir.path().join("checks.txt");
    let at = "5092209031427001";
    std::fs::write(
        &chk,
        format!(
            "{at} CHECK ESM6-ESU6\n{at} CHECK ESM6-ESU6-ESZ6-ESH7X\n{at} CHECK ESM6-ESU6-ESZ6-ESH7XY\n"
        ),
    )
    .unwrap();
    let out = tickgate(&[
        "replay",
        &fixture("cme-mdp3-v5-definitions.pcap"),
        "--config",
        p(&cfg),
        "--checks",
        p(&chk),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers = String::from_utf8(out.stdout).unwrap();
    let answers: Vec<&str> = answers
        .lines()
        .filter(|l| l.starts_with("REJECT") || l.starts_with("OK"))
        .collect();
    let na = "seq=- bid=- ask=- silence_us=- source_age_us=-";
    assert_eq!(
        answers,
        [
            format!("REJECT ESM6-ESU6 no_data {na}"),
            format!("REJECT ESM6-ESU6-ESZ6-ESH7X unknown_symbol {na}"),
            format!("REJECT ESM6-ESU6-ESZ6-ESH7XY unknown_symbol {na}"),
        ]
    );
}

/// Destinations for a scenario's named lines.
fn dst_of(line: &str) -> SocketAddrV4 {
    let (group, port) = match line {
        "A" => ("224.0.31.1", 14001),
        "B" => ("224.0.32.1", 15001),
        "SA" => ("224.0.31.2", 14002),
        "SB" => ("224.0.32.2", 15002),
        "DA" => ("224.0.31.3", 14003),
        other => panic!("no destination for line {other}"),
    };
    SocketAddrV4::new(group.parse().unwrap(), port)
}

/// A scenario's feed as a config file.
fn config_of(feed: &Value) -> String {
    let mut c = String::from("[[feed]]\nname = \"cme\"\nvenue = \"cme-mdp3\"\n");
    for key in [
        "gap_hold_us",
        "stale_ms",
        "source_max_age_ms",
        "max_seq_jump",
    ] {
        if let Some(n) = feed[key].as_u64() {
            c += &format!("{key} = {n}\n");
        }
    }
    for key in ["liveness", "clock_offset"] {
        if let Some(s) = feed[key].as_str() {
            c += &format!("{key} = \"{s}\"\n");
        }
    }
    for (name, kind) in feed["lines"].as_object().unwrap() {
        let d = dst_of(name);
        c += &format!(
            "\n[[feed.line]]\nname = \"{name}\"\ngroup = \"{}\"\nport = {}\nkind = {kind}\n",
            d.ip(),
            d.port()
        );
    }
    c
}

#[test]
fn every_cme_scenario_through_replay_with_its_lines_by_destination() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/cme_scenarios.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src: SocketAddrV4 = "10.0.0.1:40000".parse().unwrap();
    let mut failures = Vec::new();
    let mut checks = 0;
    for sc in doc["scenarios"].as_array().unwrap() {
        let name = sc["name"].as_str().unwrap();
        let cfg = dir.path().join(format!("{name}.toml"));
        std::fs::write(&cfg, config_of(&sc["feed"])).unwrap();
        let cap = dir.path().join(format!("{name}.pcap"));
        let chk = dir.path().join(format!("{name}.checks"));
        let mut w = PcapWriter::create(&cap).unwrap();
        let mut lines = String::new();
        let mut want = Vec::new();
        for step in sc["steps"].as_array().unwrap() {
            let t = step["t"].as_i64().unwrap();
            if let Some(h) = step["hex"].as_str() {
                let line = step["line"].as_str().unwrap_or("A");
                w.write_udp(t, src, dst_of(line), &hex::decode(h).unwrap())
                    .unwrap();
            } else {
                lines += &format!("{t} {}\n", step["check"].as_str().unwrap());
                want.push(step["expect"].as_str().unwrap().to_string());
            }
        }
        w.into_inner().unwrap();
        std::fs::write(&chk, lines).unwrap();
        let out = tickgate(&["replay", p(&cap), "--config", p(&cfg), "--checks", p(&chk)]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8(out.stdout).unwrap();
        let got: Vec<&str> = got.lines().collect();
        assert_eq!(got.len(), want.len(), "{name}: {got:?}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            checks += 1;
            if g != w {
                failures.push(format!(
                    "{name} check {i}:\n   expected {w}\n   got      {g}"
                ));
            }
        }
    }
    assert!(checks > 40, "{checks}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A channel file in CME's format with the v6 capture's two incremental
/// lines, a snapshot and a definition connection, and TCP replay.
const CHANNEL_FILE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<configuration environment="PROD" updated="2016/11/12-00:00:00">
  <channel id="344" label="CME Globex Test">
    <products><product code="GE"><group code="GE"/></product></products>
    <connections>
      <connection id="344H2A"><type feed-type="H">Historical Replay</type><protocol>TCP/IP</protocol>
        <host-ip>205.209.220.72</host-ip><port>10000</port><feed>A</feed></connection>
      <connection id="344IA"><type feed-type="I">Incremental</type><protocol>UDP/IP</protocol>
        <ip>224.0.31.64</ip><host-ip>205.209.223.70</host-ip><port>14340</port><feed>A</feed></connection>
      <connection id="344IB"><type feed-type="I">Incremental</type><protocol>UDP/IP</protocol>
        <ip>224.0.32.64</ip><host-ip>205.209.212.70</host-ip><port>15340</port><feed>B</feed></connection>
      <connection id="344NA"><type feed-type="N">Instrument Replay</type><protocol>UDP/IP</protocol>
        <ip>224.0.31.106</ip><host-ip>205.209.222.85</host-ip><port>14340</port><feed>A</feed></connection>
      <connection id="344SA"><type feed-type="S">Snapshot</type><protocol>UDP/IP</protocol>
        <ip>224.0.31.85</ip><host-ip>205.209.222.87</host-ip><port>14340</port><feed>A</feed></connection>
    </connections>
  </channel>
</configuration>
"#;

#[test]
fn lines_from_cmes_channel_file() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("config.xml");
    std::fs::write(&xml, CHANNEL_FILE).unwrap();
    let cfg = dir.path().join("cme.toml");
    let feed = |id: u32| {
        format!(
            "[[feed]]\nname = \"ge\"\nvenue = \"cme-mdp3\"\n\
             cme_channel = {{ file = \"{}\", id = {id} }}\n",
            xml.display()
        )
    };
    std::fs::write(&cfg, feed(344)).unwrap();
    let out = tickgate(&["run", "--config", p(&cfg), "--check-config"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 feed, 4 lines"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = replay_json(&[
        &fixture("cme-mdp3-v6-incremental-ab.pcapng"),
        "--config",
        p(&cfg),
    ]);
    let f = feed_of(&v);
    let lines: Vec<(String, u64)> = f["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["dst"].as_str().unwrap().to_string(),
                l["packets"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("224.0.31.64:14340".to_string(), 5000),
            ("224.0.32.64:15340".to_string(), 5000),
            ("224.0.31.106:14340".to_string(), 0),
            ("224.0.31.85:14340".to_string(), 0),
        ]
    );
    assert_eq!(f["channel_lost"], 0);
    assert_eq!(v["symbols"].as_object().unwrap().len(), 127);

    // What is wrong is named, with the file.
    std::fs::write(&cfg, feed(999)).unwrap();
    let out = tickgate(&["run", "--config", p(&cfg), "--check-config"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cme_channel.file") && err.contains("no channel 999 in the file (it has 344"),
        "{err}"
    );
}

/// The packets of a capture, in capture order.
fn payloads(name: &str) -> Vec<(i64, Vec<u8>)> {
    let mut r = CaptureReader::open(fixture(name)).unwrap();
    let mut out = Vec::new();
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        out.push((d.ts_ns, d.payload.to_vec()));
    }
    out
}

/// venues.md `cme-mdp3`, Snapshots: the snapshot lines are wanted only
/// while an instrument waits, the definition lines until the loop was
/// seen whole and while an entry names an instrument without definition.
#[test]
fn loops_are_wanted_only_while_needed() {
    use tickgate::feed::{Feed, FeedSettings, VenueKind};
    use tickgate::venue::LineKind;
    let mut f = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 3);
    f.set_line_kind(1, LineKind::Snapshot);
    f.set_line_kind(2, LineKind::Definition);
    assert!(f.line_wanted(0));
    // Nothing known yet: nothing waits; the definition loop is unseen.
    assert!(!f.line_wanted(1));
    assert!(f.line_wanted(2));
    // The v5 packet: five definitions of a loop of 15 (TotNumReports).
    let defs = payloads("cme-mdp3-v5-definitions.pcap");
    f.on_datagram(2, &defs[0].1, defs[0].0);
    assert_eq!(f.symbol_count(), 10, "five # names and five symbols");
    // Defined instruments without a sequence wait for their snapshot.
    assert!(f.line_wanted(1));
    assert!(f.line_wanted(2), "5 of the loop's 15 definitions seen");

    // A loop of two (the contract's first scenario), seen whole.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/cme_scenarios.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let steps = doc["scenarios"][0]["steps"].as_array().unwrap();
    let def = hex::decode(steps[0]["hex"].as_str().unwrap()).unwrap();
    assert_eq!(steps[0]["line"], "DA");
    let mut f = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 3);
    f.set_line_kind(1, LineKind::Snapshot);
    f.set_line_kind(2, LineKind::Definition);
    f.on_datagram(2, &def, 1);
    assert!(!f.line_wanted(2), "the loop was seen whole");
    assert!(f.line_wanted(1), "its instruments wait for a snapshot");
    // The v6 channel names instruments the loop did not define.
    for (t, p) in payloads("cme-mdp3-v6-incremental-ab.pcapng")
        .iter()
        .take(50)
    {
        f.on_datagram(0, p, *t);
    }
    assert!(
        f.line_wanted(2),
        "entries name instruments without definition"
    );

    // The contract's late join: once its snapshots were used, nothing
    // waits and the snapshot lines are left.
    let sc = doc["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "late_join_recovered_by_snapshot")
        .unwrap();
    let mut f = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 2);
    f.set_line_kind(1, LineKind::Snapshot);
    let mut wanted_while_waiting = false;
    for step in sc["steps"].as_array().unwrap() {
        let Some(h) = step["hex"].as_str() else {
            continue;
        };
        let line = if step["line"] == "SA" { 1 } else { 0 };
        f.on_datagram(line, &hex::decode(h).unwrap(), step["t"].as_i64().unwrap());
        wanted_while_waiting |= f.venue_recovery().waiting > 0 && f.line_wanted(1);
    }
    assert!(wanted_while_waiting);
    assert!(f.counters().snapshots_applied > 0);
    assert_eq!(f.venue_recovery().waiting, 0);
    assert!(
        !f.line_wanted(1),
        "nothing waits: the snapshot lines are left"
    );
}

/// An operator's thresholds for a CME symbol (`[feed.symbols.ESZ6]`) stay
/// that name's own: the symbol's slot shows its instrument's state, not
/// the `#` name's feed-wide thresholds.
#[test]
fn a_symbols_own_thresholds_survive_its_instruments_updates() {
    use tickgate::feed::{Feed, FeedSettings, VenueKind};
    use tickgate::venue::LineKind;
    use tickgate::wire::Symbol;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/cme_scenarios.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut f = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 2);
    f.set_line_kind(1, LineKind::Definition);
    let esz6 = Symbol::parse("ESZ6").unwrap();
    f.set_symbol_thresholds(esz6, 200, 900).unwrap();
    // Definitions, then entries from RptSeq 1: ESZ6 is #1001.
    for step in doc["scenarios"][0]["steps"].as_array().unwrap() {
        if let Some(h) = step["hex"].as_str() {
            let line = usize::from(step["line"] == "DA");
            f.on_datagram(line, &hex::decode(h).unwrap(), step["t"].as_i64().unwrap());
        }
    }
    let (_, named) = f.symbol_view(esz6).unwrap();
    let (_, id) = f.symbol_view(Symbol::parse("#1001").unwrap()).unwrap();
    assert_eq!((named.stale_ms, named.source_max_age_ms), (200, 900));
    assert_eq!((id.stale_ms, id.source_max_age_ms), (1500, 2000));
    assert_eq!(
        (named.seq, named.bid(), named.ask()),
        (id.seq, id.bid(), id.ask())
    );
    assert!(named.seq > 0);
}
