//! The Market By Price book of one instrument (venues.md `cme-mdp3`, The
//! book): each side a list of at most `depth` levels, level 1 the best,
//! changed by Book entries' MDUpdateAction at their MDPriceLevel. Only the
//! outright book is kept: implied entries (`E`, `F`) and the market best
//! bid and offer (`w`, `x`) move the sequence but change no quote, so no
//! book is built from them. Pure; a side allocates once, at its depth, and
//! never per entry.

use super::messages::BookEntry;
use super::templates::enums::{md_entry_type_book as ty, md_update_action as act};
use crate::wire::Side;

/// The depth of a book whose instrument has no definition (venues.md).
pub const DEFAULT_DEPTH: u8 = 10;

/// The deepest book: GBXMarketDepth is an `Int8`.
pub const MAX_DEPTH: u8 = i8::MAX as u8;

/// One price level: price in wire.md's 10^-9, size in contracts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    pub price: i64,
    pub size: u64,
}

/// Why a Book entry cannot apply (venues.md: counted `book_errors`; the
/// instrument is suspect until a snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BookError {
    /// MDPriceLevel 0 with an action other than DeleteThru.
    LevelZero,
    /// New at a level beyond the levels held + 1, or beyond the depth.
    NewBeyond,
    /// Change, Overlay or Delete of a level that does not exist.
    NoSuchLevel,
    /// Change or Delete whose price is not the level's.
    PriceMismatch,
    /// An MDUpdateAction that is not 0-5.
    UnknownAction,
    /// An MDEntryType other than `0`, `1`, `E`, `F`, `J`, `w`, `x`.
    UnknownType,
    /// New, Change or Overlay without a price or size (null), or a price
    /// that does not fit wire.md's fixed point.
    NoPriceOrSize,
}

/// What a Book entry did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The outright book changed (or was checked and left as it was).
    Outright,
    /// Implied or market best bid/offer: sequence only.
    SequenceOnly,
}

/// One side's levels, best first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BookSide {
    levels: Vec<Level>,
}

impl BookSide {
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    pub fn best(&self) -> Option<Level> {
        self.levels.first().copied()
    }

    fn reserve(&mut self, depth: u8) {
        let want = depth as usize;
        if self.levels.capacity() < want {
            self.levels.reserve_exact(want - self.levels.len());
        }
    }

    /// Applies `action` at 1-based `level`, keeping at most `depth` levels.
    fn apply(
        &mut self,
        action: u8,
        level: u8,
        price: Option<i64>,
        size: Option<u64>,
        depth: u8,
    ) -> Result<(), BookError> {
        let l = level as usize;
        let held = self.levels.len();
        let existing = |me: &Self| -> Result<usize, BookError> {
            if l == 0 {
                Err(BookError::LevelZero)
            } else if l > me.levels.len() {
                Err(BookError::NoSuchLevel)
            } else {
                Ok(l - 1)
            }
        };
        match action {
            act::NEW => {
                if l == 0 {
                    return Err(BookError::LevelZero);
                }
                if l > held + 1 || l > depth as usize {
                    return Err(BookError::NewBeyond);
                }
                let (Some(price), Some(size)) = (price, size) else {
                    return Err(BookError::NoPriceOrSize);
                };
                // A level pushed past the depth is gone (made room for
                // first, so that the side never grows past its capacity).
                if held >= depth as usize {
                    self.levels.truncate(depth as usize - 1);
                }
                self.levels.insert(l - 1, Level { price, size });
            }
            act::CHANGE | act::OVERLAY => {
                let i = existing(self)?;
                let (Some(price), Some(size)) = (price, size) else {
                    return Err(BookError::NoPriceOrSize);
                };
                if action == act::CHANGE && self.levels[i].price != price {
                    return Err(BookError::PriceMismatch);
                }
                self.levels[i] = Level { price, size };
            }
            act::DELETE => {
                let i = existing(self)?;
                if price != Some(self.levels[i].price) {
                    return Err(BookError::PriceMismatch);
                }
                self.levels.remove(i);
            }
            act::DELETE_THRU => self.levels.clear(),
            act::DELETE_FROM => {
                if l == 0 {
                    return Err(BookError::LevelZero);
                }
                self.levels.drain(..l.min(held));
            }
            _ => return Err(BookError::UnknownAction),
        }
        Ok(())
    }
}

/// An instrument's outright book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Book {
    pub bids: BookSide,
    pub asks: BookSide,
    depth: u8,
}

impl Default for Book {
    fn default() -> Book {
        Book::new(DEFAULT_DEPTH)
    }
}

impl Book {
    pub fn new(depth: u8) -> Book {
        let mut b = Book {
            bids: BookSide::default(),
            asks: BookSide::default(),
            depth: 0,
        };
        b.set_depth(depth);
        b
    }

