//! The real Cboe PITCH captures (`fixtures/real/cboe-pitch-*.pcap`, BATS's
//! dissector's, GPL-2.0, licence beside them) through the `cboe-pitch`
//! decoders: every fact that `fixtures/real/README.md` states of them
//! that the decoders alone can show. The UDP capture is read with the
//! project's capture reader; the two TCP sessions are reassembled here
//! and fed to the GRP and Spin codecs (recovery.md R4c, R5c) in the
//! segments they arrived in.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};

use tickgate::capture::CaptureReader;
use tickgate::venue::cboe_pitch::frame::{Datagram, HEADER_LEN};
use tickgate::venue::cboe_pitch::messages::{self, Message, RawPrice, Width};
use tickgate::venue::cboe_pitch::session::{
    encode_block, BlockDecoder, GapStatus, Login, LoginStatus, SessionMessage, SpinStatus,
    HEARTBEAT,
};
use tickgate::venue::cboe_pitch::time::{time_moment, UnitClock};
use tickgate::venue::nasdaq_itch::new_york;
use tickgate::wire::Symbol;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"))
}

const REALTIME: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 39, 62, 190), 32001);
const GAP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 39, 62, 191), 32001);

struct Captured {
    ts: i64,
    dst: SocketAddrV4,
    payload: Vec<u8>,
}

fn realtime_capture() -> Vec<Captured> {
    let mut r = CaptureReader::open(fixture("cboe-pitch-realtime.pcap")).unwrap();
    let mut out = Vec::new();
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        out.push(Captured {
            ts: d.ts_ns,
            dst: d.dst,
            payload: d.payload.to_vec(),
        });
    }
    out
}

/// A price in 10^-9 from dollars and ten-thousandths.
fn px(dollars: i64, ten_thousandths: i64) -> i64 {
    dollars * 1_000_000_000 + ten_thousandths * 100_000
}

#[test]
fn realtime_line_framing_facts() {
    let all = realtime_capture();
    assert_eq!(all.len(), 739, "739 frames, each a datagram");
    let rt: Vec<&Captured> = all.iter().filter(|d| d.dst == REALTIME).collect();
    assert_eq!(rt.len(), 375);
    let mut data = 0;
    let mut heartbeats = 0;
    let mut next: Option<u64> = None;
    let mut leading_hb_seq1 = 0;
    let mut seen_data = false;
    for d in &rt {
        let p = Datagram::parse(&d.payload).expect("every realtime datagram is valid");
        assert_eq!(p.header.unit, 1);
        assert_eq!(p.unknown, 0);
        if p.header.is_heartbeat() {
            heartbeats += 1;
            assert_eq!(d.payload.len(), HEADER_LEN, "a heartbeat is 8 bytes");
            if !seen_data {
                assert_eq!(p.header.sequence, 1);
                leading_hb_seq1 += 1;
            } else {
                assert_eq!(Some(p.header.sequence as u64), next, "the next sequence");
            }
        } else {
            if !seen_data {
                assert_eq!(p.header.sequence, 3, "messages 1 and 2 never appear");
            } else {
                assert_eq!(Some(p.header.sequence as u64), next, "no gap after 3");
            }
            seen_data = true;
            data += 1;
            next = Some(p.header.next_sequence());
        }
    }
    assert_eq!((data, heartbeats), (19, 356));
    assert_eq!(leading_hb_seq1, 46);
    assert_eq!(next, Some(43), "data packets run 3 to 42");
    // Frames 1-92 hold the 46 leading heartbeats, 51.2 s.
    let lead: Vec<&Captured> = all[..92].iter().filter(|d| d.dst == REALTIME).collect();
    assert_eq!(lead.len(), 46);
    let span_ms = (lead[45].ts - lead[0].ts) / 1_000_000;
    assert!((51_100..=51_300).contains(&span_ms), "{span_ms} ms");
    // Never silent for more than 1.2 s; the median spacing 1199.1 ms.
    let mut gaps: Vec<i64> = rt.windows(2).map(|w| w[1].ts - w[0].ts).collect();
    gaps.sort_unstable();
    let tenths_of_ms = |ns: i64| (ns + 50_000) / 100_000;
    assert_eq!(
        tenths_of_ms(*gaps.last().unwrap()),
        12_011,
        "longest 1201.1 ms"
    );
    assert_eq!(
        tenths_of_ms(gaps[gaps.len() / 2]),
        11_991,
        "median 1199.1 ms"
    );

    // The gap line: 364 heartbeats of unit 1 with sequence 0.
    let gap: Vec<&Captured> = all.iter().filter(|d| d.dst == GAP).collect();
    assert_eq!(gap.len(), 364);
    for d in gap {
        let p = Datagram::parse(&d.payload).unwrap();
        assert_eq!(p.header.unit, 1);
        assert!(p.header.is_heartbeat() && p.header.is_unsequenced());
    }
}

