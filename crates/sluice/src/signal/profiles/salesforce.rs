//! Salesforce's `Sforce-Limit-Info: api-usage=USED/LIMIT`: a rolling 24-hour request quota.
//!
//! Source: Salesforce REST API Developer Guide, "Limit Info Header": every
//! response carries `Sforce-Limit-Info: api-usage=18/5000`, the requests
//! used and allowed in the org's rolling 24 hours (other `name=used/limit`
//! pairs may follow, comma-separated). The window rolls, so a spent quota
//! is assumed to free up a whole day later (never early).

use std::time::Duration;

use super::Profile;
use crate::signal::fields::parse_count;
use crate::signal::{Fields, ResponseClock, ScopeSignal, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "salesforce",
    fields: &["sforce-limit-info"],
    read,
};

const FIELD: &str = "sforce-limit-info";

const DAY: Duration = Duration::from_secs(86_400);

fn read(fields: &Fields<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    let Some(value) = fields.joined(FIELD) else {
        return;
    };
    for pair in value.split(',') {
        let Some((name, usage)) = pair.split_once('=') else {
            continue;
        };
        if name.trim() != "api-usage" {
            continue;
        }
        let Some((used, limit)) = usage.split_once('/') else {
            continue;
        };
        let (Some(used), Some(limit)) = (parse_count(used), parse_count(limit)) else {
            continue;
        };
        let mut report = ScopeSignal::new("api_usage", FIELD);
        report.limit = Some(limit);
        report.remaining = Some(limit.saturating_sub(used));
        report.window = Some(DAY);
        report.reset = (report.remaining == Some(0)).then_some(DAY);
        signal.add_scope(report);
    }
}

#[cfg(test)]
mod tests {
    use crate::signal::testing::{rows, signal};

    #[test]
    fn table() {
        type Expected = Option<(u64, u64, Option<u64>)>;
        let cases: &[(&str, Expected)] = &[
            ("api-usage=18/5000", Some((5_000, 4_982, None))),
            ("api-usage=5000/5000", Some((5_000, 0, Some(86_400_000)))),
            (
                "per-app-api-usage=3/100, api-usage=7/15000",
                Some((15_000, 14_993, None)),
            ),
            ("api-usage=6000/5000", Some((5_000, 0, Some(86_400_000)))),
            ("api-usage=lots", None),
            ("api-usage=1/x", None),
        ];
        for (value, expected) in cases {
            let got = rows(&signal(200, &[("sforce-limit-info", value)]));
            let expected: Vec<_> = expected
                .iter()
                .map(|(l, r, t)| ("api_usage".to_owned(), Some(*l), Some(*r), *t))
                .collect();
            assert_eq!(got, expected, "{value}");
        }
        // Spent: a quota (a policy of a day with nothing left).
        let spent = signal(403, &[("sforce-limit-info", "api-usage=5000/5000")]);
        assert!(spent.scopes[0].is_spent_long_window());
        assert!(spent.throttled);
    }
}
