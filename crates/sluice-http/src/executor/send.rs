//! [`HttpExecutor`]: one attempt of a call, signed and sent to its
//! credential's origin; a tool's answer read whole, a proxied one streamed.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, HOST, USER_AGENT};
use http::uri::Scheme;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as _, Incoming};
use sluice::signal::BodySignals;
use sluice::{BodyStream, Executor, Reply, Request, TransportError};
use sluice_config::Upstream;
use url::Url;

use super::body::{STREAM_PAST, body_matters, streams_at_once};
use super::client::{ClientError, Connector, Pool, SendError};
use crate::payload::Outbound;
use crate::trace::{ClientSpan, TRACEPARENT};

/// The largest upstream body read into memory; a larger one fails the
/// attempt rather than the sidecar. 32 MiB covers any API's JSON page.
const MAX_RESPONSE_BODY: usize = 32 << 20;

/// What the sidecar says it is, unless the client said otherwise.
const SLUICE_AGENT: &str = concat!("sluice/", env!("CARGO_PKG_VERSION"));
/// reqwest's default `Accept`, kept so that upstreams see what they saw before.
const ANY: &str = "*/*";

/// A credential as the executor needs it: where, and how to sign.
#[derive(Debug)]
struct Target {
    /// `(header, prefix + secret)`, the value marked sensitive.
    auth: Option<(HeaderName, HeaderValue)>,
    /// Which answers' bodies the signal reader needs.
    body_signals: BodySignals,
    /// `scheme://authority/`: where connections are opened, and the only
    /// origin requests may go to.
    origin: Uri,
    /// The `Host` a request carries unless it has one.
    host: HeaderValue,
    /// Idle connections to the origin.
    pool: Pool,
}

/// Sends calls' requests over HTTP/1.1, following no redirect and reaching
/// no origin but the credential's. Cheap to clone.
///
/// A configured tool's answer is read whole (its outcome carries the body
/// as JSON). A proxied request answered to one client only
/// ([`Outbound::ProxyStream`]) whose body does not matter to the signal
/// reader (a 2xx) streams: at once when it is a stream by its type (an
/// event stream, NDJSON) or declares a length past 1 MiB, else once it
/// grows past 1 MiB (a shorter one is read whole, so that one cut short
/// is retried or answered 502 and its length stays exact). The head
/// goes back to the engine with the body as a [`BodyStream`], so the call
/// keeps its concurrency permit until the body has been delivered.
#[derive(Debug, Clone)]
pub struct HttpExecutor {
    connector: Connector,
    /// foldhash: one look-up per request, on a short key (SipHash was
    /// most of its cost).
    targets: Arc<foldhash::HashMap<String, Target>>,
}

