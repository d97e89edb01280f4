//! Exact decimals (fills.md "Events": nothing is ever rounded).
//!
//! `rust_decimal` holds a 96-bit integer mantissa and a scale of 0 to 28.
//! Its parser and its arithmetic round when a value does not fit (a
//! 40-digit string, a product with 56 digits after the point, a sum of a
//! huge and a tiny number); here every such case is an error instead.
//!
//! - [`parse`]: a strict decimal string to a `Decimal`, or the reason it
//!   cannot be held exactly. Trailing zeros after the point are dropped
//!   only when the value would not fit with them (they carry no digits).
//! - [`add`], [`sub`], [`mul`]: the `rust_decimal` operation, then a check
//!   that it did not round: `rust_decimal` keeps the exact result's scale
//!   (max of the scales for a sum, their sum for a product) unless the
//!   mantissa does not fit, and only then lowers the scale by `k` digits,
//!   rounding. The result is exact iff the exact result is divisible by
//!   `10^k`, which is checked with integer arithmetic on the mantissas
//!   (for a product: the powers of 2 and 5 in the two mantissas).
//! - [`average_price`], [`realized`]: the one rounding of the lane (F6).
//!   The average price is a quotient and has in general no finite decimal
//!   expansion; it, and what is computed from it, is computed exactly in
//!   wide integers and rounded once, half to even, to 28 significant
//!   digits and at most 28 digits after the point, whichever keeps fewer
//!   (F6; 28 places are also the most a `Decimal` holds). rust_decimal's
//!   own `/` is not that: it keeps as many digits as fit the 96-bit
//!   mantissa (29 for 10 / 3), and rounding that result again to 28
//!   digits rounds twice.

use rust_decimal::Decimal;

/// Most digits after the point a `Decimal` holds.
pub const MAX_SCALE: u32 = 28;
/// Largest mantissa (2^96 - 1).
pub const MAX_MANTISSA: u128 = (1u128 << 96) - 1;

/// Why a value or an operation cannot be exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Inexact {
    #[error("overflows the decimal range")]
    Overflow,
    #[error("would need more than 28 significant digits (it would be rounded)")]
    LosesDigits,
}

/// Strict decimal: optional '-', digits, optional '.' and digits. No
/// exponent, no '+', no spaces, no NaN/Infinity. A value that cannot be
/// held exactly is an error naming why, never rounded.
pub fn parse(s: &str) -> Result<Decimal, String> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, f),
        None => (body, ""),
    };
    let digits_ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !digits_ok(int) || (body.contains('.') && !digits_ok(frac)) {
        return Err(format!("{s:?} is not a decimal number"));
    }
    // Trailing zeros after the point carry no digits: drop them if needed.
    let frac_sig = frac.trim_end_matches('0');
    let int_sig = int.trim_start_matches('0');
    let exact_frac = if frac.len() as u32 <= MAX_SCALE && fits(int_sig, frac) {
        frac
    } else {
        frac_sig
    };
    if exact_frac.len() as u32 > MAX_SCALE {
        return Err(format!(
            "{s:?} cannot be held exactly: more than {MAX_SCALE} digits after the point \
             (values are never rounded)"
        ));
    }
    if !fits(int_sig, exact_frac) {
        return Err(format!(
            "{s:?} cannot be held exactly: more than 28 significant digits or beyond \
             ±79228162514264337593543950335 (values are never rounded)"
        ));
    }
    let mut m: u128 = 0;
    for b in int.bytes().chain(exact_frac.bytes()) {
        // Cannot overflow: `fits` checked the value.
        m = m * 10 + u128::from(b - b'0');
    }
    let m = i128::try_from(m).map_err(|_| format!("{s:?} is out of range"))?;
    let d = Decimal::try_from_i128_with_scale(if neg { -m } else { m }, exact_frac.len() as u32)
        .map_err(|_| format!("{s:?} is out of range"))?;
    Ok(d)
}

/// Whether the digits `int` (no leading zeros) followed by `frac` form a
/// mantissa of at most 2^96 - 1.
fn fits(int: &str, frac: &str) -> bool {
    let all = format!("{int}{frac}");
    let all = all.trim_start_matches('0');
    if all.is_empty() {
        return true;
    }
    if all.len() > 29 {
        return false;
    }
    all.parse::<u128>().is_ok_and(|m| m <= MAX_MANTISSA)
}

