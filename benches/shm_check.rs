//! The shared-memory check's own cost: `Client::check` in this process,
//! per call, over a state file of 100,000 symbols plus EURUSD with no
//! writer running, so that what is timed is the check's code (lookup,
//! seqlock reads, verdict), not the cache lines a writer takes away
//! (`gate_rtt` measures that, and the other-process latency).
//!
//! `SHM_CHECK_WRITER_RATE=<n>` adds a writer thread publishing n datagrams
//! a second into every feed, as `gate_rtt`'s (EURUSD every fourth, the
//! other symbols in turn): then the cache lines it takes away are timed
//! too.
//!
//! `cargo bench --bench shm_check`: `SHM_CHECK_CALLS` calls (default
//! 10,000,000) timed `SHM_CHECK_ROUNDS` times (default 5), after a tenth as
//! many untimed; prints ns per call for each round. `SHM_CHECK_FEEDS=3`
//! puts every symbol on three feeds (the combined answer, gate.md "One
//! symbol on several feeds"). The call is `shm_check::one`, out of line, so
//! that `valgrind --tool=callgrind --toggle-collect='shm_check::one'`
//! counts its instructions (with `SHM_CHECK_CALLS=100000
//! SHM_CHECK_ROUNDS=1`: 110,001 calls).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[path = "common/check_market.rs"]
mod check_market;
use check_market::{feed_specs, write_quotes};

use tickgate::client::Client;
use tickgate::daemon::shm::{publish, DEFAULT_MODE};
use tickgate::feed::reader::feed_table_in;
use tickgate::feed::{ClockOffset, Feed, FeedSettings};
use tickgate::gate::server::unix_now;
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

const SYMBOLS: u32 = 100_000;

/// One check of EURUSD at `now`: whether it is OK.
#[inline(never)]
fn one(c: &mut Client, now: i64) -> bool {
    c.check(b"EURUSD", now, None, None).expect("check").ok()
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --all-targets` runs this without `--bench`: a smoke run.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let calls = if smoke {
        1_000
    } else {
        env("SHM_CHECK_CALLS", 10_000_000)
    };
    let rounds = if smoke { 1 } else { env("SHM_CHECK_ROUNDS", 5) };
    let feed_count = env("SHM_CHECK_FEEDS", 1).max(1);
    let writer_rate = env("SHM_CHECK_WRITER_RATE", 0);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.shm");
    let settings = FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: SYMBOLS as usize + 1,
        ..FeedSettings::default()
    };
    let specs = feed_specs(feed_count, SYMBOLS + 1, &settings);
    let (_published, regions) = publish(&path, DEFAULT_MODE, &specs).unwrap();
    let now = unix_now();
    let eur = Symbol::parse("EURUSD").unwrap();
    let mut b = PacketBuilder::new();
    let px = 1_085_120_000;
    let quote = Quote::new(
        eur,
        1,
        now as u64,
        Some(Side { px, qty: 1_000_000 }),
        Some(Side {
            px: px + 30_000,
            qty: 2_000_000,
        }),
    );
    b.start(SessionId::parse("BENCH").unwrap(), 1).quote(&quote);
    let mut feeds = Vec::new();
    for r in &regions {
        let (publisher, _reader) =
            feed_table_in(r.capacity, &r.cell, &r.table, r.units, &r.units_region).unwrap();
        let mut feed = Feed::with_publisher(settings, 1, publisher);
        for i in 0..SYMBOLS {
            feed.add_symbol(Symbol::parse(&format!("S{i:06}")).unwrap())
                .unwrap();
        }
        feed.on_datagram(0, b.bytes(), now);
        feeds.push(feed);
    }

    let stop = Arc::new(AtomicBool::new(false));
    // Without a writer the feeds stay here, alive, until the end.
    let (writer, _kept) = if writer_rate > 0 {
        let stop = stop.clone();
        let names: Vec<Symbol> = (0..SYMBOLS)
            .map(|i| Symbol::parse(&format!("S{i:06}")).unwrap())
            .collect();
        // The writer's clock stays `now`, as the checks' does: every
        // answer stays OK.
        let w = std::thread::spawn(move || {
            write_quotes(&mut feeds, &names, writer_rate, 1, &stop, || now).0
        });
        (Some(w), Vec::new())
    } else {
        (None, feeds)
    };

    let mut c = Client::open(&path).unwrap();
    let at = now + 1_000_000;
    assert!(one(&mut c, at), "EURUSD is OK on every feed");
    let mut oks = 0u64;
    for _ in 0..calls / 10 {
        oks += one(&mut c, at) as u64;
    }
    let mut per_call = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..calls {
            oks += one(&mut c, at) as u64;
        }
        per_call.push(start.elapsed().as_nanos() as f64 / calls as f64);
    }
    assert_eq!(oks, calls / 10 + calls * rounds, "every answer OK");
    let shown: Vec<String> = per_call.iter().map(|x| format!("{x:.2}")).collect();
    println!(
        "shm_check: {feed_count} feed(s), Client::check in process, ns per call by round: {}",
        shown.join(" ")
    );
    stop.store(true, Ordering::Relaxed);
    if let Some(w) = writer {
        let sent = w.join().unwrap();
        println!("shm_check: the writer sent {sent} datagrams");
    }
}
