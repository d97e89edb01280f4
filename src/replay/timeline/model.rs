//! The timeline's model, sans-I/O: time buckets of a fixed number that
//! double their width (merging pairwise) when the capture outlasts them,
//! so memory does not grow with the capture's length; per bucket and
//! symbol the worst verdict the gate would have given; per bucket and feed
//! the events (gaps, holes, re-requests, snapshots, sessions) and the
//! clock offset; per bucket and line the packets. The symbols drawn are
//! chosen, or the busiest found with a Space-Saving counter of fixed
//! capacity, so memory does not grow with the number of symbols either.
//!
//! The verdict between two events changes only with time, and only
//! towards worse (silence and source age grow): so the worst of a bucket
//! is seen by judging each tracked symbol just before and just after each
//! change of its state (or its feed's), and at each bucket's end.

use std::collections::HashMap;

use crate::feed::check::verdict_for;
use crate::feed::verdict::{
    Thresholds, Verdict, R_HALTED, R_NO_DATA, R_STALE_AT_SOURCE, R_STALE_QUOTE, R_SUSPECT,
    R_UNKNOWN_SYMBOL,
};
use crate::feed::view::{
    FeedView, Publish, SuspectCause, SymbolView, FEED_CHANNEL_ALIVE, FEED_CHANNEL_SOURCE_TIME,
    FEED_LIVENESS_CHANNEL,
};
use crate::wire::Symbol;

/// What a bucket of a symbol's row shows: the verdict's worst reason, the
/// suspect ones by cause. Ordered from best to worst: a bucket keeps the
/// greatest it saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Category {
    Ok = 0,
    /// `unknown_symbol` or `no_data`: not known yet, or no quote yet.
    NoData,
    StaleAtSource,
    StaleQuote,
    Halted,
    Recovering,
    SessionChange,
    NoSnapshot,
    SeqAnomaly,
    Gap,
    ChannelGap,
    SessionEnded,
}

pub const CATEGORY_COUNT: usize = 12;

impl Category {
    pub const ALL: [Category; CATEGORY_COUNT] = [
        Category::Ok,
        Category::NoData,
        Category::StaleAtSource,
        Category::StaleQuote,
        Category::Halted,
        Category::Recovering,
        Category::SessionChange,
        Category::NoSnapshot,
        Category::SeqAnomaly,
        Category::Gap,
        Category::ChannelGap,
        Category::SessionEnded,
    ];

    /// The category of one verdict: its worst reason (a suspect verdict
    /// by its cause).
    pub fn of(v: &Verdict) -> Category {
        if v.reasons & R_SUSPECT != 0 {
            match v.cause {
                SuspectCause::Recovering => Category::Recovering,
                SuspectCause::SessionChange => Category::SessionChange,
                SuspectCause::NoSnapshot => Category::NoSnapshot,
                SuspectCause::SeqAnomaly => Category::SeqAnomaly,
                SuspectCause::Gap => Category::Gap,
                SuspectCause::ChannelGap => Category::ChannelGap,
                SuspectCause::SessionEnded | SuspectCause::None => Category::SessionEnded,
            }
        } else if v.reasons & R_HALTED != 0 {
            Category::Halted
        } else if v.reasons & R_STALE_QUOTE != 0 {
            Category::StaleQuote
        } else if v.reasons & R_STALE_AT_SOURCE != 0 {
            Category::StaleAtSource
        } else if v.reasons & (R_NO_DATA | R_UNKNOWN_SYMBOL) != 0 {
            Category::NoData
        } else {
            Category::Ok
        }
    }

    /// The name of the answer's reason (gate.md), `suspect=<cause>` for
    /// the suspect ones.
    pub fn name(self) -> &'static str {
        match self {
            Category::Ok => "ok",
            Category::NoData => "no_data",
            Category::StaleAtSource => "stale_at_source",
            Category::StaleQuote => "stale_quote",
            Category::Halted => "halted",
            Category::Recovering => "suspect=recovering",
            Category::SessionChange => "suspect=session_change",
            Category::NoSnapshot => "suspect=no_snapshot",
            Category::SeqAnomaly => "suspect=seq_anomaly",
            Category::Gap => "suspect=gap",
            Category::ChannelGap => "suspect=channel_gap",
            Category::SessionEnded => "suspect=session_ended",
        }
    }

    fn from_index(i: u16) -> Category {
        Category::ALL[i as usize]
    }
}

/// One bucket of a symbol's row: the worst category seen and the set of
/// all seen, in 16 bits (bits 0-11 the set, 12-15 the worst plus one; 0:
/// no sample, the symbol was not tracked then).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell(u16);

impl Cell {
    pub fn add(&mut self, c: Category) {
        let worst = (self.0 >> 12).max(c as u16 + 1);
        self.0 = (self.0 & 0x0fff) | 1 << (c as u16) | worst << 12;
    }

