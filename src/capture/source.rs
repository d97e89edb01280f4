//! A source of stamped UDP datagrams for replay: one capture file's
//! datagrams in the order the file holds them. The stream (`stream`) puts
//! a source's datagrams in time order through the reorder window.

use std::net::SocketAddrV4;

use super::pcap::CaptureError;

/// One datagram handed out by a [`DatagramSource`]; its bytes are in the
/// caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramMeta {
    /// Unix nanoseconds.
    pub ts_ns: i64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    /// Bytes of the datagram (the buffer's length).
    pub len: usize,
}

/// Datagrams in file order.
pub trait DatagramSource {
    /// The next datagram: its bytes replace `buf`'s content. `Ok(None)` at
    /// the end; after an `Err` the source is finished.
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError>;
}
