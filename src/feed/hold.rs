//! The held datagrams of recovery.md R1-R2: datagrams of the current
//! session that arrived beyond a hole, kept in sequence order (arrival
//! order among equal sequences) until the hole is filled or declared lost.
//! Pure data: the feed (`engine`) decides what is held and when it is
//! released.
//!
//! Bounded by `gap_hold_packets` (the feed declares a hole before holding
//! one more). The entry queue and the byte arena keep their capacity once
//! grown, so a steady state of holes allocates nothing per datagram.

use std::collections::VecDeque;

use crate::venue::Header;

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
pub struct Hold {
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

impl Hold {
    /// A hold with room for `entries` datagrams before any allocation.
    pub fn with_capacity(entries: usize) -> Hold {
        Hold {
            entries: VecDeque::with_capacity(entries),
            ..Hold::default()
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

    /// Earliest arrival among the held datagrams (R2: the open time of a
    /// hole left when the previous one closed). O(held).
    pub fn earliest_arrival(&self) -> Option<i64> {
        self.entries.iter().map(|e| e.arrival).min()
    }

    /// Whether a copy of this packet (same sequence, count and kind) is
    /// already held: the other line's copy adds nothing (C2).
    pub fn holds_copy(&self, header: &Header) -> bool {
        let seq = header.channel.sequence;
        let start = self.entries.partition_point(|e| e.sequence() < seq);
        self.entries
            .range(start..)
            .take_while(|e| e.sequence() == seq)
            .any(|e| e.header.channel == header.channel)
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
    use crate::wire::{PacketKind, SessionId};

    fn header(seq: u64, count: u16) -> Header {
        Header {
            channel: ChannelHeader {
                session: SessionId(*b"SESSION001"),
                sequence: seq,
                kind: PacketKind::Data,
                count,
            },
            send_time: None,
        }
    }

    #[test]
    fn released_in_sequence_then_arrival_order() {
        let mut h = Hold::with_capacity(4);
        h.push(header(9, 1), b"nine", 1, Source::Line(0));
        h.push(header(5, 2), b"five-a", 2, Source::Line(0));
        h.push(header(5, 2), b"five-b", 3, Source::Line(1));
        h.push(header(7, 1), b"seven", 4, Source::Rerequest);
        assert_eq!(h.earliest_arrival(), Some(1));
        assert!(h.holds_copy(&header(5, 2)));
        assert!(!h.holds_copy(&header(5, 1)));
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
        let mut h = Hold::with_capacity(2);
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
