//! The fills store: SQLite (embedded default) or PostgreSQL (shared by
//! several tickgate instances), one schema, one behaviour.
//!
//! Every batch is one transaction (F1): processed-event inserts, fill rows,
//! positions, and for HTTP the idempotency-key row with its stored answer
//! (K4), or for a stream the consumer position. An outcome is returned only
//! after COMMIT. The pure decisions live in [`super::plan`].
//!
//! Cancellation: the transaction runs in a task of its own (SQLite:
//! `spawn_blocking` on the store's single connection; PostgreSQL: a spawned
//! task owning a pooled connection), so dropping the caller's future never
//! leaves a transaction half done or a connection mid-transaction in the pool.

mod pg_fast;
pub mod postgres;
pub mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use super::config::{DbTarget, FillsConfig};
use super::metrics::FillsMetrics;
use super::model::{Event, EventOutcome, Outcome, Parsed};
use super::position::Position;

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// Unix nanoseconds; injectable so tests can write rows "in the past".
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0)
    })
}

/// Builds the stored HTTP answer from a batch's outcomes, inside the
/// transaction (K4). Called again if the transaction is retried.
pub type AnswerFn = Arc<dyn Fn(&[EventOutcome]) -> (u16, Vec<u8>) + Send + Sync>;

#[derive(Clone)]
pub struct StoreOptions {
    /// K5: how long a retry waits for a concurrent attempt with the same key.
    pub key_wait: Duration,
    /// `apply_events` splits longer inputs into transactions of this size.
    pub max_batch: usize,
    pub pg_pool_size: usize,
    /// PostgreSQL: `search_path` for every connection (tests use a fresh
    /// schema each); None = the server default.
    pub pg_schema: Option<String>,
    /// PostgreSQL: try the one-statement fast path first (`pg_fast`);
    /// off = every batch takes the careful multi-statement path.
    pub pg_fast_path: bool,
    pub clock: Clock,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            key_wait: Duration::from_secs(5),
            max_batch: 1000,
            pg_pool_size: 4,
            pg_schema: None,
            pg_fast_path: true,
            clock: system_clock(),
        }
    }
}

impl StoreOptions {
    pub fn from_config(cfg: &FillsConfig) -> StoreOptions {
        StoreOptions {
            key_wait: cfg.key_wait,
            max_batch: cfg.max_batch.max(1),
            pg_pool_size: cfg.pg_pool_size.max(1),
            ..StoreOptions::default()
        }
    }
}

/// Result of [`Store::apply_http_batch`] (K2-K5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpOutcome {
    /// First attempt: applied now; the answer was stored with the effects.
    Fresh {
        status: u16,
        body: Vec<u8>,
        outcomes: Vec<EventOutcome>,
    },
    /// The key was already used with the same request hash: the stored
    /// answer, byte for byte (send `Idempotent-Replayed: true`).
    Replayed { status: u16, body: Vec<u8> },
    /// The key was used with a different request body (K3 -> 422).
    HashMismatch,
    /// Another attempt with the same key is still running after `key_wait`
    /// (K5 -> 409 with Retry-After).
    InProgressTimeout,
}

/// A committed idempotency-key row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    pub request_hash: String,
    pub status: u16,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionRow {
    pub account: String,
    pub symbol: String,
    pub position: Position,
}

/// A held BUST (its FILL not seen yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBust {
    pub deal_id: String,
    pub event_id: String,
    pub account: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterRow {
    pub source: String,
    pub kind: String,
    pub event_id: String,
    pub deal_id: String,
    pub reason: String,
}

/// Tables the sweeper cleans (F5, K7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepTable {
    ProcessedEvents,
    IdempotencyKeys,
}

impl SweepTable {
    pub fn name(self) -> &'static str {
        match self {
            SweepTable::ProcessedEvents => "processed_events",
            SweepTable::IdempotencyKeys => "idempotency_keys",
        }
    }
}

