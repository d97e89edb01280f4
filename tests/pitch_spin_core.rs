//! recovery.md R5c in the core: a `cboe-pitch` feed of two units with Spin
//! Servers. A unit that joins late wants a spin through its own machines;
//! the spin, handed to the feed, rebuilds that unit only and the held
//! datagrams continue it; a failed attempt applies nothing and the next
//! waits for the unit's pace.

#[path = "common/pitch.rs"]
mod pitch;

use pitch::{add, dgram, status, sym};
use tickgate::feed::engine::{DatagramOutcome, Feed, SnapshotFailure, SnapshotPhase};
use tickgate::feed::recovery::image::{ImageSession, SessionLimits, SessionOutcome};
use tickgate::feed::settings::{ChannelSet, FeedSettings, VenueKind};
use tickgate::feed::view::SuspectCause;
use tickgate::venue::cboe_pitch::messages::{encode_to_vec, Message};
use tickgate::venue::cboe_pitch::session::{
    encode_block, Login, LoginStatus, SessionMessage, SpinStatus,
};
use tickgate::venue::cboe_pitch::spin::SpinCodec;

/// 2026-12-01 09:30 New York.
const T0: i64 = 1_796_135_400_000_020_000;
const MS: i64 = 1_000_000;
const S: i64 = 1_000_000_000;
/// $1.00 in 10^-9.
const USD: i64 = 1_000_000_000;

/// A spin's messages as the feed takes them: each a u16 big-endian
/// length, then the PITCH message (Length byte first).
fn blocks(msgs: &[Message]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        let raw = encode_to_vec(m).unwrap();
        out.extend_from_slice(&(raw.len() as u16).to_be_bytes());
        out.extend_from_slice(&raw);
    }
    out
}

/// Units 1 and 2 have Spin Servers. Unit 2 is received from its
/// sequence 1 (ZZZ bid $5); unit 1 joins late at 100 (AAA bid $20).
fn two_units() -> Feed {
    let mut s = FeedSettings::for_venue(VenueKind::CboePitch);
    s.recovery.spin_units = [1u8, 2].into_iter().collect::<ChannelSet>();
    let mut f = Feed::new(s, 2);
    let unit2 = dgram(
        2,
        1,
        &[
            Message::Time { seconds: 34_200 },
            add(500, b'B', 10, "ZZZ", 5 * USD),
        ],
    );
    assert_eq!(f.on_datagram(0, &unit2, T0), DatagramOutcome::Applied);
    let late = dgram(
        1,
        100,
        &[
            Message::Time { seconds: 34_200 },
            add(1, b'B', 100, "AAA", 20 * USD),
        ],
    );
    assert_eq!(f.on_datagram(0, &late, T0 + MS), DatagramOutcome::Applied);
    f
}

fn bid(f: &Feed, s: &str) -> Option<(i64, u64)> {
    let q = f.symbol_summary(sym(s)).unwrap();
    q.bid.map(|b| (b.px, b.qty))
}

fn ask(f: &Feed, s: &str) -> Option<(i64, u64)> {
    let q = f.symbol_summary(sym(s)).unwrap();
    q.ask.map(|b| (b.px, b.qty))
}

fn suspect(f: &Feed, s: &str) -> Option<SuspectCause> {
    f.symbol_summary(sym(s)).unwrap().suspect
}

