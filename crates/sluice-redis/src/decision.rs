//! What this budget answers the engine: denials naming the scope, and the grant tokens it can take back.
//!
//! A grant's token says where its slot came from, so that a refund goes to
//! the same place: `f|{id}` for a fallback cell's grant, `s|{id}` for the
//! fallback's grant on several windows, `r|…` for a
//! [`SlotToken`] in Redis (`r|-` when nothing was charged, as for a call
//! with no scope).

use std::time::Duration;

use sluice::shared::{Decision, Grant, Hold, ReserveRequest};

use crate::store::SlotToken;

/// The engine's answer for a denial on the request's scope at `index` (its
/// first scope when `index` is out of range).
pub(crate) fn denied(
    request: &ReserveRequest<'_>,
    index: usize,
    wait: Duration,
    hold: Hold,
) -> Decision {
    Decision::Denied {
        wait,
        scope: request
            .scopes
            .get(index)
            .or(request.scopes.first())
            .map_or_else(String::new, |s| (*s).to_owned()),
        hold,
    }
}

/// The grant of a call that names no scope: nothing was charged anywhere.
pub(crate) fn unscoped() -> Grant {
    Grant {
        token: "r|-".into(),
    }
}

/// The grant of the fallback cell's reservation `id`.
pub(crate) fn fallback(id: u64) -> Grant {
    Grant {
        token: format!("f|{id}"),
    }
}

/// The grant of the fallback's reservation `id` on several windows.
pub(crate) fn fallback_spend(id: u64) -> Grant {
    Grant {
        token: format!("s|{id}"),
    }
}

/// The id of a grant [`fallback_spend`] made.
pub(crate) fn fallback_spend_id(grant: &Grant) -> Option<u64> {
    grant.token.strip_prefix("s|")?.parse().ok()
}

/// The grant of a slot reserved in Redis.
pub(crate) fn slot(token: &SlotToken) -> Grant {
    Grant {
        token: token.encode(),
    }
}

/// Where a grant being refunded came from.
pub(crate) enum Refund {
    /// A fallback cell's reservation.
    Fallback(u64),
    /// The fallback's reservation on several windows.
    FallbackSpend(u64),
    /// A slot in Redis that has something to undo.
    Slot(SlotToken),
    /// Nothing to give back.
    Nothing,
}

/// Reads a grant's token back.
pub(crate) fn refund(grant: &Grant) -> Refund {
    if let Some(id) = grant
        .token
        .strip_prefix("f|")
        .and_then(|id| id.parse::<u64>().ok())
    {
        return Refund::Fallback(id);
    }
    if let Some(id) = fallback_spend_id(grant) {
        return Refund::FallbackSpend(id);
    }
    match SlotToken::decode(&grant.token) {
        Some(token) if token.undo != crate::store::Undo::Nothing => Refund::Slot(token),
        _ => Refund::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Undo;

    #[test]
    fn grants_come_back_to_where_they_were_taken() {
        assert!(matches!(refund(&fallback(7)), Refund::Fallback(7)));
        assert!(matches!(refund(&unscoped()), Refund::Nothing));
        assert!(matches!(
            refund(&fallback_spend(4)),
            Refund::FallbackSpend(4)
        ));
        let token = SlotToken {
            scope: "api_key".into(),
            generation: 3,
            undo: Undo::Window("p:1".into()),
        };
        assert!(matches!(refund(&slot(&token)), Refund::Slot(back) if back == token));
        let garbage = Grant {
            token: "f|x".into(),
        };
        assert!(matches!(refund(&garbage), Refund::Nothing));
    }
}
