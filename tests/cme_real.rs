//! The CME MDP 3.0 captures of fixtures/real/ (copied from
//! shared/fixtures/real/) read with tickgate's capture reader and decoded
//! with the `cme-mdp3` SBE decoders: every fact that folder's README states
//! about them (checked there with two other decoders) holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddrV4;

use tickgate::capture::CaptureReader;
use tickgate::venue::cme_mdp3::messages::{self, Body, EntryKind, Item};
use tickgate::venue::cme_mdp3::sbe::{self, MessageHeader, PacketHeader};
use tickgate::venue::cme_mdp3::templates::{self, enums, Message};

fn fixture(name: &str) -> String {
    format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"))
}

struct Packet {
    dst: SocketAddrV4,
    payload: Vec<u8>,
}

fn packets(name: &str) -> Vec<Packet> {
    let mut r = CaptureReader::open(fixture(name)).unwrap();
    let mut out = Vec::new();
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        out.push(Packet {
            dst: d.dst,
            payload: d.payload.to_vec(),
        });
    }
    out
}

fn header(p: &Packet) -> PacketHeader {
    messages::validate(&p.payload)
        .unwrap_or_else(|e| panic!("{}: {e}", p.dst))
        .header
}

/// Every message of a packet, decoded (the packet must be valid).
fn items(p: &Packet) -> Vec<Item<'_>> {
    let (_, msgs) = sbe::packet(&p.payload).unwrap();
    msgs.map(|m| messages::decode(&m.unwrap()).unwrap())
        .collect()
}

fn item_header(i: &Item) -> MessageHeader {
    match i {
        Item::Known { header, .. } | Item::Unknown { header } => *header,
    }
}

/// The packets of each line (by destination), in capture order.
fn lines(all: &[Packet]) -> BTreeMap<String, Vec<&Packet>> {
    let mut out: BTreeMap<String, Vec<&Packet>> = BTreeMap::new();
    for p in all {
        out.entry(p.dst.to_string()).or_default().push(p);
    }
    out
}

/// Unix ns of a UTC time of day on a date.
fn utc(date: &str, time: &str) -> i64 {
    let ts: jiff::Timestamp = format!("{date}T{time}Z").parse().unwrap();
    ts.as_nanosecond() as i64
}

/// Every packet's SendingTime lies in [from, to] (seconds resolution).
fn sent_within(line: &[&Packet], from: i64, to: i64) {
    for p in line {
        let t = header(p).sending_time as i64;
        assert!(
            (from..to + 1_000_000_000).contains(&t),
            "SendingTime {t} outside {from}..{to}"
        );
    }
}

/// Facts of one line of an incremental capture: packets, MsgSeqNum range
/// without a hole, messages per template.
fn line_facts(line: &[&Packet], first: u32, last: u32, templates: &[(u16, usize)], version: u16) {
    assert_eq!(line.len(), (last - first + 1) as usize);
    let seqs: BTreeSet<u32> = line.iter().map(|p| header(p).msg_seq_num).collect();
    assert_eq!(seqs.len(), line.len(), "no MsgSeqNum twice");
    assert_eq!(seqs.first(), Some(&first));
    assert_eq!(seqs.last(), Some(&last));
    let mut per: BTreeMap<u16, usize> = BTreeMap::new();
    for p in line {
        for i in items(p) {
            let h = item_header(&i);
            assert_eq!(h.version, version);
            assert_eq!(h.schema_id, 1);
            assert!(
                matches!(i, Item::Known { .. }),
                "template {}",
                h.template_id
            );
            *per.entry(h.template_id).or_default() += 1;
        }
    }
    assert_eq!(per, templates.iter().copied().collect());
}

/// Line B carries byte for byte what line A carries, for each MsgSeqNum.
fn a_equals_b(a: &[&Packet], b: &[&Packet]) {
    let by_seq = |l: &[&Packet]| -> HashMap<u32, Vec<u8>> {
        l.iter()
            .map(|p| (header(p).msg_seq_num, p.payload.clone()))
            .collect()
    };
    assert_eq!(by_seq(a), by_seq(b));
}

const V6: &str = "cme-mdp3-v6-incremental-ab.pcapng";
const V6_A: &str = "224.0.31.64:14340";
const V6_B: &str = "224.0.32.64:15340";

#[test]
fn v6_lines_packets_sequence_and_templates() {
    let all = packets(V6);
    assert_eq!(all.len(), 10_000);
    let l = lines(&all);
    assert_eq!(l.keys().collect::<Vec<_>>(), [V6_A, V6_B]);
    for line in l.values() {
        line_facts(
            line,
            5615,
            10_614,
            &[(12, 9), (32, 9569), (35, 307), (37, 194), (42, 194)],
            6,
        );
        sent_within(
            line,
            utc("2016-11-12", "14:30:25"),
            utc("2016-11-12", "14:35:29"),
        );
    }
    a_equals_b(&l[V6_A], &l[V6_B]);
}

