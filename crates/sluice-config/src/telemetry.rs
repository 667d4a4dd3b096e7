//! `[telemetry]` and the standard `OTEL_*` variables: where a call's
//! OpenTelemetry spans go, under which service name, and which are sampled.
//!
//! Off unless an endpoint is given. A variable that is set wins over the
//! file, so that an operator can turn traces on, off or elsewhere without
//! editing it; an error names the field or the variable.

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use url::Url;

use crate::error::ConfigError;
use crate::file::TelemetryFile;
use crate::secret::{Env, Secret};

/// The service name spans carry when none is given.
pub const DEFAULT_SERVICE_NAME: &str = "sluice";

/// How often spans are sent unless `OTEL_BSP_SCHEDULE_DELAY` says
/// otherwise: the OpenTelemetry SDKs' default delay is 5 s, and a span
/// should leave well within it.
pub const DEFAULT_EXPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Which calls are traced: the OpenTelemetry SDKs' samplers by their
/// `OTEL_TRACES_SAMPLER` names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// A call whose caller sent a trace context follows the caller's
    /// sampled flag (`parentbased_*`); the root rule decides the rest.
    pub parent_based: bool,
    /// What a call without a parent (or every call, unless parent-based) gets.
    pub root: RootSampler,
}

/// The decision for a call that [`Sampler::parent_based`] does not settle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RootSampler {
    /// Every call is traced.
    AlwaysOn,
    /// No call is traced.
    AlwaysOff,
    /// This share of traces (by trace id, so a trace is kept whole).
    Ratio(f64),
}

impl Default for Sampler {
    /// `parentbased_always_on`, the OpenTelemetry default.
    fn default() -> Self {
        Sampler {
            parent_based: true,
            root: RootSampler::AlwaysOn,
        }
    }
}

impl Sampler {
    /// A sampler by its `OTEL_TRACES_SAMPLER` name; `arg` is the ratio of
    /// the `traceidratio` ones (1 when absent, as the SDKs read it).
    fn parse(name: &str, arg: Option<f64>, field: &str) -> Result<Sampler, ConfigError> {
        let (parent_based, root) = match name.trim().strip_prefix("parentbased_") {
            Some(root) => (true, root),
            None => (false, name.trim()),
        };
        let root = match root {
            "always_on" => RootSampler::AlwaysOn,
            "always_off" => RootSampler::AlwaysOff,
            "traceidratio" => RootSampler::Ratio(arg.unwrap_or(1.0)),
            _ => {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "{name:?} is not a sampler: use always_on, always_off, traceidratio or parentbased_ with one of them"
                    ),
                ));
            }
        };
        Ok(Sampler { parent_based, root })
    }
}

/// `[telemetry]` as checked at load: what the file says, before the
/// environment is read ([`Telemetry::resolve`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Telemetry {
    endpoint: Option<Url>,
    traces_endpoint: Option<Url>,
    service_name: Option<String>,
    sampler: Option<String>,
    sampler_ratio: Option<f64>,
}

/// Where spans go and which are kept: what the exporter is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub traces_endpoint: Url,
    /// Headers sent with every export (an API key, say): values never print.
    pub headers: Vec<(HeaderName, Secret)>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Which calls are traced.
    pub sampler: Sampler,
    /// How often a batch of spans is sent.
    pub export_interval: Duration,
}

/// `[telemetry]` checked; the errors name the field.
pub(crate) fn section(file: Option<&TelemetryFile>) -> Result<Telemetry, ConfigError> {
    let Some(file) = file else {
        return Ok(Telemetry::default());
    };
    let url = |text: &Option<String>, field: &str| {
        text.as_deref()
            .map(|text| http_url(text, field))
            .transpose()
    };
    let telemetry = Telemetry {
        endpoint: url(&file.endpoint, "telemetry.endpoint")?,
        traces_endpoint: url(&file.traces_endpoint, "telemetry.traces_endpoint")?,
        service_name: match file.service_name.as_deref().map(str::trim) {
            Some("") => {
                return Err(ConfigError::invalid(
                    "telemetry.service_name",
                    "must not be empty",
                ));
            }
            name => name.map(str::to_owned),
        },
        sampler: file.sampler.clone(),
        sampler_ratio: file.sampler_ratio,
    };
    if let Some(ratio) = telemetry.sampler_ratio {
        ratio_field(ratio, "telemetry.sampler_ratio")?;
    }
    if let Some(name) = &telemetry.sampler {
        Sampler::parse(name, telemetry.sampler_ratio, "telemetry.sampler")?;
    }
    Ok(telemetry)
}

