//! Shared credentials on the in-memory shared budget: two gates standing for
//! two processes spend one key's rate between them, and a penalty one of
//! them learns holds the other back too. (The Redis backend is tested
//! against the same behaviour in `sluice-redis`.)

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice::shared::InMemoryBudget;
use sluice::{
    Call, Cost, CredentialConfig, Defaults, Gate, GateConfig, Outcome, Priority, Reason,
    ToolConfig, UnitConfig,
};
use support::*;

fn shared_gate(sim: &Arc<Sim>, budget: &Arc<InMemoryBudget>, seed: u64) -> Gate<SimExecutor> {
    let credential = CredentialConfig::with_rate("5/1s".parse().unwrap())
        .shared(true)
        .max_in_flight(20);
    Gate::builder(
        config_with(credential, Defaults::default()),
        SimExecutor(sim.clone()),
    )
    .seed(seed)
    .shared(budget.clone())
    .build()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn two_processes_spend_one_rate() {
    let sim = Sim::always_ok(20);
    let budget = Arc::new(InMemoryBudget::new());
    let gates = [shared_gate(&sim, &budget, 1), shared_gate(&sim, &budget, 2)];
    let runs = gates.iter().enumerate().map(|(g, gate)| {
        let calls = (0..12).map(move |i| Call::new("read", json!({ "g": g, "i": i })));
        let turn = gate.turn();
        async move { turn.run(calls).await }
    });
    let outcomes: Vec<Outcome> = futures_util::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(outcomes.len(), 24);
    let starts = sim.starts_ms();
    // Between them: 5 now and 5 a window (plus its 20 ms margin) later; the
    // next window starts past the 2 s inline threshold, so the other 14
    // calls are deferred, not sent.
    assert_eq!(
        starts,
        [
            0.0, 0.0, 0.0, 0.0, 0.0, 1_020.0, 1_020.0, 1_020.0, 1_020.0, 1_020.0
        ]
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| o.status() == "rate_limited")
            .count(),
        14
    );
}

#[tokio::test(start_paused = true)]
async fn a_penalty_one_process_learns_holds_the_other() {
    let sim = Sim::new(|n, _| {
        if n == 1 {
            Reply::status(429).header("retry-after", "3")
        } else {
            Reply::ok(10)
        }
    });
    let budget = Arc::new(InMemoryBudget::new());
    let (a, b) = (shared_gate(&sim, &budget, 1), shared_gate(&sim, &budget, 2));
    // Process A is told to wait 3 s: beyond the inline threshold, so deferred.
    let first = a.call(Call::new("read", json!({"a": 1}))).await;
    assert_eq!(first.status(), "rate_limited", "{first:?}");
    // Process B has never seen a 429, yet sends nothing before the 3 s are up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = b.call(Call::new("read", json!({"b": 1}))).await;
    assert_eq!(second.status(), "rate_limited", "{second:?}");
    assert_eq!(sim.count(), 1);
    // Inside the inline threshold B waits it out, and the start is after the block.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let third = b.call(Call::new("read", json!({"b": 2}))).await;
    assert!(third.is_ok(), "{third:?}");
    let starts = sim.starts_ms();
    assert!(starts[1] >= 3_000.0, "{starts:?}");
}

