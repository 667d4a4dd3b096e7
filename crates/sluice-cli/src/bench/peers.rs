//! The shared limiters peers build on Redis, next to sluice's, in one run:
//! a fixed window (`INCR` + `EXPIRE` in one pipeline) and a sliding log
//! (one Lua script: trim, count, add). Written here from their usual
//! shape, not taken from any project.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use sluice::shared::{Decision, ReserveRequest, SharedBudget, SharedLimit};
use sluice::{Defaults, Rate};
use sluice_redis::{RedisBudget, RedisConfig};
use tokio::time::Instant;

/// Which limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Sluice,
    FixedWindow,
    SlidingLog,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Sluice => "sluice (sliding window, leases)",
            Kind::FixedWindow => "fixed window (INCR + EXPIRE)",
            Kind::SlidingLog => "sliding log (Lua ZSET)",
        }
    }
}

/// One limiter's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Peer {
    pub(crate) limiter: &'static str,
    /// Decisions per second with a limit that never binds.
    pub(crate) decisions_per_second: f64,
    /// Round trips per decision then.
    pub(crate) round_trips_per_decision: f64,
    /// At three times the limit: admitted starts per second.
    pub(crate) admitted_per_second: f64,
    /// At three times the limit: round trips per admitted start.
    pub(crate) round_trips_per_admitted: f64,
    /// The most starts in any one-second window, against `limit`.
    pub(crate) busiest_second: usize,
    pub(crate) limit: u32,
}

const SLIDING_LOG: &str = r"
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], t, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
  return 1
end
return 0
";

/// The sliding log's next member: one counter for every process here, so
/// that no two starts of one key share a member (a shared member would
/// count once).
static NEXT_MEMBER: AtomicU64 = AtomicU64::new(0);

/// A connection to one server or to a Cluster (the peers' commands name
/// one key each, so a Cluster routes them by that key's slot).
#[derive(Clone)]
enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    async fn connect(urls: &[String], cluster: bool) -> anyhow::Result<Self> {
        if cluster {
            let client = redis::cluster::ClusterClient::new(urls.to_vec())?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
        } else {
            let url = urls
                .first()
                .ok_or_else(|| anyhow::anyhow!("no Redis URL"))?;
            let client = redis::Client::open(url.as_str())?;
            Ok(Conn::Single(
                client.get_multiplexed_async_connection().await?,
            ))
        }
    }

    async fn pipe<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> anyhow::Result<T> {
        Ok(match self.clone() {
            Conn::Single(mut conn) => pipe.query_async(&mut conn).await?,
            Conn::Cluster(mut conn) => pipe.query_async(&mut conn).await?,
        })
    }

    async fn script<T: redis::FromRedisValue>(
        &self,
        script: &redis::ScriptInvocation<'_>,
    ) -> anyhow::Result<T> {
        Ok(match self.clone() {
            Conn::Single(mut conn) => script.invoke_async(&mut conn).await?,
            Conn::Cluster(mut conn) => script.invoke_async(&mut conn).await?,
        })
    }
}

/// Where a limiter keeps its counts: one server or a Cluster's nodes.
pub(crate) struct Target<'a> {
    pub(crate) urls: &'a [String],
    pub(crate) cluster: bool,
    /// sluice's `max_lease` (its default when `None`).
    pub(crate) max_lease: Option<u32>,
}

/// One process's limiter, with its own connection (and for sluice its own
/// lease pool, breaker and heartbeat id), counting its round trips.
pub(crate) struct Limiter {
    kind: Kind,
    budget: Option<RedisBudget>,
    conn: Conn,
    script: redis::Script,
    trips: AtomicU64,
    limit: u32,
    /// What sluice's engine asks Redis for under `limit` per second: the
    /// window widened by the default `window_margin`, as every credential
    /// that does not set its own is (the margin absorbs a caller that wakes
    /// for its slot a little late; the peers have no such setting).
    engine_rate: Rate,
}

impl Limiter {
    /// `kind` allowing `limit` starts per second on each key.
    pub(crate) async fn connect(
        kind: Kind,
        target: &Target<'_>,
        limit: u32,
    ) -> anyhow::Result<Arc<Self>> {
        let budget = match kind {
            Kind::Sluice => {
                let mut config = if target.cluster {
                    RedisConfig::cluster(target.urls.iter().cloned())
                } else {
                    let url = target
                        .urls
                        .first()
                        .ok_or_else(|| anyhow::anyhow!("no Redis URL"))?;
                    RedisConfig::single(url.clone())
                };
                if let Some(slots) = target.max_lease {
                    config = config.max_lease(slots);
                }
                Some(RedisBudget::connect(config).await?)
            }
            _ => None,
        };
        Ok(Arc::new(Limiter {
            kind,
            budget,
            conn: Conn::connect(target.urls, target.cluster).await?,
            script: redis::Script::new(SLIDING_LOG),
            trips: AtomicU64::new(0),
            limit,
            engine_rate: engine_rate(limit)?,
        }))
    }