/// Runs inside a stream batch's transaction after its events were applied
/// and before COMMIT, with the batch's outcomes; an error rolls the whole
/// transaction back (the Kafka source dead-letters the events the store
/// rejected here, so that the offset never moves past an event that is in
/// neither the database nor the dead-letter topic).
pub type BeforeCommit = Arc<
    dyn Fn(Vec<EventOutcome>) -> futures::future::BoxFuture<'static, anyhow::Result<()>>
        + Send
        + Sync,
>;

/// What the transaction does besides applying events.
#[derive(Clone)]
pub(crate) enum Extra {
    None,
    Stream {
        stream: String,
        consumer: String,
        last_seq: u64,
    },
    /// A partition offset, moved by compare-and-set (first statement of the
    /// transaction, so it also serialises instances on one partition):
    /// from `expected` (None = no row yet) to `last`, and only forwards.
    Offset {
        stream: String,
        consumer: String,
        expected: Option<i64>,
        last: i64,
        before_commit: Option<BeforeCommit>,
    },
}

/// The stored offset was not the one the batch was read after: another
/// instance applied this partition's records meanwhile (or the row moved
/// by hand). Nothing of the batch was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("consumer position {stream}/{consumer} is {stored:?}, expected {expected:?}: another consumer moved it")]
pub struct OffsetConflict {
    pub stream: String,
    pub consumer: String,
    pub expected: Option<i64>,
    pub stored: Option<i64>,
}

/// Length of the shared answer cache's MAC key (HMAC-SHA256, K8).
pub const ANSWER_MAC_KEY_LEN: usize = 32;

/// A fresh MAC key from the operating system's random source.
fn new_answer_mac_key() -> anyhow::Result<[u8; ANSWER_MAC_KEY_LEN]> {
    let mut k = [0u8; ANSWER_MAC_KEY_LEN];
    getrandom::getrandom(&mut k)
        .map_err(|e| anyhow::anyhow!("no random bytes for the answer MAC key: {e}"))?;
    Ok(k)
}

/// The stored key, which must be exactly [`ANSWER_MAC_KEY_LEN`] bytes.
fn answer_mac_key_from(stored: &[u8]) -> anyhow::Result<[u8; ANSWER_MAC_KEY_LEN]> {
    stored.try_into().map_err(|_| {
        anyhow::anyhow!(
            "answer_mac_key: stored key is {} bytes, not {ANSWER_MAC_KEY_LEN}",
            stored.len()
        )
    })
}

