//! A misbehaving upstream: a raw-TCP HTTP/1.1 server whose every answer is
//! scripted per request — hangs, resets, bodies cut short, trickles,
//! garbage and huge headers, wrong lengths — to test what sits in front.
//!
//! It speaks just enough HTTP to read a request head (and skip a body with
//! a `Content-Length`), then does what the script says for that request.
//! Well-behaved answers keep the connection alive; faults end it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::Tls;

/// Largest request head read; past it the connection is dropped.
const MAX_HEAD: usize = 64 << 10;

/// What the upstream does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `200` with a small JSON body naming the request's path.
    Ok,
    /// Reads the request and never answers; the connection stays open
    /// until the client gives up on it.
    Hang,
    /// Reads the request, then resets the connection (RST, no answer).
    Reset,
    /// A chunked `200` that stops in the middle of a chunk and closes.
    CloseMidBody,
    /// A `200` whose `Content-Length` is longer than the body sent; then closes.
    LongContentLength,
    /// A `200` whose `Content-Length` is shorter than the bytes sent after
    /// the head (the rest lands where the next response should start).
    ShortContentLength,
    /// A complete `200` with a JSON body, written one byte per `per_byte`.
    Trickle {
        /// The pause before each byte.
        per_byte: Duration,
    },
    /// Any status with these raw header lines (any bytes, unchecked) and body.
    Raw {
        /// The status code.
        status: u16,
        /// Header lines as `name: value` bytes, written as given.
        headers: Vec<Vec<u8>>,
        /// The body (a correct `Content-Length` is added).
        body: Vec<u8>,
    },
    /// Bytes that are not HTTP at all, then close.
    NotHttp,
    /// A complete `200` as [`Fault::Ok`] (nothing in it says the
    /// connection ends), then the connection closed: what a server's
    /// keep-alive timeout does to a connection the client keeps idle.
    OkThenClose,
}

impl Fault {
    /// `status` with these header lines and a small JSON body.
    pub fn status(status: u16, headers: &[&str]) -> Fault {
        Fault::Raw {
            status,
            headers: headers.iter().map(|h| h.as_bytes().to_vec()).collect(),
            body: format!("{{\"status\":{status}}}").into_bytes(),
        }
    }

    /// A `200` with hostile rate-limit headers: a 64 KiB `retry-after`,
    /// 40-digit numbers, binary (obs-text) bytes, negative and NaN-like values.
    pub fn garbage_headers(status: u16) -> Fault {
        let forty = "1234567890123456789012345678901234567890";
        let mut huge = b"retry-after: ".to_vec();
        huge.extend(std::iter::repeat_n(b'9', 64 << 10));
        let mut binary = b"x-ratelimit-reset: ".to_vec();
        binary.extend((0x80..=0xffu8).chain(*b"\t7"));
        let headers = vec![
            huge,
            binary,
            format!("x-ratelimit-limit: {forty}").into_bytes(),
            format!("x-ratelimit-remaining: {forty}").into_bytes(),
            format!("ratelimit-reset: -{forty}").into_bytes(),
            format!("retry-after-ms: {forty}").into_bytes(),
            b"ratelimit: \"x\";r=NaN;t=inf, \"\";r=-1;t=1e999".to_vec(),
            b"ratelimit-policy: \"daily\";q=;w=, ,,;;".to_vec(),
            b"x-ratelimit-resource: \xff\xfe".to_vec(),
            b"x-shopify-shop-api-call-limit: 99999999999999999999/0".to_vec(),
            b"date: Tue, 31 Feb 99999 99:99:99 GMT".to_vec(),
        ];
        Fault::Raw {
            status,
            headers,
            body: b"{\"garbage\":true}".to_vec(),
        }
    }

    /// A short stable name, for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Ok => "ok",
            Fault::Hang => "hang",
            Fault::Reset => "reset",
            Fault::CloseMidBody => "close_mid_body",
            Fault::LongContentLength => "long_content_length",
            Fault::ShortContentLength => "short_content_length",
            Fault::Trickle { .. } => "trickle",
            Fault::Raw { .. } => "raw",
            Fault::NotHttp => "not_http",
            Fault::OkThenClose => "ok_then_close",
        }
    }
}

