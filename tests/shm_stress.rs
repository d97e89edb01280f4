//! The state file under a live writer: a feed writes quotes as fast as it
//! can while reader threads of this process and reader processes (this
//! test binary again, `child_reader`) check through their own mappings.
//! Every quote a reader sees must be one the writer wrote (all fields of
//! one quote: derived from its sequence number), and never older than one
//! it saw before.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickgate::client::Client;
use tickgate::feed::reader::TablePublisher;
use tickgate::feed::verdict::Verdict;
use tickgate::feed::{ClockOffset, Feed, FeedSettings};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

#[path = "common/shm.rs"]
mod shm;

const BASE: i64 = 1_764_489_600_000_000_000;
const SYMBOLS: u64 = 16;
/// Distinct quotes of the hot symbol each reader must see before it stops.
const DISTINCT: u64 = 200;
const READER_THREADS: usize = 3;
const READER_PROCESSES: usize = 2;
/// Not an assertion: only bounds the test if something stalls.
const CAP: Duration = Duration::from_secs(120);
const ENV: &str = "TICKGATE_STRESS_SHM";

fn name(i: u64) -> String {
    format!("S{i:03}")
}

/// The quote the writer sends as its `n`-th for a symbol.
fn quote(sym: Symbol, n: u64) -> Quote {
    Quote::new(
        sym,
        n,
        (BASE + n as i64) as u64,
        Some(Side {
            px: n as i64 * 10,
            qty: n,
        }),
        Some(Side {
            px: n as i64 * 10 + 1,
            qty: n + 7,
        }),
    )
}

/// The quote in `v` is exactly the writer's `n`-th (`n = seq`).
fn valid(v: &Verdict, now: i64) -> Result<u64, String> {
    if !v.has_quote {
        return Ok(0);
    }
    let n = v.seq;
    let want = quote(Symbol::parse("X").unwrap(), n);
    if v.bid != want.bid() || v.ask != want.ask() || v.source_age_ns != now - (BASE + n as i64) {
        return Err(format!("torn or foreign quote {v:?}"));
    }
    Ok(n)
}

/// Reads until the hot symbol showed `DISTINCT` different quotes; checks
/// every read. Returns (reads, retries).
fn read_until_seen(path: &std::path::Path) -> Result<(u64, u64), String> {
    let mut client = Client::open(path).map_err(|e| e.to_string())?;
    let names: Vec<String> = (0..SYMBOLS).map(name).collect();
    let mut last = vec![0u64; SYMBOLS as usize];
    let mut distinct = 0;
    let mut reads = 0u64;
    let start = Instant::now();
    let mut i = 0usize;
    while distinct < DISTINCT && start.elapsed() < CAP {
        // The hot symbol, then any other.
        for s in [0, 1 + i % (SYMBOLS as usize - 1)] {
            let now = BASE + 1_000_000_000;
            let v = client
                .check(names[s].as_bytes(), now, None, None)
                .map_err(|e| e.to_string())?;
            let n = valid(&v, now)?;
            if n < last[s] {
                return Err(format!("{}: went back from {} to {n}", names[s], last[s]));
            }
            if s == 0 && n > last[0] {
                distinct += 1;
            }
            last[s] = n;
            reads += 1;
        }
        i += 1;
    }
    if distinct < DISTINCT {
        return Err(format!("saw only {distinct} quotes of the hot symbol"));
    }
    Ok((reads, client.stats().retries))
}

/// A reader process (spawned by the test below; does nothing otherwise).
#[test]
fn child_reader() {
    let Some(path) = std::env::var_os(ENV) else {
        return;
    };
    match read_until_seen(std::path::Path::new(&path)) {
        Ok((reads, retries)) => println!("READER OK reads={reads} retries={retries}"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn readers_in_threads_and_processes_see_only_whole_quotes() {
    let settings = FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: 64,
        ..FeedSettings::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.shm");
    let (published, mut feeds, _gate) = shm::publish_feeds(&path, &[("md1", settings)]);
    let mut feed = feeds.pop().unwrap();
    let syms: Vec<Symbol> = (0..SYMBOLS)
        .map(|i| Symbol::parse(&name(i)).unwrap())
        .collect();
    // Every symbol has a first quote before any reader starts.
    let mut pseq = 0u64;
    let mut counts = vec![0u64; SYMBOLS as usize];
    let mut send = move |feed: &mut Feed<TablePublisher>, s: usize| {
        counts[s] += 1;
        pseq += 1;
        let mut b = PacketBuilder::new();
        b.start(SessionId::parse("S1").unwrap(), pseq)
            .quote(&quote(syms[s], counts[s]));
        feed.on_datagram(0, b.bytes(), BASE + pseq as i64);
    };
    for s in 0..SYMBOLS as usize {
        send(&mut feed, s);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut feed = feed;
            let mut i = 0usize;
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < CAP {
                // The hot symbol every other packet, the others in turn.
                let s = if i.is_multiple_of(2) {
                    0
                } else {
                    1 + (i / 2) % (SYMBOLS as usize - 1)
                };
                send(&mut feed, s);
                i += 1;
            }
            i
        })
    };
    let children: Vec<_> = (0..READER_PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["child_reader", "--exact", "--nocapture", "--test-threads=1"])
                .env(ENV, &path)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let threads: Vec<_> = (0..READER_THREADS)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || read_until_seen(&path))
        })
        .collect();
    let mut results = Vec::new();
    for t in threads {
        results.push(t.join().unwrap());
    }
    let mut outputs = Vec::new();
    for c in children {
        outputs.push(c.wait_with_output().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    drop(published);
    assert!(writes > 0);
    for r in &results {
        let (reads, _retries) = r.as_ref().expect("thread reader");
        assert!(*reads >= DISTINCT);
    }
    for o in &outputs {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("READER OK"),
            "reader process failed:\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