#[test]
fn realtime_line_message_facts() {
    let all = realtime_capture();
    let mut by_type: BTreeMap<u8, usize> = BTreeMap::new();
    let mut times = Vec::new();
    let mut symbols = std::collections::BTreeSet::new();
    let mut long_prices = std::collections::BTreeSet::new();
    let mut short_prices = std::collections::BTreeSet::new();
    let mut trades = Vec::new();
    // order id -> (width of its add, shares, price)
    let mut orders: HashMap<u64, (Width, u32, i64)> = HashMap::new();
    let mut reduced_long_by_short = 0;
    let mut behind = Vec::new();
    let ny = new_york();
    let mut clock = UnitClock::new();
    for d in all.iter().filter(|d| d.dst == REALTIME) {
        let p = Datagram::parse(&d.payload).unwrap();
        if p.header.is_heartbeat() {
            continue;
        }
        let msgs: Vec<&[u8]> = p.messages().collect();
        assert_eq!(msgs.len(), p.header.count as usize);
        if p.header.sequence == 15 {
            assert_eq!(msgs.len(), 4);
        } else {
            assert_eq!(msgs.len(), 2, "a Time and one event");
        }
        for (i, raw) in msgs.iter().enumerate() {
            let m = messages::decode(raw).unwrap();
            assert_eq!(
                raw.len(),
                messages::message_size(m.kind()).unwrap(),
                "every message has exactly its size"
            );
            assert_eq!(i == 0, matches!(m, Message::Time { .. }), "a Time first");
            *by_type.entry(m.kind()).or_default() += 1;
            if let Some(s) = m.known_symbol() {
                symbols.insert(s);
            }
            if let Some(t) = m.time_offset().and_then(|o| clock.stamp(o)) {
                behind.push(d.ts - t);
            }
            match m {
                Message::Time { seconds } => {
                    times.push(seconds);
                    let moment = clock.on_time(seconds, d.ts).unwrap();
                    assert_eq!(Some(moment), time_moment(&ny, seconds, d.ts));
                    behind.push(d.ts - moment);
                }
                Message::AddOrder {
                    width,
                    order_id,
                    side,
                    shares,
                    price,
                    ..
                } => {
                    assert_eq!(side, b'B', "every order is a buy");
                    match width {
                        Width::Long => long_prices.insert(price),
                        _ => short_prices.insert(price),
                    };
                    orders.insert(order_id, (width, shares, price));
                }
                Message::ReduceSize {
                    width: Width::Short,
                    order_id,
                    ..
                } if orders.get(&order_id).map(|o| o.0) == Some(Width::Long) => {
                    reduced_long_by_short += 1;
                }
                Message::ModifyOrder { width, price, .. } => {
                    match width {
                        Width::Short => short_prices.insert(price),
                        _ => long_prices.insert(price),
                    };
                }
                Message::Trade { price, .. } => trades.push(price),
                _ => {}
            }
        }
    }
    let expected: BTreeMap<u8, usize> = [
        (0x20, 19),
        (0x21, 4),
        (0x22, 3),
        (0x23, 3),
        (0x29, 4),
        (0x27, 1),
        (0x28, 1),
        (0x26, 2),
        (0x2A, 2),
        (0x2B, 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_type, expected);
    assert_eq!(by_type.values().sum::<usize>(), 40);
    assert_eq!(
        symbols.into_iter().collect::<Vec<_>>(),
        [Symbol::parse("A").unwrap()]
    );
    assert_eq!(
        long_prices.into_iter().collect::<Vec<_>>(),
        [px(0, 25), px(0, 26), px(0, 29)]
    );
    assert_eq!(
        short_prices.into_iter().collect::<Vec<_>>(),
        [px(20, 0), px(20, 400), px(20, 500)]
    );
    assert_eq!(trades.len(), 3);
    assert!(trades.contains(&RawPrice::Short(2001)));
    assert!(trades.contains(&RawPrice::Long(25)));
    assert_eq!(RawPrice::Short(2001).scaled(), Some(px(20, 100)));
    assert_eq!(reduced_long_by_short, 1);
    assert_eq!(times.first(), Some(&76051), "21:07:31");
    assert_eq!(times.last(), Some(&76390), "21:13:10");
    assert_eq!(*times.iter().min().unwrap(), 76051);
    assert_eq!(*times.iter().max().unwrap(), 76390);
    // Capture time minus each message's time (its Time's moment plus its
    // Time Offset), read in New York time:
    // 3600.001 to 3600.938 s (the test system's clock an hour west).
    let (lo, hi) = (*behind.iter().min().unwrap(), *behind.iter().max().unwrap());
    let ms = |ns: i64| (ns + 500_000) / 1_000_000;
    assert_eq!(ms(lo), 3_600_001, "{lo}");
    assert_eq!(ms(hi), 3_600_938, "{hi}");
}

#[test]
fn realtime_capture_is_one_session_of_unit_1() {
    use tickgate::venue::cboe_pitch::sessions::{NyDates, PitchLine, UnitSession, Verdict};
    let mut unit = UnitSession::new();
    let mut dates = NyDates::new();
    let mut next = 0u64;
    let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
    for d in realtime_capture() {
        let p = Datagram::parse(&d.payload).unwrap();
        let date = dates.date(d.ts);
        // Without --config both groups are realtime lines (fixtures README).
        let v = unit.classify(PitchLine::Realtime, &p, &d.payload, date, next);
        *verdicts.entry(format!("{v:?}")).or_default() += 1;
        match v {
            Verdict::FirstSession => unit.begin(),
            Verdict::Current => {}
            _ => continue,
        }
        next = next.max(p.header.next_sequence());
        unit.processed(&p, &d.payload, date, false);
    }
    assert_eq!(
        dates.date(realtime_capture()[0].ts),
        jiff::civil::date(2014, 8, 31),
        "22:06 EDT on 2014-08-31"
    );
    let expected: BTreeMap<String, usize> = [
        ("FirstSession".to_string(), 1),
        ("Current".to_string(), 374),
        ("Unsequenced".to_string(), 364),
    ]
    .into_iter()
    .collect();
    assert_eq!(verdicts, expected);
    assert!(!unit.ended());
}

/// The book of one symbol's buys as nasdaq-itch builds it (venues.md: a
/// level is the sum of its orders' live shares; an order leaves at 0).
#[derive(Default)]
struct TestBook {
    orders: HashMap<u64, (u32, i64)>,
}

impl TestBook {
    fn best_bid(&self) -> Option<(i64, u64)> {
        let top = self
            .orders
            .values()
            .filter(|o| o.0 > 0)
            .map(|o| o.1)
            .max()?;
        let shares = self
            .orders
            .values()
            .filter(|o| o.1 == top)
            .map(|o| o.0 as u64)
            .sum();
        Some((top, shares))
    }

    fn apply(&mut self, m: &Message) {
        match *m {
            Message::AddOrder {
                order_id,
                shares,
                price,
                ..
            } => {
                self.orders.insert(order_id, (shares, price));
            }
            Message::OrderExecuted {
                order_id, shares, ..
            }
            | Message::ReduceSize {
                order_id, shares, ..
            } => {
                let o = self.orders.get_mut(&order_id).expect("a known order");
                o.0 = o.0.saturating_sub(shares);
                if o.0 == 0 {
                    self.orders.remove(&order_id);
                }
            }
            Message::ModifyOrder {
                order_id,
                shares,
                price,
                ..
            } => {
                let o = self.orders.get_mut(&order_id).expect("a known order");
                *o = (shares, price);
                if shares == 0 {
                    self.orders.remove(&order_id);
                }
            }
            Message::DeleteOrder { order_id, .. } => {
                self.orders.remove(&order_id).expect("a known order");
            }
            _ => {}
        }
    }
}

#[test]
fn realtime_line_quotes_after_each_packet_as_the_readme_lists() {
    let mut book = TestBook::default();
    let mut quotes: Vec<(u32, Option<(i64, u64)>)> = Vec::new();
    let mut published = None;
    for d in realtime_capture().iter().filter(|d| d.dst == REALTIME) {
        let p = Datagram::parse(&d.payload).unwrap();
        let mut change_seq = None;
        for (seq, raw) in p.sequenced() {
            let before = book.best_bid();
            book.apply(&messages::decode(raw).unwrap());
            if book.best_bid() != before {
                change_seq = Some(seq);
            }
        }
        let best = book.best_bid();
        if best != published {
            published = best;
            quotes.push((change_seq.unwrap(), best));
        }
    }
    let expected = [
        (4, Some((px(20, 0), 100))),
        (6, None),
        (10, Some((px(0, 25), 100))),
        (12, None),
        (14, Some((px(0, 25), 100))),
        (16, None),
        (20, Some((px(20, 500), 300))),
        (22, Some((px(20, 500), 400))),
        (24, None),
        (26, Some((px(0, 25), 1000))),
        (28, Some((px(0, 26), 1000))),
        (30, None),
        (32, Some((px(20, 400), 1000))),
        (34, Some((px(20, 400), 900))),
        (36, None),
        (38, Some((px(0, 29), 1000))),
        (40, Some((px(0, 29), 900))),
        (42, None),
    ];
    assert_eq!(quotes, expected);
    assert!(book.orders.is_empty(), "the book ends empty");
}

/// One TCP connection's payloads, per direction, in capture order, each
/// segment once (a retransmitted sequence range is dropped), with its
/// capture time: (from port, time, bytes).
fn tcp_segments(name: &str) -> Vec<(u16, i64, Vec<u8>)> {
    let file = std::fs::File::open(fixture(name)).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
    let mut next_seq: HashMap<u16, u32> = HashMap::new();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let sliced = etherparse::SlicedPacket::from_ethernet(&p.data).unwrap();
        let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else {
            continue;
        };
        let payload = tcp.payload();
        let from = tcp.source_port();
        if tcp.syn() {
            next_seq.insert(from, tcp.sequence_number().wrapping_add(1));
            continue;
        }
        if payload.is_empty() {
            continue;
        }
        let expect = next_seq.get(&from).copied();
        assert_eq!(
            expect,
            Some(tcp.sequence_number()),
            "segments in order, none lost or repeated"
        );
        next_seq.insert(
            from,
            tcp.sequence_number().wrapping_add(payload.len() as u32),
        );
        out.push((from, p.timestamp.as_nanos() as i64, payload.to_vec()));
    }
    out
}

