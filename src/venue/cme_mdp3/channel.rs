//! The channel sequence of a CME incremental feed (venues.md `cme-mdp3`,
//! Channel rules): each packet is one unit, numbered by MsgSeqNum. CME
//! sends no session id and no end of session, so a session is told by
//! SendingTime: a packet below `next` sent later than the latest processed
//! one starts a new session (CME restarted its numbering: C5); a packet
//! sent before the current session's first belongs to a replaced session
//! (dropped, counted); any other packet below `next` is a duplicate (C2).
//!
//! This is the classification alone, pure; the channel rules' effects
//! (loss counts, unverified symbols, liveness, the hold of recovery.md,
//! C3b's bound on believable jumps) are the engine's.

/// What a packet of an incremental line is to the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketClass {
    /// The first packet of the feed: the baseline (C1).
    First,
    /// MsgSeqNum = `next`.
    InOrder,
    /// MsgSeqNum beyond `next`: `lost` packets missing (C3).
    Gap { lost: u64 },
    /// Below `next` and sent later than the latest processed packet: a new
    /// session from this packet (C5, then C1).
    NewSession,
    /// Sent before the current session's first packet: dropped, counted.
    ReplacedSession,
    /// Below `next`, not sent later: another line's copy (C2).
    Duplicate,
}

/// The channel's sequence state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sequence {
    /// The next MsgSeqNum expected (`None` before the first packet).
    next: Option<u64>,
    /// SendingTime of the current session's first packet.
    session_start: u64,
    /// SendingTime of the latest processed packet.
    latest: u64,
}

impl Sequence {
    /// The MsgSeqNum expected next, once a packet was processed.
    pub fn next(&self) -> Option<u64> {
        self.next
    }

    /// SendingTime of the current session's first packet (0 before one).
    pub fn session_start(&self) -> u64 {
        self.session_start
    }

    /// What a packet (MsgSeqNum `seq`, SendingTime `sent`) is, without
    /// changing anything.
    pub fn classify(&self, seq: u32, sent: u64) -> PacketClass {
        let seq = u64::from(seq);
        let Some(next) = self.next else {
            return PacketClass::First;
        };
        if sent < self.session_start {
            return PacketClass::ReplacedSession;
        }
        if seq < next {
            return if sent > self.latest {
                PacketClass::NewSession
            } else {
                PacketClass::Duplicate
            };
        }
        if seq == next {
            PacketClass::InOrder
        } else {
            PacketClass::Gap { lost: seq - next }
        }
    }

    /// Processes a packet the engine let through as `class` (anything but
    /// a duplicate or a replaced session's): `next` moves past it.
    pub fn process(&mut self, seq: u32, sent: u64, class: PacketClass) {
        if matches!(class, PacketClass::First | PacketClass::NewSession) {
            self.session_start = sent;
            self.latest = sent;
        }
        self.next = Some(u64::from(seq) + 1);
        self.latest = self.latest.max(sent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Classifies and processes what is not dropped.
    fn feed(s: &mut Sequence, seq: u32, sent: u64) -> PacketClass {
        let c = s.classify(seq, sent);
        if !matches!(c, PacketClass::Duplicate | PacketClass::ReplacedSession) {
            s.process(seq, sent, c);
        }
        c
    }

    #[test]
    fn gaps_duplicates_and_sessions_by_sending_time() {
        use PacketClass::*;
        let mut s = Sequence::default();
        assert_eq!(feed(&mut s, 100, 10), First);
        assert_eq!(feed(&mut s, 101, 11), InOrder);
        // The other line's copy of 100, sent at 10.
        assert_eq!(feed(&mut s, 100, 10), Duplicate);
        assert_eq!(feed(&mut s, 105, 12), Gap { lost: 3 });
        assert_eq!(s.next(), Some(106));
        // A late copy of a lost packet, sent before the latest: duplicate.
        assert_eq!(feed(&mut s, 103, 11), Duplicate);
        // Numbering restarted, sent later: a new session.
        assert_eq!(feed(&mut s, 1, 30), NewSession);
        assert_eq!(s.session_start(), 30);
        assert_eq!(feed(&mut s, 2, 31), InOrder);
        // The old session's packet 106, sent before the new session began.
        assert_eq!(feed(&mut s, 106, 13), ReplacedSession);
        assert_eq!(feed(&mut s, 3, 32), InOrder);
        // A packet sent at the same time as the latest is no new session.
        assert_eq!(feed(&mut s, 2, 32), Duplicate);
    }
}
