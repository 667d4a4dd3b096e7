//! One response read whole: which profile wins, what a rejection is, and
//! that no header the profiles read is missed.

use std::cell::RefCell;
use std::time::SystemTime;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::read;
use crate::signal::fields::{SIGNAL_PARTS, may_carry_signal};
use crate::signal::{Fields, ResponseClock, Signal, profiles};

/// Every name the profiles ask for, reading `headers`.
fn asked(headers: &HeaderMap) -> Vec<String> {
    let asked = RefCell::new(Vec::new());
    let fields = Fields::recording(headers, &asked);
    let clock = ResponseClock::new(&Fields::new(headers), SystemTime::UNIX_EPOCH);
    let mut signal = Signal::new(200);
    for profile in profiles::ALL {
        (profile.read)(&fields, &clock, &mut signal);
    }
    asked.into_inner()
}

/// A field of every family each profile reads, and then some.
fn full() -> HeaderMap {
    let mut full = HeaderMap::new();
    for (name, value) in [
        ("retry-after", "2"),
        ("retry-after-ms", "2000"),
        ("x-amz-retry-after", "2000"),
        ("ratelimit-policy", "\"burst\";q=100;w=60"),
        ("ratelimit", "\"burst\";r=0;t=30"),
        ("ratelimit-limit", "10"),
        ("ratelimit-remaining", "0"),
        ("ratelimit-reset", "3"),
        ("ratelimit-reason", "jira-burst-based"),
        ("beta-ratelimit-remaining", "0"),
        ("x-beta-ratelimit-reset", "3"),
        ("x-ratelimit-limit", "60"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1700000000"),
        ("x-ratelimit-used", "60"),
        ("x-ratelimit-resource", "search"),
        ("x-ratelimit-nearlimit", "true"),
        ("x-rate-limit-limit", "60"),
        ("x-rate-limit-remaining", "0"),
        ("x-rate-limit-reset", "30"),
        ("x-rate-limit", "700"),
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-tokens", "100"),
        ("x-ratelimit-reset-tokens", "6m0s"),
        ("anthropic-ratelimit-requests-remaining", "0"),
        ("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:00Z"),
        ("x-shopify-shop-api-call-limit", "40/40"),
        (
            "zendesk-ratelimit-tickets-index",
            "total=100; remaining=0; resets=41",
        ),
        ("x-ratelimit-bucket", "abcd"),
        ("x-ratelimit-global", "true"),
        ("x-hubspot-ratelimit-max", "100"),
        ("x-hubspot-ratelimit-daily-remaining", "0"),
        ("sforce-limit-info", "api-usage=5000/5000"),
    ] {
        full.append(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    full
}

#[test]
fn the_fast_path_skips_no_field_a_profile_reads() {
    for headers in [HeaderMap::new(), full()] {
        let asked = asked(&headers);
        assert!(asked.len() > 20, "{asked:?}");
        for name in asked {
            assert!(may_carry_signal(&name), "profiles read {name:?}");
        }
    }
}

/// A profile is skipped for a response with none of the fields it
/// declares: so every name it asks for must be one of them.
#[test]
fn each_profile_asks_only_for_the_fields_it_declares() {
    for headers in [HeaderMap::new(), full()] {
        let clock = ResponseClock::new(&Fields::new(&headers), SystemTime::UNIX_EPOCH);
        for status in [200, 429] {
            for profile in profiles::ALL {
                let asked = RefCell::new(Vec::new());
                let fields = Fields::recording(&headers, &asked);
                (profile.read)(&fields, &clock, &mut Signal::new(status));
                for name in asked.into_inner() {
                    assert!(profile.may_read(&name), "{} reads {name:?}", profile.name);
                }
            }
        }
    }
}

/// Skipping the profiles with no field present, and looking through
/// the fields that may carry a signal alone, change no signal: every
/// field alone, every pair, and all of them, each also among forty
/// fields that carry none (as a real answer's dates, caches and ids).
#[test]
fn skipping_profiles_changes_no_signal() {
    let full = full();
    let every = |headers: &HeaderMap, status: StatusCode| {
        let fields = Fields::new(headers);
        let clock = ResponseClock::new(&fields, SystemTime::UNIX_EPOCH);
        let mut signal = Signal::new(status.as_u16());
        for profile in profiles::ALL {
            (profile.read)(&fields, &clock, &mut signal);
        }
        signal.throttled = super::is_rejection(status, &signal);
        signal
    };
    let fields: Vec<_> = full.iter().collect();
    let mut padded = full.clone();
    padded.append(
        "date",
        HeaderValue::from_static("Tue, 05 Mar 2024 14:00:00 GMT"),
    );
    padded.append("etag", HeaderValue::from_static("\"abc\""));
    let mut maps = vec![full.clone(), padded];
    for (i, (name, value)) in fields.iter().enumerate() {
        for (other, other_value) in &fields[i..] {
            let mut map = HeaderMap::new();
            map.append((*name).clone(), (*value).clone());
            map.append((*other).clone(), (*other_value).clone());
            maps.push(map.clone());
            for i in 0..40 {
                map.append(
                    HeaderName::try_from(format!("x-request-{i}")).unwrap(),
                    HeaderValue::from_static("abc"),
                );
            }
            maps.push(map);
        }
    }
    let mut read_some = 0;
    for map in &maps {
        for status in [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
            let skipping = read(status, map, SystemTime::UNIX_EPOCH);
            assert_eq!(skipping, every(map, status), "{map:?}");
            read_some += usize::from(!skipping.scopes.is_empty());
        }
    }
    assert!(read_some > maps.len(), "{read_some} of {}", maps.len());
}

/// The quick pass looks for "limit" or "retry": every part holds one,
/// so it turns no signal away; a name is a carrier exactly when it
/// holds a part, wherever in the name.
#[test]
fn the_quick_pass_over_a_name_turns_no_carrier_away() {
    for part in SIGNAL_PARTS {
        assert!(part.contains("limit") || part.contains("retry"), "{part}");
        assert!(may_carry_signal(part), "{part}");
        assert!(may_carry_signal(&format!("x-{part}-remaining")), "{part}");
    }
    for name in [
        "content-type",
        "date",
        "limit",
        "x-retry-count",
        "x-limits",
        "ratelimi",
        "etry-after",
        "",
    ] {
        assert!(!may_carry_signal(name), "{name}");
    }
}

#[test]
fn a_response_without_rate_fields_reads_as_empty() {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert(
        "date",
        HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
    );
    let signal = read(StatusCode::TOO_MANY_REQUESTS, &headers, SystemTime::now());
    assert!(signal.throttled);
    assert!(signal.wait().is_none());
    assert!(signal.scopes.is_empty());
    assert!(!read(StatusCode::OK, &headers, SystemTime::now()).throttled);
}
