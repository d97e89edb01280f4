//! The market the check benches read: the state file's feeds, and the
//! writer they run beside the check, quotes into every feed's table at a
//! paced rate, so that the check's rows include the cache lines and
//! seqlock retries of a live writer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickgate::feed::reader::TablePublisher;
use tickgate::feed::shm::FeedSpec;
use tickgate::feed::{Feed, FeedSettings};
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

/// `count` feeds, `md1` to `md<count>`, of `capacity` symbols each, with
/// the thresholds of `settings`.
pub fn feed_specs(count: u64, capacity: u32, settings: &FeedSettings) -> Vec<FeedSpec> {
    (1..=count)
        .map(|i| FeedSpec {
            name: format!("md{i}"),
            capacity,
            stale_ms: settings.stale_ms,
            source_max_age_ms: settings.source_max_age_ms,
            units: 0,
        })
        .collect()
}

/// Publishes `rate` datagrams a second into every feed until `stop`, one
/// quote each: EURUSD every fourth, `names` in turn otherwise. Datagram
/// and symbol sequences continue from `after` (the last already sent);
/// `clock` gives the receive and source time, read every 64 datagrams.
/// Returns the datagrams sent and the time taken.
pub fn write_quotes(
    feeds: &mut [Feed<TablePublisher>],
    names: &[Symbol],
    rate: u64,
    after: u64,
    stop: &AtomicBool,
    mut clock: impl FnMut() -> i64,
) -> (u64, Duration) {
    let eur = Symbol::parse("EURUSD").unwrap();
    let session = SessionId::parse("BENCH").unwrap();
    let mut sym_seq = vec![after; names.len() + 1];
    let mut b = PacketBuilder::new();
    let start = Instant::now();
    let mut now = clock();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // Paced: as many datagrams as the rate allows so far, then spin.
        let due = (start.elapsed().as_nanos() as u64).saturating_mul(rate) / 1_000_000_000;
        if sent >= due {
            std::hint::spin_loop();
            continue;
        }
        sent += 1;
        let seq = after + sent;
        if seq.is_multiple_of(64) {
            now = clock();
        }
        let (sym, k) = if seq.is_multiple_of(4) {
            (eur, names.len())
        } else {
            let i = (seq as usize) % names.len();
            (names[i], i)
        };
        sym_seq[k] += 1;
        let px = 1_085_120_000 + (seq % 100) as i64 * 10_000;
        let q = Quote::new(
            sym,
            sym_seq[k],
            now as u64,
            Some(Side { px, qty: 1_000_000 }),
            Some(Side {
                px: px + 30_000,
                qty: 2_000_000,
            }),
        );
        b.start(session, seq).quote(&q);
        for feed in feeds.iter_mut() {
            feed.on_datagram(0, b.bytes(), now);
        }
    }
    (sent, start.elapsed())
}
