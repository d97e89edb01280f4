//! The market-data lane's I/O shells: the multicast receiver that hands
//! datagrams to the core's `Feed`, the re-request socket (recovery.md R4)
//! and the GLIMPSE client (R5): bytes in, bytes out, nothing decided here.

pub mod glimpse;
pub mod receiver;
pub mod rerequest;
