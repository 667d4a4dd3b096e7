//! How the fake answers: which rate-limit headers it sends, what it puts in Retry-After, how long admitted requests take.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;

use super::name::ParseNameError;

/// Which rate-limit headers the fake sends, imitating a family of real APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// No rate-limit headers at all, not even `Retry-After`: a server that just says 429.
    None,
    /// Only `Retry-After` and `retry-after-ms`, on throttled responses. The default.
    #[default]
    RetryAfter,
    /// The IETF draft's structured `RateLimit-Policy` and `RateLimit` fields on every response.
    Ietf,
    /// GitHub's `x-ratelimit-limit/-remaining/-reset/-used/-resource` on every response.
    Github,
    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` on every response.
    Openai,
    /// Anthropic's `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}` (resets
    /// in RFC 3339) on every response.
    Anthropic,
}

impl HeaderStyle {
    /// The name used on the command line and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderStyle::None => "none",
            HeaderStyle::RetryAfter => "retry-after",
            HeaderStyle::Ietf => "ietf",
            HeaderStyle::Github => "github",
            HeaderStyle::Openai => "openai",
            HeaderStyle::Anthropic => "anthropic",
        }
    }
}

impl fmt::Display for HeaderStyle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HeaderStyle {
    type Err = ParseNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "none" => Ok(HeaderStyle::None),
            "retry-after" => Ok(HeaderStyle::RetryAfter),
            "ietf" => Ok(HeaderStyle::Ietf),
            "github" => Ok(HeaderStyle::Github),
            "openai" => Ok(HeaderStyle::Openai),
            "anthropic" => Ok(HeaderStyle::Anthropic),
            _ => Err(ParseNameError {
                got: text.to_owned(),
                expected: "none, retry-after, ietf, github, openai or anthropic",
            }),
        }
    }
}

/// What the fake puts in `Retry-After` when it throttles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfter {
    /// The exact time until this request would be admitted: until a slot of the key's
    /// limiter frees, or until the earliest in-flight request finishes. The default.
    #[default]
    Auto,
    /// Always this long, whatever the limiter says (a server with a canned answer).
    Fixed(Duration),
    /// No `Retry-After` at all (other rate-limit headers still follow the style).
    Off,
}

/// How long an admitted request takes before the fake answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Latency {
    /// Answer at once. The default.
    #[default]
    Zero,
    /// Always this long.
    Fixed(Duration),
    /// Uniformly distributed between `min` and `max` inclusive, from the fake's seeded RNG.
    Uniform {
        /// The shortest latency.
        min: Duration,
        /// The longest latency.
        max: Duration,
    },
}

impl Latency {
    /// Draws one latency from `rng`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match *self {
            Latency::Zero => Duration::ZERO,
            Latency::Fixed(latency) => latency,
            Latency::Uniform { min, max } if min < max => {
                let low = duration_nanos(min);
                let high = duration_nanos(max);
                Duration::from_nanos(rng.random_range(low..=high))
            }
            Latency::Uniform { min, .. } => min,
        }
    }
}

fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn uniform_latency_stays_in_range() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let latency = Latency::Uniform {
            min: ms(20),
            max: ms(80),
        };
        for _ in 0..100 {
            let drawn = latency.sample(&mut rng);
            assert!(drawn >= ms(20) && drawn <= ms(80), "{drawn:?}");
        }
    }
}