    pub fn merge(self, other: Cell) -> Cell {
        let worst = (self.0 >> 12).max(other.0 >> 12);
        Cell(((self.0 | other.0) & 0x0fff) | worst << 12)
    }

    /// `None`: no sample (not tracked during the bucket).
    pub fn worst(self) -> Option<Category> {
        match self.0 >> 12 {
            0 => None,
            w => Some(Category::from_index(w - 1)),
        }
    }

    pub fn seen(self, c: Category) -> bool {
        self.0 & 1 << (c as u16) != 0
    }
}

/// Feed events counted per bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// C3: channel gaps declared.
    Gap,
    /// C3: messages lost by those gaps.
    MessagesLost,
    /// R1: holes opened (a datagram beyond the next expected one, held).
    HoleOpened,
    /// Holes closed without loss.
    HoleFilled,
    /// R2: holes declared lost.
    HoleLost,
    /// R4: re-requests.
    Rerequest,
    /// S8 snapshot messages applied and R5 snapshots applied.
    Snapshot,
    /// C5.
    SessionChange,
    /// C6.
    SessionEnd,
}

pub const EVENT_COUNT: usize = 9;

impl Event {
    pub const ALL: [Event; EVENT_COUNT] = [
        Event::Gap,
        Event::MessagesLost,
        Event::HoleOpened,
        Event::HoleFilled,
        Event::HoleLost,
        Event::Rerequest,
        Event::Snapshot,
        Event::SessionChange,
        Event::SessionEnd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Event::Gap => "channel gaps",
            Event::MessagesLost => "messages lost",
            Event::HoleOpened => "holes opened",
            Event::HoleFilled => "holes filled",
            Event::HoleLost => "holes declared lost",
            Event::Rerequest => "re-requests",
            Event::Snapshot => "snapshots",
            Event::SessionChange => "session changes",
            Event::SessionEnd => "session ends",
        }
    }
}

/// A feed's event counters at one moment, in `Event::ALL` order
/// (cumulative: the model counts the differences).
pub type EventCounts = [u64; EVENT_COUNT];

/// The model's sizes.
#[derive(Clone, Debug)]
pub struct TimelineOptions {
    /// Most buckets; when the capture outlasts them their width doubles.
    pub buckets: usize,
    /// The first (narrowest) bucket width, ns.
    pub min_width_ns: i64,
    /// The symbols to draw; empty: the busiest `busiest`.
    pub symbols: Vec<Symbol>,
    pub busiest: usize,
    /// Symbols the busiest are looked for among (Space-Saving counters,
    /// each with its row): at least `busiest`.
    pub candidates: usize,
    /// Lines drawn each on their own; further lines are summed into one.
    pub max_lines: usize,
}

impl Default for TimelineOptions {
    fn default() -> TimelineOptions {
        TimelineOptions {
            buckets: 600,
            min_width_ns: 1_000_000,
            symbols: Vec::new(),
            busiest: 12,
            candidates: 256,
            max_lines: 16,
        }
    }
}

/// The bucket geometry: bucket `i` covers `[origin + i*width,
/// origin + (i+1)*width)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub origin: i64,
    pub width: i64,
    /// Buckets in use (the last one is the current one).
    pub len: usize,
}

impl Grid {
    pub fn start(&self, i: usize) -> i64 {
        self.origin
            .saturating_add((i as i64).saturating_mul(self.width))
    }

    pub fn end(&self, i: usize) -> i64 {
        self.start(i + 1)
    }

    fn index(&self, t: i64) -> u64 {
        (t.saturating_sub(self.origin) / self.width) as u64
    }
}

/// One symbol's row.
#[derive(Clone, Debug)]
pub struct Row {
    pub symbol: Symbol,
    /// Judged from this time on (earlier buckets: not tracked).
    pub since: i64,
    pub cells: Vec<Cell>,
    /// Updates of the symbol counted (Space-Saving: an over-estimate by
    /// at most `error`).
    pub count: u64,
    pub error: u64,
    /// The symbol's state as last judged: its feed, view and thresholds.
    last: Option<(usize, SymbolView, Thresholds)>,
}

impl Row {
    fn new(symbol: Symbol, since: i64, buckets: usize) -> Row {
        Row {
            symbol,
            since,
            cells: Vec::with_capacity(buckets),
            count: 0,
            error: 0,
            last: None,
        }
    }

    fn put(&mut self, bucket: usize, c: Category) {
        if self.cells.len() <= bucket {
            self.cells.resize(bucket + 1, Cell::default());
        }
        self.cells[bucket].add(c);
    }

