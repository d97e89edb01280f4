//! Memory a stranger can make a `cme-mdp3` feed hold (venues.md
//! `cme-mdp3`: Instruments and symbols, Snapshots), measured as the live
//! heap bytes of this process (a counting allocator): SecurityIDs beyond a
//! full table keep nothing of an instrument, and channel gaps over
//! instruments that then recover leave nothing behind.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

use tickgate::feed::{ClockOffset, Feed, FeedSettings, VenueKind};
use tickgate::venue::cme_mdp3::encode::{self, BookEntry};

struct Live;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

const T0: i64 = 1_796_112_000_000_000_000;

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

fn feed(max_symbols: usize) -> Feed {
    let mut s = FeedSettings::for_venue(VenueKind::CmeMdp3);
    s.max_symbols = max_symbols;
    s.clock_offset = ClockOffset::Off;
    s.recovery.gap_hold_us = 0;
    Feed::new(s, 2)
}

fn entry(security_id: i32, rpt_seq: u32) -> BookEntry {
    BookEntry {
        px: Some(10_000_000_000),
        size: Some(1),
        security_id,
        rpt_seq,
        orders: None,
        level: 1,
        action: if rpt_seq == 1 { 0 } else { 5 },
        entry_type: b'0',
    }
}

fn packet(out: &mut Vec<u8>, seq: u32, t: i64, entries: &[BookEntry]) {
    encode::start_packet(out, seq, t as u64);
    encode::book(out, t as u64, entries);
}

/// Both measurements in one test: nothing else allocates meanwhile.
#[test]
fn strangers_make_the_feed_hold_nothing_per_datagram() {
    // A full table: 200,000 new SecurityIDs keep no instrument (a set of
    // the SecurityIDs counted, a few bytes each, is all that grows).
    let mut f = feed(10);
    let mut p = Vec::new();
    let mut entries = Vec::with_capacity(200);
    let mut seq = 1;
    let mut t = T0;
    for id in 0..10 {
        entries.push(entry(id, 1));
    }
    packet(&mut p, seq, t, &entries);
    f.on_datagram(0, &p, t);
    let ids = 200_000;
    let before = live();
    for chunk in 0..ids / 200 {
        entries.clear();
        for k in 0..200 {
            entries.push(entry(1_000_000 + chunk * 200 + k, 1));
        }
        seq += 1;
        t += 1_000;
        packet(&mut p, seq, t, &entries);
        f.on_datagram(0, &p, t);
    }
    let grown = live() - before;
    assert_eq!(f.counters().symbols_overflow, ids as u64);
    assert!(
        grown < 32 * i64::from(ids),
        "{grown} bytes for {ids} SecurityIDs beyond the table"
    );

    // Channel gaps over 200 instruments that recover by their next entry:
    // every wait ends, and nothing of it stays.
    let n = 200;
    let mut f = feed(1000);
    let mut seq = 1;
    let mut cycle = |f: &mut Feed, seq: &mut u32, rpt: u32, t: i64| {
        entries.clear();
        for id in 0..n {
            entries.push(entry(id, rpt));
        }
        // One packet lost before each.
        *seq += 2;
        packet(&mut p, *seq, t, &entries);
        f.on_datagram(0, &p, t);
    };
    for rpt in 1..=100 {
        cycle(&mut f, &mut seq, rpt, T0 + i64::from(rpt) * 1_000);
    }
    let before = live();
    for rpt in 101..=5_000 {
        cycle(&mut f, &mut seq, rpt, T0 + i64::from(rpt) * 1_000);
    }
    let grown = live() - before;
    assert_eq!(f.counters().channel_gaps, 5_000 - 1);
    assert_eq!(f.venue_recovery().waiting, 0);
    assert!(
        grown < 64 * 1024,
        "{grown} bytes after 4,900 gaps over {n} instruments"
    );
}