/// The entries of one line, in packet order, with their template's kind.
fn entries(line: &[&Packet]) -> Vec<(EntryKind, messages::Entry)> {
    let mut out = Vec::new();
    for p in line {
        for i in items(p) {
            if let Item::Known {
                body: Body::Incremental { entries, .. },
                ..
            } = i
            {
                let kind = entries.kind();
                out.extend(entries.map(|e| (kind, e)));
            }
        }
    }
    out
}

#[test]
fn v6_instruments_have_contiguous_rptseq_from_a_late_join() {
    let all = packets(V6);
    let l = lines(&all);
    let e = entries(&l[V6_A]);
    let kinds: BTreeSet<_> = e.iter().map(|(k, _)| format!("{k:?}")).collect();
    assert_eq!(
        kinds,
        ["Book", "SessionStatistics", "Trade", "Volume"]
            .map(String::from)
            .into()
    );
    let mut last: BTreeMap<i32, u32> = BTreeMap::new();
    let mut first: BTreeMap<i32, u32> = BTreeMap::new();
    let mut breaks = 0;
    for (_, en) in &e {
        if let Some(prev) = last.insert(en.security_id, en.rpt_seq) {
            if en.rpt_seq != prev + 1 {
                breaks += 1;
            }
        } else {
            first.insert(en.security_id, en.rpt_seq);
        }
    }
    assert_eq!(last.len(), 127, "SecurityIDs");
    assert_eq!(breaks, 0, "RptSeq breaks");
    assert_eq!(first.values().filter(|&&r| r == 3).count(), 121);
    let mut others: Vec<u32> = first.values().copied().filter(|&r| r != 3).collect();
    others.sort();
    assert_eq!(others, [9, 9, 11, 12, 17, 111]);
    assert_eq!(first[&411_873], 111);
}

#[test]
fn v6_book_entries_by_action_type_level_and_price() {
    let all = packets(V6);
    let l = lines(&all);
    let mut actions: BTreeMap<u8, usize> = BTreeMap::new();
    let mut types: BTreeMap<u8, usize> = BTreeMap::new();
    let mut levels: BTreeMap<bool, BTreeSet<u8>> = BTreeMap::new();
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for (kind, en) in entries(&l[V6_A]) {
        let Some(b) = en.book else {
            assert_ne!(kind, EntryKind::Book);
            continue;
        };
        assert_eq!(kind, EntryKind::Book);
        *actions.entry(b.action).or_default() += 1;
        *types.entry(b.entry_type).or_default() += 1;
        let implied = matches!(b.entry_type, b'E' | b'F');
        levels.entry(implied).or_default().insert(b.level);
        let p = b.price.expect("a book entry has a price");
        assert_eq!(p.exponent, -7, "PRICE");
        let nanos = p.to_nanos().unwrap();
        assert_eq!(nanos, p.mantissa * 100);
        lo = lo.min(nanos);
        hi = hi.max(nanos);
    }
    use enums::md_entry_type_book as ty;
    use enums::md_update_action as act;
    assert_eq!(
        actions,
        [(act::NEW, 5086), (act::CHANGE, 6979), (act::DELETE, 2509)].into()
    );
    assert_eq!(
        types,
        [
            (ty::BID, 2450),
            (ty::OFFER, 3017),
            (ty::IMPLIED_BID, 4892),
            (ty::IMPLIED_OFFER, 4215)
        ]
        .into()
    );
    assert_eq!(levels[&false], (1..=10).collect());
    assert_eq!(levels[&true], (1..=2).collect());
    // -900.0 and 17,925.0 in wire.md's 10^-9.
    assert_eq!((lo, hi), (-900_000_000_000, 17_925_000_000_000));
}

#[test]
fn v6_has_no_snapshot_definition_status_or_reset() {
    let all = packets(V6);
    for p in &all {
        for i in items(p) {
            if let Item::Known { body, .. } = i {
                assert!(
                    matches!(body, Body::Incremental { .. } | Body::AdminHeartbeat),
                    "{body:?}"
                );
            }
        }
    }
}

const V8: &str = "cme-mdp3-v8-status-ab.pcapng";

