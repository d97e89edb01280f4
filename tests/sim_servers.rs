//! The simulator's recovery servers on loopback: the MoldUDP64 re-request
//! server (recovery.md R4) and the GLIMPSE 5.0 server over SoupBinTCP
//! (R5), driven in-process against a paused simulator, and once through
//! `tickgate simulate --live`. Every socket is bound to 127.0.0.1.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickgate::capture::frame::MAX_DATAGRAM;
use tickgate::sim::servers::{
    GlimpseOptions, GlimpseServer, History, RerequestOptions, RerequestServer, SnapshotSource,
};
use tickgate::sim::simulate::{SimConfig, Simulator};
use tickgate::venue::nasdaq_itch::book::Books;
use tickgate::venue::nasdaq_itch::glimpse::{self, GlimpseMessage};
use tickgate::venue::nasdaq_itch::messages::{self, Message};
use tickgate::venue::nasdaq_itch::soupbin::{Decoder, LoginRequest, Packet as Soup};
use tickgate::venue::rerequest::Request;
use tickgate::venue::VenueKind;
use tickgate::wire::{Packet, SessionId};

const LOOPBACK: &str = "127.0.0.1:0";

fn loopback() -> SocketAddr {
    LOOPBACK.parse().unwrap()
}

// ------------------------------------------------------------ re-request

/// A finished tickgate-protocol run with every data packet recorded in a
/// history, and every message as line A delivered it (seq -> bytes).
fn recorded_run(
    drop_both: Option<u64>,
    history_len: usize,
) -> (Arc<Mutex<History>>, BTreeMap<u64, Vec<u8>>, SessionId) {
    let mut cfg = SimConfig::new(11);
    cfg.batch = 20;
    cfg.rate = 40_000;
    cfg.duration_ns = 100_000_000;
    cfg.lines.truncate(1);
    cfg.drop_both_every = drop_both;
    let mut sim = Simulator::new(cfg).unwrap();
    let history = Arc::new(Mutex::new(History::new(history_len)));
    sim.set_history(history.clone());
    let mut delivered = BTreeMap::new();
    let mut session = None;
    let mut buf = Vec::new();
    while sim.next_into(&mut buf).is_some() {
        let p = Packet::parse(&buf).unwrap();
        session = Some(p.session);
        for (i, b) in p.blocks().enumerate() {
            delivered.insert(p.sequence + i as u64, b.to_vec());
        }
    }
    (history, delivered, session.unwrap())
}

fn client() -> UdpSocket {
    let s = UdpSocket::bind(loopback()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    s
}

fn ask(c: &UdpSocket, server: SocketAddr, req: &Request) -> Option<Vec<u8>> {
    c.send_to(&req.encode(), server).unwrap();
    let mut buf = [0u8; 2048];
    match c.recv_from(&mut buf) {
        Ok((n, from)) => {
            assert_eq!(from, server, "answers come from the server's socket");
            Some(buf[..n].to_vec())
        }
        Err(_) => None,
    }
}

/// Waits (briefly) for the server's counters to reach a condition.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn rerequest_answers_the_exact_messages_in_one_capped_packet() {
    let (history, delivered, session) = recorded_run(None, 1_000_000);
    // No rate limit in the way of one client asking for everything.
    let opts = RerequestOptions {
        rate: 1_000_000,
        total_rate: 1_000_000,
        ..RerequestOptions::default()
    };
    let server = RerequestServer::spawn(loopback(), history, opts).unwrap();
    let c = client();
    let last = *delivered.keys().last().unwrap();
    assert!(last > 500, "a run long enough to need several answers");
    // From the start, as many as allowed: one packet of at most 1,400
    // bytes, the messages exactly as multicast, in order.
    let mut next = 1;
    let mut answers = 0;
    while next <= last {
        let req = Request::for_hole(session, next, last + 1 - next);
        let a = ask(&c, server.local_addr(), &req).expect("an answer");
        assert!(a.len() <= MAX_DATAGRAM, "{} bytes", a.len());
        let p = Packet::parse(&a).unwrap();
        assert_eq!((p.session, p.sequence), (session, next));
        assert!(p.message_count() >= 1);
        for (i, b) in p.blocks().enumerate() {
            assert_eq!(Some(&b.to_vec()), delivered.get(&(next + i as u64)));
        }
        // Full: the next message would not have fitted.
        if next + (p.message_count() as u64) <= last {
            let next_len = delivered[&(next + p.message_count() as u64)].len();
            assert!(a.len() + 2 + next_len > MAX_DATAGRAM);
        }
        next += p.message_count() as u64;
        answers += 1;
    }
    assert!(answers > 10);
    // A count smaller than what fits is honoured.
    let a = ask(&c, server.local_addr(), &Request::for_hole(session, 5, 3)).unwrap();
    assert_eq!(Packet::parse(&a).unwrap().message_count(), 3);
    let counts = server.stop();
    assert_eq!(counts.answered, answers + 1);
    assert_eq!(
        counts.malformed + counts.other_session + counts.rate_limited,
        0
    );
}

