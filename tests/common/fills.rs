//! Harness shared by the fills tests: a store on SQLite (in a tempdir) or
//! on a fresh schema of the PostgreSQL test database, and the real HTTP
//! router served on 127.0.0.1:0.

// Each test file uses part of this.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus::Registry;
use tickgate::fills::config::ClientConfig;
use tickgate::fills::http::{router, FillsBackend, HttpOptions, HttpState};
use tickgate::fills::metrics::FillsMetrics;
use tickgate::fills::store::{PgStore, SqliteStore, Store, StoreOptions};

pub struct Db {
    pub store: Store,
    _dir: Option<tempfile::TempDir>,
    /// PostgreSQL URL and this test's schema.
    pub pg: Option<(String, String)>,
}

/// A plain connection (for setup, locks and monitoring), optionally with
/// the test's schema as search_path.
pub async fn pg_client(url: &str, schema: Option<&str>) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(conn);
    if let Some(s) = schema {
        client
            .batch_execute(&format!("SET search_path TO \"{s}\""))
            .await
            .unwrap();
    }
    client
}

impl Db {
    /// Drops the test's PostgreSQL schema (left behind if the test failed,
    /// for a look).
    pub async fn cleanup(self) {
        if let Some((url, schema)) = &self.pg {
            let c = pg_client(url, None).await;
            c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .await
                .unwrap();
        }
    }
}

pub async fn sqlite_db(opts: StoreOptions) -> Db {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("fills.db"),
        opts,
        FillsMetrics::unregistered(),
    )
    .await
    .unwrap();
    Db {
        store: Store::Sqlite(store),
        _dir: Some(dir),
        pg: None,
    }
}

/// The standard local address of each service variable: used when the
/// variable is unset and something answers there.
fn local_default(var: &str) -> Option<(&'static str, &'static str)> {
    match var {
        "TICKGATE_TEST_PG_URL" => {
            Some(("postgres://postgres@127.0.0.1:5432/test", "127.0.0.1:5432"))
        }
        "TICKGATE_TEST_NATS_URL" => Some(("nats://127.0.0.1:4222", "127.0.0.1:4222")),
        "TICKGATE_TEST_REDIS_URL" => Some(("redis://127.0.0.1:6379/", "127.0.0.1:6379")),
        "TICKGATE_TEST_KAFKA_URL" => Some(("127.0.0.1:9092", "127.0.0.1:9092")),
        _ => None,
    }
}

/// The URL in `$var`; unset, the standard local address when a server
/// answers there (plain `cargo test` on a machine running the services
/// needs no variables); else None: the test is skipped, and says so on the
/// real standard error, past libtest's capture, so that the skip shows in
/// the output a user reads (with TICKGATE_REQUIRE_SERVICES=1, as in CI, it
/// fails instead).
pub fn service_url(var: &str, test: &str) -> Option<String> {
    if let Ok(u) = std::env::var(var) {
        if !u.is_empty() {
            return Some(u);
        }
    }
    if let Some((url, addr)) = local_default(var) {
        let answers = addr.parse().ok().is_some_and(|a| {
            std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_millis(300)).is_ok()
        });
        if answers {
            return Some(url.to_string());
        }
    }
    assert!(
        std::env::var("TICKGATE_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{var} is required (TICKGATE_REQUIRE_SERVICES=1)"
    );
    let why = match local_default(var) {
        Some((_, addr)) => format!("{var} is unset and nothing answers on {addr}"),
        None => format!("{var} is unset"),
    };
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
    None
}

/// $TICKGATE_TEST_PG_URL (see [`service_url`]).
pub fn pg_url(test: &str) -> Option<String> {
    service_url("TICKGATE_TEST_PG_URL", test)
}

/// $TICKGATE_TEST_REDIS_URL (see [`service_url`]).
pub fn redis_url(test: &str) -> Option<String> {
    service_url("TICKGATE_TEST_REDIS_URL", test)
}

/// $TICKGATE_TEST_KAFKA_URL, a `host:port` bootstrap server (see
/// [`service_url`]). CI runs tansu 0.6.0 with its SQLite storage engine.
pub fn kafka_url(test: &str) -> Option<String> {
    service_url("TICKGATE_TEST_KAFKA_URL", test)
}

/// A second store on the same PostgreSQL schema as `db` (another
/// instance behind the same database: its own pool and connections).
pub async fn pg_same_db(db: &Db, opts: StoreOptions) -> Store {
    let (url, schema) = db.pg.as_ref().expect("a PostgreSQL test database");
    let opts = StoreOptions {
        pg_schema: Some(schema.clone()),
        ..opts
    };
    Store::Postgres(
        PgStore::connect(url, opts, FillsMetrics::unregistered())
            .await
            .unwrap(),
    )
}

/// A schema name no other test (or run) uses.
pub fn unique_schema(prefix: &str, test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}_{test}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store on a fresh schema of the test database, or None (skipped).
pub async fn pg_db(prefix: &str, test: &str, opts: StoreOptions) -> Option<Db> {
    let url = pg_url(test)?;
    let schema = unique_schema(prefix, test);
    let opts = StoreOptions {
        pg_schema: Some(schema.clone()),
        ..opts
    };
    pg_client(&url, None)
        .await
        .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
        .await
        .unwrap();
    let store = PgStore::connect(&url, opts, FillsMetrics::unregistered())
        .await
        .unwrap();
    Some(Db {
        store: Store::Postgres(store),
        _dir: None,
        pg: Some((url, schema)),
    })
}

/// The fills HTTP API on 127.0.0.1:0; stops when dropped.
pub struct Server {
    pub base: String,
    pub registry: Registry,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn serve(
    backend: Arc<dyn FillsBackend>,
    clients: &[ClientConfig],
    options: HttpOptions,
) -> Server {
    let registry = Registry::new();
    let state = HttpState::new(backend, clients, options, &registry).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = router(state);
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Server {
        base: format!("http://{addr}"),
        registry,
        _stop: stop,
    }
}

impl Server {
    /// A counter's value from the registry, summed over series matching
    /// all given label pairs.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let mut total = 0.0;
        for family in self.registry.gather() {
            if family.name() != name {
                continue;
            }
            for m in family.get_metric() {
                let matches = labels.iter().all(|(k, v)| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == *k && l.value() == *v)
                });
                if matches {
                    total += m.get_counter().get_value();
                }
            }
        }
        total as u64
    }
}

/// Every position's quantity as an integer (for workloads of whole shares),
/// by (account, symbol).
pub async fn whole_quantities(store: &Store) -> std::collections::BTreeMap<(String, String), i64> {
    store
        .positions(None)
        .await
        .unwrap()
        .into_iter()
        .map(|p| {
            let q: i64 = p.position.qty.try_into().expect("a whole quantity");
            ((p.account, p.symbol), q)
        })
        .collect()
}
