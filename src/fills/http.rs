//! The HTTP source of the reliable lane: `POST /v1/fills` with idempotency
//! keys (fills.md K1-K6), `GET /v1/positions`, `GET /openapi.json`.
//!
//! The database does the deciding (K2-K5 live in the store, in the same
//! transaction as the batch's effects); this layer authenticates the client,
//! checks the key and the body, bounds the work in flight (K6), and answers
//! replays of completed keys from an in-process cache without touching the
//! database. Every error is RFC 9457 problem+json.
//!
//! Mount with [`router`] (or run [`serve`]) on a [`HttpState`] built from
//! the `[fills]` config and a [`FillsBackend`] (the store).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::future::BoxFuture;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use rust_decimal::Decimal;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::backoff::SplitMix64;
use super::cache::{AnswerCache, CachedAnswer};
use super::config::{ClientConfig, FillsConfig};
use super::model::{self, Parsed};
use super::shared_cache::{Lookup, SharedCache, SharedCacheOptions};
use super::store::{AnswerFn, HttpOutcome, Store};
use crate::http_limits::{bearer_token, AuthorizationError};

/// The hand-written OpenAPI 3.1 description of this API.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// The outcome of one `POST /v1/fills` as the store decided it (K2-K5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOutcome {
    /// This attempt ran the batch; the answer was committed with its effects.
    Fresh { status: u16, body: Bytes },
    /// An earlier attempt with this `(client, key)` and the same request
    /// hash had committed this answer (possibly after waiting for it, K5).
    Replayed { status: u16, body: Bytes },
    /// The key was used by this client with a different request hash (K3).
    HashMismatch,
    /// An earlier attempt is still running and did not finish within the
    /// bounded wait (K5).
    InProgressTimeout,
}

/// One position of an account (F6), for `GET /v1/positions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionView {
    pub symbol: String,
    pub qty: Decimal,
    pub avg_price: Decimal,
    pub realized_pnl: Decimal,
}

/// What the HTTP layer needs from the store. Implemented for the fills
/// store; tests may implement it to inject failures.
pub trait FillsBackend: Send + Sync + 'static {
    /// Runs the batch under `(client.name, key)` exactly once (K2-K5):
    /// `events` are the raw JSON events, validated one by one by the
    /// store's model (a bad event is rejected in the answer, not the
    /// batch), and an event for an account outside `client.accounts` is
    /// rejected (K2 write scope), that event only.
    fn apply_batch<'a>(
        &'a self,
        client: &'a ClientConfig,
        key: &'a str,
        request_hash: &'a str,
        events: &'a [Value],
    ) -> BoxFuture<'a, anyhow::Result<BatchOutcome>>;

    /// The positions of one account, by symbol.
    fn positions<'a>(
        &'a self,
        account: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<PositionView>>>;

    /// K8: the key authenticating shared answer cache values, kept in the
    /// backend's database so every instance has the same one. A backend
    /// without one cannot use the shared cache.
    fn answer_mac_key(&self) -> Option<[u8; 32]> {
        None
    }
}

/// Knobs of the HTTP layer. [`HttpOptions::from_config`] takes what the
/// `[fills]` section has and the defaults below for the rest.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest accepted request body (413 above).
    pub body_limit: usize,
    /// Most events in one batch (413 above).
    pub max_batch: usize,
    /// K6: batches processed at once; one more is answered 429.
    pub max_in_flight: usize,
    /// K7: how long a stored answer may be served from the cache.
    pub key_ttl: Duration,
    /// Stored answers kept in memory (0 disables the cache).
    pub cache_capacity: usize,
    /// `Retry-After` of a 429 (K6), seconds.
    pub overload_retry_after_secs: u64,
    /// `Retry-After` of a 409 (K5), seconds.
    pub conflict_retry_after_secs: u64,
    /// Test fault switch: the probability that a batch that has just been
    /// committed is answered 429 anyway (the batch-retry incident). Also
    /// read from `$TICKGATE_FAULT_429_AFTER_COMMIT` by `from_config`.
    pub fault_429_after_commit: f64,
    /// Seed of the fault switch's PRNG (tests: reproducible faults); None =
    /// seeded from the clock.
    pub fault_seed: Option<u64>,
    /// K8: committed answers shared by several instances in Redis
    /// (`[fills.cache] redis`); None = off.
    pub shared_cache: Option<SharedCacheOptions>,
}

pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;
pub const FAULT_ENV: &str = "TICKGATE_FAULT_429_AFTER_COMMIT";

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            body_limit: DEFAULT_BODY_LIMIT,
            max_batch: 1000,
            max_in_flight: 64,
            key_ttl: Duration::from_secs(72 * 3600),
            cache_capacity: 10_000,
            overload_retry_after_secs: 1,
            conflict_retry_after_secs: 1,
            fault_429_after_commit: 0.0,
            fault_seed: None,
            shared_cache: None,
        }
    }
}

impl HttpOptions {
    pub fn from_config(cfg: &FillsConfig) -> anyhow::Result<Self> {
        let mut o = HttpOptions {
            body_limit: cfg.http.max_body_bytes,
            max_batch: cfg.max_batch,
            max_in_flight: cfg.max_in_flight,
            key_ttl: cfg.key_ttl,
            shared_cache: cfg.cache.redis.as_ref().map(|url| SharedCacheOptions {
                url: url.clone(),
                prefix: cfg.cache.prefix.clone(),
                timeout: cfg.cache.timeout,
            }),
            ..HttpOptions::default()
        };
        if let Ok(v) = std::env::var(FAULT_ENV) {
            o.fault_429_after_commit = v
                .trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("${FAULT_ENV}={v:?}: {e}"))?;
        }
        o.validate()?;
        Ok(o)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.body_limit > 0, "body limit must be > 0");
        anyhow::ensure!(self.max_batch > 0, "max_batch must be > 0");
        anyhow::ensure!(self.max_in_flight > 0, "max_in_flight must be > 0");
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.fault_429_after_commit),
            "fault_429_after_commit must be within 0..=1"
        );
        Ok(())
    }
}

/// Counters of the HTTP layer, registered on the daemon's registry.
#[derive(Clone)]
pub struct HttpMetrics {
    /// By route and status code.
    pub requests: IntCounterVec,
    /// K4 answers replayed, by where they came from (`cache`, `store`).
    pub replays: IntCounterVec,
    /// K5: 409s served because the first attempt was still running.
    pub conflicts: IntCounter,
    /// K6: 429s served, by reason (`in_flight`, `fault`).
    pub overloads: IntCounterVec,
    /// K3: 422s served (same key, different body).
    pub key_reuse: IntCounter,
}

impl HttpMetrics {
    pub fn new(registry: &Registry) -> anyhow::Result<Self> {
        let m = HttpMetrics {
            requests: IntCounterVec::new(
                Opts::new(
                    "tickgate_fills_http_requests_total",
                    "HTTP requests of the fills API by route and status",
                ),
                &["route", "status"],
            )?,
            replays: IntCounterVec::new(
                Opts::new(
                    "tickgate_fills_http_idempotent_replays_total",
                    "Stored answers replayed to retries (K4), by source",
                ),
                &["source"],
            )?,
            conflicts: IntCounter::new(
                "tickgate_fills_http_conflicts_total",
                "409 answers: an attempt with the same key was still running (K5)",
            )?,
            overloads: IntCounterVec::new(
                Opts::new(
                    "tickgate_fills_http_overload_total",
                    "429 answers (K6), by reason",
                ),
                &["reason"],
            )?,
            key_reuse: IntCounter::new(
                "tickgate_fills_http_key_reuse_total",
                "422 answers: idempotency key reused with a different body (K3)",
            )?,
        };
        registry.register(Box::new(m.requests.clone()))?;
        registry.register(Box::new(m.replays.clone()))?;
        registry.register(Box::new(m.conflicts.clone()))?;
        registry.register(Box::new(m.overloads.clone()))?;
        registry.register(Box::new(m.key_reuse.clone()))?;
        Ok(m)
    }
}

