//! The fake API itself: routes, scripts, limits and records each request, then answers it.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, DATE};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;

use crate::bodies;
use crate::clock::Clock;
use crate::config::{Config, ConfigError, HeaderStyle, Limits, RetryAfter, Usage};
use crate::headers::{Snapshot, add_rate_limit_headers, add_retry_after};
use crate::record::{Record, Stats, to_ms};
use crate::scope::Scope;
use crate::script::Rule;

/// Paths under this are the fake's own control endpoints: never limited, never recorded.
const CONTROL_PREFIX: &str = "/_fake/";

/// The key of requests that carry neither `Authorization` nor `x-api-key`.
pub const ANONYMOUS: &str = "anonymous";

/// A throttling fake API. Cheap to clone: clones share one state.
///
/// Create it inside the tokio runtime whose clock it should follow (on a paused clock in
/// tests); it reads time only through `tokio::time::Instant`.
#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Inner>,
}

/// What every clone of a [`FakeApi`] points at.
struct Inner {
    config: Config,
    clock: Clock,
    state: Mutex<State>,
}

struct State {
    scopes: HashMap<(String, String), Scope>,
    records: Vec<Record>,
    script: VecDeque<Rule>,
    rng: StdRng,
}

impl State {
    fn new(seed: u64) -> Self {
        State {
            scopes: HashMap::new(),
            records: Vec::new(),
            script: VecDeque::new(),
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

/// A decided response and when it is due, as time since the fake started.
pub(crate) struct Planned {
    due: Duration,
    response: Response<Bytes>,
}

/// How the limiter and the script decided one request.
enum Verdict {
    /// Served: a scripted reply, or the ordinary 200 when `None`.
    Served { rule: Option<Rule> },
    /// Throttled; the wait until it would have been admitted.
    Throttled { wait: Duration },
}

/// The header an answer reports its true token usage in, beside `usage.total_tokens` in
/// the body, for clients that settle from a header.
const USAGE_HEADER: &str = "x-usage-total-tokens";

#[derive(Serialize)]
struct OkBody<'a> {
    path: &'a str,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageBody>,
}

/// An LLM API's `usage` object: the tokens the answer really spent.
#[derive(Serialize)]
struct UsageBody {
    total_tokens: u32,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

impl FakeApi {
    /// A fake enforcing `config`, whose clock starts now. Rejects invalid configuration
    /// with an error naming the field.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.validate()?;
        let state = State::new(config.seed);
        Ok(FakeApi {
            inner: Arc::new(Inner {
                config,
                clock: Clock::start(),
                state: Mutex::new(state),
            }),
        })
    }

    /// The configuration it enforces.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The tokio instant it started at: records' times count from here.
    pub fn origin(&self) -> Instant {
        self.inner.clock.origin()
    }

    /// Answers one request as the HTTP server would, without a socket: decides it at once
    /// (now is its start), records it, and returns the response after its latency.
    ///
    /// Besides the fake API, this serves `GET /_fake/stats` and `POST /_fake/reset`.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        let arrived = Instant::now();
        let (parts, body) = request.into_parts();
        let planned = self.decide(&parts.method, &parts.uri, &parts.headers, &body, arrived);
        self.deliver(planned).await
    }

    /// Every request recorded since the start or the last reset, in decision order.
    pub fn requests(&self) -> Vec<Record> {
        self.inner.state.lock().records.clone()
    }

    /// The records with their totals, as `GET /_fake/stats` returns them.
    pub fn stats(&self) -> Stats {
        Stats::new(self.requests())
    }

    /// Forgets every record and all limiter state (and reseeds the latency RNG); keeps the
    /// time origin and the scripted rules not yet consumed.
    pub fn reset(&self) {
        let mut state = self.inner.state.lock();
        let script = std::mem::take(&mut state.script);
        *state = State::new(self.inner.config.seed);
        state.script = script;
    }

    /// Appends a scripted rule to the queue; the first matching request consumes it.
    pub fn script(&self, rule: Rule) {
        self.inner.state.lock().script.push_back(rule);
    }

    /// How many scripted rules are still waiting for a match.
    pub fn pending_rules(&self) -> usize {
        self.inner.state.lock().script.len()
    }

    /// Decides a request that arrived at `arrived` and records it; nothing waits here, so
    /// the HTTP server can call it the moment a request arrives (after reading its body
    /// only when a limit charges a body field, see [`Config::needs_body`]).
    pub(crate) fn decide(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        arrived: Instant,
    ) -> Planned {
        let path = uri.path();
        if path.starts_with(CONTROL_PREFIX) {
            return self.control(method, path);
        }
        let config = &self.inner.config;
        let clock = &self.inner.clock;
        let path_and_query = uri.path_and_query().map_or(path, |both| both.as_str());
        let key = key_of(headers);
        let (resource, _) = config.route(path);
        let limits = config.limits_for(&key, resource);
        // A group inside the default resource spends the default's limits too.
        let parent_name = config.default_resource_name();
        let parent = (config.is_nested(resource) && resource != parent_name)
            .then(|| config.limits_for(&key, parent_name));
        let costs = Costs {
            own: token_charge(limits, headers, body),
            parent: parent.and_then(|limits| token_charge(limits, headers, body)),
            own_charged: Cell::new(None),
            parent_charged: Cell::new(None),
        };
        let usage = limits
            .tokens
            .as_ref()
            .and_then(|tokens| tokens.usage)
            .or_else(|| parent.and_then(|limits| limits.tokens.as_ref()?.usage));

        let mut guard = self.inner.state.lock();
        let now = clock.elapsed(arrived);
        let State {
            scopes,
            records,
            script,
            rng,
        } = &mut *guard;
        let seq = u64::try_from(records.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let mut parent_scope = parent.map(|limits| {
            let mut scope = scopes
                .remove(&(key.clone(), parent_name.to_owned()))
                .unwrap_or_else(|| Scope::new(limits));
            scope.advance(now);
            scope
        });
        let scope = scopes
            .entry((key.clone(), resource.to_owned()))
            .or_insert_with(|| Scope::new(limits));
        scope.advance(now);
        let others = scope.in_flight(now);
        let crowded = scope.is_full(now);

        let verdict = admit(scope, parent_scope.as_mut(), &costs, script, seq, path, now);
        let mut spent = None;
        let (response, latency, served) = match verdict {
            Verdict::Served { rule: Some(rule) } => {
                let reply = rule.reply;
                let mut response = Response::new(reply.body);
                *response.status_mut() = reply.status;
                *response.headers_mut() = reply.headers;
                (response, reply.latency, true)
            }
            Verdict::Served { rule: None } => {
                let latency = config.latency.sample(rng);
                let due = now.saturating_add(latency);
                // The true usage is drawn once and trued up in every budget charged.
                let percent =
                    usage.map(|usage| rng.random_range(usage.min_percent..=usage.max_percent));
                let mut used = None;
                for (scope, charged) in [
                    (Some(&mut *scope), costs.own_charged.get()),
                    (parent_scope.as_mut(), costs.parent_charged.get()),
                ] {
                    let (Some(scope), Some(charged), Some(percent)) = (scope, charged, percent)
                    else {
                        continue;
                    };
                    let true_usage = Usage::of(charged, percent);
                    scope.settle(now, due, charged - true_usage);
                    used.get_or_insert(true_usage);
                }
                spent = used.or(costs.own_charged.get());
                let body = OkBody {
                    path: path_and_query,
                    seq,
                    usage: used.map(|total_tokens| UsageBody { total_tokens }),
                };
                let mut response = json_response(StatusCode::OK, &body);
                if let Some(total) = used {
                    response
                        .headers_mut()
                        .insert(USAGE_HEADER, HeaderValue::from(total));
                }
                let snapshot = scope.snapshot(resource, now);
                let wall_now = clock.wall(now);
                add_rate_limit_headers(config.headers, &snapshot, wall_now, response.headers_mut());
                (response, latency, true)
            }
            Verdict::Throttled { wait } => {
                let snapshot = scope.snapshot(resource, now);
                let response = throttled(config, &snapshot, clock.wall(now), wait);
                let response = bodies::reshape(config.bodies, response, wait, crowded);
                (response, Duration::ZERO, false)
            }
        };
        let due = now.saturating_add(latency);
        if served {
            scope.serve(now, due);
            if let Some(parent_scope) = &mut parent_scope {
                parent_scope.serve(now, due);
            }
        }
        if let Some(parent_scope) = parent_scope {
            scopes.insert((key.clone(), parent_name.to_owned()), parent_scope);
        }
        let status = response.status();
        tracing::debug!(
            %method,
            path = path_and_query,
            resource,
            seq,
            status = status.as_u16(),
            "fake request"
        );
        records.push(Record {
            t_ms: to_ms(now),
            end_ms: to_ms(due),
            key,
            resource: resource.to_owned(),
            method: method.as_str().to_owned(),
            path: path_and_query.to_owned(),
            status: status.as_u16(),
            in_flight: others.saturating_add(u32::from(served)),
            tokens: spent,
        });
        Planned { due, response }
    }

    /// Waits until the response is due, then stamps its `Date`.
    pub(crate) async fn deliver(&self, planned: Planned) -> Response<Bytes> {
        let clock = &self.inner.clock;
        // Only sleep for a latency: tokio's timer rounds every deadline up to
        // its next millisecond tick, so even an elapsed one would add up to a
        // millisecond to an answer that is due now.
        let due = clock.instant(planned.due);
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        let mut response = planned.response;
        let date = httpdate::fmt_http_date(clock.wall(clock.elapsed(Instant::now())));
        if let Ok(date) = HeaderValue::try_from(date) {
            response.headers_mut().insert(DATE, date);
        }
        response
    }

    /// The control endpoints, answered at once.
    fn control(&self, method: &Method, path: &str) -> Planned {
        let response = match (path, method) {
            ("/_fake/stats", &Method::GET) => json_response(StatusCode::OK, &self.stats()),
            ("/_fake/reset", &Method::POST) => {
                self.reset();
                json_response(StatusCode::OK, &serde_json::json!({ "reset": true }))
            }
            ("/_fake/stats", _) => method_not_allowed("GET"),
            ("/_fake/reset", _) => method_not_allowed("POST"),
            _ => json_response(
                StatusCode::NOT_FOUND,
                &ErrorBody {
                    error: "unknown control endpoint; try GET /_fake/stats or POST /_fake/reset",
                },
            ),
        };
        Planned {
            due: self.inner.clock.elapsed(Instant::now()),
            response,
        }
    }
}

impl fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeApi")
            .field("config", &self.inner.config)
            .field("origin", &self.inner.clock.origin())
            .finish_non_exhaustive()
    }
}