/// A 429 one process sees holds the call another process is sleeping
/// for: woken at its granted start, it asks again and the block defers
/// it, nothing sent into the block.
#[tokio::test(start_paused = true)]
async fn a_penalty_one_process_learns_holds_the_others_sleeping_call() {
    // A's request is answered 429 after 300 ms; the rest at once.
    let sim = Sim::new(|_, request| {
        if request.payload["a"] == 1 {
            Reply::status(429)
                .header("retry-after", "30")
                .latency_ms(300)
        } else {
            Reply::ok(10)
        }
    });
    let budget = Arc::new(InMemoryBudget::new());
    let gate = |seed| {
        let credential = CredentialConfig::with_rate("2/1s".parse().unwrap()).shared(true);
        let defaults = Defaults {
            inline_wait: Duration::from_secs(2),
            ..Defaults::default()
        };
        Gate::builder(config_with(credential, defaults), SimExecutor(sim.clone()))
            .seed(seed)
            .shared(budget.clone())
            .build()
            .unwrap()
    };
    let (a, b) = (Arc::new(gate(1)), Arc::new(gate(2)));
    let penalized = tokio::spawn({
        let a = a.clone();
        async move { a.call(Call::new("read", json!({"a": 1}))).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(b.call(Call::new("read", json!({"b": 1}))).await.is_ok());
    // The window is spent: B's next call sleeps for a start a second out,
    // and A's 429 comes while it sleeps.
    let outcome = b.call(Call::new("read", json!({"b": 2}))).await;
    assert_eq!(outcome.status(), "rate_limited", "{outcome:?}");
    assert_eq!(penalized.await.unwrap().status(), "rate_limited");
    assert_eq!(sim.count(), 2, "nothing sent into the block");
}

#[tokio::test(start_paused = true)]
async fn a_quota_one_process_finds_spent_is_spent_for_all() {
    let sim = Sim::new(|n, _| {
        if n == 1 {
            Reply::status(429).header("retry-after", "86400")
        } else {
            Reply::ok(10)
        }
    });
    let budget = Arc::new(InMemoryBudget::new());
    let (a, b) = (shared_gate(&sim, &budget, 1), shared_gate(&sim, &budget, 2));
    assert_eq!(
        a.call(Call::new("read", json!({}))).await.status(),
        "quota_exhausted"
    );
    let other = b.call(Call::new("read", json!({"x": 1}))).await;
    assert_eq!(other.status(), "quota_exhausted", "{other:?}");
    assert_eq!(sim.count(), 1);
}

#[test]
fn a_shared_credential_without_a_backend_is_a_config_error() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sim = Sim::always_ok(1);
        let credential = CredentialConfig::with_rate("5/1s".parse().unwrap()).shared(true);
        let error = Gate::builder(
            config_with(credential, Defaults::default()),
            SimExecutor(sim),
        )
        .build()
        .unwrap_err();
        assert_eq!(error.field, "credentials.key.shared");
    });
}

/// Issue 14 on the shared seam: two gates on `rate = ["2/1s", "3/10s"]`
/// spend both windows between them. Two start now, one a second (and its
/// margin) later; the fourth would need the ten-second window, past the
/// inline threshold, so it is deferred, not sent.
#[tokio::test(start_paused = true)]
async fn two_processes_spend_every_window_between_them() {
    let sim = Sim::always_ok(20);
    let budget = Arc::new(InMemoryBudget::new());
    let gate = |seed| {
        let credential = CredentialConfig::with_rate("2/1s".parse().unwrap())
            .window("3/10s".parse().unwrap())
            .shared(true)
            .max_in_flight(20);
        Gate::builder(
            config_with(credential, Defaults::default()),
            SimExecutor(sim.clone()),
        )
        .seed(seed)
        .shared(budget.clone())
        .build()
        .unwrap()
    };
    let gates = [gate(1), gate(2)];
    let runs = gates.iter().enumerate().map(|(g, gate)| {
        let calls = (0..2).map(move |i| Call::new("read", json!({ "g": g, "i": i })));
        let turn = gate.turn();
        async move { turn.run(calls).await }
    });
    let outcomes: Vec<Outcome> = futures_util::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(sim.starts_ms(), [0.0, 0.0, 1_020.0]);
    let deferred: Vec<_> = outcomes
        .iter()
        .filter(|o| o.status() == "rate_limited")
        .collect();
    assert_eq!(deferred.len(), 1, "{outcomes:?}");
}

/// A gate whose shared credential spends `rate = ["1/1s", "100/1h"]`
/// (several windows: the engine, not the backend, sleeps until a grant's
/// start), with no window margin and an inline wait of `inline_ms`.
fn seated_gate(
    sim: &Arc<Sim>,
    budget: &Arc<InMemoryBudget>,
    inline_ms: u64,
) -> Arc<Gate<SimExecutor>> {
    seated_gate_of(sim, budget, inline_ms, None)
}

