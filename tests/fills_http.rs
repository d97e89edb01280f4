//! The fills HTTP API (fills.md K1-K6) end to end: the real router on
//! 127.0.0.1:0 over the real store (SQLite in a tempdir; PostgreSQL when
//! $TICKGATE_TEST_PG_URL is set).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use rust_decimal::Decimal;
use serde_json::Value;
use tickgate::fills::config::ClientConfig;
use tickgate::fills::http::{BatchOutcome, FillsBackend, HttpOptions, PositionView};
use tickgate::fills::push::{http_request, HttpResponse};
use tickgate::fills::store::{Store, StoreOptions};

#[path = "common/fills.rs"]
mod fills_common;
use fills_common::{pg_client, sqlite_db, Db, Server};

// ---------------------------------------------------------------- harness

fn clients() -> Vec<ClientConfig> {
    vec![
        ClientConfig {
            name: "alice".into(),
            token: "token-alice".into(),
            accounts: vec!["ACC-A".into()],
        },
        ClientConfig {
            name: "bob".into(),
            token: "token-bob".into(),
            accounts: vec!["*".into()],
        },
    ]
}

async fn serve(backend: Arc<dyn FillsBackend>, options: HttpOptions) -> Server {
    fills_common::serve(backend, &clients(), options).await
}

async fn pg_db(test: &str, opts: StoreOptions) -> Option<Db> {
    fills_common::pg_db("t_http", test, opts).await
}

impl Server {
    async fn post(
        &self,
        token: Option<&str>,
        key: Option<&str>,
        body: impl Into<Bytes>,
    ) -> HttpResponse {
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        if let Some(t) = token {
            headers.push(("authorization".into(), format!("Bearer {t}")));
        }
        if let Some(k) = key {
            headers.push(("idempotency-key".into(), k.to_owned()));
        }
        http_request(
            "POST",
            &format!("{}/v1/fills", self.base),
            &headers,
            body.into(),
            Duration::from_secs(60),
        )
        .await
        .unwrap()
    }

    async fn get(&self, token: Option<&str>, path: &str) -> HttpResponse {
        let headers: Vec<(String, String)> = token
            .map(|t| vec![("authorization".to_owned(), format!("Bearer {t}"))])
            .unwrap_or_default();
        http_request(
            "GET",
            &format!("{}{path}", self.base),
            &headers,
            Bytes::new(),
            Duration::from_secs(60),
        )
        .await
        .unwrap()
    }
}

fn fill(
    id: &str,
    deal: &str,
    account: &str,
    symbol: &str,
    side: &str,
    qty: &str,
    price: &str,
) -> Value {
    serde_json::json!({"kind":"FILL","event_id":id,"deal_id":deal,"account":account,
        "symbol":symbol,"side":side,"qty":qty,"price":price,
        "exec_time":"2026-11-30T08:00:00.123456Z"})
}

fn batch(events: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "events": events })).unwrap()
}

fn json(resp: &HttpResponse) -> Value {
    serde_json::from_slice(&resp.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&resp.body)))
}

