//! Behaviour of the fills store, the same tests on SQLite (tempfile) and on
//! PostgreSQL (TICKGATE_TEST_PG_URL; a fresh schema per test so tests run
//! in parallel).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

#[path = "common/fills.rs"]
mod fills_common;
use fills_common::{pg_client, pg_url, unique_schema};

use rust_decimal::Decimal;
use tickgate::fills::metrics::FillsMetrics;
use tickgate::fills::model::{
    batch_answer, parse_line, parse_value, Event, EventOutcome, Outcome, Parsed, Side,
};
use tickgate::fills::position::Position;
use tickgate::fills::retention;
use tickgate::fills::store::{
    system_clock, AnswerFn, HttpOutcome, PgStore, SqliteStore, Store, StoreOptions, SweepTable,
};

const DAY_NS: i64 = 86_400 * 1_000_000_000;

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

struct Ctx {
    store: Store,
    metrics: FillsMetrics,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

async fn ctx_with(b: Backend, mut opts: StoreOptions) -> Option<Ctx> {
    let metrics = FillsMetrics::unregistered();
    match b {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(&dir.path().join("fills.db"), opts, metrics.clone())
                .await
                .unwrap();
            Some(Ctx {
                store: Store::Sqlite(store),
                metrics,
                _dir: Some(dir),
                pg: None,
            })
        }
        Backend::Postgres => {
            let url = pg_url("fills_store")?;
            let schema = unique_schema("t", "store");
            pg_client(&url, None)
                .await
                .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
                .await
                .unwrap();
            opts.pg_schema = Some(schema.clone());
            let store = PgStore::connect(&url, opts, metrics.clone()).await.unwrap();
            Some(Ctx {
                store: Store::Postgres(store),
                metrics,
                _dir: None,
                pg: Some((url, schema)),
            })
        }
    }
}

async fn ctx(b: Backend) -> Option<Ctx> {
    ctx_with(b, StoreOptions::default()).await
}

impl Ctx {
    /// Another store (own connections) on the same PostgreSQL schema.
    async fn another_pg(&self, opts: StoreOptions) -> Store {
        let (url, schema) = self.pg.clone().unwrap();
        let opts = StoreOptions {
            pg_schema: Some(schema),
            ..opts
        };
        Store::Postgres(
            PgStore::connect(&url, opts, FillsMetrics::unregistered())
                .await
                .unwrap(),
        )
    }

    async fn drop_schema(&self) {
        if let Some((url, schema)) = &self.pg {
            let _ = pg_client(url, None)
                .await
                .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .await;
        }
    }
}

macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await;
            }
        }
    };
}

fn fill(id: &str, deal: &str, acc: &str, sym: &str, side: &str, qty: &str, px: &str) -> Parsed {
    parse_value(&serde_json::json!({
        "kind": "FILL", "event_id": id, "deal_id": deal, "account": acc, "symbol": sym,
        "side": side, "qty": qty, "price": px, "exec_time": "2026-11-30T08:00:00.123456Z"
    }))
}

fn bust(id: &str, deal: &str, acc: &str) -> Parsed {
    parse_value(&serde_json::json!({
        "kind": "BUST", "event_id": id, "deal_id": deal, "account": acc,
        "exec_time": "2026-11-30T08:05:00Z"
    }))
}

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn kinds(outs: &[EventOutcome]) -> Vec<Outcome> {
    outs.iter().map(|o| o.outcome.clone()).collect()
}

async fn position(store: &Store, acc: &str, sym: &str) -> Position {
    store
        .positions(Some(&[acc.to_owned()]))
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.symbol == sym)
        .map(|r| r.position)
        .unwrap_or_default()
}

/// A small deterministic generator (no external crates needed).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn workload(n: usize) -> Vec<Parsed> {
    let accs = ["ACC-1", "ACC-2", "ACC-3"];
    let syms = ["EURUSD", "USDJPY"];
    let mut g = Lcg(7);
    (0..n)
        .map(|i| {
            let side = if g.next(3) == 0 { "SELL" } else { "BUY" };
            fill(
                &format!("E-{i}"),
                &format!("D-{i}"),
                accs[i % 3],
                syms[(i / 3) % 2],
                side,
                &format!("{}", 1 + g.next(1000)),
                &format!("1.{:05}", 8000 + g.next(1000)),
            )
        })
        .collect()
}

/// Positions from applying `events` once each, in order.
fn expected_positions(events: &[Parsed]) -> HashMap<(String, String), Position> {
    let mut m: HashMap<(String, String), Position> = HashMap::new();
    for e in events {
        if let Ok(Event::Fill(f)) = e {
            let p = m.entry((f.account.clone(), f.symbol.clone())).or_default();
            *p = p.apply(f.side, f.qty, f.price).unwrap();
        }
    }
    m
}

fn dup_total(m: &FillsMetrics) -> u64 {
    ["FILL", "BUST"]
        .iter()
        .map(|k| m.duplicate_events.with_label_values(&[k, "file"]).get())
        .sum()
}

// Every event delivered 2-5 times, interleaved with others, across and
// within batches: applied once, every repeat counted as a duplicate.
async fn repeated_delivery_applies_once(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let events = workload(60);
    let mut g = Lcg(42);
    // Delivery order: each event appears 2-5 times; the first copies in
    // order (so positions are predictable), repeats scattered after.
    let mut stream: Vec<Parsed> = Vec::new();
    let mut repeats: Vec<Parsed> = Vec::new();
    for e in &events {
        stream.push(e.clone());
        for _ in 0..(1 + g.next(4)) {
            repeats.push(e.clone());
        }
        // Interleave: some repeats go out right away, some later.
        while !repeats.is_empty() && g.next(2) == 0 {
            let at = g.next(repeats.len() as u64) as usize;
            stream.push(repeats.swap_remove(at));
        }
    }
    stream.extend(repeats);
    let total = stream.len();
    let mut applied = 0;
    let mut dups = 0;
    let mut start = 0;
    while start < total {
        let n = (1 + g.next(25) as usize).min(total - start);
        let outs = c
            .store
            .apply_events("file", stream[start..start + n].to_vec())
            .await
            .unwrap();
        assert_eq!(outs.len(), n);
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(o.index, i);
            match o.outcome {
                Outcome::Applied => applied += 1,
                Outcome::Duplicate => dups += 1,
                ref other => panic!("unexpected {other:?}"),
            }
        }
        start += n;
    }
    assert_eq!(applied, events.len());
    assert_eq!(dups, total - events.len());
    assert!(
        dups >= events.len(),
        "every event was repeated at least once"
    );
    assert_eq!(dup_total(&c.metrics) as usize, dups);
    for ((acc, sym), p) in expected_positions(&events) {
        assert_eq!(position(&c.store, &acc, &sym).await, p, "{acc}/{sym}");
    }
    assert_eq!(
        c.store
            .count_rows(SweepTable::ProcessedEvents)
            .await
            .unwrap(),
        events.len() as u64
    );
    c.drop_schema().await;
}
both!(repeated_delivery_applies_once);