#[test]
fn rerequest_recovers_a_packet_lost_on_every_line() {
    let (history, delivered, session) = recorded_run(Some(5), 1_000_000);
    // The holes --drop-both left in what the line delivered.
    let last = *delivered.keys().last().unwrap();
    let holes: Vec<u64> = (1..=last).filter(|s| !delivered.contains_key(s)).collect();
    assert!(
        !holes.is_empty(),
        "every 5th data packet lost on every line"
    );
    let server =
        RerequestServer::spawn(loopback(), history.clone(), RerequestOptions::default()).unwrap();
    let c = client();
    let first = holes[0];
    let a = ask(
        &c,
        server.local_addr(),
        &Request::for_hole(session, first, 1),
    )
    .unwrap();
    let p = Packet::parse(&a).unwrap();
    assert_eq!((p.sequence, p.message_count()), (first, 1));
    // The recovered message is the provider's, which the lines never sent.
    let h = history.lock().unwrap();
    assert_eq!(p.blocks().next().unwrap(), h.message(first).unwrap());
}

#[test]
fn rerequest_ignores_other_sessions_and_what_it_does_not_hold() {
    let (history, delivered, session) = recorded_run(None, 100);
    let server =
        RerequestServer::spawn(loopback(), history.clone(), RerequestOptions::default()).unwrap();
    let (first, next) = {
        let h = history.lock().unwrap();
        (h.first_sequence(), h.next_sequence())
    };
    assert_eq!(next, delivered.keys().last().unwrap() + 1);
    assert!(first > 1, "only the last 100 messages are kept");
    let c = client();
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let other = SessionId(*b"OTHERSESS1");
    assert!(ask(&c, server.local_addr(), &Request::for_hole(other, first, 1)).is_none());
    assert!(ask(
        &c,
        server.local_addr(),
        &Request::for_hole(session, first - 1, 1)
    )
    .is_none());
    assert!(ask(
        &c,
        server.local_addr(),
        &Request::for_hole(session, next, 1)
    )
    .is_none());
    c.send_to(&[0u8; 19], server.local_addr()).unwrap();
    c.send_to(
        b"not a request at all, longer than twenty",
        server.local_addr(),
    )
    .unwrap();
    // Sequence 0 and count 0 are malformed too.
    let mut zero = Request::for_hole(session, first, 1).encode();
    zero[18..].fill(0);
    c.send_to(&zero, server.local_addr()).unwrap();
    assert!(eventually(|| server.counts().malformed == 3));
    // Still serving.
    assert!(ask(
        &c,
        server.local_addr(),
        &Request::for_hole(session, first, 1)
    )
    .is_some());
    let counts = server.stop();
    assert_eq!(
        (
            counts.other_session,
            counts.too_old,
            counts.not_yet_sent,
            counts.answered
        ),
        (1, 1, 1, 1)
    );
}

