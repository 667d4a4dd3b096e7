//! An HTTP/1.1 request written by hand on a connection of its own, for the
//! tests that set or leave out headers a client library would fix (`Host`,
//! `Origin`, the session) and read the head as sent.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An MCP `initialize` request.
pub const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

/// What came back: the status (0 when there was none), the head in lower
/// case, and the body as sent.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// `POST /mcp` to `addr` with `headers` (`Host` only when among them) and a
/// JSON `body`, on a connection the server closes; waits at most `wait` for
/// the whole answer.
pub async fn post_mcp(addr: &str, headers: &[(&str, &str)], body: &str, wait: Duration) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = String::from("POST /mcp HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "connection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(wait, stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: rest.to_owned(),
    }
}
