//! The reliable lane: fills applied exactly once (fills.md F1-F6, K1-K7).

pub mod cli;
pub mod config;
pub mod push;
