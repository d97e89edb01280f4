//! A stranger's datagrams on a `cme-mdp3` feed's groups (venues.md
//! `cme-mdp3`: Framing, Channel rules, Instruments and symbols, Entries,
//! Snapshots, "A stranger on the groups"), through the public API: a
//! `Feed` fed datagrams on its lines, checks answered by
//! `gate::protocol::answer`. Each test is one way a stranger once got a
//! forged OK or stopped the feed; the property at the end forges
//! snapshots from a second source and `#` definitions at random.

use proptest::prelude::*;
use tickgate::feed::check::SymbolLookup;
use tickgate::feed::{ClockOffset, Feed, FeedSettings, VenueKind};
use tickgate::gate::protocol::answer;
use tickgate::venue::cme_mdp3::encode::{self, BookEntry, Definition, Snapshot, SnapshotLevel};
use tickgate::venue::LineKind;

const T0: i64 = 1_796_112_000_000_000_000;
const MS: i64 = 1_000_000;
/// One price unit (10^-9).
const PX: i64 = 1_000_000_000;

const A: usize = 0;
const B: usize = 1;
const SNAP: usize = 2;
const DEF: usize = 3;

/// A channel on lines A and B (incremental), a snapshot and a definition
/// line, with `max_symbols` instruments.
fn feed(max_symbols: usize) -> Feed {
    let mut s = FeedSettings::for_venue(VenueKind::CmeMdp3);
    s.max_symbols = max_symbols;
    s.clock_offset = ClockOffset::Off;
    s.recovery.gap_hold_us = 0;
    let mut f = Feed::new(s, 4);
    f.set_line_kind(SNAP, LineKind::Snapshot);
    f.set_line_kind(DEF, LineKind::Definition);
    f
}

fn check(f: &Feed, symbol: &str, t: i64) -> String {
    let mut out = Vec::new();
    let feeds: [&dyn SymbolLookup; 1] = [f];
    answer(format!("CHECK {symbol}").as_bytes(), &feeds, t, &mut out);
    String::from_utf8(out).unwrap().trim_end().to_string()
}

/// A bid entry: level 1, `New` for RptSeq 1, else `Overlay`.
fn bid(security_id: i32, rpt_seq: u32, px: i64, size: i32) -> BookEntry {
    BookEntry {
        px: Some(px * PX),
        size: Some(size),
        security_id,
        rpt_seq,
        orders: None,
        level: 1,
        action: if rpt_seq == 1 { 0 } else { 5 },
        entry_type: b'0',
    }
}

/// An incremental packet `seq`, sent at `sent`, with `entries`.
fn book(seq: u32, sent: i64, entries: &[BookEntry]) -> Vec<u8> {
    let mut p = Vec::new();
    encode::start_packet(&mut p, seq, sent as u64);
    encode::book(&mut p, sent as u64, entries);
    p
}

fn heartbeat(seq: u32, sent: u64) -> Vec<u8> {
    let mut p = Vec::new();
    encode::start_packet(&mut p, seq, sent);
    encode::heartbeat(&mut p);
    p
}

fn definition(seq: u32, sent: i64, security_id: i32, symbol: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    encode::start_packet(&mut p, seq, sent as u64);
    encode::definition(
        &mut p,
        &Definition {
            tot_num_reports: 1000,
            update_action: b'A',
            symbol,
            security_id,
            security_group: b"ES",
            depth: 10,
            trading_status: None,
            last_update_time: sent as u64,
        },
    );
    p
}

/// A snapshot with one bid level and one offer level.
fn snapshot(sent: i64, m: u32, security_id: i32, rpt_seq: u32, bid: i64, ask: i64) -> Vec<u8> {
    let mut p = Vec::new();
    encode::start_packet(&mut p, 1, sent as u64);
    let levels = [
        SnapshotLevel {
            px: bid * PX,
            size: 1,
            orders: None,
            level: 1,
            entry_type: b'0',
        },
        SnapshotLevel {
            px: ask * PX,
            size: 1,
            orders: None,
            level: 1,
            entry_type: b'1',
        },
    ];
    encode::snapshot(
        &mut p,
        &Snapshot {
            last_msg_seq_num: m,
            tot_num_reports: 1,
            security_id,
            rpt_seq,
            transact_time: sent as u64,
            trading_status: None,
            levels: &levels,
        },
    );
    p
}

