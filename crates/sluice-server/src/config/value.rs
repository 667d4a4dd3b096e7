//! Parsers for the file's textual values: durations (`30s`, `500ms`) and sizes (`1MiB`, `64KiB`).

use std::time::Duration;

/// A positive duration such as `30s`, `500ms`, `5m` or `1m 30s`.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let parsed = humantime::parse_duration(text.trim())
        .map_err(|_| format!("{text:?} is not a duration such as \"30s\", \"500ms\" or \"5m\""))?;
    if parsed.is_zero() {
        return Err(format!("{text:?} must be longer than zero"));
    }
    Ok(parsed)
}

/// A duration that may be zero (`"0ms"` turns a margin off).
pub(crate) fn duration_or_zero(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|_| format!("{text:?} is not a duration such as \"20ms\" or \"0ms\""))
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
}
