//! JSON-RPC 2.0 as MCP's stdio transport frames it: one message per line, read without re-encoding.

mod id;
mod message;
mod write;

pub(crate) use id::IdKey;
pub(crate) use message::{Frame, Kind, Message, parse, responses};
pub(crate) use write::{
    INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, batch, cancelled, error_response, notification,
    request, result_response,
};
