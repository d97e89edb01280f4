//! SQLite store: the embedded default. WAL, `synchronous=FULL` (a commit is
//! on disk before it is acknowledged), `BEGIN IMMEDIATE` so a batch takes the
//! write lock up front, with a busy timeout for other processes (e.g.
//! `tickgate fills apply` next to the daemon). One connection; all work runs
//! in `spawn_blocking` behind an async mutex.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};
use rust_decimal::Decimal;
use tokio::sync::Mutex;

use super::{
    outcome_of, presort, repeat_verdict, AnswerFn, DeadLetterRow, Extra, HeldBust, HttpOutcome,
    OffsetConflict, PositionRow, StoreOptions, StoredAnswer, SweepTable,
};
use crate::fills::exact;
use crate::fills::metrics::{FillsMetrics, SqlitePhase as Phase};
use crate::fills::model::{Bust, ContentDigest, Event, EventOutcome, Fill, Outcome, Parsed, Side};
use crate::fills::plan::{self, DealKey, DealRow, DealStatus, HistFill, PosKey};
use crate::fills::position::Position;

const SCHEMA_V1: &str = include_str!("schema_sqlite.sql");
/// Version 2 (F2b): the content hash of each processed event.
const SCHEMA_V2: &str = "ALTER TABLE processed_events ADD COLUMN content_hash TEXT";
/// Version 3 (F2): fills are keyed by `(account, deal_id)`, not `deal_id`
/// alone. SQLite cannot change a primary key in place: the table is
/// rebuilt (same columns, `account` now NOT NULL) inside the migration's
/// transaction. A held BUST's row had no fill account: it takes the
/// BUST's (`bust_account`), the account it waits for.
const SCHEMA_V3: &str = "
CREATE TABLE fills_v3 (
    deal_id        TEXT    NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('applied', 'busted', 'bust_held')),
    fill_event_id  TEXT,
    account        TEXT    NOT NULL,
    symbol         TEXT,
    side           TEXT CHECK (side IN ('BUY', 'SELL')),
    qty            TEXT,
    price          TEXT,
    exec_ns        INTEGER,
    bust_event_id  TEXT,
    bust_account   TEXT,
    bust_ns        INTEGER,
    applied_seq    INTEGER,
    prev_deal_id   TEXT,
    created_ns     INTEGER NOT NULL,
    updated_ns     INTEGER NOT NULL,
    PRIMARY KEY (account, deal_id)
) WITHOUT ROWID;
INSERT INTO fills_v3 (deal_id, status, fill_event_id, account, symbol, side, qty, price,
                      exec_ns, bust_event_id, bust_account, bust_ns, applied_seq,
                      prev_deal_id, created_ns, updated_ns)
SELECT deal_id, status, fill_event_id, COALESCE(account, bust_account), symbol, side, qty,
       price, exec_ns, bust_event_id, bust_account, bust_ns, applied_seq, prev_deal_id,
       created_ns, updated_ns
FROM fills;
DROP TABLE fills;
ALTER TABLE fills_v3 RENAME TO fills;
CREATE INDEX fills_held ON fills (account, deal_id) WHERE status = 'bust_held';
";
/// Version 4 (K8): the key of the shared answer cache's MAC, one row,
/// created once (see [`super::ANSWER_MAC_KEY_LEN`]).
const SCHEMA_V4: &str = "
CREATE TABLE answer_mac_key (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    key BLOB    NOT NULL CHECK (length(key) = 32)
);
";

/// Version 5: the same key, `(account, deal_id)` as a pair (F2), with
/// its columns in the order `(deal_id, account)`. A `WITHOUT ROWID` table
/// is stored in key order, and account first put each account's deals
/// in a range of their own: a batch of fills over a few hundred
/// accounts dirtied a page in each of those ranges, about ten times the
/// pages (WAL frames written and synced at every commit) of the same
/// rows in deal-id order, where new deals land next to each other.
/// Every statement names both columns, so each still finds its row by
/// the whole key. Rebuilt like version 3, every row kept.
const SCHEMA_V5: &str = "
CREATE TABLE fills_v5 (
    deal_id        TEXT    NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('applied', 'busted', 'bust_held')),
    fill_event_id  TEXT,
    account        TEXT    NOT NULL,
    symbol         TEXT,
    side           TEXT CHECK (side IN ('BUY', 'SELL')),
    qty            TEXT,
    price          TEXT,
    exec_ns        INTEGER,
    bust_event_id  TEXT,
    bust_account   TEXT,
    bust_ns        INTEGER,
    applied_seq    INTEGER,
    prev_deal_id   TEXT,
    created_ns     INTEGER NOT NULL,
    updated_ns     INTEGER NOT NULL,
    PRIMARY KEY (deal_id, account)
) WITHOUT ROWID;
INSERT INTO fills_v5 (deal_id, status, fill_event_id, account, symbol, side, qty, price,
                      exec_ns, bust_event_id, bust_account, bust_ns, applied_seq,
                      prev_deal_id, created_ns, updated_ns)
SELECT deal_id, status, fill_event_id, account, symbol, side, qty, price, exec_ns,
       bust_event_id, bust_account, bust_ns, applied_seq, prev_deal_id, created_ns,
       updated_ns
FROM fills;
DROP TABLE fills;
ALTER TABLE fills_v5 RENAME TO fills;
CREATE INDEX fills_held ON fills (account, deal_id) WHERE status = 'bust_held';
";

/// Version 6 (F2b): the content hash of a processed event as its 16
/// bytes (a BLOB, [`Event::content_digest`]) instead of 32 hex
/// characters: made without a string per event, compared as bytes, and
/// half the bytes in every row of the table a batch writes most to.
/// Rebuilt like version 3, every row kept, the stored hex turned into
/// its bytes (NULL, a row older than version 2, stays NULL).
const SCHEMA_V6: &str = "
CREATE TABLE processed_events_v6 (
    kind          TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    created_ns    INTEGER NOT NULL,
    content_hash  BLOB,
    PRIMARY KEY (kind, event_id)
) WITHOUT ROWID;
INSERT INTO processed_events_v6 (kind, event_id, created_ns, content_hash)
SELECT kind, event_id, created_ns, unhex(content_hash) FROM processed_events;
DROP TABLE processed_events;
ALTER TABLE processed_events_v6 RENAME TO processed_events;
CREATE INDEX processed_events_created ON processed_events (created_ns);
";

#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    opts: StoreOptions,
    metrics: FillsMetrics,
    mac_key: [u8; super::ANSWER_MAC_KEY_LEN],
}

impl SqliteStore {
    /// Open (creating the file and its directory) and migrate.
    pub async fn open(
        path: &Path,
        opts: StoreOptions,
        metrics: FillsMetrics,
    ) -> anyhow::Result<SqliteStore> {
        let path = path.to_owned();
        let wait = opts.key_wait;
        let conn =
            tokio::task::spawn_blocking(move || -> anyhow::Result<(Connection, [u8; 32])> {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    crate::fills::files::create_dir(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                crate::fills::files::prepare_db_file(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
                let mut conn = Connection::open(&path)
                    .with_context(|| format!("opening SQLite {}", path.display()))?;
                conn.busy_timeout(wait.max(std::time::Duration::from_millis(100)))?;
                let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
                anyhow::ensure!(
                    mode.eq_ignore_ascii_case("wal"),
                    "SQLite refused WAL mode ({mode})"
                );
                conn.pragma_update(None, "synchronous", "FULL")?;
                // A batch dirties pages all over the indexes; a page cache that
                // holds them avoids spilling and re-reading mid-transaction.
                conn.pragma_update(None, "cache_size", -65_536)?; // KiB
                                                                  // The statement journal of a multi-row insert (which may
                                                                  // abort as a whole: insert_chunk) kept in memory, not
                                                                  // spilled to a temporary file past 64 KiB: a batch's
                                                                  // statements write no file but the WAL.
                conn.pragma_update(None, "temp_store", "MEMORY")?;
                conn.pragma_update(None, "wal_autocheckpoint", 4_000)?; // pages
                                                                        // A batch uses about twenty cached statements; keep them all.
                conn.set_prepared_statement_cache_capacity(48);
                let mac_key = migrate(&mut conn)?;
                Ok((conn, mac_key))
            })
            .await??;
        let (conn, mac_key) = conn;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            opts,
            metrics,
            mac_key,
        })
    }

    pub fn metrics(&self) -> &FillsMetrics {
        &self.metrics
    }

    /// K8: the shared answer cache's MAC key, read from the database at open.
    pub fn answer_mac_key(&self) -> [u8; super::ANSWER_MAC_KEY_LEN] {
        self.mac_key
    }

    /// Run `f` on the connection in a blocking task that the caller's
    /// cancellation cannot interrupt.
    async fn with_conn<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> anyhow::Result<T> + Send + 'static,
    {
        let guard = self.conn.clone().lock_owned().await;
        run_blocking(guard, f).await
    }

    /// The store's transaction size for `Store::apply_events`.
    pub(crate) fn max_batch(&self) -> usize {
        self.opts.max_batch
    }

