//! The Kafka source end to end: records already in the
//! broker, a consumer from no stored offset to every partition's last
//! record committed with its effects (fills.md "Sources": the offset in the
//! batch's transaction), against the same events applied to the same store
//! directly in batches of the same size (no broker), side by side.
//!
//!     TICKGATE_TEST_KAFKA_URL=127.0.0.1:9092 cargo bench --bench fills_kafka
//!     TICKGATE_TEST_KAFKA_URL=127.0.0.1:9092 TICKGATE_TEST_PG_URL=postgres://postgres@127.0.0.1:5432/test cargo bench --bench fills_kafka
//!
//! Optional: FILLS_KAFKA_BENCH_N (distinct events, default 50000; 10% more
//! are repeats), FILLS_KAFKA_BENCH_PARTITIONS (default 3),
//! FILLS_KAFKA_BENCH_BATCH (default 1000). events/s counts input records
//! (repeats included) from the consumer's start to the last offset stored.

#[path = "common/cpu.rs"]
mod cpu;
#[path = "common/env.rs"]
mod env;

use env::env_usize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rskafka::chrono::{TimeZone, Utc};
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use tickgate::fills::kafka::{self, KafkaMetrics, KafkaSettings, Start};
use tickgate::fills::metrics::FillsMetrics;
use tickgate::fills::model::parse_value;
use tickgate::fills::store::{PgStore, SqliteStore, Store, StoreOptions};

fn cpu_secs() -> f64 {
    cpu::process_cpu_ns() as f64 / 1e9
}

/// `n` distinct fills over 200 accounts x 10 symbols as JSON records, plus
/// 10% repeats shortly after their original.
fn workload(n: usize, tag: &str) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(n + n / 10);
    for i in 0..n {
        let side = if rnd(2) == 0 { "BUY" } else { "SELL" };
        out.push(
            format!(
                r#"{{"kind":"FILL","event_id":"{tag}-E-{i}","deal_id":"{tag}-D-{i}","account":"ACC-{}","symbol":"SYM{}","side":"{side}","qty":"{}","price":"1.{:05}","exec_time":"2026-11-30T08:00:00.123456Z"}}"#,
                rnd(200),
                rnd(10),
                1 + rnd(100_000),
                rnd(100_000)
            )
            .into_bytes(),
        );
        if i % 10 == 9 {
            let back = rnd(10) as usize;
            out.push(out[out.len() - 1 - back].clone());
        }
    }
    out
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn record(value: Vec<u8>) -> Record {
    Record {
        key: None,
        value: Some(value),
        headers: BTreeMap::new(),
        timestamp: Utc
            .timestamp_millis_opt(unix_ms())
            .single()
            .expect("a valid time"),
    }
}

async fn high_watermark(c: &Client, topic: &str, p: i32) -> i64 {
    let pc = c
        .partition_client(topic, p, UnknownTopicHandling::Retry)
        .await
        .expect("partition client");
    let earliest = pc.get_offset(OffsetAt::Earliest).await.expect("earliest");
    pc.fetch_records(earliest, 1..1_000, 0)
        .await
        .expect("fetch")
        .1
}

async fn open(pg: Option<&str>, dir: &std::path::Path, schema: &str) -> Store {
    let m = FillsMetrics::unregistered();
    match pg {
        Some(url) => {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("connect to PostgreSQL");
            tokio::spawn(conn);
            client
                .batch_execute(&format!(
                    "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE; CREATE SCHEMA \"{schema}\""
                ))
                .await
                .expect("fresh schema");
            let opts = StoreOptions {
                pg_schema: Some(schema.to_owned()),
                ..StoreOptions::default()
            };
            Store::Postgres(PgStore::connect(url, opts, m).await.expect("PgStore"))
        }
        None => Store::Sqlite(
            SqliteStore::open(
                &dir.join(format!("{schema}.db")),
                StoreOptions::default(),
                m,
            )
            .await
            .expect("SqliteStore"),
        ),
    }
}

struct Row {
    backend: &'static str,
    design: String,
    records: usize,
    secs: f64,
    cpu: f64,
}

