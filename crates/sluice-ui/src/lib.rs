//! sluice's live page, for any listener to serve: the page itself, the
//! JSON it renders, and the stream that keeps it live.
//!
//! # Mental model
//!
//! - [`PAGE`] is one self-contained HTML document (styles and script
//!   inline; no external script, font or CDN; under 100 KB), served at
//!   `GET /ui` with [`PAGE_HEADERS`], whose content security policy lets
//!   it load nothing but its own origin's endpoints.
//! - A [`Snapshot`] is what the page renders: each credential with its
//!   mode (enforcing or shadow) and limits, and each of its live scopes as
//!   [`sluice::scope::ScopeStatus`] (the same objects `/v1/status` lists
//!   under `credentials[].scopes`), built from a gate's configuration and
//!   [`sluice::Gate::status`].
//! - [`events`] is `GET /v1/events`: Server-Sent Events, one `status`
//!   event with a fresh snapshot every [`EVENT_PERIOD`], until a stop
//!   future resolves (so that a graceful shutdown does not wait on an
//!   open page); serve it with [`EVENTS_HEADERS`].
//! - Behind the listener's bearer token like every other endpoint. A
//!   browser cannot send a header when it opens a URL, so `GET /ui` may
//!   also present the token as `?token=` ([`query_token`] reads it); the
//!   page drops it from the address bar at once and sends it as
//!   `Authorization: Bearer` on its own requests. Data endpoints take the
//!   header only.
//!
//! The page needs `GET /v1/events` (or, when that answers 404, polls
//! `GET /v1/status` every second) relative to its own URL.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use sluice::{CredentialConfig, Gate, GateConfig, executor_fn};
//! use sluice_ui::{Mode, PAGE, Snapshot};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let config = GateConfig::default()
//!     .credential("support", CredentialConfig::with_rate("10/1s".parse().unwrap()).enforce(false));
//! let executor = executor_fn(|_request| async { Ok(http::Response::new(Bytes::new())) });
//! let gate = Gate::builder(config.clone(), executor).build().unwrap();
//!
//! let snapshot = Snapshot::new(&config, gate.status());
//! assert_eq!(snapshot.credentials[0].name, "support");
//! assert_eq!(snapshot.credentials[0].mode, Mode::Shadow);
//! assert!(sluice_ui::encode(&snapshot).starts_with(b"event: status\ndata: {"));
//! assert!(PAGE.len() < 100_000);
//! # });
//! ```

mod events;
mod page;
mod snapshot;
mod token;

pub use events::{EVENT_PERIOD, EVENTS_HEADERS, encode, events};
pub use page::{PAGE, PAGE_HEADERS};
pub use snapshot::{CredentialView, Mode, Snapshot};
pub use token::{TOKEN_PARAM, query_token};