#[test]
fn rerequest_survives_a_flood_and_still_answers_others() {
    let (history, _, session) = recorded_run(None, 1_000_000);
    let server = RerequestServer::spawn(loopback(), history, RerequestOptions::default()).unwrap();
    let flood = UdpSocket::bind(loopback()).unwrap();
    let start = Instant::now();
    for i in 0..20_000u64 {
        let req = Request::for_hole(session, 1 + i % 500, 65_534);
        let _ = flood.send_to(&req.encode(), server.local_addr());
        if i % 7 == 0 {
            let _ = flood.send_to(&[0xA5; 20], server.local_addr());
        }
    }
    // Whatever the kernel let through was counted; the flooder got what
    // one source may have (100 a second, 100 at once), no more.
    std::thread::sleep(Duration::from_millis(300));
    let secs = start.elapsed().as_secs_f64();
    let k = server.counts();
    assert_eq!(
        k.datagrams,
        k.answered
            + k.malformed
            + k.rate_limited
            + k.other_session
            + k.too_old
            + k.not_yet_sent
            + k.send_errors
    );
    assert!(k.datagrams > 1_000, "{k:?}");
    assert!(k.rate_limited > k.datagrams / 2, "{k:?}");
    assert!(
        k.answered as f64 <= 100.0 + 100.0 * secs + 1.0,
        "{k:?} in {secs:.2} s"
    );
    // Another client is answered at once.
    let c = client();
    let a = ask(&c, server.local_addr(), &Request::for_hole(session, 1, 1))
        .expect("answered after a flood");
    assert_eq!(Packet::parse(&a).unwrap().sequence, 1);
}

// ------------------------------------------------------------- GLIMPSE

struct ItchSim {
    sim: Arc<Mutex<Simulator>>,
    history: Arc<Mutex<History>>,
}

/// A nasdaq-itch simulator paused after `events` datagrams, every data
/// packet kept in a history (to rebuild the book independently).
fn itch_sim(events: usize) -> ItchSim {
    let mut cfg = SimConfig::new(5);
    cfg.venue = VenueKind::NasdaqItch;
    cfg.symbols = 20;
    cfg.orders = 600;
    cfg.batch = 8;
    cfg.rate = 200_000;
    cfg.duration_ns = 60_000_000_000;
    cfg.heartbeat_ms = 0;
    cfg.lines.truncate(1);
    let mut sim = Simulator::new(cfg).unwrap();
    let history = Arc::new(Mutex::new(History::new(10_000_000)));
    sim.set_history(history.clone());
    let mut buf = Vec::new();
    for _ in 0..events {
        sim.next_into(&mut buf).unwrap();
    }
    ItchSim {
        sim: Arc::new(Mutex::new(sim)),
        history,
    }
}

fn opts() -> GlimpseOptions {
    let mut o = GlimpseOptions::new("tguser", "tgpass");
    o.login_timeout = Duration::from_millis(400);
    o.idle_timeout = Duration::from_millis(900);
    o.heartbeat = Duration::from_millis(150);
    o
}

fn glimpse_server(s: &ItchSim, o: GlimpseOptions) -> GlimpseServer {
    let sim = s.sim.clone();
    let source: SnapshotSource = Arc::new(move || sim.lock().unwrap().glimpse_snapshot());
    GlimpseServer::spawn(loopback(), source, o).unwrap()
}

/// A SoupBinTCP client: reads packets (owned) off a stream.
struct Client {
    stream: TcpStream,
    decoder: Decoder,
}

