//! Secrets scrubbed from every byte returned to a client: each configured
//! credential's secret (and its JSON- and percent-encoded forms) becomes
//! `***` in response headers and bodies, streamed ones included, across
//! chunk boundaries. With no secret configured nothing is installed.
//!
//! `sluice mcp` scrubs what it returns with the same parts: [`Scrubber`]
//! on each whole message, [`StreamScrub`] on a byte stream passed through,
//! and [`scrub_responses`] around its `--listen` router.

mod layer;
mod secrets;
mod stream;

pub use layer::{Streamed, scrub, scrub_responses};
pub use secrets::{MASK, Scrubber};
pub use stream::StreamScrub;
