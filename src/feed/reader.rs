//! The live daemon's side of the state table: the feed thread publishes
//! into a [`TablePublisher`] (the `Publish` seam of `feed::view`), and gate
//! threads read through a [`FeedReader`] (`SymbolLookup`), lock-free.
//!
//! ```text
//! let (publisher, reader) = feed::reader::feed_table(&settings);
//! let mut feed = Feed::with_publisher(settings, lines, publisher);   // feed thread
//! let gate = gate::server::Gate::new(vec![("md1".into(), reader)]);   // gate threads
//! ```

#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use super::check::SymbolLookup;
use super::engine::unit_view;
use super::table::{
    cell_reader_in, reader_in, seq_cell, seq_cell_in, stride, table, table_in, Busy, CellReader,
    CellWriter, Corrupt, Plain, TableReader, TableWriter, TooSmall, Words,
};
use super::verdict::Thresholds;
use super::view::{
    FeedView, Publish, SuspectCause, SymbolView, FEED_VIEW_WORDS, SYMBOL_VIEW_WORDS,
};
use super::FeedSettings;
use crate::wire::Symbol;

impl Plain for SymbolView {
    const WORDS: usize = SYMBOL_VIEW_WORDS;
    #[inline]
    fn to_words(&self, out: &mut [u64]) {
        out.copy_from_slice(&SymbolView::to_words(self));
    }
    #[inline]
    fn from_words(words: &[u64]) -> Self {
        let mut w = [0u64; SYMBOL_VIEW_WORDS];
        w.copy_from_slice(words);
        SymbolView::from_words(&w)
    }
}

impl Plain for FeedView {
    const WORDS: usize = FEED_VIEW_WORDS;
    #[inline]
    fn to_words(&self, out: &mut [u64]) {
        out.copy_from_slice(&FeedView::to_words(self));
    }
    #[inline]
    fn from_words(words: &[u64]) -> Self {
        let mut w = [0u64; FEED_VIEW_WORDS];
        w.copy_from_slice(words);
        FeedView::from_words(&w)
    }
}

/// Unit cells of a feed of several units (venues.md `cboe-pitch`; 256:
/// unit ids 1-255, cell 0 unused), or 0: the venue's channel count
/// (`Venue::channels`) when above 1.
pub fn units_of(settings: &FeedSettings) -> usize {
    settings.venue.kind.unit_cells()
}

/// Where a feed's unit region lies, in words from its start
/// (docs/shm-layout.md): `units` seqlock cells of the feed view's stride,
/// then from `unit_of_at` one byte per symbol slot (8 to a word, slot `s`
/// in byte `s % 8` of word `s / 8`, little-endian), each region on a
/// 64-byte boundary. `units` 0: no region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitLayout {
    pub units: usize,
    pub unit_of_at: usize,
    pub words: usize,
}

impl UnitLayout {
    pub fn of(units: usize, capacity: u32) -> UnitLayout {
        if units == 0 {
            return UnitLayout {
                units: 0,
                unit_of_at: 0,
                words: 0,
            };
        }
        let unit_of_at = (units * stride::<FeedView>()).div_ceil(8) * 8;
        let words = (unit_of_at + (capacity as usize).div_ceil(8)).div_ceil(8) * 8;
        UnitLayout {
            units,
            unit_of_at,
            words,
        }
    }
}

/// The unit cells and the per-slot unit bytes (a feed of several units).
struct Units<C> {
    cells: Vec<C>,
    unit_of: Words,
}

impl<C> Units<C> {
    /// The unit of the symbol at `slot` (0: use the feed view).
    #[inline]
    fn unit_of(&self, slot: u32) -> u8 {
        self.unit_of
            .slice()
            .get(slot as usize / 8)
            .map_or(0, |w| (w.load(Ordering::Acquire) >> (slot % 8 * 8)) as u8)
    }
}

