//! Venue adapters (venues.md): each turns one venue's datagrams into the
//! events the rules of `semantics.md` already know, so the channel rules,
//! A/B arbitration, the clock estimator, the state table and the gate stay
//! one implementation (`feed::engine`). Pure code: no I/O, time passed in.
//!
//! One trait, `Venue`, and one adapter per venue in its own file or folder
//! (`tickgate.rs`, `iex_tops/`, `nasdaq_itch/`); the engine drives an
//! `AnyVenue` and never asks which one runs. Adding a venue: a new folder
//! implementing `Venue`, one arm in `AnyVenue` and `VenueKind` below, and
//! its config name (docs/venues.md "Adding a venue").
//!
//! An adapter:
//! 1. `parse` validates a datagram whole (an invalid one changes nothing)
//!    and returns its `Header`: session, channel sequence, kind;
//! 2. the engine applies the channel rules (C1-C6) to the header;
//! 3. `apply` feeds the messages the channel lets through (C2 skips those
//!    another line already delivered) to `Rules`, the engine's symbol rules.

pub mod cboe_pitch;
pub mod channel_set;
pub mod cme_mdp3;
pub mod codec;
pub mod iex_tops;
pub mod nasdaq_itch;
pub mod refill;
pub mod rerequest;
pub mod tickgate;

use std::fmt;

use crate::util::pages::MemRange;
use crate::wire::{Heartbeat, PacketKind, Quote, SessionId, Side, Symbol, WireError};

/// What the channel rules (C1-C6) need of a valid packet, whatever its
/// venue's framing: the session, the channel sequence of its first message
/// (for a heartbeat, the next sequence number) and what kind it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelHeader {
    pub session: SessionId,
    pub sequence: u64,
    pub kind: PacketKind,
    /// Message blocks of a data packet (0 otherwise).
    pub count: u16,
    /// A venue without session ids knows the packet belongs to a session
    /// already replaced (venues.md `cme-mdp3`: sent before the current
    /// session's first packet): dropped and counted (C5).
    pub stale_session: bool,
}

/// The venue a feed speaks (config `venue`, `--venue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum VenueKind {
    /// tickgate's own protocol (wire.md).
    #[default]
    Tickgate,
    /// IEX TOPS 1.6 over IEX-TP.
    IexTops,
    /// Nasdaq TotalView-ITCH 5.0 over MoldUDP64.
    NasdaqItch,
    /// CME Group MDP 3.0 (SBE over UDP).
    CmeMdp3,
    /// Cboe US Equities Multicast PITCH (Sequenced Unit Header over UDP).
    CboePitch,
}

impl VenueKind {
    pub const ALL: [VenueKind; 5] = [
        VenueKind::Tickgate,
        VenueKind::IexTops,
        VenueKind::NasdaqItch,
        VenueKind::CmeMdp3,
        VenueKind::CboePitch,
    ];

    /// The name used in config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            VenueKind::Tickgate => "tickgate",
            VenueKind::IexTops => "iex-tops",
            VenueKind::NasdaqItch => "nasdaq-itch",
            VenueKind::CmeMdp3 => "cme-mdp3",
            VenueKind::CboePitch => "cboe-pitch",
        }
    }

    /// How many table slots an instrument of this venue may take: one per
    /// name it answers under (`cme-mdp3`: `#<SecurityID>` and its
    /// definition's symbol). The feed's table holds `max_symbols`
    /// instruments, so it is laid out with this many slots for each
    /// (venues.md `cme-mdp3`, Instruments and symbols).
    pub fn slots_per_symbol(self) -> usize {
        match self {
            VenueKind::CmeMdp3 => 2,
            _ => 1,
        }
    }

    /// Unit cells the gate's readers keep for a feed of several channels
    /// (venues.md `cboe-pitch`: 256, unit ids 1-255, docs/shm-layout.md),
    /// 0 for a venue of one channel.
    pub fn unit_cells(self) -> usize {
        match self {
            VenueKind::CboePitch => 256,
            _ => 0,
        }
    }

    pub fn parse(s: &str) -> Option<VenueKind> {
        VenueKind::ALL.into_iter().find(|v| v.name() == s)
    }

    /// How this venue's message types are named in summaries: CME's by
    /// template id (`32`), PITCH's by hex type byte (`0x21`: its types are
    /// numbers, though some happen to be printable), the others by their
    /// type byte (`A`, `0x0c`).
    pub fn message_type_label(self, t: u8) -> String {
        match self {
            VenueKind::CmeMdp3 => t.to_string(),
            VenueKind::CboePitch => format!("0x{t:02x}"),
            _ if t.is_ascii_graphic() => (t as char).to_string(),
            _ => format!("0x{t:02x}"),
        }
    }

    /// The longest symbol this venue's messages can name (gate.md): CME's
    /// definitions name up to 20 characters, the others' wire fields 8.
    pub fn max_symbol_len(self) -> usize {
        match self {
            VenueKind::CmeMdp3 => crate::wire::SYMBOL_MAX,
            _ => crate::wire::WIRE_SYMBOL_LEN,
        }
    }

    /// venues.md: venue feeds default to `liveness = "channel"` and
    /// `stale_ms = 1500`; `mode` does not apply to them.
    pub fn is_venue_feed(self) -> bool {
        self != VenueKind::Tickgate
    }
}

