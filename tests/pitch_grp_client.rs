//! tickgate's Gap Request Proxy client (`net::grp`, recovery.md R4c)
//! against the simulator's proxy over loopback TCP: login, requests and
//! their responses, refusals, and a proxy that goes away and comes back.
//! Waits are a safety net (`PATIENCE`), never an assertion: the tests
//! assert the order of events and the counts.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickgate::net::grp::{DownReason, GrpClient, GrpClientEvent, GrpOptions};
use tickgate::sim::live::{McastSender, SenderOptions};
use tickgate::sim::pitch_flow::PitchFlow;
use tickgate::sim::seeded::SplitMix64;
use tickgate::sim::servers::{GrpOptions as ServerOptions, GrpServer, PitchHistory};
use tickgate::sim::venue_sim::VenueFlow;
use tickgate::venue::cboe_pitch::frame::Datagram;
use tickgate::venue::cboe_pitch::grp::GapRequest;
use tickgate::venue::cboe_pitch::grp_conn::CloseReason;
use tickgate::venue::cboe_pitch::session::{GapStatus, Login, LoginStatus};

const PATIENCE: Duration = Duration::from_secs(10);
const T0: i64 = 1_784_122_200_000_000_000;

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn login() -> Login {
    Login::new("0006", "MKDA", "secret").unwrap()
}

/// A seeded three-unit flow's datagrams, recorded in a proxy's history.
fn history(n: usize) -> PitchHistory {
    let mut flow = PitchFlow::new(12, 3, 600, T0, 7);
    let mut m = SplitMix64::new(1);
    flow.start_session(0, T0);
    let mut out = Vec::new();
    let mut h = PitchHistory::new(10_000);
    for i in 0..n as i64 {
        flow.data_packet(&mut m, 0, T0 + i * 1_000_000, 5, &mut out);
        h.record(&out);
    }
    h
}

fn gap_line() -> (UdpSocket, SocketAddrV4) {
    let rx = UdpSocket::bind(loopback()).unwrap();
    rx.set_read_timeout(Some(PATIENCE)).unwrap();
    let SocketAddr::V4(addr) = rx.local_addr().unwrap() else {
        unreachable!()
    };
    (rx, addr)
}

fn server(at: SocketAddr, history: PitchHistory, gap: SocketAddrV4, per_second: u32) -> GrpServer {
    let mut opts = ServerOptions::new(login(), gap);
    opts.max_count = 50;
    opts.per_second = per_second;
    let tx = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
    GrpServer::spawn(at, Arc::new(Mutex::new(history)), tx, opts).unwrap()
}

fn client(addr: SocketAddr, login: Login) -> GrpClient {
    let mut opts = GrpOptions::new(addr, login);
    // Reconnections within the test's patience (R4c's 1 s in service).
    opts.pace_base = Duration::from_millis(20);
    GrpClient::spawn("pitch", opts).unwrap()
}

