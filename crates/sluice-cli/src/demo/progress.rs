//! The live progress line of a run, on stderr.

use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::time::Duration;

use sluice_fake::{FakeApi, Record};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::scenario::is_agent;
use crate::harness::Strategy;

/// The live progress line, on stderr: rewritten in place on a terminal,
/// a plain line per second otherwise; silent under `--json`.
pub(crate) struct Progress {
    enabled: bool,
    terminal: bool,
}

/// A run's progress printer; [`Ticker::finish`] prints its last line.
pub(crate) struct Ticker {
    task: Option<JoinHandle<()>>,
    line: Arc<dyn Fn() -> String + Send + Sync>,
    terminal: bool,
}

impl Progress {
    pub(crate) fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn start(
        &self,
        harness: Strategy,
        api: FakeApi,
        start: Instant,
        duration: Duration,
    ) -> Ticker {
        let line = move || {
            let records = api.requests();
            let (agent, victim): (Vec<&Record>, Vec<&Record>) =
                records.iter().partition(|r| is_agent(r));
            format!(
                "{:<7} {:>5.1}s/{}s  agent requests {:>4}  429s {:>4}  sync job failures {:>3}",
                harness.name(),
                start.elapsed().as_secs_f64(),
                duration.as_secs(),
                agent.len(),
                agent.iter().filter(|r| r.status == 429).count(),
                victim.iter().filter(|r| r.status != 200).count(),
            )
        };
        let line: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(line);
        let task = self.enabled.then(|| {
            let line = line.clone();
            let terminal = self.terminal;
            tokio::spawn(async move {
                let every = if terminal {
                    Duration::from_millis(200)
                } else {
                    Duration::from_secs(1)
                };
                let mut ticks = tokio::time::interval(every);
                loop {
                    ticks.tick().await;
                    let text = line();
                    let mut err = std::io::stderr().lock();
                    let _ = if terminal {
                        write!(err, "\r{text}")
                    } else {
                        writeln!(err, "{text}")
                    };
                    let _ = err.flush();
                }
            })
        });
        Ticker {
            task,
            line,
            terminal: self.terminal,
        }
    }
}

impl Ticker {
    pub(crate) fn finish(self) {
        if let Some(task) = self.task {
            task.abort();
            let text = (self.line)();
            let mut err = std::io::stderr().lock();
            let _ = if self.terminal {
                writeln!(err, "\r{text}  done")
            } else {
                writeln!(err, "{text}  done")
            };
        }
    }
}