impl Telemetry {
    /// The settings the `OTEL_*` variables of `env` and the file give
    /// together, or `None` when traces are off: no endpoint, or
    /// `OTEL_SDK_DISABLED=true`.
    pub fn resolve(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<TelemetrySettings>, ConfigError> {
        resolve(self, env)
    }
}

fn resolve(file: &Telemetry, env: Env<'_>) -> Result<Option<TelemetrySettings>, ConfigError> {
    // An empty variable counts as unset, as the SDKs read them.
    let var = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = var(name) {
            if protocol.trim() != "http/protobuf" {
                return Err(ConfigError::invalid(
                    name,
                    format!("{protocol:?}: sluice exports OTLP over HTTP only (http/protobuf)"),
                ));
            }
            break;
        }
    }
    // The signal's own URL is used as is; the base gets `v1/traces`.
    let traces_endpoint = match var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        Some(text) => Some(http_url(&text, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")?),
        None => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(text) => Some(traces_below(http_url(
                &text,
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            )?)),
            None => file
                .traces_endpoint
                .clone()
                .or_else(|| file.endpoint.clone().map(traces_below)),
        },
    };
    let Some(traces_endpoint) = traces_endpoint else {
        return Ok(None);
    };
    let service_name = var("OTEL_SERVICE_NAME")
        .map(|name| name.trim().to_owned())
        .or_else(|| file.service_name.clone())
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
    let sampler = match var("OTEL_TRACES_SAMPLER") {
        Some(name) => {
            let arg = match var("OTEL_TRACES_SAMPLER_ARG") {
                Some(text) => Some(ratio_text(&text, "OTEL_TRACES_SAMPLER_ARG")?),
                None => None,
            };
            Sampler::parse(&name, arg, "OTEL_TRACES_SAMPLER")?
        }
        None => match &file.sampler {
            Some(name) => Sampler::parse(name, file.sampler_ratio, "telemetry.sampler")?,
            None => Sampler::default(),
        },
    };
    let headers = match var("OTEL_EXPORTER_OTLP_TRACES_HEADERS") {
        Some(text) => headers(&text, "OTEL_EXPORTER_OTLP_TRACES_HEADERS")?,
        None => match var("OTEL_EXPORTER_OTLP_HEADERS") {
            Some(text) => headers(&text, "OTEL_EXPORTER_OTLP_HEADERS")?,
            None => Vec::new(),
        },
    };
    // The SDKs' batch delay, in milliseconds.
    let export_interval = match var("OTEL_BSP_SCHEDULE_DELAY") {
        Some(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                return Err(ConfigError::invalid(
                    "OTEL_BSP_SCHEDULE_DELAY",
                    format!("{text:?} is not a positive number of milliseconds"),
                ));
            }
        },
        None => DEFAULT_EXPORT_INTERVAL,
    };
    Ok(Some(TelemetrySettings {
        traces_endpoint,
        headers,
        service_name,
        sampler,
        export_interval,
    }))
}

/// An `http://` or `https://` URL; a collector's URL is not secret, but a
/// bad one is not quoted either (it may carry a token in its query).
fn http_url(text: &str, field: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(text.trim())
        .map_err(|_| ConfigError::invalid(field, "is not a URL (the value is not shown)"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError::invalid(
            field,
            "must be an http:// or https:// URL (OTLP over HTTP)",
        ));
    }
    Ok(url)
}

/// The OTLP base URL's traces path: `http://collector:4318` gives
/// `http://collector:4318/v1/traces`, a path prefix is kept.
fn traces_below(mut base: Url) -> Url {
    let path = format!("{}/v1/traces", base.path().trim_end_matches('/'));
    base.set_path(&path);
    base
}

fn ratio_text(text: &str, field: &str) -> Result<f64, ConfigError> {
    let ratio = text
        .trim()
        .parse::<f64>()
        .map_err(|_| ConfigError::invalid(field, format!("{text:?} is not a number")))?;
    ratio_field(ratio, field)
}

fn ratio_field(ratio: f64, field: &str) -> Result<f64, ConfigError> {
    if !(0.0..=1.0).contains(&ratio) {
        return Err(ConfigError::invalid(
            field,
            format!("{ratio} must be from 0 to 1"),
        ));
    }
    Ok(ratio)
}