/// A request as the upstream read it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When its head was complete, from the upstream's start.
    pub at: Duration,
    /// The method.
    pub method: String,
    /// The request target as sent (path and query).
    pub target: String,
    /// Header lines, lowercased names, values as lossy text.
    pub headers: Vec<(String, String)>,
    /// The connection it came on (0, 1, ... in accept order).
    pub connection: u64,
}

impl Seen {
    /// The value of header `name` (lowercase), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

type Script = dyn Fn(&Seen) -> Fault + Send + Sync;

/// What the accept loop and every connection see.
struct State {
    script: Box<Script>,
    seen: Mutex<Vec<Seen>>,
    /// Keep at most this many records (a soak sends millions).
    keep: usize,
    requests: AtomicU64,
    connections: AtomicU64,
    open: AtomicUsize,
    started: Instant,
}

/// The misbehaving upstream, on 127.0.0.1 (a free port); stops when dropped.
pub struct Upstream {
    addr: SocketAddr,
    /// Serves `https://` (the certificate of a [`Tls`]).
    tls: bool,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Answers every request with `fault`.
    pub async fn spawn(fault: Fault) -> Upstream {
        Upstream::scripted(move |_| fault.clone()).await
    }

    /// Answers each request with what `script` returns for it.
    pub async fn scripted(script: impl Fn(&Seen) -> Fault + Send + Sync + 'static) -> Upstream {
        Upstream::with_records(script, 100_000).await
    }

    /// As [`Upstream::spawn`], over TLS with `tls`'s server certificate
    /// (for `127.0.0.1` and `localhost`). Its connections count TCP
    /// accepts, a refused handshake included.
    pub async fn spawn_tls(fault: Fault, tls: &Tls) -> Upstream {
        Upstream::start(move |_| fault.clone(), 100_000, Some(tls.acceptor())).await
    }

    /// As [`Upstream::scripted`], keeping at most `keep` request records.
    pub async fn with_records(
        script: impl Fn(&Seen) -> Fault + Send + Sync + 'static,
        keep: usize,
    ) -> Upstream {
        Upstream::start(script, keep, None).await
    }

