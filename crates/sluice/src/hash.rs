//! The hasher of the engine's maps keyed by short names (credentials, tools,
//! scopes, a turn's reads).
//!
//! std's SipHash-1-3 costs tens of nanoseconds on a ten-byte key, and every
//! call hashes several. foldhash is a few times cheaper on keys that short
//! and is seeded per process at random, so a server that names scopes in
//! its headers cannot pick names that collide on purpose.

use std::collections::HashMap;

/// The random per-process seed of foldhash's fast variant.
pub(crate) type BuildFastHasher = foldhash::fast::RandomState;

/// A `HashMap` with the fast hasher.
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildFastHasher>;
