//! Issue 14's budgets in the fake, in-process on tokio's paused clock: several windows per
//! key, groups nested in the default resource, a token charge read from the request, and
//! the true usage reported and kept.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use sluice_fake::{Config, CostField, FakeApi, HeaderStyle, Latency, Limits, Resource};
use support::{get, header, json, ms, statuses};
use tokio::time::sleep;

fn fake(config: Config) -> FakeApi {
    FakeApi::new(config).unwrap()
}

/// A chat completion asking for `max_tokens`.
fn chat(max_tokens: u64) -> Request<Bytes> {
    let body = serde_json::json!({"model": "m", "max_tokens": max_tokens});
    Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_string()))
        .unwrap()
}

fn llm_limits() -> Limits {
    Limits::new(100, Duration::from_secs(60))
        .with_tokens(10, 1000)
        .with_tokens_from("/max_tokens".parse().unwrap())
}

#[tokio::test(start_paused = true)]
async fn every_window_of_a_key_holds_at_once() {
    // 2 a second and 3 in ten seconds.
    let limits = Limits::new(2, ms(1000)).with_window(3, Duration::from_secs(10));
    let fake = fake(Config::new(limits).with_headers(HeaderStyle::Ietf));
    fake.handle(get("/a")).await;
    fake.handle(get("/a")).await;
    let throttled = fake.handle(get("/a")).await;
    assert_eq!(header(&throttled, "retry-after-ms"), Some("1000"));
    sleep(ms(1000)).await;
    let third = fake.handle(get("/a")).await;
    assert_eq!(
        header(&third, "ratelimit"),
        Some("\"default\";r=1;t=1, \"default-10s\";r=0;t=9")
    );
    // The one-second window has room; the ten-second one says wait until 10 s.
    let throttled = fake.handle(get("/a")).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&throttled, "retry-after-ms"), Some("9000"));
    sleep(ms(9000)).await;
    assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
    assert_eq!(statuses(&fake), [200, 200, 429, 200, 429, 200]);
    let starts: Vec<f64> = fake
        .requests()
        .iter()
        .filter(|record| record.status == 200)
        .map(|record| record.t_ms)
        .collect();
    assert_eq!(starts, [0.0, 0.0, 1000.0, 10_000.0]);
}

#[tokio::test(start_paused = true)]
async fn a_nested_group_spends_its_own_and_the_default_limits() {
    let search =
        Resource::new("search", "/search", Limits::new(2, Duration::from_secs(60))).nested();
    let config = Config::new(Limits::new(3, Duration::from_secs(60))).with_resource(search);
    let fake = fake(config);
    fake.handle(get("/search?q=1")).await;
    fake.handle(get("/search?q=2")).await;
    // The group is full; the default resource still has one left.
    let throttled = fake.handle(get("/search?q=3")).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fake.handle(get("/items")).await.status(), StatusCode::OK);
    // The default resource is now spent by the group's two and this one.
    assert_eq!(
        fake.handle(get("/items")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(statuses(&fake), [200, 200, 429, 200, 429]);
}

#[tokio::test(start_paused = true)]
async fn a_rejected_group_request_charges_neither_scope() {
    let search =
        Resource::new("search", "/search", Limits::new(5, Duration::from_secs(60))).nested();
    let config = Config::new(Limits::new(1, Duration::from_secs(60))).with_resource(search);
    let fake = fake(config);
    assert_eq!(fake.handle(get("/items")).await.status(), StatusCode::OK);
    // The default resource is spent, so the group's request is refused...
    let throttled = fake.handle(get("/search")).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&throttled, "retry-after-ms"), Some("60000"));
    sleep(Duration::from_secs(60)).await;
    // ...and charged nothing in the group: it still admits five in its window.
    for _ in 0..5 {
        sleep(Duration::from_secs(60)).await;
        assert_eq!(fake.handle(get("/search")).await.status(), StatusCode::OK);
    }
}

#[tokio::test(start_paused = true)]
async fn the_token_charge_is_read_from_the_json_body() {
    let fake = fake(Config::new(llm_limits()).with_headers(HeaderStyle::Openai));
    let response = fake.handle(chat(600)).await;
    assert_eq!(
        header(&response, "x-ratelimit-remaining-tokens"),
        Some("400")
    );
    let throttled = fake.handle(chat(500)).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    // A request without the field costs the default.
    let plain = fake.handle(get("/v1/models")).await;
    assert_eq!(header(&plain, "x-ratelimit-remaining-tokens"), Some("390"));
    let tokens: Vec<Option<u32>> = fake.requests().iter().map(|r| r.tokens).collect();
    assert_eq!(tokens, [Some(600), None, Some(10)]);
}

