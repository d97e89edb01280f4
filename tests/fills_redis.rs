//! The shared answer cache in Redis (fills.md K8): two
//! tickgate instances behind one PostgreSQL database and one Redis. A
//! retry landing on the instance that did not run the batch is answered
//! from Redis without a database read (every database access of the HTTP
//! layer goes through its backend, and the backends here count their
//! calls); a Redis value that is not a committed answer of that client,
//! key and request hash is ignored; a Redis that is not there changes
//! nothing but the number of database reads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use serde_json::Value;
use tickgate::fills::cache::CachedAnswer;
use tickgate::fills::config::ClientConfig;
use tickgate::fills::http::{BatchOutcome, FillsBackend, HttpOptions, PositionView};
use tickgate::fills::push::{http_request, HttpResponse};
use tickgate::fills::shared_cache::{encode, SharedCache, SharedCacheOptions};
use tickgate::fills::store::{Store, StoreOptions};

#[path = "common/fills.rs"]
mod fills_common;
use fills_common::{pg_same_db, redis_url, sqlite_db, unique_schema, Server};

fn clients() -> Vec<ClientConfig> {
    vec![
        ClientConfig {
            name: "alice".into(),
            token: "token-alice".into(),
            accounts: vec!["*".into()],
        },
        ClientConfig {
            name: "bob".into(),
            token: "token-bob".into(),
            accounts: vec!["*".into()],
        },
    ]
}

/// The store, counting every call (each one is a database transaction).
struct Counting {
    inner: Store,
    calls: AtomicUsize,
}

impl Counting {
    fn new(inner: Store) -> Arc<Counting> {
        Arc::new(Counting {
            inner,
            calls: AtomicUsize::new(0),
        })
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl FillsBackend for Counting {
    fn apply_batch<'a>(
        &'a self,
        client: &'a ClientConfig,
        key: &'a str,
        request_hash: &'a str,
        events: &'a [Value],
    ) -> BoxFuture<'a, anyhow::Result<BatchOutcome>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.apply_batch(client, key, request_hash, events)
    }

    fn positions<'a>(
        &'a self,
        account: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<PositionView>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        FillsBackend::positions(&self.inner, account)
    }

    fn answer_mac_key(&self) -> Option<[u8; 32]> {
        FillsBackend::answer_mac_key(&self.inner)
    }
}

fn shared(url: &str, prefix: &str) -> SharedCacheOptions {
    SharedCacheOptions {
        url: url.to_owned(),
        prefix: prefix.to_owned(),
        timeout: Duration::from_secs(2),
    }
}

/// No in-process cache, so that every retry that is not answered from
/// Redis reaches the backend.
fn options(shared_cache: Option<SharedCacheOptions>) -> HttpOptions {
    HttpOptions {
        cache_capacity: 0,
        shared_cache,
        ..HttpOptions::default()
    }
}

async fn post(srv: &Server, token: &str, key: &str, body: Vec<u8>) -> HttpResponse {
    http_request(
        "POST",
        &format!("{}/v1/fills", srv.base),
        &[
            ("content-type".to_owned(), "application/json".to_owned()),
            ("authorization".to_owned(), format!("Bearer {token}")),
            ("idempotency-key".to_owned(), key.to_owned()),
        ],
        Bytes::from(body),
        Duration::from_secs(60),
    )
    .await
    .unwrap()
}

