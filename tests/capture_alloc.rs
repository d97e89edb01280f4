//! Reading with `CaptureReader::next_ref` allocates nothing per packet once
//! its buffer has grown to the largest record (pcap and pcapng).

use std::io::Cursor;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;

use tickgate::capture::{CaptureReader, PcapWriter};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, COUNTING};

fn count_allocs_while_reading(bytes: Vec<u8>, warm: usize) -> (u64, usize) {
    let mut r = CaptureReader::new(Cursor::new(bytes)).unwrap();
    for _ in 0..warm {
        r.next_ref().unwrap().unwrap();
    }
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let mut n = 0;
    let mut sum = 0u64;
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        sum += d.payload.len() as u64 + d.ts_ns as u64 % 7;
        n += 1;
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert!(sum > 0);
    (ALLOCS.load(Ordering::SeqCst), n)
}

/// Runs without libtest (`harness = false`): the allocation counter is
/// process-wide, and no harness thread may allocate while it counts.
fn main() {
    no_allocation_per_packet();
    println!("test no_allocation_per_packet ... ok");
}

fn no_allocation_per_packet() {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    let a: SocketAddrV4 = "127.0.0.1:1".parse().unwrap();
    let g: SocketAddrV4 = "239.1.1.1:2".parse().unwrap();
    w.write_udp(1, a, g, &[7u8; 1400]).unwrap();
    for i in 0..10_000u32 {
        w.write_udp(2 + i as i64, a, g, &vec![1u8; (i % 1000) as usize])
            .unwrap();
    }
    let pcap = w.into_inner().unwrap();
    let (allocs, n) = count_allocs_while_reading(pcap, 1);
    assert_eq!(n, 10_000);
    assert_eq!(allocs, 0);

    let ng = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/gen/merged3.pcapng"
    ))
    .unwrap();
    // the interface blocks come first; after the biggest frame nothing grows
    let (allocs, n) = count_allocs_while_reading(ng, 3);
    assert_eq!(n, 1);
    assert_eq!(allocs, 0);
}
