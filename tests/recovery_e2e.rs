//! Recovery end to end (recovery.md R4, R5, R6): the simulator's
//! `nasdaq-itch` stream over loopback multicast to `tickgate run` on lines
//! A and B, with the simulator's re-request and GLIMPSE servers running in
//! this process, and test-only servers that misbehave. The answers come
//! from the gate socket, the counters from `/metrics`, the truth from the
//! simulator (`Simulator::glimpse_snapshot`: its book when the stream ends).
//!
//! Loopback only: multicast on interface 127.0.0.1 (TTL 1), every socket of
//! the test bound to 127.0.0.1. Waits are bounded polls for a condition,
//! never timing assertions. The GLIMPSE client's failure modes (R5) are
//! also driven alone, with short time limits, at the end of this file.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickgate::feed::{SnapshotFailure, VenueKind};
use tickgate::net::glimpse::{GlimpseClient, GlimpseOptions, Outcome};
use tickgate::sim::live::{send_paced, McastSender, Pace, SenderOptions};
use tickgate::sim::servers::{
    GlimpseOptions as ServerOptions, GlimpseServer, GlimpseSnapshot, History, RerequestOptions,
    RerequestServer, SnapshotSource,
};
use tickgate::sim::simulate::{default_lines, SimConfig, SimTruth, Simulator};
use tickgate::venue::nasdaq_itch::book::{Books, Level};
use tickgate::venue::nasdaq_itch::glimpse::encode_end_of_snapshot;
use tickgate::venue::nasdaq_itch::messages::{encode_to_vec, Header, Message, Side};
use tickgate::venue::nasdaq_itch::soupbin::{Decoder, Packet as Soup};
use tickgate::venue::nasdaq_itch::PRICE_SCALE;
use tickgate::venue::rerequest::Request;
use tickgate::wire::{PacketBuilder, SessionId, Symbol};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{bin, free_port, serial, terminate, wait_for, wait_within, PATIENCE};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

// ---------------------------------------------------------------- daemon

/// Lines A and B of a test: 239.255.96.`base` and `base+1`, port `port`.
fn groups(base: u8, port: u16) -> [SocketAddrV4; 2] {
    [
        SocketAddrV4::new(Ipv4Addr::new(239, 255, 96, base), port),
        SocketAddrV4::new(Ipv4Addr::new(239, 255, 96, base + 1), port),
    ]
}

struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    metrics: SocketAddr,
    /// Standard error, as read so far (the daemon's log).
    log: Arc<Mutex<String>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// Starts `tickgate run` with one `nasdaq-itch` feed "fx" on `groups` and
