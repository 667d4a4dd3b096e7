//! The label sets of the sidecar's metrics, and the buckets of its
//! histograms of seconds.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CallLabels {
    pub(super) credential: String,
    pub(super) tool: String,
    pub(super) outcome: String,
    pub(super) reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ToolLabels {
    pub(super) credential: String,
    pub(super) tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpstreamLabels {
    pub(super) credential: String,
    pub(super) status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CredentialLabels {
    pub(super) credential: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WaitLabels {
    pub(super) credential: String,
    pub(super) kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ScopeLabels {
    pub(super) credential: String,
    pub(super) scope: String,
}

/// One window of a scope: requests, or a unit's.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WindowLabels {
    pub(super) credential: String,
    pub(super) scope: String,
    pub(super) unit: String,
    pub(super) window: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ModeLabels {
    pub(super) credential: String,
    pub(super) mode: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ShadowLabels {
    pub(super) credential: String,
    pub(super) scope: String,
    pub(super) decision: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabels {
    pub(super) kind: String,
}

pub(super) type SecondsHistograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// 1 ms to about 33 s, doubling: rate waits, backoffs and API latencies.
pub(super) fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}
