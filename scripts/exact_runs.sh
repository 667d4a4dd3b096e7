#!/usr/bin/env bash
# Runs the shared limiter's exactness tests under load (issue 49) RUNS
# times (3 by default, about 20 s each): 16 processes on one key, and
# Redis stopped (SIGSTOP) 200 ms at a time, each with two `yes` loads
# beside, and prints each run's busiest second, by the upstream's
# arrivals and by the engine's own start times. Not part of CI: see
# docs/shared-limiter.md, "Exactness under load".
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
cargo test -p sluice-redis --test it --no-run --quiet
for ((i = 1; i <= runs; i++)); do
    echo "== run $i"
    SLUICE_LONG=1 cargo test -p sluice-redis --test it exact:: --quiet -- --nocapture --test-threads 1 2>&1 \
        | grep -E "processes|test result|panicked" || true
done
