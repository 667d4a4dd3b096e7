//! The soak's load mix: a seeded generator, the weighted fault pick, and the upstream's answer for each fault.
//!
//! Each call's path is `/fault/{kind}/{n}`: the upstream acts out `kind` and
//! counts the requests for call `n`.

use std::time::Duration;

use crate::upstream::Fault;

/// The soak's load mix: a seeded generator and the weighted fault pick.
pub(super) struct Mix(pub(super) crate::SplitMix);

impl Mix {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    pub(super) fn fault(&mut self, faults: &[(&'static str, u32)]) -> &'static str {
        let total: u32 = faults.iter().map(|(_, weight)| weight).sum();
        let mut pick = self.below(u64::from(total.max(1))) as u32;
        for &(name, weight) in faults {
            if pick < weight {
                return name;
            }
            pick -= weight;
        }
        "ok"
    }
}

/// The upstream's answer for a fault's name.
pub(super) fn fault(kind: &str) -> Fault {
    match kind {
        "hang" => Fault::Hang,
        "reset" => Fault::Reset,
        "close_mid_body" => Fault::CloseMidBody,
        "long_length" => Fault::LongContentLength,
        "trickle" => Fault::Trickle {
            per_byte: Duration::from_millis(1),
        },
        "garbage" => Fault::garbage_headers(200),
        "r429" => Fault::status(429, &["retry-after-ms: 2"]),
        "r503" => Fault::status(503, &[]),
        "not_http" => Fault::NotHttp,
        _ => Fault::Ok,
    }
}

/// `(kind, n)` of a `/fault/{kind}/{n}` target.
pub(super) fn parse_target(target: &str) -> Option<(&str, u64)> {
    let rest = target.strip_prefix("/fault/")?;
    let (kind, n) = rest.split_once('/')?;
    let n = n.split(['?', '/']).next()?.parse().ok()?;
    Some((kind, n))
}
