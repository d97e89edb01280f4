//! `tickgate replay`: captures streamed through the same core with capture
//! time as the clock, the checks answered against them, their summary and
//! the timeline picture.

pub mod checks;
pub mod command;
pub mod engine;
pub mod feed;
pub mod populate;
pub mod progress;
pub mod summary;
pub mod timeline;
