//! The header families sluice reads, one small parser each, in order of precedence.

mod ietf;
mod retry_after;
mod structured;

use super::{Fields, ResponseClock, Signal};

/// One header family's parser: reads what it knows, adds it to the signal.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    /// A short name for docs and `sluice inspect`.
    pub name: &'static str,
    /// Reads the family's headers into the signal; ignores what it cannot parse.
    pub read: fn(&Fields<'_>, &ResponseClock, &mut Signal),
}

/// Every profile, highest precedence first: an explicit wait beats a reset,
/// and the standard fields beat vendor ones when both describe a scope.
pub const ALL: &[Profile] = &[retry_after::PROFILE, ietf::PROFILE];
