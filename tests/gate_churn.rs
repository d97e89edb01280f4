//! Connect/close churn against the gate socket: one
//! client connects and closes 100,000 times in a loop (never more than one
//! connection open) while a second client checks continuously, each check
//! on a fresh connection (so that a refusal would show) and on one
//! long-lived connection. In every I/O mode: no refusal, no error, and no
//! check slower than `BOUND`.
//!
//! `BOUND` is the one timed assertion: a pre-trade check that waits a
//! second behind a burst is as good as refused. It is generous (the
//! measured worst cases are far below it, see the test's output) because
//! these test machines have 2 cores shared with other builds: a scheduler
//! hiccup must not fail the test, a server that parks well-behaved
//! clients behind a backlog of dead ones must.
//!
//! Also: the per-uid cap (SO_PEERCRED) refuses with a line that says so.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickgate::gate::server::{serve, Gate, IoMode, ServerConfig};

const CHURN: usize = 100_000;
const BOUND: Duration = Duration::from_secs(1);
const MODES: [IoMode; 3] = [IoMode::Blocking, IoMode::Epoll, IoMode::BusyPoll];

/// One request on `s`, its answer line.
fn ask(s: &UnixStream, req: &[u8]) -> std::io::Result<String> {
    (&*s).write_all(req)?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line)
}

#[derive(Default, Debug)]
struct Checks {
    n: u64,
    failures: Vec<String>,
    fresh_max: Duration,
    kept_max: Duration,
}

fn checker(path: &Path, done: &AtomicBool) -> Checks {
    let mut out = Checks::default();
    let kept = UnixStream::connect(path).expect("long-lived connection");
    while !done.load(Ordering::Relaxed) {
        // A fresh connection: connect, ask, answer.
        let t0 = Instant::now();
        let fresh = UnixStream::connect(path).and_then(|s| ask(&s, b"CHECK EURUSD\n"));
        let took = t0.elapsed();
        out.fresh_max = out.fresh_max.max(took);
        match fresh {
            Ok(l) if l.starts_with("REJECT ") => {}
            Ok(l) => out
                .failures
                .push(format!("fresh connection answered {l:?}")),
            Err(e) => out.failures.push(format!("fresh connection: {e}")),
        }
        let t0 = Instant::now();
        let answer = ask(&kept, b"PING\n");
        out.kept_max = out.kept_max.max(t0.elapsed());
        match answer {
            Ok(l) if l == "PONG\n" => {}
            Ok(l) => out
                .failures
                .push(format!("long-lived connection answered {l:?}")),
            Err(e) => out.failures.push(format!("long-lived connection: {e}")),
        }
        out.n += 1;
    }
    out
}

#[test]
fn connect_close_churn_never_refuses_another_client() {
    for io in MODES {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ServerConfig {
            path: dir.path().join("gate.sock"),
            io,
            ..ServerConfig::default()
        };
        let server = serve(&cfg, Gate::new(Vec::new())).unwrap();
        let path = server.path().to_path_buf();
        let done = Arc::new(AtomicBool::new(false));
        let check = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || checker(&path, &done))
        };
        let t0 = Instant::now();
        let mut connect_errors = 0u64;
        for _ in 0..CHURN {
            match UnixStream::connect(&path) {
                Ok(s) => drop(s),
                Err(_) => connect_errors += 1,
            }
        }
        let churn_took = t0.elapsed();
        done.store(true, Ordering::Relaxed);
        let checks = check.join().unwrap();
        let stats = server.stats();
        let refused = stats.connections_refused.load(Ordering::Relaxed);
        let reaped = stats.connections_reaped.load(Ordering::Relaxed);
        println!(
            "{io:?}: {CHURN} connect/close in {churn_took:.2?}; {} checks, slowest on a fresh \
             connection {:.2?}, on the long-lived one {:.2?}; refused {refused}, reaped {reaped}",
            checks.n, checks.fresh_max, checks.kept_max
        );
        assert_eq!(connect_errors, 0, "{io:?}");
        assert!(checks.failures.is_empty(), "{io:?}: {:?}", checks.failures);
        assert_eq!(refused, 0, "{io:?}");
        assert!(checks.n > 0, "{io:?}");
        assert!(checks.fresh_max < BOUND, "{io:?}: {:?}", checks.fresh_max);
        assert!(checks.kept_max < BOUND, "{io:?}: {:?}", checks.kept_max);
        server.stop();
    }
}

#[test]
fn one_user_at_its_cap_is_refused_with_a_reason() {
    for io in MODES {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ServerConfig {
            path: dir.path().join("gate.sock"),
            io,
            max_connections: 8,
            max_connections_per_uid: 3,
            ..ServerConfig::default()
        };
        let server = serve(&cfg, Gate::new(Vec::new())).unwrap();
        let held: Vec<UnixStream> = (0..3)
            .map(|_| UnixStream::connect(server.path()).unwrap())
            .collect();
        for s in &held {
            assert_eq!(ask(s, b"PING\n").unwrap(), "PONG\n", "{io:?}");
        }
        let fourth = UnixStream::connect(server.path()).unwrap();
        let mut said = String::new();
        (&fourth).read_to_string(&mut said).unwrap();
        assert_eq!(said, "ERR too_many_connections_for_uid\n", "{io:?}");
        let stats = server.stats();
        assert_eq!(stats.connections_refused_uid.load(Ordering::Relaxed), 1);
        assert_eq!(stats.connections_refused.load(Ordering::Relaxed), 1);
        // One of the user's connections closes: the user gets in again.
        drop(held.into_iter().next());
        let mut admitted = false;
        for _ in 0..500 {
            let s = UnixStream::connect(server.path()).unwrap();
            if ask(&s, b"PING\n").is_ok_and(|l| l == "PONG\n") {
                admitted = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(admitted, "{io:?}");
        server.stop();
    }
}

#[test]
fn a_full_server_says_so() {
    for io in MODES {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ServerConfig {
            path: dir.path().join("gate.sock"),
            io,
            max_connections: 2,
            ..ServerConfig::default()
        };
        let server = serve(&cfg, Gate::new(Vec::new())).unwrap();
        let a = UnixStream::connect(server.path()).unwrap();
        let b = UnixStream::connect(server.path()).unwrap();
        assert_eq!(ask(&a, b"PING\n").unwrap(), "PONG\n");
        assert_eq!(ask(&b, b"PING\n").unwrap(), "PONG\n");
        let c = UnixStream::connect(server.path()).unwrap();
        let mut said = String::new();
        (&c).read_to_string(&mut said).unwrap();
        assert_eq!(said, "ERR too_many_connections\n", "{io:?}");
        server.stop();
    }
}
