//! The simulated model: what it asks for each turn, and how it reacts to answers.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

pub(crate) use crate::harness::View;

/// How deep a failed search is rephrased: narrower, then narrower again.
const MAX_REPHRASE_DEPTH: u8 = 2;

const TOPICS: &[&str] = &[
    "refund", "login", "invoice", "outage", "export", "billing", "sso", "webhook",
];
const FACETS: &[&str] = &[
    "last week",
    "enterprise",
    "urgent",
    "eu",
    "unassigned",
    "reopened",
];
const CUSTOMERS: &[&str] = &["acme", "globex", "initech", "umbrella", "hooli"];

/// One tool call as the model emits it.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub(crate) tool: &'static str,
    pub(crate) args: Value,
    /// How many rephrasings led here.
    depth: u8,
}

/// A model with seeded habits.
pub(crate) struct Model {
    rng: StdRng,
}

impl Model {
    pub(crate) fn new(seed: u64) -> Self {
        Model {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// A turn's fan-out: 4 `search_tickets`, 3 `get_usage`, 1 `list_customers`.
    pub(crate) fn turn_calls(&mut self) -> Vec<ToolCall> {
        let mut calls = Vec::with_capacity(8);
        for _ in 0..4 {
            let topic = self.pick(TOPICS);
            calls.push(call("search_tickets", json!({ "query": topic }), 0));
        }
        for _ in 0..3 {
            let customer = self.pick(CUSTOMERS);
            calls.push(call("get_usage", json!({ "customer": customer }), 0));
        }
        calls.push(call("list_customers", json!({}), 0));
        calls
    }

    /// The second phase's turn: twelve distinct searches at once, more
    /// than the key's share lets start now.
    pub(crate) fn twelve_calls(&mut self) -> Vec<ToolCall> {
        (0..12)
            .map(|i| {
                // (i mod 8, i mod 6) differ for every i below 24: no two coalesce.
                let query = format!("{} {}", TOPICS[i % TOPICS.len()], FACETS[i % FACETS.len()]);
                call("search_tickets", json!({ "query": query }), 0)
            })
            .collect()
    }

    /// What a model does with "tool failed": split it into two narrower
    /// searches, up to two levels deep.
    pub(crate) fn rephrase(&mut self, failed: &ToolCall) -> Vec<ToolCall> {
        if failed.depth >= MAX_REPHRASE_DEPTH {
            return Vec::new();
        }
        let base = match failed.tool {
            "search_tickets" => failed.args["query"]
                .as_str()
                .unwrap_or("tickets")
                .to_owned(),
            "get_usage" => format!("usage {}", failed.args["customer"].as_str().unwrap_or("")),
            _ => "customers".to_owned(),
        };
        (0..2)
            .map(|_| {
                let facet = self.pick(FACETS);
                let n: u8 = self.rng.random_range(1..=9);
                call(
                    "search_tickets",
                    json!({ "query": format!("{base} {facet} {n}") }),
                    failed.depth + 1,
                )
            })
            .collect()
    }

    fn pick(&mut self, from: &[&'static str]) -> &'static str {
        from.choose(&mut self.rng).copied().unwrap_or("tickets")
    }
}

fn call(tool: &'static str, args: Value, depth: u8) -> ToolCall {
    ToolCall { tool, args, depth }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_fans_out_eight_calls() {
        let calls = Model::new(1).turn_calls();
        let count = |tool: &str| calls.iter().filter(|c| c.tool == tool).count();
        assert_eq!(
            (
                count("search_tickets"),
                count("get_usage"),
                count("list_customers")
            ),
            (4, 3, 1)
        );
    }

    #[test]
    fn rephrasing_stops_two_levels_deep() {
        let mut model = Model::new(1);
        let first = model.turn_calls().remove(0);
        let second = model.rephrase(&first);
        assert_eq!(second.len(), 2);
        let third = model.rephrase(&second[0]);
        assert_eq!(third.len(), 2);
        assert!(model.rephrase(&third[0]).is_empty());
    }

    #[test]
    fn the_second_phase_asks_twelve_distinct_searches() {
        let calls = Model::new(1).twelve_calls();
        let distinct: std::collections::BTreeSet<String> =
            calls.iter().map(|c| c.args.to_string()).collect();
        assert_eq!((calls.len(), distinct.len()), (12, 12));
    }

    #[test]
    fn the_seed_decides() {
        let a: Vec<_> = Model::new(7)
            .turn_calls()
            .into_iter()
            .map(|c| c.args)
            .collect();
        let b: Vec<_> = Model::new(7)
            .turn_calls()
            .into_iter()
            .map(|c| c.args)
            .collect();
        assert_eq!(a, b);
    }
}
