//! The simulator's Cboe Gap Request Proxy and Spin Server (recovery.md
//! R4c, R5c), driven over real loopback TCP connections by the client
//! codecs tickgate's own recovery uses: `GapRequestCodec` and the session
//! blocks for the GRP, `SpinCodec` in an `ImageSession` for the spin.
//! Reads wait at most a few seconds (a safety net, never an assertion).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickgate::feed::recovery::image::{ImageSession, SessionLimits, SessionOutcome};
use tickgate::sim::live::{McastSender, SenderOptions};
use tickgate::sim::pitch_flow::PitchFlow;
use tickgate::sim::seeded::SplitMix64;
use tickgate::sim::servers::{
    GrpOptions, GrpServer, PitchHistory, SpinImage, SpinOptions, SpinServer, SpinSource,
};
use tickgate::sim::venue_sim::VenueFlow;
use tickgate::venue::cboe_pitch::adapter::session_id;
use tickgate::venue::cboe_pitch::frame::Datagram;
use tickgate::venue::cboe_pitch::grp::GapRequestCodec;
use tickgate::venue::cboe_pitch::messages::{self, Message};
use tickgate::venue::cboe_pitch::session::{
    encode_block, BlockDecoder, GapStatus, Login, LoginStatus, SessionMessage, SpinStatus,
};
use tickgate::venue::cboe_pitch::spin::SpinCodec;
use tickgate::venue::codec::{Gap, RefillCodec};

const PATIENCE: Duration = Duration::from_secs(10);
const T0: i64 = 1_784_122_200_000_000_000;

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn login() -> Login {
    Login::new("0006", "MKDA", "secret").unwrap()
}

/// A seeded three-unit flow's datagrams, recorded as the provider
/// produced them.
fn flow_datagrams(n: usize) -> (PitchFlow, Vec<Vec<u8>>) {
    let mut flow = PitchFlow::new(12, 3, 600, T0, 7);
    let mut m = SplitMix64::new(1);
    flow.start_session(0, T0);
    let mut out = Vec::new();
    let mut all = Vec::new();
    for i in 0..n as i64 {
        flow.data_packet(&mut m, 0, T0 + i * 1_000_000, 5, &mut out);
        all.push(out.clone());
    }
    (flow, all)
}

/// One side of a session connection: blocks in, decoded.
struct Client {
    stream: TcpStream,
    decoder: BlockDecoder,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Client {
            stream,
            decoder: BlockDecoder::new(),
        }
    }

    fn send(&mut self, msgs: &[SessionMessage]) {
        let mut out = Vec::new();
        encode_block(msgs, &mut out).unwrap();
        self.stream.write_all(&out).unwrap();
    }

    /// The next block that is neither a heartbeat nor a Spin Image
    /// Available alone (offered every second whatever the test does).
    fn next_not_offer(&mut self) -> Option<Vec<SessionMessage>> {
        loop {
            match self.next() {
                Some(b) if matches!(b[..], [SessionMessage::SpinImageAvailable { .. }]) => {}
                other => return other,
            }
        }
    }

    /// The next block that is not a heartbeat; `None` if the server closed.
    fn next(&mut self) -> Option<Vec<SessionMessage>> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            while let Some(b) = self.decoder.next_block().unwrap() {
                if !b.is_heartbeat() {
                    return Some(b.messages().map(|m| m.unwrap()).collect());
                }
            }
            assert!(Instant::now() < deadline, "no block from the server");
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => self.decoder.push(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return None,
            }
        }
    }
}

fn gap_line() -> (UdpSocket, SocketAddrV4) {
    let rx = UdpSocket::bind(loopback()).unwrap();
    rx.set_read_timeout(Some(PATIENCE)).unwrap();
    let SocketAddr::V4(addr) = rx.local_addr().unwrap() else {
        unreachable!()
    };
    (rx, addr)
}

fn grp(history: PitchHistory, gap: SocketAddrV4, per_second: u32) -> GrpServer {
    let mut opts = GrpOptions::new(login(), gap);
    opts.max_count = 50;
    opts.per_second = per_second;
    let tx = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
    GrpServer::spawn(loopback(), Arc::new(Mutex::new(history)), tx, opts).unwrap()
}

fn logged_in(addr: SocketAddr) -> Client {
    let mut c = Client::connect(addr);
    c.send(&[SessionMessage::Login(login())]);
    assert_eq!(
        c.next(),
        Some(vec![SessionMessage::LoginResponse(LoginStatus::Accepted)])
    );
    c
}

