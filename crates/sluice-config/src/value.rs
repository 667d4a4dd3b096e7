//! Parsers for the file's textual values: durations (`30s`, `500ms`), sizes
//! (`1MiB`, `64KiB`) and names, each bounded so that no accepted value can
//! overflow later.

use std::time::Duration;

use crate::error::ConfigError;

/// The longest duration any field of the file may hold: a week, the
/// engine's Deadline::MAX_LEN. Every deadline, wait and window the engine
/// adds to a clock stays far from overflowing it.
pub const MAX_DURATION: Duration = sluice::Deadline::MAX_LEN;

/// A positive duration such as `30s`, `500ms`, `5m` or `1m 30s`, at most [`MAX_DURATION`].
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let parsed = parse(text, "\"30s\", \"500ms\" or \"5m\"")?;
    if parsed.is_zero() {
        return Err(format!("{text:?} must be longer than zero"));
    }
    Ok(parsed)
}

/// A duration that may be zero (`"0ms"` turns a margin off), at most [`MAX_DURATION`].
pub(crate) fn duration_or_zero(text: &str) -> Result<Duration, String> {
    parse(text, "\"20ms\" or \"0ms\"")
}

/// [`duration`], its error naming `field`.
pub(crate) fn duration_field(text: &str, field: &str) -> Result<Duration, ConfigError> {
    duration(text).map_err(|message| ConfigError::invalid(field, message))
}

fn parse(text: &str, examples: &str) -> Result<Duration, String> {
    let too_long = || {
        format!(
            "{text:?} is longer than the longest allowed duration ({})",
            short(MAX_DURATION)
        )
    };
    let parsed = humantime::parse_duration(text.trim()).map_err(|error| {
        // A whole number too large for humantime is too long, not malformed;
        // an overflow in a fraction is a precision problem.
        if matches!(error, humantime::DurationError::NumberOverflow) && !text.contains('.') {
            too_long()
        } else {
            format!("{text:?} is not a duration such as {examples}")
        }
    })?;
    if parsed > MAX_DURATION {
        return Err(too_long());
    }
    Ok(parsed)
}

/// A whole duration in its largest exact unit: `7d`, `36h`, `90s`.
fn short(duration: Duration) -> String {
    let seconds = duration.as_secs();
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    for (size, unit) in units {
        if seconds > 0 && seconds.is_multiple_of(size) && duration.subsec_nanos() == 0 {
            return format!("{}{unit}", seconds / size);
        }
    }
    humantime::format_duration(duration).to_string()
}

/// A positive number of bytes: a whole number, optionally with a unit, either
/// binary (`KiB`, `MiB`, `GiB`) or decimal (`KB`, `MB`, `GB`); case does not matter.
pub(crate) fn size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let shape = || format!("{text:?} is not a size such as \"1MiB\", \"64KiB\" or \"1000000\"");
    let number: u64 = number.parse().map_err(|_| shape())?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" => 1 << 10,
        "mb" => 1_000_000,
        "mib" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        _ => return Err(shape()),
    };
    let bytes = number
        .checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if bytes == 0 {
        return Err(format!("{text:?} must be at least one byte"));
    }
    Ok(bytes)
}

/// Names appear in URLs (`/proxy/NAME/...`), metrics and logs: keep them plain.
pub(crate) fn name(name: &str, field: &str) -> Result<(), ConfigError> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            field,
            "names must be 1 to 64 ASCII letters, digits, '_', '-' or '.'",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration(" 500ms "), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1m 30s"), Ok(Duration::from_secs(90)));
        for bad in ["0s", "-5s", "soon", "", "30"] {
            assert!(duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(duration_or_zero("0ms"), Ok(Duration::ZERO));
        assert!(duration_or_zero("-1ms").is_err());
    }

    #[test]
    fn durations_are_at_most_a_week() {
        assert_eq!(duration("7d"), Ok(MAX_DURATION));
        assert_eq!(duration("1week"), Ok(MAX_DURATION));
        let too_long = "is longer than the longest allowed duration (7d)";
        for text in ["7d 1ns", "8d", "300000000000y", "99999999999999999999999s"] {
            for result in [duration(text), duration_or_zero(text)] {
                let message = result.unwrap_err();
                assert_eq!(message, format!("{text:?} {too_long}"));
            }
        }
        let error = duration_field("300000000000y", "tools.x.deadline").unwrap_err();
        assert_eq!(error.field(), Some("tools.x.deadline"));
        assert_eq!(
            error.to_string(),
            "tools.x.deadline: \"300000000000y\" is longer than the longest allowed duration (7d)"
        );
    }

    #[test]
    fn the_bound_is_shown_in_its_largest_exact_unit() {
        assert_eq!(short(MAX_DURATION), "7d");
        assert_eq!(short(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(short(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn sizes() {
        assert_eq!(size("1MiB"), Ok(1 << 20));
        assert_eq!(size("64KiB"), Ok(64 * 1024));
        assert_eq!(size("64 kib"), Ok(64 * 1024));
        assert_eq!(size("2MB"), Ok(2_000_000));
        assert_eq!(size("512"), Ok(512));
        assert_eq!(size("512B"), Ok(512));
        for bad in [
            "0",
            "0MiB",
            "-1MiB",
            "1.5MiB",
            "1 furlong",
            "MiB",
            "99999999999GiB",
        ] {
            assert!(size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names() {
        assert!(name("support-v2.eu_1", "credentials.x").is_ok());
        for bad in ["", "sup port", "a/b", &"x".repeat(65)] {
            assert_eq!(
                name(bad, "credentials.x").unwrap_err().field(),
                Some("credentials.x")
            );
        }
    }
}
