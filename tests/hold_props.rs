//! Properties of the hold (recovery.md R1-R2), through the public API:
//! - a hold fed any interleaving of lines A and B and re-request answers,
//!   each packet delivered at least once and every hole filled before its
//!   deadline, ends in the same state as the same packets fed once in
//!   sequence order: nothing lost, nothing counted twice, the same quotes;
//! - when some packets are never delivered, every hole is declared at its
//!   deadline and the messages counted lost are exactly the missing ones;
//! - a feed that holds never holds more than `gap_hold_packets`.

use proptest::prelude::*;
use tickgate::feed::{DatagramOutcome, Feed, FeedSettings, Mode, Recovery};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

const T0: i64 = 1_796_025_600_000_000_000;
const US: i64 = 1_000;

fn sym(i: usize) -> Symbol {
    Symbol::parse(["EURUSD", "GBPUSD", "USDJPY", "AUDUSD"][i % 4]).unwrap()
}

/// Packets 1..=n of one session: packet k carries `counts[k]` Quotes of
/// rotating symbols, each symbol's own sequence rising by one a Quote.
fn stream(counts: &[u8]) -> Vec<Vec<u8>> {
    let session = SessionId::parse("HOLDPROP01").unwrap();
    let mut per_symbol = [0u64; 4];
    let mut channel = 1u64;
    let mut out = Vec::new();
    let mut k = 0usize;
    for &c in counts {
        let mut b = PacketBuilder::new();
        b.start(session, channel);
        for _ in 0..c.max(1) {
            let s = k % 4;
            k += 1;
            per_symbol[s] += 1;
            let seq = per_symbol[s];
            let side = |px: i64| Some(Side { px, qty: seq });
            b.quote(&Quote::new(
                sym(s),
                seq,
                T0 as u64,
                side(1_000_000_000 + seq as i64),
                side(1_000_100_000 + seq as i64),
            ));
        }
        channel += c.max(1) as u64;
        out.push(b.bytes().to_vec());
    }
    out
}

fn settings(hold_us: u64, packets: usize, servers: usize) -> FeedSettings {
    FeedSettings {
        mode: Mode::Full,
        recovery: Recovery {
            gap_hold_us: hold_us,
            gap_hold_packets: packets,
            rerequest_servers: servers,
            rerequest_timeout_ms: 5,
            rerequest_attempts: 2,
            snapshot: false,
            ..Recovery::default()
        },
        ..FeedSettings::default()
    }
}

/// The quotes every symbol ends with: (symbol, seq, bid, ask).
type Quotes = Vec<(Symbol, Option<u64>, Option<Side>, Option<Side>)>;

fn quotes(f: &Feed) -> Quotes {
    let mut q: Quotes = f
        .symbols()
        .map(|(s, v)| (s, v.shown_seq, v.bid, v.ask))
        .collect();
    q.sort_by_key(|e| e.0);
    q
}

/// Where one delivery of a packet comes from.
#[derive(Clone, Copy, Debug)]
enum Via {
    A,
    B,
    Answer,
}

fn deliver(f: &mut Feed, via: Via, bytes: &[u8], t: i64) -> DatagramOutcome {
    match via {
        Via::A => f.on_datagram(0, bytes, t),
        Via::B => f.on_datagram(1, bytes, t),
        Via::Answer => f.on_rerequest_answer(bytes, t),
    }
}