/// R4c: a Gap Request written by `GapRequestCodec` gets its echo with
/// `A`, and the messages asked for arrive on the gap line as the unit's
/// datagrams with their original sequence numbers, byte for byte what the
/// provider sent.
#[test]
fn grp_sends_what_a_gap_request_asks_for_on_the_gap_line() {
    let (_, datagrams) = flow_datagrams(300);
    let mut history = PitchHistory::new(10_000);
    for d in &datagrams {
        history.record(d);
    }
    let (rx, gap) = gap_line();
    let server = grp(history, gap, 100);
    let mut c = logged_in(server.local_addr());

    // Unit 2's messages from sequence 10, 30 of them.
    let codec = GapRequestCodec::new(30);
    let request = codec.request(Gap {
        session: session_id(2, 1),
        first: 10,
        missing: 80,
    });
    let mut bytes = Vec::new();
    codec.encode(&request, &mut bytes);
    c.stream.write_all(&bytes).unwrap();
    assert_eq!(
        c.next(),
        Some(vec![SessionMessage::GapResponse {
            unit: 2,
            sequence: 10,
            count: 30,
            status: GapStatus::Accepted
        }])
    );
    // What the provider sent of unit 2, message by message.
    let mut sent: Vec<(u32, Vec<u8>)> = Vec::new();
    for d in &datagrams {
        let p = Datagram::parse(d).unwrap();
        if p.header.unit == 2 {
            sent.extend(p.sequenced().map(|(s, m)| (s, m.to_vec())));
        }
    }
    let want: Vec<_> = sent
        .into_iter()
        .filter(|(s, _)| (10..40).contains(s))
        .collect();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while got.len() < 30 {
        let n = rx.recv(&mut buf).unwrap();
        let p = Datagram::parse(&buf[..n]).unwrap();
        assert_eq!(p.header.unit, 2);
        got.extend(p.sequenced().map(|(s, m)| (s, m.to_vec())));
    }
    assert_eq!(got, want);
    let counts = server.stop();
    assert_eq!((counts.requests, counts.accepted), (1, 1));
    assert_eq!(counts.gap_messages, 30);
}

/// R4c's refusals: `O` (not kept or not yet sent), `C` (count above the
/// limit), `I` (a unit the provider never sent), `S` (the second's
/// allowance spent); each echoes the request and sends nothing.
#[test]
fn grp_refuses_with_the_status_of_r4c() {
    let (_, datagrams) = flow_datagrams(60);
    let mut history = PitchHistory::new(10_000);
    for d in &datagrams {
        history.record(d);
    }
    let (next1, _) = (history.range(1).unwrap().1, ());
    let (rx, gap) = gap_line();
    let server = grp(history, gap, 4);
    let mut c = logged_in(server.local_addr());
    let cases = [
        (1u8, next1 as u32, 1u16, GapStatus::OutOfRange),
        (1, 1, 51, GapStatus::CountTooLarge),
        (9, 1, 1, GapStatus::InvalidUnit),
        (1, 1, 1, GapStatus::Accepted),
        (1, 1, 1, GapStatus::SecondLimit),
    ];
    for (unit, sequence, count, status) in cases {
        c.send(&[SessionMessage::GapRequest {
            unit,
            sequence,
            count,
        }]);
        assert_eq!(
            c.next(),
            Some(vec![SessionMessage::GapResponse {
                unit,
                sequence,
                count,
                status
            }]),
            "unit {unit} sequence {sequence} count {count}"
        );
    }
    // Only the accepted request sent a datagram.
    let mut buf = [0u8; 2048];
    let n = rx.recv(&mut buf).unwrap();
    let p = Datagram::parse(&buf[..n]).unwrap();
    assert_eq!(
        (p.header.unit, p.header.sequence, p.header.count),
        (1, 1, 1)
    );
    // A message other than a Gap Request or heartbeat closes the
    // connection.
    c.send(&[SessionMessage::SpinRequest { sequence: 1 }]);
    assert_eq!(c.next(), None);
    let counts = server.stop();
    assert_eq!(
        (
            counts.out_of_range,
            counts.count_too_large,
            counts.invalid_unit,
            counts.second_limit,
            counts.conn.garbage
        ),
        (1, 1, 1, 1, 1)
    );
}

#[test]
fn grp_and_spin_refuse_wrong_credentials() {
    let (rx, gap) = gap_line();
    drop(rx);
    let server = grp(PitchHistory::new(10), gap, 10);
    let source: SpinSource = Arc::new(|| None);
    let spin = SpinServer::spawn(loopback(), source, SpinOptions::new(login())).unwrap();
    for addr in [server.local_addr(), spin.local_addr()] {
        let mut c = Client::connect(addr);
        c.send(&[SessionMessage::Login(
            Login::new("0006", "MKDA", "wrong").unwrap(),
        )]);
        assert_eq!(
            c.next(),
            Some(vec![SessionMessage::LoginResponse(
                LoginStatus::NotAuthorized
            )])
        );
        assert_eq!(c.next(), None, "closed after N");
    }
    assert_eq!(server.stop().conn.logins_rejected, 1);
    assert_eq!(spin.stop().conn.logins_rejected, 1);
}

