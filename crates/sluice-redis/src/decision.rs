//! What this budget answers the engine: denials naming the scope, and the grant tokens it can take back.
//!
//! A grant's token says where its slot came from, so that a refund goes to
//! the same place: `f|{id}` for the fallback cells' grant (on one limit or
//! several windows), `r|…` for a
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

/// The grant of the fallback cells' reservation `id`.
pub(crate) fn fallback(id: u64) -> Grant {
    Grant {
        token: format!("f|{id}"),
    }
}

/// The id of a grant [`fallback`] made.
pub(crate) fn fallback_id(grant: &Grant) -> Option<u64> {
    grant.token.strip_prefix("f|")?.parse().ok()
}

/// The grant of a slot reserved in Redis.
pub(crate) fn slot(token: &SlotToken) -> Grant {
    Grant {
        token: token.encode(),
    }
}

/// Where a grant being refunded came from.
pub(crate) enum Refund {
    /// The fallback cells' reservation.
    Fallback(u64),
    /// A slot in Redis that has something to undo.
    Slot(SlotToken),
    /// Nothing to give back.
    Nothing,
}

/// Reads a grant's token back.
pub(crate) fn refund(grant: &Grant) -> Refund {
    if let Some(id) = fallback_id(grant) {
        return Refund::Fallback(id);
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
        assert_eq!(fallback_id(&fallback(4)), Some(4));
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
