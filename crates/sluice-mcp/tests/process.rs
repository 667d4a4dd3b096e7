//! The MCP server as a real child process: its exit status, its stdin closing, its stdout passing through.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::time::Duration;

use sluice_mcp::{Command, McpConfig, McpError, Proxy, exit_code, run_with};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn proxy() -> Proxy {
    Proxy::new(McpConfig::from_toml("[credentials.api]\nrate = \"10/1s\"", None).unwrap())
}

fn sh(script: &str) -> Command {
    Command {
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
    }
}

#[tokio::test]
async fn the_servers_exit_status_ends_the_proxy() {
    // The agent keeps its end open: the server's exit alone ends the proxy.
    let (_agent, side) = tokio::io::duplex(1024);
    let (agent_in, agent_out) = tokio::io::split(side);
    let status = tokio::time::timeout(
        Duration::from_secs(30),
        run_with(proxy(), &sh("exit 3"), agent_in, agent_out),
    )
    .await
    .expect("the proxy ends when the server exits")
    .unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(exit_code(status), 3);

    let (_agent, side) = tokio::io::duplex(1024);
    let (agent_in, agent_out) = tokio::io::split(side);
    let status = run_with(proxy(), &sh("kill -9 $$"), agent_in, agent_out)
        .await
        .unwrap();
    assert_eq!(exit_code(status), 128 + 9);
}

#[tokio::test]
async fn messages_pass_through_a_real_process_and_closing_stdin_lets_it_exit() {
    // `cat` echoes what the agent sends: each request comes back unchanged,
    // and the end of the agent's input is the end of cat's.
    let (agent, side) = tokio::io::duplex(1 << 16);
    let (agent_in, agent_out) = tokio::io::split(side);
    let command = sh("cat; exit 7");
    let running =
        tokio::spawn(async move { run_with(proxy(), &command, agent_in, agent_out).await });
    let (reads, mut writes) = tokio::io::split(agent);
    let mut lines = BufReader::new(reads).lines();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":[1, 2]}}"#;
    writes
        .write_all(format!("{ping}\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(lines.next_line().await.unwrap().unwrap(), ping);
    writes.shutdown().await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the server exits once its input closes")
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    // Everything the server wrote was passed on before the proxy ended.
    assert_eq!(lines.next_line().await.unwrap(), None);
}

#[tokio::test]
async fn a_server_that_cannot_start_is_an_error_naming_it() {
    let (_agent, side) = tokio::io::duplex(1024);
    let (agent_in, agent_out) = tokio::io::split(side);
    let command = Command {
        program: "/nonexistent/mcp-server".into(),
        args: Vec::new(),
    };
    let error = run_with(proxy(), &command, agent_in, agent_out)
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Spawn { .. }), "{error:?}");
    assert!(
        error.to_string().contains("/nonexistent/mcp-server"),
        "{error}"
    );
}