fn units_in<C>(
    layout: UnitLayout,
    region: &Words,
    cell: impl Fn(&Words) -> Result<C, TooSmall>,
) -> Result<Option<Units<C>>, TooSmall> {
    if layout.units == 0 {
        return Ok(None);
    }
    let small = TooSmall {
        needed: layout.words,
        got: region.len(),
    };
    let s = stride::<FeedView>();
    let cells = (0..layout.units)
        .map(|u| cell(&region.range(u * s, s).ok_or(small)?))
        .collect::<Result<Vec<C>, TooSmall>>()?;
    let unit_of = region
        .range(layout.unit_of_at, layout.words - layout.unit_of_at)
        .ok_or(small)?;
    Ok(Some(Units { cells, unit_of }))
}

/// The writer half: owns the symbol table writer and the feed view cell.
/// Give it to `Feed::with_publisher`; it lives on the feed's thread.
pub struct TablePublisher {
    symbols: TableWriter<SymbolView>,
    feed: CellWriter<FeedView>,
    units: Option<Units<CellWriter<FeedView>>>,
    /// Symbols that did not fit (never happens when the table has the
    /// feed's `max_symbols` capacity, which is what `feed_table` gives).
    overflow: u64,
}

impl TablePublisher {
    pub fn symbols(&self) -> &TableWriter<SymbolView> {
        &self.symbols
    }

    /// Symbol views that could not be published (table full).
    pub fn overflow(&self) -> u64 {
        self.overflow
    }
}

impl Publish for TablePublisher {
    #[inline]
    fn publish_symbol(&mut self, index: u32, symbol: Symbol, view: &SymbolView) {
        // The feed's dense slots are assigned in creation order, as the
        // table's are: `index` is the table slot once inserted.
        if index < self.symbols.len() {
            debug_assert_eq!(self.symbols.key_at(index), Some(symbol.words()));
            self.symbols.write(index, view);
        } else if let Err(full) = self.symbols.upsert(&symbol.words(), view) {
            if self.overflow == 0 {
                tracing::error!(%symbol, error = %full, "symbol not published to the gate");
            }
            self.overflow += 1;
        }
    }

    #[inline]
    fn publish_feed(&mut self, view: &FeedView) {
        self.feed.write(view);
    }

    #[inline]
    fn prefetch_symbol(&self, index: u32) {
        // `index` is the table slot (see `publish_symbol`).
        self.symbols.prefetch(index);
    }

    #[inline]
    fn publish_unit_view(&mut self, unit: u8, view: &FeedView) {
        if let Some(cell) = self
            .units
            .as_mut()
            .and_then(|u| u.cells.get_mut(unit as usize))
        {
            cell.write(view);
        }
    }

    fn publish_symbol_unit(&mut self, index: u32, unit: u8) {
        let Some(u) = &self.units else {
            return;
        };
        let Some(word) = u.unit_of.slice().get(index as usize / 8) else {
            return;
        };
        // The only writer: a plain read-modify-write, stored whole.
        let shift = index % 8 * 8;
        let old = word.load(Ordering::Relaxed);
        let new = (old & !(0xFF << shift)) | (unit as u64) << shift;
        if new != old {
            word.store(new, Ordering::Release);
        }
    }
}

/// The reader half: cheap to clone, `Send + Sync`, never blocks the feed.
#[derive(Clone)]
pub struct FeedReader {
    symbols: TableReader<SymbolView>,
    feed: CellReader<FeedView>,
    units: Option<std::sync::Arc<Units<CellReader<FeedView>>>>,
}

impl std::fmt::Debug for FeedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedReader")
            .field("symbols", &self.symbols.len())
            .finish()
    }
}

/// A table sized for the feed (`FeedSettings::table_slots`) and its two
/// halves.
pub fn feed_table(settings: &FeedSettings) -> (TablePublisher, FeedReader) {
    let capacity = settings.table_slots().min(u32::MAX as usize - 1) as u32;
    with_units(capacity, units_of(settings))
}

/// A table for `capacity` symbols and its two halves.
pub fn with_capacity(capacity: u32) -> (TablePublisher, FeedReader) {
    with_units(capacity, 0)
}

