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
    offset, outcome_of, presort, AnswerFn, DeadLetterRow, Extra, HeldBust, HttpOutcome,
    PositionRow, StoreOptions, StoredAnswer, SweepTable,
};
use crate::fills::metrics::FillsMetrics;
use crate::fills::model::{Bust, Event, EventOutcome, Fill, Outcome, Parsed, Side};
use crate::fills::plan::{self, DealRow, DealStatus, HistFill, PosKey};
use crate::fills::position::Position;

const SCHEMA_V1: &str = include_str!("schema_sqlite.sql");

#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    opts: StoreOptions,
    metrics: FillsMetrics,
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
        let conn = tokio::task::spawn_blocking(move || -> anyhow::Result<Connection> {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
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
            conn.pragma_update(None, "wal_autocheckpoint", 4_000)?; // pages
            migrate(&mut conn)?;
            Ok(conn)
        })
        .await??;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            opts,
            metrics,
        })
    }

    pub fn metrics(&self) -> &FillsMetrics {
        &self.metrics
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

    pub async fn apply_events(
        &self,
        source: &str,
        events: Vec<Parsed>,
    ) -> anyhow::Result<Vec<EventOutcome>> {
        let mut all = Vec::with_capacity(events.len());
        let mut start = 0;
        let mut rest = events;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(self.opts.max_batch));
            let n = rest.len();
            let outs = self.apply_batch(source, rest, Extra::None).await?;
            all.extend(offset(outs, start));
            start += n;
            rest = tail;
        }
        Ok(all)
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
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = clock();
                let (outs, dl) = apply_in_tx(&tx, &src, &events, now)?;
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
                tx.commit().context("SQLite commit")?;
                timer.observe_duration();
                metrics.record(&src, &outs);
                count_side_effects(&metrics, &src, &dl);
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
            let (outs, dl) = apply_in_tx(&tx, "http", &events, now)?;
            let (status, body) = build_answer(&outs);
            tx.execute(
                "UPDATE idempotency_keys SET status = ?3, body = ?4 WHERE client = ?1 AND key = ?2",
                params![client, key, status, body],
            )?;
            tx.commit().context("SQLite commit")?;
            timer.observe_duration();
            metrics.record("http", &outs);
            count_side_effects(&metrics, "http", &dl);
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
                 WHERE status = 'bust_held' ORDER BY deal_id",
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

