//! One writer at full speed, several readers reading continuously: every
//! value a reader sees must be one the writer wrote (never torn), lookups of
//! keys inserted while readers probe must find whole values, and readers must
//! make progress while the writer runs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickgate::feed::table::{seq_cell, table};

const WORDS: usize = 12;
type Value = [u64; WORDS];
const KEYS: u64 = 512;
const READERS: usize = 4;
const READS_PER_READER: usize = 200_000;
/// Not an assertion: only bounds the test if readers somehow stall.
const WRITER_CAP: Duration = Duration::from_secs(30);

fn key_of(i: u64) -> u64 {
    // ASCII-looking keys like real symbols.
    0x5359_4d00_0000_0000 | i
}

/// A three-word table key: a 20-byte symbol's, whose words all vary.
fn key3(k: u64) -> [u64; 3] {
    [k, k.rotate_left(17), !k]
}

/// Every word is derived from (key, counter): a mix of two writes cannot
/// satisfy `valid`.
fn value(key: u64, counter: u64) -> Value {
    let mut v = [0u64; WORDS];
    v[0] = key;
    v[1] = counter;
    for (i, w) in v.iter_mut().enumerate().skip(2) {
        *w = (key ^ counter.rotate_left(i as u32)).wrapping_mul(0x9E37_79B9_7F4A_7C15 + i as u64);
    }
    v
}

fn valid(v: &Value) -> bool {
    *v == value(v[0], v[1])
}

#[test]
fn readers_never_see_torn_values() {
    let (mut writer, reader) = table::<Value>(KEYS as u32);
    // The initial value satisfies the readers' invariant too (counter 0):
    // a reader may run before the writer's first write.
    let (mut feed_w, feed_r) = seq_cell::<[u64; 4]>([0, !0, 0, 0xAA]);
    // Key 0 exists before any reader starts.
    writer
        .insert(&key3(key_of(0)), &value(key_of(0), 0))
        .unwrap();
    let running = Arc::new(AtomicBool::new(true));
    let readers_done = Arc::new(AtomicUsize::new(0));

    let writer_thread = {
        let running = running.clone();
        let readers_done = readers_done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut counter = 0u64;
            // A hot key written every other time, the others round-robin,
            // new keys inserted as it goes (readers probe them meanwhile).
            let mut inserted = 1u64;
            while readers_done.load(Ordering::Relaxed) < READERS && start.elapsed() < WRITER_CAP {
                for _ in 0..1024 {
                    counter += 1;
                    let k = if counter.is_multiple_of(2) {
                        0
                    } else {
                        (counter / 2) % inserted
                    };
                    let slot = writer
                        .upsert(&key3(key_of(k)), &value(key_of(k), counter))
                        .unwrap();
                    assert_eq!(slot as u64, k);
                    feed_w.write(&[counter, !counter, counter.wrapping_mul(3), counter ^ 0xAA]);
                }
                if inserted < KEYS {
                    writer
                        .insert(&key3(key_of(inserted)), &value(key_of(inserted), counter))
                        .unwrap();
                    inserted += 1;
                }
            }
            running.store(false, Ordering::Release);
            counter
        })
    };

    let mut handles = Vec::new();
    for r in 0..READERS {
        let reader = reader.clone();
        let feed_r = feed_r.clone();
        let running = running.clone();
        let readers_done = readers_done.clone();
        handles.push(std::thread::spawn(move || {
            let mut last_hot = 0u64;
            let mut last_feed = 0u64;
            let mut while_running = 0usize;
            let mut found = 0usize;
            let mut i = r as u64;
            for n in 0..READS_PER_READER {
                // The hot key: valid and never older than a previous read.
                let hot = reader
                    .get(&key3(key_of(0)))
                    .expect("key 0 is inserted first");
                assert!(valid(&hot), "torn hot value {hot:?}");
                assert_eq!(hot[0], key_of(0));
                assert!(
                    hot[1] >= last_hot,
                    "went back from {last_hot} to {}",
                    hot[1]
                );
                last_hot = hot[1];
                // Any key, present or not yet inserted.
                i = (i * 31 + 7) % KEYS;
                if let Some(v) = reader.get(&key3(key_of(i))) {
                    assert!(valid(&v), "torn value {v:?}");
                    assert_eq!(v[0], key_of(i), "lookup returned another key's slot");
                    found += 1;
                }
                // Listing by slot sees only published slots.
                let len = reader.len();
                if len > 0 {
                    let slot = (n as u32) % len;
                    let v = reader.read(slot);
                    assert!(valid(&v));
                    assert_eq!(Some(key3(v[0])), reader.key_at(slot));
                }
                let f = feed_r.read();
                assert_eq!(
                    f,
                    [f[0], !f[0], f[0].wrapping_mul(3), f[0] ^ 0xAA],
                    "torn feed view"
                );
                assert!(f[0] >= last_feed);
                last_feed = f[0];
                if running.load(Ordering::Acquire) {
                    while_running += 1;
                }
            }
            readers_done.fetch_add(1, Ordering::Relaxed);
            (while_running, found)
        }));
    }

    let mut progress = Vec::new();
    for h in handles {
        progress.push(h.join().expect("reader panicked"));
    }
    let writes = writer_thread.join().expect("writer panicked");
    assert!(writes > 0);
    for (r, (while_running, found)) in progress.iter().enumerate() {
        assert!(
            *while_running > 0,
            "reader {r} made no progress while the writer ran"
        );
        assert!(*found > 0, "reader {r} found no key");
    }
}