    /// The worst category of the bucket holding `t`, if judged then.
    pub fn at(&self, grid: &Grid, t: i64) -> Option<Category> {
        if t < grid.origin {
            return None;
        }
        let i = grid.index(t) as usize;
        self.cells.get(i).and_then(|c| c.worst())
    }
}

/// One feed's series.
#[derive(Clone, Debug)]
pub struct FeedSeries {
    pub name: String,
    pub events: Vec<EventCounts>,
    /// Clock offset (ns) per bucket: least and greatest seen
    /// (`i64::MAX, i64::MIN` when none).
    pub offset: Vec<(i64, i64)>,
    last_counts: Option<EventCounts>,
    view: Option<FeedView>,
    /// The tightest thresholds of the feed's tracked symbols (time
    /// triggers of the channel's liveness and source time).
    min_stale_ns: i64,
    min_source_ns: i64,
}

/// One line's packets per bucket.
#[derive(Clone, Debug)]
pub struct LineSeries {
    pub name: String,
    pub packets: Vec<u64>,
}

/// How a symbol update was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracked {
    /// Its row (index into `rows`).
    Row(usize),
    /// Not among the rows.
    No,
}

/// The model. Feed it in time order: `begin(t)` once per moment, then the
/// feeds' views, symbol updates and counters at that moment.
#[derive(Clone, Debug)]
pub struct Timeline {
    opts: TimelineOptions,
    grid: Option<Grid>,
    clock: i64,
    pub rows: Vec<Row>,
    /// Space-Saving: symbol to row (auto mode), or the chosen symbols.
    by_symbol: HashMap<Symbol, usize>,
    /// Space-Saving replacements so far (0: every symbol ever updated has
    /// its row since it first was).
    pub evictions: u64,
    /// Symbol updates taken in (all symbols).
    pub updates: u64,
    pub feeds: Vec<FeedSeries>,
    pub lines: Vec<LineSeries>,
    line_index: HashMap<(usize, usize), usize>,
    /// Packets of the lines beyond `max_lines`, summed.
    pub other_lines: Vec<u64>,
    /// Samples taken before the first bucket (time going backwards) are
    /// counted at the clock.
    pub clamped: u64,
    /// Bucket doublings so far.
    pub merges: u32,
}

