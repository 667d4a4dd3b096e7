//! `sluice fake-api`: serve the throttling fake API from the command line.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use sluice_fake::{
    Algorithm, BodyStyle, Config, CostField, FakeApi, FakeServer, HeaderStyle, Latency, Limits,
    RetryAfter,
};
use tokio::net::TcpListener;

/// Flags of `sluice fake-api`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// Requests per window and key, such as 10/1s or 600/1m; repeat it for several windows
    /// that all hold (--limit 15/1s --limit 5000/1h).
    #[arg(long, value_name = "RATE", default_value = "10/1s", value_parser = parse_rate)]
    limit: Vec<sluice::Rate>,

    /// How the limit is enforced: sliding-window, fixed-window or token-bucket
    /// [default: sliding-window, or token-bucket with --burst].
    #[arg(long, value_name = "ALGORITHM", value_parser = parse_algorithm)]
    algorithm: Option<Algorithm>,

    /// Token-bucket capacity (default: the limit's count); selects the token bucket.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    burst: Option<u32>,

    /// Requests served at once per key; one more gets 429 at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_in_flight: Option<u32>,

    /// Requests accepted per key per day, days counted from the start.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    daily_quota: Option<u32>,

    /// Latency of accepted requests: fixed (50ms) or uniform in a range (20ms..80ms).
    #[arg(long, value_name = "LATENCY", value_parser = parse_latency)]
    latency: Option<Latency>,

    /// Rate-limit headers to send: none, retry-after, ietf, github, openai or anthropic.
    #[arg(long, value_name = "STYLE", default_value = "retry-after", value_parser = parse_headers)]
    headers: HeaderStyle,

    /// Retry-After on throttled responses: auto (the exact wait), SECONDS (0.2, 5) or off.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = parse_retry_after)]
    retry_after: RetryAfter,

    /// Body shape of throttled answers: plain, google, graphql, github-secondary or concurrency.
    #[arg(long, value_name = "SHAPE", default_value = "plain", value_parser = parse_bodies)]
    bodies: BodyStyle,

    /// Seed of the latency RNG.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,

    /// Tokens per window and key, reported by the openai header style (with --tokens-per-request).
    #[arg(long, value_name = "N", requires = "tokens_per_request", value_parser = clap::value_parser!(u32).range(1..))]
    token_limit: Option<u32>,

    /// Tokens each request costs out of --token-limit.
    #[arg(long, value_name = "N", requires = "token_limit", value_parser = clap::value_parser!(u32).range(1..))]
    tokens_per_request: Option<u32>,

    /// Where a request states its token charge: a JSON pointer into its body
    /// (/max_tokens) or header:NAME; without it, --tokens-per-request.
    #[arg(long, value_name = "FIELD", requires = "token_limit", value_parser = parse_cost_field)]
    tokens_from: Option<CostField>,

    /// Report a true usage of MIN..MAX percent of each charge (usage.total_tokens in the
    /// body) and keep only that in the token budget once answered, such as 40..60.
    #[arg(long, value_name = "MIN..MAX", requires = "token_limit", value_parser = parse_usage)]
    usage: Option<(u32, u32)>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = match config(&args) {
        Ok(config) => config,
        Err(message) => {
            // The same shape and status as clap's own errors for a bad flag value.
            eprintln!("error: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    let api = FakeApi::new(config).context("invalid fake-api configuration")?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let server = FakeServer::spawn_on(listener, api)?;

    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {}", server.url())?;
    // Scripts wait for this line to learn the port; a pipe would otherwise hold it back.
    stdout.flush()?;

    shutdown_signal().await?;
    let stats = server.api().stats();
    server.shutdown().await?;
    eprintln!(
        "fake-api: {} requests, {} throttled",
        stats.total, stats.throttled
    );
    Ok(ExitCode::SUCCESS)
}

/// The fake's configuration from the flags; an error names the flags that conflict.
fn config(args: &Args) -> Result<Config, String> {
    let algorithm = match (args.algorithm, args.burst) {
        (None, Some(_)) => Algorithm::TokenBucket,
        (Some(algorithm), Some(_)) if algorithm != Algorithm::TokenBucket => {
            return Err(format!(
                "--burst applies only to --algorithm token-bucket, not {algorithm}"
            ));
        }
        (algorithm, _) => algorithm.unwrap_or_default(),
    };
    let (first, further) = match args.limit.split_first() {
        Some(split) => split,
        None => return Err("--limit needs at least one RATE".to_owned()),
    };
    let mut limits = Limits::new(first.count().get(), first.window()).with_algorithm(algorithm);
    for rate in further {
        limits = limits.with_window(rate.count().get(), rate.window());
    }
    limits.burst = args.burst;
    limits.max_in_flight = args.max_in_flight;
    limits.daily_quota = args.daily_quota;
    if let (Some(limit), Some(per_request)) = (args.token_limit, args.tokens_per_request) {
        if per_request > limit {
            return Err(format!(
                "--tokens-per-request {per_request} exceeds --token-limit {limit}"
            ));
        }
        limits = limits.with_tokens(per_request, limit);
        if let Some(field) = &args.tokens_from {
            limits = limits.with_tokens_from(field.clone());
        }
        if let Some((min, max)) = args.usage {
            limits = limits.with_usage(min, max);
        }
    }
    Ok(Config::new(limits)
        .with_latency(args.latency.unwrap_or_default())
        .with_headers(args.headers)
        .with_retry_after(args.retry_after)
        .with_bodies(args.bodies)
        .with_seed(args.seed))
}

/// Resolves on SIGINT or, on Unix, SIGTERM.
async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result,
            _ = terminate.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

fn parse_rate(text: &str) -> Result<sluice::Rate, String> {
    text.parse()
        .map_err(|error: sluice::RateError| error.to_string())
}

fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    text.parse()
        .map_err(|error: sluice_fake::ParseNameError| error.to_string())
}

fn parse_headers(text: &str) -> Result<HeaderStyle, String> {
    text.parse()
        .map_err(|error: sluice_fake::ParseNameError| error.to_string())
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("{text:?} is not a duration such as 50ms or 1s: {error}"))
}