    pub fn depth(&self) -> u8 {
        self.depth
    }

    /// A definition's depth (GBX MarketDepth; at least 1). The levels held
    /// stay as they are (a definition never changes a book); the new depth
    /// bounds later New entries.
    pub fn set_depth(&mut self, depth: u8) {
        self.depth = depth.max(1);
        self.bids.reserve(self.depth);
        self.asks.reserve(self.depth);
    }

    /// Both sides emptied (book reset, channel reset, session change).
    pub fn clear(&mut self) {
        self.bids.levels.clear();
        self.asks.levels.clear();
    }

    /// Level 1 of each side as wire.md sides (bid, ask).
    pub fn top(&self) -> (Option<Side>, Option<Side>) {
        let side = |l: Option<Level>| {
            l.map(|l| Side {
                px: l.price,
                qty: l.size,
            })
        };
        (side(self.bids.best()), side(self.asks.best()))
    }

    /// Applies one Book entry. An error changes nothing.
    pub fn apply(&mut self, e: &BookEntry) -> Result<Effect, BookError> {
        let side = match e.entry_type {
            ty::BID => &mut self.bids,
            ty::OFFER => &mut self.asks,
            ty::BOOK_RESET => {
                self.clear();
                return Ok(Effect::Outright);
            }
            ty::IMPLIED_BID | ty::IMPLIED_OFFER | ty::MARKET_BEST_BID | ty::MARKET_BEST_OFFER => {
                return Ok(Effect::SequenceOnly)
            }
            _ => return Err(BookError::UnknownType),
        };
        let price = match e.price {
            None => None,
            Some(p) => Some(p.to_nanos().ok_or(BookError::NoPriceOrSize)?),
        };
        side.apply(e.action, e.level, price, e.size, self.depth)?;
        Ok(Effect::Outright)
    }

    /// Replaces the book by a snapshot's levels, each side given best
    /// first (level 1 at index 0) and within the depth, as
    /// `adapter::snapshot_levels` leaves them checked: the sides are copied
    /// whole (within their capacity, so nothing allocates).
    pub fn replace_sides(&mut self, bids: &[Level], asks: &[Level]) {
        debug_assert!(
            bids.len() <= usize::from(self.depth) && asks.len() <= usize::from(self.depth)
        );
        self.bids.levels.clear();
        self.bids.levels.extend_from_slice(bids);
        self.asks.levels.clear();
        self.asks.levels.extend_from_slice(asks);
    }
}

#[cfg(test)]
mod tests {
    use super::super::sbe::Decimal;
    use super::*;

    fn entry(ty: u8, action: u8, level: u8, price: Option<i64>, size: Option<u64>) -> BookEntry {
        BookEntry {
            // Prices given in ticks of 0.25, as PRICE9.
            price: price.map(|p| Decimal {
                mantissa: p * 250_000_000,
                exponent: -9,
            }),
            size,
            level,
            action,
            entry_type: ty,
        }
    }

    fn bid(action: u8, level: u8, ticks: i64, size: u64) -> BookEntry {
        entry(ty::BID, action, level, Some(ticks), Some(size))
    }

    fn prices(s: &BookSide) -> Vec<(i64, u64)> {
        s.levels()
            .iter()
            .map(|l| (l.price / 250_000_000, l.size))
            .collect()
    }

    #[test]
    fn new_inserts_and_pushes_past_the_depth() {
        let mut b = Book::new(3);
        for (l, t) in [(1, 400), (2, 399), (3, 398)] {
            b.apply(&bid(act::NEW, l, t, 1)).unwrap();
        }
        // New at 1 shifts the others down; the old level 3 is gone.
        b.apply(&bid(act::NEW, 1, 401, 5)).unwrap();
        assert_eq!(prices(&b.bids), [(401, 5), (400, 1), (399, 1)]);
        // New at 2 of a full side.
        b.apply(&bid(act::NEW, 2, 4005, 2)).unwrap();
        assert_eq!(prices(&b.bids), [(401, 5), (4005, 2), (400, 1)]);
        assert_eq!(b.bids.levels.capacity(), 3, "never grows");
        // Beyond the depth or beyond the levels + 1.
        assert_eq!(b.apply(&bid(act::NEW, 4, 1, 1)), Err(BookError::NewBeyond));
        let mut e = Book::new(10);
        assert_eq!(e.apply(&bid(act::NEW, 2, 1, 1)), Err(BookError::NewBeyond));
        assert_eq!(e.apply(&bid(act::NEW, 0, 1, 1)), Err(BookError::LevelZero));
    }

