//! Limits of the daemon's HTTP endpoints (the fills API and `/metrics`),
//! so that slow or greedy clients cannot hold the daemon: what nginx and
//! HAProxy do for every listener.
//!
//! - header read timeout: a request's head (and the wait for the next
//!   request on a kept-alive connection) must arrive within it, else the
//!   connection is closed (hyper's own timer);
//! - body read timeout: the body must arrive within it, else `408`;
//! - idle timeout: a connection on which no byte moves either way for this
//!   long is closed, whatever it is waiting for;
//! - a connection cap, with the slowest heads let go first: when every
//!   slot is taken, the connection that has waited longest for a request
//!   head (a slow or silent client, or an idle keep-alive one) is closed to
//!   make room; only when every connection is inside a request is one more
//!   answered `503` with `Retry-After` and closed at once, so the refusal is
//!   clear and costs no task. A flood of connections that never finish
//!   their heads therefore evicts itself, not the clients that send whole
//!   requests (docs/operations.md "HTTP limits");
//! - a connection cap per client: per bearer token once a connection has
//!   made an authenticated request, per peer uid on a Unix socket (the
//!   gate's rule), so one client cannot hold every slot;
//! - a request rate per client token (a token bucket per bearer token;
//!   requests without a known token share one bucket): over it, `429` with
//!   `Retry-After` (K6);
//! - the cap is kept below the open-file limit, with room left for the
//!   gate socket's connections and the feeds' sockets
//!   ([`cap_below_nofile`]): the HTTP side cannot take the gate's
//!   descriptors.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;

/// The limits of one HTTP listener.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Connections one client may hold: per bearer token once
    /// authenticated (TCP), per peer uid (Unix socket).
    pub max_connections_per_client: usize,
    /// Requests per second per client token; 0 = no rate limit.
    pub rate_per_sec: u32,
    /// Requests a client may make at once above the rate.
    pub rate_burst: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 256,
            max_connections_per_client: default_per_client(256),
            rate_per_sec: 200,
            rate_burst: 400,
        }
    }
}

impl HttpLimits {
    /// `/metrics`: a scraper or two, no tokens.
    pub fn metrics_default() -> Self {
        HttpLimits {
            max_connections: 32,
            max_connections_per_client: default_per_client(32),
            rate_per_sec: 0,
            ..HttpLimits::default()
        }
    }
}

/// The default per-client cap for a connection cap: three quarters of it
/// (as the gate's `max_connections_per_uid`), so another client always
/// finds room.
pub fn default_per_client(max_connections: usize) -> usize {
    (max_connections - max_connections / 4).max(1)
}

/// Descriptors kept for the rest of the daemon besides the gate's
/// connections: feed sockets, the store, the runtime, logs.
pub const FD_RESERVE: u64 = 128;

/// The soft open-file limit raised to the hard one (the daemon needs a
/// descriptor per gate and HTTP connection); returns the soft limit now in
/// force.
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
    }
    r.rlim_cur
}

/// The HTTP connection caps lowered, when needed, so that `nofile` keeps
/// room for `gate_connections` gate connections and [`FD_RESERVE`]: the
/// HTTP side runs out of connections before the gate runs out of
/// descriptors. Caps are shared in proportion; each keeps at least 1.
pub fn cap_below_nofile(nofile: u64, gate_connections: usize, caps: &mut [&mut usize]) {
    let room = nofile.saturating_sub(gate_connections as u64 + FD_RESERVE);
    let asked: u64 = caps.iter().map(|c| **c as u64).sum();
    if asked <= room {
        return;
    }
    for c in caps.iter_mut() {
        let share = (**c as u64 * room / asked.max(1)).max(1) as usize;
        tracing::warn!(
            asked = **c,
            now = share,
            nofile,
            gate_connections,
            "HTTP connection cap lowered to keep file descriptors for the gate socket"
        );
        **c = share;
    }
}

/// Counters of the limits at work, one listener's
/// (`tickgate_http_limited_total{endpoint,reason}`).
#[derive(Debug, Clone)]
pub struct LimitStats {
    pub refused_connections: prometheus::IntCounter,
    /// Connections closed while waiting for a request head, to make room
    /// for a new one at the cap.
    pub evicted_heads: prometheus::IntCounter,
    /// Connections refused because their client (token or uid) holds
    /// `max_connections_per_client`.
    pub refused_client: prometheus::IntCounter,
    pub idle_closed: prometheus::IntCounter,
    pub body_timeouts: prometheus::IntCounter,
    pub rate_limited: prometheus::IntCounter,
}