impl Timeline {
    pub fn new(mut opts: TimelineOptions) -> Timeline {
        opts.buckets = opts.buckets.max(2);
        opts.min_width_ns = opts.min_width_ns.max(1);
        opts.candidates = opts.candidates.max(opts.busiest).max(1);
        let mut by_symbol = HashMap::new();
        let rows = opts
            .symbols
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                by_symbol.insert(s, i);
                Row::new(s, i64::MIN, 0)
            })
            .collect();
        Timeline {
            opts,
            grid: None,
            clock: i64::MIN,
            rows,
            by_symbol,
            evictions: 0,
            updates: 0,
            feeds: Vec::new(),
            lines: Vec::new(),
            line_index: HashMap::new(),
            other_lines: Vec::new(),
            clamped: 0,
            merges: 0,
        }
    }

    pub fn options(&self) -> &TimelineOptions {
        &self.opts
    }

    pub fn grid(&self) -> Option<&Grid> {
        self.grid.as_ref()
    }

    /// Whether the rows are the chosen symbols (not the busiest).
    pub fn chosen(&self) -> bool {
        !self.opts.symbols.is_empty()
    }

    /// Bytes the model holds, by its own accounting (capacities, not
    /// lengths: what is allocated).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let rows: usize = self
            .rows
            .iter()
            .map(|r| size_of::<Row>() + r.cells.capacity() * size_of::<Cell>())
            .sum();
        let feeds: usize = self
            .feeds
            .iter()
            .map(|f| {
                size_of::<FeedSeries>()
                    + f.name.capacity()
                    + f.events.capacity() * size_of::<EventCounts>()
                    + f.offset.capacity() * size_of::<(i64, i64)>()
            })
            .sum();
        let lines: usize = self
            .lines
            .iter()
            .map(|l| size_of::<LineSeries>() + l.name.capacity() + l.packets.capacity() * 8)
            .sum();
        // a HashMap entry: key, value and a control byte, over capacity
        let map = self.by_symbol.capacity() * (size_of::<(Symbol, usize)>() + 1)
            + self.line_index.capacity() * (size_of::<((usize, usize), usize)>() + 1);
        size_of::<Timeline>()
            + rows
            + self.rows.capacity().saturating_sub(self.rows.len()) * size_of::<Row>()
            + feeds
            + lines
            + self.other_lines.capacity() * 8
            + map
    }

    /// The most `memory_bytes` can be with these options and `feeds`
    /// feeds, whatever the capture (a bound the tests hold it to).
    pub fn memory_bound(&self, feeds: usize) -> usize {
        use std::mem::size_of;
        let b = self.opts.buckets;
        let rows = self.opts.candidates.max(self.opts.symbols.len());
        // Vec doubling and HashMap load factor: at most twice and 8/7.
        2 * (size_of::<Timeline>()
            + rows * (size_of::<Row>() + b * size_of::<Cell>())
            + feeds * (size_of::<FeedSeries>() + 64 + b * (size_of::<EventCounts>() + 16))
            + self.opts.max_lines * (size_of::<LineSeries>() + 64 + b * 8)
            + b * 8
            + 2 * rows * (size_of::<(Symbol, usize)>() + 1)
            + 2 * self.opts.max_lines * (size_of::<((usize, usize), usize)>() + 1))
    }

    /// The model's time: the latest `begin`.
    pub fn clock(&self) -> i64 {
        self.clock
    }

    /// Time reaches `t` (a datagram's stamp, or a check's). Buckets passed
    /// since the previous moment are closed: each tracked symbol judged at
    /// each one's end, its state unchanged meanwhile. Returns the time the
    /// moment is counted at (never before the previous one).
    pub fn begin(&mut self, t: i64) -> i64 {
        let grid = match self.grid {
            None => {
                self.clock = t;
                let g = Grid {
                    origin: t,
                    width: self.opts.min_width_ns,
                    len: 1,
                };
                self.grid = Some(g);
                return t;
            }
            Some(g) => g,
        };
        let t = if t < self.clock {
            self.clamped += 1;
            self.clock
        } else {
            t
        };
        let mut idx = grid.index(t);
        while idx >= self.opts.buckets as u64 {
            self.double();
            idx = self.grid.as_ref().map_or(0, |g| g.index(t));
        }
        let idx = idx as usize;
        let cur = self.grid.map_or(0, |g| g.len - 1);
        for b in cur..idx {
            let end = self.grid.map_or(t, |g| g.end(b)) - 1;
            for r in 0..self.rows.len() {
                self.judge_last(r, b, end);
            }
        }
        if let Some(g) = &mut self.grid {
            g.len = g.len.max(idx + 1);
        }
        self.clock = t;
        t
    }

    /// Width doubles: neighbouring buckets merge (the worst verdict and
    /// every category seen, events and packets summed, offsets' extremes).
    fn double(&mut self) {
        let Some(g) = &mut self.grid else { return };
        g.width = g.width.saturating_mul(2);
        g.len = g.len.div_ceil(2);
        self.merges += 1;
        for r in &mut self.rows {
            merge_pairs(&mut r.cells, |a, b| a.merge(b));
        }
        for f in &mut self.feeds {
            merge_pairs(&mut f.events, |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x += y;
                }
                a
            });
            merge_pairs(&mut f.offset, |a, b| (a.0.min(b.0), a.1.max(b.1)));
        }
        for l in &mut self.lines {
            merge_pairs(&mut l.packets, |a, b| a + b);
        }
        merge_pairs(&mut self.other_lines, |a, b| a + b);
    }

    fn bucket(&self) -> usize {
        self.grid.map_or(0, |g| g.len - 1)
    }

    /// Judges row `r` with its last state (and its feed's view as the
    /// model has it) at `now`, into bucket `b`.
    fn judge_last(&mut self, r: usize, b: usize, now: i64) {
        let row = &self.rows[r];
        // A row taken over knows nothing of its symbol before its update.
        if now < row.since || (row.last.is_none() && row.since != i64::MIN) {
            return;
        }
        let found = row.last.map(|(fi, view, t)| {
            let fv = self.feeds.get(fi).and_then(|f| f.view).unwrap_or_default();
            (view, fv, t)
        });
        let c = category(found, now);
        self.rows[r].put(b, c);
    }

    fn feed(&mut self, fi: usize) -> &mut FeedSeries {
        while self.feeds.len() <= fi {
            self.feeds.push(FeedSeries {
                name: format!("feed {}", self.feeds.len()),
                events: Vec::new(),
                offset: Vec::new(),
                last_counts: None,
                view: None,
                min_stale_ns: i64::MAX,
                min_source_ns: i64::MAX,
            });
        }
        &mut self.feeds[fi]
    }

    pub fn name_feed(&mut self, fi: usize, name: &str) {
        self.feed(fi).name = name.to_string();
    }

    /// Whether every tracked symbol must be judged again at `t` because
    /// of feed `fi`'s new view: an epoch, flag or recovery state changed,
    /// or (feeds whose channel vouches for liveness or source time) the
    /// channel was silent long enough that the moment just before `t`
    /// may have been stale.
    pub fn feed_changes(&self, fi: usize, new: &FeedView, t: i64) -> bool {
        let Some(f) = self.feeds.get(fi) else {
            return true;
        };
        let Some(old) = f.view else { return true };
        if (old.gap_epoch, old.session_epoch, old.flags, old.recovery)
            != (new.gap_epoch, new.session_epoch, new.flags, new.recovery)
        {
            return true;
        }
        let channel = FEED_LIVENESS_CHANNEL | FEED_CHANNEL_ALIVE;
        if old.flags & channel == channel && t.saturating_sub(old.channel_alive_at) > f.min_stale_ns
        {
            return true;
        }
        old.flags & FEED_CHANNEL_SOURCE_TIME != 0
            && old.channel_source_ts != i64::MIN
            && t.saturating_sub(old.channel_source_ts)
                .saturating_sub(old.offset_ns)
                > f.min_source_ns
    }

    /// Every tracked symbol judged just before `t` (its last state).
    pub fn judge_all_before(&mut self, t: i64) {
        let b = self.bucket();
        for r in 0..self.rows.len() {
            self.judge_last(r, b, t);
        }
    }

    /// Row `r`'s symbol has a new state at `t` (`None`: unknown to every
    /// feed): judged just before with its old state, then with the new.
    pub fn judge_new(
        &mut self,
        r: usize,
        found: Option<(usize, SymbolView, FeedView, Thresholds)>,
        t: i64,
    ) {
        let b = self.bucket();
        self.judge_last(r, b, t);
        let c = category(found.map(|(_, v, f, th)| (v, f, th)), t);
        let row = &mut self.rows[r];
        if t >= row.since {
            row.put(b, c);
        }
        row.last = found.map(|(fi, v, _, th)| (fi, v, th));
        if let Some((fi, _, _, th)) = found {
            let f = self.feed(fi);
            f.min_stale_ns = f.min_stale_ns.min(th.stale_ns);
            f.min_source_ns = f.min_source_ns.min(th.source_max_age_ns);
        }
    }

    /// Feed `fi`'s view after the moment (every judging of the moment
    /// done), its clock offset noted.
    pub fn set_feed_view(&mut self, fi: usize, view: &FeedView) {
        let b = self.bucket();
        let f = self.feed(fi);
        f.view = Some(*view);
        if f.offset.len() <= b {
            f.offset.resize(b + 1, (i64::MAX, i64::MIN));
        }
        let o = &mut f.offset[b];
        *o = (o.0.min(view.offset_ns), o.1.max(view.offset_ns));
    }

    /// Feed `fi`'s event counters now (cumulative); the increase since
    /// the previous call goes to the current bucket.
    pub fn feed_counts(&mut self, fi: usize, counts: &EventCounts) {
        let b = self.bucket();
        let f = self.feed(fi);
        let last = f.last_counts.replace(*counts).unwrap_or([0; EVENT_COUNT]);
        if last == *counts {
            return;
        }
        if f.events.len() <= b {
            f.events.resize(b + 1, [0; EVENT_COUNT]);
        }
        for ((e, &n), &was) in f.events[b].iter_mut().zip(counts).zip(&last) {
            *e += n.saturating_sub(was);
        }
    }

    /// `packets` more on line `line` of feed `fi` (named `name` when
    /// first seen) in the current bucket.
    pub fn line_packets(&mut self, fi: usize, line: usize, name: &dyn Fn() -> String, n: u64) {
        let b = self.bucket();
        let series = match self.line_index.get(&(fi, line)) {
            Some(&i) => &mut self.lines[i].packets,
            None if self.lines.len() < self.opts.max_lines => {
                self.line_index.insert((fi, line), self.lines.len());
                self.lines.push(LineSeries {
                    name: name(),
                    packets: Vec::new(),
                });
                &mut self.lines.last_mut().expect("just pushed").packets
            }
            None => &mut self.other_lines,
        };
        if series.len() <= b {
            series.resize(b + 1, 0);
        }
        series[b] += n;
    }

    /// A symbol's state changed (one update). Chosen rows: its row if it
    /// is one. Otherwise Space-Saving: its counter goes up, or it takes
    /// the place of the least counted when every row is taken (that row
    /// starts again from `t`).
    pub fn update(&mut self, symbol: Symbol, t: i64) -> Tracked {
        self.updates += 1;
        if let Some(&r) = self.by_symbol.get(&symbol) {
            self.rows[r].count += 1;
            return Tracked::Row(r);
        }
        if self.chosen() {
            return Tracked::No;
        }
        if self.rows.len() < self.opts.candidates {
            // Never evicted: no update of the symbol came before this one,
            // so its row is whole from the start (no data before).
            let since = if self.evictions == 0 { i64::MIN } else { t };
            let mut row = Row::new(symbol, since, self.opts.buckets);
            row.count = 1;
            if since == i64::MIN {
                let b = self.bucket();
                for i in 0..b {
                    row.put(i, Category::NoData);
                }
            }
            self.by_symbol.insert(symbol, self.rows.len());
            self.rows.push(row);
            return Tracked::Row(self.rows.len() - 1);
        }
        let (r, min) = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| (i, row.count))
            .min_by_key(|&(_, c)| c)
            .expect("candidates >= 1");
        self.evictions += 1;
        let old = self.rows[r].symbol;
        self.by_symbol.remove(&old);
        self.by_symbol.insert(symbol, r);
        let row = &mut self.rows[r];
        row.symbol = symbol;
        row.since = t;
        row.cells.iter_mut().for_each(|c| *c = Cell::default());
        row.count = min + 1;
        row.error = min;
        row.last = None;
        Tracked::Row(r)
    }

    /// The rows to draw: the chosen symbols in their order, or the
    /// busiest `busiest` by count (ties by symbol).
    pub fn drawn(&self) -> Vec<&Row> {
        let mut rows: Vec<&Row> = self.rows.iter().collect();
        if !self.chosen() {
            rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.symbol.cmp(&b.symbol)));
            rows.truncate(self.opts.busiest);
        }
        rows
    }

    /// Closes the last bucket at `end` (the capture's last time or the
    /// last check): every tracked symbol judged then.
    pub fn finish(&mut self, end: i64) {
        if self.grid.is_none() {
            return;
        }
        let t = self.begin(end);
        self.judge_all_before(t);
    }
}

