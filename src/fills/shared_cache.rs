//! The shared answer cache (fills.md K8): committed HTTP
//! answers in Redis, so that a retry landing on another tickgate instance
//! is answered without a database read.
//!
//! The database stays the only truth. Redis only ever receives an answer
//! that was committed; every Redis error, timeout, miss or eviction is a
//! database read, never a different answer; a value is used only if it
//! decodes, names the same client and key, and carries the same request
//! hash as the request (K2, K3). A value with another hash is not trusted
//! to say 422: the request goes to the database, which decides. Redis is
//! never a lock: the `(client, key)` row is (K5; see docs/fills-notes.md).
//!
//! Entries expire with their key (K7): `SET … PX` with the key's retention,
//! counted from before the transaction that created the row started, so a
//! Redis entry never outlives the row it copies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus::{IntCounterVec, Opts, Registry};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, OnceCell};

use super::cache::CachedAnswer;

/// How to reach the shared cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedCacheOptions {
    /// `redis://host:port/db` (or `rediss://` where the client supports it).
    pub url: String,
    /// Prefix of every Redis key tickgate writes.
    pub prefix: String,
    /// Bound on every Redis operation; past it the request goes to the
    /// database.
    pub timeout: Duration,
}

pub const DEFAULT_PREFIX: &str = "tickgate:fills:answer:";

/// One Redis connection (multiplexed, reconnecting), created on first use.
pub struct SharedCache {
    opts: SharedCacheOptions,
    conn: OnceCell<redis::aio::ConnectionManager>,
    /// After a failed connect, when the next attempt may be made: a Redis
    /// that is down costs one refused connect per second, not one per
    /// request.
    retry_at: Mutex<Option<Instant>>,
    metrics: IntCounterVec,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A committed answer of this client and key with the request's hash.
    Hit(CachedAnswer),
    /// Nothing usable (absent, undecodable, another client or key, another
    /// hash, or Redis unavailable): ask the database.
    Miss,
}

#[derive(Deserialize)]
struct Stored {
    v: u32,
    client: String,
    key: String,
    request_hash: String,
    status: u16,
    body: String,
}

impl SharedCache {
    pub fn new(opts: SharedCacheOptions, registry: &Registry) -> anyhow::Result<SharedCache> {
        anyhow::ensure!(
            opts.url.starts_with("redis://")
                || opts.url.starts_with("rediss://")
                || opts.url.starts_with("unix://"),
            "fills.cache.redis: {:?} is not a redis:// URL",
            opts.url
        );
        // Parse now so a bad URL fails at start, not on the first request.
        redis::Client::open(opts.url.as_str()).map_err(|e| {
            anyhow::anyhow!("fills.cache.redis: {:?} is not a Redis URL: {e}", opts.url)
        })?;
        let metrics = IntCounterVec::new(
            Opts::new(
                "tickgate_fills_http_shared_cache_total",
                "Shared (Redis) answer cache operations by op and result",
            ),
            &["op", "result"],
        )?;
        registry.register(Box::new(metrics.clone()))?;
        Ok(SharedCache {
            opts,
            conn: OnceCell::new(),
            retry_at: Mutex::new(None),
            metrics,
        })
    }

    fn count(&self, op: &str, result: &str) {
        self.metrics.with_label_values(&[op, result]).inc();
    }

    /// The Redis key of `(client, key)`: a digest, so any client and key
    /// make a valid, bounded Redis key; the value names both in full.
    pub fn redis_key(&self, client: &str, key: &str) -> String {
        let mut h = Sha256::new();
        h.update(client.as_bytes());
        h.update([0u8]);
        h.update(key.as_bytes());
        format!("{}{}", self.opts.prefix, hex::encode(h.finalize()))
    }

