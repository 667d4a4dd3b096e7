//! The engine's state: what a gate holds for every call, each credential, and each turn.
//!
//! [`Gate`](crate::Gate) and [`Turn`](crate::Turn) are thin handles over an
//! [`Engine`]; the call path that runs on it is [`crate::pipeline`].

mod credential;
mod reload;
mod routing;
mod state;
mod turn_state;

pub(crate) use credential::Credential;
pub(crate) use routing::Routed;
pub(crate) use state::Engine;
pub(crate) use turn_state::TurnState;