    pub(crate) async fn apply_batch(
        &self,
        source: &str,
        events: Vec<Parsed>,
        extra: Extra,
    ) -> anyhow::Result<Vec<EventOutcome>> {
        let clock = self.opts.clock.clone();
        let metrics = self.metrics.clone();
        let src = source.to_owned();
        let outs = self
            .with_conn(move |conn| {
                let timer = metrics.tx_seconds.start_timer();
                let mut phases = PhaseClock::start(&metrics);
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = clock();
                phases.mark(Phase::Begin);
                if let Extra::Offset {
                    stream,
                    consumer,
                    expected,
                    last,
                    ..
                } = &extra
                {
                    let n = match expected {
                        None => tx.execute(
                            "INSERT INTO consumer_positions (stream, consumer, last_seq, updated_ns)
                             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (stream, consumer) DO NOTHING",
                            params![stream, consumer, last, now],
                        )?,
                        Some(e) => tx.execute(
                            "UPDATE consumer_positions SET last_seq = ?3, updated_ns = ?5
                             WHERE stream = ?1 AND consumer = ?2 AND last_seq = ?4 AND last_seq < ?3",
                            params![stream, consumer, last, e, now],
                        )?,
                    };
                    if n != 1 {
                        let stored: Option<i64> = tx
                            .query_row(
                                "SELECT last_seq FROM consumer_positions
                                 WHERE stream = ?1 AND consumer = ?2",
                                params![stream, consumer],
                                |r| r.get(0),
                            )
                            .optional()?;
                        return Err(OffsetConflict {
                            stream: stream.clone(),
                            consumer: consumer.clone(),
                            expected: *expected,
                            stored,
                        }
                        .into());
                    }
                }
                phases.mark(Phase::Offsets);
                let (outs, dl) = apply_in_tx(&tx, &events, now, &mut phases)?;
                // What the batch's work left to free is part of its writing.
                phases.mark(Phase::Write);
                if let Extra::Offset {
                    before_commit: Some(hook),
                    ..
                } = &extra
                {
                    // A blocking-pool thread: it may wait on the runtime.
                    tokio::runtime::Handle::current().block_on(hook(outs.clone()))?;
                }
                if let Extra::Stream {
                    stream,
                    consumer,
                    last_seq,
                } = &extra
                {
                    tx.execute(
                        "INSERT INTO consumer_positions (stream, consumer, last_seq, updated_ns)
                         VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (stream, consumer) DO UPDATE
                         SET last_seq = MAX(consumer_positions.last_seq, excluded.last_seq),
                             updated_ns = excluded.updated_ns",
                        params![stream, consumer, *last_seq as i64, now],
                    )?;
                }
                phases.mark(Phase::Offsets);
                tx.commit().context("SQLite commit")?;
                phases.mark(Phase::Commit);
                timer.observe_duration();
                metrics.record(&src, &outs);
                count_side_effects(&metrics, &dl);
                Ok(outs)
            })
            .await?;
        Ok(outs)
    }

    pub async fn apply_http_batch(
        &self,
        client: &str,
        key: &str,
        request_hash: &str,
        events: Vec<Parsed>,
        build_answer: AnswerFn,
    ) -> anyhow::Result<HttpOutcome> {
        // K5 on SQLite: writers are serialised by this mutex (and by BEGIN
        // IMMEDIATE across processes); a retry that cannot get in within
        // key_wait is answered "in progress".
        let Ok(guard) =
            tokio::time::timeout(self.opts.key_wait, self.conn.clone().lock_owned()).await
        else {
            return Ok(HttpOutcome::InProgressTimeout);
        };
        let clock = self.opts.clock.clone();
        let metrics = self.metrics.clone();
        let (client, key, hash) = (client.to_owned(), key.to_owned(), request_hash.to_owned());
        run_blocking(guard, move |conn| {
            let timer = metrics.tx_seconds.start_timer();
            let mut phases = PhaseClock::start(&metrics);
            let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
                Ok(tx) => tx,
                Err(e) if is_busy(&e) => return Ok(HttpOutcome::InProgressTimeout),
                Err(e) => return Err(e.into()),
            };
            let now = clock();
            if let Some(stored) = stored_answer(&tx, &client, &key)? {
                tx.commit()?;
                return Ok(if stored.request_hash != hash {
                    HttpOutcome::HashMismatch
                } else {
                    HttpOutcome::Replayed {
                        status: stored.status,
                        body: stored.body,
                    }
                });
            }
            tx.execute(
                "INSERT INTO idempotency_keys (client, key, request_hash, created_ns)
                 VALUES (?1, ?2, ?3, ?4)",
                params![client, key, hash, now],
            )?;
            phases.mark(Phase::Begin);
            let (outs, dl) = apply_in_tx(&tx, &events, now, &mut phases)?;
            let (status, body) = build_answer(&outs);
            tx.execute(
                "UPDATE idempotency_keys SET status = ?3, body = ?4 WHERE client = ?1 AND key = ?2",
                params![client, key, status, body],
            )?;
            phases.mark(Phase::Write);
            tx.commit().context("SQLite commit")?;
            phases.mark(Phase::Commit);
            timer.observe_duration();
            metrics.record("http", &outs);
            count_side_effects(&metrics, &dl);
            Ok(HttpOutcome::Fresh {
                status,
                body,
                outcomes: outs,
            })
        })
        .await
    }

    pub async fn get_stored_answer(
        &self,
        client: &str,
        key: &str,
    ) -> anyhow::Result<Option<StoredAnswer>> {
        let (client, key) = (client.to_owned(), key.to_owned());
        self.with_conn(move |conn| stored_answer(conn, &client, &key))
            .await
    }

    pub async fn consumer_position(
        &self,
        stream: &str,
        consumer: &str,
    ) -> anyhow::Result<Option<u64>> {
        let (stream, consumer) = (stream.to_owned(), consumer.to_owned());
        self.with_conn(move |conn| {
            Ok(conn
                .query_row(
                    "SELECT last_seq FROM consumer_positions WHERE stream = ?1 AND consumer = ?2",
                    params![stream, consumer],
                    |r| r.get::<_, i64>(0),
                )
                .optional()?
                .map(|s| s as u64))
        })
        .await
    }

    pub async fn positions(
        &self,
        accounts: Option<Vec<String>>,
    ) -> anyhow::Result<Vec<PositionRow>> {
        self.with_conn(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT account, symbol, qty, avg_price, realized_pnl FROM positions
                 ORDER BY account, symbol",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })?;
            let filter: Option<HashSet<String>> = accounts.map(|a| a.into_iter().collect());
            let mut out = Vec::new();
            for row in rows {
                let (account, symbol, q, a, p) = row?;
                if filter.as_ref().is_some_and(|f| !f.contains(&account)) {
                    continue;
                }
                out.push(PositionRow {
                    account,
                    symbol,
                    position: Position {
                        qty: dec(&q)?,
                        avg_price: dec(&a)?,
                        realized_pnl: dec(&p)?,
                    },
                });
            }
            Ok(out)
        })
        .await
    }

    pub async fn held_busts(&self) -> anyhow::Result<Vec<HeldBust>> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare(
                "SELECT deal_id, bust_event_id, bust_account FROM fills
                 WHERE status = 'bust_held' ORDER BY account, deal_id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(HeldBust {
                    deal_id: r.get(0)?,
                    event_id: r.get(1)?,
                    account: r.get(2)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    pub async fn dead_letters(&self) -> anyhow::Result<Vec<DeadLetterRow>> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare(
                "SELECT source, kind, event_id, deal_id, reason FROM dead_letters ORDER BY id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(DeadLetterRow {
                    source: r.get(0)?,
                    kind: r.get(1)?,
                    event_id: r.get(2)?,
                    deal_id: r.get(3)?,
                    reason: r.get(4)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    pub async fn delete_expired_chunk(
        &self,
        table: SweepTable,
        cutoff_ns: i64,
        limit: usize,
    ) -> anyhow::Result<usize> {
        // F5: the sub-select walks the created_ns index; each chunk is its
        // own short write transaction, so appliers interleave between chunks.
        let sql = match table {
            SweepTable::ProcessedEvents => {
                "DELETE FROM processed_events WHERE (kind, event_id) IN
                 (SELECT kind, event_id FROM processed_events WHERE created_ns < ?1 LIMIT ?2)"
            }
            SweepTable::IdempotencyKeys => {
                "DELETE FROM idempotency_keys WHERE (client, key) IN
                 (SELECT client, key FROM idempotency_keys WHERE created_ns < ?1 LIMIT ?2)"
            }
        };
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute(sql, params![cutoff_ns, limit as i64])?;
            tx.commit()?;
            Ok(n)
        })
        .await
    }

    pub async fn count_rows(&self, table: SweepTable) -> anyhow::Result<u64> {
        let sql = format!("SELECT count(*) FROM {}", table.name());
        self.with_conn(move |conn| Ok(conn.query_row(&sql, [], |r| r.get::<_, i64>(0))? as u64))
            .await
    }

    /// Raw SQL on the store's connection (tests and benchmarks only).
    #[doc(hidden)]
    pub async fn execute_batch(&self, sql: &str) -> anyhow::Result<()> {
        let sql = sql.to_owned();
        self.with_conn(move |conn| Ok(conn.execute_batch(&sql)?))
            .await
    }
}

async fn run_blocking<T, F>(
    mut guard: tokio::sync::OwnedMutexGuard<Connection>,
    f: F,
) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> anyhow::Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(move || f(&mut guard))
        .await
        .context("SQLite worker task")?
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Migrates and returns the shared answer cache's MAC key (K8).
fn migrate(conn: &mut Connection) -> anyhow::Result<[u8; super::ANSWER_MAC_KEY_LEN]> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS tickgate_schema_version (version INTEGER PRIMARY KEY)",
    )?;
    let v: i64 = tx.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM tickgate_schema_version",
        [],
        |r| r.get(0),
    )?;
    if v < 1 {
        tx.execute_batch(SCHEMA_V1)
            .context("applying SQLite schema v1")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (1)",
            [],
        )?;
    }
    if v < 2 {
        // F2b: the content hash of each processed event. Rows of an older
        // database keep NULL: a repeat of one of those is a duplicate, as
        // it was (nothing to compare with).
        tx.execute_batch(SCHEMA_V2)
            .context("applying SQLite schema v2")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (2)",
            [],
        )?;
    }
    if v < 3 {
        // F2: the deal key becomes (account, deal_id); rows are kept.
        tx.execute_batch(SCHEMA_V3)
            .context("applying SQLite schema v3 (fills keyed by account, deal_id)")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (3)",
            [],
        )?;
    }
    if v < 4 {
        // K8: the shared answer cache's MAC key lives here, where every
        // instance reads it and a Redis writer cannot.
        tx.execute_batch(SCHEMA_V4)
            .context("applying SQLite schema v4 (answer MAC key)")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (4)",
            [],
        )?;
    }
    if v < 5 {
        // F2's key in deal-id order: new deals are written next to each
        // other, not across every account's range.
        tx.execute_batch(SCHEMA_V5)
            .context("applying SQLite schema v5 (fills in (deal_id, account) order)")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (5)",
            [],
        )?;
    }
    if v < 6 {
        // F2b's hash as bytes.
        tx.execute_batch(SCHEMA_V6)
            .context("applying SQLite schema v6 (content hash as bytes)")?;
        tx.execute(
            "INSERT INTO tickgate_schema_version (version) VALUES (6)",
            [],
        )?;
    }
    // Created once: the first instance's key stays; a row deleted by hand
    // is replaced (the entries it signed then no longer verify).
    let fresh = super::new_answer_mac_key()?;
    tx.execute(
        "INSERT INTO answer_mac_key (id, key) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING",
        params![fresh.as_slice()],
    )?;
    let key: Vec<u8> = tx.query_row("SELECT key FROM answer_mac_key WHERE id = 1", [], |r| {
        r.get(0)
    })?;
    tx.commit()?;
    super::answer_mac_key_from(&key)
}

