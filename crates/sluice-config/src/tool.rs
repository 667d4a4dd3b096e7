//! A sidecar tool: `[tools.NAME]` checked into a method and a path template
//! on one credential, and how a call's JSON arguments become the path, the
//! query or the JSON body of its request.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::Method;
use serde_json::{Map, Value};
use sluice::ToolConfig;

use crate::error::ConfigError;
use crate::file::ToolFile;
use crate::template::{FillError, PathTemplate, TemplateError, encode_component};
use crate::upstream::Upstream;
use crate::value;

/// How a tool turns a call into a request on its credential's base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// The credential whose base URL and secret it uses.
    pub credential: String,
    /// The request method.
    pub method: Method,
    /// The path (and query) template.
    pub path: PathTemplate,
}

/// A call rendered as a request, ready for the executor: nothing in it can
/// point anywhere but the credential's base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRequest {
    /// The method.
    pub method: Method,
    /// The encoded path, starting with `/`, relative to the base URL's path.
    pub path: String,
    /// The encoded query, if any.
    pub query: Option<String>,
    /// A JSON body (the arguments the template did not use), for methods that carry one.
    pub body: Option<Bytes>,
}

/// Methods whose leftover arguments travel as a JSON body; the others put
/// them in the query.
fn has_body(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH)
}

impl ToolSpec {
    /// Renders a call's arguments: placeholders are filled, the rest goes to
    /// the query (GET, HEAD, DELETE, OPTIONS) or the JSON body (POST, PUT, PATCH).
    ///
    /// ```
    /// use serde_json::json;
    /// use sluice_config::ToolSpec;
    /// let tool = ToolSpec {
    ///     credential: "support".into(),
    ///     method: http::Method::GET,
    ///     path: "/tickets/{id}".parse().unwrap(),
    /// };
    /// let args = json!({"id": "7/8", "fields": ["a", "b"]});
    /// let request = tool.render(args.as_object().unwrap()).unwrap();
    /// assert_eq!(request.path, "/tickets/7%2F8");
    /// assert_eq!(request.query.as_deref(), Some("fields=a&fields=b"));
    /// ```
    pub fn render(&self, args: &Map<String, Value>) -> Result<ToolRequest, FillError> {
        let filled = self.path.fill(args)?;
        let rest: Map<String, Value> = args
            .iter()
            .filter(|(name, _)| !filled.used.contains(name.as_str()))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let mut query = filled.query;
        let mut body = None;
        if has_body(&self.method) {
            if !rest.is_empty() {
                body = Some(Bytes::from(Value::Object(rest).to_string()));
            }
        } else {
            let extra = query_pairs(&rest);
            if !extra.is_empty() {
                query = Some(match query {
                    Some(query) if !query.is_empty() => format!("{query}&{extra}"),
                    _ => extra,
                });
            }
        }
        Ok(ToolRequest {
            method: self.method.clone(),
            path: filled.path,
            query,
            body,
        })
    }
}

