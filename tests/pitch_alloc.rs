//! Decoding Cboe PITCH allocates nothing: every datagram of the real
//! capture validated, its messages walked and decoded, every field the
//! adapter reads touched, and each message's time stamped, with the
//! process-wide allocation counter at zero (venues.md `cboe-pitch`: the
//! decoders are views over the datagram, the hot path allocates nothing).

use std::sync::atomic::Ordering;

use tickgate::capture::CaptureReader;
use tickgate::venue::cboe_pitch::frame::Datagram;
use tickgate::venue::cboe_pitch::messages::{self, Message};
use tickgate::venue::cboe_pitch::time::UnitClock;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, COUNTING};

fn main() {
    let path = format!(
        "{}/fixtures/real/cboe-pitch-realtime.pcap",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut r = CaptureReader::open(path).unwrap();
    let mut all = Vec::new();
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        all.push((d.ts_ns, d.payload.to_vec()));
    }
    let mut clock = UnitClock::new();
    // The zone's first use may load it: outside the count.
    clock.on_time(0, all[0].0);
    clock.untime();
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let mut sum = 0u64;
    let mut messages_seen = 0u32;
    for (ts, d) in &all {
        let p = Datagram::parse(d).unwrap();
        sum = sum.wrapping_add(p.header.next_sequence());
        for (seq, raw) in p.sequenced() {
            messages_seen += 1;
            let m = messages::decode(raw).unwrap();
            sum = sum.wrapping_add(seq as u64);
            let stamp = match m {
                Message::Time { seconds } => clock.on_time(seconds, *ts),
                other => other.time_offset().and_then(|o| clock.stamp(o)),
            };
            sum = sum.wrapping_add(stamp.unwrap_or(0) as u64);
            match m {
                Message::AddOrder {
                    order_id,
                    shares,
                    symbol,
                    price,
                    ..
                } => {
                    sum ^= order_id ^ shares as u64 ^ price as u64 ^ symbol.words()[0];
                }
                Message::ModifyOrder {
                    order_id,
                    shares,
                    price,
                    ..
                } => sum ^= order_id ^ shares as u64 ^ price as u64,
                Message::OrderExecuted {
                    order_id, shares, ..
                }
                | Message::ReduceSize {
                    order_id, shares, ..
                } => sum ^= order_id ^ shares as u64,
                Message::DeleteOrder { order_id, .. } => sum ^= order_id,
                Message::Trade { symbol, .. } => sum ^= symbol.words()[0],
                _ => {}
            }
        }
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert!(sum > 0);
    assert_eq!(all.len(), 739);
    assert_eq!(messages_seen, 40);
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "allocations while decoding"
    );
    println!("test pitch_decoding_allocates_nothing ... ok");
}
