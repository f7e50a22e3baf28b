#!/usr/bin/env bash
# Flaky tests: a test that fails once in dozens of runs, or only on a busy machine, seldom
# shows in one CI run. This runs the test binaries that CI runs again and again, one after the
# other, beside busy loops that keep every core taken, and keeps the output of each failure.
#
#   scripts/flake-hunt.sh [SECONDS] [BUSY_LOOPS]
#
# SECONDS (default 1800) bounds the hunt; BUSY_LOOPS (default: one more than the cores) are
# `while :; do :; done` shells. The binaries: every test binary of `cargo test --workspace`
# (debug, as the README's test command builds them), the library's tests in a release build
# and the `rcukit_small` build's (as `.ci/run` builds them), round after round. The
# compile-fail tests are left out: trybuild needs to run under cargo. Failures go to
# target/flake-hunt/ (one file per failure, named after the binary and the round), with a
# summary line per round; the script exits 1 if any binary failed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-1800}
loops=${2:-$(($(nproc) + 1))}
out=target/flake-hunt
rm -rf "$out"
mkdir -p "$out"

# The executables of the test targets a cargo command builds (`--no-run`), one per line.
test_binaries() {
    "$@" --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m["profile"]["test"]:
        if "compile_fail" not in exe:
            print(exe)'
}

echo "building the test binaries..." >&2
{
    test_binaries cargo test --workspace
    test_binaries cargo test --release -p rcukit
    RUSTFLAGS="--cfg rcukit_small" CARGO_TARGET_DIR=target/small test_binaries \
        cargo test --release -p rcukit --test stress --test hostile --test callbacks \
        --test owned --test cell --test list
} | sort -u >"$out/binaries.txt"
echo "$(wc -l <"$out/binaries.txt") binaries; ${seconds} s beside ${loops} busy loops" >&2

busy=()
for _ in $(seq "$loops"); do
    bash -c 'while :; do :; done' &
    busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT

end=$(($(date +%s) + seconds))
round=0
failures=0
while [ "$(date +%s)" -lt "$end" ]; do
    round=$((round + 1))
    while read -r binary; do
        [ "$(date +%s)" -lt "$end" ] || break
        if ! timeout 900 "$binary" -q >"$out/last.txt" 2>&1; then
            failures=$((failures + 1))
            cp "$out/last.txt" "$out/failed-$(basename "$binary")-round-$round.txt"
            echo "round $round: FAILED $binary" | tee -a "$out/summary.txt" >&2
        fi
    done <"$out/binaries.txt"
    echo "round $round done at $(date +%T), $failures failures so far" |
        tee -a "$out/summary.txt" >&2
done
rm -f "$out/last.txt"
echo "$failures failures in $round rounds; see $out/" >&2
[ "$failures" -eq 0 ]