fn migrate(conn: &mut Connection) -> anyhow::Result<()> {
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
    tx.commit()?;
    Ok(())
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

pub(crate) fn count_side_effects(metrics: &FillsMetrics, source: &str, dl: &SideEffects) {
    metrics.busts_released.inc_by(dl.released as u64);
    if dl.dead_lettered > 0 {
        metrics
            .dead_lettered
            .with_label_values(&[source])
            .inc_by(dl.dead_lettered as u64);
    }
}

/// Counters of a committed batch besides per-event outcomes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SideEffects {
    pub released: usize,
    pub dead_lettered: usize,
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
struct StoredPos {
    position: Position,
    last_deal_id: Option<String>,
}

fn load_position(
    sel: &mut rusqlite::CachedStatement<'_>,
    key: &PosKey,
) -> anyhow::Result<Option<StoredPos>> {
    let row = sel
        .query_row(params![key.0, key.1], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .optional()?;
    row.map(|(q, a, p, last_deal_id)| {
        Ok(StoredPos {
            position: Position {
                qty: dec(&q)?,
                avg_price: dec(&a)?,
                realized_pnl: dec(&p)?,
            },
            last_deal_id,
        })
    })
    .transpose()
}

/// The applied fills of one position in application order, read by walking
/// the chain back from `head` by primary key (BUST replay; see
/// schema_sqlite.sql). Busted rows stay in the chain and are skipped.
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
            .query_row([&deal_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            })
            .optional()?
            .with_context(|| format!("fill chain of {}/{}: deal {deal_id} missing", key.0, key.1))?;
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

/// F1-F3 for one batch inside an open write transaction. Returns outcomes
/// in input order.
fn apply_in_tx(
    tx: &Transaction<'_>,
    source: &str,
    events: &[Parsed],
    now: i64,
) -> anyhow::Result<(Vec<EventOutcome>, SideEffects)> {
    let (unique, mut outs) = presort(events);

    // F1: the processed-events insert decides which events are new.
    let mut new_events: Vec<(usize, &Event)> = Vec::with_capacity(unique.len());
    {
        let mut ins = tx.prepare_cached(
            "INSERT INTO processed_events (kind, event_id, created_ns) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
        )?;
        // Key order: neighbouring inserts land on the same B-tree pages.
        let mut sorted: Vec<(usize, &Event)> = unique
            .iter()
            .filter_map(|&i| events[i].as_ref().ok().map(|e| (i, e)))
            .collect();
        sorted.sort_unstable_by(|a, b| {
            (a.1.kind(), a.1.event_id()).cmp(&(b.1.kind(), b.1.event_id()))
        });
        for (i, ev) in sorted {
            if ins.execute(params![ev.kind().as_str(), ev.event_id(), now])? == 1 {
                new_events.push((i, ev));
            } else {
                outs.push(outcome_of(i, &events[i], Outcome::Duplicate));
            }
        }
        new_events.sort_unstable_by_key(|&(i, _)| i);
    }

    // The positions of the new FILLs, with the heads of their chains (a
    // missing row is a flat position with an empty chain).
    let mut sel_pos = tx.prepare_cached(
        "SELECT qty, avg_price, realized_pnl, last_deal_id FROM positions
         WHERE account = ?1 AND symbol = ?2",
    )?;
    let mut stored: HashMap<PosKey, Option<StoredPos>> = HashMap::new();
    {
        let mut keys: Vec<PosKey> = new_events
            .iter()
            .filter_map(|(_, ev)| match ev {
                Event::Fill(f) => Some(key_of(f)),
                Event::Bust(_) => None,
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let row = load_position(&mut sel_pos, &key)?;
            stored.insert(key, row);
        }
    }
    let head_of = |stored: &HashMap<PosKey, Option<StoredPos>>, key: &PosKey| {
        stored
            .get(key)
            .and_then(Option::as_ref)
            .and_then(|s| s.last_deal_id.clone())
    };

    // Each new deal's first event creates its row (F2: the unique deal_id);
    // existing deals are read.
    let mut next_seq: i64 = tx.query_row(
        "SELECT value FROM counters WHERE name = 'fills_applied_seq'",
        [],
        |r| r.get(0),
    )?;
    let mut deals: HashMap<String, Option<DealRow>> = HashMap::new();
    let mut inserted: HashMap<String, DealRow> = HashMap::new();
    // prev_deal_id written with each inserted row. It assumes every new
    // deal's FILL is applied in event order; the rare exceptions (rejected,
    // or the deal already existed) are corrected after planning.
    let mut written_prev: HashMap<String, Option<String>> = HashMap::new();
    {
        let mut ins = tx.prepare_cached(
            "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty, price,
                                exec_ns, bust_event_id, bust_account, bust_ns, applied_seq,
                                created_ns, updated_ns, prev_deal_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15)
             ON CONFLICT (deal_id) DO NOTHING",
        )?;
        let mut sel =
            tx.prepare_cached(&format!("SELECT {DEAL_COLS} FROM fills WHERE deal_id = ?1"))?;
        // First event of each deal, with its application sequence and
        // chain predecessor drawn in event order; then inserted in deal_id
        // order (page locality).
        let mut firsts: Vec<(&str, DealRow, Option<i64>, Option<String>)> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        let mut heads: HashMap<PosKey, Option<String>> = HashMap::new();
        for &(_, ev) in &new_events {
            if seen.insert(ev.deal_id()) {
                let row = DealRow::first(ev);
                let (seq, prev) = match ev {
                    Event::Fill(f) => {
                        next_seq += 1;
                        let key = key_of(f);
                        let head = heads
                            .entry(key)
                            .or_insert_with_key(|k| head_of(&stored, k));
                        let prev = head.replace(f.deal_id.clone());
                        (Some(next_seq), prev)
                    }
                    Event::Bust(_) => (None, None),
                };
                firsts.push((ev.deal_id(), row, seq, prev));
            }
        }
        firsts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (deal_id, row, seq, prev) in firsts {
            if insert_deal(&mut ins, &row, seq, prev.as_deref(), now)? == 1 {
                deals.insert(deal_id.to_owned(), None);
                inserted.insert(deal_id.to_owned(), row);
                written_prev.insert(deal_id.to_owned(), prev);
            } else {
                let mut rows = sel.query([deal_id])?;
                let row = rows
                    .next()?
                    .with_context(|| format!("deal {deal_id} conflicted but is not readable"))?;
                let d = deal_from_row(row)?;
                deals.insert(deal_id.to_owned(), Some(d));
            }
        }
    }
    let before: HashMap<String, Option<DealRow>> = deals.clone();

    // Positions a BUST of an older fill touches, and the history of those
    // a BUST replays.
    for key in plan::position_keys(&new_events, &deals) {
        if !stored.contains_key(&key) {
            let row = load_position(&mut sel_pos, &key)?;
            stored.insert(key, row);
        }
    }
    drop(sel_pos);
    let mut history: HashMap<PosKey, Vec<HistFill>> = HashMap::new();
    {
        let mut walk = tx.prepare_cached(
            "SELECT status, side, qty, price, prev_deal_id FROM fills WHERE deal_id = ?1",
        )?;
        for key in plan::replay_keys(&new_events, &deals) {
            // The stored head predates this batch's rows: the planner adds
            // those itself, in order.
            let h = load_history(&mut walk, &key, head_of(&stored, &key))?;
            history.insert(key, h);
        }
    }
    let positions: HashMap<PosKey, Position> = stored
        .iter()
        .filter_map(|(k, s)| s.as_ref().map(|s| (k.clone(), s.position)))
        .collect();

    let p = plan::plan(&new_events, deals, positions, history);

    // Write what changed.
    {
        let mut upd = tx.prepare_cached(
            "UPDATE fills SET status = ?2, fill_event_id = ?3, account = ?4, symbol = ?5, side = ?6,
                              qty = ?7, price = ?8, exec_ns = ?9, bust_event_id = ?10,
                              bust_account = ?11, bust_ns = ?12,
                              applied_seq = COALESCE(?13, applied_seq), updated_ns = ?14
             WHERE deal_id = ?1",
        )?;
        let newly: HashSet<&str> = p.newly_applied.iter().map(String::as_str).collect();
        let mut deal_ids: Vec<&String> = p.deals.keys().collect();
        deal_ids.sort();
        for deal_id in deal_ids {
            let fin = &p.deals[deal_id];
            let written = match inserted.get(deal_id) {
                Some(row) => Some(row),
                None => before.get(deal_id).and_then(Option::as_ref),
            };
            if fin.as_ref() == written {
                continue;
            }
            match fin {
                None => {
                    tx.execute("DELETE FROM fills WHERE deal_id = ?1", [deal_id])?;
                }
                Some(row) => {
                    let was_applied_row = written.is_some_and(|w| w.status == DealStatus::Applied);
                    let seq = (newly.contains(deal_id.as_str()) && !was_applied_row).then(|| {
                        next_seq += 1;
                        next_seq
                    });
                    let c = DealCols::of(row);
                    upd.execute(params![
                        deal_id,
                        c.status,
                        c.fill_event_id,
                        c.account,
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
        tx.execute(
            "UPDATE counters SET value = ?1 WHERE name = 'fills_applied_seq'",
            [next_seq],
        )?;
    }
    // The chains: each position's newly applied fills, in application
    // order, follow its stored head. Rows whose assumed predecessor was
    // wrong (a rejected or already-known deal before them) are corrected.
    let mut heads: HashMap<&PosKey, Option<String>> = HashMap::new();
    {
        let mut set_prev =
            tx.prepare_cached("UPDATE fills SET prev_deal_id = ?2 WHERE deal_id = ?1")?;
        for deal_id in &p.newly_applied {
            let Some(Some(DealRow { fill: Some(f), .. })) = p.deals.get(deal_id) else {
                anyhow::bail!("internal: applied deal {deal_id} has no fill");
            };
            let key = stored
                .get_key_value(&(f.account.clone(), f.symbol.clone()))
                .map(|(k, _)| k)
                .with_context(|| format!("internal: position of deal {deal_id} not loaded"))?;
            let head = heads
                .entry(key)
                .or_insert_with(|| head_of(&stored, key));
            let prev = head.replace(deal_id.clone());
            if written_prev.get(deal_id) != Some(&prev) {
                set_prev.execute(params![deal_id, prev])?;
            }
        }
    }
    {
        let mut up = tx.prepare_cached(
            "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, last_deal_id,
                                    updated_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (account, symbol) DO UPDATE SET qty = excluded.qty,
                 avg_price = excluded.avg_price, realized_pnl = excluded.realized_pnl,
                 last_deal_id = excluded.last_deal_id, updated_ns = excluded.updated_ns",
        )?;
        let mut sorted: Vec<_> = p.positions.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, pos) in sorted {
            let head = match heads.get(key) {
                Some(h) => h.clone(),
                None => head_of(&stored, key),
            };
            up.execute(params![
                key.0,
                key.1,
                pos.qty.to_string(),
                pos.avg_price.to_string(),
                pos.realized_pnl.to_string(),
                head,
                now
            ])?;
        }
    }
    for (kind, event_id) in &p.unprocess {
        tx.execute(
            "DELETE FROM processed_events WHERE kind = ?1 AND event_id = ?2",
            params![kind.as_str(), event_id],
        )?;
    }
    for d in &p.dead_letters {
        tx.execute(
            "INSERT INTO dead_letters (source, kind, event_id, deal_id, reason, created_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                source,
                d.kind.as_str(),
                d.event_id,
                d.deal_id,
                d.reason,
                now
            ],
        )?;
    }

    let by_index: HashMap<usize, Outcome> = p.outcomes.into_iter().collect();
    for (i, o) in by_index {
        outs.push(outcome_of(i, &events[i], o));
    }
    outs.sort_by_key(|o| o.index);
    Ok((
        outs,
        SideEffects {
            released: p.released,
            dead_lettered: p.dead_letters.len(),
        },
    ))
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
            account: f.map(|f| f.account.clone()),
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

fn insert_deal(
    ins: &mut rusqlite::CachedStatement<'_>,
    row: &DealRow,
    seq: Option<i64>,
    prev_deal_id: Option<&str>,
    now: i64,
) -> rusqlite::Result<usize> {
    let c = DealCols::of(row);
    ins.execute(params![
        row.deal_id(),
        c.status,
        c.fill_event_id,
        c.account,
        c.symbol,
        c.side,
        c.qty,
        c.price,
        c.exec_ns,
        c.bust_event_id,
        c.bust_account,
        c.bust_ns,
        seq,
        now,
        prev_deal_id
    ])
}
