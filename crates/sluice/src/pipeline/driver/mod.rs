//! Steps 1 to 9 of DESIGN.md for one call, in order; each step's rules live in the file it calls.
//!
//! Here a call enters (its route, its turn's answer or flight, the box its
//! steps run in) and is finished (step 9); `attempts` runs steps 2 to 8.

mod attempts;
mod enter;
mod finish;

use std::future::Future;

use futures_util::future::Either;

use self::enter::{begin, read, send};
use crate::call::{Call, Completion};
use crate::engine::{Engine, TurnState};
use crate::executor::Executor;
use crate::pipeline::job::Keep;

/// Runs one call of `turn` to its outcome: never fails, never outlives the deadline.
///
/// What needs no await (a call refused before it starts, a read its turn
/// has answered) completes here; the rest runs in a box of its own. Every
/// caller moves the future it awaits, a copy of every byte: the steps'
/// future is a kilobyte or more (with the executor's own inside it), this
/// one holds the call and a pointer.
///
/// Not an `async fn`, which would keep a second copy of the call.
#[allow(clippy::manual_async_fn)] // its doc says why
pub(crate) fn complete<'c, E: Executor>(
    engine: &'c Engine<E>,
    turn: &'c TurnState,
    call: Call<E::Payload>,
    keep: Keep,
) -> impl Future<Output = Completion> + use<'c, E> {
    async move {
        // Each box is allocated before its future is made, so the future
        // is made in place: `Box::pin` of a future copies it from the
        // stack, every byte. A read's box holds its flight; any other
        // call's holds only its steps, which keeps it in the allocator's
        // small sizes. Made in a block, so that nothing it binds is kept
        // across the await.
        let steps = {
            let (begun, key) = match begin(engine, turn, &call, keep) {
                Ok(begun) => begun,
                Err(completion) => return completion,
            };
            match key {
                Some(key) => {
                    let slot = Box::new_uninit();
                    Either::Left(Box::into_pin(Box::write(
                        slot,
                        read(engine, turn, begun, key),
                    )))
                }
                None => {
                    let slot = Box::new_uninit();
                    Either::Right(Box::into_pin(Box::write(slot, send(engine, turn, begun))))
                }
            }
        };
        steps.await
    }
}

pub(crate) use enter::steps_size;