/// Every block of one direction, decoded segment by segment as a client
/// reads them: (time of the segment completing it, messages, raw bytes).
fn blocks_from(
    segments: &[(u16, i64, Vec<u8>)],
    port: u16,
) -> Vec<(i64, Vec<SessionMessage>, Vec<u8>)> {
    let mut d = BlockDecoder::new();
    let mut out = Vec::new();
    let mut all = Vec::new();
    for (from, ts, bytes) in segments {
        if *from != port {
            continue;
        }
        all.extend_from_slice(bytes);
        d.push(bytes);
        while let Some(b) = d.next_block().unwrap() {
            assert_eq!(b.header.unit, 0, "Hdr Unit 0 on TCP");
            assert_eq!(b.header.sequence, 0, "Hdr Sequence 0 on TCP");
            let msgs: Vec<SessionMessage> = b.messages().map(|m| m.unwrap()).collect();
            out.push((*ts, msgs, Vec::new()));
        }
    }
    assert_eq!(d.buffered(), 0, "no partial block at the end");
    // The raw bytes of each block, to compare with what the encoder writes.
    let mut at = 0;
    for b in &mut out {
        let len = u16::from_le_bytes([all[at], all[at + 1]]) as usize;
        b.2 = all[at..at + len].to_vec();
        at += len;
    }
    assert_eq!(at, all.len());
    out
}

