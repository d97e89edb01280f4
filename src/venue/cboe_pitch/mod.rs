//! `cboe-pitch`: Cboe US Equities Multicast PITCH (venues.md `cboe-pitch`;
//! recovery.md R4c and R5c). Pure code, no I/O.
//!
//! - `frame`: the Sequenced Unit Header and the validity of a datagram;
//! - `messages`: every PITCH message type, its size and offsets, prices
//!   and symbols;
//! - `time`: Time messages and Time Offsets in New York time;
//! - `session`: the blocks of the Gap Request Proxy (R4c) and Spin Server
//!   (R5c) TCP connections, their messages encoded and decoded;
//! - `sessions`: a unit's sessions without a session id (venues.md's rules
//!   1-4: End of Session, dates, the packet at sequence 1, Unit Clear);
//! - `units`: symbols as members of units;
//! - `adapter`: the `Venue` (each unit a channel of the engine), books and
//!   quotes;
//! - `lagging`: a restarted unit's lagging copies of the replaced session;
//! - `grp`: the Gap Request Proxy's refill codec and R4c's statuses;
//! - `grp_conn`: the Gap Request Proxy connection's machine (R4c: login,
//!   heartbeats, what closes it, the reconnection pace);
//! - `spin`: the Spin Server's image codec (R5c), one attempt of one unit.

pub mod adapter;
pub mod frame;
pub mod grp;
pub mod grp_conn;
pub mod lagging;
pub mod messages;
pub mod session;
pub mod sessions;
pub mod spin;
pub mod time;
pub mod units;

pub use adapter::CboePitch;
