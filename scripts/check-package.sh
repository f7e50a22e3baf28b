#!/usr/bin/env bash
# The crate as crates.io would serve it: package `rcukit`, unpack the `.crate` outside the
# workspace and run its doctests there (the crate README, the crate documentation and every
# item's examples), so that nothing the documentation needs lives outside the package. Also
# checks that the package carries its README and both license texts.
#
#   scripts/check-package.sh
#
# The workspace's target directory is reused (CARGO_TARGET_DIR), so the dependencies the
# workspace already built are not built again; only the unpacked crate is.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' crates/rcukit/Cargo.toml | head -n 1)
# --allow-dirty: this checks what the package holds, committed or not (CI runs on a clean
# clone anyway); --no-verify: the doctests below build the unpacked crate themselves.
cargo package -p rcukit --allow-dirty --no-verify --quiet
crate=$target/package/rcukit-$version.crate

unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
tar -xzf "$crate" -C "$unpacked"
dir=$unpacked/rcukit-$version

for file in README.md LICENSE-MIT LICENSE-APACHE Cargo.lock; do
    if [ ! -s "$dir/$file" ]; then
        echo "scripts/check-package.sh: the package lacks $file" >&2
        exit 1
    fi
done

# --locked: the package's Cargo.lock, as a user building from crates.io would get it.
(cd "$dir" && CARGO_TARGET_DIR="$target" cargo test --doc --locked --quiet)
echo "scripts/check-package.sh: rcukit-$version packages, and its doctests pass from the package"