/// The token charges of one request: stated (or `None` for the default) per scope, and
/// what each scope was charged once admitted.
struct Costs {
    own: Option<u32>,
    parent: Option<u32>,
    own_charged: Cell<Option<u32>>,
    parent_charged: Cell<Option<u32>>,
}

/// Runs the script and the limiter on request `seq`: a matching rule that bypasses the
/// limiter is served as is; otherwise the scope (and the default resource, for a nested
/// group) must admit the request, all or nothing, and is charged; only then is a matching
/// limited rule consumed.
fn admit(
    scope: &mut Scope,
    parent: Option<&mut Scope>,
    costs: &Costs,
    script: &mut VecDeque<Rule>,
    seq: u64,
    path: &str,
    now: Duration,
) -> Verdict {
    let matched = script.iter().position(|rule| rule.matches(seq, path));
    let bypass = matched
        .and_then(|index| script.get(index))
        .is_some_and(|rule| !rule.limited);
    if !bypass {
        let own = scope.check_costing(now, costs.own);
        let theirs = parent
            .as_ref()
            .map_or(Ok(()), |parent| parent.check_costing(now, costs.parent));
        let wait = [own, theirs]
            .into_iter()
            .filter_map(Result::err)
            .map(|rejection| rejection.wait)
            .max();
        if let Some(wait) = wait {
            return Verdict::Throttled { wait };
        }
        let charged = scope.charge_costing(now, costs.own);
        costs.own_charged.set(scope.has_tokens().then_some(charged));
        if let Some(parent) = parent {
            let charged = parent.charge_costing(now, costs.parent);
            costs
                .parent_charged
                .set(parent.has_tokens().then_some(charged));
        }
    }
    Verdict::Served {
        rule: matched.and_then(|index| script.remove(index)),
    }
}

