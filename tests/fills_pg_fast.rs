//! The PostgreSQL one-statement fast path (`store/pg_fast.rs`) against the
//! SQLite store and PostgreSQL's careful path on random workloads with
//! repeats (in a batch and across batches), new event ids for known deals
//! (F3), BUSTs of earlier fast batches' fills (replay order, F6), invalid
//! events, overflowing fills, and a second instance writing the same
//! positions (stale caches: the database refuses, the careful path runs).
//! Outcomes must be equal event by event, and positions, held BUSTs, dead
//! letters and the application order of each position's fills at the end.

#[path = "common/fills.rs"]
mod fills_common;
use fills_common::{pg_db, pg_same_db, sqlite_db, Db};

use tickgate::fills::model::{parse_value, EventOutcome, Parsed};
use tickgate::fills::store::{Store, StoreOptions};

struct Rng(u64);
impl Rng {
    fn below(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }
}

/// Batches of a random workload; every event is a JSON value (re-parsed
/// per store). `wrong_accounts`: some BUSTs name another account than
/// their FILL, and some FILLs reuse a deal id on another account (an
/// internal cross). F2: either is a deal of its own `(account, deal_id)`,
/// all of whose events share the account, hence a lane
/// (`Store::apply_events`), so lanes decide them as one lane does.
fn workload(seed: u64, batches: usize, wrong_accounts: bool) -> Vec<Vec<serde_json::Value>> {
    let mut r = Rng(seed | 1);
    let mut sent: Vec<serde_json::Value> = Vec::new();
    let mut deals = 0u64;
    let mut out = Vec::new();
    for _ in 0..batches {
        let big = r.below(4) == 0;
        let n = 1 + r.below(if big { 300 } else { 40 }) as usize;
        let mut b = Vec::with_capacity(n);
        for _ in 0..n {
            let roll = r.below(100);
            let acc = format!("ACC-{}", r.below(4));
            let ev = if roll < 12 && !sent.is_empty() {
                // A repeat of a recent (sometimes old) event, byte for byte.
                let back = if r.below(5) == 0 {
                    r.below(sent.len() as u64)
                } else {
                    r.below(sent.len().min(30) as u64)
                } as usize;
                sent[sent.len() - 1 - back].clone()
            } else if roll < 16 && deals > 0 {
                // A BUST of an earlier deal (the FILL's account, mostly).
                let d = r.below(deals);
                let acc = if wrong_accounts && r.below(8) == 0 {
                    acc
                } else {
                    format!("ACC-{}", d % 4)
                };
                serde_json::json!({"kind": "BUST", "event_id": format!("B-{}", r.below(1 << 40)),
                    "deal_id": format!("D-{d}"), "account": acc,
                    "exec_time": "2026-11-30T08:05:00Z"})
            } else if roll < 18 {
                // A BUST before its FILL (held), for a deal still to come.
                let d = deals + 1 + r.below(3);
                let a = if wrong_accounts { deals + 1 } else { d };
                serde_json::json!({"kind": "BUST", "event_id": format!("B-{}", r.below(1 << 40)),
                    "deal_id": format!("D-{d}"),
                    "account": format!("ACC-{}", a % 4),
                    "exec_time": "2026-11-30T08:05:00Z"})
            } else if roll < 20 {
                // A new event id for a known deal (F3), or with
                // `wrong_accounts` sometimes its deal id on another account:
                // the other side of an internal cross (F2).
                let d = r.below(deals.max(1));
                let id = format!("E-x{}", r.0);
                let mut ev = fill_json(&mut r, &id, d);
                if wrong_accounts && r.below(2) == 0 {
                    ev["account"] = serde_json::json!(format!("ACC-{}", (d + 1) % 4));
                }
                ev
            } else if roll < 21 {
                let id = format!("E-bad{}", r.0);
                serde_json::json!({"kind": "FILL", "event_id": id, "qty": 5})
            } else {
                deals += 1;
                let d = deals;
                fill_json(&mut r, &format!("E-{d}"), d)
            };
            b.push(ev.clone());
            sent.push(ev);
        }
        out.push(b);
    }
    out
}