fn dec(s: &str) -> anyhow::Result<Decimal> {
    Decimal::from_str(s).with_context(|| format!("stored decimal {s:?}"))
}

fn stored_answer(
    conn: &Connection,
    client: &str,
    key: &str,
) -> anyhow::Result<Option<StoredAnswer>> {
    let row = conn
        .query_row(
            "SELECT request_hash, status, body FROM idempotency_keys WHERE client = ?1 AND key = ?2",
            params![client, key],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<u16>>(1)?,
                    r.get::<_, Option<Vec<u8>>>(2)?,
                ))
            },
        )
        .optional()?;
    Ok(row.map(|(request_hash, status, body)| StoredAnswer {
        request_hash,
        // A committed row always has both (written in the inserting transaction).
        status: status.unwrap_or(500),
        body: body.unwrap_or_default(),
    }))
}

pub(crate) fn count_side_effects(metrics: &FillsMetrics, dl: &SideEffects) {
    metrics.busts_released.inc_by(dl.released as u64);
}

/// Counters of a committed batch besides per-event outcomes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SideEffects {
    pub released: usize,
}

const DEAL_COLS: &str =
    "deal_id, status, fill_event_id, account, symbol, side, qty, price, exec_ns,
                         bust_event_id, bust_account, bust_ns";

fn deal_from_row(r: &Row<'_>) -> anyhow::Result<DealRow> {
    deal_from_columns(
        r.get(0)?,
        &r.get::<_, String>(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
    )
}

/// Build a DealRow from stored columns (shared with the PostgreSQL store).
#[allow(clippy::too_many_arguments)]
pub(crate) fn deal_from_columns(
    deal_id: String,
    status: &str,
    fill_event_id: Option<String>,
    account: Option<String>,
    symbol: Option<String>,
    side: Option<String>,
    qty: Option<String>,
    price: Option<String>,
    exec_ns: Option<i64>,
    bust_event_id: Option<String>,
    bust_account: Option<String>,
    bust_ns: Option<i64>,
) -> anyhow::Result<DealRow> {
    let status =
        DealStatus::parse(status).with_context(|| format!("deal {deal_id}: status {status:?}"))?;
    let fill = match (fill_event_id, account, symbol, side, qty, price, exec_ns) {
        (Some(event_id), Some(account), Some(symbol), Some(side), Some(q), Some(p), Some(t)) => {
            Some(Fill {
                event_id,
                deal_id: deal_id.clone(),
                account,
                symbol,
                side: Side::parse(&side)
                    .with_context(|| format!("deal {deal_id}: side {side:?}"))?,
                qty: dec(&q)?,
                price: dec(&p)?,
                exec_time: t,
            })
        }
        _ => None,
    };
    let bust = match (bust_event_id, bust_account, bust_ns) {
        (Some(event_id), Some(account), Some(t)) => Some(Bust {
            event_id,
            deal_id: deal_id.clone(),
            account,
            exec_time: t,
        }),
        _ => None,
    };
    anyhow::ensure!(
        match status {
            DealStatus::Applied => fill.is_some(),
            DealStatus::Busted => fill.is_some() && bust.is_some(),
            DealStatus::BustHeld => bust.is_some(),
        },
        "deal {deal_id}: columns inconsistent with status {}",
        status.as_str()
    );
    Ok(DealRow { status, fill, bust })
}

/// A stored position and the head of its chain of applied fills.
#[derive(Clone)]
struct StoredPos {
    position: Position,
    last_deal_id: Option<String>,
}

fn load_position(
    sel: &mut rusqlite::CachedStatement<'_>,
    account: &str,
    symbol: &str,
) -> anyhow::Result<Option<StoredPos>> {
    // Decimals parsed straight from SQLite's text: no String per column.
    let mut rows = sel.query(params![account, symbol])?;
    let Some(r) = rows.next()? else {
        return Ok(None);
    };
    let text = |i: usize| -> anyhow::Result<&str> { Ok(r.get_ref(i)?.as_str()?) };
    Ok(Some(StoredPos {
        position: Position {
            qty: dec(text(0)?)?,
            avg_price: dec(text(1)?)?,
            realized_pnl: dec(text(2)?)?,
        },
        last_deal_id: r.get::<_, Option<String>>(3)?,
    }))
}

/// Rows per multi-row position upsert (6 parameters each, plus ?1 = now):
/// a batch touches hundreds of positions, and one statement per position
/// cost more in statement setup than in the B-tree.
const POS_ROWS: usize = 32;

/// Upsert of `rows` positions with the heads of their chains. The keys of
/// one statement are distinct (one row per touched position).
fn upsert_sql(rows: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, last_deal_id,
                                updated_ns) VALUES ",
    );
    for r in 0..rows {
        let sep = if r == 0 { "" } else { ", " };
        let b = 1 + 6 * r;
        let _ = write!(
            s,
            "{sep}(?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?1)",
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5,
            b + 6
        );
    }
    s.push_str(
        " ON CONFLICT (account, symbol) DO UPDATE SET qty = excluded.qty,
             avg_price = excluded.avg_price, realized_pnl = excluded.realized_pnl,
             last_deal_id = excluded.last_deal_id, updated_ns = excluded.updated_ns",
    );
    s
}

/// A position to write: account, symbol, value, head of its chain.
type PosWrite<'a> = (&'a str, &'a str, &'a Position, Option<&'a str>);

/// Write `rows` (sorted by key, distinct keys): POS_ROWS per statement,
/// the rest one by one.
fn upsert_positions(tx: &Transaction<'_>, rows: &[PosWrite<'_>], now: i64) -> anyhow::Result<()> {
    static SQL: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    let (multi, one) = SQL.get_or_init(|| (upsert_sql(POS_ROWS), upsert_sql(1)));
    let mut buf = DecBufs::default();
    let mut write =
        |up: &mut rusqlite::CachedStatement<'_>, chunk: &[PosWrite<'_>]| -> anyhow::Result<()> {
            up.raw_bind_parameter(1, now)?;
            for (r, (account, symbol, pos, head)) in chunk.iter().enumerate() {
                let b = 1 + 6 * r;
                up.raw_bind_parameter(b + 1, *account)?;
                up.raw_bind_parameter(b + 2, *symbol)?;
                up.raw_bind_parameter(b + 3, buf.fmt(0, &pos.qty))?;
                up.raw_bind_parameter(b + 4, buf.fmt(1, &pos.avg_price))?;
                up.raw_bind_parameter(b + 5, buf.fmt(2, &pos.realized_pnl))?;
                up.raw_bind_parameter(b + 6, *head)?;
            }
            up.raw_execute()?;
            Ok(())
        };
    let full = rows.len() / POS_ROWS * POS_ROWS;
    if full > 0 {
        let mut up = tx.prepare_cached(multi)?;
        for chunk in rows[..full].chunks(POS_ROWS) {
            write(&mut up, chunk)?;
        }
    }
    if full < rows.len() {
        let mut up = tx.prepare_cached(one)?;
        for j in full..rows.len() {
            write(&mut up, &rows[j..j + 1])?;
        }
    }
    Ok(())
}

