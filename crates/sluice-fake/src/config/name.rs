//! The error of every name parsed from the command line or a file (an
//! algorithm, a header style, a cost field): what was given and what is
//! accepted.

/// A name that is not one of the accepted choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{got:?} is not one of {expected}")]
pub struct ParseNameError {
    pub(super) got: String,
    pub(super) expected: &'static str,
}
