//! Client-given deadlines (`deadline_ms` in `/v1/turns`, the proxy's
//! `x-sluice-deadline-ms`): refused outside 1 ms to [`MAX_DURATION`], so no
//! request value reaches the engine's clock arithmetic, then capped.

use std::time::Duration;

use sluice_config::MAX_DURATION;

/// Why a client-given deadline is refused; the caller names the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Zero milliseconds.
    Zero,
    /// Longer than [`MAX_DURATION`]; carries that bound in milliseconds.
    TooLong(u128),
}

/// `ms` as a deadline, at most `cap` (the shutdown grace period's base).
pub fn client_deadline(ms: u64, cap: Duration) -> Result<Duration, Refused> {
    let deadline = Duration::from_millis(ms);
    if deadline.is_zero() {
        return Err(Refused::Zero);
    }
    if deadline > MAX_DURATION {
        return Err(Refused::TooLong(MAX_DURATION.as_millis()));
    }
    Ok(deadline.min(cap))
}

/// A call's `deadline_ms` (a `/v1/turns` call's, a Python call's): none,
/// or bounded and capped as [`client_deadline`] does; the refusal is the
/// message, naming the field.
pub fn call_deadline(deadline_ms: Option<u64>, cap: Duration) -> Result<Option<Duration>, String> {
    match deadline_ms.map(|ms| client_deadline(ms, cap)) {
        None => Ok(None),
        Some(Ok(deadline)) => Ok(Some(deadline)),
        Some(Err(Refused::Zero)) => Err("deadline_ms must be at least 1".to_owned()),
        Some(Err(Refused::TooLong(max))) => Err(format!(
            "deadline_ms must be at most {max} (the longest allowed duration)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_bounded_then_capped() {
        let cap = Duration::from_secs(300);
        assert_eq!(client_deadline(0, cap), Err(Refused::Zero));
        assert_eq!(client_deadline(1, cap), Ok(Duration::from_millis(1)));
        assert_eq!(client_deadline(3_600_000, cap), Ok(cap));
        let week = u64::try_from(MAX_DURATION.as_millis()).unwrap();
        assert_eq!(client_deadline(week, cap), Ok(cap));
        for huge in [week + 1, 1_000_000_000_000_000, u64::MAX] {
            assert_eq!(
                client_deadline(huge, cap),
                Err(Refused::TooLong(u128::from(week)))
            );
        }
    }

    #[test]
    fn a_calls_deadline_refusal_names_the_field() {
        let cap = Duration::from_secs(300);
        assert_eq!(call_deadline(None, cap), Ok(None));
        assert_eq!(
            call_deadline(Some(10), cap),
            Ok(Some(Duration::from_millis(10)))
        );
        assert_eq!(
            call_deadline(Some(0), cap),
            Err("deadline_ms must be at least 1".to_owned())
        );
        assert_eq!(
            call_deadline(Some(u64::MAX), cap),
            Err("deadline_ms must be at most 604800000 (the longest allowed duration)".to_owned())
        );
    }
}
