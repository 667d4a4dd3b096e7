//! Rejections servers state in response bodies, one small parser per family, read within fixed bounds.

mod anthropic;
mod document;
mod github;
mod google;
mod graphql;
mod openai;
mod reader;
mod words;

pub use document::{Body, MAX_DEPTH, MAX_JSON_BYTES, MAX_TEXT_BYTES};
pub use graphql::COST_UNIT;
pub(crate) use reader::read;
pub use reader::{ALL, BodyProfile, BodySignals, wants_body};