impl fmt::Display for VenueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a datagram is invalid for its venue (dropped whole, counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatagramError {
    /// MoldUDP64 framing or a block size (tickgate and nasdaq-itch).
    Mold(WireError),
    /// IEX-TP segment or TOPS message.
    Iex(iex_tops::IexError),
    /// CME MDP 3.0 packet or SBE message.
    Cme(cme_mdp3::sbe::SbeError),
    /// Cboe PITCH datagram (Sequenced Unit Header or a message).
    Pitch(cboe_pitch::frame::FrameError),
    /// A datagram on a kind of line the venue does not have.
    NoSuchLine,
}

impl From<WireError> for DatagramError {
    fn from(e: WireError) -> DatagramError {
        DatagramError::Mold(e)
    }
}

impl From<iex_tops::IexError> for DatagramError {
    fn from(e: iex_tops::IexError) -> DatagramError {
        DatagramError::Iex(e)
    }
}

impl From<cme_mdp3::sbe::SbeError> for DatagramError {
    fn from(e: cme_mdp3::sbe::SbeError) -> DatagramError {
        DatagramError::Cme(e)
    }
}

impl From<cboe_pitch::frame::FrameError> for DatagramError {
    fn from(e: cboe_pitch::frame::FrameError) -> DatagramError {
        DatagramError::Pitch(e)
    }
}

impl fmt::Display for DatagramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatagramError::Mold(e) => e.fmt(f),
            DatagramError::Iex(e) => e.fmt(f),
            DatagramError::Cme(e) => e.fmt(f),
            DatagramError::Pitch(e) => e.fmt(f),
            DatagramError::NoSuchLine => f.write_str("this venue has no such kind of line"),
        }
    }
}

impl std::error::Error for DatagramError {}

/// A MoldUDP64 datagram held apart from its framing: its header's fields
/// and its message blocks (what follows the 20-byte header), as a reader
/// holding messages rather than datagrams (a Nasdaq BinaryFILE's) hands
/// it over (`Venue::parse_blocks`).
#[derive(Clone, Copy, Debug)]
pub struct MoldParts<'a> {
    pub session: SessionId,
    pub sequence: u64,
    pub count: u16,
    pub blocks: &'a [u8],
    pub checked: BlocksChecked,
}

/// What the reader of message blocks handed over apart from any datagram
/// (`Venue::parse_blocks`) already checked of them, so that the venue
/// whose rule that is need not walk them again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlocksChecked {
    /// Nothing: the venue validates them as a datagram's.
    #[default]
    No,
    /// MoldUDP64 framing with ITCH 5.0 sizes: exactly the datagram's
    /// count of blocks, no byte after them, none empty, each at least its
    /// known type's size (`nasdaq_itch::messages::message_size`): the
    /// Nasdaq BinaryFILE reader's check of every message.
    Itch50,
}

/// A valid datagram's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub channel: ChannelHeader,
    /// The venue's send time of the packet, Unix ns, where its framing
    /// carries one (IEX-TP), for V3 and V5.
    pub send_time: Option<i64>,
}

/// What `apply` saw, for the engine's clock estimator (V5) and channel
/// source time (V3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// How many timestamped messages were processed.
    pub samples: u32,
    /// Their largest timestamp (Unix ns); meaningful when `samples > 0`.
    latest: i64,
    /// C6 signalled by a message (IEX System Event `C`), to be applied
    /// after the packet's other messages.
    pub end_of_session: bool,
    /// The channel's books can no longer be trusted until an image
    /// (recovery.md R5c: a book error or a Unit Clear that removed live
    /// orders): the feed wants one where the channel has an image server.
    pub image_wanted: bool,
}

impl Default for Applied {
    fn default() -> Applied {
        Applied {
            samples: 0,
            latest: i64::MIN,
            end_of_session: false,
            image_wanted: false,
        }
    }
}