impl HttpExecutor {
    /// An executor for these credentials (`SidecarConfig::credentials`).
    pub fn new(credentials: &BTreeMap<String, Upstream>) -> Result<Self, ClientError> {
        let mut targets = foldhash::HashMap::default();
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
            let no_origin = || ClientError(format!("the base URL of {name} has no origin"));
            let at = origin(&upstream.base_url).ok_or_else(no_origin)?;
            let authority = at.authority().ok_or_else(no_origin)?;
            let host = HeaderValue::from_str(authority.as_str()).map_err(|_| no_origin())?;
            targets.insert(
                name.clone(),
                Target {
                    auth,
                    body_signals: upstream.body_signals,
                    origin: at,
                    host,
                    pool: Pool::default(),
                },
            );
        }
        Ok(HttpExecutor {
            connector: Connector::new()?,
            targets: Arc::new(targets),
        })
    }

    async fn send(&self, request: Request<Outbound>) -> Result<Reply, TransportError> {
        let Some(target) = self.targets.get(&*request.credential) else {
            return Err(TransportError::other(format!(
                "unknown credential {:?}",
                &*request.credential
            )));
        };
        let outbound = request.payload.request();
        // Copied once, with room for the five below: a clone has none to
        // spare, and growing it afterwards re-indexes every header.
        let mut headers = HeaderMap::with_capacity(outbound.headers.len() + 5);
        headers.extend(
            outbound
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        if let Some((name, value)) = &target.auth {
            headers.insert(name.clone(), value.clone());
        }
        headers
            .entry(USER_AGENT)
            .or_insert_with(|| HeaderValue::from_static(SLUICE_AGENT));
        headers
            .entry(ACCEPT)
            .or_insert_with(|| HeaderValue::from_static(ANY));
        headers.entry(HOST).or_insert_with(|| target.host.clone());
        // A traced call's request is its CLIENT span, which the upstream
        // is told is its parent (replacing a proxied client's own).
        let span = ClientSpan::http(&outbound.method, &target.origin);
        if let Some(span) = &span {
            headers.insert(TRACEPARENT, span.traceparent().header());
        }
        let mut sent = http::Request::new(Full::new(outbound.body.clone()));
        *sent.method_mut() = outbound.method.clone();
        // Origin-form, as HTTP/1 sends it to the origin itself: the
        // connection is the credential's, and a target names no other.
        *sent.uri_mut() = Uri::from(outbound.target.clone());
        *sent.headers_mut() = headers;
        // The gate enforces the call's deadline: it drops this future when
        // the deadline passes, which cancels the request (and closes its
        // connection).
        let answer = target
            .pool
            .send(&self.connector, &target.origin, sent)
            .await
            .map_err(|error| match error {
                SendError::Connect(message) => TransportError::connect(message),
                SendError::Request(message) => TransportError::other(message),
            });
        if let Some(span) = span {
            span.end_http(
                answer
                    .as_ref()
                    .ok()
                    .map(|(response, _)| response.status().as_u16()),
            );
        }
        let (response, lease) = answer?;
        let (parts, mut body) = response.into_parts();
        // A proxied answer to one client streams unless the signal reader
        // needs its body.
        let may_stream = matches!(&*request.payload, Outbound::ProxyStream(_))
            && !body_matters(parts.status, &parts.headers, target.body_signals);
        // A streamed answer keeps its connection until it ends; the
        // connection then closes rather than going back idle.
        if may_stream && streams_at_once(&parts.headers) {
            return Ok(streaming(parts, Bytes::new(), body));
        }
        let limit = if may_stream {
            STREAM_PAST
        } else {
            MAX_RESPONSE_BODY
        };
        let read = read_up_to(&mut body, limit).await?;
        if let Read::Whole(_) = read {
            lease.give_back();
        }
        match read {
            // The outcome's body: parsed only if something reads it.
            Read::Whole(whole) => Ok(http::Response::from_parts(parts, whole).into()),
            // Too long to hold: what was read goes first, the rest streams.
            Read::Partial(read) if may_stream => Ok(streaming(parts, read, body)),
            Read::Partial(_) => Err(TransportError::other(format!(
                "the upstream body is larger than {} MiB",
                MAX_RESPONSE_BODY >> 20
            ))),
        }
    }
}

/// A head returned to the engine with its body still arriving.
fn streaming(parts: http::response::Parts, read: Bytes, rest: Incoming) -> Reply {
    Reply::streaming(
        http::Response::from_parts(parts, ()),
        BodyStream::new(read, rest),
    )
}

/// How much of a body [`read_up_to`] read.
enum Read {
    /// All of it.
    Whole(Bytes),
    /// More than the limit: the first bytes read (at least the limit).
    Partial(Bytes),
}

/// Reads `body` to its end, or until more than `limit` bytes came.
async fn read_up_to(body: &mut Incoming, limit: usize) -> Result<Read, TransportError> {
    let mut read = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| TransportError::other("the upstream body broke off"))?;
        if let Ok(data) = frame.into_data() {
            // The common case, a body in one chunk, is kept without a copy.
            if read.is_empty() && body.is_end_stream() && data.len() <= limit {
                return Ok(Read::Whole(data));
            }
            read.extend_from_slice(&data);
            if read.len() > limit {
                return Ok(Read::Partial(read.freeze()));
            }
        }
    }
    Ok(Read::Whole(read.freeze()))
}

/// A URL's `scheme://authority/` as a URI, if it has a host.
fn origin(url: &Url) -> Option<Uri> {
    let scheme = match url.scheme() {
        "http" => Scheme::HTTP,
        "https" => Scheme::HTTPS,
        _ => return None,
    };
    // `Url` omits the scheme's default port and has no user info here
    // (the configuration refuses it); what is left is host[:port].
    let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
    Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query("/")
        .build()
        .ok()
}

impl Executor for HttpExecutor {
    type Payload = Outbound;

    fn execute(
        &self,
        request: Request<Outbound>,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send {
        self.send(request)
    }
}
