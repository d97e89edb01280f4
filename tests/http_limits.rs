//! The HTTP limits (docs/operations.md): slow clients are timed out, a
//! connection cap refuses clearly, a client over its request rate gets 429
//! with Retry-After, and 2,000 slow connections on the fills port neither
//! stop the gate socket from answering nor stay open past the header
//! timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::routing::{get, post};
use axum::Router;
use tickgate::http_limits::{self, HttpLimits, LimitStats};

/// Raises this process's open-file limit (2,000 client sockets).
fn raise_nofile() {
    let got = http_limits::raise_nofile();
    assert!(
        got >= 4200,
        "RLIMIT_NOFILE hard limit {got} is too low for this test"
    );
}

/// A server with `limits` in front of two routes, on 127.0.0.1:0.
fn start(limits: HttpLimits, rt: &tokio::runtime::Runtime) -> SocketAddr {
    let app = Router::new()
        .route("/ping", get(|| async { "pong" }))
        .route("/echo", post(|body: String| async move { body }));
    let stats = LimitStats::unregistered();
    let app =
        http_limits::limit_requests(app, &limits, &["tok".to_string()], 1 << 20, stats.clone());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(http_limits::serve(
        listener,
        app,
        limits,
        stats,
        std::future::pending(),
    ));
    addr
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Everything the server sends until it closes (or `wait` passes).
fn read_all(s: &mut TcpStream, wait: Duration) -> String {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A server allowing one request a second per client, bursts of two.
fn start_rate_limited(rt: &tokio::runtime::Runtime) -> SocketAddr {
    start(
        HttpLimits {
            rate_per_sec: 1,
            rate_burst: 2,
            ..HttpLimits::default()
        },
        rt,
    )
}

/// `GET /ping` on one connection with each `Authorization` value in turn;
/// the answers' heads.
fn pings(addr: SocketAddr, authorizations: &[&str]) -> Vec<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    authorizations
        .iter()
        .map(|auth| {
            let req = format!("GET /ping HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n");
            s.write_all(req.as_bytes()).unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        })
        .collect()
}

/// One `GET /ping` without a token (the anonymous clients' bucket).
fn anonymous_ping(addr: SocketAddr) -> String {
    let mut other = TcpStream::connect(addr).unwrap();
    other
        .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    read_all(&mut other, Duration::from_secs(5))
}

#[test]
fn over_the_rate_a_client_gets_429_with_retry_after() {
    let rt = runtime();
    let addr = start_rate_limited(&rt);
    let answers = pings(addr, &["Bearer tok"; 3]);
    assert!(answers[0].starts_with("HTTP/1.1 200"), "{}", answers[0]);
    assert!(answers[1].starts_with("HTTP/1.1 200"), "{}", answers[1]);
    assert!(answers[2].starts_with("HTTP/1.1 429"), "{}", answers[2]);
    assert!(
        answers[2].to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        answers[2]
    );
    // Another client (no token: the shared bucket) is not held back by it.
    assert!(anonymous_ping(addr).starts_with("HTTP/1.1 200"));
}

/// One parser for authentication and the rate limit: however a client
/// spells the scheme (`Bearer`, `bearer`, `BEARER`), its requests come out
/// of its own bucket, so alternating spellings does not double its rate,
/// and a lower-case client does not take the anonymous clients' bucket.
#[test]
fn the_rate_limit_reads_the_scheme_without_case() {
    let rt = runtime();
    let addr = start_rate_limited(&rt);
    let answers = pings(addr, &["Bearer tok", "bearer tok", "BEARER tok"]);
    assert!(answers[0].starts_with("HTTP/1.1 200"), "{}", answers[0]);
    assert!(answers[1].starts_with("HTTP/1.1 200"), "{}", answers[1]);
    assert!(answers[2].starts_with("HTTP/1.1 429"), "{}", answers[2]);
    // The anonymous bucket is untouched: two requests pass.
    for _ in 0..2 {
        assert!(anonymous_ping(addr).starts_with("HTTP/1.1 200"));
    }
}

#[test]
fn beyond_the_cap_a_connection_is_refused_with_503() {
    let rt = runtime();
    let addr = start(
        HttpLimits {
            max_connections: 2,
            ..HttpLimits::default()
        },
        &rt,
    );
    let a = TcpStream::connect(addr).unwrap();
    let b = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut c = TcpStream::connect(addr).unwrap();
    let said = read_all(&mut c, Duration::from_secs(5));
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    assert!(said.contains("retry-after: 1"), "{said}");
    assert!(said.contains("too-many-connections"), "{said}");
    drop((a, b));
}

#[test]
fn a_stalled_body_is_answered_408_and_a_stalled_head_is_closed() {
    let rt = runtime();
    let addr = start(
        HttpLimits {
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(1),
            ..HttpLimits::default()
        },
        &rt,
    );
    let mut body = TcpStream::connect(addr).unwrap();
    body.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
        .unwrap();
    let said = read_all(&mut body, Duration::from_secs(10));
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    let mut head = TcpStream::connect(addr).unwrap();
    head.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let t0 = Instant::now();
    let said = read_all(&mut head, Duration::from_secs(10));
    // Closed (EOF, or an answer then EOF), not held to our read timeout.
    assert!(t0.elapsed() < Duration::from_secs(10), "{said}");
    assert!(t0.elapsed() >= Duration::from_millis(900));
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn gate_ping(path: &Path) -> bool {
    let Ok(mut s) = UnixStream::connect(path) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if s.write_all(b"PING\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(5)) && &buf[..5] == b"PONG\n"
}

/// 2,000 connections that send part of a request head and stall, against
/// the daemon's fills port (cap 1,500, header timeout 10 s, long enough
/// that opening them all ends first on a loaded machine): the first
/// 1,500 are held, the rest refused at once with 503; meanwhile the gate
/// socket answers; every held one is closed by the server once its header
/// timeout has passed, and not before.
#[test]
fn two_thousand_slow_connections_do_not_take_the_gate_down() {
    raise_nofile();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = dir.path().join("gate.sock");
    let config = format!(
        r#"
[[feed]]
name = "fx"
mode = "full"
[[feed.line]]
name = "A"
group = "239.255.93.9"
port = {feed_port}
interface = "127.0.0.1"

[gate]
socket = "{socket}"

[metrics]
listen = "127.0.0.1:0"

[fills]
db = "sqlite:{db}"
[fills.http]
listen = "127.0.0.1:{port}"
header_timeout = "10s"
max_connections = 1500
[[fills.http.clients]]
name = "c"
token = "t"
"#,
        feed_port = 46000 + (std::process::id() % 1000) as u16,
        socket = socket.display(),
        db = dir.path().join("fills.db").display(),
    );
    let path = dir.path().join("tickgate.toml");
    std::fs::write(&path, config).unwrap();
    let _daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_tickgate"))
            .args(["run", "--config"])
            .arg(&path)
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while !gate_ping(&socket) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the daemon never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // The fills lane starts after the gate socket.
    while TcpStream::connect(addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the fills port never opened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut conns = Vec::new();
    for _ in 0..2000 {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(b"POST /v1/fills HTTP/1.1\r\nHost: x\r\n");
        conns.push((s, Instant::now()));
    }
    // The gate answers while they are held.
    for _ in 0..20 {
        assert!(gate_ping(&socket), "the gate stopped answering");
    }
    // Refused ones say so at once; held ones have heard nothing yet (or,
    // if opening them all took longer than the timeout, were closed
    // already: no earlier than the timeout, checked below).
    // A connection the server has not accepted yet (still in the listen
    // backlog) has heard nothing either, so passes repeat until one, 300 ms
    // after the last, finds no new answer: then the silent ones are held.
    let (mut refused, mut closed_early) = (0usize, 0usize);
    let mut held = conns;
    for (s, _) in &held {
        s.set_nonblocking(true).unwrap();
    }
    loop {
        let before = held.len();
        let mut silent = Vec::new();
        for (s, opened) in held {
            let mut buf = [0u8; 512];
            match (&s).read(&mut buf) {
                Ok(n) if n > 0 && buf.starts_with(b"HTTP/1.1 503") => refused += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => silent.push((s, opened)),
                Ok(0) => {
                    let lived = opened.elapsed();
                    assert!(
                        lived >= Duration::from_millis(9900),
                        "closed after {lived:?}"
                    );
                    closed_early += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        held = silent;
        if held.len() == before {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    println!(
        "held {}, refused {refused} (503), closed by the timeout while the rest were opened {closed_early}",
        held.len()
    );
    assert!(held.len() + closed_early <= 1500 + closed_early.min(500));
    assert!(refused > 0, "the connection cap refused nobody");
    assert_eq!(held.len() + closed_early + refused, 2000);
    assert!(gate_ping(&socket), "the gate stopped answering");
    // Each held connection is closed by the server after its header
    // timeout (10 s), never before.
    let mut slowest = Duration::ZERO;
    for (mut s, opened) in held {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 512];
        let r = s.read(&mut buf);
        let lived = opened.elapsed();
        assert!(
            r.is_ok() || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{r:?} after {lived:?}"
        );
        assert!(
            lived >= Duration::from_millis(9900),
            "closed after {lived:?}"
        );
        slowest = slowest.max(lived);
    }
    println!("the last held connection was closed {slowest:?} after it opened");
    assert!(gate_ping(&socket), "the gate stopped answering");
}