#[test]
fn v8_lines_and_security_status() {
    let all = packets(V8);
    assert_eq!(all.len(), 10_000);
    let l = lines(&all);
    assert_eq!(
        l.keys().collect::<Vec<_>>(),
        ["224.0.31.11:14320", "224.0.32.11:15320"]
    );
    let mut status: BTreeMap<u8, usize> = BTreeMap::new();
    let mut groups: BTreeSet<Vec<u8>> = BTreeSet::new();
    for line in l.values() {
        assert_eq!(line.len(), 5000);
        let seqs: BTreeSet<u32> = line.iter().map(|p| header(p).msg_seq_num).collect();
        assert_eq!(seqs.len(), 5000);
        assert_eq!(
            (seqs.first(), seqs.last()),
            (Some(&17_347_815), Some(&17_352_814))
        );
        sent_within(
            line,
            utc("2016-09-27", "21:46:13"),
            utc("2016-09-27", "22:00:30"),
        );
        let mut templates = BTreeSet::new();
        for p in line {
            for i in items(p) {
                let h = item_header(&i);
                assert_eq!(h.version, 8);
                templates.insert(h.template_id);
                if let Item::Known {
                    body: Body::SecurityStatus(s),
                    ..
                } = i
                {
                    *status.entry(s.trading_status.unwrap()).or_default() += 1;
                    // These are group-wide: SecurityID null.
                    assert_eq!(s.security_id, None);
                    groups.insert(messages::trim(s.security_group).to_vec());
                    assert!(s.transact_time > 0);
                }
            }
        }
        assert_eq!(templates, [12, 30, 32, 35, 37, 42].into());
    }
    use enums::security_trading_status as st;
    assert_eq!(
        status,
        [
            (st::NEW_PRICE_INDICATION, 66),
            (st::READY_TO_TRADE, 66),
            (st::PRE_OPEN, 66)
        ]
        .into()
    );
    assert!(groups.contains(b"6E".as_slice()), "{groups:?}");
    assert!(groups.iter().all(|g| g.len() == 2 && g.is_ascii()));
}

const V9: &str = "cme-mdp3-v9-sample.pcap";

#[test]
fn v9_templates_and_price9() {
    let all = packets(V9);
    assert_eq!(all.len(), 99);
    let l = lines(&all);
    // Nine channels, each on an A (143xx) and a B (153xx) port.
    let channels: BTreeSet<u16> = l
        .keys()
        .map(|k| k.parse::<SocketAddrV4>().unwrap().port() % 1000)
        .collect();
    assert_eq!(channels.len(), 9, "{channels:?}");
    assert_eq!(l.len(), 18);
    let mut per: BTreeMap<u16, usize> = BTreeMap::new();
    let mut unknown = 0;
    let mut prices = 0;
    for p in &all {
        let s = messages::validate(&p.payload).unwrap();
        unknown += s.unknown as usize;
        let t = s.header.sending_time as i64;
        assert!(
            (utc("2018-09-12", "00:00:00")..utc("2018-09-13", "00:00:00")).contains(&t),
            "{t}"
        );
        for i in items(p) {
            let h = item_header(&i);
            assert_eq!(h.version, 9);
            *per.entry(h.template_id).or_default() += 1;
            if let Item::Known {
                body: Body::Incremental { entries, .. },
                ..
            } = i
            {
                for e in entries {
                    if let Some(b) = e.book {
                        let Some(px) = b.price else { continue };
                        assert_eq!(px.exponent, -9, "PRICE9");
                        let nanos = px.to_nanos().unwrap();
                        assert_eq!(nanos, px.mantissa, "10^-9 as is");
                        // Futures prices, not 100 times them.
                        assert!(nanos.abs() < 1_000_000 * 1_000_000_000, "{nanos}");
                        prices += 1;
                    }
                }
            }
        }
    }
    assert!(prices > 0);
    assert_eq!(per[&46], 170);
    assert_eq!(per.keys().copied().collect::<Vec<_>>(), [37, 46, 47, 48]);
    // OrderBook (47) is not a template this venue reads: skipped, counted.
    assert_eq!(unknown, per[&47]);
    assert!(templates::template_name(47).is_none());
}

#[test]
fn v9_trade_summary_prices_are_price9() {
    let all = packets(V9);
    let mut trades = 0;
    for p in &all {
        let (_, msgs) = sbe::packet(&p.payload).unwrap();
        for m in msgs {
            let m = m.unwrap();
            if let Some(Ok(Message::MdIncrementalRefreshTradeSummary48(t))) = templates::decode(&m)
            {
                for e in t.no_md_entries() {
                    let px = e.md_entry_px().unwrap();
                    assert_eq!(px.exponent, -9);
                    assert!(e.rpt_seq().unwrap() > 0);
                    assert!(e.md_entry_size().unwrap() > 0);
                    trades += 1;
                }
            }
        }
    }
    assert!(trades > 0);
}