fn pow10(k: u32) -> i128 {
    10i128.pow(k)
}

/// How many times `p` divides `m` (`m` > 0).
fn valuation(mut m: u128, p: u128) -> u32 {
    let mut n = 0;
    while m.is_multiple_of(p) {
        m /= p;
        n += 1;
    }
    n
}

/// `a + b`, exactly.
pub fn add(a: Decimal, b: Decimal) -> Result<Decimal, Inexact> {
    let r = a.checked_add(b).ok_or(Inexact::Overflow)?;
    let s = a.scale().max(b.scale());
    if r.scale() >= s {
        return Ok(r);
    }
    // rust_decimal dropped k digits: exact iff a + b ≡ 0 (mod 10^-(s-k)).
    let k = s - r.scale();
    let modulus = pow10(k);
    let part = |d: Decimal| -> i128 {
        let shift = s - d.scale();
        if shift >= k {
            0
        } else {
            d.mantissa().rem_euclid(pow10(k - shift)) * pow10(shift)
        }
    };
    if (part(a) + part(b)) % modulus == 0 {
        Ok(r)
    } else {
        Err(Inexact::LosesDigits)
    }
}

/// `a - b`, exactly.
pub fn sub(a: Decimal, b: Decimal) -> Result<Decimal, Inexact> {
    add(a, -b)
}

/// `a * b`, exactly.
pub fn mul(a: Decimal, b: Decimal) -> Result<Decimal, Inexact> {
    let r = a.checked_mul(b).ok_or(Inexact::Overflow)?;
    let s = a.scale() + b.scale();
    if r.scale() >= s {
        return Ok(r);
    }
    let (ma, mb) = (a.mantissa().unsigned_abs(), b.mantissa().unsigned_abs());
    if ma == 0 || mb == 0 {
        return Ok(r);
    }
    let k = s - r.scale();
    if valuation(ma, 2) + valuation(mb, 2) >= k && valuation(ma, 5) + valuation(mb, 5) >= k {
        Ok(r)
    } else {
        Err(Inexact::LosesDigits)
    }
}

// ------------------------------------------------------------ F6 rounding

/// Significant digits kept by the one rounding of the lane (F6).
pub const ROUNDED_DIGITS: u32 = 28;

/// A non-negative integer of up to 512 bits, little-endian 32-bit limbs:
/// wide enough for every exact intermediate of F6 (a product of two
/// mantissas at a scale of up to 56, a sum of such, times 10^56).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Wide([u32; 16]);

impl Wide {
    const ZERO: Wide = Wide([0; 16]);

    fn from_u128(v: u128) -> Wide {
        let mut w = Wide::ZERO;
        for (i, l) in w.0.iter_mut().take(4).enumerate() {
            *l = (v >> (32 * i)) as u32;
        }
        w
    }

    /// The value, if it fits 128 bits.
    fn to_u128(self) -> Option<u128> {
        if self.0[4..].iter().any(|&l| l != 0) {
            return None;
        }
        Some(
            self.0[..4]
                .iter()
                .rev()
                .fold(0u128, |acc, &l| (acc << 32) | u128::from(l)),
        )
    }

    fn is_zero(&self) -> bool {
        self.0.iter().all(|&l| l == 0)
    }

    /// Limbs in use: those up to the highest non-zero one. The values of
    /// a fill use three or four of the sixteen; the loops below stop
    /// there instead of running over all of them.
    fn used(&self) -> usize {
        self.0.iter().rposition(|&l| l != 0).map_or(0, |i| i + 1)
    }

    /// self × m; overflow of 512 bits is an error (it cannot happen for
    /// the operands of F6, whose bounds are stated on the type).
    fn mul_u32(mut self, m: u32) -> Result<Wide, Inexact> {
        let n = self.used();
        let mut carry = 0u64;
        for l in self.0[..n].iter_mut() {
            let t = u64::from(*l) * u64::from(m) + carry;
            *l = t as u32;
            carry = t >> 32;
        }
        if carry != 0 {
            // The limb above the last one in use is zero: the carry
            // (< 2^32) goes there, if there is one.
            *self.0.get_mut(n).ok_or(Inexact::Overflow)? = carry as u32;
        }
        Ok(self)
    }

