//! The pre-trade check: the verdict (sans-I/O), the line protocol of
//! gate.md (sans-I/O), and the Unix-socket server and client (I/O).

pub mod client;
pub mod protocol;
pub mod server;
pub mod verdict;