fn encoded(msgs: &[SessionMessage]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_block(msgs, &mut out).unwrap();
    out
}

#[test]
fn gap_request_proxy_session_through_the_codec() {
    let segments = tcp_segments("cboe-pitch-grp.pcap");
    let client_bytes: usize = segments
        .iter()
        .filter(|s| s.0 == 40343)
        .map(|s| s.2.len())
        .sum();
    let server_bytes: usize = segments
        .iter()
        .filter(|s| s.0 == 10503)
        .map(|s| s.2.len())
        .sum();
    assert_eq!((client_bytes, server_bytes), (103, 85));
    let client = blocks_from(&segments, 40343);
    let server = blocks_from(&segments, 10503);
    assert_eq!((client.len(), server.len()), (9, 9), "9 blocks each way");

    // The Login: session sub id 0006, username MKDA, password all spaces.
    let login = Login::new("0006", "MKDA", "").unwrap();
    assert_eq!(client[0].1, [SessionMessage::Login(login)]);
    assert_eq!(client[0].2.len(), 8 + 22);
    assert_eq!(
        client[0].2,
        encoded(&client[0].1),
        "the encoder writes its bytes"
    );
    assert_eq!(
        server[0].1,
        [SessionMessage::LoginResponse(LoginStatus::Accepted)]
    );
    assert_eq!(server[0].2, encoded(&server[0].1));
    let response_after_us = (server[0].0 - client[0].0) / 1000;
    assert!(
        (100..=400).contains(&response_after_us),
        "{response_after_us} us"
    );

    // The Gap Request of recovery.md R4c, and its echo, 2.5 ms later.
    let req = SessionMessage::GapRequest {
        unit: 1,
        sequence: 14,
        count: 1,
    };
    let (ri, request) = client
        .iter()
        .enumerate()
        .find(|(_, b)| !b.1.is_empty() && b.1[0].kind() == 0x03)
        .unwrap();
    assert_eq!(request.1, [req]);
    assert_eq!(
        request.2,
        [
            0x11, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x03, 0x01, 0x0e, 0x00, 0x00,
            0x00, 0x01, 0x00
        ]
    );
    assert_eq!(request.2, encoded(&[req]));
    // The refill codec the GRP client asks through writes the same block.
    {
        use tickgate::venue::cboe_pitch::adapter::session_id;
        use tickgate::venue::cboe_pitch::grp::GapRequestCodec;
        use tickgate::venue::codec::{Gap, RefillCodec};
        let codec = GapRequestCodec::new(100);
        let r = codec.request(Gap {
            session: session_id(1, 1),
            first: 14,
            missing: 1,
        });
        let mut bytes = Vec::new();
        codec.encode(&r, &mut bytes);
        assert_eq!(bytes, request.2);
    }
    let since_login_ms = (request.0 - client[0].0) as f64 / 1e6;
    assert!(
        (4975.0..4976.0).contains(&since_login_ms),
        "{since_login_ms}"
    );
    let response = server
        .iter()
        .find(|b| !b.1.is_empty() && b.1[0].kind() == 0x04)
        .unwrap();
    assert_eq!(
        response.1,
        [SessionMessage::GapResponse {
            unit: 1,
            sequence: 14,
            count: 1,
            status: GapStatus::Accepted
        }]
    );
    assert_eq!(response.2, encoded(&response.1));
    let echo_us = (response.0 - request.0) / 1000;
    assert!((2400..=2600).contains(&echo_us), "{echo_us} us");
    assert!(ri > 0);

    // Everything else is a heartbeat: 7 each way, the header alone.
    for side in [&client, &server] {
        let hb: Vec<_> = side.iter().filter(|b| b.1.is_empty()).collect();
        assert_eq!(hb.len(), 7);
        for b in hb {
            assert_eq!(b.2, HEARTBEAT);
        }
    }
}