fn fill_json(r: &mut Rng, event_id: &str, deal: u64) -> serde_json::Value {
    let huge = r.below(200) == 0;
    let qty = match r.below(40) {
        // × 2 overflows: rejected, never applied
        _ if huge => "79228162514264337593543950335".to_owned(),
        1 => "0.5".to_owned(),
        2 => "10.00".to_owned(),
        _ => format!("{}", 1 + r.below(1000)),
    };
    let price = match r.below(4) {
        _ if huge => "2".to_owned(),
        0 => format!("1.{:05}", r.below(100_000)),
        1 => "1.50".to_owned(),
        2 => "2".to_owned(),
        _ => format!("1.{}", r.below(1000)),
    };
    serde_json::json!({"kind": "FILL", "event_id": event_id, "deal_id": format!("D-{deal}"),
        "account": format!("ACC-{}", deal % 4), "symbol": format!("SYM{}", r.below(3)),
        "side": if r.below(2) == 0 { "BUY" } else { "SELL" },
        "qty": qty, "price": price, "exec_time": "2026-11-30T08:00:00.123456Z"})
}

/// A batch of `n` new fills with ids from `first`, each also appended to
/// `sent`; after every `every`-th, a repeat of one of the last `window`
/// events sent (from this batch or earlier ones).
fn batch_with_repeats(
    r: &mut Rng,
    sent: &mut Vec<serde_json::Value>,
    first: u64,
    n: u64,
    every: u64,
    window: usize,
) -> Vec<serde_json::Value> {
    let mut b = Vec::new();
    for i in 0..n {
        let id = first + i;
        let ev = fill_json(r, &format!("E-{id}"), id);
        b.push(ev.clone());
        sent.push(ev);
        if i % every == every - 1 {
            let back = r.below(sent.len().min(window) as u64) as usize;
            b.push(sent[sent.len() - 1 - back].clone());
        }
    }
    b
}

fn same(got: &[EventOutcome], want: &[EventOutcome], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: number of outcomes");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "{what}");
    }
}

fn parsed(b: &[serde_json::Value]) -> Vec<Parsed> {
    b.iter().map(parse_value).collect()
}

async fn apply(s: &Store, b: &[serde_json::Value]) -> Vec<EventOutcome> {
    s.apply_events("test", parsed(b)).await.expect("apply")
}

/// Deals of each position in application order (PostgreSQL).
/// The fast path's (committed, refused) batch counts of a PostgreSQL db.
fn fast_counts(db: &Db) -> (u64, u64) {
    match &db.store {
        Store::Postgres(p) => p.fast_path_counts(),
        _ => panic!("not a PostgreSQL store"),
    }
}

/// Both stores hold the same positions.
async fn same_positions(a: &Db, b: &Db) {
    assert_eq!(
        a.store.positions(None).await.unwrap(),
        b.store.positions(None).await.unwrap()
    );
}

