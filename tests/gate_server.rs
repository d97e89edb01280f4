//! The gate socket server end to end: a `Feed` publishing into the
//! lock-free table, the server answering over a Unix socket in each I/O
//! mode, compared with `gate::protocol::answer` in-process.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tickgate::feed::check::SymbolLookup;
use tickgate::feed::reader::{feed_table, TablePublisher};
use tickgate::feed::{ClockOffset, Feed, FeedSettings};
use tickgate::gate::protocol::answer;
use tickgate::gate::server::{serve, Backend, Gate, IoMode, ServerConfig, ServerHandle};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

#[path = "common/scenarios.rs"]
mod scenarios;

/// The clock of every check in these tests (answers are deterministic).
const NOW: i64 = 1_764_489_600_000_000_000;
const MS: i64 = 1_000_000;

/// The live `Gate` with its clock pinned to `NOW`.
struct AtNow(Gate);

impl Backend for AtNow {
    fn answer(&self, line: &[u8], _now: i64, out: &mut Vec<u8>) {
        self.0.answer(line, NOW, out)
    }
    fn status_feeds(&self) -> usize {
        self.0.status_feeds()
    }
    fn status_feed(&self, feed: usize, _now: i64, out: &mut Vec<u8>) -> u32 {
        self.0.status_feed(feed, NOW, out)
    }
    fn status_symbol(&self, feed: usize, slot: u32, _now: i64, out: &mut Vec<u8>) {
        self.0.status_symbol(feed, slot, NOW, out)
    }
}

fn sym(s: &str) -> Symbol {
    Symbol::parse(s).unwrap()
}

fn quote_packet(seq: u64, q: &Quote) -> Vec<u8> {
    let mut b = PacketBuilder::new();
    b.start(SessionId::parse("S1").unwrap(), seq).quote(q);
    b.bytes().to_vec()
}

/// A feed with: EURUSD fresh (OK), GBPUSD old (stale), USDJPY configured
/// without data, published into a table.
fn market() -> (Feed<TablePublisher>, Gate) {
    let settings = FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: 1000,
        ..FeedSettings::default()
    };
    let (publisher, reader) = feed_table(&settings);
    let mut feed = Feed::with_publisher(settings, 1, publisher);
    feed.add_symbol(sym("USDJPY")).unwrap();
    let bid = Some(Side {
        px: 1_085_120_000,
        qty: 1_000_000,
    });
    let ask = Some(Side {
        px: 1_085_150_000,
        qty: 2_000_000,
    });
    let eur = Quote::new(sym("EURUSD"), 41, (NOW - 150 * MS) as u64, bid, ask);
    let gbp = Quote::new(sym("GBPUSD"), 7, (NOW - 3000 * MS) as u64, None, ask);
    feed.on_datagram(0, &quote_packet(1, &gbp), NOW - 3000 * MS);
    feed.on_datagram(0, &quote_packet(2, &eur), NOW - 100 * MS);
    let gate = Gate::new(vec![("md1".to_string(), reader)]);
    (feed, gate)
}

/// Requests with their in-process answers (`protocol::answer` over the
/// feed itself, not the table).
fn requests(feed: &Feed<TablePublisher>) -> Vec<(String, String)> {
    let lines = [
        "CHECK EURUSD",
        "CHECK GBPUSD",
        "CHECK USDJPY",
        "CHECK NOPE",
        "CHECK EURUSD stale_ms=50",
        "CHECK EURUSD source_ms=100 stale_ms=200",
        "CHECK EURUSD stale_ms=100000",
        "CHECK EURUSD source_ms=x",
        "CHECK EURUSD stale_ms=1 stale_ms=1",
        "CHECK EURUSD  stale_ms=1",
        "CHECK TOOLONGSYMBOL",
        "CHECK",
        "PING",
        "PING x",
        "",
        "check EURUSD",
        "FOO BAR",
    ];
    let feeds: [&dyn SymbolLookup; 1] = [feed];
    lines
        .iter()
        .map(|l| {
            let mut out = Vec::new();
            answer(l.as_bytes(), &feeds, NOW, &mut out);
            (l.to_string(), String::from_utf8(out).unwrap())
        })
        .collect()
}

fn config(dir: &Path, io: IoMode) -> ServerConfig {
    ServerConfig {
        path: dir.join("gate.sock"),
        io,
        ..ServerConfig::default()
    }
}

