//! The held datagrams of recovery.md R1-R2: datagrams of the current
//! session that arrived beyond a hole, kept in sequence order (arrival
//! order among equal sequences) until the hole is filled or declared lost.
//! Pure data: the hold machine (`recovery::hold`) decides what is held,
//! the feed (`engine`) when it is released.
//!
//! Bounded by `gap_hold_packets` (the hold reports it full before holding
//! one more). The entry queue and the byte arena keep their capacity once
//! grown, so a steady state of holes allocates nothing per datagram.

use std::collections::VecDeque;

use crate::venue::Header;
use crate::wire::PacketKind;

/// R1: an arriving datagram against the held ones of its sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Against {
    /// None of its sequence is held (or only ones with fewer messages).
    New,
    /// A copy of one held (same bytes, or no more messages): no room.
    Copy,
    /// Same sequence and message count as the held entry at this index,
    /// other bytes.
    Conflict(usize),
}

/// Where a held datagram came from: a line of the feed, or a re-request
/// answer (R4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Line(usize),
    Rerequest,
}

/// One held datagram: its parsed header (it was validated whole when it
/// arrived), arrival time and where its bytes are in the arena.
#[derive(Clone, Copy, Debug)]
pub struct Held {
    pub header: Header,
    pub arrival: i64,
    pub source: Source,
    offset: usize,
    len: usize,
}

impl Held {
    /// The channel sequence of the packet's first message (for a heartbeat
    /// or end of session, the next sequence).
    #[inline]
    pub fn sequence(&self) -> u64 {
        self.header.channel.sequence
    }

    /// The sequence after the packet: `next` once it is processed.
    #[inline]
    pub fn end(&self) -> u64 {
        self.header
            .channel
            .sequence
            .saturating_add(self.header.channel.count as u64)
    }
}

#[derive(Debug, Default)]
pub struct Store {
    entries: VecDeque<Held>,
    arena: Vec<u8>,
    /// Compaction target (kept, so compacting allocates nothing once warm).
    spare: Vec<u8>,
    /// Bytes of `arena` still referenced by entries.
    live_bytes: usize,
    /// The largest `end()` held since the hold was last empty.
    max_end: u64,
    /// Most entries held at once so far, and the arena's largest size: for
    /// the operator (peak memory of the hold).
    pub peak_entries: usize,
    pub peak_bytes: usize,
}

