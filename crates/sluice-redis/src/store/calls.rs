//! [`Store`]: one `EVALSHA` per call, arguments in, replies parsed.

use std::num::NonZeroU32;

use redis::{Script, Value};
use sluice::limiter::{Micros, micros};
use sluice::shared::{Hold, SharedLimit};

use super::reply::{micros_of, parse_reserved};
use super::types::{Clock, RecordArgs, ReserveArgs, Reserved, SlotToken, Undo, Void};
use crate::keys::{CredentialKeys, part};
use crate::spend::{Budget, record_invocation};
use crate::{Error, lua};

/// How long keys outlive the state they hold, so that a key never expires
/// while a decision still depends on it (clock skew between replicas,
/// slow replies).
const TTL_SLACK: Micros = 5_000_000;

/// The limiter's scripts, bound to a key prefix.
#[derive(Debug, Clone)]
pub struct Store {
    prefix: String,
    channel: String,
    publish: bool,
    reserve: Script,
    block: Script,
    refund: Script,
    record: Script,
    void: Script,
    quiet: Script,
    secrets: Vec<String>,
    timeout: std::time::Duration,
}

impl Store {
    /// The scripts, for keys under `prefix` (`[A-Za-z0-9._-]`, see
    /// [`crate::RedisConfig::key_prefix`]). Blocks are published on
    /// `{prefix}:events`.
    pub fn new(prefix: &str) -> Self {
        Store {
            prefix: prefix.to_owned(),
            channel: format!("{prefix}:events"),
            publish: true,
            reserve: lua::script(include_str!("../lua/reserve.lua")),
            block: lua::script(include_str!("../lua/block.lua")),
            refund: lua::script(include_str!("../lua/refund.lua")),
            record: lua::script(include_str!("../lua/record.lua")),
            void: lua::script(include_str!("../lua/void.lua")),
            quiet: lua::script(include_str!("../lua/quiet.lua")),
            secrets: Vec::new(),
            timeout: std::time::Duration::ZERO,
        }
    }

    pub(crate) fn with_secrets(mut self, secrets: &[&str], timeout: std::time::Duration) -> Self {
        self.secrets = secrets.iter().map(|s| (*s).to_owned()).collect();
        self.timeout = timeout;
        self
    }

    /// The channel blocks are published on.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The keys of `credential`.
    pub fn keys(&self, credential: &str) -> CredentialKeys {
        CredentialKeys::new(&self.prefix, credential)
    }

    fn error(&self, error: &redis::RedisError) -> Error {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        Error::from_redis(error, &secrets, self.timeout)
    }

