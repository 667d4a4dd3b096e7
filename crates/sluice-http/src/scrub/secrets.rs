//! [`Scrubber`]: the secrets to hide, found in one pass over a buffer.

use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a secret becomes.
pub const MASK: &[u8] = b"***";

/// A secret shorter than this also matches ordinary text; it is still
/// scrubbed, and the operator is warned.
const SHORT_SECRET: usize = 8;

/// RFC 3986 unreserved characters stay as they are in a percent-encoded form.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Finds every configured secret in any of the forms an upstream could echo it in.
#[derive(Debug)]
pub struct Scrubber {
    finder: AhoCorasick,
    /// Every form searched for, as bytes (for the held-back suffix of a stream).
    forms: Vec<Vec<u8>>,
    /// The length of the shortest form: nothing shorter can hold a secret,
    /// so most header names and values are passed over without a search.
    shortest: usize,
}

impl Scrubber {
    /// A scrubber for `secrets`, or `None` when there is none (then nothing
    /// is scrubbed and nothing costs anything).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Option<Arc<Self>> {
        let mut forms: Vec<Vec<u8>> = Vec::new();
        for secret in secrets {
            if secret.is_empty() {
                continue;
            }
            if secret.len() < SHORT_SECRET {
                tracing::warn!(
                    length = secret.len(),
                    "a credential's secret is very short; scrubbing it from responses also masks ordinary text that matches it"
                );
            }
            for form in forms_of(secret) {
                if !forms.contains(&form) {
                    forms.push(form);
                }
            }
        }
        if forms.is_empty() {
            return None;
        }
        // Longest first among matches starting at one place, so that a
        // secret and its longer encoded form are both hidden whole.
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&forms)
            .ok()?;
        let shortest = forms.iter().map(Vec::len).min()?;
        Some(Arc::new(Scrubber {
            finder,
            forms,
            shortest,
        }))
    }

    /// `input` with every secret masked, or `None` when it holds none (the
    /// caller keeps its bytes as they are, without a copy).
    pub fn bytes(&self, input: &[u8]) -> Option<Vec<u8>> {
        if input.len() < self.shortest {
            return None;
        }
        let mut matches = self.finder.find_iter(input).peekable();
        matches.peek()?;
        let mut out = Vec::with_capacity(input.len());
        let mut at = 0;
        for found in matches {
            out.extend_from_slice(&input[at..found.start()]);
            out.extend_from_slice(MASK);
            at = found.end();
        }
        out.extend_from_slice(&input[at..]);
        Some(out)
    }

    /// Masks secrets in header values, and in names; a header whose masked
    /// name or value is not valid any more is dropped.
    pub fn headers(&self, headers: &mut HeaderMap) {
        let tainted = headers.iter().any(|(name, value)| {
            self.finds(name.as_str().as_bytes()) || self.finds(value.as_bytes())
        });
        if !tainted {
            return;
        }
        let old = std::mem::take(headers);
        let mut name = None;
        for (next, value) in old {
            // `HeaderMap`'s iterator names only the first value of a name.
            if let Some(next) = next {
                name = Some(next);
            }
            let Some(current) = &name else { continue };
            let masked_name = match self.bytes(current.as_str().as_bytes()) {
                None => Some(current.clone()),
                Some(masked) => HeaderName::from_bytes(&masked).ok(),
            };
            let masked_value = match self.bytes(value.as_bytes()) {
                None => Some(value),
                Some(masked) => HeaderValue::from_bytes(&masked).ok(),
            };
            if let (Some(masked_name), Some(masked_value)) = (masked_name, masked_value) {
                headers.append(masked_name, masked_value);
            }
        }
    }

    /// True when `input` holds a secret.
    pub fn finds(&self, input: &[u8]) -> bool {
        input.len() >= self.shortest && self.finder.is_match(input)
    }

    /// The length of the longest end of `input` that is the beginning of a
    /// secret but not all of it: a stream holds those bytes back until the
    /// next chunk says whether they are a secret.
    pub fn held_back(&self, input: &[u8]) -> usize {
        let mut longest = 0;
        for form in &self.forms {
            let most = (form.len() - 1).min(input.len());
            // The earliest start that begins the form gives the longest end.
            let from = input.len() - most;
            let to = input.len() - longest;
            for start in from..to {
                let end = &input[start..];
                if end[0] == form[0] && form.starts_with(end) {
                    longest = end.len();
                    break;
                }
            }
        }
        longest
    }

    /// Where the secrets are in `input`: `(start, end)`, left to right, not overlapping.
    pub fn matches<'a>(&'a self, input: &'a [u8]) -> impl Iterator<Item = (usize, usize)> + 'a {
        self.finder
            .find_iter(input)
            .map(|found| (found.start(), found.end()))
    }
}

