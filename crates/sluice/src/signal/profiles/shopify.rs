//! Shopify's `X-Shopify-Shop-Api-Call-Limit: 32/40`: how full the key's leaky bucket is.
//!
//! Shopify REST Admin API docs ("REST Admin API rate limits"): requests fill
//! a bucket that leaks at a steady rate; the header says `used/capacity`.
//! What remains is `capacity - used`. The bucket never resets all at once: a
//! slot frees each time one request leaks out, so the reset reported is the
//! time for one slot to leak. Shopify's `Retry-After` on a 429 is read by the
//! `retry_after` profile and takes precedence.

use std::time::Duration;

use super::Profile;
use crate::signal::fields::parse_integer;
use crate::signal::{DEFAULT_SCOPE, Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "shopify",
    fields: &["x-shopify-shop-api-call-limit"],
    read,
};

const FIELD: &str = "x-shopify-shop-api-call-limit";

/// Time for one slot to leak. Shopify's docs: the standard plan's bucket of
/// 40 leaks 2 requests a second (Advanced 4/s, Plus 20/s). The header does
/// not say the plan, so the slowest leak is assumed: on faster plans a full
/// bucket waits a little longer than it must, never less.
const SLOT_LEAK: Duration = Duration::from_millis(500);

fn read(fields: &Fields<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    // Repeated values: the fullest bucket binds.
    let fullest = fields
        .elements(FIELD)
        .filter_map(used_of_capacity)
        .min_by_key(|(used, capacity)| capacity.saturating_sub(*used));
    if let Some((used, capacity)) = fullest {
        let mut report = ScopeSignal::new(DEFAULT_SCOPE, FIELD);
        report.limit = Some(capacity);
        report.remaining = Some(capacity.saturating_sub(used));
        // An empty bucket has nothing to leak.
        report.reset = (used > 0).then_some(SLOT_LEAK);
        // A full bucket drains in capacity x leak time: as a window, the
        // stated policy is `capacity` per that long (40 per 20 s = 2/s).
        report.window = Some(SLOT_LEAK * u32::try_from(capacity).unwrap_or(u32::MAX));
        signal.add_scope(report);
    }
}

/// `used/capacity`, capacity above zero; more used than capacity is allowed
/// (the bucket is full) and leaves nothing remaining.
fn used_of_capacity(text: &str) -> Option<(u64, u64)> {
    let (used, capacity) = text.split_once('/')?;
    let capacity = parse_integer(capacity).filter(|c| *c > 0)?;
    Some((parse_integer(used)?, capacity))
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::signal;
    use std::time::Duration;

    use crate::signal::Signal;

    type Row = (Option<u64>, Option<u64>, Option<u64>);

    fn row(signal: &Signal) -> Option<Row> {
        let scope = signal.scopes.first()?;
        assert_eq!(scope.name, "api_key");
        let reset = scope.reset.map(|r| u64::try_from(r.as_millis()).unwrap());
        Some((scope.limit, scope.remaining, reset))
    }

    #[test]
    fn table() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<Row>);
        let cases: &[Case<'_>] = &[
            (
                &[("X-Shopify-Shop-Api-Call-Limit", "32/40")],
                Some((Some(40), Some(8), Some(500))),
            ),
            (
                &[("x-shopify-shop-api-call-limit", "40/40")],
                Some((Some(40), Some(0), Some(500))),
            ),
            (
                &[("x-shopify-shop-api-call-limit", "1/80")],
                Some((Some(80), Some(79), Some(500))),
            ),
            (
                &[("x-shopify-shop-api-call-limit", "0/40")],
                Some((Some(40), Some(40), None)),
            ),
            (
                &[("x-shopify-shop-api-call-limit", " 45 / 40 ")],
                Some((Some(40), Some(0), Some(500))),
            ),
            // Repeated: the fullest binds.
            (
                &[
                    ("x-shopify-shop-api-call-limit", "3/40"),
                    ("X-SHOPIFY-SHOP-API-CALL-LIMIT", "39/40"),
                ],
                Some((Some(40), Some(1), Some(500))),
            ),
            // Garbage, negatives, zero capacity, 40 digits, decimals.
            (&[("x-shopify-shop-api-call-limit", "32")], None),
            (&[("x-shopify-shop-api-call-limit", "-1/40")], None),
            (&[("x-shopify-shop-api-call-limit", "1/0")], None),
            (&[("x-shopify-shop-api-call-limit", "32/40/80")], None),
            (&[("x-shopify-shop-api-call-limit", "1.5/40")], None),
            (
                &[(
                    "x-shopify-shop-api-call-limit",
                    "1/1234567890123456789012345678901234567890",
                )],
                None,
            ),
            (&[("x-shopify-shop-api-call-limit", "/")], None),
        ];
        for (headers, expected) in cases {
            assert_eq!(row(&signal(200, headers)), *expected, "{headers:?}");
        }
    }

    #[test]
    fn a_full_bucket_waits_one_leak_and_retry_after_wins_on_429() {
        let s = signal(200, &[("x-shopify-shop-api-call-limit", "40/40")]);
        assert_eq!(s.wait().unwrap().delay, Duration::from_millis(500));
        let s = signal(
            429,
            &[
                ("x-shopify-shop-api-call-limit", "40/40"),
                ("retry-after", "2.0"),
            ],
        );
        assert!(s.throttled);
        let wait = s.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.source),
            (Duration::from_secs(2), "retry-after")
        );
    }
}
