//! The call pipeline of DESIGN.md, steps 1 to 9, in that order.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::time::Instant;
use tracing::Instrument;

use crate::Rate;
use crate::call::{Call, Completion, Route};
use crate::executor::{Executor, Payload, Request, TransportError};
use crate::gate::{Credential, Inner};
use crate::limiter::{Micros, NotUntil, Reservation, micros};
use crate::observe::{Event, WaitKind};
use crate::outcome::{Outcome, Reason, body_value};
use crate::retry::{Failure, full_jitter};
use crate::scope::{Adapted, Scope};
use crate::shared::{Decision, Grant, Hold, ReserveRequest, SharedBudget, SharedLimit};
use crate::signal::{self, ScopeSignal, Signal};
use crate::turn::TurnShared;

/// Longest upstream body quoted in an error outcome's message.
const MAX_ERROR_BODY: usize = 1_000;
/// Rounds of re-reserving after penalties voided waiting reservations. The
/// inline budget bounds the time spent; this only guards against spinning.
const MAX_REVOKED: u32 = 256;

/// Reservations held on each of a call's scopes, all for one start.
type Held = Vec<(Arc<Scope>, Reservation)>;

/// One call's fixed facts, resolved once.
struct Job<'a, P> {
    call: &'a Call<P>,
    route: &'a Route,
    credential: &'a Credential,
    deadline: Instant,
    deadline_len: Duration,
}

impl<P> Job<'_, P> {
    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// How an attempt ended when it did not end the call.
struct Failed {
    kind: Failure,
    /// The server asked for a wait (now charged to the scope's cell).
    server_wait: bool,
    response: Option<Arc<http::Response<Bytes>>>,
    message: String,
    blamed: Arc<Scope>,
}

impl<E: Executor> Inner<E> {
    /// Steps 1 to 9 for one call; never fails, never outlives the deadline.
    pub(crate) async fn complete(&self, turn: &TurnShared, call: Call<E::Payload>) -> Completion {
        let started = Instant::now();
        let route = match self.route(&call) {
            Ok(route) => route,
            Err(outcome) => return self.finish(&call, "", None, outcome.into(), started),
        };
        let Some(credential) = self.credentials.get(route.credential.as_str()) else {
            return self.finish(
                &call,
                "",
                None,
                Outcome::error(None, "unknown credential").into(),
                started,
            );
        };
        let deadline_len = call
            .deadline
            .or(route.deadline)
            .unwrap_or(self.defaults.deadline);
        let job = Job {
            call: &call,
            route: &route,
            credential,
            deadline: started + deadline_len,
            deadline_len,
        };
        let span = tracing::debug_span!("call", tool = %call.tool, credential = %credential.name);
        let work = async {
            if deadline_len.is_zero() {
                return Completion::from(Outcome::timed_out(deadline_len, false));
            }
            // Step 1: coalesce reads.
            let key = if route.read {
                call.payload.coalesce_key()
            } else {
                None
            };
            let run = || self.execute(turn, &job);
            match key {
                Some(key) => {
                    let flight = turn.flights.run((call.tool.clone(), key), run);
                    // A joined call keeps its own deadline.
                    match tokio::time::timeout_at(job.deadline, flight).await {
                        Ok(completion) => completion,
                        Err(_) => Outcome::timed_out(deadline_len, true).into(),
                    }
                }
                None => run().await,
            }
        }
        .instrument(span);
        let completion = work.await;
        let decided_on = self.decided_on(credential, &completion.outcome);
        self.finish(&call, &credential.name, decided_on, completion, started)
    }

    /// The scope an outcome is counted on.
    fn decided_on(&self, credential: &Credential, outcome: &Outcome) -> Option<Arc<Scope>> {
        let name = match outcome {
            Outcome::RateLimited { scope, .. } | Outcome::QuotaExhausted { scope, .. } => {
                scope.as_str()
            }
            _ => signal::DEFAULT_SCOPE,
        };
        self.scopes.find(&credential.name, name)
    }

    fn finish(
        &self,
        call: &Call<E::Payload>,
        credential: &str,
        scope: Option<Arc<Scope>>,
        completion: Completion,
        started: Instant,
    ) -> Completion {
        if let Some(scope) = scope {
            scope.record_outcome(&completion.outcome);
        }
        tracing::debug!(tool = %call.tool, status = completion.outcome.status(), shared = completion.shared, "outcome");
        self.observe(Event::Outcome {
            credential,
            tool: &call.tool,
            outcome: &completion.outcome,
            shared: completion.shared,
            elapsed: started.elapsed(),
        });
        completion
    }

