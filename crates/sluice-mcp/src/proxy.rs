//! The proxy: routes every message between the agent and the MCP server, and `tools/call` through the gate.

use std::sync::Arc;

use sluice::Gate;
use sluice_config::McpConfig;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::McpError;
use crate::executor::{DirectCall, ServerExecutor};
use crate::limits;
use crate::live::{LiveGate, Reloader};
use crate::outbox::Outbox;
use crate::progress::ProgressObserver;
use crate::router::{Router, Setup};
use crate::signals::Detector;
use sluice_http::scrub::Scrubber;
use sluice_http::trace::{TraceObserver, Tracer};

/// An MCP proxy over any pair of byte streams. [`crate::run`] wires it to
/// a child process and this process's standard input and output.
///
/// Every message passes through unchanged, in the order it arrived, except:
///
/// - a `tools/call` request from the agent goes through the gate: once
///   admitted, it is sent to the server under a proxy-owned id, and the
///   agent gets the answer under its own id; a call sluice defers gets a
///   tool result with `isError: true` and the outcome as `structuredContent`;
/// - a `notifications/cancelled` from the agent for a gated call: a call
///   still waiting in sluice is dropped (nothing reaches the server, and
///   the agent gets no response, as the spec asks); one already sent is
///   cancelled at the server under the proxy's id;
/// - a line from the agent that is not JSON gets a parse error (`id: null`),
///   and JSON that is neither an object nor a non-empty array gets an
///   invalid-request error; a line from the server that is not a message
///   is logged and dropped;
/// - a batch from the agent is split into its elements, each handled as
///   above, and the responses go back as one array.
///
/// `tools/list` responses are read on their way to the agent to learn which
/// tools are read-only (see [`McpConfig::tools`] for overrides).
#[derive(Debug)]
pub struct Proxy {
    config: McpConfig,
    seed: Option<u64>,
    /// Reads every session's answers for rate signals (`[mcp] rate_limit_patterns`).
    detector: Arc<Detector>,
    /// Masks the secrets in everything returned to the client (`scrub.rs`).
    scrubber: Option<Arc<Scrubber>>,
    /// Swaps in new limits while it serves (`live.rs`).
    reloader: Reloader,
    /// Where calls' spans go; `None` when traces are off.
    tracer: Option<Arc<Tracer>>,
}

impl Proxy {
    /// A proxy with this configuration.
    pub fn new(config: McpConfig) -> Self {
        let detector = Arc::new(Detector::new(config.rate_limit_patterns.clone()));
        Proxy {
            config,
            seed: None,
            detector,
            scrubber: None,
            reloader: Reloader::default(),
            tracer: None,
        }
    }

    /// Masks each of `secrets` as `***` in every byte this proxy returns to
    /// its client: each message on stdio, and `--listen`'s response bodies
    /// (JSON and event streams, a remote server's GET stream passed
    /// through) and headers. `sluice mcp` passes
    /// [`McpConfig::scrubbed_secrets`]. With none given (or all empty),
    /// nothing is scrubbed and nothing costs anything.
    pub fn scrub_secrets<'a>(mut self, secrets: impl IntoIterator<Item = &'a str>) -> Self {
        self.scrubber = Scrubber::new(secrets);
        self
    }

    /// [`Proxy::scrub_secrets`] with the secrets of
    /// [`McpConfig::scrubbed_secrets`] found in this process's environment
    /// (what [`crate::run`] and `sluice mcp` do).
    pub fn scrub_env_secrets(self) -> Self {
        let secrets = self
            .config
            .scrubbed_secrets(&|name| std::env::var(name).ok());
        self.scrub_secrets(secrets.iter().map(sluice_config::Secret::expose))
    }

    /// How long the server has to exit once asked (`[mcp] shutdown_grace`).
    pub(crate) fn shutdown_grace(&self) -> std::time::Duration {
        self.config.shutdown_grace
    }

    /// What reloads this proxy's limits once it serves (SIGHUP for `sluice mcp`).
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// Sends each `tools/call`'s span to `tracer`, a child of the
    /// request's `params._meta.traceparent` when it has one.
    pub fn trace(mut self, tracer: Option<Arc<Tracer>>) -> Self {
        self.tracer = tracer;
        self
    }

    /// Seeds the gate's jitter and the proxy's ids (tests, reproducible runs).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Proxies between the agent (`agent_in`, `agent_out`) and the server
    /// (`server_in`, `server_out`) until the server's output ends.
    ///
    /// When the agent's input ends, calls still in sluice are dropped,
    /// calls sent are cancelled, and the server's input is closed; what the
    /// server writes is still passed on until its output ends. When the
    /// server's output ends, calls in progress are dropped, everything
    /// queued for the agent is written, and this returns.
    pub async fn serve<AI, AO, SI, SO>(
        self,
        agent_in: AI,
        agent_out: AO,
        server_in: SI,
        server_out: SO,
    ) -> Result<(), McpError>
    where
        AI: AsyncRead + Unpin + Send + 'static,
        AO: AsyncWrite + Unpin + Send + 'static,
        SI: AsyncWrite + Unpin + Send + 'static,
        SO: AsyncRead + Unpin + Send + 'static,
    {
        let gate = self.gate().await?;
        let cap = limits::queue_cap(self.config.max_message_size);
        let (to_agent, agent_writer) =
            Outbox::spawn_scrubbed("agent", agent_out, cap, self.scrubber.clone());
        let (to_server, server_writer) = Outbox::spawn("server", server_in, cap);
        let session = Session::new(&gate, &self, to_agent.clone(), to_server.clone(), None);

        let max = self.config.max_message_size;
        let agent_reader = {
            let session = session.clone();
            tokio::spawn(async move {
                limits::read_lines("agent", agent_in, max, |line| match line {
                    limits::Line::Whole(line) => session.agent_says(line),
                    limits::Line::TooLong(refused) => session.agent_too_long(&refused),
                })
                .await;
                session.agent_closed();
            })
        };
        limits::read_lines("server", server_out, max, |line| match line {
            limits::Line::Whole(line) => session.server_says(line),
            limits::Line::TooLong(refused) => session.server_too_long(&refused),
        })
        .await;
        agent_reader.abort();
        session.server_closed();
        drop(session);
        drop(to_server);
        to_agent.close();
        drop(to_agent);
        let _ = agent_writer.await;
        server_writer.abort();
        Ok(())
    }
}