/// [`seated_gate`], with a low share of `share` if given.
fn seated_gate_of(
    sim: &Arc<Sim>,
    budget: &Arc<InMemoryBudget>,
    inline_ms: u64,
    share: Option<f64>,
) -> Arc<Gate<SimExecutor>> {
    let mut credential = CredentialConfig::with_rate("1/1s".parse().unwrap())
        .window("100/1h".parse().unwrap())
        .shared(true)
        .max_in_flight(10);
    if let Some(share) = share {
        credential = credential.low_share(share);
    }
    let defaults = Defaults {
        window_margin: Duration::ZERO,
        inline_wait: Duration::from_millis(inline_ms),
        ..Defaults::default()
    };
    Arc::new(
        Gate::builder(config_with(credential, defaults), SimExecutor(sim.clone()))
            .seed(1)
            .shared(budget.clone())
            .build()
            .unwrap(),
    )
}

/// Call `n` at `after_ms`, with `priority`, on `gate`.
fn spawn_call(
    gate: &Arc<Gate<SimExecutor>>,
    n: u64,
    priority: Priority,
    after_ms: u64,
) -> tokio::task::JoinHandle<Outcome> {
    let gate = gate.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        let call = Call::new("write", json!({ "n": n })).priority(priority);
        gate.turn().call(call).await
    })
}

/// Callers waiting for a shared grant are served by priority: low calls
/// 1 and 2 hold the grants at 1 s and 2 s; a high call at 100 ms, which
/// spends what they spend, swaps starts with them (it starts at 1 s, they
/// move one start later each), and a normal call at 200 ms does the same
/// with the two low ones. No grant goes back to the shared budget for it,
/// and the rolling second holds throughout. With a low share, which the
/// low calls spend besides, no swap fits: the high call takes the grant
/// of low call 1 (which covers its own spend) and gives its own back, and
/// call 1 asks again behind the others; the starts are the same.
#[tokio::test(start_paused = true)]
async fn waiting_callers_take_shared_grants_by_priority() {
    for share in [None, Some(0.5)] {
        shared_grants_by_priority(share).await;
    }
}

async fn shared_grants_by_priority(share: Option<f64>) {
    let sim = Sim::always_ok(10);
    let budget = Arc::new(InMemoryBudget::new());
    let gate = seated_gate_of(&sim, &budget, 10_000, share);
    let calls = [
        (Priority::Low, 0),
        (Priority::Low, 1),
        (Priority::Low, 2),
        (Priority::High, 100),
        (Priority::Normal, 200),
    ];
    let tasks: Vec<_> = (0..)
        .zip(calls)
        .map(|(n, (priority, after))| spawn_call(&gate, n, priority, after))
        .collect();
    for task in tasks {
        assert!(task.await.unwrap().is_ok());
    }
    assert_eq!(
        sim.starts_by_n(),
        [
            (0, 0.0),
            (3, 1_000.0),
            (4, 2_000.0),
            (1, 3_000.0),
            (2, 4_000.0)
        ],
        "{share:?}"
    );
}

/// A low call that a high one moved past its inline wait is deferred for
/// priority with the honest wait, and the grant it was moved to goes back
/// to the shared budget: the next call starts on it (2 s), not after it.
#[tokio::test(start_paused = true)]
async fn a_call_moved_past_its_wait_gives_the_shared_grant_back() {
    let sim = Sim::always_ok(10);
    let budget = Arc::new(InMemoryBudget::new());
    let gate = seated_gate(&sim, &budget, 1_500);
    let first = spawn_call(&gate, 0, Priority::Low, 0);
    let low = spawn_call(&gate, 1, Priority::Low, 1);
    let high = spawn_call(&gate, 2, Priority::High, 100);
    assert!(first.await.unwrap().is_ok());
    let high = high.await.unwrap();
    assert!(high.is_ok(), "{high:?}");
    let low = low.await.unwrap();
    let Outcome::RateLimited {
        reason,
        retry_after_ms,
        ..
    } = &low
    else {
        panic!("{low:?}");
    };
    assert_eq!((*reason, *retry_after_ms), (Reason::Priority, 1_900));
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        spawn_call(&gate, 3, Priority::Normal, 0)
            .await
            .unwrap()
            .is_ok()
    );
    assert_eq!(sim.starts_by_n(), [(0, 0.0), (2, 1_000.0), (3, 2_000.0)]);
}