#[test]
fn a_late_unit_is_spun_alone_and_its_held_datagrams_continue_the_spin() {
    let mut f = two_units();
    assert_eq!(suspect(&f, "AAA"), Some(SuspectCause::NoSnapshot));
    assert_eq!(suspect(&f, "ZZZ"), None, "unit 2 from its sequence 1");
    let zzz = f.symbol_summary(sym("ZZZ")).unwrap();
    assert_eq!(
        f.recovery().image_phase(2).0,
        SnapshotPhase::Idle,
        "unit 2 wants none"
    );

    // The late unit's attempt starts; n0 is its next (102).
    let start = T0 + 2 * MS;
    assert_eq!(f.units().poll_image_start(start), Some((1, 102)));
    assert_eq!(
        f.units().poll_image_start(start),
        None,
        "one attempt a unit"
    );
    assert_eq!(
        f.recovery().image_phase(1).0,
        SnapshotPhase::Running { since: start }
    );
    // Held while the attempt runs: 102 and 103 (one beyond S).
    let d102 = dgram(1, 102, &[add(2, b'S', 50, "AAA", 21 * USD)]);
    assert_eq!(f.on_datagram(0, &d102, start + MS), DatagramOutcome::Held);
    let d103 = dgram(1, 103, &[add(3, b'S', 70, "BBB", 31 * USD)]);
    assert_eq!(
        f.on_datagram(0, &d103, start + 2 * MS),
        DatagramOutcome::Held
    );
    assert_eq!(
        suspect(&f, "AAA"),
        Some(SuspectCause::NoSnapshot),
        "not yet"
    );

    // The spin reflects the unit up to S = 102: its own Time, a Trading
    // Status halting BBB, and the three live orders.
    let spin = blocks(&[
        Message::Time { seconds: 34_201 },
        status("BBB", b'H'),
        add(1, b'B', 100, "AAA", 20 * USD),
        add(2, b'S', 50, "AAA", 21 * USD),
        add(9, b'B', 40, "BBB", 30 * USD),
    ]);
    let end = start + 3 * MS;
    assert_eq!(f.units().on_image(1, 103, &spin, end), Ok(()));
    assert_eq!(f.recovery().image_phase(1).0, SnapshotPhase::Idle);

    // Unit 1: the spin's books, then 103 (102 was skipped: the spin holds it).
    assert_eq!(bid(&f, "AAA"), Some((20 * USD, 100)));
    assert_eq!(ask(&f, "AAA"), Some((21 * USD, 50)), "order 2 once");
    assert_eq!(suspect(&f, "AAA"), None);
    let aaa = f.symbol_summary(sym("AAA")).unwrap();
    assert_eq!(aaa.last_seq, Some(102), "seq = S");
    assert_eq!(bid(&f, "BBB"), Some((30 * USD, 40)));
    assert_eq!(ask(&f, "BBB"), Some((31 * USD, 70)), "held 103 applied");
    assert!(f.symbol_summary(sym("BBB")).unwrap().halted);
    assert_eq!(f.counters().live_orders, 5, "four of unit 1, one of unit 2");
    assert_eq!(f.counters().spins_without_status, 0, "BBB's");

    // Unit 2 untouched.
    let after = f.symbol_summary(sym("ZZZ")).unwrap();
    assert_eq!(
        (
            after.bid,
            after.ask,
            after.last_seq,
            after.suspect,
            after.halted
        ),
        (zzz.bid, zzz.ask, zzz.last_seq, zzz.suspect, zzz.halted)
    );
    // And continues.
    let d2 = dgram(2, 3, &[add(501, b'B', 20, "ZZZ", 6 * USD)]);
    assert_eq!(f.on_datagram(0, &d2, end + MS), DatagramOutcome::Applied);
    assert_eq!(bid(&f, "ZZZ"), Some((6 * USD, 20)));
    assert_eq!(
        f.units().poll_image_start(end + 10 * S),
        None,
        "nothing wanted"
    );
}

/// The bytes a Spin Server sends for a spin of `sequence` announcing
/// `order_count` Add Orders.
fn server_bytes(sequence: u32, order_count: u32, msgs: &[Message]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_block(
        &[SessionMessage::LoginResponse(LoginStatus::Accepted)],
        &mut out,
    )
    .unwrap();
    encode_block(&[SessionMessage::SpinImageAvailable { sequence }], &mut out).unwrap();
    encode_block(
        &[SessionMessage::SpinResponse {
            sequence,
            order_count,
            status: SpinStatus::Accepted,
        }],
        &mut out,
    )
    .unwrap();
    let pitch: Vec<SessionMessage> = msgs.iter().map(|&m| SessionMessage::Pitch(m)).collect();
    encode_block(&pitch, &mut out).unwrap();
    encode_block(&[SessionMessage::SpinFinished { sequence }], &mut out).unwrap();
    out
}

fn attempt(n0: u64, bytes: &[u8]) -> SessionOutcome {
    let login = Login::new("0006", "MKDA", "secret").unwrap();
    let limits = SessionLimits {
        silence_ns: 15 * S,
        whole_ns: 30 * S,
        heartbeat_ns: S,
        max_bytes: 1 << 20,
    };
    let mut out = Vec::new();
    let mut session = ImageSession::start(SpinCodec::new(login, n0), limits, 0, &mut out).unwrap();
    session.on_bytes(bytes, 1, &mut out).expect("an outcome")
}