    /// The round trips the limiter counted itself (the peers'; sluice's
    /// are read from the server).
    pub(crate) fn trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    /// `Some(start)` when admitted: for sluice, the moment the grant came
    /// back plus its wait (the caller sleeps until then, as the engine
    /// does).
    async fn decide(&self, key: &str) -> anyhow::Result<Option<Instant>> {
        match self.kind {
            Kind::Sluice => {
                let budget = self
                    .budget
                    .as_ref()
                    .ok_or_else(|| anyhow::anyhow!("no budget"))?;
                let request = ReserveRequest {
                    credential: key,
                    scopes: &["api_key"],
                    limit: Some(SharedLimit {
                        rate: self.engine_rate,
                        burst: None,
                    }),
                    windows: &[],
                    not_before: Duration::ZERO,
                    max_wait: Duration::from_millis(250),
                    late_start: engine_late(self.engine_rate),
                    priority: sluice::Priority::Normal,
                };
                Ok(match budget.reserve(request).await {
                    Decision::Granted { wait, .. } => {
                        let start = Instant::now() + wait;
                        tokio::time::sleep_until(start).await;
                        Some(start)
                    }
                    Decision::Denied { .. } => None,
                })
            }
            Kind::FixedWindow => {
                let second = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_secs();
                let window_key = format!("peer:fixed:{key}:{second}");
                self.trips.fetch_add(1, Ordering::Relaxed);
                let (count, _): (u64, i64) = self
                    .conn
                    .pipe(redis::pipe().incr(&window_key, 1).expire(&window_key, 2))
                    .await?;
                Ok((count <= u64::from(self.limit)).then(Instant::now))
            }
            Kind::SlidingLog => {
                self.trips.fetch_add(1, Ordering::Relaxed);
                let member = NEXT_MEMBER.fetch_add(1, Ordering::Relaxed);
                let admitted: i64 = self
                    .conn
                    .script(
                        self.script
                            .key(format!("peer:log:{key}"))
                            .arg(1_000_000)
                            .arg(self.limit)
                            .arg(member),
                    )
                    .await?;
                Ok((admitted == 1).then(Instant::now))
            }
        }
    }
}

/// Runs `kind` in one process on one key: first `callers` tasks back to
/// back under a limit that never binds (decisions per second), then the
/// same tasks offering three times `limit` per second (admitted starts,
/// round trips, the busiest second). `server_trips` reads sluice's round
/// trips from the server.
pub(crate) async fn measure<F, Fut>(
    kind: Kind,
    url: &str,
    callers: usize,
    seconds: u64,
    limit: u32,
    server_trips: F,
) -> anyhow::Result<Peer>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u64>>,
{
    let urls = [url.to_owned()];
    let target = Target {
        urls: &urls,
        cluster: false,
        max_lease: None,
    };
    let duration = Duration::from_secs(seconds);
    let open = Limiter::connect(kind, &target, 1_000_000).await?;
    let before = server_trips().await?;
    let (decided, _) = drive(
        std::slice::from_ref(&open),
        &["open".into()],
        callers,
        duration,
        None,
    )
    .await?;
    let open_trips = match kind {
        Kind::Sluice => server_trips().await? - before,
        _ => open.trips(),
    };
    drop(open);

    let bound = Limiter::connect(kind, &target, limit).await?;
    let before = server_trips().await?;
    let (_, starts) = drive(
        std::slice::from_ref(&bound),
        &["bound".into()],
        callers,
        duration,
        Some(pace(callers, limit, 1)),
    )
    .await?;
    let bound_trips = match kind {
        Kind::Sluice => server_trips().await? - before,
        _ => bound.trips(),
    };
    let admitted: usize = starts.iter().map(Vec::len).sum();
    Ok(Peer {
        limiter: kind.name(),
        decisions_per_second: decided as f64 / seconds as f64,
        round_trips_per_decision: open_trips as f64 / decided.max(1) as f64,
        admitted_per_second: admitted as f64 / seconds as f64,
        round_trips_per_admitted: bound_trips as f64 / admitted.max(1) as f64,
        busiest_second: busiest_of(&starts),
        limit,
    })
}

