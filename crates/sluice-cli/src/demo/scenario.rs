//! The incident's setting: a key rated 10 per rolling second, the API behind
//! it, the production sync job on it, and what the agent may call.

use std::time::Duration;

use sluice_fake::{Config, HeaderStyle, Latency, Limits, Record};
use tokio::time::{Instant, MissedTickBehavior};

/// The key's limit: 10 requests in any rolling second.
pub(crate) const KEY_LIMIT: u32 = 10;
pub(crate) const KEY_WINDOW: Duration = Duration::from_secs(1);
/// The production sync job's steady rate.
pub(crate) const SYNC_PER_SECOND: u32 = 4;
/// The most sync requests one rolling second can hold: a job that averages
/// 4/s drifts by a millisecond here and there (timers, transit), so a
/// window sometimes catches a fifth. The agent's share is what is left.
pub(crate) const SYNC_PEAK_PER_WINDOW: u32 = SYNC_PER_SECOND + 1;
/// The API answers in about 400 ms.
const LATENCY_MIN: Duration = Duration::from_millis(300);
const LATENCY_MAX: Duration = Duration::from_millis(500);
/// The one API key the agent and the sync job share.
pub(crate) const ORG_KEY: &str = "Bearer shared-org-key";

/// The tools the simulated model calls.
pub(crate) const TOOLS: [&str; 3] = ["search_tickets", "get_usage", "list_customers"];
/// A model's calls may take this long.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// The paths agent calls use; everything else on the key is the sync job.
const AGENT_PREFIX: &str = "/api/";

/// Whether the API's `record` is an agent call (else the sync job's).
pub(crate) fn is_agent(record: &Record) -> bool {
    record.path.starts_with(AGENT_PREFIX)
}

/// The third-party API: rolling-window limit, ~400 ms answers, Retry-After
/// and IETF RateLimit headers.
pub(crate) fn fake_config(seed: u64) -> Config {
    Config::new(Limits::new(KEY_LIMIT, KEY_WINDOW))
        .with_latency(Latency::Uniform {
            min: LATENCY_MIN,
            max: LATENCY_MAX,
        })
        .with_headers(HeaderStyle::Ietf)
        .with_seed(seed)
}

/// The production job: one request every 250 ms, each on its own, on the
/// same key. Its results are read from the API's records.
pub(crate) async fn sync_job(client: reqwest::Client, base: String, end: Instant) {
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / SYNC_PER_SECOND);
    // A late tick must not be followed by a catch-up burst: the job is steady.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sent = Vec::new();
    let mut page = 0u32;
    loop {
        ticks.tick().await;
        if Instant::now() >= end {
            break;
        }
        page += 1;
        let request = client
            .get(format!("{base}/sync/export?page={page}"))
            .header("authorization", ORG_KEY)
            .timeout(Duration::from_secs(10))
            .send();
        sent.push(tokio::spawn(async move {
            if let Ok(response) = request.await {
                let _ = response.bytes().await;
            }
        }));
    }
    for request in sent {
        let _ = request.await;
    }
}