// (kind, event_id) is the identity: a FILL and a BUST may share an event id.
async fn fill_and_bust_share_event_id(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let outs = c
        .store
        .apply_events(
            "file",
            vec![
                fill("X-1", "D-1", "A", "EURUSD", "BUY", "100", "1.1"),
                bust("X-1", "D-1", "A"),
                fill("X-1", "D-1", "A", "EURUSD", "BUY", "100", "1.1"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        kinds(&outs),
        vec![Outcome::Applied, Outcome::Applied, Outcome::Duplicate]
    );
    assert_eq!(position(&c.store, "A", "EURUSD").await, Position::FLAT);
    c.drop_schema().await;
}
both!(fill_and_bust_share_event_id);

// A BUST reverses its fill exactly, once; a repeat of it (same or new
// event id) changes nothing.
async fn bust_reverses_once(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let s = &c.store;
    let o = s
        .apply_events(
            "file",
            vec![
                fill("F-1", "D-1", "A", "EURUSD", "BUY", "100", "1.10"),
                fill("F-2", "D-2", "A", "EURUSD", "BUY", "300", "1.20"),
                fill("F-3", "D-3", "A", "EURUSD", "SELL", "50", "1.30"),
            ],
        )
        .await
        .unwrap();
    assert!(o.iter().all(|o| o.outcome == Outcome::Applied));
    let all = position(s, "A", "EURUSD").await;
    assert_eq!(all.qty, d("350"));
    // Bust the middle fill: as if D-2 never happened.
    let o = s
        .apply_events("file", vec![bust("B-2", "D-2", "A")])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    let expect = Position::FLAT
        .apply(Side::Buy, d("100"), d("1.10"))
        .unwrap()
        .apply(Side::Sell, d("50"), d("1.30"))
        .unwrap();
    assert_eq!(position(s, "A", "EURUSD").await, expect);
    let o = s
        .apply_events(
            "file",
            vec![
                bust("B-2", "D-2", "A"),
                bust("B-2b", "D-2", "A"),
                fill("F-2", "D-2", "A", "EURUSD", "BUY", "300", "1.20"),
                fill("F-2x", "D-2", "A", "EURUSD", "BUY", "300", "1.20"),
            ],
        )
        .await
        .unwrap();
    // F2b: the exact repeats are duplicates; a second BUST or FILL of the
    // deal under a new event id is other content: a conflict naming the
    // deal, never applied.
    assert_eq!(
        kinds(&o)
            .into_iter()
            .map(|k| match k {
                Outcome::Conflict(r) => {
                    assert!(r.starts_with("conflict: deal_id \"D-2\""), "{r}");
                    Outcome::Conflict(String::new())
                }
                k => k,
            })
            .collect::<Vec<_>>(),
        vec![
            Outcome::Duplicate,
            Outcome::Conflict(String::new()),
            Outcome::Duplicate,
            Outcome::Conflict(String::new())
        ]
    );
    assert_eq!(position(s, "A", "EURUSD").await, expect);
    // F2: a BUST naming another account is that account's deal
    // (OTHER, D-3), which has no FILL: held for it, A's fill untouched.
    let o = s
        .apply_events("file", vec![bust("B-3x", "D-3", "OTHER")])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Held]);
    assert_eq!(position(s, "A", "EURUSD").await, expect);
    let held = s.held_busts().await.unwrap();
    assert_eq!(
        held.iter()
            .map(|h| (h.account.as_str(), h.deal_id.as_str(), h.event_id.as_str()))
            .collect::<Vec<_>>(),
        vec![("OTHER", "D-3", "B-3x")]
    );
    // Then busting the last fill gives back the position before it.
    let o = s
        .apply_events("file", vec![bust("B-3", "D-3", "A")])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    let first = Position::FLAT
        .apply(Side::Buy, d("100"), d("1.10"))
        .unwrap();
    assert_eq!(position(s, "A", "EURUSD").await, first);
    // Fill then bust inside one batch.
    let o = s
        .apply_events(
            "file",
            vec![
                fill("F-4", "D-4", "A", "EURUSD", "SELL", "30", "1.5"),
                fill("F-5", "D-5", "A", "EURUSD", "BUY", "7", "1.4"),
                bust("B-4", "D-4", "A"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied; 3]);
    let want = first.apply(Side::Buy, d("7"), d("1.4")).unwrap();
    assert_eq!(position(s, "A", "EURUSD").await, want);
    c.drop_schema().await;
}
both!(bust_reverses_once);

// A BUST before its FILL is held (stored), never lost, and applied when
// the FILL arrives: the position is as if neither had happened.
async fn bust_before_fill_is_held(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let s = &c.store;
    s.apply_events(
        "file",
        vec![fill("F-0", "D-0", "A", "USDJPY", "BUY", "5", "150.1")],
    )
    .await
    .unwrap();
    let base = position(s, "A", "USDJPY").await;
    let o = s
        .apply_events("file", vec![bust("B-1", "D-1", "A")])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Held]);
    let held = s.held_busts().await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].deal_id.as_str(), held[0].event_id.as_str()),
        ("D-1", "B-1")
    );
    // A repeat of the held bust: a duplicate; another BUST of the deal
    // (new event id): a conflict (F2b).
    let o = s
        .apply_events(
            "file",
            vec![bust("B-1", "D-1", "A"), bust("B-1b", "D-1", "A")],
        )
        .await
        .unwrap();
    assert_eq!(o[0].outcome, Outcome::Duplicate);
    assert!(
        matches!(&o[1].outcome, Outcome::Conflict(r) if r.contains("\"D-1\"") && r.contains("\"B-1\"")),
        "{:?}",
        o[1]
    );
    let o = s
        .apply_events(
            "file",
            vec![fill("F-1", "D-1", "A", "USDJPY", "SELL", "9", "151")],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert_eq!(position(s, "A", "USDJPY").await, base);
    assert!(s.held_busts().await.unwrap().is_empty());
    assert_eq!(c.metrics.busts_released.get(), 1);
    // Bust and fill in one batch, bust first.
    let o = s
        .apply_events(
            "file",
            vec![
                bust("B-2", "D-2", "A"),
                fill("F-2", "D-2", "A", "USDJPY", "BUY", "1", "149"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Held, Outcome::Applied]);
    assert_eq!(position(s, "A", "USDJPY").await, base);
    // F2: a held BUST waits for the FILL of its own (account, deal_id). A
    // FILL of that deal id on another account is another deal: it applies,
    // and the BUST stays held (nothing dead-lettered) until its own FILL
    // comes and is reversed.
    s.apply_events("file", vec![bust("B-3", "D-3", "A")])
        .await
        .unwrap();
    let o = s
        .apply_events(
            "file",
            vec![fill("F-3", "D-3", "Z", "USDJPY", "BUY", "2", "150")],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert!(s.dead_letters().await.unwrap().is_empty());
    assert_eq!(position(s, "Z", "USDJPY").await.qty, d("2"));
    let held = s.held_busts().await.unwrap();
    assert_eq!(
        held.iter()
            .map(|h| (h.account.as_str(), h.deal_id.as_str(), h.event_id.as_str()))
            .collect::<Vec<_>>(),
        vec![("A", "D-3", "B-3")]
    );
    let o = s
        .apply_events(
            "file",
            vec![fill("F-3a", "D-3", "A", "USDJPY", "BUY", "4", "150")],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert_eq!(position(s, "A", "USDJPY").await, base);
    assert_eq!(position(s, "Z", "USDJPY").await.qty, d("2"));
    assert!(s.held_busts().await.unwrap().is_empty());
    assert_eq!(c.metrics.busts_released.get(), 3);
    c.drop_schema().await;
}
both!(bust_before_fill_is_held);

// A FILL whose deal id has a BUST held for another account (F2: another
// deal) takes its place in application order like any other fill: a later
// BUST on that position replays the remaining fills in the order they were
// applied. Average-cost
// accounting depends on the path, so a replay out of order gives another
// position (here: long 10 @ 2 in order, long 10 @ 1 with D-1 replayed last).
async fn released_fill_keeps_its_place_in_replay(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let s = &c.store;
    s.apply_events("file", vec![bust("B-1", "D-1", "OTHER")])
        .await
        .unwrap();
    let batch = vec![
        fill("F-1", "D-1", "A", "EURUSD", "BUY", "10", "1"),
        fill("F-2", "D-2", "A", "EURUSD", "BUY", "10", "3"),
        fill("F-3", "D-3", "A", "EURUSD", "SELL", "10", "2"),
        fill("F-4", "D-4", "A", "EURUSD", "BUY", "1", "5"),
    ];
    let o = s.apply_events("file", batch.clone()).await.unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied; 4]);
    let o = s
        .apply_events("file", vec![bust("B-4", "D-4", "A")])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    let want = expected_positions(&batch[..3]);
    let want = &want[&("A".to_owned(), "EURUSD".to_owned())];
    assert_eq!(want.qty, d("10"));
    assert_eq!(want.avg_price, d("2"));
    assert_eq!(&position(s, "A", "EURUSD").await, want);

    // The same for a FILL applied after a rejected FILL of its deal: it
    // takes the place of the FILL that applied it, not of the rejected one.
    let batch = vec![
        fill(
            "G-0",
            "E-3",
            "B",
            "EURUSD",
            "BUY",
            "79228162514264337593543950335",
            "2",
        ),
        fill("G-1", "E-1", "B", "EURUSD", "BUY", "10", "3"),
        fill("G-2", "E-2", "B", "EURUSD", "SELL", "10", "2"),
        fill("G-3", "E-3", "B", "EURUSD", "BUY", "10", "1"),
        fill("G-4", "E-4", "B", "EURUSD", "BUY", "1", "5"),
    ];
    let o = s.apply_events("file", batch.clone()).await.unwrap();
    assert!(matches!(o[0].outcome, Outcome::Rejected(_)), "{o:?}");
    assert_eq!(kinds(&o[1..]), vec![Outcome::Applied; 4]);
    s.apply_events("file", vec![bust("H-4", "E-4", "B")])
        .await
        .unwrap();
    let want = expected_positions(&batch[1..4]);
    let want = &want[&("B".to_owned(), "EURUSD".to_owned())];
    assert_eq!((want.qty, want.avg_price), (d("10"), d("1")));
    assert_eq!(&position(s, "B", "EURUSD").await, want);
    c.drop_schema().await;
}
both!(released_fill_keeps_its_place_in_replay);

// F3: after its processed-event row expired, a repeat still hits the
// unique deal_id, is not applied, and is counted separately.
async fn expired_repeat_stopped_by_deal_id(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let s = &c.store;
    let e = fill("F-1", "D-1", "A", "EURUSD", "BUY", "10", "1.2");
    let bst = bust("B-1", "D-2", "A");
    s.apply_events(
        "file",
        vec![
            e.clone(),
            fill("F-2", "D-2", "A", "EURUSD", "BUY", "1", "1.3"),
            bst.clone(),
        ],
    )
    .await
    .unwrap();
    let before = position(s, "A", "EURUSD").await;
    let policy = retention::RetentionPolicy {
        processed_ttl: Duration::from_secs(30 * 86_400),
        key_ttl: Duration::from_secs(72 * 3600),
        chunk: 10_000,
        pause: Duration::from_millis(1),
    };
    let now = system_clock()() + 31 * DAY_NS;
    let [p, _] = retention::sweep(s, &policy, now).await.unwrap();
    assert_eq!(p.deleted, 3);
    let o = s.apply_events("file", vec![e, bst]).await.unwrap();
    assert_eq!(
        kinds(&o),
        vec![Outcome::DuplicateByDealId, Outcome::DuplicateByDealId]
    );
    assert_eq!(position(s, "A", "EURUSD").await, before);
    assert_eq!(
        c.metrics
            .duplicate_by_deal
            .with_label_values(&["FILL", "file"])
            .get(),
        1
    );
    assert_eq!(dup_total(&c.metrics), 0);
    c.drop_schema().await;
}
both!(expired_repeat_stopped_by_deal_id);

// Bad input is rejected with a reason; nothing of it is applied; the rest
// of the batch is unaffected.
async fn bad_input_rejected_rest_applied(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let good = r#"{"kind":"FILL","event_id":"G-1","deal_id":"D-1","account":"A","symbol":"EURUSD","side":"BUY","qty":"100","price":"1.1","exec_time":"2026-11-30T08:00:00Z"}"#;
    let lines = [
        r#"{"kind":"FILL","event_id":"X-1""#,
        r#"{"kind":"FILL","event_id":"X-2","deal_id":"D-2","account":"A","symbol":"EURUSD","side":"BUY","qty":100,"price":"1.1","exec_time":"2026-11-30T08:00:00Z"}"#,
        r#"{"kind":"FILL","event_id":"X-3","deal_id":"D-3","account":"A","symbol":"EURUSD","side":"BUY","qty":"-5","price":"1.1","exec_time":"2026-11-30T08:00:00Z"}"#,
        r#"{"kind":"FILL","event_id":"X-4","deal_id":"D-4","account":"A","symbol":"EURUSD","side":"BUY","qty":"0","price":"1.1","exec_time":"2026-11-30T08:00:00Z"}"#,
        r#"{"kind":"FILL","event_id":"X-5","deal_id":"D-5","account":"A","symbol":"EURUSD","side":"BUY","qty":"ten","price":"1.1","exec_time":"2026-11-30T08:00:00Z"}"#,
        r#"{"kind":"FILL","event_id":"X-6","deal_id":"D-6","account":"A","symbol":"EURUSD","side":"BUY","qty":"1","price":1.1,"exec_time":"2026-11-30T08:00:00Z"}"#,
        r#"{"kind":"TRADE","event_id":"X-7","deal_id":"D-7","account":"A","exec_time":"2026-11-30T08:00:00Z"}"#,
        r#"{"kind":"FILL","event_id":true,"deal_id":"D-8","account":"A","symbol":"EURUSD","side":"BUY","qty":"1","price":"1.1","exec_time":"2026-11-30T08:00:00Z"}"#,
        good,
    ];
    let outs = c
        .store
        .apply_events("file", lines.iter().map(|l| parse_line(l)).collect())
        .await
        .unwrap();
    let reasons: Vec<String> = outs[..8]
        .iter()
        .map(|o| match &o.outcome {
            Outcome::Rejected(r) => r.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    for (r, want) in reasons.iter().zip([
        "malformed JSON",
        "not a JSON number",
        "greater than zero",
        "greater than zero",
        "not a decimal",
        "not a JSON number",
        "unknown kind",
        "event_id: must be a string",
    ]) {
        assert!(r.contains(want), "{r:?} should mention {want:?}");
    }
    assert_eq!(outs[6].event_id.as_deref(), Some("X-7"));
    assert_eq!(outs[8].outcome, Outcome::Applied);
    assert_eq!(position(&c.store, "A", "EURUSD").await.qty, d("100"));
    assert_eq!(
        c.store
            .count_rows(SweepTable::ProcessedEvents)
            .await
            .unwrap(),
        1
    );
    c.drop_schema().await;
}
both!(bad_input_rejected_rest_applied);

fn answer_fn() -> AnswerFn {
    Arc::new(batch_answer)
}

// K2-K5 in the database.
async fn idempotency_keys(b: Backend) {
    let Some(c) = ctx_with(
        b,
        StoreOptions {
            key_wait: Duration::from_millis(300),
            ..StoreOptions::default()
        },
    )
    .await
    else {
        return;
    };
    let s = &c.store;
    let batch = || {
        vec![
            fill("H-1", "D-1", "A", "EURUSD", "BUY", "100", "1.1"),
            fill("H-1", "D-1", "A", "EURUSD", "BUY", "100", "1.1"),
            parse_line("{oops"),
        ]
    };
    let first = s
        .apply_http_batch("alice", "k1", "hash-1", batch(), answer_fn())
        .await
        .unwrap();
    let HttpOutcome::Fresh { status, body, .. } = first else {
        panic!("{first:?}")
    };
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["totals"],
        serde_json::json!({"applied":1,"duplicate":1,"rejected":1,"held":0})
    );
    // K4: the retry gets the same answer, byte for byte; nothing re-applied.
    let again = s
        .apply_http_batch("alice", "k1", "hash-1", batch(), answer_fn())
        .await
        .unwrap();
    assert_eq!(
        again,
        HttpOutcome::Replayed {
            status: 200,
            body: body.clone()
        }
    );
    assert_eq!(position(s, "A", "EURUSD").await.qty, d("100"));
    let stored = s.get_stored_answer("alice", "k1").await.unwrap().unwrap();
    assert_eq!((stored.status, &stored.body), (200, &body));
    assert_eq!(stored.request_hash, "hash-1");
    // K3: same key, other body.
    let mismatch = s
        .apply_http_batch("alice", "k1", "hash-2", batch(), answer_fn())
        .await
        .unwrap();
    assert_eq!(mismatch, HttpOutcome::HashMismatch);
    // K2: keys are per client.
    let bob = s
        .apply_http_batch(
            "bob",
            "k1",
            "hash-9",
            vec![fill("H-2", "D-2", "A", "EURUSD", "BUY", "1", "1.1")],
            answer_fn(),
        )
        .await
        .unwrap();
    assert!(matches!(bob, HttpOutcome::Fresh { .. }));
    assert!(s.get_stored_answer("carol", "k1").await.unwrap().is_none());
    c.drop_schema().await;
}
both!(idempotency_keys);

// K5: a retry while the first attempt holds the key waits and is answered
// "in progress" when key_wait runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_in_progress_times_out_postgres() {
    let Some(c) = ctx_with(
        Backend::Postgres,
        StoreOptions {
            key_wait: Duration::from_millis(200),
            ..StoreOptions::default()
        },
    )
    .await
    else {
        return;
    };
    let (url, schema) = c.pg.clone().unwrap();
    let mut raw = pg_client(&url, Some(&schema)).await;
    let tx = raw.transaction().await.unwrap();
    tx.batch_execute(
        "INSERT INTO idempotency_keys (client, key, request_hash, created_ns)
         VALUES ('alice', 'slow', 'h', 0)",
    )
    .await
    .unwrap();
    let out = c
        .store
        .apply_http_batch(
            "alice",
            "slow",
            "h",
            vec![fill("S-1", "D-1", "A", "EURUSD", "BUY", "1", "1")],
            answer_fn(),
        )
        .await
        .unwrap();
    assert_eq!(out, HttpOutcome::InProgressTimeout);
    tx.rollback().await.unwrap();
    // The first attempt went away without committing: the retry now runs.
    let out = c
        .store
        .apply_http_batch(
            "alice",
            "slow",
            "h",
            vec![fill("S-1", "D-1", "A", "EURUSD", "BUY", "1", "1")],
            answer_fn(),
        )
        .await
        .unwrap();
    assert!(matches!(out, HttpOutcome::Fresh { .. }));
    c.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_in_progress_times_out_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fills.db");
    let store = Store::Sqlite(
        SqliteStore::open(
            &path,
            StoreOptions {
                key_wait: Duration::from_millis(200),
                ..StoreOptions::default()
            },
            FillsMetrics::unregistered(),
        )
        .await
        .unwrap(),
    );
    // Another process holds the write lock.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = store
        .apply_http_batch(
            "alice",
            "k",
            "h",
            vec![fill("S-1", "D-1", "A", "EURUSD", "BUY", "1", "1")],
            answer_fn(),
        )
        .await
        .unwrap();
    assert_eq!(out, HttpOutcome::InProgressTimeout);
    other.execute_batch("ROLLBACK").unwrap();
    let out = store
        .apply_http_batch(
            "alice",
            "k",
            "h",
            vec![fill("S-1", "D-1", "A", "EURUSD", "BUY", "1", "1")],
            answer_fn(),
        )
        .await
        .unwrap();
    assert!(matches!(out, HttpOutcome::Fresh { .. }));
}

// K5: concurrent attempts with one key: exactly one applies, the others
// get its stored answer.
async fn concurrent_same_key(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let s = c.store.clone();
        tasks.push(tokio::spawn(async move {
            s.apply_http_batch("alice", "same", "h", workload(200), answer_fn())
                .await
                .unwrap()
        }));
    }
    let mut fresh = 0;
    let mut bodies = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            HttpOutcome::Fresh { body, .. } => {
                fresh += 1;
                bodies.push(body)
            }
            HttpOutcome::Replayed { body, .. } => bodies.push(body),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(fresh, 1);
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(
        c.store
            .count_rows(SweepTable::ProcessedEvents)
            .await
            .unwrap(),
        200
    );
    c.drop_schema().await;
}
both!(concurrent_same_key);

