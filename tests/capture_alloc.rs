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
    streaming_in_time_order_allocates_nothing_per_packet();
    println!("test streaming_in_time_order_allocates_nothing_per_packet ... ok");
}

/// `CaptureStream` of a capture out of order (every 7th datagram 200 us
/// late: thousands of sorted runs, sorted in memory as one chunk): once
/// the chunk is sorted, handing datagrams out in time order allocates
/// nothing per packet.
fn streaming_in_time_order_allocates_nothing_per_packet() {
    use tickgate::capture::stream::{CaptureStream, StreamOptions};
    let a: SocketAddrV4 = "127.0.0.1:1".parse().unwrap();
    let g: SocketAddrV4 = "239.1.1.1:2".parse().unwrap();
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    // 1 us apart, every 7th 200 us late, sizes 1..1000 bytes
    let n = 60_000i64;
    w.write_udp(0, a, g, &[7u8; 1000]).unwrap();
    for i in 1..n {
        let ts = 1_000_000 + i * 1_000 - if i % 7 == 0 { 200_000 } else { 0 };
        w.write_udp(ts, a, g, &vec![1u8; 1 + (i % 1000) as usize])
            .unwrap();
    }
    let pcap = w.into_inner().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.pcap");
    std::fs::write(&path, pcap).unwrap();
    let mut s = CaptureStream::open(&[path], StreamOptions::default()).unwrap();
    let mut last = i64::MIN;
    for _ in 0..n / 2 {
        let d = s.next_datagram().unwrap();
        assert!(d.ts >= last);
        last = d.ts;
    }
    // counted while packets go in and out; not the drain at the end, when
    // every buffer goes back to the pools at once (they grow then, once)
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let mut count = n / 2;
    while count < n - 2_000 {
        let d = s.next_datagram().unwrap();
        assert!(d.ts >= last);
        last = d.ts;
        count += 1;
    }
    COUNTING.store(false, Ordering::SeqCst);
    while let Some(d) = s.next_datagram() {
        assert!(d.ts >= last);
        last = d.ts;
        count += 1;
    }
    let allocs = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(count, n);
    let sum = s.summary();
    assert_eq!(sum.out_of_order, (n as u64 - 1) / 7);
    assert!(sum.order.chunked && sum.order.spill.chunks == 0);
    assert_eq!(
        allocs,
        0,
        "{allocs} allocations for {} packets",
        n / 2 - 2_000
    );
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
