#!/usr/bin/env bash
# Runs every benchmark and regenerates BENCHMARKS.md from what they print.
#   scripts/bench.sh            # about 28 minutes on 2 cores
# Needs redis-server and nginx on PATH (apt-get install redis-server nginx-light).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-results
mkdir -p "$out"

step() { printf '\n== %s\n' "$*" >&2; }

step "build (release)"
cargo build --release -p sluice-cli --quiet
bin=target/release/sluice

step "micro: limiter cells next to governor"
cargo bench -p sluice --bench limiter -- --warm-up-time 1 --measurement-time 3 2>/dev/null | tee "$out/limiter.txt" >&2

step "micro: a whole gate call, 1,000,000 keyed scopes"
cargo bench -p sluice-bench --bench gate -- --warm-up-time 1 --measurement-time 3 2>/dev/null | tee "$out/gate.txt" >&2
cargo bench -p sluice-bench --bench keyed_ratio 2>/dev/null | tee -a "$out/gate.txt" >&2

step "micro: bytes an idle scope keeps (a counting allocator, 1,000,000 scopes)"
cargo bench -p sluice-bench --bench memory 2>/dev/null | tee "$out/memory.txt" >&2

step "micro: bytes one call allocates (a counting allocator)"
cargo bench -p sluice-bench --bench allocations 2>/dev/null | tee "$out/allocations.txt" >&2
cargo bench -p sluice-bench --bench future_size 2>/dev/null | tee -a "$out/allocations.txt" >&2

step "scenarios: every strategy on every scenario"
"$bin" bench scenarios --json > "$out/scenarios.json"

step "sidecar overhead, next to nginx"
"$bin" bench overhead --json > "$out/overhead.json"
step "sidecar overhead, every answer carrying GitHub's rate-limit fields"
"$bin" bench overhead --upstream-headers github --json > "$out/overhead-github.json"

step "sluice mcp --listen next to the MCP server directly"
"$bin" bench mcp --json > "$out/mcp.json"

step "shared limiter on Redis"
"$bin" bench shared --json > "$out/shared.json"
step "shared limiter: the scale curve (1-32 processes, 1 and 3 Cluster masters)"
"$bin" bench scale --json --chart docs/scale.svg > "$out/scale.json"

step "python: sluice against aiolimiter and pyrate-limiter (a release build of python/)"
python3 -m pip install --quiet --disable-pip-version-check -r python/requirements-test.txt
python3 -m pip install --quiet --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./python
python3 python/bench/compare.py --json > "$out/python.json"

step "render BENCHMARKS.md"
python3 scripts/render_benchmarks.py "$out" > BENCHMARKS.md
echo "BENCHMARKS.md regenerated" >&2
