//! Channel rules C1-C6 of `semantics.md`: the packet-level sequence of one
//! feed, shared by all its lines (A/B arbitration is C2: whichever line
//! delivers a block first wins, the other copy is a duplicate).
//!
//! This module decides what a valid packet means for the channel; the feed
//! (`engine`) applies the consequences to symbols, in O(1) per packet:
//! C3/C5 become epoch increments, C6 a flag (see `view`).

pub use crate::venue::ChannelHeader;
use crate::wire::{PacketKind, SessionId};

/// How many sessions are remembered to recognise packets of a replaced
/// session (C5) and to list sessions in order. Older ones are forgotten:
/// a packet of a session replaced more than this many sessions ago would
/// be taken as a new session.
pub const SESSION_HISTORY: usize = 64;

/// What to do with a valid packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketAction {
    /// C2: every block already delivered (or a lagging channel heartbeat,
    /// or another copy of the end of session): dropped, counted per line.
    Duplicate,
    /// C5/C6: a packet of a replaced or ended session: dropped, counted.
    StaleSession,
    /// Apply message blocks `skip..count` (C2: blocks before `next` are
    /// skipped).
    Data { skip: u16 },
    /// A channel heartbeat (count 0) that was not a lagging copy.
    Heartbeat,
    /// C6: the current session ended.
    EndOfSession,
    /// C3b: a sequence `max_channel_jump` or more beyond `next`, not
    /// believed: dropped, counted, nothing changed.
    Unbelievable,
    /// C6: an end of session below `next`: a stale or forged copy, dropped,
    /// counted, nothing changed.
    StaleEnd,
}

/// Side effects of a packet on the channel, for the feed to apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelEvents {
    /// C5: a new session replaced the current one (not set for the first).
    pub session_change: bool,
    /// C1: the first packet of a session set the baseline.
    pub baseline: bool,
    /// C3: messages lost before this packet (> 0: a channel gap).
    pub lost: u64,
    /// C4: processed without a gap: the channel is alive now.
    pub alive: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Channel {
    /// Sessions in order of appearance (bounded); the last is the current.
    sessions: Vec<SessionId>,
    /// C6: the current session ended.
    ended: bool,
    /// The next expected channel sequence number.
    next: u64,
    /// Total sessions seen (the list above is bounded).
    sessions_total: u64,
    /// C3b: `max_channel_jump` (at least 1).
    max_jump: u64,
    /// C3b: unbelievable packets in a row, each continuing the previous.
    jump_run: u8,
    /// C3b: where the run began and where its last packet ended.
    jump_start: u64,
    jump_end: u64,
}

/// C3b: the default `max_channel_jump`.
pub const DEFAULT_MAX_CHANNEL_JUMP: u64 = 1_000_000;

/// C3b: consecutive unbelievable packets that prove the provider jumped.
const JUMP_RESYNC: u8 = 3;

impl Channel {
    pub fn new() -> Channel {
        Channel::with_max_jump(DEFAULT_MAX_CHANNEL_JUMP)
    }

    /// A channel whose `max_channel_jump` (C3b) is `max_jump` (0 is taken
    /// as 1).
    pub fn with_max_jump(max_jump: u64) -> Channel {
        Channel {
            sessions: Vec::with_capacity(SESSION_HISTORY),
            max_jump: max_jump.max(1),
            ..Channel::default()
        }
    }

    /// C3b: whether a packet of the current session starting at `sequence`
    /// is within `max_channel_jump` of `next` (a packet at or before `next`
    /// is always believed).
    #[inline]
    pub fn believed(&self, sequence: u64) -> bool {
        sequence <= self.next || sequence - self.next < self.max_jump
    }

    pub fn current_session(&self) -> Option<SessionId> {
        self.sessions.last().copied()
    }

    /// Sessions seen, oldest first (the last `SESSION_HISTORY`).
    pub fn sessions(&self) -> &[SessionId] {
        &self.sessions
    }

