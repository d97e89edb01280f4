//! PostgreSQL fast path: the common batch in one statement, one round trip.
//!
//! The common batch holds FILLs of new events and new deals on
//! positions this process wrote last. For it the careful path
//! (`postgres::apply_in_tx`) costs about ten round trips: probe, insert,
//! create, lock and read positions, draw sequence numbers, probe and insert
//! deals, update positions, commit. Here the client decides the batch
//! *optimistically* from what it remembers and sends it as one statement
//! of data-modifying CTEs in an implicit transaction, and the database
//! checks every assumption inside that statement:
//!
//! - every event is new: a plain `INSERT` into `processed_events` (F1, F2:
//!   the primary key forbids a repeat, the statement fails);
//! - every deal is new: a plain `INSERT` into `fills` (F2/F3: the unique
//!   `(account, deal_id)` forbids a second row, the statement fails; the
//!   same deal id on another account is another deal);
//! - an event the client saw committed recently is a duplicate: counted in
//!   `processed_events` in the same snapshot (one index probe per id: a
//!   `LATERAL … LIMIT 1`, which no plan can turn into a scan of every FILL
//!   row); if it is not there (swept by F5), the statement fails;
//! - positions are taken in the careful path's order, so that two batches
//!   on common positions (Kafka partitions, JetStream, HTTP, two
//!   instances) queue instead of deadlocking (PostgreSQL finds a deadlock
//!   only after `deadlock_timeout`, 1 s by default): first the new ones
//!   are inserted, in `(account, symbol)` order (CTE `np`), then the cached
//!   ones are locked, in that order (`lk`, which waits for `np` and which
//!   the `UPDATE` waits for), as the careful path inserts the missing rows
//!   and then locks every row in order;
//! - every cached position is still what this process last committed: the
//!   `UPDATE` compares the stored text of quantity, average price and P&L
//!   (a compare-and-set; under READ COMMITTED a concurrent writer's commit
//!   is re-checked on the new row version); fewer rows than sent and the
//!   statement fails. Positions not in the cache are inserted with a plain
//!   `INSERT` (an existing row makes the statement fail);
//! - the application sequence is drawn only after the position rows are
//!   locked by that `UPDATE`/`INSERT` (the CTE `locked` is an input of the
//!   CTE that calls `nextval`), in event order, as in the careful path;
//! - the fill rows are inserted last, in `(account, deal_id)` order, the
//!   careful path's deal lock order (F2's key), so the order of the whole
//!   statement is the careful path's: processed events, positions, deals.
//!
//! One statement is one transaction: all of it commits or nothing does,
//! and the answer (with `synchronous_commit = on`) comes after the commit
//! is durable (tokio-postgres returns at `ReadyForQuery`). When the
//! database reports any error, nothing was written and the batch goes to
//! the careful path, which then refreshes the cache. A lost connection
//! (commit state unknown) is returned as an error, like a failed COMMIT.
//!
//! The position arithmetic (F6) is the same `Position::apply` in event
//! order; a FILL it rejects, a BUST, or two events of one deal send the
//! batch to the careful path before anything is sent.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::{outcome_of, presort};
use crate::fills::model::{Event, EventOutcome, Fill, Outcome, Parsed};
use crate::fills::position::Position;

