//! A feed of a replay: what it is given (`FeedSpec`: settings, lines,
//! symbols) and what was seen of it (`ReplayFeed`: its core, its lines,
//! its sessions). The replay and the timeline both read these.

use std::net::{Ipv4Addr, SocketAddrV4};

use super::timeline::model::Touches;
use crate::feed::{Feed, FeedSettings, Mode};
use crate::venue::{LineKind, VenueKind};
use crate::wire::{SessionId, Symbol};

/// One feed of a replay and what was seen of its sessions.
pub struct ReplayFeed {
    pub name: String,
    pub mode: Mode,
    pub venue: VenueKind,
    /// Its publisher notes the symbols a datagram changed, for --timeline.
    pub feed: Feed<Touches>,
    /// Each line (line index = position).
    pub lines: Vec<ReplayLine>,
    pub sessions: Vec<SessionInfo>,
    /// Packets dropped as belonging to a replaced or ended session (C5/C6).
    pub stale_session_packets: u64,
}

/// One session id as seen on the wire (valid packets, all lines).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: SessionId,
    pub packets: u64,
    pub data_packets: u64,
    pub heartbeats: u64,
    pub end_of_session: bool,
    pub first_ts: i64,
    pub last_ts: i64,
    /// Lowest channel sequence number seen.
    pub first_sequence: u64,
    /// One past the highest message sequence seen (a heartbeat's own
    /// sequence counts as "next").
    pub next_sequence: u64,
}

/// One line of a replayed feed: datagrams sent to `dst` (and, for a
/// source-specific line, sent from `source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayLine {
    pub dst: SocketAddrV4,
    pub source: Option<Ipv4Addr>,
    /// What it carries (venues.md `cme-mdp3`, Lines).
    pub kind: LineKind,
}

/// A feed to replay into.
#[derive(Clone, Debug)]
pub struct FeedSpec {
    pub name: String,
    pub settings: FeedSettings,
    pub lines: Vec<ReplayLine>,
    /// Symbols known from the start, with `(stale_ms, source_max_age_ms)`.
    pub symbols: Vec<(Symbol, u64, u64)>,
    /// recovery.md "Replay": a datagram from one of these (UDP source) is
    /// the feed's re-request answer (R4).
    pub rerequest: Vec<std::net::SocketAddr>,
}
