//! Steps 1 to 9 of DESIGN.md for one call, in order; each step's rules live in the file it calls.
//!
//! Here a call enters (its route, its turn's answer or flight, the box its
//! steps run in) and is finished (step 9); `attempts` runs steps 2 to 8.

mod attempts;
mod enter;
mod finish;

use std::future::Future;
use std::pin::Pin;

use self::enter::{begin, read, send};
use crate::call::{Call, Completion};
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::pipeline::job::Keep;

/// Runs one call of `turn` to its outcome: never fails, never outlives the deadline.
///
/// What needs no await (a call refused before it starts, a read its turn
/// has answered) completes here; the rest runs in a box of its own, so
/// that a caller's future holds a pointer, not the steps' kilobyte.
pub(crate) async fn complete<E: Executor>(
    engine: &Engine<E>,
    turn: &TurnState,
    call: Call<E::Payload>,
    keep: Keep,
) -> Completion {
    let (begun, key) = match begin(engine, turn, &call, keep) {
        Ok(begun) => begun,
        Err(completion) => return completion,
    };
    match key {
        Some(key) => boxed(|| read(engine, turn, begun, key)).await,
        None => boxed(|| send(engine, turn, begun)).await,
    }
}

/// The future `make` makes, in a box allocated first. `Box::pin(future)`
/// would make it on the stack and copy it into the box, every byte of the
/// steps' kilobyte on every call (measured in docs/PERFORMANCE.md, "The
/// guards").
#[inline(always)]
fn boxed<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

pub(crate) use enter::steps_size;