/// K8: the largest shared cache value read or written. An answer names
/// each event of a request no larger than `body_limit`, and the value
/// holds it in hex (twice its size): four times the body limit and a
/// mebibyte of slack is more than any answer tickgate writes, and bounds
/// what a planted value can cost the request path.
pub fn shared_value_bound(body_limit: usize) -> usize {
    body_limit.saturating_mul(4).saturating_add(1 << 20)
}

/// Everything the handlers share.
pub struct HttpState {
    backend: Arc<dyn FillsBackend>,
    /// SHA-256 of each token -> its client: the lookup compares digests, so
    /// its timing says nothing about how much of a guessed token was right.
    clients: HashMap<[u8; 32], Arc<ClientConfig>>,
    options: HttpOptions,
    in_flight: Arc<Semaphore>,
    cache: AnswerCache,
    /// K8: the Redis cache shared with other instances, if configured.
    shared: Option<SharedCache>,
    metrics: HttpMetrics,
    fault_rng: Mutex<SplitMix64>,
    started: Instant,
}

impl HttpState {
    pub fn new(
        backend: Arc<dyn FillsBackend>,
        clients: &[ClientConfig],
        options: HttpOptions,
        registry: &Registry,
    ) -> anyhow::Result<Arc<Self>> {
        options.validate()?;
        if clients.is_empty() {
            tracing::warn!("fills http: no clients configured; every request will be 401");
        }
        if options.fault_429_after_commit > 0.0 {
            tracing::warn!(
                p = options.fault_429_after_commit,
                "fills http: FAULT SWITCH ON, committed batches may be answered 429"
            );
        }
        let mut by_token = HashMap::new();
        for c in clients {
            anyhow::ensure!(!c.token.is_empty(), "client {}: empty token", c.name);
            let prev = by_token.insert(token_digest(&c.token), Arc::new(c.clone()));
            anyhow::ensure!(prev.is_none(), "client {}: token reused", c.name);
        }
        let shared = match &options.shared_cache {
            Some(o) => {
                let key = backend.answer_mac_key().ok_or_else(|| {
                    anyhow::anyhow!(
                        "fills.cache.redis: the backend keeps no answer MAC key; \
                         the shared cache needs one"
                    )
                })?;
                Some(SharedCache::new(
                    o.clone(),
                    key,
                    shared_value_bound(options.body_limit),
                    registry,
                )?)
            }
            None => None,
        };
        Ok(Arc::new(HttpState {
            backend,
            clients: by_token,
            in_flight: Arc::new(Semaphore::new(options.max_in_flight)),
            cache: AnswerCache::new(
                options.cache_capacity,
                i64::try_from(options.key_ttl.as_nanos()).unwrap_or(i64::MAX),
            ),
            shared,
            metrics: HttpMetrics::new(registry)?,
            fault_rng: Mutex::new(
                options
                    .fault_seed
                    .map_or_else(SplitMix64::from_time, SplitMix64::new),
            ),
            started: Instant::now(),
            options,
        }))
    }