impl Applied {
    /// One processed message stamped `ts` (Unix ns). Every message of a
    /// packet is seen at the same `now`, so the packet's smallest delay is
    /// that of its latest message ([`Applied::min_delay`]): only the
    /// latest is kept.
    #[inline(always)]
    pub fn stamp(&mut self, ts: i64) {
        self.samples += 1;
        self.latest = self.latest.max(ts);
    }

    /// Largest message timestamp processed (Unix ns), if any.
    pub fn max_ts(&self) -> Option<i64> {
        (self.samples > 0).then_some(self.latest)
    }

    /// Smallest `now - timestamp` of the processed messages seen at `now`
    /// (`i64::MAX` when none).
    pub fn min_delay(&self, now: i64) -> i64 {
        match self.max_ts() {
            Some(t) => now.saturating_sub(t),
            None => i64::MAX,
        }
    }
}

/// Counters a venue adapter bumps through `Rules::count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// A message of a type the venue does not know, skipped by length.
    UnknownMessage,
    /// A message whose fields are not acceptable (e.g. a tickgate Quote
    /// with `seq = 0`), ignored.
    InvalidMessage,
    /// nasdaq-itch: a message naming an order the book does not hold.
    UnknownOrder,
    /// nasdaq-itch: an Add that did not fit the order table.
    OrderOverflow,
    /// nasdaq-itch: an order reference reused while live, or an execution
    /// or cancel larger than the order: counted, the book kept consistent.
    OrderConflict,
    /// nasdaq-itch: a snapshot names one stock by two locates; which book
    /// is the stock's cannot be known (the symbol is not trusted).
    LocateConflict,
    /// cme-mdp3: a Book entry that cannot apply to its book. cboe-pitch:
    /// an Add Order with a side other than `B`/`S`, or of an order id
    /// already live on its unit (venues.md).
    BookError,
    /// cboe-pitch: a Unit Clear.
    UnitClear,
    /// cboe-pitch: a price the books cannot hold (above u32 with 4
    /// decimals, $429,496.7295): the order is not on the book and its
    /// symbol is suspect `gap` (docs/venues.md, a known limit).
    PriceUnbookable,
    /// cme-mdp3: a snapshot not used (its instrument does not wait, or the
    /// snapshot does not cover what was lost or reset).
    SnapshotIgnored,
    /// cboe-pitch (recovery.md R5c): a spin applied without any Trading
    /// Status.
    SpinWithoutStatus,
    /// cme-mdp3: a new instrument that the full table cannot hold (counted
    /// once per SecurityID, as `symbols_overflow`).
    SymbolOverflow,
}

/// What a feed's line carries (venues.md `cme-mdp3`, Lines; every other
/// venue has incremental lines only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum LineKind {
    /// Real-time packets under the channel rules.
    #[default]
    Incremental,
    /// A snapshot loop (CME Market Recovery): no channel rules.
    Snapshot,
    /// A definition loop (CME Instrument Recovery): no channel rules.
    Definition,
    /// A gap response line (venues.md `cboe-pitch`, Lines): the messages
    /// the Gap Request Proxy sends again. Under the channel rules, but it
    /// never begins or baselines a unit's session (R4c).
    Gap,
}

impl LineKind {
    pub const ALL: [LineKind; 4] = [
        LineKind::Incremental,
        LineKind::Snapshot,
        LineKind::Definition,
        LineKind::Gap,
    ];

    /// The name used in config (`kind` of a line).
    pub fn name(self) -> &'static str {
        match self {
            LineKind::Incremental => "incremental",
            LineKind::Snapshot => "snapshot",
            LineKind::Definition => "definition",
            LineKind::Gap => "gap",
        }
    }

    /// A config name; `realtime` (venues.md `cboe-pitch`: a real-time
    /// multicast group) is PITCH's name for an incremental line.
    pub fn parse(s: &str) -> Option<LineKind> {
        if s == "realtime" {
            return Some(LineKind::Incremental);
        }
        LineKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the channel rules apply to the line's datagrams (an
    /// incremental or gap line; not a CME loop).
    pub fn sequenced(self) -> bool {
        matches!(self, LineKind::Incremental | LineKind::Gap)
    }

    /// The kind's name on `venue`'s feeds (PITCH says `realtime`).
    pub fn name_on(self, venue: VenueKind) -> &'static str {
        match (self, venue) {
            (LineKind::Incremental, VenueKind::CboePitch) => "realtime",
            _ => self.name(),
        }
    }
}

pub use channel_set::ChannelSet;