/// A table for `capacity` symbols and `units` unit cells (`units_of`),
/// and its two halves.
pub fn with_units(capacity: u32, units: usize) -> (TablePublisher, FeedReader) {
    let (sw, sr) = table::<SymbolView>(capacity);
    let (fw, fr) = seq_cell(FeedView::default());
    let layout = UnitLayout::of(units, capacity);
    let region = Words::heap(layout.words);
    let writers = units_in(layout, &region, |w| {
        seq_cell_in(w, FeedView::default()).map(|(w, _)| w)
    })
    .expect("the heap region is sized by its layout");
    let readers = units_in(layout, &region, cell_reader_in::<FeedView>)
        .expect("the heap region is sized by its layout");
    (
        TablePublisher {
            symbols: sw,
            feed: fw,
            units: writers,
            overflow: 0,
        },
        FeedReader {
            symbols: sr,
            feed: fr,
            units: readers.map(std::sync::Arc::new),
        },
    )
}

/// A feed's table in shared words (the daemon's file, see `feed::shm`):
/// the feed view cell in `cell`, the symbol table in `table`, the unit
/// region (`UnitLayout`, empty for `units` 0) in `units_region`, all
/// zeroed.
pub fn feed_table_in(
    capacity: u32,
    cell: &Words,
    table: &Words,
    units: usize,
    units_region: &Words,
) -> Result<(TablePublisher, FeedReader), TooSmall> {
    let (sw, sr) = table_in::<SymbolView>(table, capacity)?;
    let (fw, fr) = seq_cell_in(cell, FeedView::default())?;
    let layout = UnitLayout::of(units, capacity);
    let writers = units_in(layout, units_region, |w| {
        seq_cell_in(w, FeedView::default()).map(|(w, _)| w)
    })?;
    let readers = units_in(layout, units_region, cell_reader_in::<FeedView>)?;
    Ok((
        TablePublisher {
            symbols: sw,
            feed: fw,
            units: writers,
            overflow: 0,
        },
        FeedReader {
            symbols: sr,
            feed: fr,
            units: readers.map(std::sync::Arc::new),
        },
    ))
}

/// A reader of a feed's table that another process writes (the client).
pub fn feed_reader_in(
    capacity: u32,
    cell: &Words,
    table: &Words,
    units: usize,
    units_region: &Words,
) -> Result<FeedReader, TooSmall> {
    let layout = UnitLayout::of(units, capacity);
    Ok(FeedReader {
        symbols: reader_in::<SymbolView>(table, capacity)?,
        feed: cell_reader_in::<FeedView>(cell)?,
        units: units_in(layout, units_region, cell_reader_in::<FeedView>)?.map(std::sync::Arc::new),
    })
}

/// Why a bounded lookup failed: the shared memory is not what this code
/// writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The symbol index is corrupt.
    Corrupt,
    /// A slot stayed mid-write or kept changing for every try.
    Busy,
    /// A slot holds a suspect cause code tickgate does not write (a
    /// corrupt slot): never read as "no cause".
    Cause(u8),
}

impl From<Corrupt> for ReadError {
    fn from(_: Corrupt) -> Self {
        ReadError::Corrupt
    }
}

