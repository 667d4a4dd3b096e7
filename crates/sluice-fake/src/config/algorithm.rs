//! How a limit is enforced: the fake's three algorithms and their names.

use std::fmt;
use std::str::FromStr;

use super::name::ParseNameError;

/// How a limit of `count` requests per `window` is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// At most `count` requests start in any window of length `window`: an exact log of
    /// recent accepted starts. What a strict server enforces, and the default.
    #[default]
    SlidingWindow,
    /// At most `count` requests start in each window `[k*W, (k+1)*W)`, counted from the
    /// moment the fake was created, so a client can send `2*count` across a boundary.
    FixedWindow,
    /// A bucket of `burst` tokens (default `count`) refilled continuously at `count/window`.
    TokenBucket,
}

impl Algorithm {
    /// The name used on the command line and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::SlidingWindow => "sliding-window",
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::TokenBucket => "token-bucket",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = ParseNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "sliding-window" => Ok(Algorithm::SlidingWindow),
            "fixed-window" => Ok(Algorithm::FixedWindow),
            "token-bucket" => Ok(Algorithm::TokenBucket),
            _ => Err(ParseNameError {
                got: text.to_owned(),
                expected: "sliding-window, fixed-window or token-bucket",
            }),
        }
    }
}