/// Checks an RFC 9457 problem answer and returns its body.
fn assert_problem(resp: &HttpResponse, status: u16) -> Value {
    assert_eq!(
        resp.status,
        status,
        "body: {}",
        String::from_utf8_lossy(&resp.body)
    );
    assert_eq!(
        resp.header("content-type"),
        Some("application/problem+json")
    );
    let v = json(resp);
    assert_eq!(v["status"], status);
    assert!(v["type"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(v["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(v["detail"].as_str().is_some_and(|t| !t.is_empty()));
    v
}

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

async fn position_qty(store: &Store, account: &str, symbol: &str) -> Option<Decimal> {
    let rows = store.positions(Some(&[account.to_owned()])).await.unwrap();
    rows.iter()
        .find(|r| r.account == account && r.symbol == symbol)
        .map(|r| r.position.qty)
}

/// Wraps a backend: the first `apply_batch` signals `entered` and waits for
/// `release` before going on (to hold a batch "in flight" without timing).
struct Gated {
    inner: Store,
    entered: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Semaphore>,
}

impl FillsBackend for Gated {
    fn apply_batch<'a>(
        &'a self,
        client: &'a ClientConfig,
        key: &'a str,
        request_hash: &'a str,
        events: &'a [Value],
    ) -> BoxFuture<'a, anyhow::Result<BatchOutcome>> {
        Box::pin(async move {
            self.entered.notify_one();
            let _p = self.release.acquire().await.unwrap();
            self.inner
                .apply_batch(client, key, request_hash, events)
                .await
        })
    }

    fn positions<'a>(
        &'a self,
        account: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<PositionView>>> {
        FillsBackend::positions(&self.inner, account)
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_missing_or_invalid_key_is_400() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let body = batch(&[fill("E1", "D1", "ACC-A", "EURUSD", "BUY", "1", "1.1")]);
    let r = srv.post(Some("token-alice"), None, body.clone()).await;
    let p = assert_problem(&r, 400);
    assert!(p["detail"].as_str().unwrap().contains("Idempotency-Key"));
    for bad in ["", "has space", &"k".repeat(256)] {
        let r = srv.post(Some("token-alice"), Some(bad), body.clone()).await;
        assert_problem(&r, 400);
    }
    // Nothing was applied by the refused requests.
    assert_eq!(position_qty(&db.store, "ACC-A", "EURUSD").await, None);
    // 255 visible chars is fine.
    let r = srv
        .post(Some("token-alice"), Some(&"~".repeat(255)), body)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_is_401() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let body = batch(&[fill("E1", "D1", "ACC-A", "EURUSD", "BUY", "1", "1.1")]);
    for token in [None, Some("wrong"), Some("token-alice-x"), Some("")] {
        let r = srv.post(token, Some("k1"), body.clone()).await;
        assert_problem(&r, 401);
        assert!(r
            .header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")));
    }
    let r = srv.get(Some("nope"), "/v1/positions?account=ACC-A").await;
    assert_problem(&r, 401);
    assert_eq!(position_qty(&db.store, "ACC-A", "EURUSD").await, None);
    assert_eq!(
        srv.counter("tickgate_fills_http_requests_total", &[("status", "401")]),
        5
    );
}

/// K2: a request with two `Authorization` headers is refused with 400: a
/// server that took the first (or the last) would let a proxy or client
/// bug decide who the caller is. One spelling of the scheme is as good as
/// another (RFC 9110).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_authorization_is_400_and_the_scheme_has_no_case() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let body = batch(&[fill("E1", "D1", "ACC-A", "EURUSD", "BUY", "1", "1.1")]);
    let base = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("idempotency-key".to_owned(), "k-rep".to_owned()),
    ];
    let mut twice = base.clone();
    twice.push(("authorization".into(), "Bearer token-alice".to_owned()));
    twice.push(("authorization".into(), "Bearer wrong".into()));
    let url = format!("{}/v1/fills", srv.base);
    let r = http_request(
        "POST",
        &url,
        &twice,
        Bytes::from(body.clone()),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let v = assert_problem(&r, 400);
    assert!(
        v["detail"].as_str().unwrap().contains("more than once"),
        "{v}"
    );
    assert_eq!(position_qty(&db.store, "ACC-A", "EURUSD").await, None);
    let mut lower = base;
    lower.push(("authorization".into(), "bearer token-alice".to_owned()));
    let r = http_request(
        "POST",
        &url,
        &lower,
        Bytes::from(body),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// K2: keys are per client; neither client sees the other's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k2_same_key_two_clients() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let a = batch(&[fill("EA", "DA", "ACC-A", "EURUSD", "BUY", "10", "1.1")]);
    let b = batch(&[
        fill("EB1", "DB1", "ACC-B", "USDJPY", "SELL", "5", "150.25"),
        fill("EB2", "DB2", "ACC-B", "USDJPY", "SELL", "5", "150.75"),
    ]);
    let ra = srv
        .post(Some("token-alice"), Some("same-key"), a.clone())
        .await;
    let rb = srv
        .post(Some("token-bob"), Some("same-key"), b.clone())
        .await;
    assert_eq!((ra.status, rb.status), (200, 200));
    assert_eq!(ra.header("idempotent-replayed"), None);
    assert_eq!(
        rb.header("idempotent-replayed"),
        None,
        "bob must not get alice's answer"
    );
    assert_eq!(json(&ra)["totals"]["applied"], 1);
    assert_eq!(json(&rb)["totals"]["applied"], 2);
    assert_eq!(json(&rb)["results"][0]["event_id"], "EB1");
    // Each client's retry gets its own stored answer.
    let ra2 = srv.post(Some("token-alice"), Some("same-key"), a).await;
    let rb2 = srv.post(Some("token-bob"), Some("same-key"), b).await;
    assert_eq!(ra2.body, ra.body);
    assert_eq!(rb2.body, rb.body);
    assert_eq!(ra2.header("idempotent-replayed"), Some("true"));
    assert_eq!(rb2.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("10"))
    );
    assert_eq!(
        position_qty(&db.store, "ACC-B", "USDJPY").await,
        Some(dec("-10"))
    );
}

/// K3: same key, different body is 422 (from the store and from the cache);
/// a body that differs only in whitespace and key order is the same body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k3_same_key_different_body_is_422() {
    let db = sqlite_db(StoreOptions::default()).await;
    for cache_capacity in [0, 1000] {
        let srv = serve(
            Arc::new(db.store.clone()),
            HttpOptions {
                cache_capacity,
                ..HttpOptions::default()
            },
        )
        .await;
        let key = format!("k3-{cache_capacity}");
        let id = format!("E-{cache_capacity}");
        let first = batch(&[fill(&id, &id, "ACC-A", "EURUSD", "BUY", "1", "1.1")]);
        let r1 = srv.post(Some("token-alice"), Some(&key), first).await;
        assert_eq!(r1.status, 200);
        let other = batch(&[fill(&id, &id, "ACC-A", "EURUSD", "BUY", "2", "1.1")]);
        let r2 = srv.post(Some("token-alice"), Some(&key), other).await;
        let p = assert_problem(&r2, 422);
        assert!(p["type"]
            .as_str()
            .unwrap()
            .contains("idempotency-key-reused"));
        // Reordered keys and whitespace: the same canonical body, a replay.
        let same = format!(
            "{{ \"events\" : [ {{\"price\":\"1.1\",\"qty\":\"1\",\"side\":\"BUY\",\"symbol\":\"EURUSD\",\
             \"account\":\"ACC-A\",\"deal_id\":\"{id}\",\"event_id\":\"{id}\",\"kind\":\"FILL\",\
             \"exec_time\":\"2026-11-30T08:00:00.123456Z\"}} ]\n}}"
        );
        let r3 = srv
            .post(Some("token-alice"), Some(&key), same.into_bytes())
            .await;
        assert_eq!(r3.status, 200);
        assert_eq!(r3.header("idempotent-replayed"), Some("true"));
        assert_eq!(r3.body, r1.body);
        assert_eq!(srv.counter("tickgate_fills_http_key_reuse_total", &[]), 1);
    }
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("2"))
    );
}