    /// Runs the reserve script once.
    pub async fn reserve<C>(
        &self,
        conn: &mut C,
        args: &ReserveArgs<'_>,
        clock: Clock,
    ) -> Result<Reserved, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let Some(first) = args.scopes.first() else {
            return Err(Error::Reply(
                "a reservation needs at least one scope".into(),
            ));
        };
        let keys = self.keys(args.credential);
        let first = part(first);
        let (algorithm, a, b) = limit_args(args.limit);
        let mut invocation = self.reserve.prepare_invoke();
        invocation
            .key(keys.blocks())
            .key(keys.quota())
            .key(keys.meta())
            .key(keys.window(&first))
            .key(keys.gcra(&first))
            .key(keys.processes())
            .key(keys.void(args.member_prefix))
            .arg(clock.arg())
            .arg(args.not_before)
            .arg(args.max_wait)
            .arg(args.slots.max(1))
            .arg(args.horizon)
            .arg(algorithm)
            .arg(a)
            .arg(b)
            .arg(args.member_prefix)
            .arg(args.process.unwrap_or(""))
            .arg(args.heartbeat)
            .arg(TTL_SLACK)
            .arg(args.immediate.max(1))
            .arg(args.lead)
            .arg(args.pace)
            .arg(args.tick)
            .arg(&first);
        for scope in &args.scopes[1..] {
            invocation.arg(part(scope));
        }
        let value: Value = invocation
            .invoke_async(conn)
            .await
            .map_err(|e| self.error(&e))?;
        parse_reserved(value, &first)
    }

    /// Runs the block script once: `scope` is held for `wait` from now.
    /// Returns how long the hold now lasts (µs; 0 when nothing changed).
    pub async fn block<C>(
        &self,
        conn: &mut C,
        credential: &str,
        scope: &str,
        wait: Micros,
        hold: Hold,
        clock: Clock,
    ) -> Result<Micros, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let keys = self.keys(credential);
        let scope = part(scope);
        let kind = match hold {
            Hold::Quota => "quota",
            Hold::Blocked | Hold::Rate | Hold::Outranked => "blocked",
        };
        let channel = if self.publish {
            self.channel.as_str()
        } else {
            ""
        };
        let value: Value = self
            .block
            .key(keys.blocks())
            .key(keys.quota())
            .key(keys.meta())
            .key(keys.window(&scope))
            .key(keys.gcra(&scope))
            .arg(clock.arg())
            .arg(&scope)
            .arg(wait)
            .arg(kind)
            .arg(TTL_SLACK)
            .arg(channel)
            .arg(part(credential))
            .invoke_async(conn)
            .await
            .map_err(|e| self.error(&e))?;
        micros_of(&value)
    }

    /// Whether `name` is in `credential`'s heartbeat set, and if so
    /// removes it. A process asks this of the name it beat under before a
    /// spell of local decisions: still there, Redis kept its state. (The
    /// look is a command of its own: a look that timed out and ran late
    /// cannot take the name away from the next one.)
    pub async fn beat_kept<C>(
        &self,
        conn: &mut C,
        credential: &str,
        name: &str,
    ) -> Result<bool, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let key = self.keys(credential).processes();
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(&key)
            .arg(name)
            .query_async(conn)
            .await
            .map_err(|e| self.error(&e))?;
        if score.is_none() {
            return Ok(false);
        }
        // No longer beaten: Redis counts the process once, not twice (if
        // this fails, the name ages out of the set within a heartbeat).
        let removed: Result<u64, _> = redis::cmd("ZREM")
            .arg(&key)
            .arg(name)
            .query_async(conn)
            .await;
        if let Err(error) = removed {
            tracing::debug!(error = %self.error(&error), "could not remove an old heartbeat name");
        }
        Ok(true)
    }

    /// How many names in `credential`'s heartbeat set have not beaten for
    /// `quiet` (by the server's clock): processes that have not reached
    /// Redis for that long (see `lua/quiet.lua`).
    pub async fn quiet_beats<C>(
        &self,
        conn: &mut C,
        credential: &str,
        quiet: std::time::Duration,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        self.quiet
            .key(self.keys(credential).processes())
            .arg("")
            .arg(micros(quiet))
            .invoke_async(conn)
            .await
            .map_err(|e| self.error(&e))
    }

    /// Gives slots back: one script call per scope and generation. Returns
    /// how many were given back (voided or forgone ones are not).
    pub async fn refund<C>(
        &self,
        conn: &mut C,
        credential: &str,
        tokens: &[SlotToken],
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let keys = self.keys(credential);
        let mut groups: Vec<RefundGroup<'_>> = Vec::new();
        for token in tokens {
            let (kind, order, item) = match &token.undo {
                Undo::Nothing => continue,
                Undo::Window(member) => ('w', 0, member.clone()),
                Undo::Gcra { before, after } => ('g', *after, format!("{before}:{after}")),
            };
            match groups.iter_mut().find(|(scope, generation, k, _)| {
                *scope == token.scope && *generation == token.generation && *k == kind
            }) {
                Some((_, _, _, items)) => items.push((order, item)),
                None => groups.push((&token.scope, token.generation, kind, vec![(order, item)])),
            }
        }
        let mut given = 0;
        for (scope, generation, kind, mut items) in groups {
            // GCRA slots go back latest first: each restores the one before.
            items.sort_by_key(|item| std::cmp::Reverse(item.0));
            let mut invocation = self.refund.prepare_invoke();
            invocation
                .key(keys.meta())
                .key(keys.window(scope))
                .key(keys.gcra(scope))
                .arg(scope)
                .arg(generation)
                .arg(kind.to_string());
            for (_, item) in &items {
                invocation.arg(item);
            }
            let value: Value = invocation
                .invoke_async(conn)
                .await
                .map_err(|e| self.error(&e))?;
            given += micros_of(&value)?;
        }
        Ok(given)
    }

    /// Adds starts a process made without Redis (its fallback's) to one
    /// scope's shared state (see [`RecordArgs`]). Nothing is refused: the
    /// starts happened. Returns how many were recorded (those a window old
    /// are not).
    pub async fn record<C>(
        &self,
        conn: &mut C,
        args: &RecordArgs<'_>,
        clock: Clock,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let keys = self.keys(args.credential);
        let scope = part(args.scope);
        let SharedLimit { rate, burst } = args.limit;
        // The one-window case of the record script: the first scope's log
        // (or bucket) at a cost of one.
        let budget = Budget {
            name: args.scope.to_owned(),
            index: 0,
            limit: Micros::from(rate.count().get()),
            window: micros(rate.window()),
            cost: 1,
            burst: burst.map(|burst| Micros::from(burst.get())),
        };
        let log = match burst {
            None => keys.window(&scope),
            Some(_) => keys.gcra(&scope),
        };
        let invocation = record_invocation(&self.record, [log], &[budget], args.starts, clock);
        let value: Value = invocation
            .invoke_async(conn)
            .await
            .map_err(|e| self.error(&e))?;
        micros_of(&value)
    }
}

