//! The `cme-mdp3` venue adapter (venues.md `cme-mdp3`): the channel's
//! packets to the engine's rules. Incremental packets go through the
//! channel rules by MsgSeqNum (the session told by SendingTime, see
//! `channel`); each entry is then a message of its instrument
//! (`Rules::entry`, S1-S5 on RptSeq); snapshot and definition loops arrive
//! through `apply_loop` and are judged message by message. Pure: no I/O,
//! time passed in through the rules.
//!
//! An instrument answers under two names: `#<SecurityID>` (its own slot,
//! where the rules run) and, once a definition names it, its symbol (a
//! second slot that mirrors the first after every change). Both count as
//! one of the feed's `max_symbols` (the table has two slots for each);
//! beyond them a new SecurityID is not kept at all, counted once.

use std::collections::{HashMap, HashSet};

use super::book::Level;
use super::channel::{PacketClass, Sequence};
use super::instruments::{naming, HaltChange, Instruments};
use super::messages::{self, Body, Definition, Entry, EntryKind, Item, SecurityStatus, Snapshot};
use super::recovery::{continues, Coverage, Kept, KeptEntry};
use super::sbe;
use super::templates::enums::md_entry_type_book as ty;
use crate::venue::{
    Applied, ChannelHeader, Count, DatagramError, EntryOutcome, Header, LineKind, Policy, Rules,
    Venue, VenueRecovery,
};
use crate::wire::{PacketKind, SessionId, Side, Symbol};

/// V2: the trading state's halt source (SecurityStatus, definitions,
/// snapshots: one state, the latest rule decides).
const HALT_STATUS: u8 = 1;

/// A name as a symbol (`None`: longer than a symbol holds).
fn symbol_of(name: &[u8]) -> Option<Symbol> {
    Symbol::parse(std::str::from_utf8(name).ok()?)
}

/// The engine slots of one instrument's names.
#[derive(Clone, Copy, Debug, Default)]
struct Names {
    /// `#<SecurityID>` (`None`: the table was full, or the name does not
    /// fit a symbol).
    id: Option<u32>,
    /// Its definition's symbol.
    symbol: Option<u32>,
    /// An entry named it before any definition did.
    undefined_entries: bool,
    /// Its sequence is not believed (S5 refused an entry, or an entry
    /// contradicted it): its next usable snapshot is taken whatever its
    /// RptSeq.
    unbelieved: bool,
}

/// An instrument changed by the packet being applied, and its book's
/// level 1 before the packet.
#[derive(Clone, Copy, Debug)]
struct Touched {
    instrument: u32,
    before: (Option<Side>, Option<Side>),
    /// Started from an empty book in this packet: quoted whatever its book.
    fresh: bool,
}

/// One CME channel.
#[derive(Debug)]
pub struct CmeMdp3 {
    sequence: Sequence,
    coverage: Coverage,
    instruments: Instruments,
    kept: Kept,
    names: Vec<Names>,
    /// Which instrument a symbol slot currently mirrors.
    symbol_owner: HashMap<u32, u32>,
    /// Sessions seen (the synthetic session id's number).
    sessions: u64,
    touched: Vec<Touched>,
    drained: Vec<KeptEntry>,
    halts: Vec<HaltChange>,
    message_types: [u64; 256],
    /// The definition loop's TotNumReports, once a definition carried it.
    definitions_total: Option<u32>,
    /// Instruments with a definition.
    defined: u32,
    /// Instruments named by an entry and still without a definition.
    undefined_with_entries: u32,
    /// The session candidate's datagram, while one waits (venues.md
    /// `cme-mdp3`, Channel rules).
    candidate: Vec<u8>,
    /// Instruments kept at most (the feed's `max_symbols`).
    max_instruments: usize,
    /// SecurityIDs not kept because the table was full, each counted once.
    overflowed: HashSet<i32>,
}