#[derive(Debug, PartialEq)]
enum Got {
    Packet(u8, Vec<u8>),
    Closed,
    Timeout,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Client {
            stream,
            decoder: Decoder::new(),
        }
    }

    fn send(&mut self, p: Soup<'_>) {
        self.stream.write_all(&p.encode_to_vec().unwrap()).unwrap();
    }

    fn login(&mut self, user: &str, password: &str, session: Option<SessionId>) {
        self.send(Soup::LoginRequest(
            LoginRequest::new(user, password, session, 1).unwrap(),
        ));
    }

    fn next(&mut self, within: Duration) -> Got {
        let end = Instant::now() + within;
        loop {
            if let Some(p) = self
                .decoder
                .next_packet()
                .expect("the server sends SoupBinTCP")
            {
                let mut bytes = Vec::new();
                p.encode(&mut bytes).unwrap();
                return Got::Packet(p.kind(), bytes[3..].to_vec());
            }
            if Instant::now() >= end {
                return Got::Timeout;
            }
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => return Got::Closed,
                Ok(n) => self.decoder.push(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Got::Closed,
            }
        }
    }

    /// Login Accepted, then the snapshot's messages up to End of Snapshot.
    fn snapshot(&mut self) -> (SessionId, u64, Vec<Message>, u64) {
        let (session, sequence) = match self.next(Duration::from_secs(5)) {
            Got::Packet(b'A', p) => match Soup::parse(b'A', &p).unwrap() {
                Soup::LoginAccepted { session, sequence } => (session, sequence),
                other => panic!("{other:?}"),
            },
            other => panic!("expected Login Accepted, got {other:?}"),
        };
        let mut msgs = Vec::new();
        loop {
            match self.next(Duration::from_secs(5)) {
                Got::Packet(b'S', m) => match glimpse::decode(&m).unwrap() {
                    GlimpseMessage::Itch(m) => msgs.push(m),
                    GlimpseMessage::EndOfSnapshot(n) => return (session, sequence, msgs, n),
                },
                other => panic!("expected Sequenced Data, got {other:?}"),
            }
        }
    }

    /// Waits for the server to close the connection, skipping heartbeats.
    fn closed_within(&mut self, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            match self.next(end - Instant::now()) {
                Got::Closed => return true,
                Got::Packet(b'H', _) => {}
                Got::Packet(k, _) => panic!("unexpected packet {}", k as char),
                Got::Timeout => return false,
            }
        }
        false
    }
}

/// Applies ITCH order messages to `books`; returns the halted locates.
fn apply(books: &mut Books, msgs: &[Message], halted: &mut BTreeSet<u16>) {
    for m in msgs {
        match *m {
            Message::AddOrder {
                header,
                order_ref,
                side,
                shares,
                price,
                ..
            } => books
                .add(header.locate, order_ref, side, shares, price)
                .unwrap(),
            Message::Executed {
                order_ref, shares, ..
            }
            | Message::Cancel {
                order_ref, shares, ..
            } => {
                books.reduce(order_ref, shares).unwrap();
            }
            Message::Delete { order_ref, .. } => {
                books.delete(order_ref).unwrap();
            }
            Message::Replace {
                original,
                new_ref,
                shares,
                price,
                ..
            } => {
                books.replace(original, new_ref, shares, price).unwrap();
            }
            Message::TradingAction { header, state, .. } => {
                if state == b'T' {
                    halted.remove(&header.locate);
                } else {
                    halted.insert(header.locate);
                }
            }
            _ => {}
        }
    }
}

#[test]
fn glimpse_snapshot_rebuilds_the_simulators_book() {
    let s = itch_sim(3_000);
    let server = glimpse_server(&s, opts());
    let mut c = Client::connect(server.local_addr());
    c.login("tguser", "tgpass", None);
    let (session, sequence, msgs, n) = c.snapshot();
    assert_eq!(
        sequence, 1,
        "Login Accepted: the first Sequenced Data packet is 1"
    );
    let h = s.history.lock().unwrap();
    assert_eq!(Some(session), h.session(), "the multicast session");
    assert_eq!(
        n,
        h.next_sequence(),
        "G: the first sequence the snapshot does not reflect"
    );
    assert!(n > 3_000);
    // The book from the multicast messages 1..n, and from the snapshot.
    let stream: Vec<Message> = (h.first_sequence()..n)
        .map(|q| messages::decode(h.message(q).unwrap()).unwrap())
        .collect();
    assert_eq!(h.first_sequence(), 1);
    let (mut from_stream, mut from_snapshot) = (Books::new(100_000), Books::new(100_000));
    let (mut halted_stream, mut halted_snapshot) = (BTreeSet::new(), BTreeSet::new());
    apply(&mut from_stream, &stream, &mut halted_stream);
    apply(&mut from_snapshot, &msgs, &mut halted_snapshot);
    assert!(from_stream.live_orders() > 300);
    assert_eq!(from_snapshot.live_orders(), from_stream.live_orders());
    for locate in 1..=20u16 {
        assert_eq!(
            from_snapshot.best(locate),
            from_stream.best(locate),
            "locate {locate}"
        );
    }
    assert_eq!(halted_snapshot, halted_stream);
    // Every symbol's directory, then only what R5 lists.
    let directories = msgs
        .iter()
        .filter(|m| matches!(m, Message::StockDirectory { .. }))
        .count();
    assert_eq!(directories, 20);
    assert!(msgs
        .iter()
        .all(|m| matches!(m.kind(), b'S' | b'R' | b'H' | b'A')));
    drop(h);
    // Then heartbeats while idle, until the client logs out.
    assert!(matches!(
        c.next(Duration::from_secs(2)),
        Got::Packet(b'H', _)
    ));
    c.send(Soup::LogoutRequest);
    assert!(c.closed_within(Duration::from_secs(2)));
    assert!(eventually(|| server.counts().logouts == 1));
    let counts = server.stop();
    assert_eq!((counts.logins_accepted, counts.snapshots_sent), (1, 1));
}

