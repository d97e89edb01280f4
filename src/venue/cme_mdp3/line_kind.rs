//! What a destination carries, told by its messages' templates: for a
//! replay without a config (venues.md `cme-mdp3`, "Lines in a replay
//! without a config"), which has no `kind` for its lines. Sans-I/O.

use super::messages::{decode, Body, Item};
use super::sbe;
use crate::venue::LineKind;

/// The templates seen on one destination, counted by what they tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineEvidence {
    /// Datagrams with an incremental refresh, a SecurityStatus or a
    /// ChannelReset: only an incremental line carries these.
    pub incremental: u64,
    /// Datagrams with a SnapshotFullRefresh: only a snapshot loop.
    pub snapshot: u64,
    /// Datagrams with an instrument definition: a definition loop, or an
    /// incremental line announcing an instrument.
    pub definition: u64,
    /// Datagrams that tell nothing (heartbeats only, unknown templates) or
    /// are no MDP 3.0 packet.
    pub silent: u64,
}

/// What the evidence of one destination says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// One kind, with what told it.
    Kind(LineKind),
    /// Nothing but heartbeats or unreadable datagrams: taken as
    /// incremental, the kind without a loop's sequence rules.
    Untold,
    /// Snapshots and incremental messages both: no reading is safe.
    Mixed,
}

impl LineEvidence {
    /// Counts one datagram sent to the destination.
    pub fn add(&mut self, datagram: &[u8]) {
        let Ok((_, msgs)) = sbe::packet(datagram) else {
            self.silent += 1;
            return;
        };
        let (mut inc, mut snap, mut def) = (false, false, false);
        for raw in msgs {
            let Ok(raw) = raw else { break };
            let Ok(Item::Known { body, .. }) = decode(&raw) else {
                continue;
            };
            match body {
                Body::Incremental { .. } | Body::SecurityStatus(_) | Body::ChannelReset => {
                    inc = true
                }
                Body::Snapshot(_) => snap = true,
                Body::Definition(_) => def = true,
                Body::AdminHeartbeat => {}
            }
        }
        match (inc, snap, def) {
            (true, _, _) => self.incremental += 1,
            (false, true, _) => self.snapshot += 1,
            (false, false, true) => self.definition += 1,
            _ => self.silent += 1,
        }
        if inc && snap {
            // One datagram with both: counted on both sides, so `verdict`
            // calls the destination mixed.
            self.snapshot += 1;
        }
    }

    /// The kind the evidence tells. Definitions alone make a definition
    /// loop (an incremental line also carries incremental messages);
    /// snapshots with definitions a snapshot loop (MDP 3.0 sends them on
    /// separate loops, but a capture may merge two of a channel's loops
    /// on one destination only by mistake, and neither is incremental).
    pub fn verdict(&self) -> Verdict {
        match (self.incremental > 0, self.snapshot > 0, self.definition > 0) {
            (true, true, _) => Verdict::Mixed,
            (true, false, _) => Verdict::Kind(LineKind::Incremental),
            (false, true, _) => Verdict::Kind(LineKind::Snapshot),
            (false, false, true) => Verdict::Kind(LineKind::Definition),
            (false, false, false) => Verdict::Untold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cme_mdp3::encode;

    fn packet(seq: u32, write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        encode::start_packet(&mut out, seq, 1_000);
        write(&mut out);
        out
    }

    fn snapshot() -> Vec<u8> {
        packet(1, |out| {
            encode::snapshot(
                out,
                &encode::Snapshot {
                    last_msg_seq_num: 7,
                    tot_num_reports: 1,
                    security_id: 1,
                    rpt_seq: 3,
                    transact_time: 1_000,
                    trading_status: None,
                    levels: &[],
                },
            )
        })
    }

    fn definition() -> Vec<u8> {
        packet(1, |out| {
            encode::definition(
                out,
                &encode::Definition {
                    tot_num_reports: 1,
                    update_action: b'A',
                    symbol: b"ESZ6",
                    security_id: 1,
                    security_group: b"ES",
                    depth: 10,
                    trading_status: None,
                    last_update_time: 1_000,
                },
            )
        })
    }

    fn incremental() -> Vec<u8> {
        packet(2, |out| encode::channel_reset(out, 1_000))
    }

    fn verdict(datagrams: &[Vec<u8>]) -> Verdict {
        let mut e = LineEvidence::default();
        for d in datagrams {
            e.add(d);
        }
        e.verdict()
    }

    #[test]
    fn kinds_from_templates() {
        let heartbeat = packet(1, encode::heartbeat);
        assert_eq!(verdict(&[]), Verdict::Untold);
        assert_eq!(
            verdict(&[b"not a packet".to_vec(), heartbeat.clone()]),
            Verdict::Untold
        );
        assert_eq!(
            verdict(&[heartbeat.clone(), snapshot(), snapshot()]),
            Verdict::Kind(LineKind::Snapshot)
        );
        assert_eq!(
            verdict(&[definition(), heartbeat.clone()]),
            Verdict::Kind(LineKind::Definition)
        );
        // An incremental line announcing an instrument stays incremental.
        assert_eq!(
            verdict(&[definition(), incremental(), heartbeat]),
            Verdict::Kind(LineKind::Incremental)
        );
        assert_eq!(verdict(&[snapshot(), incremental()]), Verdict::Mixed);
        let mut both = snapshot();
        encode::channel_reset(&mut both, 1_000);
        assert_eq!(verdict(&[both]), Verdict::Mixed);
    }
}