fn batch(ids: &[&str], qty: &str) -> Vec<u8> {
    let events: Vec<Value> = ids
        .iter()
        .map(|id| {
            serde_json::json!({"kind":"FILL","event_id":id,"deal_id":format!("D-{id}"),
                "account":"ACC-1","symbol":"EURUSD","side":"BUY","qty":qty,"price":"1.1",
                "exec_time":"2026-11-30T08:00:00Z"})
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "events": events })).unwrap()
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Deletes the test's keys.
async fn cleanup_redis(url: &str, prefix: &str) {
    let mut c = redis_conn(url).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut c)
        .await
        .unwrap();
    for k in keys {
        let _: () = redis::cmd("DEL").arg(k).query_async(&mut c).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_on_the_other_instance_are_served_from_redis() {
    let Some(rurl) = redis_url("retries_on_the_other_instance_are_served_from_redis") else {
        return;
    };
    let Some(db) = fills_common::pg_db("t_redis", "share", StoreOptions::default()).await else {
        return;
    };
    let prefix = format!("{}:", unique_schema("t_redis", "share"));
    let a = Counting::new(db.store.clone());
    let b = Counting::new(pg_same_db(&db, StoreOptions::default()).await);
    let srv_a =
        fills_common::serve(a.clone(), &clients(), options(Some(shared(&rurl, &prefix)))).await;
    let srv_b =
        fills_common::serve(b.clone(), &clients(), options(Some(shared(&rurl, &prefix)))).await;

    let body = batch(&["E1", "E2", "E3"], "5");
    let first = post(&srv_a, "token-alice", "k-1", body.clone()).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(a.calls(), 1);
    // Retries on the other instance: the stored answer, byte for byte,
    // without one database read.
    for _ in 0..10 {
        let r = post(&srv_b, "token-alice", "k-1", body.clone()).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        assert_eq!(r.body, first.body);
    }
    assert_eq!(b.calls(), 0, "retries on B must not read the database");
    assert_eq!(
        srv_b.counter(
            "tickgate_fills_http_idempotent_replays_total",
            &[("source", "redis")]
        ),
        10
    );
    // And back on A (no in-process cache there either): from Redis too.
    let r = post(&srv_a, "token-alice", "k-1", body.clone()).await;
    assert_eq!((r.status, r.body.clone()), (200, first.body.clone()));
    assert_eq!(a.calls(), 1);

    // K3 from B: same key, another body. The cached value has another
    // hash, so the database decides: 422, one read.
    let r = post(
        &srv_b,
        "token-alice",
        "k-1",
        batch(&["E1", "E2", "E3"], "6"),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(b.calls(), 1);
    // K2: bob's key "k-1" is not alice's: a first attempt of his own.
    let r = post(&srv_b, "token-bob", "k-1", batch(&["E9"], "1")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("idempotent-replayed"), None);
    assert_ne!(r.body, first.body);
    assert_eq!(b.calls(), 2);
    // The events were applied once.
    let rows = db
        .store
        .positions(Some(&["ACC-1".to_owned()]))
        .await
        .unwrap();
    assert_eq!(rows[0].position.qty, rust_decimal::Decimal::from(16));

    // K7: the entry expires no later than the key (72 h by default).
    let mut c = redis_conn(&rurl).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(keys.len(), 2, "alice's and bob's answers");
    for k in &keys {
        let ttl: i64 = redis::cmd("PTTL").arg(k).query_async(&mut c).await.unwrap();
        assert!(ttl > 0 && ttl <= 72 * 3600 * 1000, "{k}: PTTL {ttl}");
    }
    cleanup_redis(&rurl, &prefix).await;
    db.cleanup().await;
}

/// Values that are not a committed answer of this client, key and hash
/// are never served: the database answers, with the true stored answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_redis_values_are_ignored() {
    let Some(rurl) = redis_url("wrong_redis_values_are_ignored") else {
        return;
    };
    let db = sqlite_db(StoreOptions::default()).await;
    let prefix = format!("{}:", unique_schema("t_redis", "wrong"));
    let be = Counting::new(db.store.clone());
    let srv = fills_common::serve(
        be.clone(),
        &clients(),
        options(Some(shared(&rurl, &prefix))),
    )
    .await;
    let body = batch(&["E1"], "5");
    let first = post(&srv, "token-alice", "k", body.clone()).await;
    assert_eq!(first.status, 200);
    let cache = SharedCache::new(
        shared(&rurl, &prefix),
        db.store.answer_mac_key(),
        1 << 20,
        &prometheus::Registry::new(),
    )
    .unwrap();
    let rkey = cache.redis_key("alice", "k");
    let mut c = redis_conn(&rurl).await;
    let stored: Vec<u8> = redis::cmd("GET")
        .arg(&rkey)
        .query_async(&mut c)
        .await
        .unwrap();
    let good: Value = serde_json::from_slice(&stored).unwrap();
    let mut other_client = good.clone();
    other_client["client"] = "bob".into();
    let mut other_hash = good.clone();
    other_hash["request_hash"] = "0".repeat(64).into();
    other_hash["body"] = hex::encode(b"{\"forged\":true}").into();
    let wrong: Vec<Vec<u8>> = vec![
        b"not json at all".to_vec(),
        serde_json::to_vec(&other_client).unwrap(),
        serde_json::to_vec(&other_hash).unwrap(),
        b"{\"v\":2}".to_vec(),
    ];
    for (i, w) in wrong.into_iter().enumerate() {
        let _: () = redis::cmd("SET")
            .arg(&rkey)
            .arg(w)
            .query_async(&mut c)
            .await
            .unwrap();
        let r = post(&srv, "token-alice", "k", body.clone()).await;
        assert_eq!(r.status, 200, "case {i}");
        assert_eq!(r.body, first.body, "case {i}: the stored answer");
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        assert_eq!(be.calls(), 2 + i, "case {i}: answered by the database");
    }
    assert!(
        srv.counter(
            "tickgate_fills_http_shared_cache_total",
            &[("result", "invalid")]
        ) >= 2
    );
    cleanup_redis(&rurl, &prefix).await;
}

/// Redis not there (a loopback port where nothing listens): first
/// attempts, retries, K3 and K2 all answer as without a cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_changes_nothing() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let db = sqlite_db(StoreOptions::default()).await;
    let be = Counting::new(db.store.clone());
    let url = format!("redis://127.0.0.1:{port}/");
    let srv =
        fills_common::serve(be.clone(), &clients(), options(Some(shared(&url, "down:")))).await;
    let body = batch(&["E1", "E2"], "5");
    let first = post(&srv, "token-alice", "k", body.clone()).await;
    assert_eq!(first.status, 200);
    for _ in 0..3 {
        let r = post(&srv, "token-alice", "k", body.clone()).await;
        assert_eq!((r.status, r.body.clone()), (200, first.body.clone()));
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
    }
    assert_eq!(
        post(&srv, "token-alice", "k", batch(&["E1"], "5"))
            .await
            .status,
        422
    );
    let r = post(&srv, "token-bob", "k", batch(&["E3"], "1")).await;
    assert_eq!((r.status, r.header("idempotent-replayed")), (200, None));
    assert_eq!(be.calls(), 6, "every request went to the database");
    let rows = db.store.positions(None).await.unwrap();
    assert_eq!(rows[0].position.qty, rust_decimal::Decimal::from(11));
    assert!(
        srv.counter(
            "tickgate_fills_http_shared_cache_total",
            &[("result", "unavailable")]
        ) >= 1
    );
}

