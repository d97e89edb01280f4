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

fn session() -> SessionId {
    SessionId::parse("000010059B").unwrap()
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
    f.on_snapshot(session(), 102, &snap, g_at).unwrap();
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
        f.on_snapshot(session(), 60, &bad, T0 + 2 * MS),
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
    assert_eq!(
        f.snapshot_phase(),
        (
            SnapshotPhase::Wanted {
                not_before: T0 + 2 * MS + 1_000 * MS
            },
            Some(SnapshotFailure::Malformed)
        )
    );
    // Backoff doubles: 1 s, then 2 s.
    assert!(!f.poll_snapshot_start(T0 + 1_000 * MS));
    assert!(f.poll_snapshot_start(T0 + 2 * MS + 1_000 * MS));
    f.on_snapshot_failed(SnapshotFailure::Refused, T0 + 1_100 * MS);
    assert_eq!(
        f.snapshot_phase().0,
        SnapshotPhase::Wanted {
            not_before: T0 + 3_100 * MS
        }
    );
    let c = &f.counters().recovery;
    assert_eq!((c.snapshots_started, c.snapshots_applied), (2, 0));
    assert_eq!(c.snapshots_failed.iter().sum::<u64>(), 2);
    // Another session's snapshot is not applied either.
    assert!(f.poll_snapshot_start(T0 + 3_100 * MS));
    let other = SessionId::parse("000010059C").unwrap();
    assert_eq!(
        f.on_snapshot(other, 60, &blocks(&[]), T0 + 3_200 * MS),
        Err(SnapshotFailure::OtherSession)
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
        session(),
        4,
        &blocks(&[add(1, "AAPL", 1, true, 5, 1_000_000)]),
        T0 + 4 * MS,
    )
    .unwrap();
    assert_eq!(f.symbol_summary(sym("AAPL")).unwrap().suspect, None);
}

/// R5 step 3 with R2's open time: a hole left after `G` opened when its
/// first held datagram arrived; if its deadline passed during the
/// snapshot, it is declared at once and a new snapshot is asked for.
#[test]
fn a_hole_after_g_keeps_its_open_time() {
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
    f.on_snapshot(session(), 102, &snap, T0 + 10 * MS).unwrap();
    assert!(f.recovering());
    f.handle_timeout(T0 + 10 * MS + 1);
    assert!(!f.recovering());
    assert_eq!(f.counters().channel_messages_lost, 1);
    assert_eq!(
        f.symbol_summary(sym("MSFT")).unwrap().suspect,
        Some(SuspectCause::ChannelGap)
    );
    assert!(matches!(f.snapshot_phase().0, SnapshotPhase::Wanted { .. }));
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
