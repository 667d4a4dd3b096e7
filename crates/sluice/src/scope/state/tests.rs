//! Step 2's reading of a scope, against each word of the server.

use std::sync::Arc;

use super::Scope;
use crate::config::{CredentialConfig, Defaults};

fn scope() -> Scope {
    let limits = CredentialConfig::with_rate("10/1s".parse().unwrap())
        .resolve("k", &Defaults::default())
        .unwrap();
    Scope::primary(Arc::from("k"), Arc::from("api_key"), &limits, 0)
}

#[test]
fn each_word_of_the_server_holds_the_scope_as_step_2_reads_it() {
    let fresh = scope();
    assert_eq!(fresh.holds(0), (None, None));
    assert_eq!(fresh.quota_until(0), None);
    assert_eq!(fresh.blocked_until(0), None);

    let penalized = scope();
    penalized.penalize(2_000, 1_000);
    assert_eq!(penalized.holds(1_000), (None, Some(2_000)));
    assert_eq!(penalized.blocked_until(1_500), Some(2_000));
    assert_eq!(penalized.holds(2_000), (None, None));

    let blocked = scope();
    blocked.block(3_000, 1_000);
    assert_eq!(blocked.holds(1_000), (None, Some(3_000)));

    let empty = scope();
    empty.sync(0, 4_000, 1_000);
    assert_eq!(empty.blocked_until(1_000), Some(4_000));
    let some_left = scope();
    some_left.sync(5, 4_000, 1_000);
    assert_eq!(some_left.holds(1_000), (None, None));

    let spent = scope();
    assert!(spent.exhaust(9_000, 1_000));
    assert_eq!(spent.holds(1_000), (Some(9_000), None));
    assert_eq!(spent.quota_until(8_999), Some(9_000));
    assert_eq!(spent.quota_until(9_000), None);
}
