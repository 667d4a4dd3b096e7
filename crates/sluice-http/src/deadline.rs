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
}
