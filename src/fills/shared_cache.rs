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
//! Redis is not trusted either: whoever can write it can compute a request
//! hash. Every value carries an HMAC-SHA256 over the request identity
//! (client, key, request hash) and the answer (status, body), keyed with a
//! random key kept in the database (`answer_mac_key`, created once by the
//! schema migration), so every instance shares it and a Redis writer does
//! not have it. A value whose MAC does not verify is ignored (counted,
//! logged at warning), and so is one whose status is not one tickgate
//! stores ([`SERVED_STATUSES`]). A value is read with a bounded `GETRANGE`
//! and refused past [`SharedCache::max_value`] before it is parsed.
//!
//! Entries expire with their key (K7): `SET … PX` with the key's retention,
//! counted from before the transaction that created the row started, so a
//! Redis entry never outlives the row it copies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use prometheus::{IntCounterVec, Opts, Registry};
use serde::Deserialize;
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

/// The statuses tickgate stores as a batch's answer (`model::batch_answer`
/// is the only answer builder of the HTTP lane, and it answers 200); a
/// cached value with any other status is not served.
pub const SERVED_STATUSES: &[u16] = &[200];

/// Version of the stored form (2: with `mac`). Values of version 1 have no
/// MAC and are ignored.
const VERSION: u32 = 2;

type HmacSha256 = Hmac<Sha256>;

/// One Redis connection (multiplexed, reconnecting), created on first use.
pub struct SharedCache {
    opts: SharedCacheOptions,
    conn: OnceCell<redis::aio::ConnectionManager>,
    /// After a failed connect, when the next attempt may be made: a Redis
    /// that is down costs one refused connect per second, not one per
    /// request.
    retry_at: Mutex<Option<Instant>>,
    metrics: IntCounterVec,
    /// K8: the MAC key from the database.
    mac_key: [u8; 32],
    /// Largest value read or written, in bytes.
    max_value: usize,
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
    mac: String,
}

/// Why a value was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a well-formed value of this client and key.
    Invalid,
    /// Its MAC does not verify: not written by an instance of this database.
    BadMac,
    /// A status tickgate does not store.
    Status,
}