fn next_event(c: &GrpClient) -> GrpClientEvent {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(e) = c.try_event() {
            return e;
        }
        assert!(Instant::now() < deadline, "no event from the client");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn response(unit: u8, sequence: u32, count: u16, status: GapStatus) -> GrpClientEvent {
    GrpClientEvent::Response {
        unit,
        sequence,
        count,
        status,
    }
}

/// R4c: the client logs in, a request leaves as a Gap Request, its `A`
/// response comes back as an event, and the messages go out on the gap
/// line (the proxy's business: one datagram is enough here).
#[test]
fn logs_in_and_a_request_is_accepted() {
    let (rx, gap) = gap_line();
    let s = server(loopback(), history(300), gap, 100);
    let c = client(s.local_addr(), login());
    assert_eq!(next_event(&c), GrpClientEvent::LoggedIn);
    assert!(c.send(GapRequest {
        unit: 2,
        sequence: 10,
        count: 30
    }));
    assert_eq!(next_event(&c), response(2, 10, 30, GapStatus::Accepted));
    let mut buf = [0u8; 2048];
    let n = rx.recv(&mut buf).unwrap();
    let d = Datagram::parse(&buf[..n]).unwrap();
    assert_eq!((d.header.unit, d.header.sequence), (2, 10));
    let n = c.counts();
    assert_eq!((n.conn.logins, n.conn.requests), (1, 1));
    assert_eq!(n.conn.responses.of(GapStatus::Accepted), 1);
    assert!(n.conn.logged_in);
    assert_eq!(n.requests_void, 0);
    let counts = s.stop();
    assert_eq!((counts.requests, counts.accepted), (1, 1));
    assert_eq!(counts.conn.logins_accepted, 1);
}

/// R4c's refusals as the simulated proxy gives them: `O` (not kept), `C`
/// (over its count limit), `I` (a unit it never sent), and `S` once more
/// than its allowance for a second arrives, each echoing the request.
#[test]
fn refusals_come_back_with_their_status() {
    let h = history(60);
    let next1 = h.range(1).unwrap().1 as u32;
    let (_rx, gap) = gap_line();
    let s = server(loopback(), h, gap, 4);
    let c = client(s.local_addr(), login());
    assert_eq!(next_event(&c), GrpClientEvent::LoggedIn);
    let refused = [
        (1u8, next1, 1u16, GapStatus::OutOfRange),
        (1, 1, 51, GapStatus::CountTooLarge),
        (9, 1, 1, GapStatus::InvalidUnit),
    ];
    for (unit, sequence, count, _) in refused {
        assert!(c.send(GapRequest {
            unit,
            sequence,
            count
        }));
    }
    // Six more at once: 9 requests pass 4 a second whichever second the
    // proxy's window splits them at.
    for _ in 0..6 {
        assert!(c.send(GapRequest {
            unit: 1,
            sequence: 1,
            count: 1
        }));
    }
    for (unit, sequence, count, status) in refused {
        assert_eq!(next_event(&c), response(unit, sequence, count, status));
    }
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let GrpClientEvent::Response {
            unit: 1,
            sequence: 1,
            count: 1,
            status,
        } = next_event(&c)
        else {
            panic!("not the echo of the request")
        };
        statuses.push(status);
    }
    assert!(
        statuses
            .iter()
            .all(|s| matches!(s, GapStatus::Accepted | GapStatus::SecondLimit)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&GapStatus::SecondLimit), "{statuses:?}");
    let r = c.counts().conn.responses;
    assert_eq!(
        (
            r.of(GapStatus::OutOfRange),
            r.of(GapStatus::CountTooLarge),
            r.of(GapStatus::InvalidUnit)
        ),
        (1, 1, 1)
    );
    assert_eq!(r.of(GapStatus::Accepted) + r.of(GapStatus::SecondLimit), 6);
    assert!(
        c.counts().conn.logged_in,
        "refusals do not end the connection"
    );
}

/// R4c: a Login Response other than `A` is a failed connection.
#[test]
fn wrong_credentials_are_refused() {
    let (_rx, gap) = gap_line();
    let s = server(loopback(), PitchHistory::new(10), gap, 10);
    let c = client(s.local_addr(), Login::new("0006", "MKDA", "wrong").unwrap());
    assert_eq!(
        next_event(&c),
        GrpClientEvent::Down(DownReason::Refused(LoginStatus::NotAuthorized))
    );
    // A request while not logged in is void.
    assert!(c.send(GapRequest {
        unit: 1,
        sequence: 1,
        count: 1
    }));
    wait_until("the request is void", || c.counts().requests_void == 1);
    let n = c.counts().conn;
    assert!(n.login_failures.not_authorized >= 1);
    assert_eq!((n.logins, n.requests, n.logged_in), (0, 0, false));
    drop(c);
    assert!(s.stop().conn.logins_rejected >= 1);
}

/// R4c: a proxy that goes away takes the client down; it reconnects at
/// the pace (attempts that fail while nothing listens) and logs in again
/// once the proxy is back on the same address.
#[test]
fn a_proxy_gone_and_back() {
    let (_rx, gap) = gap_line();
    let s = server(loopback(), PitchHistory::new(10), gap, 10);
    let addr = s.local_addr();
    let c = client(addr, login());
    assert_eq!(next_event(&c), GrpClientEvent::LoggedIn);
    s.stop();
    assert_eq!(
        next_event(&c),
        GrpClientEvent::Down(DownReason::Closed(CloseReason::Socket))
    );
    wait_until("two failed reconnections", || {
        c.counts().conn.connect_failures >= 2
    });
    let s = server(addr, PitchHistory::new(10), gap, 10);
    assert_eq!(next_event(&c), GrpClientEvent::LoggedIn);
    assert!(c.send(GapRequest {
        unit: 1,
        sequence: 1,
        count: 1
    }));
    assert_eq!(next_event(&c), response(1, 1, 1, GapStatus::InvalidUnit));
    let n = c.counts().conn;
    assert_eq!((n.logins, n.closes.socket), (2, 1));
    assert_eq!(n.reconnections, n.connects - 1);
    assert!(n.connects >= 4, "{n:?}");
    assert_eq!(c.try_event(), None);
    drop(s);
}
