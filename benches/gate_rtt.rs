//! Gate socket round trip, side by side with the floor of this machine and
//! with Redis, in one run of one harness:
//!
//! - `gate/<mode>`: `CHECK EURUSD` against the gate server (blocking thread
//!   per connection, epoll, busy-poll) over a table of 100,000 symbols
//!   while a feed thread publishes a fresh EURUSD quote every millisecond;
//! - `echo/<mode>`: a bare line echo server over the same kind of socket,
//!   blocking (thread per connection) and spinning (epoll_wait(0));
//! - `redis/GET`: GET of the same answer line from a private redis-server
//!   on a Unix socket (skipped if `redis-server` is not installed);
//! - in-process: `Gate::answer` over the table, per call;
//! - `shm check`: `tickgate::client::Client::check_now` through the state
//!   file, from another process (this binary again, with
//!   `GATE_BENCH_SHM_CHILD` set), each client thread with its own mapping;
//!   latency per check by the TSC (quanta), seqlock retries counted.
//!
//! The feed's table lives in the shared state file (as in the daemon), and
//! a writer thread publishes `GATE_BENCH_WRITER_RATE` (default 1,000,000)
//! datagrams a second into it during the whole run: EURUSD every fourth,
//! the other 100,000 symbols in turn, so every row includes the seqlock
//! retries and cache misses of a live writer.
//!
//! Clients are blocking threads (1 and 16), each sending one request and
//! reading its answer before the next. Percentiles from hdrhistogram.
//! Each configuration is measured in `GATE_BENCH_ROUNDS` (default 6)
//! interleaved slices adding up to `GATE_BENCH_SECS` (default 3) seconds,
//! each after a 100 ms warm-up, so that the noise of a shared machine falls
//! on every configuration alike; spinning servers run only in their slices.
//!
//! `cargo bench --bench gate_rtt` (`GATE_BENCH_CPU=<n>` pins the spinning
//! threads; default unpinned; `GATE_BENCH_ONLY=busy,redis` runs only the
//! configurations whose names contain one of the words;
//! `GATE_BENCH_FEEDS=3` puts every symbol on three feeds, `md1` to `md3`,
//! each datagram applied to all of them, so that every check is answered
//! over three feeds: gate.md "One symbol on several feeds").
//!
//! Besides latency, each row gives the CPU time per request (all slices,
//! warm-up included) of the client threads and of the server (for the
//! in-process servers: this process less the clients, so the feed
//! thread's small share is counted there; for Redis: redis-server's
//! `/proc/<pid>/schedstat`), and the clients' context switches per request.

#[path = "common/check_market.rs"]
mod check_market;
use check_market::{feed_specs, write_quotes};
#[path = "common/cpu.rs"]
mod cpu;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tickgate::client::Client;
use tickgate::daemon::shm::{publish, Published, DEFAULT_MODE};
use tickgate::feed::reader::feed_table_in;
use tickgate::feed::{ClockOffset, Feed, FeedSettings};
use tickgate::gate::server::{serve, unix_now, Backend, Gate, IoMode, ServerConfig};
use tickgate::wire::Symbol;

const REQUEST: &[u8] = b"CHECK EURUSD\n";
const SYMBOLS: u32 = 100_000;
const REDIS_SOCK: &str = "/tmp/tickgate-bench-redis.sock";

