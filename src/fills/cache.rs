//! An in-process cache of stored answers for completed idempotency keys
//! (K4), so that a replay is answered without touching the database.
//!
//! The database stays the only truth: the cache only ever holds answers the
//! store has already committed, a miss (cold cache, eviction, another
//! instance's first attempt) goes to the store, and an entry is never
//! trusted past the key retention (K7). Bounded: a fixed number of shards,
//! each a map plus insertion order, evicting its oldest entry when full.
//! Time is an argument (`now`, monotonic nanoseconds) so this file does no
//! I/O.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

use bytes::Bytes;

/// A committed answer as it was first sent (K4: replayed byte for byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedAnswer {
    /// Hex SHA-256 of the canonical request body the key was first used
    /// with (K3, `fills::hash`).
    pub request_hash: String,
    pub status: u16,
    pub body: Bytes,
}

/// `(client, key)`: keys are unique per client (K2), so the client is part
/// of the cache key and one client can never be served another's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    client: String,
    key: String,
}

struct Entry {
    answer: CachedAnswer,
    inserted_at: i64,
}

#[derive(Default)]
struct Shard {
    map: HashMap<CacheKey, Entry>,
    /// Insertion order; may hold keys already evicted or replaced (skipped).
    order: VecDeque<(CacheKey, i64)>,
}

pub struct AnswerCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    ttl_ns: i64,
    hasher: std::collections::hash_map::RandomState,
}

const SHARDS: usize = 16;

impl AnswerCache {
    /// At most about `capacity` answers (rounded up to a multiple of the
    /// shard count); entries older than `ttl_ns` count as absent. A
    /// capacity of 0 disables the cache.
    pub fn new(capacity: usize, ttl_ns: i64) -> Self {
        let per_shard = capacity.div_ceil(SHARDS);
        AnswerCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard,
            ttl_ns,
            hasher: Default::default(),
        }
    }

    fn shard(&self, key: &CacheKey) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// The stored answer of `(client, key)`, if cached and not expired.
    pub fn get(&self, client: &str, key: &str, now: i64) -> Option<CachedAnswer> {
        if self.per_shard == 0 {
            return None;
        }
        let k = CacheKey {
            client: client.to_owned(),
            key: key.to_owned(),
        };
        let mut shard = lock(self.shard(&k));
        let entry = shard.map.get(&k)?;
        if now.saturating_sub(entry.inserted_at) >= self.ttl_ns {
            shard.map.remove(&k);
            return None;
        }
        Some(entry.answer.clone())
    }

    /// Remembers a committed answer. Only call this after the store has
    /// committed it (or returned it as already stored).
    pub fn insert(&self, client: &str, key: &str, answer: CachedAnswer, now: i64) {
        if self.per_shard == 0 {
            return;
        }
        let k = CacheKey {
            client: client.to_owned(),
            key: key.to_owned(),
        };
        let mut shard = lock(self.shard(&k));
        let Shard { map, order } = &mut *shard;
        // Evict the oldest live entries until there is room.
        while map.len() >= self.per_shard && !map.contains_key(&k) {
            let Some((old, at)) = order.pop_front() else {
                break;
            };
            if map.get(&old).is_some_and(|e| e.inserted_at == at) {
                map.remove(&old);
            }
        }
        map.insert(
            k.clone(),
            Entry {
                answer,
                inserted_at: now,
            },
        );
        order.push_back((k, now));
        // Stale order records (replaced or expired keys) must not pile up.
        if order.len() > 2 * self.per_shard + 8 {
            order.retain(|(key, at)| map.get(key).is_some_and(|e| e.inserted_at == *at));
        }
    }

    /// Number of cached answers (including expired ones not yet dropped).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A poisoned shard only means another request panicked mid-insert; the map
/// itself is still consistent, so keep serving.
fn lock(m: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(n: u8) -> CachedAnswer {
        CachedAnswer {
            request_hash: format!("{n:02x}"),
            status: 200,
            body: Bytes::from(vec![n; 3]),
        }
    }

    #[test]
    fn clients_do_not_share_keys() {
        let c = AnswerCache::new(100, i64::MAX);
        c.insert("alice", "k1", answer(1), 0);
        assert_eq!(c.get("alice", "k1", 0), Some(answer(1)));
        assert_eq!(c.get("bob", "k1", 0), None);
        c.insert("bob", "k1", answer(2), 0);
        assert_eq!(c.get("alice", "k1", 0), Some(answer(1)));
        assert_eq!(c.get("bob", "k1", 0), Some(answer(2)));
    }

    #[test]
    fn bounded_and_evicts_oldest_first() {
        let c = AnswerCache::new(SHARDS * 2, i64::MAX);
        for i in 0..1000u32 {
            c.insert("a", &format!("k{i}"), answer(i as u8), i64::from(i));
            assert!(c.len() <= SHARDS * 2);
        }
        // The newest entry is always there; the very first is long gone.
        assert_eq!(c.get("a", "k999", 1000), Some(answer((999 % 256) as u8)));
        assert_eq!(c.get("a", "k0", 1000), None);
        for s in &c.shards {
            assert!(lock(s).order.len() <= 2 * c.per_shard + 8);
        }
    }

    #[test]
    fn expired_entries_are_misses() {
        let c = AnswerCache::new(10, 100);
        c.insert("a", "k", answer(1), 1_000);
        assert!(c.get("a", "k", 1_099).is_some());
        assert!(c.get("a", "k", 1_100).is_none());
        assert!(c.is_empty());
    }

    #[test]
    fn zero_capacity_disables() {
        let c = AnswerCache::new(0, i64::MAX);
        c.insert("a", "k", answer(1), 0);
        assert!(c.get("a", "k", 0).is_none());
    }

    #[test]
    fn reinsert_same_key_keeps_one_entry() {
        let c = AnswerCache::new(SHARDS, i64::MAX);
        for t in 0..100 {
            c.insert("a", "k", answer(1), t);
        }
        assert_eq!(c.len(), 1);
        assert_eq!(c.get("a", "k", 100), Some(answer(1)));
    }
}
