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

use super::check::SymbolLookup;
use super::table::{
    cell_reader_in, reader_in, seq_cell, seq_cell_in, table, table_in, Busy, CellReader,
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

/// The writer half: owns the symbol table writer and the feed view cell.
/// Give it to `Feed::with_publisher`; it lives on the feed's thread.
pub struct TablePublisher {
    symbols: TableWriter<SymbolView>,
    feed: CellWriter<FeedView>,
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
}

/// The reader half: cheap to clone, `Send + Sync`, never blocks the feed.
#[derive(Clone)]
pub struct FeedReader {
    symbols: TableReader<SymbolView>,
    feed: CellReader<FeedView>,
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
    with_capacity(capacity)
}

/// A table for `capacity` symbols and its two halves.
pub fn with_capacity(capacity: u32) -> (TablePublisher, FeedReader) {
    let (sw, sr) = table::<SymbolView>(capacity);
    let (fw, fr) = seq_cell(FeedView::default());
    (
        TablePublisher {
            symbols: sw,
            feed: fw,
            overflow: 0,
        },
        FeedReader {
            symbols: sr,
            feed: fr,
        },
    )
}

/// A feed's table in shared words (the daemon's file, see `feed::shm`):
/// the feed view cell in `cell`, the symbol table in `table`, both zeroed.
pub fn feed_table_in(
    capacity: u32,
    cell: &Words,
    table: &Words,
) -> Result<(TablePublisher, FeedReader), TooSmall> {
    let (sw, sr) = table_in::<SymbolView>(table, capacity)?;
    let (fw, fr) = seq_cell_in(cell, FeedView::default())?;
    Ok((
        TablePublisher {
            symbols: sw,
            feed: fw,
            overflow: 0,
        },
        FeedReader {
            symbols: sr,
            feed: fr,
        },
    ))
}

/// A reader of a feed's table that another process writes (the client).
pub fn feed_reader_in(capacity: u32, cell: &Words, table: &Words) -> Result<FeedReader, TooSmall> {
    Ok(FeedReader {
        symbols: reader_in::<SymbolView>(table, capacity)?,
        feed: cell_reader_in::<FeedView>(cell)?,
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
        let (feed, r1) = self.feed.read_within(tries)?;
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
        let feed = self.feed.read();
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
