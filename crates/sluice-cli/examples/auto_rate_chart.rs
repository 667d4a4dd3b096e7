//! Draws `rate = "auto"` finding a limit it was never told, then finding it
//! again after the limit halves: `docs/auto-rate.svg`, shown in docs/adaptive-limits.md.
//!
//! ```text
//! cargo run -p sluice-cli --example auto_rate_chart -- docs/auto-rate.svg
//! ```
//!
//! The engine runs against the fake API in-process on tokio's paused clock
//! (the fake's limiter reads that clock too), so two simulated minutes take
//! a second and every run draws the same chart.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use parking_lot::Mutex;
use plotters::prelude::*;
use serde_json::{Value, json};
use sluice::{
    Call, CredentialConfig, Executor, Gate, GateConfig, Reply, Request, ToolConfig, TransportError,
};
use sluice_fake::{Config, FakeApi, Latency, Limits, Record};

/// The hidden limit, then half of it from `HALVED_AT` on.
const LIMIT: u32 = 20;
const HALVED_AT: u64 = 60;
const SECONDS: u64 = 120;
/// Offered load: twice the limit.
const OFFERED_PER_SECOND: u64 = 40;

/// Hands each call to whichever fake is current.
#[derive(Clone)]
struct InProcess(Arc<Mutex<FakeApi>>);

impl Executor for InProcess {
    type Payload = Value;

    async fn execute(&self, request: Request<Value>) -> Result<Reply, TransportError> {
        let api = self.0.lock().clone();
        let http_request =
            http::Request::get(format!("/api/{}?n={}", request.tool, request.payload["n"]))
                .header("authorization", "Bearer auto")
                .body(Bytes::new())
                .map_err(|e| TransportError::connect(e.to_string()))?;
        Ok(api.handle(http_request).await.into())
    }
}

fn fake(limit: u32) -> anyhow::Result<FakeApi> {
    let config = Config::new(Limits::new(limit, Duration::from_secs(1)))
        .with_latency(Latency::Fixed(Duration::from_millis(50)));
    Ok(FakeApi::new(config)?)
}

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "docs/auto-rate.svg".to_owned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    let (records, rates) = runtime.block_on(run())?;
    draw(&path, &records, &rates).with_context(|| format!("drawing {path}"))?;
    println!("wrote {path}");
    Ok(())
}

/// Every request the fakes recorded (times from the run's start), and the
/// controller's rate sampled every 100 ms.
async fn run() -> anyhow::Result<(Vec<Record>, Vec<(f64, f64)>)> {
    let start = tokio::time::Instant::now();
    let current = Arc::new(Mutex::new(fake(LIMIT)?));
    let config = GateConfig::default()
        .credential("api", CredentialConfig::default().auto_rate())
        .tool("read", ToolConfig::read("api"));
    let gate = Gate::builder(config, InProcess(current.clone()))
        .seed(1)
        .build()?;

    let rates = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (gate, rates) = (gate.clone(), rates.clone());
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(100));
            loop {
                ticks.tick().await;
                let rate = gate
                    .status()
                    .first()
                    .and_then(|s| s.auto_rate.as_ref().map(|a| a.rate));
                if let Some(rate) = rate {
                    rates.lock().push((start.elapsed().as_secs_f64(), rate));
                }
            }
        })
    };
    let mut records = Vec::new();
    let mut calls = tokio::task::JoinSet::new();
    let every = Duration::from_secs(1) / OFFERED_PER_SECOND as u32;
    for n in 0..OFFERED_PER_SECOND * SECONDS {
        if n == OFFERED_PER_SECOND * HALVED_AT {
            let old = std::mem::replace(&mut *current.lock(), fake(LIMIT / 2)?);
            records.extend(shifted(&old, start));
        }
        let gate = gate.clone();
        calls.spawn(async move {
            gate.call(Call::new("read", json!({ "n": n })).deadline(Duration::from_secs(3)))
                .await
        });
        tokio::time::sleep(every).await;
    }
    while calls.join_next().await.is_some() {}
    sampler.abort();
    let last = current.lock().clone();
    records.extend(shifted(&last, start));
    let rates = rates.lock().clone();
    Ok((records, rates))
}

/// The fake's records with times measured from the run's start.
fn shifted(api: &FakeApi, start: tokio::time::Instant) -> Vec<Record> {
    let offset = api.origin().saturating_duration_since(start).as_secs_f64() * 1_000.0;
    api.requests()
        .into_iter()
        .map(|mut record| {
            record.t_ms += offset;
            record
        })
        .collect()
}

fn draw(path: &str, records: &[Record], rates: &[(f64, f64)]) -> anyhow::Result<()> {
    let mut accepted = vec![0.0; SECONDS as usize];
    let mut refused = vec![0.0; SECONDS as usize];
    for record in records {
        let second = (record.t_ms / 1_000.0) as usize;
        let bucket = if record.status == 429 {
            &mut refused
        } else {
            &mut accepted
        };
        if let Some(count) = bucket.get_mut(second) {
            *count += 1.0;
        }
    }
    let root = SVGBackend::new(path, (960, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "rate = \"auto\" finding a limit it was never told (20/s, then 10/s)",
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(34)
        .y_label_area_size(44)
        .build_cartesian_2d(0.0..SECONDS as f64, 0.0..f64::from(LIMIT) * 1.6)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("requests per second")
        .light_line_style(WHITE.mix(0.0))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let green = RGBColor(44, 160, 44);
    let orange = RGBColor(255, 127, 14);
    chart
        .draw_series(accepted.iter().enumerate().map(|(s, n)| {
            Rectangle::new(
                [(s as f64, 0.0), (s as f64 + 0.9, *n)],
                green.mix(0.8).filled(),
            )
        }))?
        .label("accepted by the server, per second")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], green.filled()));
    chart
        .draw_series(
            refused
                .iter()
                .zip(&accepted)
                .enumerate()
                .filter(|(_, (r, _))| **r > 0.0)
                .map(|(s, (r, a))| {
                    Rectangle::new([(s as f64, *a), (s as f64 + 0.9, a + r)], orange.filled())
                }),
        )?
        .label("refused (429)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], orange.filled()));
    let limit = [
        (0.0, f64::from(LIMIT)),
        (HALVED_AT as f64, f64::from(LIMIT)),
        (HALVED_AT as f64, f64::from(LIMIT / 2)),
        (SECONDS as f64, f64::from(LIMIT / 2)),
    ];
    chart
        .draw_series(LineSeries::new(limit, BLACK.stroke_width(2)))?
        .label("the server's limit (hidden from sluice)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
    if !rates.is_empty() {
        chart
            .draw_series(LineSeries::new(rates.iter().copied(), BLUE.stroke_width(1)))?
            .label("the controller's allowed rate")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLUE.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    root.present()?;
    Ok(())
}
