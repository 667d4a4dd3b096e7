//! The forwarding rules: which headers cross the sidecar, how a request's
//! target is built below a credential's base URL, and which paths are
//! refused.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::uri::PathAndQuery;
use percent_encoding::percent_decode_str;
use sluice_config::{is_hop_by_hop, is_reserved_request_header};
use url::Url;

/// Removes hop-by-hop headers (and the names `Connection` lists) in place:
/// an owned upstream answer is forwarded without copying its header map.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut drop: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name))
        .cloned()
        .collect();
    if headers.contains_key(header::CONNECTION) {
        drop.extend(
            connection_listed(headers)
                .iter()
                .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok()),
        );
    }
    for name in drop {
        headers.remove(name);
    }
}

/// Names listed in `Connection` are hop-by-hop for this message too.
fn connection_listed(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The end-to-end headers of a proxied request: without hop-by-hop headers,
/// `Host`, our `x-sluice-*`, any `Authorization` and the credential's own
/// auth header (the sidecar injects the secret there). Copied, not
/// filtered in place: removing from a header map reorders it.
pub fn request_headers(incoming: &HeaderMap, auth_header: &HeaderName) -> HeaderMap {
    let listed = if incoming.contains_key(header::CONNECTION) {
        connection_listed(incoming)
    } else {
        Vec::new()
    };
    let mut headers = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        let drop = is_reserved_request_header(name)
            || name == header::AUTHORIZATION
            || name == auth_header
            || listed.iter().any(|listed| listed == name.as_str());
        if !drop {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// An upstream response's headers as the client gets them: without
/// hop-by-hop headers (the sidecar's own connection sets those).
pub fn response_headers(upstream: &HeaderMap) -> HeaderMap {
    let listed = connection_listed(upstream);
    let mut headers = HeaderMap::with_capacity(upstream.len());
    for (name, value) in upstream {
        let drop = is_hop_by_hop(name) || listed.iter().any(|listed| listed == name.as_str());
        if !drop {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// True when a path could climb above where it is joined: a `..` segment,
/// plain or percent-encoded (any case, even encoded twice), separated by `/`
/// or `\`, or as Tomcat's `..;`.
pub fn climbs(path: &str) -> bool {
    // Without a dot, plain or encoded (`%2e`), there is no `..` to find.
    if !path.bytes().any(|b| b == b'.' || b == b'%') {
        return false;
    }
    // The URL parser drops tabs and newlines from a path (WHATWG URL,
    // "basic URL parser"), so `.\n.` or `..%\r2f` would reach the upstream
    // as `..` or `..%2f`; a server that decodes and parses again drops
    // decoded ones. Check the path as it will be without them. Found by
    // the `proxy_path` fuzz target.
    let visible = |text: &str| -> String {
        text.chars()
            .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
            .collect()
    };
    let mut text = visible(path);
    // Each round undoes one layer of percent-encoding; four cover any
    // plausible double or triple encoding, and more layers are refused.
    for _ in 0..4 {
        let has_dot_dot = text
            .split(['/', '\\'])
            .any(|segment| segment == ".." || segment.starts_with("..;"));
        if has_dot_dot {
            return true;
        }
        let decoded = visible(&percent_decode_str(&text).decode_utf8_lossy());
        if decoded == text {
            return false;
        }
        text = decoded;
    }
    true
}

/// Why a request cannot be pointed at its credential's base URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the path {0:?} would leave the credential's base URL")]
pub struct LeavesBase(pub String);

/// `path` (starting with `/`) and `query` below `base`'s path: the
/// origin-form target (path and query) a request sends to `base`'s origin,
/// the only place it can go. A path and query the URL parser would give
/// back unchanged (most are) are put together as they are; any other goes
/// through the parser ([`join_by_url`]). The two agree on every input
/// (tested, and asserted by the `proxy_path` fuzz target).
pub fn join(base: &Url, path: &str, query: Option<&str>) -> Result<PathAndQuery, LeavesBase> {
    let plain = matches!(base.scheme(), "http" | "https")
        && plain_path(path)
        && query.is_none_or(plain_query);
    joined(base, path, query, plain)
}

/// [`join`] through the URL parser, whatever the path holds: it resolves
/// `.` segments and percent-encodes what a URL's path or query may not
/// hold as it is.
pub fn join_by_url(
    base: &Url,
    path: &str,
    query: Option<&str>,
) -> Result<PathAndQuery, LeavesBase> {
    joined(base, path, query, false)
}

/// [`join`]: put together as text when `plain`, else through the parser.
fn joined(
    base: &Url,
    path: &str,
    query: Option<&str>,
    plain: bool,
) -> Result<PathAndQuery, LeavesBase> {
    let leaves = || LeavesBase(path.to_owned());
    if climbs(path) {
        return Err(leaves());
    }
    let base_path = base.path().trim_end_matches('/');
    let mut target = String::with_capacity(
        base_path.len() + path.len() + query.map_or(0, |query| query.len() + 1),
    );
    target.push_str(base_path);
    target.push_str(path);
    if plain {
        if let Some(query) = query {
            target.push('?');
            target.push_str(query);
        }
        return PathAndQuery::from_maybe_shared(Bytes::from(target)).map_err(|_| leaves());
    }
    let mut url = base.clone();
    url.set_path(&target);
    url.set_query(query);
    // Defence in depth: whatever the path held, it stays below the base
    // path (and a path cannot name another origin).
    let below = url
        .path()
        .strip_prefix(base_path)
        .is_some_and(|rest| rest.starts_with('/'));
    if !below {
        return Err(leaves());
    }
    PathAndQuery::try_from(&url[url::Position::BeforePath..url::Position::AfterQuery])
        .map_err(|_| leaves())
}

/// A path the URL parser keeps as it is below an `http(s)` base: `/` and
/// the characters RFC 3986 allows in a segment unescaped, and no segment
/// that is `.` or `..` (which it would resolve).
fn plain_path(path: &str) -> bool {
    path.starts_with('/')
        && path.bytes().all(|b| PLAIN_IN_PATH[usize::from(b)])
        && (!path.contains('.')
            || !path
                .split('/')
                .any(|segment| segment == "." || segment == ".."))
}

/// A query the URL parser keeps as it is: a path's characters, `?` and `%`
/// (a query is not decoded), but not `'`, which it escapes in the query of
/// an `http(s)` URL.
fn plain_query(query: &str) -> bool {
    query.bytes().all(|b| PLAIN_IN_QUERY[usize::from(b)])
}

/// Letters, digits, the unreserved and sub-delimiter characters, `:`, `@`
/// (RFC 3986 `pchar` without percent-encoding) and `/`.
const PLAIN_IN_PATH: [bool; 256] = bytes_among(b"-._~!$&'()*+,;=:@/");
/// [`PLAIN_IN_PATH`] with `?` and `%`, without `'`.
const PLAIN_IN_QUERY: [bool; 256] = bytes_among(b"-._~!$&()*+,;=:@/?%");

/// A table of the ASCII letters and digits and `extra`.
const fn bytes_among(extra: &[u8]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 128 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = true;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn dot_dot_is_found_in_every_disguise() {
        for bad in [
            "/..",
            "/a/../b",
            "/a/..",
            "/%2e%2e/x",
            "/%2E%2e/x",
            "/.%2E/x",
            "/%2e./x",
            "/a%2f..%2fb",
            "/a%2F%2E%2E%2Fb",
            "/%252e%252e/x",
            "/%25252e%25252e/x",
            "/a\\..\\b",
            "/a%5c..%5cb",
            "/..;/admin",
        ] {
            assert!(climbs(bad), "{bad:?}");
        }
        for fine in [
            "/a/b",
            "/a/..b",
            "/a/b..",
            "/.well-known/x",
            "/a/./b",
            "/%2e",
        ] {
            assert!(!climbs(fine), "{fine:?}");
        }
    }

    #[test]
    fn joins_below_the_base_path_only() {
        let base = Url::parse("http://127.0.0.1:9000/api/").unwrap();
        let target = join(&base, "/v2/search.json", Some("q=a%26b")).unwrap();
        assert_eq!(target.as_str(), "/api/v2/search.json?q=a%26b");
        let root = Url::parse("http://127.0.0.1:9000").unwrap();
        // Origin-form: a path that looks like an authority is still a path.
        assert_eq!(
            join(&root, "//evil.example/x", None).unwrap().as_str(),
            "//evil.example/x"
        );
        assert_eq!(join(&root, "/a?b#c", None).unwrap().as_str(), "/a%3Fb%23c");
        assert_eq!(join(&root, "/a/./b", Some("")).unwrap().as_str(), "/a/b?");
        assert_eq!(
            join(&base, "/x", Some("it's")).unwrap().as_str(),
            "/api/x?it%27s"
        );
        assert!(join(&base, "/../admin", None).is_err());
        assert!(join(&base, "/%2e%2e/admin", None).is_err());
    }

    /// Every path and query of up to three characters from an alphabet of
    /// the ones that matter (each kind the URL parser keeps, escapes,
    /// resolves or drops), alone and between segments, under a base with
    /// a path, one without, and one whose path holds characters a URL's
    /// path keeps unescaped: put together as they are, they are exactly
    /// what the parser makes of them.
    #[test]
    fn a_path_put_together_as_it_is_is_what_the_url_parser_makes_of_it() {
        const ALPHABET: &[&str] = &[
            "a", "Z", "0", "-", ".", "_", "~", "!", "$", "&", "'", "(", ")", "*", "+", ",", ";",
            "=", ":", "@", "/", "%", "%2e", "%2F", "?", "#", " ", "\\", "\"", "<", ">", "`", "{",
            "}", "|", "^", "[", "]", "\t", "\n", "\u{0}", "é",
        ];
        let bases = [
            Url::parse("http://127.0.0.1:9000/api/v1/").unwrap(),
            Url::parse("https://example.com").unwrap(),
            // A base path holding what a URL's path keeps unescaped.
            Url::parse("http://127.0.0.1:9000/a|b^c%2F/").unwrap(),
        ];
        let mut words = vec![String::new()];
        for _ in 0..3 {
            let longer: Vec<String> = words
                .iter()
                .flat_map(|word| ALPHABET.iter().map(move |c| format!("{word}{c}")))
                .collect();
            words.extend(longer);
        }
        words.sort();
        words.dedup();
        let mut plain = 0;
        for base in &bases {
            for word in &words {
                for path in [format!("/{word}"), format!("/a/{word}/b")] {
                    if plain_path(&path) {
                        plain += 1;
                    }
                    let joined = join(base, &path, None).map(|target| target.to_string());
                    let parsed = join_by_url(base, &path, None).map(|target| target.to_string());
                    assert_eq!(joined, parsed, "{base} {path:?}");
                }
                let query = Some(word.as_str());
                let joined = join(base, "/q", query).map(|target| target.to_string());
                let parsed = join_by_url(base, "/q", query).map(|target| target.to_string());
                assert_eq!(joined, parsed, "{base} query {word:?}");
            }
        }
        // The comparison covered the short cut, not only the parser twice.
        assert!(plain > 10_000, "{plain} plain paths");
    }

    #[test]
    fn strips_credentials_hop_by_hop_and_our_own_headers() {
        let mut incoming = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer client-token"),
            ("x-api-key", "client-key"),
            ("host", "sidecar"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("x-sluice-deadline-ms", "100"),
            ("content-length", "3"),
            ("accept", "application/json"),
            ("x-request-id", "r1"),
        ] {
            incoming.append(name, HeaderValue::from_static(value));
        }
        let forwarded = request_headers(&incoming, &HeaderName::from_static("x-api-key"));
        let names: Vec<&str> = forwarded.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["accept", "x-request-id"]);
    }
}