impl SharedCache {
    /// `mac_key`: the database's answer MAC key (`Store::answer_mac_key`);
    /// `max_value`: the largest value, in bytes, that is read or written.
    pub fn new(
        opts: SharedCacheOptions,
        mac_key: [u8; 32],
        max_value: usize,
        registry: &Registry,
    ) -> anyhow::Result<SharedCache> {
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
            mac_key,
            max_value,
        })
    }

    /// The largest value read (a longer one is refused unread) or written.
    pub fn max_value(&self) -> usize {
        self.max_value
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
        // At most max_value + 1 bytes: a longer value is seen to be too
        // long without being transferred or held whole. An absent key reads
        // as empty (a value never is).
        let end = i64::try_from(self.max_value).unwrap_or(i64::MAX);
        let got = tokio::time::timeout(
            self.opts.timeout,
            redis::cmd("GETRANGE")
                .arg(&rkey)
                .arg(0)
                .arg(end)
                .query_async::<Vec<u8>>(&mut conn),
        )
        .await;
        let raw = match got {
            Ok(Ok(raw)) if raw.is_empty() => {
                self.count("get", "miss");
                return Lookup::Miss;
            }
            Ok(Ok(raw)) if raw.len() > self.max_value => {
                self.count("get", "too_large");
                tracing::warn!(redis_key = %rkey, max = self.max_value, "fills: shared cache value longer than any answer tickgate writes; ignored unread");
                return Lookup::Miss;
            }
            Ok(Ok(raw)) => raw,
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
        match decode(&raw, client, key, &self.mac_key) {
            Ok(a) if a.request_hash == request_hash => {
                self.count("get", "hit");
                Lookup::Hit(a)
            }
            Ok(_) => {
                // K3 is decided by the database, not by a cached value.
                self.count("get", "other_hash");
                Lookup::Miss
            }
            Err(Refused::Invalid) => {
                self.count("get", "invalid");
                tracing::warn!(redis_key = %rkey, "fills: shared cache value is not a committed answer of this client and key; ignored");
                Lookup::Miss
            }
            Err(Refused::BadMac) => {
                self.count("get", "bad_mac");
                tracing::warn!(redis_key = %rkey, "fills: shared cache value's MAC does not verify (not written by tickgate with this database's key); ignored");
                Lookup::Miss
            }
            Err(Refused::Status) => {
                self.count("get", "bad_status");
                tracing::warn!(redis_key = %rkey, "fills: shared cache value has a status tickgate never stores; ignored");
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
        let value = encode(client, key, answer, &self.mac_key);
        if value.len() > self.max_value {
            // It would be refused on read: not written.
            self.count("set", "too_large");
            return;
        }
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

/// The MAC of a value: HMAC-SHA256 over a domain tag, the request identity
/// (client, key, request hash) and the answer (status, body), each field
/// length-prefixed so no two field lists give the same input.
fn mac(mac_key: &[u8; 32], client: &str, key: &str, a: &CachedAnswer) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(mac_key).expect("HMAC takes a key of any length");
    m.update(b"tickgate fills answer v2\0");
    for field in [
        client.as_bytes(),
        key.as_bytes(),
        a.request_hash.as_bytes(),
        &a.status.to_be_bytes(),
        &a.body,
    ] {
        m.update(&(field.len() as u64).to_be_bytes());
        m.update(field);
    }
    m
}

/// The stored form: JSON naming client, key, hash, status, the body (hex)
/// and the MAC (hex), version 2.
pub fn encode(client: &str, key: &str, a: &CachedAnswer, mac_key: &[u8; 32]) -> Vec<u8> {
    let tag = mac(mac_key, client, key, a).finalize().into_bytes();
    let v = serde_json::json!({
        "v": VERSION,
        "client": client,
        "key": key,
        "request_hash": a.request_hash,
        "status": a.status,
        "body": hex::encode(&a.body),
        "mac": hex::encode(tag),
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The answer in `raw` if it is a well-formed version-2 value of exactly
/// this client and key, its MAC verifies under `mac_key`, and its status
/// is one tickgate stores.
pub fn decode(
    raw: &[u8],
    client: &str,
    key: &str,
    mac_key: &[u8; 32],
) -> Result<CachedAnswer, Refused> {
    let s: Stored = serde_json::from_slice(raw).map_err(|_| Refused::Invalid)?;
    let hash_ok =
        s.request_hash.len() == 64 && s.request_hash.bytes().all(|b| b.is_ascii_hexdigit());
    if s.v != VERSION || s.client != client || s.key != key || !hash_ok {
        return Err(Refused::Invalid);
    }
    let body = hex::decode(&s.body).map_err(|_| Refused::Invalid)?;
    let tag = hex::decode(&s.mac).map_err(|_| Refused::Invalid)?;
    let a = CachedAnswer {
        request_hash: s.request_hash,
        status: s.status,
        body: Bytes::from(body),
    };
    // Constant-time comparison.
    mac(mac_key, client, key, &a)
        .verify_slice(&tag)
        .map_err(|_| Refused::BadMac)?;
    // After the MAC: a verified value with such a status would mean a bug
    // of ours, not a forgery; either way it is not served.
    if !SERVED_STATUSES.contains(&a.status) {
        return Err(Refused::Status);
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn answer() -> CachedAnswer {
        CachedAnswer {
            request_hash: "ab".repeat(32),
            status: 200,
            body: Bytes::from_static(b"{\"totals\":{}}"),
        }
    }

    const K: [u8; 32] = [7; 32];

    #[test]
    fn values_name_their_client_and_key() {
        let raw = encode("alice", "k1", &answer(), &K);
        assert_eq!(decode(&raw, "alice", "k1", &K), Ok(answer()));
        assert_eq!(decode(&raw, "bob", "k1", &K), Err(Refused::Invalid));
        assert_eq!(decode(&raw, "alice", "k2", &K), Err(Refused::Invalid));
        assert_eq!(decode(b"garbage", "alice", "k1", &K), Err(Refused::Invalid));
        let mut v: Value = serde_json::from_slice(&raw).unwrap();
        v["request_hash"] = "short".into();
        assert_eq!(
            decode(&serde_json::to_vec(&v).unwrap(), "alice", "k1", &K),
            Err(Refused::Invalid)
        );
        let mut v: Value = serde_json::from_slice(&raw).unwrap();
        v["body"] = "zz".into();
        assert_eq!(
            decode(&serde_json::to_vec(&v).unwrap(), "alice", "k1", &K),
            Err(Refused::Invalid)
        );
    }

    #[test]
    fn values_are_authenticated() {
        let raw = encode("alice", "k1", &answer(), &K);
        // Another database's key.
        assert_eq!(decode(&raw, "alice", "k1", &[8; 32]), Err(Refused::BadMac));
        // Any field changed after signing: hash, status, body.
        for (field, val) in [
            ("request_hash", Value::from("cd".repeat(32))),
            ("status", Value::from(204)),
            ("body", Value::from(hex::encode(b"{}"))),
            ("mac", Value::from("00".repeat(32))),
        ] {
            let mut v: Value = serde_json::from_slice(&raw).unwrap();
            v[field] = val;
            assert_eq!(
                decode(&serde_json::to_vec(&v).unwrap(), "alice", "k1", &K),
                Err(Refused::BadMac),
                "{field}"
            );
        }
        // A version-1 value (no MAC) is not used.
        let mut v: Value = serde_json::from_slice(&raw).unwrap();
        v["v"] = 1.into();
        v.as_object_mut().unwrap().remove("mac");
        assert_eq!(
            decode(&serde_json::to_vec(&v).unwrap(), "alice", "k1", &K),
            Err(Refused::Invalid)
        );
        // Statuses tickgate never stores are not served even when signed.
        for status in [101, 204, 304, 500] {
            let a = CachedAnswer { status, ..answer() };
            let raw = encode("alice", "k1", &a, &K);
            assert_eq!(decode(&raw, "alice", "k1", &K), Err(Refused::Status));
        }
    }

    #[test]
    fn keys_are_digests_under_the_prefix() {
        let c = SharedCache::new(
            SharedCacheOptions {
                url: "redis://127.0.0.1:1/".into(),
                prefix: "p:".into(),
                timeout: Duration::from_millis(10),
            },
            K,
            1 << 20,
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
            K,
            1 << 20,
            &Registry::new(),
        )
        .is_err());
    }
}
