//! A source of datagrams in time order: what `replay` merges. A capture
//! file's reader (through the destination filter), one sorted run of a
//! capture, a sorted spill file, and the merge of several sources are each
//! one; another input format plugs into the same merge by implementing
//! [`DatagramSource`].

use std::net::SocketAddrV4;

use super::pcap::CaptureError;
use crate::venue::BlocksChecked;
use crate::wire::{mold_header_bytes, SessionId};

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

    /// The next datagrams as one run (see [`DatagramRun`]), replacing what
    /// `run` held; `Ok(false)` at the end. `None`: this source hands out
    /// datagrams one by one only. Either way of reading continues where
    /// the other left off. After an `Err` the source is finished.
    fn next_run(&mut self, _run: &mut DatagramRun) -> Option<Result<bool, CaptureError>> {
        None
    }
}

impl<S: DatagramSource + ?Sized> DatagramSource for Box<S> {
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<DatagramMeta>, CaptureError> {
        (**self).next(buf)
    }

    fn memory(&self) -> usize {
        (**self).memory()
    }

    fn next_run(&mut self, run: &mut DatagramRun) -> Option<Result<bool, CaptureError>> {
        (**self).next_run(run)
    }
}

/// Consecutive MoldUDP64 datagrams of one session, from one address to
/// one destination, held apart from their framing: what a source that
/// reads messages rather than datagrams (a Nasdaq BinaryFILE) hands out,
/// so that no datagram is built only to be parsed again. Datagram `i` is
/// the 20-byte header (`session`, its first sequence, its message count)
/// and its `len` bytes of `blocks`; sequences follow on from
/// `first_sequence`, stamps never decrease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatagramRun {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub session: SessionId,
    /// The first datagram's first channel sequence.
    pub first_sequence: u64,
    pub datagrams: Vec<RunDatagram>,
    /// Every datagram's message blocks, one datagram after the other.
    pub blocks: Vec<u8>,
    /// What the source checked of every datagram's blocks as it framed
    /// them (the venue does not check it again).
    pub checked: BlocksChecked,
}

/// One datagram of a [`DatagramRun`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunDatagram {
    pub ts_ns: i64,
    /// Messages (blocks) it carries.
    pub count: u16,
    /// Bytes of its blocks.
    pub len: u32,
}

/// One datagram of a run, located: its stamp, first sequence, message
/// count and blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunItem<'a> {
    pub ts: i64,
    pub sequence: u64,
    pub count: u16,
    pub blocks: &'a [u8],
}

impl Default for DatagramRun {
    fn default() -> Self {
        let unspecified = SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0);
        DatagramRun {
            src: unspecified,
            dst: unspecified,
            session: SessionId::default(),
            first_sequence: 0,
            datagrams: Vec::new(),
            blocks: Vec::new(),
            checked: BlocksChecked::No,
        }
    }
}

impl DatagramRun {
    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.datagrams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.datagrams.is_empty()
    }

    /// The datagrams in order.
    pub fn iter(&self) -> impl Iterator<Item = RunItem<'_>> + '_ {
        let mut at = 0usize;
        let mut sequence = self.first_sequence;
        self.datagrams.iter().map(move |d| {
            let blocks = &self.blocks[at..at + d.len as usize];
            let item = RunItem {
                ts: d.ts_ns,
                sequence,
                count: d.count,
                blocks,
            };
            at += d.len as usize;
            sequence = sequence.saturating_add(d.count as u64);
            item
        })
    }

    /// The MoldUDP64 datagram `item` (one of this run's) stands for, into
    /// `out` (replacing its content).
    pub fn datagram(&self, item: &RunItem<'_>, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&mold_header_bytes(self.session, item.sequence, item.count));
        out.extend_from_slice(item.blocks);
    }

    /// Bytes it holds (by capacity), for the memory accounting.
    pub fn memory(&self) -> usize {
        self.blocks.capacity() + self.datagrams.capacity() * std::mem::size_of::<RunDatagram>()
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