/// How often each of `callers` asks for three times `limit` per second on
/// each of `keys` keys in all.
pub(crate) fn pace(callers: usize, limit: u32, keys: usize) -> Duration {
    Duration::from_secs_f64(callers as f64 / (3.0 * f64::from(limit) * keys as f64))
}

/// `limit` per second as the engine sends it to Redis: the window widened
/// by the default margin, at most a tenth of it (`Rate::widened`).
pub(crate) fn engine_rate(limit: u32) -> anyhow::Result<Rate> {
    let count = std::num::NonZeroU32::new(limit).ok_or_else(|| anyhow::anyhow!("a zero limit"))?;
    let second = Duration::from_secs(1);
    let window = second + Defaults::default().window_margin.min(second / 10);
    Rate::new(count, window).ok_or_else(|| anyhow::anyhow!("no rate of {limit} per {window:?}"))
}

/// How late a slot of `rate` (an [`engine_rate`]) may start, as the engine
/// asks: half of what the margin added to the window.
pub(crate) fn engine_late(rate: Rate) -> Duration {
    rate.window().saturating_sub(Duration::from_secs(1)) / 2
}

/// `callers` tasks per process (one limiter each) deciding for `duration`
/// (back to back, or one attempt per `pace` each), each caller going round
/// `keys` from its own place; returns the decisions made and the admitted
/// starts by key.
pub(crate) async fn drive(
    processes: &[Arc<Limiter>],
    keys: &[String],
    callers: usize,
    duration: Duration,
    pace: Option<Duration>,
) -> anyhow::Result<(u64, Vec<Vec<Instant>>)> {
    let decided = Arc::new(AtomicU64::new(0));
    let starts = Arc::new(Mutex::new(vec![Vec::new(); keys.len()]));
    let keys: Arc<[String]> = keys.into();
    let until = Instant::now() + duration;
    let everyone = processes.len() * callers;
    let mut tasks = tokio::task::JoinSet::new();
    for (p, limiter) in processes.iter().enumerate() {
        for c in 0..callers {
            let (limiter, decided, starts, keys) = (
                limiter.clone(),
                decided.clone(),
                starts.clone(),
                keys.clone(),
            );
            let caller = p * callers + c;
            tasks.spawn(async move {
                // Spread the paced callers over one interval.
                if let Some(pace) = pace {
                    tokio::time::sleep(pace.mul_f64(caller as f64 / everyone as f64)).await;
                }
                let mut turn = caller;
                while Instant::now() < until {
                    let asked = Instant::now();
                    let k = turn % keys.len().max(1);
                    turn += 1;
                    let Some(key) = keys.get(k) else { break };
                    let start = limiter.decide(key).await?;
                    decided.fetch_add(1, Ordering::Relaxed);
                    if let Some(start) = start
                        && pace.is_some()
                    {
                        starts.lock()[k].push(start);
                    }
                    if let Some(pace) = pace {
                        tokio::time::sleep_until(asked + pace).await;
                    }
                }
                anyhow::Ok(())
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let starts = std::mem::take(&mut *starts.lock());
    Ok((decided.load(Ordering::Relaxed), starts))
}

/// The most starts of any one key in any one-second window.
pub(crate) fn busiest_of(starts: &[Vec<Instant>]) -> usize {
    let origin = starts.iter().flatten().min().copied();
    starts
        .iter()
        .map(|key| {
            let mut times: Vec<f64> = key
                .iter()
                .map(|t| origin.map_or(0.0, |o| t.duration_since(o).as_secs_f64() * 1_000.0))
                .collect();
            times.sort_by(f64::total_cmp);
            busiest(&times, 1_000.0)
        })
        .max()
        .unwrap_or(0)
}

/// The most sorted times (ms) in any window of `window_ms`.
fn busiest(times: &[f64], window_ms: f64) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, t) in times.iter().enumerate() {
        while times[first] <= t - window_ms {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

#[cfg(test)]
mod tests {
    use super::busiest;

    #[test]
    fn the_busiest_window_counts_starts_less_than_a_window_apart() {
        assert_eq!(busiest(&[], 1_000.0), 0);
        assert_eq!(busiest(&[0.0, 999.0, 1_000.0, 1_500.0], 1_000.0), 3);
        assert_eq!(busiest(&[0.0, 1_000.0, 2_000.0], 1_000.0), 1);
    }
}