// The stream position commits with the batch.
async fn stream_position(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    assert_eq!(
        c.store.consumer_position("FILLS", "tg").await.unwrap(),
        None
    );
    let o = c
        .store
        .apply_stream_batch("FILLS", "tg", 41, workload(3))
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied; 3]);
    c.store
        .apply_stream_batch("FILLS", "tg", 42, workload(3))
        .await
        .unwrap();
    assert_eq!(
        c.store.consumer_position("FILLS", "tg").await.unwrap(),
        Some(42)
    );
    assert_eq!(
        c.metrics
            .duplicate_events
            .with_label_values(&["FILL", "nats"])
            .get(),
        3
    );
    c.drop_schema().await;
}
both!(stream_position);

// Several appliers with their own connections on one PostgreSQL apply
// overlapping, duplicated event sets concurrently: nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appliers_postgres() {
    let Some(c) = ctx(Backend::Postgres).await else {
        return;
    };
    let events = workload(3000);
    let mut tasks = Vec::new();
    for w in 0..3u64 {
        let store = c.another_pg(StoreOptions::default()).await;
        let mut evs = events.clone();
        // Each applier sees every event once or twice, in its own order.
        let mut g = Lcg(100 + w);
        for i in (1..evs.len()).rev() {
            let j = g.next(i as u64 + 1) as usize;
            evs.swap(i, j);
        }
        let extra: Vec<Parsed> = evs.iter().step_by(3).cloned().collect();
        evs.extend(extra);
        tasks.push(tokio::spawn(async move {
            let mut applied = 0;
            for chunk in evs.chunks(250) {
                let outs = store.apply_events("file", chunk.to_vec()).await.unwrap();
                applied += outs
                    .iter()
                    .filter(|o| o.outcome == Outcome::Applied)
                    .count();
            }
            applied
        }));
    }
    let mut applied = 0;
    for t in tasks {
        applied += t.await.unwrap();
    }
    assert_eq!(applied, events.len());
    // Quantities are order-independent: each key's quantity is the sum.
    let expect = expected_positions(&events);
    let rows = c.store.positions(None).await.unwrap();
    assert_eq!(rows.len(), expect.len());
    for r in rows {
        let e = expect[&(r.account.clone(), r.symbol.clone())];
        assert_eq!(r.position.qty, e.qty, "{}/{}", r.account, r.symbol);
    }
    // Average and P&L depend on order: they must equal the replay of the
    // stored fills in application order.
    let (url, schema) = c.pg.clone().unwrap();
    let raw = pg_client(&url, Some(&schema)).await;
    let n: i64 = raw
        .query_one("SELECT count(*) FROM fills", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n as usize, events.len());
    let mut replay: HashMap<(String, String), Position> = HashMap::new();
    for r in raw
        .query(
            "SELECT account, symbol, side, qty::text, price::text FROM fills ORDER BY applied_seq",
            &[],
        )
        .await
        .unwrap()
    {
        let p = replay.entry((r.get(0), r.get(1))).or_default();
        let side = Side::parse(r.get(2)).unwrap();
        *p = p.apply(side, d(r.get(3)), d(r.get(4))).unwrap();
    }
    for r in c.store.positions(None).await.unwrap() {
        assert_eq!(r.position, replay[&(r.account.clone(), r.symbol.clone())]);
    }
    c.drop_schema().await;
}

