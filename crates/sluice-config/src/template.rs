//! Path templates: `/tickets/{id}?expand={what}`, whose `{name}` placeholders
//! are filled with percent-encoded arguments that cannot change the request's shape.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Everything but RFC 3986's unreserved characters (`ALPHA DIGIT - . _ ~`):
/// an encoded value holds no `/`, `?`, `&`, `=`, `#`, `%`, CR or LF, so it
/// cannot add a path segment, a parameter or a header.
pub(crate) const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes `value` as one path segment or query component.
pub(crate) fn encode_component(value: &str) -> String {
    utf8_percent_encode(value, COMPONENT).to_string()
}

/// A parsed path template: a path, optionally a query, each made of literal
/// text and `{name}` placeholders.
///
/// ```
/// use serde_json::json;
/// use sluice_config::PathTemplate;
/// let template: PathTemplate = "/api/v2/search.json?query={query}".parse().unwrap();
/// let args = json!({"query": "refund & more"});
/// let filled = template.fill(args.as_object().unwrap()).unwrap();
/// assert_eq!(filled.path, "/api/v2/search.json");
/// assert_eq!(filled.query.as_deref(), Some("query=refund%20%26%20more"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    text: String,
    path: Vec<Piece>,
    query: Option<Vec<Piece>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Arg(String),
}

/// Why a template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(String);

/// Why a call's arguments cannot fill a template. Nothing is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FillError {
    /// The template names an argument the call does not have (or has as `null`).
    #[error("missing argument {0:?}")]
    Missing(String),
    /// A path argument that is an object or an array.
    #[error("argument {0:?} must be a string, number or boolean")]
    NotScalar(String),
    /// A path argument that is empty, `.` or `..`: it would address another resource.
    #[error("argument {0:?} cannot be empty, \".\" or \"..\" in the path")]
    BadSegment(String),
}

/// A template with its placeholders filled: an encoded path, an encoded
/// query (if the template has one) and the names it used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filled {
    /// The path, starting with `/`, every argument percent-encoded.
    pub path: String,
    /// The template's query, every argument percent-encoded.
    pub query: Option<String>,
    /// The arguments the template used.
    pub used: BTreeSet<String>,
}

impl PathTemplate {
    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The argument names it uses, in order of first use.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        let pieces = self.path.iter().chain(self.query.iter().flatten());
        for piece in pieces {
            if let Piece::Arg(name) = piece
                && !names.contains(&name.as_str())
            {
                names.push(name);
            }
        }
        names
    }

    /// Fills every placeholder from `args`.
    pub fn fill(
        &self,
        args: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Filled, FillError> {
        let mut used = BTreeSet::new();
        let path = fill_path(&self.path, args, &mut used)?;
        let query = match &self.query {
            None => None,
            Some(pieces) => {
                let mut query = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Literal(text) => query.push_str(text),
                        Piece::Arg(name) => {
                            let value = scalar(args, name)?;
                            query.push_str(&encode_component(&value));
                            used.insert(name.clone());
                        }
                    }
                }
                Some(query)
            }
        };
        Ok(Filled { path, query, used })
    }
}

/// Fills the path, checking every segment that holds an argument: a value
/// that is empty, `.` or `..` would address the parent or the collection.
fn fill_path(
    pieces: &[Piece],
    args: &serde_json::Map<String, serde_json::Value>,
    used: &mut BTreeSet<String>,
) -> Result<String, FillError> {
    let mut path = String::new();
    let mut segment_start = 0;
    let mut segment_args: Vec<&str> = Vec::new();
    let check = |path: &str, start: usize, names: &[&str]| -> Result<(), FillError> {
        let segment = &path[start..];
        match names.first() {
            Some(name) if matches!(segment, "" | "." | "..") => {
                Err(FillError::BadSegment((*name).to_owned()))
            }
            _ => Ok(()),
        }
    };
    for piece in pieces {
        match piece {
            Piece::Literal(text) => {
                for (index, part) in text.split('/').enumerate() {
                    if index > 0 {
                        check(&path, segment_start, &segment_args)?;
                        path.push('/');
                        segment_start = path.len();
                        segment_args.clear();
                    }
                    path.push_str(part);
                }
            }
            Piece::Arg(name) => {
                let value = scalar(args, name)?;
                path.push_str(&encode_component(&value));
                segment_args.push(name);
                used.insert(name.clone());
            }
        }
    }
    check(&path, segment_start, &segment_args)?;
    Ok(path)
}

/// An argument as text: strings as they are, numbers and booleans printed.
fn scalar(
    args: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Result<String, FillError> {
    match args.get(name) {
        None | Some(serde_json::Value::Null) => Err(FillError::Missing(name.to_owned())),
        Some(serde_json::Value::String(text)) => Ok(text.clone()),
        Some(serde_json::Value::Bool(flag)) => Ok(flag.to_string()),
        Some(serde_json::Value::Number(number)) => Ok(number.to_string()),
        Some(_) => Err(FillError::NotScalar(name.to_owned())),
    }
}

impl FromStr for PathTemplate {
    type Err = TemplateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |message: String| TemplateError(message);
        if !text.starts_with('/') {
            return Err(error(format!("{text:?} must start with '/'")));
        }
        let (path_text, query_text) = match text.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (text, None),
        };
        let path = pieces(path_text, false).map_err(error)?;
        check_literal_segments(&path).map_err(error)?;
        let query = query_text
            .map(|query| pieces(query, true))
            .transpose()
            .map_err(error)?;
        Ok(PathTemplate {
            text: text.to_owned(),
            path,
            query,
        })
    }
}

