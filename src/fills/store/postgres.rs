//! PostgreSQL store: several tickgate instances may share one database.
//!
//! Set-based: one transaction per batch, each step one statement over
//! arrays (`unnest`), so a batch of 1,000 events costs a handful of round
//! trips and one commit. The common batch goes first through the
//! one-statement fast path of `pg_fast` (one round trip, the database
//! checks every assumption); this careful path runs when it does not apply
//! or the database refuses it. Lock order is fixed (processed events sorted by
//! key; then positions, the missing ones created and all of them locked in
//! key order; then deals, sorted), in both paths, so concurrent appliers do
//! not deadlock on the common path; a deadlock or serialization failure
//! that happens anyway is retried (a rare deal that changed since it was
//! peeked may need one more position, locked after the deals).
//!
//! Pool: a few connections of our own. Every transaction runs in a spawned
//! task that owns its connection until COMMIT/ROLLBACK, so a cancelled
//! caller cannot return a connection to the pool mid-transaction; a
//! connection that died is dropped instead of being returned.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use rust_decimal::Decimal;
use tokio::sync::Semaphore;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Row, Statement, Transaction};

use super::pg_fast;
use super::sqlite::{count_side_effects, deal_from_columns, DealCols, SideEffects};
use super::{
    outcome_of, presort, repeat_outcome, AnswerFn, DeadLetterRow, Extra, HeldBust, HttpOutcome,
    OffsetConflict, PositionRow, StoreOptions, StoredAnswer, SweepTable,
};
use crate::fills::metrics::FillsMetrics;
use crate::fills::model::{Event, EventOutcome, Kind, Outcome, Parsed, Side};
use crate::fills::plan::{self, DealKey, DealRow, DealStatus, HistFill, PosKey};
use crate::fills::position::Position;

const SCHEMA_V1: &str = include_str!("schema_postgres.sql");
/// Version 2 (F2b): the content hash of each processed event.
const SCHEMA_V2: &str = "ALTER TABLE processed_events ADD COLUMN content_hash text";
/// Version 3 (F2): fills are keyed by `(account, deal_id)`, not `deal_id`
/// alone. A held BUST's row had no fill account: it takes the BUST's
/// (`bust_account`), the account it waits for. Rows are kept.
const SCHEMA_V3: &str = "
ALTER TABLE fills DROP CONSTRAINT fills_pkey;
UPDATE fills SET account = bust_account WHERE account IS NULL;
ALTER TABLE fills ALTER COLUMN account SET NOT NULL;
ALTER TABLE fills ADD CONSTRAINT fills_pkey PRIMARY KEY (account, deal_id);
DROP INDEX fills_held;
CREATE INDEX fills_held ON fills (account, deal_id) WHERE status = 'bust_held';
";
/// Version 4 (K8): the key of the shared answer cache's MAC, one row,
/// created once (see [`super::ANSWER_MAC_KEY_LEN`]).
const SCHEMA_V4: &str = "
CREATE TABLE answer_mac_key (
    id  integer PRIMARY KEY CHECK (id = 1),
    key bytea   NOT NULL CHECK (length(key) = 32)
);
";
/// Serialises migrations of instances starting together.
const MIGRATION_LOCK: i64 = 0x7469_636b_6761_7465; // "tickgate"
const MAX_ATTEMPTS: usize = 5;
/// From this many events on, dedup and deal rows are probed first and
/// inserted with a plain INSERT (see `sel_processed`).
const PLAIN_INSERT_MIN: usize = 64;

struct Stmts {
    fast: Statement,
    fast_stream: Statement,
    fast_offset: Statement,
    fast_offset_first: Statement,
    sel_processed: Statement,
    ins_processed: Statement,
    ins_processed_oc: Statement,
    ins_deals: Statement,
    ins_deals_oc: Statement,
    next_seqs: Statement,
    peek_deals: Statement,
    sel_deals: Statement,
    ins_pos: Statement,
    sel_pos: Statement,
    upd_pos: Statement,
    sel_hist: Statement,
    upd_deal: Statement,
    del_deal: Statement,
    del_processed: Statement,
    ins_key: Statement,
    ins_key_answer: Statement,
    sel_key: Statement,
    upd_key: Statement,
    upsert_consumer: Statement,
    cas_insert_consumer: Statement,
    cas_update_consumer: Statement,
    sel_consumer: Statement,
}

struct Conn {
    client: Client,
    st: Stmts,
}

struct Pool {
    cfg: tokio_postgres::Config,
    schema: Option<String>,
    idle: Mutex<Vec<Conn>>,
    sem: Arc<Semaphore>,
}

type TxFuture<'c, T> = Pin<Box<dyn Future<Output = anyhow::Result<T>> + Send + 'c>>;
type TxBody<T> = Box<dyn for<'c> FnOnce(&'c mut Conn) -> TxFuture<'c, T> + Send>;

impl Pool {
    async fn open(&self) -> anyhow::Result<Conn> {
        let client = connect(&self.cfg, self.schema.as_deref()).await?;
        let st = prepare(&client).await?;
        Ok(Conn { client, st })
    }

    /// Run `body` on a pooled connection inside a task of its own.
    async fn run<T: Send + 'static>(self: &Arc<Self>, body: TxBody<T>) -> anyhow::Result<T> {
        let pool = self.clone();
        tokio::spawn(async move {
            let _permit = pool.sem.clone().acquire_owned().await?;
            let idle = pool.idle.lock().map(|mut v| v.pop()).unwrap_or(None);
            let mut conn = match idle {
                Some(c) if !c.client.is_closed() => c,
                _ => pool.open().await?,
            };
            let result = body(&mut conn).await;
            // An aborted transaction was rolled back when it was dropped
            // (tokio-postgres queues ROLLBACK before any later query).
            if !conn.client.is_closed() {
                if let Ok(mut v) = pool.idle.lock() {
                    v.push(conn);
                }
            }
            result
        })
        .await
        .context("PostgreSQL worker task")?
    }
}

async fn connect(cfg: &tokio_postgres::Config, schema: Option<&str>) -> anyhow::Result<Client> {
    let (client, connection) = cfg
        .connect(NoTls)
        .await
        .context("connecting to PostgreSQL")?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "fills: PostgreSQL connection closed");
        }
    });
    if let Some(s) = schema {
        client
            .batch_execute(&format!("SET search_path TO {}", quote_ident(s)))
            .await?;
    }
    Ok(client)
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Migrates and returns the shared answer cache's MAC key (K8).
async fn migrate(client: &mut Client) -> anyhow::Result<[u8; super::ANSWER_MAC_KEY_LEN]> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS tickgate_schema_version (version integer PRIMARY KEY)",
    )
    .await?;
    let v: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM tickgate_schema_version",
            &[],
        )
        .await?
        .get(0);
    if v < 1 {
        tx.batch_execute(SCHEMA_V1)
            .await
            .context("applying PostgreSQL schema v1")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (1)",
            &[],
        )
        .await?;
    }
    if v < 2 {
        // F2b: the content hash of each processed event. Rows of an older
        // database keep NULL: a repeat of one of those is a duplicate, as
        // it was (nothing to compare with).
        tx.batch_execute(SCHEMA_V2)
            .await
            .context("applying PostgreSQL schema v2")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (2)",
            &[],
        )
        .await?;
    }
    if v < 3 {
        // F2: the deal key becomes (account, deal_id).
        tx.batch_execute(SCHEMA_V3)
            .await
            .context("applying PostgreSQL schema v3 (fills keyed by account, deal_id)")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (3)",
            &[],
        )
        .await?;
    }
    if v < 4 {
        // K8: the shared answer cache's MAC key lives here, where every
        // instance reads it and a Redis writer cannot.
        tx.batch_execute(SCHEMA_V4)
            .await
            .context("applying PostgreSQL schema v4 (answer MAC key)")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (4)",
            &[],
        )
        .await?;
    }
    // Created once (under the migration lock): the first instance's key
    // stays; a row deleted by hand is replaced.
    let fresh = super::new_answer_mac_key()?;
    tx.execute(
        "INSERT INTO answer_mac_key (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
        &[&fresh.as_slice()],
    )
    .await?;
    let key: Vec<u8> = tx
        .query_one("SELECT key FROM answer_mac_key WHERE id = 1", &[])
        .await?
        .get(0);
    tx.commit().await?;
    super::answer_mac_key_from(&key)
}

