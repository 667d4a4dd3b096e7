//! Go's duration text (`1s`, `6m0s`, `12ms`, `1h2m3.5s`), as OpenAI sends its resets.
//!
//! The grammar is Go's `time.ParseDuration`: a sequence of decimal numbers,
//! each with a unit (`h`, `m`, `s`, `ms`, `us`, `µs`, `μs`, `ns`), or a bare
//! `0`. Stricter than Go in one way: a minus sign is refused, since a reset
//! in the past is not something a server should say and never a wait.

use std::time::Duration;

use crate::signal::MAX_DELAY;

/// Nanoseconds per unit, as Go's `time` package names them (`µs` is U+00B5,
/// `μs` U+03BC; Go accepts both).
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Integer digits kept per term: more than any valid duration under
/// [`MAX_DELAY`] needs (even in nanoseconds), few enough to parse as `u128`.
const MAX_INTEGER_DIGITS: usize = 30;

/// Fraction digits that count; later ones are below a nanosecond even for hours
/// and are only checked to be digits.
const MAX_FRACTION_DIGITS: usize = 18;

/// Parses a Go duration. `None` for anything malformed, negative, or longer
/// than [`MAX_DELAY`].
pub(crate) fn parse(text: &str) -> Option<Duration> {
    let text = text.trim();
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    // Go's one unitless form.
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (integer, after) = split_digits(rest);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after_dot) => split_digits(after_dot),
            None => ("", after),
        };
        if integer.is_empty() && fraction.is_empty() {
            return None;
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let (_, per_unit) = UNITS.iter().find(|(name, _)| *name == unit)?;
        total = total.checked_add(term(integer, fraction, *per_unit)?)?;
        if total > MAX_DELAY.as_nanos() {
            return None;
        }
        rest = after;
    }
    Some(Duration::from_nanos(u64::try_from(total).ok()?))
}

/// The leading ASCII digits of `text`, and what follows them.
fn split_digits(text: &str) -> (&str, &str) {
    let len = text.bytes().take_while(u8::is_ascii_digit).count();
    text.split_at(len)
}

/// `integer.fraction` units in nanoseconds, truncated below a nanosecond.
fn term(integer: &str, fraction: &str, per_unit: u128) -> Option<u128> {
    if integer.len() > MAX_INTEGER_DIGITS {
        return None;
    }
    let whole: u128 = if integer.is_empty() {
        0
    } else {
        integer.parse().ok()?
    };
    let kept = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
    let part = if kept.is_empty() {
        0
    } else {
        let numerator: u128 = kept.parse().ok()?;
        let scale = 10u128.checked_pow(u32::try_from(kept.len()).ok()?)?;
        numerator.checked_mul(per_unit)? / scale
    };
    whole.checked_mul(per_unit)?.checked_add(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let cases: &[(&str, Option<Duration>)] = &[
            // What OpenAI sends (Go's Duration.String()).
            ("1s", Some(s(1))),
            ("6m0s", Some(s(360))),
            ("12ms", Some(ms(12))),
            ("20ms", Some(ms(20))),
            ("1.5s", Some(ms(1500))),
            ("1h2m3.5s", Some(ms(3_723_500))),
            ("0s", Some(Duration::ZERO)),
            ("0", Some(Duration::ZERO)),
            ("7m12.345s", Some(ms(432_345))),
            // Every unit, decimals, and Go's odd but valid forms.
            ("1500ns", Some(Duration::from_nanos(1500))),
            ("3us", Some(Duration::from_micros(3))),
            ("3µs", Some(Duration::from_micros(3))),
            ("3μs", Some(Duration::from_micros(3))),
            ("2h", Some(s(7200))),
            (".5s", Some(ms(500))),
            ("1.s", Some(s(1))),
            ("+2s", Some(s(2))),
            ("1m1m", Some(s(120))),
            (" 250ms ", Some(ms(250))),
            ("0.1234567891ms", Some(Duration::from_nanos(123_456))),
            // Malformed: no unit, bad unit, no number, stray characters.
            ("", None),
            ("1", None),
            ("00", None),
            ("s", None),
            (".s", None),
            ("1.5.2s", None),
            ("1S", None),
            ("1d", None),
            ("1 s", None),
            ("1s ", Some(s(1))),
            ("1s2", None),
            ("1s-2s", None),
            ("1e3s", None),
            ("NaNs", None),
            ("0x10s", None),
            // Negative: refused, never a negative wait.
            ("-1s", None),
            ("-0s", None),
            // Too long for a wait, or absurd.
            ("800h", None),
            (&"9".repeat(40), None),
            ("99999999999999999999999999999999999999h", None),
            ("1000000000000000000000000000000ns", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), *expected, "{text:?}");
        }
    }

    #[test]
    fn long_fractions_and_the_clamp() {
        let long = format!("1.{}s", "5".repeat(60));
        assert_eq!(parse(&long), Some(Duration::from_nanos(1_555_555_555)));
        let limit = MAX_DELAY.as_secs();
        assert_eq!(parse(&format!("{limit}s")), Some(MAX_DELAY));
        assert_eq!(parse(&format!("{}s", limit + 1)), None);
    }
}