    /// The daemon's usual construction: the store as backend, clients and
    /// limits from the `[fills]` section.
    pub fn from_config(
        store: Store,
        cfg: &FillsConfig,
        registry: &Registry,
    ) -> anyhow::Result<Arc<Self>> {
        Self::new(
            Arc::new(store),
            &cfg.http.clients,
            HttpOptions::from_config(cfg)?,
            registry,
        )
    }

    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    fn now(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    fn fault_fires(&self) -> bool {
        let p = self.options.fault_429_after_commit;
        p > 0.0
            && self
                .fault_rng
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .next_f64()
                < p
    }

    /// K2: the client a request's bearer token names; a repeated
    /// `Authorization` header is refused (400) rather than guessed.
    fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<ClientConfig>, Refusal> {
        match bearer_token(headers) {
            Err(AuthorizationError::Repeated) => Err(Refusal::Repeated),
            Ok(token) => token
                .and_then(|t| self.clients.get(&token_digest(t)).cloned())
                .ok_or(Refusal::Unknown),
        }
    }
}

/// Why a request names no client (K2).
enum Refusal {
    /// No token, another scheme, or a token of no configured client: 401.
    Unknown,
    /// `Authorization` given more than once: 400.
    Repeated,
}

impl Refusal {
    fn response(self) -> Response {
        match self {
            Refusal::Unknown => unauthorized(),
            Refusal::Repeated => problem(
                StatusCode::BAD_REQUEST,
                "repeated-authorization",
                "the Authorization header is given more than once",
            ),
        }
    }
}

fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The fills API.
pub fn router(state: Arc<HttpState>) -> Router {
    let limit = state.options.body_limit;
    Router::new()
        .route("/v1/fills", post(post_fills))
        .route("/v1/positions", get(get_positions))
        .route("/openapi.json", get(openapi))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state)
}

/// Serves the fills API on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn count_requests(
    State(state): State<Arc<HttpState>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let route = match req.uri().path() {
        "/v1/fills" => "/v1/fills",
        "/v1/positions" => "/v1/positions",
        "/openapi.json" => "/openapi.json",
        _ => "other",
    };
    let resp = next.run(req).await;
    state
        .metrics
        .requests
        .with_label_values(&[route, resp.status().as_str()])
        .inc();
    resp
}

// ---------------------------------------------------------------- problems

/// An RFC 9457 problem: `type` is a URN naming the problem (not meant to be
/// dereferenced), or `about:blank` when the status says it all.
fn problem(status: StatusCode, kind: &str, detail: impl Into<String>) -> Response {
    let type_uri = if kind.is_empty() {
        "about:blank".to_owned()
    } else {
        format!("urn:tickgate:problem:{kind}")
    };
    let body = serde_json::json!({
        "type": type_uri,
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail.into(),
    });
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

fn with_retry_after(mut resp: Response, secs: u64) -> Response {
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp
}

fn unauthorized() -> Response {
    let mut resp = problem(
        StatusCode::UNAUTHORIZED,
        "",
        "a valid bearer token is required",
    );
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tickgate-fills\""),
    );
    resp
}

fn overloaded(state: &HttpState, reason: &str) -> Response {
    state.metrics.overloads.with_label_values(&[reason]).inc();
    with_retry_after(
        problem(
            StatusCode::TOO_MANY_REQUESTS,
            "overloaded",
            "too many batches in flight; retry with the same Idempotency-Key",
        ),
        state.options.overload_retry_after_secs,
    )
}

async fn not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "", "no such resource")
}

async fn method_not_allowed() -> Response {
    problem(
        StatusCode::METHOD_NOT_ALLOWED,
        "",
        "method not allowed on this resource",
    )
}

async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI_JSON,
    )
        .into_response()
}

// ---------------------------------------------------------------- POST /v1/fills

/// K1: 1 to 255 visible ASCII characters, exactly one header.
pub fn parse_idempotency_key(headers: &HeaderMap) -> Result<&str, &'static str> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(v) = values.next() else {
        return Err("the Idempotency-Key header is required");
    };
    if values.next().is_some() {
        return Err("exactly one Idempotency-Key header is allowed");
    }
    let b = v.as_bytes();
    if b.is_empty() || b.len() > 255 || !b.iter().all(|c| c.is_ascii_graphic()) {
        return Err("Idempotency-Key must be 1 to 255 visible ASCII characters");
    }
    // Visible ASCII is valid UTF-8.
    std::str::from_utf8(b).map_err(|_| "Idempotency-Key must be ASCII")
}