    /// Steps 2 to 9 for a call that is not answered by its turn.
    async fn execute(&self, turn: &TurnShared, job: &Job<'_, E::Payload>) -> Completion {
        let now = self.now();
        let primary = self.primary(job.credential, now);

        // Step 2: scope state.
        let mut scopes = self.scopes_of(job, &primary, now);
        if let Some(outcome) = self.held(&scopes, job, now) {
            return outcome.into();
        }

        // Steps 3 and 4: admission, then a concurrency permit.
        let _permit = match primary
            .admit(now, job.deadline, job.remaining(), job.deadline_len)
            .await
        {
            Ok(permit) => permit,
            Err(outcome) => return outcome.into(),
        };

        let mut attempt: u32 = 0;
        loop {
            if !turn.spend_request() {
                let wait = self.next_slot(&primary);
                return Outcome::rate_limited(&primary.name, Reason::TurnBudget, wait, None).into();
            }
            // Step 5: a start slot, waiting inline if it is short and fits.
            if let Err(outcome) = self.reserve(&primary, &scopes, job).await {
                turn.refund_request();
                return outcome.into();
            }

            // Step 6: send with the remaining deadline.
            let sent_at = Instant::now();
            let started = self.micros_at(sent_at);
            primary.on_send(started);
            if attempt == 0 {
                lock(&job.credential.retry).record_request(started);
            }
            let request = Request {
                tool: job.call.tool.clone(),
                credential: job.credential.name.clone(),
                payload: job.call.payload.clone(),
                attempt,
                timeout: job.remaining(),
            };
            let result = {
                let _in_flight = primary.start_request();
                tokio::time::timeout_at(job.deadline, self.executor.execute(request)).await
            };
            let received = Instant::now();
            let latency = received.saturating_duration_since(sent_at);

            // Step 7: learn from whatever came back.
            let failed = match result {
                Err(_elapsed) => {
                    self.observe_request(job, None, latency);
                    return Outcome::timed_out(job.deadline_len, true).into();
                }
                Ok(Err(error)) => {
                    self.observe_request(job, None, latency);
                    transport_failure(error, &primary)
                }
                Ok(Ok(response)) => {
                    self.observe_request(job, Some(response.status().as_u16()), latency);
                    if let Some(cap) = primary.record_latency(latency) {
                        tracing::debug!(scope = %primary.name, cap, latency_ms = latency.as_millis() as u64, "concurrency cap follows rate x latency");
                    }
                    let signal =
                        signal::read(response.status(), response.headers(), SystemTime::now());
                    let blamed = self.learn(job, &signal);
                    let adapted =
                        primary.on_response(started, self.micros_at(received), signal.throttled);
                    self.log_adapted(&primary, &adapted, "auto");
                    match self.classify(response, &signal, blamed) {
                        Ok(completion) => return completion,
                        Err(failed) => failed,
                    }
                }
            };

            // Step 8: retry, or surface what happened.
            let may_retry = failed
                .kind
                .retryable(job.route.idempotent || job.route.read);
            attempt += 1;
            if !may_retry || attempt >= self.defaults.max_attempts {
                return self.give_up(failed, None);
            }
            if !lock(&job.credential.retry).try_retry(self.now()) {
                return self.give_up(failed, Some(Reason::Budget));
            }
            if !failed.server_wait {
                let backoff = {
                    let mut rng = lock(&self.rng);
                    full_jitter(
                        &mut **rng,
                        self.defaults.backoff_base,
                        self.defaults.backoff_cap,
                        attempt - 1,
                    )
                };
                if backoff >= job.remaining() {
                    return self.give_up(failed, None);
                }
                self.observe(Event::Wait {
                    credential: &job.credential.name,
                    scope: &primary.name,
                    wait: backoff,
                    kind: WaitKind::Backoff,
                });
                tracing::debug!(
                    attempt,
                    backoff_ms = backoff.as_millis() as u64,
                    "backing off before a retry"
                );
                tokio::time::sleep(backoff).await;
            }
            self.observe(Event::Retry {
                credential: &job.credential.name,
                tool: &job.call.tool,
                attempt,
            });
            // Retries re-enter the bucket: the server's wait is in the cell now.
            scopes = self.scopes_of(job, &primary, self.now());
        }
    }

