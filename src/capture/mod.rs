//! Captures: pcap/pcapng reading and writing, Nasdaq BinaryFILE days, replay through the core,
//! the synthetic provider (simulate) and recording live lines.

pub mod binaryfile;
pub mod compress;
pub mod frame;
pub mod merge;
pub mod pcap;
pub mod record;
pub mod source;
pub mod spill;
pub mod stream;
pub mod venue_arg;

pub use compress::{CaptureInput, CaptureOutput, Compression};
pub use frame::{parse_frame, SkipCounts, SkipReason, UdpDatagram};
pub use pcap::{
    CaptureError, CaptureFormat, CaptureReader, CaptureStats, CapturedDatagram, DatagramRef,
    PcapWriter, ResumePoint,
};
pub use source::{DatagramMeta, DatagramSource, Released};