const V5: &str = "cme-mdp3-v5-definitions.pcap";

#[test]
fn v5_definitions_with_their_own_block_lengths() {
    let all = packets(V5);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].dst.to_string(), "224.0.31.43:14310");
    let mut defs = Vec::new();
    for i in items(&all[0]) {
        let Item::Known {
            header,
            body: Body::Definition(d),
        } = i
        else {
            panic!("not a definition: {i:?}");
        };
        assert_eq!(header.version, 5);
        assert_eq!(d.template_id, header.template_id);
        defs.push((
            header.template_id,
            header.block_length,
            d.security_id,
            String::from_utf8(messages::trim(d.symbol).to_vec()).unwrap(),
            messages::trim(d.security_group).to_vec(),
        ));
    }
    defs.sort();
    let want = [
        (27, 214, 2615, "ESU6"),
        (27, 214, 13950, "ESZ5"),
        (29, 193, 7978, "ESM6-ESZ6"),
        (29, 193, 8036, "ESU6-ESZ6"),
        (29, 193, 10123, "ESM6-ESU6"),
    ];
    assert_eq!(defs.len(), want.len());
    for (d, w) in defs.iter().zip(want) {
        assert_eq!((d.0, d.1, d.2, d.3.as_str()), w);
        assert_eq!(d.4, b"ES");
    }
    // Version 5's roots are its own schema's blockLength, shorter than
    // version 6's: the field version 6 added reads as null.
    assert_eq!(
        templates::md_instrument_definition_future27::BLOCK_LENGTHS[..2],
        [(5, 214), (6, 216)]
    );
    assert_eq!(
        templates::md_instrument_definition_spread29::BLOCK_LENGTHS[..2],
        [(5, 193), (6, 195)]
    );
    let (_, msgs) = sbe::packet(&all[0].payload).unwrap();
    for m in msgs {
        match templates::decode(&m.unwrap()).unwrap().unwrap() {
            Message::MdInstrumentDefinitionFuture27(d) => {
                assert_eq!(d.trading_reference_date(), None);
                assert!(d.no_md_feed_types().count() > 0);
            }
            Message::MdInstrumentDefinitionSpread29(d) => {
                assert_eq!(d.trading_reference_date(), None);
                // A calendar spread's legs are its two outrights: those
                // naming ESU6 have ESU6's SecurityID (2615, defined in the
                // same packet) as a leg.
                let legs: Vec<i32> = d.no_legs().map(|l| l.leg_security_id().unwrap()).collect();
                assert_eq!(legs.len(), 2);
                let name = messages::trim(d.symbol().unwrap());
                assert_eq!(
                    legs.contains(&2615),
                    name.windows(4).any(|w| w == b"ESU6"),
                    "{legs:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

/// venues.md: "A field that the message's version does not carry (the
/// schema's `sinceVersion` above the header's version) is null", even when
/// the entry on the wire is long enough to hold it: TradeSummary's
/// MDTradeEntryID (since 7) and SessionStatistics' MDEntrySize (since 8)
/// are null in version 6 and carried in version 8.
#[test]
fn fields_added_later_read_as_null_in_older_versions() {
    let mut seen: BTreeMap<(u16, u16, bool), usize> = BTreeMap::new();
    for name in [V6, V8] {
        for p in &packets(name) {
            let (_, msgs) = sbe::packet(&p.payload).unwrap();
            for m in msgs {
                let m = m.unwrap();
                let v = m.header.version;
                match templates::decode(&m) {
                    Some(Ok(Message::MdIncrementalRefreshTradeSummary42(t))) => {
                        let g = t.no_md_entries();
                        // The bytes are there (the entry's stride)...
                        assert!(g.stride() >= 30);
                        for e in g {
                            let id = e.md_trade_entry_id();
                            // ...(zeros in version 6, which would read as
                            // 0) but only versions from 7 carry the field
                            // (null in this capture).
                            if v < 7 {
                                assert_eq!(id, None);
                            }
                            *seen.entry((42, v, id.is_some())).or_default() += 1;
                        }
                    }
                    Some(Ok(Message::MdIncrementalRefreshSessionStatistics35(s))) => {
                        let g = s.no_md_entries();
                        assert!(g.stride() >= 23);
                        for e in g {
                            let size = e.md_entry_size();
                            if v < 8 {
                                assert_eq!(size, None);
                            }
                            *seen.entry((35, v, size.is_some())).or_default() += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(seen.contains_key(&(42, 6, false)), "{seen:?}");
    assert!(seen.contains_key(&(35, 6, false)), "{seen:?}");
}
