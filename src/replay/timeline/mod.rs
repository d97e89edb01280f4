//! `tickgate replay CAPTURE --timeline OUT`: a picture of the replay (the
//! gate's verdict per symbol over time, the feeds' events, packets per
//! line, the clock offset), as self-contained HTML, SVG or PNG.
//!
//! `model` is the sans-I/O accumulator, `render` draws it; this file is
//! the glue the replay calls after each datagram and each advance of the
//! clock (`Recorder`), and the options.

pub mod model;
pub mod render;

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::feed::ReplayFeed;
use crate::capture::stream::StreamSummary;
use crate::feed::verdict::Thresholds;
use crate::feed::view::{FeedView, SymbolView};
use crate::feed::FeedCounters;
use crate::wire::Symbol;
use model::{EventCounts, Timeline, TimelineOptions, Tracked};

/// Most `--symbol`s and `--timeline-symbols`: a picture of more rows is
/// not readable.
pub const MAX_SYMBOLS: usize = 200;
/// Most `--timeline-buckets`.
pub const MAX_BUCKETS: usize = 20_000;

#[derive(Debug, Default, Clone, clap::Args)]
pub struct TimelineArgs {
    /// Draw a timeline of the replay into this file: .html (self-contained
    /// page), .svg or .png (told by the extension).
    #[arg(long, value_name = "OUT", conflicts_with = "send")]
    pub timeline: Option<PathBuf>,
    /// With --timeline: a symbol to draw (repeatable); default: the
    /// busiest.
    #[arg(long = "symbol", value_name = "SYM", requires = "timeline")]
    pub symbols: Vec<String>,
    /// With --timeline and no --symbol: how many of the busiest symbols
    /// (most updates) to draw.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub timeline_symbols: usize,
    /// With --timeline: most time buckets; a longer capture doubles their
    /// width, so memory stays the same whatever its length.
    #[arg(long, value_name = "N", default_value_t = 600)]
    pub timeline_buckets: usize,
    /// With --timeline: the narrowest bucket, ms.
    #[arg(long, value_name = "MS", default_value_t = 1)]
    pub timeline_bucket_ms: u64,
}

/// The picture's file format, by the output's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Html,
    Svg,
    Png,
}

impl Format {
    pub fn of(path: &Path) -> anyhow::Result<Format> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase());
        match ext.as_deref() {
            Some("html") | Some("htm") => Ok(Format::Html),
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => anyhow::bail!(
                "--timeline {}: the file name must end in .html, .svg or .png (the format)",
                path.display()
            ),
        }
    }
}

impl TimelineArgs {
    /// The model's options, or why the arguments are not acceptable.
    pub fn options(&self) -> anyhow::Result<TimelineOptions> {
        if self.symbols.len() > MAX_SYMBOLS {
            anyhow::bail!("--symbol: at most {MAX_SYMBOLS} symbols can be drawn");
        }
        let mut symbols = Vec::new();
        for s in &self.symbols {
            let sym = Symbol::parse(s).with_context(|| {
                format!(
                    "--symbol {s:?}: not a symbol (1 to {} printable ASCII characters)",
                    crate::wire::SYMBOL_MAX
                )
            })?;
            if !symbols.contains(&sym) {
                symbols.push(sym);
            }
        }
        if !(1..=MAX_SYMBOLS).contains(&self.timeline_symbols) {
            anyhow::bail!("--timeline-symbols: from 1 to {MAX_SYMBOLS}");
        }
        if !(2..=MAX_BUCKETS).contains(&self.timeline_buckets) {
            anyhow::bail!("--timeline-buckets: from 2 to {MAX_BUCKETS}");
        }
        if self.timeline_bucket_ms == 0 || self.timeline_bucket_ms > 86_400_000 {
            anyhow::bail!("--timeline-bucket-ms: from 1 to 86400000 (a day)");
        }
        Ok(TimelineOptions {
            buckets: self.timeline_buckets,
            min_width_ns: crate::feed::settings::ms_to_ns(self.timeline_bucket_ms),
            symbols,
            busiest: self.timeline_symbols,
            // Every symbol has its row from its first update while there
            // are at most CANDIDATES of them; beyond, Space-Saving keeps
            // every symbol with more than 1/CANDIDATES of the updates.
            candidates: (16 * self.timeline_symbols).max(CANDIDATES),
            max_lines: 16,
        })
    }
}

/// Symbols tracked (each with its row of buckets) while the busiest are
/// looked for: about 1.3 KiB each with 600 buckets.
pub const CANDIDATES: usize = 8192;

/// Destinations remembered (line or none); beyond, looked up each time.
const MAX_DESTINATIONS: usize = 4096;

/// The replay's hook: feeds the model after each datagram and each
/// advance of the clock, then draws it.
pub struct Recorder {
    pub model: Timeline,
    out: PathBuf,
    format: Format,
    lines: HashMap<SocketAddrV4, Option<(usize, usize)>>,
    /// Packets of each (feed, line) last seen.
    line_seen: Vec<Vec<u64>>,
}

impl Recorder {
    /// `None` without `--timeline`. Checks the options and the output's
    /// format before anything is replayed.
    pub fn from_args(args: &TimelineArgs) -> anyhow::Result<Option<Recorder>> {
        let Some(out) = &args.timeline else {
            return Ok(None);
        };
        let format = Format::of(out)?;
        Ok(Some(Recorder::new(args.options()?, out.clone(), format)))
    }

    pub fn new(opts: TimelineOptions, out: PathBuf, format: Format) -> Recorder {
        Recorder {
            model: Timeline::new(opts),
            out,
            format,
            lines: HashMap::new(),
            line_seen: Vec::new(),
        }
    }

