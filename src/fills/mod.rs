//! The reliable lane: fills applied exactly once (fills.md F1-F6, K1-K7).

pub mod backoff;
pub mod cache;
pub mod cli;
pub mod config;
pub mod http;
pub mod push;
