//! Per-feed settings of `semantics.md` (scenario feeds and the config file
//! both map onto this). Plain data; validation of user input is the config
//! module's job, the core only clamps values it cannot work with.

pub use crate::venue::{ChannelSet, VenueKind, VenueSettings};

/// `full`: every Quote is the whole quote. `delta`: a Quote changes only
/// the sides it flags (wire.md "Quote").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Full,
    Delta,
}

/// C4: what keeps a symbol alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Liveness {
    /// Only the symbol's own Quotes and gap-free Heartbeats (default).
    #[default]
    Symbol,
    /// Also the channel's `alive_at` for verified, non-suspect symbols
    /// (providers without per-symbol heartbeats).
    Channel,
}

/// "Clock offset (per feed)".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClockOffset {
    /// Always 0.
    Off,
    /// Windowed minimum of `arrival - source_ts`, rising at most 1 ms/s.
    #[default]
    Auto,
    /// Fixed by the operator (PTP/NTP measurement), in nanoseconds.
    FixedNs(i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedSettings {
    pub mode: Mode,
    pub liveness: Liveness,
    /// Default `stale_quote` threshold of the feed's symbols.
    pub stale_ms: u64,
    /// Default `stale_at_source` threshold of the feed's symbols.
    pub source_max_age_ms: u64,
    /// S5: a per-symbol sequence difference this large is not believed.
    /// Values below 1 are treated as 1.
    pub max_seq_jump: u64,
    pub clock_offset: ClockOffset,
    /// Capacity of the symbol table, allocated up front. Symbols beyond it
    /// are counted (`symbols_overflow`) and ignored.
    pub max_symbols: usize,
    /// The venue the feed speaks (venues.md) and its adapter's settings.
    pub venue: VenueSettings,
    /// C3b: a channel sequence this far or more beyond `next` is not
    /// believed.
    pub max_channel_jump: u64,
    /// Gap recovery (recovery.md).
    pub recovery: Recovery,
}

/// recovery.md "Settings": how long and how much a feed holds for a hole,
/// and how it re-requests. The re-request servers' addresses are the I/O
/// shell's; the core only needs how many there are (it names the one to
/// ask by index, in turn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// R1/R2: how long a gap stays open for the other lines.
    pub gap_hold_us: u64,
    /// R2: most datagrams held at once (at least 1).
    pub gap_hold_packets: usize,
    /// R4: configured re-request servers (0: none).
    pub rerequest_servers: usize,
    /// R4c (`cboe-pitch`): the feed has a Gap Request Proxy, whose
    /// `grp.max_count` this is (its address and login are the I/O
    /// shell's). It is the feed's one refill server.
    pub gap_proxy: Option<u16>,
    /// R4: wait for an answer before asking again.
    pub rerequest_timeout_ms: u64,
    /// R4: requests in a row without progress before the hole is lost.
    pub rerequest_attempts: u32,
    /// R2: no hole stays open longer than this after its open time,
    /// progress or not.
    pub max_hole_ms: u64,
    /// R5: the feed has a snapshot server (nasdaq-itch, GLIMPSE); its
    /// address and login are the I/O shell's.
    pub snapshot: bool,
    /// R5: most bytes of datagrams held while a snapshot runs
    /// (`snapshot.hold_mib`; R5c: `spin.hold_mib`, per attempt).
    pub snapshot_hold_bytes: usize,
    /// R5c (`cboe-pitch`): the units whose Spin Server `spin.servers`
    /// names (addresses and login are the I/O shell's); empty: none.
    pub spin_units: ChannelSet,
}

/// R2: `max_hole_ms`'s default.
pub const DEFAULT_MAX_HOLE_MS: u64 = 2_000;
/// R5: `snapshot.hold_mib`'s default, in bytes.
pub const DEFAULT_SNAPSHOT_HOLD_BYTES: usize = 512 << 20;
/// R5: `snapshot.max_mib`'s default (the snapshot's own messages), in
/// bytes.
pub const DEFAULT_SNAPSHOT_MAX_BYTES: usize = 256 << 20;

impl Default for Recovery {
    fn default() -> Self {
        Recovery {
            gap_hold_us: 0,
            gap_hold_packets: 10_000,
            rerequest_servers: 0,
            gap_proxy: None,
            rerequest_timeout_ms: 50,
            rerequest_attempts: 3,
            max_hole_ms: DEFAULT_MAX_HOLE_MS,
            snapshot: false,
            snapshot_hold_bytes: DEFAULT_SNAPSHOT_HOLD_BYTES,
            spin_units: ChannelSet::default(),
        }
    }
}

impl Recovery {
    /// R1: with no hold time and no re-request server nothing is held and
    /// C3 applies as written.
    pub fn holds(&self) -> bool {
        self.gap_hold_us > 0
            || self.refill_servers() > 0
            || self.snapshot
            || !self.spin_units.is_empty()
    }

    /// Whether channel `ch` has an image server: the feed's snapshot (R5,
    /// one channel), or the unit's Spin Server (R5c).
    pub fn images_on(&self, ch: u8) -> bool {
        self.snapshot || self.spin_units.contains(ch)
    }

    /// The servers a hole may be refilled from (R4: the `rerequest`
    /// servers; R4c: the Gap Request Proxy, one).
    pub fn refill_servers(&self) -> usize {
        self.rerequest_servers + usize::from(self.gap_proxy.is_some())
    }
}

impl FeedSettings {
    /// Slots of the feed's symbol table: `max_symbols` symbols, each with
    /// as many slots as its venue gives it names (venues.md `cme-mdp3`: an
    /// instrument takes one of `max_symbols` whichever name a check uses).
    pub fn table_slots(&self) -> usize {
        self.max_symbols
            .saturating_mul(self.venue.kind.slots_per_symbol())
    }
}

impl Default for FeedSettings {
    fn default() -> Self {
        FeedSettings {
            mode: Mode::Full,
            liveness: Liveness::Symbol,
            stale_ms: 500,
            source_max_age_ms: 2000,
            max_seq_jump: 1_000_000,
            clock_offset: ClockOffset::Auto,
            max_symbols: 100_000,
            venue: VenueSettings::default(),
            max_channel_jump: super::channel::DEFAULT_MAX_CHANNEL_JUMP,
            recovery: Recovery::default(),
        }
    }
}

impl FeedSettings {
    /// The defaults of a venue's feeds (venues.md: venue feeds take
    /// `liveness = "channel"`, `stale_ms = 1500` and, recovery.md,
    /// `gap_hold_us = 1000`; every other setting keeps semantics.md's
    /// default).
    pub fn for_venue(kind: VenueKind) -> FeedSettings {
        let mut s = FeedSettings {
            venue: VenueSettings {
                kind,
                ..VenueSettings::default()
            },
            ..FeedSettings::default()
        };
        if kind.is_venue_feed() {
            s.liveness = Liveness::Channel;
            s.stale_ms = 1500;
            // recovery.md "Settings": venue feeds have no per-symbol
            // sequence numbers to clear a gap, so they wait for the other
            // line by default.
            s.recovery.gap_hold_us = 1000;
        }
        s
    }
}

/// Milliseconds to nanoseconds for thresholds, saturating (a huge threshold
/// means "never", not an overflow).
pub fn ms_to_ns(ms: u64) -> i64 {
    ms.saturating_mul(1_000_000).min(i64::MAX as u64) as i64
}