fn start(io: IoMode) -> (tempfile::TempDir, Feed<TablePublisher>, ServerHandle) {
    let dir = tempfile::tempdir().unwrap();
    let (feed, gate) = market();
    let handle = serve(&config(dir.path(), io), AtNow(gate)).unwrap();
    (dir, feed, handle)
}

fn connect(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

fn read_lines(r: &mut impl BufRead, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let mut l = String::new();
            assert!(r.read_line(&mut l).unwrap() > 0, "connection closed early");
            l
        })
        .collect()
}

const MODES: [IoMode; 3] = [IoMode::Blocking, IoMode::Epoll, IoMode::BusyPoll];

#[test]
fn answers_equal_the_in_process_answers() {
    for io in MODES {
        let (_dir, feed, server) = start(io);
        let expected = requests(&feed);
        // Sanity: the fixture covers each kind of answer.
        let kinds: Vec<&str> = expected.iter().map(|(_, a)| &a[..2]).collect();
        for k in ["OK", "RE", "ER", "PO"] {
            assert!(kinds.contains(&k), "{k} missing");
        }
        assert!(expected[0]
            .1
            .starts_with("OK EURUSD seq=41 bid=1.08512@1000000 ask=1.08515@2000000"));
        let s = connect(server.path());
        let mut r = BufReader::new(s.try_clone().unwrap());
        for (req, want) in &expected {
            (&s).write_all(format!("{req}\n").as_bytes()).unwrap();
            let got = read_lines(&mut r, 1).remove(0);
            assert_eq!(&got, want, "{io:?}: {req:?}");
        }
        // `\r\n` is tolerated.
        (&s).write_all(b"CHECK EURUSD\r\n").unwrap();
        assert_eq!(read_lines(&mut r, 1)[0], expected[0].1);
        server.stop();
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    for io in MODES {
        let (_dir, feed, server) = start(io);
        let expected = requests(&feed);
        let mut batch = String::new();
        let mut want = Vec::new();
        for i in 0..3000 {
            let (req, ans) = &expected[i % expected.len()];
            batch += req;
            batch += "\n";
            want.push(ans.clone());
        }
        let s = connect(server.path());
        // Write from another thread: the answers (more than a socket
        // buffer) must be read while the requests are still going in.
        let w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || (&w).write_all(batch.as_bytes()).unwrap());
        let got = read_lines(&mut BufReader::new(&s), want.len());
        writer.join().unwrap();
        assert_eq!(got, want, "{io:?}");
        server.stop();
    }
}

#[test]
fn many_concurrent_clients_with_good_and_bad_lines() {
    for io in MODES {
        let (_dir, feed, server) = start(io);
        let expected = Arc::new(requests(&feed));
        let path = server.path().to_path_buf();
        let clients: Vec<_> = (0..200)
            .map(|c| {
                let expected = expected.clone();
                let path = path.clone();
                std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn(move || {
                        let s = connect(&path);
                        let mut r = BufReader::new(s.try_clone().unwrap());
                        for round in 0..5 {
                            // Several requests per write, a different mix
                            // per client and round; an over-long line too.
                            let mut batch = Vec::new();
                            let mut want = Vec::new();
                            for k in 0..4 {
                                let (req, ans) =
                                    &expected[(c * 7 + round * 3 + k) % expected.len()];
                                batch.extend_from_slice(req.as_bytes());
                                batch.push(b'\n');
                                want.push(ans.clone());
                            }
                            if (c + round) % 10 == 0 {
                                batch.extend_from_slice(&[b'A'; 1500]);
                                batch.push(b'\n');
                                want.push("ERR line too long\n".to_string());
                            }
                            (&s).write_all(&batch).unwrap();
                            assert_eq!(read_lines(&mut r, want.len()), want, "client {c}");
                        }
                    })
                    .unwrap()
            })
            .collect();
        for c in clients {
            c.join().expect("client failed");
        }
        // The server is still up and answering.
        let s = connect(server.path());
        (&s).write_all(b"PING\n").unwrap();
        assert_eq!(read_lines(&mut BufReader::new(&s), 1), ["PONG\n"]);
        assert!(
            server.stats().requests() >= 200 * 5 * 4,
            "{io:?} {:?}",
            server.stats()
        );
        server.stop();
    }
}

