//! The Lua scripts, each run with the prelude they share in front
//! (`lua/prelude.lua`: integer formatting and the step's clock).

use redis::Script;

const PRELUDE: &str = include_str!("lua/prelude.lua");

/// A script of `body` (a file of `lua/`) with the prelude in front.
pub(crate) fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}{body}"))
}
