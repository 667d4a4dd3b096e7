//! A call (what the model asked for) and its completion (what came back).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use smol_str::SmolStr;

use crate::config::{Priority, Spend};
use crate::outcome::Outcome;
use crate::stream::StreamSlot;

/// One tool call: tool + payload (JSON arguments by default) + optional deadline.
///
/// ```
/// let call = sluice::Call::new("search_tickets", serde_json::json!({"query": "refund"}))
///     .deadline(std::time::Duration::from_secs(20));
/// assert_eq!(call.tool(), "search_tickets");
/// ```
#[derive(Debug)]
pub struct Call<P = serde_json::Value> {
    /// Inline up to 23 bytes: a call of a configured tool allocates no
    /// name, as its requests carry the configured tool's shared one.
    pub(crate) tool: SmolStr,
    pub(crate) payload: Arc<P>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) route: Option<Arc<Routing>>,
    pub(crate) priority: Option<Priority>,
    pub(crate) spend: Option<Arc<Spend>>,
}

impl<P> Clone for Call<P> {
    fn clone(&self) -> Self {
        Call {
            tool: self.tool.clone(),
            payload: self.payload.clone(),
            deadline: self.deadline,
            route: self.route.clone(),
            priority: self.priority,
            spend: self.spend.clone(),
        }
    }
}

/// A routed call's destination, with its label as its requests carry it.
#[derive(Debug)]
pub(crate) struct Routing {
    pub(crate) route: Route,
    pub(crate) label: Arc<str>,
}

/// Where a call goes when it names no configured tool: a credential, and
/// whether the request is a read and safe to repeat. The sidecar's proxy
/// uses it for requests that arrive as plain HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The credential it spends.
    pub credential: String,
    /// A read: coalesced and cached within the turn.
    pub read: bool,
    /// Safe to repeat after a failure that may have reached the server.
    pub idempotent: bool,
    /// Its default deadline (else the gate's).
    pub deadline: Option<Duration>,
}

impl Route {
    /// May the call go again after a failure that may have reached the
    /// server? Reads may; writes only when marked idempotent.
    pub fn retry_safe(&self) -> bool {
        self.read || self.idempotent
    }
}

impl Call<serde_json::Value> {
    /// A call of `tool` with JSON arguments.
    pub fn new(tool: &str, args: serde_json::Value) -> Self {
        Call::with_payload(tool, args)
    }
}

impl<P> Call<P> {
    /// A call of `tool` carrying any payload the executor understands.
    pub fn with_payload(tool: &str, payload: P) -> Self {
        Call {
            tool: SmolStr::new(tool),
            payload: Arc::new(payload),
            deadline: None,
            route: None,
            priority: None,
            spend: None,
        }
    }

    /// A call that names no configured tool: `label` identifies it in logs,
    /// outcomes and metrics; `route` says where it goes.
    pub fn routed(label: &str, route: Route, payload: P) -> Self {
        // One copy of a long label: the call's name shares the requests'.
        let label: Arc<str> = Arc::from(label);
        Call {
            tool: SmolStr::from(label.clone()),
            route: Some(Arc::new(Routing { route, label })),
            ..Call::with_payload("", payload)
        }
    }

    /// Sets this call's deadline, overriding its tool's.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Sets this call's priority, overriding its tool's.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// What a routed call spends besides its request (its group, costs,
    /// settles and default priority); a configured tool's own are used
    /// otherwise.
    pub fn spend(mut self, spend: Spend) -> Self {
        self.spend = Some(Arc::new(spend));
        self
    }

    /// The tool's name (or the label of a routed call).
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The payload.
    pub fn payload(&self) -> &P {
        &self.payload
    }
}

/// A call's outcome with the upstream response it came from, if any.
///
/// Harnesses that speak HTTP themselves (the sidecar's proxy, the tower
/// layer) return the response as is; others use only the outcome.
#[derive(Debug, Clone)]
pub struct Completion {
    /// What the model is told.
    pub outcome: Outcome,
    /// The last upstream response, for `ok` and for upstream `error`s.
    pub response: Option<Arc<http::Response<Bytes>>>,
    /// The response's body when it still streams ([`crate::Reply::stream`]),
    /// for the one reader that takes it.
    pub stream: Option<StreamSlot>,
    /// True when another call in the turn answered it: this one joined it
    /// in flight, or was answered from the turn's read cache.
    pub coalesced: bool,
}

impl From<Outcome> for Completion {
    fn from(outcome: Outcome) -> Self {
        Completion {
            outcome,
            response: None,
            stream: None,
            coalesced: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use serde_json::json;

    use crate::{Call, CredentialConfig, Gate, GateConfig, Outcome, Route, ToolConfig};

    /// A name past the 23 bytes a call keeps inline.
    const LONG: &str = "search_the_whole_ticket_archive_by_customer";

    #[tokio::test]
    async fn requests_carry_the_configured_name_or_the_routed_label() {
        let seen: Arc<Mutex<Vec<Arc<str>>>> = Arc::default();
        let log = seen.clone();
        let executor = crate::executor_fn(move |request: crate::Request<serde_json::Value>| {
            log.lock().unwrap().push(request.tool.clone());
            async { Ok(http::Response::new(Bytes::from_static(b"{}"))) }
        });
        let config = GateConfig::default()
            .credential("k", CredentialConfig::with_rate("100/s".parse().unwrap()))
            .tool("search", ToolConfig::write("k"))
            .tool(LONG, ToolConfig::write("k"));
        let gate = Gate::builder(config, executor).build().unwrap();
        let route = Route {
            credential: "k".to_string(),
            read: false,
            idempotent: false,
            deadline: None,
        };
        let label = format!("{LONG}/routed");
        for call in [
            Call::new("search", json!({})),
            Call::new("search", json!({})),
            Call::new(LONG, json!({})),
            Call::new(LONG, json!({})),
            Call::routed(&label, route, json!({})),
        ] {
            assert!(matches!(gate.call(call).await, Outcome::Ok { .. }));
        }
        assert!(matches!(
            gate.call(Call::new("searc", json!({}))).await,
            Outcome::Error { .. }
        ));
        let seen = seen.lock().unwrap();
        let names: Vec<&str> = seen.iter().map(|name| &**name).collect();
        assert_eq!(names, ["search", "search", LONG, LONG, label.as_str()]);
        // A configured tool's requests share the gate's one copy of its
        // name, however long: no call made its own.
        assert!(Arc::ptr_eq(&seen[0], &seen[1]));
        assert!(Arc::ptr_eq(&seen[2], &seen[3]));
        // A routed call's long label is copied once, for its name and its
        // requests alike.
        let routed = Call::routed(
            &label,
            Route {
                credential: "k".to_string(),
                read: false,
                idempotent: false,
                deadline: None,
            },
            json!({}),
        );
        assert_eq!(routed.tool(), label);
        let shared = routed.route.as_ref().unwrap();
        assert_eq!(&*shared.label, label);
        assert_eq!(Arc::strong_count(&shared.label), 2, "one copy, two holders");
    }
}
