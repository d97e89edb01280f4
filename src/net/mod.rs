//! The market-data lane's I/O shells: the multicast receiver that hands
//! datagrams to the core's `Feed`, and the re-request socket (recovery.md
//! R4): bytes in, bytes out, nothing decided here.

pub mod receiver;
pub mod rerequest;
