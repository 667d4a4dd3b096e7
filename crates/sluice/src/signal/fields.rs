//! Header access for profiles: case-insensitive, repeated headers joined, text only.

use http::header::{Iter, ValueIter};
use http::{HeaderMap, HeaderValue};
use smallvec::SmallVec;

/// The response's headers as the profiles read them.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    headers: &'a HeaderMap,
    /// The only fields looked through, when the reader has picked out
    /// those that may carry a rate signal (the only ones a profile reads).
    carriers: Option<&'a [Carrier<'a>]>,
    /// Every name a profile asked for (tests only).
    #[cfg(test)]
    asked: Option<&'a std::cell::RefCell<Vec<String>>>,
}

/// A field that may carry a rate signal: its name and its value.
pub(crate) type Carrier<'a> = (&'a str, &'a HeaderValue);

/// Whether a header named `name` (lowercase) may carry a rate signal: the
/// name of every field a profile reads contains one of these, which a test
/// checks by recording what the profiles ask for. A response with no such
/// field skips the profiles.
pub(crate) fn may_carry_signal(name: &str) -> bool {
    // Every part holds "limit" or "retry": one pass over the
    // name finds each place either word begins, and a part is looked for
    // only around it: every header of every response passes here, and
    // five substring searches per name showed in the proxy's profile
    // (docs/PERFORMANCE.md).
    let name = name.as_bytes();
    name.windows(WORD_LEN).enumerate().any(|(at, word)| {
        (word == b"limit" || word == b"retry")
            && SIGNAL_PARTS.iter().zip(WORD_AT).any(|(part, from)| {
                at.checked_sub(from)
                    .and_then(|start| name.get(start..start + part.len()))
                    == Some(part.as_bytes())
            })
    })
}

/// What the name of a field that may carry a rate signal contains.
pub(crate) const SIGNAL_PARTS: [&str; 5] = [
    "ratelimit",
    "rate-limit",
    "retry-after",
    "call-limit",
    "limit-info",
];

/// The length of the words every one of [`SIGNAL_PARTS`] holds, one each:
/// "limit" or "retry".
const WORD_LEN: usize = 5;

/// Where in each of [`SIGNAL_PARTS`] its word begins (a test checks them).
const WORD_AT: [usize; 5] = [4, 5, 0, 5, 0];

/// Longest header value a profile will look at; anything longer is noise.
const MAX_VALUE_LEN: usize = 4_096;

/// Maps with at most this many fields are searched by a scan. The profiles
/// ask for some forty names, nearly all absent; looking a name given as text
/// up in the map first parses and hashes it, which a measured profile of the
/// sidecar showed to cost more than comparing it with a typical response's
/// handful of names.
pub(crate) const SCAN_UP_TO: usize = 32;

impl<'a> Fields<'a> {
    /// Wraps a header map (its names are already case-insensitive).
    pub fn new(headers: &'a HeaderMap) -> Self {
        Fields {
            headers,
            carriers: None,
            #[cfg(test)]
            asked: None,
        }
    }

    /// The fields of `headers` that may carry a rate signal, `carriers`
    /// (every one of them, in order): a look-up goes through these alone,
    /// where a response's other fields would each be compared in vain.
    pub(crate) fn carriers(headers: &'a HeaderMap, carriers: &'a [Carrier<'a>]) -> Self {
        Fields {
            carriers: Some(carriers),
            ..Fields::new(headers)
        }
    }

    /// Fields that record every name asked for.
    #[cfg(test)]
    pub(crate) fn recording(
        headers: &'a HeaderMap,
        asked: &'a std::cell::RefCell<Vec<String>>,
    ) -> Self {
        Fields {
            headers,
            carriers: None,
            asked: Some(asked),
        }
    }

    /// The first value of `name` as trimmed text, if it is visible ASCII.
    pub fn first(&self, name: &str) -> Option<&'a str> {
        let value = self.values(name).next()?.to_str().ok()?.trim_ascii();
        (!value.is_empty() && value.len() <= MAX_VALUE_LEN).then_some(value)
    }

    /// Every value of `name` joined with `", "`, as RFC 9110 §5.3 combines
    /// repeated fields; `None` when absent or not text.
    pub fn joined(&self, name: &str) -> Option<String> {
        let texts = self.texts(name)?;
        (!texts.is_empty()).then(|| texts.join(", "))
    }

