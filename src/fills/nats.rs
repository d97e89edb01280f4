//! The NATS JetStream source of the reliable lane (fills.md, "Sources").
//!
//! A durable pull consumer with explicit acks. One fetch is one store
//! transaction: the events' dedup and effects (F1) and the stream sequence
//! (the consumer position) commit together; only then are the messages
//! acked. A crash anywhere before the ack means redelivery, which the
//! processed-events key turns into a counted duplicate (F1, F4): nothing is
//! lost and nothing is applied twice.
//!
//! A message that cannot be decoded, fails validation, is rejected by the
//! store, or has already failed `max_deliver` deliveries is published to the
//! dead-letter subject (raw payload, reason and origin in headers), and only
//! after JetStream has stored it is the original acked: nothing is lost and
//! nothing blocks the stream. A message too large to be copied (its payload
//! plus the dead-letter headers exceed the server's `max_payload`) is
//! dead-lettered without its payload: the headers say where it is (original
//! stream and sequence), its size and the reason.
//!
//! Why tickgate enforces `max_deliver` itself: a JetStream consumer with
//! `max_deliver = N` simply stops redelivering after N attempts and leaves
//! the message unacknowledged; nothing would move it to the dead-letter
//! subject. So the consumer is created with unlimited deliveries, and a
//! message arriving for the (N+1)-th time is dead-lettered without being
//! tried again (this also catches a message that crashed the process N times).

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull, AckKind};
use async_nats::HeaderMap;
use futures::StreamExt;
use prometheus::{IntCounter, IntCounterVec, Registry};

use super::config::{FillsConfig, NatsConfig};
use super::metrics::FillsMetrics;
use super::model::Event;
use super::source::{self, RestartPause, Undecoded};
use super::store::Store;

/// Source label of this lane in metrics and logs.
pub const SOURCE: &str = "nats";

/// Dead-letter headers (the body is the original payload, byte for byte).
pub const H_REASON: &str = "Tickgate-Reason";
pub const H_SUBJECT: &str = "Tickgate-Original-Subject";
pub const H_STREAM: &str = "Tickgate-Original-Stream";
pub const H_STREAM_SEQ: &str = "Tickgate-Stream-Seq";
pub const H_DELIVERIES: &str = "Tickgate-Deliveries";
pub const H_CONSUMER: &str = "Tickgate-Consumer";
/// Set (to why) when the dead letter's body is empty because the original
/// payload plus the headers would exceed the server's `max_payload`; the
/// original stays at `Tickgate-Original-Stream` / `Tickgate-Stream-Seq`.
pub const H_PAYLOAD_OMITTED: &str = "Tickgate-Payload-Omitted";
/// Size in bytes of the original payload (set with `Tickgate-Payload-Omitted`).
pub const H_PAYLOAD_SIZE: &str = "Tickgate-Payload-Size";

/// Everything the consumer needs; built from `[fills.nats]` or the CLI.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    pub url: String,
    /// JetStream stream; created (file storage, `subject`) when absent.
    pub stream: String,
    /// Subject filter of the consumer; must be covered by the stream.
    pub subject: String,
    /// Durable consumer name; created when absent.
    pub durable: String,
    pub dlq_subject: String,
    /// Stream that stores dead letters, created on `dlq_subject` when no
    /// stream captures that subject yet.
    pub dlq_stream: String,
    /// Deliveries a message may fail before it is dead-lettered.
    pub max_deliver: i64,
    /// Time the server waits for an ack before redelivering.
    pub ack_wait: Duration,
    /// Messages per fetch, i.e. per store transaction.
    pub batch: usize,
}

impl NatsSettings {
    pub fn from_nats_config(n: &NatsConfig, max_batch: usize) -> NatsSettings {
        NatsSettings {
            url: n.url.clone(),
            stream: n.stream.clone(),
            subject: n.subject.clone(),
            durable: n.durable.clone(),
            dlq_subject: n.dlq_subject.clone(),
            dlq_stream: format!("{}_DLQ", n.stream),
            max_deliver: n.max_deliver,
            ack_wait: n.ack_wait,
            batch: max_batch.clamp(1, 10_000),
        }
    }

