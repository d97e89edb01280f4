//! The replay's state: each feed's core fed the captured datagrams with
//! their stamps as the clock, routed by destination to (feed, line), and
//! the gate's answers at a given time; the feeds of a config file.

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::path::Path;

use super::feed::{FeedSpec, ReplayFeed, ReplayLine, SessionInfo};
use super::timeline::model::Touches;
use super::timeline::Recorder;
use crate::capture::source::DatagramRun;
use crate::feed::across::{Feeds, GateRules};
use crate::feed::check::{answer_over, SymbolLookup};
use crate::feed::reader::Found;
use crate::feed::{DatagramOutcome, Feed, FeedSettings, Mode};
use crate::util::pages::MemRange;
use crate::venue::{ChannelHeader, LineKind, MoldParts};
use crate::wire::PacketKind;
use crate::wire::Symbol;

/// Messages beyond the datagram being applied whose first stage of cache
/// hints is given already (`Replay::on_run`): a datagram ahead on a day
/// of 8-message datagrams, as many as it takes on smaller ones.
const HINT_AHEAD: usize = 8;

/// The replay state: feeds, and the route from destination to (feed, line).
pub struct Replay {
    pub feeds: Vec<ReplayFeed>,
    route: HashMap<SocketAddrV4, (usize, usize)>,
    /// R4: re-request server address to feed.
    answers: HashMap<SocketAddrV4, usize>,
    /// Datagrams whose destination is no line (or whose source is not the
    /// one a source-specific line accepts).
    pub unmatched: u64,
    /// A destination that is no line yet becomes one of the first feed.
    discover_lines: bool,
    /// --timeline: told of each datagram and each advance of the clock.
    pub timeline: Option<Box<Recorder>>,
    /// A datagram of a run, built where only a datagram will do.
    scratch: Vec<u8>,
    /// Where the tables' requests for resident memory go (`populate_with`).
    populate: Option<Box<dyn FnMut(MemRange)>>,
    /// The `[gate]` rules of a symbol on several feeds.
    pub rules: GateRules,
}

impl Replay {
    /// One feed in `mode` with default settings; each destination one line.
    pub fn single_feed(mode: Mode, lines: &[SocketAddrV4]) -> Replay {
        Replay::single_venue_feed(
            FeedSettings {
                mode,
                ..FeedSettings::default()
            },
            lines,
        )
    }

    /// One feed with these settings (e.g. a venue's defaults); each
    /// destination one line.
    pub fn single_venue_feed(settings: FeedSettings, lines: &[SocketAddrV4]) -> Replay {
        Replay::new(vec![FeedSpec {
            name: "replay".to_string(),
            settings,
            lines: lines
                .iter()
                .map(|&dst| ReplayLine {
                    dst,
                    source: None,
                    kind: LineKind::Incremental,
                })
                .collect(),
            symbols: Vec::new(),
            rerequest: Vec::new(),
        }])
    }

    /// The given feeds; a destination that two lines share goes to the
    /// first. Every feed's books are laid out for a replay (docs/venues.md
    /// "Tables in replay"): a replay has no live thread for a page fault
    /// to stall.
    pub fn new(feeds: Vec<FeedSpec>) -> Replay {
        let mut route = HashMap::new();
        let mut answers = HashMap::new();
        let feeds = feeds
            .into_iter()
            .enumerate()
            .map(|(fi, mut spec)| {
                spec.settings.venue.replay_tables = true;
                for (li, line) in spec.lines.iter().enumerate() {
                    route.entry(line.dst).or_insert((fi, li));
                }
                for server in &spec.rerequest {
                    if let std::net::SocketAddr::V4(a) = server {
                        answers.entry(*a).or_insert(fi);
                    }
                }
                let mut feed =
                    Feed::with_publisher(spec.settings, spec.lines.len(), Touches::default());
                for (sym, stale, source) in spec.symbols {
                    feed.set_symbol_thresholds(sym, stale, source);
                }
                for (li, line) in spec.lines.iter().enumerate() {
                    feed.set_line_kind(li, line.kind);
                }
                ReplayFeed {
                    name: spec.name,
                    mode: spec.settings.mode,
                    venue: spec.settings.venue.kind,
                    feed,
                    lines: spec.lines,
                    sessions: Vec::new(),
                    stale_session_packets: 0,
                }
            })
            .collect();
        Replay {
            feeds,
            route,
            answers,
            unmatched: 0,
            discover_lines: false,
            timeline: None,
            scratch: Vec::new(),
            populate: None,
            rules: GateRules::default(),
        }
    }