#[test]
fn over_long_line_is_answered_and_the_connection_stays_open() {
    for io in MODES {
        let (_dir, _feed, server) = start(io);
        let s = connect(server.path());
        let mut r = BufReader::new(s.try_clone().unwrap());
        // Exactly 1024 bytes (plus `\r\n`) is a request; 1025 is too long.
        let at_limit = format!("CHECK {}\r\n", "X".repeat(1024 - 6));
        (&s).write_all(at_limit.as_bytes()).unwrap();
        assert_eq!(
            read_lines(&mut r, 1),
            ["REJECT XXXXXXXX".to_string()
                + &"X".repeat(1010)
                + " unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-\n"]
        );
        (&s).write_all(format!("CHECK {}\n", "X".repeat(1025 - 6)).as_bytes())
            .unwrap();
        assert_eq!(read_lines(&mut r, 1), ["ERR line too long\n"]);
        // A long line in pieces, then a normal request.
        for _ in 0..10 {
            (&s).write_all(&[b'Y'; 700]).unwrap();
        }
        (&s).write_all(b"\nPING\n").unwrap();
        assert_eq!(read_lines(&mut r, 2), ["ERR line too long\n", "PONG\n"]);
        server.stop();
    }
}

#[test]
fn status_lists_feeds_and_symbols() {
    let (_dir, _feed, server) = start(IoMode::Blocking);
    let s = connect(server.path());
    (&s).write_all(b"STATUS\nPING\n").unwrap();
    let got = read_lines(&mut BufReader::new(&s), 6);
    assert!(
        got[0].starts_with("FEED md1 symbols=3 state=live channel_silence_us=100000 "),
        "{}",
        got[0]
    );
    assert_eq!(
        got[1],
        "SYMBOL md1 REJECT USDJPY no_data seq=- bid=- ask=- silence_us=- source_age_us=-\n"
    );
    assert!(
        got[2].starts_with("SYMBOL md1 REJECT GBPUSD stale_quote,stale_at_source seq=7 "),
        "{}",
        got[2]
    );
    assert!(
        got[3].starts_with("SYMBOL md1 OK EURUSD seq=41 "),
        "{}",
        got[3]
    );
    assert_eq!(&got[4..], ["END\n", "PONG\n"]);
    server.stop();
}