// The statement's text, in pieces for `concat!`.
// `$first`: a CTE (with its trailing comma) run before all others, and
// `$first_col` its count in `locked` (with its trailing comma); both empty
// when the statement has none.
macro_rules! fast_ctes {
    ($first:literal, $first_col:literal) => {
        concat!(
            "
WITH ",
            $first,
            "pe AS (
    INSERT INTO processed_events (kind, event_id, created_ns, content_hash)
    SELECT 'FILL', e, $1, h FROM unnest($2::text[], $26::text[]) AS u(e, h)
    RETURNING 1
), seen AS (
    SELECT count(*) AS n
    FROM unnest($3::text[]) AS u(e),
         LATERAL (SELECT 1 FROM processed_events p
                  WHERE p.kind = 'FILL' AND p.event_id = u.e LIMIT 1) AS x
), np AS (
    INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, updated_ns)
    SELECT a, s, q::numeric, ap::numeric, r::numeric, $1
    FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
         AS u(a, s, q, ap, r)
    ORDER BY a, s
    RETURNING 1
), lk AS MATERIALIZED (
    SELECT 1
    FROM positions p JOIN unnest($4::text[], $5::text[]) AS u(a, s)
         ON p.account = u.a AND p.symbol = u.s
    WHERE (SELECT count(*) FROM np) >= 0
    ORDER BY p.account, p.symbol
    FOR UPDATE OF p
), cas AS (
    UPDATE positions p
    SET qty = u.q::numeric, avg_price = u.ap::numeric, realized_pnl = u.r::numeric,
        updated_ns = $1
    FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
                $10::text[], $11::text[]) AS u(a, s, oq, oa, orp, q, ap, r)
    WHERE (SELECT count(*) FROM lk) >= 0
      AND p.account = u.a AND p.symbol = u.s
      AND p.qty::text = u.oq AND p.avg_price::text = u.oa AND p.realized_pnl::text = u.orp
    RETURNING 1
), locked AS MATERIALIZED (
    SELECT ",
            $first_col,
            "(SELECT count(*) FROM pe) AS pe, (SELECT n FROM seen) AS seen,
           (SELECT count(*) FROM cas) AS cas, (SELECT count(*) FROM np) AS np
), seqs AS MATERIALIZED (
    SELECT array_agg(nextval('fills_applied_seq') ORDER BY g) AS a
    FROM locked, generate_series(1, cardinality($17::text[])) AS g
), f AS (
    INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty, price,
                       exec_ns, applied_seq, created_ns, updated_ns)
    SELECT u.d, 'applied', u.e, u.a, u.s, u.si, u.q::numeric, u.p::numeric, u.t, seqs.a[u.o],
           $1, $1
    FROM seqs,
         unnest($17::text[], $18::text[], $19::text[], $20::text[], $21::text[], $22::text[],
                $23::text[], $24::int8[], $25::int4[]) AS u(d, e, a, s, si, q, p, t, o)
    RETURNING 1
)"
        )
    };
}

// `$cond`: a further condition (starting with AND) for the commit, `$why`
// its part of the error message.
macro_rules! fast_answer {
    ($cond:literal, $why:literal) => {
        concat!(
            "
SELECT CASE
    WHEN l.seen = cardinality($3::text[]) AND l.cas = cardinality($4::text[]) ",
            $cond,
            "
    THEN (SELECT count(*) FROM f)
    ELSE ('fills fast path: ' || l.seen || ' of ' || cardinality($3::text[])
          || ' expected duplicates found, ' || l.cas || ' of ' || cardinality($4::text[])
          || ' cached positions unchanged'",
            $why,
            ")::int8
END
FROM locked l"
        )
    };
}

/// Parameters: $1 now; $2 new event ids (sorted); $3 event ids expected to
/// be processed already; $4-$11 cached positions (account, symbol, stored
/// qty, avg price, P&L, new qty, avg price, P&L; sorted); $12-$16 new
/// positions (account, symbol, qty, avg price, P&L; sorted); $17-$25 the
/// fills in (account, deal_id) order (F2; deal, event, account, symbol, side, qty, price,
/// exec_ns, 1-based place in event order: the n-th FILL of the batch gets
/// the n-th of the sequence numbers drawn in `seqs`); $26 the content
/// hashes of $2's events (F2b). Returns the number of fill rows inserted.
pub(crate) const FAST_SQL: &str = concat!(fast_ctes!("", ""), fast_answer!("", ""));

/// The same for a stream fetch: $27-$29 (stream, consumer, last sequence)
/// move the consumer position in the same statement, so in the same
/// transaction as the batch's effects, and only forwards (as
/// `upsert_consumer` of the careful path).
pub(crate) const FAST_STREAM_SQL: &str = concat!(
    fast_ctes!("", ""),
    ", cons AS (
    INSERT INTO consumer_positions (stream, consumer, last_seq, updated_ns)
    VALUES ($27, $28, $29, $1)
    ON CONFLICT (stream, consumer) DO UPDATE
    SET last_seq = GREATEST(consumer_positions.last_seq, EXCLUDED.last_seq),
        updated_ns = EXCLUDED.updated_ns
    RETURNING 1
)",
    fast_answer!("", "")
);