/// What a venue without session ids makes of a valid datagram before the
/// channel rules see it ([`Venue::place`]; venues.md `cboe-pitch`,
/// Sessions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Under the channel rules, with the session the venue set.
    Channel,
    /// Hdr Sequence 0: part of no unit's sequence; changes nothing, counted
    /// (`unsequenced`).
    Unsequenced,
    /// A gap-line datagram of a unit with no session or an ended one, or a
    /// gap-line heartbeat (R4c): changes nothing, counted (`gap_dropped`).
    GapDropped,
    /// A lagging line's copy of a unit's session that a restart (rule 4)
    /// replaced, within `max_hole_ms` of it: changes nothing, counted with
    /// the replaced sessions' packets (C5, `stale_session_dropped`).
    LaggingCopy,
    /// A datagram of a channel other than the one the engine selected
    /// (never, since the engine selects each datagram's channel first):
    /// changes nothing, counted (`units_not_followed`).
    OtherUnit,
}

/// A venue's recovery gauges and counters beyond the engine's (venues.md
/// `cme-mdp3`: instruments waiting, kept entries).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VenueRecovery {
    /// Instruments waiting for a snapshot now.
    pub waiting: u64,
    /// Entries kept for them now.
    pub kept_entries: u64,
    /// Kept entries dropped over the bound so far.
    pub kept_dropped: u64,
}

/// What an entry of a venue with per-instrument sequences did (venues.md
/// `cme-mdp3`, Entries): whether its content may be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryOutcome {
    /// Applied by S4 (or S1/S3); `fresh` when it started the instrument
    /// from an empty book (its first entry, with seq 1).
    Applied { fresh: bool },
    /// Dropped by S2: its content changes nothing.
    NotApplied,
    /// Refused by S5, or (an entry of a packet processed now) its RptSeq
    /// is at or below `last_seq`, which contradicts the sequence held:
    /// changes nothing, the symbol is suspect `seq_anomaly` and its
    /// sequence is not believed (the next usable snapshot is taken
    /// whatever its RptSeq).
    Refused,
}

/// How the verdict treats a venue's feeds (the engine sets feed flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Policy {
    /// V3 (with `liveness = "channel"`): the channel vouches for the time.
    pub channel_source_time: bool,
    /// nasdaq-itch, replacing S7: trust only a session received from its
    /// sequence 1 without a channel gap.
    pub trust_from_start: bool,
    /// cme-mdp3: snapshot and definition lines (`Venue::apply_loop`),
    /// joined while the feed's loops machine wants them.
    pub loops: bool,
}

/// The engine's symbol rules, as a venue adapter drives them. Slots are
/// the feed's dense symbol indices.
pub trait Rules {
    /// The arrival time of the datagram being applied.
    fn now(&self) -> i64;
    /// tickgate protocol, S1-S6 (the engine validates nothing here).
    fn quote(&mut self, q: &Quote);
    fn heartbeat(&mut self, h: &Heartbeat);
    /// S8.
    fn snapshot(&mut self, s: &Quote);
    /// Makes `symbol` known and returns its slot (`None`: table full,
    /// counted by the engine).
    fn symbol(&mut self, symbol: Symbol) -> Option<u32>;
    /// A cache hint for the state of `slot` (a `symbol` result) that a
    /// call will soon touch. Changes nothing.
    #[inline]
    fn prefetch_symbol(&self, _slot: u32) {}
    /// V1: the whole quote of a venue feed.
    fn venue_quote(
        &mut self,
        slot: u32,
        seq: u64,
        source_ts: i64,
        bid: Option<Side>,
        ask: Option<Side>,
    );
    /// V2: halt source `source` (one bit) of `slot` says halted or not.
    fn set_halt(&mut self, slot: u32, source: u8, halted: bool);
    /// The symbol's book is incomplete until the next session (`gap`).
    fn suspect_gap(&mut self, slot: u32);
    fn count(&mut self, what: Count);

    /// A venue of several channels: the channels that reach `slot`
    /// (`Venue::channels_of`) are now `channels`. Told before the message
    /// that changed them applies, so the gate's readers judge the symbol
    /// by its channels from then on (`Publish::publish_symbol_unit`).
    #[inline]
    fn channels_changed(&mut self, _slot: u32, _channels: ChannelSet) {}

