//! The `[fills]` section of the config file.
//!
//! ```toml
//! [fills]
//! db = "sqlite:./tickgate-data/fills.db"   # or "postgres://user@host/db"
//! processed_ttl = "30d"   # F5: must exceed broker retention + dead-letter wait
//! key_ttl = "72h"         # K7
//! key_wait = "5s"         # K5
//! max_batch = 1000        # events per transaction / per HTTP batch
//! max_in_flight = 64      # K6: concurrent batches before 429
//!
//! [fills.http]
//! listen = "127.0.0.1:8088"
//! [[fills.http.clients]]
//! name = "bridge-1"
//! token = "s3cret"
//! accounts = ["ACC-7"]    # "*" = all accounts
//!
//! [fills.nats]
//! url = "nats://127.0.0.1:4222"
//! stream = "FILLS"
//! subject = "fills.>"
//! durable = "tickgate"
//! dlq_subject = "dlq.fills"   # must not match `subject` (stored by stream FILLS_DLQ)
//! max_deliver = 5
//! ack_wait = "30s"
//!
//! [fills.cache]              # K8: answers shared by several instances
//! redis = "redis://127.0.0.1:6379/"   # absent = off (default)
//! prefix = "tickgate:fills:answer:"
//! timeout = "100ms"
//!
//! [fills.kafka]
//! bootstrap_servers = ["127.0.0.1:9092"]
//! topic = "fills"
//! partitions = []             # empty = all partitions of the topic
//! start = "earliest"          # or "latest": where a partition with no stored offset starts
//! batch = 1000
//! dead_letter_topic = "fills.dlq"
//! consumer = "tickgate"
//! max_wait = "500ms"
//! # sasl_mechanism = "SCRAM-SHA-512"; sasl_username = "..."; sasl_password = "..."
//!
//! [fills.retention]
//! chunk = 10000           # at most 10,000 (F5)
//! pause = "50ms"
//! interval = "1h"
//! ```

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// F5: never delete more than this many rows in one statement.
pub const MAX_RETENTION_CHUNK: usize = 10_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FillsConfig {
    /// `sqlite:PATH` or a `postgres://` / `postgresql://` URL.
    pub db: String,
    /// PostgreSQL connections per tickgate instance.
    pub pg_pool_size: usize,
    #[serde(deserialize_with = "de_duration")]
    pub processed_ttl: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub key_ttl: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub key_wait: Duration,
    pub max_batch: usize,
    pub max_in_flight: usize,
    pub http: HttpConfig,
    pub nats: Option<NatsConfig>,
    pub kafka: Option<KafkaConfig>,
    pub cache: CacheConfig,
    pub retention: RetentionConfig,
}

