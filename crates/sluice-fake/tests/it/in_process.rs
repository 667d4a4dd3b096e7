//! The fake driven in-process through `handle()` on tokio's paused clock: exact times.

use crate::support;

use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderValue, StatusCode};
use sluice_fake::{
    Algorithm, Config, FakeApi, HeaderStyle, Latency, Limits, Reply, Resource, RetryAfter, Rule,
};
use support::{elapsed, get, get_as, header, json, ms, send, statuses};
use tokio::time::sleep;

fn fake(config: Config) -> FakeApi {
    FakeApi::new(config).unwrap()
}

#[tokio::test(start_paused = true)]
async fn latency_is_applied_and_records_are_exact() {
    let fake = fake(Config::new(Limits::new(10, ms(1000))).with_latency(Latency::Fixed(ms(100))));
    let tasks: Vec<_> = (0..3).map(|_| send(&fake, get("/a"))).collect();
    for task in tasks {
        let response = task.await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(elapsed(&fake), ms(100));
    }
    // Starts exactly when the previous ones are answered: they no longer count in flight.
    let response = fake.handle(get("/b?x=1")).await;
    assert_eq!(
        json(&response),
        serde_json::json!({"path": "/b?x=1", "seq": 4})
    );
    assert_eq!(elapsed(&fake), ms(200));

    let records = fake.requests();
    let times: Vec<(f64, f64, u32)> = records
        .iter()
        .map(|record| (record.t_ms, record.end_ms, record.in_flight))
        .collect();
    assert_eq!(
        times,
        [
            (0.0, 100.0, 1),
            (0.0, 100.0, 2),
            (0.0, 100.0, 3),
            (100.0, 200.0, 1)
        ]
    );
    assert_eq!(records[3].start(), ms(100));
    assert_eq!(records[3].path, "/b?x=1");
    assert_eq!(records[3].method, "GET");
    assert_eq!(records[3].key, "anonymous");
    assert_eq!(records[3].resource, "default");
}

#[tokio::test(start_paused = true)]
async fn throttled_requests_answer_at_once_with_the_exact_wait() {
    let fake = fake(Config::new(Limits::new(3, ms(200))).with_latency(Latency::Fixed(ms(50))));
    let first: Vec<_> = (0..3).map(|_| send(&fake, get("/a"))).collect();
    sleep(ms(10)).await;
    let throttled = fake.handle(get("/a")).await;
    assert_eq!(elapsed(&fake), ms(10), "a throttled request has no latency");
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        json(&throttled),
        serde_json::json!({"error": "rate limited"})
    );
    assert_eq!(header(&throttled, "retry-after"), Some("1"));
    assert_eq!(header(&throttled, "retry-after-ms"), Some("190"));
    assert_eq!(header(&throttled, "content-type"), Some("application/json"));
    for task in first {
        assert_eq!(task.await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(elapsed(&fake), ms(50));
    tokio::time::sleep_until(fake.origin() + ms(199)).await;
    assert_eq!(
        fake.handle(get("/a")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    sleep(ms(1)).await;
    assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
    assert_eq!(statuses(&fake), [200, 200, 200, 429, 429, 200]);
    let stats = fake.stats();
    assert_eq!((stats.total, stats.throttled), (6, 2));
}

#[tokio::test(start_paused = true)]
async fn max_in_flight_rejects_until_the_first_finishes() {
    let limits = Limits::new(100, ms(1000)).with_max_in_flight(2);
    let fake = fake(Config::new(limits).with_latency(Latency::Fixed(ms(100))));
    let running = [send(&fake, get("/a")), send(&fake, get("/a"))];
    sleep(ms(10)).await;
    let rejected = fake.handle(get("/a")).await;
    assert_eq!(rejected.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&rejected, "retry-after-ms"), Some("90"));
    assert_eq!(header(&rejected, "retry-after"), Some("1"));
    // Another key has its own in-flight budget.
    assert_eq!(
        fake.handle(get_as("/a", "other")).await.status(),
        StatusCode::OK
    );
    for task in running {
        task.await.unwrap();
    }
    assert_eq!(elapsed(&fake), ms(110));
    assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
    let in_flight: Vec<(u16, u32)> = fake
        .requests()
        .iter()
        .map(|record| (record.status, record.in_flight))
        .collect();
    assert_eq!(
        in_flight,
        [(200, 1), (200, 2), (429, 2), (200, 1), (200, 1)]
    );
    assert!(fake.requests().iter().all(|record| record.in_flight <= 2));
}

#[tokio::test(start_paused = true)]
async fn the_daily_quota_lasts_until_the_day_resets() {
    let limits = Limits::new(100, ms(1000)).with_daily_quota(2);
    let fake = fake(Config::new(limits).with_headers(HeaderStyle::Ietf));
    for _ in 0..2 {
        assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
    }
    sleep(Duration::from_secs(3600)).await;
    let spent = fake.handle(get("/a")).await;
    assert_eq!(spent.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&spent, "retry-after"), Some("82800"));
    assert_eq!(header(&spent, "retry-after-ms"), Some("82800000"));
    assert_eq!(
        header(&spent, "ratelimit-policy"),
        Some("\"default\";q=100;w=1, \"daily\";q=2;w=86400")
    );
    assert_eq!(
        header(&spent, "ratelimit"),
        Some("\"default\";r=100;t=0, \"daily\";r=0;t=82800")
    );
    sleep(Duration::from_secs(82_800)).await;
    assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn ietf_style_describes_every_response() {
    let fake = fake(Config::new(Limits::new(2, ms(1000))).with_headers(HeaderStyle::Ietf));
    let first = fake.handle(get("/a")).await;
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some("\"default\";q=2;w=1")
    );
    assert_eq!(header(&first, "ratelimit"), Some("\"default\";r=1;t=1"));
    assert_eq!(header(&first, "retry-after"), None);
    sleep(ms(400)).await;
    fake.handle(get("/a")).await;
    let throttled = fake.handle(get("/a")).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&throttled, "ratelimit"), Some("\"default\";r=0;t=1"));
    assert_eq!(header(&throttled, "retry-after-ms"), Some("600"));
}

