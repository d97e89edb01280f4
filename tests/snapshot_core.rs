//! recovery.md R5 in the sans-I/O core, through the public API: a
//! nasdaq-itch feed that joins late (or declares a hole lost) asks for a
//! snapshot, holds the session's datagrams meanwhile, and on `G` replaces
//! its books, quotes every symbol from them and goes on from `N`; a failed
//! attempt applies nothing, releases what it held and retries with backoff.

use tickgate::feed::{
    DatagramOutcome, Feed, FeedSettings, SnapshotFailure, SnapshotPhase, SuspectCause, VenueKind,
};
use tickgate::venue::nasdaq_itch::messages::{self, Header, Message, Side as ItchSide};
use tickgate::wire::{PacketBuilder, SessionId, Side, Symbol};

/// 2026-12-01 10:00 New York (15:00 UTC), as Unix ns.
const T0: i64 = 1_764_601_200_000_000_000;
const MS: i64 = 1_000_000;
/// 10:00 as ITCH time (ns since New York midnight).
const ITCH_10AM: u64 = 36_000_000_000_000;

fn sym(s: &str) -> Symbol {
    Symbol::parse(s).unwrap()
}

fn hdr(locate: u16, offset_ns: u64) -> Header {
    Header {
        locate,
        tracking: 0,
        timestamp: ITCH_10AM + offset_ns,
    }
}

fn add(locate: u16, stock: &str, r: u64, buy: bool, shares: u32, price: u32) -> Message {
    Message::AddOrder {
        header: hdr(locate, r),
        order_ref: r,
        side: if buy { ItchSide::Buy } else { ItchSide::Sell },
        shares,
        stock: sym(stock),
        price,
        attribution: None,
    }
}

fn packet(seq: u64, msgs: &[Message]) -> Vec<u8> {
    let mut b = PacketBuilder::new();
    b.start(SessionId::parse("000010059B").unwrap(), seq);
    for m in msgs {
        b.push_raw(&messages::encode_to_vec(m));
    }
    b.bytes().to_vec()
}

/// A snapshot's messages as MoldUDP64 blocks (u16 length, message).
fn blocks(msgs: &[Message]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        let b = messages::encode_to_vec(m);
        out.extend_from_slice(&(b.len() as u16).to_be_bytes());
        out.extend_from_slice(&b);
    }
    out
}

fn feed() -> Feed {
    let mut s = FeedSettings::for_venue(VenueKind::NasdaqItch);
    s.recovery.snapshot = true;
    s.clock_offset = tickgate::feed::ClockOffset::Off;
    Feed::new(s, 2)
}

fn px(p: u32) -> i64 {
    p as i64 * 100_000
}