    fn scopes_of(
        &self,
        job: &Job<'_, E::Payload>,
        primary: &Arc<Scope>,
        now: Micros,
    ) -> Vec<Arc<Scope>> {
        let mut scopes = vec![primary.clone()];
        scopes.extend(self.bound(job.credential, &job.call.tool, now));
        scopes
    }

    /// Step 2: a spent quota answers at once; so does a server block that
    /// is longer than the inline threshold or than the call has left.
    fn held(
        &self,
        scopes: &[Arc<Scope>],
        job: &Job<'_, E::Payload>,
        now: Micros,
    ) -> Option<Outcome> {
        for scope in scopes {
            let (quota, blocked) = scope.holds(now);
            if let Some(until) = quota {
                return Some(Outcome::quota_exhausted(
                    &scope.name,
                    Duration::from_micros(until - now),
                ));
            }
            if let Some(until) = blocked {
                let wait = Duration::from_micros(until - now);
                if wait > self.defaults.inline_wait || wait >= job.remaining() {
                    tracing::debug!(scope = %scope.name, wait_ms = wait.as_millis() as u64, "scope blocked by the server");
                    return Some(Outcome::rate_limited(
                        &scope.name,
                        Reason::Throttled,
                        wait,
                        None,
                    ));
                }
            }
        }
        None
    }

    /// Step 5: reserves one start slot on every scope, at one common start
    /// (and from the shared budget, for a shared credential), and sleeps
    /// until it when the wait is inline and fits the deadline.
    async fn reserve(
        &self,
        primary: &Scope,
        scopes: &[Arc<Scope>],
        job: &Job<'_, E::Payload>,
    ) -> Result<(), Outcome> {
        // Every wait below counts against one inline budget: a call whose
        // reservations penalties keep voiding re-reserves, and stays below
        // the model's view, until it has waited `inline_wait` in all.
        let began = Instant::now();
        // One clock read per round where nothing awaited in between.
        let mut at = began;
        for _ in 0..MAX_REVOKED {
            let now = self.micros_at(at);
            if let Some(outcome) = self.quota_spent(scopes, now) {
                return Err(outcome);
            }
            let remaining = micros(job.deadline.saturating_duration_since(at));
            if remaining == 0 {
                return Err(Outcome::timed_out(job.deadline_len, false));
            }
            // Never start a wait the deadline cannot pay for: the start must
            // come strictly before the deadline.
            let inline_left = micros(self.defaults.inline_wait)
                .saturating_sub(micros(at.saturating_duration_since(began)));
            let max_wait = inline_left.min(remaining - 1);
            let latest = now + max_wait;
            let mut local = reserve_all(scopes, now, now, max_wait).map_err(|(scope, NotUntil(at))| {
                let wait = Duration::from_micros(at.saturating_sub(now));
                tracing::debug!(scope = %scope.name, wait_ms = wait.as_millis() as u64, "no start slot within the inline wait; deferring");
                Outcome::rate_limited(&scope.name, Reason::Throttled, wait, None)
            })?;
            let mut start = local.first().map_or(now, |(_, r)| r.start());
            let grant = match self.shared_for(job.credential) {
                None => None,
                Some(budget) => {
                    let (at, grant) = self
                        .reserve_shared(budget, scopes, job, &local, start, latest)
                        .await?;
                    if at > start {
                        // The shared budget starts later: move the local slots there.
                        refund_all(&local);
                        let now = self.now();
                        local = match reserve_all(scopes, now, at, latest.saturating_sub(now)) {
                            Ok(local) => local,
                            Err((scope, NotUntil(at))) => {
                                budget.refund(&job.credential.name, grant);
                                let wait = Duration::from_micros(at.saturating_sub(now));
                                return Err(Outcome::rate_limited(
                                    &scope.name,
                                    Reason::Throttled,
                                    wait,
                                    None,
                                ));
                            }
                        };
                        start = local.first().map_or(at, |(_, r)| r.start());
                    }
                    Some((budget, grant))
                }
            };
            // Only the shared budget awaits above.
            let now = if grant.is_some() { self.now() } else { now };
            if start > now {
                let wait = Duration::from_micros(start - now);
                self.observe(Event::Wait {
                    credential: &job.credential.name,
                    scope: &primary.name,
                    wait,
                    kind: WaitKind::Rate,
                });
                tracing::debug!(
                    wait_ms = wait.as_millis() as u64,
                    "waiting inline for a start slot"
                );
                tokio::time::sleep_until(self.instant(start)).await;
            }
            if local.iter().all(|(scope, r)| scope.is_current(r)) {
                return Ok(());
            }
            // A penalty arrived while we waited: give back what still holds
            // and ask again (the penalty may now defer the call).
            refund_all(&local);
            if let Some((budget, grant)) = grant {
                budget.refund(&job.credential.name, grant);
            }
            at = Instant::now();
        }
        let wait = self.next_slot(primary);
        Err(Outcome::rate_limited(
            &primary.name,
            Reason::Throttled,
            wait,
            None,
        ))
    }

