//! The fallback decision: a call this process cannot ask Redis about is decided in its credential's local cell.

use std::sync::atomic::Ordering;

use sluice::shared::{Decision, Hold, ReserveRequest};
use tokio::time::Instant;

use super::share::{share, share_of};
use crate::credential::{Cred, Mode};
use crate::decision::{self, denied};
use crate::instant::since;

/// Decides locally at this process's share of the rate (`configured` is
/// `fallback_share`, else one over the processes last counted), in
/// `[not_before, latest]` on the call's first scope; `reason` says why
/// Redis was not asked. With the decision, the start it granted (if any):
/// Redis's log does not hold it.
pub(crate) fn decide(
    cred: &Cred,
    configured: Option<f64>,
    request: &ReserveRequest<'_>,
    parts: &[String],
    not_before: Instant,
    latest: Instant,
    reason: String,
) -> (Decision, Option<Instant>) {
    let now = Instant::now();
    let mut state = cred.state.lock();
    let share = share(configured, state.processes);
    let limit = request.limit.map(|limit| share_of(limit, share));
    tracing::debug!(credential = %cred.name, %reason, "deciding locally");
    if state.mode.0 == Mode::Shared {
        // Leased slots cannot be given back while Redis is away, and the
        // local cell would not count them: drop them (under-spending).
        state.pool.drain_all();
        let processes = state.processes;
        // Asked once Redis answers: did it keep what it held till now?
        state.beat.fall_back();
        cred.spell.store(true, Ordering::Relaxed);
        state.fallback.spell.begin(processes);
        state.fallback.take_over(&parts[0], limit);
        state.fallback.spends.take_over(share);
    }
    state.mode = (Mode::Fallback, Some(reason));
    // Redis said moments ago that no start is free before `busy_until` (a
    // grant's next start, a denial's wait): the shared log already holds
    // the limit up to then, so a local start before it would be one too
    // many whatever this process's share has room for.
    let floor = state.busy_until.map_or(now, |busy| busy.max(now));
    match state
        .fallback
        .reserve(&parts[0], limit, now, not_before.max(floor), latest)
    {
        Ok((start, id)) => {
            state.fallback.spell.spent_at(share);
            state.decisions.fallback += 1;
            let granted = Decision::Granted {
                wait: since(start, now),
                grant: decision::fallback(id),
            };
            (granted, Some(start))
        }
        Err(at) => {
            state.decisions.denied += 1;
            (denied(request, 0, since(at, now), Hold::Rate), None)
        }
    }
}

/// [`decide`] for a call on several windows, groups or units: every window
/// it touches at this process's share, one start for all or nothing, and
/// the start it granted with the spend's id (if any), which Redis's logs
/// do not hold.
pub(crate) fn decide_windows(
    cred: &Cred,
    configured: Option<f64>,
    request: &ReserveRequest<'_>,
    parts: &[String],
    not_before: Instant,
    latest: Instant,
    reason: String,
) -> (Decision, Option<(Instant, u64)>) {
    let now = Instant::now();
    let mut state = cred.state.lock();
    let share = share(configured, state.processes);
    tracing::debug!(credential = %cred.name, %reason, "deciding locally");
    if state.mode.0 == Mode::Shared {
        state.pool.drain_all();
        let limit = request.limit.map(|limit| share_of(limit, share));
        let processes = state.processes;
        // Asked once Redis answers: did it keep what it held till now?
        state.beat.fall_back();
        cred.spell.store(true, Ordering::Relaxed);
        state.fallback.spends.spell.begin(processes);
        state.fallback.take_over(&parts[0], limit);
        state.fallback.spends.take_over(share);
    }
    state.mode = (Mode::Fallback, Some(reason));
    match state
        .fallback
        .spends
        .reserve(request.windows, share, now, not_before.max(now), latest)
    {
        Ok((start, id)) => {
            state.decisions.fallback += 1;
            let granted = Decision::Granted {
                wait: since(start, now),
                grant: decision::fallback_spend(id),
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
    fn wait((decision, started): &(Decision, Option<Instant>)) -> (bool, Duration) {
        match decision {
            Decision::Granted { wait, .. } => {
                assert_eq!(*started, Some(Instant::now() + *wait));
                (true, *wait)
            }
            Decision::Denied { wait, .. } => {
                assert_eq!(*started, None);
                (false, *wait)
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_local_start_waits_for_the_next_start_redis_said_is_free() {
        let now = Instant::now();
        let credentials = Credentials::new(now);
        let cred = credentials.get("key");
        let parts = ["api_key".to_owned()];
        let decide_now = |max_wait: Duration| {
            let request = request(max_wait);
            let latest = Instant::now() + max_wait;
            decide(
                &cred,
                None,
                &request,
                &parts,
                Instant::now(),
                latest,
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
        let parts = ["api_key".to_owned()];
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
            &parts,
            asked,
            latest,
            reason(),
        );
        assert_eq!(wait(&one), (true, Duration::ZERO));
        call.windows = &windows;
        let several = credentials.get("several");
        let (decision, started) =
            decide_windows(&several, None, &call, &parts, asked, latest, reason());
        assert!(
            matches!(decision, Decision::Granted { wait, .. } if wait.is_zero()),
            "{decision:?}"
        );
        assert_eq!(started.map(|(at, _)| at), Some(Instant::now()));
    }
}
