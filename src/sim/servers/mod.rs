//! The venue's side of recovery (recovery.md R4, R5) for `tickgate
//! simulate --live`, so that tests, the demo and users' test environments
//! have a server to recover from:
//!
//! - [`History`]: the provider's recent messages (pure, bounded);
//! - [`RerequestServer`]: a MoldUDP64 re-request server (UDP) answering
//!   from a `History`, rate limited per source;
//! - [`GlimpseServer`]: a GLIMPSE 5.0 server over SoupBinTCP 4.00 serving
//!   the simulator's book, one thread per connection, connections capped.
//!
//! The servers are thin I/O shells over the pure codecs of
//! `venue::rerequest`, `venue::nasdaq_itch::soupbin` and
//! `venue::nasdaq_itch::glimpse`; each runs in its own threads, so a
//! client (or a flood) never blocks the simulator's multicast sending.

mod glimpse;
mod history;
mod rerequest;

pub use glimpse::{GlimpseCounts, GlimpseOptions, GlimpseServer, GlimpseSnapshot, SnapshotSource};
pub use history::{History, Unanswered, DEFAULT_HISTORY_MESSAGES};
pub use rerequest::{RerequestCounts, RerequestOptions, RerequestServer};