    fn shared_for(&self, credential: &Credential) -> Option<&Arc<dyn SharedBudget>> {
        self.shared.as_ref().filter(|_| credential.limits.shared)
    }

    /// Asks the shared budget for a start no earlier than `start` and no
    /// later than `latest`. A denial gives the local slots back, mirrors
    /// what it says onto the local scope, and defers the call.
    async fn reserve_shared(
        &self,
        budget: &Arc<dyn SharedBudget>,
        scopes: &[Arc<Scope>],
        job: &Job<'_, E::Payload>,
        local: &Held,
        start: Micros,
        latest: Micros,
    ) -> Result<(Micros, Grant), Outcome> {
        let names: Vec<&str> = scopes.iter().map(|scope| &*scope.name).collect();
        let limits = &job.credential.limits;
        let enforced = scopes.first().and_then(|primary| primary.enforced());
        let now = self.now();
        let request = ReserveRequest {
            credential: &job.credential.name,
            scopes: &names,
            limit: enforced.map(|rate| SharedLimit {
                rate,
                burst: limits.burst,
            }),
            not_before: Duration::from_micros(start.saturating_sub(now)),
            max_wait: Duration::from_micros(latest.saturating_sub(now)),
        };
        let decision = budget.reserve(request).await;
        let now = self.now();
        match decision {
            Decision::Granted { wait, grant } => Ok((now + micros(wait), grant)),
            Decision::Denied { wait, scope, hold } => {
                refund_all(local);
                tracing::debug!(%scope, wait_ms = wait.as_millis() as u64, ?hold, "the shared budget deferred the call");
                // Mirror what the other processes learned onto this one's scope.
                let held = scopes.iter().find(|s| *s.name == *scope);
                Err(match (hold, held) {
                    (Hold::Quota, Some(held)) => {
                        self.note_exhausted(job.credential, held, wait, now);
                        Outcome::quota_exhausted(&held.name, wait)
                    }
                    (Hold::Quota, None) => Outcome::quota_exhausted(&scope, wait),
                    (Hold::Blocked, Some(held)) => {
                        held.block(now + micros(wait), now);
                        Outcome::rate_limited(&held.name, Reason::Throttled, wait, None)
                    }
                    _ => Outcome::rate_limited(&scope, Reason::Throttled, wait, None),
                })
            }
        }
    }

    fn quota_spent(&self, scopes: &[Arc<Scope>], now: Micros) -> Option<Outcome> {
        scopes.iter().find_map(|scope| {
            let (quota, _) = scope.holds(now);
            quota.map(|until| {
                Outcome::quota_exhausted(&scope.name, Duration::from_micros(until - now))
            })
        })
    }

    /// How long until the scope's next start slot, at least a millisecond.
    fn next_slot(&self, scope: &Scope) -> Duration {
        let now = self.now();
        let wait = match scope.reserve(now, now, Micros::MAX) {
            Ok(reservation) => {
                scope.refund(&reservation);
                reservation.start() - now
            }
            Err(NotUntil(at)) => at.saturating_sub(now),
        };
        Duration::from_micros(wait).max(Duration::from_millis(1))
    }

