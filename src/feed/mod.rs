//! The market-data lane: channel rules (C1-C6), symbol rules (S1-S8), the
//! clock-offset estimator, the lock-free state table and the receiver.
//! Everything here but `receiver` is sans-I/O.

pub mod receiver;
pub mod table;