/// Text buffers for decimals: SQLite copies bound text at bind time, so
/// one buffer per parameter of a statement avoids an allocation per
/// formatted decimal.
struct DecBufs([exact::TextBuf; 3]);

impl Default for DecBufs {
    fn default() -> DecBufs {
        DecBufs([[0; 48]; 3])
    }
}

impl DecBufs {
    /// `d` formatted (exact, the bytes of `Decimal`'s `Display`) into
    /// buffer `i`.
    fn fmt(&mut self, i: usize, d: &Decimal) -> &str {
        exact::text(d, &mut self.0[i])
    }
}

/// The applied fills of one position in application order, read by walking
/// the chain back from `head` by primary key (BUST replay; see
/// schema_sqlite.sql). Busted rows stay in the chain and are skipped.
/// `walk` takes `(account, deal_id)` (F2): a chain links fills of one
/// position, so every link is a deal of the position's account.
fn load_history(
    walk: &mut rusqlite::CachedStatement<'_>,
    key: &PosKey,
    head: Option<String>,
) -> anyhow::Result<Vec<HistFill>> {
    let mut h = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut cur = head;
    while let Some(deal_id) = cur {
        anyhow::ensure!(
            seen.insert(deal_id.clone()),
            "fill chain of {}/{} loops at deal {deal_id}",
            key.0,
            key.1
        );
        let (status, side, qty, price, prev) = walk
            .query_row([key.0.as_str(), deal_id.as_str()], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            })
            .optional()?
            .with_context(|| {
                format!("fill chain of {}/{}: deal {deal_id} missing", key.0, key.1)
            })?;
        if status == DealStatus::Applied.as_str() {
            let (Some(side), Some(qty), Some(price)) = (side, qty, price) else {
                anyhow::bail!("deal {deal_id}: applied without fill columns");
            };
            h.push(HistFill {
                side: Side::parse(&side).with_context(|| format!("deal {deal_id}: side"))?,
                qty: dec(&qty)?,
                price: dec(&price)?,
                deal_id,
            });
        }
        cur = prev;
    }
    h.reverse();
    Ok(h)
}

fn key_of(f: &Fill) -> PosKey {
    (f.account.clone(), f.symbol.clone())
}

/// Rows per multi-row dedup INSERT: one statement instead of 64 saves the
/// per-statement setup (cursors, halt, reset) that dominates a one-row
/// insert. The remainder of a batch goes through the one-row statement,
/// so the statement cache holds a fixed set whatever the batch sizes.
const DEDUP_ROWS: usize = 64;

/// The multi-row dedup INSERT of `rows` rows; `returning`: the variant
/// that skips existing rows and lists the inserted ones.
fn dedup_sql(rows: usize, returning: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "INSERT INTO processed_events (kind, event_id, created_ns, content_hash) VALUES ",
    );
    for r in 0..rows {
        let sep = if r == 0 { "" } else { ", " };
        let _ = write!(
            s,
            "{sep}(?{}, ?{}, ?1, ?{})",
            2 + 3 * r,
            3 + 3 * r,
            4 + 3 * r
        );
    }
    if returning {
        s.push_str(" ON CONFLICT DO NOTHING RETURNING kind, event_id");
    }
    s
}

fn bind_processed(
    stmt: &mut rusqlite::CachedStatement<'_>,
    chunk: &[(usize, &Event)],
    now: i64,
) -> anyhow::Result<()> {
    stmt.raw_bind_parameter(1, now)?;
    for (j, (_, ev)) in chunk.iter().enumerate() {
        stmt.raw_bind_parameter(2 + 3 * j, ev.kind().as_str())?;
        stmt.raw_bind_parameter(3 + 3 * j, ev.event_id())?;
        // F2b: kept to tell a repeat from a conflict (schema v6: bytes).
        stmt.raw_bind_parameter(4 + 3 * j, &ev.content_digest()[..])?;
    }
    Ok(())
}

/// F2b: whether a stored content hash is `digest`: bytes since schema
/// version 6; hex text if a build before it wrote the row after the
/// migration; NULL (a row from before version 2) matches anything.
fn stored_hash_is(stored: rusqlite::types::ValueRef<'_>, digest: &ContentDigest) -> bool {
    use rusqlite::types::ValueRef;
    match stored {
        ValueRef::Blob(b) => b == digest,
        ValueRef::Text(t) => t == hex::encode(digest).as_bytes(),
        _ => true,
    }
}

/// A rusqlite error that is a constraint violation (here: a row that
/// already exists).
fn is_constraint(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
}

