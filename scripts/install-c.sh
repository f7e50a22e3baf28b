#!/bin/sh
# Build and install rcukit's two C libraries:
#
#   * librcukit (crates/rcukit-c): rcukit's native C API, with include/rcukit/rcukit.h and
#     lib/pkgconfig/rcukit.pc;
#   * liburcu-rcukit (crates/rcukit-urcu): liburcu's function ABI (memb and qsbr flavors),
#     installed in lib/rcukit-urcu/ under liburcu's own file names, so that
#     `LD_LIBRARY_PATH=PREFIX/lib/rcukit-urcu ./program` runs an unmodified liburcu program
#     on rcukit (and lib/pkgconfig/liburcu-rcukit.pc, to relink against it).
#
# Usage:
#   scripts/install-c.sh [--prefix DIR] [--profile release|debug] [--from DIR]
#
#   --prefix DIR   where to install (default /usr/local)
#   --profile P    cargo profile to build (default release)
#   --from DIR     do not build: install the libraries found in DIR, a cargo output
#                  directory such as target/release (the test suites stage their libraries so)
#
# The layout follows cargo-c's conventions: PREFIX/include/rcukit/rcukit.h,
# PREFIX/lib/librcukit.so.VERSION with the SONAME librcukit.so.0 and the usual symlinks,
# PREFIX/lib/librcukit.a, PREFIX/lib/pkgconfig/rcukit.pc.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
profile=release
from=

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --from) from=$2; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install-c.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$from" ]; then
    case "$profile" in
        release) cargo_profile=release; out=release ;;
        debug|dev) cargo_profile=dev; out=debug ;;
        *) echo "install-c.sh: unknown profile '$profile' (release or debug)" >&2; exit 2 ;;
    esac
    (cd "$root" && cargo build --quiet --profile "$cargo_profile" -p rcukit-c -p rcukit-urcu)
    target=${CARGO_TARGET_DIR:-$root/target}
    from=$target/$out
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/crates/rcukit-c/Cargo.toml" | head -n 1)
major=0
# Built by cargo: both libraries; given with --from, whichever of them DIR holds.
native=no
urcu=no
[ -f "$from/librcukit_c.so" ] && [ -f "$from/librcukit_c.a" ] && native=yes
[ -f "$from/liburcu_rcukit.so" ] && urcu=yes
if [ "$native" = no ] && [ "$urcu" = no ]; then
    echo "install-c.sh: no library in $from (build with: cargo build --release -p rcukit-c -p rcukit-urcu)" >&2
    exit 1
fi

libdir=$prefix/lib
urcudir=$libdir/rcukit-urcu
mkdir -p "$libdir/pkgconfig"

if [ "$native" = yes ]; then
    # The native API.
    mkdir -p "$prefix/include/rcukit"
    install -m 644 "$root/crates/rcukit-c/include/rcukit/rcukit.h" "$prefix/include/rcukit/rcukit.h"
    install -m 755 "$from/librcukit_c.so" "$libdir/librcukit.so.$version"
    ln -sf "librcukit.so.$version" "$libdir/librcukit.so.$major"
    ln -sf "librcukit.so.$major" "$libdir/librcukit.so"
    install -m 644 "$from/librcukit_c.a" "$libdir/librcukit.a"
    cat > "$libdir/pkgconfig/rcukit.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: rcukit
Description: Read-copy-update with kernel-grade grace periods (C API)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lrcukit
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
PC
    echo "install-c.sh: installed librcukit $version into $prefix"
fi

if [ "$urcu" = yes ]; then
    # liburcu's function ABI, under liburcu's file names in a directory of its own (it must
    # not shadow the system's liburcu unless asked to, with LD_LIBRARY_PATH or -L).
    mkdir -p "$urcudir"
    install -m 755 "$from/liburcu_rcukit.so" "$urcudir/liburcu-rcukit.so.8"
    for name in liburcu-rcukit liburcu-memb liburcu-qsbr liburcu; do
        [ "$name" = liburcu-rcukit ] || ln -sf liburcu-rcukit.so.8 "$urcudir/$name.so.8"
        ln -sf liburcu-rcukit.so.8 "$urcudir/$name.so"
    done
    cat > "$libdir/pkgconfig/liburcu-rcukit.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib/rcukit-urcu

Name: liburcu-rcukit
Description: liburcu's memb and qsbr function ABI on rcukit (use liburcu's headers, without _LGPL_SOURCE)
Version: $version
Libs: -L\${libdir} -lurcu-rcukit -Wl,-rpath,\${libdir}
PC
    echo "install-c.sh: installed liburcu-rcukit $version into $urcudir"
fi
