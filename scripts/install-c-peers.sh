#!/bin/sh
# Install the C peers of rcukit-lab's `peers` experiment (cargo feature `c-peers`):
# liburcu (memb and qsbr flavors) and Concurrency Kit (ck_epoch), from Debian's packages.
#
#   sudo scripts/install-c-peers.sh
#   cargo run --release -p rcukit-lab --features c-peers -- peers
#
# Needs root (apt-get). Refreshes the package lists first, since a fresh machine may have none.
set -eu
if [ "$(id -u)" -ne 0 ]; then
    echo "install-c-peers.sh: needs root (apt-get install); run it with sudo" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-c-peers.sh: apt-get not found; install liburcu and Concurrency Kit (ck) development files by hand" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends liburcu-dev libck-dev
echo "install-c-peers.sh: liburcu-dev and libck-dev installed; build with --features c-peers"
