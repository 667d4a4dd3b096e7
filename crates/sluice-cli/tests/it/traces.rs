//! Issue 53: `sluice serve` exports a call's spans over OTLP/HTTP, and the
//! spans still queued leave on SIGTERM. The batch delay is set far past
//! the test, so only the shutdown's flush can deliver them.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use sluice_testkit::{Fault, OtlpReceiver, SluiceProcess, Upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_flushes_the_spans_still_queued() {
    let receiver = OtlpReceiver::spawn().await;
    let upstream = Upstream::spawn(Fault::Ok).await;
    let dir = std::env::temp_dir().join(format!("sluice-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[credentials.api]\nbase_url = \"{}\"\nrate = \"10/1s\"\n\n[tools.get_item]\ncredential = \"api\"\npath = \"/items/{{id}}\"\n",
            upstream.url()
        ),
    )
    .unwrap();
    let endpoint = receiver.endpoint();
    let mut sluice = SluiceProcess::serve(
        Path::new(env!("CARGO_BIN_EXE_sluice")),
        &config,
        &[],
        &[
            ("RUST_LOG", "info"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "sidecar-under-test"),
            // An hour: nothing leaves on the timer during the test.
            ("OTEL_BSP_SCHEDULE_DELAY", "3600000"),
        ],
    );
    let turn = json!({"calls": [{"id": "c1", "tool": "get_item", "args": {"id": 1}}]});
    let body = reqwest::Client::new()
        .post(format!("{}/v1/turns", sluice.url))
        .header("content-type", "application/json")
        .body(turn.to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["results"][0]["status"], "ok", "{answer}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        receiver.spans().is_empty(),
        "nothing leaves before the delay"
    );
    sluice.terminate();
    let status = sluice.exited_within(Duration::from_secs(15));
    assert!(status.is_some_and(|status| status.success()), "{status:?}");
    let spans = receiver.spans();
    assert_eq!(spans.len(), 2, "{spans:#?}\n{}", sluice.stop());
    let call = spans.iter().find(|span| span.kind == 1).unwrap();
    assert_eq!(call.name, "execute_tool get_item");
    assert_eq!(call.service, "sidecar-under-test");
    assert_eq!(call.attr("gen_ai.tool.call.id"), Some(&json!("c1")));
    let client = spans.iter().find(|span| span.kind == 3).unwrap();
    assert_eq!(client.parent_span_id, call.span_id);
    assert_eq!(
        upstream.seen()[0].header("traceparent"),
        Some(format!("00-{}-{}-01", call.trace_id, client.span_id).as_str())
    );
    let _ = std::fs::remove_dir_all(&dir);
}