fn is_json_content_type(headers: &HeaderMap) -> bool {
    match headers.get(header::CONTENT_TYPE) {
        None => true,
        Some(v) => v.to_str().is_ok_and(|s| {
            let mime = s.split(';').next().unwrap_or("").trim();
            mime.eq_ignore_ascii_case("application/json")
        }),
    }
}

/// `Ok` when every `Content-Encoding` (all headers, each a comma list) is
/// `identity` or absent; else the first other coding, as sent.
fn identity_content_encoding(headers: &HeaderMap) -> Result<(), String> {
    for v in headers.get_all(header::CONTENT_ENCODING) {
        let Ok(s) = v.to_str() else {
            return Err(String::from_utf8_lossy(v.as_bytes()).into_owned());
        };
        for coding in s.split(',').map(str::trim) {
            if !coding.is_empty() && !coding.eq_ignore_ascii_case("identity") {
                return Err(coding.to_owned());
            }
        }
    }
    Ok(())
}

fn answer(status: u16, body: Bytes, replayed: bool) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if replayed {
        // K4: the stored answer, marked as such.
        h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    resp
}

async fn post_fills(State(state): State<Arc<HttpState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    // K2: the token, never the body, names the client.
    let client = match state.authenticate(&parts.headers) {
        Ok(c) => c,
        Err(refusal) => return refusal.response(),
    };
    let key = match parse_idempotency_key(&parts.headers) {
        Ok(k) => k.to_owned(),
        Err(why) => return problem(StatusCode::BAD_REQUEST, "invalid-idempotency-key", why), // K1
    };
    if !is_json_content_type(&parts.headers) {
        return problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "",
            "the body must be application/json",
        );
    }
    // The body is read as it is sent: nothing here decodes a compressed
    // body, so one labelled with any coding but identity is refused rather
    // than applied as if it were plain JSON.
    if let Err(coding) = identity_content_encoding(&parts.headers) {
        let mut resp = problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-content-encoding",
            format!("Content-Encoding {coding:?} is not supported; send the body uncompressed"),
        );
        resp.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        return resp;
    }
    let bytes = match Bytes::from_request(Request::from_parts(parts, body), &()).await {
        Ok(b) => b,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                format!("the body is over {} bytes", state.options.body_limit),
            )
        }
        Err(rejection) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "unreadable-body",
                rejection.body_text(),
            )
        }
    };
    let doc: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "malformed-json",
                format!("the body is not JSON: {e}"),
            )
        }
    };
    // K3: the hash of the canonical body (key order, whitespace do not count).
    let request_hash = super::hash::value_hash(&doc);
    let events = match doc {
        Value::Object(mut m) => match m.remove("events") {
            Some(Value::Array(a)) => a,
            _ => return not_a_batch(),
        },
        _ => return not_a_batch(),
    };
    if events.len() > state.options.max_batch {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch-too-large",
            format!(
                "{} events; at most {} per batch",
                events.len(),
                state.options.max_batch
            ),
        );
    }
    let now = state.now();

    // K4 from memory: a completed key's answer, without touching the store.
    if let Some(hit) = state.cache.get(&client.name, &key, now) {
        if hit.request_hash != request_hash {
            return key_reused(&state);
        }
        state.metrics.replays.with_label_values(&["cache"]).inc();
        return answer(hit.status, hit.body, true);
    }
    // K8: an answer another instance committed, from the shared cache. Only
    // a value of this client and key with this request's hash is used;
    // anything else (including a Redis outage) goes to the database.
    if let Some(shared) = &state.shared {
        if let Lookup::Hit(hit) = shared.get(&client.name, &key, &request_hash).await {
            state.metrics.replays.with_label_values(&["redis"]).inc();
            return answer(hit.status, hit.body, true);
        }
    }

    // K6: bounded work in flight; never an unbounded queue.
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        return overloaded(&state, "in_flight");
    };
    // The batch runs in a task of its own holding the permit, so a client
    // that hangs up neither frees its slot before the store is done nor
    // loses the cache entry of an answer that was committed anyway.
    let task = {
        let (state, client, key, hash) = (
            state.clone(),
            client.clone(),
            key.clone(),
            request_hash.clone(),
        );
        tokio::spawn(async move {
            let _permit = permit;
            // Before the transaction that may create the key row: an entry
            // timed from here never outlives the row (K7).
            let started = Instant::now();
            let outcome = state
                .backend
                .apply_batch(&client, &key, &hash, &events)
                .await;
            if let Ok(
                BatchOutcome::Fresh { status, body } | BatchOutcome::Replayed { status, body },
            ) = &outcome
            {
                remember(&state, &client.name, &key, &hash, *status, body);
            }
            // Shared with the other instances once committed, and only a
            // fresh answer: its key row's age is known (a replayed one's
            // is not, and its first attempt shared it already).
            if let (Some(shared), Ok(BatchOutcome::Fresh { status, body })) =
                (&state.shared, &outcome)
            {
                let ttl = state.options.key_ttl.saturating_sub(started.elapsed());
                let a = CachedAnswer {
                    request_hash: hash.clone(),
                    status: *status,
                    body: body.clone(),
                };
                shared.put(&client.name, &key, &a, ttl).await;
            }
            outcome
        })
    };
    let outcome = task
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("batch task failed: {e}")));
    match outcome {
        Ok(BatchOutcome::Fresh { status, body }) => {
            if state.fault_fires() {
                // Test fault: committed, yet the client hears "overloaded".
                tracing::debug!(client = %client.name, %key, "fault switch: 429 after commit");
                return overloaded(&state, "fault");
            }
            answer(status, body, false)
        }
        Ok(BatchOutcome::Replayed { status, body }) => {
            state.metrics.replays.with_label_values(&["store"]).inc();
            answer(status, body, true)
        }
        Ok(BatchOutcome::HashMismatch) => key_reused(&state),
        Ok(BatchOutcome::InProgressTimeout) => {
            state.metrics.conflicts.inc();
            with_retry_after(
                problem(
                    StatusCode::CONFLICT,
                    "request-in-progress",
                    "an earlier request with this Idempotency-Key is still running; retry later with the same key",
                ),
                state.options.conflict_retry_after_secs,
            )
        }
        Err(e) => {
            tracing::error!(client = %client.name, %key, error = %crate::util::errors::chain(&e), "fills batch failed");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "",
                "the batch could not be processed; retrying with the same Idempotency-Key is safe",
            )
        }
    }
}