#[allow(clippy::too_many_arguments)]
async fn consume(
    url: &str,
    topic: &str,
    partitions: i32,
    store: Store,
    batch: usize,
    want: &[i64],
) -> (f64, f64) {
    let s = KafkaSettings {
        bootstrap: vec![url.to_owned()],
        topic: topic.to_owned(),
        partitions: Vec::new(),
        start: Start::Earliest,
        batch,
        dlq_topic: format!("{topic}-dlq"),
        consumer: "bench".to_owned(),
        max_wait: Duration::from_millis(100),
        sasl: None,
    };
    let metrics = KafkaMetrics::unregistered(FillsMetrics::unregistered());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let cpu = cpu_secs();
    let t = Instant::now();
    let task = tokio::spawn(kafka::run_consumer(
        s,
        store.clone(),
        metrics.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    loop {
        let mut done = true;
        for p in 0..partitions {
            let stored = kafka::stored_offset(&store, topic, p, "bench")
                .await
                .expect("stored offset");
            if stored != Some(want[p as usize] - 1) {
                done = false;
                break;
            }
        }
        if done {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(900),
            "the consumer did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu;
    let _ = stop.send(());
    task.await.expect("join").expect("consumer");
    let (backend, fast) = match &store {
        Store::Postgres(p) => {
            let (ok, refused) = p.fast_path_counts();
            (
                "postgres",
                format!(", fast path {ok} batches committed, {refused} refused"),
            )
        }
        Store::Sqlite(_) => ("sqlite", String::new()),
    };
    println!(
        "kafka source on {backend}: {} store failures, {} offset conflicts, {} session restarts{fast}",
        metrics.store_failures.get(),
        metrics.offset_conflicts.get(),
        metrics.restarts.get()
    );
    (secs, cpu)
}

async fn direct(store: &Store, values: &[Vec<u8>], batch: usize) -> (f64, f64) {
    let cpu = cpu_secs();
    let t = Instant::now();
    for chunk in values.chunks(batch) {
        let events = chunk
            .iter()
            .map(|v| parse_value(&serde_json::from_slice(v).expect("json")))
            .collect();
        store.apply_events("bench", events).await.expect("apply");
    }
    (t.elapsed().as_secs_f64(), cpu_secs() - cpu)
}

fn main() {
    let Some(url) = std::env::var("TICKGATE_TEST_KAFKA_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("fills_kafka bench: set TICKGATE_TEST_KAFKA_URL (host:port of a Kafka-compatible broker)");
        return;
    };
    let pg = std::env::var("TICKGATE_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let n = env_usize("FILLS_KAFKA_BENCH_N", 50_000);
    let partitions = env_usize("FILLS_KAFKA_BENCH_PARTITIONS", 3) as i32;
    let batch = env_usize("FILLS_KAFKA_BENCH_BATCH", 1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    rt.block_on(async {
        let c = ClientBuilder::new(vec![url.clone()])
            .build()
            .await
            .expect("connect to the broker");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut backends: Vec<(&'static str, Option<&str>)> = vec![("sqlite", None)];
        if let Some(u) = pg.as_deref() {
            backends.push(("postgres", Some(u)));
        }
        for (backend, pg_url) in backends {
            let tag = format!("kb-{backend}-{}-{}", std::process::id(), unix_ms());
            let values = workload(n, &tag);
            // Records go round-robin over the partitions, produced before
            // the clock starts.
            let topic = tag.clone();
            c.controller_client()
                .expect("controller")
                .create_topic(&topic, partitions, 1, 5_000)
                .await
                .expect("create topic");
            let mut per_part: Vec<Vec<Vec<u8>>> = vec![Vec::new(); partitions as usize];
            for (i, v) in values.iter().enumerate() {
                per_part[i % partitions as usize].push(v.clone());
            }
            for (p, vs) in per_part.iter().enumerate() {
                let pc = c
                    .partition_client(&topic, p as i32, UnknownTopicHandling::Retry)
                    .await
                    .expect("partition client");
                for chunk in vs.chunks(500) {
                    pc.produce(
                        chunk.iter().cloned().map(record).collect(),
                        Compression::NoCompression,
                    )
                    .await
                    .expect("produce");
                }
            }
            let mut want = Vec::new();
            for p in 0..partitions {
                want.push(high_watermark(&c, &topic, p).await);
            }
            assert_eq!(want.iter().sum::<i64>() as usize, values.len());

            let store = open(pg_url, dir.path(), &format!("{}_k", backend)).await;
            let (secs, cpu) = consume(&url, &topic, partitions, store, batch, &want).await;
            rows.push(Row {
                backend,
                design: format!("Kafka source, {partitions} partitions, {batch} records per tx"),
                records: values.len(),
                secs,
                cpu,
            });
            let store = open(pg_url, dir.path(), &format!("{}_d", backend)).await;
            let (secs, cpu) = direct(&store, &values, batch).await;
            rows.push(Row {
                backend,
                design: format!("store directly, {batch} events per tx"),
                records: values.len(),
                secs,
                cpu,
            });
        }
    });
    println!("| backend | design | records | seconds | records/s | client CPU s |");
    println!("|---|---|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2} | {:.0} | {:.2} |",
            r.backend,
            r.design,
            r.records,
            r.secs,
            r.records as f64 / r.secs,
            r.cpu
        );
    }
}
