//! A client-side fixed-window limiter: what a "static" client does.

use std::time::Duration;

use parking_lot::Mutex;
use sluice::Rate;
use tokio::time::Instant;

/// At most N starts per fixed window W, windows aligned to creation.
#[derive(Debug)]
pub(crate) struct FixedWindow {
    count: u32,
    window: Duration,
    origin: Instant,
    state: Mutex<(u64, u32)>,
}

impl FixedWindow {
    pub(crate) fn new(rate: Rate) -> Self {
        FixedWindow {
            count: rate.count().get(),
            window: rate.window(),
            origin: Instant::now(),
            state: Mutex::new((0, 0)),
        }
    }

    /// Waits for a start in the current window or a later one.
    pub(crate) async fn acquire(&self) {
        loop {
            let elapsed = self.origin.elapsed();
            let index = (elapsed.as_nanos() / self.window.as_nanos().max(1)) as u64;
            let granted = {
                let mut state = self.state.lock();
                if state.0 != index {
                    *state = (index, 0);
                }
                if state.1 < self.count {
                    state.1 += 1;
                    true
                } else {
                    false
                }
            };
            if granted {
                return;
            }
            let next = self.origin
                + self
                    .window
                    .saturating_mul(u32::try_from(index + 1).unwrap_or(u32::MAX));
            tokio::time::sleep_until(next).await;
        }
    }
}
