//! I/O shells beside the receiver: bytes in, bytes out, nothing decided
//! here (the rules are the sans-I/O core's, `feed`).

pub mod rerequest;