    /// From now on each new destination becomes a line of the first feed,
    /// in order of first appearance: a streamed capture's destinations are
    /// known only as they come.
    pub fn discover_lines(mut self) -> Replay {
        self.discover_lines = !self.feeds.is_empty();
        self
    }

    fn add_line(&mut self, dst: SocketAddrV4) -> (usize, usize) {
        let f = &mut self.feeds[0];
        f.lines.push(ReplayLine {
            dst,
            source: None,
            kind: LineKind::Incremental,
        });
        let li = f.feed.add_line();
        self.route.insert(dst, (0, li));
        (0, li)
    }

    /// The feed and line of datagrams from `src` to `dst` (a line added
    /// when lines are discovered); `None`, the `n` datagrams counted
    /// unmatched, when no line takes them.
    fn line_of(&mut self, src: SocketAddrV4, dst: SocketAddrV4, n: u64) -> Option<(usize, usize)> {
        let (fi, li) = match self.route.get(&dst) {
            Some(&r) => r,
            None if self.discover_lines => self.add_line(dst),
            None => {
                self.unmatched += n;
                return None;
            }
        };
        if self.feeds[fi].lines[li]
            .source
            .is_some_and(|s| s != *src.ip())
        {
            self.unmatched += n;
            return None;
        }
        Some((fi, li))
    }

