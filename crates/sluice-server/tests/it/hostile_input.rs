//! Hostile input through the whole router, many times over: random proxy
//! paths and tool arguments built from the pieces that break path handling
//! (`..`, encodings of `.` `/` `\` `%`, `;`, `@`, `//`, another host, CR/LF)
//! never reach another host, never leave the base path however the upstream
//! decodes them, never add a header; an incoming `Authorization` is never
//! forwarded; and a refusal for a missing token says nothing about the path.

use crate::support;

use axum::body::Body;
use http::{Request, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::json;
use sluice_testkit::SplitMix;
use support::{Echo, SECRET, TOKEN, config, get, router, send, turn};

/// Hostile text from a seeded generator: the same inputs on every run.
struct Mix(SplitMix);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn pick<'a>(&mut self, pieces: &[&'a str]) -> &'a str {
        pieces[(self.next() % pieces.len() as u64) as usize]
    }

    /// 1 to `max` pieces, `evil` standing for another host's address.
    fn text(&mut self, max: u64, evil: &str) -> String {
        let pieces = [
            "a",
            "b",
            "/",
            "\\",
            ".",
            "..",
            "...",
            "%2e",
            "%2E",
            "%2f",
            "%2F",
            "%5c",
            "%25",
            "2e",
            "%",
            ";",
            "..;",
            "?",
            "#",
            "@",
            "//",
            "http:",
            "EVIL",
            "%0d%0a",
            "%09",
            "%00",
            "~",
            ":",
            "%40",
            "%3f",
            "%23",
            "x=1&",
            "\r\n",
            "\t",
            "X-Injected: 1",
        ];
        let count = 1 + self.next() % max;
        (0..count)
            .map(|_| self.pick(&pieces).replace("EVIL", evil))
            .collect()
    }
}

/// True when some decoding of `path` (none, once, ...) resolves a `..`
/// segment (by `/` or `\`, or `..;`; tabs and newlines ignored) above its start.
fn climbs_when_decoded(path: &str) -> bool {
    let mut text = path.to_owned();
    for _ in 0..8 {
        let visible: String = text
            .chars()
            .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
            .collect();
        let mut depth: i64 = 0;
        for segment in visible.split(['/', '\\']) {
            if segment == ".." || segment.starts_with("..;") {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            } else if !segment.is_empty() && segment != "." {
                depth += 1;
            }
        }
        let decoded = percent_decode_str(&text).decode_utf8_lossy().into_owned();
        if decoded == text {
            return false;
        }
        text = decoded;
    }
    false
}

#[tokio::test]
async fn random_proxy_paths_stay_on_the_host_and_below_the_base_path() {
    let (good, evil) = (Echo::spawn().await, Echo::spawn().await);
    let evil_addr = evil.url.strip_prefix("http://").unwrap().to_owned();
    let router = router(config(&format!("{}/api/", good.url), "", ""));
    let mut mix = Mix(SplitMix(10));
    let (mut sent, mut refused, mut unparsable) = (0, 0, 0);
    for _ in 0..1_500 {
        let uri = format!("/proxy/support/{}", mix.text(8, &evil_addr));
        let Ok(request) = Request::get(uri.as_str()).body(Body::empty()) else {
            // Not a request target a client can send.
            unparsable += 1;
            continue;
        };
        let before = good.seen().len();
        let reply = send(&router, request).await;
        match reply.status {
            StatusCode::OK => sent += 1,
            StatusCode::BAD_REQUEST => {
                refused += 1;
                assert_eq!(good.seen().len(), before, "{uri}: refused but sent");
            }
            other => panic!("{uri}: {other} {}", reply.text()),
        }
    }
    assert!(
        evil.seen().is_empty(),
        "another host was reached: {:?}",
        evil.seen()
    );
    for seen in good.seen() {
        let path = seen.target.split('?').next().unwrap();
        let below = path
            .strip_prefix("/api/")
            .unwrap_or_else(|| panic!("{} is not below /api/", seen.target));
        assert!(!climbs_when_decoded(below), "{} climbs", seen.target);
        assert!(!seen.headers.contains_key("x-injected"), "{seen:?}");
    }
    eprintln!("{sent} sent, {refused} refused, {unparsable} not sendable");
    assert!(sent > 200 && refused > 50, "both kinds were tried");
}

