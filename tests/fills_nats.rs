//! The NATS JetStream source against a real server (TICKGATE_TEST_NATS_URL)
//! and, for the PostgreSQL tests, a real database (TICKGATE_TEST_PG_URL).
//!
//! Every test uses its own stream, subjects and durable names and deletes
//! the streams it created. Streams are also created with a one-hour max age,
//! so a test that panics leaves nothing behind for long.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream::StorageType};
use tickgate::fills::metrics::FillsMetrics;
use tickgate::fills::nats::{self as src, NatsMetrics, NatsSettings};
use tickgate::fills::store::{PgStore, SqliteStore, Store, StoreOptions, SweepTable};

// ---------------------------------------------------------------- helpers

#[path = "common/fills.rs"]
mod fills_common;
#[path = "common/source_fills.rs"]
mod source_fills;
use source_fills::{
    actual_qty, counter_sum, drain_and_stop, expected_qty, kill_repeatedly, make_fills,
    private_binary, spawn_logged, unique_suffix, with_repeats, Rng,
};

fn service_url(var: &str) -> Option<String> {
    fills_common::service_url(var, "fills_nats")
}

/// A name no other test (or earlier run) uses.
fn unique(tag: &str) -> String {
    format!("TGT_{tag}_{}", unique_suffix())
}

/// Names of one test's NATS objects.
#[derive(Clone)]
struct Names {
    stream: String,
    subject: String,
    durable: String,
    dlq_subject: String,
    dlq_stream: String,
}

impl Names {
    fn new(tag: &str) -> Names {
        let stream = unique(tag);
        let lower = stream.to_lowercase();
        Names {
            subject: format!("{lower}.in"),
            dlq_subject: format!("{lower}.dlq"),
            durable: format!("{stream}_C"),
            dlq_stream: format!("{stream}_DLQ"),
            stream,
        }
    }
    fn settings(&self, url: &str, max_deliver: i64, batch: usize) -> NatsSettings {
        NatsSettings {
            url: url.into(),
            stream: self.stream.clone(),
            subject: self.subject.clone(),
            durable: self.durable.clone(),
            dlq_subject: self.dlq_subject.clone(),
            dlq_stream: self.dlq_stream.clone(),
            max_deliver,
            ack_wait: Duration::from_secs(2),
            batch,
        }
    }
}

async fn connect(url: &str) -> jetstream::Context {
    jetstream::new(async_nats::connect(url).await.expect("connect to NATS"))
}

/// Create the event stream and the dead-letter stream (one-hour max age).
async fn create_streams(js: &jetstream::Context, n: &Names) {
    for (name, subject) in [(&n.stream, &n.subject), (&n.dlq_stream, &n.dlq_subject)] {
        js.create_stream(jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            storage: StorageType::File,
            max_age: Duration::from_secs(3600),
            ..Default::default()
        })
        .await
        .expect("create stream");
    }
}

async fn delete_streams(js: &jetstream::Context, n: &Names) {
    for name in [&n.stream, &n.dlq_stream] {
        let _ = js.delete_stream(name).await;
    }
}

/// Publish and wait for every PubAck (no Nats-Msg-Id: repeats are stored).
async fn publish_all(js: &jetstream::Context, subject: &str, payloads: &[Vec<u8>]) {
    for chunk in payloads.chunks(2000) {
        let mut acks = Vec::with_capacity(chunk.len());
        for p in chunk {
            acks.push(
                js.publish(subject.to_owned(), p.clone().into())
                    .await
                    .expect("publish"),
            );
        }
        for a in acks {
            a.await.expect("publish ack");
        }
    }
}

/// (num_pending, num_ack_pending) of a durable; None while it does not exist.
async fn backlog(js: &jetstream::Context, stream: &str, durable: &str) -> Option<(u64, usize)> {
    let stream = js.get_stream(stream).await.ok()?;
    let mut c: jetstream::consumer::PullConsumer = stream.get_consumer(durable).await.ok()?;
    let info = c.info().await.ok()?;
    Some((info.num_pending, info.num_ack_pending))
}

