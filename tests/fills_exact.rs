//! Exact decimals (docs/fills-notes.md): property tests over random decimal
//! strings and random arithmetic, against an independent oracle (exact
//! schoolbook arithmetic on decimal digit strings, no rust_decimal).
//!
//! - A string is accepted iff its value can be held exactly (at most 28
//!   digits after the point once trailing zeros are dropped, mantissa at
//!   most 2^96 - 1), and then its value is exactly the string's.
//! - `exact::add` / `exact::mul` succeed iff the exact result can be held,
//!   and then return exactly it.
//! - `Position::apply` never rounds the quantity: it succeeds only when
//!   the exact new quantity (and notional) can be held, and then the
//!   quantity is exactly the old one plus the signed fill quantity.
//! - The HTTP path rejects such an event with its reason and applies the
//!   rest of the batch.
//! - F6: the average price and the realized P&L are the exact value
//!   rounded once, half to even, to 28 significant digits (at most 28
//!   after the point), whatever the operands; `exact::div_rounded` too.

use std::str::FromStr;

use proptest::prelude::*;
use rust_decimal::Decimal;
use tickgate::fills::exact;
use tickgate::fills::model::{parse_value, Event, Side};
use tickgate::fills::position::Position;

// ---------------------------------------------------------------- oracle

/// An exact decimal: sign, magnitude digits (most significant first, no
/// leading zeros; empty = 0), and scale.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big {
    neg: bool,
    digits: Vec<u8>,
    scale: u32,
}

fn trim(mut d: Vec<u8>) -> Vec<u8> {
    let lead = d.iter().take_while(|&&x| x == 0).count();
    d.drain(..lead);
    d
}

fn cmp_mag(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn add_mag(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut i, mut j, mut carry) = (a.len(), b.len(), 0u8);
    while i > 0 || j > 0 || carry > 0 {
        let x = if i > 0 { a[i - 1] } else { 0 };
        let y = if j > 0 { b[j - 1] } else { 0 };
        let s = x + y + carry;
        out.push(s % 10);
        carry = s / 10;
        i = i.saturating_sub(1);
        j = j.saturating_sub(1);
    }
    out.reverse();
    trim(out)
}

/// a - b with a >= b.
fn sub_mag(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut i, mut j, mut borrow) = (a.len(), b.len(), 0i8);
    while i > 0 {
        let x = a[i - 1] as i8;
        let y = if j > 0 { b[j - 1] as i8 } else { 0 };
        let mut s = x - y - borrow;
        borrow = 0;
        if s < 0 {
            s += 10;
            borrow = 1;
        }
        out.push(s as u8);
        i -= 1;
        j = j.saturating_sub(1);
    }
    out.reverse();
    trim(out)
}

fn mul_mag(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() || b.is_empty() {
        return Vec::new();
    }
    let mut acc = vec![0u32; a.len() + b.len()];
    for (i, &x) in a.iter().enumerate().rev() {
        for (j, &y) in b.iter().enumerate().rev() {
            acc[i + j + 1] += u32::from(x) * u32::from(y);
        }
    }
    for k in (1..acc.len()).rev() {
        let c = acc[k] / 10;
        acc[k] %= 10;
        acc[k - 1] += c;
    }
    trim(acc.into_iter().map(|x| x as u8).collect())
}