    fn mul_u128(self, m: u128) -> Result<Wide, Inexact> {
        // The values of a fill mostly fit 128 bits, products too: one
        // multiplication instead of the limb by limb loop below.
        if let Some(p) = self.to_u128().and_then(|v| v.checked_mul(m)) {
            return Ok(Wide::from_u128(p));
        }
        let mut out = Wide::ZERO;
        for i in 0..4 {
            let limb = (m >> (32 * i)) as u32;
            if limb == 0 {
                continue;
            }
            let mut part = self.mul_u32(limb)?;
            // Shift by i limbs.
            if part.0[16 - i..].iter().any(|&l| l != 0) {
                return Err(Inexact::Overflow);
            }
            part.0.copy_within(0..16 - i, i);
            part.0[..i].fill(0);
            out = out.add(&part)?;
        }
        Ok(out)
    }

    fn mul_pow10(mut self, mut k: u32) -> Result<Wide, Inexact> {
        if let Some(p) = self
            .to_u128()
            .and_then(|v| v.checked_mul(10u128.checked_pow(k)?))
        {
            return Ok(Wide::from_u128(p));
        }
        while k > 0 {
            let step = k.min(9);
            self = self.mul_u32(10u32.pow(step))?;
            k -= step;
        }
        Ok(self)
    }

    fn add(mut self, o: &Wide) -> Result<Wide, Inexact> {
        if let Some(v) = self
            .to_u128()
            .zip(o.to_u128())
            .and_then(|(a, b)| a.checked_add(b))
        {
            return Ok(Wide::from_u128(v));
        }
        let n = self.used().max(o.used());
        let mut carry = 0u64;
        for (l, r) in self.0[..n].iter_mut().zip(o.0.iter()) {
            let t = u64::from(*l) + u64::from(*r) + carry;
            *l = t as u32;
            carry = t >> 32;
        }
        if carry != 0 {
            // Both are zero above limb n - 1: the carry (1) goes to limb n.
            *self.0.get_mut(n).ok_or(Inexact::Overflow)? = carry as u32;
        }
        Ok(self)
    }

    /// self - o, with self >= o.
    fn sub(mut self, o: &Wide) -> Wide {
        if let (Some(a), Some(b)) = (self.to_u128(), o.to_u128()) {
            debug_assert!(a >= b, "Wide::sub with self < o");
            return Wide::from_u128(a - b);
        }
        let mut borrow = 0i64;
        for (l, r) in self.0.iter_mut().zip(o.0.iter()) {
            let t = i64::from(*l) - i64::from(*r) - borrow;
            borrow = i64::from(t < 0);
            *l = t.rem_euclid(1 << 32) as u32;
        }
        debug_assert_eq!(borrow, 0, "Wide::sub with self < o");
        self
    }

    fn cmp(&self, o: &Wide) -> std::cmp::Ordering {
        self.0.iter().rev().cmp(o.0.iter().rev())
    }

    /// (self / d, self % d) for 0 < d < 2^96: every partial remainder
    /// shifted by one limb still fits 128 bits.
    fn divrem(&self, d: u128) -> (Wide, u128) {
        debug_assert!(d > 0 && d < 1 << 96);
        if let Some(v) = self.to_u128() {
            // Most quotients of a fill: one 128-bit division.
            let q = v / d;
            return (Wide::from_u128(q), v - q * d);
        }
        let mut q = Wide::ZERO;
        let mut r = 0u128;
        // Leading zero limbs give zero quotient limbs and leave r at 0:
        // start at the highest limb in use. One 128-bit division per
        // limb (the remainder from the quotient, not a second one).
        for i in (0..self.used()).rev() {
            let cur = (r << 32) | u128::from(self.0[i]);
            let qi = cur / d;
            q.0[i] = qi as u32;
            r = cur - qi * d;
        }
        (q, r)
    }

    /// Number of decimal digits (0 for zero).
    fn digits(&self) -> u32 {
        if let Some(v) = self.to_u128() {
            return if v == 0 { 0 } else { v.ilog10() + 1 };
        }
        let (mut w, mut n) = (*self, 0);
        while w.to_u128().is_none() {
            w = w.divrem(10u128.pow(18)).0;
            n += 18;
        }
        n + w
            .to_u128()
            .map_or(0, |v| if v == 0 { 0 } else { v.ilog10() + 1 })
    }
}