#[derive(Clone)]
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Store {
    /// Open the store of the config's `db` and run the embedded migrations.
    pub async fn open(cfg: &FillsConfig, metrics: FillsMetrics) -> anyhow::Result<Store> {
        let opts = StoreOptions::from_config(cfg);
        match cfg.db_target()? {
            DbTarget::Sqlite(path) => Ok(Store::Sqlite(
                SqliteStore::open(&path, opts, metrics).await?,
            )),
            DbTarget::Postgres(url) => Ok(Store::Postgres(
                PgStore::connect(&url, opts, metrics).await?,
            )),
        }
    }

    pub fn metrics(&self) -> &FillsMetrics {
        match self {
            Store::Sqlite(s) => s.metrics(),
            Store::Postgres(s) => s.metrics(),
        }
    }

    /// K8: the key that authenticates shared answer cache values: random,
    /// created once in the database (schema v4), so every instance of this
    /// database has the same one and a Redis writer does not.
    pub fn answer_mac_key(&self) -> [u8; ANSWER_MAC_KEY_LEN] {
        match self {
            Store::Sqlite(s) => s.answer_mac_key(),
            Store::Postgres(s) => s.answer_mac_key(),
        }
    }

    /// Apply events from `source` ("file", "http", "nats", ...) exactly once
    /// (F1-F3). Outcomes in input order; `index` is the input position.
    /// Inputs longer than `max_batch` commit in several transactions; every
    /// outcome returned has been committed.
    ///
    /// PostgreSQL with a pool of N > 1 connections: the events are split by
    /// account into N lanes (a hash of the account), and the lanes run at
    /// once, one connection each, each lane's events in input order in
    /// transactions of at most `max_batch`. One account's events (and so
    /// one position's, and a deal's FILL and its BUST: F2's deal key
    /// `(account, deal_id)` holds the account) stay in one lane, in order,
    /// so the result is the same as one after the other; lanes touch
    /// disjoint positions and disjoint deals. On error,
    /// other lanes' transactions may have committed (re-running is
    /// harmless: dedup).
    pub async fn apply_events(
        &self,
        source: &str,
        events: Vec<Parsed>,
    ) -> anyhow::Result<Vec<EventOutcome>> {
        if let Store::Postgres(s) = self {
            let lanes = s.lanes();
            if lanes > 1 && events.len() > 1 {
                return apply_in_lanes(s, source, events, lanes).await;
            }
        }
        let max_batch = match self {
            Store::Sqlite(s) => s.max_batch(),
            Store::Postgres(s) => s.max_batch(),
        };
        let mut all = Vec::with_capacity(events.len());
        let mut start = 0;
        let mut rest = events;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(max_batch));
            let n = rest.len();
            let outs = match self {
                Store::Sqlite(s) => s.apply_batch(source, rest, Extra::None).await?,
                Store::Postgres(s) => s.apply_batch(source, rest, Extra::None).await?,
            };
            all.extend(offset(outs, start));
            start += n;
            rest = tail;
        }
        Ok(all)
    }

    /// One HTTP batch with its idempotency key, all in one transaction
    /// (K2-K5): the `(client, key)` row is inserted first and is the lock;
    /// the answer from `build_answer` is stored with the batch's effects.
    pub async fn apply_http_batch(
        &self,
        client: &str,
        key: &str,
        request_hash: &str,
        events: Vec<Parsed>,
        build_answer: AnswerFn,
    ) -> anyhow::Result<HttpOutcome> {
        match self {
            Store::Sqlite(s) => {
                s.apply_http_batch(client, key, request_hash, events, build_answer)
                    .await
            }
            Store::Postgres(s) => {
                s.apply_http_batch(client, key, request_hash, events, build_answer)
                    .await
            }
        }
    }

    /// The committed answer of `(client, key)`, if any.
    pub async fn get_stored_answer(
        &self,
        client: &str,
        key: &str,
    ) -> anyhow::Result<Option<StoredAnswer>> {
        match self {
            Store::Sqlite(s) => s.get_stored_answer(client, key).await,
            Store::Postgres(s) => s.get_stored_answer(client, key).await,
        }
    }

    /// Events of one stream fetch; `last_stream_seq` is stored as the
    /// consumer position in the same transaction (source label "nats").
    /// The whole input is one transaction (no splitting).
    pub async fn apply_stream_batch(
        &self,
        stream: &str,
        consumer: &str,
        last_stream_seq: u64,
        events: Vec<Parsed>,
    ) -> anyhow::Result<Vec<EventOutcome>> {
        let extra = Extra::Stream {
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
            last_seq: last_stream_seq,
        };
        match self {
            Store::Sqlite(s) => s.apply_batch("nats", events, extra).await,
            Store::Postgres(s) => s.apply_batch("nats", events, extra).await,
        }
    }

    /// Events of one partition fetch with the partition's offset, in one
    /// transaction (F1): the consumer position `stream`/`consumer` moves
    /// from `expected` (the stored offset the batch was read after; None =
    /// none stored) to `last` by compare-and-set, never backwards. If it
    /// is not `expected`, nothing is applied and the result is
    /// `Err(OffsetConflict)` (another instance applied these records).
    /// `before_commit` runs inside the transaction with the outcomes.
    #[allow(clippy::too_many_arguments)]
    pub async fn apply_partition_batch(
        &self,
        source: &str,
        stream: &str,
        consumer: &str,
        expected: Option<i64>,
        last: i64,
        events: Vec<Parsed>,
        before_commit: Option<BeforeCommit>,
    ) -> anyhow::Result<Result<Vec<EventOutcome>, OffsetConflict>> {
        anyhow::ensure!(
            expected.is_none_or(|e| last > e),
            "offset {last} is not after {expected:?}"
        );
        let extra = Extra::Offset {
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
            expected,
            last,
            before_commit,
        };
        let r = match self {
            Store::Sqlite(s) => s.apply_batch(source, events, extra).await,
            Store::Postgres(s) => s.apply_batch(source, events, extra).await,
        };
        match r {
            Ok(outs) => Ok(Ok(outs)),
            Err(e) => match e.downcast_ref::<OffsetConflict>() {
                Some(c) => Ok(Err(c.clone())),
                None => Err(e),
            },
        }
    }

    /// Last stream sequence committed by `apply_stream_batch`.
    pub async fn consumer_position(
        &self,
        stream: &str,
        consumer: &str,
    ) -> anyhow::Result<Option<u64>> {
        match self {
            Store::Sqlite(s) => s.consumer_position(stream, consumer).await,
            Store::Postgres(s) => s.consumer_position(stream, consumer).await,
        }
    }

    /// Positions, optionally only of the given accounts; sorted by
    /// (account, symbol).
    pub async fn positions(&self, accounts: Option<&[String]>) -> anyhow::Result<Vec<PositionRow>> {
        let accounts = accounts.map(<[String]>::to_vec);
        match self {
            Store::Sqlite(s) => s.positions(accounts).await,
            Store::Postgres(s) => s.positions(accounts).await,
        }
    }

    /// BUSTs held for a FILL not seen yet.
    pub async fn held_busts(&self) -> anyhow::Result<Vec<HeldBust>> {
        match self {
            Store::Sqlite(s) => s.held_busts().await,
            Store::Postgres(s) => s.held_busts().await,
        }
    }

    pub async fn dead_letters(&self) -> anyhow::Result<Vec<DeadLetterRow>> {
        match self {
            Store::Sqlite(s) => s.dead_letters().await,
            Store::Postgres(s) => s.dead_letters().await,
        }
    }

    /// Delete at most `limit` rows of `table` created before `cutoff_ns`,
    /// chosen by an indexed sub-select (F5). Returns the rows deleted.
    pub async fn delete_expired_chunk(
        &self,
        table: SweepTable,
        cutoff_ns: i64,
        limit: usize,
    ) -> anyhow::Result<usize> {
        match self {
            Store::Sqlite(s) => s.delete_expired_chunk(table, cutoff_ns, limit).await,
            Store::Postgres(s) => s.delete_expired_chunk(table, cutoff_ns, limit).await,
        }
    }

    /// Rows in a sweepable table (tests, status).
    pub async fn count_rows(&self, table: SweepTable) -> anyhow::Result<u64> {
        match self {
            Store::Sqlite(s) => s.count_rows(table).await,
            Store::Postgres(s) => s.count_rows(table).await,
        }
    }
}

