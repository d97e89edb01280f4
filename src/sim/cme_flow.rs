//! A simulated CME MDP 3.0 channel (`tickgate simulate --venue cme-mdp3`):
//! what CME writes into the incremental packets (Market By Price books of
//! `depth` levels moved by New, Change and Delete entries, each with its
//! instrument's RptSeq), and the two loops on their own lines: the Market
//! Recovery loop (one SnapshotFullRefresh 52 per instrument, as of the
//! last incremental packet) and the Instrument Recovery loop (one
//! definition 54 per instrument, TotNumReports the instrument count).
//! Channel resets and a SecurityGroup's halt and resumption come on
//! request. Sans-I/O and seeded; the books are the truth a receiver's
//! books are compared with.
//!
//! Instruments are futures `F0001`, `F0002`, ... with every fourth a
//! calendar spread named by its legs (`F0003-F0004`), and one 20-character
//! name (`F0001-F0002-F0003-F4`) when there are at least 8, so that names
//! longer than 8 characters are on every path; they belong to the
//! SecurityGroups `GA` (even index) and `GB` (odd).

use super::seeded::SplitMix64;
use super::venue_sim::{FlowRequest, VenueFlow};
use crate::capture::frame::MAX_DATAGRAM;
use crate::venue::cme_mdp3::encode::{self, BookEntry, SnapshotLevel};
use crate::venue::cme_mdp3::sbe::PACKET_HEADER_LEN;
use crate::venue::LineKind;

/// Levels per side (the definitions' GBX depth).
pub const DEPTH: usize = 5;
/// MDUpdateAction values written.
const NEW: u8 = 0;
const CHANGE: u8 = 1;
const DELETE: u8 = 2;
const BID: u8 = b'0';
const OFFER: u8 = b'1';
/// SecurityTradingStatus: ready to trade, and halted.
pub const TRADING: u8 = 17;
pub const HALTED: u8 = 2;
/// The SecurityGroup `--halt-at` and `--resume-at` act on.
pub const HALT_GROUP: &[u8] = b"GA";
/// The first SecurityID; instrument `i` has `FIRST_ID + i`.
pub const FIRST_ID: i32 = 10_001;

/// One price level: price x 10^-9 and size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Level {
    pub px: i64,
    pub size: i32,
}

/// An instrument as the provider holds it.
#[derive(Clone, Debug)]
pub struct SimInstrument {
    pub security_id: i32,
    pub name: String,
    pub group: &'static [u8],
    /// RptSeq of the last entry sent (0: none since the last reset).
    pub rpt_seq: u32,
    /// Best first; empty until its first entries after a (re)start.
    pub bids: Vec<Level>,
    pub offers: Vec<Level>,
    pub tick: i64,
    /// Where the book is (re)built around, in ticks.
    mid: i64,
    /// The last SecurityStatus sent for its group (0: none).
    pub status: u8,
}

impl SimInstrument {
    /// Level 1 of each side.
    pub fn top(&self) -> (Option<Level>, Option<Level>) {
        (self.bids.first().copied(), self.offers.first().copied())
    }
}

/// The name of instrument `i` of `n`.
pub fn instrument_name(i: usize, n: usize) -> String {
    if n >= 8 && i == 7 {
        // 20 characters: the longest a definition's Symbol holds.
        return "F0001-F0002-F0003-F4".to_string();
    }
    if i % 4 == 3 {
        format!("F{:04}-F{:04}", i + 1, i + 2)
    } else {
        format!("F{:04}", i + 1)
    }
}