#[test]
fn spin_server_session_through_the_codec() {
    let segments = tcp_segments("cboe-pitch-spin.pcap");
    let client_bytes: usize = segments
        .iter()
        .filter(|s| s.0 == 50600)
        .map(|s| s.2.len())
        .sum();
    let server_bytes: usize = segments
        .iter()
        .filter(|s| s.0 == 18998)
        .map(|s| s.2.len())
        .sum();
    assert_eq!((client_bytes, server_bytes), (82, 125));
    let client = blocks_from(&segments, 50600);
    let server = blocks_from(&segments, 18998);
    let t0 = segments[0].1;
    let ms = |t: i64| (t - t0) as f64 / 1e6;

    let login = Login::new("0023", "BATS", "s1bats").unwrap();
    assert_eq!(login.password().len(), 6, "a 6-character password");
    assert_eq!(client[0].1, [SessionMessage::Login(login)]);
    assert_eq!(client[0].2, encoded(&client[0].1));

    // The two Spin Requests for 312 came in two segments, one block each.
    let requests: Vec<_> = client
        .iter()
        .filter(|b| b.1 == [SessionMessage::SpinRequest { sequence: 312 }])
        .collect();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.2, encoded(&r.1));
    }
    let client_heartbeats = client.iter().filter(|b| b.1.is_empty()).count();
    assert_eq!(client_heartbeats, 3);
    assert_eq!(client.len(), 1 + 2 + 3);

    // The server: Login Response A, Spin Image Available 312, the answer
    // A (0 orders), the refusal S with sequence 0, then one block holding
    // the spin's Time and Spin Finished, then three more Image Available.
    let flat: Vec<(i64, SessionMessage)> = server
        .iter()
        .flat_map(|b| b.1.iter().map(move |m| (b.0, *m)))
        .collect();
    let msgs: Vec<SessionMessage> = flat.iter().map(|m| m.1).collect();
    let avail = SessionMessage::SpinImageAvailable { sequence: 312 };
    assert_eq!(
        msgs,
        [
            SessionMessage::LoginResponse(LoginStatus::Accepted),
            avail,
            SessionMessage::SpinResponse {
                sequence: 312,
                order_count: 0,
                status: SpinStatus::Accepted
            },
            SessionMessage::SpinResponse {
                sequence: 0,
                order_count: 0,
                status: SpinStatus::AlreadyRunning
            },
            SessionMessage::Pitch(Message::Time { seconds: 75442 }),
            SessionMessage::SpinFinished { sequence: 312 },
            avail,
            avail,
            avail,
        ]
    );
    for b in &server {
        assert_eq!(b.2, encoded(&b.1), "the encoder writes the server's bytes");
    }
    let spin_block = server.iter().find(|b| b.1.len() == 2).unwrap();
    assert_eq!(
        spin_block.2[3], 0,
        "Hdr Unit 0 around the spin's own messages"
    );
    // Times (ms after the first segment): login 25.0 and 25.3 after the
    // connection opened, the spin at +326.9 and Image Available every 1.0 s.
    assert!((ms(spin_block.0) - ms(client[0].0) - 301.9).abs() < 0.2);
    let avails: Vec<f64> = flat
        .iter()
        .filter(|m| m.1 == avail)
        .map(|m| ms(m.0))
        .collect();
    assert_eq!(avails.len(), 4);
    for w in avails[1..].windows(2) {
        assert!((w[1] - w[0] - 1001.0).abs() < 2.0, "{avails:?}");
    }
    // The counts the README gives, by message.
    let all: Vec<SessionMessage> = client
        .iter()
        .chain(server.iter())
        .flat_map(|b| b.1.iter().copied())
        .collect();
    let count = |k: u8| all.iter().filter(|m| m.kind() == k).count();
    assert_eq!(
        [
            count(0x80),
            count(0x81),
            count(0x82),
            count(0x01),
            count(0x02),
            count(0x20),
            count(0x83)
        ],
        [4, 2, 2, 1, 1, 1, 1]
    );
}

