//! Which tools are reads: the upstream server's `tools/list` annotations, under the configuration's overrides.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::value::RawValue;
use sluice::Route;

use crate::config::ToolOverride;

/// What the server's annotations said about one tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Hints {
    read_only: bool,
    idempotent: bool,
}

/// Every tool's route: credential, read, idempotent, deadline.
///
/// Annotations are hints from the server (the MCP spec says not to trust
/// them from untrusted servers); they only decide coalescing and retries,
/// and `[tools.NAME] read = false` overrides them. A tool not listed yet
/// is a write: nothing is coalesced or retried on a guess.
#[derive(Debug)]
pub(crate) struct Catalog {
    credential: String,
    overrides: BTreeMap<String, ToolOverride>,
    listed: HashMap<String, Hints>,
}

/// The part of a `tools/list` result the proxy reads.
#[derive(Deserialize)]
struct Listing {
    tools: Vec<Listed>,
}

#[derive(Deserialize)]
struct Listed {
    name: String,
    #[serde(default)]
    annotations: Option<Annotations>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Annotations {
    #[serde(default)]
    read_only_hint: Option<bool>,
    #[serde(default)]
    idempotent_hint: Option<bool>,
}

/// Most tools remembered, so that a server cannot grow the proxy's memory without bound.
const MAX_TOOLS: usize = 10_000;

impl Catalog {
    pub(crate) fn new(credential: String, overrides: BTreeMap<String, ToolOverride>) -> Self {
        Catalog {
            credential,
            overrides,
            listed: HashMap::new(),
        }
    }

    /// Learns from one page of a `tools/list` result. A result that does
    /// not have the spec's shape teaches nothing (and is passed on as is).
    pub(crate) fn learn(&mut self, result: &RawValue) {
        let Ok(listing) = serde_json::from_str::<Listing>(result.get()) else {
            tracing::debug!("a tools/list result without a tools array; nothing learned");
            return;
        };
        for tool in listing.tools {
            if self.listed.len() >= MAX_TOOLS && !self.listed.contains_key(&tool.name) {
                break;
            }
            let annotations = tool.annotations.as_ref();
            let hints = Hints {
                read_only: annotations.and_then(|a| a.read_only_hint) == Some(true),
                // The spec: idempotentHint is meaningful only when readOnlyHint is false.
                idempotent: annotations.and_then(|a| a.idempotent_hint) == Some(true),
            };
            self.listed.insert(tool.name, hints);
        }
    }

    /// The server said its tools changed: what it said before no longer holds.
    pub(crate) fn forget(&mut self) {
        self.listed.clear();
    }

    /// Where a call of `tool` goes.
    pub(crate) fn route(&self, tool: &str) -> Route {
        let hints = self.listed.get(tool).copied().unwrap_or_default();
        let set = self.overrides.get(tool);
        let read = set.and_then(|o| o.read).unwrap_or(hints.read_only);
        let idempotent = set
            .and_then(|o| o.idempotent)
            .unwrap_or(read || hints.idempotent);
        Route {
            credential: set
                .and_then(|o| o.credential.clone())
                .unwrap_or_else(|| self.credential.clone()),
            read,
            idempotent,
            deadline: set.and_then(|o| o.deadline),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn annotations_decide_unless_overridden() {
        let overrides = BTreeMap::from([
            (
                "forced_write".to_owned(),
                ToolOverride {
                    read: Some(false),
                    ..ToolOverride::default()
                },
            ),
            (
                "elsewhere".to_owned(),
                ToolOverride {
                    credential: Some("other".to_owned()),
                    deadline: Some(Duration::from_secs(5)),
                    ..ToolOverride::default()
                },
            ),
        ]);
        let mut catalog = Catalog::new("api".to_owned(), overrides);
        // Not listed yet: a write on the proxy's credential.
        let unknown = catalog.route("lookup");
        assert!(!unknown.read && !unknown.idempotent);
        assert_eq!(unknown.credential, "api");

        catalog.learn(&raw(r#"{"tools":[
                {"name":"lookup","annotations":{"readOnlyHint":true}},
                {"name":"put","annotations":{"readOnlyHint":false,"idempotentHint":true}},
                {"name":"forced_write","annotations":{"readOnlyHint":true}},
                {"name":"plain","inputSchema":{}}
            ],"nextCursor":"2"}"#));
        let lookup = catalog.route("lookup");
        assert!(lookup.read && lookup.idempotent);
        let put = catalog.route("put");
        assert!(!put.read && put.idempotent);
        assert!(!catalog.route("forced_write").read);
        assert!(!catalog.route("plain").read);
        let elsewhere = catalog.route("elsewhere");
        assert_eq!(elsewhere.credential, "other");
        assert_eq!(elsewhere.deadline, Some(Duration::from_secs(5)));

        // A malformed listing teaches nothing and breaks nothing.
        catalog.learn(&raw(r#"{"tools":"nope"}"#));
        assert!(catalog.route("lookup").read);

        catalog.forget();
        assert!(!catalog.route("lookup").read);
    }
}