/// Finding: a definition whose Symbol is `#411873`, for another
/// SecurityID, took over instrument 411873 for good (its `#` name, then
/// its symbol answered with the stranger's book, real entries dropped).
#[test]
fn a_hash_symbol_never_takes_over_a_security_id() {
    for line in [DEF, A] {
        let mut f = feed(100);
        f.on_datagram(DEF, &definition(1, T0, 411873, b"ESZ6"), T0);
        f.on_datagram(A, &book(1, T0 + MS, &[bid(411873, 1, 10, 5)]), T0 + MS);
        // The stranger: a definition of SecurityID 999 named `#411873`,
        // then a book of its own for 999.
        let seq = if line == A { 2 } else { 1 };
        let t = T0 + 2 * MS;
        f.on_datagram(line, &definition(seq, t, 999, b"#411873"), t);
        // A book of its own for 999: a snapshot (999 has no sequence, so
        // any covering snapshot is used).
        let m = seq;
        let t = T0 + 3 * MS;
        f.on_datagram(SNAP, &snapshot(t, m, 999, 999_990, 1, 9999), t);
        let t = T0 + 4 * MS;
        f.on_datagram(A, &book(m + 1, t, &[bid(411873, 2, 11, 6)]), t);
        let t = t + 10_000;
        for name in ["#411873", "ESZ6"] {
            let got = check(&f, name, t);
            assert!(
                got.starts_with(&format!("OK {name} seq=2 bid=11@6 ask=-")),
                "line {line}: {got}"
            );
        }
        let got = check(&f, "#999", t);
        assert!(
            got.starts_with("OK #999 seq=999990 bid=1@1 ask=9999@1"),
            "{got}"
        );
    }
}

/// Finding: a snapshot with RptSeq 999,990 and LastMsgSeqNumProcessed
/// 2^32-1, for an instrument waiting after an unrelated lost packet, was
/// used: OK at the forged book for good.
#[test]
fn a_snapshot_from_ahead_of_the_channel_is_ignored() {
    let mut f = feed(100);
    f.on_datagram(A, &book(1, T0, &[bid(1001, 1, 10, 5)]), T0);
    // Packet 2 lost; packet 3 carries another instrument.
    f.on_datagram(A, &book(3, T0 + MS, &[bid(2002, 1, 20, 1)]), T0 + MS);
    assert!(check(&f, "#1001", T0 + MS).starts_with("REJECT #1001 suspect"));
    f.on_datagram(
        SNAP,
        &snapshot(T0 + 2 * MS, u32::MAX, 1001, 999_990, 1, 9999),
        T0 + 2 * MS,
    );
    assert_eq!(f.counters().snapshots_applied, 0);
    f.on_datagram(
        A,
        &book(4, T0 + 3 * MS, &[bid(1001, 2, 11, 6)]),
        T0 + 3 * MS,
    );
    let got = check(&f, "#1001", T0 + 3 * MS + 10_000);
    assert!(!got.contains("bid=1@1"), "{got}");
    assert!(got.contains("seq=2 bid=11@6"), "{got}");
    assert_eq!(f.counters().stale_dropped, 0);
}

/// The same forged book with a LastMsgSeqNumProcessed the channel has
/// seen is used (a plausible snapshot: what `source` is for), but the
/// instrument's next real entry exposes it: `seq_anomaly`, never OK.
#[test]
fn a_plausible_forged_snapshot_is_exposed_by_the_next_entry() {
    let mut f = feed(100);
    f.on_datagram(A, &book(1, T0, &[bid(1001, 1, 10, 5)]), T0);
    f.on_datagram(A, &book(3, T0 + MS, &[bid(2002, 1, 20, 1)]), T0 + MS);
    f.on_datagram(
        SNAP,
        &snapshot(T0 + 2 * MS, 3, 1001, 999_990, 1, 9999),
        T0 + 2 * MS,
    );
    f.on_datagram(
        A,
        &book(4, T0 + 3 * MS, &[bid(1001, 2, 11, 6)]),
        T0 + 3 * MS,
    );
    let got = check(&f, "#1001", T0 + 3 * MS + 10_000);
    assert!(got.starts_with("REJECT #1001 suspect"), "{got}");
    assert!(got.ends_with("suspect=seq_anomaly"), "{got}");
    assert_eq!(f.counters().seq_anomalies, 1);
    // The next real snapshot is taken whatever its RptSeq.
    f.on_datagram(
        SNAP,
        &snapshot(T0 + 4 * MS, 4, 1001, 2, 11, 12),
        T0 + 4 * MS,
    );
    let got = check(&f, "#1001", T0 + 4 * MS + 10_000);
    assert!(got.starts_with("OK #1001 seq=2 bid=11@1 ask=12@1"), "{got}");
}