/// A signed exact decimal: sign, magnitude, scale (digits after the point).
#[derive(Clone, Copy)]
struct Exact {
    neg: bool,
    mag: Wide,
    scale: u32,
}

impl Exact {
    fn of(d: Decimal) -> Exact {
        Exact {
            neg: d.is_sign_negative() && !d.is_zero(),
            mag: Wide::from_u128(d.mantissa().unsigned_abs()),
            scale: d.scale(),
        }
    }

    fn negate(self) -> Exact {
        Exact {
            neg: !self.neg && !self.mag.is_zero(),
            ..self
        }
    }

    fn rescaled(self, scale: u32) -> Result<Wide, Inexact> {
        self.mag.mul_pow10(scale - self.scale)
    }

    fn add(self, o: Exact) -> Result<Exact, Inexact> {
        let scale = self.scale.max(o.scale);
        let (a, b) = (self.rescaled(scale)?, o.rescaled(scale)?);
        let (neg, mag) = if self.neg == o.neg {
            (self.neg, a.add(&b)?)
        } else if a.cmp(&b) != std::cmp::Ordering::Less {
            (self.neg, a.sub(&b))
        } else {
            (o.neg, b.sub(&a))
        };
        Ok(Exact {
            neg: neg && !mag.is_zero(),
            mag,
            scale,
        })
    }

    fn mul(self, o: Decimal) -> Result<Exact, Inexact> {
        let mag = self.mag.mul_u128(o.mantissa().unsigned_abs())?;
        let neg = (self.neg != (o.is_sign_negative() && !o.is_zero())) && !mag.is_zero();
        Ok(Exact {
            neg,
            mag,
            scale: self.scale + o.scale(),
        })
    }

    /// self / d rounded half to even to 28 significant digits and at most
    /// 28 digits after the point (F6): the one rounding of the lane. `d`
    /// must not be zero.
    fn div_round(self, d: Decimal) -> Result<Decimal, Inexact> {
        let dm = d.mantissa().unsigned_abs();
        debug_assert!(dm != 0, "division by zero");
        let neg = self.neg != d.is_sign_negative();
        // value = mag / 10^scale / (dm / 10^d.scale). Q = floor(value × 10^s)
        // at a scale s >= 28 fine enough to hold every digit we keep.
        let s = MAX_SCALE.max(self.scale.saturating_sub(d.scale()));
        let up = s + d.scale() - self.scale;
        let (q, r) = self.mag.mul_pow10(up)?.divrem(dm);
        // Digits to drop: down to 28 significant digits, and to scale 28.
        let drop = (s - MAX_SCALE).max(q.digits().saturating_sub(ROUNDED_DIGITS));
        let (mut kept, round_up) = if drop == 0 {
            // The remainder decides: r / dm against one half.
            let twice = r << 1; // r < 2^96
            let odd = q.0[0] & 1 == 1;
            (q, twice > dm || (twice == dm && odd))
        } else {
            // Keep the last dropped digit apart; the rest is sticky.
            let mut w = q;
            let mut sticky = r != 0;
            let mut k = drop - 1;
            while k > 0 {
                let step = k.min(18);
                let (next, rem) = w.divrem(10u128.pow(step));
                sticky |= rem != 0;
                w = next;
                k -= step;
            }
            let (kept, last) = w.divrem(10);
            let odd = kept.0[0] & 1 == 1;
            (kept, last > 5 || (last == 5 && (sticky || odd)))
        };
        if round_up {
            kept = kept.add(&Wide::from_u128(1))?;
        }
        let mut scale = i64::from(s) - i64::from(drop);
        let mut m = kept.to_u128().ok_or(Inexact::Overflow)?;
        if m == 10u128.pow(ROUNDED_DIGITS) {
            // 9.99…9 rounded up to 10.00…0: one more digit, all zeros.
            m /= 10;
            scale -= 1;
        }
        while scale < 0 {
            m = m.checked_mul(10).ok_or(Inexact::Overflow)?;
            scale += 1;
        }
        if m > MAX_MANTISSA {
            return Err(Inexact::Overflow);
        }
        let m = i128::try_from(m).map_err(|_| Inexact::Overflow)?;
        let v = Decimal::try_from_i128_with_scale(if neg { -m } else { m }, scale as u32)
            .map_err(|_| Inexact::Overflow)?;
        Ok(v.normalize())
    }
}

