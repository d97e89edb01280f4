//! `tickgate simulate`: a seeded synthetic provider writing a capture.
//!
//! [`Simulator`] is sans-I/O: an iterator-like generator yielding
//! `(time, line, datagram)` in time order, into a buffer the caller reuses,
//! with no allocation per message once warm. The same stream can be written
//! to a pcap (here) or published live. Everything random comes from a
//! small local PRNG (splitmix64), so a seed gives the same bytes on every
//! platform and with every crate version; integer arithmetic only, except
//! for comparing fault probabilities.
//!
//! The provider: `symbols` instruments quoted at `rate` messages/s in
//! packets of `batch` messages, per-symbol heartbeats and snapshot rounds,
//! channel heartbeats when idle, sent on lines A and B (B a little later).
//! Faults are injected per line (loss, duplicate, reorder) and per provider
//! (session change, one unbelievable sequence number, end of session).
//! [`SimTruth`] counts exactly what was injected, and what a receiver that
//! follows the channel rules (semantics.md C1-C3, C5) must report.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

use super::cme_flow::CmeFlow;
use super::live::{refuse_unroutable, send_paced_in_bursts, McastSender, Pace, SenderOptions};
use super::seeded::SplitMix64;
use super::servers::{
    GlimpseOptions, GlimpseServer, GlimpseSnapshot, GrpOptions, GrpServer, History, PitchHistory,
    RerequestOptions, RerequestServer, SnapshotSource, SpinImage, SpinOptions, SpinServer,
    SpinSource, DEFAULT_HISTORY_MESSAGES,
};
use super::venue_sim::{FlowRequest, IexFlow, ItchFlow, VenueFlow};
use crate::capture::frame::MAX_DATAGRAM;
use crate::capture::pcap::PcapWriter;
use crate::capture::venue_arg::VenueArg;
use crate::util::signals::stop_on_signals;
use crate::venue::cboe_pitch::session::Login;
use crate::venue::{LineKind, VenueKind};
use crate::wire::{
    Heartbeat, PacketBuilder, Quote, SessionId, Side, Symbol, COUNT_END_OF_SESSION, FLAG_ASK,
    FLAG_BID, FLAG_RESET, HEADER_LEN, HEARTBEAT_LEN, QUOTE_LEN,
};

/// Quotes (or snapshots) per packet at most.
pub const MAX_BATCH: usize = (MAX_DATAGRAM - HEADER_LEN) / (2 + QUOTE_LEN);
const MAX_HEARTBEATS_PER_PACKET: usize = (MAX_DATAGRAM - HEADER_LEN) / (2 + HEARTBEAT_LEN);
/// How far the injected bad sequence number is ahead of the real one: far
/// beyond any sane `max_seq_jump` (default 1,000,000).
pub const BAD_SEQ_JUMP: u64 = 1_000_000_000_000;
/// Provider packets are at least this far apart (ns).
const MIN_SPACING_NS: i64 = 100;
/// 2026-11-30T09:00:00Z.
pub const DEFAULT_START_NS: i64 = 1_796_029_200_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SimMode {
    /// Every Quote carries the whole quote.
    Full,
    /// Quotes change only the sides they flag; snapshots give the whole quote.
    Delta,
}

/// One line (multicast group) the provider sends on.
#[derive(Clone, Debug, Serialize)]
pub struct SimLine {
    pub name: String,
    #[serde(serialize_with = "ser_display")]
    pub src: SocketAddrV4,
    #[serde(serialize_with = "ser_display")]
    pub dst: SocketAddrV4,
    /// Added to the provider's send time (line skew).
    pub delay_ns: i64,
    /// Probability that a packet is lost on this line.
    pub loss: f64,
    /// What the line carries: the channel's packets (incremental), or a
    /// recovery loop of its own (cme-mdp3: snapshot, definition), which
    /// no line fault touches.
    #[serde(serialize_with = "ser_kind")]
    pub kind: LineKind,
}

fn ser_kind<S: serde::Serializer>(k: &LineKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub symbols: usize,
    /// Messages per second (quotes; heartbeats and snapshots come on top).
    pub rate: u64,
    pub start_ns: i64,
    pub duration_ns: i64,
    pub mode: SimMode,
    /// Per-symbol heartbeat round every so many ms (0: none).
    pub heartbeat_ms: u64,
    /// Snapshot round every so many ms (0: only at session start on a delta feed).
    pub snapshot_ms: u64,
    /// Channel heartbeat after this long without a packet (0: none).
    pub channel_heartbeat_ms: u64,
    /// Quotes per data packet.
    pub batch: usize,
    pub lines: Vec<SimLine>,
    /// Per line and packet: probability of a second copy on the same line.
    pub dup: f64,
    /// Per line and packet: probability of swapping with the line's next packet.
    pub reorder: f64,
    /// Offset from start (ns) of a provider restart: new session, sequences restart at 1.
    pub session_change_at_ns: Option<i64>,
    /// Offset from start (ns) of one Quote with an unbelievable sequence number.
    pub bad_seq_at_ns: Option<i64>,
    /// Send an end-of-session packet at the end.
    pub end_session: bool,
    /// The venue whose traffic the provider sends (venues.md).
    pub venue: VenueKind,
    /// nasdaq-itch: live orders the flow holds its books around.
    pub orders: usize,
    /// Every so many data packets, one is lost on every line (still kept
    /// in the re-request history, so a re-request can recover it).
    pub drop_both_every: Option<u64>,
    /// cme-mdp3: one packet of each recovery loop every so many ns.
    pub loop_interval_ns: i64,
    /// cme-mdp3: offsets from start (ns) of a channel reset, and of a
    /// SecurityGroup `GA` halt and its resumption.
    pub channel_reset_at_ns: Option<i64>,
    pub halt_at_ns: Option<i64>,
    pub resume_at_ns: Option<i64>,
    /// cboe-pitch: units, each with its own symbols and sequence numbers.
    pub units: usize,
}

impl SimConfig {
    /// A small, fault-free default: 10 FX symbols, 1000 msg/s for 1 s on A and B.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            symbols: 10,
            rate: 1000,
            start_ns: DEFAULT_START_NS,
            duration_ns: 1_000_000_000,
            mode: SimMode::Full,
            heartbeat_ms: 250,
            snapshot_ms: 0,
            channel_heartbeat_ms: 1000,
            batch: 1,
            lines: default_lines(&["A", "B"], Ipv4Addr::LOCALHOST, 40000, 10_000),
            dup: 0.0,
            reorder: 0.0,
            session_change_at_ns: None,
            bad_seq_at_ns: None,
            end_session: false,
            venue: VenueKind::Tickgate,
            orders: 10_000,
            drop_both_every: None,
            loop_interval_ns: 1_000_000,
            channel_reset_at_ns: None,
            halt_at_ns: None,
            resume_at_ns: None,
            units: 1,
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.batch == 0 || self.batch > MAX_BATCH {
            bail!("--batch must be 1..={MAX_BATCH} (a packet must fit {MAX_DATAGRAM} bytes)");
        }
        if self.symbols == 0 || self.symbols > 99_999 + FX.len() {
            bail!("--symbols must be 1..={}", 99_999 + FX.len());
        }
        let pitch = self.venue == VenueKind::CboePitch;
        if pitch {
            if !(1..=super::pitch_flow::MAX_UNITS).contains(&self.units) {
                bail!(
                    "--units must be 1..={} for --venue cboe-pitch",
                    super::pitch_flow::MAX_UNITS
                );
            }
            if self.units > self.symbols {
                bail!("--units must not exceed --symbols (each unit has symbols of its own)");
            }
        } else if self.units != 1 {
            bail!("--units applies to --venue cboe-pitch");
        }
        if !self.lines.iter().any(|l| l.kind == LineKind::Incremental) {
            bail!("at least one line is needed");
        }
        let cme = self.venue == VenueKind::CmeMdp3;
        for l in &self.lines {
            match l.kind {
                LineKind::Incremental => {}
                LineKind::Gap if !pitch => bail!("gap lines are for --venue cboe-pitch"),
                LineKind::Snapshot | LineKind::Definition if !cme => {
                    bail!("snapshot and definition lines are for --venue cme-mdp3")
                }
                _ => {}
            }
        }
        let cme_only = [
            (self.channel_reset_at_ns, "--channel-reset-at"),
            (self.halt_at_ns, "--halt-at"),
            (self.resume_at_ns, "--resume-at"),
        ];
        for (at, flag) in cme_only {
            if at.is_some() && !cme {
                bail!("{flag} applies to --venue cme-mdp3");
            }
        }
        if cme {
            if self.end_session {
                bail!("--end-session does not apply to cme-mdp3 (CME sends no end-of-session message)");
            }
            if self.batch > super::cme_flow::MAX_ENTRIES {
                bail!(
                    "--batch must be 1..={} for cme-mdp3 (book entries a packet)",
                    super::cme_flow::MAX_ENTRIES
                );
            }
            if self.loop_interval_ns <= 0 {
                bail!("--loop-us must be at least 1");
            }
        }
        if self.venue.is_venue_feed() {
            // Venue feeds have no per-symbol sequence, heartbeat or snapshot.
            if self.bad_seq_at_ns.is_some() {
                bail!("--bad-seq-at applies to the tickgate protocol only");
            }
            if self.mode != SimMode::Full {
                bail!("--mode does not apply to --venue {}", self.venue);
            }
            if self.symbols > 65_535 {
                bail!("--symbols must be 1..=65535 for a venue (one stock locate each)");
            }
        }
        if self.drop_both_every == Some(0) {
            bail!("--drop-both must be at least 1 (every Nth data packet)");
        }
        if self.duration_ns < 0 || self.start_ns < 0 {
            bail!("start and duration must not be negative");
        }
        let probs = self
            .lines
            .iter()
            .map(|l| l.loss)
            .chain([self.dup, self.reorder]);
        for p in probs {
            if !(0.0..=1.0).contains(&p) {
                bail!("probabilities must be between 0 and 1 (got {p})");
            }
        }
        Ok(())
    }
}