/// What a request states it costs in `limits`' token budget; `None` for the default.
fn token_charge(limits: &Limits, headers: &HeaderMap, body: &[u8]) -> Option<u32> {
    limits.tokens.as_ref()?.from.as_ref()?.read(headers, body)
}

/// The 429 the limiter answers: the style's headers, and Retry-After as configured.
fn throttled(
    config: &Config,
    snapshot: &Snapshot<'_>,
    wall_now: SystemTime,
    wait: Duration,
) -> Response<Bytes> {
    let body = ErrorBody {
        error: "rate limited",
    };
    let mut response = json_response(StatusCode::TOO_MANY_REQUESTS, &body);
    add_rate_limit_headers(config.headers, snapshot, wall_now, response.headers_mut());
    let announced = match config.retry_after {
        RetryAfter::Auto => Some(wait),
        RetryAfter::Fixed(fixed) => Some(fixed),
        RetryAfter::Off => None,
    };
    // The `none` style imitates a server that sends no rate-limit header at all.
    if let Some(announced) = announced.filter(|_| config.headers != HeaderStyle::None) {
        add_retry_after(announced, response.headers_mut());
    }
    response
}

/// The key a request is limited under: `Authorization`, else `x-api-key`, else anonymous.
fn key_of(headers: &HeaderMap) -> String {
    [AUTHORIZATION.as_str(), "x-api-key"]
        .into_iter()
        .filter_map(|name| headers.get(name))
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .find(|value| !value.is_empty())
        .unwrap_or_else(|| ANONYMOUS.to_owned())
}

fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response<Bytes> {
    let body = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn method_not_allowed(allow: &'static str) -> Response<Bytes> {
    let mut response = json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        &ErrorBody {
            error: "method not allowed",
        },
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}