/// Finding: one heartbeat with MsgSeqNum 1 and a SendingTime an hour
/// ahead started a new session (every real packet then dropped as a
/// replaced session's); SendingTime 2^64-1 split the adapter and the
/// engine.
#[test]
fn one_datagram_never_restarts_the_channel() {
    for sent in [(T0 + 3_600_000 * MS) as u64, u64::MAX, 1 << 63] {
        let mut f = feed(100);
        f.on_datagram(A, &book(50, T0, &[bid(1001, 1, 10, 5)]), T0);
        f.on_datagram(B, &heartbeat(1, sent), T0 + MS);
        for (i, seq) in (51..60).enumerate() {
            let t = T0 + (2 + i as i64) * MS;
            f.on_datagram(
                A,
                &book(seq, t, &[bid(1001, 2 + i as u32, 10, 6 + i as i32)]),
                t,
            );
        }
        let got = check(&f, "#1001", T0 + 11 * MS);
        assert!(
            got.starts_with("OK #1001 seq=10 bid=10@14"),
            "{sent}: {got}"
        );
        assert_eq!(f.counters().session_changes, 0, "{sent}");
        assert_eq!(f.counters().stale_session_dropped, 0, "{sent}");
        if sent >= 1 << 63 {
            assert_eq!(f.counters().invalid_packets, 1, "{sent}");
        }
    }
}

/// A real restart still changes the session: the candidate and the next
/// packet of its numbering.
#[test]
fn a_restart_is_confirmed_by_its_next_packet() {
    let mut f = feed(100);
    f.on_datagram(A, &book(50, T0, &[bid(1001, 1, 10, 5)]), T0);
    f.on_datagram(A, &book(1, T0 + MS, &[bid(1001, 1, 12, 1)]), T0 + MS);
    assert_eq!(f.counters().session_changes, 0);
    f.on_datagram(
        A,
        &book(2, T0 + 2 * MS, &[bid(1001, 2, 12, 2)]),
        T0 + 2 * MS,
    );
    assert_eq!(f.counters().session_changes, 1);
    let got = check(&f, "#1001", T0 + 2 * MS + 10_000);
    assert!(got.starts_with("OK #1001 seq=2 bid=12@2"), "{got}");
}

/// Finding: two table slots an instrument, so 60,000 defined instruments
/// left no slot for ESZ6 in a 100,000-slot table; every SecurityID then
/// made an instrument even when the table was full. Here: `max_symbols`
/// instruments, each under two names, all answer; the next SecurityIDs
/// are counted once each and keep nothing.
#[test]
fn an_instrument_takes_one_of_max_symbols_whichever_name() {
    let n = 8;
    let mut f = feed(n);
    for i in 0..n as i32 {
        let t = T0 + i64::from(i) * MS;
        let name = format!("ES{i}");
        f.on_datagram(DEF, &definition(1, t, 1000 + i, name.as_bytes()), t);
        f.on_datagram(A, &book(1 + i as u32, t, &[bid(1000 + i, 1, 10, 1)]), t);
    }
    let t = T0 + 20 * MS;
    for i in 0..n as i32 {
        for name in [format!("#{}", 1000 + i), format!("ES{i}")] {
            let got = check(&f, &name, t);
            assert!(
                got.starts_with(&format!("OK {name} seq=1 bid=10@1")),
                "{got}"
            );
        }
    }
    assert_eq!(f.counters().symbols_overflow, 0);
    // Two strangers' SecurityIDs, each seen twice: counted once each.
    for (k, id) in [7777, 8888, 7777, 8888].into_iter().enumerate() {
        let seq = n as u32 + 1 + k as u32;
        f.on_datagram(A, &book(seq, t, &[bid(id, 1, 1, 1)]), t);
    }
    f.on_datagram(DEF, &definition(2, t, 9999, b"XX"), t);
    assert_eq!(f.counters().symbols_overflow, 3);
    assert!(check(&f, "#7777", t).contains("unknown_symbol"));
    assert!(check(&f, "XX", t).contains("unknown_symbol"));
    assert!(check(&f, "ES0", t).starts_with("OK ES0"));
}