#[test]
fn late_join_is_rebuilt_from_the_snapshot() {
    let mut f = feed();
    // Joined at sequence 100: books may miss orders.
    let p100 = packet(100, &[add(1, "AAPL", 900, true, 5, 1_000_000)]);
    f.on_datagram(0, &p100, T0);
    let aapl = f.symbol_summary(sym("AAPL")).unwrap();
    assert_eq!(aapl.suspect, Some(SuspectCause::NoSnapshot));
    assert_eq!(
        f.snapshot_phase().0,
        SnapshotPhase::Wanted { not_before: T0 }
    );
    assert!(f.poll_snapshot_start(T0 + MS));
    assert!(!f.poll_snapshot_start(T0 + MS), "one attempt at a time");

    // Meanwhile the session goes on: 101 (before N) and 103 (after N).
    let p101 = packet(101, &[add(1, "AAPL", 901, false, 7, 1_010_000)]);
    let p103 = packet(103, &[add(2, "MSFT", 903, true, 3, 4_000_000)]);
    assert_eq!(f.on_datagram(0, &p101, T0 + 2 * MS), DatagramOutcome::Held);
    assert_eq!(
        f.on_datagram(1, &p103, T0 + 9 * MS + MS / 2),
        DatagramOutcome::Held
    );
    // The check answers as before G.
    assert_eq!(
        f.symbol_summary(sym("AAPL")).unwrap().suspect,
        Some(SuspectCause::NoSnapshot)
    );

    // The snapshot reflects everything before 102: AAPL 990@99.5 bid,
    // 901 ask, a halted ZZZZ, and MSFT's directory entry.
    let snap = blocks(&[
        Message::StockDirectory {
            header: hdr(1, 0),
            stock: sym("AAPL"),
        },
        Message::StockDirectory {
            header: hdr(2, 0),
            stock: sym("MSFT"),
        },
        add(1, "AAPL", 990, true, 10, 995_000),
        add(1, "AAPL", 901, false, 7, 1_010_000),
        Message::TradingAction {
            header: hdr(3, 50),
            stock: sym("ZZZZ"),
            state: b'H',
            reason: *b"    ",
        },
    ]);
    let g_at = T0 + 10 * MS;
    f.on_snapshot(102, &snap, g_at).unwrap();
    assert_eq!(f.snapshot_phase(), (SnapshotPhase::Idle, None));
    assert_eq!(f.counters().recovery.snapshots_applied, 1);

    // Order 900 was deleted before the snapshot: the book has only what it
    // built. seq = N - 1, alive at G, trusted; but 102 is missing while
    // 103 is held: a hole (R5 step 3), so recovering (R3) for now.
    let a = f.symbol_summary(sym("AAPL")).unwrap();
    assert_eq!(a.suspect, Some(SuspectCause::Recovering), "{a:?}");
    assert!(a.verified);
    assert_eq!(
        a.bid,
        Some(Side {
            px: px(995_000),
            qty: 10
        })
    );
    assert_eq!(
        a.ask,
        Some(Side {
            px: px(1_010_000),
            qty: 7
        })
    );
    assert_eq!(a.shown_seq, Some(101));
    assert_eq!(a.alive_at, Some(g_at));
    // The latest snapshot message time: 10:00 + 990 ns.
    assert_eq!(a.quote_source_ts, Some(T0 + 990));
    assert!(f.symbol_summary(sym("ZZZZ")).unwrap().halted);

    // 101 was reflected by the snapshot (skipped); 102 is a hole, 103 held.
    assert!(f.recovering());
    assert_eq!(
        f.symbol_summary(sym("MSFT")).unwrap().suspect,
        Some(SuspectCause::Recovering)
    );
    let p102 = packet(102, &[add(2, "MSFT", 902, false, 4, 4_100_000)]);
    f.on_datagram(0, &p102, g_at + MS / 5);
    assert!(!f.recovering());
    assert_eq!(f.symbol_summary(sym("AAPL")).unwrap().suspect, None);
    let m = f.symbol_summary(sym("MSFT")).unwrap();
    assert_eq!(m.suspect, None);
    assert_eq!(
        m.bid,
        Some(Side {
            px: px(4_000_000),
            qty: 3
        })
    );
    assert_eq!(
        m.ask,
        Some(Side {
            px: px(4_100_000),
            qty: 4
        })
    );
    assert_eq!(f.counters().channel_messages_lost, 0);
}

#[test]
fn a_failed_attempt_applies_nothing_and_backs_off() {
    let mut f = feed();
    f.on_datagram(0, &packet(50, &[add(1, "AAPL", 1, true, 5, 1_000_000)]), T0);
    assert!(f.poll_snapshot_start(T0));
    assert_eq!(
        f.on_datagram(
            0,
            &packet(51, &[add(1, "AAPL", 2, true, 6, 1_000_100)]),
            T0 + MS
        ),
        DatagramOutcome::Held
    );
    // A snapshot whose message is cut short: nothing applied.
    let mut bad = blocks(&[add(1, "AAPL", 7, true, 1, 2_000_000)]);
    bad.truncate(bad.len() - 3);
    assert_eq!(
        f.on_snapshot(60, &bad, T0 + 2 * MS),
        Err(SnapshotFailure::Malformed)
    );
    let a = f.symbol_summary(sym("AAPL")).unwrap();
    assert_eq!(a.suspect, Some(SuspectCause::NoSnapshot));
    // The held packet was processed as without a snapshot: best bid 100.01.
    assert_eq!(
        a.bid,
        Some(Side {
            px: px(1_000_100),
            qty: 6
        })
    );
    assert!(!f.recovering());
    // R5 Pace: 1 s after the previous attempt's start (T0), then 2 s.
    assert_eq!(
        f.snapshot_phase(),
        (
            SnapshotPhase::Wanted {
                not_before: T0 + 1_000 * MS
            },
            Some(SnapshotFailure::Malformed)
        )
    );
    assert!(!f.poll_snapshot_start(T0 + 999 * MS));
    assert!(f.poll_snapshot_start(T0 + 1_000 * MS));
    f.on_snapshot_failed(SnapshotFailure::Refused, T0 + 1_100 * MS);
    assert_eq!(
        f.snapshot_phase().0,
        SnapshotPhase::Wanted {
            not_before: T0 + 3_000 * MS
        }
    );
    let c = &f.counters().recovery;
    assert_eq!((c.snapshots_started, c.snapshots_applied), (2, 0));
    assert_eq!(c.snapshots_failed.iter().sum::<u64>(), 2);
    // An implausible `G` (C3b's rule) is not applied either.
    assert!(f.poll_snapshot_start(T0 + 3_000 * MS));
    assert_eq!(
        f.on_snapshot(52 + 1_000_000, &blocks(&[]), T0 + 3_200 * MS),
        Err(SnapshotFailure::Implausible)
    );
    assert_eq!(
        f.symbol_summary(sym("AAPL")).unwrap().suspect,
        Some(SuspectCause::NoSnapshot)
    );
}