    /// Step 7: every response is read for rate signals and the scopes synced.
    /// Returns the scope a rejection should be blamed on.
    fn learn(&self, job: &Job<'_, E::Payload>, signal: &Signal) -> Arc<Scope> {
        let now = self.now();
        let credential = job.credential;
        let quota_after = micros(self.defaults.quota_after);
        let limits = &credential.limits;
        for report in &signal.scopes {
            let scope = self.scope_for(credential, &job.call.tool, &report.name, now);
            if limits.learn
                && let Some(stated) = stated_policy(report, limits.policy_window)
            {
                let adapted = scope.learn(stated);
                self.log_adapted(&scope, &adapted, report.source);
            }
            if let (Some(remaining), Some(reset)) = (report.remaining, report.reset) {
                let long = report.is_spent_long_window()
                    || (remaining == 0 && micros(reset) > quota_after);
                // Headroom: what the key's other users are left is not ours to spend.
                let reserve = limits.reserve.map_or(0, |reserve| reserve.of(report.limit));
                let ours = remaining.saturating_sub(reserve);
                scope.sync(ours, now + micros(reset), now);
                if long {
                    self.exhaust(credential, &scope, reset, now);
                } else if ours == 0 {
                    if remaining > 0 {
                        tracing::debug!(scope = %scope.name, remaining, reserve, "leaving the rest of the window to the key's other users");
                    }
                    self.share_block(credential, &scope, reset, Hold::Blocked);
                }
            }
        }
        let blamed = self.scope_for(credential, &job.call.tool, signal.blamed_scope(), now);
        if signal.throttled
            && let Some(wait) = signal.wait()
            && !wait.delay.is_zero()
        {
            let scope = match &wait.scope {
                Some(name) => self.scope_for(credential, &job.call.tool, name, now),
                None => blamed.clone(),
            };
            if micros(wait.delay) > quota_after {
                self.exhaust(credential, &scope, wait.delay, now);
            } else {
                tracing::debug!(scope = %scope.name, wait_ms = wait.delay.as_millis() as u64, source = wait.source, "server asked for a wait");
                scope.penalize(now + micros(wait.delay), now);
                self.share_block(credential, &scope, wait.delay, Hold::Blocked);
            }
            return scope;
        }
        blamed
    }

    /// Says, at debug level, what a scope changed about itself and why.
    fn log_adapted(&self, scope: &Scope, adapted: &Adapted, why: &str) {
        if let Some(rate) = &adapted.rate {
            let rate = rate.map_or_else(|| "none".to_owned(), |rate| rate.to_string());
            tracing::debug!(credential = %scope.credential, scope = %scope.name, %rate, why, "rate in force changed");
        }
        if let Some(cap) = adapted.cap {
            tracing::debug!(credential = %scope.credential, scope = %scope.name, cap, why, "concurrency cap changed");
        }
    }

    /// Tells the other processes on a shared credential what this one learned.
    fn share_block(&self, credential: &Credential, scope: &Scope, wait: Duration, hold: Hold) {
        if let Some(budget) = self.shared_for(credential) {
            budget.block(&credential.name, &scope.name, wait, hold);
        }
    }

    /// A quota this process found spent: marked here and shared.
    fn exhaust(&self, credential: &Credential, scope: &Scope, resets_in: Duration, now: Micros) {
        if self.note_exhausted(credential, scope, resets_in, now) {
            self.share_block(credential, scope, resets_in, Hold::Quota);
        }
    }

    /// Marks a quota spent and tells the operator once; true if it is news.
    fn note_exhausted(
        &self,
        credential: &Credential,
        scope: &Scope,
        resets_in: Duration,
        now: Micros,
    ) -> bool {
        let fresh = scope.exhaust(now + micros(resets_in), now);
        if fresh {
            tracing::error!(
                credential = %credential.name,
                scope = %scope.name,
                resets_in_s = resets_in.as_secs(),
                "quota exhausted: calls on this scope return quota_exhausted without sending until it resets"
            );
            self.observe(Event::QuotaExhausted {
                credential: &credential.name,
                scope: &scope.name,
                resets_in,
            });
        }
        fresh
    }

