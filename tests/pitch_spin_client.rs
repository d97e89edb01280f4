//! recovery.md R5c end to end in process: the Spin client (`net::spin`)
//! against the simulator's Spin Servers on loopback, its outcomes handed
//! to a `cboe-pitch` feed of two units that joined late, as the daemon's
//! feed thread does (`daemon::feeds::FeedWriter::drive_spin`). Hostile
//! servers (bytes that do not parse, an order count that lies) fail the
//! attempt and nothing is applied. Waits are bounded safety nets, never
//! assertions.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

#[path = "common/pitch.rs"]
mod pitch;

use pitch::{add, dgram, status, sym};
use tickgate::feed::engine::{DatagramOutcome, Feed, SnapshotFailure, SnapshotPhase};
use tickgate::feed::settings::{ChannelSet, FeedSettings, VenueKind};
use tickgate::feed::view::SuspectCause;
use tickgate::net::spin::{Outcome, SpinClient, SpinOptions as ClientOptions};
use tickgate::sim::servers::{SpinImage, SpinOptions, SpinServer, SpinSource};
use tickgate::venue::cboe_pitch::messages::Message;
use tickgate::venue::cboe_pitch::session::{
    encode_block, Login, LoginStatus, SessionMessage, SpinStatus,
};

const PATIENCE: Duration = Duration::from_secs(20);
const MS: i64 = 1_000_000;
/// $1.00 in 10^-9.
const USD: i64 = 1_000_000_000;

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn login() -> Login {
    Login::new("0006", "MKDA", "secret").unwrap()
}

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// Units 1 and 2 have Spin Servers and join late: unit 1 at 100 (AAA),
/// unit 2 at 500 (ZZZ).
fn late_units(t: i64) -> Feed {
    let mut s = FeedSettings::for_venue(VenueKind::CboePitch);
    s.recovery.spin_units = [1u8, 2].into_iter().collect::<ChannelSet>();
    let mut f = Feed::new(s, 1);
    let d1 = dgram(
        1,
        100,
        &[
            Message::Time { seconds: 34_200 },
            add(1, b'B', 100, "AAA", 20 * USD),
        ],
    );
    assert_eq!(f.on_datagram(0, &d1, t), DatagramOutcome::Applied);
    let d2 = dgram(
        2,
        500,
        &[
            Message::Time { seconds: 34_200 },
            add(7, b'S', 30, "ZZZ", 9 * USD),
        ],
    );
    assert_eq!(f.on_datagram(0, &d2, t + MS), DatagramOutcome::Applied);
    f
}

fn summary(f: &Feed, s: &str) -> tickgate::feed::SymbolSummary {
    f.symbol_summary(sym(s)).unwrap()
}

fn bid(f: &Feed, s: &str) -> Option<(i64, u64)> {
    summary(f, s).bid.map(|b| (b.px, b.qty))
}

fn ask(f: &Feed, s: &str) -> Option<(i64, u64)> {
    summary(f, s).ask.map(|b| (b.px, b.qty))
}

fn server(image: SpinImage) -> SpinServer {
    let source: SpinSource = Arc::new(move || Some(image.clone()));
    SpinServer::spawn(loopback(), source, SpinOptions::new(login())).unwrap()
}

/// What the feed thread does: every outcome goes to the feed; then every
/// unit the feed asks for is spun from its server, whatever other units'
/// attempts are running (R5c: attempts of different units may run at the
/// same time). Until `units` outcomes were handed over; they are returned
/// in the order they ended.
fn drive(
    f: &mut Feed,
    client: &SpinClient,
    servers: &[(u8, SocketAddr)],
    units: usize,
) -> Vec<(u8, Result<(), SnapshotFailure>)> {
    let mut done = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while done.len() < units && Instant::now() < deadline {
        let now = now_ns();
        while let Some((unit, outcome)) = client.try_outcome() {
            let result = match outcome {
                Outcome::Done(s) => f.units().on_image(unit, s.next, &s.blocks, s.end_at),
                Outcome::Failed { why, .. } => {
                    f.units().on_image_failed(unit, why, now);
                    Err(why)
                }
            };
            done.push((unit, result));
        }
        while let Some((unit, n0)) = f
            .units()
            .poll_image_start_except(now, |u| client.running(u))
        {
            let &(_, addr) = servers.iter().find(|(u, _)| *u == unit).unwrap();
            assert!(client.start(unit, addr, n0));
            assert!(client.running(unit));
            assert!(!client.start(unit, addr, n0), "one attempt a unit");
        }
        thread::sleep(Duration::from_millis(5));
    }
    done
}

fn units_of(servers: &[(u8, SocketAddr)]) -> Vec<u8> {
    servers.iter().map(|(u, _)| *u).collect()
}