/// K4: a retry gets the first answer byte for byte, marked replayed; from
/// the cache, and from the database when the cache is cold (a restart or
/// another instance).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k4_retry_replays_byte_for_byte() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let body = batch(&[
        fill("E1", "D1", "ACC-A", "EURUSD", "BUY", "100000", "1.08512"),
        fill("E2", "D2", "ACC-A", "EURUSD", "SELL", "40000", "1.08600"),
        serde_json::json!({"kind":"TRADE","event_id":"X1"}),
    ]);
    let first = srv
        .post(Some("token-alice"), Some("batch-1"), body.clone())
        .await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(first.header("content-type"), Some("application/json"));
    let v = json(&first);
    assert_eq!(v["totals"]["applied"], 2);
    assert_eq!(v["totals"]["rejected"], 1);

    let again = srv
        .post(Some("token-alice"), Some("batch-1"), body.clone())
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(
        srv.counter(
            "tickgate_fills_http_idempotent_replays_total",
            &[("source", "cache")]
        ),
        1
    );

    // A second instance on the same database: cold cache, the store answers.
    let other = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let cold = other
        .post(Some("token-alice"), Some("batch-1"), body.clone())
        .await;
    assert_eq!(cold.status, 200);
    assert_eq!(cold.header("idempotent-replayed"), Some("true"));
    assert_eq!(cold.body, first.body);
    assert_eq!(
        other.counter(
            "tickgate_fills_http_idempotent_replays_total",
            &[("source", "store")]
        ),
        1
    );
    // And that answer is the stored one.
    let stored = db
        .store
        .get_stored_answer("alice", "batch-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.body, first.body.to_vec());
    assert_eq!(stored.status, 200);
    // Applied once: 100000 - 40000.
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("60000"))
    );
    // The same events under a new key are duplicates, not re-applied.
    let dup = srv
        .post(Some("token-alice"), Some("batch-1-bis"), body)
        .await;
    assert_eq!(dup.header("idempotent-replayed"), None);
    assert_eq!(json(&dup)["totals"]["duplicate"], 2);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("60000"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_bodies() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(
        Arc::new(db.store.clone()),
        HttpOptions {
            body_limit: 64 * 1024,
            max_batch: 10,
            ..HttpOptions::default()
        },
    )
    .await;
    // Over the byte limit.
    let big: Vec<Value> = (0..400)
        .map(|i| {
            fill(
                &format!("E{i}"),
                &format!("D{i}"),
                "ACC-A",
                "EURUSD",
                "BUY",
                "1",
                "1.1",
            )
        })
        .collect();
    let big = batch(&big);
    assert!(big.len() > 64 * 1024);
    let r = srv.post(Some("token-alice"), Some("big"), big).await;
    assert_problem(&r, 413);
    // Default limit (1 MiB), a 3 MiB body: the client still reads the 413.
    let default_srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let huge = format!("{{\"events\":[\"{}\"]}}", "x".repeat(3 << 20));
    let r = default_srv
        .post(Some("token-alice"), Some("huge"), huge.into_bytes())
        .await;
    assert_problem(&r, 413);
    // Over the event limit.
    let many: Vec<Value> = (0..11)
        .map(|i| {
            fill(
                &format!("M{i}"),
                &format!("M{i}"),
                "ACC-A",
                "EURUSD",
                "BUY",
                "1",
                "1.1",
            )
        })
        .collect();
    let r = srv
        .post(Some("token-alice"), Some("many"), batch(&many))
        .await;
    assert_problem(&r, 413);
    // Not JSON, not a batch.
    for (key, body) in [
        ("m1", &b"{\"events\": [ {\"kind\":"[..]),
        ("m2", b"not json"),
        ("m3", b"[1,2,3]"),
        ("m4", b"{\"events\": {}}"),
        ("m5", b""),
    ] {
        let r = srv
            .post(Some("token-alice"), Some(key), body.to_vec())
            .await;
        assert_problem(&r, 400);
    }
    // Explicitly not JSON.
    let r = http_request(
        "POST",
        &format!("{}/v1/fills", srv.base),
        &[
            ("authorization".into(), "Bearer token-alice".into()),
            ("idempotency-key".into(), "m6".into()),
            ("content-type".into(), "text/csv".into()),
        ],
        Bytes::from_static(b"a,b"),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_problem(&r, 415);
    // A body labelled compressed is never read as plain JSON, even when
    // it happens to be plain JSON.
    for (key, coding) in [
        ("m7", "gzip"),
        ("m8", "identity, deflate"),
        ("m9", "x-custom"),
    ] {
        let r = http_request(
            "POST",
            &format!("{}/v1/fills", srv.base),
            &[
                ("authorization".into(), "Bearer token-alice".into()),
                ("idempotency-key".into(), key.into()),
                ("content-type".into(), "application/json".into()),
                ("content-encoding".into(), coding.into()),
            ],
            Bytes::from(batch(&[fill(
                "GZ", "GZ", "ACC-A", "EURUSD", "BUY", "100", "1.1",
            )])),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        let v = assert_problem(&r, 415);
        assert_eq!(
            v["type"],
            "urn:tickgate:problem:unsupported-content-encoding"
        );
        assert_eq!(r.header("accept-encoding"), Some("identity"));
    }
    assert_eq!(position_qty(&db.store, "ACC-A", "EURUSD").await, None);
    // Nothing was stored under the refused keys: a valid retry is fresh.
    let ok = batch(&[fill("OK", "OK", "ACC-A", "EURUSD", "BUY", "3", "1.1")]);
    let r = srv.post(Some("token-alice"), Some("m1"), ok).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("idempotent-replayed"), None);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("3"))
    );
}