#[tokio::test]
async fn random_tool_arguments_stay_on_the_host_and_add_no_header() {
    let (good, evil) = (Echo::spawn().await, Echo::spawn().await);
    let evil_addr = evil.url.strip_prefix("http://").unwrap().to_owned();
    let router = router(config(&format!("{}/base/", good.url), "", ""));
    let mut mix = Mix(SplitMix(20));
    let (mut ok, mut refused) = (0, 0);
    for round in 0..100 {
        let calls: Vec<serde_json::Value> = (0..10)
            .map(|i| {
                let value = mix.text(6, &evil_addr);
                let id = format!("c{i}");
                match i % 3 {
                    0 => json!({"id": id, "tool": "get_ticket", "args": {"id": value, "n": round}}),
                    1 => json!({"id": id, "tool": "search_tickets", "args": {"query": value, value.clone(): value, "n": round}}),
                    _ => json!({"id": id, "tool": "create_ticket", "args": {"subject": value, "n": round}}),
                }
            })
            .collect();
        let before = good.seen().len();
        let reply = send(&router, turn(&json!({ "calls": calls }))).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        let results = reply.json()["results"].as_array().unwrap().clone();
        assert_eq!(results.len(), 10);
        let mut answered_ok = 0;
        for result in &results {
            match result["status"].as_str().unwrap() {
                "ok" => answered_ok += 1,
                "error" => {
                    refused += 1;
                    let message = result["message"].as_str().unwrap();
                    assert!(
                        message.contains("base URL") || message.contains("argument"),
                        "{message}"
                    );
                }
                other => panic!("{other}: {result}"),
            }
        }
        ok += answered_ok;
        assert_eq!(
            good.seen().len() - before,
            answered_ok,
            "only answered calls were sent"
        );
    }
    assert!(
        evil.seen().is_empty(),
        "another host was reached: {:?}",
        evil.seen()
    );
    for seen in good.seen() {
        let path = seen.target.split('?').next().unwrap();
        let below = path
            .strip_prefix("/base/api/v2/")
            .unwrap_or_else(|| panic!("{}", seen.target));
        assert!(!climbs_when_decoded(below), "{} climbs", seen.target);
        // The argument is one path segment, however it was written.
        if seen.method == "GET" && below.starts_with("tickets/") {
            assert_eq!(below.matches('/').count(), 1, "{}", seen.target);
        }
        assert!(!seen.headers.contains_key("x-injected"), "{seen:?}");
        let body = String::from_utf8_lossy(&seen.body);
        assert!(!body.contains('\r') && !body.contains('\n'), "{body:?}");
    }
    eprintln!("{ok} sent, {refused} refused");
    assert!(ok > 500, "most calls were sent: {ok}");
}

#[tokio::test]
async fn an_incoming_authorization_is_never_forwarded() {
    let echo = Echo::spawn().await;
    // `support` signs with its secret; `open` has no secret at all.
    let extra = format!(
        "[credentials.open]\nbase_url = \"{}\"\n\n[tools.open_get]\ncredential = \"open\"\npath = \"/o/{{id}}\"\n",
        echo.url
    );
    let router = router(config(&echo.url, "", &extra));
    for path in ["/proxy/support/a", "/proxy/open/b"] {
        let request = Request::get(path)
            .header("authorization", "Bearer client-own-token")
            .header("proxy-authorization", "Basic cHJveHk=")
            .header("x-sluice-deadline-ms", "2000")
            .header("cookie", "session=kept")
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&router, request).await.status, StatusCode::OK);
    }
    let body = json!({"calls": [
        {"id": "a", "tool": "get_ticket", "args": {"id": 1}},
        {"id": "b", "tool": "open_get", "args": {"id": 2}},
    ]});
    let mut request = turn(&body);
    request
        .headers_mut()
        .insert("authorization", "Bearer client-own-token".parse().unwrap());
    send(&router, request).await;
    let seen = echo.seen();
    assert_eq!(seen.len(), 4);
    for request in &seen {
        let auth = request
            .headers
            .get("authorization")
            .map(|v| v.to_str().unwrap());
        if request.target.starts_with("/o/") || request.target == "/b" {
            assert_eq!(auth, None, "no secret, no authorization: {request:?}");
        } else {
            assert_eq!(
                auth,
                Some(format!("Bearer {SECRET}").as_str()),
                "{request:?}"
            );
        }
        assert!(!request.headers.contains_key("proxy-authorization"));
        assert!(
            !request
                .headers
                .keys()
                .any(|k| k.as_str().starts_with("x-sluice-"))
        );
    }
    // End-to-end headers other than credentials go through.
    assert_eq!(seen[0].headers["cookie"], "session=kept");
}

/// Regression: a route's own 405 for a method it does not serve added
/// `Allow` to the 401, telling a client without the token that the path
/// exists (found by `sluice-cli`'s `a_wrong_token_gets_the_same_answer_on_every_path`).
#[tokio::test]
async fn a_refusal_for_the_token_says_nothing_about_the_path() {
    let echo = Echo::spawn().await;
    let router = router(config(
        &echo.url,
        "",
        "[server]\nauth_token_env = \"SLUICE_TOKEN\"",
    ));
    let requests = || {
        [
            ("GET", "/v1/status"),
            ("DELETE", "/v1/status"),
            ("PUT", "/v1/turns"),
            ("GET", "/v1/turns"),
            ("POST", "/metrics"),
            ("PATCH", "/proxy/support/x"),
            ("GET", "/nope"),
        ]
        .map(|(method, path)| {
            Request::builder()
                .method(method)
                .uri(path)
                .body(Body::empty())
                .unwrap()
        })
    };
    let mut replies = Vec::new();
    for request in requests() {
        replies.push(send(&router, request).await);
    }
    for request in requests() {
        let (mut parts, body) = request.into_parts();
        parts
            .headers
            .insert("authorization", "Bearer nope".parse().unwrap());
        replies.push(send(&router, Request::from_parts(parts, body)).await);
    }
    for reply in &replies {
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(reply.headers, replies[0].headers, "the same headers");
        assert_eq!(reply.body, replies[0].body);
        assert!(!reply.headers.contains_key("allow"));
    }
    // With the token, a method a route does not serve is still a 405.
    let request = Request::delete("/v1/turns")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let reply = send(&router, request).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(send(&router, get("/healthz")).await.status, StatusCode::OK);
}