/// The seeded CME channel.
pub struct CmeFlow {
    instruments: Vec<SimInstrument>,
    /// MsgSeqNum of the last incremental packet written (its loops' `m`).
    last_seq: u32,
    session: u32,
    entries: Vec<BookEntry>,
    /// SecurityIDs of the entries of the last data packet.
    touched: Vec<i32>,
    /// Instruments whose entries were in a packet lost on every line.
    lost_touched: std::collections::BTreeSet<i32>,
    /// Requests for the next data packet.
    reset_requested: bool,
    group_status: Option<(&'static [u8], u8)>,
    snapshot_cursor: usize,
    snapshot_seq: u32,
    definition_cursor: usize,
    definition_seq: u32,
    levels: Vec<SnapshotLevel>,
}

impl CmeFlow {
    /// `instruments` books (at least 1).
    pub fn new(instruments: usize, seed: u64) -> CmeFlow {
        let n = instruments.max(1);
        let mut m = SplitMix64::new(seed ^ 0xC3E0_5EED);
        CmeFlow {
            instruments: (0..n)
                .map(|i| SimInstrument {
                    security_id: FIRST_ID + i as i32,
                    name: instrument_name(i, n),
                    group: if i % 2 == 0 { b"GA" } else { b"GB" },
                    rpt_seq: 0,
                    bids: Vec::with_capacity(DEPTH),
                    offers: Vec::with_capacity(DEPTH),
                    // 0.25 index points.
                    tick: 250_000_000,
                    mid: 4_000 + m.below(20_000) as i64,
                    status: 0,
                })
                .collect(),
            last_seq: 0,
            session: 0,
            entries: Vec::with_capacity(64),
            touched: Vec::with_capacity(64),
            lost_touched: Default::default(),
            reset_requested: false,
            group_status: None,
            snapshot_cursor: 0,
            snapshot_seq: 0,
            definition_cursor: 0,
            definition_seq: 0,
            levels: Vec::with_capacity(2 * DEPTH),
        }
    }

    pub fn instruments(&self) -> &[SimInstrument] {
        &self.instruments
    }

    /// SecurityIDs of the last data packet's entries (repeats possible).
    pub fn last_packet_instruments(&self) -> &[i32] {
        &self.touched
    }

    /// The next data packet starts with a ChannelReset: every book is
    /// emptied and every RptSeq restarts at 1.
    pub fn request_channel_reset(&mut self) {
        self.reset_requested = true;
    }

    /// The next data packet starts with a SecurityStatus for `group`.
    pub fn request_group_status(&mut self, group: &'static [u8], status: u8) {
        self.group_status = Some((group, status));
    }

    /// A packet of the Market Recovery loop into `out`, as of the last
    /// incremental packet: as many instruments' snapshots as fit, the loop
    /// going round. `sending_time` in Unix ns.
    pub fn snapshot_packet(&mut self, sending_time: u64, out: &mut Vec<u8>) {
        self.snapshot_seq = self.snapshot_seq.wrapping_add(1);
        encode::start_packet(out, self.snapshot_seq, sending_time);
        let n = self.instruments.len();
        for _ in 0..n {
            let i = self.snapshot_cursor;
            let inst = &self.instruments[i];
            self.levels.clear();
            for (side, t) in [(&inst.bids, BID), (&inst.offers, OFFER)] {
                for (k, l) in side.iter().enumerate() {
                    self.levels.push(SnapshotLevel {
                        px: l.px,
                        size: l.size,
                        orders: None,
                        level: k as u8 + 1,
                        entry_type: t,
                    });
                }
            }
            let need = 12 + 59 + 3 + 22 * self.levels.len();
            if out.len() > PACKET_HEADER_LEN && out.len() + need > MAX_DATAGRAM {
                break;
            }
            encode::snapshot(
                out,
                &encode::Snapshot {
                    last_msg_seq_num: self.last_seq,
                    tot_num_reports: n as u32,
                    security_id: inst.security_id,
                    rpt_seq: inst.rpt_seq,
                    transact_time: sending_time,
                    trading_status: Some(if inst.status == 0 {
                        TRADING
                    } else {
                        inst.status
                    }),
                    levels: &self.levels,
                },
            );
            self.snapshot_cursor = (i + 1) % n;
        }
    }

