//! What a venue supplies to the feed's recovery machines
//! (`feed::recovery`): codecs, not engine code. Pure: bytes in, bytes out.
//!
//! # A refill service (recovery.md R4; Cboe's Gap Request Proxy, R4c)
//!
//! The refill machine (`feed::recovery::refill::Refill`) decides *what* to
//! ask (the channel's first missing message and how many), *when* (after
//! `gap_hold_us`, again after `rerequest_timeout_ms`, at once after a
//! partial answer) and *how fast* (one outstanding request, at most 100 a
//! second). A venue only says how a request looks on the wire:
//!
//! ```
//! use tickgate::venue::codec::{Gap, RefillCodec};
//!
//! /// A made-up service: unit byte, sequence u32 and count u16, big-endian.
//! struct Toy;
//!
//! impl RefillCodec for Toy {
//!     type Request = (u8, u32, u16);
//!     fn request(&self, gap: Gap) -> (u8, u32, u16) {
//!         let count = gap.missing.clamp(1, u16::MAX as u64) as u16;
//!         (gap.session.0[9], gap.first as u32, count)
//!     }
//!     fn encode(&self, r: &(u8, u32, u16), out: &mut Vec<u8>) {
//!         out.push(r.0);
//!         out.extend_from_slice(&r.1.to_be_bytes());
//!         out.extend_from_slice(&r.2.to_be_bytes());
//!     }
//!     fn count(&self, r: &(u8, u32, u16)) -> u64 {
//!         r.2 as u64
//!     }
//! }
//! ```
//!
//! `request` may ask for fewer messages than missing (a count limit, which
//! the codec may keep and change: the machine lends it out through
//! `Refill::codec_mut`, e.g. to halve it after a refusal): the machine
//! asks for the rest once the answer has moved `next`. Answers
//! are not the codec's business: they are the venue's ordinary datagrams
//! (`Venue::parse`), folded into the hold as from a line named `rerequest`
//! (MoldUDP64), or arrive on the venue's gap lines (Cboe). Sending the
//! bytes is the I/O shell's (`net::rerequest`).
//!
//! # An image service (recovery.md R5; Cboe Spin, R5c)
//!
//! The image session machine (`feed::recovery::image::ImageSession`)
//! owns the conversation's rules: log in first, a client heartbeat after
//! each second without sending, fail after 15 s without a whole packet or
//! 30 s without the end, bound the image's bytes, keep its messages as
//! blocks (u16 big-endian length, message), log out at the end. A venue
//! supplies an [`ImageCodec`]: the bytes of its login, heartbeat and
//! logout, and a decoder that turns the server's bytes into
//! [`ImageEvent`]s (a reply, such as Spin's Spin Request, is written into
//! the `out` buffer that `next_event` is given). The TCP connection is the
//! I/O shell's (`net::glimpse`).
//!
//! # Snapshot and definition loops (venues.md `cme-mdp3`, Snapshots)
//!
//! The other way round: the loops machine (`feed::recovery::loops::Loops`)
//! keeps which instruments wait, their kept entries, what a loop snapshot
//! must cover and which loop lines are wanted; the venue's adapter, which
//! decodes the loops and holds the books, tells it what it saw through
//! [`LoopMachine`] (handed to it by the feed with the symbol rules,
//! `Rules::loops`).

use crate::wire::SessionId;

/// R4: the messages a channel lacks: `missing` messages from `first` of
/// `session` (the channel's; a venue with units finds its unit from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub session: SessionId,
    pub first: u64,
    pub missing: u64,
}

/// A venue's refill request: what the refill machine queues, and its
/// bytes.
pub trait RefillCodec {
    /// One request, as the machine queues it and the I/O shell sends it.
    type Request: Copy + std::fmt::Debug + PartialEq + Eq;

    /// The request for `gap` (at least one message; at most what the
    /// service accepts in one request).
    fn request(&self, gap: Gap) -> Self::Request;

    /// `request`'s bytes, appended to `out`.
    fn encode(&self, request: &Self::Request, out: &mut Vec<u8>);

    /// How many messages `request` asks for.
    fn count(&self, request: &Self::Request) -> u64;

    /// What the service's response `status` to the outstanding request
    /// asks of the feed at `now` (R4c's table); a service that answers
    /// with the data itself (R4) has no responses.
    fn on_response(&mut self, _status: u8, _now: i64) -> RefillAction {
        RefillAction::Wait
    }

    /// R6: where a response `status` is counted among the feed's
    /// responses by status (`RecoveryCounters::responses_by_status`, the
    /// service's own table of statuses); `None`: not counted (a service
    /// without responses).
    fn status_slot(&self, _status: u8) -> Option<usize> {
        None
    }

    /// The feed's count limit became `limit` (another channel's request
    /// was refused for its count; R4c: the limit is the feed's).
    fn set_count_limit(&mut self, _limit: u64) {}

    /// Whether the service answers on the feed's own lines rather than to
    /// the requester (R4c: Cboe's gap multicast). Then a partial fill does
    /// not end the request: the rest of the same answer is usually still
    /// on its way, and the request ends when every message it asked for
    /// was processed, when the service refuses it, or at its timeout.
    fn answers_on_lines(&self) -> bool {
        false
    }