/// Wait until the durable has delivered and had acked every message.
async fn wait_drained(js: &jetstream::Context, stream: &str, durable: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        if backlog(js, stream, durable).await == Some((0, 0)) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "consumer {durable} not drained after {limit:?}: {:?}",
            backlog(js, stream, durable).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn stream_last_seq(js: &jetstream::Context, stream: &str) -> u64 {
    let mut s = js.get_stream(stream).await.unwrap();
    s.info().await.unwrap().state.last_sequence
}

async fn sqlite_store(path: &std::path::Path) -> (Store, FillsMetrics) {
    let m = FillsMetrics::unregistered();
    let s = SqliteStore::open(path, StoreOptions::default(), m.clone())
        .await
        .expect("open SQLite store");
    (Store::Sqlite(s), m)
}

/// A PostgreSQL store in a fresh schema of its own.
async fn pg_store(url: &str, schema: &str) -> (Store, FillsMetrics) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect PostgreSQL");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
        .await
        .unwrap();
    let m = FillsMetrics::unregistered();
    let opts = StoreOptions {
        pg_schema: Some(schema.to_owned()),
        ..StoreOptions::default()
    };
    let s = PgStore::connect(url, opts, m.clone())
        .await
        .expect("connect PostgreSQL store");
    (Store::Postgres(s), m)
}

