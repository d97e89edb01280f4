//! The Kafka source of the reliable lane (fills.md, "Sources").
//!
//! Kafka's exactly-once ends at Kafka. This consumer writes to the fills
//! store, so each partition's offset lives in the store's consumer
//! positions (`stream = "kafka:<topic>:<partition>"`, `consumer` from the
//! config, `last_seq` = offset of the last record applied), written in the
//! same transaction as the batch's effects (F1), and fetching resumes from
//! it. Kafka's committed offsets are not written at all (no consumer
//! group): the stored row is the only truth, and lag is exported as a
//! metric instead.
//!
//! The offset moves by compare-and-set, the first statement of the batch's
//! transaction: from the offset the batch was read after to the batch's
//! last offset, and only forwards. Two instances reading one partition can
//! therefore never both apply a batch: the second waits on the row lock,
//! finds the offset moved, rolls back (nothing applied), and resumes after
//! the stored offset.
//!
//! A record that cannot be decoded or is not a valid event is produced to
//! the dead-letter topic (original key and value, reason and origin in
//! headers) before the transaction; an event the store rejects is produced
//! there inside the transaction, before COMMIT. A record thus never falls
//! behind the stored offset without being either applied or in the
//! dead-letter topic (a crash may produce a dead letter twice: the headers
//! name topic, partition and offset). Then the offset moves on: a poison
//! record never blocks its partition. Store failures are retried with a
//! growing pause, never skipped.
//!
//! Client: `rskafka` (pure Rust, partition-level: it fetches from an
//! offset we give it, which is exactly what an offset kept outside Kafka
//! needs; no librdkafka C build, no consumer-group machinery to switch off).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use rskafka::record::{Record, RecordAndOffset};
use serde::Deserialize as _;

use super::config::{FillsConfig, KafkaConfig};
use super::metrics::FillsMetrics;
use super::model::{self, Parsed};
use super::source::{self, RestartPause, Undecoded};
use super::store::{BeforeCommit, Store};

/// Source label of this lane in metrics and logs.
pub const SOURCE: &str = "kafka";

/// Dead-letter headers (the value is the original record's, byte for byte).
pub const H_REASON: &str = "tickgate-reason";
pub const H_TOPIC: &str = "tickgate-original-topic";
pub const H_PARTITION: &str = "tickgate-original-partition";
pub const H_OFFSET: &str = "tickgate-original-offset";
pub const H_CONSUMER: &str = "tickgate-consumer";

/// Upper bound of one fetch's bytes.
const FETCH_MAX_BYTES: i32 = 4 << 20;

/// Where a partition with no stored offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Earliest,
    Latest,
}

/// SASL mechanism and credentials, passed to the client as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sasl {
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

/// Everything the consumer needs; from `[fills.kafka]` or the CLI.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    pub bootstrap: Vec<String>,
    pub topic: String,
    /// Empty = every partition of the topic.
    pub partitions: Vec<i32>,
    pub start: Start,
    /// Records per transaction.
    pub batch: usize,
    pub dlq_topic: String,
    pub consumer: String,
    pub max_wait: Duration,
    pub sasl: Option<Sasl>,
}

impl KafkaSettings {
    pub fn from_kafka_config(k: &KafkaConfig) -> anyhow::Result<KafkaSettings> {
        let sasl = match (&k.sasl_mechanism, &k.sasl_username, &k.sasl_password) {
            (None, None, None) => None,
            (Some(m), Some(u), Some(p)) => Some(Sasl {
                mechanism: m.clone(),
                username: u.clone(),
                password: p.clone(),
            }),
            _ => anyhow::bail!(
                "fills.kafka: sasl_mechanism, sasl_username and sasl_password go together"
            ),
        };
        Ok(KafkaSettings {
            bootstrap: k.bootstrap_servers.clone(),
            topic: k.topic.clone(),
            partitions: k.partitions.clone(),
            start: match k.start.as_str() {
                "latest" => Start::Latest,
                _ => Start::Earliest,
            },
            batch: k.batch.clamp(1, 10_000),
            dlq_topic: k.dead_letter_topic.clone(),
            consumer: k.consumer.clone(),
            max_wait: k.max_wait,
            sasl,
        })
    }

