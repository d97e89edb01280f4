//! The re-request server's memory (R4): the messages of the provider's
//! last data packets, in sequence order, bounded by a message count.
//! Pure: packets in, answer datagrams out.

use std::collections::VecDeque;

use crate::capture::frame::MAX_DATAGRAM;
use crate::venue::rerequest::Request;
use crate::wire::{Packet, PacketBuilder, SessionId, HEADER_LEN};

/// Default bound: the last 100,000 messages.
pub const DEFAULT_HISTORY_MESSAGES: usize = 100_000;

/// Why a request gets no answer (each counted by the server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// A session other than the current one (or none recorded yet).
    OtherSession,
    /// Older than the oldest message kept.
    TooOld,
    /// Not produced yet.
    NotYetSent,
}

#[derive(Debug)]
pub struct History {
    session: Option<SessionId>,
    /// Sequence of `messages[0]`.
    first: u64,
    messages: VecDeque<Box<[u8]>>,
    max_messages: usize,
}

impl History {
    /// Keeps the last `max_messages` messages (at least 1).
    pub fn new(max_messages: usize) -> History {
        History {
            session: None,
            first: 1,
            messages: VecDeque::new(),
            max_messages: max_messages.max(1),
        }
    }

    /// Records a MoldUDP64 data packet as the provider produced it. A
    /// packet of another session starts the history again (the old
    /// session's messages are no longer served); one that does not
    /// continue where the last ended (never, from the simulator) too.
    /// Anything but a valid data packet is ignored.
    pub fn record(&mut self, datagram: &[u8]) {
        let Ok(p) = Packet::parse_with(datagram, |_| 1) else {
            return;
        };
        if p.message_count() == 0 {
            return;
        }
        if self.session != Some(p.session) || p.sequence != self.next_sequence() {
            self.session = Some(p.session);
            self.first = p.sequence;
            self.messages.clear();
        }
        for block in p.blocks() {
            if self.messages.len() == self.max_messages {
                self.messages.pop_front();
                self.first += 1;
            }
            self.messages.push_back(block.into());
        }
    }

    pub fn session(&self) -> Option<SessionId> {
        self.session
    }

    /// The oldest sequence kept.
    pub fn first_sequence(&self) -> u64 {
        self.first
    }

    /// The sequence the next message produced will carry.
    pub fn next_sequence(&self) -> u64 {
        self.first + self.messages.len() as u64
    }

    /// Messages kept.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The message of sequence `seq`, if kept.
    pub fn message(&self, seq: u64) -> Option<&[u8]> {
        let i = seq.checked_sub(self.first)?;
        self.messages.get(usize::try_from(i).ok()?).map(|m| &m[..])
    }

    /// R4: the answer to `req`, one downstream MoldUDP64 packet of the
    /// current session carrying the messages from `req.sequence` on, as
    /// many as were asked for and fit 1,400 bytes, into `out`; returns the
    /// message count.
    pub fn answer(&self, req: &Request, out: &mut PacketBuilder) -> Result<u16, Unanswered> {
        if self.session != Some(req.session) {
            return Err(Unanswered::OtherSession);
        }
        if req.sequence < self.first {
            return Err(Unanswered::TooOld);
        }
        if req.sequence >= self.next_sequence() {
            return Err(Unanswered::NotYetSent);
        }
        out.start(req.session, req.sequence);
        let skip = (req.sequence - self.first) as usize;
        for m in self.messages.iter().skip(skip).take(req.count as usize) {
            if out.len() + 2 + m.len() > MAX_DATAGRAM {
                break;
            }
            out.push_raw(m);
        }
        debug_assert!(out.len() > HEADER_LEN, "one message always fits");
        Ok(out.count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(session: &str, seq: u64, msgs: &[&[u8]]) -> Vec<u8> {
        let mut b = PacketBuilder::new();
        b.start(SessionId::parse(session).unwrap(), seq);
        for m in msgs {
            b.push_raw(m);
        }
        b.bytes().to_vec()
    }

    fn req(session: &str, sequence: u64, count: u16) -> Request {
        Request {
            session: SessionId::parse(session).unwrap(),
            sequence,
            count,
        }
    }

    #[test]
    fn answers_from_the_requested_sequence() {
        let mut h = History::new(100);
        h.record(&packet("S1", 1, &[b"a1", b"b22"]));
        h.record(&packet("S1", 3, &[b"c333"]));
        h.record(&PacketBuilder::channel_heartbeat(
            SessionId::parse("S1").unwrap(),
            4,
        ));
        assert_eq!((h.first_sequence(), h.next_sequence()), (1, 4));
        let mut b = PacketBuilder::new();
        assert_eq!(h.answer(&req("S1", 2, 5), &mut b), Ok(2));
        assert_eq!(b.bytes(), packet("S1", 2, &[b"b22", b"c333"]));
        assert_eq!(h.answer(&req("S1", 1, 1), &mut b), Ok(1));
        assert_eq!(b.bytes(), packet("S1", 1, &[b"a1"]));
        assert_eq!(
            h.answer(&req("S1", 4, 1), &mut b),
            Err(Unanswered::NotYetSent)
        );
        assert_eq!(
            h.answer(&req("S2", 1, 1), &mut b),
            Err(Unanswered::OtherSession)
        );
    }

    #[test]
    fn bounded_and_capped_at_one_datagram() {
        let mut h = History::new(50);
        let big = [b'x'; 100];
        for i in 0..20u64 {
            h.record(&packet("S1", 1 + i * 5, &[&big[..]; 5]));
        }
        assert_eq!(h.len(), 50);
        assert_eq!(h.first_sequence(), 51);
        let mut b = PacketBuilder::new();
        assert_eq!(h.answer(&req("S1", 50, 1), &mut b), Err(Unanswered::TooOld));
        // 13 blocks of 102 bytes fit 1,400 bytes after the 20-byte header.
        assert_eq!(h.answer(&req("S1", 51, 100), &mut b), Ok(13));
        assert!(b.len() <= MAX_DATAGRAM);
        assert_eq!(b.len(), HEADER_LEN + 13 * 102);
    }

    #[test]
    fn a_new_session_starts_again() {
        let mut h = History::new(10);
        h.record(&packet("S1", 1, &[b"a"]));
        h.record(&packet("S2", 1, &[b"b"]));
        let mut b = PacketBuilder::new();
        assert_eq!(
            h.answer(&req("S1", 1, 1), &mut b),
            Err(Unanswered::OtherSession)
        );
        assert_eq!(h.answer(&req("S2", 1, 1), &mut b), Ok(1));
        assert_eq!(h.message(1), Some(&b"b"[..]));
    }
}
