//! What the tests that run `tickgate run` as a child share: the binary,
//! one daemon at a time, bounded waits, the gate's line, `/metrics`, and
//! stopping the child.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The binary under test; `TICKGATE_BIN` may point at another build.
pub fn bin() -> String {
    std::env::var("TICKGATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tickgate").to_string())
}

/// Upper bound of every wait (a broken daemon fails instead of hanging).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// One daemon and one sender at a time: the tests measure the daemon, not
/// how several of them share two cores.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A port free on 127.0.0.1 now, for TCP and UDP, from below the
/// kernel's ephemeral range. A port that `bind(0)` handed out and the test
/// let go of is the kernel's again: between this call and the child's own
/// bind, any `connect` or `bind(0)` on the machine (the daemon's, the
/// test's scrapes, another process's) may take it. Below the range
/// nothing takes a port unasked; a process-unique walk keeps the tests of
/// one binary, which run in threads, off each other's ports.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let first_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if first_ephemeral <= LOWEST + 1_000 {
        // A machine whose range starts low: no quiet ports to pick from.
        return TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let span = first_ephemeral - LOWEST;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let port = (LOWEST + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        let tcp = TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 from {LOWEST} to {first_ephemeral}");
}

/// Polls `cond` until it holds; fails after [`PATIENCE`].
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    wait_within(PATIENCE, what, &mut cond);
}

pub fn wait_within(patience: Duration, what: &str, cond: &mut dyn FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One answer line from the gate socket, without its newline.
pub fn read_line(s: &mut UnixStream) -> String {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line.trim_end().to_string()
}

/// One request on a fresh connection to the gate socket at `path`; its
/// answer line.
pub fn ask(path: &std::path::Path, request: &str) -> String {
    let mut s = UnixStream::connect(path).unwrap();
    s.write_all(format!("{request}\n").as_bytes()).unwrap();
    read_line(&mut s)
}

/// Waits (bounded) until the gate socket at `path` answers `PING`.
pub fn wait_for_gate(path: &std::path::Path) {
    wait_for("the gate socket to answer", || {
        UnixStream::connect(path)
            .is_ok_and(|mut s| s.write_all(b"PING\n").is_ok() && read_line(&mut s) == "PONG")
    });
}

/// The body of `GET /metrics` at `addr`.
pub fn metrics_text(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    raw.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// Every sample of `/metrics` at `addr`, by its full name with labels.
pub fn metrics(addr: SocketAddr) -> BTreeMap<String, f64> {
    metrics_text(addr)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// SIGTERM, then up to [`PATIENCE`] for the child to exit, then SIGKILL.
pub fn terminate(child: &mut Child) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}
