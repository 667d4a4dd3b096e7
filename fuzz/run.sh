#!/usr/bin/env bash
# Builds every fuzz target once, then runs each for SECONDS (libFuzzer's
# -max_total_time), on its corpus (fuzz/corpus/TARGET, kept between runs,
# not committed) plus the committed seeds (fuzz/seeds/TARGET) and its
# dictionary (fuzz/TARGET.dict). A crash stops that target, leaves the
# input in fuzz/artifacts/TARGET/, and makes the script exit 1 once every
# target has run.
#
#   fuzz/run.sh 10                    # CI: every target for 10 s
#   fuzz/run.sh 3600 proxy_path       # a longer run of one target
#   SANITIZER=address fuzz/run.sh 60  # with AddressSanitizer (slower build)
#
# The default is no sanitizer: the crates are safe Rust (`unsafe_code =
# "forbid"`), so ASan would only check the standard library and
# dependencies, at the price of a slower build and slower runs.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
sanitizer=${SANITIZER:-none}
# cargo-fuzz needs nightly flags; this lets the stable toolchain take them.
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

start=$(date +%s)
# Debug assertions and overflow checks stay on (cargo-fuzz's default).
cargo fuzz build --sanitizer "$sanitizer"
built=$(date +%s)
echo "== built ${#targets[@]} targets in $((built - start)) s"

failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    corpora=("corpus/$target")
    [ -d "seeds/$target" ] && corpora+=("seeds/$target")
    options=("-max_total_time=$seconds" "-timeout=10" "-rss_limit_mb=2048" "-print_final_stats=1")
    [ -f "$target.dict" ] && options+=("-dict=$target.dict")
    echo "== $target for $seconds s"
    if ! cargo fuzz run --sanitizer "$sanitizer" "$target" "${corpora[@]}" -- "${options[@]}" \
        2> >(grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|thread .* panicked|Test unit written)' -A2 >&2); then
        failed+=("$target")
    fi
done

echo "== done in $(($(date +%s) - start)) s (build $((built - start)) s)"
if [ ${#failed[@]} -gt 0 ]; then
    echo "== crashed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