#[tokio::test(start_paused = true)]
async fn a_header_can_state_the_charge() {
    let limits = Limits::new(100, Duration::from_secs(60))
        .with_tokens(1, 100)
        .with_tokens_from("header:X-Cost".parse().unwrap());
    let fake = fake(Config::new(limits).with_headers(HeaderStyle::Anthropic));
    let request = Request::get("/v1/messages")
        .header("x-cost", "70")
        .body(Bytes::new())
        .unwrap();
    let response = fake.handle(request).await;
    assert_eq!(
        header(&response, "anthropic-ratelimit-tokens-remaining"),
        Some("30")
    );
    assert_eq!(
        header(&response, "anthropic-ratelimit-requests-remaining"),
        Some("99")
    );
    assert!(
        header(&response, "anthropic-ratelimit-tokens-reset")
            .is_some_and(|reset| reset.ends_with('Z'))
    );
    // Not an integer: the default charge of 1.
    let odd = Request::get("/v1/messages")
        .header("x-cost", "-3")
        .body(Bytes::new())
        .unwrap();
    let response = fake.handle(odd).await;
    assert_eq!(
        header(&response, "anthropic-ratelimit-tokens-remaining"),
        Some("29")
    );
}

#[tokio::test(start_paused = true)]
async fn the_answer_reports_a_lower_usage_and_the_budget_keeps_only_that() {
    let limits = llm_limits().with_usage(50, 50);
    let config = Config::new(limits)
        .with_headers(HeaderStyle::Openai)
        .with_latency(Latency::Fixed(ms(500)));
    let fake = fake(config);
    let response = fake.handle(chat(800)).await;
    assert_eq!(
        json(&response)["usage"],
        serde_json::json!({"total_tokens": 400})
    );
    assert_eq!(header(&response, "x-usage-total-tokens"), Some("400"));
    // While it was in flight the whole charge was held: decided at 0, 200 left.
    assert_eq!(
        header(&response, "x-ratelimit-remaining-tokens"),
        Some("200")
    );
    // Answered at 500 ms: the budget now holds only the 400 used, so 600 fit.
    let second = fake.handle(chat(600)).await;
    assert_eq!(second.status(), StatusCode::OK);
    let records = fake.requests();
    assert_eq!(records[1].t_ms, 500.0);
    let tokens: Vec<Option<u32>> = records.iter().map(|r| r.tokens).collect();
    assert_eq!(tokens, [Some(400), Some(300)]);
}

#[tokio::test(start_paused = true)]
async fn a_request_sent_before_the_answer_sees_the_whole_charge() {
    let limits = llm_limits().with_usage(10, 10);
    let config = Config::new(limits).with_latency(Latency::Fixed(ms(500)));
    let fake = fake(config);
    let first = {
        let fake = fake.clone();
        tokio::spawn(async move { fake.handle(chat(900)).await })
    };
    sleep(ms(100)).await;
    let early = fake.handle(chat(200)).await;
    assert_eq!(early.status(), StatusCode::TOO_MANY_REQUESTS);
    // Exactly when the first is answered, the refund of 810 is in.
    assert_eq!(header(&early, "retry-after-ms"), Some("59900"));
    first.await.unwrap();
    assert_eq!(fake.handle(chat(200)).await.status(), StatusCode::OK);
    let starts: Vec<(f64, u16)> = fake.requests().iter().map(|r| (r.t_ms, r.status)).collect();
    assert_eq!(starts, [(0.0, 200), (100.0, 429), (500.0, 200)]);
}

#[test]
fn cost_fields_parse_and_refuse_what_they_cannot_read() {
    assert_eq!(
        "/usage/total_tokens".parse(),
        Ok(CostField::Body("/usage/total_tokens".into()))
    );
    assert_eq!(
        "header:X-Tokens".parse(),
        Ok(CostField::Header("x-tokens".into()))
    );
    assert!("max_tokens".parse::<CostField>().is_err());
    assert!("header:bad name".parse::<CostField>().is_err());
    let bad = Config::new(llm_limits().with_usage(60, 40));
    assert_eq!(
        FakeApi::new(bad)
            .map(|_| ())
            .map_err(|e| e.field().to_owned()),
        Err("limits.tokens.usage".into())
    );
    let zero = Config::new(Limits::new(1, ms(1000)).with_window(0, ms(10)));
    assert_eq!(
        FakeApi::new(zero)
            .map(|_| ())
            .map_err(|e| e.field().to_owned()),
        Err("limits.windows[0].count".into())
    );
}