/// The category of a verdict judged as the gate does, with the symbol's
/// configured thresholds.
pub fn category(found: Option<(SymbolView, FeedView, Thresholds)>, now: i64) -> Category {
    match verdict_for(found, None, None, now) {
        Ok(v) => Category::of(&v),
        // No request threshold: cannot be looser than configured.
        Err(_) => Category::NoData,
    }
}

fn merge_pairs<T: Copy>(v: &mut Vec<T>, f: impl Fn(T, T) -> T) {
    let n = v.len();
    for i in 0..n.div_ceil(2) {
        v[i] = if 2 * i + 1 < n {
            f(v[2 * i], v[2 * i + 1])
        } else {
            v[2 * i]
        };
    }
    v.truncate(n.div_ceil(2));
}

/// Most symbol updates noted per datagram; beyond, every tracked symbol
/// is judged again (`Touches::overflowed`).
pub const TOUCH_CAP: usize = 4096;

/// A feed's publisher that notes which symbols changed, when on (replay
/// with a timeline); off, it does nothing but test a flag.
#[derive(Clone, Debug, Default)]
pub struct Touches {
    on: bool,
    overflow: bool,
    symbols: Vec<Symbol>,
}

impl Touches {
    pub fn enable(&mut self) {
        self.on = true;
        self.symbols.reserve_exact(TOUCH_CAP);
    }

    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }

    /// More symbols changed since the last `clear` than were noted.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    pub fn clear(&mut self) {
        self.symbols.clear();
        self.overflow = false;
    }
}