    /// A packet of the Instrument Recovery loop into `out`: as many
    /// definitions as fit, the loop going round.
    pub fn definition_packet(&mut self, sending_time: u64, out: &mut Vec<u8>) {
        self.definition_seq = self.definition_seq.wrapping_add(1);
        encode::start_packet(out, self.definition_seq, sending_time);
        let n = self.instruments.len();
        for _ in 0..n {
            // A definition 54 with one feed type is 12 + 216 + 4 * 3 + 4.
            if out.len() + 260 > MAX_DATAGRAM {
                break;
            }
            let inst = &self.instruments[self.definition_cursor];
            encode::definition(
                out,
                &encode::Definition {
                    tot_num_reports: n as u32,
                    update_action: b'A',
                    symbol: inst.name.as_bytes(),
                    security_id: inst.security_id,
                    security_group: inst.group,
                    depth: DEPTH as i8,
                    trading_status: Some(TRADING),
                    last_update_time: sending_time,
                },
            );
            self.definition_cursor = (self.definition_cursor + 1) % n;
        }
    }

    /// Entries that (re)build instrument `i`'s book from empty, RptSeq 1 on.
    fn seed(&mut self, i: usize) {
        let inst = &mut self.instruments[i];
        let tick = inst.tick;
        for k in 0..DEPTH as i64 {
            let bid = Level {
                px: (inst.mid - 1 - k) * tick,
                size: 10 + 5 * k as i32,
            };
            let offer = Level {
                px: (inst.mid + 1 + k) * tick,
                size: 12 + 5 * k as i32,
            };
            for (side, l, t) in [(&mut inst.bids, bid, BID), (&mut inst.offers, offer, OFFER)] {
                side.push(l);
                inst.rpt_seq += 1;
                self.entries.push(entry(
                    inst.security_id,
                    inst.rpt_seq,
                    l,
                    k as u8 + 1,
                    NEW,
                    t,
                ));
            }
        }
    }

    /// One change to instrument `i`'s book: a size, or the market moving a
    /// tick (a New at level 1 on one side, the other side's level 1
    /// deleted and a level added at its back).
    fn change(&mut self, m: &mut SplitMix64, i: usize) {
        let inst = &mut self.instruments[i];
        let id = inst.security_id;
        let tick = inst.tick;
        if m.below(5) != 0 {
            let bid_side = m.below(2) == 0;
            let (side, t) = if bid_side {
                (&mut inst.bids, BID)
            } else {
                (&mut inst.offers, OFFER)
            };
            let k = m.below(side.len() as u64) as usize;
            side[k].size = 1 + m.below(500) as i32;
            inst.rpt_seq += 1;
            self.entries
                .push(entry(id, inst.rpt_seq, side[k], k as u8 + 1, CHANGE, t));
            return;
        }
        let up = m.below(2) == 0;
        let size = 1 + m.below(50) as i32;
        // The side that gains a better level, and the side that loses its
        // best one (the same price: the book never crosses).
        let (gain, gain_t, lose, lose_t, step) = if up {
            (&mut inst.bids, BID, &mut inst.offers, OFFER, tick)
        } else {
            (&mut inst.offers, OFFER, &mut inst.bids, BID, -tick)
        };
        let new_best = Level {
            px: gain[0].px + step,
            size,
        };
        gain.insert(0, new_best);
        gain.truncate(DEPTH);
        inst.rpt_seq += 1;
        self.entries
            .push(entry(id, inst.rpt_seq, new_best, 1, NEW, gain_t));
        let gone = lose.remove(0);
        inst.rpt_seq += 1;
        self.entries
            .push(entry(id, inst.rpt_seq, gone, 1, DELETE, lose_t));
        let back = Level {
            px: lose[lose.len() - 1].px + step,
            size: 1 + m.below(100) as i32,
        };
        lose.push(back);
        inst.rpt_seq += 1;
        self.entries
            .push(entry(id, inst.rpt_seq, back, DEPTH as u8, NEW, lose_t));
        inst.mid += if up { 1 } else { -1 };
    }
}

fn entry(security_id: i32, rpt_seq: u32, l: Level, level: u8, action: u8, t: u8) -> BookEntry {
    BookEntry {
        px: Some(l.px),
        size: Some(l.size),
        security_id,
        rpt_seq,
        orders: Some(1),
        level,
        action,
        entry_type: t,
    }
}

/// Entries of a seed: both sides' levels.
const SEED_ENTRIES: usize = 2 * DEPTH;
/// The most entries one packet carries (one book message).
pub const MAX_ENTRIES: usize = (MAX_DATAGRAM - PACKET_HEADER_LEN - 200) / 32;

impl VenueFlow for CmeFlow {
    fn start_session(&mut self, index: u32, _t: i64) {
        self.session = index;
        // A new session (MsgSeqNum from 1): books from empty, RptSeq from 1.
        for inst in &mut self.instruments {
            inst.bids.clear();
            inst.offers.clear();
            inst.rpt_seq = 0;
            inst.status = 0;
        }
    }

