//! The venue's side of recovery (recovery.md R4, R5) for `tickgate
//! simulate --live`, so that tests, the demo and users' test environments
//! have a server to recover from:
//!
//! - [`History`]: the provider's recent messages (pure, bounded);
//! - [`RerequestServer`]: a MoldUDP64 re-request server (UDP) answering
//!   from a `History`, rate limited per source;
//! - [`GlimpseServer`]: a GLIMPSE 5.0 server over SoupBinTCP 4.00 serving
//!   the simulator's book, one thread per connection, connections capped;
//! - [`PitchHistory`]: a Cboe provider's recent messages per unit (pure);
//! - [`GrpServer`]: a Cboe Gap Request Proxy (R4c, TCP) answering Gap
//!   Requests with a Gap Response and the messages on the gap line;
//! - [`SpinServer`]: a Cboe Spin Server (R5c, TCP) for one unit, offering
//!   its book every second and spinning it on request.
//!
//! The servers are thin I/O shells over the pure codecs of
//! `venue::rerequest`, `venue::nasdaq_itch::soupbin`,
//! `venue::nasdaq_itch::glimpse` and `venue::cboe_pitch::session`; each runs in its own threads, so a
//! client (or a flood) never blocks the simulator's multicast sending.

mod glimpse;
mod grp;
mod history;
mod pitch_conn;
mod pitch_history;
mod rerequest;
mod spin;

pub use glimpse::{GlimpseCounts, GlimpseOptions, GlimpseServer, GlimpseSnapshot, SnapshotSource};
pub use grp::{GrpCounts, GrpOptions, GrpServer};
pub use history::{History, Unanswered, DEFAULT_HISTORY_MESSAGES};
pub use pitch_conn::ConnCounts;
pub use pitch_history::PitchHistory;
pub use rerequest::{RerequestCounts, RerequestOptions, RerequestServer};
pub use spin::{SpinCounts, SpinImage, SpinOptions, SpinServer, SpinSource};