impl LimitStats {
    /// The counters of every listener, registered once in `registry`.
    pub fn family(
        registry: &prometheus::Registry,
    ) -> prometheus::Result<prometheus::IntCounterVec> {
        let v = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "tickgate_http_limited_total",
                "HTTP connections and requests stopped by a limit, by endpoint (fills, fills_unix, metrics) and reason (connections, slow_head, client_connections, idle, body_timeout, rate).",
            ),
            &["endpoint", "reason"],
        )?;
        registry.register(Box::new(v.clone()))?;
        Ok(v)
    }

    /// One listener's counters out of [`LimitStats::family`].
    pub fn of(family: &prometheus::IntCounterVec, endpoint: &str) -> LimitStats {
        let c = |reason: &str| family.with_label_values(&[endpoint, reason]);
        LimitStats {
            refused_connections: c("connections"),
            evicted_heads: c("slow_head"),
            refused_client: c("client_connections"),
            idle_closed: c("idle"),
            body_timeouts: c("body_timeout"),
            rate_limited: c("rate"),
        }
    }

    /// Counters registered nowhere (tests).
    pub fn unregistered() -> LimitStats {
        let family = prometheus::IntCounterVec::new(
            prometheus::Opts::new("tickgate_http_limited_total", "-"),
            &["endpoint", "reason"],
        )
        .expect("valid metric");
        LimitStats::of(&family, "test")
    }
}

/// Tokens left and when they were counted.
type Bucket = (f64, Instant);

/// Why a request's `Authorization` cannot name a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationError {
    /// The header is given more than once: which one counts would be a
    /// guess, so the request is refused (400).
    Repeated,
}

/// The bearer token of a request, the one parser for authentication and
/// rate limiting: the `Authorization` header's scheme compared without
/// case (RFC 9110), the token trimmed. `Ok(None)`: no header, another
/// scheme, or not text.
pub fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, AuthorizationError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AuthorizationError::Repeated);
    }
    let Ok(value) = value.to_str() else {
        return Ok(None);
    };
    Ok(value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty()))
}

/// Token buckets per client token (by SHA-256), one shared by requests
/// without a known token.
struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<Option<[u8; 32]>, Bucket>>,
}

impl RateLimiter {
    fn new(limits: &HttpLimits) -> Option<RateLimiter> {
        if limits.rate_per_sec == 0 {
            return None;
        }
        Some(RateLimiter {
            rate: f64::from(limits.rate_per_sec),
            burst: f64::from(limits.rate_burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// `Ok` to go on, or the seconds until the client's next request;
    /// `token`: the request's known token ([`known_token`]), `None` for
    /// the shared bucket.
    fn take(&self, token: Option<[u8; 32]>) -> Result<(), u64> {
        let now = Instant::now();
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (level, at) = b.entry(token).or_insert((self.burst, now));
        *level = (*level + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *level) / self.rate).ceil().max(1.0) as u64)
        }
    }
}

fn problem(status: StatusCode, kind: &str, detail: &str) -> Response {
    let body = serde_json::json!({
        "type": format!("urn:tickgate:problem:{kind}"),
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

/// The router with the per-request limits (rate, body read timeout) in
/// front of it. Bodies are read here, at most `max_body` bytes (413 above,
/// as the handlers answer).
pub fn limit_requests(
    router: Router,
    limits: &HttpLimits,
    tokens: &[String],
    max_body: usize,
    stats: LimitStats,
) -> Router {
    let limiter = RateLimiter::new(limits).map(Arc::new);
    let known: Arc<[[u8; 32]]> = tokens
        .iter()
        .map(|t| -> [u8; 32] { Sha256::digest(t).into() })
        .collect();
    let body_timeout = limits.body_timeout;
    router.layer(axum::middleware::from_fn(
        move |req: Request, next: axum::middleware::Next| {
            let (limiter, stats, known) = (limiter.clone(), stats.clone(), known.clone());
            async move {
                let token = known_token(&req, &known);
                if charge_request(&req, token).is_err() {
                    stats.refused_client.inc();
                    let mut resp = problem(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "too-many-connections-for-client",
                        "this client token holds its share of connections (max_connections_per_client); retry on one of them or later",
                    );
                    resp.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(1u32));
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    return resp;
                }
                if let Some(l) = &limiter {
                    if let Err(secs) = l.take(token) {
                        stats.rate_limited.inc();
                        let mut resp = problem(
                            StatusCode::TOO_MANY_REQUESTS,
                            "rate-limited",
                            "too many requests from this client; retry after Retry-After seconds",
                        );
                        resp.headers_mut()
                            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                        return resp;
                    }
                }
                // The body is read here, within its timeout (the handler
                // then reads it from memory); the body limit stays the
                // handler's (413).
                let (parts, body) = req.into_parts();
                let bytes = match tokio::time::timeout(
                    body_timeout,
                    axum::body::to_bytes(body, max_body.saturating_add(1)),
                )
                .await
                {
                    Ok(Ok(b)) => b,
                    Ok(Err(_)) => {
                        return problem(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "body-too-large",
                            &format!("the body is over {max_body} bytes (or could not be read)"),
                        )
                    }
                    Err(_) => {
                        stats.body_timeouts.inc();
                        let mut resp = problem(
                            StatusCode::REQUEST_TIMEOUT,
                            "body-timeout",
                            "the request body did not arrive in time",
                        );
                        resp.headers_mut()
                            .insert(header::CONNECTION, HeaderValue::from_static("close"));
                        return resp;
                    }
                };
                next.run(Request::from_parts(parts, Body::from(bytes)))
                    .await
            }
        },
    ))
}

/// Where a connection comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    /// A Unix-socket peer: its uid (SO_PEERCRED; `u32::MAX` when the
    /// kernel does not say).
    Unix {
        uid: u32,
    },
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(a) => write!(f, "{a}"),
            Peer::Unix { uid } => write!(f, "uid {uid}"),
        }
    }
}