impl Publish for Touches {
    #[inline(always)]
    fn publish_symbol(&mut self, _index: u32, symbol: Symbol, _view: &SymbolView) {
        if self.on {
            if self.symbols.len() < TOUCH_CAP {
                self.symbols.push(symbol);
            } else {
                self.overflow = true;
            }
        }
    }

    #[inline(always)]
    fn publish_feed(&mut self, _view: &FeedView) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::view::{SYM_HALTED, SYM_HAS_QUOTE, SYM_HAS_SEQ};

    const MS: i64 = 1_000_000;

    fn sym(s: &str) -> Symbol {
        Symbol::parse(s).unwrap()
    }

    fn quoted(alive: i64) -> SymbolView {
        SymbolView {
            seq: 1,
            alive_at: alive,
            source_ts: alive,
            flags: SYM_HAS_QUOTE | SYM_HAS_SEQ,
            stale_ms: 500,
            source_max_age_ms: 2000,
            ..SymbolView::default()
        }
    }

    fn found(v: SymbolView) -> Option<(usize, SymbolView, FeedView, Thresholds)> {
        Some((0, v, FeedView::default(), Thresholds::of(&v)))
    }

    fn opts(buckets: usize, width_ms: i64, symbols: &[&str]) -> TimelineOptions {
        TimelineOptions {
            buckets,
            min_width_ns: width_ms * MS,
            symbols: symbols.iter().map(|s| sym(s)).collect(),
            ..TimelineOptions::default()
        }
    }

    /// One update of row 0's symbol at `t`, quoted then.
    fn quote_at(tl: &mut Timeline, s: &str, t: i64) {
        let t = tl.begin(t);
        if let Tracked::Row(r) = tl.update(sym(s), t) {
            tl.judge_new(r, found(quoted(t)), t);
        }
        tl.set_feed_view(0, &FeedView::default());
    }