#[test]
fn a_lost_hole_asks_for_a_snapshot_and_a_session_from_1_does_not() {
    let mut f = feed();
    f.on_datagram(0, &packet(1, &[add(1, "AAPL", 1, true, 5, 1_000_000)]), T0);
    assert_eq!(f.snapshot_phase().0, SnapshotPhase::Idle);
    // 2 never arrives: held 1 ms (venues' default), then declared lost.
    f.on_datagram(
        0,
        &packet(3, &[add(1, "AAPL", 3, true, 5, 1_000_000)]),
        T0 + MS,
    );
    f.handle_timeout(T0 + 3 * MS);
    assert_eq!(f.counters().channel_messages_lost, 1);
    assert_eq!(
        f.symbol_summary(sym("AAPL")).unwrap().suspect,
        Some(SuspectCause::ChannelGap)
    );
    assert!(matches!(f.snapshot_phase().0, SnapshotPhase::Wanted { .. }));
    assert!(f.poll_snapshot_start(T0 + 3 * MS));
    f.on_snapshot(
        4,
        &blocks(&[add(1, "AAPL", 1, true, 5, 1_000_000)]),
        T0 + 4 * MS,
    )
    .unwrap();
    assert_eq!(f.symbol_summary(sym("AAPL")).unwrap().suspect, None);
}

/// A late join at 100 whose snapshot (`G` = 102, at T0 + 10 ms) leaves a
/// hole: 103 was held at T0 + 3 ms, 102 never came.
fn hole_after_g() -> Feed {
    let mut f = feed();
    f.on_datagram(
        0,
        &packet(100, &[add(1, "AAPL", 900, true, 5, 1_000_000)]),
        T0,
    );
    assert!(f.poll_snapshot_start(T0 + MS));
    let p103 = packet(103, &[add(2, "MSFT", 903, true, 3, 4_000_000)]);
    assert_eq!(f.on_datagram(1, &p103, T0 + 3 * MS), DatagramOutcome::Held);
    let snap = blocks(&[Message::StockDirectory {
        header: hdr(2, 0),
        stock: sym("MSFT"),
    }]);
    f.on_snapshot(102, &snap, T0 + 10 * MS).unwrap();
    f
}

/// R5 step 3: a hole left after `G` opens at the arrival of `G`, however
/// long its first held datagram waited during the snapshot; declared lost
/// at its deadline from there, it asks for a new snapshot, which waits for
/// its pace.
#[test]
fn a_hole_after_g_opens_at_g() {
    let mut f = hole_after_g();
    assert!(f.recovering());
    // gap_hold_us = 1000 from `G`, not from the held datagram's arrival.
    f.handle_timeout(T0 + 11 * MS);
    assert!(f.recovering(), "open through its deadline");
    f.handle_timeout(T0 + 11 * MS + 1);
    assert!(!f.recovering());
    assert_eq!(f.counters().channel_messages_lost, 1);
    assert_eq!(
        f.symbol_summary(sym("MSFT")).unwrap().suspect,
        Some(SuspectCause::ChannelGap)
    );
    // Pace: the next attempt waits 1 s from the previous start.
    assert_eq!(
        f.snapshot_phase().0,
        SnapshotPhase::Wanted {
            not_before: T0 + MS + 1_000 * MS
        }
    );
}