async fn prepare(c: &Client) -> anyhow::Result<Stmts> {
    Ok(Stmts {
        fast: c.prepare(pg_fast::FAST_SQL).await?,
        fast_stream: c.prepare(pg_fast::FAST_STREAM_SQL).await?,
        fast_offset: c.prepare(pg_fast::FAST_OFFSET_SQL).await?,
        fast_offset_first: c.prepare(pg_fast::FAST_OFFSET_FIRST_SQL).await?,
        // Which events are processed already: an index probe each. The
        // others are inserted with a plain INSERT (no speculative
        // insertion: one WAL record and one index check less per row than
        // ON CONFLICT). A concurrent insert of the same key makes it wait
        // for that transaction and, if it committed, fail with a unique
        // violation: the transaction is then retried and sees the row.
        sel_processed: c
            .prepare(
                "SELECT p.kind, p.event_id, p.content_hash FROM processed_events p
                 JOIN unnest($1::text[], $2::text[]) AS u(k, e)
                   ON p.kind = u.k AND p.event_id = u.e",
            )
            .await?,
        ins_processed: c
            .prepare(
                "INSERT INTO processed_events (kind, event_id, created_ns, content_hash)
                 SELECT k, e, $3, h FROM unnest($1::text[], $2::text[], $4::text[]) AS u(k, e, h)",
            )
            .await?,
        // After a unique violation (contention), the retry uses these:
        // slower, but they cannot fail on a concurrent insert.
        ins_processed_oc: c
            .prepare(
                "INSERT INTO processed_events (kind, event_id, created_ns, content_hash)
                 SELECT k, e, $3, h FROM unnest($1::text[], $2::text[], $4::text[]) AS u(k, e, h)
                 ON CONFLICT DO NOTHING RETURNING kind, event_id",
            )
            .await?,
        ins_deals_oc: c
            .prepare(
                "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty,
                                    price, exec_ns, bust_event_id, bust_account, bust_ns,
                                    applied_seq, created_ns, updated_ns)
                 SELECT d, st, fe, a, sy, si, q::numeric, p::numeric, t, be, ba, bt, sq, $14, $14
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::text[], $8::text[], $9::int8[], $10::text[],
                             $11::text[], $12::int8[], $13::int8[])
                      AS u(d, st, fe, a, sy, si, q, p, t, be, ba, bt, sq)
                 ON CONFLICT (account, deal_id) DO NOTHING RETURNING account, deal_id",
            )
            .await?,
        ins_deals: c
            .prepare(
                "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty,
                                    price, exec_ns, bust_event_id, bust_account, bust_ns,
                                    applied_seq, created_ns, updated_ns)
                 SELECT d, st, fe, a, sy, si, q::numeric, p::numeric, t, be, ba, bt, sq, $14, $14
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::text[], $8::text[], $9::int8[], $10::text[],
                             $11::text[], $12::int8[], $13::int8[])
                      AS u(d, st, fe, a, sy, si, q, p, t, be, ba, bt, sq)
                 RETURNING account, deal_id",
            )
            .await?,
        next_seqs: c
            .prepare("SELECT nextval('fills_applied_seq') FROM generate_series(1, $1::int)")
            .await?,
        // F2: deals by (account, deal_id); $1 accounts, $2 deal ids.
        peek_deals: c
            .prepare(
                "SELECT f.deal_id, f.status, f.fill_event_id, f.account, f.symbol, f.side,
                        f.qty::text, f.price::text, f.exec_ns, f.bust_event_id, f.bust_account,
                        f.bust_ns
                 FROM fills f JOIN unnest($1::text[], $2::text[]) AS u(a, d)
                      ON f.account = u.a AND f.deal_id = u.d",
            )
            .await?,
        sel_deals: c
            .prepare(
                "SELECT f.deal_id, f.status, f.fill_event_id, f.account, f.symbol, f.side,
                        f.qty::text, f.price::text, f.exec_ns, f.bust_event_id, f.bust_account,
                        f.bust_ns
                 FROM fills f JOIN unnest($1::text[], $2::text[]) AS u(a, d)
                      ON f.account = u.a AND f.deal_id = u.d
                 ORDER BY f.account, f.deal_id FOR UPDATE OF f",
            )
            .await?,
        ins_pos: c
            .prepare(
                "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, updated_ns)
                 SELECT a, s, 0, 0, 0, $3 FROM unnest($1::text[], $2::text[]) AS u(a, s)
                 ORDER BY a, s ON CONFLICT DO NOTHING",
            )
            .await?,
        sel_pos: c
            .prepare(
                "SELECT p.account, p.symbol, p.qty::text, p.avg_price::text, p.realized_pnl::text
                 FROM positions p JOIN unnest($1::text[], $2::text[]) AS u(a, s)
                      ON p.account = u.a AND p.symbol = u.s
                 ORDER BY p.account, p.symbol FOR UPDATE OF p",
            )
            .await?,
        upd_pos: c
            .prepare(
                "UPDATE positions p SET qty = u.q::numeric, avg_price = u.ap::numeric,
                                        realized_pnl = u.r::numeric, updated_ns = $6
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                      AS u(a, s, q, ap, r)
                 WHERE p.account = u.a AND p.symbol = u.s",
            )
            .await?,
        sel_hist: c
            .prepare(
                "SELECT f.account, f.symbol, f.deal_id, f.side, f.qty::text, f.price::text
                 FROM fills f JOIN unnest($1::text[], $2::text[]) AS u(a, s)
                      ON f.account = u.a AND f.symbol = u.s
                 WHERE f.status = 'applied' ORDER BY f.applied_seq",
            )
            .await?,
        upd_deal: c
            .prepare(
                "UPDATE fills SET status = $2, fill_event_id = $3, symbol = $5, side = $6, qty = CAST($7::text AS numeric),
                        price = CAST($8::text AS numeric), exec_ns = $9, bust_event_id = $10,
                        bust_account = $11, bust_ns = $12,
                        applied_seq = COALESCE($13::int8, applied_seq),
                        updated_ns = $14
                 WHERE account = $4 AND deal_id = $1",
            )
            .await?,
        del_deal: c
            .prepare("DELETE FROM fills WHERE account = $1 AND deal_id = $2")
            .await?,
        del_processed: c
            .prepare("DELETE FROM processed_events WHERE kind = $1 AND event_id = $2")
            .await?,
        ins_key: c
            .prepare(
                "INSERT INTO idempotency_keys (client, key, request_hash, created_ns)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1",
            )
            .await?,
        // The fast path's key row, with its answer: a plain insert (an
        // existing key fails it; a concurrent first attempt's uncommitted
        // row makes it wait, K5).
        ins_key_answer: c
            .prepare(
                "INSERT INTO idempotency_keys (client, key, request_hash, status, body, created_ns)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .await?,
        sel_key: c
            .prepare(
                "SELECT request_hash, status, body FROM idempotency_keys
                 WHERE client = $1 AND key = $2",
            )
            .await?,
        upd_key: c
            .prepare(
                "UPDATE idempotency_keys SET status = $3, body = $4 WHERE client = $1 AND key = $2",
            )
            .await?,
        upsert_consumer: c
            .prepare(
                "INSERT INTO consumer_positions (stream, consumer, last_seq, updated_ns)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (stream, consumer) DO UPDATE
                 SET last_seq = GREATEST(consumer_positions.last_seq, EXCLUDED.last_seq),
                     updated_ns = EXCLUDED.updated_ns",
            )
            .await?,
        cas_insert_consumer: c
            .prepare(
                "INSERT INTO consumer_positions (stream, consumer, last_seq, updated_ns)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (stream, consumer) DO NOTHING",
            )
            .await?,
        cas_update_consumer: c
            .prepare(
                "UPDATE consumer_positions SET last_seq = $3, updated_ns = $5
                 WHERE stream = $1 AND consumer = $2 AND last_seq = $4 AND last_seq < $3",
            )
            .await?,
        sel_consumer: c
            .prepare("SELECT last_seq FROM consumer_positions WHERE stream = $1 AND consumer = $2")
            .await?,
    })
}

