//! Retention (F5, K7): expired processed-event rows and idempotency keys are
//! deleted in chunks of at most 10,000 rows, each chosen by an indexed
//! sub-select and deleted in its own short transaction, with a pause
//! between chunks, until none are left. Never one big DELETE: a big delete
//! holds locks and bloats the log while the appliers wait.

use std::time::{Duration, Instant};

use super::config::{FillsConfig, MAX_RETENTION_CHUNK};
use super::store::{Clock, Store, SweepTable};

#[derive(Debug, Clone)]
pub struct RetentionPolicy {
    /// F5: processed events older than this go (default 30 days).
    pub processed_ttl: Duration,
    /// K7: idempotency keys older than this go (default 72 h).
    pub key_ttl: Duration,
    /// Rows per chunk, clamped to 1..=10,000.
    pub chunk: usize,
    pub pause: Duration,
}

impl RetentionPolicy {
    pub fn from_config(cfg: &FillsConfig) -> RetentionPolicy {
        RetentionPolicy {
            processed_ttl: cfg.processed_ttl,
            key_ttl: cfg.key_ttl,
            chunk: cfg.retention.chunk,
            pause: cfg.retention.pause,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub table: SweepTable,
    pub deleted: u64,
    /// DELETE statements issued (the last one finds fewer than a chunk).
    pub chunks: u32,
    pub largest_chunk: usize,
    pub elapsed: Duration,
}

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Delete rows of `table` created before `cutoff_ns`, chunk by chunk.
pub async fn sweep_table(
    store: &Store,
    table: SweepTable,
    cutoff_ns: i64,
    chunk: usize,
    pause: Duration,
) -> anyhow::Result<SweepReport> {
    let chunk = chunk.clamp(1, MAX_RETENTION_CHUNK);
    let started = Instant::now();
    let mut report = SweepReport {
        table,
        deleted: 0,
        chunks: 0,
        largest_chunk: 0,
        elapsed: Duration::ZERO,
    };
    let rows = store
        .metrics()
        .retention_rows
        .with_label_values(&[table.name()]);
    loop {
        let n = store.delete_expired_chunk(table, cutoff_ns, chunk).await?;
        report.chunks += 1;
        report.deleted += n as u64;
        report.largest_chunk = report.largest_chunk.max(n);
        rows.inc_by(n as u64);
        if n < chunk {
            break; // the sub-select found fewer than a chunk: none left
        }
        tokio::time::sleep(pause).await;
    }
    report.elapsed = started.elapsed();
    store
        .metrics()
        .retention_seconds
        .with_label_values(&[table.name()])
        .observe(report.elapsed.as_secs_f64());
    tracing::info!(
        table = table.name(),
        deleted = report.deleted,
        chunks = report.chunks,
        ms = report.elapsed.as_millis() as u64,
        "fills: retention sweep"
    );
    Ok(report)
}

/// One sweep of both tables as of `now_ns`.
pub async fn sweep(
    store: &Store,
    policy: &RetentionPolicy,
    now_ns: i64,
) -> anyhow::Result<[SweepReport; 2]> {
    let p = sweep_table(
        store,
        SweepTable::ProcessedEvents,
        now_ns.saturating_sub(ns(policy.processed_ttl)),
        policy.chunk,
        policy.pause,
    )
    .await?;
    let k = sweep_table(
        store,
        SweepTable::IdempotencyKeys,
        now_ns.saturating_sub(ns(policy.key_ttl)),
        policy.chunk,
        policy.pause,
    )
    .await?;
    Ok([p, k])
}

/// Sweep every `interval` forever (spawn it; errors are logged and retried
/// at the next interval).
pub async fn run_sweeper(store: Store, policy: RetentionPolicy, interval: Duration, clock: Clock) {
    let mut tick = tokio::time::interval(interval.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = sweep(&store, &policy, clock()).await {
            tracing::warn!(error = %crate::util::errors::chain(&e), "fills: retention sweep failed");
        }
    }
}