    /// The consumer settings of a `[fills]` section; None when the section
    /// has no `[fills.nats]` (the NATS source is off).
    pub fn from_fills_config(cfg: &FillsConfig) -> Option<NatsSettings> {
        cfg.nats
            .as_ref()
            .map(|n| NatsSettings::from_nats_config(n, cfg.max_batch))
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        for (what, v) in [
            ("stream", &self.stream),
            ("durable", &self.durable),
            ("dead-letter stream", &self.dlq_stream),
        ] {
            anyhow::ensure!(
                !v.is_empty() && !v.contains(['.', '*', '>', ' ', '\t']),
                "fills.nats: {what} name {v:?} must be non-empty without '.', '*', '>' or spaces"
            );
        }
        anyhow::ensure!(!self.subject.is_empty(), "fills.nats: empty subject");
        anyhow::ensure!(
            !self.dlq_subject.is_empty() && !self.dlq_subject.contains(['*', '>']),
            "fills.nats: dead-letter subject {:?} must be a plain subject",
            self.dlq_subject
        );
        anyhow::ensure!(
            !subject_matches(&self.subject, &self.dlq_subject),
            "fills.nats: dead-letter subject {:?} matches the consumed subject {:?}; \
             dead letters would be consumed again",
            self.dlq_subject,
            self.subject
        );
        anyhow::ensure!(
            self.max_deliver >= 1,
            "fills.nats: max_deliver must be >= 1"
        );
        anyhow::ensure!(self.batch >= 1, "fills.nats: batch must be >= 1");
        anyhow::ensure!(
            self.ack_wait >= Duration::from_millis(100),
            "fills.nats: ack_wait must be at least 100ms"
        );
        Ok(())
    }
}

/// Does the NATS subject filter `filter` (with `*` and `>`) match `subject`?
pub fn subject_matches(filter: &str, subject: &str) -> bool {
    let mut f = filter.split('.');
    let mut s = subject.split('.');
    loop {
        match (f.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Counters of this source, besides the shared [`FillsMetrics`]
/// (duplicates by kind with `source="nats"`, dead letters).
#[derive(Clone)]
pub struct NatsMetrics {
    pub fills: FillsMetrics,
    /// Deliveries with a delivery count above 1: a crash, an expired
    /// ack_wait, a lost ack or a nak. Their effect is removed by dedup.
    pub redelivered: IntCounter,
    /// Acks sent after ack_wait had run out: the server may already have
    /// redelivered the message (it will come back as a duplicate).
    pub late_acks: IntCounter,
    /// Acks (or naks) that could not be sent or confirmed.
    pub ack_failures: IntCounter,
    /// Messages nakked because their transaction failed.
    pub naks: IntCounter,
    /// Dead letters by cause.
    pub dead_letter_causes: IntCounterVec,
    /// Dead letters published without the original payload (too large to be
    /// copied under the server's `max_payload`); also counted by cause.
    pub dead_letter_payloads_omitted: IntCounter,
    /// Consumer sessions (re)started after an error.
    pub restarts: IntCounter,
}

impl NatsMetrics {
    pub fn new(reg: &Registry, fills: FillsMetrics) -> prometheus::Result<NatsMetrics> {
        let c = |name: &str, help: &str| source::counter(reg, name, help);
        let dead_letter_causes = source::dead_letter_counter(
            reg,
            "fills_nats_dead_letters_total",
            "NATS messages dead-lettered, by cause",
        )?;
        Ok(NatsMetrics {
            fills,
            redelivered: c(
                "fills_nats_redelivered_total",
                "NATS messages delivered more than once",
            )?,
            late_acks: c(
                "fills_nats_late_acks_total",
                "Acks sent after ack_wait expired (message may be redelivered)",
            )?,
            ack_failures: c(
                "fills_nats_ack_failures_total",
                "Acks or naks that could not be sent or confirmed",
            )?,
            naks: c(
                "fills_nats_naks_total",
                "NATS messages nakked after a failed transaction",
            )?,
            dead_letter_causes,
            dead_letter_payloads_omitted: c(
                "fills_nats_dead_letter_payloads_omitted_total",
                "NATS dead letters published without the original payload (over max_payload)",
            )?,
            restarts: c(
                "fills_nats_session_restarts_total",
                "NATS consumer sessions restarted after an error",
            )?,
        })
    }

    /// Metrics on a private registry (tests, CLI).
    pub fn unregistered(fills: FillsMetrics) -> NatsMetrics {
        NatsMetrics::new(&Registry::new(), fills).expect("fresh registry")
    }
}

/// Why a message goes to the dead-letter subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadCause {
    /// Not UTF-8 or not JSON.
    Undecodable,
    /// JSON, but not a valid event.
    Invalid,
    /// Valid, but the store rejected it.
    Rejected,
    /// Already failed `max_deliver` deliveries.
    MaxDeliver,
}

impl DeadCause {
    pub fn as_str(&self) -> &'static str {
        match self {
            DeadCause::Undecodable => "undecodable",
            DeadCause::Invalid => "invalid",
            DeadCause::Rejected => "rejected",
            DeadCause::MaxDeliver => "max_deliver",
        }
    }
}

/// What to do with one delivered message, decided before the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    Apply(Event),
    DeadLetter(DeadCause, String),
}

