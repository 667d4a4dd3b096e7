#!/usr/bin/env bash
# Runs the kill-and-restart test of the shared limiter RUNS times (default
# 20) and prints, for each run, the busiest second over the whole run and
# over the settled outage, then how many runs reached each figure. The test
# asserts the documented bounds; this shows the distribution behind them
# (docs/shared-limiter.md, "Failure modes"). About 17 s a run.
#
#   scripts/outage_runs.sh [RUNS]
set -euo pipefail
runs="${1:-20}"
cd "$(dirname "$0")/.."
cargo test -p sluice-redis --test faults --no-run --quiet
busiest=()
for run in $(seq 1 "$runs"); do
  line=$(cargo test -p sluice-redis --test faults killing -- --nocapture 2>&1 |
    grep -oE 'busiest 1 s: [0-9]+\), busiest 1 s overall [0-9]+' || true)
  if [ -z "$line" ]; then
    echo "run $run: the test failed" >&2
    exit 1
  fi
  outage=$(echo "$line" | grep -oE 'busiest 1 s: [0-9]+' | grep -oE '[0-9]+$')
  overall=$(echo "$line" | grep -oE 'overall [0-9]+' | grep -oE '[0-9]+$')
  echo "run $run: busiest second $overall overall, $outage in the settled outage (limit: 60 per 1.1 s)"
  busiest+=("$overall")
done
echo "busiest second overall, runs per figure:"
printf '%s\n' "${busiest[@]}" | sort -n | uniq -c