#[test]
fn glimpse_rejects_wrong_credentials_and_sessions() {
    let s = itch_sim(200);
    let server = glimpse_server(&s, opts());
    let mut c = Client::connect(server.local_addr());
    c.login("tguser", "wrong", None);
    assert_eq!(
        c.next(Duration::from_secs(2)),
        Got::Packet(b'J', b"A".to_vec())
    );
    assert!(c.closed_within(Duration::from_secs(2)));
    let mut c = Client::connect(server.local_addr());
    c.login("other", "tgpass", None);
    assert_eq!(
        c.next(Duration::from_secs(2)),
        Got::Packet(b'J', b"A".to_vec())
    );
    let mut c = Client::connect(server.local_addr());
    c.login("tguser", "tgpass", Some(SessionId(*b"NOTTHISONE")));
    assert_eq!(
        c.next(Duration::from_secs(2)),
        Got::Packet(b'J', b"S".to_vec())
    );
    assert!(c.closed_within(Duration::from_secs(2)));
    let counts = server.stop();
    assert_eq!((counts.logins_rejected, counts.logins_accepted), (3, 0));
}

#[test]
fn glimpse_drops_a_garbage_client_while_another_gets_its_snapshot() {
    let s = itch_sim(1_000);
    let server = glimpse_server(&s, opts());
    let mut bad = Client::connect(server.local_addr());
    let mut good = Client::connect(server.local_addr());
    bad.stream
        .write_all(b"\x00\x05GET / HTTP/1.1\r\n\r\n")
        .unwrap();
    good.login("tguser", "tgpass", None);
    assert!(bad.closed_within(Duration::from_secs(2)));
    let (_, _, msgs, _) = good.snapshot();
    assert!(msgs.len() > 100);
    // A length field beyond any packet: dropped at once, nothing waited for.
    let mut huge = Client::connect(server.local_addr());
    huge.stream.write_all(&[0xff, 0xff, b'L']).unwrap();
    assert!(huge.closed_within(Duration::from_secs(2)));
    // A packet out of place before login.
    let mut early = Client::connect(server.local_addr());
    early.send(Soup::ClientHeartbeat);
    assert!(early.closed_within(Duration::from_secs(2)));
    assert!(eventually(|| server.counts().garbage == 3));
    good.send(Soup::LogoutRequest);
    assert!(good.closed_within(Duration::from_secs(2)));
}

#[test]
fn glimpse_closes_silent_connections() {
    let s = itch_sim(200);
    let server = glimpse_server(&s, opts());
    // No login: closed after the login timeout (400 ms).
    let t = Instant::now();
    let mut silent = Client::connect(server.local_addr());
    assert!(silent.closed_within(Duration::from_secs(3)));
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // Logged in, then silent: heartbeats, then closed after the idle
    // timeout (900 ms without a client packet).
    let mut c = Client::connect(server.local_addr());
    c.login("tguser", "tgpass", None);
    c.snapshot();
    let t = Instant::now();
    assert!(c.closed_within(Duration::from_secs(4)));
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // A client sending heartbeats stays.
    let mut alive = Client::connect(server.local_addr());
    alive.login("tguser", "tgpass", None);
    alive.snapshot();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1_800) {
        alive.send(Soup::ClientHeartbeat);
        let got = alive.next(Duration::from_millis(200));
        assert_ne!(got, Got::Closed, "closed while sending heartbeats");
    }
    let counts = server.counts();
    assert_eq!((counts.login_timeouts, counts.idle_timeouts), (1, 1));
}