/// the recovery keys `recovery` (recovery.md's settings), and waits until
/// its gate answers (which it does once the groups are joined).
fn start(groups: [SocketAddrV4; 2], recovery: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = dir.path().join("tickgate.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[[feed]]
name = "fx"
venue = "nasdaq-itch"
stale_ms = 600000
source_max_age_ms = 600000
max_orders = 100000
clock_offset = "off"
{recovery}
[[feed.line]]
name = "A"
group = "{}"
port = {}
interface = "127.0.0.1"
rcvbuf = 4194304
[[feed.line]]
name = "B"
group = "{}"
port = {}
interface = "127.0.0.1"
rcvbuf = 4194304

[gate]
socket = "{}"

[metrics]
listen = "{metrics}"
"#,
            groups[0].ip(),
            groups[0].port(),
            groups[1].ip(),
            groups[1].port(),
            dir.path().join("gate.sock").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(bin())
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .env_remove("NOTIFY_SOCKET")
        // The re-request socket's address and the GLIMPSE attempts are
        // logged at info.
        .env("RUST_LOG", "warn,tickgate::net=info,tickgate::daemon=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    {
        let log = log.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut l = log.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
    }
    let d = Daemon {
        child,
        dir,
        metrics,
        log,
    };
    daemon::wait_for_gate(&d.socket());
    d
}

impl Daemon {
    fn socket(&self) -> PathBuf {
        self.dir.path().join("gate.sock")
    }

    fn ask(&self, request: &str) -> String {
        daemon::ask(&self.socket(), request)
    }

    /// The `STATUS` listing's FEED line of "fx".
    fn feed_status(&self) -> String {
        let mut s = UnixStream::connect(self.socket()).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.write_all(b"STATUS\n").unwrap();
        let mut feed = String::new();
        for line in BufReader::new(s).lines() {
            let line = line.unwrap();
            if line == "END" {
                break;
            }
            if line.starts_with("FEED fx ") {
                feed = line;
            }
        }
        feed
    }

    /// Every sample of `/metrics`, by full name.
    fn metrics(&self) -> BTreeMap<String, f64> {
        daemon::metrics(self.metrics)
    }

    /// The daemon's log so far.
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// R4: where the daemon's re-request socket receives answers (from its
    /// log line `re-request socket bound`; the socket is on the wildcard
    /// address, so 127.0.0.1 reaches it).
    fn rerequest_socket(&self) -> SocketAddr {
        let mut port = None;
        wait_for("the re-request socket in the log", || {
            port = self.log().lines().find_map(|l| {
                if !l.contains("re-request socket bound") {
                    return None;
                }
                let local = l
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("local="))?;
                local.parse::<SocketAddr>().ok().map(|a| a.port())
            });
            port.is_some()
        });
        SocketAddr::from((Ipv4Addr::LOCALHOST, port.unwrap()))
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// A counter or gauge of feed "fx".
fn feed(m: &BTreeMap<String, f64>, name: &str) -> u64 {
    let key = format!("tickgate_feed_{name}{{feed=\"fx\"}}");
    *m.get(&key)
        .unwrap_or_else(|| panic!("{key} not in /metrics")) as u64
}

fn line_sum(m: &BTreeMap<String, f64>, name: &str) -> u64 {
    ["A", "B"]
        .iter()
        .map(|l| {
            m.get(&format!("tickgate_line_{name}{{feed=\"fx\",line=\"{l}\"}}"))
                .copied()
                .unwrap_or(0.0) as u64
        })
        .sum()
}

/// Waits until the daemon has read and processed `datagrams` line
/// datagrams, then until no hole is open and every hole opened was filled
/// or declared lost (R2 deadlines have passed).
fn wait_settled(d: &Daemon, datagrams: u64) -> BTreeMap<String, f64> {
    let mut last = BTreeMap::new();
    wait_for(
        "the daemon to process every datagram and close its holes",
        || {
            last = d.metrics();
            line_sum(&last, "datagrams_received_total") == datagrams
                && line_sum(&last, "packets_received_total") == datagrams
                && feed(&last, "recovering") == 0
                && feed(&last, "holes_opened_total")
                    == feed(&last, "holes_filled_total") + feed(&last, "holes_lost_total")
        },
    );
    last
}

// ---------------------------------------------------------------- stream

/// The simulator's nasdaq-itch flow (10 symbols, 2,000 live orders),
/// `rate` messages a second for `secs` seconds.
fn itch(seed: u64, secs: f64, rate: u64, batch: usize) -> SimConfig {
    let mut c = SimConfig::new(seed);
    c.venue = VenueKind::NasdaqItch;
    c.symbols = 10;
    c.orders = 2_000;
    c.batch = batch;
    c.rate = rate;
    c.heartbeat_ms = 0;
    c.snapshot_ms = 0;
    c.duration_ns = (secs * 1e9) as i64;
    c
}

/// A simulator sending to a test's groups at its own pace, every data
/// packet recorded in `history` (the re-request server's), its book
/// readable at any time (the GLIMPSE server's source).
struct Stream {
    sim: Arc<Mutex<Simulator>>,
    history: Arc<Mutex<History>>,
    groups: [SocketAddrV4; 2],
    /// Datagrams handed to the sender so far.
    sent: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

fn new_history() -> Arc<Mutex<History>> {
    Arc::new(Mutex::new(History::new(10_000_000)))
}

impl Stream {
    fn new(
        mut cfg: SimConfig,
        groups: [SocketAddrV4; 2],
        loss: [f64; 2],
        history: Arc<Mutex<History>>,
    ) -> Stream {
        cfg.start_ns = tickgate::net::receiver::realtime_ns();
        cfg.lines = default_lines(&["A", "B"], Ipv4Addr::LOCALHOST, 40_000, 10_000);
        for ((line, group), loss) in cfg.lines.iter_mut().zip(groups).zip(loss) {
            line.dst = group;
            line.loss = loss;
        }
        let mut sim = Simulator::new(cfg).unwrap();
        sim.set_history(history.clone());
        Stream {
            sim: Arc::new(Mutex::new(sim)),
            history,
            groups,
            sent: Arc::new(AtomicU64::new(0)),
            thread: None,
        }
    }

    /// Starts sending, in the simulator's pace (the clock restarts now).
    fn start(&mut self) {
        let (sim, sent) = (self.sim.clone(), self.sent.clone());
        self.thread = Some(std::thread::spawn(move || {
            let mut sender = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
            let stop = AtomicBool::new(false);
            let mut buf = Vec::new();
            let items = std::iter::from_fn(|| {
                let ev = sim.lock().unwrap().next_into(&mut buf)?;
                sent.fetch_add(1, Ordering::Relaxed);
                Some((ev.t_ns, ev.dst, buf.clone()))
            });
            send_paced(
                &mut sender,
                items,
                Pace::Recorded { speed: 1.0 },
                &stop,
                None,
            )
            .unwrap();
        }));
    }

    fn wait_sent(&self, datagrams: u64) {
        wait_for("the stream to be under way", || {
            self.sent.load(Ordering::Relaxed) >= datagrams
        });
    }

    /// The feed's session (known from the start).
    fn session(&self) -> SessionId {
        self.sim.lock().unwrap().glimpse_snapshot().unwrap().session
    }

    /// R5: a GLIMPSE snapshot source reading the simulator as it runs.
    fn snapshot_source(&self) -> SnapshotSource {
        let sim = self.sim.clone();
        Arc::new(move || sim.lock().unwrap().glimpse_snapshot())
    }

    /// Waits for the end of the stream; then, when `heartbeat`, sends a
    /// channel heartbeat at the next sequence on both lines (a loss at
    /// the very end is then a hole like any other). Returns the truth and
    /// the final book.
    fn finish(mut self, heartbeat: bool) -> Finished {
        self.thread.take().unwrap().join().unwrap();
        let sim = self.sim.lock().unwrap();
        let snapshot = sim.glimpse_snapshot().unwrap();
        let mut truth = sim.truth().clone();
        drop(sim);
        let next = self.history.lock().unwrap().next_sequence();
        assert_eq!(next, snapshot.next_sequence);
        if heartbeat {
            let bytes = PacketBuilder::channel_heartbeat(snapshot.session, next).to_vec();
            let mut sender = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
            let now = tickgate::net::receiver::realtime_ns();
            let items: Vec<_> = self.groups.iter().map(|g| (now, *g, &bytes)).collect();
            send_paced(
                &mut sender,
                items,
                Pace::MaxSpeed,
                &AtomicBool::new(false),
                None,
            )
            .unwrap();
            truth.datagrams += 2;
        }
        Finished {
            book: true_book(&snapshot),
            truth,
        }
    }
}

struct Finished {
    truth: SimTruth,
    book: BTreeMap<String, Expected>,
}

/// One symbol of the simulator's book at the end: the gate's text of
/// each side (`-` when empty) and whether it is halted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expected {
    bid: String,
    ask: String,
    halted: bool,
}

fn side_text(level: Option<Level>) -> String {
    match level {
        None => "-".into(),
        Some(l) => {
            let mut px = Vec::new();
            tickgate::feed::check::write_price_bytes(&mut px, l.price as i64 * PRICE_SCALE);
            format!("{}@{}", String::from_utf8(px).unwrap(), l.shares)
        }
    }
}

/// The book a GLIMPSE snapshot of the simulator describes, by symbol.
fn true_book(snap: &GlimpseSnapshot) -> BTreeMap<String, Expected> {
    let mut books = Books::new(1_000_000);
    let mut names = BTreeMap::new();
    let mut halted = BTreeMap::new();
    for m in &snap.messages {
        match *m {
            Message::StockDirectory { header, stock } => {
                names.insert(header.locate, stock.to_string());
            }
            Message::TradingAction { header, state, .. } => {
                halted.insert(header.locate, state != b'T');
            }
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
            _ => {}
        }
    }
    names
        .into_iter()
        .map(|(locate, name)| {
            let best = books.best(locate);
            (
                name,
                Expected {
                    bid: side_text(best.bid),
                    ask: side_text(best.ask),
                    halted: halted.get(&locate).copied().unwrap_or(false),
                },
            )
        })
        .collect()
}

fn field<'a>(answer: &'a str, key: &str) -> &'a str {
    answer
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or("?")
}