/// recovery.md R5c through `SpinCodec` in an `ImageSession`, with the
/// server's bytes of `cboe-pitch-spin.pcap` in the segments and at the
/// times they arrived: the client's Login and its Spin Request for the
/// announced 312 are the capture's client bytes, and the spin is the
/// README's (one Time, 75442, and no Add Order: an empty book as of 312).
/// The capture's client asked twice; tickgate never has two requests
/// outstanding (R5c step 3), so it writes one, and the server's refusal
/// `S` of the second (sequence field 0) reaches it with no request
/// outstanding: dropped and counted (step 4).
#[test]
fn spin_server_session_through_the_spin_codec() {
    use tickgate::feed::recovery::image::{ImageSession, SessionLimits, SessionOutcome};
    use tickgate::venue::cboe_pitch::spin::{SpinCodec, SpinPhase};

    let segments = tcp_segments("cboe-pitch-spin.pcap");
    let client = blocks_from(&segments, 50600);
    let login = Login::new("0023", "BATS", "s1bats").unwrap();
    const S: i64 = 1_000_000_000;
    let limits = SessionLimits {
        silence_ns: 15 * S,
        whole_ns: 30 * S,
        heartbeat_ns: S,
        max_bytes: 256 << 20,
    };
    // The unit had applied everything up to 312: n0 = 313, so 312 is the
    // first usable image (S ≥ n0 - 1).
    let connected = client[0].0;
    let mut out = Vec::new();
    let mut session =
        ImageSession::start(SpinCodec::new(login, 313), limits, connected, &mut out).unwrap();
    let mut outcome = None;
    let mut after = 0;
    for (from, ts, bytes) in &segments {
        if *from != 18998 {
            continue;
        }
        if outcome.is_some() {
            after += 1;
            continue;
        }
        assert_eq!(session.poll(*ts, &mut out), None);
        outcome = session.on_bytes(bytes, *ts, &mut out);
    }
    let Some(SessionOutcome::Done(picture)) = outcome else {
        panic!("the spin did not end: {outcome:?}");
    };
    assert_eq!(
        after, 3,
        "the three later Spin Image Available are not read"
    );
    assert_eq!(picture.next, 313, "Spin Finished 312: next = S + 1");
    assert_eq!(picture.session, None);

    // What the codec wrote: the capture's Login, then its first Spin
    // Request, byte for byte, and nothing else (no heartbeat was due).
    let request = client
        .iter()
        .find(|b| b.1 == [SessionMessage::SpinRequest { sequence: 312 }])
        .unwrap();
    let mut want = client[0].2.clone();
    want.extend_from_slice(&request.2);
    assert_eq!(out, want);

    // The image: the spin's own messages, Time 75442 alone.
    let mut msgs = Vec::new();
    let mut at = 0;
    while at < picture.blocks.len() {
        let len = u16::from_be_bytes([picture.blocks[at], picture.blocks[at + 1]]) as usize;
        msgs.push(messages::decode(&picture.blocks[at + 2..at + 2 + len]).unwrap());
        at += 2 + len;
    }
    assert_eq!(msgs, [Message::Time { seconds: 75442 }]);
    let adds = msgs
        .iter()
        .filter(|m| matches!(m, Message::AddOrder { .. }))
        .count();
    assert_eq!(adds, 0, "an empty book, as the Spin Response announced");

    let codec = session.codec();
    assert_eq!(codec.phase(), SpinPhase::Finished);
    assert_eq!(codec.login_status(), Some(LoginStatus::Accepted));
    assert_eq!(
        codec.stray_responses(),
        1,
        "the refusal S of the 2nd request"
    );
    assert_eq!(codec.trading_statuses(), 0, "a spin without Trading Status");
}