/// Runs one spin attempt with tickgate's codec over a real connection.
fn spin_attempt(addr: SocketAddr, n0: u64) -> (SessionOutcome, u64) {
    const S: i64 = 1_000_000_000;
    let limits = SessionLimits {
        silence_ns: 15 * S,
        whole_ns: 30 * S,
        heartbeat_ns: S,
        max_bytes: 64 << 20,
    };
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let now = || started.elapsed().as_nanos() as i64;
    let mut out = Vec::new();
    let mut session = ImageSession::start(SpinCodec::new(login(), n0), limits, 0, &mut out)
        .unwrap_or_else(|o| panic!("{o:?}"));
    let mut buf = [0u8; 8192];
    loop {
        if !out.is_empty() {
            stream.write_all(&out).unwrap();
            out.clear();
        }
        if let Some(o) = session.poll(now(), &mut out) {
            return (o, session.codec().out_of_range());
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => panic!("closed by the server"),
            Ok(n) => n,
            Err(_) => continue,
        };
        if let Some(o) = session.on_bytes(&buf[..n], now(), &mut out) {
            return (o, session.codec().out_of_range());
        }
    }
}

/// R5c: the spin tickgate's codec receives over TCP rebuilds the unit's
/// book exactly: the same live orders (id, side, shares, price, symbol)
/// as the flow holds, a Trading Status per symbol, Spin Finished carrying
/// the offered sequence.
#[test]
fn spin_server_spins_the_units_book_to_the_codec() {
    let (flow, _) = flow_datagrams(400);
    let image = flow.spin_image(3).unwrap();
    assert!(image.order_count() > 20, "{}", image.order_count());
    let offered = image.clone();
    let source: SpinSource = Arc::new(move || Some(offered.clone()));
    let server = SpinServer::spawn(loopback(), source, SpinOptions::new(login())).unwrap();
    let (outcome, out_of_range) = spin_attempt(server.local_addr(), image.sequence as u64 + 1);
    let SessionOutcome::Done(picture) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(out_of_range, 0);
    assert_eq!(picture.next, image.sequence as u64 + 1);
    let mut got = Vec::new();
    let mut at = 0;
    while at < picture.blocks.len() {
        let len = u16::from_be_bytes([picture.blocks[at], picture.blocks[at + 1]]) as usize;
        got.push(messages::decode(&picture.blocks[at + 2..at + 2 + len]).unwrap());
        at += 2 + len;
    }
    assert_eq!(got, image.messages);
    assert!(matches!(got[0], Message::Time { .. }));
    assert_eq!(
        got.iter()
            .filter(|m| matches!(m, Message::TradingStatus { .. }))
            .count(),
        4,
        "12 symbols over 3 units"
    );
    let counts = server.stop();
    assert_eq!(
        (counts.spins_sent, counts.orders_sent),
        (1, image.order_count() as u64)
    );
}

/// R5c step 4: a request for another sequence than the one offered gets
/// `O`, with no spin.
#[test]
fn spin_server_answers_o_for_a_sequence_it_did_not_offer() {
    let image = SpinImage {
        sequence: 50,
        messages: vec![Message::Time { seconds: 36_000 }],
    };
    let source: SpinSource = Arc::new(move || Some(image.clone()));
    let server = SpinServer::spawn(loopback(), source, SpinOptions::new(login())).unwrap();
    let mut c = logged_in(server.local_addr());
    assert_eq!(
        c.next(),
        Some(vec![SessionMessage::SpinImageAvailable { sequence: 50 }])
    );
    for sequence in [51, 49] {
        c.send(&[SessionMessage::SpinRequest { sequence }]);
        assert_eq!(
            c.next_not_offer(),
            Some(vec![SessionMessage::SpinResponse {
                sequence,
                order_count: 0,
                status: SpinStatus::OutOfRange
            }])
        );
    }
    c.send(&[SessionMessage::SpinRequest { sequence: 50 }]);
    assert_eq!(
        c.next_not_offer(),
        Some(vec![SessionMessage::SpinResponse {
            sequence: 50,
            order_count: 0,
            status: SpinStatus::Accepted
        }])
    );
    assert_eq!(
        c.next_not_offer(),
        Some(vec![
            SessionMessage::Pitch(Message::Time { seconds: 36_000 }),
            SessionMessage::SpinFinished { sequence: 50 }
        ])
    );
    let counts = server.stop();
    assert_eq!((counts.out_of_range, counts.spins_sent), (2, 1));
}

