//! A fixed-rate, open-loop HTTP/1.1 load for `sluice bench overhead`.
//!
//! Each of a few threads owns one keep-alive connection and the schedule
//! slots `k, k + C, k + 2C, …` of the run. A thread sleeps to its slot's
//! scheduled instant with the operating system's high-resolution timer
//! (an async runtime's timer wheel ticks in whole milliseconds, which alone
//! would add up to a millisecond to every figure), sends, reads the whole
//! answer, and records the latency from the *scheduled* instant, so a slow
//! answer that delays the next slot shows up in that slot's latency instead
//! of being omitted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What a run measured.
pub(crate) struct Measured {
    pub(crate) sent: usize,
    pub(crate) failed: usize,
    /// Latencies of the answered requests, microseconds, sorted.
    pub(crate) latencies_us: Vec<u64>,
}

/// `GET` of `url` (`http://host:port/path`) at `rate` per second for
/// `duration`, over `connections` connections.
pub(crate) fn fixed_rate(
    url: &str,
    rate: u32,
    duration: Duration,
    connections: usize,
) -> anyhow::Result<Measured> {
    fixed_rate_target(Target::parse(url)?, rate, duration, connections)
}

/// [`fixed_rate`] with `POST`s: `headers` on each, and the body `body`
/// with every `{n}` replaced by the request's number (unique in the run).
pub(crate) fn fixed_rate_post(
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
    rate: u32,
    duration: Duration,
    connections: usize,
) -> anyhow::Result<Measured> {
    let mut target = Target::parse(url)?;
    let mut head = String::from_utf8_lossy(&target.request).replacen("GET ", "POST ", 1);
    head.truncate(head.len() - 2);
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    target.request = head.into_bytes();
    target.body = Some(body.to_owned());
    fixed_rate_target(target, rate, duration, connections)
}

fn fixed_rate_target(
    target: Target,
    rate: u32,
    duration: Duration,
    connections: usize,
) -> anyhow::Result<Measured> {
    let every = Duration::from_secs(1) / rate.max(1);
    let slots = u32::try_from(duration.as_nanos() / every.as_nanos().max(1)).unwrap_or(u32::MAX);
    let connections = u32::try_from(connections.max(1)).unwrap_or(1);
    let start = Instant::now() + Duration::from_millis(20);
    let threads: Vec<_> = (0..connections)
        .map(|k| {
            let target = target.clone();
            std::thread::spawn(move || {
                let mut conn = None;
                let mut out = (0usize, 0usize, Vec::new());
                for n in (k..slots).step_by(connections as usize) {
                    let scheduled = start + every * n;
                    if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    out.0 += 1;
                    match target.get(&mut conn, n) {
                        Ok(()) => out.2.push(
                            u64::try_from(scheduled.elapsed().as_micros()).unwrap_or(u64::MAX),
                        ),
                        Err(_) => {
                            conn = None;
                            out.1 += 1;
                        }
                    }
                }
                out
            })
        })
        .collect();
    let mut measured = Measured {
        sent: 0,
        failed: 0,
        latencies_us: Vec::new(),
    };
    for thread in threads {
        let (sent, failed, latencies) = thread
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))?;
        measured.sent += sent;
        measured.failed += failed;
        measured.latencies_us.extend(latencies);
    }
    measured.latencies_us.sort_unstable();
    Ok(measured)
}

impl Measured {
    /// The `p`-th percentile, microseconds (0 when nothing was answered).
    pub(crate) fn percentile(&self, p: usize) -> u64 {
        let n = self.latencies_us.len();
        self.latencies_us
            .get((n * p / 100).min(n.saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }
}

#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    /// The head; for a `GET`, the whole request.
    request: Vec<u8>,
    /// A `POST`'s body, `{n}` standing for the request's number.
    body: Option<String>,
}

impl Target {
    fn parse(url: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("load target {url:?} is not an http:// URL"))?;
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let addr = host
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| anyhow::anyhow!("load target host {host:?} resolves to nothing"))?;
        let path = if path.is_empty() { "/" } else { path };
        let request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n").into_bytes();
        Ok(Self {
            addr,
            request,
            body: None,
        })
    }

    /// One request on the connection (opened when there is none); `Ok` when
    /// a 2xx answer arrived whole.
    fn get(&self, conn: &mut Option<BufReader<TcpStream>>, n: u32) -> std::io::Result<()> {
        if conn.is_none() {
            let stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            *conn = Some(BufReader::new(stream));
        }
        let reader = conn
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no connection"))?;
        match &self.body {
            None => reader.get_mut().write_all(&self.request)?,
            Some(body) => {
                let body = body.replace("{n}", &n.to_string());
                let mut request = self.request.clone();
                request.extend_from_slice(
                    format!("content-length: {}\r\n\r\n{body}", body.len()).as_bytes(),
                );
                reader.get_mut().write_all(&request)?;
            }
        }
        read_response(reader)
    }
}

fn read_response(reader: &mut BufReader<TcpStream>) -> std::io::Result<()> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let ok = line
        .split(' ')
        .nth(1)
        .is_some_and(|status| status.starts_with('2'));
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("connection closed in the headers"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<u64>().map_err(|_| bad("content-length"))?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            }
        }
    }
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = u64::from_str_radix(line.trim_end(), 16).map_err(|_| bad("chunk size"))?;
            std::io::copy(&mut reader.by_ref().take(size + 2), &mut std::io::sink())?;
            if size == 0 {
                break;
            }
        }
    } else if let Some(length) = length {
        let read = std::io::copy(&mut reader.by_ref().take(length), &mut std::io::sink())?;
        if read < length {
            return Err(bad("connection closed in the body"));
        }
    }
    if ok {
        Ok(())
    } else {
        Err(bad("not a 2xx answer"))
    }
}