fn retryable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.code())
            .is_some_and(|c| {
                *c == SqlState::T_R_DEADLOCK_DETECTED
                    || *c == SqlState::T_R_SERIALIZATION_FAILURE
                    // A concurrent transaction inserted the same event or
                    // deal between our check and our plain insert (see
                    // `sel_processed`): the retry sees its row.
                    || *c == SqlState::UNIQUE_VIOLATION
            })
    })
}

fn is_unique_violation(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.code())
            .is_some_and(|c| *c == SqlState::UNIQUE_VIOLATION)
    })
}

fn is_lock_timeout(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

#[derive(Clone)]
pub struct PgStore {
    pool: Arc<Pool>,
    opts: StoreOptions,
    metrics: FillsMetrics,
    /// K8: the shared answer cache's MAC key, read at connect.
    mac_key: [u8; super::ANSWER_MAC_KEY_LEN],
    /// Hints for the one-statement fast path (`pg_fast`): checked there.
    cache: Arc<Mutex<pg_fast::Cache>>,
    fast: Arc<FastGate>,
}

/// After a fast attempt fell back to the careful path, the next batches
/// skip it (1, 2, 4 ... 64 of them while it keeps failing): a workload of
/// old repeats or several writers of one position should not pay for a
/// statement that fails every time.
#[derive(Default)]
struct FastGate {
    skip: AtomicU32,
    streak: AtomicU32,
    committed: AtomicU64,
    fallbacks: AtomicU64,
    /// Refusals that were deadlocks: none are expected (both paths take
    /// positions in one order), so each one is logged.
    deadlocks: AtomicU64,
}

impl FastGate {
    fn allowed(&self) -> bool {
        self.skip
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_sub(1))
            .is_err()
    }
    fn succeeded(&self) {
        self.streak.store(0, Ordering::Relaxed);
        self.committed.fetch_add(1, Ordering::Relaxed);
    }
    fn failed(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        let n = self.streak.fetch_add(1, Ordering::Relaxed).min(6);
        self.skip.store(1 << n, Ordering::Relaxed);
    }
}

/// Result of one fast attempt: the outcomes of a batch, or an HTTP
/// batch's answer.
enum Fast<T> {
    Done(T),
    /// Not a fast batch (a BUST, ...; for HTTP also a key in use already:
    /// replay, hash mismatch): the careful path decides.
    Careful,
    /// The database refused an assumption (nothing was written): take
    /// the careful path. `deadlock`: the refusal was a detected deadlock.
    Refused {
        deadlock: bool,
    },
}

/// Whether the database's error is a detected deadlock.
fn is_deadlock(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED)
}

impl PgStore {
    /// Connect (URL or key=value string), migrate, and keep up to
    /// `opts.pg_pool_size` connections.
    pub async fn connect(
        url: &str,
        opts: StoreOptions,
        metrics: FillsMetrics,
    ) -> anyhow::Result<PgStore> {
        let cfg = tokio_postgres::Config::from_str(url).context("parsing the PostgreSQL URL")?;
        let pool = Arc::new(Pool {
            cfg,
            schema: opts.pg_schema.clone(),
            idle: Mutex::new(Vec::new()),
            sem: Arc::new(Semaphore::new(opts.pg_pool_size.max(1))),
        });
        let mut first = connect(&pool.cfg, pool.schema.as_deref()).await?;
        let mac_key = migrate(&mut first).await?;
        let st = prepare(&first).await?;
        if let Ok(mut v) = pool.idle.lock() {
            v.push(Conn { client: first, st });
        }
        Ok(PgStore {
            pool,
            opts,
            metrics,
            mac_key,
            cache: Arc::default(),
            fast: Arc::default(),
        })
    }

    /// Fast attempts the database ended as deadlocks (each then took the
    /// careful path; tests and benchmarks).
    #[doc(hidden)]
    pub fn fast_path_deadlocks(&self) -> u64 {
        self.fast.deadlocks.load(Ordering::Relaxed)
    }

    /// Batches committed by the fast path, and fast attempts that went to
    /// the careful path (tests and benchmarks).
    #[doc(hidden)]
    pub fn fast_path_counts(&self) -> (u64, u64) {
        (
            self.fast.committed.load(Ordering::Relaxed),
            self.fast.fallbacks.load(Ordering::Relaxed),
        )
    }

    /// After COMMIT: the positions the batch wrote and its applied FILLs.
    fn remember(&self, outs: &[EventOutcome], finals: &[(PosKey, Position)]) {
        if let Ok(mut c) = self.cache.lock() {
            c.store_positions(
                finals
                    .iter()
                    .map(|((a, s), p)| (a.as_str(), s.as_str(), *p)),
            );
            c.store_events(outs.iter().filter_map(|o| {
                (o.outcome == Outcome::Applied && o.kind.as_deref() == Some("FILL"))
                    .then_some(o.event_id.as_deref())
                    .flatten()
                    .map(|id| (id, None))
            }));
        }
    }

    /// The batch's outcome is unknown: drop its positions from the cache.
    fn forget(&self, events: &[Parsed]) {
        if let Ok(mut c) = self.cache.lock() {
            c.forget(events);
        }
    }