/// `[tools.NAME]` as the sidecar needs it: the engine's route (read,
/// idempotent, deadline) and the request it becomes, on a credential of
/// `credentials`.
pub(crate) fn sidecar_tool(
    name: &str,
    file: &ToolFile,
    credentials: &BTreeMap<String, Upstream>,
) -> Result<(ToolConfig, ToolSpec), ConfigError> {
    let field = |f: &str| format!("tools.{name}.{f}");
    // The sidecar's rules; the schema leaves both optional for `sluice mcp`.
    let missing =
        |f: &str| ConfigError::invalid(format!("tools.{name}"), format!("missing field `{f}`"));
    let credential = file
        .credential
        .as_ref()
        .ok_or_else(|| missing("credential"))?;
    let path_text = file.path.as_deref().ok_or_else(|| missing("path"))?;
    if !credentials.contains_key(credential) {
        return Err(ConfigError::invalid(
            field("credential"),
            format!("names unknown credential {credential:?}"),
        ));
    }
    let method_text = file.method.as_deref().unwrap_or("GET");
    let method = match method_text.trim().to_ascii_uppercase().as_str() {
        "GET" => Method::GET,
        "HEAD" => Method::HEAD,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "PATCH" => Method::PATCH,
        "DELETE" => Method::DELETE,
        "OPTIONS" => Method::OPTIONS,
        _ => {
            return Err(ConfigError::invalid(
                field("method"),
                format!(
                    "{method_text:?} is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
                ),
            ));
        }
    };
    let path: PathTemplate = path_text
        .parse()
        .map_err(|error: TemplateError| ConfigError::invalid(field("path"), error.to_string()))?;
    let safe = matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    let read = file.read.unwrap_or(safe);
    // RFC 9110 §9.2.2: PUT and DELETE are idempotent, like the safe methods.
    let idempotent = file
        .idempotent
        .unwrap_or(read || safe || matches!(method, Method::PUT | Method::DELETE));
    let deadline = file
        .deadline
        .as_deref()
        .map(|text| value::duration_field(text, &field("deadline")))
        .transpose()?;
    let route = ToolConfig {
        credential: credential.clone(),
        read,
        idempotent,
        deadline,
        spend: crate::limits::spend(name, file)?,
    };
    let spec = ToolSpec {
        credential: credential.clone(),
        method,
        path,
    };
    Ok((route, spec))
}

/// `name=value` pairs, sorted by name so equal arguments give equal URLs;
/// arrays repeat the name, objects go as JSON text, nulls are left out.
fn query_pairs(args: &Map<String, Value>) -> String {
    let mut names: Vec<&String> = args.keys().collect();
    names.sort();
    let mut pairs = Vec::new();
    for name in names {
        let values: Vec<&Value> = match &args[name.as_str()] {
            Value::Array(items) => items.iter().collect(),
            value => vec![value],
        };
        for value in values {
            let text = match value {
                Value::Null => continue,
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            pairs.push(format!(
                "{}={}",
                encode_component(name),
                encode_component(&text)
            ));
        }
    }
    pairs.join("&")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(method: Method, path: &str) -> ToolSpec {
        ToolSpec {
            credential: "support".into(),
            method,
            path: path.parse().unwrap(),
        }
    }

    fn render(tool: &ToolSpec, args: Value) -> ToolRequest {
        tool.render(args.as_object().unwrap()).unwrap()
    }

    #[test]
    fn reads_put_leftover_arguments_in_the_query() {
        let search = tool(Method::GET, "/api/v2/search.json?query={query}");
        let request = render(
            &search,
            json!({"query": "refund", "page": 2, "b&c": "d=e", "none": null, "tags": ["x", "y z"]}),
        );
        assert_eq!(request.path, "/api/v2/search.json");
        assert_eq!(
            request.query.as_deref(),
            Some("query=refund&b%26c=d%3De&page=2&tags=x&tags=y%20z")
        );
        assert_eq!(request.body, None);
    }

    #[test]
    fn writes_put_leftover_arguments_in_a_json_body() {
        let create = tool(Method::POST, "/api/v2/tickets/{group}");
        let request = render(&create, json!({"group": "g1", "subject": "Late", "n": 1}));
        assert_eq!(request.path, "/api/v2/tickets/g1");
        assert_eq!(request.query, None);
        let body: Value = serde_json::from_slice(request.body.as_ref().unwrap()).unwrap();
        assert_eq!(body, json!({"subject": "Late", "n": 1}));
        let bare = render(&tool(Method::POST, "/api/v2/tickets"), json!({}));
        assert_eq!(bare.body, None);
    }

    #[test]
    fn delete_uses_the_query() {
        let delete = tool(Method::DELETE, "/tickets/{id}");
        let request = render(&delete, json!({"id": 5, "force": true}));
        assert_eq!(request.path, "/tickets/5");
        assert_eq!(request.query.as_deref(), Some("force=true"));
    }

    #[test]
    fn a_missing_argument_is_named() {
        let search = tool(Method::GET, "/s?query={query}");
        assert_eq!(
            search.render(&Map::new()),
            Err(FillError::Missing("query".into()))
        );
    }
}
