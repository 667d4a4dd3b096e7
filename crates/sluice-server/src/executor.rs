//! The HTTP executor: sends a call's request with reqwest, adding the
//! credential's secret, following no redirect and reaching no other origin.

use std::collections::{BTreeMap, HashMap};
use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue};
use reqwest::Url;
use sluice::{Executor, Request, TransportError};

use crate::config::Upstream;
use crate::payload::Outbound;

/// The largest upstream body read into memory; a larger one fails the
/// attempt rather than the sidecar. 32 MiB covers any API's JSON page.
const MAX_RESPONSE_BODY: usize = 32 << 20;

/// How much later than the call's deadline the HTTP client gives up by itself.
const BACKSTOP: Duration = Duration::from_secs(1);

/// A credential as the executor needs it: where, and how to sign.
#[derive(Debug)]
struct Target {
    base_url: Url,
    /// `(header, prefix + secret)`, the value marked sensitive.
    auth: Option<(HeaderName, HeaderValue)>,
}

/// Sends calls' requests over HTTP. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HttpExecutor {
    client: reqwest::Client,
    targets: Arc<HashMap<String, Target>>,
}

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientError(String);

impl HttpExecutor {
    /// An executor for these credentials.
    pub fn new(credentials: &BTreeMap<String, Upstream>) -> Result<Self, ClientError> {
        let client = reqwest::Client::builder()
            // A redirect could point anywhere: the client gets it as is.
            .redirect(reqwest::redirect::Policy::none())
            // Only the base URL is contacted, never a proxy from the environment.
            .no_proxy()
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| ClientError(chain(&error)))?;
        let mut targets = HashMap::new();
        for (name, upstream) in credentials {
            let auth = match &upstream.secret {
                None => None,
                Some(secret) => {
                    let mut value = HeaderValue::from_str(&format!(
                        "{}{}",
                        upstream.auth_prefix,
                        secret.expose()
                    ))
                    // Checked when the configuration was loaded; the value is not shown.
                    .map_err(|_| {
                        ClientError(format!("the secret of {name} is not a valid header value"))
                    })?;
                    value.set_sensitive(true);
                    Some((upstream.auth_header.clone(), value))
                }
            };
            targets.insert(
                name.clone(),
                Target {
                    base_url: upstream.base_url.clone(),
                    auth,
                },
            );
        }
        Ok(HttpExecutor {
            client,
            targets: Arc::new(targets),
        })
    }

    async fn send(
        &self,
        request: Request<Outbound>,
    ) -> Result<http::Response<Bytes>, TransportError> {
        let Some(target) = self.targets.get(&*request.credential) else {
            return Err(TransportError::other(format!(
                "unknown credential {:?}",
                &*request.credential
            )));
        };
        let outbound = request.payload.request();
        // The handlers only build URLs below the base URL; refuse anything else
        // all the same, before a byte is sent.
        if outbound.url.origin() != target.base_url.origin() {
            return Err(TransportError::other(
                "refused: the request does not go to the credential's base URL",
            ));
        }
        let mut headers = outbound.headers.clone();
        if let Some((name, value)) = &target.auth {
            headers.insert(name.clone(), value.clone());
        }
        // The gate enforces the deadline itself and answers `timed_out`; the
        // client's own timeout is only a backstop, later, so it never wins
        // the race and turns a timeout into a transport error.
        let timeout = request.timeout + BACKSTOP;
        let sent = self
            .client
            .request(outbound.method.clone(), outbound.url.clone())
            .headers(headers)
            .body(outbound.body.clone())
            .timeout(timeout)
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) if error.is_connect() => return Err(TransportError::connect(chain(&error))),
            Err(error) => return Err(TransportError::other(chain(&error))),
        };
        let mut http_response = http::Response::builder()
            .status(response.status())
            .version(response.version())
            .body(Bytes::new())
            .map_err(|error| TransportError::other(error.to_string()))?;
        *http_response.headers_mut() = std::mem::take(response.headers_mut());
        let mut body = BytesMut::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_RESPONSE_BODY {
                        return Err(TransportError::other(format!(
                            "the upstream body is larger than {} MiB",
                            MAX_RESPONSE_BODY >> 20
                        )));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(error) => return Err(TransportError::other(chain(&error))),
            }
        }
        *http_response.body_mut() = body.freeze();
        Ok(http_response)
    }
}

impl Executor for HttpExecutor {
    type Payload = Outbound;

    fn execute(
        &self,
        request: Request<Outbound>,
    ) -> impl Future<Output = Result<http::Response<Bytes>, TransportError>> + Send {
        let executor = self.clone();
        async move { executor.send(request).await }
    }
}

/// An error and its causes on one line, without the URL (it is in the
/// outcome's context already, and a message should stay short).
fn chain(error: &reqwest::Error) -> String {
    let mut parts = vec![strip_url(error)];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

fn strip_url(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "the upstream did not answer in time".to_owned();
    }
    if error.is_connect() {
        return "cannot connect to the upstream".to_owned();
    }
    if error.is_body() || error.is_decode() {
        return "the upstream body broke off".to_owned();
    }
    "the request to the upstream failed".to_owned()
}