impl CmeMdp3 {
    /// A channel keeping at most `recovery_entries` entries for waiting
    /// instruments (venues.md, default 1,000,000).
    pub fn new(recovery_entries: usize) -> CmeMdp3 {
        CmeMdp3 {
            sequence: Sequence::default(),
            coverage: Coverage::default(),
            instruments: Instruments::default(),
            kept: Kept::new(recovery_entries),
            names: Vec::new(),
            symbol_owner: HashMap::new(),
            sessions: 0,
            touched: Vec::new(),
            drained: Vec::new(),
            halts: Vec::new(),
            message_types: [0; 256],
            definitions_total: None,
            defined: 0,
            undefined_with_entries: 0,
            candidate: Vec::new(),
            max_instruments: usize::MAX,
            overflowed: HashSet::new(),
        }
    }

    /// The instrument of a SecurityID, made known if new and the table
    /// has room for it; a full table keeps nothing of it and counts it
    /// once (`symbols_overflow`).
    fn instrument<R: Rules>(&mut self, security_id: i32, rules: &mut R) -> Option<u32> {
        if let Some(i) = self.instruments.find(security_id) {
            return Some(i);
        }
        if self.instruments.len() >= self.max_instruments {
            if self.overflowed.insert(security_id) {
                rules.count(Count::SymbolOverflow);
            }
            return None;
        }
        Some(self.instruments.index(security_id))
    }

    /// The channel's instruments (names, books, trading states).
    pub fn instruments(&self) -> &Instruments {
        &self.instruments
    }

    /// The session id the channel rules compare: CME sends none, so each
    /// session told by SendingTime gets a number.
    fn session_id(n: u64) -> SessionId {
        let mut id = [b'0'; 10];
        id[..3].copy_from_slice(b"cme");
        let mut n = n % 10_000_000;
        for b in id[3..].iter_mut().rev() {
            *b = b'0' + (n % 10) as u8;
            n /= 10;
        }
        SessionId(id)
    }

    /// The instrument's `#` slot, made (and its names' table grown) if new.
    fn id_slot<R: Rules>(&mut self, instrument: u32, rules: &mut R) -> Option<u32> {
        let i = instrument as usize;
        if self.names.len() <= i {
            self.names.resize(i + 1, Names::default());
        }
        if let Some(s) = self.names[i].id {
            return Some(s);
        }
        let id = self.instruments.get(instrument)?.security_id;
        let mut name = [0u8; 12];
        let len = {
            use std::io::Write;
            let mut w = &mut name[..];
            let _ = write!(w, "#{id}");
            12 - w.len()
        };
        let slot = rules.symbol(symbol_of(&name[..len])?)?;
        self.names[i].id = Some(slot);
        // Known without a sequence: it waits for its first entry or a
        // snapshot.
        self.kept.start_waiting(instrument);
        Some(slot)
    }

    /// The symbol slot shows the instrument's state.
    fn sync<R: Rules>(&self, instrument: u32, rules: &mut R) {
        if let Some(&Names {
            id: Some(id),
            symbol: Some(sym),
            ..
        }) = self.names.get(instrument as usize)
        {
            rules.mirror(id, sym);
        }
    }

    fn halt<R: Rules>(&mut self, rules: &mut R) {
        let halts = std::mem::take(&mut self.halts);
        for c in &halts {
            if let Some(slot) = self.id_slot(c.index, rules) {
                rules.set_halt(slot, HALT_STATUS, c.halted);
                self.sync(c.index, rules);
            }
        }
        self.halts = halts;
        self.halts.clear();
    }

    /// Notes an instrument as changed by this packet (its level 1 first).
    fn touch(&mut self, instrument: u32) -> usize {
        if let Some(i) = self.touched.iter().position(|t| t.instrument == instrument) {
            return i;
        }
        let before = self
            .instruments
            .get(instrument)
            .map_or((None, None), |i| i.book.top());
        self.touched.push(Touched {
            instrument,
            before,
            fresh: false,
        });
        self.touched.len() - 1
    }

