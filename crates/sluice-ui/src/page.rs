//! The page: one HTML document with its styles and script inline, and the headers it is served with.

/// The live page, served at `GET /ui`.
pub const PAGE: &str = include_str!("../assets/ui.html");

/// Headers for [`PAGE`]. The policy lets the page run its own inline
/// script and style and talk to its own origin, and nothing else: no
/// external script, font, image or frame can load, and it cannot be framed.
/// No referrer leaves it (its URL may carry `?token=`), and nothing caches it.
pub const PAGE_HEADERS: [(&str, &str); 6] = [
    ("content-type", "text/html; charset=utf-8"),
    (
        "content-security-policy",
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
         connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
    ),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_small_and_self_contained() {
        assert!(PAGE.len() <= 100 * 1024, "{} bytes", PAGE.len());
        // The SVG namespace is a name, not a location: nothing loads from
        // it; the empty icon keeps the browser from asking for /favicon.ico.
        let lower = PAGE
            .to_ascii_lowercase()
            .replace("'http://www.w3.org/2000/svg'", "")
            .replace("<link rel=\"icon\" href=\"data:,\">", "");
        for external in [
            "http:", "https:", "//cdn", "<link", "@import", "src=", "url(",
        ] {
            assert!(
                !lower.contains(external),
                "the page must not load {external}"
            );
        }
        assert!(lower.starts_with("<!doctype html>"));
    }
}