    /// None when the `[fills]` section has no `[fills.kafka]`.
    pub fn from_fills_config(cfg: &FillsConfig) -> anyhow::Result<Option<KafkaSettings>> {
        cfg.kafka
            .as_ref()
            .map(KafkaSettings::from_kafka_config)
            .transpose()
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.bootstrap.is_empty(),
            "fills.kafka: no bootstrap server"
        );
        anyhow::ensure!(!self.topic.is_empty(), "fills.kafka: empty topic");
        anyhow::ensure!(
            !self.dlq_topic.is_empty() && self.dlq_topic != self.topic,
            "fills.kafka: the dead-letter topic must be set and differ from the topic"
        );
        anyhow::ensure!(
            !self.consumer.is_empty(),
            "fills.kafka: empty consumer name"
        );
        anyhow::ensure!(self.batch >= 1, "fills.kafka: batch must be >= 1");
        anyhow::ensure!(
            self.partitions.iter().all(|p| *p >= 0),
            "fills.kafka: partitions must be >= 0"
        );
        if let Some(s) = &self.sasl {
            sasl_config(s)?;
        }
        Ok(())
    }
}

fn sasl_config(s: &Sasl) -> anyhow::Result<SaslConfig> {
    let c = Credentials::new(s.username.clone(), s.password.clone());
    Ok(match s.mechanism.to_ascii_uppercase().as_str() {
        "PLAIN" => SaslConfig::Plain(c),
        "SCRAM-SHA-256" => SaslConfig::ScramSha256(c),
        "SCRAM-SHA-512" => SaslConfig::ScramSha512(c),
        other => anyhow::bail!(
            "fills.kafka: SASL mechanism {other:?} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
        ),
    })
}

/// The consumer-positions row of a partition.
pub fn stream_name(topic: &str, partition: i32) -> String {
    format!("kafka:{topic}:{partition}")
}

/// Counters of this source besides the shared [`FillsMetrics`].
#[derive(Clone)]
pub struct KafkaMetrics {
    pub fills: FillsMetrics,
    pub dead_letter_causes: IntCounterVec,
    /// Batches not applied because another consumer had moved the offset.
    pub offset_conflicts: IntCounter,
    /// Failed store transactions (retried).
    pub store_failures: IntCounter,
    pub restarts: IntCounter,
    /// High watermark minus the next offset to apply, by partition.
    pub lag: IntGaugeVec,
}

impl KafkaMetrics {
    pub fn new(reg: &Registry, fills: FillsMetrics) -> prometheus::Result<KafkaMetrics> {
        let c = |name: &str, help: &str| source::counter(reg, name, help);
        let dead_letter_causes = source::dead_letter_counter(
            reg,
            "fills_kafka_dead_letters_total",
            "Kafka records dead-lettered, by cause",
        )?;
        let lag = IntGaugeVec::new(
            Opts::new(
                "fills_kafka_lag_records",
                "Records between the stored offset and the high watermark",
            ),
            &["topic", "partition"],
        )?;
        reg.register(Box::new(lag.clone()))?;
        Ok(KafkaMetrics {
            fills,
            dead_letter_causes,
            offset_conflicts: c(
                "fills_kafka_offset_conflicts_total",
                "Kafka batches rolled back because another consumer moved the stored offset",
            )?,
            store_failures: c(
                "fills_kafka_store_failures_total",
                "Kafka batch transactions that failed (retried)",
            )?,
            restarts: c(
                "fills_kafka_session_restarts_total",
                "Kafka consumer sessions restarted after an error",
            )?,
            lag,
        })
    }

    pub fn unregistered(fills: FillsMetrics) -> KafkaMetrics {
        KafkaMetrics::new(&Registry::new(), fills).expect("fresh registry")
    }
}

/// Why a record goes to the dead-letter topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadCause {
    /// No value, not UTF-8, or not JSON.
    Undecodable,
    /// JSON, but not a valid event.
    Invalid,
    /// Valid, but the store rejected it.
    Rejected,
}

impl DeadCause {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadCause::Undecodable => "undecodable",
            DeadCause::Invalid => "invalid",
            DeadCause::Rejected => "rejected",
        }
    }
}

/// A record's event, or why it is a dead letter (pure).
pub fn classify(value: Option<&[u8]>) -> Result<Parsed, (DeadCause, String)> {
    let Some(v) = value else {
        return Err((DeadCause::Undecodable, "record has no value".into()));
    };
    match source::decode_event(v, "value") {
        Ok(ev) => Ok(Ok(ev)),
        Err(Undecoded::Undecodable(reason)) => Err((DeadCause::Undecodable, reason)),
        Err(Undecoded::Invalid(reason)) => Err((DeadCause::Invalid, reason)),
    }
}

