#!/usr/bin/env bash
# AddressSanitizer runs: a premature free (a grace period or a barrier that ends too early, a
# callback run twice) is a use-after-free or double free that ASan reports and aborts on.
#
# Needs a nightly toolchain with rust-src (`rustup toolchain install nightly` and
# `rustup +nightly component add rust-src`); nothing else in the project does.
#
#   scripts/asan.sh            the stress, hostile, callback, container, owned-section and fork
#                              tests (the containers' fork tests too), then 60 s of torture per
#                              fence mode, of qsbr (both modes), of each map (RcuHashMap,
#                              RcuFlatMap) per fence mode, and of RcuFlatMap on a QSBR domain
#                              (both modes) (about 20 minutes on 2 cores)
#   TORTURE=5m scripts/asan.sh longer torture runs
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "scripts/asan.sh: needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 2
fi
if ! rustup +nightly component list --installed 2>/dev/null | grep -q '^rust-src'; then
    echo "scripts/asan.sh: needs rust-src: rustup +nightly component add rust-src" >&2
    exit 2
fi
target=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Zsanitizer=address"
export RUSTDOCFLAGS="-Zsanitizer=address"
export CARGO_TARGET_DIR=target/asan
# The global domain's threads and callbacks abandoned by fork() are never freed by design:
# leak reports would be noise. Everything else ASan checks stays on.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
run() { echo "+ $*" >&2; "$@"; }
run cargo +nightly test -Zbuild-std --target "$target" -p rcukit \
    --test stress --test hostile --test callbacks --test cell --test list --test map --test owned \
    --test flat_map --test flat_map_owned --test fork --test fork_containers
for fence in membarrier seqcst; do
    run cargo +nightly run -Zbuild-std --target "$target" --release -p rcukit-torture -- \
        --duration "${TORTURE:-60s}" --fence "$fence"
done
run cargo +nightly run -Zbuild-std --target "$target" --release -p rcukit-torture -- \
    --duration "${TORTURE:-60s}" --flavor qsbr
run cargo +nightly run -Zbuild-std --target "$target" --release -p rcukit-torture -- \
    --duration "${TORTURE:-60s}" --flavor qsbr-fenced
for flavor in qsbr-flat-map qsbr-fenced-flat-map; do
    run cargo +nightly run -Zbuild-std --target "$target" --release -p rcukit-torture -- \
        --duration "${TORTURE:-60s}" --flavor "$flavor"
done
for flavor in map flat-map; do
    for fence in membarrier seqcst; do
        run cargo +nightly run -Zbuild-std --target "$target" --release -p rcukit-torture -- \
            --duration "${TORTURE:-60s}" --flavor "$flavor" --fence "$fence"
    done
done
echo "scripts/asan.sh: no error found by AddressSanitizer"