/// A secret as it is, as it appears inside a JSON string, and percent-encoded.
fn forms_of(secret: &str) -> Vec<Vec<u8>> {
    let mut forms = vec![secret.as_bytes().to_vec()];
    if let Ok(json) = serde_json::to_string(secret) {
        let inner = &json[1..json.len() - 1];
        forms.push(inner.as_bytes().to_vec());
        // Some encoders also escape `/`.
        forms.push(inner.replace('/', "\\/").into_bytes());
    }
    let encoded = utf8_percent_encode(secret, ENCODED).to_string();
    forms.push(lower_hex(&encoded).into_bytes());
    forms.push(encoded.into_bytes());
    forms
}

/// A percent-encoded text with its escapes' hex digits in lower case.
fn lower_hex(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut digits = 0;
    for c in encoded.chars() {
        if c == '%' {
            digits = 2;
            out.push(c);
        } else if digits > 0 {
            digits -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubber(secrets: &[&str]) -> Arc<Scrubber> {
        Scrubber::new(secrets.iter().copied()).unwrap()
    }

    #[test]
    fn nothing_to_scrub_builds_nothing() {
        assert!(Scrubber::new([]).is_none());
        assert!(Scrubber::new([""]).is_none());
    }

    #[test]
    fn masks_every_form_and_leaves_clean_bytes_alone() {
        let s = scrubber(&["sk-live/a\"b c"]);
        assert_eq!(s.bytes(b"nothing here"), None);
        let echoed = br#"{"error":"invalid key sk-live/a\"b c","raw":"sk-live/a"b c","url":"k=sk-live%2Fa%22b%20c","low":"sk-live%2fa%22b%20c","old":"sk-live\/a\"b c"}"#;
        let masked = String::from_utf8(s.bytes(echoed).unwrap()).unwrap();
        assert_eq!(
            masked,
            r#"{"error":"invalid key ***","raw":"***","url":"k=***","low":"***","old":"***"}"#
        );
        // Upper-case letters of the secret itself are not lowered.
        let upper = scrubber(&["SK-UPPER/1"]);
        assert_eq!(upper.bytes(b"sk-upper%2f1"), None);
        assert!(upper.bytes(b"SK-UPPER%2f1").is_some());
    }

    /// The length check before a search: a secret exactly as long as the
    /// input, or as long as one of its shorter forms, is still found; a
    /// strict prefix of the shortest form is not a secret.
    #[test]
    fn input_as_short_as_the_shortest_form_is_still_searched() {
        // The first secret's forms are all longer than the second secret.
        let s = scrubber(&["a\"b-long-secret", "k-0123"]);
        assert_eq!(s.shortest, "k-0123".len());
        assert!(s.finds(b"k-0123"));
        assert_eq!(s.bytes(b"k-0123").as_deref(), Some(MASK));
        assert!(!s.finds(b"k-012"));
        assert_eq!(s.bytes(b"k-012"), None);
        assert!(s.finds(b"a\"b-long-secret"));
    }

    #[test]
    fn headers_lose_their_secrets_and_keep_their_order() {
        let s = scrubber(&["sk-123456789"]);
        let mut headers = HeaderMap::new();
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-echo", HeaderValue::from_static("Bearer sk-123456789"));
        headers.append("x-echo", HeaderValue::from_static("two"));
        headers.append("x-key-sk-123456789", HeaderValue::from_static("named"));
        s.headers(&mut headers);
        let seen: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            seen,
            [
                ("x-a".to_owned(), "1".to_owned()),
                ("x-echo".to_owned(), "Bearer ***".to_owned()),
                ("x-echo".to_owned(), "two".to_owned()),
                ("x-key-***".to_owned(), "named".to_owned()),
            ]
        );
    }

    #[test]
    fn the_held_back_end_is_only_a_secret_beginning() {
        let s = scrubber(&["abcdef12"]);
        assert_eq!(s.held_back(b"data: x\n\n"), 0);
        assert_eq!(s.held_back(b"xxab"), 2);
        assert_eq!(s.held_back(b"xxabcdef1"), 7);
        // A whole secret at the end is found now, not held back.
        assert_eq!(s.held_back(b"abcdef12"), 0);
        assert_eq!(s.held_back(b"a"), 1);
    }
}