/// R5 step 3 and R1: the hole after `G` is filled by a line within its
/// hold (from `G`): nothing lost, no new snapshot.
#[test]
fn a_line_fills_the_hole_after_g_within_its_hold() {
    let mut f = hole_after_g();
    // Line A's 102 arrives 0.9 ms after `G`: 8.9 ms after 103 was held.
    let p102 = packet(102, &[add(2, "MSFT", 902, false, 2, 4_100_000)]);
    assert_eq!(
        f.on_datagram(0, &p102, T0 + 10 * MS + 900_000),
        DatagramOutcome::Applied
    );
    assert!(!f.recovering());
    assert_eq!(f.counters().channel_messages_lost, 0);
    let m = f.symbol_summary(sym("MSFT")).unwrap();
    assert_eq!(m.suspect, None);
    assert_eq!(m.bid.map(|b| b.qty), Some(3));
    assert_eq!(m.ask.map(|a| a.qty), Some(2));
    assert_eq!(f.snapshot_phase().0, SnapshotPhase::Idle);
    assert_eq!(f.counters().recovery.holes_filled, 1);
}

/// R5: at most 1,000,000 datagrams are held while a snapshot runs; one
/// more fails the attempt (`held_bound`), and what was held is processed
/// as without a snapshot (R1-R2).
#[test]
fn the_held_bound_fails_the_attempt() {
    let mut f = feed();
    f.on_datagram(0, &packet(10, &[add(1, "AAPL", 1, true, 5, 1_000_000)]), T0);
    assert!(f.poll_snapshot_start(T0));
    // Empty packets (a count of 0 would be a heartbeat): one System Event
    // each, sequences 11, 12, ...
    let event = Message::SystemEvent {
        header: hdr(0, 0),
        event: b'Q',
    };
    let max = tickgate::feed::engine::SNAPSHOT_HOLD_MAX as u64;
    for i in 0..max {
        let out = f.on_datagram(0, &packet(11 + i, std::slice::from_ref(&event)), T0 + 1);
        assert_eq!(out, DatagramOutcome::Held);
    }
    assert!(matches!(
        f.snapshot_phase().0,
        SnapshotPhase::Running { .. }
    ));
    f.on_datagram(0, &packet(11 + max, &[event]), T0 + 2);
    assert_eq!(
        f.snapshot_phase().1,
        Some(SnapshotFailure::HeldBound),
        "the attempt failed"
    );
    // Released in order as without a snapshot: nothing lost, nothing held.
    assert!(!f.recovering());
    assert_eq!(f.counters().channel_messages_lost, 0);
    assert_eq!(f.hold_usage().0, 0);
}

