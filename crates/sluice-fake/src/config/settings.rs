//! [`Config`]: every setting of one fake in one value, the routing of a request to its limits, and the check of it all.

use super::answer::{HeaderStyle, Latency, RetryAfter};
use super::error::ConfigError;
use super::limits::Limits;
use super::resource::{KeyLimits, Resource, check_name};

/// Everything the fake enforces and how it answers.
///
/// Plain fields with defaults (10/1s sliding window, no latency, `retry-after` headers,
/// automatic Retry-After, seed 0); [`FakeApi::new`](crate::FakeApi::new) checks them and
/// names the field of any invalid value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// The limits of the default resource.
    pub limits: Limits,
    /// Further resources; a request belongs to the first whose prefix matches its path,
    /// else to the default resource.
    pub resources: Vec<Resource>,
    /// The default resource's name; `None` means `core` for the GitHub style, else `default`.
    pub default_resource: Option<String>,
    /// Per-key replacements of the limits; the last one given for a key and resource wins.
    pub key_limits: Vec<KeyLimits>,
    /// Latency of admitted requests (throttled ones are answered at once).
    pub latency: Latency,
    /// Which rate-limit headers to send.
    pub headers: HeaderStyle,
    /// What to put in `Retry-After` on throttled responses.
    pub retry_after: RetryAfter,
    /// Seed of the RNG that draws latencies.
    pub seed: u64,
    /// The body shape of throttled answers (issue 15).
    pub bodies: crate::BodyStyle,
}

impl Config {
    /// The default configuration with these limits on the default resource.
    pub fn new(limits: Limits) -> Self {
        Config {
            limits,
            ..Config::default()
        }
    }

    /// Shapes throttled answers like one API's body (Google, GraphQL, GitHub, concurrency).
    pub fn with_bodies(mut self, style: crate::BodyStyle) -> Self {
        self.bodies = style;
        self
    }

