//! Exactly-once apply throughput: tickgate's batched store against the
//! textbook design (one transaction per event: dedup insert, then the
//! effect), on the same database with the same durability, side by side.
//!
//!     cargo bench --bench fills
//!     TICKGATE_TEST_PG_URL=postgres://postgres@127.0.0.1:5432/test cargo bench --bench fills
//!
//! Optional: FILLS_BENCH_N (events for the batched runs, default 200000),
//! FILLS_BENCH_TEXTBOOK_N (default 5000), FILLS_BENCH_BATCH (default 1000),
//! FILLS_BENCH_PG_LANES (tickgate's connections, default 8),
//! FILLS_BENCH_CAREFUL (0 = skip the row with the fast path off).
//! The input has 10% re-deliveries; events/s counts input events
//! (duplicates included) that were committed. "machine CPU" is the busy
//! time of every process on the machine during a row (the database
//! server's backends included, niced jobs not): on a quiet machine it is
//! what a design costs in all, where "CPU s" is the client's share only.
//!
//! Below the table, tickgate's SQLite row by phase of its transactions
//! (`fills_sqlite_phase_*`): CPU and wall µs per event of each, and the
//! bytes the process wrote per event (WAL frames, checkpoints, statement
//! journals): a change that makes one phase dearer, or writes more pages
//! per commit, shows there even when the machine's noise hides it in
//! the totals.

#[path = "common/cpu.rs"]
mod cpu;
#[path = "common/env.rs"]
mod env;

use env::env_usize;
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Instant;

use rust_decimal::Decimal;
use tickgate::fills::metrics::{FillsMetrics, SqlitePhase};
use tickgate::fills::model::{parse_value, Event, Fill, Outcome, Parsed};
use tickgate::fills::position::Position;
use tickgate::fills::store::{PgStore, SqliteStore, Store, StoreOptions};

/// `n` unique fills over 200 accounts x 10 symbols, plus 10% repeats
/// mixed in shortly after their original.
fn workload(n: usize, tag: &str) -> Vec<Parsed> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut out = Vec::with_capacity(n + n / 10);
    for i in 0..n {
        let e = parse_value(&serde_json::json!({
            "kind": "FILL", "event_id": format!("{tag}-E-{i}"), "deal_id": format!("{tag}-D-{i}"),
            "account": format!("ACC-{}", rnd(200)), "symbol": format!("SYM{}", rnd(10)),
            "side": if rnd(2) == 0 { "BUY" } else { "SELL" },
            "qty": format!("{}", 1 + rnd(100_000)), "price": format!("1.{:05}", rnd(100_000)),
            "exec_time": "2026-11-30T08:00:00.123456Z"
        }));
        out.push(e);
        if i % 10 == 9 {
            let back = rnd(10) as usize;
            out.push(out[out.len() - 1 - back].clone());
        }
    }
    out
}

struct Row {
    backend: &'static str,
    design: String,
    events: usize,
    secs: f64,
    /// CPU seconds during the run: this process's (all threads, user +
    /// system; on a shared machine wall time includes waiting for a core)
    /// and the machine's (the server's work too).
    cpu: Cpu,
}

/// CPU seconds so far: this process's (user + system, every thread) and
/// the whole machine's busy time (the database server's backends
/// included, niced jobs not).
#[derive(Clone, Copy)]
struct Cpu {
    process: f64,
    machine: f64,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            process: self.process - o.process,
            machine: self.machine - o.machine,
        }
    }
}

fn cpu_secs() -> Cpu {
    Cpu {
        process: cpu::process_cpu_ns() as f64 / 1e9,
        machine: cpu::machine_busy_ns() as f64 / 1e9,
    }
}

fn fills_of(events: &[Parsed]) -> impl Iterator<Item = &Fill> {
    events.iter().filter_map(|e| match e {
        Ok(Event::Fill(f)) => Some(f),
        _ => None,
    })
}

/// Bytes this process has passed to write system calls so far
/// (`/proc/self/io` `wchar`; 0 where it cannot be read).
fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Per phase of the store's SQLite transactions: (label, CPU s, wall s)
/// so far.
fn sqlite_phases(m: &FillsMetrics) -> Vec<(&'static str, f64, f64)> {
    SqlitePhase::ALL
        .iter()
        .map(|p| {
            let l = [p.label()];
            (
                p.label(),
                m.sqlite_phase_cpu.with_label_values(&l).get(),
                m.sqlite_phase_wall.with_label_values(&l).get(),
            )
        })
        .collect()
}