// ------------------------------------------------------ through the CLI

/// `tickgate simulate --live --venue cboe-pitch` with both servers, line A
/// and the gap line sent to loopback sockets: a hole made by --drop-both
/// is asked of the Gap Request Proxy and arrives on the gap line with its
/// unit and sequence; unit 1's Spin Server spins a book that continues
/// what line A delivered (Spin Finished at or beyond the last sequence
/// received, Add Orders in it).
#[test]
fn simulate_live_serves_gap_requests_and_spins() {
    let line = UdpSocket::bind(loopback()).unwrap();
    line.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (gap_rx, gap_addr) = gap_line();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args([
            "simulate",
            "--live",
            "--venue",
            "cboe-pitch",
            "--units",
            "2",
        ])
        .args(["--symbols", "8", "--orders", "200", "--rate", "2000"])
        .args(["--batch", "3", "--duration", "20", "--lines", "A"])
        .args(["--group-a", &line.local_addr().unwrap().to_string()])
        .args(["--group-gap", &gap_addr.to_string(), "--drop-both", "10"])
        .args([
            "--grp-listen",
            "127.0.0.1:0",
            "--spin-listen",
            "127.0.0.1:0",
        ])
        .args(["--pitch-sub-id", "0006", "--pitch-user", "MKDA"])
        .args(["--pitch-password", "secret"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (mut grp_addr, mut spin_addr) = (None, None);
    let mut text = String::new();
    while grp_addr.is_none() || spin_addr.is_none() {
        text.clear();
        assert!(
            std::io::BufRead::read_line(&mut stderr, &mut text).unwrap() > 0,
            "simulate exited early"
        );
        let addr = |prefix: &str| -> Option<SocketAddr> {
            text.strip_prefix(prefix)
                .map(|r| r.split_whitespace().next().unwrap().parse().unwrap())
        };
        grp_addr = grp_addr.or(addr("Gap Request Proxy on "));
        spin_addr = spin_addr.or(addr("Spin Server of unit 1 on "));
    }
    // Receive line A until a unit shows a hole.
    let mut next: std::collections::BTreeMap<u8, u32> = Default::default();
    let mut hole = None;
    let mut buf = [0u8; 2048];
    let end = Instant::now() + PATIENCE;
    while hole.is_none() && Instant::now() < end {
        let Ok(n) = line.recv(&mut buf) else { continue };
        let h = Datagram::parse(&buf[..n]).unwrap().header;
        if h.count == 0 {
            continue;
        }
        if let Some(&expect) = next.get(&h.unit) {
            if h.sequence > expect {
                hole = Some((h.unit, expect, h.sequence - expect));
            }
        }
        next.insert(h.unit, h.sequence + h.count as u32);
    }
    let (unit, first, missing) = hole.expect("--drop-both 10 leaves holes");
    let mut c = logged_in(grp_addr.unwrap());
    let codec = GapRequestCodec::new(100);
    let request = codec.request(Gap {
        session: session_id(unit, 1),
        first: first as u64,
        missing: missing as u64,
    });
    let mut bytes = Vec::new();
    codec.encode(&request, &mut bytes);
    c.stream.write_all(&bytes).unwrap();
    assert_eq!(
        c.next(),
        Some(vec![SessionMessage::GapResponse {
            unit,
            sequence: first,
            count: missing as u16,
            status: GapStatus::Accepted
        }])
    );
    let answer = loop {
        let n = gap_rx.recv(&mut buf).expect("the gap line's answer");
        let h = Datagram::parse(&buf[..n]).unwrap().header;
        if h.count > 0 {
            break h;
        }
    };
    assert_eq!(
        (answer.unit, answer.sequence, answer.count as u32),
        (unit, first, missing)
    );
    // Unit 1's spin continues what line A delivered of unit 1.
    let n0 = next[&1] as u64;
    let (outcome, _) = spin_attempt(spin_addr.unwrap(), n0);
    let SessionOutcome::Done(picture) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        picture.next >= n0,
        "Spin Finished {} for n0 {n0}",
        picture.next - 1
    );
    let mut adds = 0;
    let mut at = 0;
    while at < picture.blocks.len() {
        let len = u16::from_be_bytes([picture.blocks[at], picture.blocks[at + 1]]) as usize;
        let m = messages::decode(&picture.blocks[at + 2..at + 2 + len]).unwrap();
        adds += matches!(m, Message::AddOrder { .. }) as usize;
        at += 2 + len;
    }
    assert!(adds > 0, "a book of unit 1");
    child.kill().unwrap();
    child.wait().unwrap();
}