    /// One datagram from `src` to `dst`, stamped `ts` (the clock).
    pub fn on_datagram(&mut self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8], ts: i64) {
        self.apply_datagram(src, dst, payload, ts);
        self.pass_populate();
        if let Some(mut t) = self.timeline.take() {
            t.after_datagram(&mut self.feeds, dst, ts);
            self.timeline = Some(t);
        }
    }

    fn apply_datagram(&mut self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8], ts: i64) {
        if let Some(&fi) = self.answers.get(&src) {
            // recovery.md "Replay": the feed's re-request answer (R4).
            self.feeds[fi].feed.on_rerequest_answer(payload, ts);
            return;
        }
        let Some((fi, li)) = self.line_of(src, dst, 1) else {
            return;
        };
        let f = &mut self.feeds[fi];
        // The feed's venue validates the whole datagram; the session notes
        // take the header it found valid (not a second parse).
        let out = f.feed.on_datagram(li, payload, ts);
        note_outcome(f, out, ts);
    }

    /// A run of datagrams (`CaptureStream::next_run`), each applied as
    /// [`Self::on_datagram`] applies it: routed once (they share source
    /// and destination), and the feed takes each one's message blocks as
    /// they are (`Feed::on_blocks`) wherever it can, a datagram being
    /// built only where it cannot.
    pub fn on_run(&mut self, run: &DatagramRun) {
        if self.timeline.is_some() || self.answers.contains_key(&run.src) {
            // One by one: the timeline looks at each, an answer is whole.
            let mut buf = std::mem::take(&mut self.scratch);
            for d in run.iter() {
                run.datagram(&d, &mut buf);
                self.on_datagram(run.src, run.dst, &buf, d.ts);
            }
            self.scratch = buf;
            return;
        }
        if run.is_empty() {
            return;
        }
        let Some((fi, li)) = self.line_of(run.src, run.dst, run.len() as u64) else {
            return;
        };
        let f = &mut self.feeds[fi];
        // The venue's cache hints, in two stages, ahead of the datagram
        // being applied: the first stage (orders, books) at least
        // `HINT_AHEAD` messages ahead; the second (what those reach:
        // level nodes) for the next datagram, once its first stage has
        // had a datagram's time to land (the venue gives the second stage
        // within a datagram itself). So the first messages of a datagram
        // find their state in cache as the later ones do, even where a
        // datagram holds a single message.
        let mut ahead = run.iter();
        let mut hinted = 0usize;
        let mut first_given = 0usize;
        let mut levels = run.iter().skip(1);
        for (i, d) in run.iter().enumerate() {
            let landed = first_given;
            while hinted < d.count as usize + HINT_AHEAD {
                let Some(next) = ahead.next() else { break };
                f.feed.prefetch_blocks(next.blocks);
                hinted += next.count as usize;
                first_given += 1;
            }
            hinted = hinted.saturating_sub(d.count as usize);
            if let Some(next) = levels.next() {
                if i + 1 < landed {
                    f.feed.prefetch_levels(next.blocks);
                }
            }
            let parts = MoldParts {
                session: run.session,
                sequence: d.sequence,
                count: d.count,
                blocks: d.blocks,
                checked: run.checked,
            };
            let out = match f.feed.on_blocks(li, &parts, d.ts) {
                Some(out) => out,
                None => {
                    run.datagram(&d, &mut self.scratch);
                    f.feed.on_datagram(li, &self.scratch, d.ts)
                }
            };
            note_outcome(f, out, d.ts);
        }
        self.pass_populate();
    }

    /// From now on, each feed's table memory asked to be made resident
    /// ahead of use (docs/venues.md "Tables in replay") goes to `sink`
    /// (the replay's helper thread) after each datagram or run.
    pub fn populate_with(&mut self, sink: impl FnMut(MemRange) + 'static) {
        self.populate = Some(Box::new(sink));
    }

    #[inline]
    fn pass_populate(&mut self) {
        if let Some(sink) = &mut self.populate {
            for f in &mut self.feeds {
                if let Some(range) = f.feed.take_populate() {
                    sink(range);
                }
            }
        }
    }

    /// Capture time reaches `now`: every feed's holes whose deadline passed
    /// are declared (recovery.md R2 with capture time; nothing is sent).
    pub fn advance(&mut self, now: i64) {
        for f in &mut self.feeds {
            f.feed.handle_timeout(now);
            while f.feed.poll_request().is_some() {}
        }
        if let Some(mut t) = self.timeline.take() {
            t.after_advance(&mut self.feeds, now);
            self.timeline = Some(t);
        }
    }

    /// Appends the answer to one request line at `now`, as the gate socket
    /// would answer it (feeds by their config names).
    pub fn answer(&self, request: &[u8], now: i64, out: &mut Vec<u8>) {
        match answer_over(request, self, &self.rules, now, out) {
            Ok(()) => {}
            Err(never) => match never {},
        }
    }
}

impl Feeds for Replay {
    type Error = std::convert::Infallible;
    fn count(&self) -> usize {
        self.feeds.len()
    }
    fn name(&self, i: usize) -> &[u8] {
        self.feeds[i].name.as_bytes()
    }
    fn find(&self, i: usize, symbol: Symbol) -> Result<Option<Found>, Self::Error> {
        Ok(self.feeds[i].feed.lookup(symbol))
    }
}

/// What a datagram applied to `f` at `ts` did, in its sessions' notes.
#[inline]
fn note_outcome(f: &mut ReplayFeed, out: DatagramOutcome, ts: i64) {
    match out {
        DatagramOutcome::Invalid(_) | DatagramOutcome::UnknownLine => return,
        DatagramOutcome::StaleSession => f.stale_session_packets += 1,
        _ => {}
    }
    if let Some(h) = f.feed.last_header() {
        note_session(&mut f.sessions, h, ts);
        // C6 inside a data packet (IEX System Event C).
        if f.feed.session_ended() {
            if let Some(s) = f.sessions.iter_mut().rfind(|s| s.id == h.session) {
                s.end_of_session = true;
            }
        }
    }
}