    /// venues.md `cme-mdp3`, Entries: one entry of the instrument at
    /// `slot`, S1-S5 on `seq` in delta mode, no quote change. `new`: the
    /// entry comes from a packet the channel rules process now (not one
    /// replayed from the kept entries), so a `seq` at or below `last_seq`
    /// contradicts the sequence instead of being S2's old message.
    fn entry(&mut self, _slot: u32, _seq: u64, _source_ts: i64, _new: bool) -> EntryOutcome {
        EntryOutcome::NotApplied
    }
    /// The venue's book gave `slot` a new level 1 (its quote).
    fn book_quote(&mut self, _slot: u32, _bid: Option<Side>, _ask: Option<Side>) {}
    /// A snapshot the venue used for `slot` (it replaces S8).
    fn use_snapshot(
        &mut self,
        _slot: u32,
        _seq: u64,
        _source_ts: i64,
        _bid: Option<Side>,
        _ask: Option<Side>,
    ) {
    }
    /// A channel reset: `slot` forgets its sequence as C5 says.
    fn forget_sequence(&mut self, _slot: u32) {}
    /// C5 for one symbol, now (a venue of several channels: the new
    /// session of one of them reaches its symbols only).
    fn forget_session(&mut self, _slot: u32) {}
    /// `slot`'s book can no longer be trusted: suspect `gap` unless it
    /// already has a cause, until a snapshot.
    fn suspect_book(&mut self, _slot: u32) {}
    /// recovery.md R5c step 2: a spin rebuilt the book of `slot`'s unit:
    /// its cause is cleared (trading state and quote are the spin's to set).
    fn reset_for_spin(&mut self, _slot: u32) {}
    /// `slot`'s `last_seq`, if it has one this session.
    fn sequence(&self, _slot: u32) -> Option<u64> {
        None
    }
    /// Whether `slot` waits for a snapshot (suspect, unverified, or
    /// without a sequence).
    fn waits(&self, _slot: u32) -> bool {
        false
    }
    /// Another name of the same instrument: `to` shows `from`'s state.
    fn mirror(&mut self, _from: u32, _to: u32) {}
    /// A name no longer names anything: `slot` is as new (no data).
    fn clear_symbol(&mut self, _slot: u32) {}

    /// The feed's loops machine (venues.md `cme-mdp3`, Snapshots), for a
    /// venue with snapshot and definition loops.
    type Loops: codec::LoopMachine<LoopEntry>;
    fn loops(&mut self) -> &mut Self::Loops;
}

/// The entry a venue keeps for an instrument waiting for a loop snapshot
/// (CME's, the only venue with loops).
pub type LoopEntry = cme_mdp3::recovery::KeptEntry;

/// One venue's adapter.
pub trait Venue {
    /// What this venue changes in the verdict.
    fn policy(&self) -> Policy;

    /// Validates the whole datagram; nothing may be applied before this.
    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError>;

    /// A datagram of an incremental line that `parse` accepted: whether
    /// the venue keeps it aside, with no effect on any rule (`cme-mdp3`: a
    /// candidate for a new session until the next packet of its numbering
    /// confirms it). The engine then does nothing more with it.
    #[inline]
    fn set_aside(&mut self, _datagram: &[u8]) -> bool {
        false
    }

    /// A datagram that `parse` accepted, from a line of `kind`, arriving at
    /// `now` while the channel expects `next`: a venue whose framing names
    /// no session (`cboe-pitch`) decides here which session it belongs to
    /// (venues.md's rules 1-4) and sets `header.channel.session`, or keeps
    /// it from the channel rules. Called once per arrival, before any rule.
    #[inline]
    fn place(
        &mut self,
        _kind: LineKind,
        _datagram: &[u8],
        _header: &mut Header,
        _next: u64,
        _now: i64,
    ) -> Placement {
        Placement::Channel
    }

    /// How many channels a feed of this venue keeps (venues.md
    /// `cboe-pitch`: the unit is the channel, 1-255). Every other venue
    /// has one, id 0. Channel ids are below this number.
    #[inline]
    fn channels(&self) -> usize {
        1
    }

    /// The channel a datagram that `parse` accepted belongs to (below
    /// `channels()`; 0 on a venue of one channel).
    #[inline]
    fn channel_of(&self, _datagram: &[u8]) -> u8 {
        0
    }

    /// The engine works on channel `channel` from now on: `place`,
    /// `on_loss`, `on_session_start`, `forget_channel_session` and `apply`
    /// concern it until the next call. Never called on a venue of one
    /// channel.
    #[inline]
    fn select_channel(&mut self, _channel: u8) {}

    /// The channels whose rules reach the symbol at `slot` (venues.md
    /// `cboe-pitch`, Units and symbols: the units that carried it);
    /// empty: none. Asked only on a venue of several channels.
    #[inline]
    fn channels_of(&self, _slot: u32) -> ChannelSet {
        ChannelSet::default()
    }

    /// Appends to `out` the slots whose `channels_of` changed outside a
    /// `Rules` call (a channel's new session) since the last call, and
    /// forgets them (the engine publishes each symbol's unit for the
    /// gate's readers). Asked only on a venue of several channels.
    #[inline]
    fn take_channel_changes(&mut self, _out: &mut Vec<u32>) {}