    /// The one-statement path (`pg_fast`), if the batch is a fast one.
    async fn apply_fast(
        &self,
        events: &Arc<Vec<Parsed>>,
        extra: &Extra,
    ) -> anyhow::Result<Fast<Vec<EventOutcome>>> {
        let (events, extra, cache, clock, m) = (
            events.clone(),
            extra.clone(),
            self.cache.clone(),
            self.opts.clock.clone(),
            self.metrics.clone(),
        );
        let body: TxBody<Fast<Vec<EventOutcome>>> = Box::new(move |c: &mut Conn| {
            Box::pin(async move {
                let Some(plan) = pg_fast::plan_locked(&events, &cache)? else {
                    return Ok(Fast::Careful);
                };
                let timer = m.tx_seconds.start_timer();
                let now = clock();
                let r = match &extra {
                    Extra::None => plan.execute(&c.client, &c.st.fast, now, &[]).await,
                    Extra::Stream {
                        stream,
                        consumer,
                        last_seq,
                    } => {
                        let seq = i64::try_from(*last_seq).context("stream sequence too large")?;
                        plan.execute(&c.client, &c.st.fast_stream, now, &[stream, consumer, &seq])
                            .await
                    }
                    Extra::Offset {
                        stream,
                        consumer,
                        expected,
                        last,
                        before_commit,
                    } => {
                        // The hook dead-letters rejected events before the
                        // commit; a batch with any takes the careful path,
                        // so that a refusal here cannot produce its dead
                        // letters twice. With none the hook has nothing to
                        // write, and still runs first, as it does there.
                        if plan
                            .outcomes
                            .iter()
                            .any(|o| matches!(o.outcome, Outcome::Rejected(_)))
                        {
                            return Ok(Fast::Careful);
                        }
                        if let Some(hook) = before_commit {
                            hook(plan.outcomes.clone()).await?;
                        }
                        match expected {
                            Some(e) => {
                                plan.execute(
                                    &c.client,
                                    &c.st.fast_offset,
                                    now,
                                    &[stream, consumer, last, e],
                                )
                                .await
                            }
                            None => {
                                plan.execute(
                                    &c.client,
                                    &c.st.fast_offset_first,
                                    now,
                                    &[stream, consumer, last],
                                )
                                .await
                            }
                        }
                    }
                };
                match r {
                    Ok(n) => {
                        timer.observe_duration();
                        plan.committed(n, &cache)?;
                        Ok(Fast::Done(plan.outcomes))
                    }
                    // The server refused the statement: it rolled back.
                    Err(e) if e.as_db_error().is_some() => {
                        tracing::debug!(error = %e, "fills: fast path refused, careful path");
                        Ok(Fast::Refused {
                            deadlock: is_deadlock(&e),
                        })
                    }
                    // Connection lost: the commit may or may not have happened.
                    Err(e) => Err(anyhow::Error::new(e).context("PostgreSQL fast path")),
                }
            })
        });
        self.pool.run(body).await
    }

    pub fn metrics(&self) -> &FillsMetrics {
        &self.metrics
    }

    /// K8: the shared answer cache's MAC key, read from the database at connect.
    pub fn answer_mac_key(&self) -> [u8; super::ANSWER_MAC_KEY_LEN] {
        self.mac_key
    }

    /// The store's transaction size for `Store::apply_events`.
    pub(crate) fn max_batch(&self) -> usize {
        self.opts.max_batch
    }

    /// Connections that `Store::apply_events` uses at once (the pool size).
    pub(crate) fn lanes(&self) -> usize {
        self.opts.pg_pool_size.max(1)
    }

    pub(crate) async fn apply_batch(
        &self,
        source: &str,
        events: Vec<Parsed>,
        extra: Extra,
    ) -> anyhow::Result<Vec<EventOutcome>> {
        let events = Arc::new(events);
        let source = source.to_owned();
        let clock = self.opts.clock.clone();
        let metrics = self.metrics.clone();
        // The one-statement path first (a partition batch's offset moves by
        // compare-and-set in the same statement).
        if self.opts.pg_fast_path && self.fast.allowed() {
            let r = self.apply_fast(&events, &extra).await;
            if let Some(outs) = self.settle_fast(r, &events)? {
                self.fast.succeeded();
                self.metrics.record(&source, &outs);
                return Ok(outs);
            }
        }
        let batch = events.clone();
        let mut attempt = 0;
        let mut contended = false;
        loop {
            attempt += 1;
            let (events, clock, extra, m) = (
                events.clone(),
                clock.clone(),
                extra.clone(),
                metrics.clone(),
            );
            let body: TxBody<Applied> = Box::new(move |c: &mut Conn| {
                Box::pin(async move {
                    let timer = m.tx_seconds.start_timer();
                    let tx = c.client.transaction().await?;
                    let now = clock();
                    if let Extra::Offset {
                        stream,
                        consumer,
                        expected,
                        last,
                        ..
                    } = &extra
                    {
                        // First: the row lock serialises instances on one
                        // partition, and a loser does no work.
                        let n = match expected {
                            None => {
                                tx.execute(
                                    &c.st.cas_insert_consumer,
                                    &[stream, consumer, last, &now],
                                )
                                .await?
                            }
                            Some(e) => {
                                tx.execute(
                                    &c.st.cas_update_consumer,
                                    &[stream, consumer, last, e, &now],
                                )
                                .await?
                            }
                        };
                        if n != 1 {
                            let stored = tx
                                .query_opt(&c.st.sel_consumer, &[stream, consumer])
                                .await?
                                .map(|r| r.get::<_, i64>(0));
                            return Err(OffsetConflict {
                                stream: stream.clone(),
                                consumer: consumer.clone(),
                                expected: *expected,
                                stored,
                            }
                            .into());
                        }
                    }
                    let r = apply_in_tx(&tx, &c.st, &events, now, contended).await?;
                    if let Extra::Offset {
                        before_commit: Some(hook),
                        ..
                    } = &extra
                    {
                        hook(r.0.clone()).await?;
                    }
                    if let Extra::Stream {
                        stream,
                        consumer,
                        last_seq,
                    } = &extra
                    {
                        let seq = i64::try_from(*last_seq).context("stream sequence too large")?;
                        tx.execute(&c.st.upsert_consumer, &[stream, consumer, &seq, &now])
                            .await?;
                    }
                    tx.commit().await.context("PostgreSQL commit")?;
                    timer.observe_duration();
                    Ok(r)
                })
            });
            match self.pool.run(body).await {
                Ok((outs, se, finals)) => {
                    self.remember(&outs, &finals);
                    self.metrics.record(&source, &outs);
                    count_side_effects(&self.metrics, &se);
                    return Ok(outs);
                }
                Err(e) if attempt < MAX_ATTEMPTS && retryable(&e) => {
                    self.metrics.tx_retries.inc();
                    contended |= is_unique_violation(&e);
                    tracing::debug!(error = %e, attempt, "fills: retrying transaction");
                }
                Err(e) => {
                    self.forget(&batch);
                    return Err(e);
                }
            }
        }
    }

    /// What a fast attempt leaves to its caller: `Some` when it decided
    /// the batch, `None` for the careful path (a refusal counts against
    /// the fast path); an error forgets the batch's cache hints, since
    /// the commit may or may not have happened.
    fn settle_fast<T>(
        &self,
        r: anyhow::Result<Fast<T>>,
        events: &[Parsed],
    ) -> anyhow::Result<Option<T>> {
        match r {
            Ok(Fast::Done(t)) => Ok(Some(t)),
            Ok(Fast::Careful) => Ok(None),
            Ok(Fast::Refused { deadlock }) => {
                self.fast.failed();
                if deadlock {
                    self.fast.deadlocks.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("fills: fast path statement ended by a deadlock, careful path");
                }
                Ok(None)
            }
            Err(e) => {
                self.forget(events);
                Err(e)
            }
        }
    }

