//! The scripts' replies, parsed: what a reservation granted or why it
//! did not, and the integers other scripts return.

use redis::Value;
use sluice::limiter::Micros;
use sluice::shared::Hold;

use super::{Reserved, SlotGrant, SlotToken, Undo, View};
use crate::Error;

pub(super) fn parse_reserved(value: Value, first: &str) -> Result<Reserved, Error> {
    let Value::Array(items) = value else {
        return Err(Error::Reply(format!("expected an array, got {value:?}")));
    };
    let field = |index: usize| {
        items
            .get(index)
            .ok_or_else(|| Error::Reply(format!("reply has no element {index}")))
    };
    let view = View {
        processes: u32::try_from(micros_of(field(1)?)?).unwrap_or(u32::MAX),
        blocks: pairs(field(2)?)?,
        quotas: pairs(field(3)?)?,
        // Absent from a voided reservation's answer (and older scripts).
        now: items.get(7).and_then(|now| micros_of(now).ok()),
    };
    match micros_of(field(0)?)? {
        1 => {
            let generation = micros_of(field(4)?)?;
            let Value::Array(flat) = field(5)? else {
                return Err(Error::Reply("slots are not an array".into()));
            };
            let mut slots = Vec::with_capacity(flat.len() / 2);
            for pair in flat.chunks(2) {
                let [wait, undo] = pair else {
                    return Err(Error::Reply("odd slot list".into()));
                };
                let undo = text_of(undo)?;
                let undo = if undo.is_empty() {
                    Undo::Nothing
                } else if let Some((before, after)) = gcra_undo(&undo) {
                    Undo::Gcra {
                        before: parse_micros(before)?,
                        after: parse_micros(after)?,
                    }
                } else {
                    Undo::Window(undo)
                };
                slots.push(SlotGrant {
                    wait: micros_of(wait)?,
                    token: SlotToken {
                        scope: first.to_owned(),
                        generation,
                        undo,
                    },
                });
            }
            if slots.is_empty() {
                return Err(Error::Reply("a grant without slots".into()));
            }
            // -1 (no limit), or absent from an older script.
            let next = match items.get(6) {
                Some(Value::Int(n)) => Micros::try_from(*n).ok(),
                _ => None,
            };
            Ok(Reserved::Granted { view, slots, next })
        }
        0 => {
            let wait = micros_of(field(4)?)?;
            let index = usize::try_from(micros_of(field(5)?)?).unwrap_or(usize::MAX);
            let hold = hold_of(field(6)?)?;
            Ok(Reserved::Denied {
                view,
                wait,
                scope: index.saturating_sub(1),
                hold,
            })
        }
        other => Err(Error::Reply(format!("unknown answer {other}"))),
    }
}

/// A bucket's undo record, `before:after` in microseconds. A window's is
/// its log member, `{process}:{call}:{slot}`: two colons, so that a process
/// id that happens to be all decimal digits (one in about 1,800 of the
/// random 16-hex-digit ids) is not read as a bucket's. Before, such a
/// process failed every reservation with a reply error and decided
/// everything in fallback.
fn gcra_undo(undo: &str) -> Option<(&str, &str)> {
    let (before, after) = undo.split_once(':')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    (digits(before) && digits(after)).then_some((before, after))
}

/// A hold as a script names it: `quota`, `blocked`, else the rate.
pub(crate) fn hold_of(value: &Value) -> Result<Hold, Error> {
    Ok(match text_of(value)?.as_str() {
        "quota" => Hold::Quota,
        "blocked" => Hold::Blocked,
        _ => Hold::Rate,
    })
}

pub(crate) fn pairs(value: &Value) -> Result<Vec<(String, Micros)>, Error> {
    let Value::Array(flat) = value else {
        return Err(Error::Reply("expected a list of holds".into()));
    };
    flat.chunks(2)
        .map(|pair| match pair {
            [name, wait] => Ok((text_of(name)?, micros_of(wait)?)),
            _ => Err(Error::Reply("odd hold list".into())),
        })
        .collect()
}

pub(super) fn micros_of(value: &Value) -> Result<Micros, Error> {
    match value {
        // Scripts only return times and counts that are never negative.
        Value::Int(n) => Ok(Micros::try_from(*n).unwrap_or(0)),
        Value::BulkString(_) | Value::SimpleString(_) => parse_micros(&text_of(value)?),
        other => Err(Error::Reply(format!("expected an integer, got {other:?}"))),
    }
}

fn parse_micros(text: &str) -> Result<Micros, Error> {
    text.parse()
        .map_err(|_| Error::Reply(format!("expected an integer, got {text:?}")))
}

fn text_of(value: &Value) -> Result<String, Error> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Ok(text.clone()),
        Value::Int(n) => Ok(n.to_string()),
        other => Err(Error::Reply(format!("expected text, got {other:?}"))),
    }
}