/// `key=value,key2=value2`, values percent-decoded (the OTLP exporter
/// specification's form); values are kept secret, as they are usually keys.
fn headers(text: &str, field: &str) -> Result<Vec<(HeaderName, Secret)>, ConfigError> {
    let mut headers = Vec::new();
    for pair in text.split(',').filter(|pair| !pair.trim().is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| ConfigError::invalid(field, "each entry must be key=value"))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            ConfigError::invalid(field, format!("{:?} is not a header name", name.trim()))
        })?;
        let value = percent_encoding::percent_decode_str(value.trim())
            .decode_utf8()
            .map_err(|_| {
                ConfigError::invalid(field, format!("the value of {name} is not UTF-8"))
            })?;
        if HeaderValue::from_str(&value).is_err() {
            return Err(ConfigError::invalid(
                field,
                format!("the value of {name} is not a valid header value (not shown)"),
            ));
        }
        headers.push((name, Secret::new(value)));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(toml: &str) -> Result<Telemetry, ConfigError> {
        let file: TelemetryFile = toml::from_str(toml).map_err(|error| ConfigError::Syntax {
            message: error.to_string(),
        })?;
        section(Some(&file))
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn off_without_an_endpoint() {
        let none = Telemetry::default().resolve(&env(&[])).unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_and_the_signal_one_is_kept() {
        let base = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")];
        let settings = Telemetry::default().resolve(&env(&base)).unwrap().unwrap();
        assert_eq!(
            settings.traces_endpoint.as_str(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(settings.service_name, "sluice");
        assert_eq!(settings.sampler, Sampler::default());
        let both = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:9000/in"),
        ];
        let settings = Telemetry::default().resolve(&env(&both)).unwrap().unwrap();
        assert_eq!(settings.traces_endpoint.as_str(), "http://b:9000/in");
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let telemetry = file(
            "endpoint = \"http://file:4318\"\nservice_name = \"agents\"\nsampler = \"always_off\"",
        )
        .unwrap();
        let settings = telemetry.resolve(&env(&[])).unwrap().unwrap();
        assert_eq!(
            settings.traces_endpoint.as_str(),
            "http://file:4318/v1/traces"
        );
        assert_eq!(settings.service_name, "agents");
        assert_eq!(settings.sampler.root, RootSampler::AlwaysOff);
        assert!(!settings.sampler.parent_based);
        let vars = [
            ("OTEL_SERVICE_NAME", "edge"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ];
        let settings = telemetry.resolve(&env(&vars)).unwrap().unwrap();
        assert_eq!(settings.service_name, "edge");
        assert_eq!(settings.sampler.root, RootSampler::Ratio(0.25));
        assert!(settings.sampler.parent_based);
        let off = telemetry
            .resolve(&env(&[("OTEL_SDK_DISABLED", "true")]))
            .unwrap();
        assert_eq!(off, None);
    }

    #[test]
    fn errors_name_the_field_or_the_variable() {
        let field = |toml: &str| file(toml).unwrap_err().field().map(str::to_owned);
        assert_eq!(
            field("endpoint = \"redis://x\"").as_deref(),
            Some("telemetry.endpoint")
        );
        assert_eq!(
            field("sampler = \"sometimes\"").as_deref(),
            Some("telemetry.sampler")
        );
        assert_eq!(
            field("sampler_ratio = 2.0").as_deref(),
            Some("telemetry.sampler_ratio")
        );
        assert_eq!(
            field("service_name = \" \"").as_deref(),
            Some("telemetry.service_name")
        );
        let variable = |vars: &[(&str, &str)]| {
            let error = Telemetry::default().resolve(&env(vars)).unwrap_err();
            error.field().map(str::to_owned)
        };
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            variable(&[endpoint, ("OTEL_TRACES_SAMPLER", "jaeger_remote")]).as_deref(),
            Some("OTEL_TRACES_SAMPLER")
        );
        assert_eq!(
            variable(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).as_deref(),
            Some("OTEL_EXPORTER_OTLP_PROTOCOL")
        );
        assert_eq!(
            variable(&[endpoint, ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")]).as_deref(),
            Some("OTEL_EXPORTER_OTLP_HEADERS")
        );
        assert_eq!(
            variable(&[endpoint, ("OTEL_BSP_SCHEDULE_DELAY", "0")]).as_deref(),
            Some("OTEL_BSP_SCHEDULE_DELAY")
        );
        assert_eq!(
            variable(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "nope")]).as_deref(),
            Some("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        );
    }

    #[test]
    fn headers_are_decoded_and_never_printed() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k%3D1, x-team=ops"),
        ];
        let settings = Telemetry::default().resolve(&env(&vars)).unwrap().unwrap();
        assert_eq!(settings.headers.len(), 2);
        assert_eq!(settings.headers[0].1.expose(), "k=1");
        assert!(!format!("{settings:?}").contains("k=1"));
    }
}