impl Big {
    fn parse(s: &str) -> Big {
        let (neg, body) = match s.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, s),
        };
        let (i, f) = body.split_once('.').unwrap_or((body, ""));
        let digits = trim(format!("{i}{f}").bytes().map(|b| b - b'0').collect());
        Big {
            neg: neg && !digits.is_empty(),
            digits,
            scale: f.len() as u32,
        }
    }

    fn of(d: Decimal) -> Big {
        Big::parse(&d.to_string())
    }

    fn rescale(&self, scale: u32) -> Vec<u8> {
        let mut d = self.digits.clone();
        if !d.is_empty() {
            d.extend(std::iter::repeat_n(0, (scale - self.scale) as usize));
        }
        d
    }

    fn add(&self, o: &Big) -> Big {
        let s = self.scale.max(o.scale);
        let (a, b) = (self.rescale(s), o.rescale(s));
        let (neg, digits) = if self.neg == o.neg {
            (self.neg, add_mag(&a, &b))
        } else if cmp_mag(&a, &b) != std::cmp::Ordering::Less {
            (self.neg, sub_mag(&a, &b))
        } else {
            (o.neg, sub_mag(&b, &a))
        };
        Big {
            neg: neg && !digits.is_empty(),
            digits,
            scale: s,
        }
    }

    fn neg(&self) -> Big {
        Big {
            neg: !self.neg && !self.digits.is_empty(),
            ..self.clone()
        }
    }

    fn mul(&self, o: &Big) -> Big {
        let digits = mul_mag(&self.digits, &o.digits);
        Big {
            neg: self.neg != o.neg && !digits.is_empty(),
            digits,
            scale: self.scale + o.scale,
        }
    }

    /// Drop trailing zeros after the point.
    fn reduced(&self) -> Big {
        let mut b = self.clone();
        while b.scale > 0 && b.digits.last() == Some(&0) {
            b.digits.pop();
            b.scale -= 1;
        }
        if b.digits.is_empty() {
            b.scale = 0;
        }
        b
    }

    /// self / d (d != 0), rounded once, half to even, to 28 significant
    /// digits and at most 28 digits after the point (F6). Long division on
    /// digit strings at a fixed scale of 90, far below any rounding point.
    fn div_round28(&self, d: &Big) -> Big {
        assert!(!d.digits.is_empty());
        const S: u32 = 90;
        // Q = floor(self × 10^(S + d.scale - self.scale) / d).
        let mut num = self.digits.clone();
        num.extend(std::iter::repeat_n(0, (S + d.scale - self.scale) as usize));
        let (mut q, mut rem) = (Vec::new(), Vec::new());
        for digit in num {
            rem.push(digit);
            rem = trim(rem);
            let mut n = 0;
            while cmp_mag(&rem, &d.digits) != std::cmp::Ordering::Less {
                rem = sub_mag(&rem, &d.digits);
                n += 1;
            }
            q.push(n);
        }
        let q = trim(q);
        let len = q.len() as i64;
        // Keep scale k = min(28, 27 - E), E = len - 1 - S.
        let k = 28i64.min(28 - len + i64::from(S));
        let drop = (i64::from(S) - k) as usize;
        let mut padded = vec![0u8; (drop + 1).saturating_sub(q.len())];
        padded.extend(q);
        let cut = padded.len() - drop;
        let mut kept = trim(padded[..cut].to_vec());
        let g = padded[cut];
        let sticky = padded[cut + 1..].iter().any(|&x| x != 0) || !rem.is_empty();
        let odd = kept.last().is_some_and(|x| x % 2 == 1);
        if g > 5 || (g == 5 && (sticky || odd)) {
            kept = add_mag(&kept, &[1]);
        }
        let (mut digits, scale) = (kept, k);
        if scale < 0 && !digits.is_empty() {
            digits.extend(std::iter::repeat_n(0, (-scale) as usize));
        }
        Big {
            neg: self.neg != d.neg && !digits.is_empty(),
            digits,
            scale: scale.max(0) as u32,
        }
        .reduced()
    }

    /// Whether a rust_decimal can hold this value exactly.
    fn representable(&self) -> bool {
        let r = self.reduced();
        const MAX: &str = "79228162514264337593543950335";
        let max: Vec<u8> = MAX.bytes().map(|b| b - b'0').collect();
        r.scale <= 28 && cmp_mag(&r.digits, &max) != std::cmp::Ordering::Greater
    }
}

// ---------------------------------------------------------------- strategies

/// Decimal strings with 0-40 digits on each side (leading and trailing
/// zeros included), so both sides of every limit are hit.
fn decimal_string() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop::collection::vec(0u8..10, 1..40),
        prop::option::of(prop::collection::vec(0u8..10, 1..40)),
        0usize..6,
        0usize..6,
    )
        .prop_map(|(neg, int, frac, lead0, trail0)| {
            let mut s = String::new();
            if neg {
                s.push('-');
            }
            s.extend(std::iter::repeat_n('0', lead0));
            s.extend(int.iter().map(|d| char::from(b'0' + d)));
            if let Some(f) = frac {
                s.push('.');
                s.extend(f.iter().map(|d| char::from(b'0' + d)));
                s.extend(std::iter::repeat_n('0', trail0));
            }
            s
        })
}

/// Decimals of every size: mantissa of 1-29 digits, any scale 0-28.
fn decimal() -> impl Strategy<Value = Decimal> {
    (any::<bool>(), 1u32..30, any::<u128>(), 0u32..29).prop_map(|(neg, digits, raw, scale)| {
        let m = raw % 10u128.pow(digits.min(29)).min(exact::MAX_MANTISSA + 1);
        let m = m.min(exact::MAX_MANTISSA) as i128;
        Decimal::from_i128_with_scale(if neg { -m } else { m }, scale)
    })
}

