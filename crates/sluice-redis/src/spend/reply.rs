//! The spend script's reply, parsed: the decision, the processes
//! present, and for a grant its start, further starts and buckets.

use redis::Value;

use super::{Bucket, Seen, Spent};
use crate::Error;

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
    let processes = field(3).and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    let spent = parse_decision(value, items, budgets)?;
    let start = field(4).unwrap_or(0);
    let count = field(5).and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let further = (6..6 + count)
        .map(field)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::Reply(format!("unexpected spend reply {value:?}")))?;
    let mut buckets = Vec::new();
    let mut at = 6 + count;
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
        processes,
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
            let budget = field(2)
                .and_then(|index| usize::try_from(index).ok())
                .and_then(|index| index.checked_sub(1))
                .filter(|index| *index < budgets)
                .ok_or_else(bad)?;
            Ok(Spent::Denied { wait, budget })
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        let seen = |spent, processes, start, buckets| Seen {
            spent,
            processes,
            start,
            buckets,
            further: vec![],
        };
        let granted = Value::Array(vec![Value::Int(1), Value::Int(250)]);
        assert_eq!(
            parse_spent(&granted, 2),
            Ok(seen(Spent::Granted { wait: 250 }, 0, 0, vec![]))
        );
        let ints = |v: &[i64]| Value::Array(v.iter().map(|n| Value::Int(*n)).collect());
        let bucket = ints(&[1, 5, 0, 3, 1_005, 0, 2, 900, 1_200]);
        let expected = Bucket {
            budget: 1,
            before: 900,
            after: 1_200,
        };
        assert_eq!(
            parse_spent(&bucket, 2),
            Ok(seen(Spent::Granted { wait: 5 }, 3, 1_005, vec![expected]))
        );
        let denied = ints(&[0, 9, 2, 2]);
        assert_eq!(
            parse_spent(&denied, 2),
            Ok(seen(Spent::Denied { wait: 9, budget: 1 }, 2, 0, vec![]))
        );
        let out_of_range = ints(&[0, 9, 3]);
        assert!(parse_spent(&out_of_range, 2).is_err());
        assert!(parse_spent(&ints(&[1, 5, 0, 3, 1_005, 0, 3, 1, 2]), 2).is_err());
        let leased = ints(&[1, 5, 0, 1, 1_005, 2, 1_105, 1_205]);
        assert_eq!(
            parse_spent(&leased, 1).map(|seen| seen.further),
            Ok(vec![1_105, 1_205])
        );
        // Fewer further starts than it says.
        assert!(parse_spent(&ints(&[1, 5, 0, 1, 1_005, 3, 1_105]), 1).is_err());
        assert!(parse_spent(&Value::Nil, 1).is_err());
    }
}