/// The request hash tickgate computes for `body` (K3): reproducible by
/// anyone who knows the body.
fn request_hash(body: &[u8]) -> String {
    tickgate::fills::hash::value_hash(&serde_json::from_slice(body).unwrap())
}

async fn plant(url: &str, rkey: &str, value: Vec<u8>) {
    let mut c = redis_conn(url).await;
    let _: () = redis::cmd("SET")
        .arg(rkey)
        .arg(value)
        .query_async(&mut c)
        .await
        .unwrap();
}

/// K8: a Redis writer can compute the request hash of a batch never sent,
/// but not the MAC: a planted answer (well-formed, right client, key and
/// hash) is not served; the batch is applied by the database. A forged
/// status 204 is not served either, not even under the true key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_and_forged_answers_are_not_served() {
    let Some(rurl) = redis_url("planted_and_forged_answers_are_not_served") else {
        return;
    };
    let db = sqlite_db(StoreOptions::default()).await;
    let prefix = format!("{}:", unique_schema("t_redis", "plant"));
    let be = Counting::new(db.store.clone());
    let srv = fills_common::serve(
        be.clone(),
        &clients(),
        options(Some(shared(&rurl, &prefix))),
    )
    .await;
    let real_key = db.store.answer_mac_key();
    let cache = SharedCache::new(
        shared(&rurl, &prefix),
        real_key,
        1 << 20,
        &prometheus::Registry::new(),
    )
    .unwrap();
    let forged_body = Bytes::from_static(b"{\"results\":[],\"totals\":{\"applied\":0}}");

    // 1. A planted 200 for a batch never sent, MAC'd under a guessed key.
    let body = batch(&["P1", "P2"], "5");
    let planted = CachedAnswer {
        request_hash: request_hash(&body),
        status: 200,
        body: forged_body.clone(),
    };
    plant(
        &rurl,
        &cache.redis_key("alice", "never-sent"),
        encode("alice", "never-sent", &planted, &[0x42; 32]),
    )
    .await;
    let r = post(&srv, "token-alice", "never-sent", body.clone()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("idempotent-replayed"), None, "a first attempt");
    assert_ne!(r.body, forged_body);
    assert_eq!(be.calls(), 1, "the batch went to the database");
    let rows = db.store.positions(None).await.unwrap();
    assert_eq!(rows[0].position.qty, rust_decimal::Decimal::from(10));
    assert_eq!(
        srv.counter(
            "tickgate_fills_http_shared_cache_total",
            &[("op", "get"), ("result", "bad_mac")]
        ),
        1
    );

    // 2. Forged statuses for a never-sent batch: 204 under a guessed key,
    // and 101, 204, 304 even under the database's key.
    let body = batch(&["P3"], "1");
    let mut expect_qty = 10;
    for (i, (status, key)) in [
        (204, [0x42; 32]),
        (101, real_key),
        (204, real_key),
        (304, real_key),
    ]
    .into_iter()
    .enumerate()
    {
        let idem = format!("forged-{i}");
        let forged = CachedAnswer {
            request_hash: request_hash(&body),
            status,
            body: Bytes::new(),
        };
        plant(
            &rurl,
            &cache.redis_key("alice", &idem),
            encode("alice", &idem, &forged, &key),
        )
        .await;
        let r = post(&srv, "token-alice", &idem, body.clone()).await;
        assert_eq!(r.status, 200, "case {i}: status {status} not served");
        assert_eq!(r.header("idempotent-replayed"), None, "case {i}");
        assert_eq!(be.calls(), 2 + i, "case {i}: answered by the database");
        if i == 0 {
            // P3 is applied once; the later keys see it as a duplicate.
            expect_qty += 1;
        }
    }
    let rows = db.store.positions(None).await.unwrap();
    assert_eq!(
        rows[0].position.qty,
        rust_decimal::Decimal::from(expect_qty)
    );
    assert_eq!(
        srv.counter(
            "tickgate_fills_http_shared_cache_total",
            &[("op", "get"), ("result", "bad_status")]
        ),
        3
    );
    // The genuine answers (written back by the fresh attempts) are
    // served.
    let r = post(&srv, "token-alice", "never-sent", batch(&["P1", "P2"], "5")).await;
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(be.calls(), 5, "served from Redis");
    cleanup_redis(&rurl, &prefix).await;
}

