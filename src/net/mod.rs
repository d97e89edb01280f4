//! The market-data lane's I/O shells: the multicast receiver that hands
//! datagrams to the core's `Feed`, the re-request socket (recovery.md R4),
//! the GLIMPSE client (R5), the Gap Request Proxy client (R4c) and the
//! Spin client (R5c): bytes in, bytes out, nothing decided here.

pub mod connect;
pub mod glimpse;
pub mod grp;
pub mod image_conn;
pub mod receiver;
pub mod rerequest;
pub mod spin;
