#!/usr/bin/env bash
# Runs the Redis Cluster failover test of the shared limiter RUNS times
# (default 20) and prints, for each run, the busiest second with where it
# began and which process started its calls in which mode, then how many
# runs reached each figure. The test asserts the bound (60 at R = 40,
# P = 2); this shows the distribution behind it (docs/PERFORMANCE.md,
# "Fourth session of 2026-12-06"). About 18 s a run.
#
#   scripts/failover_runs.sh [RUNS]
set -euo pipefail
runs="${1:-20}"
cd "$(dirname "$0")/.."
cargo test -p sluice-redis --test failover --no-run --quiet
busiest=()
for run in $(seq 1 "$runs"); do
  line=$(cargo test -p sluice-redis --test failover -- --nocapture 2>&1 |
    grep -oE 'busiest 1 s [0-9]+ from [0-9]+ ms: \[[^]]*\]' || true)
  if [ -z "$line" ]; then
    echo "run $run: the test failed" >&2
    exit 1
  fi
  echo "run $run: $line"
  busiest+=("$(echo "$line" | grep -oE '^busiest 1 s [0-9]+' | grep -oE '[0-9]+$')")
done
echo "busiest second, runs per figure:"
printf '%s\n' "${busiest[@]}" | sort -n | uniq -c