impl Store {
    /// A hold with room for `entries` datagrams before any allocation.
    pub fn with_capacity(entries: usize) -> Store {
        Store {
            entries: VecDeque::with_capacity(entries),
            ..Store::default()
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The held datagram with the lowest sequence.
    #[inline]
    pub fn first(&self) -> Option<&Held> {
        self.entries.front()
    }

    /// The sequence after the furthest datagram held (0 when empty): C3b
    /// judges a new datagram from here, not from a `next` that waits for
    /// the hole.
    #[inline]
    pub fn max_end(&self) -> u64 {
        if self.entries.is_empty() {
            0
        } else {
            self.max_end
        }
    }

    /// The index of the first held datagram whose sequence is beyond
    /// `seq` (`len()` if none).
    #[inline]
    pub fn index_beyond(&self, seq: u64) -> usize {
        self.entries.partition_point(|e| e.sequence() <= seq)
    }

    /// The held datagram at `index` in sequence order.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&Held> {
        self.entries.get(index)
    }

    /// Earliest arrival among the held datagrams (R2: the open time of a
    /// hole left when the previous one closed). O(held).
    pub fn earliest_arrival(&self) -> Option<i64> {
        self.entries.iter().map(|e| e.arrival).min()
    }

    /// R1: what an arriving datagram of a sequence beyond `next` is to the
    /// ones held. Only data packets with messages can conflict: a
    /// heartbeat or end of session carries nothing to forge.
    pub fn compare(&self, header: &Header, datagram: &[u8]) -> Against {
        let seq = header.channel.sequence;
        let count = header.channel.count;
        let start = self.entries.partition_point(|e| e.sequence() < seq);
        let mut conflict = None;
        for (i, e) in self
            .entries
            .range(start..)
            .enumerate()
            .take_while(|(_, e)| e.sequence() == seq)
        {
            if e.header.channel.kind != header.channel.kind {
                continue;
            }
            let same_count = e.header.channel.count == count;
            if same_count && &self.arena[e.offset..e.offset + e.len] == datagram {
                return Against::Copy;
            }
            if same_count && count > 0 && header.channel.kind == PacketKind::Data {
                conflict = Some(start + i);
            } else if count <= e.header.channel.count {
                // No more messages than one held: it takes no room.
                return Against::Copy;
            }
        }
        match conflict {
            Some(at) => Against::Conflict(at),
            None => Against::New,
        }
    }

    /// Removes the entry at `at` (a conflict, R1): its bytes stay in the
    /// arena until the next compaction or the hold empties.
    pub fn remove(&mut self, at: usize) -> Option<Held> {
        let held = self.entries.remove(at)?;
        self.live_bytes -= held.len;
        if self.entries.is_empty() {
            self.arena.clear();
            self.live_bytes = 0;
        }
        Some(held)
    }

    /// Memory the held datagrams take now: their bytes and their entries
    /// (R5 bounds a snapshot's hold by this).
    #[inline]
    pub fn bytes(&self) -> usize {
        self.live_bytes + self.entries.len() * std::mem::size_of::<Held>()
    }

    /// Gives back memory grown beyond `entries` datagrams and an empty
    /// arena (R5: a snapshot attempt's buffers are released when it ends).
    /// Only when empty; a hold in use keeps what it has.
    pub fn shrink_to(&mut self, entries: usize) {
        if !self.entries.is_empty() {
            return;
        }
        self.entries.shrink_to(entries);
        self.arena = Vec::new();
        self.spare = Vec::new();
    }

    /// Holds `datagram`: after every held entry of a lower or equal
    /// sequence.
    pub fn push(&mut self, header: Header, datagram: &[u8], arrival: i64, source: Source) {
        let offset = self.arena.len();
        self.arena.extend_from_slice(datagram);
        self.live_bytes += datagram.len();
        let held = Held {
            header,
            arrival,
            source,
            offset,
            len: datagram.len(),
        };
        let seq = held.sequence();
        if self.entries.is_empty() {
            self.max_end = 0;
        }
        self.max_end = self.max_end.max(held.end());
        let at = self.entries.partition_point(|e| e.sequence() <= seq);
        self.entries.insert(at, held);
        self.peak_entries = self.peak_entries.max(self.entries.len());
        self.peak_bytes = self.peak_bytes.max(self.arena.len());
    }

    /// Removes the first entry, copying its bytes into `out` (cleared
    /// first; its capacity is kept by the caller).
    pub fn pop_into(&mut self, out: &mut Vec<u8>) -> Option<Held> {
        let held = self.entries.pop_front()?;
        out.clear();
        out.extend_from_slice(&self.arena[held.offset..held.offset + held.len]);
        self.live_bytes -= held.len;
        if self.entries.is_empty() {
            self.arena.clear();
            self.live_bytes = 0;
        } else if self.arena.len() > 1 << 20 && self.live_bytes * 2 < self.arena.len() {
            self.compact();
        }
        Some(held)
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.arena.clear();
        self.live_bytes = 0;
    }

    /// Moves the live bytes to the front of a fresh arena (the spare one):
    /// a hold that never empties must not grow its arena without bound.
    #[cold]
    fn compact(&mut self) {
        self.spare.clear();
        for e in self.entries.iter_mut() {
            let from = e.offset;
            e.offset = self.spare.len();
            self.spare
                .extend_from_slice(&self.arena[from..from + e.len]);
        }
        std::mem::swap(&mut self.arena, &mut self.spare);
        self.spare.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::ChannelHeader;
    use crate::wire::SessionId;

    fn header(seq: u64, count: u16) -> Header {
        Header {
            channel: ChannelHeader {
                session: SessionId(*b"SESSION001"),
                sequence: seq,
                kind: PacketKind::Data,
                count,
                stale_session: false,
            },
            send_time: None,
        }
    }

    #[test]
    fn released_in_sequence_then_arrival_order() {
        let mut h = Store::with_capacity(4);
        h.push(header(9, 1), b"nine", 1, Source::Line(0));
        h.push(header(5, 2), b"five-a", 2, Source::Line(0));
        h.push(header(5, 2), b"five-b", 3, Source::Line(1));
        h.push(header(7, 1), b"seven", 4, Source::Rerequest);
        assert_eq!(h.earliest_arrival(), Some(1));
        assert_eq!(h.compare(&header(5, 2), b"five-a"), Against::Copy);
        assert_eq!(h.compare(&header(5, 1), b"five"), Against::Copy);
        assert_eq!(h.compare(&header(5, 3), b"five-c"), Against::New);
        assert_eq!(h.compare(&header(6, 2), b"six"), Against::New);
        let mut out = Vec::new();
        let mut got = Vec::new();
        while let Some(e) = h.pop_into(&mut out) {
            got.push((e.sequence(), String::from_utf8(out.clone()).unwrap()));
        }
        assert_eq!(
            got,
            [
                (5, "five-a".to_string()),
                (5, "five-b".to_string()),
                (7, "seven".to_string()),
                (9, "nine".to_string())
            ]
        );
        assert!(h.is_empty());
        assert_eq!(h.peak_entries, 4);
    }

    #[test]
    fn a_hold_that_never_empties_stays_bounded() {
        let mut h = Store::with_capacity(2);
        let big = vec![7u8; 100_000];
        let mut out = Vec::new();
        h.push(header(1, 1), &big, 0, Source::Line(0));
        for i in 2..200u64 {
            h.push(header(i, 1), &big, i as i64, Source::Line(0));
            let e = h.pop_into(&mut out).unwrap();
            assert_eq!(e.sequence(), i - 1);
            assert_eq!(out, big);
        }
        assert!(h.peak_bytes < 4 << 20, "arena grew to {}", h.peak_bytes);
    }
}

#[cfg(test)]
pub(super) mod conflict_tests {
    use super::*;
    use crate::venue::ChannelHeader;
    use crate::wire::SessionId;

    /// A header of a test session's packet (the hold's tests use it too).
    pub(in crate::feed::recovery) fn header(seq: u64, count: u16, kind: PacketKind) -> Header {
        Header {
            channel: ChannelHeader {
                session: SessionId(*b"SESSION001"),
                sequence: seq,
                kind,
                count,
                stale_session: false,
            },
            send_time: None,
        }
    }

    #[test]
    fn other_bytes_with_the_same_count_conflict_and_can_be_removed() {
        let mut h = Store::with_capacity(4);
        h.push(
            header(5, 2, PacketKind::Data),
            b"five-a",
            1,
            Source::Line(0),
        );
        h.push(header(7, 1, PacketKind::Data), b"seven", 2, Source::Line(0));
        assert_eq!(
            h.compare(&header(5, 2, PacketKind::Data), b"five-X"),
            Against::Conflict(0)
        );
        let before = h.bytes();
        let gone = h.remove(0).unwrap();
        assert_eq!(gone.sequence(), 5);
        assert!(h.bytes() < before);
        assert_eq!(h.first().unwrap().sequence(), 7);
        assert_eq!(
            h.compare(&header(5, 2, PacketKind::Data), b"five-X"),
            Against::New
        );
    }

    #[test]
    fn heartbeats_never_conflict() {
        let mut h = Store::with_capacity(2);
        h.push(
            header(9, 0, PacketKind::Heartbeat),
            b"hb-a",
            1,
            Source::Line(0),
        );
        assert_eq!(
            h.compare(&header(9, 0, PacketKind::Heartbeat), b"hb-b"),
            Against::Copy
        );
    }

    #[test]
    fn shrinking_an_empty_hold_gives_its_arena_back() {
        let mut h = Store::with_capacity(2);
        let big = vec![1u8; 1 << 20];
        h.push(header(1, 1, PacketKind::Data), &big, 0, Source::Line(0));
        assert!(h.bytes() >= 1 << 20);
        h.shrink_to(2);
        assert!(h.arena.capacity() >= 1 << 20, "in use: kept");
        h.clear();
        h.shrink_to(2);
        assert_eq!(h.arena.capacity(), 0);
        assert_eq!(h.bytes(), 0);
    }
}