/// The SQLite row's phases and bytes written, printed below the table.
fn phase_report(
    events: usize,
    batches: usize,
    phases: &[(&str, f64, f64)],
    written: u64,
    total_secs: f64,
) -> String {
    use std::fmt::Write as _;
    let per = |s: f64| s * 1e6 / events as f64;
    let mut out = String::from(
        "\nsqlite, tickgate, by phase of its transactions (the applying thread's CPU; wall):\n\n\
         | phase | CPU µs per event | wall µs per event |\n|---|---:|---:|\n",
    );
    let (mut cpu, mut wall) = (0.0, 0.0);
    for (label, c, w) in phases {
        let _ = writeln!(out, "| {label} | {:.2} | {:.2} |", per(*c), per(*w));
        cpu += c;
        wall += w;
    }
    let _ = writeln!(
        out,
        "| all phases | {:.2} | {:.2} (of {:.2} for the row) |",
        per(cpu),
        per(wall),
        per(total_secs)
    );
    let _ = writeln!(
        out,
        "\nwritten by the process: {:.0} bytes per event, {:.0} KiB per transaction \
         (WAL frames, checkpoints, statement journals)",
        written as f64 / events as f64,
        written as f64 / 1024.0 / batches as f64
    );
    out
}

async fn batched(store: &Store, events: Vec<Parsed>, batch: usize) -> (usize, f64, Cpu) {
    let chunks: Vec<Vec<Parsed>> = events.chunks(batch).map(<[Parsed]>::to_vec).collect();
    let cpu = cpu_secs();
    let t = Instant::now();
    let mut applied = 0;
    for c in chunks {
        let outs = store.apply_events("bench", c).await.expect("apply");
        applied += outs
            .iter()
            .filter(|o| o.outcome == Outcome::Applied)
            .count();
    }
    let secs = t.elapsed().as_secs_f64();
    (applied, secs, cpu_secs() - cpu)
}

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).expect("stored decimal")
}

/// Textbook on SQLite: per event BEGIN IMMEDIATE; INSERT processed ON
/// CONFLICT DO NOTHING; if new: INSERT fill, read position, upsert it; COMMIT.
fn textbook_sqlite(path: &std::path::Path, events: &[Parsed]) -> (usize, f64, Cpu) {
    let mut c = rusqlite::Connection::open(path).expect("open");
    c.pragma_update(None, "journal_mode", "WAL").expect("wal");
    c.pragma_update(None, "synchronous", "FULL").expect("sync");
    let cpu = cpu_secs();
    let t = Instant::now();
    let mut applied = 0;
    for f in fills_of(events) {
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        let new = tx
            .execute(
                "INSERT INTO processed_events (kind, event_id, created_ns) VALUES ('FILL', ?1, 0)
                 ON CONFLICT DO NOTHING",
                [&f.event_id],
            )
            .expect("dedup");
        if new == 1 {
            tx.execute(
                "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty,
                                    price, exec_ns, created_ns, updated_ns)
                 VALUES (?1, 'applied', ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0)",
                rusqlite::params![
                    f.deal_id,
                    f.event_id,
                    f.account,
                    f.symbol,
                    f.side.as_str(),
                    f.qty.to_string(),
                    f.price.to_string(),
                    f.exec_time
                ],
            )
            .expect("fill");
            let cur: Option<(String, String, String)> = tx
                .query_row(
                    "SELECT qty, avg_price, realized_pnl FROM positions
                     WHERE account = ?1 AND symbol = ?2",
                    [&f.account, &f.symbol],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .ok();
            let p = cur
                .map(|(q, a, r)| Position {
                    qty: d(&q),
                    avg_price: d(&a),
                    realized_pnl: d(&r),
                })
                .unwrap_or_default()
                .apply(f.side, f.qty, f.price)
                .expect("arithmetic");
            tx.execute(
                "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, updated_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0)
                 ON CONFLICT (account, symbol) DO UPDATE SET qty = excluded.qty,
                   avg_price = excluded.avg_price, realized_pnl = excluded.realized_pnl",
                rusqlite::params![
                    f.account,
                    f.symbol,
                    p.qty.to_string(),
                    p.avg_price.to_string(),
                    p.realized_pnl.to_string()
                ],
            )
            .expect("position");
            applied += 1;
        }
        tx.commit().expect("commit");
    }
    (applied, t.elapsed().as_secs_f64(), cpu_secs() - cpu)
}

