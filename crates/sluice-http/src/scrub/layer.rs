//! The outermost layer of the app when a secret is configured: every
//! response's headers masked, its body masked whole when it is already in
//! memory, chunk by chunk when it streams.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Method, StatusCode};
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use super::secrets::Scrubber;
use super::stream::StreamScrub;

/// Marks a response whose body is an upstream's, still arriving: it is
/// masked as it streams (and loses its `Content-Length`, which masking may
/// change), never read whole first.
#[derive(Debug, Clone, Copy)]
pub struct Streamed;

/// Masks every secret in what `next` answers.
pub async fn scrub_responses(
    State(scrubber): State<Arc<Scrubber>>,
    request: Request,
    next: Next,
) -> Response {
    let head = request.method() == Method::HEAD;
    let response = next.run(request).await;
    scrub(&scrubber, head, response).await
}

/// `response` with every secret masked; `head` when it answers a HEAD.
pub async fn scrub(scrubber: &Arc<Scrubber>, head: bool, mut response: Response) -> Response {
    let scrubber = scrubber.clone();
    scrubber.headers(response.headers_mut());
    if head {
        // No body; its headers describe the body a GET would get.
        return response;
    }
    let whole = response.body().size_hint().exact().is_some()
        && response.extensions().get::<Streamed>().is_none();
    if !whole {
        response.headers_mut().remove(CONTENT_LENGTH);
        return response.map(|body| Body::new(ScrubBody::new(body, scrubber)));
    }
    // Outcomes, errors, status pages and buffered upstream bodies are in
    // memory already: mask them at once and keep an exact length.
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
    };
    match scrubber.bytes(&bytes) {
        None => Response::from_parts(parts, Body::from(bytes)),
        Some(masked) => {
            parts.headers.remove(CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(masked))
        }
    }
}

/// A streaming body with its secrets masked across chunk boundaries.
struct ScrubBody {
    inner: Body,
    scrub: StreamScrub,
    scrubber: Arc<Scrubber>,
    /// Trailers that arrived while held-back bytes still had to go out.
    trailers: Option<HeaderMap>,
    done: bool,
}

impl ScrubBody {
    fn new(inner: Body, scrubber: Arc<Scrubber>) -> Self {
        ScrubBody {
            inner,
            scrub: StreamScrub::new(scrubber.clone()),
            scrubber,
            trailers: None,
            done: false,
        }
    }
}

impl HttpBody for ScrubBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(trailers) = this.trailers.take() {
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.scrub.push(data);
                        // Nothing to send yet (all of it may begin a secret).
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(frame) => {
                        if let Ok(mut trailers) = frame.into_trailers() {
                            this.scrubber.headers(&mut trailers);
                            this.trailers = Some(trailers);
                            this.done = true;
                            let rest = this.scrub.finish();
                            if !rest.is_empty() {
                                return Poll::Ready(Some(Ok(Frame::data(rest))));
                            }
                        }
                    }
                },
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.done = true;
                    let rest = this.scrub.finish();
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // Masking may change the length.
        SizeHint::default()
    }
}