async fn pg_drop_schema(url: &str, schema: &str) {
    if let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

fn start_consumer(settings: NatsSettings, store: Store, metrics: NatsMetrics) -> Running {
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(src::run_consumer(settings, store, metrics, async move {
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

// ------------------------------------------------------------------ tests

/// (a) Every event published 2-5 times, interleaved; some BUSTs, one of
/// them before its FILL. Applied once, the repeats counted, positions exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_are_applied_once_and_counted() {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let js = connect(&url).await;
    let n = Names::new("REP");
    // The consumer creates both streams itself here (not pre-created).
    let dir = tempfile::tempdir().unwrap();
    let (store, fm) = sqlite_store(&dir.path().join("f.db")).await;
    let nm = NatsMetrics::unregistered(fm.clone());
    let running = start_consumer(n.settings(&url, 5, 50), store.clone(), nm.clone());
    // Wait until the consumer has created the stream and its durable.
    let t0 = Instant::now();
    while backlog(&js, &n.stream, &n.durable).await.is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "consumer never created its durable"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut rng = Rng(0x5EED_0001);
    let fills = make_fills(&mut rng, "a", 300);
    // 20 fills busted; the first bust is published before anything else.
    let busted: Vec<usize> = (0..20).map(|i| i * 15).collect();
    let mut distinct: Vec<Vec<u8>> = fills.iter().map(|f| f.json().into_bytes()).collect();
    let mut busts = Vec::new();
    for (k, &i) in busted.iter().enumerate() {
        busts.push(fills[i].bust_json(&format!("aB{k}")).into_bytes());
    }
    let early_bust = busts.remove(0);
    distinct.extend(busts);
    let mut messages = Vec::new();
    for p in &distinct {
        for _ in 0..2 + rng.below(4) {
            messages.push(p.clone());
        }
    }
    rng.shuffle(&mut messages);
    messages.insert(0, early_bust.clone());
    messages.push(early_bust); // and once more, last
    let n_distinct = distinct.len() + 1;
    publish_all(&js, &n.subject, &messages).await;

    wait_drained(&js, &n.stream, &n.durable, Duration::from_secs(60)).await;
    running.stop().await;

    let live = fills
        .iter()
        .enumerate()
        .filter(|(i, _)| !busted.contains(i))
        .map(|(_, f)| f);
    assert_eq!(actual_qty(&store).await, expected_qty(live));
    assert_eq!(
        store.count_rows(SweepTable::ProcessedEvents).await.unwrap(),
        n_distinct as u64
    );
    assert!(store.held_busts().await.unwrap().is_empty());

    let kinds: &[&[&str]] = &[&["FILL", "nats"], &["BUST", "nats"]];
    let applied = counter_sum(&fm.applied, kinds);
    let held = fm.held.with_label_values(&["nats"]).get();
    let dups = counter_sum(&fm.duplicate_events, kinds) + counter_sum(&fm.duplicate_by_deal, kinds);
    assert_eq!(
        applied + held,
        n_distinct as u64,
        "each event applied (or held) once"
    );
    // The early BUST (and any the shuffle put before its FILL) was held,
    // then released when its FILL arrived.
    assert!(held >= 1);
    assert_eq!(fm.busts_released.get(), held);
    // Every delivery of a repeat is a counted duplicate: at least the
    // published repeats, plus one per redelivery if any happened.
    let repeats = (messages.len() - n_distinct) as u64;
    assert!(dups >= repeats, "duplicates {dups} < repeats {repeats}");
    if nm.redelivered.get() == 0 {
        assert_eq!(dups, repeats);
    }
    assert!(
        fm.duplicate_events
            .with_label_values(&["FILL", "nats"])
            .get()
            > 0
    );
    assert!(
        fm.duplicate_events
            .with_label_values(&["BUST", "nats"])
            .get()
            > 0
    );
    assert_eq!(fm.dead_lettered.with_label_values(&["nats"]).get(), 0);
    // The stream position is stored with the events (same transaction).
    let pos = store
        .consumer_position(&n.stream, &n.durable)
        .await
        .unwrap()
        .expect("consumer position stored");
    // The highest committed sequence: after draining, the stream's last.
    assert_eq!(pos, stream_last_seq(&js, &n.stream).await);
    delete_streams(&js, &n).await;
}

/// (b) An undecodable payload, a non-JSON payload, an invalid event and an
/// event that already failed max_deliver deliveries go to the dead-letter
/// subject with their reasons; the events after them are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_are_dead_lettered_and_the_stream_continues() {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let js = connect(&url).await;
    let n = Names::new("DLQ");
    create_streams(&js, &n).await;
    let settings = n.settings(&url, 2, 50);

    let mut rng = Rng(0x5EED_0002);
    let fills = make_fills(&mut rng, "b", 4);
    let invalid = fills[1]
        .json()
        .replace(&format!(r#""qty":"{}""#, fills[1].qty), r#""qty":5"#);
    assert_ne!(invalid, fills[1].json());
    // Seq 1: the poison message, failed twice by an earlier consumer below.
    publish_all(&js, &n.subject, &[fills[3].json().into_bytes()]).await;
    // The same durable as tickgate's, configured the same way.
    let stream = js.get_stream(&n.stream).await.unwrap();
    let c: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(n.durable.clone()),
            filter_subject: n.subject.clone(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: settings.ack_wait,
            max_deliver: -1,
            ..Default::default()
        })
        .await
        .unwrap();
    use futures::StreamExt;
    for attempt in 1..=2 {
        let mut batch = c.fetch().max_messages(1).messages().await.unwrap();
        let m = batch.next().await.expect("poison delivered").unwrap();
        assert_eq!(m.info().unwrap().delivered, attempt);
        m.ack_with(jetstream::AckKind::Nak(None)).await.unwrap();
        drop(batch);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    publish_all(
        &js,
        &n.subject,
        &[
            fills[0].json().into_bytes(),    // seq 2
            b"\xff\xfe\x00binary".to_vec(),  // seq 3
            b"{\"kind\":\"FILL\",".to_vec(), // seq 4
            invalid.clone().into_bytes(),    // seq 5
            fills[2].json().into_bytes(),    // seq 6
        ],
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let (store, fm) = sqlite_store(&dir.path().join("f.db")).await;
    let nm = NatsMetrics::unregistered(fm.clone());
    let running = start_consumer(settings, store.clone(), nm.clone());
    wait_drained(&js, &n.stream, &n.durable, Duration::from_secs(30)).await;
    running.stop().await;

    // Only fills 0 and 2 were applied.
    assert_eq!(
        actual_qty(&store).await,
        expected_qty([&fills[0], &fills[2]])
    );
    assert_eq!(fm.dead_lettered.with_label_values(&["nats"]).get(), 4);
    assert_eq!(
        nm.dead_letter_causes
            .with_label_values(&["undecodable"])
            .get(),
        2
    );
    assert_eq!(
        nm.dead_letter_causes.with_label_values(&["invalid"]).get(),
        1
    );
    assert_eq!(
        nm.dead_letter_causes
            .with_label_values(&["max_deliver"])
            .get(),
        1
    );

    // The dead letters: original payload, reason and origin in headers.
    let mut dlq = js.get_stream(&n.dlq_stream).await.unwrap();
    assert_eq!(dlq.info().await.unwrap().state.messages, 4);
    let mut by_seq = HashMap::new();
    for seq in 1..=4 {
        let m = dlq.get_raw_message(seq).await.unwrap();
        let h = |k: &str| {
            m.headers
                .get(k)
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        };
        assert_eq!(h(src::H_SUBJECT), n.subject);
        assert_eq!(h(src::H_STREAM), n.stream);
        let orig: u64 = h(src::H_STREAM_SEQ).parse().unwrap();
        by_seq.insert(
            orig,
            (h(src::H_REASON), h(src::H_DELIVERIES), m.payload.to_vec()),
        );
    }
    let (reason, deliveries, payload) = &by_seq[&1];
    assert!(
        reason.starts_with("max_deliver: delivered 3 times"),
        "{reason}"
    );
    assert_eq!(deliveries, "3");
    assert_eq!(payload, fills[3].json().as_bytes());
    let (reason, _, payload) = &by_seq[&3];
    assert!(
        reason.starts_with("undecodable:") && reason.contains("UTF-8"),
        "{reason}"
    );
    assert_eq!(payload, b"\xff\xfe\x00binary");
    let (reason, _, _) = &by_seq[&4];
    assert!(
        reason.starts_with("undecodable: malformed JSON"),
        "{reason}"
    );
    let (reason, deliveries, payload) = &by_seq[&5];
    assert!(reason.starts_with("invalid: qty"), "{reason}");
    assert_eq!(deliveries, "1");
    assert_eq!(payload, invalid.as_bytes());
    delete_streams(&js, &n).await;
}

/// A bad event whose payload is close to the server's max_payload cannot be
/// copied into a dead letter (payload plus headers exceed the limit): it is
/// dead-lettered without its payload, with headers locating the original
/// (stream, sequence, subject), its size and the reason, and acked, so it
/// is not redelivered and the events after it are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bad_message_is_dead_lettered_by_reference() {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let client = async_nats::connect(url.as_str())
        .await
        .expect("connect to NATS");
    let max_payload = client.max_payload();
    let js = jetstream::new(client);
    let n = Names::new("DLQBIG");
    create_streams(&js, &n).await;
    let settings = n.settings(&url, 3, 50);

    let mut rng = Rng(0x5EED_0009);
    let fills = make_fills(&mut rng, "big", 3);
    // An invalid event (qty not a string), padded with JSON whitespace up
    // to 64 bytes under max_payload: it fits as published (no headers), not
    // with the dead-letter headers.
    let invalid = fills[1]
        .json()
        .replace(&format!(r#""qty":"{}""#, fills[1].qty), r#""qty":5"#);
    assert_ne!(invalid, fills[1].json());
    let size = max_payload - 64;
    let mut big = b"{".to_vec();
    big.resize(size - (invalid.len() - 1), b' ');
    big.extend_from_slice(&invalid.as_bytes()[1..]);
    assert_eq!(big.len(), size);
    publish_all(
        &js,
        &n.subject,
        &[
            fills[0].json().into_bytes(), // seq 1
            big.clone(),                  // seq 2
        ],
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let (store, fm) = sqlite_store(&dir.path().join("f.db")).await;
    let nm = NatsMetrics::unregistered(fm.clone());
    let running = start_consumer(settings.clone(), store.clone(), nm.clone());
    wait_drained(&js, &n.stream, &n.durable, Duration::from_secs(30)).await;
    // Later good events still apply (the consumer moved on).
    publish_all(&js, &n.subject, &[fills[2].json().into_bytes()]).await; // seq 3
    wait_drained(&js, &n.stream, &n.durable, Duration::from_secs(30)).await;
    // Longer than ack_wait: nothing comes back.
    tokio::time::sleep(settings.ack_wait + Duration::from_secs(1)).await;
    assert_eq!(
        backlog(&js, &n.stream, &n.durable).await,
        Some((0, 0)),
        "nothing pending or unacked"
    );
    running.stop().await;

    assert_eq!(
        actual_qty(&store).await,
        expected_qty([&fills[0], &fills[2]])
    );
    assert_eq!(
        nm.redelivered.get(),
        0,
        "the oversized message was not redelivered"
    );
    assert_eq!(nm.naks.get(), 0);
    assert_eq!(fm.dead_lettered.with_label_values(&["nats"]).get(), 1);
    assert_eq!(
        nm.dead_letter_causes.with_label_values(&["invalid"]).get(),
        1
    );
    assert_eq!(nm.dead_letter_payloads_omitted.get(), 1);

    // One dead letter, without the payload, referencing the original.
    let mut dlq = js.get_stream(&n.dlq_stream).await.unwrap();
    assert_eq!(dlq.info().await.unwrap().state.messages, 1);
    let m = dlq.get_raw_message(1).await.unwrap();
    let h = |k: &str| {
        m.headers
            .get(k)
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default()
    };
    assert!(m.payload.is_empty(), "payload omitted");
    assert_eq!(h(src::H_STREAM), n.stream);
    assert_eq!(h(src::H_STREAM_SEQ), "2");
    assert_eq!(h(src::H_SUBJECT), n.subject);
    assert_eq!(h(src::H_PAYLOAD_SIZE), size.to_string());
    let omitted = h(src::H_PAYLOAD_OMITTED);
    assert!(
        omitted.contains(&format!("max_payload {max_payload}")),
        "{omitted}"
    );
    let reason = h(src::H_REASON);
    assert!(reason.starts_with("invalid: qty"), "{reason}");
    // The reference resolves: the original is still in its stream.
    let orig = js
        .get_stream(&n.stream)
        .await
        .unwrap()
        .get_raw_message(2)
        .await
        .unwrap();
    assert_eq!(orig.payload.as_ref(), big.as_slice());
    delete_streams(&js, &n).await;
}

/// A transaction that fails (the database is locked by another writer) is
/// not acked: the batch is nakked, comes back, and is applied once the
/// database is free. With max_deliver 1 the same failure dead-letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_transactions_are_nakked_and_redelivered() {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let js = connect(&url).await;
    for max_deliver in [5, 1] {
        let n = Names::new("NAK");
        create_streams(&js, &n).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.db");
        let fm = FillsMetrics::unregistered();
        let opts = StoreOptions {
            key_wait: Duration::from_millis(100), // the store's busy timeout
            ..StoreOptions::default()
        };
        let store = Store::Sqlite(SqliteStore::open(&path, opts, fm.clone()).await.unwrap());
        // Another writer holds the database.
        let lock = rusqlite::Connection::open(&path).unwrap();
        lock.execute_batch("BEGIN EXCLUSIVE").unwrap();

        let mut rng = Rng(0x5EED_0005);
        let fills = make_fills(&mut rng, "e", 30);
        let payloads: Vec<Vec<u8>> = fills.iter().map(|f| f.json().into_bytes()).collect();
        publish_all(&js, &n.subject, &payloads).await;
        let nm = NatsMetrics::unregistered(fm.clone());
        let running = start_consumer(n.settings(&url, max_deliver, 50), store.clone(), nm.clone());
        let t0 = Instant::now();
        while nm.naks.get() == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no nak while locked"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lock.execute_batch("ROLLBACK").unwrap();
        wait_drained(&js, &n.stream, &n.durable, Duration::from_secs(30)).await;
        running.stop().await;

        assert!(nm.redelivered.get() > 0);
        let mut dlq = js.get_stream(&n.dlq_stream).await.unwrap();
        let dead = dlq.info().await.unwrap().state.messages;
        if max_deliver == 5 {
            // Redelivered after the nak delay and applied, exactly once.
            assert_eq!(actual_qty(&store).await, expected_qty(&fills));
            assert_eq!(dead, 0);
        } else {
            // Failed its one allowed delivery: dead-lettered, not lost.
            let failed = nm.naks.get();
            assert_eq!(dead, failed);
            assert_eq!(
                nm.dead_letter_causes
                    .with_label_values(&["max_deliver"])
                    .get(),
                failed
            );
            let m = dlq.get_raw_message(1).await.unwrap();
            let reason = m.headers.get(src::H_REASON).unwrap().as_str().to_owned();
            assert!(
                reason.starts_with("max_deliver: delivered 2 times"),
                "{reason}"
            );
            let applied = store.count_rows(SweepTable::ProcessedEvents).await.unwrap();
            assert_eq!(applied + dead, 30, "every event applied or dead-lettered");
        }
        delete_streams(&js, &n).await;
    }
}

/// The durable is deleted while the consumer runs: the session restarts,
/// recreates it, gets every message again, and all of them are duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_durable_is_recreated_and_redelivery_is_harmless() {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let js = connect(&url).await;
    let n = Names::new("DEL");
    create_streams(&js, &n).await;
    let dir = tempfile::tempdir().unwrap();
    let (store, fm) = sqlite_store(&dir.path().join("f.db")).await;
    let nm = NatsMetrics::unregistered(fm.clone());
    let mut rng = Rng(0x5EED_0006);
    let fills = make_fills(&mut rng, "f", 200);
    let payloads: Vec<Vec<u8>> = fills.iter().map(|f| f.json().into_bytes()).collect();
    publish_all(&js, &n.subject, &payloads).await;
    let running = start_consumer(n.settings(&url, 5, 50), store.clone(), nm.clone());
    let t0 = Instant::now();
    while backlog(&js, &n.stream, &n.durable).await.is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "durable not created"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_drained(&js, &n.stream, &n.durable, Duration::from_secs(30)).await;
    let stream = js.get_stream(&n.stream).await.unwrap();
    stream.delete_consumer(&n.durable).await.unwrap();
    let t0 = Instant::now();
    while nm.restarts.get() == 0 || backlog(&js, &n.stream, &n.durable).await != Some((0, 0)) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not recreated and drained: restarts {}, backlog {:?}",
            nm.restarts.get(),
            backlog(&js, &n.stream, &n.durable).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop().await;
    assert_eq!(actual_qty(&store).await, expected_qty(&fills));
    assert_eq!(fm.applied.with_label_values(&["FILL", "nats"]).get(), 200);
    assert_eq!(
        fm.duplicate_events
            .with_label_values(&["FILL", "nats"])
            .get(),
        200
    );
    delete_streams(&js, &n).await;
}

// ------------------------------------------------------- the crash test

fn spawn_consume(
    bin: &std::path::Path,
    n: &Names,
    url: &str,
    db: &str,
    log: &std::path::Path,
    rust_log: &str,
) -> Child {
    let mut cmd = Command::new(bin);
    cmd.args(["fills", "consume", "--db", db, "--nats", url])
        .args(["--stream", &n.stream, "--subject", &n.subject])
        .args(["--durable", &n.durable, "--dlq-subject", &n.dlq_subject])
        .args(["--dlq-stream", &n.dlq_stream])
        // Kills cause many redeliveries; none of them is the event's fault.
        .args(["--max-deliver", "1000", "--ack-wait", "1s", "--batch", "10"]);
    spawn_logged(cmd, log, rust_log)
}

/// (c) 20,000 messages (15,000 distinct fills plus 5,000 repeats) consumed
/// by a real `tickgate fills consume` process that is SIGKILLed at random
/// points at least 20 times and restarted each time. After it drains the
/// stream, every position is exactly the expected sum.
async fn crash_test(url: &str, db_url: &str, check: impl AsyncFnOnce(&Names) -> Store) {
    let (_bin_dir, bin) = private_binary(&["fills", "consume"]);
    let js = connect(url).await;
    let n = Names::new("CRASH");
    create_streams(&js, &n).await;
    let mut rng = Rng(0x5EED_0003 ^ std::process::id() as u64);
    let fills = make_fills(&mut rng, "c", 15_000);
    let messages = with_repeats(&mut rng, &fills, 5_000);
    assert_eq!(messages.len(), 20_000);
    publish_all(&js, &n.subject, &messages).await;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("consume.log");
    let db = db_url.to_owned();
    let start = Instant::now();
    let kills = 20;
    let kills_with_backlog = kill_repeatedly(
        kills,
        &mut rng,
        &log,
        || spawn_consume(&bin, &n, url, &db, &log, "warn"),
        async || backlog(&js, &n.stream, &n.durable).await != Some((0, 0)),
    )
    .await;
    println!(
        "crash test: {kills} SIGKILLs ({kills_with_backlog} with work left) in {:?}",
        start.elapsed()
    );
    // The last run drains the stream, then stops on SIGTERM.
    let final_log = dir.path().join("final.log");
    let child = spawn_consume(&bin, &n, url, &db, &final_log, "info");
    drain_and_stop(child, &final_log, async || {
        wait_drained(&js, &n.stream, &n.durable, Duration::from_secs(120)).await
    })
    .await;
    println!("crash test: drained after {:?}", start.elapsed());
    assert!(
        kills_with_backlog >= 15,
        "too few kills hit a busy consumer: {kills_with_backlog}"
    );

    let store = check(&n).await;
    assert_eq!(
        store
            .consumer_position(&n.stream, &n.durable)
            .await
            .unwrap(),
        Some(stream_last_seq(&js, &n.stream).await)
    );
    assert_eq!(actual_qty(&store).await, expected_qty(&fills));
    assert_eq!(
        store.count_rows(SweepTable::ProcessedEvents).await.unwrap(),
        15_000,
        "each distinct event recorded exactly once"
    );
    let mut dlq = js.get_stream(&n.dlq_stream).await.unwrap();
    assert_eq!(
        dlq.info().await.unwrap().state.messages,
        0,
        "nothing dead-lettered"
    );
    delete_streams(&js, &n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_test_sqlite_sigkill_20_times() {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("fills.db");
    let db = format!("sqlite:{}", db_path.display());
    crash_test(&url, &db, async |_n: &Names| sqlite_store(&db_path).await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_test_postgres_sigkill_20_times() {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let Some(pg) = service_url("TICKGATE_TEST_PG_URL") else {
        return;
    };
    let schema = unique("crash").to_lowercase();
    // The process selects its schema through the connection's options.
    let sep = if pg.contains('?') { '&' } else { '?' };
    let db = format!("{pg}{sep}options=-csearch_path%3D{schema}");
    // Creates the schema and its tables before the first process runs.
    drop(pg_store(&pg, &schema).await);
    let (pg2, schema2) = (pg.clone(), schema.clone());
    crash_test(&url, &db, async move |_n: &Names| {
        pg_store(&pg2, &schema2).await.0
    })
    .await;
    pg_drop_schema(&pg, &schema).await;
}

/// (d) Two consumers with separate connections and stores on one PostgreSQL
/// database, consuming the same repeated events concurrently: with separate
/// durables every message is delivered to both; with one shared durable the
/// messages are split between them. No event is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_separate_durables_on_one_postgres_apply_each_event_once() {
    two_consumers_on_one_postgres(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_shared_durable_on_one_postgres_apply_each_event_once() {
    two_consumers_on_one_postgres(true).await;
}

async fn two_consumers_on_one_postgres(shared_durable: bool) {
    let Some(url) = service_url("TICKGATE_TEST_NATS_URL") else {
        return;
    };
    let Some(pg) = service_url("TICKGATE_TEST_PG_URL") else {
        return;
    };
    let js = connect(&url).await;
    let n = Names::new("TWO");
    create_streams(&js, &n).await;
    let schema = unique("two").to_lowercase();
    let (store_a, fm_a) = pg_store(&pg, &schema).await;
    let (store_b, fm_b) = pg_store(&pg, &schema).await;

    let mut rng = Rng(0x5EED_0004);
    let fills = make_fills(&mut rng, "d", 2_000);
    let busted: Vec<usize> = (0..50).map(|i| i * 37).collect();
    let mut distinct: Vec<Vec<u8>> = fills.iter().map(|f| f.json().into_bytes()).collect();
    for (k, &i) in busted.iter().enumerate() {
        distinct.push(fills[i].bust_json(&format!("dB{k}")).into_bytes());
    }
    let mut messages = Vec::new();
    for p in &distinct {
        for _ in 0..1 + rng.below(3) {
            messages.push(p.clone());
        }
    }
    rng.shuffle(&mut messages);
    publish_all(&js, &n.subject, &messages).await;

    let mut sa = n.settings(&url, 1000, 100);
    let mut sb = n.settings(&url, 1000, 100);
    if !shared_durable {
        sa.durable = format!("{}_A", n.stream);
        sb.durable = format!("{}_B", n.stream);
    }
    let nm_a = NatsMetrics::unregistered(fm_a.clone());
    let nm_b = NatsMetrics::unregistered(fm_b.clone());
    let ra = start_consumer(sa.clone(), store_a.clone(), nm_a);
    let rb = start_consumer(sb.clone(), store_b.clone(), nm_b);
    let t0 = Instant::now();
    while backlog(&js, &n.stream, &sa.durable).await.is_none()
        || backlog(&js, &n.stream, &sb.durable).await.is_none()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "durables not created"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_drained(&js, &n.stream, &sa.durable, Duration::from_secs(120)).await;
    wait_drained(&js, &n.stream, &sb.durable, Duration::from_secs(120)).await;
    ra.stop().await;
    rb.stop().await;

    let live = fills
        .iter()
        .enumerate()
        .filter(|(i, _)| !busted.contains(i))
        .map(|(_, f)| f);
    assert_eq!(actual_qty(&store_a).await, expected_qty(live));
    assert_eq!(
        store_a
            .count_rows(SweepTable::ProcessedEvents)
            .await
            .unwrap(),
        distinct.len() as u64
    );
    let kinds: &[&[&str]] = &[&["FILL", "nats"], &["BUST", "nats"]];
    let applied = |fm: &FillsMetrics| {
        counter_sum(&fm.applied, kinds) + fm.held.with_label_values(&["nats"]).get()
    };
    let seen = |fm: &FillsMetrics| {
        applied(fm)
            + counter_sum(&fm.duplicate_events, kinds)
            + counter_sum(&fm.duplicate_by_deal, kinds)
    };
    assert_eq!(
        applied(&fm_a) + applied(&fm_b),
        distinct.len() as u64,
        "each event applied once in total"
    );
    let total = messages.len() as u64;
    if shared_durable {
        assert!(seen(&fm_a) + seen(&fm_b) >= total);
    } else {
        // Each durable delivered every message to its consumer.
        assert!(seen(&fm_a) >= total && seen(&fm_b) >= total);
    }
    for s in [&sa, &sb] {
        assert_eq!(
            store_a
                .consumer_position(&n.stream, &s.durable)
                .await
                .unwrap(),
            Some(stream_last_seq(&js, &n.stream).await)
        );
    }
    delete_streams(&js, &n).await;
    pg_drop_schema(&pg, &schema).await;
}