/// Textbook on PostgreSQL, same steps, one transaction per event.
async fn textbook_pg(url: &str, schema: &str, events: &[Parsed]) -> (usize, f64, Cpu) {
    let (mut c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    c.batch_execute(&format!("SET search_path TO {schema}"))
        .await
        .expect("schema");
    let dedup = c
        .prepare(
            "INSERT INTO processed_events (kind, event_id, created_ns) VALUES ('FILL', $1, 0)
             ON CONFLICT DO NOTHING",
        )
        .await
        .expect("prepare");
    let ins_fill = c
        .prepare(
            "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty, price,
                                exec_ns, applied_seq, created_ns, updated_ns)
             VALUES ($1, 'applied', $2, $3, $4, $5, $6::text::numeric, $7::text::numeric, $8,
                     nextval('fills_applied_seq'), 0, 0)",
        )
        .await
        .expect("prepare");
    let ins_pos = c
        .prepare(
            "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, updated_ns)
             VALUES ($1, $2, 0, 0, 0, 0) ON CONFLICT DO NOTHING",
        )
        .await
        .expect("prepare");
    let sel_pos = c
        .prepare(
            "SELECT qty::text, avg_price::text, realized_pnl::text FROM positions
             WHERE account = $1 AND symbol = $2 FOR UPDATE",
        )
        .await
        .expect("prepare");
    let upd_pos = c
        .prepare(
            "UPDATE positions SET qty = $3::text::numeric, avg_price = $4::text::numeric,
                                  realized_pnl = $5::text::numeric
             WHERE account = $1 AND symbol = $2",
        )
        .await
        .expect("prepare");
    let cpu = cpu_secs();
    let t = Instant::now();
    let mut applied = 0;
    for f in fills_of(events) {
        let tx = c.transaction().await.expect("begin");
        if tx.execute(&dedup, &[&f.event_id]).await.expect("dedup") == 1 {
            tx.execute(
                &ins_fill,
                &[
                    &f.deal_id,
                    &f.event_id,
                    &f.account,
                    &f.symbol,
                    &f.side.as_str(),
                    &f.qty.to_string(),
                    &f.price.to_string(),
                    &f.exec_time,
                ],
            )
            .await
            .expect("fill");
            tx.execute(&ins_pos, &[&f.account, &f.symbol])
                .await
                .expect("pos");
            let r = tx
                .query_one(&sel_pos, &[&f.account, &f.symbol])
                .await
                .expect("lock");
            let p = Position {
                qty: d(r.get(0)),
                avg_price: d(r.get(1)),
                realized_pnl: d(r.get(2)),
            }
            .apply(f.side, f.qty, f.price)
            .expect("arithmetic");
            tx.execute(
                &upd_pos,
                &[
                    &f.account,
                    &f.symbol,
                    &p.qty.to_string(),
                    &p.avg_price.to_string(),
                    &p.realized_pnl.to_string(),
                ],
            )
            .await
            .expect("update");
            applied += 1;
        }
        tx.commit().await.expect("commit");
    }
    (applied, t.elapsed().as_secs_f64(), cpu_secs() - cpu)
}