/// F6: the average price of a position that grows from `old_qty` (its
/// size, >= 0) at `old_avg` by a fill of notional `notional` (exact) to
/// `new_qty` (its size, > 0): (old_qty × old_avg + notional) / new_qty,
/// computed exactly and rounded once, half to even, to 28 significant
/// digits (at most 28 after the point). Trailing zeros are dropped, so
/// every store is given the same text.
pub fn average_price(
    old_qty: Decimal,
    old_avg: Decimal,
    notional: Decimal,
    new_qty: Decimal,
) -> Result<Decimal, Inexact> {
    if new_qty.is_zero() {
        return Err(Inexact::Overflow);
    }
    Exact::of(old_qty)
        .mul(old_avg)?
        .add(Exact::of(notional))?
        .div_round(new_qty)
}

/// F6: realized P&L after closing `closed` (> 0) at `price` out of a
/// position at average `avg`, long if `long`: realized + closed × (price −
/// avg) (negated for a short), computed exactly and rounded once, half to
/// even, to 28 significant digits (at most 28 after the point). Trailing
/// zeros are dropped.
pub fn realized(
    realized: Decimal,
    closed: Decimal,
    price: Decimal,
    avg: Decimal,
    long: bool,
) -> Result<Decimal, Inexact> {
    let gain = Exact::of(price).add(Exact::of(avg).negate())?.mul(closed)?;
    let gain = if long { gain } else { gain.negate() };
    Exact::of(realized).add(gain)?.div_round(Decimal::ONE)
}

/// F6: `a / b` rounded once, half to even, to 28 significant digits (at
/// most 28 after the point), trailing zeros dropped. `b` must not be zero.
pub fn div_rounded(a: Decimal, b: Decimal) -> Result<Decimal, Inexact> {
    if b.is_zero() {
        return Err(Inexact::Overflow);
    }
    Exact::of(a).div_round(b)
}

/// Room for any decimal's text: a sign, 29 digits, `0.` (see [`text`]).
pub type TextBuf = [u8; 48];

