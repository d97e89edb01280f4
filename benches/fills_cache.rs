//! Retries per second answered from the shared Redis cache (fills.md K8)
//! against retries answered by the database, side by side in one run.
//!
//!     TICKGATE_TEST_PG_URL=postgres://postgres@127.0.0.1:5432/test \
//!     TICKGATE_TEST_REDIS_URL=redis://127.0.0.1:6379/ cargo bench --bench fills_cache
//!
//! Instance A commits `FILLS_CACHE_KEYS` batches (default 200, 10 events
//! each). Then `FILLS_CACHE_RETRIES` retries (default 5,000, over those
//! keys, `FILLS_CACHE_CONCURRENCY` at a time, default 8) go to instance B,
//! which has no in-process cache and the shared Redis cache (every answer
//! comes from Redis), and the same retries to instance C, no cache at all
//! (every answer is the store's replay from the key row). Both use the
//! same store (PostgreSQL if $TICKGATE_TEST_PG_URL is set, else SQLite)
//! and the same HTTP client (one connection per request).

#[path = "common/env.rs"]
mod env;

use env::env_usize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use prometheus::Registry;
use tickgate::fills::config::ClientConfig;
use tickgate::fills::http::{router, HttpOptions, HttpState};
use tickgate::fills::metrics::FillsMetrics;
use tickgate::fills::push::http_request;
use tickgate::fills::shared_cache::SharedCacheOptions;
use tickgate::fills::store::{PgStore, SqliteStore, Store, StoreOptions};

async fn serve(store: Store, options: HttpOptions) -> String {
    let clients = vec![ClientConfig {
        name: "bench".into(),
        token: "token-bench".into(),
        accounts: vec!["*".into()],
    }];
    let state =
        HttpState::new(Arc::new(store), &clients, options, &Registry::new()).expect("state");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    format!("http://{addr}/v1/fills")
}

fn body(key: usize) -> Bytes {
    let events: Vec<serde_json::Value> = (0..10)
        .map(|i| {
            serde_json::json!({"kind":"FILL","event_id":format!("K{key}-E{i}"),
                "deal_id":format!("K{key}-D{i}"),"account":format!("ACC-{}", key % 50),
                "symbol":"EURUSD","side":"BUY","qty":"1000","price":"1.08512",
                "exec_time":"2026-11-30T08:00:00Z"})
        })
        .collect();
    Bytes::from(serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"))
}

async fn post(url: &str, key: usize) -> (u16, bool) {
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("authorization".to_owned(), "Bearer token-bench".to_owned()),
        ("idempotency-key".to_owned(), format!("bench-{key}")),
    ];
    let r = http_request("POST", url, &headers, body(key), Duration::from_secs(30))
        .await
        .expect("request");
    (r.status, r.header("idempotent-replayed") == Some("true"))
}

async fn retries(url: &str, keys: usize, n: usize, conc: usize) -> f64 {
    let t = Instant::now();
    let ok = futures::stream::iter(0..n)
        .map(|i| post(url, i % keys))
        .buffer_unordered(conc)
        .filter(|r| futures::future::ready(*r == (200, true)))
        .count()
        .await;
    assert_eq!(ok, n, "every retry must be the stored answer");
    t.elapsed().as_secs_f64()
}

fn main() {
    let keys = env_usize("FILLS_CACHE_KEYS", 200);
    let n = env_usize("FILLS_CACHE_RETRIES", 5_000);
    let conc = env_usize("FILLS_CACHE_CONCURRENCY", 8);
    let Ok(redis) = std::env::var("TICKGATE_TEST_REDIS_URL") else {
        println!("fills_cache: skipped (TICKGATE_TEST_REDIS_URL not set)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, backend) = match std::env::var("TICKGATE_TEST_PG_URL") {
            Ok(url) if !url.is_empty() => {
                let schema = format!("bench_cache_{}", std::process::id());
                let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("connect");
                tokio::spawn(conn);
                c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"))
                    .await
                    .expect("schema");
                let opts = StoreOptions {
                    pg_schema: Some(schema),
                    ..StoreOptions::default()
                };
                (
                    Store::Postgres(PgStore::connect(&url, opts, FillsMetrics::unregistered()).await.expect("pg")),
                    "postgres",
                )
            }
            _ => (
                Store::Sqlite(
                    SqliteStore::open(&dir.path().join("c.db"), StoreOptions::default(), FillsMetrics::unregistered())
                        .await
                        .expect("sqlite"),
                ),
                "sqlite",
            ),
        };
        let prefix = format!("bench:{}:", std::process::id());
        let shared = SharedCacheOptions {
            url: redis.clone(),
            prefix: prefix.clone(),
            timeout: Duration::from_millis(500),
        };
        let a = serve(
            store.clone(),
            HttpOptions {
                shared_cache: Some(shared.clone()),
                ..HttpOptions::default()
            },
        )
        .await;
        let b = serve(
            store.clone(),
            HttpOptions {
                cache_capacity: 0,
                shared_cache: Some(shared),
                ..HttpOptions::default()
            },
        )
        .await;
        let c = serve(
            store.clone(),
            HttpOptions {
                cache_capacity: 0,
                ..HttpOptions::default()
            },
        )
        .await;
        for k in 0..keys {
            assert_eq!(post(&a, k).await, (200, false));
        }
        // Warm both paths once (connections, prepared statements).
        retries(&b, keys, keys, conc).await;
        retries(&c, keys, keys, conc).await;
        let redis_secs = retries(&b, keys, n, conc).await;
        let db_secs = retries(&c, keys, n, conc).await;
        println!(
            "\n| answered from | store | retries | concurrency | seconds | retries/s |\n|---|---|---:|---:|---:|---:|"
        );
        println!("| Redis (shared cache) | {backend} | {n} | {conc} | {redis_secs:.2} | {:.0} |", n as f64 / redis_secs);
        println!("| database (key row) | {backend} | {n} | {conc} | {db_secs:.2} | {:.0} |", n as f64 / db_secs);
        println!("ratio: {:.2}x", db_secs / redis_secs);
        if let Ok(client) = redis::Client::open(redis.as_str()) {
            if let Ok(mut con) = client.get_multiplexed_async_connection().await {
                let ks: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query_async(&mut con)
                    .await
                    .unwrap_or_default();
                for k in ks {
                    let _: Result<(), _> = redis::cmd("DEL").arg(k).query_async(&mut con).await;
                }
            }
        }
        if let Store::Postgres(_) = store {
            if let Ok(url) = std::env::var("TICKGATE_TEST_PG_URL") {
                if let Ok((c, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                    tokio::spawn(conn);
                    let _ = c
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS bench_cache_{} CASCADE", std::process::id()))
                        .await;
                }
            }
        }
    });
}
