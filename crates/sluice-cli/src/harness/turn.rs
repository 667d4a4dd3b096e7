//! One turn's calls as each strategy makes them: through the gate, or sent with the naive or the SDK retry policy.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::Value;
use sluice::{Call, Outcome, Turn};

use super::client::ApiClient;
use super::fixed_window::FixedWindow;
use super::strategy::{Strategy, View};

/// The naive harness's retry policy, tuned for gateway blips.
const NAIVE_RETRIES: u32 = 3;
const NAIVE_RETRY_DELAY: Duration = Duration::from_millis(200);
/// The SDK policy's numbers (e.g. the OpenAI and Anthropic Python SDKs'
/// defaults: 2 retries, 0.5 s initial backoff, 8 s cap, jitter 0.75-1).
const SDK_RETRIES: u32 = 2;
const SDK_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
const SDK_BACKOFF_BASE: Duration = Duration::from_millis(500);
const SDK_BACKOFF_CAP: Duration = Duration::from_secs(8);

/// One turn's handle: calls made through it share the turn.
#[derive(Clone)]
pub(crate) struct HarnessTurn {
    pub(super) strategy: Strategy,
    pub(super) client: ApiClient,
    pub(super) turn: Option<Turn<ApiClient>>,
    pub(super) window: Option<Arc<FixedWindow>>,
    pub(super) rng: Arc<Mutex<StdRng>>,
    pub(super) deadline: Duration,
}

impl HarnessTurn {
    /// One call, as the harness makes it; the deadline bounds it for every strategy.
    pub(crate) async fn call(&self, tool: &str, args: &Value) -> View {
        if let Some(turn) = &self.turn {
            return match turn.call(Call::new(tool, args.clone())).await {
                Outcome::Ok { .. } => View::Ok,
                Outcome::RateLimited { retry_after_ms, .. } => {
                    View::RateLimited(Duration::from_millis(retry_after_ms))
                }
                Outcome::QuotaExhausted { .. } => View::QuotaExhausted,
                Outcome::TimedOut { .. } => View::TimedOut,
                _ => View::Failed,
            };
        }
        let attempts = async {
            match self.strategy {
                Strategy::Sdk => self.sdk(tool, args).await,
                _ => self.naive(tool, args).await,
            }
        };
        tokio::time::timeout(self.deadline, attempts)
            .await
            .unwrap_or(View::TimedOut)
    }

    async fn send(&self, tool: &str, args: &Value) -> Result<reqwest::Response, ()> {
        if let Some(window) = &self.window {
            window.acquire().await;
        }
        self.client
            .get(tool, args, self.deadline)
            .await
            .map_err(|_| ())
    }

    /// Fan out at once; on 429 retry after a fixed delay, a few times; then "tool failed".
    async fn naive(&self, tool: &str, args: &Value) -> View {
        // The static strategy keeps the naive retries behind its limiter.
        for attempt in 0..=NAIVE_RETRIES {
            match self.send(tool, args).await {
                Ok(response) if response.status().is_success() => {
                    let _ = response.bytes().await;
                    return View::Ok;
                }
                Ok(response)
                    if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS
                        && attempt < NAIVE_RETRIES =>
                {
                    tokio::time::sleep(NAIVE_RETRY_DELAY).await;
                }
                _ => return View::Failed,
            }
        }
        View::Failed
    }

    /// Retries 429 and 5xx twice: after Retry-After when it is at most 60 s,
    /// else after an exponential backoff with 0.75-1 jitter.
    async fn sdk(&self, tool: &str, args: &Value) -> View {
        for attempt in 0..=SDK_RETRIES {
            let response = match self.send(tool, args).await {
                Ok(response) => response,
                Err(()) if attempt < SDK_RETRIES => {
                    tokio::time::sleep(self.backoff(attempt)).await;
                    continue;
                }
                Err(()) => return View::Failed,
            };
            let status = response.status();
            if status.is_success() {
                let _ = response.bytes().await;
                return View::Ok;
            }
            let retryable =
                status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
            if !retryable || attempt == SDK_RETRIES {
                return View::Failed;
            }
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok())
                .and_then(|text| text.trim().parse::<f64>().ok())
                .filter(|secs| secs.is_finite() && *secs >= 0.0)
                .map(Duration::from_secs_f64)
                .filter(|wait| *wait <= SDK_MAX_RETRY_AFTER);
            tokio::time::sleep(retry_after.unwrap_or_else(|| self.backoff(attempt))).await;
        }
        View::Failed
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exponential = SDK_BACKOFF_BASE
            .saturating_mul(1 << attempt.min(8))
            .min(SDK_BACKOFF_CAP);
        let jitter = self.rng.lock().random_range(0.75..=1.0);
        exponential.mul_f64(jitter)
    }
}
