//! Entry points for the fuzz targets in `fuzz/`: the sidecar's parsers of outside input, reachable without a socket. Not a stable API.
//!
//! Each function is the handler's own code (the turn-request parser, the
//! proxy's path checks), re-exported, so that what is fuzzed is what serves.

use bytes::Bytes;
use http::uri::PathAndQuery;
use serde_json::Value;
use sluice_http::{Url, forward};

use crate::routes::turns;

/// Most calls one `/v1/turns` request may carry.
pub const MAX_CALLS: usize = turns::MAX_CALLS;

/// One call of a parsed `/v1/turns` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    /// The call's id, unique within the request.
    pub id: String,
    /// The tool it names (not checked against a configuration here).
    pub tool: String,
    /// Its arguments as sent (`null` when absent).
    pub args: Value,
    /// Its deadline, if it set one.
    pub deadline_ms: Option<u64>,
}

/// A `/v1/turns` body the parser accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTurn {
    /// The turn id, if any.
    pub turn_id: Option<String>,
    /// The calls, in order.
    pub calls: Vec<ParsedCall>,
}

/// A body the parser refused: the status and the message the client gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The HTTP status (400).
    pub status: u16,
    /// The `error` message.
    pub message: String,
}

/// The `/v1/turns` handler's parser, on a whole body.
pub fn parse_turn(body: &[u8]) -> Result<ParsedTurn, Refused> {
    let parsed = turns::parse(&Bytes::copy_from_slice(body)).map_err(|error| Refused {
        status: error.status.as_u16(),
        message: error.message,
    })?;
    Ok(ParsedTurn {
        turn_id: parsed.turn_id,
        calls: parsed
            .calls
            .into_iter()
            .map(|call| ParsedCall {
                id: call.id,
                tool: call.tool,
                args: call.args,
                deadline_ms: call.deadline_ms,
            })
            .collect(),
    })
}

/// The proxy's check: true when a path (as the client encoded it) could
/// climb above where it is joined, so the request is refused with 400.
pub fn climbs(path: &str) -> bool {
    forward::climbs(path)
}

/// The target (path and query) a path and query become below a
/// credential's base URL, sent to its origin, or the refusal (the message
/// the client would get).
pub fn join(base: &Url, path: &str, query: Option<&str>) -> Result<PathAndQuery, String> {
    forward::join(base, path, query).map_err(|error| error.to_string())
}

/// [`join`] as the URL parser makes it, for any path: what `join` must
/// agree with.
pub fn join_by_url(base: &Url, path: &str, query: Option<&str>) -> Result<PathAndQuery, String> {
    forward::join_by_url(base, path, query).map_err(|error| error.to_string())
}
