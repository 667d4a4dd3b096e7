#!/usr/bin/env bash
# Runs the shared limiter's exactness tests under load (issue 49) RUNS
# times (3 by default, about 2 minutes each): the bounded ones of the
# normal test run and the long soak (`#[ignore]`d there): 16 and 32
# processes on one key, Redis stopped (SIGSTOP) 200 ms at a time, and a
# three-master Cluster with 12 credentials, each with two `yes` loads
# beside. Prints each run's busiest second, by the upstream's arrivals and
# by the engine's own start times. See docs/shared-limiter.md,
# "Exactness under load".
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
cargo test -p sluice-redis --test it --no-run --quiet
for ((i = 1; i <= runs; i++)); do
    echo "== run $i"
    cargo test -p sluice-redis --test it exact:: --quiet -- --include-ignored --nocapture --test-threads 1 2>&1 \
        | grep -E "processes|test result|panicked" || true
done