/// A plain hand-written set-based version, as a team would write it (the
/// alternative BENCHMARKS.md compares with): batches through `unnest` arrays, the dedup
/// `INSERT … ON CONFLICT DO NOTHING RETURNING`, the new fills in one
/// insert, the touched positions locked and read in one statement, the
/// average price and P&L computed in Rust (same `Position::apply`), and
/// one upsert of the positions. Same work and durability as tickgate:
/// dedup, fill rows, positions with average price and P&L, one
/// transaction per batch.
async fn handwritten_pg(
    url: &str,
    schema: &str,
    events: &[Parsed],
    batch: usize,
) -> (usize, f64, Cpu) {
    let (mut c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    c.batch_execute(&format!("SET search_path TO {schema}"))
        .await
        .expect("schema");
    let dedup = c
        .prepare(
            "INSERT INTO processed_events (kind, event_id, created_ns)
             SELECT 'FILL', e, 0 FROM unnest($1::text[]) AS u(e)
             ON CONFLICT DO NOTHING RETURNING event_id",
        )
        .await
        .expect("prepare");
    let ins_fills = c
        .prepare(
            "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty, price,
                                exec_ns, applied_seq, created_ns, updated_ns)
             SELECT d, 'applied', e, a, s, si, q::numeric, p::numeric, t,
                    nextval('fills_applied_seq'), 0, 0
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::text[], $8::int8[]) AS u(d, e, a, s, si, q, p, t)",
        )
        .await
        .expect("prepare");
    let sel_pos = c
        .prepare(
            "SELECT p.account, p.symbol, p.qty::text, p.avg_price::text, p.realized_pnl::text
             FROM positions p JOIN unnest($1::text[], $2::text[]) AS u(a, s)
                  ON p.account = u.a AND p.symbol = u.s
             ORDER BY p.account, p.symbol FOR UPDATE OF p",
        )
        .await
        .expect("prepare");
    let upsert_pos = c
        .prepare(
            "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, updated_ns)
             SELECT a, s, q::numeric, ap::numeric, r::numeric, 0
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                  AS u(a, s, q, ap, r)
             ORDER BY a, s
             ON CONFLICT (account, symbol) DO UPDATE SET qty = EXCLUDED.qty,
                 avg_price = EXCLUDED.avg_price, realized_pnl = EXCLUDED.realized_pnl",
        )
        .await
        .expect("prepare");
    let chunks: Vec<Vec<&Fill>> = events
        .chunks(batch)
        .map(|c| fills_of(c).collect())
        .collect();
    let cpu = cpu_secs();
    let t = Instant::now();
    let mut applied = 0;
    for chunk in chunks {
        let tx = c.transaction().await.expect("begin");
        let ids: Vec<&str> = chunk.iter().map(|f| f.event_id.as_str()).collect();
        let new: std::collections::HashSet<String> = tx
            .query(&dedup, &[&ids])
            .await
            .expect("dedup")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut taken = std::collections::HashSet::new();
        let fresh: Vec<&Fill> = chunk
            .iter()
            .copied()
            .filter(|f| new.contains(&f.event_id) && taken.insert(f.event_id.as_str()))
            .collect();
        if fresh.is_empty() {
            tx.commit().await.expect("commit");
            continue;
        }
        let col =
            |g: &dyn Fn(&Fill) -> String| -> Vec<String> { fresh.iter().map(|f| g(f)).collect() };
        let deals = col(&|f| f.deal_id.clone());
        let e = col(&|f| f.event_id.clone());
        let a = col(&|f| f.account.clone());
        let s = col(&|f| f.symbol.clone());
        let si = col(&|f| f.side.as_str().to_owned());
        let q = col(&|f| f.qty.to_string());
        let p = col(&|f| f.price.to_string());
        let ts: Vec<i64> = fresh.iter().map(|f| f.exec_time).collect();
        tx.execute(&ins_fills, &[&deals, &e, &a, &s, &si, &q, &p, &ts])
            .await
            .expect("fills");
        let mut keys: Vec<(&str, &str)> = fresh
            .iter()
            .map(|f| (f.account.as_str(), f.symbol.as_str()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let ka: Vec<&str> = keys.iter().map(|k| k.0).collect();
        let ks: Vec<&str> = keys.iter().map(|k| k.1).collect();
        let mut pos: HashMap<(String, String), Position> = HashMap::new();
        for r in tx.query(&sel_pos, &[&ka, &ks]).await.expect("lock") {
            pos.insert(
                (r.get(0), r.get(1)),
                Position {
                    qty: d(r.get(2)),
                    avg_price: d(r.get(3)),
                    realized_pnl: d(r.get(4)),
                },
            );
        }
        for f in &fresh {
            let p = pos
                .entry((f.account.clone(), f.symbol.clone()))
                .or_default();
            *p = p.apply(f.side, f.qty, f.price).expect("arithmetic");
        }
        let (mut pa, mut ps, mut pq, mut pp, mut pr) = (vec![], vec![], vec![], vec![], vec![]);
        for ((acc, sym), p) in &pos {
            pa.push(acc.as_str());
            ps.push(sym.as_str());
            pq.push(p.qty.to_string());
            pp.push(p.avg_price.to_string());
            pr.push(p.realized_pnl.to_string());
        }
        tx.execute(&upsert_pos, &[&pa, &ps, &pq, &pp, &pr])
            .await
            .expect("positions");
        applied += fresh.len();
        tx.commit().await.expect("commit");
    }
    (applied, t.elapsed().as_secs_f64(), cpu_secs() - cpu)
}

/// The stored positions must equal applying each unique event once.
async fn check(store: &Store, events: &[Parsed]) {
    let mut seen = std::collections::HashSet::new();
    let mut want: HashMap<(String, String), Position> = HashMap::new();
    for f in fills_of(events) {
        if seen.insert(&f.event_id) {
            let p = want
                .entry((f.account.clone(), f.symbol.clone()))
                .or_default();
            *p = p.apply(f.side, f.qty, f.price).expect("arithmetic");
        }
    }
    let got = store.positions(None).await.expect("positions");
    assert_eq!(got.len(), want.len());
    for r in got {
        assert_eq!(r.position, want[&(r.account, r.symbol)], "positions differ");
    }
}

fn main() {
    let n = env_usize("FILLS_BENCH_N", 200_000);
    let tn = env_usize("FILLS_BENCH_TEXTBOOK_N", 5_000);
    let batch = env_usize("FILLS_BENCH_BATCH", 1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    let mut by_phase = String::new();
    rt.block_on(async {
        // SQLite: WAL, synchronous=FULL in both designs.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bench.db");
        let opts = StoreOptions {
            max_batch: batch,
            ..StoreOptions::default()
        };
        let store = Store::Sqlite(
            SqliteStore::open(&path, opts.clone(), FillsMetrics::unregistered())
                .await
                .expect("sqlite"),
        );
        let tb = workload(tn, "tb");
        let (a, secs, cpu) = textbook_sqlite(&dir.path().join("bench.db"), &tb);
        assert_eq!(a, tn);
        rows.push(Row {
            backend: "sqlite",
            design: "textbook: 1 tx per event".into(),
            events: tb.len(),
            secs,
            cpu,
        });
        let dir2 = tempfile::tempdir().expect("tempdir");
        let store2 = Store::Sqlite(
            SqliteStore::open(
                &dir2.path().join("b.db"),
                opts.clone(),
                FillsMetrics::unregistered(),
            )
            .await
            .expect("sqlite"),
        );
        drop(store);
        let evs = workload(n, "b");
        let phases0 = sqlite_phases(store2.metrics());
        let written0 = written_bytes();
        let (a, secs, cpu) = batched(&store2, evs.clone(), batch).await;
        let written = written_bytes() - written0;
        let phases: Vec<(&str, f64, f64)> = sqlite_phases(store2.metrics())
            .into_iter()
            .zip(&phases0)
            .map(|((l, c, w), (_, c0, w0))| (l, c - c0, w - w0))
            .collect();
        by_phase = phase_report(evs.len(), evs.len().div_ceil(batch), &phases, written, secs);
        assert_eq!(a, n);
        check(&store2, &evs).await;
        rows.push(Row {
            backend: "sqlite",
            design: format!("tickgate: {batch} events per tx"),
            events: evs.len(),
            secs,
            cpu,
        });

        match std::env::var("TICKGATE_TEST_PG_URL") {
            Ok(url) if !url.is_empty() => {
                let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("connect");
                tokio::spawn(conn);
                let sc: String = c
                    .query_one("SHOW synchronous_commit", &[])
                    .await
                    .expect("show")
                    .get(0);
                let fs: String = c.query_one("SHOW fsync", &[]).await.expect("show").get(0);
                println!("postgres: synchronous_commit={sc} fsync={fs}");
                let mut schemas = Vec::new();
                for tag in ["tb", "b", "hw", "c"] {
                    let s = format!("bench_{tag}_{}", std::process::id());
                    c.batch_execute(&format!(
                        "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}"
                    ))
                    .await
                    .expect("schema");
                    schemas.push(s);
                }
                let pg = |s: &str| StoreOptions {
                    pg_schema: Some(s.to_owned()),
                    pg_pool_size: 1,
                    ..opts.clone()
                };
                // tickgate's own path: the whole input to apply_events,
                // which splits it by account over `lanes` connections.
                let lanes = env_usize("FILLS_BENCH_PG_LANES", 8);
                // Migrate the textbook schema through the store, then run raw SQL.
                let tstore = Store::Postgres(
                    PgStore::connect(&url, pg(&schemas[0]), FillsMetrics::unregistered())
                        .await
                        .expect("pg"),
                );
                let (a, secs, cpu) = textbook_pg(&url, &schemas[0], &tb).await;
                assert_eq!(a, tn);
                check(&tstore, &tb).await;
                rows.push(Row {
                    backend: "postgres",
                    design: "textbook: 1 tx per event".into(),
                    events: tb.len(),
                    secs,
                    cpu,
                });
                let bstore = Store::Postgres(
                    PgStore::connect(
                        &url,
                        StoreOptions {
                            pg_pool_size: lanes,
                            ..pg(&schemas[1])
                        },
                        FillsMetrics::unregistered(),
                    )
                    .await
                    .expect("pg"),
                );
                let (a, secs, cpu) = batched(&bstore, evs.clone(), evs.len()).await;
                assert_eq!(a, n);
                check(&bstore, &evs).await;
                if let Store::Postgres(p) = &bstore {
                    let (ok, refused) = p.fast_path_counts();
                    println!("tickgate fast path: {ok} batches committed, {refused} refused");
                }
                rows.push(Row {
                    backend: "postgres",
                    design: format!("tickgate: {batch} events per tx, {lanes} lanes by account"),
                    events: evs.len(),
                    secs,
                    cpu,
                });
                // tickgate with the fast path off (the careful path only,
                // as before the fast path existed), same lanes.
                if env_usize("FILLS_BENCH_CAREFUL", 1) == 1 {
                    let cstore = Store::Postgres(
                        PgStore::connect(
                            &url,
                            StoreOptions {
                                pg_pool_size: lanes,
                                pg_fast_path: false,
                                ..pg(&schemas[3])
                            },
                            FillsMetrics::unregistered(),
                        )
                        .await
                        .expect("pg"),
                    );
                    let (a, secs, cpu) = batched(&cstore, evs.clone(), evs.len()).await;
                    assert_eq!(a, n);
                    check(&cstore, &evs).await;
                    rows.push(Row {
                        backend: "postgres",
                        design: format!(
                            "careful path only (fast path off): {batch} events per tx, {lanes} lanes"
                        ),
                        events: evs.len(),
                        secs,
                        cpu,
                    });
                }
                // The hand-written set-based version on the same workload.
                let hstore = Store::Postgres(
                    PgStore::connect(&url, pg(&schemas[2]), FillsMetrics::unregistered())
                        .await
                        .expect("pg"),
                );
                let (a, secs, cpu) = handwritten_pg(&url, &schemas[2], &evs, batch).await;
                assert_eq!(a, n);
                check(&hstore, &evs).await;
                rows.push(Row {
                    backend: "postgres",
                    design: format!("hand-written set-based: {batch} events per tx"),
                    events: evs.len(),
                    secs,
                    cpu,
                });
                for s in schemas {
                    let _ = c.batch_execute(&format!("DROP SCHEMA {s} CASCADE")).await;
                }
            }
            _ => println!("postgres: skipped (TICKGATE_TEST_PG_URL not set)"),
        }
    });
    println!(
        "\n| backend | design | events (10% repeats) | seconds | events/s | CPU s | events per CPU s | machine CPU s | machine CPU µs per event |\n|---|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    let rate = |backend: &str, design: &str| {
        rows.iter()
            .find(|r| r.backend == backend && r.design.starts_with(design))
            .map(|r| r.events as f64 / r.secs)
    };
    if let (Some(t), Some(h), Some(tb)) = (
        rate("postgres", "tickgate"),
        rate("postgres", "hand-written"),
        rate("postgres", "textbook"),
    ) {
        println!(
            "postgres ratios: tickgate / hand-written = {:.2}x, tickgate / textbook = {:.1}x",
            t / h,
            t / tb
        );
        if let Some(c) = rate("postgres", "careful") {
            println!(
                "postgres: tickgate / careful path only = {:.2}x, careful path / hand-written = {:.2}x",
                t / c,
                c / h
            );
        }
    }
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} | {:.1} |",
            r.backend,
            r.design,
            r.events,
            r.secs,
            r.events as f64 / r.secs,
            r.cpu.process,
            r.events as f64 / r.cpu.process,
            r.cpu.machine,
            r.cpu.machine * 1e6 / r.events as f64
        );
    }
    print!("{by_phase}");
}