    #[test]
    fn change_overlay_delete_and_the_deletes_of_many() {
        let mut b = Book::new(10);
        for (l, t) in [(1, 400), (2, 399), (3, 398), (4, 397)] {
            b.apply(&bid(act::NEW, l, t, 1)).unwrap();
        }
        b.apply(&bid(act::CHANGE, 2, 399, 7)).unwrap();
        assert_eq!(prices(&b.bids)[1], (399, 7));
        // Change at another price than the level's: refused, nothing changed.
        assert_eq!(
            b.apply(&bid(act::CHANGE, 2, 300, 7)),
            Err(BookError::PriceMismatch)
        );
        // Overlay may change the price.
        b.apply(&bid(act::OVERLAY, 2, 3995, 3)).unwrap();
        assert_eq!(prices(&b.bids)[1], (3995, 3));
        assert_eq!(
            b.apply(&bid(act::DELETE, 3, 1, 0)),
            Err(BookError::PriceMismatch)
        );
        b.apply(&bid(act::DELETE, 3, 398, 0)).unwrap();
        assert_eq!(prices(&b.bids), [(400, 1), (3995, 3), (397, 1)]);
        assert_eq!(
            b.apply(&bid(act::DELETE, 4, 397, 0)),
            Err(BookError::NoSuchLevel)
        );
        assert_eq!(
            b.apply(&bid(act::CHANGE, 0, 400, 1)),
            Err(BookError::LevelZero)
        );
        // DeleteFrom 2: levels 1 and 2 go, the rest move up.
        b.apply(&bid(act::DELETE_FROM, 2, 0, 0)).unwrap();
        assert_eq!(prices(&b.bids), [(397, 1)]);
        // DeleteThru ignores the level, even 0.
        b.apply(&entry(ty::OFFER, act::NEW, 1, Some(500), Some(2)))
            .unwrap();
        b.apply(&bid(act::DELETE_THRU, 0, 0, 0)).unwrap();
        assert!(b.bids.levels().is_empty());
        assert_eq!(b.asks.levels().len(), 1, "one side only");
        assert_eq!(b.apply(&bid(9, 1, 1, 1)), Err(BookError::UnknownAction));
    }

    #[test]
    fn types_other_than_the_outright_book() {
        let mut b = Book::new(10);
        b.apply(&bid(act::NEW, 1, 400, 1)).unwrap();
        let before = b.clone();
        for t in [
            ty::IMPLIED_BID,
            ty::IMPLIED_OFFER,
            ty::MARKET_BEST_BID,
            ty::MARKET_BEST_OFFER,
        ] {
            // Even an entry that could not apply to a book: no book is kept.
            assert_eq!(
                b.apply(&entry(t, act::CHANGE, 7, Some(1), Some(1))),
                Ok(Effect::SequenceOnly)
            );
        }
        assert_eq!(b, before);
        assert_eq!(
            b.apply(&entry(b'2', act::NEW, 1, Some(1), Some(1))),
            Err(BookError::UnknownType)
        );
        assert_eq!(
            b.apply(&entry(ty::BOOK_RESET, act::NEW, 0, None, None)),
            Ok(Effect::Outright)
        );
        assert_eq!(b.top(), (None, None));
    }

    #[test]
    fn nulls_and_top() {
        let mut b = Book::new(2);
        assert_eq!(
            b.apply(&entry(ty::BID, act::NEW, 1, None, Some(1))),
            Err(BookError::NoPriceOrSize)
        );
        assert_eq!(
            b.apply(&entry(ty::BID, act::NEW, 1, Some(1), None)),
            Err(BookError::NoPriceOrSize)
        );
        b.apply(&bid(act::NEW, 1, 4, 3)).unwrap();
        b.apply(&entry(ty::OFFER, act::NEW, 1, Some(5), Some(2)))
            .unwrap();
        assert_eq!(
            b.top(),
            (
                Some(Side {
                    px: 1_000_000_000,
                    qty: 3
                }),
                Some(Side {
                    px: 1_250_000_000,
                    qty: 2
                })
            )
        );
    }

    #[test]
    fn snapshot_replaces_both_sides_whole() {
        let mut b = Book::new(2);
        b.apply(&bid(act::NEW, 1, 4, 3)).unwrap();
        let l = |p| Level { price: p, size: 1 };
        b.replace_sides(&[l(10), l(9)], &[l(11)]);
        assert_eq!(b.bids.levels(), [l(10), l(9)]);
        assert_eq!(b.asks.levels(), [l(11)]);
        b.replace_sides(&[], &[l(12)]);
        assert_eq!(b.bids.levels(), []);
        assert_eq!(b.asks.levels(), [l(12)]);
        assert_eq!(b.bids.levels.capacity(), 2, "never grows");
    }
}