/// Insert `chunk` with `plain` (an INSERT without conflict clause) and
/// mark every row new; if a row already exists, that statement fails as a
/// whole and its changes are undone (statement-level abort; the
/// transaction goes on), and the chunk is inserted again with `returning`
/// (ON CONFLICT DO NOTHING RETURNING the key), which marks exactly the
/// rows inserted. Most chunks have no repeat, and the plain statement
/// spares them RETURNING's temporary table and the matching of its rows.
/// `is_row(item, row)`: whether a returned row is that of `item`.
/// `plain` is taken prepared: the caller prepares it once for all its
/// chunks (a statement cache lookup hashes and compares the whole SQL
/// text, some kilobytes for the multi-row statements).
fn insert_chunk<T>(
    tx: &Transaction<'_>,
    plain: &mut rusqlite::CachedStatement<'_>,
    returning: &str,
    chunk: &[T],
    bind: impl Fn(&mut rusqlite::CachedStatement<'_>, &[T]) -> anyhow::Result<()>,
    is_row: impl Fn(&T, &Row<'_>) -> anyhow::Result<bool>,
    new: &mut [bool],
) -> anyhow::Result<()> {
    bind(plain, chunk)?;
    match plain.raw_execute() {
        Ok(_) => {
            new.fill(true);
            return Ok(());
        }
        Err(e) if is_constraint(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let mut stmt = tx.prepare_cached(returning)?;
    bind(&mut stmt, chunk)?;
    let mut rows = stmt.raw_query();
    // Rows come back in insertion order in practice; the search starts
    // where the last match was and wraps around, so any order is correct.
    let mut at = 0;
    let n = chunk.len();
    while let Some(r) = rows.next()? {
        let mut found = None;
        for k in 0..n {
            let j = (at + k) % n;
            if is_row(&chunk[j], r)? {
                found = Some(j);
                break;
            }
        }
        let j = found.context("an INSERT returned a row that was not in its chunk")?;
        new[j] = true;
        at = j + 1;
    }
    Ok(())
}

/// SQL texts built once: the statement cache is keyed by text.
struct InsertSql {
    dedup_multi: (String, String),
    dedup_one: (String, String),
    deal_multi: (String, String),
    deal_one: (String, String),
}

fn insert_sql() -> &'static InsertSql {
    static SQL: std::sync::OnceLock<InsertSql> = std::sync::OnceLock::new();
    SQL.get_or_init(|| InsertSql {
        dedup_multi: (dedup_sql(DEDUP_ROWS, false), dedup_sql(DEDUP_ROWS, true)),
        dedup_one: (dedup_sql(1, false), dedup_sql(1, true)),
        deal_multi: (
            deal_insert_sql(DEAL_ROWS, false),
            deal_insert_sql(DEAL_ROWS, true),
        ),
        deal_one: (deal_insert_sql(1, false), deal_insert_sql(1, true)),
    })
}

fn pair(p: &(String, String)) -> (&str, &str) {
    (&p.0, &p.1)
}

/// F1 for `sorted` (sorted by key): insert the processed-event rows and
/// set `new[j]` for each row actually inserted (the others were processed
/// before).
fn insert_processed(
    tx: &Transaction<'_>,
    sorted: &[(usize, &Event)],
    now: i64,
    new: &mut [bool],
) -> anyhow::Result<()> {
    let sql = insert_sql();
    let bind =
        |st: &mut rusqlite::CachedStatement<'_>, c: &[(usize, &Event)]| bind_processed(st, c, now);
    let is_row = |(_, ev): &(usize, &Event), r: &Row<'_>| -> anyhow::Result<bool> {
        Ok(ev.kind().as_str() == r.get_ref(0)?.as_str()?
            && ev.event_id() == r.get_ref(1)?.as_str()?)
    };
    let stmts = (pair(&sql.dedup_multi), pair(&sql.dedup_one));
    insert_rows(tx, stmts, DEDUP_ROWS, sorted, bind, is_row, new)
}

/// `rows` through [`insert_chunk`]: `per` rows per statement
/// (`stmts.0`), the rest one by one (`stmts.1`), so that only two
/// statement texts per table are ever prepared.
fn insert_rows<T>(
    tx: &Transaction<'_>,
    stmts: ((&str, &str), (&str, &str)),
    per: usize,
    rows: &[T],
    bind: impl Fn(&mut rusqlite::CachedStatement<'_>, &[T]) -> anyhow::Result<()> + Copy,
    is_row: impl Fn(&T, &Row<'_>) -> anyhow::Result<bool> + Copy,
    new: &mut [bool],
) -> anyhow::Result<()> {
    let full = rows.len() / per * per;
    if full > 0 {
        let mut plain = tx.prepare_cached(stmts.0 .0)?;
        for (c, chunk) in rows[..full].chunks(per).enumerate() {
            let new = &mut new[c * per..(c + 1) * per];
            insert_chunk(tx, &mut plain, stmts.0 .1, chunk, bind, is_row, new)?;
        }
    }
    if full < rows.len() {
        let mut plain = tx.prepare_cached(stmts.1 .0)?;
        for j in full..rows.len() {
            insert_chunk(
                tx,
                &mut plain,
                stmts.1 .1,
                &rows[j..j + 1],
                bind,
                is_row,
                &mut new[j..j + 1],
            )?;
        }
    }
    Ok(())
}

/// Is `row` exactly the row [`DealRow::first`] makes of `ev`?
fn is_first_row(row: &DealRow, ev: &Event) -> bool {
    match ev {
        Event::Fill(f) => {
            row.status == DealStatus::Applied && row.bust.is_none() && row.fill.as_ref() == Some(f)
        }
        Event::Bust(b) => {
            row.status == DealStatus::BustHeld && row.fill.is_none() && row.bust.as_ref() == Some(b)
        }
    }
}

/// F1-F3 for one batch inside an open write transaction. Returns outcomes
/// in input order.
fn apply_in_tx(
    tx: &Transaction<'_>,
    events: &[Parsed],
    now: i64,
    phases: &mut PhaseClock<'_>,
) -> anyhow::Result<(Vec<EventOutcome>, SideEffects)> {
    let (unique, mut outs) = presort(events);

    // F1: the processed-events insert decides which events are new.
    let mut new_events: Vec<(usize, &Event)> = Vec::with_capacity(unique.len());
    {
        // Key order: neighbouring inserts land on the same B-tree pages.
        let mut sorted: Vec<(usize, &Event)> = unique
            .iter()
            .filter_map(|&i| events[i].as_ref().ok().map(|e| (i, e)))
            .collect();
        sorted.sort_unstable_by(|a, b| {
            (a.1.kind(), a.1.event_id()).cmp(&(b.1.kind(), b.1.event_id()))
        });
        let mut new = vec![false; sorted.len()];
        insert_processed(tx, &sorted, now, &mut new)?;
        for ((i, ev), is_new) in sorted.into_iter().zip(new) {
            if is_new {
                new_events.push((i, ev));
            } else {
                // F2b: a repeat is a duplicate only with the same content.
                let mut sel = tx.prepare_cached(
                    "SELECT content_hash FROM processed_events
                     WHERE kind = ?1 AND event_id = ?2",
                )?;
                let mut rows = sel.query([ev.kind().as_str(), ev.event_id()])?;
                let same = match rows.next()? {
                    Some(r) => stored_hash_is(r.get_ref(0)?, &ev.content_digest()),
                    None => true,
                };
                outs.push(outcome_of(i, &events[i], repeat_verdict(ev, same)));
            }
        }
        new_events.sort_unstable_by_key(|&(i, _)| i);
    }
    phases.mark(Phase::Dedup);

    // The positions of the new FILLs, with the heads of their chains (a
    // missing row is a flat position with an empty chain). The keys are
    // kept sorted and found by binary search: no owned copies of the key
    // strings and no hash maps keyed by them.
    let mut sel_pos = tx.prepare_cached(
        "SELECT qty, avg_price, realized_pnl, last_deal_id FROM positions
         WHERE account = ?1 AND symbol = ?2",
    )?;
    let mut keys: Vec<(&str, &str)> = new_events
        .iter()
        .filter_map(|(_, ev)| match ev {
            Event::Fill(f) => Some((f.account.as_str(), f.symbol.as_str())),
            Event::Bust(_) => None,
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut loaded: Vec<Option<StoredPos>> = Vec::with_capacity(keys.len());
    for &(a, s) in &keys {
        loaded.push(load_position(&mut sel_pos, a, s)?);
    }
    let slot_of = |f: &Fill| -> anyhow::Result<usize> {
        keys.binary_search(&(f.account.as_str(), f.symbol.as_str()))
            .map_err(|_| {
                anyhow::anyhow!("internal: position {}/{} not loaded", f.account, f.symbol)
            })
    };

    // Each new deal's first event creates its row (F2: the unique
    // (account, deal_id)). Its application sequence and chain predecessor
    // are drawn in event order; rows are then inserted in key order (page
    // locality). That
    // assumes every new deal's FILL is applied in event order; the rare
    // exceptions (rejected, or the deal already existed) are corrected by
    // the general path below.
    let mut next_seq: i64 = tx
        .prepare_cached("SELECT value FROM counters WHERE name = 'fills_applied_seq'")?
        .query_row([], |r| r.get(0))?;
    phases.mark(Phase::Read);
    let mut chain_heads: Vec<Option<&str>> = loaded
        .iter()
        .map(|s| s.as_ref().and_then(|s| s.last_deal_id.as_deref()))
        .collect();
    let mut firsts: Vec<(&Event, Option<i64>, Option<&str>)> = Vec::with_capacity(new_events.len());
    {
        let mut seen: HashSet<(&str, &str), foldhash::fast::RandomState> =
            HashSet::with_capacity_and_hasher(new_events.len(), Default::default());
        for &(_, ev) in &new_events {
            if seen.insert(ev.deal_key()) {
                let (seq, prev) = match ev {
                    Event::Fill(f) => {
                        next_seq += 1;
                        let prev = chain_heads[slot_of(f)?].replace(f.deal_id.as_str());
                        (Some(next_seq), prev)
                    }
                    Event::Bust(_) => (None, None),
                };
                firsts.push((ev, seq, prev));
            }
        }
    }
    // The table's order (schema v5): deal id, then account.
    firsts.sort_unstable_by(|a, b| {
        (a.0.deal_id(), a.0.account()).cmp(&(b.0.deal_id(), b.0.account()))
    });
    // DEAL_ROWS rows per statement, the rest one by one (as for the
    // processed events).
    let mut new = vec![false; firsts.len()];
    {
        let sql = insert_sql();
        type First<'a> = (&'a Event, Option<i64>, Option<&'a str>);
        let bind =
            |st: &mut rusqlite::CachedStatement<'_>, c: &[First<'_>]| bind_firsts(st, c, now);
        let is_row =
            |(ev, _, _): &First<'_>, r: &Row<'_>| -> anyhow::Result<bool> {
                Ok(ev.account() == r.get_ref(0)?.as_str()?
                    && ev.deal_id() == r.get_ref(1)?.as_str()?)
            };
        let stmts = (pair(&sql.deal_multi), pair(&sql.deal_one));
        insert_rows(tx, stmts, DEAL_ROWS, &firsts, bind, is_row, &mut new)?;
    }
    phases.mark(Phase::Deals);

    // The common batch: only FILLs of deals unknown until now (each one's
    // row was just inserted, none repeats an (account, deal_id) within the
    // batch).
    // The planner would apply each to its position in event order and
    // leave the inserted rows, sequence numbers and chain links as they
    // are, so this path does only that, on slots instead of hash maps.
    // Anything else (a BUST, a known deal, an overflow to reject) takes
    // the general path, from the same state.
    let only_new_fills: Option<Vec<&Fill>> = (firsts.len() == new_events.len()
        && new.iter().all(|&n| n))
    .then(|| {
        new_events
            .iter()
            .map(|(_, e)| match e {
                Event::Fill(f) => Some(f),
                Event::Bust(_) => None,
            })
            .collect()
    })
    .flatten();
    if let Some(fills) = only_new_fills {
        let mut cur: Vec<Position> = loaded
            .iter()
            .map(|s| s.as_ref().map_or(Position::FLAT, |s| s.position))
            .collect();
        let mut touched = vec![false; keys.len()];
        let mut all_ok = true;
        for f in fills {
            let k = slot_of(f)?;
            // F6.
            match cur[k].apply(f.side, f.qty, f.price) {
                Ok(next) => {
                    cur[k] = next;
                    touched[k] = true;
                }
                Err(_) => {
                    all_ok = false;
                    break;
                }
            }
        }
        phases.mark(Phase::Apply);
        if all_ok {
            tx.prepare_cached("UPDATE counters SET value = ?1 WHERE name = 'fills_applied_seq'")?
                .execute([next_seq])?;
            let writes: Vec<PosWrite<'_>> = keys
                .iter()
                .enumerate()
                .filter(|&(k, _)| touched[k])
                .map(|(k, &(a, s))| (a, s, &cur[k], chain_heads[k]))
                .collect();
            upsert_positions(tx, &writes, now)?;
            outs.reserve(new_events.len());
            for &(i, _) in &new_events {
                outs.push(outcome_of(i, &events[i], Outcome::Applied));
            }
            outs.sort_unstable_by_key(|o| o.index);
            phases.mark(Phase::Write);
            return Ok((outs, SideEffects::default()));
        }
    }

    // The general path: the planner, on hash maps of owned rows.
    let mut stored: HashMap<PosKey, Option<StoredPos>> = keys
        .iter()
        .zip(&loaded)
        .map(|(&(a, s), l)| ((a.to_owned(), s.to_owned()), l.clone()))
        .collect();
    let head_of = |stored: &HashMap<PosKey, Option<StoredPos>>, f: &Fill| {
        stored
            .get(&key_of(f))
            .and_then(Option::as_ref)
            .and_then(|s| s.last_deal_id.clone())
    };
    // Deals by their (account, deal_id) (F2).
    let mut deals: HashMap<DealKey, Option<DealRow>> = HashMap::with_capacity(new_events.len());
    // Rows this batch inserted: the event whose `DealRow::first` they hold,
    // and the prev_deal_id written.
    let mut inserted: HashMap<(&str, &str), (&Event, Option<String>)> =
        HashMap::with_capacity(new_events.len());
    // Rows that existed before this batch, as read.
    let mut before: HashMap<(&str, &str), DealRow> = HashMap::new();
    {
        let mut sel = tx.prepare_cached(&format!(
            "SELECT {DEAL_COLS} FROM fills WHERE account = ?1 AND deal_id = ?2"
        ))?;
        for ((ev, _, prev), is_new) in firsts.into_iter().zip(new) {
            let key = ev.deal_key();
            if is_new {
                deals.insert(plan::deal_key(ev), None);
                inserted.insert(key, (ev, prev.map(str::to_owned)));
            } else {
                let mut rows = sel.query([key.0, key.1])?;
                let row = rows.next()?.with_context(|| {
                    format!(
                        "deal {} of account {} conflicted but is not readable",
                        key.1, key.0
                    )
                })?;
                let d = deal_from_row(row)?;
                deals.insert(plan::deal_key(ev), Some(d.clone()));
                before.insert(key, d);
            }
        }
    }

    // Positions a BUST of an older fill touches, and the history of those
    // a BUST replays.
    for key in plan::position_keys(&new_events, &deals) {
        if let std::collections::hash_map::Entry::Vacant(e) = stored.entry(key) {
            let row = load_position(&mut sel_pos, &e.key().0, &e.key().1)?;
            e.insert(row);
        }
    }
    drop(sel_pos);
    let mut history: HashMap<PosKey, Vec<HistFill>> = HashMap::new();
    {
        let mut walk = tx.prepare_cached(
            "SELECT status, side, qty, price, prev_deal_id FROM fills
             WHERE account = ?1 AND deal_id = ?2",
        )?;
        for key in plan::replay_keys(&new_events, &deals) {
            // The stored head predates this batch's rows: the planner adds
            // those itself, in order.
            let head = stored
                .get(&key)
                .and_then(Option::as_ref)
                .and_then(|s| s.last_deal_id.clone());
            let h = load_history(&mut walk, &key, head)?;
            history.insert(key, h);
        }
    }
    let positions: HashMap<PosKey, Position> = stored
        .iter()
        .filter_map(|(k, s)| s.as_ref().map(|s| (k.clone(), s.position)))
        .collect();

    let p = plan::plan(&new_events, deals, positions, history);
    phases.mark(Phase::Apply);

    // Write what changed.
    {
        // F2: (account, deal_id) is the key; the account is not rewritten.
        let mut upd = tx.prepare_cached(
            "UPDATE fills SET status = ?2, fill_event_id = ?3, symbol = ?5, side = ?6,
                              qty = ?7, price = ?8, exec_ns = ?9, bust_event_id = ?10,
                              bust_account = ?11, bust_ns = ?12,
                              applied_seq = COALESCE(?13, applied_seq), updated_ns = ?14
             WHERE account = ?4 AND deal_id = ?1",
        )?;
        let newly: HashSet<(&str, &str)> = p
            .newly_applied
            .iter()
            .map(|(a, d)| (a.as_str(), d.as_str()))
            .collect();
        let mut deal_keys: Vec<&DealKey> = p.deals.keys().collect();
        // The table's order (schema v5).
        deal_keys.sort_unstable_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
        for dk in deal_keys {
            let fin = &p.deals[dk];
            let (account, deal_id) = (dk.0.as_str(), dk.1.as_str());
            let key = (account, deal_id);
            // Whether the stored row is already `fin`, and whether it was
            // an applied row.
            let (unchanged, was_applied_row) = match (inserted.get(&key), before.get(&key)) {
                (Some((ev, _)), _) => (
                    fin.as_ref().is_some_and(|r| is_first_row(r, ev)),
                    matches!(ev, Event::Fill(_)),
                ),
                (None, Some(b)) => (fin.as_ref() == Some(b), b.status == DealStatus::Applied),
                (None, None) => (fin.is_none(), false),
            };
            if unchanged {
                continue;
            }
            match fin {
                None => {
                    tx.execute(
                        "DELETE FROM fills WHERE account = ?1 AND deal_id = ?2",
                        [account, deal_id],
                    )?;
                }
                Some(row) => {
                    let seq = (newly.contains(&key) && !was_applied_row).then(|| {
                        next_seq += 1;
                        next_seq
                    });
                    let c = DealCols::of(row);
                    upd.execute(params![
                        deal_id,
                        c.status,
                        c.fill_event_id,
                        account,
                        c.symbol,
                        c.side,
                        c.qty,
                        c.price,
                        c.exec_ns,
                        c.bust_event_id,
                        c.bust_account,
                        c.bust_ns,
                        seq,
                        now
                    ])?;
                }
            }
        }
        tx.prepare_cached("UPDATE counters SET value = ?1 WHERE name = 'fills_applied_seq'")?
            .execute([next_seq])?;
    }
    // The chains: each position's newly applied fills, in application
    // order, follow its stored head. Rows whose assumed predecessor was
    // wrong (a rejected or already-known deal before them) are corrected.
    let mut heads: HashMap<(&str, &str), Option<String>> = HashMap::with_capacity(stored.len());
    {
        // F2: a link names a deal of the same position, hence of the same
        // account; rows are found by (account, deal_id).
        let mut set_prev = tx.prepare_cached(
            "UPDATE fills SET prev_deal_id = ?3 WHERE account = ?1 AND deal_id = ?2",
        )?;
        for dk in &p.newly_applied {
            let Some(Some(DealRow { fill: Some(f), .. })) = p.deals.get(dk) else {
                anyhow::bail!("internal: applied deal {} of {} has no fill", dk.1, dk.0);
            };
            let head = heads
                .entry((f.account.as_str(), f.symbol.as_str()))
                .or_insert_with(|| head_of(&stored, f));
            let prev = head.replace(dk.1.clone());
            let key = (dk.0.as_str(), dk.1.as_str());
            if inserted.get(&key).map(|(_, w)| w) != Some(&prev) {
                set_prev.execute(params![dk.0, dk.1, prev])?;
            }
        }
    }
    {
        let mut sorted: Vec<_> = p.positions.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let writes: Vec<PosWrite<'_>> = sorted
            .into_iter()
            .map(|(key, pos)| {
                let head = match heads.get(&(key.0.as_str(), key.1.as_str())) {
                    Some(h) => h.as_deref(),
                    None => stored
                        .get(key)
                        .and_then(Option::as_ref)
                        .and_then(|s| s.last_deal_id.as_deref()),
                };
                (key.0.as_str(), key.1.as_str(), pos, head)
            })
            .collect();
        upsert_positions(tx, &writes, now)?;
    }
    for (kind, event_id) in &p.unprocess {
        tx.execute(
            "DELETE FROM processed_events WHERE kind = ?1 AND event_id = ?2",
            params![kind.as_str(), event_id],
        )?;
    }

    outs.reserve(p.outcomes.len());
    for (i, o) in p.outcomes {
        outs.push(outcome_of(i, &events[i], o));
    }
    outs.sort_unstable_by_key(|o| o.index);
    phases.mark(Phase::Write);
    Ok((
        outs,
        SideEffects {
            released: p.released,
        },
    ))
}

/// The time since the last mark, charged to a phase of a batch
/// transaction (`fills_sqlite_phase_*`): the applying thread's CPU time
/// (two `clock_gettime` calls per phase, nothing per event) and the wall
/// time.
pub(crate) struct PhaseClock<'m> {
    metrics: &'m FillsMetrics,
    cpu_ns: u64,
    wall: std::time::Instant,
}

impl<'m> PhaseClock<'m> {
    fn start(metrics: &'m FillsMetrics) -> PhaseClock<'m> {
        PhaseClock {
            metrics,
            cpu_ns: crate::util::cpu::thread_cpu_ns(),
            wall: std::time::Instant::now(),
        }
    }

    fn mark(&mut self, phase: Phase) {
        let (cpu, wall) = (crate::util::cpu::thread_cpu_ns(), std::time::Instant::now());
        let label = [phase.label()];
        self.metrics
            .sqlite_phase_cpu
            .with_label_values(&label)
            .inc_by(cpu.saturating_sub(self.cpu_ns) as f64 / 1e9);
        self.metrics
            .sqlite_phase_wall
            .with_label_values(&label)
            .inc_by(wall.duration_since(self.wall).as_secs_f64());
        (self.cpu_ns, self.wall) = (cpu, wall);
    }
}

/// Column values of a deal row (shared with the PostgreSQL store).
pub(crate) struct DealCols {
    pub status: &'static str,
    pub fill_event_id: Option<String>,
    pub account: Option<String>,
    pub symbol: Option<String>,
    pub side: Option<&'static str>,
    pub qty: Option<String>,
    pub price: Option<String>,
    pub exec_ns: Option<i64>,
    pub bust_event_id: Option<String>,
    pub bust_account: Option<String>,
    pub bust_ns: Option<i64>,
}

impl DealCols {
    pub fn of(row: &DealRow) -> DealCols {
        let f = row.fill.as_ref();
        let b = row.bust.as_ref();
        DealCols {
            status: row.status.as_str(),
            fill_event_id: f.map(|f| f.event_id.clone()),
            // F2: part of the key; a held BUST's row has the BUST's.
            account: f
                .map(|f| f.account.clone())
                .or_else(|| b.map(|b| b.account.clone())),
            symbol: f.map(|f| f.symbol.clone()),
            side: f.map(|f| f.side.as_str()),
            qty: f.map(|f| f.qty.to_string()),
            price: f.map(|f| f.price.to_string()),
            exec_ns: f.map(|f| f.exec_time),
            bust_event_id: b.map(|b| b.event_id.clone()),
            bust_account: b.map(|b| b.account.clone()),
            bust_ns: b.map(|b| b.exec_time),
        }
    }
}

/// Rows per multi-row INSERT of new deal rows (14 parameters each).
const DEAL_ROWS: usize = 32;

fn deal_insert_sql(rows: usize, returning: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty, price,
                            exec_ns, bust_event_id, bust_account, bust_ns, applied_seq,
                            prev_deal_id, created_ns, updated_ns) VALUES ",
    );
    for r in 0..rows {
        let sep = if r == 0 { "" } else { ", " };
        s.push_str(sep);
        s.push('(');
        for k in 1..=14 {
            let _ = write!(s, "?{}, ", 1 + 14 * r + k);
        }
        s.push_str("?1, ?1)");
    }
    if returning {
        s.push_str(" ON CONFLICT (account, deal_id) DO NOTHING RETURNING account, deal_id");
    }
    s
}

/// Bind the rows `DealRow::first(ev)` of new deals (`chunk`: event,
/// application sequence, chain predecessor) straight from the events'
/// fields.
fn bind_firsts(
    stmt: &mut rusqlite::CachedStatement<'_>,
    chunk: &[(&Event, Option<i64>, Option<&str>)],
    now: i64,
) -> anyhow::Result<()> {
    let mut buf = DecBufs::default();
    const NO_TEXT: Option<&str> = None;
    const NO_INT: Option<i64> = None;
    stmt.raw_bind_parameter(1, now)?;
    for (j, (ev, seq, prev)) in chunk.iter().enumerate() {
        let b = 1 + 14 * j;
        match ev {
            Event::Fill(f) => {
                stmt.raw_bind_parameter(b + 1, f.deal_id.as_str())?;
                stmt.raw_bind_parameter(b + 2, DealStatus::Applied.as_str())?;
                stmt.raw_bind_parameter(b + 3, f.event_id.as_str())?;
                stmt.raw_bind_parameter(b + 4, f.account.as_str())?;
                stmt.raw_bind_parameter(b + 5, f.symbol.as_str())?;
                stmt.raw_bind_parameter(b + 6, f.side.as_str())?;
                stmt.raw_bind_parameter(b + 7, buf.fmt(0, &f.qty))?;
                stmt.raw_bind_parameter(b + 8, buf.fmt(1, &f.price))?;
                stmt.raw_bind_parameter(b + 9, f.exec_time)?;
                stmt.raw_bind_parameter(b + 10, NO_TEXT)?;
                stmt.raw_bind_parameter(b + 11, NO_TEXT)?;
                stmt.raw_bind_parameter(b + 12, NO_INT)?;
            }
            Event::Bust(bu) => {
                stmt.raw_bind_parameter(b + 1, bu.deal_id.as_str())?;
                stmt.raw_bind_parameter(b + 2, DealStatus::BustHeld.as_str())?;
                stmt.raw_bind_parameter(b + 3, NO_TEXT)?;
                // F2: the held BUST's row is keyed by its (account, deal_id).
                stmt.raw_bind_parameter(b + 4, bu.account.as_str())?;
                for k in 5..=8 {
                    stmt.raw_bind_parameter(b + k, NO_TEXT)?;
                }
                stmt.raw_bind_parameter(b + 9, NO_INT)?;
                stmt.raw_bind_parameter(b + 10, bu.event_id.as_str())?;
                stmt.raw_bind_parameter(b + 11, bu.account.as_str())?;
                stmt.raw_bind_parameter(b + 12, bu.exec_time)?;
            }
        }
        stmt.raw_bind_parameter(b + 13, *seq)?;
        stmt.raw_bind_parameter(b + 14, *prev)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The BUST chain (prev_deal_id / last_deal_id) against an in-memory
    //! model of the rules: random batches of fills, repeats, busts of
    //! stored and same-batch fills, held busts (released by their FILL, or
    //! waiting while the deal id is filled on another account), deals filled
    //! twice, one deal id filled on two accounts (F2: two deals, each with
    //! its own chain link) and overflowing fills (rejected, whose rows are
    //! deleted and whose successors must be relinked).
    use super::*;
    use crate::fills::model::parse_value;

    /// Deal states with the content hash of the event(s) they hold (F2b).
    #[derive(Clone)]
    enum DealState {
        Applied { key: PosKey, fill: String },
        Busted { fill: String, bust: String },
        Held { bust: String },
    }

    #[derive(Default)]
    struct Model {
        /// (kind, event_id) -> content hash.
        processed: HashMap<(String, String), String>,
        /// By (account, deal_id) (F2).
        deals: HashMap<(String, String), DealState>,
        /// Applied, not busted fills per position, in application order.
        applied: HashMap<PosKey, Vec<(String, Side, Decimal, Decimal)>>,
    }

    fn replay(v: &[(String, Side, Decimal, Decimal)]) -> Result<Position, String> {
        Position::replay(v.iter().map(|(_, s, q, p)| (*s, q, p))).map_err(|e| e.to_string())
    }

    impl Model {
        fn apply(&mut self, ev: &Event) -> Outcome {
            let id = (ev.kind().as_str().to_owned(), ev.event_id().to_owned());
            let hash = ev.content_hash();
            if let Some(h) = self.processed.get(&id) {
                return if *h == hash {
                    Outcome::Duplicate
                } else {
                    Outcome::Conflict(String::new())
                };
            }
            self.processed.insert(id.clone(), hash.clone());
            let same = |stored: &str| {
                if stored == hash {
                    Outcome::DuplicateByDealId
                } else {
                    Outcome::Conflict(String::new())
                }
            };
            let dk = (ev.account().to_owned(), ev.deal_id().to_owned());
            let out = match ev {
                Event::Fill(f) => {
                    let key = (f.account.clone(), f.symbol.clone());
                    let apply = |m: &mut Model| -> Result<(), String> {
                        let v = m.applied.entry(key.clone()).or_default();
                        let cur = replay(v)?;
                        cur.apply(f.side, f.qty, f.price)
                            .map_err(|e| e.to_string())?;
                        v.push((f.deal_id.clone(), f.side, f.qty, f.price));
                        m.deals.insert(
                            dk.clone(),
                            DealState::Applied {
                                key: key.clone(),
                                fill: f.content_hash(),
                            },
                        );
                        Ok(())
                    };
                    match self.deals.get(&dk).cloned() {
                        None => apply(self).map_or_else(Outcome::Rejected, |()| Outcome::Applied),
                        Some(DealState::Held { bust }) => {
                            self.deals.insert(
                                dk.clone(),
                                DealState::Busted {
                                    fill: hash.clone(),
                                    bust,
                                },
                            );
                            Outcome::Applied
                        }
                        Some(DealState::Applied { fill, .. } | DealState::Busted { fill, .. }) => {
                            same(&fill)
                        }
                    }
                }
                Event::Bust(b) => match self.deals.get(&dk).cloned() {
                    None => {
                        self.deals
                            .insert(dk.clone(), DealState::Held { bust: hash.clone() });
                        Outcome::Held
                    }
                    Some(DealState::Applied { key, fill }) => {
                        let v = self.applied.get_mut(&key).unwrap();
                        let mut rest = v.clone();
                        rest.retain(|x| x.0 != b.deal_id);
                        match replay(&rest) {
                            Ok(_) => {
                                *v = rest;
                                self.deals.insert(
                                    dk.clone(),
                                    DealState::Busted {
                                        fill,
                                        bust: hash.clone(),
                                    },
                                );
                                Outcome::Applied
                            }
                            Err(e) => Outcome::Rejected(e),
                        }
                    }
                    Some(DealState::Busted { bust, .. } | DealState::Held { bust, .. }) => {
                        same(&bust)
                    }
                },
            };
            if matches!(out, Outcome::Rejected(_) | Outcome::Conflict(_)) {
                self.processed.remove(&id);
            }
            out
        }
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, m: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % m
        }
    }

    fn fill(id: &str, deal: &str, acc: &str, sym: &str, side: &str, qty: &str, px: &str) -> Event {
        parse_value(
            &serde_json::json!({"kind":"FILL","event_id":id,"deal_id":deal,
            "account":acc,"symbol":sym,"side":side,"qty":qty,"price":px,
            "exec_time":"2026-11-30T08:00:00Z"}),
        )
        .unwrap()
    }
    fn bust(id: &str, deal: &str, acc: &str) -> Event {
        parse_value(
            &serde_json::json!({"kind":"BUST","event_id":id,"deal_id":deal,
            "account":acc,"exec_time":"2026-11-30T08:00:00Z"}),
        )
        .unwrap()
    }

    #[test]
    fn chain_replays_like_the_model() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chain.db");
        rt.block_on(async {
            let store = SqliteStore::open(&path, StoreOptions::default(), FillsMetrics::unregistered())
                .await
                .unwrap();
            let mut model = Model::default();
            let mut rng = Rng(0x2545_F491_4F6C_DD1D);
            let accounts = ["A", "B"];
            let symbols = ["X", "Y"];
            let mut sent: Vec<Event> = Vec::new();
            // Deals filled so far (deal, account) and deals announced by a
            // BUST before their FILL.
            let mut filled: Vec<(String, String)> = Vec::new();
            let mut pending: Vec<(String, String)> = Vec::new();
            let mut n = 0;
            for round in 0..60 {
                let mut batch: Vec<Event> = Vec::new();
                // Some batches are long enough for the multi-row dedup insert.
                let size = if round % 7 == 3 { 100 + rng.below(100) } else { 1 + rng.below(25) };
                // Every fifth batch has only FILLs of new deals, repeats of
                // earlier events and now and then an overflowing FILL: the
                // fast path, and its fall-back to the planner.
                let fills_only = round % 5 == 1;
                let size = if fills_only { 40 + rng.below(120) } else { size };
                for _ in 0..size {
                    n += 1;
                    // Fills-only batches have accounts of their own, whose
                    // positions no huge FILL has pushed to the edge of the
                    // decimal range (busts of them come in the other batches).
                    let acc = if fills_only { ["C", "D"] } else { accounts }[rng.below(2) as usize]
                        .to_string();
                    let sym = symbols[rng.below(2) as usize];
                    let side = if rng.below(2) == 0 { "BUY" } else { "SELL" };
                    let qty = (1 + rng.below(20)).to_string();
                    let px = format!("1.{}", rng.below(100));
                    let pick = if fills_only {
                        match rng.below(100) {
                            0..=84 => 0,
                            85..=98 => 45,
                            _ if round % 10 == 6 => 92,
                            _ => 0,
                        }
                    } else {
                        rng.below(100)
                    };
                    let ev = match pick {
                        0..=44 => {
                            let deal = format!("D{n}");
                            filled.push((deal.clone(), acc.clone()));
                            fill(&format!("F{n}"), &deal, &acc, sym, side, &qty, &px)
                        }
                        // In fills-only batches: repeats from the same batch.
                        45 if fills_only && !batch.is_empty() => {
                            batch[rng.below(batch.len() as u64) as usize].clone()
                        }
                        45..=57 if !sent.is_empty() && !fills_only => {
                            sent[rng.below(sent.len() as u64) as usize].clone()
                        }
                        58..=72 if !filled.is_empty() => {
                            let (deal, a) = &filled[rng.below(filled.len() as u64) as usize];
                            // F2: a BUST naming another account is that
                            // account's deal: held, the fill untouched.
                            let a = if rng.below(10) == 0 { "OTHER" } else { a.as_str() };
                            bust(&format!("B{n}"), deal, a)
                        }
                        73..=79 => {
                            let deal = format!("P{n}");
                            pending.push((deal.clone(), acc.clone()));
                            bust(&format!("B{n}"), &deal, &acc)
                        }
                        80..=87 if !pending.is_empty() => {
                            let (deal, a) = pending.swap_remove(rng.below(pending.len() as u64) as usize);
                            // Sometimes the FILL is for another account: a
                            // deal of its own (F2), the BUST stays held.
                            let a = if rng.below(4) == 0 { acc.clone() } else { a };
                            filled.push((deal.clone(), a.clone()));
                            fill(&format!("F{n}"), &deal, &a, sym, side, &qty, &px)
                        }
                        88..=91 if !filled.is_empty() => {
                            // A second FILL of a deal id: on its account a
                            // conflict (F2b); on the other of A/B the other
                            // side of an internal cross, applied (F2).
                            let (deal, a) = filled[rng.below(filled.len() as u64) as usize].clone();
                            let a = match (rng.below(2), a.as_str()) {
                                (0, "A") => "B".to_string(),
                                (0, "B") => "A".to_string(),
                                _ => a,
                            };
                            filled.push((deal.clone(), a.clone()));
                            fill(&format!("F{n}"), &deal, &a, sym, side, &qty, &px)
                        }
                        92..=95 => {
                            let deal = format!("D{n}");
                            // In fills-only batches on an account of its own.
                            let acc = if fills_only { "E".to_string() } else { acc };
                            filled.push((deal.clone(), acc.clone()));
                            fill(&format!("F{n}"), &deal, &acc, sym, "BUY",
                                 "79228162514264337593543950335", "2")
                        }
                        _ => {
                            let deal = format!("D{n}");
                            filled.push((deal.clone(), acc.clone()));
                            fill(&format!("F{n}"), &deal, &acc, sym, side, &qty, &px)
                        }
                    };
                    batch.push(ev);
                }
                // A repeat inside one batch is a duplicate of the first
                // occurrence even when that one is rejected (presort), a
                // conflict if its content differs (F2b).
                let mut in_batch = HashMap::new();
                let want: Vec<Outcome> = batch
                    .iter()
                    .map(|e| {
                        match in_batch.entry((e.kind(), e.event_id().to_owned())) {
                            std::collections::hash_map::Entry::Vacant(v) => {
                                v.insert(e.content_hash());
                                model.apply(e)
                            }
                            std::collections::hash_map::Entry::Occupied(o) => {
                                if *o.get() == e.content_hash() {
                                    Outcome::Duplicate
                                } else {
                                    Outcome::Conflict(String::new())
                                }
                            }
                        }
                    })
                    .collect();
                sent.extend(batch.iter().cloned());
                let outs = store
                    .apply_batch("test", batch.into_iter().map(Ok).collect(), Extra::None)
                    .await
                    .unwrap();
                let got: Vec<Outcome> = outs
                    .into_iter()
                    .map(|o| match o.outcome {
                        Outcome::Rejected(_) => Outcome::Rejected(String::new()),
                        Outcome::Conflict(_) => Outcome::Conflict(String::new()),
                        o => o,
                    })
                    .collect();
                let want: Vec<Outcome> = want
                    .into_iter()
                    .map(|o| match o {
                        Outcome::Rejected(_) => Outcome::Rejected(String::new()),
                        o => o,
                    })
                    .collect();
                assert_eq!(got, want);
            }
            let stored = store.positions(None).await.unwrap();
            for r in &stored {
                let key = (r.account.clone(), r.symbol.clone());
                let want = replay(model.applied.get(&key).map_or(&[][..], Vec::as_slice)).unwrap();
                assert_eq!(r.position, want, "{key:?}");
            }
            let keys: HashSet<&PosKey> =
                model.applied.iter().filter(|(_, v)| !v.is_empty()).map(|(k, _)| k).collect();
            assert!(keys.iter().all(|k| stored.iter().any(|r| (&r.account, &r.symbol) == (&k.0, &k.1))));
            // Each chain, walked from its head, is exactly the model's
            // applied fills in application order.
            let conn = Connection::open(&path).unwrap();
            let mut sel = conn
                .prepare_cached("SELECT qty, avg_price, realized_pnl, last_deal_id FROM positions WHERE account = ?1 AND symbol = ?2")
                .unwrap();
            let mut walk = conn
                .prepare_cached("SELECT status, side, qty, price, prev_deal_id FROM fills WHERE account = ?1 AND deal_id = ?2")
                .unwrap();
            let mut busts = 0;
            for (key, v) in &model.applied {
                let head = load_position(&mut sel, &key.0, &key.1).unwrap().and_then(|s| s.last_deal_id);
                let h = load_history(&mut walk, key, head).unwrap();
                let ids: Vec<&str> = h.iter().map(|x| x.deal_id.as_str()).collect();
                let want: Vec<&str> = v.iter().map(|x| x.0.as_str()).collect();
                assert_eq!(ids, want, "{key:?}");
                busts += 1;
            }
            assert!(busts > 0);
            let n_busted: i64 = conn
                .query_row("SELECT count(*) FROM fills WHERE status = 'busted'", [], |r| r.get(0))
                .unwrap();
            let n_held: i64 = conn
                .query_row("SELECT count(*) FROM fills WHERE status = 'bust_held'", [], |r| r.get(0))
                .unwrap();
            assert!(n_busted > 10 && n_held > 0, "busted {n_busted}, held {n_held}");
        });
    }
}