    /// One entry of an instrument through S1-S5, then its book; kept while
    /// the instrument waits. Returns whether it started the book afresh.
    /// `new`: from a packet processed now (not replayed from kept ones).
    fn entry<R: Rules>(
        &mut self,
        instrument: u32,
        slot: u32,
        e: KeptEntry,
        new: bool,
        rules: &mut R,
    ) -> bool {
        let out = rules.entry(slot, u64::from(e.rpt_seq), e.transact_time as i64, new);
        let mut fresh = false;
        if let Some(n) = self.names.get_mut(instrument as usize) {
            match out {
                EntryOutcome::Applied { .. } => n.unbelieved = false,
                EntryOutcome::Refused => n.unbelieved = true,
                EntryOutcome::NotApplied => {}
            }
        }
        if let EntryOutcome::Applied { fresh: f } = out {
            fresh = f;
            if let Some(inst) = self.instruments.get_mut(instrument) {
                if fresh {
                    inst.book.clear();
                }
                if let Some(b) = &e.book {
                    if inst.book.apply(b).is_err() {
                        rules.count(Count::BookError);
                        rules.suspect_book(slot);
                    }
                }
            }
        }
        if rules.waits(slot) {
            self.kept.start_waiting(instrument);
            self.kept.keep(instrument, e);
        } else {
            self.kept.stop_waiting(instrument);
        }
        fresh
    }

    fn incremental<R: Rules>(&mut self, e: Entry, kind: EntryKind, ts: u64, rules: &mut R) {
        let Some(instrument) = self.instrument(e.security_id, rules) else {
            return;
        };
        let Some(slot) = self.id_slot(instrument, rules) else {
            return;
        };
        let names = &mut self.names[instrument as usize];
        if !names.undefined_entries && !self.instruments.get(instrument).is_some_and(|i| i.defined)
        {
            // The definition loop is wanted until this one is seen.
            names.undefined_entries = true;
            self.undefined_with_entries += 1;
        }
        let t = self.touch(instrument);
        let kept = KeptEntry {
            rpt_seq: e.rpt_seq,
            transact_time: ts,
            kind,
            book: e.book,
        };
        if self.entry(instrument, slot, kept, true, rules) {
            self.touched[t].fresh = true;
        }
    }

    /// After a packet: a changed level 1 is the quote; every name shows
    /// its instrument's state.
    fn finish_packet<R: Rules>(&mut self, rules: &mut R) {
        for k in 0..self.touched.len() {
            let t = self.touched[k];
            let Some(slot) = self.names.get(t.instrument as usize).and_then(|n| n.id) else {
                continue;
            };
            let top = self
                .instruments
                .get(t.instrument)
                .map_or((None, None), |i| i.book.top());
            if t.fresh || top != t.before {
                rules.book_quote(slot, top.0, top.1);
            }
            self.sync(t.instrument, rules);
        }
        self.touched.clear();
    }

    fn define<R: Rules>(&mut self, d: &Definition<'_>, rules: &mut R) {
        let Some(known) = self.instrument(d.security_id, rules) else {
            return;
        };
        let was_defined = self.instruments.get(known).is_some_and(|i| i.defined);
        let (instrument, change) = self.instruments.define(d);
        if !was_defined {
            self.defined += 1;
        }
        if let Some(total) = d.tot_num_reports {
            self.definitions_total = Some(total);
        }
        let Some(id) = self.id_slot(instrument, rules) else {
            return;
        };
        let names = &mut self.names[instrument as usize];
        if names.undefined_entries {
            names.undefined_entries = false;
            self.undefined_with_entries -= 1;
        }
        if naming(d.symbol).is_none() {
            // Names nothing (empty, or a `#` name: only a SecurityID's):
            // the instrument keeps its names.
            if let Some(c) = change {
                rules.set_halt(id, HALT_STATUS, c.halted);
            }
            self.sync(instrument, rules);
            return;
        }
        let name = self
            .instruments
            .get(instrument)
            .and_then(|i| i.name)
            .and_then(|n| symbol_of(n.as_bytes()));
        let new = name.and_then(|n| rules.symbol(n)).filter(|&s| s != id);
        let old = self.names[instrument as usize].symbol;
        if old != new {
            if let Some(old) = old {
                if self.symbol_owner.get(&old) == Some(&instrument) {
                    // The name no longer names anything.
                    self.symbol_owner.remove(&old);
                    rules.clear_symbol(old);
                }
            }
            if let Some(new) = new {
                if let Some(prev) = self.symbol_owner.insert(new, instrument) {
                    // The name moved here from another instrument.
                    if let Some(n) = self.names.get_mut(prev as usize) {
                        n.symbol = None;
                    }
                }
            }
            self.names[instrument as usize].symbol = new;
        }
        if let Some(c) = change {
            rules.set_halt(id, HALT_STATUS, c.halted);
        }
        self.sync(instrument, rules);
    }