#[tokio::test(start_paused = true)]
async fn github_style_reports_epoch_resets_and_the_resource() {
    let search = Limits::new(2, Duration::from_secs(60));
    let fake = fake(
        Config::new(Limits::new(5, Duration::from_secs(60)))
            .with_headers(HeaderStyle::Github)
            .with_resource(Resource::new("search", "/search", search)),
    );
    sleep(ms(1500)).await;
    let response = fake.handle(get("/search/issues?q=x")).await;
    let date = httpdate::parse_http_date(header(&response, "date").unwrap()).unwrap();
    let epoch = |time: SystemTime| time.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let reset: u64 = header(&response, "x-ratelimit-reset")
        .unwrap()
        .parse()
        .unwrap();
    // The reset is 60 s after the start; the Date is truncated to the second.
    let date = epoch(date).as_secs();
    assert!((date + 60..=date + 61).contains(&reset), "{date} {reset}");
    assert_eq!(header(&response, "x-ratelimit-limit"), Some("2"));
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some("1"));
    assert_eq!(header(&response, "x-ratelimit-used"), Some("1"));
    assert_eq!(header(&response, "x-ratelimit-resource"), Some("search"));
    let core = fake.handle(get("/repos/a/b")).await;
    assert_eq!(header(&core, "x-ratelimit-resource"), Some("core"));
    assert_eq!(header(&core, "x-ratelimit-remaining"), Some("4"));
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_resource_throttles_only_its_own_paths() {
    let fake = fake(
        Config::new(Limits::new(10, ms(1000))).with_resource(Resource::new(
            "search",
            "/search",
            Limits::new(1, ms(1000)),
        )),
    );
    assert_eq!(
        fake.handle(get("/search?q=1")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        fake.handle(get("/search?q=2")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(fake.handle(get("/items")).await.status(), StatusCode::OK);
    let resources: Vec<String> = fake.requests().into_iter().map(|r| r.resource).collect();
    assert_eq!(resources, ["search", "search", "default"]);
}

#[tokio::test(start_paused = true)]
async fn openai_style_counts_requests_and_tokens() {
    let limits = Limits::new(10, Duration::from_secs(60)).with_tokens(300, 1000);
    let fake = fake(Config::new(limits).with_headers(HeaderStyle::Openai));
    let response = fake.handle(get("/v1/chat")).await;
    assert_eq!(header(&response, "x-ratelimit-limit-requests"), Some("10"));
    assert_eq!(
        header(&response, "x-ratelimit-remaining-requests"),
        Some("9")
    );
    assert_eq!(
        header(&response, "x-ratelimit-reset-requests"),
        Some("1m0s")
    );
    assert_eq!(header(&response, "x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(
        header(&response, "x-ratelimit-remaining-tokens"),
        Some("700")
    );
    sleep(ms(120)).await;
    fake.handle(get("/v1/chat")).await;
    fake.handle(get("/v1/chat")).await;
    let throttled = fake.handle(get("/v1/chat")).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&throttled, "x-ratelimit-remaining-tokens"),
        Some("100")
    );
    assert_eq!(
        header(&throttled, "x-ratelimit-reset-tokens"),
        Some("59.88s")
    );
    assert_eq!(header(&throttled, "retry-after"), Some("60"));
}

#[tokio::test(start_paused = true)]
async fn quiet_styles_and_retry_after_policies() {
    let none = fake(Config::new(Limits::new(1, ms(1000))).with_headers(HeaderStyle::None));
    none.handle(get("/a")).await;
    let throttled = none.handle(get("/a")).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&throttled, "retry-after"), None);
    assert_eq!(header(&throttled, "retry-after-ms"), None);
    assert!(header(&throttled, "date").is_some());

    let fixed = fake(
        Config::new(Limits::new(1, Duration::from_secs(60)))
            .with_retry_after(RetryAfter::Fixed(ms(200))),
    );
    let ok = fixed.handle(get("/a")).await;
    assert_eq!(header(&ok, "retry-after"), None);
    let throttled = fixed.handle(get("/a")).await;
    assert_eq!(header(&throttled, "retry-after"), Some("1"));
    assert_eq!(header(&throttled, "retry-after-ms"), Some("200"));

    let off = fake(
        Config::new(Limits::new(1, ms(1000)))
            .with_headers(HeaderStyle::Github)
            .with_retry_after(RetryAfter::Off),
    );
    off.handle(get("/a")).await;
    let throttled = off.handle(get("/a")).await;
    assert_eq!(header(&throttled, "retry-after"), None);
    assert_eq!(header(&throttled, "x-ratelimit-remaining"), Some("0"));
}

