//! Where a call goes: its route and credential, found once, and the scopes that govern it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Credential, Engine};
use crate::call::{Call, Route};
use crate::config::Spend;
use crate::limiter::Micros;
use crate::outcome::Outcome;
use crate::scope::{Scope, ScopeRef, Scopes};
use crate::signal::DEFAULT_SCOPE;

/// What a call spends when neither it nor its tool says: its request alone.
static NO_SPEND: Spend = Spend::none();

/// A call's route, credential and spend, found once.
pub(crate) struct Routed<'a> {
    /// The name its requests carry: the configured tool's, or the routed
    /// call's label.
    pub(crate) name: &'a Arc<str>,
    pub(crate) route: &'a Route,
    pub(crate) credential: &'a Credential,
    pub(crate) spend: &'a Spend,
}

/// Most scopes the server may create under one credential; more names are
/// folded into the credential's own scope so headers cannot grow memory.
const MAX_REPORTED_SCOPES: usize = 32;
/// Most reported scopes one tool is bound to.
const MAX_BINDINGS_PER_TOOL: usize = 8;

impl<E> Engine<E> {
    /// Where a call goes, the credential it spends and what it spends
    /// besides its request: its routed destination, or its configured
    /// tool's (one look-up of the tool's name). The error is the call's
    /// outcome.
    pub(crate) fn route<'a, P>(&'a self, call: &'a Call<P>) -> Result<Routed<'a>, Outcome> {
        let Some(routing) = &call.route else {
            let (name, tool) = self
                .tools
                .get_key_value(call.tool.as_str())
                .ok_or_else(|| Outcome::error(None, format!("unknown tool {:?}", &*call.tool)))?;
            return Ok(Routed {
                name,
                route: &tool.route,
                credential: &tool.credential,
                spend: call.spend.as_deref().unwrap_or(&tool.spend),
            });
        };
        let route = &routing.route;
        let credential = self
            .credentials
            .get(route.credential.as_str())
            .ok_or_else(|| {
                Outcome::error(None, format!("unknown credential {:?}", route.credential))
            })?;
        Ok(Routed {
            name: &routing.label,
            route,
            credential,
            spend: call.spend.as_deref().unwrap_or(&NO_SPEND),
        })
    }

    /// Every scope a call of `tool` spends from: the credential's own first,
    /// then its group's, then those the server reported for the tool.
    pub(crate) fn scopes_of(
        &self,
        credential: &Credential,
        primary: &ScopeRef,
        tool: &str,
        group: Option<&str>,
        now: Micros,
    ) -> Scopes {
        let mut scopes = Scopes::new();
        scopes.push(primary.clone());
        if let Some(group) = group.and_then(|name| self.group(credential, name, now)) {
            scopes.push(group);
        }
        let bound = self.bound(credential, tool, now);
        scopes.extend(
            bound
                .into_iter()
                .filter(|scope| group.is_none_or(|group| *scope.name != *group)),
        );
        scopes
    }

    /// The credential's limit group `name`, if it configures one.
    pub(crate) fn group(
        &self,
        credential: &Credential,
        name: &str,
        now: Micros,
    ) -> Option<ScopeRef> {
        let (key, limits) = credential.limits.groups.get_key_value(name)?;
        Some(self.scopes.get(
            &credential.name,
            name,
            now,
            || {
                Scope::group(
                    credential.name.clone(),
                    key.clone(),
                    limits,
                    &credential.limits,
                    now,
                )
            },
            &|scope| self.release_own(scope),
        ))
    }

    /// The credential's own scope: kept by its record once made, else
    /// found or made in the registry and kept.
    pub(crate) fn primary(&self, credential: &Credential, now: Micros) -> ScopeRef {
        if let Some((scope, examine)) = credential.own_scope(now) {
            if examine {
                self.scopes
                    .examine_one(now, &|scope| self.release_own(scope));
            }
            return scope;
        }
        let scope = self.scopes.get(
            &credential.name,
            DEFAULT_SCOPE,
            now,
            || {
                Scope::primary(
                    credential.name.clone(),
                    self.default_scope.clone(),
                    &credential.limits,
                    now,
                )
            },
            &|scope| self.release_own(scope),
        );
        credential.keep_own(&scope);
        scope
    }

    /// Whether the record of `scope`'s credential gave it up: asked by the
    /// registry before it forgets an idle scope held once more than by its
    /// table (see [`Credential::release_own`]).
    fn release_own(&self, scope: &Scope) -> bool {
        *scope.name == *DEFAULT_SCOPE
            && self
                .credentials
                .get(&*scope.credential)
                .is_some_and(|credential| credential.release_own(scope))
    }

    /// The scopes the server reported for `tool` on earlier responses.
    fn bound(&self, credential: &Credential, tool: &str, now: Micros) -> Vec<ScopeRef> {
        if !credential.bound.load(Ordering::Acquire) {
            return Vec::new();
        }
        let names = credential
            .bindings
            .lock()
            .get(tool)
            .cloned()
            .unwrap_or_default();
        names
            .iter()
            .map(|name| self.reported(credential, name, now))
            .collect()
    }

    fn reported(&self, credential: &Credential, name: &Arc<str>, now: Micros) -> ScopeRef {
        // A server-reported scope that names a configured group is the group.
        if let Some(group) = self.group(credential, name, now) {
            return group;
        }
        self.scopes.get(
            &credential.name,
            name,
            now,
            || {
                Scope::reported(
                    credential.name.clone(),
                    name.clone(),
                    &credential.limits,
                    now,
                )
            },
            &|scope| self.release_own(scope),
        )
    }

    /// The scope a server report about `name` applies to, binding `tool` to
    /// it. Past the caps, reports fold into the credential's own scope.
    pub(crate) fn scope_for(
        &self,
        credential: &Credential,
        tool: &Arc<str>,
        name: &str,
        now: Micros,
    ) -> ScopeRef {
        if name == DEFAULT_SCOPE {
            return self.primary(credential, now);
        }
        let exists = self.scopes.find(&credential.name, name).is_some()
            || credential.limits.groups.contains_key(name);
        if !exists && self.scopes.count(&credential.name) >= MAX_REPORTED_SCOPES {
            return self.primary(credential, now);
        }
        let name: Arc<str> = {
            let mut bindings = credential.bindings.lock();
            let bound = bindings.entry(tool.clone()).or_default();
            match bound.iter().find(|bound| &***bound == name) {
                Some(bound) => bound.clone(),
                None if bound.len() < MAX_BINDINGS_PER_TOOL => {
                    let name: Arc<str> = Arc::from(name);
                    bound.push(name.clone());
                    credential.bound.store(true, Ordering::Release);
                    name
                }
                None => return self.primary(credential, now),
            }
        };
        self.reported(credential, &name, now)
    }

    /// The scope an outcome is counted on: the one it names, else the
    /// credential's own (`primary`, when the call holds it: no look-up);
    /// `None` if it is not live.
    pub(crate) fn decided_on(
        &self,
        credential: &Credential,
        outcome: &Outcome,
        primary: Option<ScopeRef>,
    ) -> Option<ScopeRef> {
        let name = match outcome {
            Outcome::RateLimited { scope, .. } | Outcome::QuotaExhausted { scope, .. } => {
                scope.as_str()
            }
            _ => DEFAULT_SCOPE,
        };
        // The credential's own scope, when the call already holds it.
        if name == DEFAULT_SCOPE && primary.is_some() {
            return primary;
        }
        self.scopes.find(&credential.name, name)
    }
}