    async fn connection(&self) -> Option<redis::aio::ConnectionManager> {
        if let Some(c) = self.conn.get() {
            return Some(c.clone());
        }
        let mut retry_at = self.retry_at.lock().await;
        if let Some(c) = self.conn.get() {
            return Some(c.clone());
        }
        if retry_at.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let cfg = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.opts.timeout))
            .set_response_timeout(Some(self.opts.timeout))
            .set_number_of_retries(1);
        let made = async {
            let client = redis::Client::open(self.opts.url.as_str())?;
            redis::aio::ConnectionManager::new_with_config(client, cfg).await
        };
        match tokio::time::timeout(self.opts.timeout, made).await {
            Ok(Ok(c)) => {
                *retry_at = None;
                let _ = self.conn.set(c.clone());
                tracing::info!(url = %self.opts.url, "fills: shared answer cache connected");
                Some(c)
            }
            Ok(Err(e)) => {
                *retry_at = Some(Instant::now() + Duration::from_secs(1));
                self.count("connect", "error");
                tracing::warn!(url = %self.opts.url, error = %e, "fills: shared answer cache unavailable; answers come from the database");
                None
            }
            Err(_) => {
                *retry_at = Some(Instant::now() + Duration::from_secs(1));
                self.count("connect", "error");
                tracing::warn!(url = %self.opts.url, "fills: shared answer cache connect timed out; answers come from the database");
                None
            }
        }
    }

    /// The committed answer of `(client, key)` if Redis has one with this
    /// request hash.
    pub async fn get(&self, client: &str, key: &str, request_hash: &str) -> Lookup {
        let Some(mut conn) = self.connection().await else {
            self.count("get", "unavailable");
            return Lookup::Miss;
        };
        let rkey = self.redis_key(client, key);
        let got = tokio::time::timeout(
            self.opts.timeout,
            redis::cmd("GET")
                .arg(&rkey)
                .query_async::<Option<Vec<u8>>>(&mut conn),
        )
        .await;
        let raw = match got {
            Ok(Ok(Some(raw))) => raw,
            Ok(Ok(None)) => {
                self.count("get", "miss");
                return Lookup::Miss;
            }
            Ok(Err(e)) => {
                self.count("get", "error");
                tracing::debug!(error = %e, "fills: shared cache GET failed");
                return Lookup::Miss;
            }
            Err(_) => {
                self.count("get", "error");
                tracing::debug!("fills: shared cache GET timed out");
                return Lookup::Miss;
            }
        };
        match decode(&raw, client, key) {
            Some(a) if a.request_hash == request_hash => {
                self.count("get", "hit");
                Lookup::Hit(a)
            }
            Some(_) => {
                // K3 is decided by the database, not by a cached value.
                self.count("get", "other_hash");
                Lookup::Miss
            }
            None => {
                self.count("get", "invalid");
                tracing::warn!(redis_key = %rkey, "fills: shared cache value is not a committed answer of this client and key; ignored");
                Lookup::Miss
            }
        }
    }

    /// Stores a committed answer for at most `ttl` (the rest of its key's
    /// retention). Errors are counted and logged, never returned: the
    /// answer is already committed in the database.
    pub async fn put(&self, client: &str, key: &str, answer: &CachedAnswer, ttl: Duration) {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return;
        }
        let Some(mut conn) = self.connection().await else {
            self.count("set", "unavailable");
            return;
        };
        let value = encode(client, key, answer);
        let rkey = self.redis_key(client, key);
        let done = tokio::time::timeout(
            self.opts.timeout,
            redis::cmd("SET")
                .arg(&rkey)
                .arg(value)
                .arg("PX")
                .arg(ms)
                .query_async::<()>(&mut conn),
        )
        .await;
        match done {
            Ok(Ok(())) => self.count("set", "ok"),
            Ok(Err(e)) => {
                self.count("set", "error");
                tracing::debug!(error = %e, "fills: shared cache SET failed");
            }
            Err(_) => {
                self.count("set", "error");
                tracing::debug!("fills: shared cache SET timed out");
            }
        }
    }
}

/// The stored form: JSON naming client, key, hash, status and the body
/// (hex), version 1.
pub fn encode(client: &str, key: &str, a: &CachedAnswer) -> Vec<u8> {
    let v = serde_json::json!({
        "v": 1,
        "client": client,
        "key": key,
        "request_hash": a.request_hash,
        "status": a.status,
        "body": hex::encode(&a.body),
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The answer in `raw` if it is a well-formed version-1 value of exactly
/// this client and key.
pub fn decode(raw: &[u8], client: &str, key: &str) -> Option<CachedAnswer> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    let s: Stored = serde_json::from_value(v).ok()?;
    let hash_ok =
        s.request_hash.len() == 64 && s.request_hash.bytes().all(|b| b.is_ascii_hexdigit());
    if s.v != 1
        || s.client != client
        || s.key != key
        || !hash_ok
        || !(100..=599).contains(&s.status)
    {
        return None;
    }
    let body = hex::decode(&s.body).ok()?;
    Some(CachedAnswer {
        request_hash: s.request_hash,
        status: s.status,
        body: Bytes::from(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> CachedAnswer {
        CachedAnswer {
            request_hash: "ab".repeat(32),
            status: 200,
            body: Bytes::from_static(b"{\"totals\":{}}"),
        }
    }

    #[test]
    fn values_name_their_client_and_key() {
        let raw = encode("alice", "k1", &answer());
        assert_eq!(decode(&raw, "alice", "k1"), Some(answer()));
        assert_eq!(decode(&raw, "bob", "k1"), None);
        assert_eq!(decode(&raw, "alice", "k2"), None);
        assert_eq!(decode(b"garbage", "alice", "k1"), None);
        let mut v: Value = serde_json::from_slice(&raw).unwrap();
        v["request_hash"] = "short".into();
        assert_eq!(
            decode(&serde_json::to_vec(&v).unwrap(), "alice", "k1"),
            None
        );
        let mut v: Value = serde_json::from_slice(&raw).unwrap();
        v["body"] = "zz".into();
        assert_eq!(
            decode(&serde_json::to_vec(&v).unwrap(), "alice", "k1"),
            None
        );
    }

    #[test]
    fn keys_are_digests_under_the_prefix() {
        let c = SharedCache::new(
            SharedCacheOptions {
                url: "redis://127.0.0.1:1/".into(),
                prefix: "p:".into(),
                timeout: Duration::from_millis(10),
            },
            &Registry::new(),
        )
        .unwrap();
        let k = c.redis_key("alice", "k1");
        assert!(k.starts_with("p:") && k.len() == 2 + 64);
        assert_ne!(k, c.redis_key("alic", "ek1"));
        assert!(SharedCache::new(
            SharedCacheOptions {
                url: "http://x".into(),
                prefix: "p:".into(),
                timeout: Duration::from_millis(10),
            },
            &Registry::new(),
        )
        .is_err());
    }
}