/// A header value: one line of printable text, bounded.
fn header_text(s: &str) -> Vec<u8> {
    source::header_text(s).into_bytes()
}

/// The dead letter of a record (pure): same key and value, the reason and
/// the origin in headers.
pub fn dead_letter_record(
    original: &Record,
    topic: &str,
    partition: i32,
    offset: i64,
    consumer: &str,
    cause: DeadCause,
    reason: &str,
) -> Record {
    let mut headers = BTreeMap::new();
    headers.insert(
        H_REASON.to_owned(),
        header_text(&format!("{}: {reason}", cause.as_str())),
    );
    headers.insert(H_TOPIC.to_owned(), header_text(topic));
    headers.insert(H_PARTITION.to_owned(), partition.to_string().into_bytes());
    headers.insert(H_OFFSET.to_owned(), offset.to_string().into_bytes());
    headers.insert(H_CONSUMER.to_owned(), header_text(consumer));
    Record {
        key: original.key.clone(),
        value: original.value.clone(),
        headers,
        timestamp: original.timestamp,
    }
}

/// Connect (bootstrap, SASL as configured).
pub async fn connect(s: &KafkaSettings) -> anyhow::Result<Client> {
    let mut b = ClientBuilder::new(s.bootstrap.clone())
        .client_id("tickgate-fills")
        .backoff_config(rskafka::BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
            deadline: Some(Duration::from_secs(10)),
        });
    if let Some(sasl) = &s.sasl {
        b = b.sasl_config(sasl_config(sasl)?);
    }
    b.build()
        .await
        .with_context(|| format!("connecting to Kafka at {}", s.bootstrap.join(",")))
}

