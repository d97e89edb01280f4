//! Prometheus metrics of the store and the sweeper (F4, F5).

use prometheus::{
    exponential_buckets, CounterVec, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, Opts, Registry,
};

use super::model::{EventOutcome, Outcome};

#[derive(Clone)]
pub struct FillsMetrics {
    /// F4: `duplicate_events_total{kind,source}`: repeats caught by the
    /// processed-events primary key.
    pub duplicate_events: IntCounterVec,
    /// F3: repeats caught only by the unique `deal_id` (processed row
    /// expired, or a new event id for a known deal).
    pub duplicate_by_deal: IntCounterVec,
    pub applied: IntCounterVec,
    pub rejected: IntCounterVec,
    pub held: IntCounterVec,
    /// Held BUSTs applied when their FILL arrived.
    pub busts_released: IntCounter,
    pub dead_lettered: IntCounterVec,
    /// K2 write scope: events for an account the client may not write.
    pub out_of_scope: IntCounterVec,
    /// F2b: `conflicting_events_total{kind,source}`: a repeated id with
    /// different content, rejected.
    pub conflicts: IntCounterVec,
    pub tx_seconds: Histogram,
    pub tx_retries: IntCounter,
    pub retention_rows: IntCounterVec,
    pub retention_seconds: HistogramVec,
    /// `fills_sqlite_phase_cpu_seconds_total{phase}`: CPU time of the
    /// thread that runs a SQLite batch transaction, by phase (see
    /// `store::sqlite::Phase`): where a batch's cost goes, whatever else
    /// the machine is doing.
    pub sqlite_phase_cpu: CounterVec,
    /// `fills_sqlite_phase_seconds_total{phase}`: the same phases' wall
    /// time (the commit's includes waiting for the disk).
    pub sqlite_phase_wall: CounterVec,
}

impl FillsMetrics {
    pub fn new(reg: &Registry) -> prometheus::Result<FillsMetrics> {
        let cv = |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            reg.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let duplicate_events = cv(
            "duplicate_events_total",
            "Repeated events removed by the processed-events key (F4)",
            &["kind", "source"],
        )?;
        let duplicate_by_deal = cv(
            "fills_duplicate_by_deal_id_total",
            "Repeats caught only by the unique (account, deal_id) (F3)",
            &["kind", "source"],
        )?;
        let applied = cv(
            "fills_events_applied_total",
            "Events applied",
            &["kind", "source"],
        )?;
        let rejected = cv(
            "fills_events_rejected_total",
            "Events rejected",
            &["source"],
        )?;
        let held = cv(
            "fills_busts_held_total",
            "BUSTs held until their FILL arrives",
            &["source"],
        )?;
        let dead_lettered = cv(
            "fills_events_dead_lettered_total",
            "Events moved to dead letters with a reason",
            &["source"],
        )?;
        let out_of_scope = cv(
            "fills_events_out_of_scope_total",
            "Events rejected because the client may not write their account (K2)",
            &["source"],
        )?;
        let conflicts = cv(
            "conflicting_events_total",
            "Events whose (kind, event_id) or (account, deal_id) was already processed \
             with different content, rejected (F2b)",
            &["kind", "source"],
        )?;
        let busts_released = IntCounter::new(
            "fills_busts_released_total",
            "Held BUSTs applied when their FILL arrived",
        )?;
        reg.register(Box::new(busts_released.clone()))?;
        let tx_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "fills_transaction_seconds",
                "Duration of one batch transaction",
            )
            .buckets(exponential_buckets(0.0005, 2.0, 14)?),
        )?;
        reg.register(Box::new(tx_seconds.clone()))?;
        let tx_retries = IntCounter::new(
            "fills_transaction_retries_total",
            "Transactions retried after a deadlock or serialization failure",
        )?;
        reg.register(Box::new(tx_retries.clone()))?;
        let retention_rows = cv(
            "fills_retention_rows_deleted_total",
            "Expired rows deleted by the sweeper (F5, K7)",
            &["table"],
        )?;
        let retention_seconds = HistogramVec::new(
            HistogramOpts::new(
                "fills_retention_sweep_seconds",
                "Duration of one full sweep",
            )
            .buckets(exponential_buckets(0.01, 2.0, 14)?),
            &["table"],
        )?;
        reg.register(Box::new(retention_seconds.clone()))?;
        let phase = |name: &str, help: &str| -> prometheus::Result<CounterVec> {
            let c = CounterVec::new(Opts::new(name, help), &["phase"])?;
            reg.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let sqlite_phase_cpu = phase(
            "fills_sqlite_phase_cpu_seconds_total",
            "CPU time of SQLite batch transactions by phase (the applying thread's)",
        )?;
        let sqlite_phase_wall = phase(
            "fills_sqlite_phase_seconds_total",
            "Wall time of SQLite batch transactions by phase",
        )?;
        Ok(FillsMetrics {
            duplicate_events,
            duplicate_by_deal,
            applied,
            rejected,
            held,
            busts_released,
            dead_lettered,
            out_of_scope,
            conflicts,
            tx_seconds,
            tx_retries,
            retention_rows,
            retention_seconds,
            sqlite_phase_cpu,
            sqlite_phase_wall,
        })
    }

    /// Metrics on a private registry (tests, CLI).
    pub fn unregistered() -> FillsMetrics {
        // Registering into a fresh registry cannot collide.
        FillsMetrics::new(&Registry::new()).expect("fresh registry")
    }

    /// Count a committed batch's outcomes: one counter update per label
    /// set in the batch, not one per event (a label lookup hashes the
    /// labels and takes a lock).
    pub fn record(&self, source: &str, outcomes: &[EventOutcome]) {
        // (kind, counter) -> events; a batch has a handful of these.
        let mut counts: Vec<(&str, Counted, u64)> = Vec::new();
        for o in outcomes {
            let kind = o.kind.as_deref().unwrap_or("");
            let counted = match o.outcome {
                Outcome::Applied => Counted::Applied,
                Outcome::Duplicate => Counted::Duplicate,
                Outcome::DuplicateByDealId => Counted::DuplicateByDeal,
                Outcome::Held => Counted::Held,
                Outcome::Rejected(_) => Counted::Rejected,
                Outcome::Conflict(ref reason) => {
                    // F2b: counted and logged, never a silent duplicate.
                    tracing::warn!(kind, source, event_id = o.event_id.as_deref().unwrap_or(""),
                        %reason, "fills: conflicting event rejected");
                    Counted::Conflict
                }
            };
            match counts
                .iter_mut()
                .find(|(k, c, _)| *c == counted && *k == kind)
            {
                Some((_, _, n)) => *n += 1,
                None => counts.push((kind, counted, 1)),
            }
        }
        for (kind, counted, n) in counts {
            match counted {
                Counted::Applied => self.applied.with_label_values(&[kind, source]).inc_by(n),
                Counted::Duplicate => self
                    .duplicate_events
                    .with_label_values(&[kind, source])
                    .inc_by(n),
                Counted::DuplicateByDeal => self
                    .duplicate_by_deal
                    .with_label_values(&[kind, source])
                    .inc_by(n),
                Counted::Held => self.held.with_label_values(&[source]).inc_by(n),
                Counted::Rejected => self.rejected.with_label_values(&[source]).inc_by(n),
                Counted::Conflict => self.conflicts.with_label_values(&[kind, source]).inc_by(n),
            }
        }
    }
}

