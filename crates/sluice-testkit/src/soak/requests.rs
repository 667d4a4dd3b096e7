//! One request to the sidecar, and every answer in it checked: a `/v1/turns` request of several calls, or one proxied call.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::mix::Mix;
use super::options::SoakOptions;
use super::tally::{Tally, late};

struct PlannedCall {
    id: String,
    tool: &'static str,
    kind: &'static str,
    n: u64,
    deadline_ms: u64,
}

/// One `/v1/turns` request of 1 to 8 calls; the pause a model would take.
pub(super) async fn turns_request(
    tally: &Tally,
    client: &reqwest::Client,
    base: &str,
    mix: &mut Mix,
    options: &SoakOptions,
    worker: usize,
) -> Option<Duration> {
    let size = 1 + mix.below(8) as usize;
    let mut planned: Vec<PlannedCall> = Vec::with_capacity(size);
    for i in 0..size {
        let id = format!("w{worker}-{}-{i}", tally.next_n.load(Ordering::Relaxed));
        // Now and then, a read repeated in the same turn: it must coalesce,
        // and both ids must still be answered.
        if i > 0 && mix.below(10) == 0 && planned[0].tool == "read" {
            let first = &planned[0];
            let (kind, n, deadline_ms) = (first.kind, first.n, first.deadline_ms);
            planned.push(PlannedCall {
                id,
                tool: "read",
                kind,
                n,
                deadline_ms,
            });
            continue;
        }
        planned.push(PlannedCall {
            id,
            tool: if mix.below(5) == 0 { "write" } else { "read" },
            kind: mix.fault(&options.faults),
            n: tally.next_n.fetch_add(1, Ordering::SeqCst),
            deadline_ms: 300 + mix.below(1_200),
        });
    }
    let calls: Vec<Value> = planned
        .iter()
        .map(|c| json!({"id": c.id, "tool": c.tool, "args": {"kind": c.kind, "n": c.n}, "deadline_ms": c.deadline_ms}))
        .collect();
    let mut body = json!({ "calls": calls });
    if options.turn_ids {
        body["turn_id"] = json!(format!("soak-{worker}-{}", mix.below(4)));
    }
    let body = body.to_string();
    tally.calls.fetch_add(size as u64, Ordering::SeqCst);
    let deadline = planned.iter().map(|c| c.deadline_ms).max().unwrap_or(0);
    let sent = Instant::now();
    let answer = client
        .post(format!("{base}/v1/turns"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let text = match answer {
        Ok(response) if response.status() == 200 => response.bytes().await.ok(),
        _ => None,
    };
    let elapsed = sent.elapsed();
    let results: Vec<Value> = text
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|v| v["results"].as_array().cloned())
        .unwrap_or_default();
    let mut report_pause = None;
    {
        let mut report = tally.report.lock();
        report.requests += 1;
        late(&mut report, elapsed, deadline, options.slack);
        if results.is_empty() {
            report.lost += size as u64;
        } else if results.len() != size {
            report.wrong_ids += size as u64;
        }
    }
    if results.len() != size {
        return None;
    }
    let mut answered = 0;
    for (call, result) in planned.iter().zip(&results) {
        if result["id"].as_str() != Some(call.id.as_str()) {
            tally.report.lock().wrong_ids += 1;
            continue;
        }
        answered += 1;
        let status = result["status"].as_str().unwrap_or("missing");
        tally.count(call.kind, status, result["reason"].as_str());
        if status == "rate_limited"
            && let Some(ms) = result["retry_after_ms"].as_u64()
        {
            report_pause = Some(Duration::from_millis(ms));
        }
    }
    tally.report.lock().answered += answered;
    report_pause
}

/// One proxied GET (a read): one call, its outcome in `x-sluice-outcome`.
pub(super) async fn proxy_request(
    tally: &Tally,
    client: &reqwest::Client,
    base: &str,
    mix: &mut Mix,
    options: &SoakOptions,
) -> Option<Duration> {
    let kind = mix.fault(&options.faults);
    let n = tally.next_n.fetch_add(1, Ordering::SeqCst);
    let deadline = 300 + mix.below(1_200);
    tally.calls.fetch_add(1, Ordering::SeqCst);
    let sent = Instant::now();
    let answer = client
        .get(format!("{base}/proxy/api/fault/{kind}/{n}"))
        .header("x-sluice-deadline-ms", deadline.to_string())
        .send()
        .await;
    let (outcome, wait, reason) = match answer {
        Ok(response) => {
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let outcome = header("x-sluice-outcome");
            let reason = header("x-sluice-reason").filter(|r| r != "quota_exhausted");
            let wait = response
                .headers()
                .get("retry-after-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .map(Duration::from_millis);
            // Read the body whole: the answer is only complete then.
            let complete = response.bytes().await.is_ok();
            (outcome.filter(|_| complete), wait, reason)
        }
        Err(_) => (None, None, None),
    };
    let elapsed = sent.elapsed();
    let mut report = tally.report.lock();
    report.requests += 1;
    report.proxied += 1;
    late(&mut report, elapsed, deadline, options.slack);
    match outcome {
        Some(status) => {
            report.answered += 1;
            drop(report);
            tally.count(kind, &status, reason.as_deref());
            wait.filter(|_| status == "rate_limited")
        }
        None => {
            report.lost += 1;
            None
        }
    }
}