/// Deliveries: for each packet a set of (via, order key); sorted by key
/// they are the arrival order.
fn deliveries(n: usize) -> impl Strategy<Value = Vec<(usize, Via, u32)>> {
    prop::collection::vec(
        (
            prop::sample::select(vec![Via::A, Via::B, Via::Answer]),
            any::<u32>(),
            any::<bool>(),
            any::<u32>(),
        ),
        n,
    )
    .prop_map(|v| {
        let mut out = Vec::new();
        for (k, (via, key, twice, key2)) in v.into_iter().enumerate() {
            out.push((k, via, key));
            if twice {
                let other = match via {
                    Via::A => Via::B,
                    _ => Via::A,
                };
                out.push((k, other, key2));
            }
        }
        out.sort_by_key(|d| d.2);
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_interleaving_ends_as_sequence_order(
        counts in prop::collection::vec(1u8..4, 2..24),
        seed in deliveries(24),
    ) {
        let packets = stream(&counts);
        let n = packets.len();
        // Packet 1 first (the baseline), then any order of the rest.
        let mut plan: Vec<(usize, Via)> = vec![(0, Via::A)];
        plan.extend(seed.iter().filter(|d| d.0 < n && d.0 > 0).map(|d| (d.0, d.1)));
        for k in 1..n {
            if !plan.iter().any(|d| d.0 == k) {
                plan.push((k, Via::B));
            }
        }

        let mut in_order = Feed::new(settings(0, 10_000, 0), 2);
        for (k, p) in packets.iter().enumerate() {
            prop_assert_eq!(in_order.on_datagram(0, p, T0 + k as i64 * US), DatagramOutcome::Applied);
        }

        // 1 us apart, held for 10 s: no hole can reach its deadline.
        let mut held = Feed::new(settings(10_000_000, 10_000, 1), 2);
        for (i, &(k, via)) in plan.iter().enumerate() {
            deliver(&mut held, via, &packets[k], T0 + i as i64 * US);
            while held.poll_request().is_some() {}
        }
        prop_assert!(!held.recovering(), "every packet arrived: no hole stays open");
        let c = held.counters();
        prop_assert_eq!(c.channel_messages_lost, 0);
        prop_assert_eq!(c.channel_gaps, 0);
        prop_assert_eq!(c.recovery.holes_lost, 0);
        prop_assert_eq!(c.recovery.holes_opened, c.recovery.holes_filled);
        prop_assert_eq!(c.ticks_lost, 0);
        prop_assert_eq!(quotes(&held), quotes(&in_order));
        for (s, v) in held.symbols() {
            prop_assert!(v.suspect.is_none(), "{} {:?}", s, v.suspect);
        }
    }

    #[test]
    fn missing_packets_are_declared_and_counted_exactly(
        counts in prop::collection::vec(1u8..4, 3..24),
        lost in prop::collection::vec(any::<bool>(), 24),
        hold_packets in 1usize..6,
    ) {
        let packets = stream(&counts);
        let n = packets.len();
        // Packet 1 and the last always arrive (a loss at the end is not
        // seen by the channel at all).
        let missing: Vec<usize> = (1..n - 1).filter(|&k| lost[k]).collect();
        let missing_messages: u64 = missing.iter().map(|&k| counts[k].max(1) as u64).sum();
        let mut f = Feed::new(settings(500, hold_packets, 0), 2);
        let mut t = T0;
        for (k, p) in packets.iter().enumerate() {
            if missing.contains(&k) {
                continue;
            }
            f.on_datagram(k % 2, p, t);
            prop_assert!(f.hold_usage().0 <= hold_packets);
            t += 7 * US;
        }
        f.handle_timeout(t + 1_000 * US);
        prop_assert!(!f.recovering());
        let c = f.counters();
        prop_assert_eq!(c.channel_messages_lost, missing_messages);
        prop_assert_eq!(c.recovery.holes_opened, c.recovery.holes_filled + c.recovery.holes_lost);
        // Every packet that arrived was applied exactly once.
        let applied: u64 = (0..n).filter(|k| !missing.contains(k)).map(|k| counts[k].max(1) as u64).sum();
        prop_assert_eq!(c.duplicate_packets(), 0);
        prop_assert_eq!(c.messages(), applied);
    }
}

/// R4/R6: a request is counted as sent when the I/O shell takes it
/// (`poll_request`). One that fell due while the hole then closed before
/// the shell polled (both in one batch of datagrams) is dropped unsent and
/// not counted, nor charged to the 100-a-second ceiling.
#[test]
fn a_request_dropped_before_the_shell_takes_it_is_not_counted() {
    let packets = stream(&[1, 1, 1, 1]);
    let mut f = Feed::new(settings(1_000, 10_000, 1), 2);
    f.on_datagram(0, &packets[0], T0);
    // Packet 2 is late on both lines: a hole, its request due at 1 ms.
    assert_eq!(
        f.on_datagram(0, &packets[2], T0 + US),
        DatagramOutcome::Held
    );
    f.handle_timeout(T0 + 1_001 * US);
    // Before the shell polls, line B delivers packet 2: the hole closes.
    f.on_datagram(1, &packets[1], T0 + 1_002 * US);
    assert!(!f.recovering());
    assert!(f.poll_request().is_none(), "no request for a closed hole");
    assert_eq!(f.counters().recovery.requests_sent, 0);
    // The next hole's request is counted once taken.
    f.on_datagram(0, &packets[3], T0 + 2_000 * US);
    f.on_datagram(0, &stream(&[1, 1, 1, 1, 1, 1])[5], T0 + 2_001 * US);
    f.handle_timeout(T0 + 3_002 * US);
    let (server, request) = f.poll_request().expect("the request for packet 5");
    assert_eq!((server, request.sequence, request.count), (0, 5, 1));
    assert_eq!(f.counters().recovery.requests_sent, 1);
}

/// R1: the other line's copy of a held datagram takes no room: with room
/// for two held datagrams, A's and B's copies of packets 3 and 4 are all
/// held without overflowing, and packet 2 then fills the hole.
#[test]
fn r1_the_other_lines_copy_of_a_held_datagram_takes_no_room() {
    let p = stream(&[1, 1, 1, 1]);
    let mut f = Feed::new(settings(1_000, 2, 0), 2);
    f.on_datagram(0, &p[0], T0);
    assert_eq!(f.on_datagram(0, &p[2], T0 + US), DatagramOutcome::Held);
    assert_eq!(
        f.on_datagram(1, &p[2], T0 + 2 * US),
        DatagramOutcome::Duplicate
    );
    assert_eq!(f.on_datagram(0, &p[3], T0 + 3 * US), DatagramOutcome::Held);
    assert_eq!(
        f.on_datagram(1, &p[3], T0 + 4 * US),
        DatagramOutcome::Duplicate
    );
    assert_eq!(f.hold_usage().0, 2);
    assert_eq!(f.counters().recovery.hold_overflows, 0);
    assert_eq!(
        f.on_datagram(1, &p[1], T0 + 5 * US),
        DatagramOutcome::Applied
    );
    assert!(!f.recovering());
    assert_eq!(f.counters().channel_messages_lost, 0);
    assert_eq!(f.counters().recovery.holes_filled, 1);
}

/// semantics.md C3b with a hold: a datagram is judged from the end of the
/// furthest one held, not from a `next` that waits for the hole: two
/// jumps of 600,000 (each under `max_channel_jump`, 1,000,000) are both
/// held although the second is 1,200,000 beyond `next`.
#[test]
fn c3b_judges_a_jump_from_the_furthest_held_datagram() {
    let session = SessionId::parse("HOLDPROP01").unwrap();
    let at = |seq: u64| {
        let mut b = PacketBuilder::new();
        b.start(session, seq);
        b.quote(&Quote::new(sym(0), seq, T0 as u64, None, None));
        b.bytes().to_vec()
    };
    let mut f = Feed::new(settings(100_000, 10, 0), 2);
    f.on_datagram(0, &at(1), T0);
    assert_eq!(
        f.on_datagram(0, &at(600_000), T0 + US),
        DatagramOutcome::Held
    );
    assert_eq!(
        f.on_datagram(0, &at(1_200_000), T0 + 2 * US),
        DatagramOutcome::Held
    );
    assert_eq!(f.counters().channel_seq_anomalies, 0);
    // From the furthest held (1,200,001), 1,000,000 more is not believed.
    assert_eq!(
        f.on_datagram(0, &at(2_200_001), T0 + 3 * US),
        DatagramOutcome::Ignored
    );
    assert_eq!(f.counters().channel_seq_anomalies, 1);
}

/// R4/R6: a malformed answer from a configured server (a length past the
/// datagram, a count of 65534 with no messages) is an answer received and
/// dropped, counted as such, not only an invalid packet; nothing changes.
#[test]
fn malformed_answers_are_counted_as_answers_dropped() {
    let p = stream(&[1, 1, 1]);
    let mut f = Feed::new(settings(1_000, 10, 1), 2);
    f.on_datagram(0, &p[0], T0);
    assert_eq!(f.on_datagram(0, &p[2], T0 + US), DatagramOutcome::Held);
    let mut long = p[1].clone();
    long.truncate(long.len() - 5);
    let mut count = p[1][..20].to_vec();
    count[18..20].copy_from_slice(&65534u16.to_be_bytes());
    for bad in [long, count] {
        assert!(matches!(
            f.on_rerequest_answer(&bad, T0 + 2 * US),
            DatagramOutcome::Invalid(_)
        ));
    }
    let r = &f.counters().recovery;
    assert_eq!((r.answers_received, r.answers_malformed), (2, 2));
    assert_eq!(f.counters().rerequest.invalid_packets, 2);
    assert!(f.recovering());
    assert_eq!(
        f.on_rerequest_answer(&p[1], T0 + 3 * US),
        DatagramOutcome::Applied
    );
    assert!(!f.recovering());
    assert_eq!(f.counters().recovery.answers_received, 3);
}