    /// Every comma-separated element of every value of `name`, trimmed and
    /// non-empty: the elements of [`Fields::joined`]'s text, without
    /// joining it (none when it would be `None`).
    pub fn elements(&self, name: &str) -> impl Iterator<Item = &'a str> + use<'a> {
        self.texts(name)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|text| text.split(','))
            .map(str::trim_ascii)
            .filter(|element| !element.is_empty())
    }

    /// The non-empty values of `name`, trimmed, found in one pass over the
    /// fields; `None` when one is not text or [`Fields::joined`]'s text
    /// would be longer than `MAX_VALUE_LEN`.
    fn texts(&self, name: &str) -> Option<SmallVec<[&'a str; 2]>> {
        let mut texts = SmallVec::new();
        let mut len = 0;
        for value in self.values(name) {
            let text = value.to_str().ok()?.trim_ascii();
            if text.is_empty() {
                continue;
            }
            let separator = if texts.is_empty() { 0 } else { ", ".len() };
            len += separator + text.len();
            if len > MAX_VALUE_LEN {
                return None;
            }
            texts.push(text);
        }
        Some(texts)
    }

    /// A non-negative integer header value (the first one).
    pub fn integer(&self, name: &str) -> Option<u64> {
        parse_integer(self.first(name)?)
    }

    /// Every value of `name`, in order, whatever its case.
    fn values<'n>(&self, name: &'n str) -> Values<'a, 'n> {
        #[cfg(test)]
        if let Some(asked) = self.asked {
            asked.borrow_mut().push(name.to_ascii_lowercase());
        }
        match self.carriers {
            Some(carriers) => Values::Carriers(carriers.iter(), name),
            None if self.headers.len() <= SCAN_UP_TO => Values::Scan(self.headers.iter(), name),
            None => Values::Hashed(self.headers.get_all(name).iter()),
        }
    }

    /// Header names present, for profiles that match by prefix (the
    /// carriers' alone, when they were picked out).
    pub fn names(&self) -> impl Iterator<Item = &'a str> {
        let (picked, all) = match self.carriers {
            Some(carriers) => (carriers, None),
            None => (&[][..], Some(self.headers)),
        };
        let all = all.into_iter().flat_map(HeaderMap::keys);
        picked
            .iter()
            .map(|(name, _)| *name)
            .chain(all.map(|name| name.as_str()))
    }
}

/// The values of one name: found by a scan of a small map, or by hashing.
enum Values<'a, 'n> {
    Carriers(std::slice::Iter<'a, Carrier<'a>>, &'n str),
    Scan(Iter<'a, HeaderValue>, &'n str),
    Hashed(ValueIter<'a, HeaderValue>),
}

impl<'a> Iterator for Values<'a, '_> {
    type Item = &'a HeaderValue;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Values::Carriers(fields, wanted) => fields
                .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
                .map(|(_, value)| *value),
            Values::Scan(fields, wanted) => fields
                .find(|(name, _)| name.as_str().eq_ignore_ascii_case(wanted))
                .map(|(_, value)| value),
            Values::Hashed(values) => values.next(),
        }
    }
}

