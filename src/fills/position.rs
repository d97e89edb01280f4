//! Position arithmetic (F6): signed quantity, average price, realized P&L,
//! all `Decimal`. Pure; every operation is checked, so absurd inputs give an
//! error, never a panic or a silently wrapped number.
//!
//! Exactness (fills.md "Events", F6): the position quantity and each fill's
//! notional (`qty × price`) are exact or the fill is rejected
//! ([`super::exact`]). The average price is the one quotient of the lane
//! (cost / quantity, which in general has no finite decimal expansion:
//! 100 @ 1.1 + 200 @ 1.2 averages 1.1666...). It, and what is computed from
//! it (the cost of the position it grows from, the realized P&L), is
//! computed exactly and rounded once per fill, half to even, to 28
//! significant digits and at most 28 digits after the point, whichever
//! keeps fewer ([`exact::average_price`], [`exact::realized`]): the only
//! rounding there is. Overflow anywhere rejects the fill.
use rust_decimal::Decimal;

use super::exact::{self, Inexact};
use super::model::Side;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Signed: > 0 long, < 0 short.
    pub qty: Decimal,
    /// Average entry price of the open quantity; zero when flat.
    pub avg_price: Decimal,
    pub realized_pnl: Decimal,
}

/// Why a fill cannot be applied exactly: which value, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("position arithmetic: {what} {why}")]
pub struct Overflow {
    pub what: &'static str,
    pub why: Inexact,
}

fn overflow(what: &'static str) -> impl Fn(Inexact) -> Overflow {
    move |why| Overflow { what, why }
}

fn range(what: &'static str) -> Overflow {
    Overflow {
        what,
        why: Inexact::Overflow,
    }
}

impl Position {
    pub const FLAT: Position = Position {
        qty: Decimal::ZERO,
        avg_price: Decimal::ZERO,
        realized_pnl: Decimal::ZERO,
    };

    /// The position after one fill (F6). Buying adds, selling subtracts.
    /// The average price moves only when the position grows (quantity-weighted),
    /// is the fill price when the position flips side, and realized P&L
    /// accrues on the closed quantity when it shrinks.
    pub fn apply(&self, side: Side, qty: Decimal, price: Decimal) -> Result<Position, Overflow> {
        let delta = match side {
            Side::Buy => qty,
            Side::Sell => -qty,
        };
        let old = self.qty;
        let mut next = *self;
        let new_qty = exact::add(old, delta).map_err(overflow("the position quantity"))?;
        if old.is_zero() || old.is_sign_negative() == delta.is_sign_negative() {
            // Grows (or opens).
            let notional = exact::mul(qty, price).map_err(overflow("the notional qty × price"))?;
            // F6: (|old| × avg + notional) / |new|, exact, rounded once.
            next.avg_price =
                exact::average_price(old.abs(), self.avg_price, notional, new_qty.abs())
                    .map_err(|_| range("the average price"))?;
            next.qty = new_qty;
            return Ok(next);
        }
        // Shrinks, closes or flips.
        let closed = qty.min(old.abs());
        // F6: realized + closed × (price − avg), exact, rounded once.
        next.realized_pnl = exact::realized(
            self.realized_pnl,
            closed,
            price,
            self.avg_price,
            !old.is_sign_negative(),
        )
        .map_err(|_| range("the realized P&L"))?;
        next.qty = new_qty;
        if next.qty.is_zero() {
            next.qty = Decimal::ZERO;
            next.avg_price = Decimal::ZERO;
        } else if next.qty.is_sign_negative() != old.is_sign_negative() {
            next.avg_price = price; // flipped side
        }
        Ok(next)
    }

