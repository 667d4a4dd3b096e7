//! Fuzzes the `/v1/turns` body: the handler's parser, then each call
//! rendered against a fixed configuration, as the handler would send it.
//!
//! Beyond "no panic": an accepted body has 1 to `MAX_CALLS` calls with
//! distinct ids and a sane turn id, and prints back to JSON that parses to
//! the same turn; a refused one is a 400 with a message. Every request a
//! call would become goes below its credential's base path, never climbs
//! with `..` however its path is decoded, carries nothing that could end
//! the request line or start a header, and is exactly what the URL parser
//! makes of the rendered path and query.
#![no_main]

mod paths;

use std::collections::HashSet;
use std::sync::LazyLock;

use http::uri::PathAndQuery;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use sluice_http::Url;
use sluice_http::forward::{join, join_by_url};
use sluice_server::SidecarConfig;
use sluice_server::fuzzing::{MAX_CALLS, ParsedTurn, parse_turn};

const TOML: &str = r#"
[credentials.support]
base_url = "http://127.0.0.1:9000/base/v1/"

[tools.search]
credential = "support"
path = "/search.json?query={query}&page={page}"

[tools.get_ticket]
credential = "support"
path = "/tickets/{id}"

[tools.comment]
credential = "support"
method = "POST"
path = "/tickets/{id}/comments/{kind}"
read = false

[tools.delete]
credential = "support"
method = "DELETE"
path = "/tickets/{id}"
read = false
idempotent = true
"#;

static CONFIG: LazyLock<SidecarConfig> = LazyLock::new(|| {
    SidecarConfig::from_toml(TOML, |_| None).expect("the fixed configuration loads")
});

fn printed(turn: &ParsedTurn) -> String {
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .map(|call| {
            let mut object = json!({"id": call.id, "tool": call.tool, "args": call.args});
            if let Some(ms) = call.deadline_ms {
                object["deadline_ms"] = json!(ms);
            }
            object
        })
        .collect();
    let mut object = json!({ "calls": calls });
    if let Some(id) = &turn.turn_id {
        object["turn_id"] = json!(id);
    }
    object.to_string()
}

fuzz_target!(|data: &[u8]| {
    let turn = match parse_turn(data) {
        Ok(turn) => turn,
        Err(refused) => {
            assert_eq!(refused.status, 400, "{refused:?}");
            assert!(!refused.message.is_empty());
            return;
        }
    };
    assert!((1..=MAX_CALLS).contains(&turn.calls.len()));
    assert!(
        turn.turn_id
            .as_ref()
            .is_none_or(|id| (1..=256).contains(&id.len()))
    );
    let ids: HashSet<&str> = turn.calls.iter().map(|call| call.id.as_str()).collect();
    assert_eq!(ids.len(), turn.calls.len(), "ids are distinct");

    let again = parse_turn(printed(&turn).as_bytes()).expect("a printed turn parses");
    assert_eq!(again, turn);

    let config = &*CONFIG;
    let base = &config.credentials["support"].base_url;
    let empty = Map::new();
    for call in &turn.calls {
        let Some(spec) = config.tools.get(&call.tool) else {
            continue;
        };
        let args = match &call.args {
            Value::Null => &empty,
            Value::Object(args) => args,
            _ => continue,
        };
        let Ok(request) = spec.render(args) else {
            continue;
        };
        let joined = join(base, &request.path, request.query.as_deref());
        assert_eq!(
            joined,
            join_by_url(base, &request.path, request.query.as_deref()),
            "{request:?}: put together and parsed differ"
        );
        let Ok(target) = joined else {
            continue;
        };
        check(base, &target);
    }
});

/// A tool's target: below the base path, not climbing once decoded, and
/// nothing that could end the request line (the origin is the base's: a
/// target names none).
fn check(base: &Url, target: &PathAndQuery) {
    let below = target
        .path()
        .strip_prefix(base.path())
        .unwrap_or_else(|| panic!("{target} is not below the base path"));
    assert!(
        !paths::climbs_when_decoded(below),
        "{target} climbs once decoded"
    );
    let sent = target.as_str();
    assert!(
        !sent.bytes().any(|b| b.is_ascii_control() || b == b' '),
        "{sent:?}"
    );
}
