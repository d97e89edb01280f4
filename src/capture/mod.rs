//! Captures: pcap/pcapng reading and writing, replay through the core,
//! the synthetic provider (simulate) and recording live lines.

pub mod live;
pub mod record;
pub mod replay;
pub mod simulate;
