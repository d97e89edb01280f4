//! The shared-memory check allocates nothing (docs/shm.md: a symbol is
//! looked up without allocating): `Client::check` and `Client::answer` into a
//! reused buffer, counted by a global allocator. Runs without libtest
//! (`harness = false`) so that no harness thread allocates meanwhile.

use std::sync::atomic::Ordering;

use tickgate::client::Client;
use tickgate::daemon::shm::{publish, DEFAULT_MODE};
use tickgate::feed::reader::feed_table_in;
use tickgate::feed::shm::FeedSpec;
use tickgate::feed::{ClockOffset, Feed, FeedSettings};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, COUNTING};

fn main() {
    checks_do_not_allocate();
    println!("test checks_do_not_allocate ... ok");
}

fn checks_do_not_allocate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.shm");
    let spec = FeedSpec {
        name: "md1".into(),
        capacity: 16,
        stale_ms: 500,
        source_max_age_ms: 2000,
        units: 0,
    };
    // Two feeds, both knowing EURUSD (gate.md "One symbol on several
    // feeds"): the combined answer must not allocate either.
    let spec2 = FeedSpec {
        name: "md2".into(),
        ..spec.clone()
    };
    let (_published, regions) = publish(&path, DEFAULT_MODE, &[spec, spec2]).unwrap();
    let r = &regions[0];
    let (publisher, _reader) =
        feed_table_in(r.capacity, &r.cell, &r.table, r.units, &r.units_region).unwrap();
    let settings = FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: 16,
        ..FeedSettings::default()
    };
    let mut feed = Feed::with_publisher(settings, 1, publisher);
    let eur = Symbol::parse("EURUSD").unwrap();
    let side = Some(Side {
        px: 1_085_120_000,
        qty: 1,
    });
    let mut b = PacketBuilder::new();
    b.start(SessionId::parse("S").unwrap(), 1)
        .quote(&Quote::new(eur, 1, 1_000, side, side));
    feed.on_datagram(0, b.bytes(), 2_000);
    let r2 = &regions[1];
    let (publisher2, _reader2) =
        feed_table_in(r2.capacity, &r2.cell, &r2.table, r2.units, &r2.units_region).unwrap();
    let mut feed2 = Feed::with_publisher(settings, 1, publisher2);
    feed2.on_datagram(0, b.bytes(), 2_000);

    let mut c = Client::open(&path).unwrap();
    let mut probe = Vec::new();
    c.answer(b"CHECK EURUSD", 3_000, &mut probe).unwrap();
    assert!(
        String::from_utf8_lossy(&probe).ends_with(" feeds=md1:OK,md2:OK\n"),
        "{}",
        String::from_utf8_lossy(&probe)
    );
    let lines: [&[u8]; 7] = [
        b"CHECK EURUSD",
        b"CHECK EURUSD feed=md2",
        b"CHECK EURUSD feed=nope",
        b"CHECK EURUSD stale_ms=1 source_ms=1",
        b"CHECK NOPE",
        b"CHECK EURUSD stale_ms=99999999",
        b"PING",
    ];
    let mut out = Vec::with_capacity(4096);
    // Warm-up: the first check looks at the path (a stat, once a second).
    for l in lines {
        c.answer(l, 3_000, &mut out).unwrap();
    }
    let mut oks = 0;
    COUNTING.store(true, Ordering::SeqCst);
    for i in 0..10_000i64 {
        // Within one second of `now`: no look at the path.
        let now = 3_000 + i * 1000;
        oks += c.check(b"EURUSD", now, None, None).unwrap().ok() as u32;
        out.clear();
        c.answer(lines[i as usize % lines.len()], now, &mut out)
            .unwrap();
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0, "checks allocated");
    assert_eq!(oks, 10_000);
}
