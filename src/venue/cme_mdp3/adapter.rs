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

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};

use super::book::{Level, MAX_DEPTH};
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

/// The largest datagram that reaches the adapter: a UDP payload over IPv4
/// (65,535 bytes less the 20-byte IPv4 and 8-byte UDP headers). The live
/// receiver takes at most its `max_datagram` (1,536 bytes) and drops a
/// longer one; replay takes any whole, unfragmented IPv4 UDP datagram of a
/// capture, hence this bound rather than the receiver's.
const MAX_DATAGRAM: usize = 65_507;

/// Messages a packet the adapter can be given holds at most: its 12-byte
/// header, then messages of at least 10 bytes each (MsgSize and the SBE
/// header, `sbe::MIN_MSG_SIZE`, the smallest MsgSize the framing accepts):
/// 6,549. The plan holds that many, so every packet is decoded once.
const PLAN_MESSAGES: usize = (MAX_DATAGRAM - sbe::PACKET_HEADER_LEN) / sbe::MIN_MSG_SIZE;

/// What validating the last datagram left for applying it: each message
/// as decoded and checked ([`Step`]), so that `apply` reads its fields
/// without decoding or checking the packet again. `parse` takes `&self`,
/// hence the cells (the adapter is one feed's, on one thread).
#[derive(Debug)]
struct Plan {
    /// The datagram the steps are of: its address, its length and its
    /// packet header; `None` when no complete plan is held.
    of: Cell<Option<(usize, usize, sbe::PacketHeader)>>,
    /// The packet's messages, in order: a buffer reused for every packet,
    /// its capacity (`PLAN_MESSAGES`) reserved once and never grown, so
    /// that no message allocates. Only the pages a packet's steps use are
    /// ever touched (a packet of a 1,500-byte MTU uses the first few).
    steps: RefCell<Vec<Step>>,
}

impl Default for Plan {
    fn default() -> Plan {
        Plan {
            of: Cell::new(None),
            steps: RefCell::new(Vec::with_capacity(PLAN_MESSAGES)),
        }
    }
}

impl Plan {
    /// Validates `datagram` whole (`messages::validate`), keeping each
    /// message's step; the plan is then of this datagram, if it is valid
    /// (and its messages fit: any datagram of at most `MAX_DATAGRAM`
    /// bytes; a longer slice, which no socket or capture gives, is
    /// decoded again to apply).
    fn validate(&self, datagram: &[u8]) -> Result<PacketSummary, sbe::SbeError> {
        self.of.set(None);
        let mut steps = self.steps.borrow_mut();
        steps.clear();
        let mut fits = true;
        let summary = messages::validate_with(datagram, |item| {
            // Within the capacity reserved: never reallocates.
            if steps.len() < PLAN_MESSAGES {
                steps.push(Step::of(datagram, item));
            } else {
                fits = false;
            }
        })?;
        if fits {
            self.of.set(Some((
                datagram.as_ptr() as usize,
                datagram.len(),
                summary.header,
            )));
        }
        Ok(summary)
    }

