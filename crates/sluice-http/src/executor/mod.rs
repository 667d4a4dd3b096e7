//! The HTTP executor: a call's request sent on hyper's client, signed with
//! the credential's secret, to the credential's base URL and nowhere else;
//! a proxied answer's body streams back as the reply's [`sluice::BodyStream`].

mod body;
mod client;
mod send;

pub use client::ClientError;
pub(crate) use client::https_connector;
pub use send::HttpExecutor;