/// The same for a Kafka partition batch whose offset row exists: $27-$30
/// (stream, consumer, new offset, expected stored offset). The offset
/// moves by compare-and-set, first in the statement (so a second instance
/// on the partition waits on that row), from the offset the batch was read
/// after to its last record, and only forwards; if the stored offset is
/// another, the statement fails (nothing written) and the careful path
/// reports the conflict.
pub(crate) const FAST_OFFSET_SQL: &str = concat!(
    fast_ctes!(
        "off AS (
    UPDATE consumer_positions SET last_seq = $29, updated_ns = $1
    WHERE stream = $27 AND consumer = $28 AND last_seq = $30 AND last_seq < $29
    RETURNING 1
), ",
        "(SELECT count(*) FROM off) AS off, "
    ),
    fast_answer!(
        "AND l.off = 1",
        " || ', ' || l.off || ' of 1 offset rows moved'"
    )
);

/// The same for a partition without a stored offset: $27-$29 (stream,
/// consumer, new offset); the row is inserted, and if one exists already
/// the statement fails.
pub(crate) const FAST_OFFSET_FIRST_SQL: &str = concat!(
    fast_ctes!(
        "off AS (
    INSERT INTO consumer_positions (stream, consumer, last_seq, updated_ns)
    VALUES ($27, $28, $29, $1) ON CONFLICT (stream, consumer) DO NOTHING
    RETURNING 1
), ",
        "(SELECT count(*) FROM off) AS off, "
    ),
    fast_answer!(
        "AND l.off = 1",
        " || ', ' || l.off || ' of 1 offset rows inserted'"
    )
);

/// Hints of one store: what this process committed last. Never the truth:
/// every hint is checked by the fast statement (see the module comment).
#[derive(Default)]
pub(crate) struct Cache {
    /// account -> symbol -> position as last committed by this process.
    positions: HashMap<String, HashMap<String, Position>>,
    entries: usize,
    /// FILL event ids committed lately (two generations), with their
    /// content hash when known (F2b; the careful path does not keep it).
    recent: HashMap<String, Option<String>>,
    older: HashMap<String, Option<String>>,
}

const MAX_POSITIONS: usize = 1_000_000;
const RECENT_GENERATION: usize = 65_536;

impl Cache {
    fn position(&self, account: &str, symbol: &str) -> Option<Position> {
        self.positions.get(account)?.get(symbol).copied()
    }

    /// Committed lately: Some(its content hash, if known).
    fn seen_recently(&self, event_id: &str) -> Option<Option<&str>> {
        self.recent
            .get(event_id)
            .or_else(|| self.older.get(event_id))
            .map(Option::as_deref)
    }

    /// Committed positions (after COMMIT only).
    pub(crate) fn store_positions<'a, I>(&mut self, rows: I)
    where
        I: IntoIterator<Item = (&'a str, &'a str, Position)>,
    {
        for (a, s, p) in rows {
            if self.entries >= MAX_POSITIONS {
                self.positions.clear();
                self.entries = 0;
            }
            let m = self.positions.entry(a.to_owned()).or_default();
            if m.insert(s.to_owned(), p).is_none() {
                self.entries += 1;
            }
        }
    }

