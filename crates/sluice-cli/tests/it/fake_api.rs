//! `sluice fake-api` as a process: the first line, serving, and flag errors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// Kills the server even when an assertion fails first.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn prints_its_address_first_and_serves() {
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["fake-api", "--listen", "127.0.0.1:0", "--limit", "1/1m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let stdout = server.0.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim_end()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();

    let first = get(&addr, "/a?b=1");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.ends_with(r#"{"path":"/a?b=1","seq":1}"#), "{first}");
    let second = get(&addr, "/a");
    assert!(second.starts_with("HTTP/1.1 429"), "{second}");
    // Sent within a second of the first: the slot frees in 59 to 60 s.
    let waited = ["retry-after: 59\r\n", "retry-after: 60\r\n"];
    assert!(waited.iter().any(|line| second.contains(line)), "{second}");
    let stats = get(&addr, "/_fake/stats");
    assert!(stats.contains(r#""total":2,"throttled":1"#), "{stats}");
}

#[test]
fn a_bad_flag_value_exits_2_naming_the_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["fake-api", "--limit", "0/1s"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("'--limit <RATE>'"), "{stderr}");
    assert!(output.stdout.is_empty());
}