/// The same spin for a unit that had applied less (n0 = 1: a late join
/// from the start) asks for the same image; one that had applied beyond
/// 313 skips every Image Available of the capture and never asks.
#[test]
fn the_spin_codec_asks_only_for_an_image_the_held_datagrams_continue() {
    use tickgate::venue::cboe_pitch::spin::SpinCodec;
    use tickgate::venue::codec::ImageCodec;

    let segments = tcp_segments("cboe-pitch-spin.pcap");
    let login = Login::new("0023", "BATS", "s1bats").unwrap();
    for (n0, asks) in [(1u64, true), (313, true), (314, false)] {
        let mut c = SpinCodec::new(login, n0);
        let mut out = Vec::new();
        let mut ended = false;
        for (from, _, bytes) in segments.iter().filter(|s| s.0 == 18998) {
            let _ = from;
            c.push(bytes);
            while let Some(e) = c.next_event(&mut out).unwrap() {
                ended |= matches!(e, tickgate::venue::codec::ImageEvent::End { .. });
            }
        }
        assert_eq!(!out.is_empty(), asks, "n0 {n0}");
        assert_eq!(ended, asks, "n0 {n0}");
        if !asks {
            assert_eq!(c.skipped_images(), 4);
            assert_eq!(
                c.stray_responses(),
                2,
                "both answers, to requests it never sent"
            );
        }
    }
}