fn remember(state: &HttpState, client: &str, key: &str, hash: &str, status: u16, body: &Bytes) {
    state.cache.insert(
        client,
        key,
        CachedAnswer {
            request_hash: hash.to_owned(),
            status,
            body: body.clone(),
        },
        state.now(),
    );
}

fn not_a_batch() -> Response {
    problem(
        StatusCode::BAD_REQUEST,
        "not-a-batch",
        "the body must be an object {\"events\": [...]}",
    )
}

fn key_reused(state: &HttpState) -> Response {
    state.metrics.key_reuse.inc();
    problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
        "this Idempotency-Key was already used with a different request body",
    )
}

// ---------------------------------------------------------------- the store

/// Start of the reason of an event rejected by the write scope.
pub const OUT_OF_SCOPE: &str = "account not writable by this client";

/// K2 write scope: a valid event for an account outside the client's
/// `accounts` becomes a rejection with its reason (a BUST too: its
/// account must be writable, and the store checks that it is the
/// account of the fill it reverses).
pub fn scoped(client: &ClientConfig, parsed: Parsed) -> Parsed {
    match parsed {
        Ok(ev) if !client.may_write(ev.account()) => Err(model::Invalid {
            kind: Some(ev.kind().as_str().to_owned()),
            event_id: Some(ev.event_id().to_owned()),
            reason: format!(
                "{OUT_OF_SCOPE}: client {:?} may write only {}, not {:?}",
                client.name,
                client.accounts_list(),
                ev.account()
            ),
        }),
        other => other,
    }
}

