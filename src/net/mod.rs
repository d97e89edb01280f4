//! The market-data lane's I/O: the multicast receiver that hands datagrams
//! to the core's `Feed` and decides nothing itself.

pub mod receiver;
