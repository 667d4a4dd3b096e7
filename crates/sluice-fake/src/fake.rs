//! The fake API itself: routes, scripts, limits and records each request, then answers it.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, DATE};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::config::{Config, ConfigError, HeaderStyle, RetryAfter};
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
    shared: Arc<Shared>,
}

struct Shared {
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

#[derive(Serialize)]
struct OkBody<'a> {
    path: &'a str,
    seq: u64,
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
            shared: Arc::new(Shared {
                config,
                clock: Clock::start(),
                state: Mutex::new(state),
            }),
        })
    }

    /// The configuration it enforces.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The tokio instant it started at: records' times count from here.
    pub fn origin(&self) -> Instant {
        self.shared.clock.origin()
    }

    /// Answers one request as the HTTP server would, without a socket: decides it at once
    /// (now is its start), records it, and returns the response after its latency.
    ///
    /// Besides the fake API, this serves `GET /_fake/stats` and `POST /_fake/reset`.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        let planned = self.decide(request.method(), request.uri(), request.headers());
        self.deliver(planned).await
    }

    /// Every request recorded since the start or the last reset, in decision order.
    pub fn requests(&self) -> Vec<Record> {
        self.lock().records.clone()
    }

    /// The records with their totals, as `GET /_fake/stats` returns them.
    pub fn stats(&self) -> Stats {
        Stats::new(self.requests())
    }

    /// Forgets every record and all limiter state (and reseeds the latency RNG); keeps the
    /// time origin and the scripted rules not yet consumed.
    pub fn reset(&self) {
        let mut state = self.lock();
        let script = std::mem::take(&mut state.script);
        *state = State::new(self.shared.config.seed);
        state.script = script;
    }

    /// Appends a scripted rule to the queue; the first matching request consumes it.
    pub fn script(&self, rule: Rule) {
        self.lock().script.push_back(rule);
    }

    /// How many scripted rules are still waiting for a match.
    pub fn pending_rules(&self) -> usize {
        self.lock().script.len()
    }

    /// Decides a request at the current instant and records it; nothing waits here, so the
    /// HTTP server can call it the moment a request arrives.
    pub(crate) fn decide(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Planned {
        let path = uri.path();
        if path.starts_with(CONTROL_PREFIX) {
            return self.control(method, path);
        }
        let config = &self.shared.config;
        let clock = &self.shared.clock;
        let path_and_query = uri.path_and_query().map_or(path, |both| both.as_str());
        let key = key_of(headers);
        let (resource, _) = config.route(path);
        let limits = config.limits_for(&key, resource);

        let mut guard = self.lock();
        let now = clock.elapsed(Instant::now());
        let State {
            scopes,
            records,
            script,
            rng,
        } = &mut *guard;
        let seq = u64::try_from(records.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let scope = scopes
            .entry((key.clone(), resource.to_owned()))
            .or_insert_with(|| Scope::new(limits));
        let others = scope.in_flight(now);

        let verdict = admit(scope, script, seq, path, now);
        let (response, latency, served) = match verdict {
            Verdict::Served { rule: Some(rule) } => {
                let reply = rule.reply;
                let mut response = Response::new(reply.body);
                *response.status_mut() = reply.status;
                *response.headers_mut() = reply.headers;
                (response, reply.latency, true)
            }
            Verdict::Served { rule: None } => {
                let body = OkBody {
                    path: path_and_query,
                    seq,
                };
                let mut response = json_response(StatusCode::OK, &body);
                let snapshot = scope.snapshot(resource, now);
                let wall_now = clock.wall(now);
                add_rate_limit_headers(config.headers, &snapshot, wall_now, response.headers_mut());
                (response, config.latency.sample(rng), true)
            }
            Verdict::Throttled { wait } => {
                let snapshot = scope.snapshot(resource, now);
                let response = throttled(config, &snapshot, clock.wall(now), wait);
                (response, Duration::ZERO, false)
            }
        };
        let due = now.saturating_add(latency);
        if served {
            scope.serve(now, due);
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
        });
        Planned { due, response }
    }

    /// Waits until the response is due, then stamps its `Date`.
    pub(crate) async fn deliver(&self, planned: Planned) -> Response<Bytes> {
        let clock = &self.shared.clock;
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
            due: self.shared.clock.elapsed(Instant::now()),
            response,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, and the state stays consistent if it did.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeApi")
            .field("config", &self.shared.config)
            .field("origin", &self.shared.clock.origin())
            .finish_non_exhaustive()
    }
}

/// Runs the script and the limiter on request `seq`: a matching rule that bypasses the
/// limiter is served as is; otherwise the scope must admit the request (and is charged),
/// and only then is a matching limited rule consumed.
fn admit(
    scope: &mut Scope,
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
        if let Err(rejection) = scope.check(now) {
            return Verdict::Throttled {
                wait: rejection.wait,
            };
        }
        scope.charge(now);
    }
    Verdict::Served {
        rule: matched.and_then(|index| script.remove(index)),
    }
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