    /// The fast path for an HTTP batch: one explicit transaction sent as
    /// one pipeline (one round trip): BEGIN with the K5 lock timeout, the
    /// key row with its answer (plain insert, first, so the key is the
    /// lock as in the careful path), the fast statement, COMMIT. The
    /// answer is built from the plan's outcomes, which are final if the
    /// transaction commits, and returned only after COMMIT. A failed
    /// statement aborts the transaction (COMMIT then rolls back); every
    /// result is checked.
    async fn apply_http_fast(
        &self,
        ids: &Arc<(String, String, String)>,
        events: &Arc<Vec<Parsed>>,
        build_answer: &AnswerFn,
    ) -> anyhow::Result<Fast<HttpOutcome>> {
        let (ids, events, build_answer, cache, clock, m) = (
            ids.clone(),
            events.clone(),
            build_answer.clone(),
            self.cache.clone(),
            self.opts.clock.clone(),
            self.metrics.clone(),
        );
        let wait_ms = self.opts.key_wait.as_millis().max(1);
        let body: TxBody<Fast<HttpOutcome>> = Box::new(move |c: &mut Conn| {
            Box::pin(async move {
                let (client, key, hash) = &*ids;
                let Some(plan) = pg_fast::plan_locked(&events, &cache)? else {
                    return Ok(Fast::Careful);
                };
                let (status, answer) = build_answer(&plan.outcomes);
                let timer = m.tx_seconds.start_timer();
                let now = clock();
                let begin = format!("BEGIN; SET LOCAL lock_timeout = '{wait_ms}ms'");
                let st = i32::from(status);
                let key_row: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                    [client, key, hash, &st, &answer, &now];
                let (b, k, r, f, cm) = futures::join!(
                    c.client.batch_execute(&begin),
                    c.client.execute(&c.st.ins_key_answer, &key_row),
                    c.client.batch_execute("SET LOCAL lock_timeout = 0"),
                    plan.execute(&c.client, &c.st.fast, now, &[]),
                    c.client.batch_execute("COMMIT"),
                );
                let (f, n) = match f {
                    Ok(n) => (Ok(()), n),
                    Err(e) => (Err(e), -1),
                };
                let mut res = [b, k.map(|_| ()), r, f, cm];
                // Connection lost: the commit may or may not have happened.
                if let Some(i) = res
                    .iter()
                    .position(|x| x.as_ref().is_err_and(|e| e.as_db_error().is_none()))
                {
                    if let Err(e) = std::mem::replace(&mut res[i], Ok(())) {
                        return Err(anyhow::Error::new(e).context("PostgreSQL fast path"));
                    }
                }
                let [_, k, _, f, cm] = res;
                match &k {
                    // The key is in use (replay, hash mismatch): careful path.
                    Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                        return Ok(Fast::Careful)
                    }
                    // K5: the first attempt still holds the key after key_wait.
                    Err(e) if is_lock_timeout(e) => {
                        return Ok(Fast::Done(HttpOutcome::InProgressTimeout))
                    }
                    _ => {}
                }
                // A refused statement aborted the transaction, and COMMIT
                // then rolled it back; a failed COMMIT rolled it back too.
                if let Err(e) = k.and(f).and(cm) {
                    tracing::debug!(error = %e, "fills: fast path refused, careful path");
                    return Ok(Fast::Refused {
                        deadlock: is_deadlock(&e),
                    });
                }
                timer.observe_duration();
                plan.committed(n, &cache)?;
                Ok(Fast::Done(HttpOutcome::Fresh {
                    status,
                    body: answer,
                    outcomes: plan.outcomes,
                }))
            })
        });
        self.pool.run(body).await
    }

    pub async fn apply_http_batch(
        &self,
        client: &str,
        key: &str,
        request_hash: &str,
        events: Vec<Parsed>,
        build_answer: AnswerFn,
    ) -> anyhow::Result<HttpOutcome> {
        let events = Arc::new(events);
        let ids = Arc::new((client.to_owned(), key.to_owned(), request_hash.to_owned()));
        let wait_ms = self.opts.key_wait.as_millis().max(1);
        let clock = self.opts.clock.clone();
        let batch = events.clone();
        if self.opts.pg_fast_path && self.fast.allowed() {
            let r = self.apply_http_fast(&ids, &events, &build_answer).await;
            if let Some(out) = self.settle_fast(r, &batch)? {
                if let HttpOutcome::Fresh { outcomes, .. } = &out {
                    self.fast.succeeded();
                    self.metrics.record("http", outcomes);
                }
                return Ok(out);
            }
        }
        let mut attempt = 0;
        let mut contended = false;
        loop {
            attempt += 1;
            let (events, ids, clock, build_answer, m) = (
                events.clone(),
                ids.clone(),
                clock.clone(),
                build_answer.clone(),
                self.metrics.clone(),
            );
            let body: TxBody<(HttpOutcome, SideEffects, Finals)> = Box::new(move |c: &mut Conn| {
                Box::pin(async move {
                    let (client, key, hash) = &*ids;
                    let timer = m.tx_seconds.start_timer();
                    let tx = c.client.transaction().await?;
                    let now = clock();
                    // K5: the key row is the lock. A concurrent first attempt
                    // holds it uncommitted; our insert waits for its commit
                    // (then conflicts and we replay) at most key_wait.
                    tx.batch_execute(&format!("SET LOCAL lock_timeout = '{wait_ms}ms'"))
                        .await?;
                    let inserted = match tx.query(&c.st.ins_key, &[client, key, hash, &now]).await {
                        Ok(rows) => !rows.is_empty(),
                        Err(e) if is_lock_timeout(&e) => {
                            return Ok((
                                HttpOutcome::InProgressTimeout,
                                SideEffects::default(),
                                vec![],
                            ))
                        }
                        Err(e) => return Err(e.into()),
                    };
                    tx.batch_execute("SET LOCAL lock_timeout = 0").await?;
                    if !inserted {
                        let row = tx.query_one(&c.st.sel_key, &[client, key]).await?;
                        let stored_hash: String = row.get(0);
                        tx.commit().await?;
                        if &stored_hash != hash {
                            return Ok((HttpOutcome::HashMismatch, SideEffects::default(), vec![]));
                        }
                        let status: Option<i32> = row.get(1);
                        let body: Option<Vec<u8>> = row.get(2);
                        return Ok((
                            HttpOutcome::Replayed {
                                status: status.and_then(|s| u16::try_from(s).ok()).unwrap_or(500),
                                body: body.unwrap_or_default(),
                            },
                            SideEffects::default(),
                            vec![],
                        ));
                    }
                    let (outs, se, finals) =
                        apply_in_tx(&tx, &c.st, &events, now, contended).await?;
                    let (status, body) = build_answer(&outs);
                    tx.execute(&c.st.upd_key, &[client, key, &i32::from(status), &body])
                        .await?;
                    tx.commit().await.context("PostgreSQL commit")?;
                    timer.observe_duration();
                    Ok((
                        HttpOutcome::Fresh {
                            status,
                            body,
                            outcomes: outs,
                        },
                        se,
                        finals,
                    ))
                })
            });
            match self.pool.run(body).await {
                Ok((out, se, finals)) => {
                    if let HttpOutcome::Fresh { outcomes, .. } = &out {
                        self.remember(outcomes, &finals);
                        self.metrics.record("http", outcomes);
                        count_side_effects(&self.metrics, &se);
                    }
                    return Ok(out);
                }
                Err(e) if attempt < MAX_ATTEMPTS && retryable(&e) => {
                    self.metrics.tx_retries.inc();
                    contended |= is_unique_violation(&e);
                }
                Err(e) => {
                    self.forget(&batch);
                    return Err(e);
                }
            }
        }
    }

    pub async fn get_stored_answer(
        &self,
        client: &str,
        key: &str,
    ) -> anyhow::Result<Option<StoredAnswer>> {
        let (client, key) = (client.to_owned(), key.to_owned());
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(async move {
                    let row = c.client.query_opt(&c.st.sel_key, &[&client, &key]).await?;
                    Ok(row.and_then(|r| {
                        let status: Option<i32> = r.get(1);
                        Some(StoredAnswer {
                            request_hash: r.get(0),
                            status: u16::try_from(status?).ok()?,
                            body: r.get::<_, Option<Vec<u8>>>(2).unwrap_or_default(),
                        })
                    }))
                })
            }))
            .await
    }

    pub async fn consumer_position(
        &self,
        stream: &str,
        consumer: &str,
    ) -> anyhow::Result<Option<u64>> {
        let (stream, consumer) = (stream.to_owned(), consumer.to_owned());
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(async move {
                    let row = c
                        .client
                        .query_opt(
                            "SELECT last_seq FROM consumer_positions
                             WHERE stream = $1 AND consumer = $2",
                            &[&stream, &consumer],
                        )
                        .await?;
                    Ok(row.map(|r| r.get::<_, i64>(0) as u64))
                })
            }))
            .await
    }

    pub async fn positions(
        &self,
        accounts: Option<Vec<String>>,
    ) -> anyhow::Result<Vec<PositionRow>> {
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(async move {
                    let rows = match &accounts {
                        None => {
                            c.client
                                .query(
                                    "SELECT account, symbol, qty::text, avg_price::text,
                                            realized_pnl::text
                                     FROM positions ORDER BY account, symbol",
                                    &[],
                                )
                                .await?
                        }
                        Some(a) => {
                            c.client
                                .query(
                                    "SELECT account, symbol, qty::text, avg_price::text,
                                            realized_pnl::text
                                     FROM positions WHERE account = ANY($1::text[])
                                     ORDER BY account, symbol",
                                    &[a],
                                )
                                .await?
                        }
                    };
                    rows.iter()
                        .map(|r| {
                            Ok(PositionRow {
                                account: r.get(0),
                                symbol: r.get(1),
                                position: pos_of(r, 2)?,
                            })
                        })
                        .collect()
                })
            }))
            .await
    }

    pub async fn held_busts(&self) -> anyhow::Result<Vec<HeldBust>> {
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(async move {
                    let rows = c
                        .client
                        .query(
                            "SELECT deal_id, bust_event_id, bust_account FROM fills
                             WHERE status = 'bust_held' ORDER BY account, deal_id",
                            &[],
                        )
                        .await?;
                    Ok(rows
                        .iter()
                        .map(|r| HeldBust {
                            deal_id: r.get(0),
                            event_id: r.get(1),
                            account: r.get(2),
                        })
                        .collect())
                })
            }))
            .await
    }

    pub async fn dead_letters(&self) -> anyhow::Result<Vec<DeadLetterRow>> {
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(async move {
                    let rows = c
                        .client
                        .query(
                            "SELECT source, kind, event_id, deal_id, reason FROM dead_letters
                             ORDER BY id",
                            &[],
                        )
                        .await?;
                    Ok(rows
                        .iter()
                        .map(|r| DeadLetterRow {
                            source: r.get(0),
                            kind: r.get(1),
                            event_id: r.get(2),
                            deal_id: r.get(3),
                            reason: r.get(4),
                        })
                        .collect())
                })
            }))
            .await
    }

    pub async fn delete_expired_chunk(
        &self,
        table: SweepTable,
        cutoff_ns: i64,
        limit: usize,
    ) -> anyhow::Result<usize> {
        // F5: the sub-select walks the created_ns index and picks at most
        // `limit` rows; the DELETE finds them by primary key.
        let sql = match table {
            SweepTable::ProcessedEvents => {
                "DELETE FROM processed_events WHERE (kind, event_id) IN
                 (SELECT kind, event_id FROM processed_events WHERE created_ns < $1 LIMIT $2)"
            }
            SweepTable::IdempotencyKeys => {
                "DELETE FROM idempotency_keys WHERE (client, key) IN
                 (SELECT client, key FROM idempotency_keys WHERE created_ns < $1 LIMIT $2)"
            }
        };
        let limit = limit as i64;
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(
                    async move { Ok(c.client.execute(sql, &[&cutoff_ns, &limit]).await? as usize) },
                )
            }))
            .await
    }

    pub async fn count_rows(&self, table: SweepTable) -> anyhow::Result<u64> {
        let sql = format!("SELECT count(*) FROM {}", table.name());
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(
                    async move { Ok(c.client.query_one(&sql, &[]).await?.get::<_, i64>(0) as u64) },
                )
            }))
            .await
    }

    /// Raw SQL on a pooled connection (tests and benchmarks only).
    #[doc(hidden)]
    pub async fn execute_batch(&self, sql: &str) -> anyhow::Result<()> {
        let sql = sql.to_owned();
        self.pool
            .run(Box::new(move |c: &mut Conn| {
                Box::pin(async move { Ok(c.client.batch_execute(&sql).await?) })
            }))
            .await
    }
}