// F5: 200,000 expired rows go in chunks of at most 10,000 while new events
// keep being applied; the new rows stay.
async fn retention_in_chunks_while_applying(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let old = system_clock()() - 40 * DAY_NS;
    let sql = match b {
        Backend::Sqlite => format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
             INSERT INTO processed_events (kind, event_id, created_ns)
             SELECT 'FILL', 'old-' || i, {old} + i FROM n;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
             INSERT INTO idempotency_keys (client, key, request_hash, status, body, created_ns)
             SELECT 'c', 'k' || i, 'h', 200, x'00', {old} FROM n;"
        ),
        Backend::Postgres => format!(
            "INSERT INTO processed_events (kind, event_id, created_ns)
             SELECT 'FILL', 'old-' || i, {old} + i FROM generate_series(1, 200000) i;
             INSERT INTO idempotency_keys (client, key, request_hash, status, body, created_ns)
             SELECT 'c', 'k' || i, 'h', 200, '\\x00', {old} FROM generate_series(1, 1000) i;"
        ),
    };
    match &c.store {
        Store::Sqlite(s) => s.execute_batch(&sql).await.unwrap(),
        Store::Postgres(s) => s.execute_batch(&sql).await.unwrap(),
    }
    let policy = retention::RetentionPolicy {
        processed_ttl: Duration::from_secs(30 * 86_400),
        key_ttl: Duration::from_secs(72 * 3600),
        chunk: 10_000,
        pause: Duration::from_millis(2),
    };
    let store = c.store.clone();
    let applier = tokio::spawn(async move {
        let events = workload(2000);
        let mut applied = 0;
        for chunk in events.chunks(50) {
            let outs = store.apply_events("file", chunk.to_vec()).await.unwrap();
            applied += outs
                .iter()
                .filter(|o| o.outcome == Outcome::Applied)
                .count();
        }
        applied
    });
    let [p, k] = retention::sweep(&c.store, &policy, system_clock()())
        .await
        .unwrap();
    assert_eq!(applier.await.unwrap(), 2000);
    assert_eq!(p.deleted, 200_000);
    assert!(p.chunks >= 21, "{p:?}");
    assert_eq!(p.largest_chunk, 10_000);
    assert_eq!(k.deleted, 1000);
    assert_eq!(
        c.store
            .count_rows(SweepTable::ProcessedEvents)
            .await
            .unwrap(),
        2000
    );
    assert_eq!(
        c.store
            .count_rows(SweepTable::IdempotencyKeys)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        c.metrics
            .retention_rows
            .with_label_values(&["processed_events"])
            .get(),
        200_000
    );
    c.drop_schema().await;
}
both!(retention_in_chunks_while_applying);

#[test]
fn chunk_is_clamped_to_ten_thousand() {
    // F5 is enforced in code, not only in config validation.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let Some(c) = ctx(Backend::Sqlite).await else {
            return;
        };
        let old = system_clock()() - 40 * DAY_NS;
        if let Store::Sqlite(s) = &c.store {
            s.execute_batch(&format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 25000)
                 INSERT INTO processed_events (kind, event_id, created_ns)
                 SELECT 'FILL', 'old-' || i, {old} FROM n;"
            ))
            .await
            .unwrap();
        }
        let r = retention::sweep_table(
            &c.store,
            SweepTable::ProcessedEvents,
            old + 1,
            1_000_000,
            Duration::ZERO,
        )
        .await
        .unwrap();
        assert_eq!(r.deleted, 25_000);
        assert_eq!(r.largest_chunk, 10_000);
        assert_eq!(r.chunks, 3);
    });
}