/// The fills store as the HTTP layer's backend: events are validated one by
/// one by the model (a bad one is rejected in the answer, K4 stores that
/// answer too), and the `200` body is the model's `batch_answer`, built
/// inside the store's transaction.
impl FillsBackend for Store {
    fn apply_batch<'a>(
        &'a self,
        client: &'a ClientConfig,
        key: &'a str,
        request_hash: &'a str,
        events: &'a [Value],
    ) -> BoxFuture<'a, anyhow::Result<BatchOutcome>> {
        Box::pin(async move {
            let parsed: Vec<Parsed> = events
                .iter()
                .map(|v| scoped(client, model::parse_value(v)))
                .collect();
            let out_of_scope = parsed
                .iter()
                .filter(|p| matches!(p, Err(i) if i.reason.starts_with(OUT_OF_SCOPE)))
                .count();
            let build: AnswerFn = Arc::new(model::batch_answer);
            let outcome = self
                .apply_http_batch(&client.name, key, request_hash, parsed, build)
                .await?;
            Ok(match outcome {
                HttpOutcome::Fresh { status, body, .. } => {
                    // Counted once, when the answer that rejects them is
                    // committed (a replay does not count them again).
                    self.metrics()
                        .out_of_scope
                        .with_label_values(&["http"])
                        .inc_by(out_of_scope as u64);
                    BatchOutcome::Fresh {
                        status,
                        body: Bytes::from(body),
                    }
                }
                HttpOutcome::Replayed { status, body } => BatchOutcome::Replayed {
                    status,
                    body: Bytes::from(body),
                },
                HttpOutcome::HashMismatch => BatchOutcome::HashMismatch,
                HttpOutcome::InProgressTimeout => BatchOutcome::InProgressTimeout,
            })
        })
    }

    fn positions<'a>(
        &'a self,
        account: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<PositionView>>> {
        Box::pin(async move {
            let rows = Store::positions(self, Some(&[account.to_owned()])).await?;
            Ok(rows
                .into_iter()
                .filter(|r| r.account == account)
                .map(|r| PositionView {
                    symbol: r.symbol,
                    qty: r.position.qty,
                    avg_price: r.position.avg_price,
                    realized_pnl: r.position.realized_pnl,
                })
                .collect())
        })
    }

    fn answer_mac_key(&self) -> Option<[u8; 32]> {
        Some(Store::answer_mac_key(self))
    }
}

// ---------------------------------------------------------------- GET /v1/positions

async fn get_positions(
    State(state): State<Arc<HttpState>>,
    headers: HeaderMap,
    query: axum::extract::RawQuery,
) -> Response {
    let client = match state.authenticate(&headers) {
        Ok(c) => c,
        Err(refusal) => return refusal.response(),
    };
    let account = query
        .0
        .as_deref()
        .and_then(|q| url_query_param(q, "account"));
    let Some(account) = account.filter(|a| !a.is_empty()) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "missing-account",
            "the account query parameter is required",
        );
    };
    if !client.may_see(&account) {
        return problem(
            StatusCode::FORBIDDEN,
            "",
            format!("client {} may not see account {account}", client.name),
        );
    }
    let Ok(_permit) = state.in_flight.clone().try_acquire_owned() else {
        return overloaded(&state, "in_flight");
    };
    match state.backend.positions(&account).await {
        Ok(rows) => {
            let positions: Vec<Value> = rows
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "account": account,
                        "symbol": p.symbol,
                        "qty": p.qty.to_string(),
                        "avg_price": p.avg_price.to_string(),
                        "realized_pnl": p.realized_pnl.to_string(),
                    })
                })
                .collect();
            let body = serde_json::json!({"account": account, "positions": positions});
            answer(200, Bytes::from(body.to_string()), false)
        }
        Err(e) => {
            tracing::error!(%account, error = %crate::util::errors::chain(&e), "positions query failed");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "",
                "positions could not be read",
            )
        }
    }
}

