# Sourced by outage_runs.sh and failover_runs.sh: the loop both share.
#
#   repeat_runs RUNS TEST FILTER PATTERN
#
# Builds sluice-redis's tests once, runs the module TEST of its one test
# binary RUNS times (FILTER, which may be empty, is the start of the names
# of the tests it picks there) and, for each run, calls `report RUN
# LINE` with the text PATTERN matched in its output; `report` prints the
# run's line and sets `figure` to the number it tallies. Stops at a run
# that did not print PATTERN (the test failed), else prints how many runs
# reached each figure under the heading `tally`.
repeat_runs() {
  local runs=$1 test=$2 filter=$3 pattern=$4 line run
  local figures=()
  cargo test -p sluice-redis --test it --no-run --quiet
  for run in $(seq 1 "$runs"); do
    line=$(cargo test -p sluice-redis --test it -- "$test::$filter" --nocapture 2>&1 |
      grep -oE "$pattern" || true)
    if [ -z "$line" ]; then
      echo "run $run: the test failed" >&2
      exit 1
    fi
    report "$run" "$line"
    figures+=("$figure")
  done
  echo "$tally, runs per figure:"
  printf '%s\n' "${figures[@]}" | sort -n | uniq -c
}