/// R5 Pace: a server whose `G` is always a few messages behind the lines
/// leaves a hole after every snapshot that no line fills; each is declared
/// lost and asks for another snapshot. The attempts follow each other no
/// faster than the backoff from the previous start (1, 2, 4, 8 s ...),
/// however quickly each one ends; 60 s without needing one brings the
/// backoff back to 1 s.
#[test]
fn a_snapshot_loop_keeps_its_pace() {
    let mut f = feed();
    let mut seq = 100u64;
    f.on_datagram(
        0,
        &packet(seq, &[add(1, "AAPL", 1, true, 5, 1_000_000)]),
        T0,
    );
    let mut starts = Vec::new();
    let end = T0 + 20_000 * MS;
    let mut now = T0;
    while now < end {
        f.handle_timeout(now);
        if f.poll_snapshot_start(now) {
            starts.push((now - T0) / MS);
            // The lines move on while the snapshot runs.
            seq += 5;
            f.on_datagram(
                0,
                &packet(seq, &[add(1, "AAPL", seq, true, 1, 1_000_000)]),
                now,
            );
            // `G` 3 behind: a hole no line fills.
            f.on_snapshot(seq - 3, &blocks(&[]), now + MS).unwrap();
        }
        now += MS;
    }
    assert_eq!(starts, [0, 1_000, 3_000, 7_000, 15_000], "start times (ms)");
    let c = &f.counters().recovery;
    assert_eq!(c.snapshots_applied, 5);
    assert_eq!(f.counters().channel_messages_lost, 5 * 3);

    // A snapshot that leaves no hole, then 60 s without need: back to 1 s.
    let (SnapshotPhase::Wanted { not_before }, _) = f.snapshot_phase() else {
        panic!("a snapshot is wanted: {:?}", f.snapshot_phase());
    };
    assert_eq!(not_before, T0 + 31_000 * MS, "16 s after the last start");
    assert!(f.poll_snapshot_start(not_before));
    f.on_snapshot(seq + 1, &blocks(&[]), not_before + MS)
        .unwrap();
    assert_eq!(f.snapshot_phase().0, SnapshotPhase::Idle);
    let later = not_before + 61_000 * MS;
    seq += 1;
    // A lost hole 61 s later: wanted at once, and the next after 1 s.
    f.on_datagram(
        0,
        &packet(seq + 2, &[add(1, "AAPL", 9, true, 1, 1_000_000)]),
        later,
    );
    f.handle_timeout(later + 2 * MS);
    assert_eq!(
        f.snapshot_phase().0,
        SnapshotPhase::Wanted {
            not_before: later + MS
        },
        "wanted when the hole was declared, its deadline"
    );
    assert!(f.poll_snapshot_start(later + 2 * MS));
    f.on_snapshot_failed(SnapshotFailure::Refused, later + 3 * MS);
    assert_eq!(
        f.snapshot_phase().0,
        SnapshotPhase::Wanted {
            not_before: later + 2 * MS + 1_000 * MS
        }
    );
}

/// R5: a `G` `max_channel_jump` or more below the first held datagram is
/// implausible too, and so is one that far beyond the furthest held one
/// (not merely beyond `next`).
#[test]
fn an_implausible_end_of_snapshot_is_refused() {
    let mut s = FeedSettings::for_venue(VenueKind::NasdaqItch);
    s.recovery.snapshot = true;
    s.max_channel_jump = 1_000;
    let mut f = Feed::new(s, 2);
    f.on_datagram(
        0,
        &packet(5_000, &[add(1, "AAPL", 1, true, 5, 1_000_000)]),
        T0,
    );
    assert!(f.poll_snapshot_start(T0));
    let held = packet(5_900, &[add(1, "AAPL", 2, true, 5, 1_000_000)]);
    assert_eq!(f.on_datagram(0, &held, T0 + MS), DatagramOutcome::Held);
    // 5,901 + 999 is believed; 5,901 + 1,000 is not.
    assert_eq!(
        f.on_snapshot(6_901, &blocks(&[]), T0 + 2 * MS),
        Err(SnapshotFailure::Implausible)
    );
    assert!(f.poll_snapshot_start(T0 + 1_000 * MS));
    let held = packet(5_950, &[add(1, "AAPL", 3, true, 5, 1_000_000)]);
    f.on_datagram(0, &held, T0 + 1_001 * MS);
    assert_eq!(
        f.on_snapshot(4_900, &blocks(&[]), T0 + 1_002 * MS),
        Err(SnapshotFailure::Implausible),
        "1,000 below the first held (5,900)"
    );
    assert_eq!(f.counters().recovery.snapshots_applied, 0);
    assert!(f.poll_snapshot_start(T0 + 3_002 * MS));
    let held = packet(5_960, &[add(1, "AAPL", 4, true, 5, 1_000_000)]);
    f.on_datagram(0, &held, T0 + 3_003 * MS);
    f.on_snapshot(6_959, &blocks(&[]), T0 + 3_004 * MS).unwrap();
    assert_eq!(f.counters().recovery.snapshots_applied, 1);
}