// A FILL and its BUST committed at the same moment by two instances: the
// unique deal row serialises them, so every bust is applied exactly once
// (none stranded as "held" next to an applied fill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fill_and_bust_postgres() {
    let Some(c) = ctx(Backend::Postgres).await else {
        return;
    };
    let fills = workload(1500);
    let busts: Vec<Parsed> = fills
        .iter()
        .map(|f| {
            let Ok(Event::Fill(f)) = f else {
                unreachable!()
            };
            bust(&format!("B-{}", f.event_id), &f.deal_id, &f.account)
        })
        .collect();
    let mut tasks = Vec::new();
    for evs in [fills.clone(), busts] {
        let store = c.another_pg(StoreOptions::default()).await;
        tasks.push(tokio::spawn(async move {
            for chunk in evs.chunks(100) {
                store.apply_events("file", chunk.to_vec()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(c.store.held_busts().await.unwrap().is_empty());
    for r in c.store.positions(None).await.unwrap() {
        assert_eq!(r.position.qty, Decimal::ZERO, "{}/{}", r.account, r.symbol);
        assert_eq!(r.position.realized_pnl, Decimal::ZERO);
    }
    c.drop_schema().await;
}

// A caller that gives up mid-transaction (its task aborted) neither
// half-applies a transaction nor leaves a broken connection behind: each
// transaction finishes in its own task, and a retry finds every event a
// duplicate or applies it, never twice.
async fn cancelled_caller_loses_and_doubles_nothing(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let events = workload(3000);
    let store = c.store.clone();
    let evs = events.clone();
    let call = tokio::spawn(async move { store.apply_events("file", evs).await });
    tokio::task::yield_now().await;
    call.abort();
    let _ = call.await;
    let outs = c.store.apply_events("file", events.clone()).await.unwrap();
    assert!(outs
        .iter()
        .all(|o| matches!(o.outcome, Outcome::Applied | Outcome::Duplicate)));
    assert_eq!(
        c.store
            .count_rows(SweepTable::ProcessedEvents)
            .await
            .unwrap(),
        3000
    );
    for ((acc, sym), p) in expected_positions(&events) {
        assert_eq!(position(&c.store, &acc, &sym).await, p, "{acc}/{sym}");
    }
    c.drop_schema().await;
}
both!(cancelled_caller_loses_and_doubles_nothing);

// ------------------------------------------------- F6: the same digits

/// One generated input: a FILL (account, symbol, side, qty, price), a
/// BUST of an earlier or later deal of the same account, or a repeat of
/// an earlier event.
#[derive(Debug, Clone)]
enum Op {
    Fill {
        acc: u8,
        sym: u8,
        buy: bool,
        qty: (u64, u32),
        px: (u64, u32),
    },
    Bust(usize),
    Repeat(usize),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0u8..2, 0u8..2, any::<bool>(), (1u64..5000, 0u32..3), (1u64..3_000_000, 0u32..7))
            .prop_map(|(acc, sym, buy, qty, px)| Op::Fill { acc, sym, buy, qty, px }),
        1 => (0usize..64).prop_map(Op::Bust),
        1 => (0usize..64).prop_map(Op::Repeat),
    ]
}

/// The events of a case: account names carry the case number so that
/// cases share two stores without touching each other's positions.
fn case_events(case: usize, ops: &[Op]) -> Vec<serde_json::Value> {
    let fills: Vec<(usize, u8)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o {
            Op::Fill { acc, .. } => Some((i, *acc)),
            _ => None,
        })
        .collect();
    let mut out: Vec<serde_json::Value> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        match o {
            Op::Fill {
                acc,
                sym,
                buy,
                qty,
                px,
            } => {
                let symbol = ["EURUSD", "USDJPY"][*sym as usize];
                out.push(serde_json::json!({
                "kind": "FILL", "event_id": format!("E-{i}"), "deal_id": format!("D-{case}-{i}"),
                "account": format!("P{case}-{acc}"), "symbol": symbol,
                "side": if *buy { "BUY" } else { "SELL" },
                "qty": Decimal::new(qty.0 as i64, qty.1).to_string(),
                "price": Decimal::new(px.0 as i64, px.1).to_string(),
                "exec_time": "2026-11-30T08:00:00Z"
                }))
            }
            // Any fill of the case, earlier (applied) or later (held, then
            // released when its FILL comes).
            Op::Bust(k) if !fills.is_empty() => {
                let (j, acc) = fills[k % fills.len()];
                out.push(serde_json::json!({
                    "kind": "BUST", "event_id": format!("B-{i}"), "deal_id": format!("D-{case}-{j}"),
                    "account": format!("P{case}-{acc}"), "exec_time": "2026-11-30T08:05:00Z"
                }));
            }
            Op::Repeat(k) if !out.is_empty() => out.push(out[k % out.len()].clone()),
            _ => {}
        }
    }
    // Event ids are per case too.
    for e in &mut out {
        let id = e["event_id"].as_str().unwrap().to_owned();
        e["event_id"] = serde_json::json!(format!("{id}-{case}"));
    }
    out
}

/// A fill of the model: side, quantity, price.
type ModelFill = (Side, Decimal, Decimal);

/// Every position's stored text, (qty, avg_price, realized_pnl), for the
/// case's accounts, read from the table itself.
type Texts = std::collections::BTreeMap<(String, String), (String, String, String)>;

fn sqlite_texts(path: &std::path::Path, case: usize) -> Texts {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut st = c
        .prepare(
            "SELECT account, symbol, qty, avg_price, realized_pnl FROM positions
             WHERE account LIKE ?1",
        )
        .unwrap();
    st.query_map([format!("P{case}-%")], |r| {
        Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?, r.get(4)?)))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

async fn pg_texts(url: &str, schema: &str, case: usize) -> Texts {
    let c = pg_client(url, Some(schema)).await;
    c.query(
        "SELECT account, symbol, qty::text, avg_price::text, realized_pnl::text
         FROM positions WHERE account LIKE $1",
        &[&format!("P{case}-%")],
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3), r.get(4))))
    .collect()
}