    /// C5 on the selected channel of a venue of several channels, before
    /// `on_session_start`: every symbol of that channel forgets its
    /// session (`Rules::forget_session`); the others are untouched.
    #[inline]
    fn forget_channel_session<R: Rules>(&mut self, _rules: &mut R) {}

    /// C3 declared a loss on the channel, before the datagram that
    /// revealed it is applied (`cboe-pitch`: messages are untimed until the
    /// next Time, since the lost datagrams may have held one).
    #[inline]
    fn on_loss(&mut self) {}

    /// R2's `max_hole_ms`, in ns (`cboe-pitch`: the window in which a
    /// restarted unit drops the replaced session's lagging copies, C5).
    fn set_max_hole_ns(&mut self, _ns: i64) {}

    /// The feed's table holds this many symbols (`max_symbols`); a venue
    /// that makes symbols of what it sees (`cme-mdp3`: instruments) keeps
    /// no more than that.
    fn set_max_symbols(&mut self, _max: usize) {}

    /// The channel (re)baselined on a session (C1 first session, C5 a new
    /// one) with this datagram, arriving at `now`; before `apply`.
    fn on_session_start(&mut self, now: i64, first_session: bool);

    /// Applies the messages of a datagram that `parse` accepted, from
    /// message `skip` on (C2), to `rules`.
    fn apply<R: Rules>(
        &mut self,
        datagram: &[u8],
        header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied;

    /// MoldUDP64 venues: `parse` of the datagram `parts` make, without
    /// building it. `None` where datagrams are framed otherwise: the
    /// caller builds the datagram. Blocks `checked` by the venue's own
    /// rule are not walked again.
    fn parse_blocks(&self, _parts: &MoldParts<'_>) -> Option<Result<Header, DatagramError>> {
        None
    }

    /// `apply` of the datagram whose parts `parse_blocks` accepted; called
    /// only then, and after `prefetch_blocks` of the same blocks (the
    /// caller hints its datagrams ahead, so this gives no first hints).
    fn apply_blocks<R: Rules>(
        &mut self,
        _blocks: &[u8],
        _header: &Header,
        _skip: u16,
        _rules: &mut R,
    ) -> Applied {
        unreachable!("apply_blocks on a venue whose parse_blocks takes none")
    }

    /// Cache hints for the message blocks of a datagram that will be
    /// applied soon (`apply_blocks` of the next datagram of a run), so
    /// that its first messages find their state in cache. Changes
    /// nothing; any bytes are accepted (nothing is validated).
    fn prefetch_blocks(&self, _blocks: &[u8]) {}

    /// The second stage of the cache hints, for the first messages of
    /// the datagram applied after the one being applied (whose
    /// `prefetch_blocks` came at least a datagram earlier): what those
    /// messages reach through the state the first stage brought into
    /// cache. Changes nothing; any bytes are accepted.
    fn prefetch_levels(&self, _blocks: &[u8]) {}

    /// Live orders held (venues that build books), for the gauge.
    fn live_orders(&self) -> u64 {
        0
    }

    /// Memory of the venue's tables asked to be made resident ahead of
    /// use since the last call (replay only: docs/venues.md "Tables in
    /// replay"), for a helper thread; a hint the caller may ignore.
    fn take_populate(&mut self) -> Option<MemRange> {
        None
    }

    /// A datagram of a snapshot or definition line (venues that have
    /// them): validated whole, then applied without channel rules. The
    /// packet's send time is the venue's to read.
    fn apply_loop<R: Rules>(
        &mut self,
        _kind: LineKind,
        _datagram: &[u8],
        _rules: &mut R,
    ) -> Result<(), DatagramError> {
        Err(DatagramError::NoSuchLine)
    }

    /// Messages applied by type byte, for venues that count them.
    fn message_types(&self) -> Option<&[u64; 256]> {
        None
    }

    /// The symbol of the datagram's first message, read without
    /// validating anything, for prefetch hints only.
    #[inline]
    fn peek_symbol(&self, _datagram: &[u8]) -> Option<Symbol> {
        None
    }

    /// recovery.md R5c step 3: a datagram of the selected channel whose
    /// messages from `first` below `next` an image already reflects (they
    /// are skipped): they may still set the channel's time base, at
    /// `now`. Nothing by default.
    #[inline]
    fn skipped_below(&mut self, _datagram: &[u8], _first: u64, _next: u64, _now: i64) {}

    /// recovery.md R5: checks a snapshot's messages (see `rebuild`)
    /// without changing anything; returns how many there are.
    fn validate_snapshot(&self, _blocks: &[u8]) -> Result<usize, SnapshotError> {
        Err(SnapshotError::Unsupported)
    }

    /// recovery.md R5: replaces every book, order, locate name and trading
    /// state by what a snapshot's messages build (`blocks`: MoldUDP64
    /// message blocks, each a u16 big-endian length then the message, as
    /// `validate_snapshot` accepted them and counted `messages`), then
    /// gives every symbol it names its book's best as its quote with
    /// `seq = next - 1` and `source_ts` = the latest message time. Called
    /// only after `validate_snapshot`, so nothing of a snapshot that does
    /// not parse is ever replaced. Returns that latest time (`i64::MIN`
    /// when no message had one).
    fn rebuild<R: Rules>(
        &mut self,
        _blocks: &[u8],
        _messages: usize,
        _next: u64,
        _rules: &mut R,
    ) -> i64 {
        i64::MIN
    }
}

/// Why a snapshot (recovery.md R5) could not be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotError {
    /// The venue has no snapshot.
    Unsupported,
    /// Block `index` is cut short or is not a message of the venue.
    Malformed { index: usize },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Unsupported => write!(f, "this venue has no snapshot"),
            SnapshotError::Malformed { index } => {
                write!(f, "snapshot message {index} does not parse")
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

/// Settings an adapter is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VenueSettings {
    pub kind: VenueKind,
    /// nasdaq-itch and cboe-pitch: live orders per feed (venues.md,
    /// default 10,000,000).
    pub max_orders: usize,
    /// cme-mdp3: entries kept for instruments waiting for a snapshot, per
    /// feed (venues.md, default 1,000,000).
    pub recovery_entries: usize,
    /// nasdaq-itch: the books' tables laid out for a replay: on
    /// transparent huge pages, the order table's pages ahead of its
    /// inserts asked to be made resident by a helper thread. Replay asks
    /// for it; a live feed does not, since the first touch of each 2 MiB
    /// page would stall the feed's thread (docs/venues.md, "Tables in
    /// replay").
    pub replay_tables: bool,
}

impl Default for VenueSettings {
    fn default() -> VenueSettings {
        VenueSettings {
            kind: VenueKind::Tickgate,
            max_orders: 10_000_000,
            recovery_entries: cme_mdp3::recovery::DEFAULT_RECOVERY_ENTRIES,
            replay_tables: false,
        }
    }
}

/// The registry of venues: the one place that lists them.
pub enum AnyVenue {
    Tickgate(tickgate::Tickgate),
    IexTops(iex_tops::IexTops),
    NasdaqItch(Box<nasdaq_itch::NasdaqItch>),
    CmeMdp3(Box<cme_mdp3::CmeMdp3>),
    CboePitch(Box<cboe_pitch::CboePitch>),
}

impl AnyVenue {
    pub fn new(s: &VenueSettings) -> AnyVenue {
        match s.kind {
            VenueKind::Tickgate => AnyVenue::Tickgate(tickgate::Tickgate),
            VenueKind::IexTops => AnyVenue::IexTops(iex_tops::IexTops::default()),
            VenueKind::NasdaqItch => AnyVenue::NasdaqItch(Box::new(
                nasdaq_itch::NasdaqItch::with_tables(s.max_orders, s.replay_tables),
            )),
            VenueKind::CmeMdp3 => AnyVenue::CmeMdp3(Box::default()),
            VenueKind::CboePitch => {
                AnyVenue::CboePitch(Box::new(cboe_pitch::CboePitch::new(s.max_orders)))
            }
        }
    }