/// R5: the datagrams held during a snapshot are bounded in bytes
/// (`snapshot.hold_mib`) as well as in number; past it the attempt fails
/// and what was held is processed as without a snapshot.
#[test]
fn the_held_bytes_bound_fails_the_attempt() {
    let mut s = FeedSettings::for_venue(VenueKind::NasdaqItch);
    s.recovery.snapshot = true;
    s.recovery.snapshot_hold_bytes = 64 << 10;
    let mut f = Feed::new(s, 2);
    f.on_datagram(0, &packet(10, &[add(1, "AAPL", 1, true, 5, 1_000_000)]), T0);
    assert!(f.poll_snapshot_start(T0));
    let mut i = 0u64;
    while f.snapshot_phase().1.is_none() {
        i += 1;
        assert!(i < 10_000, "the bound never failed the attempt");
        let msgs: Vec<Message> = (0..20)
            .map(|k| add(1, "AAPL", 100 + i * 20 + k, true, 1, 1_000_000))
            .collect();
        f.on_datagram(0, &packet(11 + (i - 1) * 20, &msgs), T0 + 1);
    }
    assert_eq!(f.snapshot_phase().1, Some(SnapshotFailure::HeldBound));
    let msgs: Vec<Message> = (0..20)
        .map(|k| add(1, "AAPL", k, true, 1, 1_000_000))
        .collect();
    let len = packet(11, &msgs).len();
    // The bytes and a small entry per datagram count, nothing else.
    let i = i as usize;
    assert!(
        (i - 1) * len < 64 << 10 && i * (len + 128) >= 64 << 10,
        "failed at packet {i} of {len} bytes"
    );
    assert_eq!(f.hold_usage().0, 0, "released as without a snapshot");
}

/// R2 `max_hole_ms`: a stranger's datagram of the current session planted
/// 3,000 messages ahead opens a hole that the lines keep filling in part
/// (each filling moves a re-requesting hole's deadline). Whatever the
/// progress, the hole is declared lost `max_hole_ms` (2 s) after it
/// opened: the feed stops answering `recovering`, its books are no longer
/// trusted (`channel_gap`, so the planted order is never answered `OK`),
/// and a snapshot is asked for.
#[test]
fn a_planted_datagram_holds_the_feed_at_most_max_hole_ms() {
    let mut s = FeedSettings::for_venue(VenueKind::NasdaqItch);
    s.recovery.snapshot = true;
    s.recovery.rerequest_servers = 1;
    let mut f = Feed::new(s, 2);
    f.on_datagram(0, &packet(1, &[add(1, "AAPL", 1, true, 5, 1_000_000)]), T0);
    let planted = packet(3_001, &[add(1, "AAPL", 666, true, 100, 1_005_000)]);
    assert_eq!(f.on_datagram(1, &planted, T0 + MS), DatagramOutcome::Held);
    let mut seq = 2u64;
    let mut now = T0 + MS;
    while now < T0 + 2_500 * MS {
        now += MS;
        f.handle_timeout(now);
        while f.poll_request().is_some() {}
        let real = packet(seq, &[add(1, "AAPL", 1_000 + seq, false, 1, 1_100_000)]);
        f.on_datagram(0, &real, now);
        seq += 1;
        if now == T0 + 2_001 * MS {
            assert!(f.recovering(), "open through its deadline");
            assert_eq!(f.counters().recovery.holes_lost, 0);
        }
    }
    assert!(!f.recovering());
    assert_eq!(f.counters().recovery.holes_lost, 1);
    assert_eq!(
        f.symbol_summary(sym("AAPL")).unwrap().suspect,
        Some(SuspectCause::ChannelGap)
    );
    assert!(matches!(f.snapshot_phase().0, SnapshotPhase::Wanted { .. }));
}

/// R5: a snapshot that names one stock by two locates has two books for
/// it and no way to tell which is the stock's: counted
/// (`locate_conflicts`) and the symbol is not trusted, instead of silently
/// taking the later locate's book.
#[test]
fn a_stock_named_by_two_locates_in_a_snapshot_is_not_trusted() {
    let mut f = feed();
    f.on_datagram(
        0,
        &packet(100, &[add(3, "MSFT", 1, true, 5, 4_000_000)]),
        T0,
    );
    assert!(f.poll_snapshot_start(T0));
    let snap = blocks(&[
        add(1, "AAPL", 10, true, 5, 1_000_000),
        add(2, "AAPL", 11, true, 7, 1_010_000),
        add(3, "MSFT", 12, true, 9, 4_000_000),
    ]);
    f.on_snapshot(101, &snap, T0 + MS).unwrap();
    assert_eq!(f.counters().locate_conflicts, 1);
    let a = f.symbol_summary(sym("AAPL")).unwrap();
    assert!(a.suspect.is_some(), "{a:?}");
    assert_eq!(f.symbol_summary(sym("MSFT")).unwrap().suspect, None);
}
