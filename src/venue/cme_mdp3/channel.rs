//! The channel sequence of a CME incremental feed (venues.md `cme-mdp3`,
//! Channel rules): each packet is one unit, numbered by MsgSeqNum. CME
//! sends no session id and no end of session, so a session is told by
//! SendingTime: a packet below `next` sent later than the latest processed
//! one is a **candidate** for a new session, which changes nothing until
//! the next packet of its numbering (MsgSeqNum + 1, sent at or after it)
//! confirms it (C5); a packet of the current session sent after the
//! candidate discards it, so one datagram never restarts a channel. A
//! packet sent before the current session's first belongs to a replaced
//! session (dropped, counted); any other packet below `next` is a
//! duplicate (C2).
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
    /// Below `next` and sent later than the latest processed packet: a
    /// candidate for a new session, kept aside and changing nothing (it
    /// replaces any earlier candidate).
    Candidate,
    /// The candidate's MsgSeqNum + 1, sent at or after it, below `next`:
    /// the session changes (C5); the candidate is the new session's first
    /// packet (C1), this packet the one after it.
    Confirms,
    /// Sent before the current session's first packet: dropped, counted.
    ReplacedSession,
    /// Below `next`, not sent later: another line's copy (C2).
    Duplicate,
}

/// A packet waiting to be confirmed as a new session's first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub seq: u32,
    pub sent: u64,
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
    /// The session candidate waiting for its confirmation (at most one).
    candidate: Option<Candidate>,
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

    /// The candidate for a new session, while one waits.
    pub fn candidate(&self) -> Option<Candidate> {
        self.candidate
    }

    /// What a packet (MsgSeqNum `seq`, SendingTime `sent`) is, without
    /// changing anything.
    pub fn classify(&self, seq: u32, sent: u64) -> PacketClass {
        let seq64 = u64::from(seq);
        let Some(next) = self.next else {
            return PacketClass::First;
        };
        if sent < self.session_start {
            return PacketClass::ReplacedSession;
        }
        if seq64 < next {
            // C5 by candidate: only a packet the current session would not
            // process confirms (the current session's own next packet,
            // sent after a planted candidate, must not restart it).
            if let Some(c) = self.candidate {
                if c.seq.checked_add(1) == Some(seq) && sent >= c.sent {
                    return PacketClass::Confirms;
                }
            }
            return if sent > self.latest {
                PacketClass::Candidate
            } else {
                PacketClass::Duplicate
            };
        }
        if seq64 == next {
            PacketClass::InOrder
        } else {
            PacketClass::Gap { lost: seq64 - next }
        }
    }

    /// Processes a packet the engine let through as `class` (anything but
    /// a duplicate or a replaced session's): a candidate is kept aside;
    /// otherwise `next` moves past the packet (past the candidate and its
    /// confirmation for `Confirms`).
    pub fn process(&mut self, seq: u32, sent: u64, class: PacketClass) {
        match class {
            PacketClass::Candidate => {
                self.candidate = Some(Candidate { seq, sent });
                return;
            }
            PacketClass::First => {
                self.session_start = sent;
                self.latest = sent;
                self.candidate = None;
            }
            PacketClass::Confirms => {
                let start = self.candidate.take().map_or(sent, |c| c.sent);
                self.session_start = start;
                self.latest = start;
            }
            PacketClass::InOrder | PacketClass::Gap { .. } => {
                // A packet of the current session sent after the candidate:
                // the channel did not restart.
                if self.candidate.is_some_and(|c| sent > c.sent) {
                    self.candidate = None;
                }
            }
            PacketClass::ReplacedSession | PacketClass::Duplicate => return,
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
        // Numbering restarted, sent later: a candidate, nothing changed.
        assert_eq!(feed(&mut s, 1, 30), Candidate);
        assert_eq!((s.next(), s.session_start()), (Some(106), 10));
        // Its other line's copy replaces it with itself.
        assert_eq!(feed(&mut s, 1, 30), Candidate);
        // Its next packet confirms it: the session began with the candidate.
        assert_eq!(feed(&mut s, 2, 31), Confirms);
        assert_eq!((s.next(), s.session_start()), (Some(3), 30));
        // The old session's packet 106, sent before the new session began.
        assert_eq!(feed(&mut s, 106, 13), ReplacedSession);
        assert_eq!(feed(&mut s, 3, 32), InOrder);
        // A packet sent at the same time as the latest is no candidate.
        assert_eq!(feed(&mut s, 2, 32), Duplicate);
    }

    #[test]
    fn a_candidate_is_discarded_by_the_current_session() {
        use PacketClass::*;
        let mut s = Sequence::default();
        assert_eq!(feed(&mut s, 50, 10), First);
        // An hour ahead: a candidate.
        assert_eq!(feed(&mut s, 1, 3_600_010), Candidate);
        // The current session goes on; sent before it, it keeps it.
        assert_eq!(feed(&mut s, 51, 11), InOrder);
        assert!(s.candidate().is_some());
        // A later candidate replaces it.
        assert_eq!(feed(&mut s, 1, 12), Candidate);
        assert_eq!(s.candidate(), Some(super::Candidate { seq: 1, sent: 12 }));
        // The current session's packet sent after it discards it.
        assert_eq!(feed(&mut s, 52, 13), InOrder);
        assert_eq!(s.candidate(), None);
        assert_eq!(feed(&mut s, 2, 14), Candidate, "nothing to confirm");
        // A candidate just below `next`: the current session's own next
        // packet is that session's, never a confirmation.
        assert_eq!(feed(&mut s, 52, 15), Candidate);
        assert_eq!(feed(&mut s, 53, 16), InOrder);
        assert_eq!(s.candidate(), None);
        assert_eq!(s.session_start(), 10);
    }
}
