//! Helpers below every other module (the core included): they import
//! nothing of tickgate's.

pub mod cpu;
pub mod errors;
pub mod histogram;
pub mod lines;
pub mod pages;
pub mod prefetch;
pub mod read;
pub mod signals;
pub mod stoppable;