fn parse_latency(text: &str) -> Result<Latency, String> {
    match text.split_once("..") {
        None => parse_duration(text).map(Latency::Fixed),
        Some((min, max)) => {
            let (min, max) = (parse_duration(min)?, parse_duration(max)?);
            if min > max {
                return Err(format!(
                    "the range's minimum {} is greater than its maximum {}",
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                ));
            }
            Ok(Latency::Uniform { min, max })
        }
    }
}

fn parse_bodies(text: &str) -> Result<BodyStyle, String> {
    match text.trim() {
        "plain" => Ok(BodyStyle::Plain),
        "google" => Ok(BodyStyle::GoogleRetryInfo),
        "graphql" => Ok(BodyStyle::GraphqlThrottled),
        "github-secondary" => Ok(BodyStyle::GithubSecondary),
        "concurrency" => Ok(BodyStyle::Concurrency),
        other => Err(format!(
            "{other:?} is not a body shape: plain, google, graphql, github-secondary or concurrency"
        )),
    }
}

fn parse_retry_after(text: &str) -> Result<RetryAfter, String> {
    match text {
        "auto" => Ok(RetryAfter::Auto),
        "off" => Ok(RetryAfter::Off),
        _ => {
            let seconds = text.parse::<f64>().ok().and_then(|seconds| {
                (seconds >= 0.0).then(|| Duration::try_from_secs_f64(seconds).ok())?
            });
            seconds
                .or_else(|| humantime::parse_duration(text).ok())
                .map(RetryAfter::Fixed)
                .ok_or_else(|| {
                    format!("expected auto, off, or a number of seconds such as 0.2, got {text:?}")
                })
        }
    }
}

fn parse_cost_field(text: &str) -> Result<CostField, String> {
    text.parse()
        .map_err(|error: sluice_fake::ParseNameError| error.to_string())
}

/// `MIN..MAX` percentages (a `%` after each is allowed), within 0..100, the minimum first.
fn parse_usage(text: &str) -> Result<(u32, u32), String> {
    let percent = |part: &str| -> Result<u32, String> {
        let digits = part.trim().trim_end_matches('%');
        match digits.parse::<u32>() {
            Ok(value) if value <= 100 => Ok(value),
            _ => Err(format!("{part:?} is not a percentage from 0 to 100")),
        }
    };
    let (min, max) = text
        .split_once("..")
        .ok_or_else(|| format!("{text:?} is not MIN..MAX, such as 40..60"))?;
    let (min, max) = (percent(min)?, percent(max)?);
    if min > max {
        return Err(format!("{text:?}: the minimum is above the maximum"));
    }
    Ok((min, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_latencies() {
        let ms = Duration::from_millis;
        assert_eq!(parse_latency("50ms"), Ok(Latency::Fixed(ms(50))));
        assert_eq!(
            parse_latency("20ms..80ms"),
            Ok(Latency::Uniform {
                min: ms(20),
                max: ms(80)
            })
        );
        assert!(parse_latency("80ms..20ms").is_err());
        assert!(parse_latency("soon").is_err());
    }

    #[test]
    fn parses_bodies() {
        assert_eq!(parse_bodies("google"), Ok(BodyStyle::GoogleRetryInfo));
        assert_eq!(parse_bodies("concurrency"), Ok(BodyStyle::Concurrency));
        assert!(parse_bodies("xml").is_err());
    }

    #[test]
    fn parses_retry_after() {
        assert_eq!(parse_retry_after("auto"), Ok(RetryAfter::Auto));
        assert_eq!(parse_retry_after("off"), Ok(RetryAfter::Off));
        assert_eq!(
            parse_retry_after("0.2"),
            Ok(RetryAfter::Fixed(Duration::from_millis(200)))
        );
        assert_eq!(
            parse_retry_after("2s"),
            Ok(RetryAfter::Fixed(Duration::from_secs(2)))
        );
        assert!(parse_retry_after("-1").is_err());
        assert!(parse_retry_after("NaN").is_err());
        assert!(parse_retry_after("later").is_err());
    }

    #[test]
    fn parses_usage_ranges() {
        assert_eq!(parse_usage("40..60"), Ok((40, 60)));
        assert_eq!(parse_usage("40%..60%"), Ok((40, 60)));
        assert!(parse_usage("60..40").is_err());
        assert!(parse_usage("0..101").is_err());
        assert!(parse_usage("50").is_err());
    }

    #[test]
    fn several_limits_become_windows() {
        use clap::Parser;

        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::try_parse_from([
            "fake-api",
            "--limit",
            "2/1s",
            "--limit",
            "100/1m",
            "--token-limit",
            "1000",
            "--tokens-per-request",
            "1",
            "--tokens-from",
            "/max_tokens",
            "--usage",
            "50..70",
        ])
        .map_err(|error| error.to_string());
        let config = cli.and_then(|cli| config(&cli.args));
        let limits = config.map(|config| config.limits);
        let windows = limits
            .as_ref()
            .map(|limits| (limits.count, limits.windows.len()));
        assert_eq!(windows, Ok((2, 1)));
        let tokens = limits.ok().and_then(|limits| limits.tokens);
        assert_eq!(
            tokens.and_then(|tokens| tokens.from),
            Some(CostField::Body("/max_tokens".into()))
        );
    }
}
