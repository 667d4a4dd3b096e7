//! Inputs the fuzz targets (`fuzz/`) found, kept as tests: each one failed
//! a property before its fix. The inputs are also in `fuzz/seeds/`.

use crate::support;

use http::StatusCode;
use serde_json::json;
use sluice_http::Url;
use sluice_http::forward::{climbs, join};
use sluice_server::fuzzing::parse_turn;
use support::{Echo, config, get, router, send, turn};

/// `proxy_path`: the URL parser drops tabs and newlines from a path, so
/// `.\t.` or `.\n.` passed the `..` check and reached the upstream as `..`
/// (`..;` for Tomcat-style servers, which read it as `..`).
#[test]
fn tabs_and_newlines_cannot_hide_a_dot_dot() {
    let base = Url::parse("http://127.0.0.1:9000/base/v1/").unwrap();
    for path in [
        "//.\n.;\n/#",
        "/\0\0\0/.\t.;\0/.\t.;",
        "/a/.\t./b",
        "/.\r\n./x",
        "/%2e\t%2e/x",
        "/.%0a./x",
        "/..%\r\r\r2F;/\u{fffd}",
        "/a/..%\t2f",
    ] {
        assert!(climbs(path), "{path:?}");
        assert!(join(&base, path, None).is_err(), "{path:?}");
    }
    // What the URL parser keeps is still joined as before.
    let target = join(&base, "/a/b.c/..d", Some("x=1")).unwrap();
    assert_eq!(target.as_str(), "/base/v1/a/b.c/..d?x=1");
}

/// The same inputs cannot come through a request target at all (the HTTP
/// parser refuses control bytes), and their encoded forms are refused.
#[tokio::test]
async fn encoded_tabs_and_newlines_around_dots_are_refused() {
    let echo = Echo::spawn().await;
    let router = router(config(&format!("{}/api/", echo.url), "", ""));
    for path in ["/proxy/support/.%09./admin", "/proxy/support/.%0A.;/admin"] {
        let reply = send(&router, get(path)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}");
    }
    assert!(echo.seen().is_empty());
}

/// `turns_body`'s round trip holds for what the parser accepts.
#[test]
fn accepted_turns_print_and_parse_back() {
    let turn = parse_turn(br#"{"calls":[{"id":"a","tool":"t","args":{"x":[1,2.5,"\u0000"]},"deadline_ms":1}],"turn_id":"t"}"#).unwrap();
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].deadline_ms, Some(1));
    let refused = parse_turn(b"[]").unwrap_err();
    assert_eq!(refused.status, 400);
}

/// `turns_body`: a float argument came out of the parser one ulp off
/// (serde_json's default float parsing is not exact), so the request sent
/// upstream carried a number the agent never wrote. The workspace now
/// enables serde_json's `float_roundtrip`.
#[tokio::test]
async fn float_arguments_reach_the_upstream_as_written() {
    let input = br#"{"calls":[{"id":"c1","tool":"search","args":{"query":"refund","page":102914184810805067782}}],"turn_id":"t-1"}"#;
    let parsed = parse_turn(input).unwrap();
    let printed = json!({"turn_id": "t-1", "calls": [{"id": "c1", "tool": "search", "args": parsed.calls[0].args}]});
    assert_eq!(parse_turn(printed.to_string().as_bytes()).unwrap(), parsed);

    let echo = Echo::spawn().await;
    let router = router(config(&echo.url, "", ""));
    let body = r#"{"calls":[{"id":"w","tool":"create_ticket","args":{"amount":1.0291418481080508e+20,"rate":0.30000000000000004}}]}"#;
    let reply = send(&router, turn(&serde_json::from_str(body).unwrap())).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let sent = String::from_utf8(echo.seen()[0].body.to_vec()).unwrap();
    assert!(sent.contains("1.0291418481080508e+20"), "{sent}");
    assert!(sent.contains("0.30000000000000004"), "{sent}");
}