/// A bad event is rejected with its reason; the others are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_rejected_individually() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let mut numeric_qty = fill("E2", "D2", "ACC-A", "EURUSD", "BUY", "1", "1.1");
    numeric_qty["qty"] = serde_json::json!(5.5);
    let body = batch(&[
        fill("E1", "D1", "ACC-A", "EURUSD", "BUY", "7", "1.1"),
        numeric_qty,
        serde_json::json!({"kind":"TRADE","event_id":"E3"}),
        serde_json::json!("just a string"),
        fill("E5", "D5", "ACC-A", "EURUSD", "SELL", "2", "1.2"),
    ]);
    let r = srv.post(Some("token-alice"), Some("mixed"), body).await;
    assert_eq!(r.status, 200);
    let v = json(&r);
    assert_eq!(v["totals"]["applied"], 2);
    assert_eq!(v["totals"]["rejected"], 3);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    let status: Vec<&str> = results
        .iter()
        .map(|x| x["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        status,
        ["applied", "rejected", "rejected", "rejected", "applied"]
    );
    assert!(results[1]["reason"].as_str().unwrap().contains("qty"));
    assert!(results[2]["reason"].as_str().unwrap().contains("kind"));
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("5"))
    );
}

/// `exec_time` is exact or the event is rejected with the reason: more
/// than nine fractional digits is not truncated, a leap second is not
/// moved to `:59.999999999`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inexact_exec_times_are_rejected_not_truncated() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let mut long_fraction = fill("T1", "T1", "ACC-A", "EURUSD", "BUY", "1", "1.1");
    long_fraction["exec_time"] = "2026-11-30T08:00:00.1234567891Z".into();
    let mut leap = fill("T2", "T2", "ACC-A", "EURUSD", "BUY", "2", "1.1");
    leap["exec_time"] = "2016-12-31T23:59:60Z".into();
    let mut nanos = fill("T3", "T3", "ACC-A", "EURUSD", "BUY", "4", "1.1");
    nanos["exec_time"] = "2026-11-30T08:00:00.123456789Z".into();
    let r = srv
        .post(
            Some("token-alice"),
            Some("times"),
            batch(&[long_fraction, leap, nanos]),
        )
        .await;
    assert_eq!(r.status, 200);
    let v = json(&r);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results[0]["status"], "rejected", "{v}");
    let reason = results[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("exec_time:") && reason.contains("at most 9"),
        "{reason}"
    );
    assert_eq!(results[1]["status"], "rejected", "{v}");
    let reason = results[1]["reason"].as_str().unwrap();
    assert!(reason.contains("leap second"), "{reason}");
    assert_eq!(results[2]["status"], "applied", "{v}");
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("4"))
    );
}