fn positive_decimal() -> impl Strategy<Value = Decimal> {
    decimal().prop_filter_map("positive", |d| {
        let a = d.abs();
        (!a.is_zero()).then_some(a)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn strings_are_accepted_iff_exact(s in decimal_string()) {
        let want = Big::parse(&s);
        match exact::parse(&s) {
            Ok(d) => {
                prop_assert!(want.representable(), "{s} accepted as {d}");
                prop_assert_eq!(Big::of(d).reduced(), want.reduced(), "{} became {}", s, d);
            }
            Err(reason) => {
                prop_assert!(!want.representable(), "{s} refused: {reason}");
                prop_assert!(reason.contains("cannot be held exactly"), "{}", reason);
            }
        }
    }

    #[test]
    fn sums_are_exact_or_refused(a in decimal(), b in decimal()) {
        let want = Big::of(a).add(&Big::of(b));
        match exact::add(a, b) {
            Ok(r) => prop_assert_eq!(Big::of(r).reduced(), want.reduced(), "{} + {}", a, b),
            Err(_) => prop_assert!(!want.representable(), "{a} + {b} refused"),
        }
        let want = Big::of(a).add(&Big::of(b).neg());
        match exact::sub(a, b) {
            Ok(r) => prop_assert_eq!(Big::of(r).reduced(), want.reduced(), "{} - {}", a, b),
            Err(_) => prop_assert!(!want.representable(), "{a} - {b} refused"),
        }
    }

    #[test]
    fn products_are_exact_or_refused(a in decimal(), b in decimal()) {
        let want = Big::of(a).mul(&Big::of(b));
        match exact::mul(a, b) {
            Ok(r) => prop_assert_eq!(Big::of(r).reduced(), want.reduced(), "{} * {}", a, b),
            Err(_) => prop_assert!(!want.representable(), "{a} * {b} refused"),
        }
    }

    #[test]
    fn position_quantity_never_rounds(
        fills in prop::collection::vec((any::<bool>(), positive_decimal(), positive_decimal()), 1..8)
    ) {
        let mut p = Position::FLAT;
        for (buy, qty, price) in fills {
            let side = if buy { Side::Buy } else { Side::Sell };
            let delta = if buy { Big::of(qty) } else { Big::of(qty).neg() };
            let want = Big::of(p.qty).add(&delta);
            match p.apply(side, qty, price) {
                Ok(next) => {
                    prop_assert_eq!(Big::of(next.qty).reduced(), want.reduced());
                    p = next;
                }
                Err(e) => {
                    // Only when something cannot be held exactly: the
                    // quantity or the notional (exact rules), or a range
                    // overflow of the average-price path.
                    let notional = Big::of(qty).mul(&Big::of(price));
                    let exact_fails = !want.representable()
                        || (!p.qty.is_zero() && p.qty.is_sign_negative() != buy
                            && !notional.representable())
                        || (p.qty.is_zero() && !notional.representable());
                    prop_assert!(
                        exact_fails || e.why == exact::Inexact::Overflow,
                        "{:?} {} @ {} on {:?}: {}", side, qty, price, p, e
                    );
                }
            }
        }
    }

    /// F6: one rounding, half to even, of the exact quotient.
    #[test]
    fn quotients_round_once_half_even(a in decimal(), b in decimal()) {
        prop_assume!(!b.is_zero());
        let want = Big::of(a).div_round28(&Big::of(b));
        match exact::div_rounded(a, b) {
            Ok(r) => {
                prop_assert_eq!(Big::of(r), want.clone(), "{} / {}", a, b);
                prop_assert!(want.digits.len() <= 28 || want.digits[28..].iter().all(|&x| x == 0));
            }
            Err(e) => prop_assert!(!want.representable(), "{a} / {b} refused: {e}"),
        }
    }

    /// F6: each fill's average price (when the position grows) and
    /// realized P&L (when it shrinks) are the exact figure rounded once;
    /// the cost |qty| × avg is not rounded first. Prices with few digits
    /// and odd quantities make repeating quotients.
    #[test]
    fn average_and_realized_round_once(
        fills in prop::collection::vec(
            (any::<bool>(), 1u64..5000, 1u64..3_000_000, 0u32..6),
            1..24,
        )
    ) {
        let mut p = Position::FLAT;
        for (buy, q, px, px_scale) in fills {
            let (qty, price) = (Decimal::from(q), Decimal::new(px as i64, px_scale));
            let side = if buy { Side::Buy } else { Side::Sell };
            let next = p.apply(side, qty, price).unwrap();
            let old = Big::of(p.qty);
            let grows = p.qty.is_zero() || p.qty.is_sign_negative() != buy;
            if grows {
                let cost = Big::of(p.qty.abs()).mul(&Big::of(p.avg_price))
                    .add(&Big::of(qty).mul(&Big::of(price)));
                let want = cost.div_round28(&Big::of(next.qty.abs()));
                prop_assert_eq!(Big::of(next.avg_price), want, "avg after {:?}", p);
            } else {
                let closed = qty.min(p.qty.abs());
                let mut gain = Big::of(closed).mul(&Big::of(price).add(&Big::of(p.avg_price).neg()));
                if old.neg {
                    gain = gain.neg();
                }
                let want = Big::of(p.realized_pnl).add(&gain).div_round28(&Big::parse("1"));
                prop_assert_eq!(Big::of(next.realized_pnl), want, "pnl after {:?}", p);
            }
            p = next;
        }
    }

    /// Events parsed from JSON never carry a rounded value.
    #[test]
    fn events_keep_their_digits(q in decimal_string(), px in decimal_string()) {
        let v = serde_json::json!({"kind":"FILL","event_id":"E","deal_id":"D","account":"A",
            "symbol":"S","side":"BUY","qty":q,"price":px,"exec_time":"2026-11-30T08:00:00Z"});
        let (bq, bp) = (Big::parse(&q), Big::parse(&px));
        match parse_value(&v) {
            Ok(Event::Fill(f)) => {
                prop_assert_eq!(Big::of(f.qty).reduced(), bq.reduced());
                prop_assert_eq!(Big::of(f.price).reduced(), bp.reduced());
            }
            Ok(other) => prop_assert!(false, "{:?}", other),
            Err(inv) => prop_assert!(
                !bq.representable() || !bp.representable() || bq.neg || bp.neg
                    || bq.digits.is_empty() || bp.digits.is_empty(),
                "refused: {}", inv.reason
            ),
        }
    }
}

#[test]
fn oracle_self_check() {
    let a = Big::parse("1.25");
    let b = Big::parse("-0.5");
    assert_eq!(a.add(&b).reduced(), Big::parse("0.75"));
    assert_eq!(a.mul(&b).reduced(), Big::parse("-0.625"));
    assert!(Big::parse("79228162514264337593543950335").representable());
    let one = Big::parse("1");
    let r = |a: &str, b: &str| Big::parse(a).div_round28(&Big::parse(b));
    assert_eq!(r("10", "3"), Big::parse("3.333333333333333333333333333"));
    assert_eq!(r("2", "3"), Big::parse("0.6666666666666666666666666667"));
    assert_eq!(r("-1", "30"), Big::parse("-0.0333333333333333333333333333"));
    assert_eq!(
        r("6172839450617283945061728394.5", "1"),
        Big::parse("6172839450617283945061728394")
    );
    assert_eq!(
        r("6172839450617283945061728395.5", "1"),
        Big::parse("6172839450617283945061728396")
    );
    assert_eq!(
        r("0.00000000000000000000000000015", "1"),
        Big::parse("0.0000000000000000000000000002")
    );
    assert_eq!(r("1.5", "1"), Big::parse("1.5"));
    assert_eq!(Big::parse("0").div_round28(&one), Big::parse("0"));
    assert!(!Big::parse("79228162514264337593543950336").representable());
    assert!(Big::parse("0.0000000000000000000000000001000").representable());
    assert!(!Big::parse("0.00000000000000000000000000001").representable());
    assert_eq!(
        Big::of(Decimal::from_str("-3.10").unwrap()),
        Big {
            neg: true,
            digits: vec![3, 1, 0],
            scale: 2
        }
    );
}

/// F6: a derived value keeps 28 significant digits and at most 28 digits
/// after the point, whichever keeps fewer. Below 0.1 the 28 places keep
/// fewer: 0.1 / 3 has 27 significant digits (28 would need a 29th place),
/// and a tie at the 28th place goes to the even neighbour, rounded once
/// from the exact quotient.
#[test]
fn averages_below_one_keep_28_places() {
    let d = |s: &str| Decimal::from_str(s).unwrap();
    let avg = |fills: &[(&str, &str)]| {
        fills
            .iter()
            .try_fold(Position::FLAT, |p, (q, px)| p.apply(Side::Buy, d(q), d(px)))
            .unwrap()
            .avg_price
            .to_string()
    };
    // (0.05 + 2 × 0.025) / 3 = 0.0333…
    assert_eq!(
        avg(&[("1", "0.05"), ("2", "0.025")]),
        "0.0333333333333333333333333333"
    );
    // 1.5 and 2.5 units of the 28th place: both ties, to the even one.
    let ulp = "0.0000000000000000000000000001";
    let two = "0.0000000000000000000000000002";
    let three = "0.0000000000000000000000000003";
    assert_eq!(avg(&[("1", ulp), ("1", two)]), two);
    assert_eq!(avg(&[("1", three), ("1", two)]), two);
    // Beside a tie the exact quotient decides: 302/201 units is just
    // above 1.5, 301/201 just below.
    assert_eq!(avg(&[("100", ulp), ("101", two)]), two);
    assert_eq!(avg(&[("101", ulp), ("100", two)]), ulp);
}
