//! The Gap Request Proxy's memory (recovery.md R4c): per unit, the
//! messages of the provider's last data datagrams, in sequence order,
//! bounded by a message count per unit. Pure: datagrams in, the gap
//! line's datagrams and a Gap Response status out.

use std::collections::VecDeque;

use crate::capture::frame::MAX_DATAGRAM;
use crate::venue::cboe_pitch::frame::{frame, Datagram, HEADER_LEN};
use crate::venue::cboe_pitch::session::GapStatus;

/// One unit's kept messages.
#[derive(Debug, Default)]
struct UnitHistory {
    /// Sequence of `messages[0]`.
    first: u64,
    messages: VecDeque<Box<[u8]>>,
}

impl UnitHistory {
    fn next_sequence(&self) -> u64 {
        self.first + self.messages.len() as u64
    }
}

/// Every unit's recent messages (units 1-255).
#[derive(Debug)]
pub struct PitchHistory {
    units: Vec<Option<UnitHistory>>,
    max_messages: usize,
}

impl PitchHistory {
    /// Keeps the last `max_messages` messages of each unit (at least 1).
    pub fn new(max_messages: usize) -> PitchHistory {
        PitchHistory {
            units: (0..256).map(|_| None).collect(),
            max_messages: max_messages.max(1),
        }
    }

    /// Records a realtime datagram as the provider produced it. A datagram
    /// at sequence 1, or one that does not continue where the unit's last
    /// ended (never, from the simulator), starts the unit again (a new
    /// session: the old one's messages are no longer served). Heartbeats,
    /// unsequenced and invalid datagrams are ignored.
    pub fn record(&mut self, datagram: &[u8]) {
        let Ok(d) = Datagram::parse(datagram) else {
            return;
        };
        let h = d.header;
        if h.count == 0 || h.sequence == 0 {
            return;
        }
        let unit = self.units[h.unit as usize].get_or_insert_with(UnitHistory::default);
        if h.sequence == 1 || h.sequence as u64 != unit.next_sequence() {
            unit.first = h.sequence as u64;
            unit.messages.clear();
        }
        for m in d.messages() {
            if unit.messages.len() == self.max_messages {
                unit.messages.pop_front();
                unit.first += 1;
            }
            unit.messages.push_back(m.into());
        }
    }

    /// The oldest sequence kept of `unit` and the next it will carry
    /// (`None`: nothing recorded for it).
    pub fn range(&self, unit: u8) -> Option<(u64, u64)> {
        let u = self.units[unit as usize].as_ref()?;
        Some((u.first, u.next_sequence()))
    }

    /// R4c: the answer to a Gap Request for `count` messages of `unit`
    /// from `sequence`. `A`: the messages, in datagrams of the unit with
    /// their original sequence numbers (each at most 1,400 bytes), are
    /// handed to `send` in order. Otherwise the status that refuses it:
    /// `I` a unit never recorded, `C` a count above `max_count`, `O` a
    /// range that is not wholly kept (too old, or not yet sent).
    pub fn answer(
        &self,
        unit: u8,
        sequence: u32,
        count: u16,
        max_count: u16,
        out: &mut Vec<u8>,
        mut send: impl FnMut(&[u8]),
    ) -> GapStatus {
        let Some(u) = self.units[unit as usize].as_ref() else {
            return GapStatus::InvalidUnit;
        };
        if count > max_count {
            return GapStatus::CountTooLarge;
        }
        let (from, to) = (sequence as u64, sequence as u64 + count as u64);
        if count == 0 || from < u.first || to > u.next_sequence() {
            return GapStatus::OutOfRange;
        }
        let mut body = Vec::with_capacity(MAX_DATAGRAM);
        let mut first = from;
        let mut n = 0u8;
        for (i, m) in u
            .messages
            .iter()
            .skip((from - u.first) as usize)
            .take(count as usize)
            .enumerate()
        {
            if HEADER_LEN + body.len() + m.len() > MAX_DATAGRAM || n == u8::MAX {
                out.clear();
                frame(unit, first as u32, n, &body, out).expect("a datagram's size");
                send(out);
                body.clear();
                first = from + i as u64;
                n = 0;
            }
            body.extend_from_slice(m);
            n += 1;
        }
        out.clear();
        frame(unit, first as u32, n, &body, out).expect("a datagram's size");
        send(out);
        GapStatus::Accepted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cboe_pitch::messages::{encode_to_vec, Message};

    fn datagram(unit: u8, seq: u32, n: u8) -> Vec<u8> {
        let mut body = Vec::new();
        for i in 0..n {
            body.extend(
                encode_to_vec(&Message::Time {
                    seconds: seq + i as u32,
                })
                .unwrap(),
            );
        }
        let mut out = Vec::new();
        frame(unit, seq, n, &body, &mut out).unwrap();
        out
    }

    fn answers(h: &PitchHistory, unit: u8, seq: u32, count: u16) -> (GapStatus, Vec<Vec<u8>>) {
        let mut sent = Vec::new();
        let mut out = Vec::new();
        let s = h.answer(unit, seq, count, 1000, &mut out, |d| sent.push(d.to_vec()));
        (s, sent)
    }

    #[test]
    fn answers_the_exact_messages_with_their_sequences() {
        let mut h = PitchHistory::new(100);
        h.record(&datagram(1, 1, 3));
        h.record(&datagram(1, 4, 2));
        h.record(&datagram(2, 1, 1));
        let mut hb = Vec::new();
        frame(1, 6, 0, &[], &mut hb).unwrap();
        h.record(&hb);
        assert_eq!(h.range(1), Some((1, 6)));
        assert_eq!(h.range(2), Some((1, 2)));
        let (s, sent) = answers(&h, 1, 2, 3);
        assert_eq!(s, GapStatus::Accepted);
        let mut want = Vec::new();
        let body: Vec<u8> = (2..5u32)
            .flat_map(|i| encode_to_vec(&Message::Time { seconds: i }).unwrap())
            .collect();
        frame(1, 2, 3, &body, &mut want).unwrap();
        assert_eq!(sent, [want]);
        assert_eq!(
            answers(&h, 1, 5, 2).0,
            GapStatus::OutOfRange,
            "not yet sent"
        );
        assert_eq!(answers(&h, 3, 1, 1).0, GapStatus::InvalidUnit);
        let mut out = Vec::new();
        assert_eq!(
            h.answer(1, 1, 5, 4, &mut out, |_| panic!("refused")),
            GapStatus::CountTooLarge
        );
    }

    #[test]
    fn bounded_per_unit_and_split_at_1400_bytes() {
        let mut h = PitchHistory::new(500);
        for i in 0..100u32 {
            h.record(&datagram(7, 1 + i * 10, 10));
        }
        assert_eq!(h.range(7), Some((501, 1001)));
        assert_eq!(answers(&h, 7, 500, 1).0, GapStatus::OutOfRange, "too old");
        let (s, sent) = answers(&h, 7, 501, 500);
        assert_eq!(s, GapStatus::Accepted);
        let mut next = 501u64;
        for d in &sent {
            assert!(d.len() <= MAX_DATAGRAM);
            let p = Datagram::parse(d).unwrap();
            assert_eq!(p.header.unit, 7);
            assert_eq!(p.header.sequence as u64, next);
            next += p.header.count as u64;
        }
        assert_eq!(next, 1001);
        assert!(sent.len() > 1);
    }

    #[test]
    fn a_new_session_starts_the_unit_again() {
        let mut h = PitchHistory::new(10);
        h.record(&datagram(1, 1, 5));
        h.record(&datagram(1, 1, 2));
        assert_eq!(h.range(1), Some((1, 3)));
    }
}
