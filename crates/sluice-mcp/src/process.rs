//! The MCP server as a child process: spawned with piped stdin and stdout and inherited stderr, proxied, and waited for.

use std::ffi::OsString;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::error::McpError;
use crate::proxy::Proxy;
use crate::stdin::ThreadStdin;

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
/// it through `proxy`, and returns its exit status once it has exited. Its
/// standard error is this process's.
///
/// `proxy` is `sluice mcp`'s: [`Proxy::scrub_env_secrets`] masks the
/// secrets of [`sluice_config::McpConfig::scrubbed_secrets`] set in this process's
/// environment in everything written to standard output.
///
/// SIGTERM and SIGINT to this process are passed on to the server, which
/// then has `[mcp] shutdown_grace` to exit before it is killed; either way
/// it is reaped, and its status returned (issue 19).
pub async fn run(proxy: Proxy, command: &Command) -> Result<ExitStatus, McpError> {
    let stdin = ThreadStdin::spawn().map_err(|source| McpError::Io {
        context: "cannot read standard input",
        source,
    })?;
    let signals = shutdown_signals()?;
    supervise(proxy, command, stdin, tokio::io::stdout(), signals).await
}

/// A signal this process was asked to stop with, to pass on to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Terminate,
    Interrupt,
}

/// The next SIGTERM or SIGINT.
#[cfg(unix)]
fn shutdown_signals() -> Result<impl Future<Output = Stop> + Send, McpError> {
    use tokio::signal::unix::{SignalKind, signal};
    let error = |source| McpError::Io {
        context: "cannot listen for SIGTERM and SIGINT",
        source,
    };
    let mut terminate = signal(SignalKind::terminate()).map_err(error)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(error)?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => Stop::Terminate,
            _ = interrupt.recv() => Stop::Interrupt,
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signals() -> Result<impl Future<Output = Stop> + Send, McpError> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        Stop::Interrupt
    })
}

/// Sends `stop` to the server; false if it could not be sent (then it is killed).
#[cfg(unix)]
fn pass_on(child: &tokio::process::Child, stop: Stop) -> bool {
    use rustix::process::{Pid, Signal, kill_process};
    let signal = match stop {
        Stop::Terminate => Signal::TERM,
        Stop::Interrupt => Signal::INT,
    };
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    pid.is_some_and(|pid| kill_process(pid, signal).is_ok())
}

#[cfg(not(unix))]
fn pass_on(_child: &tokio::process::Child, _stop: Stop) -> bool {
    false
}

/// [`run`] with the agent's side given as streams (tests, embedding), and
/// no signal handling (the embedding program owns its signals).
///
/// The server's exit ends the proxy (what it wrote before is passed on
/// first). The agent's input ending closes the server's input; a server
/// that has not exited `[mcp] shutdown_grace` (5 s) later is killed.
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
    supervise(proxy, command, agent_in, agent_out, std::future::pending()).await
}

async fn supervise<AI, AO>(
    proxy: Proxy,
    command: &Command,
    agent_in: AI,
    agent_out: AO,
    stop: impl Future<Output = Stop>,
) -> Result<ExitStatus, McpError>
where
    AI: AsyncRead + Unpin + Send + 'static,
    AO: AsyncWrite + Unpin + Send + 'static,
{
    let grace = proxy.shutdown_grace();
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
    // Set once the client has closed its input: when the server is killed.
    let mut kill_at = None;
    tokio::pin!(stop);
    let status = loop {
        tokio::select! {
            stop = &mut stop => {
                tracing::info!(?stop, grace_ms = grace.as_millis() as u64, "asked to stop; passing the signal on to the MCP server");
                if !pass_on(&child, stop) {
                    let _ = child.start_kill();
                }
                let status = match tokio::time::timeout(grace, child.wait()).await {
                    Ok(status) => status.map_err(wait_error)?,
                    Err(_) => {
                        tracing::warn!(grace_ms = grace.as_millis() as u64, "the MCP server did not exit within its grace period; killing it");
                        let _ = child.start_kill();
                        child.wait().await.map_err(wait_error)?
                    }
                };
                if !served {
                    let _ = tokio::time::timeout(DRAIN_GRACE, &mut serving).await;
                }
                break status;
            }
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
            _ = &mut agent_gone, if kill_at.is_none() => {
                // The client closed its input; the proxy closed the server's.
                // A signal during the grace period is still passed on.
                kill_at = Some(tokio::time::Instant::now() + grace);
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                tracing::warn!(grace_ms = grace.as_millis() as u64, "the MCP server did not exit after its input closed; killing it");
                let _ = child.start_kill();
                break child.wait().await.map_err(wait_error)?;
            }
        }
    };
    tracing::info!(%status, "MCP server exited");
    Ok(status)
}

/// Stops a server whose input the proxy has closed, as the MCP spec's
/// stdio shutdown has it: it has `grace` to exit, then gets SIGTERM and
/// `grace` again, then is killed; either way it is reaped. Used for the
/// child of a `--listen` session that ended (DELETE, idle, evicted).
pub(crate) async fn stop_child(child: &mut tokio::process::Child, grace: Duration) {
    if tokio::time::timeout(grace, child.wait()).await.is_ok() {
        return;
    }
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "the MCP server did not exit after its input closed; sending SIGTERM"
    );
    if pass_on(child, Stop::Terminate) && tokio::time::timeout(grace, child.wait()).await.is_ok() {
        return;
    }
    tracing::warn!(
        grace_ms = grace.as_millis() as u64,
        "the MCP server did not exit on SIGTERM; killing it"
    );
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Sleeps until `at`, or forever when there is no `at`.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
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