/// K2 write scope (docs/fills-notes.md "Write scope"): alice may write only ACC-A. Her events for other
/// accounts (a FILL, and a BUST of bob's fill) are rejected one by one with
/// the reason, counted, and the rest of her batch is applied; bob ("*") is
/// unaffected. F2: a BUST of bob's deal id naming her own account is her
/// own deal (ACC-A, D1), which has no FILL: held, bob's fill untouched; and
/// her FILL under bob's next deal id does not stop bob's.
async fn write_scope(db: &Db) {
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let r = srv
        .post(
            Some("token-bob"),
            Some("bob-1"),
            batch(&[fill("E1", "D1", "ACC-B", "EURUSD", "BUY", "10", "1.5")]),
        )
        .await;
    assert_eq!(json(&r)["totals"]["applied"], 1);
    let body = batch(&[
        fill("E2", "D2", "ACC-A", "EURUSD", "BUY", "3", "1.1"),
        fill("E3", "D3", "ACC-B", "EURUSD", "BUY", "5", "1.1"),
        serde_json::json!({"kind":"BUST","event_id":"B1","deal_id":"D1","account":"ACC-B",
            "exec_time":"2026-11-30T08:05:00Z"}),
        // Naming her own account does not let her reverse bob's fill either:
        // (ACC-A, D1) is another deal (F2), so the BUST is held for it.
        serde_json::json!({"kind":"BUST","event_id":"B2","deal_id":"D1","account":"ACC-A",
            "exec_time":"2026-11-30T08:05:00Z"}),
        fill("E4", "D4", "ACC-A", "EURUSD", "SELL", "1", "1.2"),
    ]);
    let r = srv.post(Some("token-alice"), Some("alice-1"), body).await;
    assert_eq!(r.status, 200);
    let v = json(&r);
    let results = v["results"].as_array().unwrap();
    let status: Vec<&str> = results
        .iter()
        .map(|x| x["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        status,
        ["applied", "rejected", "rejected", "held", "applied"]
    );
    for i in [1, 2] {
        let reason = results[i]["reason"].as_str().unwrap();
        assert!(
            reason.contains("not writable") && reason.contains("\"ACC-B\""),
            "{reason}"
        );
    }
    let held: Vec<(String, String)> = db
        .store
        .held_busts()
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.account, h.deal_id))
        .collect();
    assert_eq!(held, [("ACC-A".to_owned(), "D1".to_owned())]);
    assert_eq!(
        db.store
            .metrics()
            .out_of_scope
            .with_label_values(&["http"])
            .get(),
        2
    );
    // Bob's fill stands, untouched; alice's own events were applied.
    assert_eq!(
        position_qty(&db.store, "ACC-B", "EURUSD").await,
        Some(dec("10"))
    );
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("2"))
    );
    // A replay of the answer does not count the rejections again.
    let r = srv
        .post(
            Some("token-alice"),
            Some("alice-1"),
            batch(&[
                fill("E2", "D2", "ACC-A", "EURUSD", "BUY", "3", "1.1"),
                fill("E3", "D3", "ACC-B", "EURUSD", "BUY", "5", "1.1"),
                serde_json::json!({"kind":"BUST","event_id":"B1","deal_id":"D1","account":"ACC-B",
                    "exec_time":"2026-11-30T08:05:00Z"}),
                serde_json::json!({"kind":"BUST","event_id":"B2","deal_id":"D1","account":"ACC-A",
                    "exec_time":"2026-11-30T08:05:00Z"}),
                fill("E4", "D4", "ACC-A", "EURUSD", "SELL", "1", "1.2"),
            ]),
        )
        .await;
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        db.store
            .metrics()
            .out_of_scope
            .with_label_values(&["http"])
            .get(),
        2
    );
    // The rejected event was not recorded as processed: bob may post it.
    let r = srv
        .post(
            Some("token-bob"),
            Some("bob-2"),
            batch(&[fill("E3", "D3", "ACC-B", "EURUSD", "BUY", "5", "1.1")]),
        )
        .await;
    assert_eq!(json(&r)["totals"]["applied"], 1);
    // F2, the squatting attack: alice posts a FILL on her account under
    // bob's next deal id; bob's genuine FILL under it is his own deal
    // (ACC-B, D5) and is applied.
    let r = srv
        .post(
            Some("token-alice"),
            Some("alice-2"),
            batch(&[fill("E5-alice", "D5", "ACC-A", "EURUSD", "BUY", "7", "1.3")]),
        )
        .await;
    assert_eq!(json(&r)["totals"]["applied"], 1);
    let r = srv
        .post(
            Some("token-bob"),
            Some("bob-3"),
            batch(&[fill("E5", "D5", "ACC-B", "EURUSD", "SELL", "4", "1.3")]),
        )
        .await;
    let v = json(&r);
    assert_eq!(v["results"][0]["status"], "applied", "{v}");
    assert_eq!(
        position_qty(&db.store, "ACC-B", "EURUSD").await,
        Some(dec("11"))
    );
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("9"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_scope_sqlite() {
    write_scope(&sqlite_db(StoreOptions::default()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_scope_postgres() {
    let Some(db) = pg_db("write_scope", StoreOptions::default()).await else {
        return;
    };
    write_scope(&db).await;
    db.cleanup().await;
}

/// Exact decimals on the HTTP path (docs/fills-notes.md): the two values
/// an adversarial test saw rounded are rejected with their reason; the rest
/// of the batch is applied with every digit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inexact_decimals_are_rejected_not_rounded() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let body = batch(&[
        fill(
            "E1",
            "D1",
            "ACC-A",
            "EURUSD",
            "BUY",
            "1.0000000000000000000000000000000000001",
            "1",
        ),
        fill(
            "E2",
            "D2",
            "ACC-A",
            "EURUSD",
            "BUY",
            "0.00000000000000000000000000001",
            "1",
        ),
        fill(
            "E3",
            "D3",
            "ACC-A",
            "EURUSD",
            "BUY",
            "0.0000000000000000000000000001",
            "1",
        ),
        fill(
            "E4",
            "D4",
            "ACC-A",
            "EURUSD",
            "BUY",
            "79228162514264337593543950335",
            "1",
        ),
    ]);
    let r = srv.post(Some("token-alice"), Some("exact-1"), body).await;
    let v = json(&r);
    let results = v["results"].as_array().unwrap();
    for i in [0, 1] {
        assert_eq!(results[i]["status"], "rejected");
        let reason = results[i]["reason"].as_str().unwrap();
        assert!(reason.contains("cannot be held exactly"), "{reason}");
    }
    assert_eq!(results[2]["status"], "applied");
    // The position would be rounded: rejected, nothing applied for it.
    assert_eq!(results[3]["status"], "rejected");
    let reason = results[3]["reason"].as_str().unwrap();
    assert!(reason.contains("position quantity"), "{reason}");
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("0.0000000000000000000000000001"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_only_for_visible_accounts() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let body = batch(&[
        fill("E1", "D1", "ACC-A", "EURUSD", "BUY", "100", "1.5"),
        fill("E2", "D2", "ACC-A", "EURUSD", "SELL", "40", "2.0"),
        fill("E3", "D3", "ACC-B", "GBPUSD", "BUY", "1", "1.25"),
    ]);
    assert_eq!(
        srv.post(Some("token-bob"), Some("p1"), body).await.status,
        200
    );
    let r = srv
        .get(Some("token-alice"), "/v1/positions?account=ACC-A")
        .await;
    assert_eq!(r.status, 200);
    let v = json(&r);
    assert_eq!(v["account"], "ACC-A");
    let p = &v["positions"][0];
    assert_eq!(p["symbol"], "EURUSD");
    assert_eq!(dec(p["qty"].as_str().unwrap()), dec("60"));
    assert_eq!(dec(p["avg_price"].as_str().unwrap()), dec("1.5"));
    assert_eq!(dec(p["realized_pnl"].as_str().unwrap()), dec("20"));
    assert_eq!(v["positions"].as_array().unwrap().len(), 1);
    // alice may not see ACC-B; bob ("*") may.
    assert_problem(
        &srv.get(Some("token-alice"), "/v1/positions?account=ACC-B")
            .await,
        403,
    );
    let r = srv
        .get(Some("token-bob"), "/v1/positions?account=ACC-B")
        .await;
    assert_eq!(json(&r)["positions"][0]["symbol"], "GBPUSD");
    assert_problem(&srv.get(Some("token-bob"), "/v1/positions").await, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_and_unknown_paths() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let r = srv.get(None, "/openapi.json").await;
    assert_eq!(r.status, 200);
    let v = json(&r);
    assert_eq!(v["openapi"], "3.1.0");
    assert!(v["paths"]["/v1/fills"]["post"].is_object());
    assert_problem(&srv.get(None, "/nope").await, 404);
    assert_problem(&srv.get(Some("token-alice"), "/v1/fills").await, 405);
}

/// K6: with every slot busy, the next batch is 429 with Retry-After at
/// once (no queueing); the held batch then completes normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k6_overload_is_429_with_retry_after() {
    let db = sqlite_db(StoreOptions::default()).await;
    let entered = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let backend = Gated {
        inner: db.store.clone(),
        entered: entered.clone(),
        release: release.clone(),
    };
    let srv = Arc::new(
        serve(
            Arc::new(backend),
            HttpOptions {
                max_in_flight: 1,
                ..HttpOptions::default()
            },
        )
        .await,
    );
    let held = {
        let srv = srv.clone();
        tokio::spawn(async move {
            let body = batch(&[fill("H1", "H1", "ACC-A", "EURUSD", "BUY", "1", "1.1")]);
            srv.post(Some("token-alice"), Some("held"), body).await
        })
    };
    entered.notified().await;
    let body = batch(&[fill("O1", "O1", "ACC-A", "EURUSD", "BUY", "5", "1.1")]);
    let r = srv
        .post(Some("token-bob"), Some("over"), body.clone())
        .await;
    assert_problem(&r, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        srv.counter(
            "tickgate_fills_http_overload_total",
            &[("reason", "in_flight")]
        ),
        1
    );
    release.add_permits(10);
    assert_eq!(held.await.unwrap().status, 200);
    // The refused batch was not applied; its retry is.
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("1"))
    );
    let r = srv.post(Some("token-bob"), Some("over"), body).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("idempotent-replayed"), None);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("6"))
    );
}