/// The counter an outcome goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    Applied,
    Duplicate,
    DuplicateByDeal,
    Held,
    Rejected,
    Conflict,
}

/// The phases of a SQLite batch transaction, the `phase` label of
/// `fills_sqlite_phase_cpu_seconds_total` and `fills_sqlite_phase_seconds_total`:
/// their cost per event shows which part of a batch a change made slower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlitePhase {
    /// `BEGIN IMMEDIATE` (waiting for the write lock included) and, for
    /// HTTP, the idempotency key's row (K2).
    Begin,
    /// Consumer positions (stream offsets) and the caller's pre-commit hook.
    Offsets,
    /// Repeats within the batch, the processed-events insert (F1), the
    /// content hashes (F2b).
    Dedup,
    /// The touched positions and the application sequence, read.
    Read,
    /// The rows of new deals, inserted (F2).
    Deals,
    /// The position arithmetic (F6), or the planner with what it reads
    /// (deals, BUST histories).
    Apply,
    /// Positions, changed deals, chain links and, for HTTP, the stored
    /// answer, written.
    Write,
    /// `COMMIT`: WAL frames written and synced, checkpoints.
    Commit,
}

impl SqlitePhase {
    pub const ALL: [SqlitePhase; 8] = [
        SqlitePhase::Begin,
        SqlitePhase::Offsets,
        SqlitePhase::Dedup,
        SqlitePhase::Read,
        SqlitePhase::Deals,
        SqlitePhase::Apply,
        SqlitePhase::Write,
        SqlitePhase::Commit,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SqlitePhase::Begin => "begin",
            SqlitePhase::Offsets => "offsets",
            SqlitePhase::Dedup => "dedup",
            SqlitePhase::Read => "read",
            SqlitePhase::Deals => "deals",
            SqlitePhase::Apply => "apply",
            SqlitePhase::Write => "write",
            SqlitePhase::Commit => "commit",
        }
    }
}
