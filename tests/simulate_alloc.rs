//! The simulator allocates nothing per message once warm: a counting
//! global allocator watches a long stretch of the stream (with loss,
//! duplicates and reordering on both lines).

use std::sync::atomic::Ordering;

use tickgate::sim::simulate::{SimConfig, SimMode, Simulator};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, COUNTING};

/// Runs without libtest (`harness = false`): the allocation counter is
/// process-wide, and no harness thread may allocate while it counts.
fn main() {
    no_allocation_per_message_once_warm();
    println!("test no_allocation_per_message_once_warm ... ok");
}

fn no_allocation_per_message_once_warm() {
    let mut c = SimConfig::new(77);
    c.duration_ns = 300_000_000_000;
    c.rate = 5_000;
    c.batch = 3;
    c.symbols = 200;
    c.mode = SimMode::Delta;
    c.snapshot_ms = 1000;
    c.heartbeat_ms = 250;
    c.lines[0].loss = 0.05;
    c.lines[1].loss = 0.05;
    c.dup = 0.05;
    c.reorder = 0.05;
    let mut sim = Simulator::new(c).unwrap();
    let mut buf = Vec::with_capacity(2048);
    // Warm-up long enough for the in-flight pool to reach its high-water
    // mark (snapshot rounds every second put many packets in flight at once
    // when reordering and duplication hit them).
    for _ in 0..200_000 {
        sim.next_into(&mut buf).expect("warm-up");
    }
    let mut bytes = 0usize;
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..100_000 {
        let ev = sim.next_into(&mut buf).expect("stream long enough");
        bytes += buf.len() + ev.line;
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert!(bytes > 100_000);
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "allocations in steady state"
    );
}
