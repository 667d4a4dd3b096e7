//! The MCP server as a real child process: its exit status, its stdin closing, its stdout passing through.
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

fn python(script: &str) -> Command {
    Command {
        program: "python3".into(),
        args: vec!["-c".into(), script.into()],
    }
}

fn proxy_with(toml: &str) -> Proxy {
    Proxy::new(McpConfig::from_toml(toml, None).unwrap())
}

/// Runs `server` behind a proxy; the test plays the agent.
struct Running {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    writes: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    task: tokio::task::JoinHandle<Result<std::process::ExitStatus, McpError>>,
}

impl Running {
    fn start(proxy: Proxy, server: Command) -> Self {
        let (agent, side) = tokio::io::duplex(1 << 16);
        let (agent_in, agent_out) = tokio::io::split(side);
        let task = tokio::spawn(async move { run_with(proxy, &server, agent_in, agent_out).await });
        let (reads, writes) = tokio::io::split(agent);
        Running {
            lines: BufReader::new(reads).lines(),
            writes,
            task,
        }
    }

    async fn send(&mut self, line: &str) {
        self.writes
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn next(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    }
}

fn tools_call(id: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"t","arguments":{{"n":{id}}}}}}}"#
    )
}

#[tokio::test]
async fn a_server_that_exits_mid_call_gives_each_pending_call_one_error() {
    // Reads two calls, then dies without answering.
    let server = python("import sys\nsys.stdin.readline()\nsys.stdin.readline()\nsys.exit(1)");
    let mut agent = Running::start(
        proxy_with("[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 2"),
        server,
    );
    agent.send(&tools_call(1)).await;
    agent.send(&tools_call(2)).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let answer = agent.next().await;
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        assert_eq!(answer["result"]["structuredContent"]["status"], "error");
        ids.push(answer["id"].as_u64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, [1, 2]);
    let status = agent.task.await.unwrap().unwrap();
    assert_eq!(exit_code(status), 1);
}

#[tokio::test]
async fn a_server_writing_garbage_is_survived_and_each_call_gets_one_outcome() {
    // Garbage around a real answer to the first call; only garbage for the second.
    let server = python(concat!(
        "import sys, json\n",
        "first = json.loads(sys.stdin.readline())\n",
        "sys.stdout.write('not json at all\\n\\x00\\xff{{{\\n[1,2\\n')\n",
        "sys.stdout.write(json.dumps({'jsonrpc':'2.0','id':first['id'],'result':{'content':[{'type':'text','text':'ok'}]}}) + '\\n')\n",
        "sys.stdout.flush()\n",
        "sys.stdin.readline()\n",
        "sys.stdout.write('garbage again\\n')\n",
        "sys.stdout.flush()\n",
        "sys.stdin.read()\n",
    ));
    let mut agent = Running::start(
        proxy_with("[defaults]\ndeadline = \"2s\"\n[credentials.api]\nrate = \"100/1s\""),
        server,
    );
    agent.send(&tools_call(1)).await;
    let answer = agent.next().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["content"][0]["text"], "ok");
    agent.send(&tools_call(2)).await;
    let answer = agent.next().await;
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["structuredContent"]["status"], "timed_out");
    agent.writes.shutdown().await.unwrap();
    let status = agent.task.await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn a_server_that_stops_reading_gets_bounded_backpressure_and_errors_for_the_rest() {
    // Never reads its stdin; exits when told to by its input closing... never,
    // so the proxy kills it after the grace period.
    let server = python("import time\ntime.sleep(120)");
    let mut agent = Running::start(
        proxy_with(
            "[credentials.api]\nrate = \"100000/1s\"\n[mcp]\nmax_message_size = \"16KiB\"\nshutdown_grace = \"200ms\"",
        ),
        server,
    );
    let padding = "p".repeat(8_000);
    let total = 400u32;
    let reader = tokio::spawn(async move {
        let mut refused = 0u32;
        while let Ok(Ok(Some(line))) =
            tokio::time::timeout(Duration::from_secs(10), agent.lines.next_line()).await
        {
            let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(answer["error"]["code"], -32603, "{answer}");
            refused += 1;
        }
        refused
    });
    for id in 0..total {
        let ping = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"pad":"{padding}"}}}}"#
        );
        agent
            .writes
            .write_all(format!("{ping}\n").as_bytes())
            .await
            .unwrap();
    }
    agent.writes.shutdown().await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), agent.task)
        .await
        .expect("the proxy ends")
        .unwrap()
        .unwrap();
    assert_eq!(exit_code(status), 128 + 9);
    let refused = reader.await.unwrap();
    // At most the pipe (64 KiB) and the queue cap (1 MiB) were held for the
    // server: everything past them was refused at once, not queued.
    let held = (64 * 1024 + (1 << 20)) / 8_000 + 2;
    assert!(
        refused >= total - held as u32,
        "refused {refused} of {total}"
    );
    assert!(refused < total, "some were queued: {refused}");
}