    /// Committed FILL event ids (after COMMIT only).
    pub(crate) fn store_events<'a, I>(&mut self, ids: I)
    where
        I: IntoIterator<Item = (&'a str, Option<String>)>,
    {
        for (id, hash) in ids {
            if self.recent.len() >= RECENT_GENERATION {
                self.older = std::mem::take(&mut self.recent);
            }
            self.recent.insert(id.to_owned(), hash);
        }
    }

    /// Forget what a batch touched (its outcome is unknown).
    pub(crate) fn forget(&mut self, events: &[Parsed]) {
        for e in events.iter().flatten() {
            if let Event::Fill(f) = e {
                if let Some(m) = self.positions.get_mut(&f.account) {
                    if m.remove(&f.symbol).is_some() {
                        self.entries -= 1;
                    }
                }
            }
        }
    }
}

/// The statement's parameters and the answer it gives when it commits.
pub(crate) struct FastPlan<'a> {
    pub outcomes: Vec<EventOutcome>,
    pub fills: Vec<&'a Fill>,
    /// Final position of every key the batch touches, sorted.
    pub positions: Vec<(&'a str, &'a str, Position)>,
    ids: Vec<&'a str>,
    /// F2b: the content hash of each of `ids`.
    hashes: Vec<String>,
    dups: Vec<&'a str>,
    cas: [Vec<&'a str>; 2],
    cas_vals: [Vec<String>; 6],
    new: [Vec<&'a str>; 2],
    new_vals: [Vec<String>; 3],
    f_str: [Vec<&'a str>; 5],
    f_dec: [Vec<String>; 2],
    f_t: Vec<i64>,
    /// 1-based place of each fill row in event order.
    f_rank: Vec<i32>,
}

type Key<'a> = (&'a str, &'a str);

/// [`plan`] under the cache's lock (held only while planning: the plan
/// borrows the events, not the cache).
pub(crate) fn plan_locked<'a>(
    events: &'a [Parsed],
    cache: &Mutex<Cache>,
) -> anyhow::Result<Option<FastPlan<'a>>> {
    let cache = cache
        .lock()
        .map_err(|_| anyhow::anyhow!("fills cache poisoned"))?;
    Ok(plan(events, &cache))
}

/// Decide `events` from the cache, or None when the batch needs the
/// careful path (a BUST, two new events of one deal (F2: one
/// `(account, deal_id)`), a FILL the position arithmetic rejects).
pub(crate) fn plan<'a>(events: &'a [Parsed], cache: &Cache) -> Option<FastPlan<'a>> {
    let (unique, mut outcomes) = presort(events);
    // F2: a deal is its (account, deal_id).
    let mut deals: HashSet<(&str, &str)> = HashSet::with_capacity(unique.len());
    // (account, symbol) -> (cached, current)
    let mut pos: HashMap<Key<'a>, (Option<Position>, Position)> = HashMap::new();
    let mut fills: Vec<&Fill> = Vec::with_capacity(unique.len());
    let mut dups: Vec<&str> = Vec::new();
    for &i in &unique {
        let Ok(Event::Fill(f)) = &events[i] else {
            return None; // presort keeps valid events only: this is a BUST
        };
        if let Some(hash) = cache.seen_recently(&f.event_id) {
            // F2b: a duplicate only with the same content; anything else
            // (another content, or a hash not kept) the careful path
            // decides.
            if hash != Some(f.content_hash().as_str()) {
                return None;
            }
            dups.push(&f.event_id);
            outcomes.push(outcome_of(i, &events[i], Outcome::Duplicate));
            continue;
        }
        if !deals.insert((&f.account, &f.deal_id)) {
            return None;
        }
        let e = pos
            .entry((f.account.as_str(), f.symbol.as_str()))
            .or_insert_with(|| {
                let c = cache.position(&f.account, &f.symbol);
                (c, c.unwrap_or_default())
            });
        e.1 = e.1.apply(f.side, f.qty, f.price).ok()?;
        fills.push(f);
        outcomes.push(outcome_of(i, &events[i], Outcome::Applied));
    }
    outcomes.sort_by_key(|o| o.index);
    let mut keys: Vec<(Key<'a>, (Option<Position>, Position))> = pos.into_iter().collect();
    keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut cas: [Vec<&str>; 2] = Default::default();
    let mut cas_vals: [Vec<String>; 6] = Default::default();
    let mut new: [Vec<&str>; 2] = Default::default();
    let mut new_vals: [Vec<String>; 3] = Default::default();
    let mut positions = Vec::with_capacity(keys.len());
    for ((a, s), (old, cur)) in keys {
        let vals = [
            cur.qty.to_string(),
            cur.avg_price.to_string(),
            cur.realized_pnl.to_string(),
        ];
        match old {
            Some(o) => {
                cas[0].push(a);
                cas[1].push(s);
                let [q, ap, r] = vals;
                for (v, x) in cas_vals.iter_mut().zip([
                    o.qty.to_string(),
                    o.avg_price.to_string(),
                    o.realized_pnl.to_string(),
                    q,
                    ap,
                    r,
                ]) {
                    v.push(x);
                }
            }
            None => {
                new[0].push(a);
                new[1].push(s);
                for (v, x) in new_vals.iter_mut().zip(vals) {
                    v.push(x);
                }
            }
        }
        positions.push((a, s, cur));
    }
    // Processed rows in key order, as the careful path, with their content
    // hashes (F2b).
    let mut by_id: Vec<&Fill> = fills.clone();
    by_id.sort_unstable_by(|a, b| a.event_id.cmp(&b.event_id));
    let ids: Vec<&str> = by_id.iter().map(|f| f.event_id.as_str()).collect();
    let hashes: Vec<String> = by_id.iter().map(|f| f.content_hash()).collect();
    // Fill rows in (account, deal_id) order (F2: the unique key's lock
    // order, as the careful path), each with its place in event order: the
    // n-th FILL of the batch gets the n-th sequence number drawn.
    let mut by_deal: Vec<(usize, &Fill)> = fills.iter().copied().enumerate().collect();
    by_deal
        .sort_unstable_by(|a, b| (&a.1.account, &a.1.deal_id).cmp(&(&b.1.account, &b.1.deal_id)));
    let f_str = [
        by_deal.iter().map(|(_, f)| f.deal_id.as_str()).collect(),
        by_deal.iter().map(|(_, f)| f.event_id.as_str()).collect(),
        by_deal.iter().map(|(_, f)| f.account.as_str()).collect(),
        by_deal.iter().map(|(_, f)| f.symbol.as_str()).collect(),
        by_deal.iter().map(|(_, f)| f.side.as_str()).collect(),
    ];
    let f_dec = [
        by_deal.iter().map(|(_, f)| f.qty.to_string()).collect(),
        by_deal.iter().map(|(_, f)| f.price.to_string()).collect(),
    ];
    let f_t = by_deal.iter().map(|(_, f)| f.exec_time).collect();
    let f_rank = by_deal
        .iter()
        .map(|&(i, _)| i32::try_from(i + 1).ok())
        .collect::<Option<Vec<i32>>>()?;
    Some(FastPlan {
        outcomes,
        fills,
        positions,
        ids,
        hashes,
        dups,
        cas,
        cas_vals,
        new,
        new_vals,
        f_str,
        f_dec,
        f_t,
        f_rank,
    })
}