    /// The position built by `fills` in order from flat: a BUST is applied by
    /// replaying the key's remaining fills, which restores exactly the
    /// position as if the busted fill had never happened.
    pub fn replay<'a, I>(fills: I) -> Result<Position, Overflow>
    where
        I: IntoIterator<Item = (Side, &'a Decimal, &'a Decimal)>,
    {
        fills
            .into_iter()
            .try_fold(Position::FLAT, |p, (side, qty, price)| {
                p.apply(side, *qty, *price)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn pos(q: &str, avg: &str, pnl: &str) -> Position {
        Position {
            qty: d(q),
            avg_price: d(avg),
            realized_pnl: d(pnl),
        }
    }

    #[test]
    fn grows_with_weighted_average() {
        let p = Position::FLAT
            .apply(Side::Buy, d("100"), d("1.10"))
            .unwrap();
        assert_eq!(p, pos("100", "1.1", "0"));
        let p = p.apply(Side::Buy, d("300"), d("1.20")).unwrap();
        assert_eq!(p, pos("400", "1.175", "0"));
        let s = Position::FLAT.apply(Side::Sell, d("2"), d("10")).unwrap();
        let s = s.apply(Side::Sell, d("2"), d("20")).unwrap();
        assert_eq!(s, pos("-4", "15", "0"));
    }

    #[test]
    fn shrink_realizes_pnl_and_keeps_average() {
        let p = pos("400", "1.175", "0");
        let p = p.apply(Side::Sell, d("100"), d("1.200")).unwrap();
        assert_eq!(p.qty, d("300"));
        assert_eq!(p.avg_price, d("1.175"));
        assert_eq!(p.realized_pnl, d("2.5"));
        // Short shrinking: profit when buying back cheaper.
        let s = pos("-10", "50", "1");
        let s = s.apply(Side::Buy, d("4"), d("45")).unwrap();
        assert_eq!(s, pos("-6", "50", "21"));
        // Close to flat: average resets.
        let s = s.apply(Side::Buy, d("6"), d("55")).unwrap();
        assert_eq!(s, pos("0", "0", "-9"));
    }

    #[test]
    fn flip_side_takes_fill_price() {
        let p = pos("100", "1.10", "0");
        let p = p.apply(Side::Sell, d("150"), d("1.05")).unwrap();
        assert_eq!(p.qty, d("-50"));
        assert_eq!(p.avg_price, d("1.05"));
        assert_eq!(p.realized_pnl, d("-5"));
        let p = p.apply(Side::Buy, d("80"), d("1.00")).unwrap();
        assert_eq!(p.qty, d("30"));
        assert_eq!(p.avg_price, d("1.00"));
        assert_eq!(p.realized_pnl, d("-2.5"));
    }

    #[test]
    fn bust_by_replay_restores_exactly() {
        let fills = [
            (Side::Buy, d("100"), d("1.10")),
            (Side::Buy, d("300"), d("1.2")),
            (Side::Sell, d("450"), d("1.3")),
            (Side::Buy, d("7"), d("1.25")),
        ];
        let all = Position::replay(fills.iter().map(|(s, q, p)| (*s, q, p))).unwrap();
        for busted in 0..fills.len() {
            let rest = || {
                fills
                    .iter()
                    .enumerate()
                    .filter(move |(i, _)| *i != busted)
                    .map(|(_, (s, q, p))| (*s, q, p))
            };
            let mut expect = Position::FLAT;
            for (s, q, p) in rest() {
                expect = expect.apply(s, *q, *p).unwrap();
            }
            assert_eq!(Position::replay(rest()).unwrap(), expect);
            assert_ne!(Position::replay(rest()).unwrap(), all);
        }
        // Busting the last fill gives back the state before it.
        let before = Position::replay(fills[..3].iter().map(|(s, q, p)| (*s, q, p))).unwrap();
        assert_eq!(before, pos("-50", "1.3", "50"));
        assert_eq!(all, pos("-43", "1.3", "50.35"));
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let big = Decimal::MAX;
        let p = Position::FLAT.apply(Side::Buy, big, d("2"));
        assert_eq!(p.unwrap_err().why, Inexact::Overflow);
        // A quantity that would be rounded is an error too.
        let p = Position::FLAT.apply(Side::Buy, big, d("1")).unwrap().apply(
            Side::Sell,
            d("0.5"),
            d("1"),
        );
        let e = p.unwrap_err();
        assert_eq!(e.why, Inexact::LosesDigits);
        assert!(e.to_string().contains("position quantity"), "{e}");
        // A notional that would be rounded.
        let tiny = d("0.00000000000000000001");
        let e = Position::FLAT.apply(Side::Buy, tiny, tiny).unwrap_err();
        assert_eq!(
            (e.what, e.why),
            ("the notional qty × price", Inexact::LosesDigits)
        );
    }
}