/// What the gate answers for `symbol` differs from `e` (None: equal): a
/// halted symbol is `REJECT <symbol> halted`, any other `OK`, with no
/// other reason, and the simulator's best bid and offer.
fn mismatch(d: &Daemon, symbol: &str, e: &Expected) -> Option<String> {
    let a = d.ask(&format!("CHECK {symbol}"));
    let head = if e.halted {
        format!("REJECT {symbol} halted seq=")
    } else {
        format!("OK {symbol} seq=")
    };
    let same = a.starts_with(&head) && field(&a, "bid=") == e.bid && field(&a, "ask=") == e.ask;
    (!same).then(|| format!("{a}\n  expected {e:?}"))
}

/// Waits until every symbol of the simulator's final book is answered as
/// that book says (the stream is over: the daemon's state only converges).
fn wait_book(d: &Daemon, book: &BTreeMap<String, Expected>) {
    assert_eq!(book.len(), 10, "every symbol in the simulator's book");
    assert!(book.values().any(|e| e.bid != "-" && e.ask != "-"));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let last = book
            .iter()
            .filter_map(|(s, e)| mismatch(d, s, e))
            .collect::<Vec<_>>();
        if last.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the gate's answers differ from the simulator's book:\n{}\nlog:\n{}",
            last.join("\n"),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every symbol answered without `suspect` (OK, or REJECT halted only).
fn every_symbol_trusted(d: &Daemon) -> bool {
    (1..=10).all(|i| {
        let s = format!("S{i:05}");
        let a = d.ask(&format!("CHECK {s}"));
        a.starts_with(&format!("OK {s} seq=")) || a.starts_with(&format!("REJECT {s} halted seq="))
    })
}

// ------------------------------------------------ (a) R4: re-requests

/// Loss on both lines, answered by the simulator's re-request server: no
/// message declared lost, and every symbol's quote is the simulator's
/// book.
#[test]
fn loss_on_both_lines_is_recovered_by_rerequest() {
    let _serial = serial();
    let g = groups(1, 46401);
    let history = new_history();
    let server =
        RerequestServer::spawn(loopback(), history.clone(), RerequestOptions::default()).unwrap();
    let mut cfg = itch(41, 3.0, 1_000, 4);
    // Every 25th data packet lost on both lines, and 10% on each.
    cfg.drop_both_every = Some(25);
    let mut stream = Stream::new(cfg, g, [0.10, 0.10], history);
    let d = start(
        g,
        &format!(
            "gap_hold_us = 2000\nrerequest = [\"{}\"]\nrerequest_timeout_ms = 50\nrerequest_attempts = 5",
            server.local_addr()
        ),
    );
    stream.start();
    let end = stream.finish(true);
    let t = &end.truth;
    assert!(t.packets_lost_all_lines > 20, "{t:?}");
    let m = wait_settled(&d, t.datagrams);
    assert_eq!(feed(&m, "channel_messages_lost_total"), 0, "{}", d.log());
    assert_eq!(feed(&m, "holes_lost_total"), 0);
    assert!(feed(&m, "holes_opened_total") >= 1);
    assert_eq!(
        feed(&m, "holes_opened_total"),
        feed(&m, "holes_filled_total")
    );
    // What no line delivered came from the server (and perhaps a little
    // more: a line's copy later than the hold).
    assert!(
        feed(&m, "messages_recovered_total") >= t.messages_lost_all_lines,
        "{} recovered, {} lost on every line",
        feed(&m, "messages_recovered_total"),
        t.messages_lost_all_lines
    );
    assert!(feed(&m, "rerequests_sent_total") >= 1);
    assert!(feed(&m, "rerequest_answers_total") >= 1);
    assert_eq!(feed(&m, "rerequest_answers_wrong_source_total"), 0);
    assert_eq!(feed(&m, "rerequest_answers_wrong_session_total"), 0);
    assert_eq!(feed(&m, "session_changes_total"), 0);
    wait_book(&d, &end.book);
    let status = d.feed_status();
    assert!(status.contains(" recovery=live "), "{status}");
    let counts = server.stop();
    assert!(counts.answered >= 1, "{counts:?}");
    assert_eq!(counts.other_session + counts.malformed, 0, "{counts:?}");
}

// ---------------------------------------------- (b) R5: GLIMPSE snapshot

/// The daemon joins a session under way (`no_snapshot`, venues.md): the
/// simulator's GLIMPSE server rebuilds every book, every symbol is trusted
/// within seconds, and the book matches the simulator's at the end.
/// R5 end to end: the session began well before the daemon; the GLIMPSE
/// server (`soupbin_session`: the name its Login Accepted gives, the
/// multicast session's when `None`) rebuilds every book, which then
/// equals the simulator's, with nothing lost and one snapshot.
fn late_join_rebuilt(g: [SocketAddrV4; 2], seed: u64, soupbin_session: Option<SessionId>) {
    let mut stream = Stream::new(itch(seed, 4.0, 1_000, 4), g, [0.0, 0.0], new_history());
    let mut opts = ServerOptions::new("tguser", "tgpass");
    opts.soupbin_session = soupbin_session;
    let server = GlimpseServer::spawn(loopback(), stream.snapshot_source(), opts).unwrap();
    stream.start();
    stream.wait_sent(300);
    let d = start(
        g,
        &format!(
            "snapshot = {{ address = \"{}\", username = \"tguser\", password = \"tgpass\" }}",
            server.local_addr()
        ),
    );
    wait_within(
        Duration::from_secs(15),
        "every symbol trusted after the snapshot",
        &mut || {
            every_symbol_trusted(&d) && feed(&d.metrics(), "glimpse_snapshots_applied_total") >= 1
        },
    );
    let end = stream.finish(true);
    wait_for("every datagram read is processed, no hole open", || {
        let m = d.metrics();
        line_sum(&m, "datagrams_received_total") == line_sum(&m, "packets_received_total")
            && feed(&m, "recovering") == 0
    });
    wait_book(&d, &end.book);
    let m = d.metrics();
    assert_eq!(feed(&m, "channel_messages_lost_total"), 0);
    assert_eq!(feed(&m, "glimpse_snapshots_applied_total"), 1);
    assert_eq!(feed(&m, "snapshots_started_total"), 1);
    assert_eq!(feed(&m, "snapshots_failed_total"), 0);
    let status = d.feed_status();
    assert!(status.contains(" recovery=live "), "{status}");
    let counts = server.stop();
    assert_eq!(
        (counts.logins_accepted, counts.snapshots_sent),
        (1, 1),
        "{counts:?}"
    );
}

#[test]
fn a_late_join_is_rebuilt_from_glimpse() {
    let _serial = serial();
    late_join_rebuilt(groups(3, 46402), 42, None);
}

/// R5: a GLIMPSE server that names its SoupBinTCP session differently
/// from the multicast session (nothing in SoupBinTCP or GLIMPSE promises
/// they are equal) still rebuilds every book: `G` alone places the
/// snapshot.
#[test]
fn a_glimpse_server_with_its_own_session_name_rebuilds_the_books() {
    let _serial = serial();
    late_join_rebuilt(
        groups(13, 46408),
        48,
        Some(SessionId::parse("GLIMPSE001").unwrap()),
    );
}

// ------------------------------------- (c) R5 failures: a scripted server

/// What a scripted GLIMPSE server does on one connection (after reading
/// the Login Request, except `Garbage` and `Silent` which ignore it).
#[derive(Clone)]
enum Script {
    /// Login Rejected `A`.
    Reject,
    /// Login Accepted, three messages, then the connection closes.
    CloseAfterAccept,
    /// Login Accepted, the messages, then End of Session `Z`.
    EndOfSession,
    /// Nothing at all; waits for the client to give up.
    Silent,
    /// Login Accepted, then server heartbeats, never `G`.
    HeartbeatsOnly,
    /// Bytes that are not SoupBinTCP (an unknown packet type).
    Garbage,
    /// Login Accepted, the messages, then a `G` whose number is not one.
    BadEnd,
    /// Sequenced Data before Login Accepted.
    DataBeforeLogin,
    /// Login Accepted, an ITCH message cut short, then a valid `G`.
    BadMessage,
    /// Server heartbeats until the flag is set, then `Serve`.
    Gated(Arc<AtomicBool>),
    /// Login Accepted, then a Sequenced Data packet one byte every 100 ms:
    /// bytes flow, but no whole packet.
    Trickle,
    /// Login Accepted, then 1,000-byte messages of an unknown type, never
    /// `G`.
    Endless,
    /// The snapshot as the source has it now, then heartbeats until the
    /// client logs out.
    Serve,
}

type Source = Arc<dyn Fn() -> GlimpseSnapshot + Send + Sync>;

/// A test-only GLIMPSE server on 127.0.0.1: connection `i` follows
/// `scripts[i]` (the last one repeats).
struct Scripted {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    /// When each connection was accepted.
    accepted: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Scripted {
    fn spawn(scripts: Vec<Script>, source: Source) -> Scripted {
        let listener = TcpListener::bind(loopback()).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (connections, accepted, stop) =
                (connections.clone(), accepted.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            accepted.lock().unwrap().push(Instant::now());
                            let i = connections.fetch_add(1, Ordering::Relaxed) as usize;
                            let script = scripts[i.min(scripts.len() - 1)].clone();
                            let (source, stop) = (source.clone(), stop.clone());
                            std::thread::spawn(move || {
                                let _ = run_script(s, script, &*source, &stop);
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Scripted {
            addr,
            connections,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn soup(s: &mut TcpStream, p: Soup<'_>) -> std::io::Result<()> {
    s.write_all(&p.encode_to_vec().unwrap())
}

/// Reads until the client's Login Request (or its close, or 5 s).
fn read_login(s: &mut TcpStream) -> bool {
    let mut decoder = Decoder::new();
    let mut buf = [0u8; 1024];
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if let Ok(Some(Soup::LoginRequest(_))) = decoder.next_packet() {
            return true;
        }
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => decoder.push(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return false,
        }
    }
    false
}

/// Sends server heartbeats every 100 ms until the client closes the
/// connection, `until` is set, or 60 s pass. Returns whether `until` was
/// set (the client is still there).
fn heartbeats_until(s: &mut TcpStream, until: Option<&AtomicBool>, stop: &AtomicBool) -> bool {
    let mut buf = [0u8; 1024];
    let end = Instant::now() + PATIENCE;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        if until.is_some_and(|f| f.load(Ordering::Relaxed)) {
            return true;
        }
        if soup(s, Soup::ServerHeartbeat).is_err() {
            return false;
        }
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return false,
        }
    }
    false
}

/// Waits for the client to close (no heartbeats sent).
fn wait_closed(s: &mut TcpStream, stop: &AtomicBool) {
    let mut buf = [0u8; 1024];
    let end = Instant::now() + PATIENCE;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

fn run_script(
    mut s: TcpStream,
    script: Script,
    source: &(dyn Fn() -> GlimpseSnapshot + Send + Sync),
    stop: &AtomicBool,
) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    if matches!(script, Script::Garbage) {
        s.write_all(&[0x00, 0x03, b'?', 0xde, 0xad])?;
        wait_closed(&mut s, stop);
        return Ok(());
    }
    if matches!(script, Script::Silent) {
        wait_closed(&mut s, stop);
        return Ok(());
    }
    if !read_login(&mut s) {
        return Ok(());
    }
    if let Script::Gated(flag) = &script {
        if !heartbeats_until(&mut s, Some(flag), stop) {
            return Ok(());
        }
    }
    let snap = source();
    let accept = |s: &mut TcpStream| {
        soup(
            s,
            Soup::LoginAccepted {
                session: snap.session,
                sequence: 1,
            },
        )
    };
    let messages = |s: &mut TcpStream, n: usize| -> std::io::Result<()> {
        for m in snap.messages.iter().take(n) {
            soup(s, Soup::SequencedData(&encode_to_vec(m)))?;
        }
        Ok(())
    };
    let end_of_snapshot = |s: &mut TcpStream| {
        let mut g = Vec::new();
        encode_end_of_snapshot(snap.next_sequence, &mut g);
        soup(s, Soup::SequencedData(&g))
    };
    match script {
        Script::Reject => soup(&mut s, Soup::LoginRejected { reason: b'A' })?,
        Script::CloseAfterAccept => {
            accept(&mut s)?;
            messages(&mut s, 3)?;
            return Ok(());
        }
        Script::EndOfSession => {
            accept(&mut s)?;
            messages(&mut s, usize::MAX)?;
            soup(&mut s, Soup::EndOfSession)?;
        }
        Script::HeartbeatsOnly => {
            accept(&mut s)?;
            heartbeats_until(&mut s, None, stop);
            return Ok(());
        }
        Script::BadEnd => {
            accept(&mut s)?;
            messages(&mut s, usize::MAX)?;
            let mut g = vec![b'G'];
            g.extend_from_slice(b"  twelve and a half ");
            soup(&mut s, Soup::SequencedData(&g))?;
        }
        Script::DataBeforeLogin => {
            soup(
                &mut s,
                Soup::SequencedData(&encode_to_vec(&snap.messages[0])),
            )?;
        }
        Script::BadMessage => {
            accept(&mut s)?;
            messages(&mut s, usize::MAX)?;
            // An Add Order cut to half its size.
            let add = snap
                .messages
                .iter()
                .find(|m| matches!(m, Message::AddOrder { .. }))
                .map(encode_to_vec)
                .unwrap();
            soup(&mut s, Soup::SequencedData(&add[..add.len() / 2]))?;
            end_of_snapshot(&mut s)?;
        }
        Script::Gated(_) | Script::Serve => {
            accept(&mut s)?;
            messages(&mut s, usize::MAX)?;
            end_of_snapshot(&mut s)?;
            heartbeats_until(&mut s, None, stop);
            return Ok(());
        }
        Script::Trickle => {
            accept(&mut s)?;
            let mut packet = Vec::new();
            Soup::SequencedData(&[b'S'; 1000])
                .encode(&mut packet)
                .unwrap();
            for b in packet {
                if stop.load(Ordering::Relaxed) || s.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            return Ok(());
        }
        Script::Endless => {
            accept(&mut s)?;
            let msg = [b'~'; 1000];
            while !stop.load(Ordering::Relaxed) && soup(&mut s, Soup::SequencedData(&msg)).is_ok() {
            }
            return Ok(());
        }
        Script::Garbage | Script::Silent => unreachable!(),
    }
    wait_closed(&mut s, stop);
    Ok(())
}

/// R5 through the daemon: a late join whose snapshot server first rejects
/// the login, then sends a snapshot with a message that does not parse,
/// then serves a good one. The daemon keeps running, retries with
/// backoff, every symbol keeps `no_snapshot` meanwhile, then all are
/// trusted and match the simulator's book.
#[test]
fn glimpse_failures_are_retried_and_recovered() {
    let _serial = serial();
    let g = groups(5, 46403);
    let mut stream = Stream::new(itch(43, 8.0, 1_000, 4), g, [0.0, 0.0], new_history());
    let release = Arc::new(AtomicBool::new(false));
    let source: Source = {
        let s = stream.snapshot_source();
        Arc::new(move || s().unwrap())
    };
    let server = Scripted::spawn(
        vec![
            Script::Reject,
            Script::BadMessage,
            Script::Gated(release.clone()),
        ],
        source,
    );
    stream.start();
    stream.wait_sent(300);
    let mut d = start(
        g,
        &format!(
            "snapshot = {{ address = \"{}\", username = \"tguser\", password = \"tgpass\" }}",
            server.addr
        ),
    );
    // Two failed attempts; the third is connected and waits for us.
    wait_for("two failed attempts and a third connected", || {
        let m = d.metrics();
        feed(&m, "snapshots_failed_total") == 2
            && feed(&m, "snapshots_started_total") == 3
            && server.connections() == 3
    });
    assert!(d.running());
    assert_eq!(feed(&d.metrics(), "glimpse_snapshots_applied_total"), 0);
    // R5's backoff: each attempt failed at once, the next waited 1 s,
    // then 2 s (lower bounds only: a busy machine makes them later).
    let at = server.accepted.lock().unwrap().clone();
    assert!(at[1] - at[0] >= Duration::from_millis(900), "{at:?}");
    assert!(at[2] - at[1] >= Duration::from_millis(1_900), "{at:?}");
    let status = d.feed_status();
    assert!(
        status.contains(" recovery=snapshot_in_progress:last_failure=malformed "),
        "{status}"
    );
    let log = d.log();
    assert!(log.contains("login_rejected"), "{log}");
    // Nothing of a failed attempt was applied: every symbol the feed knows
    // (from the order flow since the join) keeps its cause.
    let answers: Vec<String> = (1..=10).map(|i| d.ask(&format!("CHECK S{i:05}"))).collect();
    let known: Vec<&String> = answers
        .iter()
        .filter(|a| !a.contains(" unknown_symbol "))
        .collect();
    assert!(!known.is_empty(), "{answers:?}");
    for a in &known {
        assert!(
            a.starts_with("REJECT ") && a.ends_with(" suspect=no_snapshot"),
            "{a}"
        );
    }
    // The server behaves now.
    release.store(true, Ordering::Relaxed);
    wait_within(
        Duration::from_secs(15),
        "every symbol trusted after the third attempt",
        &mut || every_symbol_trusted(&d),
    );
    let end = stream.finish(true);
    wait_for("every datagram read is processed, no hole open", || {
        let m = d.metrics();
        line_sum(&m, "datagrams_received_total") == line_sum(&m, "packets_received_total")
            && feed(&m, "recovering") == 0
    });
    wait_book(&d, &end.book);
    let m = d.metrics();
    assert_eq!(feed(&m, "glimpse_snapshots_applied_total"), 1);
    assert_eq!(feed(&m, "snapshots_failed_total"), 2);
    assert_eq!(feed(&m, "channel_messages_lost_total"), 0);
    let status = d.feed_status();
    assert!(status.contains(" recovery=live "), "{status}");
    assert!(d.running());
}

// ------------------------------------------ (d) R4: misbehaving servers

/// A datagram a fake server received, and the request it was.
type Received = (Instant, Option<Request>);

/// A UDP "re-request server" on 127.0.0.1 that records every request and
/// answers it with `answer` (nothing when it returns `None`).
struct FakeRerequest {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Received>>>,
    answers: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeRerequest {
    fn spawn(answer: impl Fn(&Request) -> Option<Vec<u8>> + Send + 'static) -> FakeRerequest {
        let socket = UdpSocket::bind(loopback()).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (requests, answers, stop) = (requests.clone(), answers.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    let req = Request::decode(&buf[..n]);
                    requests.lock().unwrap().push((Instant::now(), req));
                    if let Some(bytes) = req.as_ref().and_then(&answer) {
                        if socket.send_to(&bytes, from).is_ok() {
                            answers.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        };
        FakeRerequest {
            addr,
            requests,
            answers,
            stop,
            thread: Some(thread),
        }
    }

    fn received(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeRerequest {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An ITCH packet that, if a feed applied it, would show: a halt of a
/// symbol the simulator never names, and a bid far above any of S00001's.
fn intruder(session: SessionId, sequence: u64, salt: u64) -> Vec<u8> {
    let header = |locate| Header {
        locate,
        tracking: 0,
        timestamp: 1,
    };
    let mut b = PacketBuilder::new();
    b.start(session, sequence);
    b.push_raw(&encode_to_vec(&Message::TradingAction {
        header: header(999),
        stock: Symbol::parse("ZZZZZ").unwrap(),
        state: b'H',
        reason: *b"T1  ",
    }));
    b.push_raw(&encode_to_vec(&Message::AddOrder {
        header: header(1),
        order_ref: 9_000_000_000 + salt,
        side: Side::Buy,
        shares: 777,
        stock: Symbol::parse("S00001").unwrap(),
        price: 99_990_000,
        attribution: None,
    }));
    b.bytes().to_vec()
}

const SILENT_KEYS: &str = "gap_hold_us = 1000\nrerequest_timeout_ms = 20\nrerequest_attempts = 2";

/// A server that never answers: holes are declared lost after the
/// attempts (R2), every request was counted and well formed, and no more
/// than 100 left in any second (R4).
#[test]
fn a_server_that_never_answers_loses_holes_within_the_request_ceiling() {
    let _serial = serial();
    let g = groups(7, 46404);
    let server = FakeRerequest::spawn(|_| None);
    // Every other packet lost on both lines: far more holes than 100
    // requests a second can ask for.
    let mut cfg = itch(44, 2.0, 1_000, 1);
    cfg.drop_both_every = Some(2);
    let mut stream = Stream::new(cfg, g, [0.0, 0.0], new_history());
    let session = stream.session();
    let d = start(
        g,
        &format!("{SILENT_KEYS}\nrerequest = [\"{}\"]", server.addr),
    );
    stream.start();
    let end = stream.finish(false);
    let t = &end.truth;
    let m = wait_settled(&d, t.datagrams);
    assert!(feed(&m, "holes_lost_total") > 100, "{m:?}");
    assert_eq!(feed(&m, "holes_filled_total"), 0);
    assert_eq!(
        feed(&m, "channel_messages_lost_total"),
        t.expected_channel_lost
    );
    assert_eq!(feed(&m, "messages_recovered_total"), 0);
    assert_eq!(feed(&m, "rerequest_answers_total"), 0);
    let sent = feed(&m, "rerequests_sent_total");
    assert!(sent >= 2, "{m:?}");
    wait_for("every request counted to reach the server", || {
        server.received().len() as u64 == sent
    });
    let got = server.received();
    for (_, r) in &got {
        let r = r.expect("20-byte requests");
        assert_eq!(r.session, session);
        assert!(r.sequence >= 2 && r.count >= 1, "{r:?}");
    }
    // R4's ceiling, with room for the receive side's scheduling: no
    // 0.9 s window holds more than 100 requests.
    for (i, (at, _)) in got.iter().enumerate() {
        let within = got[i..]
            .iter()
            .take_while(|(t, _)| t.duration_since(*at) < Duration::from_millis(900))
            .count();
        assert!(within <= 100, "{within} requests within 0.9 s");
    }
    let span = got.last().unwrap().0.duration_since(got[0].0).as_secs_f64();
    assert!(
        (sent as f64) <= 100.0 * (span + 1.0),
        "{sent} in {span:.2} s"
    );
}

/// A server answering with another session's packets: every answer is
/// dropped and counted, the session and the books are untouched (R4), and
/// the holes are declared lost as if it were silent.
#[test]
fn answers_of_another_session_are_counted_and_change_nothing() {
    let _serial = serial();
    let g = groups(9, 46405);
    let other = SessionId::parse("OTHERSESS1").unwrap();
    let server = FakeRerequest::spawn(move |r| Some(intruder(other, r.sequence, r.sequence)));
    let mut cfg = itch(45, 2.0, 1_000, 4);
    cfg.drop_both_every = Some(20);
    let mut stream = Stream::new(cfg, g, [0.0, 0.0], new_history());
    let d = start(
        g,
        &format!(
            "gap_hold_us = 1000\nrerequest_timeout_ms = 20\nrerequest_attempts = 3\nrerequest = [\"{}\"]",
            server.addr
        ),
    );
    stream.start();
    let end = stream.finish(false);
    let t = &end.truth;
    let m = wait_settled(&d, t.datagrams);
    let answered = server.answers.load(Ordering::Relaxed);
    assert!(answered >= 1);
    let mut m = m;
    wait_for("every answer counted", || {
        m = d.metrics();
        feed(&m, "rerequest_answers_total") == answered
    });
    assert_eq!(feed(&m, "rerequest_answers_wrong_session_total"), answered);
    assert_eq!(feed(&m, "messages_recovered_total"), 0);
    assert_eq!(feed(&m, "session_changes_total"), 0);
    assert!(feed(&m, "holes_lost_total") >= 1);
    assert_eq!(
        feed(&m, "channel_messages_lost_total"),
        t.expected_channel_lost
    );
    let z = d.ask("CHECK ZZZZZ");
    assert!(z.starts_with("REJECT ZZZZZ unknown_symbol"), "{z}");
    let s1 = d.ask("CHECK S00001");
    assert!(!s1.contains("@777 "), "{s1}");
    let status = d.feed_status();
    assert!(
        status.contains(" state=live ") && status.contains(" session_epoch=0 "),
        "{status}"
    );
}

/// A stranger sends valid-looking packets of the feed's own session to the
/// daemon's re-request socket while the real server answers the requests:
/// the stranger's datagrams are dropped and counted (R4: only a configured
/// server's answers count), and the feed ends exactly as the simulator's
/// book.
#[test]
fn a_stranger_on_the_rerequest_socket_changes_nothing() {
    let _serial = serial();
    let g = groups(11, 46406);
    let history = new_history();
    let server =
        RerequestServer::spawn(loopback(), history.clone(), RerequestOptions::default()).unwrap();
    let mut cfg = itch(46, 2.0, 1_000, 4);
    cfg.drop_both_every = Some(20);
    let mut stream = Stream::new(cfg, g, [0.0, 0.0], history.clone());
    let session = stream.session();
    let d = start(
        g,
        &format!(
            "gap_hold_us = 2000\nrerequest_timeout_ms = 50\nrerequest_attempts = 5\nrerequest = [\"{}\"]",
            server.local_addr()
        ),
    );
    let target = d.rerequest_socket();
    stream.start();
    // The stranger: packets at and just past what the provider has sent,
    // 2,000 a second while the stream runs.
    let stranger = UdpSocket::bind(loopback()).unwrap();
    let mut sent = 0u64;
    while stream.thread.as_ref().is_some_and(|t| !t.is_finished()) {
        let next = history.lock().unwrap().next_sequence();
        for k in 0..2 {
            let bytes = intruder(session, next + k, sent);
            if stranger.send_to(&bytes, target).is_ok() {
                sent += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(sent > 1_000);
    let end = stream.finish(true);
    let t = &end.truth;
    let m = wait_settled(&d, t.datagrams);
    let wrong = feed(&m, "rerequest_answers_wrong_source_total");
    assert!(wrong >= 1 && wrong <= sent, "{wrong} of {sent}");
    assert_eq!(feed(&m, "channel_messages_lost_total"), 0);
    assert_eq!(feed(&m, "holes_lost_total"), 0);
    assert!(feed(&m, "messages_recovered_total") >= t.messages_lost_all_lines);
    assert_eq!(feed(&m, "rerequest_answers_wrong_session_total"), 0);
    let z = d.ask("CHECK ZZZZZ");
    assert!(z.starts_with("REJECT ZZZZZ unknown_symbol"), "{z}");
    wait_book(&d, &end.book);
}

// ------------------------------- (c) R5 failures at the GLIMPSE client

fn fixed_snapshot() -> GlimpseSnapshot {
    let header = |locate| Header {
        locate,
        tracking: 0,
        timestamp: 34_200_000_000_000,
    };
    let stock = Symbol::parse("AAPL").unwrap();
    GlimpseSnapshot {
        session: SessionId::parse("000010059A").unwrap(),
        next_sequence: 42,
        messages: vec![
            Message::SystemEvent {
                header: header(0),
                event: b'O',
            },
            Message::StockDirectory {
                header: header(1),
                stock,
            },
            Message::AddOrder {
                header: header(1),
                order_ref: 7,
                side: Side::Buy,
                shares: 100,
                stock,
                price: 1_500_000,
                attribution: None,
            },
        ],
    }
}

fn client_options(address: SocketAddr) -> GlimpseOptions {
    let mut o = GlimpseOptions::new(address, "tguser", "tgpass");
    o.silence = Duration::from_millis(300);
    o.whole = Duration::from_millis(1_000);
    o.heartbeat = Duration::from_millis(100);
    o.max_bytes = 256 << 10;
    o
}

fn outcome(client: &GlimpseClient) -> Outcome {
    let end = Instant::now() + PATIENCE;
    loop {
        if let Some(o) = client.try_outcome() {
            return o;
        }
        assert!(Instant::now() < end, "no outcome");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Each R5 failure is reported with its reason (the core then keeps the
/// symbols' causes and backs off: tests/snapshot_core.rs; the held-datagram
/// bound is the core's too), and the same client succeeds once the server
/// behaves.
#[test]
fn the_glimpse_client_reports_every_failure_then_recovers() {
    let snap = fixed_snapshot();
    let source: Source = {
        let s = snap.clone();
        Arc::new(move || s.clone())
    };
    let cases = [
        (Script::Reject, SnapshotFailure::LoginRejected),
        (Script::CloseAfterAccept, SnapshotFailure::Closed),
        (Script::EndOfSession, SnapshotFailure::Closed),
        (Script::Silent, SnapshotFailure::Silence),
        (Script::HeartbeatsOnly, SnapshotFailure::NoEndOfSnapshot),
        (Script::Garbage, SnapshotFailure::Malformed),
        (Script::BadEnd, SnapshotFailure::Malformed),
        (Script::DataBeforeLogin, SnapshotFailure::Malformed),
        // R5: silence counts whole packets, not bytes.
        (Script::Trickle, SnapshotFailure::Silence),
        // R5: the snapshot's own messages are bounded (`snapshot.max_mib`).
        (Script::Endless, SnapshotFailure::SnapshotBound),
    ];
    let mut scripts: Vec<Script> = cases.iter().map(|(s, _)| s.clone()).collect();
    scripts.push(Script::Serve);
    let server = Scripted::spawn(scripts, source);

    // Nothing listening: refused.
    let closed = {
        let l = TcpListener::bind(loopback()).unwrap();
        l.local_addr().unwrap()
    };
    let client = GlimpseClient::spawn("refused", client_options(closed)).unwrap();
    client.start();
    match outcome(&client) {
        Outcome::Failed(SnapshotFailure::Refused, _) => {}
        other => panic!("{other:?}"),
    }
    drop(client);

    let client = GlimpseClient::spawn("scripted", client_options(server.addr)).unwrap();
    for (i, (_, want)) in cases.iter().enumerate() {
        client.start();
        match outcome(&client) {
            Outcome::Failed(why, detail) => {
                assert_eq!(why, *want, "case {i}: {detail}")
            }
            Outcome::Done(s) => panic!("case {i}: a snapshot {s:?}"),
        }
    }
    // The server behaves: the snapshot as sent.
    client.start();
    let Outcome::Done(got) = outcome(&client) else {
        panic!("no snapshot once the server behaves")
    };
    assert_eq!((got.session, got.next), (snap.session, 42));
    let mut blocks = Vec::new();
    for m in &snap.messages {
        let b = encode_to_vec(m);
        blocks.extend_from_slice(&(b.len() as u16).to_be_bytes());
        blocks.extend_from_slice(&b);
    }
    assert_eq!(got.blocks, blocks);
    assert_eq!(server.connections(), cases.len() as u64 + 1);
}