/// A listener [`serve`] accepts connections from: TCP, or a Unix socket.
pub trait Listener: Send + 'static {
    type Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    fn accept(&mut self) -> impl Future<Output = std::io::Result<(Self::Io, Peer)>> + Send;
}

impl Listener for TcpListener {
    type Io = TcpStream;
    async fn accept(&mut self) -> std::io::Result<(TcpStream, Peer)> {
        let (stream, peer) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, Peer::Tcp(peer)))
    }
}

impl Listener for UnixListener {
    type Io = UnixStream;
    async fn accept(&mut self) -> std::io::Result<(UnixStream, Peer)> {
        let (stream, _) = UnixListener::accept(self).await?;
        let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
        Ok((stream, Peer::Unix { uid }))
    }
}

/// Whom a connection's slots are charged to, for
/// `max_connections_per_client`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Client {
    /// A configured bearer token (by SHA-256), once a request carried it.
    Token([u8; 32]),
    /// A Unix-socket peer's uid, from the start.
    Uid(u32),
}

/// One open connection as the table sees it.
struct Slot {
    /// Since when it has been waiting for a request head (`None`: inside a
    /// request, or already told to go).
    head_since: Option<Instant>,
    client: Option<Client>,
    evict: Arc<tokio::sync::Notify>,
}

/// The open connections of one listener: who waits for a head the longest
/// (to evict under pressure), and how many each client holds.
struct Table {
    per_client: usize,
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next_id: u64,
    open: HashMap<u64, Slot>,
    clients: HashMap<Client, usize>,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a connection charged to `client` (if any), or `None` when
    /// that client holds its share already.
    fn open(self: &Arc<Self>, client: Option<Client>) -> Option<Arc<Conn>> {
        let mut t = self.lock();
        if let Some(c) = client {
            let n = t.clients.entry(c).or_insert(0);
            if *n >= self.per_client {
                return None;
            }
            *n += 1;
        }
        let id = t.next_id;
        t.next_id += 1;
        let evict = Arc::new(tokio::sync::Notify::new());
        t.open.insert(
            id,
            Slot {
                // Evictable once it has its slot (`serve` says so).
                head_since: None,
                client,
                evict: evict.clone(),
            },
        );
        Some(Arc::new(Conn {
            id,
            table: self.clone(),
            evict,
        }))
    }