/// The fault switch: committed, then answered 429. The retry with the same
/// key gets the committed answer, and the events were applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_429_after_commit_then_retry_replays() {
    let db = sqlite_db(StoreOptions::default()).await;
    let srv = serve(
        Arc::new(db.store.clone()),
        HttpOptions {
            fault_429_after_commit: 1.0,
            ..HttpOptions::default()
        },
    )
    .await;
    let body = batch(&[fill("F1", "F1", "ACC-A", "EURUSD", "BUY", "9", "1.1")]);
    let r = srv
        .post(Some("token-alice"), Some("f1"), body.clone())
        .await;
    assert_problem(&r, 429);
    assert!(r.header("retry-after").is_some());
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("9"))
    );
    let r2 = srv.post(Some("token-alice"), Some("f1"), body).await;
    assert_eq!(r2.status, 200);
    assert_eq!(r2.header("idempotent-replayed"), Some("true"));
    assert_eq!(json(&r2)["totals"]["applied"], 1);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("9"))
    );
    assert_eq!(
        srv.counter("tickgate_fills_http_overload_total", &[("reason", "fault")]),
        1
    );
}

/// The same checks against PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k2_k3_k4_on_postgres() {
    let Some(db) = pg_db("k234", StoreOptions::default()).await else {
        return;
    };
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let a = batch(&[fill("PA", "PA", "ACC-A", "EURUSD", "BUY", "10", "1.1")]);
    let b = batch(&[fill("PB", "PB", "ACC-B", "EURUSD", "BUY", "20", "1.1")]);
    let ra = srv.post(Some("token-alice"), Some("k"), a.clone()).await;
    let rb = srv.post(Some("token-bob"), Some("k"), b).await;
    assert_eq!((ra.status, rb.status), (200, 200));
    assert_eq!(rb.header("idempotent-replayed"), None);
    assert_ne!(ra.body, rb.body);
    let other = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let again = other.post(Some("token-alice"), Some("k"), a).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, ra.body);
    let changed = batch(&[fill("PA", "PA", "ACC-A", "EURUSD", "BUY", "11", "1.1")]);
    assert_problem(
        &other.post(Some("token-alice"), Some("k"), changed).await,
        422,
    );
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("10"))
    );
    assert_eq!(
        position_qty(&db.store, "ACC-B", "EURUSD").await,
        Some(dec("20"))
    );
}