fn dec(s: &str) -> anyhow::Result<Decimal> {
    Decimal::from_str(s).with_context(|| format!("stored decimal {s:?}"))
}

fn pos_of(r: &Row, at: usize) -> anyhow::Result<Position> {
    Ok(Position {
        qty: dec(r.get(at))?,
        avg_price: dec(r.get(at + 1))?,
        realized_pnl: dec(r.get(at + 2))?,
    })
}

/// A deal row with its key `(account, deal_id)` (F2).
fn deal_of(r: &Row) -> anyhow::Result<(DealKey, DealRow)> {
    let deal_id: String = r.get(0);
    let account: String = r.get(3);
    let row = deal_from_columns(
        deal_id.clone(),
        r.get(1),
        r.get(2),
        Some(account.clone()),
        r.get(4),
        r.get(5),
        r.get(6),
        r.get(7),
        r.get(8),
        r.get(9),
        r.get(10),
        r.get(11),
    )?;
    Ok(((account, deal_id), row))
}

/// Create missing position rows of `keys` and lock them all, in key order.
async fn lock_positions(
    tx: &Transaction<'_>,
    st: &Stmts,
    mut keys: Vec<PosKey>,
    now: i64,
    positions: &mut HashMap<PosKey, Position>,
    locked: &mut HashSet<PosKey>,
) -> anyhow::Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    keys.sort();
    let ka: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
    let ks: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
    tx.execute(&st.ins_pos, &[&ka, &ks, &now]).await?;
    for r in tx.query(&st.sel_pos, &[&ka, &ks]).await? {
        positions.insert((r.get(0), r.get(1)), pos_of(&r, 2)?);
    }
    locked.extend(keys);
    Ok(())
}

/// The final positions a batch wrote.
type Finals = Vec<(PosKey, Position)>;
/// Outcomes, side effects, and the final positions the batch wrote.
type Applied = (Vec<EventOutcome>, SideEffects, Finals);

