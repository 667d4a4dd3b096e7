//! What this process knows of a credential's blocks and spent quotas, from replies, events and its own calls.
//!
//! Pure state on local instants. Holds only ever extend (a later end wins),
//! as in Redis, so merging several sources in any order gives the same view.

use std::collections::HashMap;

use tokio::time::Instant;

use crate::store::View;

/// The active holds of one credential, by scope key part.
#[derive(Debug, Default, Clone)]
pub(crate) struct Holds {
    blocked: HashMap<String, Instant>,
    quota: HashMap<String, Instant>,
    /// When a block on the scope was last announced (by this process or
    /// another): slots reserved before it were voided in Redis.
    announced: HashMap<String, Instant>,
}

/// Which kind of hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Blocked,
    Quota,
}

impl Holds {
    /// Notes a hold on `scope` until `until`; true when it is news.
    pub(crate) fn note(&mut self, kind: Kind, scope: &str, until: Instant) -> bool {
        let map = match kind {
            Kind::Blocked => &mut self.blocked,
            Kind::Quota => &mut self.quota,
        };
        match map.get_mut(scope) {
            Some(current) if *current >= until => false,
            Some(current) => {
                *current = until;
                true
            }
            None => {
                map.insert(scope.to_owned(), until);
                true
            }
        }
    }

    /// A block on `scope` was announced at `at`: in Redis it voided every
    /// slot reserved on the scope before, whatever its end.
    pub(crate) fn announce(&mut self, scope: &str, at: Instant) {
        self.announced.insert(scope.to_owned(), at);
    }

    /// Whether a slot at `at`, reserved at `since` for a call on `scopes`
    /// (the first one charged), may no longer be used: a block on the
    /// charged scope was announced since, a scope is blocked past `at`, or
    /// a quota is spent.
    pub(crate) fn voids(
        &self,
        scopes: &[String],
        at: Instant,
        since: Instant,
        now: Instant,
    ) -> bool {
        let announced = scopes
            .first()
            .and_then(|first| self.announced.get(first))
            .is_some_and(|when| *when >= since);
        announced
            || self.quota(scopes, now).is_some()
            || self
                .blocked(scopes, now)
                .is_some_and(|(_, until)| until > at)
    }

    /// Takes in what a script saw, its times counted from `at`.
    pub(crate) fn absorb(&mut self, view: &View, at: Instant) -> bool {
        let mut news = false;
        for (scope, wait) in &view.blocks {
            news |= self.note(Kind::Blocked, scope, at + micros(*wait));
        }
        for (scope, wait) in &view.quotas {
            news |= self.note(Kind::Quota, scope, at + micros(*wait));
        }
        news
    }

    /// The first of `scopes` whose quota is spent at `now`, and until when.
    pub(crate) fn quota(&self, scopes: &[String], now: Instant) -> Option<(usize, Instant)> {
        scopes.iter().enumerate().find_map(|(index, scope)| {
            self.quota
                .get(scope)
                .filter(|until| **until > now)
                .map(|until| (index, *until))
        })
    }

    /// The latest block among `scopes` still running at `now`.
    pub(crate) fn blocked(&self, scopes: &[String], now: Instant) -> Option<(usize, Instant)> {
        scopes
            .iter()
            .enumerate()
            .filter_map(|(index, scope)| {
                self.blocked
                    .get(scope)
                    .filter(|until| **until > now)
                    .map(|until| (index, *until))
            })
            .max_by_key(|(_, until)| *until)
    }

    /// Forgets holds that ended.
    pub(crate) fn prune(&mut self, now: Instant) {
        self.blocked.retain(|_, until| *until > now);
        self.quota.retain(|_, until| *until > now);
        // Announcements matter only to slots reserved before them, and no
        // slot is held longer than a call's inline wait.
        self.announced.retain(|_, when| {
            now.saturating_duration_since(*when) < std::time::Duration::from_secs(600)
        });
    }
}

fn micros(us: u64) -> std::time::Duration {
    std::time::Duration::from_micros(us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn holds_only_extend_and_expire() {
        let t0 = Instant::now();
        let mut holds = Holds::default();
        let scopes = vec!["api_key".to_owned(), "search".to_owned()];
        assert!(holds.note(Kind::Blocked, "search", t0 + Duration::from_secs(2)));
        assert!(!holds.note(Kind::Blocked, "search", t0 + Duration::from_secs(1)));
        assert_eq!(
            holds.blocked(&scopes, t0),
            Some((1, t0 + Duration::from_secs(2)))
        );
        assert_eq!(holds.blocked(&scopes, t0 + Duration::from_secs(2)), None);
        let view = View {
            processes: 2,
            blocks: vec![],
            quotas: vec![("api_key".into(), 5_000_000)],
            now: None,
        };
        assert!(holds.absorb(&view, t0));
        assert_eq!(
            holds.quota(&scopes, t0),
            Some((0, t0 + Duration::from_secs(5)))
        );
        holds.prune(t0 + Duration::from_secs(6));
        assert_eq!(holds.quota(&scopes, t0), None);
    }

    #[test]
    fn an_announced_block_voids_older_slots_on_the_charged_scope() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut holds = Holds::default();
        let scopes = vec!["api_key".to_owned(), "search".to_owned()];
        let slot = t0 + 500 * ms;
        assert!(!holds.voids(&scopes, slot, t0, t0));
        // A block on another scope ending before the slot leaves it alone.
        holds.note(Kind::Blocked, "search", t0 + 100 * ms);
        holds.announce("search", t0 + 10 * ms);
        assert!(!holds.voids(&scopes, slot, t0, t0 + 10 * ms));
        // Ending after it voids it.
        holds.note(Kind::Blocked, "search", t0 + 600 * ms);
        assert!(holds.voids(&scopes, slot, t0, t0 + 10 * ms));
        // Any announced block on the charged scope voids slots reserved before.
        let mut holds = Holds::default();
        holds.announce("api_key", t0 + 20 * ms);
        assert!(holds.voids(&scopes, slot, t0, t0 + 20 * ms));
        assert!(!holds.voids(&scopes, slot, t0 + 30 * ms, t0 + 30 * ms));
    }
}
