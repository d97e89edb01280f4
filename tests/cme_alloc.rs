//! Decoding CME MDP 3.0 packets allocates nothing: every message of the
//! real captures validated, decoded and its entries read, with the
//! process-wide allocation counter at zero (venues.md `cme-mdp3`; the
//! decoders are views over the datagram).

use std::sync::atomic::Ordering;

use tickgate::capture::CaptureReader;
use tickgate::venue::cme_mdp3::messages::{self, Body, Item};
use tickgate::venue::cme_mdp3::sbe;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, COUNTING};

fn payloads(name: &str) -> Vec<Vec<u8>> {
    let path = format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(d) = r.next_ref() {
        out.push(d.unwrap().payload.to_vec());
    }
    out
}

/// Reads everything the adapter reads of a packet; returns a checksum so
/// that nothing is optimised away.
fn read_all(d: &[u8]) -> u64 {
    let s = messages::validate(d).unwrap();
    let mut sum = u64::from(s.header.msg_seq_num);
    let (_, msgs) = sbe::packet(d).unwrap();
    for m in msgs {
        match messages::decode(&m.unwrap()).unwrap() {
            Item::Known { body, .. } => match body {
                Body::Incremental { entries, .. } => {
                    for e in entries {
                        sum += u64::from(e.rpt_seq);
                        if let Some(b) = e.book {
                            sum ^= b.price.map_or(0, |p| p.mantissa as u64);
                        }
                    }
                }
                Body::SecurityStatus(st) => sum += u64::from(st.trading_status.unwrap_or(0)),
                Body::Definition(def) => sum += messages::trim(def.symbol).len() as u64,
                Body::Snapshot(snap) => sum += snap.entries.count() as u64,
                Body::ChannelReset | Body::AdminHeartbeat => sum += 1,
            },
            Item::Unknown { header } => sum += u64::from(header.template_id),
        }
    }
    sum
}

fn main() {
    let mut all = Vec::new();
    for name in [
        "cme-mdp3-v5-definitions.pcap",
        "cme-mdp3-v6-incremental-ab.pcapng",
        "cme-mdp3-v8-status-ab.pcapng",
        "cme-mdp3-v9-sample.pcap",
    ] {
        all.extend(payloads(name));
    }
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let mut sum = 0u64;
    for d in &all {
        sum = sum.wrapping_add(read_all(d));
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert!(sum > 0);
    assert_eq!(all.len(), 20_100);
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "allocations while decoding"
    );
    println!("test cme_decoding_allocates_nothing ... ok");

    through_the_engine();
    println!("test cme_engine_allocates_only_as_kept_entries_grow ... ok");
}

/// The v6 channel through a `cme-mdp3` feed: applying a packet allocates
/// nothing but an instrument's book when it is first seen (its two sides,
/// at its depth) and the amortised growth of the kept entries' slab
/// (every instrument of this late join waits, so its entries are kept):
/// a handful of allocations for thousands of packets, not one a message.
fn through_the_engine() {
    use tickgate::feed::{Feed, FeedSettings, VenueKind};
    let path = format!(
        "{}/fixtures/real/cme-mdp3-v6-incremental-ab.pcapng",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut r = CaptureReader::open(path).unwrap();
    let mut packets = Vec::new();
    while let Some(d) = r.next_ref() {
        let d = d.unwrap();
        let line = usize::from(d.dst.ip().octets()[2] == 32);
        packets.push((line, d.payload.to_vec(), d.ts_ns));
    }
    packets.sort_by_key(|p| p.2);
    let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 2);
    let (warm, rest) = packets.split_at(4000);
    for (line, d, ts) in warm {
        feed.on_datagram(*line, d, *ts);
    }
    let known = feed.symbol_count();
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for (line, d, ts) in rest {
        feed.on_datagram(*line, d, *ts);
    }
    COUNTING.store(false, Ordering::SeqCst);
    let allocs = ALLOCS.load(Ordering::SeqCst);
    let new = (feed.symbol_count() - known) as u64;
    assert_eq!(feed.counters().channel_messages_lost, 0);
    assert!(feed.venue_recovery().kept_entries > 5000);
    assert!(new > 0 && new < 40, "{new} instruments first seen");
    assert!(
        allocs <= 2 * new + 8,
        "{allocs} allocations for {} packets and {new} new instruments",
        rest.len()
    );
}