#[test]
fn stale_socket_is_replaced_and_live_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.sock");
    // A socket file left by a crashed run: bound, then the listener gone.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let (_feed, gate) = market();
    let cfg = ServerConfig {
        path: path.clone(),
        ..ServerConfig::default()
    };
    let server = serve(&cfg, gate.clone()).expect("stale socket replaced");
    let s = connect(&path);
    (&s).write_all(b"PING\n").unwrap();
    assert_eq!(read_lines(&mut BufReader::new(&s), 1), ["PONG\n"]);
    // A second instance on the same path is refused, the first unharmed.
    let err = serve(&cfg, gate.clone())
        .err()
        .expect("live socket refused");
    assert!(format!("{err:#}").contains("already listening"), "{err:#}");
    (&s).write_all(b"PING\n").unwrap();
    assert_eq!(read_lines(&mut BufReader::new(&s), 1), ["PONG\n"]);
    server.stop();
    assert!(!path.exists(), "socket file removed on stop");
    assert!(UnixStream::connect(&path).is_err());
    // Something that is not a socket is never replaced.
    std::fs::write(&path, b"precious").unwrap();
    let err = serve(&cfg, gate).err().expect("regular file refused");
    assert!(format!("{err:#}").contains("not a socket"), "{err:#}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[test]
fn socket_file_has_the_configured_mode() {
    for mode in [0o660, 0o600, 0o666] {
        let dir = tempfile::tempdir().unwrap();
        let (_feed, gate) = market();
        let cfg = ServerConfig {
            mode,
            ..config(dir.path(), IoMode::Blocking)
        };
        let server = serve(&cfg, gate).unwrap();
        let m = std::fs::metadata(server.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(m & 0o777, mode, "{mode:o}");
        // Only the socket itself is left in the directory (no temp name).
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        server.stop();
    }
}

#[test]
fn stop_closes_open_connections() {
    for io in MODES {
        let (_dir, _feed, server) = start(io);
        let s = connect(server.path());
        (&s).write_all(b"PING\n").unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        assert_eq!(read_lines(&mut r, 1), ["PONG\n"]);
        server.stop();
        let mut rest = Vec::new();
        // EOF (or a reset) rather than a hang.
        let _ = r.read_to_end(&mut rest);
        assert!(rest.is_empty());
    }
}

fn tickgate(args: &[&str], socket_env: Option<&Path>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tickgate"));
    cmd.args(args).env_remove("TICKGATE_SOCKET");
    if let Some(p) = socket_env {
        cmd.env("TICKGATE_SOCKET", p);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_command_exit_codes() {
    let (dir, feed, server) = start(IoMode::Blocking);
    let p = server.path().to_str().unwrap().to_string();
    let expected = requests(&feed);

    let (code, out, _) = tickgate(&["check", "EURUSD", "--socket", &p], None);
    assert_eq!((code, out.as_str()), (0, expected[0].1.as_str()));
    let (code, out, _) = tickgate(&["check", "GBPUSD", "--socket", &p], None);
    assert_eq!((code, out.as_str()), (1, expected[1].1.as_str()));
    let (code, out, _) = tickgate(&["check", "NOPE", "--socket", &p], None);
    assert_eq!(code, 1);
    assert!(out.starts_with("REJECT NOPE unknown_symbol"));
    // Tightened thresholds reach the server; a looser one is an ERR (2).
    let (code, out, _) = tickgate(
        &["check", "EURUSD", "--socket", &p, "--stale-ms", "50"],
        None,
    );
    assert_eq!((code, out.as_str()), (1, expected[4].1.as_str()));
    let (code, out, _) = tickgate(
        &[
            "check",
            "EURUSD",
            "--socket",
            &p,
            "--stale-ms",
            "200",
            "--source-ms",
            "100",
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (1, expected[5].1.as_str()));
    let (code, out, _) = tickgate(
        &["check", "EURUSD", "--socket", &p, "--stale-ms", "100000"],
        None,
    );
    assert_eq!(code, 2);
    assert_eq!(out, "ERR threshold looser than configured\n");
    // The socket from the environment.
    let (code, out, _) = tickgate(&["check", "EURUSD"], Some(server.path()));
    assert_eq!((code, out.as_str()), (0, expected[0].1.as_str()));
    // No server there: 2 with a message.
    let missing: PathBuf = dir.path().join("missing.sock");
    let (code, _, err) = tickgate(
        &["check", "EURUSD", "--socket", missing.to_str().unwrap()],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.contains("cannot connect"), "{err}");

    let (code, out, _) = tickgate(&["status", "--socket", &p], None);
    assert_eq!(code, 0);
    let rows: Vec<&str> = out.lines().collect();
    assert!(rows[0].starts_with("feed md1: 3 symbols, live"), "{out}");
    let eur = rows.iter().find(|r| r.contains("EURUSD")).unwrap();
    let cells: Vec<&str> = eur.split_whitespace().collect();
    assert_eq!(&cells[..5], ["md1", "EURUSD", "OK", "-", "41"]);
    server.stop();
}

/// Every check of every spec scenario (venue scenarios included), asked
/// of the table (what the daemon's gate reads) and of the feed itself: the
/// same answer.
#[test]
fn table_answers_equal_feed_answers_in_every_scenario() {
    let mut checks = 0;
    let mut all = Vec::new();
    for file in ["scenarios.json", "venue_scenarios.json"] {
        let text = std::fs::read_to_string(scenarios::spec_path(file)).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        all.extend(doc["scenarios"].as_array().unwrap().clone());
    }
    for sc in &all {
        let name = sc["name"].as_str().unwrap();
        let s = FeedSettings {
            max_symbols: 64,
            ..scenarios::settings(&sc["feed"])
        };
        let (publisher, reader) = feed_table(&s);
        let mut feed = Feed::with_publisher(s, 2, publisher);
        let gate = Gate::new(vec![("f".into(), reader)]);
        for step in sc["steps"].as_array().unwrap() {
            let t = step["t"].as_i64().unwrap();
            if let Some(hex) = step["hex"].as_str() {
                let line = usize::from(step["line"].as_str() == Some("B"));
                feed.on_datagram(line, &hex::decode(hex).unwrap(), t);
            } else if let Some(check) = step["check"].as_str() {
                let feeds: [&dyn SymbolLookup; 1] = [&feed];
                let (mut a, mut b) = (Vec::new(), Vec::new());
                answer(check.as_bytes(), &feeds, t, &mut a);
                gate.answer(check.as_bytes(), t, &mut b);
                assert_eq!(
                    String::from_utf8(b).unwrap(),
                    String::from_utf8(a).unwrap(),
                    "{name}: {check}"
                );
                checks += 1;
            }
        }
    }
    assert!(checks > 60);
}

#[test]
fn stopper_stops_the_server_from_another_thread() {
    for io in MODES {
        let (_dir, _feed, server) = start(io);
        let path = server.path().to_path_buf();
        let s = connect(&path);
        (&s).write_all(b"PING\n").unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        assert_eq!(read_lines(&mut r, 1), ["PONG\n"]);
        let stopper = server.stopper();
        assert!(!stopper.is_stopped());
        let t = std::thread::spawn(move || stopper.stop());
        // `join` returns once the other thread has stopped the server.
        server.join();
        t.join().unwrap();
        assert!(!path.exists());
        let mut rest = Vec::new();
        let _ = r.read_to_end(&mut rest);
        assert!(rest.is_empty());
    }
}

#[test]
fn connections_beyond_the_limit_are_closed() {
    for io in MODES {
        let dir = tempfile::tempdir().unwrap();
        let (_feed, gate) = market();
        let cfg = ServerConfig {
            max_connections: 2,
            ..config(dir.path(), io)
        };
        let server = serve(&cfg, gate).unwrap();
        let ping = |s: &UnixStream| -> bool {
            if (&*s).write_all(b"PING\n").is_err() {
                return false;
            }
            let mut l = String::new();
            matches!(BufReader::new(s).read_line(&mut l), Ok(n) if n > 0) && l == "PONG\n"
        };
        let a = connect(server.path());
        let b = connect(server.path());
        assert!(ping(&a) && ping(&b), "{io:?}");
        let c = connect(server.path());
        assert!(!ping(&c), "{io:?}: a third connection is closed");
        assert_eq!(
            server
                .stats()
                .connections_refused
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        // Once one closes, a new client gets in (the server notices the
        // close asynchronously: retry, bounded).
        drop(a);
        let mut admitted = false;
        for _ in 0..500 {
            let d = connect(server.path());
            if ping(&d) {
                admitted = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(admitted, "{io:?}");
        assert!(ping(&b));
        server.stop();
    }
}

#[test]
fn a_flooding_client_does_not_stop_the_others() {
    for io in MODES {
        let (_dir, feed, server) = start(io);
        let expected = requests(&feed);
        let flood = connect(server.path());
        let n = 200_000usize;
        let w = flood.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = "PING\n".repeat(1000);
            for _ in 0..n / 1000 {
                (&w).write_all(chunk.as_bytes()).unwrap();
            }
        });
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 16, flood);
            let mut l = String::new();
            for i in 0..n {
                l.clear();
                assert!(r.read_line(&mut l).unwrap() > 0, "closed after {i}");
                assert_eq!(l, "PONG\n");
            }
        });
        // Meanwhile another client is answered, in order, every time.
        let s = connect(server.path());
        let mut r = BufReader::new(s.try_clone().unwrap());
        for k in 0..50 {
            let (req, want) = &expected[k % expected.len()];
            (&s).write_all(format!("{req}\n").as_bytes()).unwrap();
            assert_eq!(&read_lines(&mut r, 1)[0], want, "{io:?}");
        }
        writer.join().unwrap();
        reader.join().unwrap();
        server.stop();
    }
}

/// `STATUS`: a feed given its recovery links (a `cboe-pitch` feed's GRP
/// connection and units, `gate::links`) lists them after its `FEED` line,
/// which stays as it was; a feed without links lists nothing more.
#[test]
fn status_lists_a_feeds_grp_and_units_after_its_feed_line() {
    use tickgate::gate::links::{GrpLink, Links, SharedLinks, SpinLink, UnitLink};
    let (_feed, mut gate) = market();
    let mut plain = Vec::new();
    let n = gate.status_feed(0, NOW, &mut plain);
    let plain = String::from_utf8(plain).unwrap();
    assert_eq!(plain.lines().count(), 1, "{plain}");
    assert!(plain.starts_with("FEED md1 symbols="), "{plain}");

    let links = SharedLinks::default();
    gate.set_links(0, links.clone());
    *links.lock().unwrap() = Links {
        grp: Some(GrpLink {
            logged_in: false,
            count_limit: 50,
            pause: Some((b'M', NOW + 30_000 * MS)),
        }),
        units: vec![UnitLink {
            unit: 4,
            spin: SpinLink::Wanted {
                not_before: NOW + 1_000 * MS,
                last_failure: None,
            },
            grp_off: Some(false),
        }],
    };
    let mut out = Vec::new();
    assert_eq!(gate.status_feed(0, NOW, &mut out), n);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(
        out,
        format!(
            "{plain}GRP md1 logged_in=0 count_limit=50 pause=M pause_left_ms=30000\n\
             UNIT md1 4 spin=wanted spin_wait_ms=1000 grp=on\n"
        )
    );
}
