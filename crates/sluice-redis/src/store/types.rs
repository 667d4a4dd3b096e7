//! What the scripts take and answer: each call's arguments, a granted
//! slot's token (how to give it back), and a reservation's outcome.

use sluice::limiter::Micros;
use sluice::shared::{Hold, SharedLimit};

/// Which clock a script reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The Redis server's `TIME`: the only clock production uses, so every
    /// process shares it whatever its own clock says.
    Server,
    /// An explicit time in microseconds (tests replaying a timeline).
    At(Micros),
}

impl Clock {
    pub(super) fn arg(self) -> String {
        match self {
            Clock::Server => String::new(),
            Clock::At(now) => now.to_string(),
        }
    }
}

/// One call's (or one lease's) reservation, as the reserve script takes it.
#[derive(Debug, Clone)]
pub struct ReserveArgs<'a> {
    /// The credential.
    pub credential: &'a str,
    /// Every scope governing the call; the first is the limited one.
    pub scopes: &'a [&'a str],
    /// The first scope's limit.
    pub limit: Option<SharedLimit>,
    /// No start before this, from now (µs).
    pub not_before: Micros,
    /// The first start must come within this, from now (µs).
    pub max_wait: Micros,
    /// Slots wanted (a lease when more than one).
    pub slots: u32,
    /// Extra slots must start within this, from now (µs).
    pub horizon: Micros,
    /// Slots that may start at once (the callers present). While the
    /// window has room, the k-th of the others starts no sooner than k
    /// times `pace` after now; once the limit binds, they
    /// must start at least `lead` after now.
    pub immediate: u32,
    /// See `immediate` (µs).
    pub lead: Micros,
    /// How far apart this process expects its next callers (µs); see
    /// `immediate`.
    pub pace: Micros,
    /// A paced slot due sooner than this (µs) is placed at once: its
    /// caller's timer could not wake sooner than its next tick.
    pub tick: Micros,
    /// The calling process, for the heartbeat (`None`: not counted).
    pub process: Option<&'a str>,
    /// How long a process counts as present after a reservation (µs).
    pub heartbeat: Micros,
    /// A prefix unique to this call, naming its window entries.
    pub member_prefix: &'a str,
}

/// Starts one process made on its own, as the record script takes them.
#[derive(Debug, Clone)]
pub struct RecordArgs<'a> {
    /// The credential.
    pub credential: &'a str,
    /// The scope whose limit the starts were decided on.
    pub scope: &'a str,
    /// That scope's (whole, shared) limit.
    pub limit: SharedLimit,
    /// The starts, earliest first: each in signed µs from the script's
    /// now, and a name unique to it (its window entry's member, so that a
    /// start sent again after a timeout is logged once).
    pub starts: &'a [(i64, String)],
}

/// What a script saw of the credential: processes present, active holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Processes that reserved within the heartbeat window (0: not asked).
    pub processes: u32,
    /// Blocked scopes (key part) and how long from now.
    pub blocks: Vec<(String, Micros)>,
    /// Spent quotas (key part) and how long from now.
    pub quotas: Vec<(String, Micros)>,
    /// The script's now (µs on its clock), when it said: every wait above
    /// and in the answer counts from it.
    pub now: Option<Micros>,
}

/// How to give one slot back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// Nothing was charged (no limit).
    Nothing,
    /// The window entry's member.
    Window(String),
    /// The GCRA arrival time before and after the charge.
    Gcra {
        /// Before.
        before: Micros,
        /// After.
        after: Micros,
    },
}

/// The Redis side's handle on one granted slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotToken {
    /// The charged scope's key part.
    pub scope: String,
    /// The scope's generation when charged (a block voids older slots).
    pub generation: u64,
    /// How to give it back.
    pub undo: Undo,
}

impl SlotToken {
    /// The token as text, for [`sluice::shared::Grant`].
    pub fn encode(&self) -> String {
        match &self.undo {
            Undo::Nothing => "r|-".to_owned(),
            Undo::Window(member) => format!("r|{}|{}|w|{member}", self.scope, self.generation),
            Undo::Gcra { before, after } => {
                format!("r|{}|{}|g|{before}:{after}", self.scope, self.generation)
            }
        }
    }

    /// Reads a token written by [`SlotToken::encode`].
    pub fn decode(text: &str) -> Option<SlotToken> {
        let rest = text.strip_prefix("r|")?;
        if rest == "-" {
            return Some(SlotToken {
                scope: String::new(),
                generation: 0,
                undo: Undo::Nothing,
            });
        }
        let mut fields = rest.splitn(4, '|');
        let scope = fields.next()?.to_owned();
        let generation = fields.next()?.parse().ok()?;
        let undo = match (fields.next()?, fields.next()?) {
            ("w", member) => Undo::Window(member.to_owned()),
            ("g", pair) => {
                let (before, after) = pair.split_once(':')?;
                Undo::Gcra {
                    before: before.parse().ok()?,
                    after: after.parse().ok()?,
                }
            }
            _ => return None,
        };
        Some(SlotToken {
            scope,
            generation,
            undo,
        })
    }
}

/// One slot a reservation granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotGrant {
    /// Its start, from the script's now (µs).
    pub wait: Micros,
    /// How to give it back.
    pub token: SlotToken,
}

/// The reserve script's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// At least one slot, earliest first.
    Granted {
        /// What the script saw.
        view: View,
        /// The slots.
        slots: Vec<SlotGrant>,
        /// The first scope's limit has no start free before this, from
        /// now (µs), blocks aside; `None` without a limit.
        next: Option<Micros>,
    },
    /// No slot within the acceptable wait; nothing charged.
    Denied {
        /// What the script saw.
        view: View,
        /// The earliest start, from now (µs).
        wait: Micros,
        /// The index (in the request's scopes) of the scope holding it back.
        scope: usize,
        /// Why.
        hold: Hold,
    },
}

/// A reservation whose answer never came, to settle by its id with
/// [`Store::void`](super::Store::void): its void mark, and every log entry it may have made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Void {
    /// The credential.
    pub credential: String,
    /// The reservation's id (its member prefix).
    pub id: String,
    /// The sorted sets it may have charged (full key names).
    pub logs: Vec<String>,
    /// The members it would have logged in them.
    pub members: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for undo in [
            Undo::Nothing,
            Undo::Window("ab12:7:3".into()),
            Undo::Gcra {
                before: 1,
                after: 1_700_000_000_000_000,
            },
        ] {
            let token = SlotToken {
                scope: if undo == Undo::Nothing {
                    String::new()
                } else {
                    "api_key".into()
                },
                generation: if undo == Undo::Nothing { 0 } else { 4 },
                undo,
            };
            assert_eq!(SlotToken::decode(&token.encode()), Some(token));
        }
        assert_eq!(SlotToken::decode("f|3"), None);
        assert_eq!(SlotToken::decode("r|s|x|w|m"), None);
    }
}