/// A stable lane of an account (FNV-1a): the same account always goes to
/// the same lane.
fn lane_of(account: &str, lanes: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in account.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % lanes as u64) as usize
}

async fn apply_in_lanes(
    s: &PgStore,
    source: &str,
    events: Vec<Parsed>,
    lanes: usize,
) -> anyhow::Result<Vec<EventOutcome>> {
    let total = events.len();
    let max_batch = s.max_batch();
    let mut groups: Vec<Vec<(usize, Parsed)>> = (0..lanes).map(|_| Vec::new()).collect();
    for (i, p) in events.into_iter().enumerate() {
        let g = match &p {
            Ok(ev) => lane_of(ev.account(), lanes),
            Err(_) => 0,
        };
        groups[g].push((i, p));
    }
    let runs = groups
        .into_iter()
        .filter(|g| !g.is_empty())
        .map(|g| async move {
            let mut outs = Vec::with_capacity(g.len());
            let mut rest = g;
            while !rest.is_empty() {
                let tail = rest.split_off(rest.len().min(max_batch));
                let (idx, evs): (Vec<usize>, Vec<Parsed>) = rest.into_iter().unzip();
                for mut o in s.apply_batch(source, evs, Extra::None).await? {
                    o.index = idx[o.index];
                    outs.push(o);
                }
                rest = tail;
            }
            anyhow::Ok(outs)
        });
    let mut all = Vec::with_capacity(total);
    for r in futures::future::join_all(runs).await {
        all.extend(r?);
    }
    all.sort_by_key(|o| o.index);
    Ok(all)
}