    /// Turns on the feeds' notes of changed symbols.
    pub fn attach(&mut self, feeds: &mut [ReplayFeed]) {
        for (fi, f) in feeds.iter_mut().enumerate() {
            f.feed.publisher_mut().enable();
            self.model.name_feed(fi, &f.name);
        }
    }

    /// After `Replay::on_datagram` of a datagram to `dst` stamped `ts`.
    pub fn after_datagram(&mut self, feeds: &mut [ReplayFeed], dst: SocketAddrV4, ts: i64) {
        self.moment(feeds, ts);
        if let Some((fi, li)) = self.line_of(feeds, dst) {
            let now = feeds[fi]
                .feed
                .counters()
                .lines
                .get(li)
                .map_or(0, |l| l.packets);
            if self.line_seen.len() <= fi {
                self.line_seen.resize(fi + 1, Vec::new());
            }
            let seen = &mut self.line_seen[fi];
            if seen.len() <= li {
                seen.resize(li + 1, 0);
            }
            let n = now.saturating_sub(seen[li]);
            seen[li] = now;
            if n > 0 {
                let name = || line_name(&feeds[fi], li);
                self.model.line_packets(fi, li, &name, n);
            }
        }
    }

    /// After `Replay::advance(now)`.
    pub fn after_advance(&mut self, feeds: &mut [ReplayFeed], now: i64) {
        self.moment(feeds, now);
    }

    fn line_of(&mut self, feeds: &[ReplayFeed], dst: SocketAddrV4) -> Option<(usize, usize)> {
        if let Some(&l) = self.lines.get(&dst) {
            return l;
        }
        let found = feeds
            .iter()
            .enumerate()
            .find_map(|(fi, f)| f.lines.iter().position(|l| l.dst == dst).map(|li| (fi, li)));
        // A destination that is no line yet may become one (discovered
        // lines): only found ones are kept.
        if found.is_some() && self.lines.len() < MAX_DESTINATIONS {
            self.lines.insert(dst, found);
        }
        found
    }

    /// One moment: the feeds' changes since the previous one.
    fn moment(&mut self, feeds: &mut [ReplayFeed], ts: i64) -> i64 {
        let m = &mut self.model;
        let t = m.begin(ts);
        let mut all = false;
        for (fi, f) in feeds.iter().enumerate() {
            all |= f.feed.publisher().overflowed() || m.feed_changes(fi, f.feed.feed_view(), t);
        }
        for f in feeds.iter() {
            for &s in f.feed.publisher().symbols() {
                if let Tracked::Row(row) = m.update(s, t) {
                    if !all {
                        m.judge_new(row, lookup(feeds, s), t);
                    }
                }
            }
        }
        if all {
            for row in 0..m.rows.len() {
                let s = m.rows[row].symbol;
                m.judge_new(row, lookup(feeds, s), t);
            }
        }
        for (fi, f) in feeds.iter_mut().enumerate() {
            m.feed_counts(fi, &event_counts(f.feed.counters()));
            m.set_feed_view(fi, f.feed.feed_view());
            f.feed.publisher_mut().clear();
        }
        t
    }

    /// Closes the model at the capture's end (or the last check, if
    /// later), draws it into the output file. Returns what the picture
    /// left out, for stderr.
    pub fn finish(
        mut self,
        feeds: &[ReplayFeed],
        captures: &[std::path::PathBuf],
        sum: &StreamSummary,
    ) -> anyhow::Result<String> {
        let end = sum.last_ts.unwrap_or(i64::MIN).max(self.model.clock());
        self.model.finish(end);
        let meta = render::Meta {
            capture: captures
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            symbols_known: feeds.iter().map(|f| f.feed.symbol_count() as u64).sum(),
            lines_total: feeds.iter().map(|f| f.lines.len()).sum(),
            datagrams: sum.released,
        };
        let note = render::left_out(&self.model, &meta);
        let bytes = match self.format {
            Format::Svg => render::svg(&self.model, &meta)?.into_bytes(),
            Format::Html => render::html(&self.model, &meta)?.into_bytes(),
            Format::Png => render::png(&self.model, &meta)?,
        };
        std::fs::write(&self.out, bytes)
            .with_context(|| format!("writing the timeline {}", self.out.display()))?;
        Ok(note)
    }
}

fn line_name(f: &ReplayFeed, li: usize) -> String {
    match f.lines.get(li) {
        Some(l) => match l.source {
            Some(s) => format!("{} {} from {s}", f.name, l.dst),
            None => format!("{} {}", f.name, l.dst),
        },
        None => format!("{} line {li}", f.name),
    }
}

/// The feed whose view of the symbol the timeline charts: the first feed
/// where it has a quote, else the first that knows it. (A check combines
/// every feed that knows the symbol, gate.md "One symbol on several
/// feeds"; the timeline charts one feed's view.)
fn lookup(feeds: &[ReplayFeed], s: Symbol) -> Option<(usize, SymbolView, FeedView, Thresholds)> {
    let mut known = None;
    for (fi, f) in feeds.iter().enumerate() {
        if let Some((_, v)) = f.feed.symbol_view(s) {
            let found = (fi, *v, *f.feed.feed_view(), Thresholds::of(v));
            if v.has_quote() {
                return Some(found);
            }
            if known.is_none() {
                known = Some(found);
            }
        }
    }
    known
}

/// The feed's counters of the events drawn, in `Event::ALL` order.
pub fn event_counts(c: &FeedCounters) -> EventCounts {
    [
        c.channel_gaps,
        c.channel_messages_lost,
        c.recovery.holes_opened,
        c.recovery.holes_filled,
        c.recovery.holes_lost,
        c.recovery.requests_sent,
        c.snapshots_applied + c.recovery.snapshots_applied,
        c.session_changes,
        c.sessions_ended,
    ]
}