/// Decide a message's fate from its payload and delivery count (pure).
pub fn classify(payload: &[u8], delivered: i64, max_deliver: i64) -> Disposition {
    if delivered > max_deliver {
        return Disposition::DeadLetter(
            DeadCause::MaxDeliver,
            format!(
                "delivered {delivered} times: the previous {} deliveries failed (max_deliver {max_deliver})",
                delivered - 1
            ),
        );
    }
    match source::decode_event(payload, "payload") {
        Ok(ev) => Disposition::Apply(ev),
        Err(Undecoded::Undecodable(reason)) => {
            Disposition::DeadLetter(DeadCause::Undecodable, reason)
        }
        Err(Undecoded::Invalid(reason)) => Disposition::DeadLetter(DeadCause::Invalid, reason),
    }
}

/// Origin of a dead letter, for its headers.
#[derive(Debug, Clone)]
pub struct Origin<'a> {
    pub subject: &'a str,
    pub stream: &'a str,
    pub consumer: &'a str,
    pub stream_seq: u64,
    pub delivered: i64,
}

/// Headers of a dead letter (pure). `Nats-Msg-Id` is derived from the
/// origin, so publishing the same dead letter again after a crash is
/// removed by the dead-letter stream's duplicate window.
pub fn dead_letter_headers(origin: &Origin<'_>, cause: &DeadCause, reason: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        async_nats::header::NATS_MESSAGE_ID,
        format!("tickgate-dlq:{}:{}", origin.stream, origin.stream_seq).as_str(),
    );
    h.insert(
        H_REASON,
        source::header_text(&format!("{}: {reason}", cause.as_str())).as_str(),
    );
    h.insert(H_SUBJECT, source::header_text(origin.subject).as_str());
    h.insert(H_STREAM, source::header_text(origin.stream).as_str());
    h.insert(H_CONSUMER, source::header_text(origin.consumer).as_str());
    h.insert(H_STREAM_SEQ, origin.stream_seq.to_string().as_str());
    h.insert(H_DELIVERIES, origin.delivered.to_string().as_str());
    h
}

/// Serialized size of a header block, as the server counts it against
/// `max_payload` (`NATS/1.0\r\n`, `name: value\r\n` each, `\r\n`).
pub fn header_wire_len(h: &HeaderMap) -> usize {
    let fields: usize = h
        .iter()
        .map(|(k, vs)| {
            vs.iter()
                .map(|v| AsRef::<[u8]>::as_ref(k).len() + 2 + v.as_str().len() + 2)
                .sum::<usize>()
        })
        .sum();
    "NATS/1.0\r\n".len() + fields + 2
}

/// Body of a dead letter (pure): the original payload when it fits with the
/// headers under `max_payload`; otherwise an empty body, with
/// `Tickgate-Payload-Omitted` and `Tickgate-Payload-Size` added to the
/// headers (the stream and sequence headers locate the original). Returns
/// true when the payload was omitted.
pub fn dead_letter_body(
    headers: &mut HeaderMap,
    payload: bytes::Bytes,
    max_payload: usize,
) -> (bytes::Bytes, bool) {
    let size = payload.len();
    if header_wire_len(headers) + size <= max_payload {
        return (payload, false);
    }
    headers.insert(H_PAYLOAD_SIZE, size.to_string().as_str());
    headers.insert(
        H_PAYLOAD_OMITTED,
        format!(
            "payload of {size} bytes plus the dead-letter headers exceeds the server's max_payload {max_payload}"
        )
        .as_str(),
    );
    (bytes::Bytes::new(), true)
}

/// Delay before a nakked message comes back: grows with its delivery count,
/// so a store outage is retried ever more slowly (1 s, 2 s, 4 s ... 30 s).
pub fn nak_delay(delivered: i64) -> Duration {
    let exp = delivered.clamp(1, 6) - 1;
    Duration::from_secs(1u64 << exp).min(Duration::from_secs(30))
}