    /// Whether the steps hold `datagram`'s messages (the same bytes, where
    /// `parse` read them: the engine applies a datagram straight after
    /// validating it, or sets it aside as a session candidate, whose copy
    /// takes the steps with it; a datagram held by recovery and applied
    /// later is a copy elsewhere, decoded again). Used once: taken, if of
    /// it.
    #[inline]
    fn take(&self, datagram: &[u8], header: sbe::PacketHeader) -> bool {
        if self.of.get() != Some((datagram.as_ptr() as usize, datagram.len(), header)) {
            return false;
        }
        self.of.set(None);
        true
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
    /// A snapshot's book levels, decoded once to be checked and then
    /// applied (`snapshot_levels`).
    levels: Box<SnapshotLevels>,
    halts: Vec<HaltChange>,
    message_types: [u64; 256],
    /// The session candidate's datagram, while one waits (venues.md
    /// `cme-mdp3`, Channel rules).
    candidate: Vec<u8>,
    /// The candidate's messages, as its validation left them (the plan's
    /// buffer, taken with the datagram: the two swap, nothing is copied),
    /// so that applying it later does not decode it again.
    candidate_steps: Vec<Step>,
    /// `candidate_steps` holds the candidate's messages.
    candidate_planned: bool,
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
            levels: Box::new(SnapshotLevels::default()),
            halts: Vec::new(),
            message_types: [0; 256],
            candidate: Vec::new(),
            candidate_steps: Vec::with_capacity(PLAN_MESSAGES),
            candidate_planned: false,
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
            && snapshot_levels(s.entries, depth, &mut self.levels)
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
        let [bids, asks] = self.levels.sides();
        inst.book.replace_sides(bids, asks);
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
    /// validation left, or decoded again when the plan is of another (a
    /// copy held by recovery).
    fn messages<R: Rules>(&mut self, datagram: &[u8], kind: LineKind, rules: &mut R) {
        let Ok((ph, msgs)) = sbe::packet(datagram) else {
            return;
        };
        if self.plan.take(datagram, ph) {
            // Out of its cell while the messages apply (nothing validates
            // meanwhile), then back: no allocation either way.
            let steps = std::mem::take(self.plan.steps.get_mut());
            self.planned(datagram, ph, &steps, kind, rules);
            *self.plan.steps.get_mut() = steps;
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

    /// The messages of `datagram` from its steps, in order.
    fn planned<R: Rules>(
        &mut self,
        datagram: &[u8],
        ph: sbe::PacketHeader,
        steps: &[Step],
        kind: LineKind,
        rules: &mut R,
    ) {
        for step in steps {
            let Some(item) = step.item(datagram) else {
                return;
            };
            self.message(item, ph, kind, rules);
        }
    }

    /// The session candidate's messages (C5): from the steps its
    /// validation left, which `set_aside` kept with its bytes.
    fn candidate_messages<R: Rules>(&mut self, rules: &mut R) {
        let candidate = std::mem::take(&mut self.candidate);
        let steps = std::mem::take(&mut self.candidate_steps);
        if self.candidate_planned {
            if let Ok((ph, _)) = sbe::packet(&candidate) {
                self.planned(&candidate, ph, &steps, LineKind::Incremental, rules);
            }
        } else {
            self.messages(&candidate, LineKind::Incremental, rules);
        }
        self.candidate = candidate;
        self.candidate_steps = steps;
        self.drop_candidate();
    }

    /// No candidate waits (its buffers kept for the next).
    fn drop_candidate(&mut self) {
        self.candidate.clear();
        self.candidate_steps.clear();
        self.candidate_planned = false;
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
        // At most one candidate: a later one replaces it. Its steps go
        // with it: the plan `parse` left of this datagram and the
        // candidate's buffer swap (the old candidate's steps are the
        // plan's buffer now, to be overwritten).
        self.candidate.clear();
        self.candidate.extend_from_slice(datagram);
        self.candidate_planned = self.plan.take(datagram, ph);
        if self.candidate_planned {
            std::mem::swap(self.plan.steps.get_mut(), &mut self.candidate_steps);
        }
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
                if let Some(c) = self.sequence.candidate() {
                    rules.loops().session_began(c.sent);
                }
                self.sequence.process(seq, sent, class);
                self.candidate_messages(rules);
                self.finish_packet(rules);
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
            self.drop_candidate();
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

/// Both sides of a snapshot's book as `snapshot_levels` found them: side
/// `s` (0 bids, 1 offers) has level `l` at `levels[s][l - 1]`, for levels
/// 1 to `counts[s]`.
#[derive(Debug)]
struct SnapshotLevels {
    levels: [[Level; MAX_DEPTH as usize]; 2],
    counts: [usize; 2],
}

impl Default for SnapshotLevels {
    fn default() -> Self {
        SnapshotLevels {
            levels: [[Level { price: 0, size: 0 }; MAX_DEPTH as usize]; 2],
            counts: [0; 2],
        }
    }
}

impl SnapshotLevels {
    /// Bids and offers, each best first.
    fn sides(&self) -> [&[Level]; 2] {
        [0, 1].map(|s| &self.levels[s][..self.counts[s]])
    }
}

/// Snapshots: each side's levels within `depth` are 1, 2, … without a
/// repeat (in any order); entries that are not bid or offer levels within
/// `depth`, or whose price or size the book cannot take, are not counted
/// (the book ignores them too). The counted levels are left in `out`,
/// each at its level's place, for `Book::replace_sides`: each entry is
/// decoded once, and a side in any order is applied best first.
fn snapshot_levels(
    entries: super::messages::SnapshotEntries<'_>,
    depth: u8,
    out: &mut SnapshotLevels,
) -> bool {
    let depth = depth.min(MAX_DEPTH);
    // Per side, level `l` is bit `(l - 1) % 64` of word `(l - 1) / 64`
    // (depth is at most 127: two words; a u128 costs more a shift).
    let mut seen = [[0u64; 2]; 2];
    for e in entries {
        let s = match e.entry_type {
            ty::BID => 0,
            ty::OFFER => 1,
            _ => continue,
        };
        // Levels 1 to `depth`, as the index `l - 1`.
        let Some(i) = e.level.map(|l| l.wrapping_sub(1)).filter(|&i| i < depth) else {
            continue;
        };
        let (Some(price), Some(size)) = (e.price.and_then(|p| p.to_nanos()), e.size) else {
            continue;
        };
        let i = usize::from(i);
        let (word, bit) = (&mut seen[s][(i >> 6) & 1], 1u64 << (i & 63));
        if *word & bit != 0 {
            return false;
        }
        *word |= bit;
        out.levels[s][i] = Level { price, size };
    }
    // Levels 1..k without a hole: the set bits are the lowest ones, the
    // second word's only once the first is full.
    for (s, [low, high]) in seen.into_iter().enumerate() {
        let lowest = |w: u64| w & w.wrapping_add(1) == 0;
        if !lowest(low) || (high != 0 && (low != u64::MAX || !lowest(high))) {
            return false;
        }
        out.counts[s] = (low.count_ones() + high.count_ones()) as usize;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::{Feed, FeedSettings};
    use crate::venue::cme_mdp3::encode;
    use crate::venue::VenueKind;

    /// `snapshot_levels` over a snapshot of `levels` (entry type, level,
    /// price in ticks of 1.0) at `depth`: whether usable, and its sides'
    /// prices.
    fn levels_at(depth: u8, levels: &[(u8, u8, i64)]) -> (bool, [Vec<i64>; 2]) {
        let levels: Vec<_> = levels
            .iter()
            .map(|&(entry_type, level, px)| encode::SnapshotLevel {
                px: px * 1_000_000_000,
                size: 1,
                orders: None,
                level,
                entry_type,
            })
            .collect();
        let mut d = Vec::new();
        encode::start_packet(&mut d, 1, 1_000);
        encode::snapshot(
            &mut d,
            &encode::Snapshot {
                last_msg_seq_num: 0,
                tot_num_reports: 1,
                security_id: 1,
                rpt_seq: 1,
                transact_time: 1,
                trading_status: None,
                levels: &levels,
            },
        );
        let raw = sbe::packet(&d).unwrap().1.next().unwrap().unwrap();
        let Ok(Item::Known {
            body: Body::Snapshot(s),
            ..
        }) = super::super::messages::decode(&raw)
        else {
            panic!("a snapshot")
        };
        let mut out = SnapshotLevels::default();
        let usable = snapshot_levels(s.entries, depth, &mut out);
        let prices = out
            .sides()
            .map(|l| l.iter().map(|l| l.price / 1_000_000_000).collect());
        (usable, prices)
    }

    fn levels_of(levels: &[(u8, u8, i64)]) -> (bool, [Vec<i64>; 2]) {
        levels_at(3, levels)
    }

    #[test]
    fn snapshot_levels_are_placed_by_level_and_checked_whole() {
        let (bid, offer) = (ty::BID, ty::OFFER);
        // In any order, each side best first; beyond the depth and other
        // entry types are no levels.
        assert_eq!(
            levels_of(&[
                (bid, 3, 97),
                (offer, 2, 102),
                (bid, 2, 98),
                (b'E', 1, 99),
                (bid, 4, 96),
                (bid, 1, 99),
                (offer, 1, 101)
            ]),
            (true, [vec![99, 98, 97], vec![101, 102]])
        );
        assert_eq!(levels_of(&[]), (true, [vec![], vec![]]));
        // A repeated level, or a hole, and the snapshot is not usable.
        assert!(!levels_of(&[(bid, 1, 99), (bid, 1, 98)]).0);
        assert!(!levels_of(&[(bid, 1, 99), (offer, 2, 102)]).0);
        // The deepest books: levels past 64, in reverse order.
        let deep = |levels: Vec<u8>| {
            let l: Vec<_> = levels
                .into_iter()
                .map(|l| (offer, l, 1000 + i64::from(l)))
                .collect();
            levels_at(MAX_DEPTH, &l)
        };
        // (MDPriceLevel 127 is Int8NULL's null: no level.)
        let (usable, [bids, offers]) = deep((1..=MAX_DEPTH).rev().collect());
        assert!(usable && bids.is_empty());
        assert_eq!(offers, (1001..=1126).collect::<Vec<_>>());
        assert_eq!(deep((1..=65u8).rev().collect()).1[1].len(), 65);
        for holed in [
            (1..=64u8).chain([66]).collect(),
            (1..=63u8).chain([65]).collect(),
            vec![65u8],
            (1..=100u8).chain([100]).collect(),
            (1..=64u8).chain([1]).collect::<Vec<_>>(),
        ] {
            assert!(!deep(holed).0);
        }
        // Beyond the depth is no level, not a hole.
        assert_eq!(
            levels_at(64, &[(bid, 1, 9), (bid, 65, 8)]),
            (true, [vec![9], vec![]])
        );
    }

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
        assert!(!plan.take(&copy, ph));
        assert!(!plan.take(&d[..d.len() - 10], ph));
        let other = sbe::PacketHeader {
            msg_seq_num: 8,
            ..ph
        };
        assert!(!plan.take(&d, other));
        assert!(plan.take(&d, ph));
        assert_eq!(plan.steps.borrow().len(), 3);
        let reset = plan.steps.borrow()[2].item(&d);
        assert!(matches!(
            reset,
            Some(Item::Known {
                body: Body::ChannelReset,
                ..
            })
        ));
        assert!(!plan.take(&d, ph), "taken");
        // A datagram that fails validation leaves no plan, even of the one
        // before it.
        plan.validate(&d).unwrap();
        assert!(plan.validate(&d[..d.len() - 1]).is_err());
        assert!(!plan.take(&d, ph));
        assert!(!plan.take(&d[..d.len() - 1], ph));
    }

    /// A packet of `n` heartbeats, the smallest message.
    fn heartbeats(seq: u32, n: usize) -> Vec<u8> {
        let mut d = Vec::new();
        encode::start_packet(&mut d, seq, 1_000);
        for _ in 0..n {
            encode::heartbeat(&mut d);
        }
        d
    }

    #[test]
    fn the_largest_udp_datagram_of_the_smallest_messages_fits_the_plan() {
        let plan = Plan::default();
        let d = heartbeats(7, PLAN_MESSAGES);
        assert_eq!(
            d.len() - sbe::PACKET_HEADER_LEN,
            PLAN_MESSAGES * sbe::MIN_MSG_SIZE
        );
        assert!(d.len() <= MAX_DATAGRAM);
        let ph = sbe::packet(&d).unwrap().0;
        let capacity = plan.steps.borrow().capacity();
        plan.validate(&d).unwrap();
        assert!(plan.take(&d, ph));
        assert_eq!(plan.steps.borrow().len(), PLAN_MESSAGES);
        // One message more is longer than any UDP datagram: valid, not
        // planned (decoded again), and the buffer did not grow.
        let d = heartbeats(7, PLAN_MESSAGES + 1);
        assert!(d.len() > MAX_DATAGRAM);
        let s = plan.validate(&d).unwrap();
        assert_eq!(s.messages as usize, PLAN_MESSAGES + 1);
        assert!(!plan.take(&d, ph));
        assert_eq!(plan.steps.borrow().capacity(), capacity);
    }

    const T0: u64 = 1_700_000_000_000_000_000;

    /// A packet of `n` book messages, one bid entry each, of instruments
    /// `first..first + n` at RptSeq `rpt`, the price telling each apart.
    fn books(seq: u32, sent: u64, first: i32, n: usize, rpt: u32) -> Vec<u8> {
        let mut d = Vec::new();
        encode::start_packet(&mut d, seq, sent);
        for k in 0..n as i32 {
            let e = encode::BookEntry {
                px: Some(i64::from(1_000 + first + k) * 1_000_000_000),
                size: Some(10 + k),
                security_id: first + k,
                rpt_seq: rpt,
                orders: None,
                level: 1,
                action: 0,
                entry_type: b'0',
            };
            encode::book(&mut d, sent, &[e]);
        }
        d
    }

    fn decodes() -> u64 {
        messages::DECODES.with(|n| n.get())
    }

    /// The bid each instrument of `first..first + n` shows.
    fn bids(feed: &Feed, first: i32, n: usize) -> Vec<(i64, u64)> {
        (first..first + n as i32)
            .map(|id| {
                let sym = Symbol::parse(&format!("#{id}")).unwrap();
                let (_, v) = feed.symbol_view(sym).expect("known");
                (v.bid_px, v.bid_qty)
            })
            .collect()
    }

    fn expected(first: i32, n: usize) -> Vec<(i64, u64)> {
        (0..n as i32)
            .map(|k| {
                (
                    i64::from(1_000 + first + k) * 1_000_000_000,
                    (10 + k) as u64,
                )
            })
            .collect()
    }

    /// More messages than the old plan's 32: each decoded once (when
    /// validated), applied from the plan, every instrument's bid shown.
    #[test]
    fn a_packet_of_more_than_32_messages_is_applied_from_its_plan() {
        let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 1);
        let n = 40;
        let d = books(1, T0, 100, n, 1);
        let before = decodes();
        feed.on_datagram(0, &d, T0 as i64);
        assert_eq!(decodes() - before, n as u64, "each message decoded once");
        assert_eq!(bids(&feed, 100, n), expected(100, n));
    }

    /// C5 by candidate: the candidate's datagram is applied at the
    /// confirming packet's arrival from the steps its validation left,
    /// not decoded again.
    #[test]
    fn a_session_candidate_is_applied_from_its_plan() {
        let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), 1);
        let n = 40;
        for seq in 1..=5 {
            let d = books(seq, T0 + u64::from(seq), 100, 2, seq);
            feed.on_datagram(0, &d, (T0 + u64::from(seq)) as i64);
        }
        // A new session: MsgSeqNum 1 sent later (the candidate), then 2.
        let t1 = T0 + 1_000_000_000;
        let candidate = books(1, t1, 200, n, 1);
        let confirming = books(2, t1 + 1, 300, n, 1);
        let before = decodes();
        feed.on_datagram(0, &candidate, t1 as i64);
        // Set aside: nothing applied yet.
        assert!(Symbol::parse("#200")
            .and_then(|s| feed.symbol_view(s))
            .is_none());
        feed.on_datagram(0, &confirming, (t1 + 1) as i64);
        assert_eq!(
            decodes() - before,
            2 * n as u64,
            "candidate and confirming packet each decoded once"
        );
        assert_eq!(bids(&feed, 200, n), expected(200, n));
        assert_eq!(bids(&feed, 300, n), expected(300, n));
    }
}
