//! The fallback decision: a call this process cannot ask Redis about is decided in its credential's local cells.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use sluice::shared::{Decision, Hold, ReserveRequest, SharedWindow};
use tokio::time::Instant;

use super::share::share;
use crate::credential::{Cred, Mode};
use crate::decision::{self, denied};
use crate::instant::since;

/// The windows a call spends in the local cells: its own, or for a call on
/// one limit the one-window case, its first scope's request window at a
/// cost of one (none without a limit: nothing binds it).
pub(crate) fn windows<'a>(request: &'a ReserveRequest<'_>) -> Cow<'a, [SharedWindow]> {
    if !request.windows.is_empty() {
        return Cow::Borrowed(request.windows);
    }
    let (Some(limit), Some(scope)) = (request.limit, request.scopes.first()) else {
        return Cow::Owned(Vec::new());
    };
    Cow::Owned(vec![SharedWindow {
        scope: (*scope).to_owned(),
        unit: None,
        index: 0,
        rate: limit.rate,
        cost: 1,
        low: false,
        burst: limit.burst,
    }])
}

/// Decides locally at this process's share of the rate (`configured` is
/// `fallback_share`, else one over the processes last counted): one start
/// in `[not_before, latest]` that every one of `windows` (the call's,
/// [`windows`]) allows, charged in all of them or in none; `reason` says
/// why Redis was not asked. With the decision, the start it granted and
/// its grant id (if any): Redis's log does not hold it.
pub(crate) fn decide(
    cred: &Cred,
    configured: Option<f64>,
    request: &ReserveRequest<'_>,
    windows: &[SharedWindow],
    (not_before, latest): (Instant, Instant),
    reason: String,
) -> (Decision, Option<(Instant, u64)>) {
    let now = Instant::now();
    let mut state = cred.state.lock();
    let share = share(configured, state.processes);
    tracing::debug!(credential = %cred.name, %reason, "deciding locally");
    if state.mode.0 == Mode::Shared {
        // Leased slots cannot be given back while Redis is away, and the
        // local cells would not count them: drop them (under-spending).
        state.pool.drain_all();
        let processes = state.processes;
        // Asked once Redis answers: did it keep what it held till now?
        state.beat.fall_back(now);
        cred.spell.store(true, Ordering::Relaxed);
        state.fallback.spell.begin(processes);
        state.fallback.take_over(share);
    }
    state.mode = (Mode::Fallback, Some(reason));
    // Redis said moments ago that no start is free before `busy_until` (a
    // grant's next start, a denial's wait): the shared log already holds
    // the limit up to then, so a local start before it would be one too
    // many whatever this process's share has room for.
    let floor = state.busy_until.map_or(now, |busy| busy.max(now));
    match state
        .fallback
        .reserve(windows, share, now, not_before.max(floor), latest)
    {
        Ok((start, id)) => {
            state.decisions.fallback += 1;
            let granted = Decision::Granted {
                wait: since(start, now),
                grant: decision::fallback(id),
            };
            (granted, Some((start, id)))
        }
        Err(late) => {
            state.decisions.denied += 1;
            let index = scope_index(request, late.window);
            (
                denied(request, index, since(late.at, now), Hold::Rate),
                None,
            )
        }
    }
}

/// The index among the request's scopes of the scope window `window` belongs to.
pub(crate) fn scope_index(request: &ReserveRequest<'_>, window: usize) -> usize {
    request
        .windows
        .get(window)
        .and_then(|w| request.scopes.iter().position(|s| *s == w.scope))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice::Priority;
    use sluice::shared::{SharedLimit, SharedWindow};

    use super::*;
    use crate::credential::Credentials;

    fn request(max_wait: Duration) -> ReserveRequest<'static> {
        ReserveRequest {
            credential: "key",
            scopes: &["api_key"],
            limit: Some(SharedLimit {
                rate: "60/1s".parse().unwrap(),
                burst: None,
            }),
            windows: &[],
            not_before: Duration::ZERO,
            max_wait,
            late_start: Duration::ZERO,
            priority: Priority::Normal,
        }
    }

    /// Granted or not, and the wait; a granted start is handed on, at
    /// its time, and a denial hands on none.
    fn wait((decision, started): &(Decision, Option<(Instant, u64)>)) -> (bool, Duration) {
        let started = started.map(|(at, _)| at);
        match decision {
            Decision::Granted { wait, .. } => {
                assert_eq!(started, Some(Instant::now() + *wait));
                (true, *wait)
            }
            Decision::Denied { wait, .. } => {
                assert_eq!(started, None);
                (false, *wait)
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_local_start_waits_for_the_next_start_redis_said_is_free() {
        let now = Instant::now();
        let credentials = Credentials::new(now);
        let cred = credentials.get("key");
        let decide_now = |max_wait: Duration| {
            let request = request(max_wait);
            let latest = Instant::now() + max_wait;
            let windows = windows(&request);
            decide(
                &cred,
                None,
                &request,
                &windows,
                (Instant::now(), latest),
                "timeout".into(),
            )
        };
        // Three processes: this one's share (20 a second) has room, yet
        // the last grant said the key is full for 400 ms more.
        cred.state.lock().processes = 3;
        cred.state.lock().busy_until = Some(now + Duration::from_millis(400));
        let (granted, after) = wait(&decide_now(Duration::from_millis(100)));
        assert!(!granted);
        assert_eq!(after, Duration::from_millis(400));
        let (granted, after) = wait(&decide_now(Duration::from_secs(1)));
        assert!(granted);
        assert_eq!(after, Duration::from_millis(400));
        // Once that moment has passed, the share alone decides.
        cred.state.lock().busy_until = Some(now);
        let (granted, after) = wait(&decide_now(Duration::from_millis(100)));
        assert!(granted);
        assert_eq!(after, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_wait_went_by_asking_redis_starts_now_on_one_limit_or_several() {
        let credentials = Credentials::new(Instant::now());
        let window = |unit: Option<&str>, rate: &str, cost: u64| SharedWindow {
            scope: "api_key".into(),
            unit: unit.map(Into::into),
            index: 0,
            rate: rate.parse().unwrap(),
            cost,
            low: false,
            burst: None,
        };
        let windows = [
            window(None, "60/1s", 1),
            window(Some("tokens"), "1000/1m", 100),
        ];
        // The call could wait 50 ms; the command timed out after 60.
        let asked = Instant::now();
        let latest = asked + Duration::from_millis(50);
        tokio::time::advance(Duration::from_millis(60)).await;
        let mut call = request(Duration::from_millis(50));
        let reason = || "timeout".to_owned();
        let one = decide(
            &credentials.get("one"),
            None,
            &call,
            &super::windows(&call),
            (asked, latest),
            reason(),
        );
        assert_eq!(wait(&one), (true, Duration::ZERO));
        call.windows = &windows;
        let several = credentials.get("several");
        let (decision, started) = decide(
            &several,
            None,
            &call,
            call.windows,
            (asked, latest),
            reason(),
        );
        assert!(
            matches!(decision, Decision::Granted { wait, .. } if wait.is_zero()),
            "{decision:?}"
        );
        assert_eq!(started.map(|(at, _)| at), Some(Instant::now()));
    }
}
