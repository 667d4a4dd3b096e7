//! Shared by the path targets: does a path, decoded layer by layer as a
//! lenient server might, ever climb above where it was joined?

use percent_encoding::percent_decode_str;

/// Layers of percent-encoding undone: more than any server decodes.
const LAYERS: usize = 8;

/// True when some decoding of `path` (none, once, twice, ...) resolves a
/// `..` segment (separated by `/` or `\`, or as `..;`, tabs and newlines
/// ignored) above its start.
pub fn climbs_when_decoded(path: &str) -> bool {
    let mut text = path.to_owned();
    for _ in 0..LAYERS {
        if climbs_as_is(&text) {
            return true;
        }
        let decoded = percent_decode_str(&text).decode_utf8_lossy().into_owned();
        if decoded == text {
            return false;
        }
        text = decoded;
    }
    climbs_as_is(&text)
}

fn climbs_as_is(path: &str) -> bool {
    // A URL parser drops tabs and newlines: `.\n.` is `..` to it.
    let visible: String = path
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    let mut depth: i64 = 0;
    for segment in visible.split(['/', '\\']) {
        if segment == ".." || segment.starts_with("..;") {
            depth -= 1;
            if depth < 0 {
                return true;
            }
        } else if !segment.is_empty() && segment != "." {
            depth += 1;
        }
    }
    false
}