    fn status<R: Rules>(&mut self, s: &SecurityStatus<'_>, rules: &mut R) {
        if let Some(id) = s.security_id {
            // A SecurityStatus for an unseen SecurityID makes it known
            // (when the table has room: else it changes nothing).
            let Some(instrument) = self.instrument(id, rules) else {
                return;
            };
            self.id_slot(instrument, rules);
        }
        let halts = &mut self.halts;
        self.instruments.status(s, |c| halts.push(c));
        self.halt(rules);
    }

    /// Template 4: every book emptied, every sequence and state forgotten.
    fn channel_reset<R: Rules>(&mut self, seq: u32, rules: &mut R) {
        self.coverage.channel_reset(seq);
        self.instruments.reset(|_| {});
        self.kept.reset();
        for i in 0..self.instruments.len() as u32 {
            if let Some(slot) = self.id_slot(i, rules) {
                rules.forget_sequence(slot);
                self.sync(i, rules);
            }
        }
        self.all_wait();
    }

    /// Every instrument with a slot waits for a snapshot or its next
    /// entry (a channel reset, a session change, a channel gap).
    fn all_wait(&mut self) {
        for (i, n) in self.names.iter().enumerate() {
            if n.id.is_some() {
                self.kept.start_waiting(i as u32);
            }
        }
    }

    /// A snapshot (whichever line brings it), sent at `sent`.
    fn snapshot<R: Rules>(&mut self, s: &Snapshot<'_>, sent: u64, rules: &mut R) {
        let slot = self
            .instruments
            .find(s.security_id)
            .and_then(|i| Some((i, self.names.get(i as usize)?.id?)));
        let Some((instrument, slot)) = slot else {
            rules.count(Count::SnapshotIgnored);
            return;
        };
        let r = s.rpt_seq;
        let last = rules
            .sequence(slot)
            .map(|l| l.min(u64::from(u32::MAX)) as u32);
        let unbelieved = self.names[instrument as usize].unbelieved;
        let depth = self
            .instruments
            .get(instrument)
            .map_or(0, |i| i.book.depth());
        // `m` below `next`: the snapshot reflects only packets this feed
        // processed or declared lost (one from ahead is ignored).
        let seen = self
            .sequence
            .next()
            .is_some_and(|next| u64::from(s.last_msg_seq_num_processed) < next);
        let usable = rules.waits(slot)
            && seen
            && self.coverage.covers(sent, s.last_msg_seq_num_processed)
            && levels_in_order(s.entries, depth)
            && (unbelieved || continues(r, last, self.kept.has(instrument, r.wrapping_add(1))));
        if !usable {
            rules.count(Count::SnapshotIgnored);
            return;
        }
        let Some(inst) = self.instruments.get_mut(instrument) else {
            return;
        };
        inst.book.replace(s.entries.filter_map(|e| {
            let bid = match e.entry_type {
                ty::BID => true,
                ty::OFFER => false,
                _ => return None,
            };
            let level = Level {
                price: e.price?.to_nanos()?,
                size: e.size?,
            };
            Some((bid, e.level?, level))
        }));
        let (bid, ask) = inst.book.top();
        rules.use_snapshot(slot, u64::from(r), s.transact_time as i64, bid, ask);
        self.names[instrument as usize].unbelieved = false;
        if let Some(c) = self
            .instruments
            .snapshot_status(instrument, s.trading_status)
        {
            self.halts.push(c);
            self.halt(rules);
        }
        // The kept entries above the snapshot continue it, in order.
        let mut drained = std::mem::take(&mut self.drained);
        self.kept.drain_after(instrument, r, |e| drained.push(e));
        self.kept.stop_waiting(instrument);
        for e in drained.drain(..) {
            // Replayed: judged by S2 as before.
            self.entry(instrument, slot, e, false, rules);
        }
        self.drained = drained;
        if let Some(inst) = self.instruments.get(instrument) {
            let (bid, ask) = inst.book.top();
            rules.book_quote(slot, bid, ask);
        }
        self.sync(instrument, rules);
    }

