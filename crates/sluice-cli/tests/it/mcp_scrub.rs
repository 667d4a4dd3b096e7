//! `sluice mcp` as a process in front of a Python MCP server that echoes
//! the keys it was given (issue 19): the credential's key, which the server
//! inherits from sluice's environment, and the `--listen` token. Whatever
//! the server puts them in (a tool result, a JSON-RPC error, a line that is
//! not JSON), the client, on stdio or over HTTP, sees `***`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const KEY: &str = "ghp-Scrub0Test0Key0123456789";
const TOKEN: &str = "listen-Tok-987654321";

const SERVER: &str = r#"
import json, os, sys
keys = " ".join(os.environ.get(v, "") for v in ("GITHUB_TOKEN", "LISTEN_TOKEN")).strip()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    name = m.get("params", {}).get("name")
    if m["method"] == "initialize":
        out = {"result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}}
    elif name == "fail":
        out = {"error": {"code": -32000, "message": "invalid api key " + keys, "data": {"key": keys}}}
    else:
        if name == "junk":
            print("not json: " + keys, flush=True)
        out = {"result": {"content": [{"type": "text", "text": "the key is " + keys}], "isError": name == "denied"}}
    out.update({"jsonrpc": "2.0", "id": m["id"]})
    print(json.dumps(out), flush=True)
"#;

/// A directory with the server and a configuration, removed on drop.
struct Files(PathBuf);

impl Files {
    fn new(name: &str, extra: &str) -> Files {
        let dir =
            std::env::temp_dir().join(format!("sluice-mcp-scrub-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("server.py"), SERVER).unwrap();
        std::fs::write(
            dir.join("sluice.toml"),
            format!(
                "{extra}[credentials.github]\nsecret_env = \"GITHUB_TOKEN\"\nrate = \"50/1s\"\n"
            ),
        )
        .unwrap();
        Files(dir)
    }

    fn sluice(&self, listen: bool) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args(["mcp", "--config"])
            .arg(self.0.join("sluice.toml"))
            .env_remove("LISTEN_TOKEN");
        if listen {
            command
                .args(["--listen", "127.0.0.1:0"])
                .env("LISTEN_TOKEN", TOKEN);
        }
        command
            .args(["--", "python3"])
            .arg(self.0.join("server.py"))
            .env("GITHUB_TOKEN", KEY)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn clean(what: &str, text: &str) {
    for secret in [KEY, TOKEN] {
        assert!(!text.contains(secret), "{what} holds a secret: {text}");
    }
}

fn call(id: u64, tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    )
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

#[test]
fn a_stdio_client_sees_stars_where_the_server_echoed_its_key() {
    let files = Files::new("stdio", "");
    let mut child = files.sluice(false);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{INIT}").unwrap();
    for (id, tool) in [(1, "echo"), (2, "fail"), (3, "denied"), (4, "junk")] {
        writeln!(stdin, "{}", call(id, tool)).unwrap();
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answers = Vec::new();
    while answers.len() < 5 {
        let line = lines.next().expect("five answers").unwrap();
        clean("a line on stdout", &line);
        let message: serde_json::Value = serde_json::from_str(&line).expect("still JSON");
        answers.push(message);
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    clean("sluice's stderr", &stderr);
    // The server's junk line was logged, masked.
    assert!(stderr.contains("not json: ***"), "{stderr}");
    let by_id = |id: u64| answers.iter().find(|m| m["id"] == id).unwrap();
    for id in [1, 3, 4] {
        assert_eq!(
            by_id(id)["result"]["content"][0]["text"],
            "the key is ***",
            "{}",
            by_id(id)
        );
    }
    let error = by_id(2).to_string();
    assert!(error.contains("invalid api key ***"), "{error}");
}

/// One HTTP exchange on `addr`; the whole answer, head and body.
fn exchange(addr: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn a_listen_client_sees_stars_in_json_and_event_streams() {
    let files = Files::new("listen", "[server]\nauth_token_env = \"LISTEN_TOKEN\"\n");
    let mut child = files.sluice(true);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    let json = ("accept", "application/json");
    let answer = exchange(&addr, &[json], INIT);
    clean("the initialize answer", &answer);
    let session = answer
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("mcp-session-id: ")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("{answer}"));
    let session = ("mcp-session-id", session.as_str());

    // A JSON body: masked whole, still JSON.
    let answer = exchange(&addr, &[json, session], &call(1, "echo"));
    clean("a JSON answer", &answer);
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    let parsed: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("{answer}"));
    assert_eq!(parsed["result"]["content"][0]["text"], "the key is *** ***");

    // An event stream, an error in it.
    let events = ("accept", "application/json, text/event-stream");
    let answer = exchange(&addr, &[events, session], &call(2, "fail"));
    clean("an event stream", &answer);
    assert!(answer.contains("text/event-stream"), "{answer}");
    assert!(answer.contains("invalid api key *** ***"), "{answer}");

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let output = child.wait_with_output().unwrap();
    clean("sluice's stderr", &String::from_utf8_lossy(&output.stderr));
}