    pub fn sessions_total(&self) -> u64 {
        self.sessions_total
    }

    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The next expected channel sequence number (meaningful once a session
    /// is known).
    pub fn next_sequence(&self) -> u64 {
        self.next
    }

    fn start_session(&mut self, session: SessionId, sequence: u64) {
        if self.sessions.len() == SESSION_HISTORY {
            self.sessions.remove(0);
        }
        self.sessions.push(session);
        self.sessions_total += 1;
        self.ended = false;
        self.jump_run = 0;
        // C1: late join is not loss.
        self.next = sequence;
    }

    /// C3b: whether this unbelievable packet would be the third of a run,
    /// processed as a channel gap (nothing changes).
    pub fn jump_would_resync(&self, p: &ChannelHeader) -> bool {
        let seq = p.sequence;
        let end = match p.kind {
            PacketKind::Data => seq.saturating_add(p.count as u64),
            _ => seq,
        };
        let copy = self.jump_run > 0 && seq >= self.jump_start && end <= self.jump_end;
        !copy && self.jump_run + 1 >= JUMP_RESYNC && seq == self.jump_end
    }

    /// C3b: an unbelievable packet `[seq, end)`: `true` when it is the
    /// third of a run of consecutive ones (the provider did jump), else it
    /// is dropped. A copy of a packet already in the run (the other line's)
    /// neither extends nor breaks the run.
    fn jump_resyncs(&mut self, seq: u64, end: u64) -> bool {
        if self.jump_run > 0 && seq >= self.jump_start && end <= self.jump_end {
            return false;
        }
        if self.jump_run > 0 && seq == self.jump_end {
            self.jump_run += 1;
        } else {
            self.jump_run = 1;
            self.jump_start = seq;
        }
        self.jump_end = end;
        if self.jump_run >= JUMP_RESYNC {
            self.jump_run = 0;
            return true;
        }
        false
    }

    /// recovery.md R5: a snapshot reflects every message before `next`.
    pub fn set_next(&mut self, next: u64) {
        self.next = next;
        self.jump_run = 0;
    }

    /// C6 signalled inside a data packet (IEX System Event `C`), after the
    /// packet's other messages were applied.
    pub fn end_session(&mut self) {
        self.ended = true;
    }

    /// Most of a day's packets, decided first: the data packet that starts
    /// at `next` in the current session, not ended, and takes the channel
    /// past it. C4, nothing skipped (C2) and no run of jumps left (C3b):
    /// exactly what the general rules below give it, in fewer tests.
    #[inline(always)]
    fn next_in_sequence(&mut self, p: &ChannelHeader) -> Option<(PacketAction, ChannelEvents)> {
        let end = p.sequence.saturating_add(p.count as u64);
        let steady = p.kind == PacketKind::Data
            && p.sequence == self.next
            && end > self.next
            && !self.ended
            && !p.stale_session
            && self.sessions.last() == Some(&p.session);
        if !steady {
            return None;
        }
        self.jump_run = 0;
        self.next = end;
        let ev = ChannelEvents {
            alive: true,
            ..ChannelEvents::default()
        };
        Some((PacketAction::Data { skip: 0 }, ev))
    }

    /// Classifies a valid packet and advances the channel.
    pub fn on_packet(&mut self, p: &ChannelHeader) -> (PacketAction, ChannelEvents) {
        match self.next_in_sequence(p) {
            Some(steady) => steady,
            None => self.classify(p),
        }
    }

    /// The channel rules for any valid packet.
    fn classify(&mut self, p: &ChannelHeader) -> (PacketAction, ChannelEvents) {
        let mut ev = ChannelEvents::default();
        if p.stale_session {
            // C5, told by the venue (venues.md `cme-mdp3`: sent before the
            // current session began).
            return (PacketAction::StaleSession, ev);
        }
        let kind = p.kind;
        match self.sessions.last() {
            None => {
                // C1
                self.start_session(p.session, p.sequence);
                ev.baseline = true;
            }
            Some(&current) if current == p.session => {
                if self.ended {
                    // C6: later packets of the ended session are dropped;
                    // the other line's copy of the end (or of a packet
                    // already delivered, such as the one that ended it on
                    // IEX) is a duplicate.
                    let copy = match kind {
                        PacketKind::EndOfSession => true,
                        PacketKind::Heartbeat => p.sequence < self.next,
                        PacketKind::Data => p.sequence.saturating_add(p.count as u64) <= self.next,
                    };
                    let action = if copy {
                        PacketAction::Duplicate
                    } else {
                        PacketAction::StaleSession
                    };
                    return (action, ev);
                }
            }
            Some(_) => {
                if self.sessions.contains(&p.session) {
                    // C5: a session already replaced (a lagging line)
                    // cannot flip the feed back.
                    return (PacketAction::StaleSession, ev);
                }
                // C5: provider restart; the channel re-baselines (C1).
                self.start_session(p.session, p.sequence);
                ev.session_change = true;
                ev.baseline = true;
            }
        }
        let seq = p.sequence;
        let end = match kind {
            PacketKind::Data => seq.saturating_add(p.count as u64),
            _ => seq,
        };
        if !ev.baseline {
            if !self.believed(seq) {
                // C3b
                if !self.jump_resyncs(seq, end) {
                    return (PacketAction::Unbelievable, ev);
                }
            } else if end > self.next || (seq == self.next && kind != PacketKind::Data) {
                // A believed packet that is not a lagging copy ends a run.
                self.jump_run = 0;
            }
        }
        match kind {
            PacketKind::Heartbeat => {
                if seq > self.next {
                    // C3: the heartbeat reveals a gap; refreshes nothing.
                    ev.lost = seq - self.next;
                    self.next = seq;
                } else if seq == self.next {
                    // C4
                    ev.alive = true;
                } else {
                    // C4: a lagging line's copy changes nothing.
                    return (PacketAction::Duplicate, ev);
                }
                (PacketAction::Heartbeat, ev)
            }
            PacketKind::EndOfSession => {
                if seq < self.next {
                    // C6: a stale or forged copy changes nothing.
                    return (PacketAction::StaleEnd, ev);
                }
                // Its sequence is the next the provider would have sent:
                // anything before it that never arrived is lost (C3).
                if seq > self.next {
                    ev.lost = seq - self.next;
                    self.next = seq;
                }
                // C6
                self.ended = true;
                (PacketAction::EndOfSession, ev)
            }
            PacketKind::Data => {
                if end <= self.next {
                    // C2: all blocks precede `next`.
                    return (PacketAction::Duplicate, ev);
                }
                let skip = if seq > self.next {
                    // C3: channel gap; `next` moves past the packet.
                    ev.lost = seq - self.next;
                    0
                } else {
                    // C4: processed without a gap. C2: skip what the other
                    // line already delivered (< count since end > next).
                    ev.alive = true;
                    (self.next - seq) as u16
                };
                self.next = end;
                (PacketAction::Data { skip }, ev)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packet() -> impl Strategy<Value = ChannelHeader> {
        (
            0u8..3,
            0u64..12,
            0u8..3,
            0u16..4,
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(session, sequence, kind, count, stale_session)| {
                let kind = match kind {
                    0 => PacketKind::Data,
                    1 => PacketKind::Heartbeat,
                    _ => PacketKind::EndOfSession,
                };
                ChannelHeader {
                    session: SessionId([b'0' + session; 10]),
                    // Near the end of the range too: `end` saturates there.
                    sequence: if sequence == 11 {
                        u64::MAX - 1
                    } else {
                        sequence
                    },
                    kind,
                    count: if kind == PacketKind::Data { count } else { 0 },
                    stale_session,
                }
            })
    }

    proptest! {
        /// The steady case decided first gives what the general rules
        /// give, whatever came before: same action, events and state.
        #[test]
        fn the_steady_case_agrees_with_the_general_rules(
            max_jump in 1u64..8,
            packets in proptest::collection::vec(packet(), 1..60),
        ) {
            let mut fast = Channel::with_max_jump(max_jump);
            let mut general = fast.clone();
            for p in &packets {
                prop_assert_eq!(fast.on_packet(p), general.classify(p), "{:?}", p);
                prop_assert_eq!(format!("{fast:?}"), format!("{general:?}"));
            }
        }
    }

    #[test]
    fn a_day_in_sequence_takes_the_steady_case() {
        let session = SessionId(*b"0000000001");
        let mut c = Channel::new();
        let mut p = ChannelHeader {
            session,
            sequence: 1,
            kind: PacketKind::Data,
            count: 3,
            stale_session: false,
        };
        // The first packet sets the baseline (C1): not the steady case.
        assert!(c.clone().next_in_sequence(&p).is_none());
        c.on_packet(&p);
        for _ in 0..5 {
            p.sequence = c.next_sequence();
            assert!(c.clone().next_in_sequence(&p).is_some());
            let (action, ev) = c.on_packet(&p);
            assert_eq!(action, PacketAction::Data { skip: 0 });
            assert!(ev.alive && ev.lost == 0 && !ev.baseline && !ev.session_change);
        }
        assert_eq!(c.next_sequence(), 19);
    }
}