    /// The messages of a validated packet, in order.
    fn messages<R: Rules>(&mut self, datagram: &[u8], kind: LineKind, rules: &mut R) {
        let Ok((ph, msgs)) = sbe::packet(datagram) else {
            return;
        };
        for raw in msgs {
            let Ok(raw) = raw else { return };
            let Ok(item) = messages::decode(&raw) else {
                return;
            };
            let body = match item {
                Item::Unknown { .. } => {
                    rules.count(Count::UnknownMessage);
                    continue;
                }
                Item::Known { header, body } => {
                    let t = &mut self.message_types[usize::from(header.template_id.min(255))];
                    *t += 1;
                    body
                }
            };
            match (kind, body) {
                (
                    LineKind::Incremental,
                    Body::Incremental {
                        transact_time,
                        entries,
                    },
                ) => {
                    let k = entries.kind();
                    for e in entries {
                        self.incremental(e, k, transact_time, rules);
                    }
                }
                (LineKind::Incremental, Body::ChannelReset) => {
                    self.channel_reset(ph.msg_seq_num, rules)
                }
                (LineKind::Incremental, Body::SecurityStatus(s)) => self.status(&s, rules),
                (LineKind::Incremental | LineKind::Definition, Body::Definition(d)) => {
                    self.define(&d, rules)
                }
                (_, Body::Snapshot(s)) => self.snapshot(&s, ph.sending_time, rules),
                // Heartbeats, and messages a loop does not carry.
                _ => {}
            }
        }
    }
}