#[test]
fn each_late_unit_is_spun_from_its_own_server_and_quotes_its_picture() {
    let t = now_ns();
    let mut f = late_units(t);
    assert_eq!(summary(&f, "AAA").suspect, Some(SuspectCause::NoSnapshot));
    assert_eq!(summary(&f, "ZZZ").suspect, Some(SuspectCause::NoSnapshot));
    // Unit 1's server reflects up to 101 (order 1, and AAA's ask, order 2);
    // unit 2's up to 501 (ZZZ's ask, and a bid the feed never saw).
    let s1 = server(SpinImage {
        sequence: 101,
        messages: vec![
            Message::Time { seconds: 34_200 },
            status("AAA", b'T'),
            add(1, b'B', 100, "AAA", 20 * USD),
            add(2, b'S', 60, "AAA", 21 * USD),
        ],
    });
    let s2 = server(SpinImage {
        sequence: 501,
        messages: vec![
            Message::Time { seconds: 34_200 },
            status("ZZZ", b'H'),
            add(7, b'S', 30, "ZZZ", 9 * USD),
            add(8, b'B', 15, "ZZZ", 8 * USD),
        ],
    });
    let servers = [(1, s1.local_addr()), (2, s2.local_addr())];
    let client =
        SpinClient::spawn("pitch", ClientOptions::new(login()), &units_of(&servers)).unwrap();
    let mut done = drive(&mut f, &client, &servers, 2);
    done.sort_by_key(|d| d.0);
    assert_eq!(done, [(1, Ok(())), (2, Ok(()))]);

    assert_eq!(bid(&f, "AAA"), Some((20 * USD, 100)));
    assert_eq!(ask(&f, "AAA"), Some((21 * USD, 60)));
    assert_eq!(summary(&f, "AAA").suspect, None);
    assert_eq!(summary(&f, "AAA").last_seq, Some(101));
    assert_eq!(bid(&f, "ZZZ"), Some((8 * USD, 15)));
    assert_eq!(ask(&f, "ZZZ"), Some((9 * USD, 30)));
    assert!(summary(&f, "ZZZ").halted, "the spin's Trading Status");
    assert_eq!(summary(&f, "ZZZ").last_seq, Some(501));
    assert_eq!(f.recovery().image_phase(1).0, SnapshotPhase::Idle);
    assert_eq!(f.recovery().image_phase(2).0, SnapshotPhase::Idle);
    // The units continue from S + 1.
    let d = dgram(1, 102, &[add(3, b'B', 5, "AAA", 205 * USD / 10)]);
    assert_eq!(f.on_datagram(0, &d, now_ns()), DatagramOutcome::Applied);
    assert_eq!(bid(&f, "AAA"), Some((205 * USD / 10, 5)));
    let (c1, c2) = (s1.stop(), s2.stop());
    assert_eq!((c1.spins_sent, c2.spins_sent), (1, 1));
}

/// A one-connection server: reads the Login, then sends `script` and
/// keeps the connection open until the client closes it.
fn hostile(script: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let _ = s.set_read_timeout(Some(PATIENCE));
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
        let _ = s.write_all(&script);
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    addr
}

fn block(msgs: &[SessionMessage], out: &mut Vec<u8>) {
    encode_block(msgs, out).unwrap();
}

/// Logged in, Spin Image Available 101, accepted with `order_count`.
fn accepted(order_count: u32) -> Vec<u8> {
    let mut out = Vec::new();
    block(
        &[SessionMessage::LoginResponse(LoginStatus::Accepted)],
        &mut out,
    );
    block(
        &[SessionMessage::SpinImageAvailable { sequence: 101 }],
        &mut out,
    );
    block(
        &[SessionMessage::SpinResponse {
            sequence: 101,
            order_count,
            status: SpinStatus::Accepted,
        }],
        &mut out,
    );
    out
}

#[test]
fn a_hostile_server_fails_the_attempt_and_nothing_is_applied() {
    // An order count that lies: three announced, two sent.
    let mut lying = accepted(3);
    block(
        &[
            SessionMessage::Pitch(add(1, b'B', 999, "AAA", 50 * USD)),
            SessionMessage::Pitch(add(4, b'B', 10, "CCC", 5 * USD)),
        ],
        &mut lying,
    );
    block(
        &[SessionMessage::SpinFinished { sequence: 101 }],
        &mut lying,
    );
    // Garbage once the spin is under way: a block whose Length is
    // shorter than its header.
    let mut garbage = accepted(1);
    garbage.extend_from_slice(&[3, 0, 1, 0, 0, 0, 0, 0, 0xff, 0xff]);

    for (name, script) in [("lying order count", lying), ("garbage", garbage)] {
        let t = now_ns();
        let mut f = late_units(t);
        let servers = [(1, hostile(script)), (2, hostile(Vec::new()))];
        let client =
            SpinClient::spawn("pitch", ClientOptions::new(login()), &units_of(&servers)).unwrap();
        // Unit 2's server never answers: its attempt is still running
        // when unit 1's has failed.
        let done = drive(&mut f, &client, &servers, 1);
        assert_eq!(done, [(1, Err(SnapshotFailure::Malformed))], "{name}");
        assert!(
            client.running(2),
            "{name}: unit 2's attempt at the same time"
        );
        assert!(
            matches!(f.recovery().image_phase(2).0, SnapshotPhase::Running { .. }),
            "{name}"
        );
        assert_eq!(bid(&f, "AAA"), Some((20 * USD, 100)), "{name}");
        assert_eq!(ask(&f, "AAA"), None, "{name}");
        assert_eq!(
            summary(&f, "AAA").suspect,
            Some(SuspectCause::NoSnapshot),
            "{name}"
        );
        assert!(f.symbol_summary(sym("CCC")).is_none(), "{name}");
        assert!(
            matches!(
                f.recovery().image_phase(1),
                (
                    SnapshotPhase::Wanted { .. },
                    Some(SnapshotFailure::Malformed)
                )
            ),
            "{name}: retried at the pace"
        );
    }
}