/// F6: the same events in the same order give the same digits on every
/// store. Random sequences of FILLs (quantities and prices with a few
/// decimals, so that averages are repeating quotients), BUSTs (of applied
/// fills, and held ones released later) and repeats go through SQLite and
/// PostgreSQL in the same batches; every position's quantity, average price
/// and realized P&L are then compared as the text each table stores, and
/// with the model (`Position::replay` of the fills left standing, in
/// order). PostgreSQL absent: SKIPPED (TICKGATE_REQUIRE_SERVICES=1 fails).
#[test]
fn same_digits_on_every_store() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let Some(url) = pg_url("same_digits_on_every_store") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fills.db");
    let schema = unique_schema("t", "digits");
    let (lite, pg) = rt.block_on(async {
        pg_client(&url, None)
            .await
            .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
            .await
            .unwrap();
        let lite = SqliteStore::open(&path, StoreOptions::default(), FillsMetrics::unregistered())
            .await
            .unwrap();
        let opts = StoreOptions {
            pg_schema: Some(schema.clone()),
            ..StoreOptions::default()
        };
        let pg = PgStore::connect(&url, opts, FillsMetrics::unregistered())
            .await
            .unwrap();
        (Store::Sqlite(lite), Store::Postgres(pg))
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 40,
        ..Config::default()
    });
    let strategy = (
        prop::collection::vec(op(), 1..40),
        prop::collection::vec(1usize..9, 1..8),
    );
    let result = runner.run(&strategy, |(ops, cuts)| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let events = case_events(case, &ops);
        rt.block_on(async {
            // The same batches on both stores.
            let (mut start, mut c) = (0, 0);
            while start < events.len() {
                let n = cuts[c % cuts.len()].min(events.len() - start);
                c += 1;
                let batch: Vec<Parsed> = events[start..start + n].iter().map(parse_value).collect();
                let a = lite.apply_events("file", batch.clone()).await.unwrap();
                let b = pg.apply_events("file", batch).await.unwrap();
                prop_assert_eq!(kinds(&a), kinds(&b), "outcomes of events {}..", start);
                start += n;
            }
            let (lt, pt) = (
                sqlite_texts(&path, case),
                pg_texts(&url, &schema, case).await,
            );
            // The model: each deal's first FILL, unless a BUST names it.
            let mut seen = std::collections::HashSet::new();
            let busted: std::collections::HashSet<String> = events
                .iter()
                .filter(|e| e["kind"] == "BUST")
                .map(|e| e["deal_id"].as_str().unwrap().to_owned())
                .collect();
            let mut by_key: std::collections::BTreeMap<(String, String), Vec<ModelFill>> =
                Default::default();
            for e in &events {
                if let Ok(Event::Fill(f)) = parse_value(e) {
                    if seen.insert(f.deal_id.clone()) && !busted.contains(&f.deal_id) {
                        by_key
                            .entry((f.account.clone(), f.symbol.clone()))
                            .or_default()
                            .push((f.side, f.qty, f.price));
                    }
                }
            }
            let zero = ("0".to_owned(), "0".to_owned(), "0".to_owned());
            let keys: std::collections::BTreeSet<_> = lt
                .keys()
                .chain(pt.keys())
                .chain(by_key.keys())
                .cloned()
                .collect();
            for k in keys {
                let model = by_key.get(&k).map_or(zero.clone(), |fills| {
                    let p = Position::replay(fills.iter().map(|(s, q, p)| (*s, q, p))).unwrap();
                    (
                        p.qty.to_string(),
                        p.avg_price.to_string(),
                        p.realized_pnl.to_string(),
                    )
                });
                // A key whose events never moved it may have no row (SQLite)
                // or a zero row (PostgreSQL creates rows before locking them).
                let l = lt.get(&k).cloned().unwrap_or(zero.clone());
                let p = pt.get(&k).cloned().unwrap_or(zero.clone());
                prop_assert_eq!(&l, &p, "SQLite and PostgreSQL text of {:?}", k);
                prop_assert_eq!(&l, &model, "stored and model text of {:?}", k);
            }
            Ok::<(), TestCaseError>(())
        })
    });
    rt.block_on(async {
        let _ = pg_client(&url, None)
            .await
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await;
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// F2b: a repeat is a duplicate only with the same content. Squatting an
/// event id (alice, allowed only ACC-A, posts a FILL under bob's next
/// event id) must never make bob's genuine FILL vanish as a duplicate: it
/// is a conflict naming the id, counted, and nothing of it is applied.
/// Squatting a deal id does nothing to bob at all (F2: his deal is
/// (ACC-B, deal_id), see `squatted_deal_id_applies_to_each_account`).
async fn repeats_with_other_content_conflict(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let s = &c.store;
    // Alice's squats, on her own account (FILL-only batch: on PostgreSQL
    // the fast path, whose cache then knows these event ids).
    let o = s
        .apply_events(
            "http",
            vec![
                fill("E-bob-7", "D-x", "ACC-A", "EURUSD", "BUY", "1", "1.1"),
                fill("E-alice-1", "D-bob-8", "ACC-A", "EURUSD", "BUY", "1", "1.1"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied, Outcome::Applied]);
    // Bob's genuine fills: the squatted event id is a conflict; the
    // squatted deal id is his own deal (ACC-B, D-bob-8) and applies (F2).
    let o = s
        .apply_events(
            "http",
            vec![
                fill("E-bob-7", "D-bob-7", "ACC-B", "EURUSD", "BUY", "100", "1.2"),
                fill("E-bob-8", "D-bob-8", "ACC-B", "EURUSD", "BUY", "200", "1.2"),
            ],
        )
        .await
        .unwrap();
    match &o[0].outcome {
        Outcome::Conflict(r) => assert!(
            r.starts_with("conflict: ") && r.contains("event_id \"E-bob-7\""),
            "{r}"
        ),
        other => panic!("E-bob-7: {other:?}, not a conflict"),
    }
    assert_eq!(o[1].outcome, Outcome::Applied);
    let bob = Position::FLAT.apply(Side::Buy, d("200"), d("1.2")).unwrap();
    assert_eq!(position(s, "ACC-B", "EURUSD").await, bob);
    assert_eq!(position(s, "ACC-A", "EURUSD").await.qty, d("2"));
    // The same content again is still a duplicate, by event id and (a new
    // batch repeating exactly) by event id again; never a conflict.
    let o = s
        .apply_events(
            "http",
            vec![fill(
                "E-alice-1",
                "D-bob-8",
                "ACC-A",
                "EURUSD",
                "BUY",
                "1",
                "1.1",
            )],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Duplicate]);
    // In one batch: the first occurrence wins, a different second one is
    // a conflict, an identical one a duplicate.
    let o = s
        .apply_events(
            "http",
            vec![
                fill("E-9", "D-9", "ACC-A", "EURUSD", "SELL", "1", "1.3"),
                fill("E-9", "D-9", "ACC-A", "EURUSD", "SELL", "5", "1.3"),
                fill("E-9", "D-9", "ACC-A", "EURUSD", "SELL", "1", "1.3"),
                bust("B-9", "D-9", "ACC-A"),
                bust("B-9", "D-9", "ACC-A"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(o[0].outcome, Outcome::Applied);
    assert!(matches!(&o[1].outcome, Outcome::Conflict(r) if r.contains("\"E-9\"")));
    assert_eq!(o[2].outcome, Outcome::Duplicate);
    assert_eq!(o[3].outcome, Outcome::Applied);
    assert_eq!(o[4].outcome, Outcome::Duplicate);
    // Counted by kind and source; conflicts are not duplicates.
    assert_eq!(
        c.metrics
            .conflicts
            .with_label_values(&["FILL", "http"])
            .get(),
        2
    );
    assert_eq!(
        c.metrics
            .duplicate_events
            .with_label_values(&["FILL", "http"])
            .get(),
        2
    );
    // A rejected conflict leaves the id free for nothing else: bob's
    // deal D-bob-7 was never recorded, so his FILL under a fresh event id
    // applies.
    let o = s
        .apply_events(
            "http",
            vec![fill(
                "E-bob-7b", "D-bob-7", "ACC-B", "EURUSD", "BUY", "100", "1.2",
            )],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert_eq!(position(s, "ACC-B", "EURUSD").await.qty, d("300"));
    c.drop_schema().await;
}
both!(repeats_with_other_content_conflict);

fn pos(qty: &str, avg: &str, pnl: &str) -> Position {
    Position {
        qty: d(qty),
        avg_price: d(avg),
        realized_pnl: d(pnl),
    }
}

fn held_of(s: &[tickgate::fills::store::HeldBust]) -> Vec<(String, String, String)> {
    s.iter()
        .map(|h| (h.account.clone(), h.deal_id.clone(), h.event_id.clone()))
        .collect()
}

fn held(account: &str, deal: &str, event: &str) -> (String, String, String) {
    (account.to_owned(), deal.to_owned(), event.to_owned())
}

/// F2: the squatting attack. Alice (allowed only ACC-A) posts a FILL on
/// ACC-A under bob's next deal id; bob's genuine FILL on ACC-B under that
/// deal id is another `(account, deal_id)` and applies, exactly; alice's
/// applies to her own account. Nothing is a conflict or a duplicate.
async fn squatted_deal_id_applies_to_each_account(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let s = &c.store;
    let o = s
        .apply_events(
            "http",
            vec![fill(
                "E-alice-1",
                "D-bob-8",
                "ACC-A",
                "EURUSD",
                "BUY",
                "1",
                "1.1",
            )],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    let o = s
        .apply_events(
            "http",
            vec![
                fill("E-bob-8", "D-bob-8", "ACC-B", "EURUSD", "BUY", "200", "1.2"),
                fill("E-bob-9", "D-bob-9", "ACC-B", "EURUSD", "SELL", "50", "1.3"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied, Outcome::Applied]);
    // 200 @ 1.2, then 50 sold @ 1.3: 150 left, realized 50 x 0.1.
    assert_eq!(position(s, "ACC-B", "EURUSD").await, pos("150", "1.2", "5"));
    assert_eq!(position(s, "ACC-A", "EURUSD").await, pos("1", "1.1", "0"));
    // Bob's exact repeat is a duplicate of his own deal, alice's of hers.
    let o = s
        .apply_events(
            "http",
            vec![
                fill("E-bob-8", "D-bob-8", "ACC-B", "EURUSD", "BUY", "200", "1.2"),
                fill("E-alice-1", "D-bob-8", "ACC-A", "EURUSD", "BUY", "1", "1.1"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Duplicate, Outcome::Duplicate]);
    assert_eq!(position(s, "ACC-B", "EURUSD").await, pos("150", "1.2", "5"));
    for k in ["FILL", "BUST"] {
        assert_eq!(c.metrics.conflicts.with_label_values(&[k, "http"]).get(), 0);
    }
    // Alice busting "her" deal cancels her fill only.
    let o = s
        .apply_events("http", vec![bust("B-alice-1", "D-bob-8", "ACC-A")])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert_eq!(position(s, "ACC-A", "EURUSD").await, Position::FLAT);
    assert_eq!(position(s, "ACC-B", "EURUSD").await, pos("150", "1.2", "5"));
    c.drop_schema().await;
}
both!(squatted_deal_id_applies_to_each_account);

/// F2: an internal cross, both sides the firm's under one deal id: two
/// deals, both applied (in one FILL-only batch: on PostgreSQL the fast
/// path; and across batches). A BUST of one side cancels only that side.
/// Repeats are F2b's: the same event a duplicate, another event id on the
/// same `(account, deal_id)` a conflict naming it; after the processed
/// rows expired (F3) each side's exact repeat is a duplicate by deal id of
/// its own account, a changed one a conflict.
async fn internal_cross_is_two_deals(b: Backend) {
    // One lane, so that a batch stays one transaction on PostgreSQL.
    let opts = StoreOptions {
        pg_pool_size: 1,
        ..StoreOptions::default()
    };
    let Some(c) = ctx_with(b, opts).await else {
        return;
    };
    let s = &c.store;
    let buy1 = fill("E-1", "X-1", "ACC-1", "EURUSD", "BUY", "100", "1.1");
    let sell1 = fill("E-2", "X-1", "ACC-2", "EURUSD", "SELL", "100", "1.1");
    let o = s
        .apply_events("file", vec![buy1.clone(), sell1.clone()])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied, Outcome::Applied]);
    if let Store::Postgres(p) = s {
        assert_eq!(p.fast_path_counts(), (1, 0), "the fast path took the cross");
    }
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("100", "1.1", "0"));
    assert_eq!(
        position(s, "ACC-2", "EURUSD").await,
        pos("-100", "1.1", "0")
    );
    // The second cross, one side per batch.
    let buy2 = fill("E-3", "X-2", "ACC-1", "EURUSD", "BUY", "50", "1.4");
    let sell2 = fill("E-4", "X-2", "ACC-2", "EURUSD", "SELL", "50", "1.4");
    for e in [&buy2, &sell2] {
        let o = s.apply_events("file", vec![e.clone()]).await.unwrap();
        assert_eq!(kinds(&o), vec![Outcome::Applied]);
    }
    // ACC-1: 150 at (110 + 70) / 150 = 1.2.
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("150", "1.2", "0"));
    assert_eq!(
        position(s, "ACC-2", "EURUSD").await,
        pos("-150", "1.2", "0")
    );
    // Busting ACC-2's side of X-1: ACC-2 is its X-2 fill alone; ACC-1 keeps
    // both of its fills.
    let bst = bust("B-1", "X-1", "ACC-2");
    let o = s.apply_events("file", vec![bst.clone()]).await.unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert_eq!(position(s, "ACC-2", "EURUSD").await, pos("-50", "1.4", "0"));
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("150", "1.2", "0"));
    assert!(s.held_busts().await.unwrap().is_empty());
    // F2b repeats.
    let o = s
        .apply_events(
            "file",
            vec![
                sell1.clone(),
                bst.clone(),
                fill("E-2b", "X-1", "ACC-2", "EURUSD", "SELL", "100", "1.1"),
                fill("E-1b", "X-1", "ACC-1", "EURUSD", "BUY", "100", "1.1"),
                bust("B-1b", "X-1", "ACC-2"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(o[0].outcome, Outcome::Duplicate);
    assert_eq!(o[1].outcome, Outcome::Duplicate);
    for (o, (acc, kind, id)) in o[2..].iter().zip([
        ("ACC-2", "FILL", "E-2"),
        ("ACC-1", "FILL", "E-1"),
        ("ACC-2", "BUST", "B-1"),
    ]) {
        let want = format!(
            "conflict: deal_id \"X-1\" of account \"{acc}\" already has a {kind} (event_id \"{id}\")"
        );
        match &o.outcome {
            Outcome::Conflict(r) => assert!(r.starts_with(&want), "{r}"),
            other => panic!("{want}: got {other:?}"),
        }
    }
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("150", "1.2", "0"));
    assert_eq!(position(s, "ACC-2", "EURUSD").await, pos("-50", "1.4", "0"));
    // F3: the processed rows expire; the deal rows still stop repeats, each
    // on its own (account, deal_id).
    let policy = retention::RetentionPolicy {
        processed_ttl: Duration::from_secs(30 * 86_400),
        key_ttl: Duration::from_secs(72 * 3600),
        chunk: 10_000,
        pause: Duration::from_millis(1),
    };
    let [p, _] = retention::sweep(s, &policy, system_clock()() + 31 * DAY_NS)
        .await
        .unwrap();
    assert_eq!(p.deleted, 5);
    let o = s
        .apply_events(
            "file",
            vec![
                buy1,
                sell1,
                buy2,
                bst,
                fill("E-4", "X-2", "ACC-2", "EURUSD", "SELL", "51", "1.4"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o[..4]), vec![Outcome::DuplicateByDealId; 4]);
    assert!(
        matches!(&o[4].outcome, Outcome::Conflict(r)
            if r.contains("deal_id \"X-2\" of account \"ACC-2\"")),
        "{:?}",
        o[4]
    );
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("150", "1.2", "0"));
    assert_eq!(position(s, "ACC-2", "EURUSD").await, pos("-50", "1.4", "0"));
    c.drop_schema().await;
}
both!(internal_cross_is_two_deals);

/// F2: a BUST before its FILL waits keyed by `(account, deal_id)`: a FILL
/// of that deal id on another account is another deal (applied, the BUST
/// still held); the FILL of the BUST's own account releases it.
async fn held_bust_waits_for_its_own_account(b: Backend) {
    let Some(c) = ctx(b).await else { return };
    let s = &c.store;
    let o = s
        .apply_events("file", vec![bust("B-1", "Y-1", "ACC-2")])
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Held]);
    let o = s
        .apply_events(
            "file",
            vec![fill("E-1", "Y-1", "ACC-1", "EURUSD", "BUY", "10", "1.5")],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("10", "1.5", "0"));
    assert_eq!(
        held_of(&s.held_busts().await.unwrap()),
        vec![held("ACC-2", "Y-1", "B-1")]
    );
    assert_eq!(c.metrics.busts_released.get(), 0);
    let o = s
        .apply_events(
            "file",
            vec![fill("E-2", "Y-1", "ACC-2", "EURUSD", "SELL", "10", "1.5")],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied]);
    assert_eq!(position(s, "ACC-2", "EURUSD").await, Position::FLAT);
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("10", "1.5", "0"));
    assert!(s.held_busts().await.unwrap().is_empty());
    assert_eq!(c.metrics.busts_released.get(), 1);
    // The same in one batch, the other way round.
    let o = s
        .apply_events(
            "file",
            vec![
                bust("B-2", "Y-2", "ACC-1"),
                fill("E-3", "Y-2", "ACC-2", "EURUSD", "BUY", "4", "2"),
                fill("E-4", "Y-2", "ACC-1", "EURUSD", "SELL", "10", "2"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        kinds(&o),
        vec![Outcome::Held, Outcome::Applied, Outcome::Applied]
    );
    assert_eq!(position(s, "ACC-2", "EURUSD").await, pos("4", "2", "0"));
    assert_eq!(position(s, "ACC-1", "EURUSD").await, pos("10", "1.5", "0"));
    assert!(s.held_busts().await.unwrap().is_empty());
    assert_eq!(c.metrics.busts_released.get(), 2);
    assert!(s.dead_letters().await.unwrap().is_empty());
    c.drop_schema().await;
}
both!(held_bust_waits_for_its_own_account);

/// The fills store's SQL at schema version 2, the one before F2's key:
/// version 1 as shipped plus version 2's statement.
const SQLITE_V1: &str = include_str!("../src/fills/store/schema_sqlite.sql");
const PG_V1: &str = include_str!("../src/fills/store/schema_postgres.sql");

fn hash_of(e: &Parsed) -> String {
    e.as_ref().unwrap().content_hash()
}

/// Schema upgrade (F2): a database created at version 2 (fills keyed by
/// deal_id alone), with an applied FILL, its position and a held BUST
/// (whose row has no fill account), is opened by the new code: the rows
/// are kept, the held BUST now waits under its own account, the same deal
/// id applies on another account, and a BUST of the migrated fill replays
/// its position.
async fn upgrade_from_schema_v2(b: Backend) {
    let f1 = fill("E-1", "D-1", "ACC-A", "EURUSD", "BUY", "100", "1.1");
    let b2 = bust("B-2", "D-2", "ACC-B");
    let Ok(Event::Fill(f)) = &f1 else {
        unreachable!()
    };
    let Ok(Event::Bust(hb)) = &b2 else {
        unreachable!()
    };
    let now = system_clock()();
    let metrics = FillsMetrics::unregistered();
    let mut dir = None;
    let mut pg = None;
    let store = match b {
        Backend::Sqlite => {
            let d = tempfile::tempdir().unwrap();
            let path = d.path().join("fills.db");
            {
                let conn = rusqlite::Connection::open(&path).unwrap();
                conn.execute_batch(SQLITE_V1).unwrap();
                conn.execute_batch(
                    "ALTER TABLE processed_events ADD COLUMN content_hash TEXT;
                     CREATE TABLE tickgate_schema_version (version INTEGER PRIMARY KEY);
                     INSERT INTO tickgate_schema_version (version) VALUES (1), (2);
                     UPDATE counters SET value = 1 WHERE name = 'fills_applied_seq';",
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO processed_events (kind, event_id, created_ns, content_hash)
                     VALUES ('FILL', 'E-1', ?1, ?2), ('BUST', 'B-2', ?1, ?3)",
                    rusqlite::params![now, hash_of(&f1), hash_of(&b2)],
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side,
                                        qty, price, exec_ns, applied_seq, prev_deal_id,
                                        created_ns, updated_ns)
                     VALUES ('D-1', 'applied', 'E-1', 'ACC-A', 'EURUSD', 'BUY', '100', '1.1',
                             ?1, 1, NULL, ?2, ?2)",
                    rusqlite::params![f.exec_time, now],
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO fills (deal_id, status, bust_event_id, bust_account, bust_ns,
                                        created_ns, updated_ns)
                     VALUES ('D-2', 'bust_held', 'B-2', 'ACC-B', ?1, ?2, ?2)",
                    rusqlite::params![hb.exec_time, now],
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl,
                                            last_deal_id, updated_ns)
                     VALUES ('ACC-A', 'EURUSD', '100', '1.1', '0', 'D-1', ?1)",
                    [now],
                )
                .unwrap();
            }
            let store = SqliteStore::open(&path, StoreOptions::default(), metrics.clone())
                .await
                .unwrap();
            let version: i64 = rusqlite::Connection::open(&path)
                .unwrap()
                .query_row(
                    "SELECT max(version) FROM tickgate_schema_version",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(version, 6);
            // F2b's hashes as their 16 bytes (schema v6), converted from
            // the stored hex.
            let stored: Vec<Vec<u8>> = rusqlite::Connection::open(&path)
                .unwrap()
                .prepare("SELECT content_hash FROM processed_events ORDER BY kind, event_id")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let digest = |e: &Parsed| e.as_ref().unwrap().content_digest().to_vec();
            assert_eq!(stored, [digest(&b2), digest(&f1)]);
            // F2's key, stored deal id first (schema v5): the primary key
            // columns in their order.
            let pk: Vec<String> = rusqlite::Connection::open(&path)
                .unwrap()
                .prepare("SELECT name FROM pragma_table_info('fills') WHERE pk > 0 ORDER BY pk")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(pk, ["deal_id", "account"]);
            // K8: the answer MAC key is created once and kept.
            let again = SqliteStore::open(&path, StoreOptions::default(), metrics.clone())
                .await
                .unwrap();
            assert_eq!(again.answer_mac_key(), store.answer_mac_key());
            assert_ne!(store.answer_mac_key(), [0u8; 32]);
            dir = Some(d);
            Store::Sqlite(store)
        }
        Backend::Postgres => {
            let Some(url) = pg_url("fills_store") else {
                return;
            };
            let schema = unique_schema("t", "store");
            pg_client(&url, None)
                .await
                .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
                .await
                .unwrap();
            let cl = pg_client(&url, Some(&schema)).await;
            cl.batch_execute(PG_V1).await.unwrap();
            cl.batch_execute(
                "ALTER TABLE processed_events ADD COLUMN content_hash text;
                 CREATE TABLE tickgate_schema_version (version integer PRIMARY KEY);
                 INSERT INTO tickgate_schema_version (version) VALUES (1), (2);
                 SELECT setval('fills_applied_seq', 1);",
            )
            .await
            .unwrap();
            cl.execute(
                "INSERT INTO processed_events (kind, event_id, created_ns, content_hash)
                 VALUES ('FILL', 'E-1', $1, $2), ('BUST', 'B-2', $1, $3)",
                &[&now, &hash_of(&f1), &hash_of(&b2)],
            )
            .await
            .unwrap();
            cl.execute(
                "INSERT INTO fills (deal_id, status, fill_event_id, account, symbol, side, qty,
                                    price, exec_ns, applied_seq, created_ns, updated_ns)
                 VALUES ('D-1', 'applied', 'E-1', 'ACC-A', 'EURUSD', 'BUY', 100, 1.1, $1, 1,
                         $2, $2)",
                &[&f.exec_time, &now],
            )
            .await
            .unwrap();
            cl.execute(
                "INSERT INTO fills (deal_id, status, bust_event_id, bust_account, bust_ns,
                                    created_ns, updated_ns)
                 VALUES ('D-2', 'bust_held', 'B-2', 'ACC-B', $1, $2, $2)",
                &[&hb.exec_time, &now],
            )
            .await
            .unwrap();
            cl.execute(
                "INSERT INTO positions (account, symbol, qty, avg_price, realized_pnl, updated_ns)
                 VALUES ('ACC-A', 'EURUSD', 100, 1.1, 0, $1)",
                &[&now],
            )
            .await
            .unwrap();
            let opts = StoreOptions {
                pg_schema: Some(schema.clone()),
                ..StoreOptions::default()
            };
            let store = PgStore::connect(&url, opts, metrics.clone()).await.unwrap();
            let version: i32 = cl
                .query_one("SELECT max(version) FROM tickgate_schema_version", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(version, 4);
            let key: String = cl
                .query_one(
                    "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
                     JOIN pg_class t ON t.oid = c.conrelid
                     JOIN pg_namespace n ON n.oid = t.relnamespace
                     WHERE n.nspname = $1 AND t.relname = 'fills' AND c.contype = 'p'",
                    &[&schema],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(key, "PRIMARY KEY (account, deal_id)");
            pg = Some((url, schema));
            Store::Postgres(store)
        }
    };
    let c = Ctx {
        store,
        metrics,
        _dir: dir,
        pg,
    };
    let s = &c.store;
    assert_eq!(
        held_of(&s.held_busts().await.unwrap()),
        vec![held("ACC-B", "D-2", "B-2")]
    );
    assert_eq!(position(s, "ACC-A", "EURUSD").await, pos("100", "1.1", "0"));
    let o = s
        .apply_events(
            "file",
            vec![
                // The migrated processed row and its hash: a duplicate.
                f1.clone(),
                b2.clone(),
                // D-1 on another account: another deal now (F2).
                fill("E-3", "D-1", "ACC-B", "EURUSD", "SELL", "40", "1.2"),
                // The held BUST's own FILL releases it.
                fill("E-4", "D-2", "ACC-B", "EURUSD", "BUY", "5", "1.3"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        kinds(&o),
        vec![
            Outcome::Duplicate,
            Outcome::Duplicate,
            Outcome::Applied,
            Outcome::Applied
        ]
    );
    assert_eq!(c.metrics.busts_released.get(), 1);
    assert!(s.held_busts().await.unwrap().is_empty());
    assert_eq!(position(s, "ACC-B", "EURUSD").await, pos("-40", "1.2", "0"));
    // The migrated hash is compared: the migrated id with other content
    // is a conflict (F2b), not applied.
    let o = s
        .apply_events(
            "file",
            vec![fill("E-1", "D-1", "ACC-A", "EURUSD", "BUY", "101", "1.1")],
        )
        .await
        .unwrap();
    assert!(matches!(kinds(&o)[..], [Outcome::Conflict(_)]), "{o:?}");
    assert_eq!(position(s, "ACC-A", "EURUSD").await, pos("100", "1.1", "0"));
    // A BUST of the migrated fill replays ACC-A's history from the
    // migrated rows (SQLite: its chain; PostgreSQL: fills_history).
    let o = s
        .apply_events(
            "file",
            vec![
                fill("E-5", "D-5", "ACC-A", "EURUSD", "BUY", "10", "2"),
                bust("B-1", "D-1", "ACC-A"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(kinds(&o), vec![Outcome::Applied, Outcome::Applied]);
    assert_eq!(position(s, "ACC-A", "EURUSD").await, pos("10", "2", "0"));
    assert_eq!(position(s, "ACC-B", "EURUSD").await, pos("-40", "1.2", "0"));
    c.drop_schema().await;
}
both!(upgrade_from_schema_v2);