/// How long a void mark lives: a reservation still arriving later than
/// this after its caller gave up on it is not looked for. A command is
/// queued at most as long as its connection lives; a minute is far more
/// than a paused or failing-over Redis holds one.
const VOID_MEMORY: Micros = 60_000_000;

impl Store {
    /// Settles a reservation whose answer never came (see `lua/void.lua`):
    /// whatever it logged is removed and its id is marked, so that it
    /// charges nothing should it still arrive. Returns the log entries
    /// removed (0: it had not run, or charged only a bucket).
    pub async fn void<C>(&self, conn: &mut C, void: &Void) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let mut invocation = self.void.prepare_invoke();
        invocation
            .key(self.keys(&void.credential).void(&void.id))
            .arg(VOID_MEMORY);
        for log in &void.logs {
            invocation.key(log);
        }
        for member in &void.members {
            invocation.arg(member);
        }
        let value: Value = invocation
            .invoke_async(conn)
            .await
            .map_err(|e| self.error(&e))?;
        micros_of(&value)
    }
}

/// Slots to give back on one scope and generation: (scope, generation,
/// kind, (order, undo text)).
type RefundGroup<'a> = (&'a str, u64, char, Vec<(Micros, String)>);

/// The algorithm and its two integer parameters, as the scripts take them.
/// GCRA's interval and tolerance are computed exactly as
/// `sluice::limiter::Gcra` does (`ceil(W / N)`, at least 1 µs).
fn limit_args(limit: Option<SharedLimit>) -> (&'static str, Micros, Micros) {
    match limit {
        None => ("n", 0, 0),
        Some(SharedLimit { rate, burst: None }) => {
            ("w", Micros::from(rate.count().get()), micros(rate.window()))
        }
        Some(SharedLimit {
            rate,
            burst: Some(burst),
        }) => {
            let interval = micros(rate.window())
                .div_ceil(Micros::from(rate.count().get()))
                .max(1);
            let tau = interval.saturating_mul(Micros::from(NonZeroU32::get(burst) - 1));
            ("g", interval, tau)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_member_is_never_read_as_a_bucket_undo() {
        let reply = |undo: &str| {
            Value::Array(vec![
                Value::Int(1),
                Value::Int(2),
                Value::Array(vec![]),
                Value::Array(vec![]),
                Value::Int(0),
                Value::Array(vec![
                    Value::Int(5),
                    Value::BulkString(undo.as_bytes().to_vec()),
                ]),
            ])
        };
        let undo_of = |undo: &str| match parse_reserved(reply(undo), "api_key") {
            Ok(Reserved::Granted { slots, .. }) => slots[0].token.undo.clone(),
            other => panic!("{other:?}"),
        };
        // A process id of decimal digits only: still a window member.
        assert_eq!(
            undo_of("1234567890123456:8:1"),
            Undo::Window("1234567890123456:8:1".into())
        );
        assert_eq!(undo_of("ab12:8:1"), Undo::Window("ab12:8:1".into()));
        assert_eq!(
            undo_of("100:250"),
            Undo::Gcra {
                before: 100,
                after: 250
            }
        );
        assert_eq!(undo_of(""), Undo::Nothing);
    }

    #[test]
    fn gcra_arguments_match_the_engine() {
        let limit = SharedLimit {
            rate: "3/1s".parse().unwrap(),
            burst: NonZeroU32::new(4),
        };
        assert_eq!(limit_args(Some(limit)), ("g", 333_334, 1_000_002));
        assert_eq!(limit_args(None), ("n", 0, 0));
    }
}