    pub fn kind(&self) -> VenueKind {
        match self {
            AnyVenue::Tickgate(_) => VenueKind::Tickgate,
            AnyVenue::IexTops(_) => VenueKind::IexTops,
            AnyVenue::NasdaqItch(_) => VenueKind::NasdaqItch,
            AnyVenue::CmeMdp3(_) => VenueKind::CmeMdp3,
            AnyVenue::CboePitch(_) => VenueKind::CboePitch,
        }
    }
}

macro_rules! each_venue {
    ($self:expr, $v:ident => $e:expr) => {
        match $self {
            AnyVenue::Tickgate($v) => $e,
            AnyVenue::IexTops($v) => $e,
            AnyVenue::NasdaqItch($v) => $e,
            AnyVenue::CmeMdp3($v) => $e,
            AnyVenue::CboePitch($v) => $e,
        }
    };
}

impl Venue for AnyVenue {
    #[inline]
    fn policy(&self) -> Policy {
        each_venue!(self, v => v.policy())
    }

    #[inline]
    fn parse(&self, datagram: &[u8]) -> Result<Header, DatagramError> {
        each_venue!(self, v => v.parse(datagram))
    }

    #[inline]
    fn set_aside(&mut self, datagram: &[u8]) -> bool {
        each_venue!(self, v => v.set_aside(datagram))
    }

