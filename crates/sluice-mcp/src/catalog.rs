//! What each tool is (a read, idempotent, destructive, charged to the credential): the server's `tools/list` annotations, under the configuration's overrides.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::value::RawValue;
use sluice::Route;
use sluice_config::ToolOverride;

use crate::executor::Policy;

/// What the server's annotations said about one tool, with the spec's
/// defaults for what it did not say (MCP 2025-03-26 `ToolAnnotations`:
/// `readOnlyHint` false, `destructiveHint` true, `idempotentHint` false,
/// `openWorldHint` true).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hints {
    read_only: bool,
    idempotent: bool,
    destructive: bool,
    open_world: bool,
}

impl Default for Hints {
    fn default() -> Self {
        Hints {
            read_only: false,
            idempotent: false,
            destructive: true,
            open_world: true,
        }
    }
}

impl Hints {
    /// What an untrusted server's hints are worth. Each spec default is
    /// the narrowest reading of its hint (not a read, not idempotent,
    /// destructive, open world), so no hint can narrow further: an
    /// untrusted server's hints are all ignored, and only `[tools.NAME]`
    /// widens what sluice repeats, coalesces or leaves uncharged.
    fn untrusted(self) -> Hints {
        let _ = self;
        Hints::default()
    }
}

/// Where a call goes and what may be done with it.
#[derive(Debug, Clone)]
pub(crate) struct Routed {
    /// The engine's route: credential, read, idempotent, deadline.
    pub(crate) route: Route,
    /// What may be repeated after the server's answer.
    pub(crate) policy: Policy,
    /// Spends the credential: false for a tool that calls no third-party
    /// API (`openWorldHint: false`), whose calls go straight to the server.
    pub(crate) charged: bool,
}

/// Every tool's route: credential, read, idempotent, destructive, charged, deadline.
///
/// Annotations are hints from the server (the MCP spec says not to trust
/// them from untrusted servers); they decide coalescing, retries and
/// charging, and each `[tools.NAME]` field overrides its hint. With
/// `trust_annotations = false` the hints are read as the spec's defaults,
/// the narrowest reading of each, so they never widen what sluice does. A tool not listed yet is a
/// destructive write: nothing is coalesced or retried on a guess.
#[derive(Debug)]
pub(crate) struct Catalog {
    credential: String,
    overrides: BTreeMap<String, ToolOverride>,
    trusted: bool,
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
    #[serde(default)]
    destructive_hint: Option<bool>,
    #[serde(default)]
    open_world_hint: Option<bool>,
}

/// Most tools remembered, so that a server cannot grow the proxy's memory without bound.
const MAX_TOOLS: usize = 10_000;

impl Catalog {
    pub(crate) fn new(
        credential: String,
        overrides: BTreeMap<String, ToolOverride>,
        trusted: bool,
    ) -> Self {
        Catalog {
            credential,
            overrides,
            trusted,
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
            let said = |hint: fn(&Annotations) -> Option<bool>| annotations.and_then(hint);
            let defaults = Hints::default();
            let hints = Hints {
                read_only: said(|a| a.read_only_hint).unwrap_or(defaults.read_only),
                // The spec: idempotentHint is meaningful only when readOnlyHint is false.
                idempotent: said(|a| a.idempotent_hint).unwrap_or(defaults.idempotent),
                destructive: said(|a| a.destructive_hint).unwrap_or(defaults.destructive),
                open_world: said(|a| a.open_world_hint).unwrap_or(defaults.open_world),
            };
            let hints = if self.trusted {
                hints
            } else {
                hints.untrusted()
            };
            self.listed.insert(tool.name, hints);
        }
    }

    /// The server said its tools changed: what it said before no longer holds.
    pub(crate) fn forget(&mut self) {
        self.listed.clear();
    }

    /// What a call of `tool` spends besides its request, if its
    /// `[tools.NAME]` says (a group, costs, settles or a priority).
    pub(crate) fn spend(&self, tool: &str) -> Option<sluice::Spend> {
        self.overrides
            .get(tool)
            .map(|set| set.spend.clone())
            .filter(|spend| *spend != sluice::Spend::default())
    }

    /// Where a call of `tool` goes.
    #[cfg(test)]
    pub(crate) fn route(&self, tool: &str) -> Route {
        self.routed(tool).route
    }