    fn data_packet(
        &mut self,
        m: &mut SplitMix64,
        seq: u64,
        t: i64,
        batch: usize,
        out: &mut Vec<u8>,
    ) -> u16 {
        let seq = seq as u32;
        let sent = t.max(0) as u64;
        encode::start_packet(out, seq, sent);
        if std::mem::take(&mut self.reset_requested) {
            encode::channel_reset(out, sent);
            for inst in &mut self.instruments {
                inst.bids.clear();
                inst.offers.clear();
                inst.rpt_seq = 0;
                inst.status = 0;
            }
        }
        if let Some((group, status)) = self.group_status.take() {
            encode::security_status(
                out,
                &encode::SecurityStatus {
                    transact_time: sent,
                    security_group: group,
                    security_id: None,
                    trading_status: status,
                },
            );
            for inst in &mut self.instruments {
                if inst.group == group {
                    inst.status = status;
                }
            }
        }
        self.entries.clear();
        let n = self.instruments.len();
        let batch = batch.clamp(1, MAX_ENTRIES);
        while self.entries.len() < batch {
            let i = m.below(n as u64) as usize;
            let room = MAX_ENTRIES - self.entries.len();
            if self.instruments[i].bids.is_empty() {
                if room < SEED_ENTRIES {
                    break;
                }
                self.seed(i);
            } else {
                if room < 3 {
                    break;
                }
                self.change(m, i);
            }
        }
        encode::book(out, sent, &self.entries);
        self.touched.clear();
        self.touched
            .extend(self.entries.iter().map(|e| e.security_id));
        self.last_seq = seq;
        // The channel counts packets (every packet is one MsgSeqNum).
        1
    }

    fn heartbeat(&mut self, seq: u64, t: i64, out: &mut Vec<u8>) {
        encode::start_packet(out, seq as u32, t.max(0) as u64);
        encode::heartbeat(out);
    }

    fn end_of_session(&mut self, seq: u64, t: i64, out: &mut Vec<u8>) -> u16 {
        // CME has no end-of-session message: a last heartbeat.
        self.heartbeat(seq, t, out);
        1
    }

    fn session_name(&self) -> String {
        // As the receiver numbers sessions told apart by SendingTime.
        format!("cme{:07}", self.session + 1)
    }

    fn heartbeat_count(&self) -> u16 {
        1
    }

    fn loop_packet(&mut self, kind: LineKind, t: i64, out: &mut Vec<u8>) -> bool {
        let t = t.max(0) as u64;
        match kind {
            LineKind::Snapshot => self.snapshot_packet(t, out),
            LineKind::Definition => self.definition_packet(t, out),
            LineKind::Incremental | LineKind::Gap => return false,
        }
        true
    }

    fn request(&mut self, r: FlowRequest) {
        match r {
            FlowRequest::ChannelReset => self.request_channel_reset(),
            FlowRequest::GroupStatus { group, halted } => {
                self.request_group_status(group, if halted { HALTED } else { TRADING })
            }
        }
    }

    fn lost_everywhere(&mut self) {
        self.lost_touched.extend(self.touched.iter().copied());
    }

