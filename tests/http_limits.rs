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

#[path = "common/daemon.rs"]
mod common_daemon;
use common_daemon::free_port;

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

/// A connection inside a request: its head sent, its body stalled.
fn in_request(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
        .unwrap();
    s
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
    // Both slots inside a request: nothing can be evicted.
    let a = in_request(addr);
    let b = in_request(addr);
    std::thread::sleep(Duration::from_millis(200));
    let mut c = TcpStream::connect(addr).unwrap();
    let said = read_all(&mut c, Duration::from_secs(5));
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    assert!(said.contains("retry-after: 1"), "{said}");
    assert!(said.contains("too-many-connections"), "{said}");
    drop((a, b));
}

/// At the cap, the connection that has waited longest for a request head
/// is closed to make room; one inside a request is never chosen.
#[test]
fn at_the_cap_the_slowest_head_makes_room() {
    let rt = runtime();
    let addr = start(
        HttpLimits {
            max_connections: 3,
            ..HttpLimits::default()
        },
        &rt,
    );
    let busy = in_request(addr);
    std::thread::sleep(Duration::from_millis(100));
    let mut oldest = TcpStream::connect(addr).unwrap();
    oldest.write_all(b"GET /ping HTTP/1.1\r\nHo").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut younger = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // A whole request on a fourth connection is answered...
    let mut whole = TcpStream::connect(addr).unwrap();
    whole
        .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let said = read_all(&mut whole, Duration::from_secs(5));
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    // ...because the oldest head was let go (EOF, nothing said)...
    let gone = read_all(&mut oldest, Duration::from_secs(5));
    assert_eq!(gone, "");
    // ...while the younger head and the request in progress stay.
    younger
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    let r = younger.read(&mut buf);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "{r:?}"
    );
    let mut busy = busy;
    busy.write_all(b"cdefghij").unwrap();
    let said = read_all(&mut busy, Duration::from_millis(500));
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    assert!(said.ends_with("abcdefghij"), "{said}");
}