    #[test]
    fn cells_keep_the_worst_and_everything_seen() {
        let mut a = Cell::default();
        assert_eq!(a.worst(), None);
        a.add(Category::Ok);
        a.add(Category::Halted);
        a.add(Category::StaleQuote);
        assert_eq!(a.worst(), Some(Category::Halted));
        let mut b = Cell::default();
        b.add(Category::Gap);
        let m = a.merge(b);
        assert_eq!(m.worst(), Some(Category::Gap));
        for c in [
            Category::Ok,
            Category::Halted,
            Category::StaleQuote,
            Category::Gap,
        ] {
            assert!(m.seen(c), "{c:?}");
        }
        assert!(!m.seen(Category::NoData));
        // Merging with an empty bucket changes nothing.
        assert_eq!(a.merge(Cell::default()), a);
        assert_eq!(Cell::default().merge(a), a);
    }

    #[test]
    fn every_category_round_trips_through_a_cell() {
        for c in Category::ALL {
            let mut cell = Cell::default();
            cell.add(c);
            assert_eq!(cell.worst(), Some(c));
            let mut ok = Cell::default();
            ok.add(Category::Ok);
            assert_eq!(ok.merge(cell).worst(), Some(c));
        }
    }

    #[test]
    fn merging_buckets_keeps_the_worst_verdict() {
        // 4 buckets of 100 ms; a symbol quoted every 100 ms but silent for
        // 700 ms in the middle: stale at the end of that silence.
        let mut tl = Timeline::new(opts(4, 100, &["AAA"]));
        for t in [0, 100, 200] {
            quote_at(&mut tl, "AAA", t * MS);
        }
        quote_at(&mut tl, "AAA", 900 * MS);
        // 900 ms did not fit 4 buckets of 100 ms: two doublings (400 ms).
        let g = *tl.grid().unwrap();
        assert_eq!(g.width, 400 * MS);
        assert_eq!(tl.merges, 2);
        let row = &tl.rows[0];
        // [0, 400): no data just before the first quote, then OK; then
        // stale (silence from 200 ms passes 500 ms at 700 ms, in
        // [400, 800)).
        assert_eq!(row.at(&g, 0), Some(Category::NoData));
        assert!(row.cells[0].seen(Category::Ok));
        assert!(!row.cells[0].seen(Category::StaleQuote));
        assert_eq!(row.at(&g, 500 * MS), Some(Category::StaleQuote));
        assert!(row.cells[1].seen(Category::StaleQuote));
    }

    #[test]
    fn staleness_between_packets_is_shown_at_bucket_ends() {
        // 1 s buckets; quoted at 0.1 s and next at 5.5 s: buckets 1..4
        // have no datagram of it, yet it was stale in each.
        let mut tl = Timeline::new(opts(100, 1000, &["AAA"]));
        quote_at(&mut tl, "AAA", 100 * MS);
        quote_at(&mut tl, "AAA", 5_500 * MS);
        let g = *tl.grid().unwrap();
        let row = &tl.rows[0];
        assert_eq!(row.at(&g, 100 * MS), Some(Category::StaleQuote));
        for s in 1..5 {
            assert_eq!(row.at(&g, s * 1000 * MS), Some(Category::StaleQuote), "{s}");
        }
        // The first bucket was OK before 0.6 s.
        assert!(row.cells[0].seen(Category::Ok));
        // Just before the update at 5.5 s it was stale; just after, OK.
        assert!(row.cells[5].seen(Category::StaleQuote));
        assert!(row.cells[5].seen(Category::Ok));
    }

    #[test]
    fn channel_silence_triggers_judging_every_row() {
        let mut tl = Timeline::new(opts(100, 1000, &["AAA"]));
        let fv = FeedView {
            channel_alive_at: 0,
            flags: FEED_LIVENESS_CHANNEL | FEED_CHANNEL_ALIVE,
            ..FeedView::default()
        };
        let t = tl.begin(0);
        tl.update(sym("AAA"), t);
        tl.judge_new(0, Some((0, quoted(0), fv, Thresholds::of(&quoted(0)))), t);
        tl.set_feed_view(0, &fv);
        // 200 ms later the channel's packet keeps it alive: no trigger.
        assert!(!tl.feed_changes(0, &fv, 200 * MS));
        // 600 ms later it may have been stale just before: trigger.
        assert!(tl.feed_changes(0, &fv, 600 * MS));
        let t = tl.begin(600 * MS);
        tl.judge_all_before(t);
        assert_eq!(
            tl.rows[0].at(tl.grid().unwrap(), t),
            Some(Category::StaleQuote)
        );
        // An epoch change always triggers.
        let gap = FeedView { gap_epoch: 1, ..fv };
        assert!(tl.feed_changes(0, &gap, t));
    }

