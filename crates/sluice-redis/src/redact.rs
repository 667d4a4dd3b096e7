//! Redis URLs with their password hidden: what Display, Debug, errors and logs show.

use std::fmt;

/// A Redis URL (`redis://[user[:password]@]host:port[/db]`, or `rediss://`).
///
/// `Debug` and `Display` print it with the password replaced by `***`;
/// the crate reads the real text only to open connections.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    text: String,
}

impl RedisUrl {
    /// Wraps a URL.
    pub fn new(text: impl Into<String>) -> Self {
        RedisUrl { text: text.into() }
    }

    /// The URL with its secret, for the Redis client only.
    pub(crate) fn expose(&self) -> &str {
        &self.text
    }

    /// Whether it is a `rediss://` (TLS) URL.
    pub fn is_tls(&self) -> bool {
        self.text.starts_with("rediss://")
    }

    /// The URL as it may be shown.
    pub fn redacted(&self) -> String {
        redact_url(&self.text)
    }

    /// The password, if the URL has one (to scrub it from error messages).
    pub(crate) fn password(&self) -> Option<&str> {
        let (_, rest) = self.text.split_once("://")?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        let (userinfo, _) = authority.rsplit_once('@')?;
        match userinfo.split_once(':') {
            Some((_, password)) if !password.is_empty() => Some(password),
            // `redis://secret@host` puts the password where a user name goes.
            None if !userinfo.is_empty() => Some(userinfo),
            _ => None,
        }
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisUrl({:?})", self.redacted())
    }
}

/// `url` with any password replaced by `***` (and a bare user-info too,
/// since `redis://secret@host` means a password).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL we understand: show nothing that might be a secret.
        return if url.contains('@') {
            "***".to_owned()
        } else {
            url.to_owned()
        };
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let tail = redact_query(tail);
    match authority.rsplit_once('@') {
        None => format!("{scheme}://{authority}{tail}"),
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => format!("{scheme}://***@{host}{tail}"),
        },
    }
}

/// Hides a `password=` query parameter, which some clients accept.
fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// Removes every occurrence of the given secrets from `text`.
pub(crate) fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret, "***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        let url = RedisUrl::new("redis://app:s3cret@10.0.0.1:6380/2");
        assert_eq!(url.to_string(), "redis://app:***@10.0.0.1:6380/2");
        assert!(!format!("{url:?}").contains("s3cret"));
        assert_eq!(url.password(), Some("s3cret"));
        let bare = RedisUrl::new("rediss://s3cret@host:6379");
        assert_eq!(bare.to_string(), "rediss://***@host:6379");
        assert_eq!(bare.password(), Some("s3cret"));
        let query = redact_url("redis://host:1/0?password=s3cret&protocol=resp3");
        assert_eq!(query, "redis://host:1/0?password=***&protocol=resp3");
    }

    #[test]
    fn urls_without_secrets_are_unchanged() {
        assert_eq!(
            redact_url("redis://127.0.0.1:7000"),
            "redis://127.0.0.1:7000"
        );
        assert_eq!(RedisUrl::new("redis://h:1").password(), None);
    }

    #[test]
    fn scrub_removes_every_occurrence() {
        assert_eq!(scrub("a pw b pw", &["pw"]), "a *** b ***");
        assert_eq!(scrub("text", &[""]), "text");
    }
}
