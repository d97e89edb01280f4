//! Capture files: pcap/pcapng and Nasdaq BinaryFILE reading and writing
//! (plain, gzip or zstd), streaming several in time order (merging, and
//! spilling sorted chunks to disk), and recording live lines to a file.

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