impl FastPlan<'_> {
    /// After the statement committed, having inserted `inserted` fill
    /// rows: check that it wrote what was planned, then remember the
    /// positions and FILLs it committed.
    pub(crate) fn committed(&self, inserted: i64, cache: &Mutex<Cache>) -> anyhow::Result<()> {
        anyhow::ensure!(
            inserted == self.fills.len() as i64,
            "fast path inserted {inserted} fill rows, expected {}",
            self.fills.len()
        );
        if let Ok(mut c) = cache.lock() {
            c.store_positions(self.positions.iter().copied());
            c.store_events(
                self.ids
                    .iter()
                    .copied()
                    .zip(self.hashes.iter().cloned().map(Some)),
            );
        }
        Ok(())
    }

    /// Run the statement (implicit transaction: it has committed when this
    /// returns Ok) with `extra` as its parameters from $27 on. Returns the
    /// number of fill rows inserted.
    pub(crate) async fn execute(
        &self,
        client: &tokio_postgres::Client,
        stmt: &tokio_postgres::Statement,
        now: i64,
        extra: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<i64, tokio_postgres::Error> {
        let [ca, cs] = &self.cas;
        let [oq, oa, orp, q, ap, r] = &self.cas_vals;
        let [na, ns] = &self.new;
        let [nq, nap, nr] = &self.new_vals;
        let [fd, fe, fa, fs, fsi] = &self.f_str;
        let [fq, fp] = &self.f_dec;
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
            &now,
            &self.ids,
            &self.dups,
            ca,
            cs,
            oq,
            oa,
            orp,
            q,
            ap,
            r,
            na,
            ns,
            nq,
            nap,
            nr,
            fd,
            fe,
            fa,
            fs,
            fsi,
            fq,
            fp,
            &self.f_t,
            &self.f_rank,
            &self.hashes,
        ];
        params.extend_from_slice(extra);
        let row = client.query_one(stmt, &params).await?;
        Ok(row.get(0))
    }
}
