//! The gate's configuration: defaults, credentials and tools, validated once when the gate is built.

mod budgets;
mod error;
mod limits;
mod model;
mod validate;

pub use budgets::{Cost, GroupConfig, Priority, PriorityError, Settle, Spend, UnitConfig};
pub use error::ConfigError;
pub(crate) use limits::{GroupLimits, Limits, UnitLimits, littles_law};
pub use model::{CredentialConfig, Defaults, GateConfig, Reserve, ToolConfig};
