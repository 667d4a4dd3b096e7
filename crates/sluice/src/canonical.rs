//! Canonical JSON: the coalescing identity of tool arguments, independent of key order and whitespace.

use std::fmt::Write;

use serde_json::Value;

/// Serializes `value` with object keys sorted and no whitespace, whatever
/// map ordering `serde_json` was built with.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, value);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::String(text) => write_string(out, text),
        // Numbers, booleans and null print the same in any order.
        scalar => {
            let _ = write!(out, "{scalar}");
        }
    }
}

fn write_string(out: &mut String, text: &str) {
    // Value's Display escapes a string exactly as JSON requires.
    let _ = write!(out, "{}", Value::String(text.to_owned()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "q\"z"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"q\"z","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"q\"z","y":[1,2]},"b":1}"#);
        let c: Value = serde_json::from_str(r#"{"a":{"x":"q\"z","y":[2,1]},"b":1}"#).unwrap();
        assert_ne!(canonical_json(&a), canonical_json(&c));
    }
}