#[test]
fn a_spin_whose_order_count_lies_fails_applies_nothing_and_is_retried_at_the_pace() {
    let mut f = two_units();
    let start = T0 + 2 * MS;
    let (unit, n0) = f.units().poll_image_start(start).unwrap();
    assert_eq!((unit, n0), (1, 102));
    let d102 = dgram(1, 102, &[add(2, b'S', 50, "AAA", 21 * USD)]);
    assert_eq!(f.on_datagram(0, &d102, start + MS), DatagramOutcome::Held);

    // Three Add Orders announced, two sent.
    let msgs = [
        add(1, b'B', 100, "AAA", 25 * USD),
        add(8, b'B', 10, "CCC", 9 * USD),
    ];
    let why = match attempt(n0, &server_bytes(101, 3, &msgs)) {
        SessionOutcome::Failed(why, _) => why,
        other => panic!("{other:?}"),
    };
    assert_eq!(why, SnapshotFailure::Malformed);
    f.units().on_image_failed(unit, why, start + 2 * MS);

    // Nothing of it: AAA keeps its live book and its cause; CCC unknown.
    assert_eq!(bid(&f, "AAA"), Some((20 * USD, 100)));
    assert_eq!(ask(&f, "AAA"), Some((21 * USD, 50)), "held 102 processed");
    assert_eq!(suspect(&f, "AAA"), Some(SuspectCause::NoSnapshot));
    assert!(f.symbol_summary(sym("CCC")).is_none());
    assert_eq!(
        f.recovery().image_phase(1),
        (
            SnapshotPhase::Wanted {
                not_before: start + S
            },
            Some(SnapshotFailure::Malformed)
        )
    );
    // Pace: 1 s after the failed attempt's start, not sooner.
    assert_eq!(f.units().poll_image_start(start + S - 1), None);
    assert_eq!(f.units().poll_image_start(start + S), Some((1, 103)));

    // A spin that does not parse as the feed validates it: also nothing.
    let mut bad = blocks(&[add(1, b'B', 100, "AAA", 25 * USD)]);
    bad[2] = 9; // the Length byte disagrees with the block's length
    assert_eq!(
        f.units().on_image(1, 103, &bad, start + S + MS),
        Err(SnapshotFailure::Malformed)
    );
    assert_eq!(bid(&f, "AAA"), Some((20 * USD, 100)));
    assert_eq!(suspect(&f, "AAA"), Some(SuspectCause::NoSnapshot));
    // An implausible S (far beyond anything held) is refused too.
    assert_eq!(f.units().poll_image_start(start + 3 * S), Some((1, 103)));
    let spin = blocks(&[add(1, b'B', 100, "AAA", 25 * USD)]);
    assert_eq!(
        f.units().on_image(1, 5_000_000_000, &spin, start + 3 * S),
        Err(SnapshotFailure::Implausible)
    );
    assert_eq!(bid(&f, "AAA"), Some((20 * USD, 100)));
}

#[test]
fn a_book_error_of_a_unit_received_from_its_start_wants_a_spin_that_clears_its_gap() {
    let mut f = two_units();
    assert_eq!(f.recovery().image_phase(2).0, SnapshotPhase::Idle);
    // Order 500 added again while live: a duplicate id (venues.md), both
    // symbols `gap`.
    let t = T0 + 2 * MS;
    let dup = dgram(2, 3, &[add(500, b'B', 10, "ZZZ", 5 * USD)]);
    assert_eq!(f.on_datagram(0, &dup, t), DatagramOutcome::Applied);
    assert_eq!(suspect(&f, "ZZZ"), Some(SuspectCause::Gap));
    assert_eq!(
        f.recovery().image_phase(2).0,
        SnapshotPhase::Wanted { not_before: t }
    );
    // Unit 1 joined late earlier: it goes first, then unit 2.
    assert_eq!(f.units().poll_image_start(t), Some((1, 102)));
    f.units().on_image_failed(1, SnapshotFailure::Refused, t);
    assert_eq!(f.units().poll_image_start(t), Some((2, 4)));
    let spin = blocks(&[
        Message::Time { seconds: 34_200 },
        add(500, b'B', 10, "ZZZ", 5 * USD),
    ]);
    assert_eq!(f.units().on_image(2, 4, &spin, t + MS), Ok(()));
    assert_eq!(suspect(&f, "ZZZ"), None, "the spin made the book whole");
    assert_eq!(f.counters().spins_without_status, 1, "no Trading Status");
    assert_eq!(bid(&f, "ZZZ"), Some((5 * USD, 10)));
    assert_eq!(f.recovery().image_phase(2).0, SnapshotPhase::Idle);

    // A Unit Clear that removes live orders wants one too; one on an
    // empty book does not.
    let clear = |seq| dgram(2, seq, &[Message::UnitClear { offset: 0 }]);
    assert_eq!(
        f.on_datagram(0, &clear(4), t + 2 * MS),
        DatagramOutcome::Applied
    );
    assert!(matches!(
        f.recovery().image_phase(2).0,
        SnapshotPhase::Wanted { .. }
    ));
    let mut s = FeedSettings::for_venue(VenueKind::CboePitch);
    s.recovery.spin_units = [2u8].into_iter().collect::<ChannelSet>();
    let mut g = Feed::new(s, 1);
    let d = dgram(2, 1, &[Message::Time { seconds: 34_200 }]);
    assert_eq!(g.on_datagram(0, &d, T0), DatagramOutcome::Applied);
    assert_eq!(
        g.on_datagram(0, &clear(2), T0 + MS),
        DatagramOutcome::Applied
    );
    assert_eq!(g.recovery().image_phase(2).0, SnapshotPhase::Idle);
}

