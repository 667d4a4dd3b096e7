//! Helpers shared by the fake's integration tests: building requests, reading responses.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use sluice_fake::FakeApi;
use tokio::time::Instant;

/// Milliseconds as a duration.
pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A GET of `path` with no key.
pub fn get(path: &str) -> Request<Bytes> {
    Request::get(path).body(Bytes::new()).unwrap()
}

/// A GET of `path` with `Authorization: key`.
pub fn get_as(path: &str, key: &str) -> Request<Bytes> {
    Request::get(path)
        .header("authorization", key)
        .body(Bytes::new())
        .unwrap()
}

/// A header's value as text, if present.
pub fn header<'a>(response: &'a Response<Bytes>, name: &str) -> Option<&'a str> {
    response
        .headers()
        .get(name)
        .map(|value| value.to_str().unwrap())
}

/// The body parsed as JSON.
pub fn json(response: &Response<Bytes>) -> serde_json::Value {
    serde_json::from_slice(response.body()).unwrap()
}

/// Time since the fake started.
pub fn elapsed(fake: &FakeApi) -> Duration {
    Instant::now() - fake.origin()
}

/// Sends `request` in its own task, so that several can be in flight at once.
pub fn send(fake: &FakeApi, request: Request<Bytes>) -> tokio::task::JoinHandle<Response<Bytes>> {
    let fake = fake.clone();
    tokio::spawn(async move { fake.handle(request).await })
}

/// The statuses of every record, in order.
pub fn statuses(fake: &FakeApi) -> Vec<u16> {
    fake.requests().iter().map(|record| record.status).collect()
}
