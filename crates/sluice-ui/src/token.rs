//! The bearer token as a browser can present it when it opens the page: `GET /ui?token=...`.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// The query parameter `GET /ui` may carry the token in.
pub const TOKEN_PARAM: &str = "token";

/// The token in a request's query string (`token=...`, percent-decoded),
/// if there is one. Only `GET /ui` should accept it: a listener compares
/// it with its token exactly as it compares a bearer header, in constant
/// time, and every other endpoint takes the header only.
///
/// ```
/// assert_eq!(sluice_ui::query_token(Some("token=a%2Bb")).as_deref(), Some("a+b"));
/// assert_eq!(sluice_ui::query_token(Some("x=1&token=t")).as_deref(), Some("t"));
/// assert_eq!(sluice_ui::query_token(Some("tokens=t")), None);
/// assert_eq!(sluice_ui::query_token(None), None);
/// ```
pub fn query_token(query: Option<&str>) -> Option<Cow<'_, str>> {
    query?.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        // `+` is a space in form encoding; a token has none, so it stays a `+`.
        (name == TOKEN_PARAM).then(|| percent_decode_str(value).decode_utf8_lossy())
    })
}