/// Lines named `names`, line `i` on group 239.255.0.(i+1):30001, each one
/// `skew_ns` later than the previous.
pub fn default_lines(names: &[&str], src: Ipv4Addr, src_port: u16, skew_ns: i64) -> Vec<SimLine> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| SimLine {
            name: n.to_string(),
            src: SocketAddrV4::new(src, src_port),
            dst: SocketAddrV4::new(Ipv4Addr::new(239, 255, 0, (i + 1) as u8), 30001),
            delay_ns: skew_ns * i as i64,
            loss: 0.0,
            kind: LineKind::Incremental,
        })
        .collect()
}

/// One datagram of the stream; its bytes are in the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimEvent {
    /// When it is on the wire (Unix ns).
    pub t_ns: i64,
    /// Index into [`SimConfig::lines`].
    pub line: usize,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
}

/// Per line: what was sent and injected.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LineTruth {
    pub name: String,
    pub dst: String,
    /// Datagrams put on this line (duplicates included).
    pub packets: u64,
    /// Provider packets lost on this line.
    pub dropped: u64,
    /// Extra copies injected on this line.
    pub duplicates: u64,
    /// Adjacent pairs swapped on this line.
    pub reordered: u64,
    /// Duplicate packets a receiver must count on this line (C2).
    pub expected_duplicate_packets: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct BadSeqTruth {
    pub t_ns: i64,
    pub symbol: String,
    pub seq: u64,
    /// Whether at least one line delivered it.
    pub delivered: bool,
}

/// What the simulator did, exactly. Complete once the stream has ended.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimTruth {
    pub seed: u64,
    pub mode: String,
    pub symbols: usize,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Session ids in order (a session change adds one).
    pub sessions: Vec<String>,
    pub session_change_ns: Option<i64>,
    /// Packets the provider produced (before line faults).
    pub provider_packets: u64,
    pub data_packets: u64,
    pub channel_heartbeats: u64,
    pub end_of_session_packets: u64,
    pub quotes: u64,
    pub heartbeats: u64,
    pub snapshots: u64,
    /// Message blocks in all data packets (quotes + heartbeats + snapshots).
    pub messages: u64,
    pub lines: Vec<LineTruth>,
    /// Provider packets lost on every line.
    pub packets_lost_all_lines: u64,
    /// Messages in those packets: what A/B arbitration cannot recover.
    pub messages_lost_all_lines: u64,
    /// Channel messages a receiver following C1-C3/C5 counts as lost, given
    /// the order datagrams arrive in (equals `messages_lost_all_lines`
    /// unless reordering or a skew larger than the packet spacing makes
    /// one line's later packet arrive before the other's earlier one).
    pub expected_channel_lost: u64,
    /// Sum of the lines' `expected_duplicate_packets`.
    pub expected_duplicate_packets: u64,
    /// cme-mdp3: packets of the recovery loops (all their lines).
    pub loop_packets: u64,
    /// What a receiver must end with, by venue (cme-mdp3: every
    /// instrument's book top, and the instruments a packet lost on every
    /// line touched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub venue: Option<serde_json::Value>,
    pub bad_seq: Option<BadSeqTruth>,
    pub datagrams: u64,
    /// `cboe-pitch`: each unit's own sequence, by unit id (the fields
    /// above that a receiver's model gives, `expected_channel_lost` and
    /// `expected_duplicate_packets`, are the units' sums; `messages` and
    /// the losses count every unit's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<UnitTruth>,
}

/// `cboe-pitch`: what the simulator did on one unit (venues.md: each unit
/// is a channel of its own, with its own sequence numbers).
#[derive(Clone, Debug, Default, Serialize)]
pub struct UnitTruth {
    pub unit: u8,
    /// Datagrams with messages the provider produced for the unit.
    pub data_packets: u64,
    /// Sequenced messages of the unit (its End of Session included).
    pub messages: u64,
    /// The unit's next sequence when the stream ended: where a receiver
    /// that followed it without loss ends.
    pub next_sequence: u64,
    /// The unit's End of Session was sent (`--end-session`).
    pub end_of_session: bool,
    /// The unit's data datagrams lost on every realtime line, and their
    /// messages.
    pub packets_lost_all_lines: u64,
    pub messages_lost_all_lines: u64,
    /// The unit's messages a receiver following the unit (C1-C3) counts
    /// as lost, given the order its datagrams arrive in.
    pub expected_channel_lost: u64,
    /// The unit's datagrams a receiver counts as duplicates (C2).
    pub expected_duplicate_packets: u64,
    /// The receiver model: the session, the next sequence it expects,
    /// and whether it read the End of Session.
    #[serde(skip)]
    rx: Option<(u32, u64, bool)>,
    /// The sequence of the unit's End of Session message, once produced.
    #[serde(skip)]
    end_sequence: Option<u64>,
}

impl SimTruth {
    /// `cboe-pitch`: unit `unit`'s truth, made on first use.
    fn unit_mut(&mut self, unit: u8) -> &mut UnitTruth {
        let at = match self.units.binary_search_by_key(&unit, |u| u.unit) {
            Ok(i) => i,
            Err(i) => {
                self.units.insert(
                    i,
                    UnitTruth {
                        unit,
                        ..UnitTruth::default()
                    },
                );
                i
            }
        };
        &mut self.units[at]
    }
}

/// `cboe-pitch`: a datagram's unit, sequence and count (Sequenced Unit
/// Header: length u16, count u8, unit u8, sequence u32, little-endian).
fn pitch_header(bytes: &[u8]) -> Option<(u8, u64, u8)> {
    let seq = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    Some((bytes[3], seq as u64, bytes[2]))
}

const FX: [(&str, i64, i64); 10] = [
    // name, initial price (x 10^9), tick (x 10^9)
    ("EURUSD", 1_085_000_000, 10_000),
    ("GBPUSD", 1_270_000_000, 10_000),
    ("USDJPY", 150_000_000_000, 1_000_000),
    ("USDCHF", 880_000_000, 10_000),
    ("AUDUSD", 660_000_000, 10_000),
    ("USDCAD", 1_360_000_000, 10_000),
    ("NZDUSD", 610_000_000, 10_000),
    ("EURGBP", 855_000_000, 10_000),
    ("EURJPY", 162_000_000_000, 1_000_000),
    ("GBPJPY", 190_000_000_000, 1_000_000),
];

/// The `i`-th symbol's name: the FX majors first, then S00001, S00002, ...
pub fn symbol_name(i: usize) -> String {
    match FX.get(i) {
        Some((n, _, _)) => n.to_string(),
        None => format!("S{:05}", i - FX.len() + 1),
    }
}

#[derive(Clone, Debug)]
struct SymState {
    symbol: Symbol,
    /// Per-symbol sequence of the last Quote sent (0: none this session).
    seq: u64,
    tick: i64,
    /// Bid in ticks; ask is `bid + spread`.
    bid: i64,
    spread: i64,
    bid_qty: u64,
    ask_qty: u64,
}