impl Venue for CmeMdp3 {
    fn policy(&self) -> Policy {
        Policy {
            // V3 with the packet's SendingTime.
            channel_source_time: true,
            trust_from_start: false,
        }
    }

    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        let summary = messages::validate(datagram)?;
        let ph = summary.header;
        let class = self.sequence.classify(ph.msg_seq_num, ph.sending_time);
        let (session, sequence, count) = match class {
            PacketClass::First => (self.sessions + 1, ph.msg_seq_num, 1),
            // C5 by candidate: the candidate and this packet, one unit
            // each, open the new session from the candidate's MsgSeqNum.
            PacketClass::Confirms => (self.sessions + 1, ph.msg_seq_num - 1, 2),
            _ => (self.sessions, ph.msg_seq_num, 1),
        };
        Ok(Header {
            channel: ChannelHeader {
                session: CmeMdp3::session_id(session),
                sequence: u64::from(sequence),
                kind: PacketKind::Data,
                // Each packet is one unit of the channel sequence.
                count,
                stale_session: class == PacketClass::ReplacedSession,
            },
            // Framing keeps SendingTime below 2^63.
            send_time: i64::try_from(ph.sending_time).ok(),
        })
    }

    fn set_aside(&mut self, datagram: &[u8]) -> bool {
        let Ok((ph, _)) = sbe::packet(datagram) else {
            return false;
        };
        let class = self.sequence.classify(ph.msg_seq_num, ph.sending_time);
        if class != PacketClass::Candidate {
            return false;
        }
        // At most one candidate: a later one replaces it.
        self.candidate.clear();
        self.candidate.extend_from_slice(datagram);
        self.sequence
            .process(ph.msg_seq_num, ph.sending_time, PacketClass::Candidate);
        true
    }

    fn set_max_symbols(&mut self, max: usize) {
        self.max_instruments = max;
    }

    fn on_session_start(&mut self, _now: i64, first_session: bool) {
        if !first_session {
            // C5: the engine forgets every sequence and state lazily.
            self.instruments.reset(|_| {});
            self.kept.reset();
            self.all_wait();
        }
    }

    fn apply<R: Rules>(
        &mut self,
        datagram: &[u8],
        _header: &Header,
        _skip: u16,
        rules: &mut R,
    ) -> Applied {
        let Ok((ph, _)) = sbe::packet(datagram) else {
            return Applied::default();
        };
        let (seq, sent) = (ph.msg_seq_num, ph.sending_time);
        let class = self.sequence.classify(seq, sent);
        match class {
            PacketClass::First => {
                self.sessions += 1;
                self.coverage.new_session(sent);
            }
            PacketClass::Confirms => {
                // C5 then C1: the candidate is the new session's first
                // packet, processed now, then this one.
                self.sessions += 1;
                let candidate = std::mem::take(&mut self.candidate);
                if let Some(c) = self.sequence.candidate() {
                    self.coverage.new_session(c.sent);
                }
                self.sequence.process(seq, sent, class);
                self.messages(&candidate, LineKind::Incremental, rules);
                self.finish_packet(rules);
                self.candidate = candidate;
                self.candidate.clear();
                self.messages(datagram, LineKind::Incremental, rules);
                self.finish_packet(rules);
                return Applied::default();
            }
            PacketClass::Gap { .. } => {
                let next = self.sequence.next().unwrap_or(0);
                self.coverage.lost(next, u64::from(seq) - 1);
                // C3: every instrument is unverified until its next entry.
                self.all_wait();
            }
            _ => {}
        }
        self.sequence.process(seq, sent, class);
        if self.sequence.candidate().is_none() {
            // Discarded by this packet of the current session, if one
            // waited.
            self.candidate.clear();
        }
        self.messages(datagram, LineKind::Incremental, rules);
        self.finish_packet(rules);
        // The packet's SendingTime is the clock sample (the header's).
        Applied::default()
    }

    fn apply_loop<R: Rules>(
        &mut self,
        kind: LineKind,
        datagram: &[u8],
        rules: &mut R,
    ) -> Result<(), DatagramError> {
        messages::validate(datagram)?;
        self.messages(datagram, kind, rules);
        self.finish_packet(rules);
        Ok(())
    }

    fn message_types(&self) -> Option<&[u64; 256]> {
        Some(&self.message_types)
    }

    fn wants_loop(&self, kind: LineKind) -> bool {
        match kind {
            // (CME has no gap lines: config refuses them.)
            LineKind::Incremental | LineKind::Gap => true,
            // While an instrument waits for a snapshot.
            LineKind::Snapshot => self.kept.waiting() > 0,
            // Until the loop was seen whole, and while an entry names an
            // instrument without a definition.
            LineKind::Definition => {
                self.definitions_total
                    .is_none_or(|total| self.defined < total)
                    || self.undefined_with_entries > 0
            }
        }
    }

    fn recovery(&self) -> VenueRecovery {
        VenueRecovery {
            waiting: self.kept.waiting() as u64,
            kept_entries: self.kept.kept() as u64,
            kept_dropped: self.kept.dropped(),
        }
    }
}

/// Snapshots: each side's levels within `depth` are 1, 2, … without a
/// repeat (in any order); entries that are not bid or offer levels within
/// `depth`, or whose price or size the book cannot take, are not counted
/// (the book ignores them too).
fn levels_in_order(entries: super::messages::SnapshotEntries<'_>, depth: u8) -> bool {
    // Bit `l - 1` for level `l` (depth is at most 127).
    let (mut bids, mut asks) = (0u128, 0u128);
    for e in entries {
        let side = match e.entry_type {
            ty::BID => &mut bids,
            ty::OFFER => &mut asks,
            _ => continue,
        };
        let Some(level) = e.level.filter(|&l| l >= 1 && l <= depth) else {
            continue;
        };
        if e.price.and_then(|p| p.to_nanos()).is_none() || e.size.is_none() {
            continue;
        }
        let bit = 1u128 << (level - 1);
        if *side & bit != 0 {
            return false;
        }
        *side |= bit;
    }
    // Levels 1..k without a hole: the set bits are the lowest ones.
    bids & bids.wrapping_add(1) == 0 && asks & asks.wrapping_add(1) == 0
}
