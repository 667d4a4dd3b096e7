//! The MCP server as a child process: spawned with piped stdin and stdout and inherited stderr, proxied, and waited for.

use std::ffi::OsString;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::config::McpConfig;
use crate::error::McpError;
use crate::proxy::Proxy;
use crate::stdin::ThreadStdin;

/// How long the server may take to exit once its input is closed; the MCP
/// spec leaves "a reasonable time" to the client, after which it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// How long to keep reading what an exited server wrote, in case a process
/// it started holds its output open.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// The command that starts the MCP server.
#[derive(Debug, Clone)]
pub struct Command {
    /// The program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// Starts the server, proxies this process's standard input and output to
/// it, and returns its exit status once it has exited. Its standard error
/// is this process's.
pub async fn run(config: McpConfig, command: &Command) -> Result<ExitStatus, McpError> {
    let stdin = ThreadStdin::spawn().map_err(|source| McpError::Io {
        context: "cannot read standard input",
        source,
    })?;
    run_with(Proxy::new(config), command, stdin, tokio::io::stdout()).await
}

/// [`run`] with the agent's side given as streams (tests, embedding).
///
/// The server's exit ends the proxy (what it wrote before is passed on
/// first). The agent's input ending closes the server's input; a server
/// that has not exited 5 seconds later is killed.
pub async fn run_with<AI, AO>(
    proxy: Proxy,
    command: &Command,
    agent_in: AI,
    agent_out: AO,
) -> Result<ExitStatus, McpError>
where
    AI: AsyncRead + Unpin + Send + 'static,
    AO: AsyncWrite + Unpin + Send + 'static,
{
    let program = command.program.to_string_lossy().into_owned();
    let mut child = tokio::process::Command::new(&command.program)
        .args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| McpError::Spawn {
            program: program.clone(),
            source,
        })?;
    let (Some(server_in), Some(server_out)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(McpError::Spawn {
            program,
            source: std::io::Error::other("its standard input or output is not a pipe"),
        });
    };
    tracing::info!(%program, pid = child.id(), "MCP server started");
    let (closed, mut agent_gone) = oneshot::channel();
    let agent_in = Watched {
        inner: agent_in,
        eof: Some(closed),
    };
    let serving = proxy.serve(agent_in, agent_out, server_in, server_out);
    tokio::pin!(serving);

    let wait_error = |source| McpError::Io {
        context: "cannot wait for the MCP server",
        source,
    };
    let mut served = false;
    let status = loop {
        tokio::select! {
            result = &mut serving, if !served => {
                // The server closed its output: it is exiting.
                result?;
                served = true;
            }
            status = child.wait() => {
                let status = status.map_err(wait_error)?;
                if !served && tokio::time::timeout(DRAIN_GRACE, &mut serving).await.is_err() {
                    tracing::debug!("the MCP server exited but its output stayed open; not waiting for it");
                }
                break status;
            }
            _ = &mut agent_gone => {
                // The client closed its input; the proxy closed the server's.
                tokio::select! {
                    status = child.wait() => {
                        let status = status.map_err(wait_error)?;
                        if !served {
                            let _ = tokio::time::timeout(DRAIN_GRACE, &mut serving).await;
                        }
                        break status;
                    }
                    () = tokio::time::sleep(EXIT_GRACE) => {
                        tracing::warn!(grace_s = EXIT_GRACE.as_secs(), "the MCP server did not exit after its input closed; killing it");
                        let _ = child.start_kill();
                        break child.wait().await.map_err(wait_error)?;
                    }
                }
            }
        }
    };
    tracing::info!(%status, "MCP server exited");
    Ok(status)
}

/// The exit code that reports `status` as this process's own: the server's
/// code, or 128 + the signal that ended it (the shells' convention).
pub fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(1);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return u8::try_from((128 + signal) & 0xff).unwrap_or(1);
        }
    }
    1
}

/// A reader that says when it reached the end.
struct Watched<R> {
    inner: R,
    eof: Option<oneshot::Sender<()>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = out.filled().len();
        let result = ready!(Pin::new(&mut self.inner).poll_read(cx, out));
        let ended = result.is_err() || (out.filled().len() == before && out.remaining() > 0);
        if ended && let Some(eof) = self.eof.take() {
            let _ = eof.send(());
        }
        Poll::Ready(result)
    }
}
