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

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

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
}