/// Run the consumer until `shutdown` completes. Connection, stream and
/// consumer errors restart the session with a growing pause (0.5 s to 30 s);
/// they never end the function. A batch in progress when `shutdown`
/// completes is finished (committed and acked) first.
pub async fn run_consumer<F>(
    settings: NatsSettings,
    store: Store,
    metrics: NatsMetrics,
    shutdown: F,
) -> anyhow::Result<()>
where
    F: Future<Output = ()> + Send,
{
    settings.validate()?;
    tokio::pin!(shutdown);
    let mut pauses = RestartPause::new();
    loop {
        let started = Instant::now();
        match session(&settings, &store, &metrics, shutdown.as_mut()).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                let pause = pauses.after_failure(started, Instant::now());
                metrics.restarts.inc();
                tracing::warn!(error = %crate::util::errors::chain(&e), pause_ms = pause.as_millis() as u64,
                    "fills nats consumer: session failed, restarting");
                tokio::select! {
                    _ = shutdown.as_mut() => return Ok(()),
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// One connection's life. Ok(()) only on shutdown.
async fn session<F>(
    settings: &NatsSettings,
    store: &Store,
    metrics: &NatsMetrics,
    mut shutdown: std::pin::Pin<&mut F>,
) -> anyhow::Result<()>
where
    F: Future<Output = ()>,
{
    let setup = async {
        let client = async_nats::ConnectOptions::new()
            .name("tickgate-fills")
            .connection_timeout(Duration::from_secs(5))
            .connect(settings.url.as_str())
            .await
            .with_context(|| format!("connecting to NATS at {}", settings.url))?;
        let js = jetstream::new(client);
        let consumer = ensure_topology(&js, settings).await?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(settings.batch)
            .expires(Duration::from_secs(10))
            .heartbeat(Duration::from_secs(5))
            .messages()
            .await
            .context("starting the pull subscription")?;
        anyhow::Ok((js, messages))
    };
    let (js, messages) = tokio::select! {
        _ = shutdown.as_mut() => return Ok(()),
        r = setup => r?,
    };
    tracing::info!(stream = %settings.stream, subject = %settings.subject,
        durable = %settings.durable, "fills nats consumer: consuming");
    let mut chunks = messages.ready_chunks(settings.batch);
    let mut store_pause = Duration::ZERO;
    loop {
        let chunk = tokio::select! {
            biased;
            _ = shutdown.as_mut() => return Ok(()),
            c = chunks.next() => c,
        };
        let Some(chunk) = chunk else {
            anyhow::bail!("the pull subscription ended");
        };
        let mut msgs = Vec::with_capacity(chunk.len());
        for item in chunk {
            match item {
                Ok(m) => msgs.push(m),
                Err(e) => {
                    use pull::MessagesErrorKind as K;
                    match e.kind() {
                        K::ConsumerDeleted | K::NoResponders | K::PushBasedConsumer => {
                            // Finish what was received, then rebuild the consumer.
                            process_batch(settings, &js, store, metrics, msgs).await;
                            return Err(anyhow::anyhow!("pull subscription: {e}"));
                        }
                        _ => tracing::warn!(error = %e, "fills nats consumer: pull error"),
                    }
                }
            }
        }
        // Not selected against shutdown: a started batch is finished.
        let store_failed = process_batch(settings, &js, store, metrics, msgs).await;
        if store_failed {
            // Back off so a store outage is not hammered (the batch was nakked).
            store_pause =
                (store_pause * 2).clamp(Duration::from_millis(200), Duration::from_secs(10));
            tokio::select! {
                _ = shutdown.as_mut() => return Ok(()),
                _ = tokio::time::sleep(store_pause) => {}
            }
        } else {
            store_pause = Duration::ZERO;
        }
    }
}

/// Create the stream, the dead-letter stream and the durable consumer when
/// absent; return the consumer.
async fn ensure_topology(
    js: &jetstream::Context,
    s: &NatsSettings,
) -> anyhow::Result<jetstream::consumer::PullConsumer> {
    let stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: s.stream.clone(),
            subjects: vec![s.subject.clone()],
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .with_context(|| format!("getting or creating stream {}", s.stream))?;
    // Dead letters must be stored by a stream, or publishing them would not
    // be confirmed (a plain publish with no subscriber is dropped).
    match js.stream_by_subject(s.dlq_subject.clone()).await {
        Ok(name) => tracing::debug!(stream = %name, "dead letters stored by an existing stream"),
        Err(_) => {
            js.get_or_create_stream(jetstream::stream::Config {
                name: s.dlq_stream.clone(),
                subjects: vec![s.dlq_subject.clone()],
                storage: jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await
            .with_context(|| {
                format!(
                    "creating dead-letter stream {} on {}",
                    s.dlq_stream, s.dlq_subject
                )
            })?;
        }
    }
    let consumer: jetstream::consumer::PullConsumer = stream
        .get_or_create_consumer(
            &s.durable,
            pull::Config {
                durable_name: Some(s.durable.clone()),
                filter_subject: s.subject.clone(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: s.ack_wait,
                // Unlimited on the server; tickgate dead-letters after
                // max_deliver failures itself (see the module docs).
                max_deliver: -1,
                max_ack_pending: (s.batch as i64 * 4).max(1000),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("getting or creating consumer {} on {}", s.durable, s.stream))?;
    let cfg = &consumer.cached_info().config;
    if cfg.ack_policy != jetstream::consumer::AckPolicy::Explicit {
        anyhow::bail!(
            "consumer {} exists without explicit acks ({:?}); delete it or pick another durable name",
            s.durable,
            cfg.ack_policy
        );
    }
    if cfg.ack_wait != s.ack_wait || cfg.max_deliver != -1 {
        tracing::warn!(durable = %s.durable, ack_wait = ?cfg.ack_wait, max_deliver = cfg.max_deliver,
            "existing consumer differs from the configured ack_wait / unlimited max_deliver; using it as is");
    }
    Ok(consumer)
}

/// One delivered message and what we know of it.
struct Delivery {
    msg: jetstream::Message,
    stream_seq: u64,
    delivered: i64,
    received: Instant,
    /// Set once decided: ack (true) or nak (false).
    ack: Option<bool>,
}

/// Process one fetch: dead-letter what cannot be applied, apply the rest in
/// one transaction with the stream position, then ack (or nak). Returns true
/// when the store transaction failed.
async fn process_batch(
    s: &NatsSettings,
    js: &jetstream::Context,
    store: &Store,
    metrics: &NatsMetrics,
    msgs: Vec<jetstream::Message>,
) -> bool {
    if msgs.is_empty() {
        return false;
    }
    let now = Instant::now();
    let mut deliveries = Vec::with_capacity(msgs.len());
    for msg in msgs {
        let (stream_seq, delivered) = match msg.info() {
            Ok(i) => (i.stream_sequence, i.delivered),
            Err(e) => {
                // Not a JetStream delivery: nothing to ack, nothing to apply.
                tracing::warn!(subject = %msg.subject, error = %e, "fills nats: message without JetStream info ignored");
                continue;
            }
        };
        if delivered > 1 {
            metrics.redelivered.inc();
        }
        deliveries.push(Delivery {
            msg,
            stream_seq,
            delivered,
            received: now,
            ack: None,
        });
    }
    let Some(last_seq) = deliveries.iter().map(|d| d.stream_seq).max() else {
        return false;
    };

    // Decide each message (pure), then dead-letter the undecodable ones.
    let mut events = Vec::new();
    let mut event_of = Vec::new(); // events[i] came from deliveries[event_of[i]]
    let mut dead = Vec::new();
    for (i, d) in deliveries.iter().enumerate() {
        match classify(&d.msg.payload, d.delivered, s.max_deliver) {
            Disposition::Apply(ev) => {
                event_of.push(i);
                events.push(Ok(ev));
            }
            Disposition::DeadLetter(cause, reason) => dead.push((i, cause, reason)),
        }
    }
    dead_letter(s, js, metrics, &mut deliveries, dead).await;

    // F1: one transaction for all events and the stream position.
    let mut store_failed = false;
    match store
        .apply_stream_batch(&s.stream, &s.durable, last_seq, events)
        .await
    {
        Ok(outcomes) => {
            let mut rejected = Vec::new();
            for o in &outcomes {
                let Some(&i) = event_of.get(o.index) else {
                    continue;
                };
                match o.outcome.rejection_reason() {
                    Some(reason) => rejected.push((i, DeadCause::Rejected, reason.to_owned())),
                    None => deliveries[i].ack = Some(true),
                }
            }
            // Anything the store did not report on is left for redelivery.
            dead_letter(s, js, metrics, &mut deliveries, rejected).await;
        }
        Err(e) => {
            store_failed = true;
            tracing::warn!(error = %crate::util::errors::chain(&e), events = event_of.len(), last_seq,
                "fills nats: transaction failed; nakking the batch for redelivery");
            for &i in &event_of {
                deliveries[i].ack = Some(false);
            }
        }
    }
    settle(s, metrics, deliveries).await;
    store_failed
}

/// Publish dead letters and wait for JetStream to store them; a message is
/// acked only if its dead letter was stored, otherwise nakked.
async fn dead_letter(
    s: &NatsSettings,
    js: &jetstream::Context,
    metrics: &NatsMetrics,
    deliveries: &mut [Delivery],
    dead: Vec<(usize, DeadCause, String)>,
) {
    if dead.is_empty() {
        return;
    }
    let max_payload = js.client().max_payload();
    let publishes = dead.iter().map(|(i, cause, reason)| {
        let d = &deliveries[*i];
        let origin = Origin {
            subject: d.msg.subject.as_str(),
            stream: &s.stream,
            consumer: &s.durable,
            stream_seq: d.stream_seq,
            delivered: d.delivered,
        };
        let mut headers = dead_letter_headers(&origin, cause, reason);
        let (payload, omitted) = dead_letter_body(&mut headers, d.msg.payload.clone(), max_payload);
        async move {
            let ack = js
                .publish_with_headers(s.dlq_subject.clone(), headers, payload)
                .await?;
            ack.await?;
            anyhow::Ok(omitted)
        }
    });
    let results = futures::future::join_all(publishes).await;
    for ((i, cause, reason), r) in dead.into_iter().zip(results) {
        let d = &mut deliveries[i];
        match r {
            Ok(omitted) => {
                if omitted {
                    metrics.dead_letter_payloads_omitted.inc();
                    tracing::warn!(stream_seq = d.stream_seq, deliveries = d.delivered, cause = cause.as_str(),
                        reason = %reason, size = d.msg.payload.len(), max_payload,
                        "fills nats: event dead-lettered without its payload (over max_payload)");
                } else {
                    tracing::warn!(stream_seq = d.stream_seq, deliveries = d.delivered, cause = cause.as_str(),
                        reason = %reason, "fills nats: event dead-lettered");
                }
                metrics
                    .fills
                    .dead_lettered
                    .with_label_values(&[SOURCE])
                    .inc();
                metrics
                    .dead_letter_causes
                    .with_label_values(&[cause.as_str()])
                    .inc();
                d.ack = Some(true);
            }
            Err(e) => {
                tracing::warn!(stream_seq = d.stream_seq, error = %crate::util::errors::chain(&e),
                    "fills nats: dead-letter publish failed; nakking");
                d.ack = Some(false);
            }
        }
    }
}

/// Ack what was committed or dead-lettered, nak what failed. Plain acks are
/// pipelined; the last one is a double ack (the server confirms it), and
/// since acks on one connection are processed in order, its confirmation
/// also covers the acks before it. A lost ack costs a redelivery, which
/// dedup removes, so failures here are counted and logged, not retried.
async fn settle(s: &NatsSettings, metrics: &NatsMetrics, deliveries: Vec<Delivery>) {
    let mut acks = Vec::new();
    for d in deliveries {
        match d.ack {
            Some(true) => acks.push(d),
            Some(false) => {
                metrics.naks.inc();
                let delay = nak_delay(d.delivered);
                if let Err(e) = d.msg.ack_with(AckKind::Nak(Some(delay))).await {
                    metrics.ack_failures.inc();
                    tracing::warn!(stream_seq = d.stream_seq, error = %e, "fills nats: nak failed");
                }
            }
            // Not decided (should not happen): leave it to ack_wait.
            None => tracing::warn!(
                stream_seq = d.stream_seq,
                "fills nats: message left unacked"
            ),
        }
    }
    let Some(last) = acks.pop() else {
        return;
    };
    for d in acks.iter().chain(std::iter::once(&last)) {
        if d.received.elapsed() > s.ack_wait {
            metrics.late_acks.inc();
        }
    }
    for d in &acks {
        if let Err(e) = d.msg.ack().await {
            metrics.ack_failures.inc();
            tracing::warn!(stream_seq = d.stream_seq, error = %e, "fills nats: ack failed");
        }
    }
    if let Err(e) = last.msg.double_ack().await {
        metrics.ack_failures.inc();
        tracing::warn!(stream_seq = last.stream_seq, error = %e,
            "fills nats: ack not confirmed; the batch may be redelivered (dedup removes it)");
    }
}

/// `tickgate fills consume`: run the NATS consumer alone (replays,
/// recovery, tests). Settings come from `--config` (`[fills]` and
/// `[fills.nats]`), and each flag overrides its config value.
#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    /// Config file with a [fills] section (and [fills.nats]).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Store: sqlite:PATH or postgres://...
    #[arg(long)]
    pub db: Option<String>,
    /// NATS server URL.
    #[arg(long)]
    pub nats: Option<String>,
    /// JetStream stream to consume (created when missing; default FILLS).
    #[arg(long)]
    pub stream: Option<String>,
    /// Subject filter of the consumer.
    #[arg(long)]
    pub subject: Option<String>,
    /// Durable consumer name.
    #[arg(long)]
    pub durable: Option<String>,
    /// Subject that messages failing --max-deliver times are published to
    /// with their last error (default dlq.fills; must not match --subject).
    #[arg(long)]
    pub dlq_subject: Option<String>,
    /// Stream created for dead letters when none captures --dlq-subject.
    #[arg(long)]
    pub dlq_stream: Option<String>,
    /// Deliveries of one message before it is dead-lettered (default 5).
    #[arg(long)]
    pub max_deliver: Option<i64>,
    /// e.g. 30s, 500ms.
    #[arg(long, value_parser = super::config::parse_duration)]
    pub ack_wait: Option<Duration>,
    /// Messages per fetch (= per transaction).
    #[arg(long)]
    pub batch: Option<usize>,
}

impl ConsumeArgs {
    /// The store config and consumer settings: config file, then flags.
    /// `load` reads `--config`'s `[fills]` section (the caller's config
    /// reader: only that section matters, and it must be there and
    /// enabled).
    pub fn resolve(
        &self,
        load: impl Fn(&std::path::Path) -> anyhow::Result<FillsConfig>,
    ) -> anyhow::Result<(FillsConfig, NatsSettings)> {
        let mut fills = match &self.config {
            Some(path) => load(path)?,
            None => FillsConfig::default(),
        };
        if let Some(db) = &self.db {
            fills.db = db.clone();
        }
        let mut n = fills.nats.clone().unwrap_or_default();
        let set = |dst: &mut String, v: &Option<String>| {
            if let Some(v) = v {
                dst.clone_from(v);
            }
        };
        set(&mut n.url, &self.nats);
        set(&mut n.stream, &self.stream);
        set(&mut n.subject, &self.subject);
        set(&mut n.durable, &self.durable);
        set(&mut n.dlq_subject, &self.dlq_subject);
        if let Some(m) = self.max_deliver {
            n.max_deliver = m;
        }
        let mut settings = NatsSettings::from_nats_config(&n, fills.max_batch);
        set(&mut settings.dlq_stream, &self.dlq_stream);
        if let Some(w) = self.ack_wait {
            settings.ack_wait = w;
        }
        if let Some(b) = self.batch {
            settings.batch = b;
        }
        fills.nats = Some(n);
        fills.validate()?;
        settings.validate()?;
        Ok((fills, settings))
    }
}

/// `load`: as [`ConsumeArgs::resolve`]'s.
pub fn consume_main(
    args: ConsumeArgs,
    load: impl Fn(&std::path::Path) -> anyhow::Result<FillsConfig>,
) -> anyhow::Result<i32> {
    let (fills, settings) = args.resolve(load)?;
    source::run_consumer_command(&fills, |store, fills_metrics| {
        let metrics = NatsMetrics::unregistered(fills_metrics);
        run_consumer(settings, store, metrics, source::shutdown_signal())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILL: &str = r#"{"kind":"FILL","event_id":"E-1","deal_id":"D-1","account":"A","symbol":"EURUSD","side":"BUY","qty":"1","price":"1.1","exec_time":"2026-11-30T08:00:00Z"}"#;

    #[test]
    fn classify_decides_apply_or_dead_letter() {
        assert!(matches!(
            classify(FILL.as_bytes(), 1, 5),
            Disposition::Apply(_)
        ));
        // The 5th delivery is still tried; the 6th means 5 failures.
        assert!(matches!(
            classify(FILL.as_bytes(), 5, 5),
            Disposition::Apply(_)
        ));
        match classify(FILL.as_bytes(), 6, 5) {
            Disposition::DeadLetter(DeadCause::MaxDeliver, r) => {
                assert!(r.contains("max_deliver 5"))
            }
            other => panic!("{other:?}"),
        }
        match classify(b"\xff\xfe", 1, 5) {
            Disposition::DeadLetter(DeadCause::Undecodable, r) => assert!(r.contains("UTF-8")),
            other => panic!("{other:?}"),
        }
        match classify(b"{not json", 1, 5) {
            Disposition::DeadLetter(DeadCause::Undecodable, r) => {
                assert!(r.contains("malformed JSON"))
            }
            other => panic!("{other:?}"),
        }
        let bad = FILL.replace(r#""qty":"1""#, r#""qty":1"#);
        match classify(bad.as_bytes(), 1, 5) {
            Disposition::DeadLetter(DeadCause::Invalid, r) => assert!(r.contains("qty")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dead_letter_body_omits_a_payload_over_max_payload() {
        let mut h = HeaderMap::new();
        h.insert("A", "bc");
        // "NATS/1.0\r\n" + "A: bc\r\n" + "\r\n"
        assert_eq!(header_wire_len(&h), 10 + 7 + 2);
        let o = Origin {
            subject: "fills.a",
            stream: "S",
            consumer: "c",
            stream_seq: 7,
            delivered: 1,
        };
        let headers = dead_letter_headers(&o, &DeadCause::Invalid, "qty");
        let room = 1000 - header_wire_len(&headers);
        let fits = bytes::Bytes::from(vec![b'x'; room]);
        let mut h = headers.clone();
        let (body, omitted) = dead_letter_body(&mut h, fits.clone(), 1000);
        assert!(!omitted);
        assert_eq!(body, fits);
        assert!(h.get(H_PAYLOAD_OMITTED).is_none() && h.get(H_PAYLOAD_SIZE).is_none());

        let mut h = headers.clone();
        let (body, omitted) =
            dead_letter_body(&mut h, bytes::Bytes::from(vec![b'x'; room + 1]), 1000);
        assert!(omitted);
        assert!(body.is_empty());
        assert_eq!(
            h.get(H_PAYLOAD_SIZE).unwrap().as_str(),
            (room + 1).to_string()
        );
        assert!(h
            .get(H_PAYLOAD_OMITTED)
            .unwrap()
            .as_str()
            .contains("max_payload 1000"));
        assert_eq!(h.get(H_STREAM_SEQ).unwrap().as_str(), "7");
        assert_eq!(h.get(H_STREAM).unwrap().as_str(), "S");
        assert!(h
            .get(H_REASON)
            .unwrap()
            .as_str()
            .starts_with("invalid: qty"));
        assert!(header_wire_len(&h) <= 1000);
    }

    #[test]
    fn dead_letter_headers_are_single_line_and_bounded() {
        let o = Origin {
            subject: "fills.a",
            stream: "S",
            consumer: "c",
            stream_seq: 42,
            delivered: 3,
        };
        let long = format!("line1\r\nline2 {}", "x".repeat(5000));
        let h = dead_letter_headers(&o, &DeadCause::Invalid, &long);
        let reason = h.get(H_REASON).unwrap().as_str();
        assert!(reason.starts_with("invalid: line1  line2"));
        assert!(!reason.contains(['\r', '\n']));
        assert!(reason.len() <= source::MAX_REASON_LEN + 3);
        assert_eq!(h.get(H_STREAM_SEQ).unwrap().as_str(), "42");
        assert_eq!(h.get(H_DELIVERIES).unwrap().as_str(), "3");
        assert_eq!(h.get(H_SUBJECT).unwrap().as_str(), "fills.a");
        assert_eq!(
            h.get(async_nats::header::NATS_MESSAGE_ID).unwrap().as_str(),
            "tickgate-dlq:S:42"
        );
        // Multi-byte characters are cut on a boundary.
        let h = dead_letter_headers(&o, &DeadCause::Invalid, &"é".repeat(2000));
        assert!(h.get(H_REASON).unwrap().as_str().ends_with("..."));
    }

    #[test]
    fn subject_filters() {
        assert!(subject_matches("fills.>", "fills.dlq"));
        assert!(subject_matches("fills.*", "fills.dlq"));
        assert!(!subject_matches("fills.*", "fills.dlq.x"));
        assert!(!subject_matches("fills.in", "fills.dlq"));
        assert!(subject_matches("fills.in", "fills.in"));
        assert!(!subject_matches("fills.in.>", "fills.in"));
        let mut s = NatsSettings::from_nats_config(&NatsConfig::default(), 500);
        s.validate().unwrap();
        // A dead-letter subject inside the consumed subjects is refused.
        s.dlq_subject = "fills.dlq".into();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("consumed again"), "{e}");
    }

    #[test]
    fn consume_args_read_the_fills_table_and_flags_override() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            r#"
[gate]
anything = "not read here"
[fills]
db = "sqlite:/tmp/x.db"
max_batch = 200
[fills.nats]
url = "nats://127.0.0.1:4222"
stream = "ORDERS"
subject = "orders.fills.>"
dlq_subject = "orders.dead"
max_deliver = 7
ack_wait = "45s"
"#,
        )
        .unwrap();
        let args = ConsumeArgs {
            config: Some(path.clone()),
            db: None,
            nats: None,
            stream: None,
            subject: None,
            durable: Some("other".into()),
            dlq_subject: None,
            dlq_stream: None,
            max_deliver: None,
            ack_wait: None,
            batch: Some(20),
        };
        let load = crate::config::Config::fills_section_of_file;
        let (fills, s) = args.resolve(load).unwrap();
        assert_eq!(fills.db, "sqlite:/tmp/x.db");
        assert_eq!(s.stream, "ORDERS");
        assert_eq!(s.subject, "orders.fills.>");
        assert_eq!(s.dlq_subject, "orders.dead");
        assert_eq!(s.dlq_stream, "ORDERS_DLQ");
        assert_eq!(s.max_deliver, 7);
        assert_eq!(s.ack_wait, Duration::from_secs(45));
        assert_eq!(s.durable, "other");
        assert_eq!(s.batch, 20);
        // A dead-letter subject inside the consumed subjects: refused.
        let bad = ConsumeArgs {
            dlq_subject: Some("orders.fills.dead".into()),
            ..args
        };
        assert!(bad.resolve(load).is_err());
        std::fs::write(&path, "[gate]\nx = 1\n").unwrap();
        let none = ConsumeArgs {
            dlq_subject: None,
            ..bad
        };
        let e = format!("{:#}", none.resolve(load).unwrap_err());
        assert!(e.contains("no [fills] section"), "{e}");
    }

    #[test]
    fn nak_delay_grows_and_is_capped() {
        assert_eq!(nak_delay(1), Duration::from_secs(1));
        assert_eq!(nak_delay(2), Duration::from_secs(2));
        assert_eq!(nak_delay(100), Duration::from_secs(30));
        assert_eq!(nak_delay(-3), Duration::from_secs(1));
    }
}
