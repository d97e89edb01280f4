//! The Kafka source (fills.md "Sources") against a
//! real Kafka-compatible broker ($TICKGATE_TEST_KAFKA_URL, `host:port`; CI
//! runs tansu 0.6.0 with its memory storage engine), over the real store:
//! SQLite in a tempdir, PostgreSQL on a fresh schema when
//! $TICKGATE_TEST_PG_URL is set.
//!
//! - the client's requests against the broker (create topic, produce to a
//!   partition, list offsets, fetch from an offset, headers);
//! - repeats applied once and counted, offsets stored per partition;
//! - a restart resumes at the stored offset (no record read twice);
//! - dead letters with their reason, and a poison record does not block
//!   its partition;
//! - two consumers on one partition never both apply a batch;
//! - the crash test: 20,000 records with repeats consumed by a real
//!   `tickgate fills consume-kafka` process SIGKILLed at least 20 times.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rskafka::chrono::{TimeZone, Utc};
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use tickgate::fills::kafka::{self, KafkaMetrics, KafkaSettings, Start};
use tickgate::fills::metrics::FillsMetrics;
use tickgate::fills::store::{PgStore, SqliteStore, Store, StoreOptions, SweepTable};

#[path = "common/fills.rs"]
mod fills_common;
#[path = "common/source_fills.rs"]
mod source_fills;
use source_fills::{
    actual_qty, drain_and_stop, expected_qty, kill_repeatedly, make_fills, private_binary,
    spawn_logged, unique_suffix, with_repeats, Rng,
};

fn unique(tag: &str) -> String {
    format!("tgt-{tag}-{}", unique_suffix())
}

async fn client(url: &str) -> Client {
    ClientBuilder::new(vec![url.to_owned()])
        .build()
        .await
        .expect("connect to the Kafka broker")
}

async fn create_topic(c: &Client, topic: &str, partitions: i32) {
    c.controller_client()
        .unwrap()
        .create_topic(topic, partitions, 1, 5_000)
        .await
        .unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
}

async fn partition(c: &Client, topic: &str, p: i32) -> PartitionClient {
    c.partition_client(topic, p, UnknownTopicHandling::Retry)
        .await
        .unwrap()
}

fn record(value: Option<Vec<u8>>) -> Record {
    Record {
        key: None,
        value,
        headers: BTreeMap::new(),
        timestamp: Utc
            .timestamp_millis_opt(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64,
            )
            .unwrap(),
    }
}

/// Produces `values` to partition `p`, in chunks, in order.
async fn produce(c: &Client, topic: &str, p: i32, values: &[Option<Vec<u8>>]) {
    let pc = partition(c, topic, p).await;
    for chunk in values.chunks(500) {
        pc.produce(
            chunk.iter().cloned().map(record).collect(),
            Compression::NoCompression,
        )
        .await
        .unwrap();
    }
}

/// The high watermark of partition `p` (the offset the next record will
/// get) as a Fetch response reports it.
async fn high_watermark(c: &Client, topic: &str, p: i32) -> i64 {
    let pc = partition(c, topic, p).await;
    let earliest = pc.get_offset(OffsetAt::Earliest).await.unwrap();
    pc.fetch_records(earliest, 1..1_000, 0).await.unwrap().1
}

/// Offset of the last record of each partition (None = empty).
async fn last_offsets(c: &Client, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let mut v = Vec::new();
    for p in 0..partitions {
        let hw = high_watermark(c, topic, p).await;
        v.push((hw > 0).then_some(hw - 1));
    }
    v
}

async fn stored_offsets(
    store: &Store,
    topic: &str,
    partitions: i32,
    consumer: &str,
) -> Vec<Option<i64>> {
    let mut v = Vec::new();
    for p in 0..partitions {
        v.push(
            kafka::stored_offset(store, topic, p, consumer)
                .await
                .unwrap(),
        );
    }
    v
}

/// Waits until the store's offsets reach the partitions' last records
/// (a condition, bounded only so that a broken consumer fails the test).
async fn wait_caught_up(c: &Client, store: &Store, topic: &str, partitions: i32, consumer: &str) {
    wait_caught_up_logged(c, store, topic, partitions, consumer, None).await
}