/// A high call costing more than any waiting low call it outranks, on a
/// shared credential of exact windows: tokens 10/1s, low calls A (10)
/// at 0, B and C (5 each) sharing 1 s; the high call H (10) at 100 ms
/// would start at 2 s. No swap fits and neither grant covers its cost, so
/// it gives B's and C's grants back to the shared budget, takes 1 s, and
/// B and C ask again behind it, at 2 s. The unit's rolling second holds.
#[tokio::test(start_paused = true)]
async fn a_costlier_high_call_gives_the_shared_grants_it_outranks_back() {
    let sim = Sim::always_ok(10);
    let budget = Arc::new(InMemoryBudget::new());
    let credential = CredentialConfig::with_rate("100/1s".parse().unwrap())
        .unit("tokens", UnitConfig::with_rate("10/1s".parse().unwrap()))
        .shared(true)
        .max_in_flight(10);
    let defaults = Defaults {
        window_margin: Duration::ZERO,
        inline_wait: Duration::from_secs(10),
        ..Defaults::default()
    };
    let chat = ToolConfig::write("key").cost("tokens", Cost::Argument("max_tokens".into()));
    let config = config_with(credential, defaults).tool("chat", chat);
    let gate = Arc::new(
        Gate::builder(config, SimExecutor(sim.clone()))
            .seed(1)
            .shared(budget.clone())
            .build()
            .unwrap(),
    );
    let calls = [
        (0, 10, Priority::Low, 0),
        (1, 5, Priority::Low, 1),
        (2, 5, Priority::Low, 2),
        (3, 10, Priority::High, 100),
    ];
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|(n, tokens, priority, after_ms)| {
            let gate = gate.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                let call = Call::new("chat", json!({ "n": n, "max_tokens": tokens }));
                gate.turn().call(call.priority(priority)).await
            })
        })
        .collect();
    for task in tasks {
        let outcome = task.await.unwrap();
        assert!(outcome.is_ok(), "{outcome:?}");
    }
    let mut starts = sim.starts_by_n();
    // B and C start together; their order between them is not the point.
    starts.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    assert_eq!(starts, [(0, 0.0), (3, 1_000.0), (1, 2_000.0), (2, 2_000.0)]);
}

/// A shared budget whose backend never answers (Redis stopped, its command
/// timeout longer than the call's deadline).
struct Silent;

impl sluice::shared::SharedBudget for Silent {
    fn reserve<'a>(
        &'a self,
        _request: sluice::shared::ReserveRequest<'a>,
    ) -> sluice::shared::BoxFuture<'a, sluice::shared::Decision> {
        Box::pin(std::future::pending())
    }

    fn refund(&self, _credential: &str, _grant: sluice::shared::Grant) {}

    fn block(&self, _: &str, _: &str, _: Duration, _: sluice::shared::Hold) {}
}

/// Waiting for the shared budget counts against the call's deadline: a
/// backend slower than the deadline leaves the call `timed_out` at its
/// deadline, nothing sent, not answered whenever the backend gives up.
#[tokio::test(start_paused = true)]
async fn a_shared_budget_slower_than_the_deadline_times_the_call_out_at_its_deadline() {
    let sim = Sim::always_ok(20);
    let credential = CredentialConfig::with_rate("5/1s".parse().unwrap()).shared(true);
    let gate = Gate::builder(
        config_with(credential, Defaults::default()),
        SimExecutor(sim.clone()),
    )
    .shared(Arc::new(Silent))
    .build()
    .unwrap();
    let began = tokio::time::Instant::now();
    let outcome = gate
        .call(Call::new("read", json!({"n": 1})).deadline(Duration::from_millis(300)))
        .await;
    let Outcome::TimedOut { hint, .. } = &outcome else {
        panic!("timed out: {outcome:?}");
    };
    assert!(hint.contains("nothing was sent"), "{outcome:?}");
    assert_eq!(began.elapsed(), Duration::from_millis(300));
    assert_eq!(sim.count(), 0);
}

/// A shared budget whose answers overtake each other on the way back, as
/// round trips to Redis do: the first ask waits longest before it is
/// decided, the fifth not at all.
struct Overtaken {
    inner: InMemoryBudget,
    asked: std::sync::atomic::AtomicU64,
}

