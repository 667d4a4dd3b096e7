//! An upstream that answers with a chunked body written piece by piece,
//! recording when each piece left and when each request arrived: the
//! witness for what a streaming proxy delivers, and when.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// What the upstream sends for each request.
#[derive(Debug, Clone)]
pub struct Script {
    pub status: u16,
    pub content_type: &'static str,
    /// Extra header lines, `name: value`.
    pub headers: Vec<String>,
    /// The body's pieces, each written as one chunk.
    pub pieces: Vec<Vec<u8>>,
    /// The pause after each piece.
    pub gap: Duration,
    /// Close the connection before the last chunk (a body cut short).
    pub cut: bool,
}

impl Script {
    pub fn events(pieces: &[&str], gap: Duration) -> Script {
        Script {
            status: 200,
            content_type: "text/event-stream",
            headers: Vec::new(),
            pieces: pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
            gap,
            cut: false,
        }
    }
}

/// The upstream; `sent[r][i]` is when piece `i` of request `r` was written.
pub struct Chunked {
    pub url: String,
    pub arrived: Arc<Mutex<Vec<Instant>>>,
    pub sent: Arc<Mutex<Vec<Vec<Instant>>>>,
}

impl Chunked {
    pub async fn spawn(script: Script) -> Chunked {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let arrived: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let sent: Arc<Mutex<Vec<Vec<Instant>>>> = Arc::default();
        let (arrived_log, sent_log) = (arrived.clone(), sent.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (script, arrived, sent) =
                    (script.clone(), arrived_log.clone(), sent_log.clone());
                tokio::spawn(async move {
                    loop {
                        // Read one request head (these requests have no body).
                        let mut head = Vec::new();
                        let mut byte = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n") {
                            match stream.read(&mut byte).await {
                                Ok(1) => head.push(byte[0]),
                                _ => return,
                            }
                        }
                        let index = {
                            let mut arrived = arrived.lock().unwrap();
                            arrived.push(Instant::now());
                            sent.lock().unwrap().push(Vec::new());
                            arrived.len() - 1
                        };
                        let mut out = format!(
                            "HTTP/1.1 {} X\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\n",
                            script.status, script.content_type
                        );
                        for header in &script.headers {
                            out.push_str(header);
                            out.push_str("\r\n");
                        }
                        out.push_str("\r\n");
                        if stream.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                        for piece in &script.pieces {
                            let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                            chunk.extend_from_slice(piece);
                            chunk.extend_from_slice(b"\r\n");
                            if stream.write_all(&chunk).await.is_err() {
                                return;
                            }
                            sent.lock().unwrap()[index].push(Instant::now());
                            tokio::time::sleep(script.gap).await;
                        }
                        if script.cut {
                            return;
                        }
                        if stream.write_all(b"0\r\n\r\n").await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Chunked { url, arrived, sent }
    }

    pub fn sent(&self) -> Vec<Vec<Instant>> {
        self.sent.lock().unwrap().clone()
    }

    pub fn arrived(&self) -> Vec<Instant> {
        self.arrived.lock().unwrap().clone()
    }
}
