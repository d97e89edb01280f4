//! tickgate: a market-data freshness gate (at-most-once lane) and an
//! exactly-once fills consumer (reliable lane) for trading hosts.
//!
//! Sans-I/O core: `wire`, `venue`, `feed` (`state`, `clock`, `channel`,
//! `verdict`, `check`), `gate::protocol` and `fills::model` take time as an
//! argument and do no I/O. Sockets, files and clocks live in their own
//! files (`net::receiver`, `gate::server`, `fills::store`, `capture::pcap`,
//! `daemon`). The core imports nothing above it (`tests/layering.rs`).

pub mod capture;
pub mod client;
pub mod config;
pub mod daemon;
pub mod feed;
pub mod fills;
pub mod gate;
pub mod http_limits;
pub mod manual;
pub mod metrics;
pub mod net;
pub mod replay;
pub mod sim;
pub mod text;
pub mod util;
pub mod venue;
pub mod wire;
