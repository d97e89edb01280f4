//! Recovery (recovery.md) as state machines beside the feed's rules, each
//! sans-I/O with `now` passed in and its own tests; `Feed` (`engine`)
//! drives them and carries out what they decide (processing a datagram,
//! declaring a hole lost, publishing the feed's state):
//!
//! | machine | rules | states |
//! |---|---|---|
//! | [`hold::Hold`] (datagrams in [`store::Store`]) | R1, R2 | `Live`, `Open` |
//! | [`refill::Refill`] (a venue's `RefillCodec`) | R4 (R3 with the hold) | `Idle`, `Asked` |
//! | [`image::Image`] | R5: when, pace, bounds, plausible end | `Idle`, `Wanted`, `Running` |
//! | [`loops::Loops`] (a venue's adapter tells it what it saw) | venues.md `cme-mdp3`, Snapshots | per instrument `Unknown`, `Live`, `Waiting` |
//!
//! docs/recovery.md "Architecture" says which machine implements which
//! rule.

pub mod driver;
pub mod hold;
pub mod image;
pub mod loops;
pub mod refill;
pub mod skew;
pub mod store;