/// Run the consumer until `shutdown` completes. Connection errors restart
/// the session with a growing pause (0.5 s to 30 s). A batch in progress
/// when `shutdown` completes is finished (committed) first.
pub async fn run_consumer<F>(
    settings: KafkaSettings,
    store: Store,
    metrics: KafkaMetrics,
    shutdown: F,
) -> anyhow::Result<()>
where
    F: Future<Output = ()> + Send,
{
    settings.validate()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let settings = Arc::new(settings);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut pauses = RestartPause::new();
    loop {
        let started = Instant::now();
        let run = session(
            settings.clone(),
            store.clone(),
            metrics.clone(),
            stop_rx.clone(),
        );
        let mut run = std::pin::pin!(run);
        let r = tokio::select! {
            r = run.as_mut() => r,
            _ = shutdown.as_mut() => {
                let _ = stop_tx.send(true);
                // Let the partitions finish their batch in progress.
                return run.await;
            }
        };
        match r {
            Ok(()) => return Ok(()),
            Err(e) => {
                let pause = pauses.after_failure(started, Instant::now());
                metrics.restarts.inc();
                tracing::warn!(error = %crate::util::errors::chain(&e), pause_ms = pause.as_millis() as u64,
                    "fills kafka consumer: session failed, restarting");
                tokio::select! {
                    _ = shutdown.as_mut() => return Ok(()),
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

async fn session(
    s: Arc<KafkaSettings>,
    store: Store,
    metrics: KafkaMetrics,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let client = connect(&s).await?;
    let topics = client.list_topics().await.context("listing Kafka topics")?;
    let Some(topic) = topics.iter().find(|t| t.name == s.topic) else {
        anyhow::bail!("topic {} does not exist", s.topic);
    };
    if !topics.iter().any(|t| t.name == s.dlq_topic) {
        client
            .controller_client()?
            .create_topic(s.dlq_topic.clone(), 1, 1, 5_000)
            .await
            .with_context(|| format!("creating the dead-letter topic {}", s.dlq_topic))?;
        tracing::info!(topic = %s.dlq_topic, "fills kafka: created the dead-letter topic");
    }
    let partitions: Vec<i32> = if s.partitions.is_empty() {
        topic.partitions.iter().copied().collect()
    } else {
        for p in &s.partitions {
            anyhow::ensure!(
                topic.partitions.contains(p),
                "topic {} has no partition {p}",
                s.topic
            );
        }
        s.partitions.clone()
    };
    let dlq = Arc::new(
        client
            .partition_client(s.dlq_topic.clone(), 0, UnknownTopicHandling::Retry)
            .await
            .with_context(|| format!("dead-letter topic {} partition 0", s.dlq_topic))?,
    );
    tracing::info!(topic = %s.topic, ?partitions, consumer = %s.consumer, "fills kafka consumer: consuming");
    let mut tasks = tokio::task::JoinSet::new();
    for p in partitions {
        let pc = client
            .partition_client(s.topic.clone(), p, UnknownTopicHandling::Retry)
            .await
            .with_context(|| format!("topic {} partition {p}", s.topic))?;
        tasks.spawn(partition_loop(
            s.clone(),
            Arc::new(pc),
            dlq.clone(),
            store.clone(),
            metrics.clone(),
            stop.clone(),
        ));
    }
    // The first partition to fail ends the session (the others are
    // aborted between their batches: a batch runs in the store's own task,
    // so aborting never cuts a transaction in half).
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => anyhow::bail!("partition task: {e}"),
        }
    }
    Ok(())
}

/// Where a partition with no stored offset starts (`start`): its earliest
/// record, or the offset the next record will get.
pub async fn start_offset(
    pc: &PartitionClient,
    start: Start,
) -> Result<i64, rskafka::client::error::Error> {
    pc.get_offset(match start {
        Start::Earliest => OffsetAt::Earliest,
        Start::Latest => OffsetAt::Latest,
    })
    .await
}

/// The stored offset of a partition (last record applied).
pub async fn stored_offset(
    store: &Store,
    topic: &str,
    partition: i32,
    consumer: &str,
) -> anyhow::Result<Option<i64>> {
    Ok(store
        .consumer_position(&stream_name(topic, partition), consumer)
        .await?
        .map(|v| v as i64))
}

async fn partition_loop(
    s: Arc<KafkaSettings>,
    pc: Arc<PartitionClient>,
    dlq: Arc<PartitionClient>,
    store: Store,
    metrics: KafkaMetrics,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let partition = pc.partition();
    let stream = stream_name(&s.topic, partition);
    let lag = metrics
        .lag
        .with_label_values(&[s.topic.as_str(), partition.to_string().as_str()]);
    let mut stored = stored_offset(&store, &s.topic, partition, &s.consumer).await?;
    // Where to read next when nothing is stored yet.
    let mut fresh_start: Option<i64> = None;
    let mut store_pause = Duration::ZERO;
    let max_wait_ms = i32::try_from(s.max_wait.as_millis()).unwrap_or(i32::MAX);
    // Records fetched and not yet applied: a fetch returns up to
    // FETCH_MAX_BYTES, applied `batch` at a time without fetching the rest
    // again (brokers whose fetch cost grows with what is left, tansu's
    // SQLite engine for one, made a small batch size quadratic).
    let mut pending: VecDeque<RecordAndOffset> = VecDeque::new();
    let mut pending_high_watermark = 0;
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let next = match stored {
            Some(o) => o + 1,
            None => match fresh_start {
                Some(o) => o,
                None => {
                    let o = start_offset(&pc, s.start)
                        .await
                        .context("listing the start offset")?;
                    fresh_start = Some(o);
                    o
                }
            },
        };
        // What the stored offset has passed (a conflict) is not applied.
        while pending.front().is_some_and(|r| r.offset < next) {
            pending.pop_front();
        }
        if pending.is_empty() {
            match fetch_after(&s, &pc, partition, next, max_wait_ms, &mut stop).await? {
                Fetched::Stop => return Ok(()),
                Fetched::Rewind(earliest) => {
                    if stored.is_none() {
                        fresh_start = Some(earliest);
                    } else {
                        stored = Some(earliest - 1);
                    }
                    continue;
                }
                Fetched::Records(records, high_watermark) => {
                    lag.set(high_watermark - next);
                    pending = records.into();
                    pending_high_watermark = high_watermark;
                }
            }
            if pending.is_empty() {
                continue;
            }
        }
        let batch: Vec<RecordAndOffset> = pending.drain(..s.batch.min(pending.len())).collect();
        // Not selected against `stop`: a started batch is finished.
        match process_batch(
            &s, partition, &stream, &dlq, &store, &metrics, stored, batch,
        )
        .await
        {
            Ok(BatchResult::Committed(last)) => {
                stored = Some(last);
                lag.set(pending_high_watermark - last - 1);
                store_pause = Duration::ZERO;
            }
            Ok(BatchResult::Conflict(now)) => {
                metrics.offset_conflicts.inc();
                tracing::info!(topic = %s.topic, partition, expected = ?stored, stored = ?now,
                    "fills kafka: another consumer applied these records; resuming after its offset");
                stored = now;
            }
            Err(e) => {
                pending.clear();
                metrics.store_failures.inc();
                store_pause =
                    (store_pause * 2).clamp(Duration::from_millis(200), Duration::from_secs(10));
                tracing::warn!(topic = %s.topic, partition, error = %crate::util::errors::chain(&e),
                    pause_ms = store_pause.as_millis() as u64,
                    "fills kafka: batch not committed; it will be read again");
                // The stored offset may have moved meanwhile (another
                // instance); read it again before going on.
                tokio::select! {
                    _ = stop.changed() => return Ok(()),
                    _ = tokio::time::sleep(store_pause) => {}
                }
                if let Ok(o) = stored_offset(&store, &s.topic, partition, &s.consumer).await {
                    stored = o;
                }
            }
        }
    }
}

/// What one fetch gave.
enum Fetched {
    Stop,
    /// Retention deleted records before they were applied: resume here.
    Rewind(i64),
    /// Records from `next` on, in offset order, and the high watermark.
    Records(Vec<RecordAndOffset>, i64),
}

async fn fetch_after(
    s: &KafkaSettings,
    pc: &PartitionClient,
    partition: i32,
    next: i64,
    max_wait_ms: i32,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Fetched> {
    let fetched = tokio::select! {
        _ = stop.changed() => return Ok(Fetched::Stop),
        r = pc.fetch_records(next, 1..FETCH_MAX_BYTES, max_wait_ms) => r,
    };
    let (records, high_watermark) = match fetched {
        Ok(r) => r,
        Err(rskafka::client::error::Error::ServerError {
            protocol_error: rskafka::client::error::ProtocolError::OffsetOutOfRange,
            ..
        }) => {
            let earliest = pc.get_offset(OffsetAt::Earliest).await?;
            if next < earliest {
                // Retention deleted records before they were applied:
                // they are gone from Kafka; say so loudly and go on.
                tracing::error!(topic = %s.topic, partition, next, earliest,
                    "fills kafka: records deleted by retention before they were applied; resuming at the earliest offset");
                return Ok(Fetched::Rewind(earliest));
            }
            anyhow::bail!(
                "offset {next} of {} partition {partition} is beyond the log (high watermark moved back?)",
                s.topic
            );
        }
        Err(e) => return Err(e).context(format!("fetching {} partition {partition}", s.topic)),
    };
    let mut records: Vec<RecordAndOffset> =
        records.into_iter().filter(|r| r.offset >= next).collect();
    records.sort_by_key(|r| r.offset);
    Ok(Fetched::Records(records, high_watermark))
}

enum BatchResult {
    /// Applied; the stored offset is now this.
    Committed(i64),
    /// Another consumer had moved the offset to this; nothing applied.
    Conflict(Option<i64>),
}

#[allow(clippy::too_many_arguments)]
async fn process_batch(
    s: &KafkaSettings,
    partition: i32,
    stream: &str,
    dlq: &Arc<PartitionClient>,
    store: &Store,
    metrics: &KafkaMetrics,
    stored: Option<i64>,
    records: Vec<RecordAndOffset>,
) -> anyhow::Result<BatchResult> {
    let last = records.last().map(|r| r.offset).context("empty batch")?;
    let mut events = Vec::with_capacity(records.len());
    let mut event_of = Vec::with_capacity(records.len());
    let mut dead = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match classify(r.record.value.as_deref()) {
            Ok(p) => {
                events.push(p);
                event_of.push(i);
            }
            Err((cause, reason)) => dead.push((i, cause, reason)),
        }
    }
    // Undecodable and invalid records: into the dead-letter topic before
    // the offset can move past them.
    if !dead.is_empty() {
        let letters: Vec<Record> = dead
            .iter()
            .map(|(i, cause, reason)| {
                let r = &records[*i];
                dead_letter_record(
                    &r.record,
                    &s.topic,
                    partition,
                    r.offset,
                    &s.consumer,
                    *cause,
                    reason,
                )
            })
            .collect();
        dlq.produce(letters, Compression::NoCompression)
            .await
            .context("producing dead letters")?;
        for (i, cause, reason) in &dead {
            count_dead(metrics, *cause);
            tracing::warn!(topic = %s.topic, partition, offset = records[*i].offset,
                cause = cause.as_str(), %reason, "fills kafka: record dead-lettered");
        }
    }
    // Events the store rejects: into the dead-letter topic inside the
    // transaction, before COMMIT (a failed produce rolls it back).
    let originals: Arc<Vec<(i64, Record)>> = Arc::new(
        event_of
            .iter()
            .map(|&i| (records[i].offset, records[i].record.clone()))
            .collect(),
    );
    let hook: BeforeCommit = {
        let (dlq, originals) = (dlq.clone(), originals.clone());
        let (topic, consumer) = (s.topic.clone(), s.consumer.clone());
        Arc::new(move |outs: Vec<model::EventOutcome>| {
            let (dlq, originals, topic, consumer) = (
                dlq.clone(),
                originals.clone(),
                topic.clone(),
                consumer.clone(),
            );
            Box::pin(async move {
                let letters: Vec<Record> = outs
                    .iter()
                    .filter_map(|o| match o.outcome.rejection_reason() {
                        Some(reason) => originals.get(o.index).map(|(off, rec)| {
                            dead_letter_record(
                                rec,
                                &topic,
                                partition,
                                *off,
                                &consumer,
                                DeadCause::Rejected,
                                reason,
                            )
                        }),
                        _ => None,
                    })
                    .collect();
                if !letters.is_empty() {
                    dlq.produce(letters, Compression::NoCompression)
                        .await
                        .context("producing dead letters of rejected events")?;
                }
                Ok(())
            })
        })
    };
    let r = store
        .apply_partition_batch(
            SOURCE,
            stream,
            &s.consumer,
            stored,
            last,
            events,
            Some(hook),
        )
        .await?;
    match r {
        Ok(outs) => {
            for o in &outs {
                if let Some(reason) = o.outcome.rejection_reason() {
                    count_dead(metrics, DeadCause::Rejected);
                    tracing::warn!(topic = %s.topic, partition, offset = originals[o.index].0,
                        %reason, "fills kafka: rejected event dead-lettered");
                }
            }
            Ok(BatchResult::Committed(last))
        }
        Err(conflict) => Ok(BatchResult::Conflict(conflict.stored)),
    }
}

fn count_dead(metrics: &KafkaMetrics, cause: DeadCause) {
    metrics
        .fills
        .dead_lettered
        .with_label_values(&[SOURCE])
        .inc();
    metrics
        .dead_letter_causes
        .with_label_values(&[cause.as_str()])
        .inc();
}

/// `tickgate fills consume-kafka`: run the Kafka consumer alone. Settings
/// come from `--config` (`[fills]` and `[fills.kafka]`); each flag
/// overrides its config value.
#[derive(Debug, clap::Args)]
pub struct ConsumeKafkaArgs {
    /// Config file with a [fills] section (and [fills.kafka]).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Store: sqlite:PATH or postgres://...
    #[arg(long)]
    pub db: Option<String>,
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long)]
    pub bootstrap: Option<String>,
    #[arg(long)]
    pub topic: Option<String>,
    /// Partitions, comma-separated (default: all).
    #[arg(long)]
    pub partitions: Option<String>,
    /// earliest or latest.
    #[arg(long)]
    pub start: Option<String>,
    /// Records per transaction.
    #[arg(long)]
    pub batch: Option<usize>,
    #[arg(long)]
    pub dlq_topic: Option<String>,
    /// Consumer name of the stored offsets.
    #[arg(long)]
    pub consumer: Option<String>,
    /// e.g. 500ms.
    #[arg(long, value_parser = super::config::parse_duration)]
    pub max_wait: Option<Duration>,
}