fn secs() -> f64 {
    if smoke() {
        return 0.05;
    }
    std::env::var("GATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0)
}

fn rounds() -> usize {
    if smoke() {
        return 1;
    }
    std::env::var("GATE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6usize)
        .max(1)
}

/// `GATE_BENCH_ONLY=busy,redis`: only the configurations whose name
/// contains one of these words.
fn only() -> Option<Vec<String>> {
    let v = std::env::var("GATE_BENCH_ONLY").ok()?;
    Some(v.split(',').map(str::to_string).collect())
}

enum Config {
    Gate(&'static str, IoMode),
    Echo(&'static str, bool),
    Redis,
    Shm,
}

impl Config {
    fn name(&self) -> &'static str {
        match self {
            Config::Gate(n, _) | Config::Echo(n, _) => n,
            Config::Redis => "redis GET (unix socket)",
            Config::Shm => "shm check (other process)",
        }
    }
}

fn spin_cpu() -> Option<usize> {
    match std::env::var("GATE_BENCH_CPU") {
        Ok(s) if s == "none" => None,
        Ok(s) => s.parse().ok(),
        Err(_) => None,
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Datagrams a second the writer publishes (`GATE_BENCH_WRITER_RATE`).
fn writer_rate() -> u64 {
    std::env::var("GATE_BENCH_WRITER_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

/// What the writer did: datagrams sent and the time it ran.
struct WriterStats {
    datagrams: u64,
    elapsed: Duration,
}

/// How many feeds know every symbol (`GATE_BENCH_FEEDS`, default 1).
fn feed_count() -> usize {
    std::env::var("GATE_BENCH_FEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// A feed of 100k symbols plus EURUSD in a state file at `shm` (or
/// `feed_count()` such feeds), and a writer thread publishing
/// `writer_rate()` datagrams a second into each.
fn market(
    shm: &Path,
    stop: Arc<AtomicBool>,
) -> (Gate, Published, std::thread::JoinHandle<WriterStats>) {
    let settings = FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: SYMBOLS as usize + 1,
        ..FeedSettings::default()
    };
    let before = rss_kib();
    let specs = feed_specs(feed_count() as u64, SYMBOLS + 1, &settings);
    let (published, regions) = publish(shm, DEFAULT_MODE, &specs).unwrap();
    let mut feeds = Vec::new();
    let mut readers = Vec::new();
    for (spec, r) in specs.iter().zip(&regions) {
        let (publisher, reader) =
            feed_table_in(r.capacity, &r.cell, &r.table, r.units, &r.units_region).unwrap();
        feeds.push(Feed::with_publisher(settings, 1, publisher));
        readers.push((spec.name.clone(), reader));
    }
    let table_kib = rss_kib().saturating_sub(before);
    let names: Vec<Symbol> = (0..SYMBOLS)
        .map(|i| Symbol::parse(&format!("S{i:06}")).unwrap())
        .collect();
    for feed in &mut feeds {
        for s in &names {
            feed.add_symbol(*s).unwrap();
        }
    }
    eprintln!(
        "{} symbols: RSS grew by {table_kib} KiB for the gate table (state file), {} KiB for table + Feed (process RSS {} KiB)",
        SYMBOLS + 1,
        rss_kib().saturating_sub(before),
        rss_kib()
    );
    let rate = writer_rate();
    let feeder = std::thread::spawn(move || {
        let (datagrams, elapsed) = write_quotes(&mut feeds, &names, rate, 0, &stop, unix_now);
        WriterStats { datagrams, elapsed }
    });
    (Gate::new(readers), published, feeder)
}

/// The shared-memory client side, in a child process: `clients` threads
/// checking EURUSD for `GATE_BENCH_SHM_SECS` after a 100 ms warm-up.
/// Prints the merged histogram (`H <ns> <count>` lines) and `T` totals.
fn shm_child(path: &str) {
    let clients: usize = std::env::var("GATE_BENCH_SHM_CLIENTS")
        .unwrap()
        .parse()
        .unwrap();
    let secs: f64 = std::env::var("GATE_BENCH_SHM_SECS")
        .unwrap()
        .parse()
        .unwrap();
    let barrier = Arc::new(Barrier::new(clients));
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let path = path.to_string();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut c = Client::open(&path).expect("open the state file");
                let clock = quanta::Clock::new();
                let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
                barrier.wait();
                let (cpu0, ru0) = (thread_cpu_ns(), cpu::rusage(libc::RUSAGE_THREAD));
                let start = Instant::now();
                let warm_end = start + Duration::from_millis(100);
                let end = warm_end + Duration::from_secs_f64(secs);
                let (mut n, mut all, mut oks) = (0u64, 0u64, 0u64);
                let s0 = c.stats();
                loop {
                    // The wall clock is read 1 in 64 checks (Instant).
                    if all.is_multiple_of(64) && Instant::now() >= end {
                        break;
                    }
                    let t0 = clock.raw();
                    let v = c.check_now(b"EURUSD", None, None).expect("check");
                    let t1 = clock.raw();
                    oks += v.ok() as u64;
                    all += 1;
                    if all % 64 == 1 && Instant::now() < warm_end {
                        continue;
                    }
                    h.record(clock.delta_as_nanos(t0, t1).max(1)).unwrap();
                    n += 1;
                }
                let ru = cpu::rusage(libc::RUSAGE_THREAD);
                let st = c.stats();
                (
                    h,
                    n,
                    all,
                    thread_cpu_ns() - cpu0,
                    (ru.ru_nvcsw - ru0.ru_nvcsw) as u64,
                    (ru.ru_nivcsw - ru0.ru_nivcsw) as u64,
                    st.retries - s0.retries,
                    oks,
                )
            })
        })
        .collect();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    let mut t = [0u64; 7];
    for h in handles {
        let (h, n, all, cpu, v, i, retries, oks) = h.join().unwrap();
        hist.add(&h).unwrap();
        for (a, b) in t.iter_mut().zip([n, all, cpu, v, i, retries, oks]) {
            *a += b;
        }
    }
    for v in hist.iter_recorded() {
        println!("H {} {}", v.value_iterated_to(), v.count_at_value());
    }
    println!(
        "T {}",
        t.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// Checks, retries and OK answers of the shared-memory rows.
#[derive(Default, Clone, Copy)]
struct ShmTotals {
    checks: u64,
    retries: u64,
    oks: u64,
}

/// One slice of the shared-memory row: a child process of `clients`.
fn run_shm(path: &Path, clients: usize, measure: Duration, totals: &mut ShmTotals) -> Run {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("GATE_BENCH_SHM_CHILD", path)
        .env("GATE_BENCH_SHM_CLIENTS", clients.to_string())
        .env("GATE_BENCH_SHM_SECS", measure.as_secs_f64().to_string())
        .output()
        .expect("spawn the shm client process");
    assert!(
        out.status.success(),
        "shm client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut hist = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    let mut t = vec![0u64; 7];
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<u64> = l
            .split(' ')
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        if l.starts_with("H ") {
            hist.record_n(w[0], w[1]).unwrap();
        } else if l.starts_with("T ") {
            t = w;
        }
    }
    totals.checks += t[1];
    totals.retries += t[5];
    totals.oks += t[6];
    Run {
        hist,
        requests: t[0],
        elapsed: measure,
        all_requests: t[1],
        client_cpu_ns: t[2],
        server_cpu_ns: 0,
        client_vcsw: t[3],
        client_icsw: t[4],
    }
}

/// How a client knows its answer is complete.
#[derive(Clone, Copy)]
enum Framing {
    Line,
    /// A RESP bulk string `$<n>\r\n<n bytes>\r\n`.
    RespBulk,
}

fn complete(buf: &[u8], f: Framing) -> bool {
    match f {
        Framing::Line => buf.last() == Some(&b'\n'),
        Framing::RespBulk => {
            let Some(hdr) = buf.windows(2).position(|w| w == b"\r\n") else {
                return false;
            };
            if buf[0] != b'$' {
                return true; // an error or nil: complete at its CRLF
            }
            let n: i64 = std::str::from_utf8(&buf[1..hdr])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(-1);
            n < 0 || buf.len() >= hdr + 2 + n as usize + 2
        }
    }
}

struct Run {
    hist: Histogram<u64>,
    requests: u64,
    elapsed: Duration,
    /// CPU accounting over whole slices (warm-up included): requests
    /// answered, CPU time of the client threads and of the server (the
    /// rest of this process, or redis-server's), client context switches.
    all_requests: u64,
    client_cpu_ns: u64,
    server_cpu_ns: u64,
    client_vcsw: u64,
    client_icsw: u64,
}

/// CPU time of the calling thread, ns (scheduler accounting).
fn thread_cpu_ns() -> u64 {
    schedstat_ns("/proc/thread-self/schedstat")
}

/// First field of a `schedstat` file: time spent on a CPU, ns.
fn schedstat_ns(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `clients` threads doing request/answer round trips for `secs` after a
/// short warm-up. `server_pid`: the server is another process (its CPU
/// time is read from /proc); otherwise it is the rest of this one.
fn run_clients(
    path: &Path,
    request: &[u8],
    framing: Framing,
    clients: usize,
    measure: Duration,
    server_pid: Option<u32>,
) -> Run {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let warmup = Duration::from_millis(100);
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let path = path.to_path_buf();
            let request = request.to_vec();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut s = UnixStream::connect(&path).expect("connect");
                let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
                let mut buf = vec![0u8; 4096];
                barrier.wait();
                let (cpu0, ru0) = (thread_cpu_ns(), cpu::rusage(libc::RUSAGE_THREAD));
                let mut all = 0u64;
                let start = Instant::now();
                let (warm_end, end) = (start + warmup, start + warmup + measure);
                let mut n = 0u64;
                loop {
                    let t0 = Instant::now();
                    if t0 >= end {
                        break;
                    }
                    s.write_all(&request).expect("write");
                    let mut got = 0;
                    loop {
                        let r = s.read(&mut buf[got..]).expect("read");
                        assert!(r > 0, "server closed");
                        got += r;
                        if complete(&buf[..got], framing) {
                            break;
                        }
                    }
                    all += 1;
                    if t0 >= warm_end {
                        h.record(t0.elapsed().as_nanos() as u64).unwrap();
                        n += 1;
                    }
                }
                let ru = cpu::rusage(libc::RUSAGE_THREAD);
                let cpu = thread_cpu_ns() - cpu0;
                let csw = (
                    (ru.ru_nvcsw - ru0.ru_nvcsw) as u64,
                    (ru.ru_nivcsw - ru0.ru_nivcsw) as u64,
                );
                (h, n, all, cpu, csw)
            })
        })
        .collect();
    let server_cpu = || match server_pid {
        Some(pid) => schedstat_ns(&format!("/proc/{pid}/schedstat")),
        None => cpu::process_cpu_ns(),
    };
    let proc0 = server_cpu();
    barrier.wait();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    let mut r = Run {
        hist: Histogram::new_with_bounds(1, 1_000_000_000, 3).unwrap(),
        requests: 0,
        elapsed: measure,
        all_requests: 0,
        client_cpu_ns: 0,
        server_cpu_ns: 0,
        client_vcsw: 0,
        client_icsw: 0,
    };
    for h in handles {
        let (h, n, all, cpu, (v, i)) = h.join().expect("client");
        hist.add(&h).unwrap();
        r.requests += n;
        r.all_requests += all;
        r.client_cpu_ns += cpu;
        r.client_vcsw += v;
        r.client_icsw += i;
    }
    let proc_cpu = server_cpu().saturating_sub(proc0);
    // In-process servers: the process total less the clients (the feed
    // thread's ~1000 quotes/s and this thread's waiting are included).
    r.server_cpu_ns = match server_pid {
        Some(_) => proc_cpu,
        None => proc_cpu.saturating_sub(r.client_cpu_ns),
    };
    r.hist = hist;
    r
}

fn row(name: &str, clients: usize, r: &Run) -> String {
    let us = |q: f64| r.hist.value_at_quantile(q) as f64 / 1000.0;
    let per_req = |ns: u64| ns as f64 / 1000.0 / r.all_requests.max(1) as f64;
    format!(
        "| {name} | {clients} | {:.3} | {:.3} | {:.3} | {:.0} | {:.1} | {:.1} | {:.2} | {:.2} |",
        us(0.5),
        us(0.99),
        us(0.999),
        r.requests as f64 / r.elapsed.as_secs_f64(),
        per_req(r.client_cpu_ns),
        per_req(r.server_cpu_ns),
        r.client_vcsw as f64 / r.all_requests.max(1) as f64,
        r.client_icsw as f64 / r.all_requests.max(1) as f64,
    )
}

// ---------------------------------------------------------------- echo

/// The floor: echo every byte back. Blocking: a thread per connection.
fn echo_blocking(path: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// The floor with a spinning server: one thread, `epoll_wait(0)` in a loop.
fn echo_spin(
    path: &Path,
    stop: Arc<AtomicBool>,
    cpu: Option<usize>,
) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        if let Some(cpu) = cpu {
            tickgate::gate::server::pin_to_cpu(cpu);
        }
        // SAFETY: plain epoll syscalls on descriptors owned here.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: u64::MAX,
        };
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, listener.as_raw_fd(), &mut ev) };
        let mut conns: Vec<Option<UnixStream>> = Vec::new();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 64, 0) };
            if n == 0 {
                // Same idle policy as the gate's busy-poll loop.
                std::thread::yield_now();
                continue;
            }
            for e in &events[..n.max(0) as usize] {
                if e.u64 == u64::MAX {
                    while let Ok((s, _)) = listener.accept() {
                        s.set_nonblocking(true).unwrap();
                        let mut ev = libc::epoll_event {
                            events: libc::EPOLLIN as u32,
                            u64: conns.len() as u64,
                        };
                        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, s.as_raw_fd(), &mut ev) };
                        conns.push(Some(s));
                    }
                    continue;
                }
                let i = e.u64 as usize;
                let Some(s) = conns[i].as_mut() else { continue };
                match s.read(&mut buf) {
                    Ok(0) => {
                        unsafe {
                            libc::epoll_ctl(
                                ep,
                                libc::EPOLL_CTL_DEL,
                                s.as_raw_fd(),
                                std::ptr::null_mut(),
                            )
                        };
                        conns[i] = None;
                    }
                    Ok(n) => {
                        // Small answers to a blocking client: the socket
                        // buffer has room; spin on the rare short write.
                        let mut off = 0;
                        while off < n {
                            match s.write(&buf[off..n]) {
                                Ok(w) => off += w,
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                                Err(_) => break,
                            }
                        }
                    }
                    Err(_) => {}
                }
            }
        }
        unsafe { libc::close(ep) };
    })
}