/// The first value of `name` in a query string, percent-decoded.
fn url_query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k)? == name)
            .then(|| percent_decode(v))
            .flatten()
    })
}

/// `application/x-www-form-urlencoded` decoding; `None` on bad escapes or
/// invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn idempotency_key_rules() {
        let ok = |v: &[u8]| parse_idempotency_key(&headers(&[("idempotency-key", v)])).is_ok();
        assert!(ok(b"a"));
        assert!(ok(b"push-0123abcdef"));
        assert!(ok("~".repeat(255).as_bytes()));
        assert!(!ok("a".repeat(256).as_bytes()));
        assert!(!ok(b""));
        assert!(!ok(b"has space"));
        assert!(!ok(b"tab\there"));
        assert!(!ok(&[0xC3, 0xA9]));
        assert!(parse_idempotency_key(&HeaderMap::new()).is_err());
        let two = headers(&[("idempotency-key", b"a"), ("idempotency-key", b"b")]);
        assert!(parse_idempotency_key(&two).is_err());
    }

    #[test]
    fn query_parameters() {
        assert_eq!(
            url_query_param("account=ACC-7", "account").as_deref(),
            Some("ACC-7")
        );
        assert_eq!(
            url_query_param("x=1&account=A%20B+C", "account").as_deref(),
            Some("A B C")
        );
        assert_eq!(url_query_param("accounts=1", "account"), None);
        assert_eq!(url_query_param("account=%zz", "account"), None);
        assert_eq!(url_query_param("account", "account").as_deref(), Some(""));
    }

    #[test]
    fn content_encodings() {
        assert!(identity_content_encoding(&HeaderMap::new()).is_ok());
        assert!(identity_content_encoding(&headers(&[("content-encoding", b"Identity")])).is_ok());
        assert_eq!(
            identity_content_encoding(&headers(&[("content-encoding", b"gzip")])),
            Err("gzip".to_owned())
        );
        let two = headers(&[
            ("content-encoding", b"identity"),
            ("content-encoding", b"identity, br"),
        ]);
        assert_eq!(identity_content_encoding(&two), Err("br".to_owned()));
    }

    #[test]
    fn content_types() {
        assert!(is_json_content_type(&HeaderMap::new()));
        assert!(is_json_content_type(&headers(&[(
            "content-type",
            b"application/json; charset=utf-8"
        )])));
        assert!(!is_json_content_type(&headers(&[(
            "content-type",
            b"text/plain"
        )])));
    }

    #[test]
    fn options_from_config() {
        let cfg: FillsConfig = toml::from_str(
            "max_batch = 7\nmax_in_flight = 3\nkey_ttl = \"1h\"\n[http]\nmax_body_bytes = 1234\n",
        )
        .unwrap();
        let o = HttpOptions::from_config(&cfg).unwrap();
        assert_eq!((o.body_limit, o.max_batch, o.max_in_flight), (1234, 7, 3));
        assert_eq!(o.key_ttl, Duration::from_secs(3600));
        let bad = HttpOptions {
            fault_429_after_commit: 1.5,
            ..HttpOptions::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn openapi_document_is_valid_json_3_1() {
        let v: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        for path in ["/v1/fills", "/v1/positions", "/openapi.json"] {
            assert!(v["paths"][path].is_object(), "{path}");
        }
        let account = &v["components"]["schemas"]["Event"]["properties"]["account"];
        assert!(account["description"]
            .as_str()
            .is_some_and(|d| d.contains(OUT_OF_SCOPE)));
        for status in ["400", "401", "409", "413", "422", "429"] {
            assert!(
                v["paths"]["/v1/fills"]["post"]["responses"][status].is_object(),
                "{status}"
            );
        }
    }
}
