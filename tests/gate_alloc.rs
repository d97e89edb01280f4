//! gate.md "Speed": answering must not allocate per request on the hot
//! path. A counting global allocator checks it for the in-process answer
//! and for the socket server in every I/O mode (after a connection's
//! buffers exist). The counter is process-wide, so this test runs without
//! libtest (`harness = false`): no harness thread can allocate meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};

use tickgate::feed::reader::feed_table;
use tickgate::feed::{ClockOffset, Feed, FeedSettings};
use tickgate::gate::server::{serve, Backend, IoMode, ServerConfig};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

const REQUESTS: [&[u8]; 10] = [
    b"CHECK EURUSD\n",
    // Known to one feed only, and one feed of two alone (feed=).
    b"CHECK GBPUSD\n",
    b"CHECK EURUSD feed=md2\n",
    b"CHECK EURUSD feed=nope\n",
    b"CHECK EURUSD source_ms=100 feed=md1\n",
    b"CHECK EURUSD stale_ms=1 source_ms=1\n",
    b"CHECK NOPE\n",
    b"CHECK EURUSD stale_ms=x\n",
    b"PING\n",
    b"BOGUS\n",
];

fn main() {
    answering_does_not_allocate();
    println!("test answering_does_not_allocate ... ok");
}

fn answering_does_not_allocate() {
    let settings = FeedSettings {
        clock_offset: ClockOffset::Off,
        max_symbols: 16,
        ..FeedSettings::default()
    };
    let (publisher, reader) = feed_table(&settings);
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
    let gbp = Symbol::parse("GBPUSD").unwrap();
    b.start(SessionId::parse("S").unwrap(), 2)
        .quote(&Quote::new(gbp, 1, 1_000, side, side));
    feed.on_datagram(0, b.bytes(), 2_000);
    // A second feed knows EURUSD too (gate.md "One symbol on several
    // feeds"): its answer combines both.
    let (publisher2, reader2) = feed_table(&settings);
    let mut feed2 = Feed::with_publisher(settings, 1, publisher2);
    let higher = Some(Side {
        px: 1_085_130_000,
        qty: 2,
    });
    b.start(SessionId::parse("S").unwrap(), 1)
        .quote(&Quote::new(eur, 1, 1_000, higher, higher));
    feed2.on_datagram(0, b.bytes(), 2_000);
    let gate =
        tickgate::gate::server::Gate::new(vec![("md1".into(), reader), ("md2".into(), reader2)]);
    let mut probe = Vec::new();
    gate.answer(b"CHECK EURUSD", 3_000, &mut probe);
    assert!(
        String::from_utf8_lossy(&probe).ends_with(" feeds=md1:OK,md2:OK\n"),
        "{}",
        String::from_utf8_lossy(&probe)
    );

    // In-process, into a reused buffer.
    let mut out = Vec::with_capacity(4096);
    for r in REQUESTS {
        gate.answer(&r[..r.len() - 1], 3_000, &mut out);
    }
    let before = allocations();
    for i in 0..10_000 {
        out.clear();
        let r = REQUESTS[i % REQUESTS.len()];
        gate.answer(&r[..r.len() - 1], 3_000 + i as i64, &mut out);
    }
    assert_eq!(allocations() - before, 0, "in-process answers allocated");

    // Over the socket, in each mode: the client uses fixed buffers only.
    for io in [IoMode::Blocking, IoMode::Epoll, IoMode::BusyPoll] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ServerConfig {
            path: dir.path().join("gate.sock"),
            io,
            ..ServerConfig::default()
        };
        let server = serve(&cfg, gate.clone()).unwrap();
        let mut s = UnixStream::connect(server.path()).unwrap();
        let mut buf = [0u8; 4096];
        let mut round_trip = |s: &mut UnixStream, req: &[u8]| {
            s.write_all(req).unwrap();
            let mut got = 0;
            while got == 0 || buf[got - 1] != b'\n' {
                let n = s.read(&mut buf[got..]).unwrap();
                assert!(n > 0);
                got += n;
            }
        };
        // Warm-up: the connection's buffers reach their working size.
        for _ in 0..10 {
            for r in REQUESTS {
                round_trip(&mut s, r);
            }
        }
        let before = allocations();
        for i in 0..2_000 {
            round_trip(&mut s, REQUESTS[i % REQUESTS.len()]);
        }
        let during = allocations() - before;
        drop(s);
        server.stop();
        assert_eq!(during, 0, "{io:?}: the server allocated while answering");
    }
}