// ---------------------------------------------------------------- redis

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn resp_call(s: &mut UnixStream, args: &[&[u8]]) -> Vec<u8> {
    s.write_all(&resp(args)).unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    loop {
        let n = s.read(&mut buf[got..]).unwrap();
        assert!(n > 0);
        got += n;
        if complete(&buf[..got], Framing::RespBulk)
            || buf[0] != b'$' && buf[..got].ends_with(b"\r\n")
        {
            buf.truncate(got);
            return buf;
        }
    }
}

/// Starts a private redis-server on a Unix socket; `None` if unavailable.
fn start_redis() -> Option<PathBuf> {
    let _ = std::fs::remove_file(REDIS_SOCK);
    let status = std::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--unixsocket",
            REDIS_SOCK,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "yes",
        ])
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    for _ in 0..100 {
        if UnixStream::connect(REDIS_SOCK).is_ok() {
            return Some(PathBuf::from(REDIS_SOCK));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn stop_redis(path: &Path) {
    if let Ok(mut s) = UnixStream::connect(path) {
        let _ = s.write_all(&resp(&[b"SHUTDOWN", b"NOSAVE"]));
        let mut b = [0u8; 64];
        let _ = s.read(&mut b);
    }
}

// ---------------------------------------------------------------- main

/// `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
/// binary without it: then a smoke run (every configuration for a moment,
/// no Redis) checks that the harness works without spending CI minutes.
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn main() {
    if let Ok(path) = std::env::var("GATE_BENCH_SHM_CHILD") {
        return shm_child(&path);
    }
    if smoke() {
        println!("gate_rtt: smoke run (use `cargo bench --bench gate_rtt` to measure)");
    }
    let stop_feed = Arc::new(AtomicBool::new(false));
    let dir = tempfile::tempdir().unwrap();
    let shm_path = dir.path().join("state.shm");
    let (gate, published, feeder) = market(&shm_path, stop_feed.clone());
    let cpu = spin_cpu();
    let mut rows = Vec::new();

    // In-process: the check itself, per call, over the table.
    {
        let mut out = Vec::with_capacity(256);
        let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
        let n = if smoke() { 1000 } else { 2_000_000u64 };
        let start = Instant::now();
        for _ in 0..n {
            out.clear();
            gate.answer(b"CHECK EURUSD", unix_now(), &mut out);
        }
        let mean = start.elapsed().as_nanos() as f64 / n as f64;
        for _ in 0..n / 10 {
            out.clear();
            let t0 = Instant::now();
            gate.answer(b"CHECK EURUSD", unix_now(), &mut out);
            h.record(t0.elapsed().as_nanos() as u64).unwrap();
        }
        let fixed = unix_now();
        let start = Instant::now();
        for _ in 0..n {
            out.clear();
            gate.answer(b"CHECK EURUSD", fixed, &mut out);
        }
        let mean_fixed = start.elapsed().as_nanos() as f64 / n as f64;
        let start = Instant::now();
        let mut sink = 0i64;
        for _ in 0..n {
            sink = sink.wrapping_add(unix_now());
        }
        let mean_clock = start.elapsed().as_nanos() as f64 / n as f64;
        std::hint::black_box(sink);
        println!(
            "in-process answer() without the clock read: mean {mean_fixed:.0} ns/call; clock read alone: {mean_clock:.0} ns"
        );
        out.clear();
        gate.answer(b"CHECK EURUSD", unix_now(), &mut out);
        println!(
            "sample answer: {}",
            String::from_utf8_lossy(&out).trim_end()
        );
        println!(
            "in-process answer() incl. clock read: mean {mean:.0} ns/call, p50 {} ns, p99 {} ns, p99.9 {} ns",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999)
        );
        // The shared-memory client in this process, for reference.
        let mut c = Client::open(&shm_path).unwrap();
        let start = Instant::now();
        for _ in 0..n {
            std::hint::black_box(c.check(b"EURUSD", fixed, None, None).unwrap());
        }
        let mean_shm = start.elapsed().as_nanos() as f64 / n as f64;
        let mut line = Vec::new();
        c.answer(b"CHECK EURUSD", unix_now(), &mut line).unwrap();
        println!(
            "in-process shm Client::check without the clock read: mean {mean_shm:.0} ns/call; sample {}",
            String::from_utf8_lossy(&line).trim_end()
        );
    }

    // Every configuration runs in `rounds` short slices, interleaved, so
    // that the noise of this shared machine falls on all of them alike.
    // Spinning servers run only during their own slices.
    let rounds = rounds();
    let slice = Duration::from_secs_f64(secs() / rounds as f64);
    let redis = if smoke() { None } else { start_redis() };
    let get = resp(&[b"GET", b"quote:EURUSD"]);
    if let Some(path) = &redis {
        let mut out = Vec::new();
        gate.answer(b"CHECK EURUSD", unix_now(), &mut out);
        let mut s = UnixStream::connect(path).unwrap();
        let line = &out[..out.len() - 1];
        assert_eq!(
            resp_call(&mut s, &[b"SET", b"quote:EURUSD", line]),
            b"+OK\r\n"
        );
    } else if !smoke() {
        println!("redis-server not available: Redis rows skipped");
    }
    let redis_pid = redis.as_ref().and_then(|p| {
        let mut s = UnixStream::connect(p).ok()?;
        let info = resp_call(&mut s, &[b"INFO", b"server"]);
        let info = String::from_utf8_lossy(&info);
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:")?.trim().parse::<u32>().ok())
    });
    let configs: Vec<Config> = [
        Config::Gate("gate blocking (thread/conn)", IoMode::Blocking),
        Config::Gate("gate epoll", IoMode::Epoll),
        Config::Gate("gate busy_poll", IoMode::BusyPoll),
        Config::Echo("echo blocking (thread/conn)", false),
        Config::Echo("echo spinning", true),
        Config::Redis,
        Config::Shm,
    ]
    .into_iter()
    .filter(|c| !matches!(c, Config::Redis) || redis.is_some())
    .filter(|c| only().is_none_or(|o| o.iter().any(|w| c.name().contains(w.as_str()))))
    .collect();
    let mut shm_totals = ShmTotals::default();
    let mut results: Vec<(String, usize, Option<Run>)> = Vec::new();
    for c in &configs {
        for clients in [1, 16] {
            results.push((c.name().to_string(), clients, None));
        }
    }
    for round in 0..rounds {
        for (ci, c) in configs.iter().enumerate() {
            for (k, clients) in [1usize, 16].into_iter().enumerate() {
                let path = dir.path().join(format!("bench-{round}-{ci}-{k}.sock"));
                let r = match c {
                    Config::Gate(_, io) => {
                        let cfg = ServerConfig {
                            path: path.clone(),
                            io: *io,
                            cpu: if *io == IoMode::BusyPoll { cpu } else { None },
                            ..ServerConfig::default()
                        };
                        let server = serve(&cfg, gate.clone()).unwrap();
                        let r = run_clients(&path, REQUEST, Framing::Line, clients, slice, None);
                        server.stop();
                        r
                    }
                    Config::Echo(_, spin) => {
                        let stop = Arc::new(AtomicBool::new(false));
                        let t = if *spin {
                            echo_spin(&path, stop.clone(), cpu)
                        } else {
                            echo_blocking(&path, stop.clone())
                        };
                        let r = run_clients(&path, REQUEST, Framing::Line, clients, slice, None);
                        stop.store(true, Ordering::Relaxed);
                        let _ = UnixStream::connect(&path); // wakes the blocking acceptor
                        t.join().unwrap();
                        r
                    }
                    Config::Redis => {
                        let p = redis.as_ref().unwrap();
                        run_clients(p, &get, Framing::RespBulk, clients, slice, redis_pid)
                    }
                    Config::Shm => run_shm(&shm_path, clients, slice, &mut shm_totals),
                };
                let acc = &mut results[ci * 2 + k].2;
                match acc {
                    None => *acc = Some(r),
                    Some(a) => {
                        a.hist.add(&r.hist).unwrap();
                        a.requests += r.requests;
                        a.elapsed += r.elapsed;
                        a.all_requests += r.all_requests;
                        a.client_cpu_ns += r.client_cpu_ns;
                        a.server_cpu_ns += r.server_cpu_ns;
                        a.client_vcsw += r.client_vcsw;
                        a.client_icsw += r.client_icsw;
                    }
                }
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    if let Some(p) = &redis {
        stop_redis(p);
    }
    for (name, clients, r) in &results {
        rows.push(row(name, *clients, r.as_ref().unwrap()));
    }

    stop_feed.store(true, Ordering::Relaxed);
    let w = feeder.join().unwrap();
    drop(published);
    println!(
        "writer: {} datagrams in {:.1} s = {:.0} datagrams/s (target {})",
        w.datagrams,
        w.elapsed.as_secs_f64(),
        w.datagrams as f64 / w.elapsed.as_secs_f64(),
        writer_rate()
    );
    if shm_totals.checks > 0 {
        println!(
            "shm: {} checks, {} seqlock retries ({:.4} per check), {:.1}% OK",
            shm_totals.checks,
            shm_totals.retries,
            shm_totals.retries as f64 / shm_totals.checks as f64,
            100.0 * shm_totals.oks as f64 / shm_totals.checks as f64
        );
    }
    for clients in [1usize, 16] {
        let p50 = |pred: &dyn Fn(&str) -> bool| {
            results
                .iter()
                .filter(|(n, c, _)| *c == clients && pred(n))
                .filter_map(|(_, _, r)| r.as_ref().map(|r| r.hist.value_at_quantile(0.5)))
                .min()
        };
        if let (Some(shm), Some(sock)) = (
            p50(&|n: &str| n.starts_with("shm")),
            p50(&|n: &str| n.starts_with("gate")),
        ) {
            println!(
                "{clients} client(s): shm p50 {shm} ns vs best gate socket p50 {sock} ns: {:.0}x",
                sock as f64 / shm.max(1) as f64
            );
        }
    }

    println!();
    println!(
        "| server | clients | p50 µs | p99 µs | p99.9 µs | req/s | client CPU µs/req | server CPU µs/req | client vol. csw/req | client invol. csw/req |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
}