    /// Tells the connection that has waited longest for a request head to
    /// go; false when every connection is inside a request.
    fn evict_slowest_head(&self) -> bool {
        let mut t = self.lock();
        let Some(slot) = t
            .open
            .values_mut()
            .filter(|s| s.head_since.is_some())
            .min_by_key(|s| s.head_since)
        else {
            return false;
        };
        slot.head_since = None;
        slot.evict.notify_one();
        true
    }
}

/// A connection's handle on its listener's table (a request extension, so
/// that the request limits can charge it to its client); dropped when the
/// connection ends.
pub struct Conn {
    id: u64,
    table: Arc<Table>,
    evict: Arc<tokio::sync::Notify>,
}

impl Conn {
    /// Whether the connection now waits for a request head (evictable).
    fn reading_head(&self, yes: bool) {
        let mut t = self.table.lock();
        if let Some(s) = t.open.get_mut(&self.id) {
            s.head_since = yes.then(Instant::now);
        }
    }

    /// Charges the connection to `token`'s client; false when that client
    /// holds its share already. A Unix-socket connection stays charged to
    /// its uid.
    fn charge_token(&self, token: [u8; 32]) -> bool {
        let per_client = self.table.per_client;
        let mut guard = self.table.lock();
        let t = &mut *guard;
        let Some(slot) = t.open.get_mut(&self.id) else {
            return true;
        };
        let now = Client::Token(token);
        match slot.client {
            Some(Client::Uid(_)) => return true,
            Some(c) if c == now => return true,
            _ => {}
        }
        let n = t.clients.entry(now).or_insert(0);
        if *n >= per_client {
            return false;
        }
        *n += 1;
        if let Some(old) = slot.client.replace(now) {
            release(&mut t.clients, old);
        }
        true
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut guard = self.table.lock();
        let t = &mut *guard;
        if let Some(slot) = t.open.remove(&self.id) {
            if let Some(c) = slot.client {
                release(&mut t.clients, c);
            }
        }
    }
}

fn release(clients: &mut HashMap<Client, usize>, c: Client) {
    if let Some(n) = clients.get_mut(&c) {
        *n -= 1;
        if *n == 0 {
            clients.remove(&c);
        }
    }
}

/// The request's bearer token (by SHA-256) when it is one of `known`: the
/// client the per-client cap and the rate limit charge. The same parser as
/// authentication, so a client is charged as itself however it spells the
/// scheme.
fn known_token(req: &Request, known: &[[u8; 32]]) -> Option<[u8; 32]> {
    bearer_token(req.headers())
        .ok()
        .flatten()
        .map(|t| -> [u8; 32] { Sha256::digest(t).into() })
        .filter(|h| known.contains(h))
}

/// The per-client connection cap, applied to each request (in
/// [`limit_requests`]): a request with a configured token charges its
/// connection to that token; `Err` when the token holds its share.
fn charge_request(req: &Request, token: Option<[u8; 32]>) -> Result<(), ()> {
    let (Some(conn), Some(token)) = (req.extensions().get::<Arc<Conn>>(), token) else {
        return Ok(());
    };
    if conn.charge_token(token) {
        Ok(())
    } else {
        Err(())
    }
}

/// Serves `router` on `listener` with the connection limits until
/// `shutdown` completes; connections in flight then finish their request.
pub async fn serve<L: Listener>(
    mut listener: L,
    router: Router,
    limits: HttpLimits,
    stats: LimitStats,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let table = Arc::new(Table {
        per_client: limits.max_connections_per_client.max(1),
        inner: Mutex::new(TableInner::default()),
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors or memory: pause, do not spin.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let client = match peer {
            Peer::Unix { uid } => Some(Client::Uid(uid)),
            Peer::Tcp(_) => None,
        };
        let Some(conn) = table.open(client) else {
            stats.refused_client.inc();
            tokio::spawn(refuse(stream, Refusal::Client));
            continue;
        };
        // At the cap, the connection that has waited longest for a head
        // makes room. Its slot is awaited here, not in the new connection's
        // task: a slot freed while nobody waits for it would go to the next
        // connection accepted, and this one would wait for nothing.
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) if table.evict_slowest_head() => {
                stats.evicted_heads.inc();
                // The evicted connection's task lets its slot go when it
                // next runs: on a loaded host that can take a while.
                match tokio::time::timeout(limits.header_timeout, slots.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(p)) => p,
                    _ => {
                        stats.refused_connections.inc();
                        drop(conn);
                        tokio::spawn(refuse(stream, Refusal::Full));
                        continue;
                    }
                }
            }
            Err(_) => {
                stats.refused_connections.inc();
                drop(conn);
                tokio::spawn(refuse(stream, Refusal::Full));
                continue;
            }
        };
        // Evictable from now, in the order of acceptance (not of when its
        // task first runs).
        conn.reading_head(true);
        let (router, stats, mut stop) = (router.clone(), stats.clone(), stop_rx.clone());
        let limits = limits.clone();
        tokio::spawn(async move {
            let _permit = permit;
            serve_connection(stream, peer, conn, router, &limits, &stats, &mut stop).await;
        });
    }
    let _ = stop_tx.send(true);
    // Let connections in flight finish (bounded by their own timeouts).
    let all = limits.max_connections.max(1) as u32;
    let _ = tokio::time::timeout(Duration::from_secs(10), slots.acquire_many(all)).await;
    Ok(())
}