/// A provider packet waiting on a line.
#[derive(Debug, Default)]
struct Pending {
    line: usize,
    session: u32,
    sequence: u64,
    count: u16,
    buf: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Held {
    slot_t: i64,
    pending: usize,
    dup: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    None,
    /// Next symbol index of a heartbeat round.
    Heartbeats(usize),
    /// Next symbol index of a snapshot round, and whether it carries RESET.
    Snapshots(usize, bool),
}

/// The seeded provider and its lines. Call [`Simulator::next_into`] until
/// it returns `None`; then [`Simulator::truth`] is complete.
pub struct Simulator {
    cfg: SimConfig,
    market: SplitMix64,
    faults: SplitMix64,
    syms: Vec<SymState>,
    builder: PacketBuilder,
    // provider clock and schedule
    end_t: i64,
    last_t: i64,
    next_data_t: i64,
    next_hb_t: i64,
    next_snap_t: i64,
    /// A snapshot round fell due while another round was running: it
    /// starts when that round ends (never silently skipped).
    snapshot_pending: bool,
    round: Round,
    round_t: i64,
    session_change_t: Option<i64>,
    bad_seq_t: Option<i64>,
    session_idx: u32,
    session: SessionId,
    next_chan_seq: u64,
    provider_done: bool,
    data_interval: i64,
    // lines
    pool: Vec<Pending>,
    free: Vec<usize>,
    heap: BinaryHeap<Reverse<(i64, u64, usize)>>,
    order: u64,
    held: Vec<Option<Held>>,
    min_delay: i64,
    // a receiver model for the expected counts (C1-C3, C5)
    rx_session: Option<u32>,
    rx_next: u64,
    rx_ended: bool,
    bad_seq_packet: Option<(u32, u64)>,
    /// A venue's flow fills the packets instead of the tickgate protocol.
    flow: Option<Box<dyn VenueFlow>>,
    venue_buf: Vec<u8>,
    /// The data packet that ends its session (IEX System Event C).
    ending_packet: Option<(u32, u64)>,
    /// The stream's end-of-session datagrams are being produced: they are
    /// not data packets for `--drop-both`.
    provider_ending: bool,
    /// cme-mdp3: when the recovery loops send next (`i64::MAX`: no loop
    /// lines), and the requested channel events still to come.
    next_loop_t: i64,
    requests: Vec<(i64, FlowRequest)>,
    /// Every provider data packet, as produced (before line faults), for
    /// the re-request server.
    history: Option<Arc<Mutex<History>>>,
    /// The same for a Cboe PITCH provider, per unit (the Gap Request
    /// Proxy's memory).
    pitch_history: Option<Arc<Mutex<PitchHistory>>>,
    truth: SimTruth,
}

impl Simulator {
    pub fn new(cfg: SimConfig) -> anyhow::Result<Simulator> {
        cfg.validate()?;
        let mut market = SplitMix64::new(cfg.seed);
        let faults = SplitMix64::new(cfg.seed ^ 0x5EED_FA17_5EED_FA17);
        let syms = (0..cfg.symbols)
            .map(|i| {
                let (px, tick) = FX
                    .get(i)
                    .map_or((100_000_000_000, 10_000_000), |f| (f.1, f.2));
                SymState {
                    symbol: Symbol::parse(&symbol_name(i)).expect("valid generated symbol"),
                    seq: 0,
                    tick,
                    bid: px / tick,
                    spread: 1 + market.below(3) as i64,
                    bid_qty: lot(&mut market),
                    ask_qty: lot(&mut market),
                }
            })
            .collect();
        let start = cfg.start_ns;
        let data_interval = if cfg.rate == 0 {
            i64::MAX
        } else {
            ((cfg.batch as u128 * 1_000_000_000) / cfg.rate as u128).clamp(1, i64::MAX as u128)
                as i64
        };
        let min_delay = cfg.lines.iter().map(|l| l.delay_ns).min().unwrap_or(0);
        let truth = SimTruth {
            seed: cfg.seed,
            mode: if cfg.venue.is_venue_feed() {
                cfg.venue.name().to_string()
            } else {
                format!("{:?}", cfg.mode).to_lowercase()
            },
            symbols: cfg.symbols,
            start_ns: start,
            end_ns: start.saturating_add(cfg.duration_ns),
            lines: cfg
                .lines
                .iter()
                .map(|l| LineTruth {
                    name: l.name.clone(),
                    dst: l.dst.to_string(),
                    ..LineTruth::default()
                })
                .collect(),
            ..SimTruth::default()
        };
        let snapshots_at_start = cfg.mode == SimMode::Delta || cfg.snapshot_ms > 0;
        let mut sim = Simulator {
            end_t: start.saturating_add(cfg.duration_ns),
            last_t: start - MIN_SPACING_NS,
            next_data_t: start,
            next_hb_t: interval_after(start, cfg.heartbeat_ms),
            next_snap_t: interval_after(start, cfg.snapshot_ms),
            snapshot_pending: false,
            round: if snapshots_at_start {
                Round::Snapshots(0, true)
            } else {
                Round::None
            },
            round_t: start,
            session_change_t: cfg.session_change_at_ns.map(|d| start.saturating_add(d)),
            bad_seq_t: cfg.bad_seq_at_ns.map(|d| start.saturating_add(d)),
            session_idx: 0,
            session: SessionId::default(),
            next_chan_seq: 1,
            provider_done: false,
            provider_ending: false,
            data_interval,
            pool: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            order: 0,
            held: vec![None; cfg.lines.len()],
            min_delay,
            rx_session: None,
            rx_next: 0,
            rx_ended: false,
            bad_seq_packet: None,
            flow: match cfg.venue {
                VenueKind::Tickgate => None,
                VenueKind::IexTops => Some(Box::new(IexFlow::new(cfg.symbols, cfg.seed))),
                VenueKind::NasdaqItch => Some(Box::new(ItchFlow::new(
                    cfg.symbols,
                    cfg.orders,
                    start,
                    cfg.seed,
                ))),
                VenueKind::CmeMdp3 => Some(Box::new(CmeFlow::new(cfg.symbols, cfg.seed))),
                VenueKind::CboePitch => Some(Box::new(super::pitch_flow::PitchFlow::new(
                    cfg.symbols,
                    cfg.units,
                    cfg.orders,
                    start,
                    cfg.seed,
                ))),
            },
            next_loop_t: if cfg.lines.iter().any(|l| l.kind != LineKind::Incremental) {
                start
            } else {
                i64::MAX
            },
            requests: {
                let at = |d: Option<i64>| d.map(|d| start.saturating_add(d));
                let mut r: Vec<(i64, FlowRequest)> = [
                    (at(cfg.channel_reset_at_ns), FlowRequest::ChannelReset),
                    (
                        at(cfg.halt_at_ns),
                        FlowRequest::GroupStatus {
                            group: super::cme_flow::HALT_GROUP,
                            halted: true,
                        },
                    ),
                    (
                        at(cfg.resume_at_ns),
                        FlowRequest::GroupStatus {
                            group: super::cme_flow::HALT_GROUP,
                            halted: false,
                        },
                    ),
                ]
                .into_iter()
                .filter_map(|(t, r)| Some((t?, r)))
                .collect();
                // Latest first: the next due is popped from the end.
                r.sort_by_key(|&(t, _)| std::cmp::Reverse(t));
                r
            },
            venue_buf: Vec::with_capacity(MAX_DATAGRAM),
            ending_packet: None,
            history: None,
            pitch_history: None,
            truth,
            market,
            faults,
            syms,
            builder: PacketBuilder::new(),
            cfg,
        };
        sim.session = sim.session_id(0);
        let name = match sim.flow.as_mut() {
            Some(flow) => {
                flow.start_session(0, start);
                flow.session_name()
            }
            None => sim.session.to_string(),
        };
        sim.truth.sessions.push(name);
        sim.next_data_t = start.saturating_add(sim.jitter());
        Ok(sim)
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Records every data packet the provider produces from now on into
    /// `history` (MoldUDP64 venues: tickgate and nasdaq-itch), whatever
    /// the lines do with it: a packet lost on every line is recoverable
    /// from there (R4).
    pub fn set_history(&mut self, history: Arc<Mutex<History>>) {
        self.history = Some(history);
    }

    /// Records every data datagram the provider produces from now on into
    /// `history` (cboe-pitch), whatever the lines do with it: the Gap
    /// Request Proxy sends from there what a hole lacks (R4c).
    pub fn set_pitch_history(&mut self, history: Arc<Mutex<PitchHistory>>) {
        self.pitch_history = Some(history);
    }

    /// R5c: unit `unit`'s book as of its last message, for a Spin Server
    /// (cboe-pitch only; `None` before the unit's first message).
    pub fn spin_image(&self, unit: u8) -> Option<SpinImage> {
        self.flow.as_ref()?.spin_image(unit)
    }

    /// R5: the book as of now, for a GLIMPSE snapshot (nasdaq-itch only):
    /// its session, the first sequence number it does not reflect (every
    /// message before it has been produced and is reflected; none after),
    /// and its messages. `None` for other venues.
    pub fn glimpse_snapshot(&self) -> Option<GlimpseSnapshot> {
        let flow = self.flow.as_ref()?;
        let mut messages = Vec::new();
        let session = flow.book_snapshot(&mut messages)?;
        Some(GlimpseSnapshot {
            session,
            next_sequence: self.next_chan_seq,
            messages,
        })
    }

    pub fn lines(&self) -> &[SimLine] {
        &self.cfg.lines
    }

    /// What was injected and what a receiver must report; complete after
    /// `next_into` returned `None`.
    pub fn truth(&self) -> &SimTruth {
        &self.truth
    }

    /// The next datagram in time order: its bytes replace `out`'s content.
    pub fn next_into(&mut self, out: &mut Vec<u8>) -> Option<SimEvent> {
        loop {
            let horizon = self.horizon();
            if let Some(&Reverse((t, _, idx))) = self.heap.peek() {
                if t <= horizon {
                    self.heap.pop();
                    return Some(self.emit(t, idx, out));
                }
            }
            if self.provider_done {
                // release held packets at their own slots, then drain
                let mut any = false;
                for line in 0..self.held.len() {
                    if let Some(h) = self.held[line].take() {
                        self.schedule(h.slot_t, h.pending, h.dup);
                        any = true;
                    }
                }
                if !any && self.heap.is_empty() {
                    return None;
                }
                continue;
            }
            self.provider_step();
        }
    }

    /// Nothing the provider or a held packet can still produce is earlier
    /// than this.
    fn horizon(&self) -> i64 {
        if self.provider_done && self.held.iter().all(Option::is_none) {
            return i64::MAX;
        }
        let mut h = if self.provider_done {
            i64::MAX
        } else {
            self.last_t.saturating_add(MIN_SPACING_NS + self.min_delay)
        };
        for held in self.held.iter().flatten() {
            h = h.min(held.slot_t);
        }
        h - 1
    }

    fn emit(&mut self, t: i64, idx: usize, out: &mut Vec<u8>) -> SimEvent {
        let (line, session, sequence, count) = {
            let p = &mut self.pool[idx];
            std::mem::swap(out, &mut p.buf);
            (p.line, p.session, p.sequence, p.count)
        };
        self.free.push(idx);
        self.truth.datagrams += 1;
        self.truth.lines[line].packets += 1;
        if self.bad_seq_packet == Some((session, sequence)) {
            if let Some(b) = self.truth.bad_seq.as_mut() {
                b.delivered = true;
            }
        }
        if self.cfg.lines[line].kind == LineKind::Incremental {
            if self.cfg.venue == VenueKind::CboePitch {
                // Each unit is a channel of its own: the feed-wide counts
                // are the units' sums.
                if let Some(h) = pitch_header(out) {
                    self.unit_receiver_model(line, session, h);
                }
            } else {
                self.receiver_model(line, session, sequence, count);
            }
        }
        let l = &self.cfg.lines[line];
        SimEvent {
            t_ns: t,
            line,
            src: l.src,
            dst: l.dst,
        }
    }

    /// `cboe-pitch`: C1-C3 per unit over the arriving realtime datagrams
    /// (`unit`, its `sequence`, `count`), the unit's expected counts. A
    /// heartbeat (count 0) names the unit's next sequence; after the unit's
    /// End of Session, a copy of what was read is a duplicate. The feed's
    /// and the line's counts take the unit's.
    fn unit_receiver_model(
        &mut self,
        line: usize,
        session: u32,
        (unit, sequence, count): (u8, u64, u8),
    ) {
        let u = self.truth.unit_mut(unit);
        let (s, next, ended) = match u.rx {
            Some((s, _, _)) if session < s => return,
            Some(rx) if rx.0 == session => rx,
            _ => (session, sequence, false),
        };
        let end = sequence + count as u64;
        let mut rx = (s, next, ended);
        let (mut lost, mut duplicates) = (0, 0);
        if count == 0 {
            if !ended && sequence > next {
                lost = sequence - next;
                rx.1 = sequence;
            }
        } else if end <= next {
            duplicates = 1;
        } else if !ended {
            if sequence > next {
                lost = sequence - next;
            }
            rx.1 = end;
            if u.end_sequence.is_some_and(|e| e >= sequence && e < end) {
                rx.2 = true;
            }
        }
        u.rx = Some(rx);
        u.expected_channel_lost += lost;
        u.expected_duplicate_packets += duplicates;
        self.truth.expected_channel_lost += lost;
        self.truth.expected_duplicate_packets += duplicates;
        self.truth.lines[line].expected_duplicate_packets += duplicates;
    }

    /// C1-C3 and C5 over the arriving datagrams: the expected counts.
    fn receiver_model(&mut self, line: usize, session: u32, sequence: u64, count: u16) {
        match self.rx_session {
            Some(s) if session < s => return, // a replaced session's lagging copy
            Some(s) if session == s => {}
            _ => {
                self.rx_session = Some(session);
                self.rx_next = sequence;
                self.rx_ended = false;
            }
        }
        if self.rx_ended {
            // C6: a copy of what was delivered (the other line's end of
            // session, or of the packet that ended it) is a duplicate;
            // anything later is a stale-session packet.
            let copy = match count {
                COUNT_END_OF_SESSION => true,
                0 => sequence < self.rx_next,
                n => sequence + n as u64 <= self.rx_next,
            };
            if copy {
                self.truth.lines[line].expected_duplicate_packets += 1;
                self.truth.expected_duplicate_packets += 1;
            }
            return;
        }
        match count {
            COUNT_END_OF_SESSION => self.rx_ended = true,
            0 => {
                if sequence > self.rx_next {
                    self.truth.expected_channel_lost += sequence - self.rx_next;
                    self.rx_next = sequence;
                }
            }
            n => {
                let end = sequence + n as u64;
                if end <= self.rx_next {
                    self.truth.lines[line].expected_duplicate_packets += 1;
                    self.truth.expected_duplicate_packets += 1;
                } else {
                    if sequence > self.rx_next {
                        self.truth.expected_channel_lost += sequence - self.rx_next;
                    }
                    self.rx_next = end;
                    if self.ending_packet == Some((session, sequence)) {
                        self.rx_ended = true;
                    }
                }
            }
        }
    }

    fn schedule(&mut self, t: i64, pending: usize, dup: bool) {
        self.heap.push(Reverse((t, self.order, pending)));
        self.order += 1;
        if dup {
            let copy = self.alloc();
            let (src, dst) = if copy < pending {
                let (a, b) = self.pool.split_at_mut(pending);
                (&b[0], &mut a[copy])
            } else {
                let (a, b) = self.pool.split_at_mut(copy);
                (&a[pending], &mut b[0])
            };
            dst.line = src.line;
            dst.session = src.session;
            dst.sequence = src.sequence;
            dst.count = src.count;
            dst.buf.clear();
            dst.buf.extend_from_slice(&src.buf);
            self.heap.push(Reverse((t + 1, self.order, copy)));
            self.order += 1;
        }
    }

    fn alloc(&mut self) -> usize {
        match self.free.pop() {
            Some(i) => i,
            None => {
                self.pool.push(Pending {
                    buf: Vec::with_capacity(MAX_DATAGRAM),
                    ..Pending::default()
                });
                self.pool.len() - 1
            }
        }
    }

    /// Produces one provider packet (or none, at the end) and hands it to the lines.
    fn provider_step(&mut self) {
        loop {
            // earliest event; ties: restart, end, rounds, bad seq, data, channel heartbeat
            let round_due = (self.round != Round::None).then_some(self.round_t);
            let chb = (self.cfg.channel_heartbeat_ms > 0).then(|| {
                self.last_t
                    .saturating_add(self.cfg.channel_heartbeat_ms as i64 * 1_000_000)
            });
            let t_restart = self.session_change_t.unwrap_or(i64::MAX);
            let t_round = round_due.unwrap_or(i64::MAX);
            let t_hb = if self.cfg.heartbeat_ms > 0 {
                self.next_hb_t
            } else {
                i64::MAX
            };
            let t_snap = if self.cfg.snapshot_ms > 0 {
                self.next_snap_t
            } else {
                i64::MAX
            };
            let t_bad = self.bad_seq_t.unwrap_or(i64::MAX);
            let t_data = self.next_data_t;
            let t_chb = chb.unwrap_or(i64::MAX);
            let t_loop = self.next_loop_t;
            let t_request = self.requests.last().map_or(i64::MAX, |r| r.0);
            let earliest = t_restart
                .min(t_round)
                .min(t_hb)
                .min(t_snap)
                .min(t_bad)
                .min(t_data)
                .min(t_chb)
                .min(t_loop)
                .min(t_request);
            if earliest > self.end_t || earliest == i64::MAX {
                if self.cfg.end_session {
                    let t = self.send_time(self.end_t);
                    self.provider_ending = true;
                    if let Some(flow) = self.flow.as_mut() {
                        // `cboe-pitch`: each unit ends with an End of
                        // Session of its own.
                        let parts = flow.end_of_session_datagrams();
                        for part in 0..parts {
                            let Some(flow) = self.flow.as_mut() else {
                                break;
                            };
                            self.truth.end_of_session_packets += 1;
                            let seq = self.next_chan_seq;
                            let mut buf = std::mem::take(&mut self.venue_buf);
                            let count = flow.end_of_session(seq, t, &mut buf);
                            if count != COUNT_END_OF_SESSION {
                                // A data packet ends it (IEX System Event
                                // C; the last unit's End of Session).
                                if part + 1 == parts {
                                    self.ending_packet = Some((self.session_idx, seq));
                                }
                                self.next_chan_seq += count as u64;
                                self.truth.messages += count as u64;
                                if self.cfg.venue == VenueKind::CboePitch {
                                    if let Some((unit, useq, _)) = pitch_header(&buf) {
                                        let u = self.truth.unit_mut(unit);
                                        u.end_of_session = true;
                                        u.end_sequence = Some(useq);
                                    }
                                }
                            }
                            self.distribute(t, &buf, count, seq);
                            self.venue_buf = buf;
                        }
                    } else {
                        self.truth.end_of_session_packets += 1;
                        let seq = self.next_chan_seq;
                        let eos = PacketBuilder::end_of_session(self.session, seq);
                        self.distribute(t, &eos, COUNT_END_OF_SESSION, seq);
                    }
                }
                self.provider_done = true;
                self.truth.venue = self.flow.as_ref().and_then(|f| f.venue_truth());
                return;
            }
            if t_request == earliest {
                // Carried by the next data packet.
                if let (Some((_, r)), Some(flow)) = (self.requests.pop(), self.flow.as_mut()) {
                    flow.request(r);
                }
                continue;
            }
            if t_loop == earliest {
                self.next_loop_t = earliest.saturating_add(self.cfg.loop_interval_ns);
                self.loop_packets(earliest);
                return;
            }
            if t_restart == earliest {
                self.session_change_t = None;
                self.restart(earliest);
                continue;
            }
            if t_round == earliest {
                self.round_packet();
                return;
            }
            // Snapshots before heartbeats when both fall due together; a
            // heartbeat round due during another round is skipped (the
            // running round refreshes every symbol anyway), a snapshot
            // round is postponed until the running one ends.
            if t_snap == earliest {
                self.next_snap_t = earliest + self.cfg.snapshot_ms as i64 * 1_000_000;
                if self.round == Round::None {
                    self.round = Round::Snapshots(0, false);
                    self.round_t = earliest;
                } else {
                    self.snapshot_pending = true;
                }
                continue;
            }
            if t_hb == earliest {
                self.next_hb_t = earliest + self.cfg.heartbeat_ms as i64 * 1_000_000;
                if self.round == Round::None {
                    self.round = Round::Heartbeats(0);
                    self.round_t = earliest;
                }
                continue;
            }
            if t_bad == earliest {
                self.bad_seq_t = None;
                self.bad_seq_packet_at(earliest);
                return;
            }
            if t_data == earliest {
                self.next_data_t = earliest.saturating_add(self.jitter());
                self.data_packet(earliest);
                return;
            }
            // channel heartbeat: the next sequence number
            let t = self.send_time(earliest);
            self.truth.channel_heartbeats += 1;
            let seq = self.next_chan_seq;
            if let Some(flow) = self.flow.as_mut() {
                let mut buf = std::mem::take(&mut self.venue_buf);
                flow.heartbeat(seq, t, &mut buf);
                // CME: a heartbeat packet takes a sequence number.
                let count = flow.heartbeat_count();
                self.next_chan_seq += count as u64;
                self.distribute(t, &buf, count, seq);
                self.venue_buf = buf;
            } else {
                let hb = PacketBuilder::channel_heartbeat(self.session, seq);
                self.distribute(t, &hb, 0, seq);
            }
            return;
        }
    }

    fn restart(&mut self, t: i64) {
        self.session_idx += 1;
        self.session = self.session_id(self.session_idx);
        let name = match self.flow.as_mut() {
            Some(flow) => {
                flow.start_session(self.session_idx, t);
                flow.session_name()
            }
            None => self.session.to_string(),
        };
        self.truth.sessions.push(name);
        self.truth.session_change_ns = Some(t);
        self.next_chan_seq = 1;
        for s in &mut self.syms {
            s.seq = 0;
        }
        if self.cfg.mode == SimMode::Delta || self.cfg.snapshot_ms > 0 {
            self.round = Round::Snapshots(0, true);
            self.round_t = t;
        } else {
            self.round = Round::None;
        }
    }

    fn session_id(&self, idx: u32) -> SessionId {
        let date = time::OffsetDateTime::from_unix_timestamp(self.cfg.start_ns / 1_000_000_000)
            .map(|d| {
                format!(
                    "{:02}{:02}{:02}",
                    d.year().rem_euclid(100),
                    d.month() as u8,
                    d.day()
                )
            })
            .unwrap_or_else(|_| "000000".into());
        SessionId::parse(&format!("{date}S{:03}", idx % 1000)).expect("10-byte session id")
    }

    fn send_time(&mut self, t: i64) -> i64 {
        let t = t.max(self.last_t + MIN_SPACING_NS);
        self.last_t = t;
        t
    }

    fn jitter(&mut self) -> i64 {
        if self.data_interval == i64::MAX {
            return i64::MAX;
        }
        // uniform in [interval/2, 3*interval/2): the mean is the configured rate
        let i = self.data_interval;
        i / 2 + self.market.below(i.max(1) as u64) as i64
    }

    fn data_packet(&mut self, t: i64) {
        let t = self.send_time(t);
        if let Some(flow) = self.flow.as_mut() {
            let mut buf = std::mem::take(&mut self.venue_buf);
            let seq = self.next_chan_seq;
            let count = flow.data_packet(&mut self.market, seq, t, self.cfg.batch, &mut buf);
            self.next_chan_seq += count as u64;
            self.truth.data_packets += 1;
            self.truth.messages += count as u64;
            self.truth.quotes += count as u64;
            self.distribute(t, &buf, count, seq);
            self.venue_buf = buf;
            return;
        }
        self.builder.start(self.session, self.next_chan_seq);
        for _ in 0..self.cfg.batch {
            let i = self.market.below(self.syms.len() as u64) as usize;
            let q = self.next_quote(i, t);
            self.builder.quote(&q);
            self.truth.quotes += 1;
        }
        self.finish_data_packet(t);
    }

    fn bad_seq_packet_at(&mut self, t: i64) {
        let t = self.send_time(t);
        let i = self.market.below(self.syms.len() as u64) as usize;
        let mut q = self.next_quote(i, t);
        // the provider's own sequence is not advanced: the corrupt number is a one-off
        self.syms[i].seq -= 1;
        q.seq = self.syms[i].seq + 1 + BAD_SEQ_JUMP;
        self.truth.bad_seq = Some(BadSeqTruth {
            t_ns: t,
            symbol: q.symbol.to_string(),
            seq: q.seq,
            delivered: false,
        });
        self.bad_seq_packet = Some((self.session_idx, self.next_chan_seq));
        self.builder
            .start(self.session, self.next_chan_seq)
            .quote(&q);
        self.truth.quotes += 1;
        self.finish_data_packet(t);
    }

    fn round_packet(&mut self) {
        let t = self.send_time(self.round_t);
        self.round_t = t;
        self.builder.start(self.session, self.next_chan_seq);
        let n = self.syms.len();
        match self.round {
            Round::Heartbeats(mut i) => {
                let end = (i + MAX_HEARTBEATS_PER_PACKET).min(n);
                while i < end {
                    let s = &self.syms[i];
                    let hb = Heartbeat {
                        flags: 0,
                        symbol: s.symbol,
                        next_seq: s.seq + 1,
                        source_ts: self.source_ts(t),
                    };
                    self.builder.heartbeat(&hb);
                    self.truth.heartbeats += 1;
                    i += 1;
                }
                self.round = if i < n {
                    Round::Heartbeats(i)
                } else {
                    Round::None
                };
            }
            Round::Snapshots(mut i, reset) => {
                let end = (i + MAX_BATCH).min(n);
                while i < end {
                    let mut q = self.current_quote(i, t);
                    q.seq = self.syms[i].seq;
                    if reset {
                        q.flags |= FLAG_RESET;
                    }
                    self.builder.snapshot(&q);
                    self.truth.snapshots += 1;
                    i += 1;
                }
                self.round = if i < n {
                    Round::Snapshots(i, reset)
                } else {
                    Round::None
                };
            }
            Round::None => unreachable!("round_packet without a round"),
        }
        if self.round == Round::None && self.snapshot_pending {
            self.snapshot_pending = false;
            self.round = Round::Snapshots(0, false);
        }
        self.finish_data_packet(t);
    }

    fn finish_data_packet(&mut self, t: i64) {
        let count = self.builder.count();
        let sequence = self.next_chan_seq;
        self.next_chan_seq += count as u64;
        self.truth.data_packets += 1;
        self.truth.messages += count as u64;
        let bytes = std::mem::take(&mut self.builder);
        self.distribute(t, bytes.bytes(), count, sequence);
        self.builder = bytes;
    }

    fn source_ts(&mut self, t: i64) -> u64 {
        // created up to 20 us before it is sent
        (t - self.market.below(20_000) as i64).max(0) as u64
    }

    /// Moves symbol `i` and returns its next Quote (full: both sides;
    /// delta: the sides that changed).
    fn next_quote(&mut self, i: usize, t: i64) -> Quote {
        let m = &mut self.market;
        let r = m.below(8);
        let s = &mut self.syms[i];
        match r {
            0 => s.bid -= 1,
            1 => s.bid += 1,
            _ => {}
        }
        s.bid = s.bid.max(10);
        let which = if self.cfg.mode == SimMode::Delta {
            let pick = 1 + m.below(3) as u8; // bid, ask or both
                                             // A moved price goes out on both sides: one side alone would
                                             // leave the other's old price behind, and the quote a receiver
                                             // holds could end locked or crossed, which no venue shows.
            if r < 2 {
                FLAG_BID | FLAG_ASK
            } else {
                pick
            }
        } else {
            FLAG_BID | FLAG_ASK
        };
        if which & FLAG_BID != 0 {
            s.bid_qty = lot(m);
        }
        if which & FLAG_ASK != 0 {
            s.ask_qty = lot(m);
        }
        s.seq += 1;
        let mut q = self.current_quote(i, t);
        q.flags = which;
        q
    }

    fn current_quote(&mut self, i: usize, t: i64) -> Quote {
        let source_ts = self.source_ts(t);
        let s = &self.syms[i];
        Quote::new(
            s.symbol,
            s.seq,
            source_ts,
            Some(Side {
                px: s.bid * s.tick,
                qty: s.bid_qty,
            }),
            Some(Side {
                px: (s.bid + s.spread) * s.tick,
                qty: s.ask_qty,
            }),
        )
    }

    /// One packet of each recovery loop, on its own lines (no faults).
    fn loop_packets(&mut self, t: i64) {
        let Some(mut flow) = self.flow.take() else {
            return;
        };
        let mut buf = std::mem::take(&mut self.venue_buf);
        for line in 0..self.cfg.lines.len() {
            let kind = self.cfg.lines[line].kind;
            if kind == LineKind::Incremental || !flow.loop_packet(kind, t, &mut buf) {
                continue;
            }
            self.truth.loop_packets += 1;
            let idx = self.alloc();
            let p = &mut self.pool[idx];
            p.line = line;
            p.session = self.session_idx;
            p.sequence = 0;
            p.count = 0;
            p.buf.clear();
            p.buf.extend_from_slice(&buf);
            self.schedule(t + self.cfg.lines[line].delay_ns, idx, false);
        }
        self.venue_buf = buf;
        self.flow = Some(flow);
    }

    /// Line fates of one provider packet: loss, duplicate, reorder.
    fn distribute(&mut self, t: i64, bytes: &[u8], count: u16, sequence: u64) {
        self.truth.provider_packets += 1;
        let data = count != 0 && count != COUNT_END_OF_SESSION;
        let pitch_unit = match pitch_header(bytes) {
            Some((unit, useq, n)) if data && self.cfg.venue == VenueKind::CboePitch => {
                let u = self.truth.unit_mut(unit);
                u.data_packets += 1;
                u.messages += n as u64;
                u.next_sequence = useq + n as u64;
                Some(unit)
            }
            _ => None,
        };
        if data {
            if let Some(h) = &self.history {
                h.lock().expect("history lock").record(bytes);
            }
            if let Some(h) = &self.pitch_history {
                h.lock().expect("history lock").record(bytes);
            }
        }
        // --drop-both: the Nth, 2Nth, ... data packet goes out on no line
        // (not the End of Session datagrams that follow the last one).
        let drop_both = data
            && !self.provider_ending
            && self
                .cfg
                .drop_both_every
                .is_some_and(|n| self.truth.data_packets.is_multiple_of(n));
        let mut delivered = false;
        for line in 0..self.cfg.lines.len() {
            if self.cfg.lines[line].kind != LineKind::Incremental {
                continue;
            }
            // always draw all three so one fault's pattern does not depend on the others' settings
            let lost = self.faults.chance(self.cfg.lines[line].loss) || drop_both;
            let dup = self.faults.chance(self.cfg.dup);
            let reorder = self.faults.chance(self.cfg.reorder);
            if lost {
                self.truth.lines[line].dropped += 1;
                continue;
            }
            delivered = true;
            let slot_t = t + self.cfg.lines[line].delay_ns;
            let idx = self.alloc();
            {
                let p = &mut self.pool[idx];
                p.line = line;
                p.session = self.session_idx;
                p.sequence = sequence;
                p.count = count;
                p.buf.clear();
                p.buf.extend_from_slice(bytes);
            }
            if dup {
                self.truth.lines[line].duplicates += 1;
            }
            match self.held[line].take() {
                Some(h) => {
                    // this packet takes the held one's slot, and the held one this slot
                    self.truth.lines[line].reordered += 1;
                    self.schedule(h.slot_t, idx, dup);
                    self.schedule(slot_t, h.pending, h.dup);
                }
                None if reorder => {
                    self.held[line] = Some(Held {
                        slot_t,
                        pending: idx,
                        dup,
                    })
                }
                None => self.schedule(slot_t, idx, dup),
            }
        }
        if !delivered {
            if let Some(flow) = self.flow.as_mut() {
                flow.lost_everywhere();
            }
            self.truth.packets_lost_all_lines += 1;
            if count != COUNT_END_OF_SESSION {
                self.truth.messages_lost_all_lines += count as u64;
            }
            if let Some(unit) = pitch_unit {
                let u = self.truth.unit_mut(unit);
                u.packets_lost_all_lines += 1;
                u.messages_lost_all_lines += count as u64;
            }
        }
    }
}

fn lot(m: &mut SplitMix64) -> u64 {
    (1 + m.below(10)) * 100_000
}

fn interval_after(start: i64, ms: u64) -> i64 {
    if ms == 0 {
        i64::MAX
    } else {
        start.saturating_add(ms as i64 * 1_000_000)
    }
}

fn ser_display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

// ---------------------------------------------------------------- CLI

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The capture to write (nanosecond pcap; `.gz`/`.zst`: compressed).
    /// With --venue nasdaq-itch, a name ending `.NASDAQ_ITCH50` (or
    /// `.NASDAQ_ITCH50.gz`, `.zst`) writes a Nasdaq BinaryFILE instead.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub compress: crate::capture::compress::CompressArgs,
    /// Write what was injected (JSON) to this file (with --live, once the
    /// stream has ended).
    #[arg(long, value_name = "FILE")]
    pub truth: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Number of symbols: EURUSD, GBPUSD, USDJPY, ... then S00001, S00002, ...
    #[arg(long, default_value_t = 10)]
    pub symbols: usize,
    /// Quotes per second.
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Seconds of stream.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Start time, Unix ns (default 2026-11-30T09:00:00Z).
    #[arg(long, default_value_t = DEFAULT_START_NS)]
    pub start: i64,
    #[arg(long, value_enum, default_value_t = SimMode::Full)]
    pub mode: SimMode,
    /// Per-symbol heartbeat every so many ms (0: none).
    #[arg(long, default_value_t = 250)]
    pub heartbeat_ms: u64,
    /// Snapshot round every so many ms (0: only at session start on a delta feed).
    #[arg(long, default_value_t = 0)]
    pub snapshot_ms: u64,
    /// Channel heartbeat after so many ms without a packet (0: none).
    #[arg(long, default_value_t = 1000)]
    pub channel_heartbeat_ms: u64,
    /// Quotes per packet.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Lines to send on: A, B or A,B.
    #[arg(long, value_delimiter = ',', default_value = "A,B")]
    pub lines: Vec<String>,
    /// Destination of line A.
    #[arg(long, default_value = "239.255.0.1:30001")]
    pub group_a: SocketAddrV4,
    /// Destination of line B.
    #[arg(long, default_value = "239.255.0.2:30001")]
    pub group_b: SocketAddrV4,
    /// Source address of both lines.
    #[arg(long, default_value = "127.0.0.1:40000")]
    pub source: SocketAddrV4,
    /// Line B is this many microseconds behind line A.
    #[arg(long, default_value_t = 10)]
    pub skew_us: i64,
    /// Probability that a packet is lost on line A.
    #[arg(long, default_value_t = 0.0)]
    pub loss_a: f64,
    /// Probability that a packet is lost on line B.
    #[arg(long, default_value_t = 0.0)]
    pub loss_b: f64,
    /// Probability that a packet is duplicated on its line.
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Probability that a packet is swapped with its line's next packet.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Provider restart (new session, sequences from 1) this many seconds in.
    #[arg(long, value_name = "SECONDS")]
    pub session_change_at: Option<f64>,
    /// One Quote with an unbelievable per-symbol sequence this many seconds in.
    #[arg(long, value_name = "SECONDS")]
    pub bad_seq_at: Option<f64>,
    /// End-of-session packet at the end (`--venue cboe-pitch`: an End of
    /// Session for each unit).
    #[arg(long)]
    pub end_session: bool,
    /// The venue's traffic (venues.md): iex-tops (Quote Updates, trading
    /// status, trades, halts) or nasdaq-itch (order flow building books).
    /// --mode, --heartbeat-ms, --snapshot-ms and --bad-seq-at are for the
    /// tickgate protocol only; with a venue, --rate counts messages.
    #[arg(long, value_enum, default_value_t = VenueArg::Tickgate)]
    pub venue: VenueArg,
    /// With --venue nasdaq-itch: live orders the books are held around.
    #[arg(long, default_value_t = 10_000)]
    pub orders: usize,
    /// Publish to the lines' multicast groups at the simulated pace
    /// (starting now) instead of writing a capture.
    #[arg(long, conflicts_with = "out")]
    pub live: bool,
    /// With --live: run until Ctrl-C instead of --duration.
    #[arg(long, requires = "live")]
    pub forever: bool,
    /// With --live: interface to send from (name or IPv4 address).
    #[arg(long, default_value = "127.0.0.1")]
    pub interface: crate::net::receiver::InterfaceSpec,
    /// With --live: multicast TTL (1 stays on the local segment).
    #[arg(long, default_value_t = 1)]
    pub ttl: u32,
    /// With --live: datagrams due within this many microseconds go out
    /// together in one sendmmsg. From 200 up the sender sleeps between
    /// bursts instead of spinning (a load test sharing the daemon's cores).
    #[arg(long, value_name = "US", default_value_t = 50, requires = "live")]
    pub burst_us: u64,
    /// Lose the Nth, 2Nth, ... data packet on every line (a hole no line
    /// repairs; the re-request history still holds it).
    #[arg(long, value_name = "N")]
    pub drop_both: Option<u64>,
    /// With --live (--venue tickgate or nasdaq-itch): a MoldUDP64
    /// re-request server (recovery.md R4) on this UDP address, answering
    /// from the last --rerequest-history messages with one packet of at
    /// most 1,400 bytes, sent back to the request's source.
    #[arg(long, value_name = "ADDR", requires = "live")]
    pub rerequest_listen: Option<SocketAddr>,
    /// With --rerequest-listen: messages kept for re-requests.
    #[arg(long, value_name = "MESSAGES", default_value_t = DEFAULT_HISTORY_MESSAGES)]
    pub rerequest_history: usize,
    /// With --rerequest-listen: requests a second each source may make
    /// (more are dropped and counted).
    #[arg(long, value_name = "PER_SEC", default_value_t = 100)]
    pub rerequest_rate: u32,
    /// With --live --venue nasdaq-itch: a GLIMPSE 5.0 server over
    /// SoupBinTCP 4.00 (recovery.md R5) on this TCP address, serving the
    /// simulated book; needs --glimpse-user and --glimpse-password.
    #[arg(long, value_name = "ADDR", requires_all = ["live", "glimpse_user", "glimpse_password"])]
    pub glimpse_listen: Option<SocketAddr>,
    /// With --glimpse-listen: the username a Login Request must carry (at
    /// most 6 characters).
    #[arg(long, value_name = "USER", requires = "glimpse_listen")]
    pub glimpse_user: Option<String>,
    /// With --glimpse-listen: the password (at most 10 characters).
    #[arg(long, value_name = "PASSWORD", requires = "glimpse_listen")]
    pub glimpse_password: Option<String>,
    /// With --glimpse-listen: a connection must log in within this long.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub glimpse_login_timeout_ms: u64,
    /// With --glimpse-listen: a logged-in client silent this long (no
    /// heartbeat) is disconnected.
    #[arg(long, value_name = "MS", default_value_t = 15_000)]
    pub glimpse_idle_timeout_ms: u64,
    /// With --venue cme-mdp3: the snapshot loop's group (CME Market
    /// Recovery), line SA.
    #[arg(long, default_value = "239.255.0.3:30001")]
    pub group_snapshot: SocketAddrV4,
    /// With --venue cme-mdp3: the definition loop's group (CME Instrument
    /// Recovery), line DA.
    #[arg(long, default_value = "239.255.0.4:30001")]
    pub group_definition: SocketAddrV4,
    /// With --venue cme-mdp3: one packet of each loop every so many
    /// microseconds.
    #[arg(long, value_name = "US", default_value_t = 1000)]
    pub loop_us: u64,
    /// With --venue cme-mdp3: a ChannelReset this many seconds in (every
    /// book emptied, RptSeq from 1).
    #[arg(long, value_name = "SECONDS")]
    pub channel_reset_at: Option<f64>,
    /// With --venue cme-mdp3: SecurityGroup GA halted (SecurityStatus 2)
    /// this many seconds in.
    #[arg(long, value_name = "SECONDS")]
    pub halt_at: Option<f64>,
    /// With --venue cme-mdp3: SecurityGroup GA trading again (17) this
    /// many seconds in.
    #[arg(long, value_name = "SECONDS")]
    pub resume_at: Option<f64>,
    /// With --venue cboe-pitch: units (1-255), each with symbols of its
    /// own (symbol i in unit i mod N + 1) and its own sequence numbers.
    #[arg(long, default_value_t = 1)]
    pub units: usize,
    /// With --venue cboe-pitch: the gap line's group (line G, `kind =
    /// "gap"`): a heartbeat every second, and the Gap Request Proxy's
    /// answers.
    #[arg(long, default_value = "239.255.0.5:30001")]
    pub group_gap: SocketAddrV4,
    /// With --live --venue cboe-pitch: a Gap Request Proxy (recovery.md
    /// R4c) on this TCP address; what it accepts goes out on the gap line.
    /// Needs --pitch-sub-id and --pitch-user.
    #[arg(long, value_name = "ADDR", requires = "live")]
    pub grp_listen: Option<SocketAddr>,
    /// With --grp-listen: messages kept per unit for Gap Requests.
    #[arg(long, value_name = "MESSAGES", default_value_t = DEFAULT_HISTORY_MESSAGES)]
    pub grp_history: usize,
    /// With --grp-listen: the most messages one Gap Request may ask for
    /// (more: Gap Response `C`).
    #[arg(long, value_name = "COUNT", default_value_t = 1_000)]
    pub grp_max_count: u16,
    /// With --grp-listen: the Gap Requests one connection may make in a
    /// second (more: Gap Response `S`).
    #[arg(long, value_name = "REQUESTS", default_value_t = 100)]
    pub grp_per_second: u32,
    /// With --grp-listen: the Gap Requests one connection may make in a
    /// minute (more: Gap Response `M`).
    #[arg(long, value_name = "REQUESTS", default_value_t = u32::MAX, hide_default_value = true)]
    pub grp_per_minute: u32,
    /// With --grp-listen: the Gap Requests one connection may make in all,
    /// its simulated day (more: Gap Response `D`).
    #[arg(long, value_name = "REQUESTS", default_value_t = u32::MAX, hide_default_value = true)]
    pub grp_per_day: u32,
    /// With --grp-listen: a connection's first N Gap Requests get `U`
    /// (the unit cannot be served right now); later ones are answered.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub grp_unavailable: u32,
    /// With --grp-listen: units the proxy does not serve (comma-separated
    /// ids): their Gap Requests get `I`.
    #[arg(long, value_name = "UNITS", value_delimiter = ',')]
    pub grp_not_served: Vec<u8>,
    /// With --live --venue cboe-pitch: a Spin Server (recovery.md R5c) per
    /// unit, unit u on this address's port + u - 1. Needs --pitch-sub-id
    /// and --pitch-user.
    #[arg(long, value_name = "ADDR", requires = "live")]
    pub spin_listen: Option<SocketAddr>,
    /// With --grp-listen or --spin-listen: the Login's session sub id (at
    /// most 4 characters).
    #[arg(long, value_name = "ID")]
    pub pitch_sub_id: Option<String>,
    /// With --grp-listen or --spin-listen: the Login's username (at most 4
    /// characters).
    #[arg(long, value_name = "USER")]
    pub pitch_user: Option<String>,
    /// With --grp-listen or --spin-listen: the Login's password (at most
    /// 10 characters; may be empty).
    #[arg(long, value_name = "PASSWORD", default_value = "")]
    pub pitch_password: String,
}

impl SimulateArgs {
    /// The generator's configuration from the command line.
    pub fn to_config(&self) -> anyhow::Result<SimConfig> {
        let mut lines = Vec::new();
        for name in &self.lines {
            let (dst, loss, delay) = match name.trim() {
                "A" | "a" => (self.group_a, self.loss_a, 0),
                "B" | "b" => (self.group_b, self.loss_b, self.skew_us * 1000),
                other => bail!("unknown line {other:?}: lines are A and B"),
            };
            if lines.iter().any(|l: &SimLine| l.dst == dst) {
                bail!("two lines send to {dst}");
            }
            lines.push(SimLine {
                name: name.trim().to_uppercase(),
                src: self.source,
                dst,
                delay_ns: delay,
                loss,
                kind: LineKind::Incremental,
            });
        }
        if self.venue.kind() == VenueKind::CboePitch {
            // The gap line (venues.md `cboe-pitch`, Lines).
            if lines.iter().any(|l: &SimLine| l.dst == self.group_gap) {
                bail!("two lines send to {}", self.group_gap);
            }
            lines.push(SimLine {
                name: "G".to_string(),
                src: self.source,
                dst: self.group_gap,
                delay_ns: 0,
                loss: 0.0,
                kind: LineKind::Gap,
            });
        }
        if self.venue.kind() == VenueKind::CmeMdp3 {
            // The recovery loops on their own groups (venues.md `cme-mdp3`).
            for (name, dst, kind) in [
                ("SA", self.group_snapshot, LineKind::Snapshot),
                ("DA", self.group_definition, LineKind::Definition),
            ] {
                if lines.iter().any(|l: &SimLine| l.dst == dst) {
                    bail!("two lines send to {dst}");
                }
                lines.push(SimLine {
                    name: name.to_string(),
                    src: self.source,
                    dst,
                    delay_ns: 0,
                    loss: 0.0,
                    kind,
                });
            }
        }
        if self.skew_us < 0 {
            bail!("--skew-us must not be negative");
        }
        let mut cfg = SimConfig::new(self.seed);
        cfg.symbols = self.symbols;
        cfg.rate = self.rate;
        cfg.start_ns = self.start;
        cfg.duration_ns = seconds_to_ns(self.duration, "--duration")?;
        cfg.mode = self.mode;
        cfg.heartbeat_ms = self.heartbeat_ms;
        cfg.snapshot_ms = self.snapshot_ms;
        cfg.channel_heartbeat_ms = self.channel_heartbeat_ms;
        cfg.batch = self.batch;
        cfg.lines = lines;
        cfg.dup = self.dup;
        cfg.reorder = self.reorder;
        cfg.session_change_at_ns = self
            .session_change_at
            .map(|s| seconds_to_ns(s, "--session-change-at"))
            .transpose()?;
        cfg.bad_seq_at_ns = self
            .bad_seq_at
            .map(|s| seconds_to_ns(s, "--bad-seq-at"))
            .transpose()?;
        cfg.end_session = self.end_session;
        cfg.venue = self.venue.kind();
        cfg.orders = self.orders;
        cfg.drop_both_every = self.drop_both;
        cfg.loop_interval_ns = (self.loop_us as i64).saturating_mul(1000);
        let at = |s: Option<f64>, flag: &str| s.map(|s| seconds_to_ns(s, flag)).transpose();
        cfg.channel_reset_at_ns = at(self.channel_reset_at, "--channel-reset-at")?;
        cfg.halt_at_ns = at(self.halt_at, "--halt-at")?;
        cfg.resume_at_ns = at(self.resume_at, "--resume-at")?;
        cfg.units = self.units;
        if cfg.venue == VenueKind::CboePitch {
            // The gap line's heartbeat is due each second: the loop tick
            // need not be finer than a millisecond.
            cfg.loop_interval_ns = cfg.loop_interval_ns.max(1_000_000);
        }
        if cfg.venue == VenueKind::CmeMdp3 {
            // CME sends an AdminHeartbeat only after 30 s without traffic.
            cfg.channel_heartbeat_ms = cfg.channel_heartbeat_ms.max(30_000);
        }
        if (self.grp_listen.is_some() || self.spin_listen.is_some())
            && cfg.venue != VenueKind::CboePitch
        {
            bail!("--grp-listen and --spin-listen need --venue cboe-pitch");
        }
        if self.rerequest_listen.is_some() && cfg.venue == VenueKind::CboePitch {
            bail!(
                "--rerequest-listen serves MoldUDP64 venues: --venue cboe-pitch has --grp-listen"
            );
        }
        if self.rerequest_listen.is_some() && cfg.venue == VenueKind::IexTops {
            bail!("--rerequest-listen serves MoldUDP64 venues: --venue tickgate or nasdaq-itch");
        }
        if self.glimpse_listen.is_some() && cfg.venue != VenueKind::NasdaqItch {
            bail!("--glimpse-listen needs --venue nasdaq-itch");
        }
        if cfg.venue.is_venue_feed() {
            // No per-symbol heartbeats or snapshots on venue feeds.
            cfg.heartbeat_ms = 0;
            cfg.snapshot_ms = 0;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

fn seconds_to_ns(s: f64, what: &str) -> anyhow::Result<i64> {
    if !(0.0..=1e9).contains(&s) {
        bail!("{what} must be a number of seconds between 0 and 1e9 (got {s})");
    }
    Ok((s * 1e9).round() as i64)
}

pub fn main(args: SimulateArgs) -> anyhow::Result<i32> {
    if args.live {
        return simulate_live(&args);
    }
    let cfg = args.to_config()?;
    let Some(out_path) = args.out.as_ref() else {
        bail!("--out FILE is required");
    };
    if crate::capture::binaryfile::is_binaryfile_name(out_path) {
        return simulate_binaryfile(&args, cfg, out_path);
    }
    let mut sim = Simulator::new(cfg)?;
    let (compression, level) = args.compress.for_path(out_path)?;
    let mut w = PcapWriter::create_compressed(out_path, compression, level)
        .with_context(|| format!("creating {}", out_path.display()))?;
    let mut buf = Vec::with_capacity(MAX_DATAGRAM);
    while let Some(ev) = sim.next_into(&mut buf) {
        w.write_udp(ev.t_ns, ev.src, ev.dst, &buf)
            .with_context(|| format!("writing {}", out_path.display()))?;
    }
    w.finish()
        .with_context(|| format!("writing {}", out_path.display()))?;
    let truth = sim.truth();
    // A result: standard output (progress and diagnostics go to stderr).
    print!("{}", summary(truth));
    if let Some(p) = &args.truth {
        let json = serde_json::to_string_pretty(truth)?;
        std::fs::write(p, json + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(0)
}

/// `tickgate simulate --venue nasdaq-itch --out DAY.NASDAQ_ITCH50[.gz]`:
/// the provider's messages as a Nasdaq BinaryFILE (`binaryfile`), each
/// once, in sequence order. A BinaryFILE is the venue's record of one
/// session, not what a line delivered: line faults and a session change
/// are refused. A `MMDDYYYY.` name must be the New York date of `--start`
/// (the messages carry only the time since that midnight).
fn simulate_binaryfile(
    args: &SimulateArgs,
    cfg: SimConfig,
    out_path: &std::path::Path,
) -> anyhow::Result<i32> {
    use crate::capture::binaryfile::{date_from_name, BinaryFileWriter};
    use crate::capture::compress::CaptureOutput;
    if cfg.venue != VenueKind::NasdaqItch {
        bail!(
            "{}: a .NASDAQ_ITCH50 file holds Nasdaq ITCH: it needs --venue nasdaq-itch",
            out_path.display()
        );
    }
    let faults = cfg.lines.iter().any(|l| l.loss > 0.0)
        || cfg.dup > 0.0
        || cfg.reorder > 0.0
        || cfg.drop_both_every.is_some()
        || cfg.session_change_at_ns.is_some();
    if faults {
        bail!(
            "{}: a BinaryFILE is the venue's record of one session: --loss-a, --loss-b, --dup, --reorder, --drop-both and --session-change-at do not apply (write a pcap for those)",
            out_path.display()
        );
    }
    let tz = crate::venue::nasdaq_itch::new_york();
    let at = jiff::Timestamp::from_nanosecond(cfg.start_ns as i128)?;
    let start_date = tz.to_datetime(at).date();
    match date_from_name(out_path) {
        Some(d) if d != start_date => bail!(
            "{}: the name says {d} but --start is on {start_date} in New York: the file's messages carry the time since that midnight",
            out_path.display()
        ),
        Some(_) => {}
        None => eprintln!(
            "tickgate: note: {} is not named MMDDYYYY.NASDAQ_ITCH50: replay it with --date {start_date}",
            out_path.display()
        ),
    }
    let mut sim = Simulator::new(cfg)?;
    let (compression, level) = args.compress.for_path(out_path)?;
    let ctx = || format!("writing {}", out_path.display());
    let out = CaptureOutput::create(out_path, compression, level)
        .with_context(|| format!("creating {}", out_path.display()))?;
    let mut w = BinaryFileWriter::new(out);
    let mut buf = Vec::with_capacity(MAX_DATAGRAM);
    let mut next = 1u64;
    while sim.next_into(&mut buf).is_some() {
        if buf.len() < HEADER_LEN {
            continue;
        }
        let seq = u64::from_be_bytes(buf[10..18].try_into().expect("8 bytes"));
        let count = u16::from_be_bytes([buf[18], buf[19]]);
        if count == 0 || count == COUNT_END_OF_SESSION || seq < next {
            // heartbeat, end of session, or line B's copy
            continue;
        }
        if seq > next {
            bail!("internal: the simulated stream skipped from message {next} to {seq}");
        }
        w.write_blocks(&buf[HEADER_LEN..]).with_context(ctx)?;
        w.add_count(count as u64);
        next = seq + count as u64;
    }
    let messages = w.messages();
    w.into_inner().finish().with_context(ctx)?;
    print!("{}", summary(sim.truth()));
    println!(
        "wrote {messages} messages as a Nasdaq BinaryFILE of {start_date} to {}",
        out_path.display()
    );
    if let Some(p) = &args.truth {
        let json = serde_json::to_string_pretty(sim.truth())?;
        std::fs::write(p, json + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(0)
}

/// `tickgate simulate --live`: the simulator's stream published to its
/// lines' groups at the simulated pace, starting now (so `source_ts` is
/// current), for `--duration` seconds or, with `--forever`, until Ctrl-C.
pub fn simulate_live(args: &SimulateArgs) -> anyhow::Result<i32> {
    let mut cfg = args.to_config()?;
    cfg.start_ns = crate::net::receiver::realtime_ns();
    if args.forever {
        // A century: the stream outlives any run.
        cfg.duration_ns = 100 * 365 * 86_400 * 1_000_000_000;
    }
    let iface = args.interface.resolve()?;
    let mut opts = SenderOptions::new(iface);
    opts.ttl = args.ttl;
    let mut tx = McastSender::open(&opts)?;
    let stop = stop_on_signals();
    let mut sim = Simulator::new(cfg)?;
    for l in sim.lines() {
        refuse_unroutable(*l.dst.ip(), iface)?;
        eprintln!(
            "line {} -> {} via {iface} (ttl {})",
            l.name, l.dst, args.ttl
        );
    }
    let history = args.rerequest_listen.map(|_| {
        let h = Arc::new(Mutex::new(History::new(args.rerequest_history)));
        sim.set_history(h.clone());
        h
    });
    let pitch_login = if args.grp_listen.is_some() || args.spin_listen.is_some() {
        let (Some(sub), Some(user)) = (&args.pitch_sub_id, &args.pitch_user) else {
            bail!("--grp-listen and --spin-listen need --pitch-sub-id and --pitch-user");
        };
        Some(
            Login::new(sub, user, &args.pitch_password)
                .context("the Login of --pitch-sub-id, --pitch-user and --pitch-password")?,
        )
    } else {
        None
    };
    let pitch_history = args.grp_listen.map(|_| {
        let h = Arc::new(Mutex::new(PitchHistory::new(args.grp_history)));
        sim.set_pitch_history(h.clone());
        h
    });
    let gap_line = sim
        .lines()
        .iter()
        .find(|l| l.kind == LineKind::Gap)
        .map(|l| l.dst);
    let units = sim.config().units;
    // The servers read the simulator between its steps: the sender locks
    // it once per datagram, a GLIMPSE login once for its snapshot, a Spin
    // Server once a second per connection for the image it offers.
    let sim = Arc::new(Mutex::new(sim));
    let grp = match (args.grp_listen, pitch_history, pitch_login, gap_line) {
        (Some(addr), Some(history), Some(login), Some(gap_line)) => {
            let mut o = SenderOptions::new(iface);
            o.ttl = args.ttl;
            let gap = McastSender::open(&o)?;
            let mut opts = GrpOptions::new(login, gap_line);
            opts.max_count = args.grp_max_count.max(1);
            opts.per_second = args.grp_per_second;
            opts.per_minute = args.grp_per_minute;
            opts.per_day = args.grp_per_day;
            opts.unavailable = args.grp_unavailable;
            opts.not_served = args.grp_not_served.clone();
            let server = GrpServer::spawn(addr, history, gap, opts)?;
            eprintln!(
                "Gap Request Proxy on {} (last {} messages per unit; answers on {gap_line})",
                server.local_addr(),
                args.grp_history
            );
            Some(server)
        }
        _ => None,
    };
    let mut spins = Vec::new();
    if let (Some(addr), Some(login)) = (args.spin_listen, pitch_login) {
        for unit in 1..=units as u8 {
            let mut at = addr;
            if addr.port() != 0 {
                let port = addr
                    .port()
                    .checked_add(unit as u16 - 1)
                    .with_context(|| format!("--spin-listen {addr}: no port for unit {unit}"))?;
                at.set_port(port);
            }
            let source: SpinSource = {
                let sim = sim.clone();
                Arc::new(move || sim.lock().expect("simulator lock").spin_image(unit))
            };
            let server = SpinServer::spawn(at, source, SpinOptions::new(login))?;
            eprintln!("Spin Server of unit {unit} on {}", server.local_addr());
            spins.push((unit, server));
        }
    }
    let rerequest = match (args.rerequest_listen, history) {
        (Some(addr), Some(history)) => {
            let opts = RerequestOptions {
                rate: args.rerequest_rate,
                ..RerequestOptions::default()
            };
            let server = RerequestServer::spawn(addr, history, opts)?;
            eprintln!(
                "re-request server on {} (last {} messages)",
                server.local_addr(),
                args.rerequest_history
            );
            Some(server)
        }
        _ => None,
    };
    let glimpse = match args.glimpse_listen {
        Some(addr) => {
            let mut opts = GlimpseOptions::new(
                args.glimpse_user.as_deref().unwrap_or_default(),
                args.glimpse_password.as_deref().unwrap_or_default(),
            );
            opts.login_timeout = Duration::from_millis(args.glimpse_login_timeout_ms);
            opts.idle_timeout = Duration::from_millis(args.glimpse_idle_timeout_ms);
            let source: SnapshotSource = {
                let sim = sim.clone();
                Arc::new(move || sim.lock().expect("simulator lock").glimpse_snapshot())
            };
            let server = GlimpseServer::spawn(addr, source, opts)?;
            eprintln!("GLIMPSE server on {}", server.local_addr());
            Some(server)
        }
        None => None,
    };
    let mut buf = Vec::with_capacity(MAX_DATAGRAM);
    let items = std::iter::from_fn(|| {
        let ev = sim.lock().expect("simulator lock").next_into(&mut buf)?;
        Some((ev.t_ns, ev.dst, buf.clone()))
    });
    let burst = std::time::Duration::from_micros(args.burst_us);
    let st = send_paced_in_bursts(
        &mut tx,
        items,
        Pace::Recorded { speed: 1.0 },
        stop,
        None,
        burst,
    )?;
    eprintln!(
        "sent {} datagrams ({} bytes) in {:.3} s, {:.0}/s",
        st.datagrams,
        st.bytes,
        st.elapsed.as_secs_f64(),
        st.rate()
    );
    if let Some(s) = rerequest {
        let c = s.stop();
        eprintln!(
            "re-request server: {} datagrams, {} answered ({} messages), {} malformed, {} other session, {} too old, {} not yet sent, {} rate limited",
            c.datagrams, c.answered, c.messages, c.malformed, c.other_session, c.too_old, c.not_yet_sent, c.rate_limited
        );
    }
    if let Some(s) = grp {
        let c = s.stop();
        eprintln!(
            "Gap Request Proxy: {} connections, {} logins accepted, {} rejected, {} requests: {} accepted ({} datagrams, {} messages on the gap line), {} out of range, {} count too large, {} second limit, {} minute limit, {} day limit, {} unavailable, {} unit unknown; {} garbage, {} idle timeouts",
            c.conn.connections, c.conn.logins_accepted, c.conn.logins_rejected, c.requests, c.accepted, c.gap_datagrams, c.gap_messages, c.out_of_range, c.count_too_large, c.second_limit, c.minute_limit, c.day_limit, c.unavailable, c.invalid_unit, c.conn.garbage, c.conn.idle_timeouts
        );
    }
    for (unit, s) in spins {
        let c = s.stop();
        eprintln!(
            "Spin Server of unit {unit}: {} connections, {} logins accepted, {} rejected, {} images offered, {} requests, {} spins ({} orders), {} out of range, {} garbage, {} idle timeouts",
            c.conn.connections, c.conn.logins_accepted, c.conn.logins_rejected, c.images_offered, c.requests, c.spins_sent, c.orders_sent, c.out_of_range, c.conn.garbage, c.conn.idle_timeouts
        );
    }
    if let Some(s) = glimpse {
        let c = s.stop();
        eprintln!(
            "GLIMPSE server: {} connections, {} logins accepted, {} rejected, {} snapshots, {} logouts, {} garbage, {} login timeouts, {} idle timeouts, {} write failures, {} refused",
            c.connections, c.logins_accepted, c.logins_rejected, c.snapshots_sent, c.logouts, c.garbage, c.login_timeouts, c.idle_timeouts, c.write_failures, c.refused
        );
    }
    // Results: standard output.
    let sim = sim.lock().expect("simulator lock");
    print!("{}", summary(sim.truth()));
    if let Some(p) = &args.truth {
        let json = serde_json::to_string_pretty(sim.truth())?;
        std::fs::write(p, json + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(0)
}

/// The human summary printed on standard output.
pub fn summary(t: &SimTruth) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "simulated {} symbols ({}), seed {}, sessions {}: {} provider packets ({} data, {} channel heartbeats, {} end of session), {} messages ({} quotes, {} heartbeats, {} snapshots), {} datagrams written",
        t.symbols,
        t.mode,
        t.seed,
        t.sessions.join(","),
        t.provider_packets,
        t.data_packets,
        t.channel_heartbeats,
        t.end_of_session_packets,
        t.messages,
        t.quotes,
        t.heartbeats,
        t.snapshots,
        t.datagrams
    );
    for l in &t.lines {
        let _ = writeln!(
            s,
            "  line {} {}: {} packets, {} dropped, {} duplicated, {} reordered pairs",
            l.name, l.dst, l.packets, l.dropped, l.duplicates, l.reordered
        );
    }
    let _ = writeln!(
        s,
        "  lost on every line: {} packets, {} messages; expected channel_lost {}, duplicate packets {}",
        t.packets_lost_all_lines,
        t.messages_lost_all_lines,
        t.expected_channel_lost,
        t.expected_duplicate_packets
    );
    if let Some(ns) = t.session_change_ns {
        let _ = writeln!(s, "  session change at {ns}");
    }
    if let Some(b) = &t.bad_seq {
        let _ = writeln!(
            s,
            "  bad sequence {} for {} at {} ({})",
            b.seq,
            b.symbol,
            b.t_ns,
            if b.delivered {
                "delivered"
            } else {
                "lost on every line"
            }
        );
    }
    s
}