impl fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Splits one part of a template into literals and placeholders, checking
/// that literals are valid URI text and placeholders are well formed.
fn pieces(text: &str, in_query: bool) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for (_, c) in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    name.push(c);
                }
                if !closed {
                    return Err(format!("the placeholder at byte {at} has no closing '}}'"));
                }
                if !is_name(&name) {
                    return Err(format!(
                        "placeholder {{{name}}} must be a name of letters, digits and '_' not starting with a digit"
                    ));
                }
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Arg(name));
            }
            '}' => return Err(format!("the '}}' at byte {at} closes no placeholder")),
            '%' => {
                let hex: String = chars.by_ref().take(2).map(|(_, c)| c).collect();
                if hex.len() != 2 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(format!(
                        "the '%' at byte {at} is not followed by two hex digits"
                    ));
                }
                literal.push('%');
                literal.push_str(&hex);
            }
            c if is_literal_char(c, in_query) => literal.push(c),
            c => {
                return Err(format!(
                    "{c:?} at byte {at} must be percent-encoded (or is not allowed, like '#')"
                ));
            }
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// RFC 3986 `pchar` (less `%`, handled apart), plus `/`, and `?` in a query.
fn is_literal_char(c: char, in_query: bool) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@/".contains(c) || (in_query && c == '?')
}

/// A template's own `.` and `..` segments would climb above the base path.
fn check_literal_segments(pieces: &[Piece]) -> Result<(), String> {
    let mut segment = String::new();
    let mut only_literal = true;
    let check = |segment: &str, only_literal: bool| {
        let decoded = percent_decode_str(segment).decode_utf8_lossy();
        if only_literal && matches!(&*decoded, "." | "..") {
            return Err(format!(
                "the path segment {segment:?} would climb above the base URL's path"
            ));
        }
        Ok(())
    };
    for piece in pieces {
        match piece {
            Piece::Literal(text) => {
                for (index, part) in text.split('/').enumerate() {
                    if index > 0 {
                        check(&segment, only_literal)?;
                        segment.clear();
                        only_literal = true;
                    }
                    segment.push_str(part);
                }
            }
            Piece::Arg(_) => only_literal = false,
        }
    }
    check(&segment, only_literal)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fill(template: &str, args: serde_json::Value) -> Result<Filled, FillError> {
        let template: PathTemplate = template.parse().unwrap();
        template.fill(args.as_object().unwrap())
    }

    #[test]
    fn fills_path_and_query_with_encoded_arguments() {
        let filled = fill(
            "/tickets/{id}/comments?sort={sort}&limit=10",
            json!({"id": 42, "sort": "new", "extra": true}),
        )
        .unwrap();
        assert_eq!(filled.path, "/tickets/42/comments");
        assert_eq!(filled.query.as_deref(), Some("sort=new&limit=10"));
        assert_eq!(
            filled.used.iter().map(String::as_str).collect::<Vec<_>>(),
            ["id", "sort"]
        );
    }

    #[test]
    fn arguments_cannot_change_the_shape_of_the_request() {
        let filled = fill(
            "/files/{name}?q={q}",
            json!({"name": "../../admin?x=1#f", "q": "a&b=c\r\nX-Injected: 1"}),
        )
        .unwrap();
        assert_eq!(filled.path, "/files/..%2F..%2Fadmin%3Fx%3D1%23f");
        assert_eq!(
            filled.query.as_deref(),
            Some("q=a%26b%3Dc%0D%0AX-Injected%3A%201")
        );
        assert_eq!(
            fill("/files/{name}", json!({"name": "%2e%2e"}))
                .unwrap()
                .path,
            "/files/%252e%252e"
        );
    }

    #[test]
    fn dot_and_empty_segments_are_refused() {
        for bad in ["..", ".", ""] {
            assert_eq!(
                fill("/tickets/{id}", json!({ "id": bad })),
                Err(FillError::BadSegment("id".into())),
                "{bad:?}"
            );
        }
        // Part of a segment, a dot is harmless.
        assert_eq!(
            fill("/files/{name}.json", json!({"name": "."}))
                .unwrap()
                .path,
            "/files/..json"
        );
        // In a query, an empty value is just empty.
        assert_eq!(
            fill("/s?q={q}", json!({"q": ""})).unwrap().query.as_deref(),
            Some("q=")
        );
    }

    #[test]
    fn missing_and_structured_arguments_are_named() {
        assert_eq!(
            fill("/s?q={query}", json!({})),
            Err(FillError::Missing("query".into()))
        );
        assert_eq!(
            fill("/s/{id}", json!({"id": null})),
            Err(FillError::Missing("id".into()))
        );
        assert_eq!(
            fill("/s/{id}", json!({"id": [1]})),
            Err(FillError::NotScalar("id".into()))
        );
        assert_eq!(
            FillError::Missing("query".into()).to_string(),
            "missing argument \"query\""
        );
    }

    #[test]
    fn broken_templates_are_refused() {
        for bad in [
            "tickets",
            "/tickets/{id",
            "/tickets/id}",
            "/tickets/{}",
            "/tickets/{1d}",
            "/tickets/{a-b}",
            "/tickets/{{id}}",
            "/a b",
            "/a#frag",
            "/a%zz",
            "/a/../b",
            "/a/%2E%2e/b",
            "/./a",
        ] {
            assert!(bad.parse::<PathTemplate>().is_err(), "{bad:?}");
        }
        let template: PathTemplate = "/a/{x}/b?c={y}&d={x}".parse().unwrap();
        assert_eq!(template.names(), ["x", "y"]);
        assert_eq!(template.as_str(), "/a/{x}/b?c={y}&d={x}");
    }
}