impl sluice::shared::SharedBudget for Overtaken {
    fn reserve<'a>(
        &'a self,
        request: sluice::shared::ReserveRequest<'a>,
    ) -> sluice::shared::BoxFuture<'a, sluice::shared::Decision> {
        let n = self
            .asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(4u64.saturating_sub(n))).await;
            self.inner.reserve(request).await
        })
    }

    fn refund(&self, credential: &str, grant: sluice::shared::Grant) {
        self.inner.refund(credential, grant);
    }

    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: sluice::shared::Hold) {
        self.inner.block(credential, scope, wait, hold);
    }
}

/// A shared credential of 50 requests a second whose tool `chat` spends
/// `max_tokens` from a bucket of 100 tokens refilling 100 a second.
fn shared_bucket(inline_wait: Duration) -> GateConfig {
    let mut tokens = UnitConfig::with_rate("100/1s".parse().unwrap());
    tokens.burst = Some(100);
    let credential = CredentialConfig::with_rate("50/1s".parse().unwrap())
        .shared(true)
        .max_in_flight(20)
        .unit("tokens", tokens);
    let defaults = Defaults {
        inline_wait,
        ..Defaults::default()
    };
    config_with(credential, defaults).tool(
        "chat",
        ToolConfig::read("key").cost("tokens", Cost::Argument("max_tokens".into())),
    )
}

/// Five calls of 40 tokens at once on a shared bucket of 100 tokens
/// refilling 100 a second: two start at once, then one every 0.4 s as the
/// bucket refills, as on a local bucket. A bucket keeps one time, so a
/// start charged out of order places every earlier one after it: asked
/// all at once, the answers overtaking each other, the last-planned call
/// was charged first and the burst pushed itself seconds out, the last
/// calls past the inline wait. The engine asks in the order it planned.
#[tokio::test(start_paused = true)]
async fn a_burst_on_a_shared_bucket_asks_in_the_order_it_was_planned() {
    let sim = Sim::always_ok(20);
    let config = shared_bucket(Duration::from_secs(2));
    let budget = Arc::new(Overtaken {
        inner: InMemoryBudget::new(),
        asked: std::sync::atomic::AtomicU64::new(0),
    });
    let gate = Gate::builder(config, SimExecutor(sim.clone()))
        .shared(budget)
        .build()
        .unwrap();
    let calls = (0..5).map(|n| Call::new("chat", json!({ "n": n, "max_tokens": 40 })));
    let outcomes = gate.turn().run(calls).await;
    assert!(outcomes.iter().all(|o| o.status() == "ok"), "{outcomes:?}");
    let starts = sim.starts_ms();
    assert_eq!(starts.len(), 5);
    // Each ask waits for the one planned before it: a few ms each here.
    assert!(starts[1] - starts[0] <= 5.0, "two at once: {starts:?}");
    assert!(starts[4] <= 1_100.0, "the fifth within 1.1 s: {starts:?}");
}

/// A shared budget whose first answer takes 2 s (a backend stalled with
/// the first ask in hand), then answers at once; it says a well answer
/// comes within 100 ms, and records when each ask reached it.
struct Stalled {
    inner: InMemoryBudget,
    asks: std::sync::Mutex<Vec<tokio::time::Instant>>,
}

impl sluice::shared::SharedBudget for Stalled {
    fn reserve<'a>(
        &'a self,
        request: sluice::shared::ReserveRequest<'a>,
    ) -> sluice::shared::BoxFuture<'a, sluice::shared::Decision> {
        let first = {
            let mut asks = self.asks.lock().unwrap();
            asks.push(tokio::time::Instant::now());
            asks.len() == 1
        };
        Box::pin(async move {
            if first {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            self.inner.reserve(request).await
        })
    }

    fn refund(&self, credential: &str, grant: sluice::shared::Grant) {
        self.inner.refund(credential, grant);
    }

    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: sluice::shared::Hold) {
        self.inner.block(credential, scope, wait, hold);
    }

    fn answer_within(&self) -> Option<Duration> {
        Some(Duration::from_millis(100))
    }
}

