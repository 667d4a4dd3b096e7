//! Time to the first body byte of a streamed answer, directly and through a
//! proxy: an upstream that sends its head at once and then an event every
//! 100 ms, and a client timed by the OS clock that stops at the first byte
//! after the head. A proxy that buffered would add the whole stream's time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The pause before each event, the first included.
const GAP: Duration = Duration::from_millis(100);
/// Events per answer.
const EVENTS: usize = 3;

/// Serves the event stream on 127.0.0.1:0 until the process ends; its URL.
pub(crate) async fn spawn_stream() -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                loop {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let start = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                    if stream.write_all(start).await.is_err() {
                        return;
                    }
                    for n in 0..EVENTS {
                        tokio::time::sleep(GAP).await;
                        let event = format!("data: {n}\n\n");
                        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                        if stream.write_all(chunk.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    if stream.write_all(b"0\r\n\r\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(url)
}

/// The median time from sending a `GET` of `url` to the first body byte,
/// over `samples` requests each on a new connection, in microseconds.
pub(crate) fn measure(url: &str, samples: usize) -> anyhow::Result<u64> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("{url:?} is not an http:// URL"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr: SocketAddr = host
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{host:?} resolves to nothing"))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n\r\n");
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let sent = Instant::now();
        stream.write_all(request.as_bytes())?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let first = loop {
            let n = stream.read(&mut buf)?;
            anyhow::ensure!(n > 0, "{url}: closed before the body");
            seen.extend_from_slice(&buf[..n]);
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n")
                && seen.len() > end + 4
            {
                break sent.elapsed();
            }
        };
        times.push(u64::try_from(first.as_micros()).unwrap_or(u64::MAX));
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}
