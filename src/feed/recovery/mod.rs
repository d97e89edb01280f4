//! Recovery (recovery.md) as state machines beside the feed's rules, each
//! sans-I/O with `now` passed in, one instance per channel, and its own
//! tests. [`driver::Recovery`] routes a holding feed's datagrams through
//! the hold, refill and image machines and carries out what they decide
//! (processing a datagram, declaring a hole lost, publishing the recovery
//! state) through the feed's rules ([`driver::Deliver`]);
//! [`units::Units`] keeps one driver per channel and what the channels
//! share (R4c's reach, count limit and rate, R5c's image attempts);
//! `Feed` (`engine`) owns it and the loops machine:
//!
//! | machine | rules | states |
//! |---|---|---|
//! | [`units::Units`] (over [`units::UnitRules`]) | per channel (unit): selection, `gap_hold_packets` over the feed, R2 per channel, R4c 100/s and earliest deadline first, the feed's reach and count limit, R5c which units' images start (several at once, one per unit) | the selected channel |
//! | [`driver::Recovery`] | R1-R6: routing, fill, release, declare, requests, the image's join; R5c step 1: requests during an image, none declared | the machines' |
//! | [`hold::Hold`] (datagrams in [`store::Store`]) | R1, R2; R5c step 1: the first hole among an image attempt's held datagrams | `Live`, `Open` |
//! | [`refill::Refill`] (a venue's `RefillCodec`) | R4 (R3 with the hold) | `Idle`, `Asked` |
//! | [`image::Image`] | R5: when, pace, bounds, plausible end | `Idle`, `Wanted`, `Running` |
//! | [`loops::Loops`] (a venue's adapter tells it what it saw) | venues.md `cme-mdp3`, Snapshots | per instrument `Unknown`, `Live`, `Waiting` |
//! | [`skew::LineSkew`] | the line-skew measure (for `gap_hold_us`) | |
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
pub mod units;