    fn venue_truth(&self) -> Option<serde_json::Value> {
        // As replay and the gate show a side: `<price>@<qty>`.
        let side = |l: Option<Level>| {
            l.map_or(serde_json::Value::Null, |l| {
                let mut s = String::new();
                let _ = crate::wire::write_price(&mut s, l.px);
                serde_json::Value::String(format!("{s}@{}", l.size))
            })
        };
        let name_of = |id: i32| {
            self.instruments
                .iter()
                .find(|i| i.security_id == id)
                .map_or_else(|| format!("#{id}"), |i| i.name.clone())
        };
        Some(serde_json::json!({
            "instruments": self.instruments.iter().map(|i| {
                let (bid, ask) = i.top();
                serde_json::json!({
                    "symbol": i.name,
                    "security_id": i.security_id,
                    "group": String::from_utf8_lossy(i.group),
                    "rpt_seq": i.rpt_seq,
                    "bid": side(bid),
                    "ask": side(ask),
                    "trading_status": if i.status == 0 { TRADING } else { i.status },
                })
            }).collect::<Vec<_>>(),
            "touched_by_lost_packets": self.lost_touched.iter().map(|&id| name_of(id)).collect::<Vec<_>>(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::verdict::{judge, Thresholds, Verdict};
    use crate::feed::{Feed, FeedSettings, VenueKind};
    use crate::venue::LineKind;
    use crate::wire::Symbol;

    fn verdict(f: &Feed, name: &str, now: i64) -> Verdict {
        let (_, v) = f.symbol_view(Symbol::parse(name).unwrap()).unwrap();
        judge(Some(v), f.feed_view(), now, &Thresholds::of(v))
    }

    fn feed() -> Feed {
        let mut f = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 3);
        f.set_line_kind(1, LineKind::Snapshot);
        f.set_line_kind(2, LineKind::Definition);
        f
    }

    /// The receiver's quote of `name` equals the flow's level 1.
    fn assert_books_equal(f: &Feed, flow: &CmeFlow) {
        for inst in flow.instruments() {
            let sym = Symbol::parse(&inst.name).unwrap();
            let (_, v) = f
                .symbol_view(sym)
                .unwrap_or_else(|| panic!("{} known", inst.name));
            let (bid, ask) = inst.top();
            assert_eq!(
                v.bid().map(|s| (s.px, s.qty)),
                bid.map(|l| (l.px, l.size as u64)),
                "{}",
                inst.name
            );
            assert_eq!(
                v.ask().map(|s| (s.px, s.qty)),
                ask.map(|l| (l.px, l.size as u64)),
                "{}",
                inst.name
            );
        }
    }

    #[test]
    fn a_receiver_from_the_start_and_a_late_one_build_the_same_books() {
        let mut flow = CmeFlow::new(12, 7);
        let mut m = SplitMix64::new(1);
        let mut early = feed();
        let mut late = feed();
        let mut buf = Vec::new();
        let t0 = 1_796_029_200_000_000_000i64;
        flow.start_session(0, t0);
        // The whole definition loop (five definitions a packet).
        for _ in 0..3 {
            flow.definition_packet(t0 as u64, &mut buf);
            early.on_datagram(2, &buf, t0);
        }
        assert!(!early.line_wanted(2), "the loop was seen whole");
        for seq in 1..=400u64 {
            let t = t0 + seq as i64 * 1_000_000;
            flow.data_packet(&mut m, seq, t, 8, &mut buf);
            early.on_datagram(0, &buf, t);
            if seq > 200 {
                late.on_datagram(0, &buf, t);
            }
        }
        assert_books_equal(&early, &flow);
        for inst in flow.instruments() {
            let v = verdict(&early, &inst.name, t0 + 400_000_000);
            assert!(v.ok(), "{}: {v:?}", inst.name);
        }
        // The late joiner: definitions, then the snapshot loop, whole.
        let t = t0 + 401_000_000;
        assert!(late.line_wanted(2) && late.line_wanted(1));
        for _ in 0..3 {
            flow.definition_packet(t as u64, &mut buf);
            late.on_datagram(2, &buf, t);
        }
        for _ in 0..12 {
            flow.snapshot_packet(t as u64, &mut buf);
            late.on_datagram(1, &buf, t);
        }
        assert_books_equal(&late, &flow);
        assert!(
            !late.line_wanted(1),
            "nothing waits: the snapshot group is left"
        );
        for inst in flow.instruments() {
            let v = verdict(&late, &inst.name, t);
            assert!(v.ok(), "{}: {v:?}", inst.name);
        }
        assert!(flow.instruments().iter().any(|i| i.name.len() == 20));
    }
}
