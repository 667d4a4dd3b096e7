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
cd "$(dirname "$0")/.."
source scripts/repeat_runs.sh

report() {
  echo "run $1: $2"
  figure=$(echo "$2" | grep -oE '^busiest 1 s [0-9]+' | grep -oE '[0-9]+$')
}
tally="busiest second"
repeat_runs "${1:-20}" failover "" 'busiest 1 s [0-9]+ from [0-9]+ ms: \[[^]]*\]'
