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

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use super::book::Level;
use super::channel::{PacketClass, Sequence};
use super::instruments::{naming, HaltChange, Instruments};
use super::messages::{
    self, Body, Definition, Entry, EntryKind, Item, PacketSummary, SecurityStatus, Snapshot, Step,
};
use super::recovery::KeptEntry;
use super::sbe;
use super::templates::enums::md_entry_type_book as ty;
use crate::venue::codec::LoopMachine;
use crate::venue::{
    Applied, ChannelHeader, Count, DatagramError, EntryOutcome, Header, LineKind, Policy, Rules,
    Venue,
};
use crate::wire::{PacketKind, SessionId, Side, Symbol};

/// V2: the trading state's halt source (SecurityStatus, definitions,
/// snapshots: one state, the latest rule decides).
const HALT_STATUS: u8 = 1;

/// A name as a symbol (`None`: longer than a symbol holds).
fn symbol_of(name: &[u8]) -> Option<Symbol> {
    Symbol::parse(std::str::from_utf8(name).ok()?)
}

/// Messages of a packet kept in its plan at most; a packet of more is
/// decoded again to apply (a real channel's packets hold a few).
const PLAN_MESSAGES: usize = 32;

/// What validating the last datagram left for applying it: each message
/// as decoded and checked ([`Step`]), so that `apply` reads its fields
/// without decoding or checking the packet again. A fixed buffer reused
/// for every packet; `parse` takes `&self`, hence the cells (the adapter
/// is one feed's, on one thread).
#[derive(Debug)]
struct Plan {
    /// The datagram the steps are of: its address, its length and its
    /// packet header; `None` when no complete plan is held.
    of: Cell<Option<(usize, usize, sbe::PacketHeader)>>,
    /// How many steps hold the packet's messages.
    len: Cell<usize>,
    steps: [Cell<Step>; PLAN_MESSAGES],
}

impl Default for Plan {
    fn default() -> Plan {
        Plan {
            of: Cell::new(None),
            len: Cell::new(0),
            steps: std::array::from_fn(|_| Cell::new(Step::NONE)),
        }
    }
}

impl Plan {
    /// Validates `datagram` whole (`messages::validate`), keeping each
    /// message's step; the plan is then of this datagram, if it is valid
    /// and its messages fit.
    fn validate(&self, datagram: &[u8]) -> Result<PacketSummary, sbe::SbeError> {
        self.of.set(None);
        let mut n = 0;
        let summary = messages::validate_with(datagram, |item| {
            if let Some(step) = self.steps.get(n) {
                step.set(Step::of(datagram, item));
            }
            n += 1;
        })?;
        if n <= PLAN_MESSAGES {
            self.len.set(n);
            self.of.set(Some((
                datagram.as_ptr() as usize,
                datagram.len(),
                summary.header,
            )));
        }
        Ok(summary)
    }

    /// How many steps hold `datagram`'s messages, if the plan is of it
    /// (the same bytes, where `parse` read them: the engine applies a
    /// datagram straight after validating it; one held and applied later
    /// is a copy elsewhere, decoded again). Used once: taken, if of it.
    #[inline]
    fn take(&self, datagram: &[u8], header: sbe::PacketHeader) -> Option<usize> {
        if self.of.get()? != (datagram.as_ptr() as usize, datagram.len(), header) {
            return None;
        }
        self.of.set(None);
        Some(self.len.get())
    }
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
    instruments: Instruments,
    names: Vec<Names>,
    /// Which instrument a symbol slot currently mirrors.
    symbol_owner: HashMap<u32, u32>,
    /// Sessions seen (the synthetic session id's number).
    sessions: u64,
    touched: Vec<Touched>,
    drained: Vec<KeptEntry>,
    halts: Vec<HaltChange>,
    message_types: [u64; 256],
    /// The session candidate's datagram, while one waits (venues.md
    /// `cme-mdp3`, Channel rules).
    candidate: Vec<u8>,
    /// Instruments kept at most (the feed's `max_symbols`).
    max_instruments: usize,
    /// SecurityIDs not kept because the table was full, each counted once.
    overflowed: HashSet<i32>,
    /// What `parse` left for `apply`.
    plan: Plan,
}

impl Default for CmeMdp3 {
    fn default() -> CmeMdp3 {
        CmeMdp3::new()
    }
}