    #[inline]
    fn place(
        &mut self,
        kind: LineKind,
        datagram: &[u8],
        header: &mut Header,
        next: u64,
        now: i64,
    ) -> Placement {
        each_venue!(self, v => v.place(kind, datagram, header, next, now))
    }

    #[inline]
    fn channels(&self) -> usize {
        each_venue!(self, v => v.channels())
    }

    #[inline]
    fn channel_of(&self, datagram: &[u8]) -> u8 {
        each_venue!(self, v => v.channel_of(datagram))
    }

    #[inline]
    fn select_channel(&mut self, channel: u8) {
        each_venue!(self, v => v.select_channel(channel))
    }

    #[inline]
    fn channels_of(&self, slot: u32) -> ChannelSet {
        each_venue!(self, v => v.channels_of(slot))
    }

    #[inline]
    fn take_channel_changes(&mut self, out: &mut Vec<u32>) {
        each_venue!(self, v => v.take_channel_changes(out))
    }

    fn forget_channel_session<R: Rules>(&mut self, rules: &mut R) {
        each_venue!(self, v => v.forget_channel_session(rules))
    }

    #[inline]
    fn on_loss(&mut self) {
        each_venue!(self, v => v.on_loss())
    }

    fn set_max_symbols(&mut self, max: usize) {
        each_venue!(self, v => v.set_max_symbols(max))
    }

    fn set_max_hole_ns(&mut self, ns: i64) {
        each_venue!(self, v => v.set_max_hole_ns(ns))
    }

    fn on_session_start(&mut self, now: i64, first_session: bool) {
        each_venue!(self, v => v.on_session_start(now, first_session))
    }

    // Out of line, with each venue's own body inlined into its arm: the
    // code the measured venues get does not change with the size of the
    // feed's caller (BENCHMARKS.md, ITCH's instructions a datagram).
    #[inline(never)]
    fn apply<R: Rules>(
        &mut self,
        datagram: &[u8],
        header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied {
        each_venue!(self, v => v.apply(datagram, header, skip, rules))
    }

    #[inline]
    fn parse_blocks(&self, parts: &MoldParts<'_>) -> Option<Result<Header, DatagramError>> {
        each_venue!(self, v => v.parse_blocks(parts))
    }

    #[inline]
    fn apply_blocks<R: Rules>(
        &mut self,
        blocks: &[u8],
        header: &Header,
        skip: u16,
        rules: &mut R,
    ) -> Applied {
        each_venue!(self, v => v.apply_blocks(blocks, header, skip, rules))
    }

    #[inline]
    fn prefetch_blocks(&self, blocks: &[u8]) {
        each_venue!(self, v => v.prefetch_blocks(blocks))
    }

    #[inline]
    fn prefetch_levels(&self, blocks: &[u8]) {
        each_venue!(self, v => v.prefetch_levels(blocks))
    }

    #[inline]
    fn live_orders(&self) -> u64 {
        each_venue!(self, v => v.live_orders())
    }

    #[inline]
    fn take_populate(&mut self) -> Option<MemRange> {
        each_venue!(self, v => v.take_populate())
    }

    fn apply_loop<R: Rules>(
        &mut self,
        kind: LineKind,
        datagram: &[u8],
        rules: &mut R,
    ) -> Result<(), DatagramError> {
        each_venue!(self, v => v.apply_loop(kind, datagram, rules))
    }

    fn message_types(&self) -> Option<&[u64; 256]> {
        each_venue!(self, v => v.message_types())
    }

    #[inline]
    fn peek_symbol(&self, datagram: &[u8]) -> Option<Symbol> {
        each_venue!(self, v => v.peek_symbol(datagram))
    }

    fn validate_snapshot(&self, blocks: &[u8]) -> Result<usize, SnapshotError> {
        each_venue!(self, v => v.validate_snapshot(blocks))
    }

    fn skipped_below(&mut self, datagram: &[u8], first: u64, next: u64, now: i64) {
        each_venue!(self, v => v.skipped_below(datagram, first, next, now))
    }

    fn rebuild<R: Rules>(
        &mut self,
        blocks: &[u8],
        messages: usize,
        next: u64,
        rules: &mut R,
    ) -> i64 {
        each_venue!(self, v => v.rebuild(blocks, messages, next, rules))
    }
}