    async fn start(
        script: impl Fn(&Seen) -> Fault + Send + Sync + 'static,
        keep: usize,
        tls: Option<TlsAcceptor>,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            script: Box::new(script),
            seen: Mutex::new(Vec::new()),
            keep,
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            started: Instant::now(),
        });
        let secure = tls.is_some();
        let task = tokio::spawn(accept(listener, state.clone(), tls));
        Upstream {
            addr,
            tls: secure,
            state,
            task,
        }
    }

    /// `http://127.0.0.1:PORT` (`https://` over TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The requests read so far (at most the first `keep`).
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().clone()
    }

    /// How many requests were read.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// How many connections were accepted.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Connections open now (the client has not closed them).
    pub fn open_connections(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, state: Arc<State>, tls: Option<TlsAcceptor>) {
    // The connections die with the accept task (dropping a JoinSet aborts them).
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let id = state.connections.fetch_add(1, Ordering::SeqCst);
                let state = state.clone();
                state.open.fetch_add(1, Ordering::SeqCst);
                let tls = tls.clone();
                connections.spawn(async move {
                    let _open = OpenGuard(state.clone());
                    match tls {
                        None => serve(stream, id, &state).await,
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                serve(stream, id, &state).await;
                            }
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

struct OpenGuard(Arc<State>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection the upstream serves: plain TCP, or TLS over it.
trait Connection: AsyncRead + AsyncWrite + Unpin {
    /// The TCP stream underneath (to reset it).
    fn tcp(&self) -> &TcpStream;
}

impl Connection for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Connection for TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// One connection: requests one after another until a fault ends it or the client leaves.
async fn serve(mut stream: impl Connection, id: u64, state: &State) {
    let mut buffer = Vec::new();
    loop {
        let Some(seen) = read_request(&mut stream, &mut buffer, id, state).await else {
            return;
        };
        let fault = (state.script)(&seen);
        state.requests.fetch_add(1, Ordering::SeqCst);
        {
            let mut records = state.seen.lock();
            if records.len() < state.keep {
                records.push(seen.clone());
            }
        }
        if !answer(&mut stream, &seen, &fault).await {
            return;
        }
    }
}

/// Reads one request head (and skips its body); `None` when the client is gone.
async fn read_request(
    stream: &mut impl Connection,
    buffer: &mut Vec<u8>,
    id: u64,
    state: &State,
) -> Option<Seen> {
    let end = loop {
        if let Some(at) = find(buffer, b"\r\n\r\n") {
            break at;
        }
        if buffer.len() > MAX_HEAD {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    buffer.drain(..end + 4);
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let target = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < length {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    buffer.drain(..length);
    Some(Seen {
        at: state.started.elapsed(),
        method,
        target,
        headers,
        connection: id,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn json_body(seen: &Seen) -> Vec<u8> {
    serde_json::json!({"path": seen.target, "method": seen.method})
        .to_string()
        .into_bytes()
}

fn head(status: u16, lines: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} Status\r\n").into_bytes();
    for line in lines {
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Acts out `fault`; true when the connection may serve another request.
async fn answer(stream: &mut impl Connection, seen: &Seen, fault: &Fault) -> bool {
    let body = json_body(seen);
    let length = |n: usize| format!("content-length: {n}").into_bytes();
    let json = b"content-type: application/json".to_vec();
    match fault {
        Fault::Ok => {
            let mut out = head(200, &[json, length(body.len())]);
            out.extend_from_slice(&body);
            stream.write_all(&out).await.is_ok()
        }
        Fault::OkThenClose => {
            let mut out = head(200, &[json, length(body.len())]);
            out.extend_from_slice(&body);
            let _ = stream.write_all(&out).await;
            let _ = stream.shutdown().await;
            false
        }
        Fault::Hang => {
            // Hold the connection, reading (and dropping) whatever comes,
            // until the client closes it.
            let mut sink = [0u8; 1024];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            false
        }
        Fault::Reset => {
            let _ = stream.tcp().set_zero_linger();
            false
        }
        Fault::CloseMidBody => {
            let mut out = head(200, &[json, b"transfer-encoding: chunked".to_vec()]);
            out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            out.extend_from_slice(&body[..body.len() / 2]);
            let _ = stream.write_all(&out).await;
            let _ = stream.shutdown().await;
            false
        }
        Fault::LongContentLength => {
            let mut out = head(200, &[json, length(body.len() + 1_000)]);
            out.extend_from_slice(&body);
            let _ = stream.write_all(&out).await;
            let _ = stream.shutdown().await;
            false
        }
        Fault::ShortContentLength => {
            let mut out = head(200, &[json, length(body.len() / 2)]);
            out.extend_from_slice(&body);
            stream.write_all(&out).await.is_ok()
        }
        Fault::Trickle { per_byte } => {
            let mut out = head(200, &[json, length(body.len())]);
            out.extend_from_slice(&body);
            for byte in out {
                tokio::time::sleep(*per_byte).await;
                if stream.write_all(&[byte]).await.is_err() {
                    return false;
                }
            }
            true
        }
        Fault::Raw {
            status,
            headers,
            body,
        } => {
            let mut lines = headers.clone();
            lines.push(length(body.len()));
            let mut out = head(*status, &lines);
            out.extend_from_slice(body);
            stream.write_all(&out).await.is_ok()
        }
        Fault::NotHttp => {
            let _ = stream
                .write_all(b"\x00\x01\x02 SSH-2.0-nope \xff\xfe\r\n\r\n")
                .await;
            let _ = stream.shutdown().await;
            false
        }
    }
}
