//! Entry points for the fuzz targets in `fuzz/`: the sidecar's parser of outside input, reachable without a socket. Not a stable API.
//!
//! The function is the handler's own code (the turn-request parser),
//! re-exported, so that what is fuzzed is what serves. The proxy's path
//! checks are `sluice_http::forward`'s, public there.

use crate::routes::turns;
use bytes::Bytes;
use serde_json::Value;

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