/// Units 1 and 2 both join late (1 at 100, 2 at 500).
fn two_late_units() -> Feed {
    let mut s = FeedSettings::for_venue(VenueKind::CboePitch);
    s.recovery.spin_units = [1u8, 2].into_iter().collect::<ChannelSet>();
    let mut f = Feed::new(s, 1);
    let d1 = dgram(1, 100, &[add(1, b'B', 100, "AAA", 20 * USD)]);
    assert_eq!(f.on_datagram(0, &d1, T0), DatagramOutcome::Applied);
    let d2 = dgram(2, 500, &[add(7, b'S', 30, "ZZZ", 9 * USD)]);
    assert_eq!(f.on_datagram(0, &d2, T0 + MS), DatagramOutcome::Applied);
    f
}

#[test]
fn session_in_use_does_not_count_for_the_pace_and_waits_for_another_attempt() {
    let mut f = two_late_units();
    let t = T0 + 2 * MS;
    assert_eq!(f.units().poll_image_start(t), Some((1, 101)));
    f.units().on_image_session_in_use(1, t + MS);
    assert_eq!(
        f.recovery().image_phase(1),
        (
            SnapshotPhase::Wanted { not_before: t + S },
            Some(SnapshotFailure::LoginRejected)
        ),
        "at the latest one backoff after the start"
    );
    // Unit 2's attempt ends: unit 1 may try again at once.
    assert_eq!(f.units().poll_image_start(t + 2 * MS), Some((2, 501)));
    assert_eq!(f.units().poll_image_start(t + 2 * MS), None, "unit 1 waits");
    f.units()
        .on_image_failed(2, SnapshotFailure::Refused, t + 3 * MS);
    assert_eq!(
        f.recovery().image_phase(1).0,
        SnapshotPhase::Wanted {
            not_before: t + 3 * MS
        }
    );
    assert_eq!(f.units().poll_image_start(t + 3 * MS), Some((1, 101)));
    // The refused attempt did not double the backoff: 1 s from this start.
    f.units()
        .on_image_failed(1, SnapshotFailure::Closed, t + 4 * MS);
    assert_eq!(
        f.recovery().image_phase(1).0,
        SnapshotPhase::Wanted {
            not_before: t + 3 * MS + S
        }
    );
    // Unit 2's failure counted for its own pace: 1 s from its start.
    assert_eq!(
        f.recovery().image_phase(2).0,
        SnapshotPhase::Wanted {
            not_before: t + 2 * MS + S
        }
    );
}

#[test]
fn held_messages_the_spin_reflects_are_skipped_but_set_the_time_base() {
    let mut f = two_units();
    let start = T0 + 2 * MS;
    assert_eq!(f.units().poll_image_start(start), Some((1, 102)));
    // 102 is a Time ten seconds on, 103 an Add the spin reflects, 104 one
    // it does not.
    let d102 = dgram(
        1,
        102,
        &[
            Message::Time { seconds: 34_210 },
            add(2, b'S', 50, "AAA", 21 * USD),
        ],
    );
    assert_eq!(f.on_datagram(0, &d102, start + MS), DatagramOutcome::Held);
    let d104 = dgram(1, 104, &[add(3, b'S', 70, "BBB", 31 * USD)]);
    assert_eq!(
        f.on_datagram(0, &d104, start + 2 * MS),
        DatagramOutcome::Held
    );
    let spin = blocks(&[
        Message::Time { seconds: 34_200 },
        add(1, b'B', 100, "AAA", 20 * USD),
        add(2, b'S', 50, "AAA", 21 * USD),
    ]);
    assert_eq!(f.units().on_image(1, 104, &spin, start + 3 * MS), Ok(()));
    assert_eq!(ask(&f, "AAA"), Some((21 * USD, 50)), "order 2 once");
    assert_eq!(ask(&f, "BBB"), Some((31 * USD, 70)));
    // 09:30:10 New York: the skipped Time's moment, not the spin's.
    let nine_thirty = T0 - 20_000;
    let bbb = f.symbol_summary(sym("BBB")).unwrap();
    assert_eq!(bbb.quote_source_ts, Some(nine_thirty + 10 * S));
    let aaa = f.symbol_summary(sym("AAA")).unwrap();
    assert_eq!(
        aaa.quote_source_ts,
        Some(nine_thirty),
        "the spin's own time"
    );
}

