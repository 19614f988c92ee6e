#!/usr/bin/env bash
# Build htsim_uec, the UEC packet-level simulator of the Ultra Ethernet transport working group,
# at a pinned commit and outside this repository.
#
#   bash bench/fidelity/build_htsim.sh [WORKDIR] [SOURCE]
#
# WORKDIR  where src/, build/ and the logs go (default: $HTSIM_BUILD, else htsim_build/ beside
#          this repository)
# SOURCE   a git directory that holds the commit (a bare mirror or a clone); without it the
#          public repository is cloned (needs network)
#
# The test suite stays off (it fetches googletest from the network). Everything runs under
# `nice -n 19` with two jobs. Prints the binary's path last.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
WORKDIR="${1:-${HTSIM_BUILD:-$(dirname "$REPO")/htsim_build}}"
SOURCE="${2:-}"
COMMIT=40ccb0526bb6297eeb22ab33f9934fb35278dbaf
URL=https://github.com/ultraethernet/uet-htsim
JOBS="${JOBS:-2}"

mkdir -p "$WORKDIR"
if [ -z "$SOURCE" ]; then
    SOURCE="$WORKDIR/clone.git"
    [ -d "$SOURCE" ] || git clone --quiet --bare "$URL" "$SOURCE"
fi
if ! git --git-dir="$SOURCE" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    echo "commit $COMMIT is not in $SOURCE" >&2
    exit 1
fi

# a clean source tree of exactly that commit
rm -rf "$WORKDIR/src"
mkdir -p "$WORKDIR/src"
git --git-dir="$SOURCE" archive "$COMMIT" | tar -x -C "$WORKDIR/src"
echo "$COMMIT" > "$WORKDIR/src/COMMIT"
# one addition, inert unless HTSIM_ROUTES is set: print the path every ECMP flow was hashed to
# (run_htsim.sh keeps them in routes/, compare.py runs fabricjax's ECMP on the same paths)
patch -s -p1 -d "$WORKDIR/src" < "$REPO/bench/fidelity/htsim_route_dump.patch"
# and one more, inert unless HTSIM_BITMAP_STATS is set: the bitmap walk's totals at exit
patch -s -p1 -d "$WORKDIR/src" < "$REPO/bench/fidelity/htsim_bitmap_stats.patch"
# and a third, inert unless HTSIM_TRIM_STATS, HTSIM_FLOW_STATS or HTSIM_REPS_STATS is set: where
# and when packets are trimmed, each flow's resends, timeouts, NACKs and ACKs, REPS's EV sources
patch -s -p1 -d "$WORKDIR/src" < "$REPO/bench/fidelity/htsim_transport_stats.patch"
# and a fourth, inert unless HTSIM_ONE_TURN is set: a flow whose retransmission timer fires
# while it already waits in its NIC's FIFO is not queued there again (HTSIM.md, "One turn")
patch -s -p1 -d "$WORKDIR/src" < "$REPO/bench/fidelity/htsim_one_turn.patch"

nice -n 19 cmake -S "$WORKDIR/src/htsim/sim" -B "$WORKDIR/build" \
    -DCMAKE_BUILD_TYPE=Release -DENABLE_TESTS=OFF > "$WORKDIR/cmake.log" 2>&1
nice -n 19 make -C "$WORKDIR/build" -j"$JOBS" htsim_uec > "$WORKDIR/make.log" 2>&1

BIN="$WORKDIR/build/datacenter/htsim_uec"
[ -x "$BIN" ] || { echo "no binary at $BIN (see $WORKDIR/make.log)" >&2; exit 1; }
echo "$BIN"
