//! Shadow mode (`enforce = false`, issue 20): each step's decision is recorded where enforcing would act on it, and the call goes on.
//!
//! The driver asks a [`Recorder`] instead of acting: a step-2 hold, a
//! full admission queue, a rate wait or a deferral is counted on its
//! scope ([`crate::scope::ScopeStatus::shadow`]), reported to the observer
//! ([`Event::Shadow`]) and, for a deferral or a shed, logged at info
//! level; then the call is sent at once. One decision per call: its first
//! refusal (enforcing would have stopped there), else its waits (in the
//! queue and for a slot) as one wait.

use std::time::Duration;

use tokio::time::Instant;

use super::job::Job;
use crate::engine::Engine;
use crate::limiter::Micros;
use crate::observe::{Event, ShadowDecision};
use crate::outcome::Outcome;
use crate::scope::{AdmittedNow, Scope, ScopeRef};

/// One shadow-mode call's record of what enforcing would have done.
pub(super) struct Recorder<'r, 'j, E, P> {
    engine: &'r Engine<E>,
    job: &'r Job<'j, P>,
    /// A deferral or a shed was recorded: enforcing would have stopped.
    refused: bool,
    /// Waits so far (in the queue, for a slot): one wait when the call is
    /// sent, counted on the scope of the longest of them.
    waited: Duration,
    longest: Option<(ScopeRef, Duration)>,
}

impl<'r, 'j, E, P> Recorder<'r, 'j, E, P> {
    pub(super) fn new(engine: &'r Engine<E>, job: &'r Job<'j, P>) -> Self {
        Recorder {
            engine,
            job,
            refused: false,
            waited: Duration::ZERO,
            longest: None,
        }
    }

    /// Enforcing would have made the call wait `wait` on `scope` here.
    pub(super) fn wait(&mut self, scope: &ScopeRef, wait: Duration) {
        self.waited = self.waited.saturating_add(wait);
        if self
            .longest
            .as_ref()
            .is_none_or(|(_, longest)| wait > *longest)
        {
            self.longest = Some((scope.clone(), wait));
        }
    }

    /// Enforcing would have deferred or shed the call on `scope`, telling
    /// it to come back after `wait`; what it would have waited before does
    /// not count (it would have been refused all the same).
    pub(super) fn refuse(&mut self, scope: &Scope, decision: ShadowDecision, wait: Duration) {
        if !self.refused {
            self.refused = true;
            self.longest = None;
            self.report(scope, decision, wait);
        }
    }

    /// The call is being sent: its waits, if it had any, are one wait.
    pub(super) fn sent(&mut self) {
        if let Some((scope, _)) = self.longest.take() {
            self.report(&scope, ShadowDecision::Wait, self.waited);
        }
    }

    fn report(&self, scope: &Scope, decision: ShadowDecision, wait: Duration) {
        let (job, credential) = (self.job, &self.job.credential.name);
        scope.record_shadow(decision, wait);
        self.engine.observe(Event::Shadow {
            credential,
            scope: &scope.name,
            tool: &job.call.tool,
            decision,
            wait,
        });
        let wait_ms = wait.as_millis() as u64;
        if decision == ShadowDecision::Wait {
            tracing::debug!(%credential, scope = %scope.name, tool = %job.call.tool, wait_ms,
                "shadow mode: sluice would have waited inline; sent at once");
        } else {
            tracing::info!(%credential, scope = %scope.name, tool = %job.call.tool,
                decision = decision.as_str(), wait_ms,
                "shadow mode: sluice would have deferred this call; sent at once");
        }
    }

    /// Step 2's answer, which enforcing would have returned without
    /// sending: a deferral on the scope it names.
    pub(super) fn held(&mut self, scopes: &[ScopeRef], outcome: &Outcome) {
        let (name, wait_ms) = match outcome {
            Outcome::RateLimited {
                scope,
                retry_after_ms,
                ..
            }
            | Outcome::QuotaExhausted {
                scope,
                retry_after_ms,
                ..
            } => (scope.as_str(), *retry_after_ms),
            _ => return,
        };
        if let Some(scope) = scopes.iter().find(|scope| *scope.name == *name) {
            let wait = Duration::from_millis(wait_ms);
            self.refuse(scope, ShadowDecision::Defer, wait);
        }
    }

    /// Steps 3 and 4 without waiting: a permit if one is free, else the
    /// queue's verdict, recorded. The call holds what comes back while it runs.
    pub(super) fn admit<'s>(
        &mut self,
        primary: &'s ScopeRef,
        now: Micros,
        at: Instant,
    ) -> AdmittedNow<'s> {
        let admitted = primary.admit_now(now, at, &self.job.deadline);
        match &admitted {
            AdmittedNow::Permit { .. } => {}
            AdmittedNow::Wait { wait, .. } => self.wait(primary, *wait),
            AdmittedNow::Shed { wait } => self.refuse(primary, ShadowDecision::Shed, *wait),
        }
        admitted
    }
}
