//! The packets of `cme_scenarios.json` (venues.md `cme-mdp3`) through the
//! venue's own parts: every packet decodes, and where a scenario's answers
//! depend only on the book, the names and the trading state (no snapshot,
//! no channel reset, no session change), the book's level 1, the name
//! resolution and the halted state match every check's expected answer.
//!
//! This is not the scenario runner: the per-instrument sequence rules, the
//! channel rules by MsgSeqNum and SendingTime, snapshots and the answers'
//! times need the engine (`feed`), where this venue is not plugged in yet.

use serde_json::Value;
use tickgate::feed::check::write_price_bytes;
use tickgate::venue::cme_mdp3::instruments::Instruments;
use tickgate::venue::cme_mdp3::messages::{self, Body, Item};
use tickgate::venue::cme_mdp3::sbe;
use tickgate::wire::Side;

/// The contract file, from the repository's copy of the contract.
fn scenarios() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/cme_scenarios.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn side(s: Option<Side>) -> String {
    match s {
        None => "-".into(),
        Some(s) => {
            let mut p = Vec::new();
            write_price_bytes(&mut p, s.px);
            format!("{}@{}", String::from_utf8(p).unwrap(), s.qty)
        }
    }
}

/// The `key=value` of an answer line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

#[test]
fn every_packet_of_the_contract_decodes() {
    let doc = scenarios();
    let mut packets = 0;
    let mut templates = std::collections::BTreeSet::new();
    for s in doc["scenarios"].as_array().unwrap() {
        for step in s["steps"].as_array().unwrap() {
            let Some(h) = step["hex"].as_str() else {
                continue;
            };
            let d = unhex(h);
            if u64::from_le_bytes(d[4..12].try_into().unwrap()) >= 1 << 63 {
                // Framing: a SendingTime of 2^63 or more is invalid.
                assert!(
                    matches!(
                        messages::validate(&d),
                        Err(sbe::SbeError::SendingTimeTooLarge { .. })
                    ),
                    "{}",
                    s["name"]
                );
                continue;
            }
            let summary = messages::validate(&d).unwrap_or_else(|e| panic!("{}: {e}", s["name"]));
            assert_eq!(summary.unknown, 0, "{}", s["name"]);
            let (_, msgs) = sbe::packet(&d).unwrap();
            for m in msgs {
                let m = m.unwrap();
                // Schema 9, and template 32 of schema 6 (its prices x 10^-7).
                let v = m.header.version;
                assert!(v == 9 || (v == 6 && m.header.template_id == 32), "{v}");
                templates.insert(m.header.template_id);
            }
            packets += 1;
        }
    }
    assert!(packets > 40, "{packets}");
    // Book, trade, status, reset, heartbeat, snapshot and definitions.
    for t in [4, 12, 30, 32, 46, 48, 52, 54] {
        assert!(templates.contains(&t), "template {t} in {templates:?}");
    }
}

/// The scenarios whose answers follow from the book, names and trading
/// state alone.
const BOOK_ONLY: &[&str] = &[
    "book_from_rptseq_1",
    "late_join_no_snapshot",
    "book_actions",
    "old_prices_times_100",
    "channel_gap_clears_per_instrument",
    "group_status_halts_through_definitions",
    "channel_liveness_and_staleness",
];