async fn order(db: &Db) -> Vec<(String, String, Vec<String>)> {
    let (url, schema) = db.pg.clone().unwrap();
    let c = fills_common::pg_client(&url, Some(&schema)).await;
    let rows = c
        .query(
            "SELECT account, symbol, array_agg(deal_id ORDER BY applied_seq) FROM fills
             WHERE status = 'applied' GROUP BY account, symbol ORDER BY account, symbol",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

async fn compare(seed: u64, batches: usize, lanes: usize) {
    let Some(fast) = pg_db(
        "f",
        "pg_fast",
        StoreOptions {
            pg_pool_size: lanes,
            ..StoreOptions::default()
        },
    )
    .await
    else {
        return;
    };
    // A second instance on the same schema (its own pool and cache).
    let other = pg_same_db(
        &fast,
        StoreOptions {
            pg_pool_size: lanes,
            ..StoreOptions::default()
        },
    )
    .await;
    let careful = pg_db(
        "c",
        "pg_fast",
        StoreOptions {
            pg_pool_size: lanes,
            pg_fast_path: false,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let lite = sqlite_db(StoreOptions::default()).await;
    let mut r = Rng(seed ^ 0x5555);
    for (i, b) in workload(seed, batches, true).iter().enumerate() {
        let want = apply(&lite.store, b).await;
        // Now and then the other instance writes (the fast store's cached
        // positions go stale).
        let writer = if r.below(6) == 0 { &other } else { &fast.store };
        let got_fast = apply(writer, b).await;
        same(
            &apply(&careful.store, b).await,
            &want,
            &format!("seed {seed} batch {i}: careful"),
        );
        same(&got_fast, &want, &format!("seed {seed} batch {i}: fast"));
    }
    let want = lite.store.positions(None).await.unwrap();
    assert_eq!(fast.store.positions(None).await.unwrap(), want);
    assert_eq!(careful.store.positions(None).await.unwrap(), want);
    let held = lite.store.held_busts().await.unwrap();
    assert_eq!(fast.store.held_busts().await.unwrap(), held);
    assert_eq!(careful.store.held_busts().await.unwrap(), held);
    let dead = lite.store.dead_letters().await.unwrap();
    assert_eq!(fast.store.dead_letters().await.unwrap(), dead);
    assert_eq!(careful.store.dead_letters().await.unwrap(), dead);
    assert_eq!(
        order(&fast).await,
        order(&careful).await,
        "application order"
    );
    let (ok, refused) = fast_counts(&fast);
    assert!(ok > 0, "seed {seed}: no batch took the fast path");
    assert!(refused > 0, "seed {seed}: no stale cache was refused");
    fast.cleanup().await;
    careful.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_path_matches_sqlite_one_lane() {
    for seed in [1, 2, 3] {
        compare(seed, 120, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_path_matches_sqlite_in_lanes() {
    for seed in [11, 12] {
        compare(seed, 120, 3).await;
    }
}

/// Only FILLs, new and repeated: after the first batch every batch should
/// commit in one statement; positions equal SQLite's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_fills_take_the_fast_path() {
    let Some(fast) = pg_db("f", "pg_fast_plain", StoreOptions::default()).await else {
        return;
    };
    let lite = sqlite_db(StoreOptions::default()).await;
    let mut r = Rng(77);
    let mut sent = Vec::new();
    for bi in 0..20 {
        // a repeat from this batch or the one before after every 10th
        let b = batch_with_repeats(&mut r, &mut sent, bi * 100, 100, 10, 150);
        same(
            &apply(&fast.store, &b).await,
            &apply(&lite.store, &b).await,
            &format!("batch {bi}"),
        );
    }
    same_positions(&fast, &lite).await;
    let (ok, refused) = fast_counts(&fast);
    // Overflowing fills (1 in 40) send a batch to the careful path, which
    // is not a refusal.
    assert_eq!(refused, 0);
    assert!(ok >= 1, "{ok} fast batches");
    fast.cleanup().await;
}

/// A stream fetch takes the fast path too; the consumer position moves in
/// the same statement, only forwards, and the outcomes equal SQLite's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_batches_move_the_consumer_position() {
    let Some(fast) = pg_db("f", "pg_fast_stream", StoreOptions::default()).await else {
        return;
    };
    let lite = sqlite_db(StoreOptions::default()).await;
    let mut r = Rng(99);
    let mut seq = 0u64;
    for bi in 0..12u64 {
        let b: Vec<serde_json::Value> = (0..20u64)
            .map(|i| fill_json(&mut r, &format!("E-{}", bi * 20 + i), bi * 20 + i))
            .collect();
        seq += 20;
        // Batch 7 is delivered again with an older sequence: all duplicates,
        // and the position must not move back.
        let (b, last) = if bi == 7 {
            (first_fetch(), seq - 40)
        } else {
            (b, seq)
        };
        let want = lite
            .store
            .apply_stream_batch("S", "c", last, parsed(&b))
            .await
            .unwrap();
        let got = fast
            .store
            .apply_stream_batch("S", "c", last, parsed(&b))
            .await
            .unwrap();
        same(&got, &want, &format!("batch {bi}"));
        assert_eq!(
            fast.store.consumer_position("S", "c").await.unwrap(),
            lite.store.consumer_position("S", "c").await.unwrap()
        );
    }
    assert_eq!(
        fast.store.consumer_position("S", "c").await.unwrap(),
        Some(seq)
    );
    same_positions(&fast, &lite).await;
    let counts = fast_counts(&fast);
    assert!(counts.0 >= 6, "{counts:?}");
    fast.cleanup().await;
}

/// The events of the first fetch again.
fn first_fetch() -> Vec<serde_json::Value> {
    let mut r = Rng(99);
    (0..20u64)
        .map(|i| fill_json(&mut r, &format!("E-{i}"), i))
        .collect()
}

/// A Kafka partition batch takes the fast path: the offset row moves in the
/// same statement, by compare-and-set from the offset the batch was read
/// after; a stale expected offset applies nothing and reports the conflict;
/// outcomes and positions equal SQLite's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_batches_move_the_offset_by_compare_and_set() {
    let Some(fast) = pg_db("f", "pg_fast_offset", StoreOptions::default()).await else {
        return;
    };
    let lite = sqlite_db(StoreOptions::default()).await;
    let mut r = Rng(123);
    let mut stored: Option<i64> = None;
    let mut sent = Vec::new();
    for bi in 0..12u64 {
        let b = batch_with_repeats(&mut r, &mut sent, bi * 20, 20, 5, 30);
        let last = stored.unwrap_or(-1) + b.len() as i64;
        let want = lite
            .store
            .apply_partition_batch("kafka", "T/0", "c", stored, last, parsed(&b), None)
            .await
            .unwrap()
            .unwrap();
        let got = fast
            .store
            .apply_partition_batch("kafka", "T/0", "c", stored, last, parsed(&b), None)
            .await
            .unwrap()
            .unwrap();
        same(&got, &want, &format!("batch {bi}"));
        assert_eq!(
            fast.store.consumer_position("T/0", "c").await.unwrap(),
            Some(last as u64)
        );
        // The same batch read again after the old offset (another
        // consumer's view): a conflict, nothing applied, offset unchanged.
        if bi % 4 == 3 {
            let next: Vec<serde_json::Value> = (0..3u64)
                .map(|i| fill_json(&mut r, &format!("X-{bi}-{i}"), 10_000 + bi * 10 + i))
                .collect();
            let c = fast
                .store
                .apply_partition_batch("kafka", "T/0", "c", stored, last + 3, parsed(&next), None)
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!(c.stored, Some(last));
            assert_eq!(c.expected, stored);
            // A partition with no row yet, "expected none", but one exists.
            let c = fast
                .store
                .apply_partition_batch("kafka", "T/0", "c", None, last + 3, parsed(&next), None)
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!(c.stored, Some(last));
            assert_eq!(
                fast.store.consumer_position("T/0", "c").await.unwrap(),
                Some(last as u64)
            );
        }
        stored = Some(last);
    }
    same_positions(&fast, &lite).await;
    assert_eq!(
        fast.store.dead_letters().await.unwrap(),
        lite.store.dead_letters().await.unwrap()
    );
    // Overflowing fills send a batch to the careful path; the conflicts
    // are refusals.
    let counts = fast_counts(&fast);
    assert!(counts.0 >= 4, "{counts:?}");
    fast.cleanup().await;
}

fn answer() -> tickgate::fills::store::AnswerFn {
    std::sync::Arc::new(|outs: &[EventOutcome]| (200, format!("{outs:?}").into_bytes()))
}

/// An HTTP batch takes the fast path: fresh answers stored with the
/// effects (a retry replays them byte for byte), a changed body with the
/// same key is a mismatch, and a key held by an uncommitted first attempt
/// makes the retry wait and then answer "in progress" (K5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_batches_take_the_fast_path() {
    use tickgate::fills::store::HttpOutcome;
    let opts = StoreOptions {
        key_wait: std::time::Duration::from_millis(200),
        ..StoreOptions::default()
    };
    let Some(fast) = pg_db("f", "pg_fast_http", opts.clone()).await else {
        return;
    };
    let lite = sqlite_db(opts).await;
    let mut r = Rng(321);
    for bi in 0..10u64 {
        let b: Vec<serde_json::Value> = (0..20u64)
            .map(|i| fill_json(&mut r, &format!("E-{}", bi * 20 + i % 15), bi * 20 + i % 15))
            .collect();
        let key = format!("K-{bi}");
        let mut bodies = Vec::new();
        for s in [&lite.store, &fast.store] {
            match s
                .apply_http_batch("cl", &key, "h1", parsed(&b), answer())
                .await
                .unwrap()
            {
                HttpOutcome::Fresh { status, body, .. } => {
                    assert_eq!(status, 200);
                    bodies.push(body);
                }
                _ => panic!("batch {bi}: not fresh"),
            }
        }
        assert_eq!(bodies[0], bodies[1], "batch {bi}");
        match fast
            .store
            .apply_http_batch("cl", &key, "h1", parsed(&b), answer())
            .await
            .unwrap()
        {
            HttpOutcome::Replayed { status, body } => {
                assert_eq!((status, &body), (200, &bodies[1]));
            }
            _ => panic!("batch {bi}: not replayed"),
        }
        assert!(matches!(
            fast.store
                .apply_http_batch("cl", &key, "h2", parsed(&b), answer())
                .await
                .unwrap(),
            HttpOutcome::HashMismatch
        ));
    }
    same_positions(&fast, &lite).await;
    let (ok, refused) = fast_counts(&fast);
    assert_eq!(refused, 0);
    assert!(ok >= 5, "{ok} fast batches");
    // K5: a first attempt holding the key uncommitted.
    let (url, schema) = fast.pg.clone().unwrap();
    let mut other = fills_common::pg_client(&url, Some(&schema)).await;
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO idempotency_keys (client, key, request_hash, created_ns)
         VALUES ('cl', 'K-held', 'h1', 0)",
        &[],
    )
    .await
    .unwrap();
    let b = vec![fill_json(&mut r, "E-held", 999)];
    assert!(matches!(
        fast.store
            .apply_http_batch("cl", "K-held", "h1", parsed(&b), answer())
            .await
            .unwrap(),
        HttpOutcome::InProgressTimeout
    ));
    tx.rollback().await.unwrap();
    assert!(matches!(
        fast.store
            .apply_http_batch("cl", "K-held", "h1", parsed(&b), answer())
            .await
            .unwrap(),
        HttpOutcome::Fresh { .. }
    ));
    fast.cleanup().await;
}

/// Writers of common positions at once: three Kafka partitions' batches
/// at a time through one store (one cache, a pool of three connections,
/// as a consumer's partitions share it), new FILLs over the same 2,000
/// positions. The fast statements of two partitions, and the careful path
/// a refused one falls back to, must not deadlock (every writer takes
/// positions in one order; PostgreSQL would find a deadlock only after
/// `deadlock_timeout`, 1 s, and the batch would then be redone), and every
/// position is the sum of all the partitions' fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_common_positions_do_not_deadlock() {
    let Some(db) = pg_db("f", "pg_fast_concurrent", StoreOptions::default()).await else {
        return;
    };
    let a = pg_same_db(
        &db,
        StoreOptions {
            pg_pool_size: 3,
            ..StoreOptions::default()
        },
    )
    .await;

    const BATCHES: u64 = 12;
    const PER_BATCH: u64 = 1000;
    // Writer w's batch i: deals w * 1e6 + i * PER_BATCH + j, on accounts
    // 0..200 and symbols 0..10, 1 share bought or sold.
    let batch = |w: u64, i: u64| -> Vec<serde_json::Value> {
        (0..PER_BATCH)
            .map(|j| {
                let d = w * 1_000_000 + i * PER_BATCH + j;
                serde_json::json!({"kind": "FILL", "event_id": format!("E-{d}"),
                    "deal_id": format!("D-{d}"),
                    "account": format!("ACC-{}", (d * 7 + w) % 200),
                    "symbol": format!("SYM{}", (d / 3) % 10),
                    "side": if d.is_multiple_of(3) { "SELL" } else { "BUY" },
                    "qty": "1", "price": "1.5", "exec_time": "2026-11-30T08:00:00Z"})
            })
            .collect()
    };
    // Each writer is a partition of its own: its batches move its offset.
    let run = async |s: &Store, w: u64| {
        for i in 0..BATCHES {
            let expected = i.checked_sub(1).map(|p| p as i64);
            let outs = s
                .apply_partition_batch(
                    "test",
                    &format!("kafka:t:{w}"),
                    "c",
                    expected,
                    i as i64,
                    parsed(&batch(w, i)),
                    None,
                )
                .await
                .expect("apply")
                .expect("no offset conflict");
            assert!(
                outs.iter()
                    .all(|o| o.outcome == tickgate::fills::model::Outcome::Applied),
                "writer {w} batch {i}: every fill applied"
            );
        }
    };
    tokio::join!(run(&a, 1), run(&a, 2), run(&a, 3));
    // Expected quantities: the signed sum of every writer's fills.
    let mut want = std::collections::BTreeMap::<(String, String), i64>::new();
    for w in 1..=3 {
        for i in 0..BATCHES {
            for f in batch(w, i) {
                let q = if f["side"] == "BUY" { 1 } else { -1 };
                *want
                    .entry((
                        f["account"].as_str().unwrap().to_owned(),
                        f["symbol"].as_str().unwrap().to_owned(),
                    ))
                    .or_default() += q;
            }
        }
    }
    assert_eq!(
        fills_common::whole_quantities(&db.store).await,
        want,
        "every position is the sum of all writers' fills"
    );
    let Store::Postgres(p) = &a else {
        unreachable!()
    };
    let (committed, refused) = p.fast_path_counts();
    println!("fast path: {committed} committed, {refused} refused");
    assert!(committed > 0, "no batch took the fast path");
    assert_eq!(
        p.fast_path_deadlocks(),
        0,
        "fast statements ended by deadlocks"
    );
    assert_eq!(
        a.metrics().tx_retries.get(),
        0,
        "careful-path transactions retried (deadlocks)"
    );
    db.cleanup().await;
}