impl Default for FillsConfig {
    fn default() -> Self {
        FillsConfig {
            db: "sqlite:./tickgate-data/fills.db".into(),
            pg_pool_size: 4,
            processed_ttl: Duration::from_secs(30 * 86_400),
            key_ttl: Duration::from_secs(72 * 3_600),
            key_wait: Duration::from_secs(5),
            max_batch: 1000,
            max_in_flight: 64,
            http: HttpConfig::default(),
            nats: None,
            kafka: None,
            cache: CacheConfig::default(),
            retention: RetentionConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub listen: String,
    pub clients: Vec<ClientConfig>,
    /// Largest accepted request body; larger is 413 (fills::http).
    pub max_body_bytes: usize,
    /// Timeouts, connection cap and rate limit (`crate::http_limits`):
    /// read from the same table by `crate::config`, not by serde.
    #[serde(skip)]
    pub limits: crate::http_limits::HttpLimits,
    /// The same API on a Unix socket too (`socket`), where the per-client
    /// cap counts the peer's uid; read by `crate::config`.
    #[serde(skip)]
    pub socket: Option<std::path::PathBuf>,
    /// Its file mode (`socket_mode`).
    #[serde(skip)]
    pub socket_mode: u32,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:8088".into(),
            clients: Vec::new(),
            max_body_bytes: 1 << 20,
            limits: crate::http_limits::HttpLimits::default(),
            socket: None,
            socket_mode: 0o660,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// The K2 `client` of idempotency keys.
    pub name: String,
    /// Bearer token that authenticates this client.
    pub token: String,
    /// Accounts the client may read positions of and post events for
    /// (K2); `"*"` means all.
    #[serde(default)]
    pub accounts: Vec<String>,
}

impl ClientConfig {
    pub fn may_see(&self, account: &str) -> bool {
        self.accounts.iter().any(|a| a == "*" || a == account)
    }

    /// Write scope: the same list as for reading.
    pub fn may_write(&self, account: &str) -> bool {
        self.may_see(account)
    }

    /// The `accounts` list for messages: `["A", "B"]`, or `no account`.
    pub fn accounts_list(&self) -> String {
        if self.accounts.is_empty() {
            "no account".to_owned()
        } else {
            format!("{:?}", self.accounts)
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    pub url: String,
    pub stream: String,
    pub subject: String,
    pub durable: String,
    pub dlq_subject: String,
    pub max_deliver: i64,
    /// Server-side redelivery timer of an unacked message.
    #[serde(deserialize_with = "de_duration")]
    pub ack_wait: Duration,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: "nats://127.0.0.1:4222".into(),
            stream: "FILLS".into(),
            subject: "fills.>".into(),
            durable: "tickgate".into(),
            // Outside `subject`: dead letters must not be consumed again.
            dlq_subject: "dlq.fills".into(),
            max_deliver: 5,
            ack_wait: Duration::from_secs(30),
        }
    }
}

/// `[fills.cache]`: the answer cache shared by several instances (K8).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// `redis://host:port/db`; absent = no shared cache (the default).
    pub redis: Option<String>,
    /// Prefix of the Redis keys.
    pub prefix: String,
    /// Bound on one Redis operation; past it the database answers.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            redis: None,
            prefix: super::shared_cache::DEFAULT_PREFIX.into(),
            timeout: Duration::from_millis(100),
        }
    }
}

/// `[fills.kafka]`: the Kafka source (`fills::kafka`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `host:port` list.
    pub bootstrap_servers: Vec<String>,
    pub topic: String,
    /// Partitions to consume; empty = all of the topic's.
    pub partitions: Vec<i32>,
    /// Where to start a partition with no stored offset: "earliest" or "latest".
    pub start: String,
    /// Most records per transaction.
    pub batch: usize,
    /// Topic that receives undecodable and rejected events.
    pub dead_letter_topic: String,
    /// Name of this consumer in the consumer-positions table (one row per
    /// partition: stream = "kafka:<topic>:<partition>").
    pub consumer: String,
    /// Longest wait of one fetch for new records.
    #[serde(deserialize_with = "de_duration")]
    pub max_wait: Duration,
    /// SASL, passed to the client: mechanism "PLAIN", "SCRAM-SHA-256" or
    /// "SCRAM-SHA-512".
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    pub sasl_password: Option<String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            bootstrap_servers: vec!["127.0.0.1:9092".into()],
            topic: "fills".into(),
            partitions: Vec::new(),
            start: "earliest".into(),
            batch: 1000,
            dead_letter_topic: "fills.dlq".into(),
            consumer: "tickgate".into(),
            max_wait: Duration::from_millis(500),
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    pub chunk: usize,
    #[serde(deserialize_with = "de_duration")]
    pub pause: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            chunk: MAX_RETENTION_CHUNK,
            pause: Duration::from_millis(50),
            interval: Duration::from_secs(3600),
        }
    }
}