/// K8: a value longer than any answer tickgate writes is refused before
/// it is read whole (GETRANGE, counted as too_large) and the request is
/// answered by the database as if Redis had nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_values_are_not_read() {
    let Some(rurl) = redis_url("oversized_values_are_not_read") else {
        return;
    };
    let db = sqlite_db(StoreOptions::default()).await;
    let prefix = format!("{}:", unique_schema("t_redis", "big"));
    let be = Counting::new(db.store.clone());
    let opts = HttpOptions {
        body_limit: 64 * 1024,
        ..options(Some(shared(&rurl, &prefix)))
    };
    let bound = tickgate::fills::http::shared_value_bound(opts.body_limit);
    let srv = fills_common::serve(be.clone(), &clients(), opts).await;
    let cache = SharedCache::new(
        shared(&rurl, &prefix),
        db.store.answer_mac_key(),
        bound,
        &prometheus::Registry::new(),
    )
    .unwrap();
    let rkey = cache.redis_key("alice", "k");
    // Well past the bound (4 x 64 KiB + 1 MiB), starting like a value.
    let mut big = b"{\"v\":2,\"body\":\"".to_vec();
    big.resize(bound * 4, b'0');
    plant(&rurl, &rkey, big).await;

    let body = batch(&["B1"], "3");
    let r = post(&srv, "token-alice", "k", body.clone()).await;
    assert_eq!((r.status, r.header("idempotent-replayed")), (200, None));
    assert_eq!(be.calls(), 1);
    assert_eq!(
        srv.counter(
            "tickgate_fills_http_shared_cache_total",
            &[("op", "get"), ("result", "too_large")]
        ),
        1
    );
    let rows = db.store.positions(None).await.unwrap();
    assert_eq!(rows[0].position.qty, rust_decimal::Decimal::from(3));
    // The fresh answer replaced it: the retry is served from Redis.
    let again = post(&srv, "token-alice", "k", body).await;
    assert_eq!((again.status, again.body.clone()), (200, r.body.clone()));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(be.calls(), 1);
    cleanup_redis(&rurl, &prefix).await;
}