/// K5 without forcing the overlap: many concurrent attempts with one key.
/// Exactly one runs the batch; every other gets its answer byte for byte
/// (or a 409 with Retry-After); the events are applied once.
async fn concurrent_attempts_one_key(db: &Db) {
    let srv = Arc::new(
        serve(
            Arc::new(db.store.clone()),
            HttpOptions {
                cache_capacity: 0, // every attempt goes to the store
                ..HttpOptions::default()
            },
        )
        .await,
    );
    let events: Vec<Value> = (0..200)
        .map(|i| {
            fill(
                &format!("C{i}"),
                &format!("C{i}"),
                "ACC-A",
                "EURUSD",
                "BUY",
                "1",
                "1.1",
            )
        })
        .collect();
    let body = batch(&events);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (srv, body) = (srv.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            srv.post(Some("token-alice"), Some("concurrent"), body)
                .await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let fresh: Vec<_> = answers
        .iter()
        .filter(|r| r.status == 200 && r.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(fresh.len(), 1, "exactly one attempt runs the batch");
    for r in &answers {
        match r.status {
            200 => assert_eq!(r.body, fresh[0].body),
            409 => {
                assert_problem(r, 409);
                assert!(r.header("retry-after").is_some());
            }
            s => panic!("unexpected {s}: {}", String::from_utf8_lossy(&r.body)),
        }
    }
    assert_eq!(json(fresh[0])["totals"]["applied"], 200);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("200"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k5_concurrent_attempts_sqlite() {
    concurrent_attempts_one_key(&sqlite_db(StoreOptions::default()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k5_concurrent_attempts_postgres() {
    let Some(db) = pg_db("k5c", StoreOptions::default()).await else {
        return;
    };
    concurrent_attempts_one_key(&db).await;
    db.cleanup().await;
}

/// The PID of a backend that `blocker` blocks, once there is one. Polls
/// pg_stat_activity (a new snapshot per statement outside a transaction);
/// the bound only turns a hang into a failure.
async fn wait_blocked_by(monitor: &tokio_postgres::Client, blocker: i32) -> i32 {
    for _ in 0..3000 {
        let rows = monitor
            .query(
                "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&blocker],
            )
            .await
            .unwrap();
        if let Some(r) = rows.first() {
            return r.get(0);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no backend blocked by {blocker}");
}

/// Starts the first attempt of `key` and returns once it is stuck inside
/// its transaction (key row inserted, uncommitted) behind our row lock on
/// the ACC-A/EURUSD position (created by a warm-up batch: +1). A row lock,
/// not a table lock, so that other connections can still prepare their
/// statements.
async fn first_attempt_in_progress(
    db: &Db,
    srv: &Arc<Server>,
    key: &'static str,
    body: Vec<u8>,
) -> (
    tokio_postgres::Client,
    tokio::task::JoinHandle<HttpResponse>,
    i32,
) {
    let warm = batch(&[fill("PRE", "PRE", "ACC-A", "EURUSD", "BUY", "1", "1.1")]);
    assert_eq!(
        srv.post(Some("token-alice"), Some("warm-up"), warm)
            .await
            .status,
        200
    );
    let (url, schema) = db.pg.clone().unwrap();
    let locker = pg_client(&url, Some(&schema)).await;
    locker.batch_execute("BEGIN").await.unwrap();
    let locked = locker
        .query(
            "SELECT qty FROM positions WHERE account = 'ACC-A' AND symbol = 'EURUSD' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(locked.len(), 1);
    let locker_pid: i32 = locker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let monitor = pg_client(&url, None).await;
    let first = {
        let srv = srv.clone();
        tokio::spawn(async move { srv.post(Some("token-alice"), Some(key), body).await })
    };
    let first_pid = wait_blocked_by(&monitor, locker_pid).await;
    (locker, first, first_pid)
}

/// K5 on PostgreSQL: a retry that arrives while the first attempt is still
/// in its transaction waits on the key row, then gets the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k5_retry_waits_for_first_attempt_postgres() {
    let opts = StoreOptions {
        key_wait: Duration::from_secs(60),
        ..StoreOptions::default()
    };
    let Some(db) = pg_db("k5wait", opts).await else {
        return;
    };
    let srv = Arc::new(serve(Arc::new(db.store.clone()), HttpOptions::default()).await);
    let body = batch(&[fill("W1", "W1", "ACC-A", "EURUSD", "BUY", "4", "1.1")]);
    let (locker, first, first_pid) = first_attempt_in_progress(&db, &srv, "k5", body.clone()).await;
    let second = {
        let srv = srv.clone();
        tokio::spawn(async move { srv.post(Some("token-alice"), Some("k5"), body).await })
    };
    // The retry is waiting on the first attempt's key row (the lock, K5).
    let (url, _) = db.pg.clone().unwrap();
    let monitor = pg_client(&url, None).await;
    wait_blocked_by(&monitor, first_pid).await;
    locker.batch_execute("COMMIT").await.unwrap();
    let (r1, r2) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!((r1.status, r2.status), (200, 200));
    assert_eq!(r1.header("idempotent-replayed"), None);
    assert_eq!(r2.header("idempotent-replayed"), Some("true"));
    assert_eq!(r2.body, r1.body);
    assert_eq!(json(&r1)["totals"]["applied"], 1);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("5"))
    );
    db.cleanup().await;
}

/// K5 on PostgreSQL: when the first attempt outlasts key_wait, the retry is
/// 409 with Retry-After; a later retry gets the committed answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k5_retry_gets_409_when_wait_runs_out_postgres() {
    let opts = StoreOptions {
        key_wait: Duration::from_millis(300),
        ..StoreOptions::default()
    };
    let Some(db) = pg_db("k5409", opts).await else {
        return;
    };
    let srv = Arc::new(serve(Arc::new(db.store.clone()), HttpOptions::default()).await);
    let body = batch(&[fill("T1", "T1", "ACC-A", "EURUSD", "SELL", "2", "1.1")]);
    let (locker, first, _) = first_attempt_in_progress(&db, &srv, "k5-409", body.clone()).await;
    // The first attempt cannot finish while we hold the lock.
    let r2 = srv
        .post(Some("token-alice"), Some("k5-409"), body.clone())
        .await;
    let p = assert_problem(&r2, 409);
    assert!(p["type"].as_str().unwrap().contains("request-in-progress"));
    assert_eq!(r2.header("retry-after"), Some("1"));
    assert_eq!(srv.counter("tickgate_fills_http_conflicts_total", &[]), 1);
    locker.batch_execute("COMMIT").await.unwrap();
    let r1 = first.await.unwrap();
    assert_eq!(r1.status, 200);
    let r3 = srv.post(Some("token-alice"), Some("k5-409"), body).await;
    assert_eq!(r3.header("idempotent-replayed"), Some("true"));
    assert_eq!(r3.body, r1.body);
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("-1"))
    );
    db.cleanup().await;
}

/// A client that hangs up mid-batch: the batch still completes, its slot
/// stays taken until then (K6 counts real work, not connections), and the
/// retry gets the committed answer from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_hang_up_keeps_the_slot_until_the_store_is_done() {
    let db = sqlite_db(StoreOptions::default()).await;
    let entered = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let backend = Gated {
        inner: db.store.clone(),
        entered: entered.clone(),
        release: release.clone(),
    };
    let srv = serve(
        Arc::new(backend),
        HttpOptions {
            max_in_flight: 1,
            ..HttpOptions::default()
        },
    )
    .await;
    let body = batch(&[fill("G1", "G1", "ACC-A", "EURUSD", "BUY", "3", "1.1")]);
    let headers = vec![
        ("authorization".to_owned(), "Bearer token-alice".to_owned()),
        ("idempotency-key".to_owned(), "hang-up".to_owned()),
    ];
    let url = format!("{}/v1/fills", srv.base);
    let attempt = {
        let (url, headers, body) = (url.clone(), headers.clone(), body.clone());
        tokio::spawn(async move {
            // Gives up long before the gate opens: the batch is held until
            // this attempt has returned.
            http_request(
                "POST",
                &url,
                &headers,
                Bytes::from(body),
                Duration::from_millis(200),
            )
            .await
        })
    };
    entered.notified().await;
    assert!(matches!(
        attempt.await.unwrap(),
        Err(tickgate::fills::push::HttpError::Timeout)
    ));
    // The hung-up batch still holds the only slot.
    let other = batch(&[fill("G2", "G2", "ACC-A", "EURUSD", "BUY", "1", "1.1")]);
    assert_problem(
        &srv.post(Some("token-bob"), Some("other"), other).await,
        429,
    );
    release.add_permits(10);
    // Until the task ends a retry is 429; then the cached answer.
    let mut r = srv
        .post(Some("token-alice"), Some("hang-up"), body.clone())
        .await;
    for _ in 0..500 {
        if r.status != 429 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        r = srv
            .post(Some("token-alice"), Some("hang-up"), body.clone())
            .await;
    }
    assert_eq!(r.status, 200);
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(json(&r)["totals"]["applied"], 1);
    assert_eq!(
        srv.counter(
            "tickgate_fills_http_idempotent_replays_total",
            &[("source", "cache")]
        ),
        1
    );
    assert_eq!(
        position_qty(&db.store, "ACC-A", "EURUSD").await,
        Some(dec("3"))
    );
}