/// A non-negative decimal integer of at most 19 digits; anything else is ignored.
pub(crate) fn parse_integer(text: &str) -> Option<u64> {
    let text = text.trim_ascii();
    let text = text.strip_prefix('+').unwrap_or(text);
    if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A count as some servers send it: an integer, or a float with a fraction
/// (`"0.0"`, `"41.5"`), rounded down (a fraction of a request is not one
/// that may be sent).
pub(crate) fn parse_count(text: &str) -> Option<u64> {
    let text = text.trim_ascii();
    match text.split_once('.') {
        Some((whole, fraction))
            if !whole.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) =>
        {
            parse_integer(whole)
        }
        Some(_) => None,
        None => parse_integer(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each part's word is where `WORD_AT` says, so that looking for a
    /// part around its word finds what a search of the name would.
    #[test]
    fn each_parts_word_is_where_the_search_looks() {
        for (part, at) in SIGNAL_PARTS.iter().zip(WORD_AT) {
            let word = &part[at..at + WORD_LEN];
            assert!(word == "limit" || word == "retry", "{part}: {word:?}");
        }
        let names = [
            "x-ratelimit-limit",
            "ratelimit",
            "x-rate-limit-reset",
            "retry-after",
            "x-amz-retry-after",
            "x-shopify-shop-api-call-limit",
            "sforce-limit-info",
            "limit-info-x",
            "x-limit",
            "retry",
            "x-retry-count",
            "ratelimi",
            "rate-limi",
            "limitlimit-info",
            "rateratelimit",
            "content-type",
            "",
        ];
        for name in names {
            let searched = SIGNAL_PARTS.iter().any(|part| name.contains(part));
            assert_eq!(may_carry_signal(name), searched, "{name}");
        }
    }

    proptest::proptest! {
        /// Names made of the parts' pieces, joined anyhow: looking around
        /// the words finds a part exactly when a search of the name does.
        #[test]
        fn looking_around_the_words_is_a_search(
            pieces in proptest::collection::vec(
                proptest::sample::select(&[
                    "rate", "ratelimit", "rate-limit", "retry-after", "call-limit", "limit-info",
                    "-", "limit", "retry", "after", "call", "info", "x", "r", "t",
                ][..]),
                0..8,
            )
        ) {
            let name = pieces.concat();
            let searched = SIGNAL_PARTS.iter().any(|part| name.contains(part));
            proptest::prop_assert_eq!(may_carry_signal(&name), searched, "{}", name);
        }
    }

    #[test]
    fn counts_may_be_floats() {
        assert_eq!(parse_count("0.0"), Some(0));
        assert_eq!(parse_count("41.9"), Some(41));
        assert_eq!(parse_count("7"), Some(7));
        assert_eq!(parse_count("7."), Some(7));
        assert_eq!(parse_count(".5"), None);
        assert_eq!(parse_count("-1.0"), None);
        assert_eq!(parse_count("1.0e3"), None);
    }

    #[test]
    fn integers_are_plain_and_bounded() {
        assert_eq!(parse_integer(" 42 "), Some(42));
        // A header value's whitespace is ASCII: spaces and tabs.
        assert_eq!(parse_integer("\t42 \t"), Some(42));
        assert_eq!(parse_integer("-1"), None);
        assert_eq!(parse_integer("1.5"), None);
        assert_eq!(
            parse_integer("1234567890123456789012345678901234567890"),
            None
        );
        assert_eq!(parse_integer(""), None);
    }

    #[test]
    fn repeated_headers_are_joined() {
        let mut headers = HeaderMap::new();
        headers.append("ratelimit", "\"a\";r=1".parse().unwrap());
        headers.append("RateLimit", "\"b\";r=0".parse().unwrap());
        let fields = Fields::new(&headers);
        assert_eq!(fields.joined("ratelimit").unwrap(), "\"a\";r=1, \"b\";r=0");
        let elements: Vec<_> = fields.elements("RateLimit").collect();
        assert_eq!(elements, ["\"a\";r=1", "\"b\";r=0"]);
        assert_eq!(fields.first("RATELIMIT"), Some("\"a\";r=1"));
    }

    /// A field reads as a whole or not at all: joined longer than
    /// `MAX_VALUE_LEN`, or with a value that is not text, it is absent to
    /// `joined` and `elements` alike; empty values add no separator.
    #[test]
    fn a_field_is_read_whole_and_bounded() {
        let field = |values: &[&[u8]]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append("x-ratelimit-limit", HeaderValue::from_bytes(value).unwrap());
            }
            headers
        };
        let fits = "1".repeat(MAX_VALUE_LEN - 3);
        let headers = field(&[fits.as_bytes(), b" ", b"2"]);
        let fields = Fields::new(&headers);
        assert_eq!(
            fields.joined("x-ratelimit-limit").map(|j| j.len()),
            Some(MAX_VALUE_LEN)
        );
        assert_eq!(fields.elements("x-ratelimit-limit").count(), 2);
        let over = field(&[fits.as_bytes(), b"22"]);
        assert_eq!(Fields::new(&over).joined("x-ratelimit-limit"), None);
        assert_eq!(Fields::new(&over).elements("x-ratelimit-limit").count(), 0);
        let unreadable = field(&[b"5", b"caf\xc3\xa9"]);
        assert_eq!(Fields::new(&unreadable).joined("x-ratelimit-limit"), None);
        assert_eq!(
            Fields::new(&unreadable)
                .elements("x-ratelimit-limit")
                .count(),
            0
        );
        let empty = field(&[b" ", b""]);
        assert_eq!(Fields::new(&empty).joined("x-ratelimit-limit"), None);
    }

    #[test]
    fn large_maps_are_read_like_small_ones() {
        let mut headers = HeaderMap::new();
        for i in 0..=SCAN_UP_TO {
            headers.insert(
                http::HeaderName::try_from(format!("x-filler-{i}")).unwrap(),
                "1".parse().unwrap(),
            );
        }
        headers.append("retry-after", "2".parse().unwrap());
        headers.append("Retry-After", "3".parse().unwrap());
        assert!(headers.len() > SCAN_UP_TO);
        let fields = Fields::new(&headers);
        assert_eq!(fields.first("Retry-After"), Some("2"));
        assert_eq!(fields.joined("retry-after").unwrap(), "2, 3");
        assert_eq!(
            fields.elements("retry-after").collect::<Vec<_>>(),
            ["2", "3"]
        );
        assert_eq!(fields.first("absent"), None);
    }
}
