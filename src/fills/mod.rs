//! The reliable lane: fills applied exactly once (fills.md F1-F6, K1-K7).
//!
//! Pure: `model` (events, validation, the HTTP answer), `position` (F6),
//! `hash` (K3), `plan` (per-batch decisions). I/O: `store` (SQLite,
//! PostgreSQL), `retention` (F5/K7 sweeper), `cli`, `push`, the broker
//! sources `nats` and `kafka` (what they share: `source`).

/// Exit status of `fills apply` and `fills push` when every event was
/// read and answered but some were rejected (invalid) or held (a BUST
/// waiting for its FILL): distinct from 1 (batches failed) and 2 (an
/// error stopped the run), so that scripts can tell.
pub const EXIT_NOT_ALL_APPLIED: i32 = 3;

pub mod backoff;
pub mod cache;
pub mod cli;
pub mod config;
pub mod exact;
pub mod files;
pub mod hash;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod model;
pub mod nats;
pub mod plan;
pub mod position;
pub mod push;
pub mod retention;
pub mod shared_cache;
pub mod source;
pub mod store;
