//! A forgiving reader for RFC 9651 structured-field lists, as RateLimit headers use them.
//!
//! Only what rate-limit headers need: list members whose item is a string,
//! token or integer, each with `;key=value` parameters. A member that does
//! not parse is skipped; the rest of the list still counts.

/// One list member: the item's text (quotes removed) and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    pub(crate) item: &'a str,
    pub(crate) params: Vec<(&'a str, &'a str)>,
}

impl Member<'_> {
    /// A parameter as a non-negative integer (RFC 9651 integers are at most
    /// 15 digits; decimals are truncated, negatives ignored).
    pub(crate) fn integer(&self, key: &str) -> Option<u64> {
        let (_, value) = self
            .params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))?;
        let whole = value.split_once('.').map_or(*value, |(whole, _)| whole);
        if whole.is_empty() || whole.len() > 15 || !whole.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        whole.parse().ok()
    }
}

/// Splits `text` on `separator` outside double quotes.
fn split_outside_quotes(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    for (index, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..index]);
                start = index + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn unquote(text: &str) -> Option<&str> {
    let text = text.trim();
    match text.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"'),
        None => Some(text),
    }
}

/// Parses a list; malformed members are dropped.
pub(crate) fn list(text: &str) -> Vec<Member<'_>> {
    split_outside_quotes(text, ',')
        .into_iter()
        .filter_map(member)
        .collect()
}

fn member(text: &str) -> Option<Member<'_>> {
    let mut parts = split_outside_quotes(text, ';').into_iter();
    let item = unquote(parts.next()?)?;
    if item.is_empty() {
        return None;
    }
    let params = parts
        .filter_map(|param| {
            let (key, value) = param.split_once('=').unwrap_or((param, "?1"));
            Some((key.trim(), unquote(value)?))
        })
        .filter(|(key, _)| !key.is_empty())
        .collect();
    Some(Member { item, params })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_params_and_quotes() {
        let members = list(r#""burst";q=100;w=60, "daily";w=86400;q=1000, "a,b";r=1"#);
        assert_eq!(members.len(), 3);
        assert_eq!(members[0].item, "burst");
        assert_eq!(members[0].integer("q"), Some(100));
        assert_eq!(members[1].integer("q"), Some(1000));
        assert_eq!(members[2].item, "a,b");
    }

    #[test]
    fn skips_garbage_and_bad_numbers() {
        let members = list(r#", ;q=1, "x";q=-1;w=abc;t=1.5, "unterminated"#);
        assert_eq!(members.len(), 1);
        assert_eq!(members[0].integer("q"), None);
        assert_eq!(members[0].integer("w"), None);
        assert_eq!(members[0].integer("t"), Some(1));
    }
}
