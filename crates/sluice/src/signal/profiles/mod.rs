//! The header families sluice reads, one small parser each, in order of precedence.

mod anthropic;
pub(crate) mod go_duration;
mod hubspot;
mod ietf;
mod jira;
mod openai;
mod retry_after;
mod salesforce;
mod shopify;
mod structured;
mod values;
mod x_ratelimit;
mod zendesk;

use super::{Fields, ResponseClock, Signal};

impl Profile {
    /// Whether a field named `name` (lowercase) is one this profile may read.
    pub fn may_read(&self, name: &str) -> bool {
        self.fields.iter().any(|start| name.starts_with(start))
    }
}

/// One header family's parser: reads what it knows, adds it to the signal.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    /// A short name for docs and `sluice inspect`.
    pub name: &'static str,
    /// How the name of every field it reads begins (lowercase): a response
    /// with no such field skips the profile, which would read nothing
    /// there (a test records every name each profile asks for).
    pub fields: &'static [&'static str],
    /// Reads the family's headers into the signal; ignores what it cannot parse.
    pub read: fn(&Fields<'_>, &ResponseClock, &mut Signal),
}

/// Every profile, highest precedence first: an explicit wait beats a reset,
/// and the standard fields beat vendor ones when both describe a scope.
///
/// `x_ratelimit` comes before `jira` so that Jira's timestamp reset only
/// fills the gap its numeric reader leaves; the vendor families after it
/// mostly name scopes of their own, and where they describe the key as a
/// whole (Zendesk's `x-rate-limit`, Shopify's bucket) a standard field the
/// same response carries is the better witness.
pub const ALL: &[Profile] = &[
    retry_after::PROFILE,
    ietf::PROFILE,
    x_ratelimit::PROFILE,
    jira::PROFILE,
    openai::PROFILE,
    anthropic::PROFILE,
    zendesk::PROFILE,
    shopify::PROFILE,
    hubspot::PROFILE,
    salesforce::PROFILE,
];