/// R5c step 1 with `grp` set: a hole among the datagrams a spin holds is
/// asked for through the Gap Request Proxy while the spin runs, its
/// messages from the gap line are held with the rest, and no hole is
/// declared during the attempt, however long it takes.
#[test]
fn a_hole_among_a_spins_held_datagrams_is_asked_for_and_not_declared() {
    use tickgate::venue::cboe_pitch::grp::GapRequest;
    use tickgate::venue::refill::AnyRequest;
    use tickgate::venue::LineKind;

    let mut s = FeedSettings::for_venue(VenueKind::CboePitch);
    s.recovery.spin_units = [1u8].into_iter().collect::<ChannelSet>();
    s.recovery.gap_proxy = Some(100);
    let mut f = Feed::new(s, 2);
    f.set_line_kind(1, LineKind::Gap);
    let late = dgram(
        1,
        100,
        &[
            Message::Time { seconds: 34_200 },
            add(1, b'B', 100, "AAA", 20 * USD),
        ],
    );
    assert_eq!(f.on_datagram(0, &late, T0), DatagramOutcome::Applied);
    let start = T0 + MS;
    assert_eq!(f.units().poll_image_start(start), Some((1, 102)));
    // 102 continues; 103 and 104 are missing.
    let d102 = dgram(1, 102, &[add(2, b'S', 50, "AAA", 21 * USD)]);
    assert_eq!(f.on_datagram(0, &d102, start + MS), DatagramOutcome::Held);
    let d105 = dgram(1, 105, &[add(4, b'B', 10, "AAA", 205 * USD / 10)]);
    let opened = start + 2 * MS;
    assert_eq!(f.on_datagram(0, &d105, opened), DatagramOutcome::Held);
    // `gap_hold_us` (1 ms) after the hole opened, one Gap Request.
    let due = opened + MS;
    f.handle_timeout(due - 1);
    assert_eq!(f.units().poll_refill(due - 1), None);
    f.handle_timeout(due);
    let want = GapRequest {
        unit: 1,
        sequence: 103,
        count: 2,
    };
    assert_eq!(
        f.units().poll_refill(due),
        Some((1, AnyRequest::GapProxy(want)))
    );
    assert!(f
        .units()
        .on_refill_response(1, AnyRequest::GapProxy(want), b'A', due));
    // The gap line's answer is held with the rest: nothing applied yet.
    let d103 = dgram(
        1,
        103,
        &[
            add(5, b'S', 5, "AAA", 22 * USD),
            Message::OrderExecuted {
                offset: 0,
                order_id: 5,
                shares: 5,
                execution_id: 1,
            },
        ],
    );
    assert_eq!(f.on_datagram(1, &d103, due + MS), DatagramOutcome::Held);
    assert_eq!(suspect(&f, "AAA"), Some(SuspectCause::NoSnapshot));
    assert_eq!(f.recovery().of(1).unwrap().outstanding(), None, "all held");
    // A long spin: nothing is declared meanwhile.
    for t in 1..20 {
        f.handle_timeout(start + t * S);
    }
    assert_eq!(f.counters().recovery.holes_lost, 0);
    assert!(f.recovering());
    // Spin Finished with S = 101: what was held continues it, the gap
    // line's 103-104 included.
    let spin = blocks(&[
        Message::Time { seconds: 34_200 },
        add(1, b'B', 100, "AAA", 20 * USD),
    ]);
    let end = start + 20 * S;
    assert_eq!(f.units().on_image(1, 102, &spin, end), Ok(()));
    assert!(!f.recovering());
    assert_eq!(suspect(&f, "AAA"), None);
    assert_eq!(bid(&f, "AAA"), Some((205 * USD / 10, 10)), "105's");
    assert_eq!(ask(&f, "AAA"), Some((21 * USD, 50)), "order 5 executed");
    let aaa = f.symbol_summary(sym("AAA")).unwrap();
    assert_eq!(aaa.last_seq, Some(105));
    assert_eq!(f.counters().recovery.holes_lost, 0);
}