/// Why a connection is refused at once.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// Every slot is inside a request.
    Full,
    /// The connection's client (uid) holds its share.
    Client,
}

/// A short, complete answer and the connection closed.
async fn refuse<S: tokio::io::AsyncWrite + Unpin>(mut stream: S, why: Refusal) {
    let (kind, detail) = match why {
        Refusal::Full => ("too-many-connections", "too many connections; retry later"),
        Refusal::Client => (
            "too-many-connections-for-client",
            "this client holds its share of connections (max_connections_per_client); retry later",
        ),
    };
    let body = format!(
        "{{\"type\":\"urn:tickgate:problem:{kind}\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"{detail}\"}}"
    );
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(head.as_bytes())).await;
    let _ = stream.shutdown().await;
}

/// Bytes moved on a connection, in either direction (for the idle timer).
struct Activity<S> {
    io: S,
    moved: Arc<AtomicU64>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Activity<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.moved.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Activity<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &r {
            self.moved.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The router as hyper calls it, with the connection's table entry kept
/// up to date: inside a request it cannot be evicted; once the answer is
/// ready it waits for the next head again. The entry rides along as a
/// request extension for the per-client cap.
struct Tracked<S> {
    inner: S,
    conn: Arc<Conn>,
}

impl<S> hyper::service::Service<Request<hyper::body::Incoming>> for Tracked<S>
where
    S: hyper::service::Service<Request<hyper::body::Incoming>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, mut req: Request<hyper::body::Incoming>) -> Self::Future {
        self.conn.reading_head(false);
        req.extensions_mut().insert(self.conn.clone());
        let answer = self.inner.call(req);
        let conn = self.conn.clone();
        Box::pin(async move {
            let r = answer.await;
            conn.reading_head(true);
            r
        })
    }
}

async fn serve_connection<S>(
    stream: S,
    peer: Peer,
    conn: Arc<Conn>,
    router: Router,
    limits: &HttpLimits,
    stats: &LimitStats,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let moved = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(Activity {
        io: stream,
        moved: moved.clone(),
    });
    let evict = conn.evict.clone();
    let service = Tracked {
        inner: TowerToHyperService::new(router),
        conn,
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let idle = limits.idle_timeout;
    let mut last = (0u64, Instant::now());
    let mut tick = tokio::time::interval(
        idle.min(Duration::from_secs(1))
            .max(Duration::from_millis(10)),
    );
    let mut stopping = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended");
                }
                return;
            }
            _ = evict.notified() => {
                tracing::debug!(%peer, "HTTP connection still waiting for a request head closed to make room for a new one");
                return;
            }
            _ = tick.tick() => {
                let now = moved.load(Ordering::Relaxed);
                if now != last.0 {
                    last = (now, Instant::now());
                } else if last.1.elapsed() >= idle {
                    stats.idle_closed.inc();
                    tracing::debug!(%peer, "HTTP connection idle too long; closed");
                    return;
                }
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_stay_below_the_descriptor_limit() {
        let (mut a, mut b) = (1000usize, 1000usize);
        cap_below_nofile(4096, 1024, &mut [&mut a, &mut b]);
        assert_eq!((a, b), (1000, 1000));
        cap_below_nofile(2048, 1024, &mut [&mut a, &mut b]);
        assert!(a + b <= 2048 - 1024 - FD_RESERVE as usize, "{a} {b}");
        assert!(a >= 1 && b >= 1);
    }
}
