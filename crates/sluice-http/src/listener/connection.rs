//! One connection: hyper serves the app on it while a watchdog closes it
//! when it has been idle too long or takes too long over a request's head,
//! and shuts it down gracefully when the server stops.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tower_service::Service as _;

use super::activity::{Activity, Verdict, Watched};
use super::limits::Limits;

/// How soon a connection already past a timeout is looked at again.
const RECHECK: Duration = Duration::from_millis(100);

/// What an accept loop tells its connections: stop (finish the request in
/// progress, then close), or close if idle (the listener is full). One per
/// accept loop, so that on a worker's current-thread runtime only that
/// thread ever touches it.
#[derive(Debug, Default)]
pub(crate) struct Control {
    attention: Notify,
    stopping: AtomicBool,
    drains: AtomicU64,
}

impl Control {
    /// Every connection finishes its request in progress and closes.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.attention.notify_waiters();
    }

    /// Every idle connection closes.
    pub(crate) fn drain(&self) {
        self.drains.fetch_add(1, Ordering::SeqCst);
        self.attention.notify_waiters();
    }
}

/// Serves `router` on `stream` until the client closes it, a timeout
/// closes it, or `control` says to stop and its request in progress is over.
pub(crate) async fn serve(stream: TcpStream, app: App, limits: Limits, control: Arc<Control>) {
    let activity = Activity::new(limits.header_read_timeout);
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let service = Tracking {
        app,
        activity: activity.clone(),
    };
    let connection = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let first = due(activity.check(limits.idle_timeout));
    let timer = tokio::time::sleep_until(first);
    tokio::pin!(timer);
    activity.armed(first);
    let mut drains = control.drains.load(Ordering::SeqCst);
    let mut closing = false;
    loop {
        if !closing && control.stopping.load(Ordering::SeqCst) {
            connection.as_mut().graceful_shutdown();
            closing = true;
        }
        tokio::select! {
            biased;
            _ = connection.as_mut() => return,
            // A head began that is due before the timer: set it earlier.
            () = poll_fn(|_| if activity.take_rearm() { Poll::Ready(()) } else { Poll::Pending }) => {}
            () = &mut timer => match activity.check(limits.idle_timeout) {
                Verdict::SlowHead => {
                    tracing::debug!("closed a connection whose request head was too slow");
                    return;
                }
                Verdict::Idle if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
                Verdict::Idle | Verdict::Until(_) => {}
            },
            () = control.attention.notified(), if !closing => {
                let now = control.drains.load(Ordering::SeqCst);
                if now != drains && activity.is_idle() {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
                drains = now;
            }
        }
        let next = due(activity.check(limits.idle_timeout));
        if next != timer.deadline() {
            timer.as_mut().reset(next);
            activity.armed(next);
        }
    }
}

/// When to look again after `verdict`: when it says, or soon when something
/// is already late (a graceful close in progress takes its time).
fn due(verdict: Verdict) -> Instant {
    match verdict {
        Verdict::Until(at) => at,
        Verdict::Idle | Verdict::SlowHead => Instant::now() + RECHECK,
    }
}

/// The answer of a route taken without the router.
pub type DirectAnswer = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// A route a connection answers without the router (the sidecar's proxy
/// route, its hot path). It must answer as the router would, its layers
/// included.
pub trait Direct: Send + Sync + 'static {
    /// True for a request this route answers.
    fn takes(&self, request: &Request<Body>) -> bool;
    /// The answer to a request it [takes](Direct::takes).
    fn answer(&self, request: Request<Body>) -> DirectAnswer;
}

/// What a connection serves: a router, and optionally a route answered
/// without it ([`Direct`]).
#[derive(Clone)]
pub struct App {
    router: Router,
    direct: Option<Arc<dyn Direct>>,
}

impl App {
    /// Serves `router`.
    pub fn new(router: Router) -> Self {
        App {
            router,
            direct: None,
        }
    }

    /// Answers the requests `direct` takes without the router.
    pub fn direct(mut self, direct: Arc<dyn Direct>) -> Self {
        self.direct = Some(direct);
        self
    }
}

/// The app as hyper's service, telling the connection's [`Activity`] when
/// a request starts and when its response is over.
#[derive(Clone)]
struct Tracking {
    app: App,
    activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for Tracking {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = TrackedFuture;

    fn call(&self, request: Request<Incoming>) -> TrackedFuture {
        self.activity.busy();
        let request = request.map(Body::new);
        let inner = match &self.app.direct {
            Some(direct) if direct.takes(&request) => Answer::Direct(direct.answer(request)),
            // The router is always ready (axum's `Router::poll_ready`).
            _ => Answer::Routed(self.app.router.clone().call(request)),
        };
        TrackedFuture {
            inner,
            activity: Some(self.activity.clone()),
        }
    }
}

/// The router's answer, or the proxy route's called directly.
// Not boxed: the router's future lives in the connection's own state, and
// a box would cost an allocation per routed request.
#[allow(clippy::large_enum_variant)]
enum Answer {
    Routed(axum::routing::future::RouteFuture<Infallible>),
    Direct(DirectAnswer),
}

struct TrackedFuture {
    inner: Answer,
    activity: Option<Arc<Activity>>,
}

impl Future for TrackedFuture {
    type Output = Result<Response<Tracked>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = match &mut self.inner {
            Answer::Routed(future) => match Pin::new(future).poll(cx) {
                Poll::Ready(Ok(response)) => Poll::Ready(response),
                Poll::Ready(Err(never)) => match never {},
                Poll::Pending => Poll::Pending,
            },
            Answer::Direct(future) => future.as_mut().poll(cx),
        };
        let Poll::Ready(response) = polled else {
            return Poll::Pending;
        };
        let done = Done(self.activity.take());
        Poll::Ready(Ok(response.map(|body| Tracked { body, _done: done })))
    }
}

impl Drop for TrackedFuture {
    fn drop(&mut self) {
        // Dropped before it answered (the client went away): the request is over.
        if let Some(activity) = self.activity.take() {
            activity.idle();
        }
    }
}

/// Marks the request over when dropped.
struct Done(Option<Arc<Activity>>);

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(activity) = &self.0 {
            activity.idle();
        }
    }
}

/// A response body that marks its request over when hyper is done with it.
struct Tracked {
    body: Body,
    _done: Done,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
