//! `shared = true` in `sluice mcp`: the credential's budget lives in Redis,
//! connected exactly as the sidecar connects it, so that proxies and
//! sidecars on one key spend one budget.

use std::sync::Arc;

use sluice_config::McpConfig;
use sluice_redis::RedisBudget;

use crate::error::McpError;

/// The Redis backend for the proxy's gate, when a credential is
/// `shared = true`; `None` otherwise. Redis being down is not an error:
/// the backend starts in fallback (each process its `fallback_share`) and
/// recovers by itself.
pub(crate) async fn budget(config: &McpConfig) -> Result<Option<Arc<RedisBudget>>, McpError> {
    let any_shared = config.gate.credentials.values().any(|c| c.shared);
    let Some(settings) = config.shared.as_ref().filter(|_| any_shared) else {
        return Ok(None);
    };
    // The sidecar's own reading of `[shared]`: one code path for both.
    let redis = sluice_http::redis_config(settings);
    Ok(Some(Arc::new(RedisBudget::connect(redis).await?)))
}