    /// Where a call of `tool` goes, and what may be done with it.
    pub(crate) fn routed(&self, tool: &str) -> Routed {
        let hints = self.listed.get(tool).copied().unwrap_or_default();
        let set = self.overrides.get(tool);
        let read = set.and_then(|o| o.read).unwrap_or(hints.read_only);
        let idempotent = set
            .and_then(|o| o.idempotent)
            .unwrap_or(read || hints.idempotent);
        // The spec: destructiveHint is meaningful only when readOnlyHint is false.
        let destructive = set
            .and_then(|o| o.destructive)
            .unwrap_or(!read && hints.destructive);
        let charged = set.and_then(|o| o.open_world).unwrap_or(hints.open_world);
        Routed {
            route: Route {
                credential: set
                    .and_then(|o| o.credential.clone())
                    .unwrap_or_else(|| self.credential.clone()),
                read,
                idempotent,
                deadline: set.and_then(|o| o.deadline),
            },
            policy: Policy {
                retry_safe: read || idempotent,
                destructive: destructive && !idempotent,
            },
            charged,
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

    /// Issue 14: `[tools.NAME]`'s cost and priority ride on the call.
    #[test]
    fn a_tools_spend_comes_from_its_override() {
        let mut spend = sluice::Spend::default();
        spend.cost.insert(
            "tokens".to_owned(),
            sluice::Cost::Argument("max_tokens".to_owned()),
        );
        spend.priority = sluice::Priority::Low;
        let overrides = BTreeMap::from([
            (
                "chat".to_owned(),
                ToolOverride {
                    spend: spend.clone(),
                    ..ToolOverride::default()
                },
            ),
            ("plain".to_owned(), ToolOverride::default()),
        ]);
        let catalog = Catalog::new("api".to_owned(), overrides, true);
        assert_eq!(catalog.spend("chat"), Some(spend));
        assert_eq!(catalog.spend("plain"), None);
        assert_eq!(catalog.spend("unknown"), None);
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
        let mut catalog = Catalog::new("api".to_owned(), overrides, true);
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

    #[test]
    fn destructive_and_open_world_hints() {
        let overrides = BTreeMap::from([(
            "local_but_charged".to_owned(),
            ToolOverride {
                open_world: Some(true),
                destructive: Some(false),
                ..ToolOverride::default()
            },
        )]);
        let listing = raw(r#"{"tools":[
                {"name":"delete","annotations":{"destructiveHint":true}},
                {"name":"append","annotations":{"destructiveHint":false}},
                {"name":"put","annotations":{"destructiveHint":true,"idempotentHint":true}},
                {"name":"memory","annotations":{"readOnlyHint":true,"openWorldHint":false}},
                {"name":"local_but_charged","annotations":{"openWorldHint":false}},
                {"name":"bare"}
            ]}"#);
        let mut catalog = Catalog::new("api".to_owned(), overrides.clone(), true);
        catalog.learn(&listing);
        let delete = catalog.routed("delete");
        assert!(delete.policy.destructive && !delete.policy.retry_safe && delete.charged);
        assert!(!catalog.routed("append").policy.destructive);
        // Idempotent: repeating it is safe, destructive or not.
        let put = catalog.routed("put");
        assert!(put.policy.retry_safe && !put.policy.destructive);
        let memory = catalog.routed("memory");
        assert!(!memory.charged && memory.route.read && !memory.policy.destructive);
        let local = catalog.routed("local_but_charged");
        assert!(local.charged && !local.policy.destructive);
        // The spec's defaults: no annotations is a destructive, open-world write.
        let bare = catalog.routed("bare");
        assert!(bare.policy.destructive && bare.charged && !bare.route.read);
        assert!(catalog.routed("never_listed").policy.destructive);

        // An untrusted server's hints never widen: nothing becomes a read,
        // idempotent, non-destructive or uncharged on its word; `[tools.NAME]` still decides.
        let mut untrusted = Catalog::new("api".to_owned(), overrides, false);
        untrusted.learn(&listing);
        let memory = untrusted.routed("memory");
        assert!(memory.charged && !memory.route.read && !memory.policy.retry_safe);
        let put = untrusted.routed("put");
        assert!(!put.policy.retry_safe && put.policy.destructive);
        assert!(untrusted.routed("delete").policy.destructive);
        assert!(untrusted.routed("append").policy.destructive);
        let local = untrusted.routed("local_but_charged");
        assert!(local.charged && !local.policy.destructive);
    }
}