    /// Adds a resource.
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.resources.push(resource);
        self
    }

    /// Replaces the default resource's limits for `key`.
    pub fn with_key_limits(mut self, key: impl Into<String>, limits: Limits) -> Self {
        self.key_limits.push(KeyLimits {
            key: key.into(),
            resource: None,
            limits,
        });
        self
    }

    /// Replaces the limits of resource `resource` for `key`.
    pub fn with_key_resource_limits(
        mut self,
        key: impl Into<String>,
        resource: impl Into<String>,
        limits: Limits,
    ) -> Self {
        self.key_limits.push(KeyLimits {
            key: key.into(),
            resource: Some(resource.into()),
            limits,
        });
        self
    }

    /// Sets the latency.
    pub fn with_latency(mut self, latency: Latency) -> Self {
        self.latency = latency;
        self
    }

    /// Sets the header style.
    pub fn with_headers(mut self, headers: HeaderStyle) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the Retry-After policy.
    pub fn with_retry_after(mut self, retry_after: RetryAfter) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Sets the RNG seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The default resource's name: as configured, else `core` (GitHub style) or `default`.
    pub fn default_resource_name(&self) -> &str {
        match (&self.default_resource, self.headers) {
            (Some(name), _) => name,
            (None, HeaderStyle::Github) => "core",
            (None, _) => "default",
        }
    }

    /// The resource a path belongs to: its name and its configured limits.
    pub fn route(&self, path: &str) -> (&str, &Limits) {
        self.resources
            .iter()
            .find(|resource| path.starts_with(&resource.path_prefix))
            .map_or((self.default_resource_name(), &self.limits), |resource| {
                (resource.name.as_str(), &resource.limits)
            })
    }

    /// Whether the resource named `resource` is a group inside the default resource.
    pub fn is_nested(&self, resource: &str) -> bool {
        self.resources
            .iter()
            .any(|entry| entry.nested && entry.name == resource)
    }

    /// Whether some limit reads a request's cost from its body, so the body must be read
    /// before the request is decided.
    pub fn needs_body(&self) -> bool {
        let all = std::iter::once(&self.limits)
            .chain(self.resources.iter().map(|resource| &resource.limits))
            .chain(self.key_limits.iter().map(|entry| &entry.limits));
        all.filter_map(|limits| limits.tokens.as_ref())
            .filter_map(|tokens| tokens.from.as_ref())
            .any(|field| field.needs_body())
    }

    /// The limits for `key` on the resource named `resource`, overrides included.
    pub fn limits_for(&self, key: &str, resource: &str) -> &Limits {
        let default_name = self.default_resource_name();
        let overridden = self.key_limits.iter().rev().find(|entry| {
            entry.key == key && entry.resource.as_deref().unwrap_or(default_name) == resource
        });
        if let Some(entry) = overridden {
            return &entry.limits;
        }
        self.resources
            .iter()
            .find(|entry| entry.name == resource)
            .map_or(&self.limits, |entry| &entry.limits)
    }

    /// Checks every value; the error names the first invalid field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limits.validate("limits")?;
        if let Some(name) = &self.default_resource {
            check_name(name, "default_resource")?;
        }
        let default_name = self.default_resource_name();
        for (index, resource) in self.resources.iter().enumerate() {
            let field = format!("resources[{index}]");
            check_name(&resource.name, &format!("{field}.name"))?;
            let taken = resource.name == default_name
                || self.resources[..index]
                    .iter()
                    .any(|earlier| earlier.name == resource.name);
            if taken {
                return Err(ConfigError::Resource {
                    field: format!("{field}.name"),
                    reason: format!("the name {:?} is already in use", resource.name),
                });
            }
            if !resource.path_prefix.starts_with('/') {
                return Err(ConfigError::Resource {
                    field: format!("{field}.path_prefix"),
                    reason: format!("{:?} must start with '/'", resource.path_prefix),
                });
            }
            resource.limits.validate(&format!("{field}.limits"))?;
        }
        for (index, entry) in self.key_limits.iter().enumerate() {
            let field = format!("key_limits[{index}]");
            if let Some(name) = &entry.resource {
                let known = name == default_name
                    || self.resources.iter().any(|resource| &resource.name == name);
                if !known {
                    return Err(ConfigError::Resource {
                        field: format!("{field}.resource"),
                        reason: format!("there is no resource named {name:?}"),
                    });
                }
            }
            entry.limits.validate(&format!("{field}.limits"))?;
        }
        if let Latency::Uniform { min, max } = self.latency {
            if min > max {
                return Err(ConfigError::LatencyRange {
                    field: "latency".to_owned(),
                    min,
                    max,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Algorithm;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
        assert_eq!(Config::default().default_resource_name(), "default");
        let github = Config::default().with_headers(HeaderStyle::Github);
        assert_eq!(github.default_resource_name(), "core");
    }

    #[test]
    fn invalid_values_name_their_field() {
        let field = |config: Config| config.validate().map_err(|error| error.field().to_owned());
        assert_eq!(
            field(Config::new(Limits::new(0, ms(1000)))),
            Err("limits.count".into())
        );
        assert_eq!(
            field(Config::new(Limits::new(1, Duration::ZERO))),
            Err("limits.window".into())
        );
        assert_eq!(
            field(Config::new(Limits::new(1, ms(1000)).with_burst(0))),
            Err("limits.burst".into())
        );
        let mut sliding_burst = Limits::new(1, ms(1000));
        sliding_burst.burst = Some(3);
        assert_eq!(
            field(Config::new(sliding_burst)),
            Err("limits.burst".into())
        );
        assert_eq!(
            field(Config::new(Limits::new(1, ms(1000)).with_tokens(10, 5))),
            Err("limits.tokens.per_request".into())
        );
        let range = Config::default().with_latency(Latency::Uniform {
            min: ms(80),
            max: ms(20),
        });
        assert_eq!(field(range.clone()), Err("latency".into()));
        let message = range.validate().map_err(|e| e.to_string());
        assert_eq!(
            message,
            Err("latency: the minimum 80ms is greater than the maximum 20ms".into())
        );
        let resource = Config::default().with_resource(Resource::new(
            "search",
            "/search",
            Limits::new(0, ms(1)),
        ));
        assert_eq!(field(resource), Err("resources[0].limits.count".into()));
        let unknown = Config::default().with_key_resource_limits("k", "nope", Limits::default());
        assert_eq!(field(unknown), Err("key_limits[0].resource".into()));
        let clash =
            Config::default().with_resource(Resource::new("default", "/x", Limits::default()));
        assert_eq!(field(clash), Err("resources[0].name".into()));
        let quoted =
            Config::default().with_resource(Resource::new("a\"b", "/x", Limits::default()));
        assert_eq!(field(quoted), Err("resources[0].name".into()));
    }

    #[test]
    fn routes_by_prefix_and_applies_key_overrides() {
        let search = Limits::new(30, Duration::from_secs(60));
        let config = Config::default()
            .with_headers(HeaderStyle::Github)
            .with_resource(Resource::new("search", "/search", search.clone()))
            .with_key_limits("vip", Limits::new(100, Duration::from_secs(1)));
        assert_eq!(config.route("/search/issues").0, "search");
        assert_eq!(config.route("/repos/x").0, "core");
        assert_eq!(config.limits_for("anyone", "search"), &search);
        assert_eq!(config.limits_for("vip", "core").count, 100);
        assert_eq!(config.limits_for("vip", "search"), &search);
    }

    #[test]
    fn parses_names() {
        assert_eq!("token-bucket".parse(), Ok(Algorithm::TokenBucket));
        assert_eq!("github".parse(), Ok(HeaderStyle::Github));
        assert!("bucket".parse::<Algorithm>().is_err());
    }
}