// ------------------------------------------------------ through the CLI

fn itch_size(kind: u8) -> usize {
    messages::message_size(kind).unwrap_or(1)
}

/// `tickgate simulate --live --venue nasdaq-itch` with both servers, line
/// A sent to a loopback socket: a hole made by --drop-both is recovered
/// by re-request, and a GLIMPSE snapshot matches the stream's session.
#[test]
fn simulate_live_serves_rerequests_and_snapshots() {
    let line = UdpSocket::bind(loopback()).unwrap();
    line.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let line_addr = line.local_addr().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args([
            "simulate",
            "--live",
            "--venue",
            "nasdaq-itch",
            "--symbols",
            "10",
            "--orders",
            "200",
        ])
        .args([
            "--rate",
            "2000",
            "--batch",
            "4",
            "--duration",
            "20",
            "--lines",
            "A",
        ])
        .args(["--group-a", &line_addr.to_string(), "--drop-both", "10"])
        .args(["--rerequest-listen", LOOPBACK, "--glimpse-listen", LOOPBACK])
        .args(["--glimpse-user", "u", "--glimpse-password", "p"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (mut rr, mut gl) = (None, None);
    let mut line_text = String::new();
    while rr.is_none() || gl.is_none() {
        line_text.clear();
        assert!(
            stderr.read_line(&mut line_text).unwrap() > 0,
            "simulate exited early"
        );
        let addr = |prefix: &str| -> Option<SocketAddr> {
            line_text
                .strip_prefix(prefix)
                .map(|r| r.split_whitespace().next().unwrap().parse().unwrap())
        };
        rr = rr.or(addr("re-request server on "));
        gl = gl.or(addr("GLIMPSE server on "));
    }
    let (rr, gl) = (rr.unwrap(), gl.unwrap());
    // Receive until a hole shows: sequences the line skipped.
    let mut next = None;
    let mut hole = None;
    let mut session = None;
    let mut buf = [0u8; 2048];
    let end = Instant::now() + Duration::from_secs(10);
    while hole.is_none() && Instant::now() < end {
        let Ok(n) = line.recv(&mut buf) else { continue };
        let p = Packet::parse_with(&buf[..n], itch_size).unwrap();
        if p.message_count() == 0 {
            continue;
        }
        session = Some(p.session);
        if let Some(expect) = next {
            if p.sequence > expect {
                hole = Some((expect, p.sequence - expect));
            }
        }
        next = Some(p.sequence + p.message_count() as u64);
    }
    let (start, missing) = hole.expect("--drop-both 10 leaves holes");
    let session = session.unwrap();
    let c = client();
    let a = ask(&c, rr, &Request::for_hole(session, start, missing)).expect("an answer");
    let p = Packet::parse_with(&a, itch_size).unwrap();
    assert_eq!(
        (p.session, p.sequence, p.message_count() as u64),
        (session, start, missing)
    );
    // GLIMPSE: the same session, a G beyond what the line delivered so far.
    let mut g = Client::connect(gl);
    g.login("u", "p", None);
    let (glimpse_session, _, msgs, n) = g.snapshot();
    assert_eq!(glimpse_session, session);
    assert!(n >= next.unwrap(), "G {n} before what was received");
    assert!(msgs.iter().any(|m| matches!(m, Message::AddOrder { .. })));
    g.send(Soup::LogoutRequest);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn drop_both_loses_every_nth_data_packet_on_every_line() {
    let mut cfg = SimConfig::new(3);
    cfg.duration_ns = 200_000_000;
    cfg.drop_both_every = Some(4);
    let mut sim = Simulator::new(cfg).unwrap();
    let mut buf = Vec::new();
    while sim.next_into(&mut buf).is_some() {}
    let t = sim.truth();
    assert!(t.data_packets > 100);
    assert_eq!(t.packets_lost_all_lines, t.data_packets / 4);
    assert!(t.lines.iter().all(|l| l.dropped == t.data_packets / 4));
    assert_eq!(t.expected_channel_lost, t.messages_lost_all_lines);
    assert!(t.messages_lost_all_lines > 0);
}