    /// Sorts a response into the call's outcome, or a failure to consider retrying.
    fn classify(
        &self,
        response: http::Response<Bytes>,
        signal: &Signal,
        blamed: Arc<Scope>,
    ) -> Result<Completion, Failed> {
        let status = response.status();
        if !signal.throttled && status.as_u16() < 400 {
            let outcome = Outcome::Ok {
                http_status: status.as_u16(),
                body: body_value(response.body()),
            };
            return Ok(Completion {
                outcome,
                response: Some(Arc::new(response)),
                shared: false,
            });
        }
        let message = upstream_message(&response);
        let kind = if signal.throttled {
            Failure::Throttled
        } else if status == http::StatusCode::SERVICE_UNAVAILABLE {
            Failure::Unavailable
        } else if status.is_server_error() {
            Failure::ServerError
        } else {
            // Any other 4xx: the request itself was refused; say so.
            let outcome = Outcome::error(Some(status.as_u16()), message);
            return Ok(Completion {
                outcome,
                response: Some(Arc::new(response)),
                shared: false,
            });
        };
        Err(Failed {
            kind,
            server_wait: signal.throttled && signal.wait().is_some_and(|w| !w.delay.is_zero()),
            response: Some(Arc::new(response)),
            message,
            blamed,
        })
    }

    /// The call ends after a failure: a refusal becomes `rate_limited` with
    /// the wait the scope now needs; anything else is reported as it was.
    fn give_up(&self, failed: Failed, reason: Option<Reason>) -> Completion {
        let outcome = match failed.kind {
            Failure::Throttled => {
                let wait = self.next_slot(&failed.blamed);
                Outcome::rate_limited(
                    &failed.blamed.name,
                    reason.unwrap_or(Reason::Throttled),
                    wait,
                    None,
                )
            }
            _ => {
                let status = failed.response.as_ref().map(|r| r.status().as_u16());
                Outcome::error(status, failed.message)
            }
        };
        Completion {
            outcome,
            response: failed.response,
            shared: false,
        }
    }

    fn observe_request(&self, job: &Job<'_, E::Payload>, status: Option<u16>, latency: Duration) {
        self.observe(Event::Request {
            credential: &job.credential.name,
            tool: &job.call.tool,
            status,
            latency,
        });
    }
}

/// Reserves on every scope at one common start time. Scopes can disagree
/// (one is blocked later than another), so the latest start wins and the
/// others are re-reserved there; a few rounds always settle it.
fn reserve_all(
    scopes: &[Arc<Scope>],
    now: Micros,
    not_before: Micros,
    max_wait: Micros,
) -> Result<Held, (Arc<Scope>, NotUntil)> {
    let Some(first) = scopes.first() else {
        return Ok(Vec::new());
    };
    let mut latest = first.clone();
    let mut not_before = not_before.max(now);
    for _ in 0..4 {
        let mut taken: Held = Vec::with_capacity(scopes.len());
        for scope in scopes {
            match scope.reserve(now, not_before, max_wait) {
                Ok(reservation) => {
                    if reservation.start() > not_before {
                        not_before = reservation.start();
                        latest = scope.clone();
                    }
                    taken.push((scope.clone(), reservation));
                }
                Err(not_until) => {
                    refund_all(&taken);
                    return Err((scope.clone(), not_until));
                }
            }
        }
        if taken.iter().all(|(_, r)| r.start() == not_before) {
            return Ok(taken);
        }
        refund_all(&taken);
    }
    Err((latest, NotUntil(not_before)))
}

/// The request rate a report states, if it states one: a limit with a
/// window (its own, or the credential's `policy_window` for headers that
/// never say). Token budgets are not request rates.
fn stated_policy(report: &ScopeSignal, policy_window: Option<Duration>) -> Option<Rate> {
    if report.name.contains("token") {
        return None;
    }
    let count = NonZeroU32::new(u32::try_from(report.limit?).ok()?)?;
    Rate::new(count, report.window.or(policy_window)?)
}

fn refund_all(held: &Held) {
    for (scope, reservation) in held {
        scope.refund(reservation);
    }
}

fn transport_failure(error: TransportError, primary: &Arc<Scope>) -> Failed {
    Failed {
        kind: if error.not_sent {
            Failure::NotSent
        } else {
            Failure::Transport
        },
        server_wait: false,
        response: None,
        message: format!("request failed: {}", error.message),
        blamed: primary.clone(),
    }
}

/// `upstream answered 404: {start of body}`.
fn upstream_message(response: &http::Response<Bytes>) -> String {
    let body = String::from_utf8_lossy(response.body());
    let mut snippet: String = body.chars().take(MAX_ERROR_BODY).collect();
    if snippet.len() < body.len() {
        snippet.push('…');
    }
    if snippet.is_empty() {
        format!("upstream answered {}", response.status())
    } else {
        format!("upstream answered {}: {}", response.status(), snippet)
    }
}

fn lock<T: ?Sized>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