/// One token may hold `max_connections_per_client` connections once it has
/// used them; its next connection is refused with 503 and closed, while
/// another client still gets in; a freed connection is its again.
#[test]
fn a_token_holds_at_most_its_share_of_connections() {
    let rt = runtime();
    let addr = start(
        HttpLimits {
            max_connections: 8,
            max_connections_per_client: 2,
            ..HttpLimits::default()
        },
        &rt,
    );
    let ping = |s: &mut TcpStream, auth: &str| -> String {
        let req = format!("GET /ping HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let mut first = TcpStream::connect(addr).unwrap();
    let mut second = TcpStream::connect(addr).unwrap();
    assert!(ping(&mut first, "Bearer tok").starts_with("HTTP/1.1 200"));
    assert!(ping(&mut second, "bearer tok").starts_with("HTTP/1.1 200"));
    // The same connections go on being served.
    assert!(ping(&mut first, "Bearer tok").starts_with("HTTP/1.1 200"));
    let mut third = TcpStream::connect(addr).unwrap();
    let said = ping(&mut third, "Bearer tok");
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    assert!(said.contains("too-many-connections-for-client"), "{said}");
    assert!(
        said.to_ascii_lowercase().contains("connection: close"),
        "{said}"
    );
    // Without the token, another client is served.
    assert!(anonymous_ping(addr).starts_with("HTTP/1.1 200"));
    // One of the token's connections closes: a new one is served.
    drop(first);
    std::thread::sleep(Duration::from_millis(200));
    let mut fourth = TcpStream::connect(addr).unwrap();
    assert!(ping(&mut fourth, "Bearer tok").starts_with("HTTP/1.1 200"));
}

/// On a Unix socket, the per-client cap counts the peer's uid from the
/// start: one more connection of the same user is refused with 503.
#[test]
fn on_a_unix_socket_a_uid_holds_at_most_its_share() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let limits = HttpLimits {
        max_connections: 8,
        max_connections_per_client: 2,
        ..HttpLimits::default()
    };
    let app = Router::new().route("/ping", get(|| async { "pong" }));
    let stats = LimitStats::unregistered();
    let app = http_limits::limit_requests(app, &limits, &[], 1 << 20, stats.clone());
    let listener = {
        let _guard = rt.enter();
        tokio::net::UnixListener::bind(&path).unwrap()
    };
    rt.spawn(http_limits::serve(
        listener,
        app,
        limits,
        stats.clone(),
        std::future::pending(),
    ));
    let a = UnixStream::connect(&path).unwrap();
    let b = UnixStream::connect(&path).unwrap();
    let mut c = UnixStream::connect(&path).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut said = String::new();
    let _ = c.read_to_string(&mut said);
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    assert!(said.contains("too-many-connections-for-client"), "{said}");
    assert_eq!(stats.refused_client.get(), 1);
    // The two held ones are served.
    for mut s in [a, b] {
        s.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut said = String::new();
        let _ = s.read_to_string(&mut said);
        assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    }
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

/// A daemon with the fills API on a fresh port (`http_extra`: more keys of
/// `[fills.http]`), its gate socket and metrics port; returns once both
/// the gate and the fills port answer.
struct FillsDaemon {
    _daemon: Daemon,
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    api: SocketAddr,
    metrics: SocketAddr,
    api_socket: std::path::PathBuf,
}

fn fills_daemon(http_extra: &str) -> FillsDaemon {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let metrics_port = free_port();
    let socket = dir.path().join("gate.sock");
    let api_socket = dir.path().join("fills.sock");
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
listen = "127.0.0.1:{metrics_port}"

[fills]
db = "sqlite:{db}"
[fills.http]
listen = "127.0.0.1:{port}"
socket = "{api_socket}"
{http_extra}
[[fills.http.clients]]
name = "c"
token = "t"
accounts = ["ACC-1"]
"#,
        feed_port = 46000 + (std::process::id() % 1000) as u16,
        socket = socket.display(),
        api_socket = api_socket.display(),
        db = dir.path().join("fills.db").display(),
    );
    let path = dir.path().join("tickgate.toml");
    std::fs::write(&path, config).unwrap();
    let daemon = Daemon(
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
    let api: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // The fills lane starts after the gate socket.
    while TcpStream::connect(api).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the fills port never opened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    FillsDaemon {
        _daemon: daemon,
        _dir: dir,
        socket,
        api,
        metrics: format!("127.0.0.1:{metrics_port}").parse().unwrap(),
        api_socket,
    }
}

/// 2,000 connections that send part of a request head and stall, against
/// the daemon's fills port (cap 1,500, header timeout 10 s, long enough
/// that opening them all ends first on a loaded machine): beyond the cap
/// each new one makes room by closing the one that has waited longest for
/// its head, so the newest 1,500 are held and the oldest are closed early,
/// none refused (every slot is a head); meanwhile the gate socket answers;
/// every held one is closed by the server once its header timeout has
/// passed, and not before.
#[test]
fn two_thousand_slow_connections_do_not_take_the_gate_down() {
    raise_nofile();
    let d = fills_daemon("header_timeout = \"10s\"\nmax_connections = 1500");
    let (socket, addr) = (d.socket.clone(), d.api);
    let mut conns = Vec::new();
    let t_open = Instant::now();
    for i in 0..2000usize {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(b"POST /v1/fills HTTP/1.1\r\nHost: x\r\n");
        conns.push((i, s, Instant::now()));
    }
    // The gate answers while they are held.
    for _ in 0..20 {
        assert!(gate_ping(&socket), "the gate stopped answering");
    }
    // Closed ones have heard EOF; held ones nothing yet. A connection the
    // server has not accepted yet (still in the listen backlog) has heard
    // nothing either, so passes repeat until four in a row, 250 ms apart,
    // find no change: then the silent ones are held.
    let mut refused = 0usize;
    let mut closed: Vec<(usize, Duration)> = Vec::new();
    let mut held = conns;
    let mut quiet = 0;
    for (_, s, _) in &held {
        s.set_nonblocking(true).unwrap();
    }
    loop {
        let before = held.len();
        let mut silent = Vec::new();
        for (i, s, opened) in held {
            let mut buf = [0u8; 512];
            match (&s).read(&mut buf) {
                Ok(n) if n > 0 && buf.starts_with(b"HTTP/1.1 503") => refused += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => silent.push((i, s, opened)),
                Ok(0) => closed.push((i, opened.elapsed())),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    closed.push((i, opened.elapsed()))
                }
                other => panic!("{other:?}"),
            }
        }
        held = silent;
        // A new connection waits for the slot of the one it evicted, so
        // on a loaded host the count settles a little after the EOFs.
        if held.len() == before && (held.len() <= 1500 || t_open.elapsed() > Duration::from_secs(8))
        {
            quiet += 1;
            if quiet == 4 {
                break;
            }
        } else {
            quiet = 0;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let youngest_closed = closed.iter().map(|c| c.0).max().unwrap_or(0);
    let oldest_held = held.iter().map(|h| h.0).min().unwrap_or(usize::MAX);
    println!(
        "held {}, closed early {} (indices up to {youngest_closed}), refused {refused}",
        held.len(),
        closed.len()
    );
    assert_eq!(
        refused, 0,
        "a head was refused while heads could be evicted"
    );
    assert!(held.len() <= 1500, "{} held over a cap of 1500", held.len());
    assert_eq!(held.len() + closed.len(), 2000);
    assert!(closed.len() >= 500);
    // The ones let go are the ones that waited longest: every held one is
    // younger than every closed one (give or take the accept order of a
    // few connections opened at the same time).
    let late = closed
        .iter()
        .filter(|c| c.0 > oldest_held.saturating_add(8))
        .count();
    assert_eq!(
        late, 0,
        "closed ones younger than held {oldest_held}: {closed:?}"
    );
    assert!(gate_ping(&socket), "the gate stopped answering");
    // Each held connection is closed by the server after its header
    // timeout (10 s), never before.
    let mut slowest = Duration::ZERO;
    for (_, mut s, opened) in held {
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

/// `GET /v1/positions` for ACC-1 on a new connection (TCP or the Unix
/// socket); the status line, or what went wrong.
fn positions<S: Read + Write>(mut s: S) -> String {
    let req = b"GET /v1/positions?account=ACC-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nConnection: close\r\n\r\n";
    if let Err(e) = s.write_all(req) {
        return format!("write: {e}");
    }
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("EOF")
            .to_string(),
        Err(e) => format!("read: {e}"),
    }
}

/// One counter of the daemon's `/metrics`.
fn metric(addr: SocketAddr, line_start: &str) -> f64 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let text = read_all(&mut s, Duration::from_secs(5));
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// 300 connections that send part of a head and stall, each reopened as
/// soon as the server closes it, for 30 s, against the daemon's fills port
/// (default limits: 256 connections, 10 s header timeout): a client
/// sending whole requests, one connection each, meanwhile gets at least
/// 99% of its answers (200), on TCP and on the API's Unix socket. The
/// attack is real: the server evicted heads to make room.
#[test]
fn slow_head_floods_leave_whole_requests_answered() {
    raise_nofile();
    let d = fills_daemon("");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let attackers: Vec<_> = (0..300)
        .map(|_| {
            let (stop, opened, api) = (stop.clone(), opened.clone(), d.api);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(api) else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let _ = s.write_all(b"POST /v1/fills HTTP/1.1\r\nHost: x\r\n");
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    let mut buf = [0u8; 512];
                    // Held until the server closes it (or the attack ends).
                    loop {
                        match s.read(&mut buf) {
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) =>
                            {
                                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                                    break;
                                }
                            }
                            _ => break,
                        }
                    }
                }
            })
        })
        .collect();
    // Let the attack fill the slots first.
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    let (mut tcp_asked, mut tcp_ok, mut unix_asked, mut unix_ok) = (0u32, 0u32, 0u32, 0u32);
    let mut failures = Vec::new();
    while t0.elapsed() < Duration::from_secs(30) {
        let answer = match TcpStream::connect(d.api) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                positions(s)
            }
            Err(e) => format!("connect: {e}"),
        };
        tcp_asked += 1;
        if answer.starts_with("HTTP/1.1 200") {
            tcp_ok += 1;
        } else {
            failures.push(answer);
        }
        if tcp_asked % 10 == 0 {
            let s = UnixStream::connect(&d.api_socket).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            let answer = positions(s);
            unix_asked += 1;
            if answer.starts_with("HTTP/1.1 200") {
                unix_ok += 1;
            } else {
                failures.push(format!("unix: {answer}"));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let evicted = metric(
        d.metrics,
        "tickgate_http_limited_total{endpoint=\"fills\",reason=\"slow_head\"}",
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    let opened = opened.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "TCP {tcp_ok}/{tcp_asked} answered 200, Unix socket {unix_ok}/{unix_asked}; the attack opened {opened} connections, {evicted} heads evicted; failures: {failures:?}"
    );
    assert!(opened > 300, "the attackers were never closed: no pressure");
    assert!(evicted > 0.0, "no head was evicted: no pressure");
    assert!(tcp_asked >= 100, "too few requests to judge: {tcp_asked}");
    assert!(
        f64::from(tcp_ok) >= 0.99 * f64::from(tcp_asked),
        "{tcp_ok} of {tcp_asked} answered"
    );
    assert_eq!(unix_ok, unix_asked, "{failures:?}");
    assert!(gate_ping(&d.socket), "the gate stopped answering");
}

/// The fills API on its Unix socket (`fills.http.socket`): `fills push
/// --url unix:PATH` applies a batch there, and positions read there show
/// it; the socket has the configured mode (0660 by default).
#[test]
fn the_fills_api_answers_on_its_unix_socket() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let d = fills_daemon("");
    let meta = std::fs::metadata(&d.api_socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    std::fs::write(
        &events,
        r#"{"kind":"FILL","event_id":"E-1","deal_id":"D-1","account":"ACC-1","symbol":"EURUSD","side":"BUY","qty":"100000","price":"1.08512","exec_time":"2026-11-30T08:00:00Z"}
"#,
    )
    .unwrap();
    let url = format!("unix:{}", d.api_socket.display());
    let out = Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(["fills", "push", "--token", "t", "--url", &url])
        .arg("--dead-letter-dir")
        .arg(dir.path().join("dead"))
        .arg(&events)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let mut s = UnixStream::connect(&d.api_socket).unwrap();
    s.write_all(b"GET /v1/positions?account=ACC-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"qty\":\"100000\""), "{answer}");
}