impl Proxy {
    /// The gate every session of this proxy spends, as reloads replace it.
    pub(crate) async fn gate(&self) -> Result<Arc<LiveGate<ServerExecutor>>, McpError> {
        // Progress notifications for calls that wait (see `progress.rs`).
        let mut builder = Gate::builder(self.config.gate.clone(), ServerExecutor);
        let progress: Arc<dyn sluice::Observer> = Arc::new(ProgressObserver);
        if let Some(observer) = TraceObserver::wrap(self.tracer.as_ref(), Some(progress)) {
            builder = builder.observer(observer);
        }
        if let Some(seed) = self.seed {
            builder = builder.seed(seed);
        }
        if let Some(budget) = crate::shared::budget(&self.config).await? {
            builder = builder.shared(budget);
        }
        let live = LiveGate::new(builder.build()?, self.config.gate.clone());
        self.reloader.serving(&live, &self.config);
        Ok(live)
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &McpConfig {
        &self.config
    }

    /// What masks the secrets returned to the client, when any is configured.
    pub(crate) fn scrubber(&self) -> Option<&Arc<Scrubber>> {
        self.scrubber.as_ref()
    }

    /// A fresh nonce for a session's proxy-owned ids (from the seed when set).
    pub(crate) fn nonce(&self) -> u64 {
        self.seed.unwrap_or_else(rand::random)
    }
}

/// One client's session with one server, whatever carries their messages:
/// the agent's messages go in through [`Session::agent_says`], the
/// server's through [`Session::server_says`]; what either is sent leaves
/// through the outboxes given to [`Session::new`]. Sessions of one proxy
/// share its gate; each has its own turn, catalog and ids.
#[derive(Clone)]
pub(crate) struct Session(Arc<Router>);

/// A [`Session`] that does not keep it alive (held by its own transport).
#[derive(Clone, Default)]
pub(crate) struct WeakSession(std::sync::Weak<Router>);

impl Session {
    /// A session; `direct`, when given, sends each admitted `tools/call`
    /// itself instead of through `to_server`.
    pub(crate) fn new(
        gate: &Arc<LiveGate<ServerExecutor>>,
        proxy: &Proxy,
        to_agent: Outbox,
        to_server: Outbox,
        direct: Option<Arc<dyn DirectCall>>,
    ) -> Session {
        let setup = Setup {
            config: &proxy.config,
            nonce: proxy.nonce(),
            detector: proxy.detector.clone(),
            scrubber: proxy.scrubber.clone(),
            tracer: proxy.tracer.clone(),
        };
        Session(Arc::new(Router::new(
            gate, setup, to_agent, to_server, direct,
        )))
    }

    /// One message (or batch) from the agent.
    pub(crate) fn agent_says(&self, line: &[u8]) {
        self.0.on_agent_line(line);
    }

    /// One message (or batch) from the server.
    pub(crate) fn server_says(&self, line: &[u8]) {
        self.0.on_server_line(line);
    }

    /// A message from the agent over `max_message_size`.
    pub(crate) fn agent_too_long(&self, refused: &limits::Refused) {
        self.0.on_agent_too_long(refused);
    }

    /// A message from the server over `max_message_size`.
    pub(crate) fn server_too_long(&self, refused: &limits::Refused) {
        self.0.on_server_too_long(refused);
    }

    /// The agent has gone: calls waiting are dropped, calls sent cancelled,
    /// and the server's outbox closed.
    pub(crate) fn agent_closed(&self) {
        self.0.agent_closed();
    }

    /// The server has gone: each call in progress gets one error outcome.
    pub(crate) fn server_closed(&self) {
        self.0.server_closed();
    }

    /// A reference that does not keep the session alive.
    pub(crate) fn downgrade(&self) -> WeakSession {
        WeakSession(Arc::downgrade(&self.0))
    }
}

impl WeakSession {
    /// [`Session::server_says`], if the session still exists.
    pub(crate) fn server_says(&self, line: &[u8]) {
        if let Some(router) = self.0.upgrade() {
            router.on_server_line(line);
        }
    }
}
