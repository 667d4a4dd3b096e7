//! Canonical JSON: the coalescing identity of tool arguments, independent of key order and whitespace.

use std::sync::OnceLock;

use serde_json::Value;

/// Serializes `value` with object keys sorted and no whitespace, whatever
/// map ordering `serde_json` was built with.
///
/// Written straight into bytes by `serde_json`'s own serializer (a key is
/// made for every read, so it is on the path of a read the turn's cache
/// answers): no `fmt` machinery, no copy of a string to escape it, and no
/// sorting of a map that is sorted already (serde_json's default map).
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(64);
    write_value(&mut out, value);
    // serde_json writes UTF-8, and the rest is ASCII punctuation.
    String::from_utf8(out)
        .unwrap_or_else(|invalid| String::from_utf8_lossy(invalid.as_bytes()).into_owned())
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            let sorted =
                maps_are_sorted() || map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b);
            if sorted {
                write_entries(out, map.iter());
            } else {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                write_entries(out, entries.into_iter());
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        // Strings escaped as JSON requires; numbers, booleans and null
        // print the same in any order.
        scalar => write_scalar(out, scalar),
    }
}

/// Whether `serde_json`'s map keeps its keys sorted: its default (a
/// `BTreeMap`), unless some crate in the build turns on `preserve_order`.
/// Found once, so that no object's order is walked to check it.
fn maps_are_sorted() -> bool {
    static SORTED: OnceLock<bool> = OnceLock::new();
    *SORTED.get_or_init(|| {
        let mut map = serde_json::Map::new();
        map.insert("b".to_owned(), Value::Null);
        map.insert("a".to_owned(), Value::Null);
        map.keys().next().is_some_and(|first| first == "a")
    })
}

fn write_entries<'a>(out: &mut Vec<u8>, entries: impl Iterator<Item = (&'a String, &'a Value)>) {
    for (index, (key, value)) in entries.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_scalar(out, key);
        out.push(b':');
        write_value(out, value);
    }
}

fn write_scalar(out: &mut Vec<u8>, scalar: &(impl serde::Serialize + ?Sized)) {
    // Into a Vec, serializing a string, number, boolean or null cannot fail.
    let _ = serde_json::to_writer(&mut *out, scalar);
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

    #[test]
    fn strings_numbers_and_literals_print_as_json_does() {
        let text = r#"{"z":"tab\t nl\n \u0001 é 🦀 \\ \"","n":[-0.5,1e300,18446744073709551615,-3],"t":true,"f":false,"x":null,"e":{},"a":[]}"#;
        let value: Value = serde_json::from_str(text).unwrap();
        let canonical = canonical_json(&value);
        // Sorted keys, and each value exactly as serde_json prints it.
        let mut map: Vec<(&String, &Value)> = value.as_object().unwrap().iter().collect();
        map.sort_by(|a, b| a.0.cmp(b.0));
        let expected: Vec<String> = map
            .iter()
            .map(|(k, v)| format!("{}:{}", Value::String((*k).clone()), v))
            .collect();
        assert_eq!(canonical, format!("{{{}}}", expected.join(",")));
        let back: Value = serde_json::from_str(&canonical).unwrap();
        assert_eq!(back, value);
    }
}