/// [`wait_caught_up`], with the consumer process's log in the failure.
async fn wait_caught_up_logged(
    c: &Client,
    store: &Store,
    topic: &str,
    partitions: i32,
    consumer: &str,
    log: Option<&std::path::Path>,
) {
    let want = last_offsets(c, topic, partitions).await;
    let t0 = Instant::now();
    loop {
        if stored_offsets(store, topic, partitions, consumer).await == want {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "consumer did not reach {want:?}: at {:?}{}",
            stored_offsets(store, topic, partitions, consumer).await,
            log.map(|l| format!(
                "; its log:\n{}",
                std::fs::read_to_string(l).unwrap_or_default()
            ))
            .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn settings(url: &str, topic: &str, consumer: &str, batch: usize) -> KafkaSettings {
    KafkaSettings {
        bootstrap: vec![url.to_owned()],
        topic: topic.to_owned(),
        partitions: Vec::new(),
        start: Start::Earliest,
        batch,
        dlq_topic: format!("{topic}-dlq"),
        consumer: consumer.to_owned(),
        max_wait: Duration::from_millis(200),
        sasl: None,
    }
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

fn start(settings: KafkaSettings, store: Store, metrics: KafkaMetrics) -> Running {
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(kafka::run_consumer(settings, store, metrics, async move {
        let _ = rx.await;
    }));
    Running { stop, task }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

/// A store with its metrics: SQLite in `dir`, or PostgreSQL on `schema`.
async fn open_store(pg: Option<(&str, &str)>, dir: &std::path::Path) -> (Store, FillsMetrics) {
    let m = FillsMetrics::unregistered();
    let store = match pg {
        Some((url, schema)) => {
            fills_common::pg_client(url, None)
                .await
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                .await
                .unwrap();
            let opts = StoreOptions {
                pg_schema: Some(schema.to_owned()),
                ..StoreOptions::default()
            };
            Store::Postgres(PgStore::connect(url, opts, m.clone()).await.unwrap())
        }
        None => Store::Sqlite(
            SqliteStore::open(&dir.join("fills.db"), StoreOptions::default(), m.clone())
                .await
                .unwrap(),
        ),
    };
    (store, m)
}

async fn drop_schema(url: &str, schema: &str) {
    let _ = fills_common::pg_client(url, None)
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await;
}

fn sum(v: &prometheus::IntCounterVec, labels: &[&str]) -> u64 {
    source_fills::counter_sum(v, &[labels])
}

// ------------------------------------------------------------------ tests

/// The requests the consumer makes, against the broker, first: if one
/// fails, this test names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_serves_the_clients_requests() {
    let Some(url) = fills_common::kafka_url("broker_serves_the_clients_requests") else {
        return;
    };
    let c = client(&url).await;
    let topic = unique("smoke");
    create_topic(&c, &topic, 3).await; // CreateTopics
    let topics = c.list_topics().await.expect("Metadata"); // Metadata
    let t = topics
        .iter()
        .find(|t| t.name == topic)
        .expect("topic listed");
    assert_eq!(t.partitions.len(), 3);
    let pc = partition(&c, &topic, 1).await;
    assert_eq!(
        pc.get_offset(OffsetAt::Earliest)
            .await
            .expect("ListOffsets"),
        0
    );
    let mut r = record(Some(b"hello".to_vec()));
    r.headers.insert("tickgate-reason".into(), b"why".to_vec());
    let offsets = pc
        .produce(
            vec![r, record(Some(b"world".to_vec())), record(None)],
            Compression::NoCompression,
        )
        .await
        .expect("Produce");
    assert_eq!(offsets, vec![0, 1, 2]);
    // After one batch of three records (tansu 0.6.0's memory engine
    // answers 1 here, the batch's base offset + 1, and fetches from inside
    // a batch return nothing: CI runs its SQLite engine, which is right).
    assert_eq!(
        pc.get_offset(OffsetAt::Latest).await.expect("ListOffsets"),
        3
    );
    let (recs, hw) = pc
        .fetch_records(1, 1..1_000_000, 1_000)
        .await
        .expect("Fetch");
    assert_eq!(hw, 3);
    let got: Vec<(i64, Option<Vec<u8>>)> = recs
        .into_iter()
        .filter(|r| r.offset >= 1)
        .map(|r| (r.offset, r.record.value))
        .collect();
    assert_eq!(got, vec![(1, Some(b"world".to_vec())), (2, None)]);
    let (recs, _) = pc.fetch_records(0, 1..1_000_000, 1_000).await.unwrap();
    assert_eq!(recs[0].record.headers["tickgate-reason"], b"why".to_vec());
    // Other partitions are untouched.
    assert_eq!(high_watermark(&c, &topic, 0).await, 0);
    assert_eq!(high_watermark(&c, &topic, 1).await, 3);
}

/// Where a partition with no stored offset starts: "earliest" is the first
/// record, "latest" the offset the next record will get, after batches of
/// several records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_offsets_earliest_and_latest() {
    let Some(url) = fills_common::kafka_url("start_offsets_earliest_and_latest") else {
        return;
    };
    let c = client(&url).await;
    let topic = unique("start");
    create_topic(&c, &topic, 1).await;
    let pc = partition(&c, &topic, 0).await;
    assert_eq!(kafka::start_offset(&pc, Start::Latest).await.unwrap(), 0);
    for _ in 0..2 {
        let batch = (0..3).map(|i| record(Some(vec![b'a' + i]))).collect();
        pc.produce(batch, Compression::NoCompression).await.unwrap();
    }
    assert_eq!(kafka::start_offset(&pc, Start::Earliest).await.unwrap(), 0);
    assert_eq!(kafka::start_offset(&pc, Start::Latest).await.unwrap(), 6);
}

/// Every event 1-3 times, spread over 3 partitions (a repeat may land on
/// another partition). Applied once, repeats counted, offsets stored.
async fn repeats_applied_once(pg: Option<(&str, &str)>) {
    let Some(url) = fills_common::kafka_url("repeats_applied_once") else {
        return;
    };
    let c = client(&url).await;
    let topic = unique("dups");
    create_topic(&c, &topic, 3).await;
    let mut rng = Rng(0x5EED_0001);
    let fills = make_fills(&mut rng, "d", 600);
    let mut per_part: Vec<Vec<Option<Vec<u8>>>> = vec![Vec::new(); 3];
    let mut repeats = 0;
    for f in &fills {
        let copies = 1 + rng.below(3);
        repeats += copies - 1;
        for _ in 0..copies {
            per_part[rng.below(3) as usize].push(Some(f.json().into_bytes()));
        }
    }
    for (p, v) in per_part.iter().enumerate() {
        produce(&c, &topic, p as i32, v).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, m) = open_store(pg, dir.path()).await;
    let km = KafkaMetrics::unregistered(m.clone());
    let run = start(settings(&url, &topic, "tg", 50), store.clone(), km.clone());
    wait_caught_up(&c, &store, &topic, 3, "tg").await;
    run.stop().await;
    assert_eq!(actual_qty(&store).await, expected_qty(&fills));
    assert_eq!(sum(&m.applied, &["FILL", "kafka"]), fills.len() as u64);
    assert_eq!(sum(&m.duplicate_events, &["FILL", "kafka"]), repeats);
    assert_eq!(
        store.count_rows(SweepTable::ProcessedEvents).await.unwrap(),
        fills.len() as u64
    );
    assert_eq!(sum(&m.dead_lettered, &["kafka"]), 0);
    // On PostgreSQL partition batches take the one-statement path (the
    // offset compare-and-set inside it), not only the careful one.
    if let Store::Postgres(p) = &store {
        let (committed, refused) = p.fast_path_counts();
        assert!(
            committed > 0,
            "no partition batch took the fast path ({refused} refused)"
        );
        // Partitions write common positions at once: both paths take them
        // in one order, so no statement may end in a deadlock (found only
        // after deadlock_timeout, 1 s, then redone).
        assert_eq!(p.fast_path_deadlocks(), 0, "fast statements deadlocked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_applied_once_sqlite() {
    repeats_applied_once(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_applied_once_postgres() {
    let Some(pg) = fills_common::pg_url("repeats_applied_once_postgres") else {
        return;
    };
    let schema = fills_common::unique_schema("t_kafka", "dups");
    repeats_applied_once(Some((&pg, &schema))).await;
    drop_schema(&pg, &schema).await;
}

/// Three partitions' batches of 1,000 on the same 2,000 positions at once
/// (the shape of `benches/fills_kafka.rs`, where a deadlock between one
/// partition's fast statement and another's careful path was found): no
/// statement ends in a deadlock, no transaction is retried (no event is
/// repeated, so nothing else would retry one), and every position is the
/// exact sum. With the fast statement's old lock order this failed in 2 of
/// 4 runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_on_common_positions_do_not_deadlock_postgres() {
    let Some(url) = fills_common::kafka_url("partitions_on_common_positions") else {
        return;
    };
    let Some(pg) = fills_common::pg_url("partitions_on_common_positions") else {
        return;
    };
    let schema = fills_common::unique_schema("t_kafka", "common");
    let c = client(&url).await;
    let topic = unique("common");
    create_topic(&c, &topic, 3).await;
    let mut rng = Rng(0x5EED_0004);
    let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut per_part: Vec<Vec<Option<Vec<u8>>>> = vec![Vec::new(); 3];
    for i in 0..18_000u64 {
        let (acc, sym) = (
            format!("ACC-{}", rng.below(200)),
            format!("SYM{}", rng.below(10)),
        );
        let buy = rng.below(2) == 0;
        *want.entry((acc.clone(), sym.clone())).or_default() += if buy { 1 } else { -1 };
        let json = serde_json::json!({"kind": "FILL", "event_id": format!("E-{i}"),
            "deal_id": format!("D-{i}"), "account": acc, "symbol": sym,
            "side": if buy { "BUY" } else { "SELL" }, "qty": "1",
            "price": format!("1.{:05}", rng.below(100_000)),
            "exec_time": "2026-11-30T08:00:00Z"});
        per_part[(i % 3) as usize].push(Some(json.to_string().into_bytes()));
    }
    for (p, v) in per_part.iter().enumerate() {
        produce(&c, &topic, p as i32, v).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, m) = open_store(Some((&pg, &schema)), dir.path()).await;
    let km = KafkaMetrics::unregistered(m.clone());
    let run = start(settings(&url, &topic, "tg", 1000), store.clone(), km);
    wait_caught_up(&c, &store, &topic, 3, "tg").await;
    run.stop().await;
    assert_eq!(
        fills_common::whole_quantities(&store).await,
        want,
        "every position is the exact sum"
    );
    let Store::Postgres(p) = &store else {
        unreachable!()
    };
    let (committed, refused) = p.fast_path_counts();
    println!("fast path: {committed} committed, {refused} refused");
    assert_eq!(p.fast_path_deadlocks(), 0, "fast statements deadlocked");
    assert_eq!(m.tx_retries.get(), 0, "careful transactions retried");
    drop_schema(&pg, &schema).await;
}

/// A restart reads on from the stored offset: the second consumer applies
/// exactly the new records and sees no repeat of the old ones (a consumer
/// that re-read from the start would count them as duplicates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_at_the_stored_offset() {
    let Some(url) = fills_common::kafka_url("restart_resumes_at_the_stored_offset") else {
        return;
    };
    let c = client(&url).await;
    let topic = unique("resume");
    create_topic(&c, &topic, 2).await;
    let mut rng = Rng(0x5EED_0002);
    let fills = make_fills(&mut rng, "r", 300);
    let (first, second) = fills.split_at(200);
    for (i, chunk) in first.chunks(100).enumerate() {
        let v: Vec<_> = chunk.iter().map(|f| Some(f.json().into_bytes())).collect();
        produce(&c, &topic, i as i32, &v).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, m) = open_store(None, dir.path()).await;
    let run = start(
        settings(&url, &topic, "tg", 30),
        store.clone(),
        KafkaMetrics::unregistered(m.clone()),
    );
    wait_caught_up(&c, &store, &topic, 2, "tg").await;
    run.stop().await;
    assert_eq!(
        stored_offsets(&store, &topic, 2, "tg").await,
        vec![Some(99), Some(99)]
    );
    assert_eq!(sum(&m.applied, &["FILL", "kafka"]), 200);

    for (i, chunk) in second.chunks(50).enumerate() {
        let v: Vec<_> = chunk.iter().map(|f| Some(f.json().into_bytes())).collect();
        produce(&c, &topic, i as i32, &v).await;
    }
    // A new consumer process: fresh metrics, same store.
    let m2 = FillsMetrics::unregistered();
    let store2 = match &store {
        Store::Sqlite(_) => {
            drop(store);
            Store::Sqlite(
                SqliteStore::open(
                    &dir.path().join("fills.db"),
                    StoreOptions::default(),
                    m2.clone(),
                )
                .await
                .unwrap(),
            )
        }
        Store::Postgres(_) => unreachable!(),
    };
    // "latest" must not matter once an offset is stored.
    let mut s = settings(&url, &topic, "tg", 30);
    s.start = Start::Latest;
    let run = start(s, store2.clone(), KafkaMetrics::unregistered(m2.clone()));
    wait_caught_up(&c, &store2, &topic, 2, "tg").await;
    run.stop().await;
    assert_eq!(sum(&m2.applied, &["FILL", "kafka"]), 100);
    assert_eq!(
        sum(&m2.duplicate_events, &["FILL", "kafka"]),
        0,
        "no record read twice"
    );
    assert_eq!(
        stored_offsets(&store2, &topic, 2, "tg").await,
        vec![Some(149), Some(149)]
    );
    assert_eq!(actual_qty(&store2).await, expected_qty(&fills));
}

/// Undecodable, invalid and store-rejected records go to the dead-letter
/// topic with their reason and origin; the records after them are applied
/// and the offset moves past them (a poison record does not block).
async fn dead_letters(pg: Option<(&str, &str)>) {
    let Some(url) = fills_common::kafka_url("dead_letters") else {
        return;
    };
    let c = client(&url).await;
    let topic = unique("dlq");
    create_topic(&c, &topic, 1).await;
    let mut rng = Rng(0x5EED_0004);
    let fills = make_fills(&mut rng, "x", 4);
    // Valid, but the store rejects it: its notional (qty x price) cannot
    // be held exactly. (A BUST naming another account than its fill's is
    // no longer one: F2 makes it that account's deal, held.)
    let inexact_fill = r#"{"kind":"FILL","event_id":"OVF-1","deal_id":"OVF-1","account":"OVF","symbol":"EURUSD","side":"BUY","qty":"79228162514264337593543950335","price":"2","exec_time":"2026-11-30T08:05:00Z"}"#;
    let values: Vec<Option<Vec<u8>>> = vec![
        Some(fills[0].json().into_bytes()),         // 0 applied
        Some(vec![0xff, 0xfe, 0x00]),               // 1 not UTF-8
        Some(b"{\"kind\":\"FILL\", oops".to_vec()), // 2 malformed JSON
        None,                                       // 3 no value
        Some(
            fills[1]
                .json()
                .replace("\"qty\":\"", "\"qty\":\"-")
                .into_bytes(),
        ), // 4 invalid
        Some(inexact_fill.as_bytes().to_vec()),     // 5 rejected by the store
        Some(fills[2].json().into_bytes()),         // 6 applied
        Some(fills[3].json().into_bytes()),         // 7 applied
    ];
    produce(&c, &topic, 0, &values).await;
    let dir = tempfile::tempdir().unwrap();
    let (store, m) = open_store(pg, dir.path()).await;
    let km = KafkaMetrics::unregistered(m.clone());
    // Batches of 3: the poison records sit in different batches.
    let run = start(settings(&url, &topic, "tg", 3), store.clone(), km.clone());
    wait_caught_up(&c, &store, &topic, 1, "tg").await;
    run.stop().await;
    assert_eq!(stored_offsets(&store, &topic, 1, "tg").await, vec![Some(7)]);
    let applied = [&fills[0], &fills[2], &fills[3]];
    assert_eq!(actual_qty(&store).await, expected_qty(applied));
    assert_eq!(sum(&m.dead_lettered, &["kafka"]), 5);

    let dlq = partition(&c, &format!("{topic}-dlq"), 0).await;
    let (recs, hw) = dlq.fetch_records(0, 1..10_000_000, 1_000).await.unwrap();
    assert_eq!(hw, 5, "five dead letters");
    let mut by_offset = BTreeMap::new();
    for r in recs {
        let h = &r.record.headers;
        assert_eq!(h[kafka::H_TOPIC], topic.as_bytes());
        assert_eq!(h[kafka::H_PARTITION], b"0".to_vec());
        let off: i64 = String::from_utf8(h[kafka::H_OFFSET].clone())
            .unwrap()
            .parse()
            .unwrap();
        let reason = String::from_utf8(h[kafka::H_REASON].clone()).unwrap();
        assert_eq!(
            r.record.value, values[off as usize],
            "the original value, byte for byte"
        );
        by_offset.insert(off, reason);
    }
    assert_eq!(
        by_offset.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert!(
        by_offset[&1].starts_with("undecodable: value is not UTF-8"),
        "{}",
        by_offset[&1]
    );
    assert!(
        by_offset[&2].starts_with("undecodable: malformed JSON"),
        "{}",
        by_offset[&2]
    );
    assert!(
        by_offset[&3].starts_with("undecodable: record has no value"),
        "{}",
        by_offset[&3]
    );
    assert!(
        by_offset[&4].starts_with("invalid: qty"),
        "{}",
        by_offset[&4]
    );
    assert!(
        by_offset[&5].starts_with("rejected: ") && by_offset[&5].contains("OVF/EURUSD"),
        "{}",
        by_offset[&5]
    );
    assert_eq!(sum(&km.dead_letter_causes, &["undecodable"]), 3);
    assert_eq!(sum(&km.dead_letter_causes, &["invalid"]), 1);
    assert_eq!(sum(&km.dead_letter_causes, &["rejected"]), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_with_reason_and_poison_does_not_block_sqlite() {
    dead_letters(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_with_reason_and_poison_does_not_block_postgres() {
    let Some(pg) = fills_common::pg_url("dead_letters_postgres") else {
        return;
    };
    let schema = fills_common::unique_schema("t_kafka", "dlq");
    dead_letters(Some((&pg, &schema))).await;
    drop_schema(&pg, &schema).await;
}

/// Two consumers (separate stores and connections) on the same partitions
/// of one PostgreSQL database with the same consumer name: the offset's
/// compare-and-set lets only one apply each batch, so no event is even
/// seen as a duplicate, and the offset ends at the last record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_never_both_apply_a_batch() {
    let Some(url) = fills_common::kafka_url("two_consumers_never_both_apply_a_batch") else {
        return;
    };
    let Some(pg) = fills_common::pg_url("two_consumers_never_both_apply_a_batch") else {
        return;
    };
    let c = client(&url).await;
    let topic = unique("two");
    create_topic(&c, &topic, 2).await;
    let mut rng = Rng(0x5EED_0005);
    let fills = make_fills(&mut rng, "t", 2_000);
    for (i, chunk) in fills.chunks(1_000).enumerate() {
        let v: Vec<_> = chunk.iter().map(|f| Some(f.json().into_bytes())).collect();
        produce(&c, &topic, i as i32, &v).await;
    }
    let schema = fills_common::unique_schema("t_kafka", "two");
    let dir = tempfile::tempdir().unwrap();
    let (a, ma) = open_store(Some((&pg, &schema)), dir.path()).await;
    let (b, mb) = open_store(Some((&pg, &schema)), dir.path()).await;
    let (ka, kb) = (
        KafkaMetrics::unregistered(ma.clone()),
        KafkaMetrics::unregistered(mb.clone()),
    );
    let ra = start(settings(&url, &topic, "tg", 20), a.clone(), ka.clone());
    let rb = start(settings(&url, &topic, "tg", 20), b.clone(), kb.clone());
    wait_caught_up(&c, &a, &topic, 2, "tg").await;
    ra.stop().await;
    rb.stop().await;
    let applied = sum(&ma.applied, &["FILL", "kafka"]) + sum(&mb.applied, &["FILL", "kafka"]);
    let dups = sum(&ma.duplicate_events, &["FILL", "kafka"])
        + sum(&mb.duplicate_events, &["FILL", "kafka"]);
    println!(
        "applied by A {}, by B {}, offset conflicts {} + {}",
        sum(&ma.applied, &["FILL", "kafka"]),
        sum(&mb.applied, &["FILL", "kafka"]),
        ka.offset_conflicts.get(),
        kb.offset_conflicts.get()
    );
    assert_eq!(applied, 2_000);
    assert_eq!(dups, 0, "no batch was applied by both");
    assert_eq!(actual_qty(&a).await, expected_qty(&fills));
    assert_eq!(
        stored_offsets(&a, &topic, 2, "tg").await,
        vec![Some(999), Some(999)]
    );
    drop_schema(&pg, &schema).await;
}

// ------------------------------------------------------- the crash test

fn spawn_consume(
    bin: &std::path::Path,
    url: &str,
    topic: &str,
    db: &str,
    log: &std::path::Path,
    rust_log: &str,
) -> Child {
    let mut cmd = Command::new(bin);
    cmd.args(["fills", "consume-kafka", "--db", db, "--bootstrap", url])
        .args(["--topic", topic, "--dlq-topic", &format!("{topic}-dlq")])
        .args([
            "--consumer",
            "crash",
            "--batch",
            "10",
            "--max-wait",
            "100ms",
        ]);
    spawn_logged(cmd, log, rust_log)
}

/// 20,000 records (15,000 distinct fills plus 5,000 repeats, each after its
/// original, over 3 partitions) consumed by a real `tickgate fills
/// consume-kafka` process SIGKILLed at random points at least 20 times and
/// restarted each time; then drained and stopped with SIGTERM. Every
/// position equals the exact sum, each distinct event is recorded once,
/// and each stored offset is the offset of its partition's last record.
async fn crash_test(url: &str, db: &str, open: impl AsyncFn() -> Store) {
    let (_bin_dir, bin) = private_binary(&["fills", "consume-kafka"]);
    let c = client(url).await;
    let topic = unique("crash");
    create_topic(&c, &topic, 3).await;
    let mut rng = Rng(0x5EED_0003 ^ std::process::id() as u64);
    let fills = make_fills(&mut rng, "c", 15_000);
    let messages = with_repeats(&mut rng, &fills, 5_000);
    assert_eq!(messages.len(), 20_000);
    let mut per_part: Vec<Vec<Option<Vec<u8>>>> = vec![Vec::new(); 3];
    for m in messages {
        per_part[rng.below(3) as usize].push(Some(m));
    }
    for (p, v) in per_part.iter().enumerate() {
        produce(&c, &topic, p as i32, v).await;
    }
    let want = last_offsets(&c, &topic, 3).await;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("consume.log");
    let t0 = Instant::now();
    // Offsets stored so far, read through a store of the test's own.
    let watcher = open().await;
    let kills = 20;
    let kills_with_backlog = kill_repeatedly(
        kills,
        &mut rng,
        &log,
        || spawn_consume(&bin, url, &topic, db, &log, "warn"),
        async || stored_offsets(&watcher, &topic, 3, "crash").await != want,
    )
    .await;
    println!(
        "kafka crash test: {kills} SIGKILLs ({kills_with_backlog} with work left) in {:?}",
        t0.elapsed()
    );
    let final_log = dir.path().join("final.log");
    let child = spawn_consume(&bin, url, &topic, db, &final_log, "info");
    drain_and_stop(child, &final_log, async || {
        wait_caught_up_logged(&c, &watcher, &topic, 3, "crash", Some(&final_log)).await
    })
    .await;
    println!("kafka crash test: drained after {:?}", t0.elapsed());
    assert!(
        kills_with_backlog >= 15,
        "too few kills hit a busy consumer: {kills_with_backlog}"
    );
    drop(watcher);
    let store = open().await;
    assert_eq!(
        stored_offsets(&store, &topic, 3, "crash").await,
        want,
        "offset = last record applied"
    );
    assert_eq!(actual_qty(&store).await, expected_qty(&fills));
    assert_eq!(
        store.count_rows(SweepTable::ProcessedEvents).await.unwrap(),
        15_000,
        "each distinct event recorded exactly once"
    );
    // Nothing was dead-lettered: the dead-letter topic is empty or absent.
    let topics = c.list_topics().await.unwrap();
    if topics.iter().any(|t| t.name == format!("{topic}-dlq")) {
        let hw = high_watermark(&c, &format!("{topic}-dlq"), 0).await;
        assert_eq!(hw, 0, "nothing dead-lettered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_test_sqlite_sigkill_20_times() {
    let Some(url) = fills_common::kafka_url("kafka crash_test_sqlite") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fills.db");
    let db = format!("sqlite:{}", path.display());
    crash_test(&url, &db, async || {
        Store::Sqlite(
            SqliteStore::open(&path, StoreOptions::default(), FillsMetrics::unregistered())
                .await
                .unwrap(),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_test_postgres_sigkill_20_times() {
    let Some(url) = fills_common::kafka_url("kafka crash_test_postgres") else {
        return;
    };
    let Some(pg) = fills_common::pg_url("kafka crash_test_postgres") else {
        return;
    };
    let schema = fills_common::unique_schema("t_kafka", "crash");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let db = format!("{pg}{sep}options=-csearch_path%3D{schema}");
    let dir = tempfile::tempdir().unwrap();
    drop(open_store(Some((&pg, &schema)), dir.path()).await);
    let (pg2, schema2) = (pg.clone(), schema.clone());
    crash_test(&url, &db, async || {
        open_store(Some((&pg2, &schema2)), std::path::Path::new("/nonexistent"))
            .await
            .0
    })
    .await;
    drop_schema(&pg, &schema).await;
}