#[test]
fn books_names_and_halts_answer_as_the_contract_says() {
    let doc = scenarios();
    let mut checked = 0;
    for s in doc["scenarios"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        if !BOOK_ONLY.contains(&name) {
            continue;
        }
        let lines = &s["feed"]["lines"];
        let mut inst = Instruments::default();
        for step in s["steps"].as_array().unwrap() {
            if let Some(h) = step["hex"].as_str() {
                let kind = lines[step["line"].as_str().unwrap()].as_str().unwrap();
                assert!(kind == "incremental" || kind == "definition", "{name}");
                let d = unhex(h);
                let (_, msgs) = sbe::packet(&d).unwrap();
                for m in msgs {
                    let Item::Known { body, .. } = messages::decode(&m.unwrap()).unwrap() else {
                        continue;
                    };
                    match body {
                        Body::Definition(def) => {
                            inst.define(&def);
                        }
                        Body::SecurityStatus(st) => inst.status(&st, |_| {}),
                        Body::Incremental { entries, .. } => {
                            for e in entries {
                                let i = inst.index(e.security_id);
                                if let Some(b) = e.book {
                                    // An entry that cannot apply changes nothing.
                                    let _ = inst.get_mut(i).unwrap().book.apply(&b);
                                }
                            }
                        }
                        Body::AdminHeartbeat => {}
                        other => panic!("{name}: {other:?}"),
                    }
                }
                continue;
            }
            let check = step["check"].as_str().unwrap();
            let symbol = check.strip_prefix("CHECK ").unwrap();
            let expect = step["expect"].as_str().unwrap();
            let found = inst.resolve(symbol.as_bytes());
            if expect.contains(" unknown_symbol ") {
                assert_eq!(found, None, "{name}: {check}");
                checked += 1;
                continue;
            }
            let i = found.unwrap_or_else(|| panic!("{name}: {symbol} unknown"));
            let it = inst.get(i).unwrap();
            let (bid, ask) = it.book.top();
            assert_eq!(
                (side(bid), side(ask)),
                (
                    field(expect, "bid").unwrap().to_string(),
                    field(expect, "ask").unwrap().to_string()
                ),
                "{name}: {check} -> {expect}"
            );
            assert_eq!(
                it.halted == Some(true),
                expect.contains(" halted "),
                "{name}: {check} -> {expect}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}

/// The incremental packets of the scenarios that lose, duplicate or
/// restart the channel, classified by MsgSeqNum and SendingTime as their
/// docs say: packet 2 lost on both lines; B's copy a duplicate; numbering
/// restarted later (a candidate, confirmed by its next packet: a new
/// session); a packet sent before that session began (the replaced
/// session's).
#[test]
fn channel_packets_are_classified_as_the_scenarios_say() {
    use tickgate::venue::cme_mdp3::channel::{PacketClass::*, Sequence};
    let doc = scenarios();
    let want = [
        (
            "session_by_sending_time",
            vec![
                First,
                InOrder,
                Duplicate,
                Candidate,
                Confirms,
                ReplacedSession,
                InOrder,
            ],
        ),
        (
            "channel_gap_clears_per_instrument",
            vec![First, Gap { lost: 1 }, InOrder],
        ),
        (
            "unverified_instrument_not_rolled_back",
            vec![First, Gap { lost: 1 }],
        ),
        (
            "lost_packet_then_snapshot_with_kept_entries",
            vec![First, Gap { lost: 1 }, InOrder],
        ),
        ("channel_reset", vec![First, InOrder, InOrder]),
    ];
    for (name, classes) in want {
        let s = doc["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name}"));
        let lines = &s["feed"]["lines"];
        let mut seq = Sequence::default();
        let mut got = Vec::new();
        for step in s["steps"].as_array().unwrap() {
            let (Some(h), Some(line)) = (step["hex"].as_str(), step["line"].as_str()) else {
                continue;
            };
            if lines[line] != "incremental" {
                continue;
            }
            let p = messages::validate(&unhex(h)).unwrap().header;
            let c = seq.classify(p.msg_seq_num, p.sending_time);
            if !matches!(c, Duplicate | ReplacedSession) {
                seq.process(p.msg_seq_num, p.sending_time, c);
            }
            got.push(c);
        }
        assert_eq!(got, classes, "{name}");
    }
}

/// The snapshots of the recovery scenarios, used or ignored as their docs
/// and answers say, decided by the loops machine (coverage, continuation,
/// kept entries) over a small model of the instruments' sequences: an
/// instrument waits from a first entry other than RptSeq 1, a RptSeq gap,
/// a book error, a channel gap (until its next entry in order) or a
/// channel reset (until an entry with RptSeq 1); a used snapshot sets its
/// sequence and the kept entries above it continue it.
#[test]
fn snapshots_are_used_or_ignored_as_the_scenarios_say() {
    use std::collections::HashMap;
    use tickgate::feed::recovery::loops::Loops;
    use tickgate::venue::cme_mdp3::channel::{PacketClass, Sequence};
    use tickgate::venue::cme_mdp3::recovery::KeptEntry;
    use tickgate::venue::codec::LoopMachine;

    let doc = scenarios();
    // (scenario, each snapshot used?, instruments that stop waiting with
    // their RptSeq, instruments still waiting at the end)
    type Want<'a> = (&'a str, &'a [bool], &'a [(&'a str, u32)], &'a [&'a str]);
    let want: &[Want] = &[
        (
            "lost_packet_then_snapshot_with_kept_entries",
            &[false, true, false],
            &[("#1001", 6), ("#2002", 2)],
            &[],
        ),
        (
            "unverified_instrument_not_rolled_back",
            &[false, true],
            &[("#1001", 3)],
            &[],
        ),
        (
            "late_join_recovered_by_snapshot",
            &[true, false],
            &[("#1001", 78)],
            &[],
        ),
        ("channel_reset", &[false], &[("#1001", 1)], &["#2002"]),
        (
            "book_error_makes_the_instrument_wait",
            &[true],
            &[("#1001", 6)],
            &[],
        ),
    ];
    for &(name, used_want, seqs_want, waiting_want) in want {
        let s = doc["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name}"));
        let lines = &s["feed"]["lines"];
        let mut inst = Instruments::default();
        let mut seq = Sequence::default();
        let mut kept = Loops::<KeptEntry>::new(1_000_000);
        // Per instrument: last RptSeq, and whether only a channel gap
        // (not a cause of its own) makes it wait.
        let mut last: HashMap<u32, u32> = HashMap::new();
        let mut only_unverified: HashMap<u32, bool> = HashMap::new();
        let mut used = Vec::new();
        for step in s["steps"].as_array().unwrap() {
            let (Some(h), Some(line)) = (step["hex"].as_str(), step["line"].as_str()) else {
                continue;
            };
            let d = unhex(h);
            let p = messages::validate(&d).unwrap().header;
            let (_, msgs) = sbe::packet(&d).unwrap();
            match lines[line].as_str().unwrap() {
                "incremental" => {
                    let c = seq.classify(p.msg_seq_num, p.sending_time);
                    match c {
                        PacketClass::Duplicate | PacketClass::ReplacedSession => continue,
                        PacketClass::First => kept.session_began(p.sending_time),
                        PacketClass::Candidate | PacketClass::Confirms => {
                            panic!("{name}: these scenarios keep one session")
                        }
                        PacketClass::Gap { lost } => {
                            let next = seq.next().unwrap();
                            kept.lost(next, next + lost - 1);
                            for i in 0..inst.len() as u32 {
                                if !kept.is_waiting(i) {
                                    kept.start_waiting(i, 0);
                                    only_unverified.insert(i, true);
                                }
                            }
                        }
                        PacketClass::InOrder => {}
                    }
                    seq.process(p.msg_seq_num, p.sending_time, c);
                    for m in msgs {
                        let Item::Known { body, .. } = messages::decode(&m.unwrap()).unwrap()
                        else {
                            continue;
                        };
                        match body {
                            Body::ChannelReset => {
                                kept.channel_reset(p.msg_seq_num);
                                inst.reset(|_| {});
                                last.clear();
                                for i in 0..inst.len() as u32 {
                                    kept.start_waiting(i, 0);
                                    only_unverified.insert(i, false);
                                }
                            }
                            Body::Incremental {
                                transact_time,
                                entries,
                            } => {
                                let kind = entries.kind();
                                for e in entries {
                                    let i = inst.index(e.security_id);
                                    let mut wait = None;
                                    match last.get(&i) {
                                        None => wait = Some(e.rpt_seq != 1),
                                        Some(&l) if e.rpt_seq <= l => continue,
                                        Some(&l) if e.rpt_seq > l + 1 => wait = Some(true),
                                        Some(_) if only_unverified.get(&i) == Some(&true) => {
                                            wait = Some(false)
                                        }
                                        Some(_) => {}
                                    }
                                    last.insert(i, e.rpt_seq);
                                    if let Some(b) = e.book {
                                        if inst.get_mut(i).unwrap().book.apply(&b).is_err() {
                                            wait = Some(true);
                                        }
                                    }
                                    match wait {
                                        Some(true) => {
                                            kept.start_waiting(i, 0);
                                            only_unverified.insert(i, false);
                                        }
                                        Some(false) => kept.stop_waiting(i),
                                        None => {}
                                    }
                                    kept.keep(
                                        i,
                                        e.rpt_seq,
                                        KeptEntry {
                                            rpt_seq: e.rpt_seq,
                                            transact_time,
                                            kind,
                                            book: e.book,
                                        },
                                    );
                                }
                            }
                            _ => {}
                        }
                    }
                }
                "snapshot" => {
                    for m in msgs {
                        let Item::Known {
                            body: Body::Snapshot(snap),
                            ..
                        } = messages::decode(&m.unwrap()).unwrap()
                        else {
                            panic!("{name}: not a snapshot");
                        };
                        let i = inst.index(snap.security_id);
                        let r = snap.rpt_seq;
                        let ok = kept.is_waiting(i)
                            && kept.snapshot_usable(
                                i,
                                p.sending_time,
                                snap.last_msg_seq_num_processed,
                                r,
                                last.get(&i).copied(),
                                true,
                            );
                        used.push(ok);
                        if ok {
                            let mut l = r;
                            let mut in_order = true;
                            let mut taken = Vec::new();
                            kept.take_after(i, r, &mut taken);
                            for k in taken {
                                in_order &= k.rpt_seq == l + 1;
                                l = k.rpt_seq;
                            }
                            last.insert(i, l);
                            if !in_order {
                                // A gap among them: it waits for the next loop.
                                kept.start_waiting(i, 0);
                            }
                        }
                    }
                }
                other => assert_eq!(other, "definition"),
            }
        }
        assert_eq!(used, used_want, "{name}: snapshots used");
        for &(symbol, rpt) in seqs_want {
            let i = inst.resolve(symbol.as_bytes()).unwrap();
            assert_eq!(last.get(&i), Some(&rpt), "{name}: {symbol}");
            assert!(!kept.is_waiting(i), "{name}: {symbol} still waits");
        }
        for symbol in waiting_want {
            let i = inst.resolve(symbol.as_bytes()).unwrap();
            assert!(kept.is_waiting(i), "{name}: {symbol} does not wait");
        }
    }
}