/// Where the store lives, parsed from `db`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbTarget {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl FillsConfig {
    pub fn db_target(&self) -> anyhow::Result<DbTarget> {
        parse_db(&self.db)
    }

    /// Checks that cannot be expressed in the types.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.db_target()?;
        anyhow::ensure!(
            (1..=MAX_RETENTION_CHUNK).contains(&self.retention.chunk),
            "fills.retention.chunk must be 1..={MAX_RETENTION_CHUNK} (F5)"
        );
        anyhow::ensure!(self.max_batch >= 1, "fills.max_batch must be >= 1");
        anyhow::ensure!(self.max_in_flight >= 1, "fills.max_in_flight must be >= 1");
        anyhow::ensure!(self.pg_pool_size >= 1, "fills.pg_pool_size must be >= 1");
        anyhow::ensure!(
            !self.processed_ttl.is_zero(),
            "fills.processed_ttl must be > 0"
        );
        anyhow::ensure!(!self.key_ttl.is_zero(), "fills.key_ttl must be > 0");
        // The HTTP server refuses a zero body limit at start.
        anyhow::ensure!(
            self.http.max_body_bytes >= 1,
            "fills.http.max_body_bytes must be >= 1"
        );
        let mut names = std::collections::HashSet::new();
        let mut tokens = std::collections::HashSet::new();
        for c in &self.http.clients {
            anyhow::ensure!(!c.name.is_empty(), "fills.http.clients: empty name");
            anyhow::ensure!(
                !c.token.is_empty(),
                "fills.http.clients {}: empty token",
                c.name
            );
            anyhow::ensure!(
                names.insert(&c.name),
                "fills.http.clients: duplicate name {}",
                c.name
            );
            anyhow::ensure!(
                tokens.insert(&c.token),
                "fills.http.clients {}: token reused",
                c.name
            );
        }
        if let Some(n) = &self.nats {
            anyhow::ensure!(n.max_deliver >= 1, "fills.nats.max_deliver must be >= 1");
        }
        if let Some(k) = &self.kafka {
            anyhow::ensure!(
                !k.bootstrap_servers.is_empty(),
                "fills.kafka.bootstrap_servers must not be empty"
            );
            anyhow::ensure!(!k.topic.is_empty(), "fills.kafka.topic must not be empty");
            anyhow::ensure!(
                k.start == "earliest" || k.start == "latest",
                "fills.kafka.start must be \"earliest\" or \"latest\", not {:?}",
                k.start
            );
            anyhow::ensure!(k.batch >= 1, "fills.kafka.batch must be >= 1");
            anyhow::ensure!(
                k.dead_letter_topic != k.topic,
                "fills.kafka.dead_letter_topic must differ from topic (dead letters would be consumed again)"
            );
        }
        if let Some(r) = &self.cache.redis {
            anyhow::ensure!(
                r.starts_with("redis://") || r.starts_with("rediss://") || r.starts_with("unix://"),
                "fills.cache.redis: {r:?} is not a redis:// URL"
            );
        }
        Ok(())
    }
}

pub fn parse_db(s: &str) -> anyhow::Result<DbTarget> {
    if let Some(p) = s.strip_prefix("sqlite:") {
        anyhow::ensure!(!p.is_empty(), "fills.db: empty SQLite path");
        Ok(DbTarget::Sqlite(p.into()))
    } else if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        Ok(DbTarget::Postgres(s.to_owned()))
    } else {
        anyhow::bail!("fills.db: {s:?} is neither sqlite:PATH nor a postgres:// URL")
    }
}

/// "250ms", "5s", "72h", "30d", "10m"; a bare integer is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 5s, 72h, 30d"))?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too long"))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Secs(n) => Ok(Duration::from_secs(n)),
        Raw::Text(t) => parse_duration(&t).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_parsing() {
        let c: FillsConfig = toml::from_str("").unwrap();
        assert_eq!(c.processed_ttl, Duration::from_secs(30 * 86400));
        assert_eq!(c.key_ttl, Duration::from_secs(72 * 3600));
        assert_eq!(c.key_wait, Duration::from_secs(5));
        assert_eq!(c.http.listen, "127.0.0.1:8088");
        assert_eq!(
            c.db_target().unwrap(),
            DbTarget::Sqlite("./tickgate-data/fills.db".into())
        );
        c.validate().unwrap();
        let c: FillsConfig = toml::from_str(
            r#"db = "postgres://postgres@127.0.0.1/test"
key_wait = "250ms"
[retention]
chunk = 20000
[[http.clients]]
name = "a"
token = "t"
accounts = ["ACC-7"]
[nats]
max_deliver = 3
"#,
        )
        .unwrap();
        assert_eq!(c.key_wait, Duration::from_millis(250));
        assert!(c.validate().unwrap_err().to_string().contains("chunk"));
        assert!(c.http.clients[0].may_see("ACC-7"));
        assert!(!c.http.clients[0].may_see("ACC-8"));
        assert_eq!(c.nats.unwrap().max_deliver, 3);
        assert!(parse_duration("5x").is_err());
        assert!(parse_db("mysql://x").is_err());
        assert!(toml::from_str::<FillsConfig>("bogus = 1").is_err());
    }
}