/// F2b: the outcome of an event whose `(kind, event_id)` was already
/// processed, given the content hash stored with it: a duplicate if it is
/// the same (or unknown: a row written before hashes were kept), else a
/// conflict naming the id.
pub(crate) fn repeat_outcome(ev: &Event, stored_hash: Option<&str>) -> super::model::Outcome {
    repeat_verdict(ev, stored_hash.is_none_or(|h| h == ev.content_hash()))
}

/// F2b: a repeat of `ev`'s `(kind, event_id)` is a duplicate if `same`
/// (its content hash is the stored one, or none is stored), else a
/// conflict naming the id.
pub(crate) fn repeat_verdict(ev: &Event, same: bool) -> super::model::Outcome {
    use super::model::Outcome;
    if same {
        Outcome::Duplicate
    } else {
        Outcome::Conflict(format!(
            "conflict: {} event_id {:?} was already processed with different content",
            ev.kind().as_str(),
            ev.event_id()
        ))
    }
}

/// Split a batch into the first occurrence of each `(kind, event_id)` and
/// the rest: repeats inside one batch are decided without a database
/// round trip, duplicates if their content is the first's, else conflicts
/// (F2b). Returns (indices of unique valid events, outcomes decided
/// already: in-batch repeats and invalid inputs).
pub(crate) fn presort(events: &[Parsed]) -> (Vec<usize>, Vec<EventOutcome>) {
    let mut seen = std::collections::HashMap::with_capacity_and_hasher(
        events.len(),
        foldhash::fast::RandomState::default(),
    );
    let mut unique = Vec::new();
    let mut decided = Vec::new();
    for (i, p) in events.iter().enumerate() {
        match p {
            Ok(ev) => match seen.entry((ev.kind(), ev.event_id())) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(ev);
                    unique.push(i);
                }
                std::collections::hash_map::Entry::Occupied(o) => {
                    // Most repeats are the very same event: no hash.
                    let first = o.get();
                    let same =
                        first.identical_to(ev) || first.content_digest() == ev.content_digest();
                    decided.push(outcome_of(i, p, repeat_verdict(ev, same)));
                }
            },
            Err(inv) => decided.push(EventOutcome {
                index: i,
                kind: inv.kind.clone(),
                event_id: inv.event_id.clone(),
                outcome: Outcome::Rejected(inv.reason.clone()),
            }),
        }
    }
    (unique, decided)
}

pub(crate) fn outcome_of(index: usize, p: &Parsed, outcome: super::model::Outcome) -> EventOutcome {
    let (kind, event_id) = match p {
        Ok(ev) => (
            Some(ev.kind().as_str().to_owned()),
            Some(ev.event_id().to_owned()),
        ),
        Err(inv) => (inv.kind.clone(), inv.event_id.clone()),
    };
    EventOutcome {
        index,
        kind,
        event_id,
        outcome,
    }
}

/// Shift outcome indices of a sub-batch back to the caller's input positions.
pub(crate) fn offset(mut outs: Vec<EventOutcome>, by: usize) -> Vec<EventOutcome> {
    for o in &mut outs {
        o.index += by;
    }
    outs
}
