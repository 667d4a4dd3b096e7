//! Key names: every key of a credential under one hash tag, names made safe for keys.
//!
//! Credential and scope names come from configuration and from server
//! headers, so they are untrusted as key material. [`part`] keeps
//! `[A-Za-z0-9._-]` and percent-escapes every other byte (`%` included),
//! which is injective and can never produce `{`, `}`, `:` or `|`: a name
//! cannot break the hash tag, the key structure or a grant token. Very long
//! names are shortened to a prefix plus a 64-bit FNV-1a digest.

use std::fmt::Write as _;

/// Escaped names longer than this are shortened (keys stay small; Redis
/// hashes the whole tag on every command).
const MAX_PART: usize = 96;

/// The escaped form of a credential or scope name, safe inside a key.
pub fn part(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            out.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
    }
    if out.len() > MAX_PART {
        // `~` is escaped above, so a shortened name never equals a plain one.
        let mut short: String = out.chars().take(MAX_PART - 18).collect();
        let _ = write!(short, "~{:016x}", fnv1a(name.as_bytes()));
        return short;
    }
    out
}

/// FNV-1a, 64 bits (http://www.isthe.com/chongo/tech/comp/fnv/: offset basis
/// 14695981039346656037, prime 1099511628211). Stable across builds and
/// platforms, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// True when `prefix` may start every key: non-empty, `[A-Za-z0-9._-]` only.
pub(crate) fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The keys of one credential: `{prefix}:{cred}:…`, all in the slot of `{cred}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialKeys {
    base: String,
}

impl CredentialKeys {
    /// The keys of `credential` under `prefix` (already validated).
    pub fn new(prefix: &str, credential: &str) -> Self {
        CredentialKeys {
            base: format!("{prefix}:{{{}}}", part(credential)),
        }
    }

    /// Hash: scope part → blocked until (µs, server clock).
    pub fn blocks(&self) -> String {
        format!("{}:blocks", self.base)
    }

    /// Hash: scope part → quota spent until (µs, server clock).
    pub fn quota(&self) -> String {
        format!("{}:quota", self.base)
    }

    /// Hash: `p:{scope}` → the scope's limit as last reserved, `g:{scope}` → its generation.
    pub fn meta(&self) -> String {
        format!("{}:meta", self.base)
    }

    /// Sorted set: the scope's sliding-window log (score = start µs).
    pub fn window(&self, scope_part: &str) -> String {
        format!("{}:w:{scope_part}", self.base)
    }

    /// String: the scope's GCRA theoretical arrival time (µs).
    pub fn gcra(&self, scope_part: &str) -> String {
        format!("{}:g:{scope_part}", self.base)
    }

    /// Sorted set: the log of window `index` of a budget (a scope's request
    /// window or a unit's window; score = start µs, member = `{call}|{cost}`).
    pub fn budget(&self, name_part: &str, index: usize) -> String {
        format!("{}:b:{name_part}:{index}", self.base)
    }

    /// String: the mark a reservation whose answer never came is voided
    /// by (`id`, its member prefix): a reservation finding it charges
    /// nothing (see `lua/void.lua`).
    pub fn void(&self, id: &str) -> String {
        format!("{}:v:{id}", self.base)
    }

    /// Sorted set: process id → last seen (µs): the heartbeat.
    pub fn processes(&self) -> String {
        format!("{}:procs", self.base)
    }

    /// The hash tag every key carries, `{cred}` (for `CLUSTER KEYSLOT`).
    pub fn tag(&self) -> &str {
        self.base
            .find('{')
            .map_or(self.base.as_str(), |at| &self.base[at..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_readable() {
        assert_eq!(part("openai-prod_1.v2"), "openai-prod_1.v2");
    }

    #[test]
    fn braces_colons_and_percent_are_escaped() {
        assert_eq!(part("a{b}c"), "a%7Bb%7Dc");
        assert_eq!(part("x:y|z"), "x%3Ay%7Cz");
        assert_eq!(part("50%"), "50%25");
        assert_eq!(part("é"), "%C3%A9");
        assert_ne!(part("%41"), part("A"));
    }

    #[test]
    fn long_names_are_shortened_distinctly() {
        let a = part(&"a".repeat(500));
        let b = part(&format!("{}b", "a".repeat(499)));
        assert!(a.len() <= MAX_PART, "{a}");
        assert_ne!(a, b);
        assert!(a.contains('~'));
    }

    #[test]
    fn every_key_carries_one_tag() {
        let keys = CredentialKeys::new("sluice", "k{1}");
        assert_eq!(keys.blocks(), "sluice:{k%7B1%7D}:blocks");
        assert_eq!(keys.window("api_key"), "sluice:{k%7B1%7D}:w:api_key");
        assert_eq!(keys.tag(), "{k%7B1%7D}");
        for key in [keys.quota(), keys.meta(), keys.gcra("s"), keys.processes()] {
            assert!(key.starts_with("sluice:{k%7B1%7D}:"), "{key}");
        }
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(valid_prefix("sluice"));
        assert!(!valid_prefix(""));
        assert!(!valid_prefix("a{b"));
        assert!(!valid_prefix("a:b"));
    }
}
