//! The spend script's reply, parsed: the decision, the processes
//! present, the credential's holds, and for a grant its start, further
//! starts and buckets.

use redis::Value;
use sluice::shared::Hold;

use super::{Bucket, Seen, Spent};
use crate::Error;
use crate::store::{View, hold_of, pairs};

pub(super) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

/// The spend script's reply: what it decided, the processes present (0
/// when no heartbeat was sent), and for a grant its start and buckets.
pub(super) fn parse_spent(value: &Value, budgets: usize) -> Result<Seen, Error> {
    let Value::Array(items) = value else {
        return Err(Error::Reply(format!("unexpected spend reply {value:?}")));
    };
    let field = |index: usize| {
        items
            .get(index)
            .and_then(int)
            .and_then(|n| u64::try_from(n).ok())
    };
    let mut view = View {
        processes: field(3).and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
        ..View::default()
    };
    if let (Some(blocks), Some(quotas)) = (items.get(4), items.get(5)) {
        view.blocks = pairs(blocks)?;
        view.quotas = pairs(quotas)?;
    }
    let spent = parse_decision(value, items, budgets)?;
    let next = field(6);
    let start = field(7).unwrap_or(0);
    if let Spent::Granted { wait } = spent {
        view.now = start.checked_sub(wait);
    }
    let count = field(8).and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let further = (9..9 + count)
        .map(field)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::Reply(format!("unexpected spend reply {value:?}")))?;
    let mut buckets = Vec::new();
    let mut at = 9 + count;
    while items.len() >= at + 3 {
        let (Some(index), Some(before), Some(after)) = (field(at), field(at + 1), field(at + 2))
        else {
            return Err(Error::Reply(format!("unexpected spend reply {value:?}")));
        };
        let budget = usize::try_from(index)
            .ok()
            .and_then(|index| index.checked_sub(1))
            .filter(|index| *index < budgets)
            .ok_or_else(|| Error::Reply(format!("unexpected spend reply {value:?}")))?;
        buckets.push(Bucket {
            budget,
            before,
            after,
        });
        at += 3;
    }
    Ok(Seen {
        spent,
        view,
        next,
        start,
        buckets,
        further,
    })
}

fn parse_decision(value: &Value, items: &[Value], budgets: usize) -> Result<Spent, Error> {
    let bad = || Error::Reply(format!("unexpected spend reply {value:?}"));
    let field = |index: usize| items.get(index).and_then(int);
    let wait = field(1)
        .and_then(|wait| u64::try_from(wait).ok())
        .ok_or_else(bad)?;
    match field(0) {
        Some(1) => Ok(Spent::Granted { wait }),
        Some(0) => {
            let index = field(2)
                .and_then(|index| usize::try_from(index).ok())
                .and_then(|index| index.checked_sub(1));
            let hold = items.get(6).map(hold_of).transpose()?;
            match hold {
                Some(hold @ (Hold::Blocked | Hold::Quota)) => Ok(Spent::Held {
                    wait,
                    scope: index.ok_or_else(bad)?,
                    hold,
                }),
                _ => {
                    let budget = index.filter(|index| *index < budgets).ok_or_else(bad)?;
                    Ok(Spent::Denied { wait, budget })
                }
            }
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        let seen = |spent, processes, start: u64, buckets| Seen {
            next: match spent {
                Spent::Granted { .. } => Some(0),
                _ => None,
            },
            view: View {
                processes,
                now: match spent {
                    Spent::Granted { wait } => start.checked_sub(wait),
                    _ => None,
                },
                ..View::default()
            },
            spent,
            start,
            buckets,
            further: vec![],
        };
        // A reply cut short says no more than its decision.
        let granted = Value::Array(vec![Value::Int(1), Value::Int(250)]);
        let short = parse_spent(&granted, 2).unwrap();
        assert_eq!(
            (short.spent, short.next),
            (Spent::Granted { wait: 250 }, None)
        );
        let ints = |v: &[i64]| v.iter().map(|n| Value::Int(*n)).collect::<Vec<_>>();
        // The four leading fields, no holds, then `tail`.
        let reply = |head: &[i64], tail: &[i64]| {
            let mut items = ints(head);
            items.extend([Value::Array(vec![]), Value::Array(vec![])]);
            items.extend(ints(tail));
            Value::Array(items)
        };
        let bucket = reply(&[1, 5, 0, 3], &[0, 1_005, 0, 2, 900, 1_200]);
        let expected = Bucket {
            budget: 1,
            before: 900,
            after: 1_200,
        };
        assert_eq!(
            parse_spent(&bucket, 2),
            Ok(seen(Spent::Granted { wait: 5 }, 3, 1_005, vec![expected]))
        );
        let denied = reply(&[0, 9, 2, 2], &[]);
        assert_eq!(
            parse_spent(&denied, 2),
            Ok(seen(Spent::Denied { wait: 9, budget: 1 }, 2, 0, vec![]))
        );
        let out_of_range = reply(&[0, 9, 3, 0], &[]);
        assert!(parse_spent(&out_of_range, 2).is_err());
        assert!(parse_spent(&reply(&[1, 5, 0, 3], &[0, 1_005, 0, 3, 1, 2]), 2).is_err());
        let leased = reply(&[1, 5, 0, 1], &[1_300, 1_005, 2, 1_105, 1_205]);
        let leased = parse_spent(&leased, 1).unwrap();
        assert_eq!(
            (leased.further, leased.next),
            (vec![1_105, 1_205], Some(1_300))
        );
        // Fewer further starts than it says.
        assert!(parse_spent(&reply(&[1, 5, 0, 1], &[0, 1_005, 3, 1_105]), 1).is_err());
        // A block holds it: the scope's index, not a budget's, and the holds.
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let held = Value::Array(vec![
            Value::Int(0),
            Value::Int(30_000_000),
            Value::Int(2),
            Value::Int(1),
            Value::Array(vec![text("search"), Value::Int(30_000_000)]),
            Value::Array(vec![]),
            text("blocked"),
        ]);
        let seen = parse_spent(&held, 1).unwrap();
        assert_eq!(
            seen.spent,
            Spent::Held {
                wait: 30_000_000,
                scope: 1,
                hold: Hold::Blocked
            }
        );
        assert_eq!(seen.view.blocks, vec![("search".to_owned(), 30_000_000)]);
        assert!(parse_spent(&Value::Nil, 1).is_err());
    }
}
