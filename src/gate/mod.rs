//! The pre-trade check: the line protocol of
//! gate.md (sans-I/O; the verdict is `feed::verdict`), and the Unix-socket
//! server and client (I/O).

pub mod client;
pub mod links;
pub mod protocol;
pub mod server;