/// `#` names that are not `#` and digits name nothing.
#[test]
fn a_hash_name_that_is_not_digits_is_unknown() {
    let mut f = feed(100);
    f.on_datagram(DEF, &definition(1, T0, 1001, b"#abc"), T0);
    let got = check(&f, "#abc", T0 + MS);
    assert!(got.starts_with("REJECT #abc unknown_symbol"), "{got}");
    assert!(check(&f, "#1001", T0 + MS).starts_with("REJECT #1001 no_data"));
}

/// The real stream of one instrument (SecurityID 1001, `ESZ6`): packet
/// `k` (1-based) carries its entry RptSeq `k`, bid 100 + k.
fn real_packet(k: u32, t: i64) -> Vec<u8> {
    book(k, t, &[bid(1001, k, 100 + i64::from(k), k as i32)])
}

#[derive(Clone, Debug)]
enum Forgery {
    /// A snapshot from a second source: RptSeq above the true one by
    /// `ahead` (at least 1), any `m`, a made-up book.
    Snapshot { ahead: u32, m: u32, px: i64 },
    /// A definition of another SecurityID with a `#` name (`#1001`, or
    /// another instrument's).
    Definition { security_id: i32, hash_of: i32 },
}

fn forgery() -> impl Strategy<Value = Forgery> {
    prop_oneof![
        (1u32..2_000_000, any::<u32>(), 1i64..50).prop_map(|(ahead, m, px)| Forgery::Snapshot {
            ahead,
            m,
            px
        }),
        (2000i32..2100, prop_oneof![Just(1001), 2000i32..2100]).prop_map(
            |(security_id, hash_of)| Forgery::Definition {
                security_id,
                hash_of
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Forged snapshots (RptSeq above the instrument's true one when they
    /// arrive, any `m`) and forged `#` definitions, planted among the real
    /// stream (with losses, so that the instrument waits): once the real
    /// stream has sent the instrument an entry after them, no check of it
    /// answers OK with a book the real stream never had.
    #[test]
    fn forgeries_never_give_an_ok_once_a_real_entry_followed(
        plan in proptest::collection::vec(
            (proptest::option::of(forgery()), any::<bool>()),
            1..40,
        ),
    ) {
        let mut f = feed(1000);
        f.on_datagram(DEF, &definition(1, T0, 1001, b"ESZ6"), T0);
        // The real books: bid (price, size) after each RptSeq.
        let mut real_books = vec![None];
        let mut t = T0;
        let mut k = 0u32;
        let mut forged_since_entry = false;
        let mut processed = 0;
        for (forged, lose) in plan {
            k += 1;
            t += MS;
            real_books.push(Some((100 + i64::from(k), k as i32)));
            if !lose {
                f.on_datagram(A, &real_packet(k, t), t);
                forged_since_entry = false;
                processed = k;
            }
            if let Some(x) = forged {
                t += MS;
                match x {
                    Forgery::Snapshot { ahead, m, px } => {
                        let d = snapshot(t, m, 1001, k.saturating_add(ahead), px, px + 1);
                        f.on_datagram(SNAP, &d, t);
                    }
                    Forgery::Definition { security_id, hash_of } => {
                        // The stranger's instrument, with a book of its own
                        // (a forged snapshot the channel would accept).
                        let name = format!("#{hash_of}");
                        f.on_datagram(DEF, &definition(2, t, security_id, name.as_bytes()), t);
                        let d = snapshot(t, processed, security_id, 5, 1, 2);
                        f.on_datagram(SNAP, &d, t);
                    }
                }
                forged_since_entry = true;
            }
            if forged_since_entry {
                continue;
            }
            for name in ["#1001", "ESZ6"] {
                let got = check(&f, name, t + 1);
                if !got.starts_with("OK ") {
                    continue;
                }
                let bid = got
                    .split(' ')
                    .find_map(|w| w.strip_prefix("bid="))
                    .unwrap()
                    .to_string();
                let ok = real_books.iter().flatten().any(|(px, size)| bid == format!("{px}@{size}"));
                prop_assert!(ok, "{} answered {} with a book the stream never had", name, got);
            }
        }
    }
}