impl From<Busy> for ReadError {
    fn from(_: Busy) -> Self {
        ReadError::Busy
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Corrupt => Corrupt.fmt(f),
            ReadError::Busy => Busy.fmt(f),
            ReadError::Cause(c) => write!(
                f,
                "a symbol slot holds suspect cause code {c}, which tickgate does not write"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// What a lookup finds: the symbol's view, its feed's view and the
/// symbol's configured thresholds.
pub type Found = (SymbolView, FeedView, Thresholds);

/// Several feeds may know a symbol: the first (in the given order) where
/// it has a quote wins, else the first that knows it (gate.md answers
/// over several feeds, the socket and the shared-memory client alike).
#[inline]
pub fn first_quoted<E>(
    found: impl IntoIterator<Item = Result<Option<Found>, E>>,
) -> Result<Option<Found>, E> {
    let mut known = None;
    for f in found {
        if let Some(f) = f? {
            if f.0.has_quote() {
                return Ok(Some(f));
            }
            if known.is_none() {
                known = Some(f);
            }
        }
    }
    Ok(known)
}

impl FeedReader {
    /// `lookup` for memory another process writes: every read gives up
    /// after `tries` attempts, and an index that is not one this code
    /// writes is an error, not a hang. `retries` counts the seqlock
    /// retries taken. Always inlined into the check (`client`).
    #[inline(always)]
    pub fn lookup_within(
        &self,
        symbol: Symbol,
        tries: u32,
        retries: &mut u64,
    ) -> Result<Option<Found>, ReadError> {
        let Some(slot) = self.symbols.try_find(&symbol.words())? else {
            return Ok(None);
        };
        // Feed view first, as in `lookup`.
        let (mut feed, r1) = self.feed.read_within(tries)?;
        if let Some(u) = &self.units {
            let unit = u.unit_of(slot);
            if unit != 0 {
                let cell = u.cells.get(unit as usize).ok_or(ReadError::Corrupt)?;
                let (cell, r) = cell.read_within(tries)?;
                *retries += r as u64;
                feed = unit_view(&feed, &cell);
            }
        }
        let (view, r2) = self.symbols.read_within(slot, tries)?;
        *retries += (r1 + r2) as u64;
        // `SuspectCause::from_u8` reads an unknown code as no cause, which
        // could answer OK from a corrupt slot: fail closed instead.
        if !SuspectCause::is_code(view.cause) {
            return Err(ReadError::Cause(view.cause));
        }
        Ok(Some((view, feed, Thresholds::of(&view))))
    }

    /// The feed view as last published.
    #[inline]
    pub fn feed_view(&self) -> FeedView {
        self.feed.read()
    }

    /// The feed view the verdict reads for the symbol at `slot`: on a feed
    /// of several units, a symbol of one unit reads that unit's channel
    /// state on the feed's own fields (`engine::unit_view`, as
    /// `Feed::feed_view_for`); any other, the feed view (every unit
    /// folded).
    #[inline]
    pub fn feed_view_of(&self, slot: u32) -> FeedView {
        let feed = self.feed.read();
        match &self.units {
            Some(u) => match u.unit_of(slot) {
                0 => feed,
                unit => match u.cells.get(unit as usize) {
                    Some(cell) => unit_view(&feed, &cell.read()),
                    None => feed,
                },
            },
            None => feed,
        }
    }

    /// Symbols published so far; slots `0..len` can be listed.
    pub fn len(&self) -> u32 {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The symbol and view of a published slot.
    pub fn slot(&self, slot: u32) -> Option<(Symbol, SymbolView)> {
        let key = self.symbols.key_at(slot)?;
        Some((Symbol::from_words(key), self.symbols.read(slot)))
    }

    /// The view of one symbol.
    #[inline]
    pub fn symbol_view(&self, symbol: Symbol) -> Option<SymbolView> {
        self.symbols.get(&symbol.words())
    }
}

impl SymbolLookup for FeedReader {
    /// The feed view is read before the symbol view: the feed publishes
    /// epoch changes before the symbol views of the same packet
    /// (`feed::view::Publish`), so a newer symbol with an older feed view
    /// can only look more suspect, never less.
    #[inline]
    fn lookup(&self, symbol: Symbol) -> Option<(SymbolView, FeedView, Thresholds)> {
        let slot = self.symbols.find(&symbol.words())?;
        let feed = self.feed_view_of(slot);
        let view = self.symbols.read(slot);
        Some((view, feed, Thresholds::of(&view)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::Feed;
    use crate::wire::{PacketBuilder, Quote, SessionId, Side};

    #[test]
    fn a_symbol_of_one_unit_reads_its_unit_s_cell_on_the_feed_view() {
        use crate::feed::view::{FEED_CHANNEL_ALIVE, FEED_RECOVERING, FEED_TRUST_LATE_JOIN};
        let (mut publisher, reader) = with_units(16, 256);
        let (a, b) = (
            Symbol::parse("AAPL").unwrap(),
            Symbol::parse("MSFT").unwrap(),
        );
        publisher.publish_symbol(0, a, &SymbolView::default());
        publisher.publish_symbol(1, b, &SymbolView::default());
        // Every unit folded: unit 1's hole reaches the feed view.
        let feed = FeedView {
            gap_epoch: 7,
            offset_ns: 3,
            flags: FEED_RECOVERING | FEED_TRUST_LATE_JOIN,
            channel_alive_at: 10,
            ..FeedView::default()
        };
        let unit2 = FeedView {
            gap_epoch: 1,
            flags: FEED_CHANNEL_ALIVE,
            channel_alive_at: 50,
            channel_source_ts: 40,
            recovery: 0,
            ..FeedView::default()
        };
        publisher.publish_unit_view(2, &unit2);
        publisher.publish_feed(&feed);
        // No unit yet: the feed view.
        assert_eq!(reader.lookup(a).unwrap().1, feed);
        publisher.publish_symbol_unit(0, 2);
        let got = reader.lookup(a).unwrap().1;
        assert_eq!(got, unit_view(&feed, &unit2));
        // The feed's own fields, the unit's channel fields.
        assert_eq!((got.gap_epoch, got.offset_ns), (7, 3));
        assert_eq!(got.flags, FEED_CHANNEL_ALIVE);
        assert_eq!((got.channel_alive_at, got.channel_source_ts), (50, 40));
        let mut retries = 0;
        let within = reader.lookup_within(a, 4, &mut retries).unwrap().unwrap();
        assert_eq!(within.1, got);
        assert_eq!(reader.feed_view_of(0), got);
        // Slot 1 shares slot 0's word and keeps the feed view.
        assert_eq!(reader.lookup(b).unwrap().1, feed);
        publisher.publish_symbol_unit(1, 255);
        publisher.publish_symbol_unit(0, 0);
        assert_eq!(reader.lookup(a).unwrap().1, feed);
        assert_eq!(
            reader.lookup(b).unwrap().1,
            unit_view(&feed, &FeedView::default())
        );
    }

    #[test]
    fn a_feed_of_one_channel_has_no_unit_region() {
        let (mut publisher, reader) = with_capacity(4);
        let a = Symbol::parse("AAPL").unwrap();
        publisher.publish_symbol(0, a, &SymbolView::default());
        let feed = FeedView {
            flags: crate::feed::view::FEED_RECOVERING,
            ..FeedView::default()
        };
        publisher.publish_feed(&feed);
        publisher.publish_unit_view(2, &FeedView::default());
        publisher.publish_symbol_unit(0, 2);
        assert_eq!(reader.lookup(a).unwrap().1, feed);
        assert_eq!(UnitLayout::of(0, 4).words, 0);
    }

    #[test]
    fn reader_sees_what_the_feed_publishes() {
        let settings = FeedSettings {
            max_symbols: 8,
            ..FeedSettings::default()
        };
        let (publisher, reader) = feed_table(&settings);
        let mut feed = Feed::with_publisher(settings, 1, publisher);
        let eur = Symbol::parse("EURUSD").unwrap();
        assert!(reader.lookup(eur).is_none());
        feed.add_symbol(eur).unwrap();
        let (v, _, t) = reader.lookup(eur).unwrap();
        assert!(!v.has_quote());
        assert_eq!(t, Thresholds::default());
        let q = Quote::new(
            eur,
            1,
            1_000,
            Some(Side {
                px: 1_085_120_000,
                qty: 5,
            }),
            None,
        );
        let mut b = PacketBuilder::new();
        b.start(SessionId::parse("S1").unwrap(), 1).quote(&q);
        feed.on_datagram(0, b.bytes(), 2_000);
        let (v, f, _) = reader.lookup(eur).unwrap();
        assert_eq!(v, *feed.symbol_view(eur).unwrap().1);
        assert_eq!(f, *feed.feed_view());
        assert_eq!(reader.slot(0).unwrap().0, eur);
        assert_eq!(reader.len(), 1);
        feed.set_symbol_thresholds(eur, 100, 200).unwrap();
        assert_eq!(reader.lookup(eur).unwrap().2, Thresholds::from_ms(100, 200));
    }
}
