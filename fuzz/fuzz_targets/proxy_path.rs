//! Fuzzes the proxy's path handling: `ANY /proxy/{credential}/{*path}`.
//!
//! The input is what follows `/proxy/` in the request target. As in the
//! handler, the request line must first be a valid URI (hyper refuses the
//! rest), then the credential is the first segment and the path the rest;
//! a path the check lets through is joined below the base URL.
//!
//! Beyond "no panic": every target the proxy would send is below the
//! base path, no decoding of its path (once, twice, ...) climbs above the
//! base path with `..`, it holds nothing that could end a request line,
//! and it is exactly what the URL parser makes of the same path and query
//! (the proxy puts a plain path together without it). The raw input is
//! also checked as a path on its own, without the URI parser's filter.
#![no_main]

mod paths;

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use sluice_http::Url;
use sluice_http::forward::{climbs, join, join_by_url};

static BASE: LazyLock<Url> =
    LazyLock::new(|| Url::parse("http://127.0.0.1:9000/base/v1/").expect("a valid base URL"));

/// Joins `path` as the proxy would and checks where it leads.
fn check(path: &str, query: Option<&str>) {
    let joined = join(&BASE, path, query);
    assert_eq!(
        joined,
        join_by_url(&BASE, path, query),
        "{path:?} {query:?}: put together and parsed differ"
    );
    if climbs(path) {
        assert!(joined.is_err(), "{path:?} climbs and was joined");
        return;
    }
    let Ok(target) = joined else {
        return;
    };
    let below = target
        .path()
        .strip_prefix("/base/v1/")
        .unwrap_or_else(|| panic!("{path:?} -> {target} is not below the base path"));
    assert!(
        !paths::climbs_when_decoded(below),
        "{path:?} -> {target} climbs above the base path once decoded"
    );
    // Nothing that could end the request line or start a header.
    let sent = target.as_str();
    assert!(
        !sent.bytes().any(|b| b.is_ascii_control() || b == b' '),
        "{sent:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The path on its own, as `join` may be given it.
    check(&format!("/{text}"), None);

    // Through the URI parser and the handler's split, as a request would go.
    let Ok(uri) = format!("/proxy/{text}").parse::<http::Uri>() else {
        return;
    };
    let rest = uri.path().strip_prefix("/proxy/").unwrap_or_default();
    let (_credential, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, "/"),
    };
    check(path, uri.query());
});