#[tokio::test(start_paused = true)]
async fn the_date_header_follows_virtual_time() {
    let fake = fake(Config::default());
    let date = |response: &http::Response<bytes::Bytes>| {
        httpdate::parse_http_date(header(response, "date").unwrap()).unwrap()
    };
    let before = date(&fake.handle(get("/a")).await);
    sleep(Duration::from_secs(7200)).await;
    let after = date(&fake.handle(get("/a")).await);
    let advanced = after.duration_since(before).unwrap().as_secs();
    assert!((7199..=7201).contains(&advanced), "{advanced}");
}

#[tokio::test(start_paused = true)]
async fn keys_are_limited_separately_and_can_be_overridden() {
    let fake = fake(
        Config::new(Limits::new(1, ms(1000))).with_key_limits("vip", Limits::new(3, ms(1000))),
    );
    let x_api_key = http::Request::get("/a")
        .header("x-api-key", "k2")
        .body(bytes::Bytes::new())
        .unwrap();
    assert_eq!(
        fake.handle(get_as("/a", "k1")).await.status(),
        StatusCode::OK
    );
    assert_eq!(fake.handle(x_api_key).await.status(), StatusCode::OK);
    assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
    assert_eq!(
        fake.handle(get_as("/a", "k1")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..3 {
        assert_eq!(
            fake.handle(get_as("/a", "vip")).await.status(),
            StatusCode::OK
        );
    }
    let keys: Vec<String> = fake.requests().into_iter().map(|r| r.key).collect();
    assert_eq!(keys[..4], ["k1", "k2", "anonymous", "k1"]);
}

#[tokio::test(start_paused = true)]
async fn fixed_windows_align_to_the_start_and_buckets_refill() {
    let fixed = fake(Config::new(
        Limits::new(2, ms(100)).with_algorithm(Algorithm::FixedWindow),
    ));
    sleep(ms(90)).await;
    for _ in 0..2 {
        fixed.handle(get("/a")).await;
    }
    let throttled = fixed.handle(get("/a")).await;
    assert_eq!(header(&throttled, "retry-after-ms"), Some("10"));
    sleep(ms(10)).await;
    for _ in 0..2 {
        assert_eq!(fixed.handle(get("/a")).await.status(), StatusCode::OK);
    }

    let bucket = fake(Config::new(Limits::new(2, ms(100)).with_burst(3)));
    for _ in 0..3 {
        assert_eq!(bucket.handle(get("/a")).await.status(), StatusCode::OK);
    }
    let throttled = bucket.handle(get("/a")).await;
    assert_eq!(header(&throttled, "retry-after-ms"), Some("50"));
    sleep(ms(50)).await;
    assert_eq!(bucket.handle(get("/a")).await.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn scripted_rules_answer_their_request_and_bypass_the_limiter() {
    let fake = fake(Config::new(Limits::new(2, ms(1000))));
    fake.script(Rule::nth(
        2,
        Reply::new(StatusCode::TOO_MANY_REQUESTS)
            .header(RETRY_AFTER, HeaderValue::from_static("7"))
            .body("slow down"),
    ));
    fake.script(Rule::path_prefix(
        "/x",
        Reply::new(StatusCode::SERVICE_UNAVAILABLE)
            .header(RETRY_AFTER, HeaderValue::from_static("2"))
            .latency(ms(30)),
    ));
    assert_eq!(fake.pending_rules(), 2);

    assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
    let second = fake.handle(get("/a")).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&second, "retry-after"), Some("7"));
    assert_eq!(header(&second, "retry-after-ms"), None);
    assert_eq!(second.body().as_ref(), b"slow down");
    // The scripted 429 charged nothing: one slot is left.
    assert_eq!(fake.handle(get("/a")).await.status(), StatusCode::OK);
    let down = fake.handle(get("/x/y")).await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&down, "retry-after"), Some("2"));
    assert_eq!(elapsed(&fake), ms(30));
    // Consumed: the same path is now throttled by the (spent) limiter.
    assert_eq!(
        fake.handle(get("/x/y")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(fake.pending_rules(), 0);
    assert_eq!(statuses(&fake), [200, 429, 200, 503, 429]);
    assert_eq!(fake.stats().throttled, 2);
}

#[tokio::test(start_paused = true)]
async fn a_limited_rule_waits_for_an_admitted_request() {
    let fake = fake(Config::new(Limits::new(1, ms(1000))));
    fake.handle(get("/a")).await;
    fake.script(Rule::next(Reply::new(StatusCode::BAD_GATEWAY)).limited());
    let throttled = fake.handle(get("/a")).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&throttled, "retry-after-ms"), Some("1000"));
    assert_eq!(fake.pending_rules(), 1);
    sleep(ms(1000)).await;
    assert_eq!(
        fake.handle(get("/a")).await.status(),
        StatusCode::BAD_GATEWAY
    );
    // ... and it was charged like any admitted request.
    assert_eq!(
        fake.handle(get("/a")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn uniform_latency_is_seeded() {
    let config = Config::new(Limits::new(100, ms(1000)))
        .with_latency(Latency::Uniform {
            min: ms(20),
            max: ms(80),
        })
        .with_seed(42);
    let run = |fake: FakeApi| async move {
        for _ in 0..10 {
            fake.handle(get("/a")).await;
        }
        fake.requests()
            .iter()
            .map(|record| record.end_ms - record.t_ms)
            .collect::<Vec<f64>>()
    };
    let first = run(fake(config.clone())).await;
    let second = run(fake(config)).await;
    assert_eq!(first, second);
    assert!(first.iter().all(|latency| (20.0..=80.0).contains(latency)));
    assert!(first.iter().any(|latency| *latency != first[0]));
}

#[tokio::test(start_paused = true)]
async fn reset_forgets_records_and_limits_but_keeps_the_clock() {
    let fake = fake(Config::new(Limits::new(1, ms(1000))));
    fake.handle(get("/a")).await;
    assert_eq!(
        fake.handle(get("/a")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    sleep(ms(250)).await;
    let reset = fake.handle(
        http::Request::post("/_fake/reset")
            .body(bytes::Bytes::new())
            .unwrap(),
    );
    assert_eq!(reset.await.status(), StatusCode::OK);
    assert!(fake.requests().is_empty());
    let response = fake.handle(get("/a")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(json(&response)["seq"], 1);
    assert_eq!(fake.requests()[0].t_ms, 250.0);

    let stats = fake.handle(get("/_fake/stats")).await;
    let stats: sluice_fake::Stats = serde_json::from_slice(stats.body()).unwrap();
    assert_eq!((stats.total, stats.throttled), (1, 0));
    assert_eq!(
        fake.requests().len(),
        1,
        "control requests are not recorded"
    );
    let wrong = fake.handle(get("/_fake/reset")).await;
    assert_eq!(wrong.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[test]
fn invalid_configuration_is_rejected_with_the_field() {
    let error = FakeApi::new(Config::new(Limits::new(0, ms(1000)))).unwrap_err();
    assert_eq!(error.field(), "limits.count");
    assert_eq!(error.to_string(), "limits.count must be at least 1");
}

#[test]
fn handle_can_be_an_executor_on_any_runtime() {
    // The engine runs executors in spawned tasks: the future must be Send and 'static-able.
    fn assert_send<T: Send + 'static>(_: &T) {}
    let fake = FakeApi::new(Config::default()).unwrap();
    let future = async move { fake.handle(get("/a")).await };
    assert_send(&future);
}