/// F1-F3 for one batch inside an open transaction, set-based.
async fn apply_in_tx(
    tx: &Transaction<'_>,
    st: &Stmts,
    events: &[Parsed],
    now: i64,
    contended: bool,
) -> anyhow::Result<Applied> {
    let (unique, mut outs) = presort(events);
    let valid: Vec<(usize, &Event)> = unique
        .iter()
        .filter_map(|&i| events[i].as_ref().ok().map(|e| (i, e)))
        .collect();

    // F1: insert all (kind, event_id) sorted (a fixed lock order between
    // concurrent appliers); RETURNING names the new ones.
    let mut sorted: Vec<&Event> = valid.iter().map(|&(_, e)| e).collect();
    sorted.sort_by(|a, b| (a.kind(), a.event_id()).cmp(&(b.kind(), b.event_id())));
    let kinds: Vec<&str> = sorted.iter().map(|e| e.kind().as_str()).collect();
    let ids: Vec<&str> = sorted.iter().map(|e| e.event_id()).collect();
    // F2b: each event's content hash is kept with its processed row.
    let hashes: Vec<String> = sorted.iter().map(|e| e.content_hash()).collect();
    // Small batches (a stream fetch of a few messages) take the single
    // ON CONFLICT statement: one round trip less matters more there than
    // the per-row saving of the probe.
    let oc = contended || sorted.len() < PLAIN_INSERT_MIN;
    let fresh: HashSet<(String, String)> = if oc {
        tx.query(&st.ins_processed_oc, &[&kinds, &ids, &now, &hashes])
            .await?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect()
    } else {
        let seen: HashSet<(String, String)> = tx
            .query(&st.sel_processed, &[&kinds, &ids])
            .await?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        let mut fresh = HashSet::with_capacity(sorted.len());
        let (mut nk, mut ni, mut nh) = (
            Vec::with_capacity(sorted.len()),
            Vec::with_capacity(sorted.len()),
            Vec::with_capacity(sorted.len()),
        );
        for ((k, e), h) in kinds.iter().zip(&ids).zip(&hashes) {
            let key = ((*k).to_owned(), (*e).to_owned());
            if !seen.contains(&key) {
                nk.push(*k);
                ni.push(*e);
                nh.push(h.as_str());
                fresh.insert(key);
            }
        }
        if !nk.is_empty() {
            tx.execute(&st.ins_processed, &[&nk, &ni, &now, &nh])
                .await?;
        }
        fresh
    };
    let mut new_events: Vec<(usize, &Event)> = Vec::with_capacity(fresh.len());
    let mut repeats: Vec<(usize, &Event)> = Vec::new();
    for (i, e) in valid {
        if fresh.contains(&(e.kind().as_str().to_owned(), e.event_id().to_owned())) {
            new_events.push((i, e));
        } else {
            repeats.push((i, e));
        }
    }
    if !repeats.is_empty() {
        // F2b: a repeat is a duplicate only with the same content hash.
        let rk: Vec<&str> = repeats.iter().map(|(_, e)| e.kind().as_str()).collect();
        let ri: Vec<&str> = repeats.iter().map(|(_, e)| e.event_id()).collect();
        let stored: HashMap<(String, String), Option<String>> = tx
            .query(&st.sel_processed, &[&rk, &ri])
            .await?
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get(2)))
            .collect();
        for (i, e) in repeats {
            let key = (e.kind().as_str().to_owned(), e.event_id().to_owned());
            let hash = stored.get(&key).cloned().flatten();
            outs.push(outcome_of(
                i,
                &events[i],
                repeat_outcome(e, hash.as_deref()),
            ));
        }
    }

    // Positions first, locked in key order (a fixed lock order; and the
    // application sequence below is drawn under these locks, so it orders
    // fills of one position as they were applied). A missing row cannot be
    // locked, so rows are created first. A BUST's position is its fill's:
    // peek at those deals (no lock; re-checked after the deal step). F2: a
    // BUST's deal is its (account, deal_id).
    let mut bust_deals: Vec<(&str, &str)> = new_events
        .iter()
        .filter(|(_, e)| e.kind() == Kind::Bust)
        .map(|(_, e)| e.deal_key())
        .collect();
    bust_deals.sort_unstable();
    bust_deals.dedup();
    let mut peeked: HashMap<DealKey, Option<DealRow>> = HashMap::new();
    if !bust_deals.is_empty() {
        let (ba, bd): (Vec<&str>, Vec<&str>) = bust_deals.iter().copied().unzip();
        for r in tx.query(&st.peek_deals, &[&ba, &bd]).await? {
            let (id, row) = deal_of(&r)?;
            peeked.insert(id, Some(row));
        }
    }
    let mut positions: HashMap<PosKey, Position> = HashMap::new();
    let mut locked: HashSet<PosKey> = HashSet::new();
    lock_positions(
        tx,
        st,
        plan::position_keys(&new_events, &peeked),
        now,
        &mut positions,
        &mut locked,
    )
    .await?;

    // Application sequence (a BUST replays a position's fills in this
    // order): one number per new FILL event, in event order, drawn under
    // the position locks. The planner applies fills in event order, so the
    // fill that is applied gets its place even when it is not its deal's
    // first row (a FILL after a rejected FILL of the same deal).
    let mut fill_seq: HashMap<usize, i64> = HashMap::new();
    let fill_events: Vec<usize> = new_events
        .iter()
        .filter(|(_, e)| e.kind() == Kind::Fill)
        .map(|&(i, _)| i)
        .collect();
    if !fill_events.is_empty() {
        let n = i32::try_from(fill_events.len()).context("batch too large")?;
        let mut seqs: Vec<i64> = tx
            .query(&st.next_seqs, &[&n])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        seqs.sort_unstable();
        fill_seq.extend(fill_events.into_iter().zip(seqs));
    }

    // Each deal's first new event creates its row; the unique
    // (account, deal_id) decides (F2/F3) and serialises concurrent writers
    // of one deal. Rows go in (account, deal_id) order (lock order).
    let mut firsts: Vec<(DealKey, DealRow, Option<i64>)> = Vec::new();
    let mut seen = HashSet::new();
    for &(i, e) in &new_events {
        if seen.insert(e.deal_key()) {
            let row = DealRow::first(e);
            let seq = match row.status {
                DealStatus::Applied => fill_seq.get(&i).copied(),
                _ => None,
            };
            firsts.push((plan::deal_key(e), row, seq));
        }
    }
    firsts.sort_by(|a, b| a.0.cmp(&b.0));
    let mut inserted: HashMap<DealKey, (DealRow, Option<i64>)> = HashMap::new();
    let mut deals: HashMap<DealKey, Option<DealRow>> = HashMap::new();
    if !firsts.is_empty() {
        // The deals that exist already, locked ((account, deal_id) order);
        // the rest are inserted with a plain INSERT (see `sel_processed`
        // for why and what a concurrent insert does).
        if !oc {
            let all_a: Vec<&str> = firsts.iter().map(|(k, _, _)| k.0.as_str()).collect();
            let all_d: Vec<&str> = firsts.iter().map(|(k, _, _)| k.1.as_str()).collect();
            for r in tx.query(&st.sel_deals, &[&all_a, &all_d]).await? {
                let (id, row) = deal_of(&r)?;
                deals.insert(id, Some(row));
            }
        }
        let new: Vec<&(DealKey, DealRow, Option<i64>)> = firsts
            .iter()
            .filter(|(k, _, _)| !deals.contains_key(k))
            .collect();
        if !new.is_empty() {
            let cols: Vec<DealCols> = new.iter().map(|(_, r, _)| DealCols::of(r)).collect();
            let d: Vec<&str> = new.iter().map(|(k, _, _)| k.1.as_str()).collect();
            let sq: Vec<Option<i64>> = new.iter().map(|f| f.2).collect();
            let stt: Vec<&str> = cols.iter().map(|c| c.status).collect();
            let fe: Vec<Option<&str>> = cols.iter().map(|c| c.fill_event_id.as_deref()).collect();
            let a: Vec<Option<&str>> = cols.iter().map(|c| c.account.as_deref()).collect();
            let sy: Vec<Option<&str>> = cols.iter().map(|c| c.symbol.as_deref()).collect();
            let si: Vec<Option<&str>> = cols.iter().map(|c| c.side).collect();
            let q: Vec<Option<&str>> = cols.iter().map(|c| c.qty.as_deref()).collect();
            let p: Vec<Option<&str>> = cols.iter().map(|c| c.price.as_deref()).collect();
            let t: Vec<Option<i64>> = cols.iter().map(|c| c.exec_ns).collect();
            let be: Vec<Option<&str>> = cols.iter().map(|c| c.bust_event_id.as_deref()).collect();
            let ba: Vec<Option<&str>> = cols.iter().map(|c| c.bust_account.as_deref()).collect();
            let bt: Vec<Option<i64>> = cols.iter().map(|c| c.bust_ns).collect();
            let stmt = if oc { &st.ins_deals_oc } else { &st.ins_deals };
            let rows = tx
                .query(
                    stmt,
                    &[
                        &d, &stt, &fe, &a, &sy, &si, &q, &p, &t, &be, &ba, &bt, &sq, &now,
                    ],
                )
                .await?;
            let ins: HashSet<DealKey> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            // Only with ON CONFLICT: inserted by another transaction
            // since our check; lock and read them now.
            let late: Vec<&DealKey> = new
                .iter()
                .map(|(k, _, _)| k)
                .filter(|k| !ins.contains(*k))
                .collect();
            if !late.is_empty() {
                let la: Vec<&str> = late.iter().map(|k| k.0.as_str()).collect();
                let ld: Vec<&str> = late.iter().map(|k| k.1.as_str()).collect();
                for r in tx.query(&st.sel_deals, &[&la, &ld]).await? {
                    let (id, row) = deal_of(&r)?;
                    deals.insert(id, Some(row));
                }
                if let Some(missing) = late.iter().find(|k| !deals.contains_key(**k)) {
                    anyhow::bail!(
                        "deal {} of account {} conflicted on insert but cannot be read",
                        missing.1,
                        missing.0
                    );
                }
            }
            for (key, row, seq) in new {
                if ins.contains(key) {
                    deals.insert(key.clone(), None);
                    inserted.insert(key.clone(), (row.clone(), *seq));
                }
            }
        }
    }
    let before = deals.clone();
    // A deal that changed since the peek (rare) may need one more position.
    let more: Vec<PosKey> = plan::position_keys(&new_events, &deals)
        .into_iter()
        .filter(|k| !locked.contains(k))
        .collect();
    lock_positions(tx, st, more, now, &mut positions, &mut locked).await?;
    let rkeys = plan::replay_keys(&new_events, &deals);
    let mut history: HashMap<PosKey, Vec<HistFill>> = HashMap::new();
    if !rkeys.is_empty() {
        let ka: Vec<&str> = rkeys.iter().map(|k| k.0.as_str()).collect();
        let ks: Vec<&str> = rkeys.iter().map(|k| k.1.as_str()).collect();
        for k in &rkeys {
            history.insert(k.clone(), Vec::new());
        }
        for r in tx.query(&st.sel_hist, &[&ka, &ks]).await? {
            let deal_id: String = r.get(2);
            if inserted.contains_key(&(r.get::<_, String>(0), deal_id.clone())) {
                continue; // this batch's own rows: the planner adds them in order
            }
            let side: &str = r.get(3);
            let h = HistFill {
                side: Side::parse(side).with_context(|| format!("deal {deal_id}: side"))?,
                qty: dec(r.get(4))?,
                price: dec(r.get(5))?,
                deal_id,
            };
            if let Some(v) = history.get_mut(&(r.get(0), r.get(1))) {
                v.push(h);
            }
        }
    }

    // Every locked position as read; the planner's final values replace
    // the ones it touched (all are committed with the batch: the cache).
    let mut finals: HashMap<PosKey, Position> = positions.clone();
    let p = plan::plan(&new_events, deals, positions, history);

    // The sequence number of the FILL event that applied each deal.
    let mut applied_seq: HashMap<(&str, &str), i64> = HashMap::new();
    for (i, o) in &p.outcomes {
        if let (Outcome::Applied, Some(&seq)) = (o, fill_seq.get(i)) {
            if let Ok(e) = &events[*i] {
                applied_seq.insert(e.deal_key(), seq);
            }
        }
    }

    // Deal rows that differ from what is stored (rare: busts, releases,
    // rejections): one statement each, in (account, deal_id) order (F2).
    let newly: HashSet<&DealKey> = p.newly_applied.iter().collect();
    let mut deal_keys: Vec<&DealKey> = p.deals.keys().collect();
    deal_keys.sort();
    for dk in deal_keys {
        let fin = &p.deals[dk];
        let (account, deal_id) = (dk.0.as_str(), dk.1.as_str());
        let (written, written_seq) = match inserted.get(dk) {
            Some((row, seq)) => (Some(row), *seq),
            None => (before.get(dk).and_then(Option::as_ref), None),
        };
        // Newly applied here: the applying FILL's number, unless the row
        // inserted above already carries it.
        let seq = if newly.contains(dk) {
            let seq = applied_seq
                .get(&(account, deal_id))
                .copied()
                .with_context(|| {
                    format!("deal {deal_id} of {account}: applied without a sequence number")
                })?;
            (written_seq != Some(seq)).then_some(seq)
        } else {
            None
        };
        if fin.as_ref() == written && seq.is_none() {
            continue;
        }
        match fin {
            None => {
                tx.execute(&st.del_deal, &[&account, &deal_id]).await?;
            }
            Some(row) => {
                let c = DealCols::of(row);
                tx.execute(
                    &st.upd_deal,
                    &[
                        &deal_id,
                        &c.status,
                        &c.fill_event_id,
                        &account,
                        &c.symbol,
                        &c.side,
                        &c.qty,
                        &c.price,
                        &c.exec_ns,
                        &c.bust_event_id,
                        &c.bust_account,
                        &c.bust_ns,
                        &seq,
                        &now,
                    ],
                )
                .await?;
            }
        }
    }
    finals.extend(p.positions.iter().map(|(k, v)| (k.clone(), *v)));
    let finals: Finals = finals.into_iter().collect();
    if !p.positions.is_empty() {
        let mut ka = Vec::new();
        let mut ks = Vec::new();
        let mut q = Vec::new();
        let mut ap = Vec::new();
        let mut rp = Vec::new();
        for ((a, s), pos) in &p.positions {
            ka.push(a.as_str());
            ks.push(s.as_str());
            q.push(pos.qty.to_string());
            ap.push(pos.avg_price.to_string());
            rp.push(pos.realized_pnl.to_string());
        }
        tx.execute(&st.upd_pos, &[&ka, &ks, &q, &ap, &rp, &now])
            .await?;
    }
    for (kind, event_id) in &p.unprocess {
        tx.execute(&st.del_processed, &[&kind.as_str(), event_id])
            .await?;
    }

    for (i, o) in p.outcomes {
        outs.push(outcome_of(i, &events[i], o));
    }
    outs.sort_by_key(|o| o.index);
    Ok((
        outs,
        SideEffects {
            released: p.released,
        },
        finals,
    ))
}