impl CmeMdp3 {
    /// A channel; the entries kept for its waiting instruments are the
    /// feed's loops machine's (`Rules::loops`).
    pub fn new() -> CmeMdp3 {
        CmeMdp3 {
            sequence: Sequence::default(),
            instruments: Instruments::default(),
            names: Vec::new(),
            symbol_owner: HashMap::new(),
            sessions: 0,
            touched: Vec::new(),
            drained: Vec::new(),
            halts: Vec::new(),
            message_types: [0; 256],
            candidate: Vec::new(),
            max_instruments: usize::MAX,
            overflowed: HashSet::new(),
            plan: Plan::default(),
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
        let now = rules.now();
        rules.loops().start_waiting(instrument, now);
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
            let now = rules.now();
            let loops = rules.loops();
            loops.start_waiting(instrument, now);
            loops.keep(instrument, e.rpt_seq, e);
        } else {
            rules.loops().stop_waiting(instrument);
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
            rules.loops().named_undefined(true);
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
        rules.loops().defined(!was_defined, d.tot_num_reports);
        let Some(id) = self.id_slot(instrument, rules) else {
            return;
        };
        let names = &mut self.names[instrument as usize];
        if names.undefined_entries {
            names.undefined_entries = false;
            rules.loops().named_undefined(false);
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
        rules.loops().channel_reset(seq);
        self.instruments.reset(|_| {});
        rules.loops().forget_waits();
        for i in 0..self.instruments.len() as u32 {
            if let Some(slot) = self.id_slot(i, rules) {
                rules.forget_sequence(slot);
                self.sync(i, rules);
            }
        }
        let now = rules.now();
        rules.loops().all_wait(now);
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
            && levels_in_order(s.entries, depth)
            && rules.loops().snapshot_usable(
                instrument,
                sent,
                s.last_msg_seq_num_processed,
                r,
                last,
                !unbelieved,
            );
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
        rules.loops().take_after(instrument, r, &mut drained);
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

    /// The messages of a validated packet, in order: from the plan its
    /// validation left, or decoded again when the plan is of another.
    fn messages<R: Rules>(&mut self, datagram: &[u8], kind: LineKind, rules: &mut R) {
        let Ok((ph, msgs)) = sbe::packet(datagram) else {
            return;
        };
        if let Some(n) = self.plan.take(datagram, ph) {
            for k in 0..n {
                let step = self.plan.steps[k].get();
                let Some(item) = step.item(datagram) else {
                    return;
                };
                self.message(item, ph, kind, rules);
            }
            return;
        }
        for raw in msgs {
            let Ok(raw) = raw else { return };
            let Ok(item) = messages::decode(&raw) else {
                return;
            };
            self.message(item, ph, kind, rules);
        }
    }

    /// One message of a validated packet.
    #[inline]
    fn message<R: Rules>(
        &mut self,
        item: Item<'_>,
        ph: sbe::PacketHeader,
        kind: LineKind,
        rules: &mut R,
    ) {
        let body = match item {
            Item::Unknown { .. } => {
                rules.count(Count::UnknownMessage);
                return;
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

impl Venue for CmeMdp3 {
    fn policy(&self) -> Policy {
        Policy {
            // V3 with the packet's SendingTime.
            channel_source_time: true,
            trust_from_start: false,
            loops: true,
        }
    }

    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        let summary = self.plan.validate(datagram)?;
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
            // C5: the engine forgets every sequence and state lazily (and
            // its loops machine every wait: `Loops::new_session`).
            self.instruments.reset(|_| {});
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
                rules.loops().session_began(sent);
            }
            PacketClass::Confirms => {
                // C5 then C1: the candidate is the new session's first
                // packet, processed now, then this one.
                self.sessions += 1;
                let candidate = std::mem::take(&mut self.candidate);
                if let Some(c) = self.sequence.candidate() {
                    rules.loops().session_began(c.sent);
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
                rules.loops().lost(next, u64::from(seq) - 1);
                // C3: every instrument is unverified until its next entry.
                let now = rules.now();
                rules.loops().all_wait(now);
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
        self.plan.validate(datagram)?;
        self.messages(datagram, kind, rules);
        self.finish_packet(rules);
        Ok(())
    }

    fn message_types(&self) -> Option<&[u64; 256]> {
        Some(&self.message_types)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cme_mdp3::encode;

    /// A packet of `heartbeats` heartbeats and one ChannelReset.
    fn packet(seq: u32, heartbeats: usize) -> Vec<u8> {
        let mut d = Vec::new();
        encode::start_packet(&mut d, seq, 1_000);
        for _ in 0..heartbeats {
            encode::heartbeat(&mut d);
        }
        encode::channel_reset(&mut d, 5);
        d
    }

    #[test]
    fn a_plan_is_of_the_datagram_validated_and_used_once() {
        let plan = Plan::default();
        let d = packet(7, 2);
        let ph = sbe::packet(&d).unwrap().0;
        let s = plan.validate(&d).unwrap();
        assert_eq!(s.messages, 3);
        // The same bytes elsewhere are not the datagram validated: decoded
        // again, and the plan stays for the datagram.
        let copy = d.clone();
        assert_eq!(plan.take(&copy, ph), None);
        assert_eq!(plan.take(&d[..d.len() - 10], ph), None);
        let other = sbe::PacketHeader {
            msg_seq_num: 8,
            ..ph
        };
        assert_eq!(plan.take(&d, other), None);
        assert_eq!(plan.take(&d, ph), Some(3));
        let reset = plan.steps[2].get().item(&d);
        assert!(matches!(
            reset,
            Some(Item::Known {
                body: Body::ChannelReset,
                ..
            })
        ));
        assert_eq!(plan.take(&d, ph), None, "taken");
        // A datagram that fails validation leaves no plan, even of the one
        // before it.
        plan.validate(&d).unwrap();
        assert!(plan.validate(&d[..d.len() - 1]).is_err());
        assert_eq!(plan.take(&d, ph), None);
        assert_eq!(plan.take(&d[..d.len() - 1], ph), None);
    }

    #[test]
    fn a_packet_of_more_messages_than_a_plan_holds_is_valid_and_unplanned() {
        let plan = Plan::default();
        let d = packet(7, PLAN_MESSAGES - 1);
        let ph = sbe::packet(&d).unwrap().0;
        plan.validate(&d).unwrap();
        assert_eq!(plan.take(&d, ph), Some(PLAN_MESSAGES));
        let d = packet(7, PLAN_MESSAGES);
        let s = plan.validate(&d).unwrap();
        assert_eq!(s.messages as usize, PLAN_MESSAGES + 1);
        assert_eq!(plan.take(&d, ph), None);
    }
}
