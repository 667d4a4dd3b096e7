#!/usr/bin/env bash
# Runs the kill-and-restart test of the shared limiter RUNS times (default
# 20) and prints, for each run, the busiest second over the whole run and
# over the settled outage, then how many runs reached each figure. The test
# asserts the documented bounds; this shows the distribution behind them
# (docs/shared-limiter.md, "Failure modes"). About 17 s a run.
#
#   scripts/outage_runs.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/repeat_runs.sh

report() {
  local outage
  outage=$(echo "$2" | grep -oE 'busiest 1 s: [0-9]+' | grep -oE '[0-9]+$')
  figure=$(echo "$2" | grep -oE 'overall [0-9]+' | grep -oE '[0-9]+$')
  echo "run $1: busiest second $figure overall, $outage in the settled outage (limit: 60 per 1.1 s)"
}
tally="busiest second overall"
repeat_runs "${1:-20}" faults killing 'busiest 1 s: [0-9]+\), busiest 1 s overall [0-9]+'