    #[test]
    fn halted_outranks_stale_and_suspect_outranks_halted() {
        let mut v = quoted(0);
        v.flags |= SYM_HALTED;
        let t = Thresholds::of(&v);
        let f = FeedView::default();
        assert_eq!(category(Some((v, f, t)), 10_000 * MS), Category::Halted);
        let ended = FeedView {
            flags: crate::feed::view::FEED_ENDED,
            ..f
        };
        assert_eq!(
            category(Some((v, ended, t)), 10_000 * MS),
            Category::SessionEnded
        );
        assert_eq!(category(None, 0), Category::NoData);
        assert_eq!(
            category(Some((quoted(0), f, t)), 1_000 * MS),
            Category::StaleQuote
        );
        assert_eq!(category(Some((quoted(0), f, t)), 100 * MS), Category::Ok);
    }

    #[test]
    fn memory_is_bounded_whatever_the_length() {
        let mut tl = Timeline::new(opts(64, 1, &["AAA", "BBB"]));
        let bound = tl.memory_bound(1);
        // A week of one update a second, microsecond stamps.
        for s in 0..(7 * 24 * 3600) {
            let t = s * 1000 * MS;
            quote_at(&mut tl, if s % 2 == 0 { "AAA" } else { "BBB" }, t);
            tl.feed_counts(0, &[s as u64; EVENT_COUNT]);
            tl.line_packets(0, 0, &|| "line".to_string(), 1);
        }
        let g = tl.grid().unwrap();
        assert!(g.len <= 64, "{}", g.len);
        assert!(tl.rows.iter().all(|r| r.cells.len() <= 64));
        assert!(
            tl.memory_bytes() <= bound,
            "{} > {bound}",
            tl.memory_bytes()
        );
        // Every packet is still counted after the merges.
        let packets: u64 = tl.lines[0].packets.iter().sum();
        assert_eq!(packets, 7 * 24 * 3600);
    }

    #[test]
    fn space_saving_finds_the_busiest_among_a_million_symbols() {
        let mut tl = Timeline::new(TimelineOptions {
            buckets: 100,
            busiest: 3,
            candidates: 256,
            ..TimelineOptions::default()
        });
        let bound = tl.memory_bound(1);
        let heavy = ["HOT1", "HOT2", "HOT3"];
        let mut t = 0;
        for i in 0..1_000_000u32 {
            t += 1000;
            let t = tl.begin(t);
            // Every 20th update is of a heavy symbol (weights 3:2:1), the
            // rest of a million distinct ones.
            let s = if i % 20 == 0 {
                sym(heavy[[0, 0, 0, 1, 1, 2][(i / 20 % 6) as usize]])
            } else {
                Symbol::from_words([0x5a00_0000_0000_0000 | i as u64, 0, 0])
            };
            if let Tracked::Row(r) = tl.update(s, t) {
                tl.judge_new(r, found(quoted(t)), t);
            }
        }
        let drawn: Vec<String> = tl.drawn().iter().map(|r| r.symbol.to_string()).collect();
        assert_eq!(drawn, heavy);
        assert!(tl.rows.len() <= 256);
        assert!(tl.evictions > 900_000);
        assert!(
            tl.memory_bytes() <= bound,
            "{} > {bound}",
            tl.memory_bytes()
        );
        assert_eq!(tl.updates, 1_000_000);
    }

    #[test]
    fn a_row_taken_over_is_not_tracked_before() {
        let mut tl = Timeline::new(TimelineOptions {
            buckets: 10,
            min_width_ns: 1000 * MS,
            busiest: 1,
            candidates: 1,
            ..TimelineOptions::default()
        });
        quote_at(&mut tl, "AAA", 0);
        quote_at(&mut tl, "BBB", 3_000 * MS);
        let g = *tl.grid().unwrap();
        let row = &tl.rows[0];
        assert_eq!(row.symbol, sym("BBB"));
        assert_eq!(row.since, 3_000 * MS);
        assert_eq!(row.at(&g, 0), None);
        assert_eq!(row.at(&g, 3_000 * MS), Some(Category::Ok));
        assert_eq!((row.count, row.error), (2, 1));
    }

    #[test]
    fn touches_note_only_when_on() {
        let mut t = Touches::default();
        t.publish_symbol(0, sym("AAA"), &SymbolView::default());
        assert!(t.symbols().is_empty());
        t.enable();
        for _ in 0..TOUCH_CAP + 1 {
            t.publish_symbol(0, sym("AAA"), &SymbolView::default());
        }
        assert_eq!(t.symbols().len(), TOUCH_CAP);
        assert!(t.overflowed());
        t.clear();
        assert!(t.symbols().is_empty() && !t.overflowed());
    }
}