impl ConsumeKafkaArgs {
    pub fn resolve(&self) -> anyhow::Result<(FillsConfig, KafkaSettings)> {
        let mut fills = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let mut doc: toml::Table =
                    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
                let table = doc
                    .remove("fills")
                    .with_context(|| format!("{} has no [fills] section", path.display()))?;
                FillsConfig::deserialize(table)
                    .with_context(|| format!("{}: [fills]", path.display()))?
            }
            None => FillsConfig::default(),
        };
        if let Some(db) = &self.db {
            fills.db = db.clone();
        }
        let mut k = fills.kafka.clone().unwrap_or_default();
        if let Some(b) = &self.bootstrap {
            k.bootstrap_servers = b.split(',').map(|x| x.trim().to_owned()).collect();
        }
        if let Some(t) = &self.topic {
            k.topic.clone_from(t);
        }
        if let Some(p) = &self.partitions {
            k.partitions = p
                .split(',')
                .map(|x| x.trim().parse::<i32>())
                .collect::<Result<_, _>>()
                .context("--partitions: comma-separated numbers")?;
        }
        if let Some(v) = &self.start {
            k.start.clone_from(v);
        }
        if let Some(b) = self.batch {
            k.batch = b;
        }
        if let Some(v) = &self.dlq_topic {
            k.dead_letter_topic.clone_from(v);
        }
        if let Some(v) = &self.consumer {
            k.consumer.clone_from(v);
        }
        if let Some(w) = self.max_wait {
            k.max_wait = w;
        }
        fills.kafka = Some(k.clone());
        fills.validate()?;
        let settings = KafkaSettings::from_kafka_config(&k)?;
        settings.validate()?;
        Ok((fills, settings))
    }
}