/// Sessions described per feed; packets of further ones are still replayed.
const MAX_SESSIONS_SHOWN: usize = 1000;

fn note_session(sessions: &mut Vec<SessionInfo>, p: &ChannelHeader, ts: i64) {
    // newest first: a new session's packets are the common case
    let i = match sessions.iter().rposition(|s| s.id == p.session) {
        Some(i) => i,
        None if sessions.len() >= MAX_SESSIONS_SHOWN => return,
        None => {
            sessions.push(SessionInfo {
                id: p.session,
                packets: 0,
                data_packets: 0,
                heartbeats: 0,
                end_of_session: false,
                first_ts: ts,
                last_ts: ts,
                first_sequence: p.sequence,
                next_sequence: p.sequence,
            });
            sessions.len() - 1
        }
    };
    let s = &mut sessions[i];
    s.packets += 1;
    s.first_ts = s.first_ts.min(ts);
    s.last_ts = s.last_ts.max(ts);
    s.first_sequence = s.first_sequence.min(p.sequence);
    let next = match p.kind {
        PacketKind::Data => {
            s.data_packets += 1;
            p.sequence.saturating_add(p.count as u64)
        }
        PacketKind::Heartbeat => {
            s.heartbeats += 1;
            p.sequence
        }
        PacketKind::EndOfSession => {
            s.end_of_session = true;
            p.sequence
        }
    };
    s.next_sequence = s.next_sequence.max(next);
}

/// The config file's feeds: each feed's lines by group:port (and source,
/// for a source-specific line), its settings and its configured symbols.
/// Interfaces and the other sections do not matter to a replay.
pub fn replay_from_config(path: &Path) -> anyhow::Result<Replay> {
    let cfg = crate::config::Config::load(path)
        .map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))?;
    let mut replay = Replay::new(cfg.feeds.iter().map(feed_spec).collect());
    replay.rules = cfg.gate.rules;
    Ok(replay)
}

/// The core's settings and the replay lines of one configured feed.
pub fn feed_spec(f: &crate::config::FeedConfig) -> FeedSpec {
    let settings = f.feed_settings();
    FeedSpec {
        name: f.name.clone(),
        settings,
        lines: f
            .lines
            .iter()
            .map(|l| ReplayLine {
                dst: SocketAddrV4::new(l.group, l.port),
                source: l.source,
                kind: l.kind,
            })
            .collect(),
        symbols: f
            .symbols
            .iter()
            .map(|s| {
                let t = f.thresholds_for(s.symbol);
                (s.symbol, t.stale_ms, t.source_max_age_ms)
            })
            .collect(),
        rerequest: f.rerequest.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_notes_take_the_header_the_feed_validated() {
        use crate::wire::{Packet, PacketBuilder, Quote, SessionId, Symbol};
        let sid = SessionId::parse("20261130S1").unwrap();
        let sym = Symbol::parse("EURUSD").unwrap();
        let mut b = PacketBuilder::new();
        b.start(sid, 41)
            .quote(&Quote::new(sym, 7, 1, None, None))
            .quote(&Quote::new(sym, 8, 2, None, None));
        let data = b.bytes().to_vec();
        let hb = PacketBuilder::channel_heartbeat(sid, 43);
        let eos = PacketBuilder::end_of_session(sid, 43);
        let mut feed = Feed::new(FeedSettings::default(), 1);
        for d in [&data[..], &hb[..], &eos[..]] {
            let p = Packet::parse(d).unwrap();
            feed.on_datagram(0, d, 1);
            let h = feed.last_header().unwrap();
            assert_eq!(
                (h.session, h.sequence, h.count, h.kind),
                (p.session, p.sequence, p.message_count(), p.kind())
            );
        }
        // An invalid datagram leaves the last valid header.
        feed.on_datagram(0, &hb[..19], 2);
        assert_eq!(feed.last_header().unwrap().kind, PacketKind::EndOfSession);
    }
}
