//! Before step 2: what a call spends — its priority, and its cost in each
//! unit, fixed or read from one of its arguments.

use std::sync::Arc;

use crate::call::Call;
use crate::config::{Cost, Spend};
use crate::executor::Payload;
use crate::outcome::Outcome;
use crate::scope::Ask;

/// Prices a call: its priority (the call's, else its tool's) and each
/// unit's cost. A cost read from an argument must be a non-negative whole
/// number; otherwise the call fails, naming the argument, before anything
/// is sent.
pub(super) fn ask<P: Payload>(spend: &Spend, call: &Call<P>) -> Result<Ask, Outcome> {
    let mut costs = Vec::with_capacity(spend.cost.len());
    for (unit, cost) in &spend.cost {
        let amount = match cost {
            Cost::Fixed(amount) => *amount,
            Cost::Argument(name) => argument(&*call.payload, name, unit)?,
        };
        costs.push((Arc::from(unit.as_str()), amount));
    }
    Ok(Ask {
        priority: call.priority.unwrap_or(spend.priority),
        costs,
    })
}

fn argument<P: Payload>(payload: &P, name: &str, unit: &str) -> Result<u64, Outcome> {
    let message = |why: &str| {
        Outcome::error(
            None,
            format!("argument {name:?} {why}: it prices the call in {unit}; nothing was sent"),
        )
    };
    match payload.argument(name) {
        None | Some(serde_json::Value::Null) => Err(message("is missing")),
        Some(value) => value
            .as_u64()
            .ok_or_else(|| message("must be a non-negative whole number")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::Priority;

    fn spend() -> Spend {
        let mut spend = Spend::default();
        spend
            .cost
            .insert("tokens".into(), Cost::Argument("max_tokens".into()));
        spend.cost.insert("points".into(), Cost::Fixed(10));
        spend.priority = Priority::Low;
        spend
    }

    #[test]
    fn costs_come_from_arguments_or_are_fixed() {
        let call = Call::new("chat", json!({"max_tokens": 500}));
        let priced = ask(&spend(), &call).unwrap();
        assert_eq!(priced.priority, Priority::Low);
        assert_eq!(
            priced.costs,
            vec![(Arc::from("points"), 10), (Arc::from("tokens"), 500)]
        );
        let high = Call::new("chat", json!({"max_tokens": 1})).priority(Priority::High);
        assert_eq!(ask(&spend(), &high).unwrap().priority, Priority::High);
    }

    #[test]
    fn a_bad_argument_is_an_error_naming_it() {
        for args in [
            json!({}),
            json!({"max_tokens": -1}),
            json!({"max_tokens": 2.5}),
            json!({"max_tokens": "9"}),
        ] {
            let outcome = ask(&spend(), &Call::new("chat", args)).unwrap_err();
            let Outcome::Error { message, .. } = outcome else {
                panic!("not an error");
            };
            assert!(message.contains("\"max_tokens\""), "{message}");
        }
    }
}