    /// Whether the service is asked for holes among the datagrams an image
    /// attempt holds, while it runs (R5c step 1: Gap Requests go out as
    /// usual during a spin, and none of those holes is declared during
    /// the attempt). Without, an image's hold waits for the image (R5).
    fn asks_during_image(&self) -> bool {
        false
    }
}

/// What a refill service's response to the outstanding request asks of
/// the feed (R4c), venue-neutral: the codec reads the response, the refill
/// machine carries it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefillAction {
    /// Accepted: the messages are on their way.
    Wait,
    /// The service cannot fill this hole: it is declared lost at once.
    DeclareLost,
    /// The count was too large: the feed's count limit is now
    /// `count_limit`; ask again at once (not an attempt).
    AskAgain { count_limit: u64 },
    /// Ask again after `rerequest_timeout_ms`, an attempt without
    /// progress.
    Retry,
    /// No request from the feed before `until`; open holes wait at least
    /// that long plus the attempts' window.
    PauseFeed { until: i64 },
    /// No request from the feed before `until`; meanwhile holes get R2's
    /// deadline without re-requests.
    OffFeed { until: i64 },
    /// The service does not serve this channel: no request for it until
    /// its next session; its holes as under `OffFeed`.
    OffChannel,
}

/// One thing an image server said, as its venue's codec reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageEvent<'a> {
    /// A whole packet that carries nothing for the image (a heartbeat, a
    /// debug packet, a message the codec answered through `out`).
    Heard,
    /// The login is accepted (`session` where the protocol names one:
    /// for the log only, R5 does not compare it with the lines').
    LoggedIn { session: Option<SessionId> },
    /// One message of the image.
    Message(&'a [u8]),
    /// The image is whole: `next` is the first sequence after it.
    End { next: u64 },
}

/// Why an image conversation cannot go on, as its codec sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageError {
    /// The login was refused.
    Rejected(String),
    /// The server ended the session before the image's end.
    Closed(String),
    /// Bytes that do not parse, or a packet that has no place here.
    Malformed(String),
    /// The server refused the image request itself (R5c: Spin Response
    /// `S`).
    RequestRefused(String),
}

/// A venue's image protocol, both directions (SoupBinTCP + GLIMPSE;
/// later Cboe Spin).
pub trait ImageCodec {
    /// The bytes that open the conversation (the login), appended to `out`.
    fn login(&mut self, out: &mut Vec<u8>) -> Result<(), ImageError>;

    /// A client heartbeat, appended to `out`.
    fn heartbeat(&mut self, out: &mut Vec<u8>);

    /// The goodbye after the image's end (may append nothing).
    fn logout(&mut self, out: &mut Vec<u8>);

    /// Bytes read from the server, in order.
    fn push(&mut self, bytes: &[u8]);

    /// The next whole packet's event; `None` when the bytes pushed so far
    /// hold no whole packet. A reply the protocol needs is appended to
    /// `out`.
    fn next_event(&mut self, out: &mut Vec<u8>) -> Result<Option<ImageEvent<'_>>, ImageError>;
}

/// What a venue's adapter tells the feed's loops machine, and asks it
/// (`feed::recovery::loops::Loops`). Instruments are the channel's
/// indices; `E` is the venue's kept entry, ranked by its instrument
/// sequence (CME's RptSeq).
pub trait LoopMachine<E> {
    /// `instrument` waits for a snapshot (or its next entry) from `now`;
    /// no effect if it already waits.
    fn start_waiting(&mut self, instrument: u32, now: i64);
    /// `instrument` no longer waits: its kept entries are forgotten.
    fn stop_waiting(&mut self, instrument: u32);
    /// Every instrument given a slot waits (a gap, a channel reset).
    fn all_wait(&mut self, now: i64);
    /// Every wait and kept entry is forgotten (a channel reset).
    fn forget_waits(&mut self);
    /// Keeps an entry of a waiting instrument, in order (nothing if it
    /// does not wait). At the bound, the kept entries of the instrument
    /// that has waited longest (and has some) are dropped first.
    fn keep(&mut self, instrument: u32, rank: u32, entry: E);
    /// A snapshot ranked `rank` was used: its kept entries above it go to
    /// `out`, in order, the rest is discarded, and it no longer waits.
    fn take_after(&mut self, instrument: u32, rank: u32, out: &mut Vec<E>);
    /// A session began with a packet sent at `sent`: nothing lost yet.
    fn session_began(&mut self, sent: u64);
    /// The packet `seq` carried a channel reset.
    fn channel_reset(&mut self, seq: u32);
    /// Packets `from` to `to` (inclusive) were declared lost (C3).
    fn lost(&mut self, from: u64, to: u64);
    /// Whether a snapshot of `instrument` sent at `sent` after the packets
    /// up to `processed`, ranked `rank`, may be used: it covers every reset
    /// and loss of the session, and (when the instrument's sequence
    /// `last` is `believed`) rolls nothing back unless a kept entry
    /// continues it.
    fn snapshot_usable(
        &self,
        instrument: u32,
        sent: u64,
        processed: u32,
        rank: u32,
        last: Option<u32>,
        believed: bool,
    ) -> bool;
    /// A definition was seen: `first` for its instrument's first one;
    /// `total` the loop's size where it says.
    fn defined(&mut self, first: bool, total: Option<u32>);
    /// An entry named an instrument without a definition (`true`), or
    /// such an instrument got one (`false`).
    fn named_undefined(&mut self, named: bool);
}
