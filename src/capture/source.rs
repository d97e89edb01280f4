//! A source of datagrams in time order: what `replay` merges. A capture
//! file's reader (through the destination filter), one sorted run of a
//! capture, a sorted spill file, and the merge of several sources are each
//! one; another input format plugs into the same merge by implementing
//! [`DatagramSource`].

use std::net::SocketAddrV4;

use super::pcap::CaptureError;

/// One datagram's facts; its payload is in the buffer given to
/// [`DatagramSource::next`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramMeta {
    /// Capture (or message) timestamp, Unix nanoseconds.
    pub ts_ns: i64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    /// Payload bytes (the buffer's length).
    pub len: usize,
}

/// Datagrams one after the other. A source given to the merge must hand
/// them out with non-decreasing stamps (the merge refuses one that goes
/// back in time).
pub trait DatagramSource {
    /// The next datagram: its payload replaces the content of `buf` (the
    /// source may also swap in a buffer of its own); `None` at the end.
    /// After an `Err` the source is finished.
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError>;

    /// Bytes this source holds (buffers, decoder state), for the merge's
    /// memory accounting: an estimate where the source cannot know.
    fn memory(&self) -> usize {
        0
    }
}

impl<S: DatagramSource + ?Sized> DatagramSource for Box<S> {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        (**self).next(buf)
    }

    fn memory(&self) -> usize {
        (**self).memory()
    }
}

/// One datagram out of a stream, borrowing its buffer until the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released<'a> {
    pub ts: i64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: &'a [u8],
}

/// Datagrams held in memory, in the order given (tests, and a sorted
/// chunk small enough to stay in memory).
#[derive(Debug, Default)]
pub struct VecSource {
    items: std::collections::VecDeque<(DatagramMeta, Vec<u8>)>,
}

impl VecSource {
    pub fn new(
        items: impl IntoIterator<Item = (i64, SocketAddrV4, SocketAddrV4, Vec<u8>)>,
    ) -> Self {
        VecSource {
            items: items
                .into_iter()
                .map(|(ts_ns, src, dst, p)| {
                    (
                        DatagramMeta {
                            ts_ns,
                            src,
                            dst,
                            len: p.len(),
                        },
                        p,
                    )
                })
                .collect(),
        }
    }
}

impl DatagramSource for VecSource {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        Ok(self.items.pop_front().map(|(m, mut p)| {
            std::mem::swap(buf, &mut p);
            m
        }))
    }

    fn memory(&self) -> usize {
        self.items.iter().map(|(_, p)| p.capacity() + 64).sum()
    }
}