/// `d` as text, the same bytes as its `Display` (`d.to_string()`: the
/// mantissa's digits with the point `scale` digits from the right,
/// trailing zeros kept, a `-` for any negative value), written into
/// `out`. The text a decimal is stored as and hashed by (F2b), made with
/// 64-bit divisions by constants where `Display` divides the 96-bit
/// mantissa word by word once per digit, and with no allocation.
pub fn text<'a>(d: &Decimal, out: &'a mut TextBuf) -> &'a str {
    // The digits, right-aligned; 2^96 has 29, a scale of 28 pads to 28.
    let mut digits = [b'0'; 32];
    let mut at = digits.len();
    let mut push = |mut v: u64, min_digits: usize, at: &mut usize| {
        let end = *at;
        while v != 0 || end - *at < min_digits {
            *at -= 1;
            digits[*at] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    let m = d.mantissa().unsigned_abs();
    const TEN19: u128 = 10_000_000_000_000_000_000;
    if m >> 64 == 0 {
        push(m as u64, 0, &mut at);
    } else {
        // The low 19 digits zero-padded, then the rest.
        push((m % TEN19) as u64, 19, &mut at);
        push((m / TEN19) as u64, 0, &mut at);
    }
    let scale = d.scale() as usize;
    let ndigits = (digits.len() - at).max(scale);
    let digits = &digits[digits.len() - ndigits..];
    let mut n = 0;
    let mut put = |b: &[u8]| {
        out[n..n + b.len()].copy_from_slice(b);
        n += b.len();
    };
    if d.is_sign_negative() {
        put(b"-");
    }
    let whole = ndigits - scale;
    if whole == 0 {
        // No digit before the point (or a zero of scale 0).
        put(b"0");
    } else {
        put(&digits[..whole]);
    }
    if scale > 0 {
        put(b".");
        put(&digits[whole..]);
    }
    // Only ASCII was written.
    std::str::from_utf8(&out[..n]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// [`text`] is `Display`, byte for byte: the stored and hashed
    /// text of a decimal (F2b) must not change with the formatter.
    #[test]
    fn text_is_display() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let check = |d: Decimal| {
            let mut buf = [0u8; 48];
            assert_eq!(text(&d, &mut buf), d.to_string(), "{d:?}");
        };
        for scale in 0..=28u32 {
            for m in [
                0i128,
                1,
                -1,
                9,
                10,
                99,
                100,
                12345,
                -120,
                (1 << 64) - 1,
                1 << 64,
                10_000_000_000_000_000_000,
                9_999_999_999_999_999_999,
                MAX_MANTISSA as i128,
                -(MAX_MANTISSA as i128),
            ] {
                check(Decimal::from_i128_with_scale(m, scale));
            }
            for _ in 0..2000 {
                let bits = (next() % 97) as u32;
                let mut m = ((next() as u128) << 64 | next() as u128) & MAX_MANTISSA;
                if bits < 96 {
                    m &= (1u128 << bits) - 1;
                }
                let m = if next() % 2 == 0 {
                    m as i128
                } else {
                    -(m as i128)
                };
                check(Decimal::from_i128_with_scale(m, scale));
            }
        }
        // Negative zero, with and without digits after the point.
        for scale in [0, 3] {
            let mut z = Decimal::new(0, scale);
            z.set_sign_negative(true);
            check(z);
        }
        for t in [
            "0",
            "0.00",
            "1.10",
            "-0.001",
            "79228162514264337593543950335",
            "-7.9228162514264337593543950335",
            "0.0000000000000000000000000001",
        ] {
            check(Decimal::from_str(t).unwrap());
        }
    }

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn parse_rejects_what_would_round() {
        assert!(parse("1.0000000000000000000000000000000000001")
            .unwrap_err()
            .contains("digits after the point"));
        assert!(parse("1e5").is_err());
        assert!(parse("0.00000000000000000000000000001").is_err());
        assert!(parse("79228162514264337593543950336")
            .unwrap_err()
            .contains("28 significant digits"));
        assert_eq!(
            parse("79228162514264337593543950335").unwrap(),
            Decimal::MAX
        );
        assert_eq!(
            parse("0.0000000000000000000000000001").unwrap(),
            d("0.0000000000000000000000000001")
        );
        // Trailing zeros are only dropped when they do not fit.
        assert_eq!(parse("1.50").unwrap().to_string(), "1.50");
        assert_eq!(
            parse("1.5000000000000000000000000000000000").unwrap(),
            d("1.5")
        );
        assert_eq!(parse("-007.25").unwrap(), d("-7.25"));
        for bad in [
            "1e5", "abc", "", "1.", ".5", "+1", " 1", "NaN", "1.2.3", "-", "--1",
        ] {
            assert!(parse(bad).unwrap_err().contains("not a decimal"), "{bad}");
        }
    }

    #[test]
    fn arithmetic_rejects_rounding() {
        assert_eq!(add(d("1.5"), d("2.25")), Ok(d("3.75")));
        assert_eq!(
            add(Decimal::MAX - Decimal::ONE, d("0.5")),
            Err(Inexact::LosesDigits),
            "rust_decimal would round this"
        );
        assert_eq!(add(Decimal::MAX, Decimal::ONE), Err(Inexact::Overflow));
        assert_eq!(
            add(d("79228162514264337593543950330"), d("0.0")),
            Ok(d("79228162514264337593543950330"))
        );
        assert_eq!(mul(d("1.1"), d("3")), Ok(d("3.3")));
        let tiny = d("0.0000000000000000000001");
        assert_eq!(mul(tiny, tiny), Err(Inexact::LosesDigits));
        // Dropped digits that are zeros are fine: 0.2 * 0.5 at scale 28+.
        let a = d("0.2000000000000000000000000000");
        let b = d("0.5000000000000000000000000000");
        assert_eq!(mul(a, b), Ok(d("0.1")));
        assert_eq!(mul(Decimal::MAX, d("2")), Err(Inexact::Overflow));
        assert_eq!(
            sub(d("1"), d("0.0000000000000000000000000001"))
                .unwrap()
                .to_string(),
            "0.9999999999999999999999999999"
        );
    }

    /// F6: rust_decimal's `/` is not "28 significant digits, half to
    /// even": it keeps up to 29 digits, and rounding its result again to
    /// 28 rounds twice. `div_rounded` rounds the exact quotient once.
    #[test]
    fn quotients_round_once_half_even_to_28_digits() {
        use rust_decimal::RoundingStrategy::MidpointNearestEven;
        let twice = |a: &str, b: &str| {
            (d(a) / d(b))
                .round_sf_with_strategy(28, MidpointNearestEven)
                .unwrap()
                .normalize()
                .to_string()
        };
        let once = |a: &str, b: &str| div_rounded(d(a), d(b)).unwrap().to_string();
        // 29 digits from rust_decimal, 28 here.
        assert_eq!(
            (d("10") / d("3")).to_string(),
            "3.3333333333333333333333333333"
        );
        assert_eq!(once("10", "3"), "3.333333333333333333333333333");
        assert_eq!(once("2", "3"), "0.6666666666666666666666666667");
        // Exact ties at the 29th digit go to the even neighbour.
        let odd = "12345678901234567890123456789";
        assert_eq!(
            (d(odd) / d("2")).to_string(),
            "6172839450617283945061728394.5"
        );
        assert_eq!(once(odd, "2"), "6172839450617283945061728394");
        assert_eq!(
            once("12345678901234567890123456791", "2"),
            "6172839450617283945061728396"
        );
        assert_eq!(
            once("-12345678901234567890123456789", "2"),
            "-6172839450617283945061728394"
        );
        // Double rounding: 1.000000000000000000000000001|4666… is below
        // the midpoint; rust_decimal first rounds it to …0015, a tie that
        // the second rounding sends up.
        let (a, b) = ("3.0000000000000000000000000044", "3");
        assert_eq!(twice(a, b), "1.000000000000000000000000002");
        assert_eq!(once(a, b), "1.000000000000000000000000001");
        // Below 1, at most 28 digits after the point (what a Decimal holds).
        assert_eq!(once("1", "30"), "0.0333333333333333333333333333");
        assert_eq!(once("0.0000000000000000000000000001", "2"), "0");
        assert_eq!(
            once("0.0000000000000000000000000003", "2"),
            "0.0000000000000000000000000002"
        );
        // 9.99…95 rounds up to 10 (one digit more, all zeros).
        assert_eq!(
            once("19999999999999999999999999999", "2"),
            "10000000000000000000000000000"
        );
        // Exact quotients keep their digits, without trailing zeros.
        assert_eq!(once("1.50", "1"), "1.5");
        assert_eq!(once("7", "0.25"), "28");
        // Large: 29 integer digits are rounded to 28 significant ones,
        // which may leave the range: an error, never a wrapped number.
        assert_eq!(
            once("69999999999999999999999999985", "1"),
            "69999999999999999999999999980"
        );
        assert_eq!(
            div_rounded(Decimal::MAX, Decimal::ONE),
            Err(Inexact::Overflow)
        );
    }

    #[test]
    fn average_and_realized_round_once() {
        // 100 @ 1.1 + 200 @ 1.2 = 350 / 300.
        assert_eq!(
            average_price(d("100"), d("1.1"), d("240"), d("300"))
                .unwrap()
                .to_string(),
            "1.166666666666666666666666667"
        );
        // The cost |old| × avg is exact (56 digits here), not rounded first.
        let avg = d("1.166666666666666666666666667");
        assert_eq!(average_price(d("300"), avg, d("0"), d("300")).unwrap(), avg);
        // Realized: exact sum of the old figure and closed × (price − avg).
        assert_eq!(
            realized(d("0"), d("100"), d("1.2"), avg, true)
                .unwrap()
                .to_string(),
            "3.3333333333333333333333333"
        );
        assert_eq!(
            realized(d("0"), d("100"), d("1.2"), avg, false)
                .unwrap()
                .to_string(),
            "-3.3333333333333333333333333"
        );
        assert_eq!(
            realized(d("5"), d("1"), d("2"), d("2"), true)
                .unwrap()
                .to_string(),
            "5"
        );
    }
}