/// Asks in order wait for the ask before theirs no longer than the budget
/// answers when well: behind a stalled ask, each call asks on its own
/// within 100 ms instead of queueing behind the stall (and, with a backend
/// timing out, behind one timeout after another).
#[tokio::test(start_paused = true)]
async fn an_ordered_ask_does_not_queue_behind_a_stalled_one() {
    let sim = Sim::always_ok(20);
    let config = shared_bucket(Duration::from_secs(5));
    let budget = Arc::new(Stalled {
        inner: InMemoryBudget::new(),
        asks: std::sync::Mutex::new(Vec::new()),
    });
    let gate = Gate::builder(config, SimExecutor(sim.clone()))
        .shared(budget.clone())
        .build()
        .unwrap();
    let began = tokio::time::Instant::now();
    let calls = (0..3).map(|n| Call::new("chat", json!({ "n": n, "max_tokens": 10 })));
    let outcomes = gate.turn().run(calls).await;
    assert_eq!(outcomes.len(), 3);
    let asks: Vec<u128> = budget
        .asks
        .lock()
        .unwrap()
        .iter()
        .map(|at| at.duration_since(began).as_millis())
        .collect();
    assert_eq!(asks.len(), 3, "{asks:?}");
    assert_eq!(asks[0], 0, "{asks:?}");
    // The second waits its 100 ms for the stalled first; the third asked
    // 100 ms after it queued, behind the second.
    assert!(asks[1] <= 101 && asks[2] <= 202, "asked at {asks:?} ms");
    // The two after the stall started at once, not after it.
    let starts = sim.starts_ms();
    assert!(
        starts.iter().filter(|&&at| at < 1_000.0).count() >= 2,
        "{starts:?}"
    );
}

/// A shared budget that hears of blocks other processes saw: once told
/// ([`Told::hear_block`]), its inner budget holds the scope, and it says
/// so to calls holding a grant ([`sluice::shared::SharedBudget::held`]).
struct Told {
    inner: InMemoryBudget,
    heard: std::sync::atomic::AtomicBool,
}

impl Told {
    fn hear_block(&self, scope: &str, wait: Duration) {
        use sluice::shared::SharedBudget as _;
        self.inner
            .block("key", scope, wait, sluice::shared::Hold::Blocked);
        self.heard.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl sluice::shared::SharedBudget for Told {
    fn reserve<'a>(
        &'a self,
        request: sluice::shared::ReserveRequest<'a>,
    ) -> sluice::shared::BoxFuture<'a, sluice::shared::Decision> {
        self.inner.reserve(request)
    }

    fn refund(&self, credential: &str, grant: sluice::shared::Grant) {
        self.inner.refund(credential, grant);
    }

    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: sluice::shared::Hold) {
        self.inner.block(credential, scope, wait, hold);
    }

    fn held(&self, _credential: &str, scopes: &[&str]) -> bool {
        self.heard.load(std::sync::atomic::Ordering::SeqCst) && scopes.contains(&"api_key")
    }
}

/// A call sleeping until its shared start is held by a block the budget
/// hears of meanwhile (another process's 429): woken, it gives the grant
/// back and asks again, and the block defers it. Nothing is sent into the
/// block.
#[tokio::test(start_paused = true)]
async fn a_block_heard_while_a_call_sleeps_for_its_shared_start_holds_it() {
    let sim = Sim::always_ok(20);
    let credential = CredentialConfig::with_rate("1/1s".parse().unwrap()).shared(true);
    let defaults = Defaults {
        inline_wait: Duration::from_secs(2),
        ..Defaults::default()
    };
    let budget = Arc::new(Told {
        inner: InMemoryBudget::new(),
        heard: std::sync::atomic::AtomicBool::new(false),
    });
    let gate = Arc::new(
        Gate::builder(config_with(credential, defaults), SimExecutor(sim.clone()))
            .shared(budget.clone())
            .build()
            .unwrap(),
    );
    assert!(gate.call(Call::new("read", json!({"n": 1}))).await.is_ok());
    let second = tokio::spawn({
        let gate = gate.clone();
        async move { gate.call(Call::new("read", json!({"n": 2}))).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    budget.hear_block("api_key", Duration::from_secs(30));
    let outcome = second.await.unwrap();
    let Outcome::RateLimited { retry_after_ms, .. } = &outcome else {
        panic!(
            "held by the block: {outcome:?}, starts {:?}",
            sim.starts_ms()
        );
    };
    assert!(*retry_after_ms > 25_000, "{outcome:?}");
    assert_eq!(sim.count(), 1, "nothing sent into the block");
}