pub fn consume_kafka_main(args: ConsumeKafkaArgs) -> anyhow::Result<i32> {
    let (fills, settings) = args.resolve()?;
    source::run_consumer_command(&fills, |store, fills_metrics| {
        let metrics = KafkaMetrics::unregistered(fills_metrics);
        run_consumer(settings, store, metrics, source::shutdown_signal())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_records() {
        assert_eq!(classify(None).unwrap_err().0, DeadCause::Undecodable);
        assert_eq!(
            classify(Some(&[0xff, 0xfe])).unwrap_err().0,
            DeadCause::Undecodable
        );
        assert_eq!(
            classify(Some(b"{nope")).unwrap_err().0,
            DeadCause::Undecodable
        );
        let (cause, reason) = classify(Some(
            br#"{"kind":"FILL","event_id":"E","deal_id":"D","account":"A","symbol":"S","side":"BUY","qty":"-1","price":"1","exec_time":"2026-11-30T08:00:00Z"}"#,
        ))
        .unwrap_err();
        assert_eq!(cause, DeadCause::Invalid);
        assert!(reason.contains("qty"));
        assert!(classify(Some(
            br#"{"kind":"BUST","event_id":"B","deal_id":"D","account":"A","exec_time":"2026-11-30T08:00:00Z"}"#
        ))
        .unwrap()
        .is_ok());
    }

    #[test]
    fn dead_letters_keep_the_record_and_say_why() {
        let rec = Record {
            key: Some(b"k".to_vec()),
            value: Some(b"{nope".to_vec()),
            headers: BTreeMap::new(),
            timestamp: chrono_epoch(),
        };
        let d = dead_letter_record(
            &rec,
            "fills",
            2,
            41,
            "tg",
            DeadCause::Undecodable,
            "bad\nline",
        );
        assert_eq!(d.value, rec.value);
        assert_eq!(d.key, rec.key);
        assert_eq!(d.headers[H_REASON], b"undecodable: bad line".to_vec());
        assert_eq!(d.headers[H_PARTITION], b"2".to_vec());
        assert_eq!(d.headers[H_OFFSET], b"41".to_vec());
        assert_eq!(d.headers[H_TOPIC], b"fills".to_vec());
    }

    fn chrono_epoch() -> rskafka::chrono::DateTime<rskafka::chrono::Utc> {
        rskafka::chrono::DateTime::from_timestamp(0, 0).unwrap()
    }

    #[test]
    fn settings_from_config() {
        let k = KafkaConfig {
            sasl_mechanism: Some("SCRAM-SHA-512".into()),
            sasl_username: Some("u".into()),
            sasl_password: Some("p".into()),
            ..KafkaConfig::default()
        };
        let s = KafkaSettings::from_kafka_config(&k).unwrap();
        s.validate().unwrap();
        assert_eq!(s.start, Start::Earliest);
        let bad = KafkaConfig {
            sasl_mechanism: Some("GSSAPI".into()),
            sasl_username: Some("u".into()),
            sasl_password: Some("p".into()),
            ..KafkaConfig::default()
        };
        assert!(KafkaSettings::from_kafka_config(&bad)
            .unwrap()
            .validate()
            .is_err());
        let half = KafkaConfig {
            sasl_username: Some("u".into()),
            ..KafkaConfig::default()
        };
        assert!(KafkaSettings::from_kafka_config(&half).is_err());
        assert_eq!(stream_name("fills", 3), "kafka:fills:3");
    }
}
